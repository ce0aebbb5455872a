//! The isolated bench: a simulated msm ION 4.9 + downstream adsprpc kernel and DSP process
//! behind hexrpc's syscall seam (see ../shared/spec/bench.md).
#![deny(missing_docs)]
