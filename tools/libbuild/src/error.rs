//! Why a build failed: [`BuildError`], one variant per cause, and its messages.

use core::fmt;
use std::io;
use std::path::{Path, PathBuf};

use hexrpc_drivers::elf::EM_HEXAGON;
use hexrpc_runtime::launch::{EntryError, RecordError, ENTRY_SYMBOL};

use crate::consts::{INSTALL_HINT, SECTION_ALIGN, WORK_MARKER};
use crate::elf::ElfError;
use crate::freestanding;

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
    /// clang-19's Hexagon backend cannot compile a kernel source with HVX, and the build was
    /// asked to refuse such a kernel rather than compile it without HVX
    /// ([`HvxPolicy::Require`](crate::HvxPolicy::Require), `hexrpc build-lib --require-hvx`).
    HvxUnavailable {
        /// The kernels the source defines (every one of them would lose HVX).
        kernels: Vec<String>,
        /// The source.
        source: PathBuf,
        /// clang's reason: the first line of its error, cut at 240 characters.
        reason: String,
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
            BuildError::HvxUnavailable { kernels, source, reason } => write!(
                f,
                "clang-19 cannot compile {} `{}` ({}) with HVX: {reason}; HVX was required (--require-hvx, HvxPolicy::Require in \
                 the API), so nothing was built (without it, the kernel is compiled without HVX: the same results, not vectorised)",
                if kernels.len() == 1 { "the kernel" } else { "the kernels" },
                kernels.join("`, `"),
                source.display()
            ),
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

pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BuildError + '_ {
    move |error| BuildError::Io { path: path.to_path_buf(), error }
}
