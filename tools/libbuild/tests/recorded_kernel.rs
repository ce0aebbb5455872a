//! A library built by the library builder carries its build record: the runtime opens its kernel
//! with the recorded signature and ABI, refuses another, and the kernel runs (under
//! qemu-hexagon, in the bench's executor).
//!
//! Skips (with a message) when clang-19, ld.lld-19 or qemu-hexagon are missing.

use hexrpc_bench::Bench;
use hexrpc_bsp::DeviceAccess;
use hexrpc_libbuild::build_library;
use hexrpc_runtime::launch::{AbiVersion, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::{Error, OpenRefusal, ServedSession};

fn bench() -> Bench {
    Bench::new()
}

fn serve(bench: &Bench) -> ServedSession<Bench> {
    ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

#[test]
fn the_build_record_gives_signature_and_abi() {
    let bench = bench();
    let served = serve(&bench);
    if let Err(why) = hexrpc_bench::executor::tools_available() {
        println!("SKIPPED the build-lib part: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-kernel-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("twice_u8.c");
    std::fs::write(&src, "void twice_u8(const unsigned char *x, unsigned char *y, unsigned int n) {\n  for (unsigned int i = 0; i < n; i++) y[i] = 2 * x[i];\n}\n").unwrap();
    let so = dir.join("twice_u8.so");
    let sig = Signature::parse("buf,buf,u32").unwrap();
    build_library(&src, &sig, &so, &Default::default()).unwrap();
    let image = std::fs::read(&so).unwrap();
    // A signature other than the recorded one is refused before anything is opened.
    let other = Signature::parse("buf,buf,u32,u32").unwrap();
    assert!(matches!(served.open_kernel("twice", image.clone(), other, AbiVersion::V2), Err(Error::Open(OpenRefusal::Mismatch { .. }))));
    assert!(matches!(served.open_kernel("twice", image.clone(), sig, AbiVersion::V1), Err(Error::Open(OpenRefusal::Mismatch { .. }))));
    assert_eq!(served.service().image_count(), 0);
    let k = served.open_recorded_kernel("twice", image).unwrap();
    assert_eq!((*k.signature(), k.abi()), (sig, AbiVersion::V2));
    let mut lease = served.session().alloc(8192).unwrap();
    lease.write_at(33, &[1, 2, 3, 4, 5]).unwrap();
    let (x, y) = (lease.view(33, 5).unwrap(), lease.view(4096 + 9, 5).unwrap());
    k.launch(&[&x, &y], &[Scalar::U32(5)]).unwrap();
    let mut out = [0u8; 5];
    y.read(&mut out).unwrap();
    assert_eq!(out, [2, 4, 6, 8, 10]);
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}
