//! Small additions for callers that pick a board or read the bench's accounting (the tinygrad
//! device, `hexrpc.tinygrad`; the comparison tool, `hexrpc.compare`): `detect_board(model)` and
//! `bench_counters(session)`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::Session;

/// The board whose device-tree model (the contents of `/proc/device-tree/model`) matches
/// `model`, by hexrpc's board table; `None` if no board claims it.
#[pyfunction]
pub fn detect_board(model: &str) -> Option<&'static str> {
    hexrpc_bsp::detect(model).map(|b| b.name)
}

/// What the bench behind `session` has counted so far (totals since the session's bench was made;
/// a caller takes differences around what it measures):
///
/// * `invokes`: FastRPC INVOKE ioctls of every variant;
/// * `fastrpc_requests`: every request to a FastRPC driver (INVOKE, INIT, MMAP, MUNMAP, ...,
///   downstream and upstream): unchanged around a call that was refused before anything was sent;
/// * `bytes_copied`: bytes the kernel models copied between user memory and their copy buffers
///   for FastRPC calls (buffer arguments without a mapped descriptor; a lease, which the driver
///   maps, adds nothing);
/// * `ioctls`: every ioctl on a simulated device;
/// * `simulated_invoke_us`: the invokes' simulated latency summed by the bench's cost model
///   (simulated, never a device figure);
/// * `driver_maps`: FastRPC MMAP requests to the kernel driver (MMAP, MMAP_64, upstream MMAP and
///   MEM_MAP ioctls);
/// * `dsp_maps` / `dsp_unmaps`: `HAP_mmap` calls the DSP-side entries made, and `HAP_munmap`
///   calls that unmapped something, from the bench's HAP ledger (what a map cache saves);
/// * `copied_kib`: KiB copied between user and kernel by the invokes, each invoke's bytes rounded
///   up to a whole KiB, as the cost model charges them, derived from the cost model:
///   (`simulated_invoke_us` − invokes × per-crossing cost − the ledger's maps and unmaps × their
///   costs) / per-KiB cost. Exact for executor kernels, whose
///   simulated DSP time is only the map cost; a catalogue model that declares DSP time of its own
///   counts that time as copies. `None` when the cost model charges nothing per KiB;
/// * `ledger_dropped`, `latencies_dropped`: ledger entries and latency samples the bench's bounded
///   logs did not keep (non-zero: `dsp_maps`, `dsp_unmaps`, `simulated_invoke_us` and `copied_kib`
///   undercount).
///
/// Reading the ledger copies it: the cost grows with the number of maps recorded so far.
/// Raises `hexrpc.InvalidArgument` for a session that does not run on the bench.
#[pyfunction]
pub fn bench_counters<'py>(py: Python<'py>, session: &Session) -> PyResult<Bound<'py, PyDict>> {
    let obj = session.get()?;
    #[cfg(feature = "bench")]
    if let Some(bench) = obj.bench() {
        let counts = bench.counts();
        let invokes: u64 = counts.calls.iter().filter(|(k, _)| k.is_invoke()).map(|(_, n)| n).sum();
        let ioctls: u64 = counts.calls.iter().filter(|(k, _)| is_ioctl(**k)).map(|(_, n)| n).sum();
        let driver_maps: u64 = counts.calls.iter().filter(|(k, _)| is_driver_map(**k)).map(|(_, n)| n).sum();
        let samples = bench.latencies();
        let invoke_samples = samples.iter().filter(|s| s.kind.is_invoke()).count() as u64;
        let simulated: std::time::Duration = samples.iter().filter(|s| s.kind.is_invoke()).map(|s| s.simulated).sum();
        let (maps, unmaps) = hap_maps(&bench.ledger());
        let (ledger_dropped, latencies_dropped) = bench.log_overflow();
        let copied = copied_kib(&bench.config().cost, simulated, invoke_samples, maps, unmaps);
        let d = PyDict::new(py);
        let fastrpc: u64 = counts.calls.iter().filter(|(k, _)| is_fastrpc(**k)).map(|(_, n)| n).sum();
        d.set_item("invokes", invokes)?;
        d.set_item("fastrpc_requests", fastrpc)?;
        d.set_item("bytes_copied", counts.bytes_copied)?;
        d.set_item("ioctls", ioctls)?;
        d.set_item("simulated_invoke_us", simulated.as_secs_f64() * 1e6)?;
        d.set_item("driver_maps", driver_maps)?;
        d.set_item("dsp_maps", maps)?;
        d.set_item("dsp_unmaps", unmaps)?;
        d.set_item("copied_kib", copied)?;
        d.set_item("ledger_dropped", ledger_dropped)?;
        d.set_item("latencies_dropped", latencies_dropped)?;
        return Ok(d);
    }
    drop(obj);
    let _ = py;
    Err(crate::InvalidArgument::new_err("bench-counters: the session does not run on the bench"))
}

