//! A user's search text → FTS5 query expressions. Users type words, `"quoted phrases"` and
//! `prefix*`; nothing they type is FTS5 syntax (every term is quoted here), so no input can
//! make a query fail to parse.
//!
//! Ranking rides on FTS5's BM25: a bare word `w` of three letters or more becomes
//! `("w" OR "w"*)` ([`Term::expression`]), so a document with the exact word scores both and
//! ranks above one that only has a longer word starting with `w` — unless the exact word is
//! itself common ([`Term::exact`] is used then: expanding a prefix materialises the doclists
//! of every word it starts, measured at 100 ms for a common one). Two or more bare words also
//! give the whole run as a phrase that the ranking adds, so the words side by side rank above
//! the words apart.
//!
//! The same terms mark the matched words in snippets ([`highlight`]), on the stored text, so
//! no snippet needs a second FTS5 match.

/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Most terms used from one query (the rest are ignored).
pub const MAX_TERMS: usize = 16;

/// Why a query was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Over [`MAX_QUERY_BYTES`].
    #[error("Search query too long: {0} bytes (at most {MAX_QUERY_BYTES})")]
    TooLong(usize),
}

/// One term of the user's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// A word: exact or prefix.
    Word(String),
    /// `word*`: prefix only.
    Prefix(String),
    /// `"several words"`: the tokens in order.
    Phrase(Vec<String>),
}

impl Term {
    /// The term matching its exact word(s) only.
    pub fn exact(&self) -> String {
        match self {
            Term::Word(w) => quoted(w),
            Term::Prefix(w) => format!("{}*", quoted(w)),
            Term::Phrase(words) => quoted(&words.join(" ")),
        }
    }

    /// The term with a bare word's implicit prefix (three letters or more).
    pub fn expression(&self) -> String {
        match self {
            Term::Word(w) if w.chars().count() >= 3 => {
                format!("({} OR {}*)", quoted(w), quoted(w))
            }
            other => other.exact(),
        }
    }

    /// Whether `token` (folded: lower case, no diacritics) is one this term marks in a
    /// snippet.
    fn marks(&self, token: &str, implicit_prefix: bool) -> bool {
        match self {
            Term::Word(w) => {
                let w = fold(w);
                token == w || (implicit_prefix && w.chars().count() >= 3 && token.starts_with(&w))
            }
            Term::Prefix(w) => token.starts_with(&fold(w)),
            Term::Phrase(words) => words.iter().any(|w| fold(w) == token),
        }
    }
}

/// The user's text as terms, `Ok(empty)` when it holds nothing to search for.
pub fn parse(text: &str) -> Result<Vec<Term>, QueryError> {
    if text.len() > MAX_QUERY_BYTES {
        return Err(QueryError::TooLong(text.len()));
    }
    Ok(terms(text))
}

/// The bare words of `terms` side by side as one phrase (two or more of them), the ranking
/// boost for "the words together".
pub fn words_phrase(terms: &[Term]) -> Option<String> {
    let words: Vec<&str> = terms
        .iter()
        .filter_map(|t| match t {
            Term::Word(w) => Some(w.as_str()),
            _ => None,
        })
        .collect();
    (words.len() >= 2).then(|| quoted(&words.join(" ")))
}

/// Splits `text` into tokens the way FTS5's `unicode61` tokenizer does (letters and digits;
/// everything else separates), lower-cased.
fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Parses the user's text into terms.
fn terms(text: &str) -> Vec<Term> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() && out.len() < MAX_TERMS {
        if let Some(after) = rest.strip_prefix('"') {
            let (inside, next) = after.split_once('"').unwrap_or((after, ""));
            let words = tokens(inside);
            match words.len() {
                0 => {}
                1 => out.push(Term::Word(words.into_iter().next().expect("one"))),
                _ => out.push(Term::Phrase(words)),
            }
            rest = next;
            continue;
        }
        let end = rest.find([' ', '\t', '\n', '"']).unwrap_or(rest.len());
        let (chunk, next) = rest.split_at(end);
        rest = next.strip_prefix([' ', '\t', '\n']).unwrap_or(next);
        let prefix = chunk.ends_with('*');
        let words = tokens(chunk);
        let last = words.len().saturating_sub(1);
        for (i, w) in words.into_iter().enumerate() {
            if out.len() == MAX_TERMS {
                break;
            }
            out.push(if prefix && i == last {
                Term::Prefix(w)
            } else {
                Term::Word(w)
            });
        }
    }
    out
}

/// `"w"` with FTS5's quote escaping (tokens never hold a quote; kept for safety).
fn quoted(w: &str) -> String {
    format!("\"{}\"", w.replace('"', "\"\""))
}

/// Lower case without diacritics, for comparing tokens as `unicode61 remove_diacritics 2`
/// does (for the Latin letters; a token FTS5 folds further is still found, only not marked).
pub fn fold(token: &str) -> String {
    token
        .to_lowercase()
        .chars()
        .map(|c| match c {
            'à'..='å' | 'ā' | 'ă' | 'ą' => 'a',
            'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => 'c',
            'ď' | 'đ' => 'd',
            'è'..='ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => 'e',
            'ĝ' | 'ğ' | 'ġ' | 'ģ' => 'g',
            'ĥ' | 'ħ' => 'h',
            'ì'..='ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' | 'ı' => 'i',
            'ĵ' => 'j',
            'ķ' => 'k',
            'ĺ' | 'ļ' | 'ľ' | 'ŀ' | 'ł' => 'l',
            'ñ' | 'ń' | 'ņ' | 'ň' => 'n',
            'ò'..='ö' | 'ø' | 'ō' | 'ŏ' | 'ő' => 'o',
            'ŕ' | 'ŗ' | 'ř' => 'r',
            'ś' | 'ŝ' | 'ş' | 'š' => 's',
            'ţ' | 'ť' | 'ŧ' => 't',
            'ù'..='ü' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' => 'u',
            'ŵ' => 'w',
            'ý' | 'ÿ' | 'ŷ' => 'y',
            'ź' | 'ż' | 'ž' => 'z',
            c => c,
        })
        .collect()
}

