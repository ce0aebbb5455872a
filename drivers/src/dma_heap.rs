//! dma-buf heaps (`/dev/dma_heap/<name>`) and the dma-buf cache-sync ioctl: how buffers are
//! allocated on kernels without ION (mainline since 5.6, Android GKI kernels, every upstream
//! FastRPC board).
//!
//! Origin: `include/uapi/linux/dma-heap.h` and `include/uapi/linux/dma-buf.h`, identical in
//! Linux 6.1 (Debian `linux-libc-dev`) and current mainline for everything used here. Layouts
//! and numbers are those of an LP64 (aarch64) build.
//!
//! A heap node hands out one dma-buf fd per [`alloc`]; the fd *is* the buffer (there is no
//! per-client handle as with ION 4.9): `mmap` it to reach the bytes, pass it to the DSP driver,
//! close it (and unmap) to free. Heap nodes are distinct types of fd ([`HeapFd`]) so that a heap
//! request can only be sent to a heap node.
//!
//! Cache maintenance: a buffer from a cached heap (`system`) is CPU-cached; the CPU must bracket
//! its accesses with [`sync`] (`DMA_BUF_SYNC_START` before, `DMA_BUF_SYNC_END` after), so that a
//! device (the DSP) sees what the CPU wrote and the CPU sees what the device wrote. The
//! `system-uncached` heap (where present) needs none.
//!
//! Kernel behaviour (`drivers/dma-buf/dma-heap.c`, kernel-abi.md 1.4): the command is
//! dispatched by its *number* only (nr >= 1 is `EINVAL`, not `ENOTTY`), the argument may be
//! shorter or longer than 24 bytes (zero-filled / truncated copies), `fd` must be 0 on input,
//! `fd_flags` must be within `O_CLOEXEC | O_ACCMODE`, `heap_flags` must be 0 and the length is
//! page-aligned (0 is `EINVAL`).
#![allow(non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::check_rc;
use crate::sys::{ioctl_plain, PlainArg};
use crate::{abi_layout, Error, Fd, OwnedFd, Syscalls};

/// `struct dma_heap_allocation_data`: argument of [`DMA_HEAP_IOCTL_ALLOC`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct dma_heap_allocation_data {
    /// Size of the allocation in bytes (the kernel rounds it up to pages).
    pub len: u64,
    /// Out: the new dma-buf fd (must be 0 on input).
    pub fd: u32,
    /// Flags of the new fd: `O_CLOEXEC` and an access mode.
    pub fd_flags: u32,
    /// Heap-specific flags; no heap defines any (must be 0).
    pub heap_flags: u64,
}
abi_layout!(dma_heap_allocation_data, "dma_heap_allocation_data", size = 24, align = 8, { len @ 0, fd @ 8, fd_flags @ 12, heap_flags @ 16 });

/// `struct dma_buf_sync`: argument of [`DMA_BUF_IOCTL_SYNC`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct dma_buf_sync {
    /// `DMA_BUF_SYNC_*`.
    pub flags: u64,
}
abi_layout!(dma_buf_sync, "dma_buf_sync", size = 8, align = 8, { flags @ 0 });

/// `DMA_HEAP_IOC_MAGIC`.
pub const DMA_HEAP_IOC_MAGIC: u8 = b'H';
/// The group byte of the dma-buf ioctls (`DMA_BUF_BASE`).
pub const DMA_BUF_BASE: u8 = b'b';

/// The dma-heap and dma-buf requests, each declared from (group, number, argument type): the typed calls of
/// this module take these, so a request cannot be sent with an argument of another type.
pub mod ioctl {
    use super::*;
    use crate::ioc::Ioctl;

    /// `DMA_HEAP_IOCTL_ALLOC`.
    pub const DMA_HEAP_IOCTL_ALLOC: Ioctl<dma_heap_allocation_data> = Ioctl::iowr(DMA_HEAP_IOC_MAGIC, 0);
    /// `DMA_BUF_IOCTL_SYNC` (write-only: nothing is copied back).
    pub const DMA_BUF_IOCTL_SYNC: Ioctl<dma_buf_sync> = Ioctl::iow(DMA_BUF_BASE, 0);
}

