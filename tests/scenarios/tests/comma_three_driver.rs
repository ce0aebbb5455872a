//! The whole stack on the comma three's driver as written (docs/kernel-rules.md R12–R19): the
//! bench's downstream model follows a reading of `drivers/char/adsprpc.c` (commaai
//! agnos-kernel-sdm845), which cannot run here; the upstream model and Linux's own driver run the
//! same checks where they apply.
//!
//! * apps_mem never hands the kernel a heap-flag map (R12): the driver would keep that memory on
//!   its global list, owned by no file;
//! * no FastRPC file is INITed twice (R13): a second session of this process, and recoveries,
//!   take a fresh file under a free identity; the kernel's init memory and channel references are
//!   back at their start when the sessions end;
//! * after a DSP restart every call on the old channel is +104 and the session recovers (R14);
//! * a channel that reopens only after the glink link comes up is recovered, and one that cannot
//!   be reopened is reported in words a firmware engineer acts on, within the board's budget (R16);
//! * nothing of ours reaches a FastRPC file before its GETINFO and INIT (R17).

use std::time::{Duration, Instant};

use hexrpc_bench::{wire, Bench, BenchConfig, ChannelReopen, ReverseRequest};
use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::{adsprpc, aee, listener, Error as SysError, Fd, Scalars};
use hexrpc_hal::internal::ListenerPlumbing;
use hexrpc_hal::{BufferView, Cause, ErrorKind, HalError, Library};
use hexrpc_runtime::launch::{Batch, BufferRef, Scalar, Signature};
use hexrpc_scenarios::catalogue::{image, ADD_OR_LATE, LATE_MS};
use hexrpc_scenarios::stack::{back_to, start as start_rig, Rig};

const WAIT: Duration = Duration::from_secs(5);
const LIB: &str = "c3_kernel";
const SIG: &str = "buf,buf,u32";

hexrpc_bench::on_both_kernels!(
    apps_mem_heap_flags_are_refused_before_the_kernel,
    no_call_reaches_a_file_before_its_getinfo_and_init,
    two_sessions_and_their_recoveries_leave_no_init_memory_or_channel_reference,
);

fn bench_with(config: BenchConfig) -> Bench {
    let bench = Bench::with_config(config);
    bench.register_library(LIB, ADD_OR_LATE.table_model());
    bench
}

