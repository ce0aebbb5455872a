//! msm ION, the Linux 4.9 ABI of `/dev/ion` on downstream Qualcomm kernels.
//!
//! Origin: `include/uapi/linux/ion.h` and `include/uapi/linux/msm_ion.h` of the msm-4.9 kernel
//! (AGNOS `agnos-kernel-sdm845`, Linux 4.9.103), as mirrored in tinygrad
//! `extra/dsp/include/{ion.h,msm_ion.h}`. Numbers and layouts are those of an LP64 (aarch64)
//! build.
//!
//! An allocation returns a per-client *handle*; `ION_IOC_SHARE` exports it as a dma-buf *fd*,
//! which is what is mmap'ed and handed to the DSP. Closing `/dev/ion` destroys every handle of
//! that client; a buffer lives on while a dma-buf fd or mapping of it exists.
//!
//! Kernels from 4.12 on use a different ION ABI (no handles; a 24-byte allocation struct, so
//! `ION_IOC_ALLOC` has another number), and Android 12 GKI kernels replace ION with dma-heaps.
//! Neither is supported by this module.
#![allow(non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::check_rc;
use crate::sys::{ioctl_plain, ioctl_with, PlainArg};
use crate::{abi_layout, Error, Fd, OwnedFd, Syscalls};

/// `ion_user_handle_t`: a per-client handle id (an `int`).
pub type ion_user_handle_t = i32;

/// `struct ion_allocation_data`: argument of `ION_IOC_ALLOC`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ion_allocation_data {
    /// Size in bytes (the kernel rounds it up to pages).
    pub len: u64,
    /// Alignment (system heap: must be <= page size).
    pub align: u64,
    /// Bit mask of heap ids to try: `1 << heap_id`.
    pub heap_id_mask: u32,
    /// `ION_FLAG_*`.
    pub flags: u32,
    /// Out: the new handle.
    pub handle: ion_user_handle_t,
    /// Tail padding of the C struct.
    pub _pad0: u32,
}
abi_layout!(ion_allocation_data, "ion_allocation_data", size = 32, align = 8, { len @ 0, align @ 8, heap_id_mask @ 16, flags @ 20, handle @ 24 });

/// `struct ion_fd_data`: argument of `ION_IOC_SHARE`, `ION_IOC_MAP`, `ION_IOC_IMPORT`,
/// `ION_IOC_SYNC`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ion_fd_data {
    /// The handle (in for SHARE/MAP, out for IMPORT).
    pub handle: ion_user_handle_t,
    /// The dma-buf fd (out for SHARE/MAP, in for IMPORT/SYNC).
    pub fd: i32,
}
abi_layout!(ion_fd_data, "ion_fd_data", size = 8, align = 4, { handle @ 0, fd @ 4 });

/// `struct ion_handle_data`: argument of `ION_IOC_FREE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ion_handle_data {
    /// The handle to free.
    pub handle: ion_user_handle_t,
}
abi_layout!(ion_handle_data, "ion_handle_data", size = 4, align = 4, { handle @ 0 });

/// `struct ion_custom_data`: argument of `ION_IOC_CUSTOM`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ion_custom_data {
    /// Driver-specific command.
    pub cmd: u32,
    /// Padding before the 8-byte-aligned `arg`.
    pub _pad0: u32,
    /// Driver-specific argument (`unsigned long`).
    pub arg: u64,
}
abi_layout!(ion_custom_data, "ion_custom_data", size = 16, align = 8, { cmd @ 0, arg @ 8 });

/// `struct ion_flush_data` (msm): argument of the three msm cache ioctls.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ion_flush_data {
    /// The handle of the buffer.
    pub handle: ion_user_handle_t,
    /// The dma-buf fd of the buffer.
    pub fd: i32,
    /// User address of the mapping (`void *`).
    pub vaddr: u64,
    /// Offset into the buffer.
    pub offset: u32,
    /// Length of the range.
    pub length: u32,
}
abi_layout!(ion_flush_data, "ion_flush_data", size = 24, align = 8, { handle @ 0, fd @ 4, vaddr @ 8, offset @ 16, length @ 20 });

