//! The integration tests' kit: picks the backend the same test bodies run on, loads five of the
//! test kernels on it (the code object for the device's architecture, [`code_objects`]) and
//! launches them ([`args`], [`launch`], [`run`]), reads the C ABI's
//! statuses and last error ([`last_error`], [`ok`], [`fails`]), says which checks of a test body are skipped
//! and why ([`skip`], [`supported`], [`hipsim`], [`hipsim_or_skip`]), and reaches hipsim's test knobs when the
//! software GPU is in use.
//!
//! Backend: `RCB_BACKEND=cuda` runs on a real GPU (skipped, with a SKIPPED line, when there is
//! none, unless `RCB_TEST_REQUIRE_GPU=1`);
//! otherwise the tests load the software GPU (`target/<profile>/libamdhip64.so`, built by
//! `cargo build -p hipsim`) through `RCB_HIP_LIBRARY`, exactly as a user would.
#![allow(dead_code)]

pub mod args;
/// The image of the test kernels for a device: shared with the command-line tools.
#[path = "../../src/bin/rcb-bench/kernels.rs"]
pub mod code_objects;
pub mod rng;

pub use args::{Arg, pack};
use rocm_cmdbuf::error::{Error, ErrorKind};
use rocm_cmdbuf::ffi::{RCB_OK, rcb_last_error_message, rcb_status};
use rocm_cmdbuf::runtime::{self, Backend, Function, KernelParams, Module, Runtime, Stream};
use std::ffi::{CStr, c_char};
use std::fmt::Display;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The outcome of the one-time set-up, which every test reports: a failure is the same clear
/// message in each test, never a poisoned `Once`.
static SETUP: OnceLock<Result<(), String>> = OnceLock::new();

/// The directory holding the test executable's build outputs (`target/<profile>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>-<hash>
    exe.parent().and_then(|deps| deps.parent()).expect("target dir").to_path_buf()
}

pub fn hipsim_path() -> PathBuf {
    target_dir().join("libamdhip64.so")
}

/// A copy of the software GPU that does not export `symbol`, as a runtime without that call:
/// the name's entry in the copy's dynamic string table gets another first letter, so the
/// loader's lookup of the name fails while every other symbol resolves as before (hipsim's own
/// code calls the function directly, never through the table). Written to
/// `target/<profile>/hipsim-without-<symbol>/libamdhip64.so`, where `RCB_HIP_LIBRARY` can name it.
pub fn hipsim_without(symbol: &str) -> PathBuf {
    runtime().expect("the software GPU is built");
    let mut elf = std::fs::read(hipsim_path()).expect("the software GPU's file");
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    // ELF64: the section headers, and the string table the dynamic symbol table (SHT_DYNSYM, 11)
    // links to.
    let (table, entry_size, count) = (u64_at(&elf, 0x28), u16_at(&elf, 0x3a), u16_at(&elf, 0x3c));
    let header = |i: usize| table + i * entry_size;
    let dynsym = (0..count).map(header).find(|&h| u32_at(&elf, h + 4) == 11).expect("a dynamic symbol table");
    let dynstr = header(u32_at(&elf, dynsym + 0x28));
    let (start, size) = (u64_at(&elf, dynstr + 0x18), u64_at(&elf, dynstr + 0x20));
    let name = format!("\0{symbol}\0").into_bytes();
    let at = elf[start..start + size].windows(name.len()).position(|w| w == name).unwrap_or_else(|| panic!("hipsim exports no {symbol}"));
    elf[start + at + 1] = b'_';
    let dir = target_dir().join(format!("hipsim-without-{symbol}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("libamdhip64.so");
    // Written beside and renamed over, so that a test running at the same time never loads half a file.
    let partial = dir.join(format!("libamdhip64.so.{}", std::process::id()));
    std::fs::write(&partial, elf).unwrap();
    std::fs::rename(&partial, &path).unwrap();
    path
}

/// Builds the software GPU when it is missing (`cargo test` alone does not build a cdylib of
/// another package), with the cargo and profile that built this test.
fn build_hipsim(sim: &std::path::Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "hipsim"]).current_dir(env!("CARGO_MANIFEST_DIR"));
    if target_dir().file_name().is_some_and(|p| p == "release") {
        cmd.arg("--release");
    }
    let status = cmd.status().map_err(|e| format!("could not run cargo to build the software GPU: {e}"))?;
    if !status.success() || !sim.exists() {
        return Err(format!("the software GPU is not built and `cargo build -p hipsim` failed ({status}); looked for {}", sim.display()));
    }
    Ok(())
}

fn setup() {
    let outcome = SETUP.get_or_init(|| {
        let wants_cuda = std::env::var("RCB_BACKEND").is_ok_and(|b| b == "cuda");
        if !wants_cuda && std::env::var_os("RCB_HIP_LIBRARY").is_none() {
            let sim = hipsim_path();
            if !sim.exists() {
                build_hipsim(&sim)?;
            }
            // SAFETY: runs once, before any test reads the environment through the library.
            unsafe {
                std::env::set_var("RCB_HIP_LIBRARY", &sim);
                std::env::set_var("RCB_BACKEND", "hip");
            }
        }
        Ok(())
    });
    if let Err(message) = outcome {
        panic!("{message}");
    }
}

