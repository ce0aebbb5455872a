//! [`Bench`]: the simulated kernel behind the syscall seam, and its control API.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hexrpc_bsp::{Allocator, Board, KernelAbi};
use hexrpc_drivers::{
    adsprpc, BorrowedFd, Errno, Fd, FileStat, OpenAt, OpenFlags, OwnedFd as SeamOwnedFd, Prot, RustixSys, Scalars, Syscalls,
};

use crate::account::*;
use crate::config::BenchConfig;
use crate::dsp::{self, ReverseError};
use crate::entry::LibraryModel;
use crate::state::*;
use crate::{dma_heap, elf, ion, rpc, upstream, wire};

/// Size of the default shell image the bench serves at the board's shell path.
pub const DEFAULT_SHELL_LEN: usize = 8192;

/// The next bench's [`Syscalls::kernel_instance`]: never reused in a process, so a bench never
/// inherits what the HAL keeps for an earlier one.
static NEXT_INSTANCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The isolated bench: a simulated msm ION 4.9 + downstream adsprpc kernel and a simulated DSP,
/// implementing [`Syscalls`]. Cloning is cheap and every clone is the same bench, so it can be
/// handed to the HAL by value (`Bench: Syscalls + Clone + Send + Sync + 'static`) and shared with
/// listener threads.
#[derive(Clone)]
pub struct Bench {
    sh: Arc<Shared>,
}

/// A [`Bench`] that does not keep it alive ([`Bench::downgrade`]).
#[derive(Clone)]
pub struct WeakBench(std::sync::Weak<Shared>);

impl WeakBench {
    /// The bench, while it lives.
    pub fn upgrade(&self) -> Option<Bench> {
        self.0.upgrade().map(|sh| Bench { sh })
    }
}

impl core::fmt::Debug for Bench {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bench").field("board", &self.sh.cfg.board.name).field("snapshot", &self.snapshot()).finish()
    }
}

impl Default for Bench {
    fn default() -> Self {
        Bench::new()
    }
}

/// A raw reverse request for the hostile-DSP mode: any handle, scalars word and payload bytes,
/// optionally with a `bufsLenReq` that lies about the payload size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReverseRequest {
    /// Reverse handle (0 = apps_remotectl, or a key the host returned).
    pub handle: u32,
    /// Scalars word.
    pub sc: u32,
    /// Request payload (normally packed with [`wire::pack_request`]).
    pub payload: Vec<u8>,
    /// `bufsLenReq` to report instead of the payload length.
    pub claimed_len: Option<i32>,
}

impl ReverseRequest {
    /// A well-formed request: `ins` and `out_lens` packed per reverse-rpc.md 2.3.
    pub fn packed(handle: u32, sc: Scalars, ins: &[&[u8]], out_lens: &[u32]) -> ReverseRequest {
        ReverseRequest { handle, sc: sc.raw(), payload: wire::pack_request(ins, out_lens), claimed_len: None }
    }

    /// Any bytes.
    pub fn raw(handle: u32, sc: u32, payload: Vec<u8>) -> ReverseRequest {
        ReverseRequest { handle, sc, payload, claimed_len: None }
    }
}

/// The host's answer to a reverse request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReverseReply {
    /// `prevResult`.
    pub result: i32,
    /// The reply payload (`prevbufsLen` bytes of the next `next2`'s second input).
    pub payload: Vec<u8>,
}

impl ReverseReply {
    /// The output buffers, checked against the lengths that were asked for.
    pub fn outputs(&self, out_lens: &[u32]) -> Result<Vec<Vec<u8>>, wire::WireError> {
        wire::unpack_reply(&self.payload, out_lens)
    }
}

/// A simulated buffer (an ION buffer or a dma-buf), as [`Bench::buffer_of`] and
/// [`DriverMap::buffer`] name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u64);

/// What kind of driver map an entry of [`Bench::driver_maps`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverMapKind {
    /// A handle argument's map (va 0), made by INVOKE (and, upstream, INIT_CREATE's shell and
    /// MEM_MAP).
    Handle,
    /// An MMAP of an fd (downstream).
    Mmap,
    /// MMAP with ADD_PAGES (kernel memory, no fd).
    AddPages,
    /// An in/out buffer argument passed with a buffer fd that the downstream driver mapped
    /// instead of copying (`get_args`): it lives for the call, or longer with
    /// `FASTRPC_ATTR_KEEP_MAP`.
    Buffer,
}

/// One map in a FastRPC file's driver map list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverMap {
    /// What made it.
    pub kind: DriverMapKind,
    /// The fd NUMBER it is keyed by (-1 for ADD_PAGES).
    pub fd: i32,
    /// References: one per call (or MMAP) that found or made it and has not given it back.
    pub refs: u32,
    /// The buffer it pins (`None` for ADD_PAGES).
    pub buffer: Option<BufferId>,
    /// Its length in bytes (downstream `map->len`, what MUNMAP_FD and MUNMAP match: 0 for a
    /// handle map).
    pub len: u64,
    /// The length the DSP was told (downstream `map->size`): the whole dma-buf for a map of an
    /// fd, whatever length the caller named.
    pub dsp_size: u64,
}

/// The simulated kernel's memory in this process ([`Bench::kernel_footprint`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelFootprint {
    /// Coherent DMA buffers (each an anonymous mapping of its own).
    pub coherent: usize,
    /// Their bytes.
    pub coherent_bytes: u64,
    /// The kernel's shared mappings of dma-bufs (memfd mappings).
    pub buffer_mappings: usize,
    /// Their bytes.
    pub buffer_bytes: u64,
}

/// What the kernel keeps for good after the files that made it were released
/// ([`Bench::kernel_leaks`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelLeaks {
    /// Users (files) the driver never freed.
    pub users: usize,
    /// Their invoke contexts.
    pub contexts: usize,
    /// Their driver maps.
    pub maps: usize,
    /// The buffers those maps pin (memory the process can never get back).
    pub buffers: Vec<BufferId>,
    /// Their bytes.
    pub bytes: u64,
}

/// A driver-global heap map of the downstream driver ([`Bench::global_heap_maps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalHeapMap {
    /// The MMAP flags it was made with (`ADSP_MMAP_HEAP_ADDR` 4 or `ADSP_MMAP_REMOTE_HEAP_ADDR`
    /// 8).
    pub flags: u32,
    /// The fd the caller passed: a lookup key only (never imported; any value, -1 included).
    pub fd: i32,
    /// The DSP address (what a MUNMAP must name; the comma three's MMAP never returns it).
    pub raddr: u64,
    /// Its length (what a MUNMAP must name).
    pub len: u64,
    /// References (a later MMAP with the same fd and a range inside the map's kernel address
    /// takes one; MUNMAP needs exactly 1).
    pub refs: u32,
    /// The memory as the DSP finds it: never zeroed (`DMA_ATTR_SKIP_ZEROING`), so whatever the
    /// region held before ([`STALE_BYTE`](crate::STALE_BYTE) on the bench).
    pub contents: Vec<u8>,
}

/// A live simulated DSP process ([`Bench::dsp_processes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DspProcessInfo {
    /// The bench's process id ([`Bench::dsp_pid`]).
    pub pid: u64,
    /// The identity it was created under: the host tgid, with bit 30 for a SETMODE(SESSION)
    /// file.
    pub identity: i32,
    /// Whether bit 30 (the second session) is set.
    pub session: bool,
}

/// A posted reverse request, to wait for with [`Bench::await_reverse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReverseTicket(u64);

fn errno(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

fn reservation(name: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).map_err(errno)
}

fn is_virtual(path: &str) -> bool {
    path == "/bench" || path.starts_with("/bench/")
}

impl Bench {
    /// A bench with the default configuration ([`hexrpc_bsp::BENCH`] board, default shell).
    pub fn new() -> Bench {
        Bench::with_config(BenchConfig::default())
    }

    /// A bench with the default configuration on `board` ([`hexrpc_bsp::BENCH`]: ION 4.9 +
    /// downstream adsprpc; [`hexrpc_bsp::BENCH_UPSTREAM`]: dma-heap + upstream fastrpc).
    pub fn for_board(board: &'static Board) -> Bench {
        Bench::with_config(BenchConfig::for_board(board))
    }

