//! What this backend relies on in the HIP ABI of one runtime version, as a table that the HIP
//! ABI probe (`ci/hip-versions.sh`, `tests/hip_abi/probe.py`) checks against the real headers of that
//! version: every prototype it loads (parameter names, order and types), the size of each C type
//! it stands in for, the offset and size of each struct field it writes or reads, each constant
//! it passes or compares with, and which node-type numbers it takes for which kind of node.
//!
//! Nothing is restated here: prototypes come from the symbol tables of `api.rs`, offsets and sizes
//! from the Rust structs the backend passes (chosen by `Layout` for the version), constants from
//! the constants the backend's files use. Only the C names of fields and constants are written
//! here, because Rust cannot spell them.

use super::api::{self, hipKernelNodeParams, hipMemAccessDesc};
use super::layout::{AllocProp, Layout, MemAllocationProp52, Memcpy3DParms};
use super::{EXTRA_KEYS, SUCCESS, direct, graphs, memory, streams, vmm};
use crate::runtime::common::{self, BatchMemOpNodeParams, HostNodeParams};
use crate::runtime::symbols::Prototype;
use crate::runtime::{CaptureMode, MemOp, NodeType};
use hip_runtime_sys::{dim3, hipExtent, hipMemAccessFlags, hipMemAllocationProp, hipMemLocation, hipMemsetParams, hipPitchedPtr, hipPos};
use std::fmt::Write;

struct Field {
    /// As `offsetof` takes it: `allocFlags.usage`.
    path: &'static str,
    offset: usize,
    size: usize,
}

struct Struct {
    name: &'static str,
    size: usize,
    fields: Vec<Field>,
}

fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// `Struct` of a Rust type: its size and, per C field name, the offset and size of the Rust field.
macro_rules! layout_of {
    ($c:literal, $ty:ty { $($cf:literal => $($f:ident).+),* $(,)? }) => {
        Struct {
            name: $c,
            size: size_of::<$ty>(),
            fields: vec![$(Field { path: $cf, offset: std::mem::offset_of!($ty, $($f).+), size: field_size(|s: &$ty| &s.$($f).+) }),*],
        }
    };
}

/// The tables the backend resolves on a runtime of this version: (table, required, prototypes).
fn tables(layout: Layout) -> Vec<(&'static str, bool, &'static [Prototype])> {
    let mut t = vec![
        ("Core", true, api::Core::PROTOTYPES),
        ("MemOps", false, api::MemOps::PROTOTYPES),
        ("CaptureQuery", false, api::CaptureQuery::PROTOTYPES),
        ("NodeAttributes", false, api::NodeAttributes::PROTOTYPES),
        ("ThreadCaptureMode", false, api::ThreadCaptureMode::PROTOTYPES),
        ("LastError", false, api::LastError::PROTOTYPES),
        ("KernelNames", false, api::KernelNames::PROTOTYPES),
        ("EventNodes", false, api::EventNodes::PROTOTYPES),
        ("HostNodes", false, api::HostNodes::PROTOTYPES),
        ("StreamDevice", false, api::StreamDevice::PROTOTYPES),
    ];
    if layout.has_mem_op_nodes() {
        t.push(("MemOpNodes", false, api::MemOpNodes::PROTOTYPES));
    }
    if layout.has_real_vmm() {
        t.push(("Vmm", false, api::Vmm::PROTOTYPES));
    }
    if layout.device_props().r0600 {
        t.push(("DevicePropsR0600", false, api::DevicePropsR0600::PROTOTYPES));
    } else {
        t.push(("DevicePropsR0000", false, api::DevicePropsR0000::PROTOTYPES));
    }
    t
}

