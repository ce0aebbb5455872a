//! The host packer: buffer views + typed scalars -> the argument array of one launch, in fixed
//! capacity on the stack.

use core::fmt;
use core::marker::PhantomData;

use hexrpc_drivers::adsprpc::{ArgsError, LaunchFrame};
use hexrpc_drivers::fixed::FixedVec as Vec;
use hexrpc_drivers::{Error, Fd, Scalars, Syscalls};
use hexrpc_hal::Call;

use super::abi::{AbiVersion, LaunchLayout, FIRST_HANDLE, MAX_ARGS, MAX_BUFFERS, SLOT_SIZE};
use super::scalar::{Scalar, ScalarType};
use super::signature::{ParamKind, Signature};

/// A buffer view a kernel can be launched on: a window of a lease (a shareable allocation).
///
/// The HAL's buffer view implements this; [`BufferRef::of`] turns any implementor into the
/// small record the packer takes, borrowing the implementor for as long as the record lives.
pub trait LaunchBuffer {
    /// The lease's share fd (what the DSP maps).
    fn share_fd(&self) -> Fd;
    /// The lease's total length in bytes (what a v2 entry maps).
    fn lease_len(&self) -> u64;
    /// Offset of the view inside the lease.
    fn view_offset(&self) -> u64;
    /// Length of the view.
    fn view_len(&self) -> u64;
    /// The lease's session-unique identity for the DSP's map cache (launch ABI v2, the buffer
    /// slot's second word): non-zero, never reused within the session, unlike the fd number.
    /// 0 (the default) means "do not cache": the entry maps and unmaps the lease per call.
    fn lease_id(&self) -> u32 {
        0
    }
}

/// A buffer view as the packer sees it, borrowing its owner (the view or lease object) for `'a`,
/// so the owner cannot be dropped, and the lease freed, while a launch that references it is
/// alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferRef<'a> {
    fd: Fd,
    lease_len: u64,
    offset: u64,
    len: u64,
    id: u32,
    _owner: PhantomData<&'a ()>,
}

impl<'a> BufferRef<'a> {
    /// The record of `buffer`, borrowing it for `'a`.
    pub fn of<B: LaunchBuffer + ?Sized>(buffer: &'a B) -> BufferRef<'a> {
        BufferRef {
            fd: buffer.share_fd(),
            lease_len: buffer.lease_len(),
            offset: buffer.view_offset(),
            len: buffer.view_len(),
            id: buffer.lease_id(),
            _owner: PhantomData,
        }
    }

    /// A record made of raw parts, borrowing `owner` (whatever keeps the lease alive) for `'a`.
    /// Nothing is checked here; the packer checks the view against the lease and the version.
    pub fn borrowing<T: ?Sized>(_owner: &'a T, fd: Fd, lease_len: u64, offset: u64, len: u64) -> BufferRef<'a> {
        BufferRef { fd, lease_len, offset, len, id: 0, _owner: PhantomData }
    }

    /// The same record with lease id `id` (0: do not cache). A caller sends a non-zero id only
    /// to a library built with the map cache, and only an id that names this lease alone for
    /// the life of the session (the HAL's leases have one: [`LaunchBuffer::lease_id`]).
    pub fn with_lease_id(mut self, id: u32) -> BufferRef<'a> {
        self.id = id;
        self
    }
}

impl LaunchBuffer for BufferRef<'_> {
    fn share_fd(&self) -> Fd {
        self.fd
    }
    fn lease_len(&self) -> u64 {
        self.lease_len
    }
    fn view_offset(&self) -> u64 {
        self.offset
    }
    fn view_len(&self) -> u64 {
        self.len
    }
    fn lease_id(&self) -> u32 {
        self.id
    }
}

