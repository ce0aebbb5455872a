//! The hexrpc library builder, a host tool: generated entry + kernel C -> a Hexagon shared
//! object laid out the way the DSP loader needs it, every allocated output section starting on
//! its own 4 KiB page, carrying its build record. It runs clang and ld.lld, so it is a crate of
//! its own: a device service links `hexrpc-runtime`, which reads the record
//! ([`LibraryRecord`](hexrpc_runtime::launch::LibraryRecord)), never this.
//!
//! ```text
//! clang-19 --target=hexagon -mcpu=hexagonv65 -mhvx=v65 -mhvx-length=128b -O2 -fPIC
//!          -ffreestanding -fno-builtin -nostdlib -nostdlibinc -isystem OUT.build/include
//!          -fsyntax-only -Xclang -ast-dump=json -Xclang -ast-dump-filter -Xclang KERNEL
//!          -- KERNEL.c                                                   (find the kernel)
//! clang-19 (flags) -Wall -Werror -c -- entry.c -o entry.o
//! clang-19 (flags) -mllvm -hexagon-autohvx=true (BuildOptions::kernel_cflags)
//!          -isystem OUT.build/include -c -- kernel.c -o kernel.o
//!          (kernel.c = #include "KERNEL.c" + the prototype generated from the signature;
//!          if clang cannot select HVX instructions for it: refused, or compiled again
//!          without -mhvx and -hexagon-autohvx, see below)
//! clang-19 (flags) -Wall -Werror -DHRX_NEED___truncsfhf2=1 ... -c -- hrx_half.c -o hrx_half.o
//! clang-19 (flags) -Wall -Werror -DHRX_NEED_trunc=1 -c -- hrx_libm.c -o hrx_libm.o
//!          (each only if the kernel objects call a function it carries, see below)
//! clang-19 --target=hexagon -c -- record.s -o record.o                  (the build record)
//! ld.lld-19 -shared --hash-style=sysv -z max-page-size=4096 -soname NAME -T link.ld
//!           -o OUT.build/linked.so entry.o kernel0.o [hrx_half.o] [hrx_libm.o] record.o
//! ```
//!
//! A kernel is compiled with HVX code generation and clang's HVX auto-vectorisation
//! ([`KERNEL_CFLAGS`]). clang-19's Hexagon backend fails on some vector code ("Cannot select",
//! e.g. a 32-lane `_Bool` vector stored as its bits): by default
//! ([`HvxPolicy::Fallback`]) such a source is compiled again without HVX, and every kernel it
//! defines is named with clang's reason in [`BuildReport::without_hvx`] and counted in the build
//! record ([`LibraryRecord::kernels_without_hvx`](hexrpc_runtime::launch::LibraryRecord::kernels_without_hvx));
//! with [`HvxPolicy::Require`] ([`build_library_with`]) the build fails instead
//! ([`BuildError::HvxUnavailable`]).
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

// Bottom-up: `consts` (the fixed facts), `elf` and `freestanding` below everything; `error` on
// them; `tools`, `output`, `ast` (which needs nothing of this crate), `kernel` and `library` on
// those; `pipeline`, the build itself, on top. No file uses one above it.
mod ast;
mod consts;
mod elf;
mod error;
pub mod freestanding;
mod kernel;
mod library;
mod output;
mod pipeline;
mod tools;

pub use consts::{
    DEFAULT_CLANG, DEFAULT_LLD, DSP_PROVIDED_SYMBOLS, ENTRY_CFLAGS, HEXAGON_CFLAGS, INSTALL_HINT, KERNEL_CFLAGS, LOCK_SUFFIX,
    OUTPUT_SECTIONS, SECTION_ALIGN, WORK_MARKER,
};
pub use elf::{object_undefined, parse_elf, ElfError, ElfSummary, SectionInfo, SegmentInfo};
pub use error::BuildError;
pub use hexrpc_drivers::elf::{EM_HEXAGON, ET_DYN};
pub use library::{check_library, write_linker_script};
pub use pipeline::{
    build_library, build_library_with, build_table_library, build_table_library_with, BuildOptions, BuildReport, HvxPolicy, TableSource,
    WithoutHvx,
};
pub use tools::{compile_hexagon, operand};
