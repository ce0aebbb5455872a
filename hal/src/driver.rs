//! The FastRPC driver behind a session, chosen by the board ([`KernelAbi`]): every call the HAL
//! makes into the DSP goes through here, so the stages and the session are written once.
//!
//! Callers describe a call driver-neutrally ([`Call`]); right before the ioctl the backend
//! translates it, without allocating, into its own argument list: downstream the `remote_arg`
//! entries plus `fds[]`/`attrs[]` ([`Call::to_downstream`]), upstream per-argument
//! `{ptr, length, fd, attr}` records ([`Call::to_upstream`]), sent with the upstream request
//! numbers on the upstream descriptor type. How the two drivers differ, as the HAL sees it:
//!
//! | | downstream `/dev/adsprpc-smd` | upstream `/dev/fastrpc-cdsp` |
//! |---|---|---|
//! | channel | open, GETINFO(channel), CONTROL kalloc | open the domain's node (session taken at open) |
//! | process | INIT(CREATE) from the shell buffer | INIT_CREATE with the board's `process_attrs` (unsigned PD) |
//! | PM-QoS vote ([`LatencyPolicy`](crate::LatencyPolicy)) | CONTROL LATENCY after INIT, removed at release | none: not available |
//! | listener | INVOKE handle 3 on the same fd | the same |
//! | buffers | handles by fd with `FASTRPC_ATTR_NOVA` | handles by fd, attribute 0, length = the lease's (mapped per call) |
//! | out-buffers after a DSP error | not copied back | copied back (zeroed bytes) |
//! | DSP restart | +`ECONNRESET` / `ECONNRESET` | `EPIPE`; the node is gone until the DSP is back |
//! | interrupted call (deadline) | parked; resumable, so the fd is retired first | returns `EINTR`, never resumed |
//! | kernel messages | no timeout | 10 s, then `ETIMEDOUT` |
//! | handle maps after a call | kept (keyed by fd number) until fdlist, `MUNMAP_FD` or close; none released after a DSP error | kept until fdlist or close; no unmap by fd; found again by number only, or by number and dma-buf (`MapLookup`) |
//! | shell map of INIT | dropped at the end of INIT | kept until close |
//! | release on close | waits for the DSP, no limit | waits up to 10 s |
//! | second identity per process | `SETMODE(FASTRPC_MODE_SESSION)` before INIT | none |
//!
//! How the session lives with the last four rows (fd numbers kept clean or occupied, bounded
//! channel ends, one DSP identity per channel) is in the [`lease`](crate::lease) module and the
//! [`Session`](crate::Session) documentation.
//!
//! Persistent maps (`MEM_MAP`): the HAL does not make any. Every buffer the DSP touches is a
//! handle argument of the call that uses it, which the upstream driver maps for that call (the
//! v1/v2 entries `HAP_mmap` it and unmap it before returning); apps_mem's `request_map64` uses
//! `MMAP` (kernel pages), as downstream. A DSP-side design that keeps a buffer mapped across
//! calls would use `hexrpc_drivers::upstream::mem_map` / `mem_unmap`, which the session does not
//! offer today.
//!
//! Both restart signals are [`Cause::DspRestart`](crate::Cause::DspRestart)
//! (`Error::is_dsp_restart`); recovery is the same (close, reopen, rebuild), except that an
//! upstream node can be missing (`ENOENT`) for a while, which the recovery's retries absorb.

use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::upstream::{self, FastrpcFd};
use hexrpc_drivers::{adsprpc, BorrowedFd, Errno, Error, Fd, Mapping, Syscalls};

use crate::call::Call;

/// Serialises this process's GETINFOs ([`bind_channel`]).
static GETINFO: crate::sync::Mutex<()> = crate::sync::Mutex::new(());

