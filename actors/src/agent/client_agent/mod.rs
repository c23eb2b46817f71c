//! Client-hosted agents, the pure part: what `registerClientAgent` declares (a name, a
//! manifest with an action schema, the agent's interface) read into a [`ClientAgentSpec`],
//! whose actions the model is offered as tools named `<agent>__<action>`; the
//! `executeAction` arguments a call sends; and how the `ActionResult` the client answers
//! becomes the tool result text.
//!
//! A client agent lives on a client (TypeAgent's Android app hosts `androidDevice`): the
//! server calls it with an `invoke executeAction` on the registering socket's
//! `agent:<name>` channel. The registry of a conversation's client agents is the
//! conversation's (`conversation/client_agents.rs`); the invokes and their answers are the
//! transport's (`src/transport/hosted_agents.rs`). Every bound is here.
//!
//! # Layout
//! - this file: names, bounds, [`parse_registration`], [`SessionContext`] (the
//!   `ContextParams` of every invoke), [`execute_action_args`], [`execute_command_args`],
//!   [`forwarded_args`], the lifecycle invokes ([`Lifecycle`], [`initialize_args`],
//!   [`agent_context_id`]), [`action_result_text`], [`CallError`].
//! - [`choice`]: what an `ActionResult` asks beyond its display (`pendingChoice`,
//!   `dynamicDisplayId`) and the `handleChoice` that answers a choice.
//! - [`command`]: `@<agent> …` commands as TypeAgent describes them (`getCommands`'
//!   descriptors) and its parameter parser (`parseParams`).
//! - [`schema`]: the type model both readers produce, the actions found in it and their
//!   parameters as JSON Schema (shared types once, under `$defs`; bounded as they are written).
//! - [`ts_schema`]: TypeScript schema files (`format: "ts"`).
//! - [`pas_schema`]: JSON schema files (`format: "pas"`: TypeAgent's parsed schema, or JSON
//!   Schema definitions).

pub mod choice;
pub mod command;
pub mod pas_schema;
pub mod schema;
pub mod ts_schema;

#[cfg(test)]
mod tests;

use std::time::Duration;

use serde_json::{json, Map, Value};

pub use schema::ClientAction;
use schema::{ActionType, Schema, SchemaBudget};

use super::{valid_tool_name, ToolSpec};
use crate::protocol::{RpcError, RpcResult};

