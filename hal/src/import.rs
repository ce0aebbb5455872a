//! Imported buffers: a dma-buf that another process or component owns (a camera frame that
//! openpilot's VisionIPC shares over a UNIX socket, say) taken into a session as a lease, so
//! that launches and batches hand it to the DSP in place, with nothing copied.
//!
//! [`Session::import`] takes the owner's descriptor number, the length to import and whether
//! the DSP may write the buffer ([`Access`]). What it does, in order, and what refuses a
//! descriptor (a [`Cause::Import`] error, before any FastRPC call is made):
//!
//! 1. **Its own number.** The owner's descriptor is duplicated (`F_DUPFD_CLOEXEC`,
//!    [`Syscalls::dup_cloexec`]). The duplicate is the lease's, and the lease treats it as it
//!    treats an allocation's share fd: the number a launch hands the driver, drained of the
//!    driver's maps (MUNMAP_FD downstream) or kept occupied (upstream, by-number lookups) before
//!    it is closed when the lease is dropped (docs/kernel-rules.md R1, R8, R21). The owner's
//!    number is never closed, retired or handed to a driver. The duplicate holds its own
//!    reference to the dma-buf, so the owner may close its number, or exit, while the lease
//!    lives and while a call uses it. A number that is not open: [`ImportRefusal::NotOpen`].
//! 2. **A dma-buf.** On ION 4.9 (the comma three) the duplicate is imported into the session's
//!    ION client (`ION_IOC_IMPORT`: the driver refuses any file that is not an ION dma-buf),
//!    which gives the handle the cache ioctls of a non-coherent board name; the handle is freed
//!    with the lease. On a dma-buf heap board it is asked to begin and end a CPU read
//!    (`DMA_BUF_IOCTL_SYNC`), which only a dma-buf understands. Either refusal, or a descriptor
//!    without a size (a pipe, a socket): [`ImportRefusal::NotDmaBuf`].
//! 3. **Its size.** `lseek(SEEK_END)` on the duplicate ([`Syscalls::seek_end`]); a length past
//!    it: [`ImportRefusal::BeyondBuffer`]; 0: [`ImportRefusal::Empty`]; past the board's
//!    largest allocation: [`Cause::TooLarge`].
//! 4. **The session's budget.** The driver maps a handle's dma-buf whole, whatever part of it
//!    was imported, so the lease is charged the whole buffer's size against
//!    [`Limits::lease_iova`](hexrpc_bsp::Limits::lease_iova) (R23).
//! 5. **A mapping** of the imported length, read-only for [`Access::ReadOnly`].
//!
//! The lease's views launch and batch like any lease's (a handle each, so 0 bytes of the buffer
//! are copied by the driver), and an [`Arena`](crate::Arena) is not involved.
//!
//! Cache maintenance (R6) is an allocation's on the same board, around this process's own CPU
//! accesses through the lease: none on a coherent board (the comma three), the ION cache ioctls
//! on a non-coherent ION board, `DMA_BUF_IOCTL_SYNC` on a cached dma-heap board. Making the
//! owner's own CPU writes visible to the DSP is the owner's part (its `DMA_BUF_IOCTL_SYNC` END
//! after writing; a frame that the camera's DMA wrote never sat in a CPU cache).
//!
//! **What the owner may still do.** The buffer is shared memory: the owner can write a frame
//! while a kernel reads it, and the host's reads through the lease copy whatever is there at the
//! time (the drivers' volatile copies, never references). Synchronising frames (which one the
//! DSP reads) is the owner's and the importer's protocol, as it is for VisionIPC's buffers.
//!
//! **What [`Access::ReadOnly`] can and cannot do.** The lease's mapping is read-only, so
//! writes through the lease are refused. Neither FastRPC driver takes a direction for a
//! handle (both map it for reading and writing), and a launch signature does not say which
//! views a kernel writes, so a kernel that writes its input is not stopped by the host; the
//! flag states the importer's intent and protects the buffer from this process's own writes.

use hexrpc_bsp::Allocator;
use hexrpc_drivers::dma_heap;
use hexrpc_drivers::{ion, Errno, Error as SysError, Fd, Prot, Syscalls};

use crate::buffer::iova_len;
use crate::buffer::{RawLease, PAGE};
use crate::error::{Cause, HalError, ImportRefusal, Stage};
use crate::fd::OwnedFd;
use crate::lease::{Lease, Owner};
use crate::session::Session;

/// Whether the DSP may write an imported buffer ([`Session::import`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Access {
    /// Kernels only read it (a camera frame): mapped read-only in this process.
    ReadOnly,
    /// Kernels may write it (an output buffer another component reads).
    ReadWrite,
}

const fn refused(r: ImportRefusal) -> HalError {
    HalError::new(Stage::Import, Cause::Import(r))
}

