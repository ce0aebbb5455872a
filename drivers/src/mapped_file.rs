//! A file mapped read-only into memory ([`MappedFile`]): how a model file is opened from a path
//! without reading it into the heap.

use core::ptr::NonNull;

use rustix::fd::OwnedFd;
use rustix::fs::{self, Mode, OFlags};
use rustix::mm::{self, MapFlags, ProtFlags};

use crate::Errno;

/// A whole regular file mapped read-only and private (`PROT_READ`, `MAP_PRIVATE`), unmapped on
/// drop.
///
/// The bytes are the file's as long as nobody changes it: another process that truncates or
/// rewrites the file while it is mapped changes what [`bytes`](Self::bytes) shows or makes a
/// read of a page past the new end fault (`SIGBUS`), as with any mapping (`memmap2`'s
/// `Mmap` has the same contract). Model files are read once, validated whole and copied into
/// the session's buffers, then the mapping is dropped; install them read-only (docs/agnos.md).
pub struct MappedFile {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; sharing `&[u8]` of it between
// threads is as safe as sharing any immutable bytes.
unsafe impl Send for MappedFile {}
// SAFETY: as above: nothing mutates the mapping through this value.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the file at `path` (a regular file; an empty file maps as no bytes). Errors: the
    /// open's or `fstat`'s errno, `EINVAL` for a file that is not regular, `EFBIG` for one
    /// larger than the address space, the `mmap`'s errno.
    pub fn open(path: &str) -> Result<MappedFile, Errno> {
        let fd: OwnedFd = fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| Errno(e.raw_os_error()))?;
        let st = fs::fstat(&fd).map_err(|e| Errno(e.raw_os_error()))?;
        if fs::FileType::from_raw_mode(st.st_mode) != fs::FileType::RegularFile {
            return Err(Errno::EINVAL);
        }
        let len = usize::try_from(st.st_size).map_err(|_| Errno::EFBIG)?;
        if len == 0 {
            return Ok(MappedFile { ptr: NonNull::dangling(), len: 0 });
        }
        // SAFETY: a NULL hint lets the kernel choose a fresh range, so no existing mapping is
        // replaced; the mapping is read-only and private, owned by the value returned and
        // unmapped once, in `drop`, with the same length.
        let p = unsafe { mm::mmap(core::ptr::null_mut(), len, ProtFlags::READ, MapFlags::PRIVATE, &fd, 0) }
            .map_err(|e| Errno(e.raw_os_error()))?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(Errno::ENOMEM)?;
        Ok(MappedFile { ptr, len })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live read-only mapping of `len` bytes owned by `self` (or dangling
        // with `len` 0); the slice borrows `self`, so it cannot outlive the mapping.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The file's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the range is the mapping `open` made for this value, unmapped only here.
            let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}

impl core::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MappedFile").field("len", &self.len).finish()
    }
}
