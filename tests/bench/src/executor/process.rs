//! One executor: a qemu-hexagon process running the DSP shell built by [`build`](super::build)
//! (one per simulated DSP process), spoken to over its stdin (a UNIX socket, so buffers' memfds
//! can travel with a request) and stdout (a pipe) ([`super::wire`]):
//! it loads libraries, invokes their entries and unloads them.
//!
//! A reader thread turns the shell's stdout into messages on a channel, so every wait has a
//! bound ([`BenchConfig::executor_timeout`](crate::BenchConfig::executor_timeout)): a hung kernel
//! or constructor, a crashed or exited shell, or a protocol break ends the wait with an
//! [`ExecFailure`] and the process is killed. Every frame the shell sends carries the tag of the
//! request it serves ([`super::wire`]); a frame with another tag is a protocol break.
//!
//! # Lifetime of a shell
//!
//! A shell never outlives its use: [`ExecProcess::kill`] (through a pidfd, so it cannot hit a
//! reused pid, and without waiting for a call in flight) ends it when the DSP restarts, when its
//! DSP process ends (a close, a recovery, an abandoned call's process being torn down) and when
//! the last reference is dropped. It dies with the bench's process too: the child sets its
//! parent-death signal to SIGKILL before `exec`. That signal fires when the *thread* that forked
//! the child ends, so every shell is forked by one dedicated thread (`hexrpc-exec-spawn`) that
//! lives as long as the process; the child checks its parent once the signal is set (the bench
//! may have died in between) and refuses to start if it changed.
//!
//! Core dumps of a crashing guest are disabled (RLIMIT_CORE 0). The shell starts in a private,
//! empty directory (`hexrpc-exec-<pid>-<n>` under the temporary directory) which is removed as
//! soon as the shell runs in it, so nothing is left behind however the bench ends. The shell
//! runs confined ([`super::confine`]: a Landlock domain and a seccomp system-call filter).
//!
//! The shell can start nothing that would outlive it: its system-call filter kills it at its
//! first attempt to create a process (a `fork`, `vfork`, or `clone` without `CLONE_THREAD`),
//! so all it ever runs are threads of its own thread group, which the kernel ends with it when
//! it is killed. (The parent-death signal alone would not do: it is not inherited across
//! `fork`, and the pidfd reaches only the shell.) A shell killed by the filter ends with
//! `SIGSYS`, which [`ShellEnd`] reads as [`SANDBOX_REFUSAL`].

use std::io::{Read, Write};
use std::os::fd::BorrowedFd;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::confine;

use super::wire::{self, HandleArg, Response};

/// How a shell process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShellStatus {
    /// It exited with this status (the shell's own exits: 3 is a protocol break on its side).
    Exit(i32),
    /// It was ended by this signal: a guest fault, which qemu-hexagon re-raises on itself
    /// (`SIGSEGV`, `SIGBUS`, `SIGILL`, ...), the bench's `SIGKILL`, or `SIGSYS` from the
    /// sandbox's system-call filter ([`SANDBOX_REFUSAL`]).
    Signal(i32),
    /// Its status could not be read (the text says why).
    Unknown(String),
}

impl core::fmt::Display for ShellStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ShellStatus::Exit(c) => write!(f, "exit status {c}"),
            ShellStatus::Signal(s) => match signal_name(*s) {
                Some(n) => write!(f, "signal {s} ({n})"),
                None => write!(f, "signal {s}"),
            },
            ShellStatus::Unknown(why) => write!(f, "an unknown status ({why})"),
        }
    }
}

