//! The model network, defined once: conv -> relu -> pool -> dense -> softmax with seeded weights
//! ([`NODES`], the tensors' layout in two leases, and each node's arguments), run through the
//! whole stack (HAL session, reverse service, runtime packer) two ways: one v2 launch per node on
//! five single-kernel libraries, and one [`Batch`] per model run on a library whose kernel table
//! holds the five nodes.
//!
//! * [`run_model`] runs it on the bench **with executor**: the five real C kernels and the table
//!   library are built for Hexagon ([`crate::suite`]) and run under qemu-hexagon. Every node's
//!   output of the first and the last run is compared with the Rust reference applied to the
//!   node's actual input (bounds in [`reference`](hexrpc_bench::executor::reference)); every
//!   run's final output must equal the first run's bitwise, and the batch's output must equal
//!   the per-kernel output bitwise (the batch runs on a separate, zeroed activation lease).
//!   Latency per run is reported twice, both never DSP time: the **simulated** crossing cost of
//!   the bench's [`CostModel`] (sum over the run's ioctls), and the **host wall time** of the
//!   run, which includes qemu's emulation of the kernels.
//! * [`measure`] runs it on the bench's **Rust** DSP model ([`register_rust_models`]: the
//!   kernels are the Rust references themselves), for `hexrpc bench`'s batch figures: crossings
//!   and `HAP_mmap`s per model run, the host cost of packing the model's batch, and the
//!   **simulated** latency per model run from the cost model. What this measures is the call
//!   structure, not numerics; the two ways must still give bitwise the same output and the DSP
//!   ledger must show every batch record ran. The kernels declare no DSP time.

use std::hint::black_box;
use std::time::{Duration, Instant};

use hexrpc_bench::executor::reference::{self as r, f32_bytes, f32s_of, Rng};
use hexrpc_bench::executor::{tools_available, BuildError, Flavour};
use hexrpc_bench::{Bench, BenchConfig, CostModel, KernelCall, LedgerEvent, LibraryModel, TableKernel};
use hexrpc_hal::{BufferView, HalError, Lease, Library, Session};
use hexrpc_runtime::launch::{AbiVersion, Batch, BufferRef, EntryOptions, PackedLaunch, Scalar, Signature};

pub use crate::error::ModelError;
use crate::stack::Stack;
use crate::suite::{build_image, build_table_image};

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

/// The model's nodes: kernel, signature.
pub const NODES: [(&str, &str); 5] = [
    ("conv2d_f32", "buf,buf,buf,buf,u32,u32,u32,u32"),
    ("relu_f32", "buf,buf,u32"),
    ("maxpool2_f32", "buf,buf,u32,u32,u32"),
    ("dense_f32", "buf,buf,buf,buf,u32,u32"),
    ("softmax_f32", "buf,buf,u32,u32"),
];

/// The name of the library whose kernel table holds the five nodes.
pub const TABLE: &str = "model_table";

/// Byte offsets of the tensors: weights in one lease, activations in another, every view at a
/// non-zero offset.
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

/// The parameters and input of the network, from a fixed seed.
struct Params {
    conv_w: Vec<f32>,
    conv_b: Vec<f32>,
    dense_w: Vec<f32>,
    dense_b: Vec<f32>,
    input: Vec<f32>,
}

impl Params {
    fn seeded() -> Params {
        let mut rng = Rng(0x5EED_0008);
        Params {
            conv_w: rng.f32s(FILTERS * IN_C * 9, 0.5),
            conv_b: rng.f32s(FILTERS, 0.1),
            dense_w: rng.f32s(CLASSES * FLAT, 0.2),
            dense_b: rng.f32s(CLASSES, 0.1),
            input: rng.f32s(IN_C * IN_H * IN_W, 1.0),
        }
    }

