//! The downstream msm FastRPC driver (`/dev/adsprpc-smd`), as on AGNOS (Linux 4.9).
//!
//! Origin: `include/uapi/linux/adsprpc_shared.h` of the msm-4.9 kernel (AGNOS
//! `agnos-kernel-sdm845`), mirrored in tinygrad `extra/dsp/include/adsprpc_shared.h`. Layouts and
//! numbers are those of an LP64 (aarch64) build; pointer fields are carried as `u64`.
//!
//! One device node serves every DSP: after `open`, [`getinfo`] with the channel id
//! ([`CDSP_DOMAIN_ID`] = 3) binds the fd to a channel and an SMMU session; [`control`] with
//! `FASTRPC_CONTROL_KALLOC`, then [`init`] with `FASTRPC_INIT_CREATE` creates the user process
//! on the DSP from the shell ELF. Calls into the DSP are `INVOKE*` on a *handle*: static handles
//! 0 (remotectl), 3 (the reverse-RPC listener), 4 (the current process), or a library handle
//! from remotectl open.
//!
//! Results: `-1` with an errno for local failures (a faulting copy from user memory is reported
//! as `EPERM`, not `EFAULT`); a *positive* return value for DSP-side errors (AEE codes), `EBADF`
//! (9) while the fd is being closed, 39 after SMMU faults and `ECONNRESET` (104) after a DSP
//! restart. Every typed call here maps positive values to [`Error::Returned`].
//!
//! The driver has **no invoke timeout**: a user invoke waits interruptibly forever; an
//! interrupted invoke is parked and can only be resumed by the same thread with the same
//! scalars word, or freed by closing the fd.
//!
//! The upstream driver (`/dev/fastrpc-*`) uses the same `'R'` group with different meanings
//! (upstream INVOKE has the number of downstream MUNMAP). Pick the driver by device node.
#![allow(non_camel_case_types)]

use core::marker::PhantomData;
use core::mem::MaybeUninit;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::check_rc;
use crate::sys::{ioctl_plain, ioctl_with, PlainArg};
use crate::{abi_layout, BorrowedFd, Errno, Error, Fd, Mapping, Scalars, Syscalls};

/// `struct remote_buf`: a user buffer argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_buf {
    /// `void *pv`: the buffer's address.
    pub pv: u64,
    /// `size_t len`: its length in bytes.
    pub len: u64,
}
abi_layout!(remote_buf, "remote_buf", size = 16, align = 8, { pv @ 0, len @ 8 });

/// `struct remote_dma_handle`: a dma-buf handle argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_dma_handle {
    /// The dma-buf fd.
    pub fd: i32,
    /// Offset into the buffer.
    pub offset: u32,
}
abi_layout!(remote_dma_handle, "remote_dma_handle", size = 8, align = 4, { fd @ 0, offset @ 4 });

/// `union remote_arg`: one entry of a call's argument array (16 bytes on LP64).
///
/// The fields are private so that every value has all 16 bytes initialized: build one with
/// [`remote_arg::from_buf`], [`remote_arg::from_dma`] or [`remote_arg::from_h`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable)]
pub union remote_arg {
    buf: remote_buf,
    dma: remote_dma_handle,
    h: u32,
}
abi_layout!(remote_arg, "remote_arg", size = 16, align = 8, { buf @ 0, dma @ 0, h @ 0 });

impl remote_arg {
    /// A buffer entry.
    pub const fn from_buf(buf: remote_buf) -> remote_arg {
        remote_arg { buf }
    }
    /// A dma handle entry; bytes 8..16 are zero.
    pub const fn from_dma(dma: remote_dma_handle) -> remote_arg {
        let pv = (dma.fd as u32 as u64) | ((dma.offset as u64) << 32);
        remote_arg { buf: remote_buf { pv, len: 0 } }
    }
    /// A handle-value entry (`h`); bytes 4..16 are zero.
    pub const fn from_h(h: u32) -> remote_arg {
        remote_arg { buf: remote_buf { pv: h as u64, len: 0 } }
    }
    /// The entry read as a buffer.
    pub const fn buf(&self) -> remote_buf {
        // SAFETY: every constructor writes all 16 bytes through `buf` (and `FromBytes` reads
        // produce initialized bytes), and `remote_buf` is valid for any bytes.
        unsafe { self.buf }
    }
    /// The entry read as a dma handle (its first 8 bytes).
    pub const fn dma(&self) -> remote_dma_handle {
        // SAFETY: the first 8 bytes are always initialized (see `buf`), and any bytes are a
        // valid `remote_dma_handle`.
        unsafe { self.dma }
    }
    /// The entry read as a handle value (its first 4 bytes).
    pub const fn h(&self) -> u32 {
        // SAFETY: the first 4 bytes are always initialized, and any bytes are a valid u32.
        unsafe { self.h }
    }
}

impl Default for remote_arg {
    fn default() -> Self {
        remote_arg::from_buf(remote_buf::default())
    }
}

impl core::fmt::Debug for remote_arg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.buf();
        write!(f, "remote_arg {{ pv: {:#x}, len: {} }}", b.pv, b.len)
    }
}

/// `struct remote_buf64`: a buffer entry of the kernel-to-DSP wire format.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_buf64 {
    /// Address as the DSP sees it.
    pub pv: u64,
    /// Length in bytes.
    pub len: u64,
}
abi_layout!(remote_buf64, "remote_buf64", size = 16, align = 8, { pv @ 0, len @ 8 });

/// `struct remote_dma_handle64`: a handle entry of the kernel-to-DSP wire format.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_dma_handle64 {
    /// The dma-buf fd.
    pub fd: i32,
    /// Offset (the low 32 bits of the user entry's `pv`).
    pub offset: u32,
    /// Length (the user entry's `len`, truncated to 32 bits).
    pub len: u32,
}
abi_layout!(remote_dma_handle64, "remote_dma_handle64", size = 12, align = 4, { fd @ 0, offset @ 4, len @ 8 });

/// `union remote_arg64`: one entry of the argument array the kernel ships to the DSP.
///
/// Fields private for the same reason as [`remote_arg`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable)]
pub union remote_arg64 {
    buf: remote_buf64,
    dma: remote_dma_handle64,
    h: u32,
}
abi_layout!(remote_arg64, "remote_arg64", size = 16, align = 8, { buf @ 0, dma @ 0, h @ 0 });

impl remote_arg64 {
    /// A buffer entry.
    pub const fn from_buf(buf: remote_buf64) -> remote_arg64 {
        remote_arg64 { buf }
    }
    /// A dma handle entry; bytes 12..16 are zero.
    pub const fn from_dma(dma: remote_dma_handle64) -> remote_arg64 {
        let pv = (dma.fd as u32 as u64) | ((dma.offset as u64) << 32);
        remote_arg64 { buf: remote_buf64 { pv, len: dma.len as u64 } }
    }
    /// The entry read as a buffer.
    pub const fn buf(&self) -> remote_buf64 {
        // SAFETY: all 16 bytes are initialized by every constructor; any bytes are valid.
        unsafe { self.buf }
    }
    /// The entry read as a dma handle.
    pub const fn dma(&self) -> remote_dma_handle64 {
        // SAFETY: the first 12 bytes are always initialized; any bytes are valid.
        unsafe { self.dma }
    }
}

impl Default for remote_arg64 {
    fn default() -> Self {
        remote_arg64::from_buf(remote_buf64::default())
    }
}

impl core::fmt::Debug for remote_arg64 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.buf();
        write!(f, "remote_arg64 {{ pv: {:#x}, len: {} }}", b.pv, b.len)
    }
}

/// `struct fastrpc_ioctl_invoke`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke {
    /// Remote handle.
    pub handle: u32,
    /// Scalars word.
    pub sc: u32,
    /// `remote_arg *pra`: LENGTH(sc) entries.
    pub pra: u64,
}
abi_layout!(fastrpc_ioctl_invoke, "fastrpc_ioctl_invoke", size = 16, align = 8, { handle @ 0, sc @ 4, pra @ 8 });

/// `struct fastrpc_ioctl_invoke_fd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke_fd {
    /// The plain invoke.
    pub inv: fastrpc_ioctl_invoke,
    /// `int *fds`: LENGTH(sc) entries (0 and -1 mean "no fd").
    pub fds: u64,
}
abi_layout!(fastrpc_ioctl_invoke_fd, "fastrpc_ioctl_invoke_fd", size = 24, align = 8, { inv @ 0, fds @ 16 });

/// `struct fastrpc_ioctl_invoke_attrs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke_attrs {
    /// The plain invoke.
    pub inv: fastrpc_ioctl_invoke,
    /// `int *fds`.
    pub fds: u64,
    /// `unsigned *attrs`: LENGTH(sc) entries of `FASTRPC_ATTR_*`.
    pub attrs: u64,
}
abi_layout!(fastrpc_ioctl_invoke_attrs, "fastrpc_ioctl_invoke_attrs", size = 32, align = 8, { inv @ 0, fds @ 16, attrs @ 24 });

/// `struct fastrpc_ioctl_invoke_crc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke_crc {
    /// The plain invoke.
    pub inv: fastrpc_ioctl_invoke,
    /// `int *fds`.
    pub fds: u64,
    /// `unsigned *attrs`.
    pub attrs: u64,
    /// `unsigned *crc`: 64 entries written back on success.
    pub crc: u64,
}
abi_layout!(fastrpc_ioctl_invoke_crc, "fastrpc_ioctl_invoke_crc", size = 40, align = 8, { inv @ 0, fds @ 16, attrs @ 24, crc @ 32 });

/// `struct fastrpc_ioctl_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_init {
    /// `FASTRPC_INIT_*`.
    pub flags: u32,
    /// Padding before the 8-byte-aligned `file`.
    pub _pad0: u32,
    /// `uintptr_t file`: address of the shell ELF (in a mapping of `filefd`).
    pub file: u64,
    /// Length of the shell (< 2 MiB).
    pub filelen: u32,
    /// ION fd whose mapping holds `file`.
    pub filefd: i32,
    /// `uintptr_t mem`: must be 0 for CREATE on this kernel.
    pub mem: u64,
    /// Memory length (< 8 MiB; ignored for CREATE).
    pub memlen: u32,
    /// Memory fd (ignored for CREATE).
    pub memfd: i32,
}
abi_layout!(fastrpc_ioctl_init, "fastrpc_ioctl_init", size = 40, align = 8, { flags @ 0, file @ 8, filelen @ 16, filefd @ 20, mem @ 24, memlen @ 32, memfd @ 36 });

