//! Libraries on the DSP: publishing an image, remotectl open/close, and the [`Library`] handle
//! that closes itself on every path.

use core::fmt::Write as _;
use core::sync::atomic::{AtomicU32, Ordering};

use hexrpc_drivers::{Fd, Syscalls};

use super::remotectl::{
    remotectl_close, remotectl_open, ImageRegistry, LibSlot, MAP_CACHE_RELEASE_IDS, MAP_CACHE_RELEASE_METHOD, MAX_LIBRARIES, MAX_NAME,
};
use super::Session;
use crate::call::Call;
use crate::error::{Cause, HalError, Stage};
use crate::image::LibraryImage;
use crate::latency::LibrarySetup;

static NAME_SEQ: AtomicU32 = AtomicU32::new(1);

impl<S: Syscalls + Clone> Session<S> {
    /// Opens a library: publishes `image` under a unique name in `registry`, asks the DSP to load
    /// it (the DSP fetches the image back through the reverse file service) and returns a handle
    /// that closes the library and withdraws the image when dropped.
    ///
    /// `name` may hold ASCII letters, digits, `_`, `-` and `.` (at most 32 bytes). A library is
    /// opened once and invoked many times. The image is a `&'static [u8]` or (std) owned bytes
    /// ([`LibraryImage`]); the registry keeps it until the library is closed. When the DSP's
    /// loader refuses the image (bad ELF, unresolved symbol, no `entry`, ...) the error is
    /// [`Cause::Refused`] with the AEE code and the loader's reason.
    pub fn open_library<'s>(
        &'s self,
        registry: &'s dyn ImageRegistry,
        name: &str,
        image: impl Into<LibraryImage>,
    ) -> Result<Library<'s, S>, HalError> {
        self.open_library_with(registry, name, image, false)
    }

    /// [`open_library`](Self::open_library) for a library whose entry was built with the map
    /// cache when `map_cache` is true (its build record says so: `FLAG_MAP_CACHE`): the session
    /// then marks every lease launched on it, releases a marked lease's cached DSP mapping when
    /// the lease is dropped (before its fd number is given up), and flushes the library's
    /// cache before it is closed. Saying `true` for a library without the cache costs one
    /// ignored call per dropped lease; saying `false` for one with it is never right (its
    /// mappings would outlive their leases), so callers take the flag from the build record.
    pub fn open_library_with<'s>(
        &'s self,
        registry: &'s dyn ImageRegistry,
        name: &str,
        image: impl Into<LibraryImage>,
        map_cache: bool,
    ) -> Result<Library<'s, S>, HalError> {
        self.open_library_setup(registry, name, image, map_cache, None)
    }

    /// [`open_library_with`](Self::open_library_with), and `setup` sent to the library right
    /// after it is opened and after each reopen by a recovery ([`LibrarySetup`]).
    pub fn open_library_setup<'s>(
        &'s self,
        registry: &'s dyn ImageRegistry,
        name: &str,
        image: impl Into<LibraryImage>,
        map_cache: bool,
        setup: Option<LibrarySetup>,
    ) -> Result<Library<'s, S>, HalError> {
        let st = Stage::LibraryOpen;
        let image = image.into();
        let setup_index = match &setup {
            Some(s) => Some(self.intern_setup(s).ok_or(HalError::new(st, Cause::Full))?),
            None => None,
        };
        if name.is_empty() || name.len() > 32 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.') {
            return Err(HalError::new(st, Cause::Invalid));
        }
        // Lock order everywhere: `chan` before `libs`, and `libs` never across a DSP call.
        let chan = self.chan.read();
        self.check_health(st)?;
        let lease = chan.current.and_then(|i| self.cells[i].lease()).ok_or(HalError::new(st, Cause::NeedsRecovery))?;
        let mut unique = heapless::String::<MAX_NAME>::new();
        write!(unique, "{name}-{}", NAME_SEQ.fetch_add(1, Ordering::Relaxed)).map_err(|_| HalError::new(st, Cause::Invalid))?;
        let slot = {
            let mut libs = self.libs.lock();
            let slot = libs.iter().position(|s| s.is_none()).ok_or(HalError::new(st, Cause::Full))?;
            // Reserved while the DSP loads it; recovery cannot run meanwhile (we hold `chan`).
            libs[slot] = Some(LibSlot { name: unique.clone(), remote: u32::MAX, map_cache, setup: setup_index });
            slot
        };
        let opened = if registry.publish(&unique, image) {
            remotectl_open(&self.sys, self.board, lease.raw(), &unique).map_err(|e| {
                registry.withdraw(&unique);
                self.note_failure(e)
            })
        } else {
            Err(HalError::new(st, Cause::Registry))
        };
        if let (Ok(remote), Some(s)) = (&opened, &setup) {
            self.send_setup(lease.raw(), *remote, &unique, s);
        }
        let mut libs = self.libs.lock();
        match opened {
            Ok(remote) => {
                libs[slot] = Some(LibSlot { name: unique, remote, map_cache, setup: setup_index });
                Ok(Library { session: self, registry, slot })
            }
            Err(e) => {
                libs[slot] = None;
                Err(e)
            }
        }
    }

    pub(crate) fn close_slot(&self, registry: &dyn ImageRegistry, slot: usize) {
        // The DSP process keeps a library's HAP_mmap mappings after the library is unloaded:
        // its cache is flushed first (the process's end takes them otherwise).
        if self.slot_map_cache(slot) && self.is_healthy() {
            if let Err(e) = self.release_slot(slot, &[]) {
                log::warn!("flushing the map cache of library slot {slot} before its close: {e}");
            }
        }
        let chan = self.chan.read();
        let Some(lib) = self.libs.lock()[slot].take() else { return };
        if self.is_healthy() {
            if let Some(lease) = chan.current.and_then(|i| self.cells[i].lease()) {
                if let Err(e) = remotectl_close(&self.sys, self.board, lease.raw(), lib.remote) {
                    log::warn!("closing library {}: {e}", lib.name);
                }
            }
        }
        drop(chan);
        self.book.forget_slot(slot);
        registry.withdraw(&lib.name);
    }

    /// The index of `setup` in the session's table of distinct setup calls (added if new);
    /// `None` when [`MAX_SETUPS`](super::MAX_SETUPS) distinct ones are there already.
    fn intern_setup(&self, setup: &LibrarySetup) -> Option<u8> {
        let mut table = self.setups.lock();
        if let Some(i) = table.iter().position(|s| s == setup) {
            return Some(i as u8);
        }
        table.push(*setup).ok()?;
        Some((table.len() - 1) as u8)
    }

    /// The setup call at `index` of the session's table.
    pub(super) fn setup_at(&self, index: u8) -> Option<LibrarySetup> {
        self.setups.lock().get(usize::from(index)).copied()
    }

    /// Sends a library's setup call on the channel `fd` to its remote handle `remote`: logged and
    /// counted when it fails, never an error (the library works without it).
    pub(super) fn send_setup(&self, fd: Fd, remote: u32, name: &str, setup: &LibrarySetup) {
        let sent = Call::<'_, 1>::new(setup.method()).and_then(|mut call| {
            call.input(setup.input())?;
            Ok(call)
        });
        let result = match sent {
            Ok(mut call) => {
                crate::driver::invoke(&self.sys, self.board, fd, remote, &mut call).map_err(|e| HalError::sys(Stage::Invoke, e))
            }
            Err(_) => Err(HalError::new(Stage::Invoke, Cause::Invalid)),
        };
        if let Err(e) = result {
            self.setup_failures.fetch_add(1, Ordering::Relaxed);
            log::warn!("the setup call (method {}) of library {name} failed: {e}; the library works without it", setup.method());
        }
    }

    pub(crate) fn remote_handle(&self, slot: usize) -> Option<u32> {
        self.libs.lock()[slot].as_ref().map(|l| l.remote)
    }

    /// The remote handle and the map-cache flag of `slot`.
    pub(crate) fn slot_info(&self, slot: usize) -> Option<(u32, bool)> {
        self.libs.lock()[slot].as_ref().map(|l| (l.remote, l.map_cache))
    }

    pub(crate) fn slot_map_cache(&self, slot: usize) -> bool {
        self.slot_info(slot).is_some_and(|(_, c)| c)
    }

    /// One release call on `slot`: the DSP unmaps its cached mappings of `ids` (all of them for
    /// an empty list). At most [`MAP_CACHE_RELEASE_IDS`] ids.
    fn release_slot(&self, slot: usize, ids: &[u32]) -> Result<(), HalError> {
        let mut msg = [0u8; 4 + 4 * MAP_CACHE_RELEASE_IDS];
        let n = ids.len().min(MAP_CACHE_RELEASE_IDS);
        msg[..4].copy_from_slice(&(n as u32).to_le_bytes());
        for (k, id) in ids[..n].iter().enumerate() {
            msg[4 + 4 * k..8 + 4 * k].copy_from_slice(&id.to_le_bytes());
        }
        let mut call = Call::<'_, 1>::new(MAP_CACHE_RELEASE_METHOD).map_err(|_| HalError::new(Stage::Invoke, Cause::Invalid))?;
        call.input(&msg[..4 + 4 * n]).map_err(|_| HalError::new(Stage::Invoke, Cause::Invalid))?;
        self.invoke_slot(slot, &mut call, None)
    }

    /// Releases the DSP mappings cached under `ids` (of leases whose share fd is `fd`) in every
    /// open library with the map cache that may hold them: those `fd` went to (tracked exactly
    /// for small numbers), or every one (called when a lease that went to one is dropped, before
    /// its fd is unmapped or retired).
    ///
    /// A failure is logged and never stops the lease's own teardown; the caller keeps the lease
    /// whole until the channels that may have run it are closed (their DSP process, and every
    /// mapping in it, then ends). What the device would do meanwhile: the mapping stays in the
    /// DSP process under an id that is never sent again, so no launch reaches it; the kernel's
    /// handle map of the kept number still pins the memory behind it.
    /// Returns true if every library answered (false: the caller keeps the lease whole).
    pub(crate) fn release_cached(&self, ids: &[u32], fd: Fd) -> bool {
        if !self.is_healthy() {
            log::debug!("map cache release of {} lease id(s) not sent: the session needs recovery", ids.len());
            return false;
        }
        let mut slots: heapless::Vec<usize, MAX_LIBRARIES> = heapless::Vec::new();
        {
            let libs = self.libs.lock();
            for (i, l) in libs.iter().enumerate() {
                // Every slot's mark is taken (cleared) here, whether the library is still open.
                let went = self.book.take_slot_fd(i, fd);
                if went && l.as_ref().is_some_and(|l| l.map_cache && l.remote != u32::MAX) {
                    // At most MAX_LIBRARIES slots: never full.
                    let _ = slots.push(i);
                }
            }
        }
        let mut all = true;
        for slot in slots {
            for chunk in ids.chunks(MAP_CACHE_RELEASE_IDS) {
                if let Err(e) = self.release_slot(slot, chunk) {
                    log::warn!("map cache release on library slot {slot} failed ({e})");
                    all = false;
                }
            }
        }
        all
    }
}

