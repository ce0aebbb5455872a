//! hexrpc for C and C++: `libhexrpc.so`, `libhexrpc.a` and `include/hexrpc.h` (generated from
//! this crate by cbindgen; CI regenerates it and fails on a difference).
//!
//! # Conventions (in the style of rustls-ffi, libgit2 and SQLite)
//!
//! * **Handles** (`hexrpc_session *`, `hexrpc_lease *`, `hexrpc_library *`) are opaque: their
//!   value names an entry of a process-wide table and is never dereferenced. Passing NULL, a
//!   handle that was freed or closed (twice or more), a forged value or a handle of another kind
//!   returns `HEXRPC_ERR_HANDLE` (or `HEXRPC_ERR_NULL`): never undefined behaviour.
//! * **Status codes**: every function returns a [`hexrpc_status`]; `HEXRPC_OK` is 0. After a
//!   failure, `hexrpc_last_error_message()` on the same thread names the stage that failed and the
//!   cause (`"library-open: the DSP answered 4 (AEE_EUNABLETOLOAD...)"`), until the next failing
//!   call on that thread. Successful calls leave it alone and allocate nothing on the launch
//!   path.
//! * **Out parameters** are written only on success.
//! * **Threads**: every function may be called from any thread, concurrently, on the same or
//!   different handles, unless its documentation says otherwise. Launches on one library from
//!   several threads run concurrently. Closing or freeing a handle while another thread is inside
//!   a call that uses it is safe: the call finishes, and the object is released when it returns.
//! * **Ownership**: closing a session closes every lease and library made from it (their handles
//!   become dead). A lease's host pointer stays valid until the lease is freed or its session
//!   closed; using it afterwards is the caller's bug (no library can guard a raw pointer).
//! * **Panics**: a panic inside hexrpc is caught and returned as `HEXRPC_ERR_PANIC` in builds that
//!   unwind; release builds abort (the workspace profile sets `panic = "abort"`).
//!
//! The memory of a lease is shared with the DSP: the DSP writes it during a launch, so read
//! outputs after the launch has returned.
//!
//! The Rust layer underneath ([`objects`]) is also what the Python package uses.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

// The C API: its types, constants and functions (`capi/`, one file per part of the header), over
// the Rust layer below, which the Python package shares. cbindgen reads `capi` before `logcb`
// (declaration order), which puts the header's HEXRPC_LOG_* constants after the others.
pub mod batch;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "build-lib")]
pub mod build;
mod capi;
pub mod error;
mod logcb;
pub mod model;
pub mod objects;
pub mod seam;
mod table;

pub use capi::*;
pub use error::{hexrpc_status, Failure};
pub use logcb::{hexrpc_log_fn, HEXRPC_LOG_DEBUG, HEXRPC_LOG_ERROR, HEXRPC_LOG_INFO, HEXRPC_LOG_OFF, HEXRPC_LOG_TRACE, HEXRPC_LOG_WARN};
