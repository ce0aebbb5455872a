//! The `hexrpc` binary as a user runs it: exit codes, help, and the JSON shapes.

use std::process::Command;

/// Runs the binary under test. When the tests themselves run under qemu-user (cross-tests for
/// aarch64 on an x86-64 machine without binfmt), the kernel cannot exec the aarch64 binary: the
/// spawn fails with ENOEXEC, or the child reports exit status 127 with no output. It is then run
/// through the same emulator, as cargo's runner does.
fn hexrpc(args: &[&str]) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_hexrpc");
    let direct = Command::new(bin).args(args).env_remove("HEXRPC_LOG").output();
    let exec_failed = match &direct {
        Err(e) => e.raw_os_error() == Some(8),
        Ok(o) => o.status.code() == Some(127) && o.stdout.is_empty() && o.stderr.is_empty(),
    };
    if exec_failed && cfg!(target_arch = "aarch64") {
        return Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu", bin])
            .args(args)
            .env_remove("HEXRPC_LOG")
            .output()
            .expect("run hexrpc under qemu-aarch64");
    }
    direct.expect("run hexrpc")
}

/// The values of the kernel headers for aarch64 (../shared/spec/kernel-abi.md 1.1 and 2.2,
/// reverse-rpc.md 0), typed in here independently of the drivers crate.
const HEADER_IOCTLS: &[(&str, u64)] = &[
    ("ION_IOC_ALLOC", 0xC0204900),
    ("ION_IOC_FREE", 0xC0044901),
    ("ION_IOC_MAP", 0xC0084902),
    ("ION_IOC_SHARE", 0xC0084904),
    ("ION_IOC_IMPORT", 0xC0084905),
    ("ION_IOC_CUSTOM", 0xC0104906),
    ("ION_IOC_SYNC", 0xC0084907),
    ("ION_IOC_CLEAN_CACHES", 0xC0184D00),
    ("ION_IOC_INV_CACHES", 0xC0184D01),
    ("ION_IOC_CLEAN_INV_CACHES", 0xC0184D02),
    ("FASTRPC_IOCTL_INVOKE", 0xC0105201),
    ("FASTRPC_IOCTL_MMAP", 0xC0205202),
    ("FASTRPC_IOCTL_MUNMAP", 0xC0105203),
    ("FASTRPC_IOCTL_INVOKE_FD", 0xC0185204),
    ("FASTRPC_IOCTL_SETMODE", 0xC0045205),
    ("FASTRPC_IOCTL_INIT", 0xC0285206),
    ("FASTRPC_IOCTL_INVOKE_ATTRS", 0xC0205207),
    ("FASTRPC_IOCTL_GETINFO", 0xC0045208),
    ("FASTRPC_IOCTL_GETPERF", 0xC0185209),
    ("FASTRPC_IOCTL_INIT_ATTRS", 0xC030520A),
    ("FASTRPC_IOCTL_INVOKE_CRC", 0xC028520B),
    ("FASTRPC_IOCTL_CONTROL", 0xC00C520C),
    ("FASTRPC_IOCTL_MUNMAP_FD", 0xC018520D),
    ("FASTRPC_IOCTL_MMAP_64", 0xC020520E),
    ("FASTRPC_IOCTL_MUNMAP_64", 0xC010520F),
];

/// (struct, size, [(field, offset)]) from the same spec sections.
/// (field, offset) pairs of one struct.
type Fields = &'static [(&'static str, u64)];

