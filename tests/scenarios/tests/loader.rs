//! The executor's DSP shell loads the very shared objects that ship. Libraries made by
//! `hexrpc build-lib` (hexrpc-libbuild's `build_library`) and by a tinygrad-style `clang -shared`
//! are opened through the HAL and the runtime's reverse file service, fetched by the simulated
//! DSP, loaded by the shell under qemu-hexagon and launched; every refusal reaches the caller as
//! a typed error carrying the loader's reason.
//!
//! Every test prints `SKIPPED: <reason>` and returns when the tools are missing or cannot run
//! from this process (an aarch64 test binary under qemu-aarch64).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use hexrpc_bench::executor::reference::{f32_bytes, f32s_of};
use hexrpc_bench::executor::{self, Toolchain};
use hexrpc_bench::Bench;
use hexrpc_bsp::Board;
use hexrpc_drivers::aee;
use hexrpc_hal::{Cause, Stage};
use hexrpc_libbuild::{build_library, BuildOptions, DSP_PROVIDED_SYMBOLS};
use hexrpc_runtime::launch::{write_entry, AbiVersion, BufferRef, EntryOptions, LibraryRecord, PackedLaunch, Scalar, Signature};
use hexrpc_scenarios::{stack, ModelError, Stack};

hexrpc_bench::on_both_kernels!(
    build_lib_output_runs_through_hal_and_runtime_with_offset_views,
    two_libraries_in_one_process_close_and_reopen,
    tinygrad_layout_loads_and_runs,
    every_refusal_reaches_the_caller_with_its_reason,
    a_loader_fault_is_a_dsp_restart_and_recovery_works,
    shell_libm_and_division_helpers_meet_their_stated_bounds,
    read_only_segments_are_protected,
    a_hanging_constructor_is_bounded,
    a_library_cannot_touch_host_files_through_the_emulator,
    a_forged_answer_header_is_a_dsp_restart
);

fn tools() -> Option<Toolchain> {
    hexrpc_scenarios::suite::tools_or_skip()
}

fn work(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-loader-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn hexagon_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hexagon")
}

fn leak(bytes: Vec<u8>) -> &'static [u8] {
    Box::leak(bytes.into_boxed_slice())
}

/// `hexrpc build-lib tests/hexagon/kernels/kernels.c --kernel K --signature SIG` (the suite's
/// file; `hrx_expf` taken from the shell's `expf`).
fn build_suite(tc: &Toolchain, dir: &Path, kernel: &str, sig: &str, entry: EntryOptions) -> &'static [u8] {
    let out = dir.join(format!("lib{kernel}-{:?}.so", entry.version));
    let opts = BuildOptions {
        entry,
        kernel_name: Some(kernel.into()),
        clang: tc.clang.clone(),
        lld: tc.lld.clone(),
        kernel_cflags: vec!["-I".into(), hexagon_dir().join("runtime").into(), "-Dhrx_expf=expf".into(), "-ffp-contract=off".into()],
        work_dir: None,
    };
    build_library(&hexagon_dir().join("kernels/kernels.c"), &Signature::parse(sig).unwrap(), &out, &opts).expect("build-lib");
    leak(std::fs::read(&out).unwrap())
}

/// A library laid out the way tinygrad's `DSPCompiler` makes one: entry and kernel in one C
/// translation unit, `clang -shared -nostdlib` driving ld.lld with a linker script that puts
/// every listed section at a 4 KiB boundary and discards notes and `.gnu.hash`. No import check.
fn build_tinygrad_style(tc: &Toolchain, dir: &Path, name: &str, source: &str) -> Result<&'static [u8], String> {
    let script = dir.join(format!("{name}.ld"));
    let mut text = String::from("SECTIONS {\n  . = 0x0;\n");
    for s in ["text", "rela.plt", "rela.dyn", "plt", "data", "bss", "hash", "dynamic", "got", "got.plt", "dynsym", "dynstr"] {
        text.push_str(&format!("  .{s} : ALIGN(4096) {{ *(.{s}) }}\n"));
    }
    text.push_str("  /DISCARD/ : { *(.note .note.* .gnu.hash .comment) }\n}\n");
    std::fs::write(&script, text).unwrap();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(format!("{name}.so"));
    let mut script_flag = OsString::from("-T");
    script_flag.push(&script);
    let o = Command::new(&tc.clang)
        .args(["-shared", "--target=hexagon", "-mcpu=hexagonv65", "-fuse-ld=lld", "-nostdlib", "-mhvx=v65", "-mhvx-length=128b"])
        .arg(script_flag)
        .args(["-O2", "-Wall", "-fno-stack-protector", "-fPIC", "-ffreestanding", "-nostdlib"])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .env("PATH", path_with(&tc.lld))
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    Ok(leak(std::fs::read(&out).unwrap()))
}

