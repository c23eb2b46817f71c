//! The directory a request works in: TypeAgent's working-directory policy
//! (`agentServer/server/src/workingDirectoryPolicy.ts`), set by `serve
//! --working-directory-root` (repeatable) and `--working-directory-default`.
//!
//! A request may name a directory (`options.workingDirectory`; `agent-cli` sends its own
//! current directory with every typed request). The directory is canonicalized and must exist
//! and be a directory; when roots are configured it must also lie within one of them. If it
//! does not pass (or none was named) the client's last accepted directory is tried, then the
//! default root. Nothing is ever refused: a rejected directory is only logged, and the
//! request's `options.workingDirectory` becomes the resolved one (absent when nothing passes).
//!
//! Who uses it: the queue resolves every `submitCommand` and `interrupt` at submit time
//! (`queue.rs`), so the queue entry every client sees (ack, `requestQueued`, `requestStarted`,
//! snapshots) carries the directory the request will really use, and the agent turn gets it
//! as `TurnInput::working_directory`.
//!
//! Two deliberate differences from TypeAgent: the policy also applies to `interrupt` (TypeAgent
//! passes an interrupt's options through unchecked; here every directory a turn sees passed
//! the policy), and the directory is not guessed from the request's words (TypeAgent's
//! `inferWorkingDirectoryFromRequest` stats every word of the text as a path on the server:
//! the words of a chat message are not a request to change directory).

use std::path::{Path, PathBuf};

/// The policy: where requests may work, and where they work when they say nothing.
#[derive(Debug, Clone, Default)]
pub struct WorkingDirectoryPolicy {
    /// Canonical roots a requested directory must lie within; empty: any directory.
    allowed_roots: Vec<PathBuf>,
    /// Canonical directory used when the request names none that passes (TypeAgent: the
    /// server's current directory); `None` when it does not exist.
    default_root: Option<PathBuf>,
}

/// Where a requested directory ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The directory the request works in (`None`: nothing passed, not even the default).
    pub working_directory: Option<PathBuf>,
    /// A directory was proposed (by the request or the client's last one) and did not pass.
    pub rejected: bool,
}

/// `value` canonicalized (symbolic links and `..` resolved, relative to the server's current
/// directory), if it names an existing directory.
fn canonical_directory(value: &Path) -> Option<PathBuf> {
    let canonical = std::fs::canonicalize(value).ok()?;
    canonical.is_dir().then_some(canonical)
}

impl WorkingDirectoryPolicy {
    /// The policy of `roots` and `default`. Roots that are not existing directories are
    /// dropped (logged); if roots were given and none exists, the settings are an error
    /// (TypeAgent: `TYPEAGENT_CODE_ALLOWED_ROOTS does not contain an existing directory`).
    pub fn new(roots: &[PathBuf], default: &Path) -> Result<WorkingDirectoryPolicy, String> {
        let mut allowed_roots = Vec::new();
        for root in roots {
            match canonical_directory(root) {
                Some(c) => allowed_roots.push(c),
                None => log::warn!(
                    "working-directory-root {} is not an existing directory; ignored",
                    root.display()
                ),
            }
        }
        if !roots.is_empty() && allowed_roots.is_empty() {
            return Err(
                "working-directory-root: none of the roots is an existing directory".into(),
            );
        }
        let default_root = canonical_directory(default);
        match &default_root {
            None => log::warn!(
                "working-directory-default {} is not an existing directory: requests that name \
                 no allowed directory get none",
                default.display()
            ),
            Some(d) if !allowed(d, &allowed_roots) => log::warn!(
                "working-directory-default {} is outside every working-directory-root: requests \
                 that name no allowed directory get none",
                d.display()
            ),
            Some(_) => {}
        }
        Ok(WorkingDirectoryPolicy {
            allowed_roots,
            default_root,
        })
    }

    /// The canonical allowed roots (empty: any directory).
    pub fn allowed_roots(&self) -> &[PathBuf] {
        &self.allowed_roots
    }

