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
//! it once on zeros (device bring-up, and the report tarball). Each prints a tail-latency block:
//! p50, p99, p99.9 and max of one sample per run by the nearest-rank method (no interpolation; a
//! percentile that this few runs cannot tell from the max is marked as the max). On the bench it
//! has two rows, `simulated` (the bench's cost model of each run's FastRPC path) and `emulated`
//! (host wall time of each run); on a device one, `device` (wall time of each run there).
//!
//! On the bench, libraries that are Hexagon code run under qemu-hexagon in the executor's DSP
//! shell; the bench's sample model (`model sample`) runs on the bench's own library models. No
//! figure measured on the bench is a device figure, and the report says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hexrpc_drivers::Syscalls;
use hexrpc_hal::PmQosState;
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
    let libs: Vec<(String, usize, usize, bool, bool, bool, u32)> = m
        .libraries()
        .map(|l| {
            let r = &l.record;
            (l.name.to_owned(), l.image.len(), r.kernels().count(), r.programs(), r.map_cache(), r.power(), r.kernels_without_hvx())
        })
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
                for (i, (name, len, kernels, programs, cache, power, without_hvx)) in libs.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    let mut lo = json::Object::new(s);
                    lo.str("name", name)
                        .num("bytes", *len as u64)
                        .num("kernels", *kernels as u64)
                        .bool("programs", *programs)
                        .bool("map_cache", *cache)
                        .bool("power", *power)
                        .num("kernels_without_hvx", u64::from(*without_hvx));
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
    for (name, len, kernels, programs, cache, power, without_hvx) in &libs {
        out.push_str(&format!(
            "    {name}: {len} bytes, {kernels} kernels{}{}{}{}\n",
            if *without_hvx > 0 { format!(" ({without_hvx} compiled without HVX)") } else { String::new() },
            if *programs { ", programs" } else { ", no programs (export again with this hexrpc)" },
            if *cache { ", map cache" } else { "" },
            if *power { ", takes the DSP clock vote" } else { "" }
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
    /// Host wall time of each run.
    runs: Vec<Duration>,
    /// The bench's simulated time of each run (its cost model); empty on a device.
    simulated: Vec<Duration>,
    calls_per_run: usize,
    launches: usize,
    call_bytes: usize,
    dsp_us: u64,
    /// What became of the kernel's PM-QoS vote on the session's channel after the last run.
    pm_qos: PmQosState,
    /// The session's DSP clock vote, the library setup calls that failed, and (libraries whose
    /// entry takes the vote, libraries).
    power: (hexrpc_hal::DspPower, u32, (usize, usize)),
    /// With `--per-kernel`: each kernel's time, and the calls whose library did not time its
    /// records.
    kernels: Option<(Vec<KernelRow>, usize)>,
    /// With `--count` (bench only): what qemu-hexagon executed.
    counts: Option<CountSummary>,
    outputs: Vec<(Tensor, Vec<u8>)>,
}

/// What qemu-hexagon executed (the bench's execution counts, `--count`): emulated packets,
/// instructions and HVX instructions, never DSP time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counted {
    packets: u64,
    instructions: u64,
    hvx: u64,
}

impl Counted {
    fn plus(self, o: Counted) -> Counted {
        Counted { packets: self.packets + o.packets, instructions: self.instructions + o.instructions, hvx: self.hvx + o.hvx }
    }

    /// HVX instructions as a percentage of all instructions.
    fn hvx_percent(&self) -> f64 {
        if self.instructions == 0 {
            0.0
        } else {
            100.0 * self.hvx as f64 / self.instructions as f64
        }
    }
}

/// One invoke's counts on the bench: its method (5: a program), its total, and each kernel's in
/// run order (`None`: not split).
type InvokeCounted = (u32, Counted, Option<Vec<Counted>>);

/// `--count`: each run's counts, and per kernel name the counts over every run (with
/// `--per-kernel`, when each program call's kernels pair with the profile's records).
#[derive(Clone, Debug, Default)]
struct CountSummary {
    per_run: Vec<Counted>,
    per_kernel: std::collections::BTreeMap<String, Counted>,
}

/// One kernel of `--per-kernel`: its name, its records over every run and their microseconds
/// (rows sorted the most time first).
type KernelRow = (String, usize, u64);

/// What `run_on` asks of a session besides the runs: its latency policy, and whether each
/// kernel's DSP time is wanted.
#[derive(Clone, Copy, Debug)]
struct Ask {
    latency: hexrpc_hal::LatencyPolicy,
    per_kernel: bool,
    count: bool,
}

/// The percentiles of the tail-latency block, in tenths of a percent (per mille), with their
/// names: p50, p99, p99.9 and the max (p100).
const TAIL_POINTS: [(u32, &str); 4] = [(500, "p50"), (990, "p99"), (999, "p99.9"), (1000, "max")];

/// The nearest-rank percentile of `sorted` (ascending) at `per_mille` tenths of a percent
/// (1..=1000), with its rank (1-based): the smallest sample such that at least `per_mille`/1000
/// of the samples are less than or equal to it, i.e. the sample of rank ceil(per_mille × N / 1000).
/// No interpolation: every figure printed is one run's own time. `None` without samples.
fn nearest_rank(sorted: &[Duration], per_mille: u32) -> Option<(Duration, usize)> {
    let n = sorted.len() as u64;
    if n == 0 {
        return None;
    }
    let rank = (u64::from(per_mille.min(1000)) * n).div_ceil(1000).clamp(1, n);
    Some((sorted[(rank - 1) as usize], rank as usize))
}

/// The fewest samples for which the nearest-rank percentile at `per_mille` (below 1000) can differ
/// from the max: ceil(1000 / (1000 − per_mille)); 2 for p50, 100 for p99, 1,000 for p99.9.
fn runs_to_resolve(per_mille: u32) -> u64 {
    1000u64.div_ceil(1000 - u64::from(per_mille.min(999)))
}

/// One row of the tail-latency block: a label (`simulated`, `emulated` or `device`), what its
/// samples are, and p50, p99, p99.9 and max of one sample per run.
struct TailRow {
    label: &'static str,
    what: String,
    /// Each of [`TAIL_POINTS`]: its value and its rank among the samples.
    points: [(Duration, usize); 4],
    samples: usize,
}

impl TailRow {
    /// The row of `samples` (one per run, any order); `None` without samples.
    fn of(label: &'static str, what: String, samples: &[Duration]) -> Option<TailRow> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let mut points = [(Duration::ZERO, 0); 4];
        for (slot, (pm, _)) in points.iter_mut().zip(TAIL_POINTS) {
            *slot = nearest_rank(&sorted, pm)?;
        }
        Some(TailRow { label, what, points, samples: sorted.len() })
    }

    /// The names of the percentiles below the max whose rank is the last one: with this few runs
    /// they are the max, not a resolved tail.
    fn at_max(&self) -> Vec<&'static str> {
        TAIL_POINTS[..3].iter().zip(&self.points).filter(|(_, (_, rank))| *rank == self.samples).map(|((_, name), _)| *name).collect()
    }
}

