//! Every DSP restart the bench makes carries its reason (`Bench::last_restart`), through the
//! whole stack: a kernel past the per-call limit (set as `HEXRPC_BENCH_CALL_LIMIT_MS` would set
//! it), a faulting kernel, a faulting constructor, a requested restart and a bench model that
//! restarts the DSP. The caller sees a DSP restart each time; the bench says why.
//!
//! The executor tests print `SKIPPED: <reason>` and return when the tools are missing or cannot
//! run from this process (an aarch64 test binary under qemu-aarch64).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hexrpc_bench::executor::{Flavour, ShellEnd, ShellStatus, Toolchain};
use hexrpc_bench::{Bench, BenchConfig, EntryVersion, LibraryModel, RestartKind, RestartReason, ShellFault, ShellStep};
use hexrpc_bsp::Board;
use hexrpc_hal::Cause;
use hexrpc_libbuild::{build_library, BuildOptions};
use hexrpc_runtime::launch::{write_entry, EntryOptions, Scalar, Signature};
use hexrpc_scenarios::suite::build_image;
use hexrpc_scenarios::{stack, ModelError, Stack};

/// Linux's SIGSEGV.
const SIGSEGV: i32 = 11;

hexrpc_bench::on_both_kernels!(
    a_kernel_past_the_call_limit_names_the_limit,
    a_faulting_kernel_names_the_signal_and_the_output,
    a_faulting_constructor_is_a_load_failure,
    requested_and_model_restarts_are_told_apart
);

fn tools() -> Option<Toolchain> {
    hexrpc_scenarios::suite::tools_or_skip()
}

fn restarted<T>(r: Result<T, ModelError>) {
    match r {
        Err(ModelError::Hal(e)) => assert_eq!(e.cause, Cause::DspRestart, "{e}"),
        Err(e) => panic!("expected a DSP restart, got {e}"),
        Ok(_) => panic!("expected a DSP restart, the call succeeded"),
    }
}

