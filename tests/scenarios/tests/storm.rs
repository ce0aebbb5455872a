//! The restart storm (its own test binary, so that the process's descriptor and mapping counts
//! belong to this test alone): 60 DSP restarts 0–15 ms apart while 8 threads launch, a quarter
//! of their launches with a 1 ms deadline.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hexrpc_bench::measure::ProcessFootprint;
use hexrpc_bench::Bench;
use hexrpc_hal::{ErrorKind, Health};
use hexrpc_scenarios::catalogue::{self, image, ADD_U8};
use hexrpc_scenarios::stack::start as start_rig;
use hexrpc_scenarios::stack::*;

const WAIT: Duration = Duration::from_secs(5);

/// Launches until one succeeds, recovering in between; panics if recovery ever fails.
fn launch_recovering(rig: &Rig, lib: &hexrpc_hal::Library<'_, Bench>, a: &hexrpc_hal::BufferView<'_>, b: &hexrpc_hal::BufferView<'_>) {
    let end = Instant::now() + WAIT;
    loop {
        match launch_add_u8(lib, a, b, 1, None) {
            Ok(_) => return,
            Err(e) if e.kind() == ErrorKind::Recoverable => rig.session().recover().expect("recovery"),
            Err(e) => panic!("launch: {e}"),
        }
        assert!(Instant::now() < end, "no successful launch");
    }
}

/// What one storm counted.
struct Storm {
    launches: u64,
    recoverable: u64,
    /// Launches with a 1 ms deadline, and those that timed out.
    deadlines: u64,
    timeouts: u64,
    /// Timeouts whose call was never sent (the deadline passed waiting for a recovery).
    unsent: u64,
    generation: u32,
}

