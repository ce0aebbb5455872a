//! The FastRPC kernel rules of both bench kernels (docs/bench.md, "Kernel rules"), each driven
//! through the raw typed calls of `hexrpc_drivers` on the bench seam: handle maps keyed by fd
//! number that outlive the call (R1), the lowest-free descriptor rule that hands a dropped
//! lease's number to the next one (R8), MMAP `vaddrout` (R2), one DSP process per identity
//! (R3), calls that go on after an interrupt (R4), the blocking release on close (R5), and the
//! session count (R9).
//!
//! Descriptor numbers are process-wide, so every test here holds one lock: no other test of
//! this binary allocates a number between a close and the allocation that must get it back.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hexrpc_bench::{
    elf, on_both_kernels, Bench, BenchConfig, DriverMapKind, DspCallKind, EntryVersion, Fault, FaultTarget, FdlistPolicy, LibraryModel,
    V2_MAGIC,
};
use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::dma_heap::{self, HeapFd};
use hexrpc_drivers::upstream::{self as up, FastrpcFd};
use hexrpc_drivers::{adsprpc, aee, ion, Errno, Error, Fd, Mapping, OpenFlags, Prot, Syscalls};

static NUMBERS: Mutex<()> = Mutex::new(());

fn numbers() -> MutexGuard<'static, ()> {
    NUMBERS.lock().unwrap_or_else(|e| e.into_inner())
}

fn is_upstream(board: &Board) -> bool {
    board.abi == KernelAbi::Upstream
}

