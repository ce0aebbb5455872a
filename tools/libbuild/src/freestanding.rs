//! The freestanding environment a kernel is built in: the headers it may include and the
//! functions a library carries itself.
//!
//! **Headers.** Every Hexagon translation unit is compiled with `-nostdlibinc` (see
//! [`crate::HEXAGON_CFLAGS`]): the host's `/usr/include` and `/usr/local/include` are never
//! searched, so no glibc header meant for x86 leaks into a DSP kernel. What is searched is the
//! build's own include directory (`OUT.build/include/`, written from [`HEADERS`], passed with
//! `-isystem`), then clang's resource headers (`stdint.h`, `stddef.h`, `stdbool.h`, `float.h`,
//! `limits.h`, `stdarg.h`, the Hexagon intrinsics headers), which under `-ffreestanding` need no C
//! library. Our `math.h` declares exactly the libm subset the DSP provides
//! ([`MATH_FUNCTIONS`], all in [`crate::DSP_PROVIDED_SYMBOLS`]), the libm functions a library
//! carries ([`CARRIED_MATH_FUNCTIONS`]), and what the compiler resolves inline (classification
//! macros, `fabs`, `copysign`); `string.h` declares the four memory functions the DSP provides.
//! Any other C library header is not found, a clear compile error.
//!
//! **Functions carried by the library.** clang-19 has no compiler runtime for Hexagon (`clang-19
//! --target=hexagon -print-libgcc-file-name` names a bare `libgcc.a`), and for `__fp16` (tinygrad's
//! half type; `_Float16` needs hexagonv68) it calls `__extendhfsf2`, `__truncsfhf2` and
//! `__truncdfhf2`; tinygrad's float64 kernels call `trunc` (its DSP renderer prints
//! `__builtin_trunc` for a float64 trunc and builds floor, ceil, round, `%` and `//` on it).
//! Whether a real `fastrpc_shell` exports these cannot be checked without a device, and the
//! bench's shell does not; so a library carries its own ([`CARRIED_SOURCES`]: [`HALF_SOURCE`],
//! [`LIBM_SOURCE`]): the build reads the undefined symbols of the compiled kernel objects,
//! compiles only the functions of [`CARRIED_HELPERS`] they name (one translation unit per source
//! that defines one, same flags, `-Wall -Werror`) and links them with hidden visibility. The
//! library neither exports nor imports them and loads on any shell; a library that needs none is
//! linked exactly as before. Choosing them from the objects' symbol tables, rather than linking
//! all of them with `--gc-sections`, keeps garbage collection away from the kernels' own sections
//! and the build record.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The headers of the build's include directory: (file name, text).
pub const HEADERS: &[(&str, &str)] =
    &[("math.h", include_str!("../c/include/math.h")), ("string.h", include_str!("../c/include/string.h"))];

/// The functions our `math.h` declares without defining that the DSP provides, in the header's
/// order.
pub const MATH_FUNCTIONS: &[&str] =
    &["sqrtf", "fabsf", "floorf", "ceilf", "truncf", "roundf", "fmaxf", "fminf", "expf", "exp2f", "logf", "log2f", "sinf", "cosf"];

/// The functions our `math.h` declares (after [`MATH_FUNCTIONS`]) that a library carries itself
/// ([`LIBM_SOURCE`]): `trunc`, exact.
pub const CARRIED_MATH_FUNCTIONS: &[&str] = &["trunc"];

/// The functions our `string.h` declares: each is provided by the DSP.
pub const STRING_FUNCTIONS: &[&str] = &["memcpy", "memmove", "memset", "memcmp"];

/// The IEEE binary16 conversion helpers (C, each guarded by `HRX_NEED_<name>`).
pub const HALF_SOURCE: &str = include_str!("../c/runtime/hrx_half.c");

/// The double-precision libm functions a library carries (C, each guarded by
/// `HRX_NEED_<name>`): what tinygrad 0.14's float64 kernels import, `trunc`.
pub const LIBM_SOURCE: &str = include_str!("../c/runtime/hrx_libm.c");

