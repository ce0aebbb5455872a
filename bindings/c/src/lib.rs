//! hexrpc for C and C++: `libhexrpc.so`, `libhexrpc.a` and `include/hexrpc.h` (generated from
//! this crate by cbindgen; CI regenerates it and fails on a difference).
//!
//! # Conventions (in the style of rustls-ffi, libgit2 and SQLite)
//!
//! * **Handles** (`hexrpc_session *`, `hexrpc_lease *`, `hexrpc_library *`) are opaque: their
//!   value names an entry of a process-wide table and is never dereferenced. Passing NULL, a
//!   handle that was freed or closed (twice or more), a forged value or a handle of another kind
//!   returns `HEXRPC_ERR_HANDLE` (or `HEXRPC_ERR_NULL`): never undefined behaviour.
//! * **Status codes**: every function returns a [`hexrpc_status`]; `HEXRPC_OK` is 0. After a
//!   failure, `hexrpc_last_error_message()` on the same thread names the stage that failed and the
//!   cause (`"library-open: the DSP answered 4 (AEE_EUNABLETOLOAD...)"`), until the next failing
//!   call on that thread. Successful calls leave it alone and allocate nothing on the launch
//!   path.
//! * **Out parameters** are written only on success.
//! * **Threads**: every function may be called from any thread, concurrently, on the same or
//!   different handles, unless its documentation says otherwise. Launches on one library from
//!   several threads run concurrently. Closing or freeing a handle while another thread is inside
//!   a call that uses it is safe: the call finishes, and the object is released when it returns.
//! * **Ownership**: closing a session closes every lease and library made from it (their handles
//!   become dead). A lease's host pointer stays valid until the lease is freed or its session
//!   closed; using it afterwards is the caller's bug (no library can guard a raw pointer).
//! * **Panics**: a panic inside hexrpc is caught and returned as `HEXRPC_ERR_PANIC` in builds that
//!   unwind; release builds abort (the workspace profile sets `panic = "abort"`).
//!
//! The memory of a lease is shared with the DSP: the DSP writes it during a launch, so read
//! outputs after the launch has returned.
//!
//! The Rust layer underneath ([`objects`]) is also what the Python package uses.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

pub mod batch;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "build-lib")]
pub mod build;
pub mod error;
mod logcb;
pub mod objects;
pub mod seam;
mod table;

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use hexrpc_runtime::launch::{AbiVersion, Scalar, ScalarType, MAX_BUFFERS};

pub use error::{hexrpc_status, Failure};
use objects::{scalar_from_bits, ViewArg};
use table::Obj;

/// A session: the DSP process, its channel, the ION device and the reverse file service.
pub struct hexrpc_session {
    _opaque: [u8; 0],
}

/// An ION buffer shared with the DSP: a lease of its own (`hexrpc_lease_alloc`) or a
/// sub-allocation of an arena (`hexrpc_arena_alloc`), used alike.
pub struct hexrpc_lease {
    _opaque: [u8; 0],
}

/// An arena: one lease carved into aligned sub-allocations (`hexrpc_arena_alloc`), so that many
/// buffers are one lease for the DSP (a FastRPC call carries at most 15).
pub struct hexrpc_arena {
    _opaque: [u8; 0],
}

/// What `hexrpc_arena_get_stats` reports of an arena.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hexrpc_arena_stats {
    /// Bytes the arena manages (its lease's length, a multiple of the alignment).
    pub capacity: u64,
    /// Bytes in live sub-allocations (each rounded up to the 128-byte granule).
    pub used: u64,
    /// Bytes free (`capacity - used`).
    pub free: u64,
    /// The largest free range in bytes: a sub-allocation up to this long fits (at the default
    /// alignment).
    pub largest_free: u64,
    /// Live sub-allocations.
    pub live: u32,
    /// Bookkeeping blocks in use (free and used ranges) and the arena's total (`HEXRPC_ARENA_BLOCKS`).
    pub blocks_in_use: u32,
    /// The arena's bookkeeping blocks.
    pub blocks: u32,
    /// Zero.
    pub reserved: u32,
}

/// An open library together with its kernel's signature and launch ABI.
pub struct hexrpc_library {
    _opaque: [u8; 0],
}

/// Launches of one library's kernel table, run together in one FastRPC call.
pub struct hexrpc_batch {
    _opaque: [u8; 0],
}

/// A buffer argument: `length` bytes at `offset` of `lease`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hexrpc_view {
    /// The lease.
    pub lease: *const hexrpc_lease,
    /// Offset of the view in the lease, in bytes (any offset with ABI v2).
    pub offset: usize,
    /// Length of the view in bytes.
    pub length: usize,
}

