//! `hexrpc run`: launch any library on the device or on the bench.
//!
//! ```text
//! hexrpc run LIBRARY.so [--signature SIG] [--abi v1|v2] [--bench | --device] [--arg SPEC]...
//!            [--repeat N] [--deadline-ms MS] [--json]
//! ```
//!
//! One `--arg` per parameter of SIG, in order. A `buf` parameter's SPEC is comma-separated
//! `in=FILE`, `out=FILE`, `size=BYTES` (default: the size of `in`), `offset=BYTES` (the view's
//! offset inside its own lease, default 0); each buffer gets its own lease of `offset + size`
//! bytes rounded up to a page. Each key is given at most once, and an `out=` file must not be
//! the library, an `in=` file or another `out=` file. A scalar's SPEC is its literal value,
//! parsed by the signature's type. Everything is checked before the session starts: the arguments against the signature,
//! the library's build record (when it has one) against `--signature` and `--abi`, and v1 with
//! a non-zero offset is refused (v1 entries map the view at file offset 0).
//!
//! On the bench the library runs under qemu-hexagon in the executor's DSP shell: the DSP-reported
//! time is the emulator's host clock around the kernel and the round trip is host wall time of an
//! emulated launch; neither is a device figure, and the report says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hexrpc_drivers::Syscalls;
use hexrpc_hal::{BufferView, Library};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, LibraryRecord, PackedLaunch, ParamKind, Scalar, ScalarType, Signature};
#[cfg(feature = "bench")]
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

use super::{refused, usage, Failure};
use crate::cli::{Mode, RunArgs};
use crate::json;

/// Largest input file `in=` reads, and largest buffer `size=` allows.
pub const MAX_BUFFER: u64 = 256 << 20;
/// Most launches `--repeat` allows.
pub const MAX_REPEAT: u32 = 1_000_000;
/// Largest library file read.
pub const MAX_LIBRARY: u64 = 64 << 20;

/// One buffer argument.
#[derive(Debug, PartialEq, Eq)]
struct BufSpec {
    input: Option<PathBuf>,
    output: Option<PathBuf>,
    size: Option<u64>,
    offset: u64,
}

#[derive(Debug, PartialEq)]
enum ArgSpec {
    Buf(BufSpec),
    Scalar(Scalar),
}

/// A checked command line.
#[derive(Debug)]
struct Plan {
    library: PathBuf,
    sig: Signature,
    abi: AbiVersion,
    mode: Option<Mode>,
    args: Vec<ArgSpec>,
    repeat: u32,
    deadline: Option<Duration>,
    json: bool,
    capture: Option<PathBuf>,
    tap: Option<&'static crate::capture::Recorder>,
}

fn parse_bytes(key: &str, v: &str) -> Result<u64, Failure> {
    let n: u64 = v.parse().map_err(|_| usage(format!("{key}={v:?} is not a byte count")))?;
    if n > MAX_BUFFER {
        return Err(usage(format!("{key}={n} exceeds the {MAX_BUFFER}-byte limit")));
    }
    Ok(n)
}

fn parse_buf(i: usize, spec: &str) -> Result<BufSpec, Failure> {
    let mut b = BufSpec { input: None, output: None, size: None, offset: 0 };
    let mut seen: Vec<&str> = Vec::new();
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| usage(format!("--arg {} ({spec:?}): {part:?} is not key=value", i + 1)))?;
        if seen.contains(&k) {
            return Err(usage(format!("--arg {} ({spec:?}): the key {k:?} is given twice; give each key once", i + 1)));
        }
        seen.push(k);
        match k {
            "in" if !v.is_empty() => b.input = Some(PathBuf::from(v)),
            "out" if !v.is_empty() => b.output = Some(PathBuf::from(v)),
            "size" => b.size = Some(parse_bytes("size", v)?),
            "offset" => b.offset = parse_bytes("offset", v)?,
            _ => {
                return Err(usage(format!(
                    "--arg {} ({spec:?}): unknown or empty key {k:?} (a buffer takes in=FILE, out=FILE, size=BYTES, offset=BYTES)",
                    i + 1
                )))
            }
        }
    }
    if b.input.is_none() && b.size.is_none() {
        return Err(usage(format!("--arg {} ({spec:?}): a buffer needs in=FILE or size=BYTES", i + 1)));
    }
    Ok(b)
}

