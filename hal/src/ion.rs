//! ION buffers: leases (the allocation and its mapping) and views (a range of a lease).
//!
//! A lease owns, in acquisition order, the ION handle, the dma-buf share fd and a shared mapping
//! of the whole buffer; dropping it releases them in reverse order. A view is an (offset, length)
//! range of a lease, checked when it is made, that borrows the lease: the borrow checker keeps a
//! lease alive while any view of it exists. Views never own a mapping: a launch maps the lease's
//! base with the lease's length and points the kernel at base + offset (entry ABI v2).
//!
//! The memory of a lease is shared with the DSP, which may write it during a launch; reads copy
//! out through the drivers' [`Mapping`], never through Rust references.

use core::marker::PhantomData;

use hexrpc_bsp::Board;
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
/// order); the public [`IonLease`] adds the borrow.
pub(crate) struct RawLease<S: Syscalls> {
    // Field order is release order: mapping, share fd, handle.
    map: Mapping<S>,
    share: OwnedFd<S>,
    handle: IonHandle<S>,
    len: usize,
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
        let share = OwnedFd::new(sys.clone(), share);
        let map = Mapping::map_shared(sys.clone(), share.raw(), rounded, Prot::ReadWrite).map_err(|e| HalError::os(stage, e))?;
        Ok(RawLease { map, share, handle, len: rounded })
    }

    pub(crate) fn mapping(&self) -> &Mapping<S> {
        &self.map
    }

    pub(crate) fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.map.write_at(offset, data).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
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

/// An ION allocation of a session: handle, share fd, mapping of the whole buffer, total length.
///
/// Borrowing the session (`'s`) keeps the ION device open while the lease lives.
pub struct IonLease<'s, S: Syscalls> {
    raw: RawLease<S>,
    sys: S,
    ion: Fd,
    _session: PhantomData<&'s ()>,
}

impl<'s, S: Syscalls + Clone> IonLease<'s, S> {
    pub(crate) fn new(raw: RawLease<S>, sys: S, ion: Fd) -> Self {
        IonLease { raw, sys, ion, _session: PhantomData }
    }

    /// Total length (the allocation, rounded up to a page).
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Always false: leases have at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The ION handle.
    pub fn handle(&self) -> i32 {
        self.raw.handle.handle
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

    /// Copies `data` into the buffer at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.raw.map.write_at(offset, data).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        self.raw.map.read_at(offset, out).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.raw.map.fill(offset, len, byte).map_err(|_| HalError::new(Stage::Alloc, Cause::Invalid))
    }

    /// Cache maintenance on `[offset, offset + len)` (msm ION cache ioctls).
    pub fn cache(&self, op: ion::CacheOp, offset: usize, len: usize) -> Result<(), HalError> {
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

impl<S: Syscalls + Clone> LeaseMemory for IonLease<'_, S> {
    fn share_fd(&self) -> Fd {
        self.fd()
    }
    fn lease_len(&self) -> usize {
        self.len()
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        IonLease::read_at(self, offset, out)
    }
}

impl<S: Syscalls> core::fmt::Debug for IonLease<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IonLease")
            .field("handle", &self.raw.handle.handle)
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
