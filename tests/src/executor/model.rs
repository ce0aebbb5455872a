//! The whole stack on the bench with executor, and the fixed model: conv -> relu -> pool ->
//! dense -> softmax with seeded weights, one launch per node.
//!
//! [`Stack`] is a HAL [`Session`] on a [`Bench`] with the runtime's [`ReverseService`](hexrpc_runtime::reverse::ReverseService) serving its
//! listener (following recoveries) and acting as the image registry; [`launch`] packs a v2 launch
//! with the runtime's packer and invokes it through the HAL.
//!
//! [`run_model`] builds the five libraries, opens them, and runs the network `runs` times. Every
//! node's output of the first and the last run is compared with the Rust reference applied to
//! the node's actual input (bounds in [`reference`](super::reference)); every run's final output
//! must equal the first run's bitwise. Then it runs the same network **as one batch** `runs`
//! times: one library holding the five kernels (`write_batch_entry`), one `Batch` built once,
//! one crossing per model run, each lease mapped once per run, on a separate, zeroed activation
//! lease; every node is checked the same way and the output must equal the per-kernel output
//! bitwise. Latency per run is reported twice, both never DSP time:
//! the **simulated** crossing cost of the bench's [`CostModel`] (sum over the run's ioctls), and
//! the **host wall time** of the run, which includes qemu's emulation of the kernels.

use std::time::{Duration, Instant};

use hexrpc_bsp::DeviceAccess;
use hexrpc_hal::{BufferView, HalError, Library, Session};
use hexrpc_runtime::launch::{AbiVersion, Batch, BatchError, BufferRef, EntryOptions, PackError, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::{ServedSession, StartError};

use super::build::{build_image, build_table_image, tools_available, BuildError, Flavour};
use super::reference::{self as r, f32_bytes, f32s_of, Rng};
use crate::{Bench, BenchConfig, CostModel};

/// Why the stack or the model failed.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelError {
    /// clang-19, ld.lld-19 or qemu-hexagon cannot be used here (the reason).
    Unavailable(String),
    /// An artefact did not build.
    Build(BuildError),
    /// The stack refused or failed a call.
    Hal(HalError),
    /// The packer refused a launch.
    Pack(PackError),
    /// The batch was refused or failed.
    Batch(BatchError),
    /// The driver layer refused the argument list.
    Args(String),
    /// The reverse service could not start.
    Service(String),
    /// A node's output differs from the reference beyond its bound.
    Mismatch {
        /// Node name.
        node: &'static str,
        /// What differed.
        detail: String,
    },
}

impl core::fmt::Display for ModelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ModelError::Unavailable(e) => write!(f, "executor unavailable: {e}"),
            ModelError::Build(e) => write!(f, "build: {e}"),
            ModelError::Hal(e) => write!(f, "stack: {e}"),
            ModelError::Pack(e) => write!(f, "pack: {e:?}"),
            ModelError::Batch(e) => write!(f, "batch: {e}"),
            ModelError::Args(e) => write!(f, "arguments: {e}"),
            ModelError::Service(e) => write!(f, "reverse service: {e}"),
            ModelError::Mismatch { node, detail } => write!(f, "node {node}: {detail}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<HalError> for ModelError {
    fn from(e: HalError) -> Self {
        ModelError::Hal(e)
    }
}
impl From<BuildError> for ModelError {
    fn from(e: BuildError) -> Self {
        ModelError::Build(e)
    }
}
impl From<BatchError> for ModelError {
    fn from(e: BatchError) -> Self {
        ModelError::Batch(e)
    }
}
impl From<PackError> for ModelError {
    fn from(e: PackError) -> Self {
        ModelError::Pack(e)
    }
}

/// A HAL session on a bench with the reverse service serving it (the runtime's
/// [`ServedSession`]).
pub struct Stack {
    served: ServedSession<Bench>,
    bench: Bench,
}

impl Stack {
    /// Starts a session on `bench` and the reverse service for it.
    pub fn start(bench: Bench) -> Result<Stack, ModelError> {
        let policy = FilePolicy::for_board(bench.board()).map_err(|e| ModelError::Service(format!("{e:?}")))?;
        let served = ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), policy).map_err(|e| match e {
            StartError::Session(h) => ModelError::Hal(h),
            StartError::Thread(t) => ModelError::Service(t.to_string()),
        })?;
        Ok(Stack { served, bench })
    }

    /// The bench.
    pub fn bench(&self) -> &Bench {
        &self.bench
    }

    /// The HAL session.
    pub fn session(&self) -> &Session<Bench> {
        self.served.session()
    }

    /// Opens `image` (published in the reverse service) as library `name`.
    pub fn open(&self, name: &str, image: &'static [u8]) -> Result<Library<'_, Bench>, ModelError> {
        Ok(self.served.open_library(name, image)?)
    }
}

