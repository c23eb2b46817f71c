//! The plain-text alternate of a markdown display: what a client that does not render markdown
//! shows instead of its raw marks. TypeAgent's `DisplayContent` carries `alternates`
//! (`[{type: "text", content}]`) and its clients prefer a text alternate when one is there
//! (agent-cli's console does; its `run translate` / `run explain` printed raw ```` ```json ````
//! fences and backticks without one). [`with_text_alternate`] adds it to a markdown
//! `DisplayContent` that has none.
//!
//! The rendering keeps every word and drops only the marks: code fences (their content stays),
//! heading `#`s, emphasis (`**`, `__`, `*`, `_` at word edges, `~~`), inline-code backticks,
//! link syntax (`[text](url)` → `text (url)`, `![alt](url)` → `[image: alt]`), autolink angle
//! brackets, table separator rows and backslash escapes. It runs in one pass over each line;
//! looking ahead for the end of a code span, a link or an autolink goes at most
//! [`MAX_SPAN`] characters, so the whole is linear in the text's length (as the web client's
//! renderer bounds its spans).
//!
//! Who talks to it: the conversation's `display` (`conversation/routing.rs`), for every
//! `appendDisplay` it logs and sends.

use serde_json::{json, Value};

/// Longest inline span looked for (code, link text and URL, autolink), in characters: past
/// it the opening mark is kept as text.
pub const MAX_SPAN: usize = 2048;

/// Largest markdown given a text alternate, in bytes: the alternate is sent and logged beside
/// the markdown, so a long answer would cost twice its size in every frame, log line and
/// history page; past this the client shows the markdown as it is.
pub const MAX_ALTERNATE_SOURCE_BYTES: usize = 64 * 1024;

/// `content` with a `{type: "text"}` alternate when it is a markdown `DisplayContent` whose
/// content is a string (at most [`MAX_ALTERNATE_SOURCE_BYTES`]), that has no alternates yet,
/// and whose marks make a difference (text without marks is its own alternate); anything else
/// unchanged.
pub fn with_text_alternate(mut content: Value) -> Value {
    let Value::Object(fields) = &mut content else {
        return content;
    };
    if fields.get("type").and_then(Value::as_str) != Some("markdown")
        || fields.contains_key("alternates")
    {
        return content;
    }
    let Some(markdown) = fields.get("content").and_then(Value::as_str) else {
        return content;
    };
    if markdown.len() > MAX_ALTERNATE_SOURCE_BYTES {
        return content;
    }
    let text = markdown_to_text(markdown);
    if text == markdown {
        return content;
    }
    fields.insert(
        "alternates".into(),
        json!([{"type": "text", "content": text}]),
    );
    content
}

/// `markdown` without its marks (see the module docs).
pub fn markdown_to_text(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut fence: Option<&str> = None;
    for (i, line) in markdown.split('\n').enumerate() {
        let trimmed = line.trim_start();
        let marker = if trimmed.starts_with("```") {
            Some("```")
        } else if trimmed.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                continue;
            }
            (Some(open), Some(m))
                if open == m && trimmed.trim_end().trim_start_matches(m).is_empty() =>
            {
                fence = None;
                continue;
            }
            _ => {}
        }
        if i > 0 && !out.is_empty() {
            out.push('\n');
        }
        if fence.is_some() {
            out.push_str(line);
            continue;
        }
        if is_table_separator(trimmed) {
            // The row of dashes under a table's header says nothing in plain text.
            if out.ends_with('\n') {
                out.pop();
            }
            continue;
        }
        let (indent, rest) = line.split_at(line.len() - trimmed.len());
        out.push_str(indent);
        let rest = strip_heading(rest);
        let rest = match rest.strip_prefix("* ").or_else(|| rest.strip_prefix("+ ")) {
            Some(item) => {
                out.push_str("- ");
                item
            }
            None => rest,
        };
        inline(rest, &mut out);
    }
    out
}

