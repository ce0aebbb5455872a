//! Accounting and the kernel's state as tests inspect it: snapshots and settling, counts, logs
//! and the ledger, what Linux's own driver keeps for good, oopses, heap and driver maps, buffers,
//! DSP processes and identities.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[cfg(feature = "linux")]
use hexrpc_drivers::Errno;
use hexrpc_drivers::Fd;

use super::Bench;
use crate::account::{
    CallCounts, CallKind, LatencySample, LatencySummary, LedgerEntry, MunmapRecord, Oops, PmQosRecord, ReverseRecord, Snapshot,
};
use crate::driver_map::{BufferId, DriverMap, DriverMapKind};
use crate::state::{DspMap, FdEntry, FdObj, HostMap, MapKind};

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

impl KernelLeaks {
    /// Heap blocks the bench's host side holds for these, exactly: one per kept buffer (its
    /// memfd, shared by the buffer's entry and the kernel's mapping of it) and, once any is kept,
    /// the two tables that list them (the bench's buffers and the kernel's mappings). After
    /// [`Bench::compact`] a table with no entry holds no block, so this is what an exact heap
    /// count sees of them.
    pub fn host_heap_blocks(&self) -> usize {
        let n = self.buffers.len();
        if n == 0 {
            0
        } else {
            n + 2
        }
    }
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

impl Bench {
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
    /// MUNMAP logs, execution counts, the MMAP address origins of channels that are gone), so a long run stays
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
        st.pm_qos_log.clear();
        st.exec_counts.clear();
        st.exec_counts_dropped = 0;
        #[cfg(feature = "linux")]
        st.linux_errors.clear();
        let live: std::collections::HashSet<u64> = st.rpc_files.keys().copied().collect();
        st.map_origins.retain(|_, f| live.contains(f));
        // Reverse records are indexed by tickets still waiting; they point past the cleared log
        // and are simply not recorded any more.
        for t in st.tickets.values_mut() {
            t.record = usize::MAX;
        }
    }

