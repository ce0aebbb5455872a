//! The simulated upstream fastrpc driver (`/dev/fastrpc-cdsp` of an upstream board), after
//! mainline `drivers/misc/fastrpc.c` (kernel-abi.md 3; the driver facts in
//! `hexrpc_drivers::upstream`).
//!
//! Requests are matched by their full 32-bit number (anything else, including the header's
//! `FREE_DMA_BUFF`, is `ENOTTY`); arguments are copied from the raw pointer with the driver's
//! sizes and a faulting copy is `EFAULT`. The upstream semantics that differ from the
//! downstream model ([`rpc`](crate::rpc)):
//! * open takes the SMMU session (`EBUSY` when [`BenchConfig::sessions_per_channel`] are
//!   taken) and binds the file to the channel; while the DSP is down
//!   ([`Bench::set_dsp_available`](crate::Bench::set_dsp_available)) the node does not exist
//!   (`ENOENT`);
//! * INVOKE: handle 1 is `EPERM`; LENGTH(sc) 24-byte `fastrpc_invoke_args` are read; every
//!   argument with an fd (not 0, not -1) and a non-zero length is mapped (a descriptor that is
//!   not a dma-buf: `EINVAL`; a bad one: `EINVAL`, as `fastrpc_create_maps` folds every error);
//!   an existing map is found by the fd NUMBER only (`fastrpc_map_lookup` before the Aug-2025
//!   fix), so a reused number hands the DSP the old map's buffer; handle maps keep the call's
//!   reference until the fdlist or close;
//!   copied out-buffers start zeroed (the driver clears its payload) and are copied back
//!   **before** the DSP's result is looked at, so also after a DSP error; 255 contexts in flight
//!   on the channel: `ENOSPC`; an interrupted call returns `EINTR` and is never resumed: its
//!   context stays with the file until close and nothing is copied back;
//! * kernel messages (INIT_*, MMAP, MUNMAP, MEM_MAP, MEM_UNMAP, GET_DSP_INFO) wait at most
//!   [`BenchConfig::kernel_call_timeout`] (the driver's 10 s) and then fail with `ETIMEDOUT`;
//! * INIT_CREATE: from the non-secure node of a secure channel
//!   ([`BenchConfig::upstream_secure_channel`]) without `FASTRPC_MODE_UNSIGNED_MODULE`:
//!   `ECONNREFUSED`; a shell over 2 MiB: `EINVAL`; the shell's fd is mapped and the map is kept
//!   until close, as the driver keeps it; the init memory (`fl->init_mem`,
//!   [`Snapshot::init_buffers`](crate::Snapshot::init_buffers)) is kept until the release, freed
//!   when the create fails, and a second INIT_CREATE on the file overwrites (leaks) the first's;
//! * the DSP identity is the tgid (no SETMODE, no per-session `client_id`): a second create or
//!   attach for a live identity is `AEE_EBADSTATE`, and every file's close releases the
//!   identity's process; the release waits for the process's running library calls at most
//!   [`BenchConfig::kernel_call_timeout`] and then frees anyway;
//! * a DSP restart ([`Bench::restart_dsp`](crate::Bench::restart_dsp)) completes calls in flight
//!   with `EPIPE`, and every later call on a file opened before it fails with `EPIPE` forever
//!   (the channel context is gone); a fresh open works once the DSP is available.
//!
//! Where the model is not the driver:
//! * a buffer passed by fd must lie inside a live host mapping of that buffer (else `EFAULT`,
//!   a bench choice: the driver would hand the DSP pages computed from an unrelated VMA); the
//!   DSP model works on a copy taken at send time, written back into the mapping when the call
//!   completes (a device's DSP writes in place while it runs; the difference is visible only to
//!   a CPU reading during the call, or for an interrupted call, whose write-back never happens
//!   here);
//! * overlapping copied buffers are not merged (the driver shares one copy);
//! * an INVOKE before any INIT, or a second INIT on a file with a process, is answered by the
//!   simulated DSP with `AEE_EBADSTATE` (positive; a device's root PD answer is not known);
//! * GET_DSP_INFO answers from a small invented attribute table ([`DSP_ATTRIBUTES`]); the
//!   driver's "query the DSP once per channel" cache is not modelled (every query is a message).
//!
//! [`BenchConfig::sessions_per_channel`]: crate::BenchConfig::sessions_per_channel
//! [`BenchConfig::kernel_call_timeout`]: crate::BenchConfig::kernel_call_timeout
//! [`BenchConfig::upstream_secure_channel`]: crate::BenchConfig::upstream_secure_channel

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use hexrpc_drivers::adsprpc::{remote_arg64, remote_buf64, remote_dma_handle64};
use hexrpc_drivers::upstream::*;
use hexrpc_drivers::{aee, Errno, Scalars};
use zerocopy::{FromBytes, IntoBytes};