/// f32 -> IEEE binary16 bits, round to nearest even.
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rounded = (m + half - 1 + ((m >> shift) & 1)) >> shift;
        return sign | rounded as u16;
    }
    let rounded = (man + 0xfff + ((man >> 13) & 1)) >> 13;
    let v = ((e as u32) << 10) + rounded;
    if v >= 0x7c00 {
        return sign | 0x7c00;
    }
    sign | v as u16
}

fn parse_scalar(i: usize, t: ScalarType, v: &str) -> Result<Scalar, Failure> {
    let bad = || usage(format!("--arg {} ({v:?}) is not a valid {} value", i + 1, t.name()));
    Ok(match t {
        ScalarType::I8 => Scalar::I8(v.parse().map_err(|_| bad())?),
        ScalarType::U8 => Scalar::U8(v.parse().map_err(|_| bad())?),
        ScalarType::I16 => Scalar::I16(v.parse().map_err(|_| bad())?),
        ScalarType::U16 => Scalar::U16(v.parse().map_err(|_| bad())?),
        ScalarType::I32 => Scalar::I32(v.parse().map_err(|_| bad())?),
        ScalarType::U32 => Scalar::U32(v.parse().map_err(|_| bad())?),
        ScalarType::I64 => Scalar::I64(v.parse().map_err(|_| bad())?),
        ScalarType::U64 => Scalar::U64(v.parse().map_err(|_| bad())?),
        ScalarType::F16 => Scalar::F16(f16_bits(v.parse::<f32>().map_err(|_| bad())?)),
        ScalarType::F32 => Scalar::F32(v.parse().map_err(|_| bad())?),
        ScalarType::F64 => Scalar::F64(v.parse().map_err(|_| bad())?),
    })
}

fn check(a: RunArgs) -> Result<Plan, Failure> {
    let library = a.library.ok_or_else(|| usage("run needs LIBRARY.so (try 'hexrpc run --help')"))?;
    let (sig_text, recorded_abi) = match a.signature {
        Some(s) => (s, None),
        // No --signature: the library's build record gives it (and the ABI, unless --abi does).
        None => recorded(&library)?,
    };
    let sig = Signature::parse(&sig_text).map_err(|e| usage(format!("--signature {sig_text:?}: {e}")))?;
    let abi = match a.abi.as_deref() {
        None => recorded_abi.unwrap_or(AbiVersion::V2),
        Some("v2") => AbiVersion::V2,
        Some("v1") => AbiVersion::V1,
        Some(other) => return Err(usage(format!("--abi {other:?}: use v1 or v2"))),
    };
    if a.args.len() != sig.params().len() {
        return Err(usage(format!("the signature {sig} has {} parameters but {} --arg were given", sig.params().len(), a.args.len())));
    }
    let mut args = Vec::with_capacity(a.args.len());
    for (i, (spec, kind)) in a.args.iter().zip(sig.params()).enumerate() {
        args.push(match kind {
            ParamKind::Buffer => ArgSpec::Buf(parse_buf(i, spec)?),
            ParamKind::Scalar(t) => ArgSpec::Scalar(parse_scalar(i, *t, spec.trim())?),
        });
    }
    let repeat = match a.repeat.as_deref() {
        None => 1,
        Some(r) => match r.parse::<u32>() {
            Ok(n) if (1..=MAX_REPEAT).contains(&n) => n,
            _ => return Err(usage(format!("--repeat {r:?}: a count from 1 to {MAX_REPEAT}"))),
        },
    };
    let deadline = match a.deadline_ms.as_deref() {
        None => None,
        Some(d) => match d.parse::<u64>() {
            Ok(ms) if ms > 0 => Some(Duration::from_millis(ms)),
            _ => return Err(usage(format!("--deadline-ms {d:?}: a positive number of milliseconds"))),
        },
    };
    check_outputs(&library, &args)?;
    if let Some(dir) = &a.capture {
        crate::io::check_empty_dir(dir).map_err(|e| usage(format!("--capture {} {e}", crate::io::escape(&dir.to_string_lossy()))))?;
    }
    // The tap lives as long as the service, which needs it for 'static: one per process.
    let tap = a.capture.as_ref().map(|_| &*Box::leak(Box::<crate::capture::Recorder>::default()));
    Ok(Plan { library, sig, abi, mode: a.mode, args, repeat, deadline, json: a.json, capture: a.capture, tap })
}

