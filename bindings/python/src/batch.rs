//! `hexrpc.Batch`: many launches of one library's kernel table in one FastRPC call (the runtime's
//! [`Batch`](hexrpc_runtime::launch::Batch), launch ABI method 3).
//!
//! ```text
//! lib = sess.open_library(image, signature=kernels[0])      # a library built for a kernel table
//! batch = hexrpc.Batch(lib, kernels)                         # kernels: the table's signatures
//! r = batch.push(1, [lease.view(0, 4096), out.view(128, 4096)], [3])
//! dsp_us = batch.run()                                       # one ioctl
//! batch.set_scalar(r, 0, 4); batch.run()
//! ```
//!
//! The Python object keeps the records (kernel, lease handles and ranges, scalars); every `run`
//! packs them into the runtime's fixed-capacity batch (leases deduplicated, every field checked
//! as a single v2 launch is) and makes one `FASTRPC_IOCTL_INVOKE_ATTRS` on the library. `push`
//! checks the new record against the batch's capacity at once, so a batch that cannot run is
//! refused when it is built, not when it runs. The GIL is released during the call.
//!
//! Leases: a record holds the lease's handle (as a `View` does), not the lease itself: once the
//! lease is closed its memory is released as after any close, and `run` raises `HandleError`
//! as a launch on a view of it does.
//!
//! Threads: the records' lock is only ever taken with the GIL held and never held across a
//! release of the GIL or a call into Python code, so no thread can wait for it while another
//! holds it without the GIL. `run` takes a snapshot of the records (and the leases they name)
//! before releasing the GIL and runs that snapshot: `len`, `push`, `set_scalar` and other `run`s
//! go on while it runs (several runs of one batch are several independent calls on the
//! library), and a change made during a run applies from the next run on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hexrpc::batch::{self as shared, BatchRecord as Resolved};
use hexrpc::objects::{KernelObj, LeaseObj};
use hexrpc::Failure;
use hexrpc_runtime::launch::{Scalar, Signature, MAX_BATCH_LEASES};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::{buffer_range, closed, lock, open_lease, py_err, scalar, LeaseCell, Library};

/// A record as the batch keeps it: lease handles, checked at every run, each with the id of the
/// lease the DSP maps for it (an arena's for its sub-allocations), which is what the batch's
/// distinct leases are counted by.
#[derive(Clone)]
struct Record {
    kernel: usize,
    views: Vec<(Arc<LeaseCell>, usize, usize, u32)>,
    scalars: Vec<Scalar>,
}

/// `records` with their leases, all of which must be open.
fn resolve(records: &[Record]) -> PyResult<Vec<Resolved>> {
    records
        .iter()
        .map(|r| {
            let views = r.views.iter().map(|(c, off, len, _)| Ok((open_lease(c)?, *off, *len))).collect::<PyResult<_>>()?;
            Ok(Resolved { kernel: r.kernel, views, scalars: r.scalars.clone() })
        })
        .collect()
}

/// Batch(library, kernels): launches of a library's kernel table, run together in one FastRPC
/// call.
///
/// `library` is a `Library` opened from a library built with a kernel table (`hexrpc build-lib
/// --table=...`, or tinygrad's graph libraries); `kernels` is the list of the table's kernel
/// *signatures* (strings such as "buf,buf,u32"), in table order: `push(k, ...)` launches kernel
/// `k` with signature `kernels[k]`. The library must have been opened with `kernels[0]`'s
/// signature. Refused at once (`InvalidArgument`): an empty or too long table (at most 256), a
/// signature that does not parse, a `kernels[0]` other than the library's signature, a library
/// whose build record (`hexrpc build-lib`) says its entry runs no batches (built without
/// `--table`), and a `kernels` list other than the table its build record names. Only a library
/// without a build record (built elsewhere) is found out by `run()` if its entry does not answer
/// batches.
///
/// `push(kernel, views, scalars)` appends a record and returns its index; `set_scalar(record,
/// index, value)` and `set_view(record, index, view)` change a record in place; `run(deadline_ms=
/// None)` sends every record in one call and returns the DSP microseconds.
///
/// Stack: the records are packed on the heap, never on the calling thread's stack, so `push`
/// and `run` need at most `hexrpc.BATCH_STACK_BYTES` (64 KiB) of it, including the
/// interpreter's own frames: a thread made after `threading.stack_size(64 * 1024)` runs the
/// largest batch.
#[pyclass(module = "hexrpc", frozen)]
pub struct Batch {
    cell: Arc<crate::KernelCell>,
    kernels: Vec<Signature>,
    records: Mutex<Vec<Record>>,
    /// Where pushes and runs pack the records (on the heap, kept between calls).
    space: shared::SpaceCache,
}

