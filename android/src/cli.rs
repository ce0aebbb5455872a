//! The command line: global options, the arguments of each command, and the parser (lexopt).
//! Parsing checks only the shape of the command line; each command checks its own values.

use std::path::PathBuf;

use crate::help;
use crate::verdict::Platform;

/// Where to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The isolated bench with the Hexagon executor.
    Bench,
    /// The real device.
    Device,
}

/// The command line of `hexrpc run`, as parsed (not yet checked against the signature).
#[derive(Debug, Default)]
pub struct RunArgs {
    /// The library file.
    pub library: Option<PathBuf>,
    /// `--signature`.
    pub signature: Option<String>,
    /// `--abi`.
    pub abi: Option<String>,
    /// `--bench` / `--device` (the last one given).
    pub mode: Option<Mode>,
    /// `--arg`, in order.
    pub args: Vec<String>,
    /// `--repeat`.
    pub repeat: Option<String>,
    /// `--deadline-ms`.
    pub deadline_ms: Option<String>,
    /// `--json`.
    pub json: bool,
    /// `--capture DIR`: record the session's reverse-RPC requests there (`hexrpc capture`'s
    /// files).
    pub capture: Option<PathBuf>,
}

/// A usage error: the message for stderr (exit status 2).
/// `hexrpc model ACTION FILE [...]`.
#[derive(Debug, Default)]
pub struct ModelArgs {
    pub action: Option<String>,
    pub file: Option<PathBuf>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub runs: Option<String>,
    pub deadline_ms: Option<String>,
    pub size: Option<String>,
    pub mode: Option<Mode>,
    pub json: bool,
    /// `--per-kernel`: each kernel's DSP time.
    pub per_kernel: bool,
    /// `--count`: the bench's execution counts (emulated packets).
    pub count: bool,
    /// `--power LEVEL`: the DSP clock vote.
    pub power: Option<String>,
    /// `--no-pm-qos`: no PM-QoS vote.
    pub no_pm_qos: bool,
}

pub struct Usage(pub String);

/// The command line of `hexrpc build-lib`, as parsed.
#[derive(Default)]
pub struct BuildLibArgs {
    /// KERNEL.c (the first source).
    pub kernel: Option<std::path::PathBuf>,
    /// More kernel sources (a kernel table may come from several).
    pub more: Vec<std::path::PathBuf>,
    /// `--table [FILE:]NAME:SIG`, in table order.
    pub table: Vec<String>,
    /// `--signature`.
    pub signature: Option<String>,
    /// `-o`, `--output`.
    pub output: Option<std::path::PathBuf>,
    /// `--kernel`.
    pub kernel_name: Option<String>,
    /// `--v1`.
    pub v1: bool,
    /// `--power`.
    pub power: bool,
    /// `--cflag`, in order.
    pub cflags: Vec<std::ffi::OsString>,
    /// `--clang`.
    pub clang: Option<std::path::PathBuf>,
    /// `--lld`.
    pub lld: Option<std::path::PathBuf>,
    /// `--require-hvx`.
    pub require_hvx: bool,
}

impl<E: std::fmt::Display> From<E> for Usage {
    fn from(e: E) -> Self {
        Usage(e.to_string())
    }
}

/// What to do, as parsed from the command line.
pub enum Command {
    Help(Option<String>),
    /// `hexrpc help --man`: the manual page.
    Man,
    Version,
    Abi {
        json: bool,
    },
    Probe {
        json: bool,
        board: Option<String>,
        output: Option<std::path::PathBuf>,
        bench: bool,
        seam_bench: bool,
        library: Option<std::path::PathBuf>,
        root: Option<std::path::PathBuf>,
    },
    BuildLib(BuildLibArgs),
    Replay {
        json: bool,
        policy: Option<std::path::PathBuf>,
        files: Vec<std::path::PathBuf>,
    },
    Bench {
        json: bool,
        long: bool,
    },
    Capture {
        dir: Option<std::path::PathBuf>,
        bench: bool,
        board: Option<String>,
        library: Option<std::path::PathBuf>,
    },
    Report {
        output: Option<std::path::PathBuf>,
        board: Option<String>,
        library: Option<std::path::PathBuf>,
        models: Vec<std::path::PathBuf>,
    },
    Run(RunArgs),
    Model(ModelArgs),
    Selftest {
        json: bool,
        platform: Option<Platform>,
        seam_bench: bool,
        board: Option<String>,
        library: Option<std::path::PathBuf>,
    },
}

