//! Builds to the same output at once, and builds after one that was killed: every build to an
//! output succeeds, whatever another build to it is doing or where it was interrupted
//! (two `build-lib` runs to one `-o` used to make one fail with "Directory not empty" and
//! leave `OUT.build/` without its marker, refusing every later build).
//!
//! Skips (with a message) when `clang-19` / `ld.lld-19` are missing (`HEXRPC_CLANG`,
//! `HEXRPC_LLD` override the names).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use hexrpc_libbuild::{build_library, check_library, parse_elf, BuildError, BuildOptions, DEFAULT_CLANG, DEFAULT_LLD, WORK_MARKER};
use hexrpc_runtime::launch::{LibraryRecord, Signature};

fn tool(var: &str, default: &str) -> Option<PathBuf> {
    let t = PathBuf::from(std::env::var_os(var).unwrap_or_else(|| default.into()));
    match Command::new(&t).arg("--version").output() {
        Ok(o) if o.status.success() => Some(t),
        _ => {
            eprintln!("SKIPPED: `{}` not found (set {var}); concurrent builds were not checked", t.display());
            None
        }
    }
}

fn options() -> Option<BuildOptions> {
    let (clang, lld) = (tool("HEXRPC_CLANG", DEFAULT_CLANG)?, tool("HEXRPC_LLD", DEFAULT_LLD)?);
    Some(BuildOptions { clang, lld, ..BuildOptions::default() })
}

fn work_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-concurrent-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const KERNEL: &str = "void scale(float *out, const float *in, int n, float k) {\n  for (int i = 0; i < n; i++) out[i] = in[i] * k;\n}\n";
const SIG: &str = "buf,buf,i32,f32";

fn kernel_in(d: &Path) -> PathBuf {
    let kernel = d.join("scale.c");
    std::fs::write(&kernel, KERNEL).unwrap();
    kernel
}

/// The output is a whole, valid library: a Hexagon shared object that passes the builder's
/// checks and carries the kernel's build record.
fn assert_valid_library(out: &Path) {
    let bytes = std::fs::read(out).unwrap();
    let elf = parse_elf(&bytes).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    check_library(&elf).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let rec = LibraryRecord::find(&bytes).unwrap().expect("build record");
    assert_eq!((rec.kernel().name, rec.signature()), ("scale", SIG));
}

/// Nothing but the output, its work directory and the lock file beside it: no temporary file or
/// directory of a build is left next to the output.
fn assert_no_leftovers(d: &Path, out_name: &str) {
    let mut names: Vec<String> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let want = ["scale.c".to_string(), out_name.to_string(), format!("{out_name}.build"), format!("{out_name}.build.lock")];
    let mut want = want.to_vec();
    want.sort();
    assert_eq!(names, want, "left next to the output");
}

#[test]
fn two_builds_to_one_output_at_once_both_succeed() {
    let Some(opts) = options() else { return };
    let d = work_dir("threads");
    let kernel = kernel_in(&d);
    let out = d.join("libscale.so");
    let sig = Signature::parse(SIG).unwrap();
    for round in 0..4 {
        let barrier = Arc::new(Barrier::new(2));
        let builds: Vec<_> = (0..2)
            .map(|_| {
                let (barrier, kernel, out, opts) = (barrier.clone(), kernel.clone(), out.clone(), opts.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    build_library(&kernel, &sig, &out, &opts)
                })
            })
            .collect();
        for (i, b) in builds.into_iter().enumerate() {
            match b.join().unwrap() {
                Ok(report) => assert_eq!(report.library, out),
                Err(e) => panic!("round {round}, build {i}: {e}"),
            }
        }
        assert_valid_library(&out);
        assert!(d.join("libscale.so.build").join(WORK_MARKER).is_file(), "round {round}: the work directory keeps its marker");
    }
    // And a build afterwards, alone.
    let report = build_library(&kernel, &sig, &out, &opts).unwrap_or_else(|e| panic!("the build after: {e}"));
    assert!(report.entry_source.is_file(), "the intermediates stay for inspection");
    assert_valid_library(&out);
    assert_no_leftovers(&d, "libscale.so");
    let _ = std::fs::remove_dir_all(&d);
}

