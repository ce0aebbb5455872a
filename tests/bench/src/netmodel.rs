//! The model network (conv -> relu -> pool -> dense -> softmax, the executor model's shapes) on
//! the bench's **Rust** DSP model, launched two ways through the whole stack (HAL session,
//! reverse service, runtime packer): one v2 launch per node on five single-kernel libraries, and
//! one batch on a library whose kernel table holds the five nodes. For `hexrpc bench`'s batch
//! figures: crossings and `HAP_mmap`s per model, the host cost of packing the model's batch, and
//! the **simulated** latency per model run from the bench's [`CostModel`].
//!
//! The kernels here are the Rust references themselves (the executor runs the real C kernels
//! under qemu-hexagon; see `executor::model`), so what this measures is the call structure, not
//! numerics; the two ways must still give bitwise the same output and the DSP ledger must show
//! every batch record ran, which [`measure`] checks.
//! Nothing here is DSP time: the latency is the cost model's crossings and copies only (the
//! kernels declare no DSP time).

use std::hint::black_box;
use std::time::{Duration, Instant};

use hexrpc_bsp::DeviceAccess;
use hexrpc_hal::{BufferView, Library};
use hexrpc_runtime::launch::{AbiVersion, Batch, BufferRef, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

use crate::executor::reference::{self as r, f32_bytes, f32s_of, Rng};
use crate::{elf, Bench, BenchConfig, CostModel, KernelCall, LedgerEvent, LibraryModel, TableKernel};

const IN_C: usize = 1;
const IN_H: usize = 12;
const IN_W: usize = 12;
const FILTERS: usize = 4;
const CONV_H: usize = IN_H - 2;
const CONV_W: usize = IN_W - 2;
const POOL_H: usize = CONV_H / 2;
const POOL_W: usize = CONV_W / 2;
const FLAT: usize = FILTERS * POOL_H * POOL_W;
const CLASSES: usize = 10;

/// The nodes: kernel name, signature (the executor model's).
pub const NODES: [(&str, &str); 5] = [
    ("conv2d_f32", "buf,buf,buf,buf,u32,u32,u32,u32"),
    ("relu_f32", "buf,buf,u32"),
    ("maxpool2_f32", "buf,buf,u32,u32,u32"),
    ("dense_f32", "buf,buf,buf,buf,u32,u32"),
    ("softmax_f32", "buf,buf,u32,u32"),
];

/// Figures of one way of running the model.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WayFigures {
    /// Kernel crossings (ioctls) per model run.
    pub crossings: f64,
    /// `HAP_mmap`s per model run (DSP ledger).
    pub maps: f64,
    /// Median simulated latency per model run, microseconds (cost model; never DSP time).
    pub latency_us: f64,
}

/// What [`measure`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NetFigures {
    /// One launch per node.
    pub per_kernel: WayFigures,
    /// One batch per model run.
    pub batch: WayFigures,
    /// Distinct leases the model's views live in.
    pub distinct_leases: usize,
    /// Median host time to build the model's batch (new + 5 pushes), nanoseconds.
    pub batch_pack_ns: f64,
    /// Model runs measured per way.
    pub runs: usize,
}

fn f32s(k: &mut KernelCall<'_>, i: usize) -> Vec<f32> {
    f32s_of(&k.read_all(i).unwrap_or_default())
}

fn u(k: &KernelCall<'_>, j: usize) -> usize {
    k.scalar_u32(j).unwrap_or(0) as usize
}

/// The five kernels, as Rust functions over the bench's DSP mappings.
fn kernels() -> Vec<TableKernel> {
    vec![
        TableKernel::new(4, 4, |k| {
            let (x, w, b) = (f32s(k, 0), f32s(k, 1), f32s(k, 2));
            let y = r::conv2d_f32(&x, &w, &b, u(k, 0), u(k, 1), u(k, 2), u(k, 3));
            let _ = k.write(3, 0, &f32_bytes(&y));
        }),
        TableKernel::new(2, 1, |k| {
            let y = r::relu_f32(&f32s(k, 0));
            let _ = k.write(1, 0, &f32_bytes(&y));
        }),
        TableKernel::new(2, 3, |k| {
            let y = r::maxpool2_f32(&f32s(k, 0), u(k, 0), u(k, 1), u(k, 2));
            let _ = k.write(1, 0, &f32_bytes(&y));
        }),
        TableKernel::new(4, 2, |k| {
            let (x, w, b) = (f32s(k, 0), f32s(k, 1), f32s(k, 2));
            let y = r::dense_f32(&x, &w, &b, u(k, 0), u(k, 1));
            let _ = k.write(3, 0, &f32_bytes(&y));
        }),
        TableKernel::new(2, 2, |k| {
            let y: Vec<f32> = r::softmax_f64(&f32s(k, 0), u(k, 0), u(k, 1)).iter().map(|v| *v as f32).collect();
            let _ = k.write(1, 0, &f32_bytes(&y));
        }),
    ]
}

