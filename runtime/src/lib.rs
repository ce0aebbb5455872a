//! The hexrpc runtime: the kernel-launch ABI (host packer and DSP entry generator, from one
//! table) and the hardened reverse file service that answers the DSP's file requests.
//!
//! Fixed capacity and allocation-free in the request and launch paths.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
