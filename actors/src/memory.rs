//! Giving freed heap memory back to the operating system. glibc keeps what a program frees in
//! its arenas, so after a large transient allocation (the startup parse of a big registry, a
//! 100,000-entry list answer) the process would otherwise stay at its peak RSS for good.
//! Called by the registry after loading and by the transport after large answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
