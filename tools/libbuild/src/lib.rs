//! The hexrpc library builder, a host tool: generated entry + kernel C -> a Hexagon shared
//! object laid out the way the DSP loader needs it, every allocated output section starting on
//! its own 4 KiB page, carrying its build record. It runs clang and ld.lld, so it is a crate of
//! its own: a device service links `hexrpc-runtime`, which reads the record
//! ([`LibraryRecord`]), never this.
//!
//! ```text
//! clang-19 --target=hexagon -mcpu=hexagonv65 -mhvx=v65 -mhvx-length=128b -O2 -fPIC
//!          -ffreestanding -fno-builtin -nostdlib -nostdlibinc -isystem OUT.build/include
//!          -fsyntax-only -Xclang -ast-dump=json -Xclang -ast-dump-filter -Xclang KERNEL
//!          -- KERNEL.c                                                   (find the kernel)
//! clang-19 (flags) -Wall -Werror -c -- entry.c -o entry.o
//! clang-19 (flags, plus BuildOptions::kernel_cflags) -isystem OUT.build/include
//!          -c -- kernel.c -o kernel.o
//!          (kernel.c = #include "KERNEL.c" + the prototype generated from the signature)
//! clang-19 (flags) -Wall -Werror -DHRX_NEED___truncsfhf2=1 ... -c -- hrx_half.c -o hrx_half.o
//! clang-19 (flags) -Wall -Werror -DHRX_NEED_trunc=1 -c -- hrx_libm.c -o hrx_libm.o
//!          (each only if the kernel objects call a function it carries, see below)
//! clang-19 --target=hexagon -c -- record.s -o record.o                  (the build record)
//! ld.lld-19 -shared --hash-style=sysv -z max-page-size=4096 -soname NAME -T link.ld
//!           -o OUT.build/linked.so entry.o kernel0.o [hrx_half.o] [hrx_libm.o] record.o
//! ```
//!
//! The kernel sees our own headers (`math.h`, `string.h`) and clang's freestanding ones
//! (`stdint.h`, `stddef.h`, `stdbool.h`, `float.h`, ...), never the host's `/usr/include`; a
//! library carries the half-precision conversion helpers and the double `trunc` its kernels call,
//! hidden (see the [`freestanding`] module).
//!
//! What is checked, each failure a [`BuildError`] naming the cause:
//! * before anything runs: the kernel source is a regular file, not a directory; the output is
//!   not the kernel source itself (same file, however spelled), and if it exists it is a regular
//!   file (not a directory, a symbolic link or a device);
//! * the kernel function exists in the source, is defined there, has one parameter per
//!   signature parameter, a pointer for every `buf` and exactly the signature's C type for
//!   every scalar (read from clang's JSON AST dump, a machine-readable format, not the text
//!   dump meant for people); the kernel is then compiled together with a prototype generated
//!   from the signature, so clang itself rejects a definition of another type;
//! * the kernel's definition has no conversion from a 16-bit integer to `__fp16`, which clang-19
//!   miscompiles for Hexagon ([`BuildError::ShortToHalf`]);
//! * the result: ELF32 little-endian, `ET_DYN`, `e_machine` 164 (Hexagon), every allocated
//!   non-empty section at a 4 KiB-aligned address, `entry` exported, every undefined symbol one
//!   the DSP provides ([`DSP_PROVIDED_SYMBOLS`]; the others are named), and the build record
//!   ([`hexrpc_runtime::launch::record`]: signature and ABI version) reads back as written.
//!
//! The library is linked inside the work directory and checked there; only a library that passed
//! every check is put at the output path, atomically: its bytes go to a new file in the output's
//! directory (created `O_CREAT | O_EXCL | O_NOFOLLOW` under a unique name, synced), which is then
//! renamed over the output. A failed build leaves nothing at the output path, and a file that
//! was there before is left as it was.
//!
//! Every build runs in a fresh work directory `OUT.build/` (a previous one made by this step,
//! recognised by its marker file, is emptied first; any other directory there is left alone and
//! the build refused), so no stale object is ever linked. Paths that start with `-` are passed
//! as `./-...` (and after `--` for clang; ld.lld has no `--`), so no operand is taken as an
//! option. The intermediates stay in the work directory for inspection.
//!
//! Builds to the same output may run at once (two `hexrpc build-lib -o LIB` runs, or threads of
//! one program): each holds an exclusive `flock` on the lock file `OUT.build.lock` beside the
//! output for its whole build, so they take turns and every one of them succeeds, the output
//! being the last one's library (why a lock rather than a work directory per build: see
//! `lock_output` in the source). A build killed at any point leaves nothing that refuses the
//! next one: the work directory is emptied around its marker, never removed, so it is marked
//! at every point, and the temporary file of a library not yet renamed into place is removed
//! by the next build.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod elf;
pub mod freestanding;

pub use elf::{object_undefined, parse_elf, ElfError, ElfSummary, SectionInfo, SegmentInfo};

use core::fmt;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use hexrpc_runtime::launch::record::{write_record_asm_flags, FLAG_BATCHES, FLAG_MAP_CACHE};
use hexrpc_runtime::launch::{
    check_kernel_name, write_batch_entry, write_entry, EntryError, EntryOptions, KernelSpec as TableEntry, LibraryRecord, ParamKind,
    RecordError, Signature, ENTRY_SYMBOL,
};

/// The compiler the build step runs by default.
pub const DEFAULT_CLANG: &str = "clang-19";
/// The linker the build step runs by default.
pub const DEFAULT_LLD: &str = "ld.lld-19";
/// Flags for every Hexagon translation unit.
pub const HEXAGON_CFLAGS: &[&str] = &[
    "--target=hexagon",
    "-mcpu=hexagonv65",
    "-mhvx=v65",
    "-mhvx-length=128b",
    "-O2",
    "-fPIC",
    "-ffreestanding",
    "-fno-builtin",
    "-nostdlib",
    "-nostdlibinc",
];
/// Extra flags for the generated entry: it must compile warning-free.
pub const ENTRY_CFLAGS: &[&str] = &["-Wall", "-Werror"];
/// Alignment of every allocated output section (and the linker's page size).
pub const SECTION_ALIGN: u64 = 4096;
pub use hexrpc_drivers::elf::{EM_HEXAGON, ET_DYN};
/// How to install the tools when they are missing (Debian / Ubuntu).
pub const INSTALL_HINT: &str = "apt-get install clang-19 lld-19";
/// The file that marks a work directory as made by this build step (and so safe to replace).
pub const WORK_MARKER: &str = ".hexrpc-build";
/// What is appended to the output's name for the lock file builds to it take turns on
/// (`OUT.build.lock`, see the crate docs).
pub const LOCK_SUFFIX: &str = ".build.lock";

