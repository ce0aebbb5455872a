//! [`ModelError`], why the stack ([`Stack`](crate::Stack)) or the model network
//! ([`netmodel`](crate::netmodel)) failed: defined below both, so that neither file imports the
//! other's (re-exported as `netmodel::ModelError` and at the crate root).

use hexrpc_bench::executor::BuildError;
use hexrpc_hal::HalError;
use hexrpc_runtime::launch::PackError;
use hexrpc_runtime::Error as RuntimeError;

/// Why the stack or the model failed.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelError {
    /// clang-19, ld.lld-19 or qemu-hexagon cannot be used here (the reason).
    Unavailable(String),
    /// An artefact did not build.
    Build(BuildError),
    /// The stack refused or failed a call.
    Hal(HalError),
    /// The packer refused a launch.
    Pack(PackError),
    /// The runtime refused or failed a call other than a HAL call or a single launch's packing
    /// (a batch refused or not completed, a listener thread that did not start).
    Runtime(RuntimeError),
    /// The driver layer refused the argument list.
    Args(String),
    /// The reverse service could not start.
    Service(String),
    /// A node's output differs from the reference beyond its bound.
    Mismatch {
        /// Node name.
        node: &'static str,
        /// What differed.
        detail: String,
    },
}

impl core::fmt::Display for ModelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ModelError::Unavailable(e) => write!(f, "executor unavailable: {e}"),
            ModelError::Build(e) => write!(f, "build: {e}"),
            ModelError::Hal(e) => write!(f, "stack: {e}"),
            ModelError::Pack(e) => write!(f, "pack: {e:?}"),
            ModelError::Runtime(e) => write!(f, "{e}"),
            ModelError::Args(e) => write!(f, "arguments: {e}"),
            ModelError::Service(e) => write!(f, "reverse service: {e}"),
            ModelError::Mismatch { node, detail } => write!(f, "node {node}: {detail}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<HalError> for ModelError {
    fn from(e: HalError) -> Self {
        ModelError::Hal(e)
    }
}
impl From<BuildError> for ModelError {
    fn from(e: BuildError) -> Self {
        ModelError::Build(e)
    }
}
/// A HAL error or a packing refusal keeps its own variant; the rest is [`ModelError::Runtime`].
impl From<RuntimeError> for ModelError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Hal(h) => ModelError::Hal(h),
            RuntimeError::Pack(p) => ModelError::Pack(p),
            other => ModelError::Runtime(other),
        }
    }
}
impl From<PackError> for ModelError {
    fn from(e: PackError) -> Self {
        ModelError::Pack(e)
    }
}