/// A table's separator row: pipes, dashes, colons and spaces only, with at least one dash and
/// one pipe (`|---|:--:|`).
fn is_table_separator(line: &str) -> bool {
    let line = line.trim_end();
    line.contains('|')
        && line.contains('-')
        && line
            .chars()
            .all(|c| matches!(c, '|' | '-' | ':' | ' ' | '\t'))
}

/// `text` without a leading `#`…`######` heading mark.
fn strip_heading(text: &str) -> &str {
    let hashes = text.bytes().take_while(|b| *b == b'#').count();
    if (1..=6).contains(&hashes) {
        if let Some(rest) = text[hashes..].strip_prefix(' ') {
            return rest.trim_end_matches(['#', ' ']);
        }
    }
    text
}

/// Appends `line` to `out` without its inline marks.
fn inline(line: &str, out: &mut String) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if chars.get(i + 1).is_some_and(|n| n.is_ascii_punctuation()) => {
                out.push(chars[i + 1]);
                i += 2;
            }
            '`' => {
                // Inline code: its content as it is, whatever marks it holds.
                let ticks = chars[i..].iter().take_while(|&&t| t == '`').count();
                let close = find_run(&chars, i + ticks, '`', ticks);
                match close {
                    Some(end) => {
                        let code: String = chars[i + ticks..end].iter().collect();
                        out.push_str(code.trim());
                        i = end + ticks;
                    }
                    None => {
                        out.extend(&chars[i..i + ticks]);
                        i += ticks;
                    }
                }
            }
            '!' if chars.get(i + 1) == Some(&'[') => match link(&chars, i + 1) {
                Some((alt, _, end)) => {
                    out.push_str("[image: ");
                    out.push_str(&alt);
                    out.push(']');
                    i = end;
                }
                None => {
                    out.push('!');
                    i += 1;
                }
            },
            '[' => match link(&chars, i) {
                Some((text, url, end)) => {
                    inline(&text, out);
                    if !url.is_empty() && url != text {
                        out.push_str(" (");
                        out.push_str(&url);
                        out.push(')');
                    }
                    i = end;
                }
                None => {
                    out.push('[');
                    i += 1;
                }
            },
            '<' => {
                // An autolink: `<https://…>` is its URL.
                let window = &chars[i + 1..chars.len().min(i + 1 + MAX_SPAN)];
                let end = window
                    .iter()
                    .position(|&c| c == '>' || c == ' ' || c == '<');
                match end.map(|e| i + 1 + e) {
                    Some(e) if chars[e] == '>' && looks_like_url(&chars[i + 1..e]) => {
                        out.extend(&chars[i + 1..e]);
                        i = e + 1;
                    }
                    _ => {
                        out.push('<');
                        i += 1;
                    }
                }
            }
            '*' | '~' => {
                // Emphasis and strike-through marks go; a lone `*` between spaces stays.
                let run = chars[i..].iter().take_while(|&&t| t == c).count();
                let before = i.checked_sub(1).map(|b| chars[b]);
                let after = chars.get(i + run).copied();
                let lone =
                    before.is_none_or(char::is_whitespace) && after.is_none_or(char::is_whitespace);
                if lone || (c == '~' && run == 1) {
                    out.extend(&chars[i..i + run]);
                }
                i += run;
            }
            '_' => {
                // `_x_` / `__x__` at word edges; snake_case keeps its underscores.
                let run = chars[i..].iter().take_while(|&&t| t == '_').count();
                let before = i.checked_sub(1).map(|b| chars[b]);
                let after = chars.get(i + run).copied();
                let inside_word = before.is_some_and(char::is_alphanumeric)
                    && after.is_some_and(char::is_alphanumeric);
                let lone =
                    before.is_none_or(char::is_whitespace) && after.is_none_or(char::is_whitespace);
                if inside_word || lone {
                    out.extend(&chars[i..i + run]);
                }
                i += run;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
}

