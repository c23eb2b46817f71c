//! `@system <sub>`: what TypeAgent's CLI sends for `/help`, `/history`, `/session`, `/config`,
//! `/agents` (`@system config agents`) and `/trace`, answered with what is true of Roundtable:
//! the command list, this conversation's chat history, its session facts, the server settings
//! and tools, and the server's log filter (read and set at run time through the
//! [`LogFilterControl`] the binary puts in [`RuntimeConfig`]). Roundtable adds `@system meter
//! [show | reset]`: the conversation's context meter (`meter.rs`), shown or cleared. Any other
//! sub-command gets a clear `@system <sub>: not supported by Roundtable`.
//!
//! Who talks to it: `commands.rs` parses `@system` here ([`parse`]) and runs the result with
//! `run_system`. The texts are pure functions of what they show; `@system session` asks the
//! registry for the conversation's name and creation time ([`GetConversationInfo`]) at command
//! time, so a rename is always reflected without the registry having to tell anyone.

use std::fmt::Write as _;
use std::time::Duration;

use actix::prelude::*;
use serde_json::json;

use super::audience::Audience;
use super::grammar::{help_text, SystemCommand};
use super::model::provider_line;
use super::request_queue::Request;
use super::turn_messages::TurnEvent;
use super::ClientAgentInfo;
use super::GetConversationInfo;
use super::{Conversation, RuntimeConfig};
use crate::agent::turn::{ToolServerStatus, ASK_USER};
use crate::agent::{tools, ChatMessage, ContentBlock, Provider, Role};
use crate::client::OutboundCall;
use crate::ids::ConversationId;
use crate::protocol::ConversationInfo;

/// The server's log filter, read and replaced at run time (`@system trace`). Implemented by
/// the binary around its logger; the actors only see this trait.
pub trait LogFilterControl: Send + Sync {
    /// The filter in effect, in `RUST_LOG` syntax.
    fn current(&self) -> String;
    /// Replaces the filter with `spec` (`RUST_LOG` syntax); the filter now in effect, or why
    /// `spec` is refused (nothing changes then).
    fn set(&self, spec: &str) -> Result<String, String>;
}

/// Most messages `@system history N` shows (a larger N shows this many): the answer is one
/// display entry, and each message takes up to a few hundred bytes of it.
pub const MAX_HISTORY: usize = 1000;
/// Longest text of one message in `@system history`, in characters.
const HISTORY_TEXT_CHARS: usize = 400;

/// The first `max` characters of `text`, with `…` when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// The tool name a `ToolResult` answers, found in the messages before it.
fn tool_name<'a>(earlier: &'a [ChatMessage], id: &str) -> &'a str {
    earlier
        .iter()
        .rev()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolUse { id: i, name, .. } if i == id => Some(name.as_str()),
            _ => None,
        })
        .unwrap_or("?")
}

/// One history message as terminal lines: `#7 user: …`, `#8 assistant: … → calculate {…}`,
/// `#9 tool calculate: 5` (continuation lines indented). `tool_name` names the tool a result
/// answers, from the messages before it.
fn history_lines(
    number: usize,
    message: &ChatMessage,
    tool_name: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let mut lines = Vec::new();
    let text = clip(message.joined_text().trim(), HISTORY_TEXT_CHARS);
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    if !text.is_empty() {
        lines.push(format!(
            "#{number} {role}: {}",
            text.replace('\n', "\n    ")
        ));
    }
    for block in &message.content {
        match block {
            ContentBlock::ToolUse { name, input, .. } => lines.push(format!(
                "#{number} assistant: → {name} {}",
                clip(&input.to_string(), HISTORY_TEXT_CHARS)
            )),
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => lines.push(format!(
                "#{number} tool {}{}: {}",
                tool_name(tool_use_id),
                if *is_error { " (error)" } else { "" },
                clip(content, HISTORY_TEXT_CHARS).replace('\n', "\n    ")
            )),
            _ => {}
        }
    }
    lines
}

