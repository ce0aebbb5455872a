//! The FastRPC kernels' rules the whole stack must obey (the stricter bench: stale handle maps
//! hand the DSP the map's buffer, no fdlist by default, one DSP process per identity, a release
//! on close that waits for the DSP):
//!
//! * a lease's fd number is never reused while a driver map of it may remain: after a successful
//!   launch, a failed one, a batch, a deadline and a recovery, a new lease (downstream: under the
//!   very same number) is seen by the DSP with its own bytes, and at the end the driver's maps
//!   and the heap are back to their start;
//! * a kernel abandoned at its deadline that writes later: its leases are refused until its DSP
//!   process is released, and no other lease ever sees those bytes;
//! * apps_mem `request_map64` works on a kernel that does not write `vaddrout` back;
//! * two sessions in one process: both work (downstream: the session bit) or the second is
//!   refused by name (upstream: one identity per process);
//! * `recover()` and drop return within the board's budget when the DSP never answers the exit
//!   call (upstream).

use std::time::{Duration, Instant};

use hexrpc_bench::{wire, Bench, BenchConfig, CallKind, DriverMapKind, DspCallKind, Fault, FaultTarget, LedgerEvent, ReverseRequest};
use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::{adsprpc, listener, Scalars};
use hexrpc_hal::internal::ListenerPlumbing;
use hexrpc_hal::{BufferView, Cause, ErrorKind, HalError, Lease, Library};
use hexrpc_runtime::launch::{AbiVersion, Batch, BufferRef, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::Error as RuntimeError;
use hexrpc_scenarios::catalogue::{image, ADD_OR_LATE, LATE_BYTE, LATE_MS};
use hexrpc_scenarios::stack::{back_to, start as start_rig, Rig};

const WAIT: Duration = Duration::from_secs(5);

/// The tests of this file, one at a time: they assert which fd numbers the process hands out
/// (the lowest free one), and a test running beside them would take those numbers first.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
const LIB: &str = "rules_kernel";
/// The same kernel behind an entry with the map cache (opened with it).
const LIB_CACHED: &str = "rules_kernel_cached";
const SIG: &str = "buf,buf,u32";

hexrpc_bench::on_both_kernels!(
    a_reused_number_after_a_successful_launch_names_the_new_lease,
    a_reused_number_after_a_failed_launch_names_the_new_lease,
    a_reused_number_after_a_batch_names_the_new_lease,
    a_reused_number_after_a_deadline_names_the_new_lease,
    a_reused_number_after_a_recovery_names_the_new_lease,
    a_reused_number_after_a_cached_launch_names_the_new_lease,
    a_reused_number_after_a_cached_batch_names_the_new_lease,
    a_reused_number_after_a_cached_launch_and_a_deadline_names_the_new_lease,
    a_reused_number_after_a_cached_launch_and_a_recovery_names_the_new_lease,
    a_host_that_never_releases_a_cached_mapping_is_caught_by_the_bench,
    a_dropped_lease_is_released_only_in_the_libraries_it_went_to,
    an_abandoned_kernel_writing_late_never_reaches_another_lease,
    apps_mem_request_map64_works_without_vaddrout,
    two_sessions_in_one_process_both_work_or_the_second_is_refused_by_name,
    recover_and_drop_return_within_the_budget_when_the_dsp_never_answers_the_exit,
    concurrent_session_starts_take_distinct_identities_and_leave_nothing_behind,
    concurrent_recoveries_after_one_restart_leave_nothing_behind,
);

/// The downstream bench (the comma three's driver, modelled) with a drain bound of 8
/// `MUNMAP_FD`s a channel.
static SHORT_DRAIN: Board = Board { limits: hexrpc_bsp::Limits { munmap_fd_drain: 8, ..hexrpc_bsp::BENCH.limits }, ..hexrpc_bsp::BENCH };

#[test]
fn a_drain_cut_short_keeps_the_number_on_the_downstream_bench() {
    a_drain_cut_short_keeps_the_number(&SHORT_DRAIN);
}

/// Downstream, every call that carries a lease leaves one handle reference in the driver (R1: no
/// fdlist from this DSP), and a dropped lease drains them with `MUNMAP_FD`, at most
/// `Limits::munmap_fd_drain` a channel. With more launches than that, the drain stops with maps
/// left: the number must then be kept until the channel closes, never closed, or the next lease
/// to get it (R8: lowest free number) is read by the DSP through the old map, with the old
/// lease's bytes (what closing the number at the bound did).
fn a_drain_cut_short_keeps_the_number(board: &'static Board) {
    assert_eq!(board.abi, KernelAbi::DownstreamMsm);
    // At the end the channel's close frees what the driver kept of a and closes the kept number.
    with_served(board, |bench, rig, lib, out| {
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 10).unwrap();
        let a_fd = a.fd();
        let launches = board.limits.munmap_fd_drain * 2 + 3;
        for _ in 0..launches {
            launch(lib, &a.whole(), &out.whole(), 1, None).unwrap();
        }
        assert!(bytes(out).iter().all(|&b| b == 11));
        assert!(handle_maps(bench, rig).iter().any(|m| m.fd == a_fd.0), "a's handle map is in the driver");
        let munmap_fds = bench.counts().of(CallKind::RpcMunmapFd);
        drop(a);
        // Carried more often than the bound: no drain that would stop short anyway.
        assert_eq!(bench.counts().of(CallKind::RpcMunmapFd) - munmap_fds, 0, "MUNMAP_FDs made by a drop past the bound");
        let mut b = new_lease_seeking(rig, a_fd);
        b.fill(0, 4096, 20).unwrap();
        launch(lib, &b.whole(), &out.whole(), 1, None).unwrap();
        assert!(
            bytes(out).iter().all(|&x| x == 21),
            "the DSP read another buffer than b's (b has a's number: {}): {:?}",
            b.fd() == a_fd,
            &bytes(out)[..4]
        );
        assert_ne!(b.fd(), a_fd, "a's number, with handle maps of it left in the driver, was handed out again");
        assert_eq!(rig.session().kept_counts().0, 1, "a's number is kept for the channel");
    });
}

/// A served session on a fresh bench of `board`, the rules' library open and a 4 KiB output
/// lease: `body` runs with them; once they are dropped and the session closed, the bench must be
/// back at its start and the driver's lists empty.
fn with_served(board: &'static Board, body: impl FnOnce(&Bench, &Rig, &Library<'_, Bench>, &Lease<'_, Bench>)) {
    let _serial = serial();
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let out = rig.session().alloc(4096).unwrap();
        body(&bench, &rig, &lib, &out);
    }
    assert_eq!(back_to(&bench, &start), start);
    assert_eq!(bench.all_driver_maps(), vec![]);
}

