use super::*;

/// Every path completion offers parses to a command Roundtable runs (neither `Unknown`
/// nor `Unsupported`), and names itself as its display path.
#[test]
fn every_offered_path_parses_and_names_itself() {
    fn walk(words: Vec<&'static str>, spec: &'static Spec, out: &mut Vec<Vec<&'static str>>) {
        out.push(words.clone());
        for sub in spec.offered() {
            let mut next = words.clone();
            next.push(sub.name);
            walk(next, sub, out);
        }
    }
    let mut all = Vec::new();
    for spec in &ROOT {
        walk(vec![spec.name], spec, &mut all);
    }
    assert!(all.len() > 30, "{all:?}");
    for words in all {
        let text = format!("@{}", words.join(" "));
        let parsed = parse(&text).unwrap();
        assert!(
            !matches!(parsed, Command::Unknown(_) | Command::Unsupported(_)),
            "{text}: {parsed:?}"
        );
        let (agent, path) = display_info(&text).unwrap_or(("", Vec::new()));
        if words.len() > 1 || !matches!(words[0], "system" | "dispatcher") {
            let expected: Vec<_> = if agent == "system" && words[0] != "system" {
                words.iter().map(|w| w.to_string()).collect()
            } else {
                words[1..].iter().map(|w| w.to_string()).collect()
            };
            assert_eq!(path, expected, "{text}");
        }
    }
}

#[test]
fn display_info_names_the_agent_and_command_words() {
    let info = |t: &str| display_info(t);
    let words = |a: &'static str, w: &[&str]| Some((a, w.iter().map(|s| s.to_string()).collect()));
    assert_eq!(info("what is 2+3"), words("dispatcher", &["request"]));
    assert_eq!(
        info("@dispatcher request hi"),
        words("dispatcher", &["request"])
    );
    assert_eq!(info("  @help"), words("system", &["help"]));
    assert_eq!(info("@system help"), words("system", &["help"]));
    assert_eq!(
        info("@system config agents"),
        words("system", &["config", "agents"])
    );
    assert_eq!(info("@system trace a=debug"), words("system", &["trace"]));
    assert_eq!(
        info("@system meter reset"),
        words("system", &["meter", "reset"])
    );
    assert_eq!(
        info("@conversation list"),
        words("system", &["conversation", "list"])
    );
    assert_eq!(info("@conversation"), words("system", &["conversation"]));
    assert_eq!(
        info("@conv list"),
        words("system", &["conversation", "list"]),
        "the alias names its command"
    );
    assert_eq!(info("@explain x"), words("system", &["explain"]));
    assert_eq!(info("@nope"), None);
    assert_eq!(info("@system nope"), None);
    assert_eq!(info("@dispatcher"), None);
}

fn system(text: &str) -> Command {
    parse(text).expect("an @ command")
}

#[test]
fn parses_what_the_typeagent_cli_sends() {
    use SystemCommand::*;
    let ok = |c: SystemCommand| Command::System(c);
    assert_eq!(system("@system help"), ok(Help));
    assert_eq!(system("@system"), ok(Help));
    assert_eq!(system("@system history"), ok(History(DEFAULT_HISTORY)));
    assert_eq!(system("@system history 5"), ok(History(5)));
    assert_eq!(
        system("@system history five"),
        Command::Invalid("@system history: N must be a whole number above 0, got \"five\"".into())
    );
    assert!(matches!(system("@system history 0"), Command::Invalid(_)));
    assert_eq!(system("@system session"), ok(Session));
    assert_eq!(system("@system session info"), ok(Session));
    assert_eq!(
        system("@system session list"),
        Command::Unsupported("system session list".into())
    );
    assert_eq!(system("@system config"), ok(Config));
    assert_eq!(system("@system config show"), ok(Config));
    assert_eq!(system("@system config agents"), ok(Agents));
    assert_eq!(system("@system trace"), ok(Trace(None)));
    assert_eq!(
        system("@system trace roundtable=debug  actix=warn"),
        ok(Trace(Some("roundtable=debug,actix=warn".into())))
    );
    assert_eq!(
        system("@system shell x"),
        Command::Unsupported("system shell".into())
    );
    assert_eq!(system("@system meter"), ok(Meter(false)));
    assert_eq!(system("@system meter show"), ok(Meter(false)));
    assert_eq!(system("@system meter  reset "), ok(Meter(true)));
    assert_eq!(
        system("@system meter zero"),
        Command::Invalid("@system meter: give show or reset, got \"zero\"".into())
    );
}

#[test]
fn the_tables_offer_what_typeagent_clients_complete() {
    let names = |d: &Descriptors| match d {
        Descriptors::Table(t) => t.commands.iter().map(|(n, _)| n.clone()).collect(),
        Descriptors::Command(_) => Vec::<String>::new(),
    };
    let root = root_table();
    let top: Vec<_> = root.commands.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        top,
        ["conversation", "help", "compact", "explain", "translate"]
    );
    assert_eq!(
        names(&root.commands[0].1),
        [
            "help", "new", "list", "info", "switch", "prev", "next", "rename", "delete", "find",
            "search", "handoff"
        ]
    );
    let agents = agent_descriptors();
    assert_eq!(
        agents.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["dispatcher", "system"]
    );
    assert_eq!(names(&agents[0].1), ["request", "translate", "explain"]);
    assert_eq!(
        names(&agents[1].1),
        ["help", "history", "session", "config", "trace", "clear", "exit", "meter", "model"]
    );
}

#[test]
fn help_lists_every_command_once_with_its_usage() {
    let help = help_text();
    for line in [
        "- `@conversation <sub>`: manage conversations; subcommands:\n",
        "  - `prev / next`: cycle through conversations\n",
        "- `@help`: this list\n",
        "- `@explain <request>`: how the request would be handled, without running it\n",
        "- `@dispatcher <sub> <request>`: what `agent-cli run` sends; subcommands:\n",
        "  - `request <request>`: run it, as if typed bare\n",
        "- `@system <sub>`: about this conversation and server; subcommands:\n",
        "  - `session [info]`: this conversation: id, name, directory, clients, provider, \
         context used\n",
        "  - `config agents`: the agents and tools this conversation can use\n",
        "  - `meter [show | reset]`: how much of the model's context this conversation \
         uses; reset starts it over\n",
    ] {
        assert_eq!(help.matches(line).count(), 1, "{line:?} in\n{help}");
    }
    assert!(!help.contains("- `next`"), "prev and next share a line");
    assert!(
        !help.contains("\n    "),
        "a nested family's sub-commands are listed one level deep:\n{help}"
    );
    assert_eq!(
        parse("@conv list"),
        Some(Command::Conversation(json!({"subcommand": "list"}))),
        "the alias parses as its command"
    );
    assert_eq!(
        help.matches("this list").count(),
        2,
        "@help and @system help"
    );
}
