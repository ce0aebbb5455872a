//! Raw bindings for the kernel drivers the Hexagon compute DSP is reached through: on downstream
//! Qualcomm kernels msm ION (Linux 4.9, `/dev/ion`) for shareable buffers and the downstream
//! `adsprpc` FastRPC driver (`/dev/adsprpc-smd`) for calls into the DSP; on mainline kernels
//! dma-buf heaps (`/dev/dma_heap/*`) and the upstream FastRPC driver (`/dev/fastrpc-*`).
//!
//! This crate is the *raw layer* of hexrpc (as `drm-sys`/`drm-ffi` or `kvm-bindings` are for
//! theirs). It holds:
//!
//! * the ABI structs, `#[repr(C)]`, field names exactly as in the C headers, padding spelled out
//!   as named fields, with compile-time size / align / offset assertions ([`ion`], [`adsprpc`],
//!   [`dsp`], [`apps_std`], [`listener`]);
//! * every ioctl request number, computed from (direction, group, number, argument type) by
//!   [`ioc`], never typed as hex;
//! * the ELF32 structs and a checked, zerocopy reader for the images the DSP loads ([`elf`],
//!   with [`elf::EM_HEXAGON`]);
//! * the scalars word ([`Scalars`]) that describes a FastRPC call's arguments;
//! * the *syscall seam* ([`Syscalls`]): the only way this crate, and everything above it, touches
//!   the OS. Its real implementation is [`RustixSys`] (feature `rustix`, on by default); the
//!   isolated bench (crate `hexrpc-bench`) implements it with a simulated kernel and DSP.
//!   Descriptors cross it typed: `open` returns an [`OwnedFd`] token, `close` consumes one and
//!   `retire` takes a [`BorrowedFd`], so safe code can neither close nor retire a number it does
//!   not own; an [`FdCell`] lends a descriptor out by counted leases and keeps the number open
//!   until every lease is back (how a session keeps an old channel's number from being reused);
//! * thin typed calls, one per ioctl, returning [`Error`], which keeps an `errno` apart from a
//!   *positive* return value (the downstream driver returns DSP error codes and `ECONNRESET`
//!   after a DSP restart as positive values, which must never be taken for success).
//!
//! Two kernel generations are described: the downstream one ([`ion`] 4.9 + [`adsprpc`],
//! `/dev/adsprpc-smd`) and the upstream one ([`dma_heap`] + [`upstream`], `/dev/dma_heap/*` and
//! `/dev/fastrpc-*`). The two FastRPC drivers reuse the `'R'` ioctl group with different
//! meanings, so their calls take different descriptor types ([`Fd`] downstream,
//! [`upstream::FastrpcFd`] upstream) and one driver's request cannot be sent to the other's fd
//! through the typed API (a compile error; see [`upstream`]).
//!
//! Without the `rustix` feature the crate is `no_std` with no OS dependency at all and builds
//! for `aarch64-unknown-none`.
//!
//! # Memory shared with the DSP
//!
//! Memory mapped from an ION buffer ([`Mapping`]) is shared with the DSP, which may read and write
//! it whenever it holds the buffer, and other mappings of the same buffer may write it too. This
//! crate never forms Rust references to the bytes of such memory: it copies in and out (vm-memory's
//! `VolatileSlice` discipline) with relaxed atomic accesses to its aligned 8-byte words only, so a
//! concurrent write — by the DSP or through a second `Mapping` of the same fd, even from safe
//! code — can make the data inconsistent but is not undefined behaviour (Miri checks this on a
//! heap-backed seam, `.ci/miri`).
//!
//! # Interrupts
//!
//! [`RustixSys::interrupt`] ends a blocked ioctl with a signal on a dedicated real-time signal
//! ([`interrupt_signal`]) that had no handler; the application's own signal handlers are never
//! replaced. With the `std` feature, `watchdog` is the process's one watchdog thread that
//! sends those interrupts when a call's deadline passes (arming a deadline starts no thread).
#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!("hexrpc-drivers describes the LP64 (64-bit) kernel ABI only");

pub mod adsprpc;
pub mod aee;
pub mod apps_std;
pub mod dma_heap;
pub mod dsp;
pub mod elf;
mod errno;
mod error;
mod fdcell;
pub mod fixed;
pub mod ioc;
pub mod ion;
pub mod layout;
pub mod listener;
mod mapping;
mod scalars;
mod sys;
pub mod upstream;

#[cfg(feature = "rustix")]
mod mapped_file;
#[cfg(feature = "rustix")]
mod rustix_sys;
#[cfg(feature = "std")]
pub mod watchdog;
#[cfg(feature = "std")]
pub use watchdog::fork_generation;

pub use errno::Errno;
pub use error::Error;
pub use fdcell::{FdCell, FdLease};
#[cfg(feature = "rustix")]
pub use mapped_file::MappedFile;
pub use mapping::{Mapping, RangeError};
#[cfg(feature = "rustix")]
pub use rustix_sys::{interrupt_signal, use_interrupt_signal, NullDevice, RustixSys};
pub use scalars::Scalars;
pub use sys::{BorrowedFd, Fd, FileStat, OpenAt, OpenFlags, OwnedFd, Prot, RefusingSys, SeamHooks, Syscalls};

#[doc(hidden)]
pub mod __private {
    pub use static_assertions;
}
