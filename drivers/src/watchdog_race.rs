// The watchdog's race, shared by its unit tests (the default barrier, and Miri on the fence
// path) and `tests/watchdog_fences.rs` (the fence path on a kernel that has `membarrier`):
// included (`include!`) where `scoped` is in scope, so both run this one body.

extern crate std;

/// `threads` threads each make `rounds` calls that return right around their deadlines, the
/// watchdog firing some of them as they disarm (a slow action widens the window). Returns the
/// actions that ran after their `scoped` call returned, those that ran before their deadline,
/// and how many ran in all.
pub(super) fn race(threads: u64, rounds: u64) -> (u32, u32, u32) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    let fired = AtomicU32::new(0);
    let (late, early) = (AtomicU32::new(0), AtomicU32::new(0));
    std::thread::scope(|s| {
        for t in 0..threads {
            let (fired, late, early) = (&fired, &late, &early);
            s.spawn(move || {
                // The round whose scoped call is running (a late call sees a later one).
                let current = AtomicU32::new(0);
                for round in 0..rounds {
                    let start = Instant::now();
                    let deadline = start + Duration::from_micros(((round + t) % 7) * 20);
                    current.store(round as u32, Ordering::SeqCst);
                    let action = || {
                        if current.load(Ordering::SeqCst) != round as u32 {
                            late.fetch_add(1, Ordering::SeqCst);
                        }
                        if Instant::now() < deadline {
                            early.fetch_add(1, Ordering::SeqCst);
                        }
                        fired.fetch_add(1, Ordering::SeqCst);
                        let spin = Instant::now();
                        while spin.elapsed() < Duration::from_micros(3) {
                            core::hint::spin_loop();
                        }
                    };
                    let runs = Duration::from_micros((round % 10) * 25);
                    scoped(deadline, Duration::from_micros(5), &action, || {
                        while start.elapsed() < runs {
                            core::hint::spin_loop();
                        }
                    });
                    current.store(u32::MAX, Ordering::SeqCst);
                }
                // A late action would run within this (its repeat is 5 us).
                std::thread::sleep(Duration::from_millis(10));
            });
        }
    });
    (late.into_inner(), early.into_inner(), fired.into_inner())
}
