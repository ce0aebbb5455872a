//! What a session keeps so that no fd number the driver may still map is reused.
//!
//! Both FastRPC drivers key their buffer maps by fd *number* (downstream `fastrpc_mmap_find`,
//! upstream `fastrpc_map_lookup` before the dma-buf identity check was added): a handle argument
//! leaves a map on its channel after the call (released only when the DSP lists the fd back,
//! which the downstream driver skips after a failed call, by `FASTRPC_IOCTL_MUNMAP_FD`
//! downstream, or when the channel closes), and the upstream driver keeps its map of the shell
//! buffer from INIT_CREATE until the channel closes. The map pins the old memory, so closing
//! the fd is memory-safe; the hazard is the *number*: the next buffer gets the lowest free one
//! and a call with it would be handed the old buffer's pages.
//!
//! So, when a lease whose fd went to a channel is dropped:
//!
//! * first, if it went to a library with the map cache, the DSP's kept mapping of it is
//!   released (launch ABI method 4 on each such library it went to, `docs/entry-abi.md` §2.3) while the
//!   number still names this lease; if that cannot be done (the session needs recovery), the
//!   number is retired and kept until every channel that existed is closed, and the memory and
//!   host mapping go at once (the driver's map holds its own reference for the DSP);
//! * downstream: `FASTRPC_IOCTL_MUNMAP_FD(fd, va 0, len 0)` on every live channel, repeated
//!   until the driver says no map is left (it drops one reference per call, without a DSP
//!   message), then the fd is closed: the number is clean;
//! * upstream whose lookup matches the dma-buf too ([`MapLookup::NumberAndBuffer`]: Linux
//!   6.1.192's `fastrpc_map_lookup` compares `map->buf` with `dma_buf_get(fd)`): the fd is
//!   closed at once. A reused number names another buffer and never meets the old map, which
//!   holds its own reference to its buffer until the fdlist or the file's release
//!   (`fastrpc_put_args`, `fastrpc_free_map`, `fastrpc_user_free`);
//! * upstream whose lookup matches the number only ([`MapLookup::NumberOnly`]; there is no
//!   kernel-only unmap by fd: `MEM_UNMAP` needs a DSP address and a DSP answer,
//!   `fastrpc_req_mem_unmap_impl`): the number is retired (`/dev/null` over it, which releases
//!   our reference to the dma-buf) and kept open until every channel that existed at the drop
//!   is closed. The board bounds how many are kept ([`Limits::kept_numbers`]); at the bound the
//!   session replaces its channel (a planned recovery), which releases them all. The shell lease
//!   of a channel is kept whole until it closes;
//! * nothing is leaked when a table is full: the channel that pins what is kept is ended
//!   (replaced, or closed if the session needs recovery anyway) and final closes still running
//!   are waited for; only a release that never returns leaves anything for good;
//!
//! [`Limits::kept_numbers`]: hexrpc_bsp::Limits::kept_numbers
//! * a lease handed to a call abandoned at its deadline is quarantined: refused to its owner,
//!   kept whole (memory and number) if dropped, until the channel of that call is closed, which
//!   is when the kernel has released the DSP process that ran it.
//!
//! The launch path only sets one bit per handle ("this number went to a channel"), so a launch
//! stays one ioctl; the work happens when a lease is dropped or a channel closes.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hexrpc_bsp::{KernelAbi, MapLookup};
use hexrpc_drivers::{adsprpc, Fd, Syscalls};

use super::Session;
use crate::call::Call;
use crate::error::{Cause, HalError, Stage};
use crate::lease::RawLease;
use crate::sync;

/// Fd numbers tracked exactly (one bit each); a larger number is assumed to have been passed.
const PASSED_WORDS: usize = 64;
/// Fd numbers tracked exactly per library with the map cache (below 256: a dropped lease's
/// release goes only to the libraries it went to); a larger number's release goes to every
/// library with the cache.
const SLOT_FD_WORDS: usize = 4;
/// Retired numbers kept for channels that are still open (4 bytes each).
const KEPT_NUMBERS: usize = 1024;
/// Fds of abandoned calls.
const QUARANTINE: usize = 128;
/// Whole leases kept for channels that are still open: a shell per channel (cells and final
/// closes still running), every quarantined lease, and leases whose number could not be
/// retired.
const KEPT_LEASES: usize = QUARANTINE + 64;
/// Most MUNMAP_FD calls for one fd on one channel (a driver that never says "no map" must not
/// hang a drop).
const MUNMAP_FD_LIMIT: u32 = 1 << 20;

