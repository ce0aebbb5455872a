//! Board facts for hexrpc: which device nodes, which ION heap and flags, where the DSP shell
//! is, which directories the reverse file service may serve, and the limits the stack enforces.
//!
//! Boards are data, not code paths: the HAL and runtime take a [`Board`] and behave the same on
//! every board. A board names its FastRPC driver ([`KernelAbi`]: downstream `/dev/adsprpc-smd`
//! or upstream `/dev/fastrpc-*`) and its buffer allocator ([`Allocator`]: msm ION 4.9 or a
//! dma-buf heap); [`detect_kernel`] tells which a device has. The known boards:
//!
//! * [`COMMA_THREE`]: comma three on AGNOS (sdm845, Linux 4.9 downstream: `/dev/ion`,
//!   `/dev/adsprpc-smd`, CDSP channel 3, ION system heap 25 with `ION_FLAG_CACHED`, shell
//!   `/dsp/cdsp/fastrpc_shell_3`);
//! * [`GENERIC_MSM_ANDROID`]: an Android device on a downstream msm kernel with the same ABI
//!   (shell under `/vendor/dsp/cdsp/`);
//! * [`QCOM_RB5`]: Qualcomm Robotics RB5 (QRB5165 / sm8250) on a mainline kernel (Qualcomm
//!   Linux, Linaro images): `/dev/fastrpc-cdsp`, `/dev/dma_heap/system`, unsigned shell
//!   `/usr/lib/dsp/cdsp/fastrpc_shell_unsigned_3`;
//! * [`GENERIC_UPSTREAM`]: any mainline-kernel Qualcomm device with the same nodes;
//! * [`BENCH`] and [`BENCH_UPSTREAM`]: the isolated bench (simulated kernel and DSP, crate
//!   `hexrpc-bench`) with the downstream or the upstream kernel, with their own node names so
//!   that a bench board can never open a real device.
//!
//! The shell paths and DSP directories of the upstream boards are those of Qualcomm Linux
//! images as documented by users of those images; they were not checked on a device here.
//!
//! Device access is an authority: opening device nodes takes a [`DeviceAccess`] token, which
//! only this crate (for the bench) or the binary (for a real device, through
//! [`DeviceAccess::for_device`]) can mint.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use hexrpc_drivers::{adsprpc, ion, upstream};

/// Which FastRPC driver a board's kernel has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KernelAbi {
    /// The downstream msm driver (`/dev/adsprpc-smd`, one node, GETINFO picks the channel).
    DownstreamMsm,
    /// The upstream driver (`/dev/fastrpc-<domain>`, one node per DSP).
    Upstream,
}

impl KernelAbi {
    /// A short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            KernelAbi::DownstreamMsm => "downstream adsprpc",
            KernelAbi::Upstream => "upstream fastrpc",
        }
    }
}

/// How the board's FastRPC driver finds an existing map of a buffer passed by fd (upstream
/// `fastrpc_map_lookup`), which decides when a freed lease's fd number may be given back.
///
/// The driver keeps a map of a handle argument after the call, until the DSP lists the fd in a
/// call's fdlist or the channel's file is released (`fastrpc_put_args`, `fastrpc_user_free`).
/// What a later call with the same *number* gets depends on the lookup:
///
/// * [`MapLookup::NumberAndBuffer`]: the lookup takes the dma-buf the number names now
///   (`dma_buf_get(fd)`) and matches a map only if both the number and the buffer are the same
///   (`map->fd != fd || map->buf != buf`), as Linux 6.1.192's `drivers/misc/fastrpc.c` reads and
///   mainline has since the 2025 fix. A reused number names another buffer and never meets the
///   old map, which holds its own reference to its buffer (`fastrpc_free_map` puts it): the
///   number can be closed as soon as the DSP holds no mapping of it.
/// * [`MapLookup::NumberOnly`]: older upstream drivers (and the bench's upstream model, which
///   models them) match the number alone, so a reused number would hand the DSP the old map's
///   pages. The number stays occupied until every channel that may map it is closed; the
///   session bounds how many it keeps ([`Limits::kept_numbers`]) by replacing its channel.
///
/// Downstream boards use neither (`FASTRPC_IOCTL_MUNMAP_FD` drops the maps by number first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MapLookup {
    /// The lookup matches the fd number only: a freed number is kept until its channels close.
    NumberOnly,
    /// The lookup matches the number and the dma-buf it names: a freed number is closed at once.
    NumberAndBuffer,
}

