//! The upstream Linux FastRPC driver (`/dev/fastrpc-*`, `drivers/misc/fastrpc.c`), as on every
//! mainline-kernel Qualcomm board (Qualcomm Linux, RB3/RB5-class boards, Snapdragon laptops).
//!
//! Origin: `include/uapi/misc/fastrpc.h`. This module follows **current mainline**, which is
//! Linux 6.1's header (Debian `linux-libc-dev` 6.1, `/usr/include/misc/fastrpc.h`) plus
//! `FASTRPC_IOCTL_INIT_CREATE_STATIC` (nr 9) and `struct fastrpc_init_create_static`, added
//! after 6.1 (the 6.1 header lacks both; Android's bionic copy of the mainline header has them).
//! Behaviour notes come from mainline `drivers/misc/fastrpc.c` (the version that identifies a
//! process by `client_id`). Layouts and numbers are those of an LP64 (aarch64) build.
//!
//! # How it differs from the downstream driver ([`adsprpc`](crate::adsprpc))
//!
//! * **Request numbers are reused with other meanings** (upstream INVOKE = `0xC0105203` is
//!   downstream MUNMAP). The two drivers therefore take different descriptor types: every call
//!   here takes a [`FastrpcFd`], every downstream call a plain [`Fd`], and one cannot be passed
//!   for the other:
//!
//!   ```compile_fail
//!   use hexrpc_drivers::{adsprpc, upstream::FastrpcFd, Syscalls};
//!   fn f<S: Syscalls>(sys: &S, fd: FastrpcFd) {
//!       let _ = adsprpc::getinfo(sys, fd, 3); // a downstream request on an upstream fd
//!   }
//!   ```
//!
//!   ```compile_fail
//!   use hexrpc_drivers::{upstream, Fd, Syscalls};
//!   fn f<S: Syscalls>(sys: &S, fd: Fd) {
//!       let _ = upstream::init_attach(sys, fd); // an upstream request on a downstream fd
//!   }
//!   ```
//!
//!   ```no_run
//!   use hexrpc_drivers::{adsprpc, upstream::{self, FastrpcFd}, Fd, Syscalls};
//!   fn f<S: Syscalls>(sys: &S, down: Fd, up: FastrpcFd) {
//!       let _ = adsprpc::getinfo(sys, down, 3);
//!       let _ = upstream::init_attach(sys, up);
//!   }
//!   ```
//! * **One node per DSP** (`fastrpc-adsp`, `fastrpc-cdsp`, `fastrpc-cdsp-secure`, ...): the
//!   domain is fixed by the node, there is no GETINFO; `open` takes an SMMU session at once
//!   (`EBUSY` when none is free). A node on a *secure* channel (no `qcom,non-secure-domain` in
//!   the device tree) refuses INIT_CREATE from the non-secure node unless the process asks for
//!   an unsigned PD ([`FASTRPC_MODE_UNSIGNED_MODULE`]): `ECONNREFUSED`.
//! * **fd and attribute per argument** ([`fastrpc_invoke_args`]): no `fds[]`/`attrs[]` arrays and
//!   no INVOKE_FD/ATTRS/CRC variants. An argument with an fd (not 0, not -1) and a non-zero
//!   length is *mapped* (buffers and handles alike); a failed map is `EINVAL` (downstream
//!   silently copies instead). A buffer passed by fd is not copied: the DSP works on the memory.
//! * **Errors**: errnos are real (`EFAULT` for faulting copies, not downstream's -1/`EPERM`);
//!   the DSP's own result is returned as the ioctl's (positive) return value; a user INVOKE on
//!   handle 1 is `EPERM`.
//! * **Out-buffers are copied back even when the DSP returns an error** (downstream skips the
//!   copy-back on error).
//! * **Interrupted calls are not resumable**: a signal makes INVOKE return `EINTR` and the
//!   context stays with the file until the DSP answers or the file is released; nothing is
//!   copied back to user memory afterwards (downstream parks the call and resumes it into the
//!   original buffers). Re-issuing the call sends a *new* call. Buffers passed by fd stay mapped
//!   (the DSP may still write them) until the context is freed.
//! * **Deadlines**: kernel-originated messages (INIT_*, MMAP, MEM_MAP, ...) wait 10 s and fail
//!   with `ETIMEDOUT`; user invokes wait interruptibly with no timeout, as downstream.
//! * **DSP restart**: the rpmsg device goes away: calls in flight return `EPIPE`, every later
//!   call on a descriptor of that channel returns `EPIPE` (the descriptor never recovers), and
//!   the device node disappears until the DSP is back, when a fresh node appears. Recovery is
//!   close + reopen (downstream: `ECONNRESET`/+104, and a reopened fd works at once).
//! * **Memory**: buffers come from dma-buf heaps ([`dma_heap`](crate::dma_heap)) or from
//!   [`alloc_dma_buff`]; [`mem_map`] maps a buffer into the DSP process persistently (until
//!   [`mem_unmap`] or close); [`mmap`] only accepts kernel-allocated pages
//!   ([`ADSP_MMAP_ADD_PAGES`] / [`ADSP_MMAP_REMOTE_HEAP_ADDR`] with `vaddrin` 0).
//! * **Not handled by mainline** although declared in the header: `FREE_DMA_BUFF` (`ENOTTY`).
#![allow(non_camel_case_types)]

use core::marker::PhantomData;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::adsprpc::{ArgCounts, ArgsError};
use crate::error::check_rc;
use crate::sys::{ioctl_none, ioctl_plain, ioctl_with, PlainArg};
use crate::{abi_layout, Error, Fd, Mapping, OwnedFd, Scalars, Syscalls};

