//! Batches through the whole stack on the bench: HAL session, reverse service, the runtime's
//! `Batch`, the driver model and the DSP's batch entry model with its HAP ledger. One ioctl per
//! batch, one `HAP_mmap` per distinct lease per call, every refusal before any ioctl or (on the
//! DSP side) before any map, a failing kernel reported with its record, recovery after a DSP
//! restart in the middle of a batch.

use std::time::Duration;

use hexrpc_bench::{elf, Bench, CallKind, LedgerEvent, LibraryModel, TableKernel};
use hexrpc_bsp::Board;
use hexrpc_bsp::DeviceAccess;
use hexrpc_drivers::aee;
use hexrpc_hal::{BufferView, Call, Cause};
use hexrpc_runtime::launch::{
    Batch, BatchFailure, BatchRefusal, BatchRun, BufferRef, PackError, Scalar, Signature, BATCH, MAX_ARGS, MAX_BATCH_KERNELS,
    MAX_BATCH_LAUNCHES, MAX_BATCH_LEASES, MAX_BATCH_RECORD_BYTES,
};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::{Error, ServedSession};

hexrpc_bench::on_both_kernels!(
    batches_of_1_to_the_capacity_over_shared_leases_cross_once_and_map_each_lease_once,
    a_batch_is_built_once_and_run_many_times_with_updated_scalars,
    a_batch_that_does_not_fit_is_refused_before_any_ioctl,
    a_hostile_record_is_refused_on_the_dsp_before_anything_is_mapped,
    a_batch_one_past_a_capacity_is_refused_on_the_dsp_and_one_at_it_runs,
    a_failing_kernel_stops_the_batch_and_every_mapping_is_released,
    a_dsp_restart_in_the_middle_of_a_batch_is_recovered,
    a_batch_past_its_deadline_is_abandoned_and_the_session_recovers,
    a_zero_deadline_is_refused_alike_by_a_launch_and_a_batch_before_any_ioctl
);

/// What a launch is counted as on `board`'s driver.
fn invoke_kind(board: &Board) -> CallKind {
    match board.abi {
        hexrpc_bsp::KernelAbi::DownstreamMsm => CallKind::RpcInvokeAttrs,
        hexrpc_bsp::KernelAbi::Upstream => CallKind::UpInvoke,
    }
}

fn serve(bench: &Bench) -> ServedSession<Bench> {
    let access = DeviceAccess::for_bench_board(bench.board()).expect("a bench board");
    ServedSession::start(bench.clone(), &access, FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

fn image(name: &str) -> &'static [u8] {
    Box::leak(elf::library_image(name, 4096).into_boxed_slice())
}

/// 14 buffers and 10 scalars: a 256-byte record, so MAX_BATCH_LAUNCHES of them are exactly
/// MAX_BATCH_RECORD_BYTES (asserted where it is used).
const WIDE: &str = "buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,u32,u32,u32,u32,u32,u32,u32,u32,u32,u32";
/// WIDE with one scalar more: a 264-byte record.
const WIDER: &str = "buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,u32,u32,u32,u32,u32,u32,u32,u32,u32,u32,u32";

/// The kernel table: 0 `add` (out[i] = a[i] + b[i] + c), 1 `scale` (x[i] *= m), 2 `check`
/// (returns its code), 3 `boom` (the DSP restarts while it runs), 4 `touch` (the u16 at x[0]
/// += 1),
/// 5 `wide` and 6 `wider` (do nothing; their records are 256 and 264 bytes).
fn signatures() -> Vec<Signature> {
    ["buf,buf,buf,u32", "buf,u32", "buf,i32", "buf", "buf", WIDE, WIDER].iter().map(|s| Signature::parse(s).unwrap()).collect()
}

fn table() -> LibraryModel {
    LibraryModel::table(vec![
        TableKernel::new(3, 1, |k| {
            let c = k.scalar_u32(0).unwrap_or(0) as u8;
            let (a, b) = (k.read_all(0).unwrap_or_default(), k.read_all(1).unwrap_or_default());
            let out: Vec<u8> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y).wrapping_add(c)).collect();
            let _ = k.write(2, 0, &out);
            k.set_simulated_time(Duration::from_micros(5));
        }),
        TableKernel::new(1, 1, |k| {
            let m = k.scalar_u32(0).unwrap_or(0) as u8;
            let x: Vec<u8> = k.read_all(0).unwrap_or_default().iter().map(|v| v.wrapping_mul(m)).collect();
            let _ = k.write(0, 0, &x);
            k.set_simulated_time(Duration::from_micros(3));
        }),
        TableKernel::new(1, 1, |k| {
            let code = k.scalar_u32(0).unwrap_or(0) as i32;
            let _ = k.write(0, 0, &[0x5A]);
            k.fail(code);
        }),
        TableKernel::new(1, 0, |k| k.restart_dsp()),
        TableKernel::new(1, 0, |k| {
            let x = k.read_all(0).unwrap_or_default();
            let n = u16::from_le_bytes([x.first().copied().unwrap_or(0), x.get(1).copied().unwrap_or(0)]);
            let _ = k.write(0, 0, &n.wrapping_add(1).to_le_bytes());
        }),
        TableKernel::new(14, 10, |_| {}),
        TableKernel::new(14, 11, |_| {}),
    ])
}