fn signal_name(s: i32) -> Option<&'static str> {
    Some(match s {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

/// What a shell's end by `SIGSYS` means: the executor's seccomp filter killed it at a system call
/// it refuses (a new process, a socket: [`super::confine`]). The kernel sends `SIGSYS` to the
/// whole shell before the call does anything; qemu-hexagon prints nothing.
///
/// The bench cannot tell it from a library that raises `SIGSYS` on itself (`kill`), which ends
/// qemu-hexagon with the same host signal and, since `SIGSYS` dumps no guest core, prints nothing
/// either; a library does that only on purpose.
pub const SANDBOX_REFUSAL: &str = "a host system call refused by the executor's sandbox (seccomp)";

/// Most bytes of the shell's last output kept in a [`ShellEnd`].
pub const LAST_OUTPUT: usize = 1024;

/// Bytes of the shell's stderr the bench keeps while it runs (the latest ones).
const STDERR_TAIL: usize = 4096;

/// How a shell ended and what it printed last on stderr (qemu-hexagon's own message for a
/// guest fault, e.g. `qemu: uncaught target signal 11 (Segmentation fault)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellEnd {
    /// Exit status or signal.
    pub status: ShellStatus,
    /// The end of its stderr, trimmed, at most [`LAST_OUTPUT`] bytes (empty if it printed
    /// nothing).
    pub last_output: String,
}

impl ShellEnd {
    /// Whether the shell was killed by the sandbox's system-call filter (it ended with
    /// `SIGSYS`; see [`SANDBOX_REFUSAL`]).
    pub fn refused_by_sandbox(&self) -> bool {
        self.status == ShellStatus::Signal(libc::SIGSYS)
    }
}

impl core::fmt::Display for ShellEnd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match (self.refused_by_sandbox(), self.last_output.is_empty()) {
            (true, true) => write!(f, "{}: {SANDBOX_REFUSAL}", self.status),
            (true, false) => write!(f, "{}: {SANDBOX_REFUSAL}; it printed: {}", self.status, self.last_output),
            (false, true) => write!(f, "{}", self.status),
            (false, false) => write!(f, "{}: {}", self.status, self.last_output),
        }
    }
}

/// The last `max` bytes of `s` (cut at a character boundary).
fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Why an executor call did not produce a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecFailure {
    /// qemu-hexagon could not be started.
    Spawn(String),
    /// No answer within the timeout (the process was killed).
    Hang,
    /// The process ended: how (exit status or signal) and what it printed last on stderr.
    Died(ShellEnd),
    /// The runtime broke the protocol.
    Protocol(String),
    /// The request does not fit the runtime's limits.
    TooLarge,
}

impl core::fmt::Display for ExecFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ExecFailure::Spawn(e) => write!(f, "cannot start qemu-hexagon: {e}"),
            ExecFailure::Hang => f.write_str("no answer within the executor timeout (killed)"),
            ExecFailure::Died(how) => write!(f, "the executor ended: {how}"),
            ExecFailure::Protocol(e) => write!(f, "protocol error: {e}"),
            ExecFailure::TooLarge => f.write_str("the request exceeds the runtime's limits"),
        }
    }
}

impl std::error::Error for ExecFailure {}

enum Msg {
    Hello(Result<(), String>),
    Frame(u32, wire::Message),
    Gone(String),
}

/// Answers a library's `fopen` during an invoke: 0 or the host file service's AEE code.
pub type FopenHandler<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> i32;

struct Io {
    child: Child,
    /// The shell's stdin: a UNIX stream socket, so memfds can travel with a request.
    stdin: UnixStream,
    rx: Receiver<Msg>,
}

/// What a test can see of an executor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Invokes answered.
    pub invokes: u64,
    /// Every `HAP_power_set` request, in order (accepted, no effect).
    pub power_requests: Vec<wire::PowerSetRecord>,
    /// Mappings live in the shell after the last invoke (leaks stay here).
    pub live_mappings: u32,
    /// Libraries loaded in the shell now.
    pub libraries: u32,
    /// How the process ended, once it has.
    pub ended: Option<ShellEnd>,
}

/// A running executor (killed when dropped).
pub struct ExecProcess {
    pid: u32,
    pidfd: Option<OwnedFd>,
    key: u64,
    seq: AtomicU32,
    killed: std::sync::atomic::AtomicBool,
    io: Mutex<Option<Io>>,
    stderr: Arc<Mutex<String>>,
    stats: Mutex<ExecStats>,
}

