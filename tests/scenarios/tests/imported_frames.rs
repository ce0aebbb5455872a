//! Camera frames imported without a copy, on the three kernels: a second process (the
//! `bench-frame-server` binary, standing in for openpilot's VisionIPC) allocates a buffer from
//! its board's allocator (ION downstream, a dma-buf heap upstream and for Linux's own driver),
//! shares it over a UNIX socket with `SCM_RIGHTS` and writes frames; this process imports the
//! descriptor (`Session::import`) and launches kernels on it in place.
//!
//! * a served frame is read in place: every launch sees the frame the server wrote last, with
//!   nothing of the frame copied by the driver (the bench's `bytes_copied`; Linux's own driver's
//!   copies are not counted there), and the results equal those of the same frame copied into a
//!   lease;
//! * the server closing its descriptor, the client closing the received one, and the server
//!   exiting mid-stream break nothing: the import's own duplicate keeps the buffer;
//! * the client dropping its import while the server keeps the buffer: the server goes on, and
//!   a new import reads its next frame;
//! * 10,000 import/launch/drop cycles within 1,024 descriptors leave every descriptor, map and
//!   buffer as they were;
//! * a batch reads several ranges of one imported frame in one call; a launch abandoned at its
//!   deadline quarantines the import like any lease until `recover()`, and nothing is left;
//! * a model's input bound to the imported frame (`LoadedModel::bind_input`): each run reads
//!   the frame the server wrote last where it lies, 0 bytes of it copied (the run's own count,
//!   and the bench's), with the outputs of a model that copies the frame in; refusals of views
//!   it cannot take; the server exiting while the input is bound;
//! * a forged descriptor (a pipe, a socket, a regular file, a closed or negative number, a
//!   length beyond the buffer, 0 bytes) is refused with its typed cause before any FastRPC call.
//!
//! The tests of this file count the process's descriptors and share one descriptor limit: they
//! run one at a time. A test ends with at most the descriptors it started with: fewer is no
//! leak (a bench of the test before, whose last clone a closing thread held, may close its
//! descriptors while the next test runs).

#[path = "support/fds.rs"]
mod fds;
use fds::{fds_back_to, limit_fds, open_fds};
#[path = "support/sample_model.rs"]
mod sample_model;
use sample_model::{sample_library, sample_table, serve, SAMPLE_TABLE};

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hexrpc_bench::{Bench, BenchConfig, CallCounts, CallKind, FdlistPolicy, Snapshot};
use hexrpc_bsp::Board;
use hexrpc_drivers::Fd;
use hexrpc_hal::{Access, Cause, Health, ImportRefusal, Stage};
use hexrpc_model::bind::BindRefusal;
use hexrpc_model::run::{LoadedModel, RunError};
use hexrpc_model::{DType, Direction, IoSpec, StepSpec};
use hexrpc_runtime::launch::record::{FLAG_BATCHES, FLAG_MAP_CACHE, FLAG_PROGRAM};
use hexrpc_runtime::launch::{Batch, BufferRef, Scalar, Signature};
use hexrpc_scenarios::catalogue::{self, image, ADD_OR_LATE, ADD_U8, LATE_MS};
use hexrpc_scenarios::frame_server::{frame, FrameServer};
use hexrpc_scenarios::stack::start as start_rig;
use hexrpc_scenarios::stack::*;

/// An NV12 frame of the comma three's road camera, 1928 × 1208.
const FRAME_LEN: usize = 1928 * 1208 * 3 / 2;
/// systemd's default soft descriptor limit.
const FD_LIMIT: u64 = 1024;
const CYCLES: u32 = 10_000;
const SERVER: &str = env!("CARGO_BIN_EXE_bench-frame-server");
/// A table kernel (batches) that adds like ADD_U8, or writes late past its deadline.
const TABLE_LIB: &str = "frames_table";

