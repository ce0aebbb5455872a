//! A tinygrad-style tensor workload on a served session: tensors as sub-allocations of a few
//! arenas, launched on with views into them, singly and in batches, as hexrpc's tinygrad device
//! does (bindings/python's `ArenaPool`), at a smaller scale ([`ARENA_BYTES`] arenas where the
//! device's are 16 MiB) so that a soak's memory stays small.
//!
//! [`run_tensor_worker`] loops until told to stop:
//!
//! * it allocates tensors of 4 B to a few hundred KiB, and some larger than an arena, in the
//!   newest arena with room (newest first, as the device does), else in a new arena (of its own,
//!   rounded up to a MiB, for a tensor larger than an arena), and writes a pattern of the
//!   tensor's own into each; it keeps at most [`MAX_ARENAS`] arenas (the oldest is emptied
//!   before a new one opens) and a few MiB live;
//! * it launches [`ADD_U8`] with views at random offsets inside tensors of one arena: single
//!   launches (two tensors, or two halves of one; on the plain library or the table library) and
//!   batches of up to 8 records on the table library ([`ADD_U8_TABLE`]) whose records chain (each
//!   reads what the one before wrote), some with a deadline;
//! * it frees tensors in random order and closes an arena left empty unless it is the newest.
//!
//! It panics on an output byte that is wrong, on a byte next to an output view or of the input
//! that changed, on a tensor whose pattern changed at rest (checked when it is freed), on a
//! sub-allocation placed outside its arena or over a live one (checked against the live set),
//! and on an arena's allocator that does not count exactly the live tensors placed in it.
//!
//! A launch that fails because recovery is needed (a DSP restart, a passed deadline, an arena
//! quarantined after a call abandoned at its deadline) is retried after `recover()`; the outputs
//! of a launch that failed are rewritten before they are used or checked again. An arena's lease
//! survives recoveries like any lease. What it did is counted in [`TensorFigures`], whose
//! `Display` is a summary line.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hexrpc_bench::Bench;
use hexrpc_hal::{BufferView, Cause, ErrorKind, HalError, Health, Library, SharedArena, SharedArenaBuf, ARENA_ALIGN};
use hexrpc_runtime::launch::{Batch, BufferRef, Scalar, Signature};
use hexrpc_runtime::ServedSession;

use crate::catalogue::ADD_U8;
use crate::stack::launch_buf_buf_u32;

/// The library name under which a bench serves [`ADD_U8`]'s table model
/// ([`Model::table_model`](crate::catalogue::Model::table_model)): single launches (method 2)
/// and batches (method 3) of `add_u8`.
pub const ADD_U8_TABLE: &str = "add_u8_table";

const MIB: usize = 1 << 20;
/// One arena of the worker; a tensor larger than that gets an arena of its own, rounded up to a
/// MiB (as the device does).
pub const ARENA_BYTES: usize = MIB;
/// Arenas the worker keeps at most: at the limit the oldest is emptied, which closes it, before
/// a new one opens (the device has no such limit; the worker bounds its memory).
pub const MAX_ARENAS: usize = 4;
/// Bytes and tensors the worker keeps live at most: random tensors are freed first.
const LIVE_BYTES: usize = 4 * MIB;
const LIVE_TENSORS: usize = 48;
/// The longest view a launch passes, and the worker's copy chunk.
const VIEW_MAX: usize = 64 << 10;
/// The most records of one batch.
const CHAIN_MAX: usize = 8;
/// Attempts of one launch (or allocation): a refusal because recovery is needed is retried
/// after `recover()`.
const ATTEMPTS: usize = 4;
/// The deadline of the launches that have one.
const DEADLINE: Duration = Duration::from_millis(100);

