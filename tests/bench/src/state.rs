//! The simulated kernel's state: one table guarded by one mutex, with one condition variable for
//! every wait (invokes, the listener, reverse replies, hangs).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::account::*;
use crate::config::BenchConfig;
use crate::entry::LibraryModel;

/// Everything shared between the seam, the DSP worker threads and the test's control API.
pub(crate) struct Shared {
    pub cfg: BenchConfig,
    pub st: Mutex<State>,
    /// Held for the whole of a DSP restart ([`restart_dsp`](crate::release::restart_dsp)): two
    /// restarts never interleave, so each one's channel removal comes after the other's new probe.
    pub restart: Mutex<()>,
    pub cv: Condvar,
    /// Live real mappings held for the DSP model ([`HostMmap`]).
    pub dsp_host_mmaps: Arc<AtomicUsize>,
    /// This bench's kernel instance (`Syscalls::kernel_instance`), unique in the process.
    pub instance: u64,
    /// The [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX) board's kernel: Linux's own driver.
    #[cfg(feature = "linux")]
    pub linux: Option<crate::linux::LinuxKernel>,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    pub fn wait_for<'a>(&self, g: MutexGuard<'a, State>, d: std::time::Duration) -> MutexGuard<'a, State> {
        match self.cv.wait_timeout(g, d) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        }
    }
}

/// Presence of a virtual path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Present,
    Missing,
    Unreadable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeviceKind {
    Ion,
    Rpc,
    /// A dma-buf heap node (`/dev/dma_heap/<name>`).
    DmaHeap,
    /// An upstream fastrpc node (`/dev/fastrpc-cdsp`).
    Fastrpc,
}

pub(crate) enum VNode {
    File(Arc<Vec<u8>>),
    Device(DeviceKind),
}

pub(crate) struct VEntry {
    pub node: VNode,
    pub access: Access,
}

pub(crate) enum FdObj {
    Ion(u64),
    /// A FastRPC file, downstream or upstream ([`RpcFile::upstream`]).
    Rpc(u64),
    DmaBuf(u64),
    /// An open dma-buf heap node.
    Heap,
    File(Arc<Vec<u8>>),
    /// A directory of the virtual file table, by its path (no trailing `/`).
    Dir(String),
    /// A retired descriptor (`Syscalls::retire`): every ioctl is refused with ENOTTY.
    Null,
}

pub(crate) struct FdEntry {
    /// The real descriptor that reserves this number (a memfd or a dup of a buffer's memfd).
    pub _owned: OwnedFd,
    pub obj: FdObj,
}

pub(crate) struct IonHandle {
    pub buf: u64,
    pub user_refs: u32,
}

#[derive(Default)]
pub(crate) struct IonClient {
    pub handles: BTreeMap<i32, IonHandle>,
}

pub(crate) struct Buffer {
    pub memfd: Arc<OwnedFd>,
    pub len: u64,
    pub handles: u32,
    pub share_fds: u32,
    pub host_maps: u32,
    pub driver_maps: u32,
    /// CPU-cached memory (ION `CACHED`, a cached dma-heap): DMA_BUF_IOCTL_SYNC matters.
    pub cached: bool,
    /// Open CPU accesses: `DMA_BUF_SYNC_START` minus `DMA_BUF_SYNC_END`.
    pub cpu_access: u32,
}

impl Buffer {
    pub fn is_dead(&self) -> bool {
        self.handles == 0 && self.share_fds == 0 && self.host_maps == 0 && self.driver_maps == 0
    }
}

