//! The session's latency policy on the bench: the PM-QoS vote (`FASTRPC_CONTROL_LATENCY`) goes
//! out once per channel, only after the channel's INIT, again on the channel each recovery
//! opens, and the kernel removes it at each file's release; a policy without the vote sends
//! nothing; a refused vote is reported and the session works; the upstream drivers have no such
//! request and nothing is sent. The DSP clock vote: each level reaches `HAP_power_set` in the DSP
//! shell (Hexagon code under qemu-hexagon), every field read back there, on the first process and
//! on the process of each recovery; no vote for `off` or for a library built without the power
//! method.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hexrpc_bench::executor::{self, wire::PowerSetRecord, Toolchain};
use hexrpc_bench::{Bench, BenchConfig, PmQosOp, PmQosRecord};
use hexrpc_bsp::{Board, DeviceAccess, KernelAbi};
use hexrpc_drivers::Errno;
use hexrpc_hal::{DspPower, LatencyPolicy, PmQosState, PmQosVote, Session};
use hexrpc_libbuild::{build_library, BuildOptions};
use hexrpc_runtime::launch::{EntryOptions, PowerVote, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;
use hexrpc_scenarios::catalogue::{self, image, ADD_U8};
use hexrpc_scenarios::stack::*;

hexrpc_bench::on_both_kernels!(
    the_vote_goes_out_once_per_channel_after_its_init_and_again_after_each_of_50_recoveries,
    a_relaxed_policy_sends_no_vote_on_any_channel,
    a_vote_the_kernel_refuses_is_reported_and_the_session_still_works,
    each_power_level_reaches_hap_power_set_on_the_dsp_and_again_after_each_recovery
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

const KERNEL_C: &str = "void bump(unsigned char *b, unsigned int n) { for (unsigned int i = 0; i < n; i++) b[i] += 1; }\n";

/// `hexrpc build-lib` of [`KERNEL_C`] with `entry` into a leaked image.
fn build(tc: &Toolchain, tag: &str, entry: EntryOptions) -> &'static [u8] {
    let dir = std::env::temp_dir().join(format!("hexrpc-power-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src: PathBuf = dir.join("bump.c");
    std::fs::write(&src, KERNEL_C).unwrap();
    let out = dir.join("libbump.so");
    let opts = BuildOptions { entry, clang: tc.clang.clone(), lld: tc.lld.clone(), ..BuildOptions::default() };
    let built = build_library(&src, &Signature::parse("buf,u32").unwrap(), Path::new(&out), &opts);
    let image = std::fs::read(&out);
    let _ = std::fs::remove_dir_all(&dir);
    built.expect("build-lib");
    Box::leak(image.unwrap().into_boxed_slice())
}

/// What the DSP shell of the live process read from `HAP_power_set`, per request.
fn votes_on_the_dsp(bench: &Bench) -> Vec<PowerSetRecord> {
    let live: Vec<_> = executor::executors(bench).into_iter().filter(|e| e.alive).collect();
    assert_eq!(live.len(), 1, "one live DSP shell: {live:?}");
    live[0].stats.power_requests.clone()
}

fn as_seen_on_the_dsp(v: &PowerVote) -> PowerSetRecord {
    PowerSetRecord {
        request_type: v.request_type,
        dcvs_enable: v.dcvs_enable,
        dcvs_option: v.dcvs_option,
        set_latency: v.set_latency,
        latency: v.latency_us,
        set_dcvs_params: v.set_dcvs_params,
        target_corner: v.target_corner,
        min_corner: v.min_corner,
        max_corner: v.max_corner,
        set_sleep_disable: v.set_sleep_disable,
        sleep_disable: v.sleep_disable,
    }
}

/// One launch of `bump` on 64 bytes of `byte`; the result, or the error.
fn try_bump(rig: &Rig, kernel: &hexrpc_runtime::Kernel<hexrpc_hal::Library<'_, Bench>>, byte: u8) -> Result<(), hexrpc_runtime::Error> {
    let mut lease = rig.session().alloc(4096).unwrap();
    lease.write_at(0, &[byte; 64]).unwrap();
    let v = lease.view(0, 64).unwrap();
    kernel.launch(&[&v], &[Scalar::U32(64)])?;
    let mut out = [0u8; 64];
    v.read(&mut out).unwrap();
    assert_eq!(out, [byte + 1; 64]);
    Ok(())
}

fn each_power_level_reaches_hap_power_set_on_the_dsp_and_again_after_each_recovery(board: &'static Board) {
    let Some(tc) = hexrpc_scenarios::suite::tools_or_skip() else { return };
    let with_method = build(&tc, &format!("method-{}", board.name), EntryOptions::V2_CACHED);
    let without = build(&tc, &format!("plain-{}", board.name), EntryOptions::V2);
    for level in [DspPower::Sustained, DspPower::Burst, DspPower::Off] {
        let policy = LatencyPolicy::REALTIME.with_dsp_power(level);
        let bench = Bench::for_board(board);
        let rig = served(&bench, policy);
        let want: Vec<PowerSetRecord> = PowerVote::for_level(level).iter().map(as_seen_on_the_dsp).collect();
        let kernel = rig.open_recorded_kernel("bump", with_method).unwrap();
        try_bump(&rig, &kernel, 1).unwrap();
        assert_eq!(votes_on_the_dsp(&bench), want, "{level:?}: the vote, once, after the open");
        try_bump(&rig, &kernel, 2).unwrap();
        assert_eq!(votes_on_the_dsp(&bench), want, "{level:?}: a launch sends no vote");
        for round in 0..3u32 {
            bench.restart_dsp();
            assert!(try_bump(&rig, &kernel, 3).is_err(), "round {round}: the restart is seen");
            rig.session().recover().unwrap_or_else(|e| panic!("{level:?} recovery {round}: {e}"));
            try_bump(&rig, &kernel, 3).unwrap();
            assert_eq!(votes_on_the_dsp(&bench), want, "{level:?}: the new process got the vote after recovery {round}");
        }
        assert_eq!(rig.session().setup_failures(), 0);
        drop(kernel);
        drop(rig);
        // A library whose entry has no power method gets no vote, whatever the level.
        let bench = Bench::for_board(board);
        let rig = served(&bench, policy);
        let plain = rig.open_recorded_kernel("plain", without).unwrap();
        try_bump(&rig, &plain, 4).unwrap();
        assert_eq!(votes_on_the_dsp(&bench), [], "{level:?}: no power method, no vote");
    }
}