/// True once `f` holds, polled for up to 2 s.
fn eventually(f: impl Fn() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(2);
    while !f() {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Linux's own `fastrpc.c` (6.1.192), run by the bench's `linux` feature: where it differs from
/// the upstream model, the tests say what the real driver does.
fn is_linux(board: &Board) -> bool {
    *board == hexrpc_bsp::BENCH_LINUX
}

fn config(board: &'static Board) -> BenchConfig {
    BenchConfig {
        kernel_call_timeout: Duration::from_millis(300),
        reverse_timeout: Duration::from_millis(600),
        ..BenchConfig::for_board(board)
    }
}

/// A buffer from the board's allocator: its fd, its ION handle (downstream) and a host mapping.
struct Lease {
    fd: Fd,
    handle: Option<i32>,
    map: Mapping<Bench>,
}

/// The allocator node (ION client or dma-heap) of a board.
fn allocator(b: &Bench) -> Fd {
    let flags = if is_upstream(b.board()) { OpenFlags::READ_WRITE } else { OpenFlags::READ_ONLY };
    b.open_raw(b.board().ion_path, flags).expect("open allocator")
}

fn lease(b: &Bench, node: Fd, len: usize) -> Lease {
    let (fd, handle) = if is_upstream(b.board()) {
        (dma_heap::alloc(b, HeapFd::from_raw(node), len as u64).expect("heap alloc").into_raw(), None)
    } else {
        let mut d = ion::ion_allocation_data {
            len: len as u64,
            align: 0x200,
            heap_id_mask: b.board().heap_mask(),
            flags: ion::ION_FLAG_CACHED,
            ..Default::default()
        };
        ion::alloc(b, node, &mut d).expect("ION alloc");
        (ion::share(b, node, d.handle).expect("ION share").into_raw(), Some(d.handle))
    };
    let map = Mapping::map_shared(b.clone(), fd, len, Prot::ReadWrite).expect("mmap");
    Lease { fd, handle, map }
}

impl Lease {
    fn fill(&mut self, byte: u8) {
        let len = self.map.len();
        self.map.write_at(0, &vec![byte; len]).expect("fill");
    }

    fn read(&self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.map.read_at(0, &mut v).expect("read");
        v
    }

    /// What a lease drop does without MUNMAP_FD: munmap, close the fd, free the ION handle.
    fn drop_lease(self, b: &Bench, node: Fd) {
        let Lease { fd, handle, map } = self;
        map.unmap().expect("munmap");
        b.close_raw(fd).expect("close buffer fd");
        if let Some(h) = handle {
            ion::free(b, node, h).expect("ION free");
        }
    }
}

/// Opens a FastRPC channel and creates the user PD from the board's shell, staged in a lease
/// that the caller gets back (downstream drops its map at the end of INIT; upstream keeps it).
/// `session`: SETMODE(FASTRPC_MODE_SESSION) before INIT (downstream only).
fn channel(b: &Bench, node: Fd, session: bool) -> (Fd, Result<(), Error>, Lease) {
    let board = b.board();
    let rpc = b.open_raw(board.rpc_path, OpenFlags::READ_WRITE).expect("open rpc");
    let image = elf::hexagon_elf(hexrpc_bench::DEFAULT_SHELL_LEN);
    let mut shell = lease(b, node, image.len().div_ceil(4096) * 4096);
    shell.map.write_at(0, &image).expect("write shell");
    let r = if is_upstream(board) {
        up::init_create(b, FastrpcFd::from_raw(rpc), &shell.map, shell.fd, image.len() as u32, up::FASTRPC_MODE_UNSIGNED_MODULE, 0)
    } else {
        assert_eq!(adsprpc::getinfo(b, rpc, board.channel), Ok(1));
        if session {
            adsprpc::setmode(b, rpc, adsprpc::FASTRPC_MODE_SESSION).expect("SETMODE");
        }
        adsprpc::init(b, rpc, adsprpc::FASTRPC_INIT_CREATE, &shell.map, shell.fd, image.len() as u32)
    };
    (rpc, r, shell)
}

/// A v2 launch of `h` with each lease in `bufs` as an out-handle (view = whole lease).
fn launch(b: &Bench, rpc: Fd, h: u32, bufs: &[(Fd, u32)]) -> Result<(), Error> {
    launch_with(b, rpc, h, bufs, false)
}

/// [`launch`]; with `once` the downstream INVOKE_ATTRS is issued once as a raw ioctl, so an
/// interrupt ends it with `EINTR` (the typed call resumes a parked call).
fn launch_with(b: &Bench, rpc: Fd, h: u32, bufs: &[(Fd, u32)], once: bool) -> Result<(), Error> {
    let mut pra0 = Vec::new();
    pra0.extend_from_slice(&V2_MAGIC.to_le_bytes());
    pra0.extend_from_slice(&(bufs.len() as u32).to_le_bytes());
    let mut pra1 = Vec::new();
    for &(_, len) in bufs {
        pra0.extend_from_slice(&len.to_le_bytes());
        pra0.extend_from_slice(&0u32.to_le_bytes());
        pra1.extend_from_slice(&0u32.to_le_bytes());
        pra1.extend_from_slice(&len.to_le_bytes());
    }
    let mut timer = [0u8; 8];
    if is_upstream(b.board()) {
        let mut a = up::InvokeArgs::<'_, 8>::new(2).expect("args");
        a.input(&pra0).unwrap().input(&pra1).unwrap().output(&mut timer).unwrap();
        for &(fd, len) in bufs {
            a.out_handle(fd, 0, len, 0).unwrap();
        }
        up::invoke(b, FastrpcFd::from_raw(rpc), h, &mut a)
    } else {
        let mut a = adsprpc::InvokeArgs::<'_, 8>::new(2).expect("args");
        a.input(&pra0).unwrap().input(&pra1).unwrap().output(&mut timer).unwrap();
        for &(fd, _) in bufs {
            a.out_handle(fd, adsprpc::FASTRPC_ATTR_NOVA).unwrap();
        }
        if !once {
            return adsprpc::invoke_attrs(b, rpc, h, &mut a);
        }
        let mut inv = adsprpc::fastrpc_ioctl_invoke_attrs {
            inv: adsprpc::fastrpc_ioctl_invoke { handle: h, sc: a.scalars().raw(), pra: a.pra().as_ptr() as u64 },
            fds: a.fds().as_ptr() as u64,
            attrs: a.attrs().as_ptr() as u64,
        };
        // SAFETY: a live struct of the request's size whose pointers name `a`'s live tables; the
        // out-buffer is only written before this returns (an interrupted call is never resumed
        // here: the test closes the channel).
        let rc =
            unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS, (&mut inv as *mut adsprpc::fastrpc_ioctl_invoke_attrs).cast()) };
        match rc {
            Ok(0) => Ok(()),
            Ok(v) => Err(Error::Returned(v)),
            Err(e) => Err(Error::Os(e)),
        }
    }
}

