//! The acceptance report behind `hexrpc selftest`: the checks in acceptance order (parameter
//! layout, view offsets, fd/mapping reclamation, reverse-RPC file permissions, timeouts,
//! concurrency, numerics, latency).
//!
//! Each check runs real code and reports a figure. Checks whose layer does not exist yet in this
//! build are reported as `skip` with the reason, never as `pass`.

use hexrpc_drivers::{ioc, layout, Fd, Mapping, OpenFlags, Prot, RustixSys, Syscalls};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackError, PackedLaunch, Scalar, Signature};

use crate::device::LibraryChoice;
use crate::json;
use crate::verdict::{Check, Outcome, Platform, Status};

fn fail(detail: impl std::fmt::Display) -> (String, String) {
    (String::new(), detail.to_string())
}

/// Parameter layout: both launch ABI versions pack every buffer count 0..=15 with mixed scalars
/// exactly where the table says; v1 refuses a non-zero view offset.
pub fn launch_packing() -> Outcome {
    let owner = ();
    let mut packings = 0;
    for version in [AbiVersion::V1, AbiVersion::V2] {
        let layout = version.layout();
        for n in 0..=15usize {
            let mut sig_text: Vec<&str> = vec!["buf"; n];
            sig_text.extend(["i32", "f32", "u8"]);
            let sig = Signature::parse(&sig_text.join(",")).map_err(fail)?;
            let offset = |i: usize| if version == AbiVersion::V1 { 0 } else { 64 * i as u64 + 8 };
            let bufs: Vec<BufferRef<'_>> =
                (0..n).map(|i| BufferRef::borrowing(&owner, Fd(100 + i as i32), 65_536, offset(i), 1000 + i as u64)).collect();
            let scalars = [Scalar::I32(-7), Scalar::F32(2.5), Scalar::U8(9)];
            let packed = PackedLaunch::new(version, &sig, &bufs, &scalars).map_err(|e| fail(format!("{version:?} n={n}: {e}")))?;
            let (pra0, pra1) = (packed.pra0(), packed.pra1());
            let mut ok = Some(packed.scalars_word()) == layout.scalars(n);
            for i in 0..n {
                ok &= layout.buffer_len(pra0, i) == Some(1000 + i as u32);
                ok &= layout.view(pra1, i).map(|(off, _)| off) == Some(offset(i) as u32);
                ok &= packed.fds().get(i) == Some(&Fd(100 + i as i32));
            }
            for (j, s) in scalars.iter().enumerate() {
                ok &= layout.scalar(pra0, n, j, s.ty()) == Some(*s);
            }
            if !ok {
                return Err(fail(format!("{version:?} with {n} buffers: packed bytes differ from the table")));
            }
            packings += 1;
        }
    }
    let sig = Signature::parse("buf,u32").map_err(fail)?;
    let refused = PackedLaunch::new(AbiVersion::V1, &sig, &[BufferRef::borrowing(&owner, Fd(100), 8192, 64, 100)], &[Scalar::U32(1)]);
    if !matches!(refused, Err(PackError::V1NonZeroOffset { .. })) {
        return Err(fail(format!("v1 with a view at offset 64 was not refused: {refused:?}")));
    }
    Ok((format!("{packings} packings"), "v1 and v2, 0..=15 buffers, i32/f32/u8 scalars, as the table says; v1 offset view refused".into()))
}

fn skip(name: &'static str, stage: &'static str, why: &str) -> Check {
    skip_with_hint(name, stage, why, String::new())
}

fn skip_with_hint(name: &'static str, stage: &'static str, why: &str, hint: String) -> Check {
    Check { name, stage, status: Status::Skip, figure: String::new(), detail: why.to_string(), hint }
}

fn failed(name: &'static str, stage: &'static str, detail: String) -> Check {
    Check::of(name, stage, Err((String::new(), detail)))
}

