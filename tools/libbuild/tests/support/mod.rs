//! What the build-and-run tests of this crate share: whether the executor's tools run here, and
//! a fresh work directory per test.

#![allow(dead_code)]

use std::path::PathBuf;

/// True when clang-19, ld.lld-19 and qemu-hexagon run here; otherwise prints why (SKIPPED).
pub fn executor_tools() -> bool {
    match hexrpc_bench::executor::tools_available() {
        Ok(_) => true,
        Err(why) => {
            println!("SKIPPED: {why}");
            false
        }
    }
}

/// A new empty directory `hexrpc-libbuild-<suite>-<pid>-<name>` under the temporary directory.
pub fn work_dir(suite: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-libbuild-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
