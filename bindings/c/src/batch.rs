//! Batches for the bindings: many launches of one library's kernel table in one FastRPC call
//! (the runtime's [`Batch`], launch ABI method 3), shared by the C
//! ABI (`hexrpc_batch_*`, [`BatchObj`]) and the Python package (`hexrpc.Batch`, which keeps its
//! own records and runs them with [`run`]).
//!
//! Records hold their leases ([`Arc<LeaseObj>`]); every run packs them into the runtime's
//! fixed-capacity batch (leases deduplicated, every field checked as a single v2 launch is) and
//! makes one `FASTRPC_IOCTL_INVOKE_ATTRS`. A push or a change is checked against the batch's
//! capacity at once, so a batch that cannot run is refused when it is built.
//!
//! The runtime batch's 66 KiB of records live in a [`BatchSpace`] on the heap, made there in
//! zeroed memory, never on the caller's stack: a push or a run needs a few KiB of stack (a C
//! thread with 64 KiB runs the largest batch; see `HEXRPC_BATCH_STACK_BYTES` in the header).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hexrpc_hal::BufferView;
use hexrpc_runtime::launch::{Batch, BatchRefusal, BatchSpace, BufferRef, Scalar, Signature, BATCH, MAX_BATCH_KERNELS, MAX_BATCH_LEASES};
use hexrpc_runtime::KernelLibrary;

use crate::error::Failure;
use crate::objects::{KernelObj, KernelTable, LeaseObj};

/// One launch of a batch: kernel index, views (lease, offset, length), scalars.
#[derive(Clone)]
pub struct BatchRecord {
    /// Index in the kernel table.
    pub kernel: usize,
    /// The buffers.
    pub views: Vec<(Arc<LeaseObj>, usize, usize)>,
    /// The scalars, typed per the kernel's signature.
    pub scalars: Vec<Scalar>,
}

/// The table's signatures, checked against the library (`kernels[0]` is the signature it was
/// opened with; 1..=`MAX_BATCH_KERNELS` of them, each parsing) and against its build record: a
/// library whose record says its entry runs no batches is refused, and so is a table other than
/// the recorded one (a library without a record, built elsewhere, is found out by a run).
pub fn parse_kernels<S: AsRef<str>>(kobj: &KernelObj, kernels: &[S]) -> Result<Vec<Signature>, Failure> {
    if kernels.is_empty() || kernels.len() > MAX_BATCH_KERNELS {
        return Err(Failure::invalid("batch", format!("{} kernels: a table holds 1..={MAX_BATCH_KERNELS}", kernels.len())));
    }
    let mut sigs = Vec::with_capacity(kernels.len());
    for (i, s) in kernels.iter().enumerate() {
        let s = s.as_ref();
        sigs.push(Signature::parse(s).map_err(|e| Failure::invalid("batch", format!("kernel {i}: signature {s:?}: {e}")))?);
    }
    match kobj.table() {
        KernelTable::None => {
            return Err(Failure::invalid(
                "batch",
                "the library has no kernel table (its build record names a single-kernel entry, which runs no batches): build it with `hexrpc build-lib --table`",
            ))
        }
        KernelTable::Recorded(table) if *table != sigs => {
            let text = |s: &[Signature]| s.iter().map(|s| format!("{:?}", s.to_string())).collect::<Vec<_>>().join(", ");
            return Err(Failure::invalid(
                "batch",
                format!("the kernels [{}] are not the library's kernel table [{}] (its build record)", text(&sigs), text(table)),
            ));
        }
        _ => {}
    }
    if sigs[0] != *kobj.kernel().signature() {
        return Err(Failure::invalid(
            "batch",
            format!("kernel 0 is {:?} but the library was opened for {:?}", kernels[0].as_ref(), kobj.kernel().signature().to_string()),
        ));
    }
    Ok(sigs)
}

/// A batch object's [`BatchSpace`], kept between its pushes and runs so that each does not
/// allocate and zero 66 KiB again. A call that finds it in use (a run on another thread) makes
/// one of its own; one of them is kept afterwards.
#[derive(Default)]
pub struct SpaceCache(Mutex<Option<Box<BatchSpace>>>);

impl SpaceCache {
    fn take(&self) -> Box<BatchSpace> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        kept.unwrap_or_else(BatchSpace::boxed)
    }

    fn put(&self, space: Box<BatchSpace>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(space);
    }
}

