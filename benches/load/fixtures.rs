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
