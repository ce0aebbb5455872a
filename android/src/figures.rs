//! `hexrpc bench`: what hexrpc adds per launch, what a launch costs on the bench, and the reverse
//! file service's streaming throughput. Figures from the bench are host time of a simulated
//! kernel and DSP: never device figures, and labelled so.

use std::time::Instant;

use hexrpc_bench::measure::{CountingAlloc, NullSys};
use hexrpc_bench::CallKind;
use hexrpc_drivers::{adsprpc, Fd};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackedLaunch, Scalar, Signature};

use crate::checks;
use crate::json;

/// The process's allocator: the system one, counting (for `allocations_per_launch`).
#[global_allocator]
pub static ALLOCATIONS: CountingAlloc = CountingAlloc::new();

/// The figures, by their JSON names.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Packing a 3-buffer v2 launch plus one INVOKE_ATTRS through a seam that returns at once.
    pub launch_overhead_ns: f64,
    /// A whole 3-buffer launch through HAL, driver model and DSP model on the bench.
    pub bench_round_trip_ns: f64,
    /// Kernel crossings (ioctls) per steady-state launch.
    pub crossings_per_launch: f64,
    /// Heap allocations per steady-state launch by the launching thread (hexrpc's own path,
    /// null seam).
    pub allocations_per_launch: f64,
    /// Streaming a 4 MiB image through 64 KiB freads of the reverse service.
    pub reverse_stream_mib_s: f64,
    /// A plain memcpy of the same bytes, in the same run.
    pub memcpy_mib_s: f64,
    /// Launches measured for the per-launch figures.
    pub launches: u64,
    /// The model network (5 nodes) on the bench's DSP model, per kernel and as one batch.
    pub model: hexrpc_scenarios::netmodel::NetFigures,
}

/// The cost model the model-latency figures use (as the executor's model run): 60 us per
/// crossing + 2 us per KiB copied. Simulated, never a device figure.
pub const MODEL_COST: hexrpc_bench::CostModel = hexrpc_bench::CostModel {
    per_crossing: std::time::Duration::from_micros(60),
    per_kib_copied: std::time::Duration::from_micros(2),
    sleep: false,
};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs every measurement; `scale` (1 normally) multiplies the repetitions.
pub fn run(scale: u32) -> Result<Figures, String> {
    let mut f = Figures::default();
    let sig = Signature::parse("buf,buf,buf,i32,f32").map_err(|e| e.to_string())?;
    let scalars = [Scalar::I32(3), Scalar::F32(0.5)];

    // 1. hexrpc's own cost: pack + one ioctl through a seam that returns at once.
    let null = NullSys::new();
    let owner = ();
    let bufs = [
        BufferRef::borrowing(&owner, Fd(10), 65_536, 0, 4096),
        BufferRef::borrowing(&owner, Fd(11), 65_536, 4096, 4096),
        BufferRef::borrowing(&owner, Fd(12), 65_536, 8192, 4096),
    ];
    let one = || -> Result<(), String> {
        let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &scalars).map_err(|e| e.to_string())?;
        let mut call = packed.invoke_args();
        let call = call.as_mut().map_err(|e| format!("{e:?}"))?;
        let r = call.with_downstream(|args| adsprpc::invoke_attrs(&null, Fd(3), 0x100, args)).map_err(|e| format!("{e:?}"))?;
        r.map_err(|e| e.to_string())
    };
    for _ in 0..1000 {
        one()?;
    }
    let batch = 1000u32;
    let batches = 30 * scale;
    let mut per_launch = Vec::with_capacity(batches as usize);
    let (ioctls0, allocs0) = (null.ioctls(), CountingAlloc::thread_allocations());
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..batch {
            one()?;
        }
        per_launch.push(t.elapsed().as_nanos() as f64 / f64::from(batch));
    }
    let launches = u64::from(batch * batches);
    f.launch_overhead_ns = median(per_launch);
    f.allocations_per_launch = (CountingAlloc::thread_allocations() - allocs0) as f64 / launches as f64;
    let null_crossings = (null.ioctls() - ioctls0) as f64 / launches as f64;
    f.launches = launches;

    // 2. A whole launch on the bench: HAL library invoke, driver model, DSP entry model.
    let bench = checks::bench();
    let policy = hexrpc_runtime::reverse::FilePolicy::for_board(bench.board()).map_err(|e| format!("{e:?}"))?;
    let served =
        hexrpc_runtime::ServedSession::start(bench.clone(), &hexrpc_bsp::DeviceAccess::for_bench(), policy).map_err(|e| e.to_string())?;
    let lib = served.open_library(checks::MODEL, checks::image()).map_err(|e| e.to_string())?;
    let lease = served.session().alloc(64 * 1024).map_err(|e| e.to_string())?;
    let views = [lease.view(0, 4096), lease.view(8192, 4096), lease.view(20_000, 4096)];
    let views: Vec<_> = views.into_iter().collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let sig2 = Signature::parse("buf,buf,u32").map_err(|e| e.to_string())?;
    let round = || -> Result<(), String> {
        let bufs = [BufferRef::of(&views[0]), BufferRef::of(&views[1])];
        let mut packed = PackedLaunch::new(AbiVersion::V2, &sig2, &bufs, &[Scalar::U32(1)]).map_err(|e| e.to_string())?;
        lib.invoke(&mut packed.invoke_args().map_err(|e| format!("{e:?}"))?).map_err(|e| e.to_string())
    };
    for _ in 0..200 {
        round()?;
    }
    let rounds = 2000 * scale;
    let calls = |b: &hexrpc_bench::Bench| -> u64 { b.counts().calls.values().sum() };
    let before = calls(&bench);
    let mut samples = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let t = Instant::now();
        round()?;
        samples.push(t.elapsed().as_nanos() as f64);
    }
    let crossings = (calls(&bench) - before) as f64 / f64::from(rounds);
    f.bench_round_trip_ns = median(samples);
    f.crossings_per_launch = crossings;
    if (null_crossings - crossings).abs() > f64::EPSILON {
        return Err(format!("crossings disagree: {null_crossings} through the null seam, {crossings} on the bench"));
    }
    let _ = bench.counts().of(CallKind::RpcInvokeAttrs);
    drop(lib);
    drop(lease);
    drop(served);

    // 3. The reverse file service streaming a library image.
    let t = hexrpc_scenarios::throughput::stream_throughput(checks::bench(), 4 << 20, 64 * 1024, 10 * scale).map_err(|e| e.to_string())?;
    f.reverse_stream_mib_s = t.reverse_stream_mib_s;
    f.memcpy_mib_s = t.memcpy_mib_s;

    // 4. The model network: five launches vs one batch (crossings, maps, packing, simulated latency).
    f.model = hexrpc_scenarios::netmodel::measure(MODEL_COST, (100 * scale) as usize)?;
    Ok(f)
}

