//! rocm_cmdbuf: the host-side hot paths of XLA's ROCm command-buffer backend (HIP graphs)
//! behind a C ABI (`include/rocm_cmdbuf.h`).
//!
//! Layers, top to bottom: [`ffi`] (the C ABI only), the features, [`runtime`] (the GPU runtime
//! behind one interface), [`config`] (the `RCB_*` variables). Data flows down; below `ffi` every
//! function returns [`error::Result`].

pub mod cmdbuf;
pub mod config;
pub mod error;
pub mod ffi;
mod logging;
pub mod runtime;
