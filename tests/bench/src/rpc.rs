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

use std::cell::Cell;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use hexrpc_drivers::adsprpc::*;
use hexrpc_drivers::{aee, Errno, Scalars};
use zerocopy::FromBytes;

use crate::account::{CallKind, DspCallKind, Fault, FaultTarget, OopsKind};
use crate::dsp::{self, Job, STALE_BYTE};
use crate::elf;
use crate::entry::HandleBuf;
use crate::state::{Ctx, DspMap, DspProcess, GlobalMap, MapKind, Shared, State};
use crate::user;

type Guard<'a> = MutexGuard<'a, State>;

thread_local! {
    /// Bytes copied and simulated DSP time of the current thread's ioctl (for the cost model).
    pub(crate) static COPIED: Cell<(u64, Duration)> = const { Cell::new((0, Duration::ZERO)) };
}

const KEYS: &[u8] = b"count:flush:map:copy:glink:getargs:putargs:invalidate:invoke:tid:ptr\0";
/// Kernel virtual addresses of the driver's copies (what `remote_arg64.pv` holds for buffers).
const KVA_BASE: u64 = 0xFFFF_FF80_1000_0000;
const FASTRPC_CTX_MAX: usize = 256;
/// What the simulated DSP answers to a create/attach for an identity that already has a live
/// process (Qualcomm: "considered a bad request"; the real code is not known).
pub(crate) const IDENTITY_IN_USE: i32 = aee::AEE_EBADSTATE;

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

fn eperm<T>() -> Result<T, Errno> {
    Err(Errno::EPERM)
}

/// A DSP answer turned into an ioctl result: -1..-4095 are errnos, anything else is returned.
pub(crate) fn as_result(rv: i32) -> Result<i32, Errno> {
    if (-4095..=-1).contains(&rv) {
        Err(Errno(-rv))
    } else {
        Ok(rv)
    }
}

/// Sleeps or hangs uninterruptibly for a kernel-originated message, with the lock released.
pub(crate) fn kernel_delay<'a>(sh: &'a Shared, mut st: Guard<'a>, fault: Option<Fault>) -> Guard<'a> {
    match fault {
        Some(Fault::Delay(d)) => {
            let end = Instant::now() + d;
            loop {
                let now = Instant::now();
                if now >= end {
                    return st;
                }
                st = sh.wait_for(st, end - now);
            }
        }
        Some(Fault::Hang) => {
            let (gen, epoch) = (st.hang_generation, st.epoch);
            while st.hang_generation == gen && st.epoch == epoch {
                st = sh.wait(st);
            }
            st
        }
        _ => st,
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
            _ => {
                let mut st = st;
                let r = match kind {
                    CallKind::RpcMunmapFd => munmap_fd(&mut st, file, a),
                    CallKind::RpcSetmode => setmode(&mut st, file, a as u32),
                    CallKind::RpcGetinfo => getinfo(sh, &mut st, file, a),
                    CallKind::RpcGetperf => getperf(&mut st, file, a),
                    CallKind::RpcControl => control(sh, &mut st, file, a),
                    _ => Err(Errno::ENOTTY),
                };
                (st, r)
            }
        }
    }
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
            if c.lp.enable == 1 && sh.cfg.rpc_latency_us == 0 {
                return eperm();
            }
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
/// close's release name the new identity, not the process INIT made ([`send_check`]).
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

/// Draws and applies a DSP-side fault for a kernel-originated message. Returns the DSP's result
/// if the fault replaces it.
fn kernel_message<'a>(sh: &'a Shared, mut st: Guard<'a>, kind: DspCallKind) -> (Guard<'a>, Option<i32>) {
    st.count_dsp(kind);
    let fault = st.fault(FaultTarget::Dsp(kind));
    match fault {
        Some(Fault::Errno(e)) => (st, Some(e.0)),
        Some(Fault::Returned(v)) => (st, Some(v)),
        other => (kernel_delay(sh, st, other), None),
    }
}

/// `fastrpc_channel_open`, the first step of every INIT (`fastrpc_init_process`); a reading of
/// the source, not the driver run. Under the driver's global `smd_mutex` (a channel open
/// waiting here holds it, and a close's session free waits for it): no session (`fl->sctx`) is
/// -1; while the subsystem is down after a restart `ENOTCONN`; then the file's restart counter
/// is refreshed (a stale file is revived) and `fl->refcount` set, whatever follows. An open
/// channel is joined by `kref_get_unless_zero` (a file that INITs twice takes two references
/// and its close puts one back: the channel can then never close). A closed one is opened
/// (`fastrpc_glink_register`, `fastrpc_glink_open`): the glink link must be up and the port
/// DISCONNECTED, and the driver then always waits for the port's `GLINK_CONNECTED` up to
/// `RPC_TIMEOUT` ([`BenchConfig::port_connect_timeout`](crate::BenchConfig::port_connect_timeout)):
/// a failed open costs the whole wait and is -1; a connect that never comes leaves the port
/// CONNECTING for good ([`ChannelReopen`](crate::ChannelReopen)). A working open `kref_init`s
/// the channel. Only the board's channel has a DSP behind it (any other is -1, a bench choice).
fn channel_open<'a>(sh: &'a Shared, st: Guard<'a>, file: u64) -> (Guard<'a>, Result<(), Errno>) {
    let mut st = st;
    while st.smd_busy {
        st = sh.wait(st);
    }
    let (epoch, down) = (st.epoch, st.dsp_down);
    let Some(f) = st.rpc_files.get_mut(&file) else { return (st, Err(Errno::EBADF)) };
    if !f.session || f.cid != Some(sh.cfg.board.channel) {
        return (st, eperm());
    }
    if down {
        return (st, Err(Errno::ENOTCONN));
    }
    f.session_epoch = Some(epoch);
    f.holds_ref = true;
    f.channel_epoch = Some(epoch);
    // kref_get_unless_zero (4.9's atomic arithmetic: any non-zero value is incremented).
    let got = st.chan_kref != 0;
    if got {
        st.chan_kref += 1;
        if st.channel_open == Some(epoch) {
            return (st, Ok(()));
        }
    }
    let link_up = st.link_up_at.is_none_or(|t| Instant::now() >= t);
    let port_opened = link_up && !st.port_stuck;
    if port_opened && !st.stuck_pending {
        st.chan_kref = 1;
        st.channel_open = Some(epoch);
        return (st, Ok(()));
    }
    // No early exit: the wait for the port's completion runs whether glink_open failed or not.
    st.smd_busy = true;
    let end = Instant::now() + sh.cfg.port_connect_timeout;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        st = sh.wait_for(st, end - now);
    }
    st.smd_busy = false;
    if port_opened {
        // glink_open set CONNECTING and nothing ever resets it.
        st.stuck_pending = false;
        st.port_stuck = true;
    }
    st.counts.channel_open_failures += 1;
    sh.cv.notify_all();
    (st, eperm())
}