/// `DMA_HEAP_IOCTL_ALLOC` as a raw number ([`ioctl::DMA_HEAP_IOCTL_ALLOC`]), for code that decodes requests.
pub const DMA_HEAP_IOCTL_ALLOC: u32 = ioctl::DMA_HEAP_IOCTL_ALLOC.raw();
/// `DMA_BUF_IOCTL_SYNC` as a raw number ([`ioctl::DMA_BUF_IOCTL_SYNC`]), for code that decodes requests.
pub const DMA_BUF_IOCTL_SYNC: u32 = ioctl::DMA_BUF_IOCTL_SYNC.raw();

/// Every request number of this module, by kernel name.
pub const IOCTLS: &[(&str, u32)] = &[("DMA_HEAP_IOCTL_ALLOC", DMA_HEAP_IOCTL_ALLOC), ("DMA_BUF_IOCTL_SYNC", DMA_BUF_IOCTL_SYNC)];

/// `DMA_BUF_SYNC_READ`: the CPU reads.
pub const DMA_BUF_SYNC_READ: u64 = 1;
/// `DMA_BUF_SYNC_WRITE`: the CPU writes.
pub const DMA_BUF_SYNC_WRITE: u64 = 2;
/// `DMA_BUF_SYNC_RW`.
pub const DMA_BUF_SYNC_RW: u64 = DMA_BUF_SYNC_READ | DMA_BUF_SYNC_WRITE;
/// `DMA_BUF_SYNC_START`: begin a CPU access.
pub const DMA_BUF_SYNC_START: u64 = 0;
/// `DMA_BUF_SYNC_END`: end a CPU access.
pub const DMA_BUF_SYNC_END: u64 = 4;
/// `DMA_BUF_SYNC_VALID_FLAGS_MASK`: any other bit is `EINVAL`.
pub const DMA_BUF_SYNC_VALID_FLAGS_MASK: u64 = DMA_BUF_SYNC_RW | DMA_BUF_SYNC_END;

/// `O_RDWR` of asm-generic `fcntl.h` (aarch64, x86-64).
pub const O_RDWR: u32 = 0o2;
/// `O_ACCMODE`.
pub const O_ACCMODE: u32 = 0o3;
/// `O_CLOEXEC` of asm-generic `fcntl.h`.
pub const O_CLOEXEC: u32 = 0o2000000;
/// `DMA_HEAP_VALID_FD_FLAGS`.
pub const DMA_HEAP_VALID_FD_FLAGS: u32 = O_CLOEXEC | O_ACCMODE;
/// `DMA_HEAP_VALID_HEAP_FLAGS`: none.
pub const DMA_HEAP_VALID_HEAP_FLAGS: u64 = 0;

/// Directory of the heap nodes.
pub const DMA_HEAP_DIR: &str = "/dev/dma_heap";

/// Constants of this module, by kernel name, for `hexrpc abi`.
pub const CONSTANTS: &[(&str, u64)] = &[
    ("DMA_BUF_SYNC_READ", DMA_BUF_SYNC_READ),
    ("DMA_BUF_SYNC_WRITE", DMA_BUF_SYNC_WRITE),
    ("DMA_BUF_SYNC_RW", DMA_BUF_SYNC_RW),
    ("DMA_BUF_SYNC_START", DMA_BUF_SYNC_START),
    ("DMA_BUF_SYNC_END", DMA_BUF_SYNC_END),
    ("DMA_BUF_SYNC_VALID_FLAGS_MASK", DMA_BUF_SYNC_VALID_FLAGS_MASK),
    ("DMA_HEAP_VALID_FD_FLAGS", DMA_HEAP_VALID_FD_FLAGS as u64),
    ("DMA_HEAP_VALID_HEAP_FLAGS", DMA_HEAP_VALID_HEAP_FLAGS),
];