/// Parses the arguments after the program name: the verbosity (`-v` minus `-q`) and the command.
pub fn parse(args: Vec<std::ffi::OsString>) -> Result<(i32, Command), Usage> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut verbosity = 0i32;
    let mut command: Option<String> = None;
    while command.is_none() {
        match p.next()? {
            Some(Short('v') | Long("verbose")) => verbosity += 1,
            Some(Short('q') | Long("quiet")) => verbosity -= 1,
            Some(Short('h') | Long("help")) => return Ok((verbosity, Command::Help(None))),
            Some(Short('V') | Long("version")) => return Ok((verbosity, Command::Version)),
            Some(Value(v)) => command = Some(v.string()?),
            Some(arg) => return Err(arg.unexpected().into()),
            None => return Err(Usage("no command given (try 'hexrpc help')".into())),
        }
    }
    let command = command.unwrap_or_default();
    let mut json = false;
    let mut platform = None;
    let mut topic = None;
    let mut man = false;
    let mut board = None;
    let mut output = None;
    let mut bl = BuildLibArgs::default();
    let mut policy = None;
    let mut files = Vec::new();
    let mut long = false;
    let mut library = None;
    let mut probe_bench = false;
    let mut seam_bench = false;
    let mut root: Option<std::path::PathBuf> = None;
    let mut ra = RunArgs::default();
    let mut ma = ModelArgs::default();
    let mut report_models: Vec<std::path::PathBuf> = Vec::new();
    // --bench and --device name where a command runs: giving both is a mistake, not "the last wins".
    let mut place: Option<&'static str> = None;
    while let Some(arg) = p.next()? {
        if let Long(flag @ ("bench" | "device")) = arg {
            if matches!(command.as_str(), "capture" | "probe" | "run" | "selftest" | "model") {
                let flag: &'static str = if flag == "bench" { "bench" } else { "device" };
                if place.is_some_and(|prev| prev != flag) {
                    return Err(Usage(format!("--bench and --device exclude each other (try 'hexrpc {command} --help')")));
                }
                place = Some(flag);
            }
        }
        match arg {
            Short('h') | Long("help") => return Ok((verbosity, Command::Help(Some(command)))),
            Short('v') | Long("verbose") => verbosity += 1,
            Short('q') | Long("quiet") => verbosity -= 1,
            Long("json") if matches!(command.as_str(), "abi" | "selftest" | "probe" | "reverse-replay" | "bench") => json = true,
            Long("long") if command == "bench" => long = true,
            Long("policy") if command == "reverse-replay" => policy = Some(p.value()?.into()),
            Value(v) if command == "reverse-replay" => files.push(v.into()),
            Long("board") if matches!(command.as_str(), "probe" | "selftest" | "capture" | "report") => board = Some(p.value()?.string()?),
            Long("library") if matches!(command.as_str(), "probe" | "selftest" | "capture" | "report") => library = Some(p.value()?.into()),
            Long("dir") if command == "capture" => output = Some(p.value()?.into()),
            Long("bench") if command == "capture" => probe_bench = true,
            Long("device") if command == "capture" => probe_bench = false,
            Short('o') | Long("output") if command == "report" => output = Some(p.value()?.into()),
            Long("model") if command == "report" => report_models.push(p.value()?.into()),
            Long("root") if command == "probe" => root = Some(p.value()?.into()),
            Long("seam") if matches!(command.as_str(), "selftest" | "probe") => match p.value()?.string()?.as_str() {
                "bench" => seam_bench = true,
                other => return Err(Usage(format!("--seam {other:?}: the only test seam is 'bench'"))),
            },
            Long("bench") if command == "probe" => probe_bench = true,
            Long("device") if command == "probe" => probe_bench = false,
            Long("output") if command == "probe" => output = Some(p.value()?.into()),
            Long("signature") if command == "build-lib" => bl.signature = Some(p.value()?.string()?),
            Short('o') | Long("output") if command == "build-lib" => bl.output = Some(p.value()?.into()),
            Long("kernel") if command == "build-lib" => bl.kernel_name = Some(p.value()?.string()?),
            Long("v1") if command == "build-lib" => bl.v1 = true,
            Long("power") if command == "build-lib" => bl.power = true,
            Long("cflag") if command == "build-lib" => bl.cflags.push(p.value()?),
            Long("clang") if command == "build-lib" => bl.clang = Some(p.value()?.into()),
            Long("lld") if command == "build-lib" => bl.lld = Some(p.value()?.into()),
            Long("table") if command == "build-lib" => bl.table.push(p.value()?.string()?),
            Long("require-hvx") if command == "build-lib" => bl.require_hvx = true,
            Value(v) if command == "build-lib" && bl.kernel.is_none() => bl.kernel = Some(v.into()),
            Long("signature") if command == "run" => ra.signature = Some(p.value()?.string()?),
            Long("abi") if command == "run" => ra.abi = Some(p.value()?.string()?),
            Long("bench") if command == "run" => ra.mode = Some(Mode::Bench),
            Long("device") if command == "run" => ra.mode = Some(Mode::Device),
            Long("arg") if command == "run" => ra.args.push(p.value()?.string()?),
            Long("repeat") if command == "run" => ra.repeat = Some(p.value()?.string()?),
            Long("deadline-ms") if command == "run" => ra.deadline_ms = Some(p.value()?.string()?),
            Long("json") if command == "run" => ra.json = true,
            Long("capture") if command == "run" => ra.capture = Some(p.value()?.into()),
            Value(v) if command == "run" && ra.library.is_none() => ra.library = Some(v.into()),
            Value(v) if command == "model" && ma.action.is_none() => ma.action = Some(v.string()?),
            Value(v) if command == "model" && ma.file.is_none() => ma.file = Some(v.into()),
            Long("input") if command == "model" => ma.inputs.push(p.value()?.string()?),
            Long("output") if command == "model" => ma.outputs.push(p.value()?.string()?),
            Long("runs") if command == "model" => ma.runs = Some(p.value()?.string()?),
            Long("deadline-ms") if command == "model" => ma.deadline_ms = Some(p.value()?.string()?),
            Long("size") if command == "model" => ma.size = Some(p.value()?.string()?),
            Long("bench") if command == "model" => ma.mode = Some(Mode::Bench),
            Long("device") if command == "model" => ma.mode = Some(Mode::Device),
            Long("json") if command == "model" => ma.json = true,
            Long("per-kernel") if command == "model" => ma.per_kernel = true,
            Long("count") if command == "model" => ma.count = true,
            Long("power") if command == "model" => ma.power = Some(p.value()?.string()?),
            Long("no-pm-qos") if command == "model" => ma.no_pm_qos = true,
            Value(v) if command == "build-lib" => bl.more.push(v.into()),
            Long("bench") if command == "selftest" => platform = Some(Platform::Bench),
            Long("device") if command == "selftest" => platform = Some(Platform::Device),
            Value(v) if command == "help" && topic.is_none() => topic = Some(v.string()?),
            Long("man") if command == "help" => man = true,
            arg => return Err(Usage(format!("{} (for '{command}')", arg.unexpected()))),
        }
    }
    let cmd = match command.as_str() {
        "help" if man => {
            if topic.is_some() {
                return Err(Usage("help --man prints the whole manual page: no COMMAND with it".into()));
            }
            Command::Man
        }
        "help" => Command::Help(topic),
        "abi" => Command::Abi { json },
        "probe" => {
            if seam_bench && probe_bench {
                return Err(Usage(
                    "--seam bench goes with the device probe (it substitutes the bench for the device nodes), not --bench".into(),
                ));
            }
            Command::Probe { json, board, output, bench: probe_bench, seam_bench, library, root }
        }
        "bench" => Command::Bench { json, long },
        "reverse-replay" => {
            if files.is_empty() {
                return Err(Usage("reverse-replay needs at least one REQUEST file".into()));
            }
            Command::Replay { json, policy, files }
        }
        "build-lib" => {
            if bl.table.is_empty() {
                if bl.kernel.is_none() || bl.signature.is_none() || bl.output.is_none() {
                    return Err(Usage("build-lib needs KERNEL.c, --signature SIG and -o LIB.so (try 'hexrpc build-lib --help')".into()));
                }
                if !bl.more.is_empty() {
                    return Err(Usage("build-lib takes one KERNEL.c, or several with --table".into()));
                }
            } else {
                if bl.kernel.is_none() || bl.output.is_none() {
                    return Err(Usage("build-lib --table needs KERNEL.c and -o LIB.so (try 'hexrpc build-lib --help')".into()));
                }
                if bl.signature.is_some() || bl.kernel_name.is_some() || bl.v1 {
                    return Err(Usage("--table names every kernel with its signature: no --signature, --kernel or --v1 with it".into()));
                }
            }
            Command::BuildLib(bl)
        }
        "run" => {
            if ra.library.is_none() {
                return Err(Usage("run needs LIBRARY.so (try 'hexrpc run --help')".into()));
            }
            Command::Run(ra)
        }
        "model" => Command::Model(ma),
        "capture" => {
            if output.is_none() {
                return Err(Usage("capture needs --dir DIR (try 'hexrpc capture --help')".into()));
            }
            Command::Capture { dir: output, bench: probe_bench, board, library }
        }
        "report" => Command::Report { output, board, library, models: report_models },
        "selftest" => {
            if seam_bench && platform != Some(Platform::Device) {
                return Err(Usage("--seam bench goes with --device (it substitutes the bench for the device nodes)".into()));
            }
            Command::Selftest { json, platform, seam_bench, board, library }
        }
        other => return Err(Usage(format!("unknown command '{other}' (try 'hexrpc help')"))),
    };
    Ok((verbosity, cmd))
}