/// INIT / INIT_ATTRS (`fastrpc_init_process`); a reading of the source, not the driver run. The
/// kernel never refuses a second INIT on a file: each one opens or joins the channel again
/// ([`channel_open`], a channel reference its close never puts back) and sends its message; the
/// DSP refuses a create for an identity with a live process (`AEE_EBADSTATE` on the bench).
/// CREATE allocates the process's init memory, `ALIGN(max(3 MiB, 4 * filelen), 1 MiB)`, before
/// the message and stores it over `fl->init_mem`: a second CREATE leaks the first for good
/// ([`Snapshot::init_buffers`](crate::Snapshot::init_buffers)); `init.mem` non-zero is `EINVAL`.
/// ATTACH / ATTACH_SENSORS send their message and create no process. A restart during the
/// message makes it +104 (the invoke's tail).
unsafe fn init<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, kind: CallKind, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let init: Option<fastrpc_ioctl_init> = unsafe {
        if kind == CallKind::RpcInit {
            user::read_struct(a)
        } else {
            user::read_struct::<fastrpc_ioctl_init_attrs>(a).map(|i| i.init)
        }
    };
    let Some(init) = init else { return (st, eperm()) };
    if init.filelen >= INIT_FILELEN_MAX || init.memlen >= INIT_MEMLEN_MAX {
        return (st, eperm());
    }
    let (st2, opened) = channel_open(sh, st, file);
    st = st2;
    if let Err(e) = opened {
        return (st, Err(e));
    }
    let epoch = st.epoch;
    let shell = match init.flags {
        FASTRPC_INIT_CREATE => {
            let image = if init.filelen == 0 {
                Vec::new()
            } else {
                if !user::range_ok(init.file, init.filelen as u64) {
                    return (st, eperm());
                }
                let Some(buf) = st.dmabuf(init.filefd) else { return (st, eperm()) };
                let end = init.file + init.filelen as u64;
                let covered =
                    st.host_maps.iter().any(|(&ad, m)| m.buf == Some(buf) && init.file >= ad as u64 && end <= ad as u64 + m.len as u64);
                if !covered {
                    return (st, eperm());
                }
                // SAFETY: the range lies inside a live shared mapping made through this bench
                // (checked above under the lock that `munmap` also takes).
                match unsafe { user::copy_from_user(init.file, init.filelen as usize) } {
                    Some(b) => b,
                    None => return (st, eperm()),
                }
            };
            if init.mem != 0 {
                return (st, Err(Errno::EINVAL));
            }
            let memlen = u64::from(init.filelen.saturating_mul(4)).max(3 << 20).next_multiple_of(1 << 20);
            let s = &mut *st;
            if let Some(f) = s.rpc_files.get_mut(&file) {
                if f.init_mem.replace(memlen).is_some() {
                    s.init_leaked += 1;
                }
            }
            Some(image)
        }
        FASTRPC_INIT_ATTACH | FASTRPC_INIT_ATTACH_SENSORS => None,
        FASTRPC_INIT_CREATE_STATIC => {
            if init.filelen == 0 {
                return (st, Ok(0));
            }
            None
        }
        _ => return (st, Err(Errno::ENOTTY)),
    };
    let (st2, replaced) = kernel_message(sh, st, DspCallKind::CreateProcess);
    st = st2;
    if let Some(v) = replaced {
        return (st, as_result(v));
    }
    if st.epoch != epoch {
        return (st, Ok(Errno::ECONNRESET.0));
    }
    // The DSP keys processes by the identity in the message (tgid, with the session bit after
    // SETMODE(SESSION)): a second create for a live identity is a bad request.
    let identity = st.rpc_files.get(&file).map_or(0, |f| f.tgid);
    if st.process_of_identity(identity).is_some() {
        return (st, Ok(IDENTITY_IN_USE));
    }
    if let Some(image) = &shell {
        if elf::check_hexagon_elf(image).is_err() {
            return (st, Ok(aee::AEE_EBADELF));
        }
    }
    if matches!(init.flags, FASTRPC_INIT_ATTACH | FASTRPC_INIT_ATTACH_SENSORS) {
        return (st, Ok(0));
    }
    let pid = new_process(&mut st, file);
    if let Some(f) = st.rpc_files.get_mut(&file) {
        f.proc_id = Some(pid);
    }
    (st, Ok(0))
}

/// A fresh DSP process for FastRPC file `file`; returns its id.
pub(crate) fn new_process(st: &mut State, file: u64) -> u64 {
    let identity = st.rpc_files.get(&file).map_or(0, |f| f.tgid);
    let pid = st.id();
    st.procs.insert(
        pid,
        DspProcess {
            file,
            identity,
            alive: true,
            listener_init: false,
            apps_std: None,
            libs: Default::default(),
            hap: Vec::new(),
            lease_maps: Vec::new(),
            queue: Default::default(),
            inflight: Default::default(),
            next_dva: 0x2000_0000,
            next_lib: 0x0001_0000,
            shell: None,
        },
    );
    pid
}

/// Whether the file can send to the DSP (`fastrpc_invoke_send`): a session (`fl->sctx`, else
/// -1); an INIT of this file that opened or joined the channel (else -1: the driver would also
/// send on a channel another file opened, which the bench does not model); a current restart
/// counter (else `ECONNRESET`, which the callers turn into the invoke tail's +104 or their own
/// -1); the channel still open (else -1).
fn can_send(st: &State, file: u64) -> Result<(), Errno> {
    let f = st.rpc_files.get(&file).ok_or(Errno::EBADF)?;
    if !f.session || f.channel_epoch.is_none() {
        return eperm();
    }
    if f.session_epoch != Some(st.epoch) {
        return Err(Errno::ECONNRESET);
    }
    if st.channel_open != Some(st.epoch) {
        return eperm();
    }
    Ok(())
}

