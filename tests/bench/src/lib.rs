//! The isolated bench: a simulated kernel (msm ION 4.9 + downstream adsprpc, or dma-heap +
//! upstream fastrpc, chosen by the board) and a simulated DSP process behind hexrpc's syscall
//! seam ([`hexrpc_drivers::Syscalls`]), so that everything above
//! the raw layer (HAL, runtime, CLI) can be proven without a device (docs/bench.md; driver
//! facts: docs/kernel-abi.md and docs/kernel-rules.md; protocol: docs/reverse-rpc.md; entry
//! contracts: docs/entry-abi.md).
//!
//! This crate is the simulator only: it depends on the drivers and the board descriptions, never
//! on the HAL or the runtime. Workloads that run through the whole stack on it (the model
//! network, the bench library models, executor libraries with generated entries, the
//! whole-stack tests) live in `hexrpc-scenarios` (`tests/scenarios`).
//!
//! # What it models
//!
//! * **The seam.** [`Bench`] implements [`Syscalls`](hexrpc_drivers::Syscalls). Paths under
//!   `/bench/` are a virtual file table holding the [`hexrpc_bsp::BENCH`] board's device nodes
//!   and shell; every other path goes to the real filesystem (so a reverse file service can be
//!   tested on real temp files), and every `open` is logged. Each descriptor the bench hands out
//!   is backed by a real one (a memfd), so numbers never collide with real descriptors; the
//!   bench's own backing descriptors sit at high numbers, so the numbers it hands out follow the
//!   kernel's lowest-free rule (a closed number is the next one handed out).
//! * **The kernel** ([`ion`] and [`rpc`] on [`hexrpc_bsp::BENCH`]; [`dma_heap`] and
//!   [`upstream`] on [`hexrpc_bsp::BENCH_UPSTREAM`]): every request is decoded from the
//!   raw request number and the raw bytes behind the pointer, as `copy_from_user` would, and
//!   answered as the driver does, errors included (ION: `ENOTTY`, `EFAULT`, `EINVAL`, `ENODEV`,
//!   `ENOMEM`; adsprpc: -1/`EPERM` for faulting copies and missing state, positive return
//!   values for DSP errors, `ECONNRESET` / +104 after a restart). ION buffers are memfds, so a
//!   SHARE fd and `mmap` on it are real.
//! * **The kernel rules** checked against the real drivers (docs/bench.md, "Kernel rules";
//!   `tests/kernel_rules/`): handle maps keyed by fd number that outlive the call and hand
//!   the DSP the map's buffer when a number is reused ([`Bench::driver_maps`]); one DSP process
//!   per identity (tgid, with the SETMODE session bit), released by any file of that identity
//!   ([`Bench::dsp_processes`]); a release on close that waits for the process's running calls
//!   and can be hung by a fault; 8 sessions.
//! * **The DSP**: a process per identity, created by INIT, static handles 0 (remotectl open/close by URI, which
//!   fetches the library through the reverse file service from whatever host thread sits in
//!   `next2`), 3 (the listener: init2, next2, get_in_bufs2), 4 (exit), and library handles whose
//!   `entry` is a Rust model of the v1 or v2 generated entry ([`entry`]) with a HAP ledger.
//! * **Faults, accounting, cost**: [`Bench::inject`], [`Bench::restart_dsp`], virtual paths made
//!   missing or unreadable; every restart's reason ([`Bench::last_restart`], [`RestartReason`]); [`Bench::snapshot`] / [`Bench::counts`] / [`Bench::ledger`]; a
//!   [`CostModel`] whose figures are always labelled *simulated*.
//!
//! # API overview
//!
//! ```no_run
//! use std::time::Duration;
//! use hexrpc_bench::{Bench, BenchConfig, CallKind, EntryVersion, Fault, FaultTarget, LibraryModel};
//! use hexrpc_drivers::Errno;
//!
//! // A bench on the BENCH board: /bench/dev/ion, /bench/dev/adsprpc-smd, and a Hexagon shell at
//! // /bench/dsp/cdsp/fastrpc_shell_3. `Bench` is a cheap clonable handle: pass it (or `&bench`)
//! // wherever an `S: Syscalls` goes.
//! let bench = Bench::with_config(BenchConfig::default());
//! let start = bench.snapshot();
//!
//! // A library the DSP can load as file:///scale?entry&_modver=1.0&_dom=cdsp. Its bytes are
//! // served by the host's reverse file service (write hexrpc_bench::elf::hexagon_elf(..) to a
//! // file the service may serve); the model says which entry contract it was generated for.
//! bench.register_library(
//!     "scale",
//!     LibraryModel::new(EntryVersion::V2, 1, 0, |k| {
//!         let mut v = k.read_all(0).unwrap_or_default();
//!         v.iter_mut().for_each(|b| *b = b.wrapping_mul(2));
//!         let _ = k.write(0, 0, &v);
//!     }),
//! );
//!
//! // Faults: the 2nd ION_IOC_ALLOC fails with ENOMEM; a DSP restart; a missing shell.
//! bench.inject(FaultTarget::Call(CallKind::IonAlloc), 2, Fault::Errno(Errno::ENOMEM));
//! bench.set_missing("/bench/dsp/cdsp/fastrpc_shell_3");
//! bench.restart_dsp();
//!
//! // ... run the code under test on `bench.clone()` ...
//!
//! // Accounting: everything back where it started, no contract violation on the DSP side.
//! assert_eq!(bench.settle(&start, Duration::from_secs(1)), start);
//! assert_eq!(bench.ledger_mismatches(), 0);
//! ```
//!
//! A hostile DSP is scripted with [`Bench::post_reverse`] / [`Bench::reverse_call`]: the test
//! chooses the reverse handle, scalars word and raw payload (and may lie in `bufsLenReq`), and
//! gets the host's raw answer back.
//!
//! # Where the model is not faithful
//!
//! Each module says what it leaves out; in short:
//! * bad user pointers are only *detected* when null, below 4096 or beyond the 48-bit user space
//!   ([`user`]); `munmap` of a range the bench did not map is refused with `EINVAL`
//!   (Linux would unmap it); closing a descriptor the bench did not hand out is `EBADF`;
//! * the downstream MMAP `vaddrout` write-back is a configuration choice
//!   ([`BenchConfig::mmap_writes_vaddrout`], default off as in the comma three's driver; newer
//!   CAF trees write it);
//! * what the DSP lists in the fdlist is a policy ([`BenchConfig::fdlist`], default: nothing),
//!   not the real, unknown rule; handle maps record the buffer's length (the driver's are
//!   va 0 / len 0); the bench is one host process (one tgid), so another host process's
//!   identity cannot be simulated;
//! * a release on close waits for the released process's running library calls, not for calls
//!   held by an injected `Hang`/`Delay` fault nor for static-handle calls, which end with the
//!   process;
//! * buffer arguments are always copied, never mapped; SMMU faults (+39) are never produced;
//! * the DSP loader's sequence of apps_std calls is not known and is a choice ([`dsp`]); so are
//!   the AEE codes of several DSP-side failures (a duplicate identity: `AEE_EBADSTATE`), and the bounded wait
//!   for reverse answers (a real DSP waits forever);
//! * HAP_mmap is a real `mmap` of the buffer's memfd; what real HAP functions do with unaligned or
//!   non-base addresses is not known; `HAP_power_set` is not modelled; the timer is host time;
//! * an interrupt delivered while the thread is not blocked in a bench wait is lost, as a signal
//!   would be (use [`Bench::wait_until_blocked`] in tests);
//! * DSP-shared memory can change under the CPU on a device at any time; here it changes only
//!   while a DSP worker runs a kernel function;
//! * upstream kernel ([`upstream`], [`dma_heap`]): a buffer passed by fd is copied at send and
//!   written back at completion (a device's DSP works in place); GET_DSP_INFO answers from an
//!   invented table; the caches of a cached heap are not modelled (a missing
//!   `DMA_BUF_IOCTL_SYNC` shows only in [`CallCounts::dsp_use_during_cpu_access`]); an invoke
//!   before INIT is answered with `AEE_EBADSTATE` (the real root PD's answer is not known);
//! * reverse-request context numbers and MMAP DSP addresses are unique across every simulated
//!   process and channel (a real driver numbers them per channel), so that an answer or a MUNMAP
//!   that reaches the wrong channel is caught ([`CallCounts::stray_answers`],
//!   [`Bench::munmap_log`]) instead of being taken for one of that channel's own;
//! * a library call whose process is killed under it (a restart) records nothing in the ledger
//!   after that point: a real DSP process stops there, while the model's host code goes on.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod account;
mod bench;
mod config;
pub mod dma_heap;
mod driver_map;
pub mod dsp;
pub mod elf;
pub mod entry;
pub mod executor;
mod foreign;
pub mod ion;
#[cfg(feature = "linux")]
pub mod linux;
pub mod measure;
mod release;
mod restart;
pub mod rpc;
mod state;
pub mod upstream;
pub mod user;
pub mod wire;
pub mod workers;

