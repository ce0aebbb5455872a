//! Library models and the hostile DSP: registered models, a model put into a DSP process
//! without reverse traffic, and raw reverse requests a test sends to the host's listener.

use std::sync::Arc;
use std::time::Duration;

use hexrpc_drivers::{Fd, Scalars};

use super::Bench;
use crate::dsp::{self, ReverseError};
use crate::entry::LibraryModel;
use crate::state::LoadedLib;
use crate::wire;

/// A raw reverse request for the hostile-DSP mode: any handle, scalars word and payload bytes,
/// optionally with a `bufsLenReq` that lies about the payload size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReverseRequest {
    /// Reverse handle (0 = apps_remotectl, or a key the host returned).
    pub handle: u32,
    /// Scalars word.
    pub sc: u32,
    /// Request payload (normally packed with [`wire::pack_request`]).
    pub payload: Vec<u8>,
    /// `bufsLenReq` to report instead of the payload length.
    pub claimed_len: Option<i32>,
}

impl ReverseRequest {
    /// A well-formed request: `ins` and `out_lens` packed per reverse-rpc.md 2.3.
    pub fn packed(handle: u32, sc: Scalars, ins: &[&[u8]], out_lens: &[u32]) -> ReverseRequest {
        ReverseRequest { handle, sc: sc.raw(), payload: wire::pack_request(ins, out_lens), claimed_len: None }
    }

    /// Any bytes.
    pub fn raw(handle: u32, sc: u32, payload: Vec<u8>) -> ReverseRequest {
        ReverseRequest { handle, sc, payload, claimed_len: None }
    }
}

/// The host's answer to a reverse request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReverseReply {
    /// `prevResult`.
    pub result: i32,
    /// The reply payload (`prevbufsLen` bytes of the next `next2`'s second input).
    pub payload: Vec<u8>,
}

impl ReverseReply {
    /// The output buffers, checked against the lengths that were asked for.
    pub fn outputs(&self, out_lens: &[u32]) -> Result<Vec<Vec<u8>>, wire::WireError> {
        wire::unpack_reply(&self.payload, out_lens)
    }
}

/// A posted reverse request, to wait for with [`Bench::await_reverse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReverseTicket(u64);

impl Bench {
    // ---- libraries ----

    /// Registers the model of library `name`: the `NAME` of `file:///NAME?...` URIs, or the tag
    /// inside an image made by [`elf::library_image`](crate::elf::library_image) (so a host that
    /// publishes the image under a unique name still loads this model). The image bytes
    /// themselves come from the host through the reverse file service at load time.
    pub fn register_library(&self, name: &str, model: LibraryModel) {
        self.lock().libraries.insert(name.into(), Arc::new(model));
    }

    /// Puts the registered library model `name` into the DSP process behind `rpc_fd` as if a
    /// remotectl open had loaded it (no reverse traffic: for kernel tests that need a DSP-side
    /// observer without a listener). Returns the library handle.
    pub fn preload_library(&self, rpc_fd: Fd, name: &str) -> Option<u32> {
        let mut st = self.lock();
        let pid = self.pid_of(&st, rpc_fd)?;
        let model = st.libraries.get(name)?.clone();
        let p = st.procs.get_mut(&pid)?;
        let h = p.next_lib;
        p.next_lib += 0x10;
        p.libs.insert(h, LoadedLib { name: name.to_string(), model, cache: Default::default() });
        Some(h)
    }

    /// Makes the DSP process behind `rpc_fd` send `req` to the host's listener (queued until a
    /// thread sits in `next2`).
    pub fn post_reverse(&self, rpc_fd: Fd, req: ReverseRequest) -> Result<ReverseTicket, ReverseError> {
        let mut st = self.lock();
        let pid = self.pid_of(&st, rpc_fd).ok_or(ReverseError::NoProcess)?;
        let id = dsp::post(&mut st, pid, req.handle, req.sc, req.payload, req.claimed_len).ok_or(ReverseError::NoProcess)?;
        drop(st);
        self.sh.cv.notify_all();
        Ok(ReverseTicket(id))
    }

    /// Waits for the answer to a posted request; on timeout the request is withdrawn.
    pub fn await_reverse(&self, t: ReverseTicket, timeout: Duration) -> Result<ReverseReply, ReverseError> {
        dsp::await_ticket(&self.sh, t.0, timeout).map(|(result, payload)| ReverseReply { result, payload })
    }

    /// [`post_reverse`](Self::post_reverse) then [`await_reverse`](Self::await_reverse).
    pub fn reverse_call(&self, rpc_fd: Fd, req: ReverseRequest, timeout: Duration) -> Result<ReverseReply, ReverseError> {
        let t = self.post_reverse(rpc_fd, req)?;
        self.await_reverse(t, timeout)
    }
}
