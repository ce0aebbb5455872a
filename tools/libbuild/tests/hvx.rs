//! HVX code generation: a kernel's loops are vectorised for HVX (`-mllvm -hexagon-autohvx=true`,
//! seen in the kernel object's instructions) and compute what the host computes on the bench's
//! executor; a kernel clang-19 cannot compile with HVX is compiled without it, named with
//! clang's reason and counted in the build record, or refused with `HvxPolicy::Require`.
//!
//! Skips (with a message) when clang-19, ld.lld-19 or qemu-hexagon are missing.

mod support;

use std::path::{Path, PathBuf};

use hexrpc_bench::Bench;
use hexrpc_bsp::DeviceAccess;
use hexrpc_libbuild::{
    build_library, build_library_with, build_table_library_with, BuildError, BuildOptions, HvxPolicy, TableSource, WithoutHvx,
};
use hexrpc_runtime::launch::{LibraryRecord, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

fn work_dir(name: &str) -> PathBuf {
    support::work_dir("hvx", name)
}

/// The words of an ELF32 relocatable object's `.text*` sections (`SHT_PROGBITS`), read with
/// plain offsets: a test of objects clang-19 just wrote.
fn text_words(object: &Path) -> Vec<u32> {
    let b = std::fs::read(object).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u16_at = |at: usize| usize::from(u16::from_le_bytes(b[at..at + 2].try_into().unwrap()));
    let (shoff, shnum, shstrndx) = (u32_at(32) as usize, u16_at(48), u16_at(50));
    let header = |i: usize| shoff + 40 * i;
    let names = u32_at(header(shstrndx) + 16) as usize;
    let mut words = Vec::new();
    for i in 0..shnum {
        let h = header(i);
        let name_at = names + u32_at(h) as usize;
        let name = &b[name_at..name_at + b[name_at..].iter().position(|&c| c == 0).unwrap()];
        if name.starts_with(b".text") && u32_at(h + 4) == 1 {
            let (off, size) = (u32_at(h + 16) as usize, u32_at(h + 20) as usize);
            words.extend(b[off..off + size].chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())));
        }
    }
    words
}

/// How many instruction words are HVX instructions. Hexagon's instruction class is bits 31:28
/// of a word whose parse bits (15:14) are not 00 (00 is a duplex, which never holds HVX): HVX
/// arithmetic is class 0001 with bit 27 set and HVX loads and stores class 0010 with bit 27
/// set (bit 27 clear: the jumps of those classes). Checked against `llvm-objdump-14 -d
/// --mattr=+hvxv65,+hvx-length128b` on loops like these and on the bench's kernel suite, scalar
/// and HVX flavours: the same count of instructions naming a `v` register or `vmem`.
fn hvx_instructions(words: &[u32]) -> usize {
    words.iter().filter(|&&w| (w >> 14) & 3 != 0 && matches!(w >> 27, 0b00011 | 0b00101)).count()
}

