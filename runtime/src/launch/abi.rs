//! The launch ABI table: one [`LaunchLayout`] per version, the only place where the shape of a
//! kernel launch is written down. The packer ([`PackedLaunch`](super::PackedLaunch)) and the C
//! generator ([`write_entry`](super::write_entry)) read every number from here; the decoders
//! ([`LaunchLayout::header`], [`LaunchLayout::buffer_len`], [`LaunchLayout::view`],
//! [`LaunchLayout::scalar`]) read packed bytes back the same way a DSP model does.
//!
//! | pra | dir | v1 | v2 |
//! |---|---|---|---|
//! | 0 | in | N buffer slots (i32 view length) then scalar slots, 8 bytes each | header slot (u32 magic `HRX2`, u32 N), N buffer slots (u32 view length, u32 lease id), scalar slots |
//! | 1 | in | N x u32 view offset | N x (u32 view offset, u32 lease length) |
//! | 2 | out | u64 DSP microseconds | u64 DSP microseconds (written only if the slot is >= 8 bytes) |
//! | 3 + i | handle | share fd of buffer i, `FASTRPC_ATTR_NOVA` | same |
//!
//! All multi-byte fields are little-endian (the host and the DSP both are).
//!
//! The v2 buffer slot's second word is the buffer's **lease id** (0: "do not cache"): a
//! session-unique, never reused, non-zero number per lease ([`LaunchBuffer::lease_id`](super::LaunchBuffer::lease_id)).
//! An entry built with the map cache ([`FLAG_MAP_CACHE`](super::record::FLAG_MAP_CACHE)) keeps
//! the lease mapped across calls under that id; every other v2 entry never reads the word.
//!
//! # The map cache and its release (method [`RELEASE_METHOD`])
//!
//! A library whose build record carries `FLAG_MAP_CACHE` keeps up to [`MAP_CACHE_SLOTS`] lease
//! mappings across calls, keyed by (lease id, fd, lease length), and answers method 4,
//! *release*: pra 0 (in) holds a u32 count C then C u32 lease ids; the entry unmaps the
//! mappings of those ids (one in use by another DSP thread is unmapped when that call ends).
//! C = 0 releases every mapping (what the host sends before it closes the library). Scalars word:
//! method 4, 1 in, 0 out, no handles. Any other shape is `AEE_EBADPARM`. Entries without the flag
//! answer method 4 with 0 and do nothing (their method check), so the host sends it only to
//! flagged libraries anyway.
//!
//! # Batches: many launches, one call ([`BATCH`])
//!
//! A library generated for several kernels (a kernel *table*, index 0, 1, ...) also answers
//! method [`BATCH_METHOD`] (3): one invoke carries K launch records. The leases are deduplicated
//! across the batch: each distinct lease is one handle argument, mapped once with `HAP_mmap` for
//! the whole call and unmapped once at the end.
//!
//! | pra | dir | batch (method 3) |
//! |---|---|---|
//! | 0 | in | header (u32 magic `HRXB`, u32 K records, u32 L leases, u32 R record bytes), then R bytes of K records |
//! | 1 | in | L x (u32 lease length, u32 lease id: 0 unless the library has the map cache) |
//! | 2 | out | status, 24 bytes: u32 magic `HRXB` (the entry ran the batch), u32 records completed, u32 failed record (`u32::MAX`: none), i32 its code, u64 DSP microseconds summed over the kernels |
//! | 3 + l | handle | share fd of lease l, `FASTRPC_ATTR_NOVA` |
//!
//! A record: u32 kernel index, u16 V views, u16 S scalars, then V x (u32 lease index, u32 view
//! offset, u32 view length), then S scalar slots of 8 bytes. V and S must equal the kernel's
//! signature. Scalars word: method 3, 2 in, 1 out, L out-handles.
//!
//! Capacity (fixed, in the table): [`MAX_BATCH_LAUNCHES`] records, [`MAX_BATCH_LEASES`] leases
//! (the out-handles nibble of the scalars word, as v2's buffers: FastRPC allows 15 handles of a
//! kind per call), [`MAX_BATCH_RECORD_BYTES`] record bytes, [`MAX_BATCH_KERNELS`] kernels in a
//! library's table. The launches and kernels are sized for tinygrad: its jit cuts a capture into
//! graphs of 32, 64, 128 and 256 kernels (`JIT_BATCH_SIZE`, doubling), and every graph up to
//! 256 launches, each launch possibly a kernel of its own, is one batch. The record bytes hold
//! 256 records of 8 views and 4 scalars (8 + 96 + 32 = 136 bytes each, 34,816 in all), rounded
//! up to a power of two. None of these sizes anything on the DSP stack: the entry reads the
//! records where the framework put them and keeps per-lease arrays of [`MAX_BATCH_LEASES`].
//!
//! The entry validates everything before mapping anything (sc, pra lengths, header, every lease
//! length non-zero with its reserved word 0, every record: kernel index in the table, V and S
//! equal to the kernel's, every view's lease index < L and `off + len <= lease` without
//! overflow, the records exactly filling R) and answers `AEE_EBADPARM` touching nothing.
//! It maps the L leases (unwinding on failure, `AEE_EMMAP`), runs the records in order —
//! re-checking each record right before it runs — and stops at the first kernel that reports a
//! non-zero status; then it unmaps every lease, writes the status and returns 0. A stopped batch
//! is reported through the status (the downstream driver copies out-buffers back only when the
//! entry returns 0), so the host learns which record failed. A library without batch support
//! answers method 3 with 0 and leaves the status untouched: the host sees no `HRXB` in it and
//! refuses the result ([`BatchStatus::ran`]).

use hexrpc_drivers::adsprpc::FASTRPC_ATTR_NOVA;
use hexrpc_drivers::aee::{AEE_EBADPARM, AEE_EMMAP};
use hexrpc_drivers::Scalars;

use super::scalar::{Scalar, ScalarType};

