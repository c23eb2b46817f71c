//! Token usage and the context meter: what a model call reports it used ([`Usage`], read by
//! a provider from its answer) and how much of the model's context a conversation occupies
//! ([`ContextMeter`], kept per conversation by `conversation/meter.rs` and persisted beside
//! its chat history by [`crate::storage::context_meter`]).
//!
//! # The meter's rules
//! - `contextTokens` is absolute: each model call re-sends the whole history, so what a turn
//!   reports (its last model call's input plus output tokens) is the context the
//!   conversation now occupies, not an increment.
//! - A turn that reports less than the baseline (the meter before it) keeps the baseline and
//!   adds only its own output tokens, never its input: the input re-sends the history the
//!   baseline already counts, and adding it would count that history twice. This happens
//!   when a provider under-reports (prompt caching, a server that counts only new tokens, the
//!   first turn after a restart of the model server).
//! - The result is capped at `contextWindow` when one is known.
//! - `@compact` and `@system meter reset` clear the meter; the next turn's report is the new
//!   baseline.
//!
//! [`ContextMeter::after_turn`] is the rule; it is pure so the unit tests below pin each case.

use serde::{Deserialize, Serialize};

/// Longest model name kept in a meter, in characters: the name comes from the provider's
/// answer (the network), and the meter goes to every client and to disk after every turn.
pub const MAX_MODEL_CHARS: usize = 200;

/// Largest token count a usage report may carry and still be believed: 2^30, a hundred times
/// the largest context windows models have (~10M tokens) and far below 2^53, where JavaScript
/// clients stop counting exactly. A report above it (a broken or hostile endpoint answered
/// 9,223,372,036,854,775,807) is ignored as if the call had reported nothing, so the meter
/// never shows a figure clients round and keeps it until a reset.
pub const MAX_USAGE_TOKENS: u64 = 1 << 30;

/// What one model call used, as the provider reported it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    /// Tokens the call sent: system prompt, history, this turn's messages, tools
    /// (`usage.prompt_tokens` in chat-completions answers).
    pub input_tokens: u64,
    /// Tokens the model answered with (`usage.completion_tokens`).
    pub output_tokens: u64,
    /// The model that answered, as it named itself (`model` of the answer); `None` when the
    /// answer does not say.
    pub model: Option<String>,
}

impl Usage {
    /// Whether both counts are believable (at most [`MAX_USAGE_TOKENS`] each).
    pub fn is_plausible(&self) -> bool {
        self.input_tokens <= MAX_USAGE_TOKENS && self.output_tokens <= MAX_USAGE_TOKENS
    }
}

/// How much of the model's context a conversation occupies: what `getStatus`, `@system
/// session`, the web client's header and the CLI's prompt show, and what the
/// `contextMeter` notification carries. Serialized as the wire and the file spell it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextMeter {
    /// Tokens of context in use after the last turn that reported usage (see the module's
    /// rules).
    pub context_tokens: u64,
    /// The model's context window in tokens, when known (`ROUNDTABLE_OPENAI_CONTEXT_WINDOW`);
    /// `contextTokens` never exceeds it.
    pub context_window: Option<u64>,
    /// The model that reported it (at most [`MAX_MODEL_CHARS`] characters), when known.
    pub model: Option<String>,
}

impl ContextMeter {
    /// The meter after a turn that reported `usage`, from the meter before it (`baseline`,
    /// `None` after a reset or before the first report), with the model's context `window`
    /// as the provider knows it now. `default_model` names the model when the answer did not.
    pub fn after_turn(
        baseline: Option<&ContextMeter>,
        usage: &Usage,
        window: Option<u64>,
        default_model: Option<&str>,
    ) -> ContextMeter {
        let reported = usage.input_tokens.saturating_add(usage.output_tokens);
        let tokens = match baseline {
            Some(b) if reported < b.context_tokens => {
                b.context_tokens.saturating_add(usage.output_tokens)
            }
            _ => reported,
        };
        let model = usage
            .model
            .as_deref()
            .or(default_model)
            .map(|m| m.chars().take(MAX_MODEL_CHARS).collect());
        ContextMeter {
            context_tokens: window.map_or(tokens, |w| tokens.min(w)),
            context_window: window,
            model,
        }
    }

    /// The share of the window in use, in whole percent (rounded down), when the window is
    /// known and not zero.
    pub fn percent(&self) -> Option<u64> {
        self.context_window
            .filter(|w| *w > 0)
            .map(|w| self.context_tokens.saturating_mul(100) / w)
    }

