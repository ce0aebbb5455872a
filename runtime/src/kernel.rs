//! One call per launch: a library opened together with its kernel's [`Signature`] and launch
//! [`AbiVersion`] launches with the views and scalars of one call and returns the DSP time.
//!
//! ```text
//! let kernel = served.open_kernel("scale", image, Signature::parse("buf,buf,f32")?, AbiVersion::V2)?;
//! let dsp_us = kernel.launch(&[&x, &y], &[Scalar::F32(2.0)])?;
//! ```
//!
//! [`Kernel::launch`] checks the views and scalars against the signature, packs them on the
//! stack ([`PackedLaunch`]) and makes exactly one `FASTRPC_IOCTL_INVOKE_ATTRS`; nothing is
//! allocated. [`Kernel::launch_with_deadline`] (std) bounds the call. The packer and the raw
//! [`Library::invoke`](hexrpc_hal::Library::invoke) stay public underneath for callers that
//! need them.
//!
//! A [`Kernel`] wraps any [`KernelLibrary`]: a borrowed [`Library`] or (std) an owned
//! [`SharedLibrary`](hexrpc_hal::SharedLibrary).

use core::fmt;

use hexrpc_drivers::{Fd, Syscalls};
use hexrpc_hal::{BufferView, Call, Cause, HalError, Library, Stage};

use crate::launch::{
    AbiVersion, BufferRef, LaunchBuffer, LibraryRecord, PackError, PackedLaunch, RecordError, Scalar, Signature, SignatureError, MAX_ARGS,
    MAX_BUFFERS,
};
use crate::Error;

/// An open library a [`Kernel`] can launch: something that makes one FastRPC invoke.
pub trait KernelLibrary {
    /// One invoke with `args`, without a deadline.
    fn invoke_args(&self, args: &mut Call<'_, MAX_ARGS>) -> Result<(), HalError>;

    /// One invoke with `args` that is abandoned (and the session marked for recovery) if it has
    /// not returned after `timeout`.
    #[cfg(feature = "std")]
    fn invoke_args_with_deadline(&self, args: &mut Call<'_, MAX_ARGS>, timeout: core::time::Duration) -> Result<(), HalError>;

    /// True if the library keeps lease mappings across calls (opened with the map cache): only
    /// then do launches carry the leases' ids (0 otherwise).
    fn map_cache(&self) -> bool {
        false
    }
}

impl<S: Syscalls + Clone + Sync> KernelLibrary for Library<'_, S> {
    fn invoke_args(&self, args: &mut Call<'_, MAX_ARGS>) -> Result<(), HalError> {
        self.invoke(args)
    }
    fn map_cache(&self) -> bool {
        Library::map_cache(self)
    }
    #[cfg(feature = "std")]
    fn invoke_args_with_deadline(&self, args: &mut Call<'_, MAX_ARGS>, timeout: core::time::Duration) -> Result<(), HalError> {
        self.invoke_with_deadline(args, timeout)
    }
}

#[cfg(feature = "std")]
impl<S: Syscalls + Clone + Sync> KernelLibrary for hexrpc_hal::SharedLibrary<S> {
    fn invoke_args(&self, args: &mut Call<'_, MAX_ARGS>) -> Result<(), HalError> {
        self.invoke(args)
    }
    fn map_cache(&self) -> bool {
        hexrpc_hal::SharedLibrary::map_cache(self)
    }
    fn invoke_args_with_deadline(&self, args: &mut Call<'_, MAX_ARGS>, timeout: core::time::Duration) -> Result<(), HalError> {
        self.invoke_with_deadline(args, timeout)
    }
}

/// Why a kernel was not opened although the open itself could have been made: the library's build
/// record is missing (and no signature was given), unreadable, or disagrees with the signature
/// or ABI given. Nothing was opened. Inside [`Error::Open`].
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

/// An open library together with its kernel's signature and launch ABI: launches in one call.
///
/// Launches from several threads at once are fine (`&Kernel` is enough). Dropping it closes the
/// library.
pub struct Kernel<L> {
    library: L,
    signature: Signature,
    abi: AbiVersion,
}

impl<L: KernelLibrary> Kernel<L> {
    /// The kernel of `library`, whose `entry` was generated for `signature` and `abi`.
    pub fn new(library: L, signature: Signature, abi: AbiVersion) -> Self {
        Kernel { library, signature, abi }
    }

