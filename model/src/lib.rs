//! Model files: a model compiled at the desk, run on a device with no compiler.
//!
//! A model file holds everything a run needs: the kernel-table libraries (Hexagon ELF shared
//! objects with their build records), the arenas the model's tensors live in and their initial
//! contents (the weights; zero ranges stored as ranges), the launch records of a run in the
//! launch ABI's batch-record form, grouped into steps of one library each, the inputs and outputs
//! (name, dtype, shape, arena, offset, length) and its provenance. `docs/model-format.md`
//! describes the format byte by byte.
//!
//! [`ModelFile::parse`] takes the file as a byte slice (read or mapped), validates all of it
//! before anything else happens (every count, index, offset and length against the file's own
//! sizes and this build's capacities, every section's checksum, every library's ELF header and
//! build record, every record against its kernel's signature) and then lends out its parts. It
//! allocates nothing and works without `std`, so a `no_std` service can read a file too.
//! [`ModelBuilder`] (feature `std`) writes one.
//!
//! [`npy`] (feature `std`) reads and writes numpy's `.npy` files, the form a model's inputs and
//! outputs take on a command line.
//!
//! [`run`] (feature `std`) opens a file on a served session and runs it: one FastRPC call per
//! run ([`run::LoadedModel`]).

#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "std")]
pub mod bind;
mod dtype;
mod error;
pub mod format;
#[cfg(feature = "std")]
pub mod npy;
mod parse;
#[cfg(feature = "std")]
pub mod run;
#[cfg(feature = "std")]
pub mod sample;
#[cfg(feature = "std")]
mod write;

pub use dtype::{DType, DTYPES};
pub use error::{ModelError, Part, SymbolName};
pub use format::{Direction, SectionKind, FORMAT_MAJOR, FORMAT_MINOR, MAGIC};
pub use parse::{
    Arena, InitRange, Io, Library, Limits, ModelFile, Provenance, Step, ENTRY_ABI, KNOWN_ARCHS, MAX_ARENAS, MAX_INIT_RANGES, MAX_IO,
    MAX_LAUNCHES, MAX_LIBRARIES, MAX_STEPS, MAX_TEXT,
};
#[cfg(feature = "std")]
pub use write::{encode_record, InitSpec, IoSpec, ModelBuilder, StepSpec, ZERO_RUN};
