//! The built-in `@` commands, declared once: one tree of [`Spec`]s says each command's name
//! (and alias), its place, the sub-command an empty one means, its line in the help, the
//! parameters completion offers, and the function that turns its arguments into a
//! [`Command`]. Everything else reads it:
//! - parsing ([`parse`]) walks the words of a request down the tree;
//! - `@help` and `@system help` ([`help_text`]) are written from the help lines;
//! - completion (`completion.rs`) builds TypeAgent's descriptor tables from it ([`root_table`],
//!   [`agent_descriptors`]);
//! - a request's `setDisplayInfo` names the path it resolves to ([`display_info`]).
//!
//! What the commands do is not here: `commands.rs` (`@conversation`, `@help`, …) and
//! `system.rs` (`@system …`) hold the argument parsers the leaves point to and run the parsed
//! [`Command`]s. Pure: no I/O, no actor.

use serde_json::json;

use crate::agent::client_agent::command::{
    ArgDefinition, CommandDescriptor, DefaultSubCommand, DescriptorTable, Descriptors,
    ParameterDefinitions, ValueType,
};
use serde_json::Value;

/// A parsed `@` command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `@conversation …`: the `manage-conversation` payload for the client.
    Conversation(Value),
    /// `@conversation handoff <name or id>`: summarize that conversation into this one (run by
    /// the server; empty when no conversation was given).
    Handoff(String),
    /// `@help`.
    Help,
    /// `@compact`.
    Compact,
    /// `@explain <request>`: how the request would be handled, without running it.
    Explain(String),
    /// `@translate <request>`: the actions (tool calls) it translates to, without running them.
    Translate(String),
    /// `@dispatcher request <request>`: the request, run exactly as if it had been submitted
    /// bare (a command again, or an agent turn).
    Request(String),
    /// `@system <sub>`: what TypeAgent's CLI sends for `/help`, `/history`, `/session`,
    /// `/config`, `/agents` and `/trace`.
    System(SystemCommand),
    /// A sub-command of a family we know that Roundtable does not have, named without the
    /// `@` (`system shell`): answered `@<it>: not supported by Roundtable`.
    Unsupported(String),
    /// A known command used wrongly: the error text to show.
    Invalid(String),
    /// `@something` we do not know.
    Unknown(String),
}

/// A `@system` sub-command Roundtable answers.
#[derive(Debug, Clone, PartialEq)]
pub enum SystemCommand {
    /// `help` (and no sub-command): the command list.
    Help,
    /// `history [N]`: the last N chat-history messages.
    History(usize),
    /// `session [info]`: this conversation's facts.
    Session,
    /// `config [show]`: the server settings that matter to a user.
    Config,
    /// `config agents`: the agents and tools this conversation can use.
    Agents,
    /// `trace [filter]`: show the log filter, or set it (space-separated directives are
    /// joined with commas, so `trace a=debug b=warn` is `a=debug,b=warn`).
    Trace(Option<String>),
    /// `clear`: the requesting client clears its screen (clientio `clear(requestId)` to it
    /// alone, as TypeAgent); nothing is deleted.
    Clear,
    /// `exit`: the requesting client exits (clientio `exit(requestId)` to it alone).
    Exit,
    /// `meter [show]`: the context meter; `meter reset` (`true`) clears it first.
    Meter(bool),
    /// `model [NAME]`: the provider this conversation uses and those it could; with a name
    /// (or `default`), make it use that one.
    Model(Option<String>),
}

/// Messages `@system history` shows without a count.
pub const DEFAULT_HISTORY: usize = 20;
/// The longest filter `@system trace` takes (a few dozen directives); a longer one is refused
/// before anything parses it, so a client cannot make the log filter's parsers (not linear in
/// the directive count) busy for seconds.
pub const MAX_TRACE_FILTER_BYTES: usize = 1024;

