//! The bench as a session kind (feature `bench`): the libraries its DSP knows without the
//! executor, and executor images of the kernel suite.
//!
//! Without the executor, the bench's DSP runs a Rust model of a library, chosen by a tag in the
//! image ([`model_image`]); every binding bench knows the models of
//! [`hexrpc_scenarios::catalogue`] (`scale_f32`, `add_u8`, `sleep_ms`), each also as a library
//! with a one-kernel table (`sleep_ms_table`, ...) that runs batches.
//!
//! With the executor (clang-19, ld.lld-19 and qemu-hexagon present), [`kernel_image`] builds an
//! image of a kernel of the suite (`tests/hexagon/kernels`) with a generated entry, which runs as
//! real Hexagon code under qemu-hexagon. Bench figures are host time of a simulated or emulated
//! DSP, never device figures.

use std::sync::Mutex;

use hexrpc_bench::{Bench, BenchConfig};
use hexrpc_runtime::launch::{AbiVersion, EntryOptions};
use hexrpc_scenarios::catalogue;

use crate::error::Failure;

/// A bench whose DSP knows every model of the catalogue. Every crossing is costed with the
/// executor model's cost model (60 us per crossing + 2 us per KiB copied; recorded, not slept),
/// so the bench's latency samples carry a *simulated* latency. The executor's per-call limit is
/// `call_limit` when given, else `HEXRPC_BENCH_CALL_LIMIT_MS` when set (a value that is not a
/// whole number of milliseconds in range is refused), else the bench's default.
pub fn bench_with_models(call_limit: Option<std::time::Duration>) -> Result<Bench, Failure> {
    bench_with_models_on(&hexrpc_bsp::BENCH, call_limit)
}

/// [`bench_with_models`] on the bench board `board` (a bench kernel: the downstream one, the
/// upstream model, or Linux's own `fastrpc.c` where the bench is built with it).
pub fn bench_with_models_on(board: &'static hexrpc_bsp::Board, call_limit: Option<std::time::Duration>) -> Result<Bench, Failure> {
    let cost = hexrpc_scenarios::ModelOptions::default().cost;
    let mut config = BenchConfig::from_env().map_err(|e| Failure::invalid("session-start", e.to_string()))?;
    config.board = board;
    config.cost = cost;
    if let Some(limit) = call_limit {
        config.executor_timeout = limit;
    }
    let bench = Bench::with_config(config);
    catalogue::register_all(&bench);
    for m in catalogue::MODELS {
        bench.register_library(&format!("{}{TABLE}", m.name), m.table_model());
    }
    Ok(bench)
}

/// The suffix of a catalogue model's one-kernel-table library (`sleep_ms_table`): the same
/// kernel, also answering batches.
const TABLE: &str = "_table";

/// The image of catalogue model `name`, built once per process.
pub fn model_image(name: &str) -> Result<&'static [u8], Failure> {
    let base = name.strip_suffix(TABLE).unwrap_or(name);
    match catalogue::find(base) {
        Some(_) => Ok(catalogue::image(name)),
        None => {
            let known: Vec<&str> = catalogue::MODELS.iter().map(|m| m.name).collect();
            Err(Failure::invalid("bench-image", format!("no bench model named {name:?} (known: {})", known.join(", "))))
        }
    }
}

/// An executor image of kernel `kernel` of the suite, with an entry generated for `signature`
/// and `abi` (scalar build). Needs clang-19, ld.lld-19 and qemu-hexagon.
pub fn kernel_image(kernel: &str, signature: &str, abi: AbiVersion) -> Result<&'static [u8], Failure> {
    // One build at a time: the builds share the toolchain's work directories.
    static BUILDING: Mutex<()> = Mutex::new(());
    let tc = hexrpc_bench::executor::tools_available()
        .map_err(|why| Failure::unavailable("bench-image", format!("the bench executor: {why}")))?;
    let _one = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    let opts = EntryOptions { version: abi, power_request: None, map_cache: false, power_method: false };
    hexrpc_scenarios::suite::build_image(&tc, kernel, signature, opts, hexrpc_bench::executor::Flavour::Scalar)
        .map_err(|e| Failure::invalid("bench-image", format!("building {kernel} for {signature:?}: {e}")))
}

/// The bench's sample model file for `n` elements ([`catalogue::sample_model_file`]), built once
/// per process and `n`.
pub fn sample_model(n: usize) -> &'static [u8] {
    static FILES: Mutex<Vec<(usize, &'static [u8])>> = Mutex::new(Vec::new());
    let mut files = FILES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, f)) = files.iter().find(|(m, _)| *m == n) {
        return f;
    }
    let f: &'static [u8] = Box::leak(catalogue::sample_model_file(n).into_boxed_slice());
    files.push((n, f));
    f
}