/// A descriptor of a dma-buf heap node (`/dev/dma_heap/<name>`). It does not own the
/// descriptor (owning wrappers live in the HAL); it exists so that heap requests take a heap
/// fd and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HeapFd(Fd);

impl HeapFd {
    /// Declares that `fd` is an open heap node. The caller opened it from a heap path (the HAL
    /// does so from the board's heap path); nothing unsafe happens if it is not, the kernel then
    /// refuses the requests.
    pub const fn from_raw(fd: Fd) -> HeapFd {
        HeapFd(fd)
    }
    /// The descriptor, for `close`.
    pub const fn fd(self) -> Fd {
        self.0
    }
}

// SAFETY: lengths, fds and flags only: nothing the driver follows as a user address.
unsafe impl PlainArg for dma_heap_allocation_data {}
// SAFETY: a flags word only.
unsafe impl PlainArg for dma_buf_sync {}

/// `DMA_HEAP_IOCTL_ALLOC`: allocates `len` bytes (rounded up to pages) from the heap and
/// returns the new dma-buf fd, opened `O_RDWR | O_CLOEXEC`, as an owned descriptor.
///
/// Caller: any process that may open the heap node. Fails with `EINVAL` (length 0), `ENOMEM`,
/// `EMFILE`.
pub fn alloc<S: Syscalls + ?Sized>(sys: &S, heap: HeapFd, len: u64) -> Result<OwnedFd, Error> {
    let mut data = dma_heap_allocation_data { len, fd: 0, fd_flags: O_RDWR | O_CLOEXEC, heap_flags: 0 };
    check_rc(ioctl_plain(sys, heap.0, ioctl::DMA_HEAP_IOCTL_ALLOC, &mut data))?;
    // A fd above i32::MAX cannot come from the kernel; refuse it rather than truncate.
    let fd = i32::try_from(data.fd).map_err(|_| Error::Invalid)?;
    // SAFETY: a successful ALLOC installs a new descriptor in this process and writes its number
    // back; nobody else knows the number yet, so the caller becomes its only owner.
    Ok(unsafe { OwnedFd::from_raw(Fd(fd)) })
}

/// `DMA_BUF_IOCTL_SYNC` on a dma-buf fd (from a heap, or an ION share fd): `flags` is
/// [`DMA_BUF_SYNC_START`] or [`DMA_BUF_SYNC_END`] with [`DMA_BUF_SYNC_READ`] /
/// [`DMA_BUF_SYNC_WRITE`] bits.
///
/// Caller: a holder of the fd, around CPU accesses of a mapping of it. Fails with `EINVAL`
/// (flags outside the mask, or no direction), `ENOTTY` on a descriptor that is not a dma-buf.
pub fn sync<S: Syscalls + ?Sized>(sys: &S, buf: Fd, flags: u64) -> Result<(), Error> {
    if flags & !DMA_BUF_SYNC_VALID_FLAGS_MASK != 0 || flags & DMA_BUF_SYNC_RW == 0 {
        return Err(Error::Invalid);
    }
    let mut s = dma_buf_sync { flags };
    check_rc(ioctl_plain(sys, buf, ioctl::DMA_BUF_IOCTL_SYNC, &mut s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of the 6.1 headers for aarch64, typed independently of the declarations above
    /// (kernel-abi.md 1.4; `tests/tests/abi_headers.rs` also compiles the system header).
    #[test]
    fn request_numbers_match_the_headers() {
        assert_eq!(DMA_HEAP_IOCTL_ALLOC, 0xC018_4800);
        assert_eq!(DMA_BUF_IOCTL_SYNC, 0x4008_6200);
        assert_eq!(DMA_HEAP_VALID_FD_FLAGS, 0x0008_0003);
        assert_eq!(DMA_BUF_SYNC_VALID_FLAGS_MASK, 7);
    }
}