/// Largest manifest (as JSON text) a registration may carry: a schema file is a few KiB
/// (Android's is 5 KiB); this bounds the parse and what the conversation keeps.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;
/// Most actions one agent may declare: each is a tool in every model request.
pub const MAX_ACTIONS_PER_AGENT: usize = 64;
/// Most JSON values (objects, arrays, strings, numbers… each counting one) in one action's
/// parameters schema. A real action is a few dozen (Android's largest is under 40); OpenAI's
/// strict mode stops at 5,000 properties. With shared types written once (`$defs`) a schema
/// is about as large as its source, so this is reached only by a schema meant to be huge.
pub const MAX_TOOL_SCHEMA_NODES: usize = 4096;
/// Longest parameters schema of one action, as compact JSON: it goes to the model with every
/// request (64 KiB is some 16,000 tokens); 16 bytes per value of [`MAX_TOOL_SCHEMA_NODES`].
pub const MAX_TOOL_SCHEMA_BYTES: usize = 64 * 1024;
/// Most JSON values in the parameters schemas of all of one agent's actions: four full-size
/// actions' worth, as the manifest itself may be at most [`MAX_MANIFEST_BYTES`].
pub const MAX_AGENT_SCHEMA_NODES: usize = 4 * MAX_TOOL_SCHEMA_NODES;
/// Longest the parameters schemas of all of one agent's actions may be together, as compact
/// JSON: as much as the manifest ([`MAX_MANIFEST_BYTES`]). A conversation's client agents
/// add at most [`MAX_AGENTS_PER_CONVERSATION`] × this to a model request.
pub const MAX_AGENT_SCHEMA_BYTES: usize = MAX_MANIFEST_BYTES;
/// Most client agents one socket may host (registered or being registered).
pub const MAX_AGENTS_PER_CONNECTION: usize = 8;
/// Most client agents one conversation may have, over all its sockets.
pub const MAX_AGENTS_PER_CONVERSATION: usize = 16;
/// Most server → client invokes one socket may have unanswered; one runs per conversation
/// at a time (a turn awaits each tool call), so this is reached only by a socket hosting
/// agents in many busy conversations.
pub const MAX_PENDING_INVOKES_PER_CONNECTION: usize = 64;
/// Longest tool result taken from an `ActionResult`, in characters; the rest is cut (it
/// goes to the model with every later request of the turn).
pub const MAX_RESULT_CHARS: usize = 16 * 1024;
/// How long a call waits for the client's answer by default (`--client-agent-timeout`).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest client agent name: with `__` and an action name it must fit a 64-character tool
/// name.
pub const MAX_AGENT_NAME_CHARS: usize = 32;
/// Names a client agent may not take: the built-in agents. (The built-in tools and the
/// `--tool-server` prefixes are refused by the conversation, which knows them.)
/// The top-level `@` commands are reserved too: `@<agent>` is tried as an agent first (as in
/// TypeAgent), so an agent named `help` would hide `@help`.
pub const RESERVED_AGENT_NAMES: &[&str] = &[
    "chat",
    "system",
    "dispatcher",
    "conversation",
    "conv",
    "help",
    "compact",
    "explain",
    "translate",
];
/// The agent-rpc method that runs an action.
pub const EXECUTE_ACTION: &str = "executeAction";
/// The agent-rpc method that runs one of the agent's `@` commands.
pub const EXECUTE_COMMAND: &str = "executeCommand";
/// The agent-rpc method that answers the agent's command tree (`CommandDescriptors`).
pub const GET_COMMANDS: &str = "getCommands";
/// The agent-rpc method that completes a command's parameters.
pub const GET_COMMAND_COMPLETION: &str = "getCommandCompletion";
/// The agent-rpc call that tells an agent its `executeAction` was cancelled.
pub const CANCEL_ACTION: &str = "cancelAction";
/// The agent-rpc method that answers one of the agent's `pendingChoice`s
/// (`respondToChoice`).
pub const HANDLE_CHOICE: &str = "handleChoice";
/// The agent-rpc method that answers a dynamic display (dispatcher `getDynamicDisplay`).
pub const GET_DYNAMIC_DISPLAY: &str = "getDynamicDisplay";
/// The agent-rpc method that answers a template's schema (dispatcher `getTemplateSchema`).
pub const GET_TEMPLATE_SCHEMA: &str = "getTemplateSchema";
/// The agent-rpc method that completes a template's property (dispatcher
/// `getTemplateCompletion`).
pub const GET_TEMPLATE_COMPLETION: &str = "getTemplateCompletion";
/// The agent-rpc method that creates the agent's context at registration; its answer
/// `{contextId}` is sent back as `agentContextId` in every later `ContextParams`.
pub const INITIALIZE_AGENT_CONTEXT: &str = "initializeAgentContext";
/// The agent-rpc method that enables (at registration) or disables (when the agent goes) one
/// of its schemas: `{…ContextParams, enable, schemaName}`.
pub const UPDATE_AGENT_CONTEXT: &str = "updateAgentContext";
/// The agent-rpc method that closes the agent's context when the agent goes.
pub const CLOSE_AGENT_CONTEXT: &str = "closeAgentContext";
/// The agent-rpc method that starts the agent's background work once its schemas are
/// enabled.
pub const START_BACKGROUND_TASKS: &str = "startBackgroundTasks";
/// The agent-rpc method that stops the agent's background work when the agent goes (first).
pub const STOP_BACKGROUND_TASKS: &str = "stopBackgroundTasks";
/// Most client agents' choices (`pendingChoice`) one conversation keeps waiting for an
/// answer. TypeAgent keeps every route until it is answered; a card is answered within
/// minutes or never, so the oldest is forgotten when a new one would pass this (answering it
/// then says `Choice not found or expired`). Each holds at most a form within its bounds
/// (`MAX_FORM_FIELDS` questions of `MAX_FORM_CHOICES` choices), about 0.5 MB at worst.
pub const MAX_PENDING_AGENT_CHOICES: usize = 16;
/// Longest `choiceId` of a `pendingChoice`, in characters (it is a key the conversation
/// keeps; TypeAgent's agents use UUIDs, 36).
pub const MAX_CHOICE_ID_CHARS: usize = 256;

