//! Every `RCB_*` environment variable the library reads, parsed once on first use.
//!
//! A malformed value is an error that names the variable; it is reported by the first call that
//! needs the configuration and by every later one (the parse is not retried).

use crate::error::{Error, ErrorKind, Result};
use once_cell::sync::Lazy;
use std::path::PathBuf;

/// Which GPU runtime backs the library (`RCB_BACKEND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// HIP if a HIP library loads and sees a device, else CUDA.
    Auto,
    Hip,
    Cuda,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// `RCB_BACKEND=hip|cuda|auto` (default `auto`).
    pub backend: BackendChoice,
    /// `RCB_HIP_LIBRARY`: load exactly this HIP runtime instead of searching for one.
    pub hip_library: Option<PathBuf>,
    /// `RCB_CUDA_LIBRARY`: load exactly this CUDA driver instead of `libcuda.so.1`.
    pub cuda_library: Option<PathBuf>,
    /// `RCB_VMM_POOL_TIMEOUT_MS`: how long a VMM pool waits for the GPU to free a slot when its
    /// config leaves the timeout at 0 (default 10 000 ms).
    pub vmm_pool_timeout_ms: u32,
    /// `RCB_STREAM_CACHE=0|1` (default 1): whether released streams are kept for reuse.
    pub stream_cache: bool,
    /// `RCB_STREAM_CACHE_MAX_PER_KEY` (default 64): idle streams kept per (device, flags, priority).
    pub stream_cache_max_per_key: usize,
    /// `RCB_EXEC_UPDATE_BUDGET` (bytes; 0: never re-instantiate): the update budget of each
    /// primary command buffer's executable graph; unset, the runtime decides (see
    /// `cmdbuf/budget.rs`).
    pub exec_update_budget: Option<u64>,
}

/// Names of the variables, for documentation and for error messages.
pub const VARIABLES: &[(&str, &str)] = &[
    ("RCB_BACKEND", "hip, cuda or auto (default auto: HIP if it sees a device, else CUDA)"),
    ("RCB_HIP_LIBRARY", "path of the HIP runtime to load instead of searching libamdhip64.so.7/.6/.5"),
    ("RCB_CUDA_LIBRARY", "path of the CUDA driver to load instead of libcuda.so.1"),
    ("RCB_VMM_POOL_TIMEOUT_MS", "VMM pool wait for a free slot, in ms, when the pool's config says 0 (default 10000)"),
    ("RCB_LOG", "log filter in env_logger syntax (error, warn, info, debug, trace); default off"),
    ("RCB_STREAM_CACHE", "0 or 1 (default 1): keep released streams for reuse, in the library and the preload"),
    ("RCB_STREAM_CACHE_MAX_PER_KEY", "idle streams kept per (device, flags, priority) (default 64)"),
    (
        "RCB_EXEC_UPDATE_BUDGET",
        "bytes of estimated kernel-argument staging an executable graph's updates may take before it is re-instantiated; 0: never (default 67108864 on HIP, 0 on CUDA)",
    ),
];

static CONFIG: Lazy<Result<Config>> = Lazy::new(|| Config::from_lookup(|name| std::env::var_os(name)));

/// The process-wide configuration, read from the environment on first use.
pub fn get() -> Result<&'static Config> {
    CONFIG.as_ref().map_err(Clone::clone)
}

impl Config {
    /// Parses the configuration from any variable source (the environment in production, a map
    /// in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<Config> {
        let text = |name: &str| -> Result<Option<String>> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => v.into_string().map(|s| Some(s.trim().to_owned())).map_err(|_| bad(name, "is not valid UTF-8")),
            }
        };
        let path = |name: &str| -> Result<Option<PathBuf>> {
            match text(name)? {
                None => Ok(None),
                Some(s) if s.is_empty() => Err(bad(name, "is set but empty")),
                Some(s) => Ok(Some(PathBuf::from(s))),
            }
        };
        let backend = match text("RCB_BACKEND")?.as_deref() {
            None | Some("") | Some("auto") => BackendChoice::Auto,
            Some("hip") => BackendChoice::Hip,
            Some("cuda") => BackendChoice::Cuda,
            Some(other) => {
                return Err(bad("RCB_BACKEND", &format!("is {other:?}; expected hip, cuda or auto")));
            }
        };
        let vmm_pool_timeout_ms = match text("RCB_VMM_POOL_TIMEOUT_MS")?.as_deref() {
            None | Some("") => 10_000,
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|&ms| ms > 0)
                .ok_or_else(|| bad("RCB_VMM_POOL_TIMEOUT_MS", &format!("is {s:?}; expected milliseconds from 1 to {}", u32::MAX)))?,
        };
        let stream_cache = match text("RCB_STREAM_CACHE")?.as_deref() {
            None | Some("") | Some("1") => true,
            Some("0") => false,
            Some(other) => return Err(bad("RCB_STREAM_CACHE", &format!("is {other:?}; expected 0 or 1"))),
        };
        let stream_cache_max_per_key = match text("RCB_STREAM_CACHE_MAX_PER_KEY")? {
            None => 64,
            Some(s) => s.parse().map_err(|_| bad("RCB_STREAM_CACHE_MAX_PER_KEY", &format!("is {s:?}; expected a count of streams")))?,
        };
        let exec_update_budget =
            match text("RCB_EXEC_UPDATE_BUDGET")? {
                None => None,
                Some(s) => Some(s.parse::<u64>().map_err(|_| {
                    bad("RCB_EXEC_UPDATE_BUDGET", &format!("is {s:?}; expected a number of bytes (0: never re-instantiate)"))
                })?),
            };
        Ok(Config {
            backend,
            exec_update_budget,
            vmm_pool_timeout_ms,
            hip_library: path("RCB_HIP_LIBRARY")?,
            cuda_library: path("RCB_CUDA_LIBRARY")?,
            stream_cache,
            stream_cache_max_per_key,
        })
    }
}

