//! hexrpc's own calls against Linux's own `fastrpc.c` (6.1.192, the `bench-linux` board): a
//! whole served session (create, the listener, a library fetched through the reverse file
//! service, launches at non-zero offsets, a batch, a DSP-side MMAP through apps_mem, a deadline
//! that fires, a DSP restart, recoveries, the close) never makes the real driver answer `EFAULT`
//! or `EINVAL`: every request hexrpc builds is well-formed for it. The driver's refusals that
//! belong to the scenario (`EINTR` of the deadline, `EPIPE` after the restart) are seen, so the
//! log is known to record.
#![cfg(feature = "linux")]

use std::collections::BTreeMap;
use std::time::Duration;

use hexrpc_bench::{wire, Bench, DspCallKind, Fault, FaultTarget, LibraryModel, ReverseRequest, TableKernel};
use hexrpc_drivers::{adsprpc, listener, Errno, Scalars};
use hexrpc_hal::internal::ListenerPlumbing;
use hexrpc_hal::Cause;
use hexrpc_runtime::launch::{Batch, BufferRef, PackedLaunch, Scalar, Signature};
use hexrpc_scenarios::catalogue::{self, image, ADD_U8};
use hexrpc_scenarios::stack::{back_to, launch_add_u8, start};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn a_whole_served_session_draws_no_efault_or_einval_from_the_real_driver() {
    let bench = Bench::for_board(&hexrpc_bsp::BENCH_LINUX);
    catalogue::register(&bench, &ADD_U8);
    bench.register_library(
        "scale",
        LibraryModel::table(vec![TableKernel::new(1, 1, |k| {
            let m = k.scalar_u32(0).unwrap_or(0) as u8;
            let x: Vec<u8> = k.read_all(0).unwrap_or_default().iter().map(|v| v.wrapping_mul(m)).collect();
            let _ = k.write(0, 0, &x);
        })]),
    );
    let start_snapshot = bench.snapshot();
    {
        let rig = start(&bench).expect("a served session on the real driver");
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).expect("fetched through the reverse file service");
        let mut lease = rig.session().alloc(3 * 4096).unwrap();
        lease.fill(0, 3 * 4096, 5).unwrap();
        // Launches at non-zero offsets, across a page boundary.
        for (i, off) in [0usize, 64, 4000].into_iter().enumerate() {
            let (a, b) = (lease.view(off, 256).unwrap(), lease.view(2 * 4096 + off % 2048, 256).unwrap());
            launch_add_u8(&lib, &a, &b, i as u8 + 1, None).unwrap();
            let mut got = [0u8; 256];
            b.read(&mut got).unwrap();
            assert!(got.iter().all(|&x| x == 5 + i as u8 + 1), "offset {off}");
        }
        // A batch of two launches on one lease.
        let table = rig.open_library("scale", image("scale")).unwrap();
        let sigs = [Signature::parse("buf,u32").unwrap()];
        let x = lease.view(100, 16).unwrap();
        let mut batch = Batch::new(&sigs).unwrap();
        batch.push(0, &[BufferRef::of(&x)], &[Scalar::U32(2)]).unwrap();
        batch.push(0, &[BufferRef::of(&x)], &[Scalar::U32(3)]).unwrap();
        assert_eq!(batch.run(&table).map(|r| r.launches), Ok(2));
        // The DSP asks for kernel memory through apps_mem: MMAP (ADD_PAGES) from the listener.
        let (fd, _) = rig.session().listener_fd().expect("the listener's channel");
        let n = b"apps_mem\0";
        let open = ReverseRequest::packed(0, listener::REMOTECTL_OPEN, &[&words(&[n.len() as u32, 16]), n], &[8, 16]);
        let reply = bench.reverse_call(fd, open, Duration::from_secs(2)).expect("apps_mem opened");
        assert_eq!(reply.result, 0);
        let h = u32::from_le_bytes(wire::unpack_reply(&reply.payload, &[8, 16]).unwrap()[0][..4].try_into().unwrap());
        let mut prim = (-1i32).to_le_bytes().to_vec();
        prim.extend_from_slice(&words(&[0, adsprpc::ADSP_MMAP_ADD_PAGES, 0]));
        prim.extend_from_slice(&0u64.to_le_bytes());
        prim.extend_from_slice(&(64i64 << 10).to_le_bytes());
        let map = ReverseRequest::packed(h, Scalars::from_raw(0x0201_0100), &[&prim], &[16]);
        assert_eq!(bench.reverse_call(fd, map, Duration::from_secs(2)).expect("map answered").result, 0);
        // A deadline that fires (the interrupted call), then recovery.
        bench.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
        let (a, b) = (lease.view(64, 64).unwrap(), lease.view(4096 + 64, 64).unwrap());
        let sig = Signature::parse(ADD_U8.signature).unwrap();
        let mut packed =
            PackedLaunch::new(hexrpc_runtime::launch::AbiVersion::V2, &sig, &[BufferRef::of(&a), BufferRef::of(&b)], &[Scalar::U32(1)])
                .unwrap();
        let err = lib.invoke_with_deadline(&mut packed.invoke_args().unwrap(), Duration::from_millis(100)).unwrap_err();
        assert_eq!(err.cause, Cause::Timeout, "{err}");
        rig.session().recover().expect("recovery after the deadline");
        bench.release_hangs();
        launch_add_u8(&lib, &a, &b, 1, None).unwrap();
        // A DSP restart, then recovery.
        bench.restart_dsp();
        assert!(launch_add_u8(&lib, &a, &b, 1, None).is_err());
        rig.session().recover().expect("recovery after the restart");
        launch_add_u8(&lib, &a, &b, 1, None).unwrap();
        drop((table, lib, lease));
        rig.stop().expect("the listener stops");
    }
    assert_eq!(back_to(&bench, &start_snapshot), start_snapshot);
    let errors = bench.linux_errors();
    let mut by_errno: BTreeMap<i32, usize> = BTreeMap::new();
    for (_, e) in &errors {
        *by_errno.entry(e.0).or_insert(0) += 1;
    }
    println!("the real driver's errors over the session, by errno: {by_errno:?}; kept for good: {:?}", bench.kernel_leaks());
    let bad: Vec<_> = errors.iter().filter(|(_, e)| *e == Errno::EFAULT || *e == Errno::EINVAL).collect();
    assert!(bad.is_empty(), "hexrpc sent requests the real driver refused as malformed: {bad:?}");
    assert!(errors.iter().any(|(_, e)| *e == Errno::EINTR), "the deadline's interrupt reached the driver: {errors:?}");
    assert!(errors.iter().any(|(_, e)| *e == Errno::EPIPE), "the restart reached the driver's callers: {errors:?}");
}