/// What a client agent offers, read from its registration.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientAgentSpec {
    /// The agent's name (its channel is `agent:<name>`, its tools `<name>__<action>`).
    pub name: String,
    /// The manifest's `description`.
    pub description: String,
    /// The manifest's `emojiChar` (shown by `getStatus`).
    pub emoji: String,
    /// The actions of its schema (and sub-schemas), in order.
    pub actions: Vec<ClientAction>,
    /// `agentInterface` lists `executeAction`: without it the actions cannot be run, so
    /// none is offered to the model.
    pub executes_actions: bool,
    /// `agentInterface` lists `executeCommand`: `@<name> …` runs its commands (TypeAgent's
    /// `isCommandEnabled`), and completion lists it under `Agent Names`.
    pub executes_commands: bool,
    /// `agentInterface` lists `getCommands`: its command tree is asked for when `@<name>` is
    /// completed or run (without it the agent has no commands).
    pub lists_commands: bool,
    /// `agentInterface` lists `getCommandCompletion`: its parameters are completed by it.
    pub completes_commands: bool,
    /// `agentInterface` lists `handleChoice`: `respondToChoice` for one of its
    /// `pendingChoice`s is handed to it (else `Agent '<n>' does not support choices`).
    pub handles_choices: bool,
    /// `agentInterface` lists `getDynamicDisplay`: the dispatcher method is forwarded to it.
    pub dynamic_display: bool,
    /// `agentInterface` lists `getTemplateSchema`: the dispatcher method is forwarded to it.
    pub template_schema: bool,
    /// `agentInterface` lists `getTemplateCompletion`: the dispatcher method is forwarded to
    /// it.
    pub template_completion: bool,
    /// The lifecycle methods it lists and the schemas they name.
    pub lifecycle: Lifecycle,
}

/// A client agent's lifecycle, as TypeAgent's dispatcher runs it on an agent-rpc agent: at
/// registration `initializeAgentContext`, then `updateAgentContext(enable: true)` per schema,
/// then `startBackgroundTasks`; when it goes (unregistered, its client left, the
/// conversation deleted) `stopBackgroundTasks`, `updateAgentContext(enable: false)` per
/// schema, then `closeAgentContext`. Only the methods its `agentInterface` lists are sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// `agentInterface` lists `initializeAgentContext`: called at registration, which fails
    /// when it does.
    pub initializes: bool,
    /// `agentInterface` lists `updateAgentContext`: each schema is enabled at registration
    /// and disabled when the agent goes.
    pub updates: bool,
    /// `agentInterface` lists `closeAgentContext`: called last when the agent goes.
    pub closes: bool,
    /// `agentInterface` lists `startBackgroundTasks`: called once its schemas are enabled.
    pub starts_tasks: bool,
    /// `agentInterface` lists `stopBackgroundTasks`: called first when the agent goes.
    pub stops_tasks: bool,
    /// The `schemaName`s of its schemas, in manifest order: the agent's name for its own
    /// schema, `<name>.<sub>` for a sub-manifest's (TypeAgent's names).
    pub schema_names: Vec<String>,
}

impl Lifecycle {
    /// The invokes that follow `initializeAgentContext` at registration, in order:
    /// `updateAgentContext(enable: true)` per schema, then `startBackgroundTasks`.
    pub fn startup(&self, session: &SessionContext) -> Vec<(&'static str, Value)> {
        let mut steps = Vec::new();
        if self.updates {
            for schema in &self.schema_names {
                steps.push((UPDATE_AGENT_CONTEXT, update_args(session, true, schema)));
            }
        }
        if self.starts_tasks {
            steps.push((START_BACKGROUND_TASKS, json!([session.params()])));
        }
        steps
    }