/// A new private directory for one shell to start in (removed once the shell runs in it).
fn temp_dir() -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("hexrpc-exec-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

type SpawnRequest = (Command, Sender<std::io::Result<Child>>);

/// Forks `cmd` on the process's one spawning thread (see the module's "Lifetime of a shell").
///
/// A child forked after the thread started has no such thread (only the forking thread comes
/// along), so a request sent there would wait forever: each fork generation starts its own, and a
/// child never touches its parent's (a spawner replaced in a child is leaked, once per fork).
fn spawn_from_long_lived_thread(cmd: Command) -> std::io::Result<Child> {
    struct Spawner {
        tx: Option<Mutex<Sender<SpawnRequest>>>,
        forks: Option<i32>,
    }
    static CURRENT: std::sync::atomic::AtomicPtr<Spawner> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    let forks = hexrpc_drivers::fork_generation();
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: a non-null pointer in CURRENT is a leaked `Box<Spawner>`, never freed.
    let spawner: &'static Spawner = match unsafe { p.as_ref() } {
        Some(s) if s.forks == forks => s,
        _ => {
            let (tx, rx) = mpsc::channel::<SpawnRequest>();
            let started = std::thread::Builder::new().name("hexrpc-exec-spawn".into()).spawn(move || {
                for (mut cmd, back) in rx {
                    let _ = back.send(cmd.spawn());
                }
            });
            let fresh = Box::into_raw(Box::new(Spawner { tx: started.ok().map(|_| Mutex::new(tx)), forks }));
            match CURRENT.compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire) {
                // SAFETY: `fresh` is now the leaked `Box<Spawner>` in CURRENT, never freed.
                Ok(_) => unsafe { &*fresh },
                Err(other) => {
                    // Another thread of this generation started one first: ours is dropped (its
                    // thread ends with its sender).
                    // SAFETY: `fresh` came from `Box::into_raw` above and was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    // SAFETY: as above, a leaked `Box<Spawner>` in CURRENT.
                    unsafe { &*other }
                }
            }
        }
    };
    let Some(spawner) = &spawner.tx else {
        return Err(std::io::Error::other("the executor's spawning thread could not be started"));
    };
    let (back, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, back))
        .map_err(|_| std::io::Error::other("the executor's spawning thread ended"))?;
    answer.recv().map_err(|_| std::io::Error::other("the executor's spawning thread ended"))?
}

/// One sandbox of the shell ([`confine`]), or `None` where it is unavailable and
/// [`confine::UNCONFINED_ENV`] allows running without it; else the spawn's refusal.
fn sandbox<T>(what: &str, made: Result<T, String>) -> Result<Option<T>, ExecFailure> {
    match made {
        Ok(t) => Ok(Some(t)),
        Err(e) if confine::unconfined_allowed() => {
            log::warn!("executor: {e}; running libraries without {what} ({}=1)", confine::UNCONFINED_ENV);
            Ok(None)
        }
        Err(e) => Err(ExecFailure::Spawn(format!(
            "the DSP shell cannot be confined: {e}; libraries are untrusted code and are not run unconfined \
             unless {}=1",
            confine::UNCONFINED_ENV
        ))),
    }
}

/// A random key per shell for the request tags.
fn random_key() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish()
}

fn describe(child: &mut Child, stderr: &Mutex<String>) -> ShellEnd {
    let status = match child.try_wait() {
        Ok(Some(s)) => Ok(s),
        _ => {
            let _ = child.kill();
            child.wait()
        }
    };
    use std::os::unix::process::ExitStatusExt;
    let status = match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ShellStatus::Exit(c),
            (None, Some(s)) => ShellStatus::Signal(s),
            _ => ShellStatus::Unknown("neither an exit status nor a signal".into()),
        },
        Err(e) => ShellStatus::Unknown(format!("wait failed: {e}")),
    };
    // Give the stderr thread a moment to drain what qemu printed before it died.
    std::thread::sleep(Duration::from_millis(5));
    let last_output = stderr.lock().map(|s| tail(s.trim(), LAST_OUTPUT).to_string()).unwrap_or_default();
    ShellEnd { status, last_output }
}

impl ExecProcess {
    /// Starts `qemu` on the shell executable at `shell` and waits (at most `timeout`) for its
    /// greeting.
    ///
    /// The shell runs confined ([`confine`]: Landlock and the system-call filter); on a kernel
    /// without Landlock or without seccomp filters this fails unless [`confine::UNCONFINED_ENV`]
    /// is `1`.
    pub fn spawn(qemu: &str, shell: &std::path::Path, timeout: Duration) -> Result<ExecProcess, ExecFailure> {
        let ruleset = sandbox("Landlock", confine::Ruleset::for_shell(std::path::Path::new(qemu), shell))?;
        let exec = confine::ShellExec::new(std::path::Path::new(qemu), shell).map_err(ExecFailure::Spawn)?;
        let filter = sandbox("the system-call filter", confine::Filter::for_shell(exec))?;
        let dir = temp_dir().map_err(|e| ExecFailure::Spawn(e.to_string()))?;
        let started = Self::start(qemu, shell, &dir, ruleset.as_ref(), filter, timeout);
        // The shell (if it started) runs in the directory already; nothing needs it any more.
        let _ = std::fs::remove_dir(&dir);
        started
    }

