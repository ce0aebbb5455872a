//! Arenas: the offset allocator against a model (random alloc/free sequences), and arenas on a
//! bench session (views of the arena's lease, copies through sub-allocations, reuse, the typed
//! full errors, release of the lease).

use std::sync::Arc;
use std::time::Duration;

use hexrpc_bench::Bench;
use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::Errno;
use hexrpc_hal::arena::Block;
use hexrpc_hal::{
    Arena, ArenaBuf, ArenaError, Cause, ErrorKind, OffsetAllocator, Session, SharedArena, SharedArenaBuf, Stage, ARENA_ALIGN, ARENA_BLOCKS,
};
use proptest::prelude::*;

/// How long teardown on other threads may take to give everything back.
const SETTLE: Duration = Duration::from_secs(2);

const GRANULE: u64 = ARENA_ALIGN as u64;

// ---------------------------------------------------------------------------------------------
// The offset allocator against a model.

/// A small pool, so random sequences run into node exhaustion.
const NODES: usize = 12;

/// The allocator's size is a compile-time constant: its node pool and class tables, inline (the
/// HAL is `no_std` without `alloc`: there is no heap to use).
const ARENA_ALLOCATOR_SIZE: usize = core::mem::size_of::<OffsetAllocator<ARENA_BLOCKS>>();
const _: () = assert!(ARENA_ALLOCATOR_SIZE <= 48 * 1024, "an arena's bookkeeping stays under 48 KiB");
const _: () = assert!(
    core::mem::size_of::<OffsetAllocator<{ 2 * ARENA_BLOCKS }>>() - ARENA_ALLOCATOR_SIZE <= 48 * ARENA_BLOCKS,
    "at most 48 bytes per node"
);

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        len: u64,
        align: u64,
    },
    /// Frees the live block at this index (modulo the count).
    Free(usize),
    /// Offers a block of another allocator.
    FreeForeign,
}

fn len_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..4096,
        2 => (1u64..64).prop_map(|g| g * GRANULE),
        1 => Just(0u64),
        1 => 4096u64..1 << 20,
        1 => (0u64..256).prop_map(|d| u64::MAX - d),
        1 => (20u32..63).prop_map(|b| 1u64 << b),
    ]
}

fn align_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u32..8).prop_map(|b| 1u64 << b),
        3 => (7u32..16).prop_map(|b| 1u64 << b),
        1 => (16u32..64).prop_map(|b| 1u64 << b),
        1 => prop::sample::select(vec![0u64, 3, 100, 129, u64::MAX]),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (len_strategy(), align_strategy()).prop_map(|(len, align)| Op::Alloc { len, align }),
        4 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::FreeForeign),
    ]
}

fn capacity_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => 0u64..256,
        6 => 1u64..(256 * 1024),
        1 => (30u32..64).prop_map(|b| (1u64 << b) + 77),
        1 => Just(u64::MAX),
    ]
}

/// What the allocator should hold: the live blocks (offset, size) and the managed capacity.
struct Model {
    capacity: u64,
    live: Vec<(u64, u64, Block)>,
}

impl Model {
    /// The free ranges in address order: the complement of the live blocks.
    fn free_ranges(&self) -> Vec<(u64, u64)> {
        let mut used: Vec<(u64, u64)> = self.live.iter().map(|(o, s, _)| (*o, *s)).collect();
        used.sort_unstable();
        let mut free = Vec::new();
        let mut at = 0u64;
        for (o, s) in used {
            if o > at {
                free.push((at, o - at));
            }
            at = o + s;
        }
        if self.capacity > at {
            free.push((at, self.capacity - at));
        }
        free
    }

    /// Whether some free range holds `len` bytes (rounded to granules) at `align`.
    fn fits(&self, len: u64, align: u64) -> bool {
        let size = u128::from(len.div_ceil(GRANULE)) * u128::from(GRANULE);
        let align = u128::from(align.max(GRANULE));
        self.free_ranges().iter().any(|&(o, s)| {
            let start = u128::from(o).div_ceil(align) * align;
            start + size <= u128::from(o) + u128::from(s)
        })
    }

