//! The process's watchdog (feature `std`): one thread that calls an action on behalf of a
//! thread blocked in a system call once that call's deadline has passed, and again every
//! `repeat` until the call returns. This is how a deadline ends a FastRPC invoke, which has no
//! timeout of its own (the action interrupts the blocked thread through the seam).
//!
//! Arming and disarming are a few field writes under one spin lock (no thread is started per
//! call, no system call in the common case; its unlock is a plain store, where a blocking
//! mutex's is a locked exchange): the deadlines are a small unsorted array, scanned by the
//! watchdog when it wakes. Every holder keeps the lock for a few instructions (the watchdog
//! calls actions and sleeps outside it), and a waiter yields its time slice between attempts. The watchdog sleeps until the earliest deadline it knows of (and,
//! with nothing armed, until the time it had planned); a new deadline earlier than that wakes it
//! (one futex wake), a later one does not, so a stream of calls with the same timeout costs the
//! watchdog about two wake-ups per timeout, not one per call. A timerfd would need a system call per arm and per disarm; a wheel is not needed for
//! the handful of calls a process has in flight at once.
//!
//! The action is borrowed from the caller's stack: [`scoped`] does not return (not even by
//! unwinding) before the action's registration is gone and no call of it is running, so the
//! watchdog never calls an action whose borrows have ended.

extern crate std;

use core::time::Duration;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::Instant;
use std::vec::Vec;

/// An action as the watchdog stores it: borrowed from the stack of a [`scoped`] call, its
/// lifetime erased (see the safety argument in [`scoped`]).
type Action = *const (dyn Fn() + Sync + 'static);

struct Armed {
    id: u64,
    at: Instant,
    repeat: Duration,
    action: Action,
}

struct State {
    armed: Vec<Armed>,
    /// The entry whose action the watchdog is calling now (outside the lock).
    running: Option<u64>,
    next_id: u64,
    /// When the watchdog looks next (`None`: it sleeps until woken).
    wakes_at: Option<Instant>,
}

// SAFETY: the raw action pointers are only dereferenced by the watchdog thread while the
// `scoped` call that registered them cannot have returned (see `scoped`); the pointees are
// `Sync`, so calling them from another thread is allowed.
unsafe impl Send for State {}

type Lock<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;

static STATE: Lock<State> = Lock::new(State { armed: Vec::new(), running: None, next_id: 0, wakes_at: None });
/// Bumped (then `WAKE` notified) when a deadline earlier than the watchdog's planned wake is
/// armed; the watchdog sleeps only if it is unchanged since before its last scan, so no wake is
/// lost between its scan and its sleep.
static WAKES: Mutex<u64> = Mutex::new(0);
/// The watchdog waits on it (with `WAKES`).
static WAKE: Condvar = Condvar::new();
/// Whether the watchdog thread could be started (tried once).
static STARTED: OnceLock<bool> = OnceLock::new();

fn wake_watchdog() {
    *WAKES.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    WAKE.notify_one();
}

/// Runs `body` on this thread. If it has not returned at `deadline`, the process's watchdog
/// thread calls `action` (on the watchdog thread), then again every `repeat` while `body` runs.
/// When `scoped` returns, `action` is not running and will never be called again.
///
/// If the watchdog thread cannot be started, a thread of its own watches this one call (as
/// before a watchdog existed), with the same guarantees.
pub fn scoped<R>(deadline: Instant, repeat: Duration, action: &(dyn Fn() + Sync), body: impl FnOnce() -> R) -> R {
    // SAFETY: only the lifetime is erased (same pointee, same vtable). The pointer is stored in
    // an entry that `Disarm` below removes before `scoped` returns or unwinds, and `Disarm`
    // then waits until the watchdog is not calling it (`running`); the watchdog dereferences an
    // entry's pointer only after finding the entry armed and setting `running` under the same
    // lock. So the pointer is never used after the borrow of `action` ends.
    let erased: Action = unsafe { core::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync + 'static)>(action) };
    let started = *STARTED.get_or_init(|| match std::thread::Builder::new().name("hexrpc-watchdog".into()).spawn(watch) {
        Ok(_) => true,
        Err(e) => {
            log::error!("cannot start the watchdog thread ({e}); deadlines are watched by a thread per call");
            false
        }
    });
    if !started {
        return scoped_thread(deadline, repeat, action, body);
    }
    let (id, wake) = {
        let mut st = STATE.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.armed.push(Armed { id, at: deadline, repeat, action: erased });
        let wake = st.wakes_at.is_none_or(|w| deadline < w);
        if wake {
            st.wakes_at = Some(deadline);
        }
        (id, wake)
    };
    if wake {
        wake_watchdog();
    }
    let _disarm = Disarm(id);
    body()
}

/// Removes entry `id` and waits until its action is not running (on return and on unwind).
struct Disarm(u64);

impl Drop for Disarm {
    fn drop(&mut self) {
        loop {
            {
                let mut st = STATE.lock();
                if let Some(i) = st.armed.iter().position(|a| a.id == self.0) {
                    st.armed.swap_remove(i);
                }
                if st.running != Some(self.0) {
                    return;
                }
            }
            // The watchdog is calling this entry's action (an interrupt: microseconds).
            std::thread::yield_now();
        }
    }
}

/// The watchdog thread: calls every action whose time has come, then sleeps until the next.
fn watch() {
    loop {
        let wakes = *WAKES.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut st = STATE.lock();
        if let Some(a) = st.armed.iter_mut().find(|a| a.at <= now) {
            a.at = now + a.repeat;
            let (id, action) = (a.id, a.action);
            st.running = Some(id);
            drop(st);
            // SAFETY: the entry was armed under the lock when `running` was set to its id, so
            // its `scoped` call is still inside `body` or waiting in `Disarm` for `running` to
            // change: the borrow behind the pointer is alive until we reset `running` below.
            let action = unsafe { &*action };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(action)).is_err() {
                log::error!("a deadline action panicked");
            }
            STATE.lock().running = None;
            continue;
        }
        // The earliest deadline armed; with none, the time already planned (if still ahead), so
        // that calls arming and disarming in a stream find the watchdog asleep until a time no
        // later than theirs and need not wake it (it sleeps without a limit only after a
        // planned wake found nothing).
        let planned = st.wakes_at.filter(|&w| w > now);
        let next = match (st.armed.iter().map(|a| a.at).min(), planned) {
            (Some(a), Some(p)) => Some(a.min(p)),
            (a, p) => a.or(p),
        };
        st.wakes_at = next;
        drop(st);
        let g = WAKES.lock().unwrap_or_else(PoisonError::into_inner);
        if *g != wakes {
            continue;
        }
        drop(match next {
            Some(at) => WAKE.wait_timeout(g, at.saturating_duration_since(now)).unwrap_or_else(PoisonError::into_inner).0,
            None => WAKE.wait(g).unwrap_or_else(PoisonError::into_inner),
        });
    }
}

/// [`scoped`] with a thread of its own (when the watchdog thread cannot be started).
fn scoped_thread<R>(deadline: Instant, repeat: Duration, action: &(dyn Fn() + Sync), body: impl FnOnce() -> R) -> R {
    use core::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let now = Instant::now();
                if now >= deadline {
                    action();
                    std::thread::park_timeout(repeat);
                } else {
                    std::thread::park_timeout(deadline - now);
                }
            }
        });
        // Unparks and stops the watcher on return and on unwind.
        struct Stop<'a>(&'a AtomicBool, &'a std::thread::Thread);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
                self.1.unpark();
            }
        }
        let _stop = Stop(&done, watcher.thread());
        body()
    })
}

