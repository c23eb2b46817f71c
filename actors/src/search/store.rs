//! The index file, `<instance>/search/index.sqlite`: SQLite (WAL) with an FTS5 table. Only the
//! search writer thread writes it; the query thread reads it through its own connection.
//!
//! ```text
//! conversations(key, id, indexed_seq, requests)   one row per indexed conversation
//! docs(rowid, conv, seq, kind)                     one row per document (rowids rise with time)
//! entries(text)  FTS5, rowid = docs.rowid          unicode61, diacritics removed, prefixes 2–3
//! temp.marks(text)  FTS5, the reader's own        same tokenizer: snippets (empty between queries)
//! ```
//! `indexed_seq` is the seq of the last `user-request` / `command-result` whose document is
//! in: a scan resumes after it, and a live document at or below it is already in. The file
//! is derived data: when it is missing, of another format or corrupt, it is rebuilt from the
//! display logs (see [`super`]).

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::text::{Doc, DocKind};
use crate::ids::ConversationId;

/// `PRAGMA user_version` of the schema below; another value means rebuild.
pub const FORMAT: i64 = 1;

/// The tokenizer of `entries`, and of the query thread's `temp.marks` where snippets are made
/// ([`passages`]): one definition, so a snippet marks what the index matched.
const TOKENIZER: &str = "unicode61 remove_diacritics 2";

/// The writer's connection.
pub struct Store {
    conn: Connection,
}