impl MapLookup {
    /// A short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            MapLookup::NumberOnly => "by fd number",
            MapLookup::NumberAndBuffer => "by fd number and dma-buf",
        }
    }
}

/// Where a board's shareable buffers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Allocator {
    /// msm ION 4.9 (`/dev/ion`): handle, SHARE fd, heap id mask and flags.
    Ion49,
    /// A dma-buf heap (`/dev/dma_heap/<name>`): one ALLOC gives the dma-buf fd.
    DmaHeap,
}

impl Allocator {
    /// A short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Allocator::Ion49 => "ION 4.9",
            Allocator::DmaHeap => "dma-heap",
        }
    }
}

/// Fixed limits the stack enforces on a board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Limits {
    /// Largest shell ELF accepted (the driver refuses 2 MiB and more).
    pub max_shell_len: u32,
    /// Largest single ION allocation the stack will ask for.
    pub max_alloc_len: u64,
    /// Most bytes one reverse request may ask for (fread length, payload size).
    pub max_reverse_request: u32,
    /// Most bytes served from one open file over its lifetime.
    pub max_reverse_file_bytes: u64,
    /// Most virtual file handles open at once in the reverse service.
    pub max_reverse_handles: u16,
    /// Most bytes apps_mem may map for the DSP at once.
    pub max_dsp_map_bytes: u64,
    /// Most freed fd numbers a session keeps occupied for channels that may still map them
    /// (each is an open descriptor): on reaching it, the session replaces its channel (a
    /// planned recovery), which releases them all. Upstream boards with
    /// [`MapLookup::NumberOnly`] keep one per freed lease that went to the DSP; kept well under
    /// the usual 1,024-descriptor soft limit. At most the session's table (1,024).
    pub kept_numbers: u16,
    /// Most `MUNMAP_FD` calls a dropped lease makes on one channel (downstream drivers: one per
    /// handle reference the driver still holds, one per call that carried the lease and was not
    /// given back by the DSP's fdlist). The session counts the calls that carried each lease: a
    /// lease carried this many times or more gets no `MUNMAP_FD` at all, and its number is
    /// kept (retired) until that channel closes, as when a DSP mapping cannot be released,
    /// because a map of it left in the driver would hand the next lease with that number this
    /// lease's pages (kernel-rules R1, R8, R21). The bound keeps a drop's cost bounded, and a
    /// driver that never says "no map left" from hanging it.
    pub munmap_fd_drain: u32,
    /// Most library calls a session has in the driver at once, each holding one of the driver's
    /// call contexts: 256 for every process on the kernel (downstream `context_alloc`,
    /// `FASTRPC_CTX_MAX`; mainline `fastrpc_context_alloc`'s idr, per channel). A call abandoned
    /// at its deadline keeps its context until its channel is released, so it counts until
    /// then. A call past the share is refused before it is sent
    /// (`hexrpc_hal::Budget::CallContexts`), so that one process cannot
    /// take every context of the device (kernel-rules R22). The session's own calls (the
    /// reverse-RPC listener's one, library opens and closes) are not counted: at most a few more.
    pub calls_in_flight: u16,
    /// Most bytes of leases a session holds at once, page-rounded, those kept for a channel
    /// that may still map them included. On the comma three every FastRPC file's SMMU context
    /// bank has 0x78000000 bytes of IOVA (`fastrpc_cb_probe`), which each dma-buf the driver
    /// maps for it takes whole (a handle's map lasts until it is drained or the channel
    /// closes), beside the init memory, the driver's copy buffers and the DSP's own maps; past
    /// it a handle's map fails and so does the call. This is that space less
    /// [`max_dsp_map_bytes`](Self::max_dsp_map_bytes) and 16 MiB for the init memory (at most
    /// 8 MiB) and copy buffers; an allocation past it is refused
    /// (`hexrpc_hal::Budget::Iova`, kernel-rules R23). Upstream context banks have more room;
    /// the same bound is kept.
    pub lease_iova: u64,
    /// Most distinct threads that make library calls on one channel. The comma three's driver
    /// creates a record for every thread that invokes on a file (`getperfcounter` at the top of
    /// `fastrpc_internal_invoke`, profiling on or off) and frees them only with the file
    /// (`fastrpc_file_free`): a service that calls from ever new threads grows kernel memory
    /// without bound. Past this count the session replaces its channel (a planned recovery),
    /// whose new file starts with none (kernel-rules R24).
    pub perf_records: u16,
}

