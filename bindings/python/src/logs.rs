//! hexrpc's Rust logs in Python's `logging`.
//!
//! The Rust crates log through the `log` facade (the bench's executor says there why a DSP
//! process ended, the HAL why a recovery ran, the reverse service what it refused). This module
//! installs a `log` logger that queues each record, and two ways move the queue into Python:
//!
//! * [`flush`], called before an exception is raised to Python, after the calls that make
//!   records (launches, runs, recoveries, opens) when any are queued, and by
//!   `hexrpc.flush_logs()`, so the records that explain an error are already in `logging` when
//!   the caller catches it;
//! * a daemon thread of the package (`hexrpc/__init__.py`) that calls `flush_logs()` a few times a
//!   second, so a record made on a Rust thread while Python waits elsewhere arrives too. It is a
//!   Python thread sleeping in Python code: interpreter shutdown stops it safely.
//!
//! A record is emitted on the logger `hexrpc.<crate>.<module>` (`hexrpc_bench::executor` →
//! `hexrpc.bench.executor`), a child of the logger `hexrpc`, at the matching `logging` level
//! (trace → 5, debug → 10, info → 20, warn → 30, error → 40), so `logging` configuration
//! decides what is shown. Which records are made at all is `log`'s maximum level: from the
//! environment variable `HEXRPC_LOG` (`off`, `error`, `warn`, `info`, `debug`, `trace`) when the
//! module loads, default `info`; `hexrpc.set_log_level(name)` changes it.
//!
//! No lock is held while Python code runs, and the logger never waits for the GIL (a Rust
//! thread that logs while another thread holds the GIL and waits for that Rust thread cannot
//! deadlock). The queue is bounded ([`CAPACITY`] records): when Python does not drain it, the
//! oldest records are dropped and counted, and the next emitted record says how many.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;

use crate::lock;

/// Records kept while nobody drains them.
pub const CAPACITY: usize = 4096;

struct Rec {
    level: log::Level,
    target: String,
    message: String,
}

#[derive(Default)]
struct Queue {
    recs: VecDeque<Rec>,
    dropped: u64,
}

/// Set when a record is queued, cleared when the queue is taken: a flush with nothing queued
/// costs one atomic load.
static PENDING: AtomicBool = AtomicBool::new(false);

fn queue() -> &'static Mutex<Queue> {
    static Q: OnceLock<Mutex<Queue>> = OnceLock::new();
    Q.get_or_init(|| Mutex::new(Queue::default()))
}

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let rec = Rec { level: r.level(), target: r.target().to_string(), message: r.args().to_string() };
        let mut q = lock(queue());
        if q.recs.len() == CAPACITY {
            q.recs.pop_front();
            q.dropped += 1;
        }
        q.recs.push_back(rec);
        PENDING.store(true, Ordering::Release);
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

/// `log`'s level filter named `name` (`off` … `trace`, any case).
pub fn parse_level(name: &str) -> Option<log::LevelFilter> {
    name.trim().parse().ok()
}

/// Installs the bridge as `log`'s logger (once per process; another logger already installed
/// by an embedding program is left in place) with the level from `HEXRPC_LOG`. An unknown
/// `HEXRPC_LOG` keeps the default and is returned as a message for a Python warning.
pub fn install() -> Option<String> {
    if log::set_logger(&LOGGER).is_err() {
        return None;
    }
    let (level, bad) = match std::env::var("HEXRPC_LOG") {
        Err(_) => (log::LevelFilter::Info, None),
        Ok(v) => match parse_level(&v) {
            Some(l) => (l, None),
            None => (
                log::LevelFilter::Info,
                Some(format!("HEXRPC_LOG={v:?} is not a log level (off, error, warn, info, debug, trace); using info")),
            ),
        },
    };
    log::set_max_level(level);
    bad
}

/// The Python logger name of a Rust log target: `hexrpc_bench::executor` → `hexrpc.bench.executor`,
/// `hexrpc` → `hexrpc`, another crate's `foo::bar` → `hexrpc.foo.bar`.
pub fn logger_name(target: &str) -> String {
    let dotted = target.replace("::", ".");
    match dotted.strip_prefix("hexrpc_") {
        Some(rest) => format!("hexrpc.{rest}"),
        None if dotted == "hexrpc" || dotted.starts_with("hexrpc.") => dotted,
        None => format!("hexrpc.{dotted}"),
    }
}

fn py_level(l: log::Level) -> u32 {
    match l {
        log::Level::Error => 40,
        log::Level::Warn => 30,
        log::Level::Info => 20,
        log::Level::Debug => 10,
        log::Level::Trace => 5,
    }
}

/// Takes what is queued (and how many were dropped since the last take).
fn take() -> (Vec<Rec>, u64) {
    let mut q = lock(queue());
    PENDING.store(false, Ordering::Release);
    let dropped = std::mem::take(&mut q.dropped);
    (q.recs.drain(..).collect(), dropped)
}

/// Emits `recs` on Python's `logging` (the GIL is held; no lock of ours is).
fn emit(py: Python<'_>, recs: Vec<Rec>, dropped: u64) -> PyResult<()> {
    if recs.is_empty() && dropped == 0 {
        return Ok(());
    }
    let logging = py.import("logging")?;
    if dropped > 0 {
        let root = logging.call_method1("getLogger", ("hexrpc",))?;
        root.call_method1("log", (30u32, format!("{dropped} hexrpc log records were dropped (nobody read them in time)")))?;
    }
    for r in recs {
        let logger = logging.call_method1("getLogger", (logger_name(&r.target),))?;
        logger.call_method1("log", (py_level(r.level), "%s", r.message))?;
    }
    Ok(())
}

/// Moves every queued record into Python's `logging` now. A failure of Python's logging (a
/// broken handler) is reported by Python's own rules and does not stop the caller.
pub fn flush(py: Python<'_>) {
    if !PENDING.load(Ordering::Acquire) {
        return;
    }
    let (recs, dropped) = take();
    if let Err(e) = emit(py, recs, dropped) {
        e.write_unraisable(py, None);
    }
}

/// Moves hexrpc's queued Rust log records into Python's `logging` now (they also arrive by
/// themselves through a background thread; call this before reading logs in a test).
#[pyfunction]
pub fn flush_logs(py: Python<'_>) {
    flush(py);
}

/// Sets which Rust log records are made: "off", "error", "warn", "info", "debug" or "trace"
/// (the environment variable `HEXRPC_LOG` sets it when hexrpc loads; default "info"). Python's
/// `logging` configuration still filters what is shown.
#[pyfunction]
pub fn set_log_level(name: &str) -> PyResult<()> {
    let level = parse_level(name)
        .ok_or_else(|| crate::InvalidArgument::new_err(format!("log level {name:?}: use off, error, warn, info, debug or trace")))?;
    log::set_max_level(level);
    Ok(())
}
