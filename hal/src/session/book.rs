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
//! * downstream: `FASTRPC_IOCTL_MUNMAP_FD(fd, va 0, len 0)` on every live channel, once for
//!   each call that carried the lease since it was made or the last recovery (each left one
//!   reference; the driver drops one per call, without a DSP message), and once more, which
//!   the driver must refuse ("no map left"); then the fd is closed: the number is clean. If
//!   that last call is not refused (a reference nobody counted), or the lease was carried more
//!   often than [`Limits::munmap_fd_drain`] (then no call is made at all), the number is kept
//!   until the channel closes, like upstream's below;
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
//! * a lease handed to a call abandoned at its deadline is quarantined: refused to its owner,
//!   kept whole (memory and number) if dropped, until the channel of that call is closed, which
//!   is when the kernel has released the DSP process that ran it.
//!
//! The launch path only sets one bit per handle ("this number went to a channel") and adds one
//! to its count, so a launch stays one ioctl; the work happens when a lease is dropped or a channel closes. What the session
//! does with this book (keeping, releasing, making room) is in `keeping`.
//!
//! [`Limits::kept_numbers`]: hexrpc_bsp::Limits::kept_numbers
//! [`Limits::munmap_fd_drain`]: hexrpc_bsp::Limits::munmap_fd_drain

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hexrpc_drivers::{Fd, Syscalls};

use super::remotectl::MAX_LIBRARIES;
use crate::buffer::RawLease;
use crate::sync;

/// Fd numbers tracked exactly (one bit each); a larger number is assumed to have been passed.
pub(super) const PASSED_WORDS: usize = 64;
/// Fd numbers whose handle references are counted exactly (one counter each, 16 KiB): the
/// numbers of the `passed` bitmap. A larger number's drain runs until the driver refuses.
pub(super) const COUNTED_FDS: usize = PASSED_WORDS * 64;
/// Fd numbers tracked exactly per library with the map cache (below 256: a dropped lease's
/// release goes only to the libraries it went to); a larger number's release goes to every
/// library with the cache.
pub(super) const SLOT_FD_WORDS: usize = 4;
/// Retired numbers kept for channels that are still open (4 bytes each).
pub(super) const KEPT_NUMBERS: usize = 1024;
/// Fds of abandoned calls.
pub(super) const QUARANTINE: usize = 128;
/// Whole leases kept for channels that are still open: a shell per channel (cells and final
/// closes still running), every quarantined lease, and leases whose number could not be
/// retired.
pub(super) const KEPT_LEASES: usize = QUARANTINE + 64;
/// Channel generations with abandoned calls' contexts counted at once (the open cells and the
/// final closes still running; past it a generation's count joins the newest's).
pub(super) const PARKED_GENERATIONS: usize = 16;
/// Most MUNMAP_FD calls for one fd on one channel (a driver that never says "no map" must not
/// hang a drop).
pub(super) const MUNMAP_FD_LIMIT: u32 = 1 << 20;

/// What the book knew of a dropped lease's number ([`Book::take_passed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Passed {
    /// It never went to a channel: nothing of it is in the driver.
    Never,
    /// It went to a channel, carried by this many admitted calls since the lease was made or
    /// the last recovery.
    Counted(u32),
    /// It went, or may have gone, to a channel; a number beyond the counters.
    Uncounted,
}

/// Something kept until the channels that may map it are closed, with the bytes of the
/// session's IOVA budget it holds until then (0 for what was never charged: a shell).
pub(crate) enum Kept<S: Syscalls> {
    /// A retired number (refers to `/dev/null`), closed then.
    Number(hexrpc_drivers::OwnedFd, u64),
    /// A whole lease (a channel's shell buffer, a quarantined lease, or one whose number could
    /// not be retired), released then.
    Lease(RawLease<S>, u64),
}

pub(super) struct Inner<S: Syscalls> {
    /// (newest channel generation that may map it, the retired number, its IOVA charge).
    pub(super) numbers: heapless::Vec<(u32, hexrpc_drivers::OwnedFd, u64), KEPT_NUMBERS>,
    /// (newest channel generation that may map it, the lease, its IOVA charge).
    pub(super) leases: heapless::Vec<(u32, RawLease<S>, u64), KEPT_LEASES>,
    /// (generation of the abandoned call, fd of one of its handles).
    pub(super) quarantine: heapless::Vec<(u32, Fd), QUARANTINE>,
    /// (channel generation, call contexts its abandoned calls hold until it is released).
    pub(super) parked: heapless::Vec<(u32, u32), PARKED_GENERATIONS>,
}

