//! rocm_cmdbuf: the host-side hot paths of XLA's ROCm command-buffer backend (HIP graphs)
//! behind a C ABI (`include/rocm_cmdbuf.h`).
//!
//! Layers, top to bottom: [`ffi`] (the C ABI only), the features, [`runtime`] (the GPU runtime
//! behind one interface), [`config`] (the `RCB_*` variables). Data flows down; below `ffi` every
//! function returns [`error::Result`].
//!
//! Only `ffi` reaches the C header: every other module is marked `cbindgen:ignore`, so a public
//! constant inside the library never leaks into `include/rocm_cmdbuf.h`.

/// cbindgen:ignore
pub mod cmdbuf;
/// cbindgen:ignore
pub mod config;
/// cbindgen:ignore
pub mod counters;
/// cbindgen:ignore
pub mod error;
pub mod ffi;
mod logging;
/// cbindgen:ignore
pub mod profiler;
/// cbindgen:ignore
pub mod runtime;
/// cbindgen:ignore
pub mod stream_cache;
/// cbindgen:ignore
pub mod trace_cache;
/// cbindgen:ignore
pub mod vmm_pool;