#[test]
fn a_drop_makes_one_munmap_fd_per_call_that_carried_the_lease_and_one_more_on_the_downstream_bench() {
    with_served(&hexrpc_bsp::BENCH, |bench, rig, lib, out| {
        for launches in [1u64, 5, 40] {
            let mut a = rig.session().alloc(4096).unwrap();
            a.fill(0, 4096, 3).unwrap();
            for _ in 0..launches {
                launch(lib, &a.whole(), &out.whole(), 1, None).unwrap();
            }
            // A batch run carries it once, whatever number of records name it.
            let sigs = [Signature::parse(SIG).unwrap()];
            let mut batch = Batch::new(&sigs).unwrap();
            let (av, ov) = (a.whole(), out.whole());
            for _ in 0..3 {
                batch.push(0, &[BufferRef::of(&av), BufferRef::of(&ov)], &[Scalar::U32(1)]).unwrap();
            }
            assert_eq!(batch.run(lib).unwrap().launches, 3);
            let carried = launches + 1;
            let refs: u32 = handle_maps(bench, rig).iter().filter(|m| m.fd == a.fd().0).map(|m| m.refs).sum();
            assert_eq!(u64::from(refs), carried, "one handle reference per call that carried a");
            let before = bench.counts().of(CallKind::RpcMunmapFd);
            drop(a);
            assert_eq!(
                bench.counts().of(CallKind::RpcMunmapFd) - before,
                carried + 1,
                "MUNMAP_FDs for {carried} calls: one per reference and one refused"
            );
            assert_eq!(rig.session().kept_counts().0, 0, "the number is closed, not kept");
        }
    });
}

/// A handle reference of a lease's number that none of the stack's calls took (planted by the
/// bench: a driver or another user of the file holding the map): the drain drops the references
/// its calls took, then the last MUNMAP_FD is not refused, so a map may be left. The number is
/// kept until the channel closes, and the reference the stack did not take is left alone (one
/// call beyond the count at most). Before the count, the drain went on until refused: it
/// dropped the other holder's reference and closed the number.
#[test]
fn a_reference_nobody_counted_keeps_the_number_on_the_downstream_bench() {
    // At the end the channel's close frees the map and closes the kept number.
    with_served(&hexrpc_bsp::BENCH, |bench, rig, lib, out| {
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 3).unwrap();
        for _ in 0..4 {
            launch(lib, &a.whole(), &out.whole(), 1, None).unwrap();
        }
        let (rpc, _) = rig.session().listener_fd().expect("a channel");
        let a_fd = a.fd();
        assert!(bench.plant_handle_ref(rpc, a_fd), "a's handle map is in the driver");
        assert!(bench.plant_handle_ref(rpc, a_fd));
        let before = bench.counts().of(CallKind::RpcMunmapFd);
        drop(a);
        assert_eq!(bench.counts().of(CallKind::RpcMunmapFd) - before, 5, "four counted references and one more, not until refused");
        let left: u32 = handle_maps(bench, rig).iter().filter(|m| m.fd == a_fd.0).map(|m| m.refs).sum();
        assert_eq!(left, 1, "one of the two references nobody counted is left");
        assert_eq!(rig.session().kept_counts().0, 1, "a's number is kept for the channel");
        let b = new_lease_seeking(rig, a_fd);
        assert_ne!(b.fd(), a_fd, "a's number, with a handle map of it left in the driver, was handed out again");
    });
}

static FEW_CONTEXTS: Board = Board { limits: hexrpc_bsp::Limits { calls_in_flight: 3, ..hexrpc_bsp::BENCH.limits }, ..hexrpc_bsp::BENCH };
static FEW_CONTEXTS_UP: Board =
    Board { limits: hexrpc_bsp::Limits { calls_in_flight: 3, ..hexrpc_bsp::BENCH_UPSTREAM.limits }, ..hexrpc_bsp::BENCH_UPSTREAM };

#[test]
fn calls_past_the_sessions_share_of_call_contexts_are_refused_on_the_downstream_bench() {
    calls_past_the_sessions_share_of_call_contexts_are_refused(&FEW_CONTEXTS);
}

#[test]
fn calls_past_the_sessions_share_of_call_contexts_are_refused_on_the_upstream_bench() {
    calls_past_the_sessions_share_of_call_contexts_are_refused(&FEW_CONTEXTS_UP);
}

#[cfg(feature = "linux")]
static FEW_CONTEXTS_LINUX: Board =
    Board { limits: hexrpc_bsp::Limits { calls_in_flight: 3, ..hexrpc_bsp::BENCH_LINUX.limits }, ..hexrpc_bsp::BENCH_LINUX };

/// On Linux's own driver (whose contexts the bench does not count: the share is what is shown).
#[cfg(feature = "linux")]
#[test]
fn calls_past_the_sessions_share_of_call_contexts_are_refused_on_linux_fastrpc() {
    calls_past_the_sessions_share_of_call_contexts_are_refused(&FEW_CONTEXTS_LINUX);
}

