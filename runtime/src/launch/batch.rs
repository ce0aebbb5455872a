//! Batched launches: K kernel launches of one library in one FastRPC call ([`BATCH`]).
//!
//! A [`Batch`] is built once against the library's kernel table (the signatures, in table
//! order): each [`push`](Batch::push) checks one launch against its kernel's signature exactly as
//! [`PackedLaunch`](super::PackedLaunch) does, deduplicates its leases into the batch's lease
//! table (a lease is its share fd; the same fd must always come with the same lease length) and
//! appends its record. Scalars can be changed between runs with
//! [`set_scalar`](Batch::set_scalar); views are fixed. [`run`](Batch::run) (or
//! [`launch`](Batch::launch) on a raw descriptor) is one ioctl. Everything lives in fixed
//! capacity inside the value: no heap, in building or running. That makes the value large
//! ([`BATCH_VALUE_BYTES`], about 66 KiB: the 64 KiB of record bytes a batch of
//! [`MAX_BATCH_LAUNCHES`] launches needs); see [`Batch`] for where to keep one.
//!
//! Every call returns the runtime's [`Error`]. Every refusal
//! ([`Error::Batch`] with a [`BatchRefusal`]) happens before any system
//! call; a refused `push` leaves the batch as it was. A batch that was sent but did not complete
//! is [`Error::BatchRun`] with a [`BatchFailure`].

use core::borrow::BorrowMut;
use core::fmt;
use core::marker::PhantomData;

use hexrpc_drivers::adsprpc::{invoke_attrs, ArgsError};
use hexrpc_drivers::fixed::FixedVec as Vec;
use hexrpc_drivers::{Error as DriverError, Fd, Scalars, Syscalls};
use hexrpc_hal::{Call, Cause, HalError, Library, Stage};
use zerocopy::FromZeros;

use super::abi::{
    BatchLayout, BatchStatus, BATCH, MAX_ARGS, MAX_BATCH_KERNELS, MAX_BATCH_LAUNCHES, MAX_BATCH_LEASES, MAX_BATCH_RECORD_BYTES,
    NO_FAILED_RECORD, V2,
};
use super::batch_error::{BatchFailure, BatchRefusal};
use super::pack::{BufferRef, LaunchBuffer, PackError};
use super::scalar::Scalar;
use super::signature::Signature;
use crate::Error;

/// The error of a call made on a raw descriptor ([`Batch::launch`]): the driver's, read as the
/// HAL reads it (stage `invoke`).
fn driver_error(e: DriverError) -> Error {
    Error::Hal(HalError { stage: Stage::Invoke, cause: Cause::from_sys(e) })
}

/// The argument list did not fit the driver-neutral call (never for a batch built here).
const ARGS_INVALID: Error = Error::Hal(HalError { stage: Stage::Invoke, cause: Cause::Invalid });

#[derive(Clone, Copy, Debug, Default, FromZeros)]
struct RecordInfo {
    /// Byte offset of the record in pra 0 (below `PRA0_CAP`).
    at: u32,
    /// Its kernel index (below `MAX_BATCH_KERNELS`).
    kernel: u16,
}

const PRA0_CAP: usize = 16 + MAX_BATCH_RECORD_BYTES;

// Every record offset and kernel index fits its field in `RecordInfo`; every lease index the u8
// of the view entries' staging array.
const _: () = assert!(PRA0_CAP <= u32::MAX as usize && MAX_BATCH_KERNELS <= u16::MAX as usize + 1 && MAX_BATCH_LEASES <= u8::MAX as usize);

/// What a completed batch reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BatchRun {
    /// Records run (all of them).
    pub launches: usize,
    /// DSP microseconds summed over the kernel calls, as the entry measured them.
    pub dsp_micros: u64,
}

/// K launches of one library's kernels, packed once, sent in one call (see the module docs).
///
/// The value holds its pra 0 inline: [`BATCH_VALUE_BYTES`] bytes (about 66 KiB). Keep it where
/// it is built (returning or moving a built batch copies all of it: about 2 µs, where building
/// a 5-record batch in place takes a few hundred ns), on a thread with a stack of ordinary size
/// (a Rust thread's 2 MiB, a process's main thread), or in a `Box`; not on a small stack (a
/// thread created with 64 KiB, an embedded task).
///
/// It borrows every buffer it references and the kernel table for `'a`, so no lease can be
/// freed while the batch can still be sent:
///
/// ```compile_fail,E0505
/// # use hexrpc_runtime::launch::*;
/// # use hexrpc_drivers::Fd;
/// struct Lease; // stands for the object that owns the allocation
/// let lease = Lease;
/// let sigs = [Signature::parse("buf").unwrap()];
/// let mut batch = Batch::new(&sigs).unwrap();
/// batch.push(0, &[BufferRef::borrowing(&lease, Fd(5), 4096, 0, 64)], &[]).unwrap();
/// drop(lease); // error[E0505]: cannot move out of `lease` because it is borrowed
/// let _ = batch.pra0();
/// ```
#[derive(Clone)]
pub struct Batch<'a, S: BorrowMut<BatchSpace> = BatchSpace> {
    kernels: &'a [Signature],
    space: S,
    _buffers: PhantomData<&'a ()>,
}

