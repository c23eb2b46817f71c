//! The tools a model call offers and where each call goes ([`OfferedTools`]): the built-in
//! tools ([`super::tools`]), the interactive ones (`ask_user`, `ask_user_form`,
//! `propose_action`: [`super::tools::interactive`], answered by clients through the sink),
//! `manage_conversation` ([`super::tools::manage_conversation`], booked with the sink for the
//! turn's end), and every registered [`ToolServer`]'s tools as `server__tool`.
//!
//! A server's tool is called through the map built when it was offered (offered name →
//! server, tool), not by splitting the name at the first `__`: `h_`'s tool `echo`, offered as
//! `h___echo`, would split as server `h`'s tool `_echo`. A tool without a name, or whose name
//! another tool already took, is not offered (logged with its server). A failing or unknown
//! tool becomes an `is_error` result the model sees, never a crashed turn.
//!
//! Who talks to it: the agent loop ([`super::turn`]) offers and calls; `@explain` and the
//! command catalog list what is offered ([`offered_tools`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::questions::ProposalAnswer;
use super::tools::interactive::{self, ASK_USER, ASK_USER_FORM, PROPOSE_ACTION};
use super::tools::{self, manage_conversation, MANAGE_CONVERSATION};
use super::turn_sink::{ToolCallContext, ToolOutput, ToolServer};
use super::SERVER_SEPARATOR;
use super::{valid_tool_name, ToolSpec};

/// The tools of one model call: what the model is offered, and where each server tool's call
/// goes.
#[derive(Debug, Default, Clone)]
pub struct OfferedTools {
    /// The tools as the model sees them (full names).
    pub specs: Vec<ToolSpec>,
    /// Each server tool's offered name → (server, the server's own name of the tool).
    routes: HashMap<String, (String, String)>,
}

impl OfferedTools {
    /// The tools offered with `servers` registered: built-ins (every one with `demo`, else
    /// the real ones: [`tools::real_tool_specs`]), the asking tools, `manage_conversation`,
    /// then every server's tools (servers by name), each as `server__tool` when that is a
    /// valid, untaken, non-empty name.
    pub fn of(servers: &HashMap<String, Arc<dyn ToolServer>>, demo: bool) -> OfferedTools {
        let mut specs = if demo {
            tools::builtin_tool_specs()
        } else {
            let has_time_tool = servers
                .values()
                .flat_map(|s| s.tools())
                .any(|t| t.name.ends_with(tools::GET_CURRENT_TIME));
            tools::real_tool_specs(has_time_tool)
        };
        specs.extend(interactive::specs());
        specs.push(tools::manage_conversation_spec());
        let mut taken: HashSet<String> = specs.iter().map(|s| s.name.clone()).collect();
        let mut routes = HashMap::new();
        let mut names: Vec<_> = servers.keys().collect();
        names.sort();
        for server in names {
            for t in servers[server].tools() {
                if t.name.is_empty() {
                    log::warn!("a tool of server {server:?} has no name; not offered");
                    continue;
                }
                let name = format!("{server}{SERVER_SEPARATOR}{}", t.name);
                if !valid_tool_name(&name) {
                    log::warn!(
                        "tool {name:?} of server {server:?} has an invalid name; not offered"
                    );
                    continue;
                }
                if !taken.insert(name.clone()) {
                    log::warn!(
                        "tool {name:?} of server {server:?} is offered already; offered once"
                    );
                    continue;
                }
                routes.insert(name.clone(), (server.clone(), t.name.clone()));
                specs.push(ToolSpec { name, ..t });
            }
        }
        OfferedTools { specs, routes }
    }
}

/// The tools offered to the model with `servers` registered (see [`OfferedTools::of`]).
pub fn offered_tools(servers: &HashMap<String, Arc<dyn ToolServer>>, demo: bool) -> Vec<ToolSpec> {
    OfferedTools::of(servers, demo).specs
}

/// `propose_action`: shows the proposed call to everyone, then runs it as proposed, as
/// edited (saying so), or not at all.
async fn propose(
    input: Value,
    servers: &HashMap<String, Arc<dyn ToolServer>>,
    context: ToolCallContext<'_>,
    offered: &OfferedTools,
) -> ToolOutput {
    let sink = context.sink;
    let proposal = match interactive::proposal(&input, &offered.specs) {
        Ok(proposal) => proposal,
        Err(e) => return ToolOutput::error(e),
    };
    let tool = proposal.tool.clone();
    let proposed = proposal.input.clone();
    match sink.propose_action(proposal).await {
        Err(e) => ToolOutput::error(e),
        Ok(ProposalAnswer::Cancelled) => {
            ToolOutput::error(format!("the user cancelled the proposed {tool} call"))
        }
        Ok(ProposalAnswer::Run(input)) if input == proposed => {
            Box::pin(call_tool(&tool, input, servers, context, offered)).await
        }
        Ok(ProposalAnswer::Run(input)) => {
            let shown = input.to_string();
            let mut output = Box::pin(call_tool(&tool, input, servers, context, offered)).await;
            if !output.is_error {
                output.text = format!("(the user changed the input to {shown}) {}", output.text);
            }
            output
        }
    }
}

/// Runs one tool call; `offered` are the model call's tools (what `propose_action` may
/// propose, and where a server tool's call goes).
pub async fn call_tool(
    name: &str,
    input: Value,
    servers: &HashMap<String, Arc<dyn ToolServer>>,
    context: ToolCallContext<'_>,
    offered: &OfferedTools,
) -> ToolOutput {
    let sink = context.sink;
    if !valid_tool_name(name) {
        return ToolOutput::error(format!(
            "invalid tool name {name:?}: must match ^[a-zA-Z0-9_-]{{1,64}}$"
        ));
    }
    match name {
        ASK_USER => return interactive::ask_user(&input, sink).await.into(),
        ASK_USER_FORM => return interactive::ask_user_form(&input, sink).await.into(),
        PROPOSE_ACTION => return propose(input, servers, context, offered).await,
        MANAGE_CONVERSATION => {
            return manage_conversation::run(&input, sink, context.ask_before_conversation_actions)
                .await
                .into()
        }
        _ => {}
    }
    // A built-in runs only when offered: a real model is not offered the demo tools.
    if offered.specs.iter().any(|s| s.name == name) {
        if let Some(result) = tools::run_builtin_tool(name, &input) {
            return result.into();
        }
    }
    if let Some((server, tool)) = offered.routes.get(name) {
        if let Some(s) = servers.get(server) {
            return s.call(tool, input, context).await;
        }
    }
    match name.split_once(SERVER_SEPARATOR) {
        Some((server, _)) if !servers.contains_key(server) => {
            ToolOutput::error(format!("no tool server named {server:?}"))
        }
        _ => ToolOutput::error(format!("unknown tool {name:?}")),
    }
}
