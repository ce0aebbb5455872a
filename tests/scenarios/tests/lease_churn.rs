//! Leases allocated and freed for as long as a service runs, with the process's descriptors
//! limited to 1,024 (systemd's default soft limit), on the three kernels: nothing the session
//! keeps for the driver grows without bound, and everything is back at its start after the
//! session.
//!
//! * 10,000 alloc/launch/free cycles in one healthy session. Upstream drivers that look maps up
//!   by fd number only (the bench's upstream model) keep each freed number occupied until the
//!   channel closes, so the session replaces its channel at the board's bound; Linux 6.1.192's
//!   own driver matches the dma-buf too, so a freed number is closed at once; downstream the
//!   maps are dropped by `MUNMAP_FD` first.
//! * 80 leases launched on a library with the map cache, a DSP restart, every lease dropped
//!   before `recover()`: their DSP mappings cannot be released, so only their numbers are kept
//!   (memory and host mappings go at once), and nothing is left after `recover()`.
//!
//! The tests of this file share one process-wide descriptor limit and count the process's
//! descriptors: they run one at a time.

#[path = "support/fds.rs"]
mod fds;
use fds::{fds_back_to, limit_fds, open_fds};

use std::sync::Mutex;
use std::time::Duration;

use hexrpc_bench::{Bench, BenchConfig, FdlistPolicy, Snapshot};
use hexrpc_bsp::{Board, MapLookup};
use hexrpc_hal::Health;
use hexrpc_scenarios::catalogue::{self, image, ADD_OR_LATE, ADD_U8};
use hexrpc_scenarios::stack::start as start_rig;
use hexrpc_scenarios::stack::*;

/// systemd's default soft limit, which the red-team's service ran under.
const FD_LIMIT: u64 = 1024;
const CYCLES: u32 = 10_000;
const CACHED_LIB: &str = "churn_cached";

hexrpc_bench::on_both_kernels!(
    ten_thousand_alloc_launch_free_cycles_within_1024_descriptors,
    leases_dropped_while_recovery_is_needed_are_not_leaked
);

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn bench_for(board: &'static Board) -> Bench {
    // On Linux's own driver every call makes a handle map that only the fdlist or the file's
    // release frees (fastrpc_create_maps → fastrpc_map_attach for handles): the DSP lists every
    // handle it did not keep mapped, as the soak assumes (docs/bench.md). The models keep
    // their default (nothing listed).
    let fdlist = if *board == hexrpc_bsp::BENCH_LINUX { FdlistPolicy::EveryHandle } else { FdlistPolicy::None };
    let bench = Bench::with_config(BenchConfig { fdlist, ..BenchConfig::for_board(board) });
    catalogue::register(&bench, &ADD_U8);
    bench.register_library(CACHED_LIB, ADD_OR_LATE.table_model().with_map_cache());
    bench
}

fn ten_thousand_alloc_launch_free_cycles_within_1024_descriptors(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    limit_fds(FD_LIMIT);
    let bench = bench_for(board);
    let (start, fds_start) = (bench.snapshot(), open_fds());
    let (mut most_fds, replacements, generation);
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        most_fds = open_fds();
        for cycle in 0..CYCLES {
            let mut lease = rig.session().alloc(4096).unwrap_or_else(|e| panic!("{}: alloc at cycle {cycle}: {e}", board.name));
            lease.fill(0, 16, cycle as u8).unwrap();
            let (a, b) = (lease.view(0, 16).unwrap(), lease.view(2048, 16).unwrap());
            launch_add_u8(&lib, &a, &b, 1, None).unwrap_or_else(|e| panic!("{}: launch at cycle {cycle}: {e}", board.name));
            if cycle % 97 == 0 {
                let mut got = [0u8; 16];
                b.read(&mut got).unwrap();
                assert_eq!(got, [(cycle as u8).wrapping_add(1); 16], "{}: cycle {cycle}", board.name);
                most_fds = most_fds.max(open_fds());
            }
            let _ = (a, b);
            drop(lease);
        }
        most_fds = most_fds.max(open_fds());
        replacements = rig.session().replacements();
        generation = rig.session().generation();
        assert!(matches!(rig.session().health(), Health::Healthy { .. }), "{}: one healthy session", board.name);
        let (kept, quarantined) = rig.session().kept_counts();
        eprintln!(
            "{}: {CYCLES} alloc/launch/free cycles (bench, simulated): most descriptors open {most_fds} (limit {FD_LIMIT}, {fds_start} \
             before the session), {kept} kept at the end, {quarantined} quarantined, {replacements} channel replacements, \
             generation {generation}",
            board.name
        );
        drop(lib);
    }
    let end: Snapshot = back_to(&bench, &start);
    assert_eq!(end, start, "{}: bench resources after the session", board.name);
    assert_eq!(fds_back_to(fds_start), fds_start, "{}: the process's descriptors after the session", board.name);
    assert!(most_fds < FD_LIMIT as usize, "{}: {most_fds} descriptors", board.name);
    let bound = u32::from(board.limits.kept_numbers);
    match (board.abi, board.map_lookup) {
        (hexrpc_bsp::KernelAbi::Upstream, MapLookup::NumberOnly) => {
            // One replacement per `kept_numbers` freed leases that went to the DSP.
            assert_eq!(replacements, CYCLES / bound, "{}", board.name);
            assert_eq!(generation, 1 + replacements, "{}", board.name);
        }
        _ => assert_eq!(replacements, 0, "{}: nothing to replace the channel for", board.name),
    }
}

