//! The DSP's dynamic loader as a session drives it: remotectl open/close (handle 0), the
//! session's table of open libraries (its slots and limits) and the registry that serves the
//! images. The [`Library`](super::library::Library) handle and the session's open/close are
//! built on this in `library`.

use core::fmt::Write as _;

use hexrpc_bsp::Board;
use hexrpc_drivers::{adsprpc, listener, Fd, Syscalls};

use crate::call::Call;
use crate::driver;
use crate::error::{Cause, HalError, Stage};
use crate::image::LibraryImage;

/// Most libraries open at once on one session: 256, so that a model with hundreds of distinct
/// kernels (one library each, plus its batch libraries) keeps every library open instead of
/// reopening them in turn. The table is a fixed array inside the [`Session`](crate::Session) (no allocation):
/// each slot is about 72 bytes, about 18 KiB in all; a further open fails with [`Cause::Full`].
/// The runtime's reverse file service holds one image per open library and follows this figure
/// (`hexrpc_runtime::reverse::policy::MAX_IMAGES`).
///
/// # What bounds the count on a device
///
/// Nothing we could read limits the number of libraries (remote handles) one DSP process has
/// open; the figure here is hexrpc's own.
///
/// * The kernel driver keeps no table of remote handles. In the downstream driver
///   (`drivers/char/adsprpc.c`, the comma three's sdm845 kernel, commaai/agnos-kernel-sdm845)
///   the invoke's handle is a 32-bit value passed to the DSP in the message;
///   `FASTRPC_STATIC_HANDLE_MAX` (20) only separates static handles for the profiling counters,
///   and the fixed tables are per channel or global, not per library: `FASTRPC_CTX_MAX` (256
///   calls in flight across all processes), `NUM_SESSIONS` (9 context banks), `M_FDLIST` (16).
/// * The FastRPC user library (quic/fastrpc `src/fastrpc_apps_user.c`) keeps its open handles
///   in a linked list (`struct handle_info` nodes allocated per open), with no count limit.
/// * On the DSP each loaded library takes memory in the user process: its image is loaded into
///   the process's heap, which starts from the memory donated at INIT (downstream:
///   `max(3 MiB, 4 x shell size)` rounded to 1 MiB; quic/fastrpc: `MIN_PD_INITMEM_SIZE` 3 MiB
///   to `MAX_PD_INITMEM_SIZE` 200 MiB) and grows through the reverse `apps_mem` service. A
///   tinygrad kernel library is a few KiB to a few tens of KiB, so hundreds fit. The DSP's
///   loader is closed source; any table limit of its own is not known, and would show up as a
///   refused open ([`Cause::Refused`], typically `AEE_EOUTOFHANDLES` or `AEE_ENOMEMORY`).
pub const MAX_LIBRARIES: usize = 256;
/// Longest library name (the unique name the DSP fetches, `NAME-SEQ`).
pub const MAX_NAME: usize = 48;
/// Bytes of DSP error text kept from a failed library open.
pub const DLERROR_LEN: usize = 256;

/// Where library images are published so the DSP can fetch them by name: the reverse file
/// service implements it (it serves each image from memory under its unique name).
pub trait ImageRegistry: Sync {
    /// Makes `image` available under `name` until [`withdraw`](ImageRegistry::withdraw).
    /// Returns false if the registry refuses (full, duplicate name).
    fn publish(&self, name: &str, image: LibraryImage) -> bool;
    /// Removes the image published under `name`.
    fn withdraw(&self, name: &str);
}

pub(super) struct LibSlot {
    pub(super) name: heapless::String<MAX_NAME>,
    pub(super) remote: u32,
    /// The library keeps lease mappings across calls (opened with the map cache).
    pub(super) map_cache: bool,
    /// The call it gets after each open: an index in the session's setup table
    /// ([`crate::LibrarySetup`]).
    pub(super) setup: Option<u8>,
}