/// One C source of functions a library carries: compiled as its own translation unit, with
/// `-DHRX_NEED_<name>=1` for each of its functions the kernel objects call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CarriedSource {
    /// The file name it is written under in the work directory (its object: `.c` -> `.o`).
    pub file: &'static str,
    /// The C text.
    pub text: &'static str,
    /// The functions it defines, each hidden and guarded by `HRX_NEED_<name>`.
    pub functions: &'static [&'static str],
}

/// The sources of [`CARRIED_HELPERS`], in that table's order.
pub const CARRIED_SOURCES: &[CarriedSource] = &[
    CarriedSource { file: "hrx_half.c", text: HALF_SOURCE, functions: &["__extendhfsf2", "__extendhfdf2", "__truncsfhf2", "__truncdfhf2"] },
    CarriedSource { file: "hrx_libm.c", text: LIBM_SOURCE, functions: &["trunc"] },
];

/// The functions a library carries when its objects call them (never imported, never exported):
/// the compiler's half helpers, half -> float, half -> double (exact), float -> half, double ->
/// half (round to nearest, ties to even); and `trunc` (double, exact).
pub const CARRIED_HELPERS: &[&str] = &["__extendhfsf2", "__extendhfdf2", "__truncsfhf2", "__truncdfhf2", "trunc"];

/// The name of the include directory inside the work directory.
pub const INCLUDE_DIR: &str = "include";

/// Writes [`HEADERS`] into `work/include/` and returns that directory.
pub(crate) fn write_include_dir(work: &Path) -> std::io::Result<PathBuf> {
    let dir = work.join(INCLUDE_DIR);
    std::fs::create_dir_all(&dir)?;
    for (name, text) in HEADERS {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(dir)
}

/// The flags that point a kernel's translation unit at the build's include directory.
pub(crate) fn include_flags(dir: &Path) -> [OsString; 2] {
    ["-isystem".into(), dir.as_os_str().to_owned()]
}

/// The helpers of [`CARRIED_HELPERS`] that `undefined` (the objects' undefined symbols) names,
/// in table order.
pub fn helpers_needed<'a>(undefined: impl IntoIterator<Item = &'a str>) -> Vec<&'static str> {
    let undefined: Vec<&str> = undefined.into_iter().collect();
    CARRIED_HELPERS.iter().copied().filter(|h| undefined.contains(h)).collect()
}

/// The `-D` flags that select `helpers` in their [`CarriedSource`].
pub(crate) fn helper_defines(helpers: &[&str]) -> Vec<OsString> {
    helpers.iter().map(|h| OsString::from(format!("-DHRX_NEED_{h}=1"))).collect()
}