/// What a tensor worker did ([`run_tensor_worker`]); `Display` is a summary line.
#[derive(Debug, Default)]
pub struct TensorFigures {
    /// Arenas opened.
    pub arenas_opened: AtomicU64,
    /// Of those, for one tensor larger than [`ARENA_BYTES`].
    pub arenas_own: AtomicU64,
    /// Arenas closed (when left empty, or at the end).
    pub arenas_closed: AtomicU64,
    /// Of those, closed while the worker ran because they were left empty.
    pub arenas_closed_empty: AtomicU64,
    /// Times the oldest arena was emptied to stay within [`MAX_ARENAS`].
    pub evictions: AtomicU64,
    /// Sub-allocations made (and written).
    pub suballocs: AtomicU64,
    /// Sub-allocations freed.
    pub frees: AtomicU64,
    /// Of those, checked to hold their pattern still.
    pub checked_at_rest: AtomicU64,
    /// Single launches that completed.
    pub launches: AtomicU64,
    /// Batches that completed, and their records.
    pub batches: AtomicU64,
    /// Records of the batches that completed.
    pub batch_records: AtomicU64,
    /// Output views checked byte for byte after a launch or a batch completed.
    pub verified: AtomicU64,
    /// Attempts after a recovery, and those that then completed.
    pub retries: AtomicU64,
    /// Retries that completed.
    pub retries_ran: AtomicU64,
    /// Launches that timed out at their deadline.
    pub timeouts: AtomicU64,
    /// Recoverable errors seen.
    pub recoverable: AtomicU64,
    /// Other errors seen (injected faults).
    pub faults_seen: AtomicU64,
    /// Batches that were sent but did not complete as sent (printed as they happen).
    pub batch_failures: AtomicU64,
    /// Outputs of failed launches, rewritten before reuse.
    pub tainted: AtomicU64,
    /// Accesses refused because an arena was quarantined.
    pub quarantined: AtomicU64,
    /// Recoveries that failed (printed as they happen).
    pub recoveries_failed: AtomicU64,
}

impl TensorFigures {
    /// The value of counter `c`.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

impl fmt::Display for TensorFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = TensorFigures::get;
        write!(
            f,
            "{} arenas opened ({} for one tensor larger than {} KiB), {} closed ({} when left empty, {} of them emptied to stay \
             within {} arenas), {} sub-allocations, {} freed ({} checked unchanged at rest), {} launches and {} batches ({} \
             records) on views in them, {} outputs verified; {} retries after a recovery ({} then ran), {} timed out, {} \
             recoverable and {} other errors, {} batch failures, {} outputs of failed launches rewritten before reuse, {} \
             refusals of a quarantined arena, {} failed recoveries",
            g(&self.arenas_opened),
            g(&self.arenas_own),
            ARENA_BYTES / 1024,
            g(&self.arenas_closed),
            g(&self.arenas_closed_empty),
            g(&self.evictions),
            MAX_ARENAS,
            g(&self.suballocs),
            g(&self.frees),
            g(&self.checked_at_rest),
            g(&self.launches),
            g(&self.batches),
            g(&self.batch_records),
            g(&self.verified),
            g(&self.retries),
            g(&self.retries_ran),
            g(&self.timeouts),
            g(&self.recoverable),
            g(&self.faults_seen),
            g(&self.batch_failures),
            g(&self.tainted),
            g(&self.quarantined),
            g(&self.recoveries_failed),
        )
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// xorshift64: the soak's choices (this worker's and the soak's other threads'), reproducible
/// from a seed (non-zero).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn bits(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 for `n` 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.bits() % n.max(1)
    }

    /// An index in `0..n` (0 for `n` 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

/// Word `w` of the pattern of `seed`: its bytes `8 w .. 8 w + 8`.
fn pattern_word(seed: u64, w: usize) -> u64 {
    let mut x = seed.wrapping_add((w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// What a range of a tensor should hold: its `j`-th byte is byte `from + j` of the pattern of
/// `seed`, plus `add` (at rest: the tensor's own pattern at the range's offset, nothing added).
#[derive(Clone, Copy, Debug)]
struct Expect {
    seed: u64,
    from: usize,
    add: u8,
}

impl Expect {
    fn at_rest(seed: u64, at: usize) -> Expect {
        Expect { seed, from: at, add: 0 }
    }

    /// The expected `out.len()` bytes starting `skip` bytes into the range.
    fn fill(&self, skip: usize, out: &mut [u8]) {
        let start = self.from + skip;
        let mut j = 0;
        while j < out.len() {
            let (w, k) = ((start + j) / 8, (start + j) % 8);
            let m = (8 - k).min(out.len() - j);
            out[j..j + m].copy_from_slice(&pattern_word(self.seed, w).to_le_bytes()[k..k + m]);
            j += m;
        }
        if self.add != 0 {
            out.iter_mut().for_each(|b| *b = b.wrapping_add(self.add));
        }
    }
}

/// The first byte of `[at, at + len)` of `buf` that is not as `expect` says, as (offset, got,
/// expected), read a chunk at a time through the two scratch buffers (of equal length).
fn mismatch(
    buf: &SharedArenaBuf<Bench>,
    at: usize,
    len: usize,
    expect: Expect,
    (got, want): (&mut [u8], &mut [u8]),
) -> Result<Option<(usize, u8, u8)>, HalError> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(got.len());
        buf.read_at(at + done, &mut got[..n])?;
        expect.fill(done, &mut want[..n]);
        if got[..n] != want[..n] {
            let j = (0..n).find(|&j| got[j] != want[j]).unwrap_or(0);
            return Ok(Some((at + done + j, got[j], want[j])));
        }
        done += n;
    }
    Ok(None)
}

/// Writes what `expect` says over `[at, at + len)` of `buf`, a chunk at a time through
/// `scratch`.
fn write_expected(buf: &mut SharedArenaBuf<Bench>, at: usize, len: usize, expect: Expect, scratch: &mut [u8]) -> Result<(), HalError> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(scratch.len());
        expect.fill(done, &mut scratch[..n]);
        buf.write_at(at + done, &scratch[..n])?;
        done += n;
    }
    Ok(())
}

