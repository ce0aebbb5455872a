//! `hexrpc probe`: the step-by-step health check of the DSP prerequisites.

use std::process::ExitCode;

#[cfg(feature = "bench")]
use crate::checks;
use crate::cli::Usage;
use crate::probe;

/// Reads a library image for the probe (kept for the life of the process: images are `'static`).
fn load_library(path: &std::path::Path) -> Result<probe::ProbeLibrary, String> {
    let bytes = crate::io::read_bounded(path, crate::io::MAX_LIBRARY_FILE)
        .map_err(|e| format!("--library {}: {e}", crate::io::escape(&path.to_string_lossy())))?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(32).collect();
    if name.is_empty() {
        return Err(format!("--library {}: cannot derive a library name from the file name", path.display()));
    }
    Ok(probe::ProbeLibrary { name, image: Box::leak(bytes.into_boxed_slice()) })
}

/// `probe --bench`.
#[cfg(feature = "bench")]
fn bench_probe(board: Option<&str>, library: Option<probe::ProbeLibrary>) -> Result<probe::Report, ExitCode> {
    let board = match super::bench_board(board) {
        Ok(b) => b,
        Err(Usage(msg)) => {
            crate::io::error(&msg);
            return Err(ExitCode::from(2));
        }
    };
    checks::set_board(board);
    let Some(access) = hexrpc_bsp::DeviceAccess::for_bench_board(board) else {
        crate::io::error(&format!("{} is not a bench board", board.name));
        return Err(ExitCode::from(2));
    };
    let sys = checks::bench();
    let lib = library.unwrap_or(probe::ProbeLibrary { name: checks::MODEL.into(), image: checks::image() });
    Ok(probe::run(sys, &access, probe::BoardSource::Bench, probe::Host::Bench, Some(&lib)))
}

#[cfg(not(feature = "bench"))]
fn bench_probe(_: Option<&str>, _: Option<probe::ProbeLibrary>) -> Result<probe::Report, ExitCode> {
    Err(super::no_bench())
}

/// What `hexrpc probe` was asked.
pub struct ProbeArgs {
    /// `--json`.
    pub json: bool,
    /// `--board`.
    pub board: Option<String>,
    /// `--output`.
    pub output: Option<std::path::PathBuf>,
    /// `--bench`: probe the isolated bench.
    pub bench: bool,
    /// `--seam bench`: the device probe with the bench standing in for the nodes (a test seam).
    pub seam_bench: bool,
    /// `--library`.
    pub library: Option<std::path::PathBuf>,
    /// `--root`: where the installed device test library is looked for.
    pub root: Option<std::path::PathBuf>,
}

/// The library the device probe loads: `--library`, else the shipped device test library
/// (installed by the .deb or the vendor module), else none (the step says where it looked).
fn device_probe_library(a: &ProbeArgs, given: Option<probe::ProbeLibrary>) -> Result<Option<probe::ProbeLibrary>, String> {
    if given.is_some() {
        return Ok(given);
    }
    match super::device_library_in(a.root.as_deref(), None) {
        Ok(lib) => {
            log::info!("library step: the shipped device test library {}", lib.origin);
            Ok(Some(probe::ProbeLibrary { name: crate::device::NAME.into(), image: lib.image }))
        }
        Err(why) => {
            log::info!("library step not run: {why}");
            Ok(None)
        }
    }
}

/// Runs the probe on the device or the bench and writes its report.
pub fn probe(a: ProbeArgs) -> ExitCode {
    let given = match a.library.as_deref().map(load_library).transpose() {
        Ok(l) => l,
        Err(msg) => {
            crate::io::error(&msg);
            return ExitCode::from(2);
        }
    };
    let report = if a.bench {
        match bench_probe(a.board.as_deref(), given) {
            Ok(r) => r,
            Err(code) => return code,
        }
    } else {
        let library = match device_probe_library(&a, given) {
            Ok(l) => l,
            Err(msg) => {
                crate::io::error(&msg);
                return ExitCode::from(2);
            }
        };
        if a.seam_bench {
            match seam_probe(library) {
                Ok(r) => r,
                Err(code) => return code,
            }
        } else {
            let (board, source) = match super::device_board(a.board.as_deref()) {
                Ok(b) => b,
                Err(Usage(msg)) => {
                    crate::io::error(&msg);
                    return ExitCode::from(2);
                }
            };
            // The one place this program decides to touch the device.
            let access = hexrpc_bsp::DeviceAccess::for_device(board);
            probe::run(hexrpc_drivers::RustixSys, &access, source, probe::Host::Real, library.as_ref())
        }
    };
    let text = if a.json { probe::to_json(&report) } else { probe::to_text(&report) };
    let code = crate::io::emit(&a.output.map(crate::io::Output::from_arg).unwrap_or(crate::io::Output::Stdout), text.as_bytes());
    if report.failed() {
        ExitCode::from(1)
    } else {
        code
    }
}

/// `probe --seam bench`: the device probe's steps, the bench standing in for the nodes; the
/// library (the shipped or given device test library) runs as Hexagon code under the bench's
/// executor.
#[cfg(feature = "bench")]
fn seam_probe(library: Option<probe::ProbeLibrary>) -> Result<probe::Report, ExitCode> {
    let choice = match &library {
        Some(l) => Ok(crate::device::DeviceLibrary { image: l.image, origin: l.name.clone() }),
        None => Err("no device test library".to_string()),
    };
    let (target, _) = checks::bench_device_setup(choice);
    Ok(probe::run((target.make)(), &target.access, probe::BoardSource::Bench, probe::Host::Bench, library.as_ref()))
}

#[cfg(not(feature = "bench"))]
fn seam_probe(_: Option<probe::ProbeLibrary>) -> Result<probe::Report, ExitCode> {
    Err(super::no_bench())
}
