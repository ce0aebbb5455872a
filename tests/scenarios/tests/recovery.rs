//! Recovery as a state machine with generations, on the bench behind a served session: a restart
//! storm under 8 launching threads, a DSP that stays down for a while, a listener stalled in a
//! slow file read while the channel is replaced, MUNMAPs that must reach the channel that made
//! each map, a stopped listener, and a recovery that failed followed by one that succeeds.

use std::time::{Duration, Instant};

use hexrpc_bench::{wire, Bench, BenchConfig, CallKind, Fault, FaultTarget, ReverseRequest};
use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::{adsprpc, listener, Fd, Scalars};
use hexrpc_hal::internal::ListenerPlumbing;
use hexrpc_hal::{Cause, ErrorKind, HalError, Health};
use hexrpc_scenarios::catalogue::{self, image, ADD_U8};
use hexrpc_scenarios::stack::start as start_rig;
use hexrpc_scenarios::stack::*;

const WAIT: Duration = Duration::from_secs(5);

hexrpc_bench::on_both_kernels!(
    recover_while_the_dsp_is_down_for_300_ms_succeeds_once_it_is_back,
    concurrent_recover_calls_share_one_recovery,
    a_listener_stalled_in_a_slow_read_never_answers_into_the_new_channel,
    every_munmap_goes_to_the_channel_that_made_the_map,
    a_stopped_listener_is_reported_and_recover_restores_service,
    a_recover_after_a_failed_one_starts_a_fresh_budget_and_succeeds_once_the_dsp_is_back,
    a_deadline_that_passes_while_a_recovery_runs_sends_nothing_and_abandons_nothing
);

/// Attempts to create the DSP process: downstream INITs (refused with `ENOTCONN` while the DSP
/// is down); upstream opens of the node (missing while the DSP is down), each followed by an
/// INIT_CREATE once it exists.
fn process_attempts(bench: &Bench) -> u64 {
    match bench.board().abi {
        KernelAbi::DownstreamMsm => bench.counts().of(CallKind::RpcInit),
        KernelAbi::Upstream => {
            let node = bench.board().rpc_path.to_string_lossy().into_owned();
            bench.open_log().iter().filter(|r| r.path == node).count() as u64
        }
    }
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The DSP's apps_remotectl open of module `name` on the channel `fd`: the module key.
fn open_module(bench: &Bench, fd: Fd, name: &str) -> u32 {
    let n = format!("{name}\0");
    let req = ReverseRequest::packed(0, listener::REMOTECTL_OPEN, &[&words(&[n.len() as u32, 16]), n.as_bytes()], &[8, 16]);
    let reply = bench.reverse_call(fd, req, WAIT).expect("remotectl open answered");
    assert_eq!(reply.result, 0, "open {name}");
    let outs = wire::unpack_reply(&reply.payload, &[8, 16]).unwrap();
    u32::from_le_bytes(outs[0][..4].try_into().unwrap())
}

/// apps_std fopen_with_env of `name` ("r"): the FILE handle.
fn fopen(bench: &Bench, fd: Fd, h: u32, name: &str) -> u32 {
    let (env, delim, name, mode) = (b"ADSP_LIBRARY_PATH\0".as_slice(), b";\0".as_slice(), format!("{name}\0"), b"r\0".as_slice());
    let prim = words(&[env.len() as u32, delim.len() as u32, name.len() as u32, mode.len() as u32]);
    let req = ReverseRequest::packed(h, Scalars::from_raw(0x1305_0100), &[&prim, env, delim, name.as_bytes(), mode], &[4]);
    let reply = bench.reverse_call(fd, req, WAIT).expect("fopen answered");
    assert_eq!(reply.result, 0, "fopen");
    u32::from_le_bytes(wire::unpack_reply(&reply.payload, &[4]).unwrap()[0][..4].try_into().unwrap())
}

/// apps_std fread of `len` bytes from `file`, as a request to post.
fn fread_request(h: u32, file: u32, len: u32) -> ReverseRequest {
    ReverseRequest::packed(h, Scalars::from_raw(0x0401_0200), &[&words(&[file, len])], &[8, len])
}

/// apps_mem request_map64 of `len` kernel-allocated bytes: the DSP address.
fn dsp_map(bench: &Bench, fd: Fd, h: u32, len: u64) -> u64 {
    let mut prim = Vec::new();
    prim.extend_from_slice(&(-1i32).to_le_bytes());
    prim.extend_from_slice(&words(&[0, adsprpc::ADSP_MMAP_ADD_PAGES, 0]));
    prim.extend_from_slice(&0u64.to_le_bytes());
    prim.extend_from_slice(&(len as i64).to_le_bytes());
    let req = ReverseRequest::packed(h, Scalars::from_raw(0x0201_0100), &[&prim], &[16]);
    let reply = bench.reverse_call(fd, req, WAIT).expect("map answered");
    assert_eq!(reply.result, 0, "request_map64");
    u64::from_le_bytes(wire::unpack_reply(&reply.payload, &[16]).unwrap()[0][8..16].try_into().unwrap())
}

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

fn recover_while_the_dsp_is_down_for_300_ms_succeeds_once_it_is_back(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let lease = rig.session().alloc(8192).unwrap();
        let (a, b) = (lease.view(0, 16).unwrap(), lease.view(4096, 16).unwrap());
        launch_add_u8(&lib, &a, &b, 1, None).unwrap();
        bench.set_dsp_available(false);
        bench.restart_dsp();
        let err = launch_add_u8(&lib, &a, &b, 1, None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Recoverable, "{err}");
        let up = {
            let bench = bench.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                bench.set_dsp_available(true);
            })
        };
        let t0 = Instant::now();
        rig.session().recover().expect("recovery within the budget once the DSP is back");
        let took = t0.elapsed();
        up.join().unwrap();
        assert!(took >= Duration::from_millis(300), "it waited for the DSP: {took:?}");
        assert!(took < Duration::from_millis(u64::from(bench.board().recovery.budget_ms)), "{took:?}");
        assert!(process_attempts(&bench) >= 3, "the process was retried while the DSP was down");
        launch_add_u8(&lib, &a, &b, 2, None).expect("service restored");
        assert_eq!(rig.session().health(), Health::Healthy { generation: 2 });
        drop(lib);
        drop(lease);
    }
    assert_eq!(back_to(&bench, &start), start);
}