    /// The canonical default root, if it exists.
    pub fn default_root(&self) -> Option<&Path> {
        self.default_root.as_deref()
    }

    /// Resolves `proposed` (the request's directory, else the client's last one) as
    /// TypeAgent's `resolveWorkingDirectory` does: the canonical proposed directory if it
    /// passes, else the default root if it passes (both checked again now: a directory may
    /// have gone since), else nothing.
    pub fn resolve(&self, proposed: Option<&str>) -> Resolution {
        let roots: Vec<PathBuf> = self
            .allowed_roots
            .iter()
            .filter_map(|r| canonical_directory(r))
            .collect();
        let passes = |c: &PathBuf| self.allowed_roots.is_empty() || allowed(c, &roots);
        if let Some(dir) = proposed
            .filter(|p| !p.is_empty())
            .and_then(|p| canonical_directory(Path::new(p)))
            .filter(passes)
        {
            return Resolution {
                working_directory: Some(dir),
                rejected: false,
            };
        }
        let default = self
            .default_root
            .as_deref()
            .and_then(canonical_directory)
            .filter(passes);
        Resolution {
            working_directory: default,
            rejected: proposed.is_some(),
        }
    }
}

/// Whether the canonical `dir` lies within one of the canonical `roots` (or is one).
fn allowed(dir: &Path, roots: &[PathBuf]) -> bool {
    roots.is_empty() || roots.iter().any(|r| dir.starts_with(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_directories_pass_or_fall_back_to_the_default() {
        let base = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(base.path()).unwrap();
        let inside = base.join("root/project");
        let outside = base.join("elsewhere");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let file = inside.join("file.txt");
        std::fs::write(&file, "x").unwrap();
        let root = base.join("root");
        let s = |p: &Path| p.to_str().unwrap().to_string();

        // No roots: any existing directory, canonicalized.
        let open = WorkingDirectoryPolicy::new(&[], &outside).unwrap();
        let dotted = format!("{}/../project", s(&inside));
        assert_eq!(
            open.resolve(Some(&dotted)),
            Resolution {
                working_directory: Some(inside.clone()),
                rejected: false
            }
        );
        // A file, a missing path, an empty string: the default, noted as rejected.
        for bad in [s(&file), s(&base.join("missing")), String::new()] {
            assert_eq!(
                open.resolve(Some(&bad)),
                Resolution {
                    working_directory: Some(outside.clone()),
                    rejected: true
                },
                "{bad}"
            );
        }
        assert_eq!(
            open.resolve(None),
            Resolution {
                working_directory: Some(outside.clone()),
                rejected: false
            }
        );

        // With a root: inside passes, outside falls back to the default (inside the root).
        let fenced = WorkingDirectoryPolicy::new(std::slice::from_ref(&root), &root).unwrap();
        assert_eq!(
            fenced.resolve(Some(&s(&inside))).working_directory,
            Some(inside.clone())
        );
        assert_eq!(
            fenced.resolve(Some(&s(&outside))),
            Resolution {
                working_directory: Some(root.clone()),
                rejected: true
            }
        );
        // A symbolic link out of the root is judged by where it leads.
        let link = inside.join("out");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert_eq!(
            fenced.resolve(Some(&s(&link))).working_directory,
            Some(root.clone())
        );
        // A default outside the roots is no default.
        let strict = WorkingDirectoryPolicy::new(std::slice::from_ref(&root), &outside).unwrap();
        assert_eq!(strict.resolve(None).working_directory, None);
        // Roots of which none exists are an error; a missing one among others is dropped.
        assert!(WorkingDirectoryPolicy::new(&[base.join("missing")], &outside).is_err());
        let some =
            WorkingDirectoryPolicy::new(&[base.join("missing"), root.clone()], &root).unwrap();
        assert_eq!(some.allowed_roots(), std::slice::from_ref(&root));
    }
}
