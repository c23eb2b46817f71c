//! `getCommandCompletion` as TypeAgent's CLI uses it, key by key: [`Session`] is a port of
//! the CLI's `PartialCompletionSession` (dispatcher `helpers/completion/session.ts`,
//! reference section B.5: the anchor is `input[0..startIndex]`, what is typed after it
//! filters the items by prefix, `separatorMode` decides which items show before and after a
//! separator, `closedSet` / `directionSensitive` decide when to ask again). Every prefix of
//! every `@` command and sub-command is typed, then backspaced, over a real socket, and the
//! menu must offer the word being typed (or, once a word is complete, the next one). A
//! client-hosted agent's commands (`getCommands`) are typed the same way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

/// A group's separator mode, resolved (`undefined` is `space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    None,
    OptionalSpace,
    OptionalSpacePunctuation,
    Space,
    SpacePunctuation,
}

impl Mode {
    fn of(group: &Value) -> Mode {
        match group["separatorMode"].as_str() {
            None | Some("space") => Mode::Space,
            Some("none") => Mode::None,
            Some("optionalSpace") => Mode::OptionalSpace,
            Some("optionalSpacePunctuation") => Mode::OptionalSpacePunctuation,
            Some("spacePunctuation" | "autoSpacePunctuation") => Mode::SpacePunctuation,
            Some(other) => panic!("unknown separatorMode {other}"),
        }
    }

    /// The session's visibility matrix (`isModeAtLevel`).
    fn at_level(self, level: usize) -> bool {
        use Mode::*;
        match level {
            0 => matches!(self, None | OptionalSpace | OptionalSpacePunctuation),
            1 => matches!(
                self,
                Space | OptionalSpace | OptionalSpacePunctuation | SpacePunctuation
            ),
            _ => matches!(self, OptionalSpacePunctuation | SpacePunctuation),
        }
    }
}

/// What a session does when the trie runs dry (`computeNoMatchPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Accept,
    Refetch,
    Slide,
}

/// `separatorCharLevel`: 2 for punctuation, 1 for white space.
fn separator_level(c: char) -> Option<usize> {
    if c.is_ascii_punctuation() {
        Some(2)
    } else if c.is_whitespace() {
        Some(1)
    } else {
        None
    }
}

/// `normalizeMatchText` (ASCII inputs: lower case, spaces as ' ').
fn normalize(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect::<String>()
        .to_lowercase()
}

/// The menu shown: its items and the typed prefix they are filtered by.
#[derive(Debug, Clone, PartialEq)]
struct Menu {
    items: Vec<String>,
    prefix: String,
}

/// A port of `PartialCompletionSession` with a synchronous fetch (the socket round trip).
struct Session<F: FnMut(&str, &str) -> Value> {
    fetch: F,
    /// Server calls made, for the log.
    fetches: usize,
    anchor: Option<String>,
    partitions: Vec<(Mode, Vec<String>)>,
    level_counts: [usize; 3],
    menu_level: usize,
    menu_anchor: usize,
    consumed_sep: String,
    policy: Policy,
    direction_sensitive: bool,
    /// The trie's items (first of each normalized text).
    trie: Vec<String>,
    menu: Option<Menu>,
    last_input: String,
    last_direction: String,
}

impl<F: FnMut(&str, &str) -> Value> Session<F> {
    fn new(fetch: F) -> Self {
        Session {
            fetch,
            fetches: 0,
            anchor: None,
            partitions: Vec::new(),
            level_counts: [0; 3],
            menu_level: 0,
            menu_anchor: 0,
            consumed_sep: String::new(),
            policy: Policy::Refetch,
            direction_sensitive: false,
            trie: Vec::new(),
            menu: None,
            last_input: String::new(),
            last_direction: "forward".into(),
        }
    }

    /// `update(input, direction)`: one keystroke.
    fn update(&mut self, input: &str, direction: &str) {
        if input == self.last_input && direction == self.last_direction && self.menu.is_some() {
            return;
        }
        self.last_input = input.to_string();
        self.last_direction = direction.to_string();
        if !self.reuse(input, direction) {
            self.fetch_new(input, direction);
        }
    }

    fn load_level(&mut self, level: usize) {
        self.menu_level = level;
        self.trie.clear();
        let mut seen = Vec::new();
        for (mode, items) in &self.partitions {
            if mode.at_level(level) {
                for item in items {
                    if !seen.contains(&normalize(item)) {
                        seen.push(normalize(item));
                        self.trie.push(item.clone());
                    }
                }
            }
        }
    }