hexrpc_bench::on_both_kernels!(
    a_served_frame_is_read_in_place_with_nothing_copied,
    the_server_closing_its_fd_or_exiting_mid_stream_breaks_nothing,
    dropping_the_import_while_the_server_keeps_the_buffer,
    ten_thousand_import_drop_cycles_within_1024_descriptors,
    a_batch_reads_an_imported_frame_and_a_deadline_quarantines_it,
    forged_descriptors_are_refused_before_any_call,
    a_model_input_bound_to_a_served_frame_runs_with_nothing_copied
);

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn bench_for(board: &'static Board) -> Bench {
    // As lease_churn.rs: on Linux's own driver the DSP lists every handle back, so the per-call
    // handle maps go with the call.
    let fdlist = if *board == hexrpc_bsp::BENCH_LINUX { FdlistPolicy::EveryHandle } else { FdlistPolicy::None };
    let bench = Bench::with_config(BenchConfig { fdlist, ..BenchConfig::for_board(board) });
    catalogue::register(&bench, &ADD_U8);
    bench.register_library(TABLE_LIB, ADD_OR_LATE.table_model());
    bench
}

fn server(board: &Board) -> FrameServer {
    FrameServer::spawn(std::path::Path::new(SERVER), board.allocator, FRAME_LEN).expect("start the frame server")
}

/// The FastRPC requests the bench has seen (every adsprpc and upstream fastrpc ioctl).
fn fastrpc_calls(c: &CallCounts) -> Vec<(CallKind, u64)> {
    c.calls
        .iter()
        .filter(|(k, _)| format!("{k:?}").starts_with("Rpc") || format!("{k:?}").starts_with("Up"))
        .map(|(k, n)| (*k, *n))
        .collect()
}

fn a_served_frame_is_read_in_place_with_nothing_copied(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bench = bench_for(board);
    let (start, fds_start) = (bench.snapshot(), open_fds());
    let mut srv = server(board);
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let imported = rig.session().import(srv.fd(), FRAME_LEN, Access::ReadOnly).unwrap();
        assert!(imported.len() >= FRAME_LEN && imported.fd() != srv.fd(), "{}: a lease of its own number", board.name);
        let out = rig.session().alloc(FRAME_LEN).unwrap();
        let mut copied = rig.session().alloc(FRAME_LEN).unwrap();
        let out_copied = rig.session().alloc(FRAME_LEN).unwrap();
        let (frame_view, out_view) = (imported.view(0, FRAME_LEN).unwrap(), out.view(0, FRAME_LEN).unwrap());
        let mut got = vec![0u8; FRAME_LEN];
        let mut want = vec![0u8; FRAME_LEN];
        for n in 0..4u32 {
            srv.write_frame(n).unwrap();
            let before = bench.counts().bytes_copied;
            launch_add_u8(&lib, &frame_view, &out_view, 3, None).unwrap_or_else(|e| panic!("{}: frame {n}: {e}", board.name));
            let import_copied = bench.counts().bytes_copied - before;
            out_view.read(&mut got).unwrap();
            let expected: Vec<u8> = frame(n, FRAME_LEN).iter().map(|b| b.wrapping_add(3)).collect();
            assert!(got == expected, "{}: frame {n} was not read in place", board.name);
            // The same frame copied into a lease of this process (what a service did before).
            copied.write_at(0, &frame(n, FRAME_LEN)).unwrap();
            let before = bench.counts().bytes_copied;
            launch_add_u8(&lib, &copied.view(0, FRAME_LEN).unwrap(), &out_copied.view(0, FRAME_LEN).unwrap(), 3, None).unwrap();
            let lease_copied = bench.counts().bytes_copied - before;
            out_copied.view(0, FRAME_LEN).unwrap().read(&mut want).unwrap();
            assert!(got == want, "{}: frame {n}: the imported frame's result differs from the copied frame's", board.name);
            // Both launches copy only their fixed arguments (header, offsets, timer): none of
            // the frame's 3.5 MB go through the driver's copy buffers.
            assert_eq!(import_copied, lease_copied, "{}: frame {n}", board.name);
            assert!(import_copied < 4096, "{}: frame {n}: {import_copied} bytes copied", board.name);
        }
        // A read-only import refuses this process's writes.
        let mut ro = imported;
        assert!(ro.write_at(0, &[1]).is_err(), "{}: a read-only import was written", board.name);
        drop((ro, out, copied, out_copied, lib));
    }
    srv.stop().unwrap();
    assert_eq!(back_to(&bench, &start), start, "{}: bench resources after the session", board.name);
    let fds_end = fds_back_to(fds_start);
    assert!(fds_end <= fds_start, "{}: the process's descriptors: {fds_end}, {fds_start} at the start", board.name);
}