/// A DSP shell staged as a process create sends it: the heap, the shell's buffer (mapped and
/// written) and its length.
fn staged_shell(b: &Bench) -> (hexrpc_drivers::OwnedFd, hexrpc_drivers::OwnedFd, hexrpc_drivers::Mapping<Bench>, u32) {
    use hexrpc_drivers::dma_heap::{self, HeapFd};
    use hexrpc_drivers::{Mapping, OpenFlags, Prot, Syscalls};
    let heap = b.open(b.board().ion_path, OpenFlags::READ_WRITE).expect("open the heap");
    let shell = hexrpc_bench::elf::hexagon_elf(hexrpc_bench::DEFAULT_SHELL_LEN);
    let buf = dma_heap::alloc(b, HeapFd::from_raw(heap.raw()), shell.len() as u64).expect("heap alloc");
    let mut map = Mapping::map_shared(b.clone(), buf.raw(), shell.len(), Prot::ReadWrite).expect("mmap");
    map.write_at(0, &shell).unwrap();
    (heap, buf, map, shell.len() as u32)
}

/// A process create still on its way to the DSP when the DSP restarts makes no process on the
/// DSP that comes up. (The bench once made one there, for a file of the old channel whose release
/// can no longer reach the DSP: the identity stayed taken, every later create of the process
/// was refused, and the 60 s soak with 1 ms deadlines leaked a FastRPC file per refusal.)
#[test]
fn a_create_on_its_way_at_a_restart_makes_no_process_on_the_new_dsp() {
    use hexrpc_drivers::upstream::{self, FastrpcFd};
    use hexrpc_drivers::{OpenFlags, Syscalls};

    let b = Bench::for_board(&hexrpc_bsp::BENCH_LINUX);
    let start_snapshot = b.snapshot();
    let (heap, buf, map, shell_len) = staged_shell(&b);
    let node = b.open(b.board().rpc_path, OpenFlags::READ_WRITE).expect("open the FastRPC node");
    let rpc = FastrpcFd::from_raw(node.raw());
    // The create is held 300 ms on its way; the DSP restarts 100 ms into the hold.
    b.inject(FaultTarget::Delivery(DspCallKind::CreateProcess), 1, Fault::Delay(Duration::from_millis(300)));
    let created = std::thread::scope(|s| {
        let create = s.spawn(|| upstream::init_create(&b, rpc, &map, buf.raw(), shell_len, upstream::FASTRPC_MODE_UNSIGNED_MODULE, 0));
        std::thread::sleep(Duration::from_millis(100));
        b.restart_dsp();
        create.join().unwrap()
    });
    assert!(created.is_err(), "the restart cut the create: {created:?}");
    // Past the hold: the message has reached the DSP that came up (or would have).
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(b.dsp_processes().len(), 0, "a process on the new DSP: {:?}", b.dsp_processes());
    map.unmap().unwrap();
    b.close(buf).unwrap();
    b.close(node).unwrap();
    b.close(heap).unwrap();
    assert_eq!(b.settle_except_kernel_leaks(&start_snapshot, Duration::from_secs(5)), start_snapshot);
}

