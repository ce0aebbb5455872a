//! The watchdog on its fence path (sequentially consistent fences on both sides of each
//! handshake), which kernels without `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` use (the
//! comma three's 4.9, qemu-user): chosen before the first deadline of this test process, then
//! raced as the unit tests race the default path.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hexrpc_drivers::watchdog::{armed, scoped, scoped_for, use_fences_only, uses_membarrier};

mod race {
    use hexrpc_drivers::watchdog::scoped;
    include!("../src/watchdog_race.rs");
}

/// One test function: the choice is per process and must come before any deadline.
#[test]
fn the_fence_path_fires_late_calls_and_never_after_return() {
    assert_eq!(uses_membarrier(), None, "no deadline before this test");
    assert!(use_fences_only(), "chosen before the watchdog started");

    // A call that returns in time never sees its action; a late one sees it, repeatedly.
    let calls = AtomicU32::new(0);
    let count = || {
        calls.fetch_add(1, Ordering::SeqCst);
    };
    for _ in 0..200 {
        assert_eq!(scoped_for(Duration::from_secs(5), Duration::from_millis(2), &count, || 7), 7);
    }
    assert_eq!(uses_membarrier(), Some(false), "the watchdog started on fences");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let start = Instant::now();
    scoped(start + Duration::from_millis(5), Duration::from_millis(1), &count, || {
        while calls.load(Ordering::SeqCst) < 3 {
            assert!(start.elapsed() < Duration::from_secs(10), "the deadline never passed");
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    assert!(start.elapsed() >= Duration::from_millis(5), "not before the deadline");
    let after = calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(calls.load(Ordering::SeqCst), after, "no call after scoped returned");

    // Many threads whose deadlines pass while their calls return (the unit tests' race).
    let (late, early, fired) = race::race(6, 1000);
    assert_eq!((late, early), (0, 0), "(calls after scoped returned, calls before the deadline)");
    assert!(fired > 0, "no deadline passed: the race was not exercised");
    assert_eq!(armed(), 0);
}
