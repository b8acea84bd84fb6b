//! The CUDA driver entry points this library calls, grouped by feature. `Core` is required; the
//! others are optional and switch one feature off when the driver lacks them.
//!
//! Only versioned names: the unsuffixed exports keep their first ABI (`cuMemAlloc` takes 32-bit
//! pointers, `cuGraphAddKernelNode` the 56-byte v1 struct, `cuStreamBeginCapture` no mode), and
//! `cuda.h` maps the names to the `_v2` symbols only for code compiled against it.

use super::layout::{AccessDesc, AllocationProp, EdgeDataRaw, KernelNodeParams, Memcpy3D, MemsetNodeParams, UpdateResultInfo};
use crate::runtime::common::{BatchMemOpNodeParams, HostNodeParams};
use crate::runtime::symbols::symbol_table;
use std::ffi::{c_char, c_int, c_uint, c_void};

type P = *mut c_void;
/// `CUresult`, kept as an integer: the driver may return codes newer than any enum of ours.
pub type R = c_int;
/// `CUdeviceptr`.
type D = u64;

symbol_table! {
    pub struct Core {
        cuInit: fn(c_uint) -> R;
        cuDriverGetVersion: fn(*mut c_int) -> R;
        cuGetErrorName: fn(R, *mut *const c_char) -> R;
        cuGetErrorString: fn(R, *mut *const c_char) -> R;
        cuDeviceGetCount: fn(*mut c_int) -> R;
        cuDeviceGet: fn(*mut c_int, c_int) -> R;
        cuDeviceGetAttribute: fn(*mut c_int, c_int, c_int) -> R;
        cuDeviceGetName: fn(*mut c_char, c_int, c_int) -> R;
        cuDeviceCanAccessPeer: fn(*mut c_int, c_int, c_int) -> R;
        cuDevicePrimaryCtxRetain: fn(*mut P, c_int) -> R;
        cuCtxGetCurrent: fn(*mut P) -> R;
        cuCtxSetCurrent: fn(P) -> R;
        cuCtxGetStreamPriorityRange: fn(*mut c_int, *mut c_int) -> R;
        cuMemAlloc_v2: fn(*mut D, usize) -> R;
        cuMemFree_v2: fn(D) -> R;
        cuMemcpyHtoD_v2: fn(D, *const c_void, usize) -> R;
        cuMemcpyDtoH_v2: fn(*mut c_void, D, usize) -> R;
        cuMemcpyDtoDAsync_v2: fn(D, D, usize, P) -> R;
        cuStreamCreateWithPriority: fn(*mut P, c_uint, c_int) -> R;
        cuStreamDestroy_v2: fn(P) -> R;
        cuStreamQuery: fn(P) -> R;
        cuStreamSynchronize: fn(P) -> R;
        cuStreamGetFlags: fn(P, *mut c_uint) -> R;
        cuStreamGetPriority: fn(P, *mut c_int) -> R;
        cuModuleLoadData: fn(*mut P, *const c_void) -> R;
        cuModuleUnload: fn(P) -> R;
        cuModuleGetFunction: fn(*mut P, P, *const c_char) -> R;
        cuLaunchKernel: fn(P, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, P, *mut P, *mut P) -> R;
        cuGraphCreate: fn(*mut P, c_uint) -> R;
        cuGraphDestroy: fn(P) -> R;
        cuGraphAddKernelNode_v2: fn(*mut P, P, *const P, usize, *const KernelNodeParams) -> R;
        cuGraphAddMemcpyNode: fn(*mut P, P, *const P, usize, *const Memcpy3D, P) -> R;
        cuGraphAddMemsetNode: fn(*mut P, P, *const P, usize, *const MemsetNodeParams, P) -> R;
        cuGraphAddEmptyNode: fn(*mut P, P, *const P, usize) -> R;
        cuGraphAddChildGraphNode: fn(*mut P, P, *const P, usize, P) -> R;
        cuGraphDestroyNode: fn(P) -> R;
        cuGraphAddDependencies_v2: fn(P, *const P, *const P, *const EdgeDataRaw, usize) -> R;
        cuGraphGetNodes: fn(P, *mut P, *mut usize) -> R;
        cuGraphGetEdges_v2: fn(P, *mut P, *mut P, *mut EdgeDataRaw, *mut usize) -> R;
        cuGraphNodeGetType: fn(P, *mut c_int) -> R;
        cuGraphKernelNodeGetParams_v2: fn(P, *mut KernelNodeParams) -> R;
        cuGraphKernelNodeSetParams_v2: fn(P, *const KernelNodeParams) -> R;
        cuGraphMemcpyNodeGetParams: fn(P, *mut Memcpy3D) -> R;
        cuGraphMemcpyNodeSetParams: fn(P, *const Memcpy3D) -> R;
        cuGraphMemsetNodeGetParams: fn(P, *mut MemsetNodeParams) -> R;
        cuGraphMemsetNodeSetParams: fn(P, *const MemsetNodeParams) -> R;
        cuGraphChildGraphNodeGetGraph: fn(P, *mut P) -> R;
        cuGraphInstantiateWithFlags: fn(*mut P, P, u64) -> R;
        cuGraphExecDestroy: fn(P) -> R;
        cuGraphExecKernelNodeSetParams_v2: fn(P, P, *const KernelNodeParams) -> R;
        cuGraphExecMemcpyNodeSetParams: fn(P, P, *const Memcpy3D, P) -> R;
        cuGraphExecMemsetNodeSetParams: fn(P, P, *const MemsetNodeParams, P) -> R;
        cuGraphExecChildGraphNodeSetParams: fn(P, P, P) -> R;
        cuGraphExecUpdate_v2: fn(P, P, *mut UpdateResultInfo) -> R;
        cuGraphLaunch: fn(P, P) -> R;
        cuStreamBeginCapture_v2: fn(P, c_int) -> R;
        cuStreamEndCapture: fn(P, *mut P) -> R;
        cuEventCreate: fn(*mut P, c_uint) -> R;
        cuEventDestroy_v2: fn(P) -> R;
        cuEventRecord: fn(P, P) -> R;
        cuEventQuery: fn(P) -> R;
        cuEventSynchronize: fn(P) -> R;
        cuGraphClone: fn(*mut P, P) -> R;
        cuMemGetInfo_v2: fn(*mut usize, *mut usize) -> R;
    }
}

