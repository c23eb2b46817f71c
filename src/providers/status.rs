//! What an error answer of a model API means, in words the user can act on: [`status_error`]
//! turns a status and its body into the [`ProviderError`] the turn shows and `lastError`
//! keeps (a refused key, an unknown model, a conversation too long for the model, or the
//! status with the server's own reason); [`is_retryable`] says which statuses are worth
//! another attempt. Pure; used by `call.rs` for both providers' APIs, whose error bodies
//! share a shape (`{"error": {"message": …}}`, Anthropic's inside `{"type": "error"}`).

use roundtable_actors::agent::ProviderError;
use serde_json::Value;

/// How much of an error body (or unparsable body) is kept in a [`ProviderError`].
pub const MAX_ERROR_BODY_CHARS: usize = 500;

/// The first [`MAX_ERROR_BODY_CHARS`] characters of `text`, with `…` when cut.
pub fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// `text` with every occurrence of `secret` replaced by `***`: a server that echoes the key
/// it refused must not put it into a turn's output.
pub fn scrub(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(secret) if secret.len() >= 4 => text.replace(secret, "***"),
        _ => text.to_owned(),
    }
}

/// Statuses worth another attempt: a rate limit (429), a time-out of the server (408), an
/// error of the server or of a gateway in front of it (500, 502, 503, 504), Anthropic's
/// "overloaded" (529).
pub fn is_retryable(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// The server's reason in an error body: `error.message` (OpenAI, Anthropic, OpenRouter,
/// Groq, Mistral…), `error` when it is a string, `message` or `detail` at the top (vLLM,
/// FastAPI servers); else the body itself. Truncated.
pub fn reason(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let found = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail").filter(|d| d.is_string()))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    truncate(found.as_deref().unwrap_or(body.trim()))
}

/// Whether an error body says the request was longer than the model's context: the words of
/// OpenAI (`context_length_exceeded`), Anthropic (`prompt is too long`), llama.cpp
/// (`exceeds the available context size`), vLLM and OpenRouter (`maximum context length`),
/// Mistral and others (`too many tokens`, `context window`).
pub fn is_context_overflow(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "context size",
        "exceed_context",
        "prompt is too long",
        "too many tokens",
        "input is too long",
    ]
    .iter()
    .any(|words| body.contains(words))
}

/// The error of an answer with `status` and `body` to a call for `model` at `shown_url`
/// (see the module docs); `secret` (the API key) is scrubbed from the server's words.
pub fn status_error(
    status: u16,
    body: &str,
    model: &str,
    shown_url: &str,
    secret: Option<&str>,
) -> ProviderError {
    let reason = scrub(&reason(body), secret);
    match status {
        401 | 403 => ProviderError::KeyRefused { status, reason },
        404 if body.to_ascii_lowercase().contains("model") => ProviderError::UnknownModel {
            model: model.to_owned(),
            reason,
        },
        404 => ProviderError::Status {
            status,
            body: format!("{reason} (no such endpoint: {shown_url}; is the base URL right?)"),
        },
        400 | 413 | 422 if is_context_overflow(body) => ProviderError::ContextOverflow { reason },
        _ => ProviderError::Status {
            status,
            body: reason,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16, body: &str) -> ProviderError {
        status_error(
            status,
            body,
            "gpt-x",
            "https://api.example.com/v1/chat/completions",
            Some("sk-secret-key"),
        )
    }

    /// Each case's exact text, as the turn's output and `lastError` show it.
    #[test]
    fn statuses_in_words() {
        let refused = error(
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-secret-key.","type":"invalid_request_error"}}"#,
        );
        assert_eq!(
            refused.to_string(),
            "the provider refused the API key (HTTP 401): Incorrect API key provided: ***."
        );
        assert_eq!(
            error(
                403,
                r#"{"type":"error","error":{"type":"permission_error","message":"no access"}}"#
            )
            .to_string(),
            "the provider refused the API key (HTTP 403): no access"
        );
        assert_eq!(
            error(404, r#"{"error":{"message":"The model `gpt-x` does not exist","code":"model_not_found"}}"#)
                .to_string(),
            "the provider does not serve the model `gpt-x` (HTTP 404): The model `gpt-x` does \
             not exist; `roundtable models` lists the models it serves"
        );
        assert_eq!(
            error(404, "<html>Not Found</html>").to_string(),
            "provider returned HTTP 404: <html>Not Found</html> (no such endpoint: \
             https://api.example.com/v1/chat/completions; is the base URL right?)"
        );
        let overflow = error(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert!(matches!(overflow, ProviderError::ContextOverflow { .. }));
        assert_eq!(
            overflow.to_string(),
            "the conversation is longer than the model's context window (prompt is too long: \
             210000 tokens > 200000 maximum): `@compact` summarizes its history so that it fits"
        );
        assert!(matches!(
            error(
                400,
                r#"{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 8192 tokens"}}"#
            ),
            ProviderError::ContextOverflow { .. }
        ));
        assert!(matches!(
            error(
                400,
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#
            ),
            ProviderError::ContextOverflow { .. }
        ));
        assert_eq!(
            error(
                400,
                r#"{"error":{"message":"Unknown parameter: 'stream_options'"}}"#
            ),
            ProviderError::Status {
                status: 400,
                body: "Unknown parameter: 'stream_options'".into()
            }
        );
        assert_eq!(
            error(500, r#"{"error":"model crashed"}"#).to_string(),
            "provider returned HTTP 500: model crashed"
        );
        assert_eq!(
            error(502, r#"{"object":"error","message":"upstream down"}"#).to_string(),
            "provider returned HTTP 502: upstream down"
        );
    }

    #[test]
    fn retryable_statuses_and_truncation() {
        for status in [408, 429, 500, 502, 503, 504, 529] {
            assert!(is_retryable(status), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422, 501] {
            assert!(!is_retryable(status), "{status}");
        }
        assert_eq!(truncate("short"), "short");
        let cut = truncate(&"é".repeat(MAX_ERROR_BODY_CHARS + 10));
        assert_eq!(cut.chars().count(), MAX_ERROR_BODY_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(
            scrub("key abc", Some("abc")),
            "key abc",
            "too short to scrub"
        );
        assert_eq!(scrub("key abcd!", Some("abcd")), "key ***!");
    }
}
