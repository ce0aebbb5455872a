//! The `hexrpc` Python package's native module (`hexrpc._hexrpc`), built with PyO3 (abi3,
//! Python 3.11+: the buffer protocol is in the stable ABI from 3.11) on the same owned objects as
//! the C ABI (`hexrpc::objects`).
//!
//! * `Session.open(board=...)` / `Session.bench(executor=..., returning_launches=...)`: a served
//!   session; a context manager; `close()` closes every library and lease made from it and ends
//!   the DSP process and the listener thread before it returns. While buffers of its leases are
//!   exported (memoryviews, numpy arrays), `close()` raises `BufferError` naming how many and
//!   closes nothing, so the session stays usable: release them, then close again. (An export
//!   points into the lease's mapping, which needs the session: closing the session under it would
//!   either unmap memory Python still points at or, as before, silently keep the DSP process and
//!   its listener alive until the export went.) After `close()`, every export is refused with
//!   `BufferError` saying the session is closed.
//! * `Session.alloc(n)` → `Lease`: supports the buffer protocol (`numpy.frombuffer(lease, ...)`
//!   and `memoryview(lease)` are zero-copy views of the ION mapping). A lease with exported
//!   buffers cannot be freed under them: `Lease.close()` marks it closed (no new views, launches
//!   or exports) and the memory is released when the last exported buffer is (its session cannot
//!   close until then).
//! * `Session.import_fd(fd, size, writable=False)` → `Lease`: a dma-buf another process owns,
//!   used in place (`docs/import.md`); the descriptor stays the caller's. A read-only import's
//!   exports are read-only (its mapping is), and a writable export of it raises `BufferError`.
//! * `Lease.view(offset, length)` → `View`; `Session.open_library(path_or_bytes, signature=...,
//!   abi="v2")` → `Library`; `Library.launch([views], [scalars], deadline_ms=None)` → DSP µs
//!   (the GIL is released during the call).
//! * Errors: `hexrpc.Error` and its subclasses, each carrying `stage`, `cause` and `status`.
//!
//! The lease memory is shared with the DSP, which writes it during a launch: read outputs after
//! `launch` has returned.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use hexrpc::objects::{scalar_from_bits, ArenaObj, KernelObj, LeaseObj, SessionObj, ViewArg};
use hexrpc::{hexrpc_status, Failure};
use hexrpc_runtime::launch::{AbiVersion, Scalar, ScalarType, MAX_BUFFERS};
use pyo3::exceptions::{PyBufferError, PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use pyo3::{create_exception, ffi};

mod batch;
mod logs;
mod model;
mod probe;

create_exception!(
    hexrpc,
    Error,
    PyException,
    "Base class of every hexrpc error; carries `stage`, `cause`, `status` and `unsent` (True when the call was refused without being sent because the session needed recovery first)."
);
create_exception!(hexrpc, HandleError, Error, "The session, lease, view or library was closed (or never opened).");
create_exception!(hexrpc, InvalidArgument, Error, "An argument is invalid: a range outside its lease, a bad signature or name.");
create_exception!(hexrpc, LaunchRefused, Error, "The launch does not fit the kernel's signature or ABI; nothing was sent.");
create_exception!(hexrpc, Unavailable, Error, "A device node, file or tool is missing or not accessible.");
create_exception!(hexrpc, NeedsRecovery, Error, "The DSP restarted or a deadline passed: call `Session.recover()`, then retry.");
create_exception!(hexrpc, DspError, Error, "The DSP refused the request.");
create_exception!(hexrpc, Failed, Error, "Anything else: a system call failed, recovery failed.");
create_exception!(
    hexrpc,
    ForkedSession,
    Error,
    "The object belongs to a session the parent process opened before a fork(): its DSP process is the parent's, \
     nothing was sent. Open a new session in the child."
);

fn status_name(s: hexrpc_status) -> &'static str {
    match s {
        hexrpc_status::HEXRPC_OK => "ok",
        hexrpc_status::HEXRPC_ERR_NULL => "null",
        hexrpc_status::HEXRPC_ERR_HANDLE => "handle",
        hexrpc_status::HEXRPC_ERR_INVALID => "invalid",
        hexrpc_status::HEXRPC_ERR_REFUSED => "refused",
        hexrpc_status::HEXRPC_ERR_UNAVAILABLE => "unavailable",
        hexrpc_status::HEXRPC_ERR_RECOVERABLE => "recoverable",
        hexrpc_status::HEXRPC_ERR_DSP => "dsp",
        hexrpc_status::HEXRPC_ERR_FAILED => "failed",
        hexrpc_status::HEXRPC_ERR_PANIC => "panic",
        hexrpc_status::HEXRPC_ERR_FORKED => "forked",
    }
}

/// A failure as a Python exception of its class, with `stage`, `cause` and `status` attributes.
fn py_err(f: Failure) -> PyErr {
    let msg = f.to_string();
    let err = match f.status {
        hexrpc_status::HEXRPC_ERR_HANDLE => HandleError::new_err(msg),
        hexrpc_status::HEXRPC_ERR_INVALID | hexrpc_status::HEXRPC_ERR_NULL => InvalidArgument::new_err(msg),
        hexrpc_status::HEXRPC_ERR_REFUSED => LaunchRefused::new_err(msg),
        hexrpc_status::HEXRPC_ERR_UNAVAILABLE => Unavailable::new_err(msg),
        hexrpc_status::HEXRPC_ERR_RECOVERABLE => NeedsRecovery::new_err(msg),
        hexrpc_status::HEXRPC_ERR_DSP => DspError::new_err(msg),
        hexrpc_status::HEXRPC_ERR_FORKED => ForkedSession::new_err(msg),
        _ => Failed::new_err(msg),
    };
    Python::attach(|py| {
        // The records that explain the failure reach `logging` before the exception does.
        logs::flush(py);
        let v = err.value(py);
        let _ = v.setattr("stage", f.stage);
        let _ = v.setattr("cause", f.cause.as_str());
        let _ = v.setattr("status", status_name(f.status));
        let _ = v.setattr("unsent", f.unsent);
    });
    err
}

