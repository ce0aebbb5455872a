//! A progress line on stderr for commands that run longer than a second, only when stderr is a
//! terminal (never in pipes, logs or CI).

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Shows `hexrpc: running NAME...` once a second has passed since it was made, overwriting
/// itself, and clears the line when dropped.
pub struct Progress {
    start: Instant,
    tty: bool,
    active: bool,
}

impl Progress {
    /// Starts the clock.
    pub fn new() -> Self {
        Progress { start: Instant::now(), tty: std::io::stderr().is_terminal(), active: false }
    }

    /// Reports the step about to run (shown once a second has passed since `new`; a step that
    /// starts earlier is shown by the next report, or not at all if the command ends first).
    pub fn step(&mut self, name: &str) {
        if self.tty && self.start.elapsed().as_secs_f64() >= 1.0 {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2Khexrpc: running {name}...");
            let _ = e.flush();
            self.active = true;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.active {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
        }
    }
}