fn read(v: &BufferView<'_>) -> Vec<u8> {
    let mut b = vec![0u8; v.len()];
    v.read(&mut b).unwrap();
    b
}

fn maps_unmaps(bench: &Bench) -> (usize, usize, usize) {
    let ev: Vec<LedgerEvent> = bench.ledger().into_iter().map(|e| e.event).collect();
    let maps = ev.iter().filter(|e| matches!(e, LedgerEvent::Map { .. })).count();
    let unmaps = ev.iter().filter(|e| matches!(e, LedgerEvent::Unmap { matched: true, .. })).count();
    let kernels = ev.iter().filter(|e| matches!(e, LedgerEvent::BatchKernel { .. })).count();
    (maps, unmaps, kernels)
}

/// Batch sizes run by the sweep: every size up to 17, tinygrad's graph sizes (32, 64, 128 and
/// the capacity, 256) with their neighbours, and the capacity itself.
fn sweep() -> Vec<usize> {
    let mut ks: Vec<usize> = (1..=17).collect();
    for g in [32, 64, 128] {
        ks.extend([g - 1, g, g + 1]);
    }
    ks.extend([MAX_BATCH_LAUNCHES - 1, MAX_BATCH_LAUNCHES]);
    ks.retain(|&k| k <= MAX_BATCH_LAUNCHES);
    ks.dedup();
    ks
}

fn batches_of_1_to_the_capacity_over_shared_leases_cross_once_and_map_each_lease_once(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start = bench.snapshot();
    {
        bench.register_library("table", table());
        let served = serve(&bench);
        let lib = served.open_library("table", image("table")).unwrap();
        let sigs = signatures();
        // Two leases, every view at a non-zero offset; both leases shared by many launches.
        let size = 512 * (MAX_BATCH_LAUNCHES + 2);
        let mut weights = served.session().alloc(size).unwrap();
        let mut acts = served.session().alloc(size).unwrap();
        weights.fill(0, size, 3).unwrap();
        for k in sweep() {
            acts.fill(0, size, 1).unwrap();
            // Launch r: add(w[r], a[r], a[r + 1], r) then, every third, scale(a[r + 1], 2).
            let w: Vec<BufferView<'_>> = (0..k).map(|r| weights.view(64 + 512 * r, 256).unwrap()).collect();
            let a: Vec<BufferView<'_>> = (0..=k).map(|r| acts.view(32 + 512 * r, 256).unwrap()).collect();
            let mut batch = Batch::new(&sigs).unwrap();
            let mut want = vec![1u8; k + 1];
            for r in 0..k {
                if r % 3 == 2 {
                    batch.push(1, &[BufferRef::of(&a[r])], &[Scalar::U32(2)]).unwrap();
                    want[r] = want[r].wrapping_mul(2);
                    continue;
                }
                batch.push(0, &[BufferRef::of(&w[r]), BufferRef::of(&a[r]), BufferRef::of(&a[r + 1])], &[Scalar::U32(r as u32)]).unwrap();
                want[r + 1] = 3u8.wrapping_add(want[r]).wrapping_add(r as u8);
            }
            assert_eq!(batch.lease_count(), 2);
            bench.clear_ledger();
            let invokes = bench.counts().of(invoke_kind(board));
            let calls: u64 = bench.counts().calls.values().sum();
            let run = batch.run(&lib).unwrap();
            assert_eq!(run.launches, k);
            assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 1, "one crossing for {k} launches");
            assert_eq!(bench.counts().calls.values().sum::<u64>() - calls, 1, "nothing else crossed");
            assert_eq!(maps_unmaps(&bench), (2, 2, k), "one map and one unmap per lease per call");
            assert_eq!(bench.ledger_mismatches(), 0, "{:?}", bench.ledger());
            for (r, view) in a.iter().enumerate() {
                assert!(read(view).iter().all(|&b| b == want[r]), "k={k} view {r}: {:?} != {}", &read(view)[..4], want[r]);
            }
        }
        drop(lib);
        drop(weights);
        drop(acts);
        served.stop().unwrap();
    }
    assert_eq!(bench.settle(&start, Duration::from_secs(2)), start);
}

