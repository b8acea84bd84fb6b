//! What a forked child must forget: a process-wide object published through an atomic (the
//! stream cache, the list of freed command buffers, an update budget being measured) is
//! abandoned in the child, whose copy of its
//! lock a parent thread that does not exist there may hold, and whose contents are the parent's.
//!
//! [`forget_in_forked_child!`] registers a module's handler with `pthread_atfork` when the library
//! is loaded (`.init_array`), before any thread of the program can fork: registered lazily, a fork
//! between a first use and the registration would leave the child the parent's object.

use std::ffi::c_int;

unsafe extern "C" {
    pub(crate) fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

/// Registers `$handler` (an `extern "C" fn()` that only loads and stores atomics) to run in every
/// forked child, from the library's load on.
macro_rules! forget_in_forked_child {
    ($handler:path) => {
        #[used]
        #[unsafe(link_section = ".init_array")]
        static REGISTER_AT_FORK: extern "C" fn() = {
            extern "C" fn register() {
                // SAFETY: registers a handler that only loads and stores atomics. A failure (out of
                // memory) leaves a child the parent's object, as without the handler; nothing to
                // report it to this early.
                unsafe { $crate::at_fork::pthread_atfork(None, None, Some($handler)) };
            }
            register
        };
    };
}
pub(crate) use forget_in_forked_child;
