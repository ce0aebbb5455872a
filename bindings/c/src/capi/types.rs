//! The types and constants of `hexrpc.h`: the opaque handles, the argument structs and the
//! numbers a C program passes (launch ABIs, arena geometry, scalar kinds, bench flags).

use std::ffi::c_char;

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

/// A model file opened on a session (`hexrpc_model_open`).
pub struct hexrpc_model {
    _opaque: [u8; 0],
}

/// An input or output of a model (`hexrpc_model_input`, `hexrpc_model_output`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hexrpc_tensor {
    /// Its name (NUL-terminated UTF-8), valid until the model is closed.
    pub name: *const c_char,
    /// Its element type: `HEXRPC_DTYPE_*` (numpy's names: bool, uint8, ..., float64).
    pub dtype: u32,
    /// Its rank, 0 to 8.
    pub rank: u32,
    /// Its shape: `rank` entries, the rest 0.
    pub shape: [u64; 8],
    /// Its size in bytes (elements times the dtype's size): what a run reads or writes.
    pub bytes: u64,
}

/// An input's bytes for `hexrpc_model_run`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hexrpc_input {
    /// The bytes (NULL only with `len` 0). For an input bound to a lease
    /// (`hexrpc_model_bind_input`): NULL, with `len` 0 (the kernels read the lease).
    pub data: *const core::ffi::c_void,
    /// How many: exactly the input's size; 0 for a bound input.
    pub len: usize,
}

/// An output's buffer for `hexrpc_model_run`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hexrpc_output {
    /// Where the output goes (NULL only with `len` 0).
    pub data: *mut core::ffi::c_void,
    /// Its room: exactly the output's size.
    pub len: usize,
}

/// What a model run did (`hexrpc_model_run`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hexrpc_model_report {
    /// Launches run.
    pub launches: u64,
    /// FastRPC calls made (1 for a model on one library).
    pub calls: u32,
    /// Bytes of the caller's inputs the run copied into the model's memory: the sum of the
    /// inputs' sizes, less those bound to a lease (`hexrpc_model_bind_input`), so 0 when every
    /// input is bound. (A model's inputs fit its arenas, at most 2 GiB in all, so the count fits;
    /// this field was `reserved`, always 0, before bound inputs: the struct's layout is
    /// unchanged.)
    pub input_bytes_copied: u32,
    /// DSP microseconds summed over the kernels, as the entries measured them (on the bench:
    /// simulated or emulated time, never a device figure).
    pub dsp_us: u64,
}

// The layout programs compiled against earlier headers have (the last field was `reserved`).
const _: () = {
    assert!(core::mem::size_of::<hexrpc_model_report>() == 24 && core::mem::align_of::<hexrpc_model_report>() == 8);
    assert!(core::mem::offset_of!(hexrpc_model_report, launches) == 0);
    assert!(core::mem::offset_of!(hexrpc_model_report, calls) == 8);
    assert!(core::mem::offset_of!(hexrpc_model_report, input_bytes_copied) == 12);
    assert!(core::mem::offset_of!(hexrpc_model_report, dsp_us) == 16);
    // Every input of a model the bindings open fits its arenas (the file format's default
    // limits), so `input_bytes_copied` holds any run's count.
    assert!(::hexrpc_model::Limits::DEFAULT.max_total_arena_bytes <= u32::MAX as u64);
};

/// One record's DSP time in a profiled model run (`hexrpc_model_run_profiled`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hexrpc_kernel_time {
    /// The record's kernel name (tinygrad's, from the library's build record): a NUL-terminated
    /// string owned by the model, valid until it is closed.
    pub kernel: *const std::ffi::c_char,
    /// The FastRPC call (program) the record ran in, in run order.
    pub call: u32,
    /// The record's index in that call.
    pub record: u32,
    /// Microseconds around the kernel call on the DSP (on the bench: emulated or simulated,
    /// never a device figure).
    pub us: u32,
    /// Zero.
    pub reserved: u32,
}

/// `hexrpc_tensor.dtype`: numpy's bool.
pub const HEXRPC_DTYPE_BOOL: u32 = 1;
/// numpy's uint8.
pub const HEXRPC_DTYPE_UINT8: u32 = 2;
/// numpy's int8.
pub const HEXRPC_DTYPE_INT8: u32 = 3;
/// numpy's uint16.
pub const HEXRPC_DTYPE_UINT16: u32 = 4;
/// numpy's int16.
pub const HEXRPC_DTYPE_INT16: u32 = 5;
/// numpy's uint32.
pub const HEXRPC_DTYPE_UINT32: u32 = 6;
/// numpy's int32.
pub const HEXRPC_DTYPE_INT32: u32 = 7;
/// numpy's uint64.
pub const HEXRPC_DTYPE_UINT64: u32 = 8;
/// numpy's int64.
pub const HEXRPC_DTYPE_INT64: u32 = 9;
/// numpy's float16.
pub const HEXRPC_DTYPE_FLOAT16: u32 = 10;
/// numpy's float32.
pub const HEXRPC_DTYPE_FLOAT32: u32 = 11;
/// numpy's float64.
pub const HEXRPC_DTYPE_FLOAT64: u32 = 12;

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

/// Latency policy word of `hexrpc_session_open_with` (0: the default, what a 20 Hz real-time
/// service wants: the PM-QoS vote on every channel and the sustained DSP clock). This bit: no
/// PM-QoS vote (CPU idle states unconstrained while a thread waits for the DSP).
pub const HEXRPC_LATENCY_NO_PM_QOS: u32 = 1;
/// Latency policy bit: no DSP clock vote (the DSP's own DCVS decides).
pub const HEXRPC_LATENCY_POWER_OFF: u32 = 0x10;
/// Latency policy bit: the burst DSP clock (top corner, DCVS off, 100 µs wake-up, no sleep)
/// instead of the sustained one. Not with `HEXRPC_LATENCY_POWER_OFF`.
pub const HEXRPC_LATENCY_POWER_BURST: u32 = 0x20;

/// `hexrpc_session_import` flag: kernels only read the buffer (a camera frame). It is mapped
/// read-only in this process (`PROT_READ`): writing the memory `hexrpc_lease_memory` gives
/// faults (`SIGSEGV`); `hexrpc_lease_writable` says 0.
pub const HEXRPC_IMPORT_READ_ONLY: u32 = 0;
/// `hexrpc_session_import` flag: kernels may write the buffer, and so may this process through
/// the lease's memory (an output another component reads).
pub const HEXRPC_IMPORT_READ_WRITE: u32 = 1;

/// `hexrpc_session_pm_qos`: the policy asks for no vote.
pub const HEXRPC_PM_QOS_NOT_ASKED: u32 = 0;
/// `hexrpc_session_pm_qos`: the kernel took the vote on the current channel.
pub const HEXRPC_PM_QOS_SENT: u32 = 1;
/// `hexrpc_session_pm_qos`: the board's driver has no such request (upstream `fastrpc.c`).
pub const HEXRPC_PM_QOS_NOT_AVAILABLE: u32 = 2;
/// `hexrpc_session_pm_qos`: the kernel refused the vote (no `qcom,rpc-latency-us` in the device
/// tree); the session works without it.
pub const HEXRPC_PM_QOS_REFUSED: u32 = 3;