/// How a session recovers after a DSP restart or an abandoned call: bounded retries with
/// exponential backoff while the DSP is still down (INIT fails with `ENOTCONN` until the
/// subsystem is back), within a total time budget. `Failed` is reported only once the budget or
/// the attempts are spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RecoveryPolicy {
    /// Most rebuild attempts of one recovery (at least 1).
    pub attempts: u32,
    /// Wait after the first failed attempt, in milliseconds; doubled after each further one.
    pub first_delay_ms: u32,
    /// Longest wait between two attempts, in milliseconds.
    pub max_delay_ms: u32,
    /// Total time one recovery may take, in milliseconds (waits included); no attempt starts
    /// after it.
    pub budget_ms: u32,
    /// How long recovery interrupts the reverse-RPC listener and waits for it to leave the old
    /// channel, in milliseconds, before it retires that channel under the listener (whose
    /// descriptor number then stays reserved until the listener lets go of it).
    pub listener_leave_ms: u32,
    /// The longest one attempt's channel reopen can block in the kernel, in milliseconds: no
    /// attempt starts unless this much of the budget is left. Downstream, opening the DSP's
    /// channel after a restart waits for the port to connect for up to `RPC_TIMEOUT` (5 s),
    /// even when the open already failed (`fastrpc_channel_open`); upstream a reopen does not
    /// block.
    pub reopen_wait_ms: u32,
}

impl RecoveryPolicy {
    /// The default (upstream driver): up to 12 attempts, 5 ms doubling to 500 ms between them,
    /// 5 s in all; the listener gets 250 ms to leave; a reopen does not block.
    pub const DEFAULT: RecoveryPolicy =
        RecoveryPolicy { attempts: 12, first_delay_ms: 5, max_delay_ms: 500, budget_ms: 5_000, listener_leave_ms: 250, reopen_wait_ms: 0 };

    /// The downstream driver (the comma three's `adsprpc`): as [`DEFAULT`](Self::DEFAULT), but
    /// 20 s in all, because one reopen of the DSP's channel between the DSP's power-up and its
    /// glink link coming up fails only after the driver's port-connect wait of 5 s
    /// (`fastrpc_channel_open`, `RPC_TIMEOUT`): the budget holds three such waits and the next
    /// attempt's.
    pub const DOWNSTREAM: RecoveryPolicy = RecoveryPolicy { budget_ms: 20_000, reopen_wait_ms: 5_000, ..RecoveryPolicy::DEFAULT };

    /// The wait before attempt `n + 1` after `n` failed attempts (`n >= 1`).
    pub const fn delay_ms(&self, failed: u32) -> u32 {
        let shift = if failed == 0 { 0 } else { failed - 1 };
        let d = if shift >= 31 { u32::MAX } else { self.first_delay_ms.saturating_mul(1 << shift) };
        if d < self.max_delay_ms {
            d
        } else {
            self.max_delay_ms
        }
    }
}

