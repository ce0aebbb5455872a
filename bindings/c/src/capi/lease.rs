//! Leases and arenas: allocating an ION buffer shared with the DSP, importing a dma-buf another
//! process owns, its memory here and whether it may be written, carving an arena into
//! sub-allocations (leases too), an arena's statistics, freeing.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::args::{free_handle, handle_value, new_handle, write_opt, write_out};
use super::last_error::run;
use super::types::*;
use crate::error::{hexrpc_status, Failure};
use crate::table::{self, Obj};

/// Allocates an ION buffer of at least `length` bytes (rounded up to a page), shared with the
/// DSP and mapped here. Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_lease_alloc(session: *mut hexrpc_session, length: usize, out: *mut *mut hexrpc_lease) -> hexrpc_status {
    run(|| {
        let alloc = || Ok(Obj::Lease(Arc::new(table::session(handle_value(session))?.alloc(length)?)));
        // SAFETY: the caller's contract.
        unsafe { new_handle(out, alloc) }
    })
}

/// Imports `length` bytes, from its start, of the dma-buf behind `fd`, a descriptor another
/// process or component owns (a camera frame another process shared over a UNIX socket with
/// `SCM_RIGHTS`, say), as a lease of `session`: its views go to launches and batches, and
/// `hexrpc_model_bind_input` binds a model input to it, with the buffer handed to the DSP in
/// place and none of it copied. `flags`: `HEXRPC_IMPORT_READ_ONLY` (0) or
/// `HEXRPC_IMPORT_READ_WRITE` (1); anything else is `HEXRPC_ERR_INVALID`.
///
/// `fd` stays the caller's: hexrpc duplicates it and closes only its duplicate (when the lease is
/// freed), so the caller may close `fd` as soon as this returns; the buffer stays valid for the
/// lease. A read-only import's memory (`hexrpc_lease_memory`) is mapped `PROT_READ` and must not
/// be written: a write faults (`SIGSEGV`). `hexrpc_lease_writable` tells the two apart.
/// Read-only does not stop a kernel that writes its input: neither FastRPC driver takes a
/// direction for a buffer. The buffer is shared memory: synchronising frames with its owner is
/// the caller's protocol.
///
/// Refused before any FastRPC call with `HEXRPC_ERR_INVALID`, the last error saying why: a
/// number that is not open (-1, a closed number), a descriptor that is not a dma-buf (a pipe, a
/// socket, a regular file), a `length` of 0 or past the buffer's size (both sizes named). The
/// session's IOVA budget is charged the whole buffer's size (the driver maps it whole). Free the
/// lease with `hexrpc_lease_free`; an import kept for a stream of frames costs nothing per frame
/// (see docs/import.md). Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_import(
    session: *mut hexrpc_session,
    fd: c_int,
    length: usize,
    flags: u32,
    out: *mut *mut hexrpc_lease,
) -> hexrpc_status {
    run(|| {
        let import = || {
            let writable = match flags {
                HEXRPC_IMPORT_READ_ONLY => false,
                HEXRPC_IMPORT_READ_WRITE => true,
                other => {
                    return Err(Failure::invalid(
                        "argument",
                        format!("import flags {other:#x}: use HEXRPC_IMPORT_READ_ONLY (0) or HEXRPC_IMPORT_READ_WRITE (1)"),
                    ))
                }
            };
            Ok(Obj::Lease(Arc::new(table::session(handle_value(session))?.import(fd, length, writable)?)))
        };
        // SAFETY: the caller's contract.
        unsafe { new_handle(out, import) }
    })
}

/// Writes 1 to `writable` if this process may write the lease's memory, 0 for a read-only import
/// (`HEXRPC_IMPORT_READ_ONLY`: mapped `PROT_READ`, a write faults). Allocations, arena
/// sub-allocations and read-write imports are writable. Thread-safe.
///
/// # Safety
/// `writable` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_lease_writable(lease: *mut hexrpc_lease, writable: *mut u32) -> hexrpc_status {
    run(|| {
        let l = table::lease(handle_value(lease))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(writable, u32::from(l.writable()), "writable") }
    })
}

