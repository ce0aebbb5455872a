//! A model file opened on a served session and run: one FastRPC call per run.
//!
//! [`LoadedModel::open`] takes a file's bytes, validates all of it ([`ModelFile::parse`]) and
//! checks what this build needs to run it (every library runs programs, every run's records fit a
//! program) before it makes any system call. Then it opens
//! the libraries (under the map cache when their build record asks for it), allocates the
//! arenas and writes their initial contents (the weights; zero ranges filled), writes the records
//! into one lease of their own, and builds one [`Program`] per run of consecutive steps on one
//! library (a file from `python -m hexrpc.export` has one library, so one program: one call a
//! run). Anything that fails on the way is given back before the error returns.
//!
//! [`LoadedModel::run`] writes the inputs into their arenas, sends each program (bounded by the
//! deadline, if one is given), and reads the outputs out. It allocates nothing. After a DSP
//! restart the run fails with a recoverable error; once the session is recovered
//! (`ServedSession::recover`, or the session's `recover()`), the next run works as before: the
//! libraries are reopened by the session, the arenas and the records lease are host memory and
//! were never lost, and nothing is read from the file again.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hexrpc_drivers::Syscalls;
use hexrpc_hal::{SharedLease, SharedLibrary, ARENA_ALIGN};
use hexrpc_runtime::launch::{BatchRun, BufferRef, Program, Signature, MAX_PROGRAM_LAUNCHES, MAX_PROGRAM_RECORD_BYTES, PROGRAM};
use hexrpc_runtime::{Error as RuntimeError, ErrorKind, ServedSession};

use crate::bind::{rebind, BindRefusal, LeaseHolder, Move};
use crate::{DType, Direction, Limits, ModelError, ModelFile};

/// The owner every program's lease records borrow from: the [`LoadedModel`] owns the leases
/// themselves and drops its programs first (see [`LoadedModel`]).
static LEASES_OWNED_BY_THE_MODEL: () = ();

/// Why a model could not be opened or run.
#[derive(Debug, PartialEq)]
#[non_exhaustive]
pub enum RunError {
    /// The file could not be read (opened, examined or mapped).
    Read {
        /// The path.
        path: String,
        /// The system's error.
        errno: hexrpc_drivers::Errno,
    },
    /// The file is not a valid model file for this build (nothing was sent).
    File(ModelError),
    /// Library `library` was built before programs (launch ABI method 5) existed: rebuild the
    /// model with this hexrpc (nothing was sent).
    NoPrograms {
        /// The library's index.
        library: usize,
    },
    /// The run's records do not fit a program (nothing was sent).
    Records(Box<RuntimeError>),
    /// Opening the model failed at `what` (everything it had acquired was given back).
    Open {
        /// What was being done: "open library N", "allocate arena N", ...
        what: String,
        /// The stack's error.
        error: Box<RuntimeError>,
    },
    /// The run was given `got` inputs; the model has `want`.
    InputCount {
        /// Inputs the model has.
        want: usize,
        /// Inputs given.
        got: usize,
    },
    /// The run was given `got` output buffers; the model has `want` outputs.
    OutputCount {
        /// Outputs the model has.
        want: usize,
        /// Buffers given.
        got: usize,
    },
    /// Input or output `name` needs `want` bytes; its buffer has `got`.
    Size {
        /// The input's or output's name.
        name: String,
        /// Bytes it needs.
        want: u64,
        /// Bytes given.
        got: usize,
    },
    /// The deadline passed before program `program` could be sent (nothing more was sent).
    Deadline {
        /// The program that was not sent.
        program: usize,
    },
    /// Program `program` failed (a recoverable error means: recover the session, run again).
    Run {
        /// The program's index.
        program: usize,
        /// The stack's error.
        error: Box<RuntimeError>,
    },
    /// Input `name` could not be bound to the view (nothing changed).
    Bind {
        /// The input's name.
        name: String,
        /// Why.
        refusal: BindRefusal,
    },
    /// There is no input `index` (the model has `inputs`).
    NoSuchInput {
        /// The index asked for.
        index: usize,
        /// Inputs the model has.
        inputs: usize,
    },
    /// The run was given bytes for input `name`, which is bound to a view: give it an empty
    /// slice (the kernels read the view).
    Bound {
        /// The input's name.
        name: String,
    },
    /// Moving an input in or an output out of its arena failed.
    Io {
        /// The input's or output's name.
        name: String,
        /// The stack's error.
        error: Box<RuntimeError>,
    },
}

