//! The offset allocator behind an arena: a two-level segregated-fit (TLSF) allocator with a
//! fixed node pool (its design is on [`OffsetAllocator`]).

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

/// log2 of [`GRANULE`].
const GRANULE_LOG2: u32 = 7;

/// The unit of every offset and size: 128 bytes, the HVX vector length (tinygrad's DSP kernels
/// load and store whole aligned vectors).
pub const GRANULE: u64 = 1 << GRANULE_LOG2;

/// log2 of the second-level subdivisions of a first-level class.
const SL_LOG2: u32 = 4;

/// Second-level subdivisions of each first-level class.
const SL: usize = 1 << SL_LOG2;

/// First-level classes: sizes below [`SL`] granules share class 0 (one list per size); a size
/// with highest bit `l >= SL_LOG2` is in class `l - SL_LOG2 + 1`. The largest size is below
/// 2^(64 - GRANULE_LOG2) granules.
const FL: usize = (64 - GRANULE_LOG2 - SL_LOG2 + 1) as usize;

const NIL: u32 = u32::MAX;

/// Distinguishes allocators, so that a block of one is refused by another.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Why an allocation or a free was refused. Nothing changed in the allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ArenaError {
    /// No free range fits `requested` bytes at alignment `align`; the largest free range has
    /// `largest_free` bytes (it may be large enough but not at that alignment).
    NoFit {
        /// The requested length in bytes.
        requested: u64,
        /// The requested alignment in bytes.
        align: u64,
        /// The largest free range in bytes.
        largest_free: u64,
    },
    /// Splitting the block that fits needs a bookkeeping node and all `nodes` are in use
    /// (blocks, free and used together).
    NodesExhausted {
        /// The size of the node pool.
        nodes: u32,
    },
    /// A request of zero bytes.
    ZeroLength,
    /// The alignment is not a power of two.
    BadAlign {
        /// The alignment asked for.
        align: u64,
    },
    /// The block was not made by this allocator, or is no longer live in it.
    ForeignBlock,
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArenaError::NoFit { requested, align, largest_free } => {
                write!(f, "no free range of the arena fits {requested} bytes aligned to {align} (largest free range: {largest_free} bytes)")
            }
            ArenaError::NodesExhausted { nodes } => {
                write!(f, "all {nodes} bookkeeping nodes of the arena are in use (too many blocks, free and used)")
            }
            ArenaError::ZeroLength => write!(f, "a zero-length block was requested"),
            ArenaError::BadAlign { align } => write!(f, "alignment {align} is not a power of two"),
            ArenaError::ForeignBlock => write!(f, "the block is not a live block of this allocator"),
        }
    }
}

impl core::error::Error for ArenaError {}

/// A live block: a byte range of the allocator that made it, given back with
/// [`OffsetAllocator::free`]. Not `Clone`: one block is freed once. Dropping it without freeing
/// keeps its range allocated.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a block that is dropped stays allocated"]
pub struct Block {
    offset: u64,
    size: u64,
    node: u32,
    tag: u32,
    owner: u64,
}

impl Block {
    /// Where the block starts, in bytes (a multiple of the alignment it was asked for and of
    /// [`GRANULE`]).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The bytes the block holds: the request rounded up to a multiple of [`GRANULE`].
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// What an allocator holds, in bytes and blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArenaStats {
    /// The bytes managed: the capacity given, rounded down to a multiple of [`GRANULE`].
    pub capacity: u64,
    /// Bytes in live blocks (each rounded up to a multiple of [`GRANULE`]).
    pub used: u64,
    /// Bytes in free blocks (`capacity - used`).
    pub free: u64,
    /// Live (allocated) blocks.
    pub live_blocks: u32,
    /// Free blocks (after coalescing: no two are adjacent).
    pub free_blocks: u32,
    /// The largest free block in bytes (0 when none is free).
    pub largest_free: u64,
    /// Bookkeeping nodes in use (`live_blocks + free_blocks`).
    pub nodes_in_use: u32,
    /// The size of the node pool.
    pub nodes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// In the spare chain (`next_free`), not a block.
    Spare,
    Free,
    Used,
}