    /// A lease holding the weights.
    fn weights<'s>(&self, session: &'s Session<Bench>) -> Result<Lease<'s, Bench>, HalError> {
        let mut w = session.alloc(Layout::WEIGHTS)?;
        w.write_at(Layout::CONV_W, &f32_bytes(&self.conv_w))?;
        w.write_at(Layout::CONV_B, &f32_bytes(&self.conv_b))?;
        w.write_at(Layout::DENSE_W, &f32_bytes(&self.dense_w))?;
        w.write_at(Layout::DENSE_B, &f32_bytes(&self.dense_b))?;
        Ok(w)
    }

    /// A zeroed activation lease holding the input.
    fn activations<'s>(&self, session: &'s Session<Bench>) -> Result<Lease<'s, Bench>, HalError> {
        let mut a = session.alloc(Layout::ACTS)?;
        a.fill(0, Layout::ACTS, 0)?;
        a.write_at(Layout::INPUT, &f32_bytes(&self.input))?;
        Ok(a)
    }
}

fn v<'a>(lease: &'a Lease<'_, Bench>, off: usize, n: usize) -> Result<BufferView<'a>, HalError> {
    lease.view(off, 4 * n)
}

/// The weight views: conv weights, conv bias, dense weights, dense bias.
fn weight_views<'a>(w: &'a Lease<'_, Bench>) -> Result<[BufferView<'a>; 4], HalError> {
    Ok([
        v(w, Layout::CONV_W, FILTERS * IN_C * 9)?,
        v(w, Layout::CONV_B, FILTERS)?,
        v(w, Layout::DENSE_W, CLASSES * FLAT)?,
        v(w, Layout::DENSE_B, CLASSES)?,
    ])
}

/// The activation views of one activation lease: input, conv, relu, pool, dense, softmax.
fn act_views<'a>(acts: &'a Lease<'_, Bench>) -> Result<[BufferView<'a>; 6], HalError> {
    Ok([
        v(acts, Layout::INPUT, IN_C * IN_H * IN_W)?,
        v(acts, Layout::CONV, FILTERS * CONV_H * CONV_W)?,
        v(acts, Layout::RELU, FILTERS * CONV_H * CONV_W)?,
        v(acts, Layout::POOL, FLAT)?,
        v(acts, Layout::DENSE, CLASSES)?,
        v(acts, Layout::SOFTMAX, CLASSES)?,
    ])
}

/// One node's launch: its buffers and scalars.
type NodeArgs<'a> = (Vec<BufferRef<'a>>, Vec<Scalar>);

