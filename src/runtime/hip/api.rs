//! The HIP entry points this library calls, grouped by feature. `Core` is required; the others
//! are optional and switch one feature off when the runtime lacks them.
//!
//! Every prototype is written as HIP's header declares it: parameters under the header's names,
//! types under the header's type names (the aliases below say what each is in Rust). Arguments are
//! passed in the order written here. CI compiles these prototypes, the aliases' sizes and the
//! structs' layouts against the real headers of each supported ROCm (`src/runtime/hip/abi.rs`).

#![allow(non_camel_case_types)]

use crate::runtime::symbols::symbol_table;
pub use hip_runtime_sys::{hipKernelNodeParams, hipMemAccessDesc};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// The C types of HIP's prototypes, by their header names, and `SIZES`: each one's size in Rust,
/// for the ABI probe (`None` for a type whose layout the runtime's version decides, checked as a
/// struct of its own).
macro_rules! c_types {
    ($( $(#[$meta:meta])* $name:ident = $rust:ty, $size:expr; )*) => {
        $( $(#[$meta])* pub type $name = $rust; )*

        #[cfg(test)]
        pub const SIZES: &[(&str, Option<usize>)] = &[$( (stringify!($name), $size) ),*];
    };
}

c_types! {
    /// Kept as an integer: the runtime may return values newer than any enum of ours.
    hipError_t = c_int, Some(size_of::<c_int>());
    /// A device ordinal (clr's `typedef int hipDevice_t`).
    hipDevice_t = c_int, Some(size_of::<c_int>());
    hipStream_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipEvent_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipGraph_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipGraphNode_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipGraphExec_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipModule_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipFunction_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipDeviceptr_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipMemGenericAllocationHandle_t = *mut c_void, Some(size_of::<*mut c_void>());
    hipMemcpyKind = c_int, Some(size_of::<c_int>());
    hipStreamCaptureMode = c_int, Some(size_of::<c_int>());
    hipStreamCaptureStatus = c_int, Some(size_of::<c_int>());
    hipGraphNodeType = c_int, Some(size_of::<c_int>());
    hipGraphExecUpdateResult = c_int, Some(size_of::<c_int>());
    hipMemAllocationGranularity_flags = c_int, Some(size_of::<c_int>());
    /// In the layout of `layout.rs`, checked as a struct.
    hipMemcpy3DParms = super::layout::Memcpy3DParms, None;
    /// Built by `Layout::memset`.
    hipMemsetParams = c_void, None;
    /// In the layout of the runtime's version (`Layout::alloc_prop`).
    hipMemAllocationProp = c_void, None;
    /// In the layout of the runtime's version (`Layout::device_props`).
    hipDeviceProp_t = c_void, None;
    /// ROCm 6.0+ (`Layout::device_props`).
    hipDeviceProp_tR0600 = c_void, None;
    /// The same two fields as CUDA's, checked as a struct.
    hipHostNodeParams = crate::runtime::common::HostNodeParams, None;
    /// ROCm 6.4+; the same four fields as CUDA's, checked as a struct.
    hipBatchMemOpNodeParams = crate::runtime::common::BatchMemOpNodeParams, None;
}

symbol_table! {
    pub struct Core {
        hipRuntimeGetVersion: fn(runtimeVersion: *mut c_int) -> hipError_t;
        hipGetDeviceCount: fn(count: *mut c_int) -> hipError_t;
        hipGetDevice: fn(deviceId: *mut c_int) -> hipError_t;
        hipSetDevice: fn(deviceId: c_int) -> hipError_t;
        hipGetErrorName: fn(hip_error: hipError_t) -> *const c_char;
        hipGetErrorString: fn(hipError: hipError_t) -> *const c_char;
        hipDeviceCanAccessPeer: fn(canAccessPeer: *mut c_int, deviceId: c_int, peerDeviceId: c_int) -> hipError_t;
        hipDeviceGetStreamPriorityRange: fn(leastPriority: *mut c_int, greatestPriority: *mut c_int) -> hipError_t;
        hipMalloc: fn(ptr: *mut *mut c_void, size: usize) -> hipError_t;
        hipFree: fn(ptr: *mut c_void) -> hipError_t;
        hipMemcpy: fn(dst: *mut c_void, src: *const c_void, sizeBytes: usize, kind: hipMemcpyKind) -> hipError_t;
        hipMemcpyDtoDAsync: fn(dst: hipDeviceptr_t, src: hipDeviceptr_t, sizeBytes: usize, stream: hipStream_t) -> hipError_t;
        hipStreamCreateWithPriority: fn(stream: *mut hipStream_t, flags: c_uint, priority: c_int) -> hipError_t;
        hipStreamDestroy: fn(stream: hipStream_t) -> hipError_t;
        hipStreamQuery: fn(stream: hipStream_t) -> hipError_t;
        hipStreamSynchronize: fn(stream: hipStream_t) -> hipError_t;
        hipStreamGetFlags: fn(stream: hipStream_t, flags: *mut c_uint) -> hipError_t;
        hipStreamGetPriority: fn(stream: hipStream_t, priority: *mut c_int) -> hipError_t;
        hipModuleLoadData: fn(module: *mut hipModule_t, image: *const c_void) -> hipError_t;
        hipModuleUnload: fn(module: hipModule_t) -> hipError_t;
        hipModuleGetFunction: fn(function: *mut hipFunction_t, module: hipModule_t, kname: *const c_char) -> hipError_t;
        hipModuleLaunchKernel: fn(
            f: hipFunction_t, gridDimX: c_uint, gridDimY: c_uint, gridDimZ: c_uint, blockDimX: c_uint, blockDimY: c_uint,
            blockDimZ: c_uint, sharedMemBytes: c_uint, stream: hipStream_t, kernelParams: *mut *mut c_void, extra: *mut *mut c_void
        ) -> hipError_t;
        hipGraphCreate: fn(pGraph: *mut hipGraph_t, flags: c_uint) -> hipError_t;
        hipGraphDestroy: fn(graph: hipGraph_t) -> hipError_t;
        hipGraphAddKernelNode: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize,
            pNodeParams: *const hipKernelNodeParams
        ) -> hipError_t;
        hipGraphAddMemcpyNode1D: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize,
            dst: *mut c_void, src: *const c_void, count: usize, kind: hipMemcpyKind
        ) -> hipError_t;
        hipGraphAddMemsetNode: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize,
            pMemsetParams: *const hipMemsetParams
        ) -> hipError_t;
        hipGraphAddEmptyNode: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize
        ) -> hipError_t;
        hipGraphAddChildGraphNode: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize,
            childGraph: hipGraph_t
        ) -> hipError_t;
        hipGraphDestroyNode: fn(node: hipGraphNode_t) -> hipError_t;
        hipGraphAddDependencies: fn(
            graph: hipGraph_t, from: *const hipGraphNode_t, to: *const hipGraphNode_t, numDependencies: usize
        ) -> hipError_t;
        hipGraphGetNodes: fn(graph: hipGraph_t, nodes: *mut hipGraphNode_t, numNodes: *mut usize) -> hipError_t;
        hipGraphGetEdges: fn(graph: hipGraph_t, from: *mut hipGraphNode_t, to: *mut hipGraphNode_t, numEdges: *mut usize) -> hipError_t;
        hipGraphNodeGetType: fn(node: hipGraphNode_t, pType: *mut hipGraphNodeType) -> hipError_t;
        hipGraphKernelNodeGetParams: fn(node: hipGraphNode_t, pNodeParams: *mut hipKernelNodeParams) -> hipError_t;
        hipGraphKernelNodeSetParams: fn(node: hipGraphNode_t, pNodeParams: *const hipKernelNodeParams) -> hipError_t;
        hipGraphMemcpyNodeGetParams: fn(node: hipGraphNode_t, pNodeParams: *mut hipMemcpy3DParms) -> hipError_t;
        hipGraphMemcpyNodeSetParams1D: fn(
            node: hipGraphNode_t, dst: *mut c_void, src: *const c_void, count: usize, kind: hipMemcpyKind
        ) -> hipError_t;
        hipGraphMemsetNodeGetParams: fn(node: hipGraphNode_t, pNodeParams: *mut hipMemsetParams) -> hipError_t;
        hipGraphMemsetNodeSetParams: fn(node: hipGraphNode_t, pNodeParams: *const hipMemsetParams) -> hipError_t;
        hipGraphChildGraphNodeGetGraph: fn(node: hipGraphNode_t, pGraph: *mut hipGraph_t) -> hipError_t;
        hipGraphInstantiate: fn(
            pGraphExec: *mut hipGraphExec_t, graph: hipGraph_t, pErrorNode: *mut hipGraphNode_t, pLogBuffer: *mut c_char, bufferSize: usize
        ) -> hipError_t;
        hipGraphExecDestroy: fn(graphExec: hipGraphExec_t) -> hipError_t;
        hipGraphExecKernelNodeSetParams: fn(
            hGraphExec: hipGraphExec_t, node: hipGraphNode_t, pNodeParams: *const hipKernelNodeParams
        ) -> hipError_t;
        hipGraphExecMemcpyNodeSetParams1D: fn(
            hGraphExec: hipGraphExec_t, node: hipGraphNode_t, dst: *mut c_void, src: *const c_void, count: usize, kind: hipMemcpyKind
        ) -> hipError_t;
        hipGraphExecMemsetNodeSetParams: fn(
            hGraphExec: hipGraphExec_t, node: hipGraphNode_t, pNodeParams: *const hipMemsetParams
        ) -> hipError_t;
        hipGraphExecChildGraphNodeSetParams: fn(hGraphExec: hipGraphExec_t, node: hipGraphNode_t, childGraph: hipGraph_t) -> hipError_t;
        hipGraphExecUpdate: fn(
            hGraphExec: hipGraphExec_t, hGraph: hipGraph_t, hErrorNode_out: *mut hipGraphNode_t,
            updateResult_out: *mut hipGraphExecUpdateResult
        ) -> hipError_t;
        hipGraphLaunch: fn(graphExec: hipGraphExec_t, stream: hipStream_t) -> hipError_t;
        hipStreamBeginCapture: fn(stream: hipStream_t, mode: hipStreamCaptureMode) -> hipError_t;
        hipStreamEndCapture: fn(stream: hipStream_t, pGraph: *mut hipGraph_t) -> hipError_t;
        hipEventCreateWithFlags: fn(event: *mut hipEvent_t, flags: c_uint) -> hipError_t;
        hipEventDestroy: fn(event: hipEvent_t) -> hipError_t;
        hipEventRecord: fn(event: hipEvent_t, stream: hipStream_t) -> hipError_t;
        hipEventQuery: fn(event: hipEvent_t) -> hipError_t;
        hipEventSynchronize: fn(event: hipEvent_t) -> hipError_t;
        hipGraphClone: fn(pGraphClone: *mut hipGraph_t, originalGraph: hipGraph_t) -> hipError_t;
        hipMemGetInfo: fn(free: *mut usize, total: *mut usize) -> hipError_t;
    }
}

