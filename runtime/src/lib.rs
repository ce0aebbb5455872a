//! The hexrpc runtime: the kernel-launch ABI (host packer and DSP entry generator, from one
//! table) and the hardened reverse file service that answers the DSP's file requests.
//!
//! Fixed capacity and allocation-free in the request and launch paths.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

/// The kernel-launch ABI (v1 and v2) from one table: host packer, DSP entry generator, build step.
pub mod launch;

/// Glue with the HAL: HAL buffer views launch kernels, the reverse service publishes library
/// images for HAL sessions.
mod hal_glue;

/// A HAL session served by the reverse file service (std).
#[cfg(feature = "std")]
mod served;
#[cfg(feature = "std")]
pub use served::{RecoverError, ServedSession, StartError};

/// The hardened reverse file service (adsp_listener: apps_remotectl, apps_std, apps_mem) under an
/// explicit, fixed-capacity file policy.
pub mod reverse;
