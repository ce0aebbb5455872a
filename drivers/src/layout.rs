//! Layout descriptions of the ABI structs, checked at compile time and listed at run time.
//!
//! Every ABI struct is declared with [`abi_layout!`](crate::abi_layout), which asserts its size,
//! alignment and every field offset against the numbers from the kernel header (a wrong layout
//! fails the build), and registers a [`StructLayout`] so that `hexrpc abi` can print what this
//! build believes, for an engineer to compare with the device's headers.
//!
//! The declarations ([`StructLayout`], [`AbiLayout`], [`abi_layout!`](crate::abi_layout)), which
//! every ABI file uses, are in one file and the table ([`STRUCTS`]), which uses every ABI file,
//! in another, so the files import each other one way only.

mod declare;
mod table;

pub use declare::{AbiLayout, StructLayout};
pub use table::STRUCTS;
