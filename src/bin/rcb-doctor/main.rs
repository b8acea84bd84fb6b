//! `rcb-doctor`: whether rocm_cmdbuf can work on this machine, and how it is set. Prints the GPU
//! runtime the library loads and why (`RCB_BACKEND`, `RCB_HIP_LIBRARY`, the search), its devices,
//! the struct layouts chosen for its version, the optional features (virtual memory management,
//! stream memory operations, stream priorities), the stream cache's settings, and the update
//! budget with what the library measured of the runtime's kernel-argument growth; then creates a
//! command buffer through the C ABI. Each thing that is off or risky gets an `advice:` line.
//!
//! It reads the environment as the library does and uses the library's own code (this binary is
//! built from the same crate), with no fallback to the software GPU: what it reports is what a
//! program using the library in this environment gets. Exit status 0 when the library is usable
//! here, 1 (with the reason on the last line) when not, 2 for a wrong argument.

use rocm_cmdbuf::config::{self, BackendChoice, Config};
use rocm_cmdbuf::error::ErrorKind;
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{self, Backend, Runtime};
use rocm_cmdbuf::{BudgetBasis, BudgetSettlement};
use std::ffi::CStr;
use std::process::ExitCode;

const USAGE: &str = "usage: rcb-doctor [--device N]   (N: the device the command buffer is made on, default 0; the update budget is measured on the thread's current device, as in a process whose first command buffer settles it)";

/// What the run found: advice lines printed so far.
struct Report {
    advice: usize,
}

impl Report {
    fn section(&self, title: &str) {
        println!("{title}");
    }

    fn line(&self, what: &str, text: impl std::fmt::Display) {
        println!("  {what}: {text}");
    }

    fn advise(&mut self, text: impl std::fmt::Display) {
        self.advice += 1;
        println!("  advice: {text}");
    }
}

/// Why the library cannot be used here.
struct Unusable(String);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if matches!(args.as_slice(), [flag] if flag == "--help" || flag == "-h") {
        println!("rcb-doctor: whether rocm_cmdbuf can work here, and how it is set\n{USAGE}");
        return ExitCode::SUCCESS;
    }
    let device = match device_argument(&args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rcb-doctor: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: rcb_version returns a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(rcb_version()) }.to_string_lossy().into_owned();
    println!("rcb-doctor: rocm_cmdbuf {version}");
    let mut report = Report { advice: 0 };
    match examine(&mut report, device) {
        Ok(()) => {
            println!("rcb-doctor: usable ({} advice line(s))", report.advice);
            ExitCode::SUCCESS
        }
        Err(Unusable(why)) => {
            println!("rcb-doctor: NOT usable: {why}");
            ExitCode::from(1)
        }
    }
}

fn device_argument(args: &[String]) -> Result<i32, String> {
    match args {
        [] => Ok(0),
        [flag, n] if flag == "--device" => {
            n.parse::<i32>().ok().filter(|&d| d >= 0).ok_or_else(|| format!("--device {n}: not a device number"))
        }
        other => Err(format!("unexpected arguments {other:?}")),
    }
}

fn examine(r: &mut Report, device: i32) -> Result<(), Unusable> {
    let cfg = settings(r)?;
    let rt = loaded_runtime(r, cfg)?;
    if device >= rt.info().device_count {
        return Err(Unusable(format!("--device {device}: the runtime sees {} device(s)", rt.info().device_count)));
    }
    devices(r, rt);
    layouts(r, rt);
    features(r, rt, device);
    stream_cache(r, cfg);
    update_budget(r, rt)?;
    command_buffer(r, device)
}

/// The variables the library reads, as set here.
fn settings(r: &mut Report) -> Result<&'static Config, Unusable> {
    r.section("settings");
    for name in config::VARIABLES {
        match std::env::var_os(name) {
            Some(value) => r.line(name, value.to_string_lossy()),
            None => r.line(name, "(unset)"),
        }
    }
    config::get().map_err(|e| {
        r.advise(format!("fix or unset the variable: {e}"));
        Unusable(e.message)
    })
}

