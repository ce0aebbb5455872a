//! `hexrpc probe`: every step without a DSP, on the bench and the upstream bench, the missing node
//! named on a device, and the shipped device test library loaded by default.

use crate::common::{build_device_library, executor_runnable, hexrpc, scratch_path, stderr_of};

#[test]
fn probe_without_a_dsp_checks_every_prerequisite_and_says_what_to_do() {
    if std::path::Path::new("/dev/ion").exists() {
        eprintln!("this machine has /dev/ion: the missing-node path cannot be shown here");
        return;
    }
    let out = hexrpc(&["probe", "--json", "--board", "comma-three"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probe --json is JSON");
    assert_eq!(v["board"], "comma-three");
    assert_eq!(v["board_source"], "given");
    let steps = v["steps"].as_array().unwrap();
    let step = |n: &str| steps.iter().find(|s| s["name"] == n).unwrap_or_else(|| panic!("{n} missing: {v}")).clone();
    assert_eq!(step("board")["status"], "pass");
    assert_eq!(step("kernel")["status"], "skip", "no DSP driver node at all on this machine");
    // Both nodes are checked: the second is not hidden behind the first's failure.
    for (name, node) in [("ion-node", "/dev/ion"), ("rpc-node", "/dev/adsprpc-smd")] {
        let s = step(name);
        assert_eq!(s["status"], "fail", "{s}");
        assert!(s["detail"].as_str().unwrap().contains(node), "{s}");
        assert!(s["hint"].as_str().unwrap().contains("--bench"), "a failed step says what to do: {s}");
    }
    assert_eq!(step("shell-file")["status"], "fail");
    assert!(step("shell-file")["hint"].as_str().unwrap().contains("/dsp"));
    for chained in ["ion-alloc", "channel", "listener", "library"] {
        let s = step(chained);
        assert_eq!(s["status"], "skip", "{s}");
        assert!(s["detail"].as_str().unwrap().contains("needs"), "the skip names what it needs: {s}");
    }
    assert!(v["summary"]["failed"].as_u64().unwrap() >= 3);
    assert!(v["summary"]["line"].as_str().unwrap().starts_with("probe: "));
}

#[test]
fn probe_on_the_bench_passes_every_step_including_a_library_load() {
    let out = hexrpc(&["probe", "--bench", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probe --json is JSON");
    assert_eq!(v["board"], "bench");
    let names: Vec<&str> = v["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "board",
            "kernel",
            "ion-node",
            "rpc-node",
            "groups",
            "selinux",
            "shell-file",
            "ion-alloc",
            "shell-stage",
            "channel",
            "process",
            "pm-qos",
            "listener",
            "library"
        ]
    );
    for s in v["steps"].as_array().unwrap() {
        let host_fact = s["name"] == "groups" || s["name"] == "selinux";
        assert_eq!(s["status"], if host_fact { "skip" } else { "pass" }, "{s}");
    }
    let pm_qos = v["steps"].as_array().unwrap().iter().find(|s| s["name"] == "pm-qos").unwrap()["detail"].as_str().unwrap();
    assert!(pm_qos.contains("FASTRPC_CONTROL_LATENCY taken"), "the comma-three bench takes the vote: {pm_qos}");
    assert_eq!(v["summary"]["failed"], 0);
}

#[test]
fn probe_on_the_upstream_bench_names_the_upstream_driver_and_the_heap() {
    let out = hexrpc(&["probe", "--bench", "--board", "bench-upstream", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probe --json is JSON");
    assert_eq!(v["board"], "bench-upstream");
    let steps = v["steps"].as_array().unwrap();
    for s in steps {
        // The upstream driver has no PM-QoS request: nothing to vote with.
        let skipped = s["name"] == "groups" || s["name"] == "selinux" || s["name"] == "pm-qos";
        assert_eq!(s["status"], if skipped { "skip" } else { "pass" }, "{s}");
    }
    let pm_qos = steps.iter().find(|s| s["name"] == "pm-qos").unwrap()["detail"].as_str().unwrap();
    assert!(pm_qos.contains("no PM-QoS request"), "{pm_qos}");
    let kernel = steps.iter().find(|s| s["name"] == "kernel").unwrap()["detail"].as_str().unwrap();
    assert!(kernel.contains("upstream fastrpc") && kernel.contains("/bench/dev/fastrpc-cdsp"), "{kernel}");
    assert!(kernel.contains("dma-heap") && kernel.contains("/bench/dev/dma_heap/system"), "{kernel}");
    // A board whose ABI is not the bench kernel's is refused at the kernel step, naming both.
    let out = hexrpc(&["probe", "--bench", "--board", "qcom-rb5"]);
    assert_eq!(out.status.code(), Some(2), "only bench boards on the bench");
}

#[test]
fn probe_device_names_the_missing_node() {
    if std::path::Path::new("/dev/ion").exists() {
        eprintln!("this machine has /dev/ion: the missing-node path cannot be shown here");
        return;
    }
    let out = hexrpc(&["probe", "--device", "--board", "comma-three"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let ion = text.lines().find(|l| l.contains("ion-node")).unwrap();
    assert!(ion.starts_with("FAIL") && ion.contains("missing /dev/ion"), "{text}");
    assert!(text.lines().any(|l| l.contains("what to do:")), "{text}");
    assert!(text.lines().last().unwrap().starts_with("probe: ") && text.lines().last().unwrap().contains("failed"), "summary line: {text}");
    // An upstream board's hints speak of the upstream driver and dma-heap, not of downstream ION.
    if !std::path::Path::new("/dev/fastrpc-cdsp").exists() {
        let out = hexrpc(&["probe", "--device", "--board", "qcom-rb5"]);
        let text = String::from_utf8_lossy(&out.stdout);
        let hints: Vec<&str> = text.lines().filter(|l| l.contains("what to do:")).collect();
        assert!(!hints.is_empty(), "{text}");
        assert!(hints.iter().all(|h| !h.contains("downstream")), "{text}");
        assert!(hints.iter().filter(|h| h.contains("upstream fastrpc driver")).count() >= 2, "{text}");
    }
}

/// `hexrpc probe` with its default arguments on an installed root loads the shipped device test
/// library in its library step (through the bench seam: the bench stands in for the nodes and
/// the library runs under qemu-hexagon); with nothing installed the step says where it looked.
#[test]
fn probe_loads_the_shipped_device_test_library_by_default() {
    if !executor_runnable() {
        return;
    }
    let dir = scratch_path("probe-root");
    let lib_dir = dir.join("usr/lib/hexrpc");
    std::fs::create_dir_all(&lib_dir).unwrap();
    build_device_library(&lib_dir.join("libhexrpc_selftest.so"));
    let empty = dir.join("empty-root");
    std::fs::create_dir_all(&empty).unwrap();

    let installed = hexrpc(&["probe", "--seam", "bench", "--root", dir.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&installed.stdout).unwrap_or_else(|e| panic!("{e}: {installed:?}"));
    let step = |v: &serde_json::Value, name: &str| v["steps"].as_array().unwrap().iter().find(|s| s["name"] == name).cloned().unwrap();
    let lib = step(&v, "library");
    assert_eq!(lib["status"], "pass", "{v}");
    assert!(lib["detail"].as_str().unwrap().contains("loaded"), "{lib}");
    assert_eq!(installed.status.code(), Some(0), "{}", stderr_of(&installed));

    let bare = hexrpc(&["probe", "--seam", "bench", "--root", empty.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&bare.stdout).unwrap();
    let lib = step(&v, "library");
    assert_eq!(lib["status"], "skip", "{v}");
    assert!(lib["detail"].as_str().unwrap().contains("/usr/lib/hexrpc/libhexrpc_selftest.so"), "{lib}");
    // --seam bench is the device probe's seam, not the bench's.
    assert_eq!(hexrpc(&["probe", "--bench", "--seam", "bench"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
