//! `hexrpc`: diagnose and exercise the Hexagon compute DSP through FastRPC from `adb shell` or an
//! AGNOS shell, and run the acceptance report on the isolated bench where no DSP is present.
//!
//! [`cli`] parses the command line (its texts are in [`help`]); each command lives in its own
//! module under [`cmd`]; the engines they drive (the probe, the selftest and its checks, the
//! capture tap, the replay, the report archive, the figures) are the other modules.
#![forbid(unsafe_code)]
// Without the bench (the device build), the bench commands parse but refuse; the pieces only
// they use are then unused.
#![cfg_attr(not(feature = "bench"), allow(dead_code))]

mod abi;
mod capture;
#[cfg(feature = "bench")]
mod checks;
mod cli;
mod cmd;
mod device;
#[cfg(feature = "bench")]
mod figures;
mod help;
mod human;
mod io;
mod json;
mod logging;
mod man;
mod probe;
mod progress;
mod replay;
mod report;
mod selftest;
mod verdict;

use std::process::ExitCode;

use cli::{Command, Usage};

fn main() -> ExitCode {
    let (verbosity, command) = match cli::parse(std::env::args_os().skip(1).collect()) {
        Ok(x) => x,
        Err(Usage(msg)) => {
            eprintln!("hexrpc: {msg}");
            return ExitCode::from(2);
        }
    };
    let env_level = std::env::var("HEXRPC_LOG").ok();
    logging::init(logging::level(verbosity, env_level.as_deref()));
    if let Some(bad) = env_level.as_deref().filter(|v| logging::parse_level(v).is_none()) {
        log::warn!("HEXRPC_LOG={bad:?} is not a level (off, error, warn, info, debug, trace); using the default");
    }
    match command {
        Command::Help(topic) => match cli::help(topic.as_deref()) {
            Ok(text) => io::print(text),
            Err(Usage(msg)) => {
                eprintln!("hexrpc: {msg}");
                ExitCode::from(2)
            }
        },
        Command::Man => io::print(&man::page()),
        Command::Version => io::print(concat!("hexrpc ", env!("CARGO_PKG_VERSION"), "\n")),
        Command::Abi { json } => cmd::abi::abi(json),
        Command::BuildLib(args) => cmd::build_lib::build_lib(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Model(args) => cmd::model::model(args),
        Command::Bench { json, long } => cmd::bench::bench(json, long),
        Command::Replay { json, policy, files } => cmd::replay::replay(json, policy, &files),
        Command::Probe { json, board, output, bench, seam_bench, library, root } => {
            cmd::probe::probe(cmd::probe::ProbeArgs { json, board, output, bench, seam_bench, library, root })
        }
        Command::Selftest { json, platform, seam_bench, board, library } => {
            cmd::selftest::selftest(json, platform, seam_bench, board, library)
        }
        Command::Capture { dir, bench, board, library } => cmd::capture::capture(dir.unwrap_or_default(), bench, board, library),
        Command::Report { output, board, library, models } => cmd::report::report(output, board, library, models),
    }
}