fn a_batch_is_built_once_and_run_many_times_with_updated_scalars(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    let served = serve(&bench);
    let lib = served.open_library("table", image("table")).unwrap();
    let sigs = signatures();
    let mut lease = served.session().alloc(8192).unwrap();
    lease.fill(0, 8192, 1).unwrap();
    let x = lease.view(100, 50).unwrap();
    let mut batch = Batch::new(&sigs).unwrap();
    let r0 = batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(1)]).unwrap();
    let r1 = batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(1)]).unwrap();
    let invokes = bench.counts().of(invoke_kind(board));
    let mut want = 1u8;
    for m in 1..=20u32 {
        batch.set_scalar(r0, 0, Scalar::U32(m)).unwrap();
        batch.set_scalar(r1, 0, Scalar::U32(m + 1)).unwrap();
        assert_eq!(batch.run(&lib), Ok(BatchRun { launches: 2, dsp_micros: 6 }));
        want = want.wrapping_mul(m as u8).wrapping_mul(m as u8 + 1);
        assert!(read(&x).iter().all(|&b| b == want), "m={m}");
    }
    assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 20);
    assert_eq!(
        batch.set_scalar(r0, 0, Scalar::I32(1)).unwrap_err(),
        Error::Batch(BatchRefusal::Launch {
            record: 0,
            error: PackError::ScalarType {
                index: 0,
                expected: hexrpc_runtime::launch::ScalarType::U32,
                got: hexrpc_runtime::launch::ScalarType::I32
            }
        })
    );
    drop(lib);
    drop(lease);
    served.stop().unwrap();
}

fn a_batch_that_does_not_fit_is_refused_before_any_ioctl(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    let served = serve(&bench);
    let lib = served.open_library("table", image("table")).unwrap();
    let sigs = signatures();
    let leases: Vec<_> = (0..=MAX_BATCH_LEASES).map(|_| served.session().alloc(4096).unwrap()).collect();
    let views: Vec<BufferView<'_>> = leases.iter().map(|l| l.view(8, 8).unwrap()).collect();
    let calls: u64 = bench.counts().calls.values().sum();
    let mut batch = Batch::new(&sigs).unwrap();
    for v in &views[..MAX_BATCH_LEASES] {
        batch.push(1, &[BufferRef::of(v)], &[Scalar::U32(1)]).unwrap();
    }
    assert_eq!(
        batch.push(1, &[BufferRef::of(&views[MAX_BATCH_LEASES])], &[Scalar::U32(1)]),
        Err(Error::Batch(BatchRefusal::TooManyLeases { capacity: MAX_BATCH_LEASES }))
    );
    for _ in MAX_BATCH_LEASES..MAX_BATCH_LAUNCHES {
        batch.push(1, &[BufferRef::of(&views[0])], &[Scalar::U32(1)]).unwrap();
    }
    assert_eq!(
        batch.push(1, &[BufferRef::of(&views[0])], &[Scalar::U32(1)]),
        Err(Error::Batch(BatchRefusal::TooManyLaunches { capacity: MAX_BATCH_LAUNCHES }))
    );
    // A record past the record bytes: WIDER records (264 bytes) until the next one would not fit.
    let wider = BATCH.record_len(14, 11);
    let fit = MAX_BATCH_RECORD_BYTES / wider;
    assert!(fit < MAX_BATCH_LAUNCHES, "the record bytes bind first");
    let v14: Vec<BufferRef<'_>> = (0..14).map(|i| BufferRef::of(&views[i])).collect();
    let sc11 = [Scalar::U32(0); 11];
    let mut bytes = Batch::new(&sigs).unwrap();
    for _ in 0..fit {
        bytes.push(6, &v14, &sc11).unwrap();
    }
    assert_eq!(
        bytes.push(6, &v14, &sc11),
        Err(Error::Batch(BatchRefusal::RecordBytes { needed: (fit + 1) * wider, capacity: MAX_BATCH_RECORD_BYTES }))
    );
    let mut empty = Batch::new(&sigs).unwrap();
    assert_eq!(empty.run(&lib), Err(Error::Batch(BatchRefusal::Empty)));
    assert_eq!(bench.counts().calls.values().sum::<u64>(), calls, "no system call for any refusal");
    // The full batches themselves run.
    assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(MAX_BATCH_LAUNCHES));
    assert_eq!(maps_unmaps(&bench), (MAX_BATCH_LEASES, MAX_BATCH_LEASES, MAX_BATCH_LAUNCHES));
    bench.clear_ledger();
    assert_eq!(bytes.run(&lib).map(|r| r.launches), Ok(fit));
    assert_eq!(maps_unmaps(&bench), (14, 14, fit));
    drop(lib);
    drop(views);
    drop(leases);
    served.stop().unwrap();
}

