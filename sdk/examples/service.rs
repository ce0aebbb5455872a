//! A service's use of hexrpc, start to finish: start a session, serve the DSP's file requests,
//! open a library once, launch many times on views of one lease, recover from a DSP
//! restart, and let everything go.
//!
//! It runs on the isolated bench (`cargo run -p hexrpc-sdk --features bench --example service`).
//! On a device, replace `Bench` by `RustixSys`, `DeviceAccess::for_bench()` by
//! `DeviceAccess::for_device(&boards::COMMA_THREE)`, and the tagged bench image by the bytes of
//! a library built with `hexrpc build-lib`.

use hexrpc_sdk::bench::{elf, Bench, EntryVersion, LibraryModel};
use hexrpc_sdk::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The bench stands in for /dev/ion, /dev/adsprpc-smd and the DSP: it runs this Rust model
    // where the device would run the library's `entry` (generated for "buf,buf,f32").
    let sys = Bench::new();
    sys.register_library(
        "scale",
        LibraryModel::new(EntryVersion::V2, 2, 1, |k| {
            let factor = k.scalar_f32(0).unwrap_or(1.0);
            let n = k.buffer_len(0).min(k.buffer_len(1)) / 4;
            let mut x = vec![0u8; n * 4];
            if k.read(0, 0, &mut x).is_ok() {
                let y: Vec<u8> = x.chunks(4).flat_map(|c| (f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * factor).to_le_bytes()).collect();
                let _ = k.write(1, 0, &y);
            }
        }),
    );
    // The library's bytes: owned here, kept by the session while the library is open.
    let image: Vec<u8> = elf::library_image("scale", 8192);

    // 1. The session (ION, shell, channel, DSP process, listener; a failure names its stage)
    //    and the reverse file service answering the DSP (library bytes, allowlisted files only)
    //    on a thread that follows the session through recoveries.
    let policy = FilePolicy::for_board(&boards::BENCH).map_err(|e| format!("{e:?}"))?;
    let served = ServedSession::start(sys.clone(), &DeviceAccess::for_bench(), policy)?;
    let session = served.session();

    // 2. Open the library once, with its kernel's signature and launch ABI; it closes itself
    //    when dropped.
    let kernel = served.open_kernel("scale", image, Signature::parse("buf,buf,f32")?, AbiVersion::V2)?;

    // 3. One lease, two views at non-zero offsets, many launches.
    let mut lease = session.alloc(64 * 1024)?;
    let input: Vec<u8> = (0..256).flat_map(|i| (i as f32).to_le_bytes()).collect();
    lease.write_at(4096, &input)?;
    let x = lease.view(4096, input.len())?;
    let y = lease.view(32 * 1024 + 16, input.len())?;
    // One call per launch: views and scalars in, DSP microseconds out.
    let launch = |factor: f32| kernel.launch(&[&x, &y], &[Scalar::F32(factor)]);
    for i in 0..100 {
        launch(i as f32)?;
    }

    // 4. A DSP restart: recover once, then carry on.
    sys.restart_dsp();
    match launch(2.0) {
        // The call saw the restart, or the listener did first: either way, recover once.
        Err(e) if e.kind() == ErrorKind::Recoverable => session.recover()?,
        other => return Err(format!("expected a restart, got {other:?}").into()),
    }
    launch(2.0)?;
    let mut out = vec![0u8; 8];
    y.read(&mut out)?;
    println!("y[1] = {} (expected 2)", f32::from_le_bytes([out[4], out[5], out[6], out[7]]));

    // 5. Everything goes in reverse order: library, lease, listener, session.
    drop(kernel);
    drop(lease);
    println!("done; the reverse service answered {} requests", served.service().metrics().snapshot().requests);
    served.stop()?;
    Ok(())
}