/// One storm: `restarts` DSP restarts 0–15 ms apart while 8 threads launch on one served
/// session, every fourth launch with a 1 ms deadline; afterwards every thread's next launches
/// succeed.
fn storm(bench: &Bench, restarts: u32) -> Storm {
    let (deadlines, timeouts) = (AtomicU64::new(0), AtomicU64::new(0));
    let launches = AtomicU64::new(0);
    let recoveries = AtomicU64::new(0);
    let rig = start_rig(bench).unwrap();
    let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
    let storming = AtomicBool::new(true);
    let failed_seen = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let (rig, lib, storming, launches, recoveries, failed_seen) = (&rig, &lib, &storming, &launches, &recoveries, &failed_seen);
            let (deadlines, timeouts) = (&deadlines, &timeouts);
            s.spawn(move || {
                let mut lease = rig.session().alloc(8192).unwrap();
                lease.write_at(0, &[t; 64]).unwrap();
                let (a, b) = (lease.view(0, 64).unwrap(), lease.view(4096, 64).unwrap());
                let mut n = 0u32;
                while storming.load(Ordering::Acquire) {
                    n = n.wrapping_add(1);
                    let deadline = (n % 4 == u32::from(t) % 4).then_some(Duration::from_millis(1));
                    if deadline.is_some() {
                        deadlines.fetch_add(1, Ordering::Relaxed);
                    }
                    match launch_add_u8(lib, &a, &b, 1, deadline) {
                        Ok(_) => {
                            launches.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.cause == hexrpc_hal::Cause::Timeout => {
                            // Unsent, or abandoned (then the session needs recovery).
                            timeouts.fetch_add(1, Ordering::Relaxed);
                            if !rig.session().is_healthy() {
                                recoveries.fetch_add(1, Ordering::Relaxed);
                                if let Err(e) = rig.session().recover() {
                                    failed_seen.store(true, Ordering::Release);
                                    panic!("thread {t}: recovery failed during the storm: {e}");
                                }
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::Recoverable => {
                            recoveries.fetch_add(1, Ordering::Relaxed);
                            if let Err(e) = rig.session().recover() {
                                failed_seen.store(true, Ordering::Release);
                                panic!("thread {t}: recovery failed during the storm: {e}");
                            }
                        }
                        Err(e) => panic!("thread {t}: launch failed with a non-recoverable error: {e}"),
                    }
                    if matches!(rig.session().health(), Health::Failed(_)) {
                        failed_seen.store(true, Ordering::Release);
                    }
                }
                // After the storm: this thread's next launches succeed (after at most one
                // recovery of what the last restart broke).
                launch_recovering(rig, lib, &a, &b);
                for _ in 0..5 {
                    launch_add_u8(lib, &a, &b, 1, None).expect("launch after the storm");
                    let mut got = [0u8; 64];
                    b.read(&mut got).unwrap();
                    assert_eq!(got, [t.wrapping_add(1); 64]);
                }
            });
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..restarts {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            std::thread::sleep(Duration::from_micros(x % 15_001));
            bench.restart_dsp();
        }
        storming.store(false, Ordering::Release);
    });
    assert!(!failed_seen.load(Ordering::Acquire), "the session reached Failed");
    assert!(rig.session().is_healthy());
    let generation = rig.session().generation();
    let unsent = rig.session().deadlines_unsent();
    assert_eq!(bench.counts().stray_answers, 0);
    assert!(bench.munmap_log().iter().all(|m| !m.went_to_another_channel()), "{:?}", bench.munmap_log());
    drop(lib);
    drop(rig);
    Storm {
        launches: launches.into_inner(),
        recoverable: recoveries.into_inner(),
        deadlines: deadlines.into_inner(),
        timeouts: timeouts.into_inner(),
        unsent,
        generation,
    }
}

/// One `#[test]` for both bench kernels, one after the other: the process footprint it checks
/// must belong to one storm at a time.
#[test]
fn restart_storm_under_8_launching_threads_never_fails_the_session() {
    for board in hexrpc_bench::KERNELS {
        storm_on(board);
    }
}

fn storm_on(board: &'static hexrpc_bsp::Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    // A short storm first: thread stacks and malloc arenas of 8 threads stay cached by the C
    // library afterwards, so the process's mapping baseline is taken after it.
    storm(&bench, 3);
    assert_eq!(back_to(&bench, &start), start);
    let before = ProcessFootprint::settled(Duration::from_secs(2));
    let kernel_before = kernel_mark(&bench);
    let Storm { launches, recoverable, deadlines, timeouts, unsent, generation } = storm(&bench, 60);
    // One recovery per restart at most; a further one only for a call really abandoned at its
    // deadline (sent, then interrupted), never for one that waited for a recovery.
    let recoveries = generation - 1;
    let abandoned = timeouts - unsent;
    assert!(
        u64::from(recoveries) <= 60 + abandoned,
        "{}: {recoveries} recoveries for 60 restarts and {abandoned} abandoned calls",
        board.name
    );
    assert!(generation > 2, "{}: the restarts were seen: generation {generation}", board.name);
    assert_eq!(back_to(&bench, &start), start, "{}: bench accounting back to the start", board.name);
    assert_eq!(bench.ledger_mismatches(), 0, "{:?}", bench.ledger());
    let after = ProcessFootprint::settled(Duration::from_secs(2));
    // What the simulated kernel itself added (Linux's own driver keeps a file for good at every
    // restart: its buffers' memfds and mappings, its coherent memory) is not hexrpc's.
    let k = kernel_mark(&bench).growth_since(&kernel_before);
    // No growth is no leak; a descriptor of the warm-up that closed late may make it shrink.
    assert!(after.fds <= before.fds + k.fds, "{}: process descriptors {} -> {} ({k:?})", board.name, before.fds, after.fds);
    assert_eq!(after.buffer_maps, before.buffer_maps + k.buffer_maps, "{}: buffer mappings (leases, DSP-side maps; {k:?})", board.name);
    // Anonymous mappings (thread stacks, malloc arenas) are the C library's caches: bounded.
    assert!(after.maps <= before.maps + 16 + k.maps, "{}: process mappings {} -> {} ({k:?})", board.name, before.maps, after.maps);
    eprintln!(
        "storm on {} (bench, simulated): 60 restarts, {launches} launches, {recoverable} recoverable errors, {deadlines} launches \
         with a 1 ms deadline ({timeouts} timed out: {unsent} unsent, {abandoned} abandoned), {recoveries} recoveries ({:.2} per \
         restart), generation {generation}; {before:?} -> {after:?}",
        board.name,
        f64::from(recoveries) / 60.0
    );
}