    /// `1,234 of 8,192 tokens (15%), model \`m\``: the meter in words (`@system session`,
    /// `@system meter`).
    pub fn describe(&self) -> String {
        let mut out = format!("{} ", thousands(self.context_tokens));
        if let Some(window) = self.context_window {
            out.push_str(&format!("of {} ", thousands(window)));
        }
        out.push_str("tokens");
        if let Some(p) = self.percent() {
            out.push_str(&format!(" ({p}%)"));
        }
        if let Some(model) = &self.model {
            out.push_str(&format!(", model `{model}`"));
        }
        out
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            model: Some("m".into()),
        }
    }

    fn meter(tokens: u64, window: Option<u64>) -> ContextMeter {
        ContextMeter {
            context_tokens: tokens,
            context_window: window,
            model: Some("m".into()),
        }
    }

    /// The first report is the meter; a later, larger one replaces it (absolute, not added).
    #[test]
    fn a_report_is_the_absolute_context() {
        let first = ContextMeter::after_turn(None, &usage(1000, 200), Some(8192), None);
        assert_eq!(first, meter(1200, Some(8192)));
        let second = ContextMeter::after_turn(Some(&first), &usage(1300, 100), Some(8192), None);
        assert_eq!(second.context_tokens, 1400);
        assert_eq!(second.percent(), Some(17));
    }

    /// A turn that reports less than the baseline (the first turn after a resume, a provider
    /// counting only uncached input) keeps the baseline and adds only its output tokens:
    /// never its input, which re-sends the history the baseline already counts.
    #[test]
    fn a_dip_keeps_the_baseline_and_adds_only_output() {
        let baseline = meter(42_000, Some(200_000));
        let after = ContextMeter::after_turn(Some(&baseline), &usage(300, 50), Some(200_000), None);
        assert_eq!(after.context_tokens, 42_050);
        // Equal to the baseline is not a dip: it is the context as reported.
        let same = ContextMeter::after_turn(Some(&baseline), &usage(41_000, 1000), None, None);
        assert_eq!(same.context_tokens, 42_000);
        // Without a baseline (after a reset) the small report is the meter.
        let fresh = ContextMeter::after_turn(None, &usage(300, 50), Some(200_000), None);
        assert_eq!(fresh.context_tokens, 350);
    }

    /// Never above the window, whichever rule produced the count; without a window there is
    /// no cap and no percentage.
    #[test]
    fn the_meter_is_capped_at_the_window() {
        let over = ContextMeter::after_turn(None, &usage(9000, 500), Some(8192), None);
        assert_eq!((over.context_tokens, over.percent()), (8192, Some(100)));
        let dip =
            ContextMeter::after_turn(Some(&meter(8100, None)), &usage(10, 500), Some(8192), None);
        assert_eq!(dip.context_tokens, 8192);
        let unbounded = ContextMeter::after_turn(None, &usage(9000, 500), None, None);
        assert_eq!(
            (unbounded.context_tokens, unbounded.percent()),
            (9500, None)
        );
    }

    /// The answer's model name wins over the configured one, clipped; the text names the
    /// count, the window, the share and the model.
    #[test]
    fn model_and_description() {
        let named = ContextMeter::after_turn(None, &usage(1, 1), None, Some("configured"));
        assert_eq!(named.model.as_deref(), Some("m"));
        let unnamed = Usage {
            model: None,
            ..usage(1, 1)
        };
        let configured = ContextMeter::after_turn(None, &unnamed, None, Some("configured"));
        assert_eq!(configured.model.as_deref(), Some("configured"));
        let long = Usage {
            model: Some("x".repeat(1000)),
            ..usage(1, 1)
        };
        let clipped = ContextMeter::after_turn(None, &long, None, None);
        assert_eq!(clipped.model.unwrap().len(), MAX_MODEL_CHARS);
        assert_eq!(
            meter(1234, Some(8192)).describe(),
            "1,234 of 8,192 tokens (15%), model `m`"
        );
        assert_eq!(
            ContextMeter {
                context_tokens: 1_234_567,
                context_window: None,
                model: None
            }
            .describe(),
            "1,234,567 tokens"
        );
        assert_eq!(
            serde_json::to_value(meter(5, None)).unwrap(),
            serde_json::json!({"contextTokens": 5, "contextWindow": null, "model": "m"})
        );
    }
}
