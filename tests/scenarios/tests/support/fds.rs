//! The process's descriptors, for the tests that bound them (`lease_churn.rs`,
//! `imported_frames.rs`): the soft limit lowered once, the open count, and a wait for closes that
//! run on other threads.

use std::time::{Duration, Instant};

/// Lowers the soft descriptor limit to `limit`, once per test binary (before the first bench:
/// the bench puts its backing descriptors above half of it).
pub fn limit_fds(limit: u64) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let lowered = rustix::process::Rlimit { current: Some(limit), maximum: now.maximum };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, lowered).expect("lower RLIMIT_NOFILE");
    });
}

/// The process's open descriptors.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Waits up to 5 s for the process's descriptors to come back to `want` (closes run on other
/// threads); the count at the end.
pub fn fds_back_to(want: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let n = open_fds();
        if n <= want || Instant::now() > end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
