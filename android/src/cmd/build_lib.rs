//! `hexrpc build-lib`: a Hexagon library from kernel C, through the library builder
//! (`hexrpc-libbuild`, which runs clang and ld.lld).

use std::process::ExitCode;

use crate::cli::BuildLibArgs;

/// `p` as an operand that no tool can take for an option.
#[cfg(feature = "build-lib")]
fn operand(p: std::path::PathBuf) -> std::path::PathBuf {
    if p.as_os_str().as_encoded_bytes().starts_with(b"-") {
        std::path::Path::new(".").join(p)
    } else {
        p
    }
}

/// `--table [FILE:]NAME:SIG` -> the table entry (FILE defaults to the first KERNEL.c given).
#[cfg(feature = "build-lib")]
fn table_entry(text: &str, sources: &[std::path::PathBuf]) -> Result<hexrpc_libbuild::TableSource, String> {
    use hexrpc_runtime::launch::Signature;
    let mut parts = text.rsplitn(3, ':');
    let (Some(sig), Some(name)) = (parts.next(), parts.next()) else {
        return Err(format!("--table {text:?}: expected [FILE:]NAME:SIG"));
    };
    let source = match parts.next() {
        Some(f) => std::path::PathBuf::from(f),
        None => sources.first().cloned().ok_or_else(|| format!("--table {text:?}: no KERNEL.c given"))?,
    };
    let signature = Signature::parse(sig).map_err(|e| format!("--table {text:?}: {e}"))?;
    Ok(hexrpc_libbuild::TableSource { source, name: name.to_string(), signature })
}

/// The builder's options from the command line: `entry` with the power request of `--power`,
/// the kernel name, the extra flags and the tools (the builder's defaults where not given).
#[cfg(feature = "build-lib")]
fn build_options(
    mut entry: hexrpc_runtime::launch::EntryOptions,
    kernel_name: Option<String>,
    power: bool,
    cflags: Vec<std::ffi::OsString>,
    clang: Option<std::path::PathBuf>,
    lld: Option<std::path::PathBuf>,
) -> hexrpc_libbuild::BuildOptions {
    if power {
        entry.power_request = Some(hexrpc_runtime::launch::PowerRequest::TINYGRAD);
    }
    let defaults = hexrpc_libbuild::BuildOptions::default();
    hexrpc_libbuild::BuildOptions {
        entry,
        kernel_name,
        kernel_cflags: cflags,
        clang: clang.unwrap_or(defaults.clang),
        lld: lld.unwrap_or(defaults.lld),
        work_dir: None,
    }
}

/// Runs a build behind the progress line that names the tools (none under `-q`).
#[cfg(feature = "build-lib")]
fn with_progress<T>(build: impl FnOnce() -> T) -> T {
    if log::max_level() < log::LevelFilter::Warn {
        return build();
    }
    let mut progress = crate::progress::Progress::new();
    progress.step("clang-19 and ld.lld-19");
    build()
}

/// What starts every warning build-lib prints, one line each on stderr.
#[cfg(feature = "build-lib")]
const WARNING: &str = "hexrpc build-lib: warning:";

/// The HVX policy of `--require-hvx`.
#[cfg(feature = "build-lib")]
fn hvx_policy(require: bool) -> hexrpc_libbuild::HvxPolicy {
    if require {
        hexrpc_libbuild::HvxPolicy::Require
    } else {
        hexrpc_libbuild::HvxPolicy::Fallback
    }
}

/// Names each kernel clang-19 could only compile without HVX, with clang's reason: one line per
/// kernel on stderr, starting with [`WARNING`]. Printed whatever the log level: `-q` silences the
/// log and the progress line, never these, so a caller that runs `hexrpc -q build-lib` and
/// captures stderr (the Python package) can still pass them on.
#[cfg(feature = "build-lib")]
fn warn_without_hvx(report: &hexrpc_libbuild::BuildReport) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    for w in &report.without_hvx {
        let _ = writeln!(
            err,
            "{WARNING} kernel {} compiled without HVX (the same results, not vectorised; --require-hvx refuses it): clang-19 cannot \
             select HVX instructions for it: {}",
            w.kernel, w.reason
        );
    }
}

