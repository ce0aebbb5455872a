//! The syscall seam a binding session runs on: the device, or (feature `bench`) the bench, or
//! the bench with launches that return at once (a measuring instrument).

use core::ffi::c_void;

use hexrpc_drivers::{Errno, Fd, RustixSys, Syscalls};

/// One seam type for every kind of session, so that sessions, leases and libraries of every
/// kind share one set of handle types. It remembers the fork generation it was made in: in a
/// child forked since, every call is refused ([`RefusingSys`](hexrpc_drivers::RefusingSys):
/// `ENOSYS`, and a close leaves the number alone), so nothing the child's copy of a session does,
/// dropped or misused, reaches the parent's driver state, DSP process or bench.
#[derive(Clone)]
pub struct Seam {
    /// What the calls go to.
    pub kind: SeamKind,
    forks: Option<i32>,
}

/// What a [`Seam`]'s calls go to.
#[derive(Clone)]
pub enum SeamKind {
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
    /// A seam for `kind`, in this process's fork generation.
    pub fn new(kind: SeamKind) -> Seam {
        Seam { kind, forks: hexrpc_drivers::fork_generation() }
    }

    /// True in a child forked after the seam was made (never where forks go unnoticed).
    pub fn forked(&self) -> bool {
        self.forks.is_some() && hexrpc_drivers::fork_generation() != self.forks
    }

    /// The bench behind this seam, if any.
    #[cfg(feature = "bench")]
    pub fn bench(&self) -> Option<&hexrpc_bench::Bench> {
        match &self.kind {
            SeamKind::Device(_) => None,
            SeamKind::Bench(b) | SeamKind::Returning(b, _) => Some(b),
        }
    }
}

// SAFETY: every call is forwarded unchanged to a seam that upholds the contract (RustixSys, the
// bench); the returning variant's INVOKE_ATTRS goes to NullSys, which touches no memory at all.
unsafe impl hexrpc_drivers::SeamHooks for Seam {
    type Inner = dyn Syscalls;

    fn inner(&self) -> &(dyn Syscalls + 'static) {
        if self.forked() {
            return &hexrpc_drivers::RefusingSys;
        }
        match &self.kind {
            SeamKind::Device(s) => s,
            #[cfg(feature = "bench")]
            SeamKind::Bench(b) | SeamKind::Returning(b, _) => b,
        }
    }

    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        #[cfg(feature = "bench")]
        if let (SeamKind::Returning(_, null), false) = (&self.kind, self.forked()) {
            if request == hexrpc_drivers::adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS {
                // SAFETY: the caller upholds `ioctl`'s contract; NullSys does not use `arg`.
                return unsafe { Syscalls::ioctl(&**null, fd, request, arg) };
            }
        }
        // SAFETY: the caller upholds `ioctl`'s contract, which we pass on unchanged.
        unsafe { self.inner().ioctl(fd, request, arg) }
    }
}