/// Every ioctl's size field equals the size of the struct this build declares for it.
fn ioctl_sizes() -> Result<(String, String), (String, String)> {
    use hexrpc_drivers::{adsprpc, ion};
    let by_name = |n: &str| layout::STRUCTS.iter().find(|s| s.name == n).map(|s| s.size);
    let expect: &[(u32, Option<usize>)] = &[
        (ion::ION_IOC_ALLOC, by_name("ion_allocation_data")),
        (ion::ION_IOC_FREE, by_name("ion_handle_data")),
        (ion::ION_IOC_SHARE, by_name("ion_fd_data")),
        (ion::ION_IOC_CLEAN_CACHES, by_name("ion_flush_data")),
        (adsprpc::FASTRPC_IOCTL_INVOKE, by_name("fastrpc_ioctl_invoke")),
        (adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS, by_name("fastrpc_ioctl_invoke_attrs")),
        (adsprpc::FASTRPC_IOCTL_INIT, by_name("fastrpc_ioctl_init")),
        (adsprpc::FASTRPC_IOCTL_MMAP, by_name("fastrpc_ioctl_mmap")),
        (adsprpc::FASTRPC_IOCTL_CONTROL, by_name("fastrpc_ioctl_control")),
    ];
    let mut bad = Vec::new();
    for (nr, size) in expect {
        if Some(ioc::size(*nr)) != *size {
            bad.push(format!("{nr:#x}"));
        }
    }
    let n = crate::abi::ioctls().count();
    if bad.is_empty() {
        Ok((format!("{n} requests"), format!("{} structs laid out as the aarch64 headers", layout::STRUCTS.len())))
    } else {
        Err((format!("{} mismatches", bad.len()), bad.join(", ")))
    }
}

/// The real syscall seam: an unknown ioctl on a real fd, and a shared mapping round trip.
fn seam_check() -> Result<(String, String), (String, String)> {
    let sys = RustixSys;
    let fail = |what: &str, e: hexrpc_drivers::Errno| (String::new(), format!("{what}: {e}"));
    let fd = sys.open(c"/dev/null", OpenFlags::READ_ONLY).map_err(|e| fail("open /dev/null", e))?;
    let mut word = 3u32;
    let r = hexrpc_drivers::adsprpc::getinfo(&sys, fd.raw(), word);
    let _ = sys.close(fd);
    word = match r {
        Err(hexrpc_drivers::Error::Os(e)) if e == hexrpc_drivers::Errno::ENOTTY || e == hexrpc_drivers::Errno::ENOSYS => e.0 as u32,
        other => return Err((String::new(), format!("GETINFO on /dev/null should fail with ENOTTY, got {other:?}"))),
    };
    let memfd = rustix_memfd().map_err(|e| fail("memfd", e))?;
    let mut map = Mapping::map_shared(sys, memfd.raw(), 8192, Prot::ReadWrite).map_err(|e| fail("mmap", e))?;
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    map.write_at(0, &pattern).map_err(|e| (String::new(), e.to_string()))?;
    let second = Mapping::map_shared(sys, memfd.raw(), 8192, Prot::Read).map_err(|e| fail("second mmap", e))?;
    let mut back = vec![0u8; 8192];
    second.read_at(0, &mut back).map_err(|e| (String::new(), e.to_string()))?;
    let oob = second.read_at(8000, &mut [0u8; 200]).is_err();
    map.unmap().map_err(|e| fail("munmap", e))?;
    second.unmap().map_err(|e| fail("munmap", e))?;
    let _ = sys.close(memfd);
    if back != pattern || !oob {
        return Err(("0 bytes".into(), "shared mapping did not round-trip, or an out-of-range read was allowed".into()));
    }
    Ok(("8192 bytes".into(), format!("unknown ioctl -> errno {word}; two shared mappings of one fd agree; out-of-range read refused")))
}

fn rustix_memfd() -> Result<hexrpc_drivers::OwnedFd, hexrpc_drivers::Errno> {
    // The drivers' seam has no memfd call (ION makes the buffers on a device); a temporary file
    // under /tmp serves as the shared backing here.
    let path = std::env::temp_dir().join(format!("hexrpc-selftest-{}", std::process::id()));
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| hexrpc_drivers::Errno::EINVAL)?;
    std::fs::write(&path, vec![0u8; 8192]).map_err(|e| hexrpc_drivers::Errno(e.raw_os_error().unwrap_or(5)))?;
    let fd = RustixSys.open(&cpath, OpenFlags::READ_WRITE);
    let _ = std::fs::remove_file(&path);
    fd
}

