//! Handle maps keyed by fd number that outlive the call (R1), the lowest-free descriptor rule
//! that hands a dropped lease's number to the next one (R8), the upstream shell map, MMAP
//! `vaddrout` (R2), and the downstream driver-global heap maps.

use std::time::Duration;

use hexrpc_bench::{Bench, BenchConfig, CallKind, DriverMapKind, DspCallKind, Fault, FaultTarget, FdlistPolicy, OopsKind, Snapshot};
use hexrpc_bsp::Board;
use hexrpc_drivers::upstream::{self as up, FastrpcFd};
use hexrpc_drivers::{adsprpc, aee, Errno, Error, Fd, Syscalls};

use crate::rig::{channel, config, eventually, is_linux, is_upstream, last_seen, launch, lease, numbers, observed, rig, teardown, Rig};

/// R1: a handle map made by INVOKE outlives the call (the default DSP lists nothing in the
/// fdlist); MUNMAP_FD (downstream: request 0xC018520D, 24-byte struct, -1 when no map) drops
/// one reference at a time; the channel's close frees what is left and the memory it pinned.
pub(crate) fn handle_map_outlives_the_call(board: &'static Board) {
    let _n = numbers();
    let (Rig { b, start, node, rpc, shell }, _seen, h) = observed(config(board));
    // The process's init memory (downstream fastrpc_init_process, upstream
    // fastrpc_init_create_process) is held by the file until its close; Linux's own driver's is
    // not in the bench's snapshot.
    assert_eq!(b.snapshot().init_buffers, usize::from(!is_linux(board)), "one init buffer, the file's");
    let a = lease(&b, node, 8192);
    let a_buf = b.buffer_of(a.fd).expect("a buffer");
    launch(&b, rpc, h, &[(a.fd, 8192)]).expect("launch 1");
    let handle_maps = |b: &Bench| b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.fd == a.fd.0).collect::<Vec<_>>();
    let maps = handle_maps(&b);
    assert_eq!(maps.len(), 1, "{maps:?}");
    assert_eq!((maps[0].kind, maps[0].refs, maps[0].buffer), (DriverMapKind::Handle, 1, Some(a_buf)), "the call's map stays after it");
    launch(&b, rpc, h, &[(a.fd, 8192)]).expect("launch 2");
    if is_linux(board) {
        // 6.1.192: fastrpc_create_maps gives every handle a fresh map per call
        // (fastrpc_map_attach), each with the call's one reference.
        let maps = handle_maps(&b);
        assert_eq!(maps.iter().map(|m| (m.refs, m.buffer)).collect::<Vec<_>>(), vec![(1, Some(a_buf)); 2], "a second map: {maps:?}");
    } else {
        assert_eq!(handle_maps(&b)[0].refs, 2, "each call takes a reference that no fdlist gave back");
    }
    if !is_upstream(board) {
        // MUNMAP_FD by its raw number and struct: fd, flags, va, len (24 bytes).
        assert_eq!(adsprpc::FASTRPC_IOCTL_MUNMAP_FD, 0xC018_520D);
        let munmap_fd = |fd: i32| {
            let mut m = [0u8; 24];
            m[0..4].copy_from_slice(&fd.to_le_bytes());
            // SAFETY: a live 24-byte buffer, the size the request encodes; no pointers inside.
            unsafe { b.ioctl(rpc, 0xC018_520D, m.as_mut_ptr().cast()) }
        };
        assert_eq!(munmap_fd(a.fd.0), Ok(0));
        assert_eq!(handle_maps(&b)[0].refs, 1);
        assert_eq!(munmap_fd(a.fd.0), Ok(0));
        assert!(handle_maps(&b).is_empty(), "the last reference freed the map");
        assert_eq!(munmap_fd(a.fd.0), Err(Errno::EPERM), "-1 when no map is left");
        launch(&b, rpc, h, &[(a.fd, 8192)]).expect("launch 3");
        assert_eq!(handle_maps(&b)[0].refs, 1);
    }
    // The map pins the buffer after every user reference is gone; close frees it.
    a.drop_lease(&b, node);
    assert!(b.buffer_alive(a_buf), "the driver map keeps the dropped lease's memory");
    b.close_raw(rpc).unwrap();
    // (Linux frees the file's maps from the release's deferred context put, on its worker.)
    assert!(eventually(|| !b.buffer_alive(a_buf)), "the channel's close freed the map and the memory");
    assert!(b.all_driver_maps().is_empty());
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