/// The structs as the backend lays them out for this version.
fn structs(layout: Layout) -> Vec<Struct> {
    let mut s = vec![
        layout_of!("dim3", dim3 { "x" => x, "y" => y, "z" => z }),
        layout_of!("hipKernelNodeParams", hipKernelNodeParams {
            "blockDim" => blockDim, "extra" => extra, "func" => func, "gridDim" => gridDim,
            "kernelParams" => kernelParams, "sharedMemBytes" => sharedMemBytes,
        }),
        layout_of!("hipMemsetParams", hipMemsetParams {
            "dst" => dst, "elementSize" => elementSize, "height" => height, "pitch" => pitch, "value" => value, "width" => width,
        }),
        layout_of!("hipMemcpy3DParms", Memcpy3DParms {
            "srcArray" => src_array, "srcPos" => src_pos, "srcPtr" => src_ptr, "dstArray" => dst_array, "dstPos" => dst_pos,
            "dstPtr" => dst_ptr, "extent" => extent, "kind" => kind,
        }),
        layout_of!("hipPos", hipPos { "x" => x, "y" => y, "z" => z }),
        layout_of!("hipPitchedPtr", hipPitchedPtr { "ptr" => ptr, "pitch" => pitch, "xsize" => xsize, "ysize" => ysize }),
        layout_of!("hipExtent", hipExtent { "width" => width, "height" => height, "depth" => depth }),
        layout_of!("hipMemLocation", hipMemLocation { "type" => type_, "id" => id }),
        layout_of!("hipMemAccessDesc", hipMemAccessDesc { "location" => location, "flags" => flags }),
        layout_of!("hipHostNodeParams", HostNodeParams { "fn" => function, "userData" => user_data }),
    ];
    if layout.has_mem_op_nodes() {
        s.push(layout_of!("hipBatchMemOpNodeParams", BatchMemOpNodeParams {
            "ctx" => context, "count" => count, "paramArray" => ops, "flags" => flags,
        }));
        // One operation as `MemOp` reads it: the operation in the first word, the address of a
        // wait or a write in the second.
        s.push(Struct {
            name: "hipStreamBatchMemOpParams",
            size: size_of::<MemOp>(),
            fields: vec![
                Field { path: "operation", offset: 0, size: 4 },
                Field { path: "waitValue.address", offset: 8, size: 8 },
                Field { path: "writeValue.address", offset: 8, size: 8 },
            ],
        });
    }
    s.push(match layout.alloc_prop(0) {
        AllocProp::Rocm52(_) => layout_of!("hipMemAllocationProp", MemAllocationProp52 {
            "compressionType" => compression_type, "location" => location, "requestedHandleType" => requested_handle_type,
            "type" => alloc_type, "usage" => usage, "win32HandleMetaData" => win32_handle_meta_data,
        }),
        AllocProp::Rocm53(_) => layout_of!("hipMemAllocationProp", hipMemAllocationProp {
            "type" => type_, "requestedHandleType" => requestedHandleType, "location" => location,
            "win32HandleMetaData" => win32HandleMetaData, "allocFlags.compressionType" => allocFlags.compressionType,
            "allocFlags.gpuDirectRDMACapable" => allocFlags.gpuDirectRDMACapable, "allocFlags.usage" => allocFlags.usage,
        }),
    });
    let props = layout.device_props();
    s.push(Struct {
        name: if props.r0600 { "hipDeviceProp_tR0600" } else { "hipDeviceProp_t" },
        size: props.size,
        fields: vec![
            Field { path: "name", offset: 0, size: props.name_len },
            Field { path: "gcnArchName", offset: props.arch_offset, size: props.arch_len },
        ],
    });
    s
}

/// Each enumerator or integer macro the backend passes or compares with, and its value there.
fn constants(layout: Layout) -> Vec<(&'static str, i64)> {
    let alloc_type = match layout.alloc_prop(0) {
        AllocProp::Rocm52(p) => p.alloc_type as i64,
        AllocProp::Rocm53(p) => p.type_ as i64,
    };
    let location_type = match layout.alloc_prop(0) {
        AllocProp::Rocm52(p) => p.location.type_ as i64,
        AllocProp::Rocm53(p) => p.location.type_ as i64,
    };
    vec![
        ("hipSuccess", SUCCESS.into()),
        ("hipErrorOutOfMemory", common::ERROR_OUT_OF_MEMORY.into()),
        ("hipErrorNoDevice", common::ERROR_NO_DEVICE.into()),
        ("hipErrorNotSupported", common::ERROR_NOT_SUPPORTED.into()),
        ("hipErrorNotReady", streams::ERROR_NOT_READY.into()),
        ("hipMemcpyHostToDevice", direct::MEMCPY_HOST_TO_DEVICE.into()),
        ("hipMemcpyDeviceToHost", direct::MEMCPY_DEVICE_TO_HOST.into()),
        ("hipMemcpyDeviceToDevice", graphs::MEMCPY_DEVICE_TO_DEVICE.into()),
        ("hipStreamCaptureStatusNone", streams::CAPTURE_STATUS_NONE.into()),
        ("hipStreamCaptureModeGlobal", CaptureMode::Global as i64),
        ("hipStreamCaptureModeThreadLocal", CaptureMode::ThreadLocal as i64),
        ("hipStreamCaptureModeRelaxed", CaptureMode::Relaxed as i64),
        ("hipEventDisableTiming", streams::EVENT_DISABLE_TIMING.into()),
        ("hipMallocSignalMemory", memory::MALLOC_SIGNAL_MEMORY.into()),
        ("hipStreamWaitValueGte", memory::WAIT_VALUE_GTE.into()),
        ("hipMemAllocationGranularityMinimum", vmm::GRANULARITY_MINIMUM.into()),
        ("hipMemAllocationTypePinned", alloc_type),
        ("hipMemLocationTypeDevice", location_type),
        ("hipMemAccessFlagsProtReadWrite", hipMemAccessFlags::hipMemAccessFlagsProtReadWrite as i64),
    ]
}

