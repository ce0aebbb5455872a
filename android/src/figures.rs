//! `hexrpc bench`: what hexrpc adds per launch, what a launch costs on the bench, and the reverse
//! file service's streaming throughput. Figures from the bench are host time of a simulated
//! kernel and DSP: never device figures, and labelled so.

use std::time::Instant;

use hexrpc_bench::measure::{CountingAlloc, NullSys};
use hexrpc_bench::CallKind;
use hexrpc_drivers::adsprpc::{self, fastrpc_ioctl_invoke, fastrpc_ioctl_invoke_attrs};
use hexrpc_drivers::{Fd, NullDevice, RustixSys};
use hexrpc_runtime::launch::{AbiVersion, Batch, BufferRef, PackedLaunch, Scalar, Signature};

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
    /// One raw `FASTRPC_IOCTL_INVOKE_ATTRS` on /dev/null (ENOTTY), straight through rustix.
    pub raw_ioctl_ns: f64,
    /// Packing the 3-buffer launch (in place, as `Kernel::launch` does) plus the same ioctl
    /// through the real seam (`RustixSys`).
    pub seam_launch_ns: f64,
    /// `seam_launch_ns / raw_ioctl_ns`, measured interleaved in the same run.
    pub launch_vs_ioctl: f64,
    /// The same seam launch with a deadline (`hexrpc_hal::deadline::run`, the path of every
    /// deadline launch) over it without one, interleaved in the same run.
    pub deadline_launch_ratio: f64,
    /// An empty `Batch::new`.
    pub batch_new_ns: f64,
    /// Building the model's 5-record batch, less an empty `Batch::new`, per record.
    pub batch_build_ns_per_record: f64,
    /// Streaming a 4 MiB image through 64 KiB freads of the reverse service.
    pub reverse_stream_mib_s: f64,
    /// A memcpy of the same bytes in the same pattern (64 KiB chunks into one reused buffer).
    pub memcpy_mib_s: f64,
    /// `reverse_stream_mib_s / memcpy_mib_s`.
    pub reverse_stream_vs_memcpy: f64,
    /// Launches measured for the per-launch figures.
    pub launches: u64,
    /// The model network (5 nodes) on the bench's DSP model, per kernel and as one batch.
    pub model: hexrpc_scenarios::netmodel::NetFigures,
    /// The DSP map cache on the bench's DSP model (simulated).
    pub maps: MapFigures,
}

/// What the DSP map cache saves, on the bench's DSP model (a 2-lease launch repeated on the
/// same leases, after a warm-up). Simulated: counts from the model of the generated entry, and
/// latencies from [`MODEL_COST`], never device figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct MapFigures {
    /// `HAP_mmap`s per steady-state launch with the map cache (0 expected).
    pub cached: f64,
    /// The same without the cache (one per lease).
    pub uncached: f64,
    /// Leases per launch.
    pub leases: u64,
    /// Median simulated launch latency with the cache, in microseconds.
    pub cached_latency_us: f64,
    /// The same without the cache.
    pub uncached_latency_us: f64,
}

/// The cost model the model-latency figures use (as the executor's model run): 60 us per
/// crossing + 2 us per KiB copied. Simulated, never a device figure.
pub const MODEL_COST: hexrpc_bench::CostModel = hexrpc_bench::CostModel {
    per_crossing: std::time::Duration::from_micros(60),
    per_kib_copied: std::time::Duration::from_micros(2),
    per_dsp_map: std::time::Duration::from_micros(MAP_US),
    per_dsp_unmap: std::time::Duration::from_micros(UNMAP_US),
    sleep: false,
};

