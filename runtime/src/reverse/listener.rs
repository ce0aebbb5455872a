//! The listener loop: `next2` on static handle 3 with the previous reply, receive the next
//! request (fetching an oversize one with `get_in_bufs2` into fixed capacity), dispatch, repeat.
//!
//! The transport is a trait ([`ListenerTransport`]) so that the loop's policy can be tested
//! without a kernel; [`FastRpcTransport`] is the real one, on the drivers' typed `invoke`.

use hexrpc_bsp::KernelAbi;
use hexrpc_drivers::adsprpc::{self, FASTRPC_STATIC_HANDLE_LISTENER};
use hexrpc_drivers::aee::{AEE_EFAILED, AEE_EINTERRUPTED, DSP_AEE_EOFFSET};
use hexrpc_drivers::listener::{listener_get_in_bufs2_in, listener_next2_in, listener_next2_out};
use hexrpc_drivers::upstream;
use hexrpc_drivers::{BorrowedFd, Errno, Error, Fd, Scalars, Syscalls};
use hexrpc_hal::Call;
use zerocopy::IntoBytes;

use super::{RequestError, ReverseService};

/// `next2` returned `DSP_AEE_EOFFSET + AEE_EBADSTATE`: the DSP process is exiting.
pub const NEXT2_BADSTATE: i32 = (DSP_AEE_EOFFSET + 0x0D) as i32;

/// Consecutive `AEE_EINTERRUPTED` answers after which the loop gives up (quic retries forever;
/// a bound keeps a misbehaving DSP from spinning a core without end).
pub const MAX_INTERRUPTED_RETRIES: u32 = 100_000;

/// How the listener talks to the kernel: the two adsp_listener calls.
pub trait ListenerTransport {
    /// `next2`: sends `send` and the previous reply, receives the next request's header and
    /// up to `request.len()` bytes of its payload.
    fn next2(&mut self, send: &listener_next2_in, reply: &[u8], header: &mut listener_next2_out, request: &mut [u8]) -> Result<(), Error>;

    /// `get_in_bufs2`: fetches the payload of request `ctx` from byte `offset` into `rest`;
    /// returns the payload size the DSP reports again.
    fn get_in_bufs2(&mut self, ctx: u32, offset: u32, rest: &mut [u8]) -> Result<i32, Error>;
}

/// The real transport: `FASTRPC_IOCTL_INVOKE` on [`FASTRPC_STATIC_HANDLE_LISTENER`].
///
/// An interrupted `next2` / `get_in_bufs2` is resumed at once (the driver parked it with this
/// call's buffers), unless the transport's `abandon` condition holds: then the drivers retire
/// the descriptor before `EINTR` is returned, so the parked call can never write into buffers
/// that are gone, and the channel is finished (see `hexrpc_drivers::adsprpc::invoke_abandonable`).
///
/// On the upstream driver ([`for_kernel`](Self::for_kernel) with [`KernelAbi::Upstream`]) the
/// same calls go out as upstream INVOKEs; an interrupted one is not resumable there and returns
/// `EINTR`.
pub struct FastRpcTransport<'s, S: Syscalls + ?Sized> {
    sys: &'s S,
    fd: Fd,
    /// The FastRPC driver the descriptor belongs to.
    abi: KernelAbi,
    /// Set when the transport may abandon (retire) the descriptor: a borrow from its owner.
    owned: Option<(BorrowedFd<'s>, &'s dyn Fn() -> bool)>,
}

impl<'s, S: Syscalls + ?Sized> FastRpcTransport<'s, S> {
    /// The listener of the session on `fd` (init2 already sent); an interrupted call is always
    /// resumed.
    pub fn new(sys: &'s S, fd: Fd) -> Self {
        FastRpcTransport { sys, fd, abi: KernelAbi::DownstreamMsm, owned: None }
    }

    /// The listener on `fd` that abandons an interrupted call (retiring `fd`, which it borrows
    /// from its owner for that) when `abandon()` holds, e.g. once a stop was requested.
    pub fn with_abandon(sys: &'s S, fd: BorrowedFd<'s>, abandon: &'s dyn Fn() -> bool) -> Self {
        FastRpcTransport { sys, fd: fd.raw(), abi: KernelAbi::DownstreamMsm, owned: Some((fd, abandon)) }
    }

    /// [`with_abandon`](Self::with_abandon) on the FastRPC driver `abi` (the board's). Upstream,
    /// an interrupted call returns `EINTR` (nothing is retired: the driver never resumes it).
    pub fn for_kernel(sys: &'s S, fd: BorrowedFd<'s>, abi: KernelAbi, abandon: &'s dyn Fn() -> bool) -> Self {
        FastRpcTransport { sys, fd: fd.raw(), abi, owned: Some((fd, abandon)) }
    }

