//! rocm_cmdbuf: the host-side hot paths of XLA's ROCm command-buffer backend (HIP graphs)
//! behind a C ABI (`include/rocm_cmdbuf.h`).
//!
//! Layers, top to bottom: [`ffi`] (the C ABI only), the features, [`runtime`] (the GPU runtime
//! behind one interface), [`config`] (the `RCB_*` variables). Data flows down; below `ffi` every
//! function returns [`error::Result`].
//!
//! Only `ffi` reaches the C header: every other module is marked `cbindgen:ignore`, so a public
//! constant inside the library never leaks into `include/rocm_cmdbuf.h`.
//!
//! The C ABI is the library's interface; as a Rust crate it exposes [`ffi`] and nothing else.
//! The runtime layer, the errors and the configuration stay reachable, hidden from the docs, for
//! the integration tests and `rcb-bench`, which drive the runtime directly; they are not API.

/// cbindgen:ignore
mod at_fork;
/// cbindgen:ignore
pub(crate) mod cmdbuf;
/// cbindgen:ignore
#[doc(hidden)]
pub mod config;
/// cbindgen:ignore
pub(crate) mod counters;
/// cbindgen:ignore
#[doc(hidden)]
pub mod error;
pub mod ffi;
mod logging;
/// cbindgen:ignore
mod prefetch;
/// cbindgen:ignore
pub(crate) mod profiler;
/// cbindgen:ignore
#[doc(hidden)]
pub mod runtime;
/// cbindgen:ignore
mod stats_at_exit;
/// cbindgen:ignore
pub(crate) mod stream_cache;
/// cbindgen:ignore
pub(crate) mod trace_cache;
/// cbindgen:ignore
pub(crate) mod vmm_pool;

/// The library's kernel-argument packing, for `rcb-bench`'s baselines, which must build the
/// blobs the library builds; not API.
#[doc(hidden)]
pub use cmdbuf::args as kernel_args;

/// The smallest command buffer whose address update looks ahead, for `tests/cmdbuf.rs`, whose
/// test of that path records more nodes; not API.
#[doc(hidden)]
pub use cmdbuf::LOOK_AHEAD_FROM_NODES;

/// The update budget's constants, for `rcb-bench budget` and `tests/exec_budget.rs`, which
/// measure and test against them; not API.
#[doc(hidden)]
pub use cmdbuf::{DEFAULT_BUDGET_BYTES, MAX_KEPT_EXECS, MAX_NODE_CHARGE_BYTES, NODE_OVERHEAD_BYTES};

/// The update budget's settlement (what the process measured of the runtime's kernel-argument
/// growth, or why it did not), for `rcb-doctor` and the tests; not API.
#[doc(hidden)]
pub use cmdbuf::{BudgetBasis, BudgetSettlement, GrowthMeasurement, PROBE_MAX_ROUNDS, PROBE_NODES, budget_settled, settle_budget};
