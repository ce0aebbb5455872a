//! The model crate's sample kernel table as the bench runs it, for the tests that run model
//! files on the bench (model_run.rs, imported_frames.rs).

#![allow(dead_code)]

use hexrpc_bench::{Bench, LibraryModel, TableKernel};
use hexrpc_bsp::DeviceAccess;
use hexrpc_model::sample;
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

/// The name the bench knows the sample table's library by.
pub const SAMPLE_TABLE: &str = "tiny_table";

/// A served session on `bench` with its board's file policy.
pub fn serve(bench: &Bench) -> ServedSession<Bench> {
    let access = DeviceAccess::for_bench_board(bench.board()).expect("a bench board");
    ServedSession::start(bench.clone(), &access, FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

/// The sample table's kernels as bench models: `add` (out = in + c) and `zero`.
pub fn sample_table() -> LibraryModel {
    LibraryModel::table(vec![
        TableKernel::new(2, 1, |k| {
            let c = k.scalar_u32(0).unwrap_or(0) as u8;
            let out: Vec<u8> = k.read_all(0).unwrap_or_default().iter().map(|v| v.wrapping_add(c)).collect();
            let _ = k.write(1, 0, &out);
        }),
        TableKernel::new(1, 0, |k| {
            let n = k.buffer_len(0);
            let _ = k.write(0, 0, &vec![0u8; n]);
        }),
    ])
    .with_map_cache()
}

/// The sample's library with `flags` in its build record, tagged so that the bench runs it as
/// [`sample_table`].
pub fn sample_library(flags: u32) -> Vec<u8> {
    let tag = &hexrpc_bench::elf::library_image(SAMPLE_TABLE, 0)[52..];
    sample::elf_with(hexrpc_drivers::elf::EM_HEXAGON, sample::ARCH, tag, Some(&sample::build_record(&sample::TABLE, flags)))
}