/// `struct fastrpc_ioctl_init_attrs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_init_attrs {
    /// The plain init.
    pub init: fastrpc_ioctl_init,
    /// Process attributes.
    pub attrs: i32,
    /// Signature length.
    pub siglen: u32,
}
abi_layout!(fastrpc_ioctl_init_attrs, "fastrpc_ioctl_init_attrs", size = 48, align = 8, { init @ 0, attrs @ 40, siglen @ 44 });

/// `struct fastrpc_ioctl_mmap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_mmap {
    /// ION fd to map (or -1 with `ADSP_MMAP_ADD_PAGES`).
    pub fd: i32,
    /// `ADSP_MMAP_*` flags.
    pub flags: u32,
    /// `uintptr_t vaddrin`: host address of the buffer (0 for kernel-allocated pages).
    pub vaddrin: u64,
    /// `size_t size`.
    pub size: u64,
    /// `uintptr_t vaddrout`: out, the DSP address.
    pub vaddrout: u64,
}
abi_layout!(fastrpc_ioctl_mmap, "fastrpc_ioctl_mmap", size = 32, align = 8, { fd @ 0, flags @ 4, vaddrin @ 8, size @ 16, vaddrout @ 24 });

/// `struct fastrpc_ioctl_mmap_64` (same layout as [`fastrpc_ioctl_mmap`] on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_mmap_64 {
    /// ION fd.
    pub fd: i32,
    /// `ADSP_MMAP_*` flags.
    pub flags: u32,
    /// `uint64_t vaddrin`.
    pub vaddrin: u64,
    /// `size_t size`.
    pub size: u64,
    /// `uint64_t vaddrout` (out).
    pub vaddrout: u64,
}
abi_layout!(fastrpc_ioctl_mmap_64, "fastrpc_ioctl_mmap_64", size = 32, align = 8, { fd @ 0, flags @ 4, vaddrin @ 8, size @ 16, vaddrout @ 24 });

/// `struct fastrpc_ioctl_munmap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_munmap {
    /// `uintptr_t vaddrout`: the DSP address from MMAP.
    pub vaddrout: u64,
    /// `size_t size`.
    pub size: u64,
}
abi_layout!(fastrpc_ioctl_munmap, "fastrpc_ioctl_munmap", size = 16, align = 8, { vaddrout @ 0, size @ 8 });

/// `struct fastrpc_ioctl_munmap_64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_munmap_64 {
    /// `uint64_t vaddrout`.
    pub vaddrout: u64,
    /// `size_t size`.
    pub size: u64,
}
abi_layout!(fastrpc_ioctl_munmap_64, "fastrpc_ioctl_munmap_64", size = 16, align = 8, { vaddrout @ 0, size @ 8 });

/// `struct fastrpc_ioctl_munmap_fd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_munmap_fd {
    /// The fd whose map is released.
    pub fd: i32,
    /// Unused by this driver.
    pub flags: u32,
    /// `uintptr_t va`.
    pub va: u64,
    /// `ssize_t len`.
    pub len: i64,
}
abi_layout!(fastrpc_ioctl_munmap_fd, "fastrpc_ioctl_munmap_fd", size = 24, align = 8, { fd @ 0, flags @ 4, va @ 8, len @ 16 });

/// `struct fastrpc_ioctl_perf`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_perf {
    /// `uintptr_t data`: 12 x i64 of counters (written if non-zero).
    pub data: u64,
    /// Out: the number of keys.
    pub numkeys: u32,
    /// Padding before the 8-byte-aligned `keys`.
    pub _pad0: u32,
    /// `uintptr_t keys`: the key names, `:`-separated (written if non-zero).
    pub keys: u64,
}
abi_layout!(fastrpc_ioctl_perf, "fastrpc_ioctl_perf", size = 24, align = 8, { data @ 0, numkeys @ 8, keys @ 16 });

/// `struct fastrpc_ctrl_latency`, the largest member of `fastrpc_ioctl_control`'s anonymous
/// union; `fastrpc_ctrl_smmu.sharedcb` and `fastrpc_ctrl_kalloc.kalloc_support` alias `enable`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ctrl_latency {
    /// Enable (LATENCY) / `sharedcb` (SMMU) / `kalloc_support` (KALLOC, out).
    pub enable: u32,
    /// Latency in microseconds (LATENCY).
    pub level: u32,
}
abi_layout!(fastrpc_ctrl_latency, "fastrpc_ctrl_latency", size = 8, align = 4, { enable @ 0, level @ 4 });

/// `struct fastrpc_ctrl_smmu`: the SMMU member of `fastrpc_ioctl_control`'s union.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ctrl_smmu {
    /// Share one context bank between sessions.
    pub sharedcb: u32,
}
abi_layout!(fastrpc_ctrl_smmu, "fastrpc_ctrl_smmu", size = 4, align = 4, { sharedcb @ 0 });

/// `struct fastrpc_ctrl_kalloc`: the KALLOC member of `fastrpc_ioctl_control`'s union.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ctrl_kalloc {
    /// Out: whether the kernel allocates memory for the process.
    pub kalloc_support: u32,
}
abi_layout!(fastrpc_ctrl_kalloc, "fastrpc_ctrl_kalloc", size = 4, align = 4, { kalloc_support @ 0 });

/// `struct fastrpc_ioctl_control`.
///
/// The C struct's anonymous union `{ lp, smmu, kalloc }` is stored as its largest member, `lp`;
/// `smmu` ([`fastrpc_ctrl_smmu`]) and `kalloc` ([`fastrpc_ctrl_kalloc`]) are the first 4 bytes
/// of it, and the layout listing names all three at offset 4.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_control {
    /// `FASTRPC_CONTROL_*`.
    pub req: u32,
    /// The anonymous union `{ lp, smmu, kalloc }`, as its largest member.
    pub lp: fastrpc_ctrl_latency,
}
abi_layout!(fastrpc_ioctl_control, "fastrpc_ioctl_control", size = 12, align = 4, { req @ 0, lp @ 4, smmu @ 4 = lp, kalloc @ 4 = lp });

/// The group byte of every FastRPC ioctl.
pub const FASTRPC_IOCTL_MAGIC: u8 = b'R';
/// The downstream adsprpc requests, each declared from (group, number, argument type): the typed calls of
/// this module take these, so a request cannot be sent with an argument of another type.
pub mod ioctl {
    use super::*;
    use crate::ioc::Ioctl;

    /// `FASTRPC_IOCTL_INVOKE`.
    pub const FASTRPC_IOCTL_INVOKE: Ioctl<fastrpc_ioctl_invoke> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 1);
    /// `FASTRPC_IOCTL_MMAP`.
    pub const FASTRPC_IOCTL_MMAP: Ioctl<fastrpc_ioctl_mmap> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 2);
    /// `FASTRPC_IOCTL_MUNMAP`.
    pub const FASTRPC_IOCTL_MUNMAP: Ioctl<fastrpc_ioctl_munmap> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 3);
    /// `FASTRPC_IOCTL_INVOKE_FD`.
    pub const FASTRPC_IOCTL_INVOKE_FD: Ioctl<fastrpc_ioctl_invoke_fd> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 4);
    /// `FASTRPC_IOCTL_SETMODE` (the argument *value* is the mode).
    pub const FASTRPC_IOCTL_SETMODE: Ioctl<u32> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 5);
    /// `FASTRPC_IOCTL_INIT`.
    pub const FASTRPC_IOCTL_INIT: Ioctl<fastrpc_ioctl_init> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 6);
    /// `FASTRPC_IOCTL_INVOKE_ATTRS`.
    pub const FASTRPC_IOCTL_INVOKE_ATTRS: Ioctl<fastrpc_ioctl_invoke_attrs> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 7);
    /// `FASTRPC_IOCTL_GETINFO`.
    pub const FASTRPC_IOCTL_GETINFO: Ioctl<u32> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 8);
    /// `FASTRPC_IOCTL_GETPERF`.
    pub const FASTRPC_IOCTL_GETPERF: Ioctl<fastrpc_ioctl_perf> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 9);
    /// `FASTRPC_IOCTL_INIT_ATTRS`.
    pub const FASTRPC_IOCTL_INIT_ATTRS: Ioctl<fastrpc_ioctl_init_attrs> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 10);
    /// `FASTRPC_IOCTL_INVOKE_CRC`.
    pub const FASTRPC_IOCTL_INVOKE_CRC: Ioctl<fastrpc_ioctl_invoke_crc> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 11);
    /// `FASTRPC_IOCTL_CONTROL`.
    pub const FASTRPC_IOCTL_CONTROL: Ioctl<fastrpc_ioctl_control> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 12);
    /// `FASTRPC_IOCTL_MUNMAP_FD`.
    pub const FASTRPC_IOCTL_MUNMAP_FD: Ioctl<fastrpc_ioctl_munmap_fd> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 13);
    /// `FASTRPC_IOCTL_MMAP_64`.
    pub const FASTRPC_IOCTL_MMAP_64: Ioctl<fastrpc_ioctl_mmap_64> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 14);
    /// `FASTRPC_IOCTL_MUNMAP_64`.
    pub const FASTRPC_IOCTL_MUNMAP_64: Ioctl<fastrpc_ioctl_munmap_64> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 15);
}