/// A scalar argument: its type (`HEXRPC_SCALAR_*`) and its bits (the value's little-endian bits
/// zero-extended; `f32`/`f64` as their IEEE bits). The header's `hexrpc_scalar_*` helpers build
/// one. A launch refuses (`HEXRPC_ERR_INVALID`, the last error naming the scalar's index and
/// field) an unknown `kind`, a non-zero `reserved`, and `bits` wider than the kind (a negative
/// `int8_t` sign-extended to 64 bits, a `uint32_t` value above 2^32 - 1): nothing is truncated.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hexrpc_scalar {
    /// One of `HEXRPC_SCALAR_*`.
    pub kind: u32,
    /// Zero (anything else is refused).
    pub reserved: u32,
    /// The value's bits, zero-extended: at most 8, 16, 32 or 64 significant bits by the kind.
    pub bits: u64,
}

/// Launch ABI as the library's build record names it (v2 when a signature is given and the
/// library has no record).
pub const HEXRPC_ABI_RECORDED: u32 = 0;
/// Launch ABI v1 (tinygrad's; views at offset 0 only).
pub const HEXRPC_ABI_V1: u32 = 1;
/// Launch ABI v2 (hexrpc's; views at any offset).
pub const HEXRPC_ABI_V2: u32 = 2;

/// The least alignment (and size granule) of an arena's sub-allocations: one HVX vector.
pub const HEXRPC_ARENA_ALIGN: usize = 128;
/// Bookkeeping blocks of an arena (free and used ranges together).
pub const HEXRPC_ARENA_BLOCKS: u32 = 1024;
const _: () = assert!(HEXRPC_ARENA_ALIGN == hexrpc_hal::ARENA_ALIGN && HEXRPC_ARENA_BLOCKS as usize == hexrpc_hal::ARENA_BLOCKS);

/// `int8_t`.
pub const HEXRPC_SCALAR_I8: u32 = 1;
/// `uint8_t`.
pub const HEXRPC_SCALAR_U8: u32 = 2;
/// `int16_t`.
pub const HEXRPC_SCALAR_I16: u32 = 3;
/// `uint16_t`.
pub const HEXRPC_SCALAR_U16: u32 = 4;
/// `int32_t`.
pub const HEXRPC_SCALAR_I32: u32 = 5;
/// `uint32_t`.
pub const HEXRPC_SCALAR_U32: u32 = 6;
/// `int64_t`.
pub const HEXRPC_SCALAR_I64: u32 = 7;
/// `uint64_t`.
pub const HEXRPC_SCALAR_U64: u32 = 8;
/// IEEE binary16, as its bits.
pub const HEXRPC_SCALAR_F16: u32 = 9;
/// `float`.
pub const HEXRPC_SCALAR_F32: u32 = 10;
/// `double`.
pub const HEXRPC_SCALAR_F64: u32 = 11;

/// `hexrpc_session_open_bench` flag: the bench runs executor images as real Hexagon code
/// (refused with `HEXRPC_ERR_UNAVAILABLE`, naming the missing tool, without clang-19, ld.lld-19
/// and qemu-hexagon).
pub const HEXRPC_BENCH_EXECUTOR: u32 = 1;
/// `hexrpc_session_open_bench` flag: launches return at once without reaching the simulated DSP
/// (a measuring instrument for what hexrpc adds per launch; outputs are not written).
pub const HEXRPC_BENCH_RETURNING_LAUNCHES: u32 = 2;

struct LastError {
    status: hexrpc_status,
    stage: CString,
    message: CString,
}

thread_local! {
    static LAST: RefCell<Option<LastError>> = const { RefCell::new(None) };
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

fn set_last(f: &Failure) {
    let e = LastError { status: f.status, stage: cstring(f.stage), message: cstring(&f.to_string()) };
    LAST.with(|l| *l.borrow_mut() = Some(e));
}

/// Runs `body`, records a failure (or a panic) as the thread's last error, returns the status.
fn run(body: impl FnOnce() -> Result<(), Failure>) -> hexrpc_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => hexrpc_status::HEXRPC_OK,
        Ok(Err(f)) => {
            set_last(&f);
            f.status
        }
        Err(_) => {
            set_last(&Failure::new(hexrpc_status::HEXRPC_ERR_PANIC, "panic", "hexrpc panicked (a bug); see the log"));
            hexrpc_status::HEXRPC_ERR_PANIC
        }
    }
}

fn handle_value<T>(p: *const T) -> u64 {
    p.addr() as u64
}

fn handle_ptr<T>(h: u64) -> *mut T {
    std::ptr::without_provenance_mut(h as usize)
}