/// The flat JSON object.
pub fn to_json(f: &Figures) -> String {
    let mut out = String::new();
    let mut o = json::Object::new(&mut out);
    o.float("launch_overhead_ns", f.launch_overhead_ns)
        .float("bench_round_trip_ns", f.bench_round_trip_ns)
        .float("crossings_per_launch", f.crossings_per_launch)
        .float("allocations_per_launch", f.allocations_per_launch)
        .float("reverse_stream_mib_s", f.reverse_stream_mib_s)
        .float("memcpy_mib_s", f.memcpy_mib_s)
        .num("launches", f.launches)
        .float("batch_crossings_per_model", f.model.batch.crossings)
        .float("batch_maps_per_model", f.model.batch.maps)
        .num("batch_distinct_leases", f.model.distinct_leases as u64)
        .float("batch_pack_ns", f.model.batch_pack_ns)
        .float("per_kernel_crossings_per_model", f.model.per_kernel.crossings)
        .float("per_kernel_maps_per_model", f.model.per_kernel.maps)
        .raw("model_latency_us", |o| {
            let mut m = json::Object::new(o);
            m.float("batch", f.model.batch.latency_us).float("per_kernel", f.model.per_kernel.latency_us).bool("simulated", true).str(
                "cost_model",
                &format!("{} us/crossing + {} us/KiB", MODEL_COST.per_crossing.as_micros(), MODEL_COST.per_kib_copied.as_micros()),
            );
            m.end();
        })
        .str("platform", "bench")
        .bool("simulated", true);
    o.end();
    out.push('\n');
    out
}

/// The readable report.
pub fn to_text(f: &Figures) -> String {
    format!(
        "hexrpc bench (this machine; the round trip runs on the BENCH: simulated kernel and DSP, not a device figure)\n\
         launch overhead (pack 3 buffers + 1 ioctl, null seam)   {:>12.1} ns\n\
         bench round trip (whole launch, simulated DSP)           {:>12.1} ns   [simulated]\n\
         kernel crossings per launch                              {:>12.2}\n\
         heap allocations per launch                              {:>12.2}\n\
         reverse service: 4 MiB in 64 KiB freads                  {:>12.0} MiB/s\n\
         memcpy of the same bytes                                 {:>12.0} MiB/s   ({:.0}% of memcpy)\n\
         model network (5 nodes), per kernel: crossings / maps     {:>6.0} / {:<6.0}\n\
         model network as one batch: crossings / maps             {:>6.0} / {:<6.0} ({} distinct leases)\n\
         packing the model's batch (5 records)                    {:>12.1} ns\n\
         model latency per kernel vs batch ({} us/crossing + {} us/KiB) {:>6.0} / {:.0} us   [simulated]\n",
        f.launch_overhead_ns,
        f.bench_round_trip_ns,
        f.crossings_per_launch,
        f.allocations_per_launch,
        f.reverse_stream_mib_s,
        f.memcpy_mib_s,
        100.0 * f.reverse_stream_mib_s / f.memcpy_mib_s,
        f.model.per_kernel.crossings,
        f.model.per_kernel.maps,
        f.model.batch.crossings,
        f.model.batch.maps,
        f.model.distinct_leases,
        f.model.batch_pack_ns,
        MODEL_COST.per_crossing.as_micros(),
        MODEL_COST.per_kib_copied.as_micros(),
        f.model.per_kernel.latency_us,
        f.model.batch.latency_us,
    )
}
