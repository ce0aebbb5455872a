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
    // A capture's library images (what its live session served from memory) are served again,
    // so the library fetches replay as they were recorded.
    if let Err(e) = register_captured_images(&service, files) {
        io::error(&e);
        return ExitCode::from(1);
    }
    // One session for all files, in order. Each file is read with a bound, and only when it is a
    // regular file; one that cannot be read is reported in its line and the rest still run.
    let results = replay::replay_files(&service, files, |p| io::read_bounded(p, io::MAX_REQUEST_FILE).map_err(|e| e.to_string()));
    for (name, r) in results.iter().filter(|(_, r)| r.status.is_none()) {
        io::error(&format!("{}: not sent: {}", io::escape(name), r.error.as_deref().unwrap_or("unknown reason")));
    }
    // Files from a capture (an index.json beside them): each status is compared with the one
    // recorded, and every difference is reported (exit 1): a replay that does not reproduce
    // its capture must not pass.
    let differences = compare_with_captures(files, &results);
    for (name, recorded, replayed) in &differences {
        io::error(&format!(
            "{}: differs from its capture: recorded status {recorded} ({}), replayed {replayed} ({})",
            io::escape(name),
            replay::status_name(*recorded),
            replay::status_name(*replayed)
        ));
    }
    let m = service.metrics().snapshot();
    let report = if json {
        // The replay's own object, extended with the service's metrics.
        let mut out = replay::results_json(&results);
        out.pop();
        out.push_str(", \"metrics\": ");
        let _ = m.write_json(&mut out);
        out.push_str(&format!(", \"differences_from_capture\": {}}}\n", differences.len()));
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
    if !replay::all_answered(&results) || !differences.is_empty() {
        ExitCode::from(1)
    } else {
        code
    }
}

/// Registers the images listed by the `index.json` of every directory the files come from.
#[cfg(feature = "bench")]
fn register_captured_images<S: hexrpc_drivers::Syscalls>(
    service: &hexrpc_runtime::reverse::ReverseService<'static, S>,
    files: &[std::path::PathBuf],
) -> Result<(), String> {
    let mut dirs: Vec<std::path::PathBuf> =
        files.iter().map(|f| f.parent().map(std::path::Path::to_path_buf).unwrap_or_default()).collect();
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        let Ok(text) = crate::io::read_text(&dir.join("index.json"), crate::io::MAX_POLICY_FILE) else { continue };
        let Some(images) = crate::replay::recorded_images(&text) else {
            return Err(format!("{}: the images list is malformed", crate::io::escape(&dir.join("index.json").to_string_lossy())));
        };
        for (name, file) in images {
            let path = dir.join(&file);
            let bytes = crate::io::read_bounded(&path, crate::io::MAX_LIBRARY_FILE)
                .map_err(|e| format!("{}: {e}", crate::io::escape(&path.to_string_lossy())))?;
            // The service borrows images for its lifetime; this process replays once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            match service.register_image(&name, bytes) {
                Ok(()) => log::info!("serving the captured image {name:?} from {}", path.display()),
                Err(e) => log::warn!("captured image {name:?} not served: {e:?}"),
            }
        }
    }
    Ok(())
}

/// For every replayed file whose directory holds a capture's `index.json` naming it: (file,
/// recorded status, replayed status) where they differ. A missing or unreadable index is no
/// capture (hand-made request files); a malformed one is said once.
#[cfg(feature = "bench")]
fn compare_with_captures(files: &[std::path::PathBuf], results: &[(String, crate::replay::ReplayResult)]) -> Vec<(String, i32, i32)> {
    use std::collections::HashMap;
    let mut indexes: HashMap<std::path::PathBuf, Option<HashMap<String, i32>>> = HashMap::new();
    let mut out = Vec::new();
    for (path, (name, r)) in files.iter().zip(results) {
        let Some(replayed) = r.status else { continue };
        let dir = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
        let index = indexes.entry(dir.clone()).or_insert_with(|| {
            let text = crate::io::read_text(&dir.join("index.json"), crate::io::MAX_POLICY_FILE).ok()?;
            match crate::replay::recorded_statuses(&text) {
                Some(v) => Some(v.into_iter().collect()),
                None => {
                    crate::io::error(&format!("{}: not a capture index; statuses not compared", dir.join("index.json").display()));
                    None
                }
            }
        });
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        if let Some(&recorded) = index.as_ref().and_then(|i| i.get(&file)) {
            if recorded != replayed {
                out.push((name.clone(), recorded, replayed));
            }
        }
    }
    out
}

/// Without the bench there is no platform to replay on.
#[cfg(not(feature = "bench"))]
pub fn replay(_json: bool, _policy: Option<std::path::PathBuf>, _files: &[std::path::PathBuf]) -> ExitCode {
    super::no_bench()
}
