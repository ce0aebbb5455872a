//! Launches through the whole stack on the bench: HAL session, reverse service, packer, the
//! driver model and the DSP's v1/v2 entry models with their HAP ledger.

use std::time::Duration;

use hexrpc_bench::{elf, Bench, CallKind, DspCallKind, EntryVersion, Fault, FaultTarget, LibraryModel};
use hexrpc_bsp::{Board, DeviceAccess, KernelAbi};
use hexrpc_drivers::Syscalls;
use hexrpc_hal::internal::ListenerPlumbing;
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackError, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

/// A model with `n` buffers and one u32 scalar `k`: fills buffer view `i` with `i + k`.
fn fill_model(version: EntryVersion, n: usize) -> LibraryModel {
    LibraryModel::new(version, n, 1, move |call| {
        let k = call.scalar_u32(0).unwrap_or(0);
        for i in 0..n {
            let len = call.buffer_len(i);
            let _ = call.write(i, 0, &vec![(i as u32 + k) as u8; len]);
        }
        call.set_simulated_time(Duration::from_micros(7));
    })
}

hexrpc_bench::on_both_kernels!(
    v2_launches_with_0_to_15_buffers_at_any_offset_are_correct_and_clean,
    v1_runs_offset_zero_views_and_refuses_others_before_any_ioctl
);

fn serve(bench: &Bench) -> ServedSession<Bench> {
    let access = DeviceAccess::for_bench_board(bench.board()).expect("a bench board");
    ServedSession::start(bench.clone(), &access, FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

fn image(name: &str) -> &'static [u8] {
    Box::leak(elf::library_image(name, 4096).into_boxed_slice())
}

fn v2_launches_with_0_to_15_buffers_at_any_offset_are_correct_and_clean(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start = bench.snapshot();
    {
        let served = serve(&bench);
        for n in 0..=15usize {
            let name = format!("fill{n}");
            bench.register_library(&name, fill_model(EntryVersion::V2, n));
            let lib = served.open_library(&name, image(&name)).unwrap();
            let mut sig: Vec<&str> = vec!["buf"; n];
            sig.push("u32");
            let sig = Signature::parse(&sig.join(",")).unwrap();
            for offset_kind in 0..2 {
                let mut lease = served.session().alloc(64 * 1024).unwrap();
                lease.fill(0, 64 * 1024, 0xEE).unwrap();
                // Views: at offset 0 and page-aligned, or at odd non-zero offsets, of varied lengths.
                let places: Vec<(usize, usize)> =
                    (0..n).map(|i| if offset_kind == 0 { (i * 4096, 100 + i) } else { (i * 4096 + 7 + i * 13, 333 + i * 5) }).collect();
                let views: Vec<_> = places.iter().map(|&(o, l)| lease.view(o, l).unwrap()).collect();
                let bufs: Vec<BufferRef<'_>> = views.iter().map(BufferRef::of).collect();
                let k = 40 + n as u32;
                let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(k)]).unwrap();
                lib.invoke(&mut packed.invoke_args().unwrap()).unwrap();
                assert_eq!(packed.dsp_micros(), 7, "the entry writes the timer");
                for (i, v) in views.iter().enumerate() {
                    let mut got = vec![0u8; v.len()];
                    v.read(&mut got).unwrap();
                    assert!(got.iter().all(|&b| b == (i as u32 + k) as u8), "n={n} view {i} at {}", v.offset());
                    // The bytes around the view are untouched.
                    let mut around = [0u8; 1];
                    if v.offset() > 0 && !places.iter().any(|&(o, l)| o + l == v.offset()) {
                        lease.read_at(v.offset() - 1, &mut around).unwrap();
                        assert_eq!(around[0], 0xEE, "n={n} byte before view {i}");
                    }
                    lease.read_at(v.offset() + v.len(), &mut around).unwrap();
                    assert_eq!(around[0], 0xEE, "n={n} byte after view {i}");
                }
            }
            assert_eq!(bench.ledger_mismatches(), 0, "n={n}: {:?}", bench.ledger());
        }
        served.stop().unwrap();
    }
    assert_eq!(bench.settle(&start, Duration::from_secs(2)), start);
}

