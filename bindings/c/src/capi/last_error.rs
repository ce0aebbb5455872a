//! The thread's last error: what a failing call leaves for `hexrpc_last_error_*`, and [`run`],
//! the wrapper every function's body goes through (a failure or a panic becomes a status).

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{hexrpc_status, Failure};

struct LastError {
    status: hexrpc_status,
    stage: CString,
    message: CString,
}

thread_local! {
    static LAST: RefCell<Option<LastError>> = const { RefCell::new(None) };
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

fn set_last(f: &Failure) {
    let e = LastError { status: f.status, stage: cstring(f.stage), message: cstring(&f.to_string()) };
    LAST.with(|l| *l.borrow_mut() = Some(e));
}

/// Runs `body`, records a failure (or a panic) as the thread's last error, returns the status.
pub(super) fn run(body: impl FnOnce() -> Result<(), Failure>) -> hexrpc_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => hexrpc_status::HEXRPC_OK,
        Ok(Err(f)) => {
            set_last(&f);
            f.status
        }
        Err(_) => {
            set_last(&Failure::new(hexrpc_status::HEXRPC_ERR_PANIC, "panic", "hexrpc panicked (a bug); see the log"));
            hexrpc_status::HEXRPC_ERR_PANIC
        }
    }
}

/// The message of the last failure on this thread (`"STAGE: CAUSE"`), or `""` if none. The
/// pointer stays valid until the next failing call on this thread. Thread-safe (per thread).
#[no_mangle]
pub extern "C" fn hexrpc_last_error_message() -> *const c_char {
    LAST.with(|l| l.borrow().as_ref().map_or(c"".as_ptr(), |e| e.message.as_ptr()))
}

/// The stage of the last failure on this thread (`"library-open"`, `"invoke"`, `"launch-pack"`,
/// `"handle"`, ...), or `""` if none. Valid like [`hexrpc_last_error_message`].
#[no_mangle]
pub extern "C" fn hexrpc_last_error_stage() -> *const c_char {
    LAST.with(|l| l.borrow().as_ref().map_or(c"".as_ptr(), |e| e.stage.as_ptr()))
}

/// The status of the last failure on this thread, or `HEXRPC_OK` if none. Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_last_error_status() -> hexrpc_status {
    LAST.with(|l| l.borrow().as_ref().map_or(hexrpc_status::HEXRPC_OK, |e| e.status))
}

/// The name of a status code (`"HEXRPC_ERR_HANDLE"`), or `"unknown"`; a static string.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_status_name(status: i32) -> *const c_char {
    let s: &CStr = match status {
        0 => c"HEXRPC_OK",
        1 => c"HEXRPC_ERR_NULL",
        2 => c"HEXRPC_ERR_HANDLE",
        3 => c"HEXRPC_ERR_INVALID",
        4 => c"HEXRPC_ERR_REFUSED",
        5 => c"HEXRPC_ERR_UNAVAILABLE",
        6 => c"HEXRPC_ERR_RECOVERABLE",
        7 => c"HEXRPC_ERR_DSP",
        8 => c"HEXRPC_ERR_FAILED",
        9 => c"HEXRPC_ERR_PANIC",
        10 => c"HEXRPC_ERR_FORKED",
        _ => c"unknown",
    };
    s.as_ptr()
}
