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
    elf, on_both_kernels, Bench, BenchConfig, CallKind, DriverMapKind, DspCallKind, EntryVersion, Fault, FaultTarget, FdlistPolicy,
    LibraryModel, OopsKind, Snapshot, V2_MAGIC,
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
    // The process's init memory (downstream fastrpc_init_process, upstream
    // fastrpc_init_create_process) is held by the file until its close; Linux's own driver's is
    // not in the bench's snapshot.
    assert_eq!(b.snapshot().init_buffers, usize::from(!is_linux(board)), "one init buffer, the file's");
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
        assert_eq!(b.counts().mmap_flags.get(&up::ADSP_MMAP_ADD_PAGES), Some(&1), "counted by flags");
    } else {
        assert_eq!(adsprpc::mmap(&b, rpc, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Ok(0), "vaddrout is the input (0)");
        let mut m =
            adsprpc::fastrpc_ioctl_mmap { fd: -1, flags: adsprpc::ADSP_MMAP_ADD_PAGES, vaddrin: 0, size: 4096, vaddrout: 0x1234_5000 };
        // SAFETY: a live struct of the request's size; no pointers inside are dereferenced.
        let rc = unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_MMAP, (&mut m as *mut adsprpc::fastrpc_ioctl_mmap).cast()) };
        assert_eq!(rc, Ok(0));
        assert_eq!(m.vaddrout, 0x1234_5000, "a stale input is echoed back as if it were an address");
        assert_eq!(b.counts().mmap_flags.get(&adsprpc::ADSP_MMAP_ADD_PAGES), Some(&2), "counted by flags");
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

/// One raw downstream MMAP: the ioctl's own result and the struct as the kernel left it.
fn raw_mmap(b: &Bench, rpc: Fd, fd: i32, flags: u32, size: u64, vaddrout: u64) -> (Result<i32, Errno>, adsprpc::fastrpc_ioctl_mmap) {
    let mut m = adsprpc::fastrpc_ioctl_mmap { fd, flags, vaddrin: 0, size, vaddrout };
    // SAFETY: a live struct of the request's size; no pointers inside are dereferenced.
    let rc = unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_MMAP, (&mut m as *mut adsprpc::fastrpc_ioctl_mmap).cast()) };
    (rc, m)
}

/// Downstream heap maps (`fastrpc_internal_mmap`, `fastrpc_mmap_create`, `fastrpc_mmap_add`,
/// `fastrpc_mmap_on_dsp`, `fastrpc_internal_munmap`): MMAP with `ADSP_MMAP_HEAP_ADDR` ignores
/// the fd (-1 works), hands the DSP unzeroed memory, never returns `vaddrout`, and puts the map
/// on a driver-global list no file owns: neither the close of the file that made it nor a CDSP
/// restart frees it, a MUNMAP of its DSP address from another file does.
/// `ADSP_MMAP_REMOTE_HEAP_ADDR`'s hyp-assign to sdm845's empty VM list fails after the DSP
/// mapped the pages, and the driver frees them under the DSP: a violation the bench reports.
#[test]
fn heap_maps_are_global_unzeroed_and_outlive_their_file() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let start = b.snapshot();
    let node = allocator(&b);
    let (c1, r, s1) = channel(&b, node, false);
    r.expect("INIT");
    let (rc, m) = raw_mmap(&b, c1, -1, adsprpc::ADSP_MMAP_HEAP_ADDR, 8192, 0x1234_5000);
    assert_eq!(rc, Ok(0), "fd -1 is fine: a heap map never imports its fd");
    assert_eq!(m.vaddrout, 0x1234_5000, "vaddrout is the caller's own");
    let maps = b.global_heap_maps();
    assert_eq!(maps.len(), 1);
    assert_eq!((maps[0].flags, maps[0].fd, maps[0].len, maps[0].refs), (adsprpc::ADSP_MMAP_HEAP_ADDR, -1, 8192, 1));
    assert!(maps[0].contents.iter().all(|&x| x == hexrpc_bench::STALE_BYTE), "never zeroed");
    assert!(b.driver_maps(c1).unwrap().is_empty(), "not on the file's list");
    assert_eq!(b.snapshot().global_maps, 1);
    b.close_raw(c1).unwrap();
    s1.drop_lease(&b, node);
    assert_eq!(b.snapshot().global_maps, 1, "the file's close leaves it");
    b.restart_dsp();
    assert_eq!(b.snapshot().global_maps, 1, "a CDSP restart leaves it");
    let (c2, r, s2) = channel(&b, node, false);
    r.expect("INIT after the restart");
    assert_eq!(adsprpc::munmap(&b, c2, maps[0].raddr, 4096), Err(Error::Os(Errno::EPERM)), "the length must match");
    assert_eq!(adsprpc::munmap(&b, c2, maps[0].raddr, 8192), Ok(()), "another file's MUNMAP frees it");
    assert_eq!(b.snapshot().global_maps, 0);
    assert!(b.oopses().is_empty());
    let (rc, _) = raw_mmap(&b, c2, 12345, adsprpc::ADSP_MMAP_REMOTE_HEAP_ADDR, 4096, 0);
    assert_eq!(rc, Err(Errno::EPERM));
    assert_eq!(b.snapshot().global_maps, 0, "the bail path freed it");
    let oopses = b.oopses();
    assert_eq!(oopses.len(), 1, "{oopses:?}");
    assert_eq!((oopses[0].request, oopses[0].kind), (CallKind::RpcMmap, OopsKind::FreedWhileDspMapped));
    let flags = b.counts().mmap_flags;
    assert_eq!((flags.get(&adsprpc::ADSP_MMAP_HEAP_ADDR), flags.get(&adsprpc::ADSP_MMAP_REMOTE_HEAP_ADDR)), (Some(&1), Some(&1)));
    b.close_raw(c2).unwrap();
    s2.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    let now = b.settle(&start, Duration::from_secs(1));
    assert_eq!(now.oopses, 1, "the violation stays counted");
    assert_eq!(Snapshot { oopses: 0, ..now }, start);
}