/// The pointer-valued macros of `extra` lists, checked when the probe runs (a cast of a pointer
/// is no constant expression).
fn pointer_constants() -> Vec<(&'static str, usize)> {
    vec![
        ("HIP_LAUNCH_PARAM_BUFFER_POINTER", EXTRA_KEYS.buffer_pointer),
        ("HIP_LAUNCH_PARAM_BUFFER_SIZE", EXTRA_KEYS.buffer_size),
        ("HIP_LAUNCH_PARAM_END", EXTRA_KEYS.end),
    ]
}

/// What each kind of node is called in `hipGraphNodeType`; any other enumerator is a node the
/// backend must take for `Other`.
const NODE_TYPE_NAMES: &[(&str, NodeType)] = &[
    ("hipGraphNodeTypeKernel", NodeType::Kernel),
    ("hipGraphNodeTypeMemcpy", NodeType::Memcpy),
    ("hipGraphNodeTypeMemcpy1D", NodeType::Memcpy),
    ("hipGraphNodeTypeMemset", NodeType::Memset),
    ("hipGraphNodeTypeHost", NodeType::Host),
    ("hipGraphNodeTypeGraph", NodeType::Child),
    ("hipGraphNodeTypeEmpty", NodeType::Empty),
    ("hipGraphNodeTypeWaitEvent", NodeType::EventWait),
    ("hipGraphNodeTypeEventRecord", NodeType::EventRecord),
    ("hipGraphNodeTypeBatchMemOp", NodeType::MemOp),
    ("hipGraphNodeTypeMemAlloc", NodeType::MemAlloc),
    ("hipGraphNodeTypeMemFree", NodeType::MemFree),
];

fn kind_name(kind: NodeType) -> String {
    match kind {
        NodeType::Other(_) => String::from("Other"),
        known => format!("{known:?}"),
    }
}

/// A Rust type of a prototype, in C as clang prints it (`*const hipGraphNode_t` is
/// `const hipGraphNode_t *`); `None` for a type with no C spelling here.
fn c_type(rust: &str) -> Option<String> {
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*mut ") {
        let c = c_type(inner)?;
        return Some(if c.ends_with('*') { format!("{c}*") } else { format!("{c} *") });
    }
    if let Some(inner) = rust.strip_prefix("*const ") {
        return Some(format!("const {} *", c_type(inner)?));
    }
    let c = match rust {
        "c_void" => "void",
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "c_ulonglong" => "unsigned long long",
        "usize" => "size_t",
        "u64" => "uint64_t",
        "hipKernelNodeParams" | "hipMemAccessDesc" => rust,
        // The two ends of hipGraphKernelNodeCopyAttributes, typed apart (api.rs).
        "SourceNode" | "DestinationNode" => "hipGraphNode_t",
        alias => api::SIZES.iter().find(|(name, _)| *name == alias)?.0,
    };
    Some(c.to_owned())
}

