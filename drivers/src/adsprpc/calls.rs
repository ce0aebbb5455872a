//! The typed calls of every request but INVOKE: channel setup (GETINFO, CONTROL, SETMODE, INIT),
//! DSP mappings (MMAP, MUNMAP, MUNMAP_FD) and counters (GETPERF), each keeping a positive return
//! apart from an errno; and [`check`], the same reading for a raw call.

use super::consts::{FASTRPC_CONTROL_KALLOC, FASTRPC_CONTROL_LATENCY, PERF_KEYS};
use super::ioctl;
use super::structs::{
    fastrpc_ctrl_latency, fastrpc_ioctl_control, fastrpc_ioctl_init, fastrpc_ioctl_init_attrs, fastrpc_ioctl_mmap, fastrpc_ioctl_mmap_64,
    fastrpc_ioctl_munmap, fastrpc_ioctl_munmap_64, fastrpc_ioctl_munmap_fd, fastrpc_ioctl_perf,
};
use crate::error::check_rc;
use crate::sys::{ioctl_plain, ioctl_with, PlainArg};
use crate::{Errno, Error, Fd, Mapping, Syscalls};

// SAFETY: request codes, latencies and flags only.
unsafe impl PlainArg for fastrpc_ioctl_control {}
// SAFETY: `vaddrin` is a host address the driver only uses as a key to find or record the map,
// never dereferenced (see `mmap`); the rest are fds, flags, sizes and DSP addresses.
unsafe impl PlainArg for fastrpc_ioctl_mmap {}
// SAFETY: as `fastrpc_ioctl_mmap`.
unsafe impl PlainArg for fastrpc_ioctl_mmap_64 {}
// SAFETY: a DSP address and a size.
unsafe impl PlainArg for fastrpc_ioctl_munmap {}
// SAFETY: a DSP address and a size.
unsafe impl PlainArg for fastrpc_ioctl_munmap_64 {}
// SAFETY: `va` is only matched against the driver's maps, never dereferenced.
unsafe impl PlainArg for fastrpc_ioctl_munmap_fd {}

/// `FASTRPC_IOCTL_GETINFO`: the first call binds the fd to `channel` (must be < 4) and takes a
/// free SMMU session; later calls ignore the input. Returns the info word
/// ([`FASTRPC_INFO_SMMU`](super::FASTRPC_INFO_SMMU)).
///
/// Caller: the owner of a fresh `/dev/adsprpc-smd` fd. Fails with `EPERM` (-1) for a bad
/// channel or when no session is free.
pub fn getinfo<S: Syscalls + ?Sized>(sys: &S, fd: Fd, channel: u32) -> Result<u32, Error> {
    let mut info = channel;
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_GETINFO, &mut info))?;
    Ok(info)
}

/// `FASTRPC_IOCTL_CONTROL` with a caller-built request (LATENCY, SMMU, KALLOC). The driver
/// copies the struct back only for KALLOC.
///
/// Fails with `ENOTTY` for an unknown request, `EPERM` for a zero latency.
pub fn control<S: Syscalls + ?Sized>(sys: &S, fd: Fd, ctrl: &mut fastrpc_ioctl_control) -> Result<(), Error> {
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_CONTROL, ctrl))
}

/// `FASTRPC_IOCTL_CONTROL` with `FASTRPC_CONTROL_KALLOC`: lets the kernel allocate memory for the
/// process. Returns `kalloc_support` as the driver wrote it back.
pub fn control_kalloc<S: Syscalls + ?Sized>(sys: &S, fd: Fd) -> Result<u32, Error> {
    let mut ctrl = fastrpc_ioctl_control { req: FASTRPC_CONTROL_KALLOC, lp: fastrpc_ctrl_latency::default() };
    control(sys, fd, &mut ctrl)?;
    Ok(ctrl.lp.enable)
}

