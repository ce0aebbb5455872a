//! The simulated downstream adsprpc driver (`/dev/adsprpc-smd` of the board), kernel-abi.md 2.
//!
//! Requests are matched by their full 32-bit number (anything else is `ENOTTY`), each argument
//! struct is copied from the raw pointer with the size the driver uses, and a faulting copy is
//! -1 / `EPERM`. INVOKE follows 2.7: LENGTH(sc) 16-byte `remote_arg`s (and `fds[]`/`attrs[]` of
//! that length when the pointers are non-null) are copied in; a wrapping buffer is -1; handles
//! need an ION fd (plain INVOKE with handles is -1) and get a driver map, keyed by the fd
//! NUMBER, that the call never releases: only the DSP's fdlist (successful calls), MUNMAP_FD
//! (one reference, no DSP message, -1 when no map covers the range) or close does; a later call
//! that passes a number with a map reuses it whatever the number names now, and the DSP gets the
//! map's buffer (`fastrpc_mmap_find` matches the number only); in-buffers are copied in, out-buffers start with
//! stale bytes and are copied back only when the DSP returned 0; the 64-bit `remote_arg64`
//! records go to the DSP model. A user invoke waits interruptibly with no timeout: an interrupt
//! ([`Syscalls::interrupt`](hexrpc_drivers::Syscalls::interrupt)) parks the context, which only the
//! same thread with the same scalars word resumes (another sc is -1) and close frees.
//!
//! The downstream model is a reading of the comma three's source (`drivers/char/adsprpc.c` of
//! commaai `agnos-kernel-sdm845`), not the driver run; each function below names the driver
//! functions it follows. In short:
//! * **After a DSP restart** a file whose restart counter is older (GETINFO or its last INIT
//!   before the restart) is stale: a call in flight and every later INVOKE* return **+104** from
//!   the ioctl with no errno (the tail of `fastrpc_internal_invoke`; `fastrpc_invoke_send` sends
//!   nothing); MMAP with ADD_PAGES +104, MMAP of an fd or a heap and MUNMAP -1 (`EPERM`, their
//!   DSP message is under a VERIFY); GETINFO, SETMODE, CONTROL, GETPERF and MUNMAP_FD work; its
//!   close sends no release; an INIT revives it.
//! * **INIT** (`init`) opens or joins the channel first (`fastrpc_channel_open`, a reference
//!   counted `kref`, [`ChannelReopen`](crate::ChannelReopen) after a restart), is never refused
//!   by the kernel when repeated (each repeat takes a channel reference that no close puts back,
//!   and a repeated CREATE leaks its init memory), and ATTACH creates no process.
//! * **MMAP with the heap flags** 4 / 8 (`heap_mmap`) allocates unzeroed memory kept on a
//!   driver-global list that no file owns ([`Bench::global_heap_maps`](crate::Bench::global_heap_maps));
//!   **MUNMAP** by DSP address reaches it from any file.
//! * **Calls go by identity** (`send_check`): a user invoke carries the file's identity (the
//!   opener's tgid, bit 30 after SETMODE(SESSION) at any time, INIT or not) and reaches the DSP
//!   process that holds it, whichever file created it; a file with GETINFO but no INIT sends once
//!   any file has the channel open (-1 while none has); an identity without a process is
//!   answered `AEE_EBADSTATE` (a choice, `NO_PROCESS`).
//! * **Buffer arguments with a buffer fd** (`map_buffer`, `get_args`) are mapped when the fd is
//!   a dma-buf (else silently copied): the DSP reads and writes them in place in the dma-buf's
//!   memory (an out-buffer's writes are there after a DSP error), at the page offset from the VMA
//!   holding the map's creation address, checked only at the start; `FASTRPC_ATTR_KEEP_MAP`
//!   keeps the map after the call. fd 0 and -1 buffers are copied as before.
//! * **Copies overlap** (`build_overlap`): one kernel copy buffer holds every copied argument;
//!   an argument inside another shares its bytes, a partial overlap copies only its tail.
//! * **A failed call** puts its buffer maps back and nothing else (`context_free`): the handle
//!   maps it made or referenced keep their references. Handle maps have va 0 and len 0: only
//!   MUNMAP_FD(fd, 0, 0) reaches them (`munmap_fd`, newest map first).
//! * **GETINFO** (`getinfo`) that found no free session fails on that file for good.
//! * **Oopses** ([`Bench::oopses`](crate::Bench::oopses)): MMAP(ADD_PAGES) before GETINFO is a
//!   NULL dereference (the file is then poisoned: every later ioctl on it fails with `EIO`, where
//!   a device's task died holding the file's map mutex and its close would hang), an invoke
//!   before GETINFO reads `channel[-1]` (-1 here).
//!
//! Where the model is not the driver:
//! * a mapped buffer: the bench knows only the host mappings made through it, so a map whose
//!   creation address lies in none of them (a buffer fd passed with a pointer into other memory)
//!   finds the next bench mapping or none (-1), where a device's `find_vma` finds whatever VMA
//!   lies there; bytes past the dma-buf's end read as 0 and the DSP's writes there are dropped
//!   (a device maps whatever the SMMU holds there, or faults); the DSP's in-place writes land
//!   when the call ends on the DSP, not one by one; a `NOVA` map is taken from byte 0;
//! * overlapping copies: a copy the driver would place before its own buffer (a copied argument
//!   partly overlapping an earlier *mapped* one, the driver's memory-corruption case) is refused
//!   with -1; the static interfaces (handles 0, 3, 4) get each argument's bytes separately (only
//!   library calls share them);
//! * a KEEP_MAP map whose import fails is not counted (the driver leaks the half-made map);
//! * MMAP finds a covering map of the same fd only among MMAP maps (the driver also finds
//!   buffer and handle maps, and the oldest rather than the newest);
//! * MMAP writes `vaddrout` back only if [`BenchConfig::mmap_writes_vaddrout`] (default off: the
//!   comma three's source never writes it, a newer CAF source does);
//! * kernel-originated DSP messages (INIT, MMAP, MUNMAP) complete at once unless a fault delays
//!   them; the release on close waits, with no limit, for
//!   its answer, which comes once the released process's running library calls have returned
//!   (or never, under a `Hang` fault, until the hangs are released or the DSP restarts);
//! * the DSP keys processes by the file's identity (tgid, bit 30 after SETMODE(SESSION)): INIT
//!   for an identity with a live process is answered `AEE_EBADSTATE` (the real code is not
//!   known); a second INIT on a file reaches the DSP, which refuses it the same way while the
//!   file's identity has a process; a call for an identity without a process is answered
//!   `AEE_EBADSTATE` (not known either); the kernel MMAP of a file without INIT is -1 (the
//!   driver sends it, with the tgid in its arguments, when another file has the channel open);
//!   only the board's channel has a DSP behind it (INIT on another channel is -1);
//! * the channel's glink link and port are two flags and a deadline
//!   ([`ChannelReopen`](crate::ChannelReopen)); a restart does not wait for a channel open
//!   holding the driver's mutex, as the restart notifier would;
//! * there is no ADSP: the global heap maps are never drained (an ADSP restart would), the TZ
//!   protect of a HEAP_ADDR map is taken to succeed and the hyp-assign of a REMOTE_HEAP_ADDR map
//!   (to sdm845's empty VM list) to fail;
//! * GETPERF's per-thread record holds only the invoke count and the tid (the real one also leaks
//!   a kernel list node); SMMU faults (+39) are never simulated;
//! * a resumed invoke copies back to the user pointers of the *interrupted* call, as the kernel
//!   does: callers must keep those buffers alive until the resume or the close.
//!
//! [`BenchConfig::mmap_writes_vaddrout`]: crate::BenchConfig::mmap_writes_vaddrout

