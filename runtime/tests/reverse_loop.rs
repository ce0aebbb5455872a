//! The listener loop: next2 bookkeeping, get_in_bufs2 for oversize requests (gap 2), quic's
//! next2 error policy, DSP restart, and stop within 100 ms with a next2 in flight (gap 11).

#[path = "reverse_support.rs"]
mod support;

use std::collections::VecDeque;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hexrpc_drivers::adsprpc::FASTRPC_IOCTL_INVOKE;
use hexrpc_drivers::aee::*;
use hexrpc_drivers::listener::{listener_next2_in, listener_next2_out, REMOTECTL_OPEN};
use hexrpc_drivers::{Errno, Error, Fd, OpenFlags, Prot, RustixSys, Syscalls};
use hexrpc_runtime::reverse::wire::reply_output;
use hexrpc_runtime::reverse::{FilePolicy, ListenerBuffers, ListenerTransport, OwnedBuffers, ReverseService, ServeOutcome, NEXT2_BADSTATE};
use support::*;

enum Step {
    /// Deliver a request; `claimed` overrides bufsLenReq (else the payload length);
    /// `reclaimed` overrides what get_in_bufs2 reports.
    Request { handle: u32, sc: u32, payload: Vec<u8>, claimed: Option<i32>, reclaimed: Option<i32> },
    /// next2 fails with this error.
    Fail(Error),
}

fn req(handle: u32, sc: u32, payload: Vec<u8>) -> Step {
    Step::Request { handle, sc, payload, claimed: None, reclaimed: None }
}

/// A scripted DSP behind the transport trait. Records what every next2 sent.
#[derive(Default)]
struct FakeDsp {
    script: VecDeque<Step>,
    ctx: u32,
    current: Vec<u8>,
    reclaimed: Option<i32>,
    sent: Vec<(listener_next2_in, Vec<u8>)>,
    fetches: usize,
}

impl FakeDsp {
    fn new(script: Vec<Step>) -> Self {
        FakeDsp { script: script.into(), ..Default::default() }
    }
}

impl ListenerTransport for FakeDsp {
    fn next2(&mut self, send: &listener_next2_in, reply: &[u8], header: &mut listener_next2_out, request: &mut [u8]) -> Result<(), Error> {
        assert_eq!(send.prevbufsLen as usize, reply.len());
        assert_eq!(send.bufsLen as usize, request.len());
        self.sent.push((*send, reply.to_vec()));
        match self.script.pop_front() {
            None => Err(Error::Returned(NEXT2_BADSTATE)),
            Some(Step::Fail(e)) => Err(e),
            Some(Step::Request { handle, sc, payload, claimed, reclaimed }) => {
                self.ctx += 1;
                let n = payload.len().min(request.len());
                request[..n].copy_from_slice(&payload[..n]);
                *header = listener_next2_out { ctx: self.ctx, handle, sc, bufsLenReq: claimed.unwrap_or(payload.len() as i32) };
                self.reclaimed = reclaimed;
                self.current = payload;
                Ok(())
            }
        }
    }

    fn get_in_bufs2(&mut self, ctx: u32, offset: u32, rest: &mut [u8]) -> Result<i32, Error> {
        assert_eq!(ctx, self.ctx);
        self.fetches += 1;
        let src = self.current.get(offset as usize..).unwrap_or(&[]);
        let n = src.len().min(rest.len());
        rest[..n].copy_from_slice(&src[..n]);
        Ok(self.reclaimed.unwrap_or(self.current.len() as i32))
    }
}

fn open_std_payload() -> Vec<u8> {
    let n = cstr(b"apps_std");
    payload(&[&words(&[n.len() as u32, 0]), &n], &[8, 0])
}

fn run(svc: &ReverseService<'_, RecordingSys>, dsp: &mut FakeDsp, request_cap: usize) -> ServeOutcome {
    let (mut request, mut large, mut reply) = (vec![0u8; request_cap], vec![0u8; 4096], vec![0u8; REPLY]);
    let mut bufs = ListenerBuffers { request: &mut request, large: &mut large, reply: &mut reply };
    svc.serve(dsp, &mut bufs)
}

/// The (prevCtx, prevResult) that answered request number `i` (1-based ctx).
fn answer(dsp: &FakeDsp, ctx: u32) -> (i32, Vec<u8>) {
    let (s, r) = dsp.sent.iter().find(|(s, _)| s.prevCtx == ctx).expect("answered");
    (s.prevResult, r.clone())
}

