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
//! same thread with the same scalars word resumes (another sc is -1) and close frees. After a DSP
//! restart the next call fails with `ECONNRESET` at send, and a call that was in flight returns
//! +104.
//!
//! Where the model is not the driver:
//! * buffer arguments are always copied, never mapped, even with a buffer fd (the driver maps when
//!   it can and copies otherwise; visible only in that a mapped out-buffer would show DSP writes
//!   after an error);
//! * MMAP writes `vaddrout` back only if [`BenchConfig::mmap_writes_vaddrout`] (default off: the
//!   comma three's source never writes it, a newer CAF source does);
//! * kernel-originated DSP messages (INIT, MMAP, MUNMAP) complete at once unless a fault delays
//!   them; the release on close waits, with no limit, for
//!   its answer, which comes once the released process's running library calls have returned
//!   (or never, under a `Hang` fault, until the hangs are released or the DSP restarts);
//! * the DSP keys processes by the file's identity (tgid, bit 30 after SETMODE(SESSION)): INIT
//!   for an identity with a live process is answered `AEE_EBADSTATE` (the real code is not
//!   known); INIT on a file that already has a process, and any invoke before INIT, is -1 (a
//!   choice); only the board's channel has a DSP behind it (INIT on another channel is -1);
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

use crate::account::{CallKind, DspCallKind, Fault, FaultTarget};
use crate::dsp::{self, Job, STALE_BYTE};
use crate::elf;
use crate::entry::HandleBuf;
use crate::state::{Ctx, DspMap, DspProcess, MapKind, Shared, State};
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
    // SAFETY: every call below only needs `arg` to satisfy the ioctl contract, which our caller
    // guarantees.
    unsafe {
        match kind {
            k if k.is_invoke() => invoke(sh, st, file, k, a, pre),
            CallKind::RpcInit | CallKind::RpcInitAttrs => init(sh, st, file, kind, a),
            CallKind::RpcMmap | CallKind::RpcMmap64 => mmap(sh, st, file, a),
            CallKind::RpcMunmap | CallKind::RpcMunmap64 => munmap(sh, st, file, a),
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

unsafe fn getinfo(sh: &Shared, st: &mut State, file: u64, a: u64) -> Result<i32, Errno> {
    // SAFETY: passed on from the caller.
    let v: u32 = unsafe { user::read_struct(a) }.ok_or(Errno::EPERM)?;
    let cap = sh.cfg.sessions_per_channel;
    let taken = st.sessions;
    let f = st.rpc_files.get_mut(&file).ok_or(Errno::EBADF)?;
    if f.cid.is_none() {
        if v >= NUM_CHANNELS || taken[v as usize] >= cap {
            return eperm();
        }
        f.cid = Some(v);
        f.session = true;
        f.session_epoch = Some(st.epoch);
        st.sessions[v as usize] += 1;
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
    let epoch = st.epoch;
    let down = st.dsp_down;
    let Some(f) = st.rpc_files.get(&file) else { return (st, Err(Errno::EBADF)) };
    if !f.session || f.cid != Some(sh.cfg.board.channel) {
        return (st, eperm());
    }
    if down {
        return (st, Err(Errno::ENOTCONN));
    }
    if f.proc_id.is_some_and(|p| st.procs.contains_key(&p)) {
        return (st, eperm());
    }
    let shell = match init.flags {
        FASTRPC_INIT_CREATE => {
            if init.mem != 0 {
                return (st, Err(Errno::EINVAL));
            }
            if init.filelen == 0 {
                Some(Vec::new())
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
                    Some(b) => Some(b),
                    None => return (st, eperm()),
                }
            }
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
    // The INIT message opens the channel (so this file's close will send a release, whatever
    // the DSP answers).
    st.channel_open = Some(epoch);
    let (st2, replaced) = kernel_message(sh, st, DspCallKind::CreateProcess);
    st = st2;
    if let Some(v) = replaced {
        return (st, as_result(v));
    }
    if st.epoch != epoch {
        return (st, Err(Errno::ECONNRESET));
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
    let pid = new_process(&mut st, file);
    if let Some(f) = st.rpc_files.get_mut(&file) {
        f.proc_id = Some(pid);
        f.channel_epoch = Some(epoch);
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

/// Checks that the file can send to the DSP: a session, a channel (INIT), no restart since.
fn can_send(st: &State, file: u64) -> Result<(), Errno> {
    let f = st.rpc_files.get(&file).ok_or(Errno::EBADF)?;
    if !f.session {
        return eperm();
    }
    match f.channel_epoch {
        None => eperm(),
        Some(e) if e != st.epoch => Err(Errno::ECONNRESET),
        Some(_) => Ok(()),
    }
}

unsafe fn mmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(mut m) = (unsafe { user::read_struct::<fastrpc_ioctl_mmap>(a) }) else { return (st, eperm()) };
    if let Err(e) = can_send(&st, file) {
        return (st, Err(e));
    }
    let (map_kind, buf, buf_len) = if m.flags == ADSP_MMAP_ADD_PAGES {
        if m.vaddrin != 0 {
            return (st, Err(Errno::EINVAL));
        }
        if m.size == 0 {
            return (st, eperm());
        }
        if m.size > sh.cfg.ion_capacity {
            return (st, Err(Errno::ENOMEM));
        }
        (MapKind::AddPages, None, 0)
    } else {
        if m.size == 0 {
            return (st, eperm());
        }
        let Some(b) = st.dmabuf(m.fd) else { return (st, eperm()) };
        let len = st.buffers.get(&b).map_or(0, |b| b.len);
        (MapKind::Fd, Some(b), len)
    };
    let writes = sh.cfg.mmap_writes_vaddrout;
    if map_kind == MapKind::Fd {
        let f = st.rpc_files.get_mut(&file).expect("checked by can_send");
        let end = m.vaddrin.checked_add(m.size);
        if let Some(existing) =
            f.maps.iter_mut().find(|x| x.kind == MapKind::Fd && x.fd == m.fd && end.is_some_and(|e| x.va <= m.vaddrin && e <= x.va + x.len))
        {
            existing.refs += 1;
            if writes {
                m.vaddrout = existing.raddr;
            }
            // SAFETY: passed on from the caller.
            let ok = unsafe { user::copy_to_user(a, zerocopy::IntoBytes::as_bytes(&m)) };
            return (st, if ok { Ok(0) } else { eperm() });
        }
        if m.size > buf_len {
            return (st, eperm());
        }
    }
    let (st2, replaced) = kernel_message(sh, st, DspCallKind::KernelMmap);
    st = st2;
    if let Some(v) = replaced {
        return (st, as_result(v));
    }
    if let Err(e) = can_send(&st, file) {
        return (st, Err(e));
    }
    if let Some(b) = buf.and_then(|b| st.buffers.get_mut(&b)) {
        b.driver_maps += 1;
    }
    let raddr = st.alloc_raddr(file, m.size, true);
    let f = st.rpc_files.get_mut(&file).expect("checked by can_send");
    let fd = if map_kind == MapKind::AddPages { -1 } else { m.fd };
    f.maps.push(DspMap { kind: map_kind, fd, buf, va: m.vaddrin, len: m.size, raddr, refs: 1 });
    if writes {
        m.vaddrout = raddr;
    }
    // SAFETY: passed on from the caller.
    let ok = unsafe { user::copy_to_user(a, zerocopy::IntoBytes::as_bytes(&m)) };
    (st, if ok { Ok(0) } else { eperm() })
}

unsafe fn munmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(m) = (unsafe { user::read_struct::<fastrpc_ioctl_munmap>(a) }) else { return (st, eperm()) };
    if let Err(e) = can_send(&st, file) {
        return (st, Err(e));
    }
    let f = st.rpc_files.get(&file).expect("checked by can_send");
    let idx = f
        .maps
        .iter()
        .position(|x| x.kind == MapKind::AddPages && x.raddr == m.vaddrout && x.len == m.size)
        .or_else(|| f.maps.iter().position(|x| x.kind != MapKind::AddPages && x.raddr == m.vaddrout && x.len == m.size && x.refs == 1));
    let Some(idx) = idx else { return (st, eperm()) };
    let (st2, replaced) = kernel_message(sh, st, DspCallKind::KernelMunmap);
    st = st2;
    if let Some(v) = replaced {
        // The DSP refused: the map stays.
        return (st, as_result(v));
    }
    let Some(f) = st.rpc_files.get_mut(&file) else { return (st, Err(Errno::EBADF)) };
    if idx < f.maps.len() {
        let map = f.maps.remove(idx);
        st.release_driver_map(map.buf);
    }
    (st, Ok(0))
}

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
        .position(|x| x.kind != MapKind::AddPages && x.fd == m.fd && x.va <= m.va && end <= x.va + x.len)
        .ok_or(Errno::EPERM)?;
    f.maps[idx].refs -= 1;
    if f.maps[idx].refs == 0 {
        let map = f.maps.remove(idx);
        st.driver_map_gone(file, map.fd, map.buf);
        st.release_driver_map(map.buf);
    }
    Ok(0)
}

/// Drops one reference of the handle map of `fd` (va 0).
fn put_handle_map(st: &mut State, file: u64, fd: i32) {
    let Some(f) = st.rpc_files.get_mut(&file) else { return };
    if let Some(i) = f.maps.iter().position(|x| x.kind != MapKind::AddPages && x.fd == fd && x.va == 0) {
        f.maps[i].refs -= 1;
        if f.maps[i].refs == 0 {
            let map = f.maps.remove(i);
            st.driver_map_gone(file, map.fd, map.buf);
            st.release_driver_map(map.buf);
        }
    }
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
    if let Err(e) = read_words(attrs_ptr) {
        return (st, Err(e));
    }
    let mut total = 0u64;
    for a in &pra[..nbuf] {
        let b = a.buf();
        if b.len != 0 {
            match b.pv.checked_add(b.len) {
                Some(end) if end > b.pv && user::range_ok(b.pv, b.len) => {}
                _ => return (st, eperm()),
            }
        }
        total = total.saturating_add(b.len);
    }
    if total > sh.cfg.max_invoke_copy {
        return (st, Err(Errno::ENOMEM));
    }
    // Handles: each needs an ION fd; it gets (or references) a driver map.
    let mut taken: Vec<i32> = Vec::new();
    let mut handles = Vec::new();
    let mut wire = Vec::with_capacity(n);
    let rollback = |st: &mut State, taken: &[i32]| {
        for &fd in taken {
            put_handle_map(st, file, fd);
        }
    };
    for (i, a) in pra.iter().enumerate().skip(nbuf) {
        let fd = match &fds {
            Some(v) => v[i] as i32,
            None => {
                rollback(&mut st, &taken);
                return (st, eperm());
            }
        };
        // fastrpc_mmap_create: an existing map of this fd NUMBER (va 0) is reused whatever the
        // number names now; the DSP gets that map's pages (fastrpc_mmap_find matches the number
        // only, no dma-buf identity check).
        let existing =
            st.rpc_files.get(&file).and_then(|f| f.maps.iter().position(|x| x.kind != MapKind::AddPages && x.fd == fd && x.va == 0));
        let buf = match existing {
            Some(i) => {
                let Some(f) = st.rpc_files.get_mut(&file) else { return (st, Err(Errno::EBADF)) };
                f.maps[i].refs += 1;
                f.maps[i].buf
            }
            None => {
                let Some(buf) = st.dmabuf(fd) else {
                    rollback(&mut st, &taken);
                    return (st, eperm());
                };
                let Some(blen) = st.buffers.get(&buf).map(|b| b.len) else {
                    rollback(&mut st, &taken);
                    return (st, eperm());
                };
                let raddr = st.alloc_raddr(file, blen, false);
                if let Some(f) = st.rpc_files.get_mut(&file) {
                    f.maps.push(DspMap { kind: MapKind::Handle, fd, buf: Some(buf), va: 0, len: blen, raddr, refs: 1 });
                }
                if let Some(b) = st.buffers.get_mut(&buf) {
                    b.driver_maps += 1;
                }
                Some(buf)
            }
        };
        taken.push(fd);
        let Some((memfd, blen)) = buf.and_then(|b| st.buffers.get(&b)).map(|b| (b.memfd.clone(), b.len)) else {
            rollback(&mut st, &taken);
            return (st, eperm());
        };
        let u = a.buf();
        handles.push(HandleBuf { fd, memfd, len: blen, buf: buf.unwrap_or(0) });
        wire.push(remote_arg64::from_dma(remote_dma_handle64 { fd, offset: u.pv as u32, len: u.len as u32 }));
    }
    if st.ctxs.len() >= FASTRPC_CTX_MAX {
        rollback(&mut st, &taken);
        return (st, eperm());
    }
    // get_args: copy the buffers.
    let mut copies = Vec::with_capacity(nbuf);
    let mut bufwire = Vec::with_capacity(nbuf);
    let mut out_ptrs = Vec::new();
    let mut kva = KVA_BASE;
    for (i, a) in pra[..nbuf].iter().enumerate() {
        let b = a.buf();
        let data = if i < nin {
            // SAFETY: the range was checked above and is the caller's input buffer.
            match unsafe { user::copy_from_user(b.pv, b.len as usize) } {
                Some(d) => d,
                None => {
                    rollback(&mut st, &taken);
                    return (st, eperm());
                }
            }
        } else {
            out_ptrs.push((b.pv, b.len));
            vec![STALE_BYTE; b.len as usize]
        };
        bufwire.push(remote_arg64::from_buf(remote_buf64 { pv: kva, len: b.len }));
        copies.push((kva, data));
        kva += (b.len.div_ceil(128) + 1) * 128;
    }
    bufwire.extend(wire);
    // Send.
    if let Err(e) = can_send(&st, file) {
        rollback(&mut st, &taken);
        return (st, Err(e));
    }
    let Some(pid) = st.rpc_files.get(&file).and_then(|f| f.proc_id) else {
        rollback(&mut st, &taken);
        return (st, eperm());
    };
    COPIED.with(|c| c.set((total, Duration::ZERO)));
    let ctx_id = st.id();
    st.ctxs.insert(ctx_id, Ctx { file, sc: inv.sc, out_ptrs, crc: crc_ptr, result: None, parked: false });
    if let Some(f) = st.rpc_files.get_mut(&file) {
        if f.profile {
            let rec = f.perf.entry(tid).or_insert([0; 12]);
            rec[0] += 1;
            rec[9] = tid as i64;
        }
    }
    let job = Job { ctx: ctx_id, pid, epoch: st.epoch, handle: inv.handle, sc: inv.sc, wire: bufwire, copies, handles, pre };
    let sh2 = sh.clone();
    if crate::workers::run(move || dsp::run_job(sh2, job)).is_err() {
        st.ctxs.remove(&ctx_id);
        rollback(&mut st, &taken);
        return (st, Err(Errno::ENOMEM));
    }
    wait_and_finish(sh, st, file, ctx_id, tid, kind)
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
    let Some(res) = ctx.result else { return (st, eperm()) };
    COPIED.with(|c| {
        let (b, _) = c.get();
        c.set((b, res.sim_dsp));
    });
    let mut rv = res.retval;
    let restarted = st.rpc_files.get(&file).is_some_and(|f| f.channel_epoch != Some(st.epoch));
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
