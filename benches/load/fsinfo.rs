//! Which file system the temporary instance directories are on, said once at the start of a
//! run: the same server measures differently on different disks, and one trait matters here
//! above the rest. ext4 *without a journal* skips every inode freed in the last minutes when
//! it allocates one (`find_inode_bit` → `recently_deleted` in `fs/ext4/ialloc.c`, checked
//! only when `s_journal` is null), so creating a file costs 0.2–0.4 ms after a run deleted
//! thousands, against ~20 µs with a journal (BENCHMARKS.md, 2026-12-05, fifth sitting).

use std::path::{Path, PathBuf};

/// One line describing the file system holding `dir`: its type, device and, for ext4,
/// whether it has a journal. `None` when `/proc` does not say.
pub fn describe(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    // The mount point that is the longest prefix of `dir` holds it.
    let (device, mount_point, fs_type) = mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let device = fields.next()?;
            let mount_point = PathBuf::from(fields.next()?.replace("\\040", " "));
            let fs_type = fields.next()?;
            dir.starts_with(&mount_point)
                .then_some((device, mount_point, fs_type))
        })
        .max_by_key(|(_, mount_point, _)| mount_point.as_os_str().len())?;
    let journal = (fs_type == "ext4").then(|| {
        // jbd2 names each journal `<device name>-<inode>`, e.g. `vda-8`.
        let name = Path::new(device).file_name().map(|n| n.to_string_lossy());
        let journaled = name.is_some_and(|name| {
            std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{name}-"))
                })
            })
        });
        if journaled {
            ", with a journal".to_string()
        } else {
            ", without a journal: a new inode skips those freed in the last minutes, so file \
             creation slows after many deletions"
                .to_string()
        }
    });
    Some(format!(
        "instance directories under {}: {fs_type} on {device} (mounted at {}){}",
        dir.display(),
        mount_point.display(),
        journal.unwrap_or_default()
    ))
}