impl RunError {
    /// True if the session needs `recover()` before the next run (a DSP restart, a passed
    /// deadline that interrupted a call).
    pub fn is_recoverable(&self) -> bool {
        match self {
            RunError::Run { error, .. } | RunError::Io { error, .. } => error.kind() == ErrorKind::Recoverable,
            _ => false,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Read { path, errno } => write!(f, "{path}: {errno}"),
            RunError::File(e) => write!(f, "model file: {e}"),
            RunError::NoPrograms { library } => write!(
                f,
                "library {library} was built before programs (launch ABI method 5) existed; export the model again with this hexrpc"
            ),
            RunError::Records(e) => write!(f, "the model's records do not fit a program: {e}"),
            RunError::Open { what, error } => write!(f, "opening the model: {what}: {error}"),
            RunError::InputCount { want, got } => write!(f, "the model has {want} inputs; {got} were given"),
            RunError::OutputCount { want, got } => write!(f, "the model has {want} outputs; {got} buffers were given"),
            RunError::Size { name, want, got } => write!(f, "{name:?} needs {want} bytes; its buffer has {got}"),
            RunError::Deadline { program } => write!(f, "the deadline passed before program {program} was sent"),
            RunError::Run { program, error } => write!(f, "program {program}: {error}"),
            RunError::Io { name, error } => write!(f, "{name:?}: {error}"),
            RunError::Bind { name, refusal } => write!(f, "input {name:?} cannot be bound to the view: {refusal}"),
            RunError::NoSuchInput { index, inputs } => write!(f, "there is no input {index}: the model has {inputs}"),
            RunError::Bound { name } => {
                write!(f, "input {name:?} is bound to a view: give it no bytes (the kernels read the view), or unbind it first")
            }
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::File(e) => Some(e),
            RunError::Records(e) | RunError::Open { error: e, .. } | RunError::Run { error: e, .. } | RunError::Io { error: e, .. } => {
                Some(e)
            }
            _ => None,
        }
    }
}

impl From<ModelError> for RunError {
    fn from(e: ModelError) -> Self {
        RunError::File(e)
    }
}

/// An input or output of an opened model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// Its name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// Bytes (elements times the dtype's size).
    pub len: u64,
    arena: usize,
    offset: u64,
}

/// Where a model came from (the file's provenance, owned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// SHA-256 of the source model file (zeros when there was none).
    pub source_digest: [u8; 32],
    /// The source's name.
    pub source_name: String,
    /// tinygrad's version at export.
    pub tinygrad_version: String,
    /// hexrpc's version at export.
    pub hexrpc_version: String,
    /// The Hexagon architecture the libraries were built for (ELF `e_flags`, e.g. `0x65`).
    pub arch: u32,
}

/// One program of a run and the library it runs on.
struct Step {
    library: usize,
    program: Program<'static>,
}

/// What one run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// Launches run (the model's records).
    pub launches: usize,
    /// FastRPC calls made (one per program).
    pub calls: usize,
    /// DSP microseconds summed over the kernels, as the entries measured them (on the bench:
    /// simulated or emulated time, never a device figure).
    pub dsp_micros: u64,
    /// Bytes of the caller's inputs the run copied into the model's arenas: 0 when every input
    /// is bound to a view ([`LoadedModel::bind_input`]).
    pub input_bytes_copied: u64,
}