/// How the device checks reach their target.
pub enum DeviceSeam {
    /// The real nodes of this board (and how the board was chosen).
    Real(&'static hexrpc_bsp::Board, crate::probe::BoardSource),
    /// The test seam: the bench stands in for the device nodes (`--seam bench`).
    #[cfg(feature = "bench")]
    Bench,
}

/// The checks that need the bench (fault injection, the DSP ledger, qemu-hexagon), with why a
/// device run skips them.
const BENCH_ONLY: &[(&str, &str)] = &[
    ("bench-ledger-view-offsets", "view offsets"),
    ("bench-init-rollback", "fd/mapping reclamation"),
    ("bench-hostile-dsp", "reverse-RPC file permissions"),
    ("bench-hang-recovery", "timeouts"),
    ("bench-concurrency-ledger", "concurrency"),
    ("numerics", "numerics"),
    ("latency", "latency"),
];

/// Runs every check for `platform`, in acceptance order, reporting progress through `progress`
/// (the check about to run). `library` is the device test library (device platform and bench
/// alike); `seam` says what the device platform talks to.
pub fn run(platform: Platform, seam: DeviceSeam, library: LibraryChoice, progress: &mut dyn FnMut(&str)) -> Vec<Check> {
    let mut out = Vec::new();
    {
        let mut step = |name: &'static str, stage: &'static str, f: &dyn Fn() -> Result<(String, String), (String, String)>| {
            progress(name);
            out.push(Check::of(name, stage, f()));
        };
        step("abi-layout", "parameter layout", &ioctl_sizes);
        step("syscall-seam", "parameter layout", &seam_check);
        step("launch-packing", "parameter layout", &launch_packing);
    }
    match platform {
        #[cfg(feature = "bench")]
        Platform::Bench => {
            use crate::checks;
            let mut step = |name: &'static str, stage: &'static str, f: &dyn Fn() -> Result<(String, String), (String, String)>| {
                progress(name);
                out.push(Check::of(name, stage, f()));
            };
            step("bench-ledger-view-offsets", "view offsets", &checks::view_offsets);
            step("bench-init-rollback", "fd/mapping reclamation", &checks::reclamation);
            step("bench-hostile-dsp", "reverse-RPC file permissions", &checks::reverse_permissions);
            step("bench-hang-recovery", "timeouts", &checks::timeouts);
            step("bench-concurrency-ledger", "concurrency", &checks::concurrency);
            out.extend(device_on_bench(library, progress));
            progress("numerics");
            out.extend(executor());
        }
        #[cfg(not(feature = "bench"))]
        Platform::Bench => {
            let _ = (seam, library);
            out.push(skip("bench", "bench", "this build has no bench (the vendor build leaves the `bench` feature off)"));
        }
        Platform::Device => {
            out.extend(device_checks(seam, library, progress));
            let why =
                "bench only: needs fault injection, the simulated DSP's ledger or qemu-hexagon (run `hexrpc selftest --bench` on a desk)";
            for (name, stage) in BENCH_ONLY {
                out.push(skip(name, stage, why));
            }
        }
    }
    out
}

#[cfg(feature = "bench")]
/// The device test library's checks on the bench: the library built by build-lib (or the one
/// given) run as Hexagon code by the executor when it can be built and loaded here, otherwise
/// the scripted model of its kernel. Each line says which.
fn device_on_bench(library: LibraryChoice, progress: &mut dyn FnMut(&str)) -> Vec<Check> {
    let mut checks = Vec::new();
    let (target, lib) = crate::checks::bench_device_setup(library);
    progress("probe");
    let probe_lib = crate::probe::ProbeLibrary { name: crate::device::NAME.into(), image: lib.image };
    let report =
        crate::probe::run((target.make)(), &target.access, crate::probe::BoardSource::Bench, crate::probe::Host::Bench, Some(&probe_lib));
    if report.failed() {
        checks.push(failed("probe", "device", report.summary()));
        return checks;
    }
    checks.extend(crate::device::run(&target, &lib, progress));
    for c in &mut checks {
        c.detail = format!("{} [bench: {}]", c.detail, lib.origin);
    }
    checks
}

const DEVICE_CHECKS: &[(&str, &str)] = &[
    ("view-offsets", "view offsets"),
    ("v1-refusal", "view offsets"),
    ("fd-mapping-reclamation", "fd/mapping reclamation"),
    ("reverse-file-permissions", "reverse-RPC file permissions"),
    ("deadline", "timeouts"),
    ("concurrency", "concurrency"),
];

/// The device platform: the probe chain (nodes opened; a missing one fails and is named), then
/// the device test library's checks.
fn device_checks(seam: DeviceSeam, library: LibraryChoice, progress: &mut dyn FnMut(&str)) -> Vec<Check> {
    use crate::probe::Host;
    match seam {
        DeviceSeam::Real(board, source) => {
            let target = crate::device::Target {
                make: Box::new(|| RustixSys),
                access: hexrpc_bsp::DeviceAccess::for_device(board),
                on_served: Box::new(|_, _| {}),
            };
            device_checks_on(&target, source, Host::Real, library, false, progress)
        }
        #[cfg(feature = "bench")]
        DeviceSeam::Bench => {
            let (target, lib) = crate::checks::bench_device_setup(library);
            device_checks_on(&target, crate::probe::BoardSource::Bench, Host::Bench, Ok(lib), true, progress)
        }
    }
}

fn device_checks_on<S: Syscalls + Clone + Send + Sync + 'static>(
    target: &crate::device::Target<S>,
    source: crate::probe::BoardSource,
    host: crate::probe::Host,
    library: LibraryChoice,
    on_bench: bool,
    progress: &mut dyn FnMut(&str),
) -> Vec<Check> {
    use crate::probe::{self, ProbeLibrary};
    progress("probe");
    let probe_lib = library.as_ref().ok().map(|l| ProbeLibrary { name: crate::device::NAME.into(), image: l.image });
    let report = probe::run((target.make)(), &target.access, source, host, probe_lib.as_ref());
    let mut out = Vec::new();
    // Steps that only inform (how the board was chosen) do not gate the device checks.
    let gating: Vec<&probe::Step> = report.steps.iter().filter(|s| s.status == Status::Fail && s.name != "board").collect();
    if gating.is_empty() {
        let (p, _, _) = report.counts();
        out.push(Check::of("probe", "device", Ok((format!("{p} steps"), report.summary()))));
    } else {
        for s in &gating {
            out.push(failed(
                s.name,
                "device",
                if s.hint.is_empty() { s.detail.clone() } else { format!("{}; what to do: {}", s.detail, s.hint) },
            ));
        }
    }
    let lib = match library {
        Ok(l) => l,
        Err(why) => {
            out.push(failed("device-library", "device", why));
            for (name, stage) in DEVICE_CHECKS {
                out.push(skip(name, stage, "not run: no device test library"));
            }
            return out;
        }
    };
    if !gating.is_empty() {
        for (name, stage) in DEVICE_CHECKS {
            out.push(skip(name, stage, "not run: the probe failed (see above)"));
        }
        return out;
    }
    let mut checks = crate::device::run(target, &lib, progress);
    if on_bench {
        for c in &mut checks {
            c.detail = format!("{} [bench seam: {}]", c.detail, lib.origin);
        }
    }
    out.extend(checks);
    out
}

