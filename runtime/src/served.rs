//! A HAL session together with the reverse file service that answers its DSP (feature `std`):
//! what a service author starts with.

extern crate std;

use std::sync::Arc;

use hexrpc_bsp::DeviceAccess;
use hexrpc_drivers::Syscalls;
use hexrpc_hal::{Library, LibraryImage, Session, SharedLease, SharedLibrary};

use crate::error::{Error, ThreadError};
use crate::kernel::{resolve_launch, Kernel};
use crate::launch::{AbiVersion, Signature};
use crate::reverse::{FilePolicy, OwnedBuffers, ReverseService, ServeOutcome, ServiceHandle, StopError};

/// A ready [`Session`] whose reverse-RPC listener is served by a [`ReverseService`] on its own
/// thread, following the session through recoveries
/// ([`ReverseService::spawn_for_session`]).
///
/// Dropping it stops the listener (which first releases every file and DSP map of the service
/// on the channel that made them), then releases the session (process exit, channel, ION),
/// then the service.
pub struct ServedSession<S: Syscalls + Clone + Send + Sync + 'static> {
    listener: Option<ServiceHandle<S>>,
    session: Arc<Session<S>>,
    service: Arc<ReverseService<'static, S>>,
}

impl<S: Syscalls + Clone + Send + Sync + 'static> ServedSession<S> {
    /// Starts the session on the board `access` grants and serves its listener under `policy`.
    pub fn start(sys: S, access: &DeviceAccess, policy: FilePolicy) -> Result<Self, Error> {
        Self::serve(Session::start(sys, access)?, policy)
    }

    /// Serves an already started session (for example one built stage by stage).
    pub fn serve(session: Session<S>, policy: FilePolicy) -> Result<Self, Error> {
        // Channel ends that may block in the kernel run bounded / on their own threads.
        session.end_channels_off_thread();
        let session = Arc::new(session);
        // The listener thread points the service at each channel it serves (and back at none).
        let service = Arc::new(ReverseService::new(session.sys().clone(), hexrpc_drivers::Fd(-1), policy));
        service.set_kernel_abi(session.board().abi);
        let listener = service
            .clone()
            .spawn_for_session(session.clone(), OwnedBuffers::for_service(&service))
            .map_err(|e| ThreadError::new(&e, false))?;
        Ok(ServedSession { listener: Some(listener), session, service })
    }

    /// True while the listener thread runs.
    pub fn listener_running(&self) -> bool {
        self.listener.as_ref().is_some_and(|l| !l.is_finished())
    }

    /// Recovers the session ([`Session::recover`]); if the listener thread has ended (it was
    /// stopped, or failed), a new one is started first, since the re-opened libraries are
    /// fetched through it.
    pub fn recover(&mut self) -> Result<(), Error> {
        if !self.listener_running() {
            if let Some(old) = self.listener.take() {
                match old.join() {
                    Ok(outcome) => log::info!("reverse-RPC listener had ended ({outcome:?}); starting a new one"),
                    Err(e) => log::warn!("reverse-RPC listener: {e}"),
                }
            }
            let l = self
                .service
                .clone()
                .spawn_for_session(self.session.clone(), OwnedBuffers::for_service(&self.service))
                .map_err(|e| ThreadError::new(&e, true))?;
            self.listener = Some(l);
        }
        Ok(self.session.recover()?)
    }

    /// Stops the listener thread and reports how it ended; the session then needs recovery
    /// ([`Cause::ListenerStopped`](hexrpc_hal::Cause::ListenerStopped)), which
    /// [`recover`](Self::recover) does with a new listener.
    pub fn stop_listener(&mut self) -> Result<ServeOutcome, StopError> {
        match self.listener.take() {
            Some(l) => l.stop(),
            None => Ok(ServeOutcome::Stopped),
        }
    }

    /// The session (allocate, recover, inspect).
    pub fn session(&self) -> &Session<S> {
        &self.session
    }

    /// The session, shared (for threads that outlive a borrow).
    pub fn session_arc(&self) -> &Arc<Session<S>> {
        &self.session
    }

    /// The reverse file service (metrics, image counts).
    pub fn service(&self) -> &ReverseService<'static, S> {
        &self.service
    }

    /// Opens a library whose image the service serves under a unique name (see
    /// [`Session::open_library`]). A library whose build record carries
    /// [`FLAG_MAP_CACHE`](crate::launch::record::FLAG_MAP_CACHE) is opened with the map cache
    /// ([`Session::open_library_with`]); one with
    /// [`FLAG_POWER`](crate::launch::record::FLAG_POWER) gets the session's DSP clock vote
    /// ([`LatencyPolicy`](hexrpc_hal::LatencyPolicy), [`PowerVote`](crate::launch::PowerVote))
    /// after each open.
    pub fn open_library(&self, name: &str, image: impl Into<LibraryImage>) -> Result<Library<'_, S>, Error> {
        let image = image.into();
        let map_cache = records_map_cache(image.bytes());
        let setup = self.power_setup(image.bytes());
        Ok(self.session.open_library_setup(&*self.service, name, image, map_cache, setup)?)
    }

    /// The DSP clock vote for a library with `image`: the session's level, if its build record
    /// says the entry takes it.
    fn power_setup(&self, image: &[u8]) -> Option<hexrpc_hal::LibrarySetup> {
        let takes = matches!(crate::launch::LibraryRecord::find(image), Ok(Some(r)) if r.power());
        let vote = crate::launch::PowerVote::for_level(self.session.latency_policy().dsp_power());
        vote.filter(|_| takes).map(|v| v.setup())
    }

    /// [`open_library`](Self::open_library) with the map cache said explicitly, for a library
    /// without a build record whose entry was generated with
    /// [`EntryOptions::map_cache`](crate::launch::EntryOptions::map_cache).
    pub fn open_library_with(&self, name: &str, image: impl Into<LibraryImage>, map_cache: bool) -> Result<Library<'_, S>, Error> {
        Ok(self.session.open_library_with(&*self.service, name, image, map_cache)?)
    }

    /// Shuts the served session down (the DSP process exits, the listener releases what it
    /// held on the live channel and stops) and reports how the listener ended; dropping does the
    /// same, silently.
    pub fn stop(mut self) -> Result<ServeOutcome, StopError> {
        match self.listener.take() {
            Some(l) => self.shut_down(l),
            None => Ok(ServeOutcome::Stopped),
        }
    }

    /// The DSP process exits first: the listener leaves `next2` from the DSP side and releases
    /// the service's files and maps on the live channel; only then is it stopped (interrupting
    /// it if it did not leave), and the session closes the channel when it is dropped.
    fn shut_down(&self, l: ServiceHandle<S>) -> Result<ServeOutcome, StopError> {
        use hexrpc_hal::internal::ListenerPlumbing;
        self.service.stop_signal().request();
        self.session.begin_shutdown();
        l.stop()
    }
}

