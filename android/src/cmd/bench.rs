//! `hexrpc bench`: what hexrpc costs, measured on the bench (host time of a simulated kernel and
//! DSP, never device figures).

use std::process::ExitCode;

/// Runs the measurements (ten times as many with `long`) and prints them.
#[cfg(feature = "bench")]
pub fn bench(json: bool, long: bool) -> ExitCode {
    use crate::figures;
    let figures = {
        let mut progress = crate::progress::Progress::new();
        progress.step("measurements");
        figures::run(if long { 10 } else { 1 })
    };
    match figures {
        Ok(f) => crate::io::print(&if json { figures::to_json(&f) } else { figures::to_text(&f) }),
        Err(e) => {
            eprintln!("hexrpc: bench: {e}");
            ExitCode::from(1)
        }
    }
}

/// Without the bench there is nothing to measure on.
#[cfg(not(feature = "bench"))]
pub fn bench(_json: bool, _long: bool) -> ExitCode {
    super::no_bench()
}
