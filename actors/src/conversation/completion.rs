//! `getCommandCompletion(input, direction)` exactly as TypeAgent's dispatcher answers it
//! (`command/completion.ts`, reference section B): `{startIndex, completions: [{name,
//! completions, separatorMode, …}], closedSet, directionSensitive, afterWildcard}`, where
//! `input[0..startIndex]` is what is resolved and the groups are what may follow it; the
//! client filters them by what is typed after that anchor.
//!
//! Roundtable's `@` commands are written as TypeAgent's command descriptors:
//! - the top-level table (TypeAgent's `system` agent table, used when the first word is not
//!   an agent): `conversation` (its own table, default `help`), `help`, `compact`, `explain`,
//!   `translate`;
//! - the agents `system` (`help`, `history`, `session`, `config`, `trace`, `clear`, `exit`,
//!   `meter`) and `dispatcher`
//!   (`request`, `translate`, `explain`), always listed under `Agent Names`;
//! - the client-hosted agents whose `agentInterface` has `executeCommand`, also under `Agent
//!   Names`, with their own tree (`getCommands`) and parameter completion
//!   (`getCommandCompletion`), each asked of the client when the input names the agent.
//!
//! `dispatcher request | translate | explain <text>` complete the command `<text>` wraps
//! (Roundtable's own completion for its parameter): nested up to [`MAX_NESTING`] deep.
//! Plain text (not `@`) is `dispatcher request <text>`, as in TypeAgent; it has no
//! completions but `Command Prefixes` (`@`) at the start.
//!
//! Any error (an agent's invoke failing, its answer invalid) gives the empty result
//! `{startIndex: 0, completions: [], closedSet: false, …}`, never an RPC error, as TypeAgent's
//! catch-all does.
//!
//! Who talks to it: `dispatcher.rs` (the invoke) with a [`CompletionView`] the conversation
//! takes when asked; positions are bytes here and UTF-16 code units on the wire.

use std::sync::LazyLock;

use serde_json::{json, Map, Value};

use super::client_agents::ClientCommandHost;
use super::grammar;
use crate::agent::client_agent::command::{
    is_js_space, next_word, parse_params, resolve, resolve_flag, trim_start_js, utf16_len,
    CommandDescriptor, DescriptorTable, Descriptors, FlagDefinition, ParsedParams, ValueType,
};
use crate::agent::LocalBoxFuture;

/// How deep `@dispatcher request @dispatcher request …` is completed (each level is one
/// nested future; the text is bounded by the frame size, this bounds the nesting).
pub const MAX_NESTING: usize = 8;
/// Most completion items one agent's `getCommandCompletion` answer may hold; a larger one is
/// an error (the empty result).
pub const MAX_AGENT_COMPLETIONS: usize = 4096;
/// Most groups in one agent's `getCommandCompletion` answer.
pub const MAX_AGENT_GROUPS: usize = 64;

/// `"forward"` (typing on) or `"backward"` (backspace: reconsider the current word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Moving ahead.
    Forward,
    /// Backing up.
    Backward,
}

impl Direction {
    /// `"backward"` is backward; anything else (as in TypeAgent) is forward.
    pub fn parse(text: Option<&str>) -> Direction {
        match text {
            Some("backward") => Direction::Backward,
            _ => Direction::Forward,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        }
    }
}

/// The agents `@` can name, taken from the conversation when a completion is asked.
pub struct CompletionView {
    /// Client-hosted agents (all of them: one without `executeCommand` is still an agent
    /// name to the resolver, as in TypeAgent, but not offered).
    pub clients: Vec<ClientCommandHost>,
}

/// Which agent handles the command being completed.
enum Agent<'v> {
    /// The top-level table (TypeAgent's fallback `system` agent).
    Root,
    /// `@system`.
    System,
    /// `@dispatcher`.
    Dispatcher,
    /// A client-hosted agent.
    Client(&'v ClientCommandHost),
}