/// `struct fastrpc_invoke_args`: one argument of an INVOKE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_invoke_args {
    /// Buffer address (buffers), or the offset the DSP sees (handles).
    pub ptr: u64,
    /// Length in bytes.
    pub length: u64,
    /// dma-buf fd, or 0 / -1 for "copy this buffer".
    pub fd: i32,
    /// `FASTRPC_ATTR_*` (called `reserved` in headers before 5.x).
    pub attr: u32,
}
abi_layout!(fastrpc_invoke_args, "fastrpc_invoke_args", size = 24, align = 8, { ptr @ 0, length @ 8, fd @ 16, attr @ 20 });

/// `struct fastrpc_invoke`: argument of [`FASTRPC_IOCTL_INVOKE`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_invoke {
    /// Remote handle.
    pub handle: u32,
    /// Scalars word.
    pub sc: u32,
    /// Address of LENGTH(sc) [`fastrpc_invoke_args`].
    pub args: u64,
}
abi_layout!(fastrpc_invoke, "fastrpc_invoke", size = 16, align = 8, { handle @ 0, sc @ 4, args @ 8 });

/// `struct fastrpc_init_create`: argument of [`FASTRPC_IOCTL_INIT_CREATE`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_init_create {
    /// Length of the shell ELF.
    pub filelen: u32,
    /// dma-buf fd holding the shell (mapped for the DSP when non-zero).
    pub filefd: i32,
    /// `FASTRPC_MODE_*` process attributes.
    pub attrs: u32,
    /// Signature length.
    pub siglen: u32,
    /// Address of the shell ELF.
    pub file: u64,
}
abi_layout!(fastrpc_init_create, "fastrpc_init_create", size = 24, align = 8, { filelen @ 0, filefd @ 4, attrs @ 8, siglen @ 12, file @ 16 });

/// `struct fastrpc_init_create_static`: argument of [`FASTRPC_IOCTL_INIT_CREATE_STATIC`]
/// (mainline after 6.1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_init_create_static {
    /// Length of the PD name (at most 128).
    pub namelen: u32,
    /// Size of the remote heap to give the static PD.
    pub memlen: u32,
    /// Address of the PD name (`audiopd`, ...).
    pub name: u64,
}
abi_layout!(fastrpc_init_create_static, "fastrpc_init_create_static", size = 16, align = 8, { namelen @ 0, memlen @ 4, name @ 8 });

/// `struct fastrpc_alloc_dma_buf`: argument of [`FASTRPC_IOCTL_ALLOC_DMA_BUFF`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_alloc_dma_buf {
    /// Out: the new dma-buf fd.
    pub fd: i32,
    /// Flags (unused by mainline).
    pub flags: u32,
    /// Size in bytes.
    pub size: u64,
}
abi_layout!(fastrpc_alloc_dma_buf, "fastrpc_alloc_dma_buf", size = 16, align = 8, { fd @ 0, flags @ 4, size @ 8 });

/// `struct fastrpc_req_mmap`: argument of [`FASTRPC_IOCTL_MMAP`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_req_mmap {
    /// Unused by mainline (the kernel allocates the pages).
    pub fd: i32,
    /// [`ADSP_MMAP_ADD_PAGES`] or [`ADSP_MMAP_REMOTE_HEAP_ADDR`].
    pub flags: u32,
    /// Must be 0.
    pub vaddrin: u64,
    /// Size in bytes.
    pub size: u64,
    /// Out: the DSP address.
    pub vaddrout: u64,
}
abi_layout!(fastrpc_req_mmap, "fastrpc_req_mmap", size = 32, align = 8, { fd @ 0, flags @ 4, vaddrin @ 8, size @ 16, vaddrout @ 24 });

/// `struct fastrpc_mem_map`: argument of [`FASTRPC_IOCTL_MEM_MAP`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_mem_map {
    /// Structure version (0).
    pub version: i32,
    /// dma-buf fd to map.
    pub fd: i32,
    /// Offset into the buffer.
    pub offset: i32,
    /// `FASTRPC_MAP_*`.
    pub flags: u32,
    /// The buffer's host virtual address.
    pub vaddrin: u64,
    /// Length in bytes.
    pub length: u64,
    /// Out: the DSP address.
    pub vaddrout: u64,
    /// Buffer attributes for the SMMU mapping.
    pub attrs: i32,
    /// Reserved.
    pub reserved: [i32; 4],
    /// Tail padding of the C struct.
    pub _pad0: u32,
}
abi_layout!(fastrpc_mem_map, "fastrpc_mem_map", size = 64, align = 8, {
    version @ 0, fd @ 4, offset @ 8, flags @ 12, vaddrin @ 16, length @ 24, vaddrout @ 32, attrs @ 40, reserved @ 44
});

/// `struct fastrpc_req_munmap`: argument of [`FASTRPC_IOCTL_MUNMAP`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_req_munmap {
    /// The DSP address from [`mmap`].
    pub vaddrout: u64,
    /// The size given to [`mmap`].
    pub size: u64,
}
abi_layout!(fastrpc_req_munmap, "fastrpc_req_munmap", size = 16, align = 8, { vaddrout @ 0, size @ 8 });

/// `struct fastrpc_mem_unmap`: argument of [`FASTRPC_IOCTL_MEM_UNMAP`]. The first field is
/// spelled `vesion` in the header, and so here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_mem_unmap {
    /// Structure version (0).
    pub vesion: i32,
    /// The fd given to [`mem_map`] (negative: match any fd).
    pub fd: i32,
    /// The DSP address from [`mem_map`].
    pub vaddr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Reserved.
    pub reserved: [i32; 5],
    /// Tail padding of the C struct.
    pub _pad0: u32,
}
abi_layout!(fastrpc_mem_unmap, "fastrpc_mem_unmap", size = 48, align = 8, { vesion @ 0, fd @ 4, vaddr @ 8, length @ 16, reserved @ 24 });

