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
    /// (upstream: open fails with `EBUSY`). Default 8, from a reading of the comma three's
    /// sources (commaai `agnos-kernel-sdm845`; not measured on a device): the sdm845 device tree
    /// (`sdm845.dtsi`, node `qcom,msm_fastrpc`) declares 10 `cdsprpc-smd` context banks, cb1..cb10,
    /// of which cb9 and cb10 are `qcom,secure-context-bank`; `fastrpc_cb_probe` (adsprpc.c)
    /// refuses a bank once `NUM_SESSIONS` (9) have probed, in device-tree order, so cb10 never
    /// probes and the CDSP has 9 sessions: 8 non-secure and 1 secure. GETINFO
    /// (`fastrpc_get_info` → `fastrpc_session_alloc_locked`) takes non-secure ones only, so 8
    /// files can hold one; the secure session is only taken for a secure ION buffer's map.
    pub sessions_per_channel: u32,
    /// Whether sessions have an SMMU (the GETINFO answer).
    pub smmu: bool,
    /// Downstream: the window in which a GETINFO's session allocation can race another's. The
    /// comma three's `fastrpc_get_info` calls `fastrpc_session_alloc_locked` without taking
    /// `smd_mutex` or any other lock (only the secure path, `fastrpc_session_alloc`, locks), so
    /// two GETINFOs at once on two files can both find one context bank unused and both take it
    /// (one SMMU page table for two processes; the first close marks it free while the other
    /// still uses it). The bench cannot pick banks by the driver's interleaving: it holds every
    /// GETINFO for this long before its allocation and counts, in
    /// [`CallCounts::getinfo_overlaps`](crate::CallCounts::getinfo_overlaps), each one that
    /// began while another was held: a pair that *may* share a bank. Zero (the default): no
    /// window, nothing counted.
    pub getinfo_window: Duration,
    /// Downstream: how long the glink port stays DISCONNECTING after the channel's last
    /// reference is put (`fastrpc_channel_close` → `fastrpc_glink_close`, which sets
    /// DISCONNECTING and returns; only glink's `GLINK_LOCAL_DISCONNECTED`, in
    /// `fastrpc_glink_notify_state`, sets DISCONNECTED). An INIT in that window cannot open the
    /// channel (`fastrpc_glink_open` wants DISCONNECTED), still waits
    /// [`port_connect_timeout`](Self::port_connect_timeout) holding `smd_mutex`, and is -1.
    /// The real delay is the DSP's acknowledgement, not known; default zero (no window).
    pub close_ack_delay: Duration,
    /// Downstream: how long `fastrpc_channel_open` waits for the glink port's `GLINK_CONNECTED`
    /// (`RPC_TIMEOUT`, 5 * HZ: 5 s on the comma three). The driver always waits, even after
    /// `fastrpc_glink_open` failed, so a failed channel open costs this long
    /// ([`ChannelReopen`](crate::ChannelReopen)).
    pub port_connect_timeout: Duration,
    /// Downstream: the IOVA space of one FastRPC file's SMMU context bank, in bytes. The comma
    /// three's `fastrpc_cb_probe` gives every CDSP bank 0x78000000 bytes from 0x80000000
    /// (`arm_iommu_create_mapping`), which each map of a dma-buf (a handle's, a buffer
    /// argument's, an fd MMAP's: the whole buffer, `dma_buf_map_attachment`), the init memory
    /// and ADD_PAGES buffers take (page-rounded) until freed. Past it a new map fails: a
    /// handle's fails the call (-1; handles mapped earlier in it keep their references), a
    /// buffer argument's is copied instead (`get_args` ignores the failure), an fd MMAP is -1,
    /// ADD_PAGES and INIT are `ENOMEM`. The driver's copy buffers (`fastrpc_buf_alloc` for
    /// buffer arguments without an fd, cached per file) take from it too; the bench does not
    /// count them. Fragmentation is not modelled (the sum is compared).
    pub session_iova: u64,
    /// Downstream: bytes of the region MMAP with `ADSP_MMAP_HEAP_ADDR` /
    /// `ADSP_MMAP_REMOTE_HEAP_ADDR` allocates from (`dma_alloc_attrs` on the
    /// `qcom,msm-adsprpc-mem` device, whose memory region is sdm845's `adsp_mem` CMA pool of
    /// 16 MiB; the bench does not model other CMA users). An allocation beyond it fails (-1).
    pub heap_region_bytes: u64,
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
    /// Executor mode: the bench's per-call limit, the longest wait for the DSP shell
    /// (qemu-hexagon) to start, to load or close a library (constructors included) or to answer
    /// one invoke; past it the process is killed and the DSP restarts
    /// ([`RestartReason::CallLimit`](crate::RestartReason::CallLimit)). Default 10 s;
    /// [`BenchConfig::from_env`] / [`BenchConfig::with_env`] take it from
    /// `HEXRPC_BENCH_CALL_LIMIT_MS` ([`CALL_LIMIT_ENV`]). qemu-hexagon runs kernels far slower
    /// than a cDSP, so a large model's kernels may need more.
    pub executor_timeout: Duration,
    /// Most entries kept in each per-launch log (HAP ledger, latency samples) between clears;
    /// later ones are only counted ([`Bench::log_overflow`](crate::Bench::log_overflow)), HAP
    /// mismatches among them still in
    /// [`Bench::ledger_mismatches`](crate::Bench::ledger_mismatches). Unbounded by default (a
    /// test reads its whole log); a long run bounds it so its memory does not grow per launch.
    pub log_capacity: usize,
}