/// MMAP / MMAP_64 (`fastrpc_internal_mmap`), by flags. A reading of the comma three's source,
/// not the driver run; `vaddrout` is never written back unless
/// [`BenchConfig::mmap_writes_vaddrout`](crate::BenchConfig::mmap_writes_vaddrout).
/// * `ADSP_MMAP_ADD_PAGES`: `vaddrin` must be 0 (`EINVAL`), size 0 is -1; the buffer
///   (`fastrpc_buf_alloc`, `remote` 1) needs the file's SMMU session: without GETINFO the driver
///   dereferences `fl->sctx` NULL, an oops ([`Bench::oopses`](crate::Bench::oopses)): the
///   bench poisons the file and returns `EFAULT`. The buffer is listed on the file before the
///   DSP is told (`fastrpc_mmap_on_dsp`); whatever that returns is the ioctl's result (a DSP
///   error, -1, or +104 for a stale file), and a buffer the DSP did not take stays listed with
///   DSP address 0 (no MUNMAP finds it) until close.
/// * `ADSP_MMAP_HEAP_ADDR` (4) / `ADSP_MMAP_REMOTE_HEAP_ADDR` (8): see [`heap_mmap`].
/// * anything else: a map of the dma-buf `fd` (`fastrpc_mmap_create`); a covering map of the
///   same fd is taken again with no DSP message; every failure is -1 (the DSP message is
///   wrapped in a VERIFY).
unsafe fn mmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, kind: CallKind, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(mut m) = (unsafe { user::read_struct::<fastrpc_ioctl_mmap>(a) }) else { return (st, eperm()) };
    let Some(f) = st.rpc_files.get(&file) else { return (st, Err(Errno::EBADF)) };
    let session = f.session;
    let writes = sh.cfg.mmap_writes_vaddrout;
    let copy_back = |m: &fastrpc_ioctl_mmap| {
        // SAFETY: `a` is the caller's MMAP struct, passed on from our caller.
        unsafe { user::copy_to_user(a, zerocopy::IntoBytes::as_bytes(m)) }
    };
    match m.flags {
        ADSP_MMAP_ADD_PAGES => {
            if m.vaddrin != 0 {
                return (st, Err(Errno::EINVAL));
            }
            if m.size == 0 {
                return (st, eperm());
            }
            if !session {
                st.oops(
                    kind,
                    OopsKind::NullDereference,
                    "fastrpc_buf_alloc (MMAP ADD_PAGES before GETINFO): dma_alloc_attrs on fl->sctx->smmu.dev with fl->sctx NULL",
                );
                if let Some(f) = st.rpc_files.get_mut(&file) {
                    f.poisoned = true;
                }
                return (st, Err(Errno::EFAULT));
            }
            if m.size > sh.cfg.ion_capacity {
                return (st, Err(Errno::ENOMEM));
            }
            let (st2, r) = kernel_invoke(sh, st, file, kind, DspCallKind::KernelMmap);
            st = st2;
            let raddr = if r.is_ok() { st.alloc_raddr(file, m.size, true) } else { 0 };
            if let Some(f) = st.rpc_files.get_mut(&file) {
                f.maps.push(DspMap::add_pages(m.size, raddr));
            }
            if let Err(v) = r {
                return (st, as_result(v));
            }
            if writes {
                m.vaddrout = raddr;
            }
            (st, if copy_back(&m) { Ok(0) } else { eperm() })
        }
        ADSP_MMAP_HEAP_ADDR | ADSP_MMAP_REMOTE_HEAP_ADDR => {
            let (st, r) = heap_mmap(sh, st, file, kind, &mut m);
            match r {
                Ok(()) => (st, if copy_back(&m) { Ok(0) } else { eperm() }),
                Err(e) => (st, Err(e)),
            }
        }
        _ => {
            let end = m.vaddrin.checked_add(m.size);
            let f = st.rpc_files.get_mut(&file).expect("looked up above");
            if let Some(existing) = f
                .maps
                .iter_mut()
                .find(|x| x.kind == MapKind::Fd && x.fd == m.fd && end.is_some_and(|e| x.va <= m.vaddrin && e <= x.va + x.len))
            {
                existing.refs += 1;
                if writes {
                    m.vaddrout = existing.raddr;
                }
                return (st, if copy_back(&m) { Ok(0) } else { eperm() });
            }
            if !session || m.size == 0 {
                return (st, eperm());
            }
            let Some(b) = st.dmabuf(m.fd) else { return (st, eperm()) };
            let buf_len = st.buffers.get(&b).map_or(0, |b| b.len);
            if m.size > buf_len {
                return (st, eperm());
            }
            let (st2, r) = kernel_invoke(sh, st, file, kind, DspCallKind::KernelMmap);
            st = st2;
            if r.is_err() {
                return (st, eperm());
            }
            // The buffer may have gone while the message was out (the map would have held it).
            let Some(bb) = st.buffers.get_mut(&b) else { return (st, eperm()) };
            bb.driver_maps += 1;
            let raddr = st.alloc_raddr(file, m.size, true);
            let Some(f) = st.rpc_files.get_mut(&file) else { return (st, Err(Errno::EBADF)) };
            // The DSP is told the whole buffer's IOVA length (`map->size`).
            f.maps.push(DspMap {
                kind: MapKind::Fd,
                fd: m.fd,
                buf: Some(b),
                va: m.vaddrin,
                len: m.size,
                raddr,
                refs: 1,
                size: buf_len,
                attr: 0,
                id: 0,
            });
            if writes {
                m.vaddrout = raddr;
            }
            (st, if copy_back(&m) { Ok(0) } else { eperm() })
        }
    }
}

/// Kernel addresses (`map->va`, the DMA cookie) of the driver-global heap maps.
const HEAP_COOKIE_BASE: u64 = 0xFFFF_FF90_0000_0000;