use crate::account::{CallKind, DspCallKind, Fault, FaultTarget};
use crate::dsp::{self, Job};
use crate::entry::HandleBuf;
use crate::rpc::{as_result, COPIED};
use crate::state::{Buffer, Ctx, DspMap, MapKind, RpcFile, Shared, State};
use crate::{dma_heap, elf, ion, user};

type Guard<'a> = MutexGuard<'a, State>;

/// Kernel virtual addresses of the driver's copies.
const KVA_BASE: u64 = 0xFFFF_FF80_2000_0000;
/// Context ids 1..255 (`idr_alloc_cyclic(.., 1, FASTRPC_CTX_MAX)`).
const CTX_IDS: usize = FASTRPC_CTX_MAX as usize - 1;

/// The simulated DSP's capability table for GET_DSP_INFO (invented values for the bench:
/// attribute 1 "unsigned PD supported" = 1, 3 "128-byte HVX units" = 4, 6 "architecture" = 0x68;
/// attribute 0 is always 0, as the driver clears it).
pub const DSP_ATTRIBUTES: &[(u32, u32)] = &[(1, 1), (3, 4), (6, 0x68)];

pub(crate) fn kind_of(request: u32) -> CallKind {
    match request {
        FASTRPC_IOCTL_INVOKE => CallKind::UpInvoke,
        FASTRPC_IOCTL_INIT_ATTACH => CallKind::UpInitAttach,
        FASTRPC_IOCTL_INIT_ATTACH_SNS => CallKind::UpInitAttachSns,
        FASTRPC_IOCTL_INIT_CREATE => CallKind::UpInitCreate,
        FASTRPC_IOCTL_INIT_CREATE_STATIC => CallKind::UpInitCreateStatic,
        FASTRPC_IOCTL_ALLOC_DMA_BUFF => CallKind::UpAllocDmaBuff,
        FASTRPC_IOCTL_FREE_DMA_BUFF => CallKind::UpFreeDmaBuff,
        FASTRPC_IOCTL_MMAP => CallKind::UpMmap,
        FASTRPC_IOCTL_MUNMAP => CallKind::UpMunmap,
        FASTRPC_IOCTL_MEM_MAP => CallKind::UpMemMap,
        FASTRPC_IOCTL_MEM_UNMAP => CallKind::UpMemUnmap,
        FASTRPC_IOCTL_GET_DSP_INFO => CallKind::UpGetDspInfo,
        _ => CallKind::UpUnknown,
    }
}

/// `fastrpc_device_open`: a new file bound to the board's channel with a session.
pub(crate) fn open_file(sh: &Shared, st: &mut State) -> Result<u64, Errno> {
    if st.dsp_down {
        return Err(Errno::ENOENT);
    }
    let ch = sh.cfg.board.channel as usize;
    if ch >= st.sessions.len() {
        return Err(Errno::ENODEV);
    }
    if st.sessions[ch] >= sh.cfg.sessions_per_channel {
        return Err(Errno::EBUSY);
    }
    st.sessions[ch] += 1;
    let id = st.id();
    let epoch = st.epoch;
    st.rpc_files.insert(id, RpcFile::upstream(epoch, ch as u32));
    Ok(id)
}