fn closed(what: &'static str) -> PyErr {
    py_err(Failure::handle(what))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A lease's state, shared by its Python object and its session (which closes it).
struct LeaseState {
    obj: Option<Arc<LeaseObj>>,
    closed: bool,
    /// Closed by its session's `close()` (which only closes a session with no export alive).
    session_closed: bool,
    exports: usize,
}

impl LeaseState {
    fn close(&mut self) {
        self.closed = true;
        if self.exports == 0 {
            self.obj = None;
        }
    }
}

/// "N exported buffer(s)".
fn exported_buffers(n: usize) -> String {
    if n == 1 {
        "1 exported buffer".to_string()
    } else {
        format!("{n} exported buffers")
    }
}

type LeaseCell = Mutex<LeaseState>;
type KernelCell = Mutex<Option<Arc<KernelObj>>>;
type ArenaCell = Mutex<Option<Arc<ArenaObj>>>;

#[derive(Default)]
struct Children {
    leases: Vec<Weak<LeaseCell>>,
    kernels: Vec<Weak<KernelCell>>,
    arenas: Vec<Weak<ArenaCell>>,
}

/// A session: the DSP process, its channel, the ION device and the reverse file service that
/// answers the DSP (a listener thread). A context manager: leaving the `with` block closes it.
/// `close()` raises `BufferError` while buffers of its leases are exported (memoryviews, numpy
/// arrays), leaving the session open and usable; see `close`.
///
/// After `os.fork()` (and in `multiprocessing` workers started with "fork"), the child's copy of
/// a session, and of its libraries, leases, arenas, batches and models, raises `ForkedSession`
/// on every use before anything is sent (its DSP process and threads are the parent's); closing
/// it there sends nothing. Open a new session in the child (or use the "spawn" start method).
/// Fork while no other thread is inside a hexrpc call.
#[pyclass(module = "hexrpc", frozen)]
pub(crate) struct Session {
    inner: Mutex<Option<Arc<SessionObj>>>,
    children: Mutex<Children>,
}

/// The latency policy the keyword arguments `pm_qos` and `power` name.
fn latency_policy(pm_qos: bool, power: &str) -> Result<hexrpc_hal::LatencyPolicy, Failure> {
    let level = hexrpc_hal::DspPower::from_name(power)
        .ok_or_else(|| Failure::invalid("session-start", format!("power={power:?}: one of \"off\", \"sustained\", \"burst\"")))?;
    let vote = if pm_qos { hexrpc_hal::PmQosVote::Board } else { hexrpc_hal::PmQosVote::Off };
    Ok(hexrpc_hal::LatencyPolicy::REALTIME.with_pm_qos(vote).with_dsp_power(level))
}

impl Session {
    fn new(obj: SessionObj) -> Session {
        Session { inner: Mutex::new(Some(Arc::new(obj))), children: Mutex::new(Children::default()) }
    }

    pub(crate) fn get(&self) -> PyResult<Arc<SessionObj>> {
        lock(&self.inner).clone().ok_or_else(|| closed("session"))
    }
}

#[pymethods]
impl Session {
    /// Starts a session on the device board `board` ("comma-three", "msm-android", "qcom-rb5",
    /// "upstream"); `None` (the default): the board this machine's device-tree model names
    /// (`Unavailable`, quoting the model and listing the boards, when none does).
    ///
    /// The latency policy: `pm_qos=True` (the default) asks the kernel to bound the CPU's
    /// wake-up latency while a thread waits for the DSP, on every channel (see `pm_qos_state`);
    /// `power` is the DSP clock vote each library whose entry takes it gets: "sustained" (the
    /// default: a clock floor, DCVS above it), "burst" (the top clock, DCVS off) or "off".
    #[staticmethod]
    #[pyo3(signature = (board = None, *, pm_qos = true, power = "sustained"))]
    fn open(py: Python<'_>, board: Option<&str>, pm_qos: bool, power: &str) -> PyResult<Session> {
        let policy = latency_policy(pm_qos, power).map_err(py_err)?;
        let obj = py
            .detach(|| {
                let board = match board {
                    Some(b) => b,
                    None => hexrpc::objects::detect_board()?,
                };
                SessionObj::open_device_with(board, policy)
            })
            .map_err(py_err)?;
        Ok(Session::new(obj))
    }

    /// Starts a session on the isolated bench (simulated kernel and DSP). `executor=True` needs
    /// clang-19, ld.lld-19 and qemu-hexagon (else `Unavailable`, naming the missing tool) and
    /// runs executor images as Hexagon code. `returning_launches=True` makes launches return at
    /// once without reaching the DSP (a measuring instrument; outputs are not written).
    /// `call_limit_ms`: the executor's limit per DSP call (a kernel still running after it is
    /// ended, which is a DSP restart); default `HEXRPC_BENCH_CALL_LIMIT_MS`, else 10000.
    /// `pm_qos` and `power`: the latency policy, as `Session.open` takes it.
    #[staticmethod]
    #[pyo3(signature = (executor = false, returning_launches = false, call_limit_ms = None, *, pm_qos = true, power = "sustained"))]
    fn bench(
        py: Python<'_>,
        executor: bool,
        returning_launches: bool,
        call_limit_ms: Option<u32>,
        pm_qos: bool,
        power: &str,
    ) -> PyResult<Session> {
        #[cfg(feature = "bench")]
        {
            if call_limit_ms == Some(0) {
                return Err(py_err(Failure::invalid("session-start", "call_limit_ms must be positive (None: the default)")));
            }
            let policy = latency_policy(pm_qos, power).map_err(py_err)?;
            let limit = call_limit_ms.map(|ms| Duration::from_millis(u64::from(ms)));
            let obj = py.detach(|| SessionObj::open_bench_latency(executor, returning_launches, limit, policy)).map_err(py_err)?;
            Ok(Session::new(obj))
        }
        #[cfg(not(feature = "bench"))]
        {
            let _ = (py, executor, returning_launches, call_limit_ms, pm_qos, power);
            Err(py_err(Failure::unavailable("session-start", "this build of hexrpc has no bench")))
        }
    }

    /// What became of the PM-QoS vote on the current channel: "sent", "not-asked" (the policy
    /// asks for none), "not-available" (the board's driver has no such request: upstream) or
    /// "refused" (the kernel said no; the session works without it).
    #[getter]
    fn pm_qos_state(&self) -> PyResult<&'static str> {
        let s = self.get()?;
        s.check().map_err(py_err)?;
        Ok(match s.served().session().pm_qos() {
            hexrpc_hal::PmQosState::Sent => "sent",
            hexrpc_hal::PmQosState::NotAsked => "not-asked",
            hexrpc_hal::PmQosState::NotAvailable => "not-available",
            hexrpc_hal::PmQosState::Refused(_) => "refused",
        })
    }

    /// Allocates an ION buffer of at least `size` bytes (rounded up to a page).
    fn alloc(&self, py: Python<'_>, size: usize) -> PyResult<Lease> {
        let s = self.get()?;
        let obj = py.detach(|| s.alloc(size)).map_err(py_err)?;
        Ok(self.adopt(obj))
    }

    /// Imports the first `size` bytes of the dma-buf behind `fd`, a descriptor another process
    /// or component owns (received over a UNIX socket with `SCM_RIGHTS`, say), as a `Lease` of
    /// this session that launches and model inputs use in place, with nothing copied
    /// (`docs/import.md`).
    ///
    /// `fd` stays the caller's: the session duplicates it and never closes, retires or passes on
    /// the caller's number, which may be closed as soon as this returns; the lease keeps the
    /// buffer alive. `writable=False` (the default) maps it read-only: its buffer exports
    /// (`memoryview`, `numpy.frombuffer`, `hexrpc.array`) are read-only, and a writable export
    /// raises `BufferError`. A read-only import does not stop a kernel that writes its input.
    /// The memory is the owner's too: it changes whenever the owner writes it, under a numpy
    /// view of it and under a running kernel (copy a frame to keep it). The lease's `size` is
    /// `size` rounded up to a page.
    ///
    /// Refused with `InvalidArgument` (stage "import"), the message naming the cause, before
    /// any FastRPC request: a number that is not open (or negative), a descriptor that is not a
    /// dma-buf (a pipe, a socket, a regular file), `size` 0, negative or beyond the buffer.
    #[pyo3(signature = (fd, size, writable = false))]
    fn import_fd(&self, py: Python<'_>, fd: i64, size: i64, writable: bool) -> PyResult<Lease> {
        let s = self.get()?;
        let fd = i32::try_from(fd).map_err(|_| py_err(Failure::invalid("import", format!("fd {fd} is not a descriptor number"))))?;
        let size = usize::try_from(size).map_err(|_| py_err(Failure::invalid("import", format!("size {size}: a negative length"))))?;
        let obj = py.detach(|| s.import(fd, size, writable)).map_err(py_err)?;
        Ok(self.adopt(obj))
    }

    /// An arena: one ION buffer of at least `size` bytes (rounded up to a page) carved into
    /// sub-allocations by `Arena.alloc`, each a `Lease` of its own for Python, all one lease
    /// for the DSP (a batch counts them as one of its 15). Its bookkeeping has a fixed size
    /// (`hexrpc.ARENA_BLOCKS` ranges). Closed with the session.
    fn arena(slf: Bound<'_, Self>, size: usize) -> PyResult<Arena> {
        let this = slf.get();
        let s = this.get()?;
        let obj = slf.py().detach(|| s.arena(size)).map_err(py_err)?;
        let cell = Arc::new(Mutex::new(Some(Arc::new(obj))));
        let mut ch = lock(&this.children);
        ch.arenas.retain(|w| w.strong_count() > 0);
        ch.arenas.push(Arc::downgrade(&cell));
        drop(ch);
        Ok(Arena { cell, session: slf.clone().unbind() })
    }

    /// Opens a library from a path (str or os.PathLike) or from bytes, for a kernel of
    /// `signature` (e.g. "buf,buf,f32") under `abi` ("v2" or "v1"). A library made by `hexrpc
    /// build-lib` carries a build record: leave `signature` (and `abi`) out to use it; a
    /// signature or ABI that disagrees with the record is refused. `name` appears in logs.
    #[pyo3(signature = (image, signature = None, abi = None, name = None))]
    fn open_library(
        &self,
        py: Python<'_>,
        image: &Bound<'_, PyAny>,
        signature: Option<&str>,
        abi: Option<&str>,
        name: Option<&str>,
    ) -> PyResult<Library> {
        let s = self.get()?;
        let abi = match abi {
            None => None,
            Some("v1") => Some(AbiVersion::V1),
            Some("v2") => Some(AbiVersion::V2),
            Some(other) => return Err(py_err(Failure::invalid("library-open", format!("abi {other:?}: use \"v1\" or \"v2\"")))),
        };
        let kernel = if let Ok(b) = image.cast::<PyBytes>() {
            let bytes = b.as_bytes().to_vec();
            py.detach(|| s.open_library(name.unwrap_or("lib"), bytes, signature, abi))
        } else if let Ok(b) = image.cast::<PyByteArray>() {
            let bytes = b.to_vec();
            py.detach(|| s.open_library(name.unwrap_or("lib"), bytes, signature, abi))
        } else if let Ok(path) = image.extract::<PathBuf>() {
            py.detach(|| s.open_library_path(&path, signature, abi))
        } else {
            return Err(PyTypeError::new_err("image must be bytes, bytearray, str or os.PathLike"));
        }
        .map_err(py_err)?;
        let types: Vec<ScalarType> = kernel.kernel().signature().scalar_types().collect();
        let cell = Arc::new(Mutex::new(Some(Arc::new(kernel))));
        let mut ch = lock(&self.children);
        ch.kernels.retain(|w| w.strong_count() > 0);
        ch.kernels.push(Arc::downgrade(&cell));
        Ok(Library { cell, types })
    }

    /// Rebuilds the DSP side after `NeedsRecovery` and re-opens every library (once).
    fn recover(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.get()?;
        py.detach(|| s.recover()).map_err(py_err)?;
        logs::flush(py);
        Ok(())
    }

    /// True while calls can be made.
    #[getter]
    fn healthy(&self) -> PyResult<bool> {
        Ok(self.get()?.is_healthy())
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// Why the DSP restarted last, as the bench recorded it (a kernel past the per-call limit, a
    /// fault, a failed load, a requested restart), or `None`: no restart yet, or a device
    /// session (a device's driver does not say why its DSP restarted).
    #[getter]
    fn last_restart(&self) -> PyResult<Option<String>> {
        let s = self.get()?;
        #[cfg(feature = "bench")]
        if let Some(bench) = s.bench() {
            return Ok(bench.last_restart().map(|r| r.to_string()));
        }
        drop(s);
        Ok(None)
    }

    /// Bench sessions only: simulates a DSP subsystem restart.
    fn restart_dsp(&self) -> PyResult<()> {
        #[cfg(feature = "bench")]
        {
            let s = self.get()?;
            let bench = s.bench().ok_or_else(|| py_err(Failure::invalid("argument", "not a bench session")))?;
            bench.restart_dsp();
            Ok(())
        }
        #[cfg(not(feature = "bench"))]
        Err(py_err(Failure::invalid("argument", "not a bench session")))
    }

    /// Closes every library, then every lease and arena, then the session: the DSP process and
    /// the listener thread have ended when it returns. Closing twice is allowed.
    ///
    /// Refused with `BufferError`, naming how many, while buffers of the session's leases are
    /// exported (memoryviews, numpy arrays, `hexrpc.array`s of a `Lease` or `View`, also of a
    /// lease already closed): they point into memory the session maps, so it cannot end under
    /// them. Nothing is closed then and the session stays usable; release the exports (`del` the
    /// arrays, `memoryview.release()`) and call `close()` again. After `close()`, new exports are
    /// refused with `BufferError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // Checked and marked with the GIL held throughout: exports are made and released only
        // with the GIL (`__getbuffer__` / `__releasebuffer__`), so none appears between the
        // count and the marking, and none can be made of a lease once it is marked.
        let mut children = lock(&self.children);
        if lock(&self.inner).is_none() {
            return Ok(());
        }
        let leases: Vec<Arc<LeaseCell>> = children.leases.iter().filter_map(Weak::upgrade).collect();
        let exported: usize = leases.iter().map(|l| lock(l).exports).sum();
        if exported > 0 {
            return Err(PyBufferError::new_err(format!(
                "Session.close(): {} of the session's leases (memoryviews, numpy arrays) {} still alive; release them (del \
                 the arrays, memoryview.release()) and call close() again: nothing was closed, the session is still open",
                exported_buffers(exported),
                if exported == 1 { "is" } else { "are" }
            )));
        }
        let children = std::mem::take(&mut *children);
        let session = lock(&self.inner).take();
        let kernels: Vec<_> = children.kernels.iter().filter_map(Weak::upgrade).map(|k| lock(&k).take()).collect();
        let objs: Vec<_> = leases
            .iter()
            .map(|l| {
                let mut st = lock(l);
                st.closed = true;
                st.session_closed = true;
                st.obj.take()
            })
            .collect();
        let arenas: Vec<_> = children.arenas.iter().filter_map(Weak::upgrade).map(|a| lock(&a).take()).collect();
        // The release order as before: libraries (once launches in flight have returned), leases,
        // arenas, then the session, without the GIL.
        py.detach(|| {
            drop(kernels);
            drop(objs);
            drop(arenas);
            drop(session);
        });
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Closes the session. Leaving the block normally with buffers still exported raises
    /// `close()`'s `BufferError`; leaving it by an exception does not replace that exception: the
    /// session is then left open (as the refused `close()` leaves it) with a `ResourceWarning`
    /// naming how many buffers are exported, and `close()` can be called once they are released.
    #[pyo3(signature = (*args))]
    fn __exit__(&self, py: Python<'_>, args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let raised = args.get_item(0).is_ok_and(|t| !t.is_none());
        match self.close(py) {
            Err(e) if raised && e.is_instance_of::<PyBufferError>(py) => {
                let msg = format!("{} (left open: the with block raised)", e.value(py));
                let category = py.get_type::<pyo3::exceptions::PyResourceWarning>();
                PyErr::warn(py, category.as_any(), &std::ffi::CString::new(msg).unwrap_or_default(), 1)?;
                Ok(false)
            }
            r => r.map(|()| false),
        }
    }

    fn __repr__(&self) -> String {
        match lock(&self.inner).as_ref() {
            Some(s) => format!("<hexrpc.Session board={} healthy={}>", s.served().session().board().name, s.is_healthy()),
            None => "<hexrpc.Session closed>".to_string(),
        }
    }
}

impl Session {
    /// A Python `Lease` for `obj`, closed with this session.
    fn adopt(&self, obj: LeaseObj) -> Lease {
        let cell = Arc::new(Mutex::new(LeaseState { obj: Some(Arc::new(obj)), closed: false, session_closed: false, exports: 0 }));
        let mut ch = lock(&self.children);
        ch.leases.retain(|w| w.strong_count() > 0);
        ch.leases.push(Arc::downgrade(&cell));
        Lease { cell }
    }
}

/// An arena: one ION buffer carved into aligned sub-allocations (`alloc`), so that many buffers
/// are one lease for the DSP. A sub-allocation is a `Lease` (buffer protocol, views with offsets
/// relative to it, launches, batches); closing it gives its range back, and a launch or batch
/// run that uses it holds it until the call returns. Closing the arena refuses further
/// allocations; its memory is released when its last sub-allocation is closed too. A context
/// manager; closed with its session.
#[pyclass(module = "hexrpc", frozen)]
struct Arena {
    cell: Arc<ArenaCell>,
    session: Py<Session>,
}

impl Arena {
    fn get(&self) -> PyResult<Arc<ArenaObj>> {
        lock(&self.cell).clone().ok_or_else(|| closed("arena"))
    }
}

#[pymethods]
impl Arena {
    /// A sub-allocation of `size` bytes at an offset that is a multiple of `align` (a power of
    /// two; 0: 128, the least every sub-allocation gets), as a `Lease` of exactly `size` bytes.
    /// `InvalidArgument` when no free range fits (the message says the largest free range), the
    /// bookkeeping is full, `size` is 0 or `align` not a power of two.
    #[pyo3(signature = (size, align = 0))]
    fn alloc(&self, size: usize, align: usize) -> PyResult<Lease> {
        let a = self.get()?;
        let obj = a.alloc(size, align).map_err(py_err)?;
        Ok(self.session.get().adopt(obj))
    }

    /// The arena's length in bytes (its lease's, rounded up to a page).
    #[getter]
    fn size(&self) -> PyResult<usize> {
        Ok(self.get()?.len())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.size()
    }

    /// Bytes in live sub-allocations (each rounded up to 128).
    #[getter]
    fn used(&self) -> PyResult<u64> {
        Ok(self.get()?.stats().used)
    }

    /// Bytes free.
    #[getter]
    fn free(&self) -> PyResult<u64> {
        Ok(self.get()?.stats().free)
    }

    /// The largest free range: a sub-allocation up to this long fits (at the default alignment).
    #[getter]
    fn largest_free(&self) -> PyResult<u64> {
        Ok(self.get()?.stats().largest_free)
    }

    /// Live sub-allocations.
    #[getter]
    fn live(&self) -> PyResult<u32> {
        Ok(self.get()?.stats().live_blocks)
    }

    /// The id of the arena's lease: every sub-allocation's `Lease.lease_id`.
    #[getter]
    fn lease_id(&self) -> PyResult<u32> {
        Ok(self.get()?.lease_id())
    }

    /// True once closed (by `close()` or its session's).
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.cell).is_none()
    }

    /// Refuses further allocations; the memory goes when the last sub-allocation is closed.
    /// Closing twice is allowed.
    fn close(&self) {
        drop(lock(&self.cell).take());
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        match lock(&self.cell).as_ref() {
            Some(a) => {
                let st = a.stats();
                format!("<hexrpc.Arena size={} used={} live={}>", a.len(), st.used, st.live_blocks)
            }
            None => "<hexrpc.Arena closed>".to_string(),
        }
    }
}