/// The arguments of the five nodes on weight views `w` and activation views `a`.
fn node_args<'a>(w: &'a [BufferView<'_>; 4], a: &'a [BufferView<'_>; 6]) -> [NodeArgs<'a>; 5] {
    let [w_conv, b_conv, w_dense, b_dense] = w;
    let [x_in, x_conv, x_relu, x_pool, x_dense, x_soft] = a;
    let s = |x: usize| Scalar::U32(x as u32);
    let b = BufferRef::of;
    [
        (vec![b(x_in), b(w_conv), b(b_conv), b(x_conv)], vec![s(IN_C), s(IN_H), s(IN_W), s(FILTERS)]),
        (vec![b(x_conv), b(x_relu)], vec![s(FILTERS * CONV_H * CONV_W)]),
        (vec![b(x_relu), b(x_pool)], vec![s(FILTERS), s(CONV_H), s(CONV_W)]),
        (vec![b(x_pool), b(w_dense), b(b_dense), b(x_dense)], vec![s(FLAT), s(CLASSES)]),
        (vec![b(x_dense), b(x_soft)], vec![s(1), s(CLASSES)]),
    ]
}

/// The network as one batch (built once, run many times).
fn build_batch<'a>(sigs: &'a [Signature], nodes: &[NodeArgs<'a>; 5]) -> Result<Batch<'a>, ModelError> {
    let mut batch = Batch::new(sigs)?;
    for (k, (bufs, scalars)) in nodes.iter().enumerate() {
        batch.push(k, bufs, scalars)?;
    }
    Ok(batch)
}

/// One v2 launch of node `k` on `lib`.
fn launch_node(lib: &Library<'_, Bench>, sig: &Signature, (bufs, scalars): &NodeArgs<'_>) -> Result<(), ModelError> {
    let mut packed = PackedLaunch::new(AbiVersion::V2, sig, bufs, scalars)?;
    lib.invoke(&mut packed.invoke_args().map_err(|e| ModelError::Args(format!("{e:?}")))?)?;
    Ok(())
}

fn signatures() -> Result<Vec<Signature>, ModelError> {
    NODES.iter().map(|(_, s)| Signature::parse(s).map_err(|e| ModelError::Build(BuildError::Entry(format!("{s:?}: {e:?}"))))).collect()
}

fn read_f32s(view: &BufferView<'_>) -> Result<Vec<f32>, ModelError> {
    let mut b = vec![0u8; view.len()];
    view.read(&mut b)?;
    Ok(f32s_of(&b))
}

fn maps(bench: &Bench, from: usize) -> usize {
    bench.ledger()[from..].iter().filter(|e| matches!(e.event, LedgerEvent::Map { .. })).count()
}

fn crossings(bench: &Bench) -> u64 {
    bench.counts().calls.values().sum()
}

fn f32s(k: &mut KernelCall<'_>, i: usize) -> Vec<f32> {
    f32s_of(&k.read_all(i).unwrap_or_default())
}

fn u(k: &KernelCall<'_>, j: usize) -> usize {
    k.scalar_u32(j).unwrap_or(0) as usize
}

/// The five nodes as Rust kernels over the bench's DSP mappings (the references themselves).
fn rust_kernels() -> Vec<TableKernel> {
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

/// Registers the network's libraries on `bench` as Rust models: each node's single-kernel
/// library under its kernel's name, and the table library [`TABLE`].
pub fn register_rust_models(bench: &Bench) {
    let table = rust_kernels();
    for ((name, _), k) in NODES.iter().zip(&table) {
        bench.register_library(name, k.single_library());
    }
    bench.register_library(TABLE, LibraryModel::table(table));
}

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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the model `runs` times each way on a fresh bench with `cost`, on the bench's Rust DSP
/// model (see the module docs).
pub fn measure(cost: CostModel, runs: usize) -> Result<NetFigures, String> {
    measure_model(cost, runs).map_err(|e| e.to_string())
}

fn measure_model(cost: CostModel, runs: usize) -> Result<NetFigures, ModelError> {
    let runs = runs.max(1);
    let bench = Bench::with_config(BenchConfig { cost, ..BenchConfig::default() });
    register_rust_models(&bench);
    let stack = Stack::start(bench.clone())?;
    let libs: Vec<Library<'_, Bench>> = NODES.iter().map(|(n, _)| stack.open(n, crate::catalogue::image(n))).collect::<Result<_, _>>()?;
    let model = stack.open(TABLE, crate::catalogue::image(TABLE))?;
    let sigs = signatures()?;

    let params = Params::seeded();
    let weights = params.weights(stack.session())?;
    let acts = params.activations(stack.session())?;
    let w = weight_views(&weights)?;
    let a = act_views(&acts)?;
    let nodes = node_args(&w, &a);
    let out = &a[5];

    // Per kernel.
    let mut per = (0u64, 0usize, Vec::with_capacity(runs));
    let mut out_per = Vec::new();
    for _ in 0..runs {
        bench.clear_ledger();
        let (c0, l0) = (crossings(&bench), bench.latencies().len());
        for (k, node) in nodes.iter().enumerate() {
            launch_node(&libs[k], &sigs[k], node)?;
        }
        per.0 += crossings(&bench) - c0;
        per.1 += maps(&bench, 0);
        per.2.push(bench.latencies()[l0..].iter().map(|x| x.simulated).sum::<Duration>().as_secs_f64() * 1e6);
        out_per = read_f32s(out)?;
    }
    // One batch, built once, run `runs` times.
    let mut batch = build_batch(&sigs, &nodes)?;
    let mut bat = (0u64, 0usize, Vec::with_capacity(runs));
    let mut out_batch = Vec::new();
    for _ in 0..runs {
        bench.clear_ledger();
        let (c0, l0) = (crossings(&bench), bench.latencies().len());
        let run = batch.run(&model)?;
        if run.launches != NODES.len() {
            return Err(ModelError::Mismatch { node: "model", detail: format!("the batch ran {} of {} nodes", run.launches, NODES.len()) });
        }
        bat.0 += crossings(&bench) - c0;
        bat.1 += maps(&bench, 0);
        let ran = bench.ledger().iter().filter(|x| matches!(x.event, LedgerEvent::BatchKernel { code: 0, .. })).count();
        if ran != NODES.len() {
            return Err(ModelError::Mismatch { node: "model", detail: format!("the DSP ran {ran} batch records, not {}", NODES.len()) });
        }
        bat.2.push(bench.latencies()[l0..].iter().map(|x| x.simulated).sum::<Duration>().as_secs_f64() * 1e6);
        out_batch = read_f32s(out)?;
    }
    let same = out_per.len() == out_batch.len() && out_per.iter().zip(&out_batch).all(|(x, y)| x.to_bits() == y.to_bits());
    if !same || out_batch.iter().all(|&x| x == 0.0) {
        return Err(ModelError::Mismatch { node: "model", detail: "the batch's output differs from the per-kernel launches'".into() });
    }
    let distinct_leases = batch.lease_count();

    // Packing the model's batch (host time, no system call).
    let mut pack = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        for _ in 0..200 {
            black_box(build_batch(&sigs, &nodes)?.len());
        }
        pack.push(t.elapsed().as_nanos() as f64 / 200.0);
    }
    let n = runs as f64;
    Ok(NetFigures {
        per_kernel: WayFigures { crossings: per.0 as f64 / n, maps: per.1 as f64 / n, latency_us: median(per.2) },
        batch: WayFigures { crossings: bat.0 as f64 / n, maps: bat.1 as f64 / n, latency_us: median(bat.2) },
        distinct_leases,
        batch_pack_ns: median(pack),
        runs,
    })
}

/// Percentiles of a latency sample (nearest rank).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyDistribution {
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
}

impl LatencyDistribution {
    /// The distribution of `samples`.
    pub fn of(samples: &[Duration]) -> LatencyDistribution {
        let mut s = samples.to_vec();
        s.sort();
        let rank = |p: usize| s.get(((s.len() * p).div_ceil(100)).saturating_sub(1)).copied().unwrap_or_default();
        LatencyDistribution { count: s.len(), p50: rank(50), p90: rank(90), p99: rank(99), max: s.last().copied().unwrap_or_default() }
    }
}

impl core::fmt::Display for LatencyDistribution {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "n={} p50={:?} p90={:?} p99={:?} max={:?}", self.count, self.p50, self.p90, self.p99, self.max)
    }
}