    /// A bench with `cfg`. The board's two device nodes exist, and its shell path holds a
    /// [`DEFAULT_SHELL_LEN`]-byte Hexagon ELF.
    pub fn with_config(cfg: BenchConfig) -> Bench {
        let mut st = State { ledger_capacity: cfg.log_capacity, ..State::default() };
        let b = cfg.board;
        let s = |c: &CStr| c.to_string_lossy().into_owned();
        let alloc = match b.allocator {
            Allocator::Ion49 => DeviceKind::Ion,
            Allocator::DmaHeap => DeviceKind::DmaHeap,
        };
        let rpc = match b.abi {
            KernelAbi::DownstreamMsm => DeviceKind::Rpc,
            KernelAbi::Upstream => DeviceKind::Fastrpc,
        };
        st.vfs.insert(s(b.ion_path), VEntry { node: VNode::Device(alloc), access: Access::Present });
        st.vfs.insert(s(b.rpc_path), VEntry { node: VNode::Device(rpc), access: Access::Present });
        st.vfs
            .insert(s(b.shell_path), VEntry { node: VNode::File(Arc::new(elf::hexagon_elf(DEFAULT_SHELL_LEN))), access: Access::Present });
        #[cfg(not(feature = "linux"))]
        assert!(*b != hexrpc_bsp::BENCH_LINUX, "the bench-linux board needs hexrpc-bench's `linux` feature (Linux's own fastrpc.c)");
        #[cfg(feature = "linux")]
        let linux = *b == hexrpc_bsp::BENCH_LINUX;
        Bench {
            sh: Arc::new_cyclic(|_weak| Shared {
                #[cfg(feature = "linux")]
                linux: linux.then(|| crate::linux::LinuxKernel::probe(_weak.clone(), &cfg)),
                cfg,
                st: Mutex::new(st),
                cv: Condvar::new(),
                dsp_host_mmaps: Arc::new(AtomicUsize::new(0)),
                instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.sh.lock()
    }

    /// The configuration.
    pub fn config(&self) -> &BenchConfig {
        &self.sh.cfg
    }

    /// The board.
    pub fn board(&self) -> &'static Board {
        self.sh.cfg.board
    }

    // ---- virtual files ----

    /// Puts a read-only file at `path` (which must be under `/bench/`; other paths are the real
    /// filesystem). Replaces what was there.
    pub fn add_file(&self, path: &str, bytes: impl Into<Vec<u8>>) {
        self.lock().vfs.insert(path.into(), VEntry { node: VNode::File(Arc::new(bytes.into())), access: Access::Present });
    }

    /// Removes a virtual file or device node.
    pub fn remove_file(&self, path: &str) {
        self.lock().vfs.remove(path);
    }

    fn set_access(&self, path: &str, a: Access) {
        if let Some(e) = self.lock().vfs.get_mut(path) {
            e.access = a;
        }
    }

    /// Makes a virtual path look missing (`ENOENT`) until [`set_present`](Self::set_present).
    pub fn set_missing(&self, path: &str) {
        self.set_access(path, Access::Missing);
    }

    /// Makes a virtual path unreadable (`EACCES` on open; `stat` still works, mode 0).
    pub fn set_unreadable(&self, path: &str) {
        self.set_access(path, Access::Unreadable);
    }

    /// Undoes [`set_missing`](Self::set_missing) / [`set_unreadable`](Self::set_unreadable).
    pub fn set_present(&self, path: &str) {
        self.set_access(path, Access::Present);
    }

    /// Every `open` so far, in order.
    pub fn open_log(&self) -> Vec<OpenRecord> {
        self.lock().open_log.clone()
    }

    /// True if `path` was ever passed to `open` (whatever the result).
    pub fn was_opened(&self, path: &str) -> bool {
        self.lock().open_log.iter().any(|r| r.path == path)
    }

    // ---- libraries ----

    /// Registers the model of library `name`: the `NAME` of `file:///NAME?...` URIs, or the tag
    /// inside an image made by [`elf::library_image`](crate::elf::library_image) (so a host that
    /// publishes the image under a unique name still loads this model). The image bytes
    /// themselves come from the host through the reverse file service at load time.
    pub fn register_library(&self, name: &str, model: LibraryModel) {
        self.lock().libraries.insert(name.into(), Arc::new(model));
    }

    // ---- accounting ----

    /// Resource counts now.
    pub fn snapshot(&self) -> Snapshot {
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            // The driver's lists, read before the bench's lock (the driver may be waiting for it).
            let held = kern.held();
            let mut s = self.lock().snapshot(self.sh.dsp_host_mmaps.load(Ordering::SeqCst));
            s.dsp_maps = held.maps;
            s.contexts = held.contexts;
            s.parked = held.parked;
            return s;
        }
        self.lock().snapshot(self.sh.dsp_host_mmaps.load(Ordering::SeqCst))
    }

    /// What the kernel keeps for good after the files that made it were released: on
    /// [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX), the users Linux 6.1.192's `fastrpc.c` never
    /// frees (a context that was interrupted, timed out or in flight at a restart holds a
    /// reference on its user, so `fastrpc_user_free` never runs) with their contexts, maps and
    /// the buffers those pin. Empty on the simulated kernels, which free everything at close.
    pub fn kernel_leaks(&self) -> KernelLeaks {
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            let leaked = kern.leaked();
            let st = self.lock();
            let mut l = KernelLeaks { users: leaked.len(), ..KernelLeaks::default() };
            for u in &leaked {
                l.contexts += u.pending;
                l.maps += u.maps.len() + u.mmaps;
                for k in u.maps.iter().filter_map(|m| m.key) {
                    if !l.buffers.contains(&BufferId(k)) {
                        l.buffers.push(BufferId(k));
                        l.bytes += st.buffers.get(&k).map_or(0, |b| b.len);
                    }
                }
            }
            return l;
        }
        KernelLeaks::default()
    }