/// `ION_IOC_MAGIC`.
pub const ION_IOC_MAGIC: u8 = b'I';
/// `ION_IOC_MSM_MAGIC`.
pub const ION_IOC_MSM_MAGIC: u8 = b'M';

/// The ION requests, each declared from (group, number, argument type): the typed calls of
/// [`ion`](super) take these, so a request cannot be sent with an argument of another type.
pub mod ioctl {
    use super::*;
    use crate::ioc::Ioctl;

    /// `ION_IOC_ALLOC`.
    pub const ION_IOC_ALLOC: Ioctl<ion_allocation_data> = Ioctl::iowr(ION_IOC_MAGIC, 0);
    /// `ION_IOC_FREE`.
    pub const ION_IOC_FREE: Ioctl<ion_handle_data> = Ioctl::iowr(ION_IOC_MAGIC, 1);
    /// `ION_IOC_MAP`.
    pub const ION_IOC_MAP: Ioctl<ion_fd_data> = Ioctl::iowr(ION_IOC_MAGIC, 2);
    /// `ION_IOC_SHARE`.
    pub const ION_IOC_SHARE: Ioctl<ion_fd_data> = Ioctl::iowr(ION_IOC_MAGIC, 4);
    /// `ION_IOC_IMPORT`.
    pub const ION_IOC_IMPORT: Ioctl<ion_fd_data> = Ioctl::iowr(ION_IOC_MAGIC, 5);
    /// `ION_IOC_CUSTOM` (its `arg` is a user pointer the driver follows).
    pub const ION_IOC_CUSTOM: Ioctl<ion_custom_data> = Ioctl::iowr(ION_IOC_MAGIC, 6);
    /// `ION_IOC_SYNC`.
    pub const ION_IOC_SYNC: Ioctl<ion_fd_data> = Ioctl::iowr(ION_IOC_MAGIC, 7);
    /// `ION_IOC_CLEAN_CACHES` (msm; `vaddr` is a user address the driver follows).
    pub const ION_IOC_CLEAN_CACHES: Ioctl<ion_flush_data> = Ioctl::iowr(ION_IOC_MSM_MAGIC, 0);
    /// `ION_IOC_INV_CACHES` (msm).
    pub const ION_IOC_INV_CACHES: Ioctl<ion_flush_data> = Ioctl::iowr(ION_IOC_MSM_MAGIC, 1);
    /// `ION_IOC_CLEAN_INV_CACHES` (msm).
    pub const ION_IOC_CLEAN_INV_CACHES: Ioctl<ion_flush_data> = Ioctl::iowr(ION_IOC_MSM_MAGIC, 2);
}

/// `ION_IOC_ALLOC` as a raw number ([`ioctl::ION_IOC_ALLOC`]), for code that decodes requests.
pub const ION_IOC_ALLOC: u32 = ioctl::ION_IOC_ALLOC.raw();
/// `ION_IOC_FREE` as a raw number ([`ioctl::ION_IOC_FREE`]), for code that decodes requests.
pub const ION_IOC_FREE: u32 = ioctl::ION_IOC_FREE.raw();
/// `ION_IOC_MAP` as a raw number ([`ioctl::ION_IOC_MAP`]), for code that decodes requests.
pub const ION_IOC_MAP: u32 = ioctl::ION_IOC_MAP.raw();
/// `ION_IOC_SHARE` as a raw number ([`ioctl::ION_IOC_SHARE`]), for code that decodes requests.
pub const ION_IOC_SHARE: u32 = ioctl::ION_IOC_SHARE.raw();
/// `ION_IOC_IMPORT` as a raw number ([`ioctl::ION_IOC_IMPORT`]), for code that decodes requests.
pub const ION_IOC_IMPORT: u32 = ioctl::ION_IOC_IMPORT.raw();
/// `ION_IOC_CUSTOM` as a raw number ([`ioctl::ION_IOC_CUSTOM`]), for code that decodes requests.
pub const ION_IOC_CUSTOM: u32 = ioctl::ION_IOC_CUSTOM.raw();
/// `ION_IOC_SYNC` as a raw number ([`ioctl::ION_IOC_SYNC`]), for code that decodes requests.
pub const ION_IOC_SYNC: u32 = ioctl::ION_IOC_SYNC.raw();
/// `ION_IOC_CLEAN_CACHES` as a raw number ([`ioctl::ION_IOC_CLEAN_CACHES`]), for code that decodes requests.
pub const ION_IOC_CLEAN_CACHES: u32 = ioctl::ION_IOC_CLEAN_CACHES.raw();
/// `ION_IOC_INV_CACHES` as a raw number ([`ioctl::ION_IOC_INV_CACHES`]), for code that decodes requests.
pub const ION_IOC_INV_CACHES: u32 = ioctl::ION_IOC_INV_CACHES.raw();
/// `ION_IOC_CLEAN_INV_CACHES` as a raw number ([`ioctl::ION_IOC_CLEAN_INV_CACHES`]), for code that decodes requests.
pub const ION_IOC_CLEAN_INV_CACHES: u32 = ioctl::ION_IOC_CLEAN_INV_CACHES.raw();