/// Why a launch could not be packed. Every refusal happens before any system call.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PackError {
    /// More than [`MAX_BUFFERS`] buffers (the count would spill out of the handle nibble).
    TooManyBuffers {
        /// Buffers given.
        count: usize,
    },
    /// The number of buffers differs from the signature's.
    BufferCount {
        /// Buffers in the signature.
        expected: usize,
        /// Buffers given.
        got: usize,
    },
    /// The number of scalars differs from the signature's.
    ScalarCount {
        /// Scalars in the signature.
        expected: usize,
        /// Scalars given.
        got: usize,
    },
    /// pra 0 would need more slots than the packed launch's capacity.
    TooManyScalars {
        /// Slots needed (header + buffers + scalars).
        slots: usize,
        /// Slots available.
        capacity: usize,
    },
    /// Scalar `index` (counting scalars only) has a type other than the signature's.
    ScalarType {
        /// Index among the scalars.
        index: usize,
        /// The signature's type.
        expected: ScalarType,
        /// The given value's type.
        got: ScalarType,
    },
    /// v1 cannot launch a view at a non-zero offset correctly (its entry maps the view length at
    /// file offset 0 and unmaps the wrong address): refused, never sent.
    V1NonZeroOffset {
        /// Buffer index.
        buffer: usize,
        /// The view's offset.
        offset: u64,
    },
    /// The view is longer than the version's length field can carry.
    ViewTooLong {
        /// Buffer index.
        buffer: usize,
        /// The view's length.
        len: u64,
        /// The version's limit.
        max: u64,
    },
    /// The lease is longer than the version can describe.
    LeaseTooLong {
        /// Buffer index.
        buffer: usize,
        /// The lease's length.
        len: u64,
        /// The version's limit.
        max: u64,
    },
    /// `offset + len` exceeds the lease (or overflows).
    ViewOutsideLease {
        /// Buffer index.
        buffer: usize,
    },
    /// The buffer has no usable fd (0 or negative): the driver would not treat it as a handle.
    NoFd {
        /// Buffer index.
        buffer: usize,
    },
    /// A deadline of zero: a launch or batch would be interrupted before it could run and leave
    /// the session needing recovery. No deadline is `None` (`launch`, `Batch::run`), never 0.
    ZeroDeadline,
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PackError::TooManyBuffers { count } => write!(f, "{count} buffers: a launch carries at most {MAX_BUFFERS}"),
            PackError::BufferCount { expected, got } => write!(f, "the signature has {expected} buffers, {got} given"),
            PackError::ScalarCount { expected, got } => write!(f, "the signature has {expected} scalars, {got} given"),
            PackError::TooManyScalars { slots, capacity } => write!(f, "{slots} argument slots needed, capacity {capacity}"),
            PackError::ScalarType { index, expected, got } => write!(f, "scalar {index} is {got}, the signature says {expected}"),
            PackError::V1NonZeroOffset { buffer, offset } => {
                write!(f, "buffer {buffer} is a view at offset {offset}: the v1 entry cannot launch it correctly (use v2)")
            }
            PackError::ViewTooLong { buffer, len, max } => write!(f, "buffer {buffer}: view of {len} bytes exceeds {max}"),
            PackError::LeaseTooLong { buffer, len, max } => write!(f, "buffer {buffer}: lease of {len} bytes exceeds {max}"),
            PackError::ViewOutsideLease { buffer } => write!(f, "buffer {buffer}: view extends past its lease"),
            PackError::NoFd { buffer } => write!(f, "buffer {buffer} has no share fd"),
            PackError::ZeroDeadline => f.write_str("a deadline must be positive (no deadline: launch without one)"),
        }
    }
}

impl core::error::Error for PackError {}

/// Default pra 0 capacity in slots: the v2 header, 15 buffers and 48 scalars.
pub const DEFAULT_SLOTS: usize = 64;

