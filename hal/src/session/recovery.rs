//! Recovery: the single-flight rebuild of the DSP side after a restart, a timeout or a stopped
//! listener, and the teardown of a channel under a listener that may still hold it.

use core::sync::atomic::Ordering;
use core::time::Duration;

use hexrpc_drivers::{FdCell, Syscalls};

use super::remotectl::{remotectl_open, MAX_LIBRARIES};
use super::{ms, pack_channel, ChannelState, Session, FAILED, HEALTHY, NEEDS_RECOVERY};
use crate::error::{Cause, HalError, Stage};
use crate::stages;
use crate::sync;

/// How often recovery repeats its interrupt while the listener has not left the old channel
/// (a signal that lands just before the thread blocks is lost).
const LEAVE_REPEAT: Duration = Duration::from_millis(2);

/// How long recovery lets the listener leave on its own (after the process exit) before it
/// starts interrupting it.
const LEAVE_GRACE: Duration = Duration::from_millis(20);

impl<S: Syscalls + Clone> Session<S> {
    /// Unpublishes the current channel and asks its DSP process to exit, which ends the
    /// listener's `next2` from the DSP side (as the FastRPC user library does), so the listener
    /// leaves on its own and releases what it mapped on this very channel; after a short grace
    /// its blocked call is interrupted too (a hung DSP never answers). After the board's bounded
    /// wait the channel is ended: closed, or retired under a listener that still holds it.
    fn teardown(&self, chan: &mut ChannelState) {
        let Some(i) = chan.current.take() else { return };
        self.published.store(0, Ordering::Release);
        self.notify();
        if let Some(lease) = self.cells[i].lease() {
            self.exit_process(lease.fd());
        }
        let tid = self.listener_tid.load(Ordering::Acquire);
        if tid != 0 {
            // Calls are excluded (we hold `chan` exclusively): a lease still out is the listener's.
            let clock = sync::Clock::start();
            let limit = ms(self.board.recovery.listener_leave_ms);
            while self.cells[i].leases() > 0 && clock.elapsed() < limit {
                if clock.elapsed() >= LEAVE_GRACE {
                    let _ = self.sys.interrupt(tid);
                }
                let g = self.events.lock();
                if self.cells[i].leases() == 0 {
                    break;
                }
                drop(self.event.wait_timeout(g, LEAVE_REPEAT));
            }
        }
        self.end_channel(i, false);
    }

    /// Rebuilds the DSP side after a restart, a timeout or a stopped listener: unpublishes the
    /// old channel, gives the reverse-RPC listener a bounded time to leave it, asks the old
    /// process to exit and closes (or retires) the old channel, then re-runs the stages from
    /// the shell, registers the listener and re-opens every library that was open.
    ///
    /// While the DSP is still down, the rebuild is retried with the board's bounded backoff
    /// ([`RecoveryPolicy`](hexrpc_bsp::RecoveryPolicy): attempts, delays, total budget; without
    /// `std` there is no clock, and attempts follow each other at once). The session is marked
    /// failed only once the budget is spent; the error then carries the last attempt's cause,
    /// and [`health`](Session::health) keeps it. Failed is not final: a later `recover()`
    /// starts again with a fresh budget (a long-running service retries once the DSP is back),
    /// and calls fail with [`Cause::Failed`] until one succeeds.
    ///
    /// Single flight: a caller that arrives while another thread recovers waits for that
    /// recovery (a blocking wait) and returns its outcome; only a caller that arrives after a
    /// recovery ended starts another. Calls in flight on the old channel
    /// finish first. Library re-opens need the reverse-RPC listener to serve the new channel
    /// (`hexrpc-runtime`'s `ServedSession` runs one).
    pub fn recover(&self) -> Result<(), HalError> {
        let mut ctl = self.recovery.lock();
        loop {
            if self.health.load(Ordering::Acquire) == HEALTHY {
                return Ok(());
            }
            if !ctl.running {
                break;
            }
            let round = ctl.round;
            while ctl.running && ctl.round == round {
                ctl = self.recovered.wait_timeout(ctl, Duration::from_millis(100));
            }
            if ctl.round != round {
                return ctl.last;
            }
        }
        ctl.running = true;
        drop(ctl);
        let outcome = self.run_recovery();
        let mut ctl = self.recovery.lock();
        ctl.running = false;
        ctl.round += 1;
        ctl.last = outcome;
        match outcome {
            Ok(()) => {
                ctl.pending = None;
                ctl.failure = None;
            }
            Err(e) => {
                // Under the lock, so that nobody sees `Failed` without its reason.
                ctl.failure = Some(e);
                self.health.store(FAILED, Ordering::Release);
            }
        }
        drop(ctl);
        self.recovered.notify_all();
        self.notify();
        outcome
    }

