//! Tab completion at the `roundtable connect` prompt: the server's `getCommandCompletion`
//! (TypeAgent's contract: `startIndex` anchors the completions, each group's
//! `separatorMode` says whether a space must be typed first) turned into the line editor's
//! candidates.
//!
//! Who talks to it: the line editor on the UI thread calls [`CommandCompleter`] on Tab; it
//! asks the server through the prompt's connection on the async side's runtime, waiting at
//! most [`COMPLETION_WAIT`] (no candidates then). [`candidates`] is the pure part.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use serde_json::{json, Value};

use crate::client::Connection;

/// Longest a Tab waits for the server's completions.
pub const COMPLETION_WAIT: Duration = Duration::from_secs(2);

/// The byte offset of `units` UTF-16 code units into `text` (the wire counts UTF-16).
fn byte_offset(text: &str, units: usize) -> Option<usize> {
    let mut seen = 0;
    for (i, c) in text.char_indices() {
        if seen == units {
            return Some(i);
        }
        seen += c.len_utf16();
    }
    (seen == units).then_some(text.len())
}

/// Whether a group with this `separatorMode` shows with (`spaced`) or without a separator
/// typed after the anchor (the CLI session's visibility levels 0 and 1).
fn shows(mode: Option<&str>, spaced: bool) -> bool {
    match mode.unwrap_or("space") {
        "none" => !spaced,
        "optionalSpace" | "optionalSpacePunctuation" => true,
        "space" | "spacePunctuation" | "autoSpacePunctuation" => spaced,
        _ => false,
    }
}

/// The candidates of a `getCommandCompletion` `result` for `input` (the line up to the
/// cursor): where the replaced text starts, and the replacements. The text after the anchor
/// (white space first, then the word being typed) filters the items of the groups that show
/// at that separator level, case-insensitively. An item that attaches right after a word
/// (`@system` → `help`) gets the space the user did not type.
pub fn candidates(input: &str, result: &Value) -> (usize, Vec<String>) {
    let Some(anchor) = result["startIndex"]
        .as_u64()
        .and_then(|i| byte_offset(input, i as usize))
    else {
        return (input.len(), Vec::new());
    };
    let after = &input[anchor..];
    let typed = after.trim_start();
    let spaced = typed.len() < after.len();
    let start = input.len() - typed.len();
    let needs_space = !spaced
        && input[..anchor]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
    let wanted = typed.to_lowercase();
    let mut out: Vec<String> = result["completions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| shows(g["separatorMode"].as_str(), spaced))
        .flat_map(|g| g["completions"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .filter(|item| item.to_lowercase().starts_with(&wanted))
        .map(|item| {
            if needs_space {
                format!(" {item}")
            } else {
                item.to_string()
            }
        })
        .collect();
    out.sort();
    out.dedup();
    (start, out)
}

/// The prompt's completer: asks the server of the current conversation.
pub struct CommandCompleter {
    /// The prompt's connection.
    pub conn: Arc<Connection>,
    /// The runtime the connection's tasks run on (the UI thread blocks on it).
    pub runtime: tokio::runtime::Handle,
    /// The conversation the prompt is in (it changes with `@conversation switch`).
    pub conversation: Arc<Mutex<String>>,
}

impl CommandCompleter {
    /// `getCommandCompletion(input, "forward")`, or `None` on an error or after
    /// [`COMPLETION_WAIT`].
    fn ask(&self, input: &str) -> Option<Value> {
        let conversation = self.conversation.lock().ok()?.clone();
        let channel = format!("dispatcher:{conversation}");
        let args = vec![json!(input), json!("forward")];
        let call = self.conn.invoke(&channel, "getCommandCompletion", args);
        match self
            .runtime
            .block_on(async { tokio::time::timeout(COMPLETION_WAIT, call).await })
        {
            Ok(Ok(result)) => Some(result),
            Ok(Err(e)) => {
                log::debug!("completion of {input:?}: {e}");
                None
            }
            Err(_) => {
                log::debug!("completion of {input:?}: no answer within {COMPLETION_WAIT:?}");
                None
            }
        }
    }
}

impl Completer for CommandCompleter {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let input = &line[..pos];
        let Some(result) = self.ask(input) else {
            return Ok((pos, Vec::new()));
        };
        let (start, items) = candidates(input, &result);
        let pairs = items
            .into_iter()
            .map(|replacement| Pair {
                display: replacement.trim_start().to_string(),
                replacement,
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for CommandCompleter {
    type Hint = String;
}

impl Highlighter for CommandCompleter {}

impl Validator for CommandCompleter {}

impl rustyline::Helper for CommandCompleter {}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(start: usize, groups: Value) -> Value {
        json!({"startIndex": start, "completions": groups, "closedSet": true,
            "directionSensitive": false, "afterWildcard": "none"})
    }

    #[test]
    fn anchored_filtered_and_spaced() {
        let top = result(
            1,
            json!([{"name": "Subcommands", "completions": ["help", "compact"], "separatorMode": "optionalSpace"},
                   {"name": "Agent Names", "completions": ["system"], "separatorMode": "optionalSpace"}]),
        );
        assert_eq!(
            candidates("@", &top),
            (1, vec!["compact".into(), "help".into(), "system".into()])
        );
        assert_eq!(candidates("@Sy", &top), (1, vec!["system".into()]));
        let subs = result(
            7,
            json!([{"name": "Subcommands", "completions": ["help", "config"], "separatorMode": "optionalSpace"}]),
        );
        // Right after the word: the space is added; after a typed space: the word only.
        assert_eq!(
            candidates("@system", &subs),
            (7, vec![" config".into(), " help".into()])
        );
        assert_eq!(candidates("@system  co", &subs), (9, vec!["config".into()]));
        // "space" groups need a typed separator.
        let flags = result(
            16,
            json!([{"name": "Command Flags", "completions": ["--repeat"]}]),
        );
        assert_eq!(candidates("@clock alarm set", &flags), (16, vec![]));
        assert_eq!(candidates("@clock alarm set --r", &flags).1, ["--repeat"]);
        // UTF-16 positions: U+3000 is one unit, three bytes.
        let spaced = result(
            2,
            json!([{"name": "Subcommands", "completions": ["help"], "separatorMode": "optionalSpace"}]),
        );
        assert_eq!(candidates("\u{3000}@h", &spaced), (4, vec!["help".into()]));
        assert_eq!(candidates("@", &json!({"startIndex": 9})), (1, vec![]));
    }
}