/// The sources that define some of `helpers`, each with those of its functions `helpers` names,
/// in table order.
pub(crate) fn sources_for<'a>(helpers: &'a [&str]) -> impl Iterator<Item = (&'static CarriedSource, Vec<&'static str>)> + 'a {
    CARRIED_SOURCES.iter().filter_map(move |s| {
        let wanted: Vec<&'static str> = s.functions.iter().copied().filter(|f| helpers.contains(f)).collect();
        (!wanted.is_empty()).then_some((s, wanted))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names a header declares as `TYPE NAME(` at the start of a line (prototypes, not the
    /// static inline definitions).
    fn declared(text: &str) -> Vec<&str> {
        text.lines()
            .filter(|l| !l.starts_with("static") && !l.starts_with('#') && !l.starts_with(' ') && l.ends_with(");"))
            .filter_map(|l| l.split_once('(').map(|(head, _)| head.rsplit([' ', '*']).next().unwrap_or(head)))
            .collect()
    }

    #[test]
    fn headers_declare_only_what_the_dsp_provides() {
        let math = HEADERS.iter().find(|(n, _)| *n == "math.h").unwrap().1;
        let string = HEADERS.iter().find(|(n, _)| *n == "string.h").unwrap().1;
        let want: Vec<&str> = MATH_FUNCTIONS.iter().chain(CARRIED_MATH_FUNCTIONS).copied().collect();
        assert_eq!(declared(math), want);
        // What math.h declares beyond the DSP's subset, the library carries; never imported.
        for f in CARRIED_MATH_FUNCTIONS {
            assert!(CARRIED_HELPERS.contains(f), "{f} is declared as carried but is not in CARRIED_HELPERS");
            assert!(!crate::DSP_PROVIDED_SYMBOLS.contains(f), "{f} is carried, never imported");
        }
        let mut s = declared(string);
        s.sort_unstable();
        let mut want = STRING_FUNCTIONS.to_vec();
        want.sort_unstable();
        assert_eq!(s, want);
        for f in MATH_FUNCTIONS.iter().chain(STRING_FUNCTIONS) {
            assert!(crate::DSP_PROVIDED_SYMBOLS.contains(f), "{f} is declared but the DSP does not provide it");
        }
        // The DSP's libm subset is declared in full.
        let other =
            |f: &&&str| f.starts_with("HAP_") || f.starts_with("__") || STRING_FUNCTIONS.contains(f) || ["fopen", "fclose"].contains(f);
        for f in crate::DSP_PROVIDED_SYMBOLS.iter().filter(|f| !other(f)) {
            assert!(MATH_FUNCTIONS.contains(f), "the DSP provides {f}, math.h does not declare it");
        }
    }

    #[test]
    fn only_the_named_helpers_are_selected() {
        assert!(helpers_needed(["HAP_mmap", "memcpy", "sqrtf", "truncf", "floor", "sqrt"]).is_empty());
        assert_eq!(helpers_needed(["__truncdfhf2", "x", "__extendhfsf2"]), ["__extendhfsf2", "__truncdfhf2"]);
        assert_eq!(helpers_needed(["trunc", "__hexagon_divdf3"]), ["trunc"]);
        assert_eq!(helper_defines(&["__truncsfhf2"]), [OsString::from("-DHRX_NEED___truncsfhf2=1")]);
        assert_eq!(helper_defines(&["trunc"]), [OsString::from("-DHRX_NEED_trunc=1")]);
        // Only the sources that define a needed function, each with only those functions.
        let by_source = |h: &[&str]| sources_for(h).map(|(s, f)| (s.file, f)).collect::<Vec<_>>();
        assert_eq!(by_source(&["trunc"]), [("hrx_libm.c", vec!["trunc"])]);
        assert_eq!(by_source(&["__truncsfhf2", "__extendhfsf2"]), [("hrx_half.c", vec!["__extendhfsf2", "__truncsfhf2"])]);
        assert_eq!(by_source(&["trunc", "__truncdfhf2"]), [("hrx_half.c", vec!["__truncdfhf2"]), ("hrx_libm.c", vec!["trunc"])]);
        assert!(by_source(&[]).is_empty());
    }

    #[test]
    fn every_carried_function_has_one_hidden_guarded_definition() {
        let listed: Vec<&str> = CARRIED_SOURCES.iter().flat_map(|s| s.functions.iter().copied()).collect();
        assert_eq!(listed, CARRIED_HELPERS, "CARRIED_SOURCES and CARRIED_HELPERS list the same functions");
        for s in CARRIED_SOURCES {
            assert!(s.file.ends_with(".c") && !s.file.contains('/'), "{}", s.file);
            for h in s.functions {
                let guard = format!("#if defined(HRX_NEED_{h})");
                assert_eq!(s.text.matches(&guard).count(), 1, "{h} has no (or more than one) guarded definition in {}", s.file);
                let hidden = ["float", "double", "hrx_u32"].iter().any(|t| s.text.contains(&format!("HRX_RT {t} {h}(")));
                assert!(hidden, "{h} is not hidden in {}", s.file);
                for other in CARRIED_SOURCES.iter().filter(|o| o.file != s.file) {
                    assert!(!other.text.contains(&guard), "{h} is defined in {} too", other.file);
                }
                assert!(!crate::DSP_PROVIDED_SYMBOLS.contains(h), "{h} is carried, never imported");
            }
        }
    }
}
