//! Libraries and launches: opening a library from its bytes or a file, closing it, and one
//! launch of its kernel (allocation-free: the arguments are checked into fixed-size vectors).

use std::ffi::c_char;
use std::sync::Arc;

use hexrpc_runtime::launch::{Scalar, Signature, MAX_BUFFERS};

use super::args::{
    abi_opt, c_slice, deadline_arg, free_handle, handle_value, new_handle, opt_str_arg, scalar_args, str_arg, view_count, write_opt,
};
use super::last_error::run;
use super::types::*;
use crate::error::{hexrpc_status, Failure};
use crate::objects::ViewArg;
use crate::table::{self, Obj};

/// Opens a library from its bytes (copied; the caller may free them on return), for a kernel of
/// `signature` (e.g. `"buf,buf,f32"`) under `abi` (`HEXRPC_ABI_V2`). A library made by `hexrpc
/// build-lib` carries a build record: pass `signature` NULL and `abi` `HEXRPC_ABI_RECORDED` to
/// use the recorded ones; an explicit signature or ABI that disagrees with the record is refused
/// (`HEXRPC_ERR_INVALID`) before anything is opened. `name` (letters, digits, `_-.`; others
/// become `_`) names it in logs. The DSP fetches the image back through the reverse file
/// service. Thread-safe.
///
/// # Safety
/// `name` is NULL or NUL-terminated; `signature` is NULL (recorded) or NUL-terminated; `bytes` is
/// NULL or valid for reading `length` bytes; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_library_open(
    session: *mut hexrpc_session,
    name: *const c_char,
    bytes: *const u8,
    length: usize,
    signature: *const c_char,
    abi: u32,
    out: *mut *mut hexrpc_library,
) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let (name, signature) = unsafe { (str_arg(name, "name")?, opt_str_arg(signature, "signature")?) };
        if bytes.is_null() {
            return Err(Failure::null("bytes"));
        }
        let open = || {
            // SAFETY: non-null and valid for `length` bytes (the caller's contract); copied at once.
            let image = unsafe { std::slice::from_raw_parts(bytes, length) }.to_vec();
            let s = table::session(handle_value(session))?;
            Ok(Obj::Kernel(Arc::new(s.open_library(name, image, signature, abi_opt(abi)?)?)))
        };
        // SAFETY: the caller's contract.
        unsafe { new_handle(out, open) }
    })
}

/// [`hexrpc_library_open`] from a file (at most 64 MiB); its name is the file's stem.
/// `signature` NULL and `abi` `HEXRPC_ABI_RECORDED` take the library's build record.
/// Thread-safe.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `signature` is NULL (recorded) or NUL-terminated; `out` is
/// NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_library_open_path(
    session: *mut hexrpc_session,
    path: *const c_char,
    signature: *const c_char,
    abi: u32,
    out: *mut *mut hexrpc_library,
) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let (path, signature) = unsafe { (str_arg(path, "path")?, opt_str_arg(signature, "signature")?) };
        let open = || {
            let s = table::session(handle_value(session))?;
            Ok(Obj::Kernel(Arc::new(s.open_library_path(std::path::Path::new(path), signature, abi_opt(abi)?)?)))
        };
        // SAFETY: the caller's contract.
        unsafe { new_handle(out, open) }
    })
}

/// Closes a library (on the DSP, and withdraws its image) once no launch in flight uses it.
/// Thread-safe; a second close returns `HEXRPC_ERR_HANDLE`.
#[no_mangle]
pub extern "C" fn hexrpc_library_close(library: *mut hexrpc_library) -> hexrpc_status {
    run(|| free_handle(library, |o| matches!(o, Obj::Kernel(_)), "library"))
}

/// Launches the library's kernel on `nviews` views (buffers, in signature order) and `nscalars`
/// scalars; writes the DSP's microseconds around the kernel to `dsp_us` (may be NULL).
/// `deadline_ms` 0 waits for the DSP; otherwise a launch still running after that many
/// milliseconds is abandoned with `HEXRPC_ERR_RECOVERABLE` (recover the session). A launch that
/// does not fit the signature or the ABI (v1 and a non-zero offset, a view outside its lease, a
/// wrong scalar type) is refused before any system call (`HEXRPC_ERR_REFUSED` /
/// `HEXRPC_ERR_INVALID`). One ioctl; nothing is allocated on success. Thread-safe: launches on
/// one library from several threads run concurrently.
///
/// # Safety
/// `views` is NULL (with `nviews` 0) or valid for reading `nviews` views; likewise `scalars`;
/// `dsp_us` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_launch(
    library: *mut hexrpc_library,
    views: *const hexrpc_view,
    nviews: usize,
    scalars: *const hexrpc_scalar,
    nscalars: usize,
    deadline_ms: u32,
    dsp_us: *mut u64,
) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let views = unsafe { c_slice(views, nviews, "views") }?;
        // SAFETY: the caller's contract.
        let scalars = unsafe { c_slice(scalars, nscalars, "scalars") }?;
        view_count(nviews)?;
        let sc: heapless::Vec<Scalar, { Signature::MAX_PARAMS }> = scalar_args(scalars)?;
        let (kernel, leases, index) =
            table::kernel_and_leases::<MAX_BUFFERS>(handle_value(library), views.iter().map(|v| handle_value(v.lease)))?;
        let mut args: heapless::Vec<ViewArg<'_>, MAX_BUFFERS> = heapless::Vec::new();
        for (v, &j) in views.iter().zip(&index) {
            let Some(l) = leases.get(usize::from(j)) else { return Err(Failure::other("launch-pack", "lease lookup")) };
            let _ = args.push(ViewArg { lease: l, offset: v.offset, len: v.length });
        }
        let us = kernel.launch(&args, &sc, deadline_arg(deadline_ms))?;
        // SAFETY: the caller's contract.
        unsafe { write_opt(dsp_us, us) };
        Ok(())
    })
}
