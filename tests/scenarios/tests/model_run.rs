//! Model files opened and run through the whole stack on the bench: one FastRPC call per run,
//! outputs as the kernels computed them, nothing sent for a file or an input this build refuses,
//! a run after a DSP restart once the session is recovered (the file not read again), and a
//! real kernel-table library (the generated program entry and the suite's kernels, under
//! qemu-hexagon) run from a file.

use std::time::Duration;

use hexrpc_bench::{Bench, LedgerEvent};
use hexrpc_bsp::Board;
use hexrpc_libbuild::{build_table_library, BuildOptions, TableSource};
use hexrpc_model::run::{LoadedModel, RunError};
use hexrpc_model::sample::{self, record};
use hexrpc_model::{DType, Direction, InitSpec, IoSpec, ModelBuilder, StepSpec};
use hexrpc_runtime::launch::record::{FLAG_BATCHES, FLAG_MAP_CACHE, FLAG_PROGRAM};
use hexrpc_runtime::launch::Signature;
use hexrpc_scenarios::stack::invoke_kind;

#[path = "support/sample_model.rs"]
mod sample_model;
use sample_model::{sample_library, sample_table, serve};

hexrpc_bench::on_both_kernels!(
    a_model_file_runs_in_one_call_a_run_and_again_after_a_restart,
    a_file_or_an_input_this_build_refuses_sends_nothing,
    a_model_of_real_kernels_runs_from_its_file
);

/// The sample with the map cache in its library's build record.
fn cached_sample() -> Vec<u8> {
    let mut b = sample::tiny();
    b.libraries[0].1 = sample_library(FLAG_BATCHES | FLAG_PROGRAM | FLAG_MAP_CACHE);
    b.to_bytes()
}

fn maps(bench: &Bench) -> usize {
    bench.ledger().iter().filter(|e| matches!(e.event, LedgerEvent::Map { .. })).count()
}

fn a_model_file_runs_in_one_call_a_run_and_again_after_a_restart(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start = bench.snapshot();
    {
        bench.register_library("tiny_table", sample_table());
        let served = serve(&bench);
        let bytes = cached_sample();
        let mut model = LoadedModel::open(&served, &bytes).expect("open the sample");
        drop(bytes);
        assert_eq!((model.inputs().len(), model.outputs().len(), model.calls_per_run(), model.launches()), (1, 1, 1, 2));
        assert_eq!(model.inputs()[0].dtype, DType::U8);
        assert_eq!(model.outputs()[0].shape, vec![4]);
        // 24 bytes of header and three lease entries (two arenas, the records): all a run copies
        // into the kernel beyond its input.
        assert_eq!(model.call_bytes_per_run(), 24 + 3 * 8);
        assert_eq!(hexrpc_bench::entry::TIMES_MAGIC, hexrpc_runtime::launch::TIMES_MAGIC, "the bench's entry writes the runtime's times");
        let x: Vec<u8> = (0..16).collect();
        let mut y = [0u8; 16];
        for run in 0..3 {
            bench.clear_ledger();
            let invokes = bench.counts().of(invoke_kind(board));
            let report = model.run(&[&x], &mut [&mut y], Some(Duration::from_secs(5))).expect("run");
            assert_eq!((report.launches, report.calls), (2, 1));
            assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 1, "run {run}: one call");
            assert_eq!(maps(&bench), if run == 0 { 3 } else { 0 }, "run {run}: the leases stay mapped");
            assert_eq!(y.to_vec(), x.iter().map(|v| v + 7).collect::<Vec<u8>>(), "run {run}");
        }
        // Profiled: each record's time from the simulated entry, named after its kernel; the
        // times add up to the run's DSP total.
        let (report, profile) = model.run_profiled(&[&x], &mut [&mut y], None).expect("profiled run");
        assert_eq!(y.to_vec(), x.iter().map(|v| v + 7).collect::<Vec<u8>>());
        assert_eq!(profile.untimed_calls, 0);
        assert_eq!(profile.records.len(), report.launches);
        assert_eq!(profile.total_micros(), report.dsp_micros, "{profile:?}");
        let library = sample_library(FLAG_BATCHES | FLAG_PROGRAM | FLAG_MAP_CACHE);
        let table = hexrpc_runtime::launch::LibraryRecord::find(&library).unwrap().unwrap();
        let names: Vec<&str> = table.kernels().map(|k| k.name).collect();
        assert!(profile.records.iter().all(|r| names.contains(&r.kernel.as_str())), "{profile:?} vs {names:?}");
        // A DSP restart: the run fails, recoverably; recovered, the next one works.
        bench.restart_dsp();
        let err = model.run(&[&x], &mut [&mut y], None).unwrap_err();
        assert!(err.is_recoverable(), "{err}");
        served.session().recover().expect("recover");
        y = [0; 16];
        let report = model.run(&[&x], &mut [&mut y], None).expect("the run after the recovery");
        assert_eq!(report.calls, 1);
        assert_eq!(y.to_vec(), x.iter().map(|v| v + 7).collect::<Vec<u8>>());
        drop(model);
        served.stop().unwrap();
    }
    // Everything back, less what Linux's own driver keeps for good after a restart (its leak,
    // accounted by the bench: `Bench::kernel_leaks`).
    assert_eq!(bench.settle_except_kernel_leaks(&start, Duration::from_secs(2)), start);
}