pub(crate) struct HostMap {
    pub len: usize,
    pub buf: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapKind {
    /// MMAP of an fd.
    Fd,
    /// MMAP with ADD_PAGES (kernel-allocated).
    AddPages,
    /// An invoke handle argument (va 0).
    Handle,
    /// An in/out buffer argument with a buffer fd that `get_args` mapped instead of copying.
    Buffer,
}

pub(crate) struct DspMap {
    pub kind: MapKind,
    pub fd: i32,
    pub buf: Option<u64>,
    pub va: u64,
    pub len: u64,
    pub raddr: u64,
    pub refs: u32,
    /// What the DSP is told the map's length is (`map->size` downstream): for a map of a
    /// dma-buf, the whole buffer's IOVA length (`sg_dma_len` of its first entry, every comma
    /// three CDSP bank having a context-bank number), whatever length the caller named.
    pub size: u64,
    /// The `FASTRPC_ATTR_*` word the map was created with (`map->attr`): `NOVA` makes a buffer
    /// argument's page offset 0.
    pub attr: u32,
    /// A number naming this map for the call that made or found it as a buffer argument (it
    /// puts that reference back when it ends, `context_free`); 0 for maps no call tracks.
    pub id: u64,
}

impl DspMap {
    /// A map of `size` kernel-allocated pages (MMAP with `ADSP_MMAP_ADD_PAGES`, no fd) at DSP
    /// address `raddr`.
    pub fn add_pages(size: u64, raddr: u64) -> DspMap {
        DspMap { kind: MapKind::AddPages, fd: -1, buf: None, va: 0, len: size, raddr, refs: 1, size, attr: 0, id: 0 }
    }
}

pub(crate) struct RpcFile {
    /// An upstream `/dev/fastrpc-*` file (the session and channel are bound at open).
    pub upstream: bool,
    /// The DSP identity this file's messages carry: the opener's tgid, with bit 30 after
    /// SETMODE(FASTRPC_MODE_SESSION) (downstream).
    pub tgid: i32,
    /// Restart epoch at which the file took its session (GETINFO downstream, open upstream):
    /// the release on close goes out only while it is current (a stale restart counter fails
    /// the send at once).
    pub session_epoch: Option<u64>,
    pub cid: Option<u32>,
    pub session: bool,
    pub mode: u32,
    pub profile: bool,
    pub kalloc: bool,
    pub proc_id: Option<u64>,
    /// Restart epoch at which this file's channel was opened (INIT).
    pub channel_epoch: Option<u64>,
    pub maps: Vec<DspMap>,
    pub parked: HashMap<i32, u64>,
    pub in_ioctl: u32,
    pub closed: bool,
    pub perf: HashMap<i32, [i64; 12]>,
    /// Downstream: the copy buffers of finished calls, kept for the next (`fl->cached_bufs`:
    /// `context_free` → `fastrpc_buf_free(buf, 1)`; `fastrpc_buf_alloc` takes the smallest
    /// that fits, or maps a new one), freed only with the file; their sizes.
    pub copy_cache: Vec<u64>,
    /// Downstream: bytes of every copy buffer the file has (cached or held by a call): the
    /// cache never shrinks, so what it ever allocated. They take the file's IOVA.
    pub copy_bytes: u64,
    /// Downstream `fl->refcount`: set by `fastrpc_channel_open` (every INIT, whether the open
    /// then works or not); `fastrpc_file_free` puts the channel's kref once if it is set and
    /// the file's restart counter ([`RpcFile::session_epoch`]) is current.
    pub holds_ref: bool,
    /// `fl->init_mem`: bytes of the init memory of the last INIT_CREATE (downstream
    /// `fastrpc_init_process`, upstream `fastrpc_init_create_process`), freed with the file.
    pub init_mem: Option<u64>,
    /// A GETINFO (downstream) and an INIT / INIT_CREATE / ATTACH that returned 0 were done on
    /// this file ([`CallCounts::before_init`]).
    pub inited: bool,
    /// `fl->qos_request`: a CONTROL LATENCY added this file's CPU-DMA-latency request, which
    /// its release removes.
    pub qos_request: bool,
    /// The driver oopsed in an ioctl of this file ([`crate::Oops`]): the task died holding the
    /// file's map mutex; the bench fails every later ioctl on it with `EIO`.
    pub poisoned: bool,
}

impl RpcFile {
    /// True if this downstream file's free puts a channel reference back (`fastrpc_file_free`:
    /// it holds one and its restart counter is `epoch`, the current one).
    pub fn puts_channel_ref(&self, epoch: u64) -> bool {
        !self.upstream && self.session && self.holds_ref && self.session_epoch == Some(epoch)
    }

    /// An upstream `/dev/fastrpc-*` file of this process, opened at restart epoch `epoch` on
    /// channel `cid`: bound to its channel and holding an SMMU session from the open on.
    pub fn upstream(epoch: u64, cid: u32) -> RpcFile {
        RpcFile {
            upstream: true,
            session_epoch: Some(epoch),
            cid: Some(cid),
            session: true,
            mode: 0,
            kalloc: true,
            channel_epoch: Some(epoch),
            ..RpcFile::downstream()
        }
    }