/// A library whose kernel records the first 8 bytes the DSP sees through handle 0.
fn observer(b: &Bench) -> Arc<Mutex<Vec<Vec<u8>>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    b.register_library(
        "observe",
        LibraryModel::new(EntryVersion::V2, 1, 0, move |k| {
            let mut v = [0u8; 8];
            if k.read(0, 0, &mut v).is_ok() {
                log.lock().unwrap().push(v.to_vec());
            }
        }),
    );
    seen
}

fn last_seen(seen: &Arc<Mutex<Vec<Vec<u8>>>>) -> Vec<u8> {
    seen.lock().unwrap().last().cloned().unwrap_or_default()
}

/// R1: a handle map made by INVOKE outlives the call (the default DSP lists nothing in the
/// fdlist); MUNMAP_FD (downstream: request 0xC018520D, 24-byte struct, -1 when no map) drops
/// one reference at a time; the channel's close frees what is left and the memory it pinned.
fn handle_map_outlives_the_call(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(config(board));
    let _seen = observer(&b);
    let start = b.snapshot();
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "observe").expect("library");
    let a = lease(&b, node, 8192);
    let a_buf = b.buffer_of(a.fd).expect("a buffer");
    launch(&b, rpc, h, &[(a.fd, 8192)]).expect("launch 1");
    let handle_maps = |b: &Bench| b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.fd == a.fd.0).collect::<Vec<_>>();
    let maps = handle_maps(&b);
    assert_eq!(maps.len(), 1, "{maps:?}");
    assert_eq!((maps[0].kind, maps[0].refs, maps[0].buffer), (DriverMapKind::Handle, 1, Some(a_buf)), "the call's map stays after it");
    launch(&b, rpc, h, &[(a.fd, 8192)]).expect("launch 2");
    if is_linux(board) {
        // 6.1.192: fastrpc_create_maps gives every handle a fresh map per call
        // (fastrpc_map_attach), each with the call's one reference.
        let maps = handle_maps(&b);
        assert_eq!(maps.iter().map(|m| (m.refs, m.buffer)).collect::<Vec<_>>(), vec![(1, Some(a_buf)); 2], "a second map: {maps:?}");
    } else {
        assert_eq!(handle_maps(&b)[0].refs, 2, "each call takes a reference that no fdlist gave back");
    }
    if !is_upstream(board) {
        // MUNMAP_FD by its raw number and struct: fd, flags, va, len (24 bytes).
        assert_eq!(adsprpc::FASTRPC_IOCTL_MUNMAP_FD, 0xC018_520D);
        let munmap_fd = |fd: i32| {
            let mut m = [0u8; 24];
            m[0..4].copy_from_slice(&fd.to_le_bytes());
            // SAFETY: a live 24-byte buffer, the size the request encodes; no pointers inside.
            unsafe { b.ioctl(rpc, 0xC018_520D, m.as_mut_ptr().cast()) }
        };
        assert_eq!(munmap_fd(a.fd.0), Ok(0));
        assert_eq!(handle_maps(&b)[0].refs, 1);
        assert_eq!(munmap_fd(a.fd.0), Ok(0));
        assert!(handle_maps(&b).is_empty(), "the last reference freed the map");
        assert_eq!(munmap_fd(a.fd.0), Err(Errno::EPERM), "-1 when no map is left");
        launch(&b, rpc, h, &[(a.fd, 8192)]).expect("launch 3");
        assert_eq!(handle_maps(&b)[0].refs, 1);
    }
    // The map pins the buffer after every user reference is gone; close frees it.
    a.drop_lease(&b, node);
    assert!(b.buffer_alive(a_buf), "the driver map keeps the dropped lease's memory");
    b.close_raw(rpc).unwrap();
    // (Linux frees the file's maps from the release's deferred context put, on its worker.)
    assert!(eventually(|| !b.buffer_alive(a_buf)), "the channel's close freed the map and the memory");
    assert!(b.all_driver_maps().is_empty());
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