    fn set_partitions(&mut self, partitions: Vec<(Mode, Vec<String>)>) {
        self.level_counts = [0; 3];
        for (mode, items) in &partitions {
            for level in 0..3 {
                if mode.at_level(level) {
                    self.level_counts[level] += items.len();
                }
            }
        }
        self.partitions = partitions;
    }

    fn filter(&self, prefix: &str) -> Vec<String> {
        let p = normalize(prefix);
        self.trie
            .iter()
            .filter(|i| normalize(i).starts_with(&p))
            .cloned()
            .collect()
    }

    fn has_exact(&self, text: &str) -> bool {
        self.trie.iter().any(|i| normalize(i) == normalize(text))
    }

    /// `computeSepLevel` + `targetLevel` + `leadingSeparatorLength` (`shiftToSepLevel`).
    fn shift_to_sep_level(&mut self, raw: &str) {
        let sep_len = raw.len()
            - raw
                .trim_start_matches(|c| separator_level(c).is_some())
                .len();
        let sep = &raw[..sep_len];
        let wanted = if sep.is_empty() {
            0
        } else if sep.chars().any(|c| c.is_ascii_punctuation()) {
            2
        } else {
            1
        };
        let lowest = (0..3).find(|l| self.level_counts[*l] > 0);
        let target = (1..=wanted)
            .rev()
            .find(|l| self.level_counts[*l] > 0)
            .or(lowest);
        let anchor_len = self.anchor.as_ref().map_or(0, String::len);
        self.menu_anchor = anchor_len + sep_len;
        self.consumed_sep = sep.to_string();
        if let Some(level) = target {
            self.load_level(level);
        }
    }

    /// `reuseSession`: true when the session serves `input` without a new request.
    fn reuse(&mut self, input: &str, direction: &str) -> bool {
        let Some(anchor) = self.anchor.clone() else {
            return false;
        };
        if !input.starts_with(&anchor)
            || (direction == "backward" && self.direction_sensitive && input == anchor)
        {
            return false;
        }
        if input.len() < self.menu_anchor
            || input[anchor.len()..self.menu_anchor] != self.consumed_sep
        {
            let raw = input[anchor.len()..].to_string();
            self.shift_to_sep_level(&raw);
        }
        let raw = input[self.menu_anchor..].to_string();
        if raw.is_empty() && self.level_counts[self.menu_level] == 0 {
            self.menu = None;
            return true;
        }
        if self.menu_level > 0 && self.consumed_sep.is_empty() {
            if raw.is_empty() {
                self.menu = None;
                return true;
            }
            if separator_level(raw.chars().next().unwrap()).is_none() {
                return false;
            }
        }
        self.match_or_consume(input, raw)
    }

    fn match_or_consume(&mut self, input: &str, mut raw: String) -> bool {
        loop {
            let items = self.filter(&raw);
            if items.len() == 1 && normalize(&items[0]) == normalize(&raw) {
                return false;
            }
            // C2: a complete item followed by a separator.
            if let Some(i) = raw
                .char_indices()
                .skip(1)
                .find_map(|(i, c)| separator_level(c).map(|_| i))
            {
                if self.has_exact(&raw[..i]) {
                    return false;
                }
            }
            if !items.is_empty() {
                self.menu = Some(Menu { items, prefix: raw });
                return true;
            }
            let Some(c) = raw.chars().next() else { break };
            let Some(level) = separator_level(c) else {
                break;
            };
            self.consumed_sep.push(c);
            self.menu_anchor += c.len_utf8();
            if level > self.menu_level {
                self.load_level(level);
            }
            raw = input[self.menu_anchor..].to_string();
        }
        match self.policy {
            Policy::Slide => {
                self.anchor = Some(input.to_string());
                self.menu_anchor = input.len();
                self.consumed_sep.clear();
                self.menu = None;
                true
            }
            Policy::Refetch => false,
            Policy::Accept => {
                self.menu = None;
                true
            }
        }
    }