/// # Safety
/// `p` is NULL or valid for writing one `T`.
unsafe fn write_out<T>(p: *mut T, v: T, what: &'static str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller guarantees it is valid for one write of `T`.
    unsafe { p.write(v) };
    Ok(())
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn str_arg<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller guarantees it is NUL-terminated and lives for the call.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|_| Failure::invalid("argument", format!("{what} is not UTF-8")))
}

fn abi_arg(abi: u32) -> Result<AbiVersion, Failure> {
    match abi {
        HEXRPC_ABI_V1 => Ok(AbiVersion::V1),
        HEXRPC_ABI_V2 => Ok(AbiVersion::V2),
        other => Err(Failure::invalid("argument", format!("abi {other}: use HEXRPC_ABI_V1 or HEXRPC_ABI_V2"))),
    }
}

/// `HEXRPC_ABI_RECORDED` is `None`.
fn abi_opt(abi: u32) -> Result<Option<AbiVersion>, Failure> {
    if abi == HEXRPC_ABI_RECORDED {
        Ok(None)
    } else {
        abi_arg(abi).map(Some)
    }
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn opt_str_arg<'a>(p: *const c_char, what: &'static str) -> Result<Option<&'a str>, Failure> {
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
fn scalar_arg(i: usize, s: &hexrpc_scalar) -> Result<Scalar, Failure> {
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

/// The major version of this hexrpc.h (and of the library it was generated with). Each of the
/// three parts fits 16 bits (a static assertion in the library's source), so `HEXRPC_VERSION`
/// cannot collide.
pub const HEXRPC_VERSION_MAJOR: u32 = 0;
/// The minor version of this hexrpc.h.
pub const HEXRPC_VERSION_MINOR: u32 = 1;
/// The patch version of this hexrpc.h.
pub const HEXRPC_VERSION_PATCH: u32 = 0;

/// True if a version part fits the 16 bits [`HEXRPC_VERSION`] gives it.
const fn fits_16_bits(part: u32) -> bool {
    part <= 0xffff
}

// Each part must fit the 16 bits `HEXRPC_VERSION` gives it, or two versions would pack to the
// same number.
const _: () = assert!(
    fits_16_bits(HEXRPC_VERSION_MAJOR) && fits_16_bits(HEXRPC_VERSION_MINOR) && fits_16_bits(HEXRPC_VERSION_PATCH),
    "each part of the version must fit 16 bits (HEXRPC_VERSION packs MAJOR << 32 | MINOR << 16 | PATCH)"
);

/// `major.minor.patch` packed as `HEXRPC_VERSION` is: `major << 32 | minor << 16 | patch`, each
/// part 16 bits (the header's `HEXRPC_VERSION_PACK(major, minor, patch)`). Two versions whose
/// parts fit 16 bits pack to different numbers, ordered as the versions are.
pub const fn version_pack(major: u32, minor: u32, patch: u32) -> u64 {
    (major as u64) << 32 | (minor as u64) << 16 | patch as u64
}

/// The parts of a number packed by [`version_pack`]: `(major, minor, patch)`. A major above
/// 16 bits (not a packed version) is given as it is, so it matches no library's.
const fn version_parts(v: u64) -> (u64, u64, u64) {
    (v >> 32, (v >> 16) & 0xffff, v & 0xffff)
}

/// This hexrpc.h's version as one number, `MAJOR << 32 | MINOR << 16 | PATCH` (an unsigned
/// 64-bit number; each part 16 bits, so no two versions collide, which `MAJOR * 10000 + MINOR *
/// 100 + PATCH` did once a part reached 100): what a program passes to
/// [`hexrpc_version_check`] (`HEXRPC_VERSION_CHECK()` does). The header defines it from the
/// three parts (`HEXRPC_VERSION_PACK`), with `HEXRPC_VERSION_CMP` and `HEXRPC_VERSION_AT_LEAST`
/// to compare versions in `#if` (cbindgen.toml's trailer).
pub const HEXRPC_VERSION: u64 = version_pack(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH);

/// The library's version, a static string ("0.1.0"). Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library's version as one number, packed as the header's `HEXRPC_VERSION` is
/// (`MAJOR << 32 | MINOR << 16 | PATCH`, each part 16 bits; compare with `HEXRPC_VERSION`, or
/// `HEXRPC_VERSION_PACK(major, minor, patch)`). Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_version_number() -> u64 {
    HEXRPC_VERSION
}

