//! Programs: a whole run's launch records kept in a lease, run in one call ([`PROGRAM`]).
//!
//! A [`Batch`](super::Batch) carries its records in the call (pra 0, at most
//! [`MAX_BATCH_LAUNCHES`](super::MAX_BATCH_LAUNCHES) of them in 64 KiB): the kernel copies them
//! into every call. A model's run is up to [`MAX_PROGRAM_LAUNCHES`] launches whose records do not
//! change from run to run, so a program keeps them in a lease of their own (the *records
//! lease*), written once: each call carries a 24-byte header, the lease table (8 bytes a lease)
//! and the 24-byte status, whatever the number of records. A library built with the map cache
//! keeps every lease mapped across calls (the records lease included), so a steady run makes no
//! DSP map either. The entry (method 5, `hrx_program`) maps the leases, then copies nothing: it
//! validates every record where it lies before running any, re-checks each right before it
//! runs, and refuses a view of the records lease, so no kernel can rewrite the records.
//!
//! [`Program::new`] checks the records against the kernel table and the leases exactly as the
//! entry will (the same record form as a batch's, [`BATCH`](super::BATCH)), before any system
//! call; a refusal is [`Error::Batch`] with a [`BatchRefusal`]. Running is one ioctl and
//! allocates nothing; the value holds no record (about 4.5 KiB: the kernel index of each
//! record, for the failure report).

use core::fmt;
use core::marker::PhantomData;

use hexrpc_drivers::adsprpc::ArgsError;
use hexrpc_drivers::fixed::FixedVec as Vec;
use hexrpc_drivers::{Fd, Scalars};
use hexrpc_hal::{Call, Cause, HalError, Stage};

use super::abi::{BatchStatus, MAX_ARGS, MAX_BATCH_KERNELS, MAX_BATCH_LEASES, MAX_PROGRAM_LAUNCHES, MAX_PROGRAM_RECORD_BYTES, PROGRAM, V2};
use super::batch::{decode_outcome, put_u32, write_lease_ids, BatchRun};
use super::batch_error::BatchRefusal;
use super::pack::{BufferRef, LaunchBuffer, PackError};
use super::signature::Signature;
use crate::{Error, KernelLibrary};

/// The argument list did not fit the driver-neutral call (never for a program built here).
const ARGS_INVALID: Error = Error::Hal(HalError { stage: Stage::Invoke, cause: Cause::Invalid });

const _: () = assert!(PROGRAM.header_len == 24 && PROGRAM.lease_entry_size == 8 && PROGRAM.status_len == 24);
// Kernel indices fit a byte (the failure report keeps one per record).
const _: () = assert!(MAX_BATCH_KERNELS <= u8::MAX as usize + 1);

/// A model's run: up to [`MAX_PROGRAM_LAUNCHES`] launches of one library's kernels whose records
/// live in a lease, sent in one call (see the module docs).
///
/// It borrows the leases (and the records lease) for `'a`, so none can be freed while the
/// program can still be sent.
pub struct Program<'a> {
    header: [u8; 24],
    pra1: Vec<u8, { 8 * MAX_BATCH_LEASES }>,
    status: [u8; 24],
    fds: Vec<Fd, MAX_BATCH_LEASES>,
    lease_lens: Vec<u64, MAX_BATCH_LEASES>,
    ids: Vec<u32, MAX_BATCH_LEASES>,
    ids_sent: bool,
    kernels: Vec<u8, MAX_PROGRAM_LAUNCHES>,
    _leases: PhantomData<&'a ()>,
}

