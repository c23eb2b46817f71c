//! Text as JavaScript sees it (white space, UTF-16 lengths) and [`resolve`], the walk of
//! `<sub> <sub> …` through a command tree.

use super::*;

/// JavaScript's white space (`\s`, `String.prototype.trim`): Unicode white space and the BOM.
pub fn is_js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// `s.trimStart()`.
pub fn trim_start_js(s: &str) -> &str {
    s.trim_start_matches(is_js_space)
}

/// The length of `s` in UTF-16 code units (JavaScript's `length`).
pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Where resolving `<sub> <sub> …` in a command tree stopped (TypeAgent's
/// `ResolveCommandResult`, without the agent part, which the caller resolves).
#[derive(Debug, Clone)]
pub struct Resolved<'a> {
    /// Sub-commands consumed, in order.
    pub commands: Vec<String>,
    /// Byte offset in the text where the unresolved rest (the suffix, leading white space
    /// skipped) starts.
    pub suffix_start: usize,
    /// The table resolution stopped at (`None` for a single-command agent).
    pub table: Option<&'a DescriptorTable>,
    /// The command resolved to: an explicit leaf, or the table's default.
    pub descriptor: Option<&'a CommandDescriptor>,
    /// `descriptor` is an explicitly typed leaf (not the default).
    pub matched: bool,
}

/// The next white-space-delimited token of `text` at or after `pos`: (start, end) byte
/// offsets (`/^\s*\S+/`).
pub fn next_word(text: &str, pos: usize) -> Option<(usize, usize)> {
    let rest = &text[pos..];
    let start = pos + (rest.len() - trim_start_js(rest).len());
    let word = &text[start..];
    if word.is_empty() {
        return None;
    }
    let end = word.find(is_js_space).map_or(text.len(), |i| start + i);
    Some((start, end))
}

/// Resolves sub-commands in `text` from byte `pos` (`resolveCommandCore` after the agent
/// token): tokens are consumed while they name a sub-command of the current table; a leaf
/// ends it (`matched`), as does an unknown token (left in the suffix); at a table's end its
/// default becomes the descriptor.
pub fn resolve<'a>(
    descriptors: Option<&'a Descriptors>,
    text: &str,
    mut pos: usize,
) -> Resolved<'a> {
    let mut resolved = Resolved {
        commands: Vec::new(),
        suffix_start: pos,
        table: None,
        descriptor: None,
        matched: false,
    };
    match descriptors {
        None => {}
        Some(Descriptors::Command(c)) => resolved.descriptor = Some(c),
        Some(Descriptors::Table(root)) => {
            let mut table = root;
            loop {
                let Some((start, end)) = next_word(text, pos) else {
                    resolved.descriptor = table.default_descriptor();
                    break;
                };
                match table.get(&text[start..end]) {
                    None => {
                        resolved.descriptor = table.default_descriptor();
                        break;
                    }
                    Some(next) => {
                        resolved.commands.push(text[start..end].to_string());
                        pos = end;
                        match next {
                            Descriptors::Command(c) => {
                                resolved.descriptor = Some(c);
                                resolved.matched = true;
                                break;
                            }
                            Descriptors::Table(t) => table = t,
                        }
                    }
                }
            }
            resolved.table = Some(table);
        }
    }
    let rest = &text[pos..];
    resolved.suffix_start = pos + (rest.len() - trim_start_js(rest).len());
    resolved
}