/// What a command takes after its words, for completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Params {
    /// Nothing (completion offers nothing after it: a closed set).
    None,
    /// The rest of the line, named.
    Rest(&'static str),
    /// The rest of the line, optional.
    OptionalRest(&'static str),
    /// An optional number.
    OptionalNumber(&'static str),
}

/// Turns a leaf's arguments into a command: `rest` is the text after the leaf's word,
/// `whole` the text after its family's word (for errors that quote all of it); both trimmed.
type Leaf = fn(rest: &str, whole: &str) -> Command;

/// Answers a word its family does not have: (`word`, the text after the family's word).
type Unknown = fn(word: &str, whole: &str) -> Command;

/// One built-in command, or a family of them.
#[derive(Debug)]
pub(super) struct Spec {
    /// The word after its parent's (`history` in `@system history`).
    pub(super) name: &'static str,
    /// Another word for it (`conv`).
    alias: Option<&'static str>,
    /// Its help line: (usage after the parent's words, what it does); `None`: not in the help
    /// on its own line (`prev` shares `next`'s, a family's `help` is the family's).
    help: Option<(&'static str, &'static str)>,
    /// Neither completed nor shown, still parsed (`@dispatcher help`).
    hidden: bool,
    /// A TypeAgent agent (`system`, `dispatcher`): completion lists it under `Agent Names`
    /// and a request under it names it as its `setDisplayInfo` source. The other top-level
    /// commands belong to the `system` agent there.
    agent: bool,
    /// What completion offers after it (a leaf).
    params: Params,
    /// Its arguments → a command (a leaf).
    leaf: Option<Leaf>,
    /// Its sub-commands (a family).
    subs: &'static [Spec],
    /// The sub-command an empty one means.
    default: Option<&'static str>,
    /// What a word that is none of `subs` means.
    unknown: Option<Unknown>,
}

impl Spec {
    /// A command without sub-commands.
    const fn leaf(name: &'static str, params: Params, leaf: Leaf) -> Spec {
        Spec {
            name,
            alias: None,
            help: None,
            hidden: false,
            agent: false,
            params,
            leaf: Some(leaf),
            subs: &[],
            default: None,
            unknown: None,
        }
    }

    /// A family of sub-commands.
    const fn family(
        name: &'static str,
        subs: &'static [Spec],
        default: Option<&'static str>,
        unknown: Unknown,
    ) -> Spec {
        Spec {
            name,
            alias: None,
            help: None,
            hidden: false,
            agent: false,
            params: Params::None,
            leaf: None,
            subs,
            default,
            unknown: Some(unknown),
        }
    }

    /// With its help line.
    const fn help(self, usage: &'static str, what: &'static str) -> Spec {
        Spec {
            help: Some((usage, what)),
            ..self
        }
    }

    /// Parsed, never offered.
    const fn hidden(self) -> Spec {
        Spec {
            hidden: true,
            ..self
        }
    }

    /// A TypeAgent agent.
    const fn agent(self) -> Spec {
        Spec {
            agent: true,
            ..self
        }
    }

    /// With another word for it.
    const fn alias(self, alias: &'static str) -> Spec {
        Spec {
            alias: Some(alias),
            ..self
        }
    }

    /// The sub-command `word` names, hidden ones included.
    fn sub(&self, word: &str) -> Option<&'static Spec> {
        named(self.subs, word)
    }

    /// The sub-commands completion offers, in order.
    fn offered(&self) -> impl Iterator<Item = &'static Spec> {
        self.subs.iter().filter(|s| !s.hidden)
    }
}

/// `@conversation <sub>`: the `manage-conversation` payload for the client.
fn conversation(payload: serde_json::Value) -> Command {
    Command::Conversation(payload)
}