    /// The kernel's signature.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The launch ABI version.
    pub fn abi(&self) -> AbiVersion {
        self.abi
    }

    /// The library underneath (raw invokes).
    pub fn library(&self) -> &L {
        &self.library
    }

    /// The library, giving up the signature.
    pub fn into_library(self) -> L {
        self.library
    }

    /// Launches the kernel on `views` (buffers, in signature order) and `scalars`, and returns the
    /// microseconds the DSP measured around the kernel. One ioctl; nothing is allocated. The
    /// views stay borrowed until the call has returned.
    pub fn launch(&self, views: &[&BufferView<'_>], scalars: &[Scalar]) -> Result<u64, Error> {
        self.run(views, scalars, |args| self.library.invoke_args(args))
    }

    /// [`launch`](Self::launch) with a deadline: a call still running after `timeout` is
    /// abandoned, the error's cause is [`Cause::Timeout`] and the session needs `recover()`.
    /// A zero `timeout` is refused before any system call ([`PackError::ZeroDeadline`], as
    /// [`Batch::run_with_deadline`](crate::launch::Batch::run_with_deadline) refuses it).
    #[cfg(feature = "std")]
    pub fn launch_with_deadline(&self, views: &[&BufferView<'_>], scalars: &[Scalar], timeout: core::time::Duration) -> Result<u64, Error> {
        check_deadline(timeout)?;
        self.run(views, scalars, |args| self.library.invoke_args_with_deadline(args, timeout))
    }

    /// [`launch`](Self::launch), with a deadline when `timeout` is `Some` (std).
    #[cfg(feature = "std")]
    pub fn launch_maybe_deadline(
        &self,
        views: &[&BufferView<'_>],
        scalars: &[Scalar],
        timeout: Option<core::time::Duration>,
    ) -> Result<u64, Error> {
        match timeout {
            Some(t) => self.launch_with_deadline(views, scalars, t),
            None => self.launch(views, scalars),
        }
    }

    /// [`launch`](Self::launch) on buffer records (for callers that keep their own leases,
    /// such as language bindings); `deadline` as in
    /// [`launch_with_deadline`](Self::launch_with_deadline) (ignored without std; `Some(0)` is
    /// refused).
    pub fn launch_buffers(
        &self,
        buffers: &[BufferRef<'_>],
        scalars: &[Scalar],
        deadline: Option<core::time::Duration>,
    ) -> Result<u64, Error> {
        #[cfg(feature = "std")]
        if let Some(t) = deadline {
            check_deadline(t)?;
            return self.packed(buffers, scalars, |args| self.library.invoke_args_with_deadline(args, t));
        }
        #[cfg(not(feature = "std"))]
        let _ = deadline;
        self.packed(buffers, scalars, |args| self.library.invoke_args(args))
    }

    fn run(
        &self,
        views: &[&BufferView<'_>],
        scalars: &[Scalar],
        call: impl FnOnce(&mut Call<'_, MAX_ARGS>) -> Result<(), HalError>,
    ) -> Result<u64, Error> {
        if views.len() > MAX_BUFFERS {
            return Err(Error::Pack(PackError::TooManyBuffers { count: views.len() }));
        }
        let owner = ();
        let mut refs = [BufferRef::borrowing(&owner, Fd(-1), 0, 0, 0); MAX_BUFFERS];
        let cache = self.library.map_cache();
        for (r, v) in refs.iter_mut().zip(views) {
            *r = if cache { BufferRef::of(*v) } else { BufferRef::of(*v).with_lease_id(0) };
        }
        self.packed(&refs[..views.len()], scalars, call)
    }

    fn packed(
        &self,
        buffers: &[BufferRef<'_>],
        scalars: &[Scalar],
        call: impl FnOnce(&mut Call<'_, MAX_ARGS>) -> Result<(), HalError>,
    ) -> Result<u64, Error> {
        // A library without the map cache is sent no lease ids (records that carry one are
        // copied without it; the views path above never makes such records).
        let owner = ();
        let mut plain = [BufferRef::borrowing(&owner, Fd(-1), 0, 0, 0); MAX_BUFFERS];
        let buffers = if buffers.len() <= MAX_BUFFERS && buffers.iter().any(|b| b.lease_id() != 0) && !self.library.map_cache() {
            for (p, b) in plain.iter_mut().zip(buffers) {
                *p = b.with_lease_id(0);
            }
            &plain[..buffers.len()]
        } else {
            buffers
        };
        // Built where it lives and packed in place (no move of the ~1 KiB value).
        let mut packed = PackedLaunch::empty(self.abi);
        packed.repack(self.abi, &self.signature, buffers, scalars)?;
        {
            let mut args = packed.invoke_args();
            call(args.as_mut().map_err(|_| Error::Hal(HalError { stage: Stage::Invoke, cause: Cause::Invalid }))?)?;
        }
        Ok(packed.dsp_micros())
    }
}

impl<L: fmt::Debug> fmt::Debug for Kernel<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel").field("library", &self.library).field("signature", &self.signature).field("abi", &self.abi).finish()
    }
}

#[cfg(feature = "std")]
mod served {
    extern crate std;

    use std::sync::Arc;

    use hexrpc_drivers::Syscalls;
    use hexrpc_hal::{Library, LibraryImage, SharedLease, SharedLibrary};

    use super::{resolve_launch, Kernel};
    use crate::launch::{AbiVersion, Signature};
    use crate::{Error, ServedSession};

    impl<S: Syscalls + Clone + Send + Sync + 'static> ServedSession<S> {
        /// Opens a library (see [`ServedSession::open_library`]) whose `entry` was generated for
        /// `signature` and `abi`, ready for one-call launches. A library made by `hexrpc
        /// build-lib` carries its build record: a signature or ABI other than the recorded one is
        /// refused before anything is opened.
        pub fn open_kernel(
            &self,
            name: &str,
            image: impl Into<LibraryImage>,
            signature: Signature,
            abi: AbiVersion,
        ) -> Result<Kernel<Library<'_, S>>, Error> {
            let image = image.into();
            let (signature, abi) = resolve_launch(image.bytes(), Some((signature, abi)))?;
            Ok(Kernel::new(self.open_library(name, image)?, signature, abi))
        }

        /// Opens a library made by `hexrpc build-lib` with the signature and ABI its build record
        /// names ([`OpenRefusal::NoRecord`](super::OpenRefusal::NoRecord) for a library without one).
        pub fn open_recorded_kernel(&self, name: &str, image: impl Into<LibraryImage>) -> Result<Kernel<Library<'_, S>>, Error> {
            let image = image.into();
            let (signature, abi) = resolve_launch(image.bytes(), None)?;
            Ok(Kernel::new(self.open_library(name, image)?, signature, abi))
        }

        /// [`open_kernel`](Self::open_kernel) (or, with `launch` `None`,
        /// [`open_recorded_kernel`](Self::open_recorded_kernel)) for a kernel that holds shares
        /// of the session and of the reverse service instead of borrows (`'static`: for bindings
        /// and long-lived tables). The kernel keeps the session's resources alive, but the
        /// reverse-RPC listener and the channel stop with this `ServedSession`: launches made
        /// after it was dropped fail (with an error), so keep it as long as the kernel is used.
        pub fn open_kernel_shared(
            &self,
            name: &str,
            image: impl Into<LibraryImage>,
            launch: Option<(Signature, AbiVersion)>,
        ) -> Result<Kernel<SharedLibrary<S>>, Error> {
            let image = image.into();
            let (signature, abi) = resolve_launch(image.bytes(), launch)?;
            let map_cache = crate::served::records_map_cache(image.bytes());
            let library = self.session.open_library_shared_with(self.service.clone(), name, image, map_cache)?;
            Ok(Kernel::new(library, signature, abi))
        }

        /// Allocates a lease that holds a share of the session instead of a borrow (its memory
        /// stays valid after this `ServedSession` is dropped; see
        /// [`open_kernel_shared`](Self::open_kernel_shared) for launches).
        pub fn alloc_shared(&self, len: usize) -> Result<SharedLease<S>, Error>
        where
            S: 'static,
        {
            Ok(self.session.alloc_shared(len)?)
        }
    }

    impl<S: Syscalls + Clone + Sync> Kernel<SharedLibrary<S>> {
        /// The session the kernel's library belongs to.
        pub fn session(&self) -> &Arc<hexrpc_hal::Session<S>> {
            self.library.session()
        }
    }
}

#[cfg(feature = "std")]
/// The one rule for deadline values, for single launches and batches: `None` is no deadline, a
/// zero deadline is refused before any system call.
pub(crate) fn check_deadline(timeout: core::time::Duration) -> Result<(), Error> {
    if timeout.is_zero() {
        return Err(Error::Pack(PackError::ZeroDeadline));
    }
    Ok(())
}
