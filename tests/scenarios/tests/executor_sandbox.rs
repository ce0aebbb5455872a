//! The executor's sandbox against a hostile DSP library that starts host processes or reaches
//! host sockets. A library runs under qemu-hexagon, whose linux-user emulation serves the
//! library's `trap0` system calls on the host. Here a library tries to:
//!
//! * start host processes: `clone` (a fork: no `CLONE_THREAD`) once, 64 times, and in a loop;
//! * reach host sockets: a UDP datagram to a `UdpSocket` this test binds on 127.0.0.1, a datagram
//!   to a named UNIX datagram socket this test binds, and a datagram with that socket's address
//!   as destination on the socket the shell already holds (its stdin, made by the bench).
//!
//! Each attempt must end as a DSP fault (the shell killed by `SIGSYS`, a DSP restart whose
//! reason names the sandbox), leave no process behind and deliver nothing; the session recovers
//! and runs an honest call afterwards.
//!
//! A stray process is a `qemu-hexagon` process of this test's process group that was not there
//! when the case started and is not one of this process's own shells (those are its children):
//! a fork of a shell stays in the shell's process group, and is reparented when the shell dies.
//! The strays an unfixed executor leaves (each sleeps 20 s, then exits) are killed at the end of
//! the case, so a failing run leaves nothing either.
//!
//! Then the rest of the allow-list: a library tries each class of call the red team found open
//! (privileged calls a capability would pass: reboot, sethostname, swapoff, acct, syslog; a
//! host program written to a memfd and run with execve or execveat; file metadata: chmod, chown,
//! utimes, xattrs; another process's priority, limits, CPUs and I/O priority; signals to another
//! process), and each kills the shell as a sandbox refusal; reading another process's
//! `/proc/<pid>/environ` fails (Landlock), and the shell's own `/proc/self/status` shows no
//! capability, no new privileges and the filter in force.
//!
//! Every test prints `SKIPPED: <reason>` and returns when the tools are missing or cannot run
//! from this process (an aarch64 test binary under qemu-aarch64).

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hexrpc_bench::executor::{ShellEnd, ShellStatus, Toolchain};
use hexrpc_bench::{Bench, BenchConfig, RestartReason, ShellFault, ShellStep};
use hexrpc_bsp::Board;
use hexrpc_hal::Cause;
use hexrpc_libbuild::{build_library, BuildOptions};
use hexrpc_runtime::launch::{Scalar, Signature};
use hexrpc_scenarios::{stack, ModelError, Stack};

hexrpc_bench::on_both_kernels!(
    a_library_cannot_fork_the_shell_once,
    a_library_cannot_fork_the_shell_64_times,
    a_library_cannot_fork_the_shell_in_a_loop,
    a_library_cannot_send_a_udp_datagram_to_the_host,
    a_library_cannot_send_to_a_named_unix_socket_on_the_host,
    a_library_cannot_send_to_a_named_socket_through_the_inherited_socket,
);

// One kernel is enough for these: the sandbox is the executor's, the same under every driver.
#[test]
fn a_library_is_stopped_at_every_call_outside_the_allow_list() {
    every_refused_class(&hexrpc_bsp::BENCH);
}

#[test]
fn the_shell_runs_with_no_capability_no_new_privileges_and_the_filter() {
    the_shell_is_confined(&hexrpc_bsp::BENCH);
}

/// Linux's SIGSYS (the same number on x86-64 and aarch64).
const SIGSYS: i32 = 31;

/// What the executor's account of a refused call says (`ShellEnd`'s text).
const SANDBOX_TEXT: &str = "a host system call refused by the executor's sandbox (seccomp)";

/// The executor's per-call limit in these tests: a refused call must end long before it.
const CALL_LIMIT: Duration = Duration::from_secs(5);

fn tools() -> Option<Toolchain> {
    hexrpc_scenarios::suite::tools_or_skip()
}