use std::sync::Arc;

use hexrpc_drivers::adsprpc::*;
use hexrpc_drivers::Errno;

use crate::account::{CallKind, Fault, OopsKind, PmQosOp, PmQosRecord};
use crate::state::{Shared, State};
use crate::user;

mod init;
mod invoke;
mod maps;
mod message;

use init::init;
pub(crate) use init::new_process;
use invoke::invoke;
use maps::{mmap, munmap, munmap_fd};
pub(crate) use message::{as_result, kernel_delay, COPIED};
use message::{eperm, Guard};

const KEYS: &[u8] = b"count:flush:map:copy:glink:getargs:putargs:invalidate:invoke:tid:ptr\0";

pub(crate) fn kind_of(request: u32) -> CallKind {
    match request {
        FASTRPC_IOCTL_INVOKE => CallKind::RpcInvoke,
        FASTRPC_IOCTL_INVOKE_FD => CallKind::RpcInvokeFd,
        FASTRPC_IOCTL_INVOKE_ATTRS => CallKind::RpcInvokeAttrs,
        FASTRPC_IOCTL_INVOKE_CRC => CallKind::RpcInvokeCrc,
        FASTRPC_IOCTL_MMAP => CallKind::RpcMmap,
        FASTRPC_IOCTL_MMAP_64 => CallKind::RpcMmap64,
        FASTRPC_IOCTL_MUNMAP => CallKind::RpcMunmap,
        FASTRPC_IOCTL_MUNMAP_64 => CallKind::RpcMunmap64,
        FASTRPC_IOCTL_MUNMAP_FD => CallKind::RpcMunmapFd,
        FASTRPC_IOCTL_SETMODE => CallKind::RpcSetmode,
        FASTRPC_IOCTL_INIT => CallKind::RpcInit,
        FASTRPC_IOCTL_INIT_ATTRS => CallKind::RpcInitAttrs,
        FASTRPC_IOCTL_GETINFO => CallKind::RpcGetinfo,
        FASTRPC_IOCTL_GETPERF => CallKind::RpcGetperf,
        FASTRPC_IOCTL_CONTROL => CallKind::RpcControl,
        _ => CallKind::RpcUnknown,
    }
}

