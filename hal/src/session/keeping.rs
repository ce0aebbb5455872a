//! What a session does with its [`Book`](super::book::Book): admitting and quarantining the
//! handles of a call, keeping what a channel may still map until that channel is released,
//! returning a dropped lease, and making room when a table is full (the policy is in `book`'s
//! module docs).

use core::sync::atomic::Ordering;

use hexrpc_bsp::{KernelAbi, MapLookup};
use hexrpc_drivers::{adsprpc, Fd, Syscalls};

use super::book::{Kept, KEPT_LEASES, KEPT_NUMBERS, MUNMAP_FD_LIMIT};
use super::Session;
use crate::buffer::RawLease;
use crate::call::Call;
use crate::error::{Cause, HalError, Stage};

impl<S: Syscalls + Clone> Session<S> {
    /// `Err(Quarantined)` while `fd` belongs to a lease of an abandoned call.
    pub(crate) fn check_lease(&self, fd: Fd) -> Result<(), HalError> {
        self.still_quarantined(fd).map_or(Ok(()), |_| Err(HalError::new(Stage::Alloc, Cause::Quarantined)))
    }

    /// The generation `fd` is quarantined for, after releasing what channels closed since
    /// (a final close that ran on its own thread is noticed here).
    fn still_quarantined(&self, fd: Fd) -> Option<u32> {
        self.book.quarantined_in(fd)?;
        self.settle();
        self.book.quarantined_in(fd)
    }

    /// Before a call: refuses quarantined handles and marks every handle's number as handed to
    /// a channel (atomics only: the launch stays one ioctl).
    pub(super) fn admit_handles<const CAP: usize>(&self, call: &Call<'_, CAP>) -> Result<(), HalError> {
        for h in call.handles() {
            if self.still_quarantined(h.fd).is_some() {
                return Err(HalError::new(Stage::Invoke, Cause::Quarantined));
            }
            self.book.mark_passed(h.fd);
        }
        Ok(())
    }

    /// A call on channel generation `generation` was abandoned: its handles are quarantined
    /// until that channel is closed.
    pub(super) fn quarantine_call<const CAP: usize>(&self, generation: u32, call: &Call<'_, CAP>) {
        let mut inner = self.book.inner.lock();
        for h in call.handles() {
            if inner.quarantine.iter().any(|(g, f)| *g == generation && *f == h.fd) {
                continue;
            }
            if inner.quarantine.push((generation, h.fd)).is_err() {
                log::error!("quarantine table full: fd {} of an abandoned call is not refused to its owner", h.fd.0);
            }
        }
        self.book.quarantined.store(inner.quarantine.len(), Ordering::Release);
        log::warn!("{} lease(s) of an abandoned call are quarantined until generation {generation} is released", call.handles().count());
    }

    /// The newest generation among the channels not released yet (open, or with a final close
    /// still running); `None`: every channel is released.
    fn newest_live(&self) -> Option<u32> {
        self.live_generations().max()
    }

