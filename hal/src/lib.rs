//! The hexrpc HAL: a typed session over ION and FastRPC for on-device services.
//!
//! The board chooses the allocator (msm ION 4.9 or a dma-buf heap) and the FastRPC driver
//! (downstream `/dev/adsprpc-smd` or upstream `/dev/fastrpc-*`); the API below is the same on
//! both. How the upstream init sequence, buffer passing, restart and deadline behaviour differ
//! is in the `driver` module's documentation (summarized there as a table) and in
//! `hexrpc_drivers::upstream`. The stage and type names (`HeapOpened`, `Lease`) stay from the
//! first kernel.
//!
//! * **Init as typestate** ([`stages`]): allocator opened → shell staged in a buffer → FastRPC
//!   channel opened (downstream: GETINFO, CONTROL kalloc; upstream: the domain's node) → DSP
//!   process created (INIT / INIT_CREATE) → listener registered on the same fd (handle 3 init2)
//!   → [`Session`]. Right after INIT each channel gets the session's PM-QoS vote
//!   ([`LatencyPolicy`]; downstream only, upstream has no such request). Each transition consumes the previous stage and returns the
//!   next one or a [`HalError`] naming the stage and the cause; whatever the failed stage had
//!   acquired is released, and dropping any stage releases everything in reverse order.
//!   Opening device nodes takes a [`DeviceAccess`](hexrpc_bsp::DeviceAccess) token.
//! * **Buffers** ([`lease`]): a [`Lease`] owns the ION handle, the share fd and a mapping of
//!   the whole buffer; a [`BufferView`] is a checked (offset, length) range that borrows its
//!   lease, so a lease cannot be freed under a view. Both FastRPC drivers key the maps they keep
//!   after a call by the fd *number*, so a dropped lease goes back to its session, which makes
//!   sure no number is reused while a driver may still map it (downstream
//!   `FASTRPC_IOCTL_MUNMAP_FD`; upstream the number stays occupied until the channel closes),
//!   and a lease of a call abandoned at its deadline is refused ([`Cause::Quarantined`]) and
//!   kept until the DSP process that ran the call is released.
//! * **Arenas** ([`arena`]): a FastRPC call carries at most 15 leases, so memory for many
//!   tensors comes from an [`Arena`]: one lease carved into [`ARENA_ALIGN`]-aligned
//!   sub-allocations ([`ArenaBuf`]) by a two-level segregated-fit allocator
//!   ([`OffsetAllocator`]) whose bookkeeping is a fixed pool of [`ARENA_BLOCKS`] nodes (no
//!   heap; O(1) allocation in the common case and O(1) coalescing on free). A sub-allocation's
//!   views are views of the arena's lease at its offset, so a launch passing many of them maps
//!   one lease; a view borrows its buffer and a buffer its arena, so no range is freed or
//!   reused under a launch. Dropping a buffer frees its range, dropping the arena its lease. A
//!   full arena is [`Cause::ArenaFull`] (with the largest free range), exhausted bookkeeping
//!   [`Cause::ArenaBlocks`]. [`SharedArena`] and [`SharedArenaBuf`] (std) own shares instead of
//!   borrows, for bindings.
//! * **DSP identities**: the DSP keys user processes by the opener's process id; the downstream
//!   driver offers a second identity (the session bit), so two sessions in one process work
//!   there and a third is refused ([`Cause::IdentityInUse`]); upstream a second one is refused.
//!   Recovery never creates the new process under an identity the old one may still hold.
//! * **Libraries**: [`Session::open_library`] publishes the image under a unique name in an
//!   [`ImageRegistry`] (the reverse file service) and opens it once; the [`Library`] handle
//!   closes itself on every path and is invoked many times, each time with a [`Call`]: the
//!   method and arguments of one call, driver-neutral (each driver backend translates it into
//!   its own argument list right before the ioctl).
//! * **Recovery**: a DSP restart (+`ECONNRESET`), a deadline that passed
//!   ([`Library::invoke_with_deadline`], std) or a stopped listener puts the session in "needs
//!   recovery" ([`Health`] says why); [`Session::recover`] rebuilds the process from the channel
//!   and re-opens the libraries, retrying with the board's bounded backoff
//!   ([`RecoveryPolicy`](hexrpc_bsp::RecoveryPolicy)) while the DSP is down, and marks the
//!   session failed only once the budget is spent. Concurrent callers wait for the one recovery
//!   in progress and share its outcome. Every channel carries the generation that created it;
//!   the reverse-RPC listener leases one generation's descriptor at a time, and that number
//!   stays open (retired to `/dev/null` if need be) until the lease is back, so nothing of an old
//!   generation reaches a newer channel under a reused number.
//! * **Concurrency**: `&Session` is shared between threads for invokes; library registration is
//!   serialized; there is no shared "current library" state. With `std`, waits block (no spin):
//!   the only lock held across an ioctl is the channel gate, taken shared by every call in
//!   flight (readers never wait for each other) and exclusively by recovery while it replaces
//!   the channel.
//!
//! Everything runs over the drivers' syscall seam, unchanged on a device and on the bench.
//!
//! # Example
//!
//! A session on the bench (the simulated kernel and DSP of `hexrpc-bench`; on a device, pass
//! `hexrpc_drivers::RustixSys` and `DeviceAccess::for_device(&hexrpc_bsp::COMMA_THREE)`), one
//! lease, a view at a non-zero offset, and the same view's bytes read back:
//!
//! ```
//! use hexrpc_bench::Bench;
//! use hexrpc_bsp::DeviceAccess;
//! use hexrpc_hal::Session;
//!
//! # fn main() -> Result<(), hexrpc_hal::HalError> {
//! let session = Session::start(Bench::new(), &DeviceAccess::for_bench())?;
//! let mut lease = session.alloc(64 * 1024)?;
//! lease.write_at(4096, &[1, 2, 3, 4])?;
//! let view = lease.view(4096, 4)?;
//! let mut back = [0u8; 4];
//! view.read(&mut back)?;
//! assert_eq!(back, [1, 2, 3, 4]);
//! assert!(lease.view(60 * 1024, 8 * 1024).is_err()); // past the lease: refused
//! # Ok(())
//! # }
//! ```
//!
//! Libraries are opened through an [`ImageRegistry`], normally the runtime's reverse file
//! service: `hexrpc_runtime::ServedSession` starts both, and its `open_kernel` returns a kernel
//! that launches in one call (see the `hexrpc-runtime` crate docs).
//!
//! The memory of a lease is shared with the DSP: the DSP may change it while it holds the buffer
//! (during a launch), so what the CPU reads during a launch is unspecified; reads and writes are
//! volatile copies (the drivers' `Mapping`), never references, so such a race is not undefined
//! behaviour.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod arena;
mod buffer;
mod call;
#[cfg(feature = "std")]
pub mod deadline;
mod driver;
mod error;
mod fd;
mod identity;
mod image;
mod import;
mod latency;
pub mod lease;
mod session;
#[cfg(feature = "std")]
mod shared;
pub mod stages;
mod sync;

