//! A model file run from Rust with the one dependency: the bench's sample model (on a device:
//! `RustixSys`, `DeviceAccess::for_device(&COMMA_THREE)` and a file exported at the desk), opened
//! from a path (mapped read-only), its inputs and outputs listed, run in one FastRPC call with a
//! deadline, and run again after a DSP restart once the session is recovered.

use std::time::Duration;

use hexrpc_sdk::bench::{catalogue, Bench};
use hexrpc_sdk::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bench = Bench::new();
    catalogue::register_sample_model(&bench);
    let served = ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), FilePolicy::for_board(bench.board())?)?;
    let path = std::env::temp_dir().join(format!("hexrpc-sdk-model-{}.hxm", std::process::id()));
    std::fs::write(&path, catalogue::sample_model_file(16))?;
    let mut model = Model::open_path(&served, path.to_str().ok_or("path")?)?;
    std::fs::remove_file(&path)?;
    for t in model.inputs().iter().chain(model.outputs()) {
        println!("{} {} {:?} ({} bytes)", t.name, t.dtype.name(), t.shape, t.len);
    }
    let x: Vec<u8> = (0..16).collect();
    let (mut y, mut z) = ([0u8; 16], [0u8; 16]);
    let run = model.run(&[&x], &mut [&mut y, &mut z], Some(Duration::from_secs(1)))?;
    assert_eq!((run.launches, run.calls), (2, 1));
    assert!(x.iter().zip(&z).all(|(a, b)| *b == a + 8));
    // A DSP restart: the run fails and says to recover; after recovery the same model runs.
    bench.restart_dsp();
    match model.run(&[&x], &mut [&mut y, &mut z], None) {
        Err(e) if e.is_recoverable() => served.session().recover()?,
        other => return Err(format!("expected a recoverable failure, got {other:?}").into()),
    }
    model.run(&[&x], &mut [&mut y, &mut z], None)?;
    assert!(x.iter().zip(&y).all(|(a, b)| *b == a + 3));
    println!("{} launches in {} FastRPC call a run (simulated DSP)", run.launches, run.calls);
    Ok(())
}
