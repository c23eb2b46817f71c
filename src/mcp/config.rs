//! MCP server configuration as users already have it: `[mcp.servers.NAME]` tables of the
//! config file, and `--mcp-config FILE` with the `{"mcpServers": {NAME: {command, args, env} |
//! {url, headers}}}` JSON that desktop MCP clients use. Both are read into one list of
//! [`McpServerConfig`], each with where it came from (`config show` prints that, with every
//! env and header value hidden). A name configured twice, a name too long for its tools'
//! names, an entry with neither or both of `command` and `url` are refused at start with the
//! file and key.
//!
//! Who talks to it: `config_file` (the TOML tables, with their lines), `config.rs` (the
//! `--mcp-config` files, the merge into `ServerConfig`), `config show`, and the supervisor
//! ([`super::server`]), which starts what is configured.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use roundtable_actors::agent::turn::SERVER_SEPARATOR;
use roundtable_actors::redact::{redact_args, redact_url_credentials};
use serde::Deserialize;
use serde_json::Value;

/// MCP servers one Roundtable may run: each is a child process or an HTTP session, a
/// supervisor task and its tools in every model call.
pub const MAX_MCP_SERVERS: usize = 32;
/// Longest server name: its tools are offered as `NAME__tool`, at most 64 characters, and a
/// tool name has at least one.
pub const MAX_SERVER_NAME_CHARS: usize = 64 - SERVER_SEPARATOR.len() - 1;
/// A call's time limit when the entry sets no `timeout`.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest `--mcp-config` file read.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;
/// Arguments, environment variables and headers one entry may set (each).
pub const MAX_ENTRY_ITEMS: usize = 256;

/// How a server is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its stdin/stdout, started and supervised here.
    Stdio {
        /// The program (looked up in `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to Roundtable's own environment for it (values are secrets:
        /// never printed).
        env: BTreeMap<String, String>,
        /// Its working directory (default: Roundtable's).
        cwd: Option<PathBuf>,
    },
    /// MCP Streamable HTTP at `url`.
    Http {
        /// The MCP endpoint (`http://` or `https://`).
        url: String,
        /// Sent with every request, e.g. `Authorization` (values are secrets: never printed).
        headers: BTreeMap<String, String>,
    },
}

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    /// The name: its tools are offered as `NAME__tool`.
    pub name: String,
    /// How it is reached.
    pub transport: McpTransport,
    /// Each call's time limit.
    pub timeout: Duration,
    /// False: configured but not started (`enabled = false`, or the desktop JSON's
    /// `"disabled": true`).
    pub enabled: bool,
    /// Where it was configured: `FILE:LINE` (TOML) or the JSON file.
    pub origin: String,
}

impl McpServerConfig {
    /// How it is reached, without secrets: `stdio: mcp-server-time --local-timezone UTC`,
    /// `stdio: mcp-remote https://h/mcp --api-key ***`, `Streamable HTTP:
    /// http://***@host/mcp`.
    pub fn transport_text(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, args, .. } => {
                let mut text = format!("stdio: {}", redact_url_credentials(command));
                // Arguments may carry a token too (see `redact_args`); the line stays short.
                for arg in redact_args(args) {
                    text.push(' ');
                    text.push_str(&arg);
                }
                clip(&text, 200)
            }
            McpTransport::Http { url, .. } => {
                format!("Streamable HTTP: {}", redact_url_credentials(url))
            }
        }
    }

    /// The entry as `config show` prints it: every setting, env and header values `***`, and
    /// the secrets of `args` ([`redact_args`]).
    pub fn shown(&self) -> String {
        let mut out = String::from("{ ");
        match &self.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let _ = write!(out, "command = {command:?}");
                if !args.is_empty() {
                    let args: Vec<String> =
                        redact_args(args).iter().map(|a| format!("{a:?}")).collect();
                    let _ = write!(out, ", args = [{}]", args.join(", "));
                }
                if !env.is_empty() {
                    let _ = write!(out, ", env = {}", hidden(env));
                }
                if let Some(cwd) = cwd {
                    let _ = write!(out, ", cwd = {:?}", cwd.display().to_string());
                }
            }
            McpTransport::Http { url, headers } => {
                let _ = write!(out, "url = {:?}", redact_url_credentials(url));
                if !headers.is_empty() {
                    let _ = write!(out, ", headers = {}", hidden(headers));
                }
            }
        }
        let _ = write!(out, ", timeout = {}", self.timeout.as_secs_f64());
        if !self.enabled {
            out.push_str(", enabled = false");
        }
        out.push_str(" }");
        out
    }
}

/// `{ KEY = "***", … }`.
fn hidden(map: &BTreeMap<String, String>) -> String {
    let keys: Vec<String> = map.keys().map(|k| format!("{k} = \"***\"")).collect();
    format!("{{ {} }}", keys.join(", "))
}

