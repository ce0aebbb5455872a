//! The hexrpc HAL: a typed session over ION and FastRPC for on-device services.
//!
//! * **Init as typestate** ([`stages`]): ION opened → shell staged in an ION buffer → FastRPC
//!   channel opened (GETINFO, CONTROL kalloc) → DSP process created (INIT) → listener registered
//!   (handle 3 init2) → [`Session`]. Each transition consumes the previous stage and returns the
//!   next one or a [`HalError`] naming the stage and the cause; whatever the failed stage had
//!   acquired is released, and dropping any stage releases everything in reverse order.
//!   Opening device nodes takes a [`DeviceAccess`](hexrpc_bsp::DeviceAccess) token.
//! * **Buffers** ([`ion`]): an [`IonLease`] owns the ION handle, the share fd and a mapping of
//!   the whole buffer; a [`BufferView`] is a checked (offset, length) range that borrows its
//!   lease, so a lease cannot be freed under a view.
//! * **Libraries**: [`Session::open_library`] publishes the image under a unique name in an
//!   [`ImageRegistry`] (the reverse file service) and opens it once; the [`Library`] handle
//!   closes itself on every path and is invoked many times.
//! * **Recovery**: a DSP restart (+`ECONNRESET`) or a deadline that passed
//!   ([`Library::invoke_with_deadline`], std) puts the session in "needs recovery";
//!   [`Session::recover`] rebuilds the process from the channel and re-opens the libraries,
//!   once; a second failure is reported, not retried.
//! * **Concurrency**: `&Session` is shared between threads for invokes; library registration is
//!   serialized; there is no shared "current library" state.
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
//! (during a launch), so what the CPU reads during a launch is not defined; reads go through
//! copies, never references.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
mod deadline;
mod error;
mod fd;
mod image;
pub mod ion;
mod session;
#[cfg(feature = "std")]
mod shared;
pub mod stages;

pub use error::{Cause, ErrorKind, HalError, Refusal, Stage, REFUSAL_TEXT};
pub use fd::OwnedFd;
pub use image::LibraryImage;
pub use ion::{BufferView, IonLease, LeaseMemory};
pub use session::{ImageRegistry, Library, Session, DLERROR_LEN, MAX_LIBRARIES, MAX_NAME};
#[cfg(feature = "std")]
pub use shared::{SharedLease, SharedLibrary};
pub use stages::{ChannelOpened, IonOpened, ProcessCreated, ShellStaged};