/// `hexrpc build-lib` of `source` (one kernel `kernel`, signature `buf,u32`) into a leaked image.
fn build(tc: &Toolchain, name: &str, kernel: &str, source: &str) -> &'static [u8] {
    let dir = std::env::temp_dir().join(format!("hexrpc-restart-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src: PathBuf = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(format!("lib{name}.so"));
    let opts = BuildOptions {
        entry: EntryOptions::V2,
        kernel_name: Some(kernel.into()),
        clang: tc.clang.clone(),
        lld: tc.lld.clone(),
        ..BuildOptions::default()
    };
    let built = build_library(&src, &Signature::parse("buf,u32").unwrap(), Path::new(&out), &opts);
    let image = std::fs::read(&out);
    let _ = std::fs::remove_dir_all(&dir);
    built.expect("build-lib");
    let image = image.unwrap();
    Box::leak(image.into_boxed_slice())
}

/// `clang -shared` of `source` (an entry and its kernel) with every section at a 4 KiB boundary,
/// as tinygrad's `DSPCompiler` links a library.
fn build_shared(tc: &Toolchain, name: &str, source: &str) -> &'static [u8] {
    let dir = std::env::temp_dir().join(format!("hexrpc-restart-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut script = String::from("SECTIONS {\n  . = 0x0;\n");
    for s in ["text", "rela.plt", "rela.dyn", "plt", "data", "bss", "hash", "dynamic", "got", "got.plt", "dynsym", "dynstr"] {
        script.push_str(&format!("  .{s} : ALIGN(4096) {{ *(.{s}) }}\n"));
    }
    script.push_str("  /DISCARD/ : { *(.note .note.* .gnu.hash .comment) }\n}\n");
    std::fs::write(dir.join("lib.ld"), script).unwrap();
    std::fs::write(dir.join("lib.c"), source).unwrap();
    // clang's -fuse-ld=lld looks for `ld.lld`: give it ld.lld-19 under that name.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&tc.lld, bin.join("ld.lld")).unwrap();
    let mut path = std::ffi::OsString::from(&bin);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let o = Command::new(&tc.clang)
        .args(["-shared", "--target=hexagon", "-mcpu=hexagonv65", "-fuse-ld=lld", "-nostdlib", "-Tlib.ld"])
        .args(["-O2", "-fno-stack-protector", "-fPIC", "-ffreestanding", "lib.c", "-o", "lib.so"])
        .current_dir(&dir)
        .env("PATH", path)
        .output()
        .expect("clang");
    let image = std::fs::read(dir.join("lib.so"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let image = image.unwrap();
    Box::leak(image.into_boxed_slice())
}

fn a_kernel_past_the_call_limit_names_the_limit(board: &'static Board) {
    let Some(tc) = tools() else { return };
    // The limit as the environment variable sets it.
    let cfg = BenchConfig::for_board(board).with_call_limit_var(Some(OsStr::new("700"))).expect("700 ms is a limit");
    assert_eq!(cfg.executor_timeout, Duration::from_millis(700));
    let bench = Bench::with_config(cfg);
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf,u32").unwrap();
    let spin = stack.open("spin", build_image(&tc, "spin_u32", "buf,u32", EntryOptions::V2, Flavour::Scalar).unwrap()).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let out = lease.view(0, 4).unwrap();
    stack::launch(&spin, &sig, &[&out], &[Scalar::U32(100)]).expect("a short spin is within the limit");
    assert_eq!((bench.restart_count(), bench.last_restart()), (0, None));

    // spin_u32(0) never returns: the shell is killed at the limit.
    let t0 = Instant::now();
    restarted(stack::launch(&spin, &sig, &[&out], &[Scalar::U32(0)]));
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(650) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(bench.restart_count(), 1);
    let reason = bench.last_restart().expect("a reason");
    let RestartReason::CallLimit { limit, ref library, step } = reason else { panic!("{reason:?}") };
    assert_eq!((limit, step), (Duration::from_millis(700), ShellStep::Invoke));
    assert!(library.starts_with("spin-"), "{library}");
    let text = reason.to_string();
    assert!(text.contains("per-call limit of 700 ms (HEXRPC_BENCH_CALL_LIMIT_MS)") && text.contains(library.as_str()), "{text}");
    assert_eq!(reason.kind(), RestartKind::CallLimit);

    // Recovery reopens the library; nothing more restarts.
    stack.session().recover().expect("recover");
    stack::launch(&spin, &sig, &[&out], &[Scalar::U32(5)]).expect("after recovery");
    assert_eq!(bench.restart_count(), 1);
}

fn a_faulting_kernel_names_the_signal_and_the_output(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let image = build(
        &tc,
        "poke",
        "poke",
        "void poke(unsigned int *o, unsigned int n) {\n  if (n == 7u) *(volatile unsigned int *)0x10 = n;\n  o[0] = n;\n}\n",
    );
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf,u32").unwrap();
    let poke = stack.open("poke", image).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let out = lease.view(0, 4).unwrap();
    stack::launch(&poke, &sig, &[&out], &[Scalar::U32(1)]).expect("no fault");
    restarted(stack::launch(&poke, &sig, &[&out], &[Scalar::U32(7)]));
    assert_eq!(bench.restart_count(), 1);
    let reason = bench.last_restart().expect("a reason");
    let RestartReason::Fault { ref library, step: ShellStep::Invoke, fault: ShellFault::Ended(ShellEnd { ref status, ref last_output }) } =
        reason
    else {
        panic!("{reason:?}")
    };
    assert!(library.starts_with("poke-"), "{library}");
    // qemu-hexagon re-raises the guest's fault on itself (it prints nothing about it when no
    // core is dumped, and the bench turns core dumps off).
    assert_eq!(*status, ShellStatus::Signal(SIGSEGV), "{reason}");
    assert!(last_output.len() <= hexrpc_bench::executor::LAST_OUTPUT, "{last_output:?}");
    let text = reason.to_string();
    assert!(text.contains("faulted") && text.contains("SIGSEGV"), "{text}");
    stack.session().recover().expect("recover");
    stack::launch(&poke, &sig, &[&out], &[Scalar::U32(2)]).expect("after recovery");
}

fn a_faulting_constructor_is_a_load_failure(board: &'static Board) {
    let Some(tc) = tools() else { return };
    // A constructor (a DT_INIT_ARRAY entry) that faults while the shell loads the library;
    // `hexrpc build-lib` lays out no `.init_array`, so the library is linked as tinygrad links
    // its own (`clang -shared`, 4 KiB-aligned sections).
    let mut source = String::new();
    write_entry(&mut source, &Signature::parse("buf,u32").unwrap(), "boom", &EntryOptions::V2).unwrap();
    source.push_str(
        "\nvoid boom(void *o, unsigned int n) { *(unsigned int *)o = n; }\n\
         static void crash(void) { *(volatile int *)0x10 = 1; }\n\
         __attribute__((section(\".init_array\"), used)) static void (*const crash_ctor)(void) = crash;\n",
    );
    let image = build_shared(&tc, "boom", &source);
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    restarted(stack.open("boom", image));
    let reason = bench.last_restart().expect("a reason");
    let RestartReason::LoadFailure { ref library, fault: ShellFault::Ended(ref end) } = reason else { panic!("{reason:?}") };
    assert!(library.starts_with("boom-"), "{library}");
    assert_eq!(end.status, ShellStatus::Signal(SIGSEGV), "{reason}");
    assert!(reason.to_string().starts_with(&format!("loading library `{library}` failed: the DSP shell (qemu-hexagon) ended with")));
    assert_eq!(bench.restart_count(), 1);
}

fn requested_and_model_restarts_are_told_apart(board: &'static Board) {
    let bench = Bench::for_board(board);
    bench.register_library(
        "crash_model",
        LibraryModel::new(EntryVersion::V2, 1, 0, |k| {
            k.restart_dsp();
        }),
    );
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("crash_model", Box::leak(hexrpc_bench::elf::library_image("crash_model", 4096).into_boxed_slice())).expect("open");
    let lease = stack.session().alloc(4096).unwrap();
    let v = lease.view(0, 16).unwrap();
    let sig = Signature::parse("buf").unwrap();
    restarted(stack::launch(&lib, &sig, &[&v], &[]));
    assert_eq!(bench.restart_count(), 1);
    let reason = bench.last_restart().expect("a reason");
    assert_eq!(reason.kind(), RestartKind::ModelKernel, "{reason:?}");
    assert!(reason.library().is_some_and(|l| l.starts_with("crash_model-")), "{reason:?}");
    assert!(reason.to_string().contains("restarted the DSP"), "{reason}");
    stack.session().recover().expect("recover after the model's restart");

    bench.restart_dsp();
    assert_eq!((bench.restart_count(), bench.last_restart()), (2, Some(RestartReason::Requested)));
    assert_eq!(RestartReason::Requested.to_string(), "a DSP restart was requested (Bench::restart_dsp)");
}