/// The PM-QoS state in the JSON's words.
fn pm_qos_name(state: PmQosState) -> String {
    match state {
        PmQosState::NotAsked => "not_asked".into(),
        PmQosState::Sent => "sent".into(),
        PmQosState::NotAvailable => "not_available".into(),
        PmQosState::Refused(e) => format!("refused ({e})"),
    }
}

/// Microseconds to one decimal.
fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}

/// The cost model the bench charges a model run: the one of `hexrpc bench`'s simulated model
/// latency (per crossing, per KiB copied, per DSP map and unmap), in words.
#[cfg(feature = "bench")]
fn cost_model_text() -> String {
    let c = crate::figures::MODEL_COST;
    format!(
        "{} us/crossing + {} us/KiB copied + {} us/HAP_mmap + {} us/HAP_munmap",
        c.per_crossing.as_micros(),
        c.per_kib_copied.as_micros(),
        c.per_dsp_map.as_micros(),
        c.per_dsp_unmap.as_micros()
    )
}

#[cfg(not(feature = "bench"))]
fn cost_model_text() -> String {
    String::new()
}

/// The rows of the tail-latency block: on the bench `simulated` (the cost model's figure per
/// run) and `emulated` (host wall time per run), on a device `device` (wall time per run).
fn tail_rows(mode: Mode, m: &Measured) -> Vec<TailRow> {
    match mode {
        Mode::Bench => [
            TailRow::of(
                "simulated",
                format!("the bench's cost model per run: {}; kernel compute not modelled", cost_model_text()),
                &m.simulated,
            ),
            TailRow::of("emulated", "host wall time per run on this machine (Hexagon code under qemu-hexagon)".into(), &m.runs),
        ]
        .into_iter()
        .flatten()
        .collect(),
        Mode::Device => {
            TailRow::of("device", "wall time per run on this device, from the call to its return".into(), &m.runs).into_iter().collect()
        }
    }
}

