//! A HAL session together with the reverse file service that answers its DSP (feature `std`):
//! what a service author starts with.

extern crate std;

use std::sync::Arc;

use hexrpc_bsp::DeviceAccess;
use hexrpc_drivers::Syscalls;
use hexrpc_hal::{HalError, Library, LibraryImage, Session};

use crate::reverse::{FilePolicy, OwnedBuffers, ReverseService, ServeOutcome, ServiceHandle, StopError};

/// Why a served session could not start.
#[derive(Debug)]
pub enum StartError {
    /// An init stage failed (the error names it); everything acquired was released.
    Session(HalError),
    /// The listener thread could not be created.
    Thread(std::io::Error),
}

impl core::fmt::Display for StartError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StartError::Session(e) => write!(f, "{e}"),
            StartError::Thread(e) => write!(f, "starting the reverse-RPC listener thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

impl From<HalError> for StartError {
    fn from(e: HalError) -> Self {
        StartError::Session(e)
    }
}

/// A ready [`Session`] whose reverse-RPC listener is served by a [`ReverseService`] on its own
/// thread, following the session through recoveries
/// ([`ReverseService::spawn_for_session`]).
///
/// Dropping it stops the listener, then releases the session (process exit, channel, ION),
/// then the service (every file and DSP map it still held).
pub struct ServedSession<S: Syscalls + Clone + Send + Sync + 'static> {
    listener: Option<ServiceHandle<S>>,
    pub(crate) session: Arc<Session<S>>,
    pub(crate) service: Arc<ReverseService<'static, S>>,
}

impl<S: Syscalls + Clone + Send + Sync + 'static> ServedSession<S> {
    /// Starts the session on the board `access` grants and serves its listener under `policy`.
    pub fn start(sys: S, access: &DeviceAccess, policy: FilePolicy) -> Result<Self, StartError> {
        Self::serve(Session::start(sys, access)?, policy)
    }

    /// Serves an already started session (for example one built stage by stage).
    pub fn serve(session: Session<S>, policy: FilePolicy) -> Result<Self, StartError> {
        let session = Arc::new(session);
        let fd = session.listener_fd().map(|(fd, _)| fd).unwrap_or(hexrpc_drivers::Fd(-1));
        let service = Arc::new(ReverseService::new(session.sys().clone(), fd, policy));
        let listener =
            service.clone().spawn_for_session(session.clone(), OwnedBuffers::for_service(&service)).map_err(StartError::Thread)?;
        Ok(ServedSession { listener: Some(listener), session, service })
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
    /// [`Session::open_library`]).
    pub fn open_library(&self, name: &str, image: impl Into<LibraryImage>) -> Result<Library<'_, S>, HalError> {
        self.session.open_library(&*self.service, name, image)
    }

    /// Stops the listener and reports how it ended (dropping does the same, silently).
    pub fn stop(mut self) -> Result<ServeOutcome, StopError> {
        match self.listener.take() {
            Some(l) => l.stop(),
            None => Ok(ServeOutcome::Stopped),
        }
    }
}

impl<S: Syscalls + Clone + Send + Sync + 'static> Drop for ServedSession<S> {
    fn drop(&mut self) {
        if let Some(l) = self.listener.take() {
            if let Err(e) = l.stop() {
                log::warn!("stopping the reverse-RPC listener: {e}");
            }
        }
    }
}