/// Where a [`Batch`] keeps its records: its pra 0 (16 + [`MAX_BATCH_RECORD_BYTES`] bytes), pra 1,
/// status and the per-record and per-lease state; nearly all of [`BATCH_VALUE_BYTES`].
///
/// A [`Batch::new`] holds one inline. [`Batch::in_space`] uses one kept elsewhere (a
/// `Box<BatchSpace>`, a `&mut BatchSpace` in a static or a task's memory), so building, pushing
/// and running use a few hundred bytes of the caller's stack, not 66 KiB. All-zero bytes are an
/// empty space ([`FromZeros`]): with an allocator, `BatchSpace::new_box_zeroed()` makes one on
/// the heap without passing it through the stack. A space is reset by `in_space`, so one can be
/// kept and reused for batch after batch.
#[derive(Clone, FromZeros)]
pub struct BatchSpace {
    /// pra 0: the header, then the records; grows as launches are pushed (nothing beyond the
    /// records is ever written).
    pra0: Vec<u8, PRA0_CAP>,
    /// pra 1: one entry per lease.
    pra1: Vec<u8, { 8 * MAX_BATCH_LEASES }>,
    status: [u8; 24],
    fds: Vec<Fd, MAX_BATCH_LEASES>,
    lease_lens: Vec<u64, MAX_BATCH_LEASES>,
    /// Each lease's id ([`LaunchBuffer::lease_id`](super::LaunchBuffer::lease_id)); written into
    /// pra 1 only for a library built with the map cache (others require 0 there).
    ids: Vec<u32, MAX_BATCH_LEASES>,
    /// Whether pra 1 carries the ids now.
    ids_sent: bool,
    records: Vec<RecordInfo, MAX_BATCH_LAUNCHES>,
}

impl BatchSpace {
    /// An empty space on the heap, made there in zeroed memory (never on the stack): what
    /// [`Batch::in_space`] takes for a batch on a thread with a small stack. Aborts as `Box::new`
    /// does if the allocator fails.
    #[cfg(feature = "std")]
    pub fn boxed() -> std::boxed::Box<BatchSpace> {
        BatchSpace::new_box_zeroed().unwrap_or_else(|_| std::alloc::handle_alloc_error(core::alloc::Layout::new::<BatchSpace>()))
    }

    /// Empties the space and writes the batch header: what a new batch starts from. Writes a
    /// few words, not the capacity.
    fn reset(&mut self) {
        let mut header = [0u8; 16];
        put_u32(&mut header, BATCH.magic_at, BATCH.magic);
        self.pra0.clear();
        // The header always fits (PRA0_CAP = 16 + record bytes).
        let _ = self.pra0.extend_from_slice(&header);
        self.pra1.clear();
        self.status = [0; 24];
        self.fds.clear();
        self.lease_lens.clear();
        self.ids.clear();
        self.ids_sent = false;
        self.records.clear();
    }
}

const _: () = assert!(BATCH.lease_entry_size == 8 && BATCH.header_len == 16 && BATCH.slot_size <= 8);

/// Size of a [`Batch`] value: its pra 0 (16 + [`MAX_BATCH_RECORD_BYTES`] bytes) and a few KiB of
/// per-record and per-lease state.
pub const BATCH_VALUE_BYTES: usize = core::mem::size_of::<Batch<'static>>();

/// Size of a [`Batch`] whose records live in a [`BatchSpace`] kept elsewhere
/// ([`Batch::in_space`] with a `&mut BatchSpace`): the kernel table and the reference.
pub const BATCH_HANDLE_BYTES: usize = core::mem::size_of::<Batch<'static, &'static mut BatchSpace>>();
const _: () = assert!(BATCH_HANDLE_BYTES <= 64);

// The records' bytes are nearly all of it: the per-record and per-lease state stays under 4 KiB
// (a new field or capacity that would make the value much larger fails the build).
const _: () = assert!(BATCH_VALUE_BYTES >= PRA0_CAP && BATCH_VALUE_BYTES <= PRA0_CAP + 4096);

pub(super) fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// `v` placed at byte `offset` of a little-endian 16-byte word (a record's fields: every offset
/// plus its width is within 12 bytes, checked by the table's asserts).
#[inline(always)]
fn word(offset: usize, v: u64) -> u128 {
    u128::from(v) << (8 * (offset & 15))
}

impl<'a> Batch<'a> {
    /// An empty batch for a library whose kernel table is `kernels` (index = kernel index),
    /// holding its [`BatchSpace`] inline (see [`Batch`] for the size and [`in_space`](Batch::in_space)
    /// for a small stack).
    #[inline]
    pub fn new(kernels: &'a [Signature]) -> Result<Self, Error> {
        check_kernels(kernels)?;
        let mut batch = Batch { kernels, space: BatchSpace::new_zeroed(), _buffers: PhantomData };
        batch.space.reset();
        Ok(batch)
    }
}

/// A table of more kernels than a batch can name is refused.
fn check_kernels(kernels: &[Signature]) -> Result<(), Error> {
    if kernels.len() > MAX_BATCH_KERNELS {
        return Err(BatchRefusal::TooManyKernels { count: kernels.len() }.into());
    }
    Ok(())
}

