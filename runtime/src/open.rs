//! Which signature and launch ABI a library is opened with: the ones given, checked against the
//! library's build record when it carries one, or the record's own
//! ([`resolve_launch`](crate::kernel::resolve_launch)); and why an open is refused before
//! anything is opened ([`OpenRefusal`](crate::OpenRefusal)).
//!
//! Below [`error`](crate::error) (whose [`Error::Open`](crate::Error::Open) carries the refusal)
//! and [`kernel`](crate::kernel) (which re-exports both items under its own path).

use core::fmt;

use crate::launch::{AbiVersion, LibraryRecord, RecordError, Signature, SignatureError};

/// Why a kernel was not opened although the open itself could have been made: the library's build
/// record is missing (and no signature was given), unreadable, or disagrees with the signature
/// or ABI given. Nothing was opened. Inside [`Error::Open`](crate::Error::Open).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OpenRefusal {
    /// No signature was given and the library carries no build record (`hexrpc build-lib`
    /// writes one): give the signature and ABI explicitly.
    NoRecord,
    /// The library's build record cannot be read.
    Record(RecordError),
    /// The signature or ABI given is not what the library was built for (its build record says
    /// otherwise).
    Mismatch {
        /// The ABI version the record names.
        recorded_abi: AbiVersion,
    },
    /// The record's signature does not parse.
    Signature(SignatureError),
}

impl fmt::Display for OpenRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenRefusal::NoRecord => f.write_str("the library carries no hexrpc build record: give its signature and ABI"),
            OpenRefusal::Record(e) => write!(f, "{e}"),
            OpenRefusal::Mismatch { recorded_abi } => {
                write!(f, "the library's build record names another signature or ABI ({recorded_abi:?}) than the one given")
            }
            OpenRefusal::Signature(e) => write!(f, "the build record's signature: {e}"),
        }
    }
}

impl core::error::Error for OpenRefusal {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            OpenRefusal::Record(e) => Some(e),
            OpenRefusal::Signature(e) => Some(e),
            _ => None,
        }
    }
}

/// The signature and ABI to open `image` with: `given` checked against the library's build
/// record when it has one, or the record's when nothing is given. A library without a record
/// (or with one this build cannot read) takes `given` as it is.
pub fn resolve_launch(image: &[u8], given: Option<(Signature, AbiVersion)>) -> Result<(Signature, AbiVersion), OpenRefusal> {
    match (LibraryRecord::find(image), given) {
        (Ok(Some(rec)), Some((sig, abi))) => {
            if rec.matches(&sig, abi) {
                Ok((sig, abi))
            } else {
                Err(OpenRefusal::Mismatch { recorded_abi: rec.abi() })
            }
        }
        (Ok(Some(rec)), None) => Ok((rec.kernel().parse_signature().map_err(OpenRefusal::Signature)?, rec.abi())),
        (Ok(None), None) => Err(OpenRefusal::NoRecord),
        (Err(e), None) => Err(OpenRefusal::Record(e)),
        (_, Some(given)) => Ok(given),
    }
}