    /// Ends the channel that pins what the session keeps for it (fd numbers, shells, leases of
    /// abandoned calls), so that its bookkeeping never grows without bound:
    ///
    /// * a healthy session replaces its channel: a planned recovery (single flight with
    ///   [`recover`](Session::recover)) that stays healthy throughout; calls made meanwhile wait
    ///   for the new channel (they hold the channel lock shared, the replacement exclusively),
    ///   libraries are re-opened on it, and DSP-side state of the old process is gone, as after
    ///   any recovery. If the rebuild fails the session needs recovery, for that reason;
    /// * a session that needs recovery (or failed) has its current channel closed now, the first
    ///   step its recovery would take anyway;
    /// * while a recovery runs, it is waited for (it closes the old channel itself).
    pub(super) fn replace_channel(&self) {
        let mut ctl = self.recovery.lock();
        while ctl.running {
            ctl = self.recovered.wait_timeout(ctl, Duration::from_millis(100));
        }
        let healthy = self.health.load(Ordering::Acquire) == HEALTHY;
        ctl.running = true;
        drop(ctl);
        let outcome = if healthy {
            // The rebuild's own retries (an upstream identity is free again only once the old
            // file's release has returned), within the board's budget.
            Some(self.run_recovery().map(|()| self.generation()))
        } else {
            self.teardown(&mut self.chan.write());
            None
        };
        let mut ctl = self.recovery.lock();
        ctl.running = false;
        // Only a rebuild is a recovery round whose outcome a waiting `recover()` may return; after
        // a bare close, a waiter goes on to recover itself.
        if outcome.is_some() {
            ctl.round += 1;
        }
        match outcome {
            Some(Ok(generation)) => {
                self.replacements.fetch_add(1, Ordering::Relaxed);
                log::info!("channel replaced by generation {generation} (a bound of what the driver keeps per channel)");
                ctl.last = Ok(());
            }
            Some(Err(e)) => {
                log::warn!("replacing the channel failed ({e}); the session needs recover()");
                ctl.last = Err(e);
                if self.health.compare_exchange(HEALTHY, NEEDS_RECOVERY, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    ctl.pending = Some(e);
                }
            }
            None => log::info!("channel of a session that needs recovery closed now (the lease bookkeeping's bound)"),
        }
        drop(ctl);
        self.recovered.notify_all();
        self.notify();
    }

    /// Waits (within the board's recovery budget) for final closes still running on their
    /// own threads, so that what their channels pin can be released.
    pub(super) fn wait_for_closes(&self) {
        #[cfg(feature = "std")]
        {
            let pending: heapless::Vec<super::closer::Closing, { super::CLOSING }> =
                self.closing.lock().iter().map(|(_, d)| d.clone()).collect();
            let clock = sync::Clock::start();
            let budget = ms(self.board.recovery.budget_ms);
            for d in &pending {
                super::closer::wait(d, budget.saturating_sub(clock.elapsed()));
            }
        }
    }

