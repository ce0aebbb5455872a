//! Downstream driver details (commaai agnos-kernel-sdm845 `adsprpc.c`, read, not run): identity
//! routing (`fastrpc_invoke_send`), buffer-argument maps (`get_args`, `fastrpc_mmap_create`,
//! `put_args`, `context_free`), `fastrpc_get_info`, `fastrpc_internal_munmap_fd` and
//! `context_build_overlap`. Raw ioctls on the `BENCH` board.

use hexrpc_bench::{Bench, DriverMapKind, EntryVersion, LibraryModel, V2_MAGIC};
use hexrpc_drivers::{adsprpc, aee, Errno, Error, Fd, OpenFlags, Syscalls};

use crate::rig::{allocator, channel, config, last_seen, launch, lease, numbers, observed, observer, rig_with, teardown, Lease, Rig};

/// One raw INVOKE_ATTRS: `args` are (pv, len) per argument (buffers first, then handles), with
/// their `fds` and `attrs` words; returns the ioctl's value.
fn ds_invoke_attrs(
    b: &Bench,
    rpc: Fd,
    handle: u32,
    sc: hexrpc_drivers::Scalars,
    args: &[(u64, u64)],
    fds: &[i32],
    attrs: &[u32],
) -> Result<i32, Errno> {
    let pra: Vec<adsprpc::remote_arg> =
        args.iter().map(|&(pv, len)| adsprpc::remote_arg::from_buf(adsprpc::remote_buf { pv, len })).collect();
    let mut inv = adsprpc::fastrpc_ioctl_invoke_attrs {
        inv: adsprpc::fastrpc_ioctl_invoke { handle, sc: sc.raw(), pra: pra.as_ptr() as u64 },
        fds: fds.as_ptr() as u64,
        attrs: attrs.as_ptr() as u64,
    };
    // SAFETY: a live struct of the request's size; its pointers name live tables of the length
    // the scalars give, and every buffer named in `args` is live memory of that length (or
    // lies in a dma-buf the driver maps, never touched by the host side).
    unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS, (&mut inv as *mut adsprpc::fastrpc_ioctl_invoke_attrs).cast()) }
}

/// The scalars of a one-lease v2 launch (2 in-buffers, the timer out-buffer, 1 out-handle).
fn ds_v2_sc() -> hexrpc_drivers::Scalars {
    hexrpc_drivers::Scalars::new(2, 2, 1, 0, 1).unwrap()
}

/// The two in-buffers of a one-lease v2 launch over a lease of `len` bytes.
fn ds_v2_header(len: u32) -> ([u8; 16], [u8; 8]) {
    let mut pra0 = [0u8; 16];
    pra0[0..4].copy_from_slice(&V2_MAGIC.to_le_bytes());
    pra0[4..8].copy_from_slice(&1u32.to_le_bytes());
    pra0[8..12].copy_from_slice(&len.to_le_bytes());
    let mut pra1 = [0u8; 8];
    pra1[4..8].copy_from_slice(&len.to_le_bytes());
    (pra0, pra1)
}

/// A one-lease v2 launch of `h` on `rpc` whose timer out-buffer is `(timer_pv, timer_len)` with
/// buffer fd `timer_fd` and attributes `timer_attr`; the lease is the handle.
fn ds_launch_timer_in(b: &Bench, rpc: Fd, h: u32, lease: &Lease, timer: (u64, u64), timer_fd: i32, timer_attr: u32) -> Result<i32, Errno> {
    let (pra0, pra1) = ds_v2_header(lease.map.len() as u32);
    let args = [(pra0.as_ptr() as u64, 16), (pra1.as_ptr() as u64, 8), timer, (0, 0)];
    ds_invoke_attrs(b, rpc, h, ds_v2_sc(), &args, &[-1, -1, timer_fd, lease.fd.0], &[0, 0, timer_attr, adsprpc::FASTRPC_ATTR_NOVA])
}

/// A v2 library whose kernel fails with `AEE_EFAILED` and whose entry returns that status after
/// writing the timer (`LibraryModel::returning_status`).
fn ds_failing_library(b: &Bench) {
    b.register_library("fails", LibraryModel::new(EntryVersion::V2, 1, 0, |k| k.fail(aee::AEE_EFAILED)).returning_status());
}

