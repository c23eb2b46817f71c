//! The conversation's app agents as TypeAgent's dispatcher names and describes them: the
//! built-in `chat` agent (the model and its tools), the command agents (`system`,
//! `dispatcher`, `conversation`) and the client agents registered here. Answers
//! `getAgentSchemas` and decides between `Unknown app agent: <name>` and the
//! `… not supported by '<name>'` errors of `getDynamicDisplay`, `getTemplateSchema` and
//! `getTemplateCompletion` (no Roundtable agent has dynamic displays or templates).
//!
//! Who talks to it: the dispatcher (`dispatcher.rs`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{Conversation, AGENT_SOURCE};
use crate::agent::client_agent::RESERVED_AGENT_NAMES;
use crate::agent::turn::{offered_tools, SERVER_SEPARATOR};
use crate::protocol::{RpcError, RpcResult};

/// The chat agent's emoji in `getAgentSchemas`.
const CHAT_EMOJI: &str = "💬";

impl Conversation {
    /// `Ok` when `name` is one of this conversation's agents, else TypeAgent's
    /// `Unknown app agent: <name>`.
    pub(super) fn known_agent(&self, name: &str) -> RpcResult<()> {
        let known = RESERVED_AGENT_NAMES.contains(&name)
            || self.client_agents().iter().any(|a| a.name == name);
        if known {
            Ok(())
        } else {
            Err(RpcError::Message(format!("Unknown app agent: {name}")))
        }
    }

    /// `getAgentSchemas(agentName?)`: every agent with actions, as TypeAgent's
    /// `AgentSchemaInfo[]` (`[{name, emoji, description, subSchemas: [{schemaName,
    /// description, actions: [{name, description}]}]}]`). The chat agent's actions are its
    /// tools (`chat`, and `chat.<server>` per `--tool-server`); a client agent's are its
    /// schema's actions, grouped by schema. Only `agent` when given (unknown: `[]`).
    pub(super) fn agent_schemas(&self, agent: Option<&str>) -> Value {
        let wanted = |name: &str| agent.is_none_or(|a| a == name);
        let mut out = Vec::new();
        if wanted(AGENT_SOURCE) {
            let mut schemas: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            let demo = self.provider().offers_demo_tools();
            for tool in offered_tools(&self.setup.runtime.tool_servers, demo) {
                let (schema, name) = match tool.name.split_once(SERVER_SEPARATOR) {
                    Some((server, name)) => (format!("{AGENT_SOURCE}.{server}"), name.to_string()),
                    None => (AGENT_SOURCE.to_string(), tool.name.clone()),
                };
                schemas
                    .entry(schema)
                    .or_default()
                    .push(json!({"name": name, "description": tool.description}));
            }
            let sub_schemas: Vec<Value> = schemas
                .into_iter()
                .map(|(schema, actions)| {
                    let description = match schema.split_once('.') {
                        Some((_, server)) => format!("Tools of the tool server {server}"),
                        None => "The chat agent's own tools".to_string(),
                    };
                    json!({"schemaName": schema, "description": description, "actions": actions})
                })
                .collect();
            out.push(json!({
                "name": AGENT_SOURCE,
                "emoji": CHAT_EMOJI,
                "description": "Roundtable's chat agent: the model and its tools",
                "subSchemas": sub_schemas,
            }));
        }
        for info in self.client_agents() {
            if !wanted(&info.name) || !info.executes_actions || info.actions.is_empty() {
                continue;
            }
            let mut schemas: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
            for action in &info.actions {
                schemas
                    .entry(&action.schema_name)
                    .or_default()
                    .push(json!({"name": action.name, "description": action.description}));
            }
            // The agent's own schema first, its sub-schemas after (TypeAgent's order).
            let mut sub_schemas: Vec<(&str, Vec<Value>)> = schemas.into_iter().collect();
            sub_schemas.sort_by_key(|(schema, _)| (*schema != info.name, *schema));
            let sub_schemas: Vec<Value> = sub_schemas
                .into_iter()
                .map(|(schema, actions)| {
                    json!({"schemaName": schema, "description": info.description, "actions": actions})
                })
                .collect();
            out.push(json!({
                "name": info.name,
                "emoji": info.emoji,
                "description": info.description,
                "subSchemas": sub_schemas,
            }));
        }
        Value::Array(out)
    }
}