/// The first `max` characters of `text`, with `…` when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// One entry as written in the config file (`[mcp.servers.NAME]`): unknown keys refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TomlEntry {
    /// Stdio: the program.
    command: Option<String>,
    /// Stdio: its arguments.
    #[serde(default)]
    args: Vec<String>,
    /// Stdio: added environment.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Stdio: working directory.
    cwd: Option<PathBuf>,
    /// Streamable HTTP: the endpoint.
    url: Option<String>,
    /// Streamable HTTP: headers.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Seconds a call may take.
    timeout: Option<f64>,
    /// False: not started.
    enabled: Option<bool>,
}

/// Checks one `[mcp.servers.NAME]` table (`origin` is `FILE:LINE`).
pub fn from_toml(name: &str, entry: TomlEntry, origin: String) -> Result<McpServerConfig, String> {
    build(
        name,
        Fields {
            command: entry.command,
            args: entry.args,
            env: entry.env,
            cwd: entry.cwd,
            url: entry.url,
            headers: entry.headers,
            timeout: entry.timeout,
            enabled: entry.enabled.unwrap_or(true),
        },
        origin,
    )
    .map_err(|e| format!("[mcp.servers.{name}]: {e}"))
}

/// The settings of an entry, whichever format it came in.
struct Fields {
    /// Stdio program.
    command: Option<String>,
    /// Its arguments.
    args: Vec<String>,
    /// Its added environment.
    env: BTreeMap<String, String>,
    /// Its working directory.
    cwd: Option<PathBuf>,
    /// HTTP endpoint.
    url: Option<String>,
    /// HTTP headers.
    headers: BTreeMap<String, String>,
    /// Call time limit in seconds.
    timeout: Option<f64>,
    /// Started or not.
    enabled: bool,
}

/// Checks a server name: usable as a tool-name prefix (no `__`, and no `_` at its end, so
/// `NAME__tool` reads back as NAME and tool: `h_`'s `echo` would be `h___echo`, which reads
/// as `h`'s `_echo`), short enough for `NAME__tool`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        || name.contains(SERVER_SEPARATOR)
        || name.ends_with('_')
    {
        return Err(format!(
            "MCP server name {name:?} must match ^[a-zA-Z0-9_-]+$ without \"__\" and not end \
             in \"_\" (its tools are offered as NAME__tool)"
        ));
    }
    let chars = name.chars().count();
    if chars > MAX_SERVER_NAME_CHARS {
        return Err(format!(
            "MCP server name {name:?} is {chars} characters long; at most \
             {MAX_SERVER_NAME_CHARS} fit, as its tools are offered as NAME__tool in at most 64 \
             characters"
        ));
    }
    Ok(())
}

/// A header name as HTTP allows it (a token), and a value without line breaks.
fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!(
            "header name {name:?} is not a valid HTTP header name"
        ));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!("the value of header {name:?} has a line break"));
    }
    Ok(())
}

/// Builds and checks one entry.
fn build(name: &str, f: Fields, origin: String) -> Result<McpServerConfig, String> {
    check_name(name)?;
    let timeout = match f.timeout {
        None => DEFAULT_CALL_TIMEOUT,
        Some(s) => match Duration::try_from_secs_f64(s) {
            Ok(d) if !d.is_zero() => d,
            _ => {
                return Err(format!(
                    "`timeout` must be a positive number of seconds, not {s}"
                ))
            }
        },
    };
    if f.args.len() > MAX_ENTRY_ITEMS
        || f.env.len() > MAX_ENTRY_ITEMS
        || f.headers.len() > MAX_ENTRY_ITEMS
    {
        return Err(format!(
            "`args`, `env` and `headers` take at most {MAX_ENTRY_ITEMS} items each"
        ));
    }
    let transport = match (f.command, f.url) {
        (Some(_), Some(_)) => {
            return Err(
                "has both `command` (stdio) and `url` (Streamable HTTP); give one".to_string(),
            )
        }
        (None, None) => {
            return Err("needs `command` (stdio) or `url` (Streamable HTTP)".to_string())
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err("`command` is empty".to_string());
            }
            if !f.headers.is_empty() {
                return Err("`headers` go with `url`, not `command`".to_string());
            }
            McpTransport::Stdio {
                command,
                args: f.args,
                env: f.env,
                cwd: f.cwd,
            }
        }
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "`url` {:?} must start with http:// or https://",
                    redact_url_credentials(&url)
                ));
            }
            if !f.args.is_empty() || !f.env.is_empty() || f.cwd.is_some() {
                return Err("`args`, `env` and `cwd` go with `command`, not `url`".to_string());
            }
            for (k, v) in &f.headers {
                check_header(k, v)?;
            }
            McpTransport::Http {
                url,
                headers: f.headers,
            }
        }
    };
    Ok(McpServerConfig {
        name: name.to_string(),
        transport,
        timeout,
        enabled: f.enabled,
        origin,
    })
}

