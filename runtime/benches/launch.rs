//! What hexrpc itself adds per kernel launch, for 3 buffers and 2 scalars (v2): packing, and
//! packing plus one `FASTRPC_IOCTL_INVOKE_ATTRS` through a syscall seam whose ioctl returns at
//! once (no kernel, no DSP); the same launch through the real seam (`RustixSys`) on /dev/null
//! (whose ioctl fails at once with ENOTTY) beside one raw ioctl of the same request there, with
//! and without a deadline; and the model network as one batch (building it, running it). Run
//! with `cargo bench -p hexrpc-runtime --bench launch`. Host figures on this machine.

use divan::{black_box, Bencher};
use hexrpc_bench::measure::NullSys;
use hexrpc_drivers::adsprpc::{fastrpc_ioctl_invoke, fastrpc_ioctl_invoke_attrs};
use hexrpc_drivers::{Fd, NullDevice, RustixSys};
use hexrpc_runtime::launch::{AbiVersion, Batch, BufferRef, PackedLaunch, Scalar, Signature};

fn main() {
    divan::main();
}

struct Lease;

/// The launch both benches measure: 3 buffer views of one lease and 2 scalars, v2.
fn three_buffers(lease: &Lease) -> (Signature, [BufferRef<'_>; 3], [Scalar; 2]) {
    let sig = Signature::parse("buf,buf,buf,i32,f32").unwrap();
    let bufs = [
        BufferRef::borrowing(lease, Fd(5), 1 << 20, 0, 4096),
        BufferRef::borrowing(lease, Fd(6), 1 << 20, 4096, 4096),
        BufferRef::borrowing(lease, Fd(7), 1 << 20, 8192, 4096),
    ];
    (sig, bufs, [Scalar::I32(1024), Scalar::F32(0.5)])
}

#[divan::bench]
fn pack_3_buffers(bencher: Bencher) {
    let lease = Lease;
    let (sig, bufs, scalars) = three_buffers(&lease);
    bencher.bench_local(|| {
        PackedLaunch::new(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).map(|p| black_box(p).buffer_count())
    });
}

/// [`pack_3_buffers`] in place ([`PackedLaunch::repack`]): the packing without the move of the
/// value.
#[divan::bench]
fn repack_3_buffers(bencher: Bencher) {
    let lease = Lease;
    let (sig, bufs, scalars) = three_buffers(&lease);
    let mut p = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &scalars).unwrap();
    bencher.bench_local(|| {
        p.repack(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).unwrap();
        black_box(&p).buffer_count()
    });
}

#[divan::bench]
fn pack_and_invoke_3_buffers(bencher: Bencher) {
    let lease = Lease;
    let (sig, bufs, scalars) = three_buffers(&lease);
    let sys = NullSys::new();
    bencher.bench_local(|| {
        let mut p = PackedLaunch::new(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).unwrap();
        p.launch(&sys, Fd(3), black_box(21)).unwrap()
    });
}

/// One raw INVOKE_ATTRS on /dev/null straight through rustix (ENOTTY): the floor of a launch.
#[divan::bench]
fn raw_ioctl_devnull(bencher: Bencher) {
    let null = NullDevice::open().unwrap();
    let (mut pra, mut fds, mut attrs) = ([0u64; 12], [-1i32, -1, -1, 5, 6, 7], [0u32, 0, 0, 1, 1, 1]);
    let mut arg = fastrpc_ioctl_invoke_attrs {
        inv: fastrpc_ioctl_invoke { handle: 21, sc: 0x0202_0103, pra: pra.as_mut_ptr() as u64 },
        fds: fds.as_mut_ptr() as u64,
        attrs: attrs.as_mut_ptr() as u64,
    };
    bencher.bench_local(|| null.invoke_attrs_raw(black_box(&mut arg)).is_err());
}

/// Packing plus the same ioctl through the drivers' real seam, as a driver sends a launch.
#[divan::bench]
fn pack_and_launch_devnull(bencher: Bencher) {
    let lease = Lease;
    let (sig, bufs, scalars) = three_buffers(&lease);
    let null = NullDevice::open().unwrap();
    bencher.bench_local(|| {
        let mut p = PackedLaunch::new(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).unwrap();
        p.launch(&RustixSys, null.fd(), black_box(21)).is_err()
    });
}

/// [`pack_and_launch_devnull`] as `Kernel::launch` packs: an empty launch declared in place,
/// packed into ([`PackedLaunch::empty`], [`PackedLaunch::repack`]).
#[divan::bench]
fn pack_in_place_and_launch_devnull(bencher: Bencher) {
    let lease = Lease;
    let (sig, bufs, scalars) = three_buffers(&lease);
    let null = NullDevice::open().unwrap();
    bencher.bench_local(|| {
        let mut p = PackedLaunch::empty(AbiVersion::V2);
        p.repack(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).unwrap();
        p.launch(&RustixSys, null.fd(), black_box(21)).is_err()
    });
}

/// [`pack_and_launch_devnull`] repacking one value ([`PackedLaunch::repack`]).
#[divan::bench]
fn repack_and_launch_devnull(bencher: Bencher) {
    let lease = Lease;
    let (sig, bufs, scalars) = three_buffers(&lease);
    let null = NullDevice::open().unwrap();
    let mut p = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &scalars).unwrap();
    bencher.bench_local(|| {
        p.repack(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).unwrap();
        p.launch(&RustixSys, null.fd(), black_box(21)).is_err()
    });
}

