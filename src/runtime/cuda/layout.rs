//! CUDA driver structs (CUDA 12/13 `cuda.h`, x86-64) and the constants that differ from HIP.
//! Sizes and offsets are checked at compile time against `reference/gpu-apis.md` §3.

use crate::runtime::common;
use crate::runtime::extra::Keys;
use crate::runtime::{MemcpyParams, MemsetParams, NodeType};
use std::ffi::c_void;
use std::mem::{offset_of, size_of};
use std::ptr::null_mut;

type P = *mut c_void;

pub const LAUNCH_PARAM_BUFFER_POINTER: usize = 0x1;
pub const LAUNCH_PARAM_BUFFER_SIZE: usize = 0x2;
/// `CU_LAUNCH_PARAM_END` is 0 (HIP's is 3, which CUDA rejects).
pub const LAUNCH_PARAM_END: usize = 0x0;
pub const EXTRA_KEYS: Keys =
    Keys { buffer_pointer: LAUNCH_PARAM_BUFFER_POINTER, buffer_size: LAUNCH_PARAM_BUFFER_SIZE, end: LAUNCH_PARAM_END };

pub const MEMORYTYPE_DEVICE: u32 = 2;
pub const MEMORYTYPE_UNIFIED: u32 = 4;

/// `CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP`.
pub const HOST_ALLOC_PORTABLE_DEVICEMAP: u32 = 0x1 | 0x2;

pub const ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: i32 = 102;
/// `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS`; the `_V1` attribute 93 reads 0 on Hopper.
pub const ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: i32 = 122;

/// `CUDA_KERNEL_NODE_PARAMS_v2`: the v1 fields, then `kern` (used only when `func` is null) and
/// `ctx` (ignored when `func` is set); both stay null here.
#[repr(C)]
pub struct KernelNodeParams {
    pub func: P,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub kernel_params: *mut P,
    pub extra: *mut P,
    pub kern: P,
    pub ctx: P,
}

/// `CUDA_MEMCPY3D` (= `_v2`).
#[repr(C)]
pub struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: u64,
    pub src_array: P,
    pub reserved0: P,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: u32,
    pub dst_host: P,
    pub dst_device: u64,
    pub dst_array: P,
    pub reserved1: P,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

