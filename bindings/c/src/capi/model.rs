//! Model files: opening one on a session (from bytes or from a path), its inputs and outputs,
//! binding an input to a lease (an imported camera frame) so that it is read in place, running
//! it in one FastRPC call, closing it. The model object itself is [`crate::model`],
//! which the Python package shares.

use std::ffi::c_char;
use std::sync::Arc;

use super::args::{c_slice, deadline_arg, free_handle, handle_value, new_handle, str_arg, write_out};
use super::last_error::run;
use super::types::*;
use crate::error::{hexrpc_status, Failure};
use crate::model::{ModelObj, MAX_IO};
use crate::table::{self, Obj};

/// Opens the model file held in `bytes` (`len` bytes) on `session`: validates all of it first
/// (a refused file is `HEXRPC_ERR_INVALID`, the last error naming the part, the field and the
/// values, and nothing is sent), then opens its libraries, allocates its arenas, writes its
/// weights and records. The bytes are not kept. The model is closed with its session. Thread-safe.
///
/// # Safety
/// `bytes` is NULL (with `len` 0) or valid for reading `len` bytes; `out` is NULL or valid for
/// one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_open(
    session: *mut hexrpc_session,
    bytes: *const u8,
    len: usize,
    out: *mut *mut hexrpc_model,
) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let bytes = unsafe { c_slice(bytes, len, "bytes") }?;
        let make = || Ok(Obj::Model(Arc::new(ModelObj::open(&table::session(handle_value(session))?, bytes)?)));
        // SAFETY: `out` is NULL or valid for one write (the caller's contract).
        unsafe { new_handle(out, make) }
    })
}

/// `hexrpc_model_open` from the file at `path`, mapped read-only while it is opened (a file
/// that cannot be read is `HEXRPC_ERR_UNAVAILABLE` (missing, unreadable) or `HEXRPC_ERR_FAILED`, the last error naming the path and the errno). Thread-safe.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_open_path(
    session: *mut hexrpc_session,
    path: *const c_char,
    out: *mut *mut hexrpc_model,
) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let path = unsafe { str_arg(path, "path") }?;
        let make = || Ok(Obj::Model(Arc::new(ModelObj::open_path(&table::session(handle_value(session))?, path)?)));
        // SAFETY: `out` is NULL or valid for one write (the caller's contract).
        unsafe { new_handle(out, make) }
    })
}

/// Writes how many inputs and outputs the model has. Thread-safe.
///
/// # Safety
/// `inputs` and `outputs` are NULL or valid for one write each (NULL: not wanted).
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_io_count(model: *mut hexrpc_model, inputs: *mut usize, outputs: *mut usize) -> hexrpc_status {
    run(|| {
        let m = table::model(handle_value(model))?;
        let (i, o) = m.with(|m| (m.inputs().len(), m.outputs().len()));
        // SAFETY: the caller's contract.
        unsafe {
            super::args::write_opt(inputs, i);
            super::args::write_opt(outputs, o);
        }
        Ok(())
    })
}

fn describe(model: *mut hexrpc_model, index: usize, output: bool, out: *mut hexrpc_tensor) -> Result<(), Failure> {
    let m = table::model(handle_value(model))?;
    let t = m.with(|l| {
        let list = if output { l.outputs() } else { l.inputs() };
        list.get(index).map(|t| {
            let mut shape = [0u64; 8];
            for (d, s) in shape.iter_mut().zip(&t.shape) {
                *d = *s;
            }
            (t.dtype as u32, t.shape.len() as u32, shape, t.len)
        })
    });
    let name = if output { m.output_name(index) } else { m.input_name(index) };
    let (Some((dtype, rank, shape, bytes)), Some(name)) = (t, name) else {
        let what = if output { "output" } else { "input" };
        return Err(Failure::invalid("model", format!("no {what} {index}")));
    };
    // The name lives as long as the model object, which the table keeps while the handle is
    // open (the pointer is the caller's to stop using once it closes the model).
    let d = hexrpc_tensor { name: name.as_ptr(), dtype, rank, shape, bytes };
    // SAFETY: `out` is NULL or valid for one write (the caller's contract, passed on).
    unsafe { write_out(out, d, "out") }
}

/// Describes input `index` (0-based, in the file's order): its name, dtype (`HEXRPC_DTYPE_*`),
/// rank, shape and size in bytes. The name stays valid until the model is closed. An index past
/// the inputs is `HEXRPC_ERR_INVALID`. Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_input(model: *mut hexrpc_model, index: usize, out: *mut hexrpc_tensor) -> hexrpc_status {
    run(|| describe(model, index, false, out))
}

/// Describes output `index`, as `hexrpc_model_input` does an input. Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_output(model: *mut hexrpc_model, index: usize, out: *mut hexrpc_tensor) -> hexrpc_status {
    run(|| describe(model, index, true, out))
}