/// One record's DSP time in a profiled run ([`LoadedModel::run_profiled`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelTime {
    /// The call (program) it ran in, in run order.
    pub call: usize,
    /// Its index in that call.
    pub record: usize,
    /// Its kernel's name (tinygrad's, from the library's build record).
    pub kernel: String,
    /// Microseconds around the kernel call on the DSP.
    pub micros: u32,
}

/// Where a run's DSP time went ([`LoadedModel::run_profiled`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// Each timed record, in run order.
    pub records: Vec<KernelTime>,
    /// Calls whose library did not time its records (built before per-record times).
    pub untimed_calls: usize,
}

impl Profile {
    /// Microseconds summed over the timed records.
    pub fn total_micros(&self) -> u64 {
        self.records.iter().map(|r| u64::from(r.micros)).sum()
    }

    /// Per kernel name: (name, records, microseconds), the most time first (ties by name).
    pub fn by_kernel(&self) -> Vec<(String, usize, u64)> {
        let mut m: std::collections::BTreeMap<&str, (usize, u64)> = std::collections::BTreeMap::new();
        for r in &self.records {
            let e = m.entry(r.kernel.as_str()).or_default();
            e.0 += 1;
            e.1 += u64::from(r.micros);
        }
        let mut v: Vec<(String, usize, u64)> = m.into_iter().map(|(k, (n, us))| (k.to_owned(), n, us)).collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

/// A model file opened on a served session (see the module docs).
///
/// It holds shares of the session (its leases and libraries are the `'static`, shared kind), so
/// it can be kept anywhere (a binding's handle, a service's state); the reverse-RPC listener and
/// the channel stop with the `ServedSession`, so keep that as long as the model runs.
///
/// Fields drop in order: the programs (which name the leases by fd only) before the leases, the
/// leases before the libraries.
pub struct LoadedModel<S: Syscalls + Clone + Send + Sync + 'static> {
    steps: Vec<Step>,
    /// Per input, the view it is bound to (the programs name these leases by fd only).
    bound: Vec<Option<Binding<S>>>,
    arenas: Vec<SharedLease<S>>,
    code: SharedLease<S>,
    libraries: Vec<SharedLibrary<S>>,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
    origin: Origin,
    launches: usize,
    arena_bytes: u64,
    /// Per library, its kernel table's names (the build record's, tinygrad's kernel names).
    kernel_names: Vec<Vec<String>>,
    /// Libraries whose entry takes the DSP clock vote (their build record's power method).
    power_libraries: usize,
    /// The records as the file has them (bindings rewrite a copy into the records lease), the
    /// programs' groups of them and each library's signatures: what rebuilding the programs
    /// for a binding needs.
    records: Vec<u8>,
    groups: Vec<Group>,
    signatures: Vec<Vec<Signature>>,
}

/// A view an input is bound to: the lease (held for as long as the binding lasts) and where the
/// input's first byte is in it.
struct Binding<S: Syscalls + Clone + 'static> {
    holder: Arc<dyn LeaseHolder<S>>,
    offset: u64,
}

impl<S: Syscalls + Clone + 'static> Clone for Binding<S> {
    fn clone(&self) -> Self {
        Binding { holder: self.holder.clone(), offset: self.offset }
    }
}

