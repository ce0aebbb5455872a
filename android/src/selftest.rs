//! `hexrpc selftest`: the acceptance report, in the seed's order.
//!
//! Each check runs real code and reports a figure. Checks whose layer does not exist yet in this
//! build are reported as `skip` with the reason, never as `pass`.

use hexrpc_drivers::{ioc, layout, Fd, Mapping, OpenFlags, Prot, RustixSys, Syscalls};

use crate::json;

/// Where the checks ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// The isolated bench (no DSP on this machine).
    Bench,
    /// A real device.
    Device,
}

impl Platform {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Bench => "bench",
            Platform::Device => "device",
        }
    }
}

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The check ran and held.
    Pass,
    /// The check ran and did not hold.
    Fail,
    /// The check could not run here; `detail` says why.
    Skip,
}

impl Status {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }

    /// The tag of the readable report.
    pub fn tag(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Check {
    /// Short name.
    pub name: &'static str,
    /// The acceptance stage it belongs to.
    pub stage: &'static str,
    /// Outcome.
    pub status: Status,
    /// The measured figure.
    pub figure: String,
    /// Explanation.
    pub detail: String,
}

fn check(name: &'static str, stage: &'static str, r: Result<(String, String), (String, String)>) -> Check {
    match r {
        Ok((figure, detail)) => Check { name, stage, status: Status::Pass, figure, detail },
        Err((figure, detail)) => Check { name, stage, status: Status::Fail, figure, detail },
    }
}

fn skip(name: &'static str, stage: &'static str, why: &str) -> Check {
    Check { name, stage, status: Status::Skip, figure: String::new(), detail: why.to_string() }
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
fn seam() -> Result<(String, String), (String, String)> {
    let sys = RustixSys;
    let fail = |what: &str, e: hexrpc_drivers::Errno| (String::new(), format!("{what}: {e}"));
    let fd = sys.open(c"/dev/null", OpenFlags::READ_ONLY).map_err(|e| fail("open /dev/null", e))?;
    let mut word = 3u32;
    let r = hexrpc_drivers::adsprpc::getinfo(&sys, fd, word);
    let _ = sys.close(fd);
    word = match r {
        Err(hexrpc_drivers::Error::Os(e)) if e == hexrpc_drivers::Errno::ENOTTY || e == hexrpc_drivers::Errno::ENOSYS => e.0 as u32,
        other => return Err((String::new(), format!("GETINFO on /dev/null should fail with ENOTTY, got {other:?}"))),
    };
    let memfd = rustix_memfd().map_err(|e| fail("memfd", e))?;
    let mut map = Mapping::map_shared(sys, memfd, 8192, Prot::ReadWrite).map_err(|e| fail("mmap", e))?;
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    map.write_at(0, &pattern).map_err(|e| (String::new(), e.to_string()))?;
    let second = Mapping::map_shared(sys, memfd, 8192, Prot::Read).map_err(|e| fail("second mmap", e))?;
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

fn rustix_memfd() -> Result<Fd, hexrpc_drivers::Errno> {
    // The drivers' seam has no memfd call (ION makes the buffers on a device); a temporary file
    // under /tmp serves as the shared backing here.
    let path = std::env::temp_dir().join(format!("hexrpc-selftest-{}", std::process::id()));
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| hexrpc_drivers::Errno::EINVAL)?;
    std::fs::write(&path, vec![0u8; 8192]).map_err(|e| hexrpc_drivers::Errno(e.raw_os_error().unwrap_or(5)))?;
    let fd = RustixSys.open(&cpath, OpenFlags::READ_WRITE);
    let _ = std::fs::remove_file(&path);
    fd
}

/// Runs every check for `platform`, in the seed's order, reporting progress through `progress`
/// (the check about to run).
pub fn run(platform: Platform, progress: &mut dyn FnMut(&str)) -> Vec<Check> {
    use crate::checks;
    let mut out = Vec::new();
    let mut step = |name: &'static str, stage: &'static str, f: &dyn Fn() -> Result<(String, String), (String, String)>| {
        progress(name);
        out.push(check(name, stage, f()));
    };
    step("abi-layout", "parameter layout", &ioctl_sizes);
    step("syscall-seam", "parameter layout", &seam);
    step("launch-packing", "parameter layout", &checks::launch_packing);
    match platform {
        Platform::Bench => {
            step("view-offsets", "view offsets", &checks::view_offsets);
            step("fd-mapping-reclamation", "fd/mapping reclamation", &checks::reclamation);
            step("reverse-file-permissions", "reverse-RPC file permissions", &checks::reverse_permissions);
            step("timeouts", "timeouts", &checks::timeouts);
            step("concurrency", "concurrency", &checks::concurrency);
        }
        Platform::Device => {
            let why = "not run on the device: it needs the bench's fault injection and DSP ledger (run `hexrpc probe` for the device, `hexrpc selftest --bench` for these)";
            for (name, stage) in [
                ("view-offsets", "view offsets"),
                ("fd-mapping-reclamation", "fd/mapping reclamation"),
                ("reverse-file-permissions", "reverse-RPC file permissions"),
                ("timeouts", "timeouts"),
                ("concurrency", "concurrency"),
            ] {
                out.push(skip(name, stage, why));
            }
        }
    }
    progress("numerics");
    out.extend(executor());
    out
}

/// Numerics and latency: the model network's kernels run as real Hexagon code under
/// qemu-hexagon behind the bench (when clang-19, ld.lld-19 and qemu-hexagon are usable here),
/// every node compared with the reference, launch by launch and as one batch per run; latency
/// from the bench's cost model, labelled simulated.
fn executor() -> Vec<Check> {
    use hexrpc_bench::executor::{run_model, ModelError, ModelOptions};
    match run_model(&ModelOptions::default()) {
        Ok(report) => {
            let runs = report.simulated.count;
            vec![
                Check {
                    name: "numerics",
                    stage: "numerics",
                    status: Status::Pass,
                    figure: format!("{} nodes", report.nodes.len()),
                    detail: report.numerics_line(),
                },
                Check {
                    name: "latency",
                    stage: "latency",
                    status: Status::Pass,
                    figure: format!("p50 {:?} (simulated)", report.simulated.p50),
                    detail: format!("{runs} runs; {}", report.latency_line()),
                },
                Check {
                    name: "batch-numerics",
                    stage: "numerics",
                    status: Status::Pass,
                    figure: format!("{} nodes, {} crossing", report.batch.nodes.len(), report.batch.crossings_per_run),
                    detail: report.batch_numerics_line(),
                },
                Check {
                    name: "batch-latency",
                    stage: "latency",
                    status: Status::Pass,
                    figure: format!("p50 {:?} (simulated)", report.batch.simulated.p50),
                    detail: format!("{} runs; {}", report.batch.runs, report.batch_latency_line()),
                },
            ]
        }
        Err(ModelError::Unavailable(why)) => {
            let why = format!("skipped: the Hexagon executor is not available here ({why})");
            ["numerics", "latency", "batch-numerics", "batch-latency"]
                .into_iter()
                .map(|n| skip(n, if n.ends_with("numerics") { "numerics" } else { "latency" }, &why))
                .collect()
        }
        Err(e) => vec![
            Check { name: "numerics", stage: "numerics", status: Status::Fail, figure: String::new(), detail: format!("{e}") },
            skip("latency", "latency", "not run: the model failed"),
            skip("batch-numerics", "numerics", "not run: the model failed"),
            skip("batch-latency", "latency", "not run: the model failed"),
        ],
    }
}

/// The `--json` document.
pub fn to_json(platform: Platform, checks: &[Check]) -> String {
    let mut out = String::new();
    let mut top = json::Object::new(&mut out);
    top.str("platform", platform.name());
    top.raw("checks", |o| {
        o.push('[');
        for (i, c) in checks.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let mut e = json::Object::new(o);
            e.str("name", c.name).str("stage", c.stage).str("status", c.status.name()).str("figure", &c.figure).str("detail", &c.detail);
            e.end();
        }
        o.push(']');
    });
    top.end();
    out.push('\n');
    out
}

/// The readable report.
pub fn to_text(platform: Platform, checks: &[Check]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    match platform {
        Platform::Bench => {
            let _ = writeln!(out, "hexrpc selftest on the BENCH (no DSP on this machine; figures are not device figures)");
        }
        Platform::Device => {
            let _ = writeln!(out, "hexrpc selftest on the DEVICE");
        }
    }
    for c in checks {
        let _ = writeln!(out, "{}  {:<26} {:<30} {:<12} {}", c.status.tag(), c.name, c.stage, c.figure, c.detail);
    }
    let (p, f, s) = checks.iter().fold((0, 0, 0), |(p, f, s), c| match c.status {
        Status::Pass => (p + 1, f, s),
        Status::Fail => (p, f + 1, s),
        Status::Skip => (p, f, s + 1),
    });
    let _ = writeln!(out, "{p} passed, {f} failed, {s} skipped");
    out
}
