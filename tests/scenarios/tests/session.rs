//! The ready session on the bench: libraries, launches at view offsets, recovery after a DSP
//! restart, deadlines, and many threads at once; every test on both bench kernels.

hexrpc_bench::on_both_kernels!(
    launches_at_view_offsets_are_correct_and_the_ledger_is_clean,
    a_library_closes_on_error_and_on_panic,
    concurrent_loads_get_unique_names,
    a_dsp_restart_is_recovered_once_and_launches_are_correct_after,
    a_second_restart_during_recovery_is_reported_and_leaks_nothing,
    a_kernel_that_never_returns_times_out_and_the_session_recovers,
    eight_threads_times_a_thousand_launches_on_one_session
);

use std::time::{Duration, Instant};

use hexrpc_bench::{Bench, DspCallKind, Fault, FaultTarget};
use hexrpc_bsp::Board;
use hexrpc_hal::{Cause, ErrorKind, Stage};
use hexrpc_scenarios::catalogue::{self, image, ADD_U8};
use hexrpc_scenarios::stack::{launch_add_u8, start as start_rig};

fn launches_at_view_offsets_are_correct_and_the_ledger_is_clean(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let mut lease = rig.session().alloc(64 * 1024).unwrap();
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 % 256) as u8).collect();
        for (k, (in_off, out_off, len)) in
            [(0usize, 8192usize, 4096usize), (100, 20_000, 1000), (4097, 40_000, 3), (60_000, 5000, 5536)].into_iter().enumerate()
        {
            lease.write_at(in_off, &data[..len.min(4096)]).unwrap();
            if len > 4096 {
                lease.write_at(in_off + 4096, &data[..len - 4096]).unwrap();
            }
            let input = lease.view(in_off, len).unwrap();
            let output = lease.view(out_off, len).unwrap();
            launch_add_u8(&lib, &input, &output, k as u8 + 1, None).unwrap();
            let mut want = vec![0u8; len];
            input.read(&mut want).unwrap();
            want.iter_mut().for_each(|b| *b = b.wrapping_add(k as u8 + 1));
            let mut got = vec![0u8; len];
            output.read(&mut got).unwrap();
            assert_eq!(got, want, "launch {k}: view at {out_off}+{len}");
        }
        assert_eq!(bench.ledger_mismatches(), 0, "{:?}", bench.ledger());
        let counts = bench.counts();
        assert_eq!(counts.dsp_use_during_cpu_access, 0, "no buffer reached the DSP inside a CPU access");
        if board.allocator == hexrpc_bsp::Allocator::DmaHeap {
            assert!(counts.of(hexrpc_bench::CallKind::DmaBufSync) >= 2 * 6, "CPU accesses are bracketed by syncs");
        }
        assert_eq!(bench.snapshot().loaded_libraries, 1, "opened once, invoked many times");
        drop(lib);
        assert_eq!(bench.snapshot().loaded_libraries, 0);
        drop(lease);
        rig.stop().expect("listener stops");
    }
    assert_eq!(hexrpc_scenarios::stack::back_to(&bench, &start), start);
}

fn a_library_closes_on_error_and_on_panic(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let rig = start_rig(&bench).unwrap();
    let lease = rig.session().alloc(8192).unwrap();
    {
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        bench.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Returned(hexrpc_drivers::aee::AEE_EBADPARM));
        let (a, b) = (lease.view(0, 100).unwrap(), lease.view(4096, 100).unwrap());
        let err = launch_add_u8(&lib, &a, &b, 1, None).unwrap_err();
        assert_eq!((err.stage, err.cause), (Stage::Invoke, Cause::Dsp(hexrpc_drivers::aee::AEE_EBADPARM)));
        assert_eq!(err.kind(), ErrorKind::Remote);
        assert!(rig.session().is_healthy(), "a DSP error is not a restart");
    }
    assert_eq!(bench.snapshot().loaded_libraries, 0, "closed after the failed invoke");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        assert_eq!(bench.snapshot().loaded_libraries, 1);
        panic!("a service bug while the library is open");
    }));
    assert!(r.is_err());
    assert_eq!(bench.snapshot().loaded_libraries, 0, "closed during unwinding");
    assert_eq!(rig.service().image_count(), 0, "images withdrawn");
    // Bad names and a DSP that refuses the image.
    assert_eq!(rig.open_library("../x", image(ADD_U8.name)).unwrap_err().hal().map(|e| e.cause), Some(Cause::Invalid));
    let err = rig.open_library("nomodel", image("nomodel")).unwrap_err().hal().expect("a HAL error");
    assert_eq!(err.stage, Stage::LibraryOpen);
    assert!(matches!(err.cause, Cause::Refused(r) if r.reason().contains("no model registered")), "{err}");
    assert_eq!(rig.service().image_count(), 0);
    drop(lease);
    rig.stop().expect("listener stops");
}

