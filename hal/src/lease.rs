//! Buffers: leases (the allocation and its mapping) and views (a range of a lease).
//!
//! The board chooses the allocator ([`Allocator`]): on msm ION 4.9 a lease owns, in acquisition
//! order, the ION handle, the dma-buf share fd and a shared mapping of the whole buffer; on a
//! dma-buf heap it owns the dma-buf fd the heap handed out and the mapping (there is no handle).
//! Dropping a lease releases what it owns in reverse order. Both allocators give the same
//! dma-buf fd + mapping to everything above, so the names here say lease, not ION.
//!
//! Cache maintenance is done around the CPU's accesses through the lease (`write_at`,
//! `read_at`, `fill`), never around launches, so a launch stays one ioctl:
//!
//! * cached dma-heap (`system`): every access is bracketed by `DMA_BUF_IOCTL_SYNC` START/END
//!   with the access's direction (the upstream driver does no per-call maintenance);
//! * cached ION 4.9 on a board whose DSP context banks are not I/O-coherent
//!   ([`Board::dsp_coherent`] false): the ION cache ioctls clean the written range after a
//!   write and invalidate the range before a read. The downstream driver maintains the caches
//!   of in/out *buffer* arguments only, never of handle arguments (`get_args`, `inv_args`), and
//!   every lease reaches the DSP as a handle, so nobody else would;
//! * cached ION 4.9 on a coherent board (the comma three: every sdm845 CDSP bank is
//!   `dma-coherent`, so the DSP snoops the CPU caches): nothing to do.
//!
//! Memory reached through [`Lease::host_addr`] (bindings) bypasses this maintenance.
//!
//! A view is an (offset, length) range of a lease, checked when it is made, that borrows the
//! lease: the borrow checker keeps a lease alive while any view of it exists. Views never own a
//! mapping: a launch maps the lease's base with the lease's length and points the kernel at
//! base + offset (entry ABI v2).
//!
//! # The fd number is the driver's key
//!
//! Both FastRPC drivers keep a map of every buffer handed to a call as a handle, keyed by the
//! fd *number*, after the call returns (it pins the memory; it goes away when the DSP lists the
//! fd back, by `FASTRPC_IOCTL_MUNMAP_FD` downstream, or when the channel closes). A new buffer
//! that gets the same number (the lowest free one) would be handed the old buffer's pages. So
//! a lease of a session does not simply close its fd when dropped (see `Session`'s lease
//! bookkeeping): downstream it first drops the driver's maps of that fd on every live channel;
//! upstream, which has no such ioctl, its number stays occupied (retired to `/dev/null`) until
//! every channel that may map it is closed. A lease handed to a call abandoned at its deadline
//! is refused ([`Cause::Quarantined`]) and kept, memory and number, until the DSP process that
//! ran the call has been released.
//!
//! The memory of a lease is shared with the DSP, which may write it during a launch; reads copy
//! out through the drivers' [`Mapping`], never through Rust references.

#[cfg(feature = "std")]
extern crate std;

use core::marker::PhantomData;

use hexrpc_bsp::{Allocator, Board};
use hexrpc_drivers::dma_heap::{self, HeapFd};
use hexrpc_drivers::{ion, Fd, Mapping, Prot, Syscalls};

use crate::error::{Cause, HalError, Stage};
use crate::fd::OwnedFd;
use crate::session::Session;

/// The ION page size the kernel rounds allocations to.
pub const PAGE: usize = 4096;

/// An ION handle freed through the seam when dropped.
struct IonHandle<S: Syscalls> {
    sys: S,
    ion: Fd,
    handle: i32,
}

impl<S: Syscalls> Drop for IonHandle<S> {
    fn drop(&mut self) {
        if let Err(e) = ion::free(&self.sys, self.ion, self.handle) {
            log::warn!("ION_IOC_FREE of handle {} failed: {e}", self.handle);
        }
    }
}

/// An allocation without a borrow of its device (the HAL keeps the device alive by field
/// order); the public [`Lease`] adds the borrow.
pub(crate) struct RawLease<S: Syscalls> {
    // Field order is release order: mapping, share fd, handle (ION only).
    map: Mapping<S>,
    share: OwnedFd<S>,
    handle: Option<IonHandle<S>>,
    len: usize,
    /// Bracket CPU accesses with DMA_BUF_IOCTL_SYNC (a cached dma-heap).
    sync: bool,
    /// Clean after CPU writes and invalidate before CPU reads with the ION cache ioctls
    /// (cached ION on a board whose DSP is not I/O-coherent).
    ion_maint: bool,
    /// The lease's identity for the DSP's map cache ([`next_lease_id`]).
    id: u32,
}