/// The help text for `topic` (`None`: the program's).
pub fn help(topic: Option<&str>) -> Result<&'static str, Usage> {
    match topic {
        None | Some("help") => Ok(help::USAGE),
        Some(t) => help::COMMANDS
            .iter()
            .find(|(name, _)| *name == t)
            .map(|(_, text)| *text)
            .ok_or_else(|| Usage(format!("no help for unknown command '{t}'"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<std::ffi::OsString> {
        a.iter().map(|s| s.into()).collect()
    }

    #[test]
    fn parsing() {
        assert!(matches!(parse(args(&["abi", "--json"])), Ok((0, Command::Abi { json: true }))));
        assert!(matches!(
            parse(args(&["-vv", "selftest", "--bench"])),
            Ok((2, Command::Selftest { json: false, platform: Some(Platform::Bench), .. }))
        ));
        assert!(matches!(parse(args(&["selftest", "-h"])), Ok((_, Command::Help(Some(c)))) if c == "selftest"));
        assert!(parse(args(&["abi", "--bench"])).is_err());
        assert!(parse(args(&["frobnicate"])).is_err());
        assert!(parse(args(&[])).is_err());
        assert!(help(Some("nope")).is_err());
        assert!(matches!(parse(args(&["help", "--man"])), Ok((_, Command::Man))));
        assert!(parse(args(&["help", "run", "--man"])).is_err());
        assert!(parse(args(&["run", "--man"])).is_err());
    }
}
