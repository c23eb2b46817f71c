//! Integration tests: every test starts the real `roundtable` binary on `127.0.0.1:0` with a
//! temporary instance directory and talks to it over real WebSockets (one test binary, many
//! modules, to keep linking cheap).

#[path = "../support/mod.rs"]
mod support;

mod harness;

mod agent_calls;
mod agent_server;
mod backup;
mod bounds;
mod cli;
mod client_agent_choices;
mod client_agent_commands;
mod client_agent_lifecycle;
mod client_agents;
mod cluster;
mod completion;
mod consent;
mod context_meter;
mod conversation_model;
mod conversation_words;
mod descriptors;
mod durability;
mod interactions;
mod lifecycle;
mod live_list;
mod mcp;
mod mcp_hostile;
mod mcp_hostile_config;
mod node_log;
mod paged_history;
mod protocol_head;
mod protocol_methods;
mod provider_anthropic;
mod provider_config;
mod provider_streams;
mod provider_tls;
mod providers;
mod runtime;
mod search;
mod security;
mod security_cli;
mod security_web;
mod service;
mod storage;
mod streaming;
mod transport;
mod typeagent_cli;