/// The symbols a library may import: what the DSP provides to a loaded library (the HAP
/// functions the generated entry calls, `fopen`/`fclose` (answered by the host's reverse file
/// service, as a DSP's C library does), the C library functions and compiler runtime helpers
/// clang emits for Hexagon under `-nostdlib`, and the libm subset kernels call). This is the
/// export list of the bench's DSP shell; a real `fastrpc_shell` exports more, so the list is
/// conservative: a library that passes here loads on the bench and on a device. Helpers not on
/// this list that a library needs are carried in it instead
/// ([`freestanding::CARRIED_HELPERS`]: the half conversions and the double `trunc`); our `math.h`
/// and `string.h` declare only names from it and from that list.
pub const DSP_PROVIDED_SYMBOLS: &[&str] = &[
    "HAP_mmap",
    "HAP_munmap",
    "HAP_perf_get_time_us",
    "HAP_power_set",
    "memcpy",
    "memset",
    "memmove",
    "memcmp",
    "fopen",
    "fclose",
    "__hexagon_divsi3",
    "__hexagon_udivsi3",
    "__hexagon_modsi3",
    "__hexagon_umodsi3",
    "__hexagon_divdi3",
    "__hexagon_udivdi3",
    "__hexagon_moddi3",
    "__hexagon_umoddi3",
    "__hexagon_memcpy_likely_aligned_min32bytes_mult8bytes",
    "__hexagon_sqrtf",
    "__hexagon_adddf3",
    "__hexagon_subdf3",
    "__hexagon_muldf3",
    "__hexagon_divdf3",
    "sqrtf",
    "fabsf",
    "floorf",
    "ceilf",
    "truncf",
    "roundf",
    "fmaxf",
    "fminf",
    "expf",
    "exp2f",
    "logf",
    "log2f",
    "sinf",
    "cosf",
];

/// The output sections of the linker script, in address order, with the input sections each
/// collects. lld's synthetic sections (`.hash`, `.dynsym`, `.got`, ...) are placed by name.
pub const OUTPUT_SECTIONS: &[(&str, &[&str])] = &[
    (".hash", &[".hash"]),
    (".dynsym", &[".dynsym"]),
    (".dynstr", &[".dynstr"]),
    (".rela.dyn", &[".rela.dyn"]),
    (".rela.plt", &[".rela.plt"]),
    (".text", &[".text", ".text.*"]),
    (".plt", &[".plt"]),
    (".rodata", &[".rodata", ".rodata.*"]),
    (".eh_frame", &[".eh_frame"]),
    (".dynamic", &[".dynamic"]),
    (".got", &[".got"]),
    (".got.plt", &[".got.plt"]),
    (".data", &[".data", ".data.*", ".sdata", ".sdata.*"]),
    (".bss", &[".bss", ".bss.*", ".sbss", ".sbss.*", "COMMON"]),
];

/// Writes the linker script: every section of [`OUTPUT_SECTIONS`] at `ALIGN(4096)`.
pub fn write_linker_script<W: fmt::Write + ?Sized>(out: &mut W) -> fmt::Result {
    writeln!(out, "/* Generated by hexrpc-libbuild: every allocated section on its own {SECTION_ALIGN}-byte page. */")?;
    writeln!(out, "SECTIONS {{")?;
    for (name, inputs) in OUTPUT_SECTIONS {
        write!(out, "  {name} : ALIGN({SECTION_ALIGN}) {{ *(")?;
        for (i, input) in inputs.iter().filter(|s| **s != "COMMON").enumerate() {
            write!(out, "{}{input}", if i > 0 { " " } else { "" })?;
        }
        write!(out, ")")?;
        if inputs.contains(&"COMMON") {
            write!(out, " *(COMMON)")?;
        }
        writeln!(out, " }}")?;
    }
    writeln!(out, "}}")
}

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
    /// Extra flags for the kernel's translation unit (`-I`, `-D`, `-mllvm -hexagon-autohvx=true`).
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
    /// Kernels compiled without HVX code generation because clang-19's Hexagon backend cannot
    /// select instructions for them with HVX (the build retries them without HVX): correct, not vectorised.
    pub scalar_kernels: Vec<String>,
}

