//! A progress line on stderr for commands that run longer than a second, only when stderr is a
//! terminal (never in pipes, logs or CI).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct Shared {
    step: Mutex<String>,
    done: AtomicBool,
}

/// Shows `hexrpc: running STEP... (Ns)` on stderr once a second has passed, refreshed by a
/// ticker thread, and clears the line when dropped.
pub struct Progress {
    shared: Arc<Shared>,
    ticker: Option<JoinHandle<bool>>,
}

impl Progress {
    /// Starts the clock (and, on a terminal, the ticker).
    pub fn new() -> Self {
        let shared = Arc::new(Shared { step: Mutex::new(String::new()), done: AtomicBool::new(false) });
        let ticker = std::io::stderr().is_terminal().then(|| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut shown = false;
                while !shared.done.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(200));
                    let elapsed = start.elapsed();
                    if elapsed >= Duration::from_secs(1) && !shared.done.load(Ordering::Acquire) {
                        let step = shared.step.lock().map(|s| s.clone()).unwrap_or_default();
                        let mut e = std::io::stderr().lock();
                        let _ = write!(e, "\r\x1b[2Khexrpc: running {step}... ({}s)", elapsed.as_secs());
                        let _ = e.flush();
                        shown = true;
                    }
                }
                shown
            })
        });
        Progress { shared, ticker }
    }

    /// Names the step now running.
    pub fn step(&mut self, name: &str) {
        if let Ok(mut s) = self.shared.step.lock() {
            name.clone_into(&mut s);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.shared.done.store(true, Ordering::Release);
        if let Some(t) = self.ticker.take() {
            if t.join().unwrap_or(false) {
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "\r\x1b[2K");
                let _ = e.flush();
            }
        }
    }
}
