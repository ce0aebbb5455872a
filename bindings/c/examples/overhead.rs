//! Per-launch overhead of the one-call paths, through a bench session whose launch ioctl returns
//! at once (`HEXRPC_BENCH_RETURNING_LAUNCHES`: INVOKE_ATTRS goes to the bench's `NullSys`), for
//! 3 views and 2 scalars (v2), as `launch_overhead_ns` of `hexrpc bench` measures the packer:
//!
//! * `launch_overhead_ns`: the packer and one INVOKE_ATTRS through `NullSys`, exactly what
//!   `hexrpc bench` reports under that name, measured in the same run as the baseline;
//! * `rust_kernel_launch_overhead_ns`: `Kernel::launch` (the Rust one-call API);
//! * `c_abi_launch_overhead_ns_from_rust`: `hexrpc_launch` called through its C ABI from Rust;
//! * allocations and ioctls per launch of the one-call paths (must be 0 and 1);
//! * `raw_invoke_ioctl_ns`: one `INVOKE_ATTRS` ioctl through `NullSys` with a prebuilt argument
//!   (the floor every call pays), and the model runs measured against it:
//!   `c_abi_model_run_ns` (`hexrpc_model_run` of the bench's sample model, 1,024-byte input, two
//!   1,024-byte outputs) and `rust_model_run_ns` (the bindings' `ModelObj::run`), with their
//!   allocations per run and FastRPC calls per run. A model run also writes its input and reads
//!   its outputs through the lease's CPU access (two `DMA_BUF_SYNC` ioctls each on the bench's
//!   simulated kernel, included in these figures: a device's kernel does them too, at its own
//!   cost).
//!
//! With `HEXRPC_OVERHEAD_MODELS=a.hxm:b.hxm` (exported files whose libraries are Hexagon code:
//! the executor's qemu-hexagon and shell load them), `model_files` gives the same figures for
//! each: `rust_model_run_ns` and its ratio to the raw ioctl, `io_memcpy_ns` (a memcpy of the
//! same input and output bytes between heap buffers, the part of a run that grows with the
//! tensors) and what the run costs beyond it, allocations, FastRPC calls and bytes copied into the
//! kernel per run (beyond the inputs, which are written into shared memory).
//!
//! Each figure is the median over 30 batches of 10,000 launches of the calling thread's CPU time
//! per launch (`CLOCK_THREAD_CPUTIME_ID`: time the thread was descheduled on a busy machine is
//! not counted); `*_wall_ns` are the same medians in wall-clock time. Host time on this machine;
//! not a device figure. Prints one JSON object. Run by `bindings/bench.sh` (release profile).

use std::time::Instant;

use hexrpc::objects::{SessionObj, ViewArg};
use hexrpc::seam::SeamKind;
use hexrpc::{hexrpc_launch, hexrpc_lease, hexrpc_library, hexrpc_scalar, hexrpc_session, hexrpc_status, hexrpc_view};
use hexrpc_bench::measure::CountingAlloc;
use hexrpc_drivers::{adsprpc, Fd};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackedLaunch, Scalar, Signature};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

const BATCHES: usize = 30;
const BATCH: u32 = 10_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// (CPU-time median, wall-time median) per launch.
fn measure(mut one: impl FnMut()) -> (f64, f64) {
    for _ in 0..BATCH {
        one();
    }
    let (mut cpu, mut wall) = (Vec::with_capacity(BATCHES), Vec::with_capacity(BATCHES));
    for _ in 0..BATCHES {
        let (t, c) = (Instant::now(), cpu_ns());
        for _ in 0..BATCH {
            one();
        }
        cpu.push((cpu_ns() - c) / f64::from(BATCH));
        wall.push(t.elapsed().as_nanos() as f64 / f64::from(BATCH));
    }
    (median(cpu), median(wall))
}

/// The calling thread's last error message.
fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next failure on this thread.
    unsafe { std::ffi::CStr::from_ptr(hexrpc::hexrpc_last_error_message()) }.to_string_lossy().into_owned()
}