    /// The invokes that close the agent when it goes, in order: `stopBackgroundTasks`,
    /// `updateAgentContext(enable: false)` per schema, then `closeAgentContext`.
    pub fn teardown(&self, session: &SessionContext) -> Vec<(&'static str, Value)> {
        let mut steps = Vec::new();
        if self.stops_tasks {
            steps.push((STOP_BACKGROUND_TASKS, json!([session.params()])));
        }
        if self.updates {
            for schema in &self.schema_names {
                steps.push((UPDATE_AGENT_CONTEXT, update_args(session, false, schema)));
            }
        }
        if self.closes {
            steps.push((CLOSE_AGENT_CONTEXT, json!([session.params()])));
        }
        steps
    }
}

/// The arguments of `initializeAgentContext`: `{settings, optionsCallBack}` with neither (a
/// client agent gets no `AppAgentInitSettings` from Roundtable, so no options callbacks
/// either; JSON drops TypeAgent's `undefined`s).
pub fn initialize_args() -> Value {
    json!([{}])
}

/// The `agentContextId` an `initializeAgentContext` answer gives: its `contextId`
/// (TypeAgent's agent-rpc server answers `{contextId}`; its client keeps that object as the
/// agent context and sends `agentContext.contextId`). Absent when the answer has none.
pub fn agent_context_id(result: Option<&Value>) -> Option<Value> {
    result?.get("contextId").filter(|id| !id.is_null()).cloned()
}

/// The arguments of `updateAgentContext`: `{…ContextParams, enable, schemaName}`.
fn update_args(session: &SessionContext, enable: bool, schema_name: &str) -> Value {
    let mut params = session.params();
    params.insert("enable".into(), json!(enable));
    params.insert("schemaName".into(), json!(schema_name));
    json!([params])
}

impl ClientAgentSpec {
    /// The tools the model is offered (unprefixed: the agent loop adds `<name>__`).
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        if !self.executes_actions {
            return Vec::new();
        }
        self.actions
            .iter()
            .map(|a| ToolSpec {
                name: a.name.clone(),
                description: if a.description.is_empty() {
                    format!("Action {} of the client agent {}.", a.name, self.name)
                } else {
                    a.description.clone()
                },
                input_schema: a.input_schema.clone(),
            })
            .collect()
    }
}

