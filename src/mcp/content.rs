//! An MCP `tools/call` result as the model gets it: text blocks joined, images as images
//! (like a request's attachments), resource links and embedded resources as text lines (a
//! binary resource that is an image, as an image), `structuredContent` as JSON text when the
//! server sent it apart from its text. Everything is bounded: text past
//! [`MAX_RESULT_TEXT_BYTES`] is cut saying so, an image past [`MAX_IMAGE_BYTES`] (or past
//! [`MAX_IMAGES`] in one result) is dropped with a note.
//!
//! Pure functions on the result's JSON (the wire form, read through serde): used by the
//! supervisor ([`super::server`]) when a call answers.

use roundtable_actors::agent::turn::ToolOutput;
use serde_json::Value;

/// Text of one result kept for the model (and shown to the clients).
pub const MAX_RESULT_TEXT_BYTES: usize = 64 * 1024;
/// Largest image kept, as base64 text (about 3 MiB of picture).
pub const MAX_IMAGE_BYTES: usize = 4 * 1024 * 1024;
/// Images one result may give the model.
pub const MAX_IMAGES: usize = 8;
/// Characters of an embedded text resource kept before the whole result's bound applies.
const MAX_RESOURCE_CHARS: usize = 16 * 1024;

/// The model's view of `result` (a `CallToolResult` as JSON).
pub fn to_output(result: &Value) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let mut images: Vec<String> = Vec::new();
    let mut image = |mime: &str, data: &str, parts: &mut Vec<String>| {
        let size = data.len();
        if size > MAX_IMAGE_BYTES {
            parts.push(format!(
                "[image ({mime}, {} KiB) dropped: larger than {} KiB]",
                size / 1024,
                MAX_IMAGE_BYTES / 1024
            ));
        } else if images.len() >= MAX_IMAGES {
            parts.push(format!(
                "[image ({mime}) dropped: at most {MAX_IMAGES} images per result]"
            ));
        } else {
            images.push(format!("data:{mime};base64,{data}"));
            parts.push(format!("[image {} ({mime})]", images.len()));
        }
    };
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for block in blocks {
        let s = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or("");
        match s("type") {
            "text" => parts.push(s("text").to_string()),
            "image" if s("mimeType").starts_with("image/") => {
                image(s("mimeType"), s("data"), &mut parts)
            }
            "image" | "audio" => parts.push(format!(
                "[{} ({}) not shown to the model]",
                s("type"),
                s("mimeType")
            )),
            "resource_link" => {
                let mut line = format!("[resource link: {} <{}>", s("name"), s("uri"));
                if !s("mimeType").is_empty() {
                    line.push_str(&format!(" ({})", s("mimeType")));
                }
                if !s("description").is_empty() {
                    line.push_str(&format!(": {}", s("description")));
                }
                line.push(']');
                parts.push(line);
            }
            "resource" => {
                let r = block.get("resource").cloned().unwrap_or(Value::Null);
                let rs = |key: &str| r.get(key).and_then(Value::as_str).unwrap_or("");
                let (uri, mime) = (rs("uri"), rs("mimeType"));
                if let Some(text) = r.get("text").and_then(Value::as_str) {
                    parts.push(format!(
                        "[resource <{uri}>{}]\n{}",
                        if mime.is_empty() {
                            String::new()
                        } else {
                            format!(" ({mime})")
                        },
                        cut(text, MAX_RESOURCE_CHARS)
                    ));
                } else if mime.starts_with("image/") {
                    image(mime, rs("blob"), &mut parts);
                } else {
                    parts.push(format!(
                        "[resource <{uri}> ({mime}, {} bytes of base64 data) not shown to the model]",
                        rs("blob").len()
                    ));
                }
            }
            other => parts.push(format!("[{other} content not shown to the model]")),
        }
    }
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        // Servers should mirror it in a text block; add it only when none does.
        let mirrored = blocks.iter().any(|b| {
            b.get("text")
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|v| &v == structured)
        });
        if !mirrored {
            parts.push(format!("structuredContent: {structured}"));
        }
    }
    let text = parts.join("\n");
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    ToolOutput {
        text: bound_text(text),
        images,
        is_error,
    }
}

/// `text` cut at [`MAX_RESULT_TEXT_BYTES`] (on a character boundary), saying so.
pub fn bound_text(text: String) -> String {
    if text.len() <= MAX_RESULT_TEXT_BYTES {
        return text;
    }
    let mut end = MAX_RESULT_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[result cut: {} bytes, the first {MAX_RESULT_TEXT_BYTES} shown]",
        &text[..end],
        text.len()
    )
}

/// The first `max` characters of `text`, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((i, _)) => format!("{}…", &text[..i]),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn blocks_become_text_and_images() {
        let out = to_output(&json!({"content": [
            {"type": "text", "text": "Here:"},
            {"type": "image", "data": "iVBORw0KGgo", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "demo://r/1", "name": "r1", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "demo://r/2", "text": "inside", "mimeType": "text/plain"}},
            {"type": "resource", "resource": {"uri": "demo://r/3", "blob": "AAAA", "mimeType": "application/gzip"}}
        ], "structuredContent": {"t": 1}}));
        assert!(!out.is_error);
        assert_eq!(out.images, vec!["data:image/png;base64,iVBORw0KGgo"]);
        assert_eq!(
            out.text,
            "Here:\n[image 1 (image/png)]\n[resource link: r1 <demo://r/1> (text/plain)]\n\
             [resource <demo://r/2> (text/plain)]\ninside\n\
             [resource <demo://r/3> (application/gzip, 4 bytes of base64 data) not shown to the model]\n\
             structuredContent: {\"t\":1}"
        );
        // Mirrored structured content is not repeated.
        let out = to_output(&json!({"content": [{"type": "text", "text": "{\"t\": 1}"}],
                                    "structuredContent": {"t": 1}, "isError": true}));
        assert_eq!(out.text, "{\"t\": 1}");
        assert!(out.is_error);
    }

    #[test]
    fn results_are_bounded() {
        let big = "é".repeat(MAX_RESULT_TEXT_BYTES);
        let out = to_output(&json!({"content": [{"type": "text", "text": big}]}));
        assert!(out.text.len() < MAX_RESULT_TEXT_BYTES + 100);
        assert!(out.text.ends_with(&format!(
            "[result cut: {} bytes, the first 65536 shown]",
            2 * MAX_RESULT_TEXT_BYTES
        )));
        let huge = "A".repeat(MAX_IMAGE_BYTES + 1);
        let out = to_output(
            &json!({"content": [{"type": "image", "data": huge, "mimeType": "image/png"}]}),
        );
        assert!(out.images.is_empty());
        assert_eq!(
            out.text,
            "[image (image/png, 4096 KiB) dropped: larger than 4096 KiB]"
        );
        let many: Vec<Value> = (0..=MAX_IMAGES)
            .map(|_| json!({"type": "image", "data": "AA", "mimeType": "image/png"}))
            .collect();
        let out = to_output(&json!({ "content": many }));
        assert_eq!(out.images.len(), MAX_IMAGES);
        assert!(out.text.ends_with("dropped: at most 8 images per result]"));
    }
}