/// Why a build failed.
#[derive(Debug)]
pub enum BuildError {
    /// The entry could not be generated.
    Entry(EntryError),
    /// The kernel name (given or derived from the file name) is not a usable C identifier.
    KernelName(String),
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// A tool could not be started (not installed?).
    ToolMissing {
        /// The tool.
        tool: PathBuf,
        /// The error from spawning it.
        error: io::Error,
    },
    /// A tool exited unsuccessfully.
    ToolFailed {
        /// The command line.
        command: String,
        /// Exit code, if it exited.
        status: Option<i32>,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The output is not a well-formed ELF32 little-endian file.
    Elf(ElfError),
    /// The output is not for Hexagon.
    NotHexagon {
        /// `e_machine` found.
        machine: u16,
    },
    /// The output is not a shared object.
    NotShared {
        /// `e_type` found.
        elf_type: u16,
    },
    /// An allocated section does not start on a 4 KiB boundary.
    Unaligned {
        /// Section name.
        section: String,
        /// Its address.
        addr: u64,
    },
    /// The library does not export `entry`.
    NoEntry,
    /// The kernel source is a directory (or not a regular file).
    KernelNotFile(PathBuf),
    /// The output would overwrite an input.
    OutputIsInput(PathBuf),
    /// The output is a directory.
    OutputIsDirectory(PathBuf),
    /// The output exists and is not a regular file (a symbolic link, a device, a FIFO).
    OutputNotRegular(PathBuf),
    /// The work directory exists and was not made by this build step.
    WorkDirInUse(PathBuf),
    /// The kernel function is not defined in the source.
    KernelMissing {
        /// The function name.
        kernel: String,
        /// The source.
        source: PathBuf,
        /// True if the source declares it without defining it.
        declared: bool,
    },
    /// The kernel's parameters do not match the signature.
    SignatureMismatch {
        /// The function name.
        kernel: String,
        /// What differs.
        detail: String,
    },
    /// clang's JSON AST dump of the kernel source could not be read.
    AstDump {
        /// The source.
        source: PathBuf,
        /// What was wrong with the dump.
        detail: String,
    },
    /// The library imports symbols the DSP does not provide.
    UnresolvedImports(Vec<String>),
    /// The kernel converts a `short` or `unsigned short` to `__fp16`. clang-19 compiles that
    /// for Hexagon as a copy of the integer's bits, not a conversion (its half conversions take
    /// the half's 16-bit storage type, and a 16-bit integer is taken for one): the library would
    /// compute wrong results, so it is not built.
    ShortToHalf {
        /// The kernel function.
        kernel: String,
        /// The source lines of the conversions, where clang's AST dump names them.
        lines: Vec<u64>,
    },
    /// The build record could not be written or does not read back.
    Record(RecordError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Entry(e) => write!(f, "generating the entry: {e}"),
            BuildError::KernelName(n) => write!(
                f,
                "kernel name {n:?} (from the file name, or given) is not a usable C identifier: name the kernel function with \
                 --kernel NAME (BuildOptions::kernel_name in the API)"
            ),
            BuildError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            BuildError::ToolMissing { tool, error } => {
                write!(f, "cannot run {}: {error}; install the Hexagon toolchain with `{INSTALL_HINT}`", tool.display())
            }
            BuildError::ToolFailed { command, status, stderr } => {
                write!(f, "`{command}` failed ({}):\n{stderr}", status.map_or("killed".to_owned(), |s| format!("exit {s}")))
            }
            BuildError::Elf(e) => write!(f, "the output is not a valid ELF32 file: {e}"),
            BuildError::NotHexagon { machine } => write!(f, "e_machine is {machine}, not {EM_HEXAGON} (Hexagon)"),
            BuildError::NotShared { elf_type } => write!(f, "e_type is {elf_type}, not ET_DYN"),
            BuildError::Unaligned { section, addr } => write!(f, "section {section} at {addr:#x} is not {SECTION_ALIGN}-aligned"),
            BuildError::NoEntry => write!(f, "the library does not export `{ENTRY_SYMBOL}`"),
            BuildError::KernelNotFile(p) => write!(f, "{}: the kernel source is a directory or not a regular file", p.display()),
            BuildError::OutputIsInput(p) => write!(f, "-o {}: the output would overwrite the kernel source", p.display()),
            BuildError::OutputIsDirectory(p) => write!(f, "-o {}: the output is a directory", p.display()),
            BuildError::OutputNotRegular(p) => {
                write!(f, "-o {}: the output exists and is not a regular file (a symbolic link or a device); refused", p.display())
            }
            BuildError::WorkDirInUse(p) => {
                write!(
                    f,
                    "{}: the work directory exists and was not made by hexrpc build-lib (no {WORK_MARKER}); move it away",
                    p.display()
                )
            }
            BuildError::KernelMissing { kernel, source, declared: true } => {
                write!(f, "the kernel `{kernel}` is declared but not defined in {}", source.display())
            }
            BuildError::KernelMissing { kernel, source, declared: false } => write!(
                f,
                "no function `{kernel}` in {} (the kernel name comes from the file name unless --kernel NAME is given)",
                source.display()
            ),
            BuildError::SignatureMismatch { kernel, detail } => write!(f, "the kernel `{kernel}` does not match the signature: {detail}"),
            BuildError::AstDump { source, detail } => write!(f, "{}: {detail}", source.display()),
            BuildError::UnresolvedImports(names) => write!(
                f,
                "the library imports symbols the DSP does not provide: {} (provided: HAP_*, memcpy/memset/memmove/memcmp, fopen/fclose, the \
                 __hexagon_* integer and double-arithmetic helpers and a float libm subset; carried in the library: {})",
                names.join(", "),
                freestanding::CARRIED_HELPERS.join("/")
            ),
            BuildError::ShortToHalf { kernel, lines } => {
                write!(f, "the kernel `{kernel}` converts a short or unsigned short to __fp16")?;
                if !lines.is_empty() {
                    let lines: Vec<String> = lines.iter().map(u64::to_string).collect();
                    write!(f, " (line {})", lines.join(", "))?;
                }
                write!(
                    f,
                    ": clang-19 compiles that for Hexagon as a copy of the integer's bits, not a conversion, so the library would compute \
                     wrong results; convert through int: (__fp16)(int)x"
                )
            }
            BuildError::Record(e) => write!(f, "build record: {e}"),
        }
    }
}

impl std::error::Error for BuildError {}