/// `@conversation`'s sub-commands.
static CONVERSATION: [Spec; 12] = [
    Spec::leaf("help", Params::None, |_, _| {
        conversation(json!({"subcommand": "help"}))
    }),
    Spec::leaf("new", Params::OptionalRest("name"), |rest, _| {
        conversation(match rest {
            "" => json!({"subcommand": "new"}),
            name => json!({"subcommand": "new", "name": name}),
        })
    })
    .help("new [name]", "create a conversation and switch to it"),
    Spec::leaf("list", Params::None, |_, _| {
        conversation(json!({"subcommand": "list"}))
    })
    .help("list", "list conversations"),
    Spec::leaf("info", Params::None, |_, _| {
        conversation(json!({"subcommand": "info"}))
    })
    .help("info", "show the current conversation"),
    Spec::leaf("switch", Params::OptionalRest("name"), |rest, _| {
        conversation(match rest {
            "" => json!({"subcommand": "next"}),
            name => json!({"subcommand": "switch", "name": name}),
        })
    })
    .help("switch <name>", "switch by name (fuzzy)"),
    Spec::leaf("prev", Params::None, |_, _| {
        conversation(json!({"subcommand": "prev"}))
    })
    .help("prev / next", "cycle through conversations"),
    Spec::leaf("next", Params::None, |_, _| {
        conversation(json!({"subcommand": "next"}))
    }),
    Spec::leaf("rename", Params::OptionalRest("name"), |rest, _| {
        conversation(rename_payload(rest))
    })
    .help("rename [name] <new>", "rename one (default: the current)"),
    Spec::leaf("delete", Params::Rest("name"), |rest, _| {
        conversation(json!({"subcommand": "delete", "name": unquote(rest)}))
    })
    .help("delete <name>", "delete one (not the current)"),
    Spec::leaf("find", Params::Rest("query"), |rest, _| {
        conversation(json!({"subcommand": "find", "query": rest}))
    })
    .help("find <query>", "find conversations by name"),
    Spec::leaf("search", Params::Rest("query"), |rest, _| {
        conversation(json!({"subcommand": "search", "query": rest}))
    })
    .help("search <query>", "search conversation content"),
    Spec::leaf("handoff", Params::Rest("name"), |rest, _| {
        Command::Handoff(unquote(rest))
    })
    .help(
        "handoff <name or id>",
        "summarize another conversation into this one (by the server)",
    ),
];

/// `@dispatcher`'s sub-commands: what TypeAgent's `agent-cli run` sends.
static DISPATCHER: [Spec; 4] = [
    Spec::leaf("help", Params::None, |_, _| Command::Help).hidden(),
    Spec::leaf("request", Params::Rest("request"), |rest, _| {
        Command::Request(rest.to_string())
    })
    .help("request <request>", "run it, as if typed bare"),
    Spec::leaf("translate", Params::Rest("request"), |rest, _| {
        Command::Translate(rest.to_string())
    })
    .help("translate <request>", "same as `@translate`"),
    Spec::leaf("explain", Params::Rest("request"), |rest, _| {
        Command::Explain(rest.to_string())
    })
    .help("explain <request>", "same as `@explain`"),
];

/// A `@system` command.
fn system_command(command: SystemCommand) -> Command {
    Command::System(command)
}

/// `@system session`'s sub-commands.
static SESSION: [Spec; 1] = [Spec::leaf("info", Params::None, |_, _| {
    system_command(SystemCommand::Session)
})
.help(
    "session [info]",
    "this conversation: id, name, directory, clients, provider, context used",
)];

/// `@system config`'s sub-commands.
static CONFIG: [Spec; 2] = [
    Spec::leaf("show", Params::None, |_, _| {
        system_command(SystemCommand::Config)
    })
    .help("config [show]", "the server settings that matter here"),
    Spec::leaf("agents", Params::None, |_, _| {
        system_command(SystemCommand::Agents)
    })
    .help(
        "config agents",
        "the agents and tools this conversation can use",
    ),
];

/// `@system meter`'s sub-commands.
static METER: [Spec; 2] = [
    Spec::leaf("show", Params::None, |rest, whole| {
        meter(rest.is_empty().then_some(false), whole)
    })
    .help(
        "meter [show | reset]",
        "how much of the model's context this conversation uses; reset starts it over",
    ),
    Spec::leaf("reset", Params::None, |rest, whole| {
        meter(rest.is_empty().then_some(true), whole)
    }),
];