/// One packed kernel launch: pra 0 (header, buffer lengths, scalars), pra 1 (view records),
/// pra 2 (the timer), and the buffers' fds, in fixed capacity (`SLOTS` slots of pra 0).
///
/// Only what the launch uses is written: the storage is a set of fixed-capacity vectors (no
/// heap) that grow as the launch is packed, so a launch of two buffers writes two buffer slots
/// and two view records, never the unused capacity. [`repack`](Self::repack) packs another
/// launch into the same value (no move of the storage).
///
/// It borrows every buffer it references for `'a`, and [`invoke_args`](Self::invoke_args)
/// borrows the packed storage for as long as the [`Call`] lives, so neither a lease nor
/// the argument bytes can go away before the ioctl that uses them has returned:
///
/// ```compile_fail,E0505
/// # use hexrpc_runtime::launch::*;
/// # use hexrpc_drivers::Fd;
/// struct Lease; // stands for the object that owns the allocation
/// let lease = Lease;
/// let sig = Signature::parse("buf").unwrap();
/// let packed = {
///     let view = BufferRef::borrowing(&lease, Fd(5), 4096, 0, 64);
///     PackedLaunch::new(AbiVersion::V2, &sig, &[view], &[]).unwrap()
/// };
/// drop(lease); // error[E0505]: cannot move out of `lease` because it is borrowed
/// let _ = packed.pra0();
/// ```
#[derive(Clone)]
pub struct PackedLaunch<'a, const SLOTS: usize = DEFAULT_SLOTS> {
    layout: &'static LaunchLayout,
    scalars: u8,
    /// pra 0, one slot at a time (header slots, buffer slots, scalar slots).
    slots: Vec<[u8; SLOT_SIZE], SLOTS>,
    /// pra 1: the view records, `layout.view_record_size` bytes each.
    views: Vec<u8, { VIEW_RECORD_CAP * MAX_BUFFERS }>,
    timer: [u8; 8],
    /// The ioctl's argument arrays, holding the buffers' share fds as output handles (written
    /// when the launch is packed; the buffer entries are written at each [`launch`](Self::launch)).
    frame: LaunchFrame<FIRST_HANDLE, MAX_ARGS>,
    /// Each buffer's lease length (the upstream driver maps a handle with its length).
    lease_lens: Vec<u64, MAX_BUFFERS>,
    _buffers: PhantomData<&'a ()>,
}

/// The largest pra 1 record of any version (v2's: view offset and lease length).
const VIEW_RECORD_CAP: usize = 8;
const _: () = assert!(super::abi::V1.view_record_size <= VIEW_RECORD_CAP && super::abi::V2.view_record_size <= VIEW_RECORD_CAP);

/// `v` placed at byte `offset` of a little-endian 8-byte word (the layout's offsets inside a
/// slot or record: a 4-byte field at 0 or 4, a scalar at 0; checked by the table's asserts).
#[inline(always)]
fn at(offset: usize, v: u64) -> u64 {
    v << (8 * (offset & 7))
}