/// An ION buffer shared with the DSP (`Session.alloc`, `Arena.alloc`), or a dma-buf another
/// process owns (`Session.import_fd`). Supports the buffer protocol (bytes, writable unless
/// `writable` is False: a read-only import): `numpy.frombuffer(lease, dtype=...)` is a
/// zero-copy view of its memory. A context manager.
#[pyclass(module = "hexrpc", frozen)]
struct Lease {
    cell: Arc<LeaseCell>,
}

impl Lease {
    fn get(&self) -> PyResult<Arc<LeaseObj>> {
        open_lease(&self.cell)
    }
}

/// The lease object in `cell`, if the lease is open (else `HandleError`).
fn open_lease(cell: &LeaseCell) -> PyResult<Arc<LeaseObj>> {
    let st = lock(cell);
    match (&st.obj, st.closed) {
        (Some(o), false) => Ok(o.clone()),
        _ => Err(closed("lease")),
    }
}

/// The bytes a buffer argument names: a `View`'s (its lease, offset and length) or a whole
/// `Lease`'s (which must be open); `None` for anything else.
fn buffer_range(item: &Bound<'_, PyAny>) -> PyResult<Option<(Arc<LeaseCell>, usize, usize)>> {
    if let Ok(v) = item.cast::<View>() {
        let v = v.get();
        Ok(Some((v.cell.clone(), v.offset, v.length)))
    } else if let Ok(l) = item.cast::<Lease>() {
        let cell = l.get().cell.clone();
        let len = open_lease(&cell)?.memory().1;
        Ok(Some((cell, 0, len)))
    } else {
        Ok(None)
    }
}

