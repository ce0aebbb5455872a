//! `hexrpc selftest --bench` as a new user runs it, with a `PATH` this test controls: without the
//! Hexagon toolchain the four checks that run real Hexagon code are skipped and the report says
//! which tools are missing, which Debian packages provide them and the command that installs them
//! (once in the readable report, in every skipped check's `hint` in the JSON); with the toolchain
//! nothing is skipped.

mod common;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::Output;

/// The checks that run real Hexagon code (the executor).
const EXECUTOR_CHECKS: [&str; 4] = ["numerics", "latency", "batch-numerics", "batch-latency"];

/// `tool` on this process's own `PATH`.
fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Runs `hexrpc selftest --bench ARGS` with `PATH` set to `path` and nothing else changed
/// (through qemu-aarch64 when the tests run under it, found on this process's `PATH`).
fn selftest(path: &OsStr, args: &[&str]) -> Output {
    let all: Vec<&str> = ["selftest", "--bench"].into_iter().chain(args.iter().copied()).collect();
    common::hexrpc_env(&all, "PATH", path)
}

/// An empty directory of this test's own, for `PATH`.
fn empty_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hexrpc-selftest-hints-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `(passed, failed, skipped)` from the readable report's last line, `P passed, F failed, S skipped`.
fn summary(report: &str) -> (usize, usize, usize) {
    let last = report.lines().last().unwrap_or_default();
    let n: Vec<usize> = last.split([' ', ',']).filter_map(|w| w.parse().ok()).collect();
    assert!(last.ends_with(" skipped") && n.len() == 3, "summary line: {report}");
    (n[0], n[1], n[2])
}

/// The checks of a `--json` report.
fn json_checks(o: &Output) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    v["checks"].as_array().expect("checks").clone()
}

const INSTALL_ALL: &str = "sudo apt-get install --no-install-recommends clang-19 lld-19 qemu-user";

#[test]
fn without_the_toolchain_the_skips_name_the_packages_and_the_install_command() {
    let dir = empty_dir("none");
    // The readable report: the four skips name every missing tool, the hint comes once.
    let out = selftest(dir.as_os_str(), &[]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}{}", String::from_utf8_lossy(&out.stderr));
    let (_, failed, skipped) = summary(&report);
    assert_eq!((failed, skipped), (0, 4), "{report}");
    for name in EXECUTOR_CHECKS {
        let line = report.lines().find(|l| l.starts_with("SKIP") && l.split_whitespace().nth(1) == Some(name));
        let line = line.unwrap_or_else(|| panic!("no SKIP line for {name}: {report}"));
        assert!(line.contains("clang-19 not found on PATH (also missing: ld.lld-19, qemu-hexagon)"), "{line}");
    }
    assert_eq!(report.matches(INSTALL_ALL).count(), 1, "the install command once: {report}");
    let hint = report.lines().find(|l| l.contains(INSTALL_ALL)).unwrap();
    assert!(hint.contains("what to do (numerics, latency, batch-numerics, batch-latency)"), "{hint}");
    assert!(hint.contains("Debian packages clang-19, lld-19 (provides ld.lld-19) and qemu-user (provides qemu-hexagon)"), "{hint}");
    assert!(hint.contains("`bash .ci/run`") && hint.contains("installs them"), "{hint}");

    // The JSON: every skipped check carries the hint; the checks that ran have none.
    let out = selftest(dir.as_os_str(), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let checks = json_checks(&out);
    let skipped: Vec<&serde_json::Value> = checks.iter().filter(|c| c["status"] == "skip").collect();
    assert_eq!(skipped.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), EXECUTOR_CHECKS, "{checks:?}");
    for c in &skipped {
        let hint = c["hint"].as_str().unwrap_or_else(|| panic!("no hint: {c}"));
        assert!(hint.contains(INSTALL_ALL) && hint.contains("`bash .ci/run`"), "{c}");
        assert!(c["detail"].as_str().unwrap().contains("clang-19 not found on PATH"), "{c}");
    }
    for c in checks.iter().filter(|c| c["status"] != "skip") {
        assert_eq!(c["status"], "pass", "{c}");
        assert_eq!(c["hint"], "", "{c}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_the_compilers_but_no_qemu_hexagon_the_hint_names_qemu_user_only() {
    let (Some(clang), Some(lld)) = (which("clang-19"), which("ld.lld-19")) else {
        println!("SKIPPED: clang-19 or ld.lld-19 is not on PATH here");
        return;
    };
    let dir = empty_dir("compilers");
    std::os::unix::fs::symlink(&clang, dir.join("clang-19")).unwrap();
    std::os::unix::fs::symlink(&lld, dir.join("ld.lld-19")).unwrap();
    let out = selftest(dir.as_os_str(), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let checks = json_checks(&out);
    let skipped: Vec<&serde_json::Value> = checks.iter().filter(|c| c["status"] == "skip").collect();
    assert_eq!(skipped.len(), 4, "{checks:?}");
    for c in skipped {
        let (detail, hint) = (c["detail"].as_str().unwrap(), c["hint"].as_str().unwrap());
        assert!(detail.ends_with("qemu-hexagon not found on PATH"), "{c}");
        assert!(hint.starts_with("install the Debian package qemu-user (provides qemu-hexagon): "), "{c}");
        assert!(hint.contains("`sudo apt-get install --no-install-recommends qemu-user`") && hint.contains("`bash .ci/run`"), "{c}");
        assert!(!hint.contains("clang") && !hint.contains("lld"), "only what is missing: {c}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "the toolchain installed here is x86-64: a test binary under qemu-aarch64 cannot launch it (the executor says so)"
)]
fn with_the_toolchain_nothing_is_skipped() {
    if ["clang-19", "ld.lld-19", "qemu-hexagon"].iter().any(|t| which(t).is_none()) {
        println!("SKIPPED: clang-19, ld.lld-19 or qemu-hexagon is not on PATH here");
        return;
    }
    let path: OsString = std::env::var_os("PATH").unwrap();
    let out = selftest(&path, &[]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}{}", String::from_utf8_lossy(&out.stderr));
    let (_, failed, skipped) = summary(&report);
    assert_eq!((failed, skipped), (0, 0), "{report}");
    assert!(!report.contains("what to do"), "{report}");
    for name in EXECUTOR_CHECKS {
        assert!(report.lines().any(|l| l.starts_with("PASS") && l.split_whitespace().nth(1) == Some(name)), "{name}: {report}");
    }
}