/// Binds input `index` to the bytes at `offset` of `lease` (a lease of the model's session: an
/// import, `hexrpc_session_import`, such as a camera frame another process shares; or an
/// allocation or arena sub-allocation of the session): from the next run on, the kernels read the
/// input there, nothing of it is copied, and `hexrpc_model_run` takes `data` NULL and `len` 0 for
/// it (`hexrpc_model_report.input_bytes_copied` counts 0 for it). Binding again replaces the
/// binding. The model holds the lease until the input is unbound or bound again, or the model
/// closed: freeing the lease's handle meanwhile (`hexrpc_lease_free`) leaves the binding working.
///
/// `HEXRPC_ERR_INVALID` (stage `model-bind`, the last error saying why; nothing changes, and the
/// model runs as before): an `index` past the inputs; a lease of another session; `offset` plus
/// the input's size past the lease's length; an `offset` whose remainder modulo 128 (the arena
/// alignment, `HEXRPC_ARENA_ALIGN`) is not the input's in its arena, for which the kernels were
/// built (0 for a file from `python -m hexrpc.export`: any multiple of 128); a record that views
/// part of the input and part of something else. Binding allocates (a copy of the model's
/// records); runs do not. A read-only import does not stop a kernel that writes its input (a file
/// from `python -m hexrpc.export` never has one). Thread-safe (waits for a run in progress).
#[no_mangle]
pub extern "C" fn hexrpc_model_bind_input(
    model: *mut hexrpc_model,
    index: usize,
    lease: *mut hexrpc_lease,
    offset: usize,
) -> hexrpc_status {
    run(|| {
        let m = table::model(handle_value(model))?;
        let l = table::lease(handle_value(lease))?;
        m.bind_input(index, l, offset)
    })
}

/// Unbinds input `index` (`hexrpc_model_bind_input`): from the next run on it is copied in again
/// from `hexrpc_input.data`, and the model lets the lease go. Writes 1 to `was_bound` (may be
/// NULL) if the input was bound, 0 if it was not (then nothing changes). An `index` past the
/// inputs is `HEXRPC_ERR_INVALID`. Thread-safe (waits for a run in progress).
///
/// # Safety
/// `was_bound` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_unbind_input(model: *mut hexrpc_model, index: usize, was_bound: *mut u32) -> hexrpc_status {
    run(|| {
        let m = table::model(handle_value(model))?;
        let was = m.unbind_input(index)?;
        // SAFETY: the caller's contract.
        unsafe { super::args::write_opt(was_bound, u32::from(was)) };
        Ok(())
    })
}

/// Writes 1 to `bound` if input `index` is bound to a lease (`hexrpc_model_bind_input`), 0 if a
/// run copies it in. An `index` past the inputs is `HEXRPC_ERR_INVALID`. Thread-safe.
///
/// # Safety
/// `bound` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_input_bound(model: *mut hexrpc_model, index: usize, bound: *mut u32) -> hexrpc_status {
    run(|| {
        let m = table::model(handle_value(model))?;
        let inputs = m.with(|l| l.inputs().len());
        if index >= inputs {
            return Err(Failure::invalid("model", format!("no input {index}: the model has {inputs}")));
        }
        // SAFETY: the caller's contract.
        unsafe { write_out(bound, u32::from(m.is_bound(index)), "bound") }
    })
}

/// Runs the model once: `inputs[i]` holds input `i`'s bytes and `outputs[j]` receives output
/// `j`'s, each exactly the tensor's size (`hexrpc_tensor.bytes`), `ninputs` and `noutputs` the
/// model's counts (anything else is `HEXRPC_ERR_INVALID` naming the tensor, and nothing is
/// sent). An input bound to a lease (`hexrpc_model_bind_input`) takes `data` NULL and `len` 0:
/// the kernels read it in place (bytes given for it are `HEXRPC_ERR_INVALID`, nothing sent).
/// One FastRPC call for a model of up to 4,096 launches on one library; nothing is
/// allocated. `deadline_ms` bounds the run (0: none): a run past it is interrupted and is
/// `HEXRPC_ERR_RECOVERABLE`, as is a DSP restart: `hexrpc_session_recover`, then run again.
/// Writes what the run did to `report` (may be NULL), with the input bytes it copied. Runs on one
/// model take turns; different models run concurrently. Thread-safe.
///
/// # Safety
/// `inputs` is NULL (with 0) or valid for `ninputs` reads, each naming `len` readable bytes;
/// `outputs` likewise for `noutputs`, each naming `len` writable bytes that nothing else uses
/// during the call; `report` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_model_run(
    model: *mut hexrpc_model,
    inputs: *const hexrpc_input,
    ninputs: usize,
    outputs: *const hexrpc_output,
    noutputs: usize,
    deadline_ms: u32,
    report: *mut hexrpc_model_report,
) -> hexrpc_status {
    // SAFETY: the caller's contract, passed on.
    run(|| unsafe { model_run(model, inputs, ninputs, outputs, noutputs, deadline_ms, report, None) })
}

