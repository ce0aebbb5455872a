//! Cache maintenance of lease memory on cached ION: the downstream driver maintains in/out
//! buffer arguments only, never handles, so on a board whose DSP is not I/O-coherent the HAL
//! cleans after CPU writes and invalidates before CPU reads; on a coherent board (the comma
//! three) it does nothing.

use hexrpc_bench::{Bench, BenchConfig, CallKind};
use hexrpc_bsp::{Board, DeviceAccess, BENCH};

/// The bench board with DSP context banks that do not snoop the CPU caches.
static NON_COHERENT: Board = Board { name: "bench-noncoherent", dsp_coherent: false, ..BENCH };

fn cache_ops(bench: &Bench) -> (u64, u64) {
    let c = bench.counts();
    (c.of(CallKind::IonCleanCaches), c.of(CallKind::IonInvCaches))
}

fn roundtrip(board: &'static Board) -> ((u64, u64), (u64, u64)) {
    let bench = Bench::with_config(BenchConfig { board, ..BenchConfig::for_board(board) });
    let session = hexrpc_hal::Session::start(bench.clone(), &DeviceAccess::for_device(board)).unwrap();
    let mut lease = session.alloc(8192).unwrap();
    let before = cache_ops(&bench);
    lease.write_at(100, &[7; 64]).unwrap();
    let written = cache_ops(&bench);
    let mut back = [0u8; 64];
    lease.read_at(100, &mut back).unwrap();
    assert_eq!(back, [7; 64]);
    let read = cache_ops(&bench);
    ((written.0 - before.0, written.1 - before.1), (read.0 - written.0, read.1 - written.1))
}

#[test]
fn a_non_coherent_board_cleans_after_writes_and_invalidates_before_reads() {
    let (write, read) = roundtrip(&NON_COHERENT);
    assert_eq!(write, (1, 0), "one clean after the write");
    assert_eq!(read, (0, 1), "one invalidate before the read");
}

#[test]
fn a_coherent_board_does_no_cache_maintenance() {
    const { assert!(BENCH.dsp_coherent, "the bench models the comma three") };
    assert_eq!(roundtrip(&BENCH), ((0, 0), (0, 0)));
}
