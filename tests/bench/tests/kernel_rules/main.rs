//! The FastRPC kernel rules of both bench kernels (docs/bench.md, "Kernel rules"), each driven
//! through the raw typed calls of `hexrpc_drivers` on the bench seam: handle maps keyed by fd
//! number that outlive the call (R1), the lowest-free descriptor rule that hands a dropped
//! lease's number to the next one (R8), MMAP `vaddrout` (R2), one DSP process per identity
//! (R3), calls that go on after an interrupt (R4), the blocking release on close (R5), and the
//! session count (R9).
//!
//! Descriptor numbers are process-wide, so every test here holds one lock: no other test of
//! this binary allocates a number between a close and the allocation that must get it back.
//!
//! The tests are grouped by topic: `maps` (R1, R8, R2 and the downstream heap maps),
//! `processes` (R3, R4, R5, R9, INIT and the calls before it) and `details` (the downstream
//! driver's own paths); `rig` holds the set-up they share. The rules that hold on every kernel
//! run as `downstream::x`, `upstream::x` (and `linux::x`), named here.

#[path = "../common/mod.rs"]
mod common;
mod details;
mod maps;
mod processes;
mod rig;

use hexrpc_bench::on_both_kernels;
use maps::{
    fdlist_policy_every_handle_releases_at_once, handle_map_outlives_the_call, mmap_vaddrout, stale_fd_number_hands_the_dsp_the_old_buffer,
};
use processes::{
    eight_sessions, interrupted_call_writes_until_the_release, one_dsp_process_per_identity, release_on_close_is_a_kernel_message,
};

on_both_kernels!(
    handle_map_outlives_the_call,
    fdlist_policy_every_handle_releases_at_once,
    stale_fd_number_hands_the_dsp_the_old_buffer,
    mmap_vaddrout,
    one_dsp_process_per_identity,
    interrupted_call_writes_until_the_release,
    release_on_close_is_a_kernel_message,
    eight_sessions,
);