impl<S: Syscalls + Clone + Send + Sync + 'static> LoadedModel<S> {
    /// Opens the model in `bytes` on `served` (see the module docs). The bytes are not kept.
    pub fn open(served: &ServedSession<S>, bytes: &[u8]) -> Result<Self, RunError> {
        Self::open_with(served, bytes, &Limits::DEFAULT)
    }

    /// Opens the model file at `path`: mapped read-only ([`MappedFile`](hexrpc_drivers::MappedFile))
    /// for the time of the open, not read into the heap.
    pub fn open_path(served: &ServedSession<S>, path: &str) -> Result<Self, RunError> {
        let file = hexrpc_drivers::MappedFile::open(path).map_err(|errno| RunError::Read { path: path.to_owned(), errno })?;
        Self::open(served, file.bytes())
    }

    /// [`open`](Self::open) with the host limits on the arenas' sizes given explicitly.
    pub fn open_with(served: &ServedSession<S>, bytes: &[u8], limits: &Limits) -> Result<Self, RunError> {
        let file = ModelFile::parse(bytes, limits)?;
        // What this build needs, checked before any system call.
        let mut signatures: Vec<Vec<Signature>> = Vec::with_capacity(file.libraries().len());
        let mut kernel_names: Vec<Vec<String>> = Vec::with_capacity(file.libraries().len());
        for (i, lib) in file.libraries().enumerate() {
            if !lib.record.programs() {
                return Err(RunError::NoPrograms { library: i });
            }
            // The parser checked that every signature parses; its own error says so if not.
            let sigs = lib.record.kernels().enumerate().map(|(k, kernel)| {
                kernel.parse_signature().map_err(|error| RunError::File(ModelError::Signature { library: i, kernel: k, error }))
            });
            signatures.push(sigs.collect::<Result<Vec<_>, _>>()?);
            kernel_names.push(lib.record.kernels().map(|k| k.name.to_owned()).collect());
        }
        let groups = group_steps(&file);
        let records = file.records();

        let open_err = |what: String| move |error: RuntimeError| RunError::Open { what, error: Box::new(error) };
        let mut libraries = Vec::with_capacity(signatures.len());
        for (i, lib) in file.libraries().enumerate() {
            let image: std::sync::Arc<[u8]> = lib.image.into();
            let l = served.open_library_shared(lib.name, image).map_err(open_err(format!("open library {i} ({})", lib.name)))?;
            libraries.push(l);
        }
        let mut arenas = Vec::with_capacity(file.arenas().len());
        let mut arena_bytes = 0u64;
        for (i, a) in file.arenas().enumerate() {
            // Within the host limits (checked by the parser), so within usize.
            let size = usize::try_from(a.size).unwrap_or(usize::MAX);
            arenas.push(
                served
                    .alloc_shared(size)
                    .map_err(|error| RunError::Open { what: format!("allocate arena {i} ({size} bytes)"), error: Box::new(error) })?,
            );
            arena_bytes += a.size;
        }
        for (n, r) in file.init().enumerate() {
            let lease = arenas[r.arena].lease_mut();
            let (off, len) = (r.offset as usize, r.len as usize);
            let done = match r.bytes {
                Some(b) => lease.write_at(off, b),
                None => lease.fill(off, len, 0),
            };
            done.map_err(|e| RunError::Open { what: format!("initial contents {n} of arena {}", r.arena), error: Box::new(e.into()) })?;
        }
        let mut code = served.alloc_shared(records.len().max(1)).map_err(|error| RunError::Open {
            what: format!("allocate the records lease ({} bytes)", records.len()),
            error: Box::new(error),
        })?;
        code.lease_mut()
            .write_at(0, records)
            .map_err(|e| RunError::Open { what: "write the records".into(), error: Box::new(e.into()) })?;

        // The programs name the leases by fd, length and id; the model owns the leases and drops
        // the programs first.
        let steps = programs(&signatures, &groups, records, arenas.iter().map(SharedLease::lease), &code)
            .map_err(|e| RunError::Records(Box::new(e)))?;
        let tensor = |io: crate::Io<'_>| Tensor {
            name: io.name.to_owned(),
            dtype: io.dtype,
            shape: io.dims().collect(),
            len: io.len,
            arena: io.arena,
            offset: io.offset,
        };
        let inputs: Vec<Tensor> = file.io().filter(|io| io.direction == Direction::Input).map(tensor).collect();
        let outputs = file.io().filter(|io| io.direction == Direction::Output).map(tensor).collect();
        let p = file.provenance();
        let origin = Origin {
            source_digest: *p.source_digest,
            source_name: p.source_name.to_owned(),
            tinygrad_version: p.tinygrad_version.to_owned(),
            hexrpc_version: p.hexrpc_version.to_owned(),
            arch: file.arch(),
        };
        Ok(LoadedModel {
            steps,
            bound: inputs.iter().map(|_| None).collect(),
            arenas,
            code,
            libraries,
            inputs,
            outputs,
            origin,
            launches: file.launches(),
            arena_bytes,
            kernel_names,
            power_libraries: file.libraries().filter(|l| l.record.power()).count(),
            records: records.to_vec(),
            groups,
            signatures,
        })
    }

    /// Every kernel name of the model's libraries (their build records' tables), library by
    /// library in table order: the names a profile's records carry.
    pub fn kernel_names(&self) -> impl Iterator<Item = &str> {
        self.kernel_names.iter().flatten().map(String::as_str)
    }

    /// (Libraries whose entry takes the session's DSP clock vote, libraries): a library built
    /// before the vote existed runs at whatever clock the DSP chose.
    pub fn power_vote_libraries(&self) -> (usize, usize) {
        (self.power_libraries, self.libraries.len())
    }

    /// The inputs, in file order.
    pub fn inputs(&self) -> &[Tensor] {
        &self.inputs
    }

    /// The outputs, in file order.
    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }

    /// Where the model came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Launches one run makes.
    pub fn launches(&self) -> usize {
        self.launches
    }

    /// FastRPC calls one run makes (one per program).
    pub fn calls_per_run(&self) -> usize {
        self.steps.len()
    }

    /// Bytes of the arenas (the model's memory on the device, weights included), and of the
    /// records lease.
    pub fn memory_bytes(&self) -> (u64, u64) {
        (self.arena_bytes, self.code.lease().len() as u64)
    }

    /// Bytes each run copies into the kernel beyond the inputs (the programs' headers and lease
    /// tables): the inputs themselves are written into shared memory, not copied by a call.
    pub fn call_bytes_per_run(&self) -> usize {
        self.steps.iter().map(|s| s.program.call_bytes()).sum()
    }

    /// Runs the model once: `inputs[i]` is input `i`'s bytes (exactly its length; an empty slice
    /// for an input bound to a view, which the kernels read where it lies), `outputs[j]`
    /// receives output `j`'s (exactly its length). With a deadline, each call is bounded by what
    /// is left of it, and a program not yet sent when it passes is not sent.
    pub fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]], deadline: Option<Duration>) -> Result<RunReport, RunError> {
        self.run_inner(inputs, outputs, deadline, None)
    }

    /// [`run`](Self::run), and where the DSP time went: each record's time as the entry measured
    /// it around the kernel call, named after its kernel (tinygrad's kernel name, from the
    /// library's build record), in run order. A program whose library does not time records (an
    /// entry built before per-record times) adds no record and counts in
    /// [`Profile::untimed_calls`]. On the bench the times are emulated (Hexagon code under
    /// qemu-hexagon: the host's clock) or simulated (the bench's library models: the cost
    /// model), never device figures.
    pub fn run_profiled(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        deadline: Option<Duration>,
    ) -> Result<(RunReport, Profile), RunError> {
        let mut profile = Profile::default();
        let report = self.run_inner(inputs, outputs, deadline, Some(&mut profile))?;
        Ok((report, profile))
    }

    fn run_inner(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        deadline: Option<Duration>,
        mut profile: Option<&mut Profile>,
    ) -> Result<RunReport, RunError> {
        if inputs.len() != self.inputs.len() {
            return Err(RunError::InputCount { want: self.inputs.len(), got: inputs.len() });
        }
        if outputs.len() != self.outputs.len() {
            return Err(RunError::OutputCount { want: self.outputs.len(), got: outputs.len() });
        }
        for ((t, b), bound) in self.inputs.iter().zip(inputs).zip(&self.bound) {
            if bound.is_some() && !b.is_empty() {
                return Err(RunError::Bound { name: t.name.clone() });
            }
            if bound.is_none() && b.len() as u64 != t.len {
                return Err(RunError::Size { name: t.name.clone(), want: t.len, got: b.len() });
            }
        }
        for (t, b) in self.outputs.iter().zip(outputs.iter()) {
            if b.len() as u64 != t.len {
                return Err(RunError::Size { name: t.name.clone(), want: t.len, got: b.len() });
            }
        }
        let start = Instant::now();
        let mut report = RunReport { launches: 0, calls: 0, dsp_micros: 0, input_bytes_copied: 0 };
        for ((t, b), bound) in self.inputs.iter().zip(inputs).zip(&self.bound) {
            if bound.is_some() {
                continue;
            }
            self.arenas[t.arena]
                .lease_mut()
                .write_at(t.offset as usize, b)
                .map_err(|e| RunError::Io { name: t.name.clone(), error: Box::new(e.into()) })?;
            report.input_bytes_copied += b.len() as u64;
        }
        let mut status = Vec::new();
        for (i, step) in self.steps.iter_mut().enumerate() {
            let lib = &self.libraries[step.library];
            let left = match deadline {
                Some(d) => match d.checked_sub(start.elapsed()).filter(|left| !left.is_zero()) {
                    Some(left) => Some(left),
                    None => return Err(RunError::Deadline { program: i }),
                },
                None => None,
            };
            let done: Result<BatchRun, RuntimeError> = match (&mut profile, left) {
                (Some(_), _) => {
                    status.resize(PROGRAM.timed_status_len(step.program.len()), 0);
                    step.program.run_timed(lib, &mut status, left)
                }
                (None, Some(left)) => step.program.run_with_deadline(lib, left),
                (None, None) => step.program.run(lib),
            };
            let done = done.map_err(|error| RunError::Run { program: i, error: Box::new(error) })?;
            if let Some(p) = profile.as_deref_mut() {
                match PROGRAM.record_micros(&status, step.program.len()) {
                    Some(times) => {
                        let names = &self.kernel_names[step.library];
                        for (r, micros) in times.iter().enumerate() {
                            let kernel = step.program.kernel_of(r).and_then(|k| names.get(k)).cloned().unwrap_or_default();
                            p.records.push(KernelTime { call: i, record: r, kernel, micros });
                        }
                    }
                    None => p.untimed_calls += 1,
                }
            }
            report.launches += done.launches;
            report.calls += 1;
            report.dsp_micros += done.dsp_micros;
        }
        for (t, b) in self.outputs.iter().zip(outputs.iter_mut()) {
            self.arenas[t.arena]
                .lease()
                .read_at(t.offset as usize, b)
                .map_err(|e| RunError::Io { name: t.name.clone(), error: Box::new(e.into()) })?;
        }
        Ok(report)
    }

    /// Binds input `input` to the view of its length at `offset` of `holder`'s lease: from the
    /// next run on, the kernels read the input there (an imported camera frame, say:
    /// [`Session::import`](hexrpc_hal::Session::import)), nothing of it is copied, and
    /// [`run`](Self::run) takes an empty slice for it. The model keeps `holder` (so the lease
    /// lives) until the input is unbound or bound again, or the model is dropped.
    ///
    /// The lease must be of the model's session and not one of the model's own; the view must
    /// fit it and keep the alignment the kernels were built for (its offset modulo
    /// [`ARENA_ALIGN`] is the input's in its arena: 0 for a file from
    /// `python -m hexrpc.export`); no record may view part of the input and part of something
    /// else. A refusal is [`RunError::Bind`] and changes nothing. Binding allocates (a copy of
    /// the records); running does not. See `docs/import.md`.
    pub fn bind_input(&mut self, input: usize, holder: Arc<dyn LeaseHolder<S>>, offset: u64) -> Result<(), RunError> {
        let t = self.inputs.get(input).ok_or(RunError::NoSuchInput { index: input, inputs: self.inputs.len() })?;
        let refuse = |refusal| RunError::Bind { name: t.name.clone(), refusal };
        let lease = holder.lease();
        if !lease.is_of(self.arenas[t.arena].session()) {
            return Err(refuse(BindRefusal::OtherSession));
        }
        if self.arenas.iter().map(SharedLease::lease).chain([self.code.lease()]).any(|l| l.fd() == lease.fd()) {
            return Err(refuse(BindRefusal::ModelsOwnLease));
        }
        let lease_len = lease.len() as u64;
        if offset.checked_add(t.len).is_none_or(|end| end > lease_len) {
            return Err(refuse(BindRefusal::Beyond { offset, len: t.len, lease_len }));
        }
        let align = ARENA_ALIGN as u64;
        if offset % align != t.offset % align {
            return Err(refuse(BindRefusal::Alignment { want: t.offset % align, got: offset % align, align }));
        }
        let mut bound = self.bound.clone();
        bound[input] = Some(Binding { holder, offset });
        self.rebuild(bound).map_err(|refusal| RunError::Bind { name: self.inputs[input].name.clone(), refusal })
    }

    /// Unbinds input `input`: from the next run on it is copied in again (its bytes given to
    /// [`run`](Self::run)). Returns what held its view, `None` if it was not bound.
    pub fn unbind_input(&mut self, input: usize) -> Result<Option<Arc<dyn LeaseHolder<S>>>, RunError> {
        if input >= self.inputs.len() {
            return Err(RunError::NoSuchInput { index: input, inputs: self.inputs.len() });
        }
        if self.bound[input].is_none() {
            return Ok(None);
        }
        let mut bound = self.bound.clone();
        let held = bound[input].take().map(|b| b.holder);
        self.rebuild(bound).map_err(|refusal| RunError::Bind { name: self.inputs[input].name.clone(), refusal })?;
        Ok(held)
    }

    /// True if input `input` is bound to a view ([`bind_input`](Self::bind_input)).
    pub fn is_bound(&self, input: usize) -> bool {
        self.bound.get(input).is_some_and(Option::is_some)
    }

    /// Makes `bound` the model's bindings: rewrites the records for them, builds the programs,
    /// writes the records into the records lease; on any refusal the model is as it was.
    fn rebuild(&mut self, bound: Vec<Option<Binding<S>>>) -> Result<(), BindRefusal> {
        let (moves, extra) = plan(&self.inputs, self.arenas.len(), bound.iter().map(|b| b.as_ref().map(|b| (b.holder.lease(), b.offset))))?;
        let records = rebind(&self.records, &moves)?;
        let leases = self.arenas.iter().map(SharedLease::lease).chain(extra.iter().copied());
        let steps = programs(&self.signatures, &self.groups, &records, leases, &self.code).map_err(|e| match e {
            RuntimeError::Batch(hexrpc_runtime::launch::BatchRefusal::TooManyLeases { .. }) => BindRefusal::TooManyLeases,
            _ => BindRefusal::Records,
        })?;
        if self.code.lease_mut().write_at(0, &records).is_err() {
            // The records lease as it was (the DSP checks each record before it runs it, so a
            // half-written lease could only fail a run, never reach past the call's leases).
            let (moves, _) =
                plan(&self.inputs, self.arenas.len(), self.bound.iter().map(|b| b.as_ref().map(|b| (b.holder.lease(), b.offset))))?;
            let _ = self.code.lease_mut().write_at(0, &rebind(&self.records, &moves)?);
            return Err(BindRefusal::Write);
        }
        // The old programs go before the leases they name.
        self.steps = steps;
        self.bound = bound;
        Ok(())
    }

    /// The index of the input named `name`.
    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|t| t.name == name)
    }

    /// The index of the output named `name`.
    pub fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|t| t.name == name)
    }
}

