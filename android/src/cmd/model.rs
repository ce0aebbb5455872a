//! `hexrpc model`: a model file on the device or on the bench.
//!
//! ```text
//! hexrpc model info  FILE [--json]
//! hexrpc model run   FILE [--input NAME=FILE.npy]... [--output NAME=FILE.npy]... [--runs N]
//!                         [--deadline-ms MS] [--bench | --device] [--json]
//! hexrpc model bench FILE [--runs N] [--bench | --device] [--json]
//! hexrpc model check FILE [--bench | --device] [--json]
//! hexrpc model sample OUT.hxm [--size N]          (bench builds)
//! ```
//!
//! `info` validates the whole file (no session) and prints its provenance and its I/O table.
//! `run` opens it on a session, feeds every input from a `.npy` file (each checked against the
//! input's dtype and shape before the session starts), runs N times and writes the outputs
//! asked for. `bench` runs it on zeros and reports the time per run; `check` opens it and runs
//! it once on zeros (device bring-up, and the report tarball). On the bench, libraries that are
//! Hexagon code run under qemu-hexagon in the executor's DSP shell; the bench's sample model
//! (`model sample`) runs on the bench's own library models. No figure measured on the bench is a
//! device figure, and the report says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hexrpc_drivers::Syscalls;
use hexrpc_model::npy::{read_npy, write_npy};
use hexrpc_model::run::{LoadedModel, Tensor};
use hexrpc_model::{DType, Direction, Limits, ModelFile};
#[cfg(feature = "bench")]
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

use super::{refused, usage, Failure};
use crate::cli::{Mode, ModelArgs};
use crate::json;

/// Largest model file read.
pub const MAX_MODEL: u64 = 2 << 30;
/// Largest `.npy` file read.
pub const MAX_NPY: u64 = 1 << 30;
/// Most runs `--runs` allows.
pub const MAX_RUNS: u32 = 1_000_000;