fn a_hostile_record_is_refused_on_the_dsp_before_anything_is_mapped(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    let served = serve(&bench);
    let lib = served.open_library("table", image("table")).unwrap();
    let sigs = signatures();
    let lease = served.session().alloc(8192).unwrap();
    let (a, b, c) = (lease.view(0, 64).unwrap(), lease.view(64, 64).unwrap(), lease.view(4096, 64).unwrap());
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(1, &[BufferRef::of(&a)], &[Scalar::U32(2)]).unwrap();
    batch.push(0, &[BufferRef::of(&a), BufferRef::of(&b), BufferRef::of(&c)], &[Scalar::U32(1)]).unwrap();
    let good = batch.pra0().to_vec();
    let lease_table = batch.pra1().to_vec();
    let second = 16 + BATCH.record_len(1, 1);
    let put = |v: &mut Vec<u8>, at: usize, x: u32| v[at..at + 4].copy_from_slice(&x.to_le_bytes());
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    for (what, at, x) in [
        ("kernel index", second, 9),
        ("lease index", second + BATCH.view_at(2) + BATCH.view_lease_at, 1),
        ("offset past lease", second + BATCH.view_at(2) + BATCH.view_offset_at, 8190),
        ("length past lease", second + BATCH.view_at(1) + BATCH.view_len_at, 8192),
        ("record count", BATCH.count_at, 3),
        ("record bytes", BATCH.bytes_at, 7),
    ] {
        let mut v = good.clone();
        put(&mut v, at, x);
        cases.push((what, v));
    }
    for (what, pra0) in cases {
        bench.clear_ledger();
        let mut status = [0u8; 24];
        let mut args = Call::<'_, MAX_ARGS>::new(BATCH.method).unwrap();
        args.input(&pra0).unwrap().input(&lease_table).unwrap().output(&mut status).unwrap();
        args.out_handle_sized(lease.fd(), BATCH.handle_attr, lease.len() as u64).unwrap();
        let err = lib.invoke(&mut args).unwrap_err();
        assert_eq!(err.cause, Cause::Dsp(aee::AEE_EBADPARM), "{what}");
        let ev: Vec<LedgerEvent> = bench.ledger().into_iter().map(|e| e.event).collect();
        assert_eq!(ev, vec![LedgerEvent::Refused { code: aee::AEE_EBADPARM }], "{what}: nothing mapped, nothing ran");
    }
    // The unaltered batch runs.
    assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(2));
    drop(lib);
    drop(lease);
    served.stop().unwrap();
}

