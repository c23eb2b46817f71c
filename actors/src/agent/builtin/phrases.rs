//! Conversation management in words, for the offline `builtin` provider: the phrases of
//! TypeAgent's `system.conversation` grammar (`conversationActionSchema.agr`: "switch to my
//! work conversation", "create a new conversation called research", "delete the old project
//! conversation", "list my conversations", …) and Roundtable's `handoff` ("hand off my
//! research conversation here"), each read into the `manage_conversation` tool's input.
//!
//! A pattern is a line of words: `word` must be there, `(a|b)` one of them, `[a|b]` one of
//! them or nothing, `_` joins the words of one choice (`switch_to`), `$name` / `$newName` /
//! `$query` take one or more words (the fewest that let the rest match), `<x>` is one of the
//! shared parts below (`<noun?>`: the noun, or nothing). Words are compared without case and
//! without the punctuation around them; what a `$` part takes keeps the user's spelling,
//! without surrounding quotes. The
//! first pattern that matches the whole text wins, so patterns without a `$` part come first
//! (as the grammar's own ranking puts a literal match ahead of a wildcard one): "switch to the
//! next conversation" is `next`, not a switch to a conversation named "next".

use serde_json::{json, Map, Value};

/// The shared parts, spelled into the patterns before they are read.
const PARTS: [(&str, &str); 7] = [
    (
        "<polite>",
        "[can_you|could_you|would_you|please|i_need_to|i_want_to|i'd_like_to|let's] [please]",
    ),
    ("<noun>", "(conversation|chat|session|tab|thread)"),
    ("<noun?>", "[conversation|chat|session|tab|thread]"),
    ("<nouns>", "(conversations|chats|sessions|tabs|threads)"),
    (
        "<any>",
        "(conversation|chat|session|tab|thread|conversations|chats|sessions|tabs|threads)",
    ),
    ("<det>", "[all] [of] [the|my|our]"),
    (
        "<here>",
        "[here|to_here|over_here|in_here|into_here|into_this_one|to_this_one|\
         into_this_conversation|to_this_conversation|into_this_chat|to_this_chat]",
    ),
];

/// The patterns, in order, each with the subcommand it asks for.
const PATTERNS: &[(&str, &str)] = &[
    // new, named, then not
    (
        "new",
        "<polite> (create|start|make|open|begin) [a|an] new <noun> (called|named|titled) $name",
    ),
    ("new", "<polite> (create|start|make|open|begin) [a|an] new <noun>"),
    ("new", "<polite> new <noun>"),
    // list
    ("list", "<polite> (list|show|display) [me|us] <det> <nouns>"),
    ("list", "<polite> (what|which) <nouns> [do|are] [i|we] have"),
    // info
    ("info", "<polite> (show|display) [me] [current|this|the] <noun> (info|information)"),
    ("info", "<polite> (what|which) <noun> am i in"),
    ("info", "<polite> (what|which) <noun> is this"),
    ("info", "<polite> current <noun> (info|information)"),
    // next / previous
    ("next", "<polite> [switch_to|go_to|cycle_to|move_to] [the] next <noun>"),
    ("next", "<polite> advance to [the] next <noun>"),
    (
        "prev",
        "<polite> [switch_to|go_to|cycle_to|move_to|go_back_to|switch_back_to] [the] (previous|prev|last) <noun>",
    ),
    ("prev", "<polite> [go] back to [the] (previous|prev) <noun>"),
    // handoff
    (
        "handoff",
        "<polite> (hand_off|handoff|hand-off|bring_over|carry_over|bring_in|pull_in) [the|my] $name <noun> <here>",
    ),
    (
        "handoff",
        "<polite> (hand_off|handoff|hand-off) [from] [the|my] <noun?> [called|named] $name <here>",
    ),
    // rename the current one, then a named one
    ("rename", "<polite> rename (this|the|current|my_current) <noun> (to|as) $newName"),
    ("rename", "<polite> call (this|the|current) <noun> $newName"),
    (
        "rename",
        "<polite> change the name of (this|the|current) <noun> to $newName",
    ),
    ("rename", "<polite> rename <noun> $name to $newName"),
    ("rename", "<polite> rename [the|my] $name <noun> to $newName"),
    ("rename", "<polite> rename $name to $newName"),
    // delete
    ("delete", "<polite> (delete|remove|destroy) [the] <noun> [called|named] $name"),
    ("delete", "<polite> (delete|remove|destroy) [the|my] $name <noun>"),
    // search (content), ahead of find (names)
    (
        "search",
        "<polite> search (through|across|inside|within|in) [all|my|our|the] <any> [for|about|mentioning|containing] $query",
    ),
    (
        "search",
        "<polite> search [all|my|our|the] (chat|conversation|message) history [for|about] $query",
    ),
    (
        "search",
        "<polite> search [the] content of [all|my|our|the] <any> [for|about] $query",
    ),
    ("search", "<polite> search [all|my|our|the] <nouns> for $query"),
    (
        "find",
        "<polite> (find|search|search_for|locate|look_for) [me] [the|a|my|our|any] <any> [about|on|regarding|with|containing|named|called|mentioning|discussing|for] $query",
    ),
    (
        "find",
        "<polite> (which|what) <any> [was|were|is|are|did_we] (about|on|regarding|discussing|mentioned|covered|for) $query",
    ),
    // switch
    (
        "switch",
        "<polite> (switch|go|change|open|load|resume|move|jump) [back] to [the] <noun> where [we|i|you] (talked|talk|discussed|discuss|spoke|chatted|mentioned|said) [about|on|regarding|of] $name",
    ),
    (
        "switch",
        "<polite> (switch|go|change|open|load|resume|move|jump) [back] to [the] <noun> [called|named|about|on|regarding|discussing|for] $name",
    ),
    ("switch", "<polite> (switch|change) [the] <noun> to $name"),
    (
        "switch",
        "<polite> (switch|go|change|move|jump) [back] to [the|my|our] $name <noun>",
    ),
    (
        "switch",
        "<polite> (open|load|resume) [the] <noun> [called|named|about|on|regarding|discussing|for] $name",
    ),
    ("switch", "<polite> (open|load|resume) [the|my|our] $name <noun>"),
    ("switch", "<polite> switch [back] to $name"),
];