    /// A downstream `/dev/adsprpc-smd` file of this process as `fastrpc_device_open` leaves it:
    /// the opener's tgid, serial mode, no channel, no session (GETINFO binds one).
    pub fn downstream() -> RpcFile {
        RpcFile {
            upstream: false,
            tgid: rustix::process::getpid().as_raw_nonzero().get(),
            session_epoch: None,
            cid: None,
            session: false,
            mode: hexrpc_drivers::adsprpc::FASTRPC_MODE_SERIAL,
            profile: false,
            kalloc: false,
            proc_id: None,
            channel_epoch: None,
            maps: Vec::new(),
            parked: HashMap::new(),
            in_ioctl: 0,
            closed: false,
            perf: HashMap::new(),
            copy_cache: Vec::new(),
            copy_bytes: 0,
            holds_ref: false,
            init_mem: None,
            inited: false,
            qos_request: false,
            poisoned: false,
        }
    }
}

/// A driver-global heap map (downstream MMAP with `ADSP_MMAP_HEAP_ADDR` or
/// `ADSP_MMAP_REMOTE_HEAP_ADDR`): on `gfa.maps`, owned by no file (`fastrpc_mmap_create`,
/// `fastrpc_mmap_add`).
pub(crate) struct GlobalMap {
    /// The MMAP flags (4 or 8).
    pub flags: u32,
    /// The caller's fd, kept only as a lookup key (never imported).
    pub fd: i32,
    /// `map->va`: the kernel's DMA cookie, not a user address.
    pub va: u64,
    pub len: u64,
    pub raddr: u64,
    pub refs: u32,
    /// The memory, as `dma_alloc_attrs(.., DMA_ATTR_SKIP_ZEROING)` left it.
    pub mem: Vec<u8>,
}

pub(crate) struct CtxResult {
    pub retval: i32,
    pub outs: Vec<Vec<u8>>,
    pub fdlist: Vec<i32>,
    pub sim_dsp: std::time::Duration,
}

pub(crate) struct Ctx {
    pub file: u64,
    pub sc: u32,
    pub out_ptrs: Vec<(u64, u64)>,
    pub crc: u64,
    pub result: Option<CtxResult>,
    pub parked: bool,
    /// The buffer-argument maps the call made or referenced ([`DspMap::id`]): one reference
    /// each, put back when the call ends, whatever its result (`put_args` / `context_free`).
    pub buf_maps: Vec<u64>,
    /// Downstream: bytes of the copy buffer the call holds (`ctx->buf`), returned to its
    /// file's cache when the context is freed ([`State::free_ctx`]); 0 upstream.
    pub copy_buf: u64,
}

/// A real mapping made for the DSP model (a `HAP_mmap`), unmapped when the last holder drops it.
pub(crate) struct HostMmap {
    pub addr: usize,
    pub len: usize,
    counter: Arc<AtomicUsize>,
}

impl HostMmap {
    /// Maps `len` bytes of `fd` at `offset`, read-write, shared.
    pub fn map(fd: &OwnedFd, len: usize, offset: u64, counter: &Arc<AtomicUsize>) -> Option<HostMmap> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        // SAFETY: a NULL hint makes the kernel pick a fresh range, so no existing memory is
        // replaced; the callers check `offset + len` against the memfd's size first, so every
        // byte of the mapping is backed by the file.
        let p = unsafe { mmap(core::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd, offset) }.ok()?;
        counter.fetch_add(1, Ordering::SeqCst);
        Some(HostMmap { addr: p as usize, len, counter: counter.clone() })
    }
}

