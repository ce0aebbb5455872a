//! `hexrpc selftest`: the report's JSON shape and first line, on the bench, the upstream bench,
//! a device without the nodes and a device through the bench seam.

use crate::common::{hexrpc, tools_run};

#[test]
fn selftest_json_shape() {
    let out = hexrpc(&["selftest", "--bench", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("selftest --json is JSON");
    assert_eq!(v["platform"], "bench");
    let checks = v["checks"].as_array().expect("checks array");
    assert!(!checks.is_empty());
    let mut failed = false;
    for c in checks {
        for k in ["name", "stage", "status", "figure", "detail"] {
            assert!(c[k].is_string(), "{k} in {c}");
        }
        let st = c["status"].as_str().unwrap();
        assert!(matches!(st, "pass" | "fail" | "skip"), "{st}");
        failed |= st == "fail";
    }
    assert!(checks.iter().any(|c| c["status"] == "pass"), "at least one check really ran");
    // The batched model run is reported beside the per-kernel one (both run, or both skip).
    let status = |n: &str| checks.iter().find(|c| c["name"] == n).map(|c| c["status"].clone()).unwrap_or_else(|| panic!("{n} missing"));
    assert_eq!(status("batch-numerics"), status("numerics"));
    assert_eq!(status("batch-latency"), status("latency"));
    assert_eq!(out.status.code(), Some(if failed { 1 } else { 0 }));
}

#[test]
fn selftest_text_says_bench_first() {
    let out = hexrpc(&["selftest", "--bench"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().next().unwrap().contains("BENCH"), "{text}");
}

#[test]
fn selftest_device_without_nodes_fails_and_names_them() {
    if std::path::Path::new("/dev/ion").exists() || std::path::Path::new("/dev/adsprpc-smd").exists() {
        eprintln!("this machine has DSP nodes: the missing-node path cannot be shown here");
        return;
    }
    let out = hexrpc(&["selftest", "--device", "--board", "comma-three"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().next().unwrap().contains("DEVICE"), "{text}");
    for node in ["/dev/ion", "/dev/adsprpc-smd"] {
        assert!(text.lines().any(|l| l.starts_with("FAIL") && l.contains(node)), "{node} named in a FAIL line: {text}");
    }
    // No bench figure under the device header: the bench-only checks are skipped with the reason.
    for name in ["numerics", "latency", "bench-hang-recovery"] {
        let line = text.lines().find(|l| l.split_whitespace().nth(1) == Some(name)).unwrap_or_else(|| panic!("{name}: {text}"));
        assert!(line.starts_with("SKIP") && line.contains("bench only"), "{line}");
    }
    assert!(!text.contains("simulated") || text.contains("bench only"), "{text}");
    let json = hexrpc(&["selftest", "--device", "--board", "comma-three", "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["platform"], "device");
    assert_eq!(v["board"], "comma-three", "the device report names its board");
    assert!(v["checks"].as_array().unwrap().iter().all(|c| c["status"] != "pass" || c["stage"] == "parameter layout"), "{v}");
}

#[test]
fn selftest_device_checks_run_through_the_bench_seam_and_pass() {
    let out = hexrpc(&["selftest", "--device", "--seam", "bench", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let check = |n: &str| checks.iter().find(|c| c["name"] == n).unwrap_or_else(|| panic!("{n}: {v}")).clone();
    assert_eq!(check("probe")["status"], "pass");
    for n in ["view-offsets", "v1-refusal", "fd-mapping-reclamation", "reverse-file-permissions", "deadline", "concurrency"] {
        assert_eq!(check(n)["status"], "pass", "{}", check(n));
    }
    // The library's forbidden-path requests are refused and counted by the service.
    assert_eq!(check("reverse-file-permissions")["figure"], "3 refused");
    // Where clang-19, ld.lld-19 and qemu-hexagon run, the library is the one build-lib makes and
    // its code runs under the executor; otherwise the line says why not.
    let tools = tools_run(&["clang-19", "ld.lld-19", "qemu-hexagon"]);
    let detail = check("view-offsets")["detail"].as_str().unwrap().to_string();
    if tools && cfg!(target_arch = "x86_64") {
        assert!(detail.contains("built by build-lib") && detail.contains("executor"), "{detail}");
        // The forbidden fopens come from the library's own Hexagon code, through the executor's
        // shell and the listener.
        let perm = check("reverse-file-permissions")["detail"].as_str().unwrap().to_string();
        assert!(perm.contains("built by build-lib") && perm.contains("executor"), "{perm}");
    } else {
        assert!(detail.contains("scripted model") && detail.contains("cannot run the built library"), "{detail}");
    }
    assert_eq!(check("fd-mapping-reclamation")["figure"], "0 leaked");
    let text = hexrpc(&["selftest", "--device", "--seam", "bench"]);
    let first = String::from_utf8(text.stdout).unwrap().lines().next().unwrap().to_string();
    assert!(first.contains("BENCH SEAM") && first.contains("not device figures"), "{first}");
    assert!(text.stderr.is_empty(), "no warning line from the deliberate checks: {}", String::from_utf8_lossy(&text.stderr));
    assert_eq!(hexrpc(&["selftest", "--seam", "bench"]).status.code(), Some(2), "--seam needs --device");
}

#[test]
fn selftest_on_the_upstream_bench_passes_every_check() {
    let out = hexrpc(&["selftest", "--bench", "--board", "bench-upstream", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("selftest --json is JSON");
    assert_eq!((v["platform"].as_str(), v["board"].as_str()), (Some("bench"), Some("bench-upstream")));
    let checks = v["checks"].as_array().unwrap();
    assert!(checks.len() >= 10);
    for c in checks {
        assert_ne!(c["status"], "fail", "{c}");
    }
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