/// A record's view entry from a `View` or a whole `Lease` (argument `n`), whose lease is open
/// and belongs to the session of `kobj`.
fn view_entry(item: &Bound<'_, PyAny>, n: usize, kobj: &KernelObj) -> PyResult<(Arc<LeaseCell>, usize, usize, Arc<LeaseObj>)> {
    let Some((cell, off, len)) = buffer_range(item)? else {
        return Err(PyTypeError::new_err(format!("views[{n}] is not a hexrpc.View or hexrpc.Lease")));
    };
    let lease = open_lease(&cell)?;
    if !Arc::ptr_eq(lease.session(), kobj.session()) {
        return Err(py_err(Failure::invalid("launch-pack", format!("buffer {n}: its lease belongs to another session"))));
    }
    Ok((cell, off, len, lease))
}

fn kernel_of(cell: &crate::KernelCell) -> PyResult<Arc<KernelObj>> {
    lock(cell).clone().ok_or_else(|| closed("library"))
}

#[pymethods]
impl Batch {
    /// A batch on `library`, a library built for a kernel table whose signatures are `kernels`
    /// (index = kernel index; the library was opened with the signature of kernel 0).
    #[new]
    fn new(library: &Library, kernels: Vec<String>) -> PyResult<Batch> {
        let kobj = kernel_of(&library.cell)?;
        let sigs = shared::parse_kernels(&kobj, &kernels).map_err(py_err)?;
        Ok(Batch { cell: library.cell.clone(), kernels: sigs, records: Mutex::new(Vec::new()), space: shared::SpaceCache::default() })
    }

    /// Appends a launch of kernel `kernel` on `views` (View or whole-Lease objects) and
    /// `scalars` (converted to the kernel's signature); returns its record index. Refused
    /// (`LaunchRefused`) if it does not fit the kernel or the batch's capacity.
    #[pyo3(signature = (kernel, views, scalars = None))]
    fn push(&self, kernel: usize, views: &Bound<'_, PyAny>, scalars: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let kobj = kernel_of(&self.cell)?;
        let sig = self
            .kernels
            .get(kernel)
            .ok_or_else(|| py_err(Failure::refused(format!("kernel {kernel} is not in the table of {}", self.kernels.len()))))?;
        let mut vs = Vec::new();
        let mut opened = Vec::new();
        for (n, item) in views.try_iter()?.enumerate() {
            let (cell, off, len, lease) = view_entry(&item?, n, &kobj)?;
            vs.push((cell, off, len, lease.lease_id()));
            opened.push((lease, off, len));
        }
        let types: Vec<_> = sig.scalar_types().collect();
        let mut sc = Vec::new();
        if let Some(scalars) = scalars {
            for (i, v) in scalars.try_iter()?.enumerate() {
                let ty = *types
                    .get(i)
                    .ok_or_else(|| py_err(Failure::refused(format!("more scalars than kernel {kernel}'s {}", types.len()))))?;
                sc.push(scalar(ty, &v?, i)?);
            }
        }
        // Capacity check on the records as they are now plus the new one (lock held briefly,
        // no Python code under it).
        let record = Record { kernel, views: vs, scalars: sc };
        let mut all = resolve(&lock(&self.records).clone())?;
        all.push(Resolved { kernel, views: opened, scalars: record.scalars.clone() });
        shared::with_packed(&self.space, &self.kernels, &all, |_| Ok(())).map_err(py_err)?;
        let mut records = lock(&self.records);
        records.push(record);
        Ok(records.len() - 1)
    }

    /// Sets scalar `index` of record `record` to `value` (converted to the kernel's type).
    fn set_scalar(&self, record: usize, index: usize, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let kernel = lock(&self.records).get(record).map(|r| r.kernel);
        let kernel = kernel.ok_or_else(|| py_err(Failure::refused(format!("no record {record}"))))?;
        let ty = self.kernels[kernel]
            .scalar_types()
            .nth(index)
            .ok_or_else(|| py_err(Failure::refused(format!("record {record} has no scalar {index}"))))?;
        // Converted before the lock is taken: the conversion may run Python code.
        let v = scalar(ty, value, index)?;
        if let Some(r) = lock(&self.records).get_mut(record) {
            r.scalars[index] = v;
        }
        Ok(())
    }