/// Most buffers one launch can carry: N is OR-ed into the out-handles nibble of the scalars word.
pub const MAX_BUFFERS: usize = 15;
/// Index of the first buffer handle in the argument array (after pra 0, 1 and 2).
pub const FIRST_HANDLE: usize = 3;
/// Most `remote_arg` entries a launch has: 3 buffers plus [`MAX_BUFFERS`] handles.
pub const MAX_ARGS: usize = FIRST_HANDLE + MAX_BUFFERS;
/// Size of one slot of pra 0 (buffer lengths, scalars, the v2 header).
pub const SLOT_SIZE: usize = 8;
/// The v2 magic, `"HRX2"` read as a little-endian u32.
pub const V2_MAGIC: u32 = 0x3258_5248;
/// The FastRPC method index a kernel launch uses (the entry answers 0 to any other).
pub const LAUNCH_METHOD: u8 = 2;
/// Symbol name of the generated entry (the name the library is opened with).
pub const ENTRY_SYMBOL: &str = "entry";

/// The batch magic, `"HRXB"` read as a little-endian u32 (header of pra 0 and of the status).
pub const BATCH_MAGIC: u32 = 0x4258_5248;
/// The FastRPC method index of a batch.
pub const BATCH_METHOD: u8 = 3;
/// Most launch records in one batch: tinygrad's fourth jit graph (32, 64, 128, 256 kernels) in
/// one call.
pub const MAX_BATCH_LAUNCHES: usize = 256;
/// Most distinct leases in one batch (one handle argument each, in the out-handles nibble).
pub const MAX_BATCH_LEASES: usize = MAX_BUFFERS;
/// Most record bytes in one batch (after the 16-byte header): [`MAX_BATCH_LAUNCHES`] records
/// of 8 views and 4 scalars (136 bytes each, 34,816 in all), rounded up to a power of two
/// (64 KiB; 32 KiB would hold 240 of them).
pub const MAX_BATCH_RECORD_BYTES: usize = 65536;
/// Most kernels in one library's kernel table: a graph of [`MAX_BATCH_LAUNCHES`] launches may
/// name as many distinct kernels (a tinygrad jit's kernels are mostly distinct programs).
pub const MAX_BATCH_KERNELS: usize = 256;
/// The views and scalars of the record [`MAX_BATCH_RECORD_BYTES`] is sized for (a full batch of
/// such records fits; the compile-time assertions below check it).
const BATCH_SIZING_VIEWS: usize = 8;
const BATCH_SIZING_SCALARS: usize = 4;
/// The status's "no record failed".
pub const NO_FAILED_RECORD: u32 = u32::MAX;
/// The FastRPC method index of a map-cache release (libraries built with the map cache only).
pub const RELEASE_METHOD: u8 = 4;
/// Most ids one release call carries (pra 0 is `4 + 4 * count` bytes).
pub const MAX_RELEASE_IDS: usize = 64;
/// Lease mappings a map-cache entry keeps per library (a fixed table on the DSP).
pub const MAP_CACHE_SLOTS: usize = 16;

/// The program magic, `"HRXP"` read as a little-endian u32 (header of pra 0 and of the status).
pub const PROGRAM_MAGIC: u32 = 0x5058_5248;
/// The FastRPC method index of a program ([`PROGRAM`]).
pub const PROGRAM_METHOD: u8 = 5;
/// Most launch records in one program: a whole model's run (the model format's limit).
pub const MAX_PROGRAM_LAUNCHES: usize = 4096;
/// Most record bytes in one program: [`MAX_PROGRAM_LAUNCHES`] records of 8 views and 4 scalars
/// (557,056 bytes), rounded up to a power of two (1 MiB). They live in a lease, not in the call.
pub const MAX_PROGRAM_RECORD_BYTES: usize = 1 << 20;

/// The FastRPC method index of the DSP clock vote (libraries built with the power method only,
/// [`FLAG_POWER`](super::record::FLAG_POWER)): pra 0 holds a [`PowerVote`](super::PowerVote)
/// ([`POWER_VOTE_BYTES`]), which the entry hands to `HAP_power_set`; the answer is
/// `HAP_power_set`'s.
pub const POWER_METHOD: u8 = 6;
/// Bytes of a power vote (12 little-endian u32 words).
pub const POWER_VOTE_BYTES: usize = 48;

/// The scalars word of a power vote (method 6, one in-buffer, nothing else).
pub const fn power_scalars() -> Scalars {
    match Scalars::new(POWER_METHOD, 1, 0, 0, 0) {
        Some(sc) => sc,
        None => panic!("method 6 with one in-buffer fits the scalars word"),
    }
}

/// The scalars word of a release (method 4, one in-buffer, nothing else).
pub const fn release_scalars() -> Scalars {
    match Scalars::new(RELEASE_METHOD, 1, 0, 0, 0) {
        Some(sc) => sc,
        None => panic!("method 4 with one in-buffer fits the scalars word"),
    }
}

/// A version of the launch ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AbiVersion {
    /// tinygrad's DSP backend as it is today: no header, view length as i32, no lease length; the
    /// DSP maps the *view length* at file offset 0, so only offset-0 views are correct.
    V1,
    /// hexrpc's: a magic/count header, the lease length travels with each view offset, the DSP
    /// validates before mapping and maps (and unmaps) the whole lease.
    V2,
}

impl AbiVersion {
    /// The layout of this version.
    pub const fn layout(self) -> &'static LaunchLayout {
        match self {
            AbiVersion::V1 => &V1,
            AbiVersion::V2 => &V2,
        }
    }
}

/// How many bytes of a buffer's fd the DSP maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MapExtent {
    /// The view length at file offset 0 (v1; wrong for views at a non-zero offset).
    ViewLength,
    /// The lease length at file offset 0 (v2).
    LeaseLength,
}

