//! Failures as the bindings report them: a status (what a caller branches on), the stage that
//! failed and a message naming the cause.

use std::fmt;

use hexrpc_hal::{Cause, ErrorKind, HalError};
use hexrpc_runtime::Error;

/// What a call returns: `HEXRPC_OK` or the class of failure. The message of the last failure on
/// the calling thread names the stage and the cause (`hexrpc_last_error_message`).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum hexrpc_status {
    /// Success.
    HEXRPC_OK = 0,
    /// A required pointer argument is NULL.
    HEXRPC_ERR_NULL = 1,
    /// Not a live handle of the expected kind: closed, freed, never made, or of another kind.
    HEXRPC_ERR_HANDLE = 2,
    /// An argument is invalid (a range outside its lease, a bad signature, name or string).
    HEXRPC_ERR_INVALID = 3,
    /// The launch does not fit the kernel's signature or ABI version; nothing was sent.
    HEXRPC_ERR_REFUSED = 4,
    /// A device node, file or tool is missing or not accessible.
    HEXRPC_ERR_UNAVAILABLE = 5,
    /// The DSP restarted or a deadline passed: call `hexrpc_session_recover`, then retry.
    HEXRPC_ERR_RECOVERABLE = 6,
    /// The DSP refused the request (its error code is in the message).
    HEXRPC_ERR_DSP = 7,
    /// Anything else (a system call failed, recovery failed, ...).
    HEXRPC_ERR_FAILED = 8,
    /// hexrpc itself panicked (a bug); the call had no effect that can be relied on.
    HEXRPC_ERR_PANIC = 9,
    /// The object belongs to a session opened by the parent of this process, before a `fork()`:
    /// its DSP process is the parent's. Nothing was sent. Open a new session in the child.
    HEXRPC_ERR_FORKED = 10,
}

/// A failure: status, stage, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The class.
    pub status: hexrpc_status,
    /// The stage that failed (`session-start`, `alloc`, `library-open`, `launch-pack`, `invoke`,
    /// `recover`, `handle`, ...).
    pub stage: &'static str,
    /// The cause, readable.
    pub cause: String,
    /// The errno closest to the failure, if any.
    pub errno: Option<i32>,
    /// True when the call was refused without being sent because the session needed recovery
    /// first (the HAL's `Cause::NeedsRecovery`): nothing reached the DSP, so the same call can be
    /// made again once the session is recovered.
    pub unsent: bool,
}

impl Failure {
    /// A failure of class `status`.
    pub fn new(status: hexrpc_status, stage: &'static str, cause: impl Into<String>) -> Failure {
        Failure { status, stage, cause: cause.into(), errno: None, unsent: false }
    }
    /// A session used in a child forked after process `pid` opened it.
    pub fn forked(pid: u32) -> Failure {
        Failure::new(
            hexrpc_status::HEXRPC_ERR_FORKED,
            "session",
            format!(
                "this session was opened by process {pid} before a fork(); process {} is a child and cannot use it \
                 (its DSP process, channel and threads are the parent's; nothing was sent): open a new session in the child",
                std::process::id()
            ),
        )
    }
    /// An invalid argument.
    pub fn invalid(stage: &'static str, cause: impl Into<String>) -> Failure {
        Failure::new(hexrpc_status::HEXRPC_ERR_INVALID, stage, cause)
    }
    /// Something missing.
    pub fn unavailable(stage: &'static str, cause: impl Into<String>) -> Failure {
        Failure::new(hexrpc_status::HEXRPC_ERR_UNAVAILABLE, stage, cause)
    }
    /// Anything else.
    pub fn other(stage: &'static str, cause: impl Into<String>) -> Failure {
        Failure::new(hexrpc_status::HEXRPC_ERR_FAILED, stage, cause)
    }
    /// A launch refused before any system call.
    pub fn refused(cause: impl Into<String>) -> Failure {
        Failure::new(hexrpc_status::HEXRPC_ERR_REFUSED, "launch-pack", cause)
    }
    /// A file that could not be read.
    pub fn io(stage: &'static str, cause: impl Into<String>, errno: Option<i32>) -> Failure {
        let status = match errno {
            Some(2 | 13 | 19 | 1) => hexrpc_status::HEXRPC_ERR_UNAVAILABLE,
            _ => hexrpc_status::HEXRPC_ERR_FAILED,
        };
        Failure { status, stage, cause: cause.into(), errno, unsent: false }
    }
    /// A handle that is not live.
    pub fn handle(what: &'static str) -> Failure {
        Failure::new(
            hexrpc_status::HEXRPC_ERR_HANDLE,
            "handle",
            format!("not a live {what} handle (closed, freed, never made, or another kind)"),
        )
    }
    /// A NULL argument.
    pub fn null(what: &'static str) -> Failure {
        Failure::new(hexrpc_status::HEXRPC_ERR_NULL, "argument", format!("{what} is NULL"))
    }

    /// A HAL error: its stage, its cause, the status of its kind.
    pub fn hal(e: HalError) -> Failure {
        let status = match e.kind() {
            ErrorKind::Unavailable => hexrpc_status::HEXRPC_ERR_UNAVAILABLE,
            ErrorKind::Recoverable => hexrpc_status::HEXRPC_ERR_RECOVERABLE,
            ErrorKind::Usage => hexrpc_status::HEXRPC_ERR_INVALID,
            ErrorKind::Remote => hexrpc_status::HEXRPC_ERR_DSP,
            ErrorKind::Other => hexrpc_status::HEXRPC_ERR_FAILED,
        };
        let text = e.to_string();
        let cause = text.split_once(": ").map_or(text.as_str(), |(_, c)| c).to_string();
        Failure { status, stage: e.stage.name(), cause, errno: Some(e.errno().0), unsent: e.cause == Cause::NeedsRecovery }
    }

    /// An error of the runtime's launch path: a HAL error as [`hal`](Self::hal); a launch or
    /// batch refused before any system call is `HEXRPC_ERR_REFUSED`; a refused open (build
    /// record missing or disagreeing) is `HEXRPC_ERR_INVALID`; a batch that did not complete or a
    /// listener thread that did not start is `HEXRPC_ERR_FAILED`. The stage is the error's, the
    /// cause its text after the stage.
    pub fn runtime(e: Error) -> Failure {
        if let Some(h) = e.hal() {
            return Failure::hal(h);
        }
        let status = if matches!(e, Error::Pack(_) | Error::Batch(_)) {
            hexrpc_status::HEXRPC_ERR_REFUSED
        } else {
            match e.kind() {
                ErrorKind::Usage => hexrpc_status::HEXRPC_ERR_INVALID,
                ErrorKind::Unavailable => hexrpc_status::HEXRPC_ERR_UNAVAILABLE,
                ErrorKind::Recoverable => hexrpc_status::HEXRPC_ERR_RECOVERABLE,
                ErrorKind::Remote => hexrpc_status::HEXRPC_ERR_DSP,
                ErrorKind::Other => hexrpc_status::HEXRPC_ERR_FAILED,
            }
        };
        let stage = e.stage();
        let text = e.to_string();
        let cause = text.strip_prefix(stage).and_then(|t| t.strip_prefix(": ")).unwrap_or(&text).to_string();
        Failure { status, stage, cause, errno: None, unsent: false }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.stage, self.cause)
    }
}

impl std::error::Error for Failure {}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::runtime(e)
    }
}