/// `struct fastrpc_ioctl_capability`: argument of [`FASTRPC_IOCTL_GET_DSP_INFO`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_capability {
    /// Domain id (0 adsp, 2 sdsp, 3 cdsp, 4 cdsp1; 1 mdsp is refused).
    pub domain: u32,
    /// Attribute index (< 256).
    pub attribute_id: u32,
    /// Out: the DSP's value of that attribute.
    pub capability: u32,
    /// Reserved.
    pub reserved: [u32; 4],
}
abi_layout!(fastrpc_ioctl_capability, "fastrpc_ioctl_capability", size = 28, align = 4, { domain @ 0, attribute_id @ 4, capability @ 8, reserved @ 12 });

/// The group byte of every FastRPC ioctl (shared with the downstream driver).
pub const FASTRPC_IOCTL_MAGIC: u8 = b'R';
/// The upstream FastRPC requests, each declared from (group, number, argument type): the typed calls of
/// this module take these, so a request cannot be sent with an argument of another type.
pub mod ioctl {
    use super::*;
    use crate::ioc::Ioctl;

    /// `FASTRPC_IOCTL_ALLOC_DMA_BUFF`.
    pub const FASTRPC_IOCTL_ALLOC_DMA_BUFF: Ioctl<fastrpc_alloc_dma_buf> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 1);
    /// `FASTRPC_IOCTL_FREE_DMA_BUFF`.
    pub const FASTRPC_IOCTL_FREE_DMA_BUFF: Ioctl<u32> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 2);
    /// `FASTRPC_IOCTL_INVOKE`.
    pub const FASTRPC_IOCTL_INVOKE: Ioctl<fastrpc_invoke> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 3);
    /// `FASTRPC_IOCTL_INIT_ATTACH` (no argument).
    pub const FASTRPC_IOCTL_INIT_ATTACH: Ioctl<()> = Ioctl::io(FASTRPC_IOCTL_MAGIC, 4);
    /// `FASTRPC_IOCTL_INIT_CREATE`.
    pub const FASTRPC_IOCTL_INIT_CREATE: Ioctl<fastrpc_init_create> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 5);
    /// `FASTRPC_IOCTL_MMAP`.
    pub const FASTRPC_IOCTL_MMAP: Ioctl<fastrpc_req_mmap> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 6);
    /// `FASTRPC_IOCTL_MUNMAP`.
    pub const FASTRPC_IOCTL_MUNMAP: Ioctl<fastrpc_req_munmap> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 7);
    /// `FASTRPC_IOCTL_INIT_ATTACH_SNS` (no argument).
    pub const FASTRPC_IOCTL_INIT_ATTACH_SNS: Ioctl<()> = Ioctl::io(FASTRPC_IOCTL_MAGIC, 8);
    /// `FASTRPC_IOCTL_INIT_CREATE_STATIC` (mainline after 6.1).
    pub const FASTRPC_IOCTL_INIT_CREATE_STATIC: Ioctl<fastrpc_init_create_static> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 9);
    /// `FASTRPC_IOCTL_MEM_MAP`.
    pub const FASTRPC_IOCTL_MEM_MAP: Ioctl<fastrpc_mem_map> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 10);
    /// `FASTRPC_IOCTL_MEM_UNMAP`.
    pub const FASTRPC_IOCTL_MEM_UNMAP: Ioctl<fastrpc_mem_unmap> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 11);
    /// `FASTRPC_IOCTL_GET_DSP_INFO`.
    pub const FASTRPC_IOCTL_GET_DSP_INFO: Ioctl<fastrpc_ioctl_capability> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 13);
}

/// `FASTRPC_IOCTL_ALLOC_DMA_BUFF` as a raw number ([`ioctl::FASTRPC_IOCTL_ALLOC_DMA_BUFF`]), for code that decodes requests.
pub const FASTRPC_IOCTL_ALLOC_DMA_BUFF: u32 = ioctl::FASTRPC_IOCTL_ALLOC_DMA_BUFF.raw();
/// `FASTRPC_IOCTL_FREE_DMA_BUFF` as a raw number ([`ioctl::FASTRPC_IOCTL_FREE_DMA_BUFF`]), for code that decodes requests.
pub const FASTRPC_IOCTL_FREE_DMA_BUFF: u32 = ioctl::FASTRPC_IOCTL_FREE_DMA_BUFF.raw();
/// `FASTRPC_IOCTL_INVOKE` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE: u32 = ioctl::FASTRPC_IOCTL_INVOKE.raw();
/// `FASTRPC_IOCTL_INIT_ATTACH` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT_ATTACH`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT_ATTACH: u32 = ioctl::FASTRPC_IOCTL_INIT_ATTACH.raw();
/// `FASTRPC_IOCTL_INIT_CREATE` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT_CREATE`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT_CREATE: u32 = ioctl::FASTRPC_IOCTL_INIT_CREATE.raw();
/// `FASTRPC_IOCTL_MMAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MMAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MMAP: u32 = ioctl::FASTRPC_IOCTL_MMAP.raw();
/// `FASTRPC_IOCTL_MUNMAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MUNMAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MUNMAP: u32 = ioctl::FASTRPC_IOCTL_MUNMAP.raw();
/// `FASTRPC_IOCTL_INIT_ATTACH_SNS` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT_ATTACH_SNS`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT_ATTACH_SNS: u32 = ioctl::FASTRPC_IOCTL_INIT_ATTACH_SNS.raw();
/// `FASTRPC_IOCTL_INIT_CREATE_STATIC` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT_CREATE_STATIC`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT_CREATE_STATIC: u32 = ioctl::FASTRPC_IOCTL_INIT_CREATE_STATIC.raw();
/// `FASTRPC_IOCTL_MEM_MAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MEM_MAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MEM_MAP: u32 = ioctl::FASTRPC_IOCTL_MEM_MAP.raw();
/// `FASTRPC_IOCTL_MEM_UNMAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MEM_UNMAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MEM_UNMAP: u32 = ioctl::FASTRPC_IOCTL_MEM_UNMAP.raw();
/// `FASTRPC_IOCTL_GET_DSP_INFO` as a raw number ([`ioctl::FASTRPC_IOCTL_GET_DSP_INFO`]), for code that decodes requests.
pub const FASTRPC_IOCTL_GET_DSP_INFO: u32 = ioctl::FASTRPC_IOCTL_GET_DSP_INFO.raw();