    fn start(
        qemu: &str,
        path: &std::path::Path,
        dir: &std::path::Path,
        ruleset: Option<&confine::Ruleset>,
        filter: Option<confine::Filter>,
        timeout: Duration,
    ) -> Result<ExecProcess, ExecFailure> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(qemu);
        let (stdin, theirs) = UnixStream::pair().map_err(|e| ExecFailure::Spawn(format!("socketpair: {e}")))?;
        cmd.arg(path).current_dir(dir).stdin(Stdio::from(OwnedFd::from(theirs))).stdout(Stdio::piped()).stderr(Stdio::piped());
        let parent = rustix::process::getpid();
        let ruleset = ruleset.map(confine::Ruleset::raw);
        let mut filter = filter;
        // SAFETY: the closure runs in the forked child before exec and only makes raw system
        // calls (setrlimit, prctl, getppid, unshare, capset, open, landlock, seccomp, execve:
        // async-signal-safe, no allocation, no lock). The ruleset descriptor stays open in the
        // bench until `spawn` has returned; the filter (its programs and the exec's path and
        // arguments) was made before the fork and is the child's copy.
        unsafe {
            cmd.pre_exec(move || {
                let zero = rustix::process::Rlimit { current: Some(0), maximum: Some(0) };
                let _ = rustix::process::setrlimit(rustix::process::Resource::Core, zero);
                rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
                if rustix::process::getppid() != Some(parent) {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                // New namespaces where the host allows them (see `NAMESPACE_TRIES`), then no
                // capability at all, in any namespace.
                let _ = confine::enter_namespaces();
                confine::drop_capabilities()?;
                if let Some(fd) = ruleset {
                    confine::allow_own_proc(fd)?;
                    confine::apply(fd)?;
                }
                // Last: the filter, then the one exec it allows (returns only on a failure).
                // Without it (HEXRPC_EXEC_UNCONFINED=1), Command's own exec follows.
                if let Some(filter) = filter.as_mut() {
                    return Err(filter.install_and_exec());
                }
                Ok(())
            });
        }
        let mut child = spawn_from_long_lived_thread(cmd).map_err(|e| ExecFailure::Spawn(format!("{qemu}: {e}")))?;
        let pid = child.id();
        // The child is not reaped before `child.wait()`, so its pid names it here.
        let pidfd = open_pidfd(pid);
        let (stdout, stderr_pipe) = match (child.stdout.take(), child.stderr.take()) {
            (Some(o), Some(e)) => (o, e),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ExecFailure::Spawn("pipes missing".into()));
            }
        };
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let spawned = std::thread::Builder::new().name("hexrpc-exec-err".into()).spawn(move || {
            let mut pipe = stderr_pipe;
            let mut buf = [0u8; 1024];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = sink.lock() {
                    // Keep the latest bytes: what qemu printed last is what explains an end.
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 2 * STDERR_TAIL {
                        let keep = tail(&s, STDERR_TAIL).len();
                        let cut = s.len() - keep;
                        s.drain(..cut);
                    }
                }
            }
        });
        let (tx, rx) = mpsc::channel();
        let reader = spawned.and_then(|_| {
            std::thread::Builder::new().name("hexrpc-exec-out".into()).spawn(move || {
                let mut out = std::io::BufReader::new(stdout);
                let mut hello = [0u8; 16];
                let greeting = match out.read_exact(&mut hello) {
                    Ok(()) => {
                        let w = |i: usize| u32::from_le_bytes([hello[4 * i], hello[4 * i + 1], hello[4 * i + 2], hello[4 * i + 3]]);
                        if w(0) == wire::HELLO_MAGIC && w(1) == wire::PROTOCOL && w(2) as usize == wire::ARENA {
                            Ok(())
                        } else {
                            Err(format!("unexpected greeting {:08x} {} {}", w(0), w(1), w(2)))
                        }
                    }
                    Err(e) => Err(format!("no greeting: {e}")),
                };
                let ok = greeting.is_ok();
                if tx.send(Msg::Hello(greeting)).is_err() || !ok {
                    return;
                }
                loop {
                    match wire::read_tagged(&mut out) {
                        Ok(t) => {
                            if tx.send(Msg::Frame(t.tag, t.message)).is_err() {
                                return;
                            }
                        }
                        Err(wire::ReadError::Io(e)) => {
                            let _ = tx.send(Msg::Gone(format!("pipe: {e}")));
                            return;
                        }
                        Err(wire::ReadError::Wire(e)) => {
                            let _ = tx.send(Msg::Gone(format!("malformed response: {e:?}")));
                            return;
                        }
                    }
                }
            })
        });
        if let Err(e) = reader {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecFailure::Spawn(format!("thread: {e}")));
        }
        match rx.recv_timeout(timeout) {
            Ok(Msg::Hello(Ok(()))) => {}
            Ok(Msg::Hello(Err(e))) | Ok(Msg::Gone(e)) => {
                let how = describe(&mut child, &stderr);
                return Err(ExecFailure::Spawn(format!("{e} ({how})")));
            }
            Ok(Msg::Frame(..)) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ExecFailure::Protocol("response before greeting".into()));
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ExecFailure::Spawn("no greeting within the timeout".into()));
            }
        }
        Ok(ExecProcess {
            pid,
            pidfd,
            key: random_key(),
            seq: AtomicU32::new(0),
            killed: std::sync::atomic::AtomicBool::new(false),
            io: Mutex::new(Some(Io { child, stdin, rx })),
            stderr,
            stats: Mutex::new(ExecStats::default()),
        })
    }

    /// Ends the shell now (SIGKILL through its pidfd), even while a call is in flight: that
    /// call's wait then ends as a death. Harmless once the shell has ended.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        match &self.pidfd {
            Some(fd) => kill_through(fd),
            None => {
                // No pidfd (an old kernel): kill only when no call holds the process, so the
                // pid cannot have been reaped and reused.
                if let Ok(mut io) = self.io.try_lock() {
                    if let Some(io) = io.as_mut() {
                        let _ = io.child.kill();
                    }
                }
            }
        }
    }

    /// Whether [`kill`](Self::kill) ended (or is ending) the shell: a call that fails then
    /// failed because its process was torn down, not because the DSP crashed.
    pub fn was_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// The tag of the next request.
    fn next_tag(&self) -> u32 {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        ((self.key ^ u64::from(seq)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
    }

    /// The host pid of the qemu-hexagon process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A copy of the statistics.
    pub fn stats(&self) -> ExecStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// True while the process has not failed or been stopped.
    pub fn is_alive(&self) -> bool {
        self.io.lock().map(|io| io.is_some()).unwrap_or(false)
    }

    /// Ends the process (if it still runs) and records how it ended; returns `failure`, or the
    /// way it ended when `failure` is `None` (it died).
    fn end(&self, io: &mut Option<Io>, failure: Option<ExecFailure>) -> ExecFailure {
        let how = match io.take() {
            Some(mut dead) => {
                let how = describe(&mut dead.child, &self.stderr);
                if let Ok(mut s) = self.stats.lock() {
                    s.ended = Some(how.clone());
                }
                how
            }
            None => self.ended(),
        };
        failure.unwrap_or(ExecFailure::Died(how))
    }

    /// How the process ended, as recorded (a shell stopped without a record: unknown).
    fn ended(&self) -> ShellEnd {
        self.stats().ended.unwrap_or(ShellEnd { status: ShellStatus::Unknown("stopped".into()), last_output: String::new() })
    }

    /// Sends `msg` and waits (at most `timeout`) for the next message; a library's `fopen` on the
    /// way is answered through `fopen` (a load or close answers it with `AEE_EUNSUPPORTED`).
    fn exchange(&self, tag: u32, msg: &[u8], timeout: Duration) -> Result<wire::Message, ExecFailure> {
        self.exchange_serving(tag, msg, &[], timeout, &mut |_, _| hexrpc_drivers::aee::AEE_EUNSUPPORTED)
    }

    /// Sends `msg` (whose tag is `tag`) and waits for the answer; any frame with another tag is
    /// a protocol break.
    fn exchange_serving(
        &self,
        tag: u32,
        msg: &[u8],
        files: &[BorrowedFd<'_>],
        timeout: Duration,
        fopen: FopenHandler<'_>,
    ) -> Result<wire::Message, ExecFailure> {
        let mut guard = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let Some(io) = guard.as_mut() else {
            return Err(ExecFailure::Died(self.ended()));
        };
        if send_with_files(&mut io.stdin, msg, files).is_err() {
            return Err(self.end(&mut guard, None));
        }
        // A limit too far away to be a point in time waits without one.
        let deadline = std::time::Instant::now().checked_add(timeout);
        let mut next = io.rx.recv_timeout(timeout);
        loop {
            match &next {
                Ok(Msg::Frame(t, _)) if *t != tag => {
                    let what = format!("a frame tagged {t:08x} while serving request {tag:08x} (forged or out of step)");
                    return Err(self.end(&mut guard, Some(ExecFailure::Protocol(what))));
                }
                Ok(Msg::Frame(_, wire::Message::Fopen { path, mode })) => {
                    let status = fopen(path, mode);
                    if io.stdin.write_all(&wire::encode_fopen_answer(status)).and_then(|_| io.stdin.flush()).is_err() {
                        return Err(self.end(&mut guard, None));
                    }
                    let left = deadline.map_or(timeout, |d| d.saturating_duration_since(std::time::Instant::now()));
                    next = io.rx.recv_timeout(left);
                }
                _ => break,
            }
        }
        match next {
            Ok(Msg::Frame(_, m)) => Ok(m),
            Ok(Msg::Gone(_)) | Err(RecvTimeoutError::Disconnected) => Err(self.end(&mut guard, None)),
            Ok(Msg::Hello(_)) => Err(self.end(&mut guard, Some(ExecFailure::Protocol("second greeting".into())))),
            Err(RecvTimeoutError::Timeout) => Err(self.end(&mut guard, Some(ExecFailure::Hang))),
        }
    }

    /// Loads a library (its bytes as the DSP fetched them) and looks up `symbol`. The answer's
    /// status is 0 and its `lib` the id, or an AEE code with the loader's reason.
    pub fn load(&self, symbol: &str, image: &[u8], timeout: Duration) -> Result<wire::LoadAnswer, ExecFailure> {
        let tag = self.next_tag();
        let msg = wire::encode_load(tag, symbol, image).map_err(|_| ExecFailure::TooLarge)?;
        match self.exchange(tag, &msg, timeout)? {
            wire::Message::Load(a) => {
                if a.status == 0 {
                    if let Ok(mut s) = self.stats.lock() {
                        s.libraries += 1;
                    }
                }
                Ok(a)
            }
            _ => Err(self.fail_protocol("an invoke answer to a load")),
        }
    }

    /// Unloads library `lib` (its destructors run).
    pub fn close(&self, lib: u32, timeout: Duration) -> Result<wire::LoadAnswer, ExecFailure> {
        let tag = self.next_tag();
        match self.exchange(tag, &wire::encode_close(tag, lib), timeout)? {
            wire::Message::Load(a) => {
                if a.status == 0 {
                    if let Ok(mut s) = self.stats.lock() {
                        s.libraries = s.libraries.saturating_sub(1);
                    }
                }
                Ok(a)
            }
            _ => Err(self.fail_protocol("an invoke answer to a close")),
        }
    }

    fn fail_protocol(&self, what: &str) -> ExecFailure {
        let mut guard = self.io.lock().unwrap_or_else(|e| e.into_inner());
        self.end(&mut guard, Some(ExecFailure::Protocol(what.into())))
    }

    /// Runs one invoke of library `lib`: `bufs` are the in-buffers then the out-buffers (their
    /// current bytes), `handles` the handle arguments and `files` the memfds of those whose
    /// `passed` is set, in order; `fopen` answers the library's `fopen`s while it runs. One
    /// message at a time per process.
    // The request's own fields, its deadline and the service of its fopens.
    #[allow(clippy::too_many_arguments)]
    pub fn invoke(
        &self,
        lib: u32,
        sc: u32,
        handle: u32,
        bufs: &[&[u8]],
        handles: &[HandleArg],
        files: &[BorrowedFd<'_>],
        timeout: Duration,
        fopen: FopenHandler<'_>,
    ) -> Result<Response, ExecFailure> {
        if files.len() != handles.iter().filter(|h| h.passed).count() {
            return Err(ExecFailure::TooLarge);
        }
        let tag = self.next_tag();
        let msg = wire::encode_request(tag, lib, sc, handle, bufs, handles).map_err(|_| ExecFailure::TooLarge)?;
        match self.exchange_serving(tag, &msg, files, timeout, fopen)? {
            wire::Message::Invoke(r) => {
                if let Ok(mut s) = self.stats.lock() {
                    s.invokes += 1;
                    s.live_mappings = r.live_mappings;
                    for e in &r.events {
                        if let wire::HapEvent::Power(p) = e {
                            s.power_requests.push(*p);
                        }
                    }
                }
                Ok(r)
            }
            _ => Err(self.fail_protocol("a load answer to an invoke")),
        }
    }
}

/// Writes `msg` to the shell, with `files` attached to its first bytes.
fn send_with_files(sock: &mut UnixStream, msg: &[u8], files: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut sent = 0;
    if !files.is_empty() {
        let mut space = vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(files.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(files)) {
            return Err(std::io::Error::other("ancillary buffer too small"));
        }
        sent = sendmsg(&*sock, &[std::io::IoSlice::new(msg)], &mut control, SendFlags::NOSIGNAL)?;
        if sent == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
    }
    sock.write_all(&msg[sent..])?;
    sock.flush()
}

impl Drop for ExecProcess {
    fn drop(&mut self) {
        let io = self.io.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut io) = io {
            // Ask politely, then make sure: the runtime exits at once on OP_QUIT.
            let _ = io.stdin.write_all(&wire::encode_quit());
            drop(io.stdin);
            for _ in 0..20 {
                if matches!(io.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Err(e) = io.child.kill() {
                log::warn!("executor: killing qemu-hexagon {} failed: {e}", self.pid);
            }
            let _ = io.child.wait();
        }
    }
}

/// A pidfd for the (not yet reaped) child `pid`, where the OS has them (Linux); elsewhere, or on
/// a kernel without `pidfd_open`, `None`, and [`ExecProcess::kill`] falls back to a plain kill.
#[cfg(target_os = "linux")]
fn open_pidfd(pid: u32) -> Option<OwnedFd> {
    rustix::process::Pid::from_raw(pid as i32).and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
}

#[cfg(not(target_os = "linux"))]
fn open_pidfd(_pid: u32) -> Option<OwnedFd> {
    None
}

/// SIGKILL through a pidfd.
#[cfg(target_os = "linux")]
fn kill_through(fd: &OwnedFd) {
    let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
}

#[cfg(not(target_os = "linux"))]
fn kill_through(_fd: &OwnedFd) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_last_bytes_at_a_character_boundary() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("ab", 3), "ab");
        // "é" is two bytes: a cut inside it moves past it.
        assert_eq!(tail("xé1", 2), "1");
        assert_eq!(tail("xé1", 3), "é1");
    }

    #[test]
    fn ends_read_as_a_status_and_the_last_output() {
        let end = ShellEnd { status: ShellStatus::Signal(libc::SIGBUS), last_output: String::new() };
        assert_eq!(end.to_string(), "signal 7 (SIGBUS)");
        let end = ShellEnd { status: ShellStatus::Exit(3), last_output: "hrx: protocol".into() };
        assert_eq!(end.to_string(), "exit status 3: hrx: protocol");
        assert_eq!(ShellStatus::Signal(64).to_string(), "signal 64");
        // The sandbox's filter kills with SIGSYS: the end names it.
        let end = ShellEnd { status: ShellStatus::Signal(libc::SIGSYS), last_output: String::new() };
        assert!(end.refused_by_sandbox());
        assert_eq!(end.to_string(), format!("signal {} (SIGSYS): {SANDBOX_REFUSAL}", libc::SIGSYS));
        assert!(end.to_string().contains("a host system call refused by the executor's sandbox (seccomp)"));
        let end = ShellEnd { status: ShellStatus::Signal(libc::SIGSYS), last_output: "x".into() };
        assert_eq!(end.to_string(), format!("signal {} (SIGSYS): {SANDBOX_REFUSAL}; it printed: x", libc::SIGSYS));
        assert!(!ShellEnd { status: ShellStatus::Signal(libc::SIGSEGV), last_output: String::new() }.refused_by_sandbox());
    }
}
