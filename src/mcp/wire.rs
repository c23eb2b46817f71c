//! One JSON-RPC message from a server, read for its shape before rmcp parses it: how deeply
//! it nests, its `id`, whether it is a request, and the tools of a `tools/list` answer that
//! nest too deeply ([`Shape`], by [`Scanner`], which never builds a value and takes the
//! message in pieces). A message rmcp could not take costs its sender that message only:
//!
//! - deeper than [`MAX_DEPTH`] (serde_json, under rmcp, gives up at 128 levels and rmcp then
//!   drops the whole message, so a `tools/list` page with one such tool lost every tool and
//!   its request never got an answer): each tool of a `tools/list` answer that is that deep is
//!   replaced by a stub naming it ([`SKIPPED_KEY`], read by the listing, which skips it with a
//!   warning); any other answer becomes an error answer to its request
//!   ([`refusal`]); anything else is dropped;
//! - larger than a message may be (the stdio reader's line bound, the HTTP transport's body
//!   and event bounds): an answer becomes an error answer to its request, so the call fails at
//!   once instead of waiting for its time-out.
//!
//! Who talks to it: the stdio reader ([`super::stdio`]) for every line a child writes, the
//! Streamable HTTP client ([`super::http`]) for every SSE event of an answer.

use serde_json::{json, Value};

/// How deeply a message may nest, all of it counted (the JSON-RPC envelope is 1, a
/// `tools/list` answer's tool is 4): below serde_json's 128, which rmcp cannot pass, with
/// room for the envelope. No tool schema a model can use comes near it.
pub const MAX_DEPTH: usize = 100;

/// The key of the stub that stands for a tool nested past [`MAX_DEPTH`]; its value says why
/// the tool is skipped. The listing (`super::listing`) reads it.
pub const SKIPPED_KEY: &str = "x-roundtable-skipped";

/// The JSON-RPC error code of an answer Roundtable wrote in place of the server's (too large,
/// too deep): the call's error names the server and says why (`super::call`).
pub const REFUSED_CODE: i32 = -32099;

/// Longest `id` kept (ids are numbers or short strings; a longer one is not answered).
const MAX_ID_BYTES: usize = 128;
/// Longest tool name copied into a stub (the listing refuses longer names anyway).
pub const MAX_NAME_BYTES: usize = 256;
/// Longest key compared (the keys the scanner looks for are short).
const MAX_KEY_BYTES: usize = 8;

/// What the scanner found in one message.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Shape {
    /// The deepest nesting (the top-level object is 1).
    pub depth: usize,
    /// The deepest nesting outside the tools of a `tools/list` answer.
    pub depth_outside_tools: usize,
    /// The top-level `id`, as written (a number, or a string with its quotes).
    pub id: Option<String>,
    /// The message has a top-level `method`: a request or a notification, not an answer.
    pub has_method: bool,
    /// Tools of a `tools/list` answer (`result.tools[i]`) nested past [`MAX_DEPTH`]: their
    /// byte ranges in the message, and the range of each one's `name` string, if any.
    pub deep_tools: Vec<DeepTool>,
}

/// A tool too deep to pass (see [`Shape::deep_tools`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DeepTool {
    /// Its range in the message, braces included.
    pub range: std::ops::Range<usize>,
    /// Its `name` string's range, quotes included, when it has one of at most
    /// [`MAX_NAME_BYTES`].
    pub name: Option<std::ops::Range<usize>>,
}

/// A key the scanner follows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    /// None yet, or one it does not follow.
    Other,
    /// `id` (top level).
    Id,
    /// `method` (top level).
    Method,
    /// `result` (top level).
    Result,
    /// `tools` (in `result`).
    Tools,
    /// `name` (in a tool).
    Name,
}

/// One of the first levels of the message: an object (with the key of the value being read)
/// or an array.
#[derive(Debug, Clone, Copy)]
struct Level {
    /// An object (else an array).
    object: bool,
    /// In an object: the next string is a key.
    expect_key: bool,
    /// In an object: the key of the value being read.
    key: Key,
}