fn the_server_closing_its_fd_or_exiting_mid_stream_breaks_nothing(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bench = bench_for(board);
    let (start, fds_start) = (bench.snapshot(), open_fds());
    let mut srv = server(board);
    const N: usize = 64 << 10;
    let at = FRAME_LEN - N;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let imported = rig.session().import(srv.fd(), FRAME_LEN, Access::ReadOnly).unwrap();
        let out = rig.session().alloc(N).unwrap();
        let (fv, ov) = (imported.view(at, N).unwrap(), out.view(0, N).unwrap());
        let check = |n: u32, what: &str| {
            launch_add_u8(&lib, &fv, &ov, 1, None).unwrap_or_else(|e| panic!("{}: {what}: {e}", board.name));
            let mut got = vec![0u8; N];
            ov.read(&mut got).unwrap();
            let want: Vec<u8> = frame(n, FRAME_LEN)[at..].iter().map(|b| b.wrapping_add(1)).collect();
            assert!(got == want, "{}: {what}: not frame {n}", board.name);
        };
        srv.write_frame(0).unwrap();
        check(0, "before anything closed");
        srv.close_server_fd().unwrap();
        srv.write_frame(1).unwrap();
        check(1, "after the server closed its descriptor");
        srv.close_received();
        srv.write_frame(2).unwrap();
        check(2, "after this process closed the received descriptor");
        let status = srv.kill_mid_stream().unwrap();
        assert!(status.success(), "{}: the server's exit: {status}", board.name);
        check(2, "after the server exited");
        let mut head = [0u8; 16];
        imported.read_at(0, &mut head).unwrap();
        assert_eq!(head.to_vec(), frame(2, 16), "{}: the import after the server exited", board.name);
        assert!(matches!(rig.session().health(), Health::Healthy { .. }), "{}", board.name);
        drop((imported, out, lib));
    }
    assert_eq!(back_to(&bench, &start), start, "{}: bench resources after the session", board.name);
    let fds_end = fds_back_to(fds_start);
    assert!(fds_end <= fds_start, "{}: the process's descriptors: {fds_end}, {fds_start} at the start", board.name);
}

fn dropping_the_import_while_the_server_keeps_the_buffer(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bench = bench_for(board);
    let (start, fds_start) = (bench.snapshot(), open_fds());
    let mut srv = server(board);
    const N: usize = 4096;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let out = rig.session().alloc(N).unwrap();
        for n in 0..3u32 {
            srv.write_frame(n).unwrap();
            let imported = rig.session().import(srv.fd(), FRAME_LEN, Access::ReadWrite).unwrap();
            launch_add_u8(&lib, &imported.view(0, N).unwrap(), &out.view(0, N).unwrap(), 2, None).unwrap();
            let mut got = vec![0u8; N];
            out.read_at(0, &mut got).unwrap();
            let want: Vec<u8> = frame(n, N).iter().map(|b| b.wrapping_add(2)).collect();
            assert!(got == want, "{}: import {n}", board.name);
            drop(imported);
            // The server's buffer and descriptor are untouched by the drop: it writes the next
            // frame through them, and the received descriptor still names the buffer.
            assert!(std::fs::metadata(format!("/proc/self/fd/{}", srv.fd().0)).is_ok(), "{}: the owner's descriptor", board.name);
        }
        drop((out, lib));
    }
    srv.write_frame(9).unwrap();
    srv.stop().unwrap();
    assert_eq!(back_to(&bench, &start), start, "{}: bench resources after the session", board.name);
    let fds_end = fds_back_to(fds_start);
    assert!(fds_end <= fds_start, "{}: the process's descriptors: {fds_end}, {fds_start} at the start", board.name);
}

