//! Arenas: one lease carved into many aligned sub-allocations, so a FastRPC call that passes
//! many tensors names few leases (a call carries at most 15 in-handles).
//!
//! An [`Arena`] owns a [`Lease`] and an [`OffsetAllocator`] of its bytes: a two-level
//! segregated-fit allocator with a fixed pool of [`ARENA_BLOCKS`] bookkeeping nodes (how it
//! works is on [`OffsetAllocator`]), so the arena's bookkeeping never allocates. An
//! [`ArenaBuf`] is one sub-allocation: a range of the arena's lease, [`ARENA_ALIGN`]-aligned
//! (the HVX vector length) or more, that borrows the arena and gives its range back when
//! dropped. Its views are views of the arena's lease ([`BufferView`]: the lease's fd, id and
//! length, the sub-allocation's offset), so a launch maps the whole arena once however many of
//! its buffers it passes; a view borrows its buffer, so a buffer cannot be freed (and its range
//! handed to another) while a launch uses a view of it.
//!
//! Reads and writes through a buffer do the lease's cache maintenance for the buffer's range
//! (see the [`lease`](crate::lease) module) and are refused while the lease is quarantined.
//! Writes take `&mut` of the buffer but only `&` of the arena: sub-allocations are disjoint, and
//! the memory is DSP-shared memory written with the same word copies as [`Lease::write_at`].
//! The allocator sits behind the session's kind of lock (blocking with `std`, a spin lock
//! without), held for one allocator operation only, never across a copy or an ioctl.
//!
//! Where the model leaks: the memory is shared with the DSP, which may write any part of the
//! lease during a launch that passes the lease, whichever sub-allocation the launch's views
//! name; what the CPU reads during such a launch is unspecified (the copies are volatile, so
//! not undefined behaviour). Alignments above a page are alignments of the offset in the lease
//! (its base is page-aligned).

mod tlsf;

pub use tlsf::{ArenaError, ArenaStats, Block, OffsetAllocator, GRANULE};

use hexrpc_drivers::Syscalls;

use crate::error::{Cause, HalError, Stage};
use crate::lease::{BufferView, Lease};
use crate::session::Session;
use crate::sync::Mutex;

/// The alignment of every sub-allocation of an arena (and its size granule): 128 bytes, one HVX
/// vector.
pub const ARENA_ALIGN: usize = GRANULE as usize;

/// Bookkeeping nodes of an arena's allocator: at most this many blocks, free and used together
/// (so a little under this many live sub-allocations).
pub const ARENA_BLOCKS: usize = 1024;

impl From<ArenaError> for HalError {
    fn from(e: ArenaError) -> HalError {
        let cause = match e {
            ArenaError::NoFit { requested, largest_free, .. } => Cause::ArenaFull { requested, largest_free },
            ArenaError::NodesExhausted { nodes } => Cause::ArenaBlocks { blocks: nodes },
            ArenaError::ZeroLength | ArenaError::BadAlign { .. } | ArenaError::ForeignBlock => Cause::Invalid,
        };
        HalError::new(Stage::Alloc, cause)
    }
}

/// A lease carved into sub-allocations ([`ArenaBuf`]); see the module docs.
pub struct Arena<'s, S: Syscalls + Clone> {
    blocks: Mutex<OffsetAllocator<ARENA_BLOCKS>>,
    lease: Lease<'s, S>,
}

impl<'s, S: Syscalls + Clone> Arena<'s, S> {
    /// An arena over the whole of `lease`, all free.
    pub fn new(lease: Lease<'s, S>) -> Self {
        let capacity = lease.len() as u64;
        Arena { blocks: Mutex::new(OffsetAllocator::new(capacity)), lease }
    }