/// The tail of `fastrpc_internal_invoke`: whatever happened, a file whose restart counter is
/// not the channel's gets **+104** (`ECONNRESET` as a positive value: the ioctl returns 104 and
/// sets no errno), a call in flight at the restart and every later call alike.
fn invoke_tail(st: Guard<'_>, file: u64, r: Result<i32, Errno>) -> (Guard<'_>, Result<i32, Errno>) {
    let stale = st.rpc_files.get(&file).is_some_and(|f| f.cid.is_some() && f.session_epoch != Some(st.epoch));
    (st, if stale { Ok(Errno::ECONNRESET.0) } else { r })
}

/// Handles one ioctl on FastRPC file `file`. `pre` is a fault already drawn for this call kind.
///
/// # Safety
///
/// `arg` must satisfy the `Syscalls::ioctl` contract for a plausible pointer.
pub(crate) unsafe fn ioctl<'a>(
    sh: &'a Arc<Shared>,
    st: Guard<'a>,
    file: u64,
    request: u32,
    arg: *mut core::ffi::c_void,
    pre: Option<Fault>,
) -> (Guard<'a>, Result<i32, Errno>) {
    let a = arg as usize as u64;
    let kind = kind_of(request);
    let mut st = st;
    if st.rpc_files.get(&file).is_some_and(|f| f.poisoned) {
        // The task that oopsed died holding this file's map mutex (the bench's stand-in).
        return (st, Err(Errno::EIO));
    }
    // SAFETY: every call below only needs `arg` to satisfy the ioctl contract, which our caller
    // guarantees.
    unsafe {
        match kind {
            k if k.is_invoke() => {
                if st.rpc_files.get(&file).is_some_and(|f| f.cid.is_none()) {
                    // fastrpc_internal_invoke keeps fl->cid (-1) and its tail compares
                    // fl->ssrcount with channel[-1].ssrcount: memory before gcinfo[].
                    st.oops(k, OopsKind::OutOfBoundsRead, "fastrpc_internal_invoke before GETINFO: its tail reads channel[-1].ssrcount");
                    return (st, eperm());
                }
                let (st, r) = invoke(sh, st, file, k, a, pre);
                invoke_tail(st, file, r)
            }
            CallKind::RpcInit | CallKind::RpcInitAttrs => init(sh, st, file, kind, a),
            CallKind::RpcMmap | CallKind::RpcMmap64 => mmap(sh, st, file, kind, a),
            CallKind::RpcMunmap | CallKind::RpcMunmap64 => munmap(sh, st, file, kind, a),
            CallKind::RpcGetinfo => {
                let mut st = unlocked_allocation_window(sh, st);
                let r = getinfo(sh, &mut st, file, a);
                (st, r)
            }
            _ => {
                let mut st = st;
                let r = match kind {
                    CallKind::RpcMunmapFd => munmap_fd(&mut st, file, a),
                    CallKind::RpcSetmode => setmode(&mut st, file, a as u32),
                    CallKind::RpcGetperf => getperf(&mut st, file, a),
                    CallKind::RpcControl => control(sh, &mut st, file, a),
                    _ => Err(Errno::ENOTTY),
                };
                (st, r)
            }
        }
    }
}