/// A passage of `text` around its first marked word, about `width` tokens, the words `terms`
/// mark in `**…**`, `…` where it was cut; `None` when no word is marked.
pub fn highlight(
    text: &str,
    terms: &[Term],
    width: usize,
    implicit_prefix: bool,
) -> Option<String> {
    // Token spans (byte ranges of alphanumeric runs) and whether each is marked.
    let mut spans: Vec<(usize, usize, bool)> = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (c.is_alphanumeric() && i < text.len(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let token = fold(&text[s..i]);
                let marked = terms.iter().any(|t| t.marks(&token, implicit_prefix));
                spans.push((s, i, marked));
                start = None;
            }
            _ => {}
        }
    }
    let first = spans.iter().position(|s| s.2)?;
    // The window: a few tokens of context before the first mark, the rest after.
    let before = (width / 4).min(first);
    let from = first - before;
    let to = (from + width).min(spans.len());
    let (begin, end) = (
        if from == 0 { 0 } else { spans[from].0 },
        if to == spans.len() {
            text.len()
        } else {
            spans[to - 1].1
        },
    );
    let mut out = String::new();
    if begin > 0 {
        out.push('…');
    }
    let mut at = begin;
    let mut i = from;
    while i < to {
        let (s, _, marked) = spans[i];
        if !marked {
            i += 1;
            continue;
        }
        // Adjacent marked words (a phrase) share one pair of marks.
        let mut j = i;
        while j + 1 < to && spans[j + 1].2 && text[spans[j].1..spans[j + 1].0].trim().is_empty() {
            j += 1;
        }
        out.push_str(&text[at..s]);
        out.push_str("**");
        out.push_str(&text[s..spans[j].1]);
        out.push_str("**");
        at = spans[j].1;
        i = j + 1;
    }
    out.push_str(&text[at..end]);
    if end < text.len() {
        out.push('…');
    }
    Some(out.replace(['\n', '\r'], " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_prefixes_and_phrases() {
        assert_eq!(
            terms(r#"Café "New  York" zur* a"#),
            vec![
                Term::Word("café".into()),
                Term::Phrase(vec!["new".into(), "york".into()]),
                Term::Prefix("zur".into()),
                Term::Word("a".into()),
            ]
        );
        let t = parse("big cat zur* ab").unwrap();
        let exprs: Vec<String> = t.iter().map(Term::expression).collect();
        assert_eq!(
            exprs,
            [
                r#"("big" OR "big"*)"#,
                r#"("cat" OR "cat"*)"#,
                r#""zur"*"#,
                r#""ab""#
            ]
        );
        assert_eq!(t[0].exact(), r#""big""#);
        assert_eq!(words_phrase(&t).as_deref(), Some(r#""big cat ab""#));
        assert_eq!(words_phrase(&parse("one").unwrap()), None);
    }

    #[test]
    fn nothing_the_user_types_is_syntax() {
        for text in [
            r#"NEAR(a b) AND OR NOT ^x col:y "unterminated"#,
            "{a b} - + ( ) : ^",
            r#"""""""#,
        ] {
            for t in parse(text).unwrap() {
                // Every token is inside quotes; operators only come from this module.
                for op in ["NEAR(", "col:", "^", "{"] {
                    assert!(!t.expression().contains(op), "{text:?} → {t:?}");
                }
            }
        }
        assert!(parse(" \t-- ").unwrap().is_empty());
        assert!(matches!(
            parse(&"x".repeat(MAX_QUERY_BYTES + 1)),
            Err(QueryError::TooLong(_))
        ));
        assert_eq!(terms(&"w ".repeat(100)).len(), MAX_TERMS);
    }

    #[test]
    fn highlight_marks_folded_words_phrases_and_cuts_around_the_first() {
        let t = parse("zurich").unwrap();
        assert_eq!(
            highlight("Weather in Zürich tomorrow?", &t, 12, true).as_deref(),
            Some("Weather in **Zürich** tomorrow?")
        );
        let t = parse(r#""offline builtin""#).unwrap();
        assert_eq!(
            highlight("I am the offline builtin one", &t, 12, true).as_deref(),
            Some("I am the **offline builtin** one")
        );
        let t = parse("expens").unwrap();
        assert_eq!(
            highlight("is it expensive", &t, 12, true).as_deref(),
            Some("is it **expensive**")
        );
        assert_eq!(highlight("is it expensive", &t, 12, false), None);
        let long = (0..40)
            .map(|n| format!("w{n}"))
            .collect::<Vec<_>>()
            .join(" ");
        let t = parse("w20").unwrap();
        assert_eq!(
            highlight(&long, &t, 8, true).as_deref(),
            Some("…w18 w19 **w20** w21 w22 w23 w24 w25…")
        );
        assert_eq!(highlight("nothing here", &t, 8, true), None);
    }
}