/// Handles one ioctl on upstream file `file`.
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
    // SAFETY: every handler only needs `arg` to satisfy the ioctl contract, which our caller
    // guarantees.
    unsafe {
        match kind_of(request) {
            CallKind::UpInvoke => invoke(sh, st, file, a, pre),
            CallKind::UpInitCreate => init_create(sh, st, file, a),
            CallKind::UpInitCreateStatic => init_create_static(sh, st, file, a),
            CallKind::UpInitAttach | CallKind::UpInitAttachSns => attach(sh, st, file),
            CallKind::UpMmap => mmap(sh, st, file, a),
            CallKind::UpMunmap => munmap(sh, st, file, a),
            CallKind::UpMemMap => mem_map(sh, st, file, a),
            CallKind::UpMemUnmap => mem_unmap(sh, st, file, a),
            CallKind::UpGetDspInfo => get_dsp_info(sh, st, file, a),
            CallKind::UpAllocDmaBuff => {
                let mut st = st;
                let r = alloc_dma_buff(sh, &mut st, a);
                (st, r)
            }
            _ => (st, Err(Errno::ENOTTY)),
        }
    }
}

/// `fl->cctx->rpdev` is gone for a file opened before the last restart: `EPIPE`.
fn can_send(st: &State, file: u64) -> Result<(), Errno> {
    let f = st.rpc_files.get(&file).ok_or(Errno::EBADF)?;
    if f.channel_epoch != Some(st.epoch) {
        return Err(Errno::EPIPE);
    }
    Ok(())
}

/// A kernel-originated message to the DSP. `None` when it succeeded; otherwise the ioctl's
/// result: the DSP's replaced answer (positive values are returned as they are), `ETIMEDOUT`
/// when a delay or hang outlasts the driver's timeout, `EPIPE` when the DSP restarted meanwhile.
fn kernel_message<'a>(sh: &'a Shared, mut st: Guard<'a>, file: u64, kind: DspCallKind) -> (Guard<'a>, Option<Result<i32, Errno>>) {
    if let Err(e) = can_send(&st, file) {
        return (st, Some(Err(e)));
    }
    st.count_dsp(kind);
    let epoch = st.epoch;
    let wait = match st.fault(FaultTarget::Dsp(kind)) {
        Some(Fault::Errno(e)) => return (st, Some(as_result(e.0))),
        Some(Fault::Returned(v)) => return (st, (v != 0).then(|| as_result(v))),
        Some(Fault::Delay(d)) => Some(d),
        Some(Fault::Hang) => Some(Duration::MAX),
        None => None,
    };
    if let Some(d) = wait {
        let limit = sh.cfg.kernel_call_timeout;
        let start = Instant::now();
        let gen = st.hang_generation;
        loop {
            let waited = start.elapsed();
            if st.epoch != epoch {
                return (st, Some(Err(Errno::EPIPE)));
            }
            if waited >= d || st.hang_generation != gen {
                break;
            }
            if waited >= limit {
                return (st, Some(Err(Errno::ETIMEDOUT)));
            }
            st = sh.wait_for(st, (d.min(limit) - waited).min(Duration::from_millis(50)));
        }
    }
    let r = (st.epoch != epoch).then_some(Err(Errno::EPIPE));
    (st, r)
}

fn new_process(st: &mut State, file: u64) -> u64 {
    let pid = crate::rpc::new_process(st, file);
    let epoch = st.epoch;
    if let Some(f) = st.rpc_files.get_mut(&file) {
        f.proc_id = Some(pid);
        f.channel_epoch = Some(epoch);
    }
    pid
}

/// The file already has a process, or its identity (the tgid: this driver has no session bit)
/// has a live one: the DSP refuses the create (Qualcomm: a second PD with the same identifier
/// is "a bad request").
fn has_process(st: &State, file: u64) -> bool {
    let Some(f) = st.rpc_files.get(&file) else { return false };
    f.proc_id.is_some_and(|p| st.procs.contains_key(&p)) || st.process_of_identity(f.tgid).is_some()
}

/// `fastrpc_map_create`: finds this file's map of `fd` (taking a reference) or makes one. The
/// lookup (`fastrpc_map_lookup` before the Aug-2025 fix) matches the fd NUMBER only: an existing
/// map is reused whatever the number names now (even nothing), and the DSP gets the map's
/// buffer and the length recorded when the map was made.
fn map_create(st: &mut State, file: u64, fd: i32, len: u64, va: u64) -> Result<(u64, u64), Errno> {
    let f = st.rpc_files.get_mut(&file).ok_or(Errno::EBADF)?;
    if let Some(m) = f.maps.iter_mut().find(|m| m.kind == MapKind::Handle && m.fd == fd) {
        m.refs += 1;
        let (buf, len) = (m.buf, m.len);
        let buf = buf.ok_or(Errno::EINVAL)?;
        dma_heap::note_dsp_use(st, buf);
        return Ok((buf, len));
    }
    let buf = ion::buffer_of_fd(st, fd)?;
    dma_heap::note_dsp_use(st, buf);
    let raddr = st.alloc_raddr(file, len, false);
    let f = st.rpc_files.get_mut(&file).ok_or(Errno::EBADF)?;
    f.maps.push(DspMap { kind: MapKind::Handle, fd, buf: Some(buf), va, len, raddr, refs: 1, size: len, attr: 0, id: 0 });
    if let Some(b) = st.buffers.get_mut(&buf) {
        b.driver_maps += 1;
    }
    Ok((buf, len))
}

