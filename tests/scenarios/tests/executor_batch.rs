//! Batches on the executor: a real kernel-table library (the generated batch entry + the suite's
//! kernels, a Hexagon shared object) loaded by the simulated DSP's shell under qemu-hexagon,
//! driven by the runtime's `Batch` through the whole stack. One crossing per batch, one
//! `HAP_mmap` per distinct lease per call (the shell's ledger events), hostile records refused
//! before any map, a failing kernel reported with its record and every mapping released, and
//! recovery after the DSP dies in the middle of a batch.
//!
//! Skips (with a message) when clang-19, ld.lld-19 or qemu-hexagon cannot run here.

use std::time::{Duration, Instant};

use hexrpc_bench::executor::{self, Flavour, Toolchain};
use hexrpc_bench::{Bench, BenchConfig, CallKind, LedgerEvent, RestartReason};
use hexrpc_bsp::Board;
use hexrpc_hal::{BufferView, Call, Cause};
use hexrpc_runtime::launch::EntryOptions;
use hexrpc_runtime::launch::{
    Batch, BatchFailure, BatchRefusal, BufferRef, Program, Scalar, Signature, BATCH, MAX_ARGS, MAX_BATCH_LAUNCHES, MAX_PROGRAM_LAUNCHES,
    PROGRAM,
};
use hexrpc_runtime::Error;
use hexrpc_scenarios::suite::{build_table_image, build_table_image_with};
use hexrpc_scenarios::{stack, Stack};

hexrpc_bench::on_both_kernels!(
    batches_of_1_to_256_real_kernels_cross_once_and_map_each_lease_once,
    a_hostile_record_is_refused_by_the_real_entry_before_anything_is_mapped,
    a_failing_kernel_mid_batch_is_reported_and_every_mapping_released,
    the_dsp_dying_mid_batch_is_recovered,
    steady_state_batches_map_no_lease_with_the_map_cache,
    a_program_of_4096_real_launches_runs_in_one_call_and_refuses_changed_records
);

/// What a launch is counted as on `board`'s driver.
fn invoke_kind(board: &Board) -> CallKind {
    match board.abi {
        hexrpc_bsp::KernelAbi::DownstreamMsm => CallKind::RpcInvokeAttrs,
        hexrpc_bsp::KernelAbi::Upstream => CallKind::UpInvoke,
    }
}

fn tools() -> Option<Toolchain> {
    hexrpc_scenarios::suite::tools_or_skip()
}

/// The table: 0 bump_u8 (a[i] += 1), 1 check_u32 (status), 2 spin_u32, 3 relu_f32.
const TABLE: [(&str, &str); 4] = [("bump_u8", "buf,u32"), ("check_u32", "buf,u32"), ("spin_u32", "buf,u32"), ("relu_f32", "buf,buf,u32")];

fn sigs() -> Vec<Signature> {
    TABLE.iter().map(|(_, s)| Signature::parse(s).unwrap()).collect()
}

fn maps(bench: &Bench) -> (usize, usize) {
    let ledger = bench.ledger();
    let m = ledger.iter().filter(|e| matches!(e.event, LedgerEvent::Map { .. })).count();
    let u = ledger.iter().filter(|e| matches!(e.event, LedgerEvent::Unmap { matched: true, .. })).count();
    (m, u)
}

fn read(v: &BufferView<'_>) -> Vec<u8> {
    let mut b = vec![0u8; v.len()];
    v.read(&mut b).unwrap();
    b
}

