//! The bench library models: each Rust model the bench's DSP runs in place of a library's
//! generated entry (no executor) is defined here once, with its signature, and registered on a
//! [`Bench`] by [`register`] / [`register_all`] (or under another library name with
//! [`register_as`]). Their images are [`image`]s: ELF files tagged with the model's name, which
//! the bench's DSP fetches through the reverse file service like any library.
//!
//! | model | signature | what |
//! |---|---|---|
//! | `add_u8` | `buf,buf,u32` | `out[i] = in[i] + k` (wrapping) over `min(len in, len out)` bytes |
//! | `scale_f32` | `buf,buf,f32` | `y[i] = a * x[i]` over `min(len x, len y) / 4` floats |
//! | `sleep_ms` | `buf,u32` | sleeps `k` ms, then writes `k` (u32 LE) at the start of the buffer |
//! | `add_or_late` | `buf,buf,u32` | as `add_u8`; for `k >= LATE_MS` sleeps `k` ms, then fills `out` with `LATE_BYTE` (the whole-stack tests' deadline kernel, not in [`MODELS`]) |

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use hexrpc_bench::{elf, Bench, EntryVersion, KernelCall, LibraryModel, TableKernel};

/// One library model of the catalogue.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    /// The library name it is registered (and its image tagged) under.
    pub name: &'static str,
    /// The signature its entry was generated for (`hexrpc_runtime::launch::Signature` syntax).
    pub signature: &'static str,
    /// Buffer arguments.
    pub buffers: usize,
    /// Scalar arguments.
    pub scalars: usize,
    kernel: fn(&mut KernelCall<'_>),
}

impl Model {
    /// A v2-entry [`LibraryModel`] running this model's kernel.
    pub fn library_model(&self) -> LibraryModel {
        LibraryModel::new(EntryVersion::V2, self.buffers, self.scalars, self.kernel)
    }

    /// A v2 library with a one-kernel table running this model's kernel: method 2 launches it,
    /// method 3 runs batches of it (registered by the bindings' bench as `<name>_table`).
    pub fn table_model(&self) -> LibraryModel {
        LibraryModel::table(vec![TableKernel::new(self.buffers, self.scalars, self.kernel)])
    }
}

fn add_u8(k: &mut KernelCall<'_>) {
    let add = k.scalar_u32(0).unwrap_or(0) as u8;
    let n = k.buffer_len(0).min(k.buffer_len(1));
    let mut v = vec![0u8; n];
    if k.read(0, 0, &mut v).is_ok() {
        v.iter_mut().for_each(|b| *b = b.wrapping_add(add));
        let _ = k.write(1, 0, &v);
    }
}

fn scale_f32(k: &mut KernelCall<'_>) {
    let a = k.scalar_f32(0).unwrap_or(0.0);
    let n = k.buffer_len(0).min(k.buffer_len(1)) / 4;
    let mut x = vec![0u8; n * 4];
    if k.read(0, 0, &mut x).is_ok() {
        let y: Vec<u8> = x.chunks_exact(4).flat_map(|c| (a * f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()).collect();
        let _ = k.write(1, 0, &y);
    }
}

fn sleep_ms(k: &mut KernelCall<'_>) {
    let ms = k.scalar_u32(0).unwrap_or(0);
    std::thread::sleep(Duration::from_millis(u64::from(ms)));
    let _ = k.write(0, 0, &ms.to_le_bytes());
}

/// `out[i] = in[i] + k` (wrapping) over the shorter of the two buffers.
pub const ADD_U8: Model = Model { name: "add_u8", signature: "buf,buf,u32", buffers: 2, scalars: 1, kernel: add_u8 };
/// `y[i] = a * x[i]` over the floats both buffers hold.
pub const SCALE_F32: Model = Model { name: "scale_f32", signature: "buf,buf,f32", buffers: 2, scalars: 1, kernel: scale_f32 };
/// Sleeps `k` ms, then writes `k` (u32 LE) at the start of the buffer.
pub const SLEEP_MS: Model = Model { name: "sleep_ms", signature: "buf,u32", buffers: 1, scalars: 1, kernel: sleep_ms };

/// What [`ADD_OR_LATE`] sleeps at least, in ms, before its late write.
pub const LATE_MS: u32 = 400;
/// What [`ADD_OR_LATE`] fills its output with after the sleep.
pub const LATE_BYTE: u8 = 0xAB;

fn add_or_late(k: &mut KernelCall<'_>) {
    let add = k.scalar_u32(0).unwrap_or(0);
    if add >= LATE_MS {
        std::thread::sleep(Duration::from_millis(u64::from(add)));
        let _ = k.write(1, 0, &vec![LATE_BYTE; k.buffer_len(1)]);
        return;
    }
    add_u8(k);
}

/// The whole-stack tests' kernel for deadlines: `out[i] = in[i] + k` as [`ADD_U8`], or, for
/// `k >= LATE_MS`, sleeps `k` ms and then fills `out` with [`LATE_BYTE`] (a kernel that writes
/// after its call was abandoned). A table kernel ([`Model::table_model`]); not served by the
/// bindings' bench ([`MODELS`]).
pub const ADD_OR_LATE: Model = Model { name: "add_or_late", signature: "buf,buf,u32", buffers: 2, scalars: 1, kernel: add_or_late };

/// Every model of the catalogue the bindings' bench serves.
pub const MODELS: &[Model] = &[SCALE_F32, ADD_U8, SLEEP_MS];

/// The model named `name`.
pub fn find(name: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.name == name)
}