/// `fastrpc_init_process` / `fastrpc_channel_open` / `fastrpc_file_free`: the kernel never
/// refuses a second INIT on a file. It takes another channel reference (that the close never
/// puts back, so the channel can never close) and CREATE allocates new init memory over
/// `fl->init_mem`, leaking the first for good; the DSP refuses the create while the identity has
/// a process. The HAL's identity fallback (SETMODE(SESSION), then INIT again on the same file)
/// takes exactly this path. ATTACH sends its message and creates no process.
#[test]
fn a_second_init_on_a_file_leaks_a_channel_reference_and_init_memory() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let start = b.snapshot();
    let node = allocator(&b);
    let (c1, r, s1) = channel(&b, node, false);
    r.expect("INIT");
    assert_eq!((b.snapshot().init_buffers, b.snapshot().channel_refs), (1, 0));
    let creates = b.counts().dsp_of(DspCallKind::CreateProcess);
    let again = adsprpc::init(&b, c1, adsprpc::FASTRPC_INIT_CREATE, &s1.map, s1.fd, hexrpc_bench::DEFAULT_SHELL_LEN as u32);
    assert_eq!(again, Err(Error::Returned(aee::AEE_EBADSTATE)), "the DSP refuses, not the kernel");
    assert_eq!(b.counts().dsp_of(DspCallKind::CreateProcess), creates + 1, "the message went out");
    assert_eq!((b.snapshot().init_buffers, b.snapshot().channel_refs), (2, 1), "the first init memory is lost, one reference extra");
    // The identity fallback: refused, SETMODE(SESSION), INIT again on the same file.
    let (c2, r, s2) = channel(&b, node, false);
    assert_eq!(r, Err(Error::Returned(aee::AEE_EBADSTATE)));
    adsprpc::setmode(&b, c2, adsprpc::FASTRPC_MODE_SESSION).unwrap();
    adsprpc::init(&b, c2, adsprpc::FASTRPC_INIT_CREATE, &s2.map, s2.fd, hexrpc_bench::DEFAULT_SHELL_LEN as u32).expect("second identity");
    assert_eq!(b.dsp_processes().len(), 2);
    assert_eq!((b.snapshot().init_buffers, b.snapshot().channel_refs), (4, 2));
    b.close_raw(c1).unwrap();
    b.close_raw(c2).unwrap();
    let now = b.settle(&start, Duration::from_millis(300));
    assert_eq!((now.init_buffers, now.channel_refs, now.dsp_processes), (2, 2, 0), "kept for good: {now:?}");
    // ATTACH: a message, no process.
    let c3 = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    assert_eq!(adsprpc::getinfo(&b, c3, b.board().channel), Ok(1));
    assert_eq!(adsprpc::init(&b, c3, adsprpc::FASTRPC_INIT_ATTACH, &s1.map, s1.fd, 0), Ok(()));
    assert_eq!(b.counts().dsp_of(DspCallKind::CreateProcess), creates + 4);
    assert!(b.dsp_processes().is_empty(), "ATTACH created no process");
    b.close_raw(c3).unwrap();
    s1.drop_lease(&b, node);
    s2.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    assert_eq!(Snapshot { init_buffers: 0, channel_refs: 0, ..b.settle(&start, Duration::from_millis(300)) }, start);
}