/// The table for `version` (as `hipRuntimeGetVersion` reports it) as JSON; panics on a prototype
/// type with no C spelling.
fn table(version: i32) -> String {
    let layout = Layout::for_version(version);
    let mut j = format!("{{\n\"version\": {version},\n\"functions\": [\n");
    let mut first = true;
    for (table, required, prototypes) in tables(layout) {
        for p in prototypes {
            let c = |t: &str| c_type(t).unwrap_or_else(|| panic!("{}: no C spelling for {t}", p.name));
            let params: Vec<String> = p.params.iter().map(|(name, t)| format!("[\"{name}\", \"{}\"]", c(t))).collect();
            let sep = if first { "" } else { ",\n" };
            first = false;
            write!(
                j,
                "{sep}  {{\"table\": \"{table}\", \"required\": {required}, \"name\": \"{}\", \"ret\": \"{}\", \"params\": [{}]}}",
                p.name,
                c(p.ret),
                params.join(", ")
            )
            .unwrap();
        }
    }
    let sizes: Vec<String> = api::SIZES.iter().filter_map(|(name, size)| size.map(|s| format!("[\"{name}\", {s}]"))).collect();
    write!(j, "\n],\n\"type_sizes\": [{}],\n\"structs\": [\n", sizes.join(", ")).unwrap();
    let structs: Vec<String> = structs(layout)
        .iter()
        .map(|s| {
            let fields: Vec<String> = s.fields.iter().map(|f| format!("[\"{}\", {}, {}]", f.path, f.offset, f.size)).collect();
            format!("  {{\"name\": \"{}\", \"size\": {}, \"fields\": [{}]}}", s.name, s.size, fields.join(", "))
        })
        .collect();
    j += &structs.join(",\n");
    let constants: Vec<String> = constants(layout).iter().map(|(n, v)| format!("[\"{n}\", {v}]")).collect();
    let pointers: Vec<String> = pointer_constants().iter().map(|(n, v)| format!("[\"{n}\", {v}]")).collect();
    write!(j, "\n],\n\"constants\": [{}],\n\"pointer_constants\": [{}],\n", constants.join(", "), pointers.join(", ")).unwrap();
    let numbers: Vec<String> = (0..64)
        .filter_map(|raw| match layout.node_type(raw) {
            NodeType::Other(_) => None,
            kind => Some(format!("[{raw}, \"{}\"]", kind_name(kind))),
        })
        .collect();
    let names: Vec<String> = NODE_TYPE_NAMES.iter().map(|(n, k)| format!("[\"{n}\", \"{}\"]", kind_name(*k))).collect();
    write!(j, "\"node_types\": [{}],\n\"node_type_names\": [{}]\n}}\n", numbers.join(", "), names.join(", ")).unwrap();
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ROCm 5.2.3, 5.7.1, 6.4.3 and 7.2.4 as their runtimes report themselves.
    const VERSIONS: [i32; 4] = [50_221_153, 50_731_921, 60_443_484, 70_253_211];

    #[test]
    fn every_prototype_type_has_a_c_spelling() {
        for version in VERSIONS {
            for (table, _, prototypes) in tables(Layout::for_version(version)) {
                for p in prototypes {
                    for (param, t) in p.params.iter().chain([&("return", p.ret)]) {
                        assert!(c_type(t).is_some(), "{table}::{} {param}: {t} has no C spelling (add it to api.rs's c_types!)", p.name);
                    }
                }
            }
        }
        assert_eq!(c_type("*mut *mut c_void").as_deref(), Some("void **"));
        assert_eq!(c_type("*const hipGraphNode_t").as_deref(), Some("const hipGraphNode_t *"));
        assert_eq!(c_type("*mut hipStream_t").as_deref(), Some("hipStream_t *"));
        assert_eq!(c_type("hipUnknown_t"), None);
    }

    #[test]
    fn the_table_follows_the_version() {
        let old = table(VERSIONS[0]);
        let new = table(VERSIONS[3]);
        // 5.2: the old allocation property and node numbers, no real VMM, the old property call.
        assert!(old.contains("[\"compressionType\", 0, 1]"), "{old}");
        assert!(old.contains("[1, \"Kernel\"]") && old.contains("[9, \"Memcpy\"]"), "{old}");
        assert!(!old.contains("hipMemCreate") && old.contains("\"hipGetDeviceProperties\""), "{old}");
        assert!(new.contains("[\"allocFlags.usage\", 26, 2]"), "{new}");
        assert!(new.contains("[0, \"Kernel\"]") && new.contains("[14, \"MemOp\"]") && !new.contains("[9, \"Memcpy\"]"), "{new}");
        assert!(new.contains("\"hipMemCreate\"") && new.contains("\"hipGetDevicePropertiesR0600\""), "{new}");
        // Batch memory-operation nodes from 6.4; event and host nodes on every version.
        assert!(new.contains("\"hipGraphBatchMemOpNodeGetParams\"") && !old.contains("hipGraphBatchMemOp"), "{old}");
        assert!(old.contains("\"hipGraphEventRecordNodeGetEvent\"") && old.contains("\"hipGraphHostNodeGetParams\""), "{old}");
        assert!(new.contains("[10, \"MemAlloc\"]") && !old.contains("[10, \"MemAlloc\"]"), "{new}");
        assert!(
            new.contains(
                "{\"name\": \"hipDeviceProp_tR0600\", \"size\": 1472, \"fields\": [[\"name\", 0, 256], [\"gcnArchName\", 1160, 256]]}"
            ),
            "{new}"
        );
    }

    /// Writes the table of `RCB_HIP_ABI_VERSION` to `RCB_HIP_ABI_TABLE` (ci/hip-versions.sh runs it).
    #[test]
    #[ignore = "a tool: ci/hip-versions.sh runs it with the version of each header set"]
    fn write_table() {
        let version: i32 = std::env::var("RCB_HIP_ABI_VERSION").expect("RCB_HIP_ABI_VERSION").parse().expect("a version number");
        let path = std::env::var("RCB_HIP_ABI_TABLE").expect("RCB_HIP_ABI_TABLE");
        std::fs::write(&path, table(version)).unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
}