fn ds_rpc_with_session(b: &Bench) -> Fd {
    let rpc = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).expect("open rpc");
    assert_eq!(adsprpc::getinfo(b, rpc, b.board().channel), Ok(1));
    rpc
}

/// A [`Rig`] whose DSP process has the [`ds_failing_library`] loaded, with its handle, the lease
/// a launch passes as its handle, and a 4 KiB lease filled with 0xEE for the timer out-buffer:
/// the start of the buffer-fd tests.
fn ds_failing_with_timer_lease() -> (Rig, u32, Lease, Lease) {
    let (rig, ()) = rig_with(config(&hexrpc_bsp::BENCH), ds_failing_library);
    let h = rig.b.preload_library(rig.rpc, "fails").expect("library");
    let a = lease(&rig.b, rig.node, 4096);
    let mut t = lease(&rig.b, rig.node, 4096);
    t.fill(0xEE);
    (rig, h, a, t)
}

/// R3 (`fastrpc_invoke_send`: `msg->pid = fl->tgid`, captured at open): a file with GETINFO but
/// no INIT of its own sends its invokes once ANOTHER file has the channel open (-1 while no file
/// has), and the DSP delivers them to the process that holds the file's identity; a file whose
/// identity has no process (SETMODE(SESSION)) is answered `AEE_EBADSTATE` (the bench's choice).
#[test]
fn downstream_getinfo_only_file_reaches_the_process_of_its_identity() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let seen = observer(&b);
    let node = allocator(&b);
    let mut a = lease(&b, node, 4096);
    a.fill(0x11);
    let c0 = ds_rpc_with_session(&b);
    assert_eq!(launch(&b, c0, 0x10, &[(a.fd, 4096)]), Err(Error::Os(Errno::EPERM)), "no file has the channel open: -1");
    let (c1, r1, s1) = channel(&b, node, false);
    r1.expect("INIT");
    let h = b.preload_library(c1, "observe").expect("library");
    assert_eq!(launch(&b, c0, h, &[(a.fd, 4096)]), Ok(()), "c0 has no process of its own, but its identity has one");
    assert_eq!(last_seen(&seen), vec![0x11; 8], "c1's process ran the call");
    let c2 = ds_rpc_with_session(&b);
    adsprpc::setmode(&b, c2, adsprpc::FASTRPC_MODE_SESSION).expect("SETMODE");
    assert_eq!(launch(&b, c2, h, &[(a.fd, 4096)]), Err(Error::Returned(aee::AEE_EBADSTATE)), "no process holds tgid|session");
    b.close_raw(c2).unwrap();
    assert!(b.dsp_pid(c1).is_some(), "c2's release named another identity");
    b.close_raw(c0).unwrap();
    assert!(b.dsp_pid(c1).is_none(), "c0's release names the tgid: c1's process");
    teardown(&b, node, c1, s1, [a]);
}

/// R3 (SETMODE(SESSION) is accepted at any time and ORs bit 30 into `fl->tgid`): after INIT it
/// re-targets the file's later calls, and its close's release, to the session-bit identity.
#[test]
fn downstream_setmode_session_after_init_retargets_the_files_calls() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let seen = observer(&b);
    let node = allocator(&b);
    let tgid = rustix::process::getpid().as_raw_nonzero().get();
    let mut a = lease(&b, node, 4096);
    a.fill(0x22);
    let (c1, r1, s1) = channel(&b, node, false);
    r1.expect("INIT");
    let h1 = b.preload_library(c1, "observe").expect("library");
    adsprpc::setmode(&b, c1, adsprpc::FASTRPC_MODE_SESSION).expect("SETMODE after INIT");
    assert_eq!(launch(&b, c1, h1, &[(a.fd, 4096)]), Err(Error::Returned(aee::AEE_EBADSTATE)), "tgid|session has no process");
    let (c2, r2, s2) = channel(&b, node, true);
    r2.expect("INIT under the session bit");
    let h2 = b.preload_library(c2, "observe").expect("library");
    assert_eq!(launch(&b, c1, h2, &[(a.fd, 4096)]), Ok(()), "c1's calls now reach c2's process");
    assert_eq!(last_seen(&seen), vec![0x22; 8]);
    b.close_raw(c1).unwrap();
    let left: Vec<i32> = b.dsp_processes().iter().map(|p| p.identity).collect();
    assert_eq!(left, vec![tgid], "c1's release ended tgid|session (c2's process); its own stays on the DSP");
    teardown(&b, node, c2, s2, [a, s1]);
}

