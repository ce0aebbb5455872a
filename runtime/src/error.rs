//! The one error of the launch path: starting a served session, opening kernels, launching them
//! one at a time or in batches, recovering.
//!
//! Every public call a service walks returns [`Error`]. It says where the call failed
//! ([`stage`](Error::stage)), what a generic caller should do about it ([`kind`](Error::kind):
//! the HAL's [`ErrorKind`]), and keeps the precise cause as a typed value inside it, so a caller
//! that needs to can still match on it:
//!
//! ```
//! use hexrpc_runtime::launch::PackError;
//! use hexrpc_runtime::{Error, ErrorKind};
//!
//! let e = Error::from(PackError::BufferCount { expected: 2, got: 1 });
//! assert_eq!((e.kind(), e.stage()), (ErrorKind::Usage, "launch-pack"));
//! assert!(matches!(e, Error::Pack(PackError::BufferCount { got: 1, .. })));
//! assert_eq!(e.to_string(), "launch-pack: the signature has 2 buffers, 1 given");
//! ```
//!
//! It is `Copy`, small, and allocation-free (no_std).

use core::fmt;

use hexrpc_hal::{ErrorKind, HalError, Stage};

use crate::launch::{BatchFailure, BatchRefusal, PackError};
use crate::open::OpenRefusal;

/// Why a launch-path call failed. See the [module docs](self).
///
/// Its `Display` is `stage: reason`; [`stage`](Error::stage) is the first part alone.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// A launch was refused before any system call: its views or scalars do not fit the
    /// kernel's signature or the ABI version (stage `launch-pack`, kind
    /// [`Usage`](ErrorKind::Usage)).
    Pack(PackError),
    /// A batch launch was refused before any system call: it does not fit the kernel table or
    /// the batch's capacity, or the batch is empty (stage `launch-pack`, kind
    /// [`Usage`](ErrorKind::Usage)).
    Batch(BatchRefusal),
    /// A batch was sent but did not complete as sent: a kernel failed, or the library did not
    /// run it (stage `batch`, kind [`Other`](ErrorKind::Other)).
    BatchRun(BatchFailure),
    /// A kernel was not opened: its library's build record is missing, unreadable, or disagrees
    /// with the signature or ABI given; nothing was opened (stage `library-open`, kind
    /// [`Usage`](ErrorKind::Usage)).
    Open(OpenRefusal),
    /// A call into the HAL failed: the error names the stage (`session-start` stages, `alloc`,
    /// `library-open`, `invoke`, `recover`, ...) and the cause; its kind is the HAL's (a DSP
    /// restart or a passed deadline is [`Recoverable`](ErrorKind::Recoverable): call
    /// `recover()`).
    Hal(HalError),
    /// The reverse-RPC listener thread could not be started (std; kind
    /// [`Other`](ErrorKind::Other)).
    #[cfg(feature = "std")]
    Thread(ThreadError),
}

impl Error {
    /// The coarse kind, for generic callers (retry, recover, fix the call, give up).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Pack(_) | Error::Batch(_) | Error::Open(_) => ErrorKind::Usage,
            Error::BatchRun(_) => ErrorKind::Other,
            Error::Hal(e) => e.kind(),
            #[cfg(feature = "std")]
            Error::Thread(_) => ErrorKind::Other,
        }
    }

    /// The short name of the stage that failed: `launch-pack` for a refused launch or batch,
    /// `batch` for a batch that did not complete, `library-open` for a refused open,
    /// `session-start` or `recover` for a listener thread that did not start, otherwise the
    /// HAL's stage.
    pub fn stage(&self) -> &'static str {
        match self {
            Error::Pack(_) | Error::Batch(_) => "launch-pack",
            Error::BatchRun(_) => "batch",
            Error::Open(_) => Stage::LibraryOpen.name(),
            Error::Hal(e) => e.stage.name(),
            #[cfg(feature = "std")]
            Error::Thread(t) => t.stage(),
        }
    }

    /// The HAL error, if a call into the HAL failed.
    pub fn hal(&self) -> Option<HalError> {
        match self {
            Error::Hal(e) => Some(*e),
            _ => None,
        }
    }

    /// True if the call was refused before any system call (a launch or batch that does not fit,
    /// or a kernel whose build record disagrees): nothing was sent, nothing needs recovery.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Error::Pack(_) | Error::Batch(_) | Error::Open(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The HAL's own text already starts with its stage.
            Error::Hal(e) => write!(f, "{e}"),
            Error::Pack(e) => write!(f, "{}: {e}", self.stage()),
            Error::Batch(e) => write!(f, "{}: {e}", self.stage()),
            Error::BatchRun(e) => write!(f, "{}: {e}", self.stage()),
            Error::Open(e) => write!(f, "{}: {e}", self.stage()),
            #[cfg(feature = "std")]
            Error::Thread(e) => write!(f, "{}: {e}", self.stage()),
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Pack(e) => Some(e),
            Error::Batch(e) => Some(e),
            Error::BatchRun(e) => Some(e),
            Error::Open(e) => Some(e),
            Error::Hal(e) => Some(e),
            #[cfg(feature = "std")]
            Error::Thread(e) => Some(e),
        }
    }
}