#[pymethods]
impl Lease {
    /// A view of `length` bytes at `offset` (checked against the lease).
    fn view(&self, offset: usize, length: usize) -> PyResult<View> {
        let l = self.get()?;
        l.view(offset, length).map_err(py_err)?;
        Ok(View { cell: self.cell.clone(), offset, length })
    }

    /// The lease's length in bytes (the allocation rounded up to a page).
    #[getter]
    fn size(&self) -> PyResult<usize> {
        Ok(self.get()?.memory().1)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.size()
    }

    /// The id of the lease the DSP maps for it: its own, or its arena's for a sub-allocation
    /// (sub-allocations of one arena share it; a batch counts distinct ids).
    #[getter]
    fn lease_id(&self) -> PyResult<u32> {
        Ok(self.get()?.lease_id())
    }

    /// Where this lease starts in the lease the DSP maps (`lease_id`'s): its offset in its
    /// arena for a sub-allocation, 0 for a lease of its own. A launch record names a view by
    /// that lease and `arena_offset + view.offset`.
    #[getter]
    fn arena_offset(&self) -> PyResult<usize> {
        Ok(self.get()?.base_offset())
    }

    /// True for a sub-allocation of an arena.
    #[getter]
    fn in_arena(&self) -> PyResult<bool> {
        Ok(self.get()?.is_sub())
    }

