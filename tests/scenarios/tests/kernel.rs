//! One-call launches (`hexrpc_runtime::kernel`) on the bench: owned and borrowed images, views at
//! non-zero offsets, one ioctl per launch, refusals before any ioctl, deadlines and recovery,
//! and the owned (`'static`) kernel and lease types.

use std::time::Duration;

use hexrpc_bench::{Bench, CallKind};
use hexrpc_hal::{Cause, ErrorKind, LibraryImage};
use hexrpc_runtime::launch::{AbiVersion, PackError, Scalar, Signature};
use hexrpc_runtime::{Error, OpenRefusal};
use hexrpc_scenarios::catalogue::{self, ADD_U8, SLEEP_MS};
use hexrpc_scenarios::stack::start as serve;

fn bench() -> Bench {
    let bench = Bench::new();
    catalogue::register(&bench, &ADD_U8);
    catalogue::register(&bench, &SLEEP_MS);
    bench
}

#[test]
fn owned_and_borrowed_images_launch_in_one_call_with_one_ioctl() {
    let bench = bench();
    let served = serve(&bench).unwrap();
    let sig = Signature::parse("buf,buf,u32").unwrap();
    let borrowed: Vec<u8> = catalogue::image(ADD_U8.name).to_vec();
    {
        let owned = served.open_kernel("owned", catalogue::image(ADD_U8.name).to_vec(), sig, AbiVersion::V2).unwrap();
        let copied = served.open_kernel("copied", LibraryImage::copy_of(&borrowed), sig, AbiVersion::V2).unwrap();
        assert_eq!(served.service().image_count(), 2);
        let mut lease = served.session().alloc(3 * 4096).unwrap();
        lease.write_at(4097, &[10, 20, 30]).unwrap();
        let (i, o) = (lease.view(4097, 3).unwrap(), lease.view(8192 + 11, 3).unwrap());
        for (k, add) in [(&owned, 1u8), (&copied, 2)] {
            let before = bench.counts().of(CallKind::RpcInvokeAttrs);
            k.launch(&[&i, &o], &[Scalar::U32(u32::from(add))]).unwrap();
            assert_eq!(bench.counts().of(CallKind::RpcInvokeAttrs) - before, 1, "one ioctl per launch");
            let mut out = [0u8; 3];
            o.read(&mut out).unwrap();
            assert_eq!(out, [10 + add, 20 + add, 30 + add]);
        }
        // Refusals happen before any ioctl.
        let before = bench.counts().of(CallKind::RpcInvokeAttrs);
        let e = owned.launch(&[&i], &[Scalar::U32(1)]).unwrap_err();
        assert_eq!(e, Error::Pack(PackError::BufferCount { expected: 2, got: 1 }));
        assert_eq!((e.stage(), e.kind()), ("launch-pack", ErrorKind::Usage));
        assert!(e.to_string().starts_with("launch-pack: "));
        let e = owned.launch(&[&i, &o], &[Scalar::F32(1.0)]).unwrap_err();
        assert!(matches!(e, Error::Pack(PackError::ScalarType { .. })));
        assert_eq!(bench.counts().of(CallKind::RpcInvokeAttrs), before);
    }
    // Closing the kernels withdrew (and released) their images.
    assert_eq!(served.service().image_count(), 0);
}

#[test]
fn a_passed_deadline_needs_recovery_then_launches_again() {
    let bench = bench();
    let served = serve(&bench).unwrap();
    let k =
        served.open_kernel(SLEEP_MS.name, catalogue::image(SLEEP_MS.name), Signature::parse("buf,u32").unwrap(), AbiVersion::V2).unwrap();
    let lease = served.session().alloc(4096).unwrap();
    let v = lease.view(64, 4).unwrap();
    let e = k.launch_with_deadline(&[&v], &[Scalar::U32(500)], Duration::from_millis(30)).unwrap_err();
    assert_eq!(e.hal().map(|h| h.cause), Some(Cause::Timeout));
    assert_eq!(e.kind(), ErrorKind::Recoverable);
    served.session().recover().unwrap();
    k.launch_maybe_deadline(&[&v], &[Scalar::U32(1)], Some(Duration::from_secs(5))).unwrap();
    k.launch(&[&v], &[Scalar::U32(0)]).unwrap();
}

#[test]
fn shared_kernels_and_leases_are_static_and_release_in_order() {
    let bench = bench();
    let start = bench.snapshot();
    let served = serve(&bench).unwrap();
    let k = served
        .open_kernel_shared(ADD_U8.name, catalogue::image(ADD_U8.name), Some((Signature::parse("buf,buf,u32").unwrap(), AbiVersion::V2)))
        .unwrap();
    let mut lease = served.alloc_shared(8192).unwrap();
    lease.lease_mut().write_at(5, &[7; 8]).unwrap();
    let (i, o) = (lease.view(5, 8).unwrap(), lease.view(4096, 8).unwrap());
    k.launch(&[&i, &o], &[Scalar::U32(1)]).unwrap();
    let mut out = [0u8; 8];
    o.read(&mut out).unwrap();
    assert_eq!(out, [8; 8]);
    // Both outlive the ServedSession value (they hold shares of the session), but its listener
    // and channel stop with it: a launch then fails with an error, and nothing is released early.
    drop(served);
    assert!(k.launch(&[&i, &o], &[Scalar::U32(1)]).is_err());
    o.read(&mut out).unwrap();
    fn is_static<T: 'static>(_: &T) {}
    is_static(&k);
    is_static(&lease);
    drop(k);
    drop(lease);
    // Everything released: fds, mappings, ION buffers.
    assert_eq!(bench.settle(&start, Duration::from_secs(2)), start);
}

#[test]
fn an_image_without_a_build_record_needs_its_signature() {
    let bench = bench();
    let served = serve(&bench).unwrap();
    // The bench's model images carry no record: a signature must be given. (Libraries built by
    // hexrpc-libbuild carry one: tools/libbuild/tests/recorded_kernel.rs.)
    let e = served.open_recorded_kernel(ADD_U8.name, catalogue::image(ADD_U8.name)).unwrap_err();
    assert_eq!(e, Error::Open(OpenRefusal::NoRecord));
    assert_eq!((e.stage(), e.kind(), e.hal()), ("library-open", ErrorKind::Usage, None));
    assert!(e.to_string().starts_with("library-open: "));
}
