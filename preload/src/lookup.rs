//! `dlsym`, for programs that never call HIP through the dynamic linker: they `dlopen` the
//! runtime themselves (`RTLD_LOCAL`) and take each function from that handle with
//! `dlsym(handle, name)`, which searches only the runtime and its dependencies and so never finds
//! the interposers. XLA up to rocm-jaxlib-v0.8.0 does (every HIP call through
//! `STREAM_EXECUTOR_HIP_WRAP`: TSL's `CachedDsoLoader::GetHipDsoHandle()`, `dlopen` with
//! `RTLD_NOW | RTLD_LOCAL`, then `dlsym(handle, name)`), as does any program written that way.
//!
//! When such a lookup of one of the five names yields that runtime's own function, the caller
//! gets instead an interposer bound to that runtime: its calls go through the cache with that
//! runtime's functions, named once here rather than guessed per call. Every other lookup is the
//! real `dlsym`'s answer, unchanged. `RTLD_DEFAULT` and `RTLD_NEXT` lookups depend on who calls
//! (`RTLD_NEXT` searches after the caller's object), so they jump to the real `dlsym` with the
//! caller's return address still on the stack: no frame of this library is left between them.
//! That jump is written in assembly, for x86-64 (the only architecture ROCm supports).

use crate::real::{self, HipError, HipStream, Real};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicPtr, Ordering};

/// How many runtimes can have bound interposers; lookups in a further one get its own functions
/// (uncached, as without the preload).
const BOUND_RUNTIMES: usize = 4;

/// The runtimes interposers were bound to, by slot; filled once each, never cleared (a forked
/// child has them loaded too).
static RUNTIMES: [AtomicPtr<Real>; BOUND_RUNTIMES] = [const { AtomicPtr::new(std::ptr::null_mut()) }; BOUND_RUNTIMES];

/// The interposers bound to each slot of [`RUNTIMES`].
const BOUND: [fn(Name) -> *mut c_void; BOUND_RUNTIMES] = [bound::<0>, bound::<1>, bound::<2>, bound::<3>];

/// `dlsym`: `RTLD_DEFAULT` (0) and `RTLD_NEXT` (-1) go to the real one by a jump, so that it sees
/// the caller's return address; a handle goes to [`in_handle`], also by a jump.
///
/// # Safety
/// The C library's contract for `dlsym`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "test rdi, rdi",
        "je 2f",
        "cmp rdi, -1",
        "je 2f",
        "jmp {in_handle}",
        "2:",
        // The real dlsym, found on first use: the arguments kept across the call, the stack
        // aligned to 16 bytes at it.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {real}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "je 3f",
        "jmp rax",
        // No dlsym behind this one: nothing can be found.
        "3:",
        "ret",
        in_handle = sym in_handle,
        real = sym real_dlsym_address,
    )
}

/// The real `dlsym`'s address, or null when there is none.
extern "C" fn real_dlsym_address() -> *mut c_void {
    real::real_dlsym().map_or(std::ptr::null_mut(), |f| f as *mut c_void)
}

/// `dlsym(handle, name)` for a `dlopen` handle: the real answer, or an interposer bound to the
/// runtime when the answer is one of the five functions of the HIP runtime the handle reaches.
/// The real `dlsym` is called from here, so an auditor (`LD_AUDIT`) sees this library as the
/// caller; for a handle nothing else depends on the caller.
///
/// # Safety
/// The C library's contract for `dlsym`.
unsafe extern "C" fn in_handle(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(dlsym) = real::real_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: the caller's arguments, under dlsym's contract.
    let found = unsafe { dlsym(handle, name) };
    if found.is_null() || name.is_null() {
        return found;
    }
    // SAFETY: a non-null name dlsym found something for is NUL-terminated; the handle is live.
    catch_unwind(AssertUnwindSafe(|| unsafe { bind(handle, CStr::from_ptr(name), found) })).unwrap_or(found)
}

/// # Safety
/// `handle` is a live `dlopen` handle.
unsafe fn bind(handle: *mut c_void, name: &CStr, found: *mut c_void) -> *mut c_void {
    let Some(which) = Name::named(name) else { return found };
    // Found in a scope that holds this library (the program's handle): already an interposer.
    if found == which.interposer() {
        return found;
    }
    // SAFETY: live handle (the caller's contract).
    let Some(real) = (unsafe { Real::from(handle) }) else { return found };
    if which.real_function(&real) != found {
        return found;
    }
    match claim(real) {
        Some(slot) => BOUND[slot](which),
        None => found,
    }
}