/// `FASTRPC_IOCTL_INVOKE` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE: u32 = ioctl::FASTRPC_IOCTL_INVOKE.raw();
/// `FASTRPC_IOCTL_MMAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MMAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MMAP: u32 = ioctl::FASTRPC_IOCTL_MMAP.raw();
/// `FASTRPC_IOCTL_MUNMAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MUNMAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MUNMAP: u32 = ioctl::FASTRPC_IOCTL_MUNMAP.raw();
/// `FASTRPC_IOCTL_INVOKE_FD` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE_FD`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE_FD: u32 = ioctl::FASTRPC_IOCTL_INVOKE_FD.raw();
/// `FASTRPC_IOCTL_SETMODE` as a raw number ([`ioctl::FASTRPC_IOCTL_SETMODE`]), for code that decodes requests.
pub const FASTRPC_IOCTL_SETMODE: u32 = ioctl::FASTRPC_IOCTL_SETMODE.raw();
/// `FASTRPC_IOCTL_INIT` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT: u32 = ioctl::FASTRPC_IOCTL_INIT.raw();
/// `FASTRPC_IOCTL_INVOKE_ATTRS` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE_ATTRS`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE_ATTRS: u32 = ioctl::FASTRPC_IOCTL_INVOKE_ATTRS.raw();
/// `FASTRPC_IOCTL_GETINFO` as a raw number ([`ioctl::FASTRPC_IOCTL_GETINFO`]), for code that decodes requests.
pub const FASTRPC_IOCTL_GETINFO: u32 = ioctl::FASTRPC_IOCTL_GETINFO.raw();
/// `FASTRPC_IOCTL_GETPERF` as a raw number ([`ioctl::FASTRPC_IOCTL_GETPERF`]), for code that decodes requests.
pub const FASTRPC_IOCTL_GETPERF: u32 = ioctl::FASTRPC_IOCTL_GETPERF.raw();
/// `FASTRPC_IOCTL_INIT_ATTRS` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT_ATTRS`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT_ATTRS: u32 = ioctl::FASTRPC_IOCTL_INIT_ATTRS.raw();
/// `FASTRPC_IOCTL_INVOKE_CRC` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE_CRC`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE_CRC: u32 = ioctl::FASTRPC_IOCTL_INVOKE_CRC.raw();
/// `FASTRPC_IOCTL_CONTROL` as a raw number ([`ioctl::FASTRPC_IOCTL_CONTROL`]), for code that decodes requests.
pub const FASTRPC_IOCTL_CONTROL: u32 = ioctl::FASTRPC_IOCTL_CONTROL.raw();
/// `FASTRPC_IOCTL_MUNMAP_FD` as a raw number ([`ioctl::FASTRPC_IOCTL_MUNMAP_FD`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MUNMAP_FD: u32 = ioctl::FASTRPC_IOCTL_MUNMAP_FD.raw();
/// `FASTRPC_IOCTL_MMAP_64` as a raw number ([`ioctl::FASTRPC_IOCTL_MMAP_64`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MMAP_64: u32 = ioctl::FASTRPC_IOCTL_MMAP_64.raw();
/// `FASTRPC_IOCTL_MUNMAP_64` as a raw number ([`ioctl::FASTRPC_IOCTL_MUNMAP_64`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MUNMAP_64: u32 = ioctl::FASTRPC_IOCTL_MUNMAP_64.raw();

/// Every FastRPC request number, by kernel name.
pub const IOCTLS: &[(&str, u32)] = &[
    ("FASTRPC_IOCTL_INVOKE", FASTRPC_IOCTL_INVOKE),
    ("FASTRPC_IOCTL_MMAP", FASTRPC_IOCTL_MMAP),
    ("FASTRPC_IOCTL_MUNMAP", FASTRPC_IOCTL_MUNMAP),
    ("FASTRPC_IOCTL_INVOKE_FD", FASTRPC_IOCTL_INVOKE_FD),
    ("FASTRPC_IOCTL_SETMODE", FASTRPC_IOCTL_SETMODE),
    ("FASTRPC_IOCTL_INIT", FASTRPC_IOCTL_INIT),
    ("FASTRPC_IOCTL_INVOKE_ATTRS", FASTRPC_IOCTL_INVOKE_ATTRS),
    ("FASTRPC_IOCTL_GETINFO", FASTRPC_IOCTL_GETINFO),
    ("FASTRPC_IOCTL_GETPERF", FASTRPC_IOCTL_GETPERF),
    ("FASTRPC_IOCTL_INIT_ATTRS", FASTRPC_IOCTL_INIT_ATTRS),
    ("FASTRPC_IOCTL_INVOKE_CRC", FASTRPC_IOCTL_INVOKE_CRC),
    ("FASTRPC_IOCTL_CONTROL", FASTRPC_IOCTL_CONTROL),
    ("FASTRPC_IOCTL_MUNMAP_FD", FASTRPC_IOCTL_MUNMAP_FD),
    ("FASTRPC_IOCTL_MMAP_64", FASTRPC_IOCTL_MMAP_64),
    ("FASTRPC_IOCTL_MUNMAP_64", FASTRPC_IOCTL_MUNMAP_64),
];

/// `DEVICE_NAME`: the node under /dev.
pub const DEVICE_NAME: &str = "adsprpc-smd";
/// `ADSP_DOMAIN_ID`: channel id of the audio DSP.
pub const ADSP_DOMAIN_ID: u32 = 0;
/// `MDSP_DOMAIN_ID`: channel id of the modem DSP.
pub const MDSP_DOMAIN_ID: u32 = 1;
/// `SDSP_DOMAIN_ID`: channel id of the sensors DSP.
pub const SDSP_DOMAIN_ID: u32 = 2;
/// `CDSP_DOMAIN_ID`: channel id of the compute DSP.
pub const CDSP_DOMAIN_ID: u32 = 3;
/// `NUM_CHANNELS`.
pub const NUM_CHANNELS: u32 = 4;
/// Bit 0 of the GETINFO answer: the session has an SMMU.
pub const FASTRPC_INFO_SMMU: u32 = 1;

/// `FASTRPC_ATTR_NOVA`: buffer with no virtual mapping in userspace (downstream value; upstream
/// uses 256).
pub const FASTRPC_ATTR_NOVA: u32 = 0x1;
/// `FASTRPC_ATTR_NON_COHERENT`.
pub const FASTRPC_ATTR_NON_COHERENT: u32 = 0x2;
/// `FASTRPC_ATTR_COHERENT`.
pub const FASTRPC_ATTR_COHERENT: u32 = 0x4;
/// `FASTRPC_ATTR_KEEP_MAP`.
pub const FASTRPC_ATTR_KEEP_MAP: u32 = 0x8;
/// `FASTRPC_ATTR_NOMAP`.
pub const FASTRPC_ATTR_NOMAP: u32 = 16;

/// `FASTRPC_MODE_PARALLEL`.
pub const FASTRPC_MODE_PARALLEL: u32 = 0;
/// `FASTRPC_MODE_SERIAL` (the default after open).
pub const FASTRPC_MODE_SERIAL: u32 = 1;
/// `FASTRPC_MODE_PROFILE`.
pub const FASTRPC_MODE_PROFILE: u32 = 2;
/// `FASTRPC_MODE_SESSION`.
pub const FASTRPC_MODE_SESSION: u32 = 4;

/// `FASTRPC_INIT_ATTACH`.
pub const FASTRPC_INIT_ATTACH: u32 = 0;
/// `FASTRPC_INIT_CREATE`: create a user process from the shell ELF.
pub const FASTRPC_INIT_CREATE: u32 = 1;
/// `FASTRPC_INIT_CREATE_STATIC`.
pub const FASTRPC_INIT_CREATE_STATIC: u32 = 2;
/// `FASTRPC_INIT_ATTACH_SENSORS`.
pub const FASTRPC_INIT_ATTACH_SENSORS: u32 = 3;

/// `FASTRPC_CONTROL_LATENCY`.
pub const FASTRPC_CONTROL_LATENCY: u32 = 1;
/// `FASTRPC_CONTROL_SMMU`.
pub const FASTRPC_CONTROL_SMMU: u32 = 2;
/// `FASTRPC_CONTROL_KALLOC`.
pub const FASTRPC_CONTROL_KALLOC: u32 = 3;

/// `ADSP_MMAP_HEAP_ADDR`.
pub const ADSP_MMAP_HEAP_ADDR: u32 = 4;
/// `ADSP_MMAP_REMOTE_HEAP_ADDR`.
pub const ADSP_MMAP_REMOTE_HEAP_ADDR: u32 = 8;
/// `ADSP_MMAP_ADD_PAGES`: the kernel allocates the pages itself.
pub const ADSP_MMAP_ADD_PAGES: u32 = 0x1000;

/// Static handle of remotectl (library open/close by URI).
pub const REMOTECTL_HANDLE: u32 = 0;
/// `FASTRPC_STATIC_HANDLE_LISTENER`: the reverse-RPC listener (adsp_listener).
pub const FASTRPC_STATIC_HANDLE_LISTENER: u32 = 3;
/// Static handle of adsp_current_process1 (method 2 = exit).
pub const CURRENT_PROCESS_HANDLE: u32 = 4;
/// `FASTRPC_STATIC_HANDLE_MAX`: library handles are above this.
pub const FASTRPC_STATIC_HANDLE_MAX: u32 = 20;
/// `M_FDLIST`.
pub const M_FDLIST: usize = 16;
/// `M_CRCLIST`.
pub const M_CRCLIST: usize = 64;
/// `INIT_FILELEN_MAX`: the shell must be shorter.
pub const INIT_FILELEN_MAX: u32 = 2 * 1024 * 1024;
/// `INIT_MEMLEN_MAX`.
pub const INIT_MEMLEN_MAX: u32 = 8 * 1024 * 1024;
/// `FASTRPC_ENOSUCH`: returned (positive) when the session recorded SMMU faults.
pub const FASTRPC_ENOSUCH: i32 = 39;
/// Number of 64-bit counters GETPERF writes.
pub const PERF_KEYS: usize = 12;

