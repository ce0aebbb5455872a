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

/// The values of the kernel headers for aarch64 (docs/kernel-abi.md 1.1 and 2.2,
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
    ("DMA_HEAP_IOCTL_ALLOC", 0xC0184800),
    ("DMA_BUF_IOCTL_SYNC", 0x40086200),
    ("upstream:FASTRPC_IOCTL_ALLOC_DMA_BUFF", 0xC0105201),
    ("upstream:FASTRPC_IOCTL_FREE_DMA_BUFF", 0xC0045202),
    ("upstream:FASTRPC_IOCTL_INVOKE", 0xC0105203),
    ("upstream:FASTRPC_IOCTL_INIT_ATTACH", 0x00005204),
    ("upstream:FASTRPC_IOCTL_INIT_CREATE", 0xC0185205),
    ("upstream:FASTRPC_IOCTL_MMAP", 0xC0205206),
    ("upstream:FASTRPC_IOCTL_MUNMAP", 0xC0105207),
    ("upstream:FASTRPC_IOCTL_INIT_ATTACH_SNS", 0x00005208),
    ("upstream:FASTRPC_IOCTL_INIT_CREATE_STATIC", 0xC0105209),
    ("upstream:FASTRPC_IOCTL_MEM_MAP", 0xC040520A),
    ("upstream:FASTRPC_IOCTL_MEM_UNMAP", 0xC030520B),
    ("upstream:FASTRPC_IOCTL_GET_DSP_INFO", 0xC01C520D),
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
    ("fastrpc_ioctl_control", 12, &[("req", 0), ("lp", 4), ("smmu", 4), ("kalloc", 4)]),
    ("dma_heap_allocation_data", 24, &[("len", 0), ("fd", 8), ("fd_flags", 12), ("heap_flags", 16)]),
    ("dma_buf_sync", 8, &[("flags", 0)]),
    ("fastrpc_invoke_args", 24, &[("ptr", 0), ("length", 8), ("fd", 16), ("attr", 20)]),
    ("fastrpc_invoke", 16, &[("handle", 0), ("sc", 4), ("args", 8)]),
    ("fastrpc_init_create", 24, &[("filelen", 0), ("filefd", 4), ("attrs", 8), ("siglen", 12), ("file", 16)]),
    ("fastrpc_init_create_static", 16, &[("namelen", 0), ("memlen", 4), ("name", 8)]),
    ("fastrpc_alloc_dma_buf", 16, &[("fd", 0), ("flags", 4), ("size", 8)]),
    ("fastrpc_req_mmap", 32, &[("fd", 0), ("flags", 4), ("vaddrin", 8), ("size", 16), ("vaddrout", 24)]),
    (
        "fastrpc_mem_map",
        64,
        &[
            ("version", 0),
            ("fd", 4),
            ("offset", 8),
            ("flags", 12),
            ("vaddrin", 16),
            ("length", 24),
            ("vaddrout", 32),
            ("attrs", 40),
            ("reserved", 44),
        ],
    ),
    ("fastrpc_req_munmap", 16, &[("vaddrout", 0), ("size", 8)]),
    ("fastrpc_mem_unmap", 48, &[("vesion", 0), ("fd", 4), ("vaddr", 8), ("length", 16), ("reserved", 24)]),
    ("fastrpc_ioctl_capability", 28, &[("domain", 0), ("attribute_id", 4), ("capability", 8), ("reserved", 12)]),
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
    ("upstream:FASTRPC_MODE_UNSIGNED_MODULE", 8),
    ("upstream:FASTRPC_MAP_FD", 2),
    ("upstream:FASTRPC_MAP_FD_NOMAP", 16),
    ("upstream:FASTRPC_ATTR_SECUREMAP", 1),
    ("DMA_BUF_SYNC_END", 4),
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
fn build_lib_makes_a_hexagon_library_or_says_why_not() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-build-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernel = dir.join("scale.c");
    std::fs::write(&kernel, "void scale(float *x, float *y, float k) { for (int i = 0; i < 16; i++) y[i] = k * x[i]; }\n").unwrap();
    let out = dir.join("libscale.so");
    let args = ["build-lib", kernel.to_str().unwrap(), "--signature", "buf,buf,f32", "-o", out.to_str().unwrap()];
    let run = hexrpc(&args);
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
    if !have_tools {
        assert_eq!(run.status.code(), Some(1), "a missing toolchain is a build failure, not a crash");
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not installed; the failure path was checked instead");
        return;
    }
    assert!(run.status.success(), "{run:?}");
    let so = std::fs::read(&out).unwrap();
    assert_eq!(&so[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([so[18], so[19]]), 164, "Hexagon");
    // Operands that start with `-` (after `--`) stay operands: clang and ld.lld never see them as
    // options.
    let dashed = dir.join("-o.c");
    std::fs::copy(&kernel, &dashed).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_hexrpc"))
        .current_dir(&dir)
        .args(["build-lib", "--kernel", "scale", "--signature", "buf,buf,f32", "-o", "./libdash.so", "--", "-o.c"])
        .output();
    if let Ok(run) = run {
        if !(cfg!(target_arch = "aarch64") && run.status.code() == Some(127)) {
            assert!(run.status.success(), "{run:?}");
            assert_eq!(&std::fs::read(dir.join("libdash.so")).unwrap()[..4], b"\x7fELF");
        }
    }
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
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
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
    // The DSP map cache: no map per steady-state launch, one per lease without it, and the
    // simulated launch is cheaper by the maps and unmaps it saves.
    assert_eq!(v["dsp_maps_per_launch"].as_f64(), Some(0.0), "{v}");
    assert_eq!(v["dsp_maps_per_launch_uncached"].as_f64(), v["dsp_map_leases_per_launch"].as_f64(), "{v}");
    let cache = &v["dsp_map_cache"];
    assert_eq!(cache["simulated"], true, "{cache}");
    assert!(cache["launch_latency_us"].as_f64().unwrap() < cache["launch_latency_us_uncached"].as_f64().unwrap(), "{cache}");
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
            "listener",
            "library"
        ]
    );
    for s in v["steps"].as_array().unwrap() {
        let host_fact = s["name"] == "groups" || s["name"] == "selinux";
        assert_eq!(s["status"], if host_fact { "skip" } else { "pass" }, "{s}");
    }
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
        let host_fact = s["name"] == "groups" || s["name"] == "selinux";
        assert_eq!(s["status"], if host_fact { "skip" } else { "pass" }, "{s}");
    }
    let kernel = steps.iter().find(|s| s["name"] == "kernel").unwrap()["detail"].as_str().unwrap();
    assert!(kernel.contains("upstream fastrpc") && kernel.contains("/bench/dev/fastrpc-cdsp"), "{kernel}");
    assert!(kernel.contains("dma-heap") && kernel.contains("/bench/dev/dma_heap/system"), "{kernel}");
    // A board whose ABI is not the bench kernel's is refused at the kernel step, naming both.
    let out = hexrpc(&["probe", "--bench", "--board", "qcom-rb5"]);
    assert_eq!(out.status.code(), Some(2), "only bench boards on the bench");
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

