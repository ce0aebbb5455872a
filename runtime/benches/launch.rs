//! What hexrpc itself adds per kernel launch, for 3 buffers and 2 scalars (v2): packing, and
//! packing plus one `FASTRPC_IOCTL_INVOKE_ATTRS` through a syscall seam whose ioctl returns at
//! once (no kernel, no DSP). Run with `cargo bench -p hexrpc-runtime --bench launch`.

use divan::{black_box, Bencher};
use hexrpc_bench::measure::NullSys;
use hexrpc_drivers::Fd;
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackedLaunch, Scalar, Signature};

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
