//! `hexrpc._hexrpc._Model`: a model file opened on a session (the bindings' [`ModelObj`]); the
//! Python class `hexrpc.Model` wraps it with numpy arrays in and out.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hexrpc::model::{ModelObj, MAX_IO};
use hexrpc::objects::SessionObj;
use hexrpc::Failure;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use crate::{buffer_range, closed, lock, open_lease, py_err, Session, View};

/// A model file opened on a session; use `hexrpc.Model`.
#[pyclass(module = "hexrpc", frozen)]
pub struct _Model {
    inner: Mutex<Option<Arc<ModelObj>>>,
    /// A session the model opened for itself (`hexrpc.Model(path)` without a session).
    _own: Option<Arc<SessionObj>>,
}

impl _Model {
    fn get(&self) -> PyResult<Arc<ModelObj>> {
        lock(&self.inner).clone().ok_or_else(|| closed("model"))
    }
}

/// `(name, dtype, shape, bytes)` of a tensor, as Python receives it.
type TensorTuple = (String, String, Vec<u64>, u64);

fn tensors(m: &ModelObj, output: bool) -> Vec<TensorTuple> {
    m.with(|l| {
        let list = if output { l.outputs() } else { l.inputs() };
        list.iter().map(|t| (t.name.clone(), t.dtype.name().to_owned(), t.shape.clone(), t.len)).collect()
    })
}

#[pymethods]
impl _Model {
    /// Opens `source` (bytes, bytearray, or a path: str or os.PathLike, mapped read-only while it
    /// is opened) on `session`, or on a device session of this machine's board when `session`
    /// is None.
    #[new]
    #[pyo3(signature = (source, session = None))]
    fn new(py: Python<'_>, source: &Bound<'_, PyAny>, session: Option<&Session>) -> PyResult<_Model> {
        let (s, own) = match session {
            Some(s) => (s.get()?, None),
            None => {
                let obj = py.detach(|| hexrpc::objects::detect_board().and_then(SessionObj::open_device)).map_err(py_err)?;
                let s = Arc::new(obj);
                (s.clone(), Some(s))
            }
        };
        let obj = if let Ok(b) = source.cast::<PyBytes>() {
            let bytes = b.as_bytes().to_vec();
            py.detach(|| ModelObj::open(&s, &bytes))
        } else if let Ok(b) = source.cast::<PyByteArray>() {
            let bytes = b.to_vec();
            py.detach(|| ModelObj::open(&s, &bytes))
        } else if let Ok(path) = source.extract::<PathBuf>() {
            let path = path.to_str().ok_or_else(|| py_err(Failure::invalid("model-open", "the path is not UTF-8")))?.to_owned();
            py.detach(|| ModelObj::open_path(&s, &path))
        } else {
            return Err(PyTypeError::new_err("source must be bytes, bytearray, str or os.PathLike"));
        }
        .map_err(py_err)?;
        Ok(_Model { inner: Mutex::new(Some(Arc::new(obj))), _own: own })
    }

    /// `[(name, dtype, shape, bytes)]` of the inputs, in the file's order.
    fn inputs(&self) -> PyResult<Vec<TensorTuple>> {
        Ok(tensors(&*self.get()?, false))
    }

    /// `[(name, dtype, shape, bytes)]` of the outputs.
    fn outputs(&self) -> PyResult<Vec<TensorTuple>> {
        Ok(tensors(&*self.get()?, true))
    }

    /// `(launches, FastRPC calls)` of one run.
    fn shape_of_run(&self) -> PyResult<(usize, usize)> {
        Ok(self.get()?.with(|l| (l.launches(), l.calls_per_run())))
    }