    fn invoke<const CAP: usize>(&self, call: &mut Call<'_, CAP>) -> Result<(), Error> {
        if self.abi == KernelAbi::Upstream {
            let fd = upstream::FastrpcFd::from_raw(self.fd);
            return call
                .with_upstream(|up| upstream::invoke(self.sys, fd, FASTRPC_STATIC_HANDLE_LISTENER, up))
                .map_err(|_| Error::Invalid)?;
        }
        call.with_downstream(|args| match self.owned {
            Some((fd, abandon)) => adsprpc::invoke_abandonable(self.sys, fd, FASTRPC_STATIC_HANDLE_LISTENER, args, abandon),
            None => adsprpc::invoke(self.sys, self.fd, FASTRPC_STATIC_HANDLE_LISTENER, args),
        })
        .map_err(|_| Error::Invalid)?
    }
}

impl<S: Syscalls + ?Sized> ListenerTransport for FastRpcTransport<'_, S> {
    fn next2(&mut self, send: &listener_next2_in, reply: &[u8], header: &mut listener_next2_out, request: &mut [u8]) -> Result<(), Error> {
        let mut args = Call::<'_, 4>::new(hexrpc_drivers::listener::LISTENER_NEXT2.method()).map_err(|_| Error::Invalid)?;
        args.input(send.as_bytes()).map_err(|_| Error::Invalid)?;
        args.input(reply).map_err(|_| Error::Invalid)?;
        args.output(header.as_mut_bytes()).map_err(|_| Error::Invalid)?;
        args.output(request).map_err(|_| Error::Invalid)?;
        debug_assert_eq!(args.scalars(), hexrpc_drivers::listener::LISTENER_NEXT2);
        self.invoke(&mut args)
    }

    fn get_in_bufs2(&mut self, ctx: u32, offset: u32, rest: &mut [u8]) -> Result<i32, Error> {
        let len = u32::try_from(rest.len()).map_err(|_| Error::Invalid)?;
        let send = listener_get_in_bufs2_in { ctx, offset, bufsLen: len };
        let mut req_len = [0u8; 4];
        let mut args = Call::<'_, 3>::new(hexrpc_drivers::listener::LISTENER_GET_IN_BUFS2.method()).map_err(|_| Error::Invalid)?;
        args.input(send.as_bytes()).map_err(|_| Error::Invalid)?;
        args.output(&mut req_len).map_err(|_| Error::Invalid)?;
        args.output(rest).map_err(|_| Error::Invalid)?;
        debug_assert_eq!(args.scalars(), hexrpc_drivers::listener::LISTENER_GET_IN_BUFS2);
        self.invoke(&mut args)?;
        Ok(i32::from_le_bytes(req_len))
    }
}

/// The loop's fixed buffers, chosen by the caller (static arrays without `std`).
pub struct ListenerBuffers<'b> {
    /// Receives requests in `next2` (its length is the `bufsLen` sent).
    pub request: &'b mut [u8],
    /// Holds a request larger than `request`, fetched with `get_in_bufs2`; larger ones are
    /// refused with `AEE_EBADSIZE`. May be empty (then every oversize request is refused).
    pub large: &'b mut [u8],
    /// The packed reply of the previous request.
    pub reply: &'b mut [u8],
}

/// Why [`ReverseService::serve`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ServeOutcome {
    /// A stop was requested.
    Stopped,
    /// The driver reported a DSP restart: the HAL must recover the session, call
    /// [`ReverseService::end_session`] and [`ReverseService::set_rpc_fd`], send init2 again and serve
    /// again.
    DspRestarted,
    /// `next2` answered `DSP_AEE_EOFFSET + AEE_EBADSTATE`: the DSP process is exiting.
    DspExiting,
    /// `next2` failed twice in a row (or was interrupted by the DSP too often): the error.
    Failed(Error),
}

/// The state carried from one `next2` to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopState {
    prev_ctx: u32,
    prev_result: i32,
    prev_len: usize,
    failures: u32,
    interrupted: u32,
}

impl Default for LoopState {
    fn default() -> Self {
        Self::new()
    }
}

impl LoopState {
    /// The state before the first `next2`: no previous request (ctx 0, result -1).
    pub const fn new() -> Self {
        LoopState { prev_ctx: 0, prev_result: -1, prev_len: 0, failures: 0, interrupted: 0 }
    }

    /// The result that will be sent with the next `next2`.
    pub fn pending_result(&self) -> i32 {
        self.prev_result
    }

    fn answer(&mut self, ctx: u32, status: i32, len: usize) {
        self.prev_ctx = ctx;
        self.prev_result = status;
        self.prev_len = if status == 0 { len } else { 0 };
    }
}