/// The slot of `real`'s runtime in [`RUNTIMES`], taking a free one the first time; `None` when
/// every slot holds another runtime.
fn claim(real: Real) -> Option<usize> {
    for (slot, cell) in RUNTIMES.iter().enumerate() {
        let mut current = cell.load(Ordering::Acquire);
        if current.is_null() {
            let fresh = Box::into_raw(Box::new(real));
            match cell.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(slot),
                Err(winner) => {
                    // SAFETY: `fresh` was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    current = winner;
                }
            }
        }
        // SAFETY: a non-null value is a leaked, never freed `Real`.
        if unsafe { &*current }.same(&real) {
            return Some(slot);
        }
    }
    None
}

/// The runtime of slot `S` (always filled before an interposer of the slot is handed out).
fn runtime<const S: usize>() -> Option<Real> {
    // SAFETY: a non-null value is a leaked, never freed `Real`.
    unsafe { RUNTIMES[S].load(Ordering::Acquire).as_ref() }.copied()
}

/// The five names the preload interposes.
#[derive(Clone, Copy)]
enum Name {
    Create,
    CreateWithFlags,
    CreateWithPriority,
    Destroy,
    Reset,
}

impl Name {
    fn named(name: &CStr) -> Option<Name> {
        Some(match name.to_bytes() {
            b"hipStreamCreate" => Name::Create,
            b"hipStreamCreateWithFlags" => Name::CreateWithFlags,
            b"hipStreamCreateWithPriority" => Name::CreateWithPriority,
            b"hipStreamDestroy" => Name::Destroy,
            b"hipDeviceReset" => Name::Reset,
            _ => return None,
        })
    }

    /// The runtime's own function of this name.
    fn real_function(self, real: &Real) -> *mut c_void {
        match self {
            Name::Create => real.create as *mut c_void,
            Name::CreateWithFlags => real.create_with_flags as *mut c_void,
            Name::CreateWithPriority => real.create_with_priority as *mut c_void,
            Name::Destroy => real.destroy as *mut c_void,
            Name::Reset => real.reset as *mut c_void,
        }
    }

    /// The exported interposer of this name.
    fn interposer(self) -> *mut c_void {
        match self {
            Name::Create => crate::hipStreamCreate as *mut c_void,
            Name::CreateWithFlags => crate::hipStreamCreateWithFlags as *mut c_void,
            Name::CreateWithPriority => crate::hipStreamCreateWithPriority as *mut c_void,
            Name::Destroy => crate::hipStreamDestroy as *mut c_void,
            Name::Reset => crate::hipDeviceReset as *mut c_void,
        }
    }
}

/// The interposer of `name` bound to slot `S`.
fn bound<const S: usize>(name: Name) -> *mut c_void {
    match name {
        Name::Create => create::<S> as *mut c_void,
        Name::CreateWithFlags => create_with_flags::<S> as *mut c_void,
        Name::CreateWithPriority => create_with_priority::<S> as *mut c_void,
        Name::Destroy => destroy::<S> as *mut c_void,
        Name::Reset => reset::<S> as *mut c_void,
    }
}

/// # Safety
/// HIP's contract for `hipStreamCreate`.
unsafe extern "C" fn create<const S: usize>(stream: *mut HipStream) -> HipError {
    // SAFETY: the caller's arguments, under HIP's contract.
    unsafe { crate::stream_create(runtime::<S>(), stream) }
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithFlags`.
unsafe extern "C" fn create_with_flags<const S: usize>(stream: *mut HipStream, flags: c_uint) -> HipError {
    // SAFETY: the caller's arguments, under HIP's contract.
    unsafe { crate::stream_create_with_flags(runtime::<S>(), stream, flags) }
}

/// # Safety
/// HIP's contract for `hipStreamCreateWithPriority`.
unsafe extern "C" fn create_with_priority<const S: usize>(stream: *mut HipStream, flags: c_uint, priority: c_int) -> HipError {
    // SAFETY: the caller's arguments, under HIP's contract.
    unsafe { crate::stream_create_with_priority(runtime::<S>(), stream, flags, priority) }
}

/// # Safety
/// HIP's contract for `hipStreamDestroy`.
unsafe extern "C" fn destroy<const S: usize>(stream: HipStream) -> HipError {
    // SAFETY: the caller's argument, under HIP's contract.
    unsafe { crate::stream_destroy(runtime::<S>(), stream) }
}

/// # Safety
/// HIP's contract for `hipDeviceReset`.
unsafe extern "C" fn reset<const S: usize>() -> HipError {
    // SAFETY: HIP's contract, no arguments.
    unsafe { crate::device_reset(runtime::<S>()) }
}
