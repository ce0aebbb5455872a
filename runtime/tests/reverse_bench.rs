//! The reverse service on the bench, behind a real HAL session: it stops promptly with a request
//! in flight, and it serves again on the new channel after a DSP restart and recovery.

use std::time::{Duration, Instant};

use hexrpc_bench::{elf, wire, Bench, ReverseRequest};
use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::{apps_std, Scalars};
use hexrpc_hal::internal::ListenerPlumbing;
use hexrpc_runtime::reverse::{FilePolicy, ServeOutcome};
use hexrpc_runtime::ServedSession;

hexrpc_bench::on_both_kernels!(
    stop_joins_without_waiting_out_a_request_in_flight,
    the_service_serves_the_new_channel_after_a_restart_and_recovery
);

fn serve(bench: &Bench) -> ServedSession<Bench> {
    let access = DeviceAccess::for_bench_board(bench.board()).expect("a bench board");
    ServedSession::start(bench.clone(), &access, FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

/// apps_remotectl open of apps_std, as the DSP sends it.
fn open_apps_std(bench: &Bench, fd: hexrpc_drivers::Fd) -> u32 {
    let name = b"apps_std\0";
    let mut prim = (name.len() as u32).to_le_bytes().to_vec();
    prim.extend_from_slice(&16u32.to_le_bytes());
    let req = ReverseRequest::packed(0, Scalars::new(0, 2, 2, 0, 0).unwrap(), &[&prim, name], &[8, 16]);
    let reply = bench.reverse_call(fd, req, Duration::from_secs(2)).unwrap();
    assert_eq!(reply.result, 0);
    let outs = wire::unpack_reply(&reply.payload, &[8, 16]).unwrap();
    u32::from_le_bytes(outs[0][..4].try_into().unwrap())
}

fn file_exists(bench: &Bench, fd: hexrpc_drivers::Fd, h: u32, path: &str) -> i32 {
    let p = format!("{path}\0");
    let prim = (p.len() as u32).to_le_bytes();
    let sc = Scalars::new(apps_std::method::FILE_EXISTS as u8, 2, 1, 0, 0).unwrap();
    let reply = bench.reverse_call(fd, ReverseRequest::packed(h, sc, &[&prim, p.as_bytes()], &[1]), Duration::from_secs(2)).unwrap();
    reply.result
}

fn stop_joins_without_waiting_out_a_request_in_flight(board: &'static Board) {
    for _ in 0..5 {
        let bench = Bench::for_board(board);
        bench.add_file("/bench/dsp/cdsp/lib.so", elf::hexagon_elf(64 * 1024));
        let served = serve(&bench);
        let (fd, _) = served.session().listener_fd().unwrap();
        let h = open_apps_std(&bench, fd);
        assert_eq!(file_exists(&bench, fd, h, "lib.so"), 0);
        // A request the listener will be answering or about to fetch when the stop comes.
        let sc = Scalars::new(apps_std::method::FILE_EXISTS as u8, 2, 1, 0, 0).unwrap();
        let _ticket = bench.post_reverse(fd, ReverseRequest::packed(h, sc, &[&7u32.to_le_bytes(), b"lib.so\0"], &[1])).unwrap();
        let t0 = Instant::now();
        let outcome = served.stop().expect("stops");
        let took = t0.elapsed();
        assert_eq!(outcome, ServeOutcome::Stopped);
        // A stop that waited for the in-flight request (instead of interrupting the listener's
        // blocked call) would run into the stop timeout and fail with StopError; the bound is
        // half of that timeout, so it tells "joined" from "waited out" without being a speed
        // target (the time is host time on a loaded CI machine).
        assert!(took < hexrpc_runtime::reverse::DEFAULT_STOP_TIMEOUT / 2, "stop took {took:?}");
    }
}

fn the_service_serves_the_new_channel_after_a_restart_and_recovery(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.add_file("/bench/dsp/cdsp/lib.so", elf::hexagon_elf(4096));
    let served = serve(&bench);
    let (old_fd, generation) = served.session().listener_fd().unwrap();
    let h = open_apps_std(&bench, old_fd);
    assert_eq!(file_exists(&bench, old_fd, h, "lib.so"), 0);
    bench.restart_dsp();
    // The listener is the first to see the restart: it reports it to the session, which then
    // refuses calls until it is recovered.
    let t0 = Instant::now();
    while served.session().is_healthy() {
        assert!(t0.elapsed() < Duration::from_secs(2), "the listener did not report the restart");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(served.session().alloc(4096).map(|_| ()), Ok(()), "allocation does not need the DSP");
    served.session().recover().unwrap();
    let (new_fd, new_generation) = served.session().listener_fd().unwrap();
    assert!(new_generation > generation);
    let h = open_apps_std(&bench, new_fd);
    assert_eq!(file_exists(&bench, new_fd, h, "lib.so"), 0, "served on the new channel");
    served.stop().unwrap();
}