/// How one node compared with the reference (worst over the checked runs).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeReport {
    /// Node name.
    pub name: &'static str,
    /// Output elements.
    pub elements: usize,
    /// Largest ulp distance to the reference (f32 reference) or 0 for exact matches.
    pub max_ulp: u32,
    /// Largest relative error (f64 reference for softmax; for the others |d| / bound scale).
    pub max_rel: f64,
    /// The rule applied.
    pub rule: &'static str,
}

/// Options of [`run_model`].
#[derive(Clone, Copy, Debug)]
pub struct ModelOptions {
    /// Whole-model runs (>= 1; the latency lines want >= 1000).
    pub runs: usize,
    /// The bench's simulated crossing cost.
    pub cost: CostModel,
    /// Kernel build flavour.
    pub flavour: Flavour,
    /// The bench board (kernel) to run on: [`hexrpc_bsp::BENCH`] or [`hexrpc_bsp::BENCH_UPSTREAM`].
    pub board: &'static hexrpc_bsp::Board,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            runs: 1000,
            cost: CostModel {
                per_crossing: Duration::from_micros(60),
                per_kib_copied: Duration::from_micros(2),
                sleep: false,
                ..CostModel::default()
            },
            flavour: Flavour::Scalar,
            board: &hexrpc_bsp::BENCH,
        }
    }
}