/// R1 with [`FdlistPolicy::EveryHandle`]: a DSP that lists each handle after a successful call
/// gives the call's reference back at once (the knob a host's tests can select).
pub(crate) fn fdlist_policy_every_handle_releases_at_once(board: &'static Board) {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, _seen, h) = observed(BenchConfig { fdlist: FdlistPolicy::EveryHandle, ..config(board) });
    let a = lease(&b, node, 4096);
    launch(&b, rpc, h, &[(a.fd, 4096)]).expect("launch");
    assert!(b.driver_maps(rpc).unwrap().iter().all(|m| m.fd != a.fd.0), "the fdlist released the map");
    // After a DSP error nothing is listed.
    b.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Returned(aee::AEE_EFAILED));
    assert_eq!(launch(&b, rpc, h, &[(a.fd, 4096)]), Err(Error::Returned(aee::AEE_EFAILED)));
    assert_eq!(b.driver_maps(rpc).unwrap().iter().filter(|m| m.fd == a.fd.0).count(), 1, "no fdlist after an error");
    teardown(&b, node, rpc, shell, [a]);
}

/// R8 + R1: drop lease A (fd N) that a call used as a handle, allocate B: B gets fd N (lowest
/// free number; the bench's own backing descriptors do not take it), and a launch with B hands
/// the DSP A's memory, kept alive by the stale map. Downstream, MUNMAP_FD until -1 clears the
/// number; then the DSP sees B.
pub(crate) fn stale_fd_number_hands_the_dsp_the_old_buffer(board: &'static Board) {
    let _n = numbers();
    let (Rig { b, start, node, rpc, shell }, seen, h) = observed(config(board));
    let mut a = lease(&b, node, 4096);
    a.fill(0xAA);
    launch(&b, rpc, h, &[(a.fd, 4096)]).expect("launch A");
    assert_eq!(last_seen(&seen), vec![0xAA; 8]);
    let (n, a_buf) = (a.fd, b.buffer_of(a.fd).unwrap());
    a.drop_lease(&b, node);
    let mut lb = lease(&b, node, 4096);
    assert_eq!(lb.fd, n, "the next buffer gets the dropped lease's number");
    lb.fill(0xBB);
    let b_buf = b.buffer_of(lb.fd).unwrap();
    assert_ne!(a_buf, b_buf);
    launch(&b, rpc, h, &[(lb.fd, 4096)]).expect("launch B");
    if is_linux(board) {
        // 6.1.192: fastrpc_map_lookup matches the number AND the dma-buf behind it, and every
        // handle gets a map of its own: the DSP sees B; the stale map only pins A until close.
        assert_eq!(last_seen(&seen), vec![0xBB; 8], "the real driver hands the DSP B");
        let maps: Vec<_> = b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.fd == n.0).map(|m| (m.buffer, m.refs)).collect();
        assert_eq!(maps, vec![(Some(a_buf), 1), (Some(b_buf), 1)], "A's stale map and B's own under number {n:?}");
        assert!(b.buffer_alive(a_buf), "the stale map still pins A");
    } else {
        assert_eq!(last_seen(&seen), vec![0xAA; 8], "the DSP got the OLD map's memory, not B's");
        let m = b.driver_maps(rpc).unwrap().into_iter().find(|m| m.fd == n.0).unwrap();
        assert_eq!((m.buffer, m.refs), (Some(a_buf), 2), "one map of number {n:?}, still A's");
    }
    assert_eq!(lb.read(8), vec![0xBB; 8]);
    if !is_upstream(board) {
        while adsprpc::munmap_fd(&b, rpc, n, 0, 0).is_ok() {}
        assert!(!b.buffer_alive(a_buf), "A is gone with its last map");
        launch(&b, rpc, h, &[(lb.fd, 4096)]).expect("launch B again");
        assert_eq!(last_seen(&seen), vec![0xBB; 8], "a fresh map of B");
    }
    teardown(&b, node, rpc, shell, [lb]);
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