/// `@system`'s sub-commands: what TypeAgent's CLI sends for `/help`, `/history`, ….
static SYSTEM: [Spec; 9] = [
    Spec::leaf("help", Params::None, |_, _| {
        system_command(SystemCommand::Help)
    })
    .help("help", "this list"),
    Spec::leaf("history", Params::OptionalNumber("count"), |rest, _| {
        history(rest)
    })
    .help(
        "history [N]",
        "the last N (default 20, at most 1000) messages of the assistant's chat history",
    ),
    Spec::family("session", &SESSION, Some("info"), |word, _| {
        Command::Unsupported(format!("system session {word}"))
    }),
    Spec::family("config", &CONFIG, Some("show"), |word, _| {
        Command::Unsupported(format!("system config {word}"))
    }),
    Spec::leaf("trace", Params::OptionalRest("filter"), |rest, _| {
        trace(rest)
    })
    .help(
        "trace [filter]",
        "show or set the server's log filter (RUST_LOG syntax)",
    ),
    Spec::leaf("clear", Params::None, |rest, _| clear(rest))
        .help("clear", "clear your screen (the history stays)"),
    Spec::leaf("exit", Params::None, |rest, _| {
        no_arguments("exit", rest, SystemCommand::Exit)
    })
    .help("exit", "exit your client"),
    Spec::family("meter", &METER, Some("show"), |_, whole| meter(None, whole)),
    Spec::leaf("model", Params::None, |rest, _| model(rest)).help(
        "model [NAME | default]",
        "the model provider this conversation uses, and those it could; a name picks one",
    ),
];

/// The top-level commands, in the order completion offers them and the help lists them.
static ROOT: [Spec; 7] = [
    Spec::family("conversation", &CONVERSATION, Some("help"), |_, _| {
        conversation(json!({"subcommand": "help"}))
    })
    .alias("conv")
    .help("conversation <sub>", "manage conversations"),
    Spec::leaf("help", Params::None, |_, _| Command::Help).help("help", "this list"),
    Spec::leaf("compact", Params::None, |_, _| Command::Compact).help(
        "compact",
        "summarize the chat history to keep the model's context short",
    ),
    Spec::leaf("explain", Params::Rest("request"), |rest, _| {
        Command::Explain(rest.to_string())
    })
    .help(
        "explain <request>",
        "how the request would be handled, without running it",
    ),
    Spec::leaf("translate", Params::Rest("request"), |rest, _| {
        Command::Translate(rest.to_string())
    })
    .help(
        "translate <request>",
        "the actions a request translates to, without running them",
    ),
    Spec::family("dispatcher", &DISPATCHER, Some("help"), |word, _| {
        Command::Unsupported(format!("dispatcher {word}"))
    })
    .agent()
    .help("dispatcher <sub> <request>", "what `agent-cli run` sends"),
    Spec::family("system", &SYSTEM, Some("help"), |word, _| {
        Command::Unsupported(format!("system {word}"))
    })
    .agent()
    .help("system <sub>", "about this conversation and server"),
];

/// `@conversation rename`'s payload: `rename <name> <new>` (two words, or quoted phrases), or
/// `rename <new>` for the current conversation.
fn rename_payload(rest: &str) -> Value {
    match split_two(rest) {
        Some((name, new_name)) => {
            json!({"subcommand": "rename", "name": name, "newName": new_name})
        }
        None => json!({"subcommand": "rename", "newName": unquote(rest)}),
    }
}

/// `s` without one pair of surrounding quotes (`"` or `'`).
fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return s[1..s.len() - 1].to_string();
        }
    }
    s.to_string()
}

/// `rename <name> <new>`: two words, or quoted phrases. One argument means "rename current".
fn split_two(s: &str) -> Option<(String, String)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (first, rest) = if let Some(q) = s.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let end = s[1..].find(q)? + 1;
        (s[1..end].to_string(), s[end + 1..].trim())
    } else {
        let (a, b) = s.split_once(char::is_whitespace)?;
        (a.to_string(), b.trim())
    };
    if rest.is_empty() {
        return None;
    }
    Some((first, unquote(rest)))
}

// What the leaves of `@system` make of their arguments (`rest`: the text after the command's
// word, trimmed).

/// `@system history [N]`.
fn history(rest: &str) -> Command {
    if rest.is_empty() {
        return Command::System(SystemCommand::History(DEFAULT_HISTORY));
    }
    match rest.parse::<usize>() {
        Ok(n) if n > 0 => Command::System(SystemCommand::History(n)),
        _ => Command::Invalid(format!(
            "@system history: N must be a whole number above 0, got \"{rest}\""
        )),
    }
}