impl From<EntryError> for BuildError {
    fn from(e: EntryError) -> Self {
        BuildError::Entry(e)
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BuildError + '_ {
    move |error| BuildError::Io { path: path.to_path_buf(), error }
}

/// `path` as a command-line operand: a relative path starting with `-` gets a `./` prefix, so no
/// tool can take it for an option.
pub fn operand(path: &Path) -> OsString {
    if path.as_os_str().as_encoded_bytes().first() == Some(&b'-') {
        let mut s = OsString::from("./");
        s.push(path.as_os_str());
        s
    } else {
        path.as_os_str().to_owned()
    }
}

fn run(tool: &Path, args: &[OsString]) -> Result<(), BuildError> {
    run_output(tool, args).map(|_| ())
}

fn run_output(tool: &Path, args: &[OsString]) -> Result<Vec<u8>, BuildError> {
    let output = Command::new(tool).args(args).output().map_err(|error| BuildError::ToolMissing { tool: tool.to_path_buf(), error })?;
    if output.status.success() {
        return Ok(output.stdout);
    }
    let mut command = tool.display().to_string();
    for a in args {
        command.push(' ');
        command.push_str(&a.to_string_lossy());
    }
    Err(BuildError::ToolFailed { command, status: output.status.code(), stderr: String::from_utf8_lossy(&output.stderr).into_owned() })
}

/// Compiles one C file for Hexagon with [`HEXAGON_CFLAGS`] plus `extra`.
pub fn compile_hexagon(clang: &Path, source: &Path, object: &Path, extra: &[OsString]) -> Result<(), BuildError> {
    let mut args: Vec<OsString> = HEXAGON_CFLAGS.iter().map(OsString::from).collect();
    args.extend(extra.iter().cloned());
    args.extend(["-o".into(), operand(object), "-c".into(), "--".into(), operand(source)]);
    run(clang, &args)
}

/// What clang-19's Hexagon backend says when it cannot select HVX instructions for some vector
/// code (seen for tinygrad's `one_hot`: compares of an int vector selecting 0/1, an HVX
/// predicate bitcast): a compiler defect, not a fault of the kernel.
const HVX_SELECT_FAILURE: &str = "error in backend: Cannot select";

/// Compiles a kernel; if clang-19's backend fails to select HVX instructions for it
/// ([`HVX_SELECT_FAILURE`]), compiles it again without HVX code generation (the kernel's vector
/// types are generic vector extensions, lowered to scalar Hexagon code: the same results,
/// slower). Returns true when it fell back.
fn compile_kernel(clang: &Path, source: &Path, object: &Path, extra: &[OsString]) -> Result<bool, BuildError> {
    match compile_hexagon(clang, source, object, extra) {
        Err(BuildError::ToolFailed { stderr, .. }) if stderr.contains(HVX_SELECT_FAILURE) => {
            let mut args: Vec<OsString> = HEXAGON_CFLAGS.iter().filter(|f| !f.starts_with("-mhvx")).map(OsString::from).collect();
            args.extend(extra.iter().cloned());
            args.extend(["-o".into(), operand(object), "-c".into(), "--".into(), operand(source)]);
            run(clang, &args)?;
            Ok(true)
        }
        r => r.map(|()| false),
    }
}

/// One kernel of a build: its source, its C function name and its signature. (A library holds
/// one kernel today; the pipeline below works on a list so that it can hold several.)
struct KernelSpec<'a> {
    source: &'a Path,
    name: String,
    sig: &'a Signature,
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
    // Table-level refusals (count, names, version) before any tool runs.
    let dry: Vec<TableEntry<'_>> =
        kernels.iter().map(|k| TableEntry { name: &k.name, signature: k.signature, returns_status: false }).collect();
    write_batch_entry(&mut String::new(), &dry, &opts.entry)?;
    let specs: Vec<KernelSpec<'_>> =
        kernels.iter().map(|k| KernelSpec { source: &k.source, name: k.name.clone(), sig: &k.signature }).collect();
    build_kernels(&specs, out, opts, true)
}

/// Builds `out` from the kernel source `kernel_c` with signature `sig` (see the module docs).
pub fn build_library(kernel_c: &Path, sig: &Signature, out: &Path, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let kernel_name = match &opts.kernel_name {
        Some(n) => n.clone(),
        None => kernel_c.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    check_kernel_name(&kernel_name).map_err(|_| BuildError::KernelName(kernel_name.clone()))?;
    let kernels = [KernelSpec { source: kernel_c, name: kernel_name, sig }];
    build_kernels(&kernels, out, opts, false)
}

/// True if `a` and `b` name the same existing file (same device and inode), however spelled.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Puts the checked library at `out` atomically: a new file under a unique name in `out`'s
/// directory (`O_CREAT | O_EXCL | O_NOFOLLOW`: no existing file or link is written through),
/// written and synced, then renamed over `out`. On any failure the temporary file is removed and
/// `out` is left as it was (absent, or the previous file).
///
/// Called with the output's lock held ([`lock_output`]): a temporary file of this name pattern
/// left by a build that was killed before its rename is removed first.
fn install_output(out: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = out.file_name().ok_or_else(|| BuildError::OutputIsDirectory(out.to_path_buf()))?;
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    remove_stale_temporaries(dir, name);
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let mut attempt = 0u32;
    let (tmp, mut file) = loop {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.{attempt}.tmp", std::process::id()));
        let tmp = dir.join(tmp_name);
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o755).custom_flags(nofollow).open(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 64 => attempt += 1,
            Err(error) => return Err(BuildError::Io { path: tmp, error }),
        }
    };
    let r = file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io_err(&tmp)).and_then(|()| {
        // Checked again just before the rename: a link or node put at `out` meanwhile is refused
        // (rename would replace the link itself, never follow it, but it is not ours to replace).
        if std::fs::symlink_metadata(out).is_ok_and(|m| !m.is_file()) {
            return Err(BuildError::OutputNotRegular(out.to_path_buf()));
        }
        std::fs::rename(&tmp, out).map_err(io_err(out))
    });
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// True if `file_name` is one of [`install_output`]'s temporary files for the output `name`:
/// `.NAME.PID.N.tmp`.
fn is_install_temporary(file_name: &std::ffi::OsStr, name: &std::ffi::OsStr) -> bool {
    let (file_name, name) = (file_name.as_encoded_bytes(), name.as_encoded_bytes());
    let Some(rest) = file_name.strip_prefix(b".").and_then(|r| r.strip_prefix(name)).and_then(|r| r.strip_prefix(b".")) else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(b".tmp") else { return false };
    let mut parts = rest.split(|&b| b == b'.');
    let number = |p: Option<&[u8]>| p.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit));
    number(parts.next()) && number(parts.next()) && parts.next().is_none()
}

