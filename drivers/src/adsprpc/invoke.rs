//! The typed INVOKE calls (`INVOKE`, `INVOKE_FD`, `INVOKE_ATTRS`, `INVOKE_CRC`) of an
//! [`InvokeArgs`] list, run to completion or abandoned when interrupted.

use super::args::InvokeArgs;
use super::consts::M_CRCLIST;
use super::request::{invoke_until, never, Target, Variant};
use crate::{BorrowedFd, Error, Fd, Syscalls};

/// `FASTRPC_IOCTL_INVOKE`: calls `handle` with `args` (no fds: handle arguments fail with -1).
///
/// Caller: a thread of the process that created the DSP process on this fd. Blocks until the
/// DSP answers: the driver has no timeout, and a signal that interrupts the call (`EINTR`)
/// only parks it, so the call is resumed here with the same arguments (see
/// [`invoke_abandonable`] to give up). Fails with `EPERM` (-1: no session, a faulting copy, a bad
/// buffer, or a different call of this thread parked on this file), a positive AEE code from the
/// DSP, +`EBADF` while closing, +39 after SMMU faults, +`ECONNRESET` after a DSP restart.
///
/// The DSP controls how many bytes the downstream driver copies back into an output buffer
/// (the length is read back from shared metadata): on a hostile DSP an output buffer can be
/// overrun. This is a property of the driver that no host code can prevent.
pub fn invoke<S: Syscalls + ?Sized, const CAP: usize>(sys: &S, fd: Fd, handle: u32, args: &mut InvokeArgs<'_, CAP>) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Plain, None, &never)
}

/// [`invoke`] that gives up when interrupted while `abandon()` returns true: the descriptor is
/// then retired ([`Syscalls::retire`]) before `EINTR` is returned, so the parked call can never
/// be resumed into buffers that are gone; the channel is unusable afterwards and the caller must
/// close it. This is how a deadline or a stop ends a blocked call.
pub fn invoke_abandonable<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: BorrowedFd<'_>,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
    abandon: &dyn Fn() -> bool,
) -> Result<(), Error> {
    invoke_until(sys, Target::Owned(fd), handle, args.request(), Variant::Plain, None, abandon)
}

/// `FASTRPC_IOCTL_INVOKE_FD`: [`invoke`] with the `fds` array.
pub fn invoke_fd<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: Fd,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Fd, None, &never)
}

/// `FASTRPC_IOCTL_INVOKE_ATTRS`: [`invoke`] with the `fds` and `attrs` arrays (what a kernel
/// launch uses: buffer handles travel as fds with
/// [`FASTRPC_ATTR_NOVA`](super::FASTRPC_ATTR_NOVA)).
pub fn invoke_attrs<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: Fd,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Attrs, None, &never)
}

/// [`invoke_attrs`] that gives up when interrupted while `abandon()` returns true (see
/// [`invoke_abandonable`]).
pub fn invoke_attrs_abandonable<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: BorrowedFd<'_>,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
    abandon: &dyn Fn() -> bool,
) -> Result<(), Error> {
    invoke_until(sys, Target::Owned(fd), handle, args.request(), Variant::Attrs, None, abandon)
}

/// `FASTRPC_IOCTL_INVOKE_CRC`: [`invoke_attrs`] plus the 64-entry CRC list written back on
/// success.
pub fn invoke_crc<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    fd: Fd,
    handle: u32,
    args: &mut InvokeArgs<'_, CAP>,
    crc: &mut [u32; M_CRCLIST],
) -> Result<(), Error> {
    invoke_until(sys, Target::Raw(fd), handle, args.request(), Variant::Attrs, Some(crc), &never)
}
