use super::*;
use crate::conversation::commands::{parse, Command};

const CONVERSATION_SUBCOMMANDS: [&str; 12] = [
    "help", "new", "list", "info", "switch", "prev", "next", "rename", "delete", "find", "search",
    "handoff",
];
const SYSTEM_SUBCOMMANDS: [&str; 9] = [
    "help", "history", "session", "config", "trace", "clear", "exit", "meter", "model",
];
const CONFIG_SUBCOMMANDS: [&str; 2] = ["show", "agents"];
const SESSION_SUBCOMMANDS: [&str; 1] = ["info"];
const METER_SUBCOMMANDS: [&str; 2] = ["show", "reset"];
const DISPATCHER_SUBCOMMANDS: [&str; 3] = ["request", "translate", "explain"];

/// Completion with only the built-in agents.
fn complete_now(input: &str, direction: Direction) -> Value {
    let view = CompletionView {
        clients: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(command_completion(view, Some(input.to_string()), direction))
}

fn forward(input: &str) -> Value {
    complete_now(input, Direction::Forward)
}

/// (name, completions, separatorMode) of each group.
fn groups(result: &Value) -> Vec<(String, Vec<String>, Option<String>)> {
    result["completions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_string(),
                g["completions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_string())
                    .collect(),
                g["separatorMode"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn top_level_offers_commands_and_agent_names() {
    let top = strings(&["conversation", "help", "compact", "explain", "translate"]);
    let agents = strings(&["dispatcher", "system"]);
    let optional = Some("optionalSpace".to_string());
    for input in ["@", "@com", "@unknownagent ", "  @"] {
        let r = forward(input);
        assert_eq!(
            r["startIndex"],
            input.len() - input.trim_start().len() + 1,
            "{input}"
        );
        assert_eq!(
            groups(&r),
            [
                ("Subcommands".into(), top.clone(), optional.clone()),
                ("Agent Names".into(), agents.clone(), optional.clone())
            ],
            "{input}"
        );
        assert_eq!(r["closedSet"], true);
        assert_eq!(r["directionSensitive"], false);
        assert_eq!(r["afterWildcard"], "none");
    }
}

#[test]
fn sub_command_groups_attach_after_the_family() {
    let conversation = strings(&CONVERSATION_SUBCOMMANDS);
    for (input, start, subs) in [
        ("@conversation", 13, conversation.clone()),
        ("@conversation ", 14, conversation.clone()),
        ("@conversation s", 14, conversation.clone()),
        ("@system", 7, strings(&SYSTEM_SUBCOMMANDS)),
        ("@system h", 8, strings(&SYSTEM_SUBCOMMANDS)),
        ("@system config a", 15, strings(&CONFIG_SUBCOMMANDS)),
        ("@system session ", 16, strings(&SESSION_SUBCOMMANDS)),
        ("@system meter r", 14, strings(&METER_SUBCOMMANDS)),
        ("@dispatcher re", 12, strings(&DISPATCHER_SUBCOMMANDS)),
    ] {
        let r = forward(input);
        assert_eq!(r["startIndex"], start, "{input}");
        assert_eq!(
            groups(&r),
            [("Subcommands".into(), subs, Some("optionalSpace".into()))],
            "{input}"
        );
        assert_eq!(r["closedSet"], true, "{input}");
    }
}

#[test]
fn leaves_parameters_and_plain_text() {
    // A leaf without parameters: nothing follows, a closed set.
    let r = forward("@system config agents");
    assert_eq!(
        (r["startIndex"].clone(), r["closedSet"].clone()),
        (json!(21), json!(true))
    );
    assert_eq!(groups(&r), []);
    // Backspacing onto it offers its siblings at its start.
    let r = complete_now("@system config agents", Direction::Backward);
    assert_eq!(r["startIndex"], 15);
    assert_eq!(r["directionSensitive"], true);
    assert_eq!(groups(&r)[0].1, strings(&CONFIG_SUBCOMMANDS));
    // A free-form parameter: an open set, nothing to offer.
    let r = forward("@explain what is");
    assert_eq!(
        (r["startIndex"].clone(), r["closedSet"].clone()),
        (json!(9), json!(false))
    );
    assert_eq!(groups(&r), []);
    // Empty input: the command prefix, from the start.
    let r = forward("");
    assert_eq!(r["startIndex"], 0);
    assert_eq!(
        groups(&r),
        [(
            "Command Prefixes".into(),
            strings(&["@"]),
            Some("optionalSpace".into())
        )]
    );
    assert_eq!(r["closedSet"], false);
    assert_eq!(forward("  ")["startIndex"], 2);
    assert_eq!(forward("hello")["startIndex"], 0);
    // Not a string: the empty result.
    let view = CompletionView {
        clients: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(command_completion(view, None, Direction::Forward)),
        empty_result()
    );
}

#[test]
fn wrapped_commands_complete_in_place() {
    let r = forward("@dispatcher request @sys");
    assert_eq!(r["startIndex"], 21);
    assert!(groups(&r).iter().any(|g| g.0 == "Agent Names"));
    let r = forward("@dispatcher request @system con");
    assert_eq!(r["startIndex"], 28);
    assert_eq!(groups(&r)[0].1, strings(&SYSTEM_SUBCOMMANDS));
    let r = forward("@dispatcher request hello");
    assert_eq!(groups(&r), []);
    // Nesting stops at MAX_NESTING.
    let deep = "@dispatcher request ".repeat(MAX_NESTING + 1) + "@sys";
    assert_eq!(groups(&forward(&deep)), []);
    let deep = "@dispatcher request ".repeat(MAX_NESTING) + "@sys";
    assert_ne!(groups(&forward(&deep)), []);
}

#[test]
fn positions_are_utf16() {
    // U+3000 (ideographic space) is 3 bytes and 1 UTF-16 unit.
    assert_eq!(forward("\u{3000}@")["startIndex"], 2);
    // A wrapped command's position (matchedPrefixLength) is converted back too.
    assert_eq!(forward("@dispatcher request @\u{3000}")["startIndex"], 22);
}

/// Every path of the tables is a command the parser knows (neither `Unknown` nor
/// `Unsupported`): completion offers only what runs.
#[test]
fn every_completed_command_runs() {
    fn walk(prefix: &str, d: &Descriptors, out: &mut Vec<String>) {
        match d {
            Descriptors::Command(_) => out.push(prefix.to_string()),
            Descriptors::Table(t) => {
                out.push(prefix.to_string());
                for (name, sub) in &t.commands {
                    walk(&format!("{prefix} {name}"), sub, out);
                }
            }
        }
    }
    let mut all = Vec::new();
    for (name, sub) in &ROOT.commands {
        walk(&format!("@{name}"), sub, &mut all);
    }
    walk("@system", &SYSTEM, &mut all);
    walk("@dispatcher", &DISPATCHER, &mut all);
    for command in all {
        let parsed = parse(&command).unwrap();
        assert!(
            !matches!(parsed, Command::Unknown(_) | Command::Unsupported(_)),
            "{command}: {parsed:?}"
        );
    }
}