    /// False for a read-only import (`Session.import_fd(..., writable=False)`): its mapping in
    /// this process is read-only, so are its buffer exports (and its views'). True for every
    /// allocation and a writable import.
    #[getter]
    fn writable(&self) -> PyResult<bool> {
        Ok(self.get()?.writable())
    }

    /// True once closed (by `close()` or its session's).
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.cell).closed
    }

    /// Frees the lease, or (while numpy arrays or memoryviews of it exist) marks it closed and
    /// frees it when the last of them is released (its session's `close()` raises `BufferError`
    /// until then). A model input bound to it (`Model.bind_input`) keeps it until the input is
    /// unbound or the model closed. No buffer of a closed lease can be exported. Closing twice
    /// is allowed.
    fn close(&self) {
        lock(&self.cell).close();
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    /// # Safety
    /// Called by Python with a `Py_buffer` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let cell = slf.get().cell.clone();
        // SAFETY: forwarded as received: `view` is the Py_buffer Python passed, `slf` its exporter.
        unsafe { export(slf.as_any(), &cell, None, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        release_export(&self.cell);
    }

    fn __repr__(&self) -> String {
        let st = lock(&self.cell);
        match (&st.obj, st.closed) {
            (Some(o), false) => format!("<hexrpc.Lease size={}>", o.memory().1),
            _ => "<hexrpc.Lease closed>".to_string(),
        }
    }
}

/// Fills `view` for `exporter` with the bytes of the lease in `cell` (all of them, or `range` =
/// (offset, length)) and counts the export on the lease, so `close()` defers releasing the
/// memory until the last export is released.
///
/// # Safety
/// `view` is the `Py_buffer` Python passed to `__getbuffer__` of `exporter` (or null).
unsafe fn export(
    exporter: &Bound<'_, PyAny>,
    cell: &LeaseCell,
    range: Option<(usize, usize)>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("NULL Py_buffer"));
    }
    let mut st = lock(cell);
    if st.session_closed {
        return Err(PyBufferError::new_err(
            "the lease's session is closed (Session.close()): no buffer of it can be exported (memoryview, numpy.frombuffer, hexrpc.array)",
        ));
    }
    let Some(obj) = st.obj.as_ref().filter(|_| !st.closed) else {
        return Err(PyBufferError::new_err(
            "the lease is closed (Lease.close()): no new buffer of it can be exported (memoryview, numpy.frombuffer, hexrpc.array)",
        ));
    };
    // A read-only import is mapped PROT_READ: its exports say so, and a writable one is refused
    // (a write through it would fault the interpreter).
    let readonly = !obj.writable();
    if readonly && flags & ffi::PyBUF_WRITABLE != 0 {
        return Err(PyBufferError::new_err(
            "the lease is a read-only import (Session.import_fd(..., writable=False)): a writable buffer of it cannot be exported",
        ));
    }
    let (base, size) = obj.memory();
    let (off, len) = range.unwrap_or((0, size));
    // A View's range was checked against its lease when it was made; checked again here.
    if off.checked_add(len).is_none_or(|end| end > size) {
        return Err(PyBufferError::new_err("the view is outside its lease"));
    }
    let len = isize::try_from(len).map_err(|_| PyBufferError::new_err("lease too large"))?;
    // SAFETY: `view` is the non-null Py_buffer Python passed us; `base + off .. + len` lies in
    // the lease's mapping of `size` bytes (checked above), writable unless `readonly` (which the
    // buffer says), and it stays mapped until `exports` is back to 0 (`close` defers the release
    // while buffers are exported, and `release_export` decrements it); `exporter` is the
    // exporting object, which PyBuffer_FillInfo takes a reference to.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(
            view,
            exporter.as_ptr(),
            std::ptr::with_exposed_provenance_mut(base + off),
            len,
            c_int::from(readonly),
            flags,
        )
    };
    if rc != 0 {
        return Err(PyErr::fetch(exporter.py()));
    }
    st.exports += 1;
    Ok(())
}