fn read(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>, Failure> {
    crate::io::read_bounded(path, limit).map_err(|e| refused(format!("{what} {}: {e}", crate::io::escape(&path.to_string_lossy()))))
}

fn shape_text(shape: &[u64]) -> String {
    format!("[{}]", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `info`: the file validated whole, its provenance and I/O table.
fn info(file: &Path, json_out: bool) -> Result<String, Failure> {
    let bytes = read(file, MAX_MODEL, "model")?;
    let m = ModelFile::parse(&bytes, &Limits::DEFAULT).map_err(|e| refused(format!("{}: {e}", file.display())))?;
    let p = m.provenance();
    let libs: Vec<(String, usize, usize, bool, bool)> = m
        .libraries()
        .map(|l| (l.name.to_owned(), l.image.len(), l.record.kernels().count(), l.record.programs(), l.record.map_cache()))
        .collect();
    let arenas: u64 = m.arenas().map(|a| a.size).sum();
    let weights: u64 = m.init().filter_map(|r| r.bytes.map(|b| b.len() as u64)).sum();
    if json_out {
        let mut out = String::new();
        let mut o = json::Object::new(&mut out);
        o.str("file", &file.to_string_lossy())
            .num("format_minor", u64::from(m.minor_version()))
            .str("source", p.source_name)
            .str("source_sha256", &hex(p.source_digest))
            .str("tinygrad", p.tinygrad_version)
            .str("hexrpc", p.hexrpc_version)
            .str("arch", &format!("v{:x}", m.arch()))
            .num("launches", m.launches() as u64)
            .num("steps", m.steps().len() as u64)
            .num("arena_bytes", arenas)
            .num("weight_bytes", weights)
            .raw("libraries", |s| {
                s.push('[');
                for (i, (name, len, kernels, programs, cache)) in libs.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    let mut lo = json::Object::new(s);
                    lo.str("name", name)
                        .num("bytes", *len as u64)
                        .num("kernels", *kernels as u64)
                        .bool("programs", *programs)
                        .bool("map_cache", *cache);
                    lo.end();
                }
                s.push(']');
            })
            .raw("io", |s| {
                s.push('[');
                for (i, io) in m.io().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    let mut t = json::Object::new(s);
                    t.str("name", io.name)
                        .str("direction", if io.direction == Direction::Input { "input" } else { "output" })
                        .str("dtype", io.dtype.name())
                        .raw("shape", |s| s.push_str(&shape_text(&io.dims().collect::<Vec<_>>()).replace(' ', "")))
                        .num("bytes", io.len);
                    t.end();
                }
                s.push(']');
            });
        o.end();
        out.push('\n');
        return Ok(out);
    }
    let mut out = format!(
        "{}: hexrpc model, format 1.{}\n  source:    {} (sha256 {})\n  exported:  tinygrad {}, hexrpc {}\n  \
         libraries: {} for Hexagon v{:x}; {} launches in {} step(s)\n  memory:    {} bytes of arenas ({} of weights)\n",
        file.display(),
        m.minor_version(),
        if p.source_name.is_empty() { "(none)" } else { p.source_name },
        hex(p.source_digest),
        if p.tinygrad_version.is_empty() { "-" } else { p.tinygrad_version },
        p.hexrpc_version,
        libs.len(),
        m.arch(),
        m.launches(),
        m.steps().len(),
        arenas,
        weights,
    );
    for (name, len, kernels, programs, cache) in &libs {
        out.push_str(&format!(
            "    {name}: {len} bytes, {kernels} kernels{}{}\n",
            if *programs { ", programs" } else { ", no programs (export again with this hexrpc)" },
            if *cache { ", map cache" } else { "" }
        ));
    }
    out.push_str("  inputs and outputs:\n");
    for io in m.io() {
        out.push_str(&format!(
            "    {:<6} {:<24} {:<8} {:<20} {} bytes\n",
            if io.direction == Direction::Input { "input" } else { "output" },
            io.name,
            io.dtype.name(),
            shape_text(&io.dims().collect::<Vec<_>>()),
            io.len
        ));
    }
    Ok(out)
}

/// The inputs of `run`: each `NAME=FILE.npy` read and checked against the model's input before
/// any session starts. Every input needs one (`zeros`: inputs without one are zeros instead).
fn inputs(file: &ModelFile<'_>, given: &[String], zeros: bool) -> Result<Vec<Vec<u8>>, Failure> {
    let mut specs: Vec<(&str, &str)> = Vec::new();
    for g in given {
        let (name, path) = g.split_once('=').ok_or_else(|| usage(format!("--input {g:?}: expected NAME=FILE.npy")))?;
        if specs.iter().any(|(n, _)| *n == name) {
            return Err(usage(format!("--input {name}: given twice")));
        }
        specs.push((name, path));
    }
    let ins: Vec<hexrpc_model::Io<'_>> = file.io().filter(|io| io.direction == Direction::Input).collect();
    for (name, _) in &specs {
        if !ins.iter().any(|io| io.name == *name) {
            let names: Vec<&str> = ins.iter().map(|io| io.name).collect();
            return Err(usage(format!("--input {name}: the model has no input {name:?} (its inputs: {})", names.join(", "))));
        }
    }
    let mut out = Vec::with_capacity(ins.len());
    for io in &ins {
        let dims: Vec<u64> = io.dims().collect();
        match specs.iter().find(|(n, _)| *n == io.name) {
            Some((name, path)) => {
                let bytes = crate::io::read_bounded(Path::new(path), MAX_NPY).map_err(|e| usage(format!("--input {name}={path}: {e}")))?;
                let a = read_npy(&bytes).map_err(|e| usage(format!("--input {name}={path}: {e}")))?;
                if a.dtype != io.dtype {
                    return Err(usage(format!(
                        "--input {name}={path}: dtype {} where the model's input is {}",
                        a.dtype.name(),
                        io.dtype.name()
                    )));
                }
                if a.shape != dims {
                    return Err(usage(format!(
                        "--input {name}={path}: shape {} where the model's input is {}",
                        shape_text(&a.shape),
                        shape_text(&dims)
                    )));
                }
                out.push(a.data);
            }
            None if zeros => out.push(vec![0u8; io.len as usize]),
            None => return Err(usage(format!("missing --input {}=FILE.npy ({} {})", io.name, io.dtype.name(), shape_text(&dims)))),
        }
    }
    Ok(out)
}

/// `--output NAME=FILE.npy`: checked against the model's outputs.
fn outputs(file: &ModelFile<'_>, given: &[String]) -> Result<Vec<(String, PathBuf)>, Failure> {
    let outs: Vec<&str> = file.io().filter(|io| io.direction == Direction::Output).map(|io| io.name).collect();
    let mut specs: Vec<(String, PathBuf)> = Vec::new();
    for g in given {
        let (name, path) = g.split_once('=').ok_or_else(|| usage(format!("--output {g:?}: expected NAME=FILE.npy")))?;
        if !outs.contains(&name) {
            return Err(usage(format!("--output {name}: the model has no output {name:?} (its outputs: {})", outs.join(", "))));
        }
        if specs.iter().any(|(n, _)| n == name) {
            return Err(usage(format!("--output {name}: given twice")));
        }
        specs.push((name.to_owned(), PathBuf::from(path)));
    }
    Ok(specs)
}

/// What the runs measured.
struct Measured {
    open: Duration,
    runs: Vec<Duration>,
    calls_per_run: usize,
    launches: usize,
    call_bytes: usize,
    dsp_us: u64,
    outputs: Vec<(Tensor, Vec<u8>)>,
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Opens the model on `served` and runs it `runs` times.
fn execute<S: Syscalls + Clone + Send + Sync + 'static>(
    served: &ServedSession<S>,
    bytes: &[u8],
    ins: &[Vec<u8>],
    runs: u32,
    deadline: Option<Duration>,
) -> Result<Measured, Failure> {
    let t0 = Instant::now();
    let mut model = LoadedModel::open(served, bytes).map_err(|e| refused(format!("opening the model: {e}")))?;
    let open = t0.elapsed();
    let in_refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<Vec<u8>> = model.outputs().iter().map(|t| vec![0u8; t.len as usize]).collect();
    let mut times = Vec::with_capacity(runs as usize);
    let mut dsp_us = 0;
    for n in 0..runs {
        let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        let t = Instant::now();
        let r = model.run(&in_refs, &mut out_refs, deadline).map_err(|e| refused(format!("run {} of {runs}: {e}", n + 1)))?;
        times.push(t.elapsed());
        dsp_us += r.dsp_micros;
        if !served.session().is_healthy() {
            return Err(refused(format!("run {} of {runs}: the DSP restarted during the run; no result is reported", n + 1)));
        }
    }
    let outputs = model.outputs().iter().cloned().zip(outs).collect();
    Ok(Measured {
        open,
        runs: times,
        calls_per_run: model.calls_per_run(),
        launches: model.launches(),
        call_bytes: model.call_bytes_per_run(),
        dsp_us,
        outputs,
    })
}

/// A session on the device (detected board) or on the bench, and the model run on it.
fn on_session(
    mode: Mode,
    board: Option<&str>,
    bytes: &[u8],
    ins: &[Vec<u8>],
    runs: u32,
    deadline: Option<Duration>,
) -> Result<Measured, Failure> {
    match mode {
        Mode::Bench => bench_execute(bytes, ins, runs, deadline),
        Mode::Device => {
            let served = super::device_session_on(board).map_err(|(u, m)| if u { usage(m) } else { refused(m) })?;
            execute(&served, bytes, ins, runs, deadline)
        }
    }
}

/// `--bench`: a bench whose DSP knows the catalogue's library models (the sample model's); a
/// library that is Hexagon code runs under qemu-hexagon.
#[cfg(feature = "bench")]
fn bench_execute(bytes: &[u8], ins: &[Vec<u8>], runs: u32, deadline: Option<Duration>) -> Result<Measured, Failure> {
    let config = hexrpc_bench::BenchConfig::from_env().map_err(|e| usage(e.to_string()))?;
    let bench = hexrpc_bench::Bench::with_config(config);
    hexrpc_scenarios::catalogue::register_sample_model(&bench);
    let policy = FilePolicy::for_board(bench.board()).map_err(|e| refused(format!("bench file policy: {e:?}")))?;
    let served = ServedSession::start(bench.clone(), &hexrpc_bsp::DeviceAccess::for_bench(), policy)
        .map_err(|e| refused(format!("starting the bench session: {e}")))?;
    execute(&served, bytes, ins, runs, deadline).map_err(|f| match (f, bench.last_restart()) {
        (Failure::Refused(m), Some(why)) => refused(format!("{m}; the bench recorded why: {why}")),
        (f, _) => f,
    })
}

#[cfg(not(feature = "bench"))]
fn bench_execute(_: &[u8], _: &[Vec<u8>], _: u32, _: Option<Duration>) -> Result<Measured, Failure> {
    Err(refused("this build has no bench: the vendor build leaves the `bench` feature off"))
}

/// Where to run: `--bench`, `--device`, else the device when its node exists.
fn mode_of(mode: Option<Mode>) -> Result<Mode, Failure> {
    match mode {
        Some(m) => Ok(m),
        None if Path::new("/dev/adsprpc-smd").exists() || Path::new("/dev/fastrpc-cdsp").exists() => Ok(Mode::Device),
        None => Err(refused("no DSP on this machine (/dev/adsprpc-smd is missing); add --bench to run on the bench")),
    }
}

/// A few values of an output, for the terminal.
fn preview(t: &Tensor, bytes: &[u8]) -> String {
    let n = 8;
    let vals: Vec<String> = match t.dtype {
        DType::F32 => bytes.chunks_exact(4).take(n).map(|c| format!("{}", f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        DType::F64 => bytes.chunks_exact(8).take(n).map(|c| format!("{}", f64::from_le_bytes(c.try_into().unwrap_or_default()))).collect(),
        DType::U8 | DType::Bool => bytes.iter().take(n).map(u8::to_string).collect(),
        DType::I8 => bytes.iter().take(n).map(|b| (*b as i8).to_string()).collect(),
        DType::I32 => bytes.chunks_exact(4).take(n).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).to_string()).collect(),
        _ => bytes.iter().take(n).map(|b| format!("{b:02x}")).collect(),
    };
    let more = if bytes.len() / t.dtype.size() > n { ", ..." } else { "" };
    format!("[{}{more}]", vals.join(", "))
}

fn report(what: &str, file: &Path, mode: Mode, m: &Measured, written: &[(String, PathBuf, usize)], json_out: bool) -> String {
    let mut sorted = m.runs.clone();
    sorted.sort_unstable();
    let us = |d: Duration| (d.as_secs_f64() * 1e7).round() / 10.0;
    let (p50, p99) = (us(percentile(&sorted, 50)), us(percentile(&sorted, 99)));
    let mode_name = if mode == Mode::Bench { "bench" } else { "device" };
    if json_out {
        let mut out = String::new();
        let mut o = json::Object::new(&mut out);
        o.str("command", what)
            .str("file", &file.to_string_lossy())
            .str("mode", mode_name)
            .float("open_ms", (m.open.as_secs_f64() * 1e4).round() / 10.0)
            .num("runs", m.runs.len() as u64)
            .num("launches_per_run", m.launches as u64)
            .num("calls_per_run", m.calls_per_run as u64)
            .num("call_bytes_per_run", m.call_bytes as u64)
            .float("run_us_p50", p50)
            .float("run_us_p99", p99)
            .num("dsp_us_total", m.dsp_us)
            .raw("outputs", |s| {
                s.push('[');
                for (i, (name, path, bytes)) in written.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    let mut w = json::Object::new(s);
                    w.str("name", name).str("file", &path.to_string_lossy()).num("bytes", *bytes as u64);
                    w.end();
                }
                s.push(']');
            });
        o.end();
        out.push('\n');
        return out;
    }
    let mut out = format!(
        "{what} {} ({mode_name}): opened in {:.1} ms; {} runs of {} launches in {} FastRPC call(s) each, {} bytes copied into the \
         kernel per run beyond the inputs\n  time per run: p50 {p50:.1} us, p99 {p99:.1} us\n",
        file.display(),
        m.open.as_secs_f64() * 1e3,
        m.runs.len(),
        m.launches,
        m.calls_per_run,
        m.call_bytes,
    );
    if mode == Mode::Bench {
        out.push_str("  (bench: simulated DSP, or Hexagon code under qemu-hexagon; host wall time, not device figures)\n");
    }
    for (t, bytes) in &m.outputs {
        out.push_str(&format!("  output {} {}{}: {}\n", t.name, t.dtype.name(), shape_text(&t.shape), preview(t, bytes)));
    }
    for (name, path, bytes) in written {
        out.push_str(&format!("  wrote {name} ({bytes} bytes) to {}\n", path.display()));
    }
    out
}