    /// Binds input `input` (its index) to the bytes of `target`, a `Lease` (from `offset`) or a
    /// `View` (from `view.offset + offset`, and the input must fit the view): runs read it there
    /// in place. The model holds the lease until the input is unbound or bound again, or the
    /// model is closed (closing the `Lease` object does not end the binding). `InvalidArgument`
    /// (stage "model-bind") names what the model cannot take; nothing changes then.
    #[pyo3(signature = (input, target, offset = 0))]
    fn bind_input(&self, py: Python<'_>, input: usize, target: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let m = self.get()?;
        let Some((cell, view_offset, view_len)) = buffer_range(target)? else {
            return Err(PyTypeError::new_err("target must be a hexrpc.Lease or hexrpc.View"));
        };
        let lease = open_lease(&cell)?;
        let bad = |what: String| py_err(Failure::invalid("model-bind", what));
        if let Some((name, len)) = m.with(|l| l.inputs().get(input).map(|t| (t.name.clone(), t.len))) {
            if (offset as u64).checked_add(len).is_none_or(|end| end > view_len as u64) {
                let of = if target.cast::<View>().is_ok() { "view" } else { "lease" };
                return Err(bad(format!("input {name:?} ({len} bytes) at offset {offset} does not fit the {of} of {view_len} bytes")));
            }
        }
        let at = view_offset.checked_add(offset).ok_or_else(|| bad(format!("offset {offset} overflows")))?;
        py.detach(|| m.bind_input(input, lease, at)).map_err(py_err)
    }

    /// Unbinds input `input`: runs copy it in again. True if it was bound.
    fn unbind_input(&self, py: Python<'_>, input: usize) -> PyResult<bool> {
        let m = self.get()?;
        py.detach(|| m.unbind_input(input)).map_err(py_err)
    }

    /// Whether each input, in the file's order, is bound (`bind_input`).
    fn bound(&self) -> PyResult<Vec<bool>> {
        let m = self.get()?;
        let n = m.with(|l| l.inputs().len());
        Ok((0..n).map(|i| m.is_bound(i)).collect())
    }

    /// One run: `inputs` and `outputs` are C-contiguous byte buffers (memoryviews cast to
    /// "B"), one per input and output, each exactly its tensor's size; `None` for a bound input
    /// (and only for one). The outputs are written. Returns `(launches, calls, dsp_us,
    /// input_bytes_copied)`.
    #[pyo3(signature = (inputs, outputs, deadline_ms = None))]
    fn run(
        &self,
        py: Python<'_>,
        inputs: Vec<Option<PyBuffer<u8>>>,
        outputs: Vec<PyBuffer<u8>>,
        deadline_ms: Option<u64>,
    ) -> PyResult<(usize, usize, u64, u64)> {
        let m = self.get()?;
        let (in_bytes, mut outs) = copy_in(py, &inputs, &outputs)?;
        let ins: Vec<&[u8]> = in_bytes.iter().map(Vec::as_slice).collect();
        let deadline = deadline_ms.filter(|&ms| ms > 0).map(Duration::from_millis);
        let r = {
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
            py.detach(|| m.run(&ins, &mut refs, deadline)).map_err(py_err)?
        };
        for (b, bytes) in outputs.iter().zip(&outs) {
            b.copy_from_slice(py, bytes)?;
        }
        Ok((r.launches, r.calls, r.dsp_micros, r.input_bytes_copied))
    }

    /// [`run`](Self::run) with each record's DSP time: returns `(launches, calls, dsp_us,
    /// input_bytes_copied, records, untimed_calls)`, `records` a list of `(call, record, kernel,
    /// us)` in run order.
    #[pyo3(signature = (inputs, outputs, deadline_ms = None))]
    #[allow(clippy::type_complexity)]
    fn run_profiled(
        &self,
        py: Python<'_>,
        inputs: Vec<Option<PyBuffer<u8>>>,
        outputs: Vec<PyBuffer<u8>>,
        deadline_ms: Option<u64>,
    ) -> PyResult<(usize, usize, u64, u64, Vec<(usize, usize, String, u32)>, usize)> {
        let m = self.get()?;
        let (ins, mut outs) = copy_in(py, &inputs, &outputs)?;
        let deadline = deadline_ms.filter(|&ms| ms > 0).map(Duration::from_millis);
        let (r, p) = {
            let ins: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
            py.detach(|| m.run_profiled(&ins, &mut refs, deadline)).map_err(py_err)?
        };
        for (b, bytes) in outputs.iter().zip(&outs) {
            b.copy_from_slice(py, bytes)?;
        }
        let records = p.records.into_iter().map(|t| (t.call, t.record, t.kernel, t.micros)).collect();
        Ok((r.launches, r.calls, r.dsp_micros, r.input_bytes_copied, records, p.untimed_calls))
    }