pub use account::{
    CallCounts, CallKind, DspCallKind, Fault, FaultTarget, LatencySample, LatencySummary, LedgerEntry, LedgerEvent, MunmapRecord, Oops,
    OopsKind, OpenRecord, PmQosOp, PmQosRecord, ReverseRecord, Snapshot,
};
pub use bench::inspect::{DspProcessInfo, GlobalHeapMap, KernelFootprint, KernelLeaks};
pub use bench::reverse::{ReverseReply, ReverseRequest, ReverseTicket};
pub use bench::{Bench, WeakBench, DEFAULT_SHELL_LEN};
pub use config::{parse_call_limit, BenchConfig, BenchEnvError, CostModel, FdlistPolicy, CALL_LIMIT_ENV, MAX_CALL_LIMIT_MS};
pub use driver_map::{BufferId, DriverMap, DriverMapKind};
pub use dsp::{ReverseError, STALE_BYTE};
pub use entry::{AccessError, EntryVersion, KernelCall, KernelFn, LibraryModel, TableKernel, BATCH_MAGIC, V2_MAGIC};
pub use restart::{RestartKind, RestartReason, ShellFault, ShellStep};
pub use state::ChannelReopen;

/// The bench kernels: [`hexrpc_bsp::BENCH`] (msm ION 4.9 + downstream adsprpc),
/// [`hexrpc_bsp::BENCH_UPSTREAM`] (dma-heap + the upstream fastrpc model) and, with the `linux`
/// feature, [`hexrpc_bsp::BENCH_LINUX`] (dma-heap + Linux's own `fastrpc.c`, the `linux`
/// module).
#[cfg(not(feature = "linux"))]
pub const KERNELS: &[&hexrpc_bsp::Board] = &[&hexrpc_bsp::BENCH, &hexrpc_bsp::BENCH_UPSTREAM];
/// The bench kernels: [`hexrpc_bsp::BENCH`] (msm ION 4.9 + downstream adsprpc),
/// [`hexrpc_bsp::BENCH_UPSTREAM`] (dma-heap + the upstream fastrpc model) and, with the `linux`
/// feature, [`hexrpc_bsp::BENCH_LINUX`] (dma-heap + Linux's own `fastrpc.c`, [`linux`]).
#[cfg(feature = "linux")]
pub const KERNELS: &[&hexrpc_bsp::Board] = &[&hexrpc_bsp::BENCH, &hexrpc_bsp::BENCH_UPSTREAM, &hexrpc_bsp::BENCH_LINUX];

