//! Bench configuration: the board, simulated capacities, and the crossing-cost model.

use std::time::Duration;

use hexrpc_bsp::Board;

/// How the simulated kernel and DSP are set up. Start from [`BenchConfig::default`] (the
/// [`hexrpc_bsp::BENCH`] board) and change fields.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The board: device node paths, shell path, ION heap id, FastRPC channel.
    pub board: &'static Board,
    /// ION heap ids that exist besides the board's heap (all modelled as system heaps).
    pub extra_heaps: Vec<u32>,
    /// Simulated RAM: the system heap refuses one allocation of more than half of it (ENOMEM).
    pub ram_bytes: u64,
    /// Simulated heap capacity: live ION bytes beyond this fail with ENOMEM (page shortage).
    pub ion_capacity: u64,
    /// SMMU sessions (context banks) per FastRPC channel; GETINFO fails with -1 when all are taken
    /// (upstream: open fails with `EBUSY`). Default 8: the comma three's sdm845 device tree
    /// declares 10 CDSP context banks, 9 probe (`NUM_SESSIONS`), 2 are secure, and GETINFO only
    /// takes the 8 non-secure ones (`fastrpc_cb_probe`, `fastrpc_session_alloc_locked`).
    pub sessions_per_channel: u32,
    /// Whether sessions have an SMMU (the GETINFO answer).
    pub smmu: bool,
    /// Downstream driver: whether MMAP writes `vaddrout` back. The comma three's adsprpc
    /// (`fastrpc_internal_mmap`) never assigns it and the ioctl copies the caller's own 32 bytes
    /// back, so the default is `false`; some newer CAF trees do write it (`true`). The upstream
    /// driver (`fastrpc_req_mmap`) always writes it, whatever this says.
    pub mmap_writes_vaddrout: bool,
    /// Which handle fds the DSP lists in the fdlist after a successful call, releasing one
    /// reference of each one's driver map (kernel-abi.md 2.7; the real DSP rule, "once, when its
    /// own count of the handle reaches zero", is not known in detail). Default
    /// [`FdlistPolicy::None`]: handle maps accumulate until MUNMAP_FD (downstream) or close, the
    /// conservative reading a host must survive.
    pub fdlist: FdlistPolicy,
    /// How long the DSP waits for a reverse request to be answered before it gives up (a library
    /// load then fails with `AEE_EUNABLETOLOAD`). The real DSP would wait forever.
    pub reverse_timeout: Duration,
    /// Bytes the DSP loader asks for per `fread`.
    pub loader_chunk: u32,
    /// Largest library image the DSP loader accepts.
    pub max_library_len: u64,
    /// Largest total of copied buffer bytes in one invoke (more fails with ENOMEM).
    pub max_invoke_copy: u64,
    /// `qcom,rpc-latency-us` of the device tree (CONTROL LATENCY with enable 1 and 0 here: -1).
    pub rpc_latency_us: u32,
    /// The simulated crossing cost.
    pub cost: CostModel,
    /// Upstream driver: how long a kernel-originated message (INIT_*, MMAP, MEM_MAP, ...) waits
    /// for the DSP before `ETIMEDOUT` (the driver's 10 s).
    pub kernel_call_timeout: Duration,
    /// Upstream driver: the CDSP channel is secure (no `qcom,non-secure-domain` in the device
    /// tree), so INIT_CREATE from the non-secure node needs `FASTRPC_MODE_UNSIGNED_MODULE`.
    pub upstream_secure_channel: bool,
    /// Executor mode (issues 8, 11): longest wait for the DSP shell (qemu-hexagon) to start, to
    /// load or close a library (constructors included) or to answer one invoke; past it the
    /// process is killed and the DSP restarts.
    pub executor_timeout: Duration,
    /// Most entries kept in each per-launch log (HAP ledger, latency samples) between clears;
    /// later ones are only counted ([`Bench::log_overflow`](crate::Bench::log_overflow)), HAP
    /// mismatches among them still in
    /// [`Bench::ledger_mismatches`](crate::Bench::ledger_mismatches). Unbounded by default (a
    /// test reads its whole log); a long run bounds it so its memory does not grow per launch.
    pub log_capacity: usize,
}

impl BenchConfig {
    /// The default configuration on `board` (a bench board: [`hexrpc_bsp::BENCH`] or
    /// [`hexrpc_bsp::BENCH_UPSTREAM`]).
    pub fn for_board(board: &'static Board) -> BenchConfig {
        BenchConfig { board, ..BenchConfig::default() }
    }
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            board: &hexrpc_bsp::BENCH,
            extra_heaps: Vec::new(),
            ram_bytes: 4 << 30,
            ion_capacity: 1 << 30,
            sessions_per_channel: 8,
            smmu: true,
            mmap_writes_vaddrout: false,
            fdlist: FdlistPolicy::None,
            reverse_timeout: Duration::from_millis(1500),
            loader_chunk: 16 * 1024,
            max_library_len: 16 << 20,
            max_invoke_copy: 256 << 20,
            rpc_latency_us: 100,
            cost: CostModel::default(),
            executor_timeout: Duration::from_secs(10),
            kernel_call_timeout: Duration::from_secs(hexrpc_drivers::upstream::KERNEL_CALL_TIMEOUT_S as u64),
            upstream_secure_channel: true,
            log_capacity: usize::MAX,
        }
    }
}

/// What the simulated DSP writes into the fdlist of a successful call (the driver then drops one
/// reference of the handle map of each listed fd: downstream `put_args`, upstream
/// `fastrpc_put_args`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FdlistPolicy {
    /// Nothing: every handle map made by a call stays until MUNMAP_FD (downstream) or the
    /// channel's close. The default.
    #[default]
    None,
    /// Every handle fd of the call, one entry per handle argument (at most 16): each call's
    /// handle references are given back at once (the bench's behaviour before the stricter
    /// model; a permissive DSP).
    EveryHandle,
}

/// A simulated cost per crossing of the seam (every ioctl). Figures derived from it are
/// **simulated**, never measured, and every report says so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostModel {
    /// Fixed cost of one ioctl.
    pub per_crossing: Duration,
    /// Extra cost per KiB copied between user and kernel.
    pub per_kib_copied: Duration,
    /// Also sleep for the simulated cost (so deadlines see it); otherwise it is only recorded.
    pub sleep: bool,
}

impl CostModel {
    /// The simulated cost of one crossing that copied `bytes`.
    pub fn cost(&self, bytes: u64) -> Duration {
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        self.per_crossing.saturating_add(self.per_kib_copied.saturating_mul(kib))
    }
}