/// [`hexrpc_model_run`], and where the DSP time went: each record's time, measured on the DSP
/// right around its kernel call, named after its kernel, in run order. The first `capacity` go
/// to `times`; `*count` (may be NULL) receives how many records were timed (more than `capacity`
/// means some did not fit: the run itself is not repeated, give a larger array next time;
/// `hexrpc_model_report.launches` is the most there can be). A call whose library does not
/// time records (built before per-record times) adds none. Unlike `hexrpc_model_run`, this
/// allocates (the run's times, before they are copied out). Thread-safe.
///
/// # Safety
/// As [`hexrpc_model_run`]; `times` is NULL (with `capacity` 0) or valid for `capacity` writes;
/// `count` is NULL or valid for one write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hexrpc_model_run_profiled(
    model: *mut hexrpc_model,
    inputs: *const hexrpc_input,
    ninputs: usize,
    outputs: *const hexrpc_output,
    noutputs: usize,
    deadline_ms: u32,
    report: *mut hexrpc_model_report,
    times: *mut hexrpc_kernel_time,
    capacity: usize,
    count: *mut usize,
) -> hexrpc_status {
    if times.is_null() && capacity > 0 {
        return run(|| Err(Failure::null("times")));
    }
    // SAFETY: the caller's contract, passed on.
    run(|| unsafe { model_run(model, inputs, ninputs, outputs, noutputs, deadline_ms, report, Some((times, capacity, count))) })
}

/// One run, profiled when `profile` names where the times go.
///
/// # Safety
/// As [`hexrpc_model_run_profiled`].
#[allow(clippy::too_many_arguments)]
unsafe fn model_run(
    model: *mut hexrpc_model,
    inputs: *const hexrpc_input,
    ninputs: usize,
    outputs: *const hexrpc_output,
    noutputs: usize,
    deadline_ms: u32,
    report: *mut hexrpc_model_report,
    profile: Option<(*mut hexrpc_kernel_time, usize, *mut usize)>,
) -> Result<(), Failure> {
    let m = table::model(handle_value(model))?;
    if ninputs > MAX_IO || noutputs > MAX_IO {
        return Err(Failure::invalid(
            "model-run",
            format!("{ninputs} inputs and {noutputs} outputs: a model has at most {MAX_IO} of each"),
        ));
    }
    // SAFETY: the caller's contract.
    let ins = unsafe { c_slice(inputs, ninputs, "inputs") }?;
    // SAFETY: the caller's contract.
    let outs = unsafe { c_slice(outputs, noutputs, "outputs") }?;
    let mut in_bytes: heapless::Vec<&[u8], MAX_IO> = heapless::Vec::new();
    for (i, b) in ins.iter().enumerate() {
        // SAFETY: the caller's contract: `data` is NULL (with 0) or valid for `len` reads.
        let s = unsafe { c_slice(b.data.cast::<u8>(), b.len, "inputs[i].data") }.map_err(|mut f| {
            f.cause = format!("input {i}: {}", f.cause);
            f
        })?;
        let _ = in_bytes.push(s);
    }
    let mut out_bytes: heapless::Vec<&mut [u8], MAX_IO> = heapless::Vec::new();
    for (j, b) in outs.iter().enumerate() {
        if b.data.is_null() && b.len > 0 {
            return Err(Failure::null("outputs[j].data")).map_err(|mut f| {
                f.cause = format!("output {j}: {}", f.cause);
                f
            });
        }
        let s: &mut [u8] = if b.len == 0 {
            &mut []
        } else {
            // SAFETY: the caller's contract: `data` is valid for `len` writes and nothing
            // else uses it during the call.
            unsafe { std::slice::from_raw_parts_mut(b.data.cast::<u8>(), b.len) }
        };
        let _ = out_bytes.push(s);
    }
    let r = match profile {
        None => m.run(&in_bytes, &mut out_bytes, deadline_arg(deadline_ms))?,
        Some((times, capacity, count)) => {
            let (r, p) = m.run_profiled(&in_bytes, &mut out_bytes, deadline_arg(deadline_ms))?;
            for (i, t) in p.records.iter().take(capacity).enumerate() {
                let kernel = m.kernel_name(&t.kernel).map_or(std::ptr::null(), |c| c.as_ptr());
                let v = hexrpc_kernel_time { kernel, call: t.call as u32, record: t.record as u32, us: t.micros, reserved: 0 };
                // SAFETY: `times` is valid for `capacity` writes (the caller's contract), i < capacity.
                unsafe { times.add(i).write(v) };
            }
            // SAFETY: the caller's contract.
            unsafe { super::args::write_opt(count, p.records.len()) };
            r
        }
    };
    // SAFETY: the caller's contract.
    unsafe {
        super::args::write_opt(
            report,
            hexrpc_model_report {
                launches: r.launches as u64,
                calls: r.calls as u32,
                // Fits: a model's inputs fit its arenas (asserted with the struct).
                input_bytes_copied: u32::try_from(r.input_bytes_copied).unwrap_or(u32::MAX),
                dsp_us: r.dsp_micros,
            },
        )
    };
    Ok(())
}

/// Closes a model: its arenas, records and libraries are released. Thread-safe; a closed handle
/// is `HEXRPC_ERR_HANDLE` afterwards.
#[no_mangle]
pub extern "C" fn hexrpc_model_close(model: *mut hexrpc_model) -> hexrpc_status {
    run(|| free_handle(model, |o| matches!(o, Obj::Model(_)), "model"))
}