/// Every request number of this module, by kernel name.
pub const IOCTLS: &[(&str, u32)] = &[
    ("FASTRPC_IOCTL_ALLOC_DMA_BUFF", FASTRPC_IOCTL_ALLOC_DMA_BUFF),
    ("FASTRPC_IOCTL_FREE_DMA_BUFF", FASTRPC_IOCTL_FREE_DMA_BUFF),
    ("FASTRPC_IOCTL_INVOKE", FASTRPC_IOCTL_INVOKE),
    ("FASTRPC_IOCTL_INIT_ATTACH", FASTRPC_IOCTL_INIT_ATTACH),
    ("FASTRPC_IOCTL_INIT_CREATE", FASTRPC_IOCTL_INIT_CREATE),
    ("FASTRPC_IOCTL_MMAP", FASTRPC_IOCTL_MMAP),
    ("FASTRPC_IOCTL_MUNMAP", FASTRPC_IOCTL_MUNMAP),
    ("FASTRPC_IOCTL_INIT_ATTACH_SNS", FASTRPC_IOCTL_INIT_ATTACH_SNS),
    ("FASTRPC_IOCTL_INIT_CREATE_STATIC", FASTRPC_IOCTL_INIT_CREATE_STATIC),
    ("FASTRPC_IOCTL_MEM_MAP", FASTRPC_IOCTL_MEM_MAP),
    ("FASTRPC_IOCTL_MEM_UNMAP", FASTRPC_IOCTL_MEM_UNMAP),
    ("FASTRPC_IOCTL_GET_DSP_INFO", FASTRPC_IOCTL_GET_DSP_INFO),
];

/// `FASTRPC_MAP_STATIC` (`enum fastrpc_map_flags`): RW, write-back cached; the driver does the
/// cache maintenance when the buffer is passed to calls; the same DSP address every time.
pub const FASTRPC_MAP_STATIC: u32 = 0;
/// `FASTRPC_MAP_RESERVED`.
pub const FASTRPC_MAP_RESERVED: u32 = 1;
/// `FASTRPC_MAP_FD`: RW, write-back, tagged with the fd; the user does the cache maintenance;
/// the DSP finds the address with `HAP_mmap_get`.
pub const FASTRPC_MAP_FD: u32 = 2;
/// `FASTRPC_MAP_FD_DELAYED`: mapped only when the DSP calls `HAP_mmap`.
pub const FASTRPC_MAP_FD_DELAYED: u32 = 3;
/// `FASTRPC_MAP_FD_NOMAP`: as DELAYED, without a CPU mapping.
pub const FASTRPC_MAP_FD_NOMAP: u32 = 16;
/// `FASTRPC_MAP_MAX`.
pub const FASTRPC_MAP_MAX: u32 = 17;

/// `FASTRPC_MODE_DEBUG` (`enum fastrpc_proc_attr`).
pub const FASTRPC_MODE_DEBUG: u32 = 1 << 0;
/// `FASTRPC_MODE_PTRACE`.
pub const FASTRPC_MODE_PTRACE: u32 = 1 << 1;
/// `FASTRPC_MODE_CRC`.
pub const FASTRPC_MODE_CRC: u32 = 1 << 2;
/// `FASTRPC_MODE_UNSIGNED_MODULE`: run as an unsigned PD (what a non-secure node needs on a
/// secure channel).
pub const FASTRPC_MODE_UNSIGNED_MODULE: u32 = 1 << 3;
/// `FASTRPC_MODE_ADAPTIVE_QOS`.
pub const FASTRPC_MODE_ADAPTIVE_QOS: u32 = 1 << 4;
/// `FASTRPC_MODE_SYSTEM_PROCESS`.
pub const FASTRPC_MODE_SYSTEM_PROCESS: u32 = 1 << 5;
/// `FASTRPC_MODE_PRIVILEGED`.
pub const FASTRPC_MODE_PRIVILEGED: u32 = 1 << 6;

/// `FASTRPC_ATTR_SECUREMAP`: per-argument attribute, map the buffer for a secure PD.
pub const FASTRPC_ATTR_SECUREMAP: u32 = 1;

// Facts of `drivers/misc/fastrpc.c`, not of the uapi header.

