//! `hexrpc build-lib` as a function (feature `build-lib`, independent of the bench): what the C
//! ABI's `hexrpc_build_library` and Python's `hexrpc.build_library` call. It runs clang-19 and
//! ld.lld-19 (a build machine, a desk, or a device that has them); a missing tool is
//! `HEXRPC_ERR_UNAVAILABLE` naming it and how to install it.

use std::path::Path;
use std::sync::Mutex;

use hexrpc_libbuild::{self as build, BuildError, BuildOptions};
use hexrpc_runtime::launch::{AbiVersion, EntryOptions, Signature};

use crate::error::Failure;

/// Builds kernel `kernel_name` (default: the file's stem) of the C file `kernel_c`, with an
/// entry for `signature` and `abi`, into the Hexagon shared object `out` (with its build record),
/// checked as `hexrpc build-lib` checks it. Builds run one at a time in a process.
pub fn build_library(kernel_c: &Path, kernel_name: Option<&str>, signature: &str, abi: AbiVersion, out: &Path) -> Result<(), Failure> {
    static BUILDING: Mutex<()> = Mutex::new(());
    let sig = Signature::parse(signature).map_err(|e| Failure::invalid("build-lib", format!("signature {signature:?}: {e}")))?;
    let opts = BuildOptions {
        entry: EntryOptions { version: abi, power_request: None, map_cache: abi == AbiVersion::V2, power_method: abi == AbiVersion::V2 },
        kernel_name: kernel_name.map(str::to_string),
        ..BuildOptions::default()
    };
    let _one = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    build::build_library(kernel_c, &sig, out, &opts).map_err(|e| match e {
        BuildError::ToolMissing { .. } => Failure::unavailable("build-lib", format!("{e} ({})", build::INSTALL_HINT)),
        e => Failure::invalid("build-lib", e.to_string()),
    })?;
    Ok(())
}