/// MMAP with `ADSP_MMAP_HEAP_ADDR` (4) or `ADSP_MMAP_REMOTE_HEAP_ADDR` (8), after
/// `fastrpc_internal_mmap`, `fastrpc_mmap_find`, `fastrpc_mmap_create`, `fastrpc_mmap_add` and
/// `fastrpc_mmap_on_dsp`; a reading of the source, not the driver run. The fd is never imported
/// (any value, -1 included, is only a lookup key); a map on the driver-global list with that fd
/// whose kernel address range covers `vaddrin..+size` is taken again (no user address can
/// name one, in practice); otherwise `size` bytes come from the heap region
/// ([`BenchConfig::heap_region_bytes`](crate::BenchConfig::heap_region_bytes)), **unzeroed**
/// (the bench fills them with [`STALE_BYTE`]), and the map goes on the global list, owned by no
/// file: no close frees it, only a MUNMAP of its DSP address and length from any file (or an
/// ADSP restart, which the bench never makes: its restarts are the CDSP's). After the DSP took
/// the pages, flag 4 protects them through TZ (assumed to succeed: its result is not known) and
/// flag 8 hyp-assigns them to the channel's remote-heap VM list, which sdm845's device tree
/// leaves empty (no `qcom,adsp-remoteheap-vmid`, vmcount 0): the bench takes that call to fail
/// (the source does not say what a zero-length list does), so the bail path frees memory the DSP
/// still maps, recorded as an [`OopsKind::FreedWhileDspMapped`]. Every failure is -1 (`EPERM`).
fn heap_mmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, kind: CallKind, m: &mut fastrpc_ioctl_mmap) -> (Guard<'a>, Result<(), Errno>) {
    let mut st = st;
    let end = m.vaddrin.checked_add(m.size);
    if let Some(g) = st.global_maps.iter_mut().rev().find(|g| g.fd == m.fd && end.is_some_and(|e| g.va <= m.vaddrin && e <= g.va + g.len)) {
        g.refs += 1;
        return (st, Ok(()));
    }
    if m.size == 0 || st.heap_bytes.saturating_add(m.size) > sh.cfg.heap_region_bytes {
        return (st, eperm());
    }
    let Ok(len) = usize::try_from(m.size) else { return (st, eperm()) };
    st.heap_bytes += m.size;
    let va = HEAP_COOKIE_BASE + st.heap_bytes;
    let (st2, r) = kernel_invoke(sh, st, file, kind, DspCallKind::KernelMmap);
    st = st2;
    let mut ok = r.is_ok();
    if ok && m.flags == ADSP_MMAP_REMOTE_HEAP_ADDR {
        st.oops(
            kind,
            OopsKind::FreedWhileDspMapped,
            "fastrpc_mmap_on_dsp (MMAP REMOTE_HEAP_ADDR): hyp_assign_phys to an empty remote-heap VM list fails after the DSP mapped \
             the pages; the bail path frees them (fastrpc_mmap_free) without a DSP unmap",
        );
        ok = false;
    }
    if !ok {
        st.heap_bytes -= m.size;
        return (st, eperm());
    }
    let raddr = st.alloc_raddr(file, m.size, true);
    st.global_maps.push(GlobalMap { flags: m.flags, fd: m.fd, va, len: m.size, raddr, refs: 1, mem: vec![STALE_BYTE; len] });
    if sh.cfg.mmap_writes_vaddrout {
        m.vaddrout = raddr;
    }
    (st, Ok(()))
}

/// A kernel-originated invoke on the file (`fastrpc_internal_invoke` with `kernel` 1, as
/// `fastrpc_mmap_on_dsp` and `fastrpc_munmap_on_dsp` send it; with `CONFIG_COMPAT=y`, the comma
/// three's, their methods are 4 and 5, which the bench does not log). `Err` carries what that
/// invoke returns: -1 when it cannot send (no session, no channel), +104 when the file's restart
/// counter is stale before or after the message (the invoke's tail; nothing is sent), the DSP's
/// answer otherwise. Before GETINFO the tail reads `channel[-1]`
/// ([`OopsKind::OutOfBoundsRead`]; the bench answers -1).
fn kernel_invoke<'a>(sh: &'a Shared, mut st: Guard<'a>, file: u64, request: CallKind, kind: DspCallKind) -> (Guard<'a>, Result<(), i32>) {
    let Some(f) = st.rpc_files.get(&file) else { return (st, Err(-1)) };
    if f.cid.is_none() {
        st.oops(request, OopsKind::OutOfBoundsRead, "fastrpc_internal_invoke before GETINFO: its tail reads channel[-1].ssrcount");
        return (st, Err(-1));
    }
    let stale = |st: &State| st.rpc_files.get(&file).is_none_or(|f| f.session_epoch != Some(st.epoch));
    if stale(&st) {
        return (st, Err(Errno::ECONNRESET.0));
    }
    if can_send(&st, file).is_err() {
        return (st, Err(-1));
    }
    let (st, replaced) = kernel_message(sh, st, kind);
    if stale(&st) {
        return (st, Err(Errno::ECONNRESET.0));
    }
    match replaced {
        Some(v) if v != 0 => (st, Err(v)),
        _ => (st, Ok(())),
    }
}