    /// The lease the sub-allocations are ranges of (what launches map).
    pub fn lease(&self) -> &Lease<'s, S> {
        &self.lease
    }

    /// The arena's length: its lease's.
    pub fn len(&self) -> usize {
        self.lease.len()
    }

    /// Always false: a lease has at least one page.
    pub fn is_empty(&self) -> bool {
        self.lease.is_empty()
    }

    /// Bytes used and free, blocks, the largest free range.
    pub fn stats(&self) -> ArenaStats {
        self.blocks.lock().stats()
    }

    /// A sub-allocation of `len` bytes at an [`ARENA_ALIGN`]-aligned offset. Fails with
    /// [`Cause::ArenaFull`] when no free range fits, [`Cause::ArenaBlocks`] when the bookkeeping
    /// is exhausted, [`Cause::Invalid`] for `len == 0`, [`Cause::Quarantined`] while the lease
    /// is.
    pub fn alloc(&self, len: usize) -> Result<ArenaBuf<'_, 's, S>, HalError> {
        self.alloc_aligned(len, ARENA_ALIGN)
    }

    /// [`alloc`](Self::alloc) at an offset that is a multiple of `align` (a power of two;
    /// anything below [`ARENA_ALIGN`] gives [`ARENA_ALIGN`]).
    pub fn alloc_aligned(&self, len: usize, align: usize) -> Result<ArenaBuf<'_, 's, S>, HalError> {
        let (block, offset) = self.take(len, align)?;
        Ok(ArenaBuf { arena: self, block: Some(block), offset, len })
    }

    /// A block of `len` bytes and its offset as a `usize`.
    pub(crate) fn take(&self, len: usize, align: usize) -> Result<(Block, usize), HalError> {
        self.lease.check()?;
        let block = self.blocks.lock().alloc(len as u64, align as u64)?;
        // Inside the lease, whose length is a usize.
        match usize::try_from(block.offset()) {
            Ok(offset) => Ok((block, offset)),
            Err(_) => {
                self.give_back(block);
                Err(HalError::new(Stage::Alloc, Cause::Invalid))
            }
        }
    }

    /// Frees a block of this arena (logs a refusal, which would be a bug).
    pub(crate) fn give_back(&self, block: Block) {
        if let Err(e) = self.blocks.lock().free(block) {
            log::error!("arena block not given back: {e}");
        }
    }

    /// `[offset, offset + len)` of the sub-allocation `[base, base + size)`, in lease offsets.
    fn range(base: usize, size: usize, offset: usize, len: usize) -> Result<usize, HalError> {
        match offset.checked_add(len) {
            Some(end) if end <= size => base.checked_add(offset).ok_or(HalError::new(Stage::Alloc, Cause::Invalid)),
            _ => Err(HalError::new(Stage::Alloc, Cause::Invalid)),
        }
    }

    pub(crate) fn sub_view(&self, base: usize, size: usize, offset: usize, len: usize) -> Result<BufferView<'_>, HalError> {
        self.lease.view(Self::range(base, size, offset, len)?, len)
    }

    pub(crate) fn sub_read(&self, base: usize, size: usize, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        self.lease.read_at(Self::range(base, size, offset, out.len())?, out)
    }

    pub(crate) fn sub_write(&self, base: usize, size: usize, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.lease.write_shared(Self::range(base, size, offset, data.len())?, data)
    }

    pub(crate) fn sub_fill(&self, base: usize, size: usize, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.lease.fill_shared(Self::range(base, size, offset, len)?, len, byte)
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for Arena<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Arena").field("lease", &self.lease).field("stats", &self.stats()).finish()
    }
}

/// One sub-allocation of an [`Arena`]: `len` bytes at `offset` of the arena's lease. Dropping
/// it frees the range; its views borrow it, so it outlives every view of it.
pub struct ArenaBuf<'a, 's, S: Syscalls + Clone> {
    arena: &'a Arena<'s, S>,
    // `None` only inside `drop`.
    block: Option<Block>,
    offset: usize,
    len: usize,
}

impl<'a, 's, S: Syscalls + Clone> ArenaBuf<'a, 's, S> {
    /// Where the buffer starts in the arena's lease.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The length asked for (the range held is rounded up to [`ARENA_ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a zero-length sub-allocation is refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The arena it belongs to.
    pub fn arena(&self) -> &'a Arena<'s, S> {
        self.arena
    }

    /// A view of `[offset, offset + len)` of this buffer (offsets relative to the buffer): a view
    /// of the arena's lease at `self.offset() + offset`. Refused past the buffer's length or
    /// while the lease is quarantined.
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>, HalError> {
        self.arena.sub_view(self.offset, self.len, offset, len)
    }

    /// A view of the whole buffer.
    pub fn whole(&self) -> Result<BufferView<'_>, HalError> {
        self.view(0, self.len)
    }

    /// Copies `out.len()` bytes at `offset` of the buffer out (with the lease's cache
    /// maintenance). Refused past the buffer or while the lease is quarantined.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        self.arena.sub_read(self.offset, self.len, offset, out)
    }

    /// Copies `data` into the buffer at `offset` (with the lease's cache maintenance). Refused
    /// past the buffer or while the lease is quarantined.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.arena.sub_write(self.offset, self.len, offset, data)
    }

    /// Sets `len` bytes at `offset` of the buffer to `byte`. Refused past the buffer or while
    /// the lease is quarantined.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.arena.sub_fill(self.offset, self.len, offset, len, byte)
    }
}

impl<S: Syscalls + Clone> Drop for ArenaBuf<'_, '_, S> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.arena.give_back(block);
        }
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for ArenaBuf<'_, '_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArenaBuf").field("fd", &self.arena.lease.fd().0).field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl<S: Syscalls + Clone> Session<S> {
    /// An [`Arena`] over a new lease of `len` bytes (rounded up to a page, as
    /// [`alloc`](Session::alloc) does): many sub-allocations, one lease for the DSP.
    pub fn arena(&self, len: usize) -> Result<Arena<'_, S>, HalError> {
        Ok(Arena::new(self.alloc(len)?))
    }
}