/// The top-level commands (what `@<word>` means when `<word>` is not an agent), from the
/// grammar.
static ROOT: LazyLock<DescriptorTable> = LazyLock::new(grammar::root_table);

/// A built-in agent's commands, from the grammar.
fn agent_table(name: &str) -> Descriptors {
    grammar::agent_descriptors()
        .into_iter()
        .find_map(|(n, d)| (n == name).then_some(d))
        .expect("a built-in agent")
}

/// `@system`'s commands.
static SYSTEM: LazyLock<Descriptors> = LazyLock::new(|| agent_table("system"));

/// `@dispatcher`'s commands: what `agent-cli run` sends.
static DISPATCHER: LazyLock<Descriptors> = LazyLock::new(|| agent_table("dispatcher"));

/// A result before its `startIndex` is put in UTF-16 units.
struct Completion {
    /// Byte offset in the input where the completions attach.
    start: usize,
    /// The groups.
    groups: Vec<Value>,
    /// `closedSet`.
    closed_set: bool,
    /// `directionSensitive`.
    direction_sensitive: bool,
    /// `afterWildcard`.
    after_wildcard: String,
}

/// The empty result TypeAgent answers on any error.
fn empty_result() -> Value {
    json!({"startIndex": 0, "completions": [], "closedSet": false,
        "directionSensitive": false, "afterWildcard": "none"})
}

/// A group (`separatorMode` left out when `None`, which means `"space"`).
fn group(name: &str, completions: Vec<String>, separator: Option<&str>) -> Value {
    let mut g = json!({"name": name, "completions": completions});
    if let Some(mode) = separator {
        g["separatorMode"] = json!(mode);
    }
    g
}

/// `getCommandCompletion(input, direction)`: the result, or the empty result on an error
/// (`input` `None`: the argument was not a string).
pub async fn command_completion(
    view: CompletionView,
    input: Option<String>,
    direction: Direction,
) -> Value {
    let Some(input) = input else {
        return empty_result();
    };
    match complete(&view, &input, direction, 0).await {
        Ok(c) => json!({
            "startIndex": utf16_len(&input[..c.start]),
            "completions": c.groups,
            "closedSet": c.closed_set,
            "directionSensitive": c.direction_sensitive,
            "afterWildcard": c.after_wildcard,
        }),
        Err(e) => {
            log::debug!("getCommandCompletion of {input:?}: {e}");
            empty_result()
        }
    }
}

/// `inferSeparatorMode`: `optionalSpace` at the start or after white space (the separator
/// is typed already), else `None` (a space is needed).
fn infer_separator(input: &str, index: usize) -> Option<&'static str> {
    (index == 0 || input[..index].ends_with(is_js_space)).then_some("optionalSpace")
}

/// `isFullyQuoted`: `None` when not quoted at all.
fn fully_quoted(value: &str) -> Option<bool> {
    let first = value.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let b = value.as_bytes();
    let len = b.len();
    Some(len > 1 && value.ends_with(first) && !(len > 2 && b[len - 2] == b'\\'))
}

/// What to complete and where (`resolveCompletionTarget`).
struct Target {
    /// Parameter names to ask the agent about.
    names: Vec<String>,
    /// Byte offset where the completion attaches.
    start: usize,
    /// The user is inside a free-form value.
    partial_value: bool,
    /// Offer flag names.
    include_flags: bool,
    /// Offer `true` / `false` for this boolean flag.
    boolean_flag: Option<String>,
    /// The groups' separator mode.
    separator: Option<&'static str>,
    /// The result depends on the direction.
    direction_sensitive: bool,
}

