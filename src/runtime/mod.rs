//! The GPU runtime underneath everything: one `Runtime` interface (`interface.rs`), one
//! implementation per vendor (`hip/`, `cuda/`), each a table of function pointers loaded once with
//! `libloading` (`symbols.rs`), and what the two share (`common.rs`, `extra.rs`).
//!
//! Nothing above this module knows which vendor runs underneath. The process has one runtime,
//! chosen by `RCB_BACKEND` on first use and kept for the life of the process (never unloaded,
//! so function pointers stay valid).

mod common;
mod cuda;
mod extra;
mod hip;
mod interface;
mod symbols;
mod types;

pub use interface::*;
pub use types::*;

use crate::config::{self, BackendChoice};
use crate::error::{Error, ErrorKind, Result};
use once_cell::sync::OnceCell;

/// What a failed end of capture left the stream in. Runtimes differ: an invalidated capture is
/// ended by the failing call, a call from the wrong thread or an injected fault leaves it open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaptureAfterFailedEnd {
    /// The stream is still capturing: its capture must still be ended before it is usable.
    StillCapturing,
    /// The stream is no longer capturing and is usable; what was captured is lost.
    Ended,
    /// The runtime could not say (why).
    Unknown(String),
}

/// Asks the runtime what a failed `end_capture(stream)` left behind.
pub fn capture_after_failed_end(rt: &dyn Runtime, stream: Stream) -> CaptureAfterFailedEnd {
    match rt.stream_is_capturing(stream) {
        Ok(true) => CaptureAfterFailedEnd::StillCapturing,
        Ok(false) => CaptureAfterFailedEnd::Ended,
        Err(e) => CaptureAfterFailedEnd::Unknown(e.message),
    }
}

static RUNTIME: OnceCell<Result<Box<dyn Runtime>>> = OnceCell::new();

/// Why the loaded runtime is the one it is, set with it.
static CHOICE: OnceCell<String> = OnceCell::new();

/// Why the runtime [`get`] returns was chosen (the variables that named it, or what the search
/// found and, under `RCB_BACKEND=auto`, why HIP was passed over); `None` before a runtime loaded.
pub fn choice() -> Option<&'static str> {
    CHOICE.get().map(String::as_str)
}

/// The process's runtime, loaded on first use according to `RCB_BACKEND`. A failed load is
/// remembered: every later call reports the same error.
pub fn get() -> Result<&'static dyn Runtime> {
    match RUNTIME.get_or_init(load) {
        Ok(rt) => Ok(rt.as_ref()),
        Err(e) => Err(e.clone()),
    }
}

fn load() -> Result<Box<dyn Runtime>> {
    let cfg = config::get()?;
    let hip_named = |how: &str| match &cfg.hip_library {
        Some(path) => format!("{how}; RCB_HIP_LIBRARY={} names the HIP runtime", path.display()),
        None => format!(
            "{how}; the HIP runtime found by the search (one already loaded, else the first of libamdhip64.so.7, .6, .5, libamdhip64.so)"
        ),
    };
    let cuda_named = |how: &str| match &cfg.cuda_library {
        Some(path) => format!("{how}; RCB_CUDA_LIBRARY={} names the CUDA driver", path.display()),
        None => format!("{how}; the CUDA driver libcuda.so.1"),
    };
    let (rt, why) = match cfg.backend {
        BackendChoice::Hip => (hip::load(cfg)?, hip_named("RCB_BACKEND=hip")),
        BackendChoice::Cuda => (cuda::load(cfg)?, cuda_named("RCB_BACKEND=cuda")),
        BackendChoice::Auto => match hip::load(cfg) {
            Ok(rt) => (rt, hip_named("RCB_BACKEND=auto (or unset) takes HIP first")),
            Err(hip_err) => {
                let rt = cuda::load(cfg).map_err(|cuda_err| {
                    let kind = if hip_err.kind == ErrorKind::NoDevice || cuda_err.kind == ErrorKind::NoDevice {
                        ErrorKind::NoDevice
                    } else {
                        ErrorKind::RuntimeUnavailable
                    };
                    Error::new(kind, format!("no usable GPU runtime (RCB_BACKEND=auto): hip: {hip_err}; cuda: {cuda_err}"))
                })?;
                (rt, cuda_named(&format!("RCB_BACKEND=auto (or unset) and no usable HIP runtime ({hip_err})")))
            }
        },
    };
    // Set once, by the one thread that loads the runtime.
    let _ = CHOICE.set(why);
    let info = rt.info();
    log::info!(
        "loaded {} runtime {} (version {}, {} device(s){})",
        info.backend.name(),
        info.library,
        info.version,
        info.device_count,
        if info.disabled_features.is_empty() { String::new() } else { format!("; disabled: {}", info.disabled_features.join("; ")) }
    );
    Ok(rt)
}
