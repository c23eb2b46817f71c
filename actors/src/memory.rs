//! Giving freed heap memory back to the operating system. glibc keeps what a program frees in
//! its arenas, so after a large transient allocation (the startup parse of a big registry, a
//! 100,000-entry list answer) the process would otherwise stay at its peak RSS for good.
//! Called by the registry after loading and by the transport after large answers; the
//! registry also pins glibc's mmap threshold before its startup parse.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where glibc starts serving an allocation with its own `mmap`: its default, 128 KiB.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Pins glibc's mmap threshold (and with it the trim threshold) at their defaults, before the
/// registry's startup parse. Left dynamic, freeing the parse's large buffers (the file's
/// bytes, the parsed entries: 1–2 MB each at 10,000 conversations) raises the mmap threshold
/// to their size and the trim threshold to twice that; later buffers of that size (a long
/// `listConversations` answer, a log scan) then come from the threads' arenas, whose free
/// top `malloc_trim` never returns. Measured at 10,000 conversations: 4.2 MB of freed but
/// resident arena memory in an idle server, RSS 19.6 → 15.4 MB with the threshold pinned.
/// Process-wide and idempotent (the registry opens once per server).
pub fn pin_allocator_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters; it has no memory preconditions.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// Set while a delayed trim is pending (debounces bursts of large answers).
static TRIM_PENDING: AtomicBool = AtomicBool::new(false);

/// Returns free heap memory to the OS now (glibc's `malloc_trim`; a no-op elsewhere).
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Trims shortly from now, on a short-lived thread, once the large buffers just handed to
/// the socket writer have been freed; repeated calls within that window share one trim.
pub fn trim_soon() {
    if TRIM_PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("memory-trim".into())
        .spawn(|| {
            std::thread::sleep(Duration::from_millis(250));
            TRIM_PENDING.store(false, Ordering::Release);
            trim();
        });
    if spawned.is_err() {
        TRIM_PENDING.store(false, Ordering::Release);
    }
}