/// The complete description of one launch ABI version.
///
/// Byte offsets named `*_at` are relative to the start of the record they belong to (the header
/// slot, a buffer slot, a pra 1 entry); the `const fn` helpers turn them into offsets inside the
/// pra 0 / pra 1 byte arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLayout {
    /// Which version this is.
    pub version: AbiVersion,
    /// Method index in the scalars word.
    pub method: u8,
    /// Input buffers in the scalars word (pra 0 and pra 1).
    pub in_bufs: u8,
    /// Output buffers in the scalars word (pra 2).
    pub out_bufs: u8,
    /// Index of the pra holding the header, buffer lengths and scalars.
    pub pra_slots: usize,
    /// Index of the pra holding the per-buffer view records.
    pub pra_views: usize,
    /// Index of the output pra holding the DSP timer.
    pub pra_timer: usize,
    /// Index of the first buffer handle.
    pub first_handle: usize,
    /// Size of a pra 0 slot.
    pub slot_size: usize,
    /// Slots before the first buffer slot (v2: one header slot).
    pub header_slots: usize,
    /// The header magic, if the version has a header.
    pub magic: Option<u32>,
    /// Offset of the u32 magic in the header slot.
    pub magic_at: usize,
    /// Offset of the u32 buffer count in the header slot.
    pub count_at: usize,
    /// Offset of the buffer length (4 bytes) in a buffer slot.
    pub buffer_len_at: usize,
    /// True if the buffer length is read as a signed i32 (v1).
    pub buffer_len_signed: bool,
    /// Size of one per-buffer record in pra 1.
    pub view_record_size: usize,
    /// Offset of the u32 view offset in a pra 1 record.
    pub view_offset_at: usize,
    /// Offset of the u32 lease length in a pra 1 record (v2 only).
    pub lease_len_at: Option<usize>,
    /// Offset of the u32 lease id in a buffer slot (v2 only; 0 = do not cache; read only by
    /// entries built with the map cache).
    pub lease_id_at: Option<usize>,
    /// Offset of a scalar's value (little-endian, its own width) in its slot; the rest is zero.
    pub scalar_at: usize,
    /// Size of the timer (pra 2).
    pub timer_len: usize,
    /// True if the entry writes the timer only when pra 2 is at least [`timer_len`](Self::timer_len) bytes.
    pub timer_len_checked: bool,
    /// Most buffers.
    pub max_buffers: usize,
    /// Longest view the length field can carry.
    pub max_view_len: u64,
    /// Longest lease the ABI can describe (v1 carries none: the view length is mapped).
    pub max_lease_len: u64,
    /// True if a view may start at a non-zero offset of its lease. v1 cannot do it correctly:
    /// the host refuses such a view before anything is sent.
    pub allows_view_offset: bool,
    /// What the entry maps per buffer.
    pub map_extent: MapExtent,
    /// True if the entry validates sc, pra lengths, magic, N and every view before mapping.
    pub validates: bool,
    /// True if the entry checks `HAP_mmap`'s result and unwinds earlier maps on failure.
    pub unwinds: bool,
    /// `prot` argument of `HAP_mmap` (read | write).
    pub map_prot: u32,
    /// `flags` argument of `HAP_mmap`.
    pub map_flags: u32,
    /// `attrs[]` value of a buffer handle.
    pub handle_attr: u32,
    /// What a validating entry returns for a malformed launch (`AEE_EBADPARM`).
    pub err_bad_param: i32,
    /// What a validating entry returns when `HAP_mmap` fails (`AEE_EMMAP`).
    pub err_map: i32,
}

/// Version 1 (tinygrad's).
pub const V1: LaunchLayout = LaunchLayout {
    version: AbiVersion::V1,
    method: LAUNCH_METHOD,
    in_bufs: 2,
    out_bufs: 1,
    pra_slots: 0,
    pra_views: 1,
    pra_timer: 2,
    first_handle: FIRST_HANDLE,
    slot_size: SLOT_SIZE,
    header_slots: 0,
    magic: None,
    magic_at: 0,
    count_at: 0,
    buffer_len_at: 0,
    buffer_len_signed: true,
    view_record_size: 4,
    view_offset_at: 0,
    lease_len_at: None,
    lease_id_at: None,
    scalar_at: 0,
    timer_len: 8,
    timer_len_checked: false,
    max_buffers: MAX_BUFFERS,
    max_view_len: i32::MAX as u64,
    max_lease_len: i32::MAX as u64,
    allows_view_offset: false,
    map_extent: MapExtent::ViewLength,
    validates: false,
    unwinds: false,
    map_prot: 3,
    map_flags: 0,
    handle_attr: FASTRPC_ATTR_NOVA,
    err_bad_param: AEE_EBADPARM,
    err_map: AEE_EMMAP,
};

/// Version 2 (hexrpc's).
pub const V2: LaunchLayout = LaunchLayout {
    version: AbiVersion::V2,
    method: LAUNCH_METHOD,
    in_bufs: 2,
    out_bufs: 1,
    pra_slots: 0,
    pra_views: 1,
    pra_timer: 2,
    first_handle: FIRST_HANDLE,
    slot_size: SLOT_SIZE,
    header_slots: 1,
    magic: Some(V2_MAGIC),
    magic_at: 0,
    count_at: 4,
    buffer_len_at: 0,
    buffer_len_signed: false,
    view_record_size: 8,
    view_offset_at: 0,
    lease_len_at: Some(4),
    lease_id_at: Some(4),
    scalar_at: 0,
    timer_len: 8,
    timer_len_checked: true,
    max_buffers: MAX_BUFFERS,
    max_view_len: u32::MAX as u64,
    max_lease_len: u32::MAX as u64,
    allows_view_offset: true,
    map_extent: MapExtent::LeaseLength,
    validates: true,
    unwinds: true,
    map_prot: 3,
    map_flags: 0,
    handle_attr: FASTRPC_ATTR_NOVA,
    err_bad_param: AEE_EBADPARM,
    err_map: AEE_EMMAP,
};