fn parse_count(v: Option<&str>, what: &str, default: u32) -> Result<u32, Failure> {
    match v {
        None => Ok(default),
        Some(s) => match s.parse::<u32>() {
            Ok(n) if (1..=MAX_RUNS).contains(&n) => Ok(n),
            _ => Err(usage(format!("{what} {s:?}: a whole number from 1 to {MAX_RUNS}"))),
        },
    }
}

fn run_like(a: &ModelArgs, what: &str) -> Result<String, Failure> {
    run_on(a, what, None)
}

/// [`run_like`] on the device board named `board` (`None`: detected).
fn run_on(a: &ModelArgs, what: &str, board: Option<&str>) -> Result<String, Failure> {
    let file = a.file.as_deref().ok_or_else(|| usage(format!("model {what} needs FILE")))?;
    let runs = parse_count(a.runs.as_deref(), "--runs", if what == "bench" { 100 } else { 1 })?;
    let deadline = match a.deadline_ms.as_deref() {
        None => None,
        Some(s) => match s.parse::<u64>() {
            Ok(ms) if ms > 0 => Some(Duration::from_millis(ms)),
            _ => return Err(usage(format!("--deadline-ms {s:?}: a whole number of milliseconds above 0"))),
        },
    };
    let bytes = read(file, MAX_MODEL, "model")?;
    // Everything checked before a session starts: the file whole, the inputs and outputs asked for.
    let m = ModelFile::parse(&bytes, &Limits::DEFAULT).map_err(|e| refused(format!("{}: {e}", file.display())))?;
    let ins = inputs(&m, &a.inputs, what != "run")?;
    let outs = outputs(&m, &a.outputs)?;
    let mode = mode_of(a.mode)?;
    let measured = on_session(mode, board, &bytes, &ins, runs, deadline)?;
    let mut written = Vec::new();
    for (name, path) in &outs {
        if let Some((t, data)) = measured.outputs.iter().find(|(t, _)| &t.name == name) {
            crate::io::write_atomic(path, &write_npy(t.dtype, &t.shape, data))
                .map_err(|e| refused(format!("--output {name}={}: {e}", crate::io::escape(&path.to_string_lossy()))))?;
            written.push((name.clone(), path.clone(), data.len()));
        }
    }
    Ok(report(what, file, mode, &measured, &written, a.json))
}

