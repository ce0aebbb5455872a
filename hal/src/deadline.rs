//! Deadlines for invokes (std): the downstream driver waits forever, so a watchdog thread
//! interrupts the blocked thread (a signal through the seam) when the deadline passes.

extern crate std;

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::time::Instant;

use hexrpc_drivers::{Errno, Syscalls};

use crate::error::{Cause, HalError, Stage};

/// How often the watchdog repeats the interrupt while the call has not returned (a signal that
/// lands just before the thread blocks is lost).
const REPEAT: Duration = Duration::from_millis(2);

/// Runs `call` on this thread; if it has not returned after `timeout`, interrupts it until it
/// does. A call that ends with `EINTR` after the deadline fired becomes [`Cause::Timeout`].
pub(crate) fn run<S: Syscalls + Sync>(sys: &S, timeout: Duration, call: impl FnOnce() -> Result<(), HalError>) -> Result<(), HalError> {
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
        let r = call();
        done.store(true, Ordering::Release);
        watchdog.thread().unpark();
        r
    });
    match result {
        Err(e) if fired.load(Ordering::Acquire) && matches!(e.cause, Cause::Os(Errno::EINTR)) => {
            Err(HalError::new(Stage::Invoke, Cause::Timeout))
        }
        r => r,
    }
}