/// R1 with [`FdlistPolicy::EveryHandle`]: a DSP that lists each handle after a successful call
/// gives the call's reference back at once (the knob a host's tests can select).
fn fdlist_policy_every_handle_releases_at_once(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(BenchConfig { fdlist: FdlistPolicy::EveryHandle, ..config(board) });
    let _seen = observer(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "observe").expect("library");
    let a = lease(&b, node, 4096);
    launch(&b, rpc, h, &[(a.fd, 4096)]).expect("launch");
    assert!(b.driver_maps(rpc).unwrap().iter().all(|m| m.fd != a.fd.0), "the fdlist released the map");
    // After a DSP error nothing is listed.
    b.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Returned(aee::AEE_EFAILED));
    assert_eq!(launch(&b, rpc, h, &[(a.fd, 4096)]), Err(Error::Returned(aee::AEE_EFAILED)));
    assert_eq!(b.driver_maps(rpc).unwrap().iter().filter(|m| m.fd == a.fd.0).count(), 1, "no fdlist after an error");
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// R8 + R1: drop lease A (fd N) that a call used as a handle, allocate B: B gets fd N (lowest
/// free number; the bench's own backing descriptors do not take it), and a launch with B hands
/// the DSP A's memory, kept alive by the stale map. Downstream, MUNMAP_FD until -1 clears the
/// number; then the DSP sees B.
fn stale_fd_number_hands_the_dsp_the_old_buffer(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(config(board));
    let seen = observer(&b);
    let start = b.snapshot();
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "observe").expect("library");
    let mut a = lease(&b, node, 4096);
    a.fill(0xAA);
    launch(&b, rpc, h, &[(a.fd, 4096)]).expect("launch A");
    assert_eq!(last_seen(&seen), vec![0xAA; 8]);
    let (n, a_buf) = (a.fd, b.buffer_of(a.fd).unwrap());
    a.drop_lease(&b, node);
    let mut lb = lease(&b, node, 4096);
    assert_eq!(lb.fd, n, "the next buffer gets the dropped lease's number");
    lb.fill(0xBB);
    let b_buf = b.buffer_of(lb.fd).unwrap();
    assert_ne!(a_buf, b_buf);
    launch(&b, rpc, h, &[(lb.fd, 4096)]).expect("launch B");
    if is_linux(board) {
        // 6.1.192: fastrpc_map_lookup matches the number AND the dma-buf behind it, and every
        // handle gets a map of its own: the DSP sees B; the stale map only pins A until close.
        assert_eq!(last_seen(&seen), vec![0xBB; 8], "the real driver hands the DSP B");
        let maps: Vec<_> = b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.fd == n.0).map(|m| (m.buffer, m.refs)).collect();
        assert_eq!(maps, vec![(Some(a_buf), 1), (Some(b_buf), 1)], "A's stale map and B's own under number {n:?}");
        assert!(b.buffer_alive(a_buf), "the stale map still pins A");
    } else {
        assert_eq!(last_seen(&seen), vec![0xAA; 8], "the DSP got the OLD map's memory, not B's");
        let m = b.driver_maps(rpc).unwrap().into_iter().find(|m| m.fd == n.0).unwrap();
        assert_eq!((m.buffer, m.refs), (Some(a_buf), 2), "one map of number {n:?}, still A's");
    }
    assert_eq!(lb.read(8), vec![0xBB; 8]);
    if !is_upstream(board) {
        while adsprpc::munmap_fd(&b, rpc, n, 0, 0).is_ok() {}
        assert!(!b.buffer_alive(a_buf), "A is gone with its last map");
        launch(&b, rpc, h, &[(lb.fd, 4096)]).expect("launch B again");
        assert_eq!(last_seen(&seen), vec![0xBB; 8], "a fresh map of B");
    }
    b.close_raw(rpc).unwrap();
    lb.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