/// Whether this library serves a program compiled against the hexrpc.h of version `header`
/// (pass `HEXRPC_VERSION`, packed as `MAJOR << 32 | MINOR << 16 | PATCH`, or call
/// `HEXRPC_VERSION_CHECK()`): `HEXRPC_OK` when the majors are equal and the library's minor is
/// at least the header's (for major 0, the minors must be equal: 0.x releases may change the
/// ABI); otherwise `HEXRPC_ERR_UNAVAILABLE`, and `hexrpc_last_error_message()` names both
/// versions. Call it once at start-up, before anything else. Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_version_check(header: u64) -> hexrpc_status {
    run(|| version_compatible(header, HEXRPC_VERSION))
}

fn version_compatible(header: u64, library: u64) -> Result<(), Failure> {
    let ((hmaj, hmin, hpat), (lmaj, lmin, lpat)) = (version_parts(header), version_parts(library));
    let ok = hmaj == lmaj && if hmaj == 0 { hmin == lmin } else { lmin >= hmin };
    if ok {
        return Ok(());
    }
    Err(Failure::unavailable(
        "version",
        format!(
            "the program was compiled against hexrpc.h {hmaj}.{hmin}.{hpat}, this libhexrpc is {lmaj}.{lmin}.{lpat}: \
             rebuild the program against this library's header, or install the library it was built for"
        ),
    ))
}

/// The message of the last failure on this thread (`"STAGE: CAUSE"`), or `""` if none. The
/// pointer stays valid until the next failing call on this thread. Thread-safe (per thread).
#[no_mangle]
pub extern "C" fn hexrpc_last_error_message() -> *const c_char {
    LAST.with(|l| l.borrow().as_ref().map_or(c"".as_ptr(), |e| e.message.as_ptr()))
}

/// The stage of the last failure on this thread (`"library-open"`, `"invoke"`, `"launch-pack"`,
/// `"handle"`, ...), or `""` if none. Valid like [`hexrpc_last_error_message`].
#[no_mangle]
pub extern "C" fn hexrpc_last_error_stage() -> *const c_char {
    LAST.with(|l| l.borrow().as_ref().map_or(c"".as_ptr(), |e| e.stage.as_ptr()))
}

/// The status of the last failure on this thread, or `HEXRPC_OK` if none. Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_last_error_status() -> hexrpc_status {
    LAST.with(|l| l.borrow().as_ref().map_or(hexrpc_status::HEXRPC_OK, |e| e.status))
}

/// The name of a status code (`"HEXRPC_ERR_HANDLE"`), or `"unknown"`; a static string.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_status_name(status: i32) -> *const c_char {
    let s: &CStr = match status {
        0 => c"HEXRPC_OK",
        1 => c"HEXRPC_ERR_NULL",
        2 => c"HEXRPC_ERR_HANDLE",
        3 => c"HEXRPC_ERR_INVALID",
        4 => c"HEXRPC_ERR_REFUSED",
        5 => c"HEXRPC_ERR_UNAVAILABLE",
        6 => c"HEXRPC_ERR_RECOVERABLE",
        7 => c"HEXRPC_ERR_DSP",
        8 => c"HEXRPC_ERR_FAILED",
        9 => c"HEXRPC_ERR_PANIC",
        _ => c"unknown",
    };
    s.as_ptr()
}

/// Starts a session on the device board named `board` (`"comma-three"`, `"msm-android"`,
/// `"qcom-rb5"`, `"upstream"`), or, with `board` NULL, on the board this machine's device-tree
/// model names (as [`hexrpc_detect_board`] finds it): ION, DSP shell, FastRPC channel, DSP
/// process, reverse-RPC listener (a thread serving the DSP's file requests). On failure nothing
/// is left open and the message names the stage. Thread-safe.
///
/// # Safety
/// `board` is NULL or a NUL-terminated string; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_open(board: *const c_char, out: *mut *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let board = if board.is_null() {
            objects::detect_board()?
        } else {
            // SAFETY: the caller's contract.
            unsafe { str_arg(board, "board") }?
        };
        let s = objects::SessionObj::open_device(board)?;
        let h = table::insert(Obj::Session(Arc::new(s)))?;
        // SAFETY: `out` is non-null and valid for one write (the caller's contract).
        unsafe { write_out(out, handle_ptr(h), "out") }
    })
}

pub use logcb::{hexrpc_log_fn, HEXRPC_LOG_DEBUG, HEXRPC_LOG_ERROR, HEXRPC_LOG_INFO, HEXRPC_LOG_OFF, HEXRPC_LOG_TRACE, HEXRPC_LOG_WARN};