/// Buffer fds (`get_args`, `fastrpc_mmap_create`, `put_args`): an out-buffer passed with its
/// dma-buf fd is mapped, and the DSP writes it in place: the write is there after the DSP
/// answered an error (no copy-back happens, none is needed). The same buffer with fd -1 is
/// copied and stays as it was. The call's map goes with the call.
#[test]
fn downstream_mapped_out_buffer_writes_are_visible_after_a_dsp_error() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, h, a, t) = ds_failing_with_timer_lease();
    let timer = (t.map.addr() as u64, 8);
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, -1, 0), Ok(aee::AEE_EFAILED));
    assert_eq!(t.read(8), vec![0xEE; 8], "a copied out-buffer is not copied back after an error");
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, t.fd.0, 0), Ok(aee::AEE_EFAILED));
    assert_ne!(t.read(8), vec![0xEE; 8], "the DSP wrote the mapped out-buffer in place");
    assert!(b.driver_maps(rpc).unwrap().iter().all(|m| m.kind != DriverMapKind::Buffer), "the call's buffer map went with it");
    teardown(&b, node, rpc, shell, [a, t]);
}

/// Buffer fds: a map that cannot be made (the fd is not a dma-buf: `ion_import_dma_buf_fd`
/// fails) is ignored by `get_args` and the buffer is copied: after a DSP error nothing is
/// written, and no map is left. (Today's copy-always model also passes the fallback half; the
/// dma-buf half is what it lacked.)
#[test]
fn downstream_a_buffer_fd_that_is_not_a_dma_buf_falls_back_to_copy() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, h, a, t) = ds_failing_with_timer_lease();
    let timer = (t.map.addr() as u64, 8);
    // The ION client's descriptor and the FastRPC file's own are no dma-bufs.
    for not_a_buf in [node.0, rpc.0] {
        assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, not_a_buf, adsprpc::FASTRPC_ATTR_KEEP_MAP), Ok(aee::AEE_EFAILED));
        assert_eq!(t.read(8), vec![0xEE; 8], "copied: no copy-back after the error");
        assert!(b.driver_maps(rpc).unwrap().iter().all(|m| m.kind != DriverMapKind::Buffer), "no map, KEEP_MAP or not");
    }
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, t.fd.0, 0), Ok(aee::AEE_EFAILED));
    assert_ne!(t.read(8), vec![0xEE; 8], "the real dma-buf is mapped and written in place");
    teardown(&b, node, rpc, shell, [a, t]);
}