/// Constants of this module, by kernel name, for `hexrpc abi`.
pub const CONSTANTS: &[(&str, u64)] = &[
    ("CDSP_DOMAIN_ID", CDSP_DOMAIN_ID as u64),
    ("FASTRPC_INFO_SMMU", FASTRPC_INFO_SMMU as u64),
    ("FASTRPC_ATTR_NOVA", FASTRPC_ATTR_NOVA as u64),
    ("FASTRPC_ATTR_NON_COHERENT", FASTRPC_ATTR_NON_COHERENT as u64),
    ("FASTRPC_ATTR_COHERENT", FASTRPC_ATTR_COHERENT as u64),
    ("FASTRPC_ATTR_KEEP_MAP", FASTRPC_ATTR_KEEP_MAP as u64),
    ("FASTRPC_ATTR_NOMAP", FASTRPC_ATTR_NOMAP as u64),
    ("FASTRPC_MODE_PARALLEL", FASTRPC_MODE_PARALLEL as u64),
    ("FASTRPC_MODE_SERIAL", FASTRPC_MODE_SERIAL as u64),
    ("FASTRPC_MODE_PROFILE", FASTRPC_MODE_PROFILE as u64),
    ("FASTRPC_MODE_SESSION", FASTRPC_MODE_SESSION as u64),
    ("FASTRPC_INIT_ATTACH", FASTRPC_INIT_ATTACH as u64),
    ("FASTRPC_INIT_CREATE", FASTRPC_INIT_CREATE as u64),
    ("FASTRPC_INIT_CREATE_STATIC", FASTRPC_INIT_CREATE_STATIC as u64),
    ("FASTRPC_INIT_ATTACH_SENSORS", FASTRPC_INIT_ATTACH_SENSORS as u64),
    ("FASTRPC_CONTROL_LATENCY", FASTRPC_CONTROL_LATENCY as u64),
    ("FASTRPC_CONTROL_SMMU", FASTRPC_CONTROL_SMMU as u64),
    ("FASTRPC_CONTROL_KALLOC", FASTRPC_CONTROL_KALLOC as u64),
    ("ADSP_MMAP_HEAP_ADDR", ADSP_MMAP_HEAP_ADDR as u64),
    ("ADSP_MMAP_REMOTE_HEAP_ADDR", ADSP_MMAP_REMOTE_HEAP_ADDR as u64),
    ("ADSP_MMAP_ADD_PAGES", ADSP_MMAP_ADD_PAGES as u64),
    ("FASTRPC_STATIC_HANDLE_LISTENER", FASTRPC_STATIC_HANDLE_LISTENER as u64),
    ("FASTRPC_STATIC_HANDLE_MAX", FASTRPC_STATIC_HANDLE_MAX as u64),
    ("M_FDLIST", M_FDLIST as u64),
    ("M_CRCLIST", M_CRCLIST as u64),
    ("INIT_FILELEN_MAX", INIT_FILELEN_MAX as u64),
    ("INIT_MEMLEN_MAX", INIT_MEMLEN_MAX as u64),
    ("FASTRPC_ENOSUCH", FASTRPC_ENOSUCH as u64),
];

// SAFETY: request codes, latencies and flags only.
unsafe impl PlainArg for fastrpc_ioctl_control {}
// SAFETY: `vaddrin` is a host address the driver only uses as a key to find or record the map,
// never dereferenced (see `mmap`); the rest are fds, flags, sizes and DSP addresses.
unsafe impl PlainArg for fastrpc_ioctl_mmap {}
// SAFETY: as `fastrpc_ioctl_mmap`.
unsafe impl PlainArg for fastrpc_ioctl_mmap_64 {}
// SAFETY: a DSP address and a size.
unsafe impl PlainArg for fastrpc_ioctl_munmap {}
// SAFETY: a DSP address and a size.
unsafe impl PlainArg for fastrpc_ioctl_munmap_64 {}
// SAFETY: `va` is only matched against the driver's maps, never dereferenced.
unsafe impl PlainArg for fastrpc_ioctl_munmap_fd {}

/// `FASTRPC_IOCTL_GETINFO`: the first call binds the fd to `channel` (must be < 4) and takes a
/// free SMMU session; later calls ignore the input. Returns the info word ([`FASTRPC_INFO_SMMU`]).
///
/// Caller: the owner of a fresh `/dev/adsprpc-smd` fd. Fails with `EPERM` (-1) for a bad
/// channel or when no session is free.
pub fn getinfo<S: Syscalls + ?Sized>(sys: &S, fd: Fd, channel: u32) -> Result<u32, Error> {
    let mut info = channel;
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_GETINFO, &mut info))?;
    Ok(info)
}

/// `FASTRPC_IOCTL_CONTROL` with a caller-built request (LATENCY, SMMU, KALLOC). The driver
/// copies the struct back only for KALLOC.
///
/// Fails with `ENOTTY` for an unknown request, `EPERM` for a zero latency.
pub fn control<S: Syscalls + ?Sized>(sys: &S, fd: Fd, ctrl: &mut fastrpc_ioctl_control) -> Result<(), Error> {
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_CONTROL, ctrl))
}

/// `FASTRPC_IOCTL_CONTROL` with `FASTRPC_CONTROL_KALLOC`: lets the kernel allocate memory for the
/// process. Returns `kalloc_support` as the driver wrote it back.
pub fn control_kalloc<S: Syscalls + ?Sized>(sys: &S, fd: Fd) -> Result<u32, Error> {
    let mut ctrl = fastrpc_ioctl_control { req: FASTRPC_CONTROL_KALLOC, lp: fastrpc_ctrl_latency::default() };
    control(sys, fd, &mut ctrl)?;
    Ok(ctrl.lp.enable)
}

/// `FASTRPC_IOCTL_SETMODE`: the mode travels as the ioctl argument value, not behind a pointer.
///
/// Fails with `ENOTTY` for an unknown mode.
pub fn setmode<S: Syscalls + ?Sized>(sys: &S, fd: Fd, mode: u32) -> Result<(), Error> {
    // SAFETY: the driver reads the argument as a plain number and never dereferences it.
    check_rc(unsafe { sys.ioctl(fd, ioctl::FASTRPC_IOCTL_SETMODE.raw(), mode as usize as *mut core::ffi::c_void) })
}

/// `FASTRPC_IOCTL_GETPERF`: the calling thread's counters and the key names.
///
/// Note: the downstream driver copies a kernel record that contains a list node, so kernel
/// pointers appear among the counters. Returns the number of keys.
pub fn getperf<S: Syscalls + ?Sized>(sys: &S, fd: Fd, data: &mut [i64; PERF_KEYS], keys: &mut [u8; 128]) -> Result<u32, Error> {
    let mut perf = fastrpc_ioctl_perf { data: data.as_mut_ptr() as u64, numkeys: 0, _pad0: 0, keys: keys.as_mut_ptr() as u64 };
    // SAFETY: `perf` is a live struct of the request's size; `data` holds the 96 bytes the
    // driver writes and `keys` more than the 68-byte key string; both outlive the call.
    let rc = unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_GETPERF, &mut perf) };
    check_rc(rc)?;
    Ok(perf.numkeys)
}

/// `FASTRPC_IOCTL_INIT` (`flags` = [`FASTRPC_INIT_CREATE`] for a user process): the shell ELF is
/// the first `filelen` bytes of `shell`, a mapping of the ION buffer `shell_fd`.
///
/// Fails with [`Error::Invalid`] if `filelen` exceeds the mapping; with `EPERM` (-1) if
/// `filelen` is 2 MiB or more, there is no session, or the channel wait expires; `ENOTCONN`
/// while the DSP is restarting; `EINVAL` for donated memory; `ENOTTY` for unknown flags.
pub fn init<S: Syscalls + ?Sized, M: Syscalls>(
    sys: &S,
    fd: Fd,
    flags: u32,
    shell: &Mapping<M>,
    shell_fd: Fd,
    filelen: u32,
) -> Result<(), Error> {
    if filelen as usize > shell.len() {
        return Err(Error::Invalid);
    }
    let mut init =
        fastrpc_ioctl_init { flags, _pad0: 0, file: shell.addr() as u64, filelen, filefd: shell_fd.0, mem: 0, memlen: 0, memfd: -1 };
    // SAFETY: `init` is a live struct of the request's size; its only user pointer is `file`,
    // which points at `filelen` readable bytes of a live mapping of `shell_fd` (checked above).
    let rc = unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INIT, &mut init) };
    check_rc(rc)
}

/// `FASTRPC_IOCTL_INIT_ATTRS`: [`init`] with process attributes and a signature length.
#[allow(clippy::too_many_arguments)] // one parameter per field of the C struct
pub fn init_attrs<S: Syscalls + ?Sized, M: Syscalls>(
    sys: &S,
    fd: Fd,
    flags: u32,
    shell: &Mapping<M>,
    shell_fd: Fd,
    filelen: u32,
    attrs: i32,
    siglen: u32,
) -> Result<(), Error> {
    if filelen as usize > shell.len() {
        return Err(Error::Invalid);
    }
    let mut init = fastrpc_ioctl_init_attrs {
        init: fastrpc_ioctl_init { flags, _pad0: 0, file: shell.addr() as u64, filelen, filefd: shell_fd.0, mem: 0, memlen: 0, memfd: -1 },
        attrs,
        siglen,
    };
    // SAFETY: as in `init`.
    let rc = unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INIT_ATTRS, &mut init) };
    check_rc(rc)
}

/// `FASTRPC_IOCTL_MMAP`: maps `size` bytes of the ION buffer `buf` (or, with
/// [`ADSP_MMAP_ADD_PAGES`] and `buf` = -1, kernel-allocated pages) into the DSP process.
/// Returns `vaddrout`, the DSP address.
///
/// `vaddrin` is a host address the driver only uses to find or record the map; it is not
/// dereferenced. Fails with `EINVAL` (ADD_PAGES with a non-zero vaddrin), `EPERM` (size 0,
/// no session), `ENOMEM`.
///
/// Note: the indexed AGNOS driver never writes `vaddrout` back (a newer CAF revision does);
/// callers must not trust a zero or unchanged value. See kernel-abi.md 2.9.
pub fn mmap<S: Syscalls + ?Sized>(sys: &S, fd: Fd, buf: Fd, flags: u32, vaddrin: u64, size: u64) -> Result<u64, Error> {
    let mut m = fastrpc_ioctl_mmap { fd: buf.0, flags, vaddrin, size, vaddrout: 0 };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MMAP, &mut m))?;
    Ok(m.vaddrout)
}

/// `FASTRPC_IOCTL_MMAP_64`: [`mmap`] with 64-bit addresses (identical on LP64).
pub fn mmap_64<S: Syscalls + ?Sized>(sys: &S, fd: Fd, buf: Fd, flags: u32, vaddrin: u64, size: u64) -> Result<u64, Error> {
    let mut m = fastrpc_ioctl_mmap_64 { fd: buf.0, flags, vaddrin, size, vaddrout: 0 };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MMAP_64, &mut m))?;
    Ok(m.vaddrout)
}

/// `FASTRPC_IOCTL_MUNMAP`: removes a DSP mapping made by [`mmap`], matched exactly by
/// (vaddrout, size). Fails with `EPERM` (-1) if no such map exists.
pub fn munmap<S: Syscalls + ?Sized>(sys: &S, fd: Fd, vaddrout: u64, size: u64) -> Result<(), Error> {
    let mut m = fastrpc_ioctl_munmap { vaddrout, size };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MUNMAP, &mut m))
}

/// `FASTRPC_IOCTL_MUNMAP_64`.
pub fn munmap_64<S: Syscalls + ?Sized>(sys: &S, fd: Fd, vaddrout: u64, size: u64) -> Result<(), Error> {
    let mut m = fastrpc_ioctl_munmap_64 { vaddrout, size };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MUNMAP_64, &mut m))
}

