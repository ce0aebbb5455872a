//! Sessions: opening one on a device board or on the bench, what a program sets up first (the
//! log callback, board detection), closing, recovery and health, the bench's DSP restart.

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use super::args::{free_handle, handle_value, new_handle, str_arg, write_out};
use super::last_error::run;
use super::types::*;
use crate::error::{hexrpc_status, Failure};
use crate::logcb::{self, hexrpc_log_fn};
use crate::objects::{self, SessionObj};
use crate::table::{self, Obj};

/// Starts a session on the device board named `board` (`"comma-three"`, `"msm-android"`,
/// `"qcom-rb5"`, `"upstream"`), or, with `board` NULL, on the board this machine's device-tree
/// model names (as [`hexrpc_detect_board`] finds it): ION, DSP shell, FastRPC channel, DSP
/// process, reverse-RPC listener (a thread serving the DSP's file requests). On failure nothing
/// is left open and the message names the stage. Thread-safe.
///
/// # Safety
/// `board` is NULL or a NUL-terminated string; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_open(board: *const c_char, out: *mut *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        let open = || {
            let board = if board.is_null() {
                objects::detect_board()?
            } else {
                // SAFETY: the caller's contract.
                unsafe { str_arg(board, "board") }?
            };
            Ok(Obj::Session(Arc::new(SessionObj::open_device(board)?)))
        };
        // SAFETY: `out` is NULL or valid for one write (the caller's contract).
        unsafe { new_handle(out, open) }
    })
}

/// The latency policy a `HEXRPC_LATENCY_*` word names.
fn latency_policy(word: u32) -> Result<hexrpc_hal::LatencyPolicy, Failure> {
    use hexrpc_hal::{DspPower, LatencyPolicy, PmQosVote};
    let known = HEXRPC_LATENCY_NO_PM_QOS | HEXRPC_LATENCY_POWER_OFF | HEXRPC_LATENCY_POWER_BURST;
    if word & !known != 0 {
        return Err(Failure::invalid("argument", format!("unknown latency policy bits {:#x}", word & !known)));
    }
    let power = match (word & HEXRPC_LATENCY_POWER_OFF != 0, word & HEXRPC_LATENCY_POWER_BURST != 0) {
        (true, true) => return Err(Failure::invalid("argument", "HEXRPC_LATENCY_POWER_OFF and HEXRPC_LATENCY_POWER_BURST together")),
        (true, false) => DspPower::Off,
        (false, true) => DspPower::Burst,
        (false, false) => DspPower::Sustained,
    };
    let pm_qos = if word & HEXRPC_LATENCY_NO_PM_QOS != 0 { PmQosVote::Off } else { PmQosVote::Board };
    Ok(LatencyPolicy::REALTIME.with_pm_qos(pm_qos).with_dsp_power(power))
}

/// [`hexrpc_session_open`] with the latency policy `latency`: 0 (the default: the PM-QoS vote on
/// every channel and the sustained DSP clock, what a 20 Hz real-time service wants) or
/// `HEXRPC_LATENCY_NO_PM_QOS` and one of `HEXRPC_LATENCY_POWER_OFF` / `HEXRPC_LATENCY_POWER_BURST`.
/// The PM-QoS vote goes out after each channel's process is created (again after each
/// recovery; see [`hexrpc_session_pm_qos`]); the clock vote to each library whose entry takes
/// it, after each open. Unknown bits are `HEXRPC_ERR_INVALID`. Thread-safe.
///
/// # Safety
/// As [`hexrpc_session_open`].
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_open_with(board: *const c_char, latency: u32, out: *mut *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        let open = || {
            let policy = latency_policy(latency)?;
            let board = if board.is_null() {
                objects::detect_board()?
            } else {
                // SAFETY: the caller's contract.
                unsafe { str_arg(board, "board") }?
            };
            Ok(Obj::Session(Arc::new(SessionObj::open_device_with(board, policy)?)))
        };
        // SAFETY: `out` is NULL or valid for one write (the caller's contract).
        unsafe { new_handle(out, open) }
    })
}

/// What became of the PM-QoS vote on the session's current channel: `HEXRPC_PM_QOS_SENT`,
/// `HEXRPC_PM_QOS_NOT_ASKED`, `HEXRPC_PM_QOS_NOT_AVAILABLE` (upstream drivers) or
/// `HEXRPC_PM_QOS_REFUSED` (the kernel said no; the session works without it). Thread-safe.
///
/// # Safety
/// `state` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_pm_qos(session: *mut hexrpc_session, state: *mut u32) -> hexrpc_status {
    run(|| {
        let s = table::session(handle_value(session))?;
        s.check()?;
        let v = match s.served().session().pm_qos() {
            hexrpc_hal::PmQosState::NotAsked => HEXRPC_PM_QOS_NOT_ASKED,
            hexrpc_hal::PmQosState::Sent => HEXRPC_PM_QOS_SENT,
            hexrpc_hal::PmQosState::NotAvailable => HEXRPC_PM_QOS_NOT_AVAILABLE,
            hexrpc_hal::PmQosState::Refused(_) => HEXRPC_PM_QOS_REFUSED,
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(state, v, "state") }
    })
}

/// Hands hexrpc's log records of `max_level` (`HEXRPC_LOG_ERROR` .. `HEXRPC_LOG_TRACE`) and
/// above to `f(user, level, target, message)`, on the thread that made each record (several
/// threads may call it at once; it must not call into hexrpc). `f` NULL removes the callback
/// (records are dropped, as before any call). Calling again replaces it; the previous callback is
/// not called after this returns. `HEXRPC_ERR_UNAVAILABLE` when the process already has another
/// logger of Rust's `log` facade (it keeps receiving the records). Thread-safe.
///
/// # Safety
/// `f`, if not NULL, is a function safe to call from any thread with `user` until it is replaced
/// or removed.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_set_log_callback(f: hexrpc_log_fn, user: *mut c_void, max_level: u32) -> hexrpc_status {
    run(|| logcb::set(f, user, max_level))
}

