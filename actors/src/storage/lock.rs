//! The instance lock: one server per instance directory. Taken by the server at start-up
//! (`src/server.rs`) before anything else touches the directory, held until it exits.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::durable::{create_dir_durable, private_file_options, warn_if_shared};
use super::{io_err, StoreError};

/// Holds the instance lock for the life of the server: an exclusive advisory lock on
/// `<root>/roundtable.lock`, which also records the holder's PID.
#[derive(Debug)]
pub struct InstanceLock {
    /// The locked file; the lock lasts as long as this handle is open.
    _file: File,
    /// `<root>/roundtable.lock`.
    path: PathBuf,
}

impl InstanceLock {
    /// Takes the lock or fails with [`StoreError::Locked`] naming the holder's PID.
    pub fn acquire(root: &Path) -> Result<InstanceLock, StoreError> {
        warn_if_shared(root);
        create_dir_durable(root)?;
        let path = root.join("roundtable.lock");
        let mut file = private_file_options()
            .read(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(StoreError::Locked {
                    dir: root.to_path_buf(),
                    pid: if pid.is_empty() {
                        "unknown".into()
                    } else {
                        pid.to_string()
                    },
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(StoreError::Io { path, source: e }),
        }
        file.set_len(0).map_err(io_err(&path))?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .and_then(|_| file.sync_all())
            .map_err(io_err(&path))?;
        Ok(InstanceLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