/// `fastrpc_map_put` on this file's map of `fd`.
fn map_put(st: &mut State, file: u64, fd: i32) {
    let Some(f) = st.rpc_files.get_mut(&file) else { return };
    if let Some(i) = f.maps.iter().position(|m| m.kind == MapKind::Handle && m.fd == fd) {
        f.maps[i].refs -= 1;
        if f.maps[i].refs == 0 {
            let m = f.maps.remove(i);
            st.driver_map_gone(file, m.fd, m.buf);
            st.release_driver_map(m.buf);
        }
    }
}

/// Reads `len` bytes at user address `ptr`, which must lie in a live host mapping of `buf`.
///
/// # Safety
///
/// As for `user::copy_from_user`.
unsafe fn read_mapped(st: &State, buf: u64, ptr: u64, len: u64) -> Result<Vec<u8>, Errno> {
    let end = ptr.checked_add(len).ok_or(Errno::EFAULT)?;
    let inside = st.host_maps.iter().any(|(&a, m)| m.buf == Some(buf) && ptr >= a as u64 && end <= a as u64 + m.len as u64);
    if !inside {
        return Err(Errno::EFAULT);
    }
    // SAFETY: the range lies in a live shared mapping made through this bench (checked under the
    // lock `munmap` takes).
    unsafe { user::copy_from_user(ptr, len as usize) }.ok_or(Errno::EFAULT)
}

fn no_fd(fd: i32) -> bool {
    fd == 0 || fd == -1
}

