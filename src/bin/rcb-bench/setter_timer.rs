//! The runtime's node setters timed from outside the library, when the runtime the library
//! loaded is the stand-in `tests/gpu/setter_timer.c` (named by `RCB_CUDA_LIBRARY` or
//! `RCB_HIP_LIBRARY`): it times each setter around the real one and sums what it took, so an
//! update can be split, in the same call, into the time inside the runtime's setters and the
//! library's own. With `RCB_SETTER_TIMER_SKIP=1` its kernel-node setters call nothing (see
//! `setter_timer.c`), so that `update-loop` times the library's work alone.

use libloading::os::unix::{Library, RTLD_LAZY, Symbol};

/// `dlopen`'s flag for "only if already loaded" (glibc's value): the stand-in is found only where
/// the library loaded it, never loaded here a second time.
const RTLD_NOLOAD: i32 = 0x4;

type Read = unsafe extern "C" fn(*mut u64, *mut u64);
type Skipping = unsafe extern "C" fn() -> i32;

/// The stand-in's sums, read through its `rcb_setter_timer_read`: the calling thread's (it keeps
/// them per thread), which is the thread that times the calls around them.
pub struct SetterTimer {
    read: Symbol<Read>,
    /// Its kernel-node setters return without calling the runtime.
    pub skipping: bool,
    _library: Library,
}

/// What the timed setters took: nanoseconds inside them and their calls.
#[derive(Clone, Copy)]
pub struct Inside {
    pub ns: u64,
    pub calls: u64,
}

impl SetterTimer {
    /// The stand-in, if the runtime library the environment names is one and is loaded.
    pub fn find() -> Option<SetterTimer> {
        ["RCB_CUDA_LIBRARY", "RCB_HIP_LIBRARY"].into_iter().filter_map(std::env::var_os).find_map(|path| {
            // SAFETY: RTLD_NOLOAD returns only a library that is already loaded and initialised.
            let library = unsafe { Library::open(Some(&path), RTLD_LAZY | RTLD_NOLOAD) }.ok()?;
            // SAFETY: the stand-in defines this symbol with this signature (setter_timer.c).
            let read = unsafe { library.get::<Read>(b"rcb_setter_timer_read\0") }.ok()?;
            // SAFETY: as above (setter_timer.c); a stand-in without it never skips.
            let skipping = match unsafe { library.get::<Skipping>(b"rcb_setter_timer_skipping\0") } {
                // SAFETY: the stand-in's function takes nothing and only reads the environment.
                Ok(skipping) => (unsafe { skipping() }) != 0,
                Err(_) => false,
            };
            Some(SetterTimer { read, skipping, _library: library })
        })
    }

    /// The sums so far.
    pub fn now(&self) -> Inside {
        let (mut ns, mut calls) = (0, 0);
        // SAFETY: two writable counts, as the stand-in's function takes.
        unsafe { (self.read)(&mut ns, &mut calls) };
        Inside { ns, calls }
    }

    /// What the setters took during `f`, and its result.
    pub fn during<T>(&self, f: impl FnOnce() -> T) -> (T, Inside) {
        let before = self.now();
        let out = f();
        let after = self.now();
        (out, Inside { ns: after.ns.wrapping_sub(before.ns), calls: after.calls.wrapping_sub(before.calls) })
    }
}
