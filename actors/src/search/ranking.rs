//! One query's answer: which documents match, how they rank, how they group into
//! conversations, and their snippets. Runs on the query thread ([`super`]) over its read
//! connection; [`store`] holds the SQL, [`query`] the user's terms.

use std::collections::{HashMap, HashSet};

use super::{query, store, ContentHit, DocKind, SearchError};
use crate::ids::ConversationId;

/// Documents of the query's best ones grouped into conversations.
const CANDIDATE_DOCS: usize = 1000;
/// Snippets per conversation.
const SNIPPETS: usize = 2;

/// Runs one query: the best documents, grouped by conversation, then snippets for the best
/// conversations.
///
/// Each term is *narrow* or *broad* ([`store::BROAD_DOCS`] matches or more; a walk of its
/// doclist that stops there tells, and scores nothing). A broad bare word is matched exactly
/// (see [`query`]). The *filter* is every term (or, when no document has them all, any
/// term). Documents that pass the filter and match a narrow term are ranked by BM25 over the
/// narrow terms (plus the bare words as a phrase when none is broad); documents that pass on
/// broad terms only follow, newest first, among the newest [`store::BROAD_DOCS`] that pass.
/// So no query scores a broad word's whole doclist (FTS5's BM25 counts every document of
/// each phrase it ranks), and a query of rare words is pure BM25.
///
/// The snippets are FTS5's own ([`store::passages`]): one MATCH of every term's expression,
/// as used above, over the answered conversations' best documents, so each match the index
/// found (accent- and case-folded, prefixes, phrases) is marked.
pub fn run_query(
    conn: &rusqlite::Connection,
    text: &str,
    max: usize,
) -> Result<Vec<ContentHit>, SearchError> {
    let unavailable = |e: rusqlite::Error| SearchError::Unavailable(e.to_string());
    let terms = query::parse(text)?;
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let broad = store::BROAD_DOCS;
    // Walks by expression: a one-term query's filter is its term, walked once.
    let mut walks: HashMap<String, Vec<i64>> = HashMap::new();
    let mut walk = |expression: &str| -> Result<Vec<i64>, SearchError> {
        if let Some(rows) = walks.get(expression) {
            return Ok(rows.clone());
        }
        let rows = store::matching_rowids(conn, expression, broad).map_err(unavailable)?;
        walks.insert(expression.to_string(), rows.clone());
        Ok(rows)
    };
    // Each term's expression, and whether it is narrow.
    let mut expressions = Vec::with_capacity(terms.len());
    let mut narrow = Vec::new();
    for term in &terms {
        let exact = term.exact();
        let expression = if walk(&exact)?.len() >= broad {
            exact
        } else {
            let full = term.expression();
            if walk(&full)?.len() < broad {
                narrow.push(full.clone());
            }
            full
        };
        expressions.push(expression);
    }
    let mut filter = expressions.join(" AND ");
    let mut every_term = true;
    let mut passing = walk(&filter)?;
    if passing.is_empty() && expressions.len() > 1 {
        filter = expressions.join(" OR ");
        every_term = false;
        passing = walk(&filter)?;
    }
    if passing.is_empty() {
        return Ok(Vec::new());
    }
    let passing_set: HashSet<i64> = passing.iter().copied().collect();
    let mut docs: Vec<(i64, f64)> = Vec::new();
    let mut seen: HashSet<i64> = HashSet::new();
    if !narrow.is_empty() {
        let mut rank_expr = narrow.join(" OR ");
        if narrow.len() == terms.len() {
            if let Some(phrase) = query::words_phrase(&terms) {
                rank_expr = format!("{rank_expr} OR {phrase}");
            }
        }
        for (rowid, bm25) in store::ranked(conn, &rank_expr).map_err(unavailable)? {
            // Every term: only documents that pass the filter (all of them are in `passing`,
            // since a narrow term bounds the filter's matches under BROAD_DOCS). Any term: a
            // narrow match passes by itself.
            let passes = !every_term || passing_set.contains(&rowid);
            if passes && seen.insert(rowid) {
                docs.push((rowid, (-bm25).max(0.0)));
                if docs.len() == CANDIDATE_DOCS {
                    break;
                }
            }
        }
    }
    // Then the newest documents that pass on broad terms only, at a flat low relevance.
    for &rowid in &passing {
        if docs.len() == CANDIDATE_DOCS {
            break;
        }
        if seen.insert(rowid) {
            docs.push((rowid, BROAD_RELEVANCE));
        }
    }
    let owners = store::conversations_of(
        conn,
        &docs.iter().map(|(rowid, _)| *rowid).collect::<Vec<_>>(),
    )
    .map_err(unavailable)?;
    // A conversation scores its best three documents, weighted 1, ½, ¼, so one strong passage
    // beats many weak ones but several strong ones beat one.
    struct Group {
        /// Its weighted relevance.
        score: f64,
        /// Its documents among the candidates (only the best three score).
        hits: usize,
        /// Its best [`SNIPPETS`] documents, best first: where its snippets come from.
        best: Vec<i64>,
    }
    let mut groups: Vec<(String, Group)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (rowid, relevance) in docs {
        let Some(conversation) = owners.get(&rowid) else {
            continue;
        };
        let at = *index.entry(conversation.clone()).or_insert_with(|| {
            groups.push((
                conversation.clone(),
                Group {
                    score: 0.0,
                    hits: 0,
                    best: Vec::new(),
                },
            ));
            groups.len() - 1
        });
        let g = &mut groups[at].1;
        if g.hits < 3 {
            g.score += relevance / f64::from(1u32 << g.hits);
        }
        if g.best.len() < SNIPPETS {
            g.best.push(rowid);
        }
        g.hits += 1;
    }
    // Stable: among equal scores, the conversation met first (better ranked, or newer) wins.
    groups.sort_by(|a, b| b.1.score.total_cmp(&a.1.score));
    let top: Vec<(ConversationId, Group)> = groups
        .into_iter()
        .filter_map(|(id, g)| Some((ConversationId::parse(&id)?, g)))
        .take(max)
        .collect();
    // Every document here matches some term's expression (the filter's, or a narrow one the
    // ranking used, which is the same one): FTS5 marks their instances, in one MATCH.
    let wanted: Vec<i64> = top
        .iter()
        .flat_map(|(_, g)| g.best.iter().copied())
        .collect();
    let passages = store::passages(conn, &expressions.join(" OR "), &wanted, SNIPPET_TOKENS)
        .map_err(unavailable)?;
    let mut out = Vec::with_capacity(top.len());
    for (conversation, g) in top {
        let mut snippets = Vec::new();
        let mut seq = None;
        for rowid in g.best {
            let Some((passage, kind, doc_seq)) = passages.get(&rowid) else {
                continue;
            };
            // The best document's: where the conversation opens at the match.
            seq.get_or_insert(*doc_seq);
            let who = if *kind == DocKind::Request.code() {
                "user"
            } else {
                "agent"
            };
            if let Some(marked) = snippet(passage) {
                snippets.push(format!("{who}: {marked}"));
            }
        }
        // BM25 orders the hits, but its idf is near zero for a word in half the documents,
        // which in a small instance is most words: the score a user sees is half coverage
        // (every term matched, or only some) and half BM25 mapped onto 0..1.
        let coverage = if every_term { 0.5 } else { 0.25 };
        let score = coverage + 0.5 * g.score / (1.0 + g.score);
        out.push(ContentHit {
            conversation,
            score: (score * 10_000.0).round() / 10_000.0,
            snippets,
            seq,
        });
    }
    Ok(out)
}