/// The driver's unguarded paths before GETINFO: MMAP(ADD_PAGES) dereferences `fl->sctx` NULL
/// in `fastrpc_buf_alloc` (an oops: the task dies holding the file's map mutex; the bench
/// poisons the file, `EIO` ever after, and returns `EFAULT`); an invoke reads `channel[-1]` in
/// `fastrpc_internal_invoke`'s tail (-1 here). Both are recorded, and every INVOKE / MMAP /
/// MUNMAP before GETINFO and INIT is counted in `before_init`.
#[test]
fn calls_before_getinfo_oops_and_are_counted() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let start = b.snapshot();
    let r = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    assert_eq!(adsprpc::mmap(&b, r, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 0), Err(Error::Os(Errno::EPERM)), "size 0 is -1 first");
    assert!(b.oopses().is_empty());
    assert_eq!(adsprpc::mmap(&b, r, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Err(Error::Os(Errno::EFAULT)));
    assert_eq!(
        b.oopses(),
        vec![hexrpc_bench::Oops { request: CallKind::RpcMmap, kind: OopsKind::NullDereference, what: b.oopses()[0].what }]
    );
    assert_eq!(adsprpc::getinfo(&b, r, b.board().channel), Err(Error::Os(Errno::EIO)), "the file is poisoned");
    let r2 = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    let mut a = adsprpc::InvokeArgs::<'_, 1>::new(2).unwrap();
    assert_eq!(adsprpc::invoke(&b, r2, adsprpc::CURRENT_PROCESS_HANDLE, &mut a), Err(Error::Os(Errno::EPERM)));
    let oopses = b.oopses();
    assert_eq!((oopses.len(), oopses[1].request, oopses[1].kind), (2, CallKind::RpcInvoke, OopsKind::OutOfBoundsRead));
    // GETINFO but no INIT: no oops, still counted.
    assert_eq!(adsprpc::getinfo(&b, r2, b.board().channel), Ok(1));
    assert_eq!(adsprpc::mmap(&b, r2, Fd(-1), adsprpc::ADSP_MMAP_ADD_PAGES, 0, 4096), Err(Error::Os(Errno::EPERM)));
    assert_eq!(b.oopses().len(), 2);
    assert_eq!(b.counts().before_init, 4, "two MMAPs, one invoke and the GETINFO-less MMAP");
    b.close_raw(r).unwrap();
    b.close_raw(r2).unwrap();
    let node = allocator(&b);
    let (c, r3, shell) = channel(&b, node, false);
    r3.expect("INIT");
    assert_eq!(adsprpc::invoke(&b, c, adsprpc::CURRENT_PROCESS_HANDLE, &mut a), Ok(()));
    assert_eq!(b.counts().before_init, 4, "a set-up file is not counted");
    b.close_raw(c).unwrap();
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
    let now = b.settle(&start, Duration::from_millis(300));
    assert_eq!(now.oopses, 2, "every settle-to-start check fails after an oops");
    assert_eq!(Snapshot { oopses: 0, ..now }, start);
}

/// Upstream: invokes and maps before INIT_CREATE are counted in `before_init` too (the model
/// and Linux's own driver alike).
#[test]
fn upstream_calls_before_init_are_counted() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH_UPSTREAM));
    let rpc = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    let mut a = up::InvokeArgs::<'_, 1>::new(2).unwrap();
    let _ = up::invoke(&b, FastrpcFd::from_raw(rpc), adsprpc::CURRENT_PROCESS_HANDLE, &mut a);
    let _ = up::mmap(&b, FastrpcFd::from_raw(rpc), up::ADSP_MMAP_ADD_PAGES, 4096);
    assert_eq!(b.counts().before_init, 2);
    assert_eq!(b.counts().mmap_flags.get(&up::ADSP_MMAP_ADD_PAGES), Some(&1));
    b.close_raw(rpc).unwrap();
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