/// Removes the temporary files of [`install_output`] for the output `name` in `dir`. Only called
/// with the output's lock held: every build to this output holds it while its temporary file
/// exists, so one found now was left by a build that was killed.
fn remove_stale_temporaries(dir: &Path, name: &std::ffi::OsStr) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if is_install_temporary(&e.file_name(), name) && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The lock that builds to `out` take turns on: an exclusive `flock` on `OUT.build.lock` beside
/// the output (created if missing, never removed: removing a lock file lets a waiting build and
/// a new one each lock a different file), held until the returned file is dropped. The build
/// waits for the lock.
///
/// Why a lock and not a work directory per build renamed into place: the work directory would
/// have to replace a non-empty `OUT.build/` of a previous build, which `rename` cannot do
/// atomically (it replaces only an empty directory), so two builds finishing together would
/// still race on it, and the intermediates named in the report could be another build's. With
/// the lock, `OUT.build/` holds the intermediates of the build that holds the lock (the last
/// one, once they are all done), the output is the library of the last build, and the temporary
/// files of a build killed before its rename can be told apart and removed. The kernel releases
/// the lock of a build that dies, however it dies, so no lock outlives its build. The builds
/// take turns, which costs only time: they make the same file.
fn lock_output(out: &Path) -> Result<std::fs::File, BuildError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut name = out.file_name().map(OsString::from).ok_or_else(|| BuildError::OutputIsDirectory(out.to_path_buf()))?;
    name.push(LOCK_SUFFIX);
    let lock = out.with_file_name(name);
    if let Some(dir) = lock.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nofollow)
        .open(&lock)
        .map_err(io_err(&lock))?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(BuildError::Io { path: lock, error: e.into() }),
        }
    }
}

