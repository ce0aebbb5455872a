//! `hexrpc run`: a build-lib library launched on the bench end to end, its capture replayed,
//! aliased outputs and unusable directories refused, and the library confined to the emulator.

use std::process::Command;

use crate::common::{build_device_library, executor_runnable, hexrpc, hexrpc_in, hexrpc_within, scratch_dir, scratch_path, stderr_of};

fn f32_file(path: &std::path::Path, xs: &[f32]) {
    std::fs::write(path, xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

/// `hexrpc run` on the bench, end to end, for a suite kernel built with `build-lib`.
#[test]
fn run_launches_a_build_lib_library_on_the_bench() {
    if hexrpc_scenarios::suite::tools_or_skip().is_none() {
        return;
    }
    let dir = scratch_dir("run");
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
    let io: [&str; 8] = ["--arg", &arg_a, "--arg", &arg_b, "--arg", &arg_o, "--arg", "64"];
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
    let wrong = hexrpc(&with(&["run", lib_s, "--signature", "buf,buf,buf,i32", "--bench"], &io));
    assert_eq!(wrong.status.code(), Some(1));
    assert!(stderr_of(&wrong).contains("was built for signature buf,buf,buf,u32"), "{}", stderr_of(&wrong));
    if !std::path::Path::new("/dev/adsprpc-smd").exists() {
        let nodsp = hexrpc(&with(&["run", lib_s, "--signature", "buf,buf,buf,u32"], &io));
        assert_eq!(nodsp.status.code(), Some(1));
        assert!(stderr_of(&nodsp).contains("add --bench"), "{}", stderr_of(&nodsp));
    }
    if !std::path::Path::new("/dev/ion").exists() {
        // --device on a machine without the nodes: the failure names the node and the next step.
        let nodev = hexrpc(&with(&["run", lib_s, "--signature", "buf,buf,buf,u32", "--device"], &io));
        assert_eq!(nodev.status.code(), Some(1));
        let err = stderr_of(&nodev);
        assert!(err.contains("/dev/ion does not exist") && err.contains("hexrpc probe") && !err.contains("HalError"), "{err}");
    }
    // --bench without the executor's tools names the missing one.
    let no_tools = Command::new(env!("CARGO_BIN_EXE_hexrpc"))
        .args(with(&common, &io))
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

#[test]
fn run_capture_records_the_library_fetch_and_reverse_replay_accepts_it() {
    if !executor_runnable() {
        return;
    }
    let dir = scratch_dir("run-capture");
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

/// `run` refuses an `out=` that is the library, an `in=` file or another `out=` file (however
/// spelled: another path, a hard link, a symbolic link, a file not made yet) and a key given twice
/// in one `--arg`; `capture --dir` and `run --capture` refuse a non-empty directory and a
/// symbolic link to one. All of it before any session starts (exit 2), with nothing written.
#[test]
fn run_and_capture_refuse_aliased_outputs_duplicate_keys_and_unusable_directories() {
    let dir = scratch_path("alias");
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
    if hexrpc_scenarios::suite::tools_or_skip().is_none() {
        return;
    }
    let dir = scratch_dir("confine");
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