/// `resolveCompletionTarget` (completion.ts): from the partial parse of the parameters.
fn completion_target(
    params: &ParsedParams,
    flags: Option<&[(String, FlagDefinition)]>,
    input: &str,
    direction: Direction,
) -> Target {
    let remainder_index = input.len() - params.remainder_bytes;
    // A recognised flag as the last token waits for its value.
    let (mut pending_flag, mut boolean_flag) = (None, None);
    if let (Some(last), Some(flags)) = (params.tokens.last(), flags) {
        if let Some((name, def)) = resolve_flag(flags, last) {
            match def.value_type {
                ValueType::Boolean => boolean_flag = Some(format!("--{name}")),
                ValueType::Json => pending_flag = Some(last.clone()),
                _ => pending_flag = Some(format!("--{name}")),
            }
        }
    }
    if params.remainder_bytes > 0 {
        return Target {
            names: params.next_args.clone(),
            start: remainder_index,
            partial_value: false,
            include_flags: true,
            boolean_flag,
            separator: infer_separator(input, remainder_index),
            direction_sensitive: false,
        };
    }
    if let (Some(param), Some(token)) = (&params.last_completable_param, params.tokens.last()) {
        let editing = match fully_quoted(token) {
            Some(false) => true,
            Some(true) => false,
            None => {
                params.last_param_implicit_quotes
                    || (!input.ends_with(is_js_space) && pending_flag.is_none())
            }
        };
        if editing {
            let start = remainder_index.saturating_sub(token.len());
            return Target {
                names: vec![param.clone()],
                start,
                partial_value: true,
                include_flags: false,
                boolean_flag: None,
                separator: infer_separator(input, start),
                direction_sensitive: false,
            };
        }
    }
    let trailing = infer_separator(input, remainder_index);
    if let Some(flag) = pending_flag {
        if direction == Direction::Backward && trailing.is_none() {
            let token = params.tokens.last().map_or(0, String::len);
            let start = remainder_index.saturating_sub(token);
            return Target {
                names: Vec::new(),
                start,
                partial_value: false,
                include_flags: true,
                boolean_flag,
                separator: infer_separator(input, start),
                direction_sensitive: true,
            };
        }
        return Target {
            names: vec![flag],
            start: remainder_index,
            partial_value: false,
            include_flags: false,
            boolean_flag: None,
            separator: trailing,
            direction_sensitive: trailing.is_none(),
        };
    }
    Target {
        names: params.next_args.clone(),
        start: remainder_index,
        partial_value: false,
        include_flags: true,
        boolean_flag,
        separator: trailing,
        direction_sensitive: false,
    }
}

/// `collectFlags`: flag names not given yet (and `--json.` property prefixes, added to
/// `names`).
fn collect_flags(
    names: &mut Vec<String>,
    flags: &[(String, FlagDefinition)],
    given: Option<&Map<String, Value>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, def) in flags {
        if !def.multiple {
            if def.value_type == ValueType::Json {
                names.push(format!("--{key}."));
            }
            if given.is_some_and(|g| g.contains_key(key)) {
                continue;
            }
        }
        out.push(format!("--{key}"));
        if let Some(c) = &def.char {
            out.push(format!("-{c}"));
        }
    }
    out
}

/// An agent's `CompletionGroups`, checked and bounded.
struct AgentGroups {
    /// Its groups (known fields only).
    groups: Vec<Value>,
    /// `matchedPrefixLength` in UTF-16 units.
    matched_prefix: Option<usize>,
    /// `closedSet`.
    closed_set: Option<bool>,
    /// `directionSensitive`.
    direction_sensitive: Option<bool>,
    /// `afterWildcard`.
    after_wildcard: Option<String>,
}

