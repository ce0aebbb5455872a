//! The build: its options and report, the single-kernel and table entry points, and the pipeline
//! from kernel sources to the checked library installed at the output (see the crate docs).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use hexrpc_runtime::launch::record::{write_record_asm_hvx, FLAG_BATCHES, FLAG_MAP_CACHE, FLAG_POWER, FLAG_PROGRAM};
use hexrpc_runtime::launch::{
    check_kernel_name, write_batch_entry, write_entry, EntryError, EntryOptions, KernelSpec as TableEntry, LibraryRecord, RecordError,
    Signature,
};

use crate::ast::{kernel_params, on_ast_stack, short_to_half_casts, KernelLookup};
use crate::consts::{DEFAULT_CLANG, DEFAULT_LLD, ENTRY_CFLAGS, HEXAGON_CFLAGS, SECTION_ALIGN};
use crate::elf::{object_undefined, parse_elf, ElfSummary};
use crate::error::{io_err, BuildError};
use crate::freestanding;
use crate::kernel::{check_params, include_line, KernelSpec};
use crate::library::{check_library, write_linker_script};
use crate::output::{fresh_work_dir, install_output, lock_output, same_file};
use crate::tools::{compile_hexagon, compile_kernel, compile_kernel_without_hvx, operand, run, run_output};

/// How to build a library.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// The entry's version, power request and map cache (default: v2 with the map cache, whose
    /// build record then carries `FLAG_MAP_CACHE`).
    pub entry: EntryOptions,
    /// The kernel's C function name; by default the kernel file's stem.
    pub kernel_name: Option<String>,
    /// The compiler (default [`DEFAULT_CLANG`]).
    pub clang: PathBuf,
    /// The linker (default [`DEFAULT_LLD`]).
    pub lld: PathBuf,
    /// Extra flags for the kernel's translation unit (`-I`, `-D`, `-Wall`), after the build's own
    /// ([`HEXAGON_CFLAGS`], [`KERNEL_CFLAGS`](crate::KERNEL_CFLAGS)).
    pub kernel_cflags: Vec<OsString>,
    /// Where the intermediate files go; by default `OUT.build/` next to the output. Builds to
    /// the same output take turns (on `OUT.build.lock`), whatever their work directories; a
    /// work directory given here must not be shared by builds to different outputs that run at
    /// the same time.
    pub work_dir: Option<PathBuf>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            entry: EntryOptions::V2_CACHED,
            kernel_name: None,
            clang: PathBuf::from(DEFAULT_CLANG),
            lld: PathBuf::from(DEFAULT_LLD),
            kernel_cflags: Vec::new(),
            work_dir: None,
        }
    }
}

/// What a build produced.
#[derive(Clone, Debug)]
pub struct BuildReport {
    /// The shared object.
    pub library: PathBuf,
    /// The kernel function the entry calls (a table library: kernel 0).
    pub kernel_name: String,
    /// Every kernel, in table order, and whether it returns a status (`int`).
    pub kernels: Vec<(String, bool)>,
    /// True if the entry runs batches (a table library).
    pub batch: bool,
    /// The generated entry source.
    pub entry_source: PathBuf,
    /// The generated linker script.
    pub linker_script: PathBuf,
    /// The library as parsed back.
    pub elf: ElfSummary,
    /// The helpers and libm functions linked into the library, hidden
    /// ([`freestanding::CARRIED_HELPERS`]), in that table's order.
    pub carried_helpers: Vec<&'static str>,
    /// The kernels compiled without HVX code generation ([`HvxPolicy::Fallback`]), in table
    /// order: correct, not vectorised. The build record counts them
    /// ([`LibraryRecord::kernels_without_hvx`]).
    pub without_hvx: Vec<WithoutHvx>,
}

/// A kernel the build compiled without HVX code generation, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WithoutHvx {
    /// The kernel's C function name.
    pub kernel: String,
    /// clang-19's reason: the first line of its error when compiling the kernel's source with
    /// HVX (`fatal error: error in backend: Cannot select: ...`), cut at 240 characters.
    pub reason: String,
}

/// What the build does with a kernel clang-19's Hexagon backend cannot compile with HVX (it
/// fails to select HVX instructions for some vector operation: a compiler defect, not a fault of
/// the kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HvxPolicy {
    /// Compile it again without HVX code generation (the same results, not vectorised), name
    /// it in [`BuildReport::without_hvx`] and count it in the build record.
    #[default]
    Fallback,
    /// Refuse it: the build fails with [`BuildError::HvxUnavailable`] and nothing is put at the
    /// output (`hexrpc build-lib --require-hvx`).
    Require,
}