symbol_table! {
    /// Virtual memory management: exported since ROCm 5.2 but real only from 5.3.
    pub struct Vmm {
        hipMemCreate: fn(
            handle: *mut hipMemGenericAllocationHandle_t, size: usize, prop: *const hipMemAllocationProp, flags: c_ulonglong
        ) -> hipError_t;
        hipMemRelease: fn(handle: hipMemGenericAllocationHandle_t) -> hipError_t;
        hipMemAddressReserve: fn(ptr: *mut *mut c_void, size: usize, alignment: usize, addr: *mut c_void, flags: c_ulonglong) -> hipError_t;
        hipMemAddressFree: fn(devPtr: *mut c_void, size: usize) -> hipError_t;
        hipMemMap: fn(
            ptr: *mut c_void, size: usize, offset: usize, handle: hipMemGenericAllocationHandle_t, flags: c_ulonglong
        ) -> hipError_t;
        hipMemUnmap: fn(ptr: *mut c_void, size: usize) -> hipError_t;
        hipMemSetAccess: fn(ptr: *mut c_void, size: usize, desc: *const hipMemAccessDesc, count: usize) -> hipError_t;
        hipMemGetAllocationGranularity: fn(
            granularity: *mut usize, prop: *const hipMemAllocationProp, option: hipMemAllocationGranularity_flags
        ) -> hipError_t;
    }
}

