//! What the CLI writes: `--output` files (atomic, never through a link or onto a node, `-` is
//! stdout) and the `report` tar.

use std::process::Command;

use crate::common::{hexrpc, scratch_dir};

#[test]
fn output_is_atomic_refuses_links_and_nodes_and_dash_is_stdout() {
    let dir = scratch_dir("output");
    let report = dir.join("probe.json");
    let out = hexrpc(&["probe", "--bench", "--json", "--output", report.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(v["board"], "bench");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = hexrpc(&["probe", "--bench", "--output", link.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"), "the error is on stderr: {out:?}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    let out = hexrpc(&["probe", "--bench", "--output", "/dev/null"]);
    assert_eq!(out.status.code(), Some(1), "a device node is refused: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("character device"), "{out:?}");
    let out = hexrpc(&["probe", "--bench", "--json", "--output", "-"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok(), "- is stdout");
    assert!(!std::path::Path::new("-").exists(), "no file named -");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 3, "no temporary files left: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_is_one_tar_with_every_part() {
    let dir = scratch_dir("report");
    let tar = dir.join("r.tar");
    let out = hexrpc(&["report", "--board", "comma-three", "-o", tar.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let list = Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
    let names = String::from_utf8(list.stdout).unwrap();
    for part in ["probe.json", "selftest.json", "kernel.txt", "dmesg.txt", "versions.txt"] {
        assert!(names.contains(&format!("hexrpc-report/{part}")), "{part}: {names}");
    }
    let probe = Command::new("tar").arg("-xOf").arg(&tar).arg("hexrpc-report/probe.json").output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&probe.stdout).expect("probe.json is JSON");
    assert_eq!(v["board"], "comma-three");
    let st = Command::new("tar").arg("-xOf").arg(&tar).arg("hexrpc-report/selftest.json").output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).expect("selftest.json is JSON");
    assert!(v["platform"].is_string() && v["checks"].as_array().is_some_and(|c| !c.is_empty()));
    // Never the bench in a report: on a machine without the DSP the device checks fail.
    assert_eq!(v["platform"], "device", "{v}");
    if !std::path::Path::new("/dev/adsprpc-smd").exists() {
        let statuses: Vec<&str> = v["checks"].as_array().unwrap().iter().filter_map(|c| c["status"].as_str()).collect();
        assert!(statuses.contains(&"fail") && !statuses.iter().all(|s| *s == "pass"), "{statuses:?}");
    }
    let kernel = Command::new("tar").arg("-xOf").arg(&tar).arg("hexrpc-report/kernel.txt").output().unwrap();
    assert!(String::from_utf8_lossy(&kernel.stdout).contains("Linux"), "kernel version");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `report --model FILE`: the model's check on this machine's DSP goes into the archive, or,
/// where it cannot run (here, without the DSP), why not.
#[test]
fn report_holds_a_model_check_per_model_file() {
    let dir = scratch_dir("report-model");
    let tar = dir.join("r.tar");
    let model = dir.join("s.hxm");
    assert!(hexrpc(&["model", "sample", model.to_str().unwrap(), "--size", "8"]).status.success());
    let out = hexrpc(&[
        "report",
        "--board",
        "comma-three",
        "--model",
        model.to_str().unwrap(),
        "--model",
        "/nonexistent.hxm",
        "-o",
        tar.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for (n, needle) in [(1, model.to_str().unwrap()), (2, "/nonexistent.hxm")] {
        let part = Command::new("tar").arg("-xOf").arg(&tar).arg(format!("hexrpc-report/model-check-{n}.json")).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&part.stdout).expect("model-check is JSON");
        assert_eq!((v["command"].as_str(), v["file"].as_str()), (Some("check"), Some(needle)), "{v}");
        if !std::path::Path::new("/dev/adsprpc-smd").exists() {
            assert!(v["error"].is_string(), "no DSP here: the check says why it did not run: {v}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
