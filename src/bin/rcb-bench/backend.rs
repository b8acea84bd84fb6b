//! Backend choice for the command-line tools: the configured runtime when it loads, else the
//! software GPU built next to the executable (the embedded default on a machine with no GPU).

use rocm_cmdbuf::runtime::{self, Runtime};

/// Loads the runtime, falling back to `libamdhip64.so` (hipsim) beside the executable when
/// neither `RCB_BACKEND` nor `RCB_HIP_LIBRARY` is set and no GPU runtime loads.
pub fn load() -> Result<&'static dyn Runtime, String> {
    let configured = std::env::var_os("RCB_BACKEND").is_some() || std::env::var_os("RCB_HIP_LIBRARY").is_some();
    if !configured {
        let probe = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
            .arg("--probe-runtime")
            .output()
            .map_err(|e| e.to_string())?;
        if !probe.status.success() {
            let sim = std::env::current_exe().map_err(|e| e.to_string())?.with_file_name("libamdhip64.so");
            eprintln!(
                "no GPU runtime sees a device ({}); using the software GPU {}",
                String::from_utf8_lossy(&probe.stderr).trim(),
                sim.display()
            );
            // SAFETY: set before any thread reads the environment through the library.
            unsafe {
                std::env::set_var("RCB_BACKEND", "hip");
                std::env::set_var("RCB_HIP_LIBRARY", sim);
            }
        }
    }
    runtime::get().map_err(|e| e.to_string())
}

/// Handles `--probe-runtime`: exits 0 when the configured runtime loads, 1 (reason on stderr)
/// otherwise. Probing in a child process keeps a failed load from being remembered here.
pub fn probe_if_asked() {
    if std::env::args().nth(1).as_deref() == Some("--probe-runtime") {
        match runtime::get() {
            Ok(_) => std::process::exit(0),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }
}