impl Drop for HostMmap {
    fn drop(&mut self) {
        // SAFETY: the range is the mapping this value made and owns; the last holder is gone.
        if let Err(e) = unsafe { rustix::mm::munmap(self.addr as *mut core::ffi::c_void, self.len) } {
            log::error!("bench: munmap of a DSP-side mapping failed: {e}");
        }
        self.counter.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) struct HapMap {
    pub dsp_addr: u32,
    pub len: u32,
    /// Keeps the real mapping alive while the process holds it.
    pub _mem: Arc<HostMmap>,
}

pub(crate) struct LoadedLib {
    pub name: String,
    pub model: Arc<LibraryModel>,
    /// The entry's map cache (its static table: one per library loaded in a process).
    pub cache: Arc<Mutex<crate::entry::ModelCache>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TicketState {
    Queued,
    Delivered,
    Answered,
    Dropped,
}

pub(crate) struct Ticket {
    pub pid: u64,
    pub ctx: u32,
    pub handle: u32,
    pub sc: u32,
    pub payload: Arc<Vec<u8>>,
    pub claimed_len: i32,
    pub state: TicketState,
    pub reply: Option<(i32, Vec<u8>)>,
    pub record: usize,
}

pub(crate) struct DspProcess {
    pub file: u64,
    /// The identity the process was created under (the creating file's `tgid`).
    pub identity: i32,
    pub alive: bool,
    pub listener_init: bool,
    pub apps_std: Option<u32>,
    pub libs: HashMap<u32, LoadedLib>,
    pub hap: Vec<HapMap>,
    /// The live mappings of handle fds (the model's and the executor's alike).
    pub lease_maps: Vec<LeaseMap>,
    pub queue: VecDeque<u64>,
    pub inflight: HashMap<u32, u64>,
    pub next_dva: u32,
    pub next_lib: u32,
    /// The executor shell (one qemu-hexagon process) that holds this process's real libraries,
    /// started at the first real library load.
    pub shell: Option<Arc<crate::executor::ExecProcess>>,
}

pub(crate) struct FaultRule {
    pub target: FaultTarget,
    pub remaining: u32,
    pub fault: Fault,
}

#[derive(Default)]
pub(crate) struct State {
    /// Every error Linux's own driver returned to an ioctl ([`crate::linux`]): the request and
    /// the errno.
    #[cfg(feature = "linux")]
    pub linux_errors: Vec<(u32, hexrpc_drivers::Errno)>,
    pub vfs: HashMap<String, VEntry>,
    pub fds: HashMap<i32, FdEntry>,
    pub passthrough: HashSet<i32>,
    /// dma-bufs another process made ([`crate::foreign`]): the (device, inode) of the memfd
    /// behind them, and the buffer this kernel tracks it as while a descriptor of this process
    /// or a map holds it.
    pub foreign: HashMap<(u64, u64), u64>,
    pub open_log: Vec<OpenRecord>,
    pub ion_clients: HashMap<u64, IonClient>,
    pub buffers: HashMap<u64, Buffer>,
    pub ion_bytes: u64,
    pub host_maps: HashMap<usize, HostMap>,
    pub rpc_files: HashMap<u64, RpcFile>,
    pub sessions: [u32; 4],
    pub procs: HashMap<u64, DspProcess>,
    pub ctxs: HashMap<u64, Ctx>,
    /// The most contexts allocated at once (`context_alloc`'s table, both drivers' files).
    pub ctxs_high_water: usize,
    /// The most per-thread perf records one downstream file held at once (`fl->perf`).
    pub perf_records_high_water: usize,
    /// The most bytes of copy buffers one downstream file had ([`RpcFile::copy_bytes`]).
    pub copy_bufs_high_water: u64,
    pub tickets: HashMap<u64, Ticket>,
    pub reverse_log: Vec<ReverseRecord>,
    pub blocked: HashSet<i32>,
    pub interrupts: HashSet<i32>,
    pub epoch: u64,
    /// A DSP restart is under way: the epoch has moved, and Linux's own driver still has the old
    /// channel (`release::restart_dsp`). A message the driver sends now goes to the DSP that is
    /// going away (`linux::DEAD_EPOCH`).
    pub restarting: bool,
    pub dsp_down: bool,
    pub hang_generation: u64,
    pub faults: Vec<FaultRule>,
    pub counts: CallCounts,
    /// GETINFOs held in their allocation window ([`BenchConfig::getinfo_window`]).
    pub getinfo_in_flight: u32,
    pub ledger: Vec<LedgerEntry>,
    /// Mismatches recorded since the last clear (kept or not).
    pub ledger_mismatches: usize,
    pub ledger_dropped: u64,
    pub latencies: Vec<LatencySample>,
    pub latencies_dropped: u64,
    pub libraries: HashMap<String, Arc<LibraryModel>>,
    pub next_id: u64,
    /// Next DSP address handed out by MMAP, across every channel (so an address names one map).
    pub next_raddr: u64,
    /// Which channel made the map at each DSP address (kept after the channel is gone).
    pub map_origins: HashMap<u64, u64>,
    /// Every MUNMAP / MUNMAP_64 ioctl: where it went, and which channel had made the map.
    pub munmap_log: Vec<MunmapRecord>,
    /// Every PM-QoS event of a downstream FastRPC file, in order ([`crate::Bench::pm_qos_log`]).
    pub pm_qos_log: Vec<PmQosRecord>,
    /// Each executor invoke's execution counts, oldest first, while fewer than the log capacity
    /// ([`crate::Bench::take_exec_counts`]); how many were not kept.
    pub exec_counts: Vec<crate::executor::InvokeCounts>,
    pub exec_counts_dropped: u64,
    /// Downstream: the restart epoch in which the channel was opened (the first INIT message
    /// sent on it); a release on close goes out only on an open channel.
    pub channel_open: Option<u64>,
    /// Library calls running on the DSP, per process id (kept after the process is gone): the
    /// release of a process waits for them.
    pub lib_running: HashMap<u64, u32>,
    /// Every DSP restart: how many, and why the last one happened.
    pub restarts: crate::restart::RestartLog,
    /// [`BenchConfig::log_capacity`](crate::BenchConfig::log_capacity), for ledger entries
    /// recorded outside a call (the map-cache rules below).
    pub ledger_capacity: usize,
    /// Downstream: the driver-global heap maps (`gfa.maps`), newest last.
    pub global_maps: Vec<GlobalMap>,
    /// Bytes of the heap region (`adsp_mem`) the global maps use.
    pub heap_bytes: u64,
    /// Every kernel oops or memory-safety violation a device would have suffered.
    pub oopses: Vec<crate::Oops>,
    /// Downstream: the CDSP channel's `kref` (4.9 `atomic_t` arithmetic: it can go below 0).
    pub chan_kref: i64,
    /// Downstream: when the channel's last reference was put (its port DISCONNECTING until
    /// [`BenchConfig::close_ack_delay`](crate::BenchConfig::close_ack_delay) later).
    pub channel_closed_at: Option<std::time::Instant>,
    /// Downstream init memory whose `fl->init_mem` pointer a second INIT overwrote: never freed.
    pub init_leaked: usize,
    /// Downstream: `smd_mutex` is held by a channel open waiting for the port (up to
    /// [`BenchConfig::port_connect_timeout`]).
    pub smd_busy: bool,
    /// Downstream: the glink link is down until then (after a restart, [`ChannelReopen`]).
    pub link_up_at: Option<std::time::Instant>,
    /// Downstream: the next channel open connects the port but never hears `GLINK_CONNECTED`.
    pub stuck_pending: bool,
    /// Downstream: the port is left CONNECTING by a timed-out connect (every open fails until
    /// [`crate::Bench::reboot_channel`]).
    pub port_stuck: bool,
    /// What every later restart does to the channel's reopen.
    pub reopen: ChannelReopen,
}

/// How the downstream CDSP channel comes back after a DSP restart
/// ([`Bench::set_channel_reopen`](crate::Bench::set_channel_reopen)): `fastrpc_channel_open` /
/// `fastrpc_glink_open` need the glink link up (`fastrpc_link_state_handler`) and the port
/// DISCONNECTED, and always wait for the port's `GLINK_CONNECTED` up to `RPC_TIMEOUT`
/// ([`BenchConfig::port_connect_timeout`]). A reading of the source, not the driver run: when
/// the link comes up after a real restart is not known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChannelReopen {
    /// The link is up and the port connects at once (the default).
    #[default]
    Immediate,
    /// The link comes up this long after the restart: until then every channel open (the INIT
    /// of a file while the channel is closed) fails with -1 (`EPERM`) after waiting the port
    /// timeout; then opens work.
    LinkUpAfter(std::time::Duration),
    /// The first open after the restart opens the port, which never connects: it times out
    /// (-1 after the wait) and leaves the port CONNECTING, so every later open fails the same
    /// way until [`Bench::reboot_channel`](crate::Bench::reboot_channel).
    Stuck,
}

/// A live DSP mapping an entry made of a handle's fd (`HAP_mmap` of a lease), with the buffer
/// the handle's fd named when it was made: what the map-cache rules check.
pub(crate) struct LeaseMap {
    pub addr: u32,
    pub len: u32,
    pub fd: i32,
    pub buf: u64,
    pub library: String,
}

impl State {
    /// A DSP address for a new map of `size` bytes made by channel `file` (recorded as the
    /// map's origin when `record`: MMAP maps, which a MUNMAP names).
    pub fn alloc_raddr(&mut self, file: u64, size: u64, record: bool) -> u64 {
        if self.next_raddr == 0 {
            self.next_raddr = 0xC000_0000;
        }
        let r = self.next_raddr;
        self.next_raddr = self.next_raddr.wrapping_add(size.div_ceil(4096) * 4096 + 4096);
        if record {
            self.map_origins.insert(r, file);
        }
        r
    }

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn count(&mut self, kind: CallKind) {
        *self.counts.calls.entry(kind).or_insert(0) += 1;
    }

