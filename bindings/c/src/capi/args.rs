//! Reading a C call's arguments (handles, strings, arrays, ABIs, scalars, views, deadlines) and
//! writing its out parameters, each checked: NULL where a value is needed is `HEXRPC_ERR_NULL`
//! naming the parameter, never a dereference.

use std::ffi::{c_char, CStr};
use std::sync::Arc;
use std::time::Duration;

use hexrpc_runtime::launch::{AbiVersion, Scalar, ScalarType, Signature, MAX_BUFFERS};

use super::types::*;
use crate::error::{hexrpc_status, Failure};
use crate::objects::{scalar_from_bits, LeaseObj};
use crate::table::{self, Obj};

/// The table value a handle pointer carries (never dereferenced).
pub(super) fn handle_value<T>(p: *const T) -> u64 {
    p.addr() as u64
}

/// The handle pointer that carries table value `h` (no provenance: it is never dereferenced).
pub(super) fn handle_ptr<T>(h: u64) -> *mut T {
    std::ptr::without_provenance_mut(h as usize)
}

/// # Safety
/// `p` is NULL or valid for writing one `T`.
pub(super) unsafe fn write_out<T>(p: *mut T, v: T, what: &'static str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller guarantees it is valid for one write of `T`.
    unsafe { p.write(v) };
    Ok(())
}

/// Writes `v` to the optional out parameter `p`; nothing when `p` is NULL.
///
/// # Safety
/// `p` is NULL or valid for writing one `T`.
pub(super) unsafe fn write_opt<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null, and the caller guarantees it is valid for one write of `T`.
        unsafe { p.write(v) };
    }
}

/// Makes an object (`make`), enters it in the handle table and writes its handle to `out`. `out`
/// NULL is refused before `make` runs, so nothing is made that the caller could not be given.
///
/// # Safety
/// `out` is NULL or valid for one write.
pub(super) unsafe fn new_handle<T>(out: *mut *mut T, make: impl FnOnce() -> Result<Obj, Failure>) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null("out"));
    }
    let h = table::insert(make()?)?;
    // SAFETY: `out` is non-null and valid for one write (the caller's contract).
    unsafe { write_out(out, handle_ptr(h), "out") }
}

/// Takes handle `h` out of the table if it names an object `is_kind` accepts (else
/// `HEXRPC_ERR_HANDLE` naming `what`), and drops what it held (the object, and for a session
/// everything made from it) before returning.
pub(super) fn free_handle<T>(h: *mut T, is_kind: fn(&Obj) -> bool, what: &'static str) -> Result<(), Failure> {
    drop(table::remove(handle_value(h), is_kind, what)?);
    Ok(())
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(super) unsafe fn str_arg<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller guarantees it is NUL-terminated and lives for the call.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|_| Failure::invalid("argument", format!("{what} is not UTF-8")))
}

pub(super) fn abi_arg(abi: u32) -> Result<AbiVersion, Failure> {
    match abi {
        HEXRPC_ABI_V1 => Ok(AbiVersion::V1),
        HEXRPC_ABI_V2 => Ok(AbiVersion::V2),
        other => Err(Failure::invalid("argument", format!("abi {other}: use HEXRPC_ABI_V1 or HEXRPC_ABI_V2"))),
    }
}

/// `HEXRPC_ABI_RECORDED` is `None`.
pub(super) fn abi_opt(abi: u32) -> Result<Option<AbiVersion>, Failure> {
    if abi == HEXRPC_ABI_RECORDED {
        Ok(None)
    } else {
        abi_arg(abi).map(Some)
    }
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(super) unsafe fn opt_str_arg<'a>(p: *const c_char, what: &'static str) -> Result<Option<&'a str>, Failure> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: the caller's contract.
        unsafe { str_arg(p, what) }.map(Some)
    }
}