    /// The simulated kernel's own memory in this process (on
    /// [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX): the driver's coherent DMA buffers and its
    /// mappings of dma-bufs; zero on the models, whose kernel memory is the bench's tables): what
    /// a footprint measurement of hexrpc leaves out.
    pub fn kernel_footprint(&self) -> KernelFootprint {
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            let (coherent, coherent_bytes) = hexrpc_linux::coherent();
            let (buffer_mappings, buffer_bytes) = kern.kernel_mappings();
            return KernelFootprint { coherent, coherent_bytes, buffer_mappings, buffer_bytes };
        }
        KernelFootprint::default()
    }

    /// `now` less what the kernel keeps for good ([`Bench::kernel_leaks`]): what is left to
    /// compare with a test's start snapshot once everything hexrpc holds is given back.
    pub fn without_kernel_leaks(&self, now: &Snapshot) -> Snapshot {
        let l = self.kernel_leaks();
        let mut s = *now;
        s.ion_buffers = s.ion_buffers.saturating_sub(l.buffers.len());
        s.ion_bytes = s.ion_bytes.saturating_sub(l.bytes);
        s.dsp_maps = s.dsp_maps.saturating_sub(l.maps);
        s.contexts = s.contexts.saturating_sub(l.contexts);
        s.parked = s.parked.saturating_sub(l.contexts);
        s
    }

    /// [`Bench::settle`] to `want` up to what the kernel keeps for good: waits up to `timeout`
    /// for [`Bench::without_kernel_leaks`] of the snapshot to equal `want`, and returns it. On
    /// the simulated kernels (which leak nothing) this is [`Bench::settle`].
    pub fn settle_except_kernel_leaks(&self, want: &Snapshot, timeout: Duration) -> Snapshot {
        let end = Instant::now() + timeout;
        loop {
            let s = self.without_kernel_leaks(&self.snapshot());
            if s == *want || Instant::now() >= end {
                return s;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// `start` plus what the kernel now keeps for good ([`Bench::kernel_leaks`]): what a test
    /// that drove the kernel into such a leak settles back to. Equal to `start` on the simulated
    /// kernels.
    pub fn with_kernel_leaks(&self, start: &Snapshot) -> Snapshot {
        let l = self.kernel_leaks();
        let mut s = *start;
        s.ion_buffers += l.buffers.len();
        s.ion_bytes += l.bytes;
        s.dsp_maps += l.maps;
        s.contexts += l.contexts;
        s.parked += l.contexts;
        s
    }

    /// Waits up to `timeout` for the snapshot to equal `want` (DSP worker threads finish
    /// asynchronously after an ioctl returns); returns the last snapshot.
    pub fn settle(&self, want: &Snapshot, timeout: Duration) -> Snapshot {
        let end = Instant::now() + timeout;
        loop {
            let s = self.snapshot();
            if s == *want || Instant::now() >= end {
                return s;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Calls counted so far.
    pub fn counts(&self) -> CallCounts {
        self.lock().counts.clone()
    }

    /// Every FastRPC MUNMAP the bench received: the descriptor, the channel it was then (and its
    /// epoch), and the channel that had made the map.
    pub fn munmap_log(&self) -> Vec<MunmapRecord> {
        self.lock().munmap_log.clone()
    }

    /// The HAP ledger (since the last clear, at most
    /// [`BenchConfig::log_capacity`](crate::BenchConfig::log_capacity) entries).
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        self.lock().ledger.clone()
    }

    /// Ledger entries that show a broken contract.
    pub fn ledger_mismatches(&self) -> usize {
        self.lock().ledger_mismatches
    }

    /// Ledger entries and latency samples not kept since the last clear because their log was
    /// full (the logs are bounded so that a long run's memory does not grow per launch).
    pub fn log_overflow(&self) -> (u64, u64) {
        let st = self.lock();
        (st.ledger_dropped, st.latencies_dropped)
    }

    /// Empties every log the bench keeps for inspection (ledger, latencies, open, reverse and
    /// MUNMAP logs, the MMAP address origins of channels that are gone), so a long run stays
    /// bounded; check them first.
    pub fn clear_logs(&self) {
        let mut st = self.lock();
        st.ledger.clear();
        st.ledger_mismatches = 0;
        st.ledger_dropped = 0;
        st.latencies.clear();
        st.latencies_dropped = 0;
        st.open_log.clear();
        st.reverse_log.clear();
        st.munmap_log.clear();
        let live: std::collections::HashSet<u64> = st.rpc_files.keys().copied().collect();
        st.map_origins.retain(|_, f| live.contains(f));
        // Reverse records are indexed by tickets still waiting; they point past the cleared log
        // and are simply not recorded any more.
        for t in st.tickets.values_mut() {
            t.record = usize::MAX;
        }
    }

    /// Empties the ledger.
    pub fn clear_ledger(&self) {
        let mut st = self.lock();
        st.ledger.clear();
        st.ledger_mismatches = 0;
        st.ledger_dropped = 0;
    }

    /// Every reverse request the DSP sent, with the host's result.
    pub fn reverse_log(&self) -> Vec<ReverseRecord> {
        self.lock().reverse_log.clone()
    }

    /// Simulated latency samples (one per ioctl; since the last clear, at most
    /// [`BenchConfig::log_capacity`](crate::BenchConfig::log_capacity)).
    pub fn latencies(&self) -> Vec<LatencySample> {
        self.lock().latencies.clone()
    }

    /// Summary of the simulated latencies of `kind`.
    pub fn latency_summary(&self, kind: CallKind) -> Option<LatencySummary> {
        LatencySummary::of(kind, &self.lock().latencies)
    }

    // ---- faults ----

    /// Makes the `nth` (1-based, counted from now) occurrence of `target` do `fault`.
    pub fn inject(&self, target: FaultTarget, nth: u32, fault: Fault) {
        self.lock().faults.push(FaultRule { target, remaining: nth.max(1), fault });
    }

    /// Forgets every injected fault that has not fired.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Releases every call held by [`Fault::Hang`].
    pub fn release_hangs(&self) {
        self.lock().hang_generation += 1;
        self.sh.cv.notify_all();
    }

    /// Simulates a DSP subsystem restart: every DSP process ends (libraries, HAP mappings and
    /// reverse requests with it).
    ///
    /// Downstream this is a **CDSP** restart (`fastrpc_restart_notifier_cb`): the channel's
    /// restart counter moves on and the channel goes (the kref is left as it is). A file whose
    /// counter is older (it did its GETINFO or last INIT before) is stale: calls in flight and
    /// every later INVOKE / INVOKE_FD / INVOKE_ATTRS / INVOKE_CRC return **+104** from the ioctl
    /// with no errno (the tail of `fastrpc_internal_invoke`; nothing is sent), MMAP with
    /// ADD_PAGES returns +104 too, MMAP of an fd or a heap and MUNMAP return -1 (`EPERM`);
    /// GETINFO, SETMODE, CONTROL, GETPERF and MUNMAP_FD keep working; its close sends no release;
    /// an INIT on it revives it. The channel reopens at the next INIT, as
    /// [`set_channel_reopen`](Self::set_channel_reopen) says (at once by default). Driver-global
    /// heap maps survive (only an ADSP restart drains them, which the bench never makes).
    ///
    /// Upstream: calls in flight and every later call on an fd opened before fail with `EPIPE`.
    /// Fresh fds work (the DSP is back at once unless
    /// [`set_dsp_available`](Self::set_dsp_available) says otherwise).
    /// The restart is recorded as [`RestartReason::Requested`](crate::RestartReason::Requested)
    /// ([`Bench::last_restart`]).
    pub fn restart_dsp(&self) {
        restart_dsp(&self.sh, crate::RestartReason::Requested);
    }

    /// Every error Linux's own driver returned to an ioctl on a
    /// [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX) bench, in order: the request number and the
    /// errno (`EINTR` for the driver's `-ERESTARTSYS`). Empty on the other boards.
    #[cfg(feature = "linux")]
    pub fn linux_errors(&self) -> Vec<(u32, Errno)> {
        self.lock().linux_errors.clone()
    }

    /// What Linux's own driver holds now (contexts, maps' attachments, dma-buf references,
    /// coherent buffers, files, allocations), read from the harness's bookkeeping; `None` on the
    /// other boards.
    #[cfg(feature = "linux")]
    pub fn linux_counts(&self) -> Option<hexrpc_linux::Counts> {
        self.sh.linux.as_ref().map(|k| k.chan.counts())
    }

    /// While false, the DSP is down after a restart: downstream INIT fails with `ENOTCONN`; the
    /// upstream node does not exist (`ENOENT` on open, as the misc device is deregistered).
    pub fn set_dsp_available(&self, up: bool) {
        self.lock().dsp_down = !up;
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            if up {
                kern.reprobe();
            } else {
                kern.remove();
            }
        }
    }

    /// Downstream: how the CDSP channel comes back after this and every later restart
    /// ([`ChannelReopen`](crate::ChannelReopen); `Immediate` until changed). While the link is
    /// not up, or once the port is stuck, every channel open (the INIT of a file while the
    /// channel is closed) waits [`BenchConfig::port_connect_timeout`] holding the driver's
    /// global mutex (a close's session free waits for it) and fails with -1 (`EPERM`), counted
    /// in [`CallCounts::channel_open_failures`]. A reading of `fastrpc_channel_open`,
    /// `fastrpc_glink_register` and `fastrpc_glink_open`, not the driver run.
    pub fn set_channel_reopen(&self, reopen: crate::ChannelReopen) {
        self.lock().reopen = reopen;
    }

    /// A reboot, as far as the downstream channel is concerned (test-only): the glink link is up
    /// and a port left CONNECTING by [`ChannelReopen::Stuck`](crate::ChannelReopen::Stuck) is
    /// DISCONNECTED again, so the next open works. Nothing else of the bench is reset.
    pub fn reboot_channel(&self) {
        let mut st = self.lock();
        st.link_up_at = None;
        st.port_stuck = false;
        st.stuck_pending = false;
        drop(st);
        self.sh.cv.notify_all();
    }

    /// Every kernel oops or memory-safety violation the downstream driver would have suffered,
    /// in order ([`Snapshot::oopses`] counts them): MMAP with ADD_PAGES on a file without
    /// GETINFO (a NULL dereference in `fastrpc_buf_alloc`: the file is poisoned, every later
    /// ioctl on it fails with `EIO`), an invoke or a heap MMAP before GETINFO (the tail of
    /// `fastrpc_internal_invoke` reads `channel[-1]`), a remote-heap MMAP whose hyp-assign fails
    /// after the DSP mapped the pages (`fastrpc_mmap_on_dsp`'s bail frees memory the DSP still
    /// maps).
    pub fn oopses(&self) -> Vec<Oops> {
        self.lock().oopses.clone()
    }

    /// The downstream driver's global heap maps (`gfa.maps`, MMAP with `ADSP_MMAP_HEAP_ADDR` or
    /// `ADSP_MMAP_REMOTE_HEAP_ADDR`), oldest first: owned by no file, freed only by a MUNMAP of
    /// their DSP address and length from any file.
    pub fn global_heap_maps(&self) -> Vec<GlobalHeapMap> {
        let st = self.lock();
        st.global_maps
            .iter()
            .map(|m| GlobalHeapMap { flags: m.flags, fd: m.fd, raddr: m.raddr, len: m.len, refs: m.refs, contents: m.mem.clone() })
            .collect()
    }

    // ---- threads ----

    /// True if thread `tid` is blocked in an interruptible bench wait (an invoke).
    pub fn is_blocked(&self, tid: i32) -> bool {
        self.lock().blocked.contains(&tid)
    }

    /// Waits up to `timeout` until thread `tid` is blocked in an interruptible bench wait.
    pub fn wait_until_blocked(&self, tid: i32, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if st.blocked.contains(&tid) {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            st = self.sh.wait_for(st, (end - now).min(Duration::from_millis(20)));
        }
    }

    // ---- hostile DSP ----

    fn pid_of(&self, st: &State, rpc_fd: Fd) -> Option<u64> {
        match st.fds.get(&rpc_fd.0) {
            Some(FdEntry { obj: FdObj::Rpc(f), .. }) => st.rpc_files.get(f).and_then(|f| f.proc_id).filter(|p| st.procs.contains_key(p)),
            _ => None,
        }
    }

    /// The simulated DSP process behind a FastRPC fd, if one is alive.
    pub fn dsp_pid(&self, rpc_fd: Fd) -> Option<u64> {
        let st = self.lock();
        self.pid_of(&st, rpc_fd)
    }

    /// The driver's map list of the FastRPC file behind `rpc_fd` (`None` if the number is not a
    /// FastRPC file of this bench), in creation order: what MUNMAP_FD, the fdlist and close work
    /// on. A map keeps its buffer alive after every user reference is gone, and is found by its
    /// fd NUMBER: compare [`DriverMap::buffer`] with [`Bench::buffer_of`] of the same number to
    /// see a stale map.
    pub fn driver_maps(&self, rpc_fd: Fd) -> Option<Vec<DriverMap>> {
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            // The real driver's own list (`fl->maps`), read without the bench's lock.
            let file = match self.lock().fds.get(&rpc_fd.0) {
                Some(FdEntry { obj: FdObj::Rpc(f), .. }) => *f,
                _ => return None,
            };
            return kern.file_maps(file);
        }
        let st = self.lock();
        let Some(FdEntry { obj: FdObj::Rpc(f), .. }) = st.fds.get(&rpc_fd.0) else { return None };
        let f = st.rpc_files.get(f)?;
        Some(
            f.maps
                .iter()
                .map(|m| DriverMap {
                    kind: match m.kind {
                        MapKind::Fd => DriverMapKind::Mmap,
                        MapKind::AddPages => DriverMapKind::AddPages,
                        MapKind::Handle => DriverMapKind::Handle,
                        MapKind::Buffer => DriverMapKind::Buffer,
                    },
                    fd: m.fd,
                    refs: m.refs,
                    buffer: m.buf.map(BufferId),
                    len: m.len,
                    dsp_size: m.size,
                })
                .collect(),
        )
    }

    /// The driver maps of every FastRPC file still known to the simulated kernel (closed files
    /// whose release is in progress included): the total a test compares with its start.
    pub fn all_driver_maps(&self) -> Vec<DriverMap> {
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            // Every open file's list and those of users the driver never freed.
            return kern.all_maps();
        }
        let st = self.lock();
        let mut v = Vec::new();
        for f in st.rpc_files.values() {
            for m in &f.maps {
                let kind = match m.kind {
                    MapKind::Fd => DriverMapKind::Mmap,
                    MapKind::AddPages => DriverMapKind::AddPages,
                    MapKind::Handle => DriverMapKind::Handle,
                    MapKind::Buffer => DriverMapKind::Buffer,
                };
                v.push(DriverMap { kind, fd: m.fd, refs: m.refs, buffer: m.buf.map(BufferId), len: m.len, dsp_size: m.size });
            }
        }
        v
    }

    /// The buffer (ION buffer or dma-buf) a descriptor number names now, if it names one.
    pub fn buffer_of(&self, fd: Fd) -> Option<BufferId> {
        self.lock().dmabuf(fd.0).map(BufferId)
    }

    /// Whether a buffer still exists (some handle, fd, host mapping or driver map holds it).
    pub fn buffer_alive(&self, id: BufferId) -> bool {
        self.lock().buffers.contains_key(&id.0)
    }

    /// The live DSP processes and the identity each was created under (tgid, with bit 30 for
    /// the second session of a process); one per identity.
    pub fn dsp_processes(&self) -> Vec<DspProcessInfo> {
        let st = self.lock();
        let mut v: Vec<DspProcessInfo> = st
            .procs
            .iter()
            .filter(|(_, p)| p.alive)
            .map(|(&pid, p)| DspProcessInfo { pid, identity: p.identity, session: p.identity & (1 << 30) != 0 })
            .collect();
        v.sort_by_key(|p| p.pid);
        v
    }

    /// The DSP identity the FastRPC file behind `rpc_fd` sends (what its INIT creates and its
    /// close releases).
    pub fn identity_of(&self, rpc_fd: Fd) -> Option<i32> {
        let st = self.lock();
        let Some(FdEntry { obj: FdObj::Rpc(f), .. }) = st.fds.get(&rpc_fd.0) else { return None };
        st.rpc_files.get(f).map(|f| f.tgid)
    }

    /// Puts the registered library model `name` into the DSP process behind `rpc_fd` as if a
    /// remotectl open had loaded it (no reverse traffic: for kernel tests that need a DSP-side
    /// observer without a listener). Returns the library handle.
    pub fn preload_library(&self, rpc_fd: Fd, name: &str) -> Option<u32> {
        let mut st = self.lock();
        let pid = self.pid_of(&st, rpc_fd)?;
        let model = st.libraries.get(name)?.clone();
        let p = st.procs.get_mut(&pid)?;
        let h = p.next_lib;
        p.next_lib += 0x10;
        p.libs.insert(h, crate::state::LoadedLib { name: name.to_string(), model, cache: Default::default() });
        Some(h)
    }

    /// Makes the DSP process behind `rpc_fd` send `req` to the host's listener (queued until a
    /// thread sits in `next2`).
    pub fn post_reverse(&self, rpc_fd: Fd, req: ReverseRequest) -> Result<ReverseTicket, ReverseError> {
        let mut st = self.lock();
        let pid = self.pid_of(&st, rpc_fd).ok_or(ReverseError::NoProcess)?;
        let id = dsp::post(&mut st, pid, req.handle, req.sc, req.payload, req.claimed_len).ok_or(ReverseError::NoProcess)?;
        drop(st);
        self.sh.cv.notify_all();
        Ok(ReverseTicket(id))
    }

    /// Waits for the answer to a posted request; on timeout the request is withdrawn.
    pub fn await_reverse(&self, t: ReverseTicket, timeout: Duration) -> Result<ReverseReply, ReverseError> {
        dsp::await_ticket(&self.sh, t.0, timeout).map(|(result, payload)| ReverseReply { result, payload })
    }

    /// [`post_reverse`](Self::post_reverse) then [`await_reverse`](Self::await_reverse).
    pub fn reverse_call(&self, rpc_fd: Fd, req: ReverseRequest, timeout: Duration) -> Result<ReverseReply, ReverseError> {
        let t = self.post_reverse(rpc_fd, req)?;
        self.await_reverse(t, timeout)
    }

    /// A handle that does not keep the bench alive: for a library model that must reach its own
    /// bench (a scripted kernel sending reverse requests as DSP code would) without a cycle.
    pub fn downgrade(&self) -> WeakBench {
        WeakBench(Arc::downgrade(&self.sh))
    }

    // ---- raw numbers (tests of the simulated kernel) ----

    /// [`Syscalls::open`] that hands back the bare number: the kernel tests drive the simulated
    /// driver with raw descriptor numbers, as C code would.
    pub fn open_raw(&self, path: &CStr, flags: OpenFlags) -> Result<Fd, Errno> {
        self.open(path, flags).map(SeamOwnedFd::into_raw)
    }

    /// Closes a number this bench handed out (`EBADF` for any other number, which is left
    /// alone): the raw counterpart of [`Syscalls::close`] for kernel tests.
    pub fn close_raw(&self, fd: Fd) -> Result<(), Errno> {
        let ours = {
            let st = self.lock();
            st.fds.contains_key(&fd.0) || st.passthrough.contains(&fd.0)
        };
        if !ours {
            return Err(Errno::EBADF);
        }
        // SAFETY: the number is one this bench handed out and still holds; a test that closes
        // it gives up its use, as `close(2)` would.
        self.close(unsafe { SeamOwnedFd::from_raw(fd) })
    }

    // ---- internals of the seam ----

    fn begin(&self, st: &mut State, kind: CallKind) -> Option<Fault> {
        st.count(kind);
        st.fault(FaultTarget::Call(kind))
    }

    fn finish_cost(&self, kind: CallKind) {
        let (bytes, sim) = rpc::COPIED.with(|c| c.replace((0, Duration::ZERO)));
        let cost = self.sh.cfg.cost.cost(bytes).saturating_add(sim);
        self.lock().record_latency(LatencySample { kind, simulated: cost }, self.sh.cfg.log_capacity);
        if self.sh.cfg.cost.sleep && !cost.is_zero() {
            std::thread::sleep(cost);
        }
    }

    fn vstat(&self, st: &State, path: &str) -> Result<FileStat, Errno> {
        match st.vfs.get(path) {
            Some(VEntry { access: Access::Missing, .. }) => Err(Errno::ENOENT),
            Some(VEntry { node: VNode::Device(DeviceKind::Fastrpc), .. }) if st.dsp_down => Err(Errno::ENOENT),
            Some(e) => {
                let perm = if e.access == Access::Unreadable { 0 } else { 0o444 };
                Ok(match &e.node {
                    VNode::File(d) => FileStat { mode: FileStat::S_IFREG | perm, nlink: 1, size: d.len() as u64, ..Default::default() },
                    VNode::Device(k) => FileStat {
                        mode: FileStat::S_IFCHR | if perm == 0 { 0 } else { 0o666 },
                        nlink: 1,
                        rdev: match k {
                            DeviceKind::Ion => (10 << 8) | 60,
                            DeviceKind::Rpc => 240 << 8,
                            DeviceKind::DmaHeap => 241 << 8,
                            DeviceKind::Fastrpc => (10 << 8) | 61,
                        },
                        ..Default::default()
                    },
                })
            }
            None => {
                let dir = format!("{}/", path.trim_end_matches('/'));
                if st.vfs.iter().any(|(k, e)| k.starts_with(&dir) && e.access != Access::Missing) {
                    Ok(FileStat { mode: FileStat::S_IFDIR | 0o555, nlink: 2, ..Default::default() })
                } else {
                    Err(Errno::ENOENT)
                }
            }
        }
    }

    /// `open` of the FastRPC node of a [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX) bench: the real
    /// driver's `fastrpc_device_open` (called without the bench's lock: the driver may call back
    /// into the bench). `None` for every other path and bench.
    #[cfg(feature = "linux")]
    fn open_linux(&self, path: &str) -> Option<Result<Fd, Errno>> {
        let kern = self.sh.linux.as_ref()?;
        {
            let st = self.lock();
            if !matches!(st.vfs.get(path).map(|e| &e.node), Some(VNode::Device(DeviceKind::Fastrpc))) {
                return None;
            }
            if let Err(e) = self.vstat(&st, path) {
                return Some(Err(e));
            }
            if st.vfs.get(path).is_some_and(|e| e.access == Access::Unreadable) {
                return Some(Err(Errno::EACCES));
            }
        }
        let node = path.rsplit('/').next().unwrap_or(path);
        let file = match kern.open(node) {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        let mut st = self.lock();
        let id = st.id();
        let epoch = st.epoch;
        // fastrpc_device_open took an SMMU session (the driver's own count refuses the ninth);
        // the bench counts it too, for its snapshot.
        st.rpc_files.insert(id, RpcFile::upstream(epoch, self.sh.cfg.board.channel));
        kern.adopt(id, file);
        if let Some(n) = st.sessions.get_mut(self.sh.cfg.board.channel as usize) {
            *n += 1;
        }
        match reservation("hexrpc-bench-node") {
            Ok(owned) => {
                let n = owned.as_raw_fd();
                st.fds.insert(n, FdEntry { _owned: owned, obj: FdObj::Rpc(id) });
                Some(Ok(Fd(n)))
            }
            Err(e) => {
                st.rpc_files.remove(&id);
                drop(st);
                kern.release(id);
                Some(Err(e))
            }
        }
    }

    #[cfg(not(feature = "linux"))]
    fn open_linux(&self, _: &str) -> Option<Result<Fd, Errno>> {
        None
    }

    /// An ioctl on a FastRPC file of a [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX) bench: into the
    /// real driver's `fastrpc_device_ioctl`, without the bench's lock (the driver blocks this
    /// thread and calls back into the bench). `Err` gives the lock back for any other file.
    ///
    /// # Safety
    ///
    /// `arg` must satisfy the request's contract, as for `ioctl(2)`.
    #[cfg(feature = "linux")]
    unsafe fn linux_ioctl<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        file: u64,
        request: u32,
        arg: *mut core::ffi::c_void,
        pre: Option<Fault>,
    ) -> LinuxIoctl<'a> {
        let Some((kern, lf)) = self.sh.linux.as_ref().and_then(|k| k.file(file).map(|f| (k, f))) else { return Err(st) };
        // An invoke's wait is interruptible ([`Bench::wait_until_blocked`]).
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let invoke = request == hexrpc_drivers::upstream::FASTRPC_IOCTL_INVOKE;
        if invoke {
            st.blocked.insert(tid);
        }
        drop(st);
        self.sh.cv.notify_all();
        // SAFETY: passed on from our caller.
        let r = unsafe { kern.ioctl(file, &lf, request, arg, pre) };
        drop(lf);
        let mut st = self.lock();
        if invoke {
            st.blocked.remove(&tid);
            st.interrupts.remove(&tid);
        }
        if let Err(e) = r {
            st.linux_errors.push((request, e));
        }
        Ok((st, r))
    }

    /// Without the `linux` feature every file is the models'.
    ///
    /// # Safety
    ///
    /// Nothing is done with `arg`.
    #[cfg(not(feature = "linux"))]
    unsafe fn linux_ioctl<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        _: u64,
        _: u32,
        _: *mut core::ffi::c_void,
        _: Option<Fault>,
    ) -> LinuxIoctl<'a> {
        Err(st)
    }

    fn open_virtual(&self, st: &mut State, path: &str, flags: OpenFlags) -> Result<Fd, Errno> {
        let stat = self.vstat(st, path)?;
        if st.vfs.get(path).is_some_and(|e| e.access == Access::Unreadable) {
            return Err(Errno::EACCES);
        }
        let obj = match st.vfs.get(path).map(|e| &e.node) {
            Some(VNode::Device(DeviceKind::Ion)) => {
                let id = st.id();
                st.ion_clients.insert(id, IonClient::default());
                FdObj::Ion(id)
            }
            Some(VNode::Device(DeviceKind::Rpc)) => {
                let id = st.id();
                st.rpc_files.insert(id, RpcFile::downstream());
                FdObj::Rpc(id)
            }
            Some(VNode::Device(DeviceKind::DmaHeap)) => FdObj::Heap,
            Some(VNode::Device(DeviceKind::Fastrpc)) => FdObj::Rpc(upstream::open_file(&self.sh, st)?),
            Some(VNode::File(d)) => {
                if flags.read_write {
                    return Err(Errno::EROFS);
                }
                FdObj::File(d.clone())
            }
            None => {
                if flags.read_write || !stat.is_dir() {
                    return Err(Errno::EISDIR);
                }
                FdObj::Dir(path.trim_end_matches('/').to_string())
            }
        };
        let owned = match reservation("hexrpc-bench-node") {
            Ok(o) => o,
            Err(e) => {
                match obj {
                    FdObj::Ion(id) => drop(st.ion_clients.remove(&id)),
                    FdObj::Rpc(id) => st.free_rpc_file(id),
                    _ => {}
                }
                return Err(e);
            }
        };
        let n = owned.as_raw_fd();
        st.fds.insert(n, FdEntry { _owned: owned, obj });
        Ok(Fd(n))
    }

    /// Where `open_at(dir, name)` resolves: a virtual path, a real directory descriptor, or an
    /// error (the virtual file table has no symbolic links, so a virtual walk is a path join).
    fn at_target(&self, st: &State, dir: Option<Fd>, name: &str) -> Result<AtTarget, Errno> {
        // As openat: an absolute path ignores the directory.
        match dir {
            _ if name.starts_with('/') && is_virtual(name) => Ok(AtTarget::Virtual(name.to_string())),
            _ if name.starts_with('/') => Ok(AtTarget::Real(None)),
            None => Ok(AtTarget::Real(None)),
            Some(d) => match st.fds.get(&d.0).map(|e| &e.obj) {
                Some(FdObj::Dir(base)) => Ok(AtTarget::Virtual(format!("{base}/{name}"))),
                Some(_) => Err(Errno::ENOTDIR),
                None if st.passthrough.contains(&d.0) => Ok(AtTarget::Real(Some(d))),
                None => Err(Errno::EBADF),
            },
        }
    }

    fn delay_call(&self, fault: Option<Fault>) -> Option<Errno> {
        match fault {
            Some(Fault::Errno(e)) => Some(e),
            Some(Fault::Returned(_)) => Some(Errno::EINVAL),
            Some(f @ (Fault::Delay(_) | Fault::Hang)) => {
                let st = self.lock();
                drop(rpc::kernel_delay(&self.sh, st, Some(f)));
                None
            }
            None => None,
        }
    }
}

