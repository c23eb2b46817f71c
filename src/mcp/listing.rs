//! A server's tools: `tools/list` read page by page ([`list_tools`]), at most
//! [`MAX_TOOLS_PER_SERVER`] tools and [`MAX_TOOL_PAGES`] pages, within the server's list
//! time-out, each tool checked on its own (`check_tool`: a tool that cannot be offered is
//! skipped with a warning naming it, the others stay); and the refresh that
//! `notifications/tools/list_changed` asks for ([`refresher`]): one at a time per server, the
//! notifications that come meanwhile asking for one more, its failure shown in the status.
//!
//! Why pages are read here and not with rmcp's `list_all_tools`: that one collects every page
//! before anything can count them (a server that never stops paging grew the process by
//! gigabytes), and parses the tools of a page together (one bad tool lost all of them).
//!
//! Who talks to it: the supervisor ([`super::server`]) lists once connected and runs the
//! refresher for the connection's life; the handler ([`super::handler`]) wakes the
//! refresher.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientRequest, PaginatedRequestParams, ServerResult};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use roundtable_actors::agent::client_agent::schema::json_nodes;
use roundtable_actors::agent::client_agent::{MAX_TOOL_SCHEMA_BYTES, MAX_TOOL_SCHEMA_NODES};
use roundtable_actors::agent::turn::SERVER_SEPARATOR;
use roundtable_actors::agent::{valid_tool_name, ToolSpec};
use serde_json::Value;

use super::shared::Shared;
use super::wire::SKIPPED_KEY;

/// Tools one server may offer: the first ones listed are kept, the listing stops there (with
/// a warning). Each is in every model call's tool list.
pub const MAX_TOOLS_PER_SERVER: usize = 256;
/// `tools/list` pages read per listing: a server that pages its 256 tools eight at a time
/// still fits; one that never stops paging (or sends empty pages) is stopped here, with a
/// warning, keeping the tools read.
pub const MAX_TOOL_PAGES: usize = 32;
/// Largest description of a tool passed to the model, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4096;

/// Reads the server's tools, page by page, until the last page, [`MAX_TOOLS_PER_SERVER`]
/// tools or [`MAX_TOOL_PAGES`] pages, all within `limit` (a page that does not come in time
/// is cancelled at the server); each page's tools are checked as it comes (nothing of a page
/// is kept but its offered tools).
pub async fn list_tools(
    name: &str,
    peer: &Peer<RoleClient>,
    limit: Duration,
) -> Result<Vec<ToolSpec>, String> {
    let late = || format!("tools/list gave no answer within {} s", limit.as_secs_f64());
    let deadline = tokio::time::Instant::now() + limit;
    match tokio::time::timeout(limit, read_pages(name, peer, deadline)).await {
        Ok(Err(rmcp::ServiceError::Timeout { .. })) | Err(_) => Err(late()),
        Ok(Err(e)) => Err(format!(
            "tools/list failed: {}",
            super::call::service_error(&e)
        )),
        Ok(Ok(Err(why))) => Err(why),
        Ok(Ok(Ok(tools))) => Ok(tools),
    }
}

/// [`list_tools`]'s pages, each asked with the time left until `deadline`.
async fn read_pages(
    name: &str,
    peer: &Peer<RoleClient>,
    deadline: tokio::time::Instant,
) -> Result<Result<Vec<ToolSpec>, String>, rmcp::ServiceError> {
    let mut tools = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor = None;
    for page in 1..=MAX_TOOL_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let request =
            ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest::with_param(params));
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let result = peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(left))
            .await?
            .await_response()
            .await?;
        let result = match result {
            ServerResult::ListToolsResult(r) => serde_json::to_value(r).unwrap_or(Value::Null),
            ServerResult::CustomResult(r) => r.0,
            _ => {
                return Ok(Err(
                    "tools/list answered something that is not a tool list".into()
                ))
            }
        };
        let listed = result
            .get("tools")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for tool in listed {
            if tools.len() == MAX_TOOLS_PER_SERVER {
                warn_past_the_cap(name);
                return Ok(Ok(tools));
            }
            match check_tool(name, tool, &seen) {
                Ok(spec) => {
                    seen.insert(spec.name.clone());
                    tools.push(spec);
                }
                Err(why) => log::warn!("MCP server {name}: {why}"),
            }
        }
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
            _ => return Ok(Ok(tools)),
        }
        if tools.len() == MAX_TOOLS_PER_SERVER {
            warn_past_the_cap(name);
            return Ok(Ok(tools));
        }
        if page == MAX_TOOL_PAGES {
            log::warn!(
                "MCP server {name}: tools/list pages past the first {MAX_TOOL_PAGES} not read \
                 ({} tools kept)",
                tools.len()
            );
        }
    }
    Ok(Ok(tools))
}