/// `ADSP_DOMAIN_ID`.
pub const ADSP_DOMAIN_ID: u32 = 0;
/// `MDSP_DOMAIN_ID` (GET_DSP_INFO refuses it: `ECHRNG`).
pub const MDSP_DOMAIN_ID: u32 = 1;
/// `SDSP_DOMAIN_ID`.
pub const SDSP_DOMAIN_ID: u32 = 2;
/// `CDSP_DOMAIN_ID`.
pub const CDSP_DOMAIN_ID: u32 = 3;
/// `CDSP1_DOMAIN_ID`.
pub const CDSP1_DOMAIN_ID: u32 = 4;
/// `FASTRPC_DEV_MAX`: domain ids are below this.
pub const FASTRPC_DEV_MAX: u32 = 5;
/// `FASTRPC_INIT_HANDLE`: the kernel's own handle; a user INVOKE on it is `EPERM`.
pub const FASTRPC_INIT_HANDLE: u32 = 1;
/// `ADSP_MMAP_REMOTE_HEAP_ADDR`.
pub const ADSP_MMAP_REMOTE_HEAP_ADDR: u32 = 8;
/// `ADSP_MMAP_ADD_PAGES`.
pub const ADSP_MMAP_ADD_PAGES: u32 = 0x1000;
/// `INIT_FILELEN_MAX`: a longer shell is `EINVAL`.
pub const INIT_FILELEN_MAX: u32 = 2 * 1024 * 1024;
/// `INIT_FILE_NAMELEN_MAX`: longest static PD name.
pub const INIT_FILE_NAMELEN_MAX: u32 = 128;
/// `FASTRPC_MAX_FDLIST`.
pub const FASTRPC_MAX_FDLIST: usize = 16;
/// `FASTRPC_MAX_DSP_ATTRIBUTES`: GET_DSP_INFO attribute ids are below this (`EOVERFLOW`).
pub const FASTRPC_MAX_DSP_ATTRIBUTES: u32 = 256;
/// `DSP_UNSUPPORTED_API`: the DSP's answer that makes GET_DSP_INFO `EOPNOTSUPP`.
pub const DSP_UNSUPPORTED_API: u32 = 0x8000_0414;
/// `FASTRPC_CTX_MAX`: contexts in flight per channel (ids 1..255); more is `ENOSPC`.
pub const FASTRPC_CTX_MAX: u32 = 256;
/// Kernel-originated messages wait this many seconds before `ETIMEDOUT`.
pub const KERNEL_CALL_TIMEOUT_S: u32 = 10;

/// Node name of the compute DSP (unsigned PDs allowed on a secure channel).
pub const CDSP_NODE: &str = "fastrpc-cdsp";
/// Node name of the compute DSP for trusted (signed) processes.
pub const CDSP_SECURE_NODE: &str = "fastrpc-cdsp-secure";

/// Constants of this module, by kernel name, for `hexrpc abi`.
pub const CONSTANTS: &[(&str, u64)] = &[
    ("FASTRPC_MAP_STATIC", FASTRPC_MAP_STATIC as u64),
    ("FASTRPC_MAP_RESERVED", FASTRPC_MAP_RESERVED as u64),
    ("FASTRPC_MAP_FD", FASTRPC_MAP_FD as u64),
    ("FASTRPC_MAP_FD_DELAYED", FASTRPC_MAP_FD_DELAYED as u64),
    ("FASTRPC_MAP_FD_NOMAP", FASTRPC_MAP_FD_NOMAP as u64),
    ("FASTRPC_MAP_MAX", FASTRPC_MAP_MAX as u64),
    ("FASTRPC_MODE_DEBUG", FASTRPC_MODE_DEBUG as u64),
    ("FASTRPC_MODE_PTRACE", FASTRPC_MODE_PTRACE as u64),
    ("FASTRPC_MODE_CRC", FASTRPC_MODE_CRC as u64),
    ("FASTRPC_MODE_UNSIGNED_MODULE", FASTRPC_MODE_UNSIGNED_MODULE as u64),
    ("FASTRPC_MODE_ADAPTIVE_QOS", FASTRPC_MODE_ADAPTIVE_QOS as u64),
    ("FASTRPC_MODE_SYSTEM_PROCESS", FASTRPC_MODE_SYSTEM_PROCESS as u64),
    ("FASTRPC_MODE_PRIVILEGED", FASTRPC_MODE_PRIVILEGED as u64),
    ("FASTRPC_ATTR_SECUREMAP", FASTRPC_ATTR_SECUREMAP as u64),
    ("CDSP_DOMAIN_ID", CDSP_DOMAIN_ID as u64),
    ("FASTRPC_INIT_HANDLE", FASTRPC_INIT_HANDLE as u64),
    ("ADSP_MMAP_REMOTE_HEAP_ADDR", ADSP_MMAP_REMOTE_HEAP_ADDR as u64),
    ("ADSP_MMAP_ADD_PAGES", ADSP_MMAP_ADD_PAGES as u64),
    ("INIT_FILELEN_MAX", INIT_FILELEN_MAX as u64),
    ("INIT_FILE_NAMELEN_MAX", INIT_FILE_NAMELEN_MAX as u64),
    ("FASTRPC_MAX_DSP_ATTRIBUTES", FASTRPC_MAX_DSP_ATTRIBUTES as u64),
    ("DSP_UNSUPPORTED_API", DSP_UNSUPPORTED_API as u64),
];

/// A descriptor of an upstream FastRPC node (`/dev/fastrpc-*`). It does not own the descriptor
/// (owning wrappers live in the HAL). Every call of this module takes one, and no downstream
/// call accepts one, so the two drivers' reused request numbers cannot be mixed up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FastrpcFd(Fd);

impl FastrpcFd {
    /// Declares that `fd` is an open upstream FastRPC node. The caller opened it from an
    /// upstream node path (the HAL does so from the board's path); if it is not one, the kernel
    /// refuses or misreads the requests, which is what the types exist to prevent.
    pub const fn from_raw(fd: Fd) -> FastrpcFd {
        FastrpcFd(fd)
    }
    /// The descriptor, for `close`, `retire` and the syscall seam.
    pub const fn fd(self) -> Fd {
        self.0
    }
}