/// `FASTRPC_IOCTL_CONTROL` with `FASTRPC_CONTROL_LATENCY`: an `enable` of 1 adds (or updates)
/// the file's CPU-DMA-latency request at the device tree's `qcom,rpc-latency-us`; any other
/// value updates it to "no constraint". The file's release removes it. The latency itself is
/// the kernel's: the request carries none.
///
/// Fails with -1 (`EPERM`) when the device tree sets no latency (the driver's zero latency).
pub fn control_latency<S: Syscalls + ?Sized>(sys: &S, fd: Fd, enable: bool) -> Result<(), Error> {
    let lp = fastrpc_ctrl_latency { enable: u32::from(enable), level: 0 };
    let mut ctrl = fastrpc_ioctl_control { req: FASTRPC_CONTROL_LATENCY, lp };
    control(sys, fd, &mut ctrl)
}

/// `FASTRPC_IOCTL_SETMODE`: the mode travels as the ioctl argument value, not behind a pointer.
///
/// Fails with `ENOTTY` for an unknown mode.
pub fn setmode<S: Syscalls + ?Sized>(sys: &S, fd: Fd, mode: u32) -> Result<(), Error> {
    // SAFETY: the driver reads the argument as a plain number and never dereferences it.
    check_rc(unsafe { sys.ioctl(fd, ioctl::FASTRPC_IOCTL_SETMODE.raw(), mode as usize as *mut core::ffi::c_void) })
}

/// `FASTRPC_IOCTL_GETPERF`: the calling thread's counters and the key names.
///
/// Note: the downstream driver copies a kernel record that contains a list node, so kernel
/// pointers appear among the counters. Returns the number of keys.
pub fn getperf<S: Syscalls + ?Sized>(sys: &S, fd: Fd, data: &mut [i64; PERF_KEYS], keys: &mut [u8; 128]) -> Result<u32, Error> {
    let mut perf = fastrpc_ioctl_perf { data: data.as_mut_ptr() as u64, numkeys: 0, _pad0: 0, keys: keys.as_mut_ptr() as u64 };
    // SAFETY: `perf` is a live struct of the request's size; `data` holds the 96 bytes the
    // driver writes and `keys` more than the 68-byte key string; both outlive the call.
    let rc = unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_GETPERF, &mut perf) };
    check_rc(rc)?;
    Ok(perf.numkeys)
}

/// `FASTRPC_IOCTL_INIT` (`flags` = [`FASTRPC_INIT_CREATE`](super::FASTRPC_INIT_CREATE) for a
/// user process): the shell ELF is the first `filelen` bytes of `shell`, a mapping of the ION
/// buffer `shell_fd`.
///
/// Fails with [`Error::Invalid`] if `filelen` exceeds the mapping; with `EPERM` (-1) if
/// `filelen` is 2 MiB or more, there is no session, or the channel wait expires; `ENOTCONN`
/// while the DSP is restarting; `EINVAL` for donated memory; `ENOTTY` for unknown flags.
pub fn init<S: Syscalls + ?Sized, M: Syscalls>(
    sys: &S,
    fd: Fd,
    flags: u32,
    shell: &Mapping<M>,
    shell_fd: Fd,
    filelen: u32,
) -> Result<(), Error> {
    if filelen as usize > shell.len() {
        return Err(Error::Invalid);
    }
    let mut init =
        fastrpc_ioctl_init { flags, _pad0: 0, file: shell.addr() as u64, filelen, filefd: shell_fd.0, mem: 0, memlen: 0, memfd: -1 };
    // SAFETY: `init` is a live struct of the request's size; its only user pointer is `file`,
    // which points at `filelen` readable bytes of a live mapping of `shell_fd` (checked above).
    let rc = unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INIT, &mut init) };
    check_rc(rc)
}

