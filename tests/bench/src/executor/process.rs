//! One executor: a qemu-hexagon process running the DSP shell built by [`build`](super::build)
//! (one per simulated DSP process), spoken to over its stdin/stdout pipes ([`super::wire`]):
//! it loads libraries, invokes their entries and unloads them.
//!
//! A reader thread turns the shell's stdout into messages on a channel, so every wait has a
//! bound ([`BenchConfig::executor_timeout`](crate::BenchConfig::executor_timeout)): a hung kernel
//! or constructor, a crashed or exited shell, or a protocol break ends the wait with an
//! [`ExecFailure`] and the process is killed (by its own pid, through
//! [`std::process::Child::kill`]). Core dumps of a crashing guest are disabled (RLIMIT_CORE 0) and
//! the process runs in a private temporary directory.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::wire::{self, HandleArg, Response};

/// Why an executor call did not produce a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecFailure {
    /// qemu-hexagon could not be started.
    Spawn(String),
    /// No answer within the timeout (the process was killed).
    Hang,
    /// The process ended: how (exit status or signal) and what it printed on stderr.
    Died(String),
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
    Response(Response),
    Load(wire::LoadAnswer),
    Fopen(Vec<u8>, Vec<u8>),
    Gone(String),
}

/// Answers a library's `fopen` during an invoke: 0 or the host file service's AEE code.
pub type FopenHandler<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> i32;

struct Io {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Msg>,
}

/// What a test can see of an executor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Invokes answered.
    pub invokes: u64,
    /// Request types of every `HAP_power_set` call (accepted, no effect).
    pub power_requests: Vec<u32>,
    /// Mappings live in the shell after the last invoke (leaks stay here).
    pub live_mappings: u32,
    /// Libraries loaded in the shell now.
    pub libraries: u32,
    /// How the process ended, once it has.
    pub ended: Option<String>,
}

/// A running executor (killed when dropped).
pub struct ExecProcess {
    pid: u32,
    io: Mutex<Option<Io>>,
    stderr: Arc<Mutex<String>>,
    stats: Mutex<ExecStats>,
}

fn temp_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("hexrpc-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn describe(child: &mut Child, stderr: &Mutex<String>) -> String {
    let status = match child.try_wait() {
        Ok(Some(s)) => s,
        _ => {
            let _ = child.kill();
            match child.wait() {
                Ok(s) => s,
                Err(e) => return format!("wait failed: {e}"),
            }
        }
    };
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".to_string(),
    };
    // Give the stderr thread a moment to drain what qemu printed before it died.
    std::thread::sleep(Duration::from_millis(5));
    let err = stderr.lock().map(|s| s.trim().to_string()).unwrap_or_default();
    if err.is_empty() {
        how
    } else {
        format!("{how}: {err}")
    }
}

impl ExecProcess {
    /// Starts `qemu` on the shell executable at `shell` and waits (at most `timeout`) for its
    /// greeting.
    pub fn spawn(qemu: &str, shell: &std::path::Path, timeout: Duration) -> Result<ExecProcess, ExecFailure> {
        let dir = temp_dir().map_err(|e| ExecFailure::Spawn(e.to_string()))?;
        Self::start(qemu, shell, &dir, timeout)
    }

