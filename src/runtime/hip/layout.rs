//! HIP structs and numbers that changed between ROCm versions, chosen once from
//! `hipRuntimeGetVersion` (see the project reference on GPU APIs, §3).

use crate::runtime::common;
use crate::runtime::{MemcpyParams, MemcpyReadBack, MemsetParams, NodeType};
use hip_runtime_sys::{hipExtent, hipMemAllocationProp, hipMemLocation, hipMemsetParams, hipPitchedPtr, hipPos};
use std::ffi::{c_int, c_void};

/// First runtime with real VMM, the 5.3+ `hipMemAllocationProp` and the 5.3+ node-type numbers.
const ROCM_5_3: i32 = 50_300_000;
/// First runtime known to fill a 1-D memcpy node's 3-D parameters (read in the 7.2.4 binary; the
/// 6.4.3 one does not, 7.0 and 7.1 were not read).
const ROCM_7_2: i32 = 70_200_000;
/// First runtime whose header calls `hipGetDeviceProperties` `hipGetDevicePropertiesR0600`, with
/// a `hipDeviceProp_t` (`hipDeviceProp_tR0600`) of its own; the old symbol keeps the old layout.
const ROCM_6_0: i32 = 60_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: i32,
}

/// `hipMemcpy3DParms` with the copy kind kept as an integer, because it is read back from the
/// runtime.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3DParms {
    pub src_array: *mut c_void,
    pub src_pos: hipPos,
    pub src_ptr: hipPitchedPtr,
    pub dst_array: *mut c_void,
    pub dst_pos: hipPos,
    pub dst_ptr: hipPitchedPtr,
    pub extent: hipExtent,
    pub kind: c_int,
}

/// `hipMemAllocationProp` as ROCm 5.2 declared it (changed in 5.3, ROCm/HIP d267eb7d6).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemAllocationProp52 {
    pub compression_type: u8,
    pub location: hipMemLocation,
    pub requested_handle_type: c_int,
    pub alloc_type: c_int,
    pub usage: u16,
    pub win32_handle_meta_data: *mut c_void,
}

/// An allocation property in the runtime's layout.
pub enum AllocProp {
    Rocm52(MemAllocationProp52),
    Rocm53(hipMemAllocationProp),
}

impl AllocProp {
    pub fn as_ptr(&self) -> *const c_void {
        match self {
            AllocProp::Rocm52(p) => p as *const _ as *const c_void,
            AllocProp::Rocm53(p) => p as *const _ as *const c_void,
        }
    }
}

/// Where the device properties keep the architecture name (`gcnArchName`, `char[256]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// `hipGetDevicePropertiesR0600` with `hipDeviceProp_tR0600`, else `hipGetDeviceProperties`
    /// with the pre-6.0 `hipDeviceProp_t`.
    pub r0600: bool,
    pub size: usize,
    pub arch_offset: usize,
    pub arch_len: usize,
}

impl Layout {
    pub fn for_version(version: i32) -> Layout {
        Layout { version }
    }

    pub fn has_real_vmm(self) -> bool {
        self.version >= ROCM_5_3
    }

    pub fn node_type(self, raw: c_int) -> NodeType {
        if self.version < ROCM_5_3 {
            match raw {
                1 => NodeType::Kernel,
                2 | 9 => NodeType::Memcpy,
                3 => NodeType::Memset,
                4 => NodeType::Host,
                5 => NodeType::Child,
                6 => NodeType::Empty,
                7 => NodeType::EventWait,
                8 => NodeType::EventRecord,
                other => NodeType::Other(other),
            }
        } else {
            common::node_type(raw, 14)
        }
    }

    /// The device-properties call and struct of this version.
    pub fn device_props(self) -> DeviceProps {
        if self.version >= ROCM_6_0 {
            DeviceProps { r0600: true, size: 1472, arch_offset: 1160, arch_len: 256 }
        } else {
            DeviceProps { r0600: false, size: 792, arch_offset: 396, arch_len: 256 }
        }
    }

    /// A pinned device allocation on `device`, no exportable handle.
    pub fn alloc_prop(self, device: i32) -> AllocProp {
        // Location type DEVICE = 1 and allocation type PINNED = 1 on every version.
        let location = hipMemLocation { type_: hip_runtime_sys::hipMemLocationType::hipMemLocationTypeDevice, id: device };
        if self.version < ROCM_5_3 {
            AllocProp::Rocm52(MemAllocationProp52 {
                compression_type: 0,
                location,
                requested_handle_type: 0,
                alloc_type: 1,
                usage: 0,
                win32_handle_meta_data: std::ptr::null_mut(),
            })
        } else {
            // SAFETY: an all-zero hipMemAllocationProp is valid (enums have zero variants) and the
            // fields we need are set below.
            let mut p: hipMemAllocationProp = unsafe { std::mem::zeroed() };
            p.type_ = hip_runtime_sys::hipMemAllocationType::hipMemAllocationTypePinned;
            p.location = location;
            AllocProp::Rocm53(p)
        }
    }

