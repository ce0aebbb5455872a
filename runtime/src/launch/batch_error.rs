//! Why a batch was refused before any system call ([`BatchRefusal`]) or, sent, did not complete
//! as sent ([`BatchFailure`]): the batch's typed causes, below both the [`Batch`](super::Batch)
//! that returns them and the runtime's [`Error`](crate::Error) that carries them.

use core::fmt;

use super::abi::{BatchStatus, MAX_BATCH_KERNELS};
use super::pack::PackError;

/// Why a batch launch was refused: it does not fit the kernel table or the batch's capacity, or
/// the batch is empty. Every refusal happens before any system call, and a refused
/// [`push`](super::Batch::push) leaves the batch as it was. Inside
/// [`Error::Batch`](crate::Error::Batch).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BatchRefusal {
    /// The kernel table has more kernels than a library can carry ([`MAX_BATCH_KERNELS`]).
    TooManyKernels {
        /// Kernels given.
        count: usize,
    },
    /// The kernel index is not in the table.
    NoSuchKernel {
        /// The index.
        kernel: usize,
        /// Kernels in the table.
        kernels: usize,
    },
    /// The batch already holds [`MAX_BATCH_LAUNCHES`](super::abi::MAX_BATCH_LAUNCHES) records.
    TooManyLaunches {
        /// The capacity.
        capacity: usize,
    },
    /// The launch would bring a lease beyond [`MAX_BATCH_LEASES`](super::abi::MAX_BATCH_LEASES)
    /// distinct leases.
    TooManyLeases {
        /// The capacity.
        capacity: usize,
    },
    /// The record does not fit in the remaining record bytes.
    RecordBytes {
        /// Record bytes the batch would need.
        needed: usize,
        /// The capacity ([`MAX_BATCH_RECORD_BYTES`](super::abi::MAX_BATCH_RECORD_BYTES)).
        capacity: usize,
    },
    /// Launch `record` was refused as a single launch would be (view, lease, scalar checks).
    Launch {
        /// Index the record would have had.
        record: usize,
        /// Why.
        error: PackError,
    },
    /// Buffer `buffer` of launch `record` names a lease (share fd) already in the batch with
    /// another length.
    LeaseMismatch {
        /// Index the record would have had.
        record: usize,
        /// Buffer index in that launch.
        buffer: usize,
    },
    /// No such record, or no such scalar in it ([`set_scalar`](super::Batch::set_scalar)).
    NoSuchScalar {
        /// The record.
        record: usize,
        /// The scalar index.
        index: usize,
    },
    /// The batch holds no record (nothing is sent).
    Empty,
    /// A program's records lease is not usable: its view is not the records' length or lies
    /// outside it, or it shares its fd with a lease the records name (a kernel could rewrite
    /// the records), or two leases share one fd.
    RecordsLease,
    /// A program's record `record` runs past the end of the records.
    RecordsCut {
        /// The record.
        record: usize,
    },
}

impl fmt::Display for BatchRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BatchRefusal::TooManyKernels { count } => write!(f, "{count} kernels: a library's table holds at most {MAX_BATCH_KERNELS}"),
            BatchRefusal::NoSuchKernel { kernel, kernels } => write!(f, "kernel {kernel} is not in the table of {kernels}"),
            BatchRefusal::TooManyLaunches { capacity } => write!(f, "a batch carries at most {capacity} launches"),
            BatchRefusal::TooManyLeases { capacity } => write!(f, "a batch carries at most {capacity} distinct leases"),
            BatchRefusal::RecordBytes { needed, capacity } => write!(f, "{needed} record bytes needed, capacity {capacity}"),
            BatchRefusal::Launch { record, error } => write!(f, "launch {record}: {error}"),
            BatchRefusal::LeaseMismatch { record, buffer } => {
                write!(f, "launch {record}, buffer {buffer}: its lease is already in the batch with another length")
            }
            BatchRefusal::NoSuchScalar { record, index } => write!(f, "record {record} has no scalar {index}"),
            BatchRefusal::Empty => f.write_str("the batch is empty"),
            BatchRefusal::RecordsLease => f.write_str(
                "the program's records lease is not usable (view not the records' length or outside the lease, or an fd shared with another lease)",
            ),
            BatchRefusal::RecordsCut { record } => write!(f, "program record {record} runs past the end of the records"),
        }
    }
}

impl core::error::Error for BatchRefusal {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            BatchRefusal::Launch { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why a batch that was sent (the call itself returned 0) did not complete as sent. Inside
/// [`Error::BatchRun`](crate::Error::BatchRun); a failed call is
/// [`Error::Hal`](crate::Error::Hal).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BatchFailure {
    /// The call returned but the status carries no `HRXB`: the library's entry has no batch
    /// support (it answers method 3 with 0 without running anything).
    NotRun,
    /// The status the DSP wrote is inconsistent with the batch sent.
    BadStatus {
        /// What came back.
        status: BatchStatus,
    },
    /// A kernel reported a failure: the batch stopped at `record` (records before it ran) and
    /// every lease was unmapped.
    KernelFailed {
        /// The record that failed.
        record: usize,
        /// Its kernel index.
        kernel: usize,
        /// The kernel's non-zero status.
        code: i32,
        /// Records completed before it.
        done: usize,
    },
}

impl fmt::Display for BatchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BatchFailure::NotRun => f.write_str("the library did not run the batch (its entry has no batch support)"),
            BatchFailure::BadStatus { status } => {
                write!(f, "inconsistent batch status from the DSP: done {} failed {} code {}", status.done, status.failed, status.code)
            }
            BatchFailure::KernelFailed { record, kernel, code, done } => {
                write!(f, "record {record} (kernel {kernel}) failed with {code} after {done} records; every lease was unmapped")
            }
        }
    }
}

impl core::error::Error for BatchFailure {}