    /// `startNewSession` with the answer in hand, then `reconcileTypeAhead`.
    fn fetch_new(&mut self, input: &str, direction: &str) {
        self.trie.clear();
        self.anchor = Some(input.to_string());
        self.menu_anchor = input.len();
        self.consumed_sep.clear();
        self.set_partitions(Vec::new());
        self.menu_level = 0;
        self.policy = Policy::Refetch;
        self.menu = None;
        self.fetches += 1;
        let result = (self.fetch)(input, direction);
        let closed = result["closedSet"].as_bool().expect("closedSet");
        let after = result["afterWildcard"].as_str().expect("afterWildcard");
        self.policy = match (after, closed) {
            ("all", _) => Policy::Slide,
            ("none", true) => Policy::Accept,
            _ => Policy::Refetch,
        };
        self.direction_sensitive = result["directionSensitive"].as_bool().expect("bool");
        let mut partitions: Vec<(Mode, Vec<String>)> = Vec::new();
        for g in result["completions"].as_array().expect("completions") {
            let mut items: Vec<String> = g["completions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_string())
                .collect();
            if g["sorted"] != true {
                items.sort();
            }
            let mode = Mode::of(g);
            match partitions.iter_mut().find(|(m, _)| *m == mode) {
                Some((_, bucket)) => bucket.extend(items),
                None => partitions.push((mode, items)),
            }
        }
        partitions.retain(|(_, items)| !items.is_empty());
        if partitions.is_empty() {
            self.set_partitions(Vec::new());
        } else {
            let start = result["startIndex"].as_u64().expect("startIndex") as usize;
            let partial = if start <= input.len() {
                &input[..start]
            } else {
                input
            };
            self.anchor = Some(partial.to_string());
            self.menu_anchor = partial.len();
            self.consumed_sep.clear();
            self.set_partitions(partitions);
            let lowest = (0..3).find(|l| self.level_counts[*l] > 0).unwrap_or(0);
            self.load_level(lowest);
        }
        let (last, dir) = (self.last_input.clone(), self.last_direction.clone());
        if !self.reuse(&last, &dir) {
            if last != input || dir != direction {
                self.fetch_new(&last, &dir);
            } else {
                self.menu = None;
            }
        }
    }
}

/// Where `prefix` (a prefix of `@w0 w1 … wn`) is: the word being typed and what of it is
/// typed.
fn position<'a>(words: &[&'a str], prefix: &str) -> (usize, &'a str, String) {
    let typed = &prefix[1..];
    let parts: Vec<&str> = typed.split(' ').collect();
    let k = parts.len() - 1;
    (k, words[k], parts[k].to_string())
}

/// Checks the menu for `prefix` of the command `words`: the word being typed is offered
/// with what is typed of it as the filter; a complete word may instead be followed by the
/// next word's menu.
fn check(menu: &Option<Menu>, words: &[&str], prefix: &str) {
    let (k, word, typed) = position(words, prefix);
    let offers = |m: &Menu, item: &str, filter: &str| {
        m.prefix == filter && m.items.iter().any(|i| i == item)
    };
    let ok = match menu {
        Some(m) if offers(m, word, &typed) => true,
        Some(m) if typed == word && k + 1 < words.len() => offers(m, words[k + 1], ""),
        None if typed == word && k + 1 == words.len() => true,
        _ => false,
    };
    assert!(
        ok,
        "typing {prefix:?} (word {word:?}, typed {typed:?}): menu {menu:?}"
    );
}

/// Every `@` command and sub-command Roundtable has, as words.
const COMMANDS: &[&[&str]] = &[
    &["conversation", "help"],
    &["conversation", "new"],
    &["conversation", "list"],
    &["conversation", "info"],
    &["conversation", "switch"],
    &["conversation", "prev"],
    &["conversation", "next"],
    &["conversation", "rename"],
    &["conversation", "delete"],
    &["conversation", "find"],
    &["conversation", "search"],
    &["help"],
    &["compact"],
    &["explain"],
    &["translate"],
    &["system", "help"],
    &["system", "history"],
    &["system", "session", "info"],
    &["system", "config", "show"],
    &["system", "config", "agents"],
    &["system", "trace"],
    &["dispatcher", "request"],
    &["dispatcher", "translate"],
    &["dispatcher", "explain"],
    // The client-hosted agent below.
    &["clock", "alarm", "set"],
    &["clock", "alarm", "list"],
    &["clock", "timer"],
];

/// The command tree of the test's client agent, as its client writes it.
pub(crate) const CLOCK_COMMANDS: &str = r#"{"description":"Clock commands","commands":{
    "alarm":{"description":"Alarms","commands":{
        "set":{"description":"Set an alarm","parameters":{
            "args":{"time":{"description":"HH:mm"},
                    "label":{"description":"What for","optional":true,"implicitQuotes":true}},
            "flags":{"repeat":{"description":"Every day","char":"r","type":"boolean"}}}},
        "list":{"description":"List alarms"}}},
    "timer":{"description":"Start a timer","parameters":{"args":{"minutes":{"description":"How long","type":"number"}}}}}}"#;