/// Hands hexrpc's log records of `max_level` (`HEXRPC_LOG_ERROR` .. `HEXRPC_LOG_TRACE`) and
/// above to `f(user, level, target, message)`, on the thread that made each record (several
/// threads may call it at once; it must not call into hexrpc). `f` NULL removes the callback
/// (records are dropped, as before any call). Calling again replaces it; the previous callback is
/// not called after this returns. `HEXRPC_ERR_UNAVAILABLE` when the process already has another
/// logger of Rust's `log` facade (it keeps receiving the records). Thread-safe.
///
/// # Safety
/// `f`, if not NULL, is a function safe to call from any thread with `user` until it is replaced
/// or removed.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_set_log_callback(f: hexrpc_log_fn, user: *mut c_void, max_level: u32) -> hexrpc_status {
    run(|| logcb::set(f, user, max_level))
}

/// The device board this machine's device-tree model (`/proc/device-tree/model`) names, by
/// hexrpc's board table: `*name` is set to a static string (`"comma-three"`, ...). When the model
/// is unreadable or no board claims it: `HEXRPC_ERR_UNAVAILABLE`, and the message quotes the
/// model and lists the boards to pass by name. Thread-safe.
///
/// # Safety
/// `name` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_detect_board(name: *mut *const c_char) -> hexrpc_status {
    run(|| {
        // The board names as NUL-terminated strings, made once and kept for the process.
        static C_NAMES: std::sync::OnceLock<Vec<(&'static str, CString)>> = std::sync::OnceLock::new();
        let names = C_NAMES.get_or_init(|| hexrpc_bsp::BOARDS.iter().filter_map(|b| Some((b.name, CString::new(b.name).ok()?))).collect());
        let board = objects::detect_board()?;
        let c = names.iter().find(|(n, _)| *n == board).map(|(_, c)| c.as_ptr()).ok_or_else(|| Failure::invalid("board", board))?;
        // SAFETY: `name` is NULL (refused by write_out) or valid for one write.
        unsafe { write_out(name, c, "name") }
    })
}

/// Starts a session on the isolated bench (simulated kernel and DSP; builds with the `bench`
/// feature only). `flags`: `HEXRPC_BENCH_EXECUTOR`, `HEXRPC_BENCH_RETURNING_LAUNCHES`. Its DSP
/// knows the models `scale_f32` (`buf,buf,f32`), `add_u8` (`buf,buf,u32`) and `sleep_ms`
/// (`buf,u32`); see `hexrpc_bench_model_image`. Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[cfg(feature = "bench")]
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_open_bench(flags: u32, out: *mut *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        if flags & !(HEXRPC_BENCH_EXECUTOR | HEXRPC_BENCH_RETURNING_LAUNCHES) != 0 {
            return Err(Failure::invalid("argument", format!("unknown bench flags {flags:#x}")));
        }
        let s = objects::SessionObj::open_bench(flags & HEXRPC_BENCH_EXECUTOR != 0, flags & HEXRPC_BENCH_RETURNING_LAUNCHES != 0)?;
        let h = table::insert(Obj::Session(Arc::new(s)))?;
        // SAFETY: `out` is non-null and valid for one write (the caller's contract).
        unsafe { write_out(out, handle_ptr(h), "out") }
    })
}

/// Closes a session and every lease and library made from it (all their handles become dead):
/// libraries are closed, leases and arenas freed, the listener stopped, the DSP process asked to exit, the
/// channel and ION device closed. Calls in flight on other threads finish first. Thread-safe; a
/// second close returns `HEXRPC_ERR_HANDLE`.
#[no_mangle]
pub extern "C" fn hexrpc_session_close(session: *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        let removed = table::remove(handle_value(session), |o| matches!(o, Obj::Session(_)), "session")?;
        drop(removed);
        Ok(())
    })
}

/// Rebuilds the DSP side after `HEXRPC_ERR_RECOVERABLE` (a DSP restart or a passed deadline) and
/// re-opens every library; handles stay valid. Retries within the board's recovery budget; if
/// that is spent (the DSP stays down), calls return `HEXRPC_ERR_FAILED` until a further
/// `hexrpc_session_recover`, which starts with a fresh budget, succeeds. Does nothing on a
/// healthy session. Thread-safe (concurrent callers share one recovery); waits for calls in
/// flight.
#[no_mangle]
pub extern "C" fn hexrpc_session_recover(session: *mut hexrpc_session) -> hexrpc_status {
    run(|| table::session(handle_value(session))?.recover())
}

/// Writes 1 to `healthy` while calls can be made, 0 while the session needs
/// `hexrpc_session_recover` (or recovery failed). Thread-safe.
///
/// # Safety
/// `healthy` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_session_health(session: *mut hexrpc_session, healthy: *mut u32) -> hexrpc_status {
    run(|| {
        let s = table::session(handle_value(session))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(healthy, u32::from(s.is_healthy()), "healthy") }
    })
}