/// The tail-latency block for the terminal: one line per row, what each row is, and which
/// percentiles this number of runs cannot tell from the max (marked `*`).
fn tail_text(rows: &[TailRow], out: &mut String) {
    let Some(first) = rows.first() else { return };
    out.push_str(&format!("  tail latency per run, us (nearest rank over {} runs):\n", first.samples));
    let mut line = format!("    {:<10}", "");
    for (_, name) in TAIL_POINTS {
        line.push_str(&format!(" {name:>12}"));
    }
    out.push_str(line.trim_end());
    out.push('\n');
    let mut marked: Vec<(u32, &str)> = Vec::new();
    for row in rows {
        let at_max = row.at_max();
        let mut line = format!("    {:<10}", row.label);
        for ((pm, name), (value, _)) in TAIL_POINTS.iter().zip(&row.points) {
            let mark = if at_max.contains(name) { "*" } else { " " };
            line.push_str(&format!(" {:>11.1}{mark}", micros(*value)));
            if at_max.contains(name) && !marked.iter().any(|(_, n)| n == name) {
                marked.push((*pm, name));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for row in rows {
        out.push_str(&format!("    {}: {}\n", row.label, row.what));
    }
    if !marked.is_empty() {
        marked.sort_unstable();
        let names: Vec<&str> = marked.iter().map(|(_, n)| *n).collect();
        let from: Vec<String> = marked.iter().map(|(pm, n)| format!("{n} from {} runs", runs_to_resolve(*pm))).collect();
        out.push_str(&format!(
            "    *: the max: with {} runs the nearest rank of {} is the last (a percentile can differ from the max: {})\n",
            first.samples,
            names.join(" and "),
            from.join(", ")
        ));
    }
}

/// The tail-latency block as a JSON array: per row its label, what it is, the unit, the method,
/// each percentile and the percentiles that are the max at this number of runs.
fn tail_json(rows: &[TailRow], s: &mut String) {
    s.push('[');
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let mut o = json::Object::new(s);
        o.str("label", row.label).str("what", &row.what).str("method", "nearest-rank").str("unit", "us").num("runs", row.samples as u64);
        for ((_, name), (value, _)) in TAIL_POINTS.iter().zip(&row.points) {
            o.float(&name.replace('.', "_"), micros(*value));
        }
        let at_max = row.at_max();
        o.raw("equal_to_max", |s| {
            s.push('[');
            for (j, name) in at_max.iter().enumerate() {
                if j > 0 {
                    s.push(',');
                }
                json::string(s, name);
            }
            s.push(']');
        });
        o.end();
    }
    s.push(']');
}

/// What the bench gives a run besides its outputs: the simulated time charged since it was last
/// called, and (with `--count`) the execution counts of the invokes made since. Each is called
/// once after the open, then after each run.
#[derive(Clone, Copy)]
struct BenchTakes<'a> {
    simulated: &'a dyn Fn() -> Duration,
    counts: Option<&'a dyn Fn() -> Vec<InvokeCounted>>,
}

/// Opens the model on `served` and runs it `runs` times (`takes`: on the bench).
fn execute<S: Syscalls + Clone + Send + Sync + 'static>(
    served: &ServedSession<S>,
    bytes: &[u8],
    ins: &[Vec<u8>],
    runs: u32,
    deadline: Option<Duration>,
    takes: Option<BenchTakes<'_>>,
    per_kernel: bool,
) -> Result<Measured, Failure> {
    let simulated = takes.map(|t| t.simulated);
    let take_counts = takes.and_then(|t| t.counts);
    let t0 = Instant::now();
    let mut model = LoadedModel::open(served, bytes).map_err(|e| refused(format!("opening the model: {e}")))?;
    let open = t0.elapsed();
    if let Some(take) = simulated {
        take(); // the open's crossings are not a run's
    }
    if let Some(take) = take_counts {
        take(); // nor its invokes
    }
    let mut counts = take_counts.map(|_| CountSummary::default());
    let mut sim = Vec::with_capacity(if simulated.is_some() { runs as usize } else { 0 });
    let in_refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<Vec<u8>> = model.outputs().iter().map(|t| vec![0u8; t.len as usize]).collect();
    let mut times = Vec::with_capacity(runs as usize);
    let mut dsp_us = 0;
    let mut per: std::collections::BTreeMap<String, (usize, u64)> = std::collections::BTreeMap::new();
    let mut untimed = 0usize;
    for n in 0..runs {
        let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        let t = Instant::now();
        let mut names: Vec<String> = Vec::new();
        let r = if per_kernel {
            let (r, p) =
                model.run_profiled(&in_refs, &mut out_refs, deadline).map_err(|e| refused(format!("run {} of {runs}: {e}", n + 1)))?;
            if counts.is_some() {
                names = p.records.iter().map(|k| k.kernel.clone()).collect();
            }
            for k in p.records {
                let e = per.entry(k.kernel).or_default();
                e.0 += 1;
                e.1 += u64::from(k.micros);
            }
            untimed += p.untimed_calls;
            r
        } else {
            model.run(&in_refs, &mut out_refs, deadline).map_err(|e| refused(format!("run {} of {runs}: {e}", n + 1)))?
        };
        times.push(t.elapsed());
        // Before the simulated time's take, which clears the bench's logs (the counts' too).
        if let (Some(take), Some(c)) = (take_counts, counts.as_mut()) {
            let invokes = take();
            c.per_run.push(invokes.iter().fold(Counted::default(), |a, i| a.plus(i.1)));
            // The program calls' kernels, in run order, are the profile's records.
            let kernels: Option<Vec<Counted>> =
                invokes.into_iter().filter(|i| i.0 == PROGRAM_METHOD).map(|i| i.2).collect::<Option<Vec<_>>>().map(|v| v.concat());
            if let Some(k) = kernels.filter(|k| k.len() == names.len()) {
                for (name, k) in names.iter().zip(k) {
                    let e = c.per_kernel.entry(name.clone()).or_default();
                    *e = e.plus(k);
                }
            }
        }
        if let Some(take) = simulated {
            sim.push(take());
        }
        dsp_us += r.dsp_micros;
        if !served.session().is_healthy() {
            return Err(refused(format!("run {} of {runs}: the DSP restarted during the run; no result is reported", n + 1)));
        }
    }
    let outputs = model.outputs().iter().cloned().zip(outs).collect();
    Ok(Measured {
        open,
        runs: times,
        simulated: sim,
        calls_per_run: model.calls_per_run(),
        launches: model.launches(),
        call_bytes: model.call_bytes_per_run(),
        dsp_us,
        pm_qos: served.session().pm_qos(),
        power: (served.session().latency_policy().dsp_power(), served.session().setup_failures(), model.power_vote_libraries()),
        kernels: per_kernel.then(|| {
            let mut v: Vec<KernelRow> = per.into_iter().map(|(k, (n, us))| (k, n, us)).collect();
            v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
            (v, untimed)
        }),
        counts,
        outputs,
    })
}