/// Whether `name` can be a client agent's name: 1 to [`MAX_AGENT_NAME_CHARS`] of
/// `[A-Za-z0-9_-]`, without `__` (the tool prefix separator) and not ending in `_` (so
/// `<name>__<action>` splits back at the right place).
pub fn valid_agent_name(name: &str) -> bool {
    (1..=MAX_AGENT_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
        && !name.ends_with('_')
}

/// Reads a registration: the name's form, the manifest's size, its schema (and
/// sub-manifests' schemas) into actions whose tool names are valid, their parameters schemas
/// within the bounds. Errors carry the exact texts of [`RpcError`].
///
/// Every schema is read and its action types found before any parameters schema is written:
/// the number of actions and their names are checked first, so a schema with too many
/// actions costs no conversion.
pub fn parse_registration(
    name: &str,
    manifest: &Map<String, Value>,
    agent_interface: &[String],
) -> RpcResult<ClientAgentSpec> {
    if !valid_agent_name(name) {
        return Err(RpcError::ClientAgentName(name.to_string()));
    }
    let bytes = serde_json::to_string(manifest).map_or(usize::MAX, |s| s.len());
    if bytes > MAX_MANIFEST_BYTES {
        return Err(RpcError::ClientAgentManifestTooLarge {
            name: name.to_string(),
            bytes,
            limit: MAX_MANIFEST_BYTES,
        });
    }
    let invalid = |reason: String| RpcError::ClientAgentManifest {
        name: name.to_string(),
        reason,
    };
    let mut schemas = Vec::new();
    read_manifest(manifest, name, 0, &mut schemas).map_err(invalid)?;
    let declared: usize = schemas.iter().map(|s| s.action_types.len()).sum();
    if declared > MAX_ACTIONS_PER_AGENT {
        return Err(invalid(format!(
            "{declared} actions declared; the limit is {MAX_ACTIONS_PER_AGENT}"
        )));
    }
    for a in schemas.iter().flat_map(|s| &s.action_types) {
        if a.name.is_empty() {
            return Err(invalid(format!(
                "type '{}' has an empty actionName: an action name is 1 or more letters, \
                 digits, '-' or '_'",
                a.type_name
            )));
        }
        if !valid_tool_name(&format!("{name}__{}", a.name)) {
            return Err(invalid(format!(
                "action '{}' cannot be offered as the tool '{name}__{}': a tool name is 1 to 64 \
                 letters, digits, '-' or '_'",
                a.name, a.name
            )));
        }
    }
    let mut budget = SchemaBudget::default();
    let mut actions = Vec::with_capacity(declared);
    for s in &schemas {
        for a in &s.action_types {
            let action = s
                .schema
                .action(a, &s.schema_name, &mut budget)
                .map_err(|e| invalid(format!("schema of '{}': {e}", s.schema_name)))?;
            actions.push(action);
        }
    }
    let implements = |method: &str| agent_interface.iter().any(|m| m == method);
    let lifecycle = Lifecycle {
        initializes: implements(INITIALIZE_AGENT_CONTEXT),
        updates: implements(UPDATE_AGENT_CONTEXT),
        closes: implements(CLOSE_AGENT_CONTEXT),
        starts_tasks: implements(START_BACKGROUND_TASKS),
        stops_tasks: implements(STOP_BACKGROUND_TASKS),
        schema_names: schemas.iter().map(|s| s.schema_name.clone()).collect(),
    };
    let text = |key: &str| {
        manifest
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(ClientAgentSpec {
        name: name.to_string(),
        description: text("description"),
        emoji: text("emojiChar"),
        actions,
        executes_actions: implements(EXECUTE_ACTION),
        executes_commands: implements(EXECUTE_COMMAND),
        lists_commands: implements(GET_COMMANDS),
        completes_commands: implements(GET_COMMAND_COMPLETION),
        handles_choices: implements(HANDLE_CHOICE),
        dynamic_display: implements(GET_DYNAMIC_DISPLAY),
        template_schema: implements(GET_TEMPLATE_SCHEMA),
        template_completion: implements(GET_TEMPLATE_COMPLETION),
        lifecycle,
    })
}

/// Sub-manifests nest at most this deep.
const MAX_SUB_MANIFEST_DEPTH: usize = 4;

/// One schema of a registration, read: its declarations and the action types found in it.
struct ReadSchema {
    /// `schemaName` of its actions: the agent's name, or `<agent>.<sub>`.
    schema_name: String,
    /// Its declarations.
    schema: Schema,
    /// Its action types, in order.
    action_types: Vec<ActionType>,
}

/// The schemas of an `ActionManifest` (its `schema`, then its `subActionManifests`, named
/// `<schema>.<sub>`), read and appended to `out`. An action name in two schemas is an error.
fn read_manifest(
    manifest: &Map<String, Value>,
    schema_name: &str,
    depth: usize,
    out: &mut Vec<ReadSchema>,
) -> Result<(), String> {
    if let Some(schema) = manifest.get("schema").filter(|s| !s.is_null()) {
        let schema = schema
            .as_object()
            .ok_or_else(|| format!("the schema of '{schema_name}' is not an object"))?;
        let read = read_schema(schema, schema_name)?;
        for action in &read.action_types {
            let elsewhere = out.iter().flat_map(|s| &s.action_types);
            if elsewhere.into_iter().any(|a| a.name == action.name) {
                return Err(format!(
                    "action '{}' is declared in two schemas",
                    action.name
                ));
            }
        }
        out.push(read);
    }
    let Some(subs) = manifest.get("subActionManifests").filter(|s| !s.is_null()) else {
        return Ok(());
    };
    let subs = subs
        .as_object()
        .ok_or("\"subActionManifests\" is not an object")?;
    if depth >= MAX_SUB_MANIFEST_DEPTH && !subs.is_empty() {
        return Err(format!(
            "sub-manifests nest deeper than {MAX_SUB_MANIFEST_DEPTH} levels"
        ));
    }
    for (sub, m) in subs {
        let m = m
            .as_object()
            .ok_or_else(|| format!("sub-manifest '{sub}' is not an object"))?;
        read_manifest(m, &format!("{schema_name}.{sub}"), depth + 1, out)?;
    }
    Ok(())
}

/// One `SchemaManifest` (`{schemaType, schemaFile: {format, content}}`), read.
fn read_schema(schema: &Map<String, Value>, schema_name: &str) -> Result<ReadSchema, String> {
    let at = |e: String| format!("schema of '{schema_name}': {e}");
    let entry = match schema.get("schemaType") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Object(o)) => o.get("action").and_then(Value::as_str),
        Some(_) => return Err(at("\"schemaType\" is neither a string nor an object".into())),
    };
    let file = match schema.get("schemaFile") {
        Some(Value::Object(file)) => file,
        Some(Value::String(path)) => {
            return Err(at(format!(
                "\"schemaFile\" names a file ({path:?}); a client agent sends its schema inline as \
                 {{\"format\": \"ts\", \"content\": …}}"
            )))
        }
        _ => return Err(at("\"schemaFile\" is missing".into())),
    };
    let content = file
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| at("\"schemaFile.content\" is not a string".into()))?;
    let (decls, entry) = match file.get("format").and_then(Value::as_str) {
        Some("ts") => (
            ts_schema::parse(content).map_err(at)?,
            entry.map(str::to_string),
        ),
        Some("pas" | "json") => {
            let (decls, pas_entry) = pas_schema::parse(content).map_err(at)?;
            (decls, pas_entry.or(entry.map(str::to_string)))
        }
        other => {
            return Err(at(format!(
                "unsupported schema format {}: use \"ts\" or \"pas\"",
                other.map_or("(none)".to_string(), |f| format!("{f:?}"))
            )))
        }
    };
    let schema = Schema::new(decls);
    let action_types = schema.action_types(entry.as_deref()).map_err(at)?;
    Ok(ReadSchema {
        schema_name: schema_name.to_string(),
        schema,
        action_types,
    })
}