/// PATH with ld.lld-19's directory first and an `ld.lld` that is ld.lld-19 (clang's
/// `-fuse-ld=lld` looks for `ld.lld`).
fn path_with(lld: &Path) -> OsString {
    let bin = std::env::temp_dir().join(format!("hexrpc-loader-{}-bin", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("ld.lld");
    if !link.exists() {
        let _ = std::os::unix::fs::symlink(lld, &link);
    }
    let mut p = OsString::from(&bin);
    p.push(":");
    p.push(std::env::var_os("PATH").unwrap_or_default());
    p
}

fn entry_and_kernel(sig: &str, kernel: &str, body: &str, opts: &EntryOptions) -> String {
    let mut c = String::new();
    write_entry(&mut c, &Signature::parse(sig).unwrap(), kernel, opts).unwrap();
    c.push('\n');
    c.push_str(body);
    c
}

/// A kernel in the entry's translation unit (so declared with the entry's `void *` parameters).
const SCALE: &str = "void scale(void *pin, void *pout, unsigned int n) {\n  const float *in = pin;\n  float *out = pout;\n  for (unsigned int i = 0; i < n; i++) out[i] = in[i] * 3.0f;\n}\n";

#[test]
fn shell_exports_are_what_build_lib_allows() {
    // The list build-lib checks imports against is exactly the shell's export table.
    let c = include_str!("../../hexagon/runtime/hrx_dsp.c");
    let mut exported: Vec<&str> =
        c.lines().filter_map(|l| l.trim().strip_prefix("HRX_EXPORT(").and_then(|r| r.strip_suffix("),"))).collect();
    let mut allowed = DSP_PROVIDED_SYMBOLS.to_vec();
    exported.sort();
    allowed.sort();
    assert_eq!(exported, allowed);
}

fn build_lib_output_runs_through_hal_and_runtime_with_offset_views(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("buildlib");
    let image = build_suite(&tc, &dir, "add_f32", "buf,buf,buf,u32", EntryOptions::V2);
    let rec = LibraryRecord::find(image).unwrap().expect("build record");
    assert_eq!((rec.signature(), rec.abi()), ("buf,buf,buf,u32", AbiVersion::V2));
    assert!(executor::is_shared_library(image));
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    // The shell executable is built (or found in the cache) first: the figure is the load only.
    executor::build_shell(&tc).expect("shell");
    let t0 = Instant::now();
    let lib = stack.open("add_f32", image).expect("open the build-lib .so");
    println!(
        "FIGURE library load (open_library of a {} byte build-lib .so, first load starts the qemu-hexagon shell): {:?} host wall time, emulated",
        image.len(),
        t0.elapsed()
    );
    let n = 300usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 20.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    // One lease, three views at non-zero, non-page offsets.
    let mut lease = stack.session().alloc(3 * 4096).unwrap();
    lease.fill(0, 3 * 4096, 0xEE).unwrap();
    let (oa, ob, oo) = (36usize, 4096 + 100, 2 * 4096 + 12);
    lease.write_at(oa, &f32_bytes(&xs)).unwrap();
    lease.write_at(ob, &f32_bytes(&ys)).unwrap();
    let (a, b, o) = (lease.view(oa, 4 * n).unwrap(), lease.view(ob, 4 * n).unwrap(), lease.view(oo, 4 * n).unwrap());
    let sig = Signature::parse("buf,buf,buf,u32").unwrap();
    stack::launch(&lib, &sig, &[&a, &b, &o], &[Scalar::U32(n as u32)]).expect("launch");
    let mut got = vec![0u8; 4 * n];
    o.read(&mut got).unwrap();
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| x + y).collect();
    assert_eq!(f32s_of(&got), want);
    let mut all = vec![0u8; 3 * 4096];
    lease.read_at(0, &mut all).unwrap();
    assert!(all[oo - 12..oo].iter().chain(&all[oo + 4 * n..]).all(|&x| x == 0xEE), "nothing outside the output view changed");
    assert_eq!(bench.ledger_mismatches(), 0);
    // Load time once the shell runs (a second library in the same process).
    let t1 = Instant::now();
    let again = stack.open("add_f32b", image).expect("second open");
    println!("FIGURE library load (shell already running): {:?} host wall time, emulated", t1.elapsed());
    drop(again);
}

fn two_libraries_in_one_process_close_and_reopen(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("two");
    let add = build_suite(&tc, &dir, "add_f32", "buf,buf,buf,u32", EntryOptions::V2);
    let bump = build_suite(&tc, &dir, "bump_u8", "buf,u32", EntryOptions::V2);
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let la = stack.open("add", add).unwrap();
    let lb = stack.open("bump", bump).unwrap();
    let ex = executor::executors(&bench);
    assert_eq!(ex.len(), 2, "{ex:?}");
    assert_eq!(ex[0].os_pid, ex[1].os_pid, "one shell (one DSP process) holds both: {ex:?}");
    assert_eq!(ex[0].dsp_pid, ex[1].dsp_pid);
    assert_eq!(ex[0].stats.libraries, 2);
    assert_ne!(la.remote_handle(), lb.remote_handle());

    let mut lease = stack.session().alloc(4096).unwrap();
    lease.fill(1000, 8, 7).unwrap();
    let mut data = stack.session().alloc(4096).unwrap();
    data.write_at(0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
    let (x, o) = (data.view(0, 16).unwrap(), lease.view(64, 16).unwrap());
    let run_add = |lib: &hexrpc_hal::Library<'_, Bench>| {
        stack::launch(lib, &Signature::parse("buf,buf,buf,u32").unwrap(), &[&x, &x, &o], &[Scalar::U32(4)]).expect("add");
        let mut b = [0u8; 16];
        o.read(&mut b).unwrap();
        f32s_of(&b)
    };
    let bsig = Signature::parse("buf,u32").unwrap();
    let bv = lease.view(1000, 8).unwrap();
    // Interleaved calls into both libraries.
    for round in 0..3u8 {
        assert_eq!(run_add(&la), vec![2.0, 4.0, 6.0, 8.0]);
        stack::launch(&lb, &bsig, &[&bv], &[Scalar::U32(8)]).expect("bump");
        let mut b = [0u8; 8];
        bv.read(&mut b).unwrap();
        assert_eq!(b, [8 + round; 8]);
    }
    // Close one: unloaded in the shell, the other still works; then re-open it.
    drop(lb);
    assert_eq!(executor::executors(&bench)[0].stats.libraries, 1);
    assert_eq!(run_add(&la), vec![2.0, 4.0, 6.0, 8.0]);
    let lb = stack.open("bump", bump).unwrap();
    stack::launch(&lb, &bsig, &[&bv], &[Scalar::U32(8)]).expect("bump after re-open");
    let mut b = [0u8; 8];
    bv.read(&mut b).unwrap();
    assert_eq!(b, [11; 8]);
    let ex = executor::executors(&bench);
    assert_eq!(ex[0].stats.libraries, 2, "{ex:?}");
    drop(la);
    drop(lb);
    assert_eq!(bench.snapshot().loaded_libraries, 0);
}

fn tinygrad_layout_loads_and_runs(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("tinygrad");
    let src = entry_and_kernel("buf,buf,u32", "scale", SCALE, &EntryOptions::TINYGRAD);
    let image = build_tinygrad_style(&tc, &dir, "tinylib", &src).expect("tinygrad-style build");
    assert_eq!(LibraryRecord::find(image), Ok(None), "no build record in a library built by others");
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("tinylib", image).expect("open a tinygrad-layout .so");
    let mut input = stack.session().alloc(4096).unwrap();
    let output = stack.session().alloc(4096).unwrap();
    let xs: Vec<f32> = (0..50).map(|i| i as f32 - 25.0).collect();
    input.write_at(0, &f32_bytes(&xs)).unwrap();
    let (a, o) = (input.view(0, 200).unwrap(), output.view(0, 200).unwrap());
    let sig = Signature::parse("buf,buf,u32").unwrap();
    let mut packed = PackedLaunch::new(AbiVersion::V1, &sig, &[BufferRef::of(&a), BufferRef::of(&o)], &[Scalar::U32(50)]).unwrap();
    lib.invoke(&mut packed.invoke_args().unwrap()).expect("v1 launch");
    let mut got = vec![0u8; 200];
    o.read(&mut got).unwrap();
    assert_eq!(f32s_of(&got), xs.iter().map(|x| x * 3.0).collect::<Vec<_>>());
    let types: Vec<u32> = executor::executors(&bench)[0].stats.power_requests.iter().map(|p| p.request_type).collect();
    assert_eq!(types, vec![7], "tinygrad's power request reached HAP_power_set");
}

fn refused(stack: &Stack, name: &str, image: &'static [u8]) -> hexrpc_hal::Refusal {
    match stack.open(name, image) {
        Err(ModelError::Hal(e)) => {
            assert_eq!(e.stage, Stage::LibraryOpen, "{e}");
            match e.cause {
                Cause::Refused(r) => r,
                other => panic!("{name}: {other:?}"),
            }
        }
        Err(e) => panic!("{name}: {e}"),
        Ok(_) => panic!("{name}: opened"),
    }
}

/// Rewrites the first relocation of `.rela.plt` / `.rela.dyn` found through the dynamic
/// section: `patch(offset, info) -> (offset, info)`.
fn patch_first_reloc(image: &[u8], patch: impl Fn(u32, u32) -> (u32, u32)) -> Vec<u8> {
    let mut img = image.to_vec();
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let (phoff, phnum) = (u32_at(&img, 28) as usize, u16::from_le_bytes([img[44], img[45]]) as usize);
    let mut dynamic = None;
    let mut loads = Vec::new();
    for i in 0..phnum {
        let ph = phoff + 32 * i;
        let (kind, off, va, fsz) = (u32_at(&img, ph), u32_at(&img, ph + 4), u32_at(&img, ph + 8), u32_at(&img, ph + 16));
        if kind == 2 {
            dynamic = Some(off as usize);
        }
        if kind == 1 {
            loads.push((va, off, fsz));
        }
    }
    let file_of = |va: u32| loads.iter().find(|(v, _, s)| va >= *v && va < v + s).map(|(v, o, _)| (va - v + o) as usize).unwrap();
    let mut at = dynamic.expect("PT_DYNAMIC");
    let mut table = None;
    loop {
        let (tag, val) = (u32_at(&img, at), u32_at(&img, at + 4));
        if tag == 0 {
            break;
        }
        if tag == 23 || (tag == 7 && table.is_none()) {
            table = Some(val);
        }
        at += 8;
    }
    let r = file_of(table.expect("a relocation table"));
    let (off, info) = patch(u32_at(&img, r), u32_at(&img, r + 4));
    img[r..r + 4].copy_from_slice(&off.to_le_bytes());
    img[r + 4..r + 8].copy_from_slice(&info.to_le_bytes());
    img
}

fn every_refusal_reaches_the_caller_with_its_reason(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("refusals");
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");

    // An import the shell does not export: refused with the symbol's name.
    let src = entry_and_kernel(
        "buf,buf,u32",
        "scale",
        "void frobnicate_the_widget(void *p);\nvoid scale(void *in, void *out, unsigned int n) {\n  (void)in; (void)n;\n  frobnicate_the_widget(out);\n}\n",
        &EntryOptions::V2,
    );
    let image = build_tinygrad_style(&tc, &dir, "unresolved", &src).unwrap();
    let r = refused(&stack, "unresolved", image);
    assert_eq!(r.code(), aee::AEE_ENOSUCHSYMBOL, "{r:?}");
    assert!(r.reason().contains("unresolved symbol frobnicate_the_widget"), "{r:?}");
    let shown = format!("{}", hexrpc_hal::HalError { stage: Stage::LibraryOpen, cause: Cause::Refused(r) });
    assert!(shown.contains("frobnicate_the_widget"), "{shown}");

    // No `entry` in the dynamic symbol table.
    let image = build_tinygrad_style(&tc, &dir, "noentry", SCALE).unwrap();
    let r = refused(&stack, "noentry", image);
    assert_eq!(r.code(), aee::AEE_ENOSUCHSYMBOL);
    assert!(r.reason().contains("`entry` is not defined"), "{r:?}");

    // A relocation out of range, and one of a type the loader does not apply.
    let good = build_tinygrad_style(&tc, &dir, "good", &entry_and_kernel("buf,buf,u32", "scale", SCALE, &EntryOptions::V2)).unwrap();
    let far = leak(patch_first_reloc(good, |_, info| (0x7fff_0000, info)));
    let r = refused(&stack, "far", far);
    assert_eq!(r.code(), aee::AEE_EBADELF);
    assert!(r.reason().contains("relocation out of range: offset 0x7fff0000"), "{r:?}");
    let odd = leak(patch_first_reloc(good, |off, info| (off, (info & !0xff) | 99)));
    let r = refused(&stack, "oddreloc", odd);
    assert!(r.reason().contains("unsupported relocation type 99"), "{r:?}");

    // A bad ELF: a shared object whose program headers point past the end of the file.
    let mut bad = good.to_vec();
    bad[28..32].copy_from_slice(&0x00ff_0000u32.to_le_bytes());
    let r = refused(&stack, "badelf", leak(bad));
    assert!(r.reason().contains("not a Hexagon shared object") || r.reason().contains("program header"), "{r:?}");
    // The shell's own static executable is not a shared object: refused as such.
    let shell = leak(std::fs::read(executor::build_shell(&tc).unwrap()).unwrap());
    let r = refused(&stack, "exe", shell);
    assert!(r.reason().contains("not a Hexagon shared object"), "{r:?}");

    // After all of that, the session is healthy and a good library still loads and runs.
    assert!(stack.session().is_healthy());
    let lib = stack.open("good", good).expect("good one");
    drop(lib);
    assert_eq!(bench.snapshot().loaded_libraries, 0);
}

fn a_loader_fault_is_a_dsp_restart_and_recovery_works(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("fault");
    // A constructor (a DT_INIT_ARRAY entry: clang's Hexagon target puts `constructor` functions
    // in `.ctors`, which no loader without crt code runs) that faults while the shell loads it.
    let boom = entry_and_kernel(
        "buf,buf,u32",
        "scale",
        &format!(
            "{SCALE}static void boom(void) {{ *(volatile int *)0x10 = 1; }}\n\
             __attribute__((section(\".init_array\"), used)) static void (*const boom_ctor)(void) = boom;\n"
        ),
        &EntryOptions::V2,
    );
    let boom = build_tinygrad_style(&tc, &dir, "boom", &boom).unwrap();
    let add = build_suite(&tc, &dir, "add_f32", "buf,buf,buf,u32", EntryOptions::V2);
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let before = stack.open("add", add).expect("a library before the fault");
    let pid_before = executor::executors(&bench)[0].os_pid;
    match stack.open("boom", boom) {
        Err(ModelError::Hal(e)) => assert_eq!(e.cause, Cause::DspRestart, "{e}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(!stack.session().is_healthy());
    stack.session().recover().expect("recover after the loader fault");
    // The library that was open is open again (re-fetched and re-loaded in a new shell).
    let data = stack.session().alloc(4096).unwrap();
    let (x, o) = (data.view(0, 16).unwrap(), data.view(1024, 16).unwrap());
    stack::launch(&before, &Signature::parse("buf,buf,buf,u32").unwrap(), &[&x, &x, &o], &[Scalar::U32(4)]).expect("after recovery");
    let now = executor::executors(&bench);
    assert!(now.iter().all(|e| e.os_pid != pid_before && e.alive), "{now:?}");
    drop(before);
}

const MATH_KERNEL: &str = r#"
float sqrtf(float); float expf(float); float exp2f(float); float logf(float); float log2f(float);
float sinf(float); float cosf(float); float floorf(float); float ceilf(float); float truncf(float);
float roundf(float); float fabsf(float); float fmaxf(float, float); float fminf(float, float);
void mathk(const float *x, float *o, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) {
    const float v = x[i];
    float *r = o + 14 * i;
    r[0] = sqrtf(v); r[1] = expf(v); r[2] = exp2f(v); r[3] = logf(v); r[4] = log2f(v);
    r[5] = sinf(v); r[6] = cosf(v); r[7] = floorf(v); r[8] = ceilf(v); r[9] = truncf(v);
    r[10] = roundf(v); r[11] = fabsf(v); r[12] = fmaxf(v, 0.5f); r[13] = fminf(v, 0.5f);
  }
}
void fsqrt(const float *x, float *o, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) o[i] = __builtin_sqrtf(x[i]);
}
void dops(const double *a, const double *b, double *o, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) {
    o[4 * i] = a[i] + b[i]; o[4 * i + 1] = a[i] - b[i]; o[4 * i + 2] = a[i] * b[i]; o[4 * i + 3] = a[i] / b[i];
  }
}
void divk(const int *a, const int *b, int *o32, long long *o64, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) {
    const int x = a[i], y = b[i];
    const unsigned int ux = (unsigned int)x, uy = (unsigned int)y;
    o32[4 * i] = x / y; o32[4 * i + 1] = x % y; o32[4 * i + 2] = (int)(ux / uy); o32[4 * i + 3] = (int)(ux % uy);
    const long long lx = (long long)x * 1000003LL, ly = (long long)y;
    const unsigned long long ulx = (unsigned long long)lx, uly = (unsigned long long)ly;
    o64[4 * i] = lx / ly; o64[4 * i + 1] = lx % ly; o64[4 * i + 2] = (long long)(ulx / uly); o64[4 * i + 3] = (long long)(ulx % uly);
  }
}
"#;