/// What a refusal of the kernel about the descriptor itself means: a file that is not a dma-buf
/// (`EINVAL`, `ENOTTY`, `ESPIPE`; `ENOSYS` where qemu-user stands between: it answers an ioctl it
/// does not translate, the dma-buf sync on a pipe, with it), one that is not open (`EBADF`), or
/// an error of its own.
fn about_the_descriptor(e: SysError) -> HalError {
    match e {
        SysError::Os(Errno::EBADF) => refused(ImportRefusal::NotOpen),
        SysError::Os(errno @ (Errno::EINVAL | Errno::ENOTTY | Errno::ESPIPE | Errno::ENOSYS)) => {
            refused(ImportRefusal::NotDmaBuf { errno })
        }
        e => HalError::sys(Stage::Import, e),
    }
}

impl<S: Syscalls + Clone> Session<S> {
    /// Imports `len` bytes of the dma-buf behind `fd`, a descriptor another process or
    /// component owns, as a lease of this session (the contract: `docs/import.md`): its views
    /// launch and batch like any lease's, with the buffer handed to the DSP in place.
    ///
    /// `fd` stays the caller's: it is duplicated, never closed, and may be closed as soon as
    /// this returns. A descriptor that is not open, not a dma-buf, or shorter than `len` is
    /// refused with [`Cause::Import`] before any FastRPC call; a buffer larger than the board's
    /// largest allocation with [`Cause::TooLarge`]; one past the session's IOVA budget with
    /// [`Budget::Iova`](crate::Budget::Iova).
    pub fn import(&self, fd: Fd, len: usize, access: Access) -> Result<Lease<'_, S>, HalError> {
        let raw = self.import_raw(fd, len, access)?;
        Ok(Lease::new(raw, self.sys.clone(), self.ion.raw(), Owner::Session(self)))
    }

    /// [`import`](Self::import) without the lease around it, charged to the session.
    pub(crate) fn import_raw(&self, fd: Fd, len: usize, access: Access) -> Result<RawLease<S>, HalError> {
        if fd.0 < 0 {
            return Err(refused(ImportRefusal::NotOpen));
        }
        if len == 0 {
            return Err(refused(ImportRefusal::Empty));
        }
        let own = OwnedFd::new(self.sys.clone(), self.sys.dup_cloexec(fd).map_err(|e| about_the_descriptor(SysError::Os(e)))?);
        let handle = match self.board.allocator {
            Allocator::Ion49 => {
                let h = ion::import(&self.sys, self.ion.raw(), own.raw()).map_err(about_the_descriptor)?;
                Some((self.ion.raw(), h))
            }
            Allocator::DmaHeap => {
                let read = dma_heap::DMA_BUF_SYNC_READ;
                dma_heap::sync(&self.sys, own.raw(), dma_heap::DMA_BUF_SYNC_START | read).map_err(about_the_descriptor)?;
                dma_heap::sync(&self.sys, own.raw(), dma_heap::DMA_BUF_SYNC_END | read).map_err(about_the_descriptor)?;
                None
            }
        };
        // From here the ION handle is the lease's to free, on every path.
        let guard = HandleGuard { sys: &self.sys, handle };
        let size = self.sys.seek_end(own.raw()).map_err(|e| about_the_descriptor(SysError::Os(e)))?;
        let requested = len as u64;
        if requested > size {
            return Err(refused(ImportRefusal::BeyondBuffer { requested, size }));
        }
        let rounded = len.checked_add(PAGE - 1).map(|l| l & !(PAGE - 1)).ok_or(HalError::new(Stage::Import, Cause::TooLarge))?;
        if size > self.board.limits.max_alloc_len || rounded as u64 > size {
            // A dma-buf is whole pages; a size that is not cannot be mapped to the page's end.
            return Err(HalError::new(
                Stage::Import,
                if size > self.board.limits.max_alloc_len { Cause::TooLarge } else { Cause::Invalid },
            ));
        }
        let charge = size.div_ceil(PAGE as u64).saturating_mul(PAGE as u64);
        self.charge_iova_bytes(charge)?;
        let prot = match access {
            Access::ReadOnly => Prot::Read,
            Access::ReadWrite => Prot::ReadWrite,
        };
        RawLease::imported(own, guard.defuse(), self.board, rounded, size, prot, Stage::Import).inspect_err(|_| self.uncharge_iova(charge))
    }

    /// Charges `bytes` (whole pages) of the session's IOVA budget.
    fn charge_iova_bytes(&self, bytes: u64) -> Result<(), HalError> {
        // `charge_iova` takes a length and rounds it to pages; `bytes` already is.
        let len = usize::try_from(bytes).map_err(|_| HalError::new(Stage::Import, Cause::TooLarge))?;
        debug_assert_eq!(iova_len(len), bytes);
        self.charge_iova(len)
    }
}

/// Frees an ION import that was not handed to a lease (a refusal after `ION_IOC_IMPORT`).
struct HandleGuard<'a, S: Syscalls> {
    sys: &'a S,
    handle: Option<(Fd, i32)>,
}

impl<S: Syscalls> HandleGuard<'_, S> {
    fn defuse(mut self) -> Option<(Fd, i32)> {
        self.handle.take()
    }
}

impl<S: Syscalls> Drop for HandleGuard<'_, S> {
    fn drop(&mut self) {
        if let Some((ion_fd, handle)) = self.handle.take() {
            if let Err(e) = ion::free(self.sys, ion_fd, handle) {
                log::warn!("ION_IOC_FREE of imported handle {handle} failed: {e}");
            }
        }
    }
}