/// Sends `pra0` / `pra1` as a batch with one out-handle per lease in `leases` and returns the
/// call's result and the ledger it left.
fn invoke_raw(
    bench: &Bench,
    lib: &hexrpc_hal::Library<'_, Bench>,
    pra0: &[u8],
    pra1: &[u8],
    leases: &[&hexrpc_hal::Lease<'_, Bench>],
) -> (Result<(), Cause>, Vec<LedgerEvent>) {
    bench.clear_ledger();
    let mut status = [0u8; 24];
    let mut args = Call::<'_, MAX_ARGS>::new(BATCH.method).unwrap();
    args.input(pra0).unwrap().input(pra1).unwrap().output(&mut status).unwrap();
    for l in leases {
        args.out_handle_sized(l.fd(), BATCH.handle_attr, l.len() as u64).unwrap();
    }
    let r = lib.invoke(&mut args).map(|_| ()).map_err(|e| e.cause);
    (r, bench.ledger().into_iter().map(|e| e.event).collect())
}

/// The DSP's own checks of the capacities, each probed at its edge with a batch that is valid
/// in every other respect: MAX_BATCH_LAUNCHES records (or MAX_BATCH_RECORD_BYTES bytes of
/// them) run, one record (or 8 bytes) more is refused before anything is mapped. The packer
/// cannot build the batches past the edge, so they are the packer's batches with one record
/// added or widened.
fn a_batch_one_past_a_capacity_is_refused_on_the_dsp_and_one_at_it_runs(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    let served = serve(&bench);
    let lib = served.open_library("table", image("table")).unwrap();
    let sigs = signatures();
    assert!(sigs.len() <= MAX_BATCH_KERNELS);
    let mut lease = served.session().alloc(8192).unwrap();
    lease.fill(0, 8192, 0).unwrap();
    let x = lease.view(40, 8).unwrap();
    let put = |v: &mut Vec<u8>, at: usize, n: u32| v[at..at + 4].copy_from_slice(&n.to_le_bytes());
    let refused = (Err(Cause::Dsp(aee::AEE_EBADPARM)), vec![LedgerEvent::Refused { code: aee::AEE_EBADPARM }]);

    // Records: MAX_BATCH_LAUNCHES `touch` records run; the same with one more record is refused.
    let mut full = Batch::new(&sigs).unwrap();
    for _ in 0..MAX_BATCH_LAUNCHES {
        full.push(4, &[BufferRef::of(&x)], &[]).unwrap();
    }
    let (pra0, pra1) = (full.pra0().to_vec(), full.pra1().to_vec());
    let (ok, ev) = invoke_raw(&bench, &lib, &pra0, &pra1, &[&lease]);
    assert_eq!(ok, Ok(()));
    assert_eq!(ev.iter().filter(|e| matches!(e, LedgerEvent::BatchKernel { .. })).count(), MAX_BATCH_LAUNCHES);
    assert_eq!(u16::from_le_bytes([read(&x)[0], read(&x)[1]]), MAX_BATCH_LAUNCHES as u16, "every record ran once");
    let one = BATCH.record_len(1, 0);
    let mut more = pra0.clone();
    more.extend_from_slice(&pra0[pra0.len() - one..]);
    put(&mut more, BATCH.count_at, MAX_BATCH_LAUNCHES as u32 + 1);
    put(&mut more, BATCH.bytes_at, ((MAX_BATCH_LAUNCHES + 1) * one) as u32);
    assert_eq!(invoke_raw(&bench, &lib, &more, &pra1, &[&lease]), refused, "K = MAX_BATCH_LAUNCHES + 1");

    // Record bytes: MAX_BATCH_LAUNCHES `wide` records fill them exactly and run; with the last
    // one a `wider` record (8 bytes more, K unchanged) they are refused.
    let wide = BATCH.record_len(14, 10);
    assert_eq!(MAX_BATCH_LAUNCHES * wide, MAX_BATCH_RECORD_BYTES, "WIDE is sized for the capacity");
    let v14: Vec<BufferView<'_>> = (0..14).map(|i| lease.view(64 * i, 64).unwrap()).collect();
    let r14: Vec<BufferRef<'_>> = v14.iter().map(BufferRef::of).collect();
    let mut full = Batch::new(&sigs).unwrap();
    for _ in 0..MAX_BATCH_LAUNCHES {
        full.push(5, &r14, &[Scalar::U32(1); 10]).unwrap();
    }
    assert_eq!(full.record_bytes(), MAX_BATCH_RECORD_BYTES);
    let (pra0, pra1) = (full.pra0().to_vec(), full.pra1().to_vec());
    let (ok, ev) = invoke_raw(&bench, &lib, &pra0, &pra1, &[&lease]);
    assert_eq!(ok, Ok(()));
    assert_eq!(ev.iter().filter(|e| matches!(e, LedgerEvent::BatchKernel { .. })).count(), MAX_BATCH_LAUNCHES);
    let mut last = Batch::new(&sigs).unwrap();
    last.push(6, &r14, &[Scalar::U32(1); 11]).unwrap();
    let mut over = pra0[..pra0.len() - wide].to_vec();
    over.extend_from_slice(&last.pra0()[BATCH.header_len..]);
    put(&mut over, BATCH.bytes_at, (MAX_BATCH_RECORD_BYTES + 8) as u32);
    assert_eq!(over.len(), BATCH.header_len + MAX_BATCH_RECORD_BYTES + 8);
    assert_eq!(invoke_raw(&bench, &lib, &over, &pra1, &[&lease]), refused, "R = MAX_BATCH_RECORD_BYTES + 8");
    drop(v14);
    drop(lib);
    drop(lease);
    served.stop().unwrap();
}

fn a_failing_kernel_stops_the_batch_and_every_mapping_is_released(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start = bench.snapshot();
    {
        bench.register_library("table", table());
        let served = serve(&bench);
        let lib = served.open_library("table", image("table")).unwrap();
        let sigs = signatures();
        let mut l1 = served.session().alloc(8192).unwrap();
        let mut l2 = served.session().alloc(8192).unwrap();
        l1.fill(0, 8192, 1).unwrap();
        l2.fill(0, 8192, 1).unwrap();
        let (x, y, z) = (l1.view(16, 8).unwrap(), l2.view(32, 8).unwrap(), l2.view(4000, 8).unwrap());
        let mut batch = Batch::new(&sigs).unwrap();
        batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(3)]).unwrap();
        batch.push(2, &[BufferRef::of(&y)], &[Scalar::I32(0)]).unwrap();
        let failing = batch.push(2, &[BufferRef::of(&z)], &[Scalar::I32(-9)]).unwrap();
        batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(5)]).unwrap();
        assert_eq!(batch.run(&lib), Err(Error::BatchRun(BatchFailure::KernelFailed { record: failing, kernel: 2, code: -9, done: 2 })));
        assert_eq!(read(&x), vec![3; 8], "record 0 ran, record 3 did not");
        assert_eq!(read(&z)[0], 0x5A, "the failing record ran");
        assert_eq!(maps_unmaps(&bench), (2, 2, 3), "every lease unmapped; the record after the failure did not run");
        assert_eq!(bench.ledger_mismatches(), 0);
        // The session is fine: the same batch runs again once the kernel succeeds.
        batch.set_scalar(failing, 0, Scalar::I32(0)).unwrap();
        assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(4));
        assert_eq!(read(&x), vec![45; 8]);
        // A library without batch support: the status comes back without HRXB.
        bench.register_library("single", LibraryModel::new(hexrpc_bench::EntryVersion::V2, 1, 1, |_| {}));
        let single = served.open_library("single", image("single")).unwrap();
        assert_eq!(batch.run(&single), Err(Error::BatchRun(BatchFailure::NotRun)));
        drop(single);
        drop(lib);
        drop(l1);
        drop(l2);
        served.stop().unwrap();
    }
    assert_eq!(bench.settle(&start, Duration::from_secs(2)), start);
}