impl<S: Syscalls + Clone + Send + Sync + 'static> fmt::Debug for LoadedModel<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedModel")
            .field("source", &self.origin.source_name)
            .field("launches", &self.launches)
            .field("calls_per_run", &self.steps.len())
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .finish()
    }
}

/// The moves of the inputs bound as `bound` says (per input, its view's lease and offset), and
/// the leases they move to in lease-table order (after the `arenas`): one entry per distinct
/// lease, since two inputs may be bound into one import.
type Plan<'h, S> = (Vec<Move>, Vec<&'h hexrpc_hal::Lease<'static, S>>);

fn plan<'h, S: Syscalls + Clone + 'static>(
    inputs: &[Tensor],
    arenas: usize,
    bound: impl Iterator<Item = Option<(&'h hexrpc_hal::Lease<'static, S>, u64)>>,
) -> Result<Plan<'h, S>, BindRefusal> {
    let mut extra: Vec<&hexrpc_hal::Lease<'static, S>> = Vec::new();
    let mut moves = Vec::new();
    for (t, b) in inputs.iter().zip(bound) {
        let Some((lease, at)) = b else { continue };
        let k = match extra.iter().position(|l| l.fd() == lease.fd()) {
            Some(k) => k,
            None => {
                extra.push(lease);
                extra.len() - 1
            }
        };
        let index = u32::try_from(arenas + k).map_err(|_| BindRefusal::TooManyLeases)?;
        let arena = u32::try_from(t.arena).map_err(|_| BindRefusal::Records)?;
        moves.push(Move { arena, offset: t.offset, len: t.len, lease: index, at });
    }
    Ok((moves, extra))
}

