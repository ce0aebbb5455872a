//! `hexrpc build-lib`: a Hexagon library or the reason why not, kernel tables, refusals as the CLI
//! shows them, operands that start with `-`, the device test library's imports, and nothing left
//! at `-o` by a failed build.

use std::process::Command;

use crate::common::{build_device_library, build_tools_runnable, hexrpc, hexrpc_in, scratch_dir, stderr_of, tools_run};

#[test]
fn build_lib_makes_a_hexagon_library_or_says_why_not() {
    let dir = scratch_dir("build");
    let kernel = dir.join("scale.c");
    std::fs::write(&kernel, "void scale(float *x, float *y, float k) { for (int i = 0; i < 16; i++) y[i] = k * x[i]; }\n").unwrap();
    let out = dir.join("libscale.so");
    let args = ["build-lib", kernel.to_str().unwrap(), "--signature", "buf,buf,f32", "-o", out.to_str().unwrap()];
    let run = hexrpc(&args);
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
    if !have_tools {
        assert_eq!(run.status.code(), Some(1), "a missing toolchain is a build failure, not a crash");
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not installed; the failure path was checked instead");
        return;
    }
    assert!(run.status.success(), "{run:?}");
    let so = std::fs::read(&out).unwrap();
    assert_eq!(&so[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([so[18], so[19]]), 164, "Hexagon");
    // Operands that start with `-` (after `--`) stay operands: clang and ld.lld never see them as
    // options.
    let dashed = dir.join("-o.c");
    std::fs::copy(&kernel, &dashed).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_hexrpc"))
        .current_dir(&dir)
        .args(["build-lib", "--kernel", "scale", "--signature", "buf,buf,f32", "-o", "./libdash.so", "--", "-o.c"])
        .output();
    if let Ok(run) = run {
        if !(cfg!(target_arch = "aarch64") && run.status.code() == Some(127)) {
            assert!(run.status.success(), "{run:?}");
            assert_eq!(&std::fs::read(dir.join("libdash.so")).unwrap()[..4], b"\x7fELF");
        }
    }
    // Usage errors: a scalar before a buffer, and a missing output.
    assert_eq!(hexrpc(&["build-lib", kernel.to_str().unwrap(), "--signature", "f32,buf", "-o", "x.so"]).status.code(), Some(2));
    assert_eq!(hexrpc(&["build-lib", kernel.to_str().unwrap(), "--signature", "buf"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn build_lib_table_makes_one_library_of_several_kernels() {
    let dir = scratch_dir("table");
    let (a, b) = (dir.join("a.c"), dir.join("b.c"));
    std::fs::write(
        &a,
        "void scale(float *x, float k) { for (int i = 0; i < 16; i++) x[i] *= k; }\nint check(unsigned int *x) { return (int)x[0]; }\n",
    )
    .unwrap();
    std::fs::write(&b, "void zero(float *x) { for (int i = 0; i < 16; i++) x[i] = 0.0f; }\n").unwrap();
    let out = dir.join("libtable.so");
    let (sa, sb, so) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    let (ta, tb) = (format!("{sa}:check:buf"), format!("{sb}:zero:buf"));
    let args = ["build-lib", sa, sb, "--table", "scale:buf,f32", "--table", &ta, "--table", &tb, "-o", so];
    let run = hexrpc(&args);
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
    // Usage errors first (no tools needed): no --signature with --table, a bad entry, several sources without --table.
    assert_eq!(hexrpc(&["build-lib", sa, "--table", "scale:buf,f32", "--signature", "buf", "-o", so]).status.code(), Some(2));
    assert_eq!(hexrpc(&["build-lib", sa, "--table", "scale", "-o", so]).status.code(), Some(2));
    assert_eq!(hexrpc(&["build-lib", sa, sb, "--signature", "buf", "-o", so]).status.code(), Some(2));
    if !have_tools {
        assert_eq!(run.status.code(), Some(1), "a missing toolchain is a build failure, not a crash");
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not installed; the failure path was checked instead");
        return;
    }
    assert!(run.status.success(), "{run:?}");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("kernel table [0: scale, 1: check (returns int), 2: zero]"), "{text}");
    let lib = std::fs::read(&out).unwrap();
    assert_eq!(u16::from_le_bytes([lib[18], lib[19]]), 164, "Hexagon");
    let _ = std::fs::remove_dir_all(&dir);
}

/// build-lib's refusals as the CLI shows them, and operands that start with `-`.
#[test]
fn build_lib_cli_refusals_and_dash_operands() {
    let have_tools = tools_run(&["clang-19", "ld.lld-19"]);
    let dir = scratch_dir("refuse");
    let kernel = "void bump(unsigned char *p, unsigned int n) { for (unsigned int i = 0; i < n; i++) p[i]++; }\n";
    std::fs::write(dir.join("-bump.c"), kernel).unwrap();
    std::fs::write(dir.join("my-kernel.c"), kernel).unwrap();
    // A missing compiler says how to install it.
    let o = hexrpc_in(
        &dir,
        &["build-lib", "--signature", "buf,u32", "--kernel", "bump", "--clang", "/nonexistent/clang-19", "-o", "x.so", "my-kernel.c"],
    );
    assert_eq!(o.status.code(), Some(1));
    if !cfg!(target_arch = "aarch64") {
        assert!(stderr_of(&o).contains("apt-get install clang-19 lld-19"), "{}", stderr_of(&o));
    }
    if !have_tools {
        eprintln!("SKIPPED: clang-19 / ld.lld-19 not installed; the rest needs them");
        return;
    }
    // The bad-stem hint names the real flag.
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,u32", "-o", "x.so", "my-kernel.c"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr_of(&o).contains("--kernel NAME"), "{}", stderr_of(&o));
    // Operands that start with '-': after `--` for the kernel, as -o's value for the output;
    // neither reaches clang or ld.lld as an option.
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,u32", "--kernel", "bump", "-o", "-bump.so", "--", "-bump.c"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let so = std::fs::read(dir.join("-bump.so")).unwrap();
    assert_eq!(u16::from_le_bytes([so[18], so[19]]), 164);
    assert!(dir.join("-bump.so.build/kernel0.o").exists());
    // -o onto the kernel source, a directory as kernel, a mismatching signature, a missing kernel.
    for (args, needle) in [
        (
            &["build-lib", "--signature", "buf,u32", "--kernel", "bump", "-o", "my-kernel.c", "my-kernel.c"][..],
            "overwrite the kernel source",
        ),
        (&["build-lib", "--signature", "buf,u32", "--kernel", "bump", "-o", "d.so", "."][..], "directory"),
        (&["build-lib", "--signature", "buf,f32", "--kernel", "bump", "-o", "m.so", "my-kernel.c"][..], "parameter 2 is `unsigned int`"),
        (&["build-lib", "--signature", "buf,u32", "--kernel", "nope", "-o", "n.so", "my-kernel.c"][..], "no function `nope`"),
    ] {
        let o = hexrpc_in(&dir, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr_of(&o).contains(needle), "{args:?}: {}", stderr_of(&o));
    }
    assert_eq!(std::fs::read_to_string(dir.join("my-kernel.c")).unwrap(), kernel);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_device_test_library_builds_and_only_weak_imports_may_be_missing() {
    if !build_tools_runnable() {
        return;
    }
    let dir = scratch_dir("devicelib");
    build_device_library(&dir.join("libhexrpc_selftest.so"));
    // An import the DSP shell lacks is refused by name, unless it is weak (optional: 0 when
    // absent, which the library tests).
    for (name, decl, ok) in [
        ("strong", "extern unsigned long fread(void *, unsigned long, unsigned long, void *);", false),
        ("weak", "extern unsigned long fread(void *, unsigned long, unsigned long, void *) __attribute__((weak));", true),
    ] {
        let c = dir.join(format!("{name}.c"));
        std::fs::write(
            &c,
            format!("{decl}\nvoid {name}(unsigned char *in, unsigned char *out) {{ out[0] = fread ? fread(out, 1, 1, in) != 0 : 2; }}\n"),
        )
        .unwrap();
        let so = dir.join(format!("lib{name}.so"));
        let run = hexrpc(&["build-lib", c.to_str().unwrap(), "--signature", "buf,buf", "-o", so.to_str().unwrap()]);
        if ok {
            assert!(run.status.success(), "{name}: {run:?}");
        } else {
            assert_eq!(run.status.code(), Some(1), "{name}: {run:?}");
            assert!(String::from_utf8_lossy(&run.stderr).contains("fread"), "{run:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A build that fails a check after the link (here: a `.ctors` section, which the linker script
/// does not place on its own page) leaves nothing at `-o`, and leaves a file already there as it
/// was: the library is put in place only once every check passed.
#[test]
fn a_failed_build_leaves_no_library_at_the_output_and_keeps_a_previous_one() {
    if !build_tools_runnable() {
        return;
    }
    let dir = scratch_dir("ctors");
    std::fs::write(
        dir.join("ctor.c"),
        "static int ready;\nstatic void init(void) { ready = 1; }\n\
         __attribute__((section(\".ctors\"), used)) static void (*const init_ctor)(void) = init;\n\
         void ctor(unsigned char *in, unsigned char *out) { out[0] = in[0] + ready; }\n",
    )
    .unwrap();
    std::fs::write(dir.join("good.c"), "void good(unsigned char *in, unsigned char *out) { out[0] = in[0]; }\n").unwrap();
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,buf", "-o", "libctor.so", "ctor.c"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains(".ctors"), "the failed check is named: {}", stderr_of(&o));
    assert!(std::fs::symlink_metadata(dir.join("libctor.so")).is_err(), "no library at -o after a failed build");
    // A previous library at -o stays as it was.
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,buf", "-o", "libprev.so", "good.c"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let before = std::fs::read(dir.join("libprev.so")).unwrap();
    let o = hexrpc_in(&dir, &["build-lib", "--signature", "buf,buf", "--kernel", "ctor", "-o", "libprev.so", "ctor.c"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr_of(&o));
    assert_eq!(std::fs::read(dir.join("libprev.so")).unwrap(), before, "the previous library is untouched");
    // No temporary file is left next to the output.
    let stray: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') || n.ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel clang-19 cannot compile with HVX (a 32-lane `_Bool` vector stored as its bits:
/// "Cannot select" in the Hexagon backend, with HVX only).
const NO_HVX_KERNEL: &str = "#include <stdint.h>\n\
    typedef int32_t int32x32 __attribute__((ext_vector_type(32)));\n\
    typedef _Bool bool32 __attribute__((ext_vector_type(32)));\n\
    void below(const int32_t *a, uint32_t *mask) {\n\
    int32x32 v;\n  __builtin_memcpy(&v, a, sizeof v);\n\
    *mask = __builtin_bit_cast(uint32_t, __builtin_convertvector(v < 3, bool32));\n}\n";

/// The build record's count of kernels compiled without HVX.
fn kernels_without_hvx(library: &std::path::Path) -> u32 {
    let image = std::fs::read(library).unwrap();
    hexrpc_runtime::launch::LibraryRecord::find(&image).unwrap().expect("a build record").kernels_without_hvx()
}

/// A kernel that loses HVX is a warning on stderr (one line, prefixed, naming the kernel and
/// clang's reason) even under `-q` and `-qq`, is said on stdout and counted in the build record;
/// `--require-hvx` makes it a failure (status 1, nothing at `-o`); a kernel that keeps HVX gets
/// no warning and a count of 0.
#[test]
fn a_kernel_that_loses_hvx_is_warned_about_counted_and_refused_with_require_hvx() {
    if !build_tools_runnable() {
        return;
    }
    let dir = scratch_dir("no-hvx");
    std::fs::write(dir.join("below.c"), NO_HVX_KERNEL).unwrap();
    std::fs::write(dir.join("add.c"), "void add(int *restrict a, const int *restrict b) { for (int i = 0; i < 256; i++) a[i] += b[i]; }\n")
        .unwrap();
    for quiet in [&[][..], &["-q"], &["-q", "-q"]] {
        let args: Vec<&str> =
            quiet.iter().copied().chain(["build-lib", "--signature", "buf,buf", "-o", "libbelow.so", "below.c"]).collect();
        let o = hexrpc_in(&dir, &args);
        let err = stderr_of(&o);
        assert!(o.status.success(), "{err}");
        let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("hexrpc build-lib: warning: ")).collect();
        assert_eq!(warnings.len(), 1, "{quiet:?}: one warning line: {err}");
        assert!(
            warnings[0].starts_with("hexrpc build-lib: warning: kernel below compiled without HVX (the same results, not vectorised;"),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].contains(": fatal error: error in backend: Cannot select: "), "clang's reason: {}", warnings[0]);
        assert!(String::from_utf8_lossy(&o.stdout).contains("kernel below, entry V2, without HVX)"), "{o:?}");
        assert_eq!(kernels_without_hvx(&dir.join("libbelow.so")), 1);
    }
    // A table: the report line counts, the record too.
    let o =
        hexrpc_in(&dir, &["build-lib", "add.c", "below.c", "--table", "add:buf,buf", "--table", "below.c:below:buf,buf", "-o", "libt.so"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("batches, 1 of 2 kernels without HVX)"), "{o:?}");
    assert_eq!(stderr_of(&o).matches("hexrpc build-lib: warning: kernel below compiled without HVX").count(), 1, "{o:?}");
    assert_eq!(kernels_without_hvx(&dir.join("libt.so")), 1);
    // --require-hvx: a failure that names the kernel and the flag, and no library.
    let o = hexrpc_in(&dir, &["-q", "build-lib", "--require-hvx", "--signature", "buf,buf", "-o", "libstrict.so", "below.c"]);
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("hexrpc: build-lib: clang-19 cannot compile the kernel `below` (below.c) with HVX: fatal error:"), "{err}");
    assert!(err.contains("HVX was required (--require-hvx"), "{err}");
    assert!(!err.contains("warning"), "an error, not a warning: {err}");
    assert!(std::fs::symlink_metadata(dir.join("libstrict.so")).is_err(), "no library at -o");
    // A kernel that keeps HVX: no warning, a count of 0, with or without --require-hvx.
    for strict in [&[][..], &["--require-hvx"]] {
        let args: Vec<&str> =
            ["build-lib", "--signature", "buf,buf", "-o", "libadd.so"].into_iter().chain(strict.iter().copied()).chain(["add.c"]).collect();
        let o = hexrpc_in(&dir, &args);
        assert!(o.status.success(), "{}", stderr_of(&o));
        assert!(!stderr_of(&o).contains("warning"), "{}", stderr_of(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("kernel add, entry V2, with HVX)"), "{o:?}");
        assert_eq!(kernels_without_hvx(&dir.join("libadd.so")), 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