#[allow(clippy::too_many_lines)]
unsafe fn invoke<'a>(sh: &'a Arc<Shared>, st: Guard<'a>, file: u64, a: u64, pre: Option<Fault>) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(inv) = (unsafe { user::read_struct::<fastrpc_invoke>(a) }) else { return (st, Err(Errno::EFAULT)) };
    let sc = Scalars::from_raw(inv.sc);
    let (n, nbuf, nin) = (sc.length(), sc.buffers(), sc.inbufs() as usize);
    let args: Vec<fastrpc_invoke_args> = if n > 0 {
        // SAFETY: passed on from the caller.
        match unsafe { user::copy_from_user(inv.args, n * 24) } {
            Some(b) => b.chunks_exact(24).filter_map(|c| fastrpc_invoke_args::read_from_bytes(c).ok()).collect(),
            None => return (st, Err(Errno::EFAULT)),
        }
    } else {
        Vec::new()
    };
    if let Err(e) = can_send(&st, file) {
        return (st, Err(e));
    }
    if inv.handle == FASTRPC_INIT_HANDLE {
        return (st, Err(Errno::EPERM));
    }
    let in_flight = st.ctxs.values().filter(|c| st.rpc_files.get(&c.file).is_some_and(|f| f.upstream)).count();
    if in_flight >= CTX_IDS {
        return (st, Err(Errno::ENOSPC));
    }
    let mut total = 0u64;
    for x in &args[..nbuf] {
        total = total.saturating_add(x.length);
    }
    if total > sh.cfg.max_invoke_copy {
        return (st, Err(Errno::ENOMEM));
    }
    // fastrpc_create_maps: every argument with an fd and a length.
    let mut taken: Vec<i32> = Vec::new();
    let mut bufs: Vec<Option<(u64, u64)>> = Vec::with_capacity(n);
    for x in &args {
        if no_fd(x.fd) || x.length == 0 {
            bufs.push(None);
            continue;
        }
        match map_create(&mut st, file, x.fd, x.length, 0) {
            Ok(b) => {
                taken.push(x.fd);
                bufs.push(Some(b));
            }
            Err(_) => {
                for fd in taken {
                    map_put(&mut st, file, fd);
                }
                return (st, Err(Errno::EINVAL));
            }
        }
    }
    let rollback = |st: &mut State, taken: &[i32]| {
        for &fd in taken {
            map_put(st, file, fd);
        }
    };
    // fastrpc_get_args.
    let mut copies = Vec::with_capacity(nbuf);
    let mut wire = Vec::with_capacity(n);
    let mut out_ptrs = Vec::new();
    let mut kva = KVA_BASE;
    for (i, x) in args[..nbuf].iter().enumerate() {
        let data = match (bufs[i].map(|b| b.0), i < nin) {
            // SAFETY: checked against a live host mapping of the buffer inside.
            (Some(b), _) => match unsafe { read_mapped(&st, b, x.ptr, x.length) } {
                Ok(d) => d,
                Err(e) => {
                    rollback(&mut st, &taken);
                    return (st, Err(e));
                }
            },
            // SAFETY: passed on from the caller (an input buffer of the call).
            (None, true) => match unsafe { user::copy_from_user(x.ptr, x.length as usize) } {
                Some(d) => d,
                None => {
                    rollback(&mut st, &taken);
                    return (st, Err(Errno::EFAULT));
                }
            },
            (None, false) => {
                if !user::range_ok(x.ptr, x.length) {
                    rollback(&mut st, &taken);
                    return (st, Err(Errno::EFAULT));
                }
                vec![0u8; x.length as usize]
            }
        };
        if i >= nin {
            out_ptrs.push((x.ptr, x.length));
        }
        wire.push(remote_arg64::from_buf(remote_buf64 { pv: kva, len: x.length }));
        copies.push((kva, data));
        kva += (x.length.div_ceil(128) + 1) * 128;
    }
    let mut handles = Vec::new();
    for (i, x) in args.iter().enumerate().skip(nbuf) {
        if let Some((b, map_len)) = bufs[i] {
            if let Some(buf) = st.buffers.get(&b) {
                handles.push(HandleBuf { fd: x.fd, memfd: buf.memfd.clone(), len: map_len.min(buf.len), buf: b });
            }
        }
        wire.push(remote_arg64::from_dma(remote_dma_handle64 { fd: x.fd, offset: x.ptr as u32, len: x.length as u32 }));
    }
    let Some(pid) = st.rpc_files.get(&file).and_then(|f| f.proc_id).filter(|p| st.procs.contains_key(p)) else {
        rollback(&mut st, &taken);
        return (st, Ok(aee::AEE_EBADSTATE));
    };
    COPIED.with(|c| c.set((total, Duration::ZERO)));
    let ctx_id = st.id();
    st.ctxs.insert(ctx_id, Ctx { file, sc: inv.sc, out_ptrs, crc: 0, result: None, parked: false, buf_maps: Vec::new(), copy_buf: 0 });
    st.ctxs_high_water = st.ctxs_high_water.max(st.ctxs.len());
    let job = Job { ctx: ctx_id, pid, epoch: st.epoch, handle: inv.handle, sc: inv.sc, wire, copies, handles, pre, mapped: Vec::new() };
    let sh2 = sh.clone();
    if crate::workers::run(move || dsp::run_job(sh2, job)).is_err() {
        st.ctxs.remove(&ctx_id);
        rollback(&mut st, &taken);
        return (st, Err(Errno::ENOMEM));
    }
    // The buffer maps' call references are dropped when the context is freed; handle maps stay.
    let buffer_maps: Vec<i32> = args[..nbuf].iter().zip(&bufs).filter(|(_, b)| b.is_some()).map(|(x, _)| x.fd).collect();
    wait_and_finish(sh, st, file, ctx_id, &buffer_maps)
}

