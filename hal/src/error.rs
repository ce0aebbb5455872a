use core::fmt;

use hexrpc_drivers::{aee, Errno, Error as SysError};

/// The init stage (or the session operation) an error belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Stage {
    /// Opening the ION device node.
    IonOpen,
    /// Reading the DSP shell and staging it in an ION buffer.
    ShellStaged,
    /// Opening the FastRPC device node, GETINFO for the channel, CONTROL kalloc.
    ChannelOpen,
    /// INIT: creating the user process on the DSP.
    ProcessCreate,
    /// Registering the reverse-RPC listener (handle 3, init2).
    ListenerAttach,
    /// Allocating, sharing or mapping an ION buffer.
    Alloc,
    /// Opening a library on the DSP.
    LibraryOpen,
    /// Calling into a library.
    Invoke,
    /// Closing a library.
    LibraryClose,
    /// Rebuilding the DSP process after a restart or a timeout.
    Recover,
}

impl Stage {
    /// A short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::IonOpen => "ion-open",
            Stage::ShellStaged => "shell-staged",
            Stage::ChannelOpen => "channel-open",
            Stage::ProcessCreate => "process-create",
            Stage::ListenerAttach => "listener-attach",
            Stage::Alloc => "alloc",
            Stage::LibraryOpen => "library-open",
            Stage::Invoke => "invoke",
            Stage::LibraryClose => "library-close",
            Stage::Recover => "recover",
        }
    }
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Cause {
    /// A system call failed with this errno.
    Os(Errno),
    /// The DSP (or the driver, as a positive return) answered with this AEE code.
    Dsp(i32),
    /// The DSP restarted: the session needs [`recover`](crate::Session::recover).
    DspRestart,
    /// The call did not finish before its deadline; it was interrupted and the session needs
    /// recovery.
    Timeout,
    /// The session needs recovery before it can be used.
    NeedsRecovery,
    /// Recovery failed; the session cannot be used any more.
    Failed,
    /// The shell file is not a usable ELF (too short, not ELF, not Hexagon).
    BadShell,
    /// A size or count is beyond what the board or the ABI allows.
    TooLarge,
    /// An argument is invalid (a view out of range, a bad library name, ...).
    Invalid,
    /// A fixed-capacity table is full (libraries).
    Full,
    /// The image registry (the reverse file service) refused the library image.
    Registry,
    /// The reverse-RPC listener of the session stopped (the session cannot load libraries, and
    /// its channel may be retired): `recover()` once a listener serves it again.
    ListenerStopped,
}

impl Cause {
    /// Turns a drivers-level error into a cause, decoding positive returns.
    pub fn from_sys(e: SysError) -> Cause {
        if e.is_dsp_restart() {
            return Cause::DspRestart;
        }
        match e {
            SysError::Os(e) => Cause::Os(e),
            SysError::Returned(v) => Cause::Dsp(v),
            SysError::Invalid => Cause::Invalid,
        }
    }
}

/// The error of every HAL operation: the stage and the cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HalError {
    /// Where it happened.
    pub stage: Stage,
    /// What happened.
    pub cause: Cause,
}

/// Coarse classification for generic callers (retry, recover, give up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ErrorKind {
    /// A device node or file is missing or not accessible: check the board and permissions.
    Unavailable,
    /// The DSP restarted or timed out: call `recover()`.
    Recoverable,
    /// The caller passed something invalid.
    Usage,
    /// The DSP refused the request.
    Remote,
    /// Anything else.
    Other,
}

impl HalError {
    pub(crate) const fn new(stage: Stage, cause: Cause) -> HalError {
        HalError { stage, cause }
    }

    pub(crate) fn sys(stage: Stage, e: SysError) -> HalError {
        HalError { stage, cause: Cause::from_sys(e) }
    }

    pub(crate) fn os(stage: Stage, e: Errno) -> HalError {
        HalError { stage, cause: Cause::Os(e) }
    }

    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        match self.cause {
            Cause::Os(Errno::ENOENT | Errno::EACCES | Errno::ENODEV | Errno::EPERM)
                if matches!(self.stage, Stage::IonOpen | Stage::ShellStaged | Stage::ChannelOpen) =>
            {
                ErrorKind::Unavailable
            }
            Cause::DspRestart | Cause::Timeout | Cause::NeedsRecovery | Cause::ListenerStopped => ErrorKind::Recoverable,
            Cause::Invalid | Cause::TooLarge | Cause::Full => ErrorKind::Usage,
            Cause::Dsp(_) => ErrorKind::Remote,
            _ => ErrorKind::Other,
        }
    }

    /// The errno closest to this error (for C callers and exit statuses).
    pub fn errno(&self) -> Errno {
        match self.cause {
            Cause::Os(e) => e,
            Cause::Dsp(_) => Errno::EIO,
            Cause::DspRestart => Errno::ECONNRESET,
            Cause::Timeout => Errno::ETIMEDOUT,
            Cause::NeedsRecovery | Cause::Failed | Cause::ListenerStopped => Errno::ENOTCONN,
            Cause::BadShell => Errno::ENOEXEC,
            Cause::TooLarge => Errno::EFBIG,
            Cause::Invalid => Errno::EINVAL,
            Cause::Full => Errno::ENOSPC,
            Cause::Registry => Errno::EBUSY,
        }
    }
}

impl fmt::Display for HalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.stage.name())?;
        match self.cause {
            Cause::Os(e) => write!(f, "{e}"),
            Cause::Dsp(code) => match aee::name(code) {
                Some(n) => write!(f, "the DSP answered {code} ({n}: {})", aee::description(code).unwrap_or("")),
                None => write!(f, "the DSP answered {code}"),
            },
            Cause::DspRestart => write!(f, "the DSP restarted; recover() the session"),
            Cause::Timeout => write!(f, "the call passed its deadline and was interrupted; recover() the session"),
            Cause::NeedsRecovery => write!(f, "the session needs recover() first"),
            Cause::Failed => write!(f, "recovery failed; the session is unusable"),
            Cause::BadShell => write!(f, "the DSP shell is not a Hexagon ELF file"),
            Cause::TooLarge => write!(f, "size beyond the board's or the ABI's limit"),
            Cause::Invalid => write!(f, "invalid argument"),
            Cause::Full => write!(f, "fixed-capacity table is full"),
            Cause::Registry => write!(f, "the reverse file service refused the library image"),
            Cause::ListenerStopped => write!(f, "the reverse-RPC listener stopped; recover() once one serves the session again"),
        }
    }
}

impl core::error::Error for HalError {}
