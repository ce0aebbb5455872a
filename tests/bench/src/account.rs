//! Accounting: what the bench counts and records, as plain values tests can compare.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hexrpc_drivers::{Errno, Fd};

/// One kind of crossing of the seam: a system call, or an ioctl decoded by its request number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // the names are the calls
pub enum CallKind {
    Open,
    Close,
    Pread,
    Fstat,
    Stat,
    Mmap,
    Munmap,
    IonAlloc,
    IonFree,
    IonMap,
    IonShare,
    IonImport,
    IonCustom,
    IonSync,
    IonCleanCaches,
    IonInvCaches,
    IonCleanInvCaches,
    /// An ION request the 4.9 driver does not know (ENOTTY) or with an oversized argument.
    IonUnknown,
    RpcInvoke,
    RpcInvokeFd,
    RpcInvokeAttrs,
    RpcInvokeCrc,
    RpcMmap,
    RpcMmap64,
    RpcMunmap,
    RpcMunmap64,
    RpcMunmapFd,
    RpcSetmode,
    RpcInit,
    RpcInitAttrs,
    RpcGetinfo,
    RpcGetperf,
    RpcControl,
    /// An adsprpc request the downstream driver does not know (ENOTTY).
    RpcUnknown,
    /// `DMA_HEAP_IOCTL_ALLOC` (any request with nr 0 on a heap node: the heap matches by number).
    HeapAlloc,
    /// A heap request with nr >= 1 (EINVAL).
    HeapUnknown,
    /// `DMA_BUF_IOCTL_SYNC` on a dma-buf.
    DmaBufSync,
    UpInvoke,
    UpInitAttach,
    UpInitAttachSns,
    UpInitCreate,
    UpInitCreateStatic,
    UpAllocDmaBuff,
    UpFreeDmaBuff,
    UpMmap,
    UpMunmap,
    UpMemMap,
    UpMemUnmap,
    UpGetDspInfo,
    /// A request the upstream fastrpc driver does not know (ENOTTY).
    UpUnknown,
    /// An ioctl on a descriptor that is not a simulated device (dma-buf, file, pass-through).
    OtherIoctl,
    /// `fcntl(F_DUPFD_CLOEXEC)` (`Syscalls::dup_cloexec`).
    Dup,
    /// `lseek(SEEK_END)` (`Syscalls::seek_end`).
    Seek,
}

impl CallKind {
    /// True for the four INVOKE variants.
    pub fn is_invoke(self) -> bool {
        matches!(self, CallKind::RpcInvoke | CallKind::RpcInvokeFd | CallKind::RpcInvokeAttrs | CallKind::RpcInvokeCrc | CallKind::UpInvoke)
    }

    /// An INIT of either driver (downstream INIT / INIT_ATTRS, upstream INIT_CREATE,
    /// INIT_CREATE_STATIC, INIT_ATTACH, INIT_ATTACH_SNS).
    pub fn is_init(self) -> bool {
        matches!(
            self,
            CallKind::RpcInit
                | CallKind::RpcInitAttrs
                | CallKind::UpInitCreate
                | CallKind::UpInitCreateStatic
                | CallKind::UpInitAttach
                | CallKind::UpInitAttachSns
        )
    }
}

/// What the simulated DSP was asked to do (one per message that reached it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DspCallKind {
    /// Kernel message: create the user process (INIT).
    CreateProcess,
    /// Kernel message: release the process (close of the FastRPC fd).
    ReleaseProcess,
    /// Kernel message: map memory into the process (MMAP).
    KernelMmap,
    /// Kernel message: unmap (MUNMAP).
    KernelMunmap,
    /// Kernel message (upstream): map a dma-buf persistently (MEM_MAP).
    KernelMemMap,
    /// Kernel message (upstream): remove such a map (MEM_UNMAP).
    KernelMemUnmap,
    /// Kernel message (upstream): capability query on handle 2 (GET_DSP_INFO).
    DspInfo,
    /// Handle 0 method 0: remotectl open (load a library by URI).
    RemotectlOpen,
    /// Handle 0 method 1: remotectl close.
    RemotectlClose,
    /// Handle 3 method 3: adsp_listener init2.
    ListenerInit2,
    /// Handle 3 method 4: adsp_listener next2.
    ListenerNext2,
    /// Handle 3 method 5: adsp_listener get_in_bufs2.
    ListenerGetInBufs2,
    /// Handle 4 method 2: adsp_current_process1 exit.
    ProcessExit,
    /// A call on a library handle (any method).
    Library,
    /// Anything else (unknown handle or method).
    Unknown,
}