impl<'a> PackedLaunch<'a> {
    /// [`pack`](Self::pack) with the default capacity ([`DEFAULT_SLOTS`]).
    #[inline(always)]
    pub fn new(version: AbiVersion, sig: &Signature, buffers: &[BufferRef<'a>], scalars: &[Scalar]) -> Result<Self, PackError> {
        Self::pack(version, sig, buffers, scalars)
    }

    /// The launch of a kernel without parameters for `version` (what [`pack`](Self::pack) gives
    /// for the empty signature): storage to [`repack`](Self::repack) into. A hot path declares
    /// it and repacks it in place, `let mut p = PackedLaunch::empty(v); p.repack(..)?;`, which
    /// builds the value where it lives; the `Result` of `pack` is moved out of (the whole
    /// capacity is copied, about 1 KiB).
    #[inline(always)]
    pub fn empty(version: AbiVersion) -> Self {
        Self::blank(version)
    }
}

/// Checks each scalar's type against the signature's (the counts agree: checked before). The
/// signature's parameters after its buffers are its scalars (`Signature` keeps buffers first),
/// so they are compared directly, with no filtering iterator.
#[inline(always)]
pub(super) fn check_scalar_types(sig: &Signature, scalars: &[Scalar]) -> Result<(), PackError> {
    let params = sig.params().get(sig.buffers()..).unwrap_or(&[]);
    for (index, (s, p)) in scalars.iter().zip(params).enumerate() {
        if *p != ParamKind::Scalar(s.ty()) {
            let expected = match *p {
                ParamKind::Scalar(t) => t,
                // Not after the buffers (`Signature` keeps them first).
                ParamKind::Buffer => s.ty(),
            };
            return Err(PackError::ScalarType { index, expected, got: s.ty() });
        }
    }
    Ok(())
}

/// Checks a launch against its signature and the version's limits (every refusal of the packer).
#[inline(always)]
fn check<const SLOTS: usize>(
    layout: &LaunchLayout,
    sig: &Signature,
    buffers: &[BufferRef<'_>],
    scalars: &[Scalar],
) -> Result<(), PackError> {
    let n = buffers.len();
    if n > layout.max_buffers {
        return Err(PackError::TooManyBuffers { count: n });
    }
    if n != sig.buffers() {
        return Err(PackError::BufferCount { expected: sig.buffers(), got: n });
    }
    if scalars.len() != sig.scalars() {
        return Err(PackError::ScalarCount { expected: sig.scalars(), got: scalars.len() });
    }
    let slots = layout.slots(n, scalars.len());
    if slots > SLOTS {
        return Err(PackError::TooManyScalars { slots, capacity: SLOTS });
    }
    check_scalar_types(sig, scalars)?;
    for (buffer, b) in buffers.iter().enumerate() {
        if b.fd.0 <= 0 {
            return Err(PackError::NoFd { buffer });
        }
        if b.offset != 0 && !layout.allows_view_offset {
            return Err(PackError::V1NonZeroOffset { buffer, offset: b.offset });
        }
        if b.len > layout.max_view_len {
            return Err(PackError::ViewTooLong { buffer, len: b.len, max: layout.max_view_len });
        }
        match b.offset.checked_add(b.len) {
            Some(end) if end <= b.lease_len => {}
            _ => return Err(PackError::ViewOutsideLease { buffer }),
        }
        if layout.lease_len_at.is_some() && b.lease_len > layout.max_lease_len {
            return Err(PackError::LeaseTooLong { buffer, len: b.lease_len, max: layout.max_lease_len });
        }
    }
    Ok(())
}

impl<'a, const SLOTS: usize> PackedLaunch<'a, SLOTS> {
    /// Packs a launch of a kernel with signature `sig` on `buffers` and `scalars` for `version`.
    #[inline(always)]
    pub fn pack(version: AbiVersion, sig: &Signature, buffers: &[BufferRef<'a>], scalars: &[Scalar]) -> Result<Self, PackError> {
        let mut p = Self::blank(version);
        p.repack(version, sig, buffers, scalars)?;
        Ok(p)
    }

    /// The launch of the empty signature, built as one value (no local that is filled and then
    /// moved: that move would copy the whole capacity).
    #[inline(always)]
    fn blank(version: AbiVersion) -> Self {
        let layout = version.layout();
        PackedLaunch {
            layout,
            scalars: 0,
            slots: Self::header_of(layout, 0),
            views: Vec::new(),
            timer: [0; 8],
            frame: LaunchFrame::new(),
            lease_lens: Vec::new(),
            _buffers: PhantomData,
        }
    }

    /// pra 0 holding only the header slots of a launch of `n` buffers.
    #[inline(always)]
    fn header_of(layout: &LaunchLayout, n: usize) -> Vec<[u8; SLOT_SIZE], SLOTS> {
        let mut slots = Vec::new();
        for _ in 0..layout.header_slots {
            let _ = slots.push(Self::header_word(layout, n).to_le_bytes());
        }
        slots
    }

    /// One header slot of a launch of `n` buffers.
    #[inline(always)]
    fn header_word(layout: &LaunchLayout, n: usize) -> u64 {
        match layout.magic {
            Some(magic) => at(layout.magic_at, u64::from(magic)) | at(layout.count_at, n as u64),
            None => 0,
        }
    }

    /// Packs another launch into this value, as [`pack`](Self::pack) does, without moving the
    /// storage (what a caller that launches in a loop uses). On a refusal the value is left as
    /// it was.
    #[inline]
    pub fn repack(&mut self, version: AbiVersion, sig: &Signature, buffers: &[BufferRef<'a>], scalars: &[Scalar]) -> Result<(), PackError> {
        // One body per version, with its layout a constant: every offset and limit folds into
        // the code (the hot path is a few stores per slot).
        match version {
            AbiVersion::V1 => self.repack_with::<false>(sig, buffers, scalars),
            AbiVersion::V2 => self.repack_with::<true>(sig, buffers, scalars),
        }
    }

    /// `V2`: the layout as a compile-time choice, so each instantiation reads constants.
    #[inline(always)]
    fn repack_with<const V2: bool>(&mut self, sig: &Signature, buffers: &[BufferRef<'a>], scalars: &[Scalar]) -> Result<(), PackError> {
        let layout: &'static LaunchLayout = if V2 { &super::abi::V2 } else { &super::abi::V1 };
        check::<SLOTS>(layout, sig, buffers, scalars)?;
        self.fill(layout, buffers, scalars);
        Ok(())
    }

    /// Writes a checked launch: exactly the slots, view records and handles it uses.
    #[inline(always)]
    fn fill(&mut self, layout: &'static LaunchLayout, buffers: &[BufferRef<'a>], scalars: &[Scalar]) {
        let n = buffers.len();
        self.layout = layout;
        self.scalars = scalars.len() as u8;
        self.timer = [0; 8];
        let mut slots = self.slots.rewrite();
        let mut handles = self.frame.handles();
        let mut lease_lens = self.lease_lens.rewrite();
        let mut views = self.views.rewrite();
        // `check` bounded every count by the capacities, so no push below can fail; a failure
        // would leave a shorter (and so refused by the DSP) launch, never a panic. Each slot and
        // record is composed as one little-endian word and stored whole (composing it byte by
        // byte in memory and reading it back stalls store forwarding on every slot).
        for _ in 0..layout.header_slots {
            let _ = slots.push(Self::header_word(layout, n).to_le_bytes());
        }
        for b in buffers {
            // Checked against max_view_len / max_lease_len, both <= u32::MAX.
            let mut slot = at(layout.buffer_len_at, b.len & 0xffff_ffff);
            if let Some(id_at) = layout.lease_id_at {
                slot |= at(id_at, u64::from(b.id));
            }
            let _ = slots.push(slot.to_le_bytes());
            let mut record = at(layout.view_offset_at, b.offset & 0xffff_ffff);
            if let Some(lease_at) = layout.lease_len_at {
                record |= at(lease_at, b.lease_len & 0xffff_ffff);
            }
            let _ = views.extend_from_slice(&record.to_le_bytes()[..layout.view_record_size]);
            let _ = handles.push(b.fd, layout.handle_attr);
            let _ = lease_lens.push(b.lease_len);
        }
        for s in scalars {
            // `bits` is the value zero-extended from its width: the rest of the slot is zero.
            let _ = slots.push(at(layout.scalar_at, s.bits()).to_le_bytes());
        }
    }

    /// The version this launch was packed for.
    pub fn version(&self) -> AbiVersion {
        self.layout.version
    }
    /// The layout this launch was packed with.
    pub fn layout(&self) -> &'static LaunchLayout {
        self.layout
    }
    /// Number of buffers.
    pub fn buffer_count(&self) -> usize {
        self.frame.handle_count()
    }
    /// Number of scalars.
    pub fn scalar_count(&self) -> usize {
        self.scalars as usize
    }
    /// The scalars word the launch is sent with.
    pub fn scalars_word(&self) -> Scalars {
        match self.layout.scalars(self.buffer_count()) {
            Some(sc) => sc,
            // Unreachable: `pack` refuses more than `max_buffers` buffers.
            None => Scalars::from_raw(0),
        }
    }
    /// The bytes of pra 0, as sent.
    pub fn pra0(&self) -> &[u8] {
        self.slots.as_flattened()
    }
    /// The bytes of pra 1, as sent.
    pub fn pra1(&self) -> &[u8] {
        &self.views
    }
    /// The bytes of pra 2 (the timer the DSP writes back).
    pub fn pra2(&self) -> &[u8] {
        &self.timer[..self.layout.timer_len]
    }
    /// The buffers' share fds, in handle order.
    pub fn fds(&self) -> &[Fd] {
        self.frame.handle_fds()
    }

    /// The call (driver-neutral, for [`Library::invoke`](hexrpc_hal::Library::invoke)): pra 0
    /// and pra 1 as input buffers, pra 2 as the output buffer, each buffer's fd as an output
    /// handle with `FASTRPC_ATTR_NOVA` and its lease length (which only the upstream driver
    /// sends). It borrows this launch (and so, through `'a`, every buffer) until it is dropped.
    pub fn invoke_args(&mut self) -> Result<Call<'_, MAX_ARGS>, ArgsError> {
        let layout = self.layout;
        // Filled where it was built and returned as it is (no moves of the list).
        let mut call = Call::new(layout.method);
        if let Ok(args) = call.as_mut() {
            args.input(self.slots.as_flattened())?;
            args.input(&self.views)?;
            args.output(&mut self.timer[..layout.timer_len])?;
            for (fd, len) in self.frame.handle_fds().iter().zip(&self.lease_lens) {
                args.out_handle_sized(*fd, layout.handle_attr, *len)?;
            }
        }
        call
    }

    /// Sends the launch with `FASTRPC_IOCTL_INVOKE_ATTRS` to library `handle` on the adsprpc fd
    /// `dev`, and returns the DSP microseconds the entry measured around the kernel call.
    /// One ioctl; nothing is allocated. The handle entries of the argument arrays were written
    /// when the launch was packed; only the three buffer entries are written here.
    #[inline]
    pub fn launch<S: Syscalls + ?Sized>(&mut self, sys: &S, dev: Fd, handle: u32) -> Result<u64, Error> {
        self.timer = [0; 8];
        let layout = self.layout;
        let ins = [self.slots.as_flattened(), &self.views[..]];
        self.frame.invoke_attrs(sys, dev, handle, layout.method, ins, [&mut self.timer[..layout.timer_len]])?;
        Ok(self.dsp_micros())
    }

    /// The DSP microseconds from pra 2 (valid after a successful call; 0 before, or if the DSP
    /// did not write it).
    pub fn dsp_micros(&self) -> u64 {
        u64::from_le_bytes(self.timer)
    }
}

impl<const SLOTS: usize> fmt::Debug for PackedLaunch<'_, SLOTS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedLaunch")
            .field("version", &self.layout.version)
            .field("sc", &self.scalars_word())
            .field("pra0", &self.pra0())
            .field("pra1", &self.pra1())
            .field("fds", &self.fds())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::abi::{V1, V2, V2_MAGIC};
    use hexrpc_drivers::adsprpc::FASTRPC_ATTR_NOVA;

    fn sig(s: &str) -> Signature {
        Signature::parse(s).unwrap()
    }

    #[test]
    fn v2_packs_per_the_card() {
        let owner = ();
        let bufs = [BufferRef::borrowing(&owner, Fd(7), 8192, 4096, 100), BufferRef::borrowing(&owner, Fd(8), 64, 0, 64)];
        let sc = [Scalar::I32(-3), Scalar::F32(2.0)];
        let mut p = PackedLaunch::new(AbiVersion::V2, &sig("buf,buf,i32,f32"), &bufs, &sc).unwrap();
        let mut want0 = [0u8; 40];
        want0[0..4].copy_from_slice(&V2_MAGIC.to_le_bytes());
        want0[4] = 2;
        want0[8..12].copy_from_slice(&100u32.to_le_bytes());
        want0[16..20].copy_from_slice(&64u32.to_le_bytes());
        want0[24..28].copy_from_slice(&(-3i32).to_le_bytes());
        want0[32..36].copy_from_slice(&2.0f32.to_bits().to_le_bytes());
        assert_eq!(p.pra0(), &want0);
        let want1: [u8; 16] = [0, 16, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0];
        assert_eq!(p.pra1(), &want1);
        assert_eq!(p.scalars_word().raw(), 0x0202_0102);
        let pra0_ptr = p.pra0().as_ptr() as u64;
        {
            let mut call = p.invoke_args().unwrap();
            let args = call.to_downstream().unwrap();
            assert_eq!(args.scalars().raw(), 0x0202_0102);
            assert_eq!(args.fds(), &[-1, -1, -1, 7, 8]);
            assert_eq!(args.attrs(), &[0, 0, 0, FASTRPC_ATTR_NOVA, FASTRPC_ATTR_NOVA]);
            assert_eq!(args.pra()[0].buf().pv, pra0_ptr);
            assert_eq!((args.pra()[0].buf().len, args.pra()[1].buf().len, args.pra()[2].buf().len), (40, 16, 8));
        }
        // Round trip through the table's decoders.
        assert_eq!(V2.header(p.pra0()), Some((V2_MAGIC, 2)));
        assert_eq!(V2.view(p.pra1(), 0), Some((4096, Some(8192))));
        assert_eq!(V2.buffer_len(p.pra0(), 1), Some(64));
        assert_eq!(V2.scalar(p.pra0(), 2, 1, ScalarType::F32), Some(Scalar::F32(2.0)));
    }

    #[test]
    fn v1_packs_like_tinygrad() {
        let owner = ();
        let bufs = [BufferRef::borrowing(&owner, Fd(3), 256, 0, 256)];
        let p = PackedLaunch::new(AbiVersion::V1, &sig("buf,u8"), &bufs, &[Scalar::U8(9)]).unwrap();
        assert_eq!(p.pra0(), &[0, 1, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p.pra1(), &[0, 0, 0, 0]);
        assert_eq!(V1.buffer_len(p.pra0(), 0), Some(256));
        assert_eq!(p.fds(), &[Fd(3)]);
    }

    #[test]
    fn repack_writes_the_same_bytes_as_pack_and_a_refusal_changes_nothing() {
        let owner = ();
        let big = [BufferRef::borrowing(&owner, Fd(7), 8192, 4096, 100), BufferRef::borrowing(&owner, Fd(8), 64, 0, 64)];
        let small = [BufferRef::borrowing(&owner, Fd(3), 256, 0, 256)];
        let s_big = sig("buf,buf,i32,f32");
        let s_small = sig("buf,u8");
        let mut p = PackedLaunch::new(AbiVersion::V2, &s_big, &big, &[Scalar::I32(-3), Scalar::F32(2.0)]).unwrap();
        p.repack(AbiVersion::V1, &s_small, &small, &[Scalar::U8(9)]).unwrap();
        let fresh = PackedLaunch::new(AbiVersion::V1, &s_small, &small, &[Scalar::U8(9)]).unwrap();
        assert_eq!((p.pra0(), p.pra1(), p.fds(), p.version()), (fresh.pra0(), fresh.pra1(), fresh.fds(), AbiVersion::V1));
        assert_eq!(p.scalars_word(), fresh.scalars_word());
        let before = (p.pra0().to_vec(), p.pra1().to_vec(), p.fds().to_vec());
        let offset = [BufferRef::borrowing(&owner, Fd(3), 256, 8, 8)];
        assert_eq!(p.repack(AbiVersion::V1, &s_small, &offset, &[Scalar::U8(1)]), Err(PackError::V1NonZeroOffset { buffer: 0, offset: 8 }));
        assert_eq!((p.pra0().to_vec(), p.pra1().to_vec(), p.fds().to_vec()), before);
        // Back to the larger launch: every byte of it is written again.
        p.repack(AbiVersion::V2, &s_big, &big, &[Scalar::I32(-3), Scalar::F32(2.0)]).unwrap();
        let again = PackedLaunch::new(AbiVersion::V2, &s_big, &big, &[Scalar::I32(-3), Scalar::F32(2.0)]).unwrap();
        assert_eq!((p.pra0(), p.pra1(), p.fds()), (again.pra0(), again.pra1(), again.fds()));
    }

    #[test]
    fn empty_is_the_launch_of_the_empty_signature() {
        for v in [AbiVersion::V1, AbiVersion::V2] {
            let e = PackedLaunch::empty(v);
            let p = PackedLaunch::new(v, &sig(""), &[], &[]).unwrap();
            assert_eq!((e.pra0(), e.pra1(), e.fds(), e.scalars_word()), (p.pra0(), p.pra1(), p.fds(), p.scalars_word()));
        }
        assert_eq!(PackedLaunch::empty(AbiVersion::V2).pra0(), &[0x48, 0x52, 0x58, 0x32, 0, 0, 0, 0]);
    }

    #[test]
    fn refusals_are_typed() {
        let o = ();
        let b = |fd, lease, off, len| BufferRef::borrowing(&o, Fd(fd), lease, off, len);
        let s1 = sig("buf");
        let pack = |v, s: &Signature, bs: &[BufferRef<'_>], sc: &[Scalar]| PackedLaunch::<'_, 8>::pack(v, s, bs, sc).map(|_| ());
        assert_eq!(pack(AbiVersion::V1, &s1, &[b(3, 100, 4, 8)], &[]), Err(PackError::V1NonZeroOffset { buffer: 0, offset: 4 }));
        assert_eq!(pack(AbiVersion::V2, &s1, &[b(3, 100, 4, 8)], &[]), Ok(()));
        let big = 1u64 << 31;
        assert_eq!(
            pack(AbiVersion::V1, &s1, &[b(3, big, 0, big)], &[]),
            Err(PackError::ViewTooLong { buffer: 0, len: big, max: (1 << 31) - 1 })
        );
        assert_eq!(pack(AbiVersion::V2, &s1, &[b(3, big, 0, big)], &[]), Ok(()));
        let huge = 1u64 << 32;
        assert_eq!(
            pack(AbiVersion::V2, &s1, &[b(3, huge, 0, huge)], &[]),
            Err(PackError::ViewTooLong { buffer: 0, len: huge, max: u32::MAX as u64 })
        );
        assert_eq!(
            pack(AbiVersion::V2, &s1, &[b(3, huge, 0, 16)], &[]),
            Err(PackError::LeaseTooLong { buffer: 0, len: huge, max: u32::MAX as u64 })
        );
        assert_eq!(pack(AbiVersion::V2, &s1, &[b(3, 100, 90, 11)], &[]), Err(PackError::ViewOutsideLease { buffer: 0 }));
        assert_eq!(pack(AbiVersion::V2, &s1, &[b(3, 100, u64::MAX, 2)], &[]), Err(PackError::ViewOutsideLease { buffer: 0 }));
        assert_eq!(pack(AbiVersion::V2, &s1, &[b(0, 100, 0, 2)], &[]), Err(PackError::NoFd { buffer: 0 }));
        assert_eq!(pack(AbiVersion::V2, &s1, &[], &[]), Err(PackError::BufferCount { expected: 1, got: 0 }));
        let sixteen = [b(3, 1, 0, 1); 16];
        assert_eq!(pack(AbiVersion::V2, &s1, &sixteen, &[]), Err(PackError::TooManyBuffers { count: 16 }));
        let si = sig("buf,i32");
        assert_eq!(pack(AbiVersion::V2, &si, &[b(3, 1, 0, 1)], &[]), Err(PackError::ScalarCount { expected: 1, got: 0 }));
        assert_eq!(
            pack(AbiVersion::V2, &si, &[b(3, 1, 0, 1)], &[Scalar::U32(1)]),
            Err(PackError::ScalarType { index: 0, expected: ScalarType::I32, got: ScalarType::U32 })
        );
        // Capacity 8 slots: v2 header + 1 buffer + 6 scalars fits, 7 does not; v1 fits one more.
        let s7 = sig("buf,u8,u8,u8,u8,u8,u8,u8");
        let seven = [Scalar::U8(1); 7];
        assert_eq!(pack(AbiVersion::V2, &s7, &[b(3, 1, 0, 1)], &seven), Err(PackError::TooManyScalars { slots: 9, capacity: 8 }));
        assert_eq!(pack(AbiVersion::V1, &s7, &[b(3, 1, 0, 1)], &seven), Ok(()));
    }
}
