//! The hexrpc runtime: the kernel-launch ABI (host packer and DSP entry generator, from one
//! table), one-call launches on top of it ([`kernel`]: a library opened with its kernel's
//! signature and ABI, from its build record or given, launches with views and scalars in one
//! call), and the hardened reverse file service that answers the DSP's file requests.
//!
//! Every call on the launch path (starting and recovering a [`ServedSession`], opening a
//! [`Kernel`], launching it, building and running a [`Batch`](launch::Batch)) returns one error
//! type, [`Error`]: its stage, its [`ErrorKind`] and the typed cause inside it ([`error`]).
//!
//! Fixed capacity and allocation-free in the request and launch paths.
//!
//! # Example
//!
//! A served session on the bench, a library opened once with its kernel's signature and launch
//! ABI, and one-call launches on two views of one lease at non-zero offsets. The bench's DSP runs
//! a Rust model of the library here; on a device, pass `hexrpc_drivers::RustixSys`,
//! `DeviceAccess::for_device(&hexrpc_bsp::COMMA_THREE)` and the bytes of a `.so` made by
//! `hexrpc build-lib`.
//!
//! ```
//! use hexrpc_bench::{elf, Bench, EntryVersion, LibraryModel};
//! use hexrpc_bsp::DeviceAccess;
//! use hexrpc_runtime::launch::{AbiVersion, Scalar, Signature};
//! use hexrpc_runtime::reverse::FilePolicy;
//! use hexrpc_runtime::ServedSession;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The bench's DSP model of a library "add": out[i] = in[i] + k (signature "buf,buf,u32").
//! let bench = Bench::new();
//! bench.register_library("add", LibraryModel::new(EntryVersion::V2, 2, 1, |k| {
//!     let add = k.scalar_u32(0).unwrap_or(0) as u8;
//!     let mut v = k.read_all(0).unwrap_or_default();
//!     v.iter_mut().for_each(|b| *b = b.wrapping_add(add));
//!     let _ = k.write(1, 0, &v);
//! }));
//!
//! let served = ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), FilePolicy::for_board(bench.board())?)?;
//! let image: Vec<u8> = elf::library_image("add", 8192); // owned bytes; no 'static needed
//! let kernel = served.open_kernel("add", image, Signature::parse("buf,buf,u32")?, AbiVersion::V2)?;
//!
//! let mut lease = served.session().alloc(16 * 1024)?;
//! lease.write_at(100, &[1, 2, 3, 4])?;
//! let (input, output) = (lease.view(100, 4)?, lease.view(8192 + 4, 4)?);
//! let _dsp_us = kernel.launch(&[&input, &output], &[Scalar::U32(10)])?;
//! let mut out = [0u8; 4];
//! output.read(&mut out)?;
//! assert_eq!(out, [11, 12, 13, 14]);
//!
//! // A launch that does not match the signature is refused before any system call.
//! assert!(kernel.launch(&[&input], &[Scalar::U32(1)]).is_err());
//! # Ok(())
//! # }
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

pub mod launch;

/// Which signature and ABI a library is opened with, and why an open is refused (re-exported by
/// [`kernel`]).
mod open;

pub mod kernel;
pub use kernel::{Kernel, KernelLibrary, OpenRefusal};

pub mod error;
pub use error::Error;
#[cfg(feature = "std")]
pub use error::ThreadError;
pub use hexrpc_hal::{ErrorKind, HalError};

/// Glue with the HAL: HAL buffer views launch kernels, the reverse service publishes library
/// images for HAL sessions.
mod hal_glue;

/// A HAL session served by the reverse file service (std).
#[cfg(feature = "std")]
mod served;
#[cfg(feature = "std")]
pub use served::ServedSession;

/// The hardened reverse file service (adsp_listener: apps_remotectl, apps_std, apps_mem) under an
/// explicit, fixed-capacity file policy.
pub mod reverse;