/// R22: every call in the driver holds one of its call contexts (256 for every process on the
/// kernel), an abandoned one until its channel is released. A session keeps within its share
/// (`Limits::calls_in_flight`, lowered to 3 here): eight slow calls at once get three contexts
/// (and the listener's own call one more), the others are refused before they are sent with an
/// error naming the budget; an abandoned call's context counts until `recover()` releases its
/// channel. Before the share, all eight went to the driver (9 contexts at once).
fn calls_past_the_sessions_share_of_call_contexts_are_refused(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    let start = bench.snapshot();
    let limit = board.limits.calls_in_flight;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let a = rig.session().alloc(4096).unwrap();
        let outs: Vec<_> = (0..8).map(|_| rig.session().alloc(4096).unwrap()).collect();
        let gate = std::sync::Barrier::new(outs.len());
        let results: Vec<Result<(), HalError>> = std::thread::scope(|s| {
            let threads: Vec<_> = outs
                .iter()
                .map(|out| {
                    let (lib, a, gate) = (&lib, &a, &gate);
                    s.spawn(move || {
                        gate.wait();
                        launch(lib, &a.whole(), &out.whole(), LATE_MS, None)
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let refused: Vec<&HalError> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        for e in &refused {
            assert_eq!(e.cause, Cause::Budget(hexrpc_hal::Budget::CallContexts { limit, parked: 0 }), "{e}");
            assert_eq!(e.kind(), ErrorKind::Usage);
            assert!(e.to_string().contains("256 call contexts"), "{e}");
        }
        assert!(!refused.is_empty(), "eight calls at once, a share of {limit}: none refused");
        assert!(results.len() - refused.len() >= usize::from(limit), "{} of 8 ran", results.len() - refused.len());
        // The listener's call holds one more.
        assert!(bench.most_contexts() <= usize::from(limit) + 1, "{} contexts at once in the driver", bench.most_contexts());
        // Downstream every call holds a copy buffer, which the file keeps for good once the call
        // is done: as many as calls ran at once (before the share: 9).
        if board.abi == KernelAbi::DownstreamMsm {
            let (rpc, _) = rig.session().listener_fd().expect("a channel");
            let (count, _) = bench.copy_buffers(rpc).unwrap();
            assert!(count <= usize::from(limit) + 1, "{count} copy buffers kept by the file");
        }
        assert_eq!(rig.session().call_contexts(), (0, 0), "every context given back");
        // An abandoned call keeps its context until its channel is released.
        let e = launch(&lib, &a.whole(), &outs[0].whole(), LATE_MS, Some(Duration::from_millis(50))).unwrap_err();
        assert_eq!(e.cause, Cause::Timeout, "{e}");
        assert_eq!(rig.session().call_contexts(), (1, 1), "the abandoned call's context is held");
        rig.session().recover().unwrap();
        let end = Instant::now() + WAIT;
        while rig.session().call_contexts() != (0, 0) {
            assert!(Instant::now() < end, "the abandoned call's context still counted after {WAIT:?}: {:?}", rig.session().call_contexts());
            std::thread::sleep(Duration::from_millis(10));
            let _ = a.check();
        }
        usable_again(&outs[0]);
        launch(&lib, &a.whole(), &outs[0].whole(), 1, None).unwrap();
        drop((outs, a, lib));
    }
    assert_eq!(back_to(&bench, &start), start);
}

static FEW_CALLERS: Board = Board { limits: hexrpc_bsp::Limits { perf_records: 6, ..hexrpc_bsp::BENCH.limits }, ..hexrpc_bsp::BENCH };

/// R24: the comma three's driver makes a record for every thread that invokes on a file and
/// frees them only with the file. A service that calls from ever new threads (twenty here, one
/// after another) would grow them without bound; past `Limits::perf_records` (lowered to 6)
/// distinct callers the session replaces its channel, so no file holds more than the bound and
/// the session's own threads (this one, which started it, and the listener's). Before the
/// bound, one file held 22 records.
#[test]
fn threads_past_the_perf_record_bound_get_a_new_channel_on_the_downstream_bench() {
    let _serial = serial();
    let bench = bench_for(&FEW_CALLERS);
    let start = bench.snapshot();
    let bound = usize::from(FEW_CALLERS.limits.perf_records);
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let (a, out) = (rig.session().alloc(4096).unwrap(), rig.session().alloc(4096).unwrap());
        for _ in 0..20 {
            std::thread::scope(|s| s.spawn(|| launch(&lib, &a.whole(), &out.whole(), 1, None)).join().unwrap()).unwrap();
        }
        // The thread that crosses the bound (the 7th) replaces the channel once its call is done.
        assert!(bench.most_perf_records() <= bound + 3, "{} perf records on one file", bench.most_perf_records());
        assert_eq!(rig.session().replacements(), 2, "20 new threads, a bound of {bound}: two new channels");
        assert!(rig.session().callers() <= 20 - 2 * (bound as u32 + 1));
        launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
        drop((a, out, lib));
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// A comma three whose SMMU space is 16 MiB instead of 0x78000000 bytes, and the session's
/// lease budget scaled down with it (the space less 8 MiB for the init memory and the rest), so
/// that a test reaches them with a few leases; the MUNMAP_FD bound is 8, so that a lease
/// carried more often is kept.
const SMALL_SPACE: u64 = 16 << 20;
static SMALL_IOVA: Board = Board {
    limits: hexrpc_bsp::Limits { lease_iova: SMALL_SPACE - (8 << 20), munmap_fd_drain: 8, ..hexrpc_bsp::BENCH.limits },
    ..hexrpc_bsp::BENCH
};

/// R23: every dma-buf the comma three's driver maps for a file takes its whole length of the
/// file's SMMU space (0x78000000 bytes, `fastrpc_cb_probe`); past it a handle's map fails and so
/// does the call. The session keeps its leases, those kept for the channel included, within
/// `Limits::lease_iova`: an allocation past it is refused with an error naming the budget, the
/// driver never refuses a map, every launch of an allocated lease works, a dropped lease gives
/// its bytes back, and a kept number holds them until the channel closes (`recover()`). Before
/// the budget, the ninth 1 MiB lease's launch failed in the driver (-1, `EPERM`).
#[test]
fn leases_past_the_sessions_iova_budget_are_refused_on_the_downstream_bench() {
    let _serial = serial();
    let bench = Bench::with_config(BenchConfig { session_iova: SMALL_SPACE, ..BenchConfig::for_board(&SMALL_IOVA) });
    bench.register_library(LIB, ADD_OR_LATE.table_model());
    let start = bench.snapshot();
    let limit = SMALL_IOVA.limits.lease_iova;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let out = rig.session().alloc(4096).unwrap();
        let (rpc, _) = rig.session().listener_fd().expect("a channel");
        let mut leases = Vec::new();
        let refused = loop {
            match rig.session().alloc(1 << 20) {
                Ok(mut l) => {
                    l.fill(0, 4096, 5).unwrap();
                    launch(&lib, &l.whole(), &out.whole(), 1, None).unwrap_or_else(|e| panic!("lease {}: {e}", leases.len() + 1));
                    leases.push(l);
                }
                Err(e) => break e,
            }
            assert!(leases.len() < 64, "no budget: {} leases of 1 MiB", leases.len());
        };
        assert_eq!(
            refused.cause,
            Cause::Budget(hexrpc_hal::Budget::Iova { limit, held: rig.session().lease_iova(), kept: 0, requested: 1 << 20 }),
            "{refused}"
        );
        assert!(refused.to_string().contains("IOVA budget"), "{refused}");
        assert_eq!(refused.kind(), ErrorKind::Usage);
        assert_eq!(bench.counts().iova_refusals, 0, "the driver refused a map");
        assert!(bench.iova_in_use(rpc).unwrap() <= SMALL_SPACE);
        // A dropped lease gives its bytes back.
        drop(leases.pop());
        let again = rig.session().alloc(1 << 20).unwrap();
        // A lease carried past the MUNMAP_FD bound is kept, and so are its bytes, until its
        // channel closes.
        for _ in 0..=SMALL_IOVA.limits.munmap_fd_drain {
            launch(&lib, &again.whole(), &out.whole(), 1, None).unwrap();
        }
        drop(again);
        assert_eq!(rig.session().kept_counts().0, 1);
        let e = rig.session().alloc(1 << 20).unwrap_err();
        assert!(matches!(e.cause, Cause::Budget(hexrpc_hal::Budget::Iova { kept, .. }) if kept == 1 << 20), "{e}");
        // A recovery closes the channel (a healthy session's `recover()` does nothing).
        bench.restart_dsp();
        let e = launch(&lib, &leases[0].whole(), &out.whole(), 1, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Recoverable, "{e}");
        rig.session().recover().unwrap();
        let end = Instant::now() + WAIT;
        let back = loop {
            match rig.session().alloc(1 << 20) {
                Ok(l) => break l,
                Err(e) if Instant::now() < end => {
                    assert!(matches!(e.cause, Cause::Budget(_)), "{e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("the kept lease's bytes still held after {WAIT:?}: {e}"),
            }
        };
        launch(&lib, &back.whole(), &out.whole(), 1, None).unwrap();
        assert_eq!(bench.counts().iova_refusals, 0, "the driver refused a map");
        drop((back, leases, out, lib));
        assert_eq!(rig.session().lease_iova(), 0, "every byte given back");
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// The bench's model of R23 on its own: past the file's space a handle's map fails, and the
/// call with it (what the budget above keeps the stack from meeting).
#[test]
fn the_downstream_bench_refuses_a_handle_map_past_the_files_iova_space() {
    let _serial = serial();
    let bench = Bench::with_config(BenchConfig { session_iova: SMALL_SPACE, ..BenchConfig::for_board(&hexrpc_bsp::BENCH) });
    bench.register_library(LIB, ADD_OR_LATE.table_model());
    let rig = start_rig(&bench).unwrap();
    let lib = rig.open_library(LIB, image(LIB)).unwrap();
    let out = rig.session().alloc(4096).unwrap();
    let (rpc, _) = rig.session().listener_fd().expect("a channel");
    let mut leases = Vec::new();
    let e = loop {
        let l = rig.session().alloc(1 << 20).unwrap();
        if let Err(e) = launch(&lib, &l.whole(), &out.whole(), 1, None) {
            break e;
        }
        leases.push(l);
        assert!(leases.len() < 64, "no IOVA space in the model");
    };
    assert_eq!(e.cause, Cause::Os(hexrpc_drivers::Errno::EPERM), "{e}");
    assert_eq!(bench.counts().iova_refusals, 1);
    let used = bench.iova_in_use(rpc).unwrap();
    assert!(used <= SMALL_SPACE && used + (1 << 20) > SMALL_SPACE, "{used} bytes in use");
}

fn bench_for(board: &'static Board) -> Bench {
    let bench = Bench::for_board(board);
    // A kernel table of one: single launches and batches.
    bench.register_library(LIB, ADD_OR_LATE.table_model());
    bench.register_library(LIB_CACHED, ADD_OR_LATE.table_model().with_map_cache());
    bench
}

/// `HAP_mmap`s in the ledger.
fn maps(bench: &Bench) -> usize {
    bench.ledger().iter().filter(|e| matches!(e.event, LedgerEvent::Map { .. })).count()
}

fn launch(
    lib: &Library<'_, Bench>,
    input: &BufferView<'_>,
    out: &BufferView<'_>,
    k: u32,
    deadline: Option<Duration>,
) -> Result<(), HalError> {
    hexrpc_scenarios::stack::launch_buf_buf_u32(lib, input, out, k, deadline).map(drop)
}

fn bytes(lease: &Lease<'_, Bench>) -> Vec<u8> {
    let mut v = vec![0u8; lease.len()];
    lease.read_at(0, &mut v).unwrap();
    v
}

/// Waits until `lease` is no longer quarantined (its DSP process was released).
fn usable_again(lease: &Lease<'_, Bench>) {
    let end = Instant::now() + WAIT;
    while let Err(e) = lease.check() {
        assert_eq!(e.cause, Cause::Quarantined, "{e}");
        assert!(Instant::now() < end, "lease still quarantined after {WAIT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The handle maps of the session's current channel.
fn handle_maps(bench: &Bench, rig: &Rig) -> Vec<hexrpc_bench::DriverMap> {
    let (rpc, _) = rig.session().listener_fd().expect("a channel");
    bench.driver_maps(rpc).unwrap_or_default().into_iter().filter(|m| m.kind == DriverMapKind::Handle).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Before {
    Success,
    Failure,
    Batch,
    Deadline,
    Recovery,
}

fn a_reused_number_after(board: &'static Board, before: Before) {
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let out = rig.session().alloc(4096).unwrap();
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 10).unwrap();
        let a_fd = a.fd();
        let a_buffer = bench.buffer_of(a_fd).expect("a's buffer");
        match before {
            Before::Success => {
                launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
                assert!(bytes(&out).iter().all(|&b| b == 11));
            }
            Before::Failure => {
                bench.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Returned(0x0D));
                let e = launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Remote, "{e}");
            }
            Before::Batch => {
                let sigs = [Signature::parse(SIG).unwrap()];
                let mut batch = Batch::new(&sigs).unwrap();
                let (av, ov) = (a.whole(), out.whole());
                for _ in 0..3 {
                    batch.push(0, &[BufferRef::of(&av), BufferRef::of(&ov)], &[Scalar::U32(2)]).unwrap();
                }
                assert_eq!(batch.run(&lib).unwrap().launches, 3);
                assert!(bytes(&out).iter().all(|&b| b == 12));
            }
            Before::Deadline => {
                let e = launch(&lib, &a.whole(), &out.whole(), LATE_MS, Some(Duration::from_millis(50))).unwrap_err();
                assert_eq!(e.cause, Cause::Timeout, "{e}");
                rig.session().recover().unwrap();
                // Both leases come back once the old DSP process is released.
                usable_again(&a);
                usable_again(&out);
            }
            Before::Recovery => {
                launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
                bench.restart_dsp();
                let e = launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Recoverable, "{e}");
                rig.session().recover().unwrap();
                launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
            }
        }
        drop(a);
        let mut b = new_lease_seeking(&rig, a_fd);
        let by_buffer = board.abi == KernelAbi::Upstream && board.map_lookup == hexrpc_bsp::MapLookup::NumberAndBuffer;
        match board.abi {
            // MUNMAP_FD dropped every map of the number: it is free and clean.
            KernelAbi::DownstreamMsm => assert_eq!(b.fd(), a_fd, "{before:?}: a's number is handed out again"),
            // The lookup checks the dma-buf (Linux 6.1.192): the number is free at once, and the
            // old map (which pins a's buffer) is never found through it.
            KernelAbi::Upstream if by_buffer => assert_eq!(b.fd(), a_fd, "{before:?}: a's number is handed out again"),
            // No unmap by fd: a's number stays taken until the channel that may map it closes.
            KernelAbi::Upstream => assert_ne!(b.fd(), a_fd, "{before:?}: a's number is still taken"),
        }
        b.fill(0, 4096, 20).unwrap();
        launch(&lib, &b.whole(), &out.whole(), 1, None).unwrap();
        assert!(bytes(&out).iter().all(|&x| x == 21), "{before:?}: the DSP read b's bytes");
        let b_buffer = bench.buffer_of(b.fd());
        assert_ne!(b_buffer, Some(a_buffer));
        for m in handle_maps(&bench, &rig).iter().filter(|m| m.fd == b.fd().0) {
            if by_buffer && m.buffer == Some(a_buffer) {
                // a's own map, kept until the fdlist or the close; the lookup skips it.
                continue;
            }
            assert_eq!(m.buffer, b_buffer, "{before:?}: the driver's map of b's number pins b's buffer");
        }
        drop(b);
        drop(out);
        if board.abi == KernelAbi::DownstreamMsm {
            assert_eq!(handle_maps(&bench, &rig), vec![], "{before:?}: every handle map dropped with its lease");
        }
        drop(lib);
    }
    assert_eq!(back_to(&bench, &start), start, "{before:?}: heap, maps and fds back to their start");
    assert_eq!(bench.all_driver_maps(), vec![], "{before:?}");
}

fn a_reused_number_after_a_successful_launch_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after(board, Before::Success);
}

fn a_reused_number_after_a_failed_launch_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after(board, Before::Failure);
}

fn a_reused_number_after_a_batch_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after(board, Before::Batch);
}

fn a_reused_number_after_a_deadline_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after(board, Before::Deadline);
}

fn a_reused_number_after_a_recovery_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after(board, Before::Recovery);
}

fn a_reused_number_after_a_cached_launch_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after_cached(board, Before::Success);
}

fn a_reused_number_after_a_cached_batch_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after_cached(board, Before::Batch);
}

fn a_reused_number_after_a_cached_launch_and_a_deadline_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after_cached(board, Before::Deadline);
}

