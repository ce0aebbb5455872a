//! The set-up the kernel-rule tests share: the descriptor-number lock, the bench configuration,
//! leases from the board's allocator, channels with a user PD, launches, the observer library,
//! and the usual start ([`Rig`]) and end ([`teardown`]) of a test.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hexrpc_bench::{elf, Bench, BenchConfig, EntryVersion, LibraryModel, Snapshot, V2_MAGIC};
use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::dma_heap::{self, HeapFd};
use hexrpc_drivers::upstream::{self as up, FastrpcFd};
use hexrpc_drivers::{adsprpc, ion, Error, Fd, Mapping, OpenFlags, Prot, Syscalls};

use crate::common;

static NUMBERS: Mutex<()> = Mutex::new(());

pub(crate) fn numbers() -> MutexGuard<'static, ()> {
    NUMBERS.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn is_upstream(board: &Board) -> bool {
    board.abi == KernelAbi::Upstream
}

/// True once `f` holds, polled for up to 2 s.
pub(crate) fn eventually(f: impl Fn() -> bool) -> bool {
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
pub(crate) fn is_linux(board: &Board) -> bool {
    *board == hexrpc_bsp::BENCH_LINUX
}

pub(crate) fn config(board: &'static Board) -> BenchConfig {
    BenchConfig {
        kernel_call_timeout: Duration::from_millis(300),
        reverse_timeout: Duration::from_millis(600),
        ..BenchConfig::for_board(board)
    }
}

/// A buffer from the board's allocator: its fd, its ION handle (downstream) and a host mapping.
pub(crate) struct Lease {
    pub(crate) fd: Fd,
    pub(crate) handle: Option<i32>,
    pub(crate) map: Mapping<Bench>,
}

/// The allocator node (ION client or dma-heap) of a board.
pub(crate) fn allocator(b: &Bench) -> Fd {
    let flags = if is_upstream(b.board()) { OpenFlags::READ_WRITE } else { OpenFlags::READ_ONLY };
    b.open_raw(b.board().ion_path, flags).expect("open allocator")
}

pub(crate) fn lease(b: &Bench, node: Fd, len: usize) -> Lease {
    if !is_upstream(b.board()) {
        // The ION buffer of the other bench tests (alloc, share, map).
        let common::Buf { handle, fd, map } = common::alloc(b, node, len);
        return Lease { fd, handle: Some(handle), map };
    }
    let fd = dma_heap::alloc(b, HeapFd::from_raw(node), len as u64).expect("heap alloc").into_raw();
    let map = Mapping::map_shared(b.clone(), fd, len, Prot::ReadWrite).expect("mmap");
    Lease { fd, handle: None, map }
}

impl Lease {
    pub(crate) fn fill(&mut self, byte: u8) {
        let len = self.map.len();
        self.map.write_at(0, &vec![byte; len]).expect("fill");
    }

    pub(crate) fn read(&self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.map.read_at(0, &mut v).expect("read");
        v
    }

    /// What a lease drop does without MUNMAP_FD: munmap, close the fd, free the ION handle.
    pub(crate) fn drop_lease(self, b: &Bench, node: Fd) {
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
pub(crate) fn channel(b: &Bench, node: Fd, session: bool) -> (Fd, Result<(), Error>, Lease) {
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
pub(crate) fn launch(b: &Bench, rpc: Fd, h: u32, bufs: &[(Fd, u32)]) -> Result<(), Error> {
    launch_with(b, rpc, h, bufs, false)
}

/// [`launch`]; with `once` the downstream INVOKE_ATTRS is issued once as a raw ioctl, so an
/// interrupt ends it with `EINTR` (the typed call resumes a parked call).
pub(crate) fn launch_with(b: &Bench, rpc: Fd, h: u32, bufs: &[(Fd, u32)], once: bool) -> Result<(), Error> {
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
pub(crate) fn observer(b: &Bench) -> Seen {
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

pub(crate) fn last_seen(seen: &Seen) -> Vec<u8> {
    seen.lock().unwrap().last().cloned().unwrap_or_default()
}

/// What the [`observer`] library saw: the first 8 bytes of handle 0, one entry per call.
pub(crate) type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// What most tests start from: a bench, its snapshot before anything was opened, the allocator
/// node, and one channel whose user PD INIT created (checked), with the shell lease that staged
/// it.
pub(crate) struct Rig {
    pub(crate) b: Bench,
    pub(crate) start: Snapshot,
    pub(crate) node: Fd,
    pub(crate) rpc: Fd,
    pub(crate) shell: Lease,
}

/// A [`Rig`] on `cfg`; `models` registers the library models first, and what it returns comes
/// back with the rig.
pub(crate) fn rig_with<T>(cfg: BenchConfig, models: impl FnOnce(&Bench) -> T) -> (Rig, T) {
    let b = Bench::with_config(cfg);
    let registered = models(&b);
    let start = b.snapshot();
    let node = allocator(&b);
    let (rpc, r, shell) = channel(&b, node, false);
    r.expect("INIT");
    (Rig { b, start, node, rpc, shell }, registered)
}

/// A [`Rig`] without library models.
pub(crate) fn rig(cfg: BenchConfig) -> Rig {
    rig_with(cfg, |_| ()).0
}

/// A [`Rig`] whose DSP process has the [`observer`] library loaded: what it sees, and its handle.
pub(crate) fn observed(cfg: BenchConfig) -> (Rig, Seen, u32) {
    let (rig, seen) = rig_with(cfg, observer);
    let h = rig.b.preload_library(rig.rpc, "observe").expect("library");
    (rig, seen, h)
}

/// The usual end of a test: the channel closed, then `leases` and the shell lease dropped, and
/// the allocator node closed.
pub(crate) fn teardown(b: &Bench, node: Fd, rpc: Fd, shell: Lease, leases: impl IntoIterator<Item = Lease>) {
    b.close_raw(rpc).unwrap();
    for l in leases {
        l.drop_lease(b, node);
    }
    shell.drop_lease(b, node);
    b.close_raw(node).unwrap();
}