/// `FASTRPC_IOCTL_MUNMAP_FD`: drops one reference of the driver's map of `buf` covering
/// `[va, va + len)`; no DSP message. Fails with `EPERM` (-1) if none covers it.
pub fn munmap_fd<S: Syscalls + ?Sized>(sys: &S, fd: Fd, buf: Fd, va: u64, len: i64) -> Result<(), Error> {
    let mut m = fastrpc_ioctl_munmap_fd { fd: buf.0, flags: 0, va, len };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MUNMAP_FD, &mut m))
}

/// Why an argument could not be added to [`InvokeArgs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ArgsError {
    /// The fixed capacity is used up.
    Full,
    /// The scalars word cannot count this many of this kind (255 buffers, 15 handles).
    TooMany,
    /// Arguments must be added in the order in-buffers, out-buffers, in-handles, out-handles.
    Order,
    /// The method index is above 31.
    Method,
    /// A handle needs a real fd (not 0, not negative).
    NoFd,
    /// A buffer range does not lie inside its mapping.
    Range,
}

impl core::fmt::Display for ArgsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ArgsError::Full => "the argument list's fixed capacity is used up",
            ArgsError::TooMany => "the scalars word cannot count this many arguments of this kind",
            ArgsError::Order => "arguments out of order (in-buffers, out-buffers, in-handles, out-handles)",
            ArgsError::Method => "method index above 31",
            ArgsError::NoFd => "a handle argument needs a real fd",
            ArgsError::Range => "a buffer range does not lie inside its mapping",
        })
    }
}

impl core::error::Error for ArgsError {}

/// The method and the per-kind counts of an argument list under construction (both drivers'
/// `InvokeArgs`, and the HAL's driver-neutral call): the ABI order, the scalars word's limits
/// and the list's capacity are checked here, once.
#[derive(Clone, Copy, Debug)]
pub struct ArgCounts {
    method: u8,
    /// In-buffers, out-buffers, in-handles, out-handles.
    counts: [u8; 4],
}

impl ArgCounts {
    /// No argument yet, for `method` (0..=31).
    #[inline(always)]
    pub const fn new(method: u8) -> Result<Self, ArgsError> {
        if method > Scalars::MAX_METHOD {
            return Err(ArgsError::Method);
        }
        Ok(ArgCounts { method, counts: [0; 4] })
    }

    /// Counts one more argument of `kind` (0..4, the ABI order) in a list of capacity `cap` and
    /// returns its index, or why it cannot be added (then nothing is counted).
    #[inline]
    pub fn add(&mut self, kind: usize, cap: usize) -> Result<usize, ArgsError> {
        if self.counts[kind + 1..].iter().any(|&c| c != 0) {
            return Err(ArgsError::Order);
        }
        let max = if kind < 2 { Scalars::MAX_BUFS } else { Scalars::MAX_HANDLES };
        if self.counts[kind] >= max {
            return Err(ArgsError::TooMany);
        }
        let i = self.len();
        if i >= cap {
            return Err(ArgsError::Full);
        }
        self.counts[kind] += 1;
        Ok(i)
    }

    /// Checks that `n` more arguments of `kind` fit (as `n` calls of [`add`](Self::add) would)
    /// and returns the index of the first, counting nothing: [`commit`](Self::commit) counts them
    /// once they are written.
    #[inline]
    pub fn add_many(&self, kind: usize, n: usize, cap: usize) -> Result<usize, ArgsError> {
        if n == 0 {
            return Ok(self.len());
        }
        if self.counts[kind + 1..].iter().any(|&c| c != 0) {
            return Err(ArgsError::Order);
        }
        let max = if kind < 2 { Scalars::MAX_BUFS } else { Scalars::MAX_HANDLES };
        if self.counts[kind] as usize + n > max as usize {
            return Err(ArgsError::TooMany);
        }
        let i = self.len();
        if i + n > cap {
            return Err(ArgsError::Full);
        }
        Ok(i)
    }

    /// Counts `n` arguments of `kind` that [`add_many`](Self::add_many) accepted.
    #[inline]
    pub fn commit(&mut self, kind: usize, n: usize) {
        self.counts[kind] += n as u8;
    }

    /// Arguments counted (`REMOTE_SCALARS_LENGTH`).
    #[inline]
    pub fn len(&self) -> usize {
        self.counts.iter().map(|&c| c as usize).sum()
    }

    /// True if nothing was counted.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The method index.
    #[inline]
    pub const fn method(&self) -> u8 {
        self.method
    }

    /// The scalars word.
    pub fn scalars(&self) -> Scalars {
        match Scalars::new(self.method, self.counts[0], self.counts[1], self.counts[2], self.counts[3]) {
            Some(sc) => sc,
            // Unreachable: `new` and `add` keep every count within its field.
            None => Scalars::from_raw(0),
        }
    }
}

/// The argument list of one FastRPC call, in fixed capacity: exactly the `remote_arg`, `fds` and
/// `attrs` arrays an `INVOKE*` request points at, and the counts that make the scalars word.
///
/// Buffers are borrowed for `'a`, so they outlive the ioctl that uses them: an input buffer is
/// only read by the driver, an output buffer is written back when the DSP returned 0. Arguments
/// must be added in ABI order (in-buffers, out-buffers, in-handles, out-handles); buffers carry
/// fd -1 (the driver copies them), handles carry their fd and attribute.
///
/// Entries are written as arguments are added and only the first [`len`](Self::len) are ever
/// read (by the accessors and by the driver, which reads `REMOTE_SCALARS_LENGTH(sc)` entries), so
/// the unused capacity is never initialised: an empty list costs nothing to make.
pub struct InvokeArgs<'a, const CAP: usize> {
    pra: [MaybeUninit<remote_arg>; CAP],
    fds: [MaybeUninit<i32>; CAP],
    attrs: [MaybeUninit<u32>; CAP],
    counts: ArgCounts,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a, const CAP: usize> InvokeArgs<'a, CAP> {
    /// An empty argument list for `method` (0..=31).
    #[inline(always)]
    pub fn new(method: u8) -> Result<Self, ArgsError> {
        Ok(InvokeArgs {
            pra: [const { MaybeUninit::uninit() }; CAP],
            fds: [const { MaybeUninit::uninit() }; CAP],
            attrs: [const { MaybeUninit::uninit() }; CAP],
            counts: ArgCounts::new(method)?,
            _borrow: PhantomData,
        })
    }

    /// Writes entry `i` (`i < CAP`: the index `ArgCounts::add` returned, which is also the
    /// current length, so the initialised entries stay exactly `0..len`).
    #[inline(always)]
    fn write(&mut self, i: usize, arg: remote_arg, fd: i32, attr: u32) {
        self.pra[i] = MaybeUninit::new(arg);
        self.fds[i] = MaybeUninit::new(fd);
        self.attrs[i] = MaybeUninit::new(attr);
    }

    #[inline]
    fn push(&mut self, kind: usize, arg: remote_arg, fd: i32, attr: u32) -> Result<(), ArgsError> {
        let i = self.counts.add(kind, CAP)?;
        self.write(i, arg, fd, attr);
        Ok(())
    }

    /// Adds one output handle per fd in `fds`, each at offset 0 with attribute `attr` (what a
    /// kernel launch's buffers are): [`out_handle`](Self::out_handle) in a loop, with the order
    /// and capacity checked once. On an error nothing is added.
    #[inline]
    pub fn out_handles(&mut self, fds: &[Fd], attr: u32) -> Result<&mut Self, ArgsError> {
        let first = self.counts.add_many(3, fds.len(), CAP)?;
        if fds.iter().any(|fd| fd.0 <= 0) {
            return Err(ArgsError::NoFd);
        }
        for (k, fd) in fds.iter().enumerate() {
            self.write(first + k, remote_arg::from_buf(remote_buf { pv: 0, len: 0 }), fd.0, attr);
        }
        self.counts.commit(3, fds.len());
        Ok(self)
    }

    /// Adds an input buffer (copied to the DSP).
    #[inline]
    pub fn input(&mut self, buf: &'a [u8]) -> Result<&mut Self, ArgsError> {
        let arg = remote_arg::from_buf(remote_buf { pv: buf.as_ptr() as u64, len: buf.len() as u64 });
        self.push(0, arg, -1, 0)?;
        Ok(self)
    }

    /// Adds an output buffer (copied back when the DSP returns 0).
    #[inline]
    pub fn output(&mut self, buf: &'a mut [u8]) -> Result<&mut Self, ArgsError> {
        let arg = remote_arg::from_buf(remote_buf { pv: buf.as_mut_ptr() as u64, len: buf.len() as u64 });
        self.push(1, arg, -1, 0)?;
        Ok(self)
    }

    /// Adds an input handle: a dma-buf fd the driver maps for the DSP, with `FASTRPC_ATTR_*`
    /// bits. The user-side entry is left zero, as tinygrad does (the driver reads the low 32 bits
    /// of its `pv` as the DSP-side `dma.offset`, and its `len` as `dma.len`).
    pub fn in_handle(&mut self, fd: Fd, attr: u32) -> Result<&mut Self, ArgsError> {
        self.in_handle_at(fd, 0, attr)
    }

    /// Adds an output handle (see [`in_handle`](Self::in_handle)).
    pub fn out_handle(&mut self, fd: Fd, attr: u32) -> Result<&mut Self, ArgsError> {
        self.out_handle_at(fd, 0, attr)
    }

    /// [`in_handle`](Self::in_handle) whose entry carries `offset` in the low 32 bits of `pv`
    /// (the DSP-side `dma.offset`); `len` stays 0.
    #[inline]
    pub fn in_handle_at(&mut self, fd: Fd, offset: u32, attr: u32) -> Result<&mut Self, ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        self.push(2, remote_arg::from_buf(remote_buf { pv: u64::from(offset), len: 0 }), fd.0, attr)?;
        Ok(self)
    }

    /// [`out_handle`](Self::out_handle) with an offset (see [`in_handle_at`](Self::in_handle_at)).
    #[inline]
    pub fn out_handle_at(&mut self, fd: Fd, offset: u32, attr: u32) -> Result<&mut Self, ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        self.push(3, remote_arg::from_buf(remote_buf { pv: u64::from(offset), len: 0 }), fd.0, attr)?;
        Ok(self)
    }

    /// Number of entries (`REMOTE_SCALARS_LENGTH`).
    #[inline]
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True if no argument was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The scalars word describing these arguments.
    pub fn scalars(&self) -> Scalars {
        self.counts.scalars()
    }

    /// The `remote_arg` entries.
    pub fn pra(&self) -> &[remote_arg] {
        // SAFETY: entries 0..len were written (`write` is the only writer and fills the entry
        // at the current length before the count grows); MaybeUninit<T> has T's layout.
        unsafe { core::slice::from_raw_parts(self.pra.as_ptr().cast::<remote_arg>(), self.len()) }
    }
    /// The `fds` entries.
    pub fn fds(&self) -> &[i32] {
        // SAFETY: as in `pra`.
        unsafe { core::slice::from_raw_parts(self.fds.as_ptr().cast::<i32>(), self.len()) }
    }
    /// The `attrs` entries.
    pub fn attrs(&self) -> &[u32] {
        // SAFETY: as in `pra`.
        unsafe { core::slice::from_raw_parts(self.attrs.as_ptr().cast::<u32>(), self.len()) }
    }

    /// The request pointing at this list (which the caller keeps borrowed for the call).
    #[inline(always)]
    fn request(&mut self) -> Request {
        Request {
            sc: self.scalars().raw(),
            pra: self.pra.as_mut_ptr() as u64,
            fds: self.fds.as_mut_ptr() as u64,
            attrs: self.attrs.as_mut_ptr() as u64,
        }
    }
}