impl<'a, S: BorrowMut<BatchSpace>> Batch<'a, S> {
    /// An empty batch for `kernels` whose records live in `space` (emptied first): a
    /// `Box<BatchSpace>` or a `&mut BatchSpace`, so the batch itself is
    /// [`BATCH_HANDLE_BYTES`] and nothing of its capacity passes through the stack. Refused as
    /// [`new`](Batch::new) is; `space` is then returned unchanged with the error.
    pub fn in_space(kernels: &'a [Signature], mut space: S) -> Result<Self, (Error, S)> {
        if let Err(e) = check_kernels(kernels) {
            return Err((e, space));
        }
        space.borrow_mut().reset();
        Ok(Batch { kernels, space, _buffers: PhantomData })
    }

    /// The space the records were kept in, to reuse for another batch.
    pub fn into_space(self) -> S {
        self.space
    }

    /// Appends a launch of kernel `kernel` on `buffers` and `scalars`; returns its record index.
    /// Checked as a single v2 launch is, then against the batch's capacity; on any refusal the
    /// batch is unchanged.
    pub fn push(&mut self, kernel: usize, buffers: &[BufferRef<'a>], scalars: &[Scalar]) -> Result<usize, Error> {
        let kernels = self.kernels;
        let sp = self.space.borrow_mut();
        let record = sp.records.len();
        let sig = kernels.get(kernel).ok_or(BatchRefusal::NoSuchKernel { kernel, kernels: kernels.len() })?;
        let refuse = |error| Error::Batch(BatchRefusal::Launch { record, error });
        if buffers.len() != sig.buffers() {
            return Err(refuse(PackError::BufferCount { expected: sig.buffers(), got: buffers.len() }));
        }
        if scalars.len() != sig.scalars() {
            return Err(refuse(PackError::ScalarCount { expected: sig.scalars(), got: scalars.len() }));
        }
        if let Err(error) = super::pack::check_scalar_types(sig, scalars) {
            return Err(refuse(error));
        }
        if record >= MAX_BATCH_LAUNCHES {
            return Err(BatchRefusal::TooManyLaunches { capacity: MAX_BATCH_LAUNCHES }.into());
        }
        // Lease indices, with the leases this launch adds appended tentatively: a refusal below
        // truncates them away again.
        let leases_before = sp.fds.len();
        let mut index = [0u8; MAX_BATCH_LEASES];
        let found = sp.lease_indices(record, buffers, &mut index);
        let len = BATCH.record_len(buffers.len(), scalars.len());
        let used = sp.pra0.len() - BATCH.header_len;
        let needed = used + len;
        let found = found.and_then(|()| {
            if needed > MAX_BATCH_RECORD_BYTES {
                return Err(BatchRefusal::RecordBytes { needed, capacity: MAX_BATCH_RECORD_BYTES }.into());
            }
            Ok(())
        });
        if let Err(e) = found {
            sp.fds.truncate(leases_before);
            sp.lease_lens.truncate(leases_before);
            sp.ids.truncate(leases_before);
            return Err(e);
        }

        // Commit: the record, written once, in order (every push below fits: checked above).
        // Each field group is composed as one little-endian word and stored whole (composing it
        // byte by byte and reading it back stalls store forwarding).
        let at = sp.pra0.len();
        let head = word(BATCH.kernel_at, kernel as u64)
            | word(BATCH.views_at, buffers.len() as u64)
            | word(BATCH.scalars_at, scalars.len() as u64);
        // Appended through writers, which keep the length in a register until they are dropped.
        let mut pra0 = sp.pra0.append();
        let _ = pra0.extend_from_slice(&head.to_le_bytes()[..BATCH.record_header_len]);
        for (b, lease) in buffers.iter().zip(index) {
            // Checked above against the v2 limits (u32).
            let e = word(BATCH.view_lease_at, u64::from(lease))
                | word(BATCH.view_offset_at, b.view_offset() & 0xffff_ffff)
                | word(BATCH.view_len_at, b.view_len() & 0xffff_ffff);
            let _ = pra0.extend_from_slice(&e.to_le_bytes()[..BATCH.view_size]);
        }
        for s in scalars {
            // `bits` is the value zero-extended from its width: the rest of the slot is zero.
            let _ = pra0.extend_from_slice(&s.bits().to_le_bytes()[..BATCH.slot_size]);
        }
        drop(pra0);
        let mut pra1 = sp.pra1.append();
        for (len, id) in sp.lease_lens[leases_before..].iter().zip(&sp.ids[leases_before..]) {
            let id = if sp.ids_sent { *id } else { 0 };
            let e = word(BATCH.lease_len_at, *len & 0xffff_ffff) | word(BATCH.lease_id_at, u64::from(id));
            let _ = pra1.extend_from_slice(&e.to_le_bytes()[..BATCH.lease_entry_size]);
        }
        drop(pra1);
        let _ = sp.records.push(RecordInfo { at: at as u32, kernel: kernel as u16 });
        let (count, leases) = (sp.records.len() as u32, sp.fds.len() as u32);
        put_u32(&mut sp.pra0, BATCH.count_at, count);
        put_u32(&mut sp.pra0, BATCH.leases_at, leases);
        put_u32(&mut sp.pra0, BATCH.bytes_at, needed as u32);
        Ok(record)
    }

    /// Replaces scalar `index` of record `record` (same type as the kernel's signature says).
    pub fn set_scalar(&mut self, record: usize, index: usize, value: Scalar) -> Result<(), Error> {
        let kernels = self.kernels;
        let sp = self.space.borrow_mut();
        let missing = BatchRefusal::NoSuchScalar { record, index };
        let info = *sp.records.get(record).ok_or(missing)?;
        let sig = kernels.get(info.kernel as usize).ok_or(missing)?;
        let expected = sig.scalar_type(index).ok_or(missing)?;
        if value.ty() != expected {
            return Err(BatchRefusal::Launch { record, error: PackError::ScalarType { index, expected, got: value.ty() } }.into());
        }
        let e = info.at as usize + BATCH.scalar_at(sig.buffers(), index);
        sp.pra0[e..e + BATCH.slot_size].fill(0);
        sp.pra0[e..e + value.ty().size()].copy_from_slice(&value.to_le_bytes()[..value.ty().size()]);
        Ok(())
    }

    fn sp(&self) -> &BatchSpace {
        self.space.borrow()
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.sp().records.len()
    }
    /// True if the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.sp().records.is_empty()
    }
    /// Distinct leases (handle arguments, DSP maps per call).
    pub fn lease_count(&self) -> usize {
        self.sp().fds.len()
    }
    /// Record bytes used.
    pub fn record_bytes(&self) -> usize {
        self.sp().pra0.len() - BATCH.header_len
    }
    /// The kernel index of record `record`.
    pub fn kernel_of(&self, record: usize) -> Option<usize> {
        self.sp().records.get(record).map(|r| r.kernel as usize)
    }
    /// The scalars word the batch is sent with.
    pub fn scalars_word(&self) -> Scalars {
        // `leases` never exceeds MAX_BATCH_LEASES.
        BATCH.scalars(self.sp().fds.len()).unwrap_or(Scalars::from_raw(0))
    }
    /// The bytes of pra 0 (header and records), as sent.
    pub fn pra0(&self) -> &[u8] {
        &self.sp().pra0
    }
    /// The bytes of pra 1 (lease table), as sent.
    pub fn pra1(&self) -> &[u8] {
        &self.sp().pra1
    }
    /// The leases' share fds, in handle order.
    pub fn fds(&self) -> &[Fd] {
        &self.sp().fds
    }
    /// Writes the leases' ids into pra 1 (`on`: for a library built with the map cache, launch
    /// ABI method 3) or zeros (every other library: its entry refuses a non-zero reserved
    /// word). [`run`](Self::run) sets it from the library; a caller of
    /// [`launch`](Self::launch) or [`invoke_args`](Self::invoke_args) on a raw handle says it
    /// here (off by default).
    pub fn send_lease_ids(&mut self, on: bool) {
        let sp = self.space.borrow_mut();
        if sp.ids_sent == on {
            return;
        }
        sp.ids_sent = on;
        write_lease_ids(&BATCH, &mut sp.pra1, &sp.ids, on);
    }