fn a_dsp_restart_in_the_middle_of_a_batch_is_recovered(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start = bench.snapshot();
    {
        bench.register_library("table", table());
        let served = serve(&bench);
        let lib = served.open_library("table", image("table")).unwrap();
        let sigs = signatures();
        let mut lease = served.session().alloc(8192).unwrap();
        lease.fill(0, 8192, 1).unwrap();
        let x = lease.view(8, 8).unwrap();
        let mut boom = Batch::new(&sigs).unwrap();
        boom.push(1, &[BufferRef::of(&x)], &[Scalar::U32(2)]).unwrap();
        boom.push(3, &[BufferRef::of(&x)], &[]).unwrap();
        boom.push(1, &[BufferRef::of(&x)], &[Scalar::U32(7)]).unwrap();
        let err = boom.run(&lib).unwrap_err();
        assert!(matches!(err, Error::Hal(e) if e.cause == Cause::DspRestart), "{err:?}");
        assert_eq!(read(&x), vec![2; 8], "the records before the restart ran, the one after did not");
        assert!(!served.session().is_healthy());
        served.session().recover().unwrap();
        // The leases and the library survive on the host side; a batch runs on the new process.
        let mut batch = Batch::new(&sigs).unwrap();
        batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(3)]).unwrap();
        batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(5)]).unwrap();
        assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(2));
        assert_eq!(read(&x), vec![30; 8]);
        assert_eq!(bench.ledger_mismatches(), 0);
        drop(lib);
        drop(lease);
        served.stop().unwrap();
    }
    // (Linux's own driver keeps the file that had a call in flight at the restart for good:
    // Bench::kernel_leaks; nothing on the models.)
    assert_eq!(bench.settle_except_kernel_leaks(&start, Duration::from_secs(2)), start);
}