    pub fn count_dsp(&mut self, kind: DspCallKind) {
        *self.counts.dsp.entry(kind).or_insert(0) += 1;
    }

    /// Counts one occurrence of `target` and returns the fault to apply, if one fires now.
    pub fn fault(&mut self, target: FaultTarget) -> Option<Fault> {
        let i = self.faults.iter().position(|r| r.target == target)?;
        let r = &mut self.faults[i];
        if r.remaining > 1 {
            r.remaining -= 1;
            return None;
        }
        Some(self.faults.remove(i).fault)
    }

    /// Drops a buffer whose last holder went away.
    pub fn maybe_free_buffer(&mut self, id: u64) {
        if self.buffers.get(&id).is_some_and(Buffer::is_dead) {
            if let Some(b) = self.buffers.remove(&id) {
                self.ion_bytes = self.ion_bytes.saturating_sub(b.len);
                if !self.foreign.is_empty() {
                    self.foreign.retain(|_, v| *v != id);
                }
            }
        }
    }

    /// Process `pid` mapped handle fd `fd` (buffer `buf`) at `(addr, len)`.
    pub fn lease_mapped(&mut self, pid: u64, library: &str, fd: i32, buf: u64, addr: u32, len: u32) {
        if let Some(p) = self.procs.get_mut(&pid).filter(|p| p.alive) {
            p.lease_maps.push(LeaseMap { addr, len, fd, buf, library: library.to_string() });
        }
    }