/// MUNMAP / MUNMAP_64 (`fastrpc_internal_munmap`); a reading of the source, not the driver run.
/// In order: an ADD_PAGES buffer of the file with this (non-zero) DSP address and size; else
/// (`fastrpc_mmap_remove`) the newest map with this DSP address and length and one reference,
/// on the driver-global heap list first (**any** file's: no owner check), then the file's own
/// maps. The map is unlinked, the DSP told (`fastrpc_munmap_on_dsp`; for a heap map also
/// `fastrpc_munmap_on_dsp_rh`, folded into the same message here), and freed; a failure of the
/// message (a DSP error, no channel, a stale file) puts it back. Every failure is -1 (`EPERM`).
unsafe fn munmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, kind: CallKind, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(m) = (unsafe { user::read_struct::<fastrpc_ioctl_munmap>(a) }) else { return (st, eperm()) };
    let Some(f) = st.rpc_files.get(&file) else { return (st, Err(Errno::EBADF)) };
    let remote_buf = f.maps.iter().any(|x| x.kind == MapKind::AddPages && x.raddr != 0 && x.raddr == m.vaddrout && x.len == m.size);
    if remote_buf {
        let (st2, r) = kernel_invoke(sh, st, file, kind, DspCallKind::KernelMunmap);
        st = st2;
        if r.is_err() {
            return (st, eperm());
        }
        if let Some(f) = st.rpc_files.get_mut(&file) {
            if let Some(i) = f.maps.iter().rposition(|x| x.kind == MapKind::AddPages && x.raddr == m.vaddrout && x.len == m.size) {
                f.maps.remove(i);
            }
        }
        return (st, Ok(0));
    }
    if let Some(i) = st.global_maps.iter().rposition(|g| g.raddr == m.vaddrout && g.len == m.size && g.refs == 1) {
        let g = st.global_maps.remove(i);
        let (st2, r) = kernel_invoke(sh, st, file, kind, DspCallKind::KernelMunmap);
        st = st2;
        if r.is_err() {
            st.global_maps.push(g);
            return (st, eperm());
        }
        st.heap_bytes = st.heap_bytes.saturating_sub(g.len);
        return (st, Ok(0));
    }
    let Some(f) = st.rpc_files.get_mut(&file) else { return (st, Err(Errno::EBADF)) };
    let Some(i) = f.maps.iter().rposition(|x| x.kind != MapKind::AddPages && x.raddr == m.vaddrout && x.len == m.size && x.refs == 1)
    else {
        return (st, eperm());
    };
    let map = f.maps.remove(i);
    let (st2, r) = kernel_invoke(sh, st, file, kind, DspCallKind::KernelMunmap);
    st = st2;
    if r.is_err() {
        if let Some(f) = st.rpc_files.get_mut(&file) {
            f.maps.push(map);
        }
        return (st, eperm());
    }
    st.release_driver_map(map.buf);
    (st, Ok(0))
}

/// MUNMAP_FD (`fastrpc_internal_munmap_fd`); a reading of the source, not the driver run: no DSP
/// message; the **newest** map of the file with this fd whose `[va, va + len)` holds the request's
/// range (`fastrpc_mmap_find`: the list is added at its head and searched from it) loses one
/// reference, -1 when none matches. A handle map has va 0 and len 0, so only `(fd, 0, 0)`
/// reaches it (`(fd, 0, n > 0)` is -1 and leaves it pinned until close); a buffer map made
/// with `FASTRPC_ATTR_KEEP_MAP` is reached by its own address and length (or any range inside).
unsafe fn munmap_fd(st: &mut State, file: u64, a: u64) -> Result<i32, Errno> {
    // SAFETY: passed on from the caller.
    let m: fastrpc_ioctl_munmap_fd = unsafe { user::read_struct(a) }.ok_or(Errno::EPERM)?;
    let f = st.rpc_files.get_mut(&file).ok_or(Errno::EBADF)?;
    if !f.session || m.len < 0 {
        return eperm();
    }
    let end = m.va.checked_add(m.len as u64).ok_or(Errno::EPERM)?;
    let idx = f
        .maps
        .iter()
        .rposition(|x| x.kind != MapKind::AddPages && x.fd == m.fd && x.va <= m.va && end <= x.va + x.len)
        .ok_or(Errno::EPERM)?;
    put_map_at(st, file, idx);
    Ok(0)
}

/// `fastrpc_mmap_free(map, 0)` on the file's map at `idx`: one reference; the last one frees the
/// map and gives back its hold on the buffer.
fn put_map_at(st: &mut State, file: u64, idx: usize) {
    let Some(f) = st.rpc_files.get_mut(&file) else { return };
    let Some(m) = f.maps.get_mut(idx) else { return };
    m.refs = m.refs.saturating_sub(1);
    if m.refs == 0 {
        let map = f.maps.remove(idx);
        st.driver_map_gone(file, map.fd, map.buf);
        st.release_driver_map(map.buf);
    }
}

/// Drops one reference of the newest map of `fd` at va 0 (what the fdlist names:
/// `fastrpc_mmap_find(fd, 0, 0)` in `put_args`, newest first).
fn put_handle_map(st: &mut State, file: u64, fd: i32) {
    let Some(f) = st.rpc_files.get(&file) else { return };
    if let Some(i) = f.maps.iter().rposition(|x| x.kind != MapKind::AddPages && x.fd == fd && x.va == 0) {
        put_map_at(st, file, i);
    }
}

/// Puts the buffer-argument references a call took ([`Ctx::buf_maps`]): `put_args` for mapped
/// out-buffers and `context_free` for every buffer argument, on every path, error or not. A map
/// made with `FASTRPC_ATTR_KEEP_MAP` keeps the second reference it was created with.
fn put_buffer_maps(st: &mut State, file: u64, ids: &[u64]) {
    for &id in ids {
        let Some(i) = st.rpc_files.get(&file).and_then(|f| f.maps.iter().position(|x| x.id == id)) else { continue };
        put_map_at(st, file, i);
    }
}

/// `fastrpc_mmap_create` for an in/out buffer argument with a buffer fd (`get_args`); a reading
/// of the source, not the driver run. The newest map of the file with this fd whose
/// `[va, va + len)` holds the buffer is taken again (one more reference); otherwise the fd must
/// name a dma-buf (`ion_import_dma_buf_fd`), and a new map records the buffer's own address and
/// length (`map->va`, `map->len`), the whole dma-buf's length as what the DSP is told
/// (`map->size`, `sg_dma_len`) and the attributes; `FASTRPC_ATTR_KEEP_MAP` makes its first count
/// 2, so it outlives the call. Returns the map's id, or `None`: the caller (get_args) ignores the
/// failure and copies the buffer instead. (A KEEP_MAP map whose import fails is left with one
/// reference on no list by the driver, a kernel memory leak the bench does not count.)
fn map_buffer(st: &mut State, file: u64, fd: i32, attr: u32, va: u64, len: u64) -> Option<u64> {
    let end = va.checked_add(len)?;
    let f = st.rpc_files.get(&file)?;
    if let Some(i) = f.maps.iter().rposition(|x| x.kind != MapKind::AddPages && x.fd == fd && x.va <= va && end <= x.va + x.len) {
        let id = match f.maps[i].id {
            0 => st.id(),
            id => id,
        };
        let m = &mut st.rpc_files.get_mut(&file)?.maps[i];
        m.refs += 1;
        m.id = id;
        return Some(id);
    }
    let buf = st.dmabuf(fd)?;
    let size = st.buffers.get(&buf)?.len;
    let id = st.id();
    let refs = if attr & FASTRPC_ATTR_KEEP_MAP != 0 { 2 } else { 1 };
    st.rpc_files.get_mut(&file)?.maps.push(DspMap { kind: MapKind::Buffer, fd, buf: Some(buf), va, len, raddr: 0, refs, size, attr, id });
    if let Some(b) = st.buffers.get_mut(&buf) {
        b.driver_maps += 1;
    }
    Some(id)
}