/// The next lease id: non-zero, and unique among the leases of this process (so of every
/// session in it) until the 32-bit counter wraps, after 2^32 - 1 allocations; the wrap skips 0.
/// Unlike the fd number, which the next allocation reuses as soon as the lease is gone, an id
/// names one lease only, so a DSP mapping cached under it can never be handed to another lease.
fn next_lease_id() -> u32 {
    static NEXT: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(1);
    loop {
        let id = NEXT.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        if id != 0 {
            return id;
        }
    }
}

impl<S: Syscalls + Clone> RawLease<S> {
    /// ALLOC + SHARE + mmap of `len` bytes (rounded up to a page) from the board's heap.
    pub(crate) fn alloc(sys: &S, ion_fd: Fd, board: &Board, len: usize, stage: Stage) -> Result<Self, HalError> {
        if len == 0 {
            return Err(HalError::new(stage, Cause::Invalid));
        }
        let rounded = len.checked_add(PAGE - 1).map(|l| l & !(PAGE - 1)).ok_or(HalError::new(stage, Cause::TooLarge))?;
        if rounded as u64 > board.limits.max_alloc_len {
            return Err(HalError::new(stage, Cause::TooLarge));
        }
        let (share, handle) = match board.allocator {
            Allocator::Ion49 => {
                let mut data = ion::ion_allocation_data {
                    len: rounded as u64,
                    align: board.alloc_align,
                    heap_id_mask: board.heap_mask(),
                    flags: board.heap_flags,
                    handle: 0,
                    _pad0: 0,
                };
                ion::alloc(sys, ion_fd, &mut data).map_err(|e| HalError::sys(stage, e))?;
                let handle = IonHandle { sys: sys.clone(), ion: ion_fd, handle: data.handle };
                let share = ion::share(sys, ion_fd, data.handle).map_err(|e| HalError::sys(stage, e))?;
                (OwnedFd::new(sys.clone(), share), Some(handle))
            }
            Allocator::DmaHeap => {
                let fd = dma_heap::alloc(sys, HeapFd::from_raw(ion_fd), rounded as u64).map_err(|e| HalError::sys(stage, e))?;
                (OwnedFd::new(sys.clone(), fd), None)
            }
        };
        let map = Mapping::map_shared(sys.clone(), share.raw(), rounded, Prot::ReadWrite).map_err(|e| HalError::os(stage, e))?;
        let sync = board.allocator == Allocator::DmaHeap && board.cached;
        let ion_maint = board.allocator == Allocator::Ion49 && board.cached && !board.dsp_coherent;
        Ok(RawLease { map, share, handle, len: rounded, sync, ion_maint, id: next_lease_id() })
    }

    /// The ION cache ioctl `op` on `[offset, offset + len)` (non-coherent boards).
    fn ion_cache(&self, op: ion::CacheOp, offset: usize, len: usize) -> Result<(), HalError> {
        match &self.handle {
            Some(h) if len > 0 => ion::cache(self.map.sys(), h.ion, op, h.handle, self.share.raw(), &self.map, offset, len)
                .map_err(|e| HalError::sys(Stage::Alloc, e)),
            _ => Ok(()),
        }
    }

    /// Runs a CPU access of the mapping, bracketed by DMA_BUF_IOCTL_SYNC when the buffer is
    /// from a cached dma-heap. A failed END is logged: the access itself already happened.
    fn cpu_access<T>(&self, flags: u64, f: impl FnOnce(&Self) -> Result<T, HalError>) -> Result<T, HalError> {
        if !self.sync {
            return f(self);
        }
        let sys = self.map.sys();
        dma_heap::sync(sys, self.share.raw(), dma_heap::DMA_BUF_SYNC_START | flags).map_err(|e| HalError::sys(Stage::Alloc, e))?;
        let r = f(self);
        if let Err(e) = dma_heap::sync(sys, self.share.raw(), dma_heap::DMA_BUF_SYNC_END | flags) {
            log::warn!("DMA_BUF_IOCTL_SYNC END on fd {} failed: {e}", self.share.raw().0);
        }
        r
    }

