//! `hexrpc report`: one archive to attach to a bug (probe, selftest, kernel version and log,
//! versions, and `hexrpc model check` of each `--model` file).

use std::process::ExitCode;

use crate::cli::Usage;
use crate::verdict::Platform;
use crate::{device, human, probe, report, selftest};

/// Runs the probe and the selftest and writes the archive.
pub fn report(
    output: Option<std::path::PathBuf>,
    board: Option<String>,
    library: Option<std::path::PathBuf>,
    models: Vec<std::path::PathBuf>,
) -> ExitCode {
    let (b, source) = match super::device_board(board.as_deref()) {
        Ok(b) => b,
        Err(Usage(msg)) => {
            crate::io::error(&msg);
            return ExitCode::from(2);
        }
    };
    if let Some(p) = library.as_deref() {
        if let Err(e) = crate::io::read_bounded(p, crate::io::MAX_LIBRARY_FILE) {
            crate::io::error(&format!("--library {}: {e}", crate::io::escape(&p.to_string_lossy())));
            return ExitCode::from(2);
        }
    }
    let mut progress = crate::progress::Progress::new();
    progress.step("probe");
    let access = hexrpc_bsp::DeviceAccess::for_device(b);
    let lib = super::device_library(library.as_deref()).ok();
    let probe_lib = lib.as_ref().map(|l| probe::ProbeLibrary { name: device::NAME.into(), image: l.image });
    let probe_report = probe::run(hexrpc_drivers::RustixSys, &access, source, probe::Host::Real, probe_lib.as_ref());
    // Always this machine's DSP: a report exists to show what fails here, so a missing node
    // is reported as the device checks' failures, never covered by a passing bench run.
    let platform = Platform::Device;
    let library = super::device_library(library.as_deref());
    let level = log::max_level();
    if level == log::LevelFilter::Warn {
        log::set_max_level(log::LevelFilter::Error);
    }
    let checks = selftest::run(platform, selftest::DeviceSeam::Real(b, source), library, &mut |name| progress.step(name));
    log::set_max_level(level);
    progress.step("kernel log");
    // Each model checked on this machine's DSP (`model check --json`, or why it could not be).
    let checked: Vec<(String, Vec<u8>)> = models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            progress.step("model check");
            (format!("hexrpc-report/model-check-{}.json", i + 1), super::model::check_json(m, board.as_deref()).into_bytes())
        })
        .collect();
    let mut members: Vec<(&str, Vec<u8>)> = vec![
        ("hexrpc-report/probe.json", probe::to_json(&probe_report).into_bytes()),
        ("hexrpc-report/selftest.json", selftest::to_json(platform, Some(b.name), &checks).into_bytes()),
        ("hexrpc-report/kernel.txt", std::fs::read("/proc/version").unwrap_or_else(|e| format!("/proc/version: {e}\n").into_bytes())),
        ("hexrpc-report/dmesg.txt", report::dmesg_lines().into_bytes()),
        ("hexrpc-report/versions.txt", report::versions().into_bytes()),
    ];
    members.extend(checked.iter().map(|(name, bytes)| (name.as_str(), bytes.clone())));
    drop(progress);
    let mtime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let archive = report::tar(&members, mtime);
    let out = crate::io::Output::from_arg(output.unwrap_or_else(|| "hexrpc-report.tar".into()));
    let code = crate::io::emit(&out, &archive);
    if code == ExitCode::SUCCESS {
        if let crate::io::Output::File(p) = &out {
            eprintln!(
                "hexrpc: report written to {} ({}); {}",
                crate::io::escape(&p.to_string_lossy()),
                human::bytes(archive.len() as u64),
                crate::io::escape(&probe_report.summary())
            );
        }
    }
    code
}