/// One kernel of a table library ([`build_table_library`]): the C source that defines it, its
/// function name and its signature. Several kernels may come from the same source.
#[derive(Clone, Debug)]
pub struct TableSource {
    /// The C source defining the kernel.
    pub source: PathBuf,
    /// The kernel's C function name.
    pub name: String,
    /// Its signature.
    pub signature: Signature,
}

/// Builds a library whose kernel table is `kernels` (index = position) and whose entry answers
/// both single v2 launches (of kernel 0) and batches over the table (`write_batch_entry`). A
/// kernel may return `void` or `int` (a non-zero `int` stops a batch and is reported with its
/// record). Kernels from the same source are compiled together, once. Needs the v2 entry.
pub fn build_table_library(kernels: &[TableSource], out: &Path, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    build_table_library_with(kernels, out, opts, HvxPolicy::Fallback)
}

/// [`build_table_library`] with a choice of what happens to a kernel clang-19 cannot compile
/// with HVX ([`HvxPolicy`]).
pub fn build_table_library_with(
    kernels: &[TableSource],
    out: &Path,
    opts: &BuildOptions,
    hvx: HvxPolicy,
) -> Result<BuildReport, BuildError> {
    // Table-level refusals (count, names, version) before any tool runs.
    let dry: Vec<TableEntry<'_>> =
        kernels.iter().map(|k| TableEntry { name: &k.name, signature: k.signature, returns_status: false }).collect();
    write_batch_entry(&mut String::new(), &dry, &opts.entry)?;
    let specs: Vec<KernelSpec<'_>> =
        kernels.iter().map(|k| KernelSpec { source: &k.source, name: k.name.clone(), sig: &k.signature }).collect();
    build_kernels(&specs, out, opts, true, hvx)
}

/// Builds `out` from the kernel source `kernel_c` with signature `sig` (see the module docs).
pub fn build_library(kernel_c: &Path, sig: &Signature, out: &Path, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    build_library_with(kernel_c, sig, out, opts, HvxPolicy::Fallback)
}