/// One block (or a spare node). Offsets and sizes in granules.
#[derive(Clone, Copy)]
struct Node {
    offset: u64,
    size: u64,
    prev_phys: u32,
    next_phys: u32,
    /// Free blocks: the neighbours in their list. Spare nodes: the next spare (`next_free`).
    prev_free: u32,
    next_free: u32,
    /// Bumped each time the node becomes a used block; a [`Block`] carries it.
    tag: u32,
    state: State,
}

/// A two-level segregated-fit (TLSF) allocator of offsets in `[0, capacity)` with a fixed pool of
/// `N` bookkeeping nodes: its size is fixed by `N`, it never allocates, and it holds no pointers
/// into the memory it manages (it hands out offsets).
///
/// Every block, free or used, is one node of the pool, linked to its physical neighbours (the
/// blocks just before and after it), so freeing a block merges it with free neighbours in O(1).
/// Free blocks are also kept in one of 54 × 16 segregated lists: the first level is the log2
/// class of the block's size (in granules), the second level splits each class into 16
/// equal ranges. Two bitmaps (one bit per first level, one per second level within it) say
/// which lists are non-empty, so finding a list whose every block fits a request is two bit
/// scans.
///
/// Offsets and sizes are in units of [`GRANULE`] bytes: every block starts at a multiple of
/// it and its size is one (a request is rounded up). A request for an alignment above the
/// granule looks for a block that fits it wherever it starts (`len + align - GRANULE`); the
/// leading gap before the aligned start becomes a free block of its own.
///
/// The O(1) path rounds a request up to the next class boundary, as TLSF does, so a free block
/// that fits but lies in the request's own class, or one that fits only thanks to where it
/// starts, is not found that way: when the O(1) path finds nothing, a scan of the free lists
/// that may hold a fitting block (at most the `N` nodes of the pool) decides. A request
/// therefore fails only when no free range fits it, or when splitting the block it would take
/// needs more nodes than are left ([`ArenaError::NodesExhausted`]).
///
/// Memory: 40 bytes per node plus about 3.5 KiB of list heads and bitmaps, all inline; an
/// arena's `OffsetAllocator<1024>` is 44,568 bytes on a 64-bit target.
pub struct OffsetAllocator<const N: usize> {
    nodes: [Node; N],
    /// The first node of each free list.
    heads: [[u32; SL]; FL],
    /// Bit `f`: some list of first level `f` is non-empty.
    fl_bitmap: u64,
    /// Bit `s` of entry `f`: list (f, s) is non-empty.
    sl_bitmap: [u16; FL],
    /// The first spare node.
    spare: u32,
    nodes_in_use: u32,
    live: u32,
    /// Granules in live blocks.
    used: u64,
    /// Granules managed.
    capacity: u64,
    id: u64,
}

const _: () = assert!(SL <= 16, "sl_bitmap entries are u16");
const _: () = assert!(FL <= 64, "fl_bitmap is a u64");

/// The list a free block of `size` granules (>= 1) belongs to.
fn class_of(size: u64) -> (usize, usize) {
    if size < SL as u64 {
        return (0, size as usize);
    }
    let l = 63 - size.leading_zeros();
    let fl = (l - SL_LOG2 + 1) as usize;
    let sl = ((size >> (l - SL_LOG2)) as usize) - SL;
    (fl, sl)
}

/// The first list whose every block has at least `size` granules (>= 1): `size` rounded up to
/// the next class boundary. `None` past the last class.
fn class_at_least(size: u64) -> Option<(usize, usize)> {
    let rounded = if size < SL as u64 { size } else { size.checked_add((1u64 << (63 - size.leading_zeros() - SL_LOG2)) - 1)? };
    let (fl, sl) = class_of(rounded);
    (fl < FL).then_some((fl, sl))
}

/// The smallest multiple of `align` (a power of two) at or above `offset`.
fn align_up(offset: u64, align: u64) -> Option<u64> {
    Some(offset.checked_add(align - 1)? & !(align - 1))
}

/// Where a block of `n` granules at alignment `a` granules starts inside a free block, if it
/// fits.
fn fit(offset: u64, size: u64, n: u64, a: u64) -> Option<u64> {
    let start = align_up(offset, a)?;
    let end = offset.checked_add(size)?;
    (start.checked_add(n)? <= end).then_some(start)
}