/// Where a fault is injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultTarget {
    /// A crossing of the seam, by kind.
    Call(CallKind),
    /// A message handled by the simulated DSP, by kind.
    Dsp(DspCallKind),
    /// A kernel message on its way to the simulated DSP, by kind (Linux's own `fastrpc.c`
    /// only): [`Fault::Delay`] holds it after the driver sent it and before the DSP sees it (a
    /// message still queued in the transport). A restart meanwhile ends the DSP it was sent to;
    /// the new DSP never sees it.
    Delivery(DspCallKind),
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// [`FaultTarget::Call`]: the call fails with this errno before doing anything.
    /// [`FaultTarget::Dsp`]: the DSP answers with this number as its result.
    Errno(Errno),
    /// [`FaultTarget::Call`] (ioctls only): the ioctl returns this value (positive values are
    /// what the adsprpc driver uses for DSP errors). [`FaultTarget::Dsp`]: the DSP's result.
    Returned(i32),
    /// The call takes this much longer. For invokes the delay is on the DSP side (the host wait
    /// stays interruptible); for everything else the system call itself sleeps, uninterruptibly.
    Delay(Duration),
    /// Like `Delay`, but until [`Bench::release_hangs`](crate::Bench::release_hangs), a DSP
    /// restart or the process's end.
    Hang,
}

/// Resource counts at one moment. Equal snapshots before and after a session mean everything the
/// session acquired was given back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Descriptors handed out by the bench (simulated nodes, dma-bufs, virtual files, pass-through
    /// opens) and not closed.
    pub open_fds: usize,
    /// Open `/dev/ion` clients.
    pub ion_clients: usize,
    /// Live ION handles over all clients.
    pub ion_handles: usize,
    /// Live ION buffers (held by a handle, a dma-buf fd, a host mapping or a driver map).
    pub ion_buffers: usize,
    /// Bytes of live ION buffers.
    pub ion_bytes: u64,
    /// Live host mappings made through the bench's `mmap`.
    pub host_mappings: usize,
    /// Open FastRPC files (including ones closed while another thread was still in an ioctl).
    pub rpc_files: usize,
    /// SMMU sessions taken.
    pub sessions: usize,
    /// Live simulated DSP processes.
    pub dsp_processes: usize,
    /// Live driver maps (MMAP, ADD_PAGES, invoke handle maps).
    pub dsp_maps: usize,
    /// Live `HAP_mmap` mappings in DSP processes.
    pub hap_mappings: usize,
    /// Real host memory mappings held on behalf of the DSP model (HAP mappings, including ones
    /// still in use by an entry that is finishing).
    pub dsp_host_mmaps: usize,
    /// Loaded libraries.
    pub loaded_libraries: usize,
    /// Invoke contexts in flight or parked.
    pub contexts: usize,
    /// Parked (interrupted) invoke contexts.
    pub parked: usize,
    /// Reverse requests queued or waiting for their reply.
    pub pending_reverse: usize,
    /// Threads currently blocked in an interruptible bench wait.
    pub blocked_threads: usize,
    /// Downstream: live driver-global heap maps (MMAP with `ADSP_MMAP_HEAP_ADDR` or
    /// `ADSP_MMAP_REMOTE_HEAP_ADDR`, `fastrpc_mmap_add` on `gfa.maps`). No file owns them and no
    /// close frees them: only a MUNMAP by DSP address (from any file) or an ADSP restart, which
    /// the bench never makes, does.
    pub global_maps: usize,
    /// Kernel init-memory buffers alive: held by a file (`fl->init_mem`, one per INIT_CREATE
    /// that got that far) or leaked for good (downstream `fastrpc_init_process` overwrites the
    /// pointer on a second INIT of the same file; upstream `fastrpc_init_create_process` on a
    /// second successful INIT_CREATE).
    pub init_buffers: usize,
    /// Downstream: references on the open CDSP channel (`kref`) that no live file will put back
    /// (each extra INIT of a file takes one that its close never puts); 0 while the channel is
    /// closed. Non-zero once every file is closed means the channel can never close again.
    pub channel_refs: u32,
    /// Kernel oopses and memory-safety violations a device would have suffered
    /// ([`Bench::oopses`](crate::Bench::oopses)).
    pub oopses: usize,
}

