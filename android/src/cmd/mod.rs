//! The commands: one module each, turning its parsed arguments into an exit status; and what
//! several of them share (which board, which device test library).

pub mod abi;
pub mod bench;
pub mod build_lib;
pub mod capture;
pub mod model;
pub mod probe;
pub mod replay;
pub mod report;
pub mod run;
pub mod selftest;

#[cfg(not(feature = "bench"))]
use std::process::ExitCode;

use crate::cli::Usage;
use crate::device::{self, LibraryChoice};
use crate::io;
use crate::probe::BoardSource;

/// The board for a device command: `--board`, else the device-tree model; when neither names a
/// known board, comma-three's facts with [`BoardSource::Assumed`] (the probe's `board`
/// step then fails and says to pass `--board`).
pub fn device_board(name: Option<&str>) -> Result<(&'static hexrpc_bsp::Board, BoardSource), Usage> {
    if let Some(n) = name {
        return match hexrpc_bsp::by_name(n) {
            Some(b) if !hexrpc_bsp::BENCH_BOARDS.contains(&b) => Ok((b, BoardSource::Given)),
            _ => Err(Usage(format!(
                "unknown board '{n}' (known: {})",
                hexrpc_bsp::device_boards().map(|b| b.name).collect::<Vec<_>>().join(", ")
            ))),
        };
    }
    let model = crate::probe::device_tree_model();
    if let Some(b) = model.as_deref().and_then(hexrpc_bsp::detect) {
        return Ok((b, BoardSource::Detected));
    }
    // No board claims the model: the generic board of the driver and allocator the kernel
    // exposes, when it exposes one.
    let sys = hexrpc_drivers::RustixSys;
    let found = hexrpc_bsp::detect_kernel(|p| hexrpc_drivers::Syscalls::stat(&sys, p, true).is_ok());
    match found.as_ref().and_then(hexrpc_bsp::generic_board) {
        Some(b) => {
            log::info!(
                "board not detected (device-tree model {:?}); the kernel exposes {:?}: using {}",
                model.as_deref().unwrap_or("unreadable"),
                found,
                b.name
            );
            Ok((b, BoardSource::Detected))
        }
        None => Ok((&hexrpc_bsp::COMMA_THREE, BoardSource::Assumed)),
    }
}

/// The bench board named by `--board` (default: the downstream bench).
pub fn bench_board(name: Option<&str>) -> Result<&'static hexrpc_bsp::Board, Usage> {
    match name {
        None => Ok(&hexrpc_bsp::BENCH),
        Some(n) => hexrpc_bsp::BENCH_BOARDS
            .iter()
            .copied()
            .find(|b| b.name == n)
            .ok_or_else(|| Usage(format!("unknown bench board '{n}' (known: bench, bench-upstream)"))),
    }
}

/// The device test library: `--library`, else the first installed path that exists.
pub fn device_library(path: Option<&std::path::Path>) -> LibraryChoice {
    device_library_in(None, path)
}

/// [`device_library`] with the installed paths looked up under `root` (an image root, as
/// `dpkg --root` installs into) when given.
pub fn device_library_in(root: Option<&std::path::Path>, path: Option<&std::path::Path>) -> LibraryChoice {
    let installed = |p: &str| match root {
        Some(r) => r.join(p.trim_start_matches('/')),
        None => std::path::PathBuf::from(p),
    };
    let candidates: Vec<std::path::PathBuf> = match path {
        Some(p) => vec![p.to_path_buf()],
        None => device::INSTALLED.iter().map(|p| installed(p)).collect(),
    };
    let Some(found) = candidates.iter().find(|p| path.is_some() || p.exists()) else {
        return Err(format!(
            "device test library not found at {} (installed by the hexrpc .deb / vendor module; or pass --library, built with `hexrpc build-lib android/devicelib/hexrpc_selftest.c --kernel {} --signature {} -o libhexrpc_selftest.so`)",
            candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" or "),
            device::KERNEL,
            device::SIGNATURE
        ));
    };
    match io::read_bounded(found, io::MAX_LIBRARY_FILE) {
        Ok(bytes) => Ok(device::DeviceLibrary { image: Box::leak(bytes.into_boxed_slice()), origin: found.display().to_string() }),
        Err(e) => Err(format!("device test library {}: {e}", io::escape(&found.to_string_lossy()))),
    }
}

