//! The generated entries compiled for Hexagon with clang-19 (`-Wall -Werror`, the device flags),
//! and the build step producing a Hexagon shared object with every section page-aligned.
//!
//! Skips (with a message) when `clang-19` / `ld.lld-19` are missing (`HEXRPC_CLANG`,
//! `HEXRPC_LLD` override the names).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use hexrpc_runtime::launch::build::{
    build_library, compile_hexagon, parse_elf, BuildError, BuildOptions, ElfSummary, DEFAULT_CLANG, DEFAULT_LLD, EM_HEXAGON, ET_DYN,
};
use hexrpc_runtime::launch::{write_entry, EntryOptions, ParamKind, PowerRequest, ScalarType, Signature};

fn tool(var: &str, default: &str) -> Option<PathBuf> {
    let t = PathBuf::from(std::env::var_os(var).unwrap_or_else(|| default.into()));
    match Command::new(&t).arg("--version").output() {
        Ok(o) if o.status.success() => Some(t),
        _ => {
            eprintln!("SKIPPED: `{}` not found (set {var}); Hexagon compilation was not checked", t.display());
            None
        }
    }
}

fn work_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-launch-hex-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn signature(n: usize) -> Signature {
    let mut params = vec![ParamKind::Buffer; n];
    params.extend((0..4).map(|k| ParamKind::Scalar(ScalarType::ALL[(n + 3 * k) % 11])));
    Signature::new(&params).unwrap()
}

#[test]
fn every_generated_entry_compiles_for_hexagon_warning_free() {
    let Some(clang) = tool("HEXRPC_CLANG", DEFAULT_CLANG) else { return };
    let d = work_dir("entries");
    let werror: Vec<OsString> = vec!["-Wall".into(), "-Werror".into()];
    let power = Some(PowerRequest::TINYGRAD);
    let mut compiled = 0;
    for (tag, opts) in [
        ("v1", EntryOptions::V1),
        ("v2", EntryOptions::V2),
        ("v1p", EntryOptions::TINYGRAD),
        ("v2p", EntryOptions { power_request: power, ..EntryOptions::V2 }),
    ] {
        for n in 0..=15 {
            if tag.ends_with('p') && n % 5 != 0 {
                continue;
            }
            let mut c = String::new();
            write_entry(&mut c, &signature(n), "kern", &opts).unwrap();
            // On Hexagon the view must be the 8-byte one (this also proves the pointers are 32-bit).
            c.push_str("_Static_assert(sizeof(remote_arg) == 8 && sizeof(void *) == 4, \"32-bit remote_arg view\");\n");
            let (src, obj) = (d.join(format!("{tag}-{n}.c")), d.join(format!("{tag}-{n}.o")));
            std::fs::write(&src, c).unwrap();
            if let Err(e) = compile_hexagon(&clang, &src, &obj, &werror) {
                panic!("{tag} n={n}: {e}");
            }
            let elf = parse_elf(&std::fs::read(&obj).unwrap()).unwrap();
            assert_eq!(elf.machine, EM_HEXAGON);
            compiled += 1;
        }
    }
    assert_eq!(compiled, 2 * 16 + 2 * 4);
}

fn check_pages(elf: &ElfSummary) {
    let alloc: Vec<_> = elf.sections.iter().filter(|s| s.alloc && s.size > 0).collect();
    for name in [".text", ".dynsym", ".dynstr", ".hash", ".dynamic"] {
        assert!(alloc.iter().any(|s| s.name == name), "no {name} in {:?}", elf.sections);
    }
    for s in &alloc {
        assert_eq!(s.addr % 4096, 0, "{} at {:#x}", s.name, s.addr);
    }
    let loads: Vec<_> = elf.segments.iter().filter(|p| p.kind == 1).collect();
    assert!(!loads.is_empty());
    for p in loads {
        assert_eq!((p.vaddr % 4096, p.offset % 4096, p.align), (0, 0, 4096), "{p:?}");
    }
}

const KERNEL: &str = "void scale(float *out, const float *in, int n, float k) {\n  for (int i = 0; i < n; i++) out[i] = in[i] * k;\n}\n";