// SAFETY: `mmap` returns real shared mappings (of memfds or of real files) that stay valid until
// `munmap`; `ioctl` only reads and writes the argument struct and the user pointers inside it as
// the simulated driver's ABI says (after the plausibility checks of `user`); everything else is
// plain data or passes through to `RustixSys`.
unsafe impl Syscalls for Bench {
    fn open(&self, path: &CStr, flags: OpenFlags) -> Result<SeamOwnedFd, Errno> {
        let p = path.to_string_lossy().into_owned();
        let fault = {
            let mut st = self.lock();
            self.begin(&mut st, CallKind::Open)
        };
        let simulated = is_virtual(&p);
        let result = match self.delay_call(fault) {
            Some(e) => Err(e),
            None => {
                if simulated {
                    match self.open_linux(&p) {
                        Some(r) => r,
                        None => {
                            let mut st = self.lock();
                            self.open_virtual(&mut st, &p, flags)
                        }
                    }
                } else {
                    let r = RustixSys.open(path, flags).map(SeamOwnedFd::into_raw);
                    if let Ok(fd) = r {
                        self.lock().passthrough.insert(fd.0);
                    }
                    r
                }
            }
        };
        self.lock().open_log.push(OpenRecord { path: p, simulated, result });
        // SAFETY: a number this bench just handed out (a reserved simulated one, or a real
        // descriptor it opened); ownership passes to the caller.
        result.map(|fd| unsafe { SeamOwnedFd::from_raw(fd) })
    }

    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<SeamOwnedFd, Errno> {
        let name = path.to_string_lossy().into_owned();
        let fault = {
            let mut st = self.lock();
            self.begin(&mut st, CallKind::Open)
        };
        let target = self.at_target(&self.lock(), dir, &name);
        let (logged, simulated, result) = match target {
            Err(e) => (name.clone(), dir.is_none() && is_virtual(&name), Err(e)),
            Ok(AtTarget::Virtual(p)) => {
                let r = match self.delay_call(fault) {
                    Some(e) => Err(e),
                    None => {
                        let mut st = self.lock();
                        match (how, self.vstat(&st, &p)) {
                            (_, Err(e)) => Err(e),
                            (OpenAt::Dir { .. }, Ok(s)) if !s.is_dir() => Err(Errno::ENOTDIR),
                            (OpenAt::Dir { .. } | OpenAt::File, Ok(_)) => self.open_virtual(&mut st, &p, OpenFlags::READ_ONLY),
                        }
                    }
                };
                (p, true, r)
            }
            Ok(AtTarget::Real(d)) => {
                let r = match self.delay_call(fault) {
                    Some(e) => Err(e),
                    None => RustixSys.open_at(d, path, how).map(SeamOwnedFd::into_raw),
                };
                if let Ok(fd) = r {
                    self.lock().passthrough.insert(fd.0);
                }
                let logged = match d {
                    Some(d) => format!("{}/{name}", real_path(d)),
                    None => name.clone(),
                };
                (logged, false, r)
            }
        };
        self.lock().open_log.push(OpenRecord { path: logged, simulated, result });
        // SAFETY: a number this bench just handed out (a reserved simulated one, or a real
        // descriptor it opened); ownership passes to the caller.
        result.map(|fd| unsafe { SeamOwnedFd::from_raw(fd) })
    }

    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        let fault = {
            let mut st = self.lock();
            self.begin(&mut st, CallKind::Stat)
        };
        if let Some(e) = self.delay_call(fault) {
            return Err(e);
        }
        let n = name.to_string_lossy();
        let st = self.lock();
        match self.at_target(&st, Some(dir), &n)? {
            AtTarget::Virtual(p) => self.vstat(&st, &p),
            AtTarget::Real(_) => {
                drop(st);
                RustixSys.stat_at(dir, name)
            }
        }
    }

    fn close(&self, fd: SeamOwnedFd) -> Result<(), Errno> {
        let fd = fd.into_raw();
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Close);
        let injected = match fault {
            Some(Fault::Errno(e)) => Some(e),
            _ => None,
        };
        let r = if let Some(e) = st.fds.remove(&fd.0) {
            if let FdObj::DmaBuf(b) = e.obj {
                st.lease_fd_gone(fd.0, b);
            }
            st = release_obj(&self.sh, st, e.obj);
            Ok(())
        } else if st.passthrough.remove(&fd.0) {
            // SAFETY: a real descriptor this bench opened and its caller has just given back.
            RustixSys.close(unsafe { SeamOwnedFd::from_raw(fd) })
        } else {
            Err(Errno::EBADF)
        };
        drop(st);
        self.sh.cv.notify_all();
        match injected {
            Some(e) => Err(e),
            None => r,
        }
    }

    /// Each bench is a kernel of its own: the HAL keeps the DSP identities its channels hold per
    /// kernel, and tests run many benches in one process.
    fn kernel_instance(&self) -> u64 {
        self.sh.instance
    }

    fn retire(&self, borrowed: BorrowedFd<'_>) -> Result<(), Errno> {
        let fd = borrowed.raw();
        let mut st = self.lock();
        let old = st.fds.get_mut(&fd.0).map(|e| core::mem::replace(&mut e.obj, FdObj::Null));
        let r = match old {
            Some(old) => {
                if let FdObj::DmaBuf(b) = old {
                    st.lease_fd_gone(fd.0, b);
                }
                st = release_obj(&self.sh, st, old);
                Ok(())
            }
            None if st.passthrough.contains(&fd.0) => RustixSys.retire(borrowed),
            None => Err(Errno::EBADF),
        };
        drop(st);
        self.sh.cv.notify_all();
        r
    }

    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Pread);
        drop(st);
        if let Some(e) = self.delay_call(fault) {
            return Err(e);
        }
        let st = self.lock();
        match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::File(d)) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(d.len());
                let n = buf.len().min(d.len() - start);
                buf[..n].copy_from_slice(&d[start..start + n]);
                Ok(n)
            }
            Some(FdObj::Dir(_)) => Err(Errno::EISDIR),
            Some(_) => Err(Errno::EINVAL),
            None if st.passthrough.contains(&fd.0) => {
                drop(st);
                RustixSys.pread(fd, buf, offset)
            }
            None => Err(Errno::EBADF),
        }
    }

    fn fstat(&self, fd: Fd) -> Result<FileStat, Errno> {
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Fstat);
        drop(st);
        if let Some(e) = self.delay_call(fault) {
            return Err(e);
        }
        let st = self.lock();
        match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::File(d)) => Ok(FileStat { mode: FileStat::S_IFREG | 0o444, nlink: 1, size: d.len() as u64, ..Default::default() }),
            Some(FdObj::Dir(_)) => Ok(FileStat { mode: FileStat::S_IFDIR | 0o555, nlink: 2, ..Default::default() }),
            Some(FdObj::Ion(_)) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: (10 << 8) | 60, ..Default::default() }),
            Some(FdObj::Rpc(_)) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: 240 << 8, ..Default::default() }),
            Some(FdObj::Heap) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: 241 << 8, ..Default::default() }),
            Some(FdObj::Null) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: (1 << 8) | 3, ..Default::default() }),
            Some(FdObj::DmaBuf(b)) => {
                Ok(FileStat { mode: 0o600, nlink: 1, size: st.buffers.get(b).map_or(0, |b| b.len), ..Default::default() })
            }
            None if st.passthrough.contains(&fd.0) => {
                drop(st);
                RustixSys.fstat(fd)
            }
            None => Err(Errno::EBADF),
        }
    }

    fn stat(&self, path: &CStr, follow: bool) -> Result<FileStat, Errno> {
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Stat);
        drop(st);
        if let Some(e) = self.delay_call(fault) {
            return Err(e);
        }
        let p = path.to_string_lossy();
        if is_virtual(&p) {
            let st = self.lock();
            self.vstat(&st, &p)
        } else {
            RustixSys.stat(path, follow)
        }
    }

    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut core::ffi::c_void) -> Result<i32, Errno> {
        let mut st = self.lock();
        // Heap nodes and dma-bufs: no faults beyond the call counter, no kernel waits.
        let simple = match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::Heap) => Some((dma_heap::heap_kind_of(request), None)),
            Some(FdObj::DmaBuf(b)) => Some((dma_heap::dmabuf_kind_of(request), Some(*b))),
            _ => None,
        };
        if let Some((kind, buf)) = simple {
            match self.begin(&mut st, kind) {
                Some(Fault::Errno(e)) => return Err(e),
                Some(Fault::Returned(v)) => return Ok(v),
                _ => {}
            }
            let a = arg as usize as u64;
            return match buf {
                // SAFETY: passed on from our caller.
                None => unsafe { dma_heap::heap_ioctl(&self.sh, &mut st, request, a) },
                // SAFETY: passed on from our caller.
                Some(b) => unsafe { dma_heap::dmabuf_ioctl(&mut st, b, request, a) },
            };
        }
        // Downstream MUNMAP / MUNMAP_64 on downstream files, upstream MUNMAP on upstream ones
        // (upstream INVOKE has the number of downstream MUNMAP; the structs are the same).
        let upstream_rpc = match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::Rpc(f)) => st.rpc_files.get(f).map(|f| f.upstream),
            _ => None,
        };
        let is_munmap = match upstream_rpc {
            Some(false) => request == adsprpc::FASTRPC_IOCTL_MUNMAP || request == adsprpc::FASTRPC_IOCTL_MUNMAP_64,
            Some(true) => request == hexrpc_drivers::upstream::FASTRPC_IOCTL_MUNMAP,
            // Not a channel (any more): a MUNMAP sent to a retired or closed number is recorded
            // too (by the downstream numbers, as 12a's accounting does).
            None => request == adsprpc::FASTRPC_IOCTL_MUNMAP || request == adsprpc::FASTRPC_IOCTL_MUNMAP_64,
        };
        if is_munmap {
            // SAFETY: passed on from our caller (a struct of the request's size at `arg`); both
            // structs are (vaddrout, size) as two u64.
            if let Some(m) = unsafe { crate::user::read_struct::<adsprpc::fastrpc_ioctl_munmap>(arg as usize as u64) } {
                let channel = match st.fds.get(&fd.0).map(|e| &e.obj) {
                    Some(FdObj::Rpc(f)) => Some(*f),
                    _ => None,
                };
                let channel_epoch = channel.and_then(|f| st.rpc_files.get(&f)).and_then(|f| f.channel_epoch);
                let owner = st.map_origins.get(&m.vaddrout).copied();
                st.munmap_log.push(MunmapRecord { fd: fd.0, channel, channel_epoch, owner, map: (m.vaddrout, m.size) });
            }
        }
        let obj = match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::Ion(c)) => Some(Ok(*c)),
            Some(FdObj::Rpc(f)) => Some(Err(*f)),
            Some(_) => None,
            None if st.passthrough.contains(&fd.0) => {
                st.count(CallKind::OtherIoctl);
                drop(st);
                // SAFETY: a real descriptor the caller opened through us; the caller upholds the
                // ioctl contract for it.
                return unsafe { RustixSys.ioctl(fd, request, arg) };
            }
            None => return Err(Errno::EBADF),
        };
        let Some(obj) = obj else {
            st.count(CallKind::OtherIoctl);
            return Err(Errno::ENOTTY);
        };
        let up = match obj {
            Err(f) => st.rpc_files.get(&f).is_some_and(|f| f.upstream),
            Ok(_) => false,
        };
        let kind = match obj {
            Ok(_) => ion::kind_of(request),
            Err(_) if up => upstream::kind_of(request),
            Err(_) => rpc::kind_of(request),
        };
        let fault = self.begin(&mut st, kind);
        rpc::COPIED.with(|c| c.set((0, Duration::ZERO)));
        let pre = match fault {
            Some(Fault::Errno(e)) => return Err(e),
            Some(Fault::Returned(v)) => return Ok(v),
            Some(f) if kind.is_invoke() => Some(f),
            Some(f) => {
                if let Err(file) = obj {
                    if let Some(file) = st.rpc_files.get_mut(&file) {
                        file.in_ioctl += 1;
                    }
                }
                st = rpc::kernel_delay(&self.sh, st, Some(f));
                if let Err(file) = obj {
                    if let Some(file) = st.rpc_files.get_mut(&file) {
                        file.in_ioctl -= 1;
                    }
                }
                None
            }
            None => None,
        };
        if let Err(file) = obj {
            // SAFETY: passed on from our caller (a struct of the request's size at `arg`).
            unsafe { note_rpc_request(&mut st, file, kind, arg as usize as u64) };
        }
        let r = match obj {
            Ok(client) => {
                if !st.ion_clients.contains_key(&client) {
                    return Err(Errno::EBADF);
                }
                // SAFETY: passed on from our caller.
                let r = unsafe { ion::ioctl(&self.sh, &mut st, client, request, arg as usize as u64) };
                drop(st);
                r
            }
            Err(file) => {
                match st.rpc_files.get_mut(&file) {
                    Some(f) => f.in_ioctl += 1,
                    None => return Err(Errno::EBADF),
                }
                // SAFETY: passed on from our caller.
                let linux = unsafe { self.linux_ioctl(st, file, request, arg, pre) };
                let (mut st, r) = match linux {
                    Ok(done) => done,
                    // SAFETY: passed on from our caller.
                    Err(st) if up => unsafe { upstream::ioctl(&self.sh, st, file, request, arg, pre) },
                    // SAFETY: passed on from our caller.
                    Err(st) => unsafe { rpc::ioctl(&self.sh, st, file, request, arg, pre) },
                };
                let teardown = match st.rpc_files.get_mut(&file) {
                    Some(f) => {
                        // An INIT that returned 0 (after a GETINFO downstream) sets the file up.
                        if kind.is_init() && r == Ok(0) && f.cid.is_some() {
                            f.inited = true;
                        }
                        f.in_ioctl -= 1;
                        f.closed && f.in_ioctl == 0
                    }
                    None => false,
                };
                if teardown {
                    st = release_file(&self.sh, st, file);
                }
                drop(st);
                self.sh.cv.notify_all();
                r
            }
        };
        self.finish_cost(kind);
        r
    }

    unsafe fn mmap(&self, fd: Fd, len: usize, prot: Prot, offset: u64) -> Result<NonNull<u8>, Errno> {
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Mmap);
        drop(st);
        if let Some(e) = self.delay_call(fault) {
            return Err(e);
        }
        let mut st = self.lock();
        match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::DmaBuf(b)) => {
                let b = *b;
                let blen = st.buffers.get(&b).map_or(0, |x| x.len);
                let pages = (len as u64).div_ceil(4096) * 4096;
                if len == 0 || !offset.is_multiple_of(4096) || offset.checked_add(pages).is_none_or(|e| e > blen) {
                    return Err(Errno::EINVAL);
                }
                // SAFETY: a fresh shared mapping of a real descriptor; the caller takes on the
                // shared-memory contract.
                let p = unsafe { RustixSys.mmap(fd, len, prot, offset) }?;
                st.host_maps.insert(p.as_ptr() as usize, HostMap { len, buf: Some(b) });
                if let Some(x) = st.buffers.get_mut(&b) {
                    x.host_maps += 1;
                }
                Ok(p)
            }
            Some(_) => Err(Errno::ENODEV),
            None if st.passthrough.contains(&fd.0) => {
                // SAFETY: as above, for a real file the caller opened through us.
                let p = unsafe { RustixSys.mmap(fd, len, prot, offset) }?;
                st.host_maps.insert(p.as_ptr() as usize, HostMap { len, buf: None });
                Ok(p)
            }
            None => Err(Errno::EBADF),
        }
    }

    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> Result<(), Errno> {
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Munmap);
        if let Some(Fault::Errno(e)) = fault {
            return Err(e);
        }
        let a = addr.as_ptr() as usize;
        match st.host_maps.get(&a) {
            Some(m) if m.len == len => {
                let m = st.host_maps.remove(&a).ok_or(Errno::EINVAL)?;
                // SAFETY: the range is a mapping this bench made with this length, and the
                // caller guarantees nothing uses it any more.
                unsafe { RustixSys.munmap(addr, len) }?;
                if let Some(b) = m.buf {
                    if let Some(x) = st.buffers.get_mut(&b) {
                        x.host_maps = x.host_maps.saturating_sub(1);
                    }
                    st.maybe_free_buffer(b);
                }
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    fn thread_id(&self) -> i32 {
        rustix::thread::gettid().as_raw_nonzero().get()
    }

    fn interrupt(&self, tid: i32) -> Result<(), Errno> {
        if tid <= 0 {
            return Err(Errno(3)); // ESRCH
        }
        #[cfg(feature = "linux")]
        if self.sh.linux.is_some() {
            // The driver's interruptible wait: a thread inside an invoke that has not reached
            // it yet gets the signal when it does (as a pending signal would); one outside every
            // invoke loses it.
            let end = Instant::now() + Duration::from_secs(1);
            loop {
                if hexrpc_linux::interrupt(tid) {
                    self.lock().counts.interrupts_delivered += 1;
                    return Ok(());
                }
                if !self.lock().blocked.contains(&tid) || Instant::now() >= end {
                    self.lock().counts.interrupts_lost += 1;
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut st = self.lock();
        if st.blocked.contains(&tid) {
            st.interrupts.insert(tid);
            st.counts.interrupts_delivered += 1;
            drop(st);
            self.sh.cv.notify_all();
        } else {
            st.counts.interrupts_lost += 1;
        }
        Ok(())
    }
}

/// [`Bench::linux_ioctl`]: the lock and the result, or the lock back for a file of the models.
type LinuxIoctl<'a> = Result<(MutexGuard<'a, State>, Result<i32, Errno>), MutexGuard<'a, State>>;

/// What [`Bench::at_target`] resolved.
enum AtTarget {
    /// A path of the virtual file table.
    Virtual(String),
    /// The real OS, relative to this passed-through directory (or the current directory).
    Real(Option<Fd>),
}

/// The path a real descriptor refers to, for the open log (best effort).
fn real_path(fd: Fd) -> String {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.0))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("fd {}", fd.0))
}