impl<S: Syscalls> ReverseService<'_, S> {
    /// One turn of the loop: a `next2` (sending the previous answer), then, if a request came,
    /// its dispatch. `Some` when the loop must end.
    pub fn run_once<T: ListenerTransport>(&self, t: &mut T, bufs: &mut ListenerBuffers<'_>, st: &mut LoopState) -> Option<ServeOutcome> {
        if self.stop.is_requested() {
            return Some(ServeOutcome::Stopped);
        }
        let capacity = u32::try_from(bufs.request.len()).unwrap_or(u32::MAX);
        let prev_len = st.prev_len.min(bufs.reply.len());
        let send = listener_next2_in { prevCtx: st.prev_ctx, prevResult: st.prev_result, prevbufsLen: prev_len as u32, bufsLen: capacity };
        let mut header = listener_next2_out::default();
        let request = &mut bufs.request[..capacity as usize];
        match t.next2(&send, &bufs.reply[..prev_len], &mut header, request) {
            Ok(()) => {
                st.failures = 0;
                st.interrupted = 0;
            }
            Err(e) if e.is_dsp_restart() => return Some(ServeOutcome::DspRestarted),
            Err(Error::Os(Errno::EINTR)) => {
                // The transport abandoned the call (a stray signal is resumed inside it): a stop,
                // or a transport that stopped resuming for its own reason.
                return Some(if self.stop.is_requested() { ServeOutcome::Stopped } else { ServeOutcome::Failed(Error::Os(Errno::EINTR)) });
            }
            Err(Error::Returned(AEE_EINTERRUPTED)) => {
                st.interrupted += 1;
                if st.interrupted >= MAX_INTERRUPTED_RETRIES {
                    return Some(ServeOutcome::Failed(Error::Returned(AEE_EINTERRUPTED)));
                }
                *st = LoopState { interrupted: st.interrupted, ..LoopState::new() };
                return None;
            }
            Err(Error::Returned(NEXT2_BADSTATE)) => return Some(ServeOutcome::DspExiting),
            Err(e) => {
                self.metrics().transport_error();
                st.failures += 1;
                if st.failures >= 2 {
                    return Some(ServeOutcome::Failed(e));
                }
                let code = match e {
                    Error::Returned(v) => v,
                    _ => AEE_EFAILED,
                };
                st.prev_result = code;
                st.prev_len = 0;
                return None;
            }
        }
        let ctx = header.ctx;
        let sc = Scalars::from_raw(header.sc);
        let status = match self.receive(t, bufs, &header) {
            Ok(len) => {
                let payload = if len <= bufs.request.len() { &bufs.request[..len] } else { &bufs.large[..len] };
                let r = self.dispatch(header.handle, sc, payload, bufs.reply);
                st.answer(ctx, r.status, r.reply_len);
                return None;
            }
            Err(Received::Refused(e)) => {
                self.metrics().request(None, sc.method() as u32);
                self.metrics().outcome(Err(e));
                e.aee()
            }
            Err(Received::Restart) => return Some(ServeOutcome::DspRestarted),
        };
        st.answer(ctx, status, 0);
        None
    }

    /// Makes the whole payload of the request `header` available; returns its length (in
    /// `bufs.request` if it fits there, else in `bufs.large`).
    fn receive<T: ListenerTransport>(
        &self,
        t: &mut T,
        bufs: &mut ListenerBuffers<'_>,
        header: &listener_next2_out,
    ) -> Result<usize, Received> {
        let want = usize::try_from(header.bufsLenReq).map_err(|_| Received::Refused(RequestError::BadSize))?;
        let small = bufs.request.len();
        if want <= small {
            return Ok(want);
        }
        if want > bufs.large.len() || want > self.policy().limits().max_reverse_request as usize {
            return Err(Received::Refused(RequestError::BadSize));
        }
        bufs.large[..small].copy_from_slice(bufs.request);
        let offset = u32::try_from(small).map_err(|_| Received::Refused(RequestError::BadSize))?;
        match t.get_in_bufs2(header.ctx, offset, &mut bufs.large[small..want]) {
            Ok(again) if again == header.bufsLenReq => Ok(want),
            Ok(_) => Err(Received::Refused(RequestError::BadParm)),
            Err(e) if e.is_dsp_restart() => Err(Received::Restart),
            Err(e) => {
                log::warn!("reverse: get_in_bufs2 failed: {e}");
                self.metrics().transport_error();
                Err(Received::Refused(RequestError::BadParm))
            }
        }
    }

    /// Runs the loop until a stop request, a DSP restart, the DSP's exit or a repeated transport
    /// failure. Records the calling thread so that a stopper can interrupt its blocked `next2`.
    /// Handler errors never end the loop: they are answered as error statuses.
    pub fn serve<T: ListenerTransport>(&self, t: &mut T, bufs: &mut ListenerBuffers<'_>) -> ServeOutcome {
        self.stop.set_thread(self.sys().thread_id());
        let mut st = LoopState::new();
        let outcome = loop {
            if let Some(o) = self.run_once(t, bufs, &mut st) {
                break o;
            }
        };
        self.stop.set_thread(0);
        outcome
    }
}

enum Received {
    Refused(RequestError),
    Restart,
}