/// The simulated DSP cost of one `HAP_mmap` in [`MODEL_COST`] (not measured: a placeholder for
/// the SMMU and page-table work a map costs on a device, to show what the map cache saves).
pub const MAP_US: u64 = 20;
/// The simulated DSP cost of one `HAP_munmap` in [`MODEL_COST`].
pub const UNMAP_US: u64 = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The calling thread's CPU time (time it was descheduled on a busy machine is not counted).
fn cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// Medians of the CPU time per call of `a` and of `b`, measured in alternating batches of
/// `per_batch` calls (after one warm-up batch of each). A call returns false if it failed.
fn interleaved(batches: u32, per_batch: u32, mut a: impl FnMut() -> bool, mut b: impl FnMut() -> bool) -> Result<(f64, f64), String> {
    let mut ok = true;
    for _ in 0..per_batch {
        ok &= a();
        ok &= b();
    }
    let (mut va, mut vb) = (Vec::with_capacity(batches as usize), Vec::with_capacity(batches as usize));
    for _ in 0..batches {
        let t = cpu_ns();
        for _ in 0..per_batch {
            ok &= a();
        }
        va.push((cpu_ns() - t) / f64::from(per_batch));
        let t = cpu_ns();
        for _ in 0..per_batch {
            ok &= b();
        }
        vb.push((cpu_ns() - t) / f64::from(per_batch));
    }
    if !ok {
        return Err("a measured call failed".into());
    }
    Ok((median(va), median(vb)))
}

/// Pushes the model network's five launches (conv, relu, pool, dense, softmax) on two leases
/// into `b`, as `cargo bench -p hexrpc-runtime --bench launch` builds its batch.
fn push_model<'a>(b: &mut Batch<'a>, v: &[BufferRef<'a>; 10]) -> Result<(), hexrpc_runtime::Error> {
    let u = Scalar::U32;
    b.push(0, &[v[4], v[0], v[1], v[5]], &[u(1), u(12), u(12), u(4)])?;
    b.push(1, &[v[5], v[6]], &[u(400)])?;
    b.push(2, &[v[6], v[7]], &[u(4), u(10), u(10)])?;
    b.push(3, &[v[7], v[2], v[3], v[8]], &[u(100), u(10)])?;
    b.push(4, &[v[8], v[9]], &[u(1), u(10)])?;
    Ok(())
}

/// One raw INVOKE_ATTRS on /dev/null (a call, as a service makes it).
#[inline(never)]
fn raw_call(null: &NullDevice, arg: &mut fastrpc_ioctl_invoke_attrs) -> bool {
    null.invoke_attrs_raw(std::hint::black_box(arg)).is_err()
}