/// Registers `model` on `bench` under its own name.
pub fn register(bench: &Bench, model: &Model) {
    register_as(bench, model.name, model);
}

/// Registers `model`'s kernel on `bench` under library name `name` (a workload that names its
/// library differently, e.g. the selftest's).
pub fn register_as(bench: &Bench, name: &str, model: &Model) {
    bench.register_library(name, model.library_model());
}

/// Registers every model of the catalogue on `bench`.
pub fn register_all(bench: &Bench) {
    for m in MODELS {
        register(bench, m);
    }
}

/// The image of library `name` for the bench's DSP (an ELF tagged with the name, 8 KiB), built
/// once per process and name.
pub fn image(name: &str) -> &'static [u8] {
    static IMAGES: OnceLock<Mutex<HashMap<String, &'static [u8]>>> = OnceLock::new();
    let mut images = IMAGES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    images.entry(name.to_string()).or_insert_with(|| Box::leak(elf::library_image(name, 8192).into_boxed_slice()))
}

/// The name of the sample model's library: `add_u8`'s one-kernel table (the bindings' bench
/// registers it as `add_u8_table`; [`register_sample_model`] does on any bench).
pub const SAMPLE_MODEL_LIBRARY: &str = "add_u8_table";

/// Registers the sample model's library ([`sample_model_file`]) on `bench`.
pub fn register_sample_model(bench: &Bench) {
    bench.register_library(SAMPLE_MODEL_LIBRARY, ADD_U8.table_model());
}

/// A model file the bench runs with no compiler (its library is `add_u8`'s table, a bench model
/// tagged by name, carrying a build record that says it runs programs): input `x` (uint8,
/// 1×`n`), outputs `y = x + 3` and `z = y + 5` (uint8, 1×`n`), two launches in one step, one
/// arena of weights and scratch. For demos, the bindings' tests and `hexrpc model sample`: it is
/// no use on a device (its library has no code).
pub fn sample_model_file(n: usize) -> Vec<u8> {
    use hexrpc_model::sample::{build_record, elf_with, record};
    use hexrpc_model::{DType, Direction, InitSpec, IoSpec, ModelBuilder, StepSpec};
    use hexrpc_runtime::launch::record::{FLAG_BATCHES, FLAG_PROGRAM};
    let n = n.clamp(1, 1 << 20);
    let tag = &elf::library_image(SAMPLE_MODEL_LIBRARY, 0)[52..];
    // As the bench model is registered: batches and programs, no map cache.
    let flags = FLAG_BATCHES | FLAG_PROGRAM;
    let image = elf_with(hexrpc_drivers::elf::EM_HEXAGON, 0x65, tag, Some(&build_record(&[("add_u8", ADD_U8.signature)], flags)));
    let (x, y, z, w) = (0u64, n as u64, 2 * n as u64, 3 * n as u64);
    let (n32, x32, y32, z32) = (n as u32, x as u32, y as u32, z as u32);
    let mut records = record(0, &[(0, x32, n32), (0, y32, n32)], &[3]);
    records.extend(record(0, &[(0, y32, n32), (0, z32, n32)], &[5]));
    ModelBuilder {
        arch: 0x65,
        source_digest: [0; 32],
        source_name: "hexrpc sample (add_u8 twice)".into(),
        tinygrad_version: String::new(),
        hexrpc_version: env!("CARGO_PKG_VERSION").into(),
        libraries: vec![(SAMPLE_MODEL_LIBRARY.into(), image)],
        arenas: vec![(w + 4096, 64)],
        init: vec![
            InitSpec::Bytes { arena: 0, offset: w, bytes: (0..2048u32).map(|i| i as u8).collect() },
            InitSpec::Zeros { arena: 0, offset: w + 2048, len: 2048 },
        ],
        steps: vec![StepSpec { library: 0, launches: 2, records }],
        io: vec![
            IoSpec { name: "x".into(), direction: Direction::Input, dtype: DType::U8, shape: vec![1, n as u64], arena: 0, offset: x },
            IoSpec { name: "y".into(), direction: Direction::Output, dtype: DType::U8, shape: vec![1, n as u64], arena: 0, offset: y },
            IoSpec { name: "z".into(), direction: Direction::Output, dtype: DType::U8, shape: vec![1, n as u64], arena: 0, offset: z },
        ],
    }
    .to_bytes()
}
