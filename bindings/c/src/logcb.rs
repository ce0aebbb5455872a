//! `hexrpc_set_log_callback`: hexrpc's log records (the `log` facade of every hexrpc crate:
//! why a recovery ran, what the reverse file service refused, why the bench ended a DSP process)
//! handed to a function of the C program.
//!
//! The first call installs this module's logger as the process's `log` logger; if the program
//! (or another library) already installed one, the call fails with `HEXRPC_ERR_UNAVAILABLE`
//! and that logger keeps the records. The callback runs on the thread that made the record,
//! possibly several threads at once, and must not call into hexrpc.

use std::ffi::{c_char, c_void, CString};
use std::sync::RwLock;

use crate::error::Failure;

/// A log callback: `level` is one of `HEXRPC_LOG_ERROR` .. `HEXRPC_LOG_TRACE`, `target` the
/// module that logged (`"hexrpc_hal::session"`), `message` the text; both strings are valid only
/// during the call.
pub type hexrpc_log_fn = Option<unsafe extern "C" fn(user: *mut c_void, level: u32, target: *const c_char, message: *const c_char)>;

/// Log level: no records.
pub const HEXRPC_LOG_OFF: u32 = 0;
/// Log level: errors.
pub const HEXRPC_LOG_ERROR: u32 = 1;
/// Log level: warnings (and errors).
pub const HEXRPC_LOG_WARN: u32 = 2;
/// Log level: information (and above).
pub const HEXRPC_LOG_INFO: u32 = 3;
/// Log level: debugging detail (and above).
pub const HEXRPC_LOG_DEBUG: u32 = 4;
/// Log level: everything.
pub const HEXRPC_LOG_TRACE: u32 = 5;

struct Sink {
    f: unsafe extern "C" fn(*mut c_void, u32, *const c_char, *const c_char),
    user: usize,
}

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

struct CallbackLogger;

fn level_number(l: log::Level) -> u32 {
    match l {
        log::Level::Error => HEXRPC_LOG_ERROR,
        log::Level::Warn => HEXRPC_LOG_WARN,
        log::Level::Info => HEXRPC_LOG_INFO,
        log::Level::Debug => HEXRPC_LOG_DEBUG,
        log::Level::Trace => HEXRPC_LOG_TRACE,
    }
}

fn filter(level: u32) -> Result<log::LevelFilter, Failure> {
    Ok(match level {
        HEXRPC_LOG_OFF => log::LevelFilter::Off,
        HEXRPC_LOG_ERROR => log::LevelFilter::Error,
        HEXRPC_LOG_WARN => log::LevelFilter::Warn,
        HEXRPC_LOG_INFO => log::LevelFilter::Info,
        HEXRPC_LOG_DEBUG => log::LevelFilter::Debug,
        HEXRPC_LOG_TRACE => log::LevelFilter::Trace,
        other => return Err(Failure::invalid("log", format!("max_level {other}: use HEXRPC_LOG_OFF .. HEXRPC_LOG_TRACE (0..5)"))),
    })
}

/// A string for C: interior NULs (which a message may carry) become U+FFFD.
fn c_text(s: &str) -> CString {
    CString::new(s.replace('\0', "\u{fffd}")).unwrap_or_default()
}

impl log::Log for CallbackLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let sink = SINK.read().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = sink.as_ref() {
            let (target, message) = (c_text(r.target()), c_text(&r.args().to_string()));
            // SAFETY: the program registered `f` with `hexrpc_set_log_callback` and keeps it (and
            // `user`) valid until it replaces or removes it, which waits for this read lock; the
            // strings live until the call returns.
            unsafe { (s.f)(s.user as *mut c_void, level_number(r.level()), target.as_ptr(), message.as_ptr()) };
        }
    }

    fn flush(&self) {}
}

static LOGGER: CallbackLogger = CallbackLogger;

/// Installs (or replaces, or with `f` NULL removes) the callback and sets the level.
pub fn set(f: hexrpc_log_fn, user: *mut c_void, max_level: u32) -> Result<(), Failure> {
    let level = filter(max_level)?;
    {
        let mut sink = SINK.write().unwrap_or_else(|p| p.into_inner());
        if log::set_logger(&LOGGER).is_err() && !std::ptr::addr_eq(log::logger() as *const dyn log::Log, &LOGGER as *const dyn log::Log) {
            return Err(Failure::unavailable("log", "another log logger is installed in this process; it receives hexrpc's records"));
        }
        *sink = f.map(|f| Sink { f, user: user as usize });
    }
    log::set_max_level(if f.is_some() { level } else { log::LevelFilter::Off });
    Ok(())
}