/// `@system history N`: the last `n` user / assistant / tool messages, numbered from the
/// start of the history, of a history of `total` messages whose last ones are `held` (the
/// window a conversation holds; `n` at most `held.len()` unless it holds them all).
pub(super) fn history_text_of(held: &[ChatMessage], total: usize, n: usize) -> String {
    let before = total.saturating_sub(held.len());
    let mut page = HistoryPage::default();
    for (i, message) in held.iter().enumerate().skip(held.len().saturating_sub(n)) {
        page.add(before + i + 1, message, &|id| {
            tool_name(&held[..i], id).to_string()
        });
    }
    page.text(total)
}

/// `@system history`'s text, built one message at a time (from memory, or streamed from the
/// history file: see `chat.rs`).
#[derive(Default)]
pub(super) struct HistoryPage {
    /// Messages added.
    shown: usize,
    /// Their lines, each after a newline.
    lines: String,
}

impl HistoryPage {
    /// Adds message `number` (from 1); `tool_name` names the tool a result answers.
    pub(super) fn add(
        &mut self,
        number: usize,
        message: &ChatMessage,
        tool_name: &dyn Fn(&str) -> String,
    ) {
        self.shown += 1;
        for line in history_lines(number, message, tool_name) {
            self.lines.push('\n');
            self.lines.push_str(&line);
        }
    }

    /// The text, for a history of `total` messages.
    pub(super) fn text(self, total: usize) -> String {
        if total == 0 {
            return "The chat history of this conversation is empty.".to_string();
        }
        format!(
            "Chat history: the last {} of {total} messages{}",
            self.shown, self.lines
        )
    }
}

/// What `@system session` shows, gathered by the conversation (and the registry's record).
#[derive(Debug, Clone)]
pub struct SessionFacts {
    /// The conversation id.
    pub id: ConversationId,
    /// The registry's record (name, creation time); `None` when it is gone.
    pub record: Option<ConversationInfo>,
    /// The persist directory.
    pub dir: String,
    /// `user-request` entries in the display log.
    pub requests: u64,
    /// Messages in the agent's chat history.
    pub chat_messages: usize,
    /// Connection ids of the joined clients.
    pub clients: Vec<String>,
    /// `provider` or `provider, model \`m\``.
    pub provider: String,
    /// The context meter in words (`1,234 of 8,192 tokens (15%), model \`m\``).
    pub context: String,
}

/// `@system session` (markdown).
pub fn session_text(facts: &SessionFacts) -> String {
    let (name, created) = match &facts.record {
        Some(r) => (format!("\"{}\"", r.name), r.created_at.clone()),
        None => ("(no longer in the registry)".into(), "unknown".into()),
    };
    let mut out = String::from("**Session** (this conversation)\n\n");
    let _ = writeln!(out, "- Id: `{}`", facts.id);
    let _ = writeln!(out, "- Name: {name}");
    let _ = writeln!(out, "- Persist directory: `{}`", facts.dir);
    let _ = writeln!(out, "- Created: {created}");
    let _ = writeln!(
        out,
        "- Messages: {} requests in the display log, {} in the chat history",
        facts.requests, facts.chat_messages
    );
    let _ = writeln!(
        out,
        "- Clients joined: {} (connections {})",
        facts.clients.len(),
        facts.clients.join(", ")
    );
    let _ = writeln!(out, "- Provider: {}", facts.provider);
    let _ = write!(out, "- Context: {}", facts.context);
    out
}

/// `12 s`, `1.5 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// One tool server as `@system config` shows it.
struct ServerView<'a> {
    /// Its name (the tools' prefix).
    name: &'a str,
    /// How it is doing.
    status: ToolServerStatus,
    /// Its tools as offered (`name__tool`).
    tools: Vec<String>,
}

