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
    /// Wakes the thread where a signal cannot (a blocking wait for the session's next channel).
    waker: Option<Box<dyn Fn() + Send + Sync>>,
}

impl<S: Syscalls + Send + Sync + 'static> ReverseService<'static, S> {
    /// Runs [`serve`](ReverseService::serve) on a new thread named `hexrpc-reverse`, on
    /// `channel` (a FastRPC fd with init2 already sent, shared with its owner; the thread keeps
    /// it open while it serves), with `buffers`. Clears an earlier stop request. A stop abandons
    /// a blocked `next2`, which retires `channel`.
    pub fn spawn(self: Arc<Self>, channel: Arc<hexrpc_hal::OwnedFd<S>>, mut buffers: OwnedBuffers) -> std::io::Result<ServiceHandle<S>> {
        self.stop.reset();
        let service = self.clone();
        let thread = std::thread::Builder::new().name("hexrpc-reverse".into()).spawn(move || {
            let stop = || service.stop.is_requested();
            service.set_rpc_fd(channel.raw());
            let outcome = match channel.as_fd() {
                Some(fd) => {
                    let mut t = FastRpcTransport::with_abandon(service.sys(), fd, &stop);
                    service.serve(&mut t, &mut buffers.as_buffers())
                }
                None => ServeOutcome::Failed(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::EBADF)),
            };
            // The DSP maps go back on the channel that made them, while it is still open here.
            let _ = service.end_session();
            service.set_rpc_fd(hexrpc_drivers::Fd(-1));
            outcome
        })?;
        Ok(ServiceHandle { service: self, thread: Some(thread), waker: None })
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
            if let Some(w) = &self.waker {
                w();
            }
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
    /// session through recoveries, one channel generation at a time: it leases the channel the
    /// session publishes (the descriptor number stays open while the lease lives, so nothing it
    /// sends can reach a later channel), serves it until the DSP side goes away or recovery
    /// stops publishing it, releases its files and DSP maps on that same channel, gives the
    /// lease back, and waits (blocking) for the next generation. It records itself as the
    /// session's listener thread so recovery can interrupt it, and tells the session when it
    /// ends (the session then needs recovery). Stop it with the returned handle.
    pub fn spawn_for_session(
        self: Arc<Self>,
        session: Arc<hexrpc_hal::Session<S>>,
        mut buffers: OwnedBuffers,
    ) -> std::io::Result<ServiceHandle<S>> {
        use hexrpc_hal::internal::ListenerPlumbing;
        self.stop.reset();
        let service = self.clone();
        let waker_session = session.clone();
        let thread = std::thread::Builder::new().name("hexrpc-reverse".into()).spawn(move || {
            session.listener_attach(service.sys().thread_id());
            let mut served: Option<u32> = None;
            let outcome = loop {
                if service.stop.is_requested() {
                    break ServeOutcome::Stopped;
                }
                // A blocking wait: recovery (or a stop) wakes it.
                let Some(ch) = session.listener_channel(served, LISTENER_WAIT) else { continue };
                let generation = ch.generation();
                served = Some(generation);
                let Some(fd) = ch.fd() else { continue };
                service.set_rpc_fd(ch.raw());
                // Leave when stopped, or when the session no longer publishes this channel.
                let leave = || service.stop.is_requested() || !ch.is_current();
                let mut t = SessionTransport {
                    inner: FastRpcTransport::with_abandon(service.sys(), fd, &leave),
                    stop: &service.stop,
                    abandoned: false,
                };
                let outcome = service.serve(&mut t, &mut buffers.as_buffers());
                if outcome != ServeOutcome::Stopped && !service.stop.is_requested() {
                    log::info!("reverse: channel generation {generation} ended ({outcome:?}); waiting for recovery");
                    // The channel is unusable whatever ended it: the session must rebuild it.
                    ch.report_lost();
                }
                // Files and DSP maps are released on the channel that made them, while the lease
                // keeps its number from being reused; then the lease goes back. A channel that
                // was retired (an abandoned call, or the session ended it under us) refers to
                // /dev/null now: its maps go with the file, and no MUNMAP is sent anywhere.
                if t.abandoned || ch.is_retired() {
                    service.set_rpc_fd(hexrpc_drivers::Fd(-1));
                }
                let released = service.end_session();
                log::debug!("reverse: generation {generation} released {released:?}");
                service.set_rpc_fd(hexrpc_drivers::Fd(-1));
                drop(ch);
                if outcome == ServeOutcome::Stopped {
                    break outcome;
                }
            };
            session.listener_detach();
            outcome
        })?;
        let waker: Box<dyn Fn() + Send + Sync> = Box::new(move || waker_session.wake_listener());
        Ok(ServiceHandle { service: self, thread: Some(thread), waker: Some(waker) })
    }
}

/// Longest blocking wait of a session listener for the next channel before it checks for a stop
/// again (a stop also wakes it at once).
const LISTENER_WAIT: Duration = Duration::from_millis(500);

/// The listener transport of a session: a `next2` abandoned because the session stopped
/// publishing this channel (recovery is replacing it) ends the loop as a DSP restart would, so
/// the thread goes on to the next channel; abandoned because of a stop, it ends the loop.
struct SessionTransport<'a, S: Syscalls> {
    inner: FastRpcTransport<'a, S>,
    stop: &'a super::StopSignal,
    /// Set once a call was abandoned: the descriptor is retired.
    abandoned: bool,
}

impl<S: Syscalls> super::ListenerTransport for SessionTransport<'_, S> {
    fn next2(
        &mut self,
        send: &hexrpc_drivers::listener::listener_next2_in,
        reply: &[u8],
        header: &mut hexrpc_drivers::listener::listener_next2_out,
        request: &mut [u8],
    ) -> Result<(), hexrpc_drivers::Error> {
        let r = self.inner.next2(send, reply, header, request);
        if r == Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::EINTR)) {
            self.abandoned = true;
            if !self.stop.is_requested() {
                return Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::ECONNRESET));
            }
        }
        r
    }

    fn get_in_bufs2(&mut self, ctx: u32, offset: u32, rest: &mut [u8]) -> Result<i32, hexrpc_drivers::Error> {
        let r = self.inner.get_in_bufs2(ctx, offset, rest);
        if r == Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::EINTR)) {
            self.abandoned = true;
        }
        r
    }
}
