//! Roundtable: a long-running local conversation server speaking the TypeAgent agent-server
//! WebSocket protocol. This crate is the process around the actors of `roundtable-actors`:
//! configuration, the HTTP server, the WebSocket transport and graceful shutdown.
//!
//! # Layout
//! - [`config`]: [`ServerConfig`], built by the CLI (`main.rs`) or by tests.
//! - [`server`]: [`serve`]: instance lock, registry start, listeners, HTTP routes (`/health`,
//!   `/metrics`, WebSocket upgrade on any other path), origin / host / token checks, shutdown.
//! - [`transport`]: the `Connection` actor, one per WebSocket: frame assembly, UTF-8 checks,
//!   heartbeat, the `agent-server` / `discovery` channels and the socket writer. The only
//!   module that touches `actix-ws`.
//! - [`toolserver`]: external tool servers over HTTP (`--tool-server NAME=URL`).
//! - [`web`]: the built-in web client (`web/`), served on `/` and `/app/<file>`.

pub mod cli;
pub mod client;
pub mod config;
pub mod openai;
pub mod server;
pub mod toolserver;
pub mod transport;

pub use config::ServerConfig;
pub use server::serve;