fn ioctls(s: &SessionObj) -> u64 {
    match &s.served().session().sys().kind {
        SeamKind::Returning(_, null) => null.ioctls(),
        _ => 0,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The baseline: `launch_overhead_ns` as `hexrpc bench` measures it.
    let null = hexrpc_bench::measure::NullSys::new();
    let owner = ();
    let sig = Signature::parse("buf,buf,buf,i32,f32")?;
    let bufs = [
        BufferRef::borrowing(&owner, Fd(10), 65_536, 0, 4096),
        BufferRef::borrowing(&owner, Fd(11), 65_536, 4096, 4096),
        BufferRef::borrowing(&owner, Fd(12), 65_536, 8192, 4096),
    ];
    let scalars = [Scalar::I32(3), Scalar::F32(0.5)];
    let base = measure(|| {
        let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &scalars).expect("pack");
        let mut call = packed.invoke_args().expect("args");
        call.with_downstream(|args| adsprpc::invoke_attrs(&null, Fd(3), 0x100, args)).expect("args").expect("invoke");
    });

    // The Rust one-call path.
    let s = std::sync::Arc::new(SessionObj::open_bench(false, true)?);
    let image = hexrpc::bench::model_image("scale_f32")?;
    let k = s.open_library("overhead", image, Some("buf,buf,buf,i32,f32"), Some(AbiVersion::V2))?;
    let lease = s.alloc(65536)?;
    let (a, b, c) = (lease.view(0, 4096)?, lease.view(4096, 4096)?, lease.view(8192, 4096)?);
    let kernel = k.kernel();
    let rust_ns = measure(|| {
        kernel.launch(&[&a, &b, &c], &scalars).expect("launch");
    });
    let (i0, a0) = (ioctls(&s), CountingAlloc::thread_allocations());
    for _ in 0..BATCH {
        kernel.launch(&[&a, &b, &c], &scalars)?;
    }
    let rust_allocs = (CountingAlloc::thread_allocations() - a0) as f64 / f64::from(BATCH);
    let rust_ioctls = (ioctls(&s) - i0) as f64 / f64::from(BATCH);
    // The binding layer's own launch (what C and Python call underneath).
    let views = [
        ViewArg { lease: &lease, offset: 0, len: 4096 },
        ViewArg { lease: &lease, offset: 4096, len: 4096 },
        ViewArg { lease: &lease, offset: 8192, len: 4096 },
    ];
    let obj_ns = measure(|| {
        k.launch(&views, &scalars, None).expect("launch");
    });
    drop(lease);
    drop(k);

    // The C ABI, called as C calls it.
    let mut sess: *mut hexrpc_session = std::ptr::null_mut();
    // SAFETY: `sess` is valid for one write.
    let st = unsafe { hexrpc::hexrpc_session_open_bench(hexrpc::HEXRPC_BENCH_RETURNING_LAUNCHES, &mut sess) };
    assert_eq!(st, hexrpc_status::HEXRPC_OK);
    let mut lib: *mut hexrpc_library = std::ptr::null_mut();
    let sig = c"buf,buf,buf,i32,f32";
    // SAFETY: strings are NUL-terminated, `image` is valid for its length, `lib` for one write.
    let st = unsafe {
        hexrpc::hexrpc_library_open(sess, c"overhead".as_ptr(), image.as_ptr(), image.len(), sig.as_ptr(), hexrpc::HEXRPC_ABI_V2, &mut lib)
    };
    assert_eq!(st, hexrpc_status::HEXRPC_OK);
    let mut l: *mut hexrpc_lease = std::ptr::null_mut();
    // SAFETY: `l` is valid for one write.
    assert_eq!(unsafe { hexrpc::hexrpc_lease_alloc(sess, 65536, &mut l) }, hexrpc_status::HEXRPC_OK);
    let views = [
        hexrpc_view { lease: l, offset: 0, length: 4096 },
        hexrpc_view { lease: l, offset: 4096, length: 4096 },
        hexrpc_view { lease: l, offset: 8192, length: 4096 },
    ];
    let sc = [
        hexrpc_scalar { kind: hexrpc::HEXRPC_SCALAR_I32, reserved: 0, bits: 3 },
        hexrpc_scalar { kind: hexrpc::HEXRPC_SCALAR_F32, reserved: 0, bits: u64::from(0.5f32.to_bits()) },
    ];
    let mut us = 0u64;
    // SAFETY: the arrays are valid for their lengths, `us` for one write.
    let mut call = || unsafe { hexrpc_launch(lib, views.as_ptr(), 3, sc.as_ptr(), 2, 0, &mut us) };
    let c_ns = measure(|| assert_eq!(call(), hexrpc_status::HEXRPC_OK));
    let a0 = CountingAlloc::thread_allocations();
    for _ in 0..BATCH {
        assert_eq!(call(), hexrpc_status::HEXRPC_OK);
    }
    let c_allocs = (CountingAlloc::thread_allocations() - a0) as f64 / f64::from(BATCH);

    // The floor: one INVOKE_ATTRS ioctl through NullSys, its argument prebuilt.
    let raw_ns = hexrpc_bench::measure::raw_invoke_ioctl_ns(BATCHES, BATCH);

    // A model run through the C ABI: the bench's sample model on the returning session.
    let (mut bytes, mut blen) = (std::ptr::null(), 0usize);
    // SAFETY: out pointers valid.
    assert_eq!(unsafe { hexrpc::hexrpc_bench_sample_model(1024, &mut bytes, &mut blen) }, hexrpc_status::HEXRPC_OK);
    let mut m: *mut hexrpc::hexrpc_model = std::ptr::null_mut();
    // SAFETY: `bytes` is valid for `blen` bytes (static), `m` for one write.
    assert_eq!(unsafe { hexrpc::hexrpc_model_open(sess, bytes, blen, &mut m) }, hexrpc_status::HEXRPC_OK, "{}", last_error());
    let x = vec![7u8; 1024];
    let (mut y, mut z) = (vec![0u8; 1024], vec![0u8; 1024]);
    let ins = [hexrpc::hexrpc_input { data: x.as_ptr().cast(), len: 1024 }];
    let outs = [
        hexrpc::hexrpc_output { data: y.as_mut_ptr().cast(), len: 1024 },
        hexrpc::hexrpc_output { data: z.as_mut_ptr().cast(), len: 1024 },
    ];
    let mut report = hexrpc::hexrpc_model_report::default();
    // SAFETY: the arrays are valid for their lengths and their buffers for theirs; `report` for one write.
    let mut run = || unsafe { hexrpc::hexrpc_model_run(m, ins.as_ptr(), 1, outs.as_ptr(), 2, 0, &mut report) };
    let c_model_ns = measure(|| assert_eq!(run(), hexrpc_status::HEXRPC_OK, "{}", last_error()));
    let a0 = CountingAlloc::thread_allocations();
    for _ in 0..BATCH {
        assert_eq!(run(), hexrpc_status::HEXRPC_OK);
    }
    let c_model_allocs = (CountingAlloc::thread_allocations() - a0) as f64 / f64::from(BATCH);
    let c_model_calls = report.calls;
    assert_eq!(hexrpc::hexrpc_session_close(sess), hexrpc_status::HEXRPC_OK);

    // The same through the bindings' object (what Python calls underneath, less Python).
    let s2 = std::sync::Arc::new(SessionObj::open_bench(false, true)?);
    let model = hexrpc::model::ModelObj::open(&s2, hexrpc::bench::sample_model(1024))?;
    let mut outs2 = [vec![0u8; 1024], vec![0u8; 1024]];
    let rust_model_ns = measure(|| {
        let [a, b] = &mut outs2;
        model.run(&[&x], &mut [a.as_mut_slice(), b.as_mut_slice()], None).expect("model run");
    });
    let (i0, a0) = (ioctls(&s2), CountingAlloc::thread_allocations());
    for _ in 0..BATCH {
        let [a, b] = &mut outs2;
        model.run(&[&x], &mut [a.as_mut_slice(), b.as_mut_slice()], None)?;
    }
    let rust_model_allocs = (CountingAlloc::thread_allocations() - a0) as f64 / f64::from(BATCH);
    let rust_model_invokes = (ioctls(&s2) - i0) as f64 / f64::from(BATCH);
    drop(model);

    // Model files given in HEXRPC_OVERHEAD_MODELS (paths separated by ':', e.g. those
    // bindings/python/tests/test_export.py keeps with HEXRPC_EXPORT_DIR): each opened on a
    // returning session (its libraries load in the executor's shell: qemu-hexagon and the shell,
    // HEXRPC_BENCH_SHELL), run on zeros; per run: host time, allocations, FastRPC calls, bytes
    // copied into the kernel beyond the inputs.
    let mut files = Vec::new();
    for path in std::env::split_paths(&std::env::var_os("HEXRPC_OVERHEAD_MODELS").unwrap_or_default()).filter(|p| !p.as_os_str().is_empty())
    {
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let s3 = std::sync::Arc::new(SessionObj::open_bench(false, true)?);
        let model = hexrpc::model::ModelObj::open(&s3, &bytes)?;
        let ins: Vec<Vec<u8>> = model.with(|l| l.inputs().iter().map(|t| vec![0u8; t.len as usize]).collect());
        let mut outs: Vec<Vec<u8>> = model.with(|l| l.outputs().iter().map(|t| vec![0u8; t.len as usize]).collect());
        let in_refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
        let (launches, call_bytes, input_bytes) =
            model.with(|l| (l.launches(), l.call_bytes_per_run(), l.inputs().iter().map(|t| t.len).sum::<u64>()));
        let ns = measure(|| {
            let mut o: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
            model.run(&in_refs, &mut o, None).expect("model run");
        });
        let mut o: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        let (i0, a0) = (ioctls(&s3), CountingAlloc::thread_allocations());
        for _ in 0..BATCH {
            model.run(&in_refs, &mut o, None)?;
        }
        let allocs = (CountingAlloc::thread_allocations() - a0) as f64 / f64::from(BATCH);
        let invokes = (ioctls(&s3) - i0) as f64 / f64::from(BATCH);
        drop(o);
        // What copying the inputs in and the outputs out costs by itself (a memcpy of the same
        // bytes between heap buffers): the part of a run that grows with the tensors.
        let mut shadow_in: Vec<Vec<u8>> = ins.clone();
        let mut shadow_out: Vec<Vec<u8>> = outs.clone();
        let copy_ns = measure(|| {
            for (d, s) in shadow_in.iter_mut().zip(&ins) {
                d.copy_from_slice(std::hint::black_box(s));
            }
            for (d, s) in shadow_out.iter_mut().zip(&outs) {
                std::hint::black_box(d).copy_from_slice(s);
            }
        });
        let name = path.parent().and_then(|d| d.file_name()).unwrap_or(path.as_os_str()).to_string_lossy().into_owned();
        files.push(format!(
            "{{\"model\": \"{name}\", \"launches\": {launches}, \"input_bytes\": {input_bytes}, \"rust_model_run_ns\": {:.1}, \
             \"ratio_to_raw_ioctl\": {:.1}, \"io_memcpy_ns\": {:.1}, \"beyond_io_memcpy_ns\": {:.1}, \
             \"allocations_per_run\": {allocs}, \"invokes_per_run\": {invokes}, \"call_bytes_per_run\": {call_bytes}}}",
            ns.0,
            ns.0 / raw_ns.0,
            copy_ns.0,
            ns.0 - copy_ns.0
        ));
    }

    println!(
        "{{\"launch_overhead_ns\": {:.1}, \"rust_kernel_launch_overhead_ns\": {:.1}, \"binding_object_launch_overhead_ns\": {:.1}, \
         \"c_abi_launch_overhead_ns_from_rust\": {:.1}, \"launch_overhead_wall_ns\": {:.1}, \"rust_kernel_launch_overhead_wall_ns\": {:.1}, \
         \"c_abi_launch_overhead_wall_ns_from_rust\": {:.1}, \"kernel_allocations_per_launch\": {rust_allocs}, \
         \"kernel_crossings_per_launch\": {rust_ioctls}, \"c_abi_allocations_per_launch\": {c_allocs}, \
         \"raw_invoke_ioctl_ns\": {:.1}, \"c_abi_model_run_ns\": {:.1}, \"rust_model_run_ns\": {:.1}, \
         \"c_abi_model_run_allocations\": {c_model_allocs}, \"rust_model_run_allocations\": {rust_model_allocs}, \
         \"model_run_fastrpc_calls\": {c_model_calls}, \"rust_model_run_invokes\": {rust_model_invokes}, \"platform\": \"bench\", \
         \"seam\": \"returning\", \"model_files\": [{}]}}",
        base.0,
        rust_ns.0,
        obj_ns.0,
        c_ns.0,
        base.1,
        rust_ns.1,
        c_ns.1,
        raw_ns.0,
        c_model_ns.0,
        rust_model_ns.0,
        files.join(", ")
    );
    Ok(())
}
