//! The kernel-launch ABI: how a host launches a kernel in a DSP library through FastRPC, and the
//! DSP-side `entry` function that receives the launch.
//!
//! A launch is one `FASTRPC_IOCTL_INVOKE_ATTRS` on the library's handle with method 2: two input
//! buffers (pra 0: buffer lengths and scalars, pra 1: view records), one output buffer (pra 2:
//! the DSP's microseconds around the kernel) and one output handle per buffer (its share fd with
//! `FASTRPC_ATTR_NOVA`). The host packer and the DSP entry are built separately, so the contract
//! between them is written down once, in [`abi`] (one [`LaunchLayout`] per [`AbiVersion`]), and
//! both sides are derived from it:
//!
//! * [`PackedLaunch::pack`] checks a launch against its [`Signature`] and the version's limits and
//!   fills fixed-capacity storage (no heap); [`PackedLaunch::invoke_args`] describes it as the
//!   HAL's driver-neutral [`Call`](hexrpc_hal::Call) (for `Library::invoke`), and
//!   [`PackedLaunch::launch`] sends it on a raw downstream fd.
//! * [`write_entry`] writes the C `entry` for a signature into any `core::fmt::Write` (no heap).
//! * The host tool `hexrpc-libbuild` compiles entry + kernel into a Hexagon shared object and
//!   records the kernel's signature and the ABI version in it ([`record::write_record_asm`]);
//!   [`LibraryRecord::find`] reads that record back from the library's bytes (no_std, no
//!   allocation).
//! * A library generated for a kernel *table* ([`write_batch_entry`]) also runs batches: a
//!   [`Batch`] packs K launches of its kernels with their leases deduplicated (the [`BATCH`]
//!   layout of the same table) and sends them in one call, each lease mapped once.
//! * Such a library also runs *programs* ([`Program`], the [`PROGRAM`] layout): a whole run of
//!   up to 4,096 launches whose records stay in a lease of their own, written once, so a call
//!   carries 24 bytes of header and the lease table whatever the number of launches.
//!
//! Version 1 is tinygrad's contract, kept to drive libraries built by others; its entry maps the
//! *view* length at file offset 0, so only offset-0 views are correct and the packer refuses the
//! rest. Version 2 (the default) separates the mapping lease from the view: the DSP maps and
//! unmaps whole leases and validates every field before mapping anything.
//!
//! # Lifetimes
//!
//! A [`BufferRef<'a>`] borrows whatever owns its lease for `'a`; a [`PackedLaunch<'a>`] carries
//! that borrow, and the [`Call`](hexrpc_hal::Call) it produces borrows the
//! packed bytes, so no lease and no argument byte can go away before the ioctl has returned.
//!
//! # Where the model leaks
//!
//! The buffers themselves are memory shared with the DSP: the kernel reads and writes them while
//! the call runs, and nothing here looks at their contents. Borrowing a view shared (`&`) is
//! enough to keep its lease alive; it does not (and cannot) stop the DSP from writing it. The
//! 32-bit `remote_arg` view the entry is written against is what working DSP entries read, not a
//! documented interface (see `drivers::dsp`).

pub mod abi;
mod batch;
mod batch_error;
mod entry;
mod pack;
mod power;
mod program;
pub mod record;
mod scalar;
mod signature;

pub use abi::{
    AbiVersion, BatchLayout, BatchStatus, LaunchLayout, MapExtent, RecordMicros, BATCH, BATCH_MAGIC, BATCH_METHOD, ENTRY_SYMBOL,
    FIRST_HANDLE, MAP_CACHE_SLOTS, MAX_ARGS, MAX_BATCH_KERNELS, MAX_BATCH_LAUNCHES, MAX_BATCH_LEASES, MAX_BATCH_RECORD_BYTES, MAX_BUFFERS,
    MAX_PROGRAM_LAUNCHES, MAX_PROGRAM_RECORD_BYTES, MAX_RELEASE_IDS, NO_FAILED_RECORD, POWER_METHOD, POWER_VOTE_BYTES, PROGRAM,
    PROGRAM_MAGIC, PROGRAM_METHOD, RELEASE_METHOD, SLOT_SIZE, TIMES_MAGIC, V1, V2, V2_MAGIC,
};
pub use batch::{Batch, BatchRun, BatchSpace, BATCH_HANDLE_BYTES, BATCH_VALUE_BYTES};
pub use batch_error::{BatchFailure, BatchRefusal};
pub use entry::{check_kernel_name, write_batch_entry, write_entry, EntryError, EntryOptions, KernelSpec, PowerRequest};
pub use pack::{BufferRef, LaunchBuffer, PackError, PackedLaunch, DEFAULT_SLOTS};
pub use power::PowerVote;
pub use program::Program;
pub use record::{LibraryRecord, RecordError, RecordedKernel};
pub use scalar::{Scalar, ScalarType};
pub use signature::{ParamKind, Signature, SignatureError};