/// The scalars word's method of a program call (launch ABI method 5).
const PROGRAM_METHOD: u32 = 5;

/// A session on the device (detected board) or on the bench, and the model run on it.
fn on_session(
    mode: Mode,
    board: Option<&str>,
    bytes: &[u8],
    ins: &[Vec<u8>],
    runs: u32,
    deadline: Option<Duration>,
    ask: Ask,
) -> Result<Measured, Failure> {
    match mode {
        Mode::Bench => bench_execute(bytes, ins, runs, deadline, ask),
        Mode::Device => {
            let served = super::device_session_with(board, ask.latency).map_err(|(u, m)| if u { usage(m) } else { refused(m) })?;
            execute(&served, bytes, ins, runs, deadline, None, ask.per_kernel)
        }
    }
}

/// `--bench`: a bench whose DSP knows the catalogue's library models (the sample model's); a
/// library that is Hexagon code runs under qemu-hexagon. The bench charges `hexrpc bench`'s cost
/// model ([`crate::figures::MODEL_COST`], recorded, never slept): a run's simulated time is the sum
/// of the simulated latencies of the crossings made during it, read and cleared after each run (so
/// the bench's logs stay bounded however many runs).
#[cfg(feature = "bench")]
fn bench_execute(bytes: &[u8], ins: &[Vec<u8>], runs: u32, deadline: Option<Duration>, ask: Ask) -> Result<Measured, Failure> {
    let config = hexrpc_bench::BenchConfig::from_env().map_err(|e| usage(e.to_string()))?;
    let bench = hexrpc_bench::Bench::with_config(hexrpc_bench::BenchConfig { cost: crate::figures::MODEL_COST, ..config });
    hexrpc_scenarios::catalogue::register_sample_model(&bench);
    let policy = FilePolicy::for_board(bench.board()).map_err(|e| refused(format!("bench file policy: {e:?}")))?;
    let session = hexrpc_hal::Session::start_with(bench.clone(), &hexrpc_bsp::DeviceAccess::for_bench(), ask.latency)
        .map_err(|e| refused(format!("starting the bench session: {e}")))?;
    let served = ServedSession::serve(session, policy).map_err(|e| refused(format!("starting the bench session: {e}")))?;
    let take = || {
        let sum = bench.latencies().iter().map(|l| l.simulated).fold(Duration::ZERO, Duration::saturating_add);
        bench.clear_logs();
        sum
    };
    let take_counts = || -> Vec<InvokeCounted> {
        let c = |e: hexrpc_bench::executor::wire::ExecCounts| Counted { packets: e.packets, instructions: e.instructions, hvx: e.hvx };
        bench.take_exec_counts().0.into_iter().map(|i| (i.method, c(i.total), i.kernels.map(|k| k.into_iter().map(c).collect()))).collect()
    };
    let takes = BenchTakes { simulated: &take, counts: ask.count.then_some(&take_counts as &dyn Fn() -> Vec<InvokeCounted>) };
    execute(&served, bytes, ins, runs, deadline, Some(takes), ask.per_kernel).map_err(|f| match (f, bench.last_restart()) {
        (Failure::Refused(m), Some(why)) => refused(format!("{m}; the bench recorded why: {why}")),
        (f, _) => f,
    })
}

#[cfg(not(feature = "bench"))]
fn bench_execute(_: &[u8], _: &[Vec<u8>], _: u32, _: Option<Duration>, _: Ask) -> Result<Measured, Failure> {
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
    let rows = tail_rows(mode, m);
    // The wall-time row (emulated or device): its p50 and p99 are also the flat `run_us_*` fields.
    let wall = rows.iter().find(|r| r.label != "simulated");
    let (p50, p99) = wall.map_or((f64::NAN, f64::NAN), |r| (micros(r.points[0].0), micros(r.points[1].0)));
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
            .raw("tail_latency", |s| tail_json(&rows, s))
            .str("pm_qos", &pm_qos_name(m.pm_qos))
            .str("dsp_power", m.power.0.name())
            .num("setup_failures", u64::from(m.power.1))
            .num("power_vote_libraries", m.power.2 .0 as u64)
            .raw("per_kernel", |s| per_kernel_json(mode, m, s))
            .raw("exec_counts", |s| count_json(m, s))
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
         kernel per run beyond the inputs\n",
        file.display(),
        m.open.as_secs_f64() * 1e3,
        m.runs.len(),
        m.launches,
        m.calls_per_run,
        m.call_bytes,
    );
    tail_text(&rows, &mut out);
    out.push_str(&format!("  PM-QoS vote (FASTRPC_CONTROL_LATENCY): {}\n", m.pm_qos));
    out.push_str(&format!(
        "  DSP clock vote (HAP_power_set): {}{}\n",
        m.power.0.name(),
        match (m.power.0, m.power.1, m.power.2) {
            (hexrpc_hal::DspPower::Off, _, _) => " (none sent)".to_string(),
            (_, 0, (0, n)) => format!(
                ", not sent: none of the model's {n} {} takes it (built before the vote: export the model again with this hexrpc)",
                libraries(n)
            ),
            (_, 0, (k, n)) => format!(", sent to the {k} of {n} {} whose entry takes it, after each open", libraries(n)),
            (_, f, _) => format!(", refused {f} time(s) by a library (see the log)"),
        }
    ));
    count_text(m, &mut out);
    per_kernel_text(mode, m, &mut out);
    if mode == Mode::Bench {
        out.push_str("  (bench: simulated DSP, or Hexagon code under qemu-hexagon; simulated and emulated, not device figures)\n");
    }
    for (t, bytes) in &m.outputs {
        out.push_str(&format!("  output {} {}{}: {}\n", t.name, t.dtype.name(), shape_text(&t.shape), preview(t, bytes)));
    }
    for (name, path, bytes) in written {
        out.push_str(&format!("  wrote {name} ({bytes} bytes) to {}\n", path.display()));
    }
    out
}

