//! The fixed facts of a build: the tools and their flags, the library's section alignment and
//! output sections, the symbols the DSP provides, and the names of the files a build keeps
//! beside its output.

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
/// Flags for a kernel's translation unit on top of [`HEXAGON_CFLAGS`]: clang-19 vectorises
/// loops for HVX only when asked (`-mhvx` alone makes the HVX registers and intrinsics
/// available; the loop and SLP vectorisers target HVX only with `-hexagon-autohvx`). A later
/// `--cflag=-mllvm --cflag=-hexagon-autohvx=false` turns it off again (the last one wins). The
/// entry and the carried helpers are compiled without it.
pub const KERNEL_CFLAGS: &[&str] = &["-mllvm", "-hexagon-autohvx=true"];
/// Extra flags for the generated entry: it must compile warning-free.
pub const ENTRY_CFLAGS: &[&str] = &["-Wall", "-Werror"];
/// Alignment of every allocated output section (and the linker's page size).
pub const SECTION_ALIGN: u64 = 4096;
/// How to install the tools when they are missing (Debian / Ubuntu).
pub const INSTALL_HINT: &str = "apt-get install clang-19 lld-19";
/// The file that marks a work directory as made by this build step (and so safe to replace).
pub const WORK_MARKER: &str = ".hexrpc-build";
/// What is appended to the output's name for the lock file builds to it take turns on
/// (`OUT.build.lock`, see the crate docs).
pub const LOCK_SUFFIX: &str = ".build.lock";

/// The symbols a library may import: what the DSP provides to a loaded library. The list lives
/// in the runtime ([`hexrpc_runtime::launch::record::DSP_PROVIDED_SYMBOLS`]), where a model
/// file's reader checks a library's imports against it too.
pub use hexrpc_runtime::launch::record::DSP_PROVIDED_SYMBOLS;

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
