//! The bench's frame server process (`hexrpc_scenarios::frame_server`): a stand-in for
//! VisionIPC that shares one camera buffer over a UNIX socket and writes frames into it.

#![forbid(unsafe_code)]

fn main() {
    hexrpc_scenarios::frame_server::main_of("bench-frame-server");
}
