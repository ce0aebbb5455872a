//! The bench's frame server process (`hexrpc_scenarios::frame_server`): a stand-in for
//! VisionIPC that shares one camera buffer over a UNIX socket and writes frames into it.

#![forbid(unsafe_code)]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = hexrpc_scenarios::frame_server::serve(&args) {
        eprintln!("bench-frame-server: {e}");
        std::process::exit(1);
    }
}