/// Whether a missing GPU fails the test instead of skipping it (`RCB_TEST_REQUIRE_GPU=1`, set by
/// `ci/gpu-run.sh` on the GPU machine, where a skip for lack of a GPU means nothing was tested).
pub fn gpu_required() -> bool {
    std::env::var("RCB_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The runtime the tests run on, or `None` (after printing why) when the requested real GPU is
/// absent. Use as `let Some(rt) = common::runtime() else { return };`.
pub fn runtime() -> Option<&'static dyn Runtime> {
    setup();
    match runtime::get() {
        Ok(rt) => Some(rt),
        Err(e)
            if matches!(e.kind, ErrorKind::NoDevice | ErrorKind::RuntimeUnavailable)
                && std::env::var("RCB_BACKEND").is_ok_and(|b| b == "cuda")
                && !gpu_required() =>
        {
            skip("every check", format!("no GPU for RCB_BACKEND=cuda: {e}"));
            None
        }
        Err(e) => panic!("the test runtime did not load: {e}"),
    }
}

/// The name a SKIPPED line gives the running test: `<test binary>::<test path>`, the binary
/// without Cargo's hash (`cmdbuf::update_moves_one_allocation`). libtest names each test's
/// thread after the test.
pub fn test_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe.as_deref().and_then(|p| p.file_stem()).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let binary = match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_owned(),
        _ => stem,
    };
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("<unnamed thread>"))
}

/// Says that `what` (a check, or "every check") of the running test did not run and why, as
/// `SKIPPED <test>: <what> (<why>)`: the line `ci/test.sh` compares with
/// `tests/expected-skips*.txt` and `ci/gpu-run.sh` lists by name.
pub fn skip(what: &str, why: impl Display) {
    // One write, so that no other test's output lands inside the line.
    let line = format!("SKIPPED {}: {what} ({why})\n", test_name());
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// What a call of an optional runtime feature returned, or `None` after saying the test is
/// skipped when the runtime lacks the feature; any other error fails the test.
#[track_caller]
pub fn supported<T>(feature: &str, result: Result<T, Error>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) if e.kind == ErrorKind::Unsupported => {
            skip(feature, format!("unsupported on this runtime: {e}"));
            None
        }
        Err(e) => panic!("{feature}: {e}"),
    }
}

/// Whether the runtime sees at least `n` devices; says the test is skipped when not.
pub fn has_devices(rt: &dyn Runtime, n: i32) -> bool {
    let seen = rt.info().device_count;
    if seen < n {
        skip("every check", format!("needs {n} devices; this runtime sees {seen}"));
    }
    seen >= n
}

/// This thread's last error message from the library.
pub fn last_error() -> String {
    let mut buf = vec![0 as c_char; 1024];
    // SAFETY: a writable buffer of the given length.
    unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: the library NUL-terminated the buffer.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

/// Asserts `RCB_OK`, showing the last error otherwise.
#[track_caller]
pub fn ok(status: rcb_status) {
    assert_eq!(status, RCB_OK, "{}", last_error());
}

/// Asserts the status and that the last error message contains `needle`.
#[track_caller]
pub fn fails(status: rcb_status, expected: rcb_status, needle: &str) {
    let msg = last_error();
    assert_eq!(status, expected, "message: {msg}");
    assert!(msg.contains(needle), "message {msg:?} should contain {needle:?}");
}

/// A launch of `function` with the packed `args` in one block of 64 threads: the test kernels
/// loop over their elements, so one block covers any count.
pub fn launch(function: Function, args: &[u8]) -> KernelParams<'_> {
    KernelParams { function, grid: [1, 1, 1], block: [64, 1, 1], shared_mem_bytes: 0, args }
}

/// Launches `function` with `args` on `stream`; the test fails when the launch does.
#[track_caller]
pub fn run(rt: &dyn Runtime, function: Function, args: &[Arg], stream: Stream) {
    rt.direct().launch_kernel(&launch(function, &pack(args)), stream).expect("launch");
}

/// The test kernels the Rust tests use (same C signatures in hipsim, `tests/gpu/kernels.cu` and
/// `tests/gpu/kernels.hip`).
pub struct TestKernels {
    pub module: Module,
    pub fill_u32: Function,
    pub axpy_f32: Function,
    pub add_f32: Function,
    pub copy_u8: Function,
    pub sleep: Function,
    pub distance_u64: Function,
}