    fn check_stats(&self, a: &OffsetAllocator<NODES>) {
        let st = a.stats();
        let free = self.free_ranges();
        assert_eq!(st.capacity, self.capacity);
        assert_eq!(st.used + st.free, st.capacity, "used + free = capacity");
        assert_eq!(st.used, self.live.iter().map(|l| l.1).sum::<u64>());
        assert_eq!(st.live_blocks as usize, self.live.len());
        assert_eq!(st.free_blocks as usize, free.len(), "free blocks are coalesced: {free:?}");
        assert_eq!(st.largest_free, free.iter().map(|f| f.1).max().unwrap_or(0));
        assert_eq!(st.nodes_in_use, st.live_blocks + st.free_blocks);
        assert_eq!(st.nodes as usize, NODES);
    }
}

fn run(capacity: u64, ops: Vec<Op>, free_order: Vec<usize>) {
    let mut a = OffsetAllocator::<NODES>::new(capacity);
    let mut other = OffsetAllocator::<NODES>::new(1 << 20);
    let mut m = Model { capacity: capacity / GRANULE * GRANULE, live: Vec::new() };
    m.check_stats(&a);
    for op in ops {
        match op {
            Op::Alloc { len, align } => {
                let before = a.stats();
                let fits = m.fits(len, align);
                let r = a.alloc(len, align);
                let refused = r.is_err();
                match r {
                    Ok(b) => {
                        assert!(len > 0 && align.is_power_of_two());
                        let (o, s) = (b.offset(), b.size());
                        assert_eq!(s, len.div_ceil(GRANULE) * GRANULE, "rounded up to the granule");
                        assert_eq!(o % align.max(GRANULE), 0, "aligned: offset {o}, align {align}");
                        assert!(o.checked_add(s).is_some_and(|end| end <= m.capacity), "inside the capacity");
                        for (lo, ls, _) in &m.live {
                            assert!(o + s <= *lo || lo + ls <= o, "{o}+{s} overlaps {lo}+{ls}");
                        }
                        m.live.push((o, s, b));
                    }
                    Err(ArenaError::ZeroLength) => assert_eq!(len, 0),
                    Err(ArenaError::BadAlign { align: got }) => {
                        assert!(len > 0 && !align.is_power_of_two());
                        assert_eq!(got, align);
                    }
                    Err(ArenaError::NoFit { requested, align: got, largest_free }) => {
                        assert!(len > 0 && align.is_power_of_two());
                        assert!(!fits, "refused {len} at {align} though a free range fits: {:?}", m.free_ranges());
                        assert_eq!((requested, got, largest_free), (len, align, before.largest_free));
                    }
                    Err(ArenaError::NodesExhausted { nodes }) => {
                        assert!(fits, "no range fits, so the refusal should say so");
                        assert_eq!(nodes as usize, NODES);
                        assert!(NODES - before.nodes_in_use as usize <= 1, "refused with two spare nodes: {before:?}");
                    }
                    Err(e) => panic!("unexpected {e}"),
                }
                if refused {
                    assert_eq!(a.stats(), before, "a refused request changes nothing");
                }
            }
            Op::Free(i) if !m.live.is_empty() => {
                let (_, _, b) = m.live.swap_remove(i % m.live.len());
                assert_eq!(a.free(b), Ok(()));
            }
            Op::Free(_) => {}
            Op::FreeForeign => {
                if let Ok(b) = other.alloc(GRANULE, 1) {
                    let before = a.stats();
                    assert_eq!(a.free(b), Err(ArenaError::ForeignBlock));
                    assert_eq!(a.stats(), before, "a refused free changes nothing");
                }
            }
        }
        m.check_stats(&a);
    }
    // Everything freed, in a random order, leaves one free block of the whole capacity.
    for i in free_order {
        if m.live.is_empty() {
            break;
        }
        let (_, _, b) = m.live.swap_remove(i % m.live.len());
        a.free(b).unwrap();
        m.check_stats(&a);
    }
    for (_, _, b) in m.live.drain(..) {
        a.free(b).unwrap();
    }
    m.check_stats(&a);
    let st = a.stats();
    assert_eq!((st.used, st.live_blocks), (0, 0));
    if m.capacity > 0 {
        assert_eq!((st.free_blocks, st.largest_free, st.nodes_in_use), (1, m.capacity, 1));
        // And the whole capacity can be taken again as one block.
        let all = a.alloc(m.capacity, 1).unwrap();
        assert_eq!((all.offset(), all.size()), (0, m.capacity));
        a.free(all).unwrap();
    } else {
        assert_eq!((st.free_blocks, st.largest_free, st.nodes_in_use), (0, 0, 0));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_alloc_free_sequences_match_the_model(
        capacity in capacity_strategy(),
        ops in prop::collection::vec(op_strategy(), 0..120),
        free_order in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        run(capacity, ops, free_order);
    }
}

#[test]
fn node_exhaustion_is_a_typed_error_and_recovers() {
    let mut a = OffsetAllocator::<4>::new(64 * GRANULE);
    // Each allocation splits off the tail: 3 blocks + the tail use the 4 nodes.
    let blocks: Vec<Block> = (0..3).map(|_| a.alloc(1, 1).unwrap()).collect();
    assert_eq!(a.stats().nodes_in_use, 4);
    assert_eq!(a.alloc(1, 1), Err(ArenaError::NodesExhausted { nodes: 4 }));
    // The tail taken whole needs no node.
    let tail = a.alloc(61 * GRANULE, 1).unwrap();
    assert_eq!(a.stats().free, 0);
    assert!(matches!(a.alloc(1, 1), Err(ArenaError::NoFit { largest_free: 0, .. })));
    for b in blocks.into_iter().chain([tail]) {
        a.free(b).unwrap();
    }
    assert_eq!((a.stats().free_blocks, a.stats().largest_free), (1, 64 * GRANULE));
}

#[test]
fn an_arena_sized_allocator_serves_large_capacities() {
    let mut a = OffsetAllocator::<ARENA_BLOCKS>::new(64 << 20);
    let x = a.alloc(1000, 4096).unwrap();
    let y = a.alloc(3 << 20, 128).unwrap();
    let z = a.alloc(1, 1 << 24).unwrap();
    assert_eq!((x.offset(), z.offset() % (1 << 24)), (0, 0));
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.free(z).unwrap();
    let st = a.stats();
    assert_eq!((st.free_blocks, st.largest_free, st.nodes as usize), (1, 64 << 20, ARENA_BLOCKS));
}

// ---------------------------------------------------------------------------------------------
// Arenas on a bench session.

fn start(board: &'static Board) -> (Bench, Session<Bench>) {
    let bench = Bench::for_board(board);
    let session = Session::start(bench.clone(), &DeviceAccess::for_bench_board(board).expect("a bench board")).expect("session");
    (bench, session)
}

fn sub_allocations_are_views_of_the_arena_lease(board: &'static Board) {
    let (_bench, session) = start(board);
    let arena = session.arena(1 << 20).unwrap();
    assert_eq!(arena.len(), 1 << 20);
    let a = arena.alloc(1000).unwrap();
    let b = arena.alloc_aligned(5000, 4096).unwrap();
    let c = arena.alloc(1).unwrap();
    let lease = arena.lease();
    assert_ne!(lease.lease_id(), 0);
    for buf in [&a, &b, &c] {
        assert_eq!(buf.offset() % ARENA_ALIGN, 0);
        assert!(buf.offset() + buf.len() <= arena.len());
    }
    assert_eq!(b.offset() % 4096, 0);
    let mut ranges = [(a.offset(), a.len()), (b.offset(), b.len()), (c.offset(), c.len())];
    ranges.sort_unstable();
    assert!(ranges.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "disjoint: {ranges:?}");
    let v = b.view(10, 100).unwrap();
    assert_eq!((v.fd(), v.lease_id(), v.lease_len()), (lease.fd(), lease.lease_id(), lease.len()));
    assert_eq!((v.offset(), v.len()), (b.offset() + 10, 100));
    let w = b.whole().unwrap();
    assert_eq!((w.offset(), w.len()), (b.offset(), 5000));
    assert_eq!(c.whole().unwrap().offset(), c.offset());
    assert_eq!(b.view(4990, 10).unwrap().offset(), b.offset() + 4990, "up to the buffer's end");
    for (off, len) in [(4990, 11), (5001, 0), (usize::MAX, 2), (1, usize::MAX)] {
        let e = b.view(off, len).unwrap_err();
        assert_eq!((e.stage, e.cause), (Stage::Alloc, Cause::Invalid), "view {off}+{len} of a 5000-byte buffer");
    }
    let st = arena.stats();
    assert_eq!(st.live_blocks, 3);
    assert_eq!(st.used, 1024 + 5120 + 128, "each rounded up to the granule");
}

fn copies_round_trip_through_sub_allocations(board: &'static Board) {
    let (_bench, session) = start(board);
    let arena = session.arena(64 * 1024).unwrap();
    let mut a = arena.alloc(1000).unwrap();
    let mut b = arena.alloc(300).unwrap();
    let mut c = arena.alloc(4096).unwrap();
    let pa: Vec<u8> = (0..1000).map(|i| (i * 7 + 1) as u8).collect();
    let pb: Vec<u8> = (0..300).map(|i| (i * 13 + 5) as u8).collect();
    a.write_at(0, &pa).unwrap();
    b.write_at(0, &pb).unwrap();
    c.fill(0, 4096, 0xC3).unwrap();
    c.write_at(100, b"arena").unwrap();
    let mut back = vec![0u8; 1000];
    a.read_at(0, &mut back).unwrap();
    assert_eq!(back, pa);
    let mut back = vec![0u8; 300];
    b.whole().unwrap().read(&mut back).unwrap();
    assert_eq!(back, pb, "through a view");
    let mut five = [0u8; 5];
    c.read_at(100, &mut five).unwrap();
    assert_eq!(&five, b"arena");
    // The same bytes through the lease, at the buffer's offset.
    let mut via_lease = [0u8; 8];
    arena.lease().read_at(c.offset() + 96, &mut via_lease).unwrap();
    assert_eq!(via_lease, [0xC3, 0xC3, 0xC3, 0xC3, b'a', b'r', b'e', b'n']);
    // Copies past a buffer are refused and write nothing.
    for e in [a.write_at(999, &[1, 2]).unwrap_err(), a.fill(1, 1000, 0).unwrap_err(), a.read_at(1, &mut [0u8; 1000]).unwrap_err()] {
        assert_eq!(e.cause, Cause::Invalid);
    }
    assert!(b.write_at(usize::MAX, &[1]).is_err());
    let mut all = vec![0u8; 1000];
    a.read_at(0, &mut all).unwrap();
    assert_eq!(all, pa, "the refused copies wrote nothing");
    // Two threads write their own buffers of one arena at once.
    std::thread::scope(|s| {
        s.spawn(|| a.fill(0, 1000, 0xAA).unwrap());
        s.spawn(|| b.fill(0, 300, 0xBB).unwrap());
    });
    let (mut x, mut y) = ([0u8; 1000], [0u8; 300]);
    a.read_at(0, &mut x).unwrap();
    b.read_at(0, &mut y).unwrap();
    assert!(x.iter().all(|&v| v == 0xAA) && y.iter().all(|&v| v == 0xBB));
    c.read_at(100, &mut five).unwrap();
    assert_eq!(&five, b"arena", "neighbours untouched");
}

fn freed_ranges_are_reused(board: &'static Board) {
    let (_bench, session) = start(board);
    let arena = session.arena(1 << 20).unwrap();
    let first = arena.alloc(64 * 1024).unwrap();
    let at = first.offset();
    drop(first);
    assert_eq!(arena.stats().used, 0);
    assert_eq!(arena.alloc(64 * 1024).unwrap().offset(), at, "the freed range again");
    // Fill the arena with 16 buffers, free one in the middle: the next one takes its place.
    let mut bufs: Vec<ArenaBuf<'_, '_, Bench>> = (0..16).map(|_| arena.alloc(64 * 1024).unwrap()).collect();
    assert_eq!(arena.stats().free, 0);
    let hole = bufs.remove(7);
    let hole_at = hole.offset();
    drop(hole);
    let again = arena.alloc(60 * 1024).unwrap();
    assert_eq!(again.offset(), hole_at);
    drop(again);
    drop(bufs);
    let st = arena.stats();
    assert_eq!((st.used, st.live_blocks, st.free_blocks, st.largest_free), (0, 0, 1, 1 << 20), "coalesced back to one range");
}

fn a_full_arena_is_a_typed_error(board: &'static Board) {
    let (_bench, session) = start(board);
    let arena = session.arena(64 * 1024).unwrap();
    let _big = arena.alloc(60 * 1024).unwrap();
    let e = arena.alloc(8 * 1024).unwrap_err();
    assert_eq!((e.stage, e.cause), (Stage::Alloc, Cause::ArenaFull { requested: 8192, largest_free: 4096 }));
    assert_eq!((e.kind(), e.errno()), (ErrorKind::Usage, Errno::ENOMEM));
    let text = e.to_string();
    assert!(text.contains("8192") && text.contains("4096"), "{text}");
    // It fits by length but not at a 64 KiB alignment.
    let e = arena.alloc_aligned(4096, 64 * 1024).unwrap_err();
    assert_eq!(e.cause, Cause::ArenaFull { requested: 4096, largest_free: 4096 });
    assert_eq!(arena.alloc(0).unwrap_err().cause, Cause::Invalid);
    assert_eq!(arena.alloc_aligned(128, 3).unwrap_err().cause, Cause::Invalid);
    assert_eq!(arena.alloc(4096).unwrap().len(), 4096, "the last range still fits exactly");

    // Bookkeeping: every granule-sized block splits off a tail; the last node goes to the tail.
    let small = session.arena(ARENA_BLOCKS * ARENA_ALIGN * 2).unwrap();
    let bufs: Vec<_> = (0..ARENA_BLOCKS - 1).map(|_| small.alloc(1).unwrap()).collect();
    let e = small.alloc(1).unwrap_err();
    assert_eq!(e.cause, Cause::ArenaBlocks { blocks: ARENA_BLOCKS as u32 });
    assert_eq!(e.errno(), Errno::ENOSPC);
    assert!(e.to_string().contains("1024"), "{e}");
    assert_eq!(small.stats().nodes_in_use as usize, ARENA_BLOCKS);
    drop(bufs);
    assert_eq!(small.stats().nodes_in_use, 1);
}

fn dropping_the_arena_releases_its_lease(board: &'static Board) {
    let (bench, session) = start(board);
    let before = bench.settle(&bench.snapshot(), SETTLE);
    {
        let arena: Arena<'_, Bench> = session.arena(256 * 1024).unwrap();
        let mut bufs: Vec<_> = (0..40).map(|i| arena.alloc(1000 + i * 100).unwrap()).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            b.fill(0, 100, i as u8).unwrap();
        }
        let live = bench.snapshot();
        assert_eq!(live.ion_buffers, before.ion_buffers + 1, "forty buffers, one lease");
        assert_eq!(live.host_mappings, before.host_mappings + 1, "one mapping");
        drop(bufs);
        assert_eq!(bench.settle(&live, SETTLE), live, "freeing sub-allocations keeps the lease");
    }
    assert_eq!(bench.settle(&before, SETTLE), before, "the lease went back with the arena");
}

