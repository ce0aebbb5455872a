//! The freestanding environment a kernel is built in: the headers it may include and the
//! compiler helpers a library carries itself.
//!
//! **Headers.** Every Hexagon translation unit is compiled with `-nostdlibinc` (see
//! [`crate::HEXAGON_CFLAGS`]): the host's `/usr/include` and `/usr/local/include` are never
//! searched, so no glibc header meant for x86 leaks into a DSP kernel. What is searched is the
//! build's own include directory (`OUT.build/include/`, written from [`HEADERS`], passed with
//! `-isystem`), then clang's resource headers (`stdint.h`, `stddef.h`, `stdbool.h`, `float.h`,
//! `limits.h`, `stdarg.h`, the Hexagon intrinsics headers), which under `-ffreestanding` need no C
//! library. Our `math.h` declares exactly the libm subset the DSP provides
//! ([`MATH_FUNCTIONS`], all in [`crate::DSP_PROVIDED_SYMBOLS`]) plus what the compiler resolves
//! inline (classification macros, `fabs`, `copysign`); `string.h` declares the four memory
//! functions the DSP provides. Any other C library header is not found, a clear compile error.
//!
//! **Helpers carried by the library.** clang-19 has no compiler runtime for Hexagon (`clang-19
//! --target=hexagon -print-libgcc-file-name` names a bare `libgcc.a`), and for `__fp16` (tinygrad's
//! half type; `_Float16` needs hexagonv68) it calls `__extendhfsf2`, `__truncsfhf2` and
//! `__truncdfhf2`. Whether a real `fastrpc_shell` exports these cannot be checked without a
//! device, and the bench's shell does not; so a library carries its own ([`HALF_SOURCE`]): the
//! build reads the undefined symbols of the compiled kernel objects, compiles only the helpers
//! of [`CARRIED_HELPERS`] they name (one translation unit, same flags, `-Wall -Werror`) and links
//! them with hidden visibility. The library neither exports nor imports them and loads on any
//! shell; a library that needs no helper is linked exactly as before. Choosing the helpers from
//! the objects' symbol tables, rather than linking all of them with `--gc-sections`, keeps
//! garbage collection away from the kernels' own sections and the build record.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The headers of the build's include directory: (file name, text).
pub const HEADERS: &[(&str, &str)] =
    &[("math.h", include_str!("../c/include/math.h")), ("string.h", include_str!("../c/include/string.h"))];

/// The functions our `math.h` declares without defining: each is provided by the DSP.
pub const MATH_FUNCTIONS: &[&str] =
    &["sqrtf", "fabsf", "floorf", "ceilf", "truncf", "roundf", "fmaxf", "fminf", "expf", "exp2f", "logf", "log2f", "sinf", "cosf"];

/// The functions our `string.h` declares: each is provided by the DSP.
pub const STRING_FUNCTIONS: &[&str] = &["memcpy", "memmove", "memset", "memcmp"];

/// The IEEE binary16 conversion helpers (C, each guarded by `HRX_NEED_<name>`).
pub const HALF_SOURCE: &str = include_str!("../c/runtime/hrx_half.c");

/// The compiler helpers a library carries when its objects call them: half -> float, half ->
/// double (exact), float -> half, double -> half (round to nearest, ties to even).
pub const CARRIED_HELPERS: &[&str] = &["__extendhfsf2", "__extendhfdf2", "__truncsfhf2", "__truncdfhf2"];

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

/// The `-D` flags that select `helpers` in [`HALF_SOURCE`].
pub(crate) fn helper_defines(helpers: &[&str]) -> Vec<OsString> {
    helpers.iter().map(|h| OsString::from(format!("-DHRX_NEED_{h}=1"))).collect()
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
        assert_eq!(declared(math), MATH_FUNCTIONS);
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
        assert!(helpers_needed(["HAP_mmap", "memcpy", "sqrtf"]).is_empty());
        assert_eq!(helpers_needed(["__truncdfhf2", "x", "__extendhfsf2"]), ["__extendhfsf2", "__truncdfhf2"]);
        assert_eq!(helper_defines(&["__truncsfhf2"]), [OsString::from("-DHRX_NEED___truncsfhf2=1")]);
        for h in CARRIED_HELPERS {
            assert!(HALF_SOURCE.contains(&format!("#if defined(HRX_NEED_{h})")), "{h} has no guarded definition");
            assert!(
                HALF_SOURCE.contains(&format!("HRX_RT float {h}("))
                    || HALF_SOURCE.contains(&format!("HRX_RT double {h}("))
                    || HALF_SOURCE.contains(&format!("HRX_RT hrx_u32 {h}(")),
                "{h} is not hidden"
            );
            assert!(!crate::DSP_PROVIDED_SYMBOLS.contains(h), "{h} is carried, never imported");
        }
    }
}
