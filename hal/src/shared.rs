//! Owned handles for services that cannot hold borrows (feature `std`): language bindings, or a
//! service that keeps leases and libraries in its own structures.
//!
//! [`SharedLease`], [`SharedArena`] and [`SharedLibrary`] hold an [`Arc`] of their [`Session`]
//! (and the library its registry) instead of borrowing it, so they are `'static`; a
//! [`SharedArenaBuf`] holds an `Arc` of its arena. What the borrow checker proves
//! for [`Lease`], [`ArenaBuf`](crate::ArenaBuf) and [`Library`] holds here by ownership: the
//! session (its ION device, its channel) lives as long as any lease, arena or library made from
//! it, an arena as long as any of its buffers, and each releases what it owns when dropped,
//! before what it came from. A view borrows its owner as before, so a buffer outlives its views.

extern crate std;

use std::sync::Arc;

use hexrpc_drivers::Syscalls;

use crate::arena::{Arena, ArenaStats, Block, ARENA_ALIGN};
use crate::call::Call;
use crate::error::HalError;
use crate::image::LibraryImage;
use crate::lease::{BufferView, Lease, Owner};
use crate::session::remotectl::ImageRegistry;
use crate::session::Session;

/// An lease that owns a share of its session (see [`Lease`] for what it holds).
pub struct SharedLease<S: Syscalls + Clone + 'static> {
    // Field order is release order: the lease before the session it came from.
    lease: Lease<'static, S>,
    session: Arc<Session<S>>,
}

impl<S: Syscalls + Clone + 'static> SharedLease<S> {
    /// The lease.
    pub fn lease(&self) -> &Lease<'static, S> {
        &self.lease
    }

    /// The lease, to write into it.
    pub fn lease_mut(&mut self) -> &mut Lease<'static, S> {
        &mut self.lease
    }

    /// The session it belongs to.
    pub fn session(&self) -> &Arc<Session<S>> {
        &self.session
    }

    /// A view of `[offset, offset + len)` (see [`Lease::view`]).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>, HalError> {
        self.lease.view(offset, len)
    }
}

impl<S: Syscalls + Clone + 'static> core::fmt::Debug for SharedLease<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.lease.fmt(f)
    }
}

/// An arena that owns a share of its session (see [`Arena`]); its buffers
/// ([`SharedArenaBuf`]) own a share of it. Made by [`Session::arena_shared`].
pub struct SharedArena<S: Syscalls + Clone + 'static> {
    // Field order is release order: the arena (its lease) before the session it came from.
    arena: Arena<'static, S>,
    session: Arc<Session<S>>,
}

impl<S: Syscalls + Clone + 'static> SharedArena<S> {
    /// An arena over the whole of `lease`, all free.
    pub fn new(lease: SharedLease<S>) -> Arc<Self> {
        let SharedLease { lease, session } = lease;
        Arc::new(SharedArena { arena: Arena::new(lease), session })
    }

    /// The arena.
    pub fn arena(&self) -> &Arena<'static, S> {
        &self.arena
    }

    /// The lease the buffers are ranges of.
    pub fn lease(&self) -> &Lease<'static, S> {
        self.arena.lease()
    }

    /// The session it belongs to.
    pub fn session(&self) -> &Arc<Session<S>> {
        &self.session
    }

    /// The arena's length (its lease's).
    pub fn len(&self) -> usize {
        self.arena.len()
    }

    /// Always false: a lease has at least one page.
    pub fn is_empty(&self) -> bool {
        self.arena.is_empty()
    }

    /// Bytes used and free, blocks, the largest free range (see [`Arena::stats`]).
    pub fn stats(&self) -> ArenaStats {
        self.arena.stats()
    }

    /// A buffer of `len` bytes (see [`Arena::alloc`]) that holds a share of the arena.
    pub fn alloc(self: &Arc<Self>, len: usize) -> Result<SharedArenaBuf<S>, HalError> {
        self.alloc_aligned(len, ARENA_ALIGN)
    }

    /// [`alloc`](Self::alloc) at an offset that is a multiple of `align` (see
    /// [`Arena::alloc_aligned`]).
    pub fn alloc_aligned(self: &Arc<Self>, len: usize, align: usize) -> Result<SharedArenaBuf<S>, HalError> {
        let (block, offset) = self.arena.take(len, align)?;
        Ok(SharedArenaBuf { block: Some(block), offset, len, arena: self.clone() })
    }
}