/// The lease's memory in this process: its address and its length (the rounded-up size; an
/// import's imported length rounded up to a page). The memory is valid until the lease is freed
/// or its session closed; the DSP writes it during a launch. A read-only import's memory must
/// not be written (`hexrpc_lease_writable`). Either out pointer may be NULL. Thread-safe.
///
/// # Safety
/// `ptr` and `length` are each NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_lease_memory(lease: *mut hexrpc_lease, ptr: *mut *mut c_void, length: *mut usize) -> hexrpc_status {
    run(|| {
        let l = table::lease(handle_value(lease))?;
        let (addr, len) = l.memory();
        // SAFETY: the caller's contract.
        unsafe { write_opt(ptr, std::ptr::with_exposed_provenance_mut::<c_void>(addr)) };
        // SAFETY: the caller's contract.
        unsafe { write_opt(length, len) };
        Ok(())
    })
}

/// Frees a lease (its mapping, share fd and ION handle; for an import, hexrpc's duplicate of the
/// descriptor, never the owner's buffer), once no launch in flight uses it. A model input bound
/// to the lease (`hexrpc_model_bind_input`) keeps the buffer until it is unbound or the model
/// closed; only the handle goes. Thread-safe; a second free returns `HEXRPC_ERR_HANDLE`.
#[no_mangle]
pub extern "C" fn hexrpc_lease_free(lease: *mut hexrpc_lease) -> hexrpc_status {
    run(|| free_handle(lease, |o| matches!(o, Obj::Lease(_)), "lease"))
}

/// Makes an arena over a new lease of at least `length` bytes (rounded up to a page): one ION
/// allocation, share and mapping, carved into sub-allocations by `hexrpc_arena_alloc`. The
/// arena's bookkeeping has a fixed size (`HEXRPC_ARENA_BLOCKS` ranges, free and used). Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_arena_new(session: *mut hexrpc_session, length: usize, out: *mut *mut hexrpc_arena) -> hexrpc_status {
    run(|| {
        let make = || Ok(Obj::Arena(Arc::new(table::session(handle_value(session))?.arena(length)?)));
        // SAFETY: the caller's contract.
        unsafe { new_handle(out, make) }
    })
}

/// Carves `length` bytes out of `arena` at an offset that is a multiple of `align` (a power of
/// two; 0: 128, the HVX vector length, the least any sub-allocation gets) and returns them as
/// a lease handle: `hexrpc_lease_memory` gives its address and `length`, views take offsets
/// relative to it, and launches and batches pass the arena's lease (mapped whole by the DSP) at
/// the sub-allocation's offset, so any number of sub-allocations of one arena count as one
/// lease of a batch. `hexrpc_lease_free` gives the range back (once no launch in flight uses it).
/// `HEXRPC_ERR_INVALID` when no free range fits (the last error says the largest free range) or
/// the bookkeeping is full, for a zero `length` or an `align` that is not a power of two.
/// Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_arena_alloc(
    arena: *mut hexrpc_arena,
    length: usize,
    align: usize,
    out: *mut *mut hexrpc_lease,
) -> hexrpc_status {
    run(|| {
        let alloc = || Ok(Obj::Lease(Arc::new(table::arena(handle_value(arena))?.alloc(length, align)?)));
        // SAFETY: the caller's contract.
        unsafe { new_handle(out, alloc) }
    })
}

/// Writes what the arena holds to `stats`. Thread-safe.
///
/// # Safety
/// `stats` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_arena_get_stats(arena: *mut hexrpc_arena, stats: *mut hexrpc_arena_stats) -> hexrpc_status {
    run(|| {
        let a = table::arena(handle_value(arena))?;
        let st = a.stats();
        let out = hexrpc_arena_stats {
            capacity: st.capacity,
            used: st.used,
            free: st.free,
            largest_free: st.largest_free,
            live: st.live_blocks,
            blocks_in_use: st.nodes_in_use,
            blocks: st.nodes,
            reserved: 0,
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(stats, out, "stats") }
    })
}

/// Frees the arena handle. Its sub-allocations stay valid: the arena's lease is released when
/// the last of them is freed too (or the session is closed, which frees them all). Thread-safe;
/// a second free returns `HEXRPC_ERR_HANDLE`.
#[no_mangle]
pub extern "C" fn hexrpc_arena_free(arena: *mut hexrpc_arena) -> hexrpc_status {
    run(|| free_handle(arena, |o| matches!(o, Obj::Arena(_)), "arena"))
}