fn a_reused_number_after_a_cached_launch_and_a_recovery_names_the_new_lease(board: &'static Board) {
    let _serial = serial();
    a_reused_number_after_cached(board, Before::Recovery);
}

/// A dropped lease's release goes to the libraries with the map cache that it went to, not to
/// every one: one call per such library, none for a lease that never went to one, and a library
/// closed since was flushed at its close (no call to it).
fn a_dropped_lease_is_released_only_in_the_libraries_it_went_to(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    bench.register_library("rules_kernel_cached_2", ADD_OR_LATE.table_model().with_map_cache());
    let rig = start_rig(&bench).unwrap();
    let one = rig.open_library_with(LIB_CACHED, image(LIB_CACHED), true).unwrap();
    let two = rig.open_library_with("rules_kernel_cached_2", image("rules_kernel_cached_2"), true).unwrap();
    let plain = rig.open_library(LIB, image(LIB)).unwrap();
    let invokes = |b: &Bench| b.counts().of(hexrpc_scenarios::stack::invoke_kind(board));
    let out = rig.session().alloc(4096).unwrap();
    for (went, want) in [(vec![&one], 1), (vec![&one, &two], 2), (vec![&plain], 0), (vec![], 0)] {
        let a = rig.session().alloc(4096).unwrap();
        for lib in &went {
            launch(lib, &a.whole(), &out.whole(), 1, None).unwrap();
        }
        let before = invokes(&bench);
        drop(a);
        assert_eq!(invokes(&bench) - before, want, "a lease that went to {} libraries", went.len());
    }
    // A library closed after the lease went to it was flushed then: no release to it later.
    let a = rig.session().alloc(4096).unwrap();
    launch(&one, &a.whole(), &out.whole(), 1, None).unwrap();
    launch(&two, &a.whole(), &out.whole(), 1, None).unwrap();
    drop(two);
    let before = invokes(&bench);
    drop(a);
    assert_eq!(invokes(&bench) - before, 1);
    drop(out);
    assert_eq!(bench.ledger_mismatches(), 0, "{:?}", bench.ledger());
}