/// The window of `fastrpc_session_alloc_locked`, which GETINFO calls with no lock held
/// ([`BenchConfig::getinfo_window`](crate::BenchConfig::getinfo_window)): the GETINFO waits that
/// long with the bench's state unlocked, and one that begins while another waits is counted as a
/// pair that may share a context bank.
fn unlocked_allocation_window<'a>(sh: &'a Shared, st: Guard<'a>) -> Guard<'a> {
    let window = sh.cfg.getinfo_window;
    if window.is_zero() {
        return st;
    }
    let mut st = st;
    if st.getinfo_in_flight > 0 {
        st.counts.getinfo_overlaps += 1;
    }
    st.getinfo_in_flight += 1;
    let until = std::time::Instant::now() + window;
    while let Some(left) = until.checked_duration_since(std::time::Instant::now()).filter(|d| !d.is_zero()) {
        st = sh.wait_for(st, left);
    }
    st.getinfo_in_flight -= 1;
    st
}

/// GETINFO (`fastrpc_get_info`); a reading of the source, not the driver run. The first GETINFO
/// of a file with a valid channel number records the channel and the restart counter
/// (`fl->cid`, `fl->ssrcount`) **before** it allocates the SMMU session
/// (`fastrpc_session_alloc_locked`), so a failed allocation (all
/// [`BenchConfig::sessions_per_channel`](crate::BenchConfig::sessions_per_channel) taken) is
/// sticky: every later GETINFO on that file skips the allocation and fails the session check
/// (-1) for good, even once a session is free; a later GETINFO with another channel number is
/// ignored. An out-of-range channel number is -1 and records nothing.
unsafe fn getinfo(sh: &Shared, st: &mut State, file: u64, a: u64) -> Result<i32, Errno> {
    // SAFETY: passed on from the caller.
    let v: u32 = unsafe { user::read_struct(a) }.ok_or(Errno::EPERM)?;
    let cap = sh.cfg.sessions_per_channel;
    let taken = st.sessions;
    let epoch = st.epoch;
    let f = st.rpc_files.get_mut(&file).ok_or(Errno::EBADF)?;
    if f.cid.is_none() {
        if v >= NUM_CHANNELS {
            return eperm();
        }
        f.cid = Some(v);
        f.session_epoch = Some(epoch);
        if taken[v as usize] >= cap {
            return eperm();
        }
        f.session = true;
        st.sessions[v as usize] += 1;
    }
    if !st.rpc_files.get(&file).is_some_and(|f| f.session) {
        return eperm();
    }
    let out = u32::from(sh.cfg.smmu);
    // SAFETY: passed on from the caller.
    if !unsafe { user::copy_to_user(a, &out.to_le_bytes()) } {
        return eperm();
    }
    Ok(0)
}