/// Accounting of a FastRPC request that reached the kernel: [`CallCounts::mmap_flags`] for
/// MMAP / MMAP_64 (downstream and upstream, Linux's own driver included) and
/// [`CallCounts::before_init`].
///
/// # Safety
///
/// `a` must satisfy the ioctl contract of the request (a struct of its size).
unsafe fn note_rpc_request(st: &mut State, file: u64, kind: CallKind, a: u64) {
    let Some(f) = st.rpc_files.get(&file) else { return };
    let early = !f.inited
        && match kind {
            k if k.is_invoke() => true,
            CallKind::RpcMmap | CallKind::RpcMmap64 | CallKind::RpcMunmap | CallKind::RpcMunmap64 => true,
            CallKind::UpMmap | CallKind::UpMunmap | CallKind::UpMemMap | CallKind::UpMemUnmap => true,
            _ => false,
        };
    if early {
        st.counts.before_init += 1;
    }
    if matches!(kind, CallKind::RpcMmap | CallKind::RpcMmap64 | CallKind::UpMmap) {
        // Both drivers' structs start with `int fd; u32 flags`.
        // SAFETY: passed on from the caller.
        if let Some(m) = unsafe { crate::user::read_struct::<adsprpc::fastrpc_ioctl_mmap>(a) } {
            *st.counts.mmap_flags.entry(m.flags).or_insert(0) += 1;
        }
    }
}

