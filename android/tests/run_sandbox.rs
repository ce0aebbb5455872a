//! `hexrpc run --bench` of a library that starts host processes: the
//! executor's sandbox kills the DSP shell at the library's first `clone`, so the run fails
//! (exit 1) with a message that names the sandbox, and no process is left behind once `hexrpc`
//! has exited. (Sockets, and the cases in detail, are tested on the bench in
//! hexrpc-scenarios' `executor_sandbox`.)
//!
//! Prints `SKIPPED: <reason>` and returns when clang-19, ld.lld-19 or qemu-hexagon are missing or
//! cannot run from this process.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{hexrpc, scratch_dir, stderr_of};

/// A kernel that forks the shell `n` times through qemu-hexagon's system calls (`trap0(#1)`,
/// asm-generic numbers: clone 220 with `SIGCHLD` only, nanosleep 101, exit_group 94); each
/// child sleeps 20 s and exits, so an unsandboxed run leaves them behind for a while.
const SPAWN_C: &str = "static long sys6(long n, long a, long b, long c, long d, long e, long f) {\n\
  register long r0 __asm__(\"r0\") = a;\n\
  register long r1 __asm__(\"r1\") = b;\n\
  register long r2 __asm__(\"r2\") = c;\n\
  register long r3 __asm__(\"r3\") = d;\n\
  register long r4 __asm__(\"r4\") = e;\n\
  register long r5 __asm__(\"r5\") = f;\n\
  register long r6 __asm__(\"r6\") = n;\n\
  __asm__ volatile(\"trap0(#1)\" : \"+r\"(r0) : \"r\"(r1), \"r\"(r2), \"r\"(r3), \"r\"(r4), \"r\"(r5), \"r\"(r6) : \"memory\");\n\
  return r0;\n\
}\n\
struct hrx_ts { long sec; long nsec; };\n\
void spawn(unsigned char *io, unsigned int n) {\n\
  for (unsigned int i = 0; i < n; i++) {\n\
    long pid = sys6(220, 17, 0, 0, 0, 0, 0);\n\
    if (pid == 0) {\n\
      struct hrx_ts t = {20, 0};\n\
      sys6(101, (long)&t, 0, 0, 0, 0, 0);\n\
      for (;;) sys6(94, 0, 0, 0, 0, 0, 0);\n\
    }\n\
    io[i % 64] = pid > 0;\n\
  }\n\
}\n";

/// Live (not zombie) `qemu-hexagon` processes.
fn qemu_processes() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(head, rest)| head.ends_with("(qemu-hexagon") && !matches!(rest.chars().next(), Some('Z' | 'X')))
            })
        })
        .collect()
}

#[test]
fn run_of_a_library_that_forks_fails_naming_the_sandbox_and_leaves_no_process() {
    if hexrpc_scenarios::suite::tools_or_skip().is_none() {
        return;
    }
    let dir = scratch_dir("sandbox");
    let src = dir.join("spawn.c");
    std::fs::write(&src, SPAWN_C).unwrap();
    let lib = dir.join("spawn.so");
    let built = hexrpc(&["build-lib", src.to_str().unwrap(), "--signature", "buf,u32", "-o", lib.to_str().unwrap()]);
    assert!(built.status.success(), "build-lib: {}", stderr_of(&built));
    let lib_s = lib.to_str().unwrap();

    // An honest run of the same library (no fork) succeeds.
    let honest = hexrpc(&["run", lib_s, "--bench", "--arg", "size=64", "--arg", "0"]);
    assert_eq!(honest.status.code(), Some(0), "{}", stderr_of(&honest));

    for n in ["1", "64"] {
        let before = qemu_processes();
        let t0 = Instant::now();
        let run = hexrpc(&["run", lib_s, "--bench", "--arg", "size=64", "--arg", n]);
        let took = t0.elapsed();
        let err = stderr_of(&run);
        let mut left: Vec<u32> = Vec::new();
        while t0.elapsed() < took + Duration::from_secs(3) {
            left = qemu_processes().into_iter().filter(|p| !before.contains(p)).collect();
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // A failing (unsandboxed) run's strays: this test started them, it ends them.
        if !left.is_empty() {
            let _ = Command::new("kill").arg("-KILL").args(left.iter().map(u32::to_string)).status();
        }
        assert!(left.is_empty(), "{n} forks: host processes left after `hexrpc run` exited: {left:?} (exit {:?}: {err})", run.status);
        assert_eq!(run.status.code(), Some(1), "{n} forks: the run must fail: {err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(last.starts_with("hexrpc: run: ") && last.contains("DSP restarted"), "{n} forks: {err}");
        assert!(
            last.contains("a host system call refused by the executor's sandbox (seccomp)") && last.contains("SIGSYS"),
            "{n} forks: the message must name the sandbox: {err}"
        );
        assert!(took < Duration::from_secs(10), "{n} forks: the run took {took:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