    /// The status of the last call (`None` never: all zeros before a call).
    pub fn status(&self) -> Option<BatchStatus> {
        BATCH.status(&self.sp().status)
    }

    /// The call (driver-neutral): pra 0 and pra 1 in, the status out, one out-handle per lease
    /// (with its length, which the upstream driver needs). Clears the status first. Borrows the
    /// batch (and through `'a` every buffer) while it lives.
    pub fn invoke_args(&mut self) -> Result<Call<'_, MAX_ARGS>, ArgsError> {
        let sp = self.space.borrow_mut();
        sp.status = [0; 24];
        let BatchSpace { pra0, pra1, status, fds, lease_lens, .. } = sp;
        batch_call(pra0, pra1, status, fds, lease_lens)
    }

    /// [`invoke_args`](Self::invoke_args) with the caller's status buffer `status` (cleared
    /// first): at least [`BATCH`]`.status_len` bytes (else [`ArgsError::Range`]); with
    /// [`BATCH.timed_status_len(self.len())`](crate::launch::BatchLayout::timed_status_len) an
    /// entry that times records writes each record's microseconds after the status (read them
    /// with [`BATCH.record_micros`](crate::launch::BatchLayout::record_micros), check the run
    /// with [`outcome_of`](Self::outcome_of)).
    pub fn invoke_args_with_status<'s>(&'s mut self, status: &'s mut [u8]) -> Result<Call<'s, MAX_ARGS>, ArgsError> {
        if status.len() < BATCH.status_len {
            return Err(ArgsError::Range);
        }
        status.fill(0);
        let sp = self.space.borrow_mut();
        sp.status = [0; 24];
        let BatchSpace { pra0, pra1, fds, lease_lens, .. } = sp;
        batch_call(pra0, pra1, status, fds, lease_lens)
    }

    /// [`outcome`](Self::outcome) of a call made with
    /// [`invoke_args_with_status`](Self::invoke_args_with_status), from its status buffer.
    pub fn outcome_of(&self, status: &[u8]) -> Result<BatchRun, Error> {
        let status = BATCH.status(status).filter(BatchStatus::ran);
        decode_outcome(status, self.len(), |r| self.kernel_of(r))
    }

    /// Checks the status the entry wrote after a call that returned 0.
    pub fn outcome(&self) -> Result<BatchRun, Error> {
        let status = self.status().filter(BatchStatus::ran);
        decode_outcome(status, self.len(), |r| self.kernel_of(r))
    }

    /// Sends the batch to `lib` (one `FASTRPC_IOCTL_INVOKE_ATTRS`) and checks its status.
    pub fn run<Y: Syscalls + Clone>(&mut self, lib: &Library<'_, Y>) -> Result<BatchRun, Error> {
        if self.is_empty() {
            return Err(BatchRefusal::Empty.into());
        }
        self.send_lease_ids(lib.map_cache());
        let mut args = self.invoke_args();
        lib.invoke(args.as_mut().map_err(|_| ARGS_INVALID)?)?;
        self.outcome()
    }

    /// [`run`](Self::run) with a deadline (see `Library::invoke_with_deadline`). A zero
    /// `timeout` is refused before any system call, as a single launch's
    /// ([`PackError::ZeroDeadline`](crate::launch::PackError::ZeroDeadline)).
    #[cfg(feature = "std")]
    pub fn run_with_deadline<Y: Syscalls + Clone + Sync>(
        &mut self,
        lib: &Library<'_, Y>,
        timeout: core::time::Duration,
    ) -> Result<BatchRun, Error> {
        crate::kernel::check_deadline(timeout)?;
        if self.is_empty() {
            return Err(BatchRefusal::Empty.into());
        }
        self.send_lease_ids(lib.map_cache());
        let mut args = self.invoke_args();
        lib.invoke_with_deadline(args.as_mut().map_err(|_| ARGS_INVALID)?, timeout)?;
        self.outcome()
    }

    /// Sends the batch to library `handle` on the adsprpc fd `dev` (one ioctl) and checks its
    /// status.
    pub fn launch<Y: Syscalls + ?Sized>(&mut self, sys: &Y, dev: Fd, handle: u32) -> Result<BatchRun, Error> {
        if self.is_empty() {
            return Err(BatchRefusal::Empty.into());
        }
        let mut call = self.invoke_args();
        let call = call.as_mut().map_err(|_| ARGS_INVALID)?;
        call.with_downstream(|args| invoke_attrs(sys, dev, handle, args)).map_err(|_| ARGS_INVALID)?.map_err(driver_error)?;
        self.outcome()
    }
}

