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

use crate::launch::{AbiVersion, BufferRef, LaunchBuffer, PackError, PackedLaunch, Scalar, Signature, MAX_ARGS, MAX_BUFFERS};
pub use crate::open::{resolve_launch, OpenRefusal};
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
/// The one rule for deadline values, for single launches and batches: `None` is no deadline, a
/// zero deadline is refused before any system call.
pub(crate) fn check_deadline(timeout: core::time::Duration) -> Result<(), Error> {
    if timeout.is_zero() {
        return Err(Error::Pack(PackError::ZeroDeadline));
    }
    Ok(())
}
