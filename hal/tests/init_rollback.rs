//! Every init stage either succeeds or gives back everything it acquired, and names itself in
//! its error.

use std::time::Duration;

use hexrpc_bench::{Bench, CallKind, DspCallKind, Fault, FaultTarget};
use hexrpc_bsp::{Board, DeviceAccess, KernelAbi};
use hexrpc_drivers::Errno;
use hexrpc_hal::{Cause, HeapOpened, Session, ShellSearch, Stage};

/// How long teardown on other threads may take to give everything back.
const SETTLE: Duration = Duration::from_secs(2);

fn start(bench: &Bench) -> Result<Session<Bench>, hexrpc_hal::HalError> {
    Session::start(bench.clone(), &DeviceAccess::for_bench_board(bench.board()).expect("a bench board"))
}

hexrpc_bench::on_both_kernels!(
    a_failure_at_each_stage_names_it_and_leaks_nothing,
    a_full_start_and_drop_gives_everything_back,
    each_stage_can_be_dropped_on_its_own
);

type Setup = Box<dyn Fn(&Bench)>;

fn path(c: &core::ffi::CStr) -> String {
    c.to_string_lossy().into_owned()
}

/// (what, setup, failing stage, cause) for every stage of `board`'s init sequence.
fn cases(board: &'static Board) -> Vec<(&'static str, Setup, Stage, Option<Cause>)> {
    let (alloc_node, rpc_node, shell) = (path(board.ion_path), path(board.rpc_path), path(board.shell_path));
    let upstream = board.abi == KernelAbi::Upstream;
    let (alloc_kind, init_kind, invoke_kind) = if upstream {
        (CallKind::HeapAlloc, CallKind::UpInitCreate, CallKind::UpInvoke)
    } else {
        (CallKind::IonAlloc, CallKind::RpcInit, CallKind::RpcInvoke)
    };
    let mut v: Vec<(&'static str, Setup, Stage, Option<Cause>)> = Vec::new();
    let (a1, a2) = (alloc_node.clone(), alloc_node);
    v.push(("allocator node missing", Box::new(move |b| b.set_missing(&a1)), Stage::HeapOpen, Some(Cause::Os(Errno::ENOENT))));
    v.push(("allocator node unreadable", Box::new(move |b| b.set_unreadable(&a2)), Stage::HeapOpen, Some(Cause::Os(Errno::EACCES))));
    let (s1, s2) = (shell.clone(), shell);
    v.push((
        "shell missing",
        Box::new(move |b| b.set_missing(&s1)),
        Stage::ShellStaged,
        Some(Cause::ShellNotFound(ShellSearch(board.shell_search))),
    ));
    v.push(("shell not an ELF", Box::new(move |b| b.add_file(&s2, vec![0u8; 4096])), Stage::ShellStaged, Some(Cause::BadShell)));
    v.push((
        "shell alloc fails",
        Box::new(move |b| b.inject(FaultTarget::Call(alloc_kind), 1, Fault::Errno(Errno::ENOMEM))),
        Stage::ShellStaged,
        Some(Cause::Os(Errno::ENOMEM)),
    ));
    if !upstream {
        v.push((
            "shell share fails",
            Box::new(|b| b.inject(FaultTarget::Call(CallKind::IonShare), 1, Fault::Errno(Errno::EMFILE))),
            Stage::ShellStaged,
            None,
        ));
    }
    v.push((
        "shell mmap fails",
        Box::new(|b| b.inject(FaultTarget::Call(CallKind::Mmap), 1, Fault::Errno(Errno::ENOMEM))),
        Stage::ShellStaged,
        None,
    ));
    v.push((
        "shell read fails",
        Box::new(|b| b.inject(FaultTarget::Call(CallKind::Pread), 1, Fault::Errno(Errno::EIO))),
        Stage::ShellStaged,
        None,
    ));
    v.push(("rpc node missing", Box::new(move |b| b.set_missing(&rpc_node)), Stage::ChannelOpen, Some(Cause::Os(Errno::ENOENT))));
    let rpc_open = 3 + board.shell_search.iter().position(|p| *p == board.shell_path).unwrap_or(0) as u32;
    if upstream {
        // The node goes away with the DSP; a kernel message that outlives the driver's 10 s.
        v.push(("DSP down", Box::new(|b| b.set_dsp_available(false)), Stage::ChannelOpen, Some(Cause::Os(Errno::ENOENT))));
        v.push((
            "no session free",
            // Opens: the heap node, the shell paths tried up to the one that exists, the node.
            Box::new(move |b| b.inject(FaultTarget::Call(CallKind::Open), rpc_open, Fault::Errno(Errno::EBUSY))),
            Stage::ChannelOpen,
            Some(Cause::Os(Errno::EBUSY)),
        ));
    } else {
        v.push((
            "GETINFO fails",
            Box::new(|b| b.inject(FaultTarget::Call(CallKind::RpcGetinfo), 1, Fault::Errno(Errno::EPERM))),
            Stage::ChannelOpen,
            None,
        ));
        v.push((
            "CONTROL fails",
            Box::new(|b| b.inject(FaultTarget::Call(CallKind::RpcControl), 1, Fault::Errno(Errno::ENOTTY))),
            Stage::ChannelOpen,
            None,
        ));
        v.push(("DSP down", Box::new(|b| b.set_dsp_available(false)), Stage::ProcessCreate, Some(Cause::Os(Errno::ENOTCONN))));
    }
    v.push((
        "INIT fails",
        Box::new(move |b| b.inject(FaultTarget::Call(init_kind), 1, Fault::Errno(Errno::EPERM))),
        Stage::ProcessCreate,
        None,
    ));
    v.push((
        "DSP refuses the process",
        Box::new(|b| b.inject(FaultTarget::Dsp(DspCallKind::CreateProcess), 1, Fault::Returned(14))),
        Stage::ProcessCreate,
        None,
    ));
    v.push((
        "init2 refused",
        Box::new(|b| b.inject(FaultTarget::Dsp(DspCallKind::ListenerInit2), 1, Fault::Returned(14))),
        Stage::ListenerAttach,
        Some(Cause::Dsp(14)),
    ));
    v.push((
        "init2 ioctl fails",
        Box::new(move |b| b.inject(FaultTarget::Call(invoke_kind), 1, Fault::Errno(Errno::EPERM))),
        Stage::ListenerAttach,
        Some(Cause::Os(Errno::EPERM)),
    ));
    v
}

fn a_failure_at_each_stage_names_it_and_leaks_nothing(board: &'static Board) {
    for (what, setup, stage, cause) in cases(board) {
        let bench = Bench::for_board(board);
        let start_counts = bench.snapshot();
        setup(&bench);
        let err = start(&bench).expect_err(what);
        assert_eq!(err.stage, stage, "{what}: {err}");
        if let Some(c) = cause {
            assert_eq!(err.cause, c, "{what}: {err}");
        }
        assert!(!err.to_string().is_empty());
        assert_eq!(bench.settle(&start_counts, SETTLE), start_counts, "{what}: everything given back");
    }
}

fn a_full_start_and_drop_gives_everything_back(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start_counts = bench.snapshot();
    let session = start(&bench).expect("session");
    let live = bench.snapshot();
    assert_eq!(live.dsp_processes, 1);
    assert_eq!(live.rpc_files, 1);
    if board.abi == KernelAbi::DownstreamMsm {
        assert_eq!(live.ion_clients, 1);
        assert_eq!(live.ion_handles, 0, "the shell buffer is released once the process exists");
    } else {
        // The upstream driver keeps its map of the shell buffer until the channel closes.
        assert_eq!(live.ion_buffers, 1, "only the shell, held by the driver's map");
    }
    assert!(session.is_healthy());
    drop(session);
    assert_eq!(bench.settle(&start_counts, SETTLE), start_counts);
    let c = bench.counts();
    assert!(c.dsp_of(DspCallKind::ProcessExit) >= 1, "teardown asks the process to exit");
}

fn each_stage_can_be_dropped_on_its_own(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start_counts = bench.snapshot();
    let access = DeviceAccess::for_bench_board(board).expect("a bench board");
    let ion = HeapOpened::open(bench.clone(), &access).unwrap();
    {
        let mut lease = ion.alloc(10_000).unwrap();
        assert_eq!(lease.len(), 12_288, "rounded up to pages");
        lease.write_at(4096, b"hello").unwrap();
        let mut back = [0u8; 5];
        lease.read_at(4096, &mut back).unwrap();
        assert_eq!(&back, b"hello");
        assert!(lease.view(12_000, 289).is_err(), "views are checked against the lease");
        assert!(lease.view(usize::MAX, 2).is_err(), "no overflow");
        let v = lease.view(100, 1000).unwrap();
        let vv = v.view(10, 20).unwrap();
        assert_eq!((vv.offset(), vv.len(), vv.lease_len()), (110, 20, 12_288));
        assert!(v.view(990, 11).is_err());
        lease.cache(hexrpc_drivers::ion::CacheOp::Clean, 0, 4096).unwrap();
        assert!(lease.cache(hexrpc_drivers::ion::CacheOp::Invalidate, 12_000, 4096).is_err());
    }
    let staged = ion.stage_shell().unwrap();
    assert!(staged.shell_len() > 0);
    drop(staged);
    assert_eq!(bench.settle(&start_counts, SETTLE), start_counts);
    let channel = HeapOpened::open(bench.clone(), &access).unwrap().stage_shell().unwrap().open_channel().unwrap();
    assert_eq!(channel.info() & 1, 1, "the bench's session has an SMMU");
    drop(channel);
    assert_eq!(bench.settle(&start_counts, SETTLE), start_counts);
    let process =
        HeapOpened::open(bench.clone(), &access).unwrap().stage_shell().unwrap().open_channel().unwrap().create_process().unwrap();
    assert_eq!(bench.snapshot().dsp_processes, 1);
    drop(process);
    assert_eq!(bench.settle(&start_counts, SETTLE), start_counts);
}