symbol_table! {
    /// Signal memory and stream writes, for the GPU-written timeline.
    pub struct MemOps {
        hipExtMallocWithFlags: fn(ptr: *mut *mut c_void, sizeBytes: usize, flags: c_uint) -> hipError_t;
        hipStreamWriteValue64: fn(stream: hipStream_t, ptr: *mut c_void, value: u64, flags: c_uint) -> hipError_t;
        hipStreamWaitValue64: fn(stream: hipStream_t, ptr: *mut c_void, value: u64, flags: c_uint, mask: u64) -> hipError_t;
    }
}

symbol_table! {
    /// Whether a stream is capturing: says what a failed end of capture left behind.
    pub struct CaptureQuery {
        hipStreamIsCapturing: fn(stream: hipStream_t, pCaptureStatus: *mut hipStreamCaptureStatus) -> hipError_t;
    }
}

symbol_table! {
    /// The device of a stream, for an event the library records there (ROCm 5.6+).
    pub struct StreamDevice {
        hipStreamGetDevice: fn(stream: hipStream_t, device: *mut hipDevice_t) -> hipError_t;
    }
}

symbol_table! {
    /// The calling thread's capture mode, relaxed around the library's own event calls so that a
    /// capture of the caller's never counts them as unsafe (ROCm 5.0+, symbol version hip_5.0).
    pub struct ThreadCaptureMode {
        hipThreadExchangeStreamCaptureMode: fn(mode: *mut hipStreamCaptureMode) -> hipError_t;
    }
}

