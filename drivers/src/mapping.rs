use core::fmt;
use core::ptr::NonNull;

use crate::{Errno, Fd, Prot, Syscalls};

/// A shared mapping of a buffer fd (an ION dma-buf), unmapped when dropped.
///
/// The memory may be shared with the DSP and with other mappings of the same buffer, so no Rust
/// reference into it is ever handed out: [`read_at`](Mapping::read_at) and
/// [`write_at`](Mapping::write_at) copy through raw pointers, bounds-checked against the mapped
/// length. Writing takes `&mut self`, so two host threads cannot race through one mapping.
pub struct Mapping<S: Syscalls> {
    sys: S,
    ptr: NonNull<u8>,
    len: usize,
    prot: Prot,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to another thread
// moves the obligation to unmap it, which `S: Send` allows.
unsafe impl<S: Syscalls + Send> Send for Mapping<S> {}
// SAFETY: `&Mapping` only permits reads (copies out of the mapping) and address queries; writes
// need `&mut`, so shared references across threads cannot race on the host side.
unsafe impl<S: Syscalls + Sync> Sync for Mapping<S> {}

/// A range that does not fit a mapping, or a write to a read-only mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RangeError {
    /// Requested offset.
    pub offset: usize,
    /// Requested length.
    pub len: usize,
    /// Length of the mapping.
    pub mapped: usize,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "range {}+{} does not fit a mapping of {} bytes (or the mapping is read-only)", self.offset, self.len, self.mapped)
    }
}

impl core::error::Error for RangeError {}

impl<S: Syscalls> Mapping<S> {
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, 0)`. `len` must be non-zero.
    pub fn map_shared(sys: S, fd: Fd, len: usize, prot: Prot) -> Result<Self, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a fresh shared mapping; this type never forms references into it (see the
        // type docs), which is the contract `mmap` asks of its caller.
        let ptr = unsafe { sys.mmap(fd, len, prot, 0) }?;
        Ok(Mapping { sys, ptr, len, prot })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte, as the kernel and the DSP driver see it.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The syscall implementation this mapping was made with.
    pub fn sys(&self) -> &S {
        &self.sys
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), RangeError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(RangeError { offset, len, mapped: self.len }),
        }
    }

    /// Copies `out.len()` bytes starting at `offset` out of the mapping.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), RangeError> {
        self.check(offset, out.len())?;
        // SAFETY: `[offset, offset + out.len())` lies inside the live mapping (checked above);
        // `out` is a distinct Rust buffer, so the ranges do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` into the mapping at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), RangeError> {
        self.check(offset, data.len())?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len: data.len(), mapped: self.len });
        }
        // SAFETY: the range is inside the live, writable mapping (checked above), and `data` is
        // a distinct Rust buffer.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), RangeError> {
        self.check(offset, len)?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len, mapped: self.len });
        }
        // SAFETY: the range is inside the live, writable mapping (checked above).
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr().add(offset), byte, len) };
        Ok(())
    }

    /// Unmaps now and reports the result (dropping unmaps too, and logs a failure).
    pub fn unmap(self) -> Result<(), Errno> {
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: the range is our own mapping and `me` is never used again; `sys` is moved out
        // exactly once and the rest of `me` has no destructor to run.
        let sys = unsafe { core::ptr::read(&me.sys) };
        // SAFETY: the mapping was made by `sys.mmap` with this length, and nothing uses it now.
        unsafe { sys.munmap(me.ptr, me.len) }
    }
}

impl<S: Syscalls> Drop for Mapping<S> {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `self.sys.mmap` with this length and is dropped now.
        if let Err(e) = unsafe { self.sys.munmap(self.ptr, self.len) } {
            log::error!("munmap of {:#x}+{} failed: {}", self.addr(), self.len, e);
        }
    }
}

impl<S: Syscalls> fmt::Debug for Mapping<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("prot", &self.prot)
            .finish()
    }
}
