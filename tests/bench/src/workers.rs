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
use std::sync::atomic::{AtomicUsize, Ordering};
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

#[derive(Default)]
struct Pool {
    queue: Mutex<Queue>,
    cv: Condvar,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Pool::default)
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