/// The range an arena holds for a sub-allocation of `len` bytes.
fn held(len: usize) -> usize {
    len.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

/// A random tensor length: mostly small (scalars, biases, small activations), some of tens or
/// hundreds of KiB, a few larger than an arena.
fn tensor_len(rng: &mut Rng) -> usize {
    let (lo, hi) = match rng.index(100) {
        0..=49 => (4, 4096),
        50..=84 => (4096, 96 << 10),
        85..=96 => (96 << 10, 384 << 10),
        _ => (ARENA_BYTES + 1, ARENA_BYTES * 5 / 2),
    };
    lo + rng.index(hi - lo)
}

/// One tensor: a sub-allocation of the pool's arena `arena` holding the pattern of `seed`
/// ([`Expect::at_rest`]), unless `tainted` (the output of a launch that failed: its content is
/// unknown until rewritten).
struct Tensor {
    buf: SharedArenaBuf<Bench>,
    arena: u64,
    seed: u64,
    tainted: bool,
}

/// A launch to make: `chain[0]` is the input tensor, record `j` reads view `j` and writes view
/// `j + 1` (`n` bytes at `offs[j]` of tensor `chain[j]`), adding `ks[j]`. Two views are a single
/// launch; more, a batch.
struct Chain {
    chain: Vec<usize>,
    offs: Vec<usize>,
    n: usize,
    ks: Vec<u32>,
}

/// The worker: its arenas (oldest first: the last is the newest), live tensors, libraries.
struct TensorPool<'r, 'l> {
    rig: &'r ServedSession<Bench>,
    lib: &'l Library<'r, Bench>,
    table: &'l Library<'r, Bench>,
    sigs: [Signature; 1],
    f: &'r TensorFigures,
    rng: Rng,
    arenas: Vec<(u64, Arc<SharedArena<Bench>>)>,
    tensors: Vec<Tensor>,
    next_arena: u64,
    /// What was read and what was expected, a chunk at a time.
    got: Vec<u8>,
    want: Vec<u8>,
}

impl TensorPool<'_, '_> {
    /// After a failed call: if it was recoverable, recovers and says to try again (a quarantined
    /// lease comes back once the old DSP process is released: waits a little first); otherwise
    /// counts it.
    fn after_failure(&self, kind: ErrorKind, cause: Option<Cause>) -> bool {
        if kind != ErrorKind::Recoverable {
            bump(&self.f.faults_seen);
            return false;
        }
        bump(&self.f.recoverable);
        match cause {
            Some(Cause::Timeout) => bump(&self.f.timeouts),
            Some(Cause::Quarantined) => {
                bump(&self.f.quarantined);
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {}
        }
        if let Err(e) = self.rig.session().recover() {
            bump(&self.f.recoveries_failed);
            eprintln!("tensor worker: recovery failed: {e}");
        }
        true
    }

    /// A new tensor of `len` bytes holding the pattern of `seed`, within the worker's bounds
    /// (random tensors are freed first), retried after a recovery.
    fn alloc(&mut self) {
        let len = tensor_len(&mut self.rng);
        let seed = self.rng.bits();
        while !self.tensors.is_empty()
            && (self.tensors.len() >= LIVE_TENSORS || self.tensors.iter().map(|t| t.buf.len()).sum::<usize>() + len > LIVE_BYTES)
        {
            let i = self.rng.index(self.tensors.len());
            self.free(i);
        }
        for _ in 0..ATTEMPTS {
            match self.place(len, seed) {
                Err(e) if self.after_failure(e.kind(), Some(e.cause)) => {}
                _ => return,
            }
        }
    }

    /// A new tensor in the newest arena with room (newest first), else in a new arena; written.
    /// Panics if it was placed outside its arena or over a live tensor.
    fn place(&mut self, len: usize, seed: u64) -> Result<(), HalError> {
        let mut placed = None;
        for (id, arena) in self.arenas.iter().rev() {
            if arena.stats().largest_free < held(len) as u64 {
                continue;
            }
            match arena.alloc(len) {
                Ok(buf) => {
                    placed = Some((*id, buf));
                    break;
                }
                // Fragmented past what the largest free range said, or out of blocks.
                Err(e) if matches!(e.cause, Cause::ArenaFull { .. } | Cause::ArenaBlocks { .. }) => {}
                Err(e) if e.cause == Cause::Quarantined => bump(&self.f.quarantined),
                Err(e) => return Err(e),
            }
        }
        let (arena, buf) = match placed {
            Some(p) => p,
            None => {
                while self.arenas.len() >= MAX_ARENAS {
                    self.evict_oldest();
                }
                let new = self.rig.session_arc().arena_shared(ARENA_BYTES.max(len.div_ceil(MIB) * MIB))?;
                bump(&self.f.arenas_opened);
                if len > ARENA_BYTES {
                    bump(&self.f.arenas_own);
                }
                let id = self.next_arena;
                self.next_arena += 1;
                let buf = new.alloc(len);
                self.arenas.push((id, new));
                // The arena that was the newest, if it was empty.
                self.close_empty();
                (id, buf?)
            }
        };
        self.check_disjoint(arena, &buf);
        let mut t = Tensor { buf, arena, seed, tainted: false };
        write_expected(&mut t.buf, 0, len, Expect::at_rest(seed, 0), &mut self.want)?;
        self.tensors.push(t);
        bump(&self.f.suballocs);
        self.check_stats(arena);
        Ok(())
    }

    /// Panics unless `buf` lies inside its arena, aligned, clear of every live tensor there.
    fn check_disjoint(&self, arena: u64, buf: &SharedArenaBuf<Bench>) {
        let (at, end) = (buf.offset(), buf.offset() + held(buf.len()));
        assert!(at.is_multiple_of(ARENA_ALIGN) && end <= buf.arena().len(), "arena {arena}: {buf:?} outside its arena");
        for t in self.tensors.iter().filter(|t| t.arena == arena) {
            let (t_at, t_end) = (t.buf.offset(), t.buf.offset() + held(t.buf.len()));
            assert!(end <= t_at || t_end <= at, "arena {arena}: new {buf:?} overlaps live {:?}", t.buf);
        }
    }

    /// Panics unless arena `arena`'s allocator counts exactly the live tensors placed there.
    fn check_stats(&self, arena: u64) {
        let Some((_, a)) = self.arenas.iter().find(|(id, _)| *id == arena) else { return };
        let live: Vec<&Tensor> = self.tensors.iter().filter(|t| t.arena == arena).collect();
        let used: usize = live.iter().map(|t| held(t.buf.len())).sum();
        let s = a.stats();
        assert_eq!((s.live_blocks as usize, s.used as usize), (live.len(), used), "arena {arena}: allocator vs live tensors: {s:?}");
    }

    /// Frees tensor `i`, after checking it still holds its pattern (nothing else wrote it), and
    /// closes the arenas left empty (but the newest).
    fn free(&mut self, i: usize) {
        let t = self.tensors.swap_remove(i);
        if !t.tainted {
            match mismatch(&t.buf, 0, t.buf.len(), Expect::at_rest(t.seed, 0), (&mut self.got, &mut self.want)) {
                Ok(None) => bump(&self.f.checked_at_rest),
                Ok(Some((at, got, want))) => {
                    panic!("arena {}: tensor {:?} changed at rest: byte {at} is {got}, not {want}", t.arena, t.buf)
                }
                Err(e) if e.cause == Cause::Quarantined => bump(&self.f.quarantined),
                Err(e) => panic!("reading a tensor: {e}"),
            }
        }
        let arena = t.arena;
        drop(t);
        bump(&self.f.frees);
        self.check_stats(arena);
        self.close_empty();
    }

    /// Closes every arena without a live tensor but the newest.
    fn close_empty(&mut self) {
        let newest = self.arenas.last().map(|(id, _)| *id);
        let tensors = &self.tensors;
        let before = self.arenas.len();
        self.arenas.retain(|(id, _)| Some(*id) == newest || tensors.iter().any(|t| t.arena == *id));
        let closed = (before - self.arenas.len()) as u64;
        self.f.arenas_closed.fetch_add(closed, Ordering::Relaxed);
        self.f.arenas_closed_empty.fetch_add(closed, Ordering::Relaxed);
    }

    /// Frees every tensor of the oldest arena, which closes it.
    fn evict_oldest(&mut self) {
        let Some(&(oldest, _)) = self.arenas.first() else { return };
        while let Some(i) = self.tensors.iter().position(|t| t.arena == oldest) {
            self.free(i);
        }
        if self.arenas.first().is_some_and(|(id, _)| *id == oldest) {
            self.arenas.remove(0);
            bump(&self.f.arenas_closed);
        }
        bump(&self.f.evictions);
    }

    /// Rewrites the pattern of tainted tensors (refused while their arena is quarantined).
    fn rewrite_tainted(&mut self) {
        for t in self.tensors.iter_mut().filter(|t| t.tainted) {
            let (seed, len) = (t.seed, t.buf.len());
            match write_expected(&mut t.buf, 0, len, Expect::at_rest(seed, 0), &mut self.want) {
                Ok(()) => t.tainted = false,
                Err(e) if e.cause == Cause::Quarantined => bump(&self.f.quarantined),
                Err(e) => panic!("rewriting a tensor: {e}"),
            }
        }
    }

    /// `count` distinct clean tensors of one arena, at random; `None` if no arena has that many.
    fn pick(&mut self, count: usize) -> Option<Vec<usize>> {
        let clean_in = |id: u64| self.tensors.iter().filter(move |t| t.arena == id && !t.tainted).count();
        let arenas: Vec<u64> = self.arenas.iter().map(|(id, _)| *id).filter(|&id| clean_in(id) >= count).collect();
        let arena = *arenas.get(self.rng.index(arenas.len()))?;
        let mut pick: Vec<usize> =
            (0..self.tensors.len()).filter(|&i| self.tensors[i].arena == arena && !self.tensors[i].tainted).collect();
        for j in 0..count {
            let k = j + self.rng.index(pick.len() - j);
            pick.swap(j, k);
        }
        pick.truncate(count);
        Some(pick)
    }

    /// A launch on views inside tensors of one arena: `records` 1 is a single launch (from one
    /// tensor into another, or from the first half of one into its second), more a batch whose
    /// records chain through distinct tensors.
    fn plan(&mut self, records: usize) -> Option<Chain> {
        let ks = (0..records).map(|_| 1 + self.rng.index(255) as u32).collect();
        let within_one = records == 1 && self.rng.index(4) == 0;
        let chain = match self.pick(if within_one { 1 } else { records + 1 }) {
            Some(chain) => chain,
            None if records == 1 => self.pick(1)?,
            None => return None,
        };
        if let [i] = chain[..] {
            let half = self.tensors[i].buf.len() / 2;
            if half == 0 {
                return None;
            }
            let n = 1 + self.rng.index(half.min(VIEW_MAX));
            let offs = vec![self.rng.index(half - n + 1), half + self.rng.index(half - n + 1)];
            return Some(Chain { chain: vec![i, i], offs, n, ks });
        }
        let shortest = chain.iter().map(|&i| self.tensors[i].buf.len()).min().unwrap_or(1);
        let n = 1 + self.rng.index(shortest.min(VIEW_MAX));
        let offs = chain.iter().map(|&i| self.rng.index(self.tensors[i].buf.len() - n + 1)).collect();
        Some(Chain { chain, offs, n, ks })
    }

    /// Sends `c` once: a single launch on the plain or the table library, or a batch on the
    /// table library; `deadline` if given.
    fn send(&self, c: &Chain, single_on: &Library<'_, Bench>, deadline: Option<Duration>) -> Result<(), hexrpc_runtime::Error> {
        let views: Vec<BufferView<'_>> =
            c.chain.iter().zip(&c.offs).map(|(&i, &o)| self.tensors[i].buf.view(o, c.n)).collect::<Result<_, _>>()?;
        if let [input, output] = &views[..] {
            launch_buf_buf_u32(single_on, input, output, c.ks[0], deadline)?;
            return Ok(());
        }
        let mut batch = Batch::new(&self.sigs)?;
        for (j, k) in c.ks.iter().enumerate() {
            batch.push(0, &[BufferRef::of(&views[j]), BufferRef::of(&views[j + 1])], &[Scalar::U32(*k)])?;
        }
        let run = match deadline {
            Some(d) => batch.run_with_deadline(self.table, d)?,
            None => batch.run(self.table)?,
        };
        assert_eq!(run.launches, c.ks.len(), "a batch that completed ran all its records");
        Ok(())
    }

    /// Plans a launch of `records` records, sends it (retried after a recovery), checks its
    /// outputs if it completed and taints them if not.
    fn launch(&mut self, records: usize) {
        let Some(c) = self.plan(records) else { return };
        let deadline = (self.rng.index(4) == 0).then_some(DEADLINE);
        let single_on = if self.rng.index(2) == 0 { self.lib } else { self.table };
        let mut ran = false;
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                bump(&self.f.retries);
            }
            match self.send(&c, single_on, deadline) {
                Ok(()) => {
                    ran = true;
                    if attempt > 0 {
                        bump(&self.f.retries_ran);
                    }
                    break;
                }
                Err(e @ hexrpc_runtime::Error::BatchRun(_)) => {
                    eprintln!("tensor worker: {e}");
                    bump(&self.f.batch_failures);
                    break;
                }
                Err(e) if self.after_failure(e.kind(), e.hal().map(|h| h.cause)) => {}
                Err(_) => break,
            }
        }
        if !ran {
            c.chain[1..].iter().for_each(|&i| self.tensors[i].tainted = true);
            self.f.tainted.fetch_add(records as u64, Ordering::Relaxed);
            return;
        }
        if records == 1 {
            bump(&self.f.launches);
        } else {
            bump(&self.f.batches);
            self.f.batch_records.fetch_add(records as u64, Ordering::Relaxed);
        }
        self.check(&c);
    }

    /// Checks every output of a chain that completed (and the bytes around each output view
    /// inside its tensor, and the first input: unchanged), then gives each output its pattern
    /// back. Panics on a wrong byte.
    fn check(&mut self, c: &Chain) {
        let (src, src_at, n) = (c.chain[0], c.offs[0], c.n);
        let seed0 = self.tensors[src].seed;
        let mut add = 0u8;
        for j in 1..c.chain.len() {
            add = add.wrapping_add(c.ks[j - 1] as u8);
            let (dst, at) = (c.chain[j], c.offs[j]);
            let (seed, len) = (self.tensors[dst].seed, self.tensors[dst].buf.len());
            let (before, after) = (at.min(ARENA_ALIGN), (len - at - n).min(ARENA_ALIGN));
            let mut ranges = vec![
                ("output", dst, at, n, Expect { seed: seed0, from: src_at, add }),
                ("before the output view", dst, at - before, before, Expect::at_rest(seed, at - before)),
                ("after the output view", dst, at + n, after, Expect::at_rest(seed, at + n)),
            ];
            if j == 1 {
                ranges.push(("input", src, src_at, n, Expect::at_rest(seed0, src_at)));
            }
            let mut readable = true;
            for (what, t, from, len, expect) in ranges {
                match mismatch(&self.tensors[t].buf, from, len, expect, (&mut self.got, &mut self.want)) {
                    Ok(None) => {}
                    Ok(Some((o, got, want))) => panic!(
                        "tensor worker: record {} of {}: {what} wrong in {:?} at byte {o}: {got}, not {want} (views of {n} bytes: \
                         output at {at}, input {:?} at {src_at}, adding {add})",
                        j - 1,
                        c.chain.len() - 1,
                        self.tensors[t].buf,
                        self.tensors[src].buf,
                    ),
                    Err(e) if e.cause == Cause::Quarantined => readable = false,
                    Err(e) => panic!("reading an output: {e}"),
                }
            }
            if !readable {
                bump(&self.f.quarantined);
                self.tensors[dst].tainted = true;
                continue;
            }
            bump(&self.f.verified);
            let t = &mut self.tensors[dst];
            if let Err(e) = write_expected(&mut t.buf, at, n, Expect::at_rest(seed, at), &mut self.want) {
                assert_eq!(e.cause, Cause::Quarantined, "restoring a tensor: {e}");
                t.tainted = true;
            }
        }
    }
}