// ==== Downstream driver details (commaai agnos-kernel-sdm845 `adsprpc.c`, read, not run) ====
// Identity routing (`fastrpc_invoke_send`), buffer-argument maps (`get_args`,
// `fastrpc_mmap_create`, `put_args`, `context_free`), `fastrpc_get_info`,
// `fastrpc_internal_munmap_fd` and `context_build_overlap`. Raw ioctls on the `BENCH` board.

/// One raw INVOKE_ATTRS: `args` are (pv, len) per argument (buffers first, then handles), with
/// their `fds` and `attrs` words; returns the ioctl's value.
fn ds_invoke_attrs(
    b: &Bench,
    rpc: Fd,
    handle: u32,
    sc: hexrpc_drivers::Scalars,
    args: &[(u64, u64)],
    fds: &[i32],
    attrs: &[u32],
) -> Result<i32, Errno> {
    let pra: Vec<adsprpc::remote_arg> =
        args.iter().map(|&(pv, len)| adsprpc::remote_arg::from_buf(adsprpc::remote_buf { pv, len })).collect();
    let mut inv = adsprpc::fastrpc_ioctl_invoke_attrs {
        inv: adsprpc::fastrpc_ioctl_invoke { handle, sc: sc.raw(), pra: pra.as_ptr() as u64 },
        fds: fds.as_ptr() as u64,
        attrs: attrs.as_ptr() as u64,
    };
    // SAFETY: a live struct of the request's size; its pointers name live tables of the length
    // the scalars give, and every buffer named in `args` is live memory of that length (or
    // lies in a dma-buf the driver maps, never touched by the host side).
    unsafe { b.ioctl(rpc, adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS, (&mut inv as *mut adsprpc::fastrpc_ioctl_invoke_attrs).cast()) }
}

/// The scalars of a one-lease v2 launch (2 in-buffers, the timer out-buffer, 1 out-handle).
fn ds_v2_sc() -> hexrpc_drivers::Scalars {
    hexrpc_drivers::Scalars::new(2, 2, 1, 0, 1).unwrap()
}

/// The two in-buffers of a one-lease v2 launch over a lease of `len` bytes.
fn ds_v2_header(len: u32) -> ([u8; 16], [u8; 8]) {
    let mut pra0 = [0u8; 16];
    pra0[0..4].copy_from_slice(&V2_MAGIC.to_le_bytes());
    pra0[4..8].copy_from_slice(&1u32.to_le_bytes());
    pra0[8..12].copy_from_slice(&len.to_le_bytes());
    let mut pra1 = [0u8; 8];
    pra1[4..8].copy_from_slice(&len.to_le_bytes());
    (pra0, pra1)
}

/// A one-lease v2 launch of `h` on `rpc` whose timer out-buffer is `(timer_pv, timer_len)` with
/// buffer fd `timer_fd` and attributes `timer_attr`; the lease is the handle.
fn ds_launch_timer_in(b: &Bench, rpc: Fd, h: u32, lease: &Lease, timer: (u64, u64), timer_fd: i32, timer_attr: u32) -> Result<i32, Errno> {
    let (pra0, pra1) = ds_v2_header(lease.map.len() as u32);
    let args = [(pra0.as_ptr() as u64, 16), (pra1.as_ptr() as u64, 8), timer, (0, 0)];
    ds_invoke_attrs(b, rpc, h, ds_v2_sc(), &args, &[-1, -1, timer_fd, lease.fd.0], &[0, 0, timer_attr, adsprpc::FASTRPC_ATTR_NOVA])
}

/// A v2 library whose kernel fails with `AEE_EFAILED` and whose entry returns that status after
/// writing the timer (`LibraryModel::returning_status`).
fn ds_failing_library(b: &Bench) {
    b.register_library("fails", LibraryModel::new(EntryVersion::V2, 1, 0, |k| k.fail(aee::AEE_EFAILED)).returning_status());
}

fn ds_rpc_with_session(b: &Bench) -> Fd {
    let rpc = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).expect("open rpc");
    assert_eq!(adsprpc::getinfo(b, rpc, b.board().channel), Ok(1));
    rpc
}