/// Applies the settings both connections share.
fn tune(conn: &Connection) -> rusqlite::Result<()> {
    // A small page cache: the index must not cost the idle server memory; the OS page cache
    // holds the hot pages anyway.
    conn.pragma_update(None, "cache_size", -1024)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

impl Store {
    /// Opens (creating it if needed) the index at `path`. `Ok((store, fresh))`: `fresh` when
    /// it holds nothing (new, or reset because its format differs). Errors mean the file is
    /// unusable (corrupt, not a database): the caller moves it away and retries.
    pub fn open(path: &Path) -> rusqlite::Result<(Store, bool)> {
        let conn = Connection::open(path)?;
        tune(&conn)?;
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "wal", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            log::warn!("search index: journal mode is {mode}, not WAL");
        }
        // WAL + NORMAL: a commit survives a crash of the process (not of the machine; a scan
        // after an unclean stop fills in whatever the machine lost).
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let mut fresh = false;
        if version != FORMAT {
            if version != 0 {
                log::info!(
                    "search index: format {version}, this build writes {FORMAT}: rebuilding"
                );
            }
            conn.execute_batch(
                "DROP TABLE IF EXISTS entries; DROP TABLE IF EXISTS docs;
                 DROP TABLE IF EXISTS conversations;",
            )?;
            fresh = true;
        }
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS conversations(
                 key INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
                 indexed_seq INTEGER NOT NULL, requests INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE IF NOT EXISTS docs(
                 rowid INTEGER PRIMARY KEY, conv INTEGER NOT NULL,
                 seq INTEGER NOT NULL, kind INTEGER NOT NULL);
             CREATE INDEX IF NOT EXISTS docs_conv ON docs(conv);
             CREATE VIRTUAL TABLE IF NOT EXISTS entries USING fts5(
                 text, tokenize = '{TOKENIZER}', prefix = '2 3');"
        ))?;
        conn.pragma_update(None, "user_version", FORMAT)?;
        if !fresh {
            // A cheap read of every table: a file that is not a database, or whose pages are
            // damaged where it matters first, fails here rather than on the first turn. One
            // row each, not `count(*)`: counting walks the whole table (200,000 documents:
            // 15 ms of every start, and their pages left in the cache).
            conn.query_row("SELECT key FROM conversations LIMIT 1", [], |_| Ok(()))
                .optional()?;
            conn.query_row("SELECT rowid FROM docs LIMIT 1", [], |_| Ok(()))
                .optional()?;
            conn.query_row("SELECT rowid FROM entries LIMIT 1", [], |_| Ok(()))
                .optional()?;
        }
        Ok((Store { conn }, fresh))
    }

    /// Starts a transaction (the writer batches everything until [`Store::commit`]).
    pub fn begin(&self) -> rusqlite::Result<()> {
        self.conn.execute_batch("BEGIN IMMEDIATE")
    }

    /// Commits the open transaction.
    pub fn commit(&self) -> rusqlite::Result<()> {
        self.conn.execute_batch("COMMIT")
    }

    /// Gives back the connection's page cache (`PRAGMA shrink_memory`): after the startup
    /// reconciliation or a catch-up scan it holds pages nothing will read again soon, up to
    /// the cache's 1 MB, which an idle server would otherwise keep. Later reads refill it.
    pub fn release_memory(&self) {
        if let Err(e) = self.conn.execute_batch("PRAGMA shrink_memory") {
            log::debug!("search index: shrink_memory failed: {e}");
        }
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// Every indexed conversation: (id text, indexed seq).
    pub fn conversations(&self) -> rusqlite::Result<Vec<(String, u64)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, indexed_seq FROM conversations")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
        rows.collect()
    }

    /// `(key, indexed_seq)` of a conversation, if it has a row.
    pub fn state(&self, id: &ConversationId) -> rusqlite::Result<Option<(i64, u64)>> {
        self.conn
            .prepare_cached("SELECT key, indexed_seq FROM conversations WHERE id = ?1")?
            .query_row([id.to_string()], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))
            })
            .optional()
    }

    /// Adds `docs` (those above the conversation's `indexed_seq`) and moves `indexed_seq` to
    /// `settled` when that is higher. Returns the documents added.
    pub fn add(&self, id: &ConversationId, docs: &[Doc], settled: u64) -> rusqlite::Result<usize> {
        let (key, indexed) = match self.state(id)? {
            Some((key, seq)) => (key, Some(seq)),
            None => {
                self.conn
                    .prepare_cached(
                        "INSERT INTO conversations(id, indexed_seq, requests) VALUES (?1, ?2, 0)",
                    )?
                    .execute(params![id.to_string(), settled as i64])?;
                (self.conn.last_insert_rowid(), None)
            }
        };
        let mut added = 0;
        let mut requests = 0i64;
        for d in docs.iter().filter(|d| indexed.is_none_or(|s| d.seq > s)) {
            self.conn
                .prepare_cached("INSERT INTO docs(conv, seq, kind) VALUES (?1, ?2, ?3)")?
                .execute(params![key, d.seq as i64, d.kind.code()])?;
            let rowid = self.conn.last_insert_rowid();
            self.conn
                .prepare_cached("INSERT INTO entries(rowid, text) VALUES (?1, ?2)")?
                .execute(params![rowid, d.text])?;
            added += 1;
            requests += i64::from(d.kind == DocKind::Request);
        }
        if indexed.is_some_and(|s| settled > s) || requests > 0 {
            self.conn
                .prepare_cached(
                    "UPDATE conversations SET indexed_seq = max(indexed_seq, ?2),
                     requests = requests + ?3 WHERE key = ?1",
                )?
                .execute(params![key, settled as i64, requests])?;
        }
        Ok(added)
    }

    /// Removes everything of a conversation (by id text, so a malformed one can go too).
    pub fn remove(&self, id: &str) -> rusqlite::Result<()> {
        let key: Option<i64> = self
            .conn
            .prepare_cached("SELECT key FROM conversations WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?;
        if let Some(key) = key {
            self.conn
                .prepare_cached(
                    "DELETE FROM entries WHERE rowid IN (SELECT rowid FROM docs WHERE conv = ?1)",
                )?
                .execute([key])?;
            self.conn
                .prepare_cached("DELETE FROM docs WHERE conv = ?1")?
                .execute([key])?;
            self.conn
                .prepare_cached("DELETE FROM conversations WHERE key = ?1")?
                .execute([key])?;
        }
        Ok(())
    }
}

/// Opens the index read-only for queries, with the scratch table snippets are made in,
/// `temp.marks` ([`passages`]): the connection's own, in memory, empty between queries (a
/// read-only connection may still write its temporary schema).
pub fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    tune(&conn)?;
    conn.execute_batch(&format!(
        "PRAGMA temp_store = MEMORY;
         CREATE VIRTUAL TABLE temp.marks USING fts5(text, tokenize = '{TOKENIZER}');"
    ))?;
    Ok(conn)
}

/// Matches past which a term (or a whole query) is *broad*: BM25 is not used on it. FTS5's
/// `bm25()` counts every document of each phrase it scores (its idf), so one very common word
/// costs a walk of most of the index on every query (measured: 0.9 s for a word in 90% of
/// 670,000 documents); for such a word idf is near zero anyway, and recency orders better.
pub const BROAD_DOCS: usize = 5_000;

