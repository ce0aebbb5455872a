//! The listener on its own thread (feature `std`): spawn, stop within a bounded time, join.

extern crate std;

use std::boxed::Box;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::vec;

use hexrpc_drivers::Syscalls;

use super::{FastRpcTransport, ListenerBuffers, ReverseService, ServeOutcome};

/// Default size of the `next2` receive buffer (requests up to this size need no
/// `get_in_bufs2`).
pub const DEFAULT_REQUEST_CAPACITY: usize = 64 * 1024;
/// Extra room of the reply buffer beyond the largest read (length words and padding).
pub const REPLY_OVERHEAD: usize = 64;
/// How long [`ServiceHandle::stop`] waits for the loop to leave.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(1);

/// Heap-allocated loop buffers sized from a policy's limits (allocated once, before serving).
pub struct OwnedBuffers {
    request: Box<[u8]>,
    large: Box<[u8]>,
    reply: Box<[u8]>,
}

impl OwnedBuffers {
    /// `request_capacity` bytes for `next2`, `max_request` for oversize requests fetched with
    /// `get_in_bufs2`, and a reply buffer for a read of `max_request` bytes.
    pub fn new(request_capacity: usize, max_request: usize) -> Self {
        OwnedBuffers {
            request: vec![0u8; request_capacity].into_boxed_slice(),
            large: vec![0u8; max_request.max(request_capacity)].into_boxed_slice(),
            reply: vec![0u8; max_request + REPLY_OVERHEAD].into_boxed_slice(),
        }
    }

    /// Buffers for `service`'s limits.
    pub fn for_service<S: Syscalls>(service: &ReverseService<'_, S>) -> Self {
        let max = service.policy().limits().max_reverse_request as usize;
        Self::new(DEFAULT_REQUEST_CAPACITY.min(max.max(1)), max)
    }

    /// The borrowed view the loop uses.
    pub fn as_buffers(&mut self) -> ListenerBuffers<'_> {
        ListenerBuffers { request: &mut self.request, large: &mut self.large, reply: &mut self.reply }
    }
}

/// Why [`ServiceHandle::stop`] failed.
#[derive(Debug)]
pub enum StopError {
    /// The loop did not leave in time (the seam's interrupt did not reach it); the thread is
    /// left running detached.
    Timeout,
    /// The loop thread panicked (a bug: handlers never panic on DSP input).
    Panicked,
}

impl core::fmt::Display for StopError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StopError::Timeout => f.write_str("the reverse service did not stop in time"),
            StopError::Panicked => f.write_str("the reverse service thread panicked"),
        }
    }
}

impl std::error::Error for StopError {}

/// A running listener thread. Dropping it stops and joins it.
pub struct ServiceHandle<S: Syscalls + Send + Sync + 'static> {
    service: Arc<ReverseService<'static, S>>,
    thread: Option<JoinHandle<ServeOutcome>>,
}

impl<S: Syscalls + Send + Sync + 'static> ReverseService<'static, S> {
    /// Runs [`serve`](ReverseService::serve) on a new thread named `hexrpc-reverse`, on the
    /// service's FastRPC fd (init2 already sent), with `buffers`. Clears an earlier stop request.
    pub fn spawn(self: Arc<Self>, mut buffers: OwnedBuffers) -> std::io::Result<ServiceHandle<S>> {
        self.stop.reset();
        let service = self.clone();
        let thread = std::thread::Builder::new().name("hexrpc-reverse".into()).spawn(move || {
            let stop = || service.stop.is_requested();
            let mut t = FastRpcTransport::for_kernel(service.sys(), service.rpc_fd(), service.kernel_abi(), &stop);
            service.serve(&mut t, &mut buffers.as_buffers())
        })?;
        Ok(ServiceHandle { service: self, thread: Some(thread) })
    }
}