    /// Process `pid` unmapped `(addr, len)` (an exact match of a live mapping).
    pub fn lease_unmapped(&mut self, pid: u64, addr: u32, len: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            if let Some(i) = p.lease_maps.iter().position(|m| m.addr == addr && m.len == len) {
                p.lease_maps.swap_remove(i);
            }
        }
    }

    /// Records a [`LedgerEvent::MappingOutlivesLease`] for every live DSP mapping of `(fd,
    /// buf)` in a process of channel `file` (`None`: any process) whose lease just lost `what`.
    fn lease_gone(&mut self, file: Option<u64>, fd: i32, buf: u64, what: &'static str) {
        let mut found = Vec::new();
        for (pid, p) in &self.procs {
            if !p.alive || file.is_some_and(|f| f != p.file) {
                continue;
            }
            for m in p.lease_maps.iter().filter(|m| m.fd == fd && m.buf == buf) {
                found.push(LedgerEntry {
                    pid: *pid,
                    library: m.library.clone(),
                    event: LedgerEvent::MappingOutlivesLease { fd, addr: m.addr, len: m.len, what },
                });
            }
        }
        let cap = self.ledger_capacity;
        for e in found {
            self.record_ledger(e, cap);
        }
    }

    /// The last reference of channel `file`'s handle map of `fd` (buffer `buf`) went (MUNMAP_FD,
    /// the fdlist): a DSP mapping made through it must be gone already.
    pub fn driver_map_gone(&mut self, file: u64, fd: i32, buf: Option<u64>) {
        if let Some(buf) = buf {
            self.lease_gone(Some(file), fd, buf, "its driver map was dropped");
        }
    }

    /// The host closed or retired its descriptor `fd` of buffer `buf`: no DSP mapping made for
    /// that lease may still be live.
    pub fn lease_fd_gone(&mut self, fd: i32, buf: u64) {
        self.lease_gone(None, fd, buf, "its fd was closed or retired");
    }

