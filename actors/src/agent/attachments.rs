//! Attachments of a request (`submitCommand`'s `attachments`, e.g. `agent-cli run request
//! <text> <file>`, which sends the file as base64) as the model sees them: the user message of
//! the turn gets one [`ContentBlock::Image`] per image, and a short text note for anything
//! that cannot be shown to a model (not a string, not an image type we recognise).
//!
//! Images stay in that one turn: [`for_history`] swaps them for a text note before the turn's
//! messages are committed, so the history file and memory stay small and later turns know an
//! image was there. Who calls it: the agent loop ([`super::turn`]) when it builds a turn, and
//! the conversation's dispatcher, which refuses a request past the bounds ([`check_bounds`])
//! before anything is queued, written or sent to anyone.

use serde_json::Value;

use super::{ChatMessage, ContentBlock, Role};
use crate::protocol::RpcError;

/// Attachments one request may carry: each becomes a content block of the turn's user
/// message (and a note in the history), so their number is bounded apart from their size.
pub const MAX_ATTACHMENTS: usize = 16;
/// Bytes of attachments one request may carry together, counted as sent (the base64 text,
/// which is what the server holds and hands to the model; about 6 MiB of pictures).
pub const MAX_ATTACHMENT_BYTES: usize = 8 << 20;

/// The size of an attachment as sent: a string's length in bytes, anything else's JSON text.
pub fn size(attachment: &Value) -> usize {
    match attachment {
        Value::String(s) => s.len(),
        other => other.to_string().len(),
    }
}

/// `Err` with the exact error when a request's attachments are past [`MAX_ATTACHMENTS`] or
/// [`MAX_ATTACHMENT_BYTES`].
pub fn check_bounds(attachments: &[Value]) -> Result<(), RpcError> {
    if attachments.len() > MAX_ATTACHMENTS {
        return Err(RpcError::TooManyAttachments {
            count: attachments.len(),
            limit: MAX_ATTACHMENTS,
        });
    }
    let bytes: usize = attachments.iter().map(size).sum();
    if bytes > MAX_ATTACHMENT_BYTES {
        return Err(RpcError::AttachmentsTooLarge {
            bytes,
            limit: MAX_ATTACHMENT_BYTES,
        });
    }
    Ok(())
}

/// Image types recognised from the start of a bare base64 attachment: (base64 prefix, MIME).
/// A `data:image/…` URL is taken as it is.
const SIGNATURES: [(&str, &str); 4] = [
    ("iVBORw0KGgo", "image/png"),
    ("/9j/", "image/jpeg"),
    ("R0lGOD", "image/gif"),
    ("UklGR", "image/webp"),
];

/// The `data:` URL of an image attachment, or why it cannot be shown to a model.
pub fn image_url(attachment: &Value) -> Result<String, &'static str> {
    let text = attachment.as_str().ok_or("not a string")?.trim();
    if let Some(rest) = text.strip_prefix("data:") {
        return if rest.starts_with("image/") && rest.contains(";base64,") {
            Ok(text.to_string())
        } else {
            Err("a data URL that is not a base64 image")
        };
    }
    let mime = SIGNATURES
        .iter()
        .find(|(prefix, _)| text.starts_with(prefix))
        .map(|(_, mime)| *mime)
        .ok_or("not a PNG, JPEG, GIF or WebP image in base64")?;
    Ok(format!("data:{mime};base64,{text}"))
}

/// The user's message of a turn: the text, then each attachment (an image block, or a note
/// saying why it is left out).
pub fn user_message(text: &str, attachments: &[Value]) -> ChatMessage {
    let mut message = ChatMessage::text(Role::User, text);
    for (i, attachment) in attachments.iter().enumerate() {
        message.content.push(match image_url(attachment) {
            Ok(url) => ContentBlock::Image { url },
            Err(why) => ContentBlock::Text {
                text: format!("[attachment {} left out: {why}]", i + 1),
            },
        });
    }
    message
}

/// `message` as the history keeps it: each image replaced by a note naming its type and size.
pub fn for_history(mut message: ChatMessage) -> ChatMessage {
    for block in &mut message.content {
        if let ContentBlock::Image { url } = block {
            *block = ContentBlock::Text {
                text: image_note(url),
            };
        }
    }
    message
}

/// `[image attachment (image/png, 12 KiB), not kept in the history]`.
fn image_note(url: &str) -> String {
    let (head, data) = url.split_once(',').unwrap_or(("", url));
    let mime = head.trim_start_matches("data:").trim_end_matches(";base64");
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    let bytes = (data.len() / 4 * 3).saturating_sub(padding);
    let size = if bytes >= 1024 {
        format!("{} KiB", bytes.div_ceil(1024))
    } else {
        format!("{bytes} bytes")
    };
    format!("[image attachment ({mime}, {size}), not kept in the history]")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Past 16 attachments or 8 MiB of them (as sent) a request is refused, exactly.
    #[test]
    fn requests_carry_bounded_attachments() {
        assert!(check_bounds(&vec![json!("x"); 16]).is_ok());
        assert_eq!(
            check_bounds(&vec![json!("x"); 190_000])
                .unwrap_err()
                .to_string(),
            "Too many attachments: 190000 (at most 16)"
        );
        let half = json!("A".repeat(MAX_ATTACHMENT_BYTES / 2));
        assert!(check_bounds(&[half.clone(), half.clone()]).is_ok());
        assert_eq!(
            check_bounds(&[half.clone(), half, json!({"x": 1})])
                .unwrap_err()
                .to_string(),
            "Attachments too large: 8388615 bytes (at most 8388608)"
        );
    }

    #[test]
    fn images_are_recognised_and_kept_out_of_history() {
        assert_eq!(
            image_url(&json!("iVBORw0KGgoAAAA")).unwrap(),
            "data:image/png;base64,iVBORw0KGgoAAAA"
        );
        assert_eq!(
            image_url(&json!("data:image/jpeg;base64,/9j/AA")).unwrap(),
            "data:image/jpeg;base64,/9j/AA"
        );
        assert_eq!(image_url(&json!(3)), Err("not a string"));
        assert!(image_url(&json!("aGVsbG8=")).is_err());
        assert!(image_url(&json!("data:text/plain,hi")).is_err());

        let m = user_message("look", &[json!("/9j/4AAQ"), json!({"x": 1})]);
        assert_eq!(
            m.joined_text(),
            "look\n[attachment 2 left out: not a string]"
        );
        assert!(
            matches!(&m.content[1], ContentBlock::Image { url } if url.starts_with("data:image/jpeg"))
        );
        let kept = for_history(m);
        assert!(kept
            .content
            .iter()
            .all(|b| matches!(b, ContentBlock::Text { .. })));
        assert!(kept
            .joined_text()
            .contains("[image attachment (image/jpeg, 6 bytes), not kept in the history]"));
    }
}