fn ulps(got: f32, want: f64) -> u32 {
    let w = want as f32;
    if got.is_nan() || w.is_nan() {
        return if got.is_nan() && w.is_nan() { 0 } else { u32::MAX };
    }
    if got == w {
        return 0;
    }
    let key = |f: f32| {
        let b = f.to_bits() as i64;
        if b < 0x8000_0000 {
            b
        } else {
            0x8000_0000 - b
        }
    };
    (key(got) - key(w)).unsigned_abs().min(u32::MAX as u64) as u32
}

/// The shell's exports work as stated in hrx_libc.c: libm accuracy against f64, integer helpers
/// exactly as C division.
fn shell_libm_and_division_helpers_meet_their_stated_bounds(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("libm");
    let src = dir.join("mathk.c");
    std::fs::write(&src, MATH_KERNEL).unwrap();
    let build_with = |kernel: &str, sig: &str, flag: &str| -> &'static [u8] {
        let out = dir.join(format!("{kernel}.so"));
        let opts = BuildOptions {
            kernel_name: Some(kernel.into()),
            clang: tc.clang.clone(),
            lld: tc.lld.clone(),
            kernel_cflags: vec![flag.into()],
            ..BuildOptions::default()
        };
        build_library(&src, &Signature::parse(sig).unwrap(), &out, &opts).expect("build-lib");
        leak(std::fs::read(&out).unwrap())
    };
    let build = |kernel: &str, sig: &str| build_with(kernel, sig, "-ffp-contract=off");
    let mathk = build("mathk", "buf,buf,u32");
    let divk = build("divk", "buf,buf,buf,buf,u32");
    // Under -ffast-math clang calls __hexagon_sqrtf instead of sqrtf.
    let fsqrt = build_with("fsqrt", "buf,buf,u32", "-ffast-math");
    let fsqrt_imports = hexrpc_libbuild::parse_elf(fsqrt).unwrap().imports;
    assert!(fsqrt_imports.iter().any(|i| i == "__hexagon_sqrtf"), "{fsqrt_imports:?}");
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");

    // Floats: a sweep plus special values.
    let mut rng = hexrpc_bench::executor::reference::Rng(11);
    let mut xs: Vec<f32> =
        vec![0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-40, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 88.0, -100.0];
    xs.extend((0..600).map(|i| (i as f32 - 300.0) * 0.37));
    xs.extend((0..300).map(|_| rng.f32(8192.0)));
    xs.extend((0..100).map(|_| rng.f32(1e30).abs()));
    let n = xs.len();
    let lib = stack.open("mathk", mathk).unwrap();
    let mut input = stack.session().alloc(4 * n).unwrap();
    input.write_at(0, &f32_bytes(&xs)).unwrap();
    let output = stack.session().alloc(4 * 14 * n).unwrap();
    let (vi, vo) = (input.view(0, 4 * n).unwrap(), output.view(0, 4 * 14 * n).unwrap());
    stack::launch(&lib, &Signature::parse("buf,buf,u32").unwrap(), &[&vi, &vo], &[Scalar::U32(n as u32)]).expect("mathk");
    let mut raw = vec![0u8; 4 * 14 * n];
    vo.read(&mut raw).unwrap();
    let got = f32s_of(&raw);
    let mut worst = [0u32; 14];
    let names =
        ["sqrtf", "expf", "exp2f", "logf", "log2f", "sinf", "cosf", "floorf", "ceilf", "truncf", "roundf", "fabsf", "fmaxf", "fminf"];
    for (i, &x) in xs.iter().enumerate() {
        let d = x as f64;
        let want = [
            d.sqrt(),
            d.exp(),
            d.exp2(),
            d.ln(),
            d.log2(),
            d.sin(),
            d.cos(),
            d.floor(),
            d.ceil(),
            d.trunc(),
            d.round(),
            d.abs(),
            if x.is_nan() { 0.5 } else { d.max(0.5) },
            if x.is_nan() { 0.5 } else { d.min(0.5) },
        ];
        for k in 0..14 {
            let g = got[14 * i + k];
            // Results that are subnormal or zero in f32 are compared absolutely (ulps there say little).
            let e = if (5..7).contains(&k) && x.abs() > 8192.0 { 0 } else { ulps(g, want[k]) };
            let e = if (want[k] as f32).abs() < f32::MIN_POSITIVE && (g as f64 - want[k]).abs() < 1e-38 { 0 } else { e };
            // sin/cos near their zeros: the stated bound is absolute there (see hrx_libc.c).
            let e =
                if (5..7).contains(&k) && want[k].abs() < 1e-3 && (g as f64 - want[k]).abs() <= 4.0 * f32::EPSILON as f64 { 0 } else { e };
            worst[k] = worst[k].max(e);
            if e > 4 {
                panic!("{}({x:e}) = {g:e}, want {:e} ({e} ulp)", names[k], want[k]);
            }
        }
        if d.sqrt().is_nan() {
            assert!(got[14 * i].is_nan(), "sqrtf({x:e})");
        } else {
            assert_eq!(got[14 * i].to_bits(), (d.sqrt() as f32).to_bits(), "sqrtf({x:e}) is correctly rounded");
        }
    }
    println!("max ulp per function over {n} inputs: {:?}", names.iter().zip(worst).collect::<Vec<_>>());
    for k in 7..14 {
        assert_eq!(worst[k], 0, "{} is exact", names[k]);
    }

    let lib = stack.open("fsqrt", fsqrt).unwrap();
    let positive: Vec<f32> = (0..64).map(|i| i as f32 * 1.7 + 0.25).collect();
    let mut pin = stack.session().alloc(4096).unwrap();
    pin.write_at(0, &f32_bytes(&positive)).unwrap();
    let pout = stack.session().alloc(4096).unwrap();
    let (pi, po) = (pin.view(0, 256).unwrap(), pout.view(0, 256).unwrap());
    stack::launch(&lib, &Signature::parse("buf,buf,u32").unwrap(), &[&pi, &po], &[Scalar::U32(64)]).expect("fsqrt");
    let mut raw = vec![0u8; 256];
    po.read(&mut raw).unwrap();
    assert_eq!(f32s_of(&raw), positive.iter().map(|x| x.sqrt()).collect::<Vec<_>>());

    // Double arithmetic helpers, bit for bit against the host's f64.
    let dops = build("dops", "buf,buf,buf,u32");
    let dimports = hexrpc_libbuild::parse_elf(dops).unwrap().imports;
    for h in ["__hexagon_adddf3", "__hexagon_subdf3", "__hexagon_muldf3", "__hexagon_divdf3"] {
        assert!(dimports.iter().any(|i| i == h), "{h} in {dimports:?}");
    }
    let specials = [
        0.0f64,
        -0.0,
        1.0,
        -1.0,
        0.5,
        3.0,
        f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        2.2e-308,
        f64::MAX,
        -f64::MAX,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e308,
        1e-300,
        0.1,
        1.0 / 3.0,
    ];
    let mut da: Vec<f64> = Vec::new();
    let mut db: Vec<f64> = Vec::new();
    for &x in &specials {
        for &y in &specials {
            da.push(x);
            db.push(y);
        }
    }
    let mut bits64 = || (rng.next_u32() as u64) << 32 | rng.next_u32() as u64;
    for k in 0..1500 {
        let (x, y) = match k % 3 {
            0 => (f64::from_bits(bits64()), f64::from_bits(bits64())),
            // Close magnitudes (cancellation) and subnormal ranges.
            1 => {
                let x = f64::from_bits(bits64() >> 2);
                (x, -x * (1.0 + f64::from_bits(0x3cb0_0000_0000_0000) * (k % 7) as f64))
            }
            _ => (f64::from_bits(bits64() & 0x001f_ffff_ffff_ffff), f64::from_bits(bits64() & 0x802f_ffff_ffff_ffff)),
        };
        da.push(x);
        db.push(y);
    }
    let dn = da.len();
    let lib = stack.open("dops", dops).unwrap();
    let mut dins = stack.session().alloc(16 * dn).unwrap();
    dins.write_at(0, &da.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    dins.write_at(8 * dn, &db.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let douts = stack.session().alloc(32 * dn).unwrap();
    let (dva, dvb, dvo) = (dins.view(0, 8 * dn).unwrap(), dins.view(8 * dn, 8 * dn).unwrap(), douts.view(0, 32 * dn).unwrap());
    stack::launch(&lib, &Signature::parse("buf,buf,buf,u32").unwrap(), &[&dva, &dvb, &dvo], &[Scalar::U32(dn as u32)]).expect("dops");
    let mut draw = vec![0u8; 32 * dn];
    dvo.read(&mut draw).unwrap();
    for i in 0..dn {
        let (x, y) = (da[i], db[i]);
        let got = |k: usize| f64::from_le_bytes(draw[32 * i + 8 * k..32 * i + 8 * k + 8].try_into().unwrap());
        for (k, (op, want)) in [("+", x + y), ("-", x - y), ("*", x * y), ("/", x / y)].into_iter().enumerate() {
            let g = got(k);
            assert!(
                if want.is_nan() { g.is_nan() } else { g.to_bits() == want.to_bits() },
                "{x:e} {op} {y:e} = {g:e} ({:#018x}), want {want:e} ({:#018x})",
                g.to_bits(),
                want.to_bits()
            );
        }
    }
    println!("double helpers: {} operand pairs x 4 operations bit-exact", dn);

    // Integer division helpers, 32 and 64 bits, signed and unsigned.
    let m = 500usize;
    let a: Vec<i32> = (0..m).map(|i| if i < 4 { [i32::MAX, i32::MIN + 1, -7, 7][i] } else { rng.next_u32() as i32 }).collect();
    let b: Vec<i32> = (0..m)
        .map(|i| if i < 4 { [3, -2, 2, -2][i] } else { (rng.next_u32() as i32 >> (i % 31)).max(1) * if i % 2 == 0 { 1 } else { -1 } })
        .collect();
    let lib = stack.open("divk", divk).unwrap();
    let mut ins = stack.session().alloc(8 * m).unwrap();
    ins.write_at(0, &a.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    ins.write_at(4 * m, &b.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let outs = stack.session().alloc(16 * m + 32 * m).unwrap();
    let (va, vb) = (ins.view(0, 4 * m).unwrap(), ins.view(4 * m, 4 * m).unwrap());
    let (v32, v64) = (outs.view(0, 16 * m).unwrap(), outs.view(16 * m, 32 * m).unwrap());
    stack::launch(&lib, &Signature::parse("buf,buf,buf,buf,u32").unwrap(), &[&va, &vb, &v32, &v64], &[Scalar::U32(m as u32)])
        .expect("divk");
    let mut r32 = vec![0u8; 16 * m];
    v32.read(&mut r32).unwrap();
    let mut r64 = vec![0u8; 32 * m];
    v64.read(&mut r64).unwrap();
    for i in 0..m {
        let (x, y) = (a[i], b[i]);
        let w32 = |k: usize| i32::from_le_bytes(r32[16 * i + 4 * k..16 * i + 4 * k + 4].try_into().unwrap());
        assert_eq!(
            [w32(0), w32(1), w32(2), w32(3)],
            [x / y, x % y, ((x as u32) / (y as u32)) as i32, ((x as u32) % (y as u32)) as i32],
            "{x} {y}"
        );
        let (lx, ly) = (x as i64 * 1_000_003, y as i64);
        let w64 = |k: usize| i64::from_le_bytes(r64[32 * i + 8 * k..32 * i + 8 * k + 8].try_into().unwrap());
        assert_eq!(
            [w64(0), w64(1), w64(2), w64(3)],
            [lx / ly, lx % ly, ((lx as u64) / (ly as u64)) as i64, ((lx as u64) % (ly as u64)) as i64],
            "{lx} {ly}"
        );
    }
}

/// PT_LOAD segments are protected: a kernel that writes into its own read-only data (a 64 KiB
/// page holding nothing but `.rodata`) faults, which is a DSP restart; reading it works.
fn read_only_segments_are_protected(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("protect");
    let src = dir.join("scribble.c");
    std::fs::write(
        &src,
        "static const unsigned char table[200000] = {[70000] = 42};\n\
         void scribble(unsigned char *out, unsigned int mode) {\n\
           if (mode == 0) out[0] = ((const volatile unsigned char *)table)[70000];\n\
           else ((volatile unsigned char *)table)[70000] = 1;\n\
         }\n",
    )
    .unwrap();
    let out = dir.join("scribble.so");
    let opts = BuildOptions { clang: tc.clang.clone(), lld: tc.lld.clone(), ..BuildOptions::default() };
    build_library(&src, &Signature::parse("buf,u32").unwrap(), &out, &opts).expect("build-lib");
    let image = leak(std::fs::read(&out).unwrap());
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("scribble", image).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let v = lease.view(0, 1).unwrap();
    let sig = Signature::parse("buf,u32").unwrap();
    stack::launch(&lib, &sig, &[&v], &[Scalar::U32(0)]).expect("read");
    let mut b = [0u8; 1];
    v.read(&mut b).unwrap();
    assert_eq!(b, [42]);
    match stack::launch(&lib, &sig, &[&v], &[Scalar::U32(1)]) {
        Err(ModelError::Hal(e)) => assert_eq!(e.cause, Cause::DspRestart, "{e}"),
        other => panic!("a write into .rodata must fault: {other:?}"),
    }
    stack.session().recover().expect("recover");
    stack::launch(&lib, &sig, &[&v], &[Scalar::U32(0)]).expect("read after recovery");
}

/// A constructor that never returns is bounded by the executor timeout: the shell is killed, the
/// DSP restarts, and recovery works.
fn a_hanging_constructor_is_bounded(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work("hang");
    let src = entry_and_kernel(
        "buf,buf,u32",
        "scale",
        &format!(
            "{SCALE}static void spin(void) {{ for (volatile int i = 0; ; i++) {{ }} }}\n\
             __attribute__((section(\".init_array\"), used)) static void (*const spin_ctor)(void) = spin;\n"
        ),
        &EntryOptions::V2,
    );
    let spin = build_tinygrad_style(&tc, &dir, "spin", &src).unwrap();
    let good = build_tinygrad_style(&tc, &dir, "good", &entry_and_kernel("buf,buf,u32", "scale", SCALE, &EntryOptions::V2)).unwrap();
    let bench = Bench::with_config(hexrpc_bench::BenchConfig {
        executor_timeout: std::time::Duration::from_millis(1500),
        ..hexrpc_bench::BenchConfig::for_board(board)
    });
    let stack = Stack::start(bench.clone()).expect("stack");
    executor::build_shell(&tc).unwrap();
    let t0 = Instant::now();
    match stack.open("spin", spin) {
        Err(ModelError::Hal(e)) => assert_eq!(e.cause, Cause::DspRestart, "{e}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    let took = t0.elapsed();
    assert!(took >= std::time::Duration::from_millis(1400) && took < std::time::Duration::from_secs(10), "{took:?}");
    stack.session().recover().expect("recover");
    drop(stack.open("good", good).expect("a good library after the hang"));
}

/// Kernel code that makes Hexagon Linux-user system calls itself (`trap0`).
const TRAP0: &str = hexrpc_scenarios::suite::TRAP0_SYSCALL_C;

fn build_trap0_library(tc: &Toolchain, dir: &Path, name: &str, body: &str) -> &'static [u8] {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, format!("{TRAP0}{body}")).unwrap();
    let out = dir.join(format!("{name}.so"));
    let opts = BuildOptions { clang: tc.clang.clone(), lld: tc.lld.clone(), ..BuildOptions::default() };
    build_library(&src, &Signature::parse("buf,u32").unwrap(), &out, &opts).expect("build-lib");
    leak(std::fs::read(&out).unwrap())
}

/// The executor is a sandbox: a library that opens host files for writing through qemu-hexagon's
/// system calls gets errors (Landlock), one that unlinks them is stopped by the system-call
/// filter (`unlinkat` is not on its list: the shell is killed, a DSP restart), and nothing on
/// the host changes.
fn a_library_cannot_touch_host_files_through_the_emulator(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work(&format!("escape-{}", board.name));
    // mode 0: openat(AT_FDCWD, path, O_WRONLY|O_CREAT|O_TRUNC, 0644) + write; mode 1: unlinkat.
    let image = build_trap0_library(
        &tc,
        &dir,
        "escape",
        "void escape(unsigned char *io, unsigned int mode) {\n\
           const char *path = (const char *)io;\n\
           long *res = (long *)(io + 512);\n\
           if (mode == 0) {\n\
             long fd = sys(56, -100, (long)path, 01 | 0100 | 01000, 0644);\n\
             res[0] = fd;\n\
             res[1] = fd >= 0 ? sys(64, fd, (long)\"escaped\", 7, 0) : 0;\n\
             if (fd >= 0) sys(57, fd, 0, 0, 0);\n\
           } else {\n\
             res[0] = sys(35, -100, (long)path, 0, 0);\n\
           }\n\
         }\n",
    );
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("escape", image).unwrap();
    let mut lease = stack.session().alloc(4096).unwrap();
    let sig = Signature::parse("buf,u32").unwrap();
    let mut run = |path: &Path, mode: u32| -> Option<i32> {
        let mut buf = vec![0u8; 1024];
        let p = path.to_str().unwrap().as_bytes();
        buf[..p.len()].copy_from_slice(p);
        lease.write_at(0, &buf).unwrap();
        let v = lease.view(0, 1024).unwrap();
        match stack::launch(&lib, &sig, &[&v], &[Scalar::U32(mode)]) {
            Ok(_) => {
                v.read(&mut buf).unwrap();
                Some(i32::from_le_bytes(buf[512..516].try_into().unwrap()))
            }
            Err(ModelError::Hal(e)) if e.cause == Cause::DspRestart => {
                stack.session().recover().expect("recover");
                None
            }
            Err(e) => panic!("mode {mode}: {e:?}"),
        }
    };
    let created = dir.join("created-by-the-dsp");
    let rc = run(&created, 0).expect("openat is on the filter's list: the launch completes");
    assert!(rc < 0, "openat for writing must be refused, got fd {rc}");
    assert!(!created.exists(), "the library created {}", created.display());
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    assert_eq!(run(&victim, 1), None, "unlinkat must kill the shell (the filter), not return");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep", "the library removed or changed {}", victim.display());
    let rc = run(&victim, 0).expect("the launch completes after the recovery");
    assert!(rc < 0, "truncating an existing file must be refused, got fd {rc}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A library that writes a well-formed answer header to the shell's stdout (fd 1) cannot pass it
/// off as the shell's answer: its tag is wrong, so the bench treats the stream as broken and the
/// DSP restarts; the caller gets an error, not made-up outputs.
fn a_forged_answer_header_is_a_dsp_restart(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let dir = work(&format!("forge-{}", board.name));
    let (rsp, lod) = (executor::wire::RSP_MAGIC, executor::wire::LOD_MAGIC);
    let image = build_trap0_library(
        &tc,
        &dir,
        "forge",
        &format!(
            "void forge(unsigned char *io, unsigned int mode) {{\n\
               io[0] = 1;\n\
               if (mode == 0) return;\n\
               /* an invoke answer (any tag), then a load answer: both as the shell would frame them */\n\
               static const unsigned int fake[7] = {{{rsp}u, 0x5eed5eedu, 0, 0, 0, 0, 0}};\n\
               static const unsigned int fake2[5] = {{{lod}u, 0u, 0, 0, 0}};\n\
               sys(64, 1, (long)(mode == 1 ? fake : fake2), mode == 1 ? sizeof fake : sizeof fake2, 0);\n\
             }}\n"
        ),
    );
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("forge", image).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let v = lease.view(0, 16).unwrap();
    let sig = Signature::parse("buf,u32").unwrap();
    stack::launch(&lib, &sig, &[&v], &[Scalar::U32(0)]).expect("an honest launch");
    for mode in [1u32, 2] {
        match stack::launch(&lib, &sig, &[&v], &[Scalar::U32(mode)]) {
            Err(ModelError::Hal(e)) => assert_eq!(e.cause, Cause::DspRestart, "mode {mode}: {e}"),
            other => panic!("mode {mode}: a forged answer must be a DSP restart, got {other:?}"),
        }
        assert!(!stack.session().is_healthy());
        stack.session().recover().expect("recover");
        stack::launch(&lib, &sig, &[&v], &[Scalar::U32(0)]).expect("an honest launch after recovery");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