/// Something kept until the channels that may map it are closed.
pub(crate) enum Kept<S: Syscalls> {
    /// A retired number (refers to `/dev/null`), closed then.
    Number(hexrpc_drivers::OwnedFd),
    /// A whole lease (a channel's shell buffer, a quarantined lease, or one whose number could
    /// not be retired), released then.
    Lease(RawLease<S>),
}

struct Inner<S: Syscalls> {
    /// (newest channel generation that may map it, the retired number).
    numbers: heapless::Vec<(u32, hexrpc_drivers::OwnedFd), KEPT_NUMBERS>,
    /// (newest channel generation that may map it, the lease).
    leases: heapless::Vec<(u32, RawLease<S>), KEPT_LEASES>,
    /// (generation of the abandoned call, fd of one of its handles).
    quarantine: heapless::Vec<(u32, Fd), QUARANTINE>,
}

/// The session's lease bookkeeping (see the module docs).
pub(crate) struct Book<S: Syscalls> {
    inner: sync::Mutex<Inner<S>>,
    /// `quarantine.len()`, read without the lock on the hot paths.
    quarantined: AtomicUsize,
    /// Things kept for good because no room could be made (a final close that never returned).
    leaked: AtomicUsize,
    /// Bit `n`: fd number `n` was handed to a channel as a handle since its lease was made.
    passed: [AtomicU64; PASSED_WORDS],
    /// Bit `n`: fd number `n` went to a library with the map cache since its lease was made (or
    /// since the last recovery): the DSP may hold a mapping of it, which the lease's drop
    /// releases first.
    cached: [AtomicU64; PASSED_WORDS],
    /// `slot_fds[s]` bit `n`: fd number `n` (< 64 * SLOT_FD_WORDS) went to library slot `s`
    /// (a library with the map cache) since its lease was made; 8 KiB in all.
    slot_fds: [[AtomicU64; SLOT_FD_WORDS]; super::MAX_LIBRARIES],
}

impl<S: Syscalls> Book<S> {
    pub(crate) const fn new() -> Self {
        Book {
            inner: sync::Mutex::new(Inner {
                numbers: heapless::Vec::new(),
                leases: heapless::Vec::new(),
                quarantine: heapless::Vec::new(),
            }),
            quarantined: AtomicUsize::new(0),
            leaked: AtomicUsize::new(0),
            passed: [const { AtomicU64::new(0) }; PASSED_WORDS],
            cached: [const { AtomicU64::new(0) }; PASSED_WORDS],
            slot_fds: [const { [const { AtomicU64::new(0) }; SLOT_FD_WORDS] }; super::MAX_LIBRARIES],
        }
    }

    fn bit(fd: Fd) -> Option<(usize, u64)> {
        let n = usize::try_from(fd.0).ok()?;
        (n < PASSED_WORDS * 64).then(|| (n / 64, 1u64 << (n % 64)))
    }

    fn mark_passed(&self, fd: Fd) {
        if let Some((w, b)) = Self::bit(fd) {
            if self.passed[w].load(Ordering::Relaxed) & b == 0 {
                self.passed[w].fetch_or(b, Ordering::AcqRel);
            }
        }
    }

    /// Clears and returns the "passed" mark of `fd` (true for numbers beyond the bitmap).
    fn take_passed(&self, fd: Fd) -> bool {
        match Self::bit(fd) {
            Some((w, b)) => self.passed[w].fetch_and(!b, Ordering::AcqRel) & b != 0,
            None => fd.0 >= 0,
        }
    }