/// The index where a run of exactly `len` `mark`s starts at or after `from` (within
/// [`MAX_SPAN`]).
fn find_run(chars: &[char], from: usize, mark: char, len: usize) -> Option<usize> {
    let mut i = from;
    let end = chars.len().min(from + MAX_SPAN);
    while i < end {
        if chars[i] == mark {
            let run = chars[i..].iter().take_while(|&&t| t == mark).count();
            if run == len {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// A link at `open` (a `[`): its text, its URL and the index after it, when `[text](url)`
/// is there (text and URL on this line, without nested brackets).
fn link(chars: &[char], open: usize) -> Option<(String, String, usize)> {
    let window = |from: usize| &chars[from.min(chars.len())..chars.len().min(from + MAX_SPAN)];
    let close = open
        + 1
        + window(open + 1)
            .iter()
            .position(|&c| c == ']' || c == '[')?;
    if chars[close] != ']' || chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let url_start = close + 2;
    let url_end = url_start
        + window(url_start)
            .iter()
            .position(|&c| c == ')' || c == '(')?;
    if chars[url_end] != ')' {
        return None;
    }
    let url: String = chars[url_start..url_end].iter().collect();
    // `(url "title")`: the title is not part of the address.
    let url = url.split_whitespace().next().unwrap_or("").to_string();
    Some((chars[open + 1..close].iter().collect(), url, url_end + 1))
}

/// Whether `chars` (between `<` and `>`) are an absolute URL or an e-mail address.
fn looks_like_url(chars: &[char]) -> bool {
    let text: String = chars.iter().collect();
    text.contains("://") || (text.contains('@') && !text.contains(' '))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every mark TypeAgent's console printed raw goes; every word stays.
    #[test]
    fn marks_go_and_words_stay() {
        let md = "## Plan\n\nCall `calculate` with **2+3**:\n\n```json\n{\"expression\": \
                  \"2+3\"}\n```\n\n* one _two_ __three__ ~~four~~\n+ see [the docs](https://x.y/z \
                  \"T\") or <https://a.b>\n1. keep snake_case and 2 * 3\n\n| a | b |\n|---|:-:|\n| \
                  1 | 2 |\n![chart](c.png) \\*literal\\*";
        assert_eq!(
            markdown_to_text(md),
            "Plan\n\nCall calculate with 2+3:\n\n{\"expression\": \"2+3\"}\n\n- one two three \
             four\n- see the docs (https://x.y/z) or https://a.b\n1. keep snake_case and 2 * 3\n\n| \
             a | b |\n| 1 | 2 |\n[image: chart] *literal*"
        );
        // Code keeps its marks, inline and fenced.
        assert_eq!(
            markdown_to_text("`**not bold**` and\n~~~\n# not a heading\n~~~"),
            "**not bold** and\n# not a heading"
        );
    }

    /// Only markdown without alternates gains one; the primary content is unchanged.
    #[test]
    fn a_text_alternate_is_added_to_markdown_only() {
        let md = json!({"type": "markdown", "content": "**hi**"});
        assert_eq!(
            with_text_alternate(md),
            json!({"type": "markdown", "content": "**hi**",
                   "alternates": [{"type": "text", "content": "hi"}]})
        );
        let has = json!({"type": "markdown", "content": "x", "alternates": []});
        assert_eq!(with_text_alternate(has.clone()), has);
        let text = json!({"type": "text", "content": "**x**"});
        assert_eq!(with_text_alternate(text.clone()), text);
        // Nothing to take away, or too long to send twice: no alternate.
        let plain = json!({"type": "markdown", "content": "just words"});
        assert_eq!(with_text_alternate(plain.clone()), plain);
        let long = json!({"type": "markdown",
                          "content": "**x** ".repeat(MAX_ALTERNATE_SOURCE_BYTES / 6 + 1)});
        assert_eq!(with_text_alternate(long.clone()), long);
        assert_eq!(with_text_alternate(json!("plain")), json!("plain"));
    }

    /// One pass per line: a long line of marks costs what its length does.
    #[test]
    fn long_input_is_linear() {
        for md in [
            "[[[[`".repeat(20_000) + &"*_~".repeat(20_000),
            "[a](".repeat(50_000),
            "<".repeat(100_000),
            "``x`".repeat(50_000),
        ] {
            // Quadratic work on these would not finish; linear work takes milliseconds.
            let text = markdown_to_text(&md);
            assert!(text.len() <= md.len());
        }
    }
}
