//! hexrpc for a service: one dependency, one `use` line.
//!
//! ```toml
//! [dependencies]
//! hexrpc-sdk = "0.1"   # features = ["bench"] for the simulator, in tests and at the desk
//! ```
//!
//! `use hexrpc_sdk::prelude::*;` brings the one-call API: a [`ServedSession`] on a board
//! ([`DeviceAccess`], [`boards`]) with the reverse file service answering its DSP under a
//! [`FilePolicy`]; [`Lease`]s and their [`BufferView`]s; [`Kernel`]s opened once with their
//! [`Signature`] and [`AbiVersion`] and launched in one call with views and [`Scalar`]s;
//! [`Batch`]es of launches in one call; the real syscall seam [`RustixSys`]; and the one
//! [`Error`] every launch-path call returns, with its [`ErrorKind`]. The same items are at the
//! crate root.
//!
//! The layered crates stay public underneath for what the one-call API does not cover:
//! [`drivers`] (system calls, ioctls, the syscall seam), [`bsp`] (boards), [`hal`] (sessions,
//! leases, raw invokes, recovery) and [`runtime`] (the launch ABI, the packer, the reverse file
//! service). Typed causes inside [`Error`] are in [`error`].
//!
//! # On a device
//!
//! A session on the board, a library made by `hexrpc build-lib` (its build record names the
//! kernel's signature and ABI), one lease, two views, one launch:
//!
//! ```no_run
//! use hexrpc_sdk::prelude::*;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let access = DeviceAccess::for_device(&boards::COMMA_THREE);
//!     let served = ServedSession::start(RustixSys, &access, FilePolicy::for_board(access.board())?)?;
//!     let kernel = served.open_recorded_kernel("add_u8", std::fs::read("add_u8.so")?)?;
//!     let mut lease = served.session().alloc(16 * 1024)?;
//!     lease.write_at(0, &[1, 2, 3, 4])?;
//!     let (input, output) = (lease.view(0, 4)?, lease.view(8192, 4)?);
//!     match kernel.launch(&[&input, &output], &[Scalar::U32(10)]) {
//!         Ok(dsp_us) => println!("{dsp_us} DSP µs"),
//!         // A DSP restart or a passed deadline: recover once, then launch again.
//!         Err(e) if e.kind() == ErrorKind::Recoverable => served.session().recover()?,
//!         Err(e) => return Err(e.into()),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # On the bench
//!
//! With the `bench` feature, `hexrpc_sdk::bench` is the simulated kernel and DSP and the
//! catalogue of its library models. This is the README's example (`examples/readme.rs`, kept equal to the
//! README by `tests/readme.rs`); it runs as a doctest with the feature
//! (`cargo test -p hexrpc-sdk --features bench`). `examples/service.rs` adds many launches,
//! recovery from a DSP restart and an orderly shutdown.
//!
#![cfg_attr(feature = "bench", doc = concat!("```\n", include_str!("../examples/readme.rs"), "```"))]
#![cfg_attr(not(feature = "bench"), doc = concat!("```ignore\n", include_str!("../examples/readme.rs"), "```"))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

/// The system-call layer: typed ioctls, the syscall seam ([`Syscalls`]) and its real
/// implementation ([`RustixSys`]).
pub use hexrpc_drivers as drivers;

/// Boards: device nodes, heaps, limits and DSP directories per board.
pub use hexrpc_bsp as bsp;

/// The HAL: sessions stage by stage, leases, libraries, raw invokes, deadlines, recovery.
pub use hexrpc_hal as hal;

/// The runtime: the kernel-launch ABI (packer, entry generator, build records), one-call
/// kernels, batches, programs, the hardened reverse file service.
pub use hexrpc_runtime as runtime;

/// Model files: the format (read with no allocation, written at the desk), `.npy` files, and
/// running a file on a served session ([`Model`]).
pub use hexrpc_model as model;