/// The argument list of one upstream FastRPC call, in fixed capacity: LENGTH(sc)
/// [`fastrpc_invoke_args`] and the counts that make the scalars word.
///
/// Everything an argument points at is borrowed for `'a`, so it outlives the ioctl. Arguments
/// must be added in ABI order (in-buffers, out-buffers, in-handles, out-handles). Buffers are
/// either copied (fd -1) or passed by fd: then the pointer lies in a host mapping of that fd and
/// the driver maps the buffer for the DSP instead of copying it.
pub struct InvokeArgs<'a, const CAP: usize> {
    args: [fastrpc_invoke_args; CAP],
    counts: ArgCounts,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a, const CAP: usize> InvokeArgs<'a, CAP> {
    /// An empty argument list for `method` (0..=31).
    pub fn new(method: u8) -> Result<Self, ArgsError> {
        Ok(InvokeArgs { args: [fastrpc_invoke_args::default(); CAP], counts: ArgCounts::new(method)?, _borrow: PhantomData })
    }

    fn push(&mut self, kind: usize, arg: fastrpc_invoke_args) -> Result<(), ArgsError> {
        let i = self.counts.add(kind, CAP)?;
        self.args[i] = arg;
        Ok(())
    }

    /// Adds an input buffer, copied to the DSP.
    pub fn input(&mut self, buf: &'a [u8]) -> Result<&mut Self, ArgsError> {
        self.push(0, fastrpc_invoke_args { ptr: buf.as_ptr() as u64, length: buf.len() as u64, fd: -1, attr: 0 })?;
        Ok(self)
    }

    /// Adds an output buffer, copied back after the call (also when the DSP returned an error).
    pub fn output(&mut self, buf: &'a mut [u8]) -> Result<&mut Self, ArgsError> {
        self.push(1, fastrpc_invoke_args { ptr: buf.as_mut_ptr() as u64, length: buf.len() as u64, fd: -1, attr: 0 })?;
        Ok(self)
    }

    fn mapped<M: Syscalls>(map: &Mapping<M>, fd: Fd, offset: usize, len: usize, attr: u32) -> Result<fastrpc_invoke_args, ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        match offset.checked_add(len) {
            Some(end) if end <= map.len() => {}
            _ => return Err(ArgsError::Range),
        }
        Ok(fastrpc_invoke_args { ptr: (map.addr() + offset) as u64, length: len as u64, fd: fd.0, attr })
    }

    /// Adds an input buffer passed by fd: `len` bytes at `offset` of `map`, a host mapping of the
    /// dma-buf `fd`. The driver maps the buffer for the DSP (no copy).
    pub fn input_fd<M: Syscalls>(
        &mut self,
        map: &'a Mapping<M>,
        fd: Fd,
        offset: usize,
        len: usize,
        attr: u32,
    ) -> Result<&mut Self, ArgsError> {
        let a = Self::mapped(map, fd, offset, len, attr)?;
        self.push(0, a)?;
        Ok(self)
    }

    /// Adds an output buffer passed by fd (see [`input_fd`](Self::input_fd)); the DSP writes the
    /// memory itself.
    pub fn output_fd<M: Syscalls>(
        &mut self,
        map: &'a mut Mapping<M>,
        fd: Fd,
        offset: usize,
        len: usize,
        attr: u32,
    ) -> Result<&mut Self, ArgsError> {
        let a = Self::mapped(map, fd, offset, len, attr)?;
        self.push(1, a)?;
        Ok(self)
    }

    fn handle(fd: Fd, offset: u32, len: u32, attr: u32) -> Result<fastrpc_invoke_args, ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        Ok(fastrpc_invoke_args { ptr: offset as u64, length: len as u64, fd: fd.0, attr })
    }

    /// Adds an input handle: the dma-buf `fd`, of which the DSP sees `len` bytes from `offset`
    /// (the driver ships `{fd, offset, len}`; a zero `len` gets no map).
    pub fn in_handle(&mut self, fd: Fd, offset: u32, len: u32, attr: u32) -> Result<&mut Self, ArgsError> {
        self.push(2, Self::handle(fd, offset, len, attr)?)?;
        Ok(self)
    }

    /// Adds an output handle (see [`in_handle`](Self::in_handle)).
    pub fn out_handle(&mut self, fd: Fd, offset: u32, len: u32, attr: u32) -> Result<&mut Self, ArgsError> {
        self.push(3, Self::handle(fd, offset, len, attr)?)?;
        Ok(self)
    }

    /// Number of arguments (`REMOTE_SCALARS_LENGTH`).
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

    /// The argument records.
    pub fn args(&self) -> &[fastrpc_invoke_args] {
        &self.args[..self.len()]
    }
}

/// `FASTRPC_IOCTL_INVOKE`: calls `handle` with `args`.
///
/// Caller: a thread of the process that created (or attached) the DSP process on this fd.
/// Blocks until the DSP answers (no timeout). A signal ends the wait with `EINTR`; the call is
/// then *not* resumable (see the module docs) and nothing more is copied into its out-buffers.
/// Fails with `EFAULT`, `EINVAL` (an fd that cannot be mapped), `ENOMEM`, `ENOSPC` (256
/// contexts in flight), `EPERM` (handle 1), `EPIPE` (the DSP went away), or a positive value
/// from the DSP.
pub fn invoke<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: FastrpcFd,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
) -> Result<(), Error> {
    let mut inv = fastrpc_invoke { handle, sc: args.scalars().raw(), args: args.args.as_mut_ptr() as u64 };
    // SAFETY: `inv` is a live struct of the request's size; `args` points at LENGTH(sc)
    // initialized records of `args`, whose pointers describe memory borrowed by `args` for `'a`
    // (inputs readable, outputs writable, fd buffers inside live mappings). The driver writes to
    // user memory only before this ioctl returns (an interrupted call copies nothing back).
    let rc = unsafe { ioctl_with(sys, fd.0, ioctl::FASTRPC_IOCTL_INVOKE, &mut inv) };
    check_rc(rc)
}