/// The release of one export made by [`export`].
fn release_export(cell: &LeaseCell) {
    let mut st = lock(cell);
    st.exports = st.exports.saturating_sub(1);
    if st.closed && st.exports == 0 {
        st.obj = None;
    }
}

/// `length` bytes at `offset` of a lease: a buffer argument of a launch. Supports the buffer
/// protocol: `memoryview(view)` and `numpy.frombuffer(view, dtype)` are zero-copy views of
/// exactly these bytes of the lease's mapping (see `hexrpc.array`), read-only for a read-only
/// import. Such an export keeps the
/// session from closing (`Session.close()` raises `BufferError`) until it is released; once
/// the lease or its session is closed, exports raise `BufferError`.
#[pyclass(module = "hexrpc", frozen)]
struct View {
    cell: Arc<LeaseCell>,
    offset: usize,
    length: usize,
}

#[pymethods]
impl View {
    /// Offset in the lease.
    #[getter]
    fn offset(&self) -> usize {
        self.offset
    }
    /// Length in bytes.
    #[getter]
    fn length(&self) -> usize {
        self.length
    }
    fn __len__(&self) -> usize {
        self.length
    }
    /// The lease this is a view of.
    #[getter]
    fn lease(&self) -> Lease {
        Lease { cell: self.cell.clone() }
    }
    fn __repr__(&self) -> String {
        format!("<hexrpc.View offset={} length={}>", self.offset, self.length)
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let (cell, range) = (this.cell.clone(), (this.offset, this.length));
        // SAFETY: forwarded as received: `view` is the Py_buffer Python passed, `slf` its exporter.
        unsafe { export(slf.as_any(), &cell, Some(range), view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        release_export(&self.cell);
    }
}

/// An open library with its kernel's signature and launch ABI. A context manager.
#[pyclass(module = "hexrpc", frozen)]
struct Library {
    cell: Arc<KernelCell>,
    types: Vec<ScalarType>,
}

fn scalar(ty: ScalarType, v: &Bound<'_, PyAny>, i: usize) -> PyResult<Scalar> {
    let bad = |e: PyErr| py_err(Failure::refused(format!("scalar {i}: not a {ty}: {e}")));
    Ok(match ty {
        ScalarType::F32 => Scalar::F32(v.extract::<f64>().map_err(bad)? as f32),
        ScalarType::F64 => Scalar::F64(v.extract::<f64>().map_err(bad)?),
        ScalarType::F16 => Scalar::F16(v.extract::<u16>().map_err(bad)?),
        ScalarType::I8 => Scalar::I8(v.extract().map_err(bad)?),
        ScalarType::U8 => Scalar::U8(v.extract().map_err(bad)?),
        ScalarType::I16 => Scalar::I16(v.extract().map_err(bad)?),
        ScalarType::U16 => Scalar::U16(v.extract().map_err(bad)?),
        ScalarType::I32 => Scalar::I32(v.extract().map_err(bad)?),
        ScalarType::U32 => Scalar::U32(v.extract().map_err(bad)?),
        ScalarType::I64 => Scalar::I64(v.extract().map_err(bad)?),
        ScalarType::U64 => scalar_from_bits(ScalarType::U64, v.extract::<u64>().map_err(bad)?),
    })
}

#[pymethods]
impl Library {
    /// Launches the kernel on `views` (View or whole-Lease objects, in signature order) and
    /// `scalars` (Python numbers, converted to the signature's types) and returns the DSP's
    /// microseconds. `deadline_ms`: a launch still running after that long is abandoned
    /// (`NeedsRecovery`). The GIL is released during the call.
    #[pyo3(signature = (views, scalars = None, deadline_ms = None))]
    fn launch(
        &self,
        py: Python<'_>,
        views: &Bound<'_, PyAny>,
        scalars: Option<&Bound<'_, PyAny>>,
        deadline_ms: Option<u32>,
    ) -> PyResult<u64> {
        let kernel = lock(&self.cell).clone().ok_or_else(|| closed("library"))?;
        let mut leases: [Option<(Arc<LeaseObj>, usize, usize)>; MAX_BUFFERS] = Default::default();
        let mut n = 0usize;
        for item in views.try_iter()? {
            let item = item?;
            if n == MAX_BUFFERS {
                return Err(py_err(Failure::refused(format!("more than {MAX_BUFFERS} buffers"))));
            }
            let Some((cell, off, len)) = buffer_range(&item)? else {
                return Err(PyTypeError::new_err(format!("views[{n}] is not a hexrpc.View or hexrpc.Lease")));
            };
            leases[n] = Some((open_lease(&cell)?, off, len));
            n += 1;
        }
        let mut sc: Vec<Scalar> = Vec::new();
        if let Some(scalars) = scalars {
            for (i, v) in scalars.try_iter()?.enumerate() {
                let v = v?;
                let ty = *self
                    .types
                    .get(i)
                    .ok_or_else(|| py_err(Failure::refused(format!("more scalars than the signature's {}", self.types.len()))))?;
                sc.push(scalar(ty, &v, i)?);
            }
        }
        if deadline_ms == Some(0) {
            return Err(py_err(Failure::invalid("launch-pack", "deadline_ms must be positive (None: no deadline)")));
        }
        let deadline = deadline_ms.map(|ms| Duration::from_millis(u64::from(ms)));
        py.detach(|| {
            let mut args: [Option<ViewArg<'_>>; MAX_BUFFERS] = Default::default();
            for (a, l) in args.iter_mut().zip(leases.iter().take(n)) {
                if let Some((o, off, len)) = l {
                    *a = Some(ViewArg { lease: o, offset: *off, len: *len });
                }
            }
            let mut flat: Vec<ViewArg<'_>> = Vec::with_capacity(n);
            flat.extend(args.into_iter().take(n).flatten());
            kernel.launch(&flat, &sc, deadline)
        })
        .map_err(py_err)
        .inspect(|_| logs::flush(py))
    }

    /// The kernel's signature.
    #[getter]
    fn signature(&self) -> PyResult<String> {
        let k = lock(&self.cell).clone().ok_or_else(|| closed("library"))?;
        Ok(k.kernel().signature().to_string())
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.cell).is_none()
    }

    /// Closes the library (once launches in flight have returned). Closing twice is allowed.
    fn close(&self, py: Python<'_>) {
        let k = lock(&self.cell).take();
        py.detach(|| drop(k));
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// Bench builds: the image of a bench DSP model ("scale_f32", "add_u8", "sleep_ms").
#[pyfunction]
fn bench_model_image<'py>(py: Python<'py>, model: &str) -> PyResult<Bound<'py, PyBytes>> {
    #[cfg(feature = "bench")]
    {
        let b = hexrpc::bench::model_image(model).map_err(py_err)?;
        Ok(PyBytes::new(py, b))
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = (py, model);
        Err(py_err(Failure::unavailable("bench-image", "this build of hexrpc has no bench")))
    }
}

/// `hexrpc build-lib` as a function: builds kernel `kernel_name` (default: the file's stem) of
/// the C file `kernel_c` with an entry for `signature` and `abi` into the Hexagon shared object
/// `out` (with its build record, so `Session.open_library(out)` needs no signature); returns
/// `out`. Needs clang-19 and ld.lld-19 (`Unavailable` names a missing tool), not the bench.
#[pyfunction]
#[pyo3(signature = (kernel_c, signature, out, abi = "v2", kernel_name = None))]
fn build_library(
    py: Python<'_>,
    kernel_c: PathBuf,
    signature: &str,
    out: PathBuf,
    abi: &str,
    kernel_name: Option<&str>,
) -> PyResult<PathBuf> {
    #[cfg(feature = "build-lib")]
    {
        let abi = match abi {
            "v1" => AbiVersion::V1,
            "v2" => AbiVersion::V2,
            other => return Err(py_err(Failure::invalid("build-lib", format!("abi {other:?}: use \"v1\" or \"v2\"")))),
        };
        py.detach(|| hexrpc::build::build_library(&kernel_c, kernel_name, signature, abi, &out)).map_err(py_err)?;
        Ok(out)
    }
    #[cfg(not(feature = "build-lib"))]
    {
        let _ = (py, kernel_c, signature, out, abi, kernel_name);
        Err(py_err(Failure::unavailable("build-lib", "this build of hexrpc has no library builder (feature build-lib)")))
    }
}

/// Bench builds with the executor: an image of kernel `kernel` of the suite with an entry for
/// `signature` and `abi`, run as Hexagon code under qemu-hexagon (`Unavailable` without the
/// tools).
#[pyfunction]
#[pyo3(signature = (kernel, signature, abi = "v2"))]
fn bench_kernel_image<'py>(py: Python<'py>, kernel: &str, signature: &str, abi: &str) -> PyResult<Bound<'py, PyBytes>> {
    #[cfg(feature = "bench")]
    {
        let abi = match abi {
            "v1" => AbiVersion::V1,
            "v2" => AbiVersion::V2,
            other => return Err(py_err(Failure::invalid("bench-image", format!("abi {other:?}")))),
        };
        let b = py.detach(|| hexrpc::bench::kernel_image(kernel, signature, abi)).map_err(py_err)?;
        Ok(PyBytes::new(py, b))
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = (py, kernel, signature, abi);
        Err(py_err(Failure::unavailable("bench-image", "this build of hexrpc has no bench")))
    }
}

