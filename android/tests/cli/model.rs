//! `hexrpc model`: the bench's sample model written, described, run with `.npy` inputs and
//! outputs, checked and benchmarked; every bad input a usage error (exit 2) that names it; a
//! damaged file refused (exit 1) with the part and the field.

use crate::common::{executor_runnable, hexrpc_in, scratch_dir, stderr_of};

/// A `.npy` v1.0 file of uint8 with `shape`.
fn npy_u8(shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut hdr = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + hdr.len() + 1) % 64 != 0 {
        hdr.push(' ');
    }
    hdr.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(hdr.len() as u16).to_le_bytes());
    out.extend_from_slice(hdr.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn the_sample_model_is_described_run_checked_and_benchmarked_on_the_bench() {
    let dir = scratch_dir("model-sample");
    let o = hexrpc_in(&dir, &["model", "sample", "s.hxm", "--size", "16"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let o = hexrpc_in(&dir, &["model", "info", "s.hxm", "--json"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["launches"].as_u64(), v["io"].as_array().map(Vec::len)), (Some(2), Some(3)));
    assert_eq!(v["io"][0]["shape"], serde_json::json!([1, 16]));
    assert_eq!(v["libraries"][0]["programs"], serde_json::Value::Bool(true));
    let x: Vec<u8> = (100..116).collect();
    std::fs::write(dir.join("x.npy"), npy_u8(&[1, 16], &x)).unwrap();
    let o = hexrpc_in(&dir, &["model", "run", "s.hxm", "--bench", "--input", "x=x.npy", "--output", "z=z.npy", "--runs", "5", "--json"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["runs"].as_u64(), v["calls_per_run"].as_u64(), v["launches_per_run"].as_u64()), (Some(5), Some(1), Some(2)));
    assert!(v["call_bytes_per_run"].as_u64().is_some_and(|b| b <= 1024), "{v}");
    let z = std::fs::read(dir.join("z.npy")).unwrap();
    assert_eq!(&z[z.len() - 16..], &x.iter().map(|b| b + 8).collect::<Vec<u8>>()[..], "z = x + 3 + 5");
    assert_eq!(z, npy_u8(&[1, 16], &z[z.len() - 16..]), "written as numpy writes it");
    for action in ["check", "bench"] {
        let o = hexrpc_in(&dir, &["model", action, "s.hxm", "--bench", "--runs", "3"]);
        assert!(o.status.success(), "{action}: {}", stderr_of(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("1 FastRPC call(s) each") && out.contains("not device figures"), "{action}: {out}");
    }
}

#[test]
fn bad_inputs_are_usage_errors_that_name_the_input_and_a_damaged_file_is_refused() {
    let dir = scratch_dir("model-bad");
    assert!(hexrpc_in(&dir, &["model", "sample", "s.hxm", "--size", "16"]).status.success());
    std::fs::write(dir.join("short.npy"), npy_u8(&[1, 15], &[0; 15])).unwrap();
    std::fs::write(dir.join("good.npy"), npy_u8(&[1, 16], &[0; 16])).unwrap();
    std::fs::write(dir.join("flat.npy"), npy_u8(&[16], &[0; 16])).unwrap();
    std::fs::write(dir.join("junk.npy"), b"not a numpy file").unwrap();
    let mut f32s = npy_u8(&[1, 16], &[0; 64]);
    let at = f32s.windows(3).position(|w| w == b"|u1").unwrap();
    f32s[at..at + 3].copy_from_slice(b"<f4");
    std::fs::write(dir.join("f32.npy"), f32s).unwrap();
    for (args, needle) in [
        (&["model", "run", "s.hxm", "--bench"][..], "missing --input x=FILE.npy"),
        (&["model", "run", "s.hxm", "--bench", "--input", "x=short.npy"][..], "shape [1, 15] where the model's input is [1, 16]"),
        (&["model", "run", "s.hxm", "--bench", "--input", "x=flat.npy"][..], "shape [16]"),
        (&["model", "run", "s.hxm", "--bench", "--input", "x=f32.npy"][..], "dtype float32 where the model's input is uint8"),
        (&["model", "run", "s.hxm", "--bench", "--input", "x=junk.npy"][..], "x=junk.npy: not a .npy file"),
        (&["model", "run", "s.hxm", "--bench", "--input", "x=nowhere.npy"][..], "x=nowhere.npy"),
        (&["model", "run", "s.hxm", "--bench", "--input", "w=short.npy"][..], "no input \"w\""),
        (&["model", "run", "s.hxm", "--bench", "--output", "q=q.npy", "--input", "x=good.npy"][..], "no output \"q\""),
        (&["model", "run", "s.hxm", "--bench", "--runs", "0"][..], "--runs"),
        (&["model", "frobnicate", "s.hxm"][..], "unknown model action"),
        (&["model"][..], "needs an action"),
    ] {
        let o = hexrpc_in(&dir, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains(needle), "{args:?}: {}", stderr_of(&o));
    }
    // One flipped byte anywhere: refused before any session, naming the part.
    let mut bytes = std::fs::read(dir.join("s.hxm")).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0x40;
    std::fs::write(dir.join("bad.hxm"), &bytes).unwrap();
    let o = hexrpc_in(&dir, &["model", "run", "bad.hxm", "--bench", "--input", "x=short.npy"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains("CRC-32"), "{}", stderr_of(&o));
    let o = hexrpc_in(&dir, &["model", "info", "bad.hxm"]);
    assert_eq!(o.status.code(), Some(1));
}

/// `model bench` on the bench prints the tail-latency block, a `simulated` row (the bench's cost
/// model per run) and an `emulated` row (host wall time), and its JSON carries the same rows. The
/// sample model's run is one crossing that copies 40 bytes and two launches that each map and
/// unmap the arena on the DSP (no map cache): 60 + 2 + 2 × (20 + 10) = 122 us simulated, every
/// run alike, and nothing of the open in it.
#[test]
fn model_bench_prints_the_tail_latency_block_with_its_labels() {
    let dir = scratch_dir("model-tail");
    assert!(hexrpc_in(&dir, &["model", "sample", "s.hxm", "--size", "16"]).status.success());
    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--bench", "--runs", "5"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("  tail latency per run, us (nearest rank over 5 runs):")).expect(&out);
    assert_eq!(lines[at + 1].split_whitespace().collect::<Vec<_>>(), ["p50", "p99", "p99.9", "max"], "{out}");
    let sim: Vec<&str> = lines[at + 2].split_whitespace().collect();
    assert_eq!(sim, ["simulated", "122.0", "122.0*", "122.0*", "122.0"], "{out}");
    let emu: Vec<&str> = lines[at + 3].split_whitespace().collect();
    assert_eq!((emu[0], emu.len()), ("emulated", 5), "{out}");
    assert!(lines[at + 4].starts_with("    simulated: the bench's cost model per run: 60 us/crossing"), "{out}");
    assert!(lines[at + 5].starts_with("    emulated: host wall time per run"), "{out}");
    assert!(lines[at + 6].contains("with 5 runs the nearest rank of p99 and p99.9 is the last"), "{out}");
    assert!(out.contains("not device figures") && !out.lines().any(|l| l.starts_with("    device")), "no device row: {out}");
    // The bench's board has the downstream driver, as the comma three: its channel took the vote.
    assert!(lines[at + 7].starts_with("  PM-QoS vote (FASTRPC_CONTROL_LATENCY): sent"), "{out}");

    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--bench", "--runs", "5", "--json"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["tail_latency"].as_array().expect("tail_latency rows");
    let labels: Vec<&str> = rows.iter().filter_map(|r| r["label"].as_str()).collect();
    assert_eq!(labels, ["simulated", "emulated"], "{v}");
    for r in rows {
        assert_eq!((r["method"].as_str(), r["unit"].as_str(), r["runs"].as_u64()), (Some("nearest-rank"), Some("us"), Some(5)), "{r}");
        let p: Vec<f64> = ["p50", "p99", "p99_9", "max"].iter().map(|k| r[*k].as_f64().expect(k)).collect();
        assert!(p[0] > 0.0 && p.windows(2).all(|w| w[0] <= w[1]), "ordered: {r}");
        assert_eq!((p[1], p[2]), (p[3], p[3]), "p99 and p99.9 of 5 runs are the max: {r}");
        assert_eq!(r["equal_to_max"], serde_json::json!(["p99", "p99.9"]), "{r}");
    }
    assert_eq!(rows[0]["p50"].as_f64(), Some(122.0), "{v}");
    assert_eq!(v["pm_qos"], "sent", "{v}");
    assert_eq!(v["run_us_p50"], rows[1]["p50"], "the flat wall-time fields are the emulated row's: {v}");
    assert_eq!(v["run_us_p99"], rows[1]["p99"], "{v}");
}

#[test]
fn model_bench_per_kernel_names_each_kernel_and_the_latency_policy_flags_reach_the_session() {
    let dir = scratch_dir("model-per-kernel");
    assert!(hexrpc_in(&dir, &["model", "sample", "s.hxm", "--size", "16"]).status.success());
    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--bench", "--runs", "3", "--per-kernel", "--power", "burst", "--json"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["dsp_power"].as_str(), v["setup_failures"].as_u64(), v["pm_qos"].as_str()),
        (Some("burst"), Some(0), Some("sent")),
        "{v}"
    );
    let p = &v["per_kernel"];
    assert_eq!(p["label"], "emulated/simulated", "{p}");
    assert_eq!(p["untimed_calls"], 0, "{p}");
    let kernels = p["kernels"].as_array().expect("kernels");
    // The sample: two launches of its table's add kernel a run.
    let launches: f64 = kernels.iter().map(|k| k["launches_per_run"].as_f64().unwrap()).sum();
    assert_eq!(launches, v["launches_per_run"].as_f64().unwrap(), "{p}");
    assert!(kernels.iter().all(|k| !k["kernel"].as_str().unwrap().is_empty()), "{p}");
    // Without --per-kernel: null, and no table in the text.
    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--bench", "--runs", "2", "--no-pm-qos", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["per_kernel"].is_null() && v["pm_qos"] == "not_asked" && v["dsp_power"] == "sustained", "{v}");
    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--bench", "--runs", "2", "--per-kernel", "--power", "off"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("DSP clock vote (HAP_power_set): off (none sent)") && out.contains("DSP time per kernel, per run ["), "{out}");
    // A level nobody knows is a usage error naming the levels, before any session.
    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--bench", "--power", "turbo"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_of(&o).contains("off, sustained or burst"), "{}", stderr_of(&o));
}

#[test]
fn model_bench_count_reports_emulated_packets_that_repeat_exactly_per_run_and_per_kernel() {
    use hexrpc_model::{DType, Direction, IoSpec, ModelBuilder, StepSpec};
    let dir = scratch_dir("model-count");
    // Usage first (no tools needed): --count on a device is refused before any session.
    assert!(hexrpc_in(&dir, &["model", "sample", "s.hxm", "--size", "16"]).status.success());
    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--device", "--count"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains("--count counts what qemu-hexagon executes"), "{}", stderr_of(&o));
    // The sample runs on the bench's Rust models: nothing to count, said so.
    let o = hexrpc_in(&dir, &["model", "bench", "s.hxm", "--bench", "--runs", "2", "--count"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("no Hexagon code ran"), "{o:?}");
    if !executor_runnable() {
        return;
    }
    // A model of real kernels: spin_u32 twice (1,000 and 3,000 iterations), bump_u8 once.
    std::fs::write(
        dir.join("k.c"),
        "void spin_u32(unsigned int *o, unsigned int n) { volatile unsigned int c = 0; while (c < n) c = c + 1u; o[0] = c; }\n\
         void bump_u8(unsigned char *a, unsigned int n) { for (unsigned int i = 0; i < n; i++) a[i] += 1; }\n",
    )
    .unwrap();
    let o = hexrpc_in(&dir, &["build-lib", "k.c", "--table", "spin_u32:buf,u32", "--table", "bump_u8:buf,u32", "-o", "t.so", "-q"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let mut records = hexrpc_model::encode_record(0, &[(0, 0, 4)], &[1000]).unwrap();
    records.extend(hexrpc_model::encode_record(0, &[(0, 0, 4)], &[3000]).unwrap());
    records.extend(hexrpc_model::encode_record(1, &[(0, 128, 256)], &[256]).unwrap());
    let file = ModelBuilder {
        arch: 0x65,
        source_digest: [0; 32],
        source_name: "counted".into(),
        tinygrad_version: String::new(),
        hexrpc_version: env!("CARGO_PKG_VERSION").into(),
        libraries: vec![("counted".into(), std::fs::read(dir.join("t.so")).unwrap())],
        arenas: vec![(4096, 128)],
        init: vec![],
        steps: vec![StepSpec { library: 0, launches: 3, records }],
        io: vec![
            IoSpec { name: "x".into(), direction: Direction::Input, dtype: DType::U8, shape: vec![256], arena: 0, offset: 128 },
            IoSpec { name: "n".into(), direction: Direction::Output, dtype: DType::U32, shape: vec![1], arena: 0, offset: 0 },
        ],
    }
    .to_bytes();
    std::fs::write(dir.join("c.hxm"), file).unwrap();
    let o = hexrpc_in(&dir, &["model", "bench", "c.hxm", "--bench", "--runs", "3", "--count", "--per-kernel", "--json"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &v["exec_counts"];
    assert_eq!((c["label"].as_str(), c["runs"].as_u64(), c["identical"].as_bool()), (Some("emulated"), Some(3), Some(true)), "{c}");
    let packets = c["packets_per_run"].as_u64().unwrap();
    // The first run maps the model's buffers on the DSP (the map cache keeps them): more packets.
    assert!(c["first_run_packets"].as_u64().unwrap() > packets, "{c}");
    assert!(packets > 4000 && c["instructions_per_run"].as_u64().unwrap() >= packets, "{c}");
    // Per kernel: spin_u32's 4,000 iterations over both launches, bump_u8's 256 bytes; within the run.
    let rows = v["per_kernel"]["kernels"].as_array().unwrap();
    let of = |name: &str| rows.iter().find(|k| k["kernel"] == name).and_then(|k| k["packets_per_run"].as_u64()).unwrap_or(0);
    let (spin, bump) = (of("spin_u32"), of("bump_u8"));
    assert!(spin > 4000 && bump > 0 && spin + bump < packets, "{rows:?} of {packets}");
    // The text names the figures for what they are.
    let o = hexrpc_in(&dir, &["model", "bench", "c.hxm", "--bench", "--runs", "3", "--count"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("emulated packets, not DSP time") && text.contains("identical in runs 2 to 3"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