    /// True if process `pid` has a live mapping of handle fd `fd`.
    pub fn fd_mapped_by(&self, pid: u64, fd: i32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.lease_maps.iter().any(|m| m.fd == fd))
    }

    /// Drops one driver-map reference on a buffer.
    pub fn release_driver_map(&mut self, buf: Option<u64>) {
        if let Some(id) = buf {
            if let Some(b) = self.buffers.get_mut(&id) {
                b.driver_maps = b.driver_maps.saturating_sub(1);
            }
            self.maybe_free_buffer(id);
        }
    }

    /// The buffer behind a dma-buf fd number.
    pub fn dmabuf(&self, fd: i32) -> Option<u64> {
        match self.fds.get(&fd) {
            Some(FdEntry { obj: FdObj::DmaBuf(id), .. }) => Some(*id),
            _ => None,
        }
    }

    /// Kills a DSP process: its libraries, HAP mappings and reverse requests go away, and every
    /// DSP job waiting for it wakes up.
    /// Records a HAP ledger entry (kept while the ledger holds fewer than `capacity` entries,
    /// [`BenchConfig::log_capacity`](crate::BenchConfig::log_capacity); a mismatch is counted
    /// either way).
    pub fn record_ledger(&mut self, e: LedgerEntry, capacity: usize) {
        if e.event.is_mismatch() {
            self.ledger_mismatches += 1;
        }
        if self.ledger.len() < capacity {
            self.ledger.push(e);
        } else {
            self.ledger_dropped += 1;
        }
    }

    /// Records a latency sample (kept while fewer than `capacity`).
    pub fn record_latency(&mut self, l: LatencySample, capacity: usize) {
        if self.latencies.len() < capacity {
            self.latencies.push(l);
        } else {
            self.latencies_dropped += 1;
        }
    }

    pub fn kill_process(&mut self, pid: u64) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        p.alive = false;
        // The shell ends with its process, even while a call of it still runs (that call's
        // worker holds a reference and would otherwise keep it alive until its deadline).
        if let Some(shell) = p.shell.take() {
            shell.kill();
        }
        p.libs.clear();
        p.hap.clear();
        p.queue.clear();
        p.inflight.clear();
        for t in self.tickets.values_mut() {
            if t.pid == pid && matches!(t.state, TicketState::Queued | TicketState::Delivered) {
                t.state = TicketState::Dropped;
            }
        }
        self.procs.remove(&pid);
    }

    /// The live DSP process created under `identity`, if any.
    pub fn process_of_identity(&self, identity: i32) -> Option<u64> {
        self.procs.iter().find(|(_, p)| p.alive && p.identity == identity).map(|(&id, _)| id)
    }

    /// The part of `fastrpc_file_free` after the release message
    /// ([`crate::release::release_file`]): free parked contexts and every map, give the session
    /// back.
    pub fn free_rpc_file(&mut self, file_id: u64) {
        let Some(f) = self.rpc_files.remove(&file_id) else { return };
        // fastrpc_file_free: the kref is put once, only by a file whose restart counter is
        // current (a stale file's reference was forgotten by the restart); at 0 the channel
        // closes (fastrpc_channel_close).
        if f.puts_channel_ref(self.epoch) {
            self.chan_kref -= 1;
            if self.chan_kref == 0 {
                self.channel_open = None;
                self.channel_closed_at = Some(std::time::Instant::now());
            }
        }
        self.ctxs.retain(|_, c| c.file != file_id);
        for m in f.maps {
            self.release_driver_map(m.buf);
        }
        if f.session {
            if let Some(cid) = f.cid {
                let s = &mut self.sessions[cid as usize];
                *s = s.saturating_sub(1);
            }
        }
    }

    pub fn snapshot(&self, dsp_host_mmaps: usize) -> Snapshot {
        Snapshot {
            open_fds: self.fds.len() + self.passthrough.len(),
            ion_clients: self.ion_clients.len(),
            ion_handles: self.ion_clients.values().map(|c| c.handles.len()).sum(),
            ion_buffers: self.buffers.len(),
            ion_bytes: self.ion_bytes,
            host_mappings: self.host_maps.len(),
            rpc_files: self.rpc_files.len(),
            sessions: self.sessions.iter().map(|&s| s as usize).sum(),
            dsp_processes: self.procs.len(),
            dsp_maps: self.rpc_files.values().map(|f| f.maps.len()).sum(),
            hap_mappings: self.procs.values().map(|p| p.hap.len()).sum(),
            dsp_host_mmaps,
            loaded_libraries: self.procs.values().map(|p| p.libs.len()).sum(),
            contexts: self.ctxs.len(),
            parked: self.ctxs.values().filter(|c| c.parked).count(),
            pending_reverse: self.tickets.values().filter(|t| matches!(t.state, TicketState::Queued | TicketState::Delivered)).count(),
            blocked_threads: self.blocked.len(),
            global_maps: self.global_maps.len(),
            init_buffers: self.rpc_files.values().filter(|f| f.init_mem.is_some()).count() + self.init_leaked,
            channel_refs: self.channel_refs(),
            oopses: self.oopses.len(),
        }
    }

    /// The IOVA the downstream FastRPC file `file` holds in its SMMU context bank: every map of
    /// a dma-buf or ADD_PAGES buffer, its copy buffers, and the init memory, page-rounded
    /// ([`BenchConfig::session_iova`](crate::BenchConfig::session_iova)).
    pub fn iova_in_use(&self, file: u64) -> u64 {
        let Some(f) = self.rpc_files.get(&file) else { return 0 };
        let page = |n: u64| n.div_ceil(4096).saturating_mul(4096);
        f.maps
            .iter()
            .map(|m| page(m.size))
            .fold(0u64, u64::saturating_add)
            .saturating_add(f.init_mem.map_or(0, page))
            .saturating_add(f.copy_bytes)
    }

    /// A copy buffer of at least `need` bytes for a call on downstream `file`
    /// (`fastrpc_buf_alloc` with the cache): the smallest cached one that fits, or a new one
    /// of `need` rounded to pages, which takes the file's IOVA (`ENOMEM` past `space`).
    /// Returns its size.
    pub fn take_copy_buf(&mut self, file: u64, need: u64, space: u64) -> Result<u64, hexrpc_drivers::Errno> {
        let need = need.div_ceil(4096).saturating_mul(4096);
        let Some(f) = self.rpc_files.get_mut(&file) else { return Err(hexrpc_drivers::Errno::EBADF) };
        let best = f.copy_cache.iter().enumerate().filter(|(_, &s)| s >= need).min_by_key(|(_, &s)| s).map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(f.copy_cache.swap_remove(i));
        }
        if !self.iova_room(file, need, space) {
            return Err(hexrpc_drivers::Errno::ENOMEM);
        }
        if let Some(f) = self.rpc_files.get_mut(&file) {
            f.copy_bytes = f.copy_bytes.saturating_add(need);
            self.copy_bufs_high_water = self.copy_bufs_high_water.max(f.copy_bytes);
        }
        Ok(need)
    }

    /// `context_free`: the context goes, and its copy buffer to its file's cache.
    pub fn free_ctx(&mut self, ctx_id: u64) -> Option<Ctx> {
        let ctx = self.ctxs.remove(&ctx_id)?;
        if ctx.copy_buf > 0 {
            if let Some(f) = self.rpc_files.get_mut(&ctx.file) {
                f.copy_cache.push(ctx.copy_buf);
            }
        }
        Some(ctx)
    }

    /// Whether `bytes` more fit in `file`'s IOVA space of `space` bytes; a refusal is counted.
    pub fn iova_room(&mut self, file: u64, bytes: u64, space: u64) -> bool {
        let fits = self.iova_in_use(file).saturating_add(bytes.div_ceil(4096).saturating_mul(4096)) <= space;
        if !fits {
            self.counts.iova_refusals += 1;
        }
        fits
    }

    /// Downstream: references on the open channel that no live file will put back (the kref
    /// minus the live files that hold one with a current restart counter); 0 while closed.
    pub fn channel_refs(&self) -> u32 {
        if self.channel_open != Some(self.epoch) {
            return 0;
        }
        let epoch = self.epoch;
        let holders = self.rpc_files.values().filter(|f| f.puts_channel_ref(epoch)).count() as i64;
        u32::try_from((self.chan_kref - holders).max(0)).unwrap_or(u32::MAX)
    }

    /// Records an oops (or a memory-safety violation) of the driver.
    pub fn oops(&mut self, request: CallKind, kind: crate::OopsKind, what: &'static str) {
        log::error!("bench: the driver would oops on a device ({request:?}): {what}");
        self.oopses.push(crate::Oops { request, kind, what });
    }
}
