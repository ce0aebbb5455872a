//! The DSP-side entry generator: writes the C `entry` function a launch library exports, for one
//! kernel signature and ABI version, into any [`core::fmt::Write`] sink, without allocating.
//!
//! Every number in the generated text (scalars word, pra lengths, field offsets, strides, the
//! magic, `HAP_mmap` arguments, error codes) comes from the version's [`LaunchLayout`], the same
//! table the packer writes with.
//!
//! # What the generated C is written against
//!
//! * The 32-bit `remote_arg` view the DSP framework presents to library entries:
//!   `union { struct { void *pv; unsigned len; } buf; struct { int fd; unsigned offset; } dma; }`.
//!   The text is the same for every compiler; a `_Static_assert` fails the build if a 32-bit
//!   target lays it out in anything but 8 bytes. On a 64-bit host the same text compiles to a
//!   16-byte union: the host test harness builds its argument array with that native type and
//!   points `pv` at host copies of the bytes, so the generated code reads the same fields
//!   (see `runtime/c/launch_harness.c`). Nothing in the generated code depends on the size of
//!   `remote_arg`: it only indexes `pra[k]` and names fields.
//! * Its own declarations of the Hexagon SDK functions it calls (no SDK headers exist here):
//!   `void *HAP_mmap(void *, unsigned int len, int prot, int flags, int fd, long offset)`,
//!   `int HAP_munmap(void *, unsigned int len)`, `unsigned long long HAP_perf_get_time_us(void)`
//!   and, with the power request, `int HAP_power_set(void *, void *)`. `unsigned int` lengths
//!   travel in the same register as the SDK's `int` on Hexagon. A mapping counts as failed if
//!   `HAP_mmap` returns NULL or `(void *)-1`.
//! * Loads from pra 0/pra 1 are byte-wise little-endian (`hrx_ld_u32`), so no alignment of the
//!   incoming buffers is assumed; every field is read once into a local, validated, then used
//!   (the DSP framework copies in-buffers, but the entry does not rely on it).
//! * No library calls beyond the HAP functions: no `memset`/`memcpy` are needed (the power
//!   request is zeroed through a volatile pointer), which the build step's test checks on the
//!   linked library.
//!
//! # Behaviour
//!
//! Both versions first (optionally) make tinygrad's power request, then answer 0 without doing
//! anything if `(sc >> 24) != 2`, as tinygrad does: the method index *and* the three attribute
//! bits must be exactly 2 (method 2, no attributes).
//!
//! **v2** then validates everything before mapping anything: the scalars word's counts (2 in,
//! 1 out, N out-handles, so `pra[3 + i]` exists), the lengths of pra 0 and pra 1, the magic and
//! N, and for every buffer `off <= lease && len <= lease - off` (no overflow). Any failure returns
//! `AEE_EBADPARM` (14) and touches nothing. It maps each lease whole
//! (`HAP_mmap(0, lease, 3, 0, fd, 0)`); if a map fails it unmaps the ones already made in reverse
//! order and returns `AEE_EMMAP`. The kernel gets `base + off`; the timer is written only if
//! pra 2 holds 8 bytes; finally every lease is unmapped with its base and length, in reverse
//! order.
//!
//! **Batches** ([`write_batch_entry`], v2 only): a library generated for a kernel table answers
//! method 2 exactly as the v2 entry of kernel 0 does, and method 3 with a batch (the [`BATCH`]
//! layout): it checks the scalars word (2 in, 1 out, no in-handles, L out-handles), the lengths
//! of pra 0, pra 1 and the 24-byte status, the header (magic, L equal to the handle count,
//! 1 <= K <= [`MAX_BATCH_LAUNCHES`](super::MAX_BATCH_LAUNCHES) (256),
//! R <= [`MAX_BATCH_RECORD_BYTES`](super::MAX_BATCH_RECORD_BYTES) (65536) and inside pra 0),
//! every lease entry (length non-zero, reserved word 0) and every record (kernel index in the table, view and scalar counts equal to that
//! kernel's, each view's lease index < L and `off <= lease && len <= lease - off`, the K records
//! filling exactly R bytes) — all before the first `HAP_mmap`, answering `AEE_EBADPARM` and
//! touching nothing otherwise. It maps each lease once (unwinding on failure, `AEE_EMMAP`),
//! re-checks each record right before running it, calls the kernels in order (timing each),
//! stops at the first kernel declared to return `int` that returns non-zero, unmaps every lease
//! in reverse order, writes the status (magic, records done, failed record or `0xffffffff`, its
//! code, summed microseconds) and returns 0, so the status reaches the host (the driver copies
//! out-buffers only on 0). Per-call state is a few fixed arrays of
//! [`MAX_BATCH_LEASES`](super::MAX_BATCH_LEASES) (15) entries on the stack, sized by the lease
//! capacity alone: the records are read where the framework put them (pra 0), never copied, so
//! neither the record count, the record bytes nor the table's size reaches the DSP stack (a
//! larger table only adds `case`s to the two `switch`es). The one other array is the release
//! method's [`MAX_RELEASE_IDS`] ids.
//!
//! **v1** is tinygrad's entry: no validation, maps the view length at file offset 0, hands the
//! kernel `base + off`, writes the timer unconditionally, unmaps `(base + off, len)`. It is
//! correct only for offset 0, which is why the packer refuses anything else for v1.
//!
//! **The map cache** ([`EntryOptions::map_cache`], v2 and batches): the same checks, then each
//! lease goes through `hrx_acquire` (a kept mapping with the same lease id, fd and lease length,
//! or a new `HAP_mmap` kept in a free or least recently used unused entry of a static table of
//! [`MAP_CACHE_SLOTS`]) and `hrx_put` (a kept mapping stays mapped); id 0 maps and unmaps per
//! call as without the cache. The table is guarded by a spin lock of `__atomic` builtins (no C
//! library call). Method [`RELEASE_METHOD`] unmaps the mappings of the ids it names (all for
//! none); one in use is unmapped by its last user. See `docs/entry-abi.md` §2.3 for the host's
//! side and for what is not verified on a device: that a `HAP_mmap` of a handle's fd outlives
//! the call while the kernel keeps its map of the fd (downstream until MUNMAP_FD, which the host
//! sends only after the release; upstream until the DSP lists the fd, which it should not while
//! it holds a mapping of it).

use core::fmt::{self, Write};

use super::abi::{
    AbiVersion, BatchLayout, LaunchLayout, MapExtent, BATCH, ENTRY_SYMBOL, MAP_CACHE_SLOTS, MAX_BATCH_KERNELS, MAX_RELEASE_IDS,
    RELEASE_METHOD,
};
use super::signature::{ParamKind, ScalarType, Signature};

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
    /// [`MAP_CACHE_SLOTS`] mappings keyed by (lease id, fd, lease length), and the release method
    /// ([`RELEASE_METHOD`]). The build record must then carry
    /// [`FLAG_MAP_CACHE`](super::record::FLAG_MAP_CACHE), so the host sends ids and releases.
    pub map_cache: bool,
}

