//! hipsim: a software model of an AMD GPU behind the HIP C API (the ABI of ROCm 5.3 to 7.2).
//!
//! Built as `libamdhip64.so` so that the project's HIP backend can be exercised in CI
//! without a GPU: what the real device would compute, this library computes.

mod abi;
mod capture;
mod device;
mod error;
mod event;
mod exec;
mod exports;
mod ffi;
mod fork;
mod graph;
mod handles;
mod kernarg;
mod kernels;
mod knobs;
mod memory;
mod module;
mod stream;
mod user_object;
mod vmm;
