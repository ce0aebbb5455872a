//! The hexrpc runtime: the kernel-launch ABI (host packer and DSP entry generator, from one
//! table) and the hardened reverse file service that answers the DSP's file requests.
//!
//! Fixed capacity and allocation-free in the request and launch paths.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

pub mod launch;

pub mod kernel;
pub use kernel::{Kernel, KernelLibrary, LaunchError};

/// Glue with the HAL: HAL buffer views launch kernels, the reverse service publishes library
/// images for HAL sessions.
mod hal_glue;

/// A HAL session served by the reverse file service (std).
#[cfg(feature = "std")]
mod served;
#[cfg(feature = "std")]
pub use served::{ServedSession, StartError};

/// The hardened reverse file service (adsp_listener: apps_remotectl, apps_std, apps_mem) under an
/// explicit, fixed-capacity file policy.
pub mod reverse;