/// An open library on the DSP. Dropping it closes the library (remotectl close) and withdraws
/// its image from the registry, on every path.
pub struct Library<'s, S: Syscalls + Clone> {
    session: &'s Session<S>,
    registry: &'s dyn ImageRegistry,
    slot: usize,
}

impl<S: Syscalls + Clone> Library<'_, S> {
    /// The DSP-side handle (changes after a recovery).
    pub fn remote_handle(&self) -> Option<u32> {
        self.session.remote_handle(self.slot)
    }

    /// True if the library was opened with the map cache
    /// ([`Session::open_library_with`]): launches send lease ids to it.
    pub fn map_cache(&self) -> bool {
        self.session.slot_map_cache(self.slot)
    }

    /// Calls the library with `args`, a driver-neutral [`Call`] that the board's driver backend
    /// translates right before its ioctl (downstream `FASTRPC_IOCTL_INVOKE_ATTRS`, upstream
    /// `FASTRPC_IOCTL_INVOKE`, where every handle needs its length). Blocks until the DSP
    /// answers; the driver has no timeout (see [`invoke_with_deadline`](Self::invoke_with_deadline)).
    pub fn invoke<const CAP: usize>(&self, args: &mut Call<'_, CAP>) -> Result<(), HalError> {
        self.session.invoke_slot(self.slot, args, None)
    }

    /// [`invoke`](Self::invoke) with a deadline: if the call has not returned after `timeout`, a
    /// watchdog thread interrupts it (the driver parks the call), the error is
    /// [`Cause::Timeout`], and the session needs [`Session::recover`], which frees the parked
    /// call by closing the channel.
    #[cfg(feature = "std")]
    pub fn invoke_with_deadline<const CAP: usize>(&self, args: &mut Call<'_, CAP>, timeout: core::time::Duration) -> Result<(), HalError>
    where
        S: Sync,
    {
        crate::deadline::run(self.session.sys(), timeout, |fired| self.session.invoke_slot(self.slot, args, Some(fired)))
    }
}

impl<S: Syscalls + Clone> Library<'_, S> {
    /// Gives up the handle without closing the library: the caller closes its slot.
    #[cfg(feature = "std")]
    pub(crate) fn into_slot(self) -> usize {
        let slot = self.slot;
        core::mem::forget(self);
        slot
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for Library<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Library").field("slot", &self.slot).field("remote", &self.remote_handle()).finish()
    }
}

impl<S: Syscalls + Clone> Drop for Library<'_, S> {
    fn drop(&mut self) {
        self.session.close_slot(self.registry, self.slot);
    }
}