fn shared_arenas_own_their_session(board: &'static Board) {
    let bench = Bench::for_board(board);
    let start_counts = bench.snapshot();
    let session = Arc::new(Session::start(bench.clone(), &DeviceAccess::for_bench_board(board).expect("a bench board")).expect("session"));
    let arena: Arc<SharedArena<Bench>> = session.arena_shared(128 * 1024).unwrap();
    let mut a = arena.alloc(2000).unwrap();
    let b = arena.alloc_aligned(100, 8192).unwrap();
    assert_eq!(b.offset() % 8192, 0);
    let v = b.view(4, 8).unwrap();
    assert_eq!((v.fd(), v.lease_len(), v.offset()), (arena.lease().fd(), 128 * 1024, b.offset() + 4));
    assert_eq!(b.lease().lease_id(), arena.lease().lease_id());
    a.write_at(10, b"shared").unwrap();
    // A buffer moves to another thread and writes there.
    let a = std::thread::spawn(move || {
        a.fill(1000, 1000, 0x5A).unwrap();
        a
    })
    .join()
    .unwrap();
    let mut back = [0u8; 6];
    a.read_at(10, &mut back).unwrap();
    assert_eq!(&back, b"shared");
    assert_eq!(arena.stats().live_blocks, 2);
    // Dropped in any order: the buffers keep the arena, the arena the session.
    drop(session);
    drop(arena);
    drop(b);
    let last: SharedArenaBuf<Bench> = a;
    assert_eq!(last.arena().stats().live_blocks, 1);
    assert!(last.view(0, 2001).is_err());
    drop(last);
    assert_eq!(bench.settle(&start_counts, SETTLE), start_counts, "everything given back");
}

/// Shared handles go to other threads (bindings keep them in their own tables).
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<SharedArena<Bench>>();
    shareable::<SharedArenaBuf<Bench>>();
    shareable::<Arena<'static, Bench>>();
    shareable::<ArenaBuf<'static, 'static, Bench>>();
};

hexrpc_bench::on_both_kernels!(
    sub_allocations_are_views_of_the_arena_lease,
    copies_round_trip_through_sub_allocations,
    freed_ranges_are_reused,
    a_full_arena_is_a_typed_error,
    dropping_the_arena_releases_its_lease,
    shared_arenas_own_their_session,
);