fn wait_and_finish<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, ctx_id: u64, buffer_maps: &[i32]) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    st.blocked.insert(tid);
    sh.cv.notify_all();
    loop {
        match st.ctxs.get(&ctx_id) {
            None => {
                st.blocked.remove(&tid);
                st.interrupts.remove(&tid);
                return (st, Err(Errno::EPIPE));
            }
            Some(c) if c.result.is_some() => break,
            Some(_) => {}
        }
        if st.interrupts.remove(&tid) {
            // -ERESTARTSYS: the context stays on the file's pending list until close; nothing
            // will be copied back.
            st.blocked.remove(&tid);
            if let Some(c) = st.ctxs.get_mut(&ctx_id) {
                c.parked = true;
            }
            return (st, Err(Errno::EINTR));
        }
        st = sh.wait(st);
    }
    st.blocked.remove(&tid);
    st.interrupts.remove(&tid);
    let Some(ctx) = st.ctxs.remove(&ctx_id) else { return (st, Err(Errno::EPIPE)) };
    let Some(res) = ctx.result else { return (st, Err(Errno::EPIPE)) };
    COPIED.with(|c| {
        let (b, _) = c.get();
        c.set((b, res.sim_dsp));
    });
    // A channel that went away while the call was in flight: fastrpc_notify_users completed the
    // context with -EPIPE, whatever the DSP side had done.
    let restarted = st.rpc_files.get(&file).is_some_and(|f| f.channel_epoch != Some(st.epoch));
    // fastrpc_put_args runs before the result is looked at.
    let mut rv = if restarted { -Errno::EPIPE.0 } else { res.retval };
    for ((pv, len), data) in ctx.out_ptrs.iter().zip(&res.outs) {
        let n = (*len as usize).min(data.len());
        // SAFETY: the caller's out-buffer of this call (copied: its own memory; mapped: inside a
        // live mapping checked at send time, still borrowed by the caller).
        if !unsafe { user::copy_to_user(*pv, &data[..n]) } {
            rv = -Errno::EFAULT.0;
            break;
        }
    }
    for &fd in res.fdlist.iter().take(FASTRPC_MAX_FDLIST).take_while(|&&fd| fd != 0) {
        map_put(&mut st, file, fd);
    }
    for &fd in buffer_maps {
        map_put(&mut st, file, fd);
    }
    (st, as_result(rv))
}

unsafe fn init_create<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(init) = (unsafe { user::read_struct::<fastrpc_init_create>(a) }) else { return (st, Err(Errno::EFAULT)) };
    if sh.cfg.upstream_secure_channel && init.attrs & FASTRPC_MODE_UNSIGNED_MODULE == 0 {
        return (st, Err(Errno::ECONNREFUSED));
    }
    if init.filelen > INIT_FILELEN_MAX {
        return (st, Err(Errno::EINVAL));
    }
    let mut mapped = None;
    if init.filelen != 0 && init.filefd != 0 {
        match map_create(&mut st, file, init.filefd, init.filelen as u64, init.file) {
            Ok((b, _)) => mapped = Some(b),
            Err(e) => return (st, Err(e)),
        }
    }
    let fail = |mut st: Guard<'a>, e: Result<i32, Errno>| {
        if mapped.is_some() {
            map_put(&mut st, file, init.filefd);
        }
        (st, e)
    };
    // The kernel invoke's arguments: the shell is read through the map, or copied.
    let image = match mapped {
        // SAFETY: checked against a live host mapping of the buffer.
        Some(b) => unsafe { read_mapped(&st, b, init.file, init.filelen as u64) },
        // SAFETY: passed on from the caller.
        None => unsafe { user::copy_from_user(init.file, init.filelen as usize) }.ok_or(Errno::EFAULT),
    };
    let image = match image {
        Ok(i) => i,
        Err(e) => return fail(st, Err(e)),
    };
    // The init memory (fastrpc_init_create_process: ALIGN(max(INIT_FILELEN_MAX, 4 * filelen),
    // 1 MiB)) goes into fl->init_mem over whatever a previous INIT_CREATE left there, which is
    // never freed; a failure from here on frees the new one and leaves fl->init_mem NULL
    // (err_invoke), and the file's release frees what is left.
    let memlen = u64::from(init.filelen.saturating_mul(4)).max(u64::from(INIT_FILELEN_MAX)).next_multiple_of(1 << 20);
    let s = &mut *st;
    if let Some(f) = s.rpc_files.get_mut(&file) {
        if f.init_mem.replace(memlen).is_some() {
            s.init_leaked += 1;
        }
    }
    let fail = |mut st: Guard<'a>, e: Result<i32, Errno>| {
        if let Some(f) = st.rpc_files.get_mut(&file) {
            f.init_mem = None;
        }
        fail(st, e)
    };
    let (st2, r) = kernel_message(sh, st, file, DspCallKind::CreateProcess);
    st = st2;
    if let Some(r) = r {
        return fail(st, r);
    }
    if has_process(&st, file) {
        return fail(st, Ok(aee::AEE_EBADSTATE));
    }
    if !image.is_empty() && elf::check_hexagon_elf(&image).is_err() {
        return fail(st, Ok(aee::AEE_EBADELF));
    }
    new_process(&mut st, file);
    (st, Ok(0))
}

