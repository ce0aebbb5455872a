//! What an entry is generated from, and what is refused: the [`EntryOptions`] (ABI version,
//! power request, map cache), the kernel table's [`KernelSpec`]s, the kernel-name rule
//! ([`check_kernel_name`]) and [`EntryError`].

use core::fmt;

use crate::launch::abi::{AbiVersion, ENTRY_SYMBOL, MAX_BATCH_KERNELS};
use crate::launch::signature::Signature;

/// tinygrad's power request (`HAP_power_set` with a `dcvs_v2` request), as an option.
///
/// The request structure is declared by the generated code itself, laid out as the SDK's
/// `HAP_power_request_t` is understood here (a 4-byte request type, then the `dcvs_v2` payload:
/// `dcvs_enable` (1 byte), `dcvs_option` (4), `set_latency` (1), `latency` (4),
/// `set_dcvs_params` (1), `dcvs_params` {target, min, max corner, param1..3} (6 x 4),
/// `set_sleep_disable` (1), `sleep_disable` (1)), padded with zeros to 128 bytes. That layout
/// could not be checked against the SDK header here, so the option is off by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PowerRequest {
    /// Request type (`HAP_power_set_DCVS_v2` = 7).
    pub request_type: u32,
    /// `dcvs_enable`.
    pub dcvs_enable: u8,
    /// `set_latency`.
    pub set_latency: u8,
    /// `latency` in microseconds.
    pub latency: u32,
    /// `set_dcvs_params`.
    pub set_dcvs_params: u8,
    /// `dcvs_params.target_corner` (6 = TURBO).
    pub target_corner: u32,
}

impl PowerRequest {
    /// tinygrad's values: type 7, DCVS off, latency 100 us, target corner 6 (TURBO).
    pub const TINYGRAD: PowerRequest =
        PowerRequest { request_type: 7, dcvs_enable: 0, set_latency: 1, latency: 100, set_dcvs_params: 1, target_corner: 6 };
}

/// How to generate an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EntryOptions {
    /// The ABI version (v2 by default).
    pub version: AbiVersion,
    /// Make this power request on every call, before the method check (tinygrad does).
    pub power_request: Option<PowerRequest>,
    /// Keep lease mappings across calls (v2 only): a per-library table of
    /// [`MAP_CACHE_SLOTS`](crate::launch::MAP_CACHE_SLOTS) mappings keyed by (lease id, fd, lease
    /// length), and the release method ([`RELEASE_METHOD`](crate::launch::RELEASE_METHOD)). The
    /// build record must then carry [`FLAG_MAP_CACHE`](crate::launch::record::FLAG_MAP_CACHE), so
    /// the host sends ids and releases.
    pub map_cache: bool,
    /// Answer the power method ([`POWER_METHOD`](crate::launch::POWER_METHOD)): the session's
    /// DSP clock vote ([`PowerVote`](crate::launch::PowerVote)), sent once after each open of
    /// the library. The build record must then carry
    /// [`FLAG_POWER`](crate::launch::record::FLAG_POWER).
    pub power_method: bool,
}

impl EntryOptions {
    /// v2, no power request, no map cache.
    pub const V2: EntryOptions = EntryOptions { version: AbiVersion::V2, power_request: None, map_cache: false, power_method: false };
    /// v2 with the map cache and the power method (what `hexrpc build-lib` generates for v2).
    pub const V2_CACHED: EntryOptions = EntryOptions { version: AbiVersion::V2, power_request: None, map_cache: true, power_method: true };
    /// v1, no power request.
    pub const V1: EntryOptions = EntryOptions { version: AbiVersion::V1, power_request: None, map_cache: false, power_method: false };
    /// What tinygrad generates: v1 with its power request.
    pub const TINYGRAD: EntryOptions =
        EntryOptions { version: AbiVersion::V1, power_request: Some(PowerRequest::TINYGRAD), map_cache: false, power_method: false };
}

impl Default for EntryOptions {
    fn default() -> Self {
        EntryOptions::V2
    }
}

/// Why an entry could not be generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum EntryError {
    /// The kernel name is not a usable C identifier (empty, bad characters, a keyword, longer
    /// than 128 bytes, `entry`, or one of the reserved prefixes `hrx_`, `HAP_`, `__`).
    KernelName,
    /// A batch library needs at least one kernel and at most [`MAX_BATCH_KERNELS`].
    KernelCount,
    /// Two kernels of a batch library have the same name.
    DuplicateKernel,
    /// Batches exist for v2 entries only.
    BatchNeedsV2,
    /// The map cache exists for v2 entries only (v1 carries no lease id).
    MapCacheNeedsV2,
    /// The sink refused the text.
    Format,
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::KernelName => f.write_str("the kernel name is not a usable C identifier"),
            EntryError::KernelCount => write!(f, "a library carries 1 to {MAX_BATCH_KERNELS} kernels"),
            EntryError::DuplicateKernel => f.write_str("two kernels have the same name"),
            EntryError::BatchNeedsV2 => f.write_str("batched launches need the v2 entry"),
            EntryError::MapCacheNeedsV2 => f.write_str("the map cache needs the v2 entry"),
            EntryError::Format => f.write_str("the output sink failed"),
        }
    }
}

impl core::error::Error for EntryError {}

impl From<fmt::Error> for EntryError {
    fn from(_: fmt::Error) -> Self {
        EntryError::Format
    }
}

const C_KEYWORDS: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "remote_arg",
];

/// Checks that `name` can be the kernel's C function name (see [`EntryError::KernelName`]).
pub fn check_kernel_name(name: &str) -> Result<(), EntryError> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && name != ENTRY_SYMBOL
        && !name.starts_with("hrx_")
        && !name.starts_with("HAP_")
        && !name.starts_with("__")
        && !C_KEYWORDS.contains(&name);
    if ok {
        Ok(())
    } else {
        Err(EntryError::KernelName)
    }
}

/// One kernel of a library's kernel table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSpec<'n> {
    /// The kernel's C function name.
    pub name: &'n str,
    /// Its signature.
    pub signature: Signature,
    /// True if the kernel returns `int` (0 = success; anything else stops a batch and is
    /// reported with the record); false for `void` kernels (tinygrad's).
    pub returns_status: bool,
}