/// R1-up: upstream INIT_CREATE keeps the shell buffer's map until close, keyed by its number:
/// the first lease allocated after the shell lease is dropped takes that number, and a launch
/// with it hands the DSP the shell's pages.
#[test]
fn upstream_shell_map_is_kept_until_close() {
    let _n = numbers();
    let (Rig { b, node, rpc, shell, .. }, seen, h) = observed(config(&hexrpc_bsp::BENCH_UPSTREAM));
    let n = shell.fd;
    let shell_buf = b.buffer_of(n).unwrap();
    let kept = b.driver_maps(rpc).unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!((kept[0].kind, kept[0].fd, kept[0].buffer), (DriverMapKind::Handle, n.0, Some(shell_buf)));
    shell.drop_lease(&b, node);
    let mut lb = lease(&b, node, 4096);
    assert_eq!(lb.fd, n);
    lb.fill(0x5A);
    launch(&b, rpc, h, &[(lb.fd, 4096)]).expect("launch");
    assert_eq!(&last_seen(&seen)[..4], b"\x7fELF", "the DSP got the shell's pages");
    b.close_raw(rpc).unwrap();
    assert!(!b.buffer_alive(shell_buf));
    lb.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// R2: the comma three's MMAP never writes `vaddrout` (the caller reads its own input back);
/// the upstream driver writes the DSP address.
pub(crate) fn mmap_vaddrout(board: &'static Board) {
    let _n = numbers();
    let Rig { b, node, rpc, shell, .. } = rig(config(board));
    if is_upstream(board) {
        let v = up::mmap(&b, FastrpcFd::from_raw(rpc), up::ADSP_MMAP_ADD_PAGES, 4096).expect("MMAP");
        assert_ne!(v, 0, "upstream writes the DSP address");
        up::munmap(&b, FastrpcFd::from_raw(rpc), v, 4096).expect("MUNMAP");
        assert_eq!(b.counts().mmap_flags.get(&up::ADSP_MMAP_ADD_PAGES), Some(&1), "counted by flags");
    } else {
        assert_eq!(adsprpc::mmap(&b, rpc, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Ok(0), "vaddrout is the input (0)");
        let mut m =
            adsprpc::fastrpc_ioctl_mmap { fd: -1, flags: adsprpc::ADSP_MMAP_ADD_PAGES, vaddrin: 0, size: 4096, vaddrout: 0x1234_5000 };
        // SAFETY: a live struct of the request's size; no pointers inside are dereferenced.
        let rc = unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_MMAP, (&mut m as *mut adsprpc::fastrpc_ioctl_mmap).cast()) };
        assert_eq!(rc, Ok(0));
        assert_eq!(m.vaddrout, 0x1234_5000, "a stale input is echoed back as if it were an address");
        assert_eq!(b.counts().mmap_flags.get(&adsprpc::ADSP_MMAP_ADD_PAGES), Some(&2), "counted by flags");
        let on = rig(BenchConfig { mmap_writes_vaddrout: true, ..config(board) });
        assert_ne!(
            adsprpc::mmap(&on.b, on.rpc, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096),
            Ok(0),
            "the knob selects a writing CAF driver"
        );
        teardown(&on.b, on.node, on.rpc, on.shell, []);
    }
    teardown(&b, node, rpc, shell, []);
}

/// One raw downstream MMAP: the ioctl's own result and the struct as the kernel left it.
fn raw_mmap(b: &Bench, rpc: Fd, fd: i32, flags: u32, size: u64, vaddrout: u64) -> (Result<i32, Errno>, adsprpc::fastrpc_ioctl_mmap) {
    let mut m = adsprpc::fastrpc_ioctl_mmap { fd, flags, vaddrin: 0, size, vaddrout };
    // SAFETY: a live struct of the request's size; no pointers inside are dereferenced.
    let rc = unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_MMAP, (&mut m as *mut adsprpc::fastrpc_ioctl_mmap).cast()) };
    (rc, m)
}