    fn run_recovery(&self) -> Result<(), HalError> {
        let policy = self.board.recovery;
        let clock = sync::Clock::start();
        let budget = ms(policy.budget_ms);
        let mut failed = 0u32;
        // Downstream, the attempts in a row (the last ones) whose process create the driver
        // refused with -1 (EPERM): two or more, each after the driver's port-connect wait, and
        // nothing else since, is a channel that cannot be reopened (R16). A subsystem still down
        // (ENOTCONN) before them does not count against it.
        let mut refused_in_a_row = 0u16;
        loop {
            let attempt = {
                let mut chan = self.chan.write();
                self.teardown(&mut chan);
                let r = self.rebuild(&mut chan).and_then(|generation| {
                    if self.recovery.lock().lost == generation {
                        Err(HalError::new(Stage::Recover, Cause::DspRestart))
                    } else {
                        Ok(generation)
                    }
                });
                match r {
                    Ok(generation) => {
                        self.health.store(HEALTHY, Ordering::Release);
                        log::info!("recovered: channel generation {generation} after {} failed attempts", failed);
                        Ok(())
                    }
                    Err(e) => {
                        self.teardown(&mut chan);
                        Err(e)
                    }
                }
            };
            let e = match attempt {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            failed += 1;
            let delay = ms(policy.delay_ms(failed));
            let spent = clock.elapsed();
            if self.board.abi == hexrpc_bsp::KernelAbi::DownstreamMsm
                && e.stage == Stage::ProcessCreate
                && e.cause == Cause::Os(hexrpc_drivers::Errno::EPERM)
            {
                refused_in_a_row = refused_in_a_row.saturating_add(1);
            } else {
                refused_in_a_row = 0;
            }
            // No attempt starts unless the longest a reopen can block in the kernel still fits.
            if let Some(cause) = super::give_up(&policy, failed, refused_in_a_row, spent, delay, budget, e.cause) {
                let e = HalError::new(Stage::Recover, cause);
                log::error!("recovery gave up after {failed} attempts in {} ms: {e}", spent.as_millis());
                return Err(e);
            }
            log::warn!("recovery attempt {failed} failed ({e}); retrying in {} ms", delay.as_millis());
            sync::sleep(delay);
        }
    }

    /// One rebuild: a new channel in a free cell, published to the listener, libraries
    /// re-opened. Returns the new generation.
    fn rebuild(&self, chan: &mut ChannelState) -> Result<u32, HalError> {
        self.reap();
        let shell = stages::stage_shell(&self.sys, self.ion.raw(), self.board)?;
        // The DSP refuses a second process under a live identity, and the old file's release
        // names only its identity: the new process is created under an identity no channel of
        // this process holds, this session's old ones included (retired under the listener, or a
        // final close still running: they hold theirs until the close returns). Downstream that
        // alternates the session bit between generations while an old one is being released;
        // upstream has one identity per process, so the attempt waits: it fails with
        // `IdentityInUse` without opening anything, and recovery retries within its budget.
        let want = crate::identity::reserve(&self.sys, self.board).ok_or(HalError::new(Stage::Recover, Cause::IdentityInUse))?;
        let (rpc, _) = stages::open_channel(&self.sys, self.board, want.identity())?;
        let ch = stages::create_process(&self.sys, self.board, rpc, want, shell)?;
        // The old file's release removed its vote: this channel needs its own, after its INIT.
        self.set_pm_qos(crate::latency::vote(&self.sys, self.board, ch.fd(), self.policy.pm_qos()));
        let identity = ch.identity.index() as u8;
        stages::attach_listener(&self.sys, &ch)?;
        let busy = HalError::new(Stage::Recover, Cause::Os(hexrpc_drivers::Errno::EBUSY));
        let i = self.cells.iter().position(FdCell::is_empty).ok_or(busy)?;
        let (token, shell) = ch.into_parts();
        let token = token.ok_or(busy)?;
        let generation = self.generation.load(Ordering::Acquire) + 1;
        // The cell's generation is set before the cell holds the channel, so the bookkeeping
        // never sees it with an older one.
        self.cell_gen[i].store(generation, Ordering::Release);
        self.cell_ident[i].store(identity, Ordering::Release);
        if let Err(t) = self.cells[i].put(token) {
            let _ = self.sys.close(t);
            crate::identity::give_back(&self.sys, stages::Identity::from_index(identity));
            return Err(busy);
        }
        if let Some(shell) = shell {
            self.keep_shell(generation, shell);
        }
        chan.current = Some(i);
        // The old DSP process's mappings, cached ones included, end with it, and the handle
        // references counted were the old channel's (it is closed or closing: never drained).
        self.book.forget_cached();
        self.book.forget_carried();
        self.generation.store(generation, Ordering::Release);
        // The listener serves the new channel from here on; the libraries need it to load.
        self.published.store(pack_channel(i, generation), Ordering::Release);
        self.notify();
        let lease = self.cells[i].lease().ok_or(busy)?;
        // One slot at a time: only the name being reopened is copied (a copy of every name
        // would put MAX_LIBRARIES names on the stack). The table cannot change meanwhile: opens
        // and closes hold `chan` shared, and recovery holds it exclusively.
        for slot in 0..MAX_LIBRARIES {
            let Some(name) = self.libs.lock()[slot].as_ref().map(|l| l.name.clone()) else { continue };
            let remote = remotectl_open(&self.sys, self.board, lease.raw(), &name)?;
            let setup = self.libs.lock()[slot].as_ref().and_then(|l| l.setup).and_then(|i| self.setup_at(i));
            if let Some(s) = setup {
                // The new DSP process has none of the old one's votes.
                self.send_setup(lease.raw(), remote, &name, &s);
            }
            if let Some(l) = self.libs.lock()[slot].as_mut() {
                l.remote = remote;
            }
        }
        Ok(generation)
    }
}