unsafe fn init_create_static<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(init) = (unsafe { user::read_struct::<fastrpc_init_create_static>(a) }) else { return (st, Err(Errno::EFAULT)) };
    if init.namelen > INIT_FILE_NAMELEN_MAX {
        return (st, Err(Errno::EINVAL));
    }
    // SAFETY: passed on from the caller.
    if unsafe { user::copy_from_user(init.name, init.namelen as usize) }.is_none() {
        return (st, Err(Errno::EFAULT));
    }
    if u64::from(init.memlen) > sh.cfg.ion_capacity {
        return (st, Err(Errno::ENOMEM));
    }
    let (st2, r) = kernel_message(sh, st, file, DspCallKind::CreateProcess);
    st = st2;
    if let Some(r) = r {
        return (st, r);
    }
    if has_process(&st, file) {
        return (st, Ok(aee::AEE_EBADSTATE));
    }
    new_process(&mut st, file);
    (st, Ok(0))
}

fn attach<'a>(sh: &'a Shared, st: Guard<'a>, file: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let (mut st, r) = kernel_message(sh, st, file, DspCallKind::CreateProcess);
    if let Some(r) = r {
        return (st, r);
    }
    if has_process(&st, file) {
        return (st, Ok(aee::AEE_EBADSTATE));
    }
    new_process(&mut st, file);
    (st, Ok(0))
}

unsafe fn alloc_dma_buff(sh: &Shared, st: &mut State, a: u64) -> Result<i32, Errno> {
    // SAFETY: passed on from the caller.
    let mut b: fastrpc_alloc_dma_buf = unsafe { user::read_struct(a) }.ok_or(Errno::EFAULT)?;
    let len = b.size.div_ceil(4096) * 4096;
    if len == 0 || st.ion_bytes.saturating_add(len) > sh.cfg.ion_capacity {
        return Err(Errno::ENOMEM);
    }
    let memfd = ion::new_buffer(len)?;
    let id = st.id();
    st.buffers.insert(
        id,
        Buffer { memfd: Arc::new(memfd), len, handles: 0, share_fds: 0, host_maps: 0, driver_maps: 0, cached: false, cpu_access: 0 },
    );
    st.ion_bytes += len;
    let fd = match ion::export(st, id) {
        Ok(fd) => fd,
        Err(e) => {
            st.maybe_free_buffer(id);
            return Err(e);
        }
    };
    b.fd = fd;
    // SAFETY: passed on from the caller. On a failed copy the fd stays installed, as the driver
    // leaves it ("leak the fd and rely on the process exit path").
    if !unsafe { user::copy_to_user(a, b.as_bytes()) } {
        return Err(Errno::EFAULT);
    }
    Ok(0)
}

fn alloc_raddr(st: &mut State, file: u64, size: u64) -> u64 {
    st.alloc_raddr(file, size, true)
}

unsafe fn mmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(mut m) = (unsafe { user::read_struct::<fastrpc_req_mmap>(a) }) else { return (st, Err(Errno::EFAULT)) };
    if (m.flags != ADSP_MMAP_ADD_PAGES && m.flags != ADSP_MMAP_REMOTE_HEAP_ADDR) || m.vaddrin != 0 {
        return (st, Err(Errno::EINVAL));
    }
    if m.size == 0 || m.size > sh.cfg.ion_capacity {
        return (st, Err(Errno::ENOMEM));
    }
    let (st2, r) = kernel_message(sh, st, file, DspCallKind::KernelMmap);
    st = st2;
    if let Some(r) = r {
        return (st, r);
    }
    let raddr = alloc_raddr(&mut st, file, m.size);
    if let Some(f) = st.rpc_files.get_mut(&file) {
        f.maps.push(DspMap::add_pages(m.size, raddr));
    }
    m.vaddrout = raddr;
    // SAFETY: passed on from the caller.
    if !unsafe { user::copy_to_user(a, m.as_bytes()) } {
        return (st, Err(Errno::EFAULT));
    }
    (st, Ok(0))
}

