//! Conversation naming rules shared by create, rename and find (reference section 4.2): length in
//! UTF-16 code units, uniqueness by trimmed lower-case name, `appendNumber` collision handling and
//! the lexical scoring table of `findConversations`. Pure functions, below both of their users:
//! the registry (create, rename, find, the name index) and the cluster's shared registry
//! (whose name keys are the uniqueness key, [`normalize`]).

use crate::protocol::{RpcError, RpcResult};

/// Longest name, in UTF-16 code units (JavaScript `string.length`).
pub const MAX_NAME_UTF16: usize = 256;

/// Checks the raw (untrimmed) name length: 1..=256 UTF-16 code units.
pub fn validate_length(name: &str) -> RpcResult<()> {
    let len = name.encode_utf16().count();
    if (1..=MAX_NAME_UTF16).contains(&len) {
        Ok(())
    } else {
        Err(RpcError::NameLength)
    }
}

/// A new or changed name: the length rule first (as TypeAgent checks it), then no control
/// characters (C0, DEL, C1: a name is printed in terminals and UIs, where `ESC ] 52 ;` writes
/// the clipboard and `ESC ] 0 ;` the window title), then no invisible or direction-changing
/// characters ([`invisible_character`]).
pub fn validate_name(name: &str) -> RpcResult<()> {
    validate_length(name)?;
    if name
        .chars()
        .any(|c| c.is_control() || ('\u{80}'..='\u{9f}').contains(&c))
    {
        return Err(RpcError::NameControlCharacters);
    }
    if let Some(c) = invisible_character(name) {
        return Err(RpcError::NameInvisibleCharacters(format!(
            "U+{:04X}",
            u32::from(c)
        )));
    }
    Ok(())
}

/// Characters that change the direction of the text around them: the bidirectional marks,
/// embeddings, overrides and isolates (`U+202E` makes what follows read backwards, so
/// `invoice`, U+202E, `fdp.exe` shows as `invoiceexe.pdf`).
fn changes_direction(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Characters that show nothing anywhere: zero-width space, word joiner, invisible operators,
/// the byte-order mark, the soft hyphen, the combining grapheme joiner, the Mongolian vowel
/// separator and the Hangul fillers. A name holding one looks like a name without it.
fn shows_nothing(c: char) -> bool {
    matches!(
        c,
        '\u{ad}' | '\u{34f}' | '\u{115f}' | '\u{1160}' | '\u{180e}' | '\u{200b}' | '\u{2060}'
            ..='\u{2064}' | '\u{3164}' | '\u{feff}' | '\u{ffa0}'
    )
}

/// Emoji tag characters (`U+E0020`–`U+E007F`): invisible, except inside a subdivision flag,
/// which starts with the black flag `U+1F3F4` (🏴 + tags = the flag of Scotland).
fn is_tag(c: char) -> bool {
    ('\u{e0000}'..='\u{e007f}').contains(&c)
}

/// The first invisible or direction-changing character of `name`, if any. The joiners
/// `U+200C` (ZWNJ) and `U+200D` (ZWJ) are how Persian, the Indic scripts and emoji sequences
/// (man, ZWJ, woman, ZWJ, girl: one family emoji) are written, so they are allowed between two visible characters that are not ASCII;
/// between ASCII letters (`wo`, ZWJ, `rk`), at an end, or beside another such character, they only
/// hide a difference, and are refused.
pub fn invisible_character(name: &str) -> Option<char> {
    let chars: Vec<char> = name.chars().collect();
    let visible_non_ascii = |c: Option<&char>| {
        c.is_some_and(|&c| {
            !c.is_ascii()
                && !c.is_whitespace()
                && !changes_direction(c)
                && !shows_nothing(c)
                && !is_tag(c)
                && !matches!(c, '\u{200c}' | '\u{200d}')
        })
    };
    let mut in_flag = false;
    for (i, &c) in chars.iter().enumerate() {
        if is_tag(c) {
            if !in_flag {
                return Some(c);
            }
            continue;
        }
        in_flag = c == '\u{1f3f4}';
        let refused = match c {
            '\u{200c}' | '\u{200d}' => {
                !(i > 0
                    && visible_non_ascii(chars.get(i - 1))
                    && visible_non_ascii(chars.get(i + 1)))
            }
            c => changes_direction(c) || shows_nothing(c),
        };
        if refused {
            return Some(c);
        }
    }
    None
}

/// JavaScript `trim()`: Unicode white space plus the BOM.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
}

/// The key names are compared by: `trim().toLowerCase()`.
pub fn normalize(name: &str) -> String {
    js_trim(name).to_lowercase()
}