    /// Gives back the spare capacity of every table and log the bench keeps: each keeps the
    /// high-water mark of a busy moment otherwise, so that a check which counts heap bytes
    /// exactly (the soak's) would see how full a table once was rather than what it holds.
    pub fn compact(&self) {
        let mut st = self.lock();
        let st = &mut *st;
        #[cfg(feature = "linux")]
        st.linux_errors.shrink_to_fit();
        st.vfs.shrink_to_fit();
        st.fds.shrink_to_fit();
        st.passthrough.shrink_to_fit();
        st.open_log.shrink_to_fit();
        st.ion_clients.shrink_to_fit();
        st.buffers.shrink_to_fit();
        st.host_maps.shrink_to_fit();
        st.rpc_files.shrink_to_fit();
        st.procs.shrink_to_fit();
        st.ctxs.shrink_to_fit();
        st.tickets.shrink_to_fit();
        st.reverse_log.shrink_to_fit();
        st.blocked.shrink_to_fit();
        st.interrupts.shrink_to_fit();
        st.faults.shrink_to_fit();
        st.ledger.shrink_to_fit();
        st.latencies.shrink_to_fit();
        st.libraries.shrink_to_fit();
        st.map_origins.shrink_to_fit();
        st.munmap_log.shrink_to_fit();
        st.pm_qos_log.shrink_to_fit();
        st.lib_running.shrink_to_fit();
        st.global_maps.shrink_to_fit();
        st.oopses.shrink_to_fit();
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            kern.compact();
        }
    }

    /// Empties the ledger.
    pub fn clear_ledger(&self) {
        let mut st = self.lock();
        st.ledger.clear();
        st.ledger_mismatches = 0;
        st.ledger_dropped = 0;
    }

    /// Every PM-QoS event of a downstream FastRPC file since the last [`Bench::clear_logs`], in
    /// order: each `FASTRPC_CONTROL_LATENCY` that the driver took (add, then update) and each
    /// removal at a file's release. Empty on the upstream boards (their drivers have no such
    /// request).
    pub fn pm_qos_log(&self) -> Vec<PmQosRecord> {
        self.lock().pm_qos_log.clone()
    }

    /// The execution counts of every executor invoke since the last call (qemu-hexagon's
    /// packets, instructions and HVX instructions, read by the bench shell; emulated counts,
    /// never DSP cycles), oldest first, and how many invokes were not kept (more than the
    /// config's `log_capacity` between two calls). Invokes of the bench's library models (no
    /// Hexagon code) have none.
    pub fn take_exec_counts(&self) -> (Vec<crate::executor::InvokeCounts>, u64) {
        let mut st = self.lock();
        (std::mem::take(&mut st.exec_counts), std::mem::take(&mut st.exec_counts_dropped))
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

    /// Every error Linux's own driver returned to an ioctl on a
    /// [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX) bench since the last [`Bench::clear_logs`], in order: the request number and the
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
        Some(f.maps.iter().map(driver_map).collect())
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
        st.rpc_files.values().flat_map(|f| f.maps.iter().map(driver_map)).collect()
    }

    /// The IOVA the downstream FastRPC file behind `rpc_fd` holds in its context bank, in bytes
    /// ([`BenchConfig::session_iova`](crate::BenchConfig::session_iova)); `None` if the number is
    /// not a FastRPC file of this bench.
    pub fn iova_in_use(&self, rpc_fd: Fd) -> Option<u64> {
        let st = self.lock();
        let Some(FdEntry { obj: FdObj::Rpc(f), .. }) = st.fds.get(&rpc_fd.0) else { return None };
        let f = *f;
        Some(st.iova_in_use(f))
    }

    /// The most per-thread perf records one downstream FastRPC file held at once since the
    /// bench was made: the comma three's driver makes one for every thread that invokes on a
    /// file (`getperfcounter`) and frees them with the file.
    pub fn most_perf_records(&self) -> usize {
        self.lock().perf_records_high_water
    }

    /// The copy buffers of the downstream FastRPC file behind `rpc_fd`: how many, and their
    /// bytes (cached or held by a call; the comma three's driver keeps them until the file is
    /// freed). `None` if the number is not a FastRPC file of this bench.
    pub fn copy_buffers(&self, rpc_fd: Fd) -> Option<(usize, u64)> {
        let st = self.lock();
        let Some(FdEntry { obj: FdObj::Rpc(id), .. }) = st.fds.get(&rpc_fd.0) else { return None };
        let id = *id;
        let f = st.rpc_files.get(&id)?;
        let held = st.ctxs.values().filter(|c| c.file == id && c.copy_buf > 0).count();
        Some((f.copy_cache.len() + held, f.copy_bytes))
    }

    /// Two host mappings of the dma-buf behind `fd` side by side, each showing the buffer from
    /// its offset 0: `first` bytes at the returned first address, then `second` bytes right
    /// after it (one address reservation, both placed in it with `MAP_FIXED`). Kernel-rule
    /// R18's test: a buffer in the second mapping that lies inside a driver map made at the
    /// first's address. Unmap each through the seam's `munmap` with its own length.
    pub fn map_twice_side_by_side(&self, fd: Fd, first: usize, second: usize) -> Result<(usize, usize), hexrpc_drivers::Errno> {
        use rustix::mm::{MapFlags, ProtFlags};
        let mut st = self.lock();
        let Some(FdEntry { obj: FdObj::DmaBuf(buf), .. }) = st.fds.get(&fd.0) else { return Err(hexrpc_drivers::Errno::EBADF) };
        let buf = *buf;
        let blen = st.buffers.get(&buf).map_or(0, |b| b.len);
        let ok = |n: usize| n > 0 && n.is_multiple_of(4096) && n as u64 <= blen;
        if !ok(first) || !ok(second) {
            return Err(hexrpc_drivers::Errno::EINVAL);
        }
        // SAFETY: a fresh private reservation of address space nothing else uses; the two shared
        // mappings below replace it exactly (MAP_FIXED inside it), and `fd` is a live descriptor
        // of this bench (checked above, under the lock that closes take).
        let (a, b) = unsafe {
            let base = rustix::mm::mmap_anonymous(core::ptr::null_mut(), first + second, ProtFlags::empty(), MapFlags::PRIVATE)
                .map_err(|e| hexrpc_drivers::Errno(e.raw_os_error()))?;
            let fd = rustix::fd::BorrowedFd::borrow_raw(fd.0);
            let prot = ProtFlags::READ | ProtFlags::WRITE;
            let a = rustix::mm::mmap(base, first, prot, MapFlags::SHARED | MapFlags::FIXED, fd, 0);
            let b = rustix::mm::mmap(base.cast::<u8>().add(first).cast(), second, prot, MapFlags::SHARED | MapFlags::FIXED, fd, 0);
            match (a, b) {
                (Ok(a), Ok(b)) => (a as usize, b as usize),
                (a, b) => {
                    let _ = rustix::mm::munmap(base, first + second);
                    return Err(hexrpc_drivers::Errno(a.and(b).err().map_or(hexrpc_drivers::Errno::EINVAL.0, |e| e.raw_os_error())));
                }
            }
        };
        st.host_maps.insert(a, HostMap { len: first, buf: Some(buf) });
        st.host_maps.insert(b, HostMap { len: second, buf: Some(buf) });
        if let Some(x) = st.buffers.get_mut(&buf) {
            x.host_maps += 2;
        }
        Ok((a, b))
    }

    /// The most call contexts the simulated kernel held at once since the bench was made
    /// (downstream `context_alloc`'s global table of 256, mainline's idr of 255 per channel;
    /// Linux's own driver is not counted here).
    pub fn most_contexts(&self) -> usize {
        self.lock().ctxs_high_water
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
}

/// One of a model's driver maps as the bench shows it.
fn driver_map(m: &DspMap) -> DriverMap {
    let kind = match m.kind {
        MapKind::Fd => DriverMapKind::Mmap,
        MapKind::AddPages => DriverMapKind::AddPages,
        MapKind::Handle => DriverMapKind::Handle,
        MapKind::Buffer => DriverMapKind::Buffer,
    };
    DriverMap { kind, fd: m.fd, refs: m.refs, buffer: m.buf.map(BufferId), len: m.len, dsp_size: m.size }
}
