//! The bench as a session kind (feature `bench`): the libraries its DSP knows without the
//! executor, and executor images of the kernel suite.
//!
//! Without the executor, the bench's DSP runs a Rust model of a library, chosen by a tag in the
//! image ([`model_image`]); these models are registered on every binding bench:
//!
//! | model | signature | what |
//! |---|---|---|
//! | `scale_f32` | `buf,buf,f32` | `y[i] = a * x[i]` over `min(len x, len y) / 4` floats |
//! | `add_u8` | `buf,buf,u32` | `out[i] = in[i] + k` (wrapping) over `min(len in, len out)` bytes |
//! | `sleep_ms` | `buf,u32` | sleeps `k` ms, then writes `k` (u32 LE) at the start of the buffer |
//!
//! With the executor (clang-19, ld.lld-19 and qemu-hexagon present), [`kernel_image`] builds an
//! image of a kernel of the suite (`tests/hexagon/kernels`) with a generated entry, which runs as
//! real Hexagon code under qemu-hexagon. Bench figures are host time of a simulated or emulated
//! DSP, never device figures.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use hexrpc_bench::{elf, Bench, EntryVersion, LibraryModel};
use std::path::Path;

use hexrpc_libbuild::{self as build, BuildOptions};
use hexrpc_runtime::launch::{AbiVersion, EntryOptions, Signature};

use crate::error::Failure;

/// The models every binding bench knows: (name, signature).
pub const MODELS: &[(&str, &str)] = &[("scale_f32", "buf,buf,f32"), ("add_u8", "buf,buf,u32"), ("sleep_ms", "buf,u32")];

/// A bench whose DSP knows [`MODELS`]. Every crossing is costed with the executor model's cost
/// model (60 us per crossing + 2 us per KiB copied; recorded, not slept), so the bench's latency
/// samples carry a *simulated* latency.
pub fn bench_with_models() -> Bench {
    let cost = hexrpc_bench::executor::ModelOptions::default().cost;
    let bench = Bench::with_config(hexrpc_bench::BenchConfig { cost, ..hexrpc_bench::BenchConfig::default() });
    bench.register_library(
        "scale_f32",
        LibraryModel::new(EntryVersion::V2, 2, 1, |k| {
            let a = k.scalar_f32(0).unwrap_or(0.0);
            let n = k.buffer_len(0).min(k.buffer_len(1)) / 4;
            let mut x = vec![0u8; n * 4];
            if k.read(0, 0, &mut x).is_ok() {
                let y: Vec<u8> = x.chunks_exact(4).flat_map(|c| (a * f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()).collect();
                let _ = k.write(1, 0, &y);
            }
        }),
    );
    bench.register_library(
        "add_u8",
        LibraryModel::new(EntryVersion::V2, 2, 1, |k| {
            let add = k.scalar_u32(0).unwrap_or(0) as u8;
            let n = k.buffer_len(0).min(k.buffer_len(1));
            let mut v = vec![0u8; n];
            if k.read(0, 0, &mut v).is_ok() {
                v.iter_mut().for_each(|b| *b = b.wrapping_add(add));
                let _ = k.write(1, 0, &v);
            }
        }),
    );
    bench.register_library(
        "sleep_ms",
        LibraryModel::new(EntryVersion::V2, 1, 1, |k| {
            let ms = k.scalar_u32(0).unwrap_or(0);
            std::thread::sleep(Duration::from_millis(u64::from(ms)));
            let _ = k.write(0, 0, &ms.to_le_bytes());
        }),
    );
    bench
}

/// The image of model `name` (one of [`MODELS`]), built once per process.
pub fn model_image(name: &str) -> Result<&'static [u8], Failure> {
    static IMAGES: OnceLock<Vec<(&'static str, Vec<u8>)>> = OnceLock::new();
    let images = IMAGES.get_or_init(|| MODELS.iter().map(|(n, _)| (*n, elf::library_image(n, 8192))).collect());
    images.iter().find(|(n, _)| *n == name).map(|(_, b)| b.as_slice()).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|(n, _)| *n).collect();
        Failure::invalid("bench-image", format!("no bench model named {name:?} (known: {})", known.join(", ")))
    })
}

/// An executor image of kernel `kernel` of the suite, with an entry generated for `signature`
/// and `abi` (scalar build). Needs clang-19, ld.lld-19 and qemu-hexagon.
pub fn kernel_image(kernel: &str, signature: &str, abi: AbiVersion) -> Result<&'static [u8], Failure> {
    // One build at a time: the builds share the toolchain's work directories.
    static BUILDING: Mutex<()> = Mutex::new(());
    let tc = hexrpc_bench::executor::tools_available()
        .map_err(|why| Failure::unavailable("bench-image", format!("the bench executor: {why}")))?;
    let _one = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    let opts = EntryOptions { version: abi, power_request: None };
    hexrpc_bench::executor::build_image(&tc, kernel, signature, opts, hexrpc_bench::executor::Flavour::Scalar)
        .map_err(|e| Failure::invalid("bench-image", format!("building {kernel} for {signature:?}: {e}")))
}

/// `hexrpc build-lib` as a function: kernel `kernel_name` (default: the file's stem) of
/// `kernel_c`, with an entry for `signature` and `abi`, into the shared object `out` (with its
/// build record). Needs clang-19 and ld.lld-19 (and qemu-hexagon to run it on the bench).
pub fn build_library(kernel_c: &Path, kernel_name: Option<&str>, signature: &str, abi: AbiVersion, out: &Path) -> Result<(), Failure> {
    static BUILDING: Mutex<()> = Mutex::new(());
    hexrpc_bench::executor::tools_available().map_err(|why| Failure::unavailable("build-lib", format!("the bench executor: {why}")))?;
    let sig = Signature::parse(signature).map_err(|e| Failure::invalid("build-lib", format!("signature {signature:?}: {e}")))?;
    let opts = BuildOptions {
        entry: EntryOptions { version: abi, power_request: None },
        kernel_name: kernel_name.map(str::to_string),
        ..BuildOptions::default()
    };
    let _one = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    build::build_library(kernel_c, &sig, out, &opts).map_err(|e| Failure::invalid("build-lib", e.to_string()))?;
    Ok(())
}
