//! The generated entry's stack on the DSP: a Hexagon thread's stack is small, so nothing the
//! batch capacities size (records, record bytes, kernels in the table) may live on it. The entry
//! of a full kernel table (MAX_BATCH_KERNELS kernels, with and without the map cache) is
//! compiled for Hexagon with clang-19 and `hexrpc build-lib`'s code-generation flags plus
//! `-fstack-usage`; every function's frame must be static (no variable-length array, no
//! `alloca`) and small, and the largest must not grow with the table.
//!
//! Skips (with a message) when clang-19 cannot compile for Hexagon here.

use std::path::PathBuf;
use std::process::Command;

use hexrpc_runtime::launch::{write_batch_entry, EntryOptions, KernelSpec, Signature, MAX_BATCH_KERNELS, MAX_BUFFERS};

/// Largest frame any function of the entry may have, in bytes: the per-lease arrays (six of
/// 15 words), the release's 64 ids and the saved registers fit with room to spare.
const FRAME_LIMIT: u64 = 1024;

/// `hexrpc build-lib`'s code-generation flags for the entry (docs/entry-abi.md §4), without the
/// include paths: the generated entry includes nothing.
const CFLAGS: &[&str] = &[
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
    "-Wall",
    "-Werror",
    "-fstack-usage",
];

fn clang() -> Option<String> {
    let cc = std::env::var("HEXRPC_CLANG").unwrap_or_else(|_| "clang-19".into());
    match Command::new(&cc).arg("--version").output() {
        Ok(o) if o.status.success() => Some(cc),
        _ => {
            eprintln!("SKIPPED: no `{cc}` (set HEXRPC_CLANG); the entry's Hexagon stack frames were not measured");
            None
        }
    }
}

/// Compiles the batch entry of `kernels` for Hexagon and returns `(function, frame bytes,
/// qualifier)` from the `.su` file.
fn frames(cc: &str, name: &str, kernels: &[KernelSpec<'_>], opts: &EntryOptions) -> Vec<(String, u64, String)> {
    let dir: PathBuf = [env!("CARGO_TARGET_TMPDIR"), "launch-dsp-stack", name].iter().collect();
    std::fs::create_dir_all(&dir).unwrap();
    let mut entry = String::new();
    write_batch_entry(&mut entry, kernels, opts).unwrap();
    let (c, o) = (dir.join("entry.c"), dir.join("entry.o"));
    std::fs::write(&c, entry).unwrap();
    let out = Command::new(cc).args(CFLAGS).arg("-c").arg(&c).arg("-o").arg(&o).output().unwrap();
    assert!(out.status.success(), "{cc} failed on {}:\n{}", c.display(), String::from_utf8_lossy(&out.stderr));
    let su = std::fs::read_to_string(dir.join("entry.su")).unwrap();
    su.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "stack-usage line {l:?}");
            let func = f[0].rsplit(':').next().unwrap_or(f[0]).to_string();
            (func, f[1].parse().unwrap(), f[2].to_string())
        })
        .collect()
}

fn table(n: usize, names: &[String]) -> Vec<KernelSpec<'_>> {
    // Signatures from 0 to 15 buffers with a few scalars: every record shape the entry handles.
    let sig = |i: usize| {
        let mut s: Vec<&str> = vec!["buf"; i % (MAX_BUFFERS + 1)];
        s.extend(["u32", "f32", "i64"].iter().take(i % 4));
        Signature::parse(&s.join(",")).unwrap()
    };
    names[..n].iter().enumerate().map(|(i, name)| KernelSpec { name, signature: sig(i), returns_status: i % 5 == 1 }).collect()
}

#[test]
fn the_entry_of_a_full_kernel_table_keeps_a_small_static_frame_on_hexagon() {
    let Some(cc) = clang() else { return };
    let names: Vec<String> = (0..MAX_BATCH_KERNELS).map(|i| format!("k{i}")).collect();
    for (label, opts) in [("plain", EntryOptions::V2), ("cached", EntryOptions::V2_CACHED)] {
        let full = frames(&cc, &format!("full-{label}"), &table(MAX_BATCH_KERNELS, &names), &opts);
        // The first 16 kernels already have every signature the full table has (they repeat).
        let small = frames(&cc, &format!("small-{label}"), &table(16, &names), &opts);
        for (func, bytes, kind) in &full {
            assert_eq!(kind, "static", "{label}: {func} has a {kind} frame");
            assert!(*bytes <= FRAME_LIMIT, "{label}: {func} uses {bytes} bytes of DSP stack (limit {FRAME_LIMIT})");
            eprintln!("{label}: {func} {bytes} bytes");
        }
        // `hrx_batch` (called once) is inlined into `entry`; the dispatcher stays a function.
        for func in ["entry", "hrx_call"] {
            assert!(full.iter().any(|(n, _, _)| n == func), "{label}: no {func} in {full:?}");
        }
        // The table's size reaches no frame: the largest with MAX_BATCH_KERNELS kernels is the
        // largest with the 16 that have the same signatures.
        let max = |f: &[(String, u64, String)]| f.iter().map(|x| x.1).max().unwrap_or(0);
        assert_eq!(max(&full), max(&small), "{label}: {full:?} vs {small:?}");
    }
}