/// A command or option that needs the bench, in a build without it.
#[cfg(not(feature = "bench"))]
pub fn no_bench() -> ExitCode {
    crate::io::error("this build has no bench (built without the `bench` feature, as the device packages are); --bench, bench and reverse-replay need a desk build");
    ExitCode::from(2)
}

/// A served session on this device: the board from the device-tree model (an undetected board
/// is said in the log, not assumed silently), its file policy, the FastRPC session. The error
/// is `(usage, message)`: `usage` for a board that cannot be named, else the reason the
/// session did not start and the next step, as `probe` says them.
pub fn device_session() -> Result<hexrpc_runtime::ServedSession<hexrpc_drivers::RustixSys>, (bool, String)> {
    device_session_on(None)
}

/// [`device_session`] on the board named `board` (`None`: detected).
pub fn device_session_on(board: Option<&str>) -> Result<hexrpc_runtime::ServedSession<hexrpc_drivers::RustixSys>, (bool, String)> {
    device_session_with(board, hexrpc_hal::LatencyPolicy::default())
}

/// [`device_session_on`] with the latency policy `latency`.
pub fn device_session_with(
    board: Option<&str>,
    latency: hexrpc_hal::LatencyPolicy,
) -> Result<hexrpc_runtime::ServedSession<hexrpc_drivers::RustixSys>, (bool, String)> {
    let (board, source) = device_board(board).map_err(|Usage(m)| (true, m))?;
    if source == BoardSource::Assumed {
        log::warn!("board not detected from the device-tree model: using the {} facts (`hexrpc probe` says more)", board.name);
    }
    let policy =
        hexrpc_runtime::reverse::FilePolicy::for_board(board).map_err(|e| (false, format!("file policy of {}: {e:?}", board.name)))?;
    // The one place a command decides to touch the device.
    let access = hexrpc_bsp::DeviceAccess::for_device(board);
    let started = hexrpc_hal::Session::start_with(hexrpc_drivers::RustixSys, &access, latency).map_err(hexrpc_runtime::Error::from);
    started.and_then(|s| hexrpc_runtime::ServedSession::serve(s, policy)).map_err(|e| {
        let advice = e.hal().map(|h| format!(": {}", hexrpc_hal::OpenAdvice { error: &h, board })).unwrap_or_default();
        (false, format!("starting the DSP session: {e}{advice}"))
    })
}

/// A command's failure: exit 2 (usage, a bad input) or 1 (the operation failed or was refused),
/// with the message (`run` and `model`).
#[derive(Debug)]
pub enum Failure {
    /// The command line or an input is wrong (exit 2).
    Usage(String),
    /// The operation failed or was refused (exit 1).
    Refused(String),
}

/// A usage failure.
pub fn usage(m: impl Into<String>) -> Failure {
    Failure::Usage(m.into())
}

/// A refusal.
pub fn refused(m: impl Into<String>) -> Failure {
    Failure::Refused(m.into())
}

/// Prints a command's result (stdout) or its failure (stderr, after `hexrpc: COMMAND: `) and
/// returns the exit code.
pub fn finish(command: &str, result: Result<String, Failure>) -> std::process::ExitCode {
    match result {
        Ok(text) => crate::io::print(&text),
        Err(Failure::Usage(m)) => {
            eprintln!("hexrpc: {command}: {m}");
            std::process::ExitCode::from(2)
        }
        Err(Failure::Refused(m)) => {
            eprintln!("hexrpc: {command}: {m}");
            std::process::ExitCode::from(1)
        }
    }
}