    fn cpu_access_mut<T>(&mut self, flags: u64, f: impl FnOnce(&mut Mapping<S>) -> Result<T, HalError>) -> Result<T, HalError> {
        let fd = self.share.raw();
        if !self.sync {
            return f(&mut self.map);
        }
        dma_heap::sync(self.map.sys(), fd, dma_heap::DMA_BUF_SYNC_START | flags).map_err(|e| HalError::sys(Stage::Alloc, e))?;
        let r = f(&mut self.map);
        if let Err(e) = dma_heap::sync(self.map.sys(), fd, dma_heap::DMA_BUF_SYNC_END | flags) {
            log::warn!("DMA_BUF_IOCTL_SYNC END on fd {} failed: {e}", fd.0);
        }
        r
    }

    pub(crate) fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        if self.ion_maint {
            // What the DSP wrote is in memory, not in the CPU's cache lines.
            self.ion_cache(ion::CacheOp::Invalidate, offset, out.len())?;
        }
        self.cpu_access(dma_heap::DMA_BUF_SYNC_READ, |l| {
            l.map.read_at(offset, out).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })
    }

    pub(crate) fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.cpu_access_mut(dma_heap::DMA_BUF_SYNC_WRITE, |m| {
            m.fill(offset, len, byte).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })?;
        self.written(offset, len)
    }

    /// After a CPU write of `[offset, offset + len)`: clean it to memory for a non-coherent DSP.
    fn written(&self, offset: usize, len: usize) -> Result<(), HalError> {
        if self.ion_maint {
            self.ion_cache(ion::CacheOp::Clean, offset, len)?;
        }
        Ok(())
    }

    pub(crate) fn mapping(&self) -> &Mapping<S> {
        &self.map
    }

    pub(crate) fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.cpu_access_mut(dma_heap::DMA_BUF_SYNC_WRITE, |m| {
            m.write_at(offset, data).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })?;
        self.written(offset, data.len())
    }

    /// [`write_at`](Self::write_at) through `&self` (an arena's disjoint sub-allocations).
    pub(crate) fn write_shared(&self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.cpu_access(dma_heap::DMA_BUF_SYNC_WRITE, |l| {
            l.map.write_shared(offset, data).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })?;
        self.written(offset, data.len())
    }

    /// [`fill`](Self::fill) through `&self` (an arena's disjoint sub-allocations).
    pub(crate) fn fill_shared(&self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.cpu_access(dma_heap::DMA_BUF_SYNC_WRITE, |l| {
            l.map.fill_shared(offset, len, byte).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })?;
        self.written(offset, len)
    }

    /// Takes the share fd's ownership token out (the lease's memory then stays mapped until the
    /// rest is dropped, and the number is the caller's to retire and close).
    pub(crate) fn take_share(&mut self) -> Option<hexrpc_drivers::OwnedFd> {
        self.share.take_token()
    }

    /// The share fd, borrowed (what retiring it takes).
    pub(crate) fn share_borrowed(&self) -> Option<hexrpc_drivers::BorrowedFd<'_>> {
        self.share.as_fd()
    }
}

/// Something a [`BufferView`] can read from: the lease behind it.
pub trait LeaseMemory {
    /// The dma-buf share fd the DSP maps.
    fn share_fd(&self) -> Fd;
    /// The lease's total (mapped) length.
    fn lease_len(&self) -> usize;
    /// Copies bytes out of the lease.
    fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError>;
    /// The lease's identity for the DSP's map cache (non-zero, never reused; 0: none, never
    /// cached).
    fn lease_id(&self) -> u32 {
        0
    }
}

/// A buffer of a session: on ION 4.9 the handle, share fd and mapping of the whole buffer; on a
/// dma-heap the dma-buf fd and mapping (see the module docs).
///
/// Borrowing the session (`'s`) keeps the ION device open while the lease lives. A lease of a
/// session is returned to it when dropped, which decides when its fd number may be closed (see
/// the module docs); a lease made before the session exists
/// ([`HeapOpened::alloc`](crate::HeapOpened::alloc)) was never handed to the DSP and is simply
/// released.
pub struct Lease<'s, S: Syscalls + Clone> {
    // `None` only inside `drop`.
    raw: Option<RawLease<S>>,
    sys: S,
    ion: Fd,
    owner: Owner<'s, S>,
    _session: PhantomData<&'s ()>,
}

/// The session a lease goes back to when dropped.
pub(crate) enum Owner<'s, S: Syscalls + Clone> {
    /// Not a session's (made before the session existed).
    Free,
    /// Borrowed from the session.
    Session(&'s Session<S>),
    /// A share of the session ([`SharedLease`](crate::SharedLease)).
    #[cfg(feature = "std")]
    Shared(std::sync::Arc<Session<S>>),
}

