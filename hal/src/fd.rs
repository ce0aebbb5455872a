use hexrpc_drivers::{Errno, Fd, Syscalls};

/// A file descriptor this process owns, closed through the seam when dropped (a failure to
/// close is logged, never a panic).
pub struct OwnedFd<S: Syscalls> {
    sys: S,
    fd: Option<Fd>,
}

impl<S: Syscalls> OwnedFd<S> {
    /// Takes ownership of `fd`.
    pub(crate) fn new(sys: S, fd: Fd) -> Self {
        OwnedFd { sys, fd: Some(fd) }
    }

    /// The raw number (still owned by `self`).
    pub fn raw(&self) -> Fd {
        self.fd.unwrap_or(Fd(-1))
    }

    /// Closes now and reports the result.
    pub fn close(mut self) -> Result<(), Errno> {
        match self.fd.take() {
            Some(fd) => self.sys.close(fd),
            None => Ok(()),
        }
    }
}

impl<S: Syscalls> Drop for OwnedFd<S> {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            if let Err(e) = self.sys.close(fd) {
                log::warn!("close(fd {}) failed: {e}", fd.0);
            }
        }
    }
}

impl<S: Syscalls> core::fmt::Debug for OwnedFd<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "OwnedFd({})", self.raw().0)
    }
}