#[allow(clippy::too_many_lines)]
unsafe fn invoke<'a>(
    sh: &'a Arc<Shared>,
    st: Guard<'a>,
    file: u64,
    kind: CallKind,
    a: u64,
    pre: Option<Fault>,
) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    let size = match kind {
        CallKind::RpcInvoke => 16,
        CallKind::RpcInvokeFd => 24,
        CallKind::RpcInvokeAttrs => 32,
        _ => 40,
    };
    // SAFETY: passed on from the caller.
    let Some(raw) = (unsafe { user::copy_from_user(a, size) }) else { return (st, eperm()) };
    let Ok(inv) = fastrpc_ioctl_invoke::read_from_bytes(&raw[..16]) else { return (st, eperm()) };
    let word = |at: usize| if size > at { u64::from_le_bytes(raw[at..at + 8].try_into().unwrap_or([0; 8])) } else { 0 };
    let (fds_ptr, attrs_ptr, crc_ptr) = (word(16), word(24), word(32));
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    let Some(f) = st.rpc_files.get(&file) else { return (st, Err(Errno::EBADF)) };
    if !f.session {
        return (st, eperm());
    }
    if let Some(&ctx_id) = f.parked.get(&tid) {
        if st.ctxs.get(&ctx_id).is_none_or(|c| c.sc != inv.sc) {
            return (st, eperm());
        }
        if let Some(f) = st.rpc_files.get_mut(&file) {
            f.parked.remove(&tid);
        }
        if let Some(c) = st.ctxs.get_mut(&ctx_id) {
            c.parked = false;
        }
        return wait_and_finish(sh, st, file, ctx_id, tid, kind);
    }
    let sc = Scalars::from_raw(inv.sc);
    let (n, nbuf, nin) = (sc.length(), sc.buffers(), sc.inbufs() as usize);
    // context_alloc: the argument tables.
    let pra_bytes = if n > 0 {
        // SAFETY: passed on from the caller.
        match unsafe { user::copy_from_user(inv.pra, n * 16) } {
            Some(b) => b,
            None => return (st, eperm()),
        }
    } else {
        Vec::new()
    };
    let pra: Vec<remote_arg> = pra_bytes.chunks_exact(16).filter_map(|c| remote_arg::read_from_bytes(c).ok()).collect();
    let read_words = |p: u64| -> Result<Option<Vec<u32>>, Errno> {
        if p == 0 {
            return Ok(None);
        }
        // SAFETY: passed on from the caller.
        unsafe { user::copy_from_user(p, n * 4) }.map(|b| Some(user::words(&b))).ok_or(Errno::EPERM)
    };
    let fds = match read_words(fds_ptr) {
        Ok(v) => v,
        Err(e) => return (st, Err(e)),
    };
    let attrs = match read_words(attrs_ptr) {
        Ok(v) => v,
        Err(e) => return (st, Err(e)),
    };
    // context_alloc: a free context slot, and no wrapping buffer (context_build_overlap).
    if st.ctxs.len() >= FASTRPC_CTX_MAX {
        return (st, eperm());
    }
    if pra[..nbuf].iter().any(|a| a.buf().len != 0 && a.buf().pv.checked_add(a.buf().len).is_none()) {
        return (st, eperm());
    }
    let arg_fd = |i: usize| fds.as_ref().map_or(0, |v| v[i] as i32);
    let arg_attr = |i: usize| attrs.as_ref().map_or(0, |v| v[i]);
    // get_args, first loop: an in/out buffer with a buffer fd (not 0, not -1) is mapped if it can
    // be; a failure is ignored and the buffer is copied instead.
    let mut buf_maps: Vec<Option<u64>> = Vec::with_capacity(nbuf);
    for (i, a) in pra[..nbuf].iter().enumerate() {
        let (fd, b) = (arg_fd(i), a.buf());
        buf_maps.push(if fd != 0 && fd != -1 { map_buffer(&mut st, file, fd, arg_attr(i), b.pv, b.len) } else { None });
    }
    let taken: Vec<u64> = buf_maps.iter().flatten().copied().collect();
    // Any later failure ends in context_free: the buffer maps' references go back, while every
    // handle map made or referenced so far keeps its reference (context_free puts buffer
    // arguments only).
    let fail = |st: &mut State| put_buffer_maps(st, file, &taken);
    // Handles: each needs a dma-buf fd; it gets (or references) a driver map, a failure is -1.
    let mut handles = Vec::new();
    let mut wire = Vec::with_capacity(n);
    for (i, a) in pra.iter().enumerate().skip(nbuf) {
        let fd = arg_fd(i);
        // fastrpc_mmap_create(fd, NOVA, va 0, len 0): the newest map of this fd NUMBER at va 0 is
        // reused whatever the number names now; the DSP gets that map's pages
        // (fastrpc_mmap_find matches the number only, no dma-buf identity check).
        let existing =
            st.rpc_files.get(&file).and_then(|f| f.maps.iter().rposition(|x| x.kind != MapKind::AddPages && x.fd == fd && x.va == 0));
        let buf = match existing {
            Some(i) => {
                let Some(f) = st.rpc_files.get_mut(&file) else { return (st, Err(Errno::EBADF)) };
                f.maps[i].refs += 1;
                f.maps[i].buf
            }
            None => {
                let Some((buf, blen)) = st.dmabuf(fd).and_then(|b| st.buffers.get(&b).map(|x| (b, x.len))) else {
                    fail(&mut st);
                    return (st, eperm());
                };
                // A handle map has va 0, len 0 and no DSP address; the DSP is told the whole
                // buffer (map->size).
                if let Some(f) = st.rpc_files.get_mut(&file) {
                    f.maps.push(DspMap {
                        kind: MapKind::Handle,
                        fd,
                        buf: Some(buf),
                        va: 0,
                        len: 0,
                        raddr: 0,
                        refs: 1,
                        size: blen,
                        attr: FASTRPC_ATTR_NOVA,
                        id: 0,
                    });
                }
                if let Some(b) = st.buffers.get_mut(&buf) {
                    b.driver_maps += 1;
                }
                Some(buf)
            }
        };
        let Some((memfd, blen)) = buf.and_then(|b| st.buffers.get(&b)).map(|b| (b.memfd.clone(), b.len)) else {
            fail(&mut st);
            return (st, eperm());
        };
        let u = a.buf();
        handles.push(HandleBuf { fd, memfd, len: blen, buf: buf.unwrap_or(0) });
        wire.push(remote_arg64::from_dma(remote_dma_handle64 { fd, offset: u.pv as u32, len: u.len as u32 }));
    }
    // The copy buffer: metadata (remote_arg64, smq_invoke_buf and smq_phy_page per argument, the
    // fdlist and the crc list), then the copied buffers laid out by context_build_overlap.
    let ov = build_overlap(&pra[..nbuf]);
    let metalen = 40 * n as u64 + 8 * M_FDLIST as u64 + 4 * M_CRCLIST as u64;
    let mut copylen = metalen;
    let mut total = 0u64;
    for o in ov.iter().filter(|o| pra[o.raix].buf().len != 0 && buf_maps[o.raix].is_none()) {
        if o.offset == 0 {
            copylen = copylen.next_multiple_of(128);
        }
        copylen += o.mend - o.mstart;
        total = total.saturating_add(pra[o.raix].buf().len);
    }
    if total > sh.cfg.max_invoke_copy {
        fail(&mut st);
        return (st, Err(Errno::ENOMEM));
    }
    // get_args, "map ion buffers": a mapped buffer's pages start at the offset of its page from
    // the start of the VMA that holds the map's CREATION address (find_vma), as if that VMA
    // began at dma-buf offset 0; only `offset < map->size` is checked, never the end.
    let mut mapped: Vec<Option<dsp::MappedArg>> = (0..nbuf).map(|_| None).collect();
    for i in 0..nbuf {
        let (Some(id), b) = (buf_maps[i], pra[i].buf()) else { continue };
        if b.len == 0 {
            continue;
        }
        let Some(m) = st.rpc_files.get(&file).and_then(|f| f.maps.iter().find(|x| x.id == id)) else {
            fail(&mut st);
            return (st, eperm());
        };
        let (map_va, map_size, map_buf, nova) = (m.va, m.size, m.buf, m.attr & FASTRPC_ATTR_NOVA != 0);
        let offset = if nova {
            0
        } else {
            // find_vma: the lowest VMA ending above the address; the bench sees only the
            // mappings made through it.
            let vma = st.host_maps.iter().filter(|(&ad, hm)| ad as u64 + hm.len as u64 > map_va).map(|(&ad, _)| ad as u64).min();
            let Some(vm_start) = vma else {
                fail(&mut st);
                return (st, eperm());
            };
            (b.pv & !0xFFF).wrapping_sub(vm_start)
        };
        if offset >= map_size {
            fail(&mut st);
            return (st, eperm());
        }
        let Some((memfd, buf_len)) = map_buf.and_then(|x| st.buffers.get(&x)).map(|x| (x.memfd.clone(), x.len)) else {
            fail(&mut st);
            return (st, eperm());
        };
        let start = if nova { 0 } else { offset + (b.pv & 0xFFF) };
        mapped[i] = Some(dsp::MappedArg { memfd, offset: start, len: b.len, buf_len });
    }
    // get_args, "copy non ion buffers", in overlap order: a buffer that starts inside an earlier
    // one shares its bytes (a fully contained one has no copy of its own, a partial overlap
    // copies only its tail); out-buffers start with whatever the copy buffer held.
    let mut kbuf = vec![STALE_BYTE; copylen as usize];
    kbuf[..metalen as usize].fill(0);
    let mut kpv = vec![0u64; nbuf];
    let mut args = metalen;
    for o in &ov {
        let (i, b) = (o.raix, pra[o.raix].buf());
        if b.len == 0 || buf_maps[i].is_some() {
            continue;
        }
        if o.offset == 0 {
            args = args.next_multiple_of(128);
        }
        // A copy placed before the driver's buffer (a partial overlap with a mapped buffer:
        // the driver would write before ctx->buf) is refused by the bench.
        let Some(at) = args.checked_sub(o.offset) else {
            fail(&mut st);
            return (st, eperm());
        };
        if !user::range_ok(b.pv, b.len) {
            fail(&mut st);
            return (st, eperm());
        }
        if i < nin {
            // SAFETY: the range is plausible (checked above) and is the caller's input buffer.
            let data = unsafe { user::copy_from_user(b.pv, b.len as usize) };
            let dst = kbuf.get_mut(at as usize..(at + b.len) as usize);
            let (Some(data), Some(dst)) = (data, dst) else {
                fail(&mut st);
                return (st, eperm());
            };
            dst.copy_from_slice(&data);
        }
        kpv[i] = KVA_BASE + at;
        args += o.mend - o.mstart;
    }
    let mut bufwire = Vec::with_capacity(n);
    let mut out_ptrs = Vec::new();
    for (i, a) in pra[..nbuf].iter().enumerate() {
        let b = a.buf();
        let pv = match (b.len, &mapped[i]) {
            (0, _) => 0,
            (_, Some(_)) => b.pv,
            _ => kpv[i],
        };
        if i >= nin {
            // A mapped out-buffer has no copy to give back (put_args puts its map instead).
            out_ptrs.push((b.pv, if mapped[i].is_some() { 0 } else { b.len }));
        }
        bufwire.push(remote_arg64::from_buf(remote_buf64 { pv, len: b.len }));
    }
    bufwire.extend(wire);
    // fastrpc_invoke_send: the message carries the file's identity, and the DSP delivers it to
    // whichever process holds that identity.
    if let Err(e) = send_check(&st, file) {
        fail(&mut st);
        return (st, Err(e));
    }
    let identity = st.rpc_files.get(&file).map_or(0, |f| f.tgid);
    let pid = st.process_of_identity(identity).unwrap_or(NO_PROCESS);
    COPIED.with(|c| c.set((total, Duration::ZERO)));
    let ctx_id = st.id();
    st.ctxs.insert(ctx_id, Ctx { file, sc: inv.sc, out_ptrs, crc: crc_ptr, result: None, parked: false, buf_maps: taken.clone() });
    if let Some(f) = st.rpc_files.get_mut(&file) {
        if f.profile {
            let rec = f.perf.entry(tid).or_insert([0; 12]);
            rec[0] += 1;
            rec[9] = tid as i64;
        }
    }
    let job = Job {
        ctx: ctx_id,
        pid,
        epoch: st.epoch,
        handle: inv.handle,
        sc: inv.sc,
        wire: bufwire,
        copies: vec![(KVA_BASE, kbuf)],
        handles,
        pre,
        mapped,
    };
    let sh2 = sh.clone();
    if crate::workers::run(move || dsp::run_job(sh2, job)).is_err() {
        st.ctxs.remove(&ctx_id);
        fail(&mut st);
        return (st, Err(Errno::ENOMEM));
    }
    wait_and_finish(sh, st, file, ctx_id, tid, kind)
}