/// The programs of `groups` over `records`, whose views name `leases` by index (the arenas, then
/// any bound input's lease) and which lie in `code` as they lie in `records`.
fn programs<'l, S: Syscalls + Clone + Send + Sync + 'static>(
    signatures: &[Vec<Signature>],
    groups: &[Group],
    records: &[u8],
    leases: impl Iterator<Item = &'l hexrpc_hal::Lease<'static, S>>,
    code: &SharedLease<S>,
) -> Result<Vec<Step>, RuntimeError> {
    // The programs name the leases by fd, length and id; the model owns the leases (and holds
    // every bound input's) and drops the programs first.
    let owner = &LEASES_OWNED_BY_THE_MODEL;
    let views: Vec<BufferRef<'static>> =
        leases.map(|l| BufferRef::borrowing(owner, l.fd(), l.len() as u64, 0, l.len() as u64).with_lease_id(l.lease_id())).collect();
    let mut steps = Vec::with_capacity(groups.len());
    for g in groups {
        let bytes = &records[g.start..g.end];
        let c = code.lease();
        let code_ref = BufferRef::borrowing(owner, c.fd(), c.len() as u64, g.start as u64, bytes.len() as u64).with_lease_id(c.lease_id());
        steps.push(Step { library: g.library, program: Program::new(&signatures[g.library], &views, code_ref, bytes)? });
    }
    Ok(steps)
}

/// A run of consecutive steps on one library that fits one program: its records are
/// `records[start..end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Group {
    library: usize,
    start: usize,
    end: usize,
}

/// Consecutive steps on the same library, merged while the program's capacities allow.
fn group_steps(file: &ModelFile<'_>) -> Vec<Group> {
    let base = file.records().as_ptr() as usize;
    let mut groups: Vec<(Group, usize)> = Vec::new();
    for step in file.steps() {
        // Steps follow each other with no gap (checked by the parser).
        let start = step.records.as_ptr() as usize - base;
        let end = start + step.records.len();
        match groups.last_mut() {
            Some((g, launches))
                if g.library == step.library
                    && g.end == start
                    && *launches + step.launches <= MAX_PROGRAM_LAUNCHES
                    && end - g.start <= MAX_PROGRAM_RECORD_BYTES =>
            {
                g.end = end;
                *launches += step.launches;
            }
            _ => groups.push((Group { library: step.library, start, end }, step.launches)),
        }
    }
    groups.into_iter().map(|(g, _)| g).collect()
}