/// The levels the scanner follows: the message (1), `result` (2), `tools` (3), a tool (4).
const FOLLOWED: usize = 4;

/// Reads a message's [`Shape`] from its bytes, fed in pieces ([`Scanner::feed`]), then
/// [`Scanner::finish`]. Positions count from the first byte fed.
#[derive(Debug)]
pub struct Scanner {
    /// Bytes fed so far.
    pos: usize,
    /// Current nesting.
    depth: usize,
    /// Inside a string.
    in_string: bool,
    /// After a backslash in a string.
    escaped: bool,
    /// The string being read is a key.
    string_is_key: bool,
    /// The string being read started here.
    string_start: usize,
    /// A key's first bytes.
    key: Vec<u8>,
    /// The levels down to a tool (index = depth - 1).
    levels: [Level; FOLLOWED],
    /// Copying the `id` value (string or number) as it passes.
    copying_id: Option<Vec<u8>>,
    /// The tool being read: where it started and its deepest nesting so far.
    tool: Option<(usize, usize, Option<std::ops::Range<usize>>)>,
    /// What was found.
    shape: Shape,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::new()
    }
}

impl Scanner {
    /// A scanner at the start of a message.
    pub fn new() -> Scanner {
        Scanner {
            pos: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            string_is_key: false,
            string_start: 0,
            key: Vec::with_capacity(MAX_KEY_BYTES),
            levels: [Level {
                object: false,
                expect_key: false,
                key: Key::Other,
            }; FOLLOWED],
            copying_id: None,
            tool: None,
            shape: Shape::default(),
        }
    }

    /// The level at `depth` (1-based), when followed.
    fn level(&mut self, depth: usize) -> Option<&mut Level> {
        depth.checked_sub(1).and_then(|i| self.levels.get_mut(i))
    }

    /// Whether a value starting now is an element of `result.tools`.
    fn at_tool_element(&self) -> bool {
        self.depth == 3
            && self.levels[0].key == Key::Result
            && self.levels[1].key == Key::Tools
            && !self.levels[2].object
            && self.levels[2].key == Key::Tools
    }

    /// Ends the `id` number being copied, if one is.
    fn end_id_number(&mut self) {
        if let Some(id) = self.copying_id.take() {
            if !id.is_empty() {
                self.shape.id = String::from_utf8(id).ok();
            }
        }
    }