/// R3 (`fastrpc_invoke_send`: `msg->pid = fl->tgid`, captured at open): a file with GETINFO but
/// no INIT of its own sends its invokes once ANOTHER file has the channel open (-1 while no file
/// has), and the DSP delivers them to the process that holds the file's identity; a file whose
/// identity has no process (SETMODE(SESSION)) is answered `AEE_EBADSTATE` (the bench's choice).
#[test]
fn downstream_getinfo_only_file_reaches_the_process_of_its_identity() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let seen = observer(&b);
    let node = allocator(&b);
    let mut a = lease(&b, node, 4096);
    a.fill(0x11);
    let c0 = ds_rpc_with_session(&b);
    assert_eq!(launch(&b, c0, 0x10, &[(a.fd, 4096)]), Err(Error::Os(Errno::EPERM)), "no file has the channel open: -1");
    let (c1, r1, s1) = channel(&b, node, false);
    r1.expect("INIT");
    let h = b.preload_library(c1, "observe").expect("library");
    assert_eq!(launch(&b, c0, h, &[(a.fd, 4096)]), Ok(()), "c0 has no process of its own, but its identity has one");
    assert_eq!(last_seen(&seen), vec![0x11; 8], "c1's process ran the call");
    let c2 = ds_rpc_with_session(&b);
    adsprpc::setmode(&b, c2, adsprpc::FASTRPC_MODE_SESSION).expect("SETMODE");
    assert_eq!(launch(&b, c2, h, &[(a.fd, 4096)]), Err(Error::Returned(aee::AEE_EBADSTATE)), "no process holds tgid|session");
    b.close_raw(c2).unwrap();
    assert!(b.dsp_pid(c1).is_some(), "c2's release named another identity");
    b.close_raw(c0).unwrap();
    assert!(b.dsp_pid(c1).is_none(), "c0's release names the tgid: c1's process");
    b.close_raw(c1).unwrap();
    a.drop_lease(&b, node);
    s1.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// R3 (SETMODE(SESSION) is accepted at any time and ORs bit 30 into `fl->tgid`): after INIT it
/// re-targets the file's later calls, and its close's release, to the session-bit identity.
#[test]
fn downstream_setmode_session_after_init_retargets_the_files_calls() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let seen = observer(&b);
    let node = allocator(&b);
    let tgid = rustix::process::getpid().as_raw_nonzero().get();
    let mut a = lease(&b, node, 4096);
    a.fill(0x22);
    let (c1, r1, s1) = channel(&b, node, false);
    r1.expect("INIT");
    let h1 = b.preload_library(c1, "observe").expect("library");
    adsprpc::setmode(&b, c1, adsprpc::FASTRPC_MODE_SESSION).expect("SETMODE after INIT");
    assert_eq!(launch(&b, c1, h1, &[(a.fd, 4096)]), Err(Error::Returned(aee::AEE_EBADSTATE)), "tgid|session has no process");
    let (c2, r2, s2) = channel(&b, node, true);
    r2.expect("INIT under the session bit");
    let h2 = b.preload_library(c2, "observe").expect("library");
    assert_eq!(launch(&b, c1, h2, &[(a.fd, 4096)]), Ok(()), "c1's calls now reach c2's process");
    assert_eq!(last_seen(&seen), vec![0x22; 8]);
    b.close_raw(c1).unwrap();
    let left: Vec<i32> = b.dsp_processes().iter().map(|p| p.identity).collect();
    assert_eq!(left, vec![tgid], "c1's release ended tgid|session (c2's process); its own stays on the DSP");
    b.close_raw(c2).unwrap();
    a.drop_lease(&b, node);
    s1.drop_lease(&b, node);
    s2.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// Buffer fds (`get_args`, `fastrpc_mmap_create`, `put_args`): an out-buffer passed with its