/// Bench sessions only: simulates a DSP subsystem restart (the next call fails with
/// `HEXRPC_ERR_RECOVERABLE`). Thread-safe.
#[cfg(feature = "bench")]
#[no_mangle]
pub extern "C" fn hexrpc_bench_restart_dsp(session: *mut hexrpc_session) -> hexrpc_status {
    run(|| {
        let s = table::session(handle_value(session))?;
        let bench = s.bench().ok_or_else(|| Failure::invalid("argument", "not a bench session"))?;
        bench.restart_dsp();
        Ok(())
    })
}

/// Allocates an ION buffer of at least `length` bytes (rounded up to a page), shared with the
/// DSP and mapped here. Thread-safe.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_lease_alloc(session: *mut hexrpc_session, length: usize, out: *mut *mut hexrpc_lease) -> hexrpc_status {
    run(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let s = table::session(handle_value(session))?;
        let lease = s.alloc(length)?;
        let h = table::insert(Obj::Lease(Arc::new(lease)))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out, handle_ptr(h), "out") }
    })
}

/// The lease's memory in this process: its address and its length (the rounded-up size). The
/// memory is valid until the lease is freed or its session closed; the DSP writes it during a
/// launch. Either out pointer may be NULL. Thread-safe.
///
/// # Safety
/// `ptr` and `length` are each NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_lease_memory(lease: *mut hexrpc_lease, ptr: *mut *mut c_void, length: *mut usize) -> hexrpc_status {
    run(|| {
        let l = table::lease(handle_value(lease))?;
        let (addr, len) = l.memory();
        if !ptr.is_null() {
            // SAFETY: the caller's contract.
            unsafe { write_out(ptr, std::ptr::with_exposed_provenance_mut::<c_void>(addr), "ptr") }?;
        }
        if !length.is_null() {
            // SAFETY: the caller's contract.
            unsafe { write_out(length, len, "length") }?;
        }
        Ok(())
    })
}

/// Frees a lease (its mapping, share fd and ION handle), once no launch in flight uses it.
/// Thread-safe; a second free returns `HEXRPC_ERR_HANDLE`.
#[no_mangle]
pub extern "C" fn hexrpc_lease_free(lease: *mut hexrpc_lease) -> hexrpc_status {
    run(|| {
        drop(table::remove(handle_value(lease), |o| matches!(o, Obj::Lease(_)), "lease")?);
        Ok(())
    })
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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let s = table::session(handle_value(session))?;
        let arena = s.arena(length)?;
        let h = table::insert(Obj::Arena(Arc::new(arena)))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out, handle_ptr(h), "out") }
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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let a = table::arena(handle_value(arena))?;
        let sub = a.alloc(length, align)?;
        let h = table::insert(Obj::Lease(Arc::new(sub)))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out, handle_ptr(h), "out") }
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
    run(|| {
        drop(table::remove(handle_value(arena), |o| matches!(o, Obj::Arena(_)), "arena")?);
        Ok(())
    })
}

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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: non-null and valid for `length` bytes (the caller's contract); copied at once.
        let image = unsafe { std::slice::from_raw_parts(bytes, length) }.to_vec();
        let s = table::session(handle_value(session))?;
        let k = s.open_library(name, image, signature, abi_opt(abi)?)?;
        let h = table::insert(Obj::Kernel(Arc::new(k)))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out, handle_ptr(h), "out") }
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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let s = table::session(handle_value(session))?;
        let k = s.open_library_path(std::path::Path::new(path), signature, abi_opt(abi)?)?;
        let h = table::insert(Obj::Kernel(Arc::new(k)))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out, handle_ptr(h), "out") }
    })
}

