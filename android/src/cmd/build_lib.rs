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

/// Runs a build behind the progress line that names the tools.
#[cfg(feature = "build-lib")]
fn with_progress<T>(build: impl FnOnce() -> T) -> T {
    let mut progress = crate::progress::Progress::new();
    progress.step("clang-19 and ld.lld-19");
    build()
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
    let built = with_progress(|| build::build_library(&kernel, &sig, &out, &opts));
    match built {
        Ok(report) => {
            warn_scalar(&report.scalar_kernels);
            crate::io::print(&format!(
                "built {} (Hexagon shared object, kernel {}, entry {:?}); intermediates: {}\n",
                report.library.display(),
                report.kernel_name,
                opts.entry.version,
                report.entry_source.parent().map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        Err(e) => {
            eprintln!("hexrpc: build-lib: {e}");
            ExitCode::from(1)
        }
    }
}

/// Says which kernels clang-19 could only compile without HVX (correct, not vectorised).
#[cfg(feature = "build-lib")]
fn warn_scalar(kernels: &[String]) {
    if !kernels.is_empty() {
        log::warn!(
            "build-lib: clang-19's Hexagon backend cannot select HVX instructions for {}: compiled without HVX (same results, not vectorised)",
            kernels.join(", ")
        );
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
    let built = with_progress(|| build::build_table_library(&table, &out, &opts));
    match built {
        Ok(report) => {
            warn_scalar(&report.scalar_kernels);
            let kernels: Vec<String> = report
                .kernels
                .iter()
                .enumerate()
                .map(|(i, (n, st))| format!("{i}: {n}{}", if *st { " (returns int)" } else { "" }))
                .collect();
            crate::io::print(&format!(
                "built {} (Hexagon shared object, kernel table [{}], single launches of kernel 0 and batches); intermediates: {}\n",
                report.library.display(),
                kernels.join(", "),
                report.entry_source.parent().map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        Err(e) => {
            eprintln!("hexrpc: build-lib: {e}");
            ExitCode::from(1)
        }
    }
}