/// Buffer fds with `FASTRPC_ATTR_KEEP_MAP` (`fastrpc_mmap_create` creates the map with two
/// references, the call puts one): the map outlives the call, a later call with the same range
/// takes it again (one reference left after it), and MUNMAP_FD with its address and length, or
/// the channel's close, removes it and the hold it has on the buffer. The DSP is told the whole
/// dma-buf (`map->size`).
#[test]
fn downstream_keep_map_outlives_the_call_until_munmap_fd_or_close() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, _seen, h) = observed(config(&hexrpc_bsp::BENCH));
    let a = lease(&b, node, 4096);
    let t = lease(&b, node, 16384);
    let t_buf = b.buffer_of(t.fd).unwrap();
    let va = t.map.addr() as u64;
    let keep = adsprpc::FASTRPC_ATTR_KEEP_MAP;
    let kept = |b: &Bench| b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Buffer).collect::<Vec<_>>();
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    let m = kept(&b);
    assert_eq!(m.iter().map(|m| (m.fd, m.refs, m.buffer, m.len, m.dsp_size)).collect::<Vec<_>>(), vec![(t.fd.0, 1, Some(t_buf), 8, 16384)]);
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    assert_eq!(kept(&b).iter().map(|m| m.refs).collect::<Vec<_>>(), vec![1], "found again, put again");
    assert_eq!(adsprpc::munmap_fd(&b, rpc, t.fd, va, 8), Ok(()));
    assert!(kept(&b).is_empty());
    assert_eq!(adsprpc::munmap_fd(&b, rpc, t.fd, va, 8), Err(Error::Os(Errno::EPERM)));
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    assert_eq!(kept(&b).len(), 1);
    t.drop_lease(&b, node);
    assert!(b.buffer_alive(t_buf), "the kept map pins the buffer");
    b.close_raw(rpc).unwrap();
    assert!(!b.buffer_alive(t_buf), "close freed the kept map");
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// Buffer fds (`get_args`, "map ion buffers"): the page offset comes from the VMA that holds the
/// map's creation address, and only `offset < map->size` is checked: a buffer that starts inside
/// the dma-buf but runs past its end passes (the DSP writes what lies inside; the rest is
/// dropped here, unknown on a device), one whose first page lies past the end is -1.
#[test]
fn downstream_a_mapped_buffer_is_checked_at_its_start_only() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, h, a, t) = ds_failing_with_timer_lease();
    let va = t.map.addr() as u64;
    let keep = adsprpc::FASTRPC_ATTR_KEEP_MAP;
    // 8 KiB from the start of a 4 KiB dma-buf (only 4 KiB are mapped on the host: the copy-less
    // path never touches the rest).
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8192), t.fd.0, keep), Ok(aee::AEE_EFAILED), "the end is not checked");
    assert_ne!(t.read(8), vec![0xEE; 8], "the DSP wrote the part inside the buffer in place");
    let m: Vec<_> =
        b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Buffer).map(|m| (m.len, m.dsp_size)).collect();
    assert_eq!(m, vec![(8192, 4096)], "the kept map covers 8 KiB of a 4 KiB buffer");
    // The kept map covers va + 4096, but that page is past the buffer: offset 4096 >= size.
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va + 4096, 8), t.fd.0, 0), Err(Errno::EPERM), "a start past the end is -1");
    teardown(&b, node, rpc, shell, [a, t]);
}

/// R18, which VMA: the page offset of a mapped buffer is its page's distance from the start of
/// the VMA that holds the map's CREATION address (`find_vma(current->mm, map->va)` in
/// `get_args`), as if that VMA showed the dma-buf from offset 0, not from the VMA the buffer lies
/// in. A kept map made over two host mappings side by side (each showing the buffer from its
/// offset 0) and a buffer in the second: the DSP writes 8 KiB into the dma-buf (its distance
/// from the first), where the caller sees nothing of it, not at 0, where the second mapping
/// shows it. A model that took the buffer's own VMA fails this test every time; the other R18
/// tests catch it only in some address layouts.
#[test]
fn downstream_a_buffer_in_a_later_vma_of_its_map_is_placed_from_the_creation_vma() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, ()) = rig_with(config(&hexrpc_bsp::BENCH), ds_failing_library);
    let h = b.preload_library(rpc, "fails").expect("library");
    let a = lease(&b, node, 4096);
    let mut t = lease(&b, node, 16384);
    let (first, second) = b.map_twice_side_by_side(t.fd, 8192, 8192).expect("two mappings side by side");
    assert_eq!(second, first + 8192);
    let keep = adsprpc::FASTRPC_ATTR_KEEP_MAP;
    // The kept map is made at `first` and covers both mappings.
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (first as u64, 16384), t.fd.0, keep), Ok(aee::AEE_EFAILED));
    t.fill(0xEE);
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (second as u64, 8), t.fd.0, 0), Ok(aee::AEE_EFAILED));
    let at = |off: usize| {
        let mut v = vec![0u8; 8];
        t.map.read_at(off, &mut v).expect("read");
        v
    };
    assert_eq!(at(0), vec![0xEE; 8], "placed from the buffer's own VMA (where the caller sees it)");
    assert_ne!(at(8192), vec![0xEE; 8], "the DSP wrote 8 KiB into the dma-buf, the buffer's distance from the map's VMA");
    let maps: Vec<_> = b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Buffer).collect();
    assert_eq!(maps.len(), 1, "the second call found the kept map");
    for (addr, len) in [(first, 8192), (second, 8192)] {
        // SAFETY: the two mappings made above, unmapped once each with their own lengths.
        unsafe { b.munmap(std::ptr::NonNull::new(addr as *mut u8).unwrap(), len) }.expect("munmap");
    }
    teardown(&b, node, rpc, shell, [a, t]);
}