// SAFETY: an fd, flags and a size.
unsafe impl PlainArg for fastrpc_alloc_dma_buf {}
// SAFETY: `vaddrin` must be 0 for the flags this driver accepts; the rest are an fd, flags,
// a size and the DSP address written back.
unsafe impl PlainArg for fastrpc_req_mmap {}
// SAFETY: a DSP address and a size.
unsafe impl PlainArg for fastrpc_req_munmap {}
// SAFETY: `vaddrin` is forwarded to the DSP as the buffer's address, never dereferenced by the
// driver (the buffer is reached through `fd`).
unsafe impl PlainArg for fastrpc_mem_map {}
// SAFETY: `vaddr` is only matched against the driver's maps.
unsafe impl PlainArg for fastrpc_mem_unmap {}
// SAFETY: ids and the capability word.
unsafe impl PlainArg for fastrpc_ioctl_capability {}

/// `FASTRPC_IOCTL_INIT_ATTACH`: attaches to the DSP's root PD (pd 0). Kernel message, 10 s.
pub fn init_attach<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd) -> Result<(), Error> {
    check_rc(ioctl_none(sys, fd.0, ioctl::FASTRPC_IOCTL_INIT_ATTACH))
}

/// `FASTRPC_IOCTL_INIT_ATTACH_SNS`: attaches to the sensors PD (pd 2). Kernel message, 10 s.
pub fn init_attach_sns<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd) -> Result<(), Error> {
    check_rc(ioctl_none(sys, fd.0, ioctl::FASTRPC_IOCTL_INIT_ATTACH_SNS))
}

/// `FASTRPC_IOCTL_INIT_CREATE`: creates the user PD from the shell ELF, the first `filelen`
/// bytes of `shell`, a host mapping of the dma-buf `shell_fd` (which the driver maps for the
/// DSP). `attrs` are `FASTRPC_MODE_*` bits (non-zero selects the attribute-carrying message).
///
/// Fails with [`Error::Invalid`] if `filelen` exceeds the mapping; `EINVAL` (more than 2 MiB,
/// an fd that cannot be mapped), `ECONNREFUSED` (a signed PD from the non-secure node of a
/// secure channel), `ENOMEM`, `ETIMEDOUT` (10 s), `EPIPE`, or the DSP's positive result.
pub fn init_create<S: Syscalls + ?Sized, M: Syscalls>(
    sys: &S,
    fd: FastrpcFd,
    shell: &Mapping<M>,
    shell_fd: Fd,
    filelen: u32,
    attrs: u32,
    siglen: u32,
) -> Result<(), Error> {
    if filelen as usize > shell.len() {
        return Err(Error::Invalid);
    }
    let mut init = fastrpc_init_create { filelen, filefd: shell_fd.0, attrs, siglen, file: shell.addr() as u64 };
    // SAFETY: `init` is a live struct of the request's size; `file` points at `filelen` readable
    // bytes of a live mapping (checked above).
    check_rc(unsafe { ioctl_with(sys, fd.0, ioctl::FASTRPC_IOCTL_INIT_CREATE, &mut init) })
}

/// `FASTRPC_IOCTL_INIT_CREATE_STATIC`: creates (or joins) the static PD `name` (`audiopd`, ...)
/// with a remote heap of `memlen` bytes. Fails with [`Error::Invalid`] for a name over 128
/// bytes; `ENOTTY` on kernels up to 6.1; `ENOMEM`, `ETIMEDOUT`, `EPIPE`, the DSP's result.
pub fn init_create_static<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd, name: &[u8], memlen: u32) -> Result<(), Error> {
    let namelen = u32::try_from(name.len()).map_err(|_| Error::Invalid)?;
    if namelen > INIT_FILE_NAMELEN_MAX {
        return Err(Error::Invalid);
    }
    let mut init = fastrpc_init_create_static { namelen, memlen, name: name.as_ptr() as u64 };
    // SAFETY: `init` is a live struct of the request's size; `name` points at `namelen`
    // readable bytes borrowed for the call.
    check_rc(unsafe { ioctl_with(sys, fd.0, ioctl::FASTRPC_IOCTL_INIT_CREATE_STATIC, &mut init) })
}

/// `FASTRPC_IOCTL_ALLOC_DMA_BUFF`: a coherent buffer of `size` bytes from the session's DMA
/// memory, exported as a new dma-buf fd (owned by the caller). Fails with `ENOMEM`, `EINVAL`.
pub fn alloc_dma_buff<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd, size: u64) -> Result<OwnedFd, Error> {
    let mut b = fastrpc_alloc_dma_buf { fd: -1, flags: 0, size };
    check_rc(ioctl_plain(sys, fd.0, ioctl::FASTRPC_IOCTL_ALLOC_DMA_BUFF, &mut b))?;
    if b.fd < 0 {
        return Err(Error::Invalid);
    }
    // SAFETY: a successful ALLOC_DMA_BUFF installs a new descriptor in this process and writes
    // its number back; nobody else knows the number yet, so the caller becomes its only owner.
    Ok(unsafe { OwnedFd::from_raw(Fd(b.fd)) })
}

/// `FASTRPC_IOCTL_FREE_DMA_BUFF`: declared by the header; mainline has no handler (`ENOTTY`):
/// a buffer from [`alloc_dma_buff`] is freed by closing its fd.
pub fn free_dma_buff<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd, buf: Fd) -> Result<(), Error> {
    let mut v = buf.0 as u32;
    check_rc(ioctl_plain(sys, fd.0, ioctl::FASTRPC_IOCTL_FREE_DMA_BUFF, &mut v))
}

/// `FASTRPC_IOCTL_MMAP`: gives the DSP process `size` bytes of kernel-allocated memory
/// (`flags` [`ADSP_MMAP_ADD_PAGES`] or [`ADSP_MMAP_REMOTE_HEAP_ADDR`]); returns the DSP address.
/// Fails with `EINVAL` (other flags), `ENOMEM`, `ETIMEDOUT`, `EPIPE`.
pub fn mmap<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd, flags: u32, size: u64) -> Result<u64, Error> {
    let mut m = fastrpc_req_mmap { fd: -1, flags, vaddrin: 0, size, vaddrout: 0 };
    check_rc(ioctl_plain(sys, fd.0, ioctl::FASTRPC_IOCTL_MMAP, &mut m))?;
    Ok(m.vaddrout)
}