/// Reads a desktop-client JSON file: `{"mcpServers": {NAME: {"command", "args", "env"} |
/// {"url", "headers"}}}`. Also accepted: `"type"` (`stdio`, `http`, `streamable-http`),
/// `"cwd"`, `"timeout"` (seconds), `"disabled"`; other keys desktop clients keep
/// (`autoApprove`, …) are ignored with a warning naming them.
pub fn read_json_file(path: &Path) -> Result<Vec<McpServerConfig>, String> {
    let shown = path.display();
    let read = || -> std::io::Result<String> {
        use std::io::Read as _;
        let file = std::fs::File::open(path)?;
        let mut text = String::new();
        file.take(MAX_CONFIG_FILE_BYTES + 1)
            .read_to_string(&mut text)?;
        Ok(text)
    };
    let text = read().map_err(|e| format!("--mcp-config {shown}: {e}"))?;
    if text.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(format!(
            "--mcp-config {shown}: larger than {MAX_CONFIG_FILE_BYTES} bytes"
        ));
    }
    parse_json(&text, &shown.to_string())
}

/// [`read_json_file`] on text; `origin` names the file in errors and `config show`.
pub fn parse_json(text: &str, origin: &str) -> Result<Vec<McpServerConfig>, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("--mcp-config {origin}: not JSON: {e}"))?;
    let servers = value
        .get("mcpServers")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            format!("--mcp-config {origin}: expected {{\"mcpServers\": {{NAME: {{…}}}}}}")
        })?;
    let mut out = Vec::new();
    for (name, entry) in servers {
        let at = |e: String| format!("--mcp-config {origin}, server {name:?}: {e}");
        let object = entry
            .as_object()
            .ok_or_else(|| at("expected an object".into()))?;
        let string = |key: &str| -> Result<Option<String>, String> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(at(format!("`{key}` must be a string"))),
            }
        };
        let map = |key: &str| -> Result<BTreeMap<String, String>, String> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(o)) => o
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => Ok((k.clone(), s.clone())),
                        _ => Err(at(format!("`{key}.{k}` must be a string"))),
                    })
                    .collect(),
                Some(_) => Err(at(format!("`{key}` must be an object of strings"))),
            }
        };
        let args = match object.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| at("`args` must be strings".into()))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(at("`args` must be an array of strings".into())),
        };
        match string("type")?.as_deref() {
            None | Some("stdio" | "http" | "streamable-http" | "streamableHttp") => {}
            Some("sse") => {
                return Err(at(
                    "the SSE transport is not supported (deprecated by MCP); use the server's \
                     Streamable HTTP endpoint"
                        .into(),
                ))
            }
            Some(other) => return Err(at(format!("unknown `type` {other:?}"))),
        }
        let timeout = match object.get("timeout") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .ok_or_else(|| at("`timeout` must be a number of seconds".into()))?,
            ),
        };
        let disabled = match object.get("disabled") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(at("`disabled` must be true or false".into())),
        };
        const KNOWN: [&str; 9] = [
            "command", "args", "env", "cwd", "url", "headers", "type", "timeout", "disabled",
        ];
        let ignored: Vec<&str> = object
            .keys()
            .map(String::as_str)
            .filter(|k| !KNOWN.contains(k))
            .collect();
        if !ignored.is_empty() {
            log::warn!(
                "--mcp-config {origin}, server {name:?}: ignoring {}",
                ignored.join(", ")
            );
        }
        let fields = Fields {
            command: string("command")?,
            args,
            env: map("env")?,
            cwd: string("cwd")?.map(PathBuf::from),
            url: string("url")?,
            headers: map("headers")?,
            timeout,
            enabled: !disabled,
        };
        out.push(build(name, fields, origin.to_string()).map_err(at)?);
    }
    Ok(out)
}