/// The signature and ABI of `library`'s build record (its first kernel), for a run without
/// `--signature`; a library without a record (built elsewhere) needs `--signature`.
fn recorded(library: &Path) -> Result<(String, Option<AbiVersion>), Failure> {
    let image = read_bounded(library, crate::io::MAX_LIBRARY_FILE, "library")?;
    let shown = crate::io::escape(&library.to_string_lossy());
    match LibraryRecord::find(&image) {
        Ok(Some(rec)) => {
            log::info!("{shown}: signature {} and ABI {} from its build record", rec.signature(), abi_name(rec.abi()));
            Ok((rec.signature().to_string(), Some(rec.abi())))
        }
        Ok(None) => Err(usage(format!("{shown} carries no hexrpc build record (built elsewhere): pass --signature SIG"))),
        Err(e) => Err(refused(format!("{shown}: {e}"))),
    }
}

/// Refuses an `out=` file that is the library, an `in=` file or another `out=` file (however
/// spelled: the same device and inode once it exists, the same resolved path before), since
/// writing it would overwrite what the run reads or another output.
fn check_outputs(library: &Path, args: &[ArgSpec]) -> Result<(), Failure> {
    let bufs: Vec<(usize, &BufSpec)> = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            ArgSpec::Buf(b) => Some((i, b)),
            ArgSpec::Scalar(_) => None,
        })
        .collect();
    let shown = |p: &Path| crate::io::escape(&p.to_string_lossy());
    for (k, &(i, b)) in bufs.iter().enumerate() {
        let Some(out) = &b.output else { continue };
        let clash = |what: String| {
            usage(format!(
                "--arg {}: out={} is the same file as {what}; it would be overwritten: choose another output file",
                i + 1,
                shown(out)
            ))
        };
        if crate::io::same_file(out, library) {
            return Err(clash(format!("the library {}", shown(library))));
        }
        for &(j, other) in &bufs {
            if let Some(input) = other.input.as_deref().filter(|p| crate::io::same_file(out, p)) {
                return Err(clash(format!("--arg {}'s in={}", j + 1, shown(input))));
            }
        }
        for &(j, other) in &bufs[..k] {
            if let Some(prev) = other.output.as_deref().filter(|p| crate::io::same_file(out, p)) {
                return Err(clash(format!("--arg {}'s out={}", j + 1, shown(prev))));
            }
        }
    }
    Ok(())
}

/// Reads at most `max` bytes of a regular file; anything else (a FIFO, a device, a directory)
/// is refused before reading (the CLI's hardened reader: non-blocking open, fstat, bounded read).
fn read_bounded(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, Failure> {
    crate::io::read_bounded(path, max).map_err(|e| refused(format!("{what} {}: {e}", crate::io::escape(&path.to_string_lossy()))))
}

fn abi_name(v: AbiVersion) -> &'static str {
    match v {
        AbiVersion::V1 => "v1",
        AbiVersion::V2 => "v2",
    }
}

/// Checks the library's build record (when it has one) against the plan.
fn check_record(plan: &Plan, image: &[u8]) -> Result<(), Failure> {
    let name = plan.library.display();
    match LibraryRecord::find(image) {
        Err(e) => Err(refused(format!("{name}: {e}"))),
        Ok(None) => {
            log::info!("{name} carries no hexrpc build record (built elsewhere); --signature and --abi are trusted as given");
            Ok(())
        }
        Ok(Some(rec)) => {
            if !rec.matches(&plan.sig, plan.abi) {
                return Err(refused(format!(
                    "{name} was built for signature {} with ABI {}, but --signature {} --abi {} was given",
                    rec.signature(),
                    abi_name(rec.abi()),
                    plan.sig,
                    abi_name(plan.abi)
                )));
            }
            Ok(())
        }
    }
}

/// What a run measured.
struct Measured {
    dsp_us: Vec<u64>,
    round_trip: Vec<Duration>,
    outputs: Vec<(usize, PathBuf, usize)>,
}

fn percentile<T: Copy + Ord + Default>(sorted: &[T], p: usize) -> T {
    sorted.get((sorted.len() * p).div_ceil(100).saturating_sub(1)).copied().unwrap_or_default()
}