/// dma-buf fd is mapped, and the DSP writes it in place: the write is there after the DSP
/// answered an error (no copy-back happens, none is needed). The same buffer with fd -1 is
/// copied and stays as it was. The call's map goes with the call.
#[test]
fn downstream_mapped_out_buffer_writes_are_visible_after_a_dsp_error() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    ds_failing_library(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "fails").expect("library");
    let a = lease(&b, node, 4096);
    let mut t = lease(&b, node, 4096);
    t.fill(0xEE);
    let timer = (t.map.addr() as u64, 8);
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, -1, 0), Ok(aee::AEE_EFAILED));
    assert_eq!(t.read(8), vec![0xEE; 8], "a copied out-buffer is not copied back after an error");
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, t.fd.0, 0), Ok(aee::AEE_EFAILED));
    assert_ne!(t.read(8), vec![0xEE; 8], "the DSP wrote the mapped out-buffer in place");
    assert!(b.driver_maps(rpc).unwrap().iter().all(|m| m.kind != DriverMapKind::Buffer), "the call's buffer map went with it");
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    t.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// Buffer fds: a map that cannot be made (the fd is not a dma-buf: `ion_import_dma_buf_fd`
/// fails) is ignored by `get_args` and the buffer is copied: after a DSP error nothing is
/// written, and no map is left. (Today's copy-always model also passes the fallback half; the
/// dma-buf half is what it lacked.)
#[test]
fn downstream_a_buffer_fd_that_is_not_a_dma_buf_falls_back_to_copy() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    ds_failing_library(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "fails").expect("library");
    let a = lease(&b, node, 4096);
    let mut t = lease(&b, node, 4096);
    t.fill(0xEE);
    let timer = (t.map.addr() as u64, 8);
    // The ION client's descriptor and the FastRPC file's own are no dma-bufs.
    for not_a_buf in [node.0, rpc.0] {
        assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, not_a_buf, adsprpc::FASTRPC_ATTR_KEEP_MAP), Ok(aee::AEE_EFAILED));
        assert_eq!(t.read(8), vec![0xEE; 8], "copied: no copy-back after the error");
        assert!(b.driver_maps(rpc).unwrap().iter().all(|m| m.kind != DriverMapKind::Buffer), "no map, KEEP_MAP or not");
    }
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, timer, t.fd.0, 0), Ok(aee::AEE_EFAILED));
    assert_ne!(t.read(8), vec![0xEE; 8], "the real dma-buf is mapped and written in place");
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    t.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// Buffer fds with `FASTRPC_ATTR_KEEP_MAP` (`fastrpc_mmap_create` creates the map with two
/// references, the call puts one): the map outlives the call, a later call with the same range
/// takes it again (one reference left after it), and MUNMAP_FD with its address and length, or
/// the channel's close, removes it and the hold it has on the buffer. The DSP is told the whole
/// dma-buf (`map->size`).
#[test]
fn downstream_keep_map_outlives_the_call_until_munmap_fd_or_close() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let _seen = observer(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "observe").expect("library");
    let a = lease(&b, node, 4096);
    let t = lease(&b, node, 16384);
    let t_buf = b.buffer_of(t.fd).unwrap();
    let va = t.map.addr() as u64;
    let keep = adsprpc::FASTRPC_ATTR_KEEP_MAP;
    let kept = |b: &Bench| b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Buffer).collect::<Vec<_>>();
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    let m = kept(&b);
    assert_eq!(m.iter().map(|m| (m.fd, m.refs, m.buffer, m.len, m.dsp_size)).collect::<Vec<_>>(), vec![(t.fd.0, 1, Some(t_buf), 8, 16384)]);
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    assert_eq!(kept(&b).iter().map(|m| m.refs).collect::<Vec<_>>(), vec![1], "found again, put again");
    assert_eq!(adsprpc::munmap_fd(&b, rpc, t.fd, va, 8), Ok(()));
    assert!(kept(&b).is_empty());
    assert_eq!(adsprpc::munmap_fd(&b, rpc, t.fd, va, 8), Err(Error::Os(Errno::EPERM)));
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    assert_eq!(kept(&b).len(), 1);
    t.drop_lease(&b, node);
    assert!(b.buffer_alive(t_buf), "the kept map pins the buffer");
    b.close_raw(rpc).unwrap();
    assert!(!b.buffer_alive(t_buf), "close freed the kept map");
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// Buffer fds (`get_args`, "map ion buffers"): the page offset comes from the VMA that holds the
/// map's creation address, and only `offset < map->size` is checked: a buffer that starts inside
/// the dma-buf but runs past its end passes (the DSP writes what lies inside; the rest is
/// dropped here, unknown on a device), one whose first page lies past the end is -1.
#[test]
fn downstream_a_mapped_buffer_is_checked_at_its_start_only() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    ds_failing_library(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "fails").expect("library");
    let a = lease(&b, node, 4096);
    let mut t = lease(&b, node, 4096);
    t.fill(0xEE);
    let va = t.map.addr() as u64;
    let keep = adsprpc::FASTRPC_ATTR_KEEP_MAP;
    // 8 KiB from the start of a 4 KiB dma-buf (only 4 KiB are mapped on the host: the copy-less
    // path never touches the rest).
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8192), t.fd.0, keep), Ok(aee::AEE_EFAILED), "the end is not checked");
    assert_ne!(t.read(8), vec![0xEE; 8], "the DSP wrote the part inside the buffer in place");
    let m: Vec<_> =
        b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Buffer).map(|m| (m.len, m.dsp_size)).collect();
    assert_eq!(m, vec![(8192, 4096)], "the kept map covers 8 KiB of a 4 KiB buffer");
    // The kept map covers va + 4096, but that page is past the buffer: offset 4096 >= size.
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va + 4096, 8), t.fd.0, 0), Err(Errno::EPERM), "a start past the end is -1");
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    t.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// `context_free` puts buffer-argument maps only: after a call that failed (a handle at a later
/// argument that is no dma-buf, or a send with no channel open), every handle already mapped
/// keeps the reference the call took.
#[test]
fn downstream_handle_maps_of_a_failed_call_keep_their_references() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let node = allocator(&b);
    let a = lease(&b, node, 4096);
    // No channel open: get_args maps the handle, then fastrpc_invoke_send fails.
    let c0 = ds_rpc_with_session(&b);
    assert_eq!(launch(&b, c0, 0x10, &[(a.fd, 4096)]), Err(Error::Os(Errno::EPERM)));
    let maps: Vec<_> = b.driver_maps(c0).unwrap().into_iter().map(|m| (m.kind, m.fd, m.refs)).collect();
    assert_eq!(maps, vec![(DriverMapKind::Handle, a.fd.0, 1)], "the failed send left the handle's map");
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let (pra0, pra1) = ds_v2_header(4096);
    let mut timer = [0u8; 8];
    let args = [(pra0.as_ptr() as u64, 16), (pra1.as_ptr() as u64, 8), (timer.as_mut_ptr() as u64, 8), (0, 0), (0, 0)];
    let sc = hexrpc_drivers::Scalars::new(2, 2, 1, 0, 2).unwrap();
    let nova = adsprpc::FASTRPC_ATTR_NOVA;
    assert_eq!(ds_invoke_attrs(&b, rpc, 0x10, sc, &args, &[-1, -1, -1, a.fd.0, node.0], &[0, 0, 0, nova, nova]), Err(Errno::EPERM));
    let maps: Vec<_> = b.driver_maps(rpc).unwrap().into_iter().map(|m| (m.kind, m.fd, m.refs)).collect();
    assert_eq!(maps, vec![(DriverMapKind::Handle, a.fd.0, 1)], "the first handle keeps its map after the second failed");
    b.close_raw(c0).unwrap();
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// `fastrpc_get_info` records `fl->cid` before it allocates the session: a GETINFO that found no
/// free session fails on that file for good, even after a session was given back.
#[test]
fn downstream_a_failed_getinfo_is_sticky() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let fds: Vec<Fd> = (0..8).map(|_| ds_rpc_with_session(&b)).collect();
    let late = b.open_raw(b.board().rpc_path, OpenFlags::READ_WRITE).unwrap();
    assert_eq!(adsprpc::getinfo(&b, late, b.board().channel), Err(Error::Os(Errno::EPERM)));
    b.close_raw(fds[0]).unwrap();
    assert_eq!(b.snapshot().sessions, 7);
    assert_eq!(adsprpc::getinfo(&b, late, b.board().channel), Err(Error::Os(Errno::EPERM)), "sticky: the file never gets a session");
    let fresh = ds_rpc_with_session(&b);
    b.close_raw(late).unwrap();
    b.close_raw(fresh).unwrap();
    for fd in &fds[1..] {
        b.close_raw(*fd).unwrap();
    }
    assert_eq!(b.snapshot().sessions, 0);
}