    fn start(qemu: &str, path: &std::path::Path, dir: &std::path::Path, timeout: Duration) -> Result<ExecProcess, ExecFailure> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(qemu);
        cmd.arg(path).current_dir(dir).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // SAFETY: the closure runs in the forked child before exec and only makes one raw
        // setrlimit system call (async-signal-safe, no allocation, no lock).
        unsafe {
            cmd.pre_exec(|| {
                let zero = rustix::process::Rlimit { current: Some(0), maximum: Some(0) };
                let _ = rustix::process::setrlimit(rustix::process::Resource::Core, zero);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| ExecFailure::Spawn(format!("{qemu}: {e}")))?;
        let pid = child.id();
        let (stdin, stdout, stderr_pipe) = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
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
                    if s.len() < 4096 {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
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
                    match wire::read_message(&mut out) {
                        Ok(m) => {
                            let msg = match m {
                                wire::Message::Invoke(r) => Msg::Response(r),
                                wire::Message::Load(a) => Msg::Load(a),
                                wire::Message::Fopen { path, mode } => Msg::Fopen(path, mode),
                            };
                            if tx.send(msg).is_err() {
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
            Ok(Msg::Response(_) | Msg::Load(_) | Msg::Fopen(..)) => {
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
        Ok(ExecProcess { pid, io: Mutex::new(Some(Io { child, stdin, rx })), stderr, stats: Mutex::new(ExecStats::default()) })
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

    fn end(&self, io: &mut Option<Io>, failure: ExecFailure) -> ExecFailure {
        if let Some(mut dead) = io.take() {
            let how = describe(&mut dead.child, &self.stderr);
            if let Ok(mut s) = self.stats.lock() {
                s.ended = Some(how.clone());
            }
            if let ExecFailure::Died(_) = failure {
                return ExecFailure::Died(how);
            }
        }
        failure
    }

    /// Sends `msg` and waits (at most `timeout`) for the next message; a library's `fopen` on the
    /// way is answered through `fopen` (a load or close answers it with `AEE_EUNSUPPORTED`).
    fn exchange(&self, msg: &[u8], timeout: Duration) -> Result<Msg, ExecFailure> {
        self.exchange_serving(msg, timeout, &mut |_, _| hexrpc_drivers::aee::AEE_EUNSUPPORTED)
    }

    fn exchange_serving(&self, msg: &[u8], timeout: Duration, fopen: FopenHandler<'_>) -> Result<Msg, ExecFailure> {
        let mut guard = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let Some(io) = guard.as_mut() else {
            return Err(ExecFailure::Died(self.stats().ended.unwrap_or_else(|| "stopped".into())));
        };
        if io.stdin.write_all(msg).and_then(|_| io.stdin.flush()).is_err() {
            return Err(self.end(&mut guard, ExecFailure::Died(String::new())));
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut next = io.rx.recv_timeout(timeout);
        while let Ok(Msg::Fopen(path, mode)) = &next {
            let status = fopen(path, mode);
            if io.stdin.write_all(&wire::encode_fopen_answer(status)).and_then(|_| io.stdin.flush()).is_err() {
                return Err(self.end(&mut guard, ExecFailure::Died(String::new())));
            }
            next = io.rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()));
        }
        match next {
            Ok(Msg::Fopen(..)) => unreachable!("answered in the loop above"),
            Ok(m @ (Msg::Response(_) | Msg::Load(_))) => Ok(m),
            Ok(Msg::Gone(_)) | Err(RecvTimeoutError::Disconnected) => Err(self.end(&mut guard, ExecFailure::Died(String::new()))),
            Ok(Msg::Hello(_)) => Err(self.end(&mut guard, ExecFailure::Protocol("second greeting".into()))),
            Err(RecvTimeoutError::Timeout) => Err(self.end(&mut guard, ExecFailure::Hang)),
        }
    }

    /// Loads a library (its bytes as the DSP fetched them) and looks up `symbol`. The answer's
    /// status is 0 and its `lib` the id, or an AEE code with the loader's reason.
    pub fn load(&self, symbol: &str, image: &[u8], timeout: Duration) -> Result<wire::LoadAnswer, ExecFailure> {
        let msg = wire::encode_load(symbol, image).map_err(|_| ExecFailure::TooLarge)?;
        match self.exchange(&msg, timeout)? {
            Msg::Load(a) => {
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
        match self.exchange(&wire::encode_close(lib), timeout)? {
            Msg::Load(a) => {
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
        self.end(&mut guard, ExecFailure::Protocol(what.into()))
    }

    /// Runs one invoke of library `lib`: `bufs` are the in-buffers then the out-buffers (their
    /// current bytes), `handles` the handle arguments; `fopen` answers the library's `fopen`s
    /// while it runs. One message at a time per process.
    // The request's own fields, its deadline and the service of its fopens.
    #[allow(clippy::too_many_arguments)]
    pub fn invoke(
        &self,
        lib: u32,
        sc: u32,
        handle: u32,
        bufs: &[&[u8]],
        handles: &[HandleArg],
        timeout: Duration,
        fopen: FopenHandler<'_>,
    ) -> Result<Response, ExecFailure> {
        let msg = wire::encode_request(lib, sc, handle, bufs, handles).map_err(|_| ExecFailure::TooLarge)?;
        match self.exchange_serving(&msg, timeout, fopen)? {
            Msg::Response(r) => {
                if let Ok(mut s) = self.stats.lock() {
                    s.invokes += 1;
                    s.live_mappings = r.live_mappings;
                    for e in &r.events {
                        if let wire::HapEvent::Power { request_type } = e {
                            s.power_requests.push(*request_type);
                        }
                    }
                }
                Ok(r)
            }
            _ => Err(self.fail_protocol("a load answer to an invoke")),
        }
    }
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
