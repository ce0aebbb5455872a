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
pub mod ion;
mod session;
pub mod stages;

pub use error::{Cause, ErrorKind, HalError, Refusal, Stage, REFUSAL_TEXT};
pub use fd::OwnedFd;
pub use ion::{BufferView, IonLease, LeaseMemory};
pub use session::{ImageRegistry, Library, Session, DLERROR_LEN, MAX_LIBRARIES, MAX_NAME};
pub use stages::{ChannelOpened, IonOpened, ProcessCreated, ShellStaged};