/// Gives up what a descriptor referred to, as its last close does: ION clients and their
/// handles, a FastRPC file (released once no thread is inside one of its ioctls, as Linux
/// releases a file; the release may block, see [`release_file`]), a dma-buf reference.
fn release_obj<'a>(sh: &'a Shared, mut st: MutexGuard<'a, State>, obj: FdObj) -> MutexGuard<'a, State> {
    match obj {
        FdObj::Ion(c) => ion::close_client(&mut st, c),
        FdObj::Rpc(f) => {
            let busy = match st.rpc_files.get_mut(&f) {
                Some(file) => {
                    file.closed = true;
                    file.in_ioctl > 0
                }
                None => false,
            };
            if !busy {
                st = release_file(sh, st, f);
            }
        }
        FdObj::DmaBuf(b) => {
            if let Some(buf) = st.buffers.get_mut(&b) {
                buf.share_fds = buf.share_fds.saturating_sub(1);
            }
            st.maybe_free_buffer(b);
        }
        FdObj::File(_) | FdObj::Dir(_) | FdObj::Null | FdObj::Heap => {}
    }
    st
}

/// The last release of a FastRPC file (`fastrpc_file_free` downstream, `fastrpc_device_release`
/// upstream). First the kernel's "release process" message, which names only the file's
/// identity (tgid, with the session bit downstream): the live DSP process of that identity is
/// released, whichever file created it. It goes out when the file holds a session of the
/// current restart epoch on an open channel. The message is a kernel call: a
/// [`DspCallKind::ReleaseProcess`] fault delays or hangs it, and the DSP answers only once the
/// library calls still running in that process (and in the file's own process) have returned,
/// interrupted ones included. Downstream waits uninterruptibly with no limit (a hang lasts until
/// [`Bench::release_hangs`] or a restart); upstream waits at most
/// [`BenchConfig::kernel_call_timeout`](crate::BenchConfig::kernel_call_timeout) and then goes on.
/// Only then are contexts, maps (and so the buffers they pin) and the session freed.
pub(crate) fn release_file<'a>(sh: &'a Shared, mut st: MutexGuard<'a, State>, file: u64) -> MutexGuard<'a, State> {
    #[cfg(feature = "linux")]
    if let Some(kern) = sh.linux.as_ref().filter(|k| k.file(file).is_some()) {
        // fastrpc_device_release: the driver sends the release message itself.
        drop(st);
        kern.release(file);
        let mut st = sh.lock();
        st.free_rpc_file(file);
        return st;
    }
    let Some(f) = st.rpc_files.get(&file) else { return st };
    let epoch = st.epoch;
    // (The message is a kernel invoke: it needs the file's SMMU session, which a file whose
    // GETINFO failed never got, `fastrpc_internal_invoke`.)
    let sends =
        f.session && f.session_epoch == Some(epoch) && !st.dsp_down && (f.upstream || (f.cid.is_some() && st.channel_open == Some(epoch)));
    if sends {
        let (identity, own, upstream) = (f.tgid, f.proc_id, f.upstream);
        let target = st.process_of_identity(identity);
        st.count_dsp(DspCallKind::ReleaseProcess);
        let fault = st.fault(FaultTarget::Dsp(DspCallKind::ReleaseProcess));
        let start = Instant::now();
        let limit = upstream.then_some(sh.cfg.kernel_call_timeout);
        let gen = st.hang_generation;
        let hold_until = match fault {
            Some(Fault::Delay(d)) => Some(start + d),
            Some(Fault::Hang) => None,
            _ => Some(start),
        };
        let pids: Vec<u64> = target.into_iter().chain(own).collect();
        // The process is being torn down: no caller can take an answer from its executor shell
        // any more (a call still running there was abandoned), so the shell ends now instead
        // of holding the release until the executor timeout.
        if let Some(shell) = target.and_then(|t| st.procs.get(&t)).and_then(|p| p.shell.clone()) {
            shell.kill();
        }
        loop {
            let answered = match hold_until {
                Some(t) => Instant::now() >= t,
                None => st.hang_generation != gen,
            };
            let running = pids.iter().any(|p| st.lib_running.get(p).is_some_and(|&n| n > 0));
            if st.epoch != epoch || (answered && !running) {
                break;
            }
            let mut wait = Duration::from_millis(50);
            if let Some(l) = limit {
                let waited = start.elapsed();
                if waited >= l {
                    break;
                }
                wait = wait.min(l - waited);
            }
            st = sh.wait_for(st, wait);
        }
        if let Some(t) = target {
            st.kill_process(t);
        }
    }
    // fastrpc_session_free takes smd_mutex, which a channel open waiting for its port holds.
    while st.smd_busy {
        st = sh.wait(st);
    }
    st.free_rpc_file(file);
    sh.cv.notify_all();
    st
}

