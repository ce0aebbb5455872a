//! The plumbing between a session and the reverse-RPC listener thread: leasing the published
//! channel, reporting a lost DSP side, shutdown.

use core::sync::atomic::Ordering;
use core::time::Duration;

use hexrpc_drivers::{BorrowedFd, Fd, FdCell, FdLease, Syscalls};

use super::{ms, Session, FAILED, HEALTHY, NEEDS_RECOVERY};
use crate::error::{Cause, HalError, Stage};
use crate::sync;

/// The channel a reverse-RPC listener serves: a lease on its descriptor (the number stays
/// open, retired at worst, while this lives) and its generation. Dropping it lets the session
/// close the channel if recovery has already replaced it.
pub struct ListenerChannel<'s, S: Syscalls + Clone> {
    session: &'s Session<S>,
    lease: Option<FdLease<'s>>,
    generation: u32,
}

impl<S: Syscalls + Clone> ListenerChannel<'_, S> {
    /// The channel's descriptor, borrowed for the lease (retiring it is allowed).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.lease.as_ref().map(FdLease::fd)
    }

    /// The raw number (for the service's DSP maps, which are made and released on it).
    pub fn raw(&self) -> Fd {
        self.lease.as_ref().map_or(Fd(-1), FdLease::raw)
    }

    /// The generation that created the channel.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// True while the session still publishes this channel (false once recovery started
    /// replacing it, or the session failed): the listener must leave it.
    pub fn is_current(&self) -> bool {
        (self.session.published.load(Ordering::Acquire) >> 32) as u32 == self.generation
            && self.session.health.load(Ordering::Acquire) != FAILED
    }

    /// True once this channel's descriptor was retired: by a call abandoned at its deadline, or
    /// by the session ending the channel under the listener. The number then refers to
    /// `/dev/null` (nothing sent on it reaches any DSP process) and is closed when the lease
    /// goes back.
    pub fn is_retired(&self) -> bool {
        self.session.retired_generation.load(Ordering::Acquire) == self.generation
            || self.lease.as_ref().is_some() && self.session.cells.iter().any(|c| c.is_closing() && c.raw() == Some(self.raw()))
    }

    /// Reports that this channel's DSP side went away (a restart or the process exiting, seen
    /// by the listener): the session then needs recovery. A report about an old generation is
    /// ignored.
    pub fn report_lost(&self) {
        self.session.report_restart(self.generation);
    }
}

impl<S: Syscalls + Clone> Drop for ListenerChannel<'_, S> {
    fn drop(&mut self) {
        drop(self.lease.take());
        self.session.reap();
        self.session.notify();
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for ListenerChannel<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ListenerChannel").field("fd", &self.raw().0).field("generation", &self.generation).finish()
    }
}

/// The plumbing between a session and the reverse-RPC listener thread that
/// `hexrpc-runtime` runs for it (`ServedSession`). Not a stable API: our own crates use it.
pub trait ListenerPlumbing<S: Syscalls + Clone> {
    /// Records the listener thread (recovery interrupts its blocked `next2`).
    fn listener_attach(&self, tid: i32);

    /// The listener thread has ended: the session can no longer load libraries, and if the
    /// loop abandoned a `next2` the channel itself is retired. Marks the session as needing
    /// recovery (cause [`Cause::ListenerStopped`]) if it was healthy.
    fn listener_detach(&self);

    /// Waits (blocking, at most `wait`) until the session publishes a channel whose generation
    /// is not `after`, and leases it. `None` on timeout (nothing is published while recovery runs
    /// or after it failed).
    fn listener_channel(&self, after: Option<u32>, wait: Duration) -> Option<ListenerChannel<'_, S>>;

    /// Wakes a listener waiting in [`listener_channel`](ListenerPlumbing::listener_channel)
    /// (a stop).
    fn wake_listener(&self);

    /// Shutdown, first step: unpublishes the current channel and asks its DSP process to exit,
    /// so the listener leaves `next2` from the DSP side and releases its maps on the live
    /// channel before anything is retired or closed. Calls fail with
    /// [`Cause::NeedsRecovery`] afterwards; dropping the session closes the channel.
    fn begin_shutdown(&self);

    /// The published channel's descriptor number and generation, if any (tests, diagnostics).
    fn listener_fd(&self) -> Option<(Fd, u32)>;
}

impl<S: Syscalls + Clone> ListenerPlumbing<S> for Session<S> {
    fn listener_attach(&self, tid: i32) {
        self.listener_tid.store(tid, Ordering::Release);
    }

    fn listener_detach(&self) {
        self.listener_tid.store(0, Ordering::Release);
        self.mark_needs_recovery(HalError::new(Stage::ListenerAttach, Cause::ListenerStopped));
    }

    fn listener_channel(&self, after: Option<u32>, wait: Duration) -> Option<ListenerChannel<'_, S>> {
        let clock = sync::Clock::start();
        let mut g = self.events.lock();
        loop {
            // Nothing is published while recovery runs, nor after it failed.
            let p = self.published.load(Ordering::Acquire);
            let generation = (p >> 32) as u32;
            if p != 0 && after != Some(generation) {
                let cell = ((p & 0xFFFF_FFFF) as usize).wrapping_sub(1);
                if let Some(lease) = self.cells.get(cell).and_then(FdCell::lease) {
                    // Still the published channel after the lease was taken: the cell holds it.
                    if self.published.load(Ordering::Acquire) == p {
                        drop(g);
                        return Some(ListenerChannel { session: self, lease: Some(lease), generation });
                    }
                    continue;
                }
            }
            let spent = clock.elapsed();
            if spent >= wait {
                return None;
            }
            g = self.event.wait_timeout(g, wait - spent);
        }
    }

    fn wake_listener(&self) {
        self.notify();
    }

    fn begin_shutdown(&self) {
        let chan = self.chan.write();
        // A shutdown, not a fault: no warning.
        if self.health.compare_exchange(HEALTHY, NEEDS_RECOVERY, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.recovery.lock().pending = Some(HalError::new(Stage::Recover, Cause::ListenerStopped));
        }
        let Some(i) = chan.current else { return };
        self.published.store(0, Ordering::Release);
        if let Some(lease) = self.cells[i].lease() {
            self.exit_process(lease.fd());
        }
        self.notify();
        // A blocking wait (bounded) for the listener to give its lease back on its own.
        let clock = sync::Clock::start();
        let limit = ms(self.board.recovery.listener_leave_ms);
        let mut g = self.events.lock();
        while self.cells[i].leases() > 0 && clock.elapsed() < limit {
            g = self.event.wait_timeout(g, limit.saturating_sub(clock.elapsed()));
        }
        drop(g);
        drop(chan);
    }

    fn listener_fd(&self) -> Option<(Fd, u32)> {
        if self.health.load(Ordering::Acquire) == FAILED {
            return None;
        }
        let p = self.published.load(Ordering::Acquire);
        let cell = ((p & 0xFFFF_FFFF) as usize).wrapping_sub(1);
        let fd = self.cells.get(cell)?.raw()?;
        Some((fd, (p >> 32) as u32))
    }
}