impl<const N: usize> OffsetAllocator<N> {
    /// An allocator of `[0, capacity)` (rounded down to a multiple of [`GRANULE`]), all free.
    /// `N` must be at least 1 and below 2^32 - 1 (checked when the type is used).
    pub fn new(capacity: u64) -> Self {
        const { assert!(N >= 1 && N < NIL as usize, "an allocator needs 1 to 2^32 - 2 nodes") };
        let nodes = core::array::from_fn(|i| Node {
            offset: 0,
            size: 0,
            prev_phys: NIL,
            next_phys: NIL,
            prev_free: NIL,
            next_free: if i + 1 < N { (i + 1) as u32 } else { NIL },
            tag: 0,
            state: State::Spare,
        });
        let mut a = OffsetAllocator {
            nodes,
            heads: [[NIL; SL]; FL],
            fl_bitmap: 0,
            sl_bitmap: [0; FL],
            spare: 0,
            nodes_in_use: 0,
            live: 0,
            used: 0,
            capacity: capacity >> GRANULE_LOG2,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        };
        if a.capacity > 0 {
            // The pool has at least one node (checked above).
            if let Some(i) = a.take_node() {
                let n = &mut a.nodes[i as usize];
                n.offset = 0;
                n.size = a.capacity;
                a.insert_free(i);
            }
        }
        a
    }

    /// The bytes managed (the capacity rounded down to a multiple of [`GRANULE`]).
    pub fn capacity(&self) -> u64 {
        self.capacity << GRANULE_LOG2
    }

    /// A block of at least `len` bytes starting at a multiple of `align` (a power of two; any
    /// alignment up to [`GRANULE`] gives a granule-aligned block).
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<Block, ArenaError> {
        if len == 0 {
            return Err(ArenaError::ZeroLength);
        }
        if !align.is_power_of_two() {
            return Err(ArenaError::BadAlign { align });
        }
        let n = len.div_ceil(GRANULE);
        let a = (align >> GRANULE_LOG2).max(1);
        let Some((i, start)) = self.find(n, a) else {
            return Err(ArenaError::NoFit { requested: len, align, largest_free: self.largest_free() });
        };
        let Node { offset, size, .. } = self.nodes[i as usize];
        // `fit` checked start + n <= offset + size.
        let gap = start - offset;
        let tail = size - gap - n;
        let needed = u32::from(gap > 0) + u32::from(tail > 0);
        if needed > N as u32 - self.nodes_in_use {
            return Err(ArenaError::NodesExhausted { nodes: N as u32 });
        }
        self.remove_free(i);
        if gap > 0 {
            self.split_before(i, gap);
            // The gap is free and its previous neighbour is not (free blocks never touch).
        }
        if tail > 0 {
            self.split_after(i, n);
        }
        let node = &mut self.nodes[i as usize];
        node.state = State::Used;
        node.tag = node.tag.wrapping_add(1);
        let block = Block { offset: node.offset << GRANULE_LOG2, size: n << GRANULE_LOG2, node: i, tag: node.tag, owner: self.id };
        self.live += 1;
        self.used += n;
        Ok(block)
    }

    /// Gives `block` back; it merges with free neighbours. A block of another allocator (or one
    /// no longer live here) is refused and nothing changes.
    pub fn free(&mut self, block: Block) -> Result<(), ArenaError> {
        let i = self.live_node(&block).ok_or(ArenaError::ForeignBlock)?;
        let size = self.nodes[i as usize].size;
        self.used -= size;
        self.live -= 1;
        self.nodes[i as usize].state = State::Free;
        let mut at = i;
        let prev = self.nodes[at as usize].prev_phys;
        if prev != NIL && self.nodes[prev as usize].state == State::Free {
            self.remove_free(prev);
            self.absorb_next(prev);
            at = prev;
        }
        let next = self.nodes[at as usize].next_phys;
        if next != NIL && self.nodes[next as usize].state == State::Free {
            self.remove_free(next);
            self.absorb_next(at);
        }
        self.insert_free(at);
        Ok(())
    }

    /// Capacity, use and the largest free block.
    pub fn stats(&self) -> ArenaStats {
        let free_blocks = self.nodes_in_use - self.live;
        ArenaStats {
            capacity: self.capacity(),
            used: self.used << GRANULE_LOG2,
            free: (self.capacity - self.used) << GRANULE_LOG2,
            live_blocks: self.live,
            free_blocks,
            largest_free: self.largest_free(),
            nodes_in_use: self.nodes_in_use,
            nodes: N as u32,
        }
    }

