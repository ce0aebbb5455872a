//! The reverse-RPC listener (`adsp_listener`, static handle 3) message headers.
//!
//! Origin: quic/fastrpc `src/adsp_listener_stub.c`, `inc/listener_buf.h`. The listener is an
//! ordinary INVOKE on handle 3 that blocks until the DSP has a request: `next2` sends the previous
//! request's result and reply bytes and receives the next request; `get_in_bufs2` fetches the
//! rest of a request that did not fit. Payload layouts (packed in/out buffers, 8-byte alignment
//! relative to the payload start) are parsed by the runtime's reverse service.
#![allow(non_camel_case_types, non_snake_case)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{abi_layout, Scalars};

/// `init2` (method 3, no arguments).
pub const LISTENER_INIT2: Scalars = Scalars::from_raw(0x0300_0000);
/// `next2` (method 4, 2 in, 2 out): `REVERSE_RPC_SCALAR`.
pub const LISTENER_NEXT2: Scalars = Scalars::from_raw(0x0402_0200);
/// `get_in_bufs2` (method 5, 1 in, 2 out).
pub const LISTENER_GET_IN_BUFS2: Scalars = Scalars::from_raw(0x0501_0200);
/// adsp_current_process1 `exit` (handle 4, method 2, no arguments).
pub const CURRENT_PROCESS_EXIT: Scalars = Scalars::from_raw(0x0200_0000);
/// remotectl `open` (handle 0, method 0, 2 in, 2 out). The same shape is apps_remotectl open
/// when it arrives from the DSP.
pub const REMOTECTL_OPEN: Scalars = Scalars::from_raw(0x0002_0200);
/// remotectl `close` (handle 0, method 1, 1 in, 2 out).
pub const REMOTECTL_CLOSE: Scalars = Scalars::from_raw(0x0101_0200);

/// First input of `next2`: the previous request's result and the receive capacity.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct listener_next2_in {
    /// `ctx` of the request being answered (0 for none).
    pub prevCtx: u32,
    /// Its result (0 or an AEE code; -1 for "no previous request").
    pub prevResult: i32,
    /// Bytes of reply payload in the second input.
    pub prevbufsLen: u32,
    /// Capacity of the request buffer (second output).
    pub bufsLen: u32,
}
abi_layout!(listener_next2_in, "listener_next2_in", size = 16, align = 4, { prevCtx @ 0, prevResult @ 4, prevbufsLen @ 8, bufsLen @ 12 });

/// First output of `next2`: the header of the next request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct listener_next2_out {
    /// Request context, echoed back as `prevCtx`.
    pub ctx: u32,
    /// Reverse handle (0 = apps_remotectl, or a key it returned).
    pub handle: u32,
    /// Scalars word of the request.
    pub sc: u32,
    /// Full payload size; more than `bufsLen` means the rest must be fetched.
    pub bufsLenReq: i32,
}
abi_layout!(listener_next2_out, "listener_next2_out", size = 16, align = 4, { ctx @ 0, handle @ 4, sc @ 8, bufsLenReq @ 12 });

/// Input of `get_in_bufs2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct listener_get_in_bufs2_in {
    /// The request's `ctx`.
    pub ctx: u32,
    /// Where in the payload to continue.
    pub offset: u32,
    /// Capacity of the output buffer.
    pub bufsLen: u32,
}
abi_layout!(listener_get_in_bufs2_in, "listener_get_in_bufs2_in", size = 12, align = 4, { ctx @ 0, offset @ 4, bufsLen @ 8 });