/// `FASTRPC_IOCTL_MUNMAP`: returns memory from [`mmap`], matched exactly by (vaddrout, size);
/// `EINVAL` if none matches.
pub fn munmap<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd, vaddrout: u64, size: u64) -> Result<(), Error> {
    let mut m = fastrpc_req_munmap { vaddrout, size };
    check_rc(ioctl_plain(sys, fd.0, ioctl::FASTRPC_IOCTL_MUNMAP, &mut m))
}

/// `FASTRPC_IOCTL_MEM_MAP`: maps `length` bytes of the dma-buf `buf` (host address `vaddrin`,
/// which the driver only records) into the DSP process until [`mem_unmap`] or close, with
/// `FASTRPC_MAP_*` `flags`; returns the DSP address. Fails with `EINVAL` (an fd that cannot be
/// mapped), `ETIMEDOUT`, `EPIPE`, the DSP's result.
pub fn mem_map<S: Syscalls + ?Sized>(
    sys: &S,
    fd: FastrpcFd,
    buf: Fd,
    offset: i32,
    flags: u32,
    vaddrin: u64,
    length: u64,
) -> Result<u64, Error> {
    let mut m =
        fastrpc_mem_map { version: 0, fd: buf.0, offset, flags, vaddrin, length, vaddrout: 0, attrs: 0, reserved: [0; 4], _pad0: 0 };
    check_rc(ioctl_plain(sys, fd.0, ioctl::FASTRPC_IOCTL_MEM_MAP, &mut m))?;
    Ok(m.vaddrout)
}

/// `FASTRPC_IOCTL_MEM_UNMAP`: removes the map of `buf` at DSP address `vaddr`; `EINVAL` if
/// none matches.
pub fn mem_unmap<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd, buf: Fd, vaddr: u64, length: u64) -> Result<(), Error> {
    let mut m = fastrpc_mem_unmap { vesion: 0, fd: buf.0, vaddr, length, reserved: [0; 5], _pad0: 0 };
    check_rc(ioctl_plain(sys, fd.0, ioctl::FASTRPC_IOCTL_MEM_UNMAP, &mut m))
}

/// `FASTRPC_IOCTL_GET_DSP_INFO`: the DSP's value of capability `attribute_id` for `domain`.
/// Fails with `ECHRNG` (domain >= 5, or the modem), `EOVERFLOW` (attribute >= 256),
/// `EOPNOTSUPP` (the DSP does not answer capability queries), `ETIMEDOUT`, `EPIPE`.
pub fn get_dsp_info<S: Syscalls + ?Sized>(sys: &S, fd: FastrpcFd, domain: u32, attribute_id: u32) -> Result<u32, Error> {
    let mut c = fastrpc_ioctl_capability { domain, attribute_id, capability: 0, reserved: [0; 4] };
    check_rc(ioctl_plain(sys, fd.0, ioctl::FASTRPC_IOCTL_GET_DSP_INFO, &mut c))?;
    Ok(c.capability)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers of mainline `misc/fastrpc.h` for aarch64, typed independently
    /// (kernel-abi.md 3). `tests/tests/abi_headers.rs` also compiles the system's 6.1 header.
    #[test]
    fn request_numbers_match_the_headers() {
        let expected: &[(&str, u32)] = &[
            ("FASTRPC_IOCTL_ALLOC_DMA_BUFF", 0xC010_5201),
            ("FASTRPC_IOCTL_FREE_DMA_BUFF", 0xC004_5202),
            ("FASTRPC_IOCTL_INVOKE", 0xC010_5203),
            ("FASTRPC_IOCTL_INIT_ATTACH", 0x0000_5204),
            ("FASTRPC_IOCTL_INIT_CREATE", 0xC018_5205),
            ("FASTRPC_IOCTL_MMAP", 0xC020_5206),
            ("FASTRPC_IOCTL_MUNMAP", 0xC010_5207),
            ("FASTRPC_IOCTL_INIT_ATTACH_SNS", 0x0000_5208),
            ("FASTRPC_IOCTL_INIT_CREATE_STATIC", 0xC010_5209),
            ("FASTRPC_IOCTL_MEM_MAP", 0xC040_520A),
            ("FASTRPC_IOCTL_MEM_UNMAP", 0xC030_520B),
            ("FASTRPC_IOCTL_GET_DSP_INFO", 0xC01C_520D),
        ];
        assert_eq!(IOCTLS, expected);
        // The reuse the fd types guard against.
        assert_eq!(FASTRPC_IOCTL_INVOKE, crate::adsprpc::FASTRPC_IOCTL_MUNMAP);
    }

    #[test]
    fn invoke_args_order_scalars_and_ranges() {
        let input = [1u8; 8];
        let mut out = [0u8; 16];
        let mut args = InvokeArgs::<'_, 8>::new(2).unwrap();
        args.input(&input).unwrap();
        args.output(&mut out).unwrap();
        assert_eq!(args.input(&input).err(), Some(ArgsError::Order));
        args.in_handle(Fd(5), 64, 4096, FASTRPC_ATTR_SECUREMAP).unwrap();
        assert_eq!(args.in_handle(Fd(-1), 0, 1, 0).err(), Some(ArgsError::NoFd));
        assert_eq!(args.scalars().raw(), 0x0201_0110);
        let a = args.args();
        assert_eq!((a[0].length, a[0].fd), (8, -1));
        assert_eq!((a[1].length, a[1].fd), (16, -1));
        assert_eq!(a[2], fastrpc_invoke_args { ptr: 64, length: 4096, fd: 5, attr: 1 });
        assert!(InvokeArgs::<'_, 1>::new(32).is_err());
    }
}