#[test]
fn requests_flow_through_next2_with_results_on_the_next_call() {
    let tree = Tree::new("loop1");
    let svc = tree.service();
    // Handles are deterministic: the first module key, then FILE 100.
    let mut dsp = FakeDsp::new(vec![req(0, REMOTECTL_OPEN.raw(), open_std_payload())]);
    assert_eq!(run(&svc, &mut dsp, 4096), ServeOutcome::DspExiting);
    let (st, reply) = answer(&dsp, 1);
    assert_eq!(st, 0);
    let h = u32::from_le_bytes(reply_output(&reply, &[8, 0], 0).unwrap()[..4].try_into().unwrap());
    assert_eq!(dsp.sent[0].0, listener_next2_in { prevCtx: 0, prevResult: -1, prevbufsLen: 0, bufsLen: 4096 });

    let mut dsp = FakeDsp::new(vec![
        req(h, FOPEN_WITH_ENV, fopen_payload(b"lib.so", b"r")),
        req(h, FREAD, payload(&[&words(&[100, 32])], &[8, 32])),
        req(0x5555, FREAD, payload(&[&words(&[100, 32])], &[8, 32])),
        req(h, FCLOSE, payload(&[&words(&[100])], &[])),
    ]);
    assert_eq!(run(&svc, &mut dsp, 4096), ServeOutcome::DspExiting);
    assert_eq!(answer(&dsp, 1).0, 0);
    let (st, reply) = answer(&dsp, 2);
    assert_eq!(st, 0);
    assert_eq!(reply_output(&reply, &[8, 32], 1).unwrap(), &tree.lib[..32]);
    let (st, reply) = answer(&dsp, 3);
    assert_eq!((st, reply.len()), (AEE_ENOSUCHMOD, 0), "error: no data");
    assert_eq!(answer(&dsp, 4).0, 0);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap02_oversize_requests_are_fetched_with_get_in_bufs2_or_refused() {
    let tree = Tree::new("loop2");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let long_name = format!("{}/lib.so", tree.allowed_str());
    let big = fopen_payload(long_name.as_bytes(), b"r");
    assert!(big.len() > 64);
    let mut dsp = FakeDsp::new(vec![
        req(h, FOPEN_WITH_ENV, big.clone()),
        Step::Request { handle: h, sc: FOPEN_WITH_ENV, payload: big.clone(), claimed: Some(5000), reclaimed: None },
        Step::Request { handle: h, sc: FOPEN_WITH_ENV, payload: big.clone(), claimed: None, reclaimed: Some(big.len() as i32 + 1) },
        Step::Request { handle: h, sc: FOPEN_WITH_ENV, payload: big.clone(), claimed: Some(-1), reclaimed: None },
        req(h, FOPEN_WITH_ENV, fopen_payload(b"lib.so", b"r")),
    ]);
    // A 64-byte receive buffer: the first request needs get_in_bufs2.
    assert_eq!(run(&svc, &mut dsp, 64), ServeOutcome::DspExiting);
    assert_eq!(answer(&dsp, 1).0, 0, "fetched and served");
    assert_eq!(answer(&dsp, 2).0, AEE_EBADSIZE, "over the large buffer: refused unfetched");
    assert_eq!(answer(&dsp, 3).0, AEE_EBADPARM, "size changed between next2 and get_in_bufs2");
    assert_eq!(answer(&dsp, 4).0, AEE_EBADSIZE, "negative size");
    assert_eq!(answer(&dsp, 5).0, 0, "still serving");
    assert_eq!(dsp.fetches, 3, "requests 1, 3 and 5 are all over 64 bytes");
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn next2_errors_follow_quics_policy() {
    let tree = Tree::new("loop3");
    let svc = tree.service();
    // AEE_EINTERRUPTED: ctx 0, result -1. One other error: retried with it as the result.
    // (A stray EINTR never reaches the loop: the transport resumes the parked call itself.)
    let mut dsp = FakeDsp::new(vec![
        req(0, REMOTECTL_OPEN.raw(), open_std_payload()),
        Step::Fail(Error::Returned(AEE_EINTERRUPTED)),
        req(0x77, FCLOSE, vec![]),
        Step::Fail(Error::Os(Errno::EIO)),
        req(0, REMOTECTL_OPEN.raw(), open_std_payload()),
        Step::Fail(Error::Os(Errno::EIO)),
        Step::Fail(Error::Returned(0x4242)),
    ]);
    let out = run(&svc, &mut dsp, 4096);
    assert_eq!(out, ServeOutcome::Failed(Error::Returned(0x4242)), "a second consecutive failure ends the loop");
    let s: Vec<_> = dsp.sent.iter().map(|(s, _)| (s.prevCtx, s.prevResult)).collect();
    assert_eq!(s[1], (1, 0), "answer to ctx 1");
    assert_eq!(s[2], (0, -1), "EINTERRUPTED: reset");
    assert_eq!(s[3], (2, AEE_ENOSUCHMOD));
    assert_eq!(s[4], (2, AEE_EFAILED), "one failure: retried with the error as result");
    assert_eq!(s[5], (3, 0));
    assert_eq!(svc.metrics().snapshot().transport_errors, 3);

    let mut dsp = FakeDsp::new(vec![req(0, REMOTECTL_OPEN.raw(), open_std_payload()), Step::Fail(Error::Returned(104))]);
    assert_eq!(run(&svc, &mut dsp, 4096), ServeOutcome::DspRestarted, "a DSP restart is a distinct outcome");
    let mut dsp = FakeDsp::new(vec![Step::Fail(Error::Os(Errno::ECONNRESET))]);
    assert_eq!(run(&svc, &mut dsp, 4096), ServeOutcome::DspRestarted);

    svc.stop_signal().request();
    let mut dsp = FakeDsp::new(vec![req(0, REMOTECTL_OPEN.raw(), open_std_payload())]);
    assert_eq!(run(&svc, &mut dsp, 4096), ServeOutcome::Stopped);
    assert!(dsp.sent.is_empty());
    svc.stop_signal().reset();
    assert_canary_untouched(&svc, &tree);
}

/// A seam whose INVOKE blocks until `interrupt` is called, then fails with EINTR (as the driver
/// does for a signal); everything else is the real OS.
#[derive(Default)]
struct BlockingSys {
    interrupted: Mutex<bool>,
    cv: Condvar,
    invokes: AtomicUsize,
    interrupts: AtomicUsize,
    retired: AtomicUsize,
}

// SAFETY: file calls and the thread id go to `RustixSys`; `ioctl` never touches the argument;
// no memory is shared (`mmap` refuses).
unsafe impl hexrpc_drivers::SeamHooks for BlockingSys {
    type Inner = RustixSys;
    fn inner(&self) -> &RustixSys {
        &RustixSys
    }
    unsafe fn ioctl(&self, _fd: Fd, request: u32, _arg: *mut c_void) -> Result<i32, Errno> {
        if request != FASTRPC_IOCTL_INVOKE {
            return Err(Errno::ENOTTY);
        }
        self.invokes.fetch_add(1, Ordering::SeqCst);
        let mut flag = self.interrupted.lock().unwrap();
        while !*flag {
            flag = self.cv.wait(flag).unwrap();
        }
        *flag = false;
        Err(Errno::EINTR)
    }
    unsafe fn mmap(&self, _: Fd, _: usize, _: Prot, _: u64) -> Result<NonNull<u8>, Errno> {
        Err(Errno::ENODEV)
    }
    unsafe fn munmap(&self, _: NonNull<u8>, _: usize) -> Result<(), Errno> {
        Err(Errno::EINVAL)
    }
    fn interrupt(&self, _tid: i32) -> Result<(), Errno> {
        self.interrupts.fetch_add(1, Ordering::SeqCst);
        *self.interrupted.lock().unwrap() = true;
        self.cv.notify_all();
        Ok(())
    }
    fn retire(&self, _fd: hexrpc_drivers::BorrowedFd<'_>) -> Result<(), Errno> {
        // Nothing here writes through a parked call's pointers: retiring is only recorded.
        self.retired.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A real descriptor to stand for the channel: `BlockingSys` answers the ioctls itself and only
/// counts retires, so the descriptor is never used, only closed at the end.
fn null_channel() -> Arc<hexrpc_hal::OwnedFd<BlockingSys>> {
    Arc::new(hexrpc_hal::OwnedFd::new(BlockingSys::default(), RustixSys.open(c"/dev/null", OpenFlags::READ_ONLY).unwrap()))
}

#[test]
fn gap11_stop_returns_within_100ms_with_next2_in_flight() {
    let policy = FilePolicy::new(&["/nonexistent/hexrpc"], Tree::limits()).unwrap();
    for _ in 0..5 {
        let svc = Arc::new(ReverseService::new(BlockingSys::default(), Fd(3), policy.clone()));
        let bufs = OwnedBuffers::for_service(&svc);
        let handle = svc.clone().spawn(null_channel(), bufs).unwrap();
        let start = Instant::now();
        while svc.sys().invokes.load(Ordering::SeqCst) == 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "the loop never called next2");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!handle.is_finished(), "blocked in next2");
        let t = Instant::now();
        let out = handle.stop().expect("stopped and joined");
        let took = t.elapsed();
        assert_eq!(out, ServeOutcome::Stopped);
        // Joined, not waited out: the stop timeout would end in StopError (host time on a loaded
        // machine, so the bound is half that timeout, not a speed target).
        assert!(took < hexrpc_runtime::reverse::DEFAULT_STOP_TIMEOUT / 2, "stop took {took:?}");
        assert!(svc.sys().interrupts.load(Ordering::SeqCst) >= 1);
        assert_eq!(svc.sys().retired.load(Ordering::SeqCst), 1, "the abandoned channel was retired");
        assert_eq!(svc.stop_signal().thread(), None);
    }
}

#[test]
fn a_stop_requested_before_the_thread_blocks_is_not_lost() {
    let policy = FilePolicy::new(&["/nonexistent/hexrpc"], Tree::limits()).unwrap();
    let svc = Arc::new(ReverseService::new(BlockingSys::default(), Fd(3), policy));
    let handle = svc.clone().spawn(null_channel(), OwnedBuffers::for_service(&svc)).unwrap();
    let t = Instant::now();
    assert_eq!(handle.stop().unwrap(), ServeOutcome::Stopped);
    // Not lost: a lost stop would wait out the stop timeout (host time on a loaded machine, so the
    // bound is half that timeout, as in the other stop tests, not a speed target).
    assert!(t.elapsed() < hexrpc_runtime::reverse::DEFAULT_STOP_TIMEOUT / 2, "stop took {:?}", t.elapsed());
}
