//! The whole stack on a bench: a HAL session with the runtime's reverse file service serving
//! its listener ([`start`], [`Stack`]), v2 launches packed by the runtime ([`launch`],
//! [`launch_add_u8`]), and what the whole-stack tests share (which bench request a launch is
//! counted as, what a rebuild fails with while the DSP is down, waiting for the bench's
//! accounting to settle).

use std::time::Duration;

use hexrpc_bench::{Bench, CallKind, KernelFootprint, Snapshot};
use hexrpc_bsp::{Board, DeviceAccess, KernelAbi};
use hexrpc_drivers::{Errno, Syscalls};
use hexrpc_hal::{BufferView, HalError, Library, Session};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::{Error, ServedSession};

use crate::error::ModelError;

/// A served session on the bench.
pub type Rig = ServedSession<Bench>;

/// Starts a served session on `bench` (either kernel) with the bench board's file policy.
///
/// # Panics
/// If `bench` is not on a bench board (every [`Bench`] is).
pub fn start(bench: &Bench) -> Result<Rig, Error> {
    let access = DeviceAccess::for_bench_board(bench.board()).expect("a bench board");
    ServedSession::start(bench.clone(), &access, FilePolicy::for_board(bench.board()).expect("bench policy"))
}

/// The bench's invoke request on `board`'s driver (what a launch is counted as).
pub fn invoke_kind(board: &Board) -> CallKind {
    match board.abi {
        KernelAbi::DownstreamMsm => CallKind::RpcInvokeAttrs,
        KernelAbi::Upstream => CallKind::UpInvoke,
    }
}

/// What (re)building a session fails with while the DSP is down: downstream INIT is refused
/// with `ENOTCONN`; the upstream node does not exist (`ENOENT`).
pub fn dsp_down_errno(board: &Board) -> Errno {
    match board.abi {
        KernelAbi::DownstreamMsm => Errno::ENOTCONN,
        KernelAbi::Upstream => Errno::ENOENT,
    }
}

/// Waits until the bench's counts are back to `start` (teardown happens on other threads too),
/// up to what the kernel keeps for good after hexrpc released everything
/// ([`Bench::kernel_leaks`]: nothing on the simulated kernels; on Linux 6.1.192's own driver,
/// the files whose call was interrupted, timed out or in flight at a DSP restart). Such leaks
/// are printed, so a run's log counts them.
pub fn back_to(bench: &Bench, start: &Snapshot) -> Snapshot {
    let s = bench.settle_except_kernel_leaks(start, Duration::from_secs(2));
    let leaks = bench.kernel_leaks();
    if leaks.users > 0 {
        eprintln!("kernel leaks (kept by the driver after release): {leaks:?}");
    }
    s
}

/// The simulated kernel's share of this process at one moment ([`kernel_mark`]): its memory
/// (coherent buffers, its mappings of dma-bufs) and the buffers it keeps for good, whose
/// memfds stay open. All zero on the models.
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelMark {
    footprint: KernelFootprint,
    kept_buffers: usize,
}

/// What the simulated kernel added to the process between two [`KernelMark`]s: a footprint
/// check of hexrpc (descriptors, mappings, RSS) allows exactly this much more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelGrowth {
    /// Descriptors: the kept buffers' memfds.
    pub fds: usize,
    /// Shared memfd mappings: the kernel's mappings of dma-bufs.
    pub buffer_maps: usize,
    /// Mappings of any kind: those plus its coherent buffers.
    pub maps: usize,
    /// Their bytes, in KiB.
    pub kib: u64,
}

/// The kernel's share of the process now ([`Bench::kernel_footprint`], [`Bench::kernel_leaks`]).
pub fn kernel_mark(bench: &Bench) -> KernelMark {
    KernelMark { footprint: bench.kernel_footprint(), kept_buffers: bench.kernel_leaks().buffers.len() }
}

impl KernelMark {
    /// What the kernel added since `earlier`.
    pub fn growth_since(&self, earlier: &KernelMark) -> KernelGrowth {
        let (a, b) = (&self.footprint, &earlier.footprint);
        KernelGrowth {
            fds: self.kept_buffers.saturating_sub(earlier.kept_buffers),
            buffer_maps: a.buffer_mappings.saturating_sub(b.buffer_mappings),
            maps: (a.coherent + a.buffer_mappings).saturating_sub(b.coherent + b.buffer_mappings),
            kib: (a.coherent_bytes + a.buffer_bytes).saturating_sub(b.coherent_bytes + b.buffer_bytes) / 1024,
        }
    }
}

