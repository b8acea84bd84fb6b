//! The test kernels as AMD code objects (`tests/gpu/kernels.hip`, built by build.rs for each
//! architecture it knows, without a compiler warning): each is an amdgcn ELF for its architecture
//! with a kernel descriptor per test kernel, and its metadata lays the arguments out exactly as
//! the tests pack them; a device's architecture name picks the right one, and the software GPU
//! reports its own.
//! Nothing here needs an AMD GPU: the objects are read, not run.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the shared kit (tests/common) calls the software GPU's knobs on locals it owns; each call's contract is hipsim's"
)]

mod common;

use common::args::{self, Arg};
use common::code_objects::{AMDGPU_CODE_OBJECTS, AMDGPU_NOT_BUILT, hip_image};
use std::collections::BTreeMap;

include!(concat!(env!("OUT_DIR"), "/amdgpu_kernel_warnings.rs"));

const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;
const NT_AMDGPU_METADATA: u32 = 32;
const EF_AMDGPU_MACH: u32 = 0xff;

/// `EF_AMDGPU_MACH_AMDGCN_*` of each architecture build.rs may build (LLVM's AMDGPUUsage).
fn mach(arch: &str) -> u32 {
    match arch {
        "gfx90a" => 0x3f,
        "gfx942" => 0x4c,
        "gfx950" => 0x4f,
        "gfx1100" => 0x41,
        other => panic!("no EF_AMDGPU_MACH known for {other}"),
    }
}

/// The target-feature bits of e_flags (`EF_AMDGPU_FEATURE_XNACK_V4` 0x300 and
/// `EF_AMDGPU_FEATURE_SRAMECC_V4` 0xc00) each architecture's object must carry: "any" for both
/// (0x100 | 0x400) where the architecture has the features, so that the object loads whichever
/// way the device is set; "unsupported" (0) on gfx1100, which has neither.
fn features(arch: &str) -> u32 {
    match arch {
        "gfx90a" | "gfx942" | "gfx950" => 0x500,
        "gfx1100" => 0,
        other => panic!("no target features known for {other}"),
    }
}

/// `EI_ABIVERSION` of code object version 5, which ROCm 5.7 and later load and the compilers
/// build.rs runs produce by default.
const ELFABIVERSION_AMDGPU_HSA_V5: u8 = 3;

/// The six kernels and their arguments as the tests pack them.
fn kernels() -> Vec<(&'static str, Vec<Arg>)> {
    vec![
        ("rcb_test_fill_u32", args::fill(0, 0, 0).to_vec()),
        ("rcb_test_axpy_f32", args::axpy(0, 0, 0.0, 0).to_vec()),
        ("rcb_test_add_f32", args::add(0, 0, 0, 0).to_vec()),
        ("rcb_test_copy_u8", args::copy(0, 0, 0).to_vec()),
        ("rcb_test_sleep", args::sleep(0).to_vec()),
        ("rcb_test_distance_u64", args::distance(0, 0, 0).to_vec()),
    ]
}

/// (offset, size, pointer?) of each argument in the blob `args::pack` builds.
fn packed_layout(args: &[Arg]) -> Vec<(u64, u64, bool)> {
    let mut at = 0u64;
    args.iter()
        .map(|a| {
            let size = a.bytes().len() as u64;
            at = at.next_multiple_of(size);
            let entry = (at, size, matches!(a, Arg::Ptr(_)));
            at += size;
            entry
        })
        .collect()
}

// --- A reader for the little of ELF64 and MessagePack that code objects use. ---

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

struct Section<'a> {
    kind: u32,
    data: &'a [u8],
    link: usize,
}

fn sections(elf: &[u8]) -> Vec<Section<'_>> {
    let (shoff, shentsize, shnum) = (u64_at(elf, 40), u16_at(elf, 58) as usize, u16_at(elf, 60) as usize);
    (0..shnum)
        .map(|i| {
            let h = shoff + i * shentsize;
            let (kind, offset, size) = (u32_at(elf, h + 4), u64_at(elf, h + 24), u64_at(elf, h + 32));
            // SHT_NOBITS (.bss) takes no room in the file.
            let data = if kind == 8 { &[][..] } else { &elf[offset..offset + size] };
            Section { kind, data, link: u32_at(elf, h + 40) as usize }
        })
        .collect()
}

/// The names of the symbols of every symbol table.
fn symbols(elf: &[u8]) -> Vec<String> {
    let all = sections(elf);
    let mut names = Vec::new();
    for s in all.iter().filter(|s| s.kind == 2 || s.kind == 11) {
        let strings = all[s.link].data;
        for sym in s.data.chunks_exact(24) {
            let start = u32_at(sym, 0) as usize;
            let end = start + strings[start..].iter().position(|&c| c == 0).unwrap();
            names.push(String::from_utf8_lossy(&strings[start..end]).into_owned());
        }
    }
    names
}