fn serve(bench: &Bench) -> ServedSession<Bench> {
    ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

/// Launches the library's recorded kernel with `inputs` then outputs of `outputs` bytes, and
/// `scalars`; returns the outputs.
fn run(image: Vec<u8>, inputs: &[Vec<u8>], outputs: &[usize], scalars: &[Scalar]) -> Vec<Vec<u8>> {
    let bench = Bench::new();
    let served = serve(&bench);
    let k = served.open_recorded_kernel("hvx", image).unwrap();
    let lens: Vec<usize> = inputs.iter().map(Vec::len).chain(outputs.iter().copied()).collect();
    let mut leases = Vec::new();
    for &n in &lens {
        leases.push(served.session().alloc(n).unwrap());
    }
    for (l, data) in leases.iter_mut().zip(inputs) {
        l.write_at(0, data).unwrap();
    }
    let views: Vec<_> = leases.iter().zip(&lens).map(|(l, &n)| l.view(0, n).unwrap()).collect();
    let refs: Vec<_> = views.iter().collect();
    k.launch(&refs, scalars).expect("launch");
    views[inputs.len()..]
        .iter()
        .map(|v| {
            let mut out = vec![0u8; v.len()];
            v.read(&mut out).unwrap();
            out
        })
        .collect()
}

/// A u8 x i8 dot product per row (the multiply-accumulate of a quantized matrix product).
const DOT: &str = r#"#include <stdint.h>
void dot_u8i8(const uint8_t *restrict x, const int8_t *restrict w, int32_t *restrict out, uint32_t rows, uint32_t n) {
  for (uint32_t r = 0; r < rows; r++) {
    int32_t s = 0;
    for (uint32_t i = 0; i < n; i++) s += x[r * n + i] * w[i];
    out[r] = s;
  }
}
"#;

/// 32 ints compared with a limit, the 32 results stored as the bits of a word: clang-19's
/// Hexagon backend cannot select HVX instructions for the store of a 32-lane `_Bool` vector
/// (an HVX predicate) and fails with "Cannot select"; without HVX it compiles. `below2` is a
/// second kernel of the same source (a table loses HVX for both).
const BELOW: &str = include_str!("data/no_hvx.c");

#[test]
fn kernel_loops_are_vectorised_for_hvx_and_compute_what_the_host_does() {
    if !support::executor_tools() {
        return;
    }
    let d = work_dir("dot");
    let src = d.join("dot_u8i8.c");
    std::fs::write(&src, DOT).unwrap();
    let out = d.join("dot.so");
    let sig = Signature::parse("buf,buf,buf,u32,u32").unwrap();
    let report = build_library(&src, &sig, &out, &BuildOptions::default()).unwrap_or_else(|e| panic!("dot_u8i8: {e}"));
    assert_eq!(report.without_hvx, []);
    let work = report.entry_source.parent().unwrap();
    let kernel = hvx_instructions(&text_words(&work.join("kernel0.o")));
    assert!(kernel > 0, "the kernel's loop is vectorised for HVX");
    assert_eq!(hvx_instructions(&text_words(&work.join("entry.o"))), 0, "the entry is not");
    let image = std::fs::read(&out).unwrap();
    let rec = LibraryRecord::find(&image).unwrap().unwrap();
    assert_eq!(rec.kernels_without_hvx(), 0);
    // Row lengths that leave a tail after the 128-byte vectors, values at the ends of the ranges.
    let (rows, n) = (5u32, 1000u32);
    let x: Vec<u8> = (0..rows * n).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
    let w: Vec<i8> = (0..n).map(|i| if i % 97 == 0 { -128 } else { (i.wrapping_mul(40_503) >> 3) as i8 }).collect();
    let want: Vec<i32> =
        (0..rows as usize).map(|r| (0..n as usize).map(|i| i32::from(x[r * n as usize + i]) * i32::from(w[i])).sum()).collect();
    let got = run(image, &[x, w.iter().map(|&v| v as u8).collect()], &[rows as usize * 4], &[Scalar::U32(rows), Scalar::U32(n)]);
    let got: Vec<i32> = got[0].chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_kernel_clang_cannot_build_with_hvx_is_built_without_and_counted_or_refused() {
    if !support::executor_tools() {
        return;
    }
    let d = work_dir("below");
    let src = d.join("below.c");
    std::fs::write(&src, BELOW).unwrap();
    let sig = Signature::parse("buf,buf,i32").unwrap();

    // Refused: nothing at the output, clang's reason in the error.
    let out = d.join("below.so");
    match build_library_with(&src, &sig, &out, &BuildOptions::default(), HvxPolicy::Require) {
        Err(e @ BuildError::HvxUnavailable { .. }) => {
            let BuildError::HvxUnavailable { kernels, source, reason } = &e else { unreachable!() };
            assert_eq!((kernels.as_slice(), source.as_path()), (["below".to_string()].as_slice(), src.as_path()));
            assert!(reason.starts_with("fatal error: error in backend: Cannot select"), "{reason}");
            let text = e.to_string();
            assert!(text.starts_with("clang-19 cannot compile the kernel `below` ("), "{text}");
            assert!(text.contains("--require-hvx"), "{text}");
        }
        other => panic!("expected HvxUnavailable, got {other:?}"),
    }
    assert!(!out.exists(), "a refused build leaves nothing at the output");

    // The default: built without HVX, named, counted, and right.
    let report = build_library(&src, &sig, &out, &BuildOptions::default()).unwrap_or_else(|e| panic!("below: {e}"));
    let [WithoutHvx { kernel, reason }] = report.without_hvx.as_slice() else { panic!("{:?}", report.without_hvx) };
    assert_eq!(kernel, "below");
    assert!(reason.starts_with("fatal error: error in backend: Cannot select") && !reason.contains('\n'), "{reason}");
    let work = report.entry_source.parent().unwrap();
    assert_eq!(hvx_instructions(&text_words(&work.join("kernel0.o"))), 0, "compiled without HVX");
    let image = std::fs::read(&out).unwrap();
    assert_eq!(LibraryRecord::find(&image).unwrap().unwrap().kernels_without_hvx(), 1);
    let a: Vec<i32> = (0..32).map(|i| (i * 37 % 23) - 11).collect();
    let limit = 2;
    let want: u32 = a.iter().enumerate().map(|(i, &v)| u32::from(v < limit) << i).sum();
    let got = run(image, &[a.iter().flat_map(|v| v.to_le_bytes()).collect()], &[4], &[Scalar::I32(limit)]);
    assert_eq!(u32::from_le_bytes(got[0].clone().try_into().unwrap()), want);

    // A table: both kernels of that source lose HVX, the other source's kernel keeps it.
    let good = d.join("good.c");
    std::fs::write(&good, DOT).unwrap();
    let table = [
        TableSource { source: good.clone(), name: "dot_u8i8".into(), signature: Signature::parse("buf,buf,buf,u32,u32").unwrap() },
        TableSource { source: src.clone(), name: "below".into(), signature: sig },
        TableSource { source: src.clone(), name: "below2".into(), signature: sig },
    ];
    let out = d.join("table.so");
    let report = build_table_library_with(&table, &out, &BuildOptions::default(), HvxPolicy::Fallback).unwrap();
    let lost: Vec<&str> = report.without_hvx.iter().map(|w| w.kernel.as_str()).collect();
    assert_eq!(lost, ["below", "below2"]);
    let image = std::fs::read(&out).unwrap();
    assert_eq!(LibraryRecord::find(&image).unwrap().unwrap().kernels_without_hvx(), 2);
    match build_table_library_with(&table, &d.join("strict.so"), &BuildOptions::default(), HvxPolicy::Require) {
        Err(BuildError::HvxUnavailable { kernels, .. }) => assert_eq!(kernels, ["below", "below2"]),
        other => panic!("expected HvxUnavailable, got {other:?}"),
    }
    assert!(!d.join("strict.so").exists());
    let _ = std::fs::remove_dir_all(&d);
}