// Kernels: libraries opened together with their kernel's signature and launch ABI (`kernel`).
impl<S: Syscalls + Clone + Send + Sync + 'static> ServedSession<S> {
    /// Opens a library (see [`ServedSession::open_library`]) whose `entry` was generated for
    /// `signature` and `abi`, ready for one-call launches. A library made by `hexrpc
    /// build-lib` carries its build record: a signature or ABI other than the recorded one is
    /// refused before anything is opened.
    pub fn open_kernel(
        &self,
        name: &str,
        image: impl Into<LibraryImage>,
        signature: Signature,
        abi: AbiVersion,
    ) -> Result<Kernel<Library<'_, S>>, Error> {
        let image = image.into();
        let (signature, abi) = resolve_launch(image.bytes(), Some((signature, abi)))?;
        Ok(Kernel::new(self.open_library(name, image)?, signature, abi))
    }

    /// Opens a library made by `hexrpc build-lib` with the signature and ABI its build record
    /// names ([`OpenRefusal::NoRecord`](crate::OpenRefusal::NoRecord) for a library without one).
    pub fn open_recorded_kernel(&self, name: &str, image: impl Into<LibraryImage>) -> Result<Kernel<Library<'_, S>>, Error> {
        let image = image.into();
        let (signature, abi) = resolve_launch(image.bytes(), None)?;
        Ok(Kernel::new(self.open_library(name, image)?, signature, abi))
    }

    /// [`open_kernel`](Self::open_kernel) (or, with `launch` `None`,
    /// [`open_recorded_kernel`](Self::open_recorded_kernel)) for a kernel that holds shares
    /// of the session and of the reverse service instead of borrows (`'static`: for bindings
    /// and long-lived tables). The kernel keeps the session's resources alive, but the
    /// reverse-RPC listener and the channel stop with this `ServedSession`: launches made
    /// after it was dropped fail (with an error), so keep it as long as the kernel is used.
    pub fn open_kernel_shared(
        &self,
        name: &str,
        image: impl Into<LibraryImage>,
        launch: Option<(Signature, AbiVersion)>,
    ) -> Result<Kernel<SharedLibrary<S>>, Error> {
        let image = image.into();
        let (signature, abi) = resolve_launch(image.bytes(), launch)?;
        let map_cache = records_map_cache(image.bytes());
        let setup = self.power_setup(image.bytes());
        let library = self.session.open_library_shared_setup(self.service.clone(), name, image, map_cache, setup)?;
        Ok(Kernel::new(library, signature, abi))
    }

    /// [`open_library`](Self::open_library) for a library that holds shares of the session and
    /// of the reverse service instead of borrows (`'static`; see
    /// [`open_kernel_shared`](Self::open_kernel_shared) for what stops with this value). The
    /// map cache as the build record says.
    pub fn open_library_shared(&self, name: &str, image: impl Into<LibraryImage>) -> Result<SharedLibrary<S>, Error> {
        let image = image.into();
        let map_cache = records_map_cache(image.bytes());
        let setup = self.power_setup(image.bytes());
        Ok(self.session.open_library_shared_setup(self.service.clone(), name, image, map_cache, setup)?)
    }

    /// Allocates a lease that holds a share of the session instead of a borrow (its memory
    /// stays valid after this `ServedSession` is dropped; see
    /// [`open_kernel_shared`](Self::open_kernel_shared) for launches).
    pub fn alloc_shared(&self, len: usize) -> Result<SharedLease<S>, Error>
    where
        S: 'static,
    {
        Ok(self.session.alloc_shared(len)?)
    }

    /// Imports `len` bytes of the dma-buf behind `fd` (another process's or component's) as a
    /// lease that holds a share of the session ([`Session::import`](hexrpc_hal::Session::import):
    /// `fd` stays the caller's; a descriptor that is not a dma-buf is refused before any call).
    pub fn import_shared(&self, fd: hexrpc_drivers::Fd, len: usize, access: hexrpc_hal::Access) -> Result<SharedLease<S>, Error>
    where
        S: 'static,
    {
        Ok(self.session.import_shared(fd, len, access)?)
    }
}

impl<S: Syscalls + Clone + Sync> Kernel<SharedLibrary<S>> {
    /// The session the kernel's library belongs to.
    pub fn session(&self) -> &Arc<hexrpc_hal::Session<S>> {
        self.library().session()
    }
}

impl<S: Syscalls + Clone + Send + Sync + 'static> Drop for ServedSession<S> {
    fn drop(&mut self) {
        if let Some(l) = self.listener.take() {
            if let Err(e) = self.shut_down(l) {
                log::warn!("stopping the reverse-RPC listener: {e}");
            }
        }
    }
}

/// True if `image`'s build record says its entry keeps lease mappings across calls (a v2 entry
/// with [`FLAG_MAP_CACHE`](crate::launch::record::FLAG_MAP_CACHE)); false without a readable record.
fn records_map_cache(image: &[u8]) -> bool {
    matches!(crate::launch::LibraryRecord::find(image), Ok(Some(r)) if r.map_cache() && r.abi() == crate::launch::AbiVersion::V2)
}