/// Every ION request number, by kernel name.
pub const IOCTLS: &[(&str, u32)] = &[
    ("ION_IOC_ALLOC", ION_IOC_ALLOC),
    ("ION_IOC_FREE", ION_IOC_FREE),
    ("ION_IOC_MAP", ION_IOC_MAP),
    ("ION_IOC_SHARE", ION_IOC_SHARE),
    ("ION_IOC_IMPORT", ION_IOC_IMPORT),
    ("ION_IOC_CUSTOM", ION_IOC_CUSTOM),
    ("ION_IOC_SYNC", ION_IOC_SYNC),
    ("ION_IOC_CLEAN_CACHES", ION_IOC_CLEAN_CACHES),
    ("ION_IOC_INV_CACHES", ION_IOC_INV_CACHES),
    ("ION_IOC_CLEAN_INV_CACHES", ION_IOC_CLEAN_INV_CACHES),
];

/// `ION_SYSTEM_HEAP_ID` (msm numbering): the heap tinygrad and hexrpc allocate from.
pub const ION_SYSTEM_HEAP_ID: u32 = 25;
/// `ION_SYSTEM_CONTIG_HEAP_ID`.
pub const ION_SYSTEM_CONTIG_HEAP_ID: u32 = 21;
/// `ION_ADSP_HEAP_ID`.
pub const ION_ADSP_HEAP_ID: u32 = 22;
/// `ION_QSECOM_HEAP_ID`.
pub const ION_QSECOM_HEAP_ID: u32 = 27;
/// `ION_FLAG_CACHED`.
pub const ION_FLAG_CACHED: u32 = 1;
/// `ION_FLAG_CACHED_NEEDS_SYNC` (the 4.9 msm kernel ORs it in on every allocation).
pub const ION_FLAG_CACHED_NEEDS_SYNC: u32 = 2;
/// `ION_FLAG_SECURE`.
pub const ION_FLAG_SECURE: u32 = 1 << 31;

/// `ION_HEAP(id)`: the mask bit of a heap id; `None` for an id of 32 or more.
pub const fn ion_heap(id: u32) -> Option<u32> {
    if id < 32 {
        Some(1 << id)
    } else {
        None
    }
}

/// Constants of this module, by kernel name, for `hexrpc abi`.
pub const CONSTANTS: &[(&str, u64)] = &[
    ("ION_SYSTEM_HEAP_ID", ION_SYSTEM_HEAP_ID as u64),
    ("ION_SYSTEM_CONTIG_HEAP_ID", ION_SYSTEM_CONTIG_HEAP_ID as u64),
    ("ION_ADSP_HEAP_ID", ION_ADSP_HEAP_ID as u64),
    ("ION_QSECOM_HEAP_ID", ION_QSECOM_HEAP_ID as u64),
    ("ION_FLAG_CACHED", ION_FLAG_CACHED as u64),
    ("ION_FLAG_CACHED_NEEDS_SYNC", ION_FLAG_CACHED_NEEDS_SYNC as u64),
    ("ION_FLAG_SECURE", ION_FLAG_SECURE as u64),
];

// SAFETY: none of these has a field the driver follows as a user address (handles, fds,
// lengths, heap masks and flags only).
unsafe impl PlainArg for ion_allocation_data {}
// SAFETY: as above.
unsafe impl PlainArg for ion_handle_data {}
// SAFETY: as above.
unsafe impl PlainArg for ion_fd_data {}

