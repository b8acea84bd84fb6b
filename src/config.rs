//! Every `RCB_*` environment variable the library reads, parsed once on first use.
//!
//! A malformed value is an error that names the variable; it is reported by the first call that
//! needs the configuration and by every later one (the parse is not retried).

use crate::cmdbuf::KernelList;
use crate::error::{Error, ErrorKind, Result};
use once_cell::sync::Lazy;
use rocm_cmdbuf_stream_pool::{ENABLED_VAR, MAX_PER_KEY_VAR, Settings};
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
    /// `RCB_STREAM_CACHE=0|1` (default 1) and `RCB_STREAM_CACHE_MAX_PER_KEY` (default 64), read
    /// by the stream pool's own parser, which the `LD_PRELOAD` interposer shares.
    pub stream_cache: Settings,
    /// `RCB_EXEC_UPDATE_BUDGET` (bytes; 0: never re-instantiate): the update budget of each
    /// primary command buffer's executable graph; unset, the runtime decides (see
    /// `cmdbuf/budget.rs`).
    pub exec_update_budget: Option<u64>,
    /// `RCB_OPAQUE_KERNELS`: the kernels whose arguments are never patched and whose command
    /// buffers move no allocation in place (default: NCCL's, RCCL's and MSCCL's; see
    /// `cmdbuf/opaque.rs`).
    pub opaque_kernels: KernelList,
}

/// `RCB_LOG`: the log filter, read by the logging set-up before anything else.
pub const LOG_VAR: &str = "RCB_LOG";

/// `RCB_STATS`: where the process counters go when the library is unloaded (at process exit),
/// read then by `stats_at_exit.rs` (on its own: a malformed other variable must not silence it).
pub const STATS_VAR: &str = "RCB_STATS";

/// Where `RCB_STATS` sends the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsTarget {
    Stderr,
    /// Appended to this file (created if missing).
    File(PathBuf),
}

/// `RCB_STATS`: unset, empty or `0` prints nothing; `1` prints to stderr; anything else is the
/// path of a file the report is appended to.
pub fn stats_target(value: Option<&std::ffi::OsStr>) -> Option<StatsTarget> {
    match value?.to_str() {
        Some("" | "0") => None,
        Some("1") => Some(StatsTarget::Stderr),
        _ => Some(StatsTarget::File(PathBuf::from(value?))),
    }
}

/// Every `RCB_*` variable the library and the preload read: [`Config::from_lookup`] reads all of
/// them but [`LOG_VAR`] and [`STATS_VAR`]. The table of docs/install.md's "Run-time settings", where each is described, lists exactly
/// these (both checked by the tests below).
pub const VARIABLES: &[&str] = &[
    "RCB_BACKEND",
    "RCB_HIP_LIBRARY",
    "RCB_CUDA_LIBRARY",
    ENABLED_VAR,
    MAX_PER_KEY_VAR,
    "RCB_VMM_POOL_TIMEOUT_MS",
    "RCB_EXEC_UPDATE_BUDGET",
    "RCB_OPAQUE_KERNELS",
    LOG_VAR,
    STATS_VAR,
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
        let stream_cache = Settings::from_vars(&lookup).map_err(|message| Error::new(ErrorKind::Config, message))?;
        let exec_update_budget =
            match text("RCB_EXEC_UPDATE_BUDGET")? {
                None => None,
                Some(s) => Some(s.parse::<u64>().map_err(|_| {
                    bad("RCB_EXEC_UPDATE_BUDGET", &format!("is {s:?}; expected a number of bytes (0: never re-instantiate)"))
                })?),
            };
        let opaque_kernels = KernelList::parse(text("RCB_OPAQUE_KERNELS")?.as_deref()).map_err(|what| bad("RCB_OPAQUE_KERNELS", &what))?;
        Ok(Config {
            backend,
            exec_update_budget,
            opaque_kernels,
            vmm_pool_timeout_ms,
            hip_library: path("RCB_HIP_LIBRARY")?,
            cuda_library: path("RCB_CUDA_LIBRARY")?,
            stream_cache,
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
    fn stream_cache_settings_come_from_the_pools_parser() {
        let c = parse(&[("RCB_STREAM_CACHE", "0"), ("RCB_STREAM_CACHE_MAX_PER_KEY", "8")]).unwrap();
        assert_eq!(c.stream_cache, Settings { enabled: false, max_per_key: 8 });
        let e = parse(&[("RCB_STREAM_CACHE", "yes")]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(e.message.contains("RCB_STREAM_CACHE ") && e.message.contains("yes"), "{}", e.message);
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
    fn opaque_kernels_default_to_the_collective_libraries_and_a_bad_list_names_the_variable() {
        assert_eq!(parse(&[]).unwrap().opaque_kernels, KernelList::default());
        let c = parse(&[("RCB_OPAQUE_KERNELS", "none")]).unwrap();
        assert!(c.opaque_kernels.is_empty());
        let c = parse(&[("RCB_OPAQUE_KERNELS", "rcb_test_indirect*")]).unwrap();
        assert!(c.opaque_kernels.matching("rcb_test_indirect_fill_u32").is_some());
        let e = parse(&[("RCB_OPAQUE_KERNELS", "nccl*,,rccl*")]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(e.message.contains("RCB_OPAQUE_KERNELS") && e.message.contains("empty entry"), "{}", e.message);
    }

    #[test]
    fn stats_go_nowhere_to_stderr_or_to_a_file() {
        use std::ffi::OsStr;
        assert_eq!(stats_target(None), None);
        assert_eq!(stats_target(Some(OsStr::new(""))), None);
        assert_eq!(stats_target(Some(OsStr::new("0"))), None);
        assert_eq!(stats_target(Some(OsStr::new("1"))), Some(StatsTarget::Stderr));
        assert_eq!(stats_target(Some(OsStr::new("run/stats.txt"))), Some(StatsTarget::File("run/stats.txt".into())));
    }

    #[test]
    fn the_list_of_variables_is_what_is_read_and_what_the_install_guide_describes() {
        let mut listed: Vec<&str> = VARIABLES.to_vec();
        listed.sort_unstable();
        let read = std::cell::RefCell::new(vec![LOG_VAR.to_owned(), STATS_VAR.to_owned()]);
        Config::from_lookup(|name| {
            read.borrow_mut().push(name.to_owned());
            None
        })
        .unwrap();
        let mut read = read.into_inner();
        read.sort_unstable();
        read.dedup();
        assert_eq!(read, listed);

        let install = include_str!("../docs/install.md");
        let table = install.split("\n## Run-time settings\n").nth(1).and_then(|rest| rest.split("\n## ").next()).unwrap();
        let mut described: Vec<&str> =
            table.lines().filter_map(|row| row.strip_prefix("| `")?.split('`').next()).filter(|name| name.starts_with("RCB_")).collect();
        described.sort_unstable();
        assert_eq!(described, listed, "docs/install.md's table of run-time settings");
    }
}