// The table must agree with the argument array's fixed shape.
const _: () = {
    assert!(V1.pra_slots == 0 && V1.pra_views == 1 && V1.pra_timer == 2 && V1.first_handle == 3);
    assert!(V2.pra_slots == 0 && V2.pra_views == 1 && V2.pra_timer == 2 && V2.first_handle == 3);
    assert!((V1.in_bufs + V1.out_bufs) as usize == FIRST_HANDLE && (V2.in_bufs + V2.out_bufs) as usize == FIRST_HANDLE);
    assert!(MAX_BUFFERS <= Scalars::MAX_HANDLES as usize);
    assert!(V2.magic_at + 4 <= SLOT_SIZE && V2.count_at + 4 <= SLOT_SIZE && V2.magic_at != V2.count_at);
    assert!(V1.buffer_len_at + 4 <= SLOT_SIZE && V2.buffer_len_at + 4 <= SLOT_SIZE);
    assert!(V1.view_offset_at + 4 <= V1.view_record_size && V2.view_offset_at + 4 <= V2.view_record_size);
    assert!(V2.view_offset_at != 4 && 4 + 4 <= V2.view_record_size);
    assert!(matches!(V2.lease_id_at, Some(4)) && V2.buffer_len_at == 0 && V1.lease_id_at.is_none());
    assert!(V1.timer_len == 8 && V2.timer_len == 8 && V1.scalar_at == 0 && V2.scalar_at == 0);
    assert!(V2_MAGIC == u32::from_le_bytes(*b"HRX2"));
};

/// The batch ABI (method 3): see the module docs. Offsets named `*_at` are relative to their
/// record (header, lease entry, launch record, view entry, status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLayout {
    /// Method index in the scalars word.
    pub method: u8,
    /// Input buffers (pra 0 records, pra 1 leases).
    pub in_bufs: u8,
    /// Output buffers (pra 2 status).
    pub out_bufs: u8,
    /// Index of the pra holding the header and the records.
    pub pra_records: usize,
    /// Index of the pra holding the lease table.
    pub pra_leases: usize,
    /// Index of the output pra holding the status.
    pub pra_status: usize,
    /// Index of the first lease handle.
    pub first_handle: usize,
    /// The header (and status) magic.
    pub magic: u32,
    /// Length of the header at the start of pra 0.
    pub header_len: usize,
    /// Offset of the u32 magic in the header.
    pub magic_at: usize,
    /// Offset of the u32 record count K in the header.
    pub count_at: usize,
    /// Offset of the u32 lease count L in the header.
    pub leases_at: usize,
    /// Offset of the u32 record byte count R in the header.
    pub bytes_at: usize,
    /// Size of one lease entry in pra 1.
    pub lease_entry_size: usize,
    /// Offset of the u32 lease length in a lease entry.
    pub lease_len_at: usize,
    /// Offset of the u32 reserved word in a lease entry: entries built without the map cache
    /// require 0 there; the map cache reads it as the lease id ([`lease_id_at`](Self::lease_id_at)).
    pub lease_reserved_at: usize,
    /// Offset of the u32 lease id in a lease entry (the reserved word; 0 = do not cache).
    pub lease_id_at: usize,
    /// Length of a launch record's own header.
    pub record_header_len: usize,
    /// Offset of the u32 kernel index in a record.
    pub kernel_at: usize,
    /// Offset of the u16 view count in a record.
    pub views_at: usize,
    /// Offset of the u16 scalar count in a record.
    pub scalars_at: usize,
    /// Size of one view entry.
    pub view_size: usize,
    /// Offset of the u32 lease index in a view entry.
    pub view_lease_at: usize,
    /// Offset of the u32 view offset in a view entry.
    pub view_offset_at: usize,
    /// Offset of the u32 view length in a view entry.
    pub view_len_at: usize,
    /// Size of a scalar slot (value at offset 0, little-endian, zero-padded).
    pub slot_size: usize,
    /// Length of the status (pra 2).
    pub status_len: usize,
    /// Offset of the u32 magic in the status.
    pub status_magic_at: usize,
    /// Offset of the u32 completed-record count in the status.
    pub status_done_at: usize,
    /// Offset of the u32 failed record index in the status.
    pub status_failed_at: usize,
    /// Offset of the i32 code of the failed record in the status.
    pub status_code_at: usize,
    /// Offset of the u64 DSP microseconds in the status.
    pub status_micros_at: usize,
    /// Most records.
    pub max_launches: usize,
    /// Most leases.
    pub max_leases: usize,
    /// Most record bytes.
    pub max_record_bytes: usize,
    /// Most kernels in a library's table.
    pub max_kernels: usize,
    /// `prot` of `HAP_mmap`.
    pub map_prot: u32,
    /// `flags` of `HAP_mmap`.
    pub map_flags: u32,
    /// `attrs[]` of a lease handle.
    pub handle_attr: u32,
    /// Where the records are: `None` in pra 0 after the header (a batch); `Some((p, o))` in a
    /// lease (a program): the header's u32 at `p` is the lease's index, the u32 at `o` the
    /// records' byte offset in it.
    pub records_in_lease: Option<(usize, usize)>,
    /// What the entry returns for a malformed batch.
    pub err_bad_param: i32,
    /// What the entry returns when `HAP_mmap` fails.
    pub err_map: i32,
}

/// The batch ABI.
pub const BATCH: BatchLayout = BatchLayout {
    method: BATCH_METHOD,
    in_bufs: 2,
    out_bufs: 1,
    pra_records: 0,
    pra_leases: 1,
    pra_status: 2,
    first_handle: FIRST_HANDLE,
    magic: BATCH_MAGIC,
    header_len: 16,
    magic_at: 0,
    count_at: 4,
    leases_at: 8,
    bytes_at: 12,
    lease_entry_size: 8,
    lease_len_at: 0,
    lease_reserved_at: 4,
    lease_id_at: 4,
    record_header_len: 8,
    kernel_at: 0,
    views_at: 4,
    scalars_at: 6,
    view_size: 12,
    view_lease_at: 0,
    view_offset_at: 4,
    view_len_at: 8,
    slot_size: SLOT_SIZE,
    status_len: 24,
    status_magic_at: 0,
    status_done_at: 4,
    status_failed_at: 8,
    status_code_at: 12,
    status_micros_at: 16,
    max_launches: MAX_BATCH_LAUNCHES,
    max_leases: MAX_BATCH_LEASES,
    max_record_bytes: MAX_BATCH_RECORD_BYTES,
    max_kernels: MAX_BATCH_KERNELS,
    map_prot: 3,
    map_flags: 0,
    handle_attr: FASTRPC_ATTR_NOVA,
    records_in_lease: None,
    err_bad_param: AEE_EBADPARM,
    err_map: AEE_EMMAP,
};

