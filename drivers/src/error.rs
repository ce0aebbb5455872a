use core::fmt;

use crate::Errno;

/// What a typed call of this crate can fail with.
///
/// The downstream adsprpc driver returns three kinds of results from one ioctl: `-1` with an
/// errno (a local failure), `0` (success) and a *positive* value (an error code from the DSP, or
/// `EBADF` (9) while the fd is being closed, `39` after SMMU faults, `104` after a DSP restart).
/// Both failure kinds are kept apart here so that a caller cannot take a positive result for
/// success.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error {
    /// The system call failed with this errno.
    Os(Errno),
    /// The ioctl returned this positive value (a DSP AEE code or the driver's positive errno).
    Returned(i32),
    /// The call was refused before reaching the kernel: the arguments do not fit the ABI
    /// (too many arguments for the scalars word, a length over the ABI's width, ...).
    Invalid,
}

impl Error {
    /// The errno this error corresponds to: the OS errno, the positive return read as an errno
    /// (the driver's own positive values are errnos), or `EINVAL` for a refused call.
    pub const fn errno(self) -> Errno {
        match self {
            Error::Os(e) => e,
            Error::Returned(v) => Errno(v),
            Error::Invalid => Errno::EINVAL,
        }
    }

    /// True if this is the driver telling us the DSP restarted: downstream +`ECONNRESET`
    /// returned, or `ECONNRESET` as errno at send time; upstream `EPIPE` (the channel's rpmsg
    /// device went away: calls in flight and every later call on that descriptor). The
    /// downstream driver never returns `EPIPE`.
    pub const fn is_dsp_restart(self) -> bool {
        matches!(self, Error::Returned(104) | Error::Os(Errno::ECONNRESET) | Error::Os(Errno::EPIPE))
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Self {
        Error::Os(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Os(e) => write!(f, "system call failed: {e}"),
            Error::Returned(v) => match crate::aee::name(*v) {
                Some(n) => write!(f, "ioctl returned {v} ({n})"),
                None => write!(f, "ioctl returned {v}"),
            },
            Error::Invalid => write!(f, "arguments do not fit the kernel ABI"),
        }
    }
}

impl core::error::Error for Error {}

/// Turns a raw ioctl result into `Ok(())` for 0 and [`Error::Returned`] for anything positive.
pub(crate) fn check_rc(rc: Result<i32, Errno>) -> Result<(), Error> {
    match rc {
        Ok(0) => Ok(()),
        Ok(v) => Err(Error::Returned(v)),
        Err(e) => Err(Error::Os(e)),
    }
}
