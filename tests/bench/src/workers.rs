//! The simulated DSP's worker threads: every invoke runs on one of them (named `bench-dsp`).
//!
//! A worker that finishes a job waits for the next one instead of ending, so a steady load runs
//! on a constant set of threads: a launch costs no thread (the soak checks how many threads
//! started and that the process's thread count is back after the run). A job may block for long
//! (a hung kernel, a reverse call waiting for the listener, which itself needs a worker for its
//! next call), so there is no fixed size: when every worker is busy a new one starts. A worker
//! idle for [`KEEP_ALIVE`] ends, so a burst does not leave its threads behind. (DSP shells are
//! not tied to these threads: the executor forks them from its own long-lived thread, see
//! [`executor::process`](crate::executor::process).)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// How long an idle worker waits for a job before it ends.
pub const KEEP_ALIVE: Duration = Duration::from_secs(1);

type Task = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    idle: usize,
}

struct Pool {
    queue: Mutex<Queue>,
    cv: Condvar,
    /// The fork generation the pool's workers run in.
    forks: Option<i32>,
}

/// The pool of this process. A child forked while a pool had workers has none of them (only the
/// forking thread comes along) but a copy of the count of idle ones, so a job queued there would
/// wait forever: a forked child gets a pool of its own, and the parent's copy is never touched
/// again (not even locked: a worker may have held its lock at the fork). The first pool is a
/// static (no heap: the soak counts heap blocks exactly); a child's is leaked, once per fork
/// generation.
fn pool() -> &'static Pool {
    static FIRST: OnceLock<Pool> = OnceLock::new();
    static CHILD: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());
    let forks = hexrpc_drivers::fork_generation();
    let first = FIRST.get_or_init(|| Pool { queue: Mutex::default(), cv: Condvar::new(), forks });
    if first.forks == forks {
        return first;
    }
    let p = CHILD.load(Ordering::Acquire);
    // SAFETY: a non-null pointer in CHILD is a leaked `Box<Pool>`, never freed.
    if let Some(pool) = unsafe { p.as_ref() } {
        if pool.forks == forks {
            return pool;
        }
    }
    // The first job of this fork generation: the parent's workers are not here.
    LIVE.store(0, Ordering::Relaxed);
    let fresh = Box::into_raw(Box::new(Pool { queue: Mutex::default(), cv: Condvar::new(), forks }));
    match CHILD.compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `fresh` is now the leaked `Box<Pool>` in CHILD, never freed.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // Another thread of this generation made one first: use it.
            // SAFETY: `fresh` came from `Box::into_raw` above and was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above, a leaked `Box<Pool>` in CHILD.
            unsafe { &*other }
        }
    }
}

fn worker(pool: &'static Pool) {
    loop {
        let task = {
            let mut q = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(t) = q.tasks.pop_front() {
                    break t;
                }
                q.idle += 1;
                let (guard, waited) = pool.cv.wait_timeout(q, KEEP_ALIVE).unwrap_or_else(|e| e.into_inner());
                q = guard;
                q.idle -= 1;
                if waited.timed_out() && q.tasks.is_empty() {
                    // The queue's high-water capacity goes with the idle workers: once none is
                    // left, the pool holds no heap (a leak check counts heap bytes exactly).
                    q.tasks.shrink_to_fit();
                    LIVE.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            }
        };
        task();
    }
}

/// Runs `job` on an idle worker, or on a new one when all are busy. Fails only when a needed
/// thread cannot be started (the job is then not run).
pub(crate) fn run(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let pool = pool();
    let mut q = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
    q.tasks.push_back(Box::new(job));
    if q.idle >= q.tasks.len() {
        pool.cv.notify_one();
        return Ok(());
    }
    // Spawned while the queue is locked: the new worker cannot take a task before we know
    // whether it started, so on failure the task at the back is still ours.
    match std::thread::Builder::new().name("bench-dsp".into()).spawn(move || worker(pool)) {
        Ok(_) => {
            STARTED.fetch_add(1, Ordering::Relaxed);
            LIVE.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => {
            q.tasks.pop_back();
            Err(e)
        }
    }
}

/// How many workers exist now (busy or idle).
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// How many workers this process has started in all.
pub fn started() -> usize {
    STARTED.load(Ordering::Relaxed)
}

static LIVE: AtomicUsize = AtomicUsize::new(0);
static STARTED: AtomicUsize = AtomicUsize::new(0);