fn concurrent_recover_calls_share_one_recovery(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let rig = start_rig(&bench).unwrap();
    bench.set_dsp_available(false);
    bench.restart_dsp();
    let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name));
    assert!(lib.is_err());
    let inits0 = process_attempts(&bench);
    let up = {
        let bench = bench.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            bench.set_dsp_available(true);
        })
    };
    let outcomes: Vec<Result<(), HalError>> = std::thread::scope(|s| {
        (0..6).map(|_| s.spawn(|| rig.session().recover())).collect::<Vec<_>>().into_iter().map(|h| h.join().unwrap()).collect()
    });
    up.join().unwrap();
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(rig.session().generation(), 2, "one recovery, one new generation");
    // One successful INIT for the one recovery, plus the failed attempts while the DSP was down.
    let inits = process_attempts(&bench) - inits0;
    assert!(inits <= u64::from(bench.board().recovery.attempts), "{inits} INITs");
}

fn a_listener_stalled_in_a_slow_read_never_answers_into_the_new_channel(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    bench.add_file("/bench/dsp/cdsp/slow.bin", vec![0x5Au8; 64 * 1024]);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let lease = rig.session().alloc(8192).unwrap();
        let (a, b) = (lease.view(0, 16).unwrap(), lease.view(4096, 16).unwrap());
        let (old_fd, g1) = rig.session().listener_fd().unwrap();
        let h = open_module(&bench, old_fd, "apps_std");
        let file = fopen(&bench, old_fd, h, "slow.bin");
        // The next file read takes 1.2 s: the listener sits in it while the DSP restarts.
        let preads = bench.counts().of(CallKind::Pread);
        bench.inject(FaultTarget::Call(CallKind::Pread), 1, Fault::Delay(Duration::from_millis(1200)));
        let _ticket = bench.post_reverse(old_fd, fread_request(h, file, 4096)).unwrap();
        let t0 = Instant::now();
        while bench.counts().of(CallKind::Pread) == preads {
            assert!(t0.elapsed() < WAIT, "the listener never read");
            std::thread::sleep(Duration::from_millis(1));
        }
        bench.restart_dsp();
        assert_eq!(launch_add_u8(&lib, &a, &b, 1, None).unwrap_err().kind(), ErrorKind::Recoverable);
        rig.session().recover().expect("recovery works around the stalled listener");
        let (new_fd, g2) = rig.session().listener_fd().unwrap();
        assert!(g2 > g1);
        match board.abi {
            // Downstream the new process takes the other identity at once: the old number is
            // still reserved (retired under the listener) and cannot be the new channel's.
            KernelAbi::DownstreamMsm => assert_ne!(new_fd, old_fd, "the old number stayed reserved while the listener held it"),
            // Upstream has one identity per process: recovery waits for the old channel's
            // release, which comes only once the listener let go of it (its read takes 1.2 s);
            // the number may be reused after that.
            KernelAbi::Upstream => assert!(
                t0.elapsed() >= Duration::from_millis(1200),
                "the new channel ({new_fd:?}, old {old_fd:?}) was made while the listener still held the old one: {:?}",
                t0.elapsed()
            ),
        }
        launch_add_u8(&lib, &a, &b, 3, None).expect("launch on the new channel");
        // Let the stalled read finish: its answer must go nowhere near the new channel.
        std::thread::sleep(Duration::from_millis(1300).saturating_sub(t0.elapsed()));
        launch_add_u8(&lib, &a, &b, 3, None).expect("still fine after the old listener woke");
        assert_eq!(bench.counts().stray_answers, 0, "an old-generation answer reached a new channel");
        // The next recovery works.
        bench.restart_dsp();
        launch_recovering(&rig, &lib, &a, &b);
        assert!(rig.session().generation() > g2);
        assert_eq!(bench.counts().stray_answers, 0);
        drop(lib);
        drop(lease);
    }
    assert_eq!(back_to(&bench, &start), start);
}