/// The program ABI: a batch whose records stay in a lease (mapped once, kept by the map cache)
/// instead of travelling in every call. The same record form, lease table, status layout and
/// handles as [`BATCH`]; the header (24 bytes) adds the records' lease index and byte offset.
pub const PROGRAM: BatchLayout = BatchLayout {
    method: PROGRAM_METHOD,
    magic: PROGRAM_MAGIC,
    header_len: 24,
    max_launches: MAX_PROGRAM_LAUNCHES,
    max_record_bytes: MAX_PROGRAM_RECORD_BYTES,
    records_in_lease: Some((16, 20)),
    ..BATCH
};

const _: () = {
    assert!(PROGRAM_MAGIC == u32::from_le_bytes(*b"HRXP") && PROGRAM_METHOD != RELEASE_METHOD && PROGRAM_METHOD != BATCH_METHOD);
    assert!(PROGRAM_METHOD != LAUNCH_METHOD);
    assert!(MAX_PROGRAM_LAUNCHES * PROGRAM.record_len(BATCH_SIZING_VIEWS, BATCH_SIZING_SCALARS) <= MAX_PROGRAM_RECORD_BYTES);
    assert!(MAX_PROGRAM_LAUNCHES * PROGRAM.record_len(BATCH_SIZING_VIEWS, BATCH_SIZING_SCALARS) > MAX_PROGRAM_RECORD_BYTES / 2);
    assert!(MAX_PROGRAM_RECORD_BYTES.is_power_of_two() && MAX_PROGRAM_RECORD_BYTES <= u32::MAX as usize / 2);
    match PROGRAM.records_in_lease {
        Some((p, o)) => assert!(p >= BATCH.header_len && o >= p + 4 && o + 4 <= PROGRAM.header_len),
        None => panic!("a program's records are in a lease"),
    }
};

const _: () = {
    assert!(BATCH.pra_records == 0 && BATCH.pra_leases == 1 && BATCH.pra_status == 2 && BATCH.first_handle == FIRST_HANDLE);
    assert!((BATCH.in_bufs + BATCH.out_bufs) as usize == FIRST_HANDLE);
    assert!(BATCH.method != LAUNCH_METHOD && BATCH_MAGIC == u32::from_le_bytes(*b"HRXB"));
    assert!(MAX_BATCH_LEASES <= Scalars::MAX_HANDLES as usize);
    assert!(BATCH.bytes_at + 4 <= BATCH.header_len && BATCH.scalars_at + 2 <= BATCH.record_header_len);
    assert!(BATCH.view_len_at + 4 <= BATCH.view_size && BATCH.status_micros_at + 8 <= BATCH.status_len);
    assert!(BATCH.lease_reserved_at + 4 <= BATCH.lease_entry_size && BATCH.lease_id_at == BATCH.lease_reserved_at);
    assert!(RELEASE_METHOD != BATCH_METHOD && RELEASE_METHOD != LAUNCH_METHOD);
    assert!(POWER_METHOD != RELEASE_METHOD && POWER_METHOD != PROGRAM_METHOD && POWER_METHOD != BATCH_METHOD);
    assert!(POWER_METHOD != LAUNCH_METHOD && POWER_VOTE_BYTES <= hexrpc_hal::MAX_SETUP_BYTES);
    // The HAL sends the release (when a lease is dropped, before a library is closed).
    assert!(RELEASE_METHOD == hexrpc_hal::MAP_CACHE_RELEASE_METHOD && MAX_RELEASE_IDS == hexrpc_hal::MAP_CACHE_RELEASE_IDS);
    // What the capacities are sized for: a full batch of MAX_BATCH_LAUNCHES records of
    // BATCH_SIZING_VIEWS views and BATCH_SIZING_SCALARS scalars fits the record bytes, and the
    // record bytes are the power of two just above it (not needlessly more).
    assert!(MAX_BATCH_LAUNCHES * BATCH.record_len(BATCH_SIZING_VIEWS, BATCH_SIZING_SCALARS) <= MAX_BATCH_RECORD_BYTES);
    assert!(MAX_BATCH_RECORD_BYTES.is_power_of_two());
    assert!(MAX_BATCH_LAUNCHES * BATCH.record_len(BATCH_SIZING_VIEWS, BATCH_SIZING_SCALARS) > MAX_BATCH_RECORD_BYTES / 2);
    assert!(BATCH_SIZING_VIEWS <= MAX_BUFFERS && MAX_BATCH_KERNELS >= MAX_BATCH_LAUNCHES);
    // A full batch of the smallest records (no view, no scalar: 8 bytes) fits, so K's limit is
    // reachable whatever the kernels.
    assert!(MAX_BATCH_LAUNCHES * BATCH.record_header_len <= MAX_BATCH_RECORD_BYTES);
    // Every count and offset fits the u32 header fields and the C entry's unsigned int
    // arithmetic: the end of the records (16 + R) and the longest record a header can claim
    // (8 + 12 * 65535 + 8 * 65535, both counts u16) stay far below 2^32.
    assert!(BATCH.header_len + MAX_BATCH_RECORD_BYTES <= u32::MAX as usize / 2);
    assert!(BATCH.record_header_len + (BATCH.view_size + BATCH.slot_size) * u16::MAX as usize <= u32::MAX as usize / 2);
};

/// The magic of the per-record times a batch or program entry writes after the status, `"HRXT"`
/// read as a little-endian u32, when the status buffer has room for them
/// ([`BatchLayout::timed_status_len`]).
pub const TIMES_MAGIC: u32 = 0x5458_5248;

