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
/// the clipboard and `ESC ] 0 ;` the window title).
pub fn validate_name(name: &str) -> RpcResult<()> {
    validate_length(name)?;
    if name
        .chars()
        .any(|c| c.is_control() || ('\u{80}'..='\u{9f}').contains(&c))
    {
        return Err(RpcError::NameControlCharacters);
    }
    Ok(())
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