/// A model file opened on a served session ([`ServedSession`]), run in one FastRPC call: open it
/// from bytes ([`Model::open`]) or from a path, mapped read-only ([`Model::open_path`]); its
/// [`inputs`](Model::inputs) and [`outputs`](Model::outputs); [`run`](Model::run) with a
/// deadline; an input bound to an imported camera frame ([`Model::bind_input`], a
/// [`ServedSession::import_shared`] lease), read in place with nothing copied. See
/// `docs/model-format.md`, `docs/import.md` and the README's "Models" section.
pub type Model<S> = hexrpc_model::run::LoadedModel<S>;
pub use hexrpc_model::bind::{BindRefusal, LeaseHolder};
pub use hexrpc_model::run::{
    KernelTime, Origin as ModelOrigin, Profile as ModelProfile, RunError as ModelError, RunReport as ModelRun, Tensor,
};

pub use hexrpc_bsp::{Board, DeviceAccess};
pub use hexrpc_drivers::{RustixSys, Syscalls};
pub use hexrpc_hal::{
    Access, Arena, ArenaBuf, BufferView, Lease, Library, LibraryImage, Session, SharedArena, SharedArenaBuf, SharedLease, SharedLibrary,
    ARENA_ALIGN,
};
pub use hexrpc_runtime::launch::{AbiVersion, Batch, BatchRun, BatchSpace, BufferRef, Program, Scalar, ScalarType, Signature};
pub use hexrpc_runtime::reverse::FilePolicy;
pub use hexrpc_runtime::{Error, ErrorKind, Kernel, ServedSession};

/// The one-call API in one line: `use hexrpc_sdk::prelude::*;`.
pub mod prelude {
    pub use crate::boards;
    pub use crate::{
        AbiVersion, Access, Arena, ArenaBuf, Batch, BatchRun, Board, BufferRef, BufferView, DeviceAccess, Error, ErrorKind, FilePolicy,
        Kernel, Lease, Library, LibraryImage, Model, ModelError, ModelRun, Program, RustixSys, Scalar, ScalarType, ServedSession, Session,
        SharedArena, SharedArenaBuf, SharedLease, SharedLibrary, Signature, Syscalls, Tensor,
    };
}

/// The boards hexrpc knows ([`boards::COMMA_THREE`], ...), looked up by name
/// ([`boards::by_name`]) or detected from the device's model string ([`boards::detect`]).
pub mod boards {
    pub use hexrpc_bsp::{
        by_name, detect, Board, DeviceAccess, BENCH, BENCH_UPSTREAM, BOARDS, COMMA_THREE, GENERIC_MSM_ANDROID, GENERIC_UPSTREAM, QCOM_RB5,
    };
}

/// The typed causes inside [`Error`], for callers that match precisely: a refused launch
/// ([`PackError`](error::PackError)), a refused or incomplete batch
/// ([`BatchRefusal`](error::BatchRefusal), [`BatchFailure`](error::BatchFailure)), a refused open
/// ([`OpenRefusal`](error::OpenRefusal)), a failed HAL call ([`HalError`](error::HalError): its
/// [`Stage`](error::Stage) and [`Cause`](error::Cause)), a listener thread that did not start
/// ([`ThreadError`](error::ThreadError)).
pub mod error {
    pub use hexrpc_hal::{Cause, HalError, ImportRefusal, Refusal, Stage};
    pub use hexrpc_runtime::launch::{BatchFailure, BatchRefusal, PackError, RecordError, SignatureError};
    pub use hexrpc_runtime::{Error, ErrorKind, OpenRefusal, ThreadError};
}

/// The isolated bench (feature `bench`): a simulated ION/adsprpc kernel and DSP behind the
/// syscall seam ([`Bench`](bench::Bench) stands where [`RustixSys`] would), and the catalogue
/// of its library models ([`catalogue`](bench::catalogue): `add_u8`, `scale_f32`, `sleep_ms`).
#[cfg(feature = "bench")]
pub mod bench {
    pub use hexrpc_bench::*;
    pub use hexrpc_scenarios::catalogue;
}