/// [`build_library`] with a choice of what happens to a kernel clang-19 cannot compile with HVX
/// ([`HvxPolicy`]).
pub fn build_library_with(
    kernel_c: &Path,
    sig: &Signature,
    out: &Path,
    opts: &BuildOptions,
    hvx: HvxPolicy,
) -> Result<BuildReport, BuildError> {
    let kernel_name = match &opts.kernel_name {
        Some(n) => n.clone(),
        None => kernel_c.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    check_kernel_name(&kernel_name).map_err(|_| BuildError::KernelName(kernel_name.clone()))?;
    let kernels = [KernelSpec { source: kernel_c, name: kernel_name, sig }];
    build_kernels(&kernels, out, opts, false, hvx)
}

fn build_kernels(
    kernels: &[KernelSpec<'_>],
    out: &Path,
    opts: &BuildOptions,
    table: bool,
    hvx: HvxPolicy,
) -> Result<BuildReport, BuildError> {
    let first = kernels.first().ok_or(BuildError::Record(RecordError::KernelCount(0)))?;
    // Refusals that need no tool.
    for k in kernels {
        if !std::fs::metadata(k.source).map_err(io_err(k.source))?.is_file() {
            return Err(BuildError::KernelNotFile(k.source.to_path_buf()));
        }
        if same_file(k.source, out) {
            return Err(BuildError::OutputIsInput(out.to_path_buf()));
        }
    }
    if std::fs::metadata(out).is_ok_and(|m| m.is_dir()) || out.file_name().is_none() {
        return Err(BuildError::OutputIsDirectory(out.to_path_buf()));
    }
    if std::fs::symlink_metadata(out).is_ok_and(|m| !m.is_file()) {
        return Err(BuildError::OutputNotRegular(out.to_path_buf()));
    }
    let work = match &opts.work_dir {
        Some(w) => w.clone(),
        None => {
            let mut name = out.file_name().map(OsString::from).unwrap_or_else(|| OsString::from("lib"));
            name.push(".build");
            out.with_file_name(name)
        }
    };
    if kernels.iter().any(|k| same_file(k.source, &work) || k.source.starts_with(&work)) {
        return Err(BuildError::WorkDirInUse(work));
    }
    // Held until the library is installed: builds to `out` take turns from here on.
    let _lock = lock_output(out)?;
    fresh_work_dir(&work)?;
    let include_dir = freestanding::write_include_dir(&work).map_err(io_err(&work))?;
    let include = freestanding::include_flags(&include_dir);

    let mut script = String::new();
    write_linker_script(&mut script).map_err(|_| BuildError::Entry(EntryError::Format))?;
    let linker_script = work.join("link.ld");
    std::fs::write(&linker_script, &script).map_err(io_err(&linker_script))?;

    // Each kernel: found and matched against its signature; each source is then compiled once,
    // with the prototypes of every kernel it defines.
    let mut objects = Vec::new();
    let mut without_hvx: Vec<(usize, WithoutHvx)> = Vec::new();
    let mut protos: Vec<String> = Vec::with_capacity(kernels.len());
    let mut status: Vec<bool> = Vec::with_capacity(kernels.len());
    for k in kernels {
        let mut args: Vec<OsString> = HEXAGON_CFLAGS.iter().map(OsString::from).collect();
        args.extend(opts.kernel_cflags.iter().cloned());
        args.extend(include.iter().cloned());
        args.extend(["-fsyntax-only", "-Xclang", "-ast-dump=json", "-Xclang", "-ast-dump-filter", "-Xclang"].map(OsString::from));
        args.push(OsString::from(&k.name));
        args.extend(["--".into(), operand(k.source)]);
        let dump = run_output(&opts.clang, &args)?;
        let missing = |declared| BuildError::KernelMissing { kernel: k.name.clone(), source: k.source.to_path_buf(), declared };
        let (lookup, casts) = on_ast_stack(|| (kernel_params(&dump, &k.name), short_to_half_casts(&dump, &k.name)));
        let (params, ret) = match lookup {
            Ok(KernelLookup::Defined(params, ret)) => (params, ret),
            Ok(KernelLookup::Declared) => return Err(missing(true)),
            Ok(KernelLookup::Missing) => return Err(missing(false)),
            Err(detail) => return Err(BuildError::AstDump { source: k.source.to_path_buf(), detail }),
        };
        match casts {
            Ok(lines) if lines.is_empty() => {}
            Ok(lines) => return Err(BuildError::ShortToHalf { kernel: k.name.clone(), lines: lines.into_iter().flatten().collect() }),
            Err(detail) => return Err(BuildError::AstDump { source: k.source.to_path_buf(), detail }),
        }
        let (proto, returns) = check_params(k, &params, &ret, table)?;
        protos.push(proto);
        status.push(returns);
    }
    let mut done: Vec<usize> = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        if done.iter().any(|&d| same_file(kernels[d].source, k.source)) {
            continue;
        }
        done.push(i);
        let mut text = format!(
            "/* Generated by hexrpc build-lib: the kernel source, then the prototypes its signatures imply. */\n{}",
            include_line(k.source)?
        );
        for (j, other) in kernels.iter().enumerate() {
            if same_file(other.source, k.source) {
                text.push_str(&format!("/* {} \"{}\" */\n{}", other.name, other.sig, protos[j]));
            }
        }
        let n = objects.len();
        let checked = work.join(format!("kernel{n}.c"));
        std::fs::write(&checked, text).map_err(io_err(&checked))?;
        let obj = work.join(format!("kernel{n}.o"));
        let mut flags = opts.kernel_cflags.clone();
        flags.extend(include.iter().cloned());
        if let Some(reason) = compile_kernel(&opts.clang, &checked, &obj, &flags)? {
            // Every kernel this source defines loses HVX with it.
            let lost = kernels.iter().enumerate().filter(|(_, other)| same_file(other.source, k.source));
            if hvx == HvxPolicy::Require {
                let kernels = lost.map(|(_, other)| other.name.clone()).collect();
                return Err(BuildError::HvxUnavailable { kernels, source: k.source.to_path_buf(), reason });
            }
            compile_kernel_without_hvx(&opts.clang, &checked, &obj, &flags)?;
            without_hvx.extend(lost.map(|(j, other)| (j, WithoutHvx { kernel: other.name.clone(), reason: reason.clone() })));
        }
        objects.push(obj);
    }
    // The functions the kernel objects call that the library carries itself: only those, one
    // translation unit per source that defines some.
    let mut undefined = Vec::new();
    for obj in &objects {
        let bytes = std::fs::read(obj).map_err(io_err(obj))?;
        undefined.extend(object_undefined(&bytes).map_err(BuildError::Elf)?);
    }
    let carried_helpers = freestanding::helpers_needed(undefined.iter().map(String::as_str));
    for (carried, functions) in freestanding::sources_for(&carried_helpers) {
        let source = work.join(carried.file);
        std::fs::write(&source, carried.text).map_err(io_err(&source))?;
        let obj = source.with_extension("o");
        let mut flags: Vec<OsString> = ENTRY_CFLAGS.iter().map(OsString::from).collect();
        flags.extend(freestanding::helper_defines(&functions));
        compile_hexagon(&opts.clang, &source, &obj, &flags)?;
        objects.push(obj);
    }
    let mut entry_text = String::new();
    if table {
        let specs: Vec<TableEntry<'_>> = kernels
            .iter()
            .zip(&status)
            .map(|(k, &returns_status)| TableEntry { name: &k.name, signature: *k.sig, returns_status })
            .collect();
        write_batch_entry(&mut entry_text, &specs, &opts.entry)?;
    } else {
        write_entry(&mut entry_text, first.sig, &first.name, &opts.entry)?;
    }
    let entry_source = work.join("entry.c");
    std::fs::write(&entry_source, &entry_text).map_err(io_err(&entry_source))?;
    let entry_obj = work.join("entry.o");
    let entry_flags: Vec<OsString> = ENTRY_CFLAGS.iter().map(OsString::from).collect();
    compile_hexagon(&opts.clang, &entry_source, &entry_obj, &entry_flags)?;

    // The build record, assembled into its own object.
    let listed: Vec<(&str, &Signature)> = kernels.iter().map(|k| (k.name.as_str(), k.sig)).collect();
    let mut record = String::new();
    // A table's entry runs batches and programs (`write_batch_entry` writes both).
    let flags = if table { FLAG_BATCHES | FLAG_PROGRAM } else { 0 }
        | if opts.entry.map_cache { FLAG_MAP_CACHE } else { 0 }
        | if opts.entry.power_method { FLAG_POWER } else { 0 };
    without_hvx.sort_by_key(|(j, _)| *j);
    let without_hvx: Vec<WithoutHvx> = without_hvx.into_iter().map(|(_, w)| w).collect();
    // At most one per kernel, and the writer refuses more than MAX_KERNELS kernels.
    let lost = without_hvx.len() as u32;
    write_record_asm_hvx(&mut record, opts.entry.version, &listed, flags, lost).map_err(BuildError::Record)?;
    let record_source = work.join("record.s");
    std::fs::write(&record_source, &record).map_err(io_err(&record_source))?;
    let record_obj = work.join("record.o");
    run(&opts.clang, &["--target=hexagon".into(), "-o".into(), operand(&record_obj), "-c".into(), "--".into(), operand(&record_source)])?;

    let soname = out.file_name().map(OsString::from).unwrap_or_else(|| OsString::from("lib.so"));
    // Linked and checked in the work directory; put at `out` only once every check passed.
    let linked = work.join("linked.so");
    let mut link_args: Vec<OsString> = std::vec![
        "-shared".into(),
        "--hash-style=sysv".into(),
        "-z".into(),
        format!("max-page-size={SECTION_ALIGN}").into(),
        "-soname".into(),
        soname,
        "-T".into(),
        operand(&linker_script),
        "-o".into(),
        operand(&linked),
        operand(&entry_obj),
    ];
    link_args.extend(objects.iter().map(|o| operand(o)));
    link_args.push(operand(&record_obj));
    run(&opts.lld, &link_args)?;

    let bytes = std::fs::read(&linked).map_err(io_err(&linked))?;
    let elf = parse_elf(&bytes).map_err(BuildError::Elf)?;
    check_library(&elf)?;
    // The record must read back as written.
    let rec = LibraryRecord::find(&bytes).map_err(BuildError::Record)?.ok_or(BuildError::Record(RecordError::Mismatch))?;
    let back_ok = rec.abi() == opts.entry.version
        && rec.map_cache() == opts.entry.map_cache
        && rec.kernels_without_hvx() == lost
        && rec.kernels().count() == kernels.len()
        && rec.kernels().zip(kernels).all(|(r, k)| r.name == k.name && r.parse_signature().ok().as_ref() == Some(k.sig));
    if !back_ok {
        return Err(BuildError::Record(RecordError::Mismatch));
    }
    install_output(out, &bytes)?;
    Ok(BuildReport {
        library: out.to_path_buf(),
        kernel_name: first.name.clone(),
        kernels: kernels.iter().zip(status).map(|(k, s)| (k.name.clone(), s)).collect(),
        batch: table,
        entry_source,
        linker_script,
        elf,
        carried_helpers,
        without_hvx,
    })
}
