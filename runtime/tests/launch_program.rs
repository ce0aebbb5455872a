//! Programs through the whole stack on the bench: a whole run's records kept in a lease, one
//! ioctl per run whatever the number of launches, nothing mapped on a steady run of a library
//! with the map cache, every host-side refusal before any ioctl, the DSP's own refusal of records
//! changed behind the host's back (before any kernel runs, every lease unmapped), a failing kernel
//! reported with its record, and a table built before programs answering "not run".

use std::time::Duration;

use hexrpc_bench::{elf, Bench, CallKind, LedgerEvent, LibraryModel, TableKernel};
use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::aee;
use hexrpc_hal::Cause;
use hexrpc_runtime::launch::{BatchFailure, BatchRefusal, BufferRef, PackError, Program, Signature, MAX_PROGRAM_LAUNCHES, PROGRAM};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::{Error, ServedSession};

hexrpc_bench::on_both_kernels!(
    a_program_of_the_capacity_runs_in_one_call_and_a_steady_run_maps_nothing,
    records_that_do_not_fit_the_table_or_the_leases_are_refused_before_any_ioctl,
    records_changed_behind_the_hosts_back_are_refused_on_the_dsp_before_any_kernel_runs,
    a_failing_kernel_stops_the_program_and_a_table_without_programs_runs_nothing
);

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

/// 0 `touch` (the u16 at x[0] += 1), 1 `add` (out[i] = a[i] + b[i] + c), 2 `check` (returns its
/// code).
fn signatures() -> Vec<Signature> {
    ["buf", "buf,buf,buf,u32", "buf,i32"].iter().map(|s| Signature::parse(s).unwrap()).collect()
}

fn table() -> LibraryModel {
    LibraryModel::table(vec![
        TableKernel::new(1, 0, |k| {
            let mut x = [0u8; 2];
            let _ = k.read(0, 0, &mut x);
            let _ = k.write(0, 0, &u16::from_le_bytes(x).wrapping_add(1).to_le_bytes());
            k.set_simulated_time(Duration::from_micros(1));
        }),
        TableKernel::new(3, 1, |k| {
            let c = k.scalar_u32(0).unwrap_or(0) as u8;
            let (a, b) = (k.read_all(0).unwrap_or_default(), k.read_all(1).unwrap_or_default());
            let out: Vec<u8> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y).wrapping_add(c)).collect();
            let _ = k.write(2, 0, &out);
        }),
        TableKernel::new(1, 1, |k| {
            let code = k.scalar_u32(0).unwrap_or(0) as i32;
            let _ = k.write(0, 0, &[0x5A]);
            k.fail(code);
        }),
    ])
}

