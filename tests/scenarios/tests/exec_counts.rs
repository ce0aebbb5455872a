//! Execution counts on the executor: what qemu-hexagon executed for each invoke and each kernel
//! of a batch (packets, instructions, HVX instructions; its own counters, read by the bench
//! shell), as `Bench::take_exec_counts` reports them. They are emulated counts, never DSP time:
//! the tests check that they are exactly repeatable run to run, that they split per kernel (the
//! entry's timer reads around each kernel call), that they grow as the work does, and that HVX
//! instructions are told apart.
//!
//! Skips (with a message) when clang-19, ld.lld-19 or qemu-hexagon cannot run here.

use hexrpc_bench::executor::{wire::ExecCounts, Flavour, InvokeCounts};
use hexrpc_bench::Bench;
use hexrpc_bsp::Board;
use hexrpc_runtime::launch::{Batch, BufferRef, Scalar, Signature};
use hexrpc_scenarios::suite::build_table_image;
use hexrpc_scenarios::Stack;

hexrpc_bench::on_both_kernels!(counts_repeat_exactly_and_split_per_kernel_in_proportion_to_the_work, hvx_instructions_are_counted_apart);

/// The batches' invokes (method 2 or 3) among `counts`.
fn batches(counts: Vec<InvokeCounts>) -> Vec<InvokeCounts> {
    counts.into_iter().filter(|c| matches!(c.method, 2 | 3)).collect()
}

fn counts_repeat_exactly_and_split_per_kernel_in_proportion_to_the_work(board: &'static Board) {
    let Some(tc) = hexrpc_scenarios::suite::tools_or_skip() else { return };
    const TABLE: [(&str, &str); 2] = [("spin_u32", "buf,u32"), ("bump_u8", "buf,u32")];
    let sigs: Vec<Signature> = TABLE.iter().map(|(_, s)| Signature::parse(s).unwrap()).collect();
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("counted", build_table_image(&tc, &TABLE, Flavour::Scalar).expect("build")).expect("open");
    let mut lease = stack.session().alloc(64 * 1024).unwrap();
    let mut runs: Vec<InvokeCounts> = Vec::new();
    for run in 0..3 {
        lease.fill(0, 64 * 1024, 0).unwrap();
        let (spin, bytes) = (lease.view(0, 4).unwrap(), lease.view(4096, 4096).unwrap());
        let mut batch = Batch::new(&sigs).unwrap();
        for iters in [1000, 2000, 3000] {
            batch.push(0, &[BufferRef::of(&spin)], &[Scalar::U32(iters)]).unwrap();
        }
        batch.push(1, &[BufferRef::of(&bytes)], &[Scalar::U32(4096)]).unwrap();
        let _ = bench.take_exec_counts();
        assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(4), "{}: run {run}", board.name);
        let (counts, dropped) = bench.take_exec_counts();
        assert_eq!(dropped, 0);
        let mut b = batches(counts);
        assert_eq!(b.len(), 1, "{}: run {run}: one batch invoke: {b:?}", board.name);
        runs.push(b.remove(0));
    }
    let first = &runs[0];
    assert_eq!(first.retval, 0);
    for (n, r) in runs.iter().enumerate().skip(1) {
        assert_eq!((r.total, &r.kernels), (first.total, &first.kernels), "{}: run {n} differs from run 0", board.name);
    }
    let k = first.kernels.as_ref().expect("paired marks");
    assert_eq!(k.len(), 4, "{}: one count per record: {k:?}", board.name);
    // Three spins of 1,000, 2,000 and 3,000 iterations: each 1,000 more iterations cost the same.
    let step = k[1].since(k[0]);
    assert!(step.packets > 1000 && step.instructions >= step.packets, "{}: {k:?}", board.name);
    assert_eq!(k[2].since(k[1]), step, "{}: the work and the count in proportion: {k:?}", board.name);
    // bump_u8 over 4,096 bytes: at least a packet a byte's load, add and store can share.
    assert!(k[3].packets >= 4096 / 4, "{}: {k:?}", board.name);
    // Scalar code: no HVX instruction; the kernels are inside the invoke.
    assert!(k.iter().all(|c| c.hvx == 0) && first.total.hvx == 0, "{}: {first:?}", board.name);
    let kernels = k.iter().fold(ExecCounts::default(), |a, c| a.plus(*c));
    assert!(kernels.packets < first.total.packets && kernels.instructions < first.total.instructions, "{}: {first:?}", board.name);
}

fn hvx_instructions_are_counted_apart(board: &'static Board) {
    let Some(tc) = hexrpc_scenarios::suite::tools_or_skip() else { return };
    const TABLE: [(&str, &str); 1] = [("add_u8_hvx", "buf,buf,buf,u32")];
    let sigs: Vec<Signature> = TABLE.iter().map(|(_, s)| Signature::parse(s).unwrap()).collect();
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let lib = stack.open("counted_hvx", build_table_image(&tc, &TABLE, Flavour::Hvx).expect("build")).expect("open");
    let lease = stack.session().alloc(64 * 1024).unwrap();
    const N: u32 = 128 * 64;
    let (a, b, o) = (lease.view(0, N as usize).unwrap(), lease.view(16384, N as usize).unwrap(), lease.view(32768, N as usize).unwrap());
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(0, &[BufferRef::of(&a), BufferRef::of(&b), BufferRef::of(&o)], &[Scalar::U32(N)]).unwrap();
    batch.push(0, &[BufferRef::of(&a), BufferRef::of(&b), BufferRef::of(&o)], &[Scalar::U32(N / 2)]).unwrap();
    let _ = bench.take_exec_counts();
    assert_eq!(batch.run(&lib).map(|r| r.launches), Ok(2));
    let b = batches(bench.take_exec_counts().0);
    assert_eq!(b.len(), 1, "{}: {b:?}", board.name);
    let k = b[0].kernels.as_ref().expect("paired marks");
    // 64 vectors: two loads, an add and a store each; half as many for half the bytes.
    assert!(k[0].hvx >= 4 * 64 && k[0].hvx_share() > 0.1, "{}: {k:?}", board.name);
    assert_eq!(k[0].hvx - k[1].hvx, 4 * 32, "{}: 32 vectors more, four HVX instructions each: {k:?}", board.name);
}