fn v1_runs_offset_zero_views_and_refuses_others_before_any_ioctl(board: &'static Board) {
    let bench = Bench::for_board(board);
    let invoke = if board.abi == KernelAbi::Upstream { CallKind::UpInvoke } else { CallKind::RpcInvokeAttrs };
    bench.register_library("fill2v1", fill_model(EntryVersion::V1, 2));
    let served = serve(&bench);
    let lib = served.open_library("fill2v1", image("fill2v1")).unwrap();
    let lease_a = served.session().alloc(8192).unwrap();
    let lease_b = served.session().alloc(8192).unwrap();
    let sig = Signature::parse("buf,buf,u32").unwrap();
    let (a, b) = (lease_a.view(0, 500).unwrap(), lease_b.view(0, 8192).unwrap());
    let mut packed = PackedLaunch::new(AbiVersion::V1, &sig, &[BufferRef::of(&a), BufferRef::of(&b)], &[Scalar::U32(1)]).unwrap();
    lib.invoke(&mut packed.invoke_args().unwrap()).unwrap();
    let mut got = vec![0u8; 500];
    a.read(&mut got).unwrap();
    assert!(got.iter().all(|&x| x == 1));
    assert_eq!(bench.ledger_mismatches(), 0, "v1 is sound at offset 0");

    let before = bench.counts().of(invoke);
    assert!(before >= 1);
    let off = lease_a.view(100, 200).unwrap();
    let refused = PackedLaunch::new(AbiVersion::V1, &sig, &[BufferRef::of(&off), BufferRef::of(&b)], &[Scalar::U32(1)]);
    assert!(matches!(refused, Err(PackError::V1NonZeroOffset { buffer: 0, offset: 100 })), "{refused:?}");
    assert_eq!(bench.counts().of(invoke), before, "refused before any ioctl");
    drop((lease_a, lease_b));
    drop(lib);
    served.stop().unwrap();
}

/// Downstream only: the upstream driver never resumes an interrupted call (it returns `EINTR`;
/// the HAL's deadline test covers that on both kernels).
#[test]
fn an_interrupted_launch_is_resumed_into_its_own_buffers() {
    let bench = Bench::new();
    bench.register_library("fill1", fill_model(EntryVersion::V2, 1));
    let served = serve(&bench);
    let lib = served.open_library("fill1", image("fill1")).unwrap();
    let lease = served.session().alloc(8192).unwrap();
    let view = lease.view(100, 1000).unwrap();
    let sig = Signature::parse("buf,u32").unwrap();
    bench.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Delay(Duration::from_millis(300)));
    let tid = std::sync::atomic::AtomicI32::new(0);
    let micros = std::thread::scope(|s| {
        let interrupter = s.spawn(|| {
            while tid.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            let t = tid.load(std::sync::atomic::Ordering::SeqCst);
            assert!(bench.wait_until_blocked(t, Duration::from_secs(2)));
            for _ in 0..3 {
                bench.interrupt(t).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        tid.store(bench.thread_id(), std::sync::atomic::Ordering::SeqCst);
        let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &[BufferRef::of(&view)], &[Scalar::U32(5)]).unwrap();
        let r = packed.launch(&bench, served.session().listener_fd().unwrap().0, lib.remote_handle().unwrap());
        interrupter.join().unwrap();
        r
    });
    assert_eq!(micros, Ok(7), "the resumed call completes with its own timer");
    let mut got = vec![0u8; 1000];
    view.read(&mut got).unwrap();
    assert!(got.iter().all(|&b| b == 5));
    assert!(bench.counts().interrupts_delivered >= 1, "the call really was interrupted");
    assert_eq!(bench.snapshot().parked, 0);
    drop(lease);
    drop(lib);
    served.stop().unwrap();
}