fn a_file_or_an_input_this_build_refuses_sends_nothing(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library("tiny_table", sample_table());
    let served = serve(&bench);
    // Nothing allocated, opened or mapped, and nothing reached the DSP's entry (the listener's
    // own call in flight comes and goes: it is not compared).
    let held = |b: &Bench| {
        let s = b.snapshot();
        (s.ion_buffers, s.ion_bytes, s.host_mappings, s.loaded_libraries, s.dsp_maps, s.hap_mappings, s.open_fds)
    };
    let before = held(&bench);
    bench.clear_ledger();
    // A library built before programs: refused before anything is opened or allocated.
    let mut old = sample::tiny();
    old.libraries[0].1 = sample_library(FLAG_BATCHES);
    assert_eq!(LoadedModel::open(&served, &old.to_bytes()).unwrap_err(), RunError::NoPrograms { library: 0 });
    // A file cut short.
    let bytes = cached_sample();
    assert!(matches!(LoadedModel::open(&served, &bytes[..bytes.len() - 1]).unwrap_err(), RunError::File(_)));
    assert_eq!(held(&bench), before, "nothing acquired for a refused file");
    let mut model = LoadedModel::open(&served, &bytes).unwrap();
    let (x0, mut y0) = ([1u8; 16], [0u8; 16]);
    model.run(&[&x0], &mut [&mut y0], None).unwrap();
    bench.clear_ledger();
    let invokes = bench.counts().of(invoke_kind(board));
    let (x, mut y) = ([0u8; 16], [0u8; 16]);
    assert_eq!(model.run(&[], &mut [&mut y], None).unwrap_err(), RunError::InputCount { want: 1, got: 0 });
    assert_eq!(model.run(&[&x[..15]], &mut [&mut y], None).unwrap_err(), RunError::Size { name: "x".into(), want: 16, got: 15 });
    assert_eq!(model.run(&[&x], &mut [&mut y[..3]], None).unwrap_err(), RunError::Size { name: "y".into(), want: 16, got: 3 });
    assert_eq!(model.run(&[&x], &mut [], None).unwrap_err(), RunError::OutputCount { want: 1, got: 0 });
    assert!(bench.ledger().is_empty(), "nothing reached the DSP for a refused run: {:?}", bench.ledger());
    assert_eq!(bench.counts().of(invoke_kind(board)), invokes, "no call for a refused run");
    drop(model);
    served.stop().unwrap();
}