/// The DSP process id no process has: a message for an identity without a process goes there,
/// and the DSP model answers it `AEE_EBADSTATE`, as for a process that exited (the code a real
/// DSP answers is not known: a choice).
const NO_PROCESS: u64 = 0;

/// `fastrpc_invoke_send` for a user invoke; a reading of the source, not the driver run. It
/// needs the file's SMMU session (GETINFO, checked first by `fastrpc_internal_invoke`), the
/// channel open (`channel[cid].chan`: opened by **any** file's INIT, so a file that has GETINFO
/// but no INIT of its own sends when another file has the channel open; -1 when none has) and
/// the file's restart counter current (`ECONNRESET`, which the invoke's tail turns into +104).
fn send_check(st: &State, file: u64) -> Result<(), Errno> {
    let f = st.rpc_files.get(&file).ok_or(Errno::EBADF)?;
    if !f.session || st.channel_open != Some(st.epoch) {
        return eperm();
    }
    if f.session_epoch != Some(st.epoch) {
        return Err(Errno::ECONNRESET);
    }
    Ok(())
}

/// One buffer argument in `context_build_overlap`'s order.
struct Overlap {
    raix: usize,
    mstart: u64,
    mend: u64,
    offset: u64,
}

/// `context_build_overlap`; a reading of the source, not the driver run: every buffer argument,
/// mapped or not, sorted by start (then by end, the longest first) and swept with the furthest
/// end so far: a buffer starting before it gets `offset` = that end minus its start and copies
/// only its part beyond it (nothing, when it lies wholly inside).
fn build_overlap(bufs: &[remote_arg]) -> Vec<Overlap> {
    let mut order: Vec<(usize, u64, u64)> =
        bufs.iter().enumerate().map(|(i, a)| (i, a.buf().pv, a.buf().pv.wrapping_add(a.buf().len))).collect();
    order.sort_by(|x, y| x.1.cmp(&y.1).then(y.2.cmp(&x.2)));
    let mut max_end = 0u64;
    let mut out = Vec::with_capacity(order.len());
    for (raix, start, end) in order {
        if start < max_end {
            let offset = max_end - start;
            let (mstart, mend) = if end > max_end { (max_end, end) } else { (0, 0) };
            max_end = max_end.max(end);
            out.push(Overlap { raix, mstart, mend, offset });
        } else {
            max_end = end;
            out.push(Overlap { raix, mstart: start, mend: end, offset: 0 });
        }
    }
    out
}