impl<'a> Program<'a> {
    /// A program over the kernel table `kernels` (in table order) whose records are `records`:
    /// the bytes the caller wrote into the records lease at `code`'s view (`code`'s view length
    /// is `records.len()`). A record's view names a lease by its index in `leases` (whole leases;
    /// their view offset and length are ignored); the records lease is added after them, and no
    /// record may name it.
    ///
    /// Every record is checked as the entry checks it: kernel index in the table, view and
    /// scalar counts equal to the kernel's signature, each view's lease index in `leases` and
    /// `offset + length` within that lease, the records filling `records` exactly; and the
    /// capacities: 1 to [`MAX_PROGRAM_LAUNCHES`] records, [`MAX_PROGRAM_RECORD_BYTES`] bytes,
    /// [`MAX_BATCH_LEASES`] leases in all.
    pub fn new(kernels: &[Signature], leases: &[BufferRef<'a>], code: BufferRef<'a>, records: &[u8]) -> Result<Self, Error> {
        if kernels.len() > MAX_BATCH_KERNELS {
            return Err(BatchRefusal::TooManyKernels { count: kernels.len() }.into());
        }
        if leases.len() + 1 > MAX_BATCH_LEASES {
            return Err(BatchRefusal::TooManyLeases { capacity: MAX_BATCH_LEASES }.into());
        }
        if records.len() > MAX_PROGRAM_RECORD_BYTES {
            return Err(BatchRefusal::RecordBytes { needed: records.len(), capacity: MAX_PROGRAM_RECORD_BYTES }.into());
        }
        let (cfd, clen, coff, cview) = (code.share_fd(), code.lease_len(), code.view_offset(), code.view_len());
        if cview != records.len() as u64 || coff.checked_add(cview).is_none_or(|end| end > clen) || clen > V2.max_lease_len || cfd.0 <= 0 {
            return Err(BatchRefusal::RecordsLease.into());
        }
        let mut p = Program {
            header: [0; 24],
            pra1: Vec::new(),
            status: [0; 24],
            fds: Vec::new(),
            lease_lens: Vec::new(),
            ids: Vec::new(),
            ids_sent: false,
            kernels: Vec::new(),
            _leases: PhantomData,
        };
        for (buffer, l) in leases.iter().chain(core::iter::once(&code)).enumerate() {
            let (fd, len) = (l.share_fd(), l.lease_len());
            if fd.0 <= 0 {
                return Err(BatchRefusal::Launch { record: 0, error: PackError::NoFd { buffer } }.into());
            }
            if len == 0 || len > V2.max_lease_len {
                return Err(
                    BatchRefusal::Launch { record: 0, error: PackError::LeaseTooLong { buffer, len, max: V2.max_lease_len } }.into()
                );
            }
            // One lease, one entry: the records lease may share no fd with a view lease (its
            // records would be in reach of a kernel), nor may two entries share one.
            if p.fds.contains(&fd) {
                return Err(BatchRefusal::RecordsLease.into());
            }
            // Within MAX_BATCH_LEASES (checked above).
            let _ = p.fds.push(fd);
            let _ = p.lease_lens.push(len);
            let _ = p.ids.push(l.lease_id());
            let mut e = [0u8; 8];
            put_u32(&mut e, PROGRAM.lease_len_at, len as u32);
            let _ = p.pra1.extend_from_slice(&e);
        }
        let views = leases.len();
        let mut at = 0usize;
        while at < records.len() {
            let record = p.kernels.len();
            if record >= MAX_PROGRAM_LAUNCHES {
                return Err(BatchRefusal::TooManyLaunches { capacity: MAX_PROGRAM_LAUNCHES }.into());
            }
            let cut = BatchRefusal::RecordsCut { record };
            // The table's own decoders, as a DSP model reads a record.
            let (kernel, nv, ns) = PROGRAM.record(records, at).ok_or(cut)?;
            let (kernel, nv, ns) = (kernel as usize, nv as usize, ns as usize);
            let sig = kernels.get(kernel).ok_or(BatchRefusal::NoSuchKernel { kernel, kernels: kernels.len() })?;
            let refuse = |error| Error::Batch(BatchRefusal::Launch { record, error });
            if nv != sig.buffers() {
                return Err(refuse(PackError::BufferCount { expected: sig.buffers(), got: nv }));
            }
            if ns != sig.scalars() {
                return Err(refuse(PackError::ScalarCount { expected: sig.scalars(), got: ns }));
            }
            let len = PROGRAM.record_len(nv, ns);
            if records.len() - at < len {
                return Err(cut.into());
            }
            for buffer in 0..nv {
                let (l, off, n) = PROGRAM.view(records, at, buffer).ok_or(cut)?;
                let (l, off, n) = (l as usize, u64::from(off), u64::from(n));
                match p.lease_lens.get(l) {
                    Some(&lease) if l < views && off + n <= lease => {}
                    _ => return Err(refuse(PackError::ViewOutsideLease { buffer })),
                }
            }
            // A kernel index below MAX_BATCH_KERNELS fits a byte (asserted above).
            let _ = p.kernels.push(kernel as u8);
            at += len;
        }
        if p.kernels.is_empty() {
            return Err(BatchRefusal::Empty.into());
        }
        let (p_at, o_at) = PROGRAM.records_in_lease.unwrap_or((16, 20));
        put_u32(&mut p.header, PROGRAM.magic_at, PROGRAM.magic);
        put_u32(&mut p.header, PROGRAM.count_at, p.kernels.len() as u32);
        put_u32(&mut p.header, PROGRAM.leases_at, p.fds.len() as u32);
        put_u32(&mut p.header, PROGRAM.bytes_at, records.len() as u32);
        put_u32(&mut p.header, p_at, views as u32);
        // Within V2's lease limit (u32), checked above.
        put_u32(&mut p.header, o_at, coff as u32);
        Ok(p)
    }

    /// Records in the program.
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    /// Always false: a program holds at least one record.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// Leases sent (the view leases, then the records lease).
    pub fn lease_count(&self) -> usize {
        self.fds.len()
    }

    /// The kernel index of record `record`.
    pub fn kernel_of(&self, record: usize) -> Option<usize> {
        self.kernels.get(record).map(|&k| k as usize)
    }

    /// The scalars word of the call.
    pub fn scalars_word(&self) -> Scalars {
        // The lease count never exceeds MAX_BATCH_LEASES.
        PROGRAM.scalars(self.fds.len()).unwrap_or(Scalars::from_raw(0))
    }

    /// Bytes the call carries into the kernel: the header and the lease table (the status is
    /// copied out). This is all a run copies, whatever its number of records.
    pub fn call_bytes(&self) -> usize {
        self.header.len() + self.pra1.len()
    }

    /// pra 0 as sent: the 24-byte header.
    pub fn pra0(&self) -> &[u8] {
        &self.header
    }

    /// pra 1 as sent: the lease table.
    pub fn pra1(&self) -> &[u8] {
        &self.pra1
    }

    /// The leases' share fds, in lease order (the records lease last).
    pub fn fds(&self) -> &[Fd] {
        &self.fds
    }

    /// Sends the leases' ids (libraries with the map cache) or zeros.
    pub fn send_lease_ids(&mut self, on: bool) {
        if self.ids_sent == on {
            return;
        }
        self.ids_sent = on;
        write_lease_ids(&PROGRAM, &mut self.pra1, &self.ids, on);
    }

    /// The status of the last run (`None` before any).
    pub fn status(&self) -> Option<BatchStatus> {
        PROGRAM.status(&self.status)
    }

    /// The call's argument list (pra 0, pra 1, the status, one handle per lease); the status is
    /// cleared first.
    pub fn invoke_args(&mut self) -> Result<Call<'_, MAX_ARGS>, ArgsError> {
        self.status = [0; 24];
        let mut call = Call::new(PROGRAM.method);
        if let Ok(args) = call.as_mut() {
            args.input(&self.header)?;
            args.input(&self.pra1)?;
            args.output(&mut self.status)?;
            for (fd, len) in self.fds.iter().zip(&self.lease_lens) {
                args.out_handle_sized(*fd, PROGRAM.handle_attr, *len)?;
            }
        }
        call
    }