/// What [`run_model`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelReport {
    /// Runs made.
    pub runs: usize,
    /// Launches per run.
    pub launches_per_run: usize,
    /// Per node comparison.
    pub nodes: Vec<NodeReport>,
    /// Simulated latency per run (the bench's cost model summed over the run's ioctls).
    pub simulated: LatencyDistribution,
    /// Host wall time per run, including qemu's emulation (not DSP time).
    pub host_wall: LatencyDistribution,
    /// The cost model used.
    pub cost: CostModel,
    /// The model's class probabilities (last run).
    pub output: Vec<f32>,
    /// The same network as one batch per run.
    pub batch: BatchModelReport,
}

/// The model run as one batch per run (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchModelReport {
    /// Runs made.
    pub runs: usize,
    /// Kernel launches per run (records in the batch).
    pub launches_per_run: usize,
    /// Kernel crossings (ioctls) per run.
    pub crossings_per_run: f64,
    /// `HAP_mmap`s per run (the DSP shell's ledger).
    pub maps_per_run: f64,
    /// Distinct leases in the batch.
    pub distinct_leases: usize,
    /// Per node comparison.
    pub nodes: Vec<NodeReport>,
    /// Simulated latency per run (cost model over the run's ioctls).
    pub simulated: LatencyDistribution,
    /// Host wall time per run, including qemu's emulation (not DSP time).
    pub host_wall: LatencyDistribution,
}

impl ModelReport {
    /// One line for `hexrpc selftest`'s "numerics".
    pub fn numerics_line(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| format!("{} {} (max {} ulp)", n.name, n.rule, n.max_ulp)).collect();
        format!("model conv->relu->pool->dense->softmax under qemu-hexagon matches the reference: {}", nodes.join(", "))
    }

    /// One line for `hexrpc selftest`'s batched numerics.
    pub fn batch_numerics_line(&self) -> String {
        let b = &self.batch;
        let nodes: Vec<String> = b.nodes.iter().map(|n| format!("{} {} (max {} ulp)", n.name, n.rule, n.max_ulp)).collect();
        format!(
            "the same model as ONE batch ({} launches, {} crossing and {} HAP_mmaps per run, {} distinct leases) matches the reference and the per-kernel output bitwise: {}",
            b.launches_per_run,
            b.crossings_per_run,
            b.maps_per_run,
            b.distinct_leases,
            nodes.join(", ")
        )
    }

    /// One line for `hexrpc selftest`'s batched latency; always says simulated.
    pub fn batch_latency_line(&self) -> String {
        format!(
            "simulated per model run as one batch ({:?}/crossing + {:?}/KiB): {} (five launches: p50={:?}); host wall time under emulation (not DSP time): {}",
            self.cost.per_crossing, self.cost.per_kib_copied, self.batch.simulated, self.simulated.p50, self.batch.host_wall
        )
    }

    /// One line for `hexrpc selftest`'s "latency"; always says simulated.
    pub fn latency_line(&self) -> String {
        format!(
            "simulated per model run ({} launches, {:?}/crossing + {:?}/KiB): {}; host wall time under emulation (not DSP time): {}",
            self.launches_per_run, self.cost.per_crossing, self.cost.per_kib_copied, self.simulated, self.host_wall
        )
    }
}

fn check_acc(node: &'static str, got: &[f32], want: &[f32], scale: &[f32], terms: usize) -> Result<NodeReport, ModelError> {
    let mut rep = NodeReport { name: node, elements: got.len(), max_ulp: 0, max_rel: 0.0, rule: "within n*eps*sum|terms|" };
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        let bound = r::acc_bound(*s, terms);
        let d = (g - w).abs();
        if d > bound || g.is_nan() {
            return Err(ModelError::Mismatch { node, detail: format!("element {i}: {g} vs {w} (bound {bound})") });
        }
        rep.max_ulp = rep.max_ulp.max(r::ulp_diff(*g, *w));
        rep.max_rel = rep.max_rel.max((d / bound) as f64);
    }
    Ok(rep)
}