    /// Reads the next piece of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
            self.pos += 1;
        }
    }

    /// One byte.
    fn byte(&mut self, b: u8) {
        if self.in_string {
            if let Some(id) = &mut self.copying_id {
                id.push(b);
                if id.len() > MAX_ID_BYTES {
                    self.copying_id = None;
                }
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.end_string();
            } else if self.string_is_key && self.key.len() <= MAX_KEY_BYTES {
                self.key.push(b);
            }
            return;
        }
        // A number (the id's) ends at the first byte that cannot be in one.
        if self.copying_id.is_some() {
            if b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E') {
                if let Some(id) = &mut self.copying_id {
                    id.push(b);
                    if id.len() > MAX_ID_BYTES {
                        self.copying_id = None;
                    }
                }
                return;
            }
            self.end_id_number();
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.string_start = self.pos;
                let depth = self.depth;
                let expect_key = self.level(depth).is_some_and(|l| l.object && l.expect_key);
                self.string_is_key = expect_key;
                self.key.clear();
                if !expect_key && depth == 1 && self.levels[0].key == Key::Id {
                    self.copying_id = Some(vec![b'"']);
                }
            }
            b'{' | b'[' => {
                if self.at_tool_element() && self.tool.is_none() {
                    self.tool = Some((self.pos, self.depth + 1, None));
                }
                let key = self.key_of_new_level(b == b'[');
                self.depth += 1;
                self.shape.depth = self.shape.depth.max(self.depth);
                match &mut self.tool {
                    Some((_, deepest, _)) => *deepest = (*deepest).max(self.depth),
                    None => {
                        self.shape.depth_outside_tools =
                            self.shape.depth_outside_tools.max(self.depth)
                    }
                }
                let depth = self.depth;
                if let Some(level) = self.level(depth) {
                    *level = Level {
                        object: b == b'{',
                        expect_key: b == b'{',
                        key,
                    };
                }
            }
            b'}' | b']' => {
                if self.depth == FOLLOWED {
                    if let Some((start, deepest, name)) = self.tool.take() {
                        if deepest > MAX_DEPTH {
                            self.shape.deep_tools.push(DeepTool {
                                range: start..self.pos + 1,
                                name,
                            });
                        }
                    }
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' => {
                let depth = self.depth;
                if let Some(level) = self.level(depth) {
                    level.expect_key = false;
                }
            }
            b',' => {
                let depth = self.depth;
                if let Some(level) = self.level(depth) {
                    if level.object {
                        level.expect_key = true;
                        level.key = Key::Other;
                    }
                }
            }
            b'-' | b'0'..=b'9'
                if self.depth == 1
                    && self.levels[0].key == Key::Id
                    && self.copying_id.is_none()
                    && self.shape.id.is_none() =>
            {
                self.copying_id = Some(vec![b]);
            }
            _ => {}
        }
    }

    /// The key a container opening now is known by: an array holds the key it is the
    /// value of (so the elements of `result.tools` are known as tools); an object starts
    /// with none.
    fn key_of_new_level(&self, array: bool) -> Key {
        match self.depth.checked_sub(1).and_then(|i| self.levels.get(i)) {
            Some(parent) if array => parent.key,
            _ => Key::Other,
        }
    }

    /// A string ended at the current position.
    fn end_string(&mut self) {
        // The closing quote was copied with the rest.
        if let Some(id) = self.copying_id.take() {
            self.shape.id = String::from_utf8(id).ok();
        }
        let depth = self.depth;
        if self.string_is_key {
            let key = match (depth, self.key.as_slice()) {
                (1, b"id") => Key::Id,
                (1, b"method") => {
                    self.shape.has_method = true;
                    Key::Method
                }
                (1, b"result") => Key::Result,
                (2, b"tools") if self.levels[0].key == Key::Result => Key::Tools,
                (FOLLOWED, b"name") if self.tool.is_some() => Key::Name,
                _ => Key::Other,
            };
            if let Some(level) = self.level(depth) {
                level.key = key;
            }
        } else if depth == FOLLOWED && self.levels[FOLLOWED - 1].key == Key::Name {
            let range = self.string_start..self.pos + 1;
            if let Some((_, _, name)) = &mut self.tool {
                if name.is_none() && range.len() <= MAX_NAME_BYTES {
                    *name = Some(range);
                }
            }
        }
    }

    /// The message's shape (call once the last byte is fed).
    pub fn finish(mut self) -> Shape {
        self.end_id_number();
        self.shape
    }
}

/// The shape of a whole message (see [`Scanner`]).
pub fn shape(message: &[u8]) -> Shape {
    let mut scanner = Scanner::new();
    scanner.feed(message);
    scanner.finish()
}

/// Whether `message` may nest past [`MAX_DEPTH`]: it has more opening brackets than that
/// (a cheap test that spares most messages the scan).
pub fn may_be_too_deep(message: &[u8]) -> bool {
    memchr::memchr2_iter(b'{', b'[', message)
        .nth(MAX_DEPTH)
        .is_some()
}

