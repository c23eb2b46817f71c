//! Instance directories written straight to disk before a server starts, in the server's own
//! formats (`actors/src/storage/registry_file.rs`, `actors/src/storage/display_log.rs`): a
//! registry of N conversations (`conversations/conversations.json` plus the clean-shutdown
//! marker, so the server trusts the stored message counts as it would after a normal restart)
//! and display logs of N entries (`conversations/<id>/displayLog.jsonl`). Creating 100,000 conversations or a 1,000,000-entry
//! log through the protocol would take minutes; this takes seconds.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use uuid::Uuid;

/// A conversation written into a fixture registry.
#[derive(Debug, Clone)]
pub struct FixtureConversation {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `user-request` entries in its log (the stored `messageCount`).
    pub message_count: u64,
}

impl FixtureConversation {
    /// A fresh conversation named `name` with an empty log.
    pub fn new(name: String) -> FixtureConversation {
        FixtureConversation {
            id: Uuid::new_v4().to_string(),
            name,
            message_count: 0,
        }
    }
}

/// Writes `conversations/conversations.json` and the clean-shutdown marker.
pub fn write_registry(instance: &Path, conversations: &[FixtureConversation]) -> io::Result<()> {
    let dir = instance.join("conversations");
    fs::create_dir_all(&dir)?;
    let mut out = BufWriter::with_capacity(1 << 20, File::create(dir.join("conversations.json"))?);
    out.write_all(b"{\n  \"sessions\": [\n")?;
    for (i, c) in conversations.iter().enumerate() {
        let sep = if i + 1 == conversations.len() {
            ""
        } else {
            ","
        };
        writeln!(
            out,
            "    {{\"conversationId\": {}, \"name\": {}, \"createdAt\": \"2026-11-01T00:00:00.000Z\", \"messageCount\": {}}}{sep}",
            serde_json::to_string(&c.id).expect("string"),
            serde_json::to_string(&c.name).expect("string"),
            c.message_count
        )?;
    }
    out.write_all(b"  ]\n}\n")?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    fs::write(dir.join(".clean-shutdown"), b"clean\n")
}

/// Writes `conversations/<id>/displayLog.jsonl` with `entries` entries shaped like echo turns
/// (`user-request`, `append-display`, `command-result`); returns the `user-request` count.
pub fn write_display_log(instance: &Path, id: &str, entries: u64) -> io::Result<u64> {
    let dir = instance.join("conversations").join(id);
    fs::create_dir_all(&dir)?;
    let mut out = BufWriter::with_capacity(1 << 20, File::create(dir.join("displayLog.jsonl"))?);
    let mut users = 0u64;
    let base_ms: u64 = 1_793_000_000_000;
    for seq in 0..entries {
        let turn = seq / 3;
        let ts = base_ms + seq;
        let rid = format!(
            "{{\"clientRequestId\":\"lt{turn}\",\"connectionId\":\"0\",\"requestId\":\"00000000-0000-4000-8000-{turn:012}\"}}"
        );
        match seq % 3 {
            0 => {
                users += 1;
                writeln!(
                    out,
                    "{{\"s\":{seq},\"u\":{users},\"e\":{{\"type\":\"user-request\",\"seq\":{seq},\"timestamp\":{ts},\"command\":\"hello from the load harness\",\"requestId\":{rid}}}}}"
                )?;
            }
            1 => writeln!(
                out,
                "{{\"s\":{seq},\"u\":{users},\"e\":{{\"type\":\"append-display\",\"seq\":{seq},\"timestamp\":{ts},\"message\":{{\"message\":{{\"content\":\"echo: hello from the load harness\",\"type\":\"markdown\"}},\"requestId\":{rid},\"source\":\"chat\"}},\"mode\":\"block\"}}}}"
            )?,
            _ => writeln!(
                out,
                "{{\"s\":{seq},\"u\":{users},\"e\":{{\"type\":\"command-result\",\"seq\":{seq},\"timestamp\":{ts},\"requestId\":{rid}}}}}"
            )?,
        }
    }
    out.flush()?;
    Ok(users)
}

/// A deterministic pseudo-random generator (xorshift64*) for fixture text: the same seed
/// writes the same corpus on every run, with no dependency.
#[derive(Debug, Clone)]
pub struct FixtureRng(u64);