/// The rowids of documents matching `expression`, newest first, at most `limit` (a walk of
/// the doclists that scores nothing and stops at `limit`).
pub fn matching_rowids(
    conn: &Connection,
    expression: &str,
    limit: usize,
) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT rowid FROM entries WHERE entries MATCH ?1 ORDER BY rowid DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![expression, limit as i64], |r| r.get(0))?;
    rows.collect()
}

/// Every document matching `expression` with its BM25 (lower is better), best first. Only
/// for expressions of narrow terms (each under [`BROAD_DOCS`] matches).
pub fn ranked(conn: &Connection, expression: &str) -> rusqlite::Result<Vec<(i64, f64)>> {
    let mut stmt = conn
        .prepare_cached("SELECT rowid, rank FROM entries WHERE entries MATCH ?1 ORDER BY rank")?;
    let rows = stmt.query_map(params![expression], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// The conversation id text of each document in `rowids`.
pub fn conversations_of(
    conn: &Connection,
    rowids: &[i64],
) -> rusqlite::Result<HashMap<i64, String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT conversations.id FROM docs JOIN conversations ON conversations.key = docs.conv
         WHERE docs.rowid = ?1",
    )?;
    let mut out = HashMap::with_capacity(rowids.len());
    for &rowid in rowids {
        if let Some(id) = stmt.query_row([rowid], |r| r.get(0)).optional()? {
            out.insert(rowid, id);
        }
    }
    Ok(out)
}

/// Opens a matched phrase in what [`passages`] returns: a control character display text
/// does not normally hold, so the caller can tell FTS5's marks from a `**` of the text itself.
pub const MARK_OPEN: char = '\u{2}';
/// Closes a matched phrase in what [`passages`] returns (see [`MARK_OPEN`]).
pub const MARK_CLOSE: char = '\u{3}';

/// The best passage for `expression` of each document of `rowids` that matches it, with its
/// kind and seq, by rowid (a document deleted meanwhile is left out).
///
/// A passage is FTS5's `snippet()`: the window of at most `tokens` tokens holding the most
/// distinct matched phrases, `…` where the text was cut, every phrase instance of the match
/// between [`MARK_OPEN`] and [`MARK_CLOSE`]. FTS5 marks the instances the match itself
/// found, so what `TOKENIZER` matched (diacritics, case, prefixes) is what is marked.
///
/// `snippet()` runs on `temp.marks` ([`open_reader`]), a table of the same tokenizer that
/// holds copies of these documents only inside a transaction rolled back at the end: one
/// MATCH for them all. On `entries` itself (which could serve it: it stores its text, it is
/// neither contentless nor external-content) each document would need a MATCH of its own,
/// and each MATCH expands the expression's prefix terms over the whole index again
/// (measured in a debug build, 20 documents of 60,000: 1.4 s against 2 ms this way for
/// `a*`, 4–40 ms against 1.5 ms for plain words).
pub fn passages(
    conn: &Connection,
    expression: &str,
    rowids: &[i64],
    tokens: usize,
) -> rusqlite::Result<HashMap<i64, (String, i64, u64)>> {
    let scratch = conn.unchecked_transaction()?;
    let mut copy = conn.prepare_cached(
        "INSERT INTO temp.marks(rowid, text) SELECT rowid, text FROM main.entries WHERE rowid = ?1",
    )?;
    let mut copied = std::collections::HashSet::with_capacity(rowids.len());
    for &rowid in rowids {
        if copied.insert(rowid) {
            copy.execute([rowid])?;
        }
    }
    let mut stmt = conn.prepare_cached(
        "SELECT marks.rowid, snippet(marks, 0, ?2, ?3, '…', ?4), docs.kind, docs.seq
         FROM temp.marks JOIN main.docs ON docs.rowid = marks.rowid
         WHERE marks MATCH ?1",
    )?;
    let rows = stmt
        .query_map(
            params![
                expression,
                MARK_OPEN.to_string(),
                MARK_CLOSE.to_string(),
                tokens as i64
            ],
            |r| {
                Ok((
                    r.get(0)?,
                    (r.get(1)?, r.get(2)?, r.get::<_, i64>(3)? as u64),
                ))
            },
        )?
        .collect::<rusqlite::Result<HashMap<_, _>>>()?;
    drop((copy, stmt));
    scratch.rollback()?;
    Ok(rows)
}

/// Documents and requests indexed per conversation id text.
pub fn counts(conn: &Connection) -> rusqlite::Result<Vec<(String, u64)>> {
    let mut stmt = conn.prepare_cached("SELECT id, requests FROM conversations")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
    rows.collect()
}