impl<S: Syscalls + Send + Sync + 'static> ServiceHandle<S> {
    /// The service (metrics, image registration).
    pub fn service(&self) -> &Arc<ReverseService<'static, S>> {
        &self.service
    }

    /// True once the loop has returned (stop, DSP restart, exit or failure).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the loop and joins it, waiting at most [`DEFAULT_STOP_TIMEOUT`].
    pub fn stop(self) -> Result<ServeOutcome, StopError> {
        self.stop_within(DEFAULT_STOP_TIMEOUT)
    }

    /// Stops the loop and joins it: sets the stop flag, then interrupts the loop thread through
    /// the seam every millisecond until it has left `next2` (a signal that lands before the
    /// thread blocks is harmless, hence the repetition), at most `timeout`.
    pub fn stop_within(mut self, timeout: Duration) -> Result<ServeOutcome, StopError> {
        self.stop_inner(timeout)
    }

    /// Waits for the loop to return on its own (a DSP restart or exit), without stopping it.
    pub fn join(mut self) -> Result<ServeOutcome, StopError> {
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| StopError::Panicked),
            None => Ok(ServeOutcome::Stopped),
        }
    }

    fn stop_inner(&mut self, timeout: Duration) -> Result<ServeOutcome, StopError> {
        let Some(thread) = self.thread.take() else {
            return Ok(ServeOutcome::Stopped);
        };
        self.service.stop.request();
        let start = Instant::now();
        while !thread.is_finished() {
            if start.elapsed() >= timeout {
                return Err(StopError::Timeout);
            }
            if let Some(tid) = self.service.stop.thread() {
                if let Err(e) = self.service.sys().interrupt(tid) {
                    log::warn!("reverse: interrupting the listener failed: {e}");
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        thread.join().map_err(|_| StopError::Panicked)
    }
}

impl<S: Syscalls + Send + Sync + 'static> Drop for ServiceHandle<S> {
    fn drop(&mut self) {
        if self.thread.is_some() {
            if let Err(e) = self.stop_inner(DEFAULT_STOP_TIMEOUT) {
                log::warn!("reverse: {e}");
            }
        }
    }
}

impl<S: Syscalls + Clone + Send + Sync + 'static> ReverseService<'static, S> {
    /// Serves the reverse file service for a HAL session on a new thread, and follows the
    /// session through recoveries: it serves on [`Session::listener_fd`](hexrpc_hal::Session::listener_fd);
    /// when the loop ends because the DSP restarted or the process exited, it ends the service
    /// session (closing every file and DSP map it had), waits for the session's next channel
    /// generation (a successful `recover()`), and serves again there. It records itself as the
    /// session's listener thread so recovery can interrupt it. Stop it with the returned handle.
    pub fn spawn_for_session(
        self: Arc<Self>,
        session: Arc<hexrpc_hal::Session<S>>,
        mut buffers: OwnedBuffers,
    ) -> std::io::Result<ServiceHandle<S>> {
        self.stop.reset();
        let service = self.clone();
        let thread = std::thread::Builder::new().name("hexrpc-reverse".into()).spawn(move || {
            let tid = service.sys().thread_id();
            session.set_listener_thread(tid);
            let mut served: Option<u32> = None;
            let outcome = loop {
                if service.stop.is_requested() {
                    break ServeOutcome::Stopped;
                }
                let next = session.listener_fd().filter(|(_, generation)| served != Some(*generation));
                let Some((fd, generation)) = next else {
                    // Recovery has not produced a new channel yet.
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                };
                service.set_rpc_fd(fd);
                // Leave when stopped, or when the session no longer publishes this channel
                // (recovery is replacing it).
                let leave = || service.stop.is_requested() || session.listener_fd().map(|(_, g)| g) != Some(generation);
                let mut t = SessionTransport {
                    inner: FastRpcTransport::for_kernel(service.sys(), fd, service.kernel_abi(), &leave),
                    stop: &service.stop,
                };
                session.set_listener_serving(generation);
                let outcome = service.serve(&mut t, &mut buffers.as_buffers());
                session.set_listener_serving(0);
                served = Some(generation);
                match outcome {
                    ServeOutcome::Stopped => break outcome,
                    other => {
                        log::info!("reverse: channel generation {generation} ended ({other:?}); waiting for recovery");
                        // The channel is unusable whatever ended it: the session must rebuild it.
                        session.report_restart(generation);
                        let released = service.end_session();
                        log::debug!("reverse: session end released {released:?}");
                    }
                }
            };
            session.set_listener_thread(0);
            outcome
        })?;
        Ok(ServiceHandle { service: self, thread: Some(thread) })
    }
}

/// The listener transport of a session: a `next2` abandoned because the session stopped
/// publishing this channel (recovery is replacing it) ends the loop as a DSP restart would, so
/// the thread goes on to the next channel; abandoned because of a stop, it ends the loop.
struct SessionTransport<'a, S: Syscalls> {
    inner: FastRpcTransport<'a, S>,
    stop: &'a super::StopSignal,
}

impl<S: Syscalls> super::ListenerTransport for SessionTransport<'_, S> {
    fn next2(
        &mut self,
        send: &hexrpc_drivers::listener::listener_next2_in,
        reply: &[u8],
        header: &mut hexrpc_drivers::listener::listener_next2_out,
        request: &mut [u8],
    ) -> Result<(), hexrpc_drivers::Error> {
        match self.inner.next2(send, reply, header, request) {
            Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::EINTR)) if !self.stop.is_requested() => {
                Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::ECONNRESET))
            }
            r => r,
        }
    }

    fn get_in_bufs2(&mut self, ctx: u32, offset: u32, rest: &mut [u8]) -> Result<i32, hexrpc_drivers::Error> {
        self.inner.get_in_bufs2(ctx, offset, rest)
    }
}