fn image(name: &str) -> &'static [u8] {
    Box::leak(elf::library_image(name, 4096).into_boxed_slice())
}

/// Byte offsets: weights in one lease, activations in another, every view at a non-zero offset.
struct Layout;
impl Layout {
    const CONV_W: usize = 64;
    const CONV_B: usize = Self::CONV_W + 4 * FILTERS * IN_C * 9 + 64;
    const DENSE_W: usize = Self::CONV_B + 4 * FILTERS + 64;
    const DENSE_B: usize = Self::DENSE_W + 4 * CLASSES * FLAT + 64;
    const WEIGHTS: usize = Self::DENSE_B + 4 * CLASSES + 64;
    const INPUT: usize = 128;
    const CONV: usize = Self::INPUT + 4 * IN_C * IN_H * IN_W + 64;
    const RELU: usize = Self::CONV + 4 * FILTERS * CONV_H * CONV_W + 64;
    const POOL: usize = Self::RELU + 4 * FILTERS * CONV_H * CONV_W + 64;
    const DENSE: usize = Self::POOL + 4 * FLAT + 64;
    const SOFTMAX: usize = Self::DENSE + 4 * CLASSES + 64;
    const ACTS: usize = Self::SOFTMAX + 4 * CLASSES + 64;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the model `runs` times each way on a fresh bench with `cost` (see the module docs).
pub fn measure(cost: CostModel, runs: usize) -> Result<NetFigures, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let runs = runs.max(1);
    let bench = Bench::with_config(BenchConfig { cost, ..BenchConfig::default() });
    let table = kernels();
    for (i, (name, _)) in NODES.iter().enumerate() {
        let k = &table[i];
        let f = k.kernel.clone();
        bench.register_library(name, LibraryModel::new(crate::EntryVersion::V2, k.buffers, k.scalars, move |c| f(c)));
    }
    bench.register_library("model_table", LibraryModel::table(table));
    let policy = FilePolicy::for_board(bench.board()).map_err(|x| format!("{x:?}"))?;
    let served = ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), policy).map_err(|x| e(&x))?;
    let libs: Vec<Library<'_, Bench>> =
        NODES.iter().map(|(n, _)| served.open_library(n, image(n))).collect::<Result<_, _>>().map_err(|x| e(&x))?;
    let model = served.open_library("model_table", image("model_table")).map_err(|x| e(&x))?;
    let sigs: Vec<Signature> = NODES.iter().map(|(_, s)| Signature::parse(s)).collect::<Result<_, _>>().map_err(|x| e(&x))?;

    let mut rng = Rng(0x5EED_0008);
    let mut weights = served.session().alloc(Layout::WEIGHTS).map_err(|x| e(&x))?;
    for (at, n, scale) in [(Layout::CONV_W, FILTERS * IN_C * 9, 0.5), (Layout::CONV_B, FILTERS, 0.1)] {
        weights.write_at(at, &f32_bytes(&rng.f32s(n, scale))).map_err(|x| e(&x))?;
    }
    for (at, n, scale) in [(Layout::DENSE_W, CLASSES * FLAT, 0.2), (Layout::DENSE_B, CLASSES, 0.1)] {
        weights.write_at(at, &f32_bytes(&rng.f32s(n, scale))).map_err(|x| e(&x))?;
    }
    let mut acts = served.session().alloc(Layout::ACTS).map_err(|x| e(&x))?;
    acts.write_at(Layout::INPUT, &f32_bytes(&rng.f32s(IN_C * IN_H * IN_W, 1.0))).map_err(|x| e(&x))?;
    fn v<'a>(l: &'a hexrpc_hal::IonLease<'_, Bench>, off: usize, n: usize) -> Result<BufferView<'a>, hexrpc_hal::HalError> {
        l.view(off, 4 * n)
    }
    let views: Vec<BufferView<'_>> = [
        v(&weights, Layout::CONV_W, FILTERS * IN_C * 9),
        v(&weights, Layout::CONV_B, FILTERS),
        v(&weights, Layout::DENSE_W, CLASSES * FLAT),
        v(&weights, Layout::DENSE_B, CLASSES),
        v(&acts, Layout::INPUT, IN_C * IN_H * IN_W),
        v(&acts, Layout::CONV, FILTERS * CONV_H * CONV_W),
        v(&acts, Layout::RELU, FILTERS * CONV_H * CONV_W),
        v(&acts, Layout::POOL, FLAT),
        v(&acts, Layout::DENSE, CLASSES),
        v(&acts, Layout::SOFTMAX, CLASSES),
    ]
    .into_iter()
    .collect::<Result<_, _>>()
    .map_err(|x| e(&x))?;
    let [w_conv, b_conv, w_dense, b_dense, x_in, x_conv, x_relu, x_pool, x_dense, x_soft] = &views[..] else {
        return Err("views".into());
    };
    let s = |x: usize| Scalar::U32(x as u32);
    let b = BufferRef::of;
    let nodes: [(Vec<BufferRef<'_>>, Vec<Scalar>); 5] = [
        (vec![b(x_in), b(w_conv), b(b_conv), b(x_conv)], vec![s(IN_C), s(IN_H), s(IN_W), s(FILTERS)]),
        (vec![b(x_conv), b(x_relu)], vec![s(FILTERS * CONV_H * CONV_W)]),
        (vec![b(x_relu), b(x_pool)], vec![s(FILTERS), s(CONV_H), s(CONV_W)]),
        (vec![b(x_pool), b(w_dense), b(b_dense), b(x_dense)], vec![s(FLAT), s(CLASSES)]),
        (vec![b(x_dense), b(x_soft)], vec![s(1), s(CLASSES)]),
    ];
    let build = || -> Result<Batch<'_>, String> {
        let mut batch = Batch::new(&sigs).map_err(|x| e(&x))?;
        for (k, (bufs, scalars)) in nodes.iter().enumerate() {
            batch.push(k, bufs, scalars).map_err(|x| e(&x))?;
        }
        Ok(batch)
    };
    let read = |view: &BufferView<'_>| -> Result<Vec<u8>, String> {
        let mut out = vec![0u8; view.len()];
        view.read(&mut out).map_err(|x| e(&x))?;
        Ok(out)
    };
    let maps = |bench: &Bench| bench.ledger().iter().filter(|x| matches!(x.event, LedgerEvent::Map { .. })).count();
    let calls = |bench: &Bench| -> u64 { bench.counts().calls.values().sum() };

    // Per kernel.
    let mut per = (0u64, 0usize, Vec::with_capacity(runs));
    let mut out_per = Vec::new();
    for _ in 0..runs {
        bench.clear_ledger();
        let (c0, l0) = (calls(&bench), bench.latencies().len());
        for (k, (bufs, scalars)) in nodes.iter().enumerate() {
            let mut p = PackedLaunch::new(AbiVersion::V2, &sigs[k], bufs, scalars).map_err(|x| e(&x))?;
            libs[k].invoke(&mut p.invoke_args().map_err(|x| format!("{x:?}"))?).map_err(|x| e(&x))?;
        }
        per.0 += calls(&bench) - c0;
        per.1 += maps(&bench);
        per.2.push(bench.latencies()[l0..].iter().map(|x| x.simulated).sum::<Duration>().as_secs_f64() * 1e6);
        out_per = read(x_soft)?;
    }
    // One batch, built once, run `runs` times.
    let mut batch = build()?;
    let mut bat = (0u64, 0usize, Vec::with_capacity(runs));
    let mut out_batch = Vec::new();
    for _ in 0..runs {
        bench.clear_ledger();
        let (c0, l0) = (calls(&bench), bench.latencies().len());
        let run = batch.run(&model).map_err(|x| e(&x))?;
        if run.launches != NODES.len() {
            return Err(format!("the batch ran {} of {} nodes", run.launches, NODES.len()));
        }
        bat.0 += calls(&bench) - c0;
        bat.1 += maps(&bench);
        let ran = bench.ledger().iter().filter(|x| matches!(x.event, LedgerEvent::BatchKernel { code: 0, .. })).count();
        if ran != NODES.len() {
            return Err(format!("the DSP ran {ran} batch records, not {}", NODES.len()));
        }
        bat.2.push(bench.latencies()[l0..].iter().map(|x| x.simulated).sum::<Duration>().as_secs_f64() * 1e6);
        out_batch = read(x_soft)?;
    }
    if out_per != out_batch || out_batch.iter().all(|&x| x == 0) {
        return Err("the batch's output differs from the per-kernel launches'".into());
    }
    let distinct_leases = batch.lease_count();

    // Packing the model's batch (host time, no system call).
    let mut pack = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        for _ in 0..200 {
            black_box(build()?.len());
        }
        pack.push(t.elapsed().as_nanos() as f64 / 200.0);
    }
    let n = runs as f64;
    let figures = NetFigures {
        per_kernel: WayFigures { crossings: per.0 as f64 / n, maps: per.1 as f64 / n, latency_us: median(per.2) },
        batch: WayFigures { crossings: bat.0 as f64 / n, maps: bat.1 as f64 / n, latency_us: median(bat.2) },
        distinct_leases,
        batch_pack_ns: median(pack),
        runs,
    };
    // Everything that belongs to the session goes before it.
    drop(views);
    drop(weights);
    drop(acts);
    drop(libs);
    drop(model);
    served.stop().map_err(|x| format!("{x:?}"))?;
    Ok(figures)
}