fn batches_of_1_to_256_real_kernels_cross_once_and_map_each_lease_once(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("table", build_table_image(&tc, &TABLE, Flavour::Scalar).expect("build")).expect("open");
    let sigs = sigs();
    let mut l1 = stack.session().alloc(64 * 1024).unwrap();
    let mut l2 = stack.session().alloc(64 * 1024).unwrap();
    for k in [1, 2, 3, 7, 16, 33, MAX_BATCH_LAUNCHES] {
        l1.fill(0, 64 * 1024, 0).unwrap();
        l2.fill(0, 64 * 1024, 0).unwrap();
        // Record r bumps view r % 8 of lease r % 2 (views at non-zero offsets, shared leases):
        // every view ends at the number of records that bumped it.
        let views: Vec<BufferView<'_>> =
            (0..8).map(|v| if v % 2 == 0 { l1.view(100 + 1000 * v, 300).unwrap() } else { l2.view(7 + 999 * v, 300).unwrap() }).collect();
        let mut batch = Batch::new(&sigs).unwrap();
        for r in 0..k {
            batch.push(0, &[BufferRef::of(&views[r % 8])], &[Scalar::U32(300)]).unwrap();
        }
        assert_eq!(batch.lease_count(), if k == 1 { 1 } else { 2 });
        bench.clear_ledger();
        let invokes = bench.counts().of(invoke_kind(board));
        assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(k));
        assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 1);
        assert_eq!(
            maps(&bench),
            (batch.lease_count(), batch.lease_count()),
            "k={k}: one map and one unmap per lease: {:?}",
            bench.ledger()
        );
        for (v, view) in views.iter().enumerate() {
            let want = (0..k).filter(|r| r % 8 == v).count() as u8;
            assert!(read(view).iter().all(|&b| b == want), "k={k} view {v}");
        }
        assert_eq!(bench.ledger_mismatches(), 0);
        drop(views);
    }
    // A batch that does not fit is refused before any system call.
    let calls: u64 = bench.counts().calls.values().sum();
    let v = l1.view(5, 10).unwrap();
    let mut full = Batch::new(&sigs).unwrap();
    for _ in 0..MAX_BATCH_LAUNCHES {
        full.push(0, &[BufferRef::of(&v)], &[Scalar::U32(10)]).unwrap();
    }
    assert_eq!(
        full.push(0, &[BufferRef::of(&v)], &[Scalar::U32(10)]),
        Err(Error::Batch(BatchRefusal::TooManyLaunches { capacity: MAX_BATCH_LAUNCHES }))
    );
    assert_eq!(Batch::new(&sigs).unwrap().run(&lib), Err(Error::Batch(BatchRefusal::Empty)));
    assert_eq!(bench.counts().calls.values().sum::<u64>(), calls, "nothing crossed");
    // A single v2 launch on the table library runs kernel 0.
    let v = l1.view(5, 10).unwrap();
    stack::launch(&lib, &sigs[0], &[&v], &[Scalar::U32(10)]).expect("single launch");
    assert_eq!(read(&v), vec![1; 10]);
}

fn a_hostile_record_is_refused_by_the_real_entry_before_anything_is_mapped(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("table", build_table_image(&tc, &TABLE, Flavour::Scalar).expect("build")).expect("open");
    let sigs = sigs();
    let lease = stack.session().alloc(8192).unwrap();
    let (a, b) = (lease.view(16, 64).unwrap(), lease.view(4096, 64).unwrap());
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(0, &[BufferRef::of(&a)], &[Scalar::U32(64)]).unwrap();
    batch.push(3, &[BufferRef::of(&a), BufferRef::of(&b)], &[Scalar::U32(16)]).unwrap();
    let (good, leases) = (batch.pra0().to_vec(), batch.pra1().to_vec());
    let second = 16 + BATCH.record_len(1, 1);
    for (what, at, x) in [
        ("kernel index", second, 4u32),
        ("lease index", second + BATCH.view_at(1) + BATCH.view_lease_at, 1),
        ("view past lease", second + BATCH.view_at(1) + BATCH.view_offset_at, 8190),
        ("record count", BATCH.count_at, MAX_BATCH_LAUNCHES as u32 + 1),
    ] {
        let mut pra0 = good.clone();
        pra0[at..at + 4].copy_from_slice(&x.to_le_bytes());
        bench.clear_ledger();
        let mut status = [0u8; 24];
        let mut args = Call::<'_, MAX_ARGS>::new(BATCH.method).unwrap();
        args.input(&pra0).unwrap().input(&leases).unwrap().output(&mut status).unwrap();
        args.out_handle_sized(lease.fd(), BATCH.handle_attr, lease.len() as u64).unwrap();
        let err = lib.invoke(&mut args).expect_err(what);
        assert_eq!(err.cause, Cause::Dsp(14), "{what}: {err}");
        assert_eq!(maps(&bench), (0, 0), "{what}: nothing mapped");
        assert!(stack.session().is_healthy());
    }
    assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(2));
}

