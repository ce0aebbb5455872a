//! The simulated DSP's worker threads: every invoke runs on one of them (named `bench-dsp`).
//!
//! A worker that finishes a job waits for the next one instead of ending, so a steady load runs
//! on a constant set of threads (the soak checks the process's thread count after its warm-up).
//! A job may block for long (a hung kernel, a reverse call waiting for the listener), so there is
//! no fixed size: when every worker is busy a new one starts. Workers never end; their number is
//! the highest concurrency the process has seen. They also outlive every bench, which matters to
//! the executor: a DSP shell is started from the thread that loads its first library, and the
//! shells' parent-death signal is tied to the thread that spawned them
//! ([`executor::process`](crate::executor::process) spawns from its own long-lived thread anyway).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock};

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
                q = pool.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                q.idle -= 1;
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
            COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
        Err(e) => {
            q.tasks.pop_back();
            Err(e)
        }
    }
}

/// How many workers exist (busy or idle).
pub fn count() -> usize {
    COUNT.load(std::sync::atomic::Ordering::Relaxed)
}

static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