/// The per-record DSP times an entry wrote after a status ([`BatchLayout::record_micros`]): one
/// u32 of microseconds per record that ran (the failed one included), timer reads right around
/// each kernel call (`HAP_perf_get_time_us`; on the bench the emulator's host clock, or the
/// simulated DSP's cost model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMicros<'s> {
    words: &'s [u8],
}

impl<'s> RecordMicros<'s> {
    /// Records timed.
    pub fn len(&self) -> usize {
        self.words.len() / 4
    }

    /// True if no record was timed.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Record `i`'s microseconds.
    pub fn get(&self, i: usize) -> Option<u32> {
        le_u32(self.words, i.checked_mul(4)?)
    }

    /// Every record's microseconds, in record order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + 's {
        self.words.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// The status a batch entry wrote (pra 2), decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BatchStatus {
    /// The magic the entry writes when it ran the batch (`BATCH_MAGIC`).
    pub magic: u32,
    /// Records that completed.
    pub done: u32,
    /// The record that failed ([`NO_FAILED_RECORD`] if none).
    pub failed: u32,
    /// The failed record's code (its kernel's non-zero status).
    pub code: i32,
    /// DSP microseconds summed over the kernel calls.
    pub micros: u64,
}

impl BatchStatus {
    /// True if a batch-capable entry wrote this status.
    pub fn ran(&self) -> bool {
        self.magic == BATCH_MAGIC
    }
    /// True if a program-capable entry ran a program and wrote this status.
    pub fn ran_program(&self) -> bool {
        self.magic == PROGRAM_MAGIC
    }
}

fn le_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

impl BatchLayout {
    /// Bytes of a status buffer (pra 2) with room for the times of `records` records: the
    /// status, then u32 [`TIMES_MAGIC`], u32 count, and one u32 per record. An entry that times
    /// records writes them when pra 2 is at least this long; a shorter pra 2 gets the status only.
    pub const fn timed_status_len(&self, records: usize) -> usize {
        self.status_len + 8 + 4 * records
    }