/// The device board this machine's device-tree model (`/proc/device-tree/model`) names, by
/// hexrpc's board table: `*name` is set to a static string (`"comma-three"`, ...). When the model
/// is unreadable or no board claims it: `HEXRPC_ERR_UNAVAILABLE`, and the message quotes the
/// model and lists the boards to pass by name. Thread-safe.
///
/// # Safety
/// `name` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_detect_board(name: *mut *const c_char) -> hexrpc_status {
    run(|| {
        // The board names as NUL-terminated strings, made once and kept for the process.
        static C_NAMES: std::sync::OnceLock<Vec<(&'static str, CString)>> = std::sync::OnceLock::new();
        let names = C_NAMES.get_or_init(|| hexrpc_bsp::BOARDS.iter().filter_map(|b| Some((b.name, CString::new(b.name).ok()?))).collect());
        let board = objects::detect_board()?;
        let c = names.iter().find(|(n, _)| *n == board).map(|(_, c)| c.as_ptr()).ok_or_else(|| Failure::invalid("board", board))?;
        // SAFETY: `name` is NULL (refused by write_out) or valid for one write.
        unsafe { write_out(name, c, "name") }
    })
}

/// Starts a session on the isolated bench (simulated kernel and DSP; builds with the `bench`
/// feature only). `flags`: `HEXRPC_BENCH_EXECUTOR`, `HEXRPC_BENCH_RETURNING_LAUNCHES`. Its DSP
/// knows the models `scale_f32` (`buf,buf,f32`), `add_u8` (`buf,buf,u32`) and `sleep_ms`
/// (`buf,u32`); see `hexrpc_bench_model_image`. Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[cfg(feature = "bench")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_open_bench(flags: u32, out: *mut *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        let open = || {
            if flags & !(HEXRPC_BENCH_EXECUTOR | HEXRPC_BENCH_RETURNING_LAUNCHES) != 0 {
                return Err(Failure::invalid("argument", format!("unknown bench flags {flags:#x}")));
            }
            let s = SessionObj::open_bench(flags & HEXRPC_BENCH_EXECUTOR != 0, flags & HEXRPC_BENCH_RETURNING_LAUNCHES != 0)?;
            Ok(Obj::Session(Arc::new(s)))
        };
        // SAFETY: `out` is NULL or valid for one write (the caller's contract).
        unsafe { new_handle(out, open) }
    })
}

/// [`hexrpc_session_open_bench`] with the latency policy `latency` (as
/// [`hexrpc_session_open_with`]). Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[cfg(feature = "bench")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_open_bench_with(flags: u32, latency: u32, out: *mut *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        let open = || {
            if flags & !(HEXRPC_BENCH_EXECUTOR | HEXRPC_BENCH_RETURNING_LAUNCHES) != 0 {
                return Err(Failure::invalid("argument", format!("unknown bench flags {flags:#x}")));
            }
            let policy = latency_policy(latency)?;
            let (executor, returning) = (flags & HEXRPC_BENCH_EXECUTOR != 0, flags & HEXRPC_BENCH_RETURNING_LAUNCHES != 0);
            Ok(Obj::Session(Arc::new(SessionObj::open_bench_latency(executor, returning, None, policy)?)))
        };
        // SAFETY: `out` is NULL or valid for one write (the caller's contract).
        unsafe { new_handle(out, open) }
    })
}

/// Closes a session and every lease and library made from it (all their handles become dead):
/// libraries are closed, leases and arenas freed, the listener stopped, the DSP process asked to exit, the
/// channel and ION device closed. Calls in flight on other threads finish first. Thread-safe; a
/// second close returns `HEXRPC_ERR_HANDLE`.
#[no_mangle]
pub extern "C" fn hexrpc_session_close(session: *mut hexrpc_session) -> hexrpc_status {
    run(|| free_handle(session, |o| matches!(o, Obj::Session(_)), "session"))
}

/// Rebuilds the DSP side after `HEXRPC_ERR_RECOVERABLE` (a DSP restart or a passed deadline) and
/// re-opens every library; handles stay valid. Retries within the board's recovery budget; if
/// that is spent (the DSP stays down), calls return `HEXRPC_ERR_FAILED` until a further
/// `hexrpc_session_recover`, which starts with a fresh budget, succeeds. Does nothing on a
/// healthy session. Thread-safe (concurrent callers share one recovery); waits for calls in
/// flight.
#[no_mangle]
pub extern "C" fn hexrpc_session_recover(session: *mut hexrpc_session) -> hexrpc_status {
    run(|| table::session(handle_value(session))?.recover())
}

/// Writes 1 to `healthy` while calls can be made, 0 while the session needs
/// `hexrpc_session_recover` (or recovery failed). Thread-safe.
///
/// # Safety
/// `healthy` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_health(session: *mut hexrpc_session, healthy: *mut u32) -> hexrpc_status {
    run(|| {
        let s = table::session(handle_value(session))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(healthy, u32::from(s.is_healthy()), "healthy") }
    })
}

/// Bench sessions only: simulates a DSP subsystem restart (the next call fails with
/// `HEXRPC_ERR_RECOVERABLE`). Thread-safe.
#[cfg(feature = "bench")]
#[no_mangle]
pub extern "C" fn hexrpc_bench_restart_dsp(session: *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        let s = table::session(handle_value(session))?;
        let bench = s.bench().ok_or_else(|| Failure::invalid("argument", "not a bench session"))?;
        bench.restart_dsp();
        Ok(())
    })
}