    /// Closes the model (its arenas, records and libraries); a session it opened for itself
    /// closes when the model is gone.
    fn close(&self) {
        lock(&self.inner).take();
    }
}

/// Checks a run's buffers and copies the inputs out of theirs (the buffer protocol's safe
/// copies; none for a bound input, `None`); the outputs' bytes, zeroed, to be copied back after
/// the run.
#[allow(clippy::type_complexity)]
fn copy_in(py: Python<'_>, inputs: &[Option<PyBuffer<u8>>], outputs: &[PyBuffer<u8>]) -> PyResult<(Vec<Vec<u8>>, Vec<Vec<u8>>)> {
    if inputs.len() > MAX_IO || outputs.len() > MAX_IO {
        return Err(py_err(Failure::invalid("model-run", format!("at most {MAX_IO} inputs and outputs"))));
    }
    for (i, b) in inputs.iter().enumerate() {
        if b.as_ref().is_some_and(|b| !b.is_c_contiguous()) {
            return Err(PyTypeError::new_err(format!("input {i}: needs a C-contiguous buffer")));
        }
    }
    for (i, b) in outputs.iter().enumerate() {
        if !b.is_c_contiguous() || b.readonly() {
            return Err(PyTypeError::new_err(format!("output {i}: needs a C-contiguous, writable buffer")));
        }
    }
    let ins = inputs.iter().map(|b| b.as_ref().map_or(Ok(Vec::new()), |b| b.to_vec(py))).collect::<PyResult<_>>()?;
    let outs = outputs.iter().map(|b| vec![0u8; b.len_bytes()]).collect();
    Ok((ins, outs))
}

/// Bench builds: the bench's sample model file (input `x` uint8 [1, n]; outputs `y = x + 3`,
/// `z = y + 5`), run on a `Session.bench()` with no compiler.
#[pyfunction]
#[pyo3(signature = (n = 1024))]
pub fn bench_sample_model<'py>(py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    #[cfg(feature = "bench")]
    {
        if n == 0 || n > 1 << 20 {
            return Err(py_err(Failure::invalid("bench-image", format!("n = {n}: 1..=1048576"))));
        }
        Ok(PyBytes::new(py, hexrpc::bench::sample_model(n)))
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = (py, n);
        Err(py_err(Failure::unavailable("bench-image", "this build of hexrpc has no bench")))
    }
}

/// A launch to write: (kernel index in its library's table, views as (arena, offset, length),
/// scalar slots).
type LaunchTuple = (u32, Vec<(u32, u32, u32)>, Vec<u64>);
/// An input or output to write: (name, "input" or "output", dtype name, shape, arena, offset).
type IoTuple = (String, String, String, Vec<u64>, u32, u64);