/// Packing a launch and sending it through the real seam on /dev/null (a call, as a service
/// makes it), packed as `Kernel::launch` packs: declared in place, then packed into.
#[inline(never)]
fn seam_call(sig: &Signature, bufs: &[BufferRef<'_>], scalars: &[Scalar], null: &NullDevice) -> bool {
    let mut p = PackedLaunch::empty(AbiVersion::V2);
    p.repack(AbiVersion::V2, sig, bufs, scalars).is_ok()
        && matches!(p.launch(&RustixSys, null.fd(), std::hint::black_box(0x100)), Err(hexrpc_drivers::Error::Os(_)))
}

/// `raw_ioctl_ns`, `seam_launch_ns`, `launch_vs_ioctl`, `deadline_launch_ratio`: the real seam on
/// /dev/null, whose ioctl fails at once with ENOTTY (qemu-user: ENOSYS). Each side is measured
/// as a function call that is not inlined into the timing loop ([`raw_call`], [`seam_call`]), as
/// a service calls either: inlined, the launch's ~1.3 KiB of stack storage and its code would
/// share the loop's frame and the comparison would measure that layout rather than the work.
fn seam_figures(f: &mut Figures, scale: u32, sig: &Signature, bufs: &[BufferRef<'_>], scalars: &[Scalar]) -> Result<(), String> {
    let null = NullDevice::open().map_err(|e| format!("/dev/null: {e}"))?;
    // A valid-looking argument: a 3-buffer launch's scalars word and real arrays behind it.
    let mut pra = [0u64; 2 * 6];
    let mut fds = [-1i32, -1, -1, 10, 11, 12];
    let mut attrs = [0u32, 0, 0, 1, 1, 1];
    let sc = PackedLaunch::new(AbiVersion::V2, sig, bufs, scalars).map_err(|e| e.to_string())?.scalars_word().raw();
    let mut raw_arg = fastrpc_ioctl_invoke_attrs {
        inv: fastrpc_ioctl_invoke { handle: 0x100, sc, pra: pra.as_mut_ptr() as u64 },
        fds: fds.as_mut_ptr() as u64,
        attrs: attrs.as_mut_ptr() as u64,
    };
    let raw = || raw_call(&null, &mut raw_arg);
    let seam = || seam_call(sig, bufs, scalars, &null);
    let (raw_ns, seam_ns) = interleaved(30 * scale, 2000, raw, seam)?;
    f.raw_ioctl_ns = raw_ns;
    f.seam_launch_ns = seam_ns;
    f.launch_vs_ioctl = seam_ns / raw_ns;

    let deadline = || {
        let r = hexrpc_hal::deadline::run(&RustixSys, std::time::Duration::from_secs(10), |_fired| {
            if seam() {
                Ok(())
            } else {
                Err(hexrpc_hal::HalError { stage: hexrpc_hal::Stage::Invoke, cause: hexrpc_hal::Cause::Invalid })
            }
        });
        r.is_ok()
    };
    let (plain_ns, deadline_ns) = interleaved(30 * scale, 2000, seam, deadline)?;
    f.deadline_launch_ratio = deadline_ns / plain_ns;
    Ok(())
}

/// `batch_new_ns` and `batch_build_ns_per_record`.
fn batch_figures(f: &mut Figures, scale: u32) -> Result<(), String> {
    let sigs = ["buf,buf,buf,buf,u32,u32,u32,u32", "buf,buf,u32", "buf,buf,u32,u32,u32", "buf,buf,buf,buf,u32,u32", "buf,buf,u32,u32"]
        .map(|s| Signature::parse(s).map_err(|e| e.to_string()));
    let sigs: [Signature; 5] = match sigs {
        [Ok(a), Ok(b), Ok(c), Ok(d), Ok(e)] => [a, b, c, d, e],
        _ => return Err("model signatures".into()),
    };
    let owner = ();
    let v = |fd, off| BufferRef::borrowing(&owner, Fd(fd), 1 << 16, off, 1024);
    let views = [v(5, 64), v(5, 2048), v(5, 4096), v(5, 8192), v(6, 128), v(6, 2048), v(6, 4096), v(6, 8192), v(6, 12288), v(6, 16384)];
    let empty = || Batch::new(std::hint::black_box(&sigs)).map(|b| std::hint::black_box(&b).is_empty()).unwrap_or(false);
    // Both batches stay where they were declared (a returned batch would be copied whole).
    let full = || match Batch::new(std::hint::black_box(&sigs)) {
        Ok(mut b) => push_model(&mut b, std::hint::black_box(&views)).is_ok() && std::hint::black_box(&b).len() == 5,
        Err(_) => false,
    };
    let (new_ns, build_ns) = interleaved(30 * scale, 2000, empty, full)?;
    f.batch_new_ns = new_ns;
    f.batch_build_ns_per_record = (build_ns - new_ns) / 5.0;
    Ok(())
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
    seam_figures(&mut f, scale, &sig, &bufs, &scalars)?;
    batch_figures(&mut f, scale)?;

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
    f.reverse_stream_vs_memcpy = t.ratio();

    // 4. The model network: five launches vs one batch (crossings, maps, packing, simulated latency).
    f.model = hexrpc_scenarios::netmodel::measure(MODEL_COST, (100 * scale) as usize)?;

    // 5. The DSP map cache: maps per steady-state launch with and without it.
    f.maps = map_figures((200 * scale) as usize)?;
    Ok(f)
}

/// `dsp_maps_per_launch` and its companions ([`MapFigures`]): the selftest kernel's model as
/// an entry with and without the map cache, `launches` launches of two leases after 10 of
/// warm-up, on a bench that charges [`MODEL_COST`].
pub fn map_figures(launches: usize) -> Result<MapFigures, String> {
    use hexrpc_bench::{BenchConfig, LedgerEvent};
    let cfg = BenchConfig { cost: MODEL_COST, ..BenchConfig::for_board(checks::board()) };
    let bench = hexrpc_bench::Bench::with_config(cfg);
    let model = &hexrpc_scenarios::catalogue::ADD_U8;
    let (plain, cached) = ("maps-plain", "maps-cached");
    bench.register_library(plain, model.library_model());
    bench.register_library(cached, model.library_model().with_map_cache());
    let policy = hexrpc_runtime::reverse::FilePolicy::for_board(bench.board()).map_err(|e| format!("{e:?}"))?;
    let served = hexrpc_runtime::ServedSession::start(bench.clone(), &checks::bench_device_access(), policy).map_err(|e| e.to_string())?;
    let sig = Signature::parse(model.signature).map_err(|e| e.to_string())?;
    let input = served.session().alloc(64 * 1024).map_err(|e| e.to_string())?;
    let output = served.session().alloc(64 * 1024).map_err(|e| e.to_string())?;
    let (a, o) = (input.view(4096, 4096).map_err(|e| e.to_string())?, output.view(0, 4096).map_err(|e| e.to_string())?);
    let mut per = [(0.0, 0.0); 2];
    for (i, (name, cache)) in [(plain, false), (cached, true)].into_iter().enumerate() {
        let lib = served.open_library_with(name, hexrpc_scenarios::catalogue::image(name), cache).map_err(|e| e.to_string())?;
        let kernel = hexrpc_runtime::Kernel::new(lib, sig, AbiVersion::V2);
        for _ in 0..10 {
            kernel.launch(&[&a, &o], &[Scalar::U32(1)]).map_err(|e| e.to_string())?;
        }
        bench.clear_logs();
        for _ in 0..launches {
            kernel.launch(&[&a, &o], &[Scalar::U32(1)]).map_err(|e| e.to_string())?;
        }
        let maps = bench.ledger().iter().filter(|e| matches!(e.event, LedgerEvent::Map { .. })).count();
        if bench.ledger_mismatches() != 0 {
            return Err(format!("{name}: the DSP model recorded contract violations"));
        }
        let p50 = bench.latency_summary(CallKind::RpcInvokeAttrs).or_else(|| bench.latency_summary(CallKind::UpInvoke));
        per[i] = (maps as f64 / launches as f64, p50.map_or(f64::NAN, |s| s.p50.as_secs_f64() * 1e6));
    }
    Ok(MapFigures { uncached: per[0].0, cached: per[1].0, leases: 2, uncached_latency_us: per[0].1, cached_latency_us: per[1].1 })
}

/// The flat JSON object.
pub fn to_json(f: &Figures) -> String {
    let mut out = String::new();
    let mut o = json::Object::new(&mut out);
    o.float("launch_overhead_ns", f.launch_overhead_ns)
        .float("bench_round_trip_ns", f.bench_round_trip_ns)
        .float("crossings_per_launch", f.crossings_per_launch)
        .float("allocations_per_launch", f.allocations_per_launch)
        .float("raw_ioctl_ns", f.raw_ioctl_ns)
        .float("seam_launch_ns", f.seam_launch_ns)
        .float("launch_vs_ioctl", f.launch_vs_ioctl)
        .float("deadline_launch_ratio", f.deadline_launch_ratio)
        .float("batch_new_ns", f.batch_new_ns)
        .float("batch_build_ns_per_record", f.batch_build_ns_per_record)
        .float("reverse_stream_mib_s", f.reverse_stream_mib_s)
        .float("memcpy_mib_s", f.memcpy_mib_s)
        .float("reverse_stream_vs_memcpy", f.reverse_stream_vs_memcpy)
        .num("launches", f.launches)
        .float("batch_crossings_per_model", f.model.batch.crossings)
        .float("batch_maps_per_model", f.model.batch.maps)
        .num("batch_distinct_leases", f.model.distinct_leases as u64)
        .float("batch_pack_ns", f.model.batch_pack_ns)
        .float("per_kernel_crossings_per_model", f.model.per_kernel.crossings)
        .float("per_kernel_maps_per_model", f.model.per_kernel.maps)
        .float("dsp_maps_per_launch", f.maps.cached)
        .float("dsp_maps_per_launch_uncached", f.maps.uncached)
        .num("dsp_map_leases_per_launch", f.maps.leases)
        .raw("dsp_map_cache", |o| {
            let mut m = json::Object::new(o);
            m.float("maps_per_launch", f.maps.cached)
                .float("maps_per_launch_uncached", f.maps.uncached)
                .float("launch_latency_us", f.maps.cached_latency_us)
                .float("launch_latency_us_uncached", f.maps.uncached_latency_us)
                .bool("simulated", true)
                .str("cost_model", &cost_model());
            m.end();
        })
        .raw("model_latency_us", |o| {
            let mut m = json::Object::new(o);
            // The model's libraries are built without the map cache: each kernel launch maps and
            // unmaps its leases, and the model latency charges those maps too.
            m.float("batch", f.model.batch.latency_us)
                .float("per_kernel", f.model.per_kernel.latency_us)
                .bool("simulated", true)
                .str("cost_model", &cost_model());
            m.end();
        })
        .str("platform", "bench")
        .bool("simulated", true);
    o.end();
    out.push('\n');
    out
}

/// [`MODEL_COST`] in words: what every simulated latency of the report charges.
fn cost_model() -> String {
    format!(
        "{} us/crossing + {} us/KiB + {MAP_US} us/HAP_mmap + {UNMAP_US} us/HAP_munmap",
        MODEL_COST.per_crossing.as_micros(),
        MODEL_COST.per_kib_copied.as_micros()
    )
}

/// The readable report.
pub fn to_text(f: &Figures) -> String {
    format!(
        "hexrpc bench (this machine; the round trip runs on the BENCH: simulated kernel and DSP, not a device figure)\n\
         launch overhead (pack 3 buffers + 1 ioctl, null seam)   {:>12.1} ns\n\
         bench round trip (whole launch, simulated DSP)           {:>12.1} ns   [simulated]\n\
         kernel crossings per launch                              {:>12.2}\n\
         heap allocations per launch                              {:>12.2}\n\
         raw INVOKE_ATTRS ioctl on /dev/null (ENOTTY)             {:>12.1} ns\n\
         pack 3 buffers + the same ioctl through RustixSys        {:>12.1} ns   ({:.2}x the raw ioctl)\n\
         the same launch with a deadline / without                {:>12.2}x\n\
         empty Batch::new                                         {:>12.1} ns\n\
         building a batch, per record                             {:>12.1} ns\n\
         reverse service: 4 MiB in 64 KiB freads                  {:>12.0} MiB/s\n\
         memcpy, 64 KiB chunks into one reused buffer             {:>12.0} MiB/s   ({:.2}x memcpy)\n\
         model network (5 nodes), per kernel: crossings / maps     {:>6.0} / {:<6.0}\n\
         model network as one batch: crossings / maps             {:>6.0} / {:<6.0} ({} distinct leases)\n\
         packing the model's batch (5 records)                    {:>12.1} ns\n\
         model latency per kernel vs batch ({})  {:>6.0} / {:.0} us   [simulated]\n\
         DSP maps per launch, map cache / none ({} leases)         {:>6.2} / {:<6.2} [simulated]\n\
         launch latency, map cache / none (+{} us/map, {} us/unmap) {:>6.0} / {:.0} us   [simulated]\n",
        f.launch_overhead_ns,
        f.bench_round_trip_ns,
        f.crossings_per_launch,
        f.allocations_per_launch,
        f.raw_ioctl_ns,
        f.seam_launch_ns,
        f.launch_vs_ioctl,
        f.deadline_launch_ratio,
        f.batch_new_ns,
        f.batch_build_ns_per_record,
        f.reverse_stream_mib_s,
        f.memcpy_mib_s,
        f.reverse_stream_vs_memcpy,
        f.model.per_kernel.crossings,
        f.model.per_kernel.maps,
        f.model.batch.crossings,
        f.model.batch.maps,
        f.model.distinct_leases,
        f.model.batch_pack_ns,
        cost_model(),
        f.model.per_kernel.latency_us,
        f.model.batch.latency_us,
        f.maps.leases,
        f.maps.cached,
        f.maps.uncached,
        MAP_US,
        UNMAP_US,
        f.maps.cached_latency_us,
        f.maps.uncached_latency_us,
    )
}