fn leases_dropped_while_recovery_is_needed_are_not_leaked(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    limit_fds(FD_LIMIT);
    let bench = bench_for(board);
    let (start, fds_start) = (bench.snapshot(), open_fds());
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library_with(CACHED_LIB, image(CACHED_LIB), true).unwrap();
        assert!(lib.map_cache());
        let before = bench.snapshot();
        let leases: Vec<_> = (0..80).map(|_| rig.session().alloc(4096).unwrap()).collect();
        for l in &leases {
            let (a, b) = (l.view(0, 16).unwrap(), l.view(2048, 16).unwrap());
            launch_add_u8(&lib, &a, &b, 1, None).unwrap();
        }
        bench.restart_dsp();
        // The restart is seen by the next call.
        let probe = rig.session().alloc(4096).unwrap();
        let (a, b) = (probe.view(0, 16).unwrap(), probe.view(2048, 16).unwrap());
        assert!(launch_add_u8(&lib, &a, &b, 1, None).is_err(), "{}: the restart is seen", board.name);
        let _ = (a, b);
        drop(probe);
        assert!(!rig.session().is_healthy());
        drop(leases);
        // What the DSP may still map is the numbers: memory and host mappings went at once.
        let now = bench.snapshot();
        assert_eq!(now.host_mappings, before.host_mappings, "{}: host mappings of the dropped leases", board.name);
        rig.session().recover().unwrap();
        // Linux 6.1.192 keeps the maps of a file that saw a restart for good (Bench::kernel_leaks).
        let after = bench.settle_except_kernel_leaks(&before, Duration::from_secs(5));
        assert_eq!((after.ion_buffers, after.ion_bytes, after.host_mappings), (before.ion_buffers, before.ion_bytes, before.host_mappings));
        // Upstream the driver keeps its map of a channel's shell until close: the new channel's
        // shell is kept whole; downstream nothing.
        let shells = usize::from(board.abi == hexrpc_bsp::KernelAbi::Upstream);
        assert_eq!(rig.session().kept_counts().0, shells, "{}: only the new channel's shell is kept", board.name);
        let lease = rig.session().alloc(4096).unwrap();
        let (a, b) = (lease.view(0, 16).unwrap(), lease.view(2048, 16).unwrap());
        launch_add_u8(&lib, &a, &b, 1, None).expect("service restored");
        let _ = (a, b);
        drop(lease);
        drop(lib);
    }
    assert_eq!(back_to(&bench, &start), start, "{}: bench resources after the session", board.name);
    // The bench backs each dma-buf with a descriptor of its own; those of the buffers Linux's
    // driver keeps for good after the restart are the kernel's, not hexrpc's.
    let kernels = bench.kernel_leaks().buffers.len();
    assert_eq!(fds_back_to(fds_start + kernels), fds_start + kernels, "{}: the process's descriptors after the session", board.name);
}
