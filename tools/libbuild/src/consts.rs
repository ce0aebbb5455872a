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

/// The symbols a library may import: what the DSP provides to a loaded library (the HAP
/// functions the generated entry calls, `fopen`/`fclose` (answered by the host's reverse file
/// service, as a DSP's C library does), the C library functions and compiler runtime helpers
/// clang emits for Hexagon under `-nostdlib`, and the libm subset kernels call). This is the
/// export list of the bench's DSP shell; a real `fastrpc_shell` exports more, so the list is
/// conservative: a library that passes here loads on the bench and on a device. Helpers not on
/// this list that a library needs are carried in it instead
/// ([`freestanding::CARRIED_HELPERS`](crate::freestanding::CARRIED_HELPERS): the half
/// conversions and the double `trunc`); our `math.h` and `string.h` declare only names from it
/// and from that list.
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