symbol_table! {
    /// The calling thread's last error, which the update budget's probe leaves as it found it
    /// (every HIP since 4.2, symbol version hip_4.2).
    pub struct LastError {
        hipGetLastError: fn() -> hipError_t;
        hipPeekAtLastError: fn() -> hipError_t;
    }
}

/// The node `hipGraphKernelNodeCopyAttributes` copies from: HIP takes it first, the reverse of
/// CUDA's `cuGraphKernelNodeCopyAttributes(dst, src)`, so each end has a type of its own and a
/// call with the two swapped does not compile.
#[repr(transparent)]
pub struct SourceNode(pub hipGraphNode_t);

/// The node `hipGraphKernelNodeCopyAttributes` copies to (see [`SourceNode`]).
#[repr(transparent)]
pub struct DestinationNode(pub hipGraphNode_t);

symbol_table! {
    /// Kernel-node launch attributes (ROCm 5.5+).
    pub struct NodeAttributes {
        hipGraphKernelNodeCopyAttributes: fn(hSrc: SourceNode, hDst: DestinationNode) -> hipError_t;
    }
}

symbol_table! {
    /// The names of kernel functions, for the list of kernels whose arguments are never patched
    /// (`cmdbuf/opaque.rs`). Both return the registered (mangled) name or null; `ByPtr` takes the
    /// host stub a runtime launch stores in a node and ignores the stream.
    pub struct KernelNames {
        hipKernelNameRef: fn(f: hipFunction_t) -> *const c_char;
        hipKernelNameRefByPtr: fn(hostFunction: *const c_void, stream: hipStream_t) -> *const c_char;
    }
}

symbol_table! {
    /// The device's properties in the ROCm 6.0+ layout, for its architecture name.
    pub struct DevicePropsR0600 {
        hipGetDevicePropertiesR0600: fn(prop: *mut hipDeviceProp_tR0600, deviceId: c_int) -> hipError_t;
    }
}

symbol_table! {
    /// The device's properties in the layout before ROCm 6.0.
    pub struct DevicePropsR0000 {
        hipGetDeviceProperties: fn(prop: *mut hipDeviceProp_t, deviceId: c_int) -> hipError_t;
    }
}

symbol_table! {
    /// Event record and wait nodes, to flatten them (exported since ROCm 5.2).
    pub struct EventNodes {
        hipGraphAddEventRecordNode: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize,
            event: hipEvent_t
        ) -> hipError_t;
        hipGraphAddEventWaitNode: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize,
            event: hipEvent_t
        ) -> hipError_t;
        hipGraphEventRecordNodeGetEvent: fn(node: hipGraphNode_t, event_out: *mut hipEvent_t) -> hipError_t;
        hipGraphEventWaitNodeGetEvent: fn(node: hipGraphNode_t, event_out: *mut hipEvent_t) -> hipError_t;
    }
}

symbol_table! {
    /// Host nodes, to flatten them (exported since ROCm 5.2).
    pub struct HostNodes {
        hipGraphAddHostNode: fn(
            pGraphNode: *mut hipGraphNode_t, graph: hipGraph_t, pDependencies: *const hipGraphNode_t, numDependencies: usize,
            pNodeParams: *const hipHostNodeParams
        ) -> hipError_t;
        hipGraphHostNodeGetParams: fn(node: hipGraphNode_t, pNodeParams: *mut hipHostNodeParams) -> hipError_t;
    }
}

symbol_table! {
    /// Stream memory-operation nodes, to flatten them (ROCm 6.4+).
    pub struct MemOpNodes {
        hipGraphAddBatchMemOpNode: fn(
            phGraphNode: *mut hipGraphNode_t, hGraph: hipGraph_t, dependencies: *const hipGraphNode_t, numDependencies: usize,
            nodeParams: *const hipBatchMemOpNodeParams
        ) -> hipError_t;
        hipGraphBatchMemOpNodeGetParams: fn(hNode: hipGraphNode_t, nodeParams_out: *mut hipBatchMemOpNodeParams) -> hipError_t;
    }
}