/// The environment variable that sets [`BenchConfig::executor_timeout`], the bench's per-call
/// limit, in milliseconds (read by [`BenchConfig::from_env`] and [`BenchConfig::with_env`]).
pub const CALL_LIMIT_ENV: &str = "HEXRPC_BENCH_CALL_LIMIT_MS";

/// Largest per-call limit [`CALL_LIMIT_ENV`] may set: one day, in milliseconds.
pub const MAX_CALL_LIMIT_MS: u64 = 24 * 60 * 60 * 1000;

/// A bench setting in the environment that cannot be used. The text names the variable, the
/// value and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BenchEnvError {
    /// [`CALL_LIMIT_ENV`] is set to something that is not a whole number of milliseconds from
    /// 1 to [`MAX_CALL_LIMIT_MS`].
    CallLimit {
        /// The value as set (lossily decoded if it is not UTF-8).
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl core::fmt::Display for BenchEnvError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BenchEnvError::CallLimit { value, problem } => write!(
                f,
                "{CALL_LIMIT_ENV}={value:?} cannot be used: {problem}; set it to the bench's per-call limit in \
                 milliseconds, a whole number from 1 to {MAX_CALL_LIMIT_MS} (or unset it for the default 10000)"
            ),
        }
    }
}

impl std::error::Error for BenchEnvError {}

/// Parses a value of [`CALL_LIMIT_ENV`]: a whole number of milliseconds from 1 to
/// [`MAX_CALL_LIMIT_MS`], surrounding whitespace allowed; anything else is refused.
pub fn parse_call_limit(value: &str) -> Result<Duration, BenchEnvError> {
    let refuse = |problem| BenchEnvError::CallLimit { value: value.to_string(), problem };
    let digits = value.trim();
    if digits.is_empty() {
        return Err(refuse("it is empty"));
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse("it is not a whole number of milliseconds (digits only, no unit, sign or fraction)"));
    }
    let ms: u64 = digits.parse().map_err(|_| refuse("it is too large"))?;
    match ms {
        0 => Err(refuse("0 would fail every call")),
        ms if ms > MAX_CALL_LIMIT_MS => Err(refuse("it is larger than one day")),
        ms => Ok(Duration::from_millis(ms)),
    }
}

impl BenchConfig {
    /// The default configuration on `board` (a bench board: [`hexrpc_bsp::BENCH`] or
    /// [`hexrpc_bsp::BENCH_UPSTREAM`]).
    pub fn for_board(board: &'static Board) -> BenchConfig {
        BenchConfig { board, ..BenchConfig::default() }
    }

    /// The default configuration with the settings of the environment applied
    /// ([`with_env`](Self::with_env)). [`Default`] never reads the environment (a test's
    /// configuration stays what it says); tools and bindings that make a bench for a user call
    /// this instead.
    pub fn from_env() -> Result<BenchConfig, BenchEnvError> {
        BenchConfig::default().with_env()
    }

    /// This configuration with the settings of the environment applied: [`CALL_LIMIT_ENV`]
    /// (`HEXRPC_BENCH_CALL_LIMIT_MS`) sets [`executor_timeout`](Self::executor_timeout). An
    /// unset variable changes nothing; a value that cannot be used is an error, never ignored.
    pub fn with_env(self) -> Result<BenchConfig, BenchEnvError> {
        self.with_call_limit_var(std::env::var_os(CALL_LIMIT_ENV).as_deref())
    }

