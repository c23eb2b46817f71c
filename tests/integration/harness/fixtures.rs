//! Instance directories written straight to disk before a server starts, in the server's own
//! formats (as `benches/load/fixtures.rs` does): a conversation of thousands of display
//! entries takes milliseconds this way instead of a minute of turns.

use std::fs;
use std::io::Write;
use std::path::Path;

/// The command text of fixture turn `turn` (shown by `user-request` entries).
pub fn fixture_command(turn: u64) -> String {
    format!("fixture turn {turn}")
}

/// Writes conversation `name` whose display log holds `entries` entries (seqs `0..entries`)
/// into the instance directory `dir` (its registry, with the clean-shutdown marker), and
/// returns its id. Entries come in turns of three: `user-request` with
/// [`fixture_command`]`(seq / 3)`, `append-display` with `echo: <that command>`, and
/// `command-result`.
pub fn write_long_conversation(dir: &Path, name: &str, entries: u64) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let conv = dir.join("conversations").join(&id);
    fs::create_dir_all(&conv).unwrap();
    let mut out = std::io::BufWriter::new(fs::File::create(conv.join("displayLog.jsonl")).unwrap());
    let mut users = 0u64;
    for seq in 0..entries {
        let turn = seq / 3;
        let ts = 1_793_000_000_000 + seq;
        let rid = format!(
            "{{\"clientRequestId\":\"f{turn}\",\"connectionId\":\"0\",\"requestId\":\"00000000-0000-4000-8000-{turn:012}\"}}"
        );
        let command = fixture_command(turn);
        let e = match seq % 3 {
            0 => {
                users += 1;
                format!("{{\"type\":\"user-request\",\"seq\":{seq},\"timestamp\":{ts},\"command\":\"{command}\",\"requestId\":{rid}}}")
            }
            1 => format!("{{\"type\":\"append-display\",\"seq\":{seq},\"timestamp\":{ts},\"message\":{{\"message\":{{\"content\":\"echo: {command}\",\"type\":\"markdown\"}},\"requestId\":{rid},\"source\":\"chat\"}},\"mode\":\"block\"}}"),
            _ => format!("{{\"type\":\"command-result\",\"seq\":{seq},\"timestamp\":{ts},\"requestId\":{rid}}}"),
        };
        writeln!(out, "{{\"s\":{seq},\"u\":{users},\"e\":{e}}}").unwrap();
    }
    out.flush().unwrap();
    let registry = serde_json::json!({"sessions": [{
        "conversationId": id, "name": name, "createdAt": "2026-11-01T00:00:00.000Z",
        "messageCount": users,
    }]});
    let root = dir.join("conversations");
    fs::write(root.join("conversations.json"), registry.to_string()).unwrap();
    fs::write(root.join(".clean-shutdown"), b"clean\n").unwrap();
    id
}