    /// The node of `block` if it is a live block of this allocator.
    fn live_node(&self, block: &Block) -> Option<u32> {
        if block.owner != self.id {
            return None;
        }
        let n = self.nodes.get(block.node as usize)?;
        let ours = n.state == State::Used
            && n.tag == block.tag
            && n.offset.checked_shl(GRANULE_LOG2) == Some(block.offset)
            && n.size.checked_shl(GRANULE_LOG2) == Some(block.size);
        ours.then_some(block.node)
    }

    /// A free block that fits `n` granules at alignment `a` granules, and where it would start.
    fn find(&self, n: u64, a: u64) -> Option<(u32, u64)> {
        // O(1): any block of a class at or above n + a - 1 fits wherever it starts.
        if let Some((fl, sl)) = n.checked_add(a - 1).and_then(class_at_least) {
            if let Some((f, s)) = self.non_empty_at_or_above(fl, sl) {
                let i = self.heads[f][s];
                let node = &self.nodes[i as usize];
                if let Some(start) = fit(node.offset, node.size, n, a) {
                    return Some((i, start));
                }
            }
        }
        // The lists below that class may still hold a fitting block: scan them, smallest
        // classes first (at most every free block once).
        let (mut fl, mut sl) = class_of(n);
        while let Some((f, s)) = self.non_empty_at_or_above(fl, sl) {
            let mut i = self.heads[f][s];
            while i != NIL {
                let node = &self.nodes[i as usize];
                if let Some(start) = fit(node.offset, node.size, n, a) {
                    return Some((i, start));
                }
                i = node.next_free;
            }
            (fl, sl) = if s + 1 < SL { (f, s + 1) } else { (f + 1, 0) };
        }
        None
    }

    /// The first non-empty list at or above (fl, sl), in class order.
    fn non_empty_at_or_above(&self, fl: usize, sl: usize) -> Option<(usize, usize)> {
        if fl >= FL {
            return None;
        }
        let here = u32::from(self.sl_bitmap[fl]) & (u32::MAX << sl);
        if here != 0 {
            return Some((fl, here.trailing_zeros() as usize));
        }
        let above = self.fl_bitmap.checked_shr(fl as u32 + 1).unwrap_or(0);
        if above == 0 {
            return None;
        }
        let f = fl + 1 + above.trailing_zeros() as usize;
        Some((f, self.sl_bitmap[f].trailing_zeros() as usize))
    }

    /// The size in bytes of the largest free block: the largest in the highest non-empty list.
    fn largest_free(&self) -> u64 {
        if self.fl_bitmap == 0 {
            return 0;
        }
        let f = 63 - self.fl_bitmap.leading_zeros() as usize;
        let s = SL - 1 - self.sl_bitmap[f].leading_zeros() as usize;
        let mut best = 0;
        let mut i = self.heads[f][s];
        while i != NIL {
            best = best.max(self.nodes[i as usize].size);
            i = self.nodes[i as usize].next_free;
        }
        best << GRANULE_LOG2
    }

    fn take_node(&mut self) -> Option<u32> {
        let i = self.spare;
        if i == NIL {
            return None;
        }
        let n = &mut self.nodes[i as usize];
        self.spare = n.next_free;
        n.prev_phys = NIL;
        n.next_phys = NIL;
        n.prev_free = NIL;
        n.next_free = NIL;
        n.state = State::Free;
        self.nodes_in_use += 1;
        Some(i)
    }

    /// Returns node `i` to the spare chain (its tag stays, so a stale block never matches).
    fn release_node(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        n.state = State::Spare;
        n.size = 0;
        n.prev_phys = NIL;
        n.next_phys = NIL;
        n.prev_free = NIL;
        n.next_free = self.spare;
        self.spare = i;
        self.nodes_in_use -= 1;
    }

    fn insert_free(&mut self, i: u32) {
        let (fl, sl) = class_of(self.nodes[i as usize].size);
        let head = self.heads[fl][sl];
        let n = &mut self.nodes[i as usize];
        n.state = State::Free;
        n.prev_free = NIL;
        n.next_free = head;
        if head != NIL {
            self.nodes[head as usize].prev_free = i;
        }
        self.heads[fl][sl] = i;
        self.fl_bitmap |= 1 << fl;
        self.sl_bitmap[fl] |= 1 << sl;
    }

