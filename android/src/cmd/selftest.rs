//! `hexrpc selftest`: the acceptance report, on the device or on the bench.

use std::process::ExitCode;

#[cfg(feature = "bench")]
use crate::checks;
use crate::cli::Usage;
use crate::selftest;
use crate::verdict::{Platform, Status};

/// Runs the acceptance report on the device or the bench and prints it.
pub fn selftest(
    json: bool,
    platform: Option<Platform>,
    seam_bench: bool,
    board: Option<String>,
    library: Option<std::path::PathBuf>,
) -> ExitCode {
    let platform = platform.unwrap_or_else(|| {
        if std::path::Path::new("/dev/adsprpc-smd").exists() || cfg!(not(feature = "bench")) {
            Platform::Device
        } else {
            Platform::Bench
        }
    });
    #[cfg(not(feature = "bench"))]
    if seam_bench || platform == Platform::Bench {
        return super::no_bench();
    }
    #[cfg(feature = "bench")]
    if platform == Platform::Bench {
        if let Some(name) = board.as_deref() {
            match super::bench_board(Some(name)) {
                Ok(b) => {
                    checks::set_board(b);
                }
                Err(Usage(msg)) => {
                    crate::io::error(&msg);
                    return ExitCode::from(2);
                }
            }
        }
    }
    let (seam, header, device_board) = if seam_bench || platform == Platform::Bench {
        #[cfg(not(feature = "bench"))]
        unreachable!("refused above");
        #[cfg(feature = "bench")]
        (
            selftest::DeviceSeam::Bench,
            " through the BENCH SEAM (test: the bench stands in for the nodes; simulated kernel and DSP, not device figures)".to_string(),
            None,
        )
    } else {
        match super::device_board(board.as_deref()) {
            Ok((b, source)) => (selftest::DeviceSeam::Real(b, source), format!(" (board {})", b.name), Some(b.name)),
            Err(Usage(msg)) => {
                crate::io::error(&msg);
                return ExitCode::from(2);
            }
        }
    };
    // A --library that cannot be read is the caller's mistake (exit 2, as probe and run say),
    // never a silent fall-back to the bench's model.
    if let Some(p) = library.as_deref() {
        if let Err(e) = crate::io::read_bounded(p, crate::io::MAX_LIBRARY_FILE) {
            crate::io::error(&format!("--library {}: {e}", crate::io::escape(&p.to_string_lossy())));
            return ExitCode::from(2);
        }
    }
    let library = match (platform, seam_bench, library.as_deref()) {
        // On the bench the built library is used only when given; otherwise the checks fall
        // back to the scripted model of the same kernel.
        (Platform::Bench, _, None) | (Platform::Device, true, None) => Err("no built library given".into()),
        (_, _, path) => super::device_library(path),
    };
    // Several checks provoke failures on purpose (a deadline passing, refused requests); their
    // warnings are expected and the report states each outcome, so at the default level only
    // errors are logged while the checks run (-v shows everything).
    let level = log::max_level();
    if level == log::LevelFilter::Warn {
        log::set_max_level(log::LevelFilter::Error);
    }
    let checks = {
        let mut progress = crate::progress::Progress::new();
        selftest::run(platform, seam, library, &mut |name| progress.step(name))
    };
    log::set_max_level(level);
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    let code = crate::io::print(&if json {
        selftest::to_json(platform, device_board, &checks)
    } else {
        selftest::to_text(platform, &header, &checks)
    });
    if failed {
        ExitCode::from(1)
    } else {
        code
    }
}