fn every_munmap_goes_to_the_channel_that_made_the_map(board: &'static Board) {
    // A kernel that reports the DSP address of a map (upstream always; downstream a CAF tree
    // newer than the comma three's): only such maps can be unmapped by address, which is what
    // this test routes.
    let bench = Bench::with_config(BenchConfig { mmap_writes_vaddrout: true, ..BenchConfig::for_board(board) });
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let lease = rig.session().alloc(8192).unwrap();
        let (a, b) = (lease.view(0, 16).unwrap(), lease.view(4096, 16).unwrap());
        for round in 0..20 {
            let (fd, _) = rig.session().listener_fd().unwrap();
            let h = open_module(&bench, fd, "apps_mem");
            for _ in 0..2 {
                dsp_map(&bench, fd, h, 4096);
            }
            // A slow MUNMAP widens the window in which a reused number would catch it.
            let munmap = if board.abi == KernelAbi::Upstream { CallKind::UpMunmap } else { CallKind::RpcMunmap };
            bench.inject(FaultTarget::Call(munmap), 1, Fault::Delay(Duration::from_millis(5)));
            if round % 2 == 0 {
                bench.restart_dsp();
            } else {
                // Recovery without a restart (the DSP is alive): as if the listener had seen its
                // channel go away. Recovery's process exit then ends the listener's next2 from
                // the DSP side, and it releases its maps on the live channel.
                if let Some(c) = rig.session().listener_channel(None, Duration::ZERO) {
                    c.report_lost();
                }
            }
            launch_recovering(&rig, &lib, &a, &b);
            bench.clear_faults();
        }
        // Maps alive at teardown are released before the channel closes.
        let (fd, _) = rig.session().listener_fd().unwrap();
        let h = open_module(&bench, fd, "apps_mem");
        dsp_map(&bench, fd, h, 8192);
        drop(lib);
        drop(lease);
    }
    let log = bench.munmap_log();
    assert!(!log.is_empty());
    for m in &log {
        assert!(!m.went_to_another_channel(), "MUNMAP of a map made on channel {:?} went to {:?} (fd {})", m.owner, m.channel, m.fd);
        assert!(m.channel.is_some(), "MUNMAP sent on fd {} that was no channel any more: {m:?}", m.fd);
    }
    assert_eq!(back_to(&bench, &start), start);
}

fn a_stopped_listener_is_reported_and_recover_restores_service(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let mut rig = start_rig(&bench).unwrap();
        rig.stop_listener().expect("listener stops");
        match rig.session().health() {
            Health::NeedsRecovery(e) => assert_eq!(e.cause, Cause::ListenerStopped, "{e}"),
            h => panic!("the session did not notice: {h:?}"),
        }
        assert!(!rig.session().is_healthy());
        rig.recover().expect("a new listener and a new channel");
        assert!(rig.listener_running());
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let mut lease = rig.session().alloc(8192).unwrap();
        lease.write_at(0, &[9u8; 16]).unwrap();
        let (a, b) = (lease.view(0, 16).unwrap(), lease.view(4096, 16).unwrap());
        launch_add_u8(&lib, &a, &b, 1, None).expect("service restored");
        let mut got = [0u8; 16];
        b.read(&mut got).unwrap();
        assert_eq!(got, [10u8; 16]);
        drop(lib);
        drop(lease);
    }
    assert_eq!(back_to(&bench, &start), start);
}