fn concurrent_loads_get_unique_names(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let rig = start_rig(&bench).unwrap();
    let libs: Vec<_> = (0..4).map(|_| rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap()).collect();
    let handles: std::collections::HashSet<_> = libs.iter().map(|l| l.remote_handle().unwrap()).collect();
    assert_eq!(handles.len(), 4);
    assert_eq!(rig.service().image_count(), 4, "one image per library, under its own name");
    drop(libs);
    assert_eq!(rig.service().image_count(), 0);
    rig.stop().expect("listener stops");
}

fn a_dsp_restart_is_recovered_once_and_launches_are_correct_after(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let mut lease = rig.session().alloc(16 * 1024).unwrap();
        lease.write_at(100, &[7u8; 500]).unwrap();
        let (a, b) = (lease.view(100, 500).unwrap(), lease.view(9000, 500).unwrap());
        for _ in 0..5 {
            launch_add_u8(&lib, &a, &b, 1, None).unwrap();
        }
        let before = lib.remote_handle();
        bench.restart_dsp();
        let err = launch_add_u8(&lib, &a, &b, 1, None).unwrap_err();
        // The call sees the restart itself, or the listener saw it first and reported it.
        assert!(matches!(err.cause, Cause::DspRestart | Cause::NeedsRecovery), "{err}");
        assert_eq!(err.kind(), ErrorKind::Recoverable);
        assert_eq!(launch_add_u8(&lib, &a, &b, 1, None).unwrap_err().cause, Cause::NeedsRecovery);
        rig.session().recover().expect("recovery");
        assert!(rig.session().is_healthy());
        assert!(lib.remote_handle().is_some() && bench.snapshot().loaded_libraries == 1, "library re-opened ({before:?})");
        for add in 0..5u8 {
            launch_add_u8(&lib, &a, &b, add, None).unwrap();
            let mut got = [0u8; 500];
            b.read(&mut got).unwrap();
            assert!(got.iter().all(|&x| x == 7u8.wrapping_add(add)));
        }
        assert_eq!(bench.snapshot().dsp_processes, 1);
        drop(lib);
        drop(lease);
        rig.stop().expect("listener stops");
    }
    assert_eq!(hexrpc_scenarios::stack::back_to(&bench, &start), start);
}

fn a_second_restart_during_recovery_is_reported_and_leaks_nothing(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let lease = rig.session().alloc(8192).unwrap();
        let (a, b) = (lease.view(0, 10).unwrap(), lease.view(4096, 10).unwrap());
        bench.restart_dsp();
        assert_eq!(launch_add_u8(&lib, &a, &b, 1, None).unwrap_err().kind(), ErrorKind::Recoverable);
        // The DSP stays down for longer than the recovery budget: every attempt fails.
        bench.set_dsp_available(false);
        let t0 = Instant::now();
        let err = rig.session().recover().unwrap_err();
        let policy = bench.board().recovery;
        assert!(t0.elapsed() < Duration::from_millis(u64::from(policy.budget_ms) + 500), "bounded: {:?}", t0.elapsed());
        assert_eq!(err.stage, Stage::Recover);
        assert_eq!(err.cause, Cause::Os(hexrpc_scenarios::stack::dsp_down_errno(board)), "{err}");
        assert_eq!(rig.session().recover().unwrap_err(), err, "a further recover() fails too while the DSP is down, with the reason kept");
        assert_eq!(rig.session().health(), hexrpc_hal::Health::Failed(err));
        assert_eq!(launch_add_u8(&lib, &a, &b, 1, None).unwrap_err().cause, Cause::Failed);
        bench.set_dsp_available(true);
        drop(lib);
        drop(lease);
        rig.stop().expect("listener stops");
    }
    assert_eq!(hexrpc_scenarios::stack::back_to(&bench, &start), start);
}