fn bad(name: &str, what: &str) -> Error {
    Error::new(ErrorKind::Config, format!("environment variable {name} {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<Config> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|name| map.get(name).map(Into::into))
    }

    #[test]
    fn defaults_to_auto_without_overrides() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.backend, BackendChoice::Auto);
        assert!(c.hip_library.is_none() && c.cuda_library.is_none());
    }

    #[test]
    fn reads_backend_and_paths() {
        let c = parse(&[("RCB_BACKEND", "cuda"), ("RCB_HIP_LIBRARY", "/x/libamdhip64.so")]).unwrap();
        assert_eq!(c.backend, BackendChoice::Cuda);
        assert_eq!(c.hip_library.unwrap(), PathBuf::from("/x/libamdhip64.so"));
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let e = parse(&[("RCB_BACKEND", "rocm")]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(e.message.contains("RCB_BACKEND") && e.message.contains("rocm"), "{}", e.message);
        let e = parse(&[("RCB_HIP_LIBRARY", "")]).unwrap_err();
        assert!(e.message.contains("RCB_HIP_LIBRARY"), "{}", e.message);
    }

    #[test]
    fn vmm_pool_timeout_defaults_and_rejects_zero_or_garbage() {
        assert_eq!(parse(&[]).unwrap().vmm_pool_timeout_ms, 10_000);
        assert_eq!(parse(&[("RCB_VMM_POOL_TIMEOUT_MS", "250")]).unwrap().vmm_pool_timeout_ms, 250);
        for bad in ["0", "-5", "1.5s"] {
            let e = parse(&[("RCB_VMM_POOL_TIMEOUT_MS", bad)]).unwrap_err();
            assert!(e.message.contains("RCB_VMM_POOL_TIMEOUT_MS") && e.message.contains(bad), "{}", e.message);
        }
    }

    #[test]
    fn stream_cache_defaults_on_with_64_per_key() {
        let c = parse(&[]).unwrap();
        assert!(c.stream_cache);
        assert_eq!(c.stream_cache_max_per_key, 64);
        let c = parse(&[("RCB_STREAM_CACHE", "0"), ("RCB_STREAM_CACHE_MAX_PER_KEY", "8")]).unwrap();
        assert!(!c.stream_cache);
        assert_eq!(c.stream_cache_max_per_key, 8);
    }

    #[test]
    fn exec_update_budget_is_bytes_or_unset() {
        assert_eq!(parse(&[]).unwrap().exec_update_budget, None);
        assert_eq!(parse(&[("RCB_EXEC_UPDATE_BUDGET", "0")]).unwrap().exec_update_budget, Some(0));
        assert_eq!(parse(&[("RCB_EXEC_UPDATE_BUDGET", " 1048576 ")]).unwrap().exec_update_budget, Some(1 << 20));
        for bad in ["-1", "64MiB", ""] {
            let e = parse(&[("RCB_EXEC_UPDATE_BUDGET", bad)]).unwrap_err();
            assert!(e.message.contains("RCB_EXEC_UPDATE_BUDGET") && e.message.contains("bytes"), "{}", e.message);
        }
    }

    #[test]
    fn malformed_stream_cache_values_name_the_variable() {
        let e = parse(&[("RCB_STREAM_CACHE", "yes")]).unwrap_err();
        assert!(e.message.contains("RCB_STREAM_CACHE ") && e.message.contains("yes"), "{}", e.message);
        let e = parse(&[("RCB_STREAM_CACHE_MAX_PER_KEY", "-1")]).unwrap_err();
        assert!(e.message.contains("RCB_STREAM_CACHE_MAX_PER_KEY") && e.message.contains("-1"), "{}", e.message);
    }
}
