//! External tool servers over HTTP (`--tool-server NAME=URL`). The agent loop offers their
//! tools to the model as `NAME__tool` and routes calls by that prefix
//! (`roundtable_actors::agent::turn`). The protocol is small JSON over HTTP:
//!
//! - `GET  <URL>/tools` → `[{"name", "description", "input_schema"}]` (read once at startup);
//! - `POST <URL>/call` with `{"tool", "input"}` → `{"content": string, "isError"?: bool}`.
//!
//! A failed or slow call becomes an `is_error` tool result the model sees, never a crashed turn.
//! Every text that names the URL (errors, [`ToolServer::url`] for `@system config`) has its
//! credentials hidden ([`redact_url_credentials`]).

use std::time::Duration;

use roundtable_actors::agent::turn::{ToolCallContext, ToolOutput, ToolServer, ToolServerStatus};
use roundtable_actors::agent::{valid_tool_name, LocalBoxFuture, ToolSpec};
use roundtable_actors::redact::redact_url_credentials;
use serde_json::{json, Value};

use super::http_client;

/// Largest answer read from a tool server.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// One configured tool server.
pub struct HttpToolServer {
    /// `NAME` of `--tool-server NAME=URL`, for messages.
    name: String,
    /// Base URL without a trailing slash.
    base: String,
    /// `base` with its credentials hidden: what `@system config` and errors show.
    shown: String,
    /// Tools read at startup.
    tools: Vec<ToolSpec>,
    /// Per-call time limit.
    timeout: Duration,
}

/// Parses `NAME=URL`; the name becomes the tools' prefix, so it must be a valid tool-name
/// part without the `__` separator.
pub fn parse_spec(spec: &str) -> Result<(String, String), String> {
    let shown = redact_url_credentials(spec);
    let (name, url) = spec
        .split_once('=')
        .ok_or_else(|| format!("--tool-server {shown:?}: expected NAME=URL"))?;
    if !valid_tool_name(name) || name.contains("__") {
        return Err(format!(
            "--tool-server {shown:?}: the name must match ^[a-zA-Z0-9_-]+$ without \"__\""
        ));
    }
    if !url.starts_with("http://") {
        return Err(format!(
            "--tool-server {shown:?}: the URL must start with http://"
        ));
    }
    Ok((name.to_string(), url.trim_end_matches('/').to_string()))
}

impl HttpToolServer {
    /// Reads the server's tool list (`GET <URL>/tools`). Must run inside an actix System.
    pub async fn connect(
        name: &str,
        base: &str,
        timeout: Duration,
    ) -> Result<HttpToolServer, String> {
        let url = format!("{base}/tools");
        let shown = redact_url_credentials(&url);
        let mut response = http_client(timeout).get(&url).send().await.map_err(|e| {
            redact_url_credentials(&format!("tool server {name}: cannot reach {shown}: {e}"))
        })?;
        if !response.status().is_success() {
            return Err(format!(
                "tool server {name}: {shown} answered HTTP {}",
                response.status()
            ));
        }
        let body = response
            .body()
            .limit(MAX_ANSWER_BYTES)
            .await
            .map_err(|e| format!("tool server {name}: reading {shown}: {e}"))?;
        let tools: Vec<ToolSpec> = serde_json::from_slice(&body)
            .map_err(|e| format!("tool server {name}: {shown} is not a tool list: {e}"))?;
        Ok(HttpToolServer {
            name: name.to_string(),
            base: base.to_string(),
            shown: redact_url_credentials(base),
            tools,
            timeout,
        })
    }
}

impl HttpToolServer {
    /// How many tools the server offers.
    pub fn tools_count(&self) -> usize {
        self.tools.len()
    }
}

impl ToolServer for HttpToolServer {
    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.clone()
    }

    fn status(&self) -> Option<ToolServerStatus> {
        Some(ToolServerStatus {
            transport: format!("HTTP: {}", self.shown),
            state: "connected".into(),
            tools: self.tools.len(),
        })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        input: Value,
        _context: ToolCallContext<'a>,
    ) -> LocalBoxFuture<'a, ToolOutput> {
        let url = format!("{}/call", self.base);
        let name = self.name.clone();
        let timeout = self.timeout;
        let body = json!({"tool": tool, "input": input});
        Box::pin(async move { call(&url, &name, timeout, body).await.into() })
    }
}

/// One `POST <URL>/call`.
async fn call(url: &str, name: &str, timeout: Duration, body: Value) -> Result<String, String> {
    {
        {
            let mut response = http_client(timeout)
                .post(url)
                .send_json(&body)
                .await
                .map_err(|e| redact_url_credentials(&format!("tool server {name} failed: {e}")))?;
            let status = response.status();
            let bytes = response
                .body()
                .limit(MAX_ANSWER_BYTES)
                .await
                .map_err(|e| format!("tool server {name} failed: {e}"))?;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&bytes);
                return Err(format!(
                    "tool server {name} answered HTTP {status}: {}",
                    text.chars().take(300).collect::<String>()
                ));
            }
            let answer: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("tool server {name} sent an invalid answer: {e}"))?;
            let content = answer["content"]
                .as_str()
                .ok_or_else(|| format!("tool server {name} sent no \"content\" string"))?
                .to_string();
            if answer["isError"] == true {
                Err(content)
            } else {
                Ok(content)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(
            parse_spec("search=http://127.0.0.1:9/api/").unwrap(),
            ("search".to_string(), "http://127.0.0.1:9/api".to_string())
        );
        assert!(parse_spec("a__b=http://x").is_err());
        assert!(parse_spec("bad name=http://x").is_err());
        assert!(parse_spec("noequals").is_err());
        assert!(parse_spec("x=https://x").is_err());
    }
}
