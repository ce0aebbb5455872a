//! The bytes a library is opened from: the bench's model and kernel images, and
//! `hexrpc_build_library` (`hexrpc build-lib` as a function). Every item here needs the
//! `build-lib` feature (which `bench` implies), so the imports are gated alike.

#[cfg(feature = "build-lib")]
use std::ffi::c_char;

#[cfg(feature = "bench")]
use super::args::write_out;
#[cfg(feature = "build-lib")]
use super::args::{abi_arg, opt_str_arg, str_arg};
#[cfg(feature = "build-lib")]
use super::last_error::run;
#[cfg(all(doc, feature = "bench"))] // the link in hexrpc_bench_model_image's documentation
use super::library::hexrpc_library_open;
#[cfg(feature = "bench")]
use crate::bench;
#[cfg(feature = "build-lib")]
use crate::build;
#[cfg(feature = "build-lib")]
use crate::error::hexrpc_status;
#[cfg(feature = "bench")]
use crate::error::Failure;

/// Writes the static image `image` gives to `bytes` and `length`; either NULL is refused before
/// `image` runs (it may build one).
///
/// # Safety
/// `bytes` and `length` are NULL or valid for one write.
#[cfg(feature = "bench")]
unsafe fn image_out(
    bytes: *mut *const u8,
    length: *mut usize,
    image: impl FnOnce() -> Result<&'static [u8], Failure>,
) -> Result<(), Failure> {
    if bytes.is_null() || length.is_null() {
        return Err(Failure::null("bytes or length"));
    }
    let image = image()?;
    // SAFETY: both are non-null and valid for one write (the caller's contract).
    unsafe {
        write_out(bytes, image.as_ptr(), "bytes")?;
        write_out(length, image.len(), "length")
    }
}

/// Bench builds only: a sample model file the bench runs with no compiler, to pass to
/// `hexrpc_model_open`: input `x` (uint8, 1×`n`, `n` 1 to 1,048,576), outputs `y = x + 3` and
/// `z = y + 5`, two launches in one FastRPC call. The bytes are static (never freed; one copy per
/// `n`). Thread-safe.
///
/// # Safety
/// `bytes` and `length` are NULL or valid for one write.
#[cfg(feature = "bench")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_bench_sample_model(n: usize, bytes: *mut *const u8, length: *mut usize) -> hexrpc_status {
    run(|| {
        if n == 0 || n > 1 << 20 {
            return Err(Failure::invalid("bench-image", format!("n = {n}: 1..=1048576")));
        }
        // SAFETY: the caller's contract.
        unsafe { image_out(bytes, length, || Ok(bench::sample_model(n))) }
    })
}

/// Bench builds only: the image of a bench DSP model (`"scale_f32"`, `"add_u8"`, `"sleep_ms"`),
/// to pass to [`hexrpc_library_open`]. The bytes are static (never freed). Thread-safe.
///
/// # Safety
/// `model` is NULL or NUL-terminated; `bytes` and `length` are NULL or valid for one write.
#[cfg(feature = "bench")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_bench_model_image(model: *const c_char, bytes: *mut *const u8, length: *mut usize) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let model = unsafe { str_arg(model, "model") }?;
        // SAFETY: the caller's contract.
        unsafe { image_out(bytes, length, || bench::model_image(model)) }
    })
}

/// Bench builds with the executor only: builds (once per process) an image of kernel `kernel`
/// of the suite with an entry for `signature` and `abi`, which the bench runs as Hexagon code
/// under qemu-hexagon. `HEXRPC_ERR_UNAVAILABLE` names the missing tool. The bytes are static.
/// Thread-safe (builds run one at a time).
///
/// # Safety
/// `kernel` and `signature` are NULL or NUL-terminated; `bytes` and `length` are NULL or valid
/// for one write.
#[cfg(feature = "bench")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_bench_kernel_image(
    kernel: *const c_char,
    signature: *const c_char,
    abi: u32,
    bytes: *mut *const u8,
    length: *mut usize,
) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let (kernel, signature) = unsafe { (str_arg(kernel, "kernel")?, str_arg(signature, "signature")?) };
        // SAFETY: the caller's contract.
        unsafe { image_out(bytes, length, || bench::kernel_image(kernel, signature, abi_arg(abi)?)) }
    })
}

/// `hexrpc build-lib` as a function (builds with the `build-lib` feature, the default; also
/// without the bench). Compiles kernel `kernel_name` (NULL: the file's stem) of the C file
/// `kernel_c` with an entry for `signature` and `abi` into the Hexagon shared object `out` (with
/// its build record), checked as `build-lib` checks it. Needs clang-19 and ld.lld-19:
/// `HEXRPC_ERR_UNAVAILABLE` names a missing tool; a refusal names its cause. Thread-safe (builds
/// run one at a time).
///
/// # Safety
/// `kernel_c`, `signature` and `out` are NULL or NUL-terminated; `kernel_name` is NULL or
/// NUL-terminated.
#[cfg(feature = "build-lib")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_build_library(
    kernel_c: *const c_char,
    kernel_name: *const c_char,
    signature: *const c_char,
    abi: u32,
    out: *const c_char,
) -> hexrpc_status {
    run(|| {
        // SAFETY: the caller's contract.
        let (kernel_c, signature, out) =
            unsafe { (str_arg(kernel_c, "kernel_c")?, str_arg(signature, "signature")?, str_arg(out, "out")?) };
        // SAFETY: the caller's contract.
        let kernel_name = unsafe { opt_str_arg(kernel_name, "kernel_name") }?;
        build::build_library(std::path::Path::new(kernel_c), kernel_name, signature, abi_arg(abi)?, std::path::Path::new(out))
    })
}

/// The name `hexrpc_build_library` had when it needed the bench: the same function.
///
/// # Safety
/// As [`hexrpc_build_library`].
#[cfg(feature = "bench")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_bench_build_library(
    kernel_c: *const c_char,
    kernel_name: *const c_char,
    signature: *const c_char,
    abi: u32,
    out: *const c_char,
) -> hexrpc_status {
    // SAFETY: the same contract.
    unsafe { hexrpc_build_library(kernel_c, kernel_name, signature, abi, out) }
}