unsafe fn control(sh: &Shared, st: &mut State, file: u64, a: u64) -> Result<i32, Errno> {
    // SAFETY: passed on from the caller.
    let mut c: fastrpc_ioctl_control = unsafe { user::read_struct(a) }.ok_or(Errno::EPERM)?;
    let f = st.rpc_files.get_mut(&file).ok_or(Errno::EBADF)?;
    match c.req {
        FASTRPC_CONTROL_LATENCY => {
            // fastrpc_internal_control: an enable of exactly 1 asks for the device tree's
            // latency, anything else for PM_QOS_DEFAULT_VALUE (no constraint); a zero latency
            // (no `qcom,rpc-latency-us`) is refused. No session, channel or INIT is needed.
            let latency_us = if c.lp.enable == 1 { sh.cfg.rpc_latency_us as i32 } else { -1 };
            if latency_us == 0 {
                return eperm();
            }
            let op = if f.qos_request { PmQosOp::Update } else { PmQosOp::Add };
            f.qos_request = true;
            let inited = f.inited;
            st.pm_qos_log.push(PmQosRecord { file, op, latency_us, inited });
            Ok(0)
        }
        FASTRPC_CONTROL_SMMU => Ok(0),
        FASTRPC_CONTROL_KALLOC => {
            f.kalloc = true;
            c.lp.enable = 1;
            let mut out = Vec::with_capacity(12);
            out.extend_from_slice(&c.req.to_le_bytes());
            out.extend_from_slice(&c.lp.enable.to_le_bytes());
            out.extend_from_slice(&c.lp.level.to_le_bytes());
            // SAFETY: passed on from the caller.
            if !unsafe { user::copy_to_user(a, &out) } {
                return eperm();
            }
            Ok(0)
        }
        _ => Err(Errno::ENOTTY),
    }
}

/// SETMODE (`fastrpc_device_ioctl`); a reading of the source, not the driver run. SESSION ORs
/// bit 30 into the file's identity at any time: after INIT every later call, MMAP and the
/// close's release name the new identity, not the process INIT made (`invoke::send_check`).
fn setmode(st: &mut State, file: u64, mode: u32) -> Result<i32, Errno> {
    let f = st.rpc_files.get_mut(&file).ok_or(Errno::EBADF)?;
    match mode {
        FASTRPC_MODE_PARALLEL | FASTRPC_MODE_SERIAL => f.mode = mode,
        FASTRPC_MODE_PROFILE => f.profile = true,
        FASTRPC_MODE_SESSION => f.tgid |= 1 << 30,
        _ => return Err(Errno::ENOTTY),
    }
    Ok(0)
}

unsafe fn getperf(st: &mut State, file: u64, a: u64) -> Result<i32, Errno> {
    // SAFETY: passed on from the caller.
    let mut p: fastrpc_ioctl_perf = unsafe { user::read_struct(a) }.ok_or(Errno::EPERM)?;
    p.numkeys = PERF_KEYS as u32;
    // SAFETY: passed on from the caller (the keys pointer is the caller's buffer).
    if p.keys != 0 && !unsafe { user::copy_to_user(p.keys, KEYS) } {
        return eperm();
    }
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    let f = st.rpc_files.get(&file).ok_or(Errno::EBADF)?;
    if let (true, Some(rec)) = (p.data != 0, f.perf.get(&tid)) {
        let bytes: Vec<u8> = rec.iter().flat_map(|v| v.to_le_bytes()).collect();
        // SAFETY: passed on from the caller.
        if !unsafe { user::copy_to_user(p.data, &bytes) } {
            return eperm();
        }
    }
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&p.data.to_le_bytes());
    out.extend_from_slice(&p.numkeys.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&p.keys.to_le_bytes());
    // SAFETY: passed on from the caller.
    if !unsafe { user::copy_to_user(a, &out) } {
        return eperm();
    }
    Ok(0)
}