/// The bench's map-cache rules can fail: a host that sends lease ids to a caching entry but
/// never releases them (the library opened as if it had no cache) leaves a DSP mapping behind
/// its lease's teardown, and a launch that reuses the id under the reused number is handed the
/// old lease's pages.
fn a_host_that_never_releases_a_cached_mapping_is_caught_by_the_bench(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    let rig = start_rig(&bench).unwrap();
    let lib = rig.open_library_with(LIB_CACHED, image(LIB_CACHED), false).unwrap();
    assert!(!lib.map_cache());
    let out = rig.session().alloc(4096).unwrap();
    let mut a = rig.session().alloc(4096).unwrap();
    a.fill(0, 4096, 10).unwrap();
    let (a_fd, a_id) = (a.fd(), a.lease_id());
    assert_ne!(a_id, 0);
    launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
    assert_eq!(bench.ledger_mismatches(), 0);
    drop(a);
    let outlived = |b: &Bench| b.ledger().iter().filter(|e| matches!(e.event, LedgerEvent::MappingOutlivesLease { .. })).count();
    assert!(outlived(&bench) >= 1, "the cached mapping outlived its lease's teardown: {:?}", bench.ledger());
    if board.abi == KernelAbi::DownstreamMsm {
        let mut b = rig.session().alloc(4096).unwrap();
        assert_eq!(b.fd(), a_fd);
        b.fill(0, 4096, 20).unwrap();
        // The id of the old lease under the reused number: the entry's cache hits.
        let sig = Signature::parse(SIG).unwrap();
        let (bv, ov) = (b.whole(), out.whole());
        let bufs = [BufferRef::of(&bv).with_lease_id(a_id), BufferRef::of(&ov)];
        let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(1)]).unwrap();
        lib.invoke(&mut packed.invoke_args().unwrap()).unwrap();
        assert!(
            bench.ledger().iter().any(|e| matches!(e.event, LedgerEvent::StaleMappingUsed { fd, .. } if fd == a_fd.0)),
            "{:?}",
            bench.ledger()
        );
        assert!(bytes(&out).iter().all(|&x| x == 11), "the DSP read a's pages, not b's");
    }
}

/// [`a_reused_number_after`] on a library with the map cache: the lease stays mapped on the DSP
/// across launches (a second launch maps nothing), its drop releases the mapping before the
/// number is unmapped or retired, and the DSP never reaches the new lease through the old
/// mapping (no contract violation in the ledger).
fn a_reused_number_after_cached(board: &'static Board, before: Before) {
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library_with(LIB_CACHED, image(LIB_CACHED), true).unwrap();
        assert!(lib.map_cache());
        let out = rig.session().alloc(4096).unwrap();
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 10).unwrap();
        let a_fd = a.fd();
        // Steady state: the second launch on the same leases maps nothing.
        launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
        bench.clear_ledger();
        launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
        assert_eq!(maps(&bench), 0, "{before:?}: {:?}", bench.ledger());
        assert!(bytes(&out).iter().all(|&b| b == 11));
        match before {
            Before::Success | Before::Failure => {}
            Before::Batch => {
                let sigs = [Signature::parse(SIG).unwrap()];
                let mut batch = Batch::new(&sigs).unwrap();
                let (av, ov) = (a.whole(), out.whole());
                for _ in 0..3 {
                    batch.push(0, &[BufferRef::of(&av), BufferRef::of(&ov)], &[Scalar::U32(2)]).unwrap();
                }
                assert_eq!(batch.run(&lib).unwrap().launches, 3);
                assert_eq!(maps(&bench), 0, "the batch used the mappings the launches left");
                assert!(bytes(&out).iter().all(|&b| b == 12));
            }
            Before::Deadline => {
                let e = launch(&lib, &a.whole(), &out.whole(), LATE_MS, Some(Duration::from_millis(50))).unwrap_err();
                assert_eq!(e.cause, Cause::Timeout, "{e}");
                rig.session().recover().unwrap();
                usable_again(&a);
                usable_again(&out);
            }
            Before::Recovery => {
                bench.restart_dsp();
                let e = launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Recoverable, "{e}");
                rig.session().recover().unwrap();
                launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
            }
        }
        drop(a);
        let mut spare = Vec::new();
        let mut b = rig.session().alloc(4096).unwrap();
        while b.fd() != a_fd && spare.len() < 16 {
            spare.push(b);
            b = rig.session().alloc(4096).unwrap();
        }
        if board.abi == KernelAbi::DownstreamMsm {
            assert_eq!(b.fd(), a_fd, "{before:?}: a's number is handed out again");
        }
        drop(spare);
        b.fill(0, 4096, 20).unwrap();
        bench.clear_ledger();
        launch(&lib, &b.whole(), &out.whole(), 1, None).unwrap();
        assert!(bytes(&out).iter().all(|&x| x == 21), "{before:?}: the DSP read b's bytes");
        assert!(
            bench.ledger().iter().any(|e| matches!(e.event, LedgerEvent::Map { fd, .. } if fd == b.fd().0)),
            "{before:?}: b was mapped afresh: {:?}",
            bench.ledger()
        );
        drop(b);
        drop(out);
        drop(lib);
        assert_eq!(bench.ledger_mismatches(), 0, "{before:?}: {:?}", bench.ledger());
    }
    assert_eq!(back_to(&bench, &start), start, "{before:?}: heap, maps and fds back to their start");
    assert_eq!(bench.all_driver_maps(), vec![], "{before:?}");
}