/// Says the listing stopped at [`MAX_TOOLS_PER_SERVER`].
fn warn_past_the_cap(name: &str) {
    log::warn!(
        "MCP server {name}: tools past the first {MAX_TOOLS_PER_SERVER} not read: at most \
         {MAX_TOOLS_PER_SERVER} tools per server"
    );
}

/// One listed tool as offered (unprefixed name), or why it is skipped: no name, a name that
/// does not make a valid `NAME__tool`, listed twice (`seen` are the names kept so far), too
/// deep to be read ([`SKIPPED_KEY`]), an input schema that is no object or past the bounds.
fn check_tool(server: &str, tool: &Value, seen: &HashSet<String>) -> Result<ToolSpec, String> {
    let tool_name = match tool.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n,
        _ => return Err("a tool without a name skipped".into()),
    };
    let skipped = |why: &str| format!("tool {tool_name:?} skipped: {why}");
    if let Some(why) = tool.get(SKIPPED_KEY).and_then(Value::as_str) {
        return Err(skipped(why));
    }
    let full = format!("{server}{SERVER_SEPARATOR}{tool_name}");
    if !valid_tool_name(&full) {
        return Err(skipped(&format!(
            "{full:?} is not a valid tool name (^[a-zA-Z0-9_-]{{1,64}}$)"
        )));
    }
    if seen.contains(tool_name) {
        return Err(skipped("listed twice (the first one is offered)"));
    }
    let schema = match tool.get("inputSchema") {
        None | Some(Value::Null) => serde_json::json!({"type": "object"}),
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(_) => return Err(skipped("its input schema is not a JSON object")),
    };
    let (nodes, bytes) = (json_nodes(&schema), schema.to_string().len());
    if nodes > MAX_TOOL_SCHEMA_NODES || bytes > MAX_TOOL_SCHEMA_BYTES {
        return Err(skipped(&format!(
            "its input schema has {nodes} JSON values and {bytes} bytes; at most \
             {MAX_TOOL_SCHEMA_NODES} and {MAX_TOOL_SCHEMA_BYTES}"
        )));
    }
    let description: String = tool
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(MAX_DESCRIPTION_CHARS)
        .collect();
    Ok(ToolSpec {
        name: tool_name.to_string(),
        description,
        input_schema: schema,
    })
}

/// Refreshes the server's tools each time the handler asks (`notifications/tools/list_changed`
/// wakes [`Shared::refresh`]), for as long as the connection lasts (the supervisor drops this
/// future when it ends). One refresh runs at a time: notifications during it leave one wake-up
/// behind, so any number of them costs one more refresh. A refresh past the list time-out, or
/// failing, keeps the tools offered and says so in the status until one succeeds.
pub async fn refresher(shared: Arc<Shared>, peer: Peer<RoleClient>) {
    let name = shared.name().to_string();
    loop {
        shared.refresh.notified().await;
        let outcome = match list_tools(&name, &peer, shared.list_timeout()).await {
            Ok(tools) => {
                let n = tools.len();
                shared.offer(tools);
                log::info!(
                    "MCP server {name}: tool list changed: {n} tools offered from the next \
                     model call"
                );
                None
            }
            Err(e) => Some(e),
        };
        if let Some(why) = &outcome {
            log::warn!("MCP server {name}: tool list changed, but {why}; the tools listed before stay offered");
        }
        shared.set_refresh_error(outcome);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_tool_is_checked_on_its_own() {
        let seen: HashSet<String> = ["dup".to_string()].into();
        let check = |tool: Value| check_tool("s", &tool, &seen);
        assert_eq!(
            check(json!({"name": "ok", "description": "d"}))
                .unwrap()
                .input_schema,
            json!({"type": "object"})
        );
        assert_eq!(
            check(json!({"name": ""})).unwrap_err(),
            "a tool without a name skipped"
        );
        assert_eq!(
            check(json!({"name": 3})).unwrap_err(),
            "a tool without a name skipped"
        );
        assert_eq!(
            check(json!({"name": "dup"})).unwrap_err(),
            "tool \"dup\" skipped: listed twice (the first one is offered)"
        );
        assert_eq!(
            check(json!({"name": "x", "inputSchema": "string"})).unwrap_err(),
            "tool \"x\" skipped: its input schema is not a JSON object"
        );
        assert_eq!(
            check(json!({"name": "deep", SKIPPED_KEY: "it is nested too deep"})).unwrap_err(),
            "tool \"deep\" skipped: it is nested too deep"
        );
        assert!(check(json!({"name": "a b"}))
            .unwrap_err()
            .contains("not a valid tool name"));
    }
}
