use hexrpc_sdk::bench::{catalogue, Bench};
use hexrpc_sdk::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The bench's DSP model of "add_u8" (out[i] = in[i] + k). Device: RustixSys,
    // DeviceAccess::for_device(&COMMA_THREE) and std::fs::read("add_u8.so")?.
    let bench = Bench::new();
    catalogue::register(&bench, &catalogue::ADD_U8);
    let served = ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), FilePolicy::for_board(bench.board())?)?;
    let image = catalogue::image("add_u8"); // &'static [u8] here; a Vec<u8> or Arc<[u8]> works too
    let kernel = served.open_kernel("add_u8", image, Signature::parse("buf,buf,u32")?, AbiVersion::V2)?;
    let mut lease = served.session().alloc(16 * 1024)?;
    lease.write_at(100, &[1, 2, 3, 4])?;
    let (input, output) = (lease.view(100, 4)?, lease.view(8192 + 4, 4)?);
    let dsp_us = kernel.launch(&[&input, &output], &[Scalar::U32(10)])?; // or launch_with_deadline
    let mut out = [0u8; 4];
    output.read(&mut out)?;
    assert_eq!(out, [11, 12, 13, 14]);
    // One error type: the stage, what to do (ErrorKind), and the typed cause.
    let refused: Error = kernel.launch(&[&input], &[Scalar::U32(1)]).unwrap_err();
    assert_eq!((refused.stage(), refused.kind()), ("launch-pack", ErrorKind::Usage));
    println!("launched in {dsp_us} DSP µs (simulated); {refused}");
    Ok(())
}