fn a_kernel_that_never_returns_times_out_and_the_session_recovers(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let mut lease = rig.session().alloc(8192).unwrap();
        lease.write_at(0, &[1u8; 64]).unwrap();
        let (a, b) = (lease.view(0, 64).unwrap(), lease.view(4096, 64).unwrap());
        bench.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
        let sig = hexrpc_runtime::launch::Signature::parse("buf,buf,u32").unwrap();
        let bufs = [hexrpc_runtime::launch::BufferRef::of(&a), hexrpc_runtime::launch::BufferRef::of(&b)];
        let mut packed = hexrpc_runtime::launch::PackedLaunch::new(
            hexrpc_runtime::launch::AbiVersion::V2,
            &sig,
            &bufs,
            &[hexrpc_runtime::launch::Scalar::U32(1)],
        )
        .unwrap();
        let deadline = Duration::from_millis(200);
        let t0 = Instant::now();
        let err = lib.invoke_with_deadline(&mut packed.invoke_args().unwrap(), deadline).unwrap_err();
        let took = t0.elapsed();
        assert_eq!(err.cause, Cause::Timeout, "{err}");
        // The hung call never ends by itself: ending at all, soon after the deadline, is the
        // watchdog's doing (the slack is for a loaded machine; this is not a speed target).
        assert!(took < deadline + Duration::from_secs(1), "ended {took:?} after start (deadline {deadline:?})");
        assert!(took >= deadline);
        assert_eq!(bench.snapshot().parked, 1, "the driver parked the interrupted call");
        assert!(!rig.session().is_healthy());
        rig.session().recover().expect("recovery frees the parked call by closing the channel");
        // Linux 6.1.192 never frees it: the parked context holds its file's user for good.
        assert_eq!(bench.snapshot().parked, bench.kernel_leaks().contexts);
        bench.release_hangs();
        launch_add_u8(&lib, &a, &b, 2, None).unwrap();
        let mut got = [0u8; 64];
        b.read(&mut got).unwrap();
        assert_eq!(got, [3u8; 64]);
        // A deadline that is not reached changes nothing.
        let mut packed = hexrpc_runtime::launch::PackedLaunch::new(
            hexrpc_runtime::launch::AbiVersion::V2,
            &sig,
            &[hexrpc_runtime::launch::BufferRef::of(&a), hexrpc_runtime::launch::BufferRef::of(&b)],
            &[hexrpc_runtime::launch::Scalar::U32(5)],
        )
        .unwrap();
        lib.invoke_with_deadline(&mut packed.invoke_args().unwrap(), Duration::from_secs(5)).unwrap();
        assert!(rig.session().is_healthy());
        drop(lib);
        drop(lease);
        rig.stop().expect("listener stops");
    }
    assert_eq!(hexrpc_scenarios::stack::back_to(&bench, &start), start);
}

fn eight_threads_times_a_thousand_launches_on_one_session(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    let launches = 1000;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let errors = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..8u32 {
                let (session, lib, errors) = (rig.session(), &lib, &errors);
                s.spawn(move || {
                    let mut lease = session.alloc(16 * 1024).unwrap();
                    let in_off = 64 + t as usize * 8;
                    let out_off = 8192 + 3 + t as usize;
                    let len = 1000 + t as usize;
                    let data: Vec<u8> = (0..len).map(|i| (i as u32 * 31 + t) as u8).collect();
                    lease.write_at(in_off, &data).unwrap();
                    let input = lease.view(in_off, len).unwrap();
                    let output = lease.view(out_off, len).unwrap();
                    let mut got = vec![0u8; len];
                    for i in 0..launches {
                        let add = (i % 251) as u8;
                        launch_add_u8(lib, &input, &output, add, None).unwrap();
                        output.read(&mut got).unwrap();
                        if got.iter().zip(&data).any(|(g, d)| *g != d.wrapping_add(add)) {
                            errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(errors.into_inner(), 0, "every output correct");
        assert_eq!(bench.ledger_mismatches(), 0);
        assert!(bench.counts().of(hexrpc_scenarios::stack::invoke_kind(board)) >= 8 * launches as u64);
        drop(lib);
        rig.stop().expect("listener stops");
    }
    assert_eq!(hexrpc_scenarios::stack::back_to(&bench, &start), start);
}
