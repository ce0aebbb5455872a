//! Why the simulated DSP restarted: every restart the bench makes (a test's request, a Rust
//! library model that crashes, an executor shell that ran past the per-call limit, faulted or
//! broke the protocol) is recorded with its reason as a typed value, so a caller that sees a
//! DSP restart (`ECONNRESET` / +104, `EPIPE` upstream) can tell its user why
//! ([`Bench::last_restart`], [`Bench::restart_count`]).
//!
//! The reasons are the bench's own: on a device the kernel only says that the DSP restarted
//! (a subsystem restart notification), never which call or library caused it.

use std::fmt;
use std::time::Duration;

use crate::config::CALL_LIMIT_ENV;
use crate::executor::ShellEnd;
use crate::Bench;

/// What the executor shell was doing for a library when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShellStep {
    /// Loading the library (relocations, then its constructors).
    Load,
    /// Running an invoke of the library's entry (the kernel).
    Invoke,
    /// Unloading the library (its destructors).
    Close,
}

/// How the executor shell failed, when it did not merely run out of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShellFault {
    /// The shell (qemu-hexagon) ended: a signal (a fault of the guest code, which qemu re-raises
    /// on itself: `SIGSEGV`, `SIGBUS`, `SIGILL`, ...) or an exit status, with what it printed
    /// last.
    Ended(ShellEnd),
    /// The shell broke the wire protocol between the bench and it (a forged or malformed frame,
    /// an answer of the wrong kind).
    Protocol(String),
}

impl fmt::Display for ShellFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShellFault::Ended(end) => write!(f, "the DSP shell (qemu-hexagon) ended with {end}"),
            ShellFault::Protocol(detail) => write!(f, "the DSP shell broke the bench's protocol: {detail}"),
        }
    }
}

/// The kind of a [`RestartReason`], for callers that only sort reasons (a binding's exception
/// class, a counter per kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RestartKind {
    /// [`RestartReason::CallLimit`].
    CallLimit,
    /// [`RestartReason::Fault`].
    Fault,
    /// [`RestartReason::LoadFailure`].
    LoadFailure,
    /// [`RestartReason::Requested`].
    Requested,
    /// [`RestartReason::ModelKernel`].
    ModelKernel,
}

/// Why the simulated DSP restarted (every DSP process ended). The `Display` text is meant for a
/// user: it names the library and, for the per-call limit, the figure and how to change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartReason {
    /// The executor shell did not answer within the bench's per-call limit
    /// ([`BenchConfig::executor_timeout`](crate::BenchConfig::executor_timeout), set by
    /// `HEXRPC_BENCH_CALL_LIMIT_MS`), so it was killed: a kernel that runs too long (or
    /// forever), or a constructor / destructor that does.
    CallLimit {
        /// The limit that was passed.
        limit: Duration,
        /// The library, under the name the DSP loaded it.
        library: String,
        /// What the shell was doing.
        step: ShellStep,
    },
    /// The executor shell ended or broke the protocol while running an invoke (a kernel
    /// faulted) or unloading a library (a destructor faulted).
    Fault {
        /// The library, under the name the DSP loaded it.
        library: String,
        /// [`ShellStep::Invoke`] or [`ShellStep::Close`].
        step: ShellStep,
        /// How it failed.
        fault: ShellFault,
    },
    /// The executor shell ended or broke the protocol while loading a library (a constructor
    /// faulted, or the loader crashed on the image).
    LoadFailure {
        /// The library, under the name the DSP was asked to load.
        library: String,
        /// How it failed.
        fault: ShellFault,
    },
    /// [`Bench::restart_dsp`] (a test or a tool asked for it).
    Requested,
    /// A Rust library model's kernel restarted the DSP
    /// ([`KernelCall::restart_dsp`](crate::KernelCall::restart_dsp)), as a crash would.
    ModelKernel {
        /// The library, under the name the DSP loaded it.
        library: String,
    },
}

impl RestartReason {
    /// The reason's kind.
    pub fn kind(&self) -> RestartKind {
        match self {
            RestartReason::CallLimit { .. } => RestartKind::CallLimit,
            RestartReason::Fault { .. } => RestartKind::Fault,
            RestartReason::LoadFailure { .. } => RestartKind::LoadFailure,
            RestartReason::Requested => RestartKind::Requested,
            RestartReason::ModelKernel { .. } => RestartKind::ModelKernel,
        }
    }

