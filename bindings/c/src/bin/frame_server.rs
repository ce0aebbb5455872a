//! The bench's frame server process for the C ABI's tests (`tests/c_abi.rs`): the second, real
//! process that allocates a camera buffer from its own bench, shares its descriptor over a UNIX
//! socket and writes frames into it ([`hexrpc_scenarios::frame_server`], the same server as
//! hexrpc-scenarios' `bench-frame-server`). It is a binary of this package so that the tests can
//! find it (`CARGO_BIN_EXE_*` names only a package's own binaries); bench builds only.

#![forbid(unsafe_code)]

fn main() {
    hexrpc_scenarios::frame_server::main_of("hexrpc-ffi-frame-server");
}