fn an_abandoned_kernel_writing_late_never_reaches_another_lease(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let mut input = rig.session().alloc(4096).unwrap();
        input.fill(0, 4096, 1).unwrap();
        let out = rig.session().alloc(4096).unwrap();
        let t0 = Instant::now();
        let e = launch(&lib, &input.whole(), &out.whole(), LATE_MS, Some(Duration::from_millis(50))).unwrap_err();
        assert_eq!(e.cause, Cause::Timeout, "{e}");
        // The caller is not held until the kernel ends (its release runs elsewhere).
        assert!(t0.elapsed() < Duration::from_millis(u64::from(LATE_MS)), "the deadline returned after {:?}", t0.elapsed());
        // The DSP still runs the kernel: both leases are refused, by name.
        let mut buf = [0u8; 16];
        assert_eq!(out.read_at(0, &mut buf).unwrap_err().cause, Cause::Quarantined);
        assert_eq!(input.read_at(0, &mut buf).unwrap_err().cause, Cause::Quarantined);
        assert_eq!(out.view(0, 16).unwrap_err().cause, Cause::Quarantined);
        assert_eq!(out.whole().read(&mut buf).unwrap_err().cause, Cause::Quarantined);
        assert_eq!(input.fill(0, 16, 3).unwrap_err().cause, Cause::Quarantined);
        assert!(out.check().unwrap_err().to_string().contains("abandoned"), "the error says why");
        // Dropped while quarantined: its memory and number are kept.
        let out_fd = out.fd();
        drop(out);
        let others: Vec<Lease<'_, Bench>> = (0..4).map(|_| rig.session().alloc(4096).unwrap()).collect();
        assert!(others.iter().all(|l| l.fd() != out_fd), "the quarantined number is still taken");
        // Past the late write.
        std::thread::sleep(Duration::from_millis(u64::from(LATE_MS) + 200).saturating_sub(t0.elapsed()));
        for l in &others {
            assert!(bytes(l).iter().all(|&b| b == 0), "no other lease sees the abandoned kernel's bytes");
        }
        rig.session().recover().unwrap();
        usable_again(&input);
        assert!(bytes(&input).iter().all(|&b| b == 1));
        let fresh: Vec<Lease<'_, Bench>> = (0..4).map(|_| rig.session().alloc(4096).unwrap()).collect();
        for l in fresh.iter().chain(&others) {
            assert!(bytes(l).iter().all(|&b| b != LATE_BYTE), "not even after the release");
        }
        // And the session works again with the given-back lease.
        let out2 = rig.session().alloc(4096).unwrap();
        launch(&lib, &input.whole(), &out2.whole(), 1, None).unwrap();
        assert!(bytes(&out2).iter().all(|&b| b == 2));
        drop((fresh, others, out2, input, lib));
    }
    assert_eq!(back_to(&bench, &start), start);
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn apps_mem_request_map64_works_without_vaddrout(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    assert!(board.abi == KernelAbi::Upstream || !bench.config().mmap_writes_vaddrout, "the comma three's kernel");
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let (fd, _) = rig.session().listener_fd().unwrap();
        let n = b"apps_mem\0";
        let req = ReverseRequest::packed(0, listener::REMOTECTL_OPEN, &[&words(&[n.len() as u32, 16]), n], &[8, 16]);
        let reply = bench.reverse_call(fd, req, WAIT).expect("remotectl open answered");
        assert_eq!(reply.result, 0);
        let h = u32::from_le_bytes(wire::unpack_reply(&reply.payload, &[8, 16]).unwrap()[0][..4].try_into().unwrap());
        let mut prim = Vec::new();
        prim.extend_from_slice(&(-1i32).to_le_bytes());
        prim.extend_from_slice(&words(&[0, adsprpc::ADSP_MMAP_ADD_PAGES, 0]));
        prim.extend_from_slice(&0u64.to_le_bytes());
        prim.extend_from_slice(&(1i64 << 20).to_le_bytes());
        let req = ReverseRequest::packed(h, Scalars::from_raw(0x0201_0100), &[&prim], &[16]);
        let reply = bench.reverse_call(fd, req, WAIT).expect("map answered");
        assert_eq!(reply.result, 0, "request_map64 of 1 MiB succeeds");
        let add_pages = bench.driver_maps(fd).unwrap().iter().filter(|m| m.kind == DriverMapKind::AddPages).count();
        assert_eq!(add_pages, 1, "the kernel made the map");
    }
    assert_eq!(back_to(&bench, &start), start, "the map goes with the channel");
}