fn a_recover_after_a_failed_one_starts_a_fresh_budget_and_succeeds_once_the_dsp_is_back(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    let policy = board.recovery;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let lease = rig.session().alloc(8192).unwrap();
        let (a, b) = (lease.view(0, 16).unwrap(), lease.view(4096, 16).unwrap());
        launch_add_u8(&lib, &a, &b, 1, None).unwrap();
        // The DSP goes down and stays down for longer than one recovery's budget.
        bench.set_dsp_available(false);
        bench.restart_dsp();
        assert_eq!(launch_add_u8(&lib, &a, &b, 1, None).unwrap_err().kind(), ErrorKind::Recoverable);
        let t0 = Instant::now();
        let err = rig.session().recover().unwrap_err();
        assert!(t0.elapsed() < Duration::from_millis(u64::from(policy.budget_ms) + 500), "bounded: {:?}", t0.elapsed());
        assert_eq!(err.cause, Cause::Os(hexrpc_scenarios::stack::dsp_down_errno(board)), "{err}");
        assert_eq!(rig.session().health(), Health::Failed(err));
        assert_eq!(launch_add_u8(&lib, &a, &b, 1, None).unwrap_err().cause, Cause::Failed);
        let attempts = process_attempts(&bench);
        // The DSP is back: a second recover() runs a recovery of its own, with a fresh budget.
        bench.set_dsp_available(true);
        rig.session().recover().expect("a recover() after a failed one succeeds once the DSP is back");
        assert!(process_attempts(&bench) > attempts, "the second recover() rebuilt the process");
        assert!(matches!(rig.session().health(), Health::Healthy { .. }), "{:?}", rig.session().health());
        launch_add_u8(&lib, &a, &b, 2, None).expect("service restored");
        let (mut input, mut got) = ([0u8; 16], [0u8; 16]);
        a.read(&mut input).unwrap();
        b.read(&mut got).unwrap();
        assert_eq!(got, input.map(|x| x.wrapping_add(2)), "the kernel ran on the new channel");
        drop(lib);
        drop(lease);
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// A launch with a 100 ms deadline made while a recovery holds the channel for 300 ms (its
/// shell open is slowed): it returns `Timeout` at its deadline without having been sent, so the
/// generation the recovery built is not abandoned and needs no second recovery.
fn a_deadline_that_passes_while_a_recovery_runs_sends_nothing_and_abandons_nothing(board: &'static Board) {
    let bench = Bench::for_board(board);
    catalogue::register(&bench, &ADD_U8);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let lease = rig.session().alloc(8192).unwrap();
        let (a, b) = (lease.view(0, 16).unwrap(), lease.view(4096, 16).unwrap());
        launch_add_u8(&lib, &a, &b, 1, None).unwrap();
        bench.restart_dsp();
        assert!(launch_add_u8(&lib, &a, &b, 1, None).is_err(), "the restart is seen");
        // The recovery's first step under the channel lock opens the shell: 300 ms.
        bench.inject(FaultTarget::Call(CallKind::Open), 1, Fault::Delay(Duration::from_millis(300)));
        let (returned, recovered, err) = std::thread::scope(|s| {
            let rec = s.spawn(|| {
                let r = rig.session().recover();
                (Instant::now(), r)
            });
            // Let the recovery take the channel lock.
            std::thread::sleep(Duration::from_millis(50));
            let r = launch_add_u8(&lib, &a, &b, 7, Some(Duration::from_millis(100)));
            let returned = Instant::now();
            let (recovered, rec) = rec.join().unwrap();
            rec.expect("the recovery succeeds");
            (returned, recovered, r.expect_err("the deadline passed before the call could be sent"))
        });
        bench.clear_faults();
        assert_eq!(err.cause, Cause::Timeout, "{err}");
        // The deadline bounded the wait: the call returned while the recovery still held the
        // channel (an order of events, which load on the machine cannot turn around).
        assert!(returned < recovered, "the launch returned {:?} after the recovery ended", returned - recovered);
        let mut got = [0u8; 16];
        b.read(&mut got).unwrap();
        assert_eq!(got, [1; 16], "nothing was sent: the output is the first launch's");
        assert_eq!(rig.session().deadlines_unsent(), 1);
        assert_eq!(rig.session().health(), Health::Healthy { generation: 2 }, "one recovery for one restart");
        assert_eq!(rig.session().kept_counts().1, 0, "nothing quarantined");
        launch_add_u8(&lib, &a, &b, 2, None).expect("the new generation serves");
        assert_eq!(rig.session().generation(), 2);
        drop(lib);
        drop(lease);
    }
    assert_eq!(back_to(&bench, &start), start);
}
