//! What the `hexrpc` binary's integration tests share: starting the binary under test (directly,
//! or through qemu-aarch64 when the tests themselves run under it), reading its output, scratch
//! directories, and whether the tools a test needs run here.
//!
//! Each test target includes this module (`mod common;`) and uses a part of it.
#![allow(dead_code)] // each test target uses a part

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs the binary under test. When the tests themselves run under qemu-user (cross-tests for
/// aarch64 on an x86-64 machine without binfmt), the kernel cannot exec the aarch64 binary: the
/// spawn fails with ENOEXEC, or the child reports exit status 127 with no output. It is then run
/// through the same emulator, as cargo's runner does.
pub fn hexrpc(args: &[&str]) -> Output {
    hexrpc_with(args, |_| {}, Command::output)
}

/// Runs the binary in `dir` (for relative operands), like [`hexrpc`].
pub fn hexrpc_in(dir: &Path, args: &[&str]) -> Output {
    hexrpc_with(
        args,
        |c| {
            c.current_dir(dir);
        },
        Command::output,
    )
}

/// Like [`hexrpc`], with one environment variable set (`PATH` too: the emulator, when one is
/// needed, is found on this process's own `PATH`).
pub fn hexrpc_env(args: &[&str], key: &str, value: impl AsRef<std::ffi::OsStr>) -> Output {
    let value = value.as_ref();
    hexrpc_with(
        args,
        |c| {
            c.env(key, value);
        },
        Command::output,
    )
}

/// Runs the binary with a time limit: a hang (a FIFO read) is a failure, not a stuck test.
pub fn hexrpc_within(args: &[&str], limit: Duration) -> Output {
    hexrpc_with(args, |_| {}, |c| within(c, args, limit))
}

/// The one way the binary is started: with `args` and without `HEXRPC_LOG`, `configure` applied,
/// run by `run`; again through qemu-aarch64 when this is an aarch64 test binary and the kernel
/// could not exec the binary directly (see [`hexrpc`]).
fn hexrpc_with(args: &[&str], configure: impl Fn(&mut Command), run: impl Fn(&mut Command) -> io::Result<Output>) -> Output {
    let bin = env!("CARGO_BIN_EXE_hexrpc");
    let mut direct = Command::new(bin);
    direct.args(args).env_remove("HEXRPC_LOG");
    configure(&mut direct);
    let direct = run(&mut direct);
    if cfg!(target_arch = "aarch64") && exec_failed(&direct) {
        // Looked up on this process's PATH, not on one `configure` gave the child.
        let qemu = std::env::var_os("PATH")
            .and_then(|p| std::env::split_paths(&p).map(|d| d.join("qemu-aarch64")).find(|q| q.is_file()))
            .expect("qemu-aarch64 on PATH");
        let mut emulated = Command::new(qemu);
        emulated.args(["-L", "/usr/aarch64-linux-gnu", bin]).args(args).env_remove("HEXRPC_LOG");
        configure(&mut emulated);
        return run(&mut emulated).expect("run hexrpc under qemu-aarch64");
    }
    direct.expect("run hexrpc")
}

/// The kernel could not exec the binary (ENOEXEC), or the child reported 127 with no output.
fn exec_failed(o: &io::Result<Output>) -> bool {
    match o {
        Err(e) => e.raw_os_error() == Some(8),
        Ok(o) => o.status.code() == Some(127) && o.stdout.is_empty() && o.stderr.is_empty(),
    }
}

/// Runs `cmd` with its output captured; a run longer than `limit` is killed and fails the test.
fn within(cmd: &mut Command, args: &[&str], limit: Duration) -> io::Result<Output> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let t0 = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return child.wait_with_output();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hexrpc {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the binary wrote to stderr, as text.
pub fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `hexrpc-cli-NAME-PID` in the temporary directory, removed if a run left it there (not
/// created).
pub fn scratch_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hexrpc-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A new, empty scratch directory [`scratch_path`] names (the test removes it when it is done).
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = scratch_path(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// True when every one of `tools` starts here (`TOOL --version`).
pub fn tools_run(tools: &[&str]) -> bool {
    tools.iter().all(|t| Command::new(t).arg("--version").output().is_ok())
}

/// True when the Hexagon executor's tools run here (x86-64 desk); otherwise says SKIPPED.
pub fn executor_runnable() -> bool {
    let ok = tools_run(&["clang-19", "ld.lld-19", "qemu-hexagon"]) && cfg!(target_arch = "x86_64");
    if !ok {
        eprintln!("SKIPPED: the Hexagon executor is not runnable here");
    }
    ok
}

/// True when clang-19 and ld.lld-19 run here (x86-64 desk); otherwise says SKIPPED.
pub fn build_tools_runnable() -> bool {
    let ok = tools_run(&["clang-19", "ld.lld-19"]) && cfg!(target_arch = "x86_64");
    if !ok {
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not runnable here");
    }
    ok
}

/// Builds the device test library (android/devicelib) into `out` with `hexrpc build-lib`.
pub fn build_device_library(out: &Path) {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/devicelib/hexrpc_selftest.c");
    let built =
        hexrpc(&["build-lib", src, "--kernel", "hexrpc_selftest", "--signature", "buf,buf,u32,u32,u32", "-o", out.to_str().unwrap()]);
    assert!(built.status.success(), "the device test library builds: {built:?}");
}