    /// The generations of the channels not released yet: in a cell, or with a final close still
    /// running.
    fn live_generations(&self) -> impl Iterator<Item = u32> + '_ {
        let closing = self.closing_generations();
        self.cells.iter().zip(&self.cell_gen).filter(|(c, _)| !c.is_empty()).map(|(_, g)| g.load(Ordering::Acquire)).chain(closing)
    }

    /// Puts `what` in its table, or gives it back when the table is full.
    fn try_keep(&self, generation: u32, what: Kept<S>) -> Result<usize, Kept<S>> {
        let mut inner = self.book.inner.lock();
        match what {
            Kept::Number(t) => match inner.numbers.push((generation, t)) {
                Ok(()) => Ok(inner.numbers.len()),
                Err((_, t)) => Err(Kept::Number(t)),
            },
            Kept::Lease(l) => match inner.leases.push((generation, l)) {
                Ok(()) => Ok(0),
                Err((_, l)) => Err(Kept::Lease(l)),
            },
        }
    }

    /// Whether nothing of generation `generation` can be mapped any more (every channel of it,
    /// and older, is closed).
    fn released(&self, generation: u32) -> bool {
        self.oldest_live().is_none_or(|o| generation < o)
    }

    /// The oldest generation among the channels not released yet; `None`: every channel is
    /// released.
    fn oldest_live(&self) -> Option<u32> {
        self.live_generations().min()
    }

    /// Keeps `what` until every channel of generation `generation` or older is closed.
    ///
    /// Never leaks: when a table is full, or the board's bound on kept numbers
    /// ([`Limits::kept_numbers`](hexrpc_bsp::Limits::kept_numbers)) is reached, the session
    /// ends the channel that pins what is kept ([`make_room`](Session::make_room): a healthy
    /// session replaces it, one that needs recovery closes it now), which releases everything
    /// of its generation, and waits for final closes still running; `what` itself is then
    /// released if nothing can map it any more. Called with no lock of the session held (a
    /// lease's drop); the recovery's own shell goes through [`keep_shell`](Session::keep_shell).
    pub(super) fn keep(&self, generation: u32, what: Kept<S>) {
        let bound = usize::from(self.board.limits.kept_numbers).clamp(1, KEPT_NUMBERS);
        let mut what = what;
        for _ in 0..3 {
            match self.try_keep(generation, what) {
                Ok(numbers) => {
                    if numbers >= bound {
                        log::info!("{numbers} fd numbers kept for channels that may map them (the board's bound): replacing the channel");
                        self.make_room();
                    }
                    return;
                }
                Err(w) => what = w,
            }
            log::warn!("lease bookkeeping full: ending the channel that pins what is kept");
            self.make_room();
            if self.released(generation) {
                return self.release_kept(what);
            }
        }
        self.last_resort(what);
    }

    /// Keeps a new channel's shell lease (called by the recovery, which holds the channel lock:
    /// no channel can be ended here). The table has room for a shell per channel cell and final
    /// close beside every quarantined lease; if it is full anyway, the final closes still
    /// running are waited for.
    pub(super) fn keep_shell(&self, generation: u32, shell: RawLease<S>) {
        match self.try_keep(generation, Kept::Lease(shell)) {
            Ok(_) => {}
            Err(what) => {
                self.wait_for_closes();
                self.settle();
                if let Err(what) = self.try_keep(generation, what) {
                    self.last_resort(what);
                }
            }
        }
    }

    /// What the tables cannot hold even after the channels that pin them were ended (a final
    /// close that never returns): leaking is the only safe side left, and it is logged.
    fn last_resort(&self, what: Kept<S>) {
        log::error!("lease bookkeeping full and no channel release returned: an fd number the driver may map stays open for good");
        self.book.leaked.fetch_add(1, Ordering::Relaxed);
        match what {
            Kept::Number(t) => {
                let _ = t.into_raw();
            }
            Kept::Lease(l) => core::mem::forget(l),
        }
    }

    /// Releases `what` now (nothing can map it any more).
    fn release_kept(&self, what: Kept<S>) {
        match what {
            Kept::Number(n) => {
                let raw = n.raw().0;
                if let Err(e) = self.sys.close(n) {
                    log::warn!("close of retired lease fd {raw} failed: {e}");
                }
            }
            Kept::Lease(l) => drop(l),
        }
    }

    /// Retires `raw`'s number (`/dev/null` over it) and keeps only the number for `generation`,
    /// releasing the memory and the host mapping now; keeps the whole lease if the number
    /// cannot be retired.
    fn keep_number_of(&self, generation: u32, mut raw: RawLease<S>) {
        let fd = raw.share_fd();
        let retired = raw.share_borrowed().map(|b| self.sys.retire(b));
        match retired {
            Some(Ok(())) => match raw.take_share() {
                Some(number) => {
                    drop(raw);
                    self.keep(generation, Kept::Number(number));
                }
                None => drop(raw),
            },
            other => {
                if let Some(Err(e)) = other {
                    log::debug!("retiring lease fd {} failed ({e}); keeping the lease whole", fd.0);
                }
                self.keep(generation, Kept::Lease(raw));
            }
        }
    }

    /// A lease of this session was dropped (see the module docs).
    pub(crate) fn lease_dropped(&self, raw: RawLease<S>) {
        let fd = raw.share_fd();
        if let Some(generation) = self.still_quarantined(fd) {
            // The DSP may still run the abandoned call in this memory: it is kept whole.
            log::warn!("quarantined lease (fd {}) dropped: kept until generation {generation} is released", fd.0);
            self.keep(generation, Kept::Lease(raw));
            return;
        }
        // The DSP's cached mapping goes first, while the number still names this lease. If it
        // could not be released (the session needs recovery, the library refused), the number
        // is kept (retired) until every channel that may have run it is closed, which ends the
        // DSP process that holds the mapping; the memory goes now (the driver's map of it holds
        // its own reference, so the DSP's mapping stays valid until then).
        if self.book.take_cached(fd) && !self.release_cached(&[raw.id()], fd) {
            if let Some(generation) = self.newest_live() {
                log::warn!(
                    "lease fd {} dropped with a DSP mapping that could not be released: its number is kept until generation {generation} is closed",
                    fd.0
                );
                let _ = self.book.take_passed(fd);
                self.keep_number_of(generation, raw);
                return;
            }
        }
        if !self.book.take_passed(fd) {
            return drop(raw);
        }
        match (self.board.abi, self.board.map_lookup) {
            (KernelAbi::DownstreamMsm, _) => match self.unmap_fd_everywhere(fd) {
                None => drop(raw),
                // A channel may still hold a map of the number: closing it would let the next
                // lease with that number be read through this lease's map (R1, R8).
                Some(generation) => {
                    log::warn!(
                        "lease fd {} dropped with handle maps left after {} MUNMAP_FD calls: its number is kept until generation {generation} is closed",
                        fd.0,
                        self.board.limits.munmap_fd_drain
                    );
                    self.keep_number_of(generation, raw);
                }
            },
            // `fastrpc_map_lookup` matches the dma-buf too: a reused number never meets the
            // old map, which holds its own reference to the old buffer (MapLookup docs).
            (KernelAbi::Upstream, MapLookup::NumberAndBuffer) => drop(raw),
            (KernelAbi::Upstream, MapLookup::NumberOnly) => match self.newest_live() {
                // Every channel is closed: no map of the number is left anywhere.
                None => drop(raw),
                Some(generation) => self.keep_number_of(generation, raw),
            },
        }
    }

    /// Makes room in the tables by ending the channel that pins what is kept: a healthy session
    /// replaces its channel ([`replace_channel`](Session::replace_channel)); one that needs
    /// recovery (or failed) has its channel closed now, which its recovery would do first
    /// anyway; a recovery already running is waited for. Then final closes still running are
    /// waited for (within the recovery budget) and what they pinned is released.
    fn make_room(&self) {
        self.replace_channel();
        self.wait_for_closes();
        self.settle();
    }

    /// Downstream: drops every map the driver holds of `fd` on every open channel
    /// (`FASTRPC_IOCTL_MUNMAP_FD`, va 0 and len 0 select the handle map; one reference per
    /// call, so repeated until the driver has none left, at most
    /// [`Limits::munmap_fd_drain`](hexrpc_bsp::Limits::munmap_fd_drain) times a channel).
    /// `Some(generation)`: the drain of that channel (the newest such) did not reach "no map
    /// left", so the number must not be closed while it is open.
    fn unmap_fd_everywhere(&self, fd: Fd) -> Option<u32> {
        let bound = self.board.limits.munmap_fd_drain.min(MUNMAP_FD_LIMIT);
        let mut unfinished = None;
        for (cell, generation) in self.cells.iter().zip(&self.cell_gen) {
            // A cell being closed cannot be leased; its number no longer reaches the driver's
            // file (retired) or is about to be closed, which frees every map.
            let Some(chan) = cell.lease() else { continue };
            let mut dropped = 0u32;
            let mut drained = false;
            while dropped < bound {
                match adsprpc::munmap_fd(&self.sys, chan.raw(), fd, 0, 0) {
                    Ok(()) => dropped += 1,
                    Err(_) => {
                        drained = true;
                        break;
                    }
                }
            }
            if !drained {
                unfinished = unfinished.max(Some(generation.load(Ordering::Acquire)));
            } else if dropped > 0 {
                log::trace!("MUNMAP_FD dropped {dropped} map reference(s) of fd {} on channel fd {}", fd.0, chan.raw().0);
            }
        }
        // A recovery may have asked for a cell back while we held it.
        if self.cells.iter().any(|c| c.is_closing()) {
            self.reap();
        }
        unfinished
    }

    /// Releases what was kept for channels that are all closed now: closes retired numbers,
    /// frees kept leases, lifts quarantines. Called after every channel close.
    pub(super) fn settle(&self) {
        let oldest_live = self.oldest_live();
        let mut numbers: heapless::Vec<hexrpc_drivers::OwnedFd, KEPT_NUMBERS> = heapless::Vec::new();
        let mut leases: heapless::Vec<RawLease<S>, KEPT_LEASES> = heapless::Vec::new();
        {
            let mut inner = self.book.inner.lock();
            let free = |g: u32| oldest_live.is_none_or(|o| g < o);
            let mut i = 0;
            while i < inner.numbers.len() {
                if free(inner.numbers[i].0) {
                    // Same capacity as the table: never full.
                    let _ = numbers.push(inner.numbers.swap_remove(i).1);
                } else {
                    i += 1;
                }
            }
            let mut i = 0;
            while i < inner.leases.len() {
                if free(inner.leases[i].0) {
                    let _ = leases.push(inner.leases.swap_remove(i).1);
                } else {
                    i += 1;
                }
            }
            inner.quarantine.retain(|(g, _)| !free(*g));
            self.book.quarantined.store(inner.quarantine.len(), Ordering::Release);
        }
        for n in numbers {
            let raw = n.raw().0;
            if let Err(e) = self.sys.close(n) {
                log::warn!("close of retired lease fd {raw} failed: {e}");
            }
        }
        drop(leases);
    }

    /// Leases and numbers kept, and fds quarantined (tests, diagnostics).
    pub fn kept_counts(&self) -> (usize, usize) {
        let inner = self.book.inner.lock();
        (inner.numbers.len() + inner.leases.len(), inner.quarantine.len())
    }
}