/// Closes a library (on the DSP, and withdraws its image) once no launch in flight uses it.
/// Thread-safe; a second close returns `HEXRPC_ERR_HANDLE`.
#[no_mangle]
pub extern "C" fn hexrpc_library_close(library: *mut hexrpc_library) -> hexrpc_status {
    run(|| {
        drop(table::remove(handle_value(library), |o| matches!(o, Obj::Kernel(_)), "library")?);
        Ok(())
    })
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
        if nviews > MAX_BUFFERS {
            return Err(Failure::refused(format!("{nviews} buffers: a launch carries at most {MAX_BUFFERS}")));
        }
        if nscalars > hexrpc_runtime::launch::Signature::MAX_PARAMS {
            return Err(Failure::refused(format!("{nscalars} scalars: too many")));
        }
        let mut sc: heapless::Vec<Scalar, { hexrpc_runtime::launch::Signature::MAX_PARAMS }> = heapless::Vec::new();
        for (i, s) in scalars.iter().enumerate() {
            let _ = sc.push(scalar_arg(i, s)?);
        }
        let (kernel, leases, index) =
            table::kernel_and_leases::<MAX_BUFFERS>(handle_value(library), views.iter().map(|v| handle_value(v.lease)))?;
        let mut args: heapless::Vec<ViewArg<'_>, MAX_BUFFERS> = heapless::Vec::new();
        for (v, &j) in views.iter().zip(&index) {
            let Some(l) = leases.get(usize::from(j)) else { return Err(Failure::other("launch-pack", "lease lookup")) };
            let _ = args.push(ViewArg { lease: l, offset: v.offset, len: v.length });
        }
        let deadline = (deadline_ms != 0).then(|| Duration::from_millis(u64::from(deadline_ms)));
        let us = kernel.launch(&args, &sc, deadline)?;
        if !dsp_us.is_null() {
            // SAFETY: the caller's contract.
            unsafe { write_out(dsp_us, us, "dsp_us") }?;
        }
        Ok(())
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
        if bytes.is_null() || length.is_null() {
            return Err(Failure::null("bytes or length"));
        }
        let image = bench::model_image(model)?;
        // SAFETY: the caller's contract.
        unsafe {
            write_out(bytes, image.as_ptr(), "bytes")?;
            write_out(length, image.len(), "length")
        }
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
        if bytes.is_null() || length.is_null() {
            return Err(Failure::null("bytes or length"));
        }
        let image = bench::kernel_image(kernel, signature, abi_arg(abi)?)?;
        // SAFETY: the caller's contract.
        unsafe {
            write_out(bytes, image.as_ptr(), "bytes")?;
            write_out(length, image.len(), "length")
        }
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

/// The array `p` of `n` elements a C caller passed: empty for `n` 0 (any `p`), NULL with `n` > 0
/// refused as `HEXRPC_ERR_NULL` naming `what`.
///
/// # Safety
/// `p` is NULL or valid for reading `n` elements for `'a`.
unsafe fn c_slice<'a, T>(p: *const T, n: usize, what: &'static str) -> Result<&'a [T], Failure> {
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
unsafe fn view_args(views: *const hexrpc_view, nviews: usize) -> Result<Vec<(Arc<objects::LeaseObj>, usize, usize)>, Failure> {
    // SAFETY: the caller's contract.
    let views = unsafe { c_slice(views, nviews, "views") }?;
    if nviews > MAX_BUFFERS {
        return Err(Failure::refused(format!("{nviews} buffers: a launch carries at most {MAX_BUFFERS}")));
    }
    views
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let l = table::lease(handle_value(v.lease)).map_err(|_| {
                Failure::new(error::hexrpc_status::HEXRPC_ERR_HANDLE, "handle", format!("buffer {i}: not a live lease handle"))
            })?;
            Ok((l, v.offset, v.length))
        })
        .collect()
}

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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        if kernels.is_null() {
            return Err(Failure::null("kernels"));
        }
        if nkernels > hexrpc_runtime::launch::MAX_BATCH_KERNELS {
            return Err(Failure::invalid(
                "batch",
                format!("{nkernels} kernels: a table holds 1..={}", hexrpc_runtime::launch::MAX_BATCH_KERNELS),
            ));
        }
        // SAFETY: non-null and valid for `nkernels` reads (the caller's contract).
        let ptrs = unsafe { std::slice::from_raw_parts(kernels, nkernels) };
        let mut sigs = Vec::with_capacity(nkernels);
        for &p in ptrs {
            // SAFETY: each is NULL or NUL-terminated (the caller's contract).
            sigs.push(unsafe { str_arg(p, "kernels[i]") }?);
        }
        let kernel = table::kernel(handle_value(library))?;
        let b = batch::BatchObj::new(kernel, &sigs)?;
        let h = table::insert(Obj::Batch(Arc::new(b)))?;
        // SAFETY: `out` is non-null and valid for one write (the caller's contract).
        unsafe { write_out(out, handle_ptr(h), "out") }
    })
}

/// Appends a launch of kernel `kernel` of the table on `nviews` views and `nscalars` scalars
/// (checked as `hexrpc_launch` checks them, and against the batch's capacity with the records
/// already there: a batch that could not run is refused now, `HEXRPC_ERR_REFUSED`); writes the
/// record's index to `record` (may be NULL). Thread-safe.
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
        if nscalars > hexrpc_runtime::launch::Signature::MAX_PARAMS {
            return Err(Failure::refused(format!("{nscalars} scalars: too many")));
        }
        let sc = scalars.iter().enumerate().map(|(i, s)| scalar_arg(i, s)).collect::<Result<Vec<_>, _>>()?;
        let r = b.push(kernel as usize, views, sc)?;
        if !record.is_null() {
            // SAFETY: the caller's contract.
            unsafe { write_out(record, r, "record") }?;
        }
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
/// run. Thread-safe.
///
/// # Safety
/// `dsp_us` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hexrpc_batch_run(batch: *mut hexrpc_batch, deadline_ms: u32, dsp_us: *mut u64) -> hexrpc_status {
    run(|| {
        let b = table::batch(handle_value(batch))?;
        let deadline = (deadline_ms != 0).then(|| Duration::from_millis(u64::from(deadline_ms)));
        let us = b.run(deadline)?;
        if !dsp_us.is_null() {
            // SAFETY: the caller's contract.
            unsafe { write_out(dsp_us, us, "dsp_us") }?;
        }
        Ok(())
    })
}