/// A client agent's session context, as its invokes name it (TypeAgent's `ContextParams`):
/// `contextId` 0 (one session context per registration), no storage offered, the
/// registration's `sessionContextId` (a UUID minted at registration, as TypeAgent mints one
/// per session context) and, once `initializeAgentContext` answered one, `agentContextId`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionContext {
    /// `sessionContextId`.
    pub id: String,
    /// `agentContextId`: the `contextId` of the `initializeAgentContext` answer; `None` when
    /// the agent does not list that method (or answered none).
    pub agent_context_id: Option<Value>,
}

impl SessionContext {
    /// A session context with the id `id` and no agent context yet.
    pub fn new(id: impl Into<String>) -> SessionContext {
        SessionContext {
            id: id.into(),
            agent_context_id: None,
        }
    }

    /// Its `ContextParams` (`agentContextId` left out when there is none, as JSON drops
    /// TypeAgent's `undefined`).
    pub fn params(&self) -> Map<String, Value> {
        let mut params = Map::new();
        params.insert("contextId".into(), json!(0));
        params.insert("hasInstanceStorage".into(), json!(false));
        params.insert("hasSessionStorage".into(), json!(false));
        params.insert("sessionContextId".into(), json!(self.id));
        if let Some(id) = &self.agent_context_id {
            params.insert("agentContextId".into(), id.clone());
        }
        params
    }
}

/// The argument of an invoke that names only the session context (`getDynamicDisplay`,
/// `getTemplateSchema`, `getTemplateCompletion`): one object, the session's params and
/// the method's own `fields`, as TypeAgent's agent-rpc client spreads them.
pub fn forwarded_args(session: &SessionContext, fields: Map<String, Value>) -> Value {
    let mut params = session.params();
    params.extend(fields);
    json!([params])
}

/// `ActionContextParams`: the session context's, plus the call's `actionContextId` (distinct
/// per call of a registration) and `isFromReasoningLoop`.
fn action_context_params(
    session: &SessionContext,
    action_context_id: u64,
    from_reasoning_loop: bool,
) -> Map<String, Value> {
    let mut params = session.params();
    params.insert("actionContextId".into(), json!(action_context_id));
    params.insert("isFromReasoningLoop".into(), json!(from_reasoning_loop));
    params
}