impl<S: Syscalls + Clone> Owner<'_, S> {
    fn session(&self) -> Option<&Session<S>> {
        match self {
            Owner::Free => None,
            Owner::Session(s) => Some(s),
            #[cfg(feature = "std")]
            Owner::Shared(s) => Some(&**s),
        }
    }
}

impl<'s, S: Syscalls + Clone> Lease<'s, S> {
    pub(crate) fn new(raw: RawLease<S>, sys: S, ion: Fd, owner: Owner<'s, S>) -> Self {
        Lease { raw: Some(raw), sys, ion, owner, _session: PhantomData }
    }

    fn raw(&self) -> Result<&RawLease<S>, HalError> {
        self.raw.as_ref().ok_or(HalError::new(Stage::Alloc, Cause::Invalid))
    }

    /// Refuses access while the lease is quarantined ([`Cause::Quarantined`]).
    fn usable(&self) -> Result<&RawLease<S>, HalError> {
        let raw = self.raw()?;
        if let Some(s) = self.owner.session() {
            s.check_lease(raw.share_fd())?;
        }
        Ok(raw)
    }

    fn usable_mut(&mut self) -> Result<&mut RawLease<S>, HalError> {
        self.usable()?;
        self.raw.as_mut().ok_or(HalError::new(Stage::Alloc, Cause::Invalid))
    }

    /// Whether the lease may be used now: `Err` with [`Cause::Quarantined`] while a call that
    /// was abandoned at its deadline may still have the DSP touch its memory.
    pub fn check(&self) -> Result<(), HalError> {
        self.usable().map(|_| ())
    }

    /// Total length (the allocation, rounded up to a page).
    pub fn len(&self) -> usize {
        self.raw.as_ref().map_or(0, |r| r.len)
    }

    /// The lease's identity (non-zero, never reused by another lease of this process): what a
    /// launch on a library with the map cache sends with the lease, and what the session
    /// releases on the DSP when the lease is dropped. A lease made before its session existed
    /// ([`HeapOpened::alloc`](crate::HeapOpened::alloc)) has none (0: never cached), since no
    /// session would release it.
    pub fn lease_id(&self) -> u32 {
        match self.owner {
            Owner::Free => 0,
            _ => self.raw.as_ref().map_or(0, |r| r.id),
        }
    }

    /// Always false: leases have at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The ION handle (0 on a dma-heap board, which has no handles).
    pub fn handle(&self) -> i32 {
        self.raw.as_ref().and_then(|r| r.handle.as_ref()).map_or(0, |h| h.handle)
    }

    /// The dma-buf fd the DSP maps (owned by the lease).
    pub fn fd(&self) -> Fd {
        self.raw.as_ref().map_or(Fd(-1), |r| r.share.raw())
    }

    /// The address of the lease's mapping in this process, [`len`](Self::len) bytes long, for
    /// bindings that hand the memory to C or Python. The memory is shared with the DSP, which
    /// writes it during a launch (see the module docs); it stays mapped while the lease lives.
    pub fn host_addr(&self) -> usize {
        self.raw.as_ref().map_or(0, |r| r.map.addr())
    }

    /// Copies `data` into the buffer at `offset` (with the cache maintenance of the module
    /// docs). Refused while the lease is quarantined.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.usable_mut()?.write_at(offset, data)
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer (with the cache maintenance of the
    /// module docs). Refused while the lease is quarantined.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        self.usable()?.read_at(offset, out)
    }