/// What kind of [`Oops`] the driver would have suffered on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OopsKind {
    /// A NULL pointer dereference: a kernel oops; the task dies in the ioctl holding the file's
    /// locks.
    NullDereference,
    /// A read out of bounds of a kernel array (no fault, garbage read).
    OutOfBoundsRead,
    /// Memory freed while the DSP still maps it (the DSP may later write into memory the kernel
    /// reuses).
    FreedWhileDspMapped,
}

/// One kernel oops or memory-safety violation on a path the downstream driver's source shows
/// unguarded ([`Bench::oopses`](crate::Bench::oopses)); the bench carries on where a device
/// would not, and counts it in [`Snapshot::oopses`] so that a settle-to-start check fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oops {
    /// The ioctl that took the path.
    pub request: CallKind,
    /// What would have happened.
    pub kind: OopsKind,
    /// The driver path, in words (names the driver function).
    pub what: &'static str,
}

/// Calls counted so far, per kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Crossings of the seam.
    pub calls: BTreeMap<CallKind, u64>,
    /// Messages handled by the DSP.
    pub dsp: BTreeMap<DspCallKind, u64>,
    /// Interrupts delivered to a blocked thread.
    pub interrupts_delivered: u64,
    /// Interrupts that found the thread not blocked in the bench (lost, as a signal would be).
    pub interrupts_lost: u64,
    /// Buffers of a cached heap the DSP was given while a CPU access (`DMA_BUF_SYNC_START`
    /// without its `END`) was open: on a device the DSP could see stale cache lines.
    pub dsp_use_during_cpu_access: u64,
    /// `next2` answers (`prevCtx`) for a request the receiving process never sent or had
    /// withdrawn: an answer of an old channel generation reaching a new one shows up here.
    pub stray_answers: u64,
    /// remotectl opens that loaded a library into a DSP process (refused opens are not
    /// counted; [`DspCallKind::RemotectlOpen`] counts every attempt).
    pub libraries_opened: u64,
    /// remotectl closes that unloaded a library (libraries that end with their process are
    /// not counted).
    pub libraries_closed: u64,
    /// Every MMAP / MMAP_64 request whose argument the kernel read (downstream, upstream, and
    /// the requests the bench hands to Linux's own driver), by its `flags` value.
    pub mmap_flags: BTreeMap<u32, u64>,
    /// Downstream channel opens (`fastrpc_channel_open` from INIT) that failed: the glink link
    /// not up yet, or the port never connected ([`ChannelReopen`](crate::ChannelReopen)).
    pub channel_open_failures: u64,
    /// Downstream GETINFOs that began while another was in its allocation window
    /// ([`BenchConfig::getinfo_window`](crate::BenchConfig::getinfo_window)): each is a pair
    /// of files that may have been given the same SMMU context bank.
    pub getinfo_overlaps: u64,
    /// Downstream maps (handle, buffer argument, fd MMAP, ADD_PAGES) and INITs refused because
    /// the file's IOVA space was full ([`BenchConfig::session_iova`](crate::BenchConfig::session_iova)).
    pub iova_refusals: u64,
    /// INVOKE*, MMAP* and MUNMAP* (not MUNMAP_FD) ioctls on a downstream file that has not done
    /// both GETINFO and an INIT that returned 0; upstream (model and Linux's driver): INVOKE,
    /// MMAP, MUNMAP, MEM_MAP and MEM_UNMAP before an INIT_* or ATTACH that returned 0. A stack
    /// that never calls a file before it is set up keeps this at 0.
    pub before_init: u64,
    /// Bytes the kernel models copied between user memory and their copy buffers for FastRPC
    /// calls (downstream and upstream models: in- and out-buffer arguments without a mapped
    /// fd, metadata excluded). A handle argument, which the driver maps, adds nothing, so a
    /// launch whose views are all leases copies the same few bytes (its header, offsets and
    /// timer) whatever the leases' sizes. Linux's own driver's copies are not counted (its
    /// `copy_from_user` runs in the C shim).
    pub bytes_copied: u64,
}