    /// `fd` went to library slot `slot`, a library with the map cache.
    pub(super) fn mark_cached(&self, fd: Fd, slot: usize) {
        if let Some((w, b)) = Self::bit(fd) {
            if self.cached[w].load(Ordering::Relaxed) & b == 0 {
                self.cached[w].fetch_or(b, Ordering::AcqRel);
            }
            if let Some(word) = self.slot_fds.get(slot).and_then(|s| s.get(w)) {
                if word.load(Ordering::Relaxed) & b == 0 {
                    word.fetch_or(b, Ordering::AcqRel);
                }
            }
        }
    }

    /// Whether the library in `slot` may hold a mapping of `fd` (clearing the mark): exactly
    /// for a number below 64 * SLOT_FD_WORDS, always above.
    pub(super) fn take_slot_fd(&self, slot: usize, fd: Fd) -> bool {
        match Self::bit(fd) {
            Some((w, b)) if w < SLOT_FD_WORDS => self.slot_fds.get(slot).is_some_and(|s| s[w].fetch_and(!b, Ordering::AcqRel) & b != 0),
            _ => true,
        }
    }

    /// The library in `slot` closed: none of its marks is true any more.
    pub(super) fn forget_slot(&self, slot: usize) {
        if let Some(s) = self.slot_fds.get(slot) {
            for w in s {
                w.store(0, Ordering::Release);
            }
        }
    }

    /// Clears and returns the "cached" mark of `fd` (true for numbers beyond the bitmap).
    fn take_cached(&self, fd: Fd) -> bool {
        match Self::bit(fd) {
            Some((w, b)) => self.cached[w].fetch_and(!b, Ordering::AcqRel) & b != 0,
            None => fd.0 >= 0,
        }
    }

    /// A recovery replaced the DSP process: whatever it had mapped is gone with it.
    pub(super) fn forget_cached(&self) {
        for w in &self.cached {
            w.store(0, Ordering::Release);
        }
        for s in &self.slot_fds {
            for w in s {
                w.store(0, Ordering::Release);
            }
        }
    }

    /// At session end, what is still kept (its channel's release never returned) is leaked on
    /// purpose: freeing it could hand its memory or number to something else while the driver
    /// may still map it.
    pub(crate) fn forget_all(&self) {
        let mut inner = self.inner.lock();
        let n = inner.numbers.len() + inner.leases.len();
        if n > 0 {
            log::error!("{n} lease(s) or fd number(s) are left for good: their channel's release never returned");
        }
        for (_, t) in core::mem::take(&mut inner.numbers) {
            let _ = t.into_raw();
        }
        for (_, l) in core::mem::take(&mut inner.leases) {
            core::mem::forget(l);
        }
    }

    fn quarantined_in(&self, fd: Fd) -> Option<u32> {
        if self.quarantined.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.inner.lock().quarantine.iter().find(|(_, f)| *f == fd).map(|(g, _)| *g)
    }
}

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
            (KernelAbi::DownstreamMsm, _) => {
                self.unmap_fd_everywhere(fd);
                drop(raw);
            }
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
    /// call, so repeated until the driver has none left).
    fn unmap_fd_everywhere(&self, fd: Fd) {
        for cell in &self.cells {
            // A cell being closed cannot be leased; its number no longer reaches the driver's
            // file (retired) or is about to be closed, which frees every map.
            let Some(chan) = cell.lease() else { continue };
            let mut dropped = 0u32;
            while dropped < MUNMAP_FD_LIMIT {
                match adsprpc::munmap_fd(&self.sys, chan.raw(), fd, 0, 0) {
                    Ok(()) => dropped += 1,
                    Err(_) => break,
                }
            }
            if dropped == MUNMAP_FD_LIMIT {
                log::error!("MUNMAP_FD of fd {} on channel fd {} never ran out of maps", fd.0, chan.raw().0);
            } else if dropped > 0 {
                log::trace!("MUNMAP_FD dropped {dropped} map reference(s) of fd {} on channel fd {}", fd.0, chan.raw().0);
            }
        }
        // A recovery may have asked for a cell back while we held it.
        if self.cells.iter().any(|c| c.is_closing()) {
            self.reap();
        }
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