/// R1-up: upstream INIT_CREATE keeps the shell buffer's map until close, keyed by its number:
/// the first lease allocated after the shell lease is dropped takes that number, and a launch
/// with it hands the DSP the shell's pages.
#[test]
fn upstream_shell_map_is_kept_until_close() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH_UPSTREAM));
    let seen = observer(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT_CREATE");
    let h = b.preload_library(rpc, "observe").expect("library");
    let n = shell.fd;
    let shell_buf = b.buffer_of(n).unwrap();
    let kept = b.driver_maps(rpc).unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!((kept[0].kind, kept[0].fd, kept[0].buffer), (DriverMapKind::Handle, n.0, Some(shell_buf)));
    shell.drop_lease(&b, node);
    let mut lb = lease(&b, node, 4096);
    assert_eq!(lb.fd, n);
    lb.fill(0x5A);
    launch(&b, rpc, h, &[(lb.fd, 4096)]).expect("launch");
    assert_eq!(&last_seen(&seen)[..4], b"\x7fELF", "the DSP got the shell's pages");
    b.close_raw(rpc).unwrap();
    assert!(!b.buffer_alive(shell_buf));
    lb.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// R2: the comma three's MMAP never writes `vaddrout` (the caller reads its own input back);
/// the upstream driver writes the DSP address.
fn mmap_vaddrout(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(config(board));
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    if is_upstream(board) {
        let v = up::mmap(&b, FastrpcFd::from_raw(rpc), up::ADSP_MMAP_ADD_PAGES, 4096).expect("MMAP");
        assert_ne!(v, 0, "upstream writes the DSP address");
        up::munmap(&b, FastrpcFd::from_raw(rpc), v, 4096).expect("MUNMAP");
    } else {
        assert_eq!(adsprpc::mmap(&b, rpc, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Ok(0), "vaddrout is the input (0)");
        let mut m =
            adsprpc::fastrpc_ioctl_mmap { fd: -1, flags: adsprpc::ADSP_MMAP_ADD_PAGES, vaddrin: 0, size: 4096, vaddrout: 0x1234_5000 };
        // SAFETY: a live struct of the request's size; no pointers inside are dereferenced.
        let rc = unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_MMAP, (&mut m as *mut adsprpc::fastrpc_ioctl_mmap).cast()) };
        assert_eq!(rc, Ok(0));
        assert_eq!(m.vaddrout, 0x1234_5000, "a stale input is echoed back as if it were an address");
        let on = Bench::with_config(BenchConfig { mmap_writes_vaddrout: true, ..config(board) });
        let node2 = allocator(&on);
        let (rpc2, r2, shell2) = channel(&on, node2, false);
        r2.expect("INIT");
        assert_ne!(adsprpc::mmap(&on, rpc2, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Ok(0), "the knob selects a writing CAF driver");
        on.close_raw(rpc2).unwrap();
        shell2.drop_lease(&on, node2);
        on.close_raw(node2).unwrap();
    }
    b.close_raw(rpc).unwrap();
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// R3: one DSP process per identity (tgid, with the session bit downstream). A second channel of
/// the same process without SETMODE(SESSION) is refused by the DSP; SETMODE before INIT gives
/// the second identity; closing ANY file of an identity releases that identity's process.
fn one_dsp_process_per_identity(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(config(board));
    let node = allocator(&b);
    let tgid = rustix::process::getpid().as_raw_nonzero().get();
    let (c1, r1, s1) = channel(&b, node, false);
    r1.expect("first INIT");
    assert_eq!(b.identity_of(c1), Some(tgid));
    let (c2, r2, s2) = channel(&b, node, false);
    assert_eq!(r2, Err(Error::Returned(aee::AEE_EBADSTATE)), "a second process for a live identity is refused");
    assert_eq!(b.dsp_processes().len(), 1);
    if !is_upstream(board) {
        let (c3, r3, s3) = channel(&b, node, true);
        r3.expect("the session bit is a second identity");
        assert_eq!(b.identity_of(c3), Some(tgid | 1 << 30));
        let ids: Vec<(i32, bool)> = b.dsp_processes().iter().map(|p| (p.identity, p.session)).collect();
        assert_eq!(ids, vec![(tgid, false), (tgid | 1 << 30, true)]);
        // A third: both identities are taken.
        let (c4, r4, s4) = channel(&b, node, true);
        assert_eq!(r4, Err(Error::Returned(aee::AEE_EBADSTATE)));
        b.close_raw(c4).unwrap();
        assert!(b.dsp_pid(c3).is_none(), "c4's close released tgid|session, c3's process");
        b.close_raw(c3).unwrap();
        s3.drop_lease(&b, node);
        s4.drop_lease(&b, node);
    }
    // c2 never got a process, but its close names the tgid: c1's process goes.
    assert!(b.dsp_pid(c1).is_some());
    b.close_raw(c2).unwrap();
    assert!(b.dsp_pid(c1).is_none(), "the release of c2 killed c1's process");
    assert!(b.dsp_processes().is_empty());
    b.close_raw(c1).unwrap();
    s1.drop_lease(&b, node);
    s2.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// R4 + R5: an interrupted call keeps running on the DSP and writes its buffers late; the close
/// of the channel waits for it (the release is answered only when the call returned), so once
/// close is back nothing writes any more.
fn interrupted_call_writes_until_the_release(board: &'static Board) {
    let _n = numbers();
    // Upstream's release waits at most the kernel-call timeout: longer than the late write here.
    let b = Bench::with_config(BenchConfig { kernel_call_timeout: Duration::from_secs(5), ..config(board) });
    b.register_library(
        "late",
        LibraryModel::new(EntryVersion::V2, 1, 0, |k| {
            std::thread::sleep(Duration::from_millis(400));
            let _ = k.write(0, 0, b"LATE");
        }),
    );
    let start = b.snapshot();
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "late").expect("library");
    let a = lease(&b, node, 4096);
    let (b2, fd) = (b.clone(), a.fd);
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    let caller = std::thread::spawn(move || {
        tx.send(b2.thread_id()).unwrap();
        launch_with(&b2, rpc, h, &[(fd, 4096)], true)
    });
    let tid = rx.recv().unwrap();
    assert!(b.wait_until_blocked(tid, Duration::from_secs(2)));
    std::thread::sleep(Duration::from_millis(50));
    b.interrupt(tid).unwrap();
    assert_eq!(caller.join().unwrap(), Err(Error::Os(Errno::EINTR)));
    assert_ne!(&a.read(4), b"LATE", "not written yet at the interrupt");
    b.close_raw(rpc).unwrap();
    let closed_after = t0.elapsed();
    assert!(closed_after >= Duration::from_millis(350), "close returned after {closed_after:?}, before the DSP call ended");
    assert_eq!(&a.read(4), b"LATE", "the interrupted call wrote its buffer before the release completed");
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    let leaks = b.kernel_leaks();
    if is_linux(board) {
        // 6.1.192: the interrupted context holds a reference on its file's user, so
        // fastrpc_user_free never runs: the context, the file's maps (the lease's and the
        // shell's) and the memory they pin stay for the life of the process.
        assert_eq!((leaks.users, leaks.contexts, leaks.maps, leaks.buffers.len()), (1, 1, 2, 2), "{leaks:?}");
    } else {
        assert_eq!(leaks, Default::default());
    }
    let want = b.with_kernel_leaks(&start);
    assert_eq!(b.settle(&want, Duration::from_secs(2)), want);
}

/// R5: the release on close is a kernel message a fault can hang: downstream the close waits
/// with no limit (until the hang is released), upstream it gives up after the kernel-call
/// timeout (10 s on a device, 300 ms here) and frees anyway.
fn release_on_close_is_a_kernel_message(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(config(board));
    let start = b.snapshot();
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    b.inject(FaultTarget::Dsp(DspCallKind::ReleaseProcess), 1, Fault::Hang);
    let b2 = b.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    let closer = std::thread::spawn(move || {
        let r = b2.close_raw(rpc);
        tx.send(()).unwrap();
        r
    });
    if is_upstream(board) {
        assert!(rx.recv_timeout(Duration::from_secs(3)).is_ok(), "upstream gives up");
        assert!(t0.elapsed() >= Duration::from_millis(300), "after the kernel-call timeout");
    } else {
        assert!(rx.recv_timeout(Duration::from_millis(600)).is_err(), "downstream close hangs with the release");
        assert_eq!(b.snapshot().rpc_files, 1, "nothing freed before the answer");
        b.release_hangs();
        assert!(rx.recv_timeout(Duration::from_secs(3)).is_ok());
    }
    assert_eq!(closer.join().unwrap(), Ok(()));
    assert_eq!(b.counts().dsp_of(DspCallKind::ReleaseProcess), 1);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    if is_linux(board) {
        // 6.1.192: the release message that timed out keeps its context, which holds the user:
        // the file's shell map and its memory stay for good. The DSP never answered, so its
        // process lives until the hang ends.
        let leaks = b.kernel_leaks();
        assert_eq!((leaks.users, leaks.contexts, leaks.maps, leaks.buffers.len()), (1, 1, 1, 1), "{leaks:?}");
        b.release_hangs();
    }
    let want = b.with_kernel_leaks(&start);
    assert_eq!(b.settle(&want, Duration::from_secs(2)), want);
}

/// R9: the comma three's CDSP has 8 non-secure sessions (GETINFO -1 / open EBUSY beyond).
fn eight_sessions(board: &'static Board) {
    let _n = numbers();
    let b = Bench::with_config(config(board));
    let mut fds = Vec::new();
    for i in 0..8 {
        let fd = b.open_raw(board.rpc_path, OpenFlags::READ_WRITE).unwrap_or_else(|e| panic!("open {i}: {e:?}"));
        if !is_upstream(board) {
            assert_eq!(adsprpc::getinfo(&b, fd, board.channel), Ok(1), "session {i}");
        }
        fds.push(fd);
    }
    if is_upstream(board) {
        assert_eq!(b.open_raw(board.rpc_path, OpenFlags::READ_WRITE), Err(Errno::EBUSY));
    } else {
        let fd = b.open_raw(board.rpc_path, OpenFlags::READ_WRITE).unwrap();
        assert_eq!(adsprpc::getinfo(&b, fd, board.channel), Err(Error::Os(Errno::EPERM)), "a ninth session");
        fds.push(fd);
    }
    for fd in fds {
        b.close_raw(fd).unwrap();
    }
}

on_both_kernels!(
    handle_map_outlives_the_call,
    fdlist_policy_every_handle_releases_at_once,
    stale_fd_number_hands_the_dsp_the_old_buffer,
    mmap_vaddrout,
    one_dsp_process_per_identity,
    interrupted_call_writes_until_the_release,
    release_on_close_is_a_kernel_message,
    eight_sessions,
);
