//! The driver's maps: MMAP / MUNMAP (fd maps, ADD_PAGES buffers and the driver-global heap
//! maps), MUNMAP_FD, and the reference counting of handle and buffer-argument maps that invokes
//! take and give back.

use hexrpc_drivers::adsprpc::*;
use hexrpc_drivers::Errno;

use super::message::{as_result, eperm, kernel_invoke, Guard};
use crate::account::{CallKind, DspCallKind, OopsKind};
use crate::dsp::STALE_BYTE;
use crate::state::{DspMap, GlobalMap, MapKind, Shared, State};
use crate::user;

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
pub(super) unsafe fn mmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, kind: CallKind, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
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
            if m.size > sh.cfg.ion_capacity || !st.iova_room(file, m.size, sh.cfg.session_iova) {
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
            if m.size > buf_len || !st.iova_room(file, buf_len, sh.cfg.session_iova) {
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

/// MUNMAP / MUNMAP_64 (`fastrpc_internal_munmap`); a reading of the source, not the driver run.
/// In order: an ADD_PAGES buffer of the file with this (non-zero) DSP address and size; else
/// (`fastrpc_mmap_remove`) the newest map with this DSP address and length and one reference,
/// on the driver-global heap list first (**any** file's: no owner check), then the file's own
/// maps. The map is unlinked, the DSP told (`fastrpc_munmap_on_dsp`; for a heap map also
/// `fastrpc_munmap_on_dsp_rh`, folded into the same message here), and freed; a failure of the
/// message (a DSP error, no channel, a stale file) puts it back. Every failure is -1 (`EPERM`).
pub(super) unsafe fn munmap<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, kind: CallKind, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
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
pub(super) unsafe fn munmap_fd(st: &mut State, file: u64, a: u64) -> Result<i32, Errno> {
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
pub(super) fn put_handle_map(st: &mut State, file: u64, fd: i32) {
    let Some(f) = st.rpc_files.get(&file) else { return };
    if let Some(i) = f.maps.iter().rposition(|x| x.kind != MapKind::AddPages && x.fd == fd && x.va == 0) {
        put_map_at(st, file, i);
    }
}

/// Puts the buffer-argument references a call took
/// ([`Ctx::buf_maps`](crate::state::Ctx::buf_maps)): `put_args` for mapped out-buffers and
/// `context_free` for every buffer argument, on every path, error or not. A map made with
/// `FASTRPC_ATTR_KEEP_MAP` keeps the second reference it was created with.
pub(super) fn put_buffer_maps(st: &mut State, file: u64, ids: &[u64]) {
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
/// reference on no list by the driver, a kernel memory leak the bench does not count.) The map
/// takes the whole buffer's IOVA; past `iova_space` it fails like any other.
pub(super) fn map_buffer(st: &mut State, file: u64, fd: i32, attr: u32, va: u64, len: u64, iova_space: u64) -> Option<u64> {
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
    // The whole dma-buf into the file's IOVA space ([`BenchConfig::session_iova`]).
    if !st.iova_room(file, size, iova_space) {
        return None;
    }
    let id = st.id();
    let refs = if attr & FASTRPC_ATTR_KEEP_MAP != 0 { 2 } else { 1 };
    st.rpc_files.get_mut(&file)?.maps.push(DspMap { kind: MapKind::Buffer, fd, buf: Some(buf), va, len, raddr: 0, refs, size, attr, id });
    if let Some(b) = st.buffers.get_mut(&buf) {
        b.driver_maps += 1;
    }
    Some(id)
}
