//! Batches: launches of one library's kernel table in one FastRPC call; making one, pushing
//! records, changing a record's scalar or view in place, running, freeing. The batch object
//! itself is [`crate::batch`], which the Python package shares.

use std::ffi::c_char;
use std::sync::Arc;

use hexrpc_runtime::launch::MAX_BATCH_KERNELS;

use super::args::{c_slice, deadline_arg, free_handle, handle_value, new_handle, scalar_arg, scalar_args, str_arg, view_args, write_opt};
use super::last_error::run;
use super::types::*;
use crate::batch::BatchObj;
use crate::error::{hexrpc_status, Failure};
use crate::table::{self, Obj};

/// The stack a thread needs to make batch calls (`hexrpc_batch_new`, `_push`, `_set_scalar`,
/// `_set_view`, `_run`, `_free`): 64 KiB, tested with the largest batch (256 records, 15
/// leases) on a thread made with that stack. A batch's records (up to 66 KiB) live on the heap,
/// never on the caller's stack, so a thread with musl's 128 KiB default or an RTOS-sized task
/// can use batches.
pub const HEXRPC_BATCH_STACK_BYTES: u32 = 64 * 1024;

/// Starts a batch on `library`, a library built with a kernel table (`hexrpc build-lib --table`):
/// `kernels` are the table's kernel signatures (`"buf,buf,u32"`), `nkernels` of them (1..=256), in
/// table order; the library must have been opened with `kernels[0]`'s signature. Refused here
/// (`HEXRPC_ERR_INVALID`, before anything is sent): a library whose build record says it has no
/// kernel table (built without `--table`) and `kernels` other than the table it records (a library
/// without a build record is found out by its first run). A batch holds
/// up to 256 launches, 15 distinct leases (every sub-allocation of one arena is one) and 64 KiB of records, checked as they are pushed; it
/// keeps its leases mapped (a freed lease's memory is released when the batch is freed or no
/// longer names it) and is freed with its session. Thread-safe.
///
/// # Safety
/// `kernels` is NULL or valid for reading `nkernels` NUL-terminated strings; `out` is NULL or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_batch_new(
    library: *mut hexrpc_library,
    kernels: *const *const c_char,
    nkernels: usize,
    out: *mut *mut hexrpc_batch,
) -> hexrpc_status {
    run(|| {
        let make = || {
            if kernels.is_null() {
                return Err(Failure::null("kernels"));
            }
            if nkernels > MAX_BATCH_KERNELS {
                return Err(Failure::invalid("batch", format!("{nkernels} kernels: a table holds 1..={MAX_BATCH_KERNELS}")));
            }
            // SAFETY: non-null and valid for `nkernels` reads (the caller's contract).
            let ptrs = unsafe { std::slice::from_raw_parts(kernels, nkernels) };
            let mut sigs = Vec::with_capacity(nkernels);
            for &p in ptrs {
                // SAFETY: each is NULL or NUL-terminated (the caller's contract).
                sigs.push(unsafe { str_arg(p, "kernels[i]") }?);
            }
            let kernel = table::kernel(handle_value(library))?;
            Ok(Obj::Batch(Arc::new(BatchObj::new(kernel, &sigs)?)))
        };
        // SAFETY: `out` is NULL or valid for one write (the caller's contract).
        unsafe { new_handle(out, make) }
    })
}

/// Appends a launch of kernel `kernel` of the table on `nviews` views and `nscalars` scalars
/// (checked as `hexrpc_launch` checks them, and against the batch's capacity with the records
/// already there: a batch that could not run is refused now, `HEXRPC_ERR_REFUSED`); writes the
/// record's index to `record` (may be NULL). Thread-safe. Needs `HEXRPC_BATCH_STACK_BYTES` of
/// stack at most.
///
/// # Safety
/// `views`/`scalars` are NULL (with a 0 count) or valid for their counts; `record` is NULL or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_batch_push(
    batch: *mut hexrpc_batch,
    kernel: u32,
    views: *const hexrpc_view,
    nviews: usize,
    scalars: *const hexrpc_scalar,
    nscalars: usize,
    record: *mut usize,
) -> hexrpc_status {
    run(|| {
        let b = table::batch(handle_value(batch))?;
        // SAFETY: the caller's contract.
        let views = unsafe { view_args(views, nviews) }?;
        // SAFETY: the caller's contract.
        let scalars = unsafe { c_slice(scalars, nscalars, "scalars") }?;
        let r = b.push(kernel as usize, views, scalar_args(scalars)?)?;
        // SAFETY: the caller's contract.
        unsafe { write_opt(record, r) };
        Ok(())
    })
}

/// Sets scalar `index` of record `record` to `value` (its kind must be the signature's), in
/// place: the next run sends it. Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_batch_set_scalar(batch: *mut hexrpc_batch, record: usize, index: usize, value: hexrpc_scalar) -> hexrpc_status {
    run(|| {
        let b = table::batch(handle_value(batch))?;
        b.set_scalar(record, index, scalar_arg(index, &value)?)
    })
}

/// Points buffer `index` of record `record` at `view`, in place (a graph whose input changed):
/// checked as a push checks it; refused, leaving the record as it was, if the batch would exceed
/// its distinct leases. Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_batch_set_view(batch: *mut hexrpc_batch, record: usize, index: usize, view: hexrpc_view) -> hexrpc_status {
    run(|| {
        let b = table::batch(handle_value(batch))?;
        // SAFETY: one view read from a local.
        let mut v = unsafe { view_args(&view, 1) }?;
        let Some(v) = v.pop() else { return Err(Failure::other("batch", "view lookup")) };
        b.set_view(record, index, v)
    })
}

/// Runs every record in order in one FastRPC call; writes the DSP microseconds summed over the
/// kernels to `dsp_us` (may be NULL). `deadline_ms` as for `hexrpc_launch` (0: none). A kernel that
/// reports a failure stops the batch (`HEXRPC_ERR_FAILED`, naming the record). Runs the records
/// as they are when it is called; pushes and changes from other threads apply from the next
/// run. Thread-safe. Needs `HEXRPC_BATCH_STACK_BYTES` of stack at most.
///
/// # Safety
/// `dsp_us` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_batch_run(batch: *mut hexrpc_batch, deadline_ms: u32, dsp_us: *mut u64) -> hexrpc_status {
    run(|| {
        let b = table::batch(handle_value(batch))?;
        let us = b.run(deadline_arg(deadline_ms))?;
        // SAFETY: the caller's contract.
        unsafe { write_opt(dsp_us, us) };
        Ok(())
    })
}

/// Frees a batch (its records and the leases only it kept alive). Thread-safe; a freed handle
/// is `HEXRPC_ERR_HANDLE` afterwards.
#[no_mangle]
pub extern "C" fn hexrpc_batch_free(batch: *mut hexrpc_batch) -> hexrpc_status {
    run(|| free_handle(batch, |o| matches!(o, Obj::Batch(_)), "batch"))
}
