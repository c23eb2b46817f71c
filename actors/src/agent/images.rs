//! The images tools give a turn, as its model calls carry them: each tool result's images
//! follow the results (a user message after the tool messages, as attachments are sent), and
//! every later model call of the turn sends them again, since the model reads the whole turn
//! each time. Without a bound a tool answering 3 × 4 MiB images at each of 10 model calls
//! grew the requests from 12.6 to 113 MB (574 MB of RSS for one turn).
//!
//! [`keep_within_budget`] holds the images the next model call carries to
//! [`MAX_TOOL_IMAGE_BYTES`]: the newest are kept, each older one is replaced by a note saying
//! it is not sent again (the model reads the note where the image was; the clients are told
//! by the agent loop). The request's own attachments, in the turn's first message, are not
//! counted here: they are bounded when the request is submitted
//! ([`super::attachments::MAX_ATTACHMENT_BYTES`]) and are what the user asked about.
//!
//! Who talks to it: the agent loop ([`super::turn`]), after each round of tool calls.

use super::{ChatMessage, ContentBlock};

/// Bytes of tool images (as `data:` URLs, base64 text: what is held and sent) one model call
/// carries: four images of the 4 MiB an MCP result keeps each. OpenAI takes 50 MB per request
/// and Anthropic 32 MB, so a request stays well within both with the turn's other text; and
/// a turn holds at most this much of them whatever its tools return.
pub const MAX_TOOL_IMAGE_BYTES: usize = 16 << 20;

/// Replaces the oldest tool images of the turn `messages` (every message after the first,
/// the user's) by notes until the rest fit in [`MAX_TOOL_IMAGE_BYTES`]; how many were
/// replaced now.
pub fn keep_within_budget(messages: &mut [ChatMessage]) -> usize {
    let mut kept = 0usize;
    let mut dropped = 0;
    let tool_messages = messages.iter_mut().skip(1).rev();
    for message in tool_messages {
        for block in message.content.iter_mut().rev() {
            let ContentBlock::Image { url } = block else {
                continue;
            };
            if kept + url.len() <= MAX_TOOL_IMAGE_BYTES {
                kept += url.len();
                continue;
            }
            let note = format!(
                "[{} not sent again: the turn's images passed {} MiB; newer ones are sent]",
                describe(url),
                MAX_TOOL_IMAGE_BYTES >> 20
            );
            *block = ContentBlock::Text { text: note };
            dropped += 1;
        }
    }
    dropped
}

/// `image (image/png, 4095 KiB)`: the type and the size of a `data:` URL's image.
fn describe(url: &str) -> String {
    let (head, data) = url.split_once(',').unwrap_or(("", url));
    let mime = head.trim_start_matches("data:").trim_end_matches(";base64");
    format!(
        "image ({mime}, {} KiB)",
        (data.len() / 4 * 3).div_ceil(1024)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Role;

    fn image(kib: usize) -> ContentBlock {
        ContentBlock::Image {
            url: format!("data:image/png;base64,{}", "A".repeat(kib * 1024)),
        }
    }

    /// The newest images are kept up to the budget; older ones become notes, once; the
    /// user's own message is never touched.
    #[test]
    fn the_oldest_tool_images_go_first() {
        let four = 4 * 1024;
        let mut messages = vec![
            ChatMessage {
                role: Role::User,
                content: vec![
                    image(four),
                    image(four),
                    image(four),
                    image(four),
                    image(four),
                ],
            },
            ChatMessage {
                role: Role::User,
                content: vec![image(four), image(four), image(four)],
            },
            ChatMessage {
                role: Role::User,
                content: vec![image(four), image(four), image(four)],
            },
        ];
        assert_eq!(keep_within_budget(&mut messages), 3);
        let images = |m: &ChatMessage| {
            m.content
                .iter()
                .filter(|b| matches!(b, ContentBlock::Image { .. }))
                .count()
        };
        assert_eq!(
            (
                images(&messages[0]),
                images(&messages[1]),
                images(&messages[2])
            ),
            (5, 0, 3)
        );
        assert_eq!(
            messages[1].joined_text().lines().next().unwrap(),
            "[image (image/png, 3072 KiB) not sent again: the turn's images passed 16 MiB; \
             newer ones are sent]"
        );
        // Nothing more to drop: the notes stay as they are.
        assert_eq!(keep_within_budget(&mut messages), 0);
    }
}