fn wait_and_finish<'a>(
    sh: &'a Shared,
    st: Guard<'a>,
    file: u64,
    ctx_id: u64,
    tid: i32,
    _kind: CallKind,
) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    st.blocked.insert(tid);
    sh.cv.notify_all();
    loop {
        match st.ctxs.get(&ctx_id) {
            None => {
                st.blocked.remove(&tid);
                st.interrupts.remove(&tid);
                return (st, eperm());
            }
            Some(c) if c.result.is_some() => break,
            Some(_) => {}
        }
        if st.interrupts.remove(&tid) {
            st.blocked.remove(&tid);
            if let Some(c) = st.ctxs.get_mut(&ctx_id) {
                c.parked = true;
            }
            if let Some(f) = st.rpc_files.get_mut(&file) {
                f.parked.insert(tid, ctx_id);
            }
            return (st, Err(Errno::EINTR));
        }
        st = sh.wait(st);
    }
    st.blocked.remove(&tid);
    st.interrupts.remove(&tid);
    let Some(ctx) = st.ctxs.remove(&ctx_id) else { return (st, eperm()) };
    // put_args / context_free: the call's buffer maps, whatever its result.
    put_buffer_maps(&mut st, file, &ctx.buf_maps);
    let Some(res) = ctx.result else { return (st, eperm()) };
    COPIED.with(|c| {
        let (b, _) = c.get();
        c.set((b, res.sim_dsp));
    });
    let mut rv = res.retval;
    // The invoke's tail (see `invoke_tail`): a restart since the file's GETINFO or last INIT.
    let restarted = st.rpc_files.get(&file).is_some_and(|f| f.session_epoch != Some(st.epoch));
    if restarted {
        rv = Errno::ECONNRESET.0;
    }
    if rv == 0 {
        for ((pv, len), data) in ctx.out_ptrs.iter().zip(&res.outs) {
            let n = (*len as usize).min(data.len());
            // SAFETY: the pointer and length are the caller's out-buffer from the invoke that
            // created this context (kernel semantics: a resumed call writes there too).
            if !unsafe { user::copy_to_user(*pv, &data[..n]) } {
                return (st, eperm());
            }
        }
        for &fd in res.fdlist.iter().take(M_FDLIST).take_while(|&&fd| fd != 0) {
            put_handle_map(&mut st, file, fd);
        }
        // SAFETY: the crc pointer is the caller's 64-entry list (INVOKE_CRC contract).
        if ctx.crc != 0 && !unsafe { user::copy_to_user(ctx.crc, &[0u8; 4 * M_CRCLIST]) } {
            return (st, eperm());
        }
    }
    (st, as_result(rv))
}