fn bench_for(board: &'static Board) -> Bench {
    bench_with(BenchConfig::for_board(board))
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

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The DSP's apps_remotectl open of apps_mem on channel `fd`: the module key.
fn open_apps_mem(bench: &Bench, fd: Fd) -> u32 {
    let n = b"apps_mem\0";
    let req = ReverseRequest::packed(0, listener::REMOTECTL_OPEN, &[&words(&[n.len() as u32, 16]), n], &[8, 16]);
    let reply = bench.reverse_call(fd, req, WAIT).expect("remotectl open answered");
    assert_eq!(reply.result, 0);
    u32::from_le_bytes(wire::unpack_reply(&reply.payload, &[8, 16]).unwrap()[0][..4].try_into().unwrap())
}

/// apps_mem `request_map64` of `len` bytes with `rflags` (heap id -1, fd -1): the result sent
/// back to the DSP.
fn request_map64(bench: &Bench, fd: Fd, h: u32, rflags: u32, len: i64) -> i32 {
    let mut prim = Vec::new();
    prim.extend_from_slice(&(-1i32).to_le_bytes());
    prim.extend_from_slice(&words(&[0, rflags, 0]));
    prim.extend_from_slice(&0u64.to_le_bytes());
    prim.extend_from_slice(&len.to_le_bytes());
    let req = ReverseRequest::packed(h, Scalars::from_raw(0x0201_0100), &[&prim], &[16]);
    bench.reverse_call(fd, req, WAIT).expect("map answered").result
}

/// R12: the heap flags are refused with a DSP-side status, and the kernel never sees an MMAP
/// with them; the flag hexrpc forwards still works.
fn apps_mem_heap_flags_are_refused_before_the_kernel(board: &'static Board) {
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let (fd, _) = rig.session().listener_fd().unwrap();
        let h = open_apps_mem(&bench, fd);
        for flag in [adsprpc::ADSP_MMAP_HEAP_ADDR, adsprpc::ADSP_MMAP_REMOTE_HEAP_ADDR] {
            assert_eq!(request_map64(&bench, fd, h, flag, 1 << 20), aee::AEE_EUNSUPPORTED, "flag {flag:#x} refused");
        }
        let seen = bench.counts().mmap_flags;
        for flag in [adsprpc::ADSP_MMAP_HEAP_ADDR, adsprpc::ADSP_MMAP_REMOTE_HEAP_ADDR] {
            assert_eq!(seen.get(&flag), None, "the kernel saw no MMAP with flag {flag:#x}: {seen:?}");
        }
        assert_eq!(request_map64(&bench, fd, h, adsprpc::ADSP_MMAP_ADD_PAGES, 1 << 20), 0, "ADD_PAGES is served");
        assert_eq!(bench.counts().mmap_flags.get(&adsprpc::ADSP_MMAP_ADD_PAGES), Some(&1), "and reached the kernel once");
        assert_eq!(bench.snapshot().global_maps, 0, "nothing on the driver's global list");
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// R17: every entry point of the stack (start, library open, launch, a launch at its deadline,
/// a batch, an apps_mem map, a restart and its recovery, close) sends nothing to a FastRPC file
/// before that file's GETINFO and INIT, and takes no path that oopses the comma three's kernel.
fn no_call_reaches_a_file_before_its_getinfo_and_init(board: &'static Board) {
    let bench = bench_for(board);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        assert_eq!(bench.counts().before_init, 0, "start");
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        assert_eq!(bench.counts().before_init, 0, "library open");
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 1).unwrap();
        let out = rig.session().alloc(4096).unwrap();
        launch(&lib, &a.whole(), &out.whole(), 1, None).unwrap();
        assert_eq!(bench.counts().before_init, 0, "launch");
        let sigs = [Signature::parse(SIG).unwrap()];
        let mut batch = Batch::new(&sigs).unwrap();
        let (av, ov) = (a.whole(), out.whole());
        for _ in 0..3 {
            batch.push(0, &[BufferRef::of(&av), BufferRef::of(&ov)], &[Scalar::U32(2)]).unwrap();
        }
        assert_eq!(batch.run(&lib).unwrap().launches, 3);
        assert_eq!(bench.counts().before_init, 0, "batch");
        let (fd, _) = rig.session().listener_fd().unwrap();
        let h = open_apps_mem(&bench, fd);
        assert_eq!(request_map64(&bench, fd, h, adsprpc::ADSP_MMAP_ADD_PAGES, 1 << 16), 0);
        assert_eq!(bench.counts().before_init, 0, "apps_mem map");
        let e = launch(&lib, &a.whole(), &out.whole(), LATE_MS, Some(Duration::from_millis(30))).unwrap_err();
        assert_eq!(e.cause, Cause::Timeout, "{e}");
        rig.session().recover().unwrap();
        assert_eq!(bench.counts().before_init, 0, "deadline and recovery");
        bench.restart_dsp();
        let e = launch(&lib, &av, &ov, 1, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Recoverable, "{e}");
        rig.session().recover().unwrap();
        launch(&lib, &av, &ov, 1, None).unwrap();
        assert_eq!(bench.counts().before_init, 0, "restart and recovery");
        drop((lib, a, out));
    }
    assert_eq!(bench.counts().before_init, 0, "close");
    assert_eq!(bench.oopses(), vec![], "no kernel oops path taken");
    assert_eq!(back_to(&bench, &start), start);
}

/// R13: two sessions of this process (the second under the session bit downstream, refused by
/// name upstream), a restart and both recoveries, a deadline's recovery: no file is INITed
/// twice, and the kernel's init memory and channel references are back at their start.
fn two_sessions_and_their_recoveries_leave_no_init_memory_or_channel_reference(board: &'static Board) {
    let bench = bench_for(board);
    let start = bench.snapshot();
    assert_eq!((start.init_buffers, start.channel_refs), (0, 0));
    {
        let first = start_rig(&bench).unwrap();
        let lib1 = first.open_library(LIB, image(LIB)).unwrap();
        let second = match (board.abi, start_rig(&bench)) {
            (KernelAbi::DownstreamMsm, Ok(s)) => Some(s),
            (KernelAbi::Upstream, Err(hexrpc_runtime::Error::Hal(e))) => {
                assert_eq!(e.cause, Cause::IdentityInUse, "{e}");
                None
            }
            (abi, other) => panic!("{abi:?}: second session: {:?}", other.err()),
        };
        let s = bench.snapshot();
        let live = 1 + usize::from(second.is_some());
        assert_eq!(
            s.init_buffers,
            if board.abi == KernelAbi::DownstreamMsm { live } else { s.init_buffers },
            "one init buffer per live process"
        );
        assert_eq!(s.channel_refs, 0, "every channel reference is a live file's");
        let lib2 = second.as_ref().map(|r| r.open_library(LIB, image(LIB)).unwrap());
        bench.restart_dsp();
        for (rig, lib) in [(Some(&first), Some(&lib1)), (second.as_ref(), lib2.as_ref())] {
            let (Some(rig), Some(lib)) = (rig, lib) else { continue };
            let mut a = rig.session().alloc(4096).unwrap();
            a.fill(0, 4096, 3).unwrap();
            let o = rig.session().alloc(4096).unwrap();
            let e = launch(lib, &a.whole(), &o.whole(), 1, None).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Recoverable, "{e}");
            rig.session().recover().unwrap();
            launch(lib, &a.whole(), &o.whole(), 1, None).unwrap();
            let e = launch(lib, &a.whole(), &o.whole(), LATE_MS, Some(Duration::from_millis(30))).unwrap_err();
            assert_eq!(e.cause, Cause::Timeout, "{e}");
            rig.session().recover().unwrap();
            drop((a, o));
        }
        assert_eq!(bench.snapshot().channel_refs, 0, "after the recoveries");
        drop((lib1, lib2));
    }
    let end = back_to(&bench, &start);
    assert_eq!((end.init_buffers, end.channel_refs), (0, 0), "no init memory or channel reference leaked");
    assert_eq!(end, start);
}