impl FixtureRng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> FixtureRng {
        FixtureRng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `0.0..1.0`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A vocabulary of pronounceable pseudo-words with a Zipf-like frequency (rank `r` is drawn
/// with probability about 1/r), every 40th word with an accent: text that searches behave on
/// as on real prose (a few very common words, a long tail of rare ones), unlike the fixed
/// echo text of [`write_display_log`].
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Words by rank (0 is the most frequent).
    pub words: Vec<String>,
}

impl Corpus {
    /// `size` distinct words.
    pub fn new(size: usize) -> Corpus {
        const CONSONANTS: &[u8] = b"bcdfghjklmnprstvz";
        const VOWELS: &[char] = &['a', 'e', 'i', 'o', 'u'];
        const ACCENTED: &[char] = &['á', 'é', 'í', 'ö', 'ü'];
        let mut words = Vec::with_capacity(size);
        for i in 0..size {
            // 2 to 4 syllables, spelled from the rank's digits in base 85 (17 × 5), so
            // every rank gives a different word.
            let syllables = 2 + i % 3;
            let mut n = i / 3;
            let mut w = String::new();
            for s in 0..syllables {
                let digit = n % 85;
                n /= 85;
                w.push(CONSONANTS[digit / 5] as char);
                let v = digit % 5;
                w.push(if s == 0 && i % 40 == 7 {
                    ACCENTED[v]
                } else {
                    VOWELS[v]
                });
            }
            // Ranks past 85^k would repeat the spelling: the leftover digits tell them apart.
            if n > 0 {
                w.push_str(&format!("{n}"));
            }
            words.push(w);
        }
        Corpus { words }
    }

    /// A word rank drawn log-uniformly (Zipf with exponent 1).
    pub fn rank(&self, rng: &mut FixtureRng) -> usize {
        let n = self.words.len() as f64;
        ((n.powf(rng.unit()) as usize).max(1) - 1).min(self.words.len() - 1)
    }

    /// `count` words drawn by frequency, joined by spaces.
    pub fn sentence(&self, rng: &mut FixtureRng, count: usize) -> String {
        let mut out = String::new();
        for i in 0..count {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&self.words[self.rank(rng)]);
        }
        out
    }
}

/// What [`write_text_log`] wrote.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextLog {
    /// `user-request` entries (the conversation's `messageCount`).
    pub requests: u64,
    /// Search documents the server's index makes of it: each request, and each request's
    /// output once its `command-result` is in the log.
    pub documents: u64,
}

/// Writes `conversations/<id>/displayLog.jsonl` with `entries` entries of turns whose request
/// (6 to 14 words) and agent output (15 to 45 words) are drawn from `corpus`.
pub fn write_text_log(
    instance: &Path,
    id: &str,
    entries: u64,
    corpus: &Corpus,
    rng: &mut FixtureRng,
) -> io::Result<TextLog> {
    let dir = instance.join("conversations").join(id);
    fs::create_dir_all(&dir)?;
    let mut out = BufWriter::with_capacity(1 << 16, File::create(dir.join("displayLog.jsonl"))?);
    let mut wrote = TextLog::default();
    let base_ms: u64 = 1_793_000_000_000;
    for seq in 0..entries {
        let turn = seq / 3;
        let ts = base_ms + seq;
        let rid = format!(
            "{{\"clientRequestId\":\"st{turn}\",\"connectionId\":\"0\",\"requestId\":\"00000000-0000-4000-8000-{turn:012}\"}}"
        );
        let users = wrote.requests + u64::from(seq % 3 == 0);
        let entry = match seq % 3 {
            0 => {
                wrote.requests += 1;
                wrote.documents += 1;
                let words = 6 + rng.below(9);
                let text = corpus.sentence(rng, words);
                format!(
                    "{{\"type\":\"user-request\",\"seq\":{seq},\"timestamp\":{ts},\"command\":{},\"requestId\":{rid}}}",
                    serde_json::to_string(&text).expect("string")
                )
            }
            1 => {
                let words = 15 + rng.below(31);
                let text = corpus.sentence(rng, words);
                format!(
                    "{{\"type\":\"append-display\",\"seq\":{seq},\"timestamp\":{ts},\"message\":{{\"message\":{{\"content\":{},\"type\":\"markdown\"}},\"requestId\":{rid},\"source\":\"chat\"}},\"mode\":\"block\"}}",
                    serde_json::to_string(&text).expect("string")
                )
            }
            _ => {
                wrote.documents += 1;
                format!(
                    "{{\"type\":\"command-result\",\"seq\":{seq},\"timestamp\":{ts},\"requestId\":{rid}}}"
                )
            }
        };
        writeln!(out, "{{\"s\":{seq},\"u\":{users},\"e\":{entry}}}")?;
    }
    out.flush()?;
    Ok(wrote)
}