/// Everything the stack needs to know about one board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Board {
    /// Short name (`comma-three`), used by `--board` and in reports.
    pub name: &'static str,
    /// One line for humans.
    pub description: &'static str,
    /// The FastRPC driver.
    pub abi: KernelAbi,
    /// How the upstream driver looks up a map by fd ([`MapLookup`]; downstream: unused).
    pub map_lookup: MapLookup,
    /// The buffer allocator.
    pub allocator: Allocator,
    /// The allocator's device node: `/dev/ion` ([`Allocator::Ion49`]) or the heap node
    /// ([`Allocator::DmaHeap`], e.g. `/dev/dma_heap/system`).
    pub ion_path: &'static core::ffi::CStr,
    /// The FastRPC device node.
    pub rpc_path: &'static core::ffi::CStr,
    /// The FastRPC channel (domain) id of the compute DSP.
    pub channel: u32,
    /// ION heap id to allocate from ([`Allocator::Ion49`]; unused for dma-heaps).
    pub heap_id: u32,
    /// ION allocation flags ([`Allocator::Ion49`]; unused for dma-heaps).
    pub heap_flags: u32,
    /// Buffers are CPU-cached and need cache maintenance around DSP use (ION `CACHED` flag, or a
    /// cached dma-heap such as `system`: `DMA_BUF_IOCTL_SYNC`).
    pub cached: bool,
    /// Process attributes for the upstream INIT_CREATE (`FASTRPC_MODE_*`; an unsigned shell on
    /// the non-secure node needs `FASTRPC_MODE_UNSIGNED_MODULE`). Unused downstream.
    pub process_attrs: u32,
    /// ION allocation alignment (tinygrad uses 0x200).
    pub alloc_align: u64,
    /// Path of the DSP user-process shell ELF where this board's images put it (one of
    /// [`shell_search`](Board::shell_search); probes and reports name it).
    pub shell_path: &'static core::ffi::CStr,
    /// Where the session looks for the shell, in order; the first path that exists wins. The
    /// FastRPC user library (`open_shell`) tries `<mount>/NAME`, `<mount>/cdsp/NAME`,
    /// `/vendor/dsp/NAME`, `/vendor/dsp/cdsp/NAME`, with `<mount>` = `/dsp` for the downstream
    /// driver and `/usr/lib/dsp` for the upstream one and NAME = `fastrpc_shell_3` (or
    /// `fastrpc_shell_unsigned_3` for an unsigned PD); the environment is not consulted.
    pub shell_search: &'static [&'static core::ffi::CStr],
    /// Every FastRPC context bank of the compute DSP is I/O-coherent (`dma-coherent` in the
    /// device tree): the DSP's accesses snoop the CPU caches. When false on a board with cached
    /// ION buffers, the HAL cleans and invalidates lease memory around its own CPU accesses,
    /// because the downstream driver maintains the caches of in/out buffer arguments only,
    /// never of handle arguments (which is how every lease reaches the DSP).
    pub dsp_coherent: bool,
    /// Directories the reverse file service may serve files from (read-only).
    pub dsp_dirs: &'static [&'static str],
    /// Device-tree model strings that identify this board (`/proc/device-tree/model`).
    pub dt_models: &'static [&'static str],
    /// Limits.
    pub limits: Limits,
    /// How sessions recover after a DSP restart.
    pub recovery: RecoveryPolicy,
}

#[cfg(feature = "defmt")]
impl defmt::Format for Board {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Board {{ name: {=str}, channel: {=u32}, heap: {=u32} }}", self.name, self.channel, self.heap_id)
    }
}

impl Board {
    /// The heap mask for [`heap_id`](Board::heap_id).
    pub const fn heap_mask(&self) -> u32 {
        match ion::ion_heap(self.heap_id) {
            Some(m) => m,
            None => 0,
        }
    }
}

const DEFAULT_LIMITS: Limits = Limits {
    max_shell_len: adsprpc::INIT_FILELEN_MAX - 1,
    max_alloc_len: 1 << 30,
    max_reverse_request: 1 << 20,
    max_reverse_file_bytes: 64 << 20,
    max_reverse_handles: 32,
    max_dsp_map_bytes: 64 << 20,
    kept_numbers: 256,
    munmap_fd_drain: 1 << 20,
    calls_in_flight: 64,
    lease_iova: 0x7800_0000 - (64 << 20) - (16 << 20),
    perf_records: 1024,
};

/// comma three (sdm845) on AGNOS.
pub const COMMA_THREE: Board = Board {
    name: "comma-three",
    description: "comma three (Snapdragon 845) on AGNOS, downstream msm 4.9 kernel",
    abi: KernelAbi::DownstreamMsm,
    map_lookup: MapLookup::NumberOnly,
    allocator: Allocator::Ion49,
    ion_path: c"/dev/ion",
    rpc_path: c"/dev/adsprpc-smd",
    channel: adsprpc::CDSP_DOMAIN_ID,
    heap_id: ion::ION_SYSTEM_HEAP_ID,
    heap_flags: ion::ION_FLAG_CACHED,
    cached: true,
    process_attrs: 0,
    alloc_align: 0x200,
    shell_path: c"/dsp/cdsp/fastrpc_shell_3",
    shell_search: &[
        c"/dsp/fastrpc_shell_3",
        c"/dsp/cdsp/fastrpc_shell_3",
        c"/vendor/dsp/fastrpc_shell_3",
        c"/vendor/dsp/cdsp/fastrpc_shell_3",
    ],
    dsp_coherent: true,
    dsp_dirs: &["/dsp/cdsp", "/dsp"],
    dt_models: &["comma tici", "comma tizi", "comma mici", "Qualcomm Technologies, Inc. SDM845"],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DOWNSTREAM,
};