/// Splits `"<base> (<n>)"` into base and n; the base must be non-empty.
fn split_numbered(trimmed: &str) -> Option<(&str, u64)> {
    let rest = trimmed.strip_suffix(')')?;
    let open = rest.rfind(" (")?;
    let digits = &rest[open + 2..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base = &rest[..open];
    if base.is_empty() {
        return None;
    }
    Some((base, digits.parse().unwrap_or(u64::MAX)))
}

/// The `appendNumber` name: `"<requested base> (<max suffix among same-base names + 1>)"`.
/// `others` are the stored names of every *other* conversation.
pub fn append_number<'a>(requested: &str, others: impl Iterator<Item = &'a str>) -> String {
    let trimmed = js_trim(requested);
    let base = split_numbered(trimmed).map_or(trimmed, |(b, _)| b);
    let base_key = base.to_lowercase();
    let mut max = 0u64;
    for other in others {
        let t = js_trim(other);
        let (b, n) = split_numbered(t).unwrap_or((t, 0));
        if b.to_lowercase() == base_key {
            max = max.max(n);
        }
    }
    format!("{base} ({})", max.saturating_add(1))
}

/// Lexical score of `name` for a (trimmed, lower-cased) query, per the reference table.
pub fn score(query_lower: &str, name: &str) -> f64 {
    let name = normalize(name);
    if name.is_empty() || query_lower.is_empty() {
        return 0.0;
    }
    if name == query_lower {
        return 1.0;
    }
    if name.contains(query_lower) {
        return 0.9;
    }
    if query_lower.contains(name.as_str()) {
        return 0.8;
    }
    // JavaScript measures strings in UTF-16 code units.
    let a: Vec<u16> = name.encode_utf16().collect();
    let b: Vec<u16> = query_lower.encode_utf16().collect();
    let sim = 1.0 - levenshtein(&a, &b) as f64 / a.len().max(b.len()) as f64;
    if sim >= 0.6 {
        sim * 0.7
    } else {
        0.0
    }
}

fn levenshtein(a: &[u16], b: &[u16]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_counts_utf16_units() {
        assert_eq!(
            validate_name("title\u{1b}]0;pwned\u{7}"),
            Err(RpcError::NameControlCharacters)
        );
        assert_eq!(
            validate_name("tab\there"),
            Err(RpcError::NameControlCharacters)
        );
        assert_eq!(
            validate_name("c1 \u{9b}"),
            Err(RpcError::NameControlCharacters)
        );
        assert_eq!(validate_name(""), Err(RpcError::NameLength));
        // Finding 8 of the third security review: direction changes and invisible
        // characters, which make two names look alike or text read backwards.
        let invisible = |name: &str, code: &str| {
            assert_eq!(
                validate_name(name),
                Err(RpcError::NameInvisibleCharacters(code.into())),
                "{name:?}"
            )
        };
        invisible("invoice\u{202e}fdp.exe", "U+202E");
        invisible("\u{2066}isolated\u{2069}", "U+2066");
        invisible("wo\u{200b}rk", "U+200B");
        invisible("wo\u{200d}rk", "U+200D");
        invisible("\u{200d}👩", "U+200D");
        invisible("👩\u{200d}", "U+200D");
        invisible("👩\u{200d}\u{200d}👧", "U+200D");
        invisible("bom\u{feff}", "U+FEFF");
        invisible("soft\u{ad}hyphen", "U+00AD");
        invisible("tag\u{e0041}", "U+E0041");
        assert_eq!(
            RpcError::NameInvisibleCharacters("U+202E".into()).to_string(),
            "Conversation name must not contain invisible or direction-changing characters \
             (U+202E)"
        );
        // What the joiners and tags are for still works: emoji families, Persian, the
        // flag of Scotland.
        assert!(validate_name("👨\u{200d}👩\u{200d}👧 family").is_ok());
        assert!(validate_name("می\u{200c}خواهم").is_ok());
        assert!(validate_name(
            "\u{1f3f4}\u{e0067}\u{e0062}\u{e0073}\u{e0063}\u{e0074}\u{e007f} trip"
        )
        .is_ok());
        assert!(validate_name("עברית and English").is_ok());
        assert!(validate_name("ordinary — name ✓").is_ok());
        assert!(validate_length("").is_err());
        assert!(validate_length("   ").is_ok());
        assert!(validate_length(&"a".repeat(256)).is_ok());
        assert!(validate_length(&"a".repeat(257)).is_err());
        // 128 astral characters are 256 UTF-16 units; 129 are 258.
        assert!(validate_length(&"😀".repeat(128)).is_ok());
        assert!(validate_length(&"😀".repeat(129)).is_err());
    }

    #[test]
    fn append_number_follows_the_reference_examples() {
        let names = ["Project", "Project (2)", "project (5)"];
        assert_eq!(
            append_number("Project", names.iter().copied()),
            "Project (6)"
        );
        let names = ["Project", "Project (2)"];
        assert_eq!(
            append_number("Project (2)", names.iter().copied()),
            "Project (3)"
        );
        assert_eq!(append_number(" (3)", std::iter::empty()), "(3) (1)");
    }

    #[test]
    fn scoring_table() {
        assert_eq!(score("cli", "CLI"), 1.0);
        assert_eq!(score("cli", "my cli tab"), 0.9);
        assert_eq!(score("research notes", "research"), 0.8);
        let s = score("reseach", "research");
        assert!(s > 0.6 && s < 0.7, "{s}");
        assert_eq!(score("zzz", "research"), 0.0);
        assert_eq!(levenshtein(&[1, 2, 3], &[1, 3]), 1);
    }
}
