//! The `hexrpc` binary as a user runs it: exit codes, help, and the JSON shapes. One test binary
//! (`--test cli`), a module per command or topic; the helpers are `tests/common`'s.

#[path = "../common/mod.rs"]
mod common;

mod abi;
mod bench;
mod build_lib;
mod model;
mod output;
mod probe;
mod replay;
mod run;
mod selftest;
mod usage;