fn scalar_type(kind: u32) -> Option<ScalarType> {
    Some(match kind {
        HEXRPC_SCALAR_I8 => ScalarType::I8,
        HEXRPC_SCALAR_U8 => ScalarType::U8,
        HEXRPC_SCALAR_I16 => ScalarType::I16,
        HEXRPC_SCALAR_U16 => ScalarType::U16,
        HEXRPC_SCALAR_I32 => ScalarType::I32,
        HEXRPC_SCALAR_U32 => ScalarType::U32,
        HEXRPC_SCALAR_I64 => ScalarType::I64,
        HEXRPC_SCALAR_U64 => ScalarType::U64,
        HEXRPC_SCALAR_F16 => ScalarType::F16,
        HEXRPC_SCALAR_F32 => ScalarType::F32,
        HEXRPC_SCALAR_F64 => ScalarType::F64,
        _ => return None,
    })
}

/// Scalar `i` of a launch, checked field by field: a known kind, `reserved` zero, and bits that
/// fit the kind's width (zero-extended, as the header's helpers build them); never truncated.
pub(super) fn scalar_arg(i: usize, s: &hexrpc_scalar) -> Result<Scalar, Failure> {
    let bad = |detail: String| Failure::invalid("launch-pack", format!("scalar {i}: {detail}"));
    let ty = scalar_type(s.kind).ok_or_else(|| bad(format!("kind: unknown type {}", s.kind)))?;
    if s.reserved != 0 {
        return Err(bad(format!("reserved: {:#x}, must be 0", s.reserved)));
    }
    let width = match ty {
        ScalarType::I8 | ScalarType::U8 => 8,
        ScalarType::I16 | ScalarType::U16 | ScalarType::F16 => 16,
        ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 32,
        ScalarType::I64 | ScalarType::U64 | ScalarType::F64 => 64,
    };
    if width < 64 && s.bits >> width != 0 {
        return Err(bad(format!(
            "bits: {:#x} does not fit {} ({width} bits, zero-extended: use the hexrpc_scalar_* helpers)",
            s.bits,
            ty.name()
        )));
    }
    Ok(scalar_from_bits(ty, s.bits))
}

/// A launch's scalars, each checked by [`scalar_arg`], collected into `C` (a `heapless::Vec` on
/// the launch path, which allocates nothing); more than a signature's parameters are refused.
pub(super) fn scalar_args<C: FromIterator<Scalar>>(scalars: &[hexrpc_scalar]) -> Result<C, Failure> {
    let n = scalars.len();
    if n > Signature::MAX_PARAMS {
        return Err(Failure::refused(format!("{n} scalars: too many")));
    }
    scalars.iter().enumerate().map(|(i, s)| scalar_arg(i, s)).collect()
}

/// `nviews` buffers fit one launch (or one batch record).
pub(super) fn view_count(nviews: usize) -> Result<(), Failure> {
    if nviews > MAX_BUFFERS {
        return Err(Failure::refused(format!("{nviews} buffers: a launch carries at most {MAX_BUFFERS}")));
    }
    Ok(())
}

/// A call's `deadline_ms`: 0 is none (wait for the DSP).
pub(super) fn deadline_arg(deadline_ms: u32) -> Option<Duration> {
    (deadline_ms != 0).then(|| Duration::from_millis(u64::from(deadline_ms)))
}

/// The array `p` of `n` elements a C caller passed: empty for `n` 0 (any `p`), NULL with `n` > 0
/// refused as `HEXRPC_ERR_NULL` naming `what`.
///
/// # Safety
/// `p` is NULL or valid for reading `n` elements for `'a`.
pub(super) unsafe fn c_slice<'a, T>(p: *const T, n: usize, what: &'static str) -> Result<&'a [T], Failure> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null and valid for `n` reads (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The views of a C call as (lease, offset, length) with their leases looked up.
///
/// # Safety
/// `views` is NULL (with `nviews` 0) or valid for reading `nviews` views.
pub(super) unsafe fn view_args(views: *const hexrpc_view, nviews: usize) -> Result<Vec<(Arc<LeaseObj>, usize, usize)>, Failure> {
    // SAFETY: the caller's contract.
    let views = unsafe { c_slice(views, nviews, "views") }?;
    view_count(nviews)?;
    views
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let l = table::lease(handle_value(v.lease))
                .map_err(|_| Failure::new(hexrpc_status::HEXRPC_ERR_HANDLE, "handle", format!("buffer {i}: not a live lease handle")))?;
            Ok((l, v.offset, v.length))
        })
        .collect()
}