/// A generic Android device on a downstream msm kernel (adsprpc + ION 4.9).
pub const GENERIC_MSM_ANDROID: Board = Board {
    name: "msm-android",
    description: "Android on a downstream msm kernel with /dev/adsprpc-smd and legacy ION",
    abi: KernelAbi::DownstreamMsm,
    map_lookup: MapLookup::NumberOnly,
    allocator: Allocator::Ion49,
    ion_path: c"/dev/ion",
    rpc_path: c"/dev/adsprpc-smd",
    channel: adsprpc::CDSP_DOMAIN_ID,
    heap_id: ion::ION_SYSTEM_HEAP_ID,
    heap_flags: ion::ION_FLAG_CACHED,
    cached: true,
    process_attrs: 0,
    alloc_align: 0x200,
    shell_path: c"/vendor/dsp/cdsp/fastrpc_shell_3",
    shell_search: &[
        c"/dsp/fastrpc_shell_3",
        c"/dsp/cdsp/fastrpc_shell_3",
        c"/vendor/dsp/fastrpc_shell_3",
        c"/vendor/dsp/cdsp/fastrpc_shell_3",
    ],
    dsp_coherent: false,
    dsp_dirs: &["/vendor/dsp/cdsp", "/vendor/dsp", "/vendor/lib/rfsa/adsp"],
    dt_models: &[],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DOWNSTREAM,
};

/// The isolated bench (crate `hexrpc-bench`): simulated nodes that no real device has.
pub const BENCH: Board = Board {
    name: "bench",
    description: "isolated bench: simulated msm ION 4.9 + adsprpc kernel and DSP (no hardware)",
    abi: KernelAbi::DownstreamMsm,
    map_lookup: MapLookup::NumberOnly,
    allocator: Allocator::Ion49,
    ion_path: c"/bench/dev/ion",
    rpc_path: c"/bench/dev/adsprpc-smd",
    channel: adsprpc::CDSP_DOMAIN_ID,
    heap_id: ion::ION_SYSTEM_HEAP_ID,
    heap_flags: ion::ION_FLAG_CACHED,
    cached: true,
    process_attrs: 0,
    alloc_align: 0x200,
    shell_path: c"/bench/dsp/cdsp/fastrpc_shell_3",
    shell_search: &[
        c"/bench/dsp/fastrpc_shell_3",
        c"/bench/dsp/cdsp/fastrpc_shell_3",
        c"/bench/vendor/dsp/fastrpc_shell_3",
        c"/bench/vendor/dsp/cdsp/fastrpc_shell_3",
    ],
    dsp_coherent: true,
    dsp_dirs: &["/bench/dsp/cdsp"],
    dt_models: &[],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DOWNSTREAM,
};

/// Qualcomm Robotics RB5 (QRB5165, sm8250) on a mainline kernel (Qualcomm Linux / Linaro).
pub const QCOM_RB5: Board = Board {
    name: "qcom-rb5",
    description: "Qualcomm Robotics RB5 (QRB5165) on a mainline kernel: upstream /dev/fastrpc-cdsp + /dev/dma_heap/system",
    abi: KernelAbi::Upstream,
    map_lookup: MapLookup::NumberOnly,
    allocator: Allocator::DmaHeap,
    ion_path: c"/dev/dma_heap/system",
    rpc_path: c"/dev/fastrpc-cdsp",
    channel: upstream::CDSP_DOMAIN_ID,
    heap_id: 0,
    heap_flags: 0,
    alloc_align: 0x1000,
    cached: true,
    process_attrs: upstream::FASTRPC_MODE_UNSIGNED_MODULE,
    shell_path: c"/usr/lib/dsp/cdsp/fastrpc_shell_unsigned_3",
    shell_search: &[
        c"/usr/lib/dsp/fastrpc_shell_unsigned_3",
        c"/usr/lib/dsp/cdsp/fastrpc_shell_unsigned_3",
        c"/vendor/dsp/fastrpc_shell_unsigned_3",
        c"/vendor/dsp/cdsp/fastrpc_shell_unsigned_3",
    ],
    dsp_coherent: false,
    dsp_dirs: &["/usr/lib/dsp/cdsp", "/usr/lib/dsp"],
    dt_models: &["Qualcomm Technologies, Inc. Robotics RB5"],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DEFAULT,
};

/// Any mainline-kernel Qualcomm device with the upstream driver and the system dma-heap.
/// The RB5's nodes, shell and directories, which are the mainline ones, matched by no model.
pub const GENERIC_UPSTREAM: Board = Board {
    name: "upstream",
    description: "mainline-kernel Qualcomm device: upstream /dev/fastrpc-cdsp + /dev/dma_heap/system",
    dt_models: &[],
    ..QCOM_RB5
};