/// The argument arrays of a kernel launch kept in the caller's own storage: `FIRST` buffer
/// arguments, given to each [`invoke_attrs`](Self::invoke_attrs) and borrowed only for that call,
/// then up to `CAP - FIRST` output handles, written when the launch is packed
/// ([`handles`](Self::handles)) and kept until they are written again.
///
/// This is [`InvokeArgs`] for a call whose shape is fixed (a launch: input buffers, output
/// buffers, output handles): the handle entries are written once, in the packing loop that has
/// the fds at hand, and an invoke only writes the `FIRST` buffer entries, takes the scalars word
/// from the counts it was given and makes the one ioctl, with no per-argument bookkeeping.
/// As in `InvokeArgs`, only the entries in use are ever written or read.
#[derive(Clone, Copy)]
pub struct LaunchFrame<const FIRST: usize, const CAP: usize> {
    pra: [MaybeUninit<remote_arg>; CAP],
    fds: [MaybeUninit<i32>; CAP],
    attrs: [MaybeUninit<u32>; CAP],
    /// Entries `FIRST..FIRST + handles` are written.
    handles: usize,
}

impl<const FIRST: usize, const CAP: usize> LaunchFrame<FIRST, CAP> {
    /// The frame's shape fits the scalars word: at most 255 buffers and 15 handles.
    const SHAPE: () = assert!(
        FIRST <= CAP && FIRST <= Scalars::MAX_BUFS as usize && CAP - FIRST <= Scalars::MAX_HANDLES as usize,
        "a launch frame holds at most 255 buffers and 15 output handles"
    );

    /// A frame without handles.
    #[inline(always)]
    pub const fn new() -> Self {
        let () = Self::SHAPE;
        LaunchFrame {
            pra: [const { MaybeUninit::uninit() }; CAP],
            fds: [const { MaybeUninit::uninit() }; CAP],
            attrs: [const { MaybeUninit::uninit() }; CAP],
            handles: 0,
        }
    }

    /// Writes the output handles anew: the frame holds the handles pushed to the writer (none
    /// until the first push) once the writer is dropped.
    #[inline(always)]
    pub fn handles(&mut self) -> HandleWriter<'_, FIRST, CAP> {
        HandleWriter { frame: self, at: 0 }
    }

    /// Number of output handles.
    #[inline(always)]
    pub fn handle_count(&self) -> usize {
        self.handles
    }

    /// The output handles' fds, in order.
    pub fn handle_fds(&self) -> &[Fd] {
        // SAFETY: entries FIRST..FIRST + handles were written by `HandleWriter::push` (which
        // never passes CAP) before `handles` was set; `Fd` is `repr(transparent)` over i32 and
        // MaybeUninit<i32> has i32's layout.
        unsafe { core::slice::from_raw_parts(self.fds.as_ptr().add(FIRST).cast::<Fd>(), self.handles) }
    }

    /// The output handles' attributes, in order.
    pub fn handle_attrs(&self) -> &[u32] {
        // SAFETY: as in `handle_fds`.
        unsafe { core::slice::from_raw_parts(self.attrs.as_ptr().add(FIRST).cast::<u32>(), self.handles) }
    }

    /// `FASTRPC_IOCTL_INVOKE_ATTRS` of method `method` on library `handle` through `dev`: the
    /// input buffers `ins`, the output buffers `outs` (`IN + OUT` must be `FIRST`), then the
    /// frame's output handles. Runs to completion as [`invoke_attrs`] does (an interrupted call
    /// is resumed with the same arguments). `Error::Invalid` for a method above 31, before any
    /// system call.
    #[inline]
    pub fn invoke_attrs<S: Syscalls + ?Sized, const IN: usize, const OUT: usize>(
        &mut self,
        sys: &S,
        dev: Fd,
        handle: u32,
        method: u8,
        ins: [&[u8]; IN],
        outs: [&mut [u8]; OUT],
    ) -> Result<(), Error> {
        const { assert!(IN + OUT == FIRST, "the buffers given must fill the frame's buffer entries") };
        if method > Scalars::MAX_METHOD {
            return Err(Error::Invalid);
        }
        // IN, OUT <= FIRST <= 255 and handles <= CAP - FIRST <= 15 (SHAPE): every count fits
        // its field of the scalars word (no attribute bits, no input handles).
        let sc = (u32::from(method) << 24) | ((IN as u32) << 16) | ((OUT as u32) << 8) | (self.handles as u32 & 0xf);
        for (k, b) in ins.iter().enumerate() {
            self.pra[k] = MaybeUninit::new(remote_arg::from_buf(remote_buf { pv: b.as_ptr() as u64, len: b.len() as u64 }));
            self.fds[k] = MaybeUninit::new(-1);
            self.attrs[k] = MaybeUninit::new(0);
        }
        for (k, b) in outs.iter().enumerate() {
            self.pra[IN + k] = MaybeUninit::new(remote_arg::from_buf(remote_buf { pv: b.as_ptr() as u64, len: b.len() as u64 }));
            self.fds[IN + k] = MaybeUninit::new(-1);
            self.attrs[IN + k] = MaybeUninit::new(0);
        }
        // Entries 0..FIRST were just written from `ins` and `outs`, which stay borrowed until
        // this function returns; entries FIRST..FIRST + handles by the handle writer.
        let req =
            Request { sc, pra: self.pra.as_mut_ptr() as u64, fds: self.fds.as_mut_ptr() as u64, attrs: self.attrs.as_mut_ptr() as u64 };
        invoke_until(sys, Target::Raw(dev), handle, req, Variant::Attrs, None, &never)
    }
}

impl<const FIRST: usize, const CAP: usize> Default for LaunchFrame<FIRST, CAP> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const FIRST: usize, const CAP: usize> core::fmt::Debug for LaunchFrame<FIRST, CAP> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LaunchFrame").field("handle_fds", &self.handle_fds()).field("handle_attrs", &self.handle_attrs()).finish()
    }
}

/// Writes a [`LaunchFrame`]'s output handles (see [`LaunchFrame::handles`]); the handles pushed
/// are the frame's when the writer is dropped.
pub struct HandleWriter<'f, const FIRST: usize, const CAP: usize> {
    frame: &'f mut LaunchFrame<FIRST, CAP>,
    at: usize,
}

impl<const FIRST: usize, const CAP: usize> HandleWriter<'_, FIRST, CAP> {
    /// Appends an output handle: `fd` at offset 0 (its `remote_arg` entry zero) with
    /// `FASTRPC_ATTR_*` bits `attr`. `NoFd` for a number that is not positive, `Full` past the
    /// frame's capacity; then nothing is added.
    #[inline(always)]
    pub fn push(&mut self, fd: Fd, attr: u32) -> Result<(), ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        let i = FIRST + self.at;
        if i >= CAP {
            return Err(ArgsError::Full);
        }
        self.frame.pra[i] = MaybeUninit::new(remote_arg::from_buf(remote_buf { pv: 0, len: 0 }));
        self.frame.fds[i] = MaybeUninit::new(fd.0);
        self.frame.attrs[i] = MaybeUninit::new(attr);
        self.at += 1;
        Ok(())
    }
}

impl<const FIRST: usize, const CAP: usize> Drop for HandleWriter<'_, FIRST, CAP> {
    #[inline(always)]
    fn drop(&mut self) {
        // Entries FIRST..FIRST + at were written by `push`.
        self.frame.handles = self.at;
    }
}

/// Which INVOKE variant a call uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Plain,
    Fd,
    Attrs,
}

/// What one INVOKE request points at: the scalars word and the three arrays, taken from an
/// argument list ([`InvokeArgs`] or [`LaunchFrame`]) that stays borrowed for the whole call.
#[derive(Clone, Copy)]
struct Request {
    sc: u32,
    pra: u64,
    fds: u64,
    attrs: u64,
}

/// One INVOKE ioctl of `req`, as it is (no retry).
#[inline(always)]
fn invoke_once<S: Syscalls + ?Sized>(
    sys: &S,
    fd: Fd,
    handle: u32,
    req: Request,
    variant: Variant,
    crc: Option<&mut [u32; M_CRCLIST]>,
) -> Result<(), Error> {
    let inv = fastrpc_ioctl_invoke { handle, sc: req.sc, pra: req.pra };
    let (fds, attrs) = (req.fds, req.attrs);
    // SAFETY (all arms): the argument struct is live and of the request's size; `pra` points at
    // the argument list's `remote_arg` array, whose LENGTH(sc) entries are initialized and
    // describe buffers the list borrows (inputs readable, outputs writable); `fds`/`attrs` point
    // at LENGTH(sc) initialized entries of the same list; `crc` at the 64 writable u32 the driver
    // copies back. The callers in this module hold the list borrowed until they return and never
    // return while the driver may still write through these pointers: an interrupted (parked)
    // call is resumed with the same list, or its file is retired first.
    let rc = match (variant, crc) {
        (_, Some(crc)) => {
            let mut x = fastrpc_ioctl_invoke_crc { inv, fds, attrs, crc: crc.as_mut_ptr() as u64 };
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE_CRC, &mut x) }
        }
        (Variant::Plain, None) => {
            let mut x = inv;
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE, &mut x) }
        }
        (Variant::Fd, None) => {
            let mut x = fastrpc_ioctl_invoke_fd { inv, fds };
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE_FD, &mut x) }
        }
        (Variant::Attrs, None) => {
            let mut x = fastrpc_ioctl_invoke_attrs { inv, fds, attrs };
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE_ATTRS, &mut x) }
        }
    };
    check_rc(rc)
}