fn loaded_runtime(r: &mut Report, cfg: &Config) -> Result<&'static dyn Runtime, Unusable> {
    r.section("runtime");
    let rt = match runtime::get() {
        Ok(rt) => rt,
        Err(e) => {
            r.line("load failed", &e);
            match e.kind {
                ErrorKind::NoDevice => r.advise(
                    "no GPU is visible: check the driver (amd-smi or rocm-smi; nvidia-smi for the cuda backend), HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES, and access to /dev/kfd and /dev/dri (the video and render groups)",
                ),
                _ if cfg.backend == BackendChoice::Cuda => {
                    r.advise("install NVIDIA's driver (libcuda.so.1) or name it with RCB_CUDA_LIBRARY; for ROCm unset RCB_BACKEND")
                }
                _ => r.advise("install ROCm's HIP runtime (libamdhip64.so.7, .6 or .5) or name it with RCB_HIP_LIBRARY"),
            }
            return Err(Unusable(e.message));
        }
    };
    let info = rt.info();
    r.line("backend", info.backend.name());
    r.line("library", &info.library);
    r.line("version", version_text(info.backend, info.version));
    r.line("devices", info.device_count);
    r.line("chosen because", runtime::choice().unwrap_or("(not recorded)"));
    match info.backend {
        Backend::Hip => hip_release(r, info.version),
        Backend::Cuda if cfg.backend == BackendChoice::Auto => {
            r.advise("HIP was not usable (see above), so the CUDA driver was loaded: the patched XLA uses only the hip backend")
        }
        Backend::Cuda => {
            r.advise("RCB_BACKEND=cuda: the cuda backend is for testing the library on NVIDIA GPUs; the patched XLA uses only hip")
        }
    }
    for feature in &info.disabled_features {
        r.advise(format!("off: {feature}"));
    }
    Ok(rt)
}

fn version_text(backend: Backend, v: i32) -> String {
    match backend {
        // major * 10^7 + minor * 10^5 + patch, where patch is HIP's build number.
        Backend::Hip => format!("HIP {}.{}.{} ({v})", v / 10_000_000, (v / 100_000) % 100, v % 100_000),
        Backend::Cuda => format!("CUDA driver {}.{} ({v})", v / 1000, (v % 1000) / 10),
    }
}

/// The ROCm release the loaded runtime belongs to, read from `.info/version` of the ROCm tree
/// holding it, and what is known about it.
fn hip_release(r: &mut Report, version: i32) {
    let release = loaded_hip_path().and_then(|lib| {
        let root = std::path::Path::new(&lib).parent()?.parent()?.to_path_buf();
        let text = std::fs::read_to_string(root.join(".info/version")).ok()?;
        Some((root.display().to_string(), text.trim().to_owned()))
    });
    match &release {
        Some((root, text)) => r.line("ROCm release", format!("{text} ({root}/.info/version)")),
        None => r.line("ROCm release", "unknown (no .info/version in a ROCm tree around the runtime)"),
    }
    let (major, minor) = (version / 10_000_000, (version / 100_000) % 100);
    if (major, minor) != (7, 2) {
        return;
    }
    let issue = "ROCm 7.2.0 has a ROCr crash with command buffers (openxla/xla pull request 40405 moved XLA's ROCm CI to 7.2.1 for it)";
    match &release {
        Some((_, text)) if text.starts_with("7.2.0") => r.advise(format!("{issue}: use 7.2.1 or later")),
        Some(_) => {}
        None => r.advise(format!(
            "{issue}; HIP's version number does not tell 7.2.0 from later 7.2 releases: check that yours is 7.2.1 or later"
        )),
    }
}

/// The file of the HIP runtime mapped into this process (`/proc/self/maps`).
fn loaded_hip_path() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|path| path.contains("libamdhip64")).map(str::to_owned)
}

fn mib(bytes: usize) -> String {
    format!("{} MiB", bytes >> 20)
}

fn devices(r: &mut Report, rt: &dyn Runtime) {
    r.section("devices");
    for d in 0..rt.info().device_count {
        let name = rt.direct().device_name(d).unwrap_or_else(|e| format!("(name unknown: {e})"));
        let arch = match rt.info().backend {
            Backend::Hip => match rt.direct().device_arch(d) {
                Ok(arch) => format!(", arch {arch}"),
                Err(e) => format!(", arch unknown ({e})"),
            },
            Backend::Cuda => String::new(),
        };
        let memory = match rt.device_memory(d) {
            Ok((free, total)) => format!("{} free of {}", mib(free), mib(total)),
            Err(e) => format!("memory unknown ({e})"),
        };
        r.line(&d.to_string(), format!("{name}{arch}, {memory}"));
    }
}

fn layouts(r: &mut Report, rt: &dyn Runtime) {
    r.section("layouts chosen for this runtime version");
    for (what, which) in rt.direct().layouts() {
        r.line(what, which);
    }
}

