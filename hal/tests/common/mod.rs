//! A HAL session on the bench with the runtime's reverse file service serving its listener.

#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use hexrpc_bench::{elf, Bench, EntryVersion, LibraryModel, Snapshot};
use hexrpc_bsp::DeviceAccess;
use hexrpc_hal::HalError;
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

/// A served session on the bench.
pub type Rig = ServedSession<Bench>;

/// Starts a served session on the bench (either kernel) with the bench board's policy.
pub fn start(bench: &Bench) -> Result<Rig, hexrpc_runtime::StartError> {
    let access = DeviceAccess::for_bench_board(bench.board()).expect("a bench board");
    ServedSession::start(bench.clone(), &access, FilePolicy::for_board(bench.board()).expect("bench policy"))
}

/// The bench's invoke request on `board`'s driver (what a launch is counted as).
pub fn invoke_kind(board: &hexrpc_bsp::Board) -> hexrpc_bench::CallKind {
    match board.abi {
        hexrpc_bsp::KernelAbi::DownstreamMsm => hexrpc_bench::CallKind::RpcInvokeAttrs,
        hexrpc_bsp::KernelAbi::Upstream => hexrpc_bench::CallKind::UpInvoke,
    }
}

/// What (re)building a session fails with while the DSP is down: downstream INIT is refused
/// with `ENOTCONN`; the upstream node does not exist (`ENOENT`).
pub fn dsp_down_errno(board: &hexrpc_bsp::Board) -> hexrpc_drivers::Errno {
    match board.abi {
        hexrpc_bsp::KernelAbi::DownstreamMsm => hexrpc_drivers::Errno::ENOTCONN,
        hexrpc_bsp::KernelAbi::Upstream => hexrpc_drivers::Errno::ENOENT,
    }
}

/// A library image the bench runs as `model` (leaked: images are `'static`).
pub fn image(model: &str) -> &'static [u8] {
    Box::leak(elf::library_image(model, 8192).into_boxed_slice())
}

/// Registers model `copy2`: a v2 entry with 2 buffers and 1 scalar (a byte to add); the kernel
/// writes `in[i] + k` to `out[i]` for the shorter of the two views.
pub fn register_copy2(bench: &Bench) {
    bench.register_library(
        "copy2",
        LibraryModel::new(EntryVersion::V2, 2, 1, |k| {
            let add = k.scalar_u32(0).unwrap_or(0) as u8;
            let n = k.buffer_len(0).min(k.buffer_len(1));
            let mut v = vec![0u8; n];
            if k.read(0, 0, &mut v).is_ok() {
                v.iter_mut().for_each(|b| *b = b.wrapping_add(add));
                let _ = k.write(1, 0, &v);
            }
        }),
    );
}

/// One launch of `copy2` on two views with scalar `add`.
pub fn launch_copy2<S: hexrpc_drivers::Syscalls + Clone>(
    lib: &hexrpc_hal::Library<'_, S>,
    input: &hexrpc_hal::BufferView<'_>,
    output: &hexrpc_hal::BufferView<'_>,
    add: u8,
) -> Result<u64, HalError> {
    let sig = Signature::parse("buf,buf,u32").expect("signature");
    let bufs = [BufferRef::of(input), BufferRef::of(output)];
    let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(add as u32)]).expect("pack");
    lib.invoke(&mut packed.invoke_args().expect("args"))?;
    Ok(packed.dsp_micros())
}

/// Waits until the bench's counts are back to `start` (teardown happens on other threads too).
pub fn back_to(bench: &Bench, start: &Snapshot) -> Snapshot {
    bench.settle(start, Duration::from_secs(2))
}
