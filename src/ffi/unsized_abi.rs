//! The entry points that programs built against the headers before 0.1.0 bind to, for every
//! function whose structs have since gained their `struct_size`: those programs pass structs
//! without it, which the library must neither read nor write. Each is exported as the hidden
//! version `ROCM_CMDBUF_0.0` of the function's name (`.symver ..., remove` takes the stub's own
//! name away): a program linked against the library before it had symbol versions references
//! the bare name, and the dynamic loader binds such a reference to a name's oldest version,
//! while programs linked now get `ROCM_CMDBUF_0.1` and `dlsym` the default. The stubs refuse
//! with `RCB_STATUS_UNSUPPORTED` and a message saying to rebuild, touching no argument. They
//! declare no parameters: in the C calling conventions of Linux on x86-64 and AArch64 the caller
//! sets up and takes down the arguments, which a function may ignore.

use super::{boundary, rcb_status};
use crate::error::Error;

/// Refuses a call made through a header before 0.1.0.
fn refused(name: &str) -> Error {
    Error::unsupported(format!(
        "{name}: this program was built against a rocm_cmdbuf.h older than 0.1.0, whose structs have no \
         struct_size; rebuild it against the installed header (the call was refused, nothing was read or written)"
    ))
}

macro_rules! refuse_unsized {
    ($($stub:ident => $name:literal,)*) => {
        $(
            #[unsafe(no_mangle)]
            extern "C" fn $stub() -> rcb_status {
                boundary(|| Err(refused($name)))
            }
            core::arch::global_asm!(concat!(".symver ", stringify!($stub), ", ", $name, "@ROCM_CMDBUF_0.0, remove"));
        )*
    };
}

refuse_unsized! {
    rcb_unsized_cmdbuf_add_kernel => "rcb_cmdbuf_add_kernel",
    rcb_unsized_cmdbuf_add_kernel_params => "rcb_cmdbuf_add_kernel_params",
    rcb_unsized_cmdbuf_update_kernel => "rcb_cmdbuf_update_kernel",
    rcb_unsized_cmdbuf_update_kernel_params => "rcb_cmdbuf_update_kernel_params",
    rcb_unsized_cmdbuf_update_allocations => "rcb_cmdbuf_update_allocations",
    rcb_unsized_cmdbuf_move_allocations => "rcb_cmdbuf_move_allocations",
    rcb_unsized_cmdbuf_add_flattened_child => "rcb_cmdbuf_add_flattened_child",
    rcb_unsized_cmdbuf_update_flattened_child => "rcb_cmdbuf_update_flattened_child",
    rcb_unsized_correlator_new => "rcb_correlator_new",
    rcb_unsized_correlator_exchange => "rcb_correlator_exchange",
    rcb_unsized_correlator_stats => "rcb_correlator_stats",
    rcb_unsized_runtime_load => "rcb_runtime_load",
    rcb_unsized_stream_cache_stats => "rcb_stream_cache_stats",
    rcb_unsized_vmm_pool_new => "rcb_vmm_pool_new",
    rcb_unsized_vmm_pool_acquire => "rcb_vmm_pool_acquire",
    rcb_unsized_vmm_pool_acquire_on_stream => "rcb_vmm_pool_acquire_on_stream",
    rcb_unsized_vmm_pool_release => "rcb_vmm_pool_release",
}