/// Binds a freshly opened FastRPC descriptor to the board's channel. Returns the info word
/// (bit 0: the session has an SMMU): GETINFO downstream; upstream every session is an SMMU
/// context bank, so 1.
pub(crate) fn bind_channel<S: Syscalls + ?Sized>(sys: &S, board: &Board, rpc: Fd) -> Result<u32, Error> {
    match board.abi {
        KernelAbi::DownstreamMsm => {
            // One GETINFO at a time in this process: the comma three's `fastrpc_get_info` takes
            // the SMMU session with no lock (`fastrpc_session_alloc_locked` without
            // `smd_mutex`), so two at once can give two of our files one context bank
            // (docs/kernel-rules.md R20). Another FastRPC user of this process can still race.
            let _one = GETINFO.lock();
            let info = adsprpc::getinfo(sys, rpc, board.channel)?;
            adsprpc::control_kalloc(sys, rpc)?;
            Ok(info)
        }
        KernelAbi::Upstream => Ok(adsprpc::FASTRPC_INFO_SMMU),
    }
}

/// Creates the user process from the shell (`len` bytes of `shell`, a mapping of `shell_fd`).
pub(crate) fn create_process<S: Syscalls + ?Sized, M: Syscalls>(
    sys: &S,
    board: &Board,
    rpc: Fd,
    shell: &Mapping<M>,
    shell_fd: Fd,
    len: u32,
) -> Result<(), Error> {
    match board.abi {
        KernelAbi::DownstreamMsm => adsprpc::init(sys, rpc, adsprpc::FASTRPC_INIT_CREATE, shell, shell_fd, len),
        KernelAbi::Upstream => upstream::init_create(sys, FastrpcFd::from_raw(rpc), shell, shell_fd, len, board.process_attrs, 0),
    }
}

/// A call without handle arguments (remotectl, the listener, process exit). Downstream it is
/// resumed when interrupted; upstream an interruption returns `EINTR`.
pub(crate) fn invoke<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    board: &Board,
    rpc: Fd,
    handle: u32,
    call: &mut Call<'_, CAP>,
) -> Result<(), Error> {
    match board.abi {
        KernelAbi::DownstreamMsm => call.with_downstream(|down| adsprpc::invoke(sys, rpc, handle, down)).map_err(|_| Error::Invalid)?,
        KernelAbi::Upstream => {
            call.with_upstream(|up| upstream::invoke(sys, FastrpcFd::from_raw(rpc), handle, up)).map_err(|_| Error::Invalid)?
        }
    }
}

/// A library call with buffer handles (a kernel launch; on the upstream driver every handle
/// needs its buffer length, which the runtime's packer gives with `out_handle_sized`),
/// abandoned when interrupted while
/// `abandon()` is true: downstream the descriptor is retired first (the parked call could
/// otherwise be resumed into buffers that are gone); upstream nothing is resumed, so `EINTR`
/// is returned as it is. An `EINTR` upstream while `abandon()` is false (a stray signal) is
/// returned too: the call cannot be resumed and may still run on the DSP.
pub(crate) fn invoke_handles<S: Syscalls + ?Sized, const CAP: usize>(
    sys: &S,
    board: &Board,
    rpc: BorrowedFd<'_>,
    handle: u32,
    call: &mut Call<'_, CAP>,
    abandon: &dyn Fn() -> bool,
) -> Result<(), Error> {
    match board.abi {
        KernelAbi::DownstreamMsm => {
            call.with_downstream(|down| adsprpc::invoke_attrs_abandonable(sys, rpc, handle, down, abandon)).map_err(|_| Error::Invalid)?
        }
        KernelAbi::Upstream => {
            match call.with_upstream(|up| upstream::invoke(sys, FastrpcFd::from_raw(rpc.raw()), handle, up)).map_err(|_| Error::Invalid)? {
                Err(Error::Os(Errno::EINTR)) if !abandon() => {
                    log::warn!("an upstream FastRPC call was interrupted by a signal that was not a deadline; it cannot be resumed");
                    Err(Error::Os(Errno::EINTR))
                }
                r => r,
            }
        }
    }
}
