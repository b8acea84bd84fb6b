//! `rcb_runtime_info`: which GPU runtime the library loaded, and the update budget its command
//! buffers got.

use super::{arg_out_sized, boundary, rcb_status, sized_struct, write_c_str};
use crate::cmdbuf::{self, BudgetBasis};
use crate::runtime::{self, Backend};
use std::ffi::c_char;

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/runtime.rs"));

/// The HIP runtime (`libamdhip64`) backs the library.
pub const RCB_BACKEND_HIP: i32 = 1;
/// The CUDA driver (`libcuda.so.1`) backs the library.
pub const RCB_BACKEND_CUDA: i32 = 2;

/// `rcb_runtime_info.update_budget_basis`: no command buffer has been created yet, so the
/// update budget is not settled (the fields after it are 0).
pub const RCB_UPDATE_BUDGET_UNSETTLED: i32 = 0;
/// The first command buffer measured what the HIP runtime's executable-graph updates take:
/// `update_growth_bytes` per node update (0: nothing grew, and the budget is the fixed default:
/// 64 MiB from ROCm 6.2, since the probe's memset nodes cannot show kernel-node growth; off
/// before 6.2, whose updates take nothing).
pub const RCB_UPDATE_BUDGET_MEASURED: i32 = 1;
/// `RCB_EXEC_UPDATE_BUDGET` set the budget; nothing was measured.
pub const RCB_UPDATE_BUDGET_CONFIGURED: i32 = 2;
/// Nothing was measured and the budget is the fixed default: off on CUDA, where nothing is
/// measured, and on HIP, where the measurement failed or was not made (an error pending on the
/// calling thread, a runtime that cannot relax the thread's stream capture mode, a child forked
/// while its parent measured; the log says why at level warn), 64 MiB from ROCm 6.2 and off
/// before 6.2, whose updates take nothing.
pub const RCB_UPDATE_BUDGET_DEFAULT: i32 = 3;

/// Description of the loaded GPU runtime, filled by `rcb_runtime_load`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_runtime_info {
    /// In: `sizeof(rcb_runtime_info)`; out: the bytes written (the rule for sized structs).
    pub struct_size: u32,
    /// `RCB_BACKEND_HIP` or `RCB_BACKEND_CUDA`.
    pub backend: i32,
    /// `hipRuntimeGetVersion` (major*10^7 + minor*10^5 + patch) or `cuDriverGetVersion`.
    pub version: i32,
    /// Number of devices the runtime sees (at least 1).
    pub device_count: i32,
    /// Number of optional features switched off (see the log at level info for which and why).
    pub disabled_features: i32,
    /// The library that was opened, NUL-terminated, truncated to fit (never inside a UTF-8
    /// character).
    pub library: [c_char; 256],
    /// How the update budget of the process's command buffers was settled: an
    /// `RCB_UPDATE_BUDGET_*` value. The first command buffer settles it (measuring unless
    /// `RCB_EXEC_UPDATE_BUDGET` is set); `rcb_runtime_load` reports it and measures nothing.
    pub update_budget_basis: i32,
    /// Bytes by which the device's free memory fell per executable-node update in the library's
    /// measurement (a whole-device reading: another process's allocations count too; 0 unless
    /// `update_budget_basis` is `RCB_UPDATE_BUDGET_MEASURED`, and there when nothing fell).
    pub update_growth_bytes: u64,
    /// The update budget each new primary command buffer starts with, in bytes (0: never
    /// re-instantiated); `rcb_cmdbuf_set_exec_update_budget` changes one command buffer's.
    pub update_budget_bytes: u64,
    /// What each node pushed to an executable graph is charged against the budget besides its
    /// argument bytes: the figure of the public report (5 920 bytes), or `update_growth_bytes`
    /// where the measurement saw more, up to 16 times that figure (a measurement never lowers the
    /// charge: it cannot tell a smaller leak from noise).
    pub update_node_charge: u64,
}

// The size in 0.1.0, when the struct got its size; the update budget's fields came after.
sized_struct!(rcb_runtime_info, 276);

/// Loads the GPU runtime (once per process, as chosen by `RCB_BACKEND`) and describes it.
///
/// Returns `RCB_STATUS_RUNTIME_UNAVAILABLE` when no runtime library loads (the message lists each
/// library tried and why), `RCB_STATUS_NO_DEVICE` when one loads but sees no GPU, and
/// `RCB_STATUS_CONFIG` for a malformed `RCB_*` variable. A failed load is remembered: later calls
/// report the same error. `out` is caller-owned and written only on success.
///
/// Thread-safety: any thread; concurrent first calls load the runtime once.
///
/// # Safety
/// `out` must be NULL or point to an `rcb_runtime_info` writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_runtime_load(out: *mut rcb_runtime_info) -> rcb_status {
    boundary(|| {
        // SAFETY: the caller promises a NULL or writable sized struct.
        let out = unsafe { arg_out_sized(out, "out") }?;
        let info = runtime::get()?.info();
        let mut library = [0 as c_char; 256];
        // SAFETY: the array is writable for its length.
        unsafe { write_c_str(&info.library, library.as_mut_ptr(), library.len()) };
        let value = rcb_runtime_info {
            backend: match info.backend {
                Backend::Hip => RCB_BACKEND_HIP,
                Backend::Cuda => RCB_BACKEND_CUDA,
            },
            version: info.version,
            device_count: info.device_count,
            disabled_features: info.disabled_features.len() as i32,
            library,
            ..Default::default()
        };
        let value = match cmdbuf::budget_settled() {
            None => value,
            Some(s) => rcb_runtime_info {
                update_budget_basis: match &s.basis {
                    BudgetBasis::Measured(_) => RCB_UPDATE_BUDGET_MEASURED,
                    BudgetBasis::Configured => RCB_UPDATE_BUDGET_CONFIGURED,
                    BudgetBasis::Failed(_) | BudgetBasis::NotMeasured(_) | BudgetBasis::Fixed => RCB_UPDATE_BUDGET_DEFAULT,
                },
                update_growth_bytes: match &s.basis {
                    BudgetBasis::Measured(m) => m.bytes_per_update,
                    _ => 0,
                },
                update_budget_bytes: s.limit,
                update_node_charge: s.node_charge,
                ..value
            },
        };
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(value) };
        Ok(())
    })
}