/// The descriptor of the `NT_AMDGPU_METADATA` note.
fn metadata_note(elf: &[u8]) -> Option<&[u8]> {
    for s in sections(elf).iter().filter(|s| s.kind == 7) {
        let mut at = 0;
        while at + 12 <= s.data.len() {
            let (namesz, descsz, kind) = (u32_at(s.data, at) as usize, u32_at(s.data, at + 4) as usize, u32_at(s.data, at + 8));
            let name = &s.data[at + 12..at + 12 + namesz];
            let desc = at + 12 + namesz.next_multiple_of(4);
            if kind == NT_AMDGPU_METADATA && name == b"AMDGPU\0" {
                return Some(&s.data[desc..desc + descsz]);
            }
            at = desc + descsz.next_multiple_of(4);
        }
    }
    None
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(BTreeMap<String, Value>),
}

impl Value {
    fn get(&self, key: &str) -> &Value {
        match self {
            Value::Map(m) => m.get(key).unwrap_or(&Value::Nil),
            _ => &Value::Nil,
        }
    }
    fn int(&self) -> i128 {
        match self {
            Value::Int(i) => *i,
            other => panic!("not an integer: {other:?}"),
        }
    }
    fn str(&self) -> &str {
        match self {
            Value::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }
    fn array(&self) -> &[Value] {
        match self {
            Value::Array(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
}

/// One MessagePack value at `*at`.
fn unpack(b: &[u8], at: &mut usize) -> Value {
    let take = |at: &mut usize, n: usize| -> &[u8] {
        *at += n;
        &b[*at - n..*at]
    };
    let be = |bytes: &[u8]| bytes.iter().fold(0u64, |v, &x| v << 8 | u64::from(x));
    let tag = take(at, 1)[0];
    let (kind, len) = match tag {
        0x00..=0x7f => return Value::Int(tag.into()),
        0xe0..=0xff => return Value::Int(i128::from(tag as i8)),
        0x80..=0x8f => ('m', usize::from(tag & 0x0f)),
        0x90..=0x9f => ('a', usize::from(tag & 0x0f)),
        0xa0..=0xbf => ('s', usize::from(tag & 0x1f)),
        0xc0 => return Value::Nil,
        0xc2 | 0xc3 => return Value::Bool(tag == 0xc3),
        0xc4..=0xc6 => ('b', be(take(at, 1 << (tag - 0xc4))) as usize),
        0xca => return Value::Float(f32::from_bits(be(take(at, 4)) as u32).into()),
        0xcb => return Value::Float(f64::from_bits(be(take(at, 8)))),
        0xcc..=0xcf => return Value::Int(be(take(at, 1 << (tag - 0xcc))).into()),
        0xd0..=0xd3 => {
            let n = 1 << (tag - 0xd0);
            let raw = be(take(at, n));
            let shift = 64 - 8 * n as u32;
            return Value::Int(i128::from(((raw << shift) as i64) >> shift));
        }
        0xd9..=0xdb => ('s', be(take(at, 1 << (tag - 0xd9))) as usize),
        0xdc | 0xdd => ('a', be(take(at, 2 << (tag - 0xdc))) as usize),
        0xde | 0xdf => ('m', be(take(at, 2 << (tag - 0xde))) as usize),
        other => panic!("MessagePack tag {other:#x} is not used in code-object metadata"),
    };
    match kind {
        's' => Value::Str(String::from_utf8_lossy(take(at, len)).into_owned()),
        'b' => Value::Bin(take(at, len).to_vec()),
        'a' => Value::Array((0..len).map(|_| unpack(b, at)).collect()),
        _ => Value::Map(
            (0..len)
                .map(|_| {
                    let key = unpack(b, at).str().to_owned();
                    (key, unpack(b, at))
                })
                .collect(),
        ),
    }
}

#[test]
fn each_code_object_is_an_amdgcn_elf_with_the_test_kernels_laid_out_as_the_tests_pack_them() {
    // An architecture not built is a skip by name, so that losing one (gfx90a, gfx942, gfx1100 with
    // clang-19, gfx950 with ci/amdgpu-clang) changes the skip lists' count and fails CI.
    for (arch, reason) in AMDGPU_NOT_BUILT {
        common::skip(&format!("the {arch} code object"), reason);
    }
    if AMDGPU_CODE_OBJECTS.is_empty() {
        common::skip("every check", "build.rs built no code object; ci/setup.sh installs clang-19 and lld-19");
        return;
    }
    for (arch, elf) in AMDGPU_CODE_OBJECTS {
        assert_eq!(&elf[..4], b"\x7fELF", "{arch}: not an ELF file");
        assert_eq!((elf[4], elf[5]), (2, 1), "{arch}: not 64-bit little-endian");
        assert_eq!(elf[7], ELFOSABI_AMDGPU_HSA, "{arch}: OS ABI");
        assert_eq!(u16_at(elf, 18), EM_AMDGPU, "{arch}: e_machine");
        assert_eq!(u32_at(elf, 48) & EF_AMDGPU_MACH, mach(arch), "{arch}: EF_AMDGPU_MACH of e_flags {:#x}", u32_at(elf, 48));
        assert_eq!(u32_at(elf, 48) & 0xf00, features(arch), "{arch}: xnack and sramecc settings of e_flags {:#x}", u32_at(elf, 48));
        assert_eq!(elf[8], ELFABIVERSION_AMDGPU_HSA_V5, "{arch}: code object version (EI_ABIVERSION)");

        let symbols = symbols(elf);
        let note = metadata_note(elf).unwrap_or_else(|| panic!("{arch}: no NT_AMDGPU_METADATA note"));
        let meta = unpack(note, &mut 0);
        assert_eq!(meta.get("amdhsa.target").str(), format!("amdgcn-amd-amdhsa--{arch}"), "{arch}: target");
        let described = meta.get("amdhsa.kernels").array();
        assert_eq!(described.len(), kernels().len(), "{arch}: kernels {described:?}");
        for (name, args) in kernels() {
            let descriptor = format!("{name}.kd");
            assert!(symbols.contains(&descriptor), "{arch}: no kernel descriptor {descriptor} among {symbols:?}");
            let k = described.iter().find(|k| k.get(".name").str() == name).unwrap_or_else(|| panic!("{arch}: no metadata for {name}"));
            assert_eq!(k.get(".symbol").str(), descriptor, "{arch}: {name}");
            // The arguments the caller passes (the runtime appends the hidden ones itself).
            let explicit: Vec<(u64, u64, bool)> = k
                .get(".args")
                .array()
                .iter()
                .filter(|a| !a.get(".value_kind").str().starts_with("hidden_"))
                .map(|a| (a.get(".offset").int() as u64, a.get(".size").int() as u64, a.get(".value_kind").str() == "global_buffer"))
                .collect();
            let packed = packed_layout(&args);
            assert_eq!(explicit, packed, "{arch}: {name}: (offset, size, pointer) of each argument");
            let end = packed.last().map_or(0, |&(offset, size, _)| offset + size);
            assert!(k.get(".kernarg_segment_size").int() as u64 >= end, "{arch}: {name}: kernarg segment");
        }
    }
}

/// build.rs builds the code objects with -Wall -Wextra but lets a warning through (another clang
/// than CI's may warn where it does not, and must not stop the library's build): here, with the
/// compiler CI installs, the source compiles without one.
#[test]
fn the_code_objects_were_built_without_a_compiler_warning() {
    let said: Vec<String> = AMDGPU_BUILD_WARNINGS.iter().map(|(arch, text)| format!("{arch}:\n{text}")).collect();
    assert!(said.is_empty(), "the compiler warned on tests/gpu/kernels.hip:\n{}", said.join("\n"));
}

#[test]
fn the_device_architecture_picks_the_code_object() {
    assert_eq!(hip_image("hipsim").unwrap(), b"hipsim\0");
    for (arch, object) in AMDGPU_CODE_OBJECTS {
        // Feature settings do not matter: the objects are built for either setting of each.
        for reported in [arch.to_string(), format!("{arch}:sramecc+:xnack-"), format!("{arch}:xnack+")] {
            assert_eq!(hip_image(&reported).as_deref(), Ok(*object), "{reported}");
        }
    }
    let unknown = hip_image("gfx1234:xnack-").unwrap_err();
    assert!(unknown.contains("no test-kernel code object for gfx1234 (the device reports gfx1234:xnack-)"), "{unknown}");
    for (arch, _) in AMDGPU_CODE_OBJECTS {
        assert!(unknown.contains(arch), "{unknown} does not list {arch}");
    }
    for (arch, reason) in AMDGPU_NOT_BUILT {
        let e = hip_image(arch).unwrap_err();
        assert!(e.contains("it was not built") && e.contains(reason), "{e}");
    }
}

#[test]
fn the_software_gpu_reports_its_architecture_and_gets_its_own_image() {
    let Some(_sim) = common::hipsim_or_skip() else { return };
    let rt = common::runtime().expect("the software GPU");
    assert_eq!(rt.direct().device_arch(1).expect("device 1"), "hipsim");
    assert!(rt.direct().device_arch(7).is_err(), "device 7 does not exist");
    // The kit loads the image the architecture picks, and its kernels run.
    let k = common::kernels(rt, 0);
    let stream = rt.stream_create(0, 0, 0).expect("stream");
    let dst = rt.malloc(0, 16).expect("malloc");
    common::run(rt, k.fill_u32, &args::fill(dst, 7, 4), stream);
    rt.stream_synchronize(stream).expect("sync");
    assert_eq!(common::download_u32(rt, dst, 4), [7; 4]);
    rt.free(dst).expect("free");
    rt.stream_destroy(stream).expect("destroy");
}
