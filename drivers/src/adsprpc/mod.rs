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
//! restart. Every typed call here maps positive values to [`Error::Returned`](crate::Error::Returned).
//!
//! The driver has **no invoke timeout**: a user invoke waits interruptibly forever; an
//! interrupted invoke is parked and can only be resumed by the same thread with the same
//! scalars word, or freed by closing the fd.
//!
//! The upstream driver (`/dev/fastrpc-*`) uses the same `'R'` group with different meanings
//! (upstream INVOKE has the number of downstream MUNMAP). Pick the driver by device node.
#![allow(non_camel_case_types)]

// Bottom-up: `structs` and `consts` use nothing of this module; `ioctl` declares the requests
// on them and `numbers` reads their raw numbers; `calls` makes the requests other than INVOKE;
// `request` is one INVOKE and its run to completion, which the argument lists (`args`, then
// `frame`) and the typed invokes (`invoke`) build on. No file uses one above it.
mod args;
mod calls;
mod consts;
mod frame;
mod invoke;
/// The downstream adsprpc requests, each declared from (group, number, argument type): the typed calls of
/// this module take these, so a request cannot be sent with an argument of another type.
pub mod ioctl;
mod numbers;
mod request;
mod structs;

pub use args::{ArgCounts, ArgsError, InvokeArgs};
pub use calls::{
    check, control, control_kalloc, control_latency, getinfo, getperf, init, init_attrs, mmap, mmap_64, munmap, munmap_64, munmap_fd,
    setmode,
};
pub use consts::*;
pub use frame::{HandleWriter, LaunchFrame};
pub use invoke::{invoke, invoke_abandonable, invoke_attrs, invoke_attrs_abandonable, invoke_crc, invoke_fd};
pub use numbers::*;
pub use structs::*;
