//! Board facts for hexrpc: which device nodes, which ION heap and flags, where the DSP shell
//! is, which directories the reverse file service may serve, and the limits the stack enforces.
//!
//! Boards are data, not code paths: the HAL and runtime take a [`Board`] and behave the same on
//! every board. Three boards are known:
//!
//! * [`COMMA_THREE`]: comma three on AGNOS (sdm845, Linux 4.9 downstream: `/dev/ion`,
//!   `/dev/adsprpc-smd`, CDSP channel 3, ION system heap 25 with `ION_FLAG_CACHED`, shell
//!   `/dsp/cdsp/fastrpc_shell_3`);
//! * [`GENERIC_MSM_ANDROID`]: an Android device on a downstream msm kernel with the same ABI
//!   (shell under `/vendor/dsp/cdsp/`);
//! * [`BENCH`]: the isolated bench (simulated kernel and DSP, crate `hexrpc-bench`), with its own
//!   node names so that a bench board can never open a real device.
//!
//! Device access is an authority: opening device nodes takes a [`DeviceAccess`] token, which
//! only this crate (for the bench) or the binary (for a real device, through
//! [`DeviceAccess::for_device`]) can mint.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use hexrpc_drivers::{adsprpc, ion};

/// Which kernel driver family a board uses. Only the downstream msm ABI is implemented; the
/// upstream one (`/dev/fastrpc-*`, dma-heap buffers) is named here so that a board can say it
/// needs it and the stack can refuse it clearly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KernelAbi {
    /// msm ION 4.9 + downstream adsprpc (`/dev/adsprpc-smd`).
    DownstreamMsm,
    /// Upstream fastrpc (`/dev/fastrpc-cdsp`) + dma-heap. Not implemented yet.
    Upstream,
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
}

impl RecoveryPolicy {
    /// The default: up to 12 attempts, 5 ms doubling to 500 ms between them, 5 s in all; the
    /// listener gets 250 ms to leave.
    pub const DEFAULT: RecoveryPolicy =
        RecoveryPolicy { attempts: 12, first_delay_ms: 5, max_delay_ms: 500, budget_ms: 5_000, listener_leave_ms: 250 };

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
    /// The driver family.
    pub abi: KernelAbi,
    /// The ION device node.
    pub ion_path: &'static core::ffi::CStr,
    /// The FastRPC device node.
    pub rpc_path: &'static core::ffi::CStr,
    /// The FastRPC channel (domain) id of the compute DSP.
    pub channel: u32,
    /// ION heap id to allocate from.
    pub heap_id: u32,
    /// ION allocation flags.
    pub heap_flags: u32,
    /// ION allocation alignment (tinygrad uses 0x200).
    pub alloc_align: u64,
    /// Path of the DSP user-process shell ELF.
    pub shell_path: &'static core::ffi::CStr,
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
};

/// comma three (sdm845) on AGNOS.
pub const COMMA_THREE: Board = Board {
    name: "comma-three",
    description: "comma three (Snapdragon 845) on AGNOS, downstream msm 4.9 kernel",
    abi: KernelAbi::DownstreamMsm,
    ion_path: c"/dev/ion",
    rpc_path: c"/dev/adsprpc-smd",
    channel: adsprpc::CDSP_DOMAIN_ID,
    heap_id: ion::ION_SYSTEM_HEAP_ID,
    heap_flags: ion::ION_FLAG_CACHED,
    alloc_align: 0x200,
    shell_path: c"/dsp/cdsp/fastrpc_shell_3",
    dsp_dirs: &["/dsp/cdsp", "/dsp"],
    dt_models: &["comma tici", "comma tizi", "comma mici", "Qualcomm Technologies, Inc. SDM845"],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DEFAULT,
};

/// A generic Android device on a downstream msm kernel (adsprpc + ION 4.9).
pub const GENERIC_MSM_ANDROID: Board = Board {
    name: "msm-android",
    description: "Android on a downstream msm kernel with /dev/adsprpc-smd and legacy ION",
    abi: KernelAbi::DownstreamMsm,
    ion_path: c"/dev/ion",
    rpc_path: c"/dev/adsprpc-smd",
    channel: adsprpc::CDSP_DOMAIN_ID,
    heap_id: ion::ION_SYSTEM_HEAP_ID,
    heap_flags: ion::ION_FLAG_CACHED,
    alloc_align: 0x200,
    shell_path: c"/vendor/dsp/cdsp/fastrpc_shell_3",
    dsp_dirs: &["/vendor/dsp/cdsp", "/vendor/dsp", "/vendor/lib/rfsa/adsp"],
    dt_models: &[],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DEFAULT,
};

/// The isolated bench (crate `hexrpc-bench`): simulated nodes that no real device has.
pub const BENCH: Board = Board {
    name: "bench",
    description: "isolated bench: simulated msm ION 4.9 + adsprpc kernel and DSP (no hardware)",
    abi: KernelAbi::DownstreamMsm,
    ion_path: c"/bench/dev/ion",
    rpc_path: c"/bench/dev/adsprpc-smd",
    channel: adsprpc::CDSP_DOMAIN_ID,
    heap_id: ion::ION_SYSTEM_HEAP_ID,
    heap_flags: ion::ION_FLAG_CACHED,
    alloc_align: 0x200,
    shell_path: c"/bench/dsp/cdsp/fastrpc_shell_3",
    dsp_dirs: &["/bench/dsp/cdsp"],
    dt_models: &[],
    limits: DEFAULT_LIMITS,
    recovery: RecoveryPolicy::DEFAULT,
};

/// Every known board.
pub const BOARDS: &[Board] = &[COMMA_THREE, GENERIC_MSM_ANDROID, BENCH];

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
            assert_ne!(b.heap_mask(), 0, "{}", b.name);
            assert!(b.limits.max_shell_len < adsprpc::INIT_FILELEN_MAX);
            assert!(!b.dsp_dirs.is_empty());
            for d in b.dsp_dirs {
                assert!(d.starts_with('/') && !d.contains(".."), "{d}");
            }
        }
        assert_eq!(COMMA_THREE.heap_mask(), 0x0200_0000);
        assert_eq!(COMMA_THREE.channel, 3);
    }

    #[test]
    fn detection() {
        assert_eq!(detect("comma tici\0").map(|b| b.name), Some("comma-three"));
        assert_eq!(detect("Some Other Board"), None);
        assert_eq!(DeviceAccess::for_bench().board().name, "bench");
    }
}
