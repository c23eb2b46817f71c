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
//! Snippets are not marked here: FTS5's `snippet()` marks the instances of the match itself
//! ([`super::store::passages`]), so a word is marked exactly when the index's tokenizer
//! matched it.

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

/// Splits the user's `text` at everything but letters and digits, lower-cased: pieces that
/// hold no FTS5 syntax once quoted. FTS5 tokenizes each quoted piece again with the index's
/// tokenizer (folding case and diacritics), which alone decides what matches.
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
}