/// How the report line names the kernels' HVX code generation.
#[cfg(feature = "build-lib")]
fn hvx_summary(report: &hexrpc_libbuild::BuildReport) -> String {
    match (report.without_hvx.len(), report.kernels.len()) {
        (0, _) => "with HVX".to_owned(),
        (1, 1) => "without HVX".to_owned(),
        (lost, all) => format!("{lost} of {all} kernels without HVX"),
    }
}

/// Without the library builder (the device builds) there is nothing to build with.
#[cfg(not(feature = "build-lib"))]
pub fn build_lib(_: BuildLibArgs) -> ExitCode {
    crate::io::error(
        "this build has no library builder (built without the `build-lib` feature, as the device packages are); build libraries with \
         the desk build of hexrpc",
    );
    ExitCode::from(2)
}

/// Builds a library from one kernel, or a kernel table (`--table`).
#[cfg(feature = "build-lib")]
pub fn build_lib(bl: BuildLibArgs) -> ExitCode {
    use hexrpc_libbuild as build;
    use hexrpc_runtime::launch::{EntryOptions, Signature};
    if !bl.table.is_empty() {
        return build_table(bl);
    }
    let (Some(kernel), Some(sig), Some(out)) = (bl.kernel, bl.signature, bl.output) else {
        return ExitCode::from(2);
    };
    // Operands that start with `-` would reach clang and ld.lld as options: `./` keeps them
    // operands (the intermediates, named after the output, follow).
    let (kernel, out) = (operand(kernel), operand(out));
    let sig = match Signature::parse(&sig) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hexrpc: --signature {sig:?}: {e}");
            return ExitCode::from(2);
        }
    };
    let entry = if bl.v1 { EntryOptions::V1 } else { EntryOptions::V2_CACHED };
    let opts = build_options(entry, bl.kernel_name, bl.power, bl.cflags, bl.clang, bl.lld);
    let built = with_progress(|| build::build_library_with(&kernel, &sig, &out, &opts, hvx_policy(bl.require_hvx)));
    match built {
        Ok(report) => {
            warn_without_hvx(&report);
            crate::io::print(&format!(
                "built {} (Hexagon shared object, kernel {}, entry {:?}, {}); intermediates: {}\n",
                report.library.display(),
                report.kernel_name,
                opts.entry.version,
                hvx_summary(&report),
                report.entry_source.parent().map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        Err(e) => {
            eprintln!("hexrpc: build-lib: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(feature = "build-lib")]
fn build_table(bl: BuildLibArgs) -> ExitCode {
    use hexrpc_libbuild as build;
    use hexrpc_runtime::launch::EntryOptions;
    let (Some(first), Some(out)) = (bl.kernel, bl.output) else {
        return ExitCode::from(2);
    };
    let mut sources = vec![first];
    sources.extend(bl.more);
    let table: Result<Vec<_>, String> = bl.table.iter().map(|t| table_entry(t, &sources)).collect();
    let table = match table {
        Ok(t) => t,
        Err(e) => {
            eprintln!("hexrpc: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = build_options(EntryOptions::V2_CACHED, None, bl.power, bl.cflags, bl.clang, bl.lld);
    let built = with_progress(|| build::build_table_library_with(&table, &out, &opts, hvx_policy(bl.require_hvx)));
    match built {
        Ok(report) => {
            warn_without_hvx(&report);
            let kernels: Vec<String> = report
                .kernels
                .iter()
                .enumerate()
                .map(|(i, (n, st))| format!("{i}: {n}{}", if *st { " (returns int)" } else { "" }))
                .collect();
            crate::io::print(&format!(
                "built {} (Hexagon shared object, kernel table [{}], single launches of kernel 0 and batches, {}); intermediates: {}\n",
                report.library.display(),
                kernels.join(", "),
                hvx_summary(&report),
                report.entry_source.parent().map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        Err(e) => {
            eprintln!("hexrpc: build-lib: {e}");
            ExitCode::from(1)
        }
    }
}
