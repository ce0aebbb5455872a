//! The hardened reverse file service: what answers the DSP when it calls back into the host
//! (`adsp_listener` on static handle 3, serving apps_remotectl, apps_std and apps_mem).
//!
//! # How it works
//!
//! The HAL's listener stage has sent `init2`. The loop ([`ReverseService::serve`](crate::reverse::ReverseService::serve)) then calls
//! `next2` with the previous request's result and reply, blocks until the DSP sends a request,
//! fetches an oversize payload with `get_in_bufs2` into fixed capacity (or refuses it with
//! `AEE_EBADSIZE`), parses it ([`wire::Request`](crate::reverse::wire::Request)), dispatches by (handle, method) — never by the
//! scalars word alone — and packs the reply in place ([`wire::Reply`](crate::reverse::wire::Reply)); no allocation on this
//! path. Handle 0 is apps_remotectl, whose `open` of `apps_std` / `apps_mem` returns opaque,
//! generation-checked module keys; any other handle is a key it returned or
//! `AEE_ENOSUCHMOD`.
//!
//! Served apps_std methods: `fopen` (0), `fclose` (3), `fread` (4), `ftell` (8), `fseek` (9),
//! `flen` (10), `rewind` (11), `print_string` (15, logged escaped), `fopen_with_env` (19),
//! `fileExists` (22) and the extended `stat` (31 behind method 31, checked against the first
//! u32 of primIn). These are what a loader needs to find, size and read a library. Everything
//! else — in particular anything that writes, renames, removes, lists directories, touches the
//! environment or hands out a host fd (`fopen_fd`, `fopen_with_env_fd`, `fdopen_decrypt`) —
//! answers `AEE_EUNSUPPORTED`. apps_mem serves `request_map64` (kernel-allocated pages,
//! `ADSP_MMAP_ADD_PAGES` only: the heap flags are refused before the kernel, see
//! [`REFUSED_MAP_FLAGS`](crate::reverse::REFUSED_MAP_FLAGS); within [`Limits::max_dsp_map_bytes`](hexrpc_bsp::Limits)) and `request_unmap64` (only maps it
//! made); both go through the drivers' typed `adsprpc::mmap` / `munmap`.
//!
//! Policy ([`FilePolicy`](crate::reverse::FilePolicy), see [`policy`](crate::reverse::policy) for the path rules and the resolution by descriptors):
//! allowlisted directories plus registered in-memory images, read-only opens, a cap per request
//! and per open file, a bounded table of virtual FILE handles from 100 with per-handle offsets,
//! handles and module keys that carry generations (see [`session`](crate::reverse::session)); closing a
//! module closes the files opened through it.
//! Dropping the service (or [`ReverseService::end_session`](crate::reverse::ReverseService::end_session)) closes every file and releases
//! every DSP map.
//!
//! # tinygrad's listener gaps (reverse-rpc.md §6) and how they are closed
//!
//! | gap | closed by |
//! |---|---|
//! | 1 lengths trusted | [`wire::Request::parse`](crate::reverse::wire::Request::parse) checks every length against the received bytes; replies are laid out in a fixed buffer ([`wire::Reply`](crate::reverse::wire::Reply)) or refused |
//! | 2 bufsLenReq ignored | `get_in_bufs2` into `ListenerBuffers::large`, refused above it or the request limit |
//! | 3 absolute / zero-length alignment | alignment relative to the payload start, none for zero-length buffers |
//! | 4 handle ignored | dispatch by (handle, method); unknown handle → `AEE_ENOSUCHMOD` |
//! | 5 arbitrary paths | [`FilePolicy`](crate::reverse::FilePolicy): allowlist, no traversal, paths resolved component by component from a directory descriptor with `O_NOFOLLOW` (no rename or link-swap race leaves the allowlist) |
//! | 6 raw host fds | virtual handles from 100 in a bounded table; generations make a stale handle fail, never reach another file |
//! | 7 unbounded reads, stale bytes | per-request and per-file caps; unwritten reply bytes are zeroed |
//! | 8 signed fields as unsigned | `fseek` offset is an `i32`; SET/CUR/END bounds-checked |
//! | 9 unknown sc kills the thread | `AEE_EUNSUPPORTED` / `AEE_EBADPARM` answers; handlers never panic |
//! | 10 status semantics | AEE codes per refusal ([`RequestError`](crate::reverse::RequestError)); no reply data on error |
//! | 11 no stop / join, busy retry | [`StopSignal`](crate::reverse::StopSignal) + the seam's interrupt; join; quic's next2 error policy |
//! | 12 shared state without locks, one image open | locks around images and session, never held across file I/O or an ioctl; per-handle offsets |
//! | 13 unlimited DSP maps | flag allowlist, size budget, exact-match unmap of own maps only, release at end |
//! | 14 greeting fields unwritten | remotectl open writes handle and dlErr, zeroes the error string |
//!
//! # Where the model leaks
//!
//! The request buffer is copied by the kernel from DSP memory before we parse it, so it cannot
//! change under the parser; but the DSP chooses every byte, so nothing in it is trusted. Host
//! files can change between `fstat` and `pread` (sizes are those of the open); a directory moved
//! out of the allowlist after a lookup opened it serves that one lookup (see
//! [`policy`](crate::reverse::policy)).

mod error;
mod listener;
mod metrics;
pub mod policy;
mod service;
pub mod session;
#[cfg(feature = "std")]
mod thread;
pub mod wire;

pub use error::RequestError;
pub use listener::{
    FastRpcTransport, ListenerBuffers, ListenerTransport, LoopState, ServeOutcome, MAX_INTERRUPTED_RETRIES, NEXT2_BADSTATE,
};
pub use metrics::{Metrics, MetricsSnapshot, APPS_MEM_METHODS, APPS_STD_METHODS, METHOD_SLOTS, REMOTECTL_METHODS};
pub use policy::{FilePolicy, ImageBytes, ImageError, PolicyError};
pub use service::{
    check_mode, Escaped, Released, RequestTap, Response, ReverseService, SessionCounts, StopSignal, ALLOWED_MAP_FLAGS, REFUSED_MAP_FLAGS,
};
pub use session::{Module, FILE_HANDLE_BASE};
#[cfg(feature = "std")]
pub use thread::{OwnedBuffers, ServiceHandle, StopError, DEFAULT_REQUEST_CAPACITY, DEFAULT_STOP_TIMEOUT, REPLY_OVERHEAD};