/// The tool servers, sorted by name, with their status and tools as offered.
fn tool_servers(runtime: &RuntimeConfig) -> Vec<ServerView<'_>> {
    let mut servers: Vec<_> = runtime
        .tool_servers
        .iter()
        .map(|(name, server)| {
            let tools: Vec<String> = server
                .tools()
                .into_iter()
                .map(|t| format!("{name}{}{}", crate::agent::turn::SERVER_SEPARATOR, t.name))
                .collect();
            let status = server.status().unwrap_or_else(|| ToolServerStatus {
                transport: "(no address)".into(),
                state: "connected".into(),
                tools: tools.len(),
            });
            ServerView {
                name: name.as_str(),
                status,
                tools,
            }
        })
        .collect();
    servers.sort_by(|a, b| a.name.cmp(b.name));
    servers
}

/// `@system config` (markdown): the settings a user of this conversation is affected by.
pub fn config_text(
    runtime: &RuntimeConfig,
    provider: &dyn Provider,
    idle_timeout: Duration,
) -> String {
    let mut out = String::from("**Server configuration**\n\n");
    let _ = writeln!(out, "- Provider: {}", provider_line(provider));
    let _ = writeln!(
        out,
        "- Max model calls per turn: {}",
        runtime.max_iterations
    );
    let _ = writeln!(
        out,
        "- Idle timeout (unload with no clients): {}",
        seconds(idle_timeout)
    );
    let _ = writeln!(
        out,
        "- Queued work kept with no clients: {}",
        seconds(runtime.no_clients_grace)
    );
    let _ = writeln!(
        out,
        "- Questions wait for an answer: {}",
        seconds(runtime.interaction_timeout)
    );
    let servers = tool_servers(runtime);
    if servers.is_empty() {
        out.push_str("- MCP servers: none\n");
    } else {
        out.push_str("- MCP servers:\n");
        for s in servers {
            let _ = writeln!(
                out,
                "  - `{}`: {}; {}; {} tools",
                s.name, s.status.state, s.status.transport, s.status.tools
            );
        }
    }
    let _ = writeln!(
        out,
        "- Instance directory: `{}`",
        runtime.instance_root.display()
    );
    let filter = runtime
        .log_filter
        .as_ref()
        .map_or("(not adjustable)".to_string(), |c| {
            format!("`{}`", c.current())
        });
    let _ = write!(out, "- Log filter: {filter}");
    out
}

/// The first sentence of a tool description, short.
fn summary(description: &str) -> String {
    let first = description.split(". ").next().unwrap_or(description);
    clip(first.trim_end_matches('.'), 100)
}

