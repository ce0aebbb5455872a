//! `hexrpc reverse-replay` and `hexrpc capture`: every request answered, malformed and unusable
//! inputs refused quickly, and a capture replayed as it was recorded.

use std::process::Command;

use crate::common::{hexrpc, hexrpc_within, scratch_dir, scratch_path, stderr_of};

#[test]
fn reverse_replay_answers_every_request_and_reports_malformed_files() {
    let dir = scratch_dir("replay");
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_string_lossy().into_owned()
    };
    let mut fclose = b"HXRQ\x08apps_std".to_vec();
    fclose.extend_from_slice(&0u32.to_le_bytes());
    fclose.extend_from_slice(&0x0301_0000u32.to_le_bytes());
    fclose.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0]);
    let mut unknown_handle = b"HXRQ\x00".to_vec();
    unknown_handle.extend_from_slice(&77u32.to_le_bytes());
    unknown_handle.extend_from_slice(&0x0301_0000u32.to_le_bytes());
    let a = file("fclose.hxrq", &fclose);
    let b = file("unknown-handle.hxrq", &unknown_handle);
    let c = file("truncated.hxrq", b"HXRQ\x08app");
    let out = hexrpc(&["reverse-replay", "--json", &a, &b]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = hexrpc(&["reverse-replay", "--json", &a, &b, &c]);
    assert_eq!(out.status.code(), Some(1), "a malformed file is an input that could not be used: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 3);
    assert!(r[0]["status"].as_i64().unwrap() != 0, "closing a FILE that was never opened is refused: {}", r[0]);
    assert_eq!(r[1]["status"].as_i64(), Some(0x3E), "unknown handle: AEE_ENOSUCHMOD");
    assert!(r[2]["status"].is_null() && r[2]["error"].is_string(), "{}", r[2]);
    assert!(v["metrics"]["requests"].as_u64().unwrap() >= 2, "service metrics: {}", v["metrics"]);
    assert_eq!(hexrpc(&["reverse-replay"]).status.code(), Some(2));
    assert_eq!(hexrpc(&["reverse-replay", "--policy", "/nonexistent/policy", &a]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unusable_inputs_are_refused_quickly_with_a_non_zero_exit() {
    let dir = scratch_dir("inputs");
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let missing = dir.join("missing.hxrq");
    let fifo = fifo.to_str().unwrap().to_string();
    let d = dir.to_str().unwrap().to_string();
    let limit = std::time::Duration::from_secs(30);
    let inputs = [
        ("/dev/zero", "character device"),
        (fifo.as_str(), "FIFO"),
        (d.as_str(), "directory"),
        (missing.to_str().unwrap(), "No such file"),
    ];
    for (input, why) in inputs {
        let out = hexrpc_within(&["reverse-replay", input], limit);
        assert_eq!(out.status.code(), Some(1), "REQUEST {input}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "REQUEST {input}: the reason on stderr: {err}");
        let out = hexrpc_within(&["reverse-replay", "--policy", input, "/dev/null"], limit);
        assert_eq!(out.status.code(), Some(2), "--policy {input}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "--policy {input}: {out:?}");
    }
    // Control characters in a name are escaped in the text output.
    let hostile = dir.join("evil[2Jname.hxrq");
    std::fs::write(&hostile, b"HXRQapp").unwrap();
    let out = hexrpc_within(&["reverse-replay", hostile.to_str().unwrap()], limit);
    assert_eq!(out.status.code(), Some(1));
    assert!(!out.stdout.contains(&0x1b) && !out.stderr.contains(&0x1b), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("evil\\u{1b}[2Jname"), "{}", String::from_utf8_lossy(&out.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn capture_then_reverse_replay_round_trip() {
    let dir = scratch_path("capture");
    let out = hexrpc(&["capture", "--bench", "--dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let recorded = index["requests"].as_array().unwrap();
    assert!(recorded.len() >= 5, "the library fetch and the library's fopens are recorded: {index}");
    let files: Vec<String> = recorded.iter().map(|r| dir.join(r["file"].as_str().unwrap()).to_string_lossy().into_owned()).collect();
    let mut args = vec!["reverse-replay", "--json"];
    args.extend(files.iter().map(String::as_str));
    let out = hexrpc(&args);
    assert_eq!(out.status.code(), Some(0), "every captured file is accepted: {}", String::from_utf8_lossy(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let replayed = v["results"].as_array().unwrap();
    assert_eq!(replayed.len(), recorded.len());
    let not_allowed = 43;
    let mut refusals = 0;
    for (rec, rep) in recorded.iter().zip(replayed) {
        assert!(rep["status"].is_i64(), "{rep}");
        // The library's forbidden fopen is refused again on the desk, for the same reason; the
        // allowlisted one (the shell, present on the bench board) is served again.
        if rec["status"] == not_allowed {
            refusals += 1;
            assert_eq!(rep["status"], not_allowed, "{rec} -> {rep}");
        }
    }
    assert_eq!(refusals, 1, "one forbidden fopen captured: {index}");
    // The capture kept the library image its session served, so the replay reproduces it: every
    // status as recorded (the library fetch included).
    assert!(index["images"].as_array().is_some_and(|i| !i.is_empty()), "{index}");
    assert_eq!(v["differences_from_capture"], 0, "{v}");
    for (rec, rep) in recorded.iter().zip(replayed) {
        assert_eq!(rec["status"], rep["status"], "{rec} -> {rep}");
    }
    // A replay that does not reproduce its capture says where and exits 1: the index altered to
    // claim the forbidden fopen was served.
    let text = std::fs::read_to_string(dir.join("index.json")).unwrap();
    let altered = text.replacen("\"status\":43", "\"status\":0", 1);
    assert_ne!(altered, text);
    std::fs::write(dir.join("index.json"), altered).unwrap();
    let out = hexrpc(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("differs from its capture: recorded status 0 (ok), replayed 43 (AEE_ENOTALLOWED)"),
        "{}",
        stderr_of(&out)
    );
    std::fs::write(dir.join("index.json"), text).unwrap();
    // The library's last fopen (apps_std method 19) is the allowlisted one: served again. (FILE
    // handles are per session, with generations: a recorded fclose of one does not replay.)
    let (rec, rep) = recorded.iter().zip(replayed).rfind(|(r, _)| r["file"].as_str().unwrap().ends_with("-m19.hxrq")).unwrap();
    assert_eq!(rec["status"], 0);
    assert_eq!(rep["status"], 0, "the allowlisted fopen replays as served: {rep}");
    // A directory that already holds request files is refused before the session (a usage
    // error), and its index is left as it was.
    let index_before = std::fs::read(dir.join("index.json")).unwrap();
    assert_eq!(hexrpc(&["capture", "--bench", "--dir", dir.to_str().unwrap()]).status.code(), Some(2));
    assert_eq!(std::fs::read(dir.join("index.json")).unwrap(), index_before);
    assert_eq!(hexrpc(&["capture", "--bench"]).status.code(), Some(2), "--dir is required");
    let _ = std::fs::remove_dir_all(&dir);
}