/// One FastRPC `MUNMAP` / `MUNMAP_64` ioctl as the bench saw it: which descriptor it was sent on,
/// which channel that descriptor was then, and which channel had made the map it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MunmapRecord {
    /// The descriptor number it was sent on.
    pub fd: i32,
    /// The FastRPC file (channel) the number referred to, `None` if it was not one (closed,
    /// retired, another kind of file).
    pub channel: Option<u64>,
    /// The restart epoch at which that channel was opened (its generation on the bench).
    pub channel_epoch: Option<u64>,
    /// The channel holding a map with this address and length, if any.
    pub owner: Option<u64>,
    /// DSP address and length named.
    pub map: (u64, u64),
}

impl MunmapRecord {
    /// True if the MUNMAP went to a different channel than the one that made the map (the
    /// reused-number race).
    pub fn went_to_another_channel(&self) -> bool {
        self.owner.is_some() && self.owner != self.channel
    }
}

impl CallCounts {
    /// Calls of one kind.
    pub fn of(&self, kind: CallKind) -> u64 {
        self.calls.get(&kind).copied().unwrap_or(0)
    }
    /// INIT requests of either driver ([`CallKind::is_init`]).
    pub fn inits(&self) -> u64 {
        self.calls.iter().filter(|(k, _)| k.is_init()).map(|(_, n)| n).sum()
    }
    /// DSP messages of one kind.
    pub fn dsp_of(&self, kind: DspCallKind) -> u64 {
        self.dsp.get(&kind).copied().unwrap_or(0)
    }
}

/// One record of the HAP ledger (what library entries did with DSP mappings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerEvent {
    /// `HAP_mmap(fd, len, offset)` succeeded at DSP address `addr`.
    Map {
        /// The fd the entry passed.
        fd: i32,
        /// DSP address of the mapping.
        addr: u32,
        /// Mapped length.
        len: u32,
        /// File offset.
        offset: u32,
    },
    /// `HAP_mmap` failed.
    MapFailed {
        /// The fd the entry passed.
        fd: i32,
        /// Requested length.
        len: u32,
        /// Why.
        reason: &'static str,
    },
    /// `HAP_munmap(addr, len)`; `matched` is false if no live mapping has exactly this address
    /// and length (then nothing is unmapped).
    Unmap {
        /// Address passed.
        addr: u32,
        /// Length passed.
        len: u32,
        /// Whether it matched a live mapping.
        matched: bool,
    },
    /// The entry handed the kernel a view that is not inside the mapping it came from.
    ViewOutsideMapping {
        /// Buffer parameter index.
        buffer: usize,
        /// The view's DSP address and length.
        view: (u32, u32),
        /// The mapping's DSP address and length (`None`: the map failed).
        mapping: Option<(u32, u32)>,
    },
    /// The kernel accessed memory outside the mapping; the access was not performed.
    AccessOutsideMapping {
        /// Buffer parameter index.
        buffer: usize,
        /// DSP address and length of the access.
        access: (u64, u64),
        /// Write or read.
        write: bool,
    },
    /// The entry read or wrote an argument beyond what the call supplied (`arg` index, offset,
    /// length); the C would read foreign memory, the model uses zeros / drops the write.
    ArgOutOfBounds {
        /// Argument index in `pra`.
        arg: usize,
        /// Offset in the argument.
        offset: u32,
        /// Length of the access.
        len: u32,
    },
    /// The entry wrote the timer (microseconds).
    Timer {
        /// Elapsed microseconds written.
        micros: u64,
    },
    /// A batch ran record `record` (kernel `kernel`), which returned `code` (non-zero stops the
    /// batch).
    BatchKernel {
        /// Record index in the batch.
        record: u32,
        /// Kernel index in the library's table.
        kernel: u32,
        /// The kernel's status.
        code: i32,
    },
    /// The entry refused the call before mapping anything (v2 validation) with this code.
    Refused {
        /// The AEE code returned.
        code: i32,
    },
    /// A DSP mapping of a lease was still live when the lease lost `what` (its driver map
    /// dropped, its fd closed or retired): a later call could reach memory that is no longer
    /// the lease's (a contract violation of the map cache).
    MappingOutlivesLease {
        /// The handle fd the mapping was made through.
        fd: i32,
        /// Its DSP address and length.
        addr: u32,
        /// Its length.
        len: u32,
        /// What the lease lost.
        what: &'static str,
    },
    /// A call used a DSP mapping kept from an earlier call for a handle whose fd now names a
    /// different buffer (a cached mapping reached the wrong lease).
    StaleMappingUsed {
        /// The handle fd.
        fd: i32,
        /// The mapping's DSP address.
        addr: u32,
        /// Its length.
        len: u32,
    },
}