/// `CUDA_MEMSET_NODE_PARAMS` (v1, CUDA field order).
#[repr(C)]
#[derive(Default)]
pub struct MemsetNodeParams {
    pub dst: u64,
    pub pitch: usize,
    pub value: u32,
    pub element_size: u32,
    pub width: usize,
    pub height: usize,
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
pub struct UpdateResultInfo {
    pub result: i32,
    pub error_node: P,
    pub error_from_node: P,
}

/// `CUgraphEdgeData`: from_port, to_port, type, 5 reserved bytes.
pub type EdgeDataRaw = [u8; 8];

#[repr(C)]
pub struct MemLocation {
    pub kind: i32,
    pub id: i32,
}

/// `CUmemAllocationProp`.
#[repr(C)]
pub struct AllocationProp {
    pub kind: i32,
    pub requested_handle_types: i32,
    pub location: MemLocation,
    pub win32_handle_meta_data: P,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAccessDesc`.
#[repr(C)]
pub struct AccessDesc {
    pub location: MemLocation,
    pub flags: i32,
}

const _: () = {
    assert!(size_of::<KernelNodeParams>() == 72);
    assert!(offset_of!(KernelNodeParams, grid) == 8);
    assert!(offset_of!(KernelNodeParams, block) == 20);
    assert!(offset_of!(KernelNodeParams, shared_mem_bytes) == 32);
    assert!(offset_of!(KernelNodeParams, kernel_params) == 40);
    assert!(offset_of!(KernelNodeParams, extra) == 48);
    assert!(offset_of!(KernelNodeParams, kern) == 56);
    assert!(offset_of!(KernelNodeParams, ctx) == 64);
    assert!(size_of::<Memcpy3D>() == 200);
    assert!(offset_of!(Memcpy3D, src_memory_type) == 32);
    assert!(offset_of!(Memcpy3D, src_device) == 48);
    assert!(offset_of!(Memcpy3D, src_pitch) == 72);
    assert!(offset_of!(Memcpy3D, dst_memory_type) == 120);
    assert!(offset_of!(Memcpy3D, dst_device) == 136);
    assert!(offset_of!(Memcpy3D, width_in_bytes) == 176);
    assert!(offset_of!(Memcpy3D, depth) == 192);
    assert!(size_of::<MemsetNodeParams>() == 40);
    assert!(offset_of!(MemsetNodeParams, value) == 16);
    assert!(offset_of!(MemsetNodeParams, element_size) == 20);
    assert!(offset_of!(MemsetNodeParams, width) == 24);
    assert!(size_of::<UpdateResultInfo>() == 24);
    assert!(size_of::<AllocationProp>() == 32);
    assert!(offset_of!(AllocationProp, location) == 8);
    assert!(offset_of!(AllocationProp, compression_type) == 24);
    assert!(size_of::<AccessDesc>() == 12);
};

impl KernelNodeParams {
    pub fn new(func: P, grid: [u32; 3], block: [u32; 3], shared_mem_bytes: u32, extra: *mut P) -> Self {
        Self { func, grid, block, shared_mem_bytes, kernel_params: null_mut(), extra, kern: null_mut(), ctx: null_mut() }
    }

    pub fn zeroed() -> Self {
        Self::new(null_mut(), [0; 3], [0; 3], 0, null_mut())
    }
}

impl Memcpy3D {
    /// A 1-D device-to-device copy.
    pub fn device_1d(c: &MemcpyParams) -> Self {
        Self {
            src_memory_type: MEMORYTYPE_DEVICE,
            src_device: c.src,
            dst_memory_type: MEMORYTYPE_DEVICE,
            dst_device: c.dst,
            width_in_bytes: c.bytes,
            height: 1,
            depth: 1,
            ..Self::zeroed()
        }
    }

    pub fn zeroed() -> Self {
        Self {
            src_x_in_bytes: 0,
            src_y: 0,
            src_z: 0,
            src_lod: 0,
            src_memory_type: 0,
            src_host: std::ptr::null(),
            src_device: 0,
            src_array: null_mut(),
            reserved0: null_mut(),
            src_pitch: 0,
            src_height: 0,
            dst_x_in_bytes: 0,
            dst_y: 0,
            dst_z: 0,
            dst_lod: 0,
            dst_memory_type: 0,
            dst_host: null_mut(),
            dst_device: 0,
            dst_array: null_mut(),
            reserved1: null_mut(),
            dst_pitch: 0,
            dst_height: 0,
            width_in_bytes: 0,
            height: 0,
            depth: 0,
        }
    }

    /// The copy as a 1-D device copy, or `None` for anything with a shape, an offset or a
    /// non-device operand.
    pub fn as_device_1d(&self) -> Option<MemcpyParams> {
        let device = |t: u32| t == MEMORYTYPE_DEVICE || t == MEMORYTYPE_UNIFIED;
        let offsets = [self.src_x_in_bytes, self.src_y, self.src_z, self.dst_x_in_bytes, self.dst_y, self.dst_z];
        (device(self.src_memory_type)
            && device(self.dst_memory_type)
            && offsets.iter().all(|&o| o == 0)
            && self.height <= 1
            && self.depth <= 1)
            .then_some(MemcpyParams { dst: self.dst_device, src: self.src_device, bytes: self.width_in_bytes })
    }
}

impl From<&MemsetParams> for MemsetNodeParams {
    fn from(s: &MemsetParams) -> Self {
        Self { dst: s.dst, pitch: s.pitch, value: s.value, element_size: s.element_size, width: s.width, height: s.height }
    }
}

impl From<&MemsetNodeParams> for MemsetParams {
    fn from(s: &MemsetNodeParams) -> Self {
        Self { dst: s.dst, value: s.value, element_size: s.element_size, width: s.width, height: s.height, pitch: s.pitch }
    }
}

impl AllocationProp {
    /// Pinned device memory on `device`, no exportable handle.
    pub fn device(device: i32) -> Self {
        Self {
            kind: 1,
            requested_handle_types: 0,
            location: MemLocation { kind: 1, id: device },
            win32_handle_meta_data: null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        }
    }
}

impl AccessDesc {
    pub fn read_write(device: i32) -> Self {
        Self { location: MemLocation { kind: 1, id: device }, flags: 3 }
    }
}

/// CUDA 13 `CUgraphNodeType`: 12 batch memory operations, 13 conditional.
pub fn node_type(raw: i32) -> NodeType {
    common::node_type(raw, 12, Some(13))
}

/// Packs argument values (`values[i]` points at `sizes[i]` bytes placed at `offsets[i]`) into
/// one blob ending at the last parameter (no tail padding).
///
/// # Safety
/// Each `values[i]` must point at `sizes[i]` readable bytes.
pub unsafe fn pack_params(values: *const P, layout: &[(usize, usize)]) -> Vec<u8> {
    let end = layout.iter().map(|&(offset, size)| offset + size).max().unwrap_or(0);
    let mut blob = vec![0u8; end];
    for (i, &(offset, size)) in layout.iter().enumerate() {
        // SAFETY: per the contract, `values[i]` points at `size` bytes.
        let src = unsafe { std::slice::from_raw_parts(*values.add(i) as *const u8, size) };
        blob[offset..offset + size].copy_from_slice(src);
    }
    blob
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_kernel_params_at_their_offsets_without_tail_padding() {
        // (u64 ptr, u32 value, u64 n) and (u64, u32): 24 and 12 bytes.
        let (p, v, n) = (0x1122_3344_5566_7788u64, 0xaabb_ccddu32, 5u64);
        let values: [P; 3] = [&p as *const u64 as P, &v as *const u32 as P, &n as *const u64 as P];
        // SAFETY: each value points at a live local of the size its layout entry gives.
        let blob = unsafe { pack_params(values.as_ptr(), &[(0, 8), (8, 4), (16, 8)]) };
        assert_eq!(blob.len(), 24);
        assert_eq!(&blob[0..8], &p.to_le_bytes());
        assert_eq!(&blob[8..12], &v.to_le_bytes());
        assert_eq!(&blob[16..24], &n.to_le_bytes());
        // SAFETY: as above.
        let blob = unsafe { pack_params(values.as_ptr(), &[(0, 8), (8, 4)]) };
        assert_eq!(blob.len(), 12);
    }

    #[test]
    fn node_types_past_the_free_node_are_cuda_s() {
        assert_eq!((node_type(10), node_type(11)), (NodeType::MemAlloc, NodeType::MemFree));
        assert_eq!((node_type(12), node_type(13)), (NodeType::MemOp, NodeType::Conditional));
        assert_eq!(node_type(14), NodeType::Other(14));
    }

    #[test]
    fn memcpy_read_back_accepts_only_plain_1d_device_copies() {
        let c = MemcpyParams { dst: 0x1000, src: 0x2000, bytes: 64 };
        assert_eq!(Memcpy3D::device_1d(&c).as_device_1d(), Some(c));
        let shaped = Memcpy3D { height: 2, ..Memcpy3D::device_1d(&c) };
        assert_eq!(shaped.as_device_1d(), None);
        let from_host = Memcpy3D { src_memory_type: 1, ..Memcpy3D::device_1d(&c) };
        assert_eq!(from_host.as_device_1d(), None);
    }
}