/// What `--count` counts, for its label.
const COUNT_WHAT: &str = "qemu-hexagon's count of what it executed; emulated packets, not DSP time";

/// Groups of three digits: 1234567 is "1,234,567".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `--count`'s figures: the steady run's counts (the last run's) and the first run's, and whether
/// every run after the first counted the same (`None` with a single run). The first run of a
/// model maps its buffers on the DSP (the map cache keeps them for the later runs), so it counts
/// a few hundred packets more.
fn count_figures(c: &CountSummary) -> Option<(Counted, Counted, Option<bool>)> {
    let first = *c.per_run.first()?;
    let steady = *c.per_run.last()?;
    let identical = (c.per_run.len() > 1).then(|| c.per_run[1..].iter().all(|r| *r == steady));
    Some((steady, first, identical))
}

/// `--count`: the packets, instructions and HVX instructions of a run, and whether every run
/// after the first counted the same.
fn count_text(m: &Measured, out: &mut String) {
    let Some((steady, first, identical)) = m.counts.as_ref().and_then(count_figures) else { return };
    if first.packets == 0 && steady.packets == 0 {
        out.push_str("  emulated packets per run: none: no Hexagon code ran (the bench's library models run in Rust)\n");
        return;
    }
    let runs = m.counts.as_ref().map_or(0, |c| c.per_run.len());
    let repeat = match identical {
        None => "a single run, the first (it maps the model's buffers on the DSP; run more for a steady run)".to_string(),
        Some(true) if first == steady => format!("identical in all {runs} runs"),
        Some(true) => format!(
            "identical in runs 2 to {runs}; the first run {} packets (it maps the model's buffers on the DSP)",
            thousands(first.packets)
        ),
        Some(false) => {
            let later = &m.counts.as_ref().map_or(&[][..], |c| &c.per_run[1..]);
            let (lo, hi) = later.iter().fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r.packets), hi.max(r.packets)));
            format!(
                "NOT identical in runs 2 to {runs}: {} to {} packets (the count should repeat exactly: report it)",
                thousands(lo),
                thousands(hi)
            )
        }
    };
    out.push_str(&format!(
        "  emulated packets per run [{COUNT_WHAT}]: {} packets, {} instructions, {} HVX ({:.1} %); {repeat}\n",
        thousands(steady.packets),
        thousands(steady.instructions),
        thousands(steady.hvx),
        steady.hvx_percent(),
    ));
}

/// `"exec_counts"` of `--json`: `null` without `--count`, else `{label, what, runs,
/// packets_per_run, instructions_per_run, hvx_per_run, first_run_packets, identical}`: the
/// steady (last) run's counts, the first run's packets, and whether the runs after the first
/// counted the same (`null` for a single run).
fn count_json(m: &Measured, s: &mut String) {
    let Some((steady, first, identical)) = m.counts.as_ref().and_then(count_figures) else {
        s.push_str("null");
        return;
    };
    let runs = m.counts.as_ref().map_or(0, |c| c.per_run.len()) as u64;
    let mut o = json::Object::new(s);
    o.str("label", "emulated")
        .str("what", COUNT_WHAT)
        .num("runs", runs)
        .num("packets_per_run", steady.packets)
        .num("instructions_per_run", steady.instructions)
        .num("hvx_per_run", steady.hvx)
        .num("first_run_packets", first.packets)
        .raw("identical", |s| {
            s.push_str(match identical {
                None => "null",
                Some(true) => "true",
                Some(false) => "false",
            })
        });
    o.end();
}

/// "library" or "libraries".
fn libraries(n: usize) -> &'static str {
    if n == 1 {
        "library"
    } else {
        "libraries"
    }
}

/// The label of per-kernel times: measured on the DSP around each kernel call, on a device a
/// device figure; on the bench the emulator's clock (Hexagon code) or the cost model (the bench's
/// library models).
fn per_kernel_label(mode: Mode) -> (&'static str, &'static str) {
    match mode {
        Mode::Device => ("device", "DSP time around each kernel call (HAP_perf_get_time_us)"),
        Mode::Bench => (
            "emulated/simulated",
            "bench: Hexagon code under qemu-hexagon (host clock) or the bench's library models (cost model); not device figures",
        ),
    }
}

