//! One DSP process per identity (R3), calls that go on after an interrupt (R4), the blocking
//! release on close (R5), the session count (R9), a second INIT on a file, and the calls made
//! before a file is set up.

use std::time::{Duration, Instant};

use hexrpc_bench::{Bench, BenchConfig, CallKind, DspCallKind, EntryVersion, Fault, FaultTarget, LibraryModel, OopsKind, Snapshot};
use hexrpc_bsp::Board;
use hexrpc_drivers::upstream::{self as up, FastrpcFd};
use hexrpc_drivers::{adsprpc, aee, Errno, Error, Fd, OpenFlags, Syscalls};

use crate::rig::{allocator, channel, config, is_linux, is_upstream, launch_with, lease, numbers, rig, rig_with, teardown, Rig};

/// R3: one DSP process per identity (tgid, with the session bit downstream). A second channel of
/// the same process without SETMODE(SESSION) is refused by the DSP; SETMODE before INIT gives
/// the second identity; closing ANY file of an identity releases that identity's process.
pub(crate) fn one_dsp_process_per_identity(board: &'static Board) {
    let _n = numbers();
    let Rig { b, node, rpc: c1, shell: s1, .. } = rig(config(board));
    let tgid = rustix::process::getpid().as_raw_nonzero().get();
    assert_eq!(b.identity_of(c1), Some(tgid));
    let (c2, r2, s2) = channel(&b, node, false);
    assert_eq!(r2, Err(Error::Returned(aee::AEE_EBADSTATE)), "a second process for a live identity is refused");
    assert_eq!(b.dsp_processes().len(), 1);
    if !is_upstream(board) {
        let (c3, r3, s3) = channel(&b, node, true);
        r3.expect("the session bit is a second identity");
        assert_eq!(b.identity_of(c3), Some(tgid | 1 << 30));
        let ids: Vec<(i32, bool)> = b.dsp_processes().iter().map(|p| (p.identity, p.session)).collect();
        assert_eq!(ids, vec![(tgid, false), (tgid | 1 << 30, true)]);
        // A third: both identities are taken.
        let (c4, r4, s4) = channel(&b, node, true);
        assert_eq!(r4, Err(Error::Returned(aee::AEE_EBADSTATE)));
        b.close_raw(c4).unwrap();
        assert!(b.dsp_pid(c3).is_none(), "c4's close released tgid|session, c3's process");
        b.close_raw(c3).unwrap();
        s3.drop_lease(&b, node);
        s4.drop_lease(&b, node);
    }
    // c2 never got a process, but its close names the tgid: c1's process goes.
    assert!(b.dsp_pid(c1).is_some());
    b.close_raw(c2).unwrap();
    assert!(b.dsp_pid(c1).is_none(), "the release of c2 killed c1's process");
    assert!(b.dsp_processes().is_empty());
    b.close_raw(c1).unwrap();
    s1.drop_lease(&b, node);
    s2.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// R4 + R5: an interrupted call keeps running on the DSP and writes its buffers late; the close
/// of the channel waits for it (the release is answered only when the call returned), so once
/// close is back nothing writes any more.
pub(crate) fn interrupted_call_writes_until_the_release(board: &'static Board) {
    let _n = numbers();
    // Upstream's release waits at most the kernel-call timeout: longer than the late write here.
    let late = |b: &Bench| {
        b.register_library(
            "late",
            LibraryModel::new(EntryVersion::V2, 1, 0, |k| {
                std::thread::sleep(Duration::from_millis(400));
                let _ = k.write(0, 0, b"LATE");
            }),
        )
    };
    let (Rig { b, start, node, rpc, shell }, ()) =
        rig_with(BenchConfig { kernel_call_timeout: Duration::from_secs(5), ..config(board) }, late);
    let h = b.preload_library(rpc, "late").expect("library");
    let a = lease(&b, node, 4096);
    let (b2, fd) = (b.clone(), a.fd);
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    let caller = std::thread::spawn(move || {
        tx.send(b2.thread_id()).unwrap();
        launch_with(&b2, rpc, h, &[(fd, 4096)], true)
    });
    let tid = rx.recv().unwrap();
    assert!(b.wait_until_blocked(tid, Duration::from_secs(2)));
    std::thread::sleep(Duration::from_millis(50));
    b.interrupt(tid).unwrap();
    assert_eq!(caller.join().unwrap(), Err(Error::Os(Errno::EINTR)));
    assert_ne!(&a.read(4), b"LATE", "not written yet at the interrupt");
    b.close_raw(rpc).unwrap();
    let closed_after = t0.elapsed();
    assert!(closed_after >= Duration::from_millis(350), "close returned after {closed_after:?}, before the DSP call ended");
    assert_eq!(&a.read(4), b"LATE", "the interrupted call wrote its buffer before the release completed");
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    let leaks = b.kernel_leaks();
    if is_linux(board) {
        // 6.1.192: the interrupted context holds a reference on its file's user, so
        // fastrpc_user_free never runs: the context, the file's maps (the lease's and the
        // shell's) and the memory they pin stay for the life of the process.
        assert_eq!((leaks.users, leaks.contexts, leaks.maps, leaks.buffers.len()), (1, 1, 2, 2), "{leaks:?}");
    } else {
        assert_eq!(leaks, Default::default());
    }
    let want = b.with_kernel_leaks(&start);
    assert_eq!(b.settle(&want, Duration::from_secs(2)), want);
}

/// R5: the release on close is a kernel message a fault can hang: downstream the close waits
/// with no limit (until the hang is released), upstream it gives up after the kernel-call
/// timeout (10 s on a device, 300 ms here) and frees anyway.
pub(crate) fn release_on_close_is_a_kernel_message(board: &'static Board) {
    let _n = numbers();
    let Rig { b, start, node, rpc, shell } = rig(config(board));
    b.inject(FaultTarget::Dsp(DspCallKind::ReleaseProcess), 1, Fault::Hang);
    let b2 = b.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    let closer = std::thread::spawn(move || {
        let r = b2.close_raw(rpc);
        tx.send(()).unwrap();
        r
    });
    if is_upstream(board) {
        assert!(rx.recv_timeout(Duration::from_secs(3)).is_ok(), "upstream gives up");
        assert!(t0.elapsed() >= Duration::from_millis(300), "after the kernel-call timeout");
    } else {
        assert!(rx.recv_timeout(Duration::from_millis(600)).is_err(), "downstream close hangs with the release");
        assert_eq!(b.snapshot().rpc_files, 1, "nothing freed before the answer");
        b.release_hangs();
        assert!(rx.recv_timeout(Duration::from_secs(3)).is_ok());
    }
    assert_eq!(closer.join().unwrap(), Ok(()));
    assert_eq!(b.counts().dsp_of(DspCallKind::ReleaseProcess), 1);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    if is_linux(board) {
        // 6.1.192: the release message that timed out keeps its context, which holds the user:
        // the file's shell map and its memory stay for good. The DSP never answered, so its
        // process lives until the hang ends.
        let leaks = b.kernel_leaks();
        assert_eq!((leaks.users, leaks.contexts, leaks.maps, leaks.buffers.len()), (1, 1, 1, 1), "{leaks:?}");
        b.release_hangs();
    }
    let want = b.with_kernel_leaks(&start);
    assert_eq!(b.settle(&want, Duration::from_secs(2)), want);
}

/// R9: the comma three's CDSP has 8 non-secure sessions (GETINFO -1 / open EBUSY beyond).
pub(crate) fn eight_sessions(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(config(board));
    let mut fds = Vec::new();
    for i in 0..8 {
        let fd = b.open_raw(board.rpc_path, OpenFlags::READ_WRITE).unwrap_or_else(|e| panic!("open {i}: {e:?}"));
        if !is_upstream(board) {
            assert_eq!(adsprpc::getinfo(&b, fd, board.channel), Ok(1), "session {i}");
        }
        fds.push(fd);
    }
    if is_upstream(board) {
        assert_eq!(b.open_raw(board.rpc_path, OpenFlags::READ_WRITE), Err(Errno::EBUSY));
    } else {
        let fd = b.open_raw(board.rpc_path, OpenFlags::READ_WRITE).unwrap();
        assert_eq!(adsprpc::getinfo(&b, fd, board.channel), Err(Error::Os(Errno::EPERM)), "a ninth session");
        fds.push(fd);
    }
    for fd in fds {
        b.close_raw(fd).unwrap();
    }
}

/// `fastrpc_init_process` / `fastrpc_channel_open` / `fastrpc_file_free`: the kernel never
/// refuses a second INIT on a file. It takes another channel reference (that the close never
/// puts back, so the channel can never close) and CREATE allocates new init memory over
/// `fl->init_mem`, leaking the first for good; the DSP refuses the create while the identity has
/// a process. The HAL's identity fallback (SETMODE(SESSION), then INIT again on the same file)
/// takes exactly this path. ATTACH sends its message and creates no process.
#[test]
fn a_second_init_on_a_file_leaks_a_channel_reference_and_init_memory() {
    let _n = numbers();
    let Rig { b, start, node, rpc: c1, shell: s1 } = rig(config(&hexrpc_bsp::BENCH));
    assert_eq!((b.snapshot().init_buffers, b.snapshot().channel_refs), (1, 0));
    let creates = b.counts().dsp_of(DspCallKind::CreateProcess);
    let again = adsprpc::init(&b, c1, adsprpc::FASTRPC_INIT_CREATE, &s1.map, s1.fd, hexrpc_bench::DEFAULT_SHELL_LEN as u32);
    assert_eq!(again, Err(Error::Returned(aee::AEE_EBADSTATE)), "the DSP refuses, not the kernel");
    assert_eq!(b.counts().dsp_of(DspCallKind::CreateProcess), creates + 1, "the message went out");
    assert_eq!((b.snapshot().init_buffers, b.snapshot().channel_refs), (2, 1), "the first init memory is lost, one reference extra");
    // The identity fallback: refused, SETMODE(SESSION), INIT again on the same file.
    let (c2, r, s2) = channel(&b, node, false);
    assert_eq!(r, Err(Error::Returned(aee::AEE_EBADSTATE)));
    adsprpc::setmode(&b, c2, adsprpc::FASTRPC_MODE_SESSION).unwrap();
    adsprpc::init(&b, c2, adsprpc::FASTRPC_INIT_CREATE, &s2.map, s2.fd, hexrpc_bench::DEFAULT_SHELL_LEN as u32).expect("second identity");
    assert_eq!(b.dsp_processes().len(), 2);
    assert_eq!((b.snapshot().init_buffers, b.snapshot().channel_refs), (4, 2));
    b.close_raw(c1).unwrap();
    b.close_raw(c2).unwrap();
    let now = b.settle(&start, Duration::from_millis(300));
    assert_eq!((now.init_buffers, now.channel_refs, now.dsp_processes), (2, 2, 0), "kept for good: {now:?}");
    // ATTACH: a message, no process.
    let c3 = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    assert_eq!(adsprpc::getinfo(&b, c3, b.board().channel), Ok(1));
    assert_eq!(adsprpc::init(&b, c3, adsprpc::FASTRPC_INIT_ATTACH, &s1.map, s1.fd, 0), Ok(()));
    assert_eq!(b.counts().dsp_of(DspCallKind::CreateProcess), creates + 4);
    assert!(b.dsp_processes().is_empty(), "ATTACH created no process");
    b.close_raw(c3).unwrap();
    s1.drop_lease(&b, node);
    s2.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    assert_eq!(Snapshot { init_buffers: 0, channel_refs: 0, ..b.settle(&start, Duration::from_millis(300)) }, start);
}

/// The driver's unguarded paths before GETINFO: MMAP(ADD_PAGES) dereferences `fl->sctx` NULL
/// in `fastrpc_buf_alloc` (an oops: the task dies holding the file's map mutex; the bench
/// poisons the file, `EIO` ever after, and returns `EFAULT`); an invoke reads `channel[-1]` in
/// `fastrpc_internal_invoke`'s tail (-1 here). Both are recorded, and every INVOKE / MMAP /
/// MUNMAP before GETINFO and INIT is counted in `before_init`.
#[test]
fn calls_before_getinfo_oops_and_are_counted() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let start = b.snapshot();
    let r = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    assert_eq!(adsprpc::mmap(&b, r, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 0), Err(Error::Os(Errno::EPERM)), "size 0 is -1 first");
    assert!(b.oopses().is_empty());
    assert_eq!(adsprpc::mmap(&b, r, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Err(Error::Os(Errno::EFAULT)));
    assert_eq!(
        b.oopses(),
        vec![hexrpc_bench::Oops { request: CallKind::RpcMmap, kind: OopsKind::NullDereference, what: b.oopses()[0].what }]
    );
    assert_eq!(adsprpc::getinfo(&b, r, b.board().channel), Err(Error::Os(Errno::EIO)), "the file is poisoned");
    let r2 = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    let mut a = adsprpc::InvokeArgs::<'_, 1>::new(2).unwrap();
    assert_eq!(adsprpc::invoke(&b, r2, adsprpc::CURRENT_PROCESS_HANDLE, &mut a), Err(Error::Os(Errno::EPERM)));
    let oopses = b.oopses();
    assert_eq!((oopses.len(), oopses[1].request, oopses[1].kind), (2, CallKind::RpcInvoke, OopsKind::OutOfBoundsRead));
    // GETINFO but no INIT: no oops, still counted.
    assert_eq!(adsprpc::getinfo(&b, r2, b.board().channel), Ok(1));
    assert_eq!(adsprpc::mmap(&b, r2, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Err(Error::Os(Errno::EPERM)));
    assert_eq!(b.oopses().len(), 2);
    assert_eq!(b.counts().before_init, 4, "two MMAPs, one invoke and the GETINFO-less MMAP");
    b.close_raw(r).unwrap();
    b.close_raw(r2).unwrap();
    let node = allocator(&b);
    let (c, r3, shell) = channel(&b, node, false);
    r3.expect("INIT");
    assert_eq!(adsprpc::invoke(&b, c, adsprpc::CURRENT_PROCESS_HANDLE, &mut a), Ok(()));
    assert_eq!(b.counts().before_init, 4, "a set-up file is not counted");
    teardown(&b, node, c, shell, []);
    let now = b.settle(&start, Duration::from_millis(300));
    assert_eq!(now.oopses, 2, "every settle-to-start check fails after an oops");
    assert_eq!(Snapshot { oopses: 0, ..now }, start);
}

/// Upstream: invokes and maps before INIT_CREATE are counted in `before_init` too (the model
/// and Linux's own driver alike).
#[test]
fn upstream_calls_before_init_are_counted() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH_UPSTREAM));
    let rpc = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    let mut a = up::InvokeArgs::<'_, 1>::new(2).unwrap();
    let _ = up::invoke(&b, FastrpcFd::from_raw(rpc), adsprpc::CURRENT_PROCESS_HANDLE, &mut a);
    let _ = up::mmap(&b, FastrpcFd::from_raw(rpc), up::ADSP_MMAP_ADD_PAGES, 4096);
    assert_eq!(b.counts().before_init, 2);
    assert_eq!(b.counts().mmap_flags.get(&up::ADSP_MMAP_ADD_PAGES), Some(&1));
    b.close_raw(rpc).unwrap();
}