fn two_sessions_in_one_process_both_work_or_the_second_is_refused_by_name(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let first = start_rig(&bench).unwrap();
        let lib1 = first.open_library(LIB, image(LIB)).unwrap();
        match (board.abi, start_rig(&bench)) {
            (KernelAbi::DownstreamMsm, Ok(second)) => {
                let procs = bench.dsp_processes();
                assert_eq!(procs.len(), 2);
                assert_ne!(procs[0].identity, procs[1].identity, "two identities: the process id, and with the session bit");
                let lib2 = second.open_library(LIB, image(LIB)).unwrap();
                for (rig, lib) in [(&first, &lib1), (&second, &lib2)] {
                    works(rig, lib, 5);
                }
                // A third has no identity left: refused before anything is opened (no INIT is
                // sent for an identity a channel of this process holds).
                let rpc_files = bench.snapshot().rpc_files;
                let inits = bench.counts().inits();
                match start_rig(&bench) {
                    Err(RuntimeError::Hal(e)) => assert_eq!(e.cause, Cause::IdentityInUse, "{e}"),
                    Err(e) => panic!("third session: {e}"),
                    Ok(_) => panic!("a third session got a DSP process"),
                }
                assert_eq!(bench.dsp_processes().len(), 2, "both live sessions keep their process");
                assert_eq!(bench.counts().inits(), inits, "no INIT for a held identity");
                assert_eq!(bench.snapshot().rpc_files, rpc_files, "no FastRPC file opened for it, none left open");
                drop(lib2);
            }
            (KernelAbi::Upstream, Err(RuntimeError::Hal(e))) => {
                assert_eq!(e.cause, Cause::IdentityInUse, "{e}");
                assert_eq!(bench.counts().inits(), 1, "no INIT for the identity the first session holds");
                assert!(e.to_string().contains("identit"), "{e}");
                assert_eq!(bench.dsp_processes().len(), 1, "the first session keeps its process");
            }
            (abi, Ok(_)) => panic!("{abi:?}: unexpected second session"),
            (abi, Err(e)) => panic!("{abi:?}: second session: {e}"),
        }
        // The first one still works.
        works(&first, &lib1, 7);
        drop(lib1);
    }
    // Everything is given back: no FastRPC file was refused, none is left open.
    assert_eq!(back_to(&bench, &start), start);
}

fn recover_and_drop_return_within_the_budget_when_the_dsp_never_answers_the_exit(board: &'static Board) {
    let _serial = serial();
    if board.abi != KernelAbi::Upstream {
        // Downstream the release waits for the DSP without a limit (a wedged DSP wedges the
        // close itself); the bounded wait is the same code, checked upstream.
        return;
    }
    let bench = bench_for(board);
    let budget = Duration::from_millis(u64::from(board.recovery.budget_ms));
    let slack = Duration::from_millis(500);
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let a = rig.session().alloc(4096).unwrap();
        let o = rig.session().alloc(4096).unwrap();
        launch(&lib, &a.whole(), &o.whole(), 1, None).unwrap();
        // Every process exit and release hangs from now on.
        for _ in 0..8 {
            bench.inject(FaultTarget::Dsp(DspCallKind::ProcessExit), 1, Fault::Hang);
            bench.inject(FaultTarget::Dsp(DspCallKind::ReleaseProcess), 1, Fault::Hang);
        }
        if let Some(c) = rig.session().listener_channel(None, Duration::ZERO) {
            c.report_lost();
        }
        let t = Instant::now();
        let r = rig.session().recover();
        assert!(t.elapsed() < budget + slack, "recover() took {:?} ({r:?})", t.elapsed());
        drop((a, o, lib));
        let t = Instant::now();
        drop(rig);
        assert!(t.elapsed() < budget + slack, "drop took {:?}", t.elapsed());
    }
    bench.release_hangs();
    bench.clear_faults();
}

/// 2 to 8 `Session::start`s at once in one process: the identity is reserved when it is chosen
/// (one hold of the table's lock), so no two starts INIT the same identity; the DSP refuses
/// none, no FastRPC file is left open for good, and once every session is dropped the driver
/// is back at its start (files, sessions, init memory, channel references). Before the reservation:
/// the identity was chosen before INIT and taken after it, two starts chose the same one, the
/// second's INIT was refused and its file left open with its session and init memory.
fn concurrent_session_starts_take_distinct_identities_and_leave_nothing_behind(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    let start = bench.snapshot();
    let identities = if board.abi == KernelAbi::DownstreamMsm { 2 } else { 1 };
    for n in [2usize, 4, 8] {
        for round in 0..5 {
            let started = starts_at_once(&bench, n);
            let ok = started.iter().filter(|r| r.is_ok()).count();
            for r in &started {
                if let Err(e) = r {
                    match e {
                        RuntimeError::Hal(h) => assert_eq!(h.cause, Cause::IdentityInUse, "{n} starts, round {round}: {e}"),
                        other => panic!("{n} starts, round {round}: {other}"),
                    }
                }
            }
            assert!(ok >= 1 && ok <= identities, "{n} starts, round {round}: {ok} sessions");
            let procs = bench.dsp_processes();
            assert_eq!(procs.len(), ok, "{n} starts, round {round}: one DSP process per session");
            drop(started);
            assert_eq!(back_to(&bench, &start), start, "{n} starts, round {round}");
        }
    }
}

/// R20: the comma three's `fastrpc_get_info` takes its SMMU session with no lock
/// (`fastrpc_session_alloc_locked` without `smd_mutex`), so two GETINFOs at once can give two
/// files one context bank. The bench holds each GETINFO in that window (20 ms here) and counts
/// every one that began while another was held; hexrpc sends one GETINFO at a time per process,
/// so concurrent starts (and the recoveries after a restart) never overlap. Before that lock:
/// two starts that reserved the two identities sent their GETINFOs together.
#[test]
fn concurrent_starts_send_one_getinfo_at_a_time_on_the_downstream_bench() {
    let _serial = serial();
    let bench = Bench::with_config(hexrpc_bench::BenchConfig {
        getinfo_window: Duration::from_millis(20),
        ..hexrpc_bench::BenchConfig::for_board(&hexrpc_bsp::BENCH)
    });
    let start = bench.snapshot();
    for round in 0..4 {
        let started = starts_at_once(&bench, 8);
        assert_eq!(started.iter().filter(|r| r.is_ok()).count(), 2, "round {round}: both identities taken");
        drop(started);
    }
    let getinfos = bench.counts().calls.get(&hexrpc_bench::CallKind::RpcGetinfo).copied().unwrap_or(0);
    assert!(getinfos >= 8, "{getinfos} GETINFOs");
    assert_eq!(
        bench.counts().getinfo_overlaps,
        0,
        "GETINFOs of this process overlapped ({getinfos} sent): two files may share a context bank"
    );
    assert_eq!(back_to(&bench, &start), start);
}