fn ten_thousand_import_drop_cycles_within_1024_descriptors(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    limit_fds(FD_LIMIT);
    let bench = bench_for(board);
    let (start, fds_start) = (bench.snapshot(), open_fds());
    let mut srv = server(board);
    srv.write_frame(5).unwrap();
    let mut most_fds;
    const N: usize = 256;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(ADD_U8.name, image(ADD_U8.name)).unwrap();
        let out = rig.session().alloc(N).unwrap();
        let during = bench.snapshot();
        most_fds = open_fds();
        for cycle in 0..CYCLES {
            let imported = rig
                .session()
                .import(srv.fd(), FRAME_LEN, Access::ReadOnly)
                .unwrap_or_else(|e| panic!("{}: import at cycle {cycle}: {e}", board.name));
            let at = (cycle as usize * 4096) % (FRAME_LEN - N);
            launch_add_u8(&lib, &imported.view(at, N).unwrap(), &out.view(0, N).unwrap(), 1, None)
                .unwrap_or_else(|e| panic!("{}: launch at cycle {cycle}: {e}", board.name));
            if cycle % 97 == 0 {
                let mut got = [0u8; N];
                out.read_at(0, &mut got).unwrap();
                let want: Vec<u8> = frame(5, FRAME_LEN)[at..at + N].iter().map(|b| b.wrapping_add(1)).collect();
                assert!(got[..] == want[..], "{}: cycle {cycle}", board.name);
                most_fds = most_fds.max(open_fds());
            }
            drop(imported);
        }
        most_fds = most_fds.max(open_fds());
        assert!(matches!(rig.session().health(), Health::Healthy { .. }), "{}: one healthy session", board.name);
        // Between imports nothing of them is left but what a channel may still map (upstream
        // drivers that look maps up by number keep the numbers until the channel closes).
        let (kept, quarantined) = rig.session().kept_counts();
        assert_eq!(quarantined, 0, "{}", board.name);
        eprintln!(
            "{}: {CYCLES} import/launch/drop cycles (bench, simulated): most descriptors open {most_fds} (limit {FD_LIMIT}), \
             {kept} numbers kept, {} channel replacements; buffers during the session {} → {}",
            board.name,
            rig.session().replacements(),
            during.ion_buffers,
            bench.snapshot().ion_buffers
        );
        drop((out, lib));
    }
    // The server's buffer is intact and still its own.
    srv.write_frame(6).unwrap();
    srv.stop().unwrap();
    assert_eq!(back_to(&bench, &start), start, "{}: bench resources after the session", board.name);
    let fds_end = fds_back_to(fds_start);
    assert!(fds_end <= fds_start, "{}: the process's descriptors: {fds_end}, {fds_start} at the start", board.name);
    assert!(most_fds < FD_LIMIT as usize, "{}: {most_fds} descriptors", board.name);
}