fn work(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-sandbox-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A Hexagon Linux-user system call with six arguments (`trap0(#1)`, number in r6, arguments
/// in r0..r5: the ABI the shell's runtime uses). The numbers are asm-generic's.
const SYS6_C: &str = "static long sys6(long n, long a, long b, long c, long d, long e, long f) {\n\
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
#define SYS_CLOSE 57\n\
#define SYS_EXIT_GROUP 94\n\
#define SYS_NANOSLEEP 101\n\
#define SYS_SOCKET 198\n\
#define SYS_SOCKETPAIR 199\n\
#define SYS_SENDTO 206\n\
#define SYS_CLONE 220\n";

/// `spawn(io, n)`: `n == HONEST` returns at once; `n == 0` clones in a loop until a clone fails
/// (at most 256 times, so that this test cannot become a fork bomb on a broken executor);
/// otherwise `n` clones. Each clone is a fork (`SIGCHLD` only, no `CLONE_VM`, no `CLONE_THREAD`);
/// a child sleeps 20 s and exits. `io` gets the number of forks that succeeded, then the last
/// result.
const SPAWN_C: &str = "struct hrx_ts { long sec; long nsec; };\n\
void spawn(unsigned char *io, unsigned int n) {\n\
  long *res = (long *)io;\n\
  res[0] = 0;\n\
  res[1] = 0;\n\
  if (n == 0xffffffffu) return;\n\
  unsigned int limit = n == 0 ? 256 : n;\n\
  for (unsigned int i = 0; i < limit; i++) {\n\
    long pid = sys6(SYS_CLONE, 17 /* SIGCHLD */, 0, 0, 0, 0, 0);\n\
    if (pid == 0) {\n\
      struct hrx_ts t = {20, 0};\n\
      sys6(SYS_NANOSLEEP, (long)&t, 0, 0, 0, 0, 0);\n\
      for (;;) sys6(SYS_EXIT_GROUP, 0, 0, 0, 0, 0, 0);\n\
    }\n\
    res[1] = pid;\n\
    if (pid < 0) break;\n\
    res[0]++;\n\
  }\n\
}\n";

/// `netsend(io, arg)`: mode `arg >> 16`, port `arg & 0xffff`; `io` holds a NUL-terminated
/// UNIX socket path at 0, results go to `io + 256`.
/// * 0: a UDP socket, a datagram to 127.0.0.1:port;
/// * 1: a UNIX datagram socket, a datagram to the path;
/// * 2: a datagram with the path as destination on fd 0 (the shell's stdin: the bench's socket);
/// * 3: a UNIX socket pair;
/// * 0xffff: nothing (an honest call).
const NETSEND_C: &str = "struct hrx_in4 { unsigned short family; unsigned short port; unsigned int addr; unsigned char zero[8]; };\n\
struct hrx_un { unsigned short family; char path[108]; };\n\
void netsend(unsigned char *io, unsigned int arg) {\n\
  long *res = (long *)(io + 256);\n\
  unsigned int mode = arg >> 16, port = arg & 0xffffu;\n\
  static const char msg[] = \"escaped\";\n\
  res[0] = 0;\n\
  res[1] = 0;\n\
  if (mode == 0xffffu) return;\n\
  if (mode == 0) {\n\
    struct hrx_in4 sa;\n\
    sa.family = 2; /* AF_INET */\n\
    sa.port = (unsigned short)(((port & 0xffu) << 8) | (port >> 8));\n\
    sa.addr = 0x0100007fu; /* 127.0.0.1 in network order */\n\
    for (int i = 0; i < 8; i++) sa.zero[i] = 0;\n\
    long fd = sys6(SYS_SOCKET, 2, 2 /* SOCK_DGRAM */, 0, 0, 0, 0);\n\
    res[0] = fd;\n\
    if (fd < 0) return;\n\
    res[1] = sys6(SYS_SENDTO, fd, (long)msg, sizeof msg - 1, 0, (long)&sa, sizeof sa);\n\
    sys6(SYS_CLOSE, fd, 0, 0, 0, 0, 0);\n\
    return;\n\
  }\n\
  if (mode == 3) {\n\
    int fds[2];\n\
    res[0] = sys6(SYS_SOCKETPAIR, 1, 1 /* SOCK_STREAM */, 0, (long)fds, 0, 0);\n\
    return;\n\
  }\n\
  struct hrx_un sun;\n\
  sun.family = 1; /* AF_UNIX */\n\
  unsigned int len = 0;\n\
  while (len < 107 && io[len]) { sun.path[len] = (char)io[len]; len++; }\n\
  sun.path[len] = 0;\n\
  long fd = mode == 1 ? sys6(SYS_SOCKET, 1, 2 /* SOCK_DGRAM */, 0, 0, 0, 0) : 0;\n\
  res[0] = fd;\n\
  if (fd < 0) return;\n\
  res[1] = sys6(SYS_SENDTO, fd, (long)msg, sizeof msg - 1, 0, (long)&sun, 2 + len + 1);\n\
  if (mode == 1) sys6(SYS_CLOSE, fd, 0, 0, 0, 0, 0);\n\
}\n";

/// `hexrpc build-lib` of kernel `name` (a `buf,u32` kernel whose C is `body`).
fn build(tc: &Toolchain, dir: &Path, name: &str, body: &str) -> &'static [u8] {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, format!("{SYS6_C}{body}")).unwrap();
    let out = dir.join(format!("{name}.so"));
    let opts = BuildOptions { clang: tc.clang.clone(), lld: tc.lld.clone(), ..BuildOptions::default() };
    build_library(&src, &Signature::parse("buf,u32").unwrap(), &out, &opts).expect("build-lib");
    Box::leak(std::fs::read(&out).unwrap().into_boxed_slice())
}

/// One `/proc/<pid>/stat` line: (state, parent pid, process group) of a `qemu-hexagon` process.
fn qemu_stat(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(") ")?;
    if !head.ends_with("(qemu-hexagon") {
        return None;
    }
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Live (not zombie) `qemu-hexagon` processes of this process group that are not this
/// process's own children: forks of a shell.
fn descendants_not_ours() -> Vec<u32> {
    let me = std::process::id();
    let group = rustix::process::getpgrp().as_raw_pid() as u32;
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| matches!(qemu_stat(pid), Some((state, ppid, pgrp)) if !matches!(state, 'Z' | 'X') && ppid != me && pgrp == group))
        .collect()
}

/// The strays of a case: processes of [`descendants_not_ours`] that were not there before it.
/// Dropping it kills those still running that were not there when the first case of this
/// binary started (the cleanup of a failing case; cases run in parallel, so one case's cleanup
/// may end another's strays).
struct Strays {
    before: Vec<u32>,
}

/// [`descendants_not_ours`] when the first case started.
static BASELINE: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();

impl Strays {
    fn start() -> Strays {
        let before = descendants_not_ours();
        BASELINE.get_or_init(|| before.clone());
        Strays { before }
    }

    fn now(&self) -> Vec<u32> {
        descendants_not_ours().into_iter().filter(|p| !self.before.contains(p)).collect()
    }

    /// Waits up to `within` for no stray to be left; returns those still there.
    fn left_after(&self, within: Duration) -> Vec<u32> {
        let t0 = Instant::now();
        loop {
            let left = self.now();
            if left.is_empty() || t0.elapsed() >= within {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Strays {
    fn drop(&mut self) {
        let baseline = BASELINE.get().map_or(&[][..], Vec::as_slice);
        for pid in descendants_not_ours().into_iter().filter(|p| !baseline.contains(p)) {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
    }
}

/// A bench whose per-call limit is [`CALL_LIMIT`], and a session on it.
fn start(board: &'static Board) -> (Bench, Stack) {
    let bench = Bench::with_config(BenchConfig { executor_timeout: CALL_LIMIT, ..BenchConfig::for_board(board) });
    let stack = Stack::start(bench.clone()).expect("stack");
    (bench, stack)
}

/// `result` is a DSP restart whose recorded reason is the shell killed by the sandbox during
/// the invoke, and the text says so.
fn assert_refused_by_the_sandbox<T: std::fmt::Debug>(bench: &Bench, what: &str, result: Result<T, ModelError>) {
    match result {
        Err(ModelError::Hal(e)) => assert_eq!(e.cause, Cause::DspRestart, "{what}: {e}"),
        other => panic!("{what}: the call must fail with a DSP fault, got {other:?}"),
    }
    let reason = bench.last_restart().unwrap_or_else(|| panic!("{what}: no DSP restart was recorded"));
    let text = reason.to_string();
    match &reason {
        RestartReason::Fault { step: ShellStep::Invoke, fault: ShellFault::Ended(ShellEnd { status, .. }), .. } => {
            assert_eq!(*status, ShellStatus::Signal(SIGSYS), "{what}: {text}")
        }
        other => panic!("{what}: the restart must be the shell's end during the invoke, got {other:?}"),
    }
    assert!(text.contains(SANDBOX_TEXT), "{what}: the reason must name the sandbox: {text}");
    println!("{what}: {text}");
}

/// A library forks the shell `n` times (0: in a loop): the first fork kills the shell, a DSP
/// fault; no process is left, all within a few seconds; the session recovers.
fn forks_are_refused(board: &'static Board, n: u32) {
    let Some(tc) = tools() else { return };
    let dir = work(&format!("spawn-{n}-{}", board.name));
    let image = build(&tc, &dir, "spawn", SPAWN_C);
    let (bench, stack) = start(board);
    let lib = stack.open("spawn", image).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let v = lease.view(0, 64).unwrap();
    let sig = Signature::parse("buf,u32").unwrap();
    let strays = Strays::start();
    let t0 = Instant::now();
    let result = stack::launch(&lib, &sig, &[&v], &[Scalar::U32(n)]);
    let took = t0.elapsed();
    let left = strays.left_after(Duration::from_secs(3));
    let mut res = [0u8; 8];
    let _ = v.read(&mut res);
    let tried = match n {
        0 => "forks in a loop".to_string(),
        1 => "one fork".to_string(),
        n => format!("{n} forks"),
    };
    let what = format!("{tried} (the kernel counted {} that succeeded)", i32::from_le_bytes(res[..4].try_into().unwrap()));
    assert!(left.is_empty(), "{what}: host processes left by the library: {left:?} (the launch: {result:?})");
    assert_refused_by_the_sandbox(&bench, &what, result);
    assert!(took < Duration::from_secs(3), "{what}: the refusal took {took:?}");
    stack.session().recover().expect("recover");
    stack::launch(&lib, &sig, &[&v], &[Scalar::U32(u32::MAX)]).expect("an honest call after recovery");
    let _ = std::fs::remove_dir_all(&dir);
}

fn a_library_cannot_fork_the_shell_once(board: &'static Board) {
    forks_are_refused(board, 1);
}

fn a_library_cannot_fork_the_shell_64_times(board: &'static Board) {
    forks_are_refused(board, 64);
}

fn a_library_cannot_fork_the_shell_in_a_loop(board: &'static Board) {
    forks_are_refused(board, 0);
}

/// Runs `netsend` in `mode` (with `port`, and `path` in the buffer) and returns the result.
fn netsend(tc: &Toolchain, board: &'static Board, mode: u32, port: u16, path: &Path) -> (Bench, Stack, Result<(), ModelError>) {
    let image = netsend_image(tc);
    let (bench, stack) = start(board);
    let result = {
        let lib = stack.open("netsend", image).unwrap();
        let mut lease = stack.session().alloc(4096).unwrap();
        let mut buf = vec![0u8; 512];
        let p = path.as_os_str().as_encoded_bytes();
        assert!(p.len() < 100, "{}: too long for sun_path", path.display());
        buf[..p.len()].copy_from_slice(p);
        lease.write_at(0, &buf).unwrap();
        let v = lease.view(0, 512).unwrap();
        let sig = Signature::parse("buf,u32").unwrap();
        stack::launch(&lib, &sig, &[&v], &[Scalar::U32(0xffff << 16)]).expect("an honest call");
        let r = stack::launch(&lib, &sig, &[&v], &[Scalar::U32(mode << 16 | u32::from(port))]);
        if r.is_ok() {
            let mut out = [0u8; 512];
            v.read(&mut out).unwrap();
            let w = |i: usize| i32::from_le_bytes(out[256 + 4 * i..260 + 4 * i].try_into().unwrap());
            println!("mode {mode}: the kernel's calls returned {} and {}", w(0), w(1));
        }
        r.map(|_| ())
    };
    (bench, stack, result)
}

/// Nothing arrives within 500 ms.
fn nothing_received(recv: impl FnOnce(&mut [u8]) -> std::io::Result<usize>) -> Result<(), String> {
    let mut buf = [0u8; 64];
    match recv(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(()),
        Ok(n) => Err(format!("the library's datagram reached the host: {:?}", String::from_utf8_lossy(&buf[..n]))),
        Err(e) => Err(format!("the listener failed: {e}")),
    }
}

/// After a refused call the session recovers and an honest call runs.
fn recovers(stack: &Stack) {
    stack.session().recover().expect("recover");
    let lib = stack.open("netsend-again", NETSEND_IMAGE.get().copied().expect("built")).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let v = lease.view(0, 512).unwrap();
    stack::launch(&lib, &Signature::parse("buf,u32").unwrap(), &[&v], &[Scalar::U32(0xffff << 16)]).expect("an honest call after recovery");
}

static NETSEND_IMAGE: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();

fn netsend_image(tc: &Toolchain) -> &'static [u8] {
    NETSEND_IMAGE.get_or_init(|| {
        let dir = work("netsend-image");
        let image = build(tc, &dir, "netsend", NETSEND_C);
        let _ = std::fs::remove_dir_all(&dir);
        image
    })
}

/// A UDP datagram to a socket this test bound on 127.0.0.1: the `socket` call kills the shell,
/// nothing arrives.
fn a_library_cannot_send_a_udp_datagram_to_the_host(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let port = udp.local_addr().unwrap().port();
    let (bench, stack, result) = netsend(&tc, board, 0, port, Path::new(""));
    let received = nothing_received(|b| udp.recv(b));
    assert!(received.is_ok(), "UDP to 127.0.0.1:{port}: {} (the launch: {result:?})", received.unwrap_err());
    assert_refused_by_the_sandbox(&bench, "a UDP datagram to 127.0.0.1", result);
    recovers(&stack);
}

/// A datagram to a named UNIX datagram socket this test bound, from a new socket; and a socket
/// pair: both refused (the shell killed), nothing arrives.
fn a_library_cannot_send_to_a_named_unix_socket_on_the_host(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work(&format!("unix-{}", board.name));
    let path = dir.join("dgram.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let (bench, stack, result) = netsend(&tc, board, 1, 0, &path);
    let received = nothing_received(|b| sock.recv(b));
    assert!(received.is_ok(), "UNIX datagram to {}: {} (the launch: {result:?})", path.display(), received.unwrap_err());
    assert_refused_by_the_sandbox(&bench, "a datagram to a named UNIX socket", result);
    recovers(&stack);
    let (bench, _stack, result) = netsend(&tc, board, 3, 0, &path);
    assert_refused_by_the_sandbox(&bench, "a UNIX socket pair", result);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shell's stdin is a UNIX socket the bench made: a datagram with a named socket's address
/// as destination on it is refused too (the shell killed), and nothing arrives.
fn a_library_cannot_send_to_a_named_socket_through_the_inherited_socket(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work(&format!("stdin-{}", board.name));
    let path = dir.join("dgram.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let (bench, stack, result) = netsend(&tc, board, 2, 0, &path);
    let received = nothing_received(|b| sock.recv(b));
    assert!(received.is_ok(), "sendto on fd 0 to {}: {} (the launch: {result:?})", path.display(), received.unwrap_err());
    assert_refused_by_the_sandbox(&bench, "sendto with a destination on the shell's stdin socket", result);
    recovers(&stack);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hostile(io, mode)`: one call outside the shell's allow-list, by mode (the numbers are
/// asm-generic's, which qemu-hexagon serves with the host's calls). `io` holds this test
/// process's pid at 0 (as a decimal string too, at 16) and gets the call's result at 256; mode 0
/// is an honest call. Mode 100 copies `/proc/self/status` into `io + 512` (up to 3 KiB); mode
/// 101 tries to read this test process's `/proc/<pid>/environ` and stores the result.
const HOSTILE_C: &str = "void hostile(unsigned char *io, unsigned int mode) {\n\
  long long *res = (long long *)(io + 256);\n\
  long pid = *(long *)io;\n\
  const char *spid = (const char *)(io + 16);\n\
  static const char exe[] = \"/bin/true\";\n\
  static const char tmp[] = \"/tmp\";\n\
  static char path[64];\n\
  const char *argv[2] = {exe, 0};\n\
  long r = 0;\n\
  res[0] = 0;\n\
  switch (mode) {\n\
  case 0: return;\n\
  case 1: r = sys6(142, 0, 0, 0, 0, 0, 0); break; /* reboot, wrong magic */\n\
  case 2: r = sys6(161, (long)\"x\", 1, 0, 0, 0, 0); break; /* sethostname */\n\
  case 3: r = sys6(225, (long)\"/nonexistent\", 0, 0, 0, 0, 0); break; /* swapoff */\n\
  case 4: r = sys6(89, 0, 0, 0, 0, 0, 0); break; /* acct(NULL) */\n\
  case 5: r = sys6(116, 10, 0, 0, 0, 0, 0); break; /* syslog SIZE_BUFFER */\n\
  case 6: r = sys6(279, (long)\"x\", 0, 0, 0, 0, 0); break; /* memfd_create */\n\
  case 7: r = sys6(281, -100, (long)exe, (long)argv, 0, 0, 0); break; /* execveat */\n\
  case 8: r = sys6(221, (long)exe, (long)argv, 0, 0, 0, 0); break; /* execve */\n\
  case 9: r = sys6(53, -100, (long)tmp, 01777, 0, 0, 0); break; /* fchmodat */\n\
  case 10: r = sys6(54, -100, (long)tmp, 0, 0, 0, 0); break; /* fchownat */\n\
  case 11: r = sys6(88, -100, (long)tmp, 0, 0, 0, 0); break; /* utimensat */\n\
  case 12: r = sys6(5, (long)tmp, (long)\"user.x\", (long)\"y\", 1, 0, 0); break; /* setxattr */\n\
  case 13: { long lim[2] = {3, 3}; r = sys6(261, pid, 7, (long)lim, 0, 0, 0); break; } /* prlimit64 NOFILE */\n\
  case 14: r = sys6(140, 0, pid, 19, 0, 0, 0); break; /* setpriority */\n\
  case 15: { long mask = 1; r = sys6(122, pid, sizeof mask, (long)&mask, 0, 0, 0); break; } /* sched_setaffinity */\n\
  case 16: r = sys6(30, 1, pid, (3 << 13) | 7, 0, 0, 0); break; /* ioprio_set IDLE */\n\
  case 17: r = sys6(129, pid, 0, 0, 0, 0, 0); break; /* kill(pid, 0) */\n\
  case 18: r = sys6(131, pid, pid, 0, 0, 0, 0); break; /* tgkill */\n\
  case 100: {\n\
    long fd = sys6(56, -100, (long)\"/proc/self/status\", 0, 0, 0, 0);\n\
    res[0] = fd;\n\
    if (fd < 0) return;\n\
    long n = sys6(63, fd, (long)(io + 512), 3072, 0, 0, 0);\n\
    res[1] = n;\n\
    sys6(57, fd, 0, 0, 0, 0, 0);\n\
    return;\n\
  }\n\
  case 101: {\n\
    int k = 0;\n\
    const char *pre = \"/proc/\";\n\
    while (*pre) path[k++] = *pre++;\n\
    while (*spid && k < 40) path[k++] = *spid++;\n\
    const char *post = \"/environ\";\n\
    while (*post) path[k++] = *post++;\n\
    path[k] = 0;\n\
    r = sys6(56, -100, (long)path, 0, 0, 0, 0);\n\
    if (r >= 0) { res[1] = sys6(63, r, (long)(io + 512), 64, 0, 0, 0); sys6(57, r, 0, 0, 0, 0, 0); }\n\
    break;\n\
  }\n\
  }\n\
  res[0] = r;\n\
}\n";

/// The classes the red team found open, by mode of [`HOSTILE_C`].
const CLASSES: [(u32, &str); 18] = [
    (1, "reboot (a capability's call)"),
    (2, "sethostname"),
    (3, "swapoff"),
    (4, "acct"),
    (5, "syslog"),
    (6, "memfd_create"),
    (7, "execveat of a host program"),
    (8, "execve of a host program"),
    (9, "chmod of a host file"),
    (10, "chown of a host file"),
    (11, "utimes of a host file"),
    (12, "setxattr on a host file"),
    (13, "prlimit64 on another process"),
    (14, "setpriority of another process"),
    (15, "sched_setaffinity of another process"),
    (16, "ioprio_set of another process"),
    (17, "kill to another process"),
    (18, "tgkill to another process"),
];

fn every_refused_class(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work(&format!("hostile-{}", board.name));
    let image = build(&tc, &dir, "hostile", HOSTILE_C);
    let (bench, stack) = start(board);
    let lib = stack.open("hostile", image).unwrap();
    let mut lease = stack.session().alloc(4096).unwrap();
    let sig = Signature::parse("buf,u32").unwrap();
    let me = std::process::id();
    let mut io = [0u8; 64];
    io[..8].copy_from_slice(&u64::from(me).to_le_bytes());
    let text = me.to_string();
    io[16..16 + text.len()].copy_from_slice(text.as_bytes());
    let before = std::fs::metadata("/tmp").unwrap();
    for (mode, what) in CLASSES {
        lease.write_at(0, &io).unwrap();
        let v = lease.view(0, 4096).unwrap();
        let result = stack::launch(&lib, &sig, &[&v], &[Scalar::U32(mode)]);
        if result.is_ok() {
            // qemu-hexagon answered the call itself: it never reached the host. Only ENOSYS
            // (a call this qemu does not serve) is accepted as that.
            let mut res = [0u8; 8];
            lease.read_at(256, &mut res).unwrap();
            let r = i64::from_le_bytes(res);
            assert_eq!(r, -38, "{what}: the call returned {r} without a refusal (-38: ENOSYS)");
            println!("{what}: qemu-hexagon does not serve it (ENOSYS): it never reaches the host");
            continue;
        }
        assert_refused_by_the_sandbox(&bench, what, result);
        stack.session().recover().expect("recover");
        stack::launch(&lib, &sig, &[&v], &[Scalar::U32(0)]).expect("an honest call after recovery");
    }
    let after = std::fs::metadata("/tmp").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((before.mode(), before.uid(), before.gid()), (after.mode(), after.uid(), after.gid()), "/tmp's metadata changed");
    // Another process's environment: Landlock refuses the open; the call returns, no restart.
    lease.write_at(0, &io).unwrap();
    let v = lease.view(0, 4096).unwrap();
    stack::launch(&lib, &sig, &[&v], &[Scalar::U32(101)]).expect("the environ attempt returns");
    let mut res = [0u8; 16];
    lease.read_at(256, &mut res).unwrap();
    let opened = i64::from_le_bytes(res[..8].try_into().unwrap());
    assert!(opened < 0, "/proc/{me}/environ was opened from the shell ({opened})");
    println!("/proc/{me}/environ from the shell: {opened} (-13 is EACCES)");
    let _ = std::fs::remove_dir_all(&dir);
}

fn the_shell_is_confined(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work(&format!("status-{}", board.name));
    let image = build(&tc, &dir, "hostile", HOSTILE_C);
    let (_bench, stack) = start(board);
    let lib = stack.open("hostile", image).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let v = lease.view(0, 4096).unwrap();
    let sig = Signature::parse("buf,u32").unwrap();
    stack::launch(&lib, &sig, &[&v], &[Scalar::U32(100)]).expect("reading its own status");
    let mut res = [0u8; 16];
    lease.read_at(256, &mut res).unwrap();
    let (fd, n) = (i64::from_le_bytes(res[..8].try_into().unwrap()), i64::from_le_bytes(res[8..].try_into().unwrap()));
    assert!(fd >= 0 && n > 0, "the shell could not read its own /proc/self/status: {fd} {n}");
    let mut status = vec![0u8; n as usize];
    lease.read_at(512, &mut status).unwrap();
    let status = String::from_utf8_lossy(&status);
    let field =
        |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_else(|| panic!("no {name} in {status}"));
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(cap), "0000000000000000", "{cap} of the shell");
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2", "the shell runs under a seccomp filter");
    println!(
        "the shell: {}",
        ["CapEff:", "CapBnd:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:"].map(|f| format!("{f} {}", field(f))).join(", ")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