symbol_table! {
    /// Virtual memory management (CUDA 10.2+).
    pub struct Vmm {
        cuMemCreate: fn(*mut u64, usize, *const AllocationProp, u64) -> R;
        cuMemRelease: fn(u64) -> R;
        cuMemAddressReserve: fn(*mut D, usize, usize, D, u64) -> R;
        cuMemAddressFree: fn(D, usize) -> R;
        cuMemMap: fn(D, usize, usize, u64, u64) -> R;
        cuMemUnmap: fn(D, usize) -> R;
        cuMemSetAccess: fn(D, usize, *const AccessDesc, usize) -> R;
        cuMemGetAllocationGranularity: fn(*mut usize, *const AllocationProp, c_int) -> R;
    }
}

symbol_table! {
    /// Pinned mapped host memory and 64-bit stream writes, for the GPU-written timeline.
    pub struct MemOps {
        cuMemHostAlloc: fn(*mut P, usize, c_uint) -> R;
        cuMemFreeHost: fn(P) -> R;
        cuMemHostGetDevicePointer_v2: fn(*mut D, P, c_uint) -> R;
        cuStreamWriteValue64_v2: fn(P, D, u64, c_uint) -> R;
        cuStreamWaitValue64_v2: fn(P, D, u64, c_uint) -> R;
    }
}

symbol_table! {
    /// Parameter layouts of compiled kernels (CUDA 12.4+), to read back `kernelParams` nodes.
    pub struct ParamInfo {
        cuFuncGetParamInfo: fn(P, usize, *mut usize, *mut usize) -> R;
        cuKernelGetFunction: fn(*mut P, P) -> R;
    }
}

symbol_table! {
    /// Whether a stream is capturing: says what a failed end of capture left behind.
    pub struct CaptureQuery {
        cuStreamIsCapturing: fn(P, *mut c_int) -> R;
    }
}

symbol_table! {
    /// The device of a stream, for an event the library records there: its context
    /// (CUDA 9.2+), made current for a moment to ask its device.
    pub struct StreamDevice {
        cuStreamGetCtx: fn(P, *mut P) -> R;
        cuCtxPushCurrent_v2: fn(P) -> R;
        cuCtxPopCurrent_v2: fn(*mut P) -> R;
        cuCtxGetDevice: fn(*mut c_int) -> R;
    }
}

symbol_table! {
    /// The calling thread's capture mode, relaxed around the library's own event calls so that a
    /// capture of the caller's never counts them as unsafe (CUDA 10.1+).
    pub struct ThreadCaptureMode {
        cuThreadExchangeStreamCaptureMode: fn(*mut c_int) -> R;
    }
}

symbol_table! {
    /// Kernel-node launch attributes (CUDA 11.7+).
    pub struct NodeAttributes {
        cuGraphKernelNodeCopyAttributes: fn(P, P) -> R;
    }
}

symbol_table! {
    /// The names of kernel functions (CUDA 12.3+), for the list of kernels whose arguments are
    /// never patched (`cmdbuf/opaque.rs`).
    pub struct FuncName {
        cuFuncGetName: fn(*mut *const c_char, P) -> R;
    }
}

symbol_table! {
    /// Event record and wait, host and stream memory-operation nodes, to flatten them (CUDA 11.7+).
    pub struct NodeKinds {
        cuGraphAddEventRecordNode: fn(*mut P, P, *const P, usize, P) -> R;
        cuGraphAddEventWaitNode: fn(*mut P, P, *const P, usize, P) -> R;
        cuGraphEventRecordNodeGetEvent: fn(P, *mut P) -> R;
        cuGraphEventWaitNodeGetEvent: fn(P, *mut P) -> R;
        cuGraphAddHostNode: fn(*mut P, P, *const P, usize, *const HostNodeParams) -> R;
        cuGraphHostNodeGetParams: fn(P, *mut HostNodeParams) -> R;
        cuGraphAddBatchMemOpNode: fn(*mut P, P, *const P, usize, *const BatchMemOpNodeParams) -> R;
        cuGraphBatchMemOpNodeGetParams: fn(P, *mut BatchMemOpNodeParams) -> R;
    }
}

symbol_table! {
    /// What kind of allocation an address lies in, for the executable memcpy setter's rule.
    pub struct PointerClass {
        cuPointerGetAttributes: fn(c_uint, *const c_int, *mut P, D) -> R;
        cuMemRetainAllocationHandle: fn(*mut u64, P) -> R;
        cuMemRelease: fn(u64) -> R;
    }
}