fn a_batch_past_its_deadline_is_abandoned_and_the_session_recovers(board: &'static Board) {
    use hexrpc_bench::{DspCallKind, Fault, FaultTarget};
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    let served = serve(&bench);
    let lib = served.open_library("table", image("table")).unwrap();
    let sigs = signatures();
    let mut lease = served.session().alloc(8192).unwrap();
    lease.fill(0, 8192, 1).unwrap();
    let x = lease.view(8, 8).unwrap();
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(2)]).unwrap();
    batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(3)]).unwrap();
    bench.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
    let t0 = std::time::Instant::now();
    let err = batch.run_with_deadline(&lib, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, Error::Hal(e) if e.cause == Cause::Timeout), "{err:?}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Recovery ends the DSP process holding the abandoned batch; nothing of it runs afterwards.
    served.session().recover().unwrap();
    bench.release_hangs();
    assert_eq!(batch.run_with_deadline(&lib, Duration::from_secs(5)).map(|r| r.launches), Ok(2));
    assert_eq!(read(&x), vec![6; 8]);
    drop(lib);
    drop(lease);
    served.stop().unwrap();
}

fn a_zero_deadline_is_refused_alike_by_a_launch_and_a_batch_before_any_ioctl(board: &'static Board) {
    use hexrpc_runtime::launch::AbiVersion;
    use hexrpc_runtime::Kernel;
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    let served = serve(&bench);
    let sigs = signatures();
    let kernel = Kernel::new(served.open_library("table", image("table")).unwrap(), sigs[0], AbiVersion::V2);
    let mut lease = served.session().alloc(8192).unwrap();
    lease.fill(0, 8192, 1).unwrap();
    let (a, b, out, x) = (lease.view(0, 8).unwrap(), lease.view(8, 8).unwrap(), lease.view(16, 8).unwrap(), lease.view(32, 8).unwrap());
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(1, &[BufferRef::of(&x)], &[Scalar::U32(2)]).unwrap();
    let invokes = bench.counts().of(invoke_kind(board));
    let refused = Error::Pack(PackError::ZeroDeadline);
    assert_eq!(kernel.launch_with_deadline(&[&a, &b, &out], &[Scalar::U32(1)], Duration::ZERO), Err(refused));
    let bufs = [BufferRef::of(&a), BufferRef::of(&b), BufferRef::of(&out)];
    assert_eq!(kernel.launch_buffers(&bufs, &[Scalar::U32(1)], Some(Duration::ZERO)), Err(refused));
    assert_eq!(batch.run_with_deadline(kernel.library(), Duration::ZERO), Err(refused));
    assert_eq!(refused.stage(), "launch-pack");
    assert!(refused.is_refusal(), "{refused:?}");
    assert_eq!(bench.counts().of(invoke_kind(board)), invokes, "a zero deadline reached the driver");
    // Nothing needs recovery; a positive deadline runs both.
    assert_eq!(kernel.launch_with_deadline(&[&a, &b, &out], &[Scalar::U32(1)], Duration::from_secs(5)).map(|_| ()), Ok(()));
    assert_eq!(read(&out), vec![3; 8]);
    assert_eq!(batch.run_with_deadline(kernel.library(), Duration::from_secs(5)).map(|r| r.launches), Ok(1));
    assert_eq!(read(&x), vec![2; 8]);
    drop(kernel);
    drop(lease);
    served.stop().unwrap();
}