impl<S: Syscalls + Clone + 'static> core::fmt::Debug for SharedArena<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.arena.fmt(f)
    }
}

/// A sub-allocation of a [`SharedArena`] that owns a share of the arena (see
/// [`ArenaBuf`](crate::ArenaBuf)); dropping it frees its range.
pub struct SharedArenaBuf<S: Syscalls + Clone + 'static> {
    // `None` only inside `drop`.
    block: Option<Block>,
    offset: usize,
    len: usize,
    arena: Arc<SharedArena<S>>,
}

impl<S: Syscalls + Clone + 'static> SharedArenaBuf<S> {
    /// Where the buffer starts in the arena's lease.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The length asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a zero-length sub-allocation is refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The arena it belongs to.
    pub fn arena(&self) -> &Arc<SharedArena<S>> {
        &self.arena
    }

    /// The arena's lease (what launches map).
    pub fn lease(&self) -> &Lease<'static, S> {
        self.arena.lease()
    }

    /// A view of `[offset, offset + len)` of this buffer (see
    /// [`ArenaBuf::view`](crate::ArenaBuf::view)).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>, HalError> {
        self.arena.arena.sub_view(self.offset, self.len, offset, len)
    }

    /// A view of the whole buffer.
    pub fn whole(&self) -> Result<BufferView<'_>, HalError> {
        self.view(0, self.len)
    }

    /// Copies bytes at `offset` of the buffer out (see
    /// [`ArenaBuf::read_at`](crate::ArenaBuf::read_at)).
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), HalError> {
        self.arena.arena.sub_read(self.offset, self.len, offset, out)
    }

    /// Copies `data` into the buffer at `offset` (see
    /// [`ArenaBuf::write_at`](crate::ArenaBuf::write_at)).
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), HalError> {
        self.arena.arena.sub_write(self.offset, self.len, offset, data)
    }

    /// Sets `len` bytes at `offset` of the buffer to `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        self.arena.arena.sub_fill(self.offset, self.len, offset, len, byte)
    }
}

impl<S: Syscalls + Clone + 'static> Drop for SharedArenaBuf<S> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.arena.arena.give_back(block);
        }
    }
}

impl<S: Syscalls + Clone + 'static> core::fmt::Debug for SharedArenaBuf<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedArenaBuf").field("fd", &self.lease().fd().0).field("offset", &self.offset).field("len", &self.len).finish()
    }
}

/// A library that owns a share of its session and of the registry serving its image (see
/// [`Library`](crate::Library)). Dropping it closes the library and withdraws the image.
pub struct SharedLibrary<S: Syscalls + Clone> {
    slot: usize,
    registry: Arc<dyn ImageRegistry + Send + Sync>,
    session: Arc<Session<S>>,
}

impl<S: Syscalls + Clone> SharedLibrary<S> {
    /// The session it belongs to.
    pub fn session(&self) -> &Arc<Session<S>> {
        &self.session
    }

    /// The DSP-side handle (changes after a recovery).
    pub fn remote_handle(&self) -> Option<u32> {
        self.session.remote_handle(self.slot)
    }

    /// True if the library was opened with the map cache (see `Library::map_cache`).
    pub fn map_cache(&self) -> bool {
        self.session.slot_map_cache(self.slot)
    }

    /// Calls the library with `args` (see [`Library::invoke`](crate::Library::invoke)).
    pub fn invoke<const CAP: usize>(&self, args: &mut Call<'_, CAP>) -> Result<(), HalError> {
        self.session.invoke_slot(self.slot, args, None)
    }

