//! Buffers: leases (the allocation and its mapping) and views (a range of a lease).
//!
//! The board chooses the allocator ([`Allocator`]): on msm ION 4.9 a lease owns, in acquisition
//! order, the ION handle, the dma-buf share fd and a shared mapping of the whole buffer; on a
//! dma-buf heap it owns the dma-buf fd the heap handed out and the mapping (there is no handle).
//! Dropping a lease releases what it owns in reverse order. Both allocators give the same
//! dma-buf fd + mapping to everything above, so the names here say lease, not ION.
//!
//! Cache maintenance on a cached dma-heap (`system`): every CPU access through the lease
//! (`write_at`, `read_at`, `fill`) is bracketed by `DMA_BUF_IOCTL_SYNC` START/END with the
//! access's direction, so the DSP sees what the CPU wrote and the CPU sees what the DSP wrote.
//! This puts the syncs around the CPU's accesses, not around launches: a launch stays one ioctl.
//! (On ION 4.9 the HAL does no cache maintenance of its own, as before: the downstream driver
//! maintains non-coherent sessions' buffers on invoke.) A view is an (offset, length)
//! range of a lease, checked when it is made, that borrows the lease: the borrow checker keeps a
//! lease alive while any view of it exists. Views never own a mapping: a launch maps the lease's
//! base with the lease's length and points the kernel at base + offset (entry ABI v2).
//!
//! The memory of a lease is shared with the DSP, which may write it during a launch; reads copy
//! out through the drivers' [`Mapping`], never through Rust references.

use core::marker::PhantomData;

use hexrpc_bsp::{Allocator, Board};
use hexrpc_drivers::dma_heap::{self, HeapFd};
use hexrpc_drivers::{ion, Fd, Mapping, Prot, Syscalls};

use crate::error::{Cause, HalError, Stage};
use crate::fd::OwnedFd;

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
        Ok(RawLease { map, share, handle, len: rounded, sync })
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
        self.cpu_access(dma_heap::DMA_BUF_SYNC_READ, |l| {
            l.map.read_at(offset, out).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })
    }

    pub(crate) fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.cpu_access_mut(dma_heap::DMA_BUF_SYNC_WRITE, |m| {
            m.fill(offset, len, byte).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })
    }

    pub(crate) fn mapping(&self) -> &Mapping<S> {
        &self.map
    }

    pub(crate) fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.cpu_access_mut(dma_heap::DMA_BUF_SYNC_WRITE, |m| {
            m.write_at(offset, data).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
        })
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
}

/// A buffer of a session: on ION 4.9 the handle, share fd and mapping of the whole buffer; on a
/// dma-heap the dma-buf fd and mapping (see the module docs).
///
/// Borrowing the session (`'s`) keeps the ION device open while the lease lives.
pub struct Lease<'s, S: Syscalls> {
    raw: RawLease<S>,
    sys: S,
    ion: Fd,
    _session: PhantomData<&'s ()>,
}

impl<'s, S: Syscalls + Clone> Lease<'s, S> {
    pub(crate) fn new(raw: RawLease<S>, sys: S, ion: Fd) -> Self {
        Lease { raw, sys, ion, _session: PhantomData }
    }

    /// Total length (the allocation, rounded up to a page).
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Always false: leases have at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The ION handle (0 on a dma-heap board, which has no handles).
    pub fn handle(&self) -> i32 {
        self.raw.handle.as_ref().map_or(0, |h| h.handle)
    }

    /// The dma-buf fd the DSP maps (owned by the lease).
    pub fn fd(&self) -> Fd {
        self.raw.share.raw()
    }

    /// The address of the lease's mapping in this process, [`len`](Self::len) bytes long, for
    /// bindings that hand the memory to C or Python. The memory is shared with the DSP, which
    /// writes it during a launch (see the module docs); it stays mapped while the lease lives.
    pub fn host_addr(&self) -> usize {
        self.raw.map.addr()
    }

    /// Copies `data` into the buffer at `offset` (bracketed by cache syncs on a cached
    /// dma-heap).
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.raw.write_at(offset, data)
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer (bracketed by cache syncs on a
    /// cached dma-heap).
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        self.raw.read_at(offset, out)
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.raw.fill(offset, len, byte)
    }

    /// Cache maintenance on `[offset, offset + len)`: the msm ION cache ioctls on ION 4.9; on a
    /// dma-heap, `DMA_BUF_IOCTL_SYNC` on the whole buffer (the dma-buf ABI has no ranges):
    /// Clean = END of a CPU write, Invalidate = START of a CPU read, CleanInvalidate = both.
    pub fn cache(&self, op: ion::CacheOp, offset: usize, len: usize) -> Result<(), HalError> {
        if self.raw.handle.is_none() {
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
        ion::cache(&self.sys, self.ion, op, self.handle(), self.fd(), &self.raw.map, offset, len)
            .map_err(|e| HalError::sys(Stage::Alloc, e))
    }

    /// A view of `[offset, offset + len)`; refused if it does not fit the lease (no overflow).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>, HalError> {
        BufferView::new(self, offset, len)
    }

    /// A view of the whole lease.
    pub fn whole(&self) -> BufferView<'_> {
        BufferView { lease: self, offset: 0, len: self.len() }
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
}

impl<S: Syscalls> core::fmt::Debug for Lease<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Lease")
            .field("handle", &self.raw.handle.as_ref().map(|h| h.handle))
            .field("fd", &self.raw.share.raw().0)
            .field("len", &self.raw.len)
            .finish()
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
}