impl LedgerEvent {
    /// True for the events that show a broken contract (mismatched unmap, out-of-mapping view or
    /// access, out-of-bounds argument access).
    pub fn is_mismatch(&self) -> bool {
        matches!(
            self,
            LedgerEvent::Unmap { matched: false, .. }
                | LedgerEvent::ViewOutsideMapping { .. }
                | LedgerEvent::AccessOutsideMapping { .. }
                | LedgerEvent::ArgOutOfBounds { .. }
                | LedgerEvent::MappingOutlivesLease { .. }
                | LedgerEvent::StaleMappingUsed { .. }
        )
    }
}

/// A ledger event with the process and library it happened in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Simulated DSP process id.
    pub pid: u64,
    /// Library name.
    pub library: String,
    /// What happened.
    pub event: LedgerEvent,
}

/// One `open` through the seam.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRecord {
    /// The path as given.
    pub path: String,
    /// True if served from the bench's virtual file table, false if passed to the real OS.
    pub simulated: bool,
    /// The result.
    pub result: Result<Fd, Errno>,
}

/// One reverse request the DSP sent (loader or scripted) and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReverseRecord {
    /// Simulated DSP process id.
    pub pid: u64,
    /// Reverse handle.
    pub handle: u32,
    /// Scalars word.
    pub sc: u32,
    /// Payload bytes.
    pub payload_len: usize,
    /// The host's result (`None`: never answered).
    pub result: Option<i32>,
}

/// What a file's CPU-DMA-latency request went through, as the comma three's driver does it: the
/// first `FASTRPC_CONTROL_LATENCY` adds the request, later ones update it
/// (`fastrpc_internal_control`), and the file's release removes it before anything else
/// (`fastrpc_device_release`). A reading of that source: the bench keeps the record, no PM-QoS
/// framework exists here, so nothing about CPU idle states is modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmQosOp {
    /// `pm_qos_add_request(PM_QOS_CPU_DMA_LATENCY, latency)`: the file's first vote.
    Add,
    /// `pm_qos_update_request`: a later vote on the same file.
    Update,
    /// `pm_qos_remove_request` at the file's release.
    Remove,
}

/// One PM-QoS event of a downstream FastRPC file ([`Bench::pm_qos_log`](crate::Bench::pm_qos_log)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmQosRecord {
    /// The FastRPC file (the bench's file id, as in [`MunmapRecord::channel`]).
    pub file: u64,
    /// What happened to its request.
    pub op: PmQosOp,
    /// The latency asked for in microseconds: the device tree's `qcom,rpc-latency-us` for an
    /// enable of 1, `-1` (`PM_QOS_DEFAULT_VALUE`, no constraint) for any other; 0 for a removal.
    pub latency_us: i32,
    /// The file had a DSP process (an INIT that returned 0) when it happened.
    pub inited: bool,
}

/// One simulated latency sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySample {
    /// Which crossing.
    pub kind: CallKind,
    /// Simulated duration: the cost model plus any DSP time a kernel function declared.
    pub simulated: Duration,
}

/// Summary of simulated latencies of one kind. Its `Display` always says "simulated".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySummary {
    /// Which crossing.
    pub kind: CallKind,
    /// Number of samples.
    pub count: usize,
    /// Smallest.
    pub min: Duration,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
}

impl LatencySummary {
    /// Summarises `samples` of `kind`; `None` if there are none.
    pub fn of(kind: CallKind, samples: &[LatencySample]) -> Option<LatencySummary> {
        let mut v: Vec<Duration> = samples.iter().filter(|s| s.kind == kind).map(|s| s.simulated).collect();
        if v.is_empty() {
            return None;
        }
        v.sort();
        let pick = |q: usize| v[((v.len() - 1) * q) / 100];
        Some(LatencySummary { kind, count: v.len(), min: v[0], p50: pick(50), p99: pick(99), max: v[v.len() - 1] })
    }
}

impl fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}: n={} simulated min={:?} p50={:?} p99={:?} max={:?} (simulated, not measured)",
            self.kind, self.count, self.min, self.p50, self.p99, self.max
        )
    }
}