/// `hexrpc._hexrpc.take_exec_counts(session)`: what qemu-hexagon executed for each executor
/// invoke since the last call (the bench shell reads qemu's own counters: **emulated packets,
/// not DSP time**, exactly repeatable run to run), as a dict:
///
/// * `invokes`: one dict per invoke, oldest first: `library`, `method` (5 a program, 2 or 3 a
///   batch), `retval` (0: the entry ran), `packets`, `instructions`, `hvx` (HVX instructions),
///   and `kernels`: per kernel call in run order a `(packets, instructions, hvx)` tuple (the
///   counts between the entry's timer reads around that call), an empty list for an entry that
///   read no timer, `None` when the reads could not be paired;
/// * `dropped`: invokes the bench's bounded log did not keep since the last call.
///
/// Invokes of the bench's simulated library models run no Hexagon code and have none. Raises
/// `hexrpc.InvalidArgument` for a session that does not run on the bench.
#[pyfunction]
pub fn take_exec_counts<'py>(py: Python<'py>, session: &Session) -> PyResult<Bound<'py, PyDict>> {
    let obj = session.get()?;
    #[cfg(feature = "bench")]
    if let Some(bench) = obj.bench() {
        let (counts, dropped) = bench.take_exec_counts();
        let invokes = pyo3::types::PyList::empty(py);
        for c in counts {
            let d = PyDict::new(py);
            d.set_item("library", &c.library)?;
            d.set_item("method", c.method)?;
            d.set_item("retval", c.retval)?;
            d.set_item("packets", c.total.packets)?;
            d.set_item("instructions", c.total.instructions)?;
            d.set_item("hvx", c.total.hvx)?;
            let kernels: Option<Vec<(u64, u64, u64)>> = c.kernels.map(|k| k.iter().map(|k| (k.packets, k.instructions, k.hvx)).collect());
            d.set_item("kernels", kernels)?;
            invokes.append(d)?;
        }
        let d = PyDict::new(py);
        d.set_item("invokes", invokes)?;
        d.set_item("dropped", dropped)?;
        return Ok(d);
    }
    drop(obj);
    let _ = py;
    Err(crate::InvalidArgument::new_err("take-exec-counts: the session does not run on the bench"))
}

#[cfg(feature = "bench")]
fn is_ioctl(k: hexrpc_bench::CallKind) -> bool {
    use hexrpc_bench::CallKind::*;
    !matches!(k, Open | Close | Pread | Fstat | Stat | Mmap | Munmap)
}

/// A request to a FastRPC driver (downstream adsprpc or upstream fastrpc, known or not).
#[cfg(feature = "bench")]
fn is_fastrpc(k: hexrpc_bench::CallKind) -> bool {
    use hexrpc_bench::CallKind::*;
    matches!(
        k,
        RpcInvoke
            | RpcInvokeFd
            | RpcInvokeAttrs
            | RpcInvokeCrc
            | RpcMmap
            | RpcMmap64
            | RpcMunmap
            | RpcMunmap64
            | RpcMunmapFd
            | RpcSetmode
            | RpcInit
            | RpcInitAttrs
            | RpcGetinfo
            | RpcGetperf
            | RpcControl
            | RpcUnknown
            | UpInvoke
            | UpInitAttach
            | UpInitAttachSns
            | UpInitCreate
            | UpInitCreateStatic
            | UpAllocDmaBuff
            | UpFreeDmaBuff
            | UpMmap
            | UpMunmap
            | UpMemMap
            | UpMemUnmap
            | UpGetDspInfo
            | UpUnknown
    )
}

/// A request that makes a kernel-driver map of a buffer on the DSP (not the host's `mmap`).
#[cfg(feature = "bench")]
fn is_driver_map(k: hexrpc_bench::CallKind) -> bool {
    use hexrpc_bench::CallKind::*;
    matches!(k, RpcMmap | RpcMmap64 | UpMmap | UpMemMap)
}

/// (`HAP_mmap`s, `HAP_munmap`s that unmapped something) in `ledger`.
#[cfg(feature = "bench")]
fn hap_maps(ledger: &[hexrpc_bench::LedgerEntry]) -> (u64, u64) {
    use hexrpc_bench::LedgerEvent;
    ledger.iter().fold((0, 0), |(m, u), e| match e.event {
        LedgerEvent::Map { .. } => (m + 1, u),
        LedgerEvent::Unmap { matched: true, .. } => (m, u + 1),
        _ => (m, u),
    })
}

/// KiB the cost model charged for copies: what is left of `simulated` (the invokes' summed
/// latency) after `invokes` crossings and the maps' and unmaps' DSP cost, in units of the per-KiB
/// cost. `None` if the model charges nothing per KiB.
#[cfg(feature = "bench")]
fn copied_kib(cost: &hexrpc_bench::CostModel, simulated: std::time::Duration, invokes: u64, maps: u64, unmaps: u64) -> Option<u64> {
    let per_kib = cost.per_kib_copied.as_nanos();
    if per_kib == 0 {
        return None;
    }
    let fixed = cost.per_crossing.as_nanos().saturating_mul(u128::from(invokes))
        + cost.per_dsp_map.as_nanos().saturating_mul(u128::from(maps))
        + cost.per_dsp_unmap.as_nanos().saturating_mul(u128::from(unmaps));
    let left = simulated.as_nanos().saturating_sub(fixed);
    Some(u64::try_from(left / per_kib).unwrap_or(u64::MAX))
}