impl BatchSpace {
    /// Checks every buffer of a launch and finds its lease index, appending the leases not yet
    /// in the batch to `fds` / `lease_lens` (the caller truncates them away on a refusal).
    fn lease_indices(&mut self, record: usize, buffers: &[BufferRef<'_>], index: &mut [u8; MAX_BATCH_LEASES]) -> Result<(), Error> {
        let refuse = |error| Error::Batch(BatchRefusal::Launch { record, error });
        for (buffer, b) in buffers.iter().enumerate() {
            let (fd, lease, off, len, id) = (b.share_fd(), b.lease_len(), b.view_offset(), b.view_len(), b.lease_id());
            if fd.0 <= 0 {
                return Err(refuse(PackError::NoFd { buffer }));
            }
            if len > V2.max_view_len {
                return Err(refuse(PackError::ViewTooLong { buffer, len, max: V2.max_view_len }));
            }
            match off.checked_add(len) {
                Some(end) if end <= lease => {}
                _ => return Err(refuse(PackError::ViewOutsideLease { buffer })),
            }
            if lease > V2.max_lease_len {
                return Err(refuse(PackError::LeaseTooLong { buffer, len: lease, max: V2.max_lease_len }));
            }
            if lease == 0 {
                return Err(refuse(PackError::ViewOutsideLease { buffer }));
            }
            // A launch has at most MAX_BUFFERS (= MAX_BATCH_LEASES) buffers: checked against
            // the signature, whose buffers are bounded the same way.
            let slot = index.get_mut(buffer).ok_or(refuse(PackError::TooManyBuffers { count: buffers.len() }))?;
            *slot = match self.fds.iter().position(|f| *f == fd) {
                Some(l) if self.lease_lens[l] == lease && self.ids[l] == id => l as u8,
                Some(_) => return Err(BatchRefusal::LeaseMismatch { record, buffer }.into()),
                None => {
                    let l = self.fds.len();
                    if self.fds.push(fd).is_err() || self.lease_lens.push(lease).is_err() || self.ids.push(id).is_err() {
                        return Err(BatchRefusal::TooManyLeases { capacity: MAX_BATCH_LEASES }.into());
                    }
                    l as u8
                }
            };
        }
        Ok(())
    }
}

/// Writes each lease's id into its entry of the lease table `pra1` (`on`), or zeros (a library
/// without the map cache requires them). Shared by batches and programs (the same table).
pub(super) fn write_lease_ids(layout: &BatchLayout, pra1: &mut [u8], ids: &[u32], on: bool) {
    for (l, id) in ids.iter().enumerate() {
        put_u32(pra1, l * layout.lease_entry_size + layout.lease_id_at, if on { *id } else { 0 });
    }
}

/// A batch's call: pra 0 and pra 1 in, `status` out, one out-handle per lease with its length.
/// Filled where it was built and returned as it is (no moves of the list).
fn batch_call<'s>(pra0: &'s [u8], pra1: &'s [u8], status: &'s mut [u8], fds: &[Fd], lens: &[u64]) -> Result<Call<'s, MAX_ARGS>, ArgsError> {
    let mut call = Call::new(BATCH.method);
    if let Ok(args) = call.as_mut() {
        args.input(pra0)?;
        args.input(pra1)?;
        args.output(status)?;
        for (fd, len) in fds.iter().zip(lens) {
            args.out_handle_sized(*fd, BATCH.handle_attr, *len)?;
        }
    }
    call
}