/// `ION_IOC_ALLOC`: allocates `data.len` bytes from the first heap of `data.heap_id_mask` that
/// can serve them and writes the new handle to `data.handle`.
///
/// Caller: any process that can open `/dev/ion` (on AGNOS, group `gpu`).
/// Fails with `EINVAL` (zero length, alignment above a page), `ENODEV` (no heap of the mask
/// exists), `ENOMEM` (more than half of RAM, or no pages), `EFAULT`.
pub fn alloc<S: Syscalls + ?Sized>(sys: &S, ion: Fd, data: &mut ion_allocation_data) -> Result<(), Error> {
    check_rc(ioctl_plain(sys, ion, ioctl::ION_IOC_ALLOC, data))
}

/// `ION_IOC_FREE`: drops the client's reference to a handle. The buffer itself lives on while a
/// dma-buf fd or mapping holds it.
///
/// Fails with `EINVAL` for an unknown handle.
pub fn free<S: Syscalls + ?Sized>(sys: &S, ion: Fd, handle: ion_user_handle_t) -> Result<(), Error> {
    let mut data = ion_handle_data { handle };
    check_rc(ioctl_plain(sys, ion, ioctl::ION_IOC_FREE, &mut data))
}

/// `ION_IOC_SHARE`: exports a handle as a new dma-buf fd (`O_CLOEXEC`, read-write), which the
/// caller then owns. Each call makes a new fd.
///
/// Fails with `EINVAL` for an unknown handle, or the fd allocation's error (`EMFILE`).
pub fn share<S: Syscalls + ?Sized>(sys: &S, ion: Fd, handle: ion_user_handle_t) -> Result<OwnedFd, Error> {
    let mut data = ion_fd_data { handle, fd: -1 };
    check_rc(ioctl_plain(sys, ion, ioctl::ION_IOC_SHARE, &mut data))?;
    new_fd(data.fd)
}

/// `ION_IOC_MAP`: identical to [`share`] on the 4.9 msm kernel.
pub fn map<S: Syscalls + ?Sized>(sys: &S, ion: Fd, handle: ion_user_handle_t) -> Result<OwnedFd, Error> {
    let mut data = ion_fd_data { handle, fd: -1 };
    check_rc(ioctl_plain(sys, ion, ioctl::ION_IOC_MAP, &mut data))?;
    new_fd(data.fd)
}

/// The descriptor the kernel just made for this process (SHARE / MAP), as an owned value.
fn new_fd(fd: i32) -> Result<OwnedFd, Error> {
    if fd < 0 {
        return Err(Error::Os(crate::Errno::EBADF));
    }
    // SAFETY: a successful SHARE / MAP installs a new descriptor in this process and writes its
    // number back; nobody else knows the number yet, so the caller becomes its only owner.
    Ok(unsafe { OwnedFd::from_raw(Fd(fd)) })
}

/// `ION_IOC_IMPORT`: returns this client's handle for an ION dma-buf fd (an existing handle gets
/// another reference).
///
/// Fails with `EINVAL` if the fd is not an ION buffer, `EBADF` for a bad fd.
pub fn import<S: Syscalls + ?Sized>(sys: &S, ion: Fd, buf: Fd) -> Result<ion_user_handle_t, Error> {
    let mut data = ion_fd_data { handle: 0, fd: buf.0 };
    check_rc(ioctl_plain(sys, ion, ioctl::ION_IOC_IMPORT, &mut data))?;
    Ok(data.handle)
}

/// `ION_IOC_SYNC`: makes the device's view of the buffer coherent.
///
/// Fails with `EINVAL` for a non-ION or secure buffer.
pub fn sync<S: Syscalls + ?Sized>(sys: &S, ion: Fd, buf: Fd) -> Result<(), Error> {
    let mut data = ion_fd_data { handle: 0, fd: buf.0 };
    check_rc(ioctl_plain(sys, ion, ioctl::ION_IOC_SYNC, &mut data))
}