/// Packs `records` into a runtime batch over `kernels` and hands it to `f`. The batch's records
/// are kept in a [`BatchSpace`] on the heap, `cache`'s (see the module docs).
pub fn with_packed<R>(
    cache: &SpaceCache,
    kernels: &[Signature],
    records: &[BatchRecord],
    f: impl FnOnce(&mut Batch<'_, &mut BatchSpace>) -> Result<R, Failure>,
) -> Result<R, Failure> {
    let mut views: Vec<BufferView<'_>> = Vec::new();
    for r in records {
        for (lease, off, len) in &r.views {
            views.push(lease.view(*off, *len)?);
        }
    }
    let mut space = cache.take();
    let packed = Batch::in_space(kernels, &mut *space).map_err(|(e, _)| Failure::runtime(e)).and_then(|mut batch| {
        let mut at = 0;
        for r in records {
            let refs: Vec<BufferRef<'_>> = views[at..at + r.views.len()].iter().map(BufferRef::of).collect();
            at += r.views.len();
            batch.push(r.kernel, &refs, &r.scalars).map_err(Failure::runtime)?;
        }
        f(&mut batch)
    });
    cache.put(space);
    packed
}

/// Runs `records` on `kobj` in one FastRPC call; returns the DSP microseconds summed over the
/// kernels. A kernel that reports a failure stops the batch (the error names the record).
pub fn run(
    cache: &SpaceCache,
    kobj: &KernelObj,
    kernels: &[Signature],
    records: &[BatchRecord],
    deadline: Option<Duration>,
) -> Result<u64, Failure> {
    run_with(cache, kobj, kernels, records, deadline, false).map(|(us, _)| us)
}

/// [`run`], with each record's DSP microseconds when the library's entry times records (`None`
/// from one built before per-record times).
pub fn run_timed(
    cache: &SpaceCache,
    kobj: &KernelObj,
    kernels: &[Signature],
    records: &[BatchRecord],
    deadline: Option<Duration>,
) -> Result<(u64, Option<Vec<u32>>), Failure> {
    run_with(cache, kobj, kernels, records, deadline, true)
}

/// One batch call; with `timed`, a status buffer with room for every record's time.
fn run_with(
    cache: &SpaceCache,
    kobj: &KernelObj,
    kernels: &[Signature],
    records: &[BatchRecord],
    deadline: Option<Duration>,
    timed: bool,
) -> Result<(u64, Option<Vec<u32>>), Failure> {
    kobj.session().check()?;
    with_packed(cache, kernels, records, |batch| {
        if batch.is_empty() {
            return Err(Failure::runtime(BatchRefusal::Empty.into()));
        }
        let lib = kobj.kernel().library();
        // Lease ids only to a library with the map cache (others refuse a non-zero id word).
        batch.send_lease_ids(lib.map_cache());
        let mut status = vec![0u8; if timed { BATCH.timed_status_len(batch.len()) } else { BATCH.status_len }];
        {
            let mut args = batch.invoke_args_with_status(&mut status).map_err(|e| Failure::refused(format!("{e:?}")))?;
            match deadline {
                Some(t) => lib.invoke_args_with_deadline(&mut args, t),
                None => lib.invoke_args(&mut args),
            }
            .map_err(Failure::hal)?;
        }
        let run = batch.outcome_of(&status).map_err(Failure::runtime)?;
        let times = if timed { BATCH.record_micros(&status, batch.len()).map(|t| t.iter().collect()) } else { None };
        Ok((run.dsp_micros, times))
    })
}

/// Distinct leases `records` name, by the key of the lease the DSP maps for each view (the
/// lease id: every sub-allocation of one arena has its arena's), with view `i` of record `r`
/// replaced by `replace(r, i)` where that is `Some`; stops counting past `MAX_BATCH_LEASES`.
pub fn distinct_leases<K, R, I>(records: R, replace: impl Fn(usize, usize) -> Option<K>) -> usize
where
    K: Copy + PartialEq,
    R: IntoIterator<Item = I>,
    I: IntoIterator<Item = K>,
{
    let mut seen: heapless::Vec<K, { MAX_BATCH_LEASES + 1 }> = heapless::Vec::new();
    for (r, rec) in records.into_iter().enumerate() {
        for (i, p) in rec.into_iter().enumerate() {
            let p = replace(r, i).unwrap_or(p);
            if !seen.contains(&p) {
                if seen.push(p).is_err() {
                    return MAX_BATCH_LEASES + 1;
                }
                if seen.len() > MAX_BATCH_LEASES {
                    return seen.len();
                }
            }
        }
    }
    seen.len()
}

/// The refusal of a change that would bring a batch beyond its distinct leases.
pub fn too_many_leases() -> Failure {
    Failure::runtime(BatchRefusal::TooManyLeases { capacity: MAX_BATCH_LEASES }.into())
}

/// A batch of the C ABI: its library, the table's signatures and the records.
pub struct BatchObj {
    kernel: Arc<KernelObj>,
    kernels: Vec<Signature>,
    records: Mutex<Vec<BatchRecord>>,
    space: SpaceCache,
}

impl BatchObj {
    /// A batch on `kernel` (a library built for a kernel table) whose table has `kernels`.
    pub fn new<S: AsRef<str>>(kernel: Arc<KernelObj>, kernels: &[S]) -> Result<BatchObj, Failure> {
        let kernels = parse_kernels(&kernel, kernels)?;
        Ok(BatchObj { kernel, kernels, records: Mutex::new(Vec::new()), space: SpaceCache::default() })
    }

    /// The library the batch runs on.
    pub fn kernel(&self) -> &Arc<KernelObj> {
        &self.kernel
    }

    fn records(&self) -> MutexGuard<'_, Vec<BatchRecord>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_session(&self, views: &[(Arc<LeaseObj>, usize, usize)]) -> Result<(), Failure> {
        for (n, (lease, _, _)) in views.iter().enumerate() {
            if !Arc::ptr_eq(lease.session(), self.kernel.session()) {
                return Err(Failure::invalid("launch-pack", format!("buffer {n}: its lease belongs to another session")));
            }
        }
        Ok(())
    }

    /// Appends a launch of kernel `kernel`; returns its record index. Checked against the
    /// kernel's signature and the batch's capacity with the records already there.
    pub fn push(&self, kernel: usize, views: Vec<(Arc<LeaseObj>, usize, usize)>, scalars: Vec<Scalar>) -> Result<usize, Failure> {
        if kernel >= self.kernels.len() {
            return Err(Failure::refused(format!("kernel {kernel} is not in the table of {}", self.kernels.len())));
        }
        self.check_session(&views)?;
        let mut records = self.records();
        records.push(BatchRecord { kernel, views, scalars });
        if let Err(e) = with_packed(&self.space, &self.kernels, &records, |_| Ok(())) {
            records.pop();
            return Err(e);
        }
        Ok(records.len() - 1)
    }

    /// Sets scalar `index` of record `record` (its type must be the signature's).
    pub fn set_scalar(&self, record: usize, index: usize, value: Scalar) -> Result<(), Failure> {
        let mut records = self.records();
        let r = records.get_mut(record).ok_or_else(|| Failure::refused(format!("no record {record}")))?;
        let ty = self.kernels[r.kernel]
            .scalar_types()
            .nth(index)
            .ok_or_else(|| Failure::refused(format!("record {record} has no scalar {index}")))?;
        if value.ty() != ty {
            return Err(Failure::refused(format!("record {record} scalar {index} is {ty}, not {}", value.ty())));
        }
        r.scalars[index] = value;
        Ok(())
    }

    /// Replaces buffer `index` of record `record` with `view`, checked as a push checks it;
    /// refused (record unchanged) if the batch would exceed its distinct leases.
    pub fn set_view(&self, record: usize, index: usize, view: (Arc<LeaseObj>, usize, usize)) -> Result<(), Failure> {
        self.check_session(std::slice::from_ref(&view))?;
        view.0.view(view.1, view.2)?;
        let mut records = self.records();
        let n = records.get(record).map(|r| r.views.len()).ok_or_else(|| Failure::refused(format!("no record {record}")))?;
        if index >= n {
            return Err(Failure::refused(format!("record {record} has no buffer {index} (it has {n})")));
        }
        let ids = records.iter().map(|r| r.views.iter().map(|v| v.0.lease_id()));
        let with = view.0.lease_id();
        if distinct_leases(ids, |r, i| (r == record && i == index).then_some(with)) > MAX_BATCH_LEASES {
            return Err(too_many_leases());
        }
        records[record].views[index] = view;
        Ok(())
    }

    /// Runs the records as they are now in one call (the records' lock is not held during it).
    pub fn run(&self, deadline: Option<Duration>) -> Result<u64, Failure> {
        let snapshot = self.records().clone();
        run(&self.space, &self.kernel, &self.kernels, &snapshot, deadline)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records().len()
    }

    /// True without records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
