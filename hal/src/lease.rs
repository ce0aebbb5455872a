//! Buffers as the session hands them out: leases (an allocation and its mapping, returned to the
//! session when dropped) and views (a range of a lease).
//!
//! The board chooses the allocator ([`Allocator`](hexrpc_bsp::Allocator)): on msm ION 4.9 a
//! lease owns, in acquisition order, the ION handle, the dma-buf share fd and a shared mapping
//! of the whole buffer; on a dma-buf heap it owns the dma-buf fd the heap handed out and the
//! mapping (there is no handle). Dropping a lease releases what it owns in reverse order. Both
//! allocators give the same dma-buf fd + mapping to everything above, so the names here say
//! lease, not ION.
//!
//! Cache maintenance is done around the CPU's accesses through the lease (`write_at`,
//! `read_at`, `fill`), never around launches, so a launch stays one ioctl:
//!
//! * cached dma-heap (`system`): every access is bracketed by `DMA_BUF_IOCTL_SYNC` START/END
//!   with the access's direction (the upstream driver does no per-call maintenance);
//! * cached ION 4.9 on a board whose DSP context banks are not I/O-coherent
//!   ([`Board::dsp_coherent`](hexrpc_bsp::Board::dsp_coherent) false): the ION cache ioctls
//!   clean the written range after a write and invalidate the range before a read. The
//!   downstream driver maintains the caches of in/out *buffer* arguments only, never of handle
//!   arguments (`get_args`, `inv_args`), and every lease reaches the DSP as a handle, so nobody
//!   else would;
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
//! out through the drivers' [`Mapping`](hexrpc_drivers::Mapping), never through Rust references.

#[cfg(feature = "std")]
extern crate std;

use core::marker::PhantomData;

use hexrpc_drivers::{ion, Fd, Syscalls};

use crate::buffer::RawLease;
pub use crate::buffer::PAGE;
use crate::error::{Cause, HalError, Stage};
use crate::session::Session;
use crate::stages::HeapOpened;

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
        self.raw.as_ref().map_or(0, RawLease::len)
    }

    /// The lease's identity (non-zero, never reused by another lease of this process): what a
    /// launch on a library with the map cache sends with the lease, and what the session
    /// releases on the DSP when the lease is dropped. A lease made before its session existed
    /// ([`HeapOpened::alloc`](crate::HeapOpened::alloc)) has none (0: never cached), since no
    /// session would release it.
    pub fn lease_id(&self) -> u32 {
        match self.owner {
            Owner::Free => 0,
            _ => self.raw.as_ref().map_or(0, RawLease::id),
        }
    }

    /// Always false: leases have at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True if the lease belongs to `session` (made by it, or imported into it): what a call
    /// of that session may name.
    pub fn is_of(&self, session: &Session<S>) -> bool {
        self.owner.session().is_some_and(|s| core::ptr::eq(s, session))
    }

    /// The ION handle (0 on a dma-heap board, which has no handles).
    pub fn handle(&self) -> i32 {
        self.raw.as_ref().map_or(0, RawLease::handle)
    }

    /// The dma-buf fd the DSP maps (owned by the lease).
    pub fn fd(&self) -> Fd {
        self.raw.as_ref().map_or(Fd(-1), RawLease::share_fd)
    }

    /// The address of the lease's mapping in this process, [`len`](Self::len) bytes long, for
    /// bindings that hand the memory to C or Python. The memory is shared with the DSP, which
    /// writes it during a launch (see the module docs); it stays mapped while the lease lives.
    pub fn host_addr(&self) -> usize {
        self.raw.as_ref().map_or(0, |r| r.mapping().addr())
    }

    /// False for a read-only import ([`Access::ReadOnly`](crate::Access::ReadOnly)): mapped
    /// read-only, so nothing may write through [`host_addr`](Self::host_addr) and
    /// [`write_at`](Self::write_at) is refused.
    pub fn writable(&self) -> bool {
        self.raw.as_ref().is_some_and(|r| r.mapping().writable())
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
        self.usable()?.cache(&self.sys, self.ion, op, offset, len)
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

impl<S: Syscalls + Clone> HeapOpened<S> {
    /// Allocates `len` bytes from the board's heap before the rest of the session exists (what a
    /// health check does to prove ION works); the lease borrows this stage.
    pub fn alloc(&self, len: usize) -> Result<Lease<'_, S>, HalError> {
        let raw = RawLease::alloc(&self.sys, self.ion.raw(), self.board, len, Stage::Alloc)?;
        Ok(Lease::new(raw, self.sys.clone(), self.ion.raw(), Owner::Free))
    }
}

impl<S: Syscalls + Clone> Session<S> {
    /// Allocates `len` bytes (rounded up to a page) from the board's allocator (ION heap or
    /// dma-heap), shared and mapped. Refused with [`Budget::Iova`](crate::Budget::Iova) when
    /// the session's leases (those kept for a channel included) would pass the board's
    /// [`Limits::lease_iova`](hexrpc_bsp::Limits::lease_iova).
    pub fn alloc(&self, len: usize) -> Result<Lease<'_, S>, HalError> {
        let raw = self.alloc_raw(len)?;
        Ok(Lease::new(raw, self.sys.clone(), self.ion.raw(), Owner::Session(self)))
    }

    /// A lease's memory, charged to the session's IOVA budget (given back when the lease, or
    /// what is kept of it, is released).
    pub(crate) fn alloc_raw(&self, len: usize) -> Result<RawLease<S>, HalError> {
        self.charge_iova(len)?;
        RawLease::alloc(&self.sys, self.ion.raw(), self.board, len, Stage::Alloc)
            .inspect_err(|_| self.uncharge_iova(crate::buffer::iova_len(len)))
    }
}