    fn remove_free(&mut self, i: u32) {
        let Node { size, prev_free, next_free, .. } = self.nodes[i as usize];
        let (fl, sl) = class_of(size);
        if prev_free != NIL {
            self.nodes[prev_free as usize].next_free = next_free;
        } else {
            self.heads[fl][sl] = next_free;
        }
        if next_free != NIL {
            self.nodes[next_free as usize].prev_free = prev_free;
        }
        if self.heads[fl][sl] == NIL {
            self.sl_bitmap[fl] &= !(1 << sl);
            if self.sl_bitmap[fl] == 0 {
                self.fl_bitmap &= !(1 << fl);
            }
        }
        let n = &mut self.nodes[i as usize];
        n.prev_free = NIL;
        n.next_free = NIL;
    }

    /// Cuts the first `gap` granules of block `i` (out of any list) into a free block before it.
    fn split_before(&mut self, i: u32, gap: u64) {
        let Some(g) = self.take_node() else { return };
        let Node { offset, prev_phys, .. } = self.nodes[i as usize];
        let gn = &mut self.nodes[g as usize];
        gn.offset = offset;
        gn.size = gap;
        gn.prev_phys = prev_phys;
        gn.next_phys = i;
        if prev_phys != NIL {
            self.nodes[prev_phys as usize].next_phys = g;
        }
        let n = &mut self.nodes[i as usize];
        n.prev_phys = g;
        n.offset += gap;
        n.size -= gap;
        self.insert_free(g);
    }

    /// Keeps the first `keep` granules of block `i` (out of any list) and makes the rest a free
    /// block after it.
    fn split_after(&mut self, i: u32, keep: u64) {
        let Some(t) = self.take_node() else { return };
        let Node { offset, size, next_phys, .. } = self.nodes[i as usize];
        let tn = &mut self.nodes[t as usize];
        tn.offset = offset + keep;
        tn.size = size - keep;
        tn.prev_phys = i;
        tn.next_phys = next_phys;
        if next_phys != NIL {
            self.nodes[next_phys as usize].prev_phys = t;
        }
        let n = &mut self.nodes[i as usize];
        n.next_phys = t;
        n.size = keep;
        self.insert_free(t);
    }

    /// Merges block `i`'s next physical neighbour (out of any list) into `i`.
    fn absorb_next(&mut self, i: u32) {
        let next = self.nodes[i as usize].next_phys;
        let Node { size, next_phys, .. } = self.nodes[next as usize];
        self.nodes[i as usize].size += size;
        self.nodes[i as usize].next_phys = next_phys;
        if next_phys != NIL {
            self.nodes[next_phys as usize].prev_phys = i;
        }
        self.release_node(next);
    }
}

