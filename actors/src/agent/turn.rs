//! The agent loop of one turn: send history + tools to the provider, run the tool calls it
//! returns, append the results, repeat until the provider answers without tool calls or the
//! iteration limit is hit. Output goes to a [`TurnSink`] (the conversation, which logs and
//! routes it); the new chat messages come back in the [`TurnOutcome`] and are committed by the
//! conversation only when the turn finishes.
//!
//! Each model call offers the tools of that moment and routes the calls it returns through
//! them ([`super::routing`]: built-ins, the asking tools, `manage_conversation`, and every
//! registered [`ToolServer`]'s tools as `server__tool`). A failing or unknown tool becomes an
//! `is_error` tool result the model sees, never a crashed turn. The images tools return are
//! sent with the later model calls of the turn within a budget ([`super::images`]); the
//! older ones past it are not sent again, and the clients are told.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use super::routing::{call_tool, OfferedTools};
use super::usage::{self, Usage};
use super::{
    attachments, AnswerDelta, ChatMessage, ContentBlock, DeltaSink, Provider, ProviderError,
    ProviderRequest, ProviderResponse, Role,
};

pub use super::routing::offered_tools;
pub use super::tools::interactive::ASK_USER;
pub use super::turn_sink::{
    ToolCallContext, ToolOutput, ToolServer, ToolServerStatus, TurnSink, TurnStep,
};
pub use super::SERVER_SEPARATOR;

/// Everything one turn needs.
pub struct TurnInput {
    /// The model.
    pub provider: Arc<dyn Provider>,
    /// System prompt.
    pub system: String,
    /// Committed chat history before this turn (shared with the conversation, not copied).
    pub history: Arc<Vec<ChatMessage>>,
    /// The user's command.
    pub command: String,
    /// The request's attachments (`submitCommand`'s), shown to the model with the command
    /// (see [`attachments`]).
    pub attachments: Vec<Value>,
    /// Provider calls allowed before the loop gives up.
    pub max_iterations: usize,
    /// External tool servers by prefix.
    pub tool_servers: HashMap<String, Arc<dyn ToolServer>>,
    /// The directory the request works in, as the working-directory policy resolved it
    /// (`options.workingDirectory`); for tools that work on files (an MCP server's roots).
    pub working_directory: Option<PathBuf>,
    /// A first model call refused as longer than the model's context window ends the turn
    /// quietly with [`TurnOutcome::overflow`] set, so its conversation can compact and run it
    /// again; false (the run after that compaction, or a call after tool calls): the exact
    /// error is shown.
    pub compact_on_overflow: bool,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// Messages to append to the chat history (starting with the user's; images already
    /// replaced by notes).
    pub messages: Vec<ChatMessage>,
    /// Set when the turn failed (shown as `lastError`).
    pub error: Option<String>,
    /// The usage the turn's last reporting model call gave: its input re-sends everything
    /// before it, so it and its output are the context the conversation occupies after the
    /// turn (the context meter follows it, see [`super::usage`]). `None` when no call
    /// reported usage.
    pub usage: Option<Usage>,
    /// The turn's first model call was refused as longer than the model's context window,
    /// and nothing was shown ([`TurnInput::compact_on_overflow`]).
    pub overflow: bool,
}

impl TurnOutcome {
    /// The outcome of a turn whose messages are `messages`: the user's message and tool
    /// results lose their images, which the history does not keep
    /// ([`attachments::for_history`]), and the model's answers their thinking, which is never
    /// sent back on a later turn ([`ContentBlock::Thinking`]).
    fn new(messages: Vec<ChatMessage>, error: Option<String>, usage: Option<Usage>) -> TurnOutcome {
        let messages = messages
            .into_iter()
            .map(|m| match m.role {
                Role::User => attachments::for_history(m),
                Role::Assistant => ChatMessage {
                    role: Role::Assistant,
                    content: m
                        .content
                        .into_iter()
                        .filter(|b| !matches!(b, ContentBlock::Thinking { .. }))
                        .collect(),
                },
            })
            .collect();
        TurnOutcome {
            messages,
            error,
            usage,
            overflow: false,
        }
    }
}

/// What a model call streamed before it ended.
#[derive(Debug, Clone, Copy, Default)]
struct Streamed {
    /// Pieces of its text went to the sink.
    text: bool,
    /// Pieces of its thinking went to the sink.
    thinking: bool,
}