const HEADER_STRUCTS: &[(&str, u64, Fields)] = &[
    ("ion_allocation_data", 32, &[("len", 0), ("align", 8), ("heap_id_mask", 16), ("flags", 20), ("handle", 24)]),
    ("ion_fd_data", 8, &[("handle", 0), ("fd", 4)]),
    ("ion_handle_data", 4, &[("handle", 0)]),
    ("ion_custom_data", 16, &[("cmd", 0), ("arg", 8)]),
    ("ion_flush_data", 24, &[("handle", 0), ("fd", 4), ("vaddr", 8), ("offset", 16), ("length", 20)]),
    ("remote_buf", 16, &[("pv", 0), ("len", 8)]),
    ("remote_dma_handle", 8, &[("fd", 0), ("offset", 4)]),
    ("remote_arg", 16, &[("buf", 0), ("dma", 0), ("h", 0)]),
    ("remote_buf64", 16, &[("pv", 0), ("len", 8)]),
    ("remote_dma_handle64", 12, &[("fd", 0), ("offset", 4), ("len", 8)]),
    ("fastrpc_ioctl_invoke", 16, &[("handle", 0), ("sc", 4), ("pra", 8)]),
    ("fastrpc_ioctl_invoke_fd", 24, &[("inv", 0), ("fds", 16)]),
    ("fastrpc_ioctl_invoke_attrs", 32, &[("inv", 0), ("fds", 16), ("attrs", 24)]),
    ("fastrpc_ioctl_invoke_crc", 40, &[("inv", 0), ("fds", 16), ("attrs", 24), ("crc", 32)]),
    ("fastrpc_ioctl_init", 40, &[("flags", 0), ("file", 8), ("filelen", 16), ("filefd", 20), ("mem", 24), ("memlen", 32), ("memfd", 36)]),
    ("fastrpc_ioctl_init_attrs", 48, &[("init", 0), ("attrs", 40), ("siglen", 44)]),
    ("fastrpc_ioctl_mmap", 32, &[("fd", 0), ("flags", 4), ("vaddrin", 8), ("size", 16), ("vaddrout", 24)]),
    ("fastrpc_ioctl_mmap_64", 32, &[("fd", 0), ("flags", 4), ("vaddrin", 8), ("size", 16), ("vaddrout", 24)]),
    ("fastrpc_ioctl_munmap", 16, &[("vaddrout", 0), ("size", 8)]),
    ("fastrpc_ioctl_munmap_64", 16, &[("vaddrout", 0), ("size", 8)]),
    ("fastrpc_ioctl_munmap_fd", 24, &[("fd", 0), ("flags", 4), ("va", 8), ("len", 16)]),
    ("fastrpc_ioctl_perf", 24, &[("data", 0), ("numkeys", 8), ("keys", 16)]),
    ("fastrpc_ioctl_control", 12, &[("req", 0)]),
    ("remote_arg32", 8, &[("buf", 0)]),
    (
        "apps_std_STAT",
        96,
        &[
            ("tsz", 0),
            ("dev", 8),
            ("ino", 16),
            ("mode", 24),
            ("nlink", 28),
            ("rdev", 32),
            ("size", 40),
            ("atime", 48),
            ("atimensec", 56),
            ("mtime", 64),
            ("mtimensec", 72),
            ("ctime", 80),
            ("ctimensec", 88),
        ],
    ),
];

const HEADER_CONSTANTS: &[(&str, u64)] = &[
    ("ION_SYSTEM_HEAP_ID", 25),
    ("ION_FLAG_CACHED", 1),
    ("FASTRPC_ATTR_NOVA", 1),
    ("CDSP_DOMAIN_ID", 3),
    ("FASTRPC_INIT_CREATE", 1),
    ("FASTRPC_CONTROL_KALLOC", 3),
    ("FASTRPC_STATIC_HANDLE_LISTENER", 3),
    ("ADSP_MMAP_ADD_PAGES", 0x1000),
    ("INIT_FILELEN_MAX", 2 * 1024 * 1024),
];

