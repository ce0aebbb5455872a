use hexrpc_drivers::{BorrowedFd, Errno, Fd, Syscalls};

/// A file descriptor this process owns, closed through the seam when dropped (a failure to
/// close is logged, never a panic). Made from the seam's ownership token
/// ([`hexrpc_drivers::OwnedFd`]), so it cannot be made for a number nobody handed out.
pub struct OwnedFd<S: Syscalls> {
    sys: S,
    fd: Option<hexrpc_drivers::OwnedFd>,
}

impl<S: Syscalls> OwnedFd<S> {
    /// Takes ownership of `fd`, to be closed through `sys`.
    pub fn new(sys: S, fd: hexrpc_drivers::OwnedFd) -> Self {
        OwnedFd { sys, fd: Some(fd) }
    }

    /// The raw number (still owned by `self`).
    pub fn raw(&self) -> Fd {
        self.fd.as_ref().map_or(Fd(-1), hexrpc_drivers::OwnedFd::raw)
    }

    /// A borrow of the descriptor (what retiring it takes).
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(hexrpc_drivers::OwnedFd::as_fd)
    }

    /// The syscall implementation it closes through.
    pub fn sys(&self) -> &S {
        &self.sys
    }

    /// Gives the ownership token back without closing.
    pub(crate) fn into_token(mut self) -> Option<hexrpc_drivers::OwnedFd> {
        self.fd.take()
    }

    /// Takes the ownership token out, leaving nothing to close on drop.
    pub(crate) fn take_token(&mut self) -> Option<hexrpc_drivers::OwnedFd> {
        self.fd.take()
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
            let n = fd.raw().0;
            if let Err(e) = self.sys.close(fd) {
                log::warn!("close(fd {n}) failed: {e}");
            }
        }
    }
}

impl<S: Syscalls> core::fmt::Debug for OwnedFd<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "OwnedFd({})", self.raw().0)
    }
}