/// The isolated bench with the upstream kernel: simulated `fastrpc-cdsp` and system dma-heap.
pub const BENCH_UPSTREAM: Board = Board {
    name: "bench-upstream",
    description: "isolated bench: simulated dma-heap + upstream fastrpc kernel and DSP (no hardware)",
    abi: KernelAbi::Upstream,
    map_lookup: MapLookup::NumberOnly,
    allocator: Allocator::DmaHeap,
    ion_path: c"/bench/dev/dma_heap/system",
    rpc_path: c"/bench/dev/fastrpc-cdsp",
    channel: upstream::CDSP_DOMAIN_ID,
    heap_id: 0,
    heap_flags: 0,
    alloc_align: 0x1000,
    cached: true,
    process_attrs: upstream::FASTRPC_MODE_UNSIGNED_MODULE,
    shell_path: c"/bench/dsp/cdsp/fastrpc_shell_unsigned_3",
    shell_search: &[
        c"/bench/usr/lib/dsp/fastrpc_shell_unsigned_3",
        c"/bench/dsp/cdsp/fastrpc_shell_unsigned_3",
        c"/bench/vendor/dsp/fastrpc_shell_unsigned_3",
        c"/bench/vendor/dsp/cdsp/fastrpc_shell_unsigned_3",
    ],
    dsp_coherent: false,
    dsp_dirs: &["/bench/dsp/cdsp"],
    dt_models: &[],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DEFAULT,
};

/// The isolated bench with Linux's own upstream driver (`drivers/misc/fastrpc.c` run in user
/// space by the bench's `linux` feature) behind the same simulated nodes as [`BENCH_UPSTREAM`].
/// Only the bench's own tests use it: it is in neither [`BOARDS`] nor [`BENCH_BOARDS`], so no
/// command offers it; [`DeviceAccess::for_bench_board`] accepts it.
pub const BENCH_LINUX: Board = Board {
    name: "bench-linux",
    description: "isolated bench: Linux's own fastrpc.c (user-space harness) + simulated dma-heap and DSP (no hardware)",
    // Debian's 6.1.192 fastrpc.c, which the harness runs, matches the number and the dma-buf.
    map_lookup: MapLookup::NumberAndBuffer,
    ..BENCH_UPSTREAM
};

/// Every known board.
pub const BOARDS: &[Board] = &[COMMA_THREE, GENERIC_MSM_ANDROID, QCOM_RB5, GENERIC_UPSTREAM, BENCH, BENCH_UPSTREAM];

/// The bench boards (simulated nodes under `/bench/`).
pub const BENCH_BOARDS: &[&Board] = &[&BENCH, &BENCH_UPSTREAM];

/// Which FastRPC driver and which allocator a device has, as seen from its device nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelDetection {
    /// The driver whose node exists (downstream preferred when both exist, as on some Android
    /// kernels that carry both).
    pub abi: KernelAbi,
    /// The node of that driver.
    pub rpc_path: &'static core::ffi::CStr,
    /// The allocator whose node exists (ION preferred when both exist).
    pub allocator: Allocator,
    /// The node of that allocator.
    pub alloc_path: &'static core::ffi::CStr,
}

#[cfg(feature = "defmt")]
impl defmt::Format for KernelDetection {
    fn format(&self, f: defmt::Formatter<'_>) {
        // CStr has no defmt impl: the node paths are left out.
        defmt::write!(f, "KernelDetection {{ abi: {}, allocator: {} }}", self.abi, self.allocator)
    }
}

/// The FastRPC nodes looked for, in order: downstream, then upstream (compute DSP nodes).
pub const RPC_NODES: &[(KernelAbi, &core::ffi::CStr)] = &[
    (KernelAbi::DownstreamMsm, c"/dev/adsprpc-smd"),
    (KernelAbi::Upstream, c"/dev/fastrpc-cdsp"),
    (KernelAbi::Upstream, c"/dev/fastrpc-cdsp-secure"),
];

/// The allocator nodes looked for, in order.
pub const ALLOC_NODES: &[(Allocator, &core::ffi::CStr)] =
    &[(Allocator::Ion49, c"/dev/ion"), (Allocator::DmaHeap, c"/dev/dma_heap/system"), (Allocator::DmaHeap, c"/dev/dma_heap/qcom,system")];