/// `context_free` puts buffer-argument maps only: after a call that failed (a handle at a later
/// argument that is no dma-buf, or a send with no channel open), every handle already mapped
/// keeps the reference the call took.
#[test]
fn downstream_handle_maps_of_a_failed_call_keep_their_references() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let node = allocator(&b);
    let a = lease(&b, node, 4096);
    // No channel open: get_args maps the handle, then fastrpc_invoke_send fails.
    let c0 = ds_rpc_with_session(&b);
    assert_eq!(launch(&b, c0, 0x10, &[(a.fd, 4096)]), Err(Error::Os(Errno::EPERM)));
    let maps: Vec<_> = b.driver_maps(c0).unwrap().into_iter().map(|m| (m.kind, m.fd, m.refs)).collect();
    assert_eq!(maps, vec![(DriverMapKind::Handle, a.fd.0, 1)], "the failed send left the handle's map");
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let (pra0, pra1) = ds_v2_header(4096);
    let mut timer = [0u8; 8];
    let args = [(pra0.as_ptr() as u64, 16), (pra1.as_ptr() as u64, 8), (timer.as_mut_ptr() as u64, 8), (0, 0), (0, 0)];
    let sc = hexrpc_drivers::Scalars::new(2, 2, 1, 0, 2).unwrap();
    let nova = adsprpc::FASTRPC_ATTR_NOVA;
    assert_eq!(ds_invoke_attrs(&b, rpc, 0x10, sc, &args, &[-1, -1, -1, a.fd.0, node.0], &[0, 0, 0, nova, nova]), Err(Errno::EPERM));
    let maps: Vec<_> = b.driver_maps(rpc).unwrap().into_iter().map(|m| (m.kind, m.fd, m.refs)).collect();
    assert_eq!(maps, vec![(DriverMapKind::Handle, a.fd.0, 1)], "the first handle keeps its map after the second failed");
    b.close_raw(c0).unwrap();
    teardown(&b, node, rpc, shell, [a]);
}

/// `fastrpc_get_info` records `fl->cid` before it allocates the session: a GETINFO that found no
/// free session fails on that file for good, even after a session was given back.
#[test]
fn downstream_a_failed_getinfo_is_sticky() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let fds: Vec<Fd> = (0..8).map(|_| ds_rpc_with_session(&b)).collect();
    let late = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    assert_eq!(adsprpc::getinfo(&b, late, b.board().channel), Err(Error::Os(Errno::EPERM)));
    b.close_raw(fds[0]).unwrap();
    assert_eq!(b.snapshot().sessions, 7);
    assert_eq!(adsprpc::getinfo(&b, late, b.board().channel), Err(Error::Os(Errno::EPERM)), "sticky: the file never gets a session");
    let fresh = ds_rpc_with_session(&b);
    b.close_raw(late).unwrap();
    b.close_raw(fresh).unwrap();
    for fd in &fds[1..] {
        b.close_raw(*fd).unwrap();
    }
    assert_eq!(b.snapshot().sessions, 0);
}