/// Runs the binary with a time limit: a hang (a FIFO read) is a failure, not a stuck test.
fn hexrpc_within(args: &[&str], limit: std::time::Duration) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_hexrpc");
    let direct = within(Command::new(bin).args(args), args, limit);
    // As in `hexrpc()`: under qemu-user without binfmt the binary runs through the emulator.
    if cfg!(target_arch = "aarch64") && exec_failed(&direct) {
        return within(Command::new("qemu-aarch64").args(["-L", "/usr/aarch64-linux-gnu", bin]).args(args), args, limit)
            .expect("run hexrpc under qemu-aarch64");
    }
    direct.expect("run hexrpc")
}

fn within(cmd: &mut Command, args: &[&str], limit: std::time::Duration) -> std::io::Result<std::process::Output> {
    let mut child = cmd.env_remove("HEXRPC_LOG").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn()?;
    let t0 = std::time::Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return child.wait_with_output();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hexrpc {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn unusable_inputs_are_refused_quickly_with_a_non_zero_exit() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-inputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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
fn output_is_atomic_refuses_links_and_nodes_and_dash_is_stdout() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-output-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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
fn capture_then_reverse_replay_round_trip() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
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

#[test]
fn report_is_one_tar_with_every_part() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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

/// Runs the binary in `dir` (for relative operands), like [`hexrpc`].
fn hexrpc_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_hexrpc");
    let direct = Command::new(bin).args(args).current_dir(dir).env_remove("HEXRPC_LOG").output();
    // As in `hexrpc()`: under qemu-user without binfmt the binary runs through the emulator.
    if cfg!(target_arch = "aarch64") && exec_failed(&direct) {
        return Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu", bin])
            .args(args)
            .current_dir(dir)
            .env_remove("HEXRPC_LOG")
            .output()
            .expect("run hexrpc under qemu-aarch64");
    }
    direct.expect("run hexrpc")
}

/// The kernel could not exec the binary (ENOEXEC), or the child reported 127 with no output.
fn exec_failed(o: &std::io::Result<std::process::Output>) -> bool {
    match o {
        Err(e) => e.raw_os_error() == Some(8),
        Ok(o) => o.status.code() == Some(127) && o.stdout.is_empty() && o.stderr.is_empty(),
    }
}

fn stderr_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn f32_file(path: &std::path::Path, xs: &[f32]) {
    std::fs::write(path, xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

/// `hexrpc run` on the bench, end to end, for a suite kernel built with `build-lib`.
#[test]
fn run_launches_a_build_lib_library_on_the_bench() {
    if let Err(e) = hexrpc_bench::executor::tools_available() {
        println!("SKIPPED: {e}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let hexagon = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hexagon");
    let lib = dir.join("add_f32.so");
    let include = format!("--cflag=-I{}", hexagon.join("runtime").display());
    let kernels = hexagon.join("kernels/kernels.c");
    let built = hexrpc(&[
        "build-lib",
        kernels.to_str().unwrap(),
        "--kernel",
        "add_f32",
        "--signature",
        "buf,buf,buf,u32",
        "-o",
        lib.to_str().unwrap(),
        &include,
        "--cflag=-Dhrx_expf=expf",
        "--cflag=-ffp-contract=off",
    ]);
    assert!(built.status.success(), "build-lib: {}", stderr_of(&built));

    let n = 64usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n).map(|i| 100.0 - i as f32).collect();
    let (fa, fb, fo) = (dir.join("a.bin"), dir.join("b.bin"), dir.join("o.bin"));
    f32_file(&fa, &a);
    f32_file(&fb, &b);
    let arg_a = format!("in={},offset=12", fa.display());
    let arg_b = format!("in={},offset=4100", fb.display());
    let arg_o = format!("size={},offset=8,out={}", 4 * n, fo.display());
    let lib_s = lib.to_str().unwrap();
    let common = ["run", lib_s, "--signature", "buf,buf,buf,u32", "--bench"];
    fn with<'a>(common: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        let mut v: Vec<&str> = common.to_vec();
        v.extend_from_slice(extra);
        v
    }
    let out = hexrpc(&with(&common, &["--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64", "--repeat", "100", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("run --json is JSON");
    assert_eq!(v["library"], lib_s);
    assert_eq!((v["abi"].as_str(), v["mode"].as_str(), v["launches"].as_u64()), (Some("v2"), Some("bench"), Some(100)));
    for k in ["dsp_us", "round_trip_us"] {
        assert!(v[k]["p50"].is_number() && v[k]["p99"].is_number(), "{v}");
        assert!(v[k]["p50"].as_f64().unwrap() <= v[k]["p99"].as_f64().unwrap(), "{v}");
    }
    println!(
        "FIGURE hexrpc run --repeat 100 on the bench (emulated under qemu-hexagon, host wall time per launch): p50 {} us, p99 {} us; DSP-reported (emulator clock) p50 {} us",
        v["round_trip_us"]["p50"], v["round_trip_us"]["p99"], v["dsp_us"]["p50"]
    );
    let outputs = v["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1);
    assert_eq!((outputs[0]["arg"].as_u64(), outputs[0]["bytes"].as_u64()), (Some(3), Some(4 * n as u64)));
    assert_eq!(outputs[0]["file"], fo.to_str().unwrap());
    let got: Vec<f32> = std::fs::read(&fo).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, a.iter().zip(&b).map(|(x, y)| x + y).collect::<Vec<_>>());

    // Without --signature: the build record gives the signature and the ABI.
    std::fs::remove_file(&fo).unwrap();
    let recorded = hexrpc(&["run", lib_s, "--bench", "--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64", "--json"]);
    assert_eq!(recorded.status.code(), Some(0), "{}", stderr_of(&recorded));
    let got: Vec<f32> = std::fs::read(&fo).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, a.iter().zip(&b).map(|(x, y)| x + y).collect::<Vec<_>>());
    // A file without a build record needs --signature (exit 2, saying so).
    let foreign = dir.join("foreign.so");
    std::fs::write(&foreign, b"\x7fELF not a library").unwrap();
    let no_record = hexrpc(&["run", foreign.to_str().unwrap(), "--bench", "--arg", "64"]);
    assert_ne!(no_record.status.code(), Some(0), "{}", stderr_of(&no_record));
    assert!(stderr_of(&no_record).contains("foreign.so"), "{}", stderr_of(&no_record));

    // The text report says what the figures are.
    let text = hexrpc(&with(&common, &["--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64", "--deadline-ms", "20000"]));
    assert_eq!(text.status.code(), Some(0), "{}", stderr_of(&text));
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.contains("DSP-reported time") && t.contains("qemu-hexagon") && t.contains("not device figures"), "{t}");

    // Exit 1: v1 with a non-zero offset (refused before anything is sent), a signature the
    // library was not built for, a launch with no DSP and no --bench.
    let v1 = hexrpc(&with(&common, &["--abi", "v1", "--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"]));
    assert_eq!(v1.status.code(), Some(1));
    assert!(stderr_of(&v1).contains("use --abi v2"), "{}", stderr_of(&v1));
    let wrong = hexrpc(&[
        "run",
        lib_s,
        "--signature",
        "buf,buf,buf,i32",
        "--bench",
        "--arg",
        &arg_a,
        "--arg",
        &arg_b,
        "--arg",
        &arg_o,
        "--arg",
        "64",
    ]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(stderr_of(&wrong).contains("was built for signature buf,buf,buf,u32"), "{}", stderr_of(&wrong));
    if !std::path::Path::new("/dev/adsprpc-smd").exists() {
        let nodsp =
            hexrpc(&["run", lib_s, "--signature", "buf,buf,buf,u32", "--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"]);
        assert_eq!(nodsp.status.code(), Some(1));
        assert!(stderr_of(&nodsp).contains("add --bench"), "{}", stderr_of(&nodsp));
    }
    if !std::path::Path::new("/dev/ion").exists() {
        // --device on a machine without the nodes: the failure names the node and the next step.
        let nodev = hexrpc(&[
            "run",
            lib_s,
            "--signature",
            "buf,buf,buf,u32",
            "--device",
            "--arg",
            &arg_a,
            "--arg",
            &arg_b,
            "--arg",
            &arg_o,
            "--arg",
            "64",
        ]);
        assert_eq!(nodev.status.code(), Some(1));
        let err = stderr_of(&nodev);
        assert!(err.contains("/dev/ion does not exist") && err.contains("hexrpc probe") && !err.contains("HalError"), "{err}");
    }
    // --bench without the executor's tools names the missing one.
    let no_tools = Command::new(env!("CARGO_BIN_EXE_hexrpc"))
        .args(with(&common, &["--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"]))
        .env("PATH", "/nonexistent")
        .env_remove("HEXRPC_LOG")
        .output()
        .unwrap();
    assert_eq!(no_tools.status.code(), Some(1));
    assert!(stderr_of(&no_tools).contains("clang-19 not found"), "{}", stderr_of(&no_tools));
    let missing_in = hexrpc(&with(&common, &["--arg", "in=/nonexistent/a.bin", "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"]));
    assert_eq!(missing_in.status.code(), Some(1), "{}", stderr_of(&missing_in));
    // Exit 2: usage.
    for bad in [
        with(&common, &["--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o]),
        with(&common, &["--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "sixty"]),
        with(&common, &["--arg", "color=red", "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"]),
        with(&common, &["--abi", "v9", "--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"]),
        with(&common, &["--repeat", "0", "--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"]),
        vec!["run", "--signature", "buf"],
    ] {
        let o = hexrpc(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr_of(&o));
    }
    let help = hexrpc(&["run", "--help"]);
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("--deadline-ms"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// build-lib's refusals as the CLI shows them, and operands that start with `-`.
#[test]
fn build_lib_cli_refusals_and_dash_operands() {
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-refuse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kernel = "void bump(unsigned char *p, unsigned int n) { for (unsigned int i = 0; i < n; i++) p[i]++; }\n";
    std::fs::write(dir.join("-bump.c"), kernel).unwrap();
    std::fs::write(dir.join("my-kernel.c"), kernel).unwrap();
    // A missing compiler says how to install it.
    let o = hexrpc_in(
        &dir,
        &["build-lib", "--signature", "buf,u32", "--kernel", "bump", "--clang", "/nonexistent/clang-19", "-o", "x.so", "my-kernel.c"],
    );
    assert_eq!(o.status.code(), Some(1));
    if !cfg!(target_arch = "aarch64") {
        assert!(stderr_of(&o).contains("apt-get install clang-19 lld-19"), "{}", stderr_of(&o));
    }
    if !have_tools {
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not installed; the rest needs them");
        return;
    }
    // The bad-stem hint names the real flag.
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,u32", "-o", "x.so", "my-kernel.c"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr_of(&o).contains("--kernel NAME"), "{}", stderr_of(&o));
    // Operands that start with '-': after `--` for the kernel, as -o's value for the output;
    // neither reaches clang or ld.lld as an option.
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,u32", "--kernel", "bump", "-o", "-bump.so", "--", "-bump.c"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let so = std::fs::read(dir.join("-bump.so")).unwrap();
    assert_eq!(u16::from_le_bytes([so[18], so[19]]), 164);
    assert!(dir.join("-bump.so.build/kernel0.o").exists());
    // -o onto the kernel source, a directory as kernel, a mismatching signature, a missing kernel.
    for (args, needle) in [
        (
            &["build-lib", "--signature", "buf,u32", "--kernel", "bump", "-o", "my-kernel.c", "my-kernel.c"][..],
            "overwrite the kernel source",
        ),
        (&["build-lib", "--signature", "buf,u32", "--kernel", "bump", "-o", "d.so", "."][..], "directory"),
        (&["build-lib", "--signature", "buf,f32", "--kernel", "bump", "-o", "m.so", "my-kernel.c"][..], "parameter 2 is `unsigned int`"),
        (&["build-lib", "--signature", "buf,u32", "--kernel", "nope", "-o", "n.so", "my-kernel.c"][..], "no function `nope`"),
    ] {
        let o = hexrpc_in(&dir, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr_of(&o).contains(needle), "{args:?}: {}", stderr_of(&o));
    }
    assert_eq!(std::fs::read_to_string(dir.join("my-kernel.c")).unwrap(), kernel);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_device_test_library_builds_and_only_weak_imports_may_be_missing() {
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
    if !have_tools || !cfg!(target_arch = "x86_64") {
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not runnable here");
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-devicelib-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/devicelib/hexrpc_selftest.c");
    let out = dir.join("libhexrpc_selftest.so");
    let args = ["build-lib", src, "--kernel", "hexrpc_selftest", "--signature", "buf,buf,u32,u32,u32", "-o", out.to_str().unwrap()];
    let run = hexrpc(&args);
    assert!(run.status.success(), "the device test library builds: {run:?}");
    // An import the DSP shell lacks is refused by name, unless it is weak (optional: 0 when
    // absent, which the library tests).
    for (name, decl, ok) in [
        ("strong", "extern unsigned long fread(void *, unsigned long, unsigned long, void *);", false),
        ("weak", "extern unsigned long fread(void *, unsigned long, unsigned long, void *) __attribute__((weak));", true),
    ] {
        let c = dir.join(format!("{name}.c"));
        std::fs::write(
            &c,
            format!("{decl}\nvoid {name}(unsigned char *in, unsigned char *out) {{ out[0] = fread ? fread(out, 1, 1, in) != 0 : 2; }}\n"),
        )
        .unwrap();
        let so = dir.join(format!("lib{name}.so"));
        let run = hexrpc(&["build-lib", c.to_str().unwrap(), "--signature", "buf,buf", "-o", so.to_str().unwrap()]);
        if ok {
            assert!(run.status.success(), "{name}: {run:?}");
        } else {
            assert_eq!(run.status.code(), Some(1), "{name}: {run:?}");
            assert!(String::from_utf8_lossy(&run.stderr).contains("fread"), "{run:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_capture_records_the_library_fetch_and_reverse_replay_accepts_it() {
    if !executor_runnable() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-run-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let so = dir.join("libhexrpc_selftest.so");
    build_device_library(&so);
    let input = dir.join("in.bin");
    std::fs::write(&input, (0..64u8).collect::<Vec<_>>()).unwrap();
    let (out, cap) = (dir.join("out.bin"), dir.join("cap"));
    let arg_in = format!("in={},offset=1", input.display());
    let arg_out = format!("out={},size=64,offset=4097", out.display());
    let run = hexrpc(&[
        "run",
        so.to_str().unwrap(),
        "--signature",
        "buf,buf,u32,u32,u32",
        "--bench",
        "--arg",
        &arg_in,
        "--arg",
        &arg_out,
        "--arg",
        "64",
        "--arg",
        "0",
        "--arg",
        "3",
        "--capture",
        cap.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert_eq!(std::fs::read(&out).unwrap(), (3..67u8).collect::<Vec<_>>(), "the device test library's ADD, run by the executor");
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(cap.join("index.json")).unwrap()).unwrap();
    let files: Vec<String> = index["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| cap.join(r["file"].as_str().unwrap()).to_string_lossy().into_owned())
        .collect();
    assert!(files.len() >= 3, "the DSP fetched the library through the reverse service: {index}");
    let mut args = vec!["reverse-replay"];
    args.extend(files.iter().map(String::as_str));
    assert_eq!(hexrpc(&args).status.code(), Some(0));
    // A FIFO as an input file is refused, not waited on.
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let arg_fifo = format!("in={}", fifo.display());
    let run = hexrpc_within(
        &[
            "run",
            so.to_str().unwrap(),
            "--signature",
            "buf,buf,u32,u32,u32",
            "--bench",
            "--arg",
            &arg_fifo,
            "--arg",
            "size=8",
            "--arg",
            "8",
            "--arg",
            "0",
            "--arg",
            "0",
        ],
        std::time::Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(String::from_utf8_lossy(&run.stderr).contains("FIFO"), "{run:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A build that fails a check after the link (here: a `.ctors` section, which the linker script
/// does not place on its own page) leaves nothing at `-o`, and leaves a file already there as it
/// was: the library is put in place only once every check passed.
#[test]
fn a_failed_build_leaves_no_library_at_the_output_and_keeps_a_previous_one() {
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
    if !have_tools || !cfg!(target_arch = "x86_64") {
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not runnable here");
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-ctors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ctor.c"),
        "static int ready;\nstatic void init(void) { ready = 1; }\n\
         __attribute__((section(\".ctors\"), used)) static void (*const init_ctor)(void) = init;\n\
         void ctor(unsigned char *in, unsigned char *out) { out[0] = in[0] + ready; }\n",
    )
    .unwrap();
    std::fs::write(dir.join("good.c"), "void good(unsigned char *in, unsigned char *out) { out[0] = in[0]; }\n").unwrap();
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,buf", "-o", "libctor.so", "ctor.c"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains(".ctors"), "the failed check is named: {}", stderr_of(&o));
    assert!(std::fs::symlink_metadata(dir.join("libctor.so")).is_err(), "no library at -o after a failed build");
    // A previous library at -o stays as it was.
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,buf", "-o", "libprev.so", "good.c"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let before = std::fs::read(dir.join("libprev.so")).unwrap();
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,buf", "--kernel", "ctor", "-o", "libprev.so", "ctor.c"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr_of(&o));
    assert_eq!(std::fs::read(dir.join("libprev.so")).unwrap(), before, "the previous library is untouched");
    // No temporary file is left next to the output.
    let stray: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') || n.ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run` refuses an `out=` that is the library, an `in=` file or another `out=` file (however
/// spelled: another path, a hard link, a symbolic link, a file not made yet) and a key given twice
/// in one `--arg`; `capture --dir` and `run --capture` refuse a non-empty directory and a
/// symbolic link to one. All of it before any session starts (exit 2), with nothing written.
#[test]
fn run_and_capture_refuse_aliased_outputs_duplicate_keys_and_unusable_directories() {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-alias-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let lib = b"\x7fELF not really a library";
    std::fs::write(dir.join("lib.so"), lib).unwrap();
    std::fs::write(dir.join("a.bin"), [1u8; 8]).unwrap();
    std::fs::hard_link(dir.join("a.bin"), dir.join("hard.bin")).unwrap();
    std::os::unix::fs::symlink(dir.join("lib.so"), dir.join("soft.so")).unwrap();
    let run = |sig: &str, specs: &[&str], extra: &[&str]| {
        let mut args = vec!["run", "lib.so", "--signature", sig, "--bench"];
        for s in specs {
            args.extend(["--arg", s]);
        }
        args.extend_from_slice(extra);
        hexrpc_in(&dir, &args)
    };
    for (sig, specs, needle) in [
        ("buf", &["size=8,out=lib.so"][..], "the same file as the library"),
        ("buf", &["size=8,out=sub/../lib.so"][..], "the same file as the library"),
        ("buf", &["size=8,out=soft.so"][..], "the same file as the library"),
        ("buf", &["in=a.bin,out=a.bin"][..], "the same file as --arg 1's in=a.bin"),
        ("buf", &["in=a.bin,out=hard.bin"][..], "the same file as --arg 1's in=a.bin"),
        ("buf,buf", &["in=a.bin", "size=8,out=./a.bin"][..], "--arg 2: out=./a.bin is the same file as --arg 1's in=a.bin"),
        ("buf,buf", &["size=8,out=new.bin", "size=8,out=sub/../new.bin"][..], "the same file as --arg 1's out=new.bin"),
        ("buf", &["size=64,size=128"][..], "the key \"size\" is given twice"),
        ("buf", &["in=a.bin,in=hard.bin"][..], "the key \"in\" is given twice"),
    ] {
        let o = run(sig, specs, &[]);
        assert_eq!(o.status.code(), Some(2), "{specs:?}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains(needle), "{specs:?}: {}", stderr_of(&o));
    }
    assert_eq!(std::fs::read(dir.join("lib.so")).unwrap(), lib, "the library is untouched");
    assert_eq!(std::fs::read(dir.join("a.bin")).unwrap(), [1u8; 8]);
    assert!(!dir.join("new.bin").exists());
    // Capture directories: a non-empty one, and a link to an empty one.
    let used = dir.join("used");
    std::fs::create_dir(&used).unwrap();
    std::fs::write(used.join("index.json"), b"{\"requests\": []}").unwrap();
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::os::unix::fs::symlink(&empty, dir.join("link")).unwrap();
    for (target, needle) in [("used", "choose an empty or new directory"), ("link", "symbolic link"), ("link/", "symbolic link")] {
        let o = hexrpc_in(&dir, &["capture", "--bench", "--dir", target]);
        assert_eq!(o.status.code(), Some(2), "capture --dir {target}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains(needle), "capture --dir {target}: {}", stderr_of(&o));
        let o = run("buf", &["size=8"], &["--capture", target]);
        assert_eq!(o.status.code(), Some(2), "run --capture {target}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains(needle), "run --capture {target}: {}", stderr_of(&o));
    }
    assert_eq!(std::fs::read(used.join("index.json")).unwrap(), b"{\"requests\": []}", "the earlier index is untouched");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "nothing was written through the link");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kernels that make Hexagon Linux-user system calls themselves through `sys` (after
/// `hexrpc_scenarios::suite::TRAP0_SYSCALL_C`): qemu-hexagon would serve them on the host.
const TRAP0_KERNELS: &str = "void escape(unsigned char *io, unsigned int mode) {\n\
  long fd = sys(56, -100, (long)io, mode == 0 ? (01 | 0100 | 01000) : 01, 0644);\n\
  if (fd >= 0) { sys(64, fd, (long)\"escaped\", 7, 0); sys(57, fd, 0, 0, 0); }\n\
  sys(35, -100, (long)io + 256, 0, 0);\n\
}\n\
void forge(unsigned char *io, unsigned int mode) {\n\
  static const unsigned int fake[7] = {0x53525848u, 0x5eed5eedu, 0, 0, 0, 0, 0};\n\
  io[0] = 1;\n\
  if (mode != 0) sys(64, 1, (long)fake, sizeof fake, 0);\n\
}\n";

/// `hexrpc run --bench` is not a way out of the emulator: a library that creates, writes and
/// unlinks host files through qemu-hexagon's system calls changes nothing on the host, and a
/// library that forges the shell's answer on its stdout makes the run fail (the DSP restarted)
/// instead of reporting made-up outputs and times.
#[test]
fn run_on_the_bench_confines_the_library_and_refuses_forged_answers() {
    if let Err(e) = hexrpc_bench::executor::tools_available() {
        println!("SKIPPED: {e}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-confine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("hostile.c");
    std::fs::write(&src, format!("{}{TRAP0_KERNELS}", hexrpc_scenarios::suite::TRAP0_SYSCALL_C)).unwrap();
    let (created, victim) = (dir.join("created"), dir.join("victim"));
    std::fs::write(&victim, b"keep").unwrap();
    let mut io = vec![0u8; 512];
    io[..created.to_str().unwrap().len()].copy_from_slice(created.to_str().unwrap().as_bytes());
    io[256..256 + victim.to_str().unwrap().len()].copy_from_slice(victim.to_str().unwrap().as_bytes());
    let io_file = dir.join("io.bin");
    std::fs::write(&io_file, &io).unwrap();
    let arg_io = format!("in={}", io_file.display());
    for kernel in ["escape", "forge"] {
        let lib = dir.join(format!("{kernel}.so"));
        let built =
            hexrpc(&["build-lib", src.to_str().unwrap(), "--kernel", kernel, "--signature", "buf,u32", "-o", lib.to_str().unwrap()]);
        assert!(built.status.success(), "build-lib {kernel}: {}", stderr_of(&built));
    }
    let escape = dir.join("escape.so");
    let out = hexrpc(&["run", escape.to_str().unwrap(), "--signature", "buf,u32", "--bench", "--arg", &arg_io, "--arg", "0"]);
    assert!(!created.exists(), "the library created a host file (run: {:?}, {})", out.status, stderr_of(&out));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep", "the library changed or removed a host file");
    let out = hexrpc(&["run", escape.to_str().unwrap(), "--signature", "buf,u32", "--bench", "--arg", &arg_io, "--arg", "1"]);
    assert!(!created.exists());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep", "{}", stderr_of(&out));

    let forge = dir.join("forge.so");
    let honest = hexrpc(&["run", forge.to_str().unwrap(), "--signature", "buf,u32", "--bench", "--arg", &arg_io, "--arg", "0"]);
    assert_eq!(honest.status.code(), Some(0), "{}", stderr_of(&honest));
    let forged = hexrpc(&["run", forge.to_str().unwrap(), "--signature", "buf,u32", "--bench", "--arg", &arg_io, "--arg", "1"]);
    assert_eq!(forged.status.code(), Some(1), "a forged answer must fail the run: {}", String::from_utf8_lossy(&forged.stdout));
    assert!(stderr_of(&forged).contains("DSP"), "{}", stderr_of(&forged));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Like [`hexrpc`], with one environment variable set.
fn hexrpc_env(args: &[&str], key: &str, value: &str) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_hexrpc");
    let direct = Command::new(bin).args(args).env(key, value).output();
    if cfg!(target_arch = "aarch64") && exec_failed(&direct) {
        return Command::new("qemu-aarch64").args(["-L", "/usr/aarch64-linux-gnu", bin]).args(args).env(key, value).output().unwrap();
    }
    direct.unwrap()
}

/// Flags and exit codes agree across commands: --bench with --device is a usage error (not
/// "the last wins"), a --library that cannot be read exits 2 everywhere (never a silent fall-back
/// to the bench's model), and an HEXRPC_LOG that is not a level is said.
#[test]
fn flags_and_exit_codes_are_consistent() {
    for cmd in [vec!["selftest", "--bench", "--device"], vec!["probe", "--device", "--bench"], vec!["run", "x.so", "--bench", "--device"]] {
        let o = hexrpc(&cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains("--bench and --device exclude each other"), "{cmd:?}: {}", stderr_of(&o));
    }
    for cmd in [
        vec!["selftest", "--bench", "--library", "/nonexistent/lib.so"],
        vec!["probe", "--bench", "--library", "/nonexistent/lib.so"],
        vec!["report", "--library", "/nonexistent/lib.so", "-o", "-"],
    ] {
        let o = hexrpc(&cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains("/nonexistent/lib.so"), "{cmd:?}: {}", stderr_of(&o));
    }
    let o = hexrpc_env(&["abi"], "HEXRPC_LOG", "verbose");
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr_of(&o).contains("HEXRPC_LOG=\"verbose\" is not a level"), "{}", stderr_of(&o));
    let o = hexrpc_env(&["abi"], "HEXRPC_LOG", "debug");
    assert!(!stderr_of(&o).contains("is not a level"), "{}", stderr_of(&o));
}

/// `hexrpc probe` with its default arguments on an installed root loads the shipped device test
/// library in its library step (through the bench seam: the bench stands in for the nodes and
/// the library runs under qemu-hexagon); with nothing installed the step says where it looked.
#[test]
fn probe_loads_the_shipped_device_test_library_by_default() {
    if !executor_runnable() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-probe-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
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

/// True when every one of `tools` starts here (`TOOL --version`).
fn tools_run(tools: &[&str]) -> bool {
    tools.iter().all(|t| Command::new(t).arg("--version").output().is_ok())
}

/// True when the Hexagon executor's tools run here (x86-64 desk); otherwise says SKIPPED.
fn executor_runnable() -> bool {
    let ok = tools_run(&["clang-19", "ld.lld-19", "qemu-hexagon"]) && cfg!(target_arch = "x86_64");
    if !ok {
        eprintln!("SKIPPED: the Hexagon executor is not runnable here");
    }
    ok
}

/// Builds the device test library (android/devicelib) into `out` with `hexrpc build-lib`.
fn build_device_library(out: &std::path::Path) {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/devicelib/hexrpc_selftest.c");
    let built =
        hexrpc(&["build-lib", src, "--kernel", "hexrpc_selftest", "--signature", "buf,buf,u32,u32,u32", "-o", out.to_str().unwrap()]);
    assert!(built.status.success(), "{built:?}");
}
