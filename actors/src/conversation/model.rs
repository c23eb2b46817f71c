//! Which model provider a conversation uses: the server's default, or the one it chose with
//! `@system model NAME` (a provider the server offers: `builtin`, `openai`, `anthropic`, or a
//! `[providers.NAME]` profile). The choice is the conversation's, for everyone in it: written
//! to `model.json` in its directory through the log writer (durable, in backups, replicated in
//! a cluster), read back when it loads, announced to every client once durable
//! (`notify(null, "conversationModel", {provider, model}, "agent-server")`, a Roundtable
//! extension; the command's answer is in the display log, so a later client replays it), and
//! carried by `getStatus` (`model`: the choice, what it calls, and what the server offers).
//! A choice the server no longer offers (its profile removed) falls back to the default,
//! with a warning.
//!
//! Who talks to it: every part that calls the model (`turn_events.rs`, `compaction.rs`,
//! `handoff.rs`, `meter.rs`), `@system model` (`system.rs`), `getStatus` (`dispatcher.rs`).

use std::path::Path;
use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};

use super::audience::Audience;
use super::request_queue::Request;
use super::Conversation;
use crate::agent::Provider;
use crate::client::OutboundCall;

/// The file of a conversation's choice, in its directory.
pub const MODEL_FILE: &str = "model.json";
/// The `notify` event that announces a change of the conversation's model.
pub const MODEL_EVENT: &str = "conversationModel";

/// A conversation's choice of provider.
#[derive(Debug)]
pub(super) struct ModelChoice {
    /// `model.json` in the conversation's directory.
    path: Arc<Path>,
    /// The provider's name; `None`: the server's default.
    chosen: Option<String>,
}

impl ModelChoice {
    /// The choice recorded in `dir` (none when the file is missing or does not say).
    pub(super) fn load(dir: &Path) -> ModelChoice {
        let path: Arc<Path> = dir.join(MODEL_FILE).into();
        let chosen = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|v| v["provider"].as_str().map(String::from));
        ModelChoice { path, chosen }
    }
}

/// `name, model \`m\``, or `builtin (offline rules, no model)`.
pub(super) fn provider_line(provider: &dyn Provider) -> String {
    match provider.model() {
        Some(model) => format!("{}, model `{model}`", provider.name()),
        None => format!("{} (offline rules, no model)", provider.name()),
    }
}

impl Conversation {
    /// The provider this conversation's requests use.
    pub(super) fn provider(&self) -> Arc<dyn Provider> {
        let providers = &self.setup.runtime.providers;
        match self.model.chosen.as_deref() {
            Some(name) => providers.get(name).unwrap_or_else(|| {
                log::warn!(
                    "conversation {}: its model {name:?} is no provider of this server any \
                     more; using the default ({})",
                    self.setup.id,
                    providers.default_name()
                );
                providers.default_provider()
            }),
            None => providers.default_provider(),
        }
    }

    /// The name of the provider this conversation uses.
    fn provider_name(&self) -> String {
        let providers = &self.setup.runtime.providers;
        self.model
            .chosen
            .clone()
            .filter(|name| providers.get(name).is_some())
            .unwrap_or_else(|| providers.default_name().to_owned())
    }

    /// `getStatus`'s `model`: the provider in use, what it calls, whether it is the server's
    /// default, and every provider the server offers (what a client may pick).
    pub(super) fn model_json(&self) -> Value {
        let providers = &self.setup.runtime.providers;
        let name = self.provider_name();
        json!({
            "provider": name,
            "model": self.provider().model(),
            "default": name == providers.default_name(),
            "providers": providers.names().collect::<Vec<_>>(),
        })
    }

    /// `@system model`: which provider this conversation uses, and which it could.
    pub(super) fn model_text(&self) -> String {
        let providers = &self.setup.runtime.providers;
        let offered: Vec<String> = providers
            .names()
            .map(|n| {
                if n == providers.default_name() {
                    format!("`{n}` (the server's default)")
                } else {
                    format!("`{n}`")
                }
            })
            .collect();
        format!(
            "- Model: {}\n- Providers: {}\n\n`@system model NAME` makes this conversation use \
             another; `@system model default` the server's default.",
            provider_line(self.provider().as_ref()),
            offered.join(", ")
        )
    }

    /// `@system model NAME` for the running request `turn`: recorded, then announced to every
    /// client, then the request completes with what changed. `default` goes back to the
    /// server's default.
    pub(super) fn choose_model(
        &mut self,
        turn: u64,
        request: &Request,
        name: String,
        ctx: &mut Context<Self>,
    ) {
        let providers = &self.setup.runtime.providers;
        let chosen = match name.as_str() {
            "default" => None,
            name if providers.get(name).is_some() => Some(name.to_owned()),
            _ => {
                let error = format!(
                    "@system model: this server offers no provider named \"{name}\"; it offers {}",
                    providers.names().collect::<Vec<_>>().join(", ")
                );
                let content = json!({"type": "text", "content": error, "kind": "error"});
                return self.finish_showing(turn, request, content, Some(error), ctx);
            }
        };
        if self.writes_closed {
            let error = "@system model: the conversation is closing".to_string();
            let content = json!({"type": "text", "content": error, "kind": "error"});
            return self.finish_showing(turn, request, content, Some(error), ctx);
        }
        let record = json!({"provider": chosen}).to_string().into_bytes();
        let written = self
            .setup
            .runtime
            .log_writer
            .replace(&self.model.path, record);
        let request = request.clone();
        ctx.spawn(
            async move {
                written
                    .await
                    .unwrap_or_else(|_| Err("the log writer has stopped".into()))
            }
            .into_actor(self)
            .map(move |written, act, ctx| {
                if let Err(e) = written {
                    let error = format!("@system model: the choice could not be saved: {e}");
                    let content = json!({"type": "text", "content": error, "kind": "error"});
                    return act.finish_showing(turn, &request, content, Some(error), ctx);
                }
                act.model.chosen = chosen;
                if !act.is_current(turn) {
                    return;
                }
                let provider = act.provider();
                let notice = json!([null, MODEL_EVENT, {"provider": act.provider_name(),
                    "model": provider.model()}, "agent-server"]);
                act.emit(OutboundCall::new("notify", &notice), &Audience::Everyone);
                let text = format!(
                    "This conversation now uses {} for every request.",
                    provider_line(provider.as_ref())
                );
                let content = json!({"type": "markdown", "content": text});
                act.finish_showing(turn, &request, content, None, ctx);
            }),
        );
    }
}