/// One record in the launch ABI's batch-record form: kernel, views (lease, offset, length),
/// scalar slots (the value's little-endian bytes, zero-padded to 8).
fn record(out: &mut Vec<u8>, kernel: u32, views: &[(u32, u32, u32)], scalars: &[u64]) {
    out.extend_from_slice(&kernel.to_le_bytes());
    out.extend_from_slice(&(views.len() as u16).to_le_bytes());
    out.extend_from_slice(&(scalars.len() as u16).to_le_bytes());
    for &(l, off, len) in views {
        for w in [l, off, len] {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    for s in scalars {
        out.extend_from_slice(&s.to_le_bytes());
    }
}

fn ledger(bench: &Bench) -> (usize, usize, usize) {
    let ev: Vec<LedgerEvent> = bench.ledger().into_iter().map(|e| e.event).collect();
    let maps = ev.iter().filter(|e| matches!(e, LedgerEvent::Map { .. })).count();
    let unmaps = ev.iter().filter(|e| matches!(e, LedgerEvent::Unmap { matched: true, .. })).count();
    let kernels = ev.iter().filter(|e| matches!(e, LedgerEvent::BatchKernel { .. })).count();
    (maps, unmaps, kernels)
}

fn a_program_of_the_capacity_runs_in_one_call_and_a_steady_run_maps_nothing(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start = bench.snapshot();
    {
        bench.register_library("table", table().with_map_cache());
        let served = serve(&bench);
        let lib = served.open_library_with("table", image("table"), true).unwrap();
        let sigs = signatures();
        // Lease 0: 64 counters; lease 1: the add's operands and result. Record r touches counter
        // r % 64; every 256th record is an add instead.
        let counters = served.session().alloc(4096).unwrap();
        let mut operands = served.session().alloc(8192).unwrap();
        operands.fill(0, 8192, 2).unwrap();
        let mut records = Vec::new();
        let mut touches = [0u16; 64];
        for r in 0..MAX_PROGRAM_LAUNCHES {
            if r % 256 == 255 {
                record(&mut records, 1, &[(1, 0, 100), (1, 4096, 100), (1, 6000, 100)], &[7]);
            } else {
                record(&mut records, 0, &[(0, 16 * (r % 64) as u32, 2)], &[]);
                touches[r % 64] += 1;
            }
        }
        assert!(records.len() > 256 * 136, "far past a batch's record bytes");
        let mut code = served.session().alloc(records.len()).unwrap();
        code.write_at(0, &records).unwrap();
        let code_view = code.view(0, records.len()).unwrap();
        let (cw, ow) = (counters.whole(), operands.whole());
        let mut program = Program::new(&sigs, &[BufferRef::of(&cw), BufferRef::of(&ow)], BufferRef::of(&code_view), &records).unwrap();
        assert_eq!((program.len(), program.lease_count(), program.call_bytes()), (MAX_PROGRAM_LAUNCHES, 3, PROGRAM.header_len + 3 * 8));
        for run in 1..=3u16 {
            bench.clear_ledger();
            let invokes = bench.counts().of(invoke_kind(board));
            let calls: u64 = bench.counts().calls.values().sum();
            let done = program.run(&lib).unwrap();
            assert_eq!(done.launches, MAX_PROGRAM_LAUNCHES);
            assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 1, "one crossing for {MAX_PROGRAM_LAUNCHES} launches");
            assert_eq!(bench.counts().calls.values().sum::<u64>() - calls, 1, "nothing else crossed");
            let (maps, _, kernels) = ledger(&bench);
            assert_eq!(kernels, MAX_PROGRAM_LAUNCHES);
            // The first run maps the three leases (kept by the cache); later runs map nothing.
            assert_eq!(maps, if run == 1 { 3 } else { 0 }, "run {run}");
            let mut c = vec![0u8; 1024];
            counters.read_at(0, &mut c).unwrap();
            for (i, want) in touches.iter().enumerate() {
                assert_eq!(u16::from_le_bytes([c[16 * i], c[16 * i + 1]]), want * run, "counter {i} after run {run}");
            }
            let mut sum = vec![0u8; 100];
            operands.read_at(6000, &mut sum).unwrap();
            assert!(sum.iter().all(|&b| b == 2 + 2 + 7), "the add ran");
        }
        assert_eq!(bench.ledger_mismatches(), 0);
        drop(lib);
        drop((code, counters, operands));
        served.stop().unwrap();
    }
    assert_eq!(bench.settle(&start, Duration::from_secs(2)), start);
}

fn records_that_do_not_fit_the_table_or_the_leases_are_refused_before_any_ioctl(board: &'static Board) {
    let bench = Bench::for_board(board);
    let served = serve(&bench);
    let sigs = signatures();
    let a = served.session().alloc(4096).unwrap();
    let code = served.session().alloc(65536).unwrap();
    let aw = a.whole();
    let leases = [BufferRef::of(&aw)];
    let view = |n: usize| code.view(0, n).unwrap();
    // `Program::new` is given no library and no system-call seam: a refusal cannot cross.
    let refused = |records: &[u8]| {
        let v = view(records.len());
        match Program::new(&sigs, &leases, BufferRef::of(&v), records) {
            Err(Error::Batch(e)) => e,
            other => panic!("not refused: {other:?}"),
        }
    };
    let one = |kernel: u32, views: &[(u32, u32, u32)], scalars: &[u64]| {
        let mut r = Vec::new();
        record(&mut r, kernel, views, scalars);
        r
    };
    assert_eq!(refused(&one(3, &[(0, 0, 4)], &[])), BatchRefusal::NoSuchKernel { kernel: 3, kernels: 3 });
    assert_eq!(
        refused(&one(0, &[(0, 0, 4), (0, 0, 4)], &[])),
        BatchRefusal::Launch { record: 0, error: PackError::BufferCount { expected: 1, got: 2 } }
    );
    assert_eq!(
        refused(&one(2, &[(0, 0, 4)], &[])),
        BatchRefusal::Launch { record: 0, error: PackError::ScalarCount { expected: 1, got: 0 } }
    );
    assert_eq!(
        refused(&one(0, &[(0, 4000, 97)], &[])),
        BatchRefusal::Launch { record: 0, error: PackError::ViewOutsideLease { buffer: 0 } }
    );
    // Index 1 is the records lease itself: no record may name it.
    assert_eq!(refused(&one(0, &[(1, 0, 4)], &[])), BatchRefusal::Launch { record: 0, error: PackError::ViewOutsideLease { buffer: 0 } });
    let mut cut = one(0, &[(0, 0, 4)], &[]);
    cut.extend_from_slice(&one(0, &[(0, 0, 4)], &[])[..10]);
    assert_eq!(refused(&cut), BatchRefusal::RecordsCut { record: 1 });
    // No record at all (an empty view cannot be made: a one-byte view whose bytes are none).
    let v = view(1);
    assert_eq!(Program::new(&sigs, &leases, BufferRef::of(&v), &[]).unwrap_err(), Error::Batch(BatchRefusal::RecordsLease));
    let mut many = Vec::new();
    for _ in 0..=MAX_PROGRAM_LAUNCHES {
        record(&mut many, 0, &[], &[]);
    }
    let sig0 = [Signature::parse("").unwrap()];
    let v = view(many.len());
    assert_eq!(
        Program::new(&sig0, &leases, BufferRef::of(&v), &many).unwrap_err(),
        Error::Batch(BatchRefusal::TooManyLaunches { capacity: MAX_PROGRAM_LAUNCHES })
    );
    // The records lease shares its fd with a view lease: a kernel could rewrite the records.
    let rec = one(0, &[(0, 0, 4)], &[]);
    let inside = a.view(1024, rec.len()).unwrap();
    assert_eq!(Program::new(&sigs, &leases, BufferRef::of(&inside), &rec).unwrap_err(), Error::Batch(BatchRefusal::RecordsLease));
    // The records view is not the records' length.
    let longer = view(rec.len() + 8);
    assert_eq!(Program::new(&sigs, &leases, BufferRef::of(&longer), &rec).unwrap_err(), Error::Batch(BatchRefusal::RecordsLease));
    drop((a, code));
    served.stop().unwrap();
}

fn records_changed_behind_the_hosts_back_are_refused_on_the_dsp_before_any_kernel_runs(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    let served = serve(&bench);
    let lib = served.open_library("table", image("table")).unwrap();
    let sigs = signatures();
    let a = served.session().alloc(4096).unwrap();
    let mut records = Vec::new();
    for r in 0..10u32 {
        record(&mut records, 0, &[(0, 16 * r, 2)], &[]);
    }
    let mut code = served.session().alloc(8192).unwrap();
    code.write_at(100, &records).unwrap();
    let aw = a.whole();
    {
        let cv = code.view(100, records.len()).unwrap();
        let mut program = Program::new(&sigs, &[BufferRef::of(&aw)], BufferRef::of(&cv), &records).unwrap();
        assert_eq!(program.run(&lib).map(|r| r.launches), Ok(10));
    }
    // Each change, written into the lease after the program was checked: the DSP refuses the
    // whole program before running any record, and unmaps every lease it mapped.
    let at9 = 100 + 9 * PROGRAM.record_len(1, 0);
    for (what, at, value) in [
        ("a view of the records lease", at9 + PROGRAM.view_at(0) + PROGRAM.view_lease_at, 1u32),
        ("a view past its lease", at9 + PROGRAM.view_at(0) + PROGRAM.view_offset_at, 4095),
        ("a kernel past the table", at9 + PROGRAM.kernel_at, 7),
        ("a view count not the kernel's", at9 + PROGRAM.views_at, 2),
    ] {
        let mut bytes = [0u8; 4];
        code.read_at(at, &mut bytes).unwrap();
        let original = bytes;
        code.write_at(at, &value.to_le_bytes()[..if what.contains("count") { 2 } else { 4 }]).unwrap();
        let cv = code.view(100, records.len()).unwrap();
        let mut program = Program::new(&sigs, &[BufferRef::of(&aw)], BufferRef::of(&cv), &records).unwrap();
        bench.clear_ledger();
        let err = program.run(&lib).unwrap_err();
        assert!(matches!(err, Error::Hal(ref e) if e.cause == Cause::Dsp(aee::AEE_EBADPARM)), "{what}: {err:?}");
        let (maps, unmaps, kernels) = ledger(&bench);
        assert_eq!((maps, unmaps, kernels), (2, 2, 0), "{what}: both leases mapped and unmapped, no kernel ran");
        code.write_at(at, &original).unwrap();
    }
    drop(lib);
    drop((a, code));
    served.stop().unwrap();
}

fn a_failing_kernel_stops_the_program_and_a_table_without_programs_runs_nothing(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library("table", table());
    bench.register_library("old", table().without_programs());
    let served = serve(&bench);
    let lib = served.open_library("table", image("table")).unwrap();
    let old = served.open_library("old", image("old")).unwrap();
    let sigs = signatures();
    let a = served.session().alloc(4096).unwrap();
    let mut records = Vec::new();
    record(&mut records, 0, &[(0, 0, 2)], &[]);
    record(&mut records, 0, &[(0, 0, 2)], &[]);
    record(&mut records, 2, &[(0, 64, 1)], &[(-3i32) as u32 as u64]);
    record(&mut records, 0, &[(0, 0, 2)], &[]);
    let mut code = served.session().alloc(4096).unwrap();
    code.write_at(0, &records).unwrap();
    let (aw, cv) = (a.whole(), code.view(0, records.len()).unwrap());
    let mut program = Program::new(&sigs, &[BufferRef::of(&aw)], BufferRef::of(&cv), &records).unwrap();
    assert_eq!(program.run(&lib), Err(Error::BatchRun(BatchFailure::KernelFailed { record: 2, kernel: 2, code: -3, done: 2 })));
    let mut x = [0u8; 2];
    a.read_at(0, &mut x).unwrap();
    assert_eq!(u16::from_le_bytes(x), 2, "the records after the failing one did not run");
    bench.clear_ledger();
    assert_eq!(program.run(&old), Err(Error::BatchRun(BatchFailure::NotRun)));
    assert_eq!(ledger(&bench), (0, 0, 0), "the old table ran nothing");
    drop((lib, old));
    drop((a, code));
    served.stop().unwrap();
}