fn a_failing_kernel_mid_batch_is_reported_and_every_mapping_released(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("table", build_table_image(&tc, &TABLE, Flavour::Scalar).expect("build")).expect("open");
    let sigs = sigs();
    let mut lease = stack.session().alloc(8192).unwrap();
    lease.fill(0, 8192, 0).unwrap();
    lease.write_at(512, &5u32.to_le_bytes()).unwrap();
    let other = stack.session().alloc(4096).unwrap();
    let (x, c, y) = (lease.view(64, 16).unwrap(), lease.view(512, 8).unwrap(), other.view(100, 16).unwrap());
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(0, &[BufferRef::of(&x)], &[Scalar::U32(16)]).unwrap();
    batch.push(1, &[BufferRef::of(&c)], &[Scalar::U32(5)]).unwrap(); // passes
    let failing = batch.push(1, &[BufferRef::of(&c)], &[Scalar::U32(9)]).unwrap(); // 5 != 9: returns 6
    batch.push(0, &[BufferRef::of(&y)], &[Scalar::U32(16)]).unwrap();
    bench.clear_ledger();
    assert_eq!(batch.run(&lib), Err(Error::BatchRun(BatchFailure::KernelFailed { record: failing, kernel: 1, code: 6, done: 2 })));
    assert_eq!(read(&x), vec![1; 16], "record 0 ran");
    assert_eq!(u32::from_le_bytes(read(&c)[4..8].try_into().unwrap()), 2, "both check records ran");
    assert_eq!(read(&y), vec![0; 16], "the record after the failure did not run");
    assert_eq!(maps(&bench), (2, 2), "every lease mapped once and unmapped");
    let shells = executor::executors(&bench);
    assert!(shells.iter().any(|e| e.library.starts_with("table") && e.alive), "the library runs in a qemu-hexagon shell: {shells:?}");
    assert!(shells.iter().all(|e| e.stats.live_mappings == 0), "{shells:?}");
    assert!(stack.session().is_healthy());
    batch.set_scalar(failing, 0, Scalar::U32(5)).unwrap();
    assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(4));
    assert_eq!(read(&y), vec![1; 16]);
}

fn the_dsp_dying_mid_batch_is_recovered(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::with_config(BenchConfig { executor_timeout: Duration::from_millis(1500), ..BenchConfig::for_board(board) });
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("table", build_table_image(&tc, &TABLE, Flavour::Scalar).expect("build")).expect("open");
    let sigs = sigs();
    let mut lease = stack.session().alloc(8192).unwrap();
    lease.fill(0, 8192, 0).unwrap();
    let (x, spin, y) = (lease.view(8, 8).unwrap(), lease.view(64, 4).unwrap(), lease.view(128, 8).unwrap());
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(0, &[BufferRef::of(&x)], &[Scalar::U32(8)]).unwrap();
    let spinning = batch.push(2, &[BufferRef::of(&spin)], &[Scalar::U32(0)]).unwrap(); // forever
    batch.push(0, &[BufferRef::of(&y)], &[Scalar::U32(8)]).unwrap();
    let pid = executor::executors(&bench).iter().find(|e| e.library.starts_with("table")).unwrap().os_pid;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    });
    let t0 = Instant::now();
    let err = batch.run(&lib).expect_err("killed mid-batch");
    killer.join().unwrap();
    assert!(matches!(err, Error::Hal(e) if e.cause == Cause::DspRestart), "{err}");
    // Ended by the kill, not by the call limit: the restart's own reason says which (a time
    // bound could not tell them apart on a loaded machine).
    let reason = bench.last_restart().expect("a restart reason");
    assert!(matches!(reason, RestartReason::Fault { .. }), "ended by the kill, not the call limit: {reason:?} after {:?}", t0.elapsed());
    assert_eq!(read(&x), vec![1; 8], "the record before the spin ran");
    assert_eq!(read(&y), vec![0; 8], "the record after it did not");
    stack.session().recover().expect("recover");
    // The same batch, its spin bounded now, runs on the recovered process.
    batch.set_scalar(spinning, 0, Scalar::U32(100)).unwrap();
    assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(3));
    assert_eq!((read(&x), read(&y)), (vec![2; 8], vec![1; 8]));
    assert_eq!(u32::from_le_bytes(read(&spin).try_into().unwrap()), 100);
}

