//! Startup migrations from TypeAgent's legacy layouts: `server-sessions/` becomes
//! `conversations/`, `sessions.json` becomes `conversations.json`. Run once by the
//! [`ConversationRegistry`](crate::registry::ConversationRegistry) before it loads the
//! registry (legacy keys inside the file, `sessionId`, are handled by
//! [`load_registry`](super::registry_load::load_registry)). Never deletes user data.

use std::fs;

use super::durable::{create_dir_durable, fsync_dir};
use super::layout::Layout;
use super::{io_err, StoreError};

/// Startup migrations of reference section 8, steps 1–4. Returns what it did, for the log.
pub fn migrate(layout: &Layout) -> Result<Vec<String>, StoreError> {
    let mut done = Vec::new();
    let legacy = layout.root.join("server-sessions");
    let conversations = layout.conversations_dir();
    if legacy.is_dir() {
        if !conversations.exists() {
            fs::rename(&legacy, &conversations).map_err(io_err(&legacy))?;
            fsync_dir(&layout.root)?;
            done.push(format!(
                "renamed {} to {}",
                legacy.display(),
                conversations.display()
            ));
        } else {
            let mut moved = 0;
            for entry in fs::read_dir(&legacy).map_err(io_err(&legacy))? {
                let entry = entry.map_err(io_err(&legacy))?;
                let target = conversations.join(entry.file_name());
                if !target.exists() {
                    fs::rename(entry.path(), &target).map_err(io_err(&target))?;
                    moved += 1;
                }
            }
            fsync_dir(&conversations)?;
            // Entries already present in conversations/ win; the rest of the legacy directory
            // stays on disk when it is not empty (never delete user data).
            let _ = fs::remove_dir(&legacy);
            done.push(format!(
                "merged {moved} entries of {} into {}",
                legacy.display(),
                conversations.display()
            ));
        }
    }
    create_dir_durable(&conversations)?;
    let old_registry = conversations.join("sessions.json");
    if old_registry.is_file() {
        fs::rename(&old_registry, layout.registry_file()).map_err(io_err(&old_registry))?;
        fsync_dir(&conversations)?;
        done.push(format!(
            "renamed {} to conversations.json",
            old_registry.display()
        ));
    }
    Ok(done)
}
