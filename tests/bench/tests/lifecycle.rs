//! Restart, interrupt / park / resume, teardown accounting after faults at each stage,
//! concurrency, and the simulated cost model.

mod common;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use hexrpc_bench::elf::hexagon_elf;
use hexrpc_bench::{Bench, BenchConfig, CallKind, CostModel, DspCallKind, EntryVersion, Fault, FaultTarget, LibraryModel};
use hexrpc_drivers::adsprpc::{self, InvokeArgs};
use hexrpc_drivers::{aee, Errno, Error, Fd, OpenFlags, Syscalls};

const WAIT: Duration = Duration::from_secs(10);

fn setup_lib(b: &Bench, tag: &str) -> (Session, std::thread::JoinHandle<ListenerLog>, u32) {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("lib"), hexagon_elf(4096)).unwrap();
    b.register_library(
        "lib",
        LibraryModel::new(EntryVersion::V2, 1, 0, |k| {
            let _ = k.write(0, 0, &[0x5A; 4]);
        }),
    );
    let s = open_session(b);
    let l = spawn_listener(b, s.rpc, dir);
    let h = open_lib(b, s.rpc, "lib").unwrap().unwrap();
    (s, l, h)
}

/// A library call with one out-buffer (method 2, one 8-byte output). The v2 entry refuses the
/// header, so a plain successful return needs the method-7 variant below.
/// One raw INVOKE that returns `EINTR` when interrupted (the drivers' typed calls resume a
/// parked call instead); these tests observe the driver's parking rules themselves.
fn call_out(b: &Bench, rpc: Fd, h: u32, method: u8, out: &mut [u8; 8]) -> Result<(), Error> {
    let mut a = InvokeArgs::<'_, 1>::new(method).unwrap();
    a.output(out).unwrap();
    let mut inv = adsprpc::fastrpc_ioctl_invoke { handle: h, sc: a.scalars().raw(), pra: a.pra().as_ptr() as u64 };
    // SAFETY: `inv` is a live struct of the request's size; its `pra` points at the initialized
    // entry of `a`, which describes `out`. A parked call may later be resumed into `out`: no test
    // here resumes a parked call whose buffer is gone (one resumes while it is alive, the others
    // free the call by closing the file).
    adsprpc::check(unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_INVOKE, (&mut inv as *mut adsprpc::fastrpc_ioctl_invoke).cast()) })
}

