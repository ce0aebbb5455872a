//! The launch ABI table: one [`LaunchLayout`] per version, the only place where the shape of a
//! kernel launch is written down. The packer ([`PackedLaunch`](super::PackedLaunch)) and the C
//! generator ([`write_entry`](super::write_entry)) read every number from here; the decoders
//! ([`LaunchLayout::header`], [`LaunchLayout::buffer_len`], [`LaunchLayout::view`],
//! [`LaunchLayout::scalar`]) read packed bytes back the same way a DSP model does.
//!
//! | pra | dir | v1 | v2 |
//! |---|---|---|---|
//! | 0 | in | N buffer slots (i32 view length) then scalar slots, 8 bytes each | header slot (u32 magic `HRX2`, u32 N), N buffer slots (u32 view length, u32 0), scalar slots |
//! | 1 | in | N x u32 view offset | N x (u32 view offset, u32 lease length) |
//! | 2 | out | u64 DSP microseconds | u64 DSP microseconds (written only if the slot is >= 8 bytes) |
//! | 3 + i | handle | share fd of buffer i, `FASTRPC_ATTR_NOVA` | same |
//!
//! All multi-byte fields are little-endian (the host and the DSP both are).

use hexrpc_drivers::adsprpc::FASTRPC_ATTR_NOVA;
use hexrpc_drivers::aee::{AEE_EBADPARM, AEE_EMMAP};
use hexrpc_drivers::Scalars;

use super::signature::ScalarType;
use super::Scalar;

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
    assert!(V1.timer_len == 8 && V2.timer_len == 8 && V1.scalar_at == 0 && V2.scalar_at == 0);
    assert!(V2_MAGIC == u32::from_le_bytes(*b"HRX2"));
};

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