/// `@system trace [filter]`: the words of the filter joined by commas.
fn trace(rest: &str) -> Command {
    if rest.is_empty() {
        Command::System(SystemCommand::Trace(None))
    } else if rest.len() > MAX_TRACE_FILTER_BYTES {
        Command::Invalid(format!(
            "@system trace: the filter is {} bytes; at most {MAX_TRACE_FILTER_BYTES}",
            rest.len()
        ))
    } else {
        Command::System(SystemCommand::Trace(Some(
            rest.split_whitespace().collect::<Vec<_>>().join(","),
        )))
    }
}

/// `@system clear`. TypeAgent's `clear deep` wipes the display log for everyone: a shared
/// conversation keeps its history (deleting the conversation removes it).
fn clear(rest: &str) -> Command {
    if split_word(rest).0 == "deep" {
        return Command::Unsupported("system clear deep".into());
    }
    no_arguments("clear", rest, SystemCommand::Clear)
}

/// `@system <name>` that takes no arguments.
fn no_arguments(name: &str, rest: &str, command: SystemCommand) -> Command {
    if rest.is_empty() {
        Command::System(command)
    } else {
        Command::Invalid(format!("@system {name} takes no arguments"))
    }
}

/// `@system meter [show | reset]`: `reset` is `Some(true)`, `show` `Some(false)`, anything
/// else (`whole`, all that follows `meter`) `None`.
fn meter(reset: Option<bool>, whole: &str) -> Command {
    match reset {
        Some(reset) => Command::System(SystemCommand::Meter(reset)),
        None => Command::Invalid(format!(
            "@system meter: give show or reset, got \"{whole}\""
        )),
    }
}

/// `@system model [NAME | default]`.
fn model(rest: &str) -> Command {
    if rest.is_empty() {
        Command::System(SystemCommand::Model(None))
    } else if !rest.contains(char::is_whitespace) {
        Command::System(SystemCommand::Model(Some(rest.to_string())))
    } else {
        Command::Invalid(format!(
            "@system model: give one provider name (or default), got \"{rest}\""
        ))
    }
}

/// The spec among `specs` that `word` names (its name or its alias), hidden ones included.
fn named(specs: &'static [Spec], word: &str) -> Option<&'static Spec> {
    specs
        .iter()
        .find(|s| s.name == word || s.alias == Some(word))
}

/// The first word of `text` and the rest, both trimmed.
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim();
    let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    (word, rest.trim())
}