    /// Calls the library with a deadline (see
    /// [`Library::invoke_with_deadline`](crate::Library::invoke_with_deadline)).
    pub fn invoke_with_deadline<const CAP: usize>(&self, args: &mut Call<'_, CAP>, timeout: core::time::Duration) -> Result<(), HalError>
    where
        S: Sync,
    {
        crate::deadline::run(self.session.sys(), timeout, |fired| self.session.invoke_slot(self.slot, args, Some(fired)))
    }
}

impl<S: Syscalls + Clone> Drop for SharedLibrary<S> {
    fn drop(&mut self) {
        self.session.close_slot(&*self.registry, self.slot);
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for SharedLibrary<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedLibrary").field("slot", &self.slot).field("remote", &self.remote_handle()).finish()
    }
}

impl<S: Syscalls + Clone> Session<S> {
    /// [`alloc`](Session::alloc) for a lease that holds a share of the session instead of a
    /// borrow.
    pub fn alloc_shared(self: &Arc<Self>, len: usize) -> Result<SharedLease<S>, HalError>
    where
        S: 'static,
    {
        let raw = self.alloc_raw(len)?;
        Ok(SharedLease { lease: Lease::new(raw, self.sys.clone(), self.ion.raw(), Owner::Shared(self.clone())), session: self.clone() })
    }

    /// [`import`](Session::import) for a lease that holds a share of the session instead of a
    /// borrow.
    pub fn import_shared(self: &Arc<Self>, fd: hexrpc_drivers::Fd, len: usize, access: crate::Access) -> Result<SharedLease<S>, HalError>
    where
        S: 'static,
    {
        let raw = self.import_raw(fd, len, access)?;
        Ok(SharedLease { lease: Lease::new(raw, self.sys.clone(), self.ion.raw(), Owner::Shared(self.clone())), session: self.clone() })
    }

    /// [`arena`](Session::arena) for an arena that holds a share of the session instead of a
    /// borrow (in an `Arc`: its buffers hold shares of it).
    pub fn arena_shared(self: &Arc<Self>, len: usize) -> Result<Arc<SharedArena<S>>, HalError>
    where
        S: 'static,
    {
        Ok(SharedArena::new(self.alloc_shared(len)?))
    }

    /// [`open_library`](Session::open_library) for a library that holds a share of the session
    /// and of `registry` instead of borrows.
    pub fn open_library_shared(
        self: &Arc<Self>,
        registry: Arc<dyn ImageRegistry + Send + Sync>,
        name: &str,
        image: impl Into<LibraryImage>,
    ) -> Result<SharedLibrary<S>, HalError> {
        self.open_library_shared_with(registry, name, image, false)
    }

    /// [`open_library_shared`](Session::open_library_shared) with the map cache when `map_cache`
    /// is true (see [`open_library_with`](Session::open_library_with)).
    pub fn open_library_shared_with(
        self: &Arc<Self>,
        registry: Arc<dyn ImageRegistry + Send + Sync>,
        name: &str,
        image: impl Into<LibraryImage>,
        map_cache: bool,
    ) -> Result<SharedLibrary<S>, HalError> {
        self.open_library_shared_setup(registry, name, image, map_cache, None)
    }

    /// [`open_library_shared_with`](Session::open_library_shared_with) with a setup call
    /// ([`open_library_setup`](Session::open_library_setup)).
    pub fn open_library_shared_setup(
        self: &Arc<Self>,
        registry: Arc<dyn ImageRegistry + Send + Sync>,
        name: &str,
        image: impl Into<LibraryImage>,
        map_cache: bool,
        setup: Option<crate::LibrarySetup>,
    ) -> Result<SharedLibrary<S>, HalError> {
        let slot = self.open_library_setup(&*registry, name, image, map_cache, setup)?.into_slot();
        Ok(SharedLibrary { slot, registry, session: self.clone() })
    }
}