impl EntryOptions {
    /// v2, no power request, no map cache.
    pub const V2: EntryOptions = EntryOptions { version: AbiVersion::V2, power_request: None, map_cache: false };
    /// v2 with the map cache (what `hexrpc build-lib` generates for v2).
    pub const V2_CACHED: EntryOptions = EntryOptions { version: AbiVersion::V2, power_request: None, map_cache: true };
    /// v1, no power request.
    pub const V1: EntryOptions = EntryOptions { version: AbiVersion::V1, power_request: None, map_cache: false };
    /// What tinygrad generates: v1 with its power request.
    pub const TINYGRAD: EntryOptions =
        EntryOptions { version: AbiVersion::V1, power_request: Some(PowerRequest::TINYGRAD), map_cache: false };
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

/// Writes the complete C translation unit of the entry for kernel `kernel` with signature `sig`.
/// The kernel is declared as `void kernel(void *, ..., <scalar C types>)`; define it in a
/// separate translation unit (its buffer parameters may be any data pointer type).
pub fn write_entry<W: Write + ?Sized>(out: &mut W, sig: &Signature, kernel: &str, opts: &EntryOptions) -> Result<(), EntryError> {
    check_kernel_name(kernel)?;
    if opts.map_cache && opts.version != AbiVersion::V2 {
        return Err(EntryError::MapCacheNeedsV2);
    }
    let l = opts.version.layout();
    let k = [KernelSpec { name: kernel, signature: *sig, returns_status: false }];
    write_prelude(out, l, &k, false, opts)?;
    write_body(out, l, &k[0], false, opts)?;
    Ok(())
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

/// Writes the entry of a library whose kernel table is `kernels` (index = position): method 2
/// is the v2 single launch of kernel 0, exactly as [`write_entry`] writes it; method 3 runs a
/// batch ([`BATCH`]: validate every record, map each lease once, run the records in order,
/// stop at the first failing kernel, unmap every lease, write the status).
pub fn write_batch_entry<W: Write + ?Sized>(out: &mut W, kernels: &[KernelSpec<'_>], opts: &EntryOptions) -> Result<(), EntryError> {
    if opts.version != AbiVersion::V2 {
        return Err(EntryError::BatchNeedsV2);
    }
    if kernels.is_empty() || kernels.len() > MAX_BATCH_KERNELS {
        return Err(EntryError::KernelCount);
    }
    for (i, k) in kernels.iter().enumerate() {
        check_kernel_name(k.name)?;
        if kernels[..i].iter().any(|o| o.name == k.name) {
            return Err(EntryError::DuplicateKernel);
        }
    }
    let l = opts.version.layout();
    write_prelude(out, l, kernels, true, opts)?;
    write_batch(out, &BATCH, kernels, opts.map_cache)?;
    write_body(out, l, &kernels[0], true, opts)?;
    Ok(())
}

fn version_name(v: AbiVersion) -> &'static str {
    match v {
        AbiVersion::V1 => "v1",
        AbiVersion::V2 => "v2",
    }
}

fn write_prelude<W: Write + ?Sized>(
    out: &mut W,
    l: &LaunchLayout,
    kernels: &[KernelSpec<'_>],
    batch: bool,
    opts: &EntryOptions,
) -> fmt::Result {
    let (sig, kernel) = (&kernels[0].signature, kernels[0].name);
    let n = sig.buffers();
    let s = sig.scalars();
    writeln!(out, "/* hexrpc launch entry, ABI {}, kernel `{kernel}`, signature \"{sig}\".", version_name(l.version))?;
    writeln!(out, " * Generated by hexrpc-runtime from its launch ABI table; do not edit.")?;
    writeln!(
        out,
        " * sc = {:#010x}: method {}, {} in, {} out, {n} handles.",
        l.scalars(n).map_or(0, |sc| sc.raw()),
        l.method,
        l.in_bufs,
        l.out_bufs
    )?;
    write!(out, " * pra[{}]: {} bytes:", l.pra_slots, l.pra0_len(n, s))?;
    if let Some(magic) = l.magic {
        write!(out, " magic {magic:#010x} @{}, N @{};", l.magic_offset(), l.count_offset())?;
    }
    writeln!(
        out,
        " buffer i length @{} + {}*i; scalar j @{} + {}*j.",
        l.buffer_len_offset(0),
        l.slot_size,
        l.scalar_offset(n, 0),
        l.slot_size
    )?;
    write!(out, " * pra[{}]: {} bytes: view offset @{} + {}*i", l.pra_views, l.pra1_len(n), l.view_offset_offset(0), l.view_record_size)?;
    if let Some(at) = l.lease_len_offset(0) {
        write!(out, ", lease length @{at} + {}*i", l.view_record_size)?;
    }
    writeln!(out, ".")?;
    writeln!(
        out,
        " * pra[{}]: {} bytes out: DSP microseconds. pra[{} + i]: dma handle of buffer i.{}",
        l.pra_timer,
        l.timer_len,
        l.first_handle,
        if batch { "" } else { " */" }
    )?;
    if batch {
        let b = &BATCH;
        writeln!(out, " * Method {} is a batch over the kernel table:", b.method)?;
        for (i, k) in kernels.iter().enumerate() {
            writeln!(out, " *   kernel {i}: `{}` \"{}\"{}", k.name, k.signature, if k.returns_status { ", returns int" } else { "" })?;
        }
        writeln!(
            out,
            " * pra[{}]: header {} bytes (magic {:#010x} @{}, K @{}, L @{}, R @{}), then R record bytes: kernel @{}, V (u16) @{}, S (u16) @{}, V x {} bytes (lease @{}, off @{}, len @{}), S x {}-byte scalars.",
            b.pra_records, b.header_len, b.magic, b.magic_at, b.count_at, b.leases_at, b.bytes_at, b.kernel_at, b.views_at, b.scalars_at,
            b.view_size, b.view_lease_at, b.view_offset_at, b.view_len_at, b.slot_size
        )?;
        writeln!(
            out,
            " * pra[{}]: L x {} bytes (lease length @{}, 0 @{}). pra[{}]: {}-byte status out. pra[{} + l]: dma handle of lease l.",
            b.pra_leases, b.lease_entry_size, b.lease_len_at, b.lease_reserved_at, b.pra_status, b.status_len, b.first_handle
        )?;
        writeln!(out, " * At most {} records, {} leases, {} record bytes. */", b.max_launches, b.max_leases, b.max_record_bytes)?;
    }
    writeln!(out)?;
    out.write_str(concat!(
        "typedef union {\n",
        "  struct { void *pv; unsigned int len; } buf;\n",
        "  struct { int fd; unsigned int offset; } dma;\n",
        "} remote_arg;\n",
        "_Static_assert(sizeof(void *) != 4 || sizeof(remote_arg) == 8, \"remote_arg must be the 8-byte 32-bit view\");\n",
        "\n",
        "void *HAP_mmap(void *addr, unsigned int len, int prot, int flags, int fd, long offset);\n",
        "int HAP_munmap(void *addr, unsigned int len);\n",
        "unsigned long long HAP_perf_get_time_us(void);\n",
    ))?;
    if opts.power_request.is_some() {
        out.write_str(concat!(
            "int HAP_power_set(void *context, void *request);\n",
            "typedef struct {\n",
            "  int type;\n",
            "  union {\n",
            "    struct {\n",
            "      unsigned char dcvs_enable;\n",
            "      int dcvs_option;\n",
            "      unsigned char set_latency;\n",
            "      unsigned int latency;\n",
            "      unsigned char set_dcvs_params;\n",
            "      struct { int target_corner, min_corner, max_corner; unsigned int param1, param2, param3; } dcvs_params;\n",
            "      unsigned char set_sleep_disable;\n",
            "      unsigned char sleep_disable;\n",
            "    } dcvs_v2;\n",
            "    unsigned char reserved[124];\n",
            "  } u;\n",
            "} hrx_power_request;\n",
        ))?;
    }
    for k in kernels {
        write!(out, "{} {}(", if k.returns_status { "int" } else { "void" }, k.name)?;
        if k.signature.params().is_empty() {
            out.write_str("void")?;
        }
        for (i, p) in k.signature.params().iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            match p {
                ParamKind::Buffer => write!(out, "{sep}void *")?,
                ParamKind::Scalar(t) => write!(out, "{sep}{}", t.c_type())?,
            }
        }
        writeln!(out, ");")?;
    }
    writeln!(out, "int {ENTRY_SYMBOL}(unsigned long long handle, unsigned int sc, remote_arg *pra);")?;
    write_helpers(out, l, kernels, batch, opts.map_cache)?;
    if opts.map_cache {
        write_map_cache(out, l)?;
    }
    Ok(())
}

/// The map cache: a fixed table of lease mappings kept across calls, keyed by (lease id, fd,
/// lease length), under a spin lock made of `__atomic` builtins (no C library call; several DSP
/// threads may call the entry at once), and the release method.
fn write_map_cache<W: Write + ?Sized>(out: &mut W, l: &LaunchLayout) -> fmt::Result {
    let (prot, flags) = (l.map_prot, l.map_flags);
    let cap = MAP_CACHE_SLOTS;
    writeln!(out, "/* The map cache: up to {cap} lease mappings kept across calls, keyed by (lease id, fd, lease length).")?;
    writeln!(out, " * Id 0 is never cached. An entry in use by a call is never unmapped under it: a release or an")?;
    writeln!(out, " * eviction of a busy entry marks it dead and the last user unmaps it. */")?;
    writeln!(out, "typedef struct {{")?;
    writeln!(out, "  unsigned int id, len, users, tick, dead;")?;
    writeln!(out, "  int fd;")?;
    writeln!(out, "  void *base;")?;
    writeln!(out, "}} hrx_cached;")?;
    writeln!(out, "static hrx_cached hrx_cache[{cap}];")?;
    writeln!(out, "static int hrx_cache_lock;")?;
    writeln!(out, "static unsigned int hrx_cache_tick;")?;
    writeln!(out, "static void hrx_lock(void) {{")?;
    writeln!(out, "  while (__atomic_exchange_n(&hrx_cache_lock, 1, __ATOMIC_ACQUIRE) != 0)")?;
    writeln!(out, "    while (__atomic_load_n(&hrx_cache_lock, __ATOMIC_RELAXED) != 0) {{ }}")?;
    writeln!(out, "}}")?;
    writeln!(out, "static void hrx_unlock(void) {{ __atomic_store_n(&hrx_cache_lock, 0, __ATOMIC_RELEASE); }}")?;
    writeln!(out, "/* Unmaps and frees entry c (the lock is held, nobody uses it). */")?;
    writeln!(out, "static void hrx_drop(hrx_cached *c) {{")?;
    writeln!(out, "  HAP_munmap(c->base, c->len);")?;
    writeln!(out, "  c->base = (void *)0;")?;
    writeln!(out, "  c->id = 0u;")?;
    writeln!(out, "  c->dead = 0u;")?;
    writeln!(out, "}}")?;
    writeln!(out, "/* The mapping of lease (id, fd, len): a cached one, or a new one (cached if an entry is free or")?;
    writeln!(out, " * unused). *hrx_slot: the entry held (give it back with hrx_put), or -1 for a mapping of this")?;
    writeln!(out, " * call alone. NULL or (void *)-1 if HAP_mmap failed. */")?;
    writeln!(out, "__attribute__((unused)) static void *hrx_acquire(unsigned int id, int fd, unsigned int len, int *hrx_slot) {{")?;
    writeln!(out, "  *hrx_slot = -1;")?;
    writeln!(out, "  if (id == 0u) return HAP_mmap((void *)0, len, {prot}, {flags}, fd, 0);")?;
    writeln!(out, "  hrx_lock();")?;
    writeln!(out, "  int hrx_free = -1;")?;
    writeln!(out, "  for (int i = 0; i < {cap}; i++) {{")?;
    writeln!(out, "    hrx_cached *c = &hrx_cache[i];")?;
    writeln!(out, "    if (c->base != (void *)0 && c->id == id && c->dead == 0u) {{")?;
    writeln!(out, "      if (c->fd == fd && c->len == len) {{")?;
    writeln!(out, "        c->users++;")?;
    writeln!(out, "        c->tick = ++hrx_cache_tick;")?;
    writeln!(out, "        *hrx_slot = i;")?;
    writeln!(out, "        void *const hrx_b = c->base;")?;
    writeln!(out, "        hrx_unlock();")?;
    writeln!(out, "        return hrx_b;")?;
    writeln!(out, "      }}")?;
    writeln!(out, "      /* The same id with another fd or length: that mapping is never right again. */")?;
    writeln!(out, "      if (c->users == 0u) hrx_drop(c); else c->dead = 1u;")?;
    writeln!(out, "    }}")?;
    writeln!(out, "    if (c->base == (void *)0 && hrx_free < 0) hrx_free = i;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  if (hrx_free < 0) {{ /* full: evict the least recently used entry nobody uses */")?;
    writeln!(out, "    for (int i = 0; i < {cap}; i++)")?;
    writeln!(out, "      if (hrx_cache[i].users == 0u && (hrx_free < 0 || hrx_cache[i].tick < hrx_cache[hrx_free].tick)) hrx_free = i;")?;
    writeln!(out, "    if (hrx_free >= 0) hrx_drop(&hrx_cache[hrx_free]);")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  void *hrx_b = HAP_mmap((void *)0, len, {prot}, {flags}, fd, 0);")?;
    writeln!(out, "  if (hrx_map_failed(hrx_b)) {{ /* out of DSP address space or mappings: give back every unused entry, once */")?;
    writeln!(out, "    int hrx_gave = 0;")?;
    writeln!(out, "    for (int i = 0; i < {cap}; i++)")?;
    writeln!(out, "      if (hrx_cache[i].base != (void *)0 && hrx_cache[i].users == 0u) {{ hrx_drop(&hrx_cache[i]); hrx_gave = 1; }}")?;
    writeln!(out, "    if (hrx_gave) hrx_b = HAP_mmap((void *)0, len, {prot}, {flags}, fd, 0);")?;
    writeln!(out, "    if (hrx_free < 0) for (int i = 0; i < {cap}; i++) if (hrx_cache[i].base == (void *)0) {{ hrx_free = i; break; }}")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  if (hrx_free >= 0 && !hrx_map_failed(hrx_b)) {{")?;
    writeln!(out, "    hrx_cached *c = &hrx_cache[hrx_free];")?;
    writeln!(out, "    c->id = id;")?;
    writeln!(out, "    c->fd = fd;")?;
    writeln!(out, "    c->len = len;")?;
    writeln!(out, "    c->base = hrx_b;")?;
    writeln!(out, "    c->users = 1u;")?;
    writeln!(out, "    c->dead = 0u;")?;
    writeln!(out, "    c->tick = ++hrx_cache_tick;")?;
    writeln!(out, "    *hrx_slot = hrx_free;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  hrx_unlock();")?;
    writeln!(out, "  return hrx_b;")?;
    writeln!(out, "}}")?;
    writeln!(out, "/* Gives back what hrx_acquire returned: unmaps a per-call mapping; a cached one stays mapped")?;
    writeln!(out, " * unless it was released while in use and this was its last user. */")?;
    writeln!(out, "__attribute__((unused)) static void hrx_put(int hrx_slot, void *base, unsigned int len) {{")?;
    writeln!(out, "  if (hrx_slot < 0 || hrx_slot >= {cap}) {{")?;
    writeln!(out, "    HAP_munmap(base, len);")?;
    writeln!(out, "    return;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  hrx_lock();")?;
    writeln!(out, "  hrx_cached *c = &hrx_cache[hrx_slot];")?;
    writeln!(out, "  if (c->users > 0u) c->users--;")?;
    writeln!(out, "  if (c->users == 0u && c->dead != 0u) hrx_drop(c);")?;
    writeln!(out, "  hrx_unlock();")?;
    writeln!(out, "}}")?;
    let max = MAX_RELEASE_IDS;
    writeln!(out, "/* Method {RELEASE_METHOD}, release: pra[0] = u32 count C, then C u32 lease ids (C = 0: every entry). */")?;
    writeln!(out, "static int hrx_release(unsigned int sc, remote_arg *pra) {{")?;
    writeln!(out, "  if ((sc & 0xffffffu) != 0x10000u) return {};", l.err_bad_param)?;
    writeln!(out, "  const unsigned int hrx_n = pra[0].buf.len;")?;
    writeln!(out, "  if (hrx_n < 4u) return {};", l.err_bad_param)?;
    writeln!(out, "  const unsigned char *const hrx_a = (const unsigned char *)pra[0].buf.pv;")?;
    writeln!(out, "  const unsigned int hrx_count = hrx_ld_u32(hrx_a);")?;
    writeln!(out, "  if (hrx_count > {max}u || (hrx_n - 4u) / 4u < hrx_count) return {};", l.err_bad_param)?;
    writeln!(out, "  unsigned int hrx_ids[{max}];")?;
    writeln!(out, "  for (unsigned int k = 0; k < hrx_count; k++) hrx_ids[k] = hrx_ld_u32(hrx_a + 4u + 4u * k);")?;
    writeln!(out, "  hrx_lock();")?;
    writeln!(out, "  for (int i = 0; i < {cap}; i++) {{")?;
    writeln!(out, "    hrx_cached *c = &hrx_cache[i];")?;
    writeln!(out, "    if (c->base == (void *)0) continue;")?;
    writeln!(out, "    int hrx_hit = hrx_count == 0u;")?;
    writeln!(out, "    for (unsigned int k = 0; k < hrx_count && !hrx_hit; k++) hrx_hit = hrx_ids[k] == c->id;")?;
    writeln!(out, "    if (!hrx_hit) continue;")?;
    writeln!(out, "    if (c->users == 0u) hrx_drop(c); else c->dead = 1u;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  hrx_unlock();")?;
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")?;
    writeln!(out)
}

/// Writes the load/store helpers the body uses, and only those (clang warns about unused
/// `static inline` functions under `-Wall`).
fn write_helpers<W: Write + ?Sized>(out: &mut W, l: &LaunchLayout, kernels: &[KernelSpec<'_>], batch: bool, cache: bool) -> fmt::Result {
    let n = kernels[0].signature.buffers();
    // The single path uses kernel 0's types; the batch path every kernel's.
    let used = if batch { kernels } else { &kernels[..1] };
    let uses = |ts: &[ScalarType]| used.iter().any(|k| k.signature.scalar_types().any(|t| ts.contains(&t)));
    let u64_ = uses(&[ScalarType::I64, ScalarType::U64, ScalarType::F64]);
    let u32_ =
        batch || cache || n > 0 || (l.validates && l.magic.is_some()) || u64_ || uses(&[ScalarType::I32, ScalarType::U32, ScalarType::F32]);
    writeln!(out)?;
    if u32_ {
        out.write_str(concat!(
            "static inline unsigned int hrx_ld_u32(const unsigned char *p) {\n",
            "  return (unsigned int)p[0] | ((unsigned int)p[1] << 8) | ((unsigned int)p[2] << 16) | ((unsigned int)p[3] << 24);\n",
            "}\n",
        ))?;
    }
    if batch || uses(&[ScalarType::I16, ScalarType::U16, ScalarType::F16]) {
        out.write_str(
            "static inline unsigned short hrx_ld_u16(const unsigned char *p) { return (unsigned short)(p[0] | (p[1] << 8)); }\n",
        )?;
    }
    if u64_ {
        out.write_str(concat!(
            "static inline unsigned long long hrx_ld_u64(const unsigned char *p) {\n",
            "  return (unsigned long long)hrx_ld_u32(p) | ((unsigned long long)hrx_ld_u32(p + 4) << 32);\n",
            "}\n",
        ))?;
    }
    if uses(&[ScalarType::F32]) {
        out.write_str(
            "static inline float hrx_f32(unsigned int bits) { union { unsigned int u; float f; } c; c.u = bits; return c.f; }\n",
        )?;
    }
    if uses(&[ScalarType::F64]) {
        out.write_str(
            "static inline double hrx_f64(unsigned long long bits) { union { unsigned long long u; double f; } c; c.u = bits; return c.f; }\n",
        )?;
    }
    out.write_str(concat!(
        "static inline void hrx_st_u64(unsigned char *p, unsigned long long v) {\n",
        "  for (unsigned int i = 0; i < 8u; i++) p[i] = (unsigned char)(v >> (8u * i));\n",
        "}\n",
    ))?;
    if batch {
        out.write_str(concat!(
            "static inline void hrx_st_u32(unsigned char *p, unsigned int v) {\n",
            "  for (unsigned int i = 0; i < 4u; i++) p[i] = (unsigned char)(v >> (8u * i));\n",
            "}\n",
        ))?;
    }
    if batch || cache || (l.unwinds && n > 0) {
        out.write_str("static inline int hrx_map_failed(const void *p) { return p == (const void *)0 || p == (const void *)-1; }\n")?;
    }
    writeln!(out)
}

fn scalar_load<W: Write + ?Sized>(out: &mut W, t: ScalarType, base: &str, at: usize) -> fmt::Result {
    match t {
        ScalarType::I8 => write!(out, "(signed char){base}[{at}]"),
        ScalarType::U8 => write!(out, "{base}[{at}]"),
        ScalarType::I16 => write!(out, "(short)hrx_ld_u16({base} + {at})"),
        ScalarType::U16 | ScalarType::F16 => write!(out, "hrx_ld_u16({base} + {at})"),
        ScalarType::I32 => write!(out, "(int)hrx_ld_u32({base} + {at})"),
        ScalarType::U32 => write!(out, "hrx_ld_u32({base} + {at})"),
        ScalarType::I64 => write!(out, "(long long)hrx_ld_u64({base} + {at})"),
        ScalarType::U64 => write!(out, "hrx_ld_u64({base} + {at})"),
        ScalarType::F32 => write!(out, "hrx_f32(hrx_ld_u32({base} + {at}))"),
        ScalarType::F64 => write!(out, "hrx_f64(hrx_ld_u64({base} + {at}))"),
    }
}

/// The batch part: the record parser/validator, the kernel dispatcher and `hrx_batch`.
fn write_batch<W: Write + ?Sized>(out: &mut W, b: &BatchLayout, kernels: &[KernelSpec<'_>], cache: bool) -> fmt::Result {
    let bad = b.err_bad_param;
    let (rh, vs, ss) = (b.record_header_len, b.view_size, b.slot_size);
    writeln!(out, "/* Parses and validates the record at hrx_at (< hrx_end); with hrx_base set, also computes the kernel")?;
    writeln!(out, " * pointers. Every field is read once. 0 if valid. */")?;
    writeln!(
        out,
        "static int hrx_record(const unsigned char *hrx_a0, unsigned int hrx_at, unsigned int hrx_end, const unsigned int *hrx_lease,"
    )?;
    writeln!(out, "                      unsigned int hrx_nl, void *const *hrx_base, unsigned int *hrx_kernel, void **hrx_ptr,")?;
    writeln!(out, "                      const unsigned char **hrx_scal, unsigned int *hrx_next) {{")?;
    writeln!(out, "  if (hrx_at > hrx_end || hrx_end - hrx_at < {rh}u) return 1;")?;
    writeln!(out, "  const unsigned int hrx_k = hrx_ld_u32(hrx_a0 + hrx_at + {});", b.kernel_at)?;
    writeln!(out, "  const unsigned int hrx_nv = hrx_ld_u16(hrx_a0 + hrx_at + {});", b.views_at)?;
    writeln!(out, "  const unsigned int hrx_ns = hrx_ld_u16(hrx_a0 + hrx_at + {});", b.scalars_at)?;
    writeln!(out, "  unsigned int hrx_wv, hrx_ws;")?;
    writeln!(out, "  switch (hrx_k) {{")?;
    for (i, k) in kernels.iter().enumerate() {
        writeln!(out, "  case {i}u: hrx_wv = {}u; hrx_ws = {}u; break;", k.signature.buffers(), k.signature.scalars())?;
    }
    writeln!(out, "  default: return 1;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  if (hrx_nv != hrx_wv || hrx_ns != hrx_ws) return 1;")?;
    writeln!(out, "  const unsigned int hrx_len = {rh}u + {vs}u * hrx_nv + {ss}u * hrx_ns;")?;
    writeln!(out, "  if (hrx_end - hrx_at < hrx_len) return 1;")?;
    writeln!(out, "  for (unsigned int hrx_v = 0; hrx_v < hrx_nv; hrx_v++) {{")?;
    writeln!(out, "    const unsigned char *const hrx_e = hrx_a0 + hrx_at + {rh}u + {vs}u * hrx_v;")?;
    writeln!(out, "    const unsigned int hrx_l = hrx_ld_u32(hrx_e + {});", b.view_lease_at)?;
    writeln!(out, "    const unsigned int hrx_off = hrx_ld_u32(hrx_e + {});", b.view_offset_at)?;
    writeln!(out, "    const unsigned int hrx_n = hrx_ld_u32(hrx_e + {});", b.view_len_at)?;
    writeln!(out, "    if (hrx_l >= hrx_nl || hrx_off > hrx_lease[hrx_l] || hrx_n > hrx_lease[hrx_l] - hrx_off) return 1;")?;
    writeln!(out, "    if (hrx_base) hrx_ptr[hrx_v] = (unsigned char *)hrx_base[hrx_l] + hrx_off;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  *hrx_kernel = hrx_k;")?;
    writeln!(out, "  *hrx_scal = hrx_a0 + hrx_at + {rh}u + {vs}u * hrx_nv;")?;
    writeln!(out, "  *hrx_next = hrx_at + hrx_len;")?;
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")?;
    writeln!(out)?;
    writeln!(out, "/* Calls kernel hrx_k with its (validated) pointers and scalars; its status, 0 for void kernels. */")?;
    writeln!(out, "static int hrx_call(unsigned int hrx_k, void *const *hrx_p, const unsigned char *hrx_s) {{")?;
    writeln!(out, "  switch (hrx_k) {{")?;
    for (i, k) in kernels.iter().enumerate() {
        write!(out, "  case {i}u: ")?;
        if k.returns_status {
            out.write_str("return ")?;
        }
        write!(out, "{}(", k.name)?;
        let n = k.signature.buffers();
        for v in 0..n {
            write!(out, "{}hrx_p[{v}]", if v > 0 { ", " } else { "" })?;
        }
        for (j, t) in k.signature.scalar_types().enumerate() {
            out.write_str(if n + j > 0 { ", " } else { "" })?;
            scalar_load(out, t, "hrx_s", j * ss)?;
        }
        out.write_str(");")?;
        if !k.returns_status {
            out.write_str(" return 0;")?;
        }
        writeln!(out)?;
    }
    writeln!(out, "  default: return {bad};")?;
    writeln!(out, "  }}")?;
    writeln!(out, "}}")?;
    writeln!(out)?;
    let sc_bits = b.scalars(0).map_or(0, |sc| sc.raw()) & 0x00ff_fff0;
    let hl = b.header_len;
    writeln!(out, "static int hrx_batch(unsigned int sc, remote_arg *pra) {{")?;
    writeln!(out, "  const unsigned int hrx_nl = sc & 0xfu;")?;
    writeln!(out, "  if ((sc & 0xfffff0u) != {sc_bits:#x}u) return {bad};")?;
    writeln!(
        out,
        "  if (pra[{}].buf.len < {hl}u || pra[{}].buf.len < {}u || pra[{}].buf.len < {}u * hrx_nl) return {bad};",
        b.pra_records, b.pra_status, b.status_len, b.pra_leases, b.lease_entry_size
    )?;
    writeln!(out, "  const unsigned char *const hrx_a0 = (const unsigned char *)pra[{}].buf.pv;", b.pra_records)?;
    writeln!(out, "  const unsigned char *const hrx_a1 = (const unsigned char *)pra[{}].buf.pv;", b.pra_leases)?;
    writeln!(out, "  const unsigned int hrx_nk = hrx_ld_u32(hrx_a0 + {});", b.count_at)?;
    writeln!(out, "  const unsigned int hrx_bytes = hrx_ld_u32(hrx_a0 + {});", b.bytes_at)?;
    writeln!(
        out,
        "  if (hrx_ld_u32(hrx_a0 + {}) != {:#010x}u || hrx_ld_u32(hrx_a0 + {}) != hrx_nl) return {bad};",
        b.magic_at, b.magic, b.leases_at
    )?;
    writeln!(
        out,
        "  if (hrx_nk == 0u || hrx_nk > {}u || hrx_bytes > {}u || hrx_bytes > pra[{}].buf.len - {hl}u) return {bad};",
        b.max_launches, b.max_record_bytes, b.pra_records
    )?;
    let ml = b.max_leases;
    writeln!(out, "  const unsigned int hrx_end = {hl}u + hrx_bytes;")?;
    writeln!(out, "  unsigned int hrx_lease[{ml}];")?;
    writeln!(out, "  int hrx_fd[{ml}];")?;
    if cache {
        writeln!(out, "  unsigned int hrx_id[{ml}];")?;
        writeln!(out, "  int hrx_slot[{ml}];")?;
    }
    writeln!(out, "  void *hrx_base[{ml}];")?;
    writeln!(out, "  void *hrx_ptr[{ml}];")?;
    writeln!(out, "  const unsigned char *hrx_s = hrx_a0;")?;
    writeln!(out, "  unsigned int hrx_k = 0, hrx_at = {hl}u;")?;
    writeln!(out, "  for (unsigned int hrx_l = 0; hrx_l < hrx_nl; hrx_l++) {{")?;
    writeln!(out, "    hrx_lease[hrx_l] = hrx_ld_u32(hrx_a1 + {}u * hrx_l + {});", b.lease_entry_size, b.lease_len_at)?;
    if cache {
        writeln!(
            out,
            "    hrx_id[hrx_l] = hrx_ld_u32(hrx_a1 + {}u * hrx_l + {}); /* the lease id (0: not cached) */",
            b.lease_entry_size, b.lease_id_at
        )?;
        writeln!(out, "    if (hrx_lease[hrx_l] == 0u) return {bad};")?;
    } else {
        writeln!(
            out,
            "    if (hrx_lease[hrx_l] == 0u || hrx_ld_u32(hrx_a1 + {}u * hrx_l + {}) != 0u) return {bad};",
            b.lease_entry_size, b.lease_reserved_at
        )?;
    }
    writeln!(out, "    hrx_fd[hrx_l] = pra[{} + hrx_l].dma.fd;", b.first_handle)?;
    writeln!(out, "  }}")?;
    writeln!(out, "  /* Validate every record before mapping anything. */")?;
    writeln!(out, "  for (unsigned int hrx_r = 0; hrx_r < hrx_nk; hrx_r++)")?;
    writeln!(
        out,
        "    if (hrx_record(hrx_a0, hrx_at, hrx_end, hrx_lease, hrx_nl, (void *const *)0, &hrx_k, hrx_ptr, &hrx_s, &hrx_at) != 0) return {bad};"
    )?;
    writeln!(out, "  if (hrx_at != hrx_end) return {bad};")?;
    writeln!(out, "  /* Map each lease once for the whole call. */")?;
    writeln!(out, "  for (unsigned int hrx_l = 0; hrx_l < hrx_nl; hrx_l++) {{")?;
    if cache {
        writeln!(out, "    hrx_base[hrx_l] = hrx_acquire(hrx_id[hrx_l], hrx_fd[hrx_l], hrx_lease[hrx_l], &hrx_slot[hrx_l]);")?;
    } else {
        writeln!(out, "    hrx_base[hrx_l] = HAP_mmap((void *)0, hrx_lease[hrx_l], {}, {}, hrx_fd[hrx_l], 0);", b.map_prot, b.map_flags)?;
    }
    writeln!(out, "    if (hrx_map_failed(hrx_base[hrx_l])) {{")?;
    if cache {
        writeln!(out, "      while (hrx_l-- > 0u) hrx_put(hrx_slot[hrx_l], hrx_base[hrx_l], hrx_lease[hrx_l]);")?;
    } else {
        writeln!(out, "      while (hrx_l-- > 0u) HAP_munmap(hrx_base[hrx_l], hrx_lease[hrx_l]);")?;
    }
    writeln!(out, "      return {};", b.err_map)?;
    writeln!(out, "    }}")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  /* Run the records in order; stop at the first kernel that fails. */")?;
    writeln!(out, "  unsigned int hrx_done = 0, hrx_failed = 0xffffffffu;")?;
    writeln!(out, "  int hrx_code = 0, hrx_rc = 0;")?;
    writeln!(out, "  unsigned long long hrx_us = 0;")?;
    writeln!(out, "  hrx_at = {hl}u;")?;
    writeln!(out, "  for (unsigned int hrx_r = 0; hrx_r < hrx_nk; hrx_r++) {{")?;
    writeln!(
        out,
        "    if (hrx_record(hrx_a0, hrx_at, hrx_end, hrx_lease, hrx_nl, hrx_base, &hrx_k, hrx_ptr, &hrx_s, &hrx_at) != 0) {{ hrx_rc = {bad}; break; }}"
    )?;
    writeln!(out, "    const unsigned long long hrx_t0 = HAP_perf_get_time_us();")?;
    writeln!(out, "    hrx_code = hrx_call(hrx_k, hrx_ptr, hrx_s);")?;
    writeln!(out, "    hrx_us += HAP_perf_get_time_us() - hrx_t0;")?;
    writeln!(out, "    if (hrx_code != 0) {{ hrx_failed = hrx_r; break; }}")?;
    writeln!(out, "    hrx_done++;")?;
    writeln!(out, "  }}")?;
    if cache {
        writeln!(out, "  for (unsigned int hrx_l = hrx_nl; hrx_l-- > 0u;) hrx_put(hrx_slot[hrx_l], hrx_base[hrx_l], hrx_lease[hrx_l]);")?;
    } else {
        writeln!(out, "  for (unsigned int hrx_l = hrx_nl; hrx_l-- > 0u;) HAP_munmap(hrx_base[hrx_l], hrx_lease[hrx_l]);")?;
    }
    writeln!(out, "  if (hrx_rc != 0) return hrx_rc;")?;
    writeln!(out, "  unsigned char *const hrx_st = (unsigned char *)pra[{}].buf.pv;", b.pra_status)?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, {:#010x}u);", b.status_magic_at, b.magic)?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, hrx_done);", b.status_done_at)?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, hrx_failed);", b.status_failed_at)?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, (unsigned int)hrx_code);", b.status_code_at)?;
    writeln!(out, "  hrx_st_u64(hrx_st + {}, hrx_us);", b.status_micros_at)?;
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")?;
    writeln!(out)
}

fn write_power<W: Write + ?Sized>(out: &mut W, p: &PowerRequest) -> fmt::Result {
    writeln!(out, "  {{ /* power request (tinygrad's dcvs_v2) */")?;
    writeln!(out, "    hrx_power_request hrx_req;")?;
    writeln!(out, "    volatile unsigned char *hrx_z = (volatile unsigned char *)&hrx_req;")?;
    writeln!(out, "    for (unsigned int hrx_i = 0; hrx_i < sizeof hrx_req; hrx_i++) hrx_z[hrx_i] = 0;")?;
    writeln!(out, "    hrx_req.type = {};", p.request_type)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.dcvs_enable = {};", p.dcvs_enable)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.set_latency = {};", p.set_latency)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.latency = {}u;", p.latency)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.set_dcvs_params = {};", p.set_dcvs_params)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.dcvs_params.target_corner = {};", p.target_corner)?;
    writeln!(out, "    (void)HAP_power_set((void *)(__UINTPTR_TYPE__)handle, &hrx_req);")?;
    writeln!(out, "  }}")
}

fn write_body<W: Write + ?Sized>(out: &mut W, l: &LaunchLayout, k: &KernelSpec<'_>, batch: bool, opts: &EntryOptions) -> fmt::Result {
    let (sig, kernel) = (&k.signature, k.name);
    let n = sig.buffers();
    let s = sig.scalars();
    let handle_bits = l.scalars(n).map_or(0, |sc| sc.raw()) & 0x00ff_ffff;
    let bad = l.err_bad_param;
    writeln!(out, "int {ENTRY_SYMBOL}(unsigned long long handle, unsigned int sc, remote_arg *pra) {{")?;
    writeln!(out, "  (void)handle;")?;
    if let Some(p) = &opts.power_request {
        write_power(out, p)?;
    }
    if batch {
        writeln!(out, "  if ((sc >> 24) == {}u) return hrx_batch(sc, pra); /* a batch over the kernel table */", BATCH.method)?;
    }
    let cache = opts.map_cache && l.lease_id_at.is_some();
    if cache {
        writeln!(out, "  if ((sc >> 24) == {RELEASE_METHOD}u) return hrx_release(sc, pra); /* release cached lease mappings */")?;
    }
    writeln!(out, "  if ((sc >> 24) != {}u) return 0; /* method {} only, attribute bits included */", l.method, l.method)?;
    if l.validates {
        writeln!(out, "  if ((sc & 0xffffffu) != {handle_bits:#x}u) return {bad};")?;
        writeln!(out, "  if (pra[{}].buf.len < {}u) return {bad};", l.pra_slots, l.pra0_len(n, s))?;
        if l.pra1_len(n) > 0 {
            writeln!(out, "  if (pra[{}].buf.len < {}u) return {bad};", l.pra_views, l.pra1_len(n))?;
        }
    }
    if l.pra0_len(n, s) > 0 {
        writeln!(out, "  const unsigned char *const hrx_a0 = (const unsigned char *)pra[{}].buf.pv;", l.pra_slots)?;
    }
    if n > 0 {
        writeln!(out, "  const unsigned char *const hrx_a1 = (const unsigned char *)pra[{}].buf.pv;", l.pra_views)?;
    }
    if let (true, Some(magic)) = (l.validates, l.magic) {
        writeln!(
            out,
            "  if (hrx_ld_u32(hrx_a0 + {}) != {magic:#010x}u || hrx_ld_u32(hrx_a0 + {}) != {n}u) return {bad};",
            l.magic_offset(),
            l.count_offset()
        )?;
    }
    for i in 0..n {
        let len_ty = if l.buffer_len_signed { "int" } else { "unsigned int" };
        let cast = if l.buffer_len_signed { "(int)" } else { "" };
        writeln!(out, "  const {len_ty} hrx_len{i} = {cast}hrx_ld_u32(hrx_a0 + {});", l.buffer_len_offset(i))?;
        writeln!(out, "  const unsigned int hrx_off{i} = hrx_ld_u32(hrx_a1 + {});", l.view_offset_offset(i))?;
        if let Some(at) = l.lease_len_offset(i) {
            writeln!(out, "  const unsigned int hrx_lease{i} = hrx_ld_u32(hrx_a1 + {at});")?;
        }
        if let (true, Some(at)) = (cache, l.lease_id_offset(i)) {
            writeln!(out, "  const unsigned int hrx_id{i} = hrx_ld_u32(hrx_a0 + {at});")?;
        }
        writeln!(out, "  const int hrx_fd{i} = pra[{}].dma.fd;", l.first_handle + i)?;
        if l.validates && l.lease_len_at.is_some() {
            writeln!(out, "  if (hrx_off{i} > hrx_lease{i} || hrx_len{i} > hrx_lease{i} - hrx_off{i}) return {bad};")?;
        }
    }
    for (j, t) in sig.scalar_types().enumerate() {
        write!(out, "  const {} hrx_s{j} = ", t.c_type())?;
        scalar_load(out, t, "hrx_a0", l.scalar_offset(n, j))?;
        writeln!(out, ";")?;
    }
    // Map.
    let map_len = match l.map_extent {
        MapExtent::LeaseLength => "hrx_lease",
        MapExtent::ViewLength => "(unsigned int)hrx_len",
    };
    for i in 0..n {
        if cache {
            writeln!(out, "  int hrx_slot{i};")?;
            writeln!(out, "  void *const hrx_base{i} = hrx_acquire(hrx_id{i}, hrx_fd{i}, {map_len}{i}, &hrx_slot{i});")?;
        } else {
            writeln!(out, "  void *const hrx_base{i} = HAP_mmap((void *)0, {map_len}{i}, {}, {}, hrx_fd{i}, 0);", l.map_prot, l.map_flags)?;
        }
        if l.unwinds {
            write!(out, "  if (hrx_map_failed(hrx_base{i})) {{")?;
            for k in (0..i).rev() {
                if cache {
                    write!(out, " hrx_put(hrx_slot{k}, hrx_base{k}, {map_len}{k});")?;
                } else {
                    write!(out, " HAP_munmap(hrx_base{k}, {map_len}{k});")?;
                }
            }
            writeln!(out, " return {}; }}", l.err_map)?;
        }
        writeln!(out, "  void *const hrx_ptr{i} = (unsigned char *)hrx_base{i} + hrx_off{i};")?;
    }
    // Call.
    writeln!(out, "  const unsigned long long hrx_t0 = HAP_perf_get_time_us();")?;
    write!(out, "  {}{kernel}(", if k.returns_status { "(void)" } else { "" })?;
    for i in 0..n {
        write!(out, "{}hrx_ptr{i}", if i > 0 { ", " } else { "" })?;
    }
    for j in 0..s {
        write!(out, "{}hrx_s{j}", if n + j > 0 { ", " } else { "" })?;
    }
    writeln!(out, ");")?;
    writeln!(out, "  const unsigned long long hrx_t1 = HAP_perf_get_time_us();")?;
    if l.timer_len_checked {
        write!(out, "  if (pra[{}].buf.len >= {}u)", l.pra_timer, l.timer_len)?;
    }
    writeln!(
        out,
        "{}hrx_st_u64((unsigned char *)pra[{}].buf.pv, hrx_t1 - hrx_t0);",
        if l.timer_len_checked { " " } else { "  " },
        l.pra_timer
    )?;
    // Unmap.
    match l.map_extent {
        MapExtent::LeaseLength => {
            for i in (0..n).rev() {
                if cache {
                    writeln!(out, "  hrx_put(hrx_slot{i}, hrx_base{i}, hrx_lease{i});")?;
                } else {
                    writeln!(out, "  HAP_munmap(hrx_base{i}, hrx_lease{i});")?;
                }
            }
        }
        MapExtent::ViewLength => {
            // tinygrad's order and arguments: (base + off, view length) -- wrong for off > 0.
            for i in 0..n {
                writeln!(out, "  HAP_munmap(hrx_ptr{i}, (unsigned int)hrx_len{i});")?;
            }
        }
    }
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::String;

    use super::*;

    fn gen(sig: &str, opts: &EntryOptions) -> String {
        let mut s = String::new();
        write_entry(&mut s, &Signature::parse(sig).unwrap(), "kern", opts).unwrap();
        s
    }

    #[test]
    fn v2_text_carries_the_table() {
        let c = gen("buf,buf,i32,f32", &EntryOptions::V2);
        for needle in [
            "if ((sc & 0xffffffu) != 0x20102u) return 14;",
            "if (pra[0].buf.len < 40u) return 14;",
            "if (pra[1].buf.len < 16u) return 14;",
            "hrx_ld_u32(hrx_a0 + 0) != 0x32585248u || hrx_ld_u32(hrx_a0 + 4) != 2u",
            "hrx_len1 = hrx_ld_u32(hrx_a0 + 16);",
            "hrx_off1 = hrx_ld_u32(hrx_a1 + 8);",
            "hrx_lease1 = hrx_ld_u32(hrx_a1 + 12);",
            "hrx_fd1 = pra[4].dma.fd;",
            "const int hrx_s0 = (int)hrx_ld_u32(hrx_a0 + 24);",
            "const float hrx_s1 = hrx_f32(hrx_ld_u32(hrx_a0 + 32));",
            "HAP_mmap((void *)0, hrx_lease1, 3, 0, hrx_fd1, 0);",
            "if (hrx_map_failed(hrx_base1)) { HAP_munmap(hrx_base0, hrx_lease0); return 101; }",
            "kern(hrx_ptr0, hrx_ptr1, hrx_s0, hrx_s1);",
            "if (pra[2].buf.len >= 8u) hrx_st_u64((unsigned char *)pra[2].buf.pv, hrx_t1 - hrx_t0);",
            "HAP_munmap(hrx_base1, hrx_lease1);\n  HAP_munmap(hrx_base0, hrx_lease0);",
            "void kern(void *, void *, int, float);",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        assert!(!c.contains("HAP_power_set"));
    }

    #[test]
    fn v1_text_reproduces_tinygrads_entry() {
        let c = gen("buf,u16", &EntryOptions::TINYGRAD);
        for needle in [
            "const int hrx_len0 = (int)hrx_ld_u32(hrx_a0 + 0);",
            "hrx_off0 = hrx_ld_u32(hrx_a1 + 0);",
            "HAP_mmap((void *)0, (unsigned int)hrx_len0, 3, 0, hrx_fd0, 0);",
            "hrx_ptr0 = (unsigned char *)hrx_base0 + hrx_off0;",
            "HAP_munmap(hrx_ptr0, (unsigned int)hrx_len0);",
            "const unsigned short hrx_s0 = hrx_ld_u16(hrx_a0 + 8);",
            "hrx_req.type = 7;",
            "hrx_req.u.dcvs_v2.latency = 100u;",
            "hrx_req.u.dcvs_v2.dcvs_params.target_corner = 6;",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        assert!(!c.contains("return 14"), "v1 validates nothing");
        assert!(c.find("HAP_power_set").unwrap() < c.find("(sc >> 24)").unwrap(), "power request comes first");
    }

    #[test]
    fn batch_text_carries_the_table_and_refuses_bad_tables() {
        let k = |name| KernelSpec { name, signature: Signature::parse("buf,buf,u32").unwrap(), returns_status: false };
        let st = KernelSpec { name: "chk", signature: Signature::parse("buf,i32").unwrap(), returns_status: true };
        let mut c = String::new();
        write_batch_entry(&mut c, &[k("a"), st], &EntryOptions::V2).unwrap();
        for needle in [
            "if ((sc >> 24) == 3u) return hrx_batch(sc, pra);",
            "if ((sc & 0xfffff0u) != 0x20100u) return 14;",
            "if (pra[0].buf.len < 16u || pra[2].buf.len < 24u || pra[1].buf.len < 8u * hrx_nl) return 14;",
            "if (hrx_ld_u32(hrx_a0 + 0) != 0x42585248u || hrx_ld_u32(hrx_a0 + 8) != hrx_nl) return 14;",
            "if (hrx_nk == 0u || hrx_nk > 256u || hrx_bytes > 65536u || hrx_bytes > pra[0].buf.len - 16u) return 14;",
            " * At most 256 records, 15 leases, 65536 record bytes. */",
            "case 0u: hrx_wv = 2u; hrx_ws = 1u; break;",
            "case 1u: hrx_wv = 1u; hrx_ws = 1u; break;",
            "const unsigned int hrx_len = 8u + 12u * hrx_nv + 8u * hrx_ns;",
            "case 0u: a(hrx_p[0], hrx_p[1], hrx_ld_u32(hrx_s + 0)); return 0;",
            "case 1u: return chk(hrx_p[0], (int)hrx_ld_u32(hrx_s + 0));",
            "int chk(void *, int);",
            "void a(void *, void *, unsigned int);",
            "HAP_mmap((void *)0, hrx_lease[hrx_l], 3, 0, hrx_fd[hrx_l], 0);",
            "hrx_st_u32(hrx_st + 8, hrx_failed);",
            "hrx_st_u64(hrx_st + 16, hrx_us);",
            "a(hrx_ptr0, hrx_ptr1, hrx_s0);",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        let mut s = String::new();
        assert_eq!(write_batch_entry(&mut s, &[k("a")], &EntryOptions::V1), Err(EntryError::BatchNeedsV2));
        assert_eq!(write_batch_entry(&mut s, &[], &EntryOptions::V2), Err(EntryError::KernelCount));
        assert_eq!(write_batch_entry(&mut s, &std::vec![k("a"); MAX_BATCH_KERNELS + 1], &EntryOptions::V2), Err(EntryError::KernelCount));
        assert_eq!(write_batch_entry(&mut s, &[k("a"), k("b"), k("a")], &EntryOptions::V2), Err(EntryError::DuplicateKernel));
        assert_eq!(write_batch_entry(&mut s, &[k("a"), k("entry")], &EntryOptions::V2), Err(EntryError::KernelName));
        assert!(s.is_empty());
    }

    #[test]
    fn a_full_kernel_table_is_generated_and_sizes_nothing_on_the_stack_by_it() {
        use crate::launch::MAX_BATCH_LEASES;
        use std::format;
        use std::vec::Vec;
        let names: Vec<String> = (0..MAX_BATCH_KERNELS).map(|i| format!("k{i}")).collect();
        let sig = Signature::parse("buf,buf,u32").unwrap();
        let table: Vec<KernelSpec<'_>> = names.iter().map(|n| KernelSpec { name: n, signature: sig, returns_status: false }).collect();
        let mut c = String::new();
        write_batch_entry(&mut c, &table, &EntryOptions::V2_CACHED).unwrap();
        let last = MAX_BATCH_KERNELS - 1;
        for needle in [
            format!("case {last}u: hrx_wv = 2u; hrx_ws = 1u; break;"),
            format!("case {last}u: k{last}(hrx_p[0], hrx_p[1], hrx_ld_u32(hrx_s + 0)); return 0;"),
        ] {
            assert!(c.contains(&needle), "missing {needle:?}");
        }
        // Every array the entry declares, with its size: the per-lease ones (15), the release's
        // ids and the static map cache; none is sized by the records, record bytes or kernels.
        let mut sizes = Vec::new();
        for line in c.lines() {
            let t = line.trim_start();
            if t.starts_with("//") || t.starts_with("/*") || t.starts_with('*') {
                continue;
            }
            if let Some(open) = t.find('[') {
                let decl = t.starts_with("unsigned int hrx_")
                    || t.starts_with("int hrx_")
                    || t.starts_with("void *hrx_")
                    || t.starts_with("static ");
                if decl && t.ends_with("];") {
                    let n: usize = t[open + 1..t.len() - 2].parse().unwrap_or_else(|_| panic!("array size of {t:?}"));
                    sizes.push((String::from(t.split('[').next().unwrap_or("")), n));
                }
            }
        }
        let allowed = [MAX_BATCH_LEASES, MAX_RELEASE_IDS, MAP_CACHE_SLOTS];
        assert!(sizes.len() >= 5, "{sizes:?}");
        for (decl, n) in &sizes {
            assert!(allowed.contains(n), "{decl}[{n}]");
        }
    }

    #[test]
    fn empty_signature_and_names() {
        let c = gen("", &EntryOptions::V2);
        assert!(c.contains("void kern(void);") && c.contains("kern();"));
        assert!(!c.contains("hrx_a1"));
        let sig = Signature::parse("buf").unwrap();
        let mut s = String::new();
        for bad in ["", "1k", "entry", "int", "hrx_k", "HAP_mmap", "__k", "a-b", "ü"] {
            assert_eq!(write_entry(&mut s, &sig, bad, &EntryOptions::V2), Err(EntryError::KernelName), "{bad:?}");
        }
        assert!(s.is_empty());
        assert_eq!(check_kernel_name("r_16_4"), Ok(()));
        struct Full;
        impl Write for Full {
            fn write_str(&mut self, _: &str) -> fmt::Result {
                Err(fmt::Error)
            }
        }
        assert_eq!(write_entry(&mut Full, &sig, "k", &EntryOptions::V2), Err(EntryError::Format));
    }
}