/// Finds which driver and allocator a device has, from the standard nodes ([`RPC_NODES`],
/// [`ALLOC_NODES`]): `exists(path)` says whether a node exists (the caller stats it). `None` if
/// no FastRPC node or no allocator node exists.
pub fn detect_kernel(exists: impl Fn(&core::ffi::CStr) -> bool) -> Option<KernelDetection> {
    detect_kernel_in(RPC_NODES, ALLOC_NODES, exists)
}

/// [`detect_kernel`] over other node tables (the bench's simulated nodes, say), in order.
pub fn detect_kernel_in(
    rpc_nodes: &[(KernelAbi, &'static core::ffi::CStr)],
    alloc_nodes: &[(Allocator, &'static core::ffi::CStr)],
    exists: impl Fn(&core::ffi::CStr) -> bool,
) -> Option<KernelDetection> {
    let (abi, rpc_path) = rpc_nodes.iter().copied().find(|(_, p)| exists(p))?;
    let (allocator, alloc_path) = alloc_nodes.iter().copied().find(|(_, p)| exists(p))?;
    Some(KernelDetection { abi, rpc_path, allocator, alloc_path })
}

/// The bench's simulated FastRPC nodes (both kernels), for [`detect_kernel_in`].
pub const BENCH_RPC_NODES: &[(KernelAbi, &core::ffi::CStr)] =
    &[(KernelAbi::DownstreamMsm, BENCH.rpc_path), (KernelAbi::Upstream, BENCH_UPSTREAM.rpc_path)];

/// The bench's simulated allocator nodes (both kernels), for [`detect_kernel_in`].
pub const BENCH_ALLOC_NODES: &[(Allocator, &core::ffi::CStr)] =
    &[(Allocator::Ion49, BENCH.ion_path), (Allocator::DmaHeap, BENCH_UPSTREAM.ion_path)];

/// The generic board for a detected kernel: [`GENERIC_MSM_ANDROID`] for the downstream driver
/// with ION, [`GENERIC_UPSTREAM`] for the upstream driver with a dma-heap; `None` for a mix the
/// stack has no board for (say which in the report).
pub fn generic_board(k: &KernelDetection) -> Option<&'static Board> {
    match (k.abi, k.allocator) {
        (KernelAbi::DownstreamMsm, Allocator::Ion49) => Some(&GENERIC_MSM_ANDROID),
        (KernelAbi::Upstream, Allocator::DmaHeap) => Some(&GENERIC_UPSTREAM),
        _ => None,
    }
}

/// The boards of real devices: every board of [`BOARDS`] but the bench's ([`BENCH_BOARDS`]).
pub fn device_boards() -> impl Iterator<Item = &'static Board> {
    BOARDS.iter().filter(|b| !BENCH_BOARDS.contains(b))
}

/// Finds a board by its short name.
pub fn by_name(name: &str) -> Option<&'static Board> {
    BOARDS.iter().find(|b| b.name == name)
}

/// Finds the board whose device-tree model matches `model` (the contents of
/// `/proc/device-tree/model`, trailing NULs and whitespace ignored). `None` if no board claims
/// it; the caller then needs an explicit `--board`.
pub fn detect(model: &str) -> Option<&'static Board> {
    let model = model.trim_end_matches(['\0', '\n', ' ']);
    BOARDS.iter().find(|b| b.dt_models.iter().any(|m| model.starts_with(m)))
}

/// The authority to open device nodes. Only this crate ([`DeviceAccess::for_bench`]) and the
/// binary that runs on a device ([`DeviceAccess::for_device`], which it must call explicitly)
/// can mint one; library code above cannot conjure device access on its own.
#[derive(Debug)]
pub struct DeviceAccess {
    board: &'static Board,
}

impl DeviceAccess {
    /// Authority over the bench board's simulated nodes.
    pub fn for_bench() -> DeviceAccess {
        DeviceAccess { board: &BENCH }
    }

    /// Authority over the simulated nodes of a bench board ([`BENCH_BOARDS`]: the downstream or
    /// the upstream bench kernel, or [`BENCH_LINUX`]), or of a variant of one that differs only
    /// in its [`Limits`] (a test's lowered bound: the same simulated nodes); `None` for any other
    /// board.
    pub fn for_bench_board(board: &'static Board) -> Option<DeviceAccess> {
        let bench = |b: &&Board| Board { limits: b.limits, ..*board } == **b;
        (BENCH_BOARDS.iter().any(bench) || bench(&&BENCH_LINUX)).then_some(DeviceAccess { board })
    }

