//! Finding the HIP runtime: the override, else one already loaded into the process (so that
//! inside XLA we share its HIP instance and handles), else the first that loads.

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use libloading::Library;
use libloading::os::unix::{Library as UnixLibrary, RTLD_LAZY, RTLD_LOCAL};

/// Newest first: a process that already holds one of these gets it back.
const CANDIDATES: [&str; 4] = ["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"];

// Not exported by libloading; the value is the same on every Linux libc.
const RTLD_NOLOAD: i32 = 0x4;

/// Opens the HIP runtime; returns the library and the name it was found under.
pub fn open(cfg: &Config) -> Result<(Library, String)> {
    if let Some(path) = &cfg.hip_library {
        let shown = path.display().to_string();
        // SAFETY: loading a library runs its initialisers; the HIP runtime is built for that.
        return unsafe { UnixLibrary::open(Some(path), RTLD_LAZY | RTLD_LOCAL) }
            .map(|lib| (lib.into(), shown.clone()))
            .map_err(|e| Error::new(ErrorKind::RuntimeUnavailable, format!("RCB_HIP_LIBRARY={shown} cannot be loaded: {e}")));
    }
    for name in CANDIDATES {
        // SAFETY: RTLD_NOLOAD only returns a library that is already initialised.
        if let Ok(lib) = unsafe { UnixLibrary::open(Some(name), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD) } {
            return Ok((lib.into(), format!("{name} (already loaded)")));
        }
    }
    let mut tried = Vec::new();
    for name in CANDIDATES {
        // SAFETY: as above.
        match unsafe { UnixLibrary::open(Some(name), RTLD_LAZY | RTLD_LOCAL) } {
            Ok(lib) => return Ok((lib.into(), name.to_owned())),
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    Err(Error::new(
        ErrorKind::RuntimeUnavailable,
        format!("no HIP runtime could be loaded (set RCB_HIP_LIBRARY to choose one); tried {}", tried.join("; ")),
    ))
}