/// Tokens of a snippet, at most.
const SNIPPET_TOKENS: usize = 16;

/// The snippet a client sees from a passage FTS5 marked ([`store::passages`]): each match in
/// `**…**`, matches separated by whitespace only under one pair (a phrase, or words side by
/// side, read as one), line breaks as spaces. `None` when nothing is marked.
fn snippet(passage: &str) -> Option<String> {
    use store::{MARK_CLOSE, MARK_OPEN};
    if !passage.contains(MARK_OPEN) {
        return None;
    }
    let mut out = String::with_capacity(passage.len() + 8);
    let mut rest = passage;
    while let Some(at) = rest.find(MARK_CLOSE) {
        out.push_str(&rest[..at]);
        let after = &rest[at + MARK_CLOSE.len_utf8()..];
        let gap = after.len() - after.trim_start().len();
        match after[gap..].strip_prefix(MARK_OPEN) {
            // The next match follows after whitespace: one pair of marks for both.
            Some(next) => {
                out.push_str(&after[..gap]);
                rest = next;
            }
            None => {
                out.push_str("**");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out.replace(MARK_OPEN, "**").replace(['\n', '\r'], " "))
}

/// The relevance of a document that matched only broad terms (BM25 of a narrow match is
/// usually well above it).
const BROAD_RELEVANCE: f64 = 0.1;
