//! The HIP entry points this library calls, grouped by feature. `Core` is required; the others
//! are optional and switch one feature off when the runtime lacks them.

use crate::runtime::symbols::symbol_table;
use hip_runtime_sys::{hipKernelNodeParams, hipMemAccessDesc};
use std::ffi::{c_char, c_int, c_uint, c_void};

type P = *mut c_void;
type E = c_int; // hipError_t, kept as an integer: the runtime may return values newer than our enum.

symbol_table! {
    pub struct Core {
        hipRuntimeGetVersion: fn(*mut c_int) -> E;
        hipGetDeviceCount: fn(*mut c_int) -> E;
        hipGetDevice: fn(*mut c_int) -> E;
        hipSetDevice: fn(c_int) -> E;
        hipGetErrorName: fn(E) -> *const c_char;
        hipGetErrorString: fn(E) -> *const c_char;
        hipDeviceCanAccessPeer: fn(*mut c_int, c_int, c_int) -> E;
        hipDeviceGetStreamPriorityRange: fn(*mut c_int, *mut c_int) -> E;
        hipMalloc: fn(*mut P, usize) -> E;
        hipFree: fn(P) -> E;
        hipMemcpy: fn(P, *const c_void, usize, c_int) -> E;
        hipMemcpyDtoDAsync: fn(P, P, usize, P) -> E;
        hipStreamCreateWithPriority: fn(*mut P, c_uint, c_int) -> E;
        hipStreamDestroy: fn(P) -> E;
        hipStreamQuery: fn(P) -> E;
        hipStreamSynchronize: fn(P) -> E;
        hipStreamGetFlags: fn(P, *mut c_uint) -> E;
        hipStreamGetPriority: fn(P, *mut c_int) -> E;
        hipModuleLoadData: fn(*mut P, *const c_void) -> E;
        hipModuleUnload: fn(P) -> E;
        hipModuleGetFunction: fn(*mut P, P, *const c_char) -> E;
        hipModuleLaunchKernel: fn(P, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, P, *mut P, *mut P) -> E;
        hipGraphCreate: fn(*mut P, c_uint) -> E;
        hipGraphDestroy: fn(P) -> E;
        hipGraphAddKernelNode: fn(*mut P, P, *const P, usize, *const hipKernelNodeParams) -> E;
        hipGraphAddMemcpyNode1D: fn(*mut P, P, *const P, usize, P, *const c_void, usize, c_int) -> E;
        hipGraphAddMemsetNode: fn(*mut P, P, *const P, usize, *const c_void) -> E;
        hipGraphAddEmptyNode: fn(*mut P, P, *const P, usize) -> E;
        hipGraphAddChildGraphNode: fn(*mut P, P, *const P, usize, P) -> E;
        hipGraphAddDependencies: fn(P, *const P, *const P, usize) -> E;
        hipGraphGetNodes: fn(P, *mut P, *mut usize) -> E;
        hipGraphGetEdges: fn(P, *mut P, *mut P, *mut usize) -> E;
        hipGraphNodeGetType: fn(P, *mut c_int) -> E;
        hipGraphKernelNodeGetParams: fn(P, *mut hipKernelNodeParams) -> E;
        hipGraphKernelNodeSetParams: fn(P, *const hipKernelNodeParams) -> E;
        hipGraphMemcpyNodeGetParams: fn(P, *mut super::layout::Memcpy3DParms) -> E;
        hipGraphMemcpyNodeSetParams1D: fn(P, P, *const c_void, usize, c_int) -> E;
        hipGraphMemsetNodeGetParams: fn(P, *mut c_void) -> E;
        hipGraphMemsetNodeSetParams: fn(P, *const c_void) -> E;
        hipGraphChildGraphNodeGetGraph: fn(P, *mut P) -> E;
        hipGraphInstantiate: fn(*mut P, P, *mut P, *mut c_char, usize) -> E;
        hipGraphExecDestroy: fn(P) -> E;
        hipGraphExecKernelNodeSetParams: fn(P, P, *const hipKernelNodeParams) -> E;
        hipGraphExecMemcpyNodeSetParams1D: fn(P, P, P, *const c_void, usize, c_int) -> E;
        hipGraphExecMemsetNodeSetParams: fn(P, P, *const c_void) -> E;
        hipGraphExecChildGraphNodeSetParams: fn(P, P, P) -> E;
        hipGraphExecUpdate: fn(P, P, *mut P, *mut c_int) -> E;
        hipGraphLaunch: fn(P, P) -> E;
        hipStreamBeginCapture: fn(P, c_int) -> E;
        hipStreamEndCapture: fn(P, *mut P) -> E;
        hipEventCreateWithFlags: fn(*mut P, c_uint) -> E;
        hipEventDestroy: fn(P) -> E;
        hipEventRecord: fn(P, P) -> E;
        hipEventQuery: fn(P) -> E;
        hipEventSynchronize: fn(P) -> E;
        hipGraphClone: fn(*mut P, P) -> E;
        hipMemGetInfo: fn(*mut usize, *mut usize) -> E;
    }
}

symbol_table! {
    /// Virtual memory management: exported since ROCm 5.2 but real only from 5.3.
    pub struct Vmm {
        hipMemCreate: fn(*mut P, usize, *const c_void, u64) -> E;
        hipMemRelease: fn(P) -> E;
        hipMemAddressReserve: fn(*mut P, usize, usize, P, u64) -> E;
        hipMemAddressFree: fn(P, usize) -> E;
        hipMemMap: fn(P, usize, usize, P, u64) -> E;
        hipMemUnmap: fn(P, usize) -> E;
        hipMemSetAccess: fn(P, usize, *const hipMemAccessDesc, usize) -> E;
        hipMemGetAllocationGranularity: fn(*mut usize, *const c_void, c_int) -> E;
    }
}

symbol_table! {
    /// Signal memory and stream writes, for the GPU-written timeline.
    pub struct MemOps {
        hipExtMallocWithFlags: fn(*mut P, usize, c_uint) -> E;
        hipStreamWriteValue64: fn(P, P, u64, c_uint) -> E;
        hipStreamWaitValue64: fn(P, P, u64, c_uint, u64) -> E;
    }
}

symbol_table! {
    /// Whether a stream is capturing: says what a failed end of capture left behind.
    pub struct CaptureQuery {
        hipStreamIsCapturing: fn(P, *mut c_int) -> E;
    }
}

symbol_table! {
    /// The calling thread's capture mode, relaxed around the library's own event calls so that a
    /// capture of the caller's never counts them as unsafe (ROCm 5.0+, symbol version hip_5.0).
    pub struct ThreadCaptureMode {
        hipThreadExchangeStreamCaptureMode: fn(*mut c_int) -> E;
    }
}

symbol_table! {
    /// Kernel-node launch attributes (ROCm 5.5+).
    pub struct NodeAttributes {
        hipGraphKernelNodeCopyAttributes: fn(P, P) -> E;
    }
}