/// Parses `text` when it starts with `@` (after leading white space); `None` otherwise. A
/// word that is no top-level command is [`Command::Unknown`].
pub fn parse(text: &str) -> Option<Command> {
    let rest = text.trim().strip_prefix('@')?;
    let (head, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let mut whole = args.trim();
    let Some(mut spec) = named(&ROOT, head) else {
        return Some(Command::Unknown(head.to_string()));
    };
    loop {
        if let Some(leaf) = spec.leaf {
            return Some(leaf(whole, whole));
        }
        let (word, rest) = split_word(whole);
        let word = if word.is_empty() {
            spec.default.unwrap_or_default()
        } else {
            word
        };
        let Some(sub) = spec.sub(word) else {
            let unknown = spec.unknown.expect("a family answers unknown words");
            return Some(unknown(word, whole));
        };
        if let Some(leaf) = sub.leaf {
            return Some(leaf(rest, whole));
        }
        spec = sub;
        whole = rest;
    }
}

/// What a request runs, for its `setDisplayInfo`: the agent and the command words TypeAgent
/// resolves it to. Text without `@` is an agent turn: `("dispatcher", ["request"])`, and so is
/// `@dispatcher request …`; `@system config agents` is `("system", ["config", "agents"])`;
/// `@conversation list`, `@help`, `@compact`, `@explain`, `@translate` belong to the `system`
/// agent. `None` for a command Roundtable does not know (it fails before anything runs, as
/// TypeAgent's does), or an agent named alone.
pub(super) fn display_info(text: &str) -> Option<(&'static str, Vec<String>)> {
    let Some(command) = text.trim_start().strip_prefix('@') else {
        return Some(("dispatcher", vec!["request".into()]));
    };
    let mut words = command.split_whitespace();
    let first = words.next().unwrap_or("");
    let top = named(&ROOT, first)?;
    let (agent, mut path) = if top.agent {
        (top.name, Vec::new())
    } else {
        ("system", vec![top.name.to_string()])
    };
    let mut spec = top;
    for word in words {
        match spec.sub(word).filter(|s| !s.hidden) {
            Some(sub) => {
                path.push(sub.name.to_string());
                spec = sub;
            }
            None => break,
        }
    }
    (!path.is_empty()).then_some((agent, path))
}

/// The `@help` (and `@system help`) text, markdown: every command with a help line, a
/// family's sub-commands indented under it.
pub fn help_text() -> String {
    fn lines(out: &mut String, specs: &[Spec], depth: usize, prefix: &str) {
        for spec in specs.iter().filter(|s| !s.hidden) {
            if let Some((usage, what)) = spec.help {
                let indent = "  ".repeat(depth);
                if spec.subs.is_empty() || depth > 0 {
                    out.push_str(&format!("{indent}- `{prefix}{usage}`: {what}\n"));
                } else {
                    out.push_str(&format!(
                        "{indent}- `{prefix}{usage}`: {what}; subcommands:\n"
                    ));
                }
            }
            // A top-level family lists its sub-commands under it; deeper families (`@system
            // config`) list theirs at the family's level, with the family's words.
            if !spec.subs.is_empty() {
                lines(out, spec.subs, depth.max(1), "");
            }
        }
    }
    let mut out = String::from("**Commands**\n\n");
    lines(&mut out, &ROOT, 0, "@");
    out.push_str("\nAnything else goes to the assistant, which can calculate, tell the time, show sample weather and manage conversations in words (\"switch to my work conversation\", \"hand off my research conversation here\").");
    out
}

/// `spec`'s parameters as TypeAgent declares them.
fn parameters(params: Params) -> Option<ParameterDefinitions> {
    let arg = match params {
        Params::None => return None,
        Params::Rest(name) => (name, ArgDefinition::rest_of_line()),
        Params::OptionalRest(name) => (name, ArgDefinition::rest_of_line().optional()),
        Params::OptionalNumber(name) => (
            name,
            ArgDefinition {
                value_type: ValueType::Number,
                ..ArgDefinition::string()
            }
            .optional(),
        ),
    };
    Some(ParameterDefinitions::args(vec![arg]))
}

/// `spec` as a descriptor: a command, or a table of its offered sub-commands.
fn descriptors(spec: &Spec) -> Descriptors {
    if spec.subs.is_empty() {
        return Descriptors::Command(CommandDescriptor {
            description: spec.help.map(|(_, what)| what).unwrap_or_default().into(),
            parameters: parameters(spec.params),
        });
    }
    Descriptors::Table(DescriptorTable {
        description: spec.help.map(|(_, what)| what).unwrap_or_default().into(),
        commands: spec
            .offered()
            .map(|sub| (sub.name.to_string(), descriptors(sub)))
            .collect(),
        // Only a default that is offered (`@dispatcher`'s `help` is not).
        default_sub_command: spec
            .default
            .filter(|d| spec.offered().any(|s| s.name == *d))
            .map(|d| DefaultSubCommand::Name(d.to_string())),
    })
}

/// The top-level table: what `@<word>` means when `<word>` is not an agent.
pub(super) fn root_table() -> DescriptorTable {
    DescriptorTable {
        description: "Roundtable commands".into(),
        commands: ROOT
            .iter()
            .filter(|s| !s.agent && !s.hidden)
            .map(|s| (s.name.to_string(), descriptors(s)))
            .collect(),
        default_sub_command: None,
    }
}

/// The built-in agents (`dispatcher`, `system`) with their command trees, in order.
pub(super) fn agent_descriptors() -> Vec<(&'static str, Descriptors)> {
    ROOT.iter()
        .filter(|s| s.agent)
        .map(|s| (s.name, descriptors(s)))
        .collect()
}

#[cfg(test)]
mod tests;
