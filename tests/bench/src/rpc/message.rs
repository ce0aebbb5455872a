//! What every request shares: the lock guard, the cost-model counter, the driver's -1 and the
//! mapping of a DSP answer to an ioctl result, and the kernel's own messages to the DSP
//! (`fastrpc_internal_invoke` with `kernel` 1) with the checks before they are sent.

use std::cell::Cell;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use hexrpc_drivers::Errno;

use crate::account::{CallKind, DspCallKind, Fault, FaultTarget, OopsKind};
use crate::state::{Shared, State};

pub(super) type Guard<'a> = MutexGuard<'a, State>;

thread_local! {
    /// Bytes copied and simulated DSP time of the current thread's ioctl (for the cost model).
    pub(crate) static COPIED: Cell<(u64, Duration)> = const { Cell::new((0, Duration::ZERO)) };
}

pub(super) fn eperm<T>() -> Result<T, Errno> {
    Err(Errno::EPERM)
}

/// A DSP answer turned into an ioctl result: -1..-4095 are errnos, anything else is returned.
pub(crate) fn as_result(rv: i32) -> Result<i32, Errno> {
    if (-4095..=-1).contains(&rv) {
        Err(Errno(-rv))
    } else {
        Ok(rv)
    }
}

/// Sleeps or hangs uninterruptibly for a kernel-originated message, with the lock released.
pub(crate) fn kernel_delay<'a>(sh: &'a Shared, mut st: Guard<'a>, fault: Option<Fault>) -> Guard<'a> {
    match fault {
        Some(Fault::Delay(d)) => {
            let end = Instant::now() + d;
            loop {
                let now = Instant::now();
                if now >= end {
                    return st;
                }
                st = sh.wait_for(st, end - now);
            }
        }
        Some(Fault::Hang) => {
            let (gen, epoch) = (st.hang_generation, st.epoch);
            while st.hang_generation == gen && st.epoch == epoch {
                st = sh.wait(st);
            }
            st
        }
        _ => st,
    }
}

/// Draws and applies a DSP-side fault for a kernel-originated message. Returns the DSP's result
/// if the fault replaces it.
pub(super) fn kernel_message<'a>(sh: &'a Shared, mut st: Guard<'a>, kind: DspCallKind) -> (Guard<'a>, Option<i32>) {
    st.count_dsp(kind);
    let fault = st.fault(FaultTarget::Dsp(kind));
    match fault {
        Some(Fault::Errno(e)) => (st, Some(e.0)),
        Some(Fault::Returned(v)) => (st, Some(v)),
        other => (kernel_delay(sh, st, other), None),
    }
}

/// Whether the file can send to the DSP (`fastrpc_invoke_send`): a session (`fl->sctx`, else
/// -1); an INIT of this file that opened or joined the channel (else -1: the driver would also
/// send on a channel another file opened, which the bench does not model); a current restart
/// counter (else `ECONNRESET`, which the callers turn into the invoke tail's +104 or their own
/// -1); the channel still open (else -1).
fn can_send(st: &State, file: u64) -> Result<(), Errno> {
    let f = st.rpc_files.get(&file).ok_or(Errno::EBADF)?;
    if !f.session || f.channel_epoch.is_none() {
        return eperm();
    }
    if f.session_epoch != Some(st.epoch) {
        return Err(Errno::ECONNRESET);
    }
    if st.channel_open != Some(st.epoch) {
        return eperm();
    }
    Ok(())
}

/// A kernel-originated invoke on the file (`fastrpc_internal_invoke` with `kernel` 1, as
/// `fastrpc_mmap_on_dsp` and `fastrpc_munmap_on_dsp` send it; with `CONFIG_COMPAT=y`, the comma
/// three's, their methods are 4 and 5, which the bench does not log). `Err` carries what that
/// invoke returns: -1 when it cannot send (no session, no channel), +104 when the file's restart
/// counter is stale before or after the message (the invoke's tail; nothing is sent), the DSP's
/// answer otherwise. Before GETINFO the tail reads `channel[-1]`
/// ([`OopsKind::OutOfBoundsRead`]; the bench answers -1).
pub(super) fn kernel_invoke<'a>(
    sh: &'a Shared,
    mut st: Guard<'a>,
    file: u64,
    request: CallKind,
    kind: DspCallKind,
) -> (Guard<'a>, Result<(), i32>) {
    let Some(f) = st.rpc_files.get(&file) else { return (st, Err(-1)) };
    if f.cid.is_none() {
        st.oops(request, OopsKind::OutOfBoundsRead, "fastrpc_internal_invoke before GETINFO: its tail reads channel[-1].ssrcount");
        return (st, Err(-1));
    }
    let stale = |st: &State| st.rpc_files.get(&file).is_none_or(|f| f.session_epoch != Some(st.epoch));
    if stale(&st) {
        return (st, Err(Errno::ECONNRESET.0));
    }
    if can_send(&st, file).is_err() {
        return (st, Err(-1));
    }
    let (st, replaced) = kernel_message(sh, st, kind);
    if stale(&st) {
        return (st, Err(Errno::ECONNRESET.0));
    }
    match replaced {
        Some(v) if v != 0 => (st, Err(v)),
        _ => (st, Ok(())),
    }
}