/// Runs an invoke to completion. On `EINTR` the driver has parked the call, keeping the user
/// pointers of its output buffers, and would resume it for the next call of this thread with
/// the same scalars word on this file; so the call is resumed at once with the same `args`,
/// unless `abandon()` says to give up, in which case the file is first retired
/// ([`Syscalls::retire`]) so that nothing can ever resume it, and `EINTR` is returned. If the
/// file cannot be retired, the call is resumed anyway (soundness over promptness) and the
/// failure is logged.
#[inline(always)]
fn invoke_until<S: Syscalls + ?Sized>(
    sys: &S,
    fd: Target<'_>,
    handle: u32,
    req: Request,
    variant: Variant,
    mut crc: Option<&mut [u32; M_CRCLIST]>,
    abandon: &dyn Fn() -> bool,
) -> Result<(), Error> {
    let mut retire_failed = false;
    loop {
        match invoke_once(sys, fd.raw(), handle, req, variant, crc.as_deref_mut()) {
            Err(Error::Os(Errno::EINTR)) => {
                if let Target::Owned(owned) = fd {
                    if !retire_failed && abandon() {
                        match sys.retire(owned) {
                            Ok(()) => return Err(Error::Os(Errno::EINTR)),
                            Err(e) => {
                                log::error!("cannot retire fd {} to abandon an interrupted call ({e}); resuming it instead", owned.raw().0);
                                retire_failed = true;
                            }
                        }
                    }
                }
            }
            r => return r,
        }
    }
}

fn never() -> bool {
    false
}

/// The descriptor an invoke goes to: a plain number (the call is always resumed), or a borrow
/// of its owner's descriptor (the call may be abandoned by retiring it).
#[derive(Clone, Copy)]
enum Target<'a> {
    Raw(Fd),
    Owned(BorrowedFd<'a>),
}

impl Target<'_> {
    fn raw(self) -> Fd {
        match self {
            Target::Raw(fd) => fd,
            Target::Owned(b) => b.raw(),
        }
    }
}

/// `FASTRPC_IOCTL_INVOKE`: calls `handle` with `args` (no fds: handle arguments fail with -1).
///
/// Caller: a thread of the process that created the DSP process on this fd. Blocks until the
/// DSP answers: the driver has no timeout, and a signal that interrupts the call (`EINTR`)
/// only parks it, so the call is resumed here with the same arguments (see
/// [`invoke_abandonable`] to give up). Fails with `EPERM` (-1: no session, a faulting copy, a bad
/// buffer, or a different call of this thread parked on this file), a positive AEE code from the
/// DSP, +`EBADF` while closing, +39 after SMMU faults, +`ECONNRESET` after a DSP restart.
///
/// The DSP controls how many bytes the downstream driver copies back into an output buffer
/// (the length is read back from shared metadata): on a hostile DSP an output buffer can be
/// overrun. This is a property of the driver that no host code can prevent.
pub fn invoke<S: Syscalls + ?Sized, const CAP: usize>(sys: &S, fd: Fd, handle: u32, args: &mut InvokeArgs<'_, CAP>) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Plain, None, &never)
}

/// [`invoke`] that gives up when interrupted while `abandon()` returns true: the descriptor is
/// then retired ([`Syscalls::retire`]) before `EINTR` is returned, so the parked call can never
/// be resumed into buffers that are gone; the channel is unusable afterwards and the caller must
/// close it. This is how a deadline or a stop ends a blocked call.
pub fn invoke_abandonable<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: BorrowedFd<'_>,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
    abandon: &dyn Fn() -> bool,
) -> Result<(), Error> {
    invoke_until(sys, Target::Owned(fd), handle, args.request(), Variant::Plain, None, abandon)
}

/// `FASTRPC_IOCTL_INVOKE_FD`: [`invoke`] with the `fds` array.
pub fn invoke_fd<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: Fd,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Fd, None, &never)
}

/// `FASTRPC_IOCTL_INVOKE_ATTRS`: [`invoke`] with the `fds` and `attrs` arrays (what a kernel
/// launch uses: buffer handles travel as fds with [`FASTRPC_ATTR_NOVA`]).
pub fn invoke_attrs<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: Fd,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Attrs, None, &never)
}

/// [`invoke_attrs`] that gives up when interrupted while `abandon()` returns true (see
/// [`invoke_abandonable`]).
pub fn invoke_attrs_abandonable<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: BorrowedFd<'_>,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
    abandon: &dyn Fn() -> bool,
) -> Result<(), Error> {
    invoke_until(sys, Target::Owned(fd), handle, args.request(), Variant::Attrs, None, abandon)
}

/// `FASTRPC_IOCTL_INVOKE_CRC`: [`invoke_attrs`] plus the 64-entry CRC list written back on
/// success.
pub fn invoke_crc<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: Fd,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
    crc: &mut [u32; M_CRCLIST],
) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Attrs, Some(crc), &never)
}