/// `FASTRPC_IOCTL_INIT_ATTRS`: [`init`] with process attributes and a signature length.
#[allow(clippy::too_many_arguments)] // one parameter per field of the C struct
pub fn init_attrs<S: Syscalls + ?Sized, M: Syscalls>(
    sys: &S,
    fd: Fd,
    flags: u32,
    shell: &Mapping<M>,
    shell_fd: Fd,
    filelen: u32,
    attrs: i32,
    siglen: u32,
) -> Result<(), Error> {
    if filelen as usize > shell.len() {
        return Err(Error::Invalid);
    }
    let mut init = fastrpc_ioctl_init_attrs {
        init: fastrpc_ioctl_init { flags, _pad0: 0, file: shell.addr() as u64, filelen, filefd: shell_fd.0, mem: 0, memlen: 0, memfd: -1 },
        attrs,
        siglen,
    };
    // SAFETY: as in `init`.
    let rc = unsafe { ioctl_with(sys, fd, ioctl::FASTRPC_IOCTL_INIT_ATTRS, &mut init) };
    check_rc(rc)
}

/// `FASTRPC_IOCTL_MMAP`: maps `size` bytes of the ION buffer `buf` (or, with
/// [`ADSP_MMAP_ADD_PAGES`](super::ADSP_MMAP_ADD_PAGES) and `buf` = -1, kernel-allocated pages)
/// into the DSP process. Returns `vaddrout`, the DSP address.
///
/// `vaddrin` is a host address the driver only uses to find or record the map; it is not
/// dereferenced. Fails with `EINVAL` (ADD_PAGES with a non-zero vaddrin), `EPERM` (size 0,
/// no session), `ENOMEM`.
///
/// Note: the indexed AGNOS driver never writes `vaddrout` back (a newer CAF revision does);
/// callers must not trust a zero or unchanged value. See kernel-abi.md 2.9.
pub fn mmap<S: Syscalls + ?Sized>(sys: &S, fd: Fd, buf: Fd, flags: u32, vaddrin: u64, size: u64) -> Result<u64, Error> {
    let mut m = fastrpc_ioctl_mmap { fd: buf.0, flags, vaddrin, size, vaddrout: 0 };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MMAP, &mut m))?;
    Ok(m.vaddrout)
}

/// `FASTRPC_IOCTL_MMAP_64`: [`mmap`] with 64-bit addresses (identical on LP64).
pub fn mmap_64<S: Syscalls + ?Sized>(sys: &S, fd: Fd, buf: Fd, flags: u32, vaddrin: u64, size: u64) -> Result<u64, Error> {
    let mut m = fastrpc_ioctl_mmap_64 { fd: buf.0, flags, vaddrin, size, vaddrout: 0 };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MMAP_64, &mut m))?;
    Ok(m.vaddrout)
}

/// `FASTRPC_IOCTL_MUNMAP`: removes a DSP mapping made by [`mmap`], matched exactly by
/// (vaddrout, size). Fails with `EPERM` (-1) if no such map exists.
pub fn munmap<S: Syscalls + ?Sized>(sys: &S, fd: Fd, vaddrout: u64, size: u64) -> Result<(), Error> {
    let mut m = fastrpc_ioctl_munmap { vaddrout, size };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MUNMAP, &mut m))
}

/// `FASTRPC_IOCTL_MUNMAP_64`.
pub fn munmap_64<S: Syscalls + ?Sized>(sys: &S, fd: Fd, vaddrout: u64, size: u64) -> Result<(), Error> {
    let mut m = fastrpc_ioctl_munmap_64 { vaddrout, size };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MUNMAP_64, &mut m))
}

/// `FASTRPC_IOCTL_MUNMAP_FD`: drops one reference of the driver's map of `buf` covering
/// `[va, va + len)`; no DSP message. Fails with `EPERM` (-1) if none covers it.
pub fn munmap_fd<S: Syscalls + ?Sized>(sys: &S, fd: Fd, buf: Fd, va: u64, len: i64) -> Result<(), Error> {
    let mut m = fastrpc_ioctl_munmap_fd { fd: buf.0, flags: 0, va, len };
    check_rc(ioctl_plain(sys, fd, ioctl::FASTRPC_IOCTL_MUNMAP_FD, &mut m))
}

/// Reads an errno-or-value result of a raw call made through [`Syscalls::ioctl`] the way the
/// typed calls do. Exposed for callers that build raw requests (the bench's fidelity tests).
pub fn check(rc: Result<i32, Errno>) -> Result<(), Error> {
    check_rc(rc)
}