fn features(r: &mut Report, rt: &dyn Runtime, device: i32) {
    r.section("features");
    match rt.vmm().and_then(|v| v.granularity(device)) {
        Ok(g) => r.line("virtual memory management", format!("available (granularity {} KiB on device {device})", g >> 10)),
        Err(e) => {
            r.line("virtual memory management", format!("off: {e}"));
            r.advise("a VMM pool's vmm backing is unavailable: use its device backing (RCB_VMM_BACKING_DEVICE; XLA's --xla_gpu_rocm_cmdbuf_vmm_pool_backing=device)");
        }
    }
    match rt.stream_memory() {
        Ok(_) => r.line("stream memory operations", "available (the VMM pool's GPU-written timeline)"),
        Err(e) => {
            r.line("stream memory operations", format!("off: {e}"));
            r.advise("a VMM pool waits for its slots through stream memory operations: none can be made here");
        }
    }
    for d in 0..rt.info().device_count {
        match rt.stream_priority_range(d) {
            Ok((least, greatest)) if least != greatest => {
                r.line(&format!("stream priorities, device {d}"), format!("{least} (least) to {greatest} (greatest)"))
            }
            Ok((p, _)) => {
                r.line(&format!("stream priorities, device {d}"), format!("one priority only ({p})"));
                r.advise(format!("device {d}: streams asked for at another priority get the one there is"));
            }
            Err(e) => r.line(&format!("stream priorities, device {d}"), format!("unknown ({e})")),
        }
    }
}

fn stream_cache(r: &mut Report, cfg: &Config) {
    r.section("stream cache");
    let s = &cfg.stream_cache;
    if s.enabled {
        r.line("cache", format!("on, at most {} idle streams kept per (device, flags, priority)", s.max_per_key));
    } else {
        r.line("cache", "off (RCB_STREAM_CACHE=0)");
        r.advise("every stream the library hands out is created, and destroyed on release: unset RCB_STREAM_CACHE to reuse them");
    }
}

/// The process's update budget, settled here as a process's first command buffer settles it: on
/// the thread's current device (device 0 here, which the doctor never changes), not `--device`.
fn update_budget(r: &mut Report, rt: &'static dyn Runtime) -> Result<(), Unusable> {
    r.section("update budget (ROCm's kernel-argument growth, rocm-systems issue 10713)");
    let s: &BudgetSettlement = rocm_cmdbuf::settle_budget(rt).map_err(|e| Unusable(e.message))?;
    r.line("budget", s.describe());
    r.line("charge per node push", format!("its argument bytes plus {} bytes", s.node_charge));
    if let BudgetBasis::Measured(m) = &s.basis {
        let device = s.device.map_or_else(|| String::from("an unknown device"), |d| format!("device {d} (the thread's current device)"));
        r.line(
            "measured",
            format!(
                "{} bytes per node update, {} bytes over {} updates of a {}-node probe graph on {device}, in {:.1} ms",
                m.bytes_per_update,
                m.growth,
                m.node_updates,
                rocm_cmdbuf::PROBE_NODES,
                m.elapsed.as_secs_f64() * 1e3
            ),
        );
    }
    let hip = rt.info().backend == Backend::Hip;
    match &s.basis {
        BudgetBasis::Configured if hip && s.limit == 0 => r.advise(
            "RCB_EXEC_UPDATE_BUDGET=0: nothing bounds what in-place updates take from a leaking ROCm; unset it to have the library measure the growth",
        ),
        BudgetBasis::Failed(_) => r.advise("the measurement failed (above): the fixed default applies; run again on an idle device"),
        BudgetBasis::NotMeasured(_) => r.advise(
            "the growth was not measured (above): the fixed default applies; set RCB_EXEC_UPDATE_BUDGET to choose the budget yourself",
        ),
        _ => {}
    }
    Ok(())
}

fn command_buffer(r: &mut Report, device: i32) -> Result<(), Unusable> {
    r.section("command buffer");
    let mut cb = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let made = unsafe { rcb_cmdbuf_new(device, &mut cb) };
    if made != RCB_OK {
        let mut buf = vec![0 as std::ffi::c_char; 512];
        // SAFETY: a writable buffer of its length.
        unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated by rcb_last_error_message.
        let why = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        return Err(Unusable(format!("rcb_cmdbuf_new on device {device} failed with status {made}: {why}")));
    }
    // SAFETY: the handle just made, freed once.
    let freed = unsafe { rcb_cmdbuf_free(cb) };
    if freed != RCB_OK {
        return Err(Unusable(format!("rcb_cmdbuf_free failed with status {freed}")));
    }
    r.line("rcb_cmdbuf_new, rcb_cmdbuf_free", format!("ok on device {device}"));
    Ok(())
}