/// Reads an errno-or-value result of a raw call made through [`Syscalls::ioctl`] the way the
/// typed calls do. Exposed for callers that build raw requests (the bench's fidelity tests).
pub fn check(rc: Result<i32, Errno>) -> Result<(), Error> {
    check_rc(rc)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    /// The request numbers of the kernel header for aarch64 (kernel-abi.md 2.2).
    #[test]
    fn request_numbers_match_the_headers() {
        let expected: &[(&str, u32)] = &[
            ("FASTRPC_IOCTL_INVOKE", 0xC010_5201),
            ("FASTRPC_IOCTL_MMAP", 0xC020_5202),
            ("FASTRPC_IOCTL_MUNMAP", 0xC010_5203),
            ("FASTRPC_IOCTL_INVOKE_FD", 0xC018_5204),
            ("FASTRPC_IOCTL_SETMODE", 0xC004_5205),
            ("FASTRPC_IOCTL_INIT", 0xC028_5206),
            ("FASTRPC_IOCTL_INVOKE_ATTRS", 0xC020_5207),
            ("FASTRPC_IOCTL_GETINFO", 0xC004_5208),
            ("FASTRPC_IOCTL_GETPERF", 0xC018_5209),
            ("FASTRPC_IOCTL_INIT_ATTRS", 0xC030_520A),
            ("FASTRPC_IOCTL_INVOKE_CRC", 0xC028_520B),
            ("FASTRPC_IOCTL_CONTROL", 0xC00C_520C),
            ("FASTRPC_IOCTL_MUNMAP_FD", 0xC018_520D),
            ("FASTRPC_IOCTL_MMAP_64", 0xC020_520E),
            ("FASTRPC_IOCTL_MUNMAP_64", 0xC010_520F),
        ];
        assert_eq!(IOCTLS, expected);
    }

    #[test]
    fn remote_arg_views_share_bytes() {
        let a = remote_arg::from_dma(remote_dma_handle { fd: 7, offset: 0x1000 });
        assert_eq!(a.buf(), remote_buf { pv: 0x0000_1000_0000_0007, len: 0 });
        assert_eq!(a.h(), 7);
        assert_eq!(a.dma(), remote_dma_handle { fd: 7, offset: 0x1000 });
        let w = remote_arg64::from_dma(remote_dma_handle64 { fd: -1, offset: 3, len: 9 });
        assert_eq!(w.dma(), remote_dma_handle64 { fd: -1, offset: 3, len: 9 });
    }

    #[test]
    fn invoke_args_order_and_scalars() {
        let input = [1u8; 8];
        let mut out = [0u8; 16];
        let mut args = InvokeArgs::<'_, 8>::new(2).unwrap();
        args.input(&input).unwrap();
        args.output(&mut out).unwrap();
        assert_eq!(args.input(&input).err(), Some(ArgsError::Order));
        args.out_handle(Fd(5), FASTRPC_ATTR_NOVA).unwrap();
        assert_eq!(args.in_handle(Fd(6), 0).err(), Some(ArgsError::Order));
        assert_eq!(args.out_handle(Fd(0), 0).err(), Some(ArgsError::NoFd));
        assert_eq!(args.scalars().raw(), 0x0201_0101);
        assert_eq!(args.fds(), &[-1, -1, 5]);
        assert_eq!(args.attrs(), &[0, 0, 1]);
        assert_eq!(args.pra()[0].buf().len, 8);
        assert_eq!(args.pra()[1].buf().len, 16);
        assert!(InvokeArgs::<'_, 1>::new(32).is_err());
        let mut small = InvokeArgs::<'_, 1>::new(0).unwrap();
        small.input(&input).unwrap();
        assert_eq!(small.input(&input).err(), Some(ArgsError::Full));
        let mut many = InvokeArgs::<'_, 20>::new(0).unwrap();
        for _ in 0..15 {
            many.out_handle(Fd(3), 0).unwrap();
        }
        assert_eq!(many.out_handle(Fd(3), 0).err(), Some(ArgsError::TooMany));
        let mut at = InvokeArgs::<'_, 2>::new(0).unwrap();
        at.in_handle_at(Fd(4), 64, 0).unwrap().out_handle_at(Fd(5), 0, FASTRPC_ATTR_NOVA).unwrap();
        assert_eq!((at.pra()[0].buf(), at.pra()[1].buf()), (remote_buf { pv: 64, len: 0 }, remote_buf::default()));
        assert_eq!(at.in_handle_at(Fd(0), 0, 0).err(), Some(ArgsError::NoFd));
    }

    /// `out_handles` adds what the same `out_handle` calls would, and on any refusal nothing.
    #[test]
    fn out_handles_is_out_handle_in_a_loop_or_nothing() {
        let input = [1u8; 8];
        let mut one = InvokeArgs::<'_, 8>::new(2).unwrap();
        one.input(&input).unwrap();
        for fd in [5, 6, 7] {
            one.out_handle(Fd(fd), FASTRPC_ATTR_NOVA).unwrap();
        }
        let mut bulk = InvokeArgs::<'_, 8>::new(2).unwrap();
        bulk.input(&input).unwrap();
        bulk.out_handles(&[Fd(5), Fd(6), Fd(7)], FASTRPC_ATTR_NOVA).unwrap();
        assert_eq!((bulk.fds(), bulk.attrs(), bulk.scalars()), (one.fds(), one.attrs(), one.scalars()));
        let bufs = |a: &InvokeArgs<'_, 8>| {
            a.pra().iter().map(|r| (r.buf().pv, r.buf().len)).fold([(0, 0); 4], |mut acc, x| {
                acc.rotate_left(1);
                acc[3] = x;
                acc
            })
        };
        assert_eq!(bufs(&bulk), bufs(&one));

        let mut refused = InvokeArgs::<'_, 4>::new(2).unwrap();
        refused.input(&input).unwrap();
        assert_eq!(refused.out_handles(&[Fd(5), Fd(0)], 0).err(), Some(ArgsError::NoFd));
        assert_eq!(refused.out_handles(&[Fd(5), Fd(6), Fd(7), Fd(8)], 0).err(), Some(ArgsError::Full));
        assert_eq!((refused.len(), refused.fds()), (1, &[-1][..]), "nothing added on a refusal");
        refused.out_handles(&[Fd(9)], 0).unwrap();
        assert_eq!(refused.input(&input).err(), Some(ArgsError::Order));
        let mut wide = InvokeArgs::<'_, 20>::new(0).unwrap();
        assert_eq!(wide.out_handles(&[Fd(3); 16], 0).err(), Some(ArgsError::TooMany));
        wide.out_handles(&[Fd(3); 15], 0).unwrap();
        assert_eq!(wide.scalars().raw() & 0xf, 15);
    }

    /// What one INVOKE_ATTRS request pointed at, read the way the driver reads it.
    #[derive(Clone, Debug, PartialEq)]
    struct Seen {
        handle: u32,
        sc: u32,
        /// (pv, len) of every entry.
        pra: std::vec::Vec<(u64, u64)>,
        fds: std::vec::Vec<i32>,
        attrs: std::vec::Vec<u32>,
    }

    /// A driver stand-in for INVOKE_ATTRS: records each request and answers `EINTR` to the first
    /// `interrupts` of them (as a parked call), then writes `0xAB` over every output buffer and
    /// returns 0.
    #[derive(Default)]
    struct Recorder {
        seen: std::sync::Mutex<std::vec::Vec<Seen>>,
        interrupts: core::cell::Cell<u32>,
    }

    // SAFETY: `ioctl` reads the request struct and the LENGTH(sc) entries of the three arrays it
    // points at, and writes only into output buffers, within their lengths: what the driver does.
    unsafe impl crate::SeamHooks for Recorder {
        type Inner = crate::RefusingSys;
        fn inner(&self) -> &crate::RefusingSys {
            &crate::RefusingSys
        }
        unsafe fn ioctl(&self, _: Fd, request: u32, arg: *mut core::ffi::c_void) -> Result<i32, Errno> {
            assert_eq!(request, ioctl::FASTRPC_IOCTL_INVOKE_ATTRS.raw());
            // SAFETY: the request's struct (ioctl contract).
            let x = unsafe { &*arg.cast::<fastrpc_ioctl_invoke_attrs>() };
            let sc = Scalars::from_raw(x.inv.sc);
            let n = sc.length();
            // SAFETY: LENGTH(sc) initialised entries behind each pointer (ioctl contract).
            let (pra, fds, attrs) = unsafe {
                (
                    core::slice::from_raw_parts(x.inv.pra as *const remote_arg, n),
                    core::slice::from_raw_parts(x.fds as *const i32, n),
                    core::slice::from_raw_parts(x.attrs as *const u32, n),
                )
            };
            self.seen.lock().unwrap().push(Seen {
                handle: x.inv.handle,
                sc: x.inv.sc,
                pra: pra.iter().map(|a| (a.buf().pv, a.buf().len)).collect(),
                fds: fds.to_vec(),
                attrs: attrs.to_vec(),
            });
            if self.interrupts.get() > 0 {
                self.interrupts.set(self.interrupts.get() - 1);
                return Err(Errno::EINTR);
            }
            let first_out = sc.inbufs() as usize;
            for a in &pra[first_out..first_out + sc.outbufs() as usize] {
                // SAFETY: an output buffer of the call, writable for its length.
                unsafe { core::ptr::write_bytes(a.buf().pv as *mut u8, 0xAB, a.buf().len as usize) };
            }
            Ok(0)
        }
    }

    /// A frame sends exactly what an `InvokeArgs` of the same call sends, writes the output,
    /// resumes an interrupted call with the same arrays, and keeps its handles until rewritten.
    /// (Not under Miri: the recorder turns the request's u64 addresses back into pointers, which
    /// strict provenance forbids; `launch_frame_handles` checks the frame's own reads there.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn launch_frame_sends_what_invoke_args_sends() {
        let (pra0, pra1) = ([1u8; 24], [2u8; 16]);
        let sys = Recorder::default();
        let mut t1 = [0u8; 8];
        let mut args = InvokeArgs::<'_, 8>::new(2).unwrap();
        args.input(&pra0).unwrap().input(&pra1).unwrap().output(&mut t1).unwrap();
        args.out_handles(&[Fd(10), Fd(11)], FASTRPC_ATTR_NOVA).unwrap();
        invoke_attrs(&sys, Fd(3), 0x100, &mut args).unwrap();
        assert_eq!(t1, [0xAB; 8]);

        let mut frame = LaunchFrame::<3, 8>::new();
        {
            let mut h = frame.handles();
            h.push(Fd(10), FASTRPC_ATTR_NOVA).unwrap();
            h.push(Fd(11), FASTRPC_ATTR_NOVA).unwrap();
        }
        assert_eq!((frame.handle_count(), frame.handle_fds(), frame.handle_attrs()), (2, &[Fd(10), Fd(11)][..], &[1, 1][..]));
        let mut t2 = [0u8; 8];
        sys.interrupts.set(2);
        frame.invoke_attrs(&sys, Fd(3), 0x100, 2, [&pra0, &pra1], [&mut t2]).unwrap();
        assert_eq!(t2, [0xAB; 8]);
        let seen = sys.seen.lock().unwrap();
        assert_eq!(seen.len(), 4, "one call, then the frame's call resumed twice");
        let (p1, p2) = (t1.as_ptr() as u64, t2.as_ptr() as u64);
        assert_eq!((seen[0].pra[2].0, seen[1].pra[2].0), (p1, p2), "each call's output buffer");
        let same = |a: &Seen, b: &Seen| {
            (a.handle, a.sc, &a.pra[..2], &a.pra[2..].iter().map(|e| e.1).collect::<std::vec::Vec<_>>(), &a.fds, &a.attrs)
                == (b.handle, b.sc, &b.pra[..2], &b.pra[2..].iter().map(|e| e.1).collect::<std::vec::Vec<_>>(), &b.fds, &b.attrs)
        };
        assert!(same(&seen[0], &seen[1]), "the frame's request is the argument list's: {:?} {:?}", seen[0], seen[1]);
        assert_eq!(&seen[1].pra[3..], &[(0, 0), (0, 0)], "handle entries are zero");
        assert_eq!((seen[0].sc, &seen[0].fds[..], &seen[0].attrs[..]), (0x0202_0102, &[-1, -1, -1, 10, 11][..], &[0, 0, 0, 1, 1][..]));
        assert!(seen[1..].windows(2).all(|w| w[0] == w[1]), "an interrupted call is resumed with the same arrays");
        drop(seen);

        // Rewritten shorter, the frame sends only the new handles; a refused push adds nothing.
        {
            let mut h = frame.handles();
            h.push(Fd(12), 0).unwrap();
            assert_eq!(h.push(Fd(0), 0), Err(ArgsError::NoFd));
        }
        assert_eq!(frame.handle_fds(), &[Fd(12)]);
        let mut t3 = [0u8; 8];
        frame.invoke_attrs(&sys, Fd(3), 7, 31, [&pra0, &pra1], [&mut t3]).unwrap();
        let last = sys.seen.lock().unwrap().pop().unwrap();
        assert_eq!((last.handle, last.sc, &last.fds[..], &last.attrs[..]), (7, 0x1F02_0101, &[-1, -1, -1, 12][..], &[0, 0, 0, 0][..]));
        assert_eq!(&last.pra[..2], &[(pra0.as_ptr() as u64, 24), (pra1.as_ptr() as u64, 16)]);
        assert_eq!(frame.invoke_attrs(&sys, Fd(3), 7, 32, [&pra0, &pra1], [&mut t3]), Err(Error::Invalid), "method 32");
        assert_eq!(sys.seen.lock().unwrap().len(), 4, "a refused method makes no call");

        // The capacity: CAP - FIRST handles, then Full (and the count stays in the scalars word).
        let mut full = LaunchFrame::<3, 18>::new();
        {
            let mut h = full.handles();
            for fd in 1..=15 {
                h.push(Fd(fd), 1).unwrap();
            }
            assert_eq!(h.push(Fd(16), 1), Err(ArgsError::Full));
        }
        full.invoke_attrs(&sys, Fd(3), 1, 2, [&pra0, &pra1], [&mut t3]).unwrap();
        assert_eq!(sys.seen.lock().unwrap().pop().unwrap().sc, 0x0202_010F);
    }

    /// The frame's handle entries: written by the writer, read back by the accessors, rewritten
    /// shorter or longer, never past the capacity (runs under Miri).
    #[test]
    fn launch_frame_handles() {
        let mut frame = LaunchFrame::<3, 6>::new();
        assert_eq!((frame.handle_count(), frame.handle_fds()), (0, &[][..]));
        for round in 1..=3 {
            {
                let mut h = frame.handles();
                for k in 0..round {
                    h.push(Fd(10 + k), k as u32).unwrap();
                }
                if round == 3 {
                    assert_eq!(h.push(Fd(20), 0), Err(ArgsError::Full));
                }
            }
            let fds: std::vec::Vec<Fd> = (0..round).map(|k| Fd(10 + k)).collect();
            let attrs: std::vec::Vec<u32> = (0..round as u32).collect();
            assert_eq!((frame.handle_fds(), frame.handle_attrs()), (&fds[..], &attrs[..]));
        }
        let copy = frame;
        {
            let _ = frame.handles();
        }
        assert_eq!((frame.handle_count(), copy.handle_count()), (0, 3), "a dropped writer leaves what it pushed");
        assert_eq!(copy.handle_fds(), &[Fd(10), Fd(11), Fd(12)]);
    }
}
