//! The hexrpc HAL: a typed session over ION and FastRPC for on-device services.
//!
//! Init stages become types, buffer allocations become leases with borrowed views, library
//! handles close themselves. Built on the syscall seam of `hexrpc-drivers`, so it runs unchanged
//! on a device and on the bench.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