#[pymodule]
fn _hexrpc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Session>()?;
    m.add_class::<Lease>()?;
    m.add_class::<Arena>()?;
    m.add_class::<View>()?;
    m.add_class::<Library>()?;
    m.add_class::<batch::Batch>()?;
    m.add_class::<model::_Model>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("HandleError", py.get_type::<HandleError>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("LaunchRefused", py.get_type::<LaunchRefused>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    m.add("NeedsRecovery", py.get_type::<NeedsRecovery>())?;
    m.add("DspError", py.get_type::<DspError>())?;
    m.add("Failed", py.get_type::<Failed>())?;
    m.add("ForkedSession", py.get_type::<ForkedSession>())?;
    m.add_function(wrap_pyfunction!(bench_model_image, m)?)?;
    m.add_function(wrap_pyfunction!(bench_kernel_image, m)?)?;
    m.add_function(wrap_pyfunction!(model::bench_sample_model, m)?)?;
    m.add_function(wrap_pyfunction!(model::write_model, m)?)?;
    m.add_function(wrap_pyfunction!(model::bench_shell, m)?)?;
    m.add_function(wrap_pyfunction!(model::bench_raw_ioctl_ns, m)?)?;
    m.add_function(wrap_pyfunction!(build_library, m)?)?;
    // The name it had when it needed the bench: the same function object.
    m.add("bench_build_library", m.getattr("build_library")?)?;
    m.add_function(wrap_pyfunction!(probe::detect_board, m)?)?;
    m.add_function(wrap_pyfunction!(probe::bench_counters, m)?)?;
    m.add_function(wrap_pyfunction!(probe::take_exec_counts, m)?)?;
    m.add_function(wrap_pyfunction!(logs::flush_logs, m)?)?;
    m.add_function(wrap_pyfunction!(logs::set_log_level, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_LIBRARIES", hexrpc_hal::MAX_LIBRARIES)?;
    m.add("ARENA_ALIGN", hexrpc_hal::ARENA_ALIGN)?;
    m.add("ARENA_BLOCKS", hexrpc_hal::ARENA_BLOCKS)?;
    m.add("MAX_BATCH_LAUNCHES", hexrpc_runtime::launch::MAX_BATCH_LAUNCHES)?;
    m.add("MAX_BATCH_LEASES", hexrpc_runtime::launch::MAX_BATCH_LEASES)?;
    m.add("MAX_BATCH_RECORD_BYTES", hexrpc_runtime::launch::MAX_BATCH_RECORD_BYTES)?;
    m.add("MAX_BATCH_KERNELS", hexrpc_runtime::launch::MAX_BATCH_KERNELS)?;
    m.add("BATCH_STACK_BYTES", hexrpc::HEXRPC_BATCH_STACK_BYTES)?;
    if let Some(msg) = logs::install() {
        py.import("warnings")?.call_method1("warn", (msg,))?;
    }
    Ok(())
}