/// `--per-kernel`: each kernel's launches and DSP time per run, the most time first.
fn per_kernel_text(mode: Mode, m: &Measured, out: &mut String) {
    let Some((rows, untimed)) = &m.kernels else { return };
    let runs = m.runs.len().max(1) as f64;
    let total: u64 = rows.iter().map(|r| r.2).sum();
    let (label, what) = per_kernel_label(mode);
    if rows.is_empty() {
        out.push_str(&format!(
            "  DSP time per kernel [{label}]: no kernel was timed: every call ({untimed}) ran on a library built before per-record \
             times (export the model again with this hexrpc)\n"
        ));
        return;
    }
    out.push_str(&format!("  DSP time per kernel, per run [{label}: {what}]: {:.1} us in kernels\n", total as f64 / runs));
    if *untimed > 0 {
        out.push_str(&format!("    ({untimed} call(s) ran on a library built before per-record times: not in the table)\n"));
    }
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    // With --count, each kernel's emulated packets per run and its HVX share.
    let counted = m.counts.as_ref().map(|c| &c.per_kernel).filter(|k| !k.is_empty());
    let mut head = format!("    {:<width$}  {:>8}  {:>12}  {:>6}", "kernel", "launches", "us", "share");
    if counted.is_some() {
        head.push_str(&format!("  {:>14}  {:>6}", "packets (emu)", "HVX"));
    }
    out.push_str(&head);
    out.push('\n');
    for (name, n, us) in rows {
        let share = if total > 0 { 100.0 * *us as f64 / total as f64 } else { 0.0 };
        out.push_str(&format!("    {name:<width$}  {:>8}  {:>12.1}  {share:>5.1}%", *n as f64 / runs, *us as f64 / runs));
        if let Some(c) = counted.and_then(|k| k.get(name)) {
            out.push_str(&format!("  {:>14}  {:>5.1}%", thousands(c.packets / runs as u64), c.hvx_percent()));
        }
        out.push('\n');
    }
}

