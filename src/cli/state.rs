//! The CLI's state file, `cli-state.json` in `$ROUNDTABLE_HOME` or `~/.roundtable`: the
//! conversation of the last successful join, for `connect --resume`. Written by `connect`.

use std::path::PathBuf;

use serde_json::{json, Value};

/// The directory holding `cli-state.json` (`$ROUNDTABLE_HOME` or `~/.roundtable`).
pub fn home_dir() -> PathBuf {
    std::env::var_os("ROUNDTABLE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::home_dir().map(|h| h.join(".roundtable")))
        .unwrap_or_else(|| PathBuf::from(".roundtable"))
}

/// The conversation id saved by the last successful join.
pub fn load_state() -> Option<String> {
    let text = std::fs::read_to_string(home_dir().join("cli-state.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["conversationId"].as_str().map(str::to_string)
}

/// Saves the joined conversation (durably: temp file + rename).
pub fn save_state(conversation_id: &str) {
    let dir = home_dir();
    let _ = roundtable_actors::storage::durable::private_dir_builder()
        .recursive(true)
        .create(&dir);
    let body = json!({"conversationId": conversation_id}).to_string();
    if let Err(e) = roundtable_actors::storage::durable::write_atomic(
        &dir.join("cli-state.json"),
        body.as_bytes(),
    ) {
        log::warn!("cannot save the CLI state: {e}");
    }
}
