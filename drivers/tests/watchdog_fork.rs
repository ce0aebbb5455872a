//! A child forked after the process's watchdog started still gets its deadlines watched: the
//! watchdog thread does not come along into the child, so the child's deadlines are watched by
//! a thread per call.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hexrpc_drivers::watchdog::{scoped, scoped_for};

/// Runs `scoped` with a 5 ms deadline whose body waits (at most 2 s) for the action: whether the
/// action ran, and ran no sooner than the deadline.
fn a_late_call_is_interrupted() -> bool {
    let calls = AtomicU32::new(0);
    let action = || {
        calls.fetch_add(1, Ordering::SeqCst);
    };
    let start = Instant::now();
    scoped(start + Duration::from_millis(5), Duration::from_millis(1), &action, || {
        while calls.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    calls.load(Ordering::SeqCst) > 0 && start.elapsed() >= Duration::from_millis(5)
}

/// Not under qemu-user (the aarch64 test run): its fork of a guest with other threads running
/// has deadlocked children in this project's CI before.
#[test]
#[cfg_attr(not(target_arch = "x86_64"), ignore)]
fn deadlines_fire_in_a_child_forked_after_the_watchdog_started() {
    // The watchdog starts here (and is shown to work in the parent).
    assert_eq!(scoped_for(Duration::from_secs(5), Duration::from_millis(2), &|| {}, || 7), 7);
    assert!(a_late_call_is_interrupted(), "the parent's deadline");
    // SAFETY: the child only runs `a_late_call_is_interrupted` (which may start a thread: the
    // C library allows that after fork) and `_exit`s without unwinding or running destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = a_late_call_is_interrupted();
        // SAFETY: ends the child at once, as a forked child of a threaded process must.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `status` is a valid, writable int; `pid` is our child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(libc::WIFEXITED(status), "the child did not exit: status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's deadline never fired");
    assert!(a_late_call_is_interrupted(), "the parent's deadline, after the fork");
}