/// The child of the process tests: one build, from the environment's paths.
#[test]
#[ignore = "run by the other tests of this file, as a child process"]
fn child_build() {
    let (Some(kernel), Some(out)) = (std::env::var_os("HEXRPC_CHILD_KERNEL"), std::env::var_os("HEXRPC_CHILD_OUT")) else {
        return;
    };
    let opts = options().expect("the parent checked the tools");
    // Started together with another child: says it is ready, then waits for the parent's go.
    if let Some(go) = std::env::var_os("HEXRPC_CHILD_GO") {
        let go = PathBuf::from(go);
        let mut ready = go.as_os_str().to_owned();
        ready.push(format!(".{}", std::process::id()));
        std::fs::write(ready, b"").unwrap();
        while !go.exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if let Err(e) = build_library(Path::new(&kernel), &Signature::parse(SIG).unwrap(), Path::new(&out), &opts) {
        panic!("child build: {e}");
    }
}

/// Starts [`child_build`] in a process group of its own (so that the clang and ld.lld it runs
/// can be killed with it).
/// With `go`, the child waits for that file to appear before it builds (after writing
/// `GO.PID` to say it is ready).
fn spawn_child(kernel: &Path, out: &Path, go: Option<&Path>) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let mut c = Command::new(std::env::current_exe().unwrap());
    if let Some(go) = go {
        c.env("HEXRPC_CHILD_GO", go);
    }
    c.args(["--ignored", "--exact", "child_build", "--test-threads=1", "--quiet"])
        .env("HEXRPC_CHILD_KERNEL", kernel)
        .env("HEXRPC_CHILD_OUT", out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap()
}

#[test]
// The children are this test binary run again: under qemu-aarch64 (the gate's aarch64 run) they
// never got as far as saying they were ready. The thread test covers the same lock there.
#[cfg_attr(not(target_arch = "x86_64"), ignore = "re-runs the test binary as a child, which does not start under qemu-user")]
fn two_build_processes_to_one_output_at_once_both_succeed() {
    let Some(opts) = options() else { return };
    let d = work_dir("processes");
    let kernel = kernel_in(&d);
    let out = d.join("libscale.so");
    let sync = work_dir("processes-sync");
    for round in 0..3 {
        let go = sync.join(format!("go{round}"));
        let children = [spawn_child(&kernel, &out, Some(&go)), spawn_child(&kernel, &out, Some(&go))];
        // Both started and ready, then both let go at once.
        let ready = |c: &std::process::Child| {
            let mut r = go.as_os_str().to_owned();
            r.push(format!(".{}", c.id()));
            PathBuf::from(r).exists()
        };
        let t0 = std::time::Instant::now();
        while !children.iter().all(ready) {
            assert!(t0.elapsed() < Duration::from_secs(60), "round {round}: the children did not start");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::write(&go, b"").unwrap();
        for (i, c) in children.into_iter().enumerate() {
            let o = c.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}, process {i}: {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert_valid_library(&out);
    }
    build_library(&kernel, &Signature::parse(SIG).unwrap(), &out, &opts).unwrap_or_else(|e| panic!("the build after: {e}"));
    assert_valid_library(&out);
    assert_no_leftovers(&d, "libscale.so");
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&sync);
}

/// Makes by hand what a killed build left at the work directory's path.
type Leave = dyn Fn(&Path);

/// What a build killed at some point may leave in `OUT.build/`, made by hand: none of it
/// refuses the next build, which then leaves a clean work directory with its marker.
#[test]
fn a_killed_builds_leftover_work_directory_does_not_block_the_next_build() {
    let Some(opts) = options() else { return };
    let d = work_dir("leftovers");
    let kernel = kernel_in(&d);
    let sig = Signature::parse(SIG).unwrap();
    let out = d.join("libscale.so");
    let work = d.join("libscale.so.build");
    let leftovers: &[(&str, &Leave)] = &[
        // Killed between making the directory and writing its marker.
        ("an empty work directory", &|w| std::fs::create_dir(w).unwrap()),
        // Killed while the marker was being written.
        ("an empty marker", &|w| {
            std::fs::create_dir(w).unwrap();
            std::fs::write(w.join(WORK_MARKER), b"").unwrap();
        }),
        // Killed in the middle of a build: partial intermediates, a truncated object.
        ("a half-done build", &|w| {
            std::fs::create_dir_all(w.join("include")).unwrap();
            std::fs::write(w.join(WORK_MARKER), b"made by hexrpc build-lib\n").unwrap();
            std::fs::write(w.join("include/math.h"), b"/* trunc").unwrap();
            std::fs::write(w.join("link.ld"), b"SECTIONS {").unwrap();
            std::fs::write(w.join("kernel0.c"), b"#include").unwrap();
            std::fs::write(w.join("kernel0.o"), b"\x7fELF\x01").unwrap();
        }),
        // Killed while the previous work directory was being removed (the marker went first):
        // only intermediates a build writes are left, no marker.
        ("intermediates without the marker", &|w| {
            std::fs::create_dir_all(w.join("include")).unwrap();
            std::fs::write(w.join("include/string.h"), b"").unwrap();
            for f in ["entry.c", "entry.o", "kernel0.o", "record.s", "linked.so", "hrx_half.c"] {
                std::fs::write(w.join(f), b"partial").unwrap();
            }
        }),
        // Killed while the lock file beside it was held (a dead process holds no lock).
        ("a stale lock file", &|w| {
            let mut lock = w.as_os_str().to_owned();
            lock.push(".lock");
            std::fs::write(lock, b"").unwrap();
        }),
    ];
    for (what, leave) in leftovers {
        let _ = std::fs::remove_dir_all(&work);
        let _ = std::fs::remove_file(&out);
        leave(&work);
        match build_library(&kernel, &sig, &out, &opts) {
            Ok(_) => {}
            Err(e) => panic!("after {what}: {e}"),
        }
        assert_valid_library(&out);
        assert!(work.join(WORK_MARKER).is_file(), "after {what}: the marker is back");
        assert!(std::fs::read(work.join("kernel0.o")).unwrap().len() > 5, "after {what}: rebuilt intermediates");
    }
    // A directory that holds anything a build does not write is still not ours: refused, left alone.
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("kernel0.o"), b"partial").unwrap();
    std::fs::write(work.join("notes.txt"), b"user data").unwrap();
    assert!(matches!(build_library(&kernel, &sig, &out, &opts), Err(BuildError::WorkDirInUse(_))));
    assert_eq!(std::fs::read(work.join("notes.txt")).unwrap(), b"user data");
    let _ = std::fs::remove_dir_all(&d);
}

/// Real kills: a build process (and the tools it runs) killed at several points of its build,
/// each followed by a build to the same output, which succeeds.
#[test]
fn a_build_killed_at_any_point_does_not_block_the_next_build() {
    let Some(opts) = options() else { return };
    let d = work_dir("kills");
    let kernel = kernel_in(&d);
    let sig = Signature::parse(SIG).unwrap();
    let out = d.join("libscale.so");
    for ms in [0u64, 5, 15, 30, 60, 100, 150, 250, 400, 600] {
        let child = spawn_child(&kernel, &out, None);
        std::thread::sleep(Duration::from_millis(ms));
        // The whole group: the test process and the clang or ld.lld it is running.
        let pgid = child.id();
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status();
        let _ = child.wait_with_output();
        // Wait until every process of the group is gone (the tools exit on SIGKILL too).
        while Command::new("kill").args(["-0", "--", &format!("-{pgid}")]).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
            std::thread::sleep(Duration::from_millis(5));
        }
        build_library(&kernel, &sig, &out, &opts).unwrap_or_else(|e| panic!("after a kill at {ms} ms: {e}"));
        assert_valid_library(&out);
    }
    assert_no_leftovers(&d, "libscale.so");
    let _ = std::fs::remove_dir_all(&d);
}