#[test]
fn restart_resets_calls_in_flight_and_stales_the_fd() {
    let b = bench();
    let start = b.snapshot();
    let (s, l, h) = setup_lib(&b, "restart");
    b.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
    let tid = Arc::new(AtomicI32::new(0));
    let t = {
        let (b, tid, rpc) = (b.clone(), tid.clone(), s.rpc);
        std::thread::spawn(move || {
            tid.store(b.thread_id(), Ordering::SeqCst);
            let mut out = [0u8; 8];
            let r = call_out(&b, rpc, h, 7, &mut out);
            (r, out)
        })
    };
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    assert!(b.wait_until_blocked(tid.load(Ordering::SeqCst), WAIT));
    wait_dsp_calls(&b, 1);
    b.restart_dsp();
    let (r, out) = t.join().unwrap();
    assert_eq!(r, Err(Error::Returned(104)), "in flight: -1 overwritten with +ECONNRESET");
    assert!(r.unwrap_err().is_dsp_restart());
    assert_eq!(out, [0; 8], "no copy-back");
    // The listener's next2 was in flight too.
    assert_eq!(l.join().unwrap().exit, Some(Error::Returned(104)));
    // Every later call on the old fd fails at send; the process and its library are gone.
    let mut out = [0u8; 8];
    assert_eq!(call_out(&b, s.rpc, h, 7, &mut out), Err(Error::Os(Errno::ECONNRESET)));
    assert_eq!(adsprpc::mmap(&b, s.rpc, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Err(Error::Os(Errno::ECONNRESET)));
    let snap = b.snapshot();
    assert_eq!((snap.dsp_processes, snap.loaded_libraries, snap.hap_mappings), (0, 0, 0));
    // A new session works (the library handle from before does not exist there).
    let s2 = open_session(&b);
    assert_eq!(call_out(&b, s2.rpc, h, 7, &mut out), Err(Error::Returned(aee::AEE_EINVHANDLE)));
    s2.close(&b);
    b.close_raw(s.rpc).unwrap();
    b.close_raw(s.ion).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

/// Waits until the DSP has started `n` library calls (a DSP worker may start after the host
/// thread is already blocked).
fn wait_dsp_calls(b: &Bench, n: u64) {
    let end = std::time::Instant::now() + WAIT;
    while b.counts().dsp_of(DspCallKind::Library) < n {
        assert!(std::time::Instant::now() < end, "the DSP never started the call");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn spawn_tid<T: Send + 'static>(f: impl FnOnce(Arc<AtomicI32>) -> T + Send + 'static) -> (Arc<AtomicI32>, std::thread::JoinHandle<T>) {
    let tid = Arc::new(AtomicI32::new(0));
    let t = {
        let tid = tid.clone();
        std::thread::spawn(move || f(tid))
    };
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    (tid, t)
}

#[test]
fn interrupted_invoke_is_parked_and_resumed_by_the_same_thread_with_the_same_sc() {
    let b = bench();
    let start = b.snapshot();
    let (s, l, h) = setup_lib(&b, "park");
    b.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (res_tx, res_rx) = std::sync::mpsc::channel::<Result<(), Error>>();
    let (tid, t) = {
        let (b, rpc) = (b.clone(), s.rpc);
        spawn_tid(move |tid| {
            tid.store(b.thread_id(), Ordering::SeqCst);
            // The first call's out-buffer stays alive: a resumed call copies back into it.
            let mut first = [0u8; 8];
            res_tx.send(call_out(&b, rpc, h, 7, &mut first)).unwrap();
            let mut other = [0u8; 8];
            res_tx.send(call_out(&b, rpc, h, 6, &mut other)).unwrap();
            go_rx.recv().unwrap();
            let mut second = [0u8; 8];
            res_tx.send(call_out(&b, rpc, h, 7, &mut second)).unwrap();
            (first, second)
        })
    };
    let tid = tid.load(Ordering::SeqCst);
    assert!(b.wait_until_blocked(tid, WAIT));
    wait_dsp_calls(&b, 1);
    b.interrupt(tid).unwrap();
    assert_eq!(res_rx.recv().unwrap(), Err(Error::Os(Errno::EINTR)));
    let snap = b.snapshot();
    assert_eq!((snap.parked, snap.contexts), (1, 2), "the parked call and the listener's next2");
    assert_eq!(res_rx.recv().unwrap(), Err(Error::Os(Errno::EPERM)), "another sc from the parked thread");
    assert_eq!(b.snapshot().parked, 1);
    // Another thread with the same sc does not resume it: it makes a call of its own.
    let other = {
        let (b, rpc) = (b.clone(), s.rpc);
        std::thread::spawn(move || {
            let mut out = [0u8; 8];
            call_out(&b, rpc, h, 7, &mut out)
        })
    };
    assert_eq!(other.join().unwrap(), Ok(()));
    assert_eq!(b.snapshot().parked, 1);
    // Same thread, same sc: resumed; it waits for the original call's answer.
    go_tx.send(()).unwrap();
    assert!(b.wait_until_blocked(tid, WAIT));
    assert_eq!(b.snapshot().parked, 0);
    b.release_hangs();
    assert_eq!(res_rx.recv().unwrap(), Ok(()));
    let (first, second) = t.join().unwrap();
    assert_eq!(first, [hexrpc_bench::STALE_BYTE; 8], "copied back to the interrupted call's buffer");
    assert_eq!(second, [0; 8], "not to the resuming call's");
    assert_eq!(b.counts().interrupts_delivered, 1);
    s.close(&b);
    l.join().unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

#[test]
fn close_frees_a_parked_invoke() {
    let b = bench();
    let start = b.snapshot();
    let (s, l, h) = setup_lib(&b, "closepark");
    b.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
    let (tid, t) = {
        let (b, rpc) = (b.clone(), s.rpc);
        spawn_tid(move |tid| {
            tid.store(b.thread_id(), Ordering::SeqCst);
            let mut out = [0u8; 8];
            call_out(&b, rpc, h, 7, &mut out)
        })
    };
    let tid = tid.load(Ordering::SeqCst);
    assert!(b.wait_until_blocked(tid, WAIT));
    wait_dsp_calls(&b, 1);
    b.interrupt(tid).unwrap();
    assert_eq!(t.join().unwrap(), Err(Error::Os(Errno::EINTR)));
    assert_eq!(b.snapshot().parked, 1);
    s.close(&b);
    l.join().unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start, "the parked context, process and hung DSP job are gone");
}

#[test]
fn interrupts_to_threads_not_blocked_are_lost() {
    let b = bench();
    b.interrupt(b.thread_id()).unwrap();
    assert_eq!(b.interrupt(0), Err(Errno(3)));
    let c = b.counts();
    assert_eq!((c.interrupts_delivered, c.interrupts_lost), (0, 1));
    // The lost interrupt does not hit a later wait.
    let s = open_session(&b);
    assert_eq!(process_exit(&b, s.rpc), Ok(()));
    s.close(&b);
}

#[test]
fn concurrent_calls_while_the_listener_waits() {
    let b = bench();
    let start = b.snapshot();
    let (s, l, h) = setup_lib(&b, "concurrent");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (b, s_ion, rpc) = (b.clone(), s.ion, s.rpc);
            std::thread::spawn(move || {
                let mut buf = alloc(&b, s_ion, 4096);
                for _ in 0..8 {
                    buf.map.write_at(0, &[0; 4]).unwrap();
                    let (r, _) = call_v2(&b, rpc, h, &[(buf.fd, 0, 64, 4096)], &[]);
                    assert_eq!(r, Ok(()));
                    let mut got = [0u8; 4];
                    buf.map.read_at(0, &mut got).unwrap();
                    assert_eq!(got, [0x5A; 4]);
                }
                // Four threads release and allocate concurrently, so a number freed here may be
                // the next thread's: its maps go first, as the real drivers require.
                buf.release_after_calls(&b, s_ion, rpc);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(b.counts().dsp_of(DspCallKind::Library), 32);
    assert_eq!(b.ledger_mismatches(), 0);
    s.close(&b);
    l.join().unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

/// Session setup as a HAL would do it, undoing every completed stage on failure.
fn try_session(b: &Bench) -> Result<(), Error> {
    let board = b.board();
    let ion_fd = b.open_raw(board.ion_path, OpenFlags::READ_ONLY)?;
    let r = (|| {
        let rpc = b.open_raw(board.rpc_path, OpenFlags::READ_ONLY)?;
        let r = (|| {
            adsprpc::getinfo(b, rpc, board.channel)?;
            adsprpc::control_kalloc(b, rpc)?;
            let sfd = b.open_raw(board.shell_path, OpenFlags::READ_ONLY)?;
            let r = (|| {
                let len = b.fstat(sfd)?.size as usize;
                let mut d =
                    hexrpc_drivers::ion::ion_allocation_data { len: len as u64, heap_id_mask: board.heap_mask(), ..Default::default() };
                hexrpc_drivers::ion::alloc(b, ion_fd, &mut d)?;
                let r = (|| {
                    let share = hexrpc_drivers::ion::share(b, ion_fd, d.handle)?.into_raw();
                    let r = (|| {
                        let mut map = hexrpc_drivers::Mapping::map_shared(b.clone(), share, len, hexrpc_drivers::Prot::ReadWrite)?;
                        let mut image = vec![0u8; len];
                        b.pread(sfd, &mut image, 0)?;
                        map.write_at(0, &image).map_err(|_| Error::Invalid)?;
                        adsprpc::init(b, rpc, adsprpc::FASTRPC_INIT_CREATE, &map, share, len as u32)?;
                        listener_init2(b, rpc)?;
                        process_exit(b, rpc)
                    })();
                    let _ = b.close_raw(share);
                    r
                })();
                let _ = hexrpc_drivers::ion::free(b, ion_fd, d.handle);
                r
            })();
            let _ = b.close_raw(sfd);
            r
        })();
        let _ = b.close_raw(rpc);
        r
    })();
    let _ = b.close_raw(ion_fd);
    r
}

#[test]
fn a_fault_at_every_stage_leaves_nothing_behind() {
    let stages: &[(FaultTarget, u32)] = &[
        (FaultTarget::Call(CallKind::Open), 1),
        (FaultTarget::Call(CallKind::Open), 2),
        (FaultTarget::Call(CallKind::RpcGetinfo), 1),
        (FaultTarget::Call(CallKind::RpcControl), 1),
        (FaultTarget::Call(CallKind::Open), 3),
        (FaultTarget::Call(CallKind::Fstat), 1),
        (FaultTarget::Call(CallKind::IonAlloc), 1),
        (FaultTarget::Call(CallKind::IonShare), 1),
        (FaultTarget::Call(CallKind::Mmap), 1),
        (FaultTarget::Call(CallKind::Pread), 1),
        (FaultTarget::Call(CallKind::RpcInit), 1),
        (FaultTarget::Dsp(DspCallKind::CreateProcess), 1),
        (FaultTarget::Call(CallKind::RpcInvoke), 1),
        (FaultTarget::Dsp(DspCallKind::ListenerInit2), 1),
    ];
    for &(target, nth) in stages {
        let b = bench();
        let start = b.snapshot();
        b.inject(target, nth, Fault::Errno(Errno::EIO));
        let r = try_session(&b);
        assert!(r.is_err(), "{target:?} #{nth}: {r:?}");
        assert_eq!(b.settle(&start, Duration::from_secs(2)), start, "{target:?} #{nth}");
    }
    let b = bench();
    let start = b.snapshot();
    assert_eq!(try_session(&b), Ok(()));
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
    assert_eq!(b.counts().of(CallKind::Close), 4);
}

#[test]
fn simulated_cost_is_recorded_and_labelled() {
    let cost = CostModel {
        per_crossing: Duration::from_micros(25),
        per_kib_copied: Duration::from_micros(1),
        sleep: false,
        ..CostModel::default()
    };
    let b = Bench::with_config(BenchConfig { cost, ..Default::default() });
    let s = open_session(&b);
    let big = vec![1u8; 8192];
    for _ in 0..5 {
        let mut a = InvokeArgs::<'_, 1>::new(2).unwrap();
        a.input(&big).unwrap();
        let _ = adsprpc::invoke(&b, s.rpc, adsprpc::CURRENT_PROCESS_HANDLE, &mut a);
    }
    let sum = b.latency_summary(CallKind::RpcInvoke).unwrap();
    assert_eq!(sum.count, 6);
    assert_eq!(sum.max, Duration::from_micros(25 + 8));
    assert_eq!(sum.min, Duration::from_micros(25));
    let text = sum.to_string();
    assert!(text.contains("simulated"), "{text}");
    assert!(b.latencies().iter().all(|l| l.simulated >= Duration::from_micros(25)));
    s.close(&b);
}