fn check_exact(node: &'static str, got: &[f32], want: &[f32]) -> Result<NodeReport, ModelError> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.to_bits() != w.to_bits() {
            return Err(ModelError::Mismatch { node, detail: format!("element {i}: {g} vs {w} (bitwise rule)") });
        }
    }
    Ok(NodeReport { name: node, elements: got.len(), max_ulp: 0, max_rel: 0.0, rule: "bitwise" })
}

fn check_softmax(got: &[f32], want: &[f64]) -> Result<NodeReport, ModelError> {
    let node = "softmax";
    let mut rep = NodeReport { name: node, elements: got.len(), max_ulp: 0, max_rel: 0.0, rule: "relative 8e-6 vs f64" };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let rel = ((*g as f64 - w) / w).abs();
        if rel.is_nan() || rel > r::SOFTMAX_MAX_REL as f64 {
            return Err(ModelError::Mismatch { node, detail: format!("element {i}: {g} vs {w} (relative {rel:e})") });
        }
        rep.max_rel = rep.max_rel.max(rel);
        rep.max_ulp = rep.max_ulp.max(r::ulp_diff(*g, *w as f32));
    }
    Ok(rep)
}

fn abs(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| x.abs()).collect()
}

fn merge(into: &mut Vec<NodeReport>, new: Vec<NodeReport>) {
    if into.is_empty() {
        *into = new;
        return;
    }
    for (a, b) in into.iter_mut().zip(new) {
        a.max_ulp = a.max_ulp.max(b.max_ulp);
        a.max_rel = a.max_rel.max(b.max_rel);
    }
}

