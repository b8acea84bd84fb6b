//! Logging through `log`, with `env_logger` driven by `RCB_LOG` (never by the host's `RUST_LOG`).

use std::sync::Once;

static INIT: Once = Once::new();

/// Installs the logger once per process. Called by every C entry point; `try_init` leaves a
/// logger the host already installed in place.
pub fn init() {
    INIT.call_once(|| {
        if std::env::var_os(crate::config::LOG_VAR).is_some() {
            let env = env_logger::Env::new().filter(crate::config::LOG_VAR);
            let _ = env_logger::Builder::from_env(env).try_init();
        }
    });
}
