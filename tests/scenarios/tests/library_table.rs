//! The HAL's library table at full scale, through the whole stack (HAL session, runtime reverse
//! service, bench DSP): 200 distinct libraries stay open on one session and are launched in turn
//! without a single reopen; after a DSP restart, recovery reopens each exactly once; the table
//! holds `MAX_LIBRARIES` and refuses one more with `Cause::Full`.

use hexrpc_bench::{Bench, EntryVersion, LibraryModel};
use hexrpc_bsp::Board;
use hexrpc_hal::{Cause, Library, MAX_LIBRARIES};
use hexrpc_runtime::launch::{EntryOptions, Scalar, Signature};
use hexrpc_scenarios::{stack, ModelError, Stack};

hexrpc_bench::on_both_kernels!(
    two_hundred_libraries_stay_open_and_reopen_once_after_a_restart,
    one_executor_shell_holds_many_real_libraries
);

const DISTINCT: usize = 200;
const ROUNDS: usize = 3;

/// Library `i`'s model writes its own number into its buffer, so every launch shows which
/// library ran.
fn register(bench: &Bench, i: usize) -> &'static [u8] {
    let name = format!("table_{i:03}");
    bench.register_library(
        &name,
        LibraryModel::new(EntryVersion::V2, 1, 0, move |k| {
            let _ = k.write(0, 0, &(i as u32).to_le_bytes());
        }),
    );
    Box::leak(hexrpc_bench::elf::library_image(&name, 256).into_boxed_slice())
}

fn two_hundred_libraries_stay_open_and_reopen_once_after_a_restart(board: &'static Board) {
    let bench = Bench::for_board(board);
    let images: Vec<&'static [u8]> = (0..MAX_LIBRARIES + 1).map(|i| register(&bench, i)).collect();
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf").unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let out = lease.view(0, 4).unwrap();
    let run = |lib: &Library<'_, Bench>, i: usize| {
        stack::launch(lib, &sig, &[&out], &[]).unwrap_or_else(|e| panic!("library {i}: {e}"));
        let mut got = [0u8; 4];
        out.read(&mut got).unwrap();
        assert_eq!(u32::from_le_bytes(got), i as u32, "library {i} ran another library's code");
    };
    let start = bench.counts();
    let opened = |bench: &Bench| bench.counts().libraries_opened - start.libraries_opened;
    let closed = |bench: &Bench| bench.counts().libraries_closed - start.libraries_closed;

    let libs: Vec<Library<'_, Bench>> =
        (0..DISTINCT).map(|i| stack.open(&format!("table_{i:03}"), images[i]).unwrap_or_else(|e| panic!("open {i}: {e}"))).collect();
    assert_eq!((opened(&bench), closed(&bench)), (DISTINCT as u64, 0));
    assert_eq!(bench.snapshot().loaded_libraries, DISTINCT);

    // Steady state: every library launched in turn, round after round, and nothing reopened.
    for _ in 0..ROUNDS {
        for (i, lib) in libs.iter().enumerate() {
            run(lib, i);
        }
    }
    assert_eq!((opened(&bench), closed(&bench)), (DISTINCT as u64, 0), "a library was reopened in steady state");

    // A DSP restart: the next launch reports it (or the listener saw it first), and recovery
    // reopens each library once.
    bench.restart_dsp();
    match stack::launch(&libs[0], &sig, &[&out], &[]) {
        Err(ModelError::Hal(e)) => assert!(matches!(e.cause, Cause::DspRestart | Cause::NeedsRecovery), "{e}"),
        other => panic!("expected a DSP restart: {other:?}"),
    }
    stack.session().recover().expect("recover");
    assert_eq!(opened(&bench), 2 * DISTINCT as u64, "recovery must reopen each of the {DISTINCT} libraries exactly once");
    assert_eq!(bench.snapshot().loaded_libraries, DISTINCT);
    for _ in 0..ROUNDS {
        for (i, lib) in libs.iter().enumerate() {
            run(lib, i);
        }
    }
    assert_eq!((opened(&bench), closed(&bench)), (2 * DISTINCT as u64, 0), "a library was reopened after recovery");

    // The table holds MAX_LIBRARIES (and the reverse service one image each); one more is refused.
    let more: Vec<Library<'_, Bench>> = (DISTINCT..MAX_LIBRARIES)
        .map(|i| stack.open(&format!("table_{i:03}"), images[i]).unwrap_or_else(|e| panic!("open {i}: {e}")))
        .collect();
    run(more.last().unwrap(), MAX_LIBRARIES - 1);
    match stack.open("table_full", images[MAX_LIBRARIES]) {
        Err(ModelError::Hal(e)) => assert_eq!(e.cause, Cause::Full, "{e}"),
        other => panic!("library {} must not fit: {:?}", MAX_LIBRARIES + 1, other.map(|_| ())),
    }
    assert_eq!(opened(&bench), (2 * DISTINCT + MAX_LIBRARIES - DISTINCT) as u64);
    assert!(stack.session().is_healthy());

    drop(more);
    drop(libs);
    assert_eq!(closed(&bench), MAX_LIBRARIES as u64);
    assert_eq!(bench.snapshot().loaded_libraries, 0);
}

/// Real Hexagon libraries (the executor): one DSP process's shell holds far more than 16 of them
/// (the shell's table follows the HAL's), each launched in turn without a reopen.
fn one_executor_shell_holds_many_real_libraries(board: &'static Board) {
    const N: usize = 40;
    let tc = match hexrpc_bench::executor::tools_available() {
        Ok(t) => t,
        Err(e) => return println!("SKIPPED: {e}"),
    };
    let image = hexrpc_scenarios::suite::build_image(&tc, "spin_u32", "buf,u32", EntryOptions::V2, hexrpc_bench::executor::Flavour::Scalar)
        .expect("build");
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf,u32").unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let out = lease.view(0, 4).unwrap();
    let libs: Vec<Library<'_, Bench>> =
        (0..N).map(|i| stack.open(&format!("spin_{i}"), image).unwrap_or_else(|e| panic!("open {i}: {e}"))).collect();
    let shells = hexrpc_bench::executor::executors(&bench);
    assert_eq!(shells.len(), N);
    assert!(shells.iter().all(|e| e.os_pid == shells[0].os_pid && e.stats.libraries == N as u32), "{shells:?}");
    for round in 1..=2u32 {
        for (i, lib) in libs.iter().enumerate() {
            let n = round * 1000 + i as u32;
            stack::launch(lib, &sig, &[&out], &[Scalar::U32(n)]).unwrap_or_else(|e| panic!("library {i}: {e}"));
            let mut got = [0u8; 4];
            out.read(&mut got).unwrap();
            assert_eq!(u32::from_le_bytes(got), n);
        }
    }
    assert_eq!(bench.counts().libraries_opened, N as u64);
    assert_eq!(bench.restart_count(), 0);
}