/// Reads an agent's `CompletionGroups` answer.
fn agent_groups(answer: &Value) -> Result<AgentGroups, String> {
    const MODES: [&str; 6] = [
        "space",
        "spacePunctuation",
        "optionalSpacePunctuation",
        "optionalSpace",
        "none",
        "autoSpacePunctuation",
    ];
    let groups = answer
        .get("groups")
        .and_then(Value::as_array)
        .ok_or("groups is not an array")?;
    if groups.len() > MAX_AGENT_GROUPS {
        return Err(format!("more than {MAX_AGENT_GROUPS} groups"));
    }
    let mut items = 0;
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let name = g
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a group has no name")?;
        let completions = g
            .get("completions")
            .and_then(Value::as_array)
            .filter(|c| c.iter().all(Value::is_string))
            .ok_or("a group's completions are not strings")?;
        items += completions.len();
        if items > MAX_AGENT_COMPLETIONS {
            return Err(format!("more than {MAX_AGENT_COMPLETIONS} completions"));
        }
        let mut kept = json!({"name": name, "completions": completions});
        if let Some(mode) = g.get("separatorMode").filter(|m| !m.is_null()) {
            match mode.as_str().filter(|m| MODES.contains(m)) {
                Some(m) => kept["separatorMode"] = json!(m),
                None => return Err(format!("separatorMode {mode} is unknown")),
            }
        }
        for (key, ok) in [
            (
                "needQuotes",
                g.get("needQuotes").is_some_and(Value::is_boolean),
            ),
            (
                "emojiChar",
                g.get("emojiChar").is_some_and(Value::is_string),
            ),
            ("sorted", g.get("sorted").is_some_and(Value::is_boolean)),
            (
                "kind",
                matches!(
                    g.get("kind").and_then(Value::as_str),
                    Some("literal" | "entity")
                ),
            ),
        ] {
            if ok {
                kept[key] = g[key].clone();
            }
        }
        out.push(kept);
    }
    Ok(AgentGroups {
        groups: out,
        matched_prefix: answer
            .get("matchedPrefixLength")
            .and_then(Value::as_u64)
            .map(|n| n as usize),
        closed_set: answer.get("closedSet").and_then(Value::as_bool),
        direction_sensitive: answer.get("directionSensitive").and_then(Value::as_bool),
        after_wildcard: answer
            .get("afterWildcard")
            .and_then(Value::as_str)
            .filter(|w| matches!(*w, "none" | "some" | "all"))
            .map(str::to_string),
    })
}

/// The byte offset `units` UTF-16 code units into `text` (at most its end, on a character
/// boundary).
fn utf16_to_byte(text: &str, units: usize) -> usize {
    let mut seen = 0;
    for (i, c) in text.char_indices() {
        if seen >= units {
            return i;
        }
        seen += c.len_utf16();
    }
    text.len()
}

/// Where a completion stands once the command is resolved: what its parameter completion
/// needs.
struct Resolution<'a> {
    /// The agents.
    view: &'a CompletionView,
    /// The agent handling the command.
    agent: &'a Agent<'a>,
    /// The whole input.
    input: &'a str,
    /// The input after the command (its parameters), a suffix of `input`.
    suffix: &'a str,
    /// The sub-command path.
    commands: &'a [String],
    /// Forward or backward.
    direction: Direction,
    /// How deep in wrapped commands this completion is.
    depth: usize,
}

/// What the agent's own completion says about its parameters `names`: built-in agents
/// complete nothing but `dispatcher`'s wrapped commands; a client agent is asked. `None`
/// when the agent has no `getCommandCompletion`.
async fn agent_completion(
    at: &Resolution<'_>,
    params: &ParsedParams,
    names: &[String],
) -> Option<Result<AgentGroups, String>> {
    let (view, commands, direction, depth) = (at.view, at.commands, at.direction, at.depth);
    match at.agent {
        Agent::Root | Agent::System => None,
        Agent::Client(host) => {
            let answer = host
                .complete(commands, params.to_json(), names, direction.as_str())
                .await?;
            Some(answer.and_then(|a| agent_groups(&a)))
        }
        Agent::Dispatcher => {
            let wrapped = params
                .args
                .as_ref()
                .and_then(|a| a.get("request"))
                .and_then(Value::as_str)
                .filter(|text| text.starts_with('@') && depth < MAX_NESTING);
            let Some(text) = wrapped.filter(|_| names.iter().any(|n| n == "request")) else {
                return Some(Ok(AgentGroups {
                    groups: Vec::new(),
                    matched_prefix: None,
                    closed_set: None,
                    direction_sensitive: None,
                    after_wildcard: None,
                }));
            };
            let inner = complete(view, text, direction, depth + 1).await;
            Some(inner.map(|c| AgentGroups {
                matched_prefix: Some(utf16_len(&text[..c.start])),
                groups: c.groups,
                closed_set: Some(c.closed_set),
                direction_sensitive: Some(c.direction_sensitive),
                after_wildcard: Some(c.after_wildcard),
            }))
        }
    }
}