    /// Sets `len` bytes at `offset` to `byte`. Refused while the lease is quarantined.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.usable_mut()?.fill(offset, len, byte)
    }

    /// [`write_at`](Self::write_at) through `&self`, for an arena whose sub-allocations are
    /// disjoint ranges of the lease written by their own owners.
    pub(crate) fn write_shared(&self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.usable()?.write_shared(offset, data)
    }

    /// [`fill`](Self::fill) through `&self` (see [`write_shared`](Self::write_shared)).
    pub(crate) fn fill_shared(&self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.usable()?.fill_shared(offset, len, byte)
    }

    /// Cache maintenance on `[offset, offset + len)`: the msm ION cache ioctls on ION 4.9; on a
    /// dma-heap, `DMA_BUF_IOCTL_SYNC` on the whole buffer (the dma-buf ABI has no ranges):
    /// Clean = END of a CPU write, Invalidate = START of a CPU read, CleanInvalidate = both.
    pub fn cache(&self, op: ion::CacheOp, offset: usize, len: usize) -> Result<(), HalError> {
        let raw = self.usable()?;
        if raw.handle.is_none() {
            match offset.checked_add(len) {
                Some(end) if end <= self.len() => {}
                _ => return Err(HalError::new(Stage::Alloc, Cause::Invalid)),
            }
            let flags: &[u64] = match op {
                ion::CacheOp::Clean => &[dma_heap::DMA_BUF_SYNC_END | dma_heap::DMA_BUF_SYNC_WRITE],
                ion::CacheOp::Invalidate => &[dma_heap::DMA_BUF_SYNC_START | dma_heap::DMA_BUF_SYNC_READ],
                ion::CacheOp::CleanInvalidate => {
                    &[dma_heap::DMA_BUF_SYNC_START | dma_heap::DMA_BUF_SYNC_RW, dma_heap::DMA_BUF_SYNC_END | dma_heap::DMA_BUF_SYNC_RW]
                }
            };
            for f in flags {
                dma_heap::sync(&self.sys, self.fd(), *f).map_err(|e| HalError::sys(Stage::Alloc, e))?;
            }
            return Ok(());
        }
        ion::cache(&self.sys, self.ion, op, self.handle(), self.fd(), &raw.map, offset, len).map_err(|e| HalError::sys(Stage::Alloc, e))
    }

    /// A view of `[offset, offset + len)`; refused if it does not fit the lease (no overflow),
    /// or while the lease is quarantined.
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>, HalError> {
        self.usable()?;
        BufferView::new(self, offset, len)
    }

    /// A view of the whole lease (reading through it, or launching with it, is refused while
    /// the lease is quarantined).
    pub fn whole(&self) -> BufferView<'_> {
        BufferView { lease: self, offset: 0, len: self.len() }
    }
}

impl<S: Syscalls + Clone> Drop for Lease<'_, S> {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            match self.owner.session() {
                Some(session) => session.lease_dropped(raw),
                None => drop(raw),
            }
        }
    }
}

impl<S: Syscalls + Clone> LeaseMemory for Lease<'_, S> {
    fn share_fd(&self) -> Fd {
        self.fd()
    }
    fn lease_len(&self) -> usize {
        self.len()
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        Lease::read_at(self, offset, out)
    }
    fn lease_id(&self) -> u32 {
        Lease::lease_id(self)
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for Lease<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Lease").field("handle", &self.handle()).field("fd", &self.fd().0).field("len", &self.len()).finish()
    }
}

/// A range of a lease: (lease, offset, length) with `offset + length <= lease length`.
///
/// It borrows the lease, so the lease cannot be freed while the view lives. Copy it freely.
#[derive(Clone, Copy)]
pub struct BufferView<'a> {
    lease: &'a dyn LeaseMemory,
    offset: usize,
    len: usize,
}

impl<'a> BufferView<'a> {
    fn new(lease: &'a dyn LeaseMemory, offset: usize, len: usize) -> Result<Self, HalError> {
        match offset.checked_add(len) {
            Some(end) if end <= lease.lease_len() => Ok(BufferView { lease, offset, len }),
            _ => Err(HalError::new(Stage::Alloc, Cause::Invalid)),
        }
    }

    /// A view of `[offset, offset + len)` of this view (offsets relative to this view).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'a>, HalError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(BufferView { lease: self.lease, offset: self.offset + offset, len }),
            _ => Err(HalError::new(Stage::Alloc, Cause::Invalid)),
        }
    }

    /// Offset of the view inside its lease.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Length of the view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length view.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The lease's share fd (what the DSP maps).
    pub fn fd(&self) -> Fd {
        self.lease.share_fd()
    }

    /// The lease's total length (what the DSP maps: the whole lease, never just the view).
    pub fn lease_len(&self) -> usize {
        self.lease.lease_len()
    }

    /// The lease's identity for the DSP's map cache ([`Lease::lease_id`]; 0: never cached).
    pub fn lease_id(&self) -> u32 {
        self.lease.lease_id()
    }

    /// Copies the view's bytes (or the first `out.len()` of them) out.
    pub fn read(&self, out: &mut [u8]) -> Result<(), HalError> {
        if out.len() > self.len {
            return Err(HalError::new(Stage::Alloc, Cause::Invalid));
        }
        self.lease.read_at(self.offset, out)
    }
}

impl core::fmt::Debug for BufferView<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BufferView")
            .field("fd", &self.fd().0)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("lease_len", &self.lease_len())
            .finish()
    }
}

impl<S: Syscalls> RawLease<S> {
    pub(crate) fn share_fd(&self) -> Fd {
        self.share.raw()
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}