    /// The per-record times in a status buffer, if the entry wrote them (its magic, and a count
    /// that fits the buffer and is at most `records`); `None` from an entry that does not time
    /// records, or a buffer without room.
    pub fn record_micros<'s>(&self, pra2: &'s [u8], records: usize) -> Option<RecordMicros<'s>> {
        if le_u32(pra2, self.status_len)? != TIMES_MAGIC {
            return None;
        }
        let n = le_u32(pra2, self.status_len + 4)? as usize;
        if n > records {
            return None;
        }
        let at = self.status_len + 8;
        Some(RecordMicros { words: pra2.get(at..at.checked_add(n.checked_mul(4)?)?)? })
    }

    /// The scalars word of a batch with `leases` leases (`None` above the handle nibble).
    pub const fn scalars(&self, leases: usize) -> Option<Scalars> {
        if leases > self.max_leases {
            return None;
        }
        Scalars::new(self.method, self.in_bufs, self.out_bufs, 0, leases as u8)
    }
    /// Bytes of one record with `views` views and `scalars` scalars.
    pub const fn record_len(&self, views: usize, scalars: usize) -> usize {
        self.record_header_len + views * self.view_size + scalars * self.slot_size
    }
    /// Length of pra 0 for `record_bytes` record bytes.
    pub const fn pra0_len(&self, record_bytes: usize) -> usize {
        self.header_len + record_bytes
    }
    /// Length of pra 1 for `leases` leases.
    pub const fn pra1_len(&self, leases: usize) -> usize {
        leases * self.lease_entry_size
    }
    /// Offset (from the record's start) of view `v`'s entry.
    pub const fn view_at(&self, v: usize) -> usize {
        self.record_header_len + v * self.view_size
    }
    /// Offset (from the record's start) of scalar `j` of a record with `views` views.
    pub const fn scalar_at(&self, views: usize, j: usize) -> usize {
        self.record_header_len + views * self.view_size + j * self.slot_size
    }

    /// Reads the header `(magic, K, L, R)` from pra 0.
    pub fn header(&self, pra0: &[u8]) -> Option<(u32, u32, u32, u32)> {
        Some((le_u32(pra0, self.magic_at)?, le_u32(pra0, self.count_at)?, le_u32(pra0, self.leases_at)?, le_u32(pra0, self.bytes_at)?))
    }
    /// Reads lease `l`'s `(length, reserved)` from pra 1.
    pub fn lease(&self, pra1: &[u8], l: usize) -> Option<(u32, u32)> {
        let at = l.checked_mul(self.lease_entry_size)?;
        Some((le_u32(pra1, at + self.lease_len_at)?, le_u32(pra1, at + self.lease_reserved_at)?))
    }
    /// Reads the record at byte `at` of pra 0: `(kernel, views, scalars)`.
    pub fn record(&self, pra0: &[u8], at: usize) -> Option<(u32, u16, u16)> {
        Some((le_u32(pra0, at + self.kernel_at)?, le_u16(pra0, at + self.views_at)?, le_u16(pra0, at + self.scalars_at)?))
    }
    /// Reads view `v` of the record at byte `at` of pra 0: `(lease index, offset, length)`.
    pub fn view(&self, pra0: &[u8], at: usize, v: usize) -> Option<(u32, u32, u32)> {
        let e = at.checked_add(self.view_at(v))?;
        Some((le_u32(pra0, e + self.view_lease_at)?, le_u32(pra0, e + self.view_offset_at)?, le_u32(pra0, e + self.view_len_at)?))
    }
    /// Reads scalar `j` (of type `ty`) of the record at byte `at` with `views` views.
    pub fn scalar(&self, pra0: &[u8], at: usize, views: usize, j: usize, ty: ScalarType) -> Option<Scalar> {
        let s = at.checked_add(self.scalar_at(views, j))?;
        let b = pra0.get(s..s.checked_add(ty.size())?)?;
        let mut word = [0u8; 8];
        word[..b.len()].copy_from_slice(b);
        Some(Scalar::from_le_bytes(ty, word))
    }
    /// Decodes the status (pra 2).
    pub fn status(&self, pra2: &[u8]) -> Option<BatchStatus> {
        let micros: [u8; 8] = pra2.get(self.status_micros_at..self.status_micros_at + 8)?.try_into().ok()?;
        Some(BatchStatus {
            magic: le_u32(pra2, self.status_magic_at)?,
            done: le_u32(pra2, self.status_done_at)?,
            failed: le_u32(pra2, self.status_failed_at)?,
            code: le_u32(pra2, self.status_code_at)? as i32,
            micros: u64::from_le_bytes(micros),
        })
    }
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl LaunchLayout {
    /// The scalars word of a launch with `n` buffers (`None` if `n` exceeds the handle nibble).
    pub const fn scalars(&self, n: usize) -> Option<Scalars> {
        if n > self.max_buffers {
            return None;
        }
        Scalars::new(self.method, self.in_bufs, self.out_bufs, 0, n as u8)
    }
    /// Number of `remote_arg` entries of a launch with `n` buffers.
    pub const fn arg_count(&self, n: usize) -> usize {
        self.first_handle + n
    }
    /// Number of pra 0 slots for `n` buffers and `s` scalars.
    pub const fn slots(&self, n: usize, s: usize) -> usize {
        self.header_slots + n + s
    }
    /// Length of pra 0 for `n` buffers and `s` scalars.
    pub const fn pra0_len(&self, n: usize, s: usize) -> usize {
        self.slots(n, s) * self.slot_size
    }
    /// Length of pra 1 for `n` buffers.
    pub const fn pra1_len(&self, n: usize) -> usize {
        n * self.view_record_size
    }
    /// Offset in pra 0 of the header's magic (meaningful only if [`magic`](Self::magic) is set).
    pub const fn magic_offset(&self) -> usize {
        self.magic_at
    }
    /// Offset in pra 0 of the header's buffer count (meaningful only with a header).
    pub const fn count_offset(&self) -> usize {
        self.count_at
    }
    /// Offset in pra 0 of buffer `i`'s length.
    pub const fn buffer_len_offset(&self, i: usize) -> usize {
        (self.header_slots + i) * self.slot_size + self.buffer_len_at
    }
    /// Offset in pra 0 of scalar `j` of a launch with `n` buffers.
    pub const fn scalar_offset(&self, n: usize, j: usize) -> usize {
        (self.header_slots + n + j) * self.slot_size + self.scalar_at
    }
    /// Offset in pra 1 of buffer `i`'s view offset.
    pub const fn view_offset_offset(&self, i: usize) -> usize {
        i * self.view_record_size + self.view_offset_at
    }
    /// Offset in pra 1 of buffer `i`'s lease length (v2).
    pub const fn lease_len_offset(&self, i: usize) -> Option<usize> {
        match self.lease_len_at {
            Some(at) => Some(i * self.view_record_size + at),
            None => None,
        }
    }

    /// Offset in pra 0 of buffer `i`'s lease id (v2).
    pub const fn lease_id_offset(&self, i: usize) -> Option<usize> {
        match self.lease_id_at {
            Some(at) => Some((self.header_slots + i) * self.slot_size + at),
            None => None,
        }
    }
    /// Reads buffer `i`'s lease id from pra 0 (`None` for v1 or a short pra 0).
    pub fn lease_id(&self, pra0: &[u8], i: usize) -> Option<u32> {
        le_u32(pra0, self.lease_id_offset(i)?)
    }

    /// Reads the header `(magic, n)` from pra 0 (`None` for v1 or a short pra 0).
    pub fn header(&self, pra0: &[u8]) -> Option<(u32, u32)> {
        self.magic?;
        Some((le_u32(pra0, self.magic_offset())?, le_u32(pra0, self.count_offset())?))
    }
    /// Reads buffer `i`'s length from pra 0 as its raw u32 (v1 senders store an i32).
    pub fn buffer_len(&self, pra0: &[u8], i: usize) -> Option<u32> {
        le_u32(pra0, self.buffer_len_offset(i))
    }
    /// Reads buffer `i`'s `(view offset, lease length)` from pra 1; v1 has no lease length (`None`).
    pub fn view(&self, pra1: &[u8], i: usize) -> Option<(u32, Option<u32>)> {
        let off = le_u32(pra1, self.view_offset_offset(i))?;
        match self.lease_len_offset(i) {
            Some(at) => Some((off, Some(le_u32(pra1, at)?))),
            None => Some((off, None)),
        }
    }
    /// Reads scalar `j` (of type `ty`, in a launch with `n` buffers) from pra 0.
    pub fn scalar(&self, pra0: &[u8], n: usize, j: usize, ty: ScalarType) -> Option<Scalar> {
        let at = self.scalar_offset(n, j);
        let b = pra0.get(at..at.checked_add(ty.size())?)?;
        let mut word = [0u8; 8];
        word[..b.len()].copy_from_slice(b);
        Some(Scalar::from_le_bytes(ty, word))
    }
    /// Reads the timer (u64 microseconds) from pra 2's bytes.
    pub fn timer(&self, pra2: &[u8]) -> Option<u64> {
        let b: [u8; 8] = pra2.get(..self.timer_len)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_times_are_read_only_when_the_entry_wrote_them_and_they_fit() {
        let mut st = [0u8; 24 + 8 + 4 * 3];
        assert_eq!(PROGRAM.timed_status_len(3), st.len());
        assert_eq!(PROGRAM.record_micros(&st, 3), None, "no magic: an entry that does not time records");
        st[24..28].copy_from_slice(&TIMES_MAGIC.to_le_bytes());
        st[28..32].copy_from_slice(&2u32.to_le_bytes());
        st[32..36].copy_from_slice(&7u32.to_le_bytes());
        st[36..40].copy_from_slice(&9u32.to_le_bytes());
        let t = PROGRAM.record_micros(&st, 3).unwrap();
        assert_eq!((t.len(), t.iter().collect::<std::vec::Vec<_>>(), t.get(1), t.get(2)), (2, std::vec![7, 9], Some(9), None));
        assert_eq!(PROGRAM.record_micros(&st, 1), None, "more times than records");
        st[28..32].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(PROGRAM.record_micros(&st, 9), None, "a count beyond the buffer");
        assert_eq!(PROGRAM.record_micros(&st[..26], 3), None);
    }

    #[test]
    fn scalars_word_is_tinygrads_for_every_count() {
        for n in 0..=MAX_BUFFERS {
            for l in [&V1, &V2] {
                let sc = l.scalars(n).unwrap();
                assert_eq!(sc, Scalars::tinygrad(2, 2, 1, n as u32));
                assert_eq!(sc.raw(), 0x0202_0100 | n as u32);
                assert_eq!(sc.length(), l.arg_count(n));
            }
        }
        assert!(V1.scalars(16).is_none() && V2.scalars(16).is_none());
    }

    #[test]
    fn offsets_follow_the_card() {
        // v1: buffer i at 8*i; scalar j at 8*(N+j); pra1 4 bytes per buffer.
        assert_eq!((V1.buffer_len_offset(2), V1.scalar_offset(3, 1), V1.view_offset_offset(2)), (16, 32, 8));
        assert_eq!((V1.pra0_len(3, 2), V1.pra1_len(3)), (40, 12));
        // v2: header slot first; pra1 (off, lease) 8 bytes per buffer.
        assert_eq!((V2.buffer_len_offset(0), V2.scalar_offset(3, 1), V2.view_offset_offset(2)), (8, 40, 16));
        assert_eq!((V2.lease_len_offset(2), V2.pra0_len(3, 2), V2.pra1_len(3)), (Some(20), 48, 24));
        assert_eq!((V2.magic_offset(), V2.count_offset()), (0, 4));
        assert_eq!(V1.lease_len_offset(0), None);
        assert_eq!(&V2_MAGIC.to_le_bytes(), b"HRX2");
        assert_eq!(AbiVersion::V1.layout(), &V1);
        assert_eq!(AbiVersion::V2.layout(), &V2);
    }

    #[test]
    fn batch_table_follows_the_card() {
        assert_eq!(&BATCH_MAGIC.to_le_bytes(), b"HRXB");
        // Capacities: 256 records, 15 leases, 64 KiB of records, 256 kernels in a table.
        assert_eq!((BATCH.max_launches, BATCH.max_leases, BATCH.max_record_bytes, BATCH.max_kernels), (256, 15, 65536, 256));
        assert_eq!(256 * BATCH.record_len(8, 4), 34_816);
        let sc = BATCH.scalars(15).unwrap();
        assert_eq!(sc.raw(), 0x0302_010f);
        assert_eq!(sc.length(), 18);
        assert!(BATCH.scalars(16).is_none());
        // conv: 4 views, 4 scalars = 8 + 48 + 32.
        assert_eq!(BATCH.record_len(4, 4), 88);
        assert_eq!((BATCH.view_at(2), BATCH.scalar_at(4, 1)), (32, 64));
        assert_eq!((BATCH.pra0_len(88), BATCH.pra1_len(2)), (104, 16));
        let mut p0 = [0u8; 16 + 8 + 12 + 8];
        p0[..4].copy_from_slice(b"HRXB");
        p0[4] = 1;
        p0[8] = 1;
        p0[12] = 28;
        p0[16] = 3; // kernel 3
        p0[20] = 1; // 1 view
        p0[22] = 1; // 1 scalar
        p0[28..32].copy_from_slice(&4096u32.to_le_bytes());
        p0[32..36].copy_from_slice(&64u32.to_le_bytes());
        p0[36..40].copy_from_slice(&(-7i32).to_le_bytes());
        assert_eq!(BATCH.header(&p0), Some((BATCH_MAGIC, 1, 1, 28)));
        assert_eq!(BATCH.record(&p0, 16), Some((3, 1, 1)));
        assert_eq!(BATCH.view(&p0, 16, 0), Some((0, 4096, 64)));
        assert_eq!(BATCH.scalar(&p0, 16, 1, 0, ScalarType::I32), Some(Scalar::I32(-7)));
        assert_eq!(BATCH.scalar(&p0, 16, 1, 1, ScalarType::I32), None);
        assert_eq!(BATCH.lease(&[1, 0, 0, 0, 0, 0, 0, 0], 0), Some((1, 0)));
        assert_eq!(BATCH.lease(&[1, 0, 0, 0, 0, 0, 0], 0), None);
        let mut st = [0u8; 24];
        st[..4].copy_from_slice(b"HRXB");
        st[4] = 2;
        st[8..12].copy_from_slice(&2u32.to_le_bytes());
        st[12..16].copy_from_slice(&(-5i32).to_le_bytes());
        st[16] = 9;
        let s = BATCH.status(&st).unwrap();
        assert_eq!(s, BatchStatus { magic: BATCH_MAGIC, done: 2, failed: 2, code: -5, micros: 9 });
        assert!(s.ran());
        assert!(!BATCH.status(&[0; 24]).unwrap().ran());
        assert_eq!(BATCH.status(&[0; 23]), None);
    }

    #[test]
    fn decoders_reject_short_input() {
        assert_eq!(V2.header(&[0; 7]), None);
        assert_eq!(V1.header(&[0; 8]), None);
        assert_eq!(V2.buffer_len(&[0; 11], 0), None);
        assert_eq!(V2.view(&[0; 7], 0), None);
        assert_eq!(V2.scalar(&[0; 15], 0, 1, ScalarType::I8), None);
        assert_eq!(V2.timer(&[0; 4]), None);
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&V2_MAGIC.to_le_bytes());
        b[4] = 1;
        b[8] = 42;
        assert_eq!(V2.header(&b), Some((V2_MAGIC, 1)));
        assert_eq!(V2.buffer_len(&b, 0), Some(42));
    }
}