/// Runs the fixed model `opts.runs` times through the whole stack on a fresh bench with
/// executor, launch by launch and then as one batch per run (see the module docs). Needs
/// clang-19, ld.lld-19 and qemu-hexagon ([`ModelError::Unavailable`] otherwise, with the reason).
pub fn run_model(opts: &ModelOptions) -> Result<ModelReport, ModelError> {
    let tc = tools_available().map_err(ModelError::Unavailable)?;
    let images =
        NODES.iter().map(|(kernel, sig)| build_image(&tc, kernel, sig, EntryOptions::V2, opts.flavour)).collect::<Result<Vec<_>, _>>()?;
    let table_image = build_table_image(&tc, &NODES, opts.flavour)?;
    let sigs = signatures()?;
    let bench = Bench::with_config(BenchConfig { cost: opts.cost, ..BenchConfig::for_board(opts.board) });
    let stack = Stack::start(bench.clone())?;
    let libs = NODES.iter().zip(&images).map(|((k, _), img)| stack.open(k, img)).collect::<Result<Vec<_>, _>>()?;
    let table = stack.open(TABLE, table_image)?;

    let p = Params::seeded();
    let weights = p.weights(stack.session())?;
    // One activation lease for the per-kernel runs, another (zeroed) for the batched runs.
    let acts = p.activations(stack.session())?;
    let acts_b = p.activations(stack.session())?;
    let w = weight_views(&weights)?;
    let per = act_views(&acts)?;
    let bat = act_views(&acts_b)?;
    // Every node of one run, checked against the reference applied to its actual input.
    let check = |a: &[BufferView<'_>; 6]| -> Result<(Vec<NodeReport>, Vec<f32>), ModelError> {
        let [i, c, re, pool, d, output] = [&a[0], &a[1], &a[2], &a[3], &a[4], &a[5]].map(read_f32s);
        let (i, c, re, pool, d, output) = (i?, c?, re?, pool?, d?, output?);
        let want_c = r::conv2d_f32(&i, &p.conv_w, &p.conv_b, IN_C, IN_H, IN_W, FILTERS);
        let scale_c = r::conv2d_f32(&abs(&i), &abs(&p.conv_w), &abs(&p.conv_b), IN_C, IN_H, IN_W, FILTERS);
        let want_d = r::dense_f32(&pool, &p.dense_w, &p.dense_b, FLAT, CLASSES);
        let scale_d = r::dense_f32(&abs(&pool), &abs(&p.dense_w), &abs(&p.dense_b), FLAT, CLASSES);
        let nodes = vec![
            check_acc("conv", &c, &want_c, &scale_c, IN_C * 9 + 1)?,
            check_exact("relu", &re, &r::relu_f32(&c))?,
            check_exact("pool", &pool, &r::maxpool2_f32(&re, FILTERS, CONV_H, CONV_W))?,
            check_acc("dense", &d, &want_d, &scale_d, FLAT + 1)?,
            check_softmax(&output, &r::softmax_f64(&d, 1, CLASSES))?,
        ];
        // End to end against the reference chain from the input alone.
        let chain = r::softmax_f64(
            &r::dense_f32(&r::maxpool2_f32(&r::relu_f32(&want_c), FILTERS, CONV_H, CONV_W), &p.dense_w, &p.dense_b, FLAT, CLASSES),
            1,
            CLASSES,
        );
        check_softmax(&output, &chain).map_err(|e| ModelError::Mismatch { node: "model", detail: e.to_string() })?;
        Ok((nodes, output))
    };
    let same = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());

    let runs = opts.runs.max(1);
    let mut sim = Vec::with_capacity(runs);
    let mut wall = Vec::with_capacity(runs);
    let mut nodes: Vec<NodeReport> = Vec::new();
    let mut first_output: Option<Vec<f32>> = None;
    let mut output = Vec::new();
    let per_nodes = node_args(&w, &per);
    for run in 0..runs {
        let before = bench.latencies().len();
        let t0 = Instant::now();
        for (k, node) in per_nodes.iter().enumerate() {
            launch_node(&libs[k], &sigs[k], node)?;
        }
        wall.push(t0.elapsed());
        sim.push(bench.latencies()[before..].iter().map(|s| s.simulated).sum());
        output = read_f32s(&per[5])?;
        match &first_output {
            None => first_output = Some(output.clone()),
            Some(f) if !same(f, &output) => {
                return Err(ModelError::Mismatch { node: "model", detail: format!("run {run} output differs from run 0") });
            }
            Some(_) => {}
        }
        if run == 0 || run + 1 == runs {
            merge(&mut nodes, check(&per)?.0);
        }
    }

    // The same network as one batch per run: built once, run `runs` times.
    let bat_nodes = node_args(&w, &bat);
    let mut batch = build_batch(&sigs, &bat_nodes)?;
    let (mut bsim, mut bwall, mut bnodes) = (Vec::with_capacity(runs), Vec::with_capacity(runs), Vec::new());
    let (mut crossed, mut mapped) = (0u64, 0usize);
    for run in 0..runs {
        let (before, calls0, ledger0) = (bench.latencies().len(), crossings(&bench), bench.ledger().len());
        let t0 = Instant::now();
        let done = batch.run(&table)?;
        bwall.push(t0.elapsed());
        if done.launches != NODES.len() {
            return Err(ModelError::Mismatch { node: "model", detail: format!("the batch ran {} of 5 nodes", done.launches) });
        }
        bsim.push(bench.latencies()[before..].iter().map(|s| s.simulated).sum());
        crossed += crossings(&bench) - calls0;
        mapped += maps(&bench, ledger0);
        if run == 0 || run + 1 == runs {
            let (n, out) = check(&bat)?;
            if !same(&out, &output) {
                return Err(ModelError::Mismatch {
                    node: "model",
                    detail: format!("batched run {run}: output differs from the per-kernel run's"),
                });
            }
            merge(&mut bnodes, n);
        }
        if run % 100 == 99 {
            bench.clear_ledger();
        }
    }
    let batch_report = BatchModelReport {
        runs,
        launches_per_run: batch.len(),
        crossings_per_run: crossed as f64 / runs as f64,
        maps_per_run: mapped as f64 / runs as f64,
        distinct_leases: batch.lease_count(),
        nodes: bnodes,
        simulated: LatencyDistribution::of(&bsim),
        host_wall: LatencyDistribution::of(&bwall),
    };
    drop(libs);
    drop(table);
    Ok(ModelReport {
        runs,
        launches_per_run: NODES.len(),
        nodes,
        simulated: LatencyDistribution::of(&sim),
        host_wall: LatencyDistribution::of(&wall),
        cost: opts.cost,
        output,
        batch: batch_report,
    })
}