/// `fastrpc_mmap_create` for an MMAP of a dma-buf tells the DSP the whole buffer
/// (`sg_dma_len`), not the size asked for; `fastrpc_mmap_find` returns the NEWEST matching map
/// (added at the list head): MUNMAP_FD over a range two maps cover takes the later one.
#[test]
fn downstream_mmap_tells_the_whole_buffer_and_lookups_take_the_newest_map() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, _seen, h) = observed(config(&hexrpc_bsp::BENCH));
    let a = lease(&b, node, 4096);
    let t = lease(&b, node, 16384);
    let va = t.map.addr() as u64;
    adsprpc::mmap(&b, rpc, t.fd, 0, va, 4096).expect("MMAP");
    let m: Vec<_> =
        b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Mmap).map(|m| (m.len, m.dsp_size)).collect();
    assert_eq!(m, vec![(4096, 16384)], "the DSP is told the whole dma-buf");
    let keep = adsprpc::FASTRPC_ATTR_KEEP_MAP;
    let bufs =
        |b: &Bench| b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Buffer).map(|m| m.len).collect::<Vec<_>>();
    // A buffer inside the MMAP's range takes that map (any covering map of the fd).
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    assert!(bufs(&b).is_empty(), "the MMAP map was found, none made");
    // Two kept buffer maps of one fd past it: (va + 8K, 8), then (va + 8K, 64), which the first
    // does not cover.
    let at = va + 8192;
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (at, 8), t.fd.0, keep), Ok(0));
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (at, 64), t.fd.0, keep), Ok(0));
    assert_eq!(bufs(&b), vec![8, 64]);
    // (at, 8) lies in both; the newest, the 64-byte one, goes.
    assert_eq!(adsprpc::munmap_fd(&b, rpc, t.fd, at, 8), Ok(()));
    assert_eq!(bufs(&b), vec![8], "MUNMAP_FD took the newest covering map");
    teardown(&b, node, rpc, shell, [a, t]);
}

/// A handle map has va 0 and len 0 (`get_args`: `fastrpc_mmap_create(fd, NOVA, 0, 0)`), so
/// MUNMAP_FD(fd, 0, n > 0) never finds it (-1, the buffer stays pinned) and MUNMAP_FD(fd, 0, 0)
/// frees it.
#[test]
fn downstream_a_handle_map_is_reached_by_munmap_fd_with_length_zero_only() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, _seen, h) = observed(config(&hexrpc_bsp::BENCH));
    let a = lease(&b, node, 4096);
    launch(&b, rpc, h, &[(a.fd, 4096)]).expect("launch");
    let m: Vec<_> = b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.fd == a.fd.0).map(|m| (m.kind, m.len, m.dsp_size)).collect();
    assert_eq!(m, vec![(DriverMapKind::Handle, 0, 4096)]);
    assert_eq!(adsprpc::munmap_fd(&b, rpc, a.fd, 0, 4096), Err(Error::Os(Errno::EPERM)), "(fd, 0, n) never matches a handle map");
    assert_eq!(b.driver_maps(rpc).unwrap().len(), 1);
    assert_eq!(adsprpc::munmap_fd(&b, rpc, a.fd, 0, 0), Ok(()));
    assert!(b.driver_maps(rpc).unwrap().is_empty());
    teardown(&b, node, rpc, shell, [a]);
}

/// `context_build_overlap`: an out-buffer that lies inside an in-buffer has no copy of its own;
/// it is that in-buffer's bytes in the kernel's copy, so what the DSP leaves unwritten comes
/// back as the in-buffer's bytes (not stale memory), and the DSP's write through one argument
/// is the other's.
#[test]
fn downstream_overlapping_buffers_share_one_kernel_copy() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, _seen, h) = observed(config(&hexrpc_bsp::BENCH));
    let a = lease(&b, node, 4096);
    let (pra0, _) = ds_v2_header(4096);
    // y[0..8]: the (offset, lease) pair pra1 carries; y[8..24]: the 16-byte timer out-buffer,
    // inside pra1 = y[0..24].
    let mut y = [0x77u8; 24];
    y[0..4].copy_from_slice(&0u32.to_le_bytes());
    y[4..8].copy_from_slice(&4096u32.to_le_bytes());
    let base = y.as_mut_ptr() as u64;
    let args = [(pra0.as_ptr() as u64, 16), (base, 24), (base + 8, 16), (0, 0)];
    assert_eq!(ds_invoke_attrs(&b, rpc, h, ds_v2_sc(), &args, &[-1, -1, -1, a.fd.0], &[0, 0, 0, adsprpc::FASTRPC_ATTR_NOVA]), Ok(0));
    // SAFETY: `y` is live; the kernel wrote it only during the call above.
    let y = unsafe { core::ptr::read_volatile(&y) };
    assert_eq!(&y[16..24], &[0x77; 8], "the timer's unwritten half is pra1's copied bytes, not stale memory");
    teardown(&b, node, rpc, shell, [a]);
}
