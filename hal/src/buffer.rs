//! Allocations: a buffer from the board's allocator and its mapping ([`RawLease`]), what every
//! lease, the shell and the session's kept numbers are made of.
//!
//! What each allocator owns and when the caches are maintained is in the [`lease`](crate::lease)
//! module's docs; this file does it.
//!
//! The session's side of a lease (when its fd number may be closed) is in [`lease`](crate::lease).

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

/// The IOVA a lease of `len` bytes takes when the driver maps it: whole pages.
pub(crate) const fn iova_len(len: usize) -> u64 {
    (len as u64).div_ceil(4096).saturating_mul(4096)
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
    /// The IOVA the driver's map of the buffer takes, charged to the session: the lease's
    /// length for an allocation; for an imported buffer the whole dma-buf, which the driver
    /// maps whatever part of it was imported.
    iova: u64,
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
        Ok(RawLease { map, share, handle, len: rounded, sync, ion_maint, id: next_lease_id(), iova: iova_len(rounded) })
    }

    /// A lease over a dma-buf another component owns ([`Session::import`](crate::Session::import)):
    /// `share` is this process's own duplicate of the owner's descriptor, `handle` its ION import
    /// (ION 4.9 boards; freed on drop like an allocation's handle), `len` the imported length
    /// (page-rounded, within the buffer) and `size` the whole buffer's. Mapped with `prot`; the
    /// cache maintenance is an allocation's on the same board (the module docs of
    /// [`lease`](crate::lease)).
    pub(crate) fn imported(
        share: OwnedFd<S>,
        handle: Option<(Fd, i32)>,
        board: &Board,
        len: usize,
        size: u64,
        prot: Prot,
        stage: Stage,
    ) -> Result<Self, HalError> {
        let sys = share.sys().clone();
        let handle = handle.map(|(ion, handle)| IonHandle { sys: sys.clone(), ion, handle });
        let map = Mapping::map_shared(sys, share.raw(), len, prot).map_err(|e| HalError::os(stage, e))?;
        let sync = board.allocator == Allocator::DmaHeap && board.cached;
        let ion_maint = board.allocator == Allocator::Ion49 && board.cached && !board.dsp_coherent;
        Ok(RawLease {
            map,
            share,
            handle,
            len,
            sync,
            ion_maint,
            id: next_lease_id(),
            iova: size.div_ceil(PAGE as u64).saturating_mul(PAGE as u64),
        })
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

impl<S: Syscalls> RawLease<S> {
    pub(crate) fn share_fd(&self) -> Fd {
        self.share.raw()
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The IOVA charge of the lease (see the field).
    pub(crate) fn iova_charge(&self) -> u64 {
        self.iova
    }

    /// The ION handle (0 on a dma-heap board, which has no handles).
    pub(crate) fn handle(&self) -> i32 {
        self.handle.as_ref().map_or(0, |h| h.handle)
    }

    /// Cache maintenance on `[offset, offset + len)`: the msm ION cache ioctls on ION 4.9 (over
    /// the ION device `ion`); on a dma-heap, `DMA_BUF_IOCTL_SYNC` on the whole buffer (the
    /// dma-buf ABI has no ranges): Clean = END of a CPU write, Invalidate = START of a CPU read,
    /// CleanInvalidate = both.
    pub(crate) fn cache(&self, sys: &S, ion: Fd, op: ion::CacheOp, offset: usize, len: usize) -> Result<(), HalError> {
        if self.handle.is_none() {
            match offset.checked_add(len) {
                Some(end) if end <= self.len => {}
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
                dma_heap::sync(sys, self.share_fd(), *f).map_err(|e| HalError::sys(Stage::Alloc, e))?;
            }
            return Ok(());
        }
        ion::cache(sys, ion, op, self.handle(), self.share_fd(), &self.map, offset, len).map_err(|e| HalError::sys(Stage::Alloc, e))
    }
}