#[cfg(feature = "bench")]
/// The checks that run real Hexagon code (the model network under the executor), with their
/// stages.
const EXECUTOR_CHECKS: [(&str, &str); 4] =
    [("numerics", "numerics"), ("latency", "latency"), ("batch-numerics", "numerics"), ("batch-latency", "latency")];

#[cfg(feature = "bench")]
/// Numerics and latency: the model network's kernels run as real Hexagon code under
/// qemu-hexagon behind the bench (when clang-19, ld.lld-19 and qemu-hexagon are usable here),
/// every node compared with the reference, launch by launch and as one batch per run; latency
/// from the bench's cost model, labelled simulated. Without the tools every check is a skip that
/// names the missing ones, with the hint of what to install.
fn executor() -> Vec<Check> {
    use hexrpc_bench::executor::build::Toolchain;
    use hexrpc_scenarios::{run_model, ModelError, ModelOptions};
    let unavailable = |why: &dyn std::fmt::Display, hint: String| {
        let why = format!("skipped: the Hexagon executor is not available here: {why}");
        EXECUTOR_CHECKS.iter().map(|&(name, stage)| skip_with_hint(name, stage, &why, hint.clone())).collect()
    };
    if let Err(e) = Toolchain::find() {
        return unavailable(&e, e.hint());
    }
    match run_model(&ModelOptions { board: crate::checks::board(), ..ModelOptions::default() }) {
        Ok(report) => {
            let runs = report.simulated.count;
            let checks = [
                (format!("{} nodes", report.nodes.len()), report.numerics_line()),
                (
                    format!("p50 {} (simulated)", crate::human::duration(report.simulated.p50)),
                    format!("{runs} runs; {}", report.latency_line()),
                ),
                (format!("{} nodes, {} crossing", report.batch.nodes.len(), report.batch.crossings_per_run), report.batch_numerics_line()),
                (
                    format!("p50 {} (simulated)", crate::human::duration(report.batch.simulated.p50)),
                    format!("{} runs; {}", report.batch.runs, report.batch_latency_line()),
                ),
            ];
            EXECUTOR_CHECKS.iter().zip(checks).map(|(&(name, stage), r)| Check::of(name, stage, Ok(r))).collect()
        }
        // The tools went away between the two looks.
        Err(ModelError::Unavailable(why)) => unavailable(&why, String::new()),
        Err(e) => {
            let [(name, stage), rest @ ..] = EXECUTOR_CHECKS;
            std::iter::once(failed(name, stage, e.to_string()))
                .chain(rest.iter().map(|&(name, stage)| skip(name, stage, "not run: the model failed")))
                .collect()
        }
    }
}