#[test]
fn abi_json_matches_the_kernel_headers() {
    let out = hexrpc(&["abi", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("abi --json is JSON");
    let ioctls = v["ioctls"].as_object().expect("ioctls object");
    assert_eq!(ioctls.len(), HEADER_IOCTLS.len(), "every ioctl and nothing else");
    for (name, nr) in HEADER_IOCTLS {
        assert_eq!(ioctls.get(*name).and_then(|x| x.as_u64()), Some(*nr), "{name}");
    }
    let structs = v["structs"].as_object().expect("structs object");
    for (name, size, fields) in HEADER_STRUCTS {
        let s = &structs.get(*name).unwrap_or_else(|| panic!("struct {name} missing"));
        assert_eq!(s["size"].as_u64(), Some(*size), "{name} size");
        for (f, off) in *fields {
            assert_eq!(s["fields"][*f].as_u64(), Some(*off), "{name}.{f}");
        }
    }
    for (name, val) in HEADER_CONSTANTS {
        assert_eq!(v["constants"][*name].as_u64(), Some(*val), "{name}");
    }
}

#[test]
fn abi_text_names_every_request() {
    let out = hexrpc(&["abi"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for (name, _) in HEADER_IOCTLS {
        assert!(text.contains(name), "{name} missing from the table");
    }
}

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
fn usage_errors_exit_2() {
    for args in [&["frobnicate"][..], &[], &["abi", "--nope"], &["help", "nope"]] {
        let out = hexrpc(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn help_is_complete() {
    for args in [&["--help"][..], &["help"], &["help", "selftest"], &["selftest", "--help"], &["abi", "-h"]] {
        let out = hexrpc(args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("USAGE:") && text.contains("EXIT STATUS"), "{args:?}: {text}");
    }
}

#[test]
fn probe_without_a_dsp_names_the_missing_node() {
    if std::path::Path::new("/dev/ion").exists() {
        eprintln!("this machine has /dev/ion: the missing-node path cannot be shown here");
        return;
    }
    let out = hexrpc(&["probe", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probe --json is JSON");
    assert!(v["board"].is_string());
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps[0]["name"], "device-nodes");
    assert_eq!(steps[0]["status"], "fail");
    assert!(steps[0]["detail"].as_str().unwrap().contains("/dev/ion"), "{}", steps[0]);
    assert!(steps[1..].iter().all(|s| s["status"] == "skip"));
}

#[test]
fn build_lib_makes_a_hexagon_library_or_says_why_not() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-build-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernel = dir.join("scale.c");
    std::fs::write(&kernel, "void scale(float *x, float *y, float k) { for (int i = 0; i < 16; i++) y[i] = k * x[i]; }\n").unwrap();
    let out = dir.join("libscale.so");
    let args = ["build-lib", kernel.to_str().unwrap(), "--signature", "buf,buf,f32", "-o", out.to_str().unwrap()];
    let run = hexrpc(&args);
    let have_tools =
        Command::new("clang-19").arg("--version").output().is_ok() && Command::new("ld.lld-19").arg("--version").output().is_ok();
    if !have_tools {
        assert_eq!(run.status.code(), Some(1), "a missing toolchain is a build failure, not a crash");
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not installed; the failure path was checked instead");
        return;
    }
    assert!(run.status.success(), "{run:?}");
    let so = std::fs::read(&out).unwrap();
    assert_eq!(&so[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([so[18], so[19]]), 164, "Hexagon");
    // Usage errors: a scalar before a buffer, and a missing output.
    assert_eq!(hexrpc(&["build-lib", kernel.to_str().unwrap(), "--signature", "f32,buf", "-o", "x.so"]).status.code(), Some(2));
    assert_eq!(hexrpc(&["build-lib", kernel.to_str().unwrap(), "--signature", "buf"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn build_lib_table_makes_one_library_of_several_kernels() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.c"), dir.join("b.c"));
    std::fs::write(
        &a,
        "void scale(float *x, float k) { for (int i = 0; i < 16; i++) x[i] *= k; }\nint check(unsigned int *x) { return (int)x[0]; }\n",
    )
    .unwrap();
    std::fs::write(&b, "void zero(float *x) { for (int i = 0; i < 16; i++) x[i] = 0.0f; }\n").unwrap();
    let out = dir.join("libtable.so");
    let (sa, sb, so) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    let (ta, tb) = (format!("{sa}:check:buf"), format!("{sb}:zero:buf"));
    let args = ["build-lib", sa, sb, "--table", "scale:buf,f32", "--table", &ta, "--table", &tb, "-o", so];
    let run = hexrpc(&args);
    let have_tools =
        Command::new("clang-19").arg("--version").output().is_ok() && Command::new("ld.lld-19").arg("--version").output().is_ok();
    // Usage errors first (no tools needed): no --signature with --table, a bad entry, several sources without --table.
    assert_eq!(hexrpc(&["build-lib", sa, "--table", "scale:buf,f32", "--signature", "buf", "-o", so]).status.code(), Some(2));
    assert_eq!(hexrpc(&["build-lib", sa, "--table", "scale", "-o", so]).status.code(), Some(2));
    assert_eq!(hexrpc(&["build-lib", sa, sb, "--signature", "buf", "-o", so]).status.code(), Some(2));
    if !have_tools {
        assert_eq!(run.status.code(), Some(1), "a missing toolchain is a build failure, not a crash");
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not installed; the failure path was checked instead");
        return;
    }
    assert!(run.status.success(), "{run:?}");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("kernel table [0: scale, 1: check (returns int), 2: zero]"), "{text}");
    let lib = std::fs::read(&out).unwrap();
    assert_eq!(u16::from_le_bytes([lib[18], lib[19]]), 164, "Hexagon");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reverse_replay_answers_every_request_and_reports_malformed_files() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
    let out = hexrpc(&["reverse-replay", "--json", &a, &b, &c]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
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
fn bench_json_reports_every_figure_labelled_simulated() {
    let out = hexrpc(&["bench", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench --json is JSON");
    for k in [
        "launch_overhead_ns",
        "bench_round_trip_ns",
        "crossings_per_launch",
        "allocations_per_launch",
        "reverse_stream_mib_s",
        "memcpy_mib_s",
    ] {
        let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
        assert!(x.is_finite() && x >= 0.0, "{k} = {x}");
    }
    assert_eq!(v["simulated"], true);
    assert_eq!(v["platform"], "bench");
    assert_eq!(v["crossings_per_launch"].as_f64(), Some(1.0), "exactly one kernel crossing per steady-state launch");
    assert_eq!(v["allocations_per_launch"].as_f64(), Some(0.0), "no heap allocation per launch");
    assert!(v["launch_overhead_ns"].as_f64().unwrap() > 0.0);
    // The model network as one batch: one crossing, one map per distinct lease, cheaper than
    // five launches on the (simulated) cost model.
    assert_eq!(v["batch_crossings_per_model"].as_f64(), Some(1.0));
    assert_eq!(v["batch_maps_per_model"].as_f64(), v["batch_distinct_leases"].as_f64());
    assert!(v["batch_pack_ns"].as_f64().unwrap() > 0.0);
    let lat = &v["model_latency_us"];
    assert_eq!(lat["simulated"], true, "{lat}");
    assert!(lat["batch"].as_f64().unwrap() < lat["per_kernel"].as_f64().unwrap(), "{lat}");
}

#[test]
fn probe_on_the_bench_passes_every_step_including_a_library_load() {
    let out = hexrpc(&["probe", "--bench", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probe --json is JSON");
    assert_eq!(v["board"], "bench");
    let names: Vec<&str> = v["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["device-nodes", "ion-alloc", "shell", "channel", "process", "listener", "library"]);
    assert!(v["steps"].as_array().unwrap().iter().all(|s| s["status"] == "pass"), "{v}");
}

#[test]
fn probe_device_names_the_missing_node() {
    if std::path::Path::new("/dev/ion").exists() {
        eprintln!("this machine has /dev/ion: the missing-node path cannot be shown here");
        return;
    }
    let out = hexrpc(&["probe", "--device"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let first_step = text.lines().nth(1).unwrap();
    assert!(first_step.starts_with("FAIL") && first_step.contains("missing /dev/ion"), "{text}");
}