/// With the `linux` feature: the `linux::name` tests of [`on_both_kernels!`].
#[cfg(feature = "linux")]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_the_linux_kernel {
    ($($name:ident),*) => {
        mod linux {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::KERNELS[2])
                }
            )*
        }
    };
}

/// Without the `linux` feature there is no third kernel.
#[cfg(not(feature = "linux"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_the_linux_kernel {
    ($($name:ident),*) => {};
}

/// Runs test functions on every bench kernel: for each `fn name(board: &'static Board)` named,
/// generates `downstream::name` and `upstream::name` `#[test]`s that call it with
/// [`KERNELS`]`[0]` and [`KERNELS`]`[1]`, and with the `linux` feature `linux::name` with
/// [`KERNELS`]`[2]` (Linux's own driver). The suites are parametrized this way, not copied.
#[macro_export]
macro_rules! on_both_kernels {
    ($($name:ident),* $(,)?) => {
        $crate::__on_the_linux_kernel!($($name),*);
        mod downstream {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::KERNELS[0])
                }
            )*
        }
        mod upstream {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::KERNELS[1])
                }
            )*
        }
    };
}

// The HAL hands the bench to listener and deadline threads: it must be a shareable seam.
const _: fn() = || {
    fn seam<T: hexrpc_drivers::Syscalls + Clone + Send + Sync + 'static>() {}
    seam::<Bench>();
};