#[test]
fn build_library_makes_a_page_aligned_hexagon_shared_object() {
    let (Some(clang), Some(lld)) = (tool("HEXRPC_CLANG", DEFAULT_CLANG), tool("HEXRPC_LLD", DEFAULT_LLD)) else { return };
    let d = work_dir("lib");
    let kernel = d.join("scale.c");
    std::fs::write(&kernel, KERNEL).unwrap();
    let sig = Signature::parse("buf,buf,i32,f32").unwrap();
    let out = d.join("libscale.so");
    let opts = BuildOptions { clang: clang.clone(), lld: lld.clone(), ..BuildOptions::default() };
    let report = build_library(&kernel, &sig, &out, &opts).unwrap();
    assert_eq!(report.kernel_name, "scale");
    assert_eq!(report.library, out);
    // The ELF header, read by hand: ELF32 little-endian, ET_DYN, EM_HEXAGON (164).
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..6], b"\x7fELF\x01\x01");
    assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), ET_DYN);
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 164);
    let elf = parse_elf(&bytes).unwrap();
    assert_eq!(elf, report.elf);
    check_pages(&elf);
    assert!(elf.exports.iter().any(|e| e == "entry") && elf.exports.iter().any(|e| e == "scale"), "{:?}", elf.exports);
    // Only the HAP functions are left for the DSP loader: no memset/memcpy crept in.
    let mut imports = elf.imports.clone();
    imports.sort();
    assert_eq!(imports, ["HAP_mmap", "HAP_munmap", "HAP_perf_get_time_us"]);
    assert!(std::fs::read_to_string(&report.linker_script).unwrap().contains(".text : ALIGN(4096)"));
    assert!(std::fs::read_to_string(&report.entry_source).unwrap().contains("scale(hrx_ptr0, hrx_ptr1, hrx_s0, hrx_s1);"));

    // A second opinion from llvm-readelf, where installed.
    match Command::new("llvm-readelf-19").args(["-h", "-S"]).arg(&out).output() {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(text.contains("Hexagon") && text.contains("DYN"), "{text}");
        }
        _ => eprintln!("note: llvm-readelf-19 not found; the ELF was checked by the built-in parser only"),
    }

    // With tinygrad's power request, HAP_power_set joins the imports, still no libc.
    let out2 = d.join("libscale-v1.so");
    let opts2 = BuildOptions { entry: EntryOptions::TINYGRAD, work_dir: Some(d.join("v1work")), ..opts };
    let r2 = build_library(&kernel, &sig, &out2, &opts2).unwrap();
    let mut imports = r2.elf.imports.clone();
    imports.sort();
    assert_eq!(imports, ["HAP_mmap", "HAP_munmap", "HAP_perf_get_time_us", "HAP_power_set"]);
    check_pages(&r2.elf);
    assert!(d.join("v1work/entry.c").exists());
}

#[test]
fn build_errors_are_typed() {
    let (Some(clang), Some(lld)) = (tool("HEXRPC_CLANG", DEFAULT_CLANG), tool("HEXRPC_LLD", DEFAULT_LLD)) else { return };
    let d = work_dir("errors");
    let sig = Signature::parse("buf").unwrap();
    let opts = BuildOptions { clang, lld, ..BuildOptions::default() };
    let broken = d.join("broken.c");
    std::fs::write(&broken, "void broken(void *p) { this is not C }\n").unwrap();
    match build_library(&broken, &sig, &d.join("a.so"), &opts) {
        Err(BuildError::ToolFailed { stderr, .. }) => assert!(stderr.contains("error"), "{stderr}"),
        other => panic!("{other:?}"),
    }
    let dashed = d.join("my-kernel.c");
    std::fs::write(&dashed, "void k(void *p) { (void)p; }\n").unwrap();
    assert!(matches!(build_library(&dashed, &sig, &d.join("b.so"), &opts), Err(BuildError::KernelName(n)) if n == "my-kernel"));
    // Naming the function fixes it.
    let named = BuildOptions { kernel_name: Some("k".into()), ..opts.clone() };
    build_library(&dashed, &sig, &d.join("b.so"), &named).unwrap();
    let missing = BuildOptions { clang: Path::new("/nonexistent/clang-19").into(), ..opts };
    assert!(matches!(build_library(&dashed, &sig, &d.join("c.so"), &missing), Err(BuildError::KernelName(_))));
    let missing = BuildOptions { kernel_name: Some("k".into()), ..missing };
    match build_library(&dashed, &sig, &d.join("c.so"), &missing) {
        Err(BuildError::ToolMissing { tool, .. }) => assert_eq!(tool, Path::new("/nonexistent/clang-19")),
        // Under qemu-user (the aarch64 test run) the failed exec happens in the child, which
        // then exits non-zero instead of failing the spawn.
        Err(BuildError::ToolFailed { command, status, .. }) => {
            assert!(command.starts_with("/nonexistent/clang-19 ") && status != Some(0), "{command} {status:?}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!d.join("c.so").exists());
}
