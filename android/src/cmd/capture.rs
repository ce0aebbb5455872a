//! `hexrpc capture`: record the DSP's reverse-RPC requests of a session as request files.

use std::process::ExitCode;

#[cfg(feature = "bench")]
use crate::checks;
use crate::cli::Usage;
use crate::{capture, device};

/// `capture --bench`: the device test library's scripted model (or a given library) on the
/// bench.
#[cfg(feature = "bench")]
fn bench_capture(
    library: Option<&std::path::Path>,
    recorder: &'static capture::Recorder,
    exercise: bool,
) -> Result<Result<String, String>, ExitCode> {
    let choice = match library.map(|p| super::device_library(Some(p))).transpose() {
        Ok(Some(l)) => Ok(l),
        Ok(None) => Err("no built library given".to_string()),
        Err(e) => {
            crate::io::error(&e);
            return Err(ExitCode::from(1));
        }
    };
    // The library under the executor when it runs here, else the scripted model of its kernel.
    let (target, lib) = checks::bench_device_setup(choice);
    Ok(device::capture_session(&target, &lib, recorder, exercise))
}

#[cfg(not(feature = "bench"))]
fn bench_capture(_: Option<&std::path::Path>, _: &'static capture::Recorder, _: bool) -> Result<Result<String, String>, ExitCode> {
    Err(super::no_bench())
}

/// Runs a session with the tap installed and writes what the DSP requested into `dir`.
pub fn capture(dir: std::path::PathBuf, bench: bool, board: Option<String>, library: Option<std::path::PathBuf>) -> ExitCode {
    // The directory is checked before the session runs (it is made only when the files are
    // written): a new or empty directory, not a symbolic link.
    if let Err(e) = crate::io::check_empty_dir(&dir) {
        crate::io::error(&format!("capture: --dir {} {e}", crate::io::escape(&dir.to_string_lossy())));
        return ExitCode::from(2);
    }
    // The tap lives as long as the service, which needs it for 'static: leaked once per process.
    let recorder: &'static capture::Recorder = Box::leak(Box::default());
    let given = library.is_some();
    let ran = if bench {
        match bench_capture(library.as_deref(), recorder, !given) {
            Ok(r) => r,
            Err(code) => return code,
        }
    } else {
        let board = match super::device_board(board.as_deref()) {
            Ok((b, _)) => b,
            Err(Usage(msg)) => {
                crate::io::error(&msg);
                return ExitCode::from(2);
            }
        };
        let lib = match super::device_library(library.as_deref()) {
            Ok(l) => l,
            Err(e) => {
                crate::io::error(&e);
                return ExitCode::from(1);
            }
        };
        let target = device::Target {
            make: Box::new(|| hexrpc_drivers::RustixSys),
            access: hexrpc_bsp::DeviceAccess::for_device(board),
            on_served: Box::new(|_, _| {}),
        };
        device::capture_session(&target, &lib, recorder, !given)
    };
    // What was recorded is written even when the session failed: that is the interesting case.
    let written = recorder.write(&dir);
    let code = match &written {
        Ok((n, dropped)) => crate::io::print(&format!(
            "captured {n} reverse requests into {}{}; replay with: hexrpc reverse-replay {}/*.hxrq\n",
            crate::io::escape(&dir.to_string_lossy()),
            if *dropped > 0 { format!(" ({dropped} more dropped over the limit)") } else { String::new() },
            crate::io::escape(&dir.to_string_lossy())
        )),
        Err(e) => {
            crate::io::error(&format!("capture: {e}"));
            ExitCode::from(1)
        }
    };
    match ran {
        Ok(line) => {
            log::info!("capture session: {line}");
            code
        }
        Err(e) => {
            crate::io::error(&format!("capture: the session failed: {e}"));
            ExitCode::from(1)
        }
    }
}
