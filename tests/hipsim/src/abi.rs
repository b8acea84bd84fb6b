//! C struct layouts of ROCm 6.x (x86-64) that cross the boundary.

use std::ffi::c_void;

#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Debug)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// hipKernelNodeParams: alphabetical field order on AMD, 64 bytes.
#[repr(C)]
pub struct KernelNodeParams {
    pub block_dim: Dim3,
    pub extra: *mut *mut c_void,
    pub func: *mut c_void,
    pub grid_dim: Dim3,
    pub kernel_params: *mut *mut c_void,
    pub shared_mem_bytes: u32,
}

/// hipMemsetParams (alphabetical through ROCm 6.x), 48 bytes.
#[repr(C)]
pub struct MemsetParams {
    pub dst: *mut c_void,
    pub element_size: u32,
    pub height: usize,
    pub pitch: usize,
    pub value: u32,
    pub width: usize,
}

#[repr(C)]
pub struct HostNodeParams {
    pub func: Option<unsafe extern "C" fn(*mut c_void)>,
    pub user_data: *mut c_void,
}

/// One stream memory operation (hipStreamBatchMemOpParams, a 48-byte union whose first word is
/// the operation), kept as the words the program gave.
pub type MemOpWords = [u64; 6];

/// hipBatchMemOpNodeParams (ROCm 6.4+), 32 bytes.
#[repr(C)]
pub struct BatchMemOpNodeParams {
    pub ctx: *mut c_void,
    pub count: u32,
    pub param_array: *mut MemOpWords,
    pub flags: u32,
}

/// hipMemAllocNodeParams: the pool properties (88 bytes: type, handle types, location, a
/// pointer, then reserved bytes, which hipsim ignores), the access descriptors, then the size
/// asked for and the address returned.
#[repr(C)]
pub struct MemAllocNodeParams {
    pub pool_props: [u8; 88],
    pub access_descs: *const c_void,
    pub access_desc_count: usize,
    pub bytesize: usize,
    pub dptr: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Pos {
    pub x: usize,
    pub y: usize,
    pub z: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PitchedPtr {
    pub ptr: *mut c_void,
    pub pitch: usize,
    pub xsize: usize,
    pub ysize: usize,
}

/// hipMemcpy3DParms, 160 bytes.
#[repr(C)]
pub struct Memcpy3DParms {
    pub src_array: *mut c_void,
    pub src_pos: Pos,
    pub src_ptr: PitchedPtr,
    pub dst_array: *mut c_void,
    pub dst_pos: Pos,
    pub dst_ptr: PitchedPtr,
    pub extent: Pos,
    pub kind: i32,
}

/// One side of a HIP_MEMCPY3D, 80 bytes.
#[repr(C)]
pub struct DrvMemcpySide {
    pub x_in_bytes: usize,
    pub y: usize,
    pub z: usize,
    pub lod: usize,
    /// hipMemoryType: host 1, device 2, array 10, unified 11.
    pub memory_type: i32,
    pub host: *mut c_void,
    pub device: usize,
    pub array: *mut c_void,
    pub pitch: usize,
    pub height: usize,
}

/// HIP_MEMCPY3D (`hipDrvGraphAddMemcpyNode`), 184 bytes: unlike CUDA's, no reserved words.
#[repr(C)]
pub struct DrvMemcpy3D {
    pub src: DrvMemcpySide,
    pub dst: DrvMemcpySide,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    pub kind: i32,
    pub id: i32,
}

/// hipMemAllocationProp, ROCm >= 5.3 layout, 32 bytes.
#[repr(C)]
pub struct MemAllocationProp {
    pub kind: i32,
    pub requested_handle_type: i32,
    pub location: MemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
}

#[repr(C)]
pub struct MemAccessDesc {
    pub location: MemLocation,
    pub flags: i32,
}

/// hipAccessPolicyWindow, 32 bytes: the first member of hipKernelNodeAttrValue, whose other
/// members (cooperative, priority) are an `int` at offset 0. The base pointer is kept as an
/// address: the window is stored, never dereferenced.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Debug)]
pub struct AccessPolicyWindow {
    pub base_ptr: u64,
    pub hit_prop: i32,
    pub hit_ratio: f32,
    pub miss_prop: i32,
    pub num_bytes: usize,
}

pub const MEM_LOCATION_DEVICE: i32 = 1;
pub const MEM_ALLOCATION_PINNED: i32 = 1;

const _: () = {
    assert!(size_of::<KernelNodeParams>() == 64);
    assert!(std::mem::offset_of!(KernelNodeParams, kernel_params) == 48);
    assert!(size_of::<MemsetParams>() == 48);
    assert!(std::mem::offset_of!(MemsetParams, width) == 40);
    assert!(size_of::<Memcpy3DParms>() == 160);
    assert!(std::mem::offset_of!(Memcpy3DParms, kind) == 152);
    assert!(size_of::<DrvMemcpy3D>() == 184);
    assert!(std::mem::offset_of!(DrvMemcpy3D, dst) == 80);
    assert!(size_of::<MemAllocationProp>() == 32);
    assert!(size_of::<MemAccessDesc>() == 12);
    assert!(size_of::<AccessPolicyWindow>() == 32);
    assert!(size_of::<BatchMemOpNodeParams>() == 32);
    assert!(size_of::<MemAllocNodeParams>() == 120);
    assert!(std::mem::offset_of!(MemAllocNodeParams, dptr) == 112);
};