    /// Replaces buffer `index` of record `record` with `view` (a View, or a Lease for all of
    /// it), in place: the record keeps its kernel and scalars, and the next `run` sends the new
    /// view. The view is checked as `push` checks it (open lease of this session); a lease that
    /// would bring the batch beyond its distinct-lease capacity is refused (`LaunchRefused`) and
    /// the record is left as it was. What a graph uses when an input buffer changes between
    /// runs: nothing is rebuilt.
    fn set_view(&self, record: usize, index: usize, view: &Bound<'_, PyAny>) -> PyResult<()> {
        self.replace_views(&[(record, index)], view)
    }

    /// `set_view` for several places at once: buffer `index` of record `record` for every
    /// `(record, index)` in `places` becomes `view`, all or none (checked as `set_view` checks
    /// one). What a graph calls when an input buffer that several launches read changes.
    fn set_views(&self, places: Vec<(usize, usize)>, view: &Bound<'_, PyAny>) -> PyResult<()> {
        self.replace_views(&places, view)
    }

    /// Runs every record in order in one FastRPC call; returns the DSP microseconds summed over
    /// the kernels. `deadline_ms`: abandoned after that long (`NeedsRecovery`); as for
    /// `Library.launch`, it must be positive (`None`: no deadline). A kernel that reports a
    /// failure stops the batch (`Failed`, naming the record). A closed lease in any record
    /// raises `HandleError`, as a launch does. Runs the records as they are when it is called
    /// (see the module's "Threads").
    #[pyo3(signature = (deadline_ms = None))]
    fn run(&self, py: Python<'_>, deadline_ms: Option<u32>) -> PyResult<u64> {
        self.run_with(py, deadline_ms, false).map(|(us, _)| us)
    }

    /// [`run`](Self::run), with each record's DSP time: returns `(dsp_us, [us per record])`, the
    /// list `None` when the library's entry does not time records (built before per-record
    /// times). On the bench the times are emulated or simulated, never device figures.
    #[pyo3(signature = (deadline_ms = None))]
    fn run_profiled(&self, py: Python<'_>, deadline_ms: Option<u32>) -> PyResult<(u64, Option<Vec<u32>>)> {
        self.run_with(py, deadline_ms, true)
    }

    /// Number of records.
    fn __len__(&self) -> usize {
        lock(&self.records).len()
    }

    fn __repr__(&self) -> String {
        format!("<hexrpc.Batch kernels={} records={}>", self.kernels.len(), lock(&self.records).len())
    }
}

impl Batch {
    /// One run (`timed`: with each record's DSP time), the GIL released.
    fn run_with(&self, py: Python<'_>, deadline_ms: Option<u32>, timed: bool) -> PyResult<(u64, Option<Vec<u32>>)> {
        let kobj = kernel_of(&self.cell)?;
        if deadline_ms == Some(0) {
            return Err(py_err(Failure::invalid("launch-pack", "deadline_ms must be positive (None: no deadline)")));
        }
        let snapshot = lock(&self.records).clone();
        let recs = resolve(&snapshot)?;
        let deadline = deadline_ms.map(|ms| Duration::from_millis(u64::from(ms)));
        let kernels = &self.kernels;
        let run = || {
            if timed {
                shared::run_timed(&self.space, &kobj, kernels, &recs, deadline)
            } else {
                shared::run(&self.space, &kobj, kernels, &recs, deadline).map(|us| (us, None))
            }
        };
        py.detach(run).map_err(py_err).inspect(|_| crate::logs::flush(py))
    }

    /// Points buffer `index` of record `record`, for every `(record, index)` of `places`, at
    /// `view`: all or none (a missing place or a lease beyond the capacity refuses them all).
    fn replace_views(&self, places: &[(usize, usize)], view: &Bound<'_, PyAny>) -> PyResult<()> {
        let kobj = kernel_of(&self.cell)?;
        let (cell, off, len, lease) = view_entry(view, places.first().map_or(0, |p| p.1), &kobj)?;
        let id = lease.lease_id();
        drop(lease);
        let mut records = lock(&self.records);
        for &(record, index) in places {
            match records.get(record).map(|r| r.views.len()) {
                None => return Err(py_err(Failure::refused(format!("no record {record}")))),
                Some(n) if index >= n => {
                    return Err(py_err(Failure::refused(format!("record {record} has no buffer {index} (it has {n})"))))
                }
                Some(_) => {}
            }
        }
        let ids = records.iter().map(|r| r.views.iter().map(|v| v.3));
        if shared::distinct_leases(ids, |r, i| places.contains(&(r, i)).then_some(id)) > MAX_BATCH_LEASES {
            return Err(py_err(shared::too_many_leases()));
        }
        for &(record, index) in places {
            records[record].views[index] = (cell.clone(), off, len, id);
        }
        Ok(())
    }
}