/// The `--json` document.
pub fn to_json(platform: Platform, device_board: Option<&str>, checks: &[Check]) -> String {
    let mut out = String::new();
    let mut top = json::Object::new(&mut out);
    top.str("platform", platform.name());
    #[cfg(feature = "bench")]
    if platform == Platform::Bench {
        top.str("board", crate::checks::board().name);
    }
    if let (Platform::Device, Some(b)) = (platform, device_board) {
        top.str("board", b);
    }
    top.raw("checks", |o| {
        o.push('[');
        for (i, c) in checks.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let mut e = json::Object::new(o);
            e.str("name", c.name).str("stage", c.stage).str("status", c.status.name()).str("figure", &c.figure).str("detail", &c.detail);
            e.str("hint", &c.hint);
            e.end();
        }
        o.push(']');
    });
    top.end();
    out.push('\n');
    out
}

/// The readable report: columns sized to their widest entry, so they stay aligned.
pub fn to_text(platform: Platform, header: &str, checks: &[Check]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    match platform {
        #[cfg(feature = "bench")]
        Platform::Bench => {
            let b = crate::checks::board();
            let _ = writeln!(
                out,
                "hexrpc selftest on the BENCH, board {} ({} + {}; no DSP on this machine; figures are not device figures)",
                b.name,
                b.allocator.name(),
                b.abi.name()
            );
        }
        #[cfg(not(feature = "bench"))]
        Platform::Bench => {
            let _ = writeln!(out, "hexrpc selftest on the BENCH (this build has no bench)");
        }
        Platform::Device => {
            let _ = writeln!(out, "hexrpc selftest on the DEVICE{header}");
        }
    }
    let w = |f: fn(&Check) -> usize| checks.iter().map(f).max().unwrap_or(0);
    let (wn, ws, wf) = (w(|c| c.name.len()), w(|c| c.stage.len()), w(|c| c.figure.chars().count()));
    for c in checks {
        let line = format!("{}  {:<wn$}  {:<ws$}  {:<wf$}  {}", c.status.tag(), c.name, c.stage, c.figure, c.detail);
        let _ = writeln!(out, "{}", crate::io::escape(line.trim_end()));
    }
    // Each hint once, under the checks, naming the checks it would make run (several skips
    // share one cause, e.g. the missing Hexagon toolchain).
    let mut hints: Vec<(&str, Vec<&str>)> = Vec::new();
    for c in checks.iter().filter(|c| !c.hint.is_empty()) {
        match hints.iter_mut().find(|(h, _)| *h == c.hint) {
            Some((_, names)) => names.push(c.name),
            None => hints.push((&c.hint, vec![c.name])),
        }
    }
    for (hint, names) in hints {
        let _ = writeln!(out, "      what to do ({}): {}", names.join(", "), crate::io::escape(hint));
    }
    let (p, f, s) = checks.iter().fold((0, 0, 0), |(p, f, s), c| match c.status {
        Status::Pass => (p + 1, f, s),
        Status::Fail => (p, f + 1, s),
        Status::Skip => (p, f, s + 1),
    });
    let _ = writeln!(out, "{p} passed, {f} failed, {s} skipped");
    out
}