/// True if every entry of `work` is a file this build step writes there ([`WORK_MARKER`], the
/// include directory with our headers, the generated sources, objects, linker script and linked
/// library), so the directory is one of ours that lost its marker (an older build step removed
/// the marker first when it emptied the directory, and could be killed right after). An empty
/// directory holds nothing to lose and counts as ours.
fn only_intermediates(work: &Path) -> io::Result<bool> {
    fn numbered(name: &str, prefix: &str, ext: &str) -> bool {
        name.strip_prefix(prefix).and_then(|r| r.strip_suffix(ext)).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
    for e in std::fs::read_dir(work)? {
        let e = e?;
        let kind = e.file_type()?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { return Ok(false) };
        let ours = if name == freestanding::INCLUDE_DIR {
            kind.is_dir()
                && std::fs::read_dir(e.path())?.all(|h| {
                    h.is_ok_and(|h| {
                        h.file_type().is_ok_and(|t| t.is_file())
                            && freestanding::HEADERS.iter().any(|(n, _)| h.file_name().to_str() == Some(n))
                    })
                })
        } else {
            kind.is_file()
                && (name == WORK_MARKER
                    || ["link.ld", "entry.c", "entry.o", "record.s", "record.o", "linked.so"].contains(&name)
                    || numbered(name, "kernel", ".c")
                    || numbered(name, "kernel", ".o")
                    || freestanding::CARRIED_SOURCES
                        .iter()
                        .any(|c| name == c.file || Path::new(c.file).with_extension("o").to_str() == Some(name)))
        };
        if !ours {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Makes a fresh work directory, with the output's lock held ([`lock_output`]): a previous one of
/// ours (with the marker, or holding only what a build writes, see [`only_intermediates`]) is
/// emptied; any other directory, or anything else at that path, is refused.
///
/// Crash-safe: at every point the path is absent, an empty directory, or a directory whose
/// marker is there, all of which the next build takes as its own. The marker is written before
/// anything else and never removed (the directory is emptied around it, not removed), so a build
/// killed while it empties the directory, or at any later point, leaves a directory that is
/// still marked.
fn fresh_work_dir(work: &Path) -> Result<(), BuildError> {
    let marker = work.join(WORK_MARKER);
    match std::fs::symlink_metadata(work) {
        Ok(m) if m.is_dir() => {
            if !marker.is_file() && !only_intermediates(work).map_err(io_err(work))? {
                return Err(BuildError::WorkDirInUse(work.to_path_buf()));
            }
        }
        Ok(_) => return Err(BuildError::WorkDirInUse(work.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = work.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(io_err(parent))?;
            }
            std::fs::create_dir(work).map_err(io_err(work))?;
        }
        Err(e) => return Err(BuildError::Io { path: work.to_path_buf(), error: e }),
    }
    if !marker.is_file() {
        std::fs::write(&marker, b"made by hexrpc build-lib; emptied and reused by the next build\n").map_err(io_err(&marker))?;
    }
    for e in std::fs::read_dir(work).map_err(io_err(work))? {
        let e = e.map_err(io_err(work))?;
        if e.file_name() == WORK_MARKER {
            continue;
        }
        let path = e.path();
        let is_dir = e.file_type().map_err(io_err(&path))?.is_dir();
        if is_dir { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) }.map_err(io_err(&path))?;
    }
    Ok(())
}

/// One parameter of the kernel as clang sees it: the type as written and its canonical form.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ParamType {
    written: String,
    canonical: String,
}

/// What the AST dump says about the kernel function.
#[derive(Clone, Debug, PartialEq, Eq)]
enum KernelLookup {
    /// Defined: its parameters and its return type (canonical, typedefs resolved).
    Defined(Vec<ParamType>, String),
    /// Declared but not defined in the source.
    Declared,
    /// Not there at all.
    Missing,
}

/// The type of an AST node as clang's JSON dump gives it: `(written, canonical)`. The canonical
/// form (`desugaredQualType`) is present only when it differs from the written one.
fn json_type(node: &Value) -> Option<(String, String)> {
    let ty = node.get("type")?;
    let written = ty.get("qualType")?.as_str()?.to_string();
    let canonical = ty.get("desugaredQualType").and_then(Value::as_str).map_or_else(|| written.clone(), str::to_string);
    Some((written, canonical))
}

/// Stack for reading clang's JSON AST dumps: the dump nests one object per expression level,
/// and a kernel with a long expression (tinygrad's losses) nests hundreds of levels deep, past
/// serde_json's default limit of 128. The dump is read without that limit on a thread of this
/// much (virtual, committed as used) stack, where parsing, walking and dropping the tree
/// recurse.
const AST_STACK: usize = 256 << 20;

/// Runs `f` on a thread with [`AST_STACK`] bytes of stack.
fn on_ast_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let f = std::sync::Mutex::new(Some(f));
    let take = || f.lock().unwrap_or_else(|p| p.into_inner()).take();
    let spawned = std::thread::scope(|s| {
        let h = std::thread::Builder::new().name("ast".into()).stack_size(AST_STACK).spawn_scoped(s, || take().map(|f| f()));
        h.ok().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    match spawned.flatten() {
        Some(t) => t,
        // No thread could start: read it here, as deep as this thread's stack allows.
        None => take().map(|f| f()).expect("the closure runs once"),
    }
}

/// The top-level JSON objects of a dump, without serde_json's nesting limit (see
/// [`AST_STACK`]; call on that stack).
fn dump_objects(dump: &[u8]) -> impl Iterator<Item = Result<Value, String>> + '_ {
    let mut de = serde_json::Deserializer::from_slice(dump);
    de.disable_recursion_limit();
    de.into_iter::<Value>().map(|r| r.map_err(|e| format!("clang's JSON AST dump does not parse: {e}")))
}

/// Reads clang's JSON AST dump (`-ast-dump=json -ast-dump-filter NAME`: a sequence of JSON
/// objects, one per top-level declaration whose name contains NAME) for function `name`. An
/// error is a dump that is not a sequence of JSON objects of the expected shape.
fn kernel_params(dump: &[u8], name: &str) -> Result<KernelLookup, String> {
    let mut found = KernelLookup::Missing;
    for decl in dump_objects(dump) {
        let decl = decl?;
        if decl.get("kind").and_then(Value::as_str) != Some("FunctionDecl") || decl.get("name").and_then(Value::as_str) != Some(name) {
            continue;
        }
        let no_type = || format!("the declaration of `{name}` in clang's JSON AST dump has no type");
        let (_, fn_type) = json_type(&decl).ok_or_else(no_type)?;
        // The function's type is 'RET (PARAMS)'.
        let ret = fn_type.split_once('(').map_or(String::new(), |(r, _)| r.trim().to_string());
        let inner: &[Value] = decl.get("inner").and_then(Value::as_array).map_or(&[], Vec::as_slice);
        let kind = |n: &Value, k: &str| n.get("kind").and_then(Value::as_str) == Some(k);
        if !inner.iter().any(|n| kind(n, "CompoundStmt")) {
            found = KernelLookup::Declared;
            continue;
        }
        let mut params = Vec::new();
        for p in inner.iter().filter(|n| kind(n, "ParmVarDecl")) {
            let (written, canonical) = json_type(p).ok_or_else(no_type)?;
            params.push(ParamType { written, canonical });
        }
        return Ok(KernelLookup::Defined(params, ret));
    }
    Ok(found)
}

/// Every conversion from `short` / `unsigned short` to `__fp16` (however spelled through
/// typedefs) in the definition of `name` in clang's JSON AST dump, each with its source line
/// where the dump gives one. (The JSON dump omits a location's line when it equals the previous
/// one printed, so the last line seen in document order is the cast's.)
fn short_to_half_casts(dump: &[u8], name: &str) -> Result<Vec<Option<u64>>, String> {
    fn walk(node: &Value, line: &mut Option<u64>, found: &mut Vec<Option<u64>>) {
        for loc in [node.get("loc"), node.get("range").and_then(|r| r.get("begin"))].into_iter().flatten() {
            // A location inside a macro expansion has its line under "spellingLoc"/"expansionLoc".
            let l = loc.get("line").or_else(|| loc.get("expansionLoc").and_then(|e| e.get("line")));
            if let Some(l) = l.and_then(Value::as_u64) {
                *line = Some(l);
            }
        }
        let is_cast = matches!(node.get("kind").and_then(Value::as_str), Some("ImplicitCastExpr" | "CStyleCastExpr"));
        if is_cast && node.get("castKind").and_then(Value::as_str) == Some("IntegralToFloating") {
            let to_half = json_type(node).is_some_and(|(_, c)| strip_qualifiers(&c) == "__fp16");
            let from = node.get("inner").and_then(Value::as_array).and_then(|i| i.first()).and_then(json_type);
            if to_half && from.is_some_and(|(_, c)| matches!(strip_qualifiers(&c), "short" | "unsigned short")) {
                found.push(*line);
            }
        }
        if let Some(end) = node.get("range").and_then(|r| r.get("end")).and_then(|e| e.get("line")).and_then(Value::as_u64) {
            *line = Some(end);
        }
        for child in node.get("inner").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
            walk(child, line, found);
        }
    }
    let mut found = Vec::new();
    for decl in dump_objects(dump) {
        let decl = decl?;
        if decl.get("kind").and_then(Value::as_str) == Some("FunctionDecl") && decl.get("name").and_then(Value::as_str) == Some(name) {
            walk(&decl, &mut None, &mut found);
        }
    }
    Ok(found)
}

fn strip_qualifiers(t: &str) -> &str {
    let mut t = t.trim();
    loop {
        if let Some(r) = t.strip_prefix("const ") {
            t = r.trim_start();
        } else if let Some(r) = t.strip_prefix("volatile ") {
            t = r.trim_start();
        } else {
            return t;
        }
    }
}

/// Checks the kernel's parameters against the signature and returns the prototype that pins
/// them (the kernel's own spelling for pointers, the signature's C type for scalars).
fn check_params(kernel: &KernelSpec<'_>, params: &[ParamType], ret: &str, table: bool) -> Result<(String, bool), BuildError> {
    let want = kernel.sig.params();
    let mismatch = |detail: String| BuildError::SignatureMismatch { kernel: kernel.name.clone(), detail };
    let returns_status = match ret {
        "void" => false,
        "int" if table => true,
        other if table => return Err(mismatch(format!("it returns `{other}`: a kernel returns void, or int (its status in a batch)"))),
        other => return Err(mismatch(format!("it returns `{other}`: a single-kernel library's kernel returns void"))),
    };
    if params.len() != want.len() {
        return Err(mismatch(format!("it takes {} parameters, the signature {} ({})", params.len(), want.len(), kernel.sig)));
    }
    let mut proto = format!("{} {}(", if returns_status { "int" } else { "void" }, kernel.name);
    for (i, (p, w)) in params.iter().zip(want).enumerate() {
        if i > 0 {
            proto.push_str(", ");
        }
        match w {
            ParamKind::Buffer => {
                if !p.canonical.contains('*') {
                    return Err(mismatch(format!("parameter {} is `{}`, but the signature says buf (a pointer)", i + 1, p.written)));
                }
                proto.push_str(&p.written);
            }
            ParamKind::Scalar(t) => {
                if p.canonical.contains('*') || strip_qualifiers(&p.canonical) != t.c_type() {
                    return Err(mismatch(format!(
                        "parameter {} is `{}`, but the signature says {} (`{}`)",
                        i + 1,
                        p.written,
                        t.name(),
                        t.c_type()
                    )));
                }
                proto.push_str(t.c_type());
            }
        }
    }
    if want.is_empty() {
        proto.push_str("void");
    }
    proto.push_str(");\n");
    Ok((proto, returns_status))
}

/// `#include` line for `path` (absolute; `\` and `"` escaped).
fn include_line(path: &Path) -> Result<String, BuildError> {
    let abs = std::fs::canonicalize(path).map_err(io_err(path))?;
    let text = abs.to_string_lossy();
    if text.contains('\n') {
        return Err(BuildError::KernelNotFile(path.to_path_buf()));
    }
    Ok(format!("#include \"{}\"\n", text.replace('\\', "\\\\").replace('"', "\\\"")))
}

fn build_kernels(kernels: &[KernelSpec<'_>], out: &Path, opts: &BuildOptions, table: bool) -> Result<BuildReport, BuildError> {
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
    let mut scalar_kernels = Vec::new();
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
        if compile_kernel(&opts.clang, &checked, &obj, &flags)? {
            scalar_kernels.push(k.name.clone());
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
    let flags = if table { FLAG_BATCHES } else { 0 } | if opts.entry.map_cache { FLAG_MAP_CACHE } else { 0 };
    write_record_asm_flags(&mut record, opts.entry.version, &listed, flags).map_err(BuildError::Record)?;
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
        scalar_kernels,
    })
}

/// Checks a parsed library: Hexagon, shared object, allocated sections 4 KiB-aligned, `entry`
/// exported, every (non-weak) import in [`DSP_PROVIDED_SYMBOLS`].
pub fn check_library(elf: &ElfSummary) -> Result<(), BuildError> {
    if elf.machine != EM_HEXAGON {
        return Err(BuildError::NotHexagon { machine: elf.machine });
    }
    if elf.elf_type != ET_DYN {
        return Err(BuildError::NotShared { elf_type: elf.elf_type });
    }
    for s in elf.sections.iter().filter(|s| s.alloc && s.size > 0) {
        if s.addr % SECTION_ALIGN != 0 {
            return Err(BuildError::Unaligned { section: s.name.clone(), addr: s.addr });
        }
    }
    if !elf.exports.iter().any(|e| e == ENTRY_SYMBOL) {
        return Err(BuildError::NoEntry);
    }
    let unresolved: Vec<String> = elf.imports.iter().filter(|i| !DSP_PROVIDED_SYMBOLS.contains(&i.as_str())).cloned().collect();
    if !unresolved.is_empty() {
        return Err(BuildError::UnresolvedImports(unresolved));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linker_script_aligns_every_output_section() {
        let mut s = String::new();
        write_linker_script(&mut s).unwrap();
        for (name, _) in OUTPUT_SECTIONS {
            assert!(s.contains(&format!("  {name} : ALIGN(4096) {{")), "{name} in\n{s}");
        }
        assert!(s.contains(".bss : ALIGN(4096) { *(.bss .bss.* .sbss .sbss.*) *(COMMON) }"), "{s}");
    }

    #[test]
    fn the_output_is_replaced_atomically_and_never_through_a_link() {
        let d = std::env::temp_dir().join(format!("hexrpc-libbuild-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let out = d.join("lib.so");
        install_output(&out, b"one").unwrap();
        install_output(&out, b"two").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"two");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = d.join("link.so");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(install_output(&link, b"x"), Err(BuildError::OutputNotRegular(_))));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link itself is left alone");
        let mut left: Vec<String> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["lib.so", "link.so", "victim"], "no temporary file left behind");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_killed_installs_temporary_file_is_removed_and_no_other() {
        use std::ffi::OsStr;
        for (file, ours) in [
            (".lib.so.123.0.tmp", true),
            (".lib.so.9.63.tmp", true),
            (".lib.so.123.tmp", false),
            (".lib.so.12a.0.tmp", false),
            (".lib.so..0.tmp", false),
            (".lib.so.1.2.3.tmp", false),
            ("lib.so.123.0.tmp", false),
            (".lib.so.5.123.0.tmp", false),
            (".lib.so.123.0", false),
        ] {
            assert_eq!(is_install_temporary(OsStr::new(file), OsStr::new("lib.so")), ours, "{file}");
        }
        // `.a.5.123.0.tmp` is output `a.5`'s, never output `a`'s.
        assert!(is_install_temporary(OsStr::new(".a.5.123.0.tmp"), OsStr::new("a.5")));
        assert!(!is_install_temporary(OsStr::new(".a.5.123.0.tmp"), OsStr::new("a")));
        let d = std::env::temp_dir().join(format!("hexrpc-libbuild-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for f in [".lib.so.77.0.tmp", ".lib.so.77.tmp", ".other.so.77.0.tmp"] {
            std::fs::write(d.join(f), b"partial").unwrap();
        }
        install_output(&d.join("lib.so"), b"one").unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, [".lib.so.77.tmp", ".other.so.77.0.tmp", "lib.so"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_carried_function_is_linked_in_never_imported() {
        let lib = |imports: &[&str]| ElfSummary {
            machine: EM_HEXAGON,
            elf_type: ET_DYN,
            sections: vec![],
            segments: vec![],
            exports: vec![ENTRY_SYMBOL.to_owned()],
            imports: imports.iter().map(|s| s.to_string()).collect(),
            weak_imports: vec![],
        };
        assert!(check_library(&lib(&["HAP_mmap", "__hexagon_divdf3", "truncf"])).is_ok());
        // `trunc` is carried: a library that imports it (it was not linked in) is refused, and
        // so is every double libm function that is neither provided nor carried.
        for name in ["trunc", "floor", "sqrt", "__extendhfsf2"] {
            match check_library(&lib(&["HAP_mmap", name])) {
                Err(e @ BuildError::UnresolvedImports(_)) => {
                    assert!(e.to_string().contains(&format!("provide: {name} (")), "{e}");
                    assert!(e.to_string().contains("carried in the library: __extendhfsf2/"), "{e}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn json_ast_dump_finds_the_definition() {
        // The shape clang-19 writes for `typedef unsigned u32; void k(const float *x, u32 n);
        // void kk(void); void k(const float *x, u32 n) {}` filtered by "k".
        let dump = br#"{"kind": "FunctionDecl", "name": "k", "type": {"qualType": "void (const float *, u32)", "desugaredQualType": "void (const float *, unsigned int)"},
              "inner": [{"kind": "ParmVarDecl", "name": "x", "type": {"qualType": "const float *"}},
                        {"kind": "ParmVarDecl", "name": "n", "type": {"qualType": "u32", "desugaredQualType": "unsigned int"}}]}
            {"kind": "FunctionDecl", "name": "kk", "type": {"qualType": "void (void)"}, "inner": [{"kind": "CompoundStmt"}]}
            {"kind": "FunctionDecl", "name": "k", "previousDecl": "0x1", "type": {"qualType": "void (const float *, u32)"},
              "inner": [{"kind": "ParmVarDecl", "name": "x", "type": {"qualType": "const float *"}},
                        {"kind": "ParmVarDecl", "name": "n", "type": {"qualType": "u32", "desugaredQualType": "unsigned int"}},
                        {"kind": "CompoundStmt"}]}"#;
        let p = |w: &str, c: &str| ParamType { written: w.into(), canonical: c.into() };
        assert_eq!(
            kernel_params(dump, "k"),
            Ok(KernelLookup::Defined(vec![p("const float *", "const float *"), p("u32", "unsigned int")], "void".into()))
        );
        assert_eq!(kernel_params(dump, "kk"), Ok(KernelLookup::Defined(vec![], "void".into())));
        // Only the declaration: declared, not defined.
        let declared = br#"{"kind": "FunctionDecl", "name": "k", "type": {"qualType": "void (float *)"},
              "inner": [{"kind": "ParmVarDecl", "name": "x", "type": {"qualType": "float *"}}]}"#;
        assert_eq!(kernel_params(declared, "k"), Ok(KernelLookup::Declared));
        // A variable of the name is not the function.
        assert_eq!(kernel_params(br#"{"kind": "VarDecl", "name": "k", "type": {"qualType": "int"}}"#, "k"), Ok(KernelLookup::Missing));
        assert_eq!(kernel_params(b"", "k"), Ok(KernelLookup::Missing));
        assert!(kernel_params(b"Dumping k:\nFunctionDecl 0x1 <k.c:1:1> k 'void ()'", "k").unwrap_err().contains("does not parse"));
        // An expression nested 5000 levels deep (tinygrad's losses nest hundreds): read on the
        // AST stack without serde_json's 128-level limit.
        let mut deep = String::from(
            r#"{"kind": "FunctionDecl", "name": "k", "type": {"qualType": "void (float *)"}, "inner": [{"kind": "ParmVarDecl", "type": {"qualType": "float *"}}, {"kind": "CompoundStmt", "inner": ["#,
        );
        for _ in 0..5000 {
            deep.push_str(r#"{"kind": "ParenExpr", "inner": ["#);
        }
        deep.push_str(r#"{"kind": "IntegerLiteral"}"#);
        for _ in 0..5000 {
            deep.push_str("]}");
        }
        deep.push_str("]}]}");
        let (lookup, casts) = on_ast_stack(|| (kernel_params(deep.as_bytes(), "k"), short_to_half_casts(deep.as_bytes(), "k")));
        assert_eq!(
            lookup,
            Ok(KernelLookup::Defined(vec![ParamType { written: "float *".into(), canonical: "float *".into() }], "void".into()))
        );
        assert_eq!(casts, Ok(vec![]));
        assert!(kernel_params(br#"{"kind": "FunctionDecl", "name": "k"}"#, "k").unwrap_err().contains("no type"));
    }

    #[test]
    fn short_to_half_conversions_are_found_with_their_lines() {
        // The shape clang-19 writes (trimmed) for `typedef __fp16 half; void k(half *o, short s,
        // int i) { o[0] = s; o[1] = i; }`: line 2 once, then omitted while it does not change.
        let dump = br#"{"kind": "FunctionDecl", "name": "k", "loc": {"line": 1}, "type": {"qualType": "void (half *, short, int)"},
              "inner": [{"kind": "CompoundStmt", "range": {"begin": {"line": 2}, "end": {}}, "inner": [
                {"kind": "BinaryOperator", "inner": [
                  {"kind": "ImplicitCastExpr", "castKind": "IntegralToFloating", "type": {"qualType": "half", "desugaredQualType": "__fp16"},
                   "inner": [{"kind": "ImplicitCastExpr", "castKind": "LValueToRValue", "type": {"qualType": "short"}}]}]},
                {"kind": "BinaryOperator", "range": {"begin": {"line": 3}}, "inner": [
                  {"kind": "ImplicitCastExpr", "castKind": "IntegralToFloating", "type": {"qualType": "half", "desugaredQualType": "__fp16"},
                   "inner": [{"kind": "ImplicitCastExpr", "type": {"qualType": "int"}}]},
                  {"kind": "CStyleCastExpr", "castKind": "IntegralToFloating", "type": {"qualType": "const __fp16"},
                   "inner": [{"kind": "DeclRefExpr", "type": {"qualType": "u16", "desugaredQualType": "unsigned short"}}]}]}]}]}"#;
        assert_eq!(short_to_half_casts(dump, "k"), Ok(vec![Some(2), Some(3)]));
        assert_eq!(short_to_half_casts(dump, "other"), Ok(vec![]));
        assert!(short_to_half_casts(b"{", "k").is_err());
    }
}