/// [`pack_and_launch_devnull`] with a deadline, as every deadline launch runs
/// (`hexrpc_hal::deadline::run`: the process's watchdog armed and disarmed around the call).
#[divan::bench]
fn pack_and_launch_devnull_with_deadline(bencher: Bencher) {
    let lease = Lease;
    let (sig, bufs, scalars) = three_buffers(&lease);
    let null = NullDevice::open().unwrap();
    bencher.bench_local(|| {
        hexrpc_hal::deadline::run(&RustixSys, std::time::Duration::from_secs(10), |_fired| {
            let mut p = PackedLaunch::empty(AbiVersion::V2);
            p.repack(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).unwrap();
            black_box(p.launch(&RustixSys, null.fd(), black_box(21)).is_err());
            Ok(())
        })
    });
}

/// An empty batch.
#[divan::bench]
fn batch_new(bencher: Bencher) {
    let sigs = model_batch_parts(&Lease).0;
    bencher.bench_local(|| Batch::new(black_box(&sigs)).map(|b| black_box(&b).is_empty()));
}

/// Building the model's batch (5 records) where it is declared (a returned batch is copied
/// whole): the time per record is this over 5, less [`batch_new`] / 5.
#[divan::bench(counters = [divan::counter::ItemsCount::new(5usize)])]
fn batch_build_ns_per_record(bencher: Bencher) {
    let lease = Lease;
    let (sigs, v) = model_batch_parts(&lease);
    let u = Scalar::U32;
    bencher.bench_local(|| {
        let v = black_box(&v);
        let mut b = Batch::new(black_box(&sigs)).unwrap();
        b.push(0, &[v[4], v[0], v[1], v[5]], &[u(1), u(12), u(12), u(4)]).unwrap();
        b.push(1, &[v[5], v[6]], &[u(400)]).unwrap();
        b.push(2, &[v[6], v[7]], &[u(4), u(10), u(10)]).unwrap();
        b.push(3, &[v[7], v[2], v[3], v[8]], &[u(100), u(10)]).unwrap();
        b.push(4, &[v[8], v[9]], &[u(1), u(10)]).unwrap();
        black_box(&b).len()
    });
}

/// The model network's five launches as one batch (conv, relu, pool, dense, softmax on two
/// leases): building it, and one run through the returning seam (one ioctl for all five).
fn model_batch_parts(lease: &Lease) -> ([Signature; 5], [BufferRef<'_>; 10]) {
    let sigs = ["buf,buf,buf,buf,u32,u32,u32,u32", "buf,buf,u32", "buf,buf,u32,u32,u32", "buf,buf,buf,buf,u32,u32", "buf,buf,u32,u32"]
        .map(|s| Signature::parse(s).unwrap());
    let v = |fd, off| BufferRef::borrowing(lease, Fd(fd), 1 << 16, off, 1024);
    let views = [v(5, 64), v(5, 2048), v(5, 4096), v(5, 8192), v(6, 128), v(6, 2048), v(6, 4096), v(6, 8192), v(6, 12288), v(6, 16384)];
    (sigs, views)
}

fn model_batch<'a>(sigs: &'a [Signature; 5], v: &[BufferRef<'a>; 10]) -> hexrpc_runtime::launch::Batch<'a> {
    let u = Scalar::U32;
    let mut b = hexrpc_runtime::launch::Batch::new(sigs).unwrap();
    b.push(0, &[v[4], v[0], v[1], v[5]], &[u(1), u(12), u(12), u(4)]).unwrap();
    b.push(1, &[v[5], v[6]], &[u(400)]).unwrap();
    b.push(2, &[v[6], v[7]], &[u(4), u(10), u(10)]).unwrap();
    b.push(3, &[v[7], v[2], v[3], v[8]], &[u(100), u(10)]).unwrap();
    b.push(4, &[v[8], v[9]], &[u(1), u(10)]).unwrap();
    b
}

#[divan::bench]
fn pack_model_batch(bencher: Bencher) {
    let lease = Lease;
    let (sigs, views) = model_batch_parts(&lease);
    bencher.bench_local(|| model_batch(black_box(&sigs), black_box(&views)).len());
}

#[divan::bench]
fn run_model_batch(bencher: Bencher) {
    let lease = Lease;
    let (sigs, views) = model_batch_parts(&lease);
    let mut batch = model_batch(&sigs, &views);
    let sys = NullSys::new();
    // The returning seam writes no status: the run is refused as "not run" after its one ioctl,
    // which is the cost being measured (packing is done once, outside).
    bencher.bench_local(|| black_box(batch.launch(&sys, Fd(3), black_box(21))).is_err());
}

/// Arming and disarming a deadline around nothing (the process's watchdog), with the clock read
/// and the thread id it needs.
#[divan::bench]
fn deadline_arm_disarm(bencher: Bencher) {
    use hexrpc_drivers::Syscalls;
    let action = || {};
    bencher.bench_local(|| {
        let _tid = black_box(RustixSys.thread_id());
        // The path of every deadline launch (`hexrpc_hal::deadline::run`): a timeout on the
        // coarse clock.
        hexrpc_drivers::watchdog::scoped_for(std::time::Duration::from_secs(10), std::time::Duration::from_millis(2), &action, || {
            black_box(1)
        })
    });
}
