//! What a session does with its [`Book`](super::book::Book): admitting and quarantining the
//! handles of a call, keeping what a channel may still map until that channel is released,
//! returning a dropped lease, and making room when a table is full (the policy is in `book`'s
//! module docs).

use core::sync::atomic::Ordering;

use hexrpc_bsp::{KernelAbi, MapLookup};
use hexrpc_drivers::{adsprpc, Fd, Syscalls};

use super::book::{Kept, Passed, KEPT_LEASES, KEPT_NUMBERS, MUNMAP_FD_LIMIT};
use super::Session;
use crate::buffer::iova_len;
use crate::buffer::RawLease;
use crate::call::Call;
use crate::error::{Budget, Cause, HalError, Stage};

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

    /// Takes one of the session's call contexts for a library call about to be sent
    /// ([`Limits::calls_in_flight`](hexrpc_bsp::Limits::calls_in_flight), R22); refused with
    /// [`Budget::CallContexts`] when they are all held. Given back when the guard drops,
    /// unless [`park`](CallContext::park) keeps it for an abandoned call.
    pub(super) fn take_call_context(&self) -> Result<CallContext<'_, S>, HalError> {
        let limit = self.board.limits.calls_in_flight;
        let held = self.book.contexts.fetch_add(1, Ordering::AcqRel);
        if held >= u32::from(limit) {
            self.book.contexts.fetch_sub(1, Ordering::AcqRel);
            // An abandoned call's context comes back when its channel is released.
            self.settle();
            let parked = u16::try_from(self.book.parked.load(Ordering::Acquire)).unwrap_or(u16::MAX);
            return Err(HalError::new(Stage::Invoke, Cause::Budget(Budget::CallContexts { limit, parked })));
        }
        Ok(CallContext { session: self, live: true })
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
            Kept::Number(t, c) => match inner.numbers.push((generation, t, c)) {
                Ok(()) => Ok(inner.numbers.len()),
                Err((_, t, c)) => Err(Kept::Number(t, c)),
            },
            Kept::Lease(l, c) => match inner.leases.push((generation, l, c)) {
                Ok(()) => Ok(0),
                Err((_, l, c)) => Err(Kept::Lease(l, c)),
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
        match self.try_keep(generation, Kept::Lease(shell, 0)) {
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
            // Its IOVA stays charged: the driver may map it for good.
            Kept::Number(t, _) => {
                let _ = t.into_raw();
            }
            Kept::Lease(l, _) => core::mem::forget(l),
        }
    }

    /// Releases `what` now (nothing can map it any more).
    fn release_kept(&self, what: Kept<S>) {
        match what {
            Kept::Number(n, charge) => {
                let raw = n.raw().0;
                if let Err(e) = self.sys.close(n) {
                    log::warn!("close of retired lease fd {raw} failed: {e}");
                }
                self.uncharge_iova(charge);
            }
            Kept::Lease(l, charge) => {
                let _ = self.book.take_passed(l.share_fd());
                drop(l);
                self.uncharge_iova(charge);
            }
        }
    }

    /// Retires `raw`'s number (`/dev/null` over it) and keeps only the number for `generation`,
    /// releasing the memory and the host mapping now; keeps the whole lease if the number
    /// cannot be retired.
    fn keep_number_of(&self, generation: u32, mut raw: RawLease<S>) {
        let fd = raw.share_fd();
        // The driver's map of the number keeps the buffer, and its IOVA, until the channel closes.
        let charge = raw.iova_charge();
        let retired = raw.share_borrowed().map(|b| self.sys.retire(b));
        match retired {
            Some(Ok(())) => match raw.take_share() {
                Some(number) => {
                    drop(raw);
                    self.keep(generation, Kept::Number(number, charge));
                }
                None => self.free_lease(raw),
            },
            other => {
                if let Some(Err(e)) = other {
                    log::debug!("retiring lease fd {} failed ({e}); keeping the lease whole", fd.0);
                }
                self.keep(generation, Kept::Lease(raw, charge));
            }
        }
    }

    /// Releases a lease that nothing can map any more, and its IOVA charge.
    fn free_lease(&self, raw: RawLease<S>) {
        let charge = raw.iova_charge();
        drop(raw);
        self.uncharge_iova(charge);
    }

    /// Charges a new lease of `len` bytes to the session's IOVA budget
    /// ([`Limits::lease_iova`](hexrpc_bsp::Limits::lease_iova), R23), or refuses it with
    /// [`Budget::Iova`] naming what the session holds.
    pub(crate) fn charge_iova(&self, len: usize) -> Result<(), HalError> {
        let (want, limit) = (iova_len(len), self.board.limits.lease_iova);
        let mut held = self.book.lease_iova.load(Ordering::Acquire);
        loop {
            let next = held.saturating_add(want);
            if next > limit {
                // What channels closed since may have given some back.
                self.settle();
                let now = self.book.lease_iova.load(Ordering::Acquire);
                if now.saturating_add(want) > limit {
                    let kept = self.kept_iova();
                    return Err(HalError::new(Stage::Alloc, Cause::Budget(Budget::Iova { limit, held: now, kept, requested: want })));
                }
                held = now;
                continue;
            }
            match self.book.lease_iova.compare_exchange_weak(held, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(h) => held = h,
            }
        }
    }

    /// Gives back `bytes` of the session's IOVA budget.
    pub(crate) fn uncharge_iova(&self, bytes: u64) {
        if bytes > 0 {
            self.book.lease_iova.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// Of the IOVA charged, the bytes of what is kept for channels that may still map it.
    fn kept_iova(&self) -> u64 {
        let inner = self.book.inner.lock();
        inner.numbers.iter().map(|n| n.2).chain(inner.leases.iter().map(|l| l.2)).fold(0, u64::saturating_add)
    }

    /// Bytes of the session's IOVA budget held now: live leases and what is kept for channels
    /// (R23; tests, diagnostics).
    pub fn lease_iova(&self) -> u64 {
        self.book.lease_iova.load(Ordering::Acquire)
    }

    /// A lease of this session was dropped (see the module docs).
    pub(crate) fn lease_dropped(&self, raw: RawLease<S>) {
        let fd = raw.share_fd();
        if let Some(generation) = self.still_quarantined(fd) {
            // The DSP may still run the abandoned call in this memory: it is kept whole.
            log::warn!("quarantined lease (fd {}) dropped: kept until generation {generation} is released", fd.0);
            let charge = raw.iova_charge();
            self.keep(generation, Kept::Lease(raw, charge));
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
        let passed = self.book.take_passed(fd);
        if passed == Passed::Never {
            return self.free_lease(raw);
        }
        match (self.board.abi, self.board.map_lookup) {
            (KernelAbi::DownstreamMsm, _) => match self.unmap_fd_everywhere(fd, passed) {
                Drain::Done => self.free_lease(raw),
                // A channel may still hold a map of the number: closing it would let the next
                // lease with that number be read through this lease's map (R1, R8, R21).
                Drain::OverBound(generation, n) => {
                    log::warn!(
                        "lease fd {} dropped after {n} calls carried it, more than the {} MUNMAP_FDs a drop may make: its number is kept until generation {generation} is closed",
                        fd.0,
                        self.board.limits.munmap_fd_drain
                    );
                    self.keep_number_of(generation, raw);
                }
                Drain::Unfinished(generation) => {
                    log::error!(
                        "lease fd {} dropped with a handle map left in the driver after the references hexrpc's calls took were dropped: its number is kept until generation {generation} is closed",
                        fd.0
                    );
                    self.keep_number_of(generation, raw);
                }
            },
            // `fastrpc_map_lookup` matches the dma-buf too: a reused number never meets the
            // old map, which holds its own reference to the old buffer (MapLookup docs).
            (KernelAbi::Upstream, MapLookup::NumberAndBuffer) => self.free_lease(raw),
            (KernelAbi::Upstream, MapLookup::NumberOnly) => match self.newest_live() {
                // Every channel is closed: no map of the number is left anywhere.
                None => self.free_lease(raw),
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

    /// Downstream: drops the handle maps the driver holds of `fd` on every open channel
    /// (`FASTRPC_IOCTL_MUNMAP_FD`, va 0 and len 0 select the handle map; one reference per call,
    /// no DSP message). A counted number gets one call per reference its calls took
    /// ([`Passed::Counted`]) and one more, which must be refused ("no map left"); a lease
    /// carried more often than [`Limits::munmap_fd_drain`](hexrpc_bsp::Limits::munmap_fd_drain)
    /// gets none (it would be cut short anyway: better no ioctl than a million). An uncounted
    /// number is drained until refused, at most that bound a channel.
    fn unmap_fd_everywhere(&self, fd: Fd, passed: Passed) -> Drain {
        let limit = self.board.limits.munmap_fd_drain.min(MUNMAP_FD_LIMIT);
        let bound = match passed {
            Passed::Counted(n) if n < limit => n + 1,
            Passed::Counted(n) => {
                return match self.leased_generations().max() {
                    None => Drain::Done,
                    Some(generation) => Drain::OverBound(generation, n),
                };
            }
            Passed::Uncounted | Passed::Never => limit,
        };
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
        match (unfinished, passed) {
            (None, _) => Drain::Done,
            (Some(generation), Passed::Counted(_)) => Drain::Unfinished(generation),
            (Some(generation), _) => Drain::OverBound(generation, limit),
        }
    }

    /// The generations of the channels in a cell that can still be leased (open).
    fn leased_generations(&self) -> impl Iterator<Item = u32> + '_ {
        self.cells.iter().zip(&self.cell_gen).filter(|(c, _)| c.lease().is_some()).map(|(_, g)| g.load(Ordering::Acquire))
    }

    /// Releases what was kept for channels that are all closed now: closes retired numbers,
    /// frees kept leases, lifts quarantines. Called after every channel close.
    pub(super) fn settle(&self) {
        let oldest_live = self.oldest_live();
        let mut numbers: heapless::Vec<hexrpc_drivers::OwnedFd, KEPT_NUMBERS> = heapless::Vec::new();
        let mut leases: heapless::Vec<RawLease<S>, KEPT_LEASES> = heapless::Vec::new();
        let mut charges = 0u64;
        {
            let mut inner = self.book.inner.lock();
            let free = |g: u32| oldest_live.is_none_or(|o| g < o);
            let mut i = 0;
            while i < inner.numbers.len() {
                if free(inner.numbers[i].0) {
                    // Same capacity as the table: never full.
                    let (_, n, c) = inner.numbers.swap_remove(i);
                    let _ = numbers.push(n);
                    charges = charges.saturating_add(c);
                } else {
                    i += 1;
                }
            }
            let mut i = 0;
            while i < inner.leases.len() {
                if free(inner.leases[i].0) {
                    let (_, l, c) = inner.leases.swap_remove(i);
                    let _ = leases.push(l);
                    charges = charges.saturating_add(c);
                } else {
                    i += 1;
                }
            }
            inner.quarantine.retain(|(g, _)| !free(*g));
            // The released channels' abandoned calls gave their contexts back.
            let mut released = 0u32;
            inner.parked.retain(|&(g, n)| {
                if free(g) {
                    released += n;
                }
                !free(g)
            });
            if released > 0 {
                self.book.parked.fetch_sub(released, Ordering::AcqRel);
                self.book.contexts.fetch_sub(released, Ordering::AcqRel);
            }
            self.book.quarantined.store(inner.quarantine.len(), Ordering::Release);
        }
        for n in numbers {
            let raw = n.raw().0;
            if let Err(e) = self.sys.close(n) {
                log::warn!("close of retired lease fd {raw} failed: {e}");
            }
        }
        // A kept lease's number was never drained: its marks go with it, not to the next
        // lease that gets the number.
        for l in &leases {
            let _ = self.book.take_passed(l.share_fd());
        }
        drop(leases);
        self.uncharge_iova(charges);
    }

    /// The driver's call contexts the session's library calls hold, and of them those parked
    /// by abandoned calls until their channel is released (R22; tests, diagnostics).
    pub fn call_contexts(&self) -> (u32, u32) {
        (self.book.contexts.load(Ordering::Acquire), self.book.parked.load(Ordering::Acquire))
    }

    /// Leases and numbers kept, and fds quarantined (tests, diagnostics).
    pub fn kept_counts(&self) -> (usize, usize) {
        let inner = self.book.inner.lock();
        (inner.numbers.len() + inner.leases.len(), inner.quarantine.len())
    }
}

/// How a downstream drain of a dropped lease's handle maps ended.
enum Drain {
    /// No open channel holds a map of the number: it may be closed.
    Done,
    /// Not drained (or cut short) at the board's bound: the lease was carried this many times
    /// (the bound itself for an uncounted number). Kept until this generation is closed.
    OverBound(u32, u32),
    /// Every reference hexrpc's calls took was dropped and the driver still had a map: a
    /// reference nobody counted. Kept until this generation is closed.
    Unfinished(u32),
}

/// One of the driver's call contexts, held for a library call ([`Session::take_call_context`]).
pub(super) struct CallContext<'a, S: Syscalls + Clone> {
    session: &'a Session<S>,
    live: bool,
}

impl<S: Syscalls + Clone> CallContext<'_, S> {
    /// The call was abandoned on channel generation `generation`: the driver keeps its context
    /// parked until that channel is released, and so does the count (`settle` gives it back).
    pub(super) fn park(mut self, generation: u32) {
        self.live = false;
        let book = &self.session.book;
        let mut inner = book.inner.lock();
        book.parked.fetch_add(1, Ordering::AcqRel);
        if let Some(e) = inner.parked.iter_mut().find(|(g, _)| *g == generation) {
            e.1 += 1;
        } else if let Err((g, n)) = inner.parked.push((generation, 1)) {
            // Full: counted with the newest generation, released no earlier than this one.
            if let Some(e) = inner.parked.iter_mut().max_by_key(|(g, _)| *g) {
                e.0 = e.0.max(g);
                e.1 += n;
            }
        }
    }
}

impl<S: Syscalls + Clone> Drop for CallContext<'_, S> {
    fn drop(&mut self) {
        if self.live {
            self.session.book.contexts.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