/// Downstream heap maps (`fastrpc_internal_mmap`, `fastrpc_mmap_create`, `fastrpc_mmap_add`,
/// `fastrpc_mmap_on_dsp`, `fastrpc_internal_munmap`): MMAP with `ADSP_MMAP_HEAP_ADDR` ignores
/// the fd (-1 works), hands the DSP unzeroed memory, never returns `vaddrout`, and puts the map
/// on a driver-global list no file owns: neither the close of the file that made it nor a CDSP
/// restart frees it, a MUNMAP of its DSP address from another file does.
/// `ADSP_MMAP_REMOTE_HEAP_ADDR`'s hyp-assign to sdm845's empty VM list fails after the DSP
/// mapped the pages, and the driver frees them under the DSP: a violation the bench reports.
#[test]
fn heap_maps_are_global_unzeroed_and_outlive_their_file() {
    let _n = numbers();
    let Rig { b, start, node, rpc: c1, shell: s1 } = rig(config(&hexrpc_bsp::BENCH));
    let (rc, m) = raw_mmap(&b, c1, -1, adsprpc::ADSP_MMAP_HEAP_ADDR, 8192, 0x1234_5000);
    assert_eq!(rc, Ok(0), "fd -1 is fine: a heap map never imports its fd");
    assert_eq!(m.vaddrout, 0x1234_5000, "vaddrout is the caller's own");
    let maps = b.global_heap_maps();
    assert_eq!(maps.len(), 1);
    assert_eq!((maps[0].flags, maps[0].fd, maps[0].len, maps[0].refs), (adsprpc::ADSP_MMAP_HEAP_ADDR, -1, 8192, 1));
    assert!(maps[0].contents.iter().all(|&x| x == hexrpc_bench::STALE_BYTE), "never zeroed");
    assert!(b.driver_maps(c1).unwrap().is_empty(), "not on the file's list");
    assert_eq!(b.snapshot().global_maps, 1);
    b.close_raw(c1).unwrap();
    s1.drop_lease(&b, node);
    assert_eq!(b.snapshot().global_maps, 1, "the file's close leaves it");
    b.restart_dsp();
    assert_eq!(b.snapshot().global_maps, 1, "a CDSP restart leaves it");
    let (c2, r, s2) = channel(&b, node, false);
    r.expect("INIT after the restart");
    assert_eq!(adsprpc::munmap(&b, c2, maps[0].raddr, 4096), Err(Error::Os(Errno::EPERM)), "the length must match");
    assert_eq!(adsprpc::munmap(&b, c2, maps[0].raddr, 8192), Ok(()), "another file's MUNMAP frees it");
    assert_eq!(b.snapshot().global_maps, 0);
    assert!(b.oopses().is_empty());
    let (rc, _) = raw_mmap(&b, c2, 12345, adsprpc::ADSP_MMAP_REMOTE_HEAP_ADDR, 4096, 0);
    assert_eq!(rc, Err(Errno::EPERM));
    assert_eq!(b.snapshot().global_maps, 0, "the bail path freed it");
    let oopses = b.oopses();
    assert_eq!(oopses.len(), 1, "{oopses:?}");
    assert_eq!((oopses[0].request, oopses[0].kind), (CallKind::RpcMmap, OopsKind::FreedWhileDspMapped));
    let flags = b.counts().mmap_flags;
    assert_eq!((flags.get(&adsprpc::ADSP_MMAP_HEAP_ADDR), flags.get(&adsprpc::ADSP_MMAP_REMOTE_HEAP_ADDR)), (Some(&1), Some(&1)));
    teardown(&b, node, c2, s2, []);
    let now = b.settle(&start, Duration::from_secs(1));
    assert_eq!(now.oopses, 1, "the violation stays counted");
    assert_eq!(Snapshot { oopses: 0, ..now }, start);
}
