//! Every init stage either succeeds or gives back everything it acquired, and names itself in
//! its error.

mod common;

use hexrpc_bench::{Bench, CallKind, DspCallKind, Fault, FaultTarget};
use hexrpc_bsp::DeviceAccess;
use hexrpc_drivers::Errno;
use hexrpc_hal::{Cause, IonOpened, Session, Stage};

fn start(bench: &Bench) -> Result<Session<Bench>, hexrpc_hal::HalError> {
    Session::start(bench.clone(), &DeviceAccess::for_bench())
}

#[test]
fn a_failure_at_each_stage_names_it_and_leaks_nothing() {
    type Setup = fn(&Bench);
    let cases: Vec<(&str, Setup, Stage, Option<Cause>)> = vec![
        ("ion node missing", |b| b.set_missing("/bench/dev/ion"), Stage::IonOpen, Some(Cause::Os(Errno::ENOENT))),
        ("ion node unreadable", |b| b.set_unreadable("/bench/dev/ion"), Stage::IonOpen, Some(Cause::Os(Errno::EACCES))),
        ("shell missing", |b| b.set_missing("/bench/dsp/cdsp/fastrpc_shell_3"), Stage::ShellStaged, Some(Cause::Os(Errno::ENOENT))),
        ("shell not an ELF", |b| b.add_file("/bench/dsp/cdsp/fastrpc_shell_3", vec![0u8; 4096]), Stage::ShellStaged, Some(Cause::BadShell)),
        (
            "shell ION alloc fails",
            |b| b.inject(FaultTarget::Call(CallKind::IonAlloc), 1, Fault::Errno(Errno::ENOMEM)),
            Stage::ShellStaged,
            Some(Cause::Os(Errno::ENOMEM)),
        ),
        (
            "shell share fails",
            |b| b.inject(FaultTarget::Call(CallKind::IonShare), 1, Fault::Errno(Errno::EMFILE)),
            Stage::ShellStaged,
            None,
        ),
        ("shell mmap fails", |b| b.inject(FaultTarget::Call(CallKind::Mmap), 1, Fault::Errno(Errno::ENOMEM)), Stage::ShellStaged, None),
        ("shell read fails", |b| b.inject(FaultTarget::Call(CallKind::Pread), 1, Fault::Errno(Errno::EIO)), Stage::ShellStaged, None),
        ("rpc node missing", |b| b.set_missing("/bench/dev/adsprpc-smd"), Stage::ChannelOpen, Some(Cause::Os(Errno::ENOENT))),
        ("GETINFO fails", |b| b.inject(FaultTarget::Call(CallKind::RpcGetinfo), 1, Fault::Errno(Errno::EPERM)), Stage::ChannelOpen, None),
        ("CONTROL fails", |b| b.inject(FaultTarget::Call(CallKind::RpcControl), 1, Fault::Errno(Errno::ENOTTY)), Stage::ChannelOpen, None),
        ("INIT fails", |b| b.inject(FaultTarget::Call(CallKind::RpcInit), 1, Fault::Errno(Errno::EPERM)), Stage::ProcessCreate, None),
        ("DSP down", |b| b.set_dsp_available(false), Stage::ProcessCreate, Some(Cause::Os(Errno::ENOTCONN))),
        (
            "DSP refuses the process",
            |b| b.inject(FaultTarget::Dsp(DspCallKind::CreateProcess), 1, Fault::Returned(14)),
            Stage::ProcessCreate,
            None,
        ),
        (
            "init2 refused",
            |b| b.inject(FaultTarget::Dsp(DspCallKind::ListenerInit2), 1, Fault::Returned(14)),
            Stage::ListenerAttach,
            Some(Cause::Dsp(14)),
        ),
        (
            "init2 ioctl fails",
            |b| b.inject(FaultTarget::Call(CallKind::RpcInvoke), 1, Fault::Errno(Errno::EPERM)),
            Stage::ListenerAttach,
            Some(Cause::Os(Errno::EPERM)),
        ),
    ];
    for (what, setup, stage, cause) in cases {
        let bench = Bench::new();
        let start_counts = bench.snapshot();
        setup(&bench);
        let err = start(&bench).expect_err(what);
        assert_eq!(err.stage, stage, "{what}: {err}");
        if let Some(c) = cause {
            assert_eq!(err.cause, c, "{what}: {err}");
        }
        assert!(!err.to_string().is_empty());
        assert_eq!(common::back_to(&bench, &start_counts), start_counts, "{what}: everything given back");
    }
}

#[test]
fn a_full_start_and_drop_gives_everything_back() {
    let bench = Bench::new();
    let start_counts = bench.snapshot();
    let session = start(&bench).expect("session");
    let live = bench.snapshot();
    assert_eq!(live.dsp_processes, 1);
    assert_eq!(live.rpc_files, 1);
    assert_eq!(live.ion_clients, 1);
    assert_eq!(live.ion_handles, 0, "the shell buffer is released once the process exists");
    assert!(session.is_healthy());
    drop(session);
    assert_eq!(common::back_to(&bench, &start_counts), start_counts);
    let c = bench.counts();
    assert!(c.dsp_of(DspCallKind::ProcessExit) >= 1, "teardown asks the process to exit");
}

#[test]
fn each_stage_can_be_dropped_on_its_own() {
    let bench = Bench::new();
    let start_counts = bench.snapshot();
    let access = DeviceAccess::for_bench();
    let ion = IonOpened::open(bench.clone(), &access).unwrap();
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
    assert_eq!(common::back_to(&bench, &start_counts), start_counts);
    let channel = IonOpened::open(bench.clone(), &access).unwrap().stage_shell().unwrap().open_channel().unwrap();
    assert_eq!(channel.info() & 1, 1, "the bench's session has an SMMU");
    drop(channel);
    assert_eq!(common::back_to(&bench, &start_counts), start_counts);
    let process = IonOpened::open(bench.clone(), &access).unwrap().stage_shell().unwrap().open_channel().unwrap().create_process().unwrap();
    assert_eq!(bench.snapshot().dsp_processes, 1);
    drop(process);
    assert_eq!(common::back_to(&bench, &start_counts), start_counts);
}