/// `registerClientAgent` for a command-running `clock` agent in `conversation`.
pub(crate) fn clock_registration(conversation: &str, interface: &[&str]) -> Value {
    json!([{
        "name": "clock",
        "manifest": {"emojiChar": "🕰", "description": "A clock."},
        "agentInterface": interface,
        "conversationId": conversation,
    }])
}

/// Answers `invoke` `call_id` on `channel` with ready-made JSON text (key order as written).
pub(crate) fn send_raw_result(c: &mut Client, channel: &str, call_id: u64, result_json: &str) {
    c.send_text(&format!(
        r#"{{"name":"{channel}","message":{{"type":"invokeResult","callId":{call_id},"result":{result_json}}}}}"#
    ));
}

/// A client hosting `clock` on its own thread: answers every `getCommands` with
/// [`CLOCK_COMMANDS`] until `stop` is set.
fn clock_host(mut phone: Client, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut answered = 0;
        while !stop.load(Ordering::Acquire) {
            let Some(f) = phone.read_frame(Duration::from_millis(50)) else {
                assert!(
                    phone.closed.is_none(),
                    "clock host closed: {:?}",
                    phone.closed
                );
                continue;
            };
            if f["name"] == "agent:clock" && f["message"]["type"] == "invoke" {
                assert_eq!(f["message"]["name"], "getCommands");
                let id = f["message"]["callId"].as_u64().unwrap();
                send_raw_result(&mut phone, "agent:clock", id, CLOCK_COMMANDS);
                answered += 1;
            }
        }
        answered
    })
}

/// Typing every `@` command key by key, then backspacing it, in a session like the CLI's:
/// the menu always offers the word being typed, filtered by what is typed of it, and a
/// complete word's menu is the next word's. Includes a client agent's sub-commands.
#[test]
fn every_command_completes_key_by_key() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("keys");
    let mut phone = server.connect();
    phone.join(&id);
    phone
        .agent(
            "registerClientAgent",
            clock_registration(&id, &["getCommands", "executeCommand"]),
        )
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let host = clock_host(phone, stop.clone());
    let d = dispatcher(&id);
    let mut keystrokes = 0;
    let mut fetches = 0;
    for words in COMMANDS {
        let full = format!("@{}", words.join(" "));
        let mut session = Session::new(|input: &str, direction: &str| {
            cli.invoke(&d, "getCommandCompletion", json!([input, direction]))
                .expect("getCommandCompletion never fails")
        });
        for end in 1..=full.len() {
            session.update(&full[..end], "forward");
            check(&session.menu, words, &full[..end]);
            keystrokes += 1;
        }
        for end in (1..full.len()).rev() {
            session.update(&full[..end], "backward");
            check(&session.menu, words, &full[..end]);
            keystrokes += 1;
        }
        fetches += session.fetches;
    }
    stop.store(true, Ordering::Release);
    let answered = host.join().expect("clock host");
    assert!(answered > 0, "the clock's commands were never asked for");
    println!(
        "{keystrokes} keystrokes, {fetches} getCommandCompletion calls, {answered} getCommands"
    );
}

/// The session port itself against the reference's worked results: `@` then `c` filters
/// to the `c…` names without a new request; `@system ` shows the sub-commands after the
/// space; an unknown word leaves nothing to show.
#[test]
fn the_session_filters_locally_between_requests() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("session");
    let d = dispatcher(&id);
    let mut session = Session::new(|input: &str, direction: &str| {
        cli.invoke(&d, "getCommandCompletion", json!([input, direction]))
            .unwrap()
    });
    session.update("@", "forward");
    assert_eq!(session.fetches, 1);
    session.update("@c", "forward");
    assert_eq!(session.fetches, 1, "filtered locally");
    assert_eq!(
        session.menu,
        Some(Menu {
            items: vec!["compact".into(), "conversation".into()],
            prefix: "c".into()
        })
    );
    session.update("@cx", "forward");
    assert_eq!(session.menu, None);
    assert_eq!(session.fetches, 1, "a closed set: no new request");
    session.update("@system", "forward");
    session.update("@system ", "forward");
    let menu = session.menu.clone().unwrap();
    assert_eq!(menu.prefix, "");
    assert_eq!(
        menu.items,
        ["clear", "config", "exit", "help", "history", "meter", "model", "session", "trace"]
    );
}