/// One part of a pattern.
#[derive(Debug)]
enum Part {
    /// One of these word sequences must come next.
    OneOf(Vec<Vec<String>>),
    /// One of these word sequences, or nothing.
    Maybe(Vec<Vec<String>>),
    /// One or more words, taken into the field of this name.
    Take(String),
}

/// [`PATTERNS`], parsed once per process (every turn of the built-in agent tries them all;
/// parsing them per turn was 8% of the server's CPU under `fanout`).
fn parsed_patterns() -> &'static [(&'static str, Vec<Part>)] {
    static PARSED: std::sync::OnceLock<Vec<(&'static str, Vec<Part>)>> = std::sync::OnceLock::new();
    PARSED.get_or_init(|| {
        PATTERNS
            .iter()
            .map(|(subcommand, pattern)| (*subcommand, parse(pattern)))
            .collect()
    })
}

/// Reads a pattern line (after its shared parts are spelled in).
fn parse(pattern: &str) -> Vec<Part> {
    let mut spelled = pattern.to_string();
    for (name, part) in PARTS {
        spelled = spelled.replace(name, part);
    }
    let choices = |inner: &str| -> Vec<Vec<String>> {
        inner
            .split('|')
            .map(|choice| choice.split('_').map(str::to_string).collect())
            .collect()
    };
    spelled
        .split_whitespace()
        .map(|token| {
            if let Some(field) = token.strip_prefix('$') {
                Part::Take(field.to_string())
            } else if let Some(inner) = token.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
                Part::OneOf(choices(inner))
            } else if let Some(inner) = token.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                Part::Maybe(choices(inner))
            } else {
                Part::OneOf(vec![vec![token.to_string()]])
            }
        })
        .collect()
}

/// A word of the text: as compared (lower case, no punctuation around it) and as typed.
struct Word<'a> {
    /// Compared with the patterns' words.
    key: String,
    /// Kept by a `$` part.
    typed: &'a str,
}

