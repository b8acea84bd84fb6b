//! HIP structs and numbers that changed between ROCm versions, chosen once from
//! `hipRuntimeGetVersion` (see the project reference on GPU APIs, §3).

use crate::runtime::common;
use crate::runtime::{MemcpyParams, MemcpyReadBack, MemsetParams, NodeType};
use hip_runtime_sys::{hipExtent, hipMemAllocationProp, hipMemLocation, hipMemsetParams, hipPitchedPtr, hipPos};
use std::ffi::{c_int, c_void};

/// First runtime with batch memory-operation nodes (HIP's own tests of them require 6.4).
const ROCM_6_4: i32 = 60_400_000;
/// First runtime with real VMM, the 5.3+ `hipMemAllocationProp` and the 5.3+ node-type numbers.
const ROCM_5_3: i32 = 50_300_000;
/// First runtime known to fill a 1-D memcpy node's 3-D parameters (read in the 7.2.4 binary; the
/// 6.4.3 one does not, 7.0 and 7.1 were not read).
const ROCM_7_2: i32 = 70_200_000;
/// First runtime after the 7.2 series: how it reports a memcpy node has not been read.
const ROCM_7_3: i32 = 70_300_000;
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
    /// `name` is at offset 0 in both structs.
    pub name_len: usize,
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

    /// Whether the runtime declares batch memory-operation nodes (`hipGraphAddBatchMemOpNode`,
    /// `hipGraphBatchMemOpNodeGetParams`, `hipBatchMemOpNodeParams`): ROCm 6.4 and later.
    pub fn has_mem_op_nodes(self) -> bool {
        self.version >= ROCM_6_4
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
            // 12 and 13 are copies from and to a symbol; HIP has no conditional node.
            common::node_type(raw, 14, None)
        }
    }

    /// The device-properties call and struct of this version.
    pub fn device_props(self) -> DeviceProps {
        if self.version >= ROCM_6_0 {
            DeviceProps { r0600: true, size: 1472, name_len: 256, arch_offset: 1160, arch_len: 256 }
        } else {
            DeviceProps { r0600: false, size: 792, name_len: 256, arch_offset: 396, arch_len: 256 }
        }
    }

    /// What this layout chose, for diagnostics: one (what, which and why) per choice above.
    pub fn describe(self) -> Vec<(&'static str, String)> {
        let v = super::version_text(self.version);
        let since = |first: i32, yes: &str, no: &str| {
            if self.version >= first { format!("{yes} (HIP {v} >= {})", super::version_text(first)) } else { format!("{no} (HIP {v})") }
        };
        let props = self.device_props();
        let memcpy = match self.memcpy_read_back() {
            MemcpyReadBack::AsCreated(why) => format!("as created: {why}"),
            MemcpyReadBack::Never(why) => format!("never: {why}"),
            MemcpyReadBack::Reliable => String::from("always"),
        };
        vec![
            ("node-type numbers", since(ROCM_5_3, "CUDA's numbering", "ROCm 5.2's numbering")),
            ("hipMemAllocationProp", since(ROCM_5_3, "the 5.3 layout", "the 5.2 layout")),
            ("virtual memory management", since(ROCM_5_3, "the real calls", "stubs only: off")),
            (
                "device properties",
                format!(
                    "{} with a {}-byte struct, gcnArchName at byte {}",
                    if props.r0600 { "hipGetDevicePropertiesR0600" } else { "hipGetDeviceProperties" },
                    props.size,
                    props.arch_offset
                ),
            ),
            ("hipMemsetParams", String::from("alphabetical field order, as every shipped header has it")),
            ("memcpy node parameters read back", memcpy),
            ("batch memory-operation nodes", since(ROCM_6_4, "declared", "absent")),
        ]
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
    /// In 7.2 they are filled when the node is made and never refreshed. Later versions have not
    /// been read, so nothing is trusted there until they are.
    pub fn memcpy_read_back(self) -> MemcpyReadBack {
        let v = super::version_text(self.version);
        if self.version >= ROCM_7_3 {
            MemcpyReadBack::Never(format!(
                "HIP {v} is newer than 7.2, the last version whose memcpy node report was read (how it fills a 1-D memcpy node's parameters is not yet read)"
            ))
        } else if self.version >= ROCM_7_2 {
            MemcpyReadBack::AsCreated(format!(
                "HIP {v} reports a 1-D memcpy node's parameters as it was created: hipGraphMemcpyNodeSetParams1D does not refresh them"
            ))
        } else {
            MemcpyReadBack::Never(format!(
                "HIP {v} does not fill a 1-D memcpy node's parameters (hipGraphMemcpyNodeGetParams returns memory it never wrote), and no call tells such a node from a filled one"
            ))
        }
    }

    /// The copy a memcpy node's report describes, when it is one the library re-creates exactly:
    /// a 1-D device-to-device copy (`hipGraphAddMemcpyNode1D` with `hipMemcpyDeviceToDevice`, the
    /// only kind it adds). `Err` says what else the report shows. clr reports a 1-D node as
    /// both pointers, pitch 0, extent `{count, 1, 1}`, no array, no offset and the node's kind; a
    /// 3-D node (`hipGraphAddMemcpyNode`, a captured `hipMemcpy3DAsync` or
    /// `hipMemcpyParam2DAsync`) as given, so an offset or a row pitch shorter than the row would
    /// make another copy; a copy to or from a symbol as a null destination or source; a
    /// `hipDrvGraphAddMemcpyNode` node as its `HIP_MEMCPY3D` read in this layout.
    pub fn memcpy_read(self, raw: &Memcpy3DParms) -> Result<MemcpyParams, String> {
        let kind = raw.kind;
        if kind != super::graphs::MEMCPY_DEVICE_TO_DEVICE {
            return Err(format!("its kind is {kind}, not hipMemcpyDeviceToDevice (3), the only kind the library adds"));
        }
        if !raw.src_array.is_null() || !raw.dst_array.is_null() {
            return Err(String::from("it copies from or to an array"));
        }
        let (s, d) = (raw.src_pos, raw.dst_pos);
        if [s.x, s.y, s.z, d.x, d.y, d.z].iter().any(|&o| o != 0) {
            return Err(format!("it starts at an offset (srcPos {{{}, {}, {}}}, dstPos {{{}, {}, {}}})", s.x, s.y, s.z, d.x, d.y, d.z));
        }
        let e = raw.extent;
        if e.width == 0 || e.height != 1 || e.depth != 1 {
            return Err(format!("its extent is {{{}, {}, {}}}, not one row of at least one byte", e.width, e.height, e.depth));
        }
        if raw.src_ptr.ptr.is_null() || raw.dst_ptr.ptr.is_null() {
            return Err(String::from("its source or destination is null (a copy to or from a symbol reports one so)"));
        }
        if [raw.src_ptr.pitch, raw.dst_ptr.pitch].iter().any(|&p| p != 0 && p < e.width) {
            return Err(format!("a pitch ({}, {}) is shorter than its row of {} bytes", raw.src_ptr.pitch, raw.dst_ptr.pitch, e.width));
        }
        Ok(MemcpyParams { dst: raw.dst_ptr.ptr as u64, src: raw.src_ptr.ptr as u64, bytes: e.width })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_follows_the_version() {
        let text =
            |v: i32| Layout::for_version(v).describe().into_iter().map(|(what, which)| format!("{what}: {which}\n")).collect::<String>();
        let (old, new) = (text(50_221_153), text(70_253_211));
        assert!(old.contains("node-type numbers: ROCm 5.2's numbering (HIP 5.2.21153)"), "{old}");
        assert!(
            old.contains("virtual memory management: stubs only: off") && old.contains("hipGetDeviceProperties with a 792-byte struct"),
            "{old}"
        );
        assert!(old.contains("batch memory-operation nodes: absent") && old.contains("memcpy node parameters read back: never: "), "{old}");
        assert!(new.contains("node-type numbers: CUDA's numbering (HIP 7.2.53211 >= 5.3.0)"), "{new}");
        assert!(new.contains("hipGetDevicePropertiesR0600 with a 1472-byte struct, gcnArchName at byte 1160"), "{new}");
        assert!(new.contains("memcpy node parameters read back: as created: "), "{new}");
    }

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
        assert_eq!((new.node_type(10), new.node_type(11)), (NodeType::MemAlloc, NodeType::MemFree));
        assert_eq!(new.node_type(13), NodeType::Other(13), "a copy to a symbol: HIP has no conditional node");
        assert_eq!(old.node_type(10), NodeType::Other(10), "5.2's copy from a symbol");
    }

    #[test]
    fn memcpy_parameters_are_trusted_in_7_2_only_and_only_as_created() {
        for v in [50_221_153, 50_731_921, 60_443_484, 70_153_000] {
            let MemcpyReadBack::Never(why) = Layout::for_version(v).memcpy_read_back() else { panic!("{v}: trusted") };
            assert!(why.starts_with(&format!("HIP {}", super::super::version_text(v))), "{why}");
        }
        let MemcpyReadBack::AsCreated(why) = Layout::for_version(70_253_211).memcpy_read_back() else { panic!("7.2.4") };
        assert!(why.contains("HIP 7.2.53211") && why.contains("SetParams1D"), "{why}");
        // Versions after the one read are not trusted until they are read.
        for v in [70_300_000, 70_312_345, 80_000_000] {
            let MemcpyReadBack::Never(why) = Layout::for_version(v).memcpy_read_back() else { panic!("{v}: trusted") };
            assert!(why.starts_with(&format!("HIP {}", super::super::version_text(v))) && why.contains("not yet read"), "{why}");
        }
    }

    /// What clr 7.2 reports for a 1-D device-to-device node of `bytes` from `src` to `dst`.
    fn one_d(dst: usize, src: usize, bytes: usize) -> Memcpy3DParms {
        let zero = hipPos { x: 0, y: 0, z: 0 };
        let pitched = |p: usize| hipPitchedPtr { ptr: p as *mut c_void, pitch: 0, xsize: 0, ysize: 0 };
        Memcpy3DParms {
            src_array: std::ptr::null_mut(),
            src_pos: zero,
            src_ptr: pitched(src),
            dst_array: std::ptr::null_mut(),
            dst_pos: zero,
            dst_ptr: pitched(dst),
            extent: hipExtent { width: bytes, height: 1, depth: 1 },
            kind: 3,
        }
    }

    #[test]
    fn only_a_plain_1d_device_to_device_copy_is_read_back() {
        let layout = Layout::for_version(70_253_211);
        let good = one_d(0x1000, 0x2000, 64);
        assert_eq!(layout.memcpy_read(&good), Ok(MemcpyParams { dst: 0x1000, src: 0x2000, bytes: 64 }));
        // A 3-D node describing the same copy with a row pitch is the same copy.
        let mut pitched = good;
        (pitched.src_ptr.pitch, pitched.dst_ptr.pitch) = (64, 256);
        assert_eq!(layout.memcpy_read(&pitched), Ok(MemcpyParams { dst: 0x1000, src: 0x2000, bytes: 64 }));

        let refused = |what: &str, raw: Memcpy3DParms, needle: &str| {
            let why = layout.memcpy_read(&raw).expect_err(what);
            assert!(why.contains(needle), "{what}: {why}");
        };
        // hipMemcpyParam2DAsync / hipMemcpy3DAsync captured with one row and one slice, not
        // starting at the first byte of each side.
        let mut offsets = [good; 3];
        offsets[0].src_pos.y = 1;
        offsets[1].dst_pos.z = 2;
        offsets[2].src_pos.x = 8;
        for (i, raw) in offsets.into_iter().enumerate() {
            refused(&format!("offset {i}"), raw, "offset");
        }
        // Host-to-device, device-to-host and default-kind copies are not re-created as D2D.
        for kind in [0, 1, 2, 4] {
            refused(&format!("kind {kind}"), Memcpy3DParms { kind, ..good }, &format!("kind is {kind}"));
        }
        // hipMemcpyToSymbolAsync / FromSymbolAsync captured: clr's symbol nodes report a null
        // destination (to) or source (from).
        refused("to a symbol", one_d(0, 0x2000, 64), "null");
        refused("from a symbol", one_d(0x1000, 0, 64), "null");
        refused("two rows", Memcpy3DParms { extent: hipExtent { width: 64, height: 2, depth: 1 }, ..good }, "extent");
        refused("no row", Memcpy3DParms { extent: hipExtent { width: 64, height: 0, depth: 1 }, ..good }, "extent");
        refused("no byte", Memcpy3DParms { extent: hipExtent { width: 0, height: 1, depth: 1 }, ..good }, "extent");
        refused("an array", Memcpy3DParms { src_array: 0x10 as *mut c_void, ..good }, "array");
        let mut short = good;
        short.dst_ptr.pitch = 32;
        refused("a short pitch", short, "pitch");
    }

    /// A `hipDrvGraphAddMemcpyNode` node holds a `HIP_MEMCPY3D` where a memcpy node holds its
    /// parameters, and clr's `hipGraphMemcpyNodeGetParams` copies it out as `hipMemcpy3DParms`.
    #[test]
    fn a_driver_memcpy_node_read_as_3d_parameters_is_refused() {
        // HIP's HIP_MEMCPY3D: per side XInBytes, Y, Z, LOD, MemoryType (+4), Host, Device, Array,
        // Pitch, Height; then WidthInBytes, Height, Depth: 23 words. A device-to-device copy of
        // 64 bytes with no offset and no pitch.
        let mut words = [0u64; 23];
        (words[4], words[6]) = (2, 0x2000); // source: hipMemoryTypeDevice, srcDevice
        (words[14], words[16]) = (2, 0x1000); // destination: hipMemoryTypeDevice, dstDevice
        (words[20], words[21], words[22]) = (64, 1, 1);
        // SAFETY: 184 initialised bytes hold the 160 of the struct, which is all integers and
        // pointers.
        let raw: Memcpy3DParms = unsafe { std::ptr::read_unaligned(words.as_ptr().cast()) };
        // A check of arrays, height and depth at most 1 and the x offsets alone takes it for a copy
        // of 0x1000 bytes (dstDevice) from address 2 (the source's memory type) to address 0 (dstZ).
        assert!(raw.src_array.is_null() && raw.dst_array.is_null() && raw.extent.height <= 1 && raw.extent.depth <= 1);
        assert!(raw.src_pos.x == 0 && raw.dst_pos.x == 0 && raw.extent.width == 0x1000);
        let why = Layout::for_version(70_253_211).memcpy_read(&raw).expect_err("a driver node");
        assert!(why.contains("kind is 0"), "{why}");
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
