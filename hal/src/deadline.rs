//! Deadlines for invokes (std): the downstream driver waits forever, so a watchdog thread
//! interrupts the blocked thread (a signal through the seam) when the deadline passes.

extern crate std;

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::time::Instant;

use hexrpc_drivers::Syscalls;

use crate::error::HalError;

/// How often the watchdog repeats the interrupt while the call has not returned (a signal that
/// lands just before the thread blocks is lost).
const REPEAT: Duration = Duration::from_millis(2);

/// Runs `call` on this thread; if it has not returned after `timeout`, sets the flag `call`
/// receives and interrupts the thread until `call` returns (`call` turns `EINTR` into
/// [`Cause::Timeout`](crate::Cause::Timeout) when the flag is set, and resumes otherwise).
pub(crate) fn run<S: Syscalls + Sync>(
    sys: &S,
    timeout: Duration,
    call: impl FnOnce(&AtomicBool) -> Result<(), HalError>,
) -> Result<(), HalError> {
    let tid = sys.thread_id();
    let deadline = Instant::now() + timeout;
    let done = AtomicBool::new(false);
    let fired = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        let watchdog = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let now = Instant::now();
                if now >= deadline {
                    fired.store(true, Ordering::Release);
                    if let Err(e) = sys.interrupt(tid) {
                        log::error!("cannot interrupt thread {tid} at its deadline: {e}");
                    }
                    std::thread::park_timeout(REPEAT);
                } else {
                    std::thread::park_timeout(deadline - now);
                }
            }
        });
        let r = call(&fired);
        done.store(true, Ordering::Release);
        watchdog.thread().unpark();
        r
    });
    result
}