/// Runs the tensor workload (see the [module docs](self)) on `rig` until `running` is false or
/// the session has failed, then frees every tensor (checked) and closes every arena. `lib` is
/// [`ADD_U8`] opened as a library, `table` its table model ([`ADD_U8_TABLE`]); `seed` makes the
/// worker's choices.
///
/// # Panics
/// On a wrong output byte, a changed byte outside an output view, a tensor changed at rest, a
/// sub-allocation outside its arena or over a live one, an allocator whose counts disagree with
/// the live tensors, or an access that failed for any reason but a quarantined arena.
pub fn run_tensor_worker<'r>(
    rig: &'r ServedSession<Bench>,
    lib: &Library<'r, Bench>,
    table: &Library<'r, Bench>,
    running: &AtomicBool,
    seed: u64,
    f: &'r TensorFigures,
) {
    let mut pool = TensorPool {
        rig,
        lib,
        table,
        sigs: [Signature::parse(ADD_U8.signature).expect("add_u8's signature")],
        f,
        rng: Rng(seed | 1),
        arenas: Vec::new(),
        tensors: Vec::new(),
        next_arena: 0,
        got: vec![0; VIEW_MAX],
        want: vec![0; VIEW_MAX],
    };
    while running.load(Ordering::Acquire) && !matches!(rig.session().health(), Health::Failed(_)) {
        pool.rewrite_tainted();
        match pool.rng.index(100) {
            0..=39 => pool.alloc(),
            40..=64 if !pool.tensors.is_empty() => {
                let i = pool.rng.index(pool.tensors.len());
                pool.free(i);
            }
            40..=64 => {}
            65..=87 => pool.launch(1),
            _ => {
                let records = 2 + pool.rng.index(CHAIN_MAX - 1);
                pool.launch(records);
            }
        }
    }
    while !pool.tensors.is_empty() {
        let i = pool.rng.index(pool.tensors.len());
        pool.free(i);
    }
    f.arenas_closed.fetch_add(pool.arenas.len() as u64, Ordering::Relaxed);
    pool.arenas.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_read_in_chunks_at_any_offset_is_the_same_bytes() {
        let whole = {
            let mut v = vec![0u8; 1000];
            Expect::at_rest(7, 0).fill(0, &mut v);
            v
        };
        for (at, skip, len) in [(0, 0, 1000), (3, 0, 5), (13, 7, 200), (999, 0, 1), (64, 17, 3)] {
            let mut part = vec![0u8; len];
            Expect::at_rest(7, at).fill(skip, &mut part);
            assert_eq!(part, whole[at + skip..at + skip + len], "at {at} skip {skip}");
            // An output: the input's bytes from elsewhere, plus what was added.
            Expect { seed: 7, from: at, add: 5 }.fill(skip, &mut part);
            assert!(part.iter().zip(&whole[at + skip..]).all(|(p, w)| *p == w.wrapping_add(5)));
        }
        let mut other = vec![0u8; 1000];
        Expect::at_rest(8, 0).fill(0, &mut other);
        assert!(other.iter().zip(&whole).filter(|(a, b)| a == b).count() < 20, "another seed, other bytes");
    }

    #[test]
    fn tensor_lengths_cover_small_large_and_larger_than_an_arena() {
        let mut rng = Rng(0x5EED);
        let lens: Vec<usize> = (0..2000).map(|_| tensor_len(&mut rng)).collect();
        assert!(lens.iter().all(|&l| (4..ARENA_BYTES * 5 / 2).contains(&l)));
        assert!(lens.iter().any(|&l| l < 64) && lens.iter().any(|&l| l > 200 << 10) && lens.iter().any(|&l| l > ARENA_BYTES));
        assert_eq!((held(1), held(128), held(129)), (128, 128, 256));
    }
}
