//! `hexrpc abi`: the kernel ABI this build was compiled for.

use std::process::ExitCode;

/// Prints the ABI as text or JSON.
pub fn abi(json: bool) -> ExitCode {
    crate::io::print(&if json { crate::abi::to_json() } else { crate::abi::to_text() })
}
