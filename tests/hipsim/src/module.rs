//! Modules and functions: a module image "hipsim" provides the built-in kernels.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

use crate::abi::Dim3;
use crate::error::{HipResult, INVALID_VALUE};
use crate::graph::KernelOp;
use crate::handles::Registry;
use crate::kernels::Kernel;

pub struct Module {
    pub functions: Mutex<HashMap<&'static str, usize>>,
}

pub struct Function {
    pub kernel: &'static Kernel,
}

pub static MODULES: LazyLock<Registry<Module>> = LazyLock::new(Registry::new);
pub static FUNCTIONS: LazyLock<Registry<Function>> = LazyLock::new(Registry::new);

/// Validates a launch and copies its argument values (either style) into an op.
///
/// # Safety
/// As [`Kernel::pack`](crate::kernels::Kernel::pack).
pub unsafe fn kernel_op(
    func: usize,
    grid: Dim3,
    block: Dim3,
    shmem: u32,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipResult<KernelOp> {
    let kernel = FUNCTIONS.get(func)?.kernel;
    if [grid.x, grid.y, grid.z, block.x, block.y, block.z].contains(&0) {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the argument arrays are valid as HIP requires, per this function's contract.
    let args = unsafe { kernel.pack(kernel_params, extra)? };
    Ok(KernelOp { kernel, func, grid, block, shmem, args, extra_style: !extra.is_null() })
}
