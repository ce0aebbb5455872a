//! Small additions for callers that pick a board or read the bench's accounting (the tinygrad
//! device, `hexrpc.tinygrad`): `detect_board(model)` and `bench_counters(session)`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::Session;

/// The board whose device-tree model (the contents of `/proc/device-tree/model`) matches
/// `model`, by hexrpc's board table; `None` if no board claims it.
#[pyfunction]
pub fn detect_board(model: &str) -> Option<&'static str> {
    hexrpc_bsp::detect(model).map(|b| b.name)
}

/// What the bench behind `session` has counted so far: `invokes` (FastRPC INVOKE ioctls of
/// every variant), `ioctls` (every ioctl on a simulated device), and `simulated_invoke_us`, the
/// invokes' simulated latency summed by the bench's cost model (simulated, never a device figure).
/// Raises `hexrpc.InvalidArgument` for a session that does not run on the bench.
#[pyfunction]
pub fn bench_counters<'py>(py: Python<'py>, session: &Session) -> PyResult<Bound<'py, PyDict>> {
    let obj = session.get()?;
    #[cfg(feature = "bench")]
    if let Some(bench) = obj.bench() {
        let counts = bench.counts();
        let invokes: u64 = counts.calls.iter().filter(|(k, _)| k.is_invoke()).map(|(_, n)| n).sum();
        let ioctls: u64 = counts.calls.iter().filter(|(k, _)| is_ioctl(**k)).map(|(_, n)| n).sum();
        let simulated: std::time::Duration = bench.latencies().iter().filter(|s| s.kind.is_invoke()).map(|s| s.simulated).sum();
        let d = PyDict::new(py);
        d.set_item("invokes", invokes)?;
        d.set_item("ioctls", ioctls)?;
        d.set_item("simulated_invoke_us", simulated.as_secs_f64() * 1e6)?;
        return Ok(d);
    }
    drop(obj);
    let _ = py;
    Err(crate::InvalidArgument::new_err("bench-counters: the session does not run on the bench"))
}

#[cfg(feature = "bench")]
fn is_ioctl(k: hexrpc_bench::CallKind) -> bool {
    use hexrpc_bench::CallKind::*;
    !matches!(k, Open | Close | Pread | Fstat | Stat | Mmap | Munmap)
}