pub fn kernels(rt: &dyn Runtime, device: i32) -> TestKernels {
    let image = code_objects::image(rt, device).unwrap_or_else(|e| panic!("the test kernels: {e}"));
    let module = rt.direct().module_load(device, &image).expect("load the test kernels");
    let f = |name: &str| rt.direct().module_function(module, name).expect(name);
    TestKernels {
        module,
        fill_u32: f("rcb_test_fill_u32"),
        axpy_f32: f("rcb_test_axpy_f32"),
        add_f32: f("rcb_test_add_f32"),
        copy_u8: f("rcb_test_copy_u8"),
        sleep: f("rcb_test_sleep"),
        distance_u64: f("rcb_test_distance_u64"),
    }
}

/// hipsim's test knobs, when the software GPU is the runtime.
pub struct Hipsim {
    lib: libloading::Library,
}

/// hipsim's knobs, for the checks described by `what`; off the software GPU says (in a SKIPPED
/// line) that those checks did not run. Use for checks a test makes besides those that run on
/// every backend.
pub fn hipsim(what: &str) -> Option<Hipsim> {
    let rt = runtime()?;
    let sim = knobs(rt);
    if sim.is_none() {
        skip(what, format!("needs the software GPU's knobs; the runtime is {}", rt.info().backend.name()));
    }
    sim
}

fn knobs(rt: &dyn Runtime) -> Option<Hipsim> {
    if rt.info().backend != Backend::Hip {
        return None;
    }
    let path = std::env::var_os("RCB_HIP_LIBRARY")?;
    // SAFETY: the library is already loaded by the runtime; this takes another reference.
    let lib = unsafe { libloading::Library::new(path) }.ok()?;
    // SAFETY: probing for a symbol only hipsim exports.
    unsafe { lib.get::<unsafe extern "C" fn()>(b"hipsimResetCallCounts\0") }.ok()?;
    Some(Hipsim { lib })
}

/// Whether the runtime is the software GPU (says nothing either way).
pub fn is_software_gpu(rt: &dyn Runtime) -> bool {
    knobs(rt).is_some()
}

/// [`hipsim`] for a test that needs its knobs throughout: says every check is skipped elsewhere.
pub fn hipsim_or_skip() -> Option<Hipsim> {
    hipsim("every check")
}

impl Hipsim {
    fn sym<T: Copy>(&self, name: &str) -> T {
        let cname = format!("{name}\0");
        // SAFETY: the caller names a hipsim export with matching signature.
        unsafe { *self.lib.get::<T>(cname.as_bytes()).unwrap_or_else(|e| panic!("hipsim lacks {name}: {e}")) }
    }

    pub fn call_count(&self, function: &str) -> u64 {
        let f: unsafe extern "C" fn(*const std::ffi::c_char) -> u64 = self.sym("hipsimGetCallCount");
        let name = std::ffi::CString::new(function).unwrap();
        unsafe { f(name.as_ptr()) }
    }

    pub fn live_count(&self, kind: &str) -> u64 {
        let f: unsafe extern "C" fn(*const std::ffi::c_char) -> u64 = self.sym("hipsimLiveCount");
        let name = std::ffi::CString::new(kind).unwrap();
        unsafe { f(name.as_ptr()) }
    }

    fn set(&self, export: &str, spec: &str) {
        let f: unsafe extern "C" fn(*const std::ffi::c_char) -> i32 = self.sym(export);
        let spec = std::ffi::CString::new(spec).unwrap();
        assert_eq!(unsafe { f(spec.as_ptr()) }, 0, "{export}({spec:?})");
    }

    /// `name:n[,name:n]`: fail the n-th call of `name` from now; "" clears.
    pub fn set_faults(&self, spec: &str) {
        self.set("hipsimSetFaults", spec)
    }

    /// `HIPSIM_QUIRKS` syntax (`clr138`, `kernarg_leak`, ...); "" clears.
    pub fn set_quirks(&self, spec: &str) {
        self.set("hipsimSetQuirks", spec)
    }

    /// `name:3400us[,...]`; "" clears.
    pub fn set_latency(&self, spec: &str) {
        self.set("hipsimSetLatency", spec)
    }

    /// Every device's kernel-argument staging pool, in bytes (`u64::MAX`: unlimited).
    pub fn set_kernarg_pool(&self, bytes: u64) {
        let f: unsafe extern "C" fn(u64) = self.sym("hipsimSetKernargPool");
        unsafe { f(bytes) }
    }
}

/// Serialises tests that read process-wide counters or change hipsim's knobs.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Device buffer helpers for tests.
pub fn upload_f32(rt: &dyn Runtime, device: i32, values: &[f32]) -> u64 {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = rt.malloc(device, bytes.len().max(1)).expect("malloc");
    rt.direct().copy_to_device(p, &bytes).expect("upload");
    p
}

pub fn download_f32(rt: &dyn Runtime, ptr: u64, n: usize) -> Vec<f32> {
    let mut bytes = vec![0u8; n * 4];
    rt.direct().copy_from_device(&mut bytes, ptr).expect("download");
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn download_u32(rt: &dyn Runtime, ptr: u64, n: usize) -> Vec<u32> {
    let mut bytes = vec![0u8; n * 4];
    rt.direct().copy_from_device(&mut bytes, ptr).expect("download");
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}