/// Plumbing for `hexrpc-runtime`'s reverse-RPC listener thread (how it leases the session's
/// channel, waits for recoveries and reports restarts). Not API: no stability promise; a
/// service uses `hexrpc_runtime::ServedSession`, which drives it.
#[doc(hidden)]
pub mod internal {
    pub use crate::session::listener::{ListenerChannel, ListenerPlumbing};
}

pub use arena::{Arena, ArenaBuf, ArenaError, ArenaStats, OffsetAllocator, ARENA_ALIGN, ARENA_BLOCKS};
pub use call::{Call, HandleArg};
pub use error::{Budget, Cause, ErrorKind, HalError, ImportRefusal, OpenAdvice, Refusal, ShellSearch, Stage, REFUSAL_TEXT};
pub use fd::OwnedFd;
pub use hexrpc_drivers::adsprpc::ArgsError;
pub use image::LibraryImage;
pub use import::Access;
pub use latency::{DspPower, LatencyPolicy, LibrarySetup, PmQosState, PmQosVote, MAX_SETUP_BYTES};
pub use lease::{BufferView, Lease, LeaseMemory};
pub use session::library::Library;
pub use session::remotectl::{ImageRegistry, DLERROR_LEN, MAP_CACHE_RELEASE_IDS, MAP_CACHE_RELEASE_METHOD, MAX_LIBRARIES, MAX_NAME};
pub use session::{Health, Session, MAX_SETUPS};
#[cfg(feature = "std")]
pub use shared::{SharedArena, SharedArenaBuf, SharedLease, SharedLibrary};
pub use stages::{ChannelOpened, HeapOpened, ProcessCreated, ShellStaged};