/// The arguments of the `executeAction` invoke for `action` with the model's `input`, as
/// TypeAgent's agent-rpc client sends them: one object with the `action` (`schemaName`,
/// `actionName`, `parameters` — left out when the action declares none and none were
/// given) and the action context's params (`isFromReasoningLoop`: the model chose the action
/// in its tool loop).
pub fn execute_action_args(
    action: &ClientAction,
    input: Value,
    action_context_id: u64,
    session: &SessionContext,
) -> Value {
    let mut act = json!({"schemaName": action.schema_name, "actionName": action.name});
    let empty = input.as_object().is_some_and(Map::is_empty);
    if action.has_parameters || !empty {
        act["parameters"] = input;
    }
    let mut params = action_context_params(session, action_context_id, true);
    params.insert("action".into(), act);
    json!([params])
}

/// The arguments of the `executeCommand` invoke: the sub-command path and the parsed
/// parameters (`params` left out when the command declares none, as JSON drops
/// `undefined`); typed by a user, so `isFromReasoningLoop` is false.
pub fn execute_command_args(
    commands: &[String],
    params: Option<Value>,
    action_context_id: u64,
    session: &SessionContext,
) -> Value {
    let mut args = action_context_params(session, action_context_id, false);
    args.insert("commands".into(), json!(commands));
    if let Some(params) = params {
        args.insert("params".into(), params);
    }
    json!([args])
}

/// The tool result of an `ActionResult`: an `error` is a failed tool call with that text;
/// otherwise `historyText`, else the `displayContent` as text, else `resultValue` as JSON,
/// else `done`. Cut to [`MAX_RESULT_CHARS`].
pub fn action_result_text(result: Option<&Value>) -> Result<String, String> {
    let text = match result {
        None | Some(Value::Null) => "done".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => {
            if let Some(e) = o.get("error").filter(|e| !e.is_null()) {
                let e = e.as_str().map_or_else(|| e.to_string(), str::to_string);
                return Err(cut(e));
            }
            match o.get("historyText").and_then(Value::as_str) {
                Some(h) if !h.trim().is_empty() => h.to_string(),
                _ => match o.get("displayContent").map(display_text) {
                    Some(d) if !d.trim().is_empty() => d,
                    _ => match o.get("resultValue").filter(|v| !v.is_null()) {
                        Some(v) => v.to_string(),
                        None => "done".to_string(),
                    },
                },
            }
        }
        Some(other) => other.to_string(),
    };
    Ok(cut(text))
}

/// A `DisplayContent` as plain text: a string, lines, a table (rows of cells), or
/// `{type, content}` holding one of those.
fn display_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Array(cells) => cells
                    .iter()
                    .map(display_text)
                    .collect::<Vec<_>>()
                    .join(" | "),
                other => display_text(other),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => o.get("content").map(display_text).unwrap_or_default(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `text` cut to [`MAX_RESULT_CHARS`] characters, saying so.
fn cut(text: String) -> String {
    match text.char_indices().nth(MAX_RESULT_CHARS) {
        Some((at, _)) => format!("{}… (cut at {MAX_RESULT_CHARS} characters)", &text[..at]),
        None => text,
    }
}

/// Why a call to a client agent's action gave no result; the text is the tool error the
/// model sees.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The agent was unregistered (or its socket left) before the call went out.
    #[error("client agent '{0}' is not registered any more")]
    NotRegistered(String),
    /// The hosting socket closed before answering.
    #[error("the client hosting agent '{0}' disconnected before answering")]
    Disconnected(String),
    /// The agent was unregistered (or its socket left the conversation) while the call
    /// waited.
    #[error("client agent '{0}' was unregistered before answering")]
    Unregistered(String),
    /// No answer in time (`--client-agent-timeout`).
    #[error("client agent '{name}' did not answer within {seconds} s")]
    Timeout {
        /// The agent.
        name: String,
        /// The timeout.
        seconds: f64,
    },
    /// The hosting socket has [`MAX_PENDING_INVOKES_PER_CONNECTION`] calls unanswered.
    #[error("the client hosting agent '{name}' has too many calls unanswered (limit {limit})")]
    Busy {
        /// The agent.
        name: String,
        /// The bound.
        limit: usize,
    },
    /// The client answered `invokeError`.
    #[error("client agent '{name}' failed: {error}")]
    Failed {
        /// The agent.
        name: String,
        /// The `invokeError.error` text.
        error: String,
    },
}