/// `fastrpc_mmap_create` for an MMAP of a dma-buf tells the DSP the whole buffer
/// (`sg_dma_len`), not the size asked for; `fastrpc_mmap_find` returns the NEWEST matching map
/// (added at the list head): MUNMAP_FD over a range two maps cover takes the later one.
#[test]
fn downstream_mmap_tells_the_whole_buffer_and_lookups_take_the_newest_map() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let _seen = observer(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "observe").expect("library");
    let a = lease(&b, node, 4096);
    let t = lease(&b, node, 16384);
    let va = t.map.addr() as u64;
    adsprpc::mmap(&b, rpc, t.fd, 0, va, 4096).expect("MMAP");
    let m: Vec<_> =
        b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Mmap).map(|m| (m.len, m.dsp_size)).collect();
    assert_eq!(m, vec![(4096, 16384)], "the DSP is told the whole dma-buf");
    let keep = adsprpc::FASTRPC_ATTR_KEEP_MAP;
    let bufs =
        |b: &Bench| b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.kind == DriverMapKind::Buffer).map(|m| m.len).collect::<Vec<_>>();
    // A buffer inside the MMAP's range takes that map (any covering map of the fd).
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (va, 8), t.fd.0, keep), Ok(0));
    assert!(bufs(&b).is_empty(), "the MMAP map was found, none made");
    // Two kept buffer maps of one fd past it: (va + 8K, 8), then (va + 8K, 64), which the first
    // does not cover.
    let at = va + 8192;
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (at, 8), t.fd.0, keep), Ok(0));
    assert_eq!(ds_launch_timer_in(&b, rpc, h, &a, (at, 64), t.fd.0, keep), Ok(0));
    assert_eq!(bufs(&b), vec![8, 64]);
    // (at, 8) lies in both; the newest, the 64-byte one, goes.
    assert_eq!(adsprpc::munmap_fd(&b, rpc, t.fd, at, 8), Ok(()));
    assert_eq!(bufs(&b), vec![8], "MUNMAP_FD took the newest covering map");
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    t.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// A handle map has va 0 and len 0 (`get_args`: `fastrpc_mmap_create(fd, NOVA, 0, 0)`), so
/// MUNMAP_FD(fd, 0, n > 0) never finds it (-1, the buffer stays pinned) and MUNMAP_FD(fd, 0, 0)
/// frees it.
#[test]
fn downstream_a_handle_map_is_reached_by_munmap_fd_with_length_zero_only() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let _seen = observer(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "observe").expect("library");
    let a = lease(&b, node, 4096);
    launch(&b, rpc, h, &[(a.fd, 4096)]).expect("launch");
    let m: Vec<_> = b.driver_maps(rpc).unwrap().into_iter().filter(|m| m.fd == a.fd.0).map(|m| (m.kind, m.len, m.dsp_size)).collect();
    assert_eq!(m, vec![(DriverMapKind::Handle, 0, 4096)]);
    assert_eq!(adsprpc::munmap_fd(&b, rpc, a.fd, 0, 4096), Err(Error::Os(Errno::EPERM)), "(fd, 0, n) never matches a handle map");
    assert_eq!(b.driver_maps(rpc).unwrap().len(), 1);
    assert_eq!(adsprpc::munmap_fd(&b, rpc, a.fd, 0, 0), Ok(()));
    assert!(b.driver_maps(rpc).unwrap().is_empty());
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}

