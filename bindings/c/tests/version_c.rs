//! `tests/version.c` compiled against `include/hexrpc.h` as C99 (`-pedantic`) and as C++17
//! (`-Wold-style-cast`), `-Wall -Wextra -Werror`, and run: the header's version macros
//! (`HEXRPC_VERSION_CMP`, `HEXRPC_VERSION_AT_LEAST`, `HEXRPC_VERSION_PACK`, `HEXRPC_VERSION`) on
//! the boundary cases and against Cargo's version; the `HEXRPC_VERSION` it prints is compared
//! with the library's `hexrpc_version_number()`. `.ci/bindings` also builds it linked with
//! libhexrpc through pkg-config, where it calls the library's version functions itself.
//!
//! Skips (with a message) when no C compiler is found (`CC`, then `cc`, then `clang-19`; `CXX`,
//! then `c++`, then `clang++-19`).

use std::path::Path;
use std::process::Command;

fn compiler(var: &str, defaults: &[&str]) -> Option<String> {
    let candidates = std::env::var(var).ok().into_iter().chain(defaults.iter().map(|s| s.to_string()));
    for c in candidates {
        if Command::new(&c).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Some(c);
        }
    }
    eprintln!("SKIPPED: no compiler ({var}, {defaults:?}); tests/version.c was not built");
    None
}

/// Builds `tests/version.c` header-only (cargo builds no libhexrpc.so for integration tests; the
/// linked build is .ci/bindings'), runs it and returns what it printed.
fn build_and_run(cc: &str, lang: &[&str], name: &str) -> String {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("hexrpc-version-c-{}-{name}", std::process::id()));
    let mut c = Command::new(cc);
    c.args(lang)
        .args(["-Wall", "-Wextra", "-Werror"])
        .arg(format!("-DHEXRPC_EXPECTED_VERSION=\"{}\"", env!("CARGO_PKG_VERSION")))
        .arg("-I")
        .arg(here.join("include"))
        .arg(here.join("tests/version.c"))
        .arg("-o")
        .arg(&out);
    let built = c.output().unwrap();
    assert!(built.status.success(), "{name}: {c:?} failed:\n{}", String::from_utf8_lossy(&built.stderr));
    let run = Command::new(&out).output().unwrap();
    let _ = std::fs::remove_file(&out);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{name}: tests/version.c failed ({}):\n{stdout}{}", run.status, String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("version macro checks passed"), "{name}: {stdout}");
    eprint!("{name}: {stdout}");
    stdout
}

/// The header's `HEXRPC_VERSION` (as the C program printed it) is the library's
/// `hexrpc_version_number()` and the crate's `HEXRPC_VERSION`.
fn check_against_the_library(stdout: &str) {
    let printed = stdout.lines().find_map(|l| l.strip_prefix("HEXRPC_VERSION=")).and_then(|r| r.split(' ').next());
    let printed = printed.unwrap_or_else(|| panic!("no HEXRPC_VERSION= line: {stdout}"));
    assert_eq!(printed, hexrpc::hexrpc_version_number().to_string(), "the header's HEXRPC_VERSION is hexrpc_version_number()");
    assert_eq!(printed, hexrpc::HEXRPC_VERSION.to_string());
    let v = format!("{}.{}.{}", hexrpc::HEXRPC_VERSION_MAJOR, hexrpc::HEXRPC_VERSION_MINOR, hexrpc::HEXRPC_VERSION_PATCH);
    assert!(stdout.contains(&format!("({v})")) && v == env!("CARGO_PKG_VERSION"), "{stdout}");
}

#[test]
fn version_macros_compare_lexicographically_as_c99() {
    let Some(cc) = compiler("CC", &["cc", "clang-19"]) else { return };
    check_against_the_library(&build_and_run(&cc, &["-std=c99", "-pedantic"], "c99"));
}

#[test]
fn version_macros_compare_lexicographically_as_cpp17() {
    let Some(cxx) = compiler("CXX", &["c++", "clang++-19"]) else { return };
    check_against_the_library(&build_and_run(&cxx, &["-x", "c++", "-std=c++17", "-Wold-style-cast"], "cpp17"));
}