impl From<PackError> for Error {
    fn from(e: PackError) -> Self {
        Error::Pack(e)
    }
}

impl From<BatchRefusal> for Error {
    fn from(e: BatchRefusal) -> Self {
        Error::Batch(e)
    }
}

impl From<BatchFailure> for Error {
    fn from(e: BatchFailure) -> Self {
        Error::BatchRun(e)
    }
}

impl From<OpenRefusal> for Error {
    fn from(e: OpenRefusal) -> Self {
        Error::Open(e)
    }
}

impl From<HalError> for Error {
    fn from(e: HalError) -> Self {
        Error::Hal(e)
    }
}

#[cfg(feature = "std")]
impl From<ThreadError> for Error {
    fn from(e: ThreadError) -> Self {
        Error::Thread(e)
    }
}

/// A reverse-RPC listener thread that could not be started: what the OS said, kept as the
/// `io::Error`'s kind and raw OS error so the error stays `Copy` (std).
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadError {
    /// The I/O error's kind.
    pub kind: std::io::ErrorKind,
    /// The OS error number, if the OS gave one (`EAGAIN` when out of threads).
    pub raw_os_error: Option<i32>,
    /// True if the thread was to replace an ended listener in `recover()` (stage `recover`);
    /// false when starting the session (stage `session-start`).
    pub recovering: bool,
}

#[cfg(feature = "std")]
impl ThreadError {
    /// The error of a listener thread that did not start; `recovering` as in the field.
    pub fn new(e: &std::io::Error, recovering: bool) -> ThreadError {
        ThreadError { kind: e.kind(), raw_os_error: e.raw_os_error(), recovering }
    }

    /// `recover` or `session-start`.
    pub fn stage(&self) -> &'static str {
        if self.recovering {
            Stage::Recover.name()
        } else {
            "session-start"
        }
    }

    /// The I/O error again (for callers that want one).
    pub fn io_error(&self) -> std::io::Error {
        match self.raw_os_error {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::from(self.kind),
        }
    }
}

#[cfg(feature = "std")]
impl fmt::Display for ThreadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.recovering { "a new reverse-RPC listener thread" } else { "the reverse-RPC listener thread" };
        write!(f, "starting {what}: {}", self.io_error())
    }
}

#[cfg(feature = "std")]
impl core::error::Error for ThreadError {}

#[cfg(feature = "defmt")]
#[cfg(feature = "std")]
impl defmt::Format for ThreadError {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "ThreadError {{ raw_os_error: {}, recovering: {=bool} }}", self.raw_os_error, self.recovering)
    }
}

const _: () = assert!(
    core::mem::size_of::<Error>() <= core::mem::size_of::<HalError>() + 8,
    "Error stays about as small as the HalError it carries (returned by value on every launch)"
);

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use hexrpc_hal::Cause;

    use super::*;
    use crate::launch::AbiVersion;

    #[test]
    fn stage_kind_and_text_follow_the_cause() {
        let hal = HalError { stage: Stage::Invoke, cause: Cause::Timeout };
        let cases: [(Error, &str, ErrorKind, &str); 5] = [
            (PackError::NoFd { buffer: 1 }.into(), "launch-pack", ErrorKind::Usage, "launch-pack: buffer 1 has no share fd"),
            (BatchRefusal::Empty.into(), "launch-pack", ErrorKind::Usage, "launch-pack: the batch is empty"),
            (
                BatchFailure::NotRun.into(),
                "batch",
                ErrorKind::Other,
                "batch: the library did not run the batch (its entry has no batch support)",
            ),
            (
                OpenRefusal::NoRecord.into(),
                "library-open",
                ErrorKind::Usage,
                "library-open: the library carries no hexrpc build record: give its signature and ABI",
            ),
            (
                hal.into(),
                "invoke",
                ErrorKind::Recoverable,
                "invoke: the call passed its deadline and was interrupted; recover() the session",
            ),
        ];
        for (e, stage, kind, text) in cases {
            assert_eq!((e.stage(), e.kind(), e.to_string().as_str()), (stage, kind, text));
            assert!(core::error::Error::source(&e).is_some());
            assert_eq!(e.hal().is_some(), matches!(e, Error::Hal(_)));
            assert_eq!(e.is_refusal(), kind == ErrorKind::Usage);
        }
        let m = Error::from(OpenRefusal::Mismatch { recorded_abi: AbiVersion::V1 });
        assert!(m.to_string().starts_with("library-open: the library's build record names another signature or ABI (V1)"), "{m}");
    }

    #[test]
    fn a_thread_failure_keeps_the_os_error() {
        let io = std::io::Error::from_raw_os_error(11);
        let start = Error::from(ThreadError::new(&io, false));
        let again = Error::from(ThreadError::new(&io, true));
        assert_eq!((start.stage(), again.stage(), start.kind()), ("session-start", "recover", ErrorKind::Other));
        assert_eq!(start.to_string(), std::format!("session-start: starting the reverse-RPC listener thread: {io}"));
        assert_eq!(again.to_string(), std::format!("recover: starting a new reverse-RPC listener thread: {io}"));
        assert_eq!(ThreadError::new(&io, true).io_error().raw_os_error(), Some(11));
        assert_ne!(start, again);
    }
}