/// One model call, its answer streamed to `sink` as it is written
/// ([`Provider::complete_streaming`]). The provider hands pieces to a channel the loop drains
/// while the call runs, so the sink (which the turn only borrows) never leaves this future;
/// the channel holds at most what the provider has read of one answer, which it bounds.
async fn call_streaming(
    provider: &dyn Provider,
    request: ProviderRequest,
    sink: &dyn TurnSink,
) -> (Result<ProviderResponse, ProviderError>, Streamed) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let deltas: DeltaSink = Box::new(move |delta| {
        let _ = tx.send(delta);
    });
    let mut streamed = Streamed::default();
    let mut show = |delta: AnswerDelta| {
        match &delta {
            AnswerDelta::Text(_) => streamed.text = true,
            AnswerDelta::Thinking(_) => streamed.thinking = true,
        }
        sink.stream(delta);
    };
    let call = provider.complete_streaming(request, deltas);
    tokio::pin!(call);
    let response = loop {
        tokio::select! {
            biased;
            Some(delta) = rx.recv() => show(delta),
            response = &mut call => {
                while let Ok(delta) = rx.try_recv() {
                    show(delta);
                }
                break response;
            }
        }
    };
    (response, streamed)
}

/// Runs the loop. Cancellation is by dropping the future.
pub async fn run_turn(input: TurnInput, sink: &dyn TurnSink) -> TurnOutcome {
    // Only this turn's messages are copied per model call; the history is shared.
    let mut messages = vec![attachments::user_message(
        &input.command,
        &input.attachments,
    )];
    let mut action_index = 0;
    let mut usage = None;
    for _ in 0..input.max_iterations.max(1) {
        // Read per model call: a server whose tool list changed offers the new one.
        let tools = OfferedTools::of(&input.tool_servers, input.provider.offers_demo_tools());
        let request = ProviderRequest {
            system: input.system.clone(),
            history: input.history.clone(),
            messages: messages.clone(),
            tools: tools.specs.clone(),
        };
        let asked = Instant::now();
        let (response, streamed) = call_streaming(input.provider.as_ref(), request, sink).await;
        sink.step(TurnStep::ModelCall {
            duration: asked.elapsed(),
        });
        let response = match response {
            Ok(r) => r,
            Err(ProviderError::ContextOverflow { .. })
                if input.compact_on_overflow && messages.len() == 1 && !streamed.text =>
            {
                // Its conversation compacts and runs the turn again; nothing to show yet.
                let mut outcome = TurnOutcome::new(messages, None, usage);
                outcome.overflow = true;
                return outcome;
            }
            Err(e) => {
                let text = e.to_string();
                sink.display(
                    json!({"type": "text", "content": text, "kind": "error"}),
                    None,
                );
                return TurnOutcome::new(messages, Some(text), usage);
            }
        };
        match response.usage {
            Some(reported) if !reported.is_plausible() => log::warn!(
                "the model reported usage of {} input and {} output tokens, above the {} a \
                 report may carry: ignored",
                reported.input_tokens,
                reported.output_tokens,
                usage::MAX_USAGE_TOKENS
            ),
            Some(reported) => usage = Some(reported),
            None => {}
        }
        let mut calls = Vec::new();
        for block in &response.content {
            match block {
                ContentBlock::Thinking { text, .. } if !text.trim().is_empty() => sink.display(
                    json!({"type": "text", "content": text, "kind": "info"}),
                    Some(json!({"thinking": true, "streamed": streamed.thinking})),
                ),
                ContentBlock::Text { text } if !text.trim().is_empty() => {
                    sink.display(
                        json!({"type": "markdown", "content": text}),
                        streamed.text.then(|| json!({"streamed": true})),
                    );
                }
                ContentBlock::ToolUse { id, name, input } => {
                    calls.push((id.clone(), name.clone(), input.clone()))
                }
                _ => {}
            }
        }
        if calls.is_empty() {
            // An answer with nothing in it (the builtin's after results it does not repeat)
            // leaves no empty message in the history, which some APIs refuse.
            if !response.content.is_empty() {
                messages.push(ChatMessage {
                    role: Role::Assistant,
                    content: response.content,
                });
            }
            return TurnOutcome::new(messages, None, usage);
        }
        messages.push(ChatMessage {
            role: Role::Assistant,
            content: response.content,
        });
        let mut results = Vec::new();
        let mut images = Vec::new();
        for (id, name, tool_input) in calls {
            let index = action_index;
            action_index += 1;
            sink.step(TurnStep::ActionStarted {
                index,
                tool: name.clone(),
                input: tool_input.clone(),
            });
            sink.display(
                json!({"type": "text", "content": format!("{name}({tool_input})"), "kind": "info"}),
                Some(json!({"toolCall": {"id": id, "name": name, "input": tool_input}})),
            );
            let started = Instant::now();
            let context = ToolCallContext {
                sink,
                working_directory: input.working_directory.as_deref(),
                action_index: index,
                ask_before_conversation_actions: !input.provider.acts_on_typed_words_only(),
            };
            let output = call_tool(&name, tool_input, &input.tool_servers, context, &tools).await;
            let (content, is_error) = (output.text, output.is_error);
            sink.step(TurnStep::ActionFinished {
                index,
                tool: name.clone(),
                result: content.clone(),
                is_error,
                duration: started.elapsed(),
            });
            sink.display(
                json!({"type": "text", "content": content, "kind": if is_error { "error" } else { "success" }}),
                Some(json!({"toolResult": {"id": id, "name": name, "content": content, "isError": is_error, "images": output.images.len()}})),
            );
            for url in output.images {
                images.push(ContentBlock::Text {
                    text: format!("[image returned by tool call {id} ({name})]"),
                });
                images.push(ContentBlock::Image { url });
            }
            results.push(ContentBlock::ToolResult {
                tool_use_id: id,
                content,
                is_error,
            });
        }
        // Images follow the results in the same message: the provider sends them as a user
        // message after the tool messages, as it sends attachments.
        results.extend(images);
        messages.push(ChatMessage {
            role: Role::User,
            content: results,
        });
        // The next model call carries the newest images within the budget.
        let dropped = super::images::keep_within_budget(&mut messages);
        if dropped > 0 {
            let text = format!(
                "{dropped} older images of this turn are not sent to the model again (the \
                 turn's tool images passed {} MiB; the newest are sent)",
                super::images::MAX_TOOL_IMAGE_BYTES >> 20
            );
            sink.display(
                json!({"type": "text", "content": text, "kind": "warning"}),
                None,
            );
        }
    }
    let note = format!(
        "Stopped after {} model calls without a final answer.",
        input.max_iterations.max(1)
    );
    sink.display(
        json!({"type": "text", "content": note, "kind": "warning"}),
        None,
    );
    messages.push(ChatMessage::text(Role::Assistant, note.clone()));
    TurnOutcome::new(messages, Some(note), usage)
}