impl<const N: usize> fmt::Debug for OffsetAllocator<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OffsetAllocator").field("stats", &self.stats()).finish()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    impl<const N: usize> OffsetAllocator<N> {
        /// Checks every structural invariant; returns the free ranges (bytes) in address order.
        fn audit(&self) -> Vec<(u64, u64)> {
            // The physical chain from the block at offset 0 tiles [0, capacity) exactly.
            let mut first = NIL;
            for (i, n) in self.nodes.iter().enumerate() {
                if n.state != State::Spare && n.prev_phys == NIL {
                    assert_eq!(first, NIL, "one first block");
                    first = i as u32;
                }
            }
            let (mut at, mut i, mut prev, mut count, mut used, mut live) = (0u64, first, NIL, 0u32, 0u64, 0u32);
            let mut free = Vec::new();
            let mut prev_free = false;
            while i != NIL {
                let n = &self.nodes[i as usize];
                assert_ne!(n.state, State::Spare);
                assert_eq!(n.offset, at, "blocks tile the range");
                assert_eq!(n.prev_phys, prev);
                assert!(n.size > 0);
                if n.state == State::Free {
                    assert!(!prev_free, "two free blocks touch");
                    free.push((n.offset * GRANULE, n.size * GRANULE));
                    let (fl, sl) = class_of(n.size);
                    let mut j = self.heads[fl][sl];
                    while j != NIL && j != i {
                        j = self.nodes[j as usize].next_free;
                    }
                    assert_eq!(j, i, "a free block is in its class's list");
                } else {
                    used += n.size;
                    live += 1;
                }
                prev_free = n.state == State::Free;
                at += n.size;
                count += 1;
                prev = i;
                i = n.next_phys;
            }
            assert_eq!(at, if count == 0 { 0 } else { self.capacity });
            assert_eq!(count, self.nodes_in_use);
            assert_eq!((used, live), (self.used, self.live));
            let listed: usize = (0..FL)
                .flat_map(|f| (0..SL).map(move |s| (f, s)))
                .map(|(f, s)| {
                    let non_empty = self.heads[f][s] != NIL;
                    assert_eq!(non_empty, self.sl_bitmap[f] & (1 << s) != 0, "sl bitmap ({f}, {s})");
                    let mut k = 0;
                    let mut j = self.heads[f][s];
                    while j != NIL {
                        assert_eq!(class_of(self.nodes[j as usize].size), (f, s));
                        k += 1;
                        j = self.nodes[j as usize].next_free;
                    }
                    k
                })
                .sum();
            for f in 0..FL {
                assert_eq!(self.fl_bitmap & (1 << f) != 0, self.sl_bitmap[f] != 0, "fl bitmap {f}");
            }
            assert_eq!(listed, free.len());
            let mut spares = 0;
            let mut j = self.spare;
            while j != NIL {
                assert_eq!(self.nodes[j as usize].state, State::Spare);
                spares += 1;
                j = self.nodes[j as usize].next_free;
            }
            assert_eq!(spares + self.nodes_in_use as usize, N);
            free
        }
    }

    /// The smallest size in list (fl, sl).
    fn class_min((fl, sl): (usize, usize)) -> u64 {
        if fl == 0 {
            sl as u64
        } else {
            ((SL + sl) as u64) << (fl - 1)
        }
    }

    #[test]
    fn classes_cover_sizes_in_order_and_rounding_up_finds_only_fitting_lists() {
        let mut last = (0, 0);
        for size in 1..5000u64 {
            assert!(class_of(size) >= last, "classes grow with the size");
            last = class_of(size);
        }
        for size in (1..5000u64).chain((0..57).flat_map(|b| [(1u64 << b) - 1, 1 << b, (1 << b) + 1])).filter(|&s| s > 0) {
            let c = class_of(size);
            assert!(class_min(c) <= size && size < class_min(c) + (1 << c.0.saturating_sub(1)), "size {size} in {c:?}");
            let Some(up) = class_at_least(size) else { continue };
            // Every block of the class found has at least `size` granules, and the class before
            // it has smaller ones: it is the first such class.
            let min = class_min(up);
            assert!(min >= size && class_of(min) == up, "size {size}: class {up:?} starts at {min}");
            assert!(min == size || class_min(class_of(min - 1)) < size, "size {size}: {up:?} is not the first fitting class");
        }
        let top = u64::MAX >> GRANULE_LOG2;
        assert!(class_of(top).0 < FL);
        assert_eq!(class_at_least(u64::MAX), None);
    }

    #[test]
    fn split_and_coalesce_restore_one_block() {
        let mut a = OffsetAllocator::<8>::new(1 << 20);
        assert_eq!(a.audit(), [(0, 1 << 20)]);
        let x = a.alloc(1, 1).unwrap();
        let y = a.alloc(300, 128).unwrap();
        let z = a.alloc(4096, 4096).unwrap();
        assert_eq!((x.offset(), x.size()), (0, 128));
        assert_eq!((y.offset(), y.size()), (128, 384));
        assert_eq!(z.offset() % 4096, 0);
        let free = a.audit();
        assert_eq!(free.len(), 2, "the alignment gap and the tail: {free:?}");
        a.free(y).unwrap();
        a.audit();
        a.free(x).unwrap();
        assert_eq!(a.audit(), [(0, 4096), (8192, (1 << 20) - 8192)]);
        a.free(z).unwrap();
        assert_eq!(a.audit(), [(0, 1 << 20)]);
        assert_eq!(a.stats().nodes_in_use, 1);
    }

    #[test]
    fn blocks_the_rounded_up_search_misses_are_found_by_the_scan() {
        // A free block of 135 granules between used ones: a request of 130 is in its class
        // (128..=135) but rounds up to the next one on the O(1) path.
        let mut a = OffsetAllocator::<8>::new(300 * GRANULE);
        let p = a.alloc(10 * GRANULE, 1).unwrap();
        let q = a.alloc(135 * GRANULE, 1).unwrap();
        let r = a.alloc(155 * GRANULE, 1).unwrap();
        a.free(q).unwrap();
        let got = a.alloc(130 * GRANULE, 1).unwrap();
        assert_eq!(got.offset(), 10 * GRANULE);
        a.audit();
        a.free(got).unwrap();
        // Aligned: 32 granules at a 32-granule boundary fit only where the free block starts.
        a.free(p).unwrap();
        let lead = a.alloc(32 * GRANULE, 1).unwrap();
        let hole = a.alloc(32 * GRANULE, 1).unwrap();
        let rest = a.alloc(81 * GRANULE, 1).unwrap();
        a.free(hole).unwrap();
        assert_eq!(a.audit(), [(32 * GRANULE, 32 * GRANULE)]);
        let aligned = a.alloc(32 * GRANULE, 32 * GRANULE).unwrap();
        assert_eq!(aligned.offset(), 32 * GRANULE);
        for b in [lead, aligned, rest, r] {
            a.free(b).unwrap();
        }
        assert_eq!(a.audit(), [(0, 300 * GRANULE)]);
    }

    #[test]
    fn stale_and_foreign_blocks_are_refused_without_change() {
        let mut a = OffsetAllocator::<4>::new(4096);
        let mut b = OffsetAllocator::<4>::new(4096);
        let x = a.alloc(128, 1).unwrap();
        let y = b.alloc(128, 1).unwrap();
        assert_eq!(a.free(y), Err(ArenaError::ForeignBlock));
        // A forged copy of a freed block (same node, old tag) is stale.
        let forged = Block { offset: x.offset, size: x.size, node: x.node, tag: x.tag, owner: x.owner };
        a.free(x).unwrap();
        let again = a.alloc(128, 1).unwrap();
        assert_eq!(a.free(forged), Err(ArenaError::ForeignBlock), "the node was reused under a new tag");
        let bad_node = Block { offset: 0, size: 128, node: 99, tag: again.tag, owner: again.owner };
        assert_eq!(a.free(bad_node), Err(ArenaError::ForeignBlock));
        a.audit();
        a.free(again).unwrap();
        assert_eq!(a.audit(), [(0, 4096)]);
    }

    proptest::proptest! {
        /// Random requests and frees keep every list, bitmap and link consistent.
        #[test]
        fn random_sequences_keep_the_structure_consistent(
            capacity in 0u64..(1 << 22),
            ops in proptest::collection::vec((0u64..(1 << 18), 0u32..14, proptest::bool::ANY, 0usize..64), 0..200),
        ) {
            let mut a = OffsetAllocator::<24>::new(capacity);
            let mut live = Vec::new();
            for (len, align_log2, free, pick) in ops {
                if free && !live.is_empty() {
                    let b = live.swap_remove(pick % live.len());
                    proptest::prop_assert_eq!(a.free(b), Ok(()));
                } else if let Ok(b) = a.alloc(len, 1 << align_log2) {
                    live.push(b);
                }
                a.audit();
            }
            for b in live {
                a.free(b).unwrap();
            }
            let free = a.audit();
            proptest::prop_assert!(free.len() <= 1 && free.iter().all(|&(o, s)| o == 0 && s == a.capacity()));
        }
    }

    #[test]
    fn tiny_capacities_and_pools() {
        let mut a = OffsetAllocator::<1>::new(GRANULE - 1);
        assert_eq!(a.stats().capacity, 0);
        assert_eq!(a.alloc(1, 1), Err(ArenaError::NoFit { requested: 1, align: 1, largest_free: 0 }));
        let mut one = OffsetAllocator::<1>::new(3 * GRANULE);
        assert_eq!(one.alloc(1, 1), Err(ArenaError::NodesExhausted { nodes: 1 }), "the tail needs a node");
        let all = one.alloc(3 * GRANULE, 1).unwrap();
        assert_eq!(one.stats().free, 0);
        one.free(all).unwrap();
        assert_eq!(one.audit(), [(0, 3 * GRANULE)]);
    }
}