/// Frees a batch (its records and the leases only it kept alive). Thread-safe; a freed handle
/// is `HEXRPC_ERR_HANDLE` afterwards.
#[no_mangle]
pub extern "C" fn hexrpc_batch_free(batch: *mut hexrpc_batch) -> hexrpc_status {
    run(|| {
        drop(table::remove(handle_value(batch), |o| matches!(o, Obj::Batch(_)), "batch")?);
        Ok(())
    })
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn header_constants_are_the_crate_version() {
        let v: Vec<u32> = env!("CARGO_PKG_VERSION").split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!((HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH), (v[0], v[1], v[2]));
        assert_eq!(HEXRPC_VERSION, u64::from(v[0]) << 32 | u64::from(v[1]) << 16 | u64::from(v[2]));
        assert_eq!(hexrpc_version_number(), HEXRPC_VERSION);
    }

    #[test]
    fn packed_versions_never_collide_and_order_as_the_versions() {
        // Where MAJOR * 10000 + MINOR * 100 + PATCH was ambiguous: 1.100.0 and 2.0.0 were both
        // 20000, 1.0.100 and 1.1.0 both 10100.
        let ordered = [(0, 0, 0), (0, 0, 65535), (0, 1, 0), (0, 99, 99), (0, 100, 0), (1, 0, 99), (1, 0, 100), (1, 1, 0), (1, 99, 0)];
        let ordered = ordered.iter().chain(&[(1, 100, 0), (2, 0, 0), (65535, 65535, 65535)]);
        let packed: Vec<u64> = ordered.clone().map(|&(a, b, c)| version_pack(a, b, c)).collect();
        assert!(packed.windows(2).all(|w| w[0] < w[1]), "{packed:x?}");
        for (&(a, b, c), &p) in ordered.zip(&packed) {
            assert_eq!(version_parts(p), (u64::from(a), u64::from(b), u64::from(c)));
        }
        assert_eq!(version_pack(1, 2, 3), 0x0000_0001_0002_0003);
    }

    #[test]
    fn compatibility_rules() {
        let v = version_pack;
        assert!(version_compatible(v(0, 1, 0), v(0, 1, 0)).is_ok());
        assert!(version_compatible(v(0, 1, 0), v(0, 1, 5)).is_ok(), "a patch release serves");
        assert!(version_compatible(v(0, 2, 0), v(0, 1, 0)).is_err(), "0.x: another minor does not");
        assert!(version_compatible(v(0, 1, 0), v(0, 2, 0)).is_err());
        assert!(version_compatible(v(1, 1, 0), v(1, 3, 0)).is_ok(), "1.x: a newer minor serves");
        assert!(version_compatible(v(1, 3, 0), v(1, 1, 0)).is_err(), "1.x: an older minor does not");
        assert!(version_compatible(v(2, 0, 0), v(1, 0, 0)).is_err());
        // Minors of 100 and more are minors, not majors.
        assert!(version_compatible(v(1, 99, 0), v(1, 100, 0)).is_ok(), "1.100 serves a 1.99 program");
        assert!(version_compatible(v(1, 100, 0), v(1, 99, 0)).is_err());
        assert!(version_compatible(v(2, 0, 0), v(1, 100, 0)).is_err(), "1.100.0 is not 2.0.0");
        assert!(version_compatible(v(1, 0, 100), v(1, 1, 0)).is_ok());
        let e = version_compatible(v(0, 100, 0), v(0, 1, 0)).unwrap_err();
        assert!(e.to_string().contains("hexrpc.h 0.100.0, this libhexrpc is 0.1.0"), "{e}");
        // Not a packed version (a major past 16 bits): refused, never taken for another.
        assert!(version_compatible(u64::MAX, HEXRPC_VERSION).is_err());
        assert_eq!(hexrpc_version_check(HEXRPC_VERSION), hexrpc_status::HEXRPC_OK);
        let next_minor = version_pack(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR + 1, 0);
        assert_eq!(hexrpc_version_check(next_minor), hexrpc_status::HEXRPC_ERR_UNAVAILABLE);
    }
}