/// One model call without running anything: what the model would do with `command`
/// (`@explain` / `@translate`).
pub async fn plan(input: TurnInput) -> Result<Vec<ContentBlock>, super::ProviderError> {
    let request = ProviderRequest {
        system: input.system,
        history: input.history,
        messages: vec![attachments::user_message(
            &input.command,
            &input.attachments,
        )],
        tools: offered_tools(&input.tool_servers, input.provider.offers_demo_tools()),
    };
    Ok(input.provider.complete(request).await?.content)
}

/// Renders a plan: the actions as JSON (`translate`) or as prose (`explain`).
pub fn describe_plan(request: &str, blocks: &[ContentBlock], explain: bool) -> String {
    let actions: Vec<Value> = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { name, input, .. } => {
                Some(json!({"tool": name, "input": input}))
            }
            _ => None,
        })
        .collect();
    let text: String = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    if !explain {
        let body = serde_json::to_string_pretty(&json!({"request": request, "actions": actions}))
            .expect("serializes");
        return format!("```json\n{body}\n```");
    }
    if actions.is_empty() {
        return format!(
            "\"{request}\" needs no tool: the assistant would answer directly:\n\n{text}"
        );
    }
    let steps: Vec<String> = actions
        .iter()
        .map(|a| {
            format!(
                "- call `{}` with `{}`",
                a["tool"].as_str().unwrap_or("?"),
                a["input"]
            )
        })
        .collect();
    format!(
        "To handle \"{request}\", the assistant would first:\n{}\nthen answer from the results.",
        steps.join("\n")
    )
}

#[cfg(test)]
mod tests;