/// The config file's servers, then each `--mcp-config` file's, in order: a name configured
/// twice, or more than [`MAX_MCP_SERVERS`] servers, is refused naming where.
pub fn merge(
    file: Vec<McpServerConfig>,
    json_files: &[PathBuf],
) -> Result<Vec<McpServerConfig>, String> {
    let mut all = file;
    for path in json_files {
        for server in read_json_file(path)? {
            if let Some(first) = all.iter().find(|s| s.name == server.name) {
                return Err(format!(
                    "MCP server {:?} is configured twice: at {} and in {}",
                    server.name, first.origin, server.origin
                ));
            }
            all.push(server);
        }
    }
    if all.len() > MAX_MCP_SERVERS {
        return Err(format!(
            "{} MCP servers are configured; at most {MAX_MCP_SERVERS}",
            all.len()
        ));
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desktop_json_is_read() {
        let servers = parse_json(
            r#"{"mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "secret-tz"}},
                "remote": {"type": "http", "url": "https://u:p@example.test/mcp", "headers": {"Authorization": "Bearer s3cret"}, "autoApprove": []},
                "off": {"command": "x", "disabled": true}
            }}"#,
            "mcp.json",
        )
        .unwrap();
        assert_eq!(servers.len(), 3);
        let time = servers.iter().find(|s| s.name == "time").unwrap();
        assert_eq!(time.transport_text(), "stdio: uvx mcp-server-time");
        assert_eq!(time.timeout, DEFAULT_CALL_TIMEOUT);
        assert!(!time.shown().contains("secret-tz"), "{}", time.shown());
        assert!(time.shown().contains("env = { TZ = \"***\" }"));
        let remote = servers.iter().find(|s| s.name == "remote").unwrap();
        assert_eq!(
            remote.transport_text(),
            "Streamable HTTP: https://***@example.test/mcp"
        );
        assert!(!remote.shown().contains("s3cret"));
        assert!(!remote.shown().contains("u:p"));
        assert!(!servers.iter().find(|s| s.name == "off").unwrap().enabled);
    }

    #[test]
    fn bad_entries_get_exact_errors() {
        let err = |text: &str| parse_json(text, "m.json").unwrap_err();
        assert_eq!(
            err(r#"{"mcpServers": {"a": {"command": "x", "url": "http://y"}}}"#),
            "--mcp-config m.json, server \"a\": has both `command` (stdio) and `url` (Streamable HTTP); give one"
        );
        assert_eq!(
            err(r#"{"mcpServers": {"a": {}}}"#),
            "--mcp-config m.json, server \"a\": needs `command` (stdio) or `url` (Streamable HTTP)"
        );
        assert_eq!(
            err(r#"{"servers": {}}"#),
            "--mcp-config m.json: expected {\"mcpServers\": {NAME: {…}}}"
        );
        let long = "n".repeat(62);
        assert_eq!(
            err(&format!(
                r#"{{"mcpServers": {{"{long}": {{"command": "x"}}}}}}"#
            )),
            format!(
                "--mcp-config m.json, server \"{long}\": MCP server name \"{long}\" is 62 \
                 characters long; at most 61 fit, as its tools are offered as NAME__tool in at \
                 most 64 characters"
            )
        );
        assert!(check_name(&"n".repeat(61)).is_ok());
        assert!(err(r#"{"mcpServers": {"a__b": {"command": "x"}}}"#).contains("without \"__\""));
        assert_eq!(
            err(r#"{"mcpServers": {"h_": {"command": "x"}}}"#),
            "--mcp-config m.json, server \"h_\": MCP server name \"h_\" must match \
             ^[a-zA-Z0-9_-]+$ without \"__\" and not end in \"_\" (its tools are offered as \
             NAME__tool)"
        );
        assert!(err(r#"{"mcpServers": {"a": {"url": "ftp://x"}}}"#).contains("http://"));
        assert!(
            err(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#)
                .contains("SSE transport is not supported")
        );
        assert!(
            err(r#"{"mcpServers": {"a": {"url": "http://x", "headers": {"a b": "c"}}}}"#)
                .contains("not a valid HTTP header name")
        );
        assert!(
            err(r#"{"mcpServers": {"a": {"command": "x", "timeout": 0}}}"#)
                .contains("`timeout` must be a positive number")
        );
    }

    #[test]
    fn a_name_in_two_places_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp.json");
        std::fs::write(&path, r#"{"mcpServers": {"time": {"command": "x"}}}"#).unwrap();
        let file = vec![from_toml(
            "time",
            TomlEntry {
                command: Some("y".into()),
                ..TomlEntry::default()
            },
            "/etc/roundtable.toml:3".into(),
        )
        .unwrap()];
        assert_eq!(
            merge(file, std::slice::from_ref(&path)).unwrap_err(),
            format!(
                "MCP server \"time\" is configured twice: at /etc/roundtable.toml:3 and in {}",
                path.display()
            )
        );
        let many: String = (0..=MAX_MCP_SERVERS)
            .map(|i| format!("\"s{i}\": {{\"command\": \"x\"}}"))
            .collect::<Vec<_>>()
            .join(",");
        std::fs::write(&path, format!("{{\"mcpServers\": {{{many}}}}}")).unwrap();
        assert_eq!(
            merge(Vec::new(), &[path]).unwrap_err(),
            "33 MCP servers are configured; at most 32"
        );
    }
}