/// `model sample OUT`: the bench's sample model file.
#[cfg(feature = "bench")]
fn sample(a: &ModelArgs) -> Result<String, Failure> {
    let out = a.file.as_deref().ok_or_else(|| usage("model sample needs OUT.hxm"))?;
    let n = match a.size.as_deref() {
        None => 1024,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=1 << 20).contains(&n) => n,
            _ => return Err(usage(format!("--size {s:?}: a whole number from 1 to 1048576"))),
        },
    };
    let bytes = hexrpc_scenarios::catalogue::sample_model_file(n);
    crate::io::write_atomic(out, &bytes).map_err(|e| refused(format!("{}: {e}", crate::io::escape(&out.to_string_lossy()))))?;
    Ok(format!("wrote the bench's sample model ({} bytes, input x uint8[1, {n}]) to {}\n", bytes.len(), out.display()))
}

#[cfg(not(feature = "bench"))]
fn sample(_: &ModelArgs) -> Result<String, Failure> {
    Err(refused("this build has no bench: the vendor build leaves the `bench` feature off"))
}

/// Runs `hexrpc model`; prints the result (stdout) or the reason (stderr) and returns the exit
/// code.
pub fn model(a: ModelArgs) -> ExitCode {
    let what = a.action.clone().unwrap_or_default();
    let result = match what.as_str() {
        "info" => a.file.as_deref().ok_or_else(|| usage("model info needs FILE")).and_then(|f| info(f, a.json)),
        "run" | "bench" | "check" => run_like(&a, &what),
        "sample" => sample(&a),
        "" => Err(usage("model needs an action: info, run, bench, check or sample (try 'hexrpc model --help')")),
        other => Err(usage(format!("unknown model action '{other}': info, run, bench, check or sample"))),
    };
    super::finish("model", result)
}

/// `hexrpc model check FILE --device --json` as one JSON object for `hexrpc report`: the check's
/// report, or `{"command": "check", "file", "error"}` with why it could not run.
pub fn check_json(file: &Path, board: Option<&str>) -> String {
    let a = ModelArgs {
        action: Some("check".into()),
        file: Some(file.to_path_buf()),
        mode: Some(Mode::Device),
        json: true,
        ..ModelArgs::default()
    };
    match run_on(&a, "check", board) {
        Ok(text) => text,
        Err(Failure::Usage(m) | Failure::Refused(m)) => {
            let mut out = String::new();
            let mut o = json::Object::new(&mut out);
            o.str("command", "check").str("file", &file.to_string_lossy()).str("error", &m);
            o.end();
            out.push('\n');
            out
        }
    }
}