/// Parameter completion of a resolved command (`getCommandParameterCompletion`); `None`
/// when it declares no parameters.
async fn parameter_completion(
    at: &Resolution<'_>,
    descriptor: &CommandDescriptor,
) -> Result<Option<Completion>, String> {
    let Some(defs) = &descriptor.parameters else {
        return Ok(None);
    };
    let (input, direction) = (at.input, at.direction);
    let params = parse_params(at.suffix, defs, true)?;
    let flags = defs.flags.as_deref();
    let mut target = completion_target(&params, flags, input, direction);
    let mut start = target.start;
    let mut groups = Vec::new();
    if let Some(flag) = &target.boolean_flag {
        let both = vec!["true".to_string(), "false".to_string()];
        groups.push(group(flag, both, target.separator));
    }
    if let (true, Some(flags)) = (target.include_flags, flags) {
        let names = collect_flags(&mut target.names, flags, params.flags.as_ref());
        if !names.is_empty() {
            groups.push(group("Command Flags", names, target.separator));
        }
    }
    let (mut invoked, mut closed, mut sensitive, mut wildcard) =
        (false, None, false, "none".to_string());
    if !target.names.is_empty() {
        let answer = agent_completion(at, &params, &target.names).await;
        if let Some(answer) = answer {
            let mut answer = answer?;
            match answer.matched_prefix.filter(|n| *n > 0) {
                Some(n) => {
                    start = target.start + utf16_to_byte(&input[target.start..], n);
                    groups.clear();
                }
                None => {
                    for g in &mut answer.groups {
                        let punctuation = matches!(
                            g["separatorMode"].as_str(),
                            Some(
                                "autoSpacePunctuation"
                                    | "spacePunctuation"
                                    | "optionalSpacePunctuation"
                            )
                        );
                        let mode = if punctuation {
                            Some(match target.separator {
                                Some("optionalSpace") => "optionalSpacePunctuation",
                                _ => "spacePunctuation",
                            })
                        } else {
                            target.separator
                        };
                        match (mode, g.as_object_mut()) {
                            (Some(m), Some(o)) => {
                                o.insert("separatorMode".into(), json!(m));
                            }
                            (None, Some(o)) => {
                                o.remove("separatorMode");
                            }
                            _ => {}
                        }
                    }
                }
            }
            groups.extend(answer.groups);
            invoked = true;
            closed = answer.closed_set;
            sensitive = answer
                .direction_sensitive
                .unwrap_or(answer.matched_prefix.is_some_and(|n| n > 0));
            wildcard = answer.after_wildcard.unwrap_or_else(|| "none".into());
        }
    }
    let closed_set = if invoked {
        closed.unwrap_or(false)
    } else {
        !target.partial_value && params.next_args.is_empty()
    };
    Ok(Some(Completion {
        start,
        groups,
        closed_set,
        direction_sensitive: target.direction_sensitive || sensitive,
        after_wildcard: wildcard,
    }))
}

/// The descriptors of `agent`: built in, or the client's `getCommands` answer.
async fn descriptors_of(agent: &Agent<'_>) -> Result<Option<Descriptors>, String> {
    Ok(Some(match agent {
        Agent::Root => Descriptors::Table(ROOT.clone()),
        Agent::System => SYSTEM.clone(),
        Agent::Dispatcher => DISPATCHER.clone(),
        Agent::Client(host) => return host.commands().await,
    }))
}