/// `ION_IOC_CUSTOM`: a driver-specific command with its argument.
///
/// # Safety
///
/// The msm driver follows `arg` as a user pointer (its cache commands read an
/// `ion_flush_data` there and then clean or invalidate the range its `vaddr` names): `arg` must
/// be valid for what the driver does with `cmd`. The dedicated [`cache`] call is the safe way
/// to maintain caches.
pub unsafe fn custom<S: Syscalls + ?Sized>(sys: &S, ion: Fd, cmd: u32, arg: u64) -> Result<(), Error> {
    let mut data = ion_custom_data { cmd, _pad0: 0, arg };
    // SAFETY: `data` is a live struct of the request's size; the caller vouches for `arg`.
    check_rc(unsafe { ioctl_with(sys, ion, ioctl::ION_IOC_CUSTOM, &mut data) })
}

/// Which msm cache maintenance operation to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOp {
    /// `ION_IOC_CLEAN_CACHES`: write dirty lines back (before the DSP reads).
    Clean,
    /// `ION_IOC_INV_CACHES`: discard lines (before the CPU reads what the DSP wrote).
    Invalidate,
    /// `ION_IOC_CLEAN_INV_CACHES`: both.
    CleanInvalidate,
}

impl CacheOp {
    /// The request.
    pub const fn request(self) -> crate::ioc::Ioctl<ion_flush_data> {
        match self {
            CacheOp::Clean => ioctl::ION_IOC_CLEAN_CACHES,
            CacheOp::Invalidate => ioctl::ION_IOC_INV_CACHES,
            CacheOp::CleanInvalidate => ioctl::ION_IOC_CLEAN_INV_CACHES,
        }
    }
}

/// One of the msm cache ioctls on `[offset, offset + length)` of a buffer mapped at `mapping`.
///
/// Safe because the range is checked against the mapping, which the caller holds: the kernel is
/// only asked to maintain lines of memory this process owns through that mapping.
///
/// Fails with [`Error::Invalid`] if the range is outside the mapping or wider than 32 bits, and
/// with the driver's errno otherwise.
#[allow(clippy::too_many_arguments)] // one parameter per field of the C struct
pub fn cache<S: Syscalls + ?Sized, M: Syscalls>(
    sys: &S,
    ion: Fd,
    op: CacheOp,
    handle: ion_user_handle_t,
    buf: Fd,
    mapping: &crate::Mapping<M>,
    offset: usize,
    length: usize,
) -> Result<(), Error> {
    let end = offset.checked_add(length).ok_or(Error::Invalid)?;
    if end > mapping.len() {
        return Err(Error::Invalid);
    }
    let mut data = ion_flush_data {
        handle,
        fd: buf.0,
        vaddr: mapping.addr() as u64,
        offset: u32::try_from(offset).map_err(|_| Error::Invalid)?,
        length: u32::try_from(length).map_err(|_| Error::Invalid)?,
    };
    // SAFETY: `vaddr + offset .. + length` lies inside `mapping` (checked above), a live mapping
    // of this process that the caller holds for the whole call; the driver only maintains cache
    // lines of that range.
    check_rc(unsafe { ioctl_with(sys, ion, op.request(), &mut data) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers of the kernel headers for aarch64 (kernel-abi.md 1.1, computed by
    /// compiling the headers with aarch64-linux-gnu-gcc).
    #[test]
    fn request_numbers_match_the_headers() {
        let expected: &[(&str, u32)] = &[
            ("ION_IOC_ALLOC", 0xC020_4900),
            ("ION_IOC_FREE", 0xC004_4901),
            ("ION_IOC_MAP", 0xC008_4902),
            ("ION_IOC_SHARE", 0xC008_4904),
            ("ION_IOC_IMPORT", 0xC008_4905),
            ("ION_IOC_CUSTOM", 0xC010_4906),
            ("ION_IOC_SYNC", 0xC008_4907),
            ("ION_IOC_CLEAN_CACHES", 0xC018_4D00),
            ("ION_IOC_INV_CACHES", 0xC018_4D01),
            ("ION_IOC_CLEAN_INV_CACHES", 0xC018_4D02),
        ];
        assert_eq!(IOCTLS, expected);
    }

    #[test]
    fn heap_mask() {
        assert_eq!(ion_heap(ION_SYSTEM_HEAP_ID), Some(0x0200_0000));
        assert_eq!(ion_heap(32), None);
    }
}