/// The error answer Roundtable writes to request `id` in place of the server's (`why`
/// reads after "MCP server `NAME` ", e.g. "answered more than 16 MiB").
pub fn refusal(id: &str, why: &str) -> Vec<u8> {
    let id: Value = serde_json::from_str(id).unwrap_or(Value::Null);
    let mut line = json!({"jsonrpc": "2.0", "id": id,
                          "error": {"code": REFUSED_CODE, "message": why}})
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

/// What to pass on in place of a message nested past [`MAX_DEPTH`] (its `shape`): the
/// message with each too-deep tool replaced by a stub naming it, an error answer to its
/// request, or nothing (a request or notification of the server's, dropped). The newline is
/// not added.
pub fn defused(message: &[u8], shape: &Shape) -> Option<Vec<u8>> {
    let deep = format!("it is nested more than {MAX_DEPTH} levels deep");
    if !shape.deep_tools.is_empty() && shape.depth_outside_tools <= MAX_DEPTH {
        let mut out = Vec::with_capacity(message.len());
        let mut at = 0;
        for tool in &shape.deep_tools {
            out.extend_from_slice(&message[at..tool.range.start]);
            let name = tool
                .name
                .as_ref()
                .map_or(b"\"\"".as_slice(), |r| &message[r.clone()]);
            out.extend_from_slice(b"{\"name\":");
            out.extend_from_slice(name);
            out.extend_from_slice(format!(",\"{SKIPPED_KEY}\":\"{deep}\"}}").as_bytes());
            at = tool.range.end;
        }
        out.extend_from_slice(&message[at..]);
        return Some(out);
    }
    match (&shape.id, shape.has_method) {
        (Some(id), false) => {
            let mut line = refusal(id, &format!("answered a message that {deep}"));
            line.pop();
            Some(line)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        let mut s = String::from("1");
        for _ in 0..depth {
            s = format!("{{\"a\":[{s}]}}");
        }
        s
    }

    #[test]
    fn the_id_and_the_kind_are_read() {
        let s = shape(br#"{"jsonrpc":"2.0","id":17,"result":{"x":"a\"}"}}"#);
        assert_eq!(
            (s.id.as_deref(), s.has_method, s.depth),
            (Some("17"), false, 2)
        );
        let s = shape(br#"{"result":{"id":3},"id":"r-\"1\"","jsonrpc":"2.0"}"#);
        assert_eq!(s.id.as_deref(), Some(r#""r-\"1\"""#));
        let s = shape(br#"{"method":"notifications/progress","params":{"id":1}}"#);
        assert_eq!((s.id, s.has_method), (None, true));
        // Fed in pieces, the same.
        let mut scanner = Scanner::new();
        for piece in [&b"{\"id\":12"[..], b"34,\"res", b"ult\":1}"] {
            scanner.feed(piece);
        }
        assert_eq!(scanner.finish().id.as_deref(), Some("1234"));
    }

    #[test]
    fn deep_tools_are_found_and_stubbed() {
        let message = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"tools":[{{"name":"ok","inputSchema":{{}}}},{{"inputSchema":{},"name":"deep"}},{{"name":"ok2"}}],"nextCursor":"x"}}}}"#,
            nested(60)
        );
        assert!(may_be_too_deep(message.as_bytes()));
        let s = shape(message.as_bytes());
        assert_eq!(s.depth_outside_tools, 3);
        assert_eq!(s.deep_tools.len(), 1);
        let out = defused(message.as_bytes(), &s).unwrap();
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            value["result"]["tools"],
            json!([{"name": "ok", "inputSchema": {}},
                   {"name": "deep", SKIPPED_KEY: "it is nested more than 100 levels deep"},
                   {"name": "ok2"}])
        );
        assert_eq!(value["result"]["nextCursor"], "x");
    }

    #[test]
    fn other_deep_answers_become_errors() {
        let message = format!(r#"{{"jsonrpc":"2.0","result":{},"id":"a"}}"#, nested(60));
        let s = shape(message.as_bytes());
        assert!(s.deep_tools.is_empty() && s.depth > MAX_DEPTH);
        let out: Value = serde_json::from_slice(&defused(message.as_bytes(), &s).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"jsonrpc": "2.0", "id": "a", "error": {"code": REFUSED_CODE,
                   "message": "answered a message that it is nested more than 100 levels deep"}})
        );
        let request = format!(r#"{{"id":1,"method":"x","params":{}}}"#, nested(60));
        let s = shape(request.as_bytes());
        assert_eq!(defused(request.as_bytes(), &s), None);
        assert!(!may_be_too_deep(br#"{"id":1,"result":{"a":[[["x"]]]}}"#));
    }
}