/// `@system config agents` (markdown): the agent, its tools and where they come from (built
/// in, tool servers, the agents clients host in this conversation), each with whether it is
/// available.
pub fn agents_text(
    runtime: &RuntimeConfig,
    provider: &dyn Provider,
    hosted: &[ClientAgentInfo],
) -> String {
    let mut out = String::from("**Agents and tools of this conversation**\n\n");
    let _ = writeln!(
        out,
        "- Agent `chat` (the assistant): available; provider {}",
        provider_line(provider)
    );
    out.push_str("- Built-in tools:\n");
    for spec in tools::builtin_tool_specs() {
        let _ = writeln!(
            out,
            "  - `{}`: available. {}",
            spec.name,
            summary(&spec.description)
        );
    }
    let _ = writeln!(
        out,
        "  - `{ASK_USER}`: available. Asks the people in this conversation and waits"
    );
    let _ = writeln!(
        out,
        "  - `{}`: available. Manages conversations in words: the requester's client does \
         it, a handoff the server",
        tools::MANAGE_CONVERSATION
    );
    let servers = tool_servers(runtime);
    if servers.is_empty() {
        out.push_str(
            "- MCP servers: none configured (`[mcp.servers.NAME]` in the config file, or \
             `roundtable serve --mcp-config FILE`)\n",
        );
    }
    for s in servers {
        let _ = write!(
            out,
            "- MCP server `{}`: {}; {}; {} tools",
            s.name, s.status.state, s.status.transport, s.status.tools
        );
        if s.tools.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(
                out,
                ": {}",
                s.tools
                    .iter()
                    .map(|t| format!("`{t}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if hosted.is_empty() {
        out.push_str(
            "- Client-hosted agents: none registered (a client registers one with \
             `registerClientAgent`)",
        );
    }
    for agent in hosted {
        let state = if agent.executes_actions {
            "available"
        } else {
            "not available (its client does not execute actions)"
        };
        let emoji = if agent.emoji.is_empty() {
            String::new()
        } else {
            format!("{} ", agent.emoji)
        };
        let _ = write!(
            out,
            "\n- Client-hosted agent `{}` {emoji}(client {}): {state}",
            agent.name, agent.connection_id
        );
        for action in &agent.actions {
            let _ = write!(
                out,
                "\n  - `{}__{}`: {}",
                agent.name,
                action.name,
                summary(&action.description)
            );
        }
    }
    out
}

impl Conversation {
    /// Runs `@system <command>` for the running request: answered at once, except `session`,
    /// which first asks the registry.
    pub(super) fn run_system(
        &mut self,
        turn: u64,
        request: &Request,
        command: SystemCommand,
        ctx: &mut Context<Self>,
    ) {
        let markdown = |text: String| json!({"type": "markdown", "content": text});
        let content = match command {
            SystemCommand::Help => markdown(help_text()),
            SystemCommand::History(n) => return self.show_history(turn, n, ctx),
            SystemCommand::Config => markdown(config_text(
                &self.setup.runtime,
                self.provider().as_ref(),
                self.setup.idle_timeout,
            )),
            SystemCommand::Agents => markdown(agents_text(
                &self.setup.runtime,
                self.provider().as_ref(),
                &self.client_agents(),
            )),
            SystemCommand::Session => return self.start_session(turn, ctx),
            SystemCommand::Meter(reset) => {
                if reset {
                    self.clear_meter();
                    markdown(format!(
                        "Context meter reset: the next turn that reports usage starts it again.\n\n- Context: {}",
                        self.meter_text()
                    ))
                } else {
                    markdown(format!("- Context: {}", self.meter_text()))
                }
            }
            SystemCommand::Trace(spec) => return self.trace(turn, spec, request, ctx),
            SystemCommand::Model(None) => markdown(self.model_text()),
            SystemCommand::Model(Some(name)) => {
                return self.choose_model(turn, request, name, ctx);
            }
            SystemCommand::Clear | SystemCommand::Exit => {
                let method = if command == SystemCommand::Clear {
                    "clear"
                } else {
                    "exit"
                };
                let call = OutboundCall::new(method, &json!([request.id_obj()]));
                self.emit(call, &Audience::Only(request.origin));
                return self.finish(turn, None, ctx);
            }
        };
        self.finish_showing(turn, request, content, None, ctx);
    }

    /// `@system session`: the local facts now, the registry's record when it answers.
    fn start_session(&mut self, turn: u64, ctx: &mut Context<Self>) {
        let mut facts = SessionFacts {
            id: self.setup.id,
            record: None,
            dir: self.setup.dir.display().to_string(),
            requests: self.log.as_ref().map_or(0, |l| l.message_count()),
            chat_messages: self.chat_message_count(),
            clients: self.clients.keys().map(ToString::to_string).collect(),
            provider: provider_line(self.provider().as_ref()),
            context: self.meter_text(),
        };
        let record = self
            .setup
            .registry
            .info
            .send(GetConversationInfo { id: self.setup.id });
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                facts.record = record.await.ok().flatten();
                let content = json!({"type": "markdown", "content": session_text(&facts)});
                addr.do_send(TurnEvent::Answered {
                    turn,
                    result: Ok(content),
                });
            },
            ctx,
        );
    }

    /// `@system trace [spec]`: the filter in effect, after setting it to `spec` if given. The
    /// new filter is checked and installed on a blocking-pool thread, never on this
    /// conversation's arbiter (other conversations run there); the change is a security event.
    fn trace(
        &mut self,
        turn: u64,
        spec: Option<String>,
        request: &Request,
        ctx: &mut Context<Self>,
    ) {
        let Some(control) = self.setup.runtime.log_filter.clone() else {
            let e = "@system trace: this server's log filter cannot be changed at run time \
                     (it was not started by `roundtable serve`)";
            return self.finish_error(turn, request, e.into(), ctx);
        };
        let Some(spec) = spec else {
            let content =
                json!({"type": "text", "content": format!("Log filter: {}", control.current())});
            return self.finish_showing(turn, request, content, None, ctx);
        };
        let who = format!(
            "conversation {} connection {}",
            self.setup.id, request.origin
        );
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let set = tokio::task::spawn_blocking(move || {
                    let before = control.current();
                    let now = control
                        .set(&spec)
                        .map_err(|e| format!("@system trace: {e}"))?;
                    log::warn!(
                        target: crate::SECURITY_LOG_TARGET,
                        "{who}: log filter changed from {before:?} to {now:?}"
                    );
                    Ok(format!("Log filter: {now} (was {before})"))
                })
                .await
                .unwrap_or_else(|e| Err(format!("@system trace: {e}")));
                let result = set.map(|text| json!({"type": "text", "content": text}));
                addr.do_send(TurnEvent::Answered { turn, result });
            },
            ctx,
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn history_is_numbered_and_names_tools() {
        assert_eq!(
            history_text_of(&[], 0, 20),
            "The chat history of this conversation is empty."
        );
        let history = vec![
            ChatMessage::text(Role::User, "hello"),
            ChatMessage::text(Role::Assistant, "echo: hello"),
            ChatMessage::text(Role::User, "what is 2+3"),
            ChatMessage {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "calculate".into(),
                    input: json!({"expression": "2+3"}),
                }],
            },
            ChatMessage {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: "5".into(),
                    is_error: false,
                }],
            },
            ChatMessage::text(Role::Assistant, "5\nsecond line"),
        ];
        assert_eq!(
            history_text_of(&history, history.len(), 4),
            "Chat history: the last 4 of 6 messages\n\
             #3 user: what is 2+3\n\
             #4 assistant: → calculate {\"expression\":\"2+3\"}\n\
             #5 tool calculate: 5\n\
             #6 assistant: 5\n    second line"
        );
        assert!(history_text_of(&history, history.len(), 100)
            .starts_with("Chat history: the last 6 of 6"));
        let long = ChatMessage::text(Role::User, "x".repeat(1000));
        let text = history_text_of(&[long], 1, 1);
        assert!(text.ends_with('…') && text.len() < 500, "{text}");
    }

    #[test]
    fn session_text_names_everything() {
        let id = ConversationId::parse("c0ffee00-0000-4000-8000-000000000000").unwrap();
        let facts = SessionFacts {
            id,
            record: Some(ConversationInfo {
                conversation_id: id,
                name: "Research".into(),
                client_count: 2,
                created_at: "2026-01-02T03:04:05.000Z".into(),
                message_count: 3,
                indexed_message_count: None,
            }),
            dir: "/tmp/x".into(),
            requests: 3,
            chat_messages: 6,
            clients: vec!["0".into(), "1".into()],
            provider: "builtin (offline rules, no model)".into(),
            context: "1,234 of 8,192 tokens (15%), model `m`".into(),
        };
        let text = session_text(&facts);
        for part in [
            "- Id: `c0ffee00-0000-4000-8000-000000000000`",
            "- Name: \"Research\"",
            "- Persist directory: `/tmp/x`",
            "- Created: 2026-01-02T03:04:05.000Z",
            "- Messages: 3 requests in the display log, 6 in the chat history",
            "- Clients joined: 2 (connections 0, 1)",
            "- Provider: builtin",
            "- Context: 1,234 of 8,192 tokens (15%), model `m`",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }
}