/// `"per_kernel"` of `--json`: `null` without `--per-kernel`, else `{label, what, untimed_calls,
/// kernels: [{kernel, launches_per_run, us_per_run}]}`.
fn per_kernel_json(mode: Mode, m: &Measured, s: &mut String) {
    let Some((rows, untimed)) = &m.kernels else {
        s.push_str("null");
        return;
    };
    let runs = m.runs.len().max(1) as f64;
    let (label, what) = per_kernel_label(mode);
    let mut o = json::Object::new(s);
    o.str("label", label).str("what", what).num("untimed_calls", *untimed as u64).raw("kernels", |s| {
        s.push('[');
        for (i, (name, n, us)) in rows.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let mut k = json::Object::new(s);
            k.str("kernel", name).float("launches_per_run", *n as f64 / runs).float("us_per_run", *us as f64 / runs);
            if let Some(c) = m.counts.as_ref().and_then(|c| c.per_kernel.get(name)) {
                k.num("packets_per_run", c.packets / runs as u64).num("hvx_per_run", c.hvx / runs as u64);
            }
            k.end();
        }
        s.push(']');
    });
    o.end();
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
    let power = match a.power.as_deref() {
        None => hexrpc_hal::DspPower::default(),
        Some(s) => hexrpc_hal::DspPower::from_name(s).ok_or_else(|| usage(format!("--power {s:?}: off, sustained or burst")))?,
    };
    let vote = if a.no_pm_qos { hexrpc_hal::PmQosVote::Off } else { hexrpc_hal::PmQosVote::Board };
    let ask = Ask {
        latency: hexrpc_hal::LatencyPolicy::REALTIME.with_pm_qos(vote).with_dsp_power(power),
        per_kernel: a.per_kernel,
        count: a.count,
    };
    let mode = mode_of(a.mode)?;
    if a.count && mode == Mode::Device {
        return Err(usage(
            "--count counts what qemu-hexagon executes, so it runs with --bench only; on a device, --per-kernel gives each kernel's DSP time",
        ));
    }
    let measured = on_session(mode, board, &bytes, &ins, runs, deadline, ask)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&u| Duration::from_micros(u)).collect()
    }

    fn measured(runs: &[u64], simulated: &[u64]) -> Measured {
        Measured {
            open: Duration::ZERO,
            runs: us(runs),
            simulated: us(simulated),
            calls_per_run: 1,
            launches: 1,
            call_bytes: 0,
            dsp_us: 0,
            pm_qos: PmQosState::NotAsked,
            power: (hexrpc_hal::DspPower::Sustained, 0, (1, 1)),
            kernels: None,
            counts: None,
            outputs: Vec::new(),
        }
    }

    #[test]
    fn per_kernel_on_a_model_whose_libraries_time_nothing_says_so_with_no_empty_table() {
        let mut m = measured(&[10, 12], &[]);
        m.kernels = Some((Vec::new(), 2));
        let mut out = String::new();
        per_kernel_text(Mode::Bench, &m, &mut out);
        assert!(!out.contains("launches"), "an empty table: {out}");
        assert!(out.contains("no kernel was timed") && out.contains("export the model again"), "{out}");
        // With rows, the table.
        m.kernels = Some((vec![("r_4_4".to_string(), 2, 30)], 0));
        let mut out = String::new();
        per_kernel_text(Mode::Bench, &m, &mut out);
        assert!(out.contains("launches") && out.contains("r_4_4"), "{out}");
    }

    #[test]
    fn count_lines_say_emulated_and_whether_every_run_after_the_first_counted_the_same() {
        let c = |packets, hvx| Counted { packets, instructions: packets * 2, hvx };
        let summary = |per_run: Vec<Counted>| Some(CountSummary { per_run, per_kernel: Default::default() });
        let line = |m: &Measured| {
            let mut out = String::new();
            count_text(m, &mut out);
            out
        };
        let mut m = measured(&[10, 10, 10], &[]);
        // The first run maps the buffers (more packets); the later ones repeat exactly.
        m.counts = summary(vec![c(1_234_800, 0), c(1_234_567, 0), c(1_234_567, 0)]);
        let out = line(&m);
        assert!(out.contains("emulated packets, not DSP time") && out.contains("1,234,567 packets"), "{out}");
        assert!(out.contains("2,469,134 instructions") && out.contains("identical in runs 2 to 3; the first run 1,234,800"), "{out}");
        let mut json = String::new();
        count_json(&m, &mut json);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            (v["label"].as_str(), v["packets_per_run"].as_u64(), v["first_run_packets"].as_u64(), v["identical"].as_bool()),
            (Some("emulated"), Some(1_234_567), Some(1_234_800), Some(true))
        );
        m.counts = summary(vec![c(7, 0); 3]);
        assert!(line(&m).contains("identical in all 3 runs"), "{}", line(&m));
        // Later runs that differ are said to.
        m.counts = summary(vec![c(130, 0), c(100, 0), c(120, 0)]);
        assert!(line(&m).contains("NOT identical in runs 2 to 3: 100 to 120 packets"), "{}", line(&m));
        // One run: the first, said so; JSON identical null.
        m.counts = summary(vec![c(130, 0)]);
        assert!(line(&m).contains("a single run, the first"), "{}", line(&m));
        let mut json = String::new();
        count_json(&m, &mut json);
        assert!(serde_json::from_str::<serde_json::Value>(&json).unwrap()["identical"].is_null(), "{json}");
        // No Hexagon code (the bench's library models): nothing to count, said so.
        m.counts = summary(vec![c(0, 0)]);
        assert!(line(&m).contains("no Hexagon code ran"), "{}", line(&m));
        // Without --count: no line, null.
        m.counts = None;
        let mut json = String::new();
        count_json(&m, &mut json);
        assert!(line(&m).is_empty() && json == "null");
        // Per kernel, with --per-kernel: the packets column and the HVX share.
        let mut per_kernel = std::collections::BTreeMap::new();
        per_kernel.insert("r_4_4".to_string(), Counted { packets: 3000, instructions: 4000, hvx: 1000 });
        m.counts = Some(CountSummary { per_run: vec![c(5000, 1000); 3], per_kernel });
        m.kernels = Some((vec![("r_4_4".to_string(), 6, 30)], 0));
        let mut out = String::new();
        per_kernel_text(Mode::Bench, &m, &mut out);
        assert!(out.contains("packets (emu)") && out.contains(" 1,000   25.0%"), "{out}");
    }

    #[test]
    fn the_clock_vote_line_names_the_libraries_that_take_it() {
        let line = |power, failures, libs: (usize, usize)| {
            let mut m = measured(&[10], &[]);
            m.power = (power, failures, libs);
            report("bench", Path::new("m.hxm"), Mode::Bench, &m, &[], false)
                .lines()
                .find(|l| l.contains("DSP clock vote"))
                .unwrap_or_default()
                .to_string()
        };
        use hexrpc_hal::DspPower::{Burst, Off};
        assert!(line(Off, 0, (1, 1)).ends_with("off (none sent)"));
        let none = line(Burst, 0, (0, 2));
        assert!(none.contains("not sent") && none.contains("none of the model's 2 libraries"), "{none}");
        let some = line(Burst, 0, (1, 2));
        assert!(some.contains("sent to the 1 of 2 libraries"), "{some}");
        assert!(line(Burst, 3, (2, 2)).contains("refused 3 time(s)"));
    }

    #[test]
    fn nearest_rank_is_the_sample_of_rank_ceil_p_times_n() {
        // 1..=10: p50 is rank 5, p99 and p99.9 rank 10 (ceil(9.9), ceil(9.99)), the max rank 10.
        let ten = us(&(1..=10).collect::<Vec<_>>());
        let at = |v: &[Duration], pm| nearest_rank(v, pm).map(|(d, r)| (d.as_micros(), r));
        assert_eq!(at(&ten, 500), Some((5, 5)));
        assert_eq!(at(&ten, 990), Some((10, 10)));
        assert_eq!(at(&ten, 999), Some((10, 10)));
        assert_eq!(at(&ten, 1000), Some((10, 10)));
        // 1..=1000 (in µs): rank ceil(p × 1000), the value is the rank.
        let thousand = us(&(1..=1000).collect::<Vec<_>>());
        assert_eq!(at(&thousand, 500), Some((500, 500)));
        assert_eq!(at(&thousand, 990), Some((990, 990)));
        assert_eq!(at(&thousand, 999), Some((999, 999)));
        assert_eq!(at(&thousand, 1000), Some((1000, 1000)));
        // 101 samples: p50 is rank ceil(50.5) = 51 (not the 50th, not interpolated), p99 rank
        // ceil(99.99) = 100, p99.9 rank ceil(100.899) = 101 (the max).
        let hundred_one = us(&(0..=100).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(at(&hundred_one, 500), Some((500, 51)));
        assert_eq!(at(&hundred_one, 990), Some((990, 100)));
        assert_eq!(at(&hundred_one, 999), Some((1000, 101)));
        // One sample is every percentile; none is none.
        assert_eq!(at(&us(&[7]), 500), Some((7, 1)));
        assert_eq!(at(&us(&[7]), 999), Some((7, 1)));
        assert_eq!(at(&[], 500), None);
    }

    #[test]
    fn a_percentile_is_resolved_from_the_first_count_whose_rank_is_not_the_last() {
        assert_eq!((runs_to_resolve(500), runs_to_resolve(990), runs_to_resolve(999)), (2, 100, 1000));
        for pm in [500, 990, 999] {
            let n = runs_to_resolve(pm) as usize;
            let below = us(&(1..n as u64).collect::<Vec<_>>());
            let enough = us(&(1..=n as u64).collect::<Vec<_>>());
            assert_eq!(nearest_rank(&below, pm).map(|(_, r)| r), Some(n - 1), "{pm}‰ of {} samples is the max", n - 1);
            assert!(nearest_rank(&enough, pm).is_some_and(|(_, r)| r < n), "{pm}‰ of {n} samples is below the max");
        }
    }

    #[test]
    fn a_row_sorts_its_samples_and_names_the_percentiles_that_are_the_max() {
        // 100 runs in reverse order, one slow outlier: p99 is rank 99, p99.9 rank 100 (the max).
        let mut samples: Vec<u64> = (1..=99).rev().collect();
        samples.insert(40, 5000);
        let row = TailRow::of("emulated", String::new(), &us(&samples)).unwrap();
        let values: Vec<u128> = row.points.iter().map(|(d, _)| d.as_micros()).collect();
        assert_eq!(values, [50, 99, 5000, 5000]);
        assert_eq!(row.at_max(), ["p99.9"]);
        let row = TailRow::of("device", String::new(), &us(&(1..=1000).collect::<Vec<_>>())).unwrap();
        assert!(row.at_max().is_empty());
        let row = TailRow::of("device", String::new(), &us(&[3])).unwrap();
        assert_eq!(row.at_max(), ["p50", "p99", "p99.9"]);
        assert!(TailRow::of("device", String::new(), &[]).is_none());
    }

    #[test]
    fn the_bench_has_a_simulated_and_an_emulated_row_and_a_device_one_device_row() {
        let m = measured(&[300, 100, 200], &[62, 102, 62]);
        let bench = tail_rows(Mode::Bench, &m);
        assert_eq!(bench.iter().map(|r| r.label).collect::<Vec<_>>(), ["simulated", "emulated"]);
        assert_eq!(bench[0].points.map(|(d, _)| d.as_micros()), [62, 102, 102, 102]);
        assert_eq!(bench[1].points.map(|(d, _)| d.as_micros()), [200, 300, 300, 300]);
        let device = tail_rows(Mode::Device, &m);
        assert_eq!(device.iter().map(|r| r.label).collect::<Vec<_>>(), ["device"]);
        assert_eq!(device[0].points[0].0, Duration::from_micros(200));
    }

    #[test]
    fn the_text_block_marks_what_this_few_runs_cannot_resolve() {
        let mut out = String::new();
        tail_text(&tail_rows(Mode::Device, &measured(&[1500, 1000], &[])), &mut out);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "  tail latency per run, us (nearest rank over 2 runs):");
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["p50", "p99", "p99.9", "max"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["device", "1000.0", "1500.0*", "1500.0*", "1500.0"]);
        assert!(lines[3].starts_with("    device: wall time per run on this device"), "{out}");
        assert!(lines[4].contains("nearest rank of p99 and p99.9 is the last") && lines[4].contains("p99.9 from 1000 runs"), "{out}");
        assert!(out.lines().all(|l| l == l.trim_end()), "no trailing spaces: {out:?}");
        let mut out = String::new();
        tail_text(&tail_rows(Mode::Device, &measured(&(1..=1000).collect::<Vec<_>>(), &[])), &mut out);
        assert!(!out.contains('*'), "1000 runs resolve p99.9: {out}");
    }

    #[test]
    fn the_json_block_carries_the_labels_the_percentiles_and_what_equals_the_max() {
        let mut s = String::new();
        tail_json(&tail_rows(Mode::Bench, &measured(&[300, 100, 200], &[62, 102, 62])), &mut s);
        assert!(s.starts_with("[{\"label\":\"simulated\""), "{s}");
        assert!(
            s.contains("\"method\":\"nearest-rank\",\"unit\":\"us\",\"runs\":3,\"p50\":62,\"p99\":102,\"p99_9\":102,\"max\":102"),
            "{s}"
        );
        assert!(s.contains("{\"label\":\"emulated\""), "{s}");
        assert!(s.contains("\"p50\":200,\"p99\":300,\"p99_9\":300,\"max\":300,\"equal_to_max\":[\"p99\",\"p99.9\"]}]"), "{s}");
    }
}