/// Packs a v2 launch of `sig` on `views` and `scalars` and invokes it on `lib`; returns the
/// microseconds the entry measured (emulator host clock, not DSP time).
pub fn launch(lib: &Library<'_, Bench>, sig: &Signature, views: &[&BufferView<'_>], scalars: &[Scalar]) -> Result<u64, ModelError> {
    let refs: Vec<BufferRef<'_>> = views.iter().map(|v| BufferRef::of(*v)).collect();
    let mut packed = PackedLaunch::new(AbiVersion::V2, sig, &refs, scalars)?;
    lib.invoke(&mut packed.invoke_args().map_err(|e| ModelError::Args(format!("{e:?}")))?)?;
    Ok(packed.dsp_micros())
}

fn v<'a>(lease: &'a hexrpc_hal::IonLease<'_, Bench>, off: usize, n: usize) -> Result<BufferView<'a>, HalError> {
    lease.view(off, 4 * n)
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
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            runs: 1000,
            cost: CostModel { per_crossing: Duration::from_micros(60), per_kib_copied: Duration::from_micros(2), sleep: false },
            flavour: Flavour::Scalar,
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

/// The activation views of one activation lease: input, conv, relu, pool, dense, softmax.
fn act_views<'a>(acts: &'a hexrpc_hal::IonLease<'_, Bench>) -> Result<[BufferView<'a>; 6], HalError> {
    Ok([
        v(acts, Layout::INPUT, IN_C * IN_H * IN_W)?,
        v(acts, Layout::CONV, FILTERS * CONV_H * CONV_W)?,
        v(acts, Layout::RELU, FILTERS * CONV_H * CONV_W)?,
        v(acts, Layout::POOL, FLAT)?,
        v(acts, Layout::DENSE, CLASSES)?,
        v(acts, Layout::SOFTMAX, CLASSES)?,
    ])
}