/// Deadlines armed now (for tests: 0 once every [`scoped`] call has returned).
pub fn armed() -> usize {
    STATE.lock().armed.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_call_that_returns_in_time_never_sees_the_action() {
        let calls = AtomicU32::new(0);
        let action = || {
            calls.fetch_add(1, Ordering::SeqCst);
        };
        for _ in 0..1000 {
            let r = scoped(Instant::now() + Duration::from_secs(5), Duration::from_millis(2), &action, || 7);
            assert_eq!(r, 7);
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_late_call_gets_the_action_repeatedly_until_it_returns_and_never_after() {
        let calls = AtomicU32::new(0);
        let action = || {
            calls.fetch_add(1, Ordering::SeqCst);
        };
        let start = Instant::now();
        scoped(start + Duration::from_millis(10), Duration::from_millis(2), &action, || {
            while calls.load(Ordering::SeqCst) < 3 {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        assert!(start.elapsed() >= Duration::from_millis(10), "not before the deadline");
        let after = calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), after, "no call after scoped returned");
    }

    #[test]
    fn an_earlier_deadline_wakes_the_watchdog_and_many_calls_are_watched_at_once() {
        // A long deadline first puts the watchdog to sleep for a minute.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let waiter = std::thread::spawn(move || {
            let nothing = || {};
            scoped(Instant::now() + Duration::from_secs(60), Duration::from_millis(2), &nothing, || {
                ready_tx.send(()).unwrap();
                rx.recv().unwrap();
            })
        });
        ready_rx.recv().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|k| {
                std::thread::spawn(move || {
                    let hits = AtomicU32::new(0);
                    let action = || {
                        hits.fetch_add(1, Ordering::SeqCst);
                    };
                    let start = Instant::now();
                    scoped(start + Duration::from_millis(5 + k), Duration::from_millis(2), &action, || {
                        while hits.load(Ordering::SeqCst) == 0 {
                            assert!(start.elapsed() < Duration::from_secs(5), "the watchdog did not wake for an earlier deadline");
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    });
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        tx.send(()).unwrap();
        waiter.join().unwrap();
    }

    #[test]
    fn a_panicking_body_is_disarmed() {
        let action = || {};
        // A repeat no other test uses marks this test's entry.
        let mark = Duration::from_nanos(1_234_567);
        let r = std::panic::catch_unwind(|| scoped(Instant::now() + Duration::from_secs(60), mark, &action, || panic!("boom")));
        assert!(r.is_err());
        assert!(!STATE.lock().armed.iter().any(|a| a.repeat == mark), "the entry outlived its scoped call");
    }
}