/// A process create sent while a DSP restart is under way makes no process on the DSP that
/// comes up either. The restart moves the bench's DSP epoch and takes the driver's channel away;
/// a create the driver sent between the two was once stamped with the new epoch and ran on the
/// new DSP after the old processes were killed: its file's release could no longer reach the
/// DSP, so the process's identity stayed taken and every create of this process was refused
/// until the next restart (the 60 s Linux soak lost a recovery to it about once in 25 runs).
/// Creates race restarts here (at least 200 restarts and 500 creates); once both stop and every
/// file is closed, no process is left.
#[test]
fn creates_racing_restarts_leave_no_process_behind() {
    use hexrpc_drivers::upstream::{self, FastrpcFd};
    use hexrpc_drivers::{OpenFlags, Syscalls};
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let b = Bench::for_board(&hexrpc_bsp::BENCH_LINUX);
    let start_snapshot = b.snapshot();
    let (heap, buf, map, shell_len) = staged_shell(&b);
    // Every create spends 2 ms on its way to the DSP, so that one sent in a restart reaches the
    // DSP only after the restart is over.
    for _ in 0..100_000 {
        b.inject(FaultTarget::Delivery(DspCallKind::CreateProcess), 1, Fault::Delay(Duration::from_millis(2)));
    }
    let running = AtomicBool::new(true);
    let (sent, created, restarts) = (AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0));
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while running.load(Ordering::Relaxed) {
                    // Between the channel's removal and its new probe the node is gone (ENOENT).
                    let Ok(node) = b.open(b.board().rpc_path, OpenFlags::READ_WRITE) else { continue };
                    let rpc = FastrpcFd::from_raw(node.raw());
                    sent.fetch_add(1, Ordering::Relaxed);
                    if upstream::init_create(&b, rpc, &map, buf.raw(), shell_len, upstream::FASTRPC_MODE_UNSIGNED_MODULE, 0).is_ok() {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    b.close(node).expect("close the FastRPC node");
                }
            });
        }
        // The race runs until it has been run enough (counts, not time: a loaded machine only
        // takes longer); 60 s is a hang bound, about 20 times what it takes here.
        let hang = std::time::Instant::now() + Duration::from_secs(60);
        while (restarts.load(Ordering::Relaxed) < 200 || sent.load(Ordering::Relaxed) < 500 || created.load(Ordering::Relaxed) < 20)
            && std::time::Instant::now() < hang
        {
            std::thread::sleep(Duration::from_millis(8));
            b.restart_dsp();
            restarts.fetch_add(1, Ordering::Relaxed);
        }
        running.store(false, Ordering::Relaxed);
    });
    b.clear_faults();
    let (sent, created, restarts) = (sent.into_inner(), created.into_inner(), restarts.into_inner());
    eprintln!("{restarts} restarts, {sent} creates, {created} processes created");
    // One process per process id at a time: most creates are refused or cut by a restart.
    assert!(
        sent >= 500 && created >= 20 && restarts >= 200,
        "the race did not run within the hang bound: {sent} creates ({created} made a process), {restarts} restarts"
    );
    // Every file is closed: a process still on the DSP was made for a file that is gone.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(b.dsp_processes().len(), 0, "a process nobody can release: {:?}", b.dsp_processes());
    map.unmap().unwrap();
    b.close(buf).unwrap();
    b.close(heap).unwrap();
    assert_eq!(b.settle_except_kernel_leaks(&start_snapshot, Duration::from_secs(5)), start_snapshot);
}