/// Batches on a table library with the map cache, with the executor: after the first batch,
/// running it again on the same leases maps nothing in the shell (a single launch on them
/// neither); each lease's drop releases its mapping, and nothing is left live.
fn steady_state_batches_map_no_lease_with_the_map_cache(board: &'static Board) {
    let Some(tc) = tools() else { return };
    const RUNS: usize = 5;
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let image = build_table_image_with(&tc, &TABLE, Flavour::Scalar, &EntryOptions::V2_CACHED).expect("build");
    let lib = stack.open_with("table_cached", image, true).expect("open");
    let sigs = sigs();
    let mut l1 = stack.session().alloc(64 * 1024).unwrap();
    let mut l2 = stack.session().alloc(64 * 1024).unwrap();
    l1.fill(0, 64 * 1024, 0).unwrap();
    l2.fill(0, 64 * 1024, 0).unwrap();
    let views: Vec<BufferView<'_>> =
        (0..4).map(|v| if v % 2 == 0 { l1.view(100 + 1000 * v, 300).unwrap() } else { l2.view(7 + 999 * v, 300).unwrap() }).collect();
    let mut batch = Batch::new(&sigs).unwrap();
    for r in 0..8 {
        batch.push(0, &[BufferRef::of(&views[r % 4])], &[Scalar::U32(300)]).unwrap();
    }
    assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(8));
    assert_eq!(maps(&bench), (2, 0), "the first batch maps each lease once and keeps it: {:?}", bench.ledger());
    bench.clear_ledger();
    for _ in 0..RUNS {
        assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(8));
    }
    assert_eq!(maps(&bench), (0, 0), "steady state: no map, no unmap: {:?}", bench.ledger());
    for v in &views {
        assert!(read(v).iter().all(|&b| b as usize == 2 * (RUNS + 1)), "every record ran on its lease's bytes");
    }
    // A single launch on one of those leases shares the batch's mapping.
    stack::launch(&lib, &sigs[0], &[&views[0]], &[Scalar::U32(300)]).expect("single launch");
    assert_eq!(maps(&bench), (0, 0), "{:?}", bench.ledger());
    let live =
        |b: &Bench| executor::executors(b).into_iter().find(|e| e.library.starts_with("table_cached")).map(|e| e.stats.live_mappings);
    assert_eq!(live(&bench), Some(2));
    drop(views);
    drop(l1);
    assert_eq!(maps(&bench), (0, 1), "the dropped lease's mapping was released: {:?}", bench.ledger());
    drop(l2);
    assert_eq!(live(&bench), Some(0));
    assert_eq!(bench.ledger_mismatches(), 0, "{:?}", bench.ledger());
}