/// `context_build_overlap`: an out-buffer that lies inside an in-buffer has no copy of its own;
/// it is that in-buffer's bytes in the kernel's copy, so what the DSP leaves unwritten comes
/// back as the in-buffer's bytes (not stale memory), and the DSP's write through one argument
/// is the other's.
#[test]
fn downstream_overlapping_buffers_share_one_kernel_copy() {
    let _n = numbers();
    let b = Bench::with_config(config(&hexrpc_bsp::BENCH));
    let _seen = observer(&b);
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    let h = b.preload_library(rpc, "observe").expect("library");
    let a = lease(&b, node, 4096);
    let (pra0, _) = ds_v2_header(4096);
    // y[0..8]: the (offset, lease) pair pra1 carries; y[8..24]: the 16-byte timer out-buffer,
    // inside pra1 = y[0..24].
    let mut y = [0x77u8; 24];
    y[0..4].copy_from_slice(&0u32.to_le_bytes());
    y[4..8].copy_from_slice(&4096u32.to_le_bytes());
    let base = y.as_mut_ptr() as u64;
    let args = [(pra0.as_ptr() as u64, 16), (base, 24), (base + 8, 16), (0, 0)];
    assert_eq!(ds_invoke_attrs(&b, rpc, h, ds_v2_sc(), &args, &[-1, -1, -1, a.fd.0], &[0, 0, 0, adsprpc::FASTRPC_ATTR_NOVA]), Ok(0));
    // SAFETY: `y` is live; the kernel wrote it only during the call above.
    let y = unsafe { core::ptr::read_volatile(&y) };
    assert_eq!(&y[16..24], &[0x77; 8], "the timer's unwritten half is pra1's copied bytes, not stale memory");
    b.close_raw(rpc).unwrap();
    a.drop_lease(&b, node);
    shell.drop_lease(&b, node);
    b.close_raw(node).unwrap();
}
// ==== end of the downstream driver details ====