/// Opens the library on `served`, makes the leases, launches `repeat` times and writes outputs.
fn launch<S: Syscalls + Clone + Send + Sync + 'static>(
    served: &ServedSession<S>,
    plan: &Plan,
    image: &'static [u8],
    inputs: &[Option<Vec<u8>>],
) -> Result<Measured, Failure> {
    if let Some(tap) = plan.tap {
        served.service().set_tap(tap);
    }
    let stem = plan.library.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut name: String = stem.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').take(20).collect();
    if name.is_empty() {
        name = "lib".into();
    }
    let lib: Library<'_, S> = served.open_library(&name, image).map_err(|e| refused(format!("opening {}: {e}", plan.library.display())))?;
    let session = served.session();
    let mut leases = Vec::new();
    for (i, a) in plan.args.iter().enumerate() {
        if let ArgSpec::Buf(b) = a {
            let size = b.size.unwrap_or_else(|| inputs[i].as_ref().map_or(0, |v| v.len() as u64));
            let total = (b.offset + size).max(1).div_ceil(4096) * 4096;
            let mut lease =
                session.alloc(total as usize).map_err(|e| refused(format!("--arg {}: allocating {total} bytes: {e}", i + 1)))?;
            if let Some(data) = &inputs[i] {
                lease.write_at(b.offset as usize, data).map_err(|e| refused(format!("--arg {}: {e}", i + 1)))?;
            }
            leases.push((i, lease, b.offset as usize, size as usize));
        }
    }
    let views: Vec<(usize, BufferView<'_>)> = leases
        .iter()
        .map(|(i, l, off, size)| l.view(*off, *size).map(|v| (*i, v)).map_err(|e| refused(format!("--arg {}: view: {e}", i + 1))))
        .collect::<Result<_, _>>()?;
    let refs: Vec<BufferRef<'_>> = views.iter().map(|(_, v)| BufferRef::of(v)).collect();
    let scalars: Vec<Scalar> = plan
        .args
        .iter()
        .filter_map(|a| match a {
            ArgSpec::Scalar(s) => Some(*s),
            ArgSpec::Buf(_) => None,
        })
        .collect();
    let mut m = Measured { dsp_us: Vec::new(), round_trip: Vec::new(), outputs: Vec::new() };
    for n in 0..plan.repeat {
        let mut packed =
            PackedLaunch::new(plan.abi, &plan.sig, &refs, &scalars).map_err(|e| refused(format!("packing the launch: {e}")))?;
        let (r, rt) = {
            let mut args = packed.invoke_args().map_err(|e| refused(format!("packing the launch: {e:?}")))?;
            let t0 = Instant::now();
            let r = match plan.deadline {
                Some(d) => lib.invoke_with_deadline(&mut args, d),
                None => lib.invoke(&mut args),
            };
            (r, t0.elapsed())
        };
        r.map_err(|e| refused(format!("launch {} of {}: {e}", n + 1, plan.repeat)))?;
        // A launch that "succeeded" on a DSP that restarted under it proves nothing.
        if !session.is_healthy() {
            return Err(refused(format!("launch {} of {}: the DSP restarted during the run; no result is reported", n + 1, plan.repeat)));
        }
        m.round_trip.push(rt);
        m.dsp_us.push(packed.dsp_micros());
    }
    for ((i, v), a) in views.iter().zip(plan.args.iter().filter(|a| matches!(a, ArgSpec::Buf(_)))) {
        let ArgSpec::Buf(b) = a else { continue };
        if let Some(out) = &b.output {
            let mut bytes = vec![0u8; v.len()];
            v.read(&mut bytes).map_err(|e| refused(format!("--arg {}: reading the output: {e}", i + 1)))?;
            crate::io::write_atomic(out, &bytes)
                .map_err(|e| refused(format!("--arg {}: out={}: {e}", i + 1, crate::io::escape(&out.to_string_lossy()))))?;
            m.outputs.push((*i, out.clone(), bytes.len()));
        }
    }
    drop(views);
    drop(leases);
    drop(lib);
    Ok(m)
}

fn report(plan: &Plan, mode: Mode, m: &Measured) -> String {
    let mut dsp = m.dsp_us.clone();
    dsp.sort_unstable();
    let mut rt = m.round_trip.clone();
    rt.sort_unstable();
    // Microseconds to 0.1 us (the JSON carries no float noise).
    let us = |d: Duration| (d.as_secs_f64() * 1e7).round() / 10.0;
    let (d50, d99, r50, r99) = (percentile(&dsp, 50), percentile(&dsp, 99), us(percentile(&rt, 50)), us(percentile(&rt, 99)));
    let mode_name = match mode {
        Mode::Bench => "bench",
        Mode::Device => "device",
    };
    if plan.json {
        let mut out = String::new();
        let mut o = json::Object::new(&mut out);
        o.str("library", &plan.library.to_string_lossy())
            .str("abi", abi_name(plan.abi))
            .str("mode", mode_name)
            .num("launches", m.round_trip.len() as u64)
            .raw("dsp_us", |s| {
                let mut p = json::Object::new(s);
                p.num("p50", d50).num("p99", d99);
                p.end();
            })
            .raw("round_trip_us", |s| {
                let mut p = json::Object::new(s);
                p.float("p50", r50).float("p99", r99);
                p.end();
            })
            .raw("outputs", |s| {
                s.push('[');
                for (k, (arg, file, bytes)) in m.outputs.iter().enumerate() {
                    if k > 0 {
                        s.push(',');
                    }
                    let mut p = json::Object::new(s);
                    p.num("arg", *arg as u64 + 1).str("file", &file.to_string_lossy()).num("bytes", *bytes as u64);
                    p.end();
                }
                s.push(']');
            });
        o.end();
        out.push('\n');
        return out;
    }
    let mut out = format!(
        "ran {} ({} launches, ABI {}, {mode_name})\n  DSP-reported time: p50 {d50} us, p99 {d99} us\n  host round trip:   p50 {r50:.1} us, p99 {r99:.1} us\n",
        plan.library.display(),
        m.round_trip.len(),
        abi_name(plan.abi),
    );
    if mode == Mode::Bench {
        out.push_str(
            "  (bench: the library ran under qemu-hexagon; DSP-reported time is the emulator's host clock and the round trip \
             is host wall time of an emulated launch, not device figures)\n",
        );
    }
    for (arg, file, bytes) in &m.outputs {
        out.push_str(&format!("  --arg {}: wrote {bytes} bytes to {}\n", arg + 1, file.display()));
    }
    out
}

/// `--bench`: the library under the executor.
#[cfg(feature = "bench")]
fn bench_launch(plan: &Plan, image: &'static [u8], inputs: &[Option<Vec<u8>>]) -> Result<Measured, Failure> {
    hexrpc_bench::executor::runner().map_err(|e| {
        refused(format!(
            "--bench needs the Hexagon executor (qemu-hexagon and its DSP shell: clang-19 and ld.lld-19 build it, or {} names one built before): {e}",
            hexrpc_bench::executor::SHELL_ENV
        ))
    })?;
    // The executor's per-call limit from HEXRPC_BENCH_CALL_LIMIT_MS, refused if malformed.
    let config = hexrpc_bench::BenchConfig::from_env().map_err(|e| usage(e.to_string()))?;
    let bench = hexrpc_bench::Bench::with_config(config);
    let policy = FilePolicy::for_board(bench.board()).map_err(|e| refused(format!("bench file policy: {e:?}")))?;
    let served = ServedSession::start(bench.clone(), &hexrpc_bsp::DeviceAccess::for_bench(), policy)
        .map_err(|e| refused(format!("starting the bench session: {e}")))?;
    // A launch that failed because the simulated DSP restarted says why, as the bench recorded
    // it (a device's kernel only says that it restarted): e.g. the kernel ran past the per-call
    // limit, faulted, or made a host system call the executor's sandbox refuses.
    launch(&served, plan, image, inputs).map_err(|f| match (f, bench.last_restart()) {
        (Failure::Refused(m), Some(why)) => refused(format!("{m}; the bench recorded why: {why}")),
        (f, _) => f,
    })
}

/// `--bench` in a build without the bench (the vendor build).
#[cfg(not(feature = "bench"))]
fn bench_launch(_: &Plan, _: &'static [u8], _: &[Option<Vec<u8>>]) -> Result<Measured, Failure> {
    Err(refused("this build has no bench: the vendor build leaves the `bench` feature off"))
}

fn execute(plan: Plan) -> Result<String, Failure> {
    // Refusals that need no session.
    if plan.abi == AbiVersion::V1 {
        for (i, a) in plan.args.iter().enumerate() {
            if let ArgSpec::Buf(b) = a {
                if b.offset != 0 {
                    return Err(refused(format!(
                        "--arg {}: offset={} with --abi v1: v1 entries map the view at file offset 0 and would read the wrong bytes; \
                         use --abi v2 (rebuild the library with build-lib's default v2 entry)",
                        i + 1,
                        b.offset
                    )));
                }
            }
        }
    }
    let image = read_bounded(&plan.library, MAX_LIBRARY, "library")?;
    check_record(&plan, &image)?;
    let mut inputs = Vec::with_capacity(plan.args.len());
    for (i, a) in plan.args.iter().enumerate() {
        inputs.push(match a {
            ArgSpec::Buf(b) => match &b.input {
                Some(p) => {
                    let data = read_bounded(p, MAX_BUFFER, &format!("--arg {} in=", i + 1))?;
                    if let Some(size) = b.size {
                        if data.len() as u64 > size {
                            return Err(usage(format!(
                                "--arg {}: in={} holds {} bytes, more than size={size}",
                                i + 1,
                                p.display(),
                                data.len()
                            )));
                        }
                    }
                    Some(data)
                }
                None => None,
            },
            ArgSpec::Scalar(_) => None,
        });
    }
    let mode = match plan.mode {
        Some(m) => m,
        None if Path::new("/dev/adsprpc-smd").exists() => Mode::Device,
        None => return Err(refused("no DSP on this machine (/dev/adsprpc-smd is missing); add --bench to run on the bench")),
    };
    // Images are `'static` (the HAL's registry contract): this process runs one library.
    let image: &'static [u8] = Box::leak(image.into_boxed_slice());
    let measured = (|| match mode {
        Mode::Bench => bench_launch(&plan, image, &inputs),
        Mode::Device => {
            let served = super::device_session().map_err(|(u, m)| if u { usage(m) } else { refused(m) })?;
            launch(&served, &plan, image, &inputs)
        }
    })();
    // What was recorded is written whether the launch worked or not (a failure is the case
    // worth replaying).
    if let (Some(dir), Some(tap)) = (&plan.capture, plan.tap) {
        let (n, _) = tap.write(dir).map_err(|e| refused(format!("--capture {e}")))?;
        log::info!("captured {n} reverse requests into {}", dir.display());
    }
    let measured = measured?;
    Ok(report(&plan, mode, &measured))
}

/// Runs `hexrpc run`; prints the report (stdout) or the reason (stderr) and returns the exit code.
pub fn run(args: RunArgs) -> ExitCode {
    let result = check(args).and_then(|plan| {
        let progress = !plan.json;
        let mut p = progress.then(crate::progress::Progress::new);
        if let Some(p) = p.as_mut() {
            p.step("launching");
        }
        let r = execute(plan);
        drop(p);
        r
    });
    super::finish("run", result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sig: &str, specs: &[&str]) -> RunArgs {
        RunArgs {
            library: Some("x.so".into()),
            signature: Some(sig.into()),
            args: specs.iter().map(|s| s.to_string()).collect(),
            ..RunArgs::default()
        }
    }

    #[test]
    fn specs_are_checked_against_the_signature() {
        let p = check(args("buf,i32,f32,f16", &["in=a.bin,offset=8,out=o.bin", "-3", "-1.5", "1"])).unwrap();
        assert_eq!(p.args[0], ArgSpec::Buf(BufSpec { input: Some("a.bin".into()), output: Some("o.bin".into()), size: None, offset: 8 }));
        assert_eq!(p.args[1], ArgSpec::Scalar(Scalar::I32(-3)));
        assert_eq!(p.args[2], ArgSpec::Scalar(Scalar::F32(-1.5)));
        assert_eq!(p.args[3], ArgSpec::Scalar(Scalar::F16(0x3c00)));
        assert_eq!((p.abi, p.repeat), (AbiVersion::V2, 1));
        for (sig, specs) in [
            ("buf", &["size=x"][..]),
            ("buf", &["color=red"][..]),
            ("buf", &["out=o.bin"][..]),
            ("buf", &["size=64,size=128"][..]),
            ("buf", &["in=a.bin,out=a.bin"][..]),
            ("buf,buf", &["size=4,out=o.bin", "size=4,out=./o.bin"][..]),
            ("buf,u8", &["size=4", "256"][..]),
            ("buf,u8", &["size=4"][..]),
            ("i32", &["1.5"][..]),
        ] {
            assert!(matches!(check(args(sig, specs)), Err(Failure::Usage(_))), "{sig} {specs:?}");
        }
        let mut a = args("buf", &["size=4"]);
        a.abi = Some("v3".into());
        assert!(matches!(check(a), Err(Failure::Usage(_))));
        let mut a = args("buf", &["size=4"]);
        a.repeat = Some("0".into());
        assert!(matches!(check(a), Err(Failure::Usage(_))));
    }

    #[test]
    fn half_precision_rounds_to_nearest_even() {
        for (x, bits) in
            [(1.0f32, 0x3c00u16), (-2.0, 0xc000), (65504.0, 0x7bff), (1e6, 0x7c00), (0.0, 0), (5.960_464_5e-8, 1), (0.5, 0x3800)]
        {
            assert_eq!(f16_bits(x), bits, "{x}");
        }
        assert_eq!(f16_bits(f32::NAN) & 0x7c00, 0x7c00);
    }
}
