//! The user invokes (INVOKE, INVOKE_FD, INVOKE_ATTRS, INVOKE_CRC): the argument tables, the
//! handle and buffer maps, the kernel's copy buffer (`context_build_overlap`), the send to the
//! DSP process of the file's identity, and the interruptible wait with its copy-back.

use std::sync::Arc;
use std::time::Duration;

use hexrpc_drivers::adsprpc::*;
use hexrpc_drivers::{Errno, Scalars};
use zerocopy::FromBytes;

use super::maps::{map_buffer, put_buffer_maps, put_handle_map};
use super::message::{as_result, eperm, Guard, COPIED};
use crate::account::{CallKind, Fault};
use crate::dsp::{self, Job, STALE_BYTE};
use crate::entry::HandleBuf;
use crate::state::{Ctx, DspMap, MapKind, Shared, State};
use crate::user;

/// Kernel virtual addresses of the driver's copies (what `remote_arg64.pv` holds for buffers).
const KVA_BASE: u64 = 0xFFFF_FF80_1000_0000;

const FASTRPC_CTX_MAX: usize = 256;

#[allow(clippy::too_many_lines)]
pub(super) unsafe fn invoke<'a>(
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
        buf_maps.push(if fd != 0 && fd != -1 {
            map_buffer(&mut st, file, fd, arg_attr(i), b.pv, b.len, sh.cfg.session_iova)
        } else {
            None
        });
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
                // Mapping the whole dma-buf into the file's context bank takes its IOVA; past
                // the space the map fails, and so does the call (R22).
                if !st.iova_room(file, blen, sh.cfg.session_iova) {
                    fail(&mut st);
                    return (st, eperm());
                }
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
    // get_args: the copy buffer (metadata and copies) from the file's cache or newly mapped.
    let copy_buf = match st.take_copy_buf(file, copylen, sh.cfg.session_iova) {
        Ok(size) => size,
        Err(e) => {
            fail(&mut st);
            return (st, Err(e));
        }
    };
    COPIED.with(|c| c.set((total, Duration::ZERO)));
    let ctx_id = st.id();
    st.ctxs
        .insert(ctx_id, Ctx { file, sc: inv.sc, out_ptrs, crc: crc_ptr, result: None, parked: false, buf_maps: taken.clone(), copy_buf });
    st.ctxs_high_water = st.ctxs_high_water.max(st.ctxs.len());
    // `getperfcounter` at the top of `fastrpc_internal_invoke`: every thread that invokes gets a
    // record, profiling on or off, freed only with the file (`fastrpc_file_free`).
    let mut records = 0;
    if let Some(f) = st.rpc_files.get_mut(&file) {
        let rec = f.perf.entry(tid).or_insert([0; 12]);
        if f.profile {
            rec[0] += 1;
            rec[9] = tid as i64;
        }
        records = f.perf.len();
    }
    st.perf_records_high_water = st.perf_records_high_water.max(records);
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
        st.free_ctx(ctx_id);
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
    let Some(ctx) = st.free_ctx(ctx_id) else { return (st, eperm()) };
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