/// The session's lease bookkeeping (see the module docs).
pub(crate) struct Book<S: Syscalls> {
    pub(super) inner: sync::Mutex<Inner<S>>,
    /// `quarantine.len()`, read without the lock on the hot paths.
    pub(super) quarantined: AtomicUsize,
    /// Things kept for good because no room could be made (a final close that never returned).
    pub(super) leaked: AtomicUsize,
    /// The driver's call contexts the session's library calls hold: calls in flight, and
    /// abandoned calls whose channel is not released yet (R22).
    pub(super) contexts: AtomicU32,
    /// Of `contexts`, those of abandoned calls (`Inner::parked` summed).
    pub(super) parked: AtomicU32,
    /// Distinct threads that made a library call on the current channel (R24).
    pub(super) callers: AtomicU32,
    /// Bytes of the session's leases that the driver may have mapped into the session's IOVA
    /// space, page-rounded: every live lease, and what is kept for a channel (R23).
    pub(super) lease_iova: AtomicU64,
    /// Bit `n`: fd number `n` was handed to a channel as a handle since its lease was made.
    pub(super) passed: [AtomicU64; PASSED_WORDS],
    /// `carried[n]`: calls admitted with fd number `n` as a handle since its lease was made
    /// or since the last recovery (saturating at `u32::MAX`). Downstream each one leaves a
    /// handle reference in the driver (R1, R21), so this is how many `MUNMAP_FD`s the lease's
    /// drop owes the current channel: an upper bound (a call refused before `get_args`, or an
    /// fd the DSP lists back, took none), exact on this stack, whose DSP lists none.
    pub(super) carried: [AtomicU32; COUNTED_FDS],
    /// Bit `n`: fd number `n` went to a library with the map cache since its lease was made (or
    /// since the last recovery): the DSP may hold a mapping of it, which the lease's drop
    /// releases first.
    pub(super) cached: [AtomicU64; PASSED_WORDS],
    /// `slot_fds[s]` bit `n`: fd number `n` (< 64 * SLOT_FD_WORDS) went to library slot `s`
    /// (a library with the map cache) since its lease was made; 8 KiB in all.
    pub(super) slot_fds: [[AtomicU64; SLOT_FD_WORDS]; MAX_LIBRARIES],
}

impl<S: Syscalls> Book<S> {
    pub(crate) const fn new() -> Self {
        Book {
            inner: sync::Mutex::new(Inner {
                numbers: heapless::Vec::new(),
                leases: heapless::Vec::new(),
                quarantine: heapless::Vec::new(),
                parked: heapless::Vec::new(),
            }),
            quarantined: AtomicUsize::new(0),
            leaked: AtomicUsize::new(0),
            contexts: AtomicU32::new(0),
            parked: AtomicU32::new(0),
            lease_iova: AtomicU64::new(0),
            callers: AtomicU32::new(0),
            passed: [const { AtomicU64::new(0) }; PASSED_WORDS],
            carried: [const { AtomicU32::new(0) }; COUNTED_FDS],
            cached: [const { AtomicU64::new(0) }; PASSED_WORDS],
            slot_fds: [const { [const { AtomicU64::new(0) }; SLOT_FD_WORDS] }; MAX_LIBRARIES],
        }
    }

    pub(super) fn bit(fd: Fd) -> Option<(usize, u64)> {
        let n = usize::try_from(fd.0).ok()?;
        (n < PASSED_WORDS * 64).then(|| (n / 64, 1u64 << (n % 64)))
    }

    /// `fd` is about to be handed to a channel as a handle: marked, and counted.
    pub(super) fn mark_passed(&self, fd: Fd) {
        if let Some((w, b)) = Self::bit(fd) {
            if self.passed[w].load(Ordering::Relaxed) & b == 0 {
                self.passed[w].fetch_or(b, Ordering::AcqRel);
            }
            // One atomic add; the count sticks at u32::MAX (an undercount would be safe too:
            // the drain's last call must be refused, or the number is kept).
            let n = w * 64 + b.trailing_zeros() as usize;
            if self.carried[n].fetch_add(1, Ordering::Relaxed) == u32::MAX {
                self.carried[n].store(u32::MAX, Ordering::Relaxed);
            }
        }
    }

    /// A recovery replaced the channel: the references counted were the old channel's, and go
    /// with it (a cell being closed is never drained).
    pub(super) fn forget_carried(&self) {
        for c in &self.carried {
            c.store(0, Ordering::Relaxed);
        }
        // So were the threads counted on it.
        self.callers.store(0, Ordering::Release);
    }

    /// Clears and returns what the book knew of `fd`: whether it went to a channel since its
    /// lease was made, and how many admitted calls carried it.
    pub(super) fn take_passed(&self, fd: Fd) -> Passed {
        match Self::bit(fd) {
            Some((w, b)) => {
                let count = self.carried[w * 64 + b.trailing_zeros() as usize].swap(0, Ordering::AcqRel);
                if self.passed[w].fetch_and(!b, Ordering::AcqRel) & b != 0 {
                    Passed::Counted(count)
                } else {
                    Passed::Never
                }
            }
            None if fd.0 >= 0 => Passed::Uncounted,
            None => Passed::Never,
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
    pub(super) fn take_cached(&self, fd: Fd) -> bool {
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
        for (_, t, _) in core::mem::take(&mut inner.numbers) {
            let _ = t.into_raw();
        }
        for (_, l, _) in core::mem::take(&mut inner.leases) {
            core::mem::forget(l);
        }
    }

    pub(super) fn quarantined_in(&self, fd: Fd) -> Option<u32> {
        if self.quarantined.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.inner.lock().quarantine.iter().find(|(_, f)| *f == fd).map(|(g, _)| *g)
    }
}