/// Packs a v2 launch of `signature` on `views` and `scalars` and invokes it on `lib`; returns
/// the microseconds the entry measured (emulator host clock under the executor, not DSP time).
pub fn launch<S: Syscalls + Clone>(
    lib: &Library<'_, S>,
    signature: &Signature,
    views: &[&BufferView<'_>],
    scalars: &[Scalar],
) -> Result<u64, ModelError> {
    let refs: Vec<BufferRef<'_>> = views.iter().map(|v| BufferRef::of(*v)).collect();
    let mut packed = PackedLaunch::new(AbiVersion::V2, signature, &refs, scalars)?;
    lib.invoke(&mut packed.invoke_args().map_err(|e| ModelError::Args(format!("{e:?}")))?)?;
    Ok(packed.dsp_micros())
}

/// One launch of [`ADD_U8`](crate::catalogue::ADD_U8) (or a library with its signature) on two
/// views with scalar `add`, with an optional deadline; returns the microseconds the entry
/// measured.
pub fn launch_add_u8<S: Syscalls + Clone + Send + Sync + 'static>(
    lib: &Library<'_, S>,
    input: &BufferView<'_>,
    output: &BufferView<'_>,
    add: u8,
    deadline: Option<Duration>,
) -> Result<u64, HalError> {
    launch_buf_buf_u32(lib, input, output, u32::from(add), deadline)
}

/// One launch of a `buf,buf,u32` kernel (the signature of
/// [`ADD_U8`](crate::catalogue::ADD_U8) and of the tests' own table kernels) on two views with
/// scalar `k`, with an optional deadline; returns the microseconds the entry measured.
pub fn launch_buf_buf_u32<S: Syscalls + Clone + Send + Sync + 'static>(
    lib: &Library<'_, S>,
    input: &BufferView<'_>,
    output: &BufferView<'_>,
    k: u32,
    deadline: Option<Duration>,
) -> Result<u64, HalError> {
    let sig = Signature::parse("buf,buf,u32").expect("a valid signature");
    let bufs = [BufferRef::of(input), BufferRef::of(output)];
    let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(k)]).expect("two views and a u32 pack");
    let mut args = packed.invoke_args().expect("two views fit the argument list");
    match deadline {
        Some(d) => lib.invoke_with_deadline(&mut args, d)?,
        None => lib.invoke(&mut args)?,
    }
    Ok(packed.dsp_micros())
}

/// A HAL session on a bench with the reverse service serving it (the runtime's
/// [`ServedSession`]), for workloads that report [`ModelError`]s.
pub struct Stack {
    served: ServedSession<Bench>,
    bench: Bench,
}

impl Stack {
    /// Starts a session on `bench` and the reverse service for it.
    pub fn start(bench: Bench) -> Result<Stack, ModelError> {
        let policy = FilePolicy::for_board(bench.board()).map_err(|e| ModelError::Service(format!("{e:?}")))?;
        let access = DeviceAccess::for_bench_board(bench.board()).ok_or_else(|| ModelError::Service("not a bench board".into()))?;
        let served = ServedSession::start(bench.clone(), &access, policy).map_err(|e| match e {
            Error::Thread(t) => ModelError::Service(t.to_string()),
            other => ModelError::from(other),
        })?;
        Ok(Stack { served, bench })
    }

    /// The bench.
    pub fn bench(&self) -> &Bench {
        &self.bench
    }

    /// The HAL session.
    pub fn session(&self) -> &Session<Bench> {
        self.served.session()
    }

    /// The served session.
    pub fn served(&self) -> &ServedSession<Bench> {
        &self.served
    }

    /// Opens `image` (published in the reverse service) as library `name`.
    pub fn open(&self, name: &str, image: &'static [u8]) -> Result<Library<'_, Bench>, ModelError> {
        Ok(self.served.open_library(name, image)?)
    }

    /// [`open`](Self::open) with the map cache said explicitly (an image built with
    /// `EntryOptions::map_cache` has no build record to say it).
    pub fn open_with(&self, name: &str, image: &'static [u8], map_cache: bool) -> Result<Library<'_, Bench>, ModelError> {
        Ok(self.served.open_library_with(name, image, map_cache)?)
    }
}