unsafe fn munmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(m) = (unsafe { user::read_struct::<fastrpc_req_munmap>(a) }) else { return (st, Err(Errno::EFAULT)) };
    let found = st
        .rpc_files
        .get(&file)
        .is_some_and(|f| f.maps.iter().any(|x| x.kind == MapKind::AddPages && x.raddr == m.vaddrout && x.len == m.size));
    if !found {
        return (st, Err(Errno::EINVAL));
    }
    let (st2, r) = kernel_message(sh, st, file, DspCallKind::KernelMunmap);
    st = st2;
    if let Some(r) = r {
        return (st, r);
    }
    if let Some(f) = st.rpc_files.get_mut(&file) {
        if let Some(i) = f.maps.iter().position(|x| x.kind == MapKind::AddPages && x.raddr == m.vaddrout && x.len == m.size) {
            f.maps.remove(i);
        }
    }
    (st, Ok(0))
}

unsafe fn mem_map<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(mut m) = (unsafe { user::read_struct::<fastrpc_mem_map>(a) }) else { return (st, Err(Errno::EFAULT)) };
    if let Err(e) = map_create(&mut st, file, m.fd, m.length, m.vaddrin) {
        return (st, Err(e));
    }
    let (st2, r) = kernel_message(sh, st, file, DspCallKind::KernelMemMap);
    st = st2;
    if let Some(r) = r {
        map_put(&mut st, file, m.fd);
        return (st, r);
    }
    let raddr = alloc_raddr(&mut st, file, m.length);
    if let Some(f) = st.rpc_files.get_mut(&file) {
        if let Some(x) = f.maps.iter_mut().find(|x| x.kind == MapKind::Handle && x.fd == m.fd) {
            x.raddr = raddr;
        }
    }
    m.vaddrout = raddr;
    // SAFETY: passed on from the caller.
    if !unsafe { user::copy_to_user(a, m.as_bytes()) } {
        // The driver unmaps again and reports the fault.
        map_put(&mut st, file, m.fd);
        return (st, Err(Errno::EFAULT));
    }
    (st, Ok(0))
}

unsafe fn mem_unmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(m) = (unsafe { user::read_struct::<fastrpc_mem_unmap>(a) }) else { return (st, Err(Errno::EFAULT)) };
    let fd = st
        .rpc_files
        .get(&file)
        .and_then(|f| f.maps.iter().find(|x| x.kind == MapKind::Handle && (m.fd < 0 || x.fd == m.fd) && x.raddr == m.vaddr).map(|x| x.fd));
    let Some(fd) = fd else { return (st, Err(Errno::EINVAL)) };
    let (st2, r) = kernel_message(sh, st, file, DspCallKind::KernelMemUnmap);
    st = st2;
    if let Some(r) = r {
        return (st, r);
    }
    map_put(&mut st, file, fd);
    (st, Ok(0))
}

unsafe fn get_dsp_info<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let Some(mut c) = (unsafe { user::read_struct::<fastrpc_ioctl_capability>(a) }) else { return (st, Err(Errno::EFAULT)) };
    c.capability = 0;
    if c.domain >= FASTRPC_DEV_MAX || c.domain == MDSP_DOMAIN_ID {
        return (st, Err(Errno::ECHRNG));
    }
    if c.attribute_id >= FASTRPC_MAX_DSP_ATTRIBUTES {
        return (st, Err(Errno::EOVERFLOW));
    }
    let (st2, r) = kernel_message(sh, st, file, DspCallKind::DspInfo);
    st = st2;
    match r {
        Some(Ok(v)) if v as u32 == DSP_UNSUPPORTED_API => return (st, Err(Errno::ENOTSUP)),
        Some(r) => return (st, r),
        None => {}
    }
    c.capability = if c.attribute_id == 0 { 0 } else { DSP_ATTRIBUTES.iter().find(|(id, _)| *id == c.attribute_id).map_or(0, |(_, v)| *v) };
    // SAFETY: passed on from the caller.
    if !unsafe { user::copy_to_user(a, c.as_bytes()) } {
        return (st, Err(Errno::EFAULT));
    }
    (st, Ok(0))
}