/// Runs the fixed model `opts.runs` times through the whole stack on a fresh bench, launch by
/// launch and then as one batch per run (see the module docs). Needs clang-19, ld.lld-19 and
/// qemu-hexagon ([`ModelError::Unavailable`] otherwise, with the reason).
pub fn run_model(opts: &ModelOptions) -> Result<ModelReport, ModelError> {
    let tc = tools_available().map_err(ModelError::Unavailable)?;
    let mut images = Vec::with_capacity(NODES.len());
    for (kernel, sig) in NODES {
        images.push((
            kernel,
            Signature::parse(sig).map_err(|e| ModelError::Build(BuildError::Entry(format!("{e:?}"))))?,
            build_image(&tc, kernel, sig, EntryOptions::V2, opts.flavour)?,
        ));
    }
    let table_image = build_table_image(&tc, &NODES, opts.flavour)?;
    let sigs: Vec<Signature> = images.iter().map(|i| i.1).collect();
    let bench = Bench::with_config(BenchConfig { cost: opts.cost, ..BenchConfig::default() });
    let stack = Stack::start(bench.clone())?;
    let libs = images.iter().map(|(k, _, img)| stack.open(k, img)).collect::<Result<Vec<_>, _>>()?;
    let table = stack.open("model_table", table_image)?;

    // Seeded weights and input.
    let mut rng = Rng(0x5EED_0008);
    let conv_w = rng.f32s(FILTERS * IN_C * 9, 0.5);
    let conv_b = rng.f32s(FILTERS, 0.1);
    let dense_w = rng.f32s(CLASSES * FLAT, 0.2);
    let dense_b = rng.f32s(CLASSES, 0.1);
    let input = rng.f32s(IN_C * IN_H * IN_W, 1.0);

    let mut weights = stack.session().alloc(Layout::WEIGHTS)?;
    weights.write_at(Layout::CONV_W, &f32_bytes(&conv_w))?;
    weights.write_at(Layout::CONV_B, &f32_bytes(&conv_b))?;
    weights.write_at(Layout::DENSE_W, &f32_bytes(&dense_w))?;
    weights.write_at(Layout::DENSE_B, &f32_bytes(&dense_b))?;
    // One activation lease for the per-kernel runs, another (zeroed) for the batched runs.
    let mut acts = stack.session().alloc(Layout::ACTS)?;
    acts.write_at(Layout::INPUT, &f32_bytes(&input))?;
    let mut acts_b = stack.session().alloc(Layout::ACTS)?;
    acts_b.fill(0, Layout::ACTS, 0)?;
    acts_b.write_at(Layout::INPUT, &f32_bytes(&input))?;

    let w_conv = v(&weights, Layout::CONV_W, conv_w.len())?;
    let b_conv = v(&weights, Layout::CONV_B, FILTERS)?;
    let w_dense = v(&weights, Layout::DENSE_W, dense_w.len())?;
    let b_dense = v(&weights, Layout::DENSE_B, CLASSES)?;
    let per = act_views(&acts)?;
    let bat = act_views(&acts_b)?;
    let u = |x: usize| Scalar::U32(x as u32);
    let read = |view: &BufferView<'_>| -> Result<Vec<f32>, ModelError> {
        let mut b = vec![0u8; view.len()];
        view.read(&mut b)?;
        Ok(f32s_of(&b))
    };
    // Every node of one run, checked against the reference applied to its actual input.
    let check = |a: &[BufferView<'_>; 6]| -> Result<(Vec<NodeReport>, Vec<f32>), ModelError> {
        let (i, c, re, p, d, output) = (read(&a[0])?, read(&a[1])?, read(&a[2])?, read(&a[3])?, read(&a[4])?, read(&a[5])?);
        let want_c = r::conv2d_f32(&i, &conv_w, &conv_b, IN_C, IN_H, IN_W, FILTERS);
        let scale_c = r::conv2d_f32(&abs(&i), &abs(&conv_w), &abs(&conv_b), IN_C, IN_H, IN_W, FILTERS);
        let want_d = r::dense_f32(&p, &dense_w, &dense_b, FLAT, CLASSES);
        let scale_d = r::dense_f32(&abs(&p), &abs(&dense_w), &abs(&dense_b), FLAT, CLASSES);
        let nodes = vec![
            check_acc("conv", &c, &want_c, &scale_c, IN_C * 9 + 1)?,
            check_exact("relu", &re, &r::relu_f32(&c))?,
            check_exact("pool", &p, &r::maxpool2_f32(&re, FILTERS, CONV_H, CONV_W))?,
            check_acc("dense", &d, &want_d, &scale_d, FLAT + 1)?,
            check_softmax(&output, &r::softmax_f64(&d, 1, CLASSES))?,
        ];
        // End to end against the reference chain from the input alone.
        let chain = r::softmax_f64(
            &r::dense_f32(&r::maxpool2_f32(&r::relu_f32(&want_c), FILTERS, CONV_H, CONV_W), &dense_w, &dense_b, FLAT, CLASSES),
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
    let [x_in, x_conv, x_relu, x_pool, x_dense, x_soft] = &per;
    for run in 0..runs {
        let before = bench.latencies().len();
        let t0 = Instant::now();
        launch(&libs[0], &sigs[0], &[x_in, &w_conv, &b_conv, x_conv], &[u(IN_C), u(IN_H), u(IN_W), u(FILTERS)])?;
        launch(&libs[1], &sigs[1], &[x_conv, x_relu], &[u(FILTERS * CONV_H * CONV_W)])?;
        launch(&libs[2], &sigs[2], &[x_relu, x_pool], &[u(FILTERS), u(CONV_H), u(CONV_W)])?;
        launch(&libs[3], &sigs[3], &[x_pool, &w_dense, &b_dense, x_dense], &[u(FLAT), u(CLASSES)])?;
        launch(&libs[4], &sigs[4], &[x_dense, x_soft], &[u(1), u(CLASSES)])?;
        wall.push(t0.elapsed());
        sim.push(bench.latencies()[before..].iter().map(|s| s.simulated).sum());
        output = read(x_soft)?;
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
    let [y_in, y_conv, y_relu, y_pool, y_dense, y_soft] = &bat;
    let b = BufferRef::of;
    let mut batch = Batch::new(&sigs)?;
    batch.push(0, &[b(y_in), b(&w_conv), b(&b_conv), b(y_conv)], &[u(IN_C), u(IN_H), u(IN_W), u(FILTERS)])?;
    batch.push(1, &[b(y_conv), b(y_relu)], &[u(FILTERS * CONV_H * CONV_W)])?;
    batch.push(2, &[b(y_relu), b(y_pool)], &[u(FILTERS), u(CONV_H), u(CONV_W)])?;
    batch.push(3, &[b(y_pool), b(&w_dense), b(&b_dense), b(y_dense)], &[u(FLAT), u(CLASSES)])?;
    batch.push(4, &[b(y_dense), b(y_soft)], &[u(1), u(CLASSES)])?;
    let (mut bsim, mut bwall, mut bnodes) = (Vec::with_capacity(runs), Vec::with_capacity(runs), Vec::new());
    let (mut crossings, mut maps) = (0u64, 0usize);
    for run in 0..runs {
        let (before, calls0, ledger0) = (bench.latencies().len(), bench.counts().calls.values().sum::<u64>(), bench.ledger().len());
        let t0 = Instant::now();
        let done = batch.run(&table)?;
        bwall.push(t0.elapsed());
        if done.launches != NODES.len() {
            return Err(ModelError::Mismatch { node: "model", detail: format!("the batch ran {} of 5 nodes", done.launches) });
        }
        bsim.push(bench.latencies()[before..].iter().map(|s| s.simulated).sum());
        crossings += bench.counts().calls.values().sum::<u64>() - calls0;
        maps += bench.ledger()[ledger0..].iter().filter(|e| matches!(e.event, crate::LedgerEvent::Map { .. })).count();
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
        crossings_per_run: crossings as f64 / runs as f64,
        maps_per_run: maps as f64 / runs as f64,
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