/// What a status says of a call that returned 0, for `launches` records (`status` `None`: the
/// entry wrote none of its kind, so it ran nothing): the run, or why it did not complete. Shared
/// by batches and programs (the same status).
pub(super) fn decode_outcome(
    status: Option<BatchStatus>,
    launches: usize,
    kernel_of: impl Fn(usize) -> Option<usize>,
) -> Result<BatchRun, Error> {
    let status = status.ok_or(BatchFailure::NotRun)?;
    let done = status.done as usize;
    if status.failed == NO_FAILED_RECORD {
        if done != launches {
            return Err(BatchFailure::BadStatus { status }.into());
        }
        return Ok(BatchRun { launches: done, dsp_micros: status.micros });
    }
    let record = status.failed as usize;
    match kernel_of(record) {
        Some(kernel) if record == done && status.code != 0 => {
            Err(BatchFailure::KernelFailed { record, kernel, code: status.code, done }.into())
        }
        _ => Err(BatchFailure::BadStatus { status }.into()),
    }
}

impl<S: BorrowMut<BatchSpace>> fmt::Debug for Batch<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("launches", &self.len())
            .field("leases", &self.fds())
            .field("record_bytes", &self.record_bytes())
            .field("sc", &self.scalars_word())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::abi::BATCH_MAGIC;
    use crate::launch::ScalarType;
    use hexrpc_drivers::adsprpc::FASTRPC_ATTR_NOVA;

    fn sigs() -> [Signature; 2] {
        [Signature::parse("buf,buf,u32").unwrap(), Signature::parse("buf,f32").unwrap()]
    }

    #[test]
    fn packs_records_and_deduplicates_leases() {
        let o = ();
        let k = sigs();
        let mut b = Batch::new(&k).unwrap();
        let a = BufferRef::borrowing(&o, Fd(7), 8192, 0, 100);
        let a2 = BufferRef::borrowing(&o, Fd(7), 8192, 4096, 200);
        let c = BufferRef::borrowing(&o, Fd(9), 64, 16, 48);
        assert_eq!(b.push(0, &[a, a2], &[Scalar::U32(5)]), Ok(0));
        assert_eq!(b.push(1, &[c], &[Scalar::F32(1.5)]), Ok(1));
        assert_eq!(b.push(0, &[c, a], &[Scalar::U32(6)]), Ok(2));
        assert_eq!((b.len(), b.lease_count(), b.fds()), (3, 2, &[Fd(7), Fd(9)][..]));
        let p0 = b.pra0();
        assert_eq!(BATCH.header(p0), Some((BATCH_MAGIC, 3, 2, (40 + 28 + 40) as u32)));
        assert_eq!(BATCH.record(p0, 16), Some((0, 2, 1)));
        assert_eq!(BATCH.view(p0, 16, 1), Some((0, 4096, 200)));
        assert_eq!(BATCH.scalar(p0, 16, 2, 0, ScalarType::U32), Some(Scalar::U32(5)));
        assert_eq!(BATCH.record(p0, 56), Some((1, 1, 1)));
        assert_eq!(BATCH.view(p0, 56, 0), Some((1, 16, 48)));
        assert_eq!(BATCH.scalar(p0, 56, 1, 0, ScalarType::F32), Some(Scalar::F32(1.5)));
        assert_eq!(BATCH.view(p0, 84, 0), Some((1, 16, 48)));
        assert_eq!(BATCH.view(p0, 84, 1), Some((0, 0, 100)));
        assert_eq!(BATCH.lease(b.pra1(), 0), Some((8192, 0)));
        assert_eq!(BATCH.lease(b.pra1(), 1), Some((64, 0)));
        assert_eq!(b.scalars_word().raw(), 0x0302_0102);
        b.set_scalar(2, 0, Scalar::U32(77)).unwrap();
        assert_eq!(BATCH.scalar(b.pra0(), 84, 2, 0, ScalarType::U32), Some(Scalar::U32(77)));
        assert_eq!(
            b.set_scalar(1, 0, Scalar::U32(1)),
            Err(Error::Batch(BatchRefusal::Launch {
                record: 1,
                error: PackError::ScalarType { index: 0, expected: ScalarType::F32, got: ScalarType::U32 }
            }))
        );
        assert_eq!(b.set_scalar(3, 0, Scalar::U32(1)), Err(Error::Batch(BatchRefusal::NoSuchScalar { record: 3, index: 0 })));
        assert_eq!(b.set_scalar(0, 1, Scalar::U32(1)), Err(Error::Batch(BatchRefusal::NoSuchScalar { record: 0, index: 1 })));
        let mut call = b.invoke_args().unwrap();
        let args = call.to_downstream().unwrap();
        assert_eq!(args.scalars().raw(), 0x0302_0102);
        assert_eq!(args.fds(), &[-1, -1, -1, 7, 9]);
        assert_eq!(args.attrs(), &[0, 0, 0, FASTRPC_ATTR_NOVA, FASTRPC_ATTR_NOVA]);
        assert_eq!((args.pra()[0].buf().len, args.pra()[1].buf().len, args.pra()[2].buf().len), (16 + 108, 16, 24));
    }

    /// A batch in a space kept elsewhere packs exactly what an inline one does; the space comes
    /// back for the next batch, which starts empty; a refused table gives it back unchanged.
    #[test]
    fn a_batch_in_a_space_packs_as_an_inline_one_and_the_space_is_reused() {
        let o = ();
        let k = sigs();
        let (a, b) = (BufferRef::borrowing(&o, Fd(7), 8192, 0, 100), BufferRef::borrowing(&o, Fd(9), 4096, 16, 64));
        let mut inline = Batch::new(&k).unwrap();
        let mut space = BatchSpace::boxed();
        for round in 0..2 {
            let mut kept = Batch::in_space(&k, &mut *space).map_err(|(e, _)| e).unwrap();
            assert!(kept.is_empty() && kept.record_bytes() == 0 && kept.fds().is_empty(), "round {round} starts empty");
            inline.push(1, &[a], &[Scalar::F32(1.5)]).unwrap();
            inline.push(0, &[b, a], &[Scalar::U32(3)]).unwrap();
            kept.push(1, &[a], &[Scalar::F32(1.5)]).unwrap();
            kept.push(0, &[b, a], &[Scalar::U32(3)]).unwrap();
            assert_eq!(
                (kept.pra0(), kept.pra1(), kept.fds(), kept.scalars_word()),
                (inline.pra0(), inline.pra1(), inline.fds(), inline.scalars_word())
            );
            inline = Batch::new(&k).unwrap();
        }
        let table = [Signature::parse("").unwrap(); MAX_BATCH_KERNELS + 1];
        let (e, back) = Batch::in_space(&table, space).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::Batch(BatchRefusal::TooManyKernels { .. })));
        assert_eq!(back.records.len(), 2, "a refused table leaves the space as it was");
        const { assert!(BATCH_HANDLE_BYTES < 64 && BATCH_VALUE_BYTES > 65536) };
    }

    #[test]
    fn refusals_leave_the_batch_unchanged() {
        let o = ();
        let k = sigs();
        let mut b = Batch::new(&k).unwrap();
        let ok = BufferRef::borrowing(&o, Fd(7), 8192, 0, 100);
        b.push(1, &[ok], &[Scalar::F32(0.0)]).unwrap();
        let before = (b.pra0().to_vec(), b.pra1().to_vec(), b.fds().to_vec());
        let bad = |fd, lease, off, len| BufferRef::borrowing(&o, Fd(fd), lease, off, len);
        let cases: [(usize, [BufferRef<'_>; 2], BatchRefusal); 5] = [
            (0, [ok, bad(8, 100, 90, 11)], BatchRefusal::Launch { record: 1, error: PackError::ViewOutsideLease { buffer: 1 } }),
            (0, [ok, bad(0, 100, 0, 1)], BatchRefusal::Launch { record: 1, error: PackError::NoFd { buffer: 1 } }),
            (0, [bad(8, 64, 0, 1), bad(7, 4096, 0, 1)], BatchRefusal::LeaseMismatch { record: 1, buffer: 1 }),
            (
                0,
                [ok, bad(8, 1 << 32, 0, 1)],
                BatchRefusal::Launch { record: 1, error: PackError::LeaseTooLong { buffer: 1, len: 1 << 32, max: u32::MAX as u64 } },
            ),
            (2, [ok, ok], BatchRefusal::NoSuchKernel { kernel: 2, kernels: 2 }),
        ];
        for (kernel, bufs, want) in cases {
            assert_eq!(b.push(kernel, &bufs, &[Scalar::U32(1)]), Err(Error::Batch(want)));
        }
        assert_eq!(
            b.push(0, &[ok, ok], &[Scalar::I32(1)]),
            Err(Error::Batch(BatchRefusal::Launch {
                record: 1,
                error: PackError::ScalarType { index: 0, expected: ScalarType::U32, got: ScalarType::I32 }
            }))
        );
        assert_eq!(
            b.push(0, &[ok], &[Scalar::U32(1)]),
            Err(Error::Batch(BatchRefusal::Launch { record: 1, error: PackError::BufferCount { expected: 2, got: 1 } }))
        );
        assert_eq!((b.pra0().to_vec(), b.pra1().to_vec(), b.fds().to_vec()), before);
        assert_eq!(b.len(), 1);
        let table = [Signature::parse("").unwrap(); MAX_BATCH_KERNELS + 1];
        assert!(Batch::new(&table[..MAX_BATCH_KERNELS]).is_ok());
        assert!(matches!(
            Batch::new(&table),
            Err(Error::Batch(BatchRefusal::TooManyKernels { count })) if count == MAX_BATCH_KERNELS + 1
        ));
    }

    #[test]
    fn capacity_is_enforced() {
        let o = ();
        let k = [Signature::parse("buf").unwrap(), Signature::parse("buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64").unwrap()];
        // Leases: 15 distinct fine, the 16th refused.
        let mut b = Batch::new(&k).unwrap();
        let leases: [BufferRef<'_>; 16] = core::array::from_fn(|i| BufferRef::borrowing(&o, Fd(10 + i as i32), 64, 0, 64));
        for l in &leases[..MAX_BATCH_LEASES] {
            b.push(0, &[*l], &[]).unwrap();
        }
        assert_eq!(b.push(0, &[leases[15]], &[]), Err(Error::Batch(BatchRefusal::TooManyLeases { capacity: MAX_BATCH_LEASES })));
        assert_eq!(b.lease_count(), MAX_BATCH_LEASES);
        // Records: MAX_BATCH_LAUNCHES fine, one more refused (and the batch unchanged).
        let mut b = Batch::new(&k).unwrap();
        for r in 0..MAX_BATCH_LAUNCHES {
            assert_eq!(b.push(0, &[leases[r % 15]], &[]), Ok(r));
        }
        let full = (b.pra0().to_vec(), b.pra1().to_vec());
        assert_eq!(b.push(0, &[leases[0]], &[]), Err(Error::Batch(BatchRefusal::TooManyLaunches { capacity: MAX_BATCH_LAUNCHES })));
        assert_eq!((b.len(), b.pra0().to_vec(), b.pra1().to_vec()), (MAX_BATCH_LAUNCHES, full.0, full.1));
        assert_eq!(BATCH.header(b.pra0()).map(|h| h.1), Some(MAX_BATCH_LAUNCHES as u32));
        assert_eq!(b.kernel_of(MAX_BATCH_LAUNCHES - 1), Some(0));
        // Record bytes: 8 + 15 * 12 + 20 * 8 = 348 bytes a record; the record bytes bind before
        // the launches do, and the first record past them is refused.
        let len = BATCH.record_len(15, 20);
        let fit = MAX_BATCH_RECORD_BYTES / len;
        assert!(fit < MAX_BATCH_LAUNCHES && len == 348);
        let mut b = Batch::new(&k).unwrap();
        let views: [BufferRef<'_>; 15] = core::array::from_fn(|i| leases[i]);
        let sc = [Scalar::U64(1); 20];
        for _ in 0..fit {
            b.push(1, &views, &sc).unwrap();
        }
        assert_eq!(
            b.push(1, &views, &sc),
            Err(Error::Batch(BatchRefusal::RecordBytes { needed: (fit + 1) * len, capacity: MAX_BATCH_RECORD_BYTES }))
        );
        assert_eq!(b.record_bytes(), fit * len);
        // The last record sits past 64 KiB - 348: its offset and its scalars are still found.
        b.set_scalar(fit - 1, 19, Scalar::U64(7)).unwrap();
        assert_eq!(BATCH.scalar(b.pra0(), 16 + (fit - 1) * len, 15, 19, ScalarType::U64), Some(Scalar::U64(7)));
        // A batch filled to the byte: MAX_BATCH_LAUNCHES records of 256 bytes (14 views and 10
        // scalars) are exactly the record bytes, and the kernel index of a full table's last
        // kernel travels in the record.
        let per = MAX_BATCH_RECORD_BYTES / MAX_BATCH_LAUNCHES;
        assert_eq!((per, BATCH.record_len(14, 10)), (256, 256));
        let mut table = [Signature::parse("").unwrap(); MAX_BATCH_KERNELS];
        table[MAX_BATCH_KERNELS - 1] =
            Signature::parse("buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,u32,u32,u32,u32,u32,u32,u32,u32,u32,u32").unwrap();
        let mut b = Batch::new(&table).unwrap();
        let sc = [Scalar::U32(3); 10];
        for _ in 0..MAX_BATCH_LAUNCHES {
            b.push(MAX_BATCH_KERNELS - 1, &views[..14], &sc).unwrap();
        }
        assert_eq!(b.record_bytes(), MAX_BATCH_RECORD_BYTES);
        assert_eq!(b.pra0().len(), PRA0_CAP);
        let last = 16 + (MAX_BATCH_LAUNCHES - 1) * per;
        assert_eq!(BATCH.record(b.pra0(), last), Some(((MAX_BATCH_KERNELS - 1) as u32, 14, 10)));
        assert_eq!(b.push(0, &[], &[]), Err(Error::Batch(BatchRefusal::TooManyLaunches { capacity: MAX_BATCH_LAUNCHES })));
    }

    #[test]
    fn outcome_reads_the_status() {
        let o = ();
        let k = sigs();
        let mut b = Batch::new(&k).unwrap();
        let v = BufferRef::borrowing(&o, Fd(7), 8192, 0, 100);
        for _ in 0..3 {
            b.push(1, &[v], &[Scalar::F32(0.0)]).unwrap();
        }
        assert_eq!(b.outcome(), Err(Error::BatchRun(BatchFailure::NotRun)));
        let put = |b: &mut Batch<'_>, done: u32, failed: u32, code: i32| {
            b.space.status[..4].copy_from_slice(b"HRXB");
            b.space.status[4..8].copy_from_slice(&done.to_le_bytes());
            b.space.status[8..12].copy_from_slice(&failed.to_le_bytes());
            b.space.status[12..16].copy_from_slice(&code.to_le_bytes());
            b.space.status[16..24].copy_from_slice(&42u64.to_le_bytes());
        };
        put(&mut b, 3, u32::MAX, 0);
        assert_eq!(b.outcome(), Ok(BatchRun { launches: 3, dsp_micros: 42 }));
        put(&mut b, 1, 1, 9);
        assert_eq!(b.outcome(), Err(Error::BatchRun(BatchFailure::KernelFailed { record: 1, kernel: 1, code: 9, done: 1 })));
        for (done, failed, code) in [(2, u32::MAX, 0), (1, 2, 9), (1, 1, 0), (3, 3, 1)] {
            put(&mut b, done, failed, code);
            assert!(matches!(b.outcome(), Err(Error::BatchRun(BatchFailure::BadStatus { .. }))), "{done} {failed} {code}");
        }
        let mut empty = Batch::new(&k).unwrap();
        assert_eq!(empty.launch(&hexrpc_drivers::RustixSys, Fd(-1), 1), Err(Error::Batch(BatchRefusal::Empty)));
    }
}