    /// Reads the status of a call that returned 0.
    pub fn outcome(&self) -> Result<BatchRun, Error> {
        let status = self.status().filter(BatchStatus::ran_program);
        decode_outcome(status, self.kernels.len(), |r| self.kernel_of(r))
    }

    /// Runs the program on `lib` (one call). The library must run programs (its build record's
    /// `FLAG_PROGRAM`); one that does not answers without running anything, which is
    /// [`BatchFailure::NotRun`](super::BatchFailure::NotRun).
    pub fn run<L: KernelLibrary + ?Sized>(&mut self, lib: &L) -> Result<BatchRun, Error> {
        self.send_lease_ids(lib.map_cache());
        let mut args = self.invoke_args();
        lib.invoke_args(args.as_mut().map_err(|_| ARGS_INVALID)?)?;
        self.outcome()
    }

    /// [`run`](Self::run) with the per-record DSP times: `status` is the status buffer the entry
    /// writes (at least [`PROGRAM`]`.timed_status_len(self.len())` bytes for every record's time;
    /// at least the status's 24 bytes). Read the times with
    /// [`PROGRAM.record_micros(status, self.len())`](crate::launch::BatchLayout::record_micros):
    /// `None` from an entry that does not time records. `timeout`: as
    /// [`run_with_deadline`](Self::run_with_deadline) (std only; `None` without a deadline).
    pub fn run_timed<L: KernelLibrary + ?Sized>(
        &mut self,
        lib: &L,
        status: &mut [u8],
        timeout: Option<core::time::Duration>,
    ) -> Result<BatchRun, Error> {
        if status.len() < PROGRAM.status_len {
            return Err(ARGS_INVALID);
        }
        self.send_lease_ids(lib.map_cache());
        status.fill(0);
        let mut call = Call::new(PROGRAM.method);
        if let Ok(args) = call.as_mut() {
            args.input(&self.header).map_err(|_| ARGS_INVALID)?;
            args.input(&self.pra1).map_err(|_| ARGS_INVALID)?;
            args.output(status).map_err(|_| ARGS_INVALID)?;
            for (fd, len) in self.fds.iter().zip(&self.lease_lens) {
                args.out_handle_sized(*fd, PROGRAM.handle_attr, *len).map_err(|_| ARGS_INVALID)?;
            }
        }
        let args = call.as_mut().map_err(|_| ARGS_INVALID)?;
        match timeout {
            #[cfg(feature = "std")]
            Some(t) => {
                crate::kernel::check_deadline(t)?;
                lib.invoke_args_with_deadline(args, t)?;
            }
            #[cfg(not(feature = "std"))]
            Some(_) => return Err(ARGS_INVALID),
            None => lib.invoke_args(args)?,
        }
        drop(call);
        self.status.copy_from_slice(&status[..PROGRAM.status_len]);
        self.outcome()
    }

    /// [`run`](Self::run) bounded by `timeout` (the HAL's deadline: past it the call is
    /// interrupted and the session needs `recover()`).
    #[cfg(feature = "std")]
    pub fn run_with_deadline<L: KernelLibrary + ?Sized>(&mut self, lib: &L, timeout: core::time::Duration) -> Result<BatchRun, Error> {
        crate::kernel::check_deadline(timeout)?;
        self.send_lease_ids(lib.map_cache());
        let mut args = self.invoke_args();
        lib.invoke_args_with_deadline(args.as_mut().map_err(|_| ARGS_INVALID)?, timeout)?;
        self.outcome()
    }
}

impl fmt::Debug for Program<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("launches", &self.kernels.len())
            .field("leases", &self.fds())
            .field("sc", &self.scalars_word())
            .finish()
    }
}