    /// Authority over a real board's nodes. Call it only in a binary or a service's `main`: it is
    /// the single place where a program decides to touch the DSP.
    pub fn for_device(board: &'static Board) -> DeviceAccess {
        DeviceAccess { board }
    }

    /// The board this authority is for.
    pub fn board(&self) -> &'static Board {
        self.board
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_backoff_doubles_up_to_its_cap() {
        let p = RecoveryPolicy::DEFAULT;
        let d: [u32; 9] = core::array::from_fn(|i| p.delay_ms(i as u32 + 1));
        assert_eq!(d, [5, 10, 20, 40, 80, 160, 320, 500, 500]);
        assert_eq!(p.delay_ms(200), 500, "no overflow");
        let sum: u32 = (1..p.attempts).map(|n| p.delay_ms(n)).sum();
        assert!(sum <= p.budget_ms, "the waits alone fit the budget: {sum}");
        for b in BOARDS {
            assert!(b.recovery.attempts >= 1 && b.recovery.budget_ms > b.recovery.listener_leave_ms);
        }
    }

    #[test]
    fn boards_are_consistent() {
        for b in BOARDS {
            assert_eq!(by_name(b.name), Some(b));
            match b.allocator {
                Allocator::Ion49 => assert_ne!(b.heap_mask(), 0, "{}", b.name),
                Allocator::DmaHeap => assert!(b.ion_path.to_bytes().windows(9).any(|w| w == b"dma_heap/"), "{}", b.name),
            }
            match b.abi {
                KernelAbi::DownstreamMsm => assert!(b.rpc_path.to_bytes().ends_with(b"adsprpc-smd"), "{}", b.name),
                KernelAbi::Upstream => assert!(b.rpc_path.to_bytes().windows(8).any(|w| w == b"fastrpc-"), "{}", b.name),
            }
            assert!(b.limits.max_shell_len < adsprpc::INIT_FILELEN_MAX);
            assert!(!b.dsp_dirs.is_empty());
            assert!(b.shell_search.contains(&b.shell_path), "{}: the shell's usual path is searched", b.name);
            for d in b.dsp_dirs {
                assert!(d.starts_with('/') && !d.contains(".."), "{d}");
            }
        }
        assert_eq!(COMMA_THREE.heap_mask(), 0x0200_0000);
        assert_eq!(COMMA_THREE.channel, 3);
        // sdm845: every CDSP context bank is `dma-coherent` in the AGNOS device tree.
        const { assert!(COMMA_THREE.dsp_coherent) };
        assert_eq!(COMMA_THREE.shell_search[0], c"/dsp/fastrpc_shell_3");
    }

    #[test]
    fn detection() {
        assert_eq!(detect("comma tici\0").map(|b| b.name), Some("comma-three"));
        assert_eq!(detect("Some Other Board"), None);
        assert_eq!(DeviceAccess::for_bench().board().name, "bench");
        assert_eq!(detect("Qualcomm Technologies, Inc. Robotics RB5\0").map(|b| b.name), Some("qcom-rb5"));
        assert!(DeviceAccess::for_bench_board(&BENCH_UPSTREAM).is_some());
        assert!(DeviceAccess::for_bench_board(&QCOM_RB5).is_none());
    }

    #[test]
    fn kernel_detection_picks_driver_and_allocator() {
        let up = |p: &core::ffi::CStr| p == c"/dev/fastrpc-cdsp" || p == c"/dev/dma_heap/system";
        let k = detect_kernel(up).unwrap();
        assert_eq!((k.abi, k.allocator), (KernelAbi::Upstream, Allocator::DmaHeap));
        assert_eq!(generic_board(&k).map(|b| b.name), Some("upstream"));
        let down = |p: &core::ffi::CStr| p == c"/dev/adsprpc-smd" || p == c"/dev/ion";
        let k = detect_kernel(down).unwrap();
        assert_eq!((k.abi, k.allocator), (KernelAbi::DownstreamMsm, Allocator::Ion49));
        assert_eq!(generic_board(&k).map(|b| b.name), Some("msm-android"));
        // An Android GKI kernel with the downstream driver and dma-heaps only: detected, no board.
        let mixed = |p: &core::ffi::CStr| p == c"/dev/adsprpc-smd" || p == c"/dev/dma_heap/system";
        let k = detect_kernel(mixed).unwrap();
        assert_eq!(generic_board(&k), None);
        assert_eq!(detect_kernel(|p: &core::ffi::CStr| p == c"/dev/ion"), None);
    }
}
