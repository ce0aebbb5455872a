//! What one INVOKE request points at and the loop that makes it: the variant, the request, the
//! descriptor it goes to, one ioctl, and the run to completion that resumes (or abandons) an
//! interrupted call. Shared by the argument lists (`args`, `frame`) and the typed invokes
//! (`invoke`), which sit above this file.

use super::consts::M_CRCLIST;
use super::ioctl;
use super::structs::{fastrpc_ioctl_invoke, fastrpc_ioctl_invoke_attrs, fastrpc_ioctl_invoke_crc, fastrpc_ioctl_invoke_fd};
use crate::error::check_rc;
use crate::sys::ioctl_with;
use crate::{BorrowedFd, Errno, Error, Fd, Syscalls};

/// Which INVOKE variant a call uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Variant {
    Plain,
    Fd,
    Attrs,
}

/// What one INVOKE request points at: the scalars word and the three arrays, taken from an
/// argument list ([`InvokeArgs`](super::InvokeArgs) or [`LaunchFrame`](super::LaunchFrame)) that
/// stays borrowed for the whole call.
#[derive(Clone, Copy)]
pub(super) struct Request {
    pub(super) sc: u32,
    pub(super) pra: u64,
    pub(super) fds: u64,
    pub(super) attrs: u64,
}

/// One INVOKE ioctl of `req`, as it is (no retry).
#[inline(always)]
fn invoke_once<S: Syscalls + ?Sized>(
    sys: &S,
    fd: Fd,
    handle: u32,
    req: Request,
    variant: Variant,
    crc: Option<&mut [u32; M_CRCLIST]>,
) -> Result<(), Error> {
    let inv = fastrpc_ioctl_invoke { handle, sc: req.sc, pra: req.pra };
    let (fds, attrs) = (req.fds, req.attrs);
    // SAFETY (all arms): the argument struct is live and of the request's size; `pra` points at
    // the argument list's `remote_arg` array, whose LENGTH(sc) entries are initialized and
    // describe buffers the list borrows (inputs readable, outputs writable); `fds`/`attrs` point
    // at LENGTH(sc) initialized entries of the same list; `crc` at the 64 writable u32 the driver
    // copies back. The callers in this module hold the list borrowed until they return and never
    // return while the driver may still write through these pointers: an interrupted (parked)
    // call is resumed with the same list, or its file is retired first.
    let rc = match (variant, crc) {
        (_, Some(crc)) => {
            let mut x = fastrpc_ioctl_invoke_crc { inv, fds, attrs, crc: crc.as_mut_ptr() as u64 };
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE_CRC, &mut x) }
        }
        (Variant::Plain, None) => {
            let mut x = inv;
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE, &mut x) }
        }
        (Variant::Fd, None) => {
            let mut x = fastrpc_ioctl_invoke_fd { inv, fds };
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE_FD, &mut x) }
        }
        (Variant::Attrs, None) => {
            let mut x = fastrpc_ioctl_invoke_attrs { inv, fds, attrs };
            // SAFETY: see above.
            unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INVOKE_ATTRS, &mut x) }
        }
    };
    check_rc(rc)
}

/// Runs an invoke to completion. On `EINTR` the driver has parked the call, keeping the user
/// pointers of its output buffers, and would resume it for the next call of this thread with
/// the same scalars word on this file; so the call is resumed at once with the same `args`,
/// unless `abandon()` says to give up, in which case the file is first retired
/// ([`Syscalls::retire`]) so that nothing can ever resume it, and `EINTR` is returned. If the
/// file cannot be retired, the call is resumed anyway (soundness over promptness) and the
/// failure is logged.
#[inline(always)]
pub(super) fn invoke_until<S: Syscalls + ?Sized>(
    sys: &S,
    fd: Target<'_>,
    handle: u32,
    req: Request,
    variant: Variant,
    mut crc: Option<&mut [u32; M_CRCLIST]>,
    abandon: &dyn Fn() -> bool,
) -> Result<(), Error> {
    let mut retire_failed = false;
    loop {
        match invoke_once(sys, fd.raw(), handle, req, variant, crc.as_deref_mut()) {
            Err(Error::Os(Errno::EINTR)) => {
                if let Target::Owned(owned) = fd {
                    if !retire_failed && abandon() {
                        match sys.retire(owned) {
                            Ok(()) => return Err(Error::Os(Errno::EINTR)),
                            Err(e) => {
                                log::error!("cannot retire fd {} to abandon an interrupted call ({e}); resuming it instead", owned.raw().0);
                                retire_failed = true;
                            }
                        }
                    }
                }
            }
            r => return r,
        }
    }
}

pub(super) fn never() -> bool {
    false
}

/// The descriptor an invoke goes to: a plain number (the call is always resumed), or a borrow
/// of its owner's descriptor (the call may be abandoned by retiring it).
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    Raw(Fd),
    Owned(BorrowedFd<'a>),
}

impl Target<'_> {
    fn raw(self) -> Fd {
        match self {
            Target::Raw(fd) => fd,
            Target::Owned(b) => b.raw(),
        }
    }
}