/// The completion of `input` (`getCommandCompletion`'s body), at nesting `depth`.
fn complete<'v>(
    view: &'v CompletionView,
    input: &'v str,
    direction: Direction,
    depth: usize,
) -> LocalBoxFuture<'v, Result<Completion, String>> {
    Box::pin(async move {
        // normalizeCommand: "@x" → "x"; plain text → "dispatcher request <text>".
        let trimmed = trim_start_js(input);
        let normalized = match trimmed.strip_prefix('@') {
            Some(command) => command.to_string(),
            None => format!("dispatcher request {trimmed}"),
        };
        let first = next_word(&normalized, 0).map(|(s, e)| (&normalized[s..e], e));
        let client = |name: &str| view.clients.iter().find(|c| c.name() == name);
        // (the agent named, whether it runs commands)
        let named = first.and_then(|(word, end)| match word {
            "system" => Some((Agent::System, true, end)),
            "dispatcher" => Some((Agent::Dispatcher, true, end)),
            other => client(other).map(|c| (Agent::Client(c), c.spec.executes_commands, end)),
        });
        let app_agent_name = named.as_ref().map(|_| first.expect("named").0.to_string());
        let (agent, parsed_agent, pos) = match named {
            Some((agent, true, end)) => (agent, true, end),
            _ => (Agent::Root, false, 0),
        };
        let tree = descriptors_of(&agent).await?;
        let resolved = resolve(tree.as_ref(), &normalized, pos);
        let parsed_agent_name = (parsed_agent || resolved.commands.is_empty())
            .then_some(app_agent_name)
            .flatten();
        let suffix = &normalized[resolved.suffix_start..];
        let consumed = input.len() - suffix.len();
        let mut result = Completion {
            start: consumed,
            groups: Vec::new(),
            closed_set: true,
            direction_sensitive: false,
            after_wildcard: "none".to_string(),
        };
        let implicitly_committed = normalized.ends_with(is_js_space);
        let sensitive_command = resolved.descriptor.is_some()
            && resolved.matched
            && !implicitly_committed
            && suffix.is_empty()
            && resolved.table.is_some();
        if let (true, Direction::Backward, Some(table)) =
            (sensitive_command, direction, resolved.table)
        {
            let last = resolved.commands.last().map_or(0, String::len);
            result.start = consumed - last;
            result
                .groups
                .push(group("Subcommands", table.names(), Some("optionalSpace")));
            result.direction_sensitive = true;
        } else if let Some(descriptor) = resolved.descriptor {
            let at = Resolution {
                view,
                agent: &agent,
                input,
                suffix,
                commands: &resolved.commands,
                direction,
                depth,
            };
            let parameters = parameter_completion(&at, descriptor).await?;
            let add_subcommands =
                !resolved.matched && parameters.as_ref().is_none_or(|p| p.start <= consumed);
            if let (true, Some(table)) = (add_subcommands, resolved.table) {
                result
                    .groups
                    .push(group("Subcommands", table.names(), Some("optionalSpace")));
            }
            if let Some(p) = parameters {
                result.groups.extend(p.groups);
                result.start = p.start;
                result.closed_set = p.closed_set;
                result.direction_sensitive = sensitive_command || p.direction_sensitive;
                result.after_wildcard = p.after_wildcard;
            }
        } else if let Some(table) = resolved.table {
            result
                .groups
                .push(group("Subcommands", table.names(), Some("optionalSpace")));
        }
        if parsed_agent_name.is_none() && resolved.commands.is_empty() {
            let mut names = vec!["dispatcher".to_string(), "system".to_string()];
            names.extend(
                view.clients
                    .iter()
                    .filter(|c| c.spec.executes_commands)
                    .map(|c| c.name().to_string()),
            );
            result
                .groups
                .push(group("Agent Names", names, Some("optionalSpace")));
        }
        if result.start == 0 {
            result.groups.push(group(
                "Command Prefixes",
                vec!["@".into()],
                Some("optionalSpace"),
            ));
        }
        Ok(result)
    })
}

#[cfg(test)]
mod tests;
