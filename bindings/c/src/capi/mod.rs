//! The C API: the types and constants of `hexrpc.h` and every `extern "C"` function, one file
//! per part of the header. Each function reads its arguments with [`args`] and runs its body
//! through [`last_error::run`], which turns a failure or a panic into a status and the thread's
//! last error.
//!
//! cbindgen writes the header's constants and functions in the order it reads them: the items of
//! a file, then its modules in the order they are declared, depth first. The modules below are
//! declared in the header's order, each after a comment that keeps rustfmt from sorting them:
//! reordering them reorders the header.

// The handles, the argument structs and the ABI, arena, scalar and bench-flag constants.
mod types;
// HEXRPC_VERSION_*, hexrpc_version*, hexrpc_version_check.
mod version;
// hexrpc_last_error_*, hexrpc_status_name; `run`, which every function's body goes through.
mod last_error;
// hexrpc_session_*, the log callback and board detection, hexrpc_bench_restart_dsp.
mod session;
// hexrpc_lease_*, hexrpc_arena_*.
mod lease;
// hexrpc_library_*, hexrpc_launch.
mod library;
// The bytes a library is opened from: hexrpc_bench_*_image, hexrpc_build_library.
mod images;
// hexrpc_batch_*.
mod batch;
// hexrpc_model_*.
mod model;
// Reading a call's arguments and writing its out parameters (no C items).
mod args;

pub use self::batch::*;
#[cfg(feature = "build-lib")] // every item of `images` needs it
pub use self::images::*;
pub use self::last_error::*;
pub use self::lease::*;
pub use self::library::*;
pub use self::model::*;
pub use self::session::*;
pub use self::types::*;
pub use self::version::*;