/// Two kernels in C, built by `hexrpc build-lib --table`'s pipeline (the build record carries
/// batches, programs and the map cache): 0 `bump_u8` (a[i] += 1), 1 `relu_f32` (y = max(x, 0)).
const KERNELS_C: &str = "void bump_u8(unsigned char *a, unsigned int n) { for (unsigned int i = 0; i < n; i++) a[i] += 1; }
void relu_f32(const float *x, float *y, unsigned int n) { for (unsigned int i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
";

fn real_table(board: &Board) -> Option<Vec<u8>> {
    hexrpc_scenarios::suite::tools_or_skip()?;
    let dir = std::env::temp_dir().join(format!("hexrpc-model-run-{}-{}", std::process::id(), board.name));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("kernels.c");
    std::fs::write(&src, KERNELS_C).unwrap();
    let table = [
        TableSource { source: src.clone(), name: "bump_u8".into(), signature: Signature::parse("buf,u32").unwrap() },
        TableSource { source: src, name: "relu_f32".into(), signature: Signature::parse("buf,buf,u32").unwrap() },
    ];
    let out = dir.join("table.so");
    build_table_library(&table, &out, &BuildOptions::default()).expect("build the table");
    let image = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Some(image)
}

fn a_model_of_real_kernels_runs_from_its_file(board: &'static Board) {
    let Some(image) = real_table(board) else { return };
    // Input x: 64 f32 in arena 1; relu into arena 1 at 4096 (output y); then 300 bumps of a
    // 64-byte counter in arena 0 (output n): 301 launches, one step, one call a run.
    let mut records = record(1, &[(1, 0, 256), (1, 4096, 256)], &[64]);
    for _ in 0..300 {
        records.extend(record(0, &[(0, 128, 64)], &[64]));
    }
    let mut steps = Vec::new();
    // The format's steps hold at most 256 records: two steps on the same library, one program.
    let first = hexrpc_runtime::launch::BATCH.record_len(2, 1) + 199 * hexrpc_runtime::launch::BATCH.record_len(1, 1);
    steps.push(StepSpec { library: 0, launches: 200, records: records[..first].to_vec() });
    steps.push(StepSpec { library: 0, launches: 101, records: records[first..].to_vec() });
    let file = ModelBuilder {
        arch: 0x65,
        source_digest: [0; 32],
        source_name: "relu-and-count".into(),
        tinygrad_version: String::new(),
        hexrpc_version: env!("CARGO_PKG_VERSION").into(),
        libraries: vec![("relu_count".into(), image)],
        arenas: vec![(4096, 64), (8192, 64)],
        init: vec![InitSpec::Zeros { arena: 0, offset: 0, len: 128 }],
        steps,
        io: vec![
            IoSpec { name: "x".into(), direction: Direction::Input, dtype: DType::F32, shape: vec![64], arena: 1, offset: 0 },
            IoSpec { name: "y".into(), direction: Direction::Output, dtype: DType::F32, shape: vec![64], arena: 1, offset: 4096 },
            IoSpec { name: "n".into(), direction: Direction::Output, dtype: DType::U8, shape: vec![64], arena: 0, offset: 128 },
        ],
    }
    .to_bytes();
    let bench = Bench::for_board(board);
    let served = serve(&bench);
    // The same file with a library that imports what the DSP does not provide (one letter of an
    // import's name changed in its dynamic string table): refused by the reader, naming it.
    let mut odd = file.clone();
    let name = b"HAP_perf_get_time_us\0";
    let at: Vec<usize> = odd.windows(name.len()).enumerate().filter(|(_, w)| *w == name).map(|(i, _)| i).collect();
    assert!(!at.is_empty(), "the entry imports HAP_perf_get_time_us");
    for i in at {
        odd[i + name.len() - 2] = b'X';
    }
    hexrpc_model::sample::fix_checksums(&mut odd);
    match LoadedModel::open(&served, &odd) {
        Err(RunError::File(e @ hexrpc_model::ModelError::Import { library: 0, .. })) => {
            assert!(e.to_string().contains("imports HAP_perf_get_time_uX"), "{e}")
        }
        other => panic!("not refused for its import: {other:?}"),
    }
    let mut model = LoadedModel::open(&served, &file).expect("open");
    assert_eq!((model.calls_per_run(), model.launches()), (1, 301), "two steps on one library make one program");
    let x: Vec<f32> = (0..64).map(|i| i as f32 - 31.5).collect();
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (mut y, mut n) = (vec![0u8; 256], vec![0u8; 64]);
    // The counter's bytes have no defined initial value (no init range may cover an output):
    // each run adds 300 to every byte.
    let mut last: Option<Vec<u8>> = None;
    for run in 1..=2u32 {
        let invokes = bench.counts().of(invoke_kind(board));
        let t0 = std::time::Instant::now();
        // The second run profiled: 301 times from the generated entry, named after the table's
        // kernels, adding up to the run's DSP total, within the run's wall time.
        let report = if run == 1 {
            model.run(&[&xb], &mut [&mut y, &mut n], Some(Duration::from_secs(30))).expect("run")
        } else {
            let (report, profile) = model.run_profiled(&[&xb], &mut [&mut y, &mut n], Some(Duration::from_secs(30))).expect("run");
            let wall = t0.elapsed();
            assert_eq!(profile.untimed_calls, 0);
            let kernels: Vec<&str> = profile.records.iter().map(|r| r.kernel.as_str()).collect();
            assert_eq!(kernels.len(), 301);
            assert_eq!(kernels[0], "relu_f32");
            assert!(kernels[1..].iter().all(|k| *k == "bump_u8"), "{kernels:?}");
            assert_eq!(profile.total_micros(), report.dsp_micros);
            assert!(u128::from(profile.total_micros()) <= wall.as_micros(), "{} us in {wall:?}", profile.total_micros());
            assert_eq!(profile.by_kernel().iter().map(|(k, n, _)| (k.as_str(), *n)).collect::<Vec<_>>().len(), 2);
            report
        };
        assert_eq!((report.launches, report.calls), (301, 1));
        assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 1);
        let got: Vec<f32> = y.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, x.iter().map(|v| v.max(0.0)).collect::<Vec<f32>>());
        if let Some(last) = &last {
            assert!(n.iter().zip(last).all(|(&b, &a)| b == a.wrapping_add((300 % 256) as u8)), "{} after {}", n[0], last[0]);
        }
        last = Some(n.clone());
    }
    drop(model);
    served.stop().unwrap();
}
