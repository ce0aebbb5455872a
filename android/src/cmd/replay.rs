//! `hexrpc reverse-replay`: recorded or hand-made DSP reverse requests through the hardened file
//! service, for security review.

use std::process::ExitCode;

#[cfg(feature = "bench")]
/// Replays `files` through the file service (one session, in order) and prints the results.
pub fn replay(json: bool, policy: Option<std::path::PathBuf>, files: &[std::path::PathBuf]) -> ExitCode {
    use crate::io;
    use crate::replay::{self, ReplayResult};
    use hexrpc_runtime::reverse::{FilePolicy, ReverseService};
    let bench = hexrpc_bench::Bench::new();
    let board = bench.board();
    let policy = match policy {
        None => match FilePolicy::for_board(board) {
            Ok(p) => p,
            Err(e) => {
                io::error(&format!("the service cannot start: the bench board's default policy is invalid: {e:?}"));
                return ExitCode::from(1);
            }
        },
        Some(path) => match io::read_text(&path, io::MAX_POLICY_FILE)
            .map_err(|e| e.to_string())
            .and_then(|t| FilePolicy::parse(&t, board.limits).map_err(|e| format!("{e:?}")))
        {
            Ok(p) => p,
            Err(e) => {
                io::error(&format!("--policy {}: {e}", io::escape(&path.to_string_lossy())));
                return ExitCode::from(2);
            }
        },
    };
    // Offline: no channel exists, so apps_mem requests that would reach the kernel fail as
    // they would on a closed fd.
    let service = ReverseService::new(bench, hexrpc_drivers::Fd(-1), policy);
    // One session for all files, in order. Each file is read with a bound, and only when it is a
    // regular file; one that cannot be read is reported in its line and the rest still run.
    let results = replay::replay_files(&service, files, |p| io::read_bounded(p, io::MAX_REQUEST_FILE).map_err(|e| e.to_string()));
    for (name, r) in results.iter().filter(|(_, r)| r.status.is_none()) {
        io::error(&format!("{}: not sent: {}", io::escape(name), r.error.as_deref().unwrap_or("unknown reason")));
    }
    let m = service.metrics().snapshot();
    let report = if json {
        // The replay's own object, extended with the service's metrics.
        let mut out = replay::results_json(&results);
        out.pop();
        out.push_str(", \"metrics\": ");
        let _ = m.write_json(&mut out);
        out.push_str("}\n");
        out
    } else {
        // Names come from the command line: escaped before they reach a terminal.
        let shown: Vec<(String, ReplayResult)> = results.iter().map(|(n, r)| (io::escape(n), r.clone())).collect();
        format!(
            "{}service metrics: {} requests, {} ok, {} bytes served, {} to unknown handles\n",
            replay::results_text(&shown),
            m.requests,
            m.ok,
            m.bytes_served,
            m.unknown_handle
        )
    };
    let code = io::print(&report);
    if !replay::all_answered(&results) {
        ExitCode::from(1)
    } else {
        code
    }
}

/// Without the bench there is no platform to replay on.
#[cfg(not(feature = "bench"))]
pub fn replay(_json: bool, _policy: Option<std::path::PathBuf>, _files: &[std::path::PathBuf]) -> ExitCode {
    super::no_bench()
}