fn forged_descriptors_are_refused_before_any_call(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bench = bench_for(board);
    let (start, fds_start) = (bench.snapshot(), open_fds());
    let srv = server(board);
    {
        let rig = start_rig(&bench).unwrap();
        let (reader, writer) = std::io::pipe().unwrap();
        let (sock, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let closed = {
            let f = std::fs::File::open("/proc/self/exe").unwrap();
            std::os::fd::AsRawFd::as_raw_fd(&f)
        };
        use std::os::fd::AsRawFd;
        let page_rounded = FRAME_LEN.div_ceil(4096) * 4096;
        let not_dma_buf = |e: &hexrpc_hal::HalError| matches!(e.cause, Cause::Import(ImportRefusal::NotDmaBuf { .. }));
        type Check = fn(&hexrpc_hal::HalError) -> bool;
        type Case = (&'static str, Fd, usize, Box<dyn Fn(&hexrpc_hal::HalError) -> bool>);
        let cases: Vec<Case> = vec![
            ("a pipe's read end", Fd(reader.as_raw_fd()), 4096, Box::new(not_dma_buf)),
            ("a pipe's write end", Fd(writer.as_raw_fd()), 4096, Box::new(not_dma_buf)),
            ("a socket", Fd(sock.as_raw_fd()), 4096, Box::new(not_dma_buf)),
            ("a regular file", Fd(file.as_raw_fd()), 4096, Box::new(not_dma_buf)),
            ("a closed number", Fd(closed), 4096, Box::new((|e| e.cause == Cause::Import(ImportRefusal::NotOpen)) as Check)),
            ("a negative number", Fd(-1), 4096, Box::new((|e| e.cause == Cause::Import(ImportRefusal::NotOpen)) as Check)),
            (
                "a length beyond the buffer",
                srv.fd(),
                page_rounded + 1,
                Box::new(move |e: &hexrpc_hal::HalError| {
                    e.cause == Cause::Import(ImportRefusal::BeyondBuffer { requested: page_rounded as u64 + 1, size: page_rounded as u64 })
                }),
            ),
            ("0 bytes", srv.fd(), 0, Box::new((|e| e.cause == Cause::Import(ImportRefusal::Empty)) as Check)),
        ];
        // The session's listener makes its own calls (init2, then next2, in which it waits):
        // the record is compared from the moment it waits, a hang bound of 5 s.
        let end = Instant::now() + Duration::from_secs(5);
        while bench.snapshot().blocked_threads == 0 {
            assert!(Instant::now() < end, "{}: the listener never waited in next2", board.name);
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = (fastrpc_calls(&bench.counts()), bench.snapshot());
        for (what, fd, len, expected) in &cases {
            let e = rig.session().import(*fd, *len, Access::ReadOnly).map(|_| ()).expect_err(what);
            assert!(expected(&e), "{}: {what}: {e:?}", board.name);
            assert_eq!(e.stage, Stage::Import, "{}: {what}", board.name);
            assert!(!e.to_string().is_empty() && e.to_string().contains("refused before any FastRPC call"), "{}: {what}: {e}", board.name);
            // Nothing reached a FastRPC driver, and nothing the refusal touched is left.
            assert_eq!(fastrpc_calls(&bench.counts()), before.0, "{}: {what}: a FastRPC call was made", board.name);
            assert_eq!(bench.snapshot(), before.1, "{}: {what}: left something behind", board.name);
        }
        // The real buffer at its real length is still taken.
        assert!(rig.session().import(srv.fd(), page_rounded, Access::ReadOnly).is_ok(), "{}", board.name);
        drop((reader, writer, sock, file));
    }
    srv.stop().unwrap();
    let end: Snapshot = back_to(&bench, &start);
    assert_eq!(end, start, "{}: bench resources after the session", board.name);
    let fds_end = fds_back_to(fds_start);
    assert!(fds_end <= fds_start, "{}: the process's descriptors: {fds_end}, {fds_start} at the start", board.name);
}

fn a_batch_reads_an_imported_frame_and_a_deadline_quarantines_it(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bench = bench_for(board);
    let (start, fds_start, mark) = (bench.snapshot(), open_fds(), kernel_mark(&bench));
    let mut srv = server(board);
    const N: usize = 16 << 10;
    const RECORDS: usize = 4;
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(TABLE_LIB, image(TABLE_LIB)).unwrap();
        srv.write_frame(11).unwrap();
        let imported = rig.session().import(srv.fd(), FRAME_LEN, Access::ReadOnly).unwrap();
        let out = rig.session().alloc(N * RECORDS).unwrap();
        let sigs = [Signature::parse(ADD_OR_LATE.signature).unwrap()];
        let mut batch = Batch::new(&sigs).unwrap();
        let views: Vec<_> =
            (0..RECORDS).map(|i| (imported.view(i * (FRAME_LEN / RECORDS), N).unwrap(), out.view(i * N, N).unwrap())).collect();
        for (i, (f, o)) in views.iter().enumerate() {
            batch.push(0, &[BufferRef::of(f), BufferRef::of(o)], &[Scalar::U32(i as u32 + 1)]).unwrap();
        }
        let before = bench.counts().bytes_copied;
        assert_eq!(batch.run(&lib).unwrap_or_else(|e| panic!("{}: batch: {e}", board.name)).launches, RECORDS);
        let copied = bench.counts().bytes_copied - before;
        assert!(copied < 64 << 10, "{}: the batch copied {copied} bytes", board.name);
        let whole = frame(11, FRAME_LEN);
        for i in 0..RECORDS {
            let mut got = vec![0u8; N];
            out.read_at(i * N, &mut got).unwrap();
            let at = i * (FRAME_LEN / RECORDS);
            let want: Vec<u8> = whole[at..at + N].iter().map(|b| b.wrapping_add(i as u8 + 1)).collect();
            assert!(got == want, "{}: record {i}", board.name);
        }
        drop(views);
        // A launch abandoned at its deadline: the import it was handed is quarantined, kept
        // whole when dropped, and released with the channel by recover().
        let e = launch_buf_buf_u32(&lib, &imported.view(0, N).unwrap(), &out.view(0, N).unwrap(), LATE_MS, Some(Duration::from_millis(30)))
            .unwrap_err();
        assert_eq!(e.cause, Cause::Timeout, "{}: {e}", board.name);
        assert_eq!(imported.check().unwrap_err().cause, Cause::Quarantined, "{}", board.name);
        drop(imported);
        rig.session().recover().unwrap();
        assert!(matches!(rig.session().health(), Health::Healthy { .. }), "{}", board.name);
        let again = rig.session().import(srv.fd(), FRAME_LEN, Access::ReadOnly).unwrap();
        launch_buf_buf_u32(&lib, &again.view(0, N).unwrap(), &out.view(0, N).unwrap(), 1, None).unwrap();
        drop((again, out, lib));
    }
    srv.stop().unwrap();
    assert_eq!(back_to(&bench, &start), start, "{}: bench resources after the session", board.name);
    // Linux 6.1.192's driver keeps a timed-out call's context and every map of its file for
    // good (kernel-rules.md, last section): the memfds of the buffers it keeps stay open. The
    // models keep nothing.
    let kept = kernel_mark(&bench).growth_since(&mark).fds;
    assert!(kept == 0 || *board == hexrpc_bsp::BENCH_LINUX, "{}: {kept} buffers kept by a model", board.name);
    let fds_end = fds_back_to(fds_start + kept);
    assert!(
        fds_end <= fds_start + kept,
        "{}: the process's descriptors: {fds_end}, {fds_start} at the start, {kept} kept by the kernel",
        board.name
    );
}

/// The bench board with DSP context banks that do not snoop the CPU caches (as
/// hal/tests/coherence.rs).
static NON_COHERENT: Board = Board { name: "bench-noncoherent", dsp_coherent: false, ..hexrpc_bsp::BENCH };

/// (ION cleans, ION invalidates, DMA_BUF_IOCTL_SYNCs) so far.
fn cache_ops(bench: &Bench) -> (u64, u64, u64) {
    let c = bench.counts();
    (c.of(CallKind::IonCleanCaches), c.of(CallKind::IonInvCaches), c.of(CallKind::DmaBufSync))
}

/// R6 for imports: the CPU's accesses through an imported lease get the cache maintenance of an
/// allocation on the same board: a clean after a write and an invalidate before a read on a
/// non-coherent ION board, nothing on a coherent one (the comma three), `DMA_BUF_IOCTL_SYNC`
/// START and END around each access on a cached dma-heap board. Returns the (write, read) deltas.
fn import_cache_roundtrip(board: &'static Board) -> ((u64, u64, u64), (u64, u64, u64)) {
    let bench = Bench::with_config(BenchConfig { board, ..BenchConfig::for_board(board) });
    let mut srv = server(board);
    srv.write_frame(3).unwrap();
    let session = hexrpc_hal::Session::start(bench.clone(), &hexrpc_bsp::DeviceAccess::for_device(board)).unwrap();
    let mut imported = session.import(srv.fd(), FRAME_LEN, Access::ReadWrite).unwrap();
    let before = cache_ops(&bench);
    imported.write_at(100, &[7; 64]).unwrap();
    let written = cache_ops(&bench);
    let mut back = [0u8; 128];
    imported.read_at(100, &mut back).unwrap();
    assert_eq!(back[..64], [7; 64], "{}", board.name);
    assert_eq!(back[64..], frame(3, 228)[164..], "{}: the server's frame around what was written", board.name);
    let read = cache_ops(&bench);
    drop(imported);
    drop(session);
    srv.stop().unwrap();
    let d = |a: (u64, u64, u64), b: (u64, u64, u64)| (b.0 - a.0, b.1 - a.1, b.2 - a.2);
    (d(before, written), d(written, read))
}

#[test]
fn imports_get_the_cache_maintenance_of_their_board() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(import_cache_roundtrip(&NON_COHERENT), ((1, 0, 0), (0, 1, 0)), "non-coherent ION: clean after, invalidate before");
    const { assert!(hexrpc_bsp::BENCH.dsp_coherent, "the bench models the comma three") };
    assert_eq!(import_cache_roundtrip(&hexrpc_bsp::BENCH), ((0, 0, 0), (0, 0, 0)), "coherent ION: nothing");
    const { assert!(hexrpc_bsp::BENCH_UPSTREAM.cached, "a cached dma-heap") };
    assert_eq!(
        import_cache_roundtrip(&hexrpc_bsp::BENCH_UPSTREAM),
        ((0, 0, 2), (0, 0, 2)),
        "dma-heap: SYNC START and END around each access"
    );
}

/// The Y plane's bytes of a [`FRAME_LEN`] NV12 frame (the UV plane follows).
const Y_LEN: usize = 1928 * 1208;

/// A model over a whole NV12 frame: input `frame` (uint8, FRAME_LEN) in arena 0, output `y`
/// (uint8, FRAME_LEN) in arena 1; two records of the sample table's `add`, the Y plane + 3 and
/// the UV plane + 5, so one input is viewed twice, at two offsets.
fn frame_model() -> Vec<u8> {
    let mut b = hexrpc_model::sample::tiny();
    b.libraries[0].1 = sample_library(FLAG_BATCHES | FLAG_PROGRAM | FLAG_MAP_CACHE);
    let (y, uv) = (Y_LEN as u32, (FRAME_LEN - Y_LEN) as u32);
    let mut records = hexrpc_model::sample::record(0, &[(0, 0, y), (1, 0, y)], &[3]);
    records.extend(hexrpc_model::sample::record(0, &[(0, y, uv), (1, y, uv)], &[5]));
    let arena = FRAME_LEN.next_multiple_of(hexrpc_hal::ARENA_ALIGN) as u64;
    b.arenas = vec![(arena, 128), (arena, 128)];
    b.init = vec![];
    b.steps = vec![StepSpec { library: 0, launches: 2, records }];
    b.io = vec![
        IoSpec { name: "frame".into(), direction: Direction::Input, dtype: DType::U8, shape: vec![FRAME_LEN as u64], arena: 0, offset: 0 },
        IoSpec { name: "y".into(), direction: Direction::Output, dtype: DType::U8, shape: vec![FRAME_LEN as u64], arena: 1, offset: 0 },
    ];
    b.to_bytes()
}

/// What [`frame_model`] computes from frame `n`.
fn frame_model_output(n: u32) -> Vec<u8> {
    let f = frame(n, FRAME_LEN);
    f.iter().enumerate().map(|(i, b)| b.wrapping_add(if i < Y_LEN { 3 } else { 5 })).collect()
}

fn a_model_input_bound_to_a_served_frame_runs_with_nothing_copied(board: &'static Board) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bench = bench_for(board);
    bench.register_library(SAMPLE_TABLE, sample_table());
    let (start, fds_start) = (bench.snapshot(), open_fds());
    let mut srv = server(board);
    let deadline = Some(Duration::from_secs(10));
    {
        let served = serve(&bench);
        let bytes = frame_model();
        let mut bound = LoadedModel::open(&served, &bytes).expect("open the frame model");
        let mut copying = LoadedModel::open(&served, &bytes).expect("open the frame model again");
        let frame_lease = std::sync::Arc::new(served.import_shared(srv.fd(), FRAME_LEN, Access::ReadOnly).unwrap());
        bound.bind_input(0, frame_lease.clone(), 0).unwrap_or_else(|e| panic!("{}: bind: {e}", board.name));
        assert!(bound.is_bound(0) && !copying.is_bound(0));
        // One more lease-table entry a call: the import.
        assert_eq!(bound.call_bytes_per_run(), copying.call_bytes_per_run() + 8, "{}", board.name);
        let (mut y, mut want) = (vec![0u8; FRAME_LEN], vec![0u8; FRAME_LEN]);
        for n in 0..4u32 {
            srv.write_frame(n).unwrap();
            let (before, invokes) = (bench.counts().bytes_copied, bench.counts().of(invoke_kind(board)));
            let report = bound.run(&[&[]], &mut [&mut y], deadline).unwrap_or_else(|e| panic!("{}: frame {n}: {e}", board.name));
            let bound_copied = bench.counts().bytes_copied - before;
            assert_eq!((report.calls, report.launches, report.input_bytes_copied), (1, 2, 0), "{}: frame {n}", board.name);
            assert_eq!(bench.counts().of(invoke_kind(board)) - invokes, 1, "{}: frame {n}: one call", board.name);
            assert!(y == frame_model_output(n), "{}: frame {n} was not read in place", board.name);
            // The same frame copied in (what a service did before).
            let before = bench.counts().bytes_copied;
            let report = copying.run(&[&frame(n, FRAME_LEN)], &mut [&mut want], deadline).unwrap();
            let copying_copied = bench.counts().bytes_copied - before;
            assert_eq!(report.input_bytes_copied, FRAME_LEN as u64, "{}: frame {n}", board.name);
            assert!(y == want, "{}: frame {n}: the bound run's output differs from the copied frame's", board.name);
            // Neither call moves the frame through the driver: each copies its header, lease
            // table and status only, the bound one a lease entry more.
            assert!(
                bound_copied < 4096 && bound_copied <= copying_copied + 8,
                "{}: frame {n}: {bound_copied} vs {copying_copied}",
                board.name
            );
        }
        // Bytes for a bound input are refused before anything is sent.
        let invokes = bench.counts().of(invoke_kind(board));
        let err = bound.run(&[&frame(0, FRAME_LEN)], &mut [&mut y], deadline).unwrap_err();
        assert!(matches!(&err, RunError::Bound { name } if name == "frame"), "{}: {err}", board.name);
        assert_eq!(bench.counts().of(invoke_kind(board)), invokes, "{}: nothing sent", board.name);
        // Views the model cannot take: nothing changes, the binding stays.
        let refused = |m: &mut LoadedModel<Bench>, holder: std::sync::Arc<dyn hexrpc_model::bind::LeaseHolder<Bench>>, at: u64| match m
            .bind_input(0, holder, at)
        {
            Err(RunError::Bind { refusal, .. }) => refusal,
            other => panic!("{}: bind at {at}: {other:?}", board.name),
        };
        assert!(matches!(refused(&mut bound, frame_lease.clone(), 64), BindRefusal::Alignment { want: 0, got: 64, align: 128 }));
        assert!(matches!(refused(&mut bound, frame_lease.clone(), 4096), BindRefusal::Beyond { offset: 4096, .. }));
        // A lease of another session (one identity has one session a process on upstream: a
        // second bench's).
        let other_bench = Bench::for_board(board);
        let other = serve(&other_bench);
        let elsewhere = std::sync::Arc::new(other.alloc_shared(FRAME_LEN).unwrap());
        assert_eq!(refused(&mut bound, elsewhere.clone(), 0), BindRefusal::OtherSession, "{}", board.name);
        drop(elsewhere);
        other.stop().unwrap();
        // A new binding replaces the old one: bound to another lease of the session, then to the
        // frame again, the model lets the other lease go.
        let own = std::sync::Arc::new(served.alloc_shared(FRAME_LEN).unwrap());
        bound.bind_input(0, own.clone(), 0).unwrap();
        bound.bind_input(0, frame_lease.clone(), 0).unwrap();
        drop(own);
        assert!(matches!(bound.bind_input(7, frame_lease.clone(), 0), Err(RunError::NoSuchInput { index: 7, inputs: 1 })));
        srv.write_frame(4).unwrap();
        bound.run(&[&[]], &mut [&mut y], deadline).unwrap();
        assert!(y == frame_model_output(4), "{}: the binding after the refusals", board.name);
        // The server exits mid-stream: the bound input still reads the buffer's last frame.
        let status = srv.kill_mid_stream().unwrap();
        assert!(status.success(), "{}: the server's exit: {status}", board.name);
        y.fill(0);
        bound.run(&[&[]], &mut [&mut y], deadline).unwrap();
        assert!(y == frame_model_output(4), "{}: after the server exited", board.name);
        // Unbound, the input is copied in again, and the model gives the import back.
        let held = bound.unbind_input(0).unwrap().expect("it was bound");
        assert!(!bound.is_bound(0) && bound.unbind_input(0).unwrap().is_none());
        assert_eq!(bound.call_bytes_per_run(), copying.call_bytes_per_run());
        drop(held);
        let report = bound.run(&[&frame(6, FRAME_LEN)], &mut [&mut y], deadline).unwrap();
        assert_eq!(report.input_bytes_copied, FRAME_LEN as u64);
        assert!(y == frame_model_output(6), "{}: unbound", board.name);
        // Bound again, then the model dropped with the binding in place: the import goes with it.
        bound.bind_input(0, frame_lease.clone(), 0).unwrap();
        drop(frame_lease);
        bound.run(&[&[]], &mut [&mut y], deadline).unwrap();
        assert!(y == frame_model_output(4), "{}: rebound", board.name);
        drop((bound, copying));
        served.stop().unwrap();
    }
    assert_eq!(back_to(&bench, &start), start, "{}: bench resources after the session", board.name);
    let fds_end = fds_back_to(fds_start);
    assert!(fds_end <= fds_start, "{}: the process's descriptors: {fds_end}, {fds_start} at the start", board.name);
}
