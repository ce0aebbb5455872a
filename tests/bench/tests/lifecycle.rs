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

/// One raw INVOKE_* ioctl (`request`) of `h` method 7 with one 8-byte output: the ioctl's own
/// result, so a positive return (the stale file's +104) is seen as it is.
fn raw_invoke(b: &Bench, rpc: Fd, request: u32, h: u32, out: &mut [u8; 8]) -> Result<i32, Errno> {
    let mut a = InvokeArgs::<'_, 1>::new(7).unwrap();
    a.output(out).unwrap();
    // INVOKE_CRC is the largest struct (40 bytes): {invoke (16), fds, attrs, crc}; zeroed
    // pointers are "none", the smaller requests read only their prefix.
    let mut raw = [0u64; 5];
    raw[0] = u64::from(h) | (u64::from(a.scalars().raw()) << 32);
    raw[1] = a.pra().as_ptr() as u64;
    // SAFETY: a live 40-byte buffer, at least the request's size; `pra` names `a`'s live entry,
    // which describes `out`; nothing is resumed into `out` later (the file is stale).
    unsafe { b.ioctl(rpc, request, raw.as_mut_ptr().cast()) }
}

/// The comma three's stale-file rule (`fastrpc_internal_invoke`'s tail, `fastrpc_invoke_send`,
/// `fastrpc_internal_mmap`, `fastrpc_internal_munmap`): after a CDSP restart a file that was
/// set up before it gets +104 from every INVOKE variant (the call in flight included, nothing
/// is sent, no errno), +104 from MMAP(ADD_PAGES), -1 from MMAP of an fd or a heap and from
/// MUNMAP; GETINFO, SETMODE, CONTROL, GETPERF and MUNMAP_FD keep working; its close sends no
/// release.
#[test]
fn restart_resets_calls_in_flight_and_stales_the_fd() {
    let b = bench();
    let start = b.snapshot();
    let (s, l, h) = setup_lib(&b, "restart");
    // An fd map made before the restart, for MUNMAP_FD afterwards.
    let buf = alloc(&b, s.ion, 4096);
    let va = buf.map.addr() as u64;
    assert_eq!(adsprpc::mmap(&b, s.rpc, buf.fd, 0, va, 4096), Ok(0));
    b.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
    let tid = Arc::new(AtomicI32::new(0));
    let t = {
        let (b, tid, rpc) = (b.clone(), tid.clone(), s.rpc);
        std::thread::spawn(move || {
            tid.store(b.thread_id(), Ordering::SeqCst);
            let mut out = [0u8; 8];
            let r = raw_invoke(&b, rpc, adsprpc::FASTRPC_IOCTL_INVOKE, h, &mut out);
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
    assert_eq!(r, Ok(104), "in flight: the ioctl returns +104, no errno");
    assert!(adsprpc::check(r).unwrap_err().is_dsp_restart());
    assert_eq!(out, [0; 8], "no copy-back");
    // The listener's next2 was in flight too.
    assert_eq!(l.join().unwrap().exit, Some(Error::Returned(104)));
    // Every later invoke on the old fd returns +104 and sends nothing.
    let sent = b.counts().dsp_of(DspCallKind::Library);
    for req in [
        adsprpc::FASTRPC_IOCTL_INVOKE,
        adsprpc::FASTRPC_IOCTL_INVOKE_FD,
        adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS,
        adsprpc::FASTRPC_IOCTL_INVOKE_CRC,
    ] {
        let mut out = [0u8; 8];
        assert_eq!(raw_invoke(&b, s.rpc, req, h, &mut out), Ok(104), "request {req:#x}");
    }
    assert_eq!(b.counts().dsp_of(DspCallKind::Library), sent, "nothing reached the DSP");
    // MMAP: ADD_PAGES passes the +104 through (its buffer stays listed until close); an fd or
    // a heap map and MUNMAP are -1.
    let mut m = adsprpc::fastrpc_ioctl_mmap { fd: -1, flags: adsprpc::ADSP_MMAP_ADD_PAGES, vaddrin: 0, size: 4096, vaddrout: 0 };
    // SAFETY: a live struct of the request's size; no pointers inside.
    let rc = unsafe { b.ioctl(s.rpc, adsprpc::FASTRPC_IOCTL_MMAP, (&mut m as *mut adsprpc::fastrpc_ioctl_mmap).cast()) };
    assert_eq!(rc, Ok(104));
    assert!(b.driver_maps(s.rpc).unwrap().iter().any(|m| m.kind == hexrpc_bench::DriverMapKind::AddPages), "the buffer stays listed");
    assert_eq!(adsprpc::mmap(&b, s.rpc, buf.fd, 0, va + 8192, 4096), Err(Error::Os(Errno::EPERM)), "an fd map");
    assert_eq!(adsprpc::mmap(&b, s.rpc, Fd(-1), adsprpc::ADSP_MMAP_HEAP_ADDR, 0, 4096), Err(Error::Os(Errno::EPERM)), "a heap map");
    assert_eq!(adsprpc::munmap(&b, s.rpc, 0xC000_0000, 4096), Err(Error::Os(Errno::EPERM)));
    assert_eq!(b.snapshot().global_maps, 0, "the failed heap map was freed");
    // What needs no DSP keeps working.
    assert_eq!(adsprpc::getinfo(&b, s.rpc, b.board().channel), Ok(1));
    assert_eq!(adsprpc::setmode(&b, s.rpc, adsprpc::FASTRPC_MODE_SERIAL), Ok(()));
    assert_eq!(adsprpc::control_kalloc(&b, s.rpc), Ok(1));
    let mut data = [0i64; adsprpc::PERF_KEYS];
    let mut keys = [0u8; 128];
    assert_eq!(adsprpc::getperf(&b, s.rpc, &mut data, &mut keys), Ok(12));
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, buf.fd, va, 4096), Ok(()));
    buf.release(&b, s.ion);
    let snap = b.snapshot();
    assert_eq!((snap.dsp_processes, snap.loaded_libraries, snap.hap_mappings), (0, 0, 0));
    // A new session works (the library handle from before does not exist there).
    let s2 = open_session(&b);
    let mut out = [0u8; 8];
    assert_eq!(call_out(&b, s2.rpc, h, 7, &mut out), Err(Error::Returned(aee::AEE_EINVHANDLE)));
    s2.close(&b);
    // The stale file's close sends no release.
    let releases = b.counts().dsp_of(DspCallKind::ReleaseProcess);
    b.close_raw(s.rpc).unwrap();
    assert_eq!(b.counts().dsp_of(DspCallKind::ReleaseProcess), releases, "no release from a stale file");
    b.close_raw(s.ion).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

/// `fastrpc_channel_open` refreshes the file's restart counter: an INIT on a file that went
/// stale in a restart revives it (its invokes reach the DSP again and its close sends a
/// release).
#[test]
fn init_on_a_stale_file_revives_it() {
    let b = bench();
    let start = b.snapshot();
    let s = open_session(&b);
    b.restart_dsp();
    assert_eq!(
        adsprpc::check(raw_invoke(&b, s.rpc, adsprpc::FASTRPC_IOCTL_INVOKE, adsprpc::CURRENT_PROCESS_HANDLE, &mut [0; 8])),
        Err(Error::Returned(104))
    );
    init_shell(&b, s.ion, s.rpc).expect("INIT on the stale file");
    assert_eq!(process_exit(&b, s.rpc), Ok(()), "the revived file reaches the DSP");
    let releases = b.counts().dsp_of(DspCallKind::ReleaseProcess);
    b.close_raw(s.rpc).unwrap();
    assert_eq!(b.counts().dsp_of(DspCallKind::ReleaseProcess), releases + 1);
    b.close_raw(s.ion).unwrap();
    // The second INIT overwrote the first's init memory: the kernel keeps it for good.
    let now = b.settle(&start, Duration::from_millis(200));
    assert_eq!((now.init_buffers, now.channel_refs), (1, 0), "{now:?}");
    assert_eq!(hexrpc_bench::Snapshot { init_buffers: 0, ..now }, start);
}

/// `fastrpc_channel_open` after a restart (`fastrpc_glink_register`, `fastrpc_glink_open`,
/// `fastrpc_restart_notifier_cb`): before the glink link is up an open fails with -1 after the
/// whole port-connect wait; a port whose connect timed out stays CONNECTING and every later open
/// fails the same way until a reboot; while an open waits it holds the driver's mutex, so a
/// close's session free waits too.
#[test]
fn channel_reopen_waits_for_the_link_and_a_stuck_port_needs_a_reboot() {
    let timeout = Duration::from_millis(300);
    let b = Bench::with_config(BenchConfig {
        port_connect_timeout: timeout,
        reverse_timeout: Duration::from_millis(600),
        ..Default::default()
    });
    let start = b.snapshot();
    let s = open_session(&b);
    b.set_channel_reopen(hexrpc_bench::ChannelReopen::LinkUpAfter(Duration::from_millis(900)));
    b.restart_dsp();
    let restarted = std::time::Instant::now();
    let r = b.open_raw(b.board().rpc_path, OpenFlags::READ_ONLY).unwrap();
    assert_eq!(adsprpc::getinfo(&b, r, 3), Ok(1));
    let t0 = std::time::Instant::now();
    assert_eq!(init_shell(&b, s.ion, r), Err(Error::Os(Errno::EPERM)), "the link is not up yet");
    assert!(t0.elapsed() >= timeout, "after the whole port wait: {:?}", t0.elapsed());
    assert_eq!(b.counts().channel_open_failures, 1);
    std::thread::sleep(Duration::from_millis(900).saturating_sub(restarted.elapsed()));
    init_shell(&b, s.ion, r).expect("the link is up");
    assert_eq!(process_exit(&b, r), Ok(()));
    // A connect that never comes: the port stays CONNECTING.
    b.set_channel_reopen(hexrpc_bench::ChannelReopen::Stuck);
    b.restart_dsp();
    let r2 = b.open_raw(b.board().rpc_path, OpenFlags::READ_ONLY).unwrap();
    assert_eq!(adsprpc::getinfo(&b, r2, 3), Ok(1));
    let idle = b.open_raw(b.board().rpc_path, OpenFlags::READ_ONLY).unwrap();
    assert_eq!(adsprpc::getinfo(&b, idle, 3), Ok(1));
    let opener = {
        let (b, ion, r2) = (b.clone(), s.ion, r2);
        std::thread::spawn(move || init_shell(&b, ion, r2))
    };
    std::thread::sleep(Duration::from_millis(100));
    let t0 = std::time::Instant::now();
    b.close_raw(idle).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(150), "the close waited for the open's mutex: {:?}", t0.elapsed());
    assert_eq!(opener.join().unwrap(), Err(Error::Os(Errno::EPERM)));
    assert_eq!(init_shell(&b, s.ion, r2), Err(Error::Os(Errno::EPERM)), "the port is still CONNECTING");
    assert_eq!(b.counts().channel_open_failures, 3);
    b.reboot_channel();
    init_shell(&b, s.ion, r2).expect("after a reboot");
    assert_eq!(process_exit(&b, r2), Ok(()));
    for f in [r, r2, s.rpc, s.ion] {
        b.close_raw(f).unwrap();
    }
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
