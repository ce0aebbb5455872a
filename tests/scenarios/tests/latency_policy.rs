//! The session's latency policy on the bench: the PM-QoS vote (`FASTRPC_CONTROL_LATENCY`) goes
//! out once per channel, only after the channel's INIT, again on the channel each recovery
//! opens, and the kernel removes it at each file's release; a policy without the vote sends
//! nothing; a refused vote is reported and the session works; the upstream drivers have no such
//! request and nothing is sent.

use std::collections::{BTreeMap, BTreeSet};

use hexrpc_bench::{Bench, BenchConfig, PmQosOp, PmQosRecord};
use hexrpc_bsp::{Board, DeviceAccess, KernelAbi};
use hexrpc_drivers::Errno;
use hexrpc_hal::{LatencyPolicy, PmQosState, PmQosVote, Session};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;
use hexrpc_scenarios::catalogue::{self, image, ADD_U8};
use hexrpc_scenarios::stack::*;

hexrpc_bench::on_both_kernels!(
    the_vote_goes_out_once_per_channel_after_its_init_and_again_after_each_of_50_recoveries,
    a_relaxed_policy_sends_no_vote_on_any_channel,
    a_vote_the_kernel_refuses_is_reported_and_the_session_still_works
);

fn served(bench: &Bench, latency: LatencyPolicy) -> Rig {
    let access = DeviceAccess::for_bench_board(bench.board()).unwrap();
    let session = Session::start_with(bench.clone(), &access, latency).unwrap();
    ServedSession::serve(session, FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

/// Per file: its events in order.
fn by_file(log: &[PmQosRecord]) -> BTreeMap<u64, Vec<PmQosRecord>> {
    let mut m: BTreeMap<u64, Vec<PmQosRecord>> = BTreeMap::new();
    for r in log {
        m.entry(r.file).or_default().push(*r);
    }
    m
}

/// One launch that must work (the channel is usable).
fn launch_once(rig: &Rig, byte: u8) {
    let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
    let mut lease = rig.session().alloc(8192).unwrap();
    lease.write_at(0, &[byte; 16]).unwrap();
    let (a, b) = (lease.view(0, 16).unwrap(), lease.view(4096, 16).unwrap());
    launch_add_u8(&lib, &a, &b, 1, None).unwrap();
    let mut out = [0u8; 16];
    b.read(&mut out).unwrap();
    assert_eq!(out, [byte.wrapping_add(1); 16]);
}

/// A DSP restart, seen by a call, and the recovery.
fn restart_and_recover(bench: &Bench, rig: &Rig, round: u32) {
    bench.restart_dsp();
    let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name));
    assert!(lib.is_err(), "round {round}: the restart is seen");
    drop(lib);
    rig.session().recover().unwrap_or_else(|e| panic!("recovery {round}: {e}"));
}

fn the_vote_goes_out_once_per_channel_after_its_init_and_again_after_each_of_50_recoveries(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    let rig = served(&bench, LatencyPolicy::default());
    let downstream = board.abi == KernelAbi::DownstreamMsm;
    let want = if downstream { PmQosState::Sent } else { PmQosState::NotAvailable };
    assert_eq!(rig.session().pm_qos(), want);
    launch_once(&rig, 1);
    for i in 0..50u32 {
        restart_and_recover(&bench, &rig, i);
        assert_eq!(rig.session().generation(), i + 2);
        assert_eq!(rig.session().pm_qos(), want, "after recovery {i}");
    }
    launch_once(&rig, 7);
    drop(rig);
    assert_eq!(back_to(&bench, &start), start);
    let log = bench.pm_qos_log();
    if !downstream {
        assert!(log.is_empty(), "no PM-QoS request exists on {}: {log:?}", board.name);
        return;
    }
    let files = by_file(&log);
    assert_eq!(files.len(), 51, "one file per channel: the first and one per recovery: {log:?}");
    for (file, events) in &files {
        let ops: Vec<PmQosOp> = events.iter().map(|r| r.op).collect();
        assert_eq!(ops, [PmQosOp::Add, PmQosOp::Remove], "file {file}: one vote, removed at its release");
        assert!(events.iter().all(|r| r.inited), "file {file}: never before its INIT: {events:?}");
        assert_eq!(events[0].latency_us, i32::try_from(bench.config().rpc_latency_us).unwrap(), "the board's latency");
    }
    // Each vote went out before its channel's successor's: the order of the log is the order
    // of the channels.
    let adds: Vec<u64> = log.iter().filter(|r| r.op == PmQosOp::Add).map(|r| r.file).collect();
    let distinct: BTreeSet<u64> = adds.iter().copied().collect();
    assert_eq!((adds.len(), distinct.len()), (51, 51));
}

fn a_relaxed_policy_sends_no_vote_on_any_channel(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let rig = served(&bench, LatencyPolicy::RELAXED);
    assert_eq!(rig.session().latency_policy().pm_qos(), PmQosVote::Off);
    assert_eq!(rig.session().pm_qos(), PmQosState::NotAsked);
    launch_once(&rig, 3);
    restart_and_recover(&bench, &rig, 0);
    assert_eq!(rig.session().generation(), 2);
    launch_once(&rig, 4);
    assert_eq!(rig.session().pm_qos(), PmQosState::NotAsked);
    drop(rig);
    assert_eq!(bench.pm_qos_log(), []);
}

fn a_vote_the_kernel_refuses_is_reported_and_the_session_still_works(board: &'static Board) {
    // A device tree without `qcom,rpc-latency-us`: the comma three's driver refuses the vote.
    let bench = Bench::with_config(BenchConfig { rpc_latency_us: 0, ..BenchConfig::for_board(board) });
    catalogue::register(&bench, &ADD_U8);
    let rig = served(&bench, LatencyPolicy::REALTIME);
    let want = match board.abi {
        KernelAbi::DownstreamMsm => PmQosState::Refused(Errno::EPERM),
        KernelAbi::Upstream => PmQosState::NotAvailable,
    };
    assert_eq!(rig.session().pm_qos(), want);
    launch_once(&rig, 5);
    drop(rig);
    assert_eq!(bench.pm_qos_log(), [], "a refused vote adds no request");
}