/// The bench seen as a kernel of its own by the HAL's identity table: a session opened through
/// it stands for a FastRPC user of this process that is not one of ours (its channels are not in
/// the table the other sessions consult), on the very same simulated kernel.
#[derive(Clone)]
struct Foreign(Bench);

// SAFETY: every call but `kernel_instance` goes to the bench unchanged.
unsafe impl hexrpc_drivers::SeamHooks for Foreign {
    type Inner = Bench;
    fn inner(&self) -> &Bench {
        &self.0
    }
    fn kernel_instance(&self) -> u64 {
        u64::MAX
    }
}

/// R13, R3: the process id's identity is held by a FastRPC user that is not one of ours. The
/// INIT under it is refused; the session then takes the session bit on a **fresh** file (no file
/// is INITed twice), and leaves the refused file open: its close would end the other user's DSP
/// process.
#[test]
fn a_session_whose_identity_another_user_holds_takes_a_fresh_file() {
    let bench = bench_for(&hexrpc_bsp::BENCH);
    let access = hexrpc_bsp::DeviceAccess::for_bench_board(bench.board()).unwrap();
    let other = hexrpc_hal::Session::start(Foreign(bench.clone()), &access).expect("the other user's session");
    let before = bench.snapshot();
    {
        let inits_before = bench.counts().inits();
        let rig = start_rig(&bench).unwrap();
        assert_eq!(bench.counts().inits() - inits_before, 2, "one refused INIT, one on a fresh file");
        let procs = bench.dsp_processes();
        assert_eq!(procs.len(), 2, "the other user keeps its process");
        assert_ne!(procs[0].identity, procs[1].identity);
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 4).unwrap();
        let o = rig.session().alloc(4096).unwrap();
        launch(&lib, &a.whole(), &o.whole(), 1, None).unwrap();
        drop((lib, a, o));
    }
    // The refused file stays open (kept on purpose) with its init memory; no INIT on one file
    // twice leaked anything, and no channel reference is without its file.
    let mut expected = before;
    expected.open_fds += 1;
    expected.rpc_files += 1;
    expected.sessions += 1;
    expected.init_buffers += 1;
    let end = back_to(&bench, &expected);
    assert_eq!(end, expected);
    assert_eq!(end.channel_refs, 0);
    assert_eq!(bench.dsp_processes().len(), 1, "the other user's process lives on");
    drop(other);
}

/// R14: after a DSP restart the downstream driver answers every call on a pre-restart file with
/// +104 (errno untouched); the HAL reads that as a restart, and the session recovers.
#[test]
fn every_call_on_the_pre_restart_channel_is_plus_104_and_the_session_recovers() {
    let bench = bench_for(&hexrpc_bsp::BENCH);
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 5).unwrap();
        let o = rig.session().alloc(4096).unwrap();
        launch(&lib, &a.whole(), &o.whole(), 1, None).unwrap();
        let (old, _) = rig.session().listener_fd().unwrap();
        bench.restart_dsp();
        let mut args = hexrpc_drivers::adsprpc::InvokeArgs::<'_, 1>::new(3).unwrap();
        let r = hexrpc_drivers::adsprpc::invoke(&bench, old, adsprpc::CURRENT_PROCESS_HANDLE, &mut args);
        assert_eq!(r, Err(SysError::Returned(104)), "+ECONNRESET, not an errno");
        assert!(r.unwrap_err().is_dsp_restart());
        // The launch sees +104 itself, or the listener (whose call on the old channel got +104
        // first) has already marked the session.
        let e = launch(&lib, &a.whole(), &o.whole(), 1, None).unwrap_err();
        assert!(matches!(e.cause, Cause::DspRestart | Cause::NeedsRecovery), "{e}");
        assert_eq!(e.kind(), ErrorKind::Recoverable);
        rig.session().recover().unwrap();
        launch(&lib, &a.whole(), &o.whole(), 2, None).unwrap();
        let mut v = vec![0u8; 4096];
        o.read_at(0, &mut v).unwrap();
        assert!(v.iter().all(|&b| b == 7));
        drop((lib, a, o));
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// A bench whose driver waits `port_wait` for the port to connect (RPC_TIMEOUT is 5 s on the
/// device).
fn bench_with_port_wait(port_wait: Duration) -> Bench {
    let mut config = BenchConfig::for_board(&hexrpc_bsp::BENCH);
    config.port_connect_timeout = port_wait;
    bench_with(config)
}