    /// The library whose call caused it, if one did.
    pub fn library(&self) -> Option<&str> {
        match self {
            RestartReason::CallLimit { library, .. }
            | RestartReason::Fault { library, .. }
            | RestartReason::LoadFailure { library, .. }
            | RestartReason::ModelKernel { library } => Some(library),
            RestartReason::Requested => None,
        }
    }
}

impl fmt::Display for RestartReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestartReason::CallLimit { limit, library, step } => {
                let what = match step {
                    ShellStep::Load => format!("loading library `{library}` (its constructors)"),
                    ShellStep::Invoke => format!("the kernel of library `{library}`"),
                    ShellStep::Close => format!("closing library `{library}` (its destructors)"),
                };
                write!(f, "{what} ran past the bench's per-call limit of {} ms ({CALL_LIMIT_ENV})", limit.as_millis())
            }
            RestartReason::Fault { library, step, fault } => {
                let what = match step {
                    ShellStep::Close => format!("closing library `{library}` (its destructors)"),
                    _ => format!("the kernel of library `{library}`"),
                };
                write!(f, "{what} faulted: {fault}")
            }
            RestartReason::LoadFailure { library, fault } => write!(f, "loading library `{library}` failed: {fault}"),
            RestartReason::Requested => f.write_str("a DSP restart was requested (Bench::restart_dsp)"),
            RestartReason::ModelKernel { library } => {
                write!(f, "the bench model of library `{library}` restarted the DSP, as a crash would")
            }
        }
    }
}

/// The bench's record of restarts (in its state).
#[derive(Debug, Default)]
pub(crate) struct RestartLog {
    count: u64,
    last: Option<RestartReason>,
}

impl RestartLog {
    /// Records one restart.
    pub(crate) fn record(&mut self, reason: RestartReason) {
        self.count += 1;
        self.last = Some(reason);
    }
}

impl Bench {
    /// Why the DSP restarted last, if it ever did.
    pub fn last_restart(&self) -> Option<RestartReason> {
        self.lock().restarts.last.clone()
    }

    /// How many times the DSP restarted (whatever the reason; [`Bench::restart_dsp`] included).
    pub fn restart_count(&self) -> u64 {
        self.lock().restarts.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::ShellStatus;

    #[test]
    fn texts_name_the_library_the_limit_and_the_variable() {
        let r = RestartReason::CallLimit { limit: Duration::from_secs(10), library: "spin-3".into(), step: ShellStep::Invoke };
        assert_eq!(
            r.to_string(),
            "the kernel of library `spin-3` ran past the bench's per-call limit of 10000 ms (HEXRPC_BENCH_CALL_LIMIT_MS)"
        );
        assert_eq!(r.kind(), RestartKind::CallLimit);
        assert_eq!(r.library(), Some("spin-3"));
        let end = ShellEnd { status: ShellStatus::Signal(11), last_output: "qemu: uncaught target signal 11".into() };
        let r = RestartReason::Fault { library: "bump-4".into(), step: ShellStep::Invoke, fault: ShellFault::Ended(end) };
        assert_eq!(
            r.to_string(),
            "the kernel of library `bump-4` faulted: the DSP shell (qemu-hexagon) ended with signal 11 (SIGSEGV): qemu: uncaught \
             target signal 11"
        );
        let r = RestartReason::LoadFailure { library: "ctor-1".into(), fault: ShellFault::Protocol("a frame tagged 1".into()) };
        assert_eq!(r.to_string(), "loading library `ctor-1` failed: the DSP shell broke the bench's protocol: a frame tagged 1");
        assert_eq!(RestartReason::Requested.library(), None);
        assert_eq!(RestartReason::Requested.kind(), RestartKind::Requested);
    }

    #[test]
    fn the_log_counts_and_keeps_the_last() {
        let mut log = RestartLog::default();
        assert_eq!((log.count, &log.last), (0, &None));
        log.record(RestartReason::Requested);
        log.record(RestartReason::ModelKernel { library: "m".into() });
        assert_eq!(log.count, 2);
        assert_eq!(log.last.as_ref().map(RestartReason::kind), Some(RestartKind::ModelKernel));
    }
}