/// Lays out a model file (`docs/model-format.md`) from its parts and returns its bytes, after
/// reading them back with the same validation a device does (`InvalidArgument` names the field
/// a device would refuse). `init` is (arena, offset, bytes): runs of zeros in it are stored as
/// zero ranges. `steps` is (library index, launches), in run order. The exporter,
/// `hexrpc.export`, is the usual caller; this is the format's one writer.
#[pyfunction]
#[pyo3(signature = (*, arch, source_name, source_digest, tinygrad_version, libraries, arenas, init, steps, io))]
#[allow(clippy::too_many_arguments)]
pub fn write_model<'py>(
    py: Python<'py>,
    arch: u32,
    source_name: String,
    source_digest: &Bound<'py, PyBytes>,
    tinygrad_version: String,
    libraries: Vec<(String, Bound<'py, PyBytes>)>,
    arenas: Vec<(u64, u32)>,
    init: Vec<(u32, u64, Bound<'py, PyBytes>)>,
    steps: Vec<(u32, Vec<LaunchTuple>)>,
    io: Vec<IoTuple>,
) -> PyResult<Bound<'py, PyBytes>> {
    use hexrpc_model::{encode_record, Direction, InitSpec, IoSpec, Limits, ModelBuilder, ModelFile, StepSpec};
    let bad = |what: String| py_err(Failure::invalid("model-write", what));
    let digest: [u8; 32] = source_digest
        .as_bytes()
        .try_into()
        .map_err(|_| bad(format!("source_digest: {} bytes, want 32 (SHA-256)", source_digest.as_bytes().len())))?;
    let mut b = ModelBuilder {
        arch,
        source_digest: digest,
        source_name,
        tinygrad_version,
        hexrpc_version: env!("CARGO_PKG_VERSION").into(),
        libraries: libraries.iter().map(|(n, img)| (n.clone(), img.as_bytes().to_vec())).collect(),
        arenas,
        ..ModelBuilder::default()
    };
    for (arena, offset, bytes) in &init {
        b.init.extend(InitSpec::split(*arena, *offset, bytes.as_bytes()));
    }
    for (s, (library, launches)) in steps.iter().enumerate() {
        let mut records = Vec::new();
        for (j, (kernel, views, scalars)) in launches.iter().enumerate() {
            let r = encode_record(*kernel, views, scalars).ok_or_else(|| {
                bad(format!("step {s}, launch {j}: {} views and {} scalars do not fit a record", views.len(), scalars.len()))
            })?;
            records.extend(r);
        }
        let n = u32::try_from(launches.len()).map_err(|_| bad(format!("step {s}: {} launches", launches.len())))?;
        b.steps.push(StepSpec { library: *library, launches: n, records });
    }
    for (name, direction, dtype, shape, arena, offset) in io {
        let direction = match direction.as_str() {
            "input" => Direction::Input,
            "output" => Direction::Output,
            other => return Err(bad(format!("{name}: direction {other:?} (input or output)"))),
        };
        let dtype = hexrpc_model::DType::from_name(&dtype)
            .ok_or_else(|| bad(format!("{name}: dtype {dtype:?} is not one a model file has (known: {})", known_dtypes())))?;
        b.io.push(IoSpec { name, direction, dtype, shape, arena, offset });
    }
    let bytes = py.detach(|| b.to_bytes());
    ModelFile::parse(&bytes, &Limits::default()).map_err(|e| bad(format!("the file written would be refused: {e}")))?;
    Ok(PyBytes::new(py, &bytes))
}

fn known_dtypes() -> String {
    hexrpc_model::DTYPES.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
}

/// Bench builds: the path of the bench's DSP shell, built now if need be (clang-19, ld.lld-19).
/// A process that sets `HEXRPC_BENCH_SHELL` to it runs Hexagon code on the bench with only
/// qemu-hexagon on `PATH`: a model file's run with no compiler, as on a device.
#[pyfunction]
pub fn bench_shell(py: Python<'_>) -> PyResult<PathBuf> {
    #[cfg(feature = "bench")]
    {
        py.detach(|| {
            let tc = hexrpc_bench::executor::tools_available().map_err(|e| Failure::unavailable("bench-shell", e))?;
            hexrpc_bench::executor::build_shell(&tc).map_err(|e| Failure::unavailable("bench-shell", e.to_string()))
        })
        .map_err(py_err)
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = py;
        Err(py_err(Failure::unavailable("bench-shell", "this build of hexrpc has no bench")))
    }
}

/// Bench builds: the floor every FastRPC call pays, measured in this process: one `INVOKE_ATTRS`
/// ioctl through the bench's measuring seam with its argument prebuilt, as (median thread-CPU
/// ns, median wall ns) per call over `batches` batches of `batch` calls. A run's host time is
/// reported as a ratio to it (`bindings/python/bench/model_overhead.py`).
#[pyfunction]
#[pyo3(signature = (batches = 30, batch = 10_000))]
pub fn bench_raw_ioctl_ns(py: Python<'_>, batches: usize, batch: u32) -> PyResult<(f64, f64)> {
    #[cfg(feature = "bench")]
    {
        if batches == 0 || batch == 0 {
            return Err(py_err(Failure::invalid("bench", "batches and batch must be positive")));
        }
        Ok(py.detach(|| hexrpc_bench::measure::raw_invoke_ioctl_ns(batches, batch)))
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = (py, batches, batch);
        Err(py_err(Failure::unavailable("bench", "this build of hexrpc has no bench")))
    }
}