    /// The memset struct. ROCm 5.2 to 6.x and the shipped ROCm 7 headers keep the alphabetical
    /// field order; the HIP 7.0 change list announces the CUDA order, which no shipped header
    /// we know of has, so the alphabetical layout is used for every version.
    pub fn memset(self, set: &MemsetParams) -> hipMemsetParams {
        hipMemsetParams {
            dst: set.dst as *mut c_void,
            elementSize: set.element_size,
            height: set.height,
            pitch: set.pitch,
            value: set.value,
            width: set.width,
        }
    }

    pub fn memset_read(self, raw: &hipMemsetParams) -> MemsetParams {
        MemsetParams {
            dst: raw.dst as u64,
            value: raw.value,
            element_size: raw.elementSize,
            width: raw.width,
            height: raw.height,
            pitch: raw.pitch,
        }
    }

    /// What `hipGraphMemcpyNodeGetParams` tells of a 1-D memcpy node (`hipGraphAddMemcpyNode1D`,
    /// a captured `hipMemcpyAsync`: clr's `GraphMemcpyNode1D`, which runs its own copy of the
    /// parameters). Before 7.2 clr never fills the 3-D parameters of such a node (5.x: the node
    /// is not a memcpy node at all and the call reads its other fields; 6.x: they are left
    /// uninitialised), and no call tells such a node from a 3-D one whose parameters are right.
    /// From 7.2 they are filled when the node is made and never refreshed.
    pub fn memcpy_read_back(self) -> MemcpyReadBack {
        let v = super::version_text(self.version);
        if self.version >= ROCM_7_2 {
            MemcpyReadBack::AsCreated(format!(
                "HIP {v} reports a 1-D memcpy node's parameters as it was created: hipGraphMemcpyNodeSetParams1D does not refresh them"
            ))
        } else {
            MemcpyReadBack::Never(format!(
                "HIP {v} does not fill a 1-D memcpy node's parameters (hipGraphMemcpyNodeGetParams returns memory it never wrote), and no call tells such a node from a filled one"
            ))
        }
    }

    /// A 1-D copy read back as 3-D parameters; `None` when it is not a plain 1-D copy.
    pub fn memcpy_read(self, raw: &Memcpy3DParms) -> Option<MemcpyParams> {
        let one_d = raw.src_array.is_null()
            && raw.dst_array.is_null()
            && raw.extent.height <= 1
            && raw.extent.depth <= 1
            && raw.src_pos.x == 0
            && raw.dst_pos.x == 0;
        one_d.then_some(MemcpyParams { dst: raw.dst_ptr.ptr as u64, src: raw.src_ptr.ptr as u64, bytes: raw.extent.width })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_types_follow_the_version() {
        let old = Layout::for_version(50_221_153);
        let new = Layout::for_version(60_241_134);
        assert_eq!(old.node_type(1), NodeType::Kernel);
        assert_eq!(old.node_type(9), NodeType::Memcpy);
        assert_eq!(old.node_type(0), NodeType::Other(0));
        assert_eq!(new.node_type(0), NodeType::Kernel);
        assert_eq!(new.node_type(4), NodeType::Child);
        assert_eq!(new.node_type(14), NodeType::MemOp);
    }

    #[test]
    fn memcpy_parameters_are_trusted_from_7_2_and_only_as_created() {
        for v in [50_221_153, 50_731_921, 60_443_484, 70_153_000] {
            let MemcpyReadBack::Never(why) = Layout::for_version(v).memcpy_read_back() else { panic!("{v}: trusted") };
            assert!(why.starts_with(&format!("HIP {}", super::super::version_text(v))), "{why}");
        }
        let MemcpyReadBack::AsCreated(why) = Layout::for_version(70_253_211).memcpy_read_back() else { panic!("7.2.4") };
        assert!(why.contains("HIP 7.2.53211") && why.contains("SetParams1D"), "{why}");
    }

    #[test]
    fn alloc_prop_layouts_match_the_reference_offsets() {
        assert_eq!(std::mem::size_of::<MemAllocationProp52>(), 32);
        assert_eq!(std::mem::offset_of!(MemAllocationProp52, location), 4);
        assert_eq!(std::mem::offset_of!(MemAllocationProp52, requested_handle_type), 12);
        assert_eq!(std::mem::offset_of!(MemAllocationProp52, alloc_type), 16);
        assert_eq!(std::mem::offset_of!(MemAllocationProp52, usage), 20);
        assert_eq!(std::mem::offset_of!(MemAllocationProp52, win32_handle_meta_data), 24);
        assert_eq!(std::mem::size_of::<hipMemAllocationProp>(), 32);
        assert_eq!(std::mem::offset_of!(hipMemAllocationProp, location), 8);
        assert_eq!(std::mem::size_of::<Memcpy3DParms>(), 160);
        assert_eq!(std::mem::offset_of!(Memcpy3DParms, kind), 152);
        assert_eq!(std::mem::size_of::<hipMemsetParams>(), 48);
        assert_eq!(std::mem::offset_of!(hipMemsetParams, value), 32);
    }
}