/// R16's window after a last close: the port stays DISCONNECTING until the DSP acknowledges the
/// close (2 s here), and an INIT inside it is refused (-1) after the driver's port-connect wait
/// (5 s, the bench's default, as on the comma three) with the global mutex held. A session
/// started right after another's last close retries, within the board's budget, and works.
/// Before the retry: `Session::start` returned the refusal (recovery retried, start did not).
#[test]
fn a_start_in_the_window_after_a_last_close_is_retried_and_works() {
    let _serial = serial();
    let bench = Bench::with_config(hexrpc_bench::BenchConfig {
        close_ack_delay: Duration::from_secs(2),
        ..hexrpc_bench::BenchConfig::for_board(&hexrpc_bsp::BENCH)
    });
    bench.register_library(LIB, ADD_OR_LATE.table_model());
    let start = bench.snapshot();
    {
        let first = start_rig(&bench).unwrap();
        drop(first);
        assert_eq!(back_to(&bench, &start), start, "the first session closed");
        let t = Instant::now();
        let second = start_rig(&bench).expect("a start inside the window is retried until the port is back");
        assert_eq!(bench.counts().channel_open_failures, 1, "one INIT fell in the window");
        assert!(t.elapsed() >= Duration::from_secs(5), "the refusal came after the port-connect wait: {:?}", t.elapsed());
        let lib = second.open_library(LIB, image(LIB)).unwrap();
        works(&second, &lib, 3);
        drop(lib);
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// Every session of the process recovering at once after one DSP restart (two downstream, one
/// per identity; one upstream), ten restarts in a row: each recovery creates its new process
/// under an identity no channel of ours holds (alternating the session bit downstream), every
/// session works after it, and once all are dropped the driver is back at its start snapshot
/// (files, sessions, init memory, channel references). With the identity chosen and taken apart
/// (before the reservation) this failed one run in three downstream: the snapshot was not
/// back at its start.
fn concurrent_recoveries_after_one_restart_leave_nothing_behind(board: &'static Board) {
    let _serial = serial();
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let n = if board.abi == KernelAbi::DownstreamMsm { 2 } else { 1 };
        let rigs: Vec<Rig> = (0..n).map(|_| start_rig(&bench).unwrap()).collect();
        let libs: Vec<_> = rigs.iter().map(|r| r.open_library(LIB, image(LIB)).unwrap()).collect();
        for round in 0..10 {
            bench.restart_dsp();
            let barrier = std::sync::Barrier::new(n);
            std::thread::scope(|s| {
                for rig in &rigs {
                    let barrier = &barrier;
                    s.spawn(move || {
                        // The listener notices the restart on its own: recover() on a session
                        // that has not noticed yet has nothing to do.
                        let end = Instant::now() + WAIT;
                        while matches!(rig.session().health(), hexrpc_hal::Health::Healthy { .. }) {
                            assert!(Instant::now() < end, "round {round}: the restart was never noticed");
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        barrier.wait();
                        rig.session().recover().unwrap_or_else(|e| panic!("round {round}: {e}"));
                    });
                }
            });
            for (rig, lib) in rigs.iter().zip(&libs) {
                works(rig, lib, round as u8);
            }
        }
        drop(libs);
        drop(rigs);
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// `n` sessions started at once on `bench` (threads released together by a barrier).
fn starts_at_once(bench: &Bench, n: usize) -> Vec<Result<Rig, RuntimeError>> {
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    start_rig(bench)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A launch on two fresh leases of `rig` through `lib` (`add 1` to `byte`s) that must work.
fn works(rig: &Rig, lib: &Library<'_, Bench>, byte: u8) {
    let mut a = rig.session().alloc(4096).unwrap();
    a.fill(0, 4096, byte).unwrap();
    let o = rig.session().alloc(4096).unwrap();
    launch(lib, &a.whole(), &o.whole(), 1, None).unwrap_or_else(|e| panic!("a launch on {byte}s: {e}"));
    assert!(bytes(&o).iter().all(|&b| b == byte.wrapping_add(1)), "{byte}s plus one");
}

/// A new lease of `rig` with the number `fd` if the process hands that number out again within
/// 16 allocations (a recovery may have freed lower ones), else the 17th; the others are freed.
fn new_lease_seeking(rig: &Rig, fd: hexrpc_drivers::Fd) -> Lease<'_, Bench> {
    let mut spare = Vec::new();
    let mut b = rig.session().alloc(4096).unwrap();
    while b.fd() != fd && spare.len() < 16 {
        spare.push(b);
        b = rig.session().alloc(4096).unwrap();
    }
    b
}

/// The largest batch (256 records on 15 distinct leases) built, pushed and run on a thread with
/// a 64 KiB stack: its records live in a heap [`BatchSpace`], so the batch itself is a few words
/// and no call copies its 66 KiB through the stack.
#[test]
fn the_largest_batch_pushes_and_runs_on_a_64_kib_thread_from_a_heap_space() {
    use hexrpc_runtime::launch::{BatchSpace, MAX_BATCH_LAUNCHES, MAX_BATCH_LEASES};
    with_served(&hexrpc_bsp::BENCH, |_bench, rig, lib, out| {
        let inputs: Vec<_> = (0..MAX_BATCH_LEASES - 1)
            .map(|i| {
                let mut a = rig.session().alloc(4096).unwrap();
                a.fill(0, 4096, 10 * i as u8).unwrap();
                a
            })
            .collect();
        let sigs = [Signature::parse(SIG).unwrap()];
        let per = 4096 / MAX_BATCH_LAUNCHES;
        let space = std::thread::scope(|s| {
            let small = std::thread::Builder::new().stack_size(64 * 1024);
            let worker = small.spawn_scoped(s, || {
                let outs: Vec<_> = (0..MAX_BATCH_LAUNCHES).map(|r| out.view(per * r, per).unwrap()).collect();
                let ins: Vec<_> =
                    (0..MAX_BATCH_LAUNCHES).map(|r| inputs[r % inputs.len()].view(per * (r / inputs.len()), per).unwrap()).collect();
                let mut batch = Batch::in_space(&sigs, BatchSpace::boxed()).map_err(|(e, _)| e).unwrap();
                for (r, o) in outs.iter().enumerate() {
                    batch.push(0, &[BufferRef::of(&ins[r]), BufferRef::of(o)], &[Scalar::U32(1 + (r % 3) as u32)]).unwrap();
                }
                assert_eq!(batch.lease_count(), MAX_BATCH_LEASES);
                let whole = inputs[0].whole();
                let extra = batch.push(0, &[BufferRef::of(&whole), BufferRef::of(&outs[0])], &[Scalar::U32(1)]);
                assert!(extra.is_err(), "a record past the capacity: {extra:?}");
                assert_eq!(batch.run(lib).unwrap().launches, MAX_BATCH_LAUNCHES);
                batch.set_scalar(0, 0, Scalar::U32(7)).unwrap();
                assert_eq!(batch.run_with_deadline(lib, WAIT).unwrap().launches, MAX_BATCH_LAUNCHES);
                batch.into_space()
            });
            worker.unwrap().join().expect("the 64 KiB thread ran the batch")
        });
        let got = bytes(out);
        for r in 0..MAX_BATCH_LAUNCHES {
            let k = if r == 0 { 7 } else { 1 + (r % 3) as u8 };
            let want = (10 * (r % inputs.len()) as u8).wrapping_add(k);
            assert!(got[per * r..per * (r + 1)].iter().all(|&b| b == want), "record {r}: {:?}", &got[per * r..per * r + 4]);
        }
        // The space is reusable: a new batch in it starts empty.
        let again = Batch::in_space(&sigs, space).map_err(|(e, _)| e).unwrap();
        assert!(again.is_empty() && again.lease_count() == 0 && again.record_bytes() == 0);
    });
}
