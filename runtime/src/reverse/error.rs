//! Why a reverse request was refused, and the AEE code the DSP receives for it.

use core::fmt;

use hexrpc_drivers::aee;

/// Why the reverse service refused a request. Every variant maps to one AEE code
/// ([`aee`](RequestError::aee)) sent back as the request's result; the loop then continues.
///
/// The variant (not only the code) is kept so that metrics can count refusals per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RequestError {
    /// The request's shape or a field is wrong: counts that do not match the method, a length
    /// that runs past the received bytes, a string without its NUL, handles in the scalars word.
    BadParm,
    /// A size is over a limit: payload larger than the fetch capacity, a read larger than the
    /// per-request cap, a reply that does not fit the reply buffer, a map over the budget.
    BadSize,
    /// The module exists but does not offer this method (or it is deliberately not served).
    Unsupported,
    /// The handle names no open module.
    NoSuchModule,
    /// The path is allowed but no such file exists in the allowed places.
    NoSuchFile,
    /// The path is refused by the policy (traversal, outside the allowlist, a symbolic link,
    /// not a regular file).
    NotAllowed,
    /// A write mode was asked for; the service only opens for reading.
    ReadOnly,
    /// The FILE handle is not one this session handed out.
    BadFile,
    /// The table of virtual handles (files, modules or maps) is full.
    OutOfHandles,
    /// A seek target is negative, past the end of the file or overflows.
    Seek,
    /// The host read failed.
    Read,
    /// The per-file byte budget of an open file is used up.
    FileBudget,
    /// The kernel refused a DSP map request.
    Mmap,
    /// An unmap request names no map this session made.
    NoSuchMap,
    /// A module close names no open module.
    InvalidHandle,
    /// An apps_mem map asked for a heap flag the service never forwards
    /// ([`REFUSED_MAP_FLAGS`](super::REFUSED_MAP_FLAGS)): the driver would keep that memory
    /// outside the session.
    MapFlags,
}

impl RequestError {
    /// Number of variants (the size of per-kind metric arrays).
    pub const COUNT: usize = 16;

    /// Every variant, in [`index`](Self::index) order.
    pub const ALL: [RequestError; Self::COUNT] = [
        RequestError::BadParm,
        RequestError::BadSize,
        RequestError::Unsupported,
        RequestError::NoSuchModule,
        RequestError::NoSuchFile,
        RequestError::NotAllowed,
        RequestError::ReadOnly,
        RequestError::BadFile,
        RequestError::OutOfHandles,
        RequestError::Seek,
        RequestError::Read,
        RequestError::FileBudget,
        RequestError::Mmap,
        RequestError::NoSuchMap,
        RequestError::InvalidHandle,
        RequestError::MapFlags,
    ];

    /// The AEE code (host form, no DSP offset) sent back as the result.
    pub const fn aee(self) -> i32 {
        match self {
            RequestError::BadParm => aee::AEE_EBADPARM,
            RequestError::BadSize => aee::AEE_EBADSIZE,
            RequestError::Unsupported => aee::AEE_EUNSUPPORTED,
            RequestError::NoSuchModule => aee::AEE_ENOSUCHMOD,
            RequestError::NoSuchFile => aee::AEE_ENOSUCHFILE,
            RequestError::NotAllowed => aee::AEE_ENOTALLOWED,
            RequestError::ReadOnly => aee::AEE_EREADONLY,
            RequestError::BadFile => aee::AEE_EBADFD,
            RequestError::OutOfHandles => aee::AEE_EOUTOFHANDLES,
            RequestError::Seek => aee::AEE_EFSEEK,
            RequestError::Read => aee::AEE_EFREAD,
            RequestError::FileBudget => aee::AEE_EBADSIZE,
            RequestError::Mmap => aee::AEE_EMMAP,
            RequestError::NoSuchMap => aee::AEE_ENOSUCHMAP,
            RequestError::InvalidHandle => aee::AEE_EINVHANDLE,
            RequestError::MapFlags => aee::AEE_EUNSUPPORTED,
        }
    }

    /// A dense index (0..[`COUNT`](Self::COUNT)) for per-kind counters.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A short stable name (`"bad_parm"`), used as a metrics key.
    pub const fn name(self) -> &'static str {
        match self {
            RequestError::BadParm => "bad_parm",
            RequestError::BadSize => "bad_size",
            RequestError::Unsupported => "unsupported",
            RequestError::NoSuchModule => "no_such_module",
            RequestError::NoSuchFile => "no_such_file",
            RequestError::NotAllowed => "not_allowed",
            RequestError::ReadOnly => "read_only",
            RequestError::BadFile => "bad_file",
            RequestError::OutOfHandles => "out_of_handles",
            RequestError::Seek => "seek",
            RequestError::Read => "read",
            RequestError::FileBudget => "file_budget",
            RequestError::Mmap => "mmap",
            RequestError::NoSuchMap => "no_such_map",
            RequestError::InvalidHandle => "invalid_handle",
            RequestError::MapFlags => "map_flags",
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (AEE {:#x})", self.name(), self.aee())
    }
}

impl core::error::Error for RequestError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense_and_codes_nonzero() {
        for (i, e) in RequestError::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
            assert_ne!(e.aee(), 0);
            assert!(aee::name(e.aee()).is_some(), "{e:?}");
        }
        assert_eq!(RequestError::Unsupported.aee(), 0x14);
        assert_eq!(RequestError::NoSuchModule.aee(), 0x3E);
        assert_eq!(RequestError::BadParm.aee(), 0x0E);
        assert_eq!(RequestError::BadSize.aee(), 0x4D);
    }
}
