//! Roundtable: a long-running local conversation server speaking the TypeAgent agent-server
//! WebSocket protocol. This crate is the process around the actors of `roundtable-actors`:
//! configuration, the HTTP server, the WebSocket transport, the model and tool providers,
//! graceful shutdown, and the client side (a Rust client library and the CLI).
//!
//! # Layout
//! - [`config`]: [`ServerConfig`] and the `roundtable serve` flags ([`config::ServeArgs`])
//!   that build it; the binary (`main.rs`) is clap glue only.
//! - [`server`]: [`serve`]: instance lock, registry start, listeners, shutdown;
//!   `server/routes.rs` (`/health`, table-driven `/metrics`, the upgrade route),
//!   `server/guards.rs` (Origin, Host, token, same-user checks), `server/web.rs` (the
//!   built-in web client, served on `/` and `/app/<file>`).
//! - [`transport`]: the `Connection` actor, one per WebSocket, and the only module that
//!   speaks WebSocket: `upgrade.rs` (actix-http's upgrade service: the request runs through
//!   the app, then the TCP stream is handed over), `reader.rs` (frames parsed from the read
//!   half), `inbound.rs` (each message routed by channel), `frames.rs` (reassembly glue,
//!   UTF-8, close codes), `writer.rs` (the socket writer task), `agent_server.rs` (the typed
//!   `agent-server` / `discovery` requests), `hosted_agents/` (client agents a socket hosts),
//!   `state.rs` ([`AppState`](transport::AppState), shared with the server's routes, so the
//!   transport never imports the server), `socket_slot.rs` (the socket cap).
//! - [`providers`]: the OpenAI-compatible model provider (`providers/openai/`).
//! - [`mcp`]: MCP servers (`[mcp.servers.NAME]`, `--mcp-config`) through `rmcp`, on their own
//!   `mcp` thread: supervisors, restarts, tools offered as `NAME__tool`.
//! - [`client`]: the Rust client library (connection and multiplexing, typed RPC calls,
//!   errors) and TypeAgent's conversation helpers.
//! - [`cli`]: `connect` (the interactive prompt), `conversations`, `run`, `server`, and the
//!   CLI's state file.
//! - [`backup`]: backup archives: the manifest, writing one from a snapshot (`GET /backup`,
//!   `server/backup.rs`), checking and restoring one (`roundtable restore`).
//! - [`logging`]: the process's logger, whose filter `@system trace` changes at run time.

pub mod backup;
pub mod cli;
pub mod client;
pub mod config;
pub mod config_file;
pub mod logging;
pub mod mcp;
pub mod providers;
pub mod server;
pub mod transport;

pub use config::ServerConfig;
pub use server::serve;