/// [`Bench::restart_dsp`] on the shared state (also what a DSP model does when a kernel crashes),
/// recorded with its reason.
pub(crate) fn restart_dsp(sh: &Shared, reason: crate::RestartReason) {
    let mut st = sh.lock();
    st.restarts.record(reason);
    st.epoch += 1;
    // fastrpc_restart_notifier_cb: the channel goes (chan = NULL, the kref untouched; the
    // epoch is the channel's ssrcount). The glink link comes back as set_channel_reopen says.
    match st.reopen {
        crate::ChannelReopen::Immediate => st.link_up_at = None,
        crate::ChannelReopen::LinkUpAfter(d) => st.link_up_at = Some(Instant::now() + d),
        crate::ChannelReopen::Stuck => {
            st.link_up_at = None;
            st.stuck_pending = true;
        }
    }
    // Linux's own driver loses its channel before the model's processes die
    // (fastrpc_rpmsg_remove: calls in flight end with EPIPE, nothing more is sent), so that no
    // message reaches a dead process between the two. (An answer to a message sent before the
    // new epoch is never given: `linux::on_message`.)
    #[cfg(feature = "linux")]
    if let Some(kern) = sh.linux.as_ref() {
        drop(st);
        kern.remove();
        st = sh.lock();
    }
    let pids: Vec<u64> = st.procs.keys().copied().collect();
    for p in pids {
        st.kill_process(p);
    }
    let upstream_files: std::collections::HashSet<u64> = st.rpc_files.iter().filter(|(_, f)| f.upstream).map(|(&id, _)| id).collect();
    for c in st.ctxs.values_mut() {
        if c.result.is_none() {
            // Downstream: the context's initial -1 (the driver then reports +104).
            // Upstream: fastrpc_notify_users sets -EPIPE.
            let retval = if upstream_files.contains(&c.file) { -Errno::EPIPE.0 } else { -1 };
            c.result = Some(CtxResult { retval, outs: Vec::new(), fdlist: Vec::new(), sim_dsp: Duration::ZERO });
        }
    }
    #[cfg(feature = "linux")]
    let down = st.dsp_down;
    drop(st);
    sh.cv.notify_all();
    #[cfg(feature = "linux")]
    if let Some(kern) = sh.linux.as_ref() {
        // The DSP is back: a new probe.
        if !down {
            kern.reprobe();
        }
    }
}
