//! Owned handles for services that cannot hold borrows (feature `std`): language bindings, or a
//! service that keeps leases and libraries in its own structures.
//!
//! [`SharedLease`] and [`SharedLibrary`] hold an [`Arc`] of their [`Session`] (and the library
//! its registry) instead of borrowing it, so they are `'static`. What the borrow checker proves
//! for [`Lease`] and [`Library`] holds here by ownership: the session (its ION device, its
//! channel) lives as long as any lease or library made from it, and each releases what it owns
//! when dropped, before its session.

extern crate std;

use std::sync::Arc;

use hexrpc_drivers::Syscalls;

use crate::call::Call;
use crate::error::{HalError, Stage};
use crate::image::LibraryImage;
use crate::lease::{BufferView, Lease, Owner, RawLease};
use crate::session::{ImageRegistry, Session};

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
        let raw = RawLease::alloc(&self.sys, self.ion.raw(), self.board, len, Stage::Alloc)?;
        Ok(SharedLease { lease: Lease::new(raw, self.sys.clone(), self.ion.raw(), Owner::Shared(self.clone())), session: self.clone() })
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
        let slot = self.open_library_with(&*registry, name, image, map_cache)?.into_slot();
        Ok(SharedLibrary { slot, registry, session: self.clone() })
    }
}
