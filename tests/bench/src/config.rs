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
    /// SMMU sessions (context banks) per FastRPC channel; GETINFO fails with -1 when all are taken.
    pub sessions_per_channel: u32,
    /// Whether sessions have an SMMU (the GETINFO answer).
    pub smmu: bool,
    /// Whether MMAP writes `vaddrout` back. The indexed AGNOS driver does not, a newer CAF one does
    /// (kernel-abi.md 2.9, an open discrepancy); default `true`, what tinygrad relies on.
    pub mmap_writes_vaddrout: bool,
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
            sessions_per_channel: 9,
            smmu: true,
            mmap_writes_vaddrout: true,
            reverse_timeout: Duration::from_millis(1500),
            loader_chunk: 16 * 1024,
            max_library_len: 16 << 20,
            max_invoke_copy: 256 << 20,
            rpc_latency_us: 100,
            cost: CostModel::default(),
            executor_timeout: Duration::from_secs(10),
            kernel_call_timeout: Duration::from_secs(hexrpc_drivers::upstream::KERNEL_CALL_TIMEOUT_S as u64),
            upstream_secure_channel: true,
        }
    }
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