    /// [`with_env`](Self::with_env) for a given value of [`CALL_LIMIT_ENV`] (`None`: unset).
    pub fn with_call_limit_var(mut self, value: Option<&std::ffi::OsStr>) -> Result<BenchConfig, BenchEnvError> {
        let Some(value) = value else { return Ok(self) };
        let Some(text) = value.to_str() else {
            return Err(BenchEnvError::CallLimit { value: value.to_string_lossy().into_owned(), problem: "it is not UTF-8" });
        };
        self.executor_timeout = parse_call_limit(text)?;
        Ok(self)
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
            port_connect_timeout: Duration::from_secs(5),
            getinfo_window: Duration::ZERO,
            close_ack_delay: Duration::ZERO,
            session_iova: 0x7800_0000,
            heap_region_bytes: 16 << 20,
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
    /// DSP-side cost of one `HAP_mmap` an entry makes (added to the call's simulated DSP time;
    /// what the map cache saves). Simulated.
    pub per_dsp_map: Duration,
    /// DSP-side cost of one `HAP_munmap` that unmapped something. Simulated.
    pub per_dsp_unmap: Duration,
    /// Also sleep for the simulated cost (so deadlines see it); otherwise it is only recorded.
    pub sleep: bool,
}

impl CostModel {
    /// The simulated cost of one crossing that copied `bytes`.
    pub fn cost(&self, bytes: u64) -> Duration {
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        self.per_crossing.saturating_add(self.per_kib_copied.saturating_mul(kib))
    }

    /// The simulated DSP cost of `maps` `HAP_mmap`s and `unmaps` `HAP_munmap`s in one call.
    pub fn map_cost(&self, maps: u32, unmaps: u32) -> Duration {
        self.per_dsp_map.saturating_mul(maps).saturating_add(self.per_dsp_unmap.saturating_mul(unmaps))
    }

    /// The cost of the HAP events of one call (maps and matched unmaps in `events`).
    pub fn map_cost_of<'e>(&self, events: impl IntoIterator<Item = &'e crate::LedgerEvent>) -> Duration {
        let (mut maps, mut unmaps) = (0u32, 0u32);
        for e in events {
            match e {
                crate::LedgerEvent::Map { .. } => maps += 1,
                crate::LedgerEvent::Unmap { matched: true, .. } => unmaps += 1,
                _ => {}
            }
        }
        self.map_cost(maps, unmaps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn call_limits_are_whole_milliseconds_in_range() {
        assert_eq!(parse_call_limit("1"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_call_limit("250"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_call_limit(" 60000\n"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_call_limit("86400000"), Ok(Duration::from_secs(86_400)));
        for (bad, why) in [
            ("", "it is empty"),
            ("  ", "it is empty"),
            ("0", "0 would fail every call"),
            ("000", "0 would fail every call"),
            ("-5", "digits only"),
            ("+5", "digits only"),
            ("1.5", "digits only"),
            ("10s", "digits only"),
            ("1e3", "digits only"),
            ("ten", "digits only"),
            ("86400001", "larger than one day"),
            ("99999999999999999999999", "too large"),
        ] {
            let e = parse_call_limit(bad).expect_err(bad);
            let text = e.to_string();
            assert!(text.contains(why), "{bad:?}: {text}");
            assert!(text.starts_with("HEXRPC_BENCH_CALL_LIMIT_MS="), "{text}");
        }
    }

    #[test]
    fn the_variable_sets_the_field_and_unset_keeps_it() {
        let c = BenchConfig::default().with_call_limit_var(Some(OsStr::new("1500"))).unwrap();
        assert_eq!(c.executor_timeout, Duration::from_millis(1500));
        let c = BenchConfig { executor_timeout: Duration::from_millis(7), ..BenchConfig::default() }.with_call_limit_var(None).unwrap();
        assert_eq!(c.executor_timeout, Duration::from_millis(7));
        assert_eq!(BenchConfig::default().executor_timeout, Duration::from_secs(10));
        let e = BenchConfig::default().with_call_limit_var(Some(OsStr::new("soon"))).unwrap_err();
        let problem = "it is not a whole number of milliseconds (digits only, no unit, sign or fraction)";
        assert_eq!(e, BenchEnvError::CallLimit { value: "soon".into(), problem });
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let e = BenchConfig::default().with_call_limit_var(Some(OsStr::from_bytes(b"1\xff"))).unwrap_err();
            assert!(e.to_string().contains("not UTF-8"), "{e}");
        }
    }
}
