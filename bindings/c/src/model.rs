//! Model files for the bindings: a file opened on a session and run in one FastRPC call (the
//! model crate's [`LoadedModel`]), shared by the C ABI (`hexrpc_model_*`) and the Python package
//! (`hexrpc.Model`).

use std::ffi::CString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hexrpc_model::run::{LoadedModel, RunError, RunReport, Tensor};

use crate::error::{hexrpc_status, Failure};
use crate::objects::{LeaseObj, SessionObj};
use crate::seam::Seam;

/// Largest number of inputs or outputs a model has (the format's limit).
pub const MAX_IO: usize = hexrpc_model::MAX_IO;

/// A model opened on a session: the model (one run at a time) and the C strings of its tensors'
/// names, which live as long as the object.
pub struct ModelObj {
    model: Mutex<LoadedModel<Seam>>,
    input_names: Vec<CString>,
    output_names: Vec<CString>,
    /// Every kernel name of its libraries, sorted, with its C string (profiles point at them).
    kernel_names: Vec<(String, CString)>,
    session: Arc<SessionObj>,
}

/// A model error as a binding failure: a refused file or input is `HEXRPC_ERR_INVALID`
/// (nothing was sent), a run error carries the stack's own class (a DSP restart or a passed
/// deadline is `HEXRPC_ERR_RECOVERABLE`).
pub fn failure(e: RunError) -> Failure {
    match e {
        RunError::Run { program, error } => {
            let mut f = Failure::runtime(*error);
            f.cause = format!("program {program}: {}", f.cause);
            f
        }
        RunError::Io { name, error } => {
            let mut f = Failure::runtime(*error);
            f.cause = format!("{name:?}: {}", f.cause);
            f
        }
        RunError::Open { what, error } => {
            let mut f = Failure::runtime(*error);
            f.cause = format!("{what}: {}", f.cause);
            f
        }
        RunError::Read { path, errno } => Failure::io("model-open", format!("{path}: {errno}"), Some(errno.0)),
        RunError::Deadline { .. } => Failure::new(hexrpc_status::HEXRPC_ERR_RECOVERABLE, "model-run", e.to_string()),
        e @ (RunError::File(_) | RunError::NoPrograms { .. } | RunError::Records(_)) => Failure::invalid("model-open", e.to_string()),
        e @ (RunError::Bind { .. } | RunError::NoSuchInput { .. }) => Failure::invalid("model-bind", e.to_string()),
        e => Failure::invalid("model-run", e.to_string()),
    }
}

fn names(tensors: &[Tensor]) -> Vec<CString> {
    // The format's names are UTF-8 and may hold a NUL byte, which C cannot: it is replaced.
    tensors.iter().map(|t| CString::new(t.name.replace('\0', "\u{fffd}")).unwrap_or_default()).collect()
}

impl ModelObj {
    /// Opens the model in `bytes` on `session`.
    pub fn open(session: &Arc<SessionObj>, bytes: &[u8]) -> Result<ModelObj, Failure> {
        session.check()?;
        Self::wrap(session, LoadedModel::open(session.served(), bytes).map_err(failure)?)
    }

    /// Opens the model file at `path` (mapped read-only while it is opened).
    pub fn open_path(session: &Arc<SessionObj>, path: &str) -> Result<ModelObj, Failure> {
        session.check()?;
        Self::wrap(session, LoadedModel::open_path(session.served(), path).map_err(failure)?)
    }

    fn wrap(session: &Arc<SessionObj>, model: LoadedModel<Seam>) -> Result<ModelObj, Failure> {
        let (input_names, output_names) = (names(model.inputs()), names(model.outputs()));
        let mut kernel_names: Vec<(String, CString)> =
            model.kernel_names().map(|k| (k.to_owned(), CString::new(k.replace('\0', "\u{fffd}")).unwrap_or_default())).collect();
        kernel_names.sort();
        kernel_names.dedup_by(|a, b| a.0 == b.0);
        Ok(ModelObj { model: Mutex::new(model), input_names, output_names, kernel_names, session: session.clone() })
    }

    /// The session it was opened on.
    pub fn session(&self) -> &Arc<SessionObj> {
        &self.session
    }

    /// Runs `f` on the model (one caller at a time).
    pub fn with<R>(&self, f: impl FnOnce(&mut LoadedModel<Seam>) -> R) -> R {
        let mut m = self.model.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut m)
    }

    /// A kernel's name as a C string that lives as long as the model (`None` for a name the
    /// model's libraries do not have).
    pub fn kernel_name(&self, name: &str) -> Option<&CString> {
        self.kernel_names.binary_search_by(|(k, _)| k.as_str().cmp(name)).ok().map(|i| &self.kernel_names[i].1)
    }

    /// Input `i`'s name as a C string.
    pub fn input_name(&self, i: usize) -> Option<&CString> {
        self.input_names.get(i)
    }

    /// Output `i`'s name as a C string.
    pub fn output_name(&self, i: usize) -> Option<&CString> {
        self.output_names.get(i)
    }

    /// Binds input `input` to `len(input)` bytes at `offset` of `lease` (offset relative to the
    /// lease object, as its views are): see [`LoadedModel::bind_input`]. The model holds the
    /// lease object until the input is unbound or bound again, or the model is closed.
    pub fn bind_input(&self, input: usize, lease: Arc<LeaseObj>, offset: usize) -> Result<(), Failure> {
        self.session.check()?;
        if !Arc::ptr_eq(lease.session(), &self.session) {
            return Err(Failure::invalid("model-bind", "the lease is of another session than the model's".to_string()));
        }
        self.with(|m| {
            let t = m.inputs().get(input).ok_or_else(|| failure(RunError::NoSuchInput { index: input, inputs: m.inputs().len() }))?;
            // Within the lease object (a sub-allocation is a range of its arena's lease, which
            // the model checks the view against).
            if (offset as u64).checked_add(t.len).is_none_or(|end| end > lease.len() as u64) {
                return Err(Failure::invalid(
                    "model-bind",
                    format!("input {:?} ({} bytes) at offset {offset} does not fit the lease of {} bytes", t.name, t.len, lease.len()),
                ));
            }
            let at = (lease.base_offset() + offset) as u64;
            m.bind_input(input, lease, at).map_err(failure)
        })
    }

    /// Unbinds input `input` (see [`LoadedModel::unbind_input`]); true if it was bound. Refused
    /// in a child forked after the session was opened, as a bind is: the records it rewrites are
    /// in memory the parent's model shares.
    pub fn unbind_input(&self, input: usize) -> Result<bool, Failure> {
        self.session.check()?;
        self.with(|m| m.unbind_input(input).map(|held| held.is_some())).map_err(failure)
    }

    /// True if input `input` is bound to a lease.
    pub fn is_bound(&self, input: usize) -> bool {
        self.with(|m| m.is_bound(input))
    }

    /// One run (see [`LoadedModel::run`]).
    pub fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]], deadline: Option<Duration>) -> Result<RunReport, Failure> {
        self.session.check()?;
        self.with(|m| m.run(inputs, outputs, deadline)).map_err(failure)
    }

    /// One run with each record's DSP time (see [`LoadedModel::run_profiled`]).
    pub fn run_profiled(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        deadline: Option<Duration>,
    ) -> Result<(RunReport, hexrpc_model::run::Profile), Failure> {
        self.session.check()?;
        self.with(|m| m.run_profiled(inputs, outputs, deadline)).map_err(failure)
    }
}
