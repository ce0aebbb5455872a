//! The syscall seam a binding session runs on: the device, or (feature `bench`) the bench, or
//! the bench with launches that return at once (a measuring instrument).

use core::ffi::c_void;

use hexrpc_drivers::{Errno, Fd, RustixSys, Syscalls};

/// One seam type for every kind of session, so that sessions, leases and libraries of every
/// kind share one set of handle types.
#[derive(Clone)]
pub enum Seam {
    /// The real system calls.
    Device(RustixSys),
    /// The isolated bench (simulated kernel and DSP; runs executor images under qemu-hexagon).
    #[cfg(feature = "bench")]
    Bench(hexrpc_bench::Bench),
    /// The bench, except that `FASTRPC_IOCTL_INVOKE_ATTRS` (only kernel launches use it; opening
    /// and closing libraries and the listener use the plain INVOKE) goes to a
    /// [`NullSys`](hexrpc_bench::measure::NullSys) that returns at once without touching its
    /// argument. It measures what the bindings add per launch; outputs are never written and
    /// the DSP time is 0.
    #[cfg(feature = "bench")]
    Returning(hexrpc_bench::Bench, std::sync::Arc<hexrpc_bench::measure::NullSys>),
}

impl Seam {
    /// The bench behind this seam, if any.
    #[cfg(feature = "bench")]
    pub fn bench(&self) -> Option<&hexrpc_bench::Bench> {
        match self {
            Seam::Device(_) => None,
            Seam::Bench(b) | Seam::Returning(b, _) => Some(b),
        }
    }
}

// SAFETY: every call is forwarded unchanged to a seam that upholds the contract (RustixSys, the
// bench); the returning variant's INVOKE_ATTRS goes to NullSys, which touches no memory at all.
unsafe impl hexrpc_drivers::SeamHooks for Seam {
    type Inner = dyn Syscalls;

    fn inner(&self) -> &(dyn Syscalls + 'static) {
        match self {
            Seam::Device(s) => s,
            #[cfg(feature = "bench")]
            Seam::Bench(b) | Seam::Returning(b, _) => b,
        }
    }

    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        #[cfg(feature = "bench")]
        if let Seam::Returning(_, null) = self {
            if request == hexrpc_drivers::adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS {
                // SAFETY: the caller upholds `ioctl`'s contract; NullSys does not use `arg`.
                return unsafe { Syscalls::ioctl(&**null, fd, request, arg) };
            }
        }
        // SAFETY: the caller upholds `ioctl`'s contract, which we pass on unchanged.
        unsafe { self.inner().ioctl(fd, request, arg) }
    }
}