/// The method a library built with the map cache answers with a release (launch ABI method 4,
/// `docs/entry-abi.md`): pra 0 holds a u32 count C and C u32 lease ids; C = 0 releases every
/// cached mapping. `hexrpc-runtime`'s launch ABI table asserts that it names the same method.
pub const MAP_CACHE_RELEASE_METHOD: u8 = 4;
/// Most lease ids one release names (the runtime's table asserts the same figure).
pub const MAP_CACHE_RELEASE_IDS: usize = 64;

// The table lives inside every `Session` (and is moved with it): it must stay small.
const _: () = assert!(core::mem::size_of::<[Option<LibSlot>; MAX_LIBRARIES]>() <= 20 * 1024);

fn le32(b: &[u8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}
/// remotectl open (handle 0, method 0): `file:///NAME?entry&_modver=1.0&_dom=cdsp`.
pub(super) fn remotectl_open<S: Syscalls>(sys: &S, board: &Board, fd: Fd, name: &str) -> Result<u32, HalError> {
    let st = Stage::LibraryOpen;
    let mut uri = heapless::String::<128>::new();
    write!(uri, "file:///{name}?entry&_modver=1.0&_dom=cdsp\0").map_err(|_| HalError::new(st, Cause::Invalid))?;
    let mut prim_in = [0u8; 8];
    prim_in[..4].copy_from_slice(&(uri.len() as u32).to_le_bytes());
    prim_in[4..].copy_from_slice(&(DLERROR_LEN as u32).to_le_bytes());
    let mut prim_out = [0u8; 8];
    let mut dlerror = [0u8; DLERROR_LEN];
    {
        let mut args = Call::<'_, 4>::new(listener::REMOTECTL_OPEN.method()).map_err(|_| HalError::new(st, Cause::Invalid))?;
        args.input(&prim_in)
            .and_then(|a| a.input(uri.as_bytes()))
            .and_then(|a| a.output(&mut prim_out))
            .and_then(|a| a.output(&mut dlerror))
            .map_err(|_| HalError::new(st, Cause::Invalid))?;
        driver::invoke(sys, board, fd, adsprpc::REMOTECTL_HANDLE, &mut args).map_err(|e| HalError::sys(st, e))?;
    }
    let handle = le32(&prim_out[..4]);
    let nerr = le32(&prim_out[4..]);
    if nerr != 0 {
        // The reason travels with the error (typed), not only in the log.
        let refusal = crate::error::Refusal::new(nerr, &dlerror);
        log::warn!("DSP refused to open {name}: {nerr} ({})", refusal.reason());
        return Err(HalError::new(st, Cause::Refused(refusal)));
    }
    Ok(handle as u32)
}

/// remotectl close (handle 0, method 1).
pub(super) fn remotectl_close<S: Syscalls>(sys: &S, board: &Board, fd: Fd, handle: u32) -> Result<(), HalError> {
    let st = Stage::LibraryClose;
    let mut prim_in = [0u8; 8];
    prim_in[..4].copy_from_slice(&handle.to_le_bytes());
    prim_in[4..].copy_from_slice(&(DLERROR_LEN as u32).to_le_bytes());
    let mut prim_out = [0u8; 8];
    let mut dlerror = [0u8; DLERROR_LEN];
    {
        let mut args = Call::<'_, 3>::new(listener::REMOTECTL_CLOSE.method()).map_err(|_| HalError::new(st, Cause::Invalid))?;
        args.input(&prim_in)
            .and_then(|a| a.output(&mut prim_out))
            .and_then(|a| a.output(&mut dlerror))
            .map_err(|_| HalError::new(st, Cause::Invalid))?;
        driver::invoke(sys, board, fd, adsprpc::REMOTECTL_HANDLE, &mut args).map_err(|e| HalError::sys(st, e))?;
    }
    match le32(&prim_out[..4]) {
        0 => Ok(()),
        nerr => Err(HalError::new(st, Cause::Dsp(nerr))),
    }
}
