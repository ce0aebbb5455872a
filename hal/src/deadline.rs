//! Deadlines for invokes (std): the downstream driver waits forever, so the process's watchdog
//! thread ([`hexrpc_drivers::watchdog`]) interrupts the blocked thread (a signal through the
//! seam) when the deadline passes. Arming and disarming a deadline is a coarse clock read and a
//! few release stores and loads on a slot of the calling thread's (with `membarrier`; a fence
//! on each side without it): in the common case no lock, no atomic read-modify-write, no
//! thread started per call. The timeout is measured on the coarse monotonic clock: never short
//! while the kernel's ticks come on time, at most three clock ticks (a few ms) long
//! ([`watchdog::scoped_for`]).

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;

use hexrpc_drivers::{watchdog, Syscalls};

use crate::error::HalError;

/// How often the watchdog repeats the interrupt while the call has not returned (a signal that
/// lands just before the thread blocks is lost).
pub const REPEAT: Duration = Duration::from_millis(2);

/// Runs `call` on this thread; if it has not returned after `timeout`, sets the flag `call`
/// receives and interrupts the thread (through `sys`) every [`REPEAT`] until `call` returns.
/// `call` turns `EINTR` into [`Cause::Timeout`](crate::Cause::Timeout) when the flag is set,
/// and resumes otherwise (as [`Library::invoke_with_deadline`](crate::Library::invoke_with_deadline)
/// does; public for callers that send their own requests on a descriptor they own).
pub fn run<S: Syscalls + Sync>(sys: &S, timeout: Duration, call: impl FnOnce(&AtomicBool) -> Result<(), HalError>) -> Result<(), HalError> {
    let tid = sys.thread_id();
    let fired = AtomicBool::new(false);
    let interrupt = || {
        fired.store(true, Ordering::Release);
        if let Err(e) = sys.interrupt(tid) {
            log::error!("cannot interrupt thread {tid} at its deadline: {e}");
        }
    };
    // A deadline beyond the clock's range never passes.
    watchdog::scoped_for(timeout, REPEAT, &interrupt, || call(&fired))
}