/// A DSP restart whose channel reopens as `reopen` says: the next launch on `lib` is refused as
/// recoverable, then `recover()` runs; its outcome and how long it took.
fn restart_and_recover(
    bench: &Bench,
    rig: &Rig,
    lib: &Library<'_, Bench>,
    views: (&BufferView<'_>, &BufferView<'_>),
    reopen: ChannelReopen,
) -> (Result<(), HalError>, Duration) {
    bench.set_channel_reopen(reopen);
    bench.restart_dsp();
    assert_eq!(launch(lib, views.0, views.1, 1, None).unwrap_err().kind(), ErrorKind::Recoverable);
    let t0 = Instant::now();
    let r = rig.session().recover();
    (r, t0.elapsed())
}

/// R16: between the DSP's power-up and its glink link coming up, opening the channel fails (-1
/// after the driver's port wait, 5 s as on the device); a restart whose reopen fails for 2 s is
/// recovered: the first attempt's INIT fails only after the whole wait, and the next works.
#[test]
fn a_channel_that_reopens_2_s_after_the_restart_is_recovered() {
    let bench = bench_with_port_wait(Duration::from_secs(5));
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let mut a = rig.session().alloc(4096).unwrap();
        a.fill(0, 4096, 1).unwrap();
        let o = rig.session().alloc(4096).unwrap();
        let (r, took) =
            restart_and_recover(&bench, &rig, &lib, (&a.whole(), &o.whole()), ChannelReopen::LinkUpAfter(Duration::from_secs(2)));
        r.expect("recovered once the link is up");
        assert!(took >= Duration::from_secs(2), "it waited for the link: {took:?}");
        assert!(took < Duration::from_millis(u64::from(bench.board().recovery.budget_ms)), "{took:?}");
        assert!(bench.counts().channel_open_failures >= 1, "opens failed while the link was down");
        launch(&lib, &a.whole(), &o.whole(), 2, None).unwrap();
        drop((lib, a, o));
    }
    assert_eq!(back_to(&bench, &start), start);
}

/// R16: a channel connect that timed out leaves the port half-open and the channel cannot be
/// reopened until reboot: `recover()` returns within the board's budget and says so, with what
/// it tried.
#[test]
fn a_channel_that_cannot_be_reopened_is_reported_within_the_budget() {
    let bench = bench_with_port_wait(Duration::from_millis(400));
    let start = bench.snapshot();
    {
        let rig = start_rig(&bench).unwrap();
        let lib = rig.open_library(LIB, image(LIB)).unwrap();
        let a = rig.session().alloc(4096).unwrap();
        let o = rig.session().alloc(4096).unwrap();
        let (r, took) = restart_and_recover(&bench, &rig, &lib, (&a.whole(), &o.whole()), ChannelReopen::Stuck);
        let e = r.unwrap_err();
        let budget = Duration::from_millis(u64::from(bench.board().recovery.budget_ms));
        assert!(took <= budget, "within the budget: {took:?}");
        let Cause::ChannelStuck { attempts, waited_ms } = e.cause else { panic!("{e}") };
        assert!(attempts >= 2, "{e}");
        assert!(u128::from(waited_ms) <= took.as_millis(), "{e}");
        let text = e.to_string();
        assert!(text.contains("the CDSP channel cannot be reopened until reboot"), "{text}");
        assert!(text.contains(&format!("{attempts} process creates")), "{text}");
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        // A reboot (of the bench's channel) brings it back.
        bench.reboot_channel();
        rig.session().recover().expect("recovered after the reboot");
        launch(&lib, &a.whole(), &o.whole(), 1, None).unwrap();
        drop((lib, a, o));
    }
    assert_eq!(back_to(&bench, &start), start);
}