/// The generated program entry (method 5) on real kernels: 4,096 launches whose records stay in a
/// lease run in one call; with the map cache a steady run maps nothing (the records lease
/// included); a record changed in the lease after the host checked it (a view of the records
/// lease) is refused by the entry before any kernel runs, every lease unmapped.
fn a_program_of_4096_real_launches_runs_in_one_call_and_refuses_changed_records(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let image = build_table_image_with(&tc, &TABLE, Flavour::Scalar, &EntryOptions::V2_CACHED).expect("build");
    let lib = stack.open_with("table_program", image, true).expect("open");
    let sigs = sigs();
    let mut data = stack.session().alloc(64 * 1024).unwrap();
    data.fill(0, 64 * 1024, 0).unwrap();
    // Record r bumps 64 bytes at 1000 * (r % 16) + 3: each of the 16 views by 256 a run, so
    // every byte wraps back to its start; one run more than a multiple of 256 records is
    // checked by the count of the first view instead.
    let mut records = Vec::new();
    for r in 0..MAX_PROGRAM_LAUNCHES - 1 {
        let mut one = Vec::new();
        one.extend_from_slice(&0u32.to_le_bytes());
        one.extend_from_slice(&1u16.to_le_bytes());
        one.extend_from_slice(&1u16.to_le_bytes());
        for w in [0u32, 1000 * (r % 16) as u32 + 3, 64] {
            one.extend_from_slice(&w.to_le_bytes());
        }
        one.extend_from_slice(&64u64.to_le_bytes());
        records.extend_from_slice(&one);
    }
    let mut code = stack.session().alloc(records.len()).unwrap();
    code.write_at(0, &records).unwrap();
    let (dw, cv) = (data.whole(), code.view(0, records.len()).unwrap());
    let mut program = Program::new(&sigs, &[BufferRef::of(&dw)], BufferRef::of(&cv), &records).unwrap();
    for run in 1..=2usize {
        bench.clear_ledger();
        let invokes = bench.counts().of(invoke_kind(board));
        assert_eq!(program.run(&lib).map(|r| r.launches), Ok(MAX_PROGRAM_LAUNCHES - 1));
        assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 1, "one crossing for {} real launches", MAX_PROGRAM_LAUNCHES - 1);
        assert_eq!(maps(&bench), (if run == 1 { 2 } else { 0 }, 0), "run {run}: the leases are mapped once and kept: {:?}", bench.ledger());
        // View v was bumped ceil((4095 - v) / 16) times per run.
        for v in 0..16usize {
            let per_run = (MAX_PROGRAM_LAUNCHES - 1 - v).div_ceil(16);
            let mut got = [0u8; 64];
            data.read_at(1000 * v + 3, &mut got).unwrap();
            assert!(got.iter().all(|&b| b as usize == (per_run * run) % 256), "view {v} after run {run}: {}", got[0]);
        }
    }
    // The last record's view now names the records lease (index 1), written after the host
    // checked the records it was given: refused by the entry. (The program built before is
    // not used again: its borrow of the records lease ends here.)
    let at = records.len() - PROGRAM.record_len(1, 1) + PROGRAM.view_at(0) + PROGRAM.view_lease_at;
    code.write_at(at, &1u32.to_le_bytes()).unwrap();
    let (dw, cv) = (data.whole(), code.view(0, records.len()).unwrap());
    let mut program = Program::new(&sigs, &[BufferRef::of(&dw)], BufferRef::of(&cv), &records).unwrap();
    let mut before = [0u8; 64];
    data.read_at(3, &mut before).unwrap();
    bench.clear_ledger();
    let err = program.run(&lib).unwrap_err();
    assert!(matches!(err, Error::Hal(ref e) if e.cause == Cause::Dsp(hexrpc_drivers::aee::AEE_EBADPARM)), "{err:?}");
    let mut after = [0u8; 64];
    data.read_at(3, &mut after).unwrap();
    assert_eq!(before, after, "no kernel ran");
    assert_eq!(bench.ledger_mismatches(), 0, "{:?}", bench.ledger());
    drop(lib);
}