/// Whether `parts` match all of `words` from `at` on, filling `taken` with each `$` part's
/// field and word range (backtracking: optional parts are tried present first, `$` parts as
/// short as possible).
fn matches(
    parts: &[Part],
    words: &[Word<'_>],
    at: usize,
    taken: &mut Vec<(String, std::ops::Range<usize>)>,
) -> bool {
    let Some((part, rest)) = parts.split_first() else {
        return at == words.len();
    };
    let left = &words[at..];
    let starts = |choice: &[String]| {
        choice.len() <= left.len() && choice.iter().zip(left).all(|(c, w)| *c == w.key)
    };
    match part {
        Part::OneOf(choices) | Part::Maybe(choices) => {
            for choice in choices {
                if starts(choice) && matches(rest, words, at + choice.len(), taken) {
                    return true;
                }
            }
            matches!(part, Part::Maybe(_)) && matches(rest, words, at, taken)
        }
        Part::Take(field) => {
            for end in at + 1..=words.len() {
                taken.push((field.clone(), at..end));
                if matches(rest, words, end, taken) {
                    return true;
                }
                taken.pop();
            }
            false
        }
    }
}

/// The text of taken words, as typed, without the quotes around the whole.
fn typed(words: &[Word<'_>]) -> String {
    let text = words.iter().map(|w| w.typed).collect::<Vec<_>>().join(" ");
    let quotes: &[char] = &['"', '\'', '“', '”', '‘', '’', '«', '»'];
    text.trim_matches(quotes).trim().to_string()
}

/// The `manage_conversation` input `text` asks for, when it is one of the phrases.
pub(super) fn conversation_request(text: &str) -> Option<Value> {
    let text = text.trim().trim_end_matches(['.', '!', '?']).trim();
    let words: Vec<Word<'_>> = text
        .split_whitespace()
        .map(|typed| Word {
            key: typed
                .trim_matches(|c: char| matches!(c, ',' | ';' | ':' | '!' | '?' | '.'))
                .to_lowercase(),
            typed: typed.trim_end_matches([',', ';', ':']),
        })
        .collect();
    if words.is_empty() {
        return None;
    }
    for (subcommand, parts) in parsed_patterns() {
        let mut taken = Vec::new();
        if !matches(parts, &words, 0, &mut taken) {
            continue;
        }
        let mut input = Map::new();
        input.insert("subcommand".into(), json!(subcommand));
        for (field, range) in taken {
            let value = typed(&words[range]);
            if value.is_empty() {
                return None;
            }
            input.insert(field, json!(value));
        }
        return Some(Value::Object(input));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every phrase of the issue and TypeAgent's design, and their obvious variants.
    #[test]
    fn phrases_become_requests() {
        let cases = [
            (
                "switch to my work conversation",
                json!({"subcommand": "switch", "name": "work"}),
            ),
            (
                "Switch to the Work conversation.",
                json!({"subcommand": "switch", "name": "Work"}),
            ),
            (
                "go to my work chat",
                json!({"subcommand": "switch", "name": "work"}),
            ),
            (
                "switch to conversation test",
                json!({"subcommand": "switch", "name": "test"}),
            ),
            (
                "open my budget conversation",
                json!({"subcommand": "switch", "name": "budget"}),
            ),
            (
                "switch to research",
                json!({"subcommand": "switch", "name": "research"}),
            ),
            (
                "switch to the conversation where we talked about spikes",
                json!({"subcommand": "switch", "name": "spikes"}),
            ),
            (
                "create a new conversation called research",
                json!({"subcommand": "new", "name": "research"}),
            ),
            (
                "Please start a new chat named \"Q3 plan\"",
                json!({"subcommand": "new", "name": "Q3 plan"}),
            ),
            ("create a new conversation", json!({"subcommand": "new"})),
            ("new conversation", json!({"subcommand": "new"})),
            (
                "delete the old project conversation",
                json!({"subcommand": "delete", "name": "old project"}),
            ),
            (
                "delete conversation test",
                json!({"subcommand": "delete", "name": "test"}),
            ),
            (
                "remove the conversation called drafts",
                json!({"subcommand": "delete", "name": "drafts"}),
            ),
            ("list my conversations", json!({"subcommand": "list"})),
            (
                "list all of the conversations",
                json!({"subcommand": "list"}),
            ),
            ("show me my conversations", json!({"subcommand": "list"})),
            (
                "what conversations do I have?",
                json!({"subcommand": "list"}),
            ),
            ("which conversation am I in?", json!({"subcommand": "info"})),
            ("show conversation info", json!({"subcommand": "info"})),
            ("next conversation", json!({"subcommand": "next"})),
            (
                "switch to the next conversation",
                json!({"subcommand": "next"}),
            ),
            ("previous conversation", json!({"subcommand": "prev"})),
            (
                "go back to the previous conversation",
                json!({"subcommand": "prev"}),
            ),
            (
                "rename this conversation to Notes",
                json!({"subcommand": "rename", "newName": "Notes"}),
            ),
            (
                "call this chat Lisbon trip",
                json!({"subcommand": "rename", "newName": "Lisbon trip"}),
            ),
            (
                "rename conversation test7 to test5",
                json!({"subcommand": "rename", "name": "test7", "newName": "test5"}),
            ),
            (
                "rename my work conversation to office",
                json!({"subcommand": "rename", "name": "work", "newName": "office"}),
            ),
            (
                "rename drafts to final",
                json!({"subcommand": "rename", "name": "drafts", "newName": "final"}),
            ),
            (
                "find the conversation about taxes",
                json!({"subcommand": "find", "query": "taxes"}),
            ),
            (
                "search my conversations for the docker command",
                json!({"subcommand": "search", "query": "the docker command"}),
            ),
            (
                "hand off my research conversation here",
                json!({"subcommand": "handoff", "name": "research"}),
            ),
            (
                "Hand off the Research conversation into this one.",
                json!({"subcommand": "handoff", "name": "Research"}),
            ),
            (
                "handoff research",
                json!({"subcommand": "handoff", "name": "research"}),
            ),
            (
                "hand off from the conversation called Lisbon trip to here",
                json!({"subcommand": "handoff", "name": "Lisbon trip"}),
            ),
            (
                "can you bring over my budget chat",
                json!({"subcommand": "handoff", "name": "budget"}),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(conversation_request(text), Some(expected), "{text}");
        }
    }

    /// Requests that only look alike stay with the other tools (or the echo).
    #[test]
    fn other_requests_are_left_alone() {
        for text in [
            "what is 2+3",
            "weather in Paris",
            "time in Tokyo",
            "hello world",
            "list the files",
            "switch the lights off",
            "ask me is it sunny?",
            "conversation",
            "",
        ] {
            assert_eq!(conversation_request(text), None, "{text}");
        }
    }
}
