//! The real HIP functions behind the interposers: the ones the caller would have reached
//! without this library.
//!
//! `dlsym(RTLD_NEXT, ...)` finds them when a HIP runtime is in the global scope (linked by the
//! program or `dlopen`ed with `RTLD_GLOBAL`): every caller binds to that one. A runtime
//! `dlopen`ed with `RTLD_LOCAL` (a Python extension module and its dependencies) is invisible
//! there, and a process may hold more than one such runtime, under any file name: then the
//! functions are looked up in the scope of the object that made the call (found by unwinding to
//! the first frame outside this library), which holds the runtime it was linked against. When
//! that finds none either (a call that reached us by a tail call from an `RTLD_LOCAL` object,
//! whose frame is gone), the runtime the cache serves, or one loaded under a known name.
//!
//! Every lookup here goes through the real `dlsym` ([`real_dlsym`]): this library exports a
//! `dlsym` of its own (`lookup.rs`), which its own calls must not reach.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

pub type HipError = c_int;
pub type HipStream = *mut c_void;

pub const HIP_SUCCESS: HipError = 0;
/// What an interposer returns when no HIP runtime is loaded at all (where a program without the
/// preload could not have called the function either).
pub const HIP_ERROR_SYMBOL_NOT_FOUND: HipError = 302;
/// Plain HIP's answer to a destroy of a stream that is not live.
pub const HIP_ERROR_INVALID_HANDLE: HipError = 400;
const HIP_ERROR_NOT_READY: HipError = 600;

type Create = unsafe extern "C" fn(*mut HipStream) -> HipError;
type CreateWithFlags = unsafe extern "C" fn(*mut HipStream, c_uint) -> HipError;
type CreateWithPriority = unsafe extern "C" fn(*mut HipStream, c_uint, c_int) -> HipError;
type OnStream = unsafe extern "C" fn(HipStream) -> HipError;
type GetDevice = unsafe extern "C" fn(*mut c_int) -> HipError;
type PriorityRange = unsafe extern "C" fn(*mut c_int, *mut c_int) -> HipError;
type Reset = unsafe extern "C" fn() -> HipError;

/// One HIP runtime's functions. Two tables are the same runtime when their
/// `hipStreamCreateWithPriority` is the same function ([`Real::id`]).
#[derive(Clone, Copy)]
pub struct Real {
    pub create: Create,
    pub create_with_flags: CreateWithFlags,
    pub create_with_priority: CreateWithPriority,
    pub destroy: OnStream,
    pub reset: Reset,
    query: OnStream,
    get_device: GetDevice,
    priority_range: PriorityRange,
}

const RTLD_LAZY: c_int = 0x1;
const RTLD_NOLOAD: c_int = 0x4;
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

/// The names a HIP runtime is loaded under when a caller's own scope does not say which (as the
/// library's loader tries them).
const KNOWN_SONAMES: [&CStr; 4] = [c"libamdhip64.so.7", c"libamdhip64.so.6", c"libamdhip64.so.5", c"libamdhip64.so"];

pub type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

#[repr(C)]
struct DlInfo {
    fname: *const c_char,
    fbase: *mut c_void,
    sname: *const c_char,
    saddr: *mut c_void,
}

/// libgcc's unwinder (every Rust program on this target links it).
#[repr(C)]
struct UnwindContext {
    _private: [u8; 0],
}
const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

unsafe extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlclose(handle: *mut c_void) -> c_int;
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    fn _Unwind_Backtrace(trace: unsafe extern "C" fn(*mut UnwindContext, *mut c_void) -> c_int, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(context: *mut UnwindContext) -> usize;
}

/// The runtime in the global scope, once found (never cleared: a global runtime stays loaded).
static GLOBAL: AtomicPtr<Real> = AtomicPtr::new(std::ptr::null_mut());
/// The runtime the cache serves, for callers whose own runtime cannot be found (kept in a forked
/// child: the runtime is loaded there too).
static OWNER: AtomicPtr<Real> = AtomicPtr::new(std::ptr::null_mut());
/// The `dlsym` after this library's, once found.
static DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The `dlsym` this library's own `dlsym` stands in front of: the C library's (or the next
/// preloaded interposer's). Found with `dlvsym`, which nothing here interposes, under the version
/// of glibc 2.34 and later, else under the one before (where it lives in libdl).
pub fn real_dlsym() -> Option<Dlsym> {
    let mut found = DLSYM.load(Ordering::Acquire);
    if found.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: NUL-terminated names; RTLD_NEXT is a valid pseudo-handle.
            found = unsafe { dlvsym(RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !found.is_null() {
                break;
            }
        }
        // A failed try must not leave its message to the caller's next dlerror().
        // SAFETY: no arguments; the message is not read.
        unsafe { dlerror() };
        if found.is_null() {
            return None;
        }
        DLSYM.store(found, Ordering::Release);
    }
    // SAFETY: the C library's dlsym, whose signature `Dlsym` spells.
    Some(unsafe { std::mem::transmute::<*mut c_void, Dlsym>(found) })
}

/// Remembers the runtime the cache serves (see [`fallback`]).
pub fn remember_owner(real: Real) {
    let fresh = Box::into_raw(Box::new(real));
    // The previous one (a forked child's new owner replaces the parent's) is leaked: another
    // thread may be reading it.
    OWNER.store(fresh, Ordering::Release);
}

/// The runtime for a caller whose own could not be found: the one the cache serves, if it is
/// still loaded, else one loaded under a known name; `None` when no HIP runtime is loaded.
pub fn fallback() -> Option<Real> {
    // SAFETY: a non-null value is a leaked, never freed `Real`.
    let owner = unsafe { OWNER.load(Ordering::Acquire).as_ref() };
    owner.and_then(|owner| loaded_object_of(owner.create_with_priority as usize)).or_else(|| {
        // SAFETY: NUL-terminated names.
        KNOWN_SONAMES.iter().find_map(|name| unsafe { loaded(name.as_ptr()) })
    })
}

/// The real functions for the caller of the interposer: those of the global scope, else those of
/// the calling object's scope; `None` when neither has a complete HIP runtime.
///
/// Must be called directly from an interposer (the frames above it are this library's).
#[inline(never)]
pub fn for_caller() -> Option<Real> {
    let global = GLOBAL.load(Ordering::Acquire);
    // SAFETY: a non-null value is a leaked, never freed `Real`.
    if let Some(real) = unsafe { global.as_ref() } {
        return Some(*real);
    }
    // SAFETY: RTLD_NEXT is a valid pseudo-handle.
    if let Some(real) = unsafe { Real::from(RTLD_NEXT) } {
        // Published without a lock or a `OnceLock`, which a fork could leave held in the child;
        // a racing thread's copy is leaked (one small table, once).
        let _ = GLOBAL.compare_exchange(std::ptr::null_mut(), Box::into_raw(Box::new(real)), Ordering::AcqRel, Ordering::Acquire);
        return Some(real);
    }
    caller_scope()
}

/// The HIP functions visible from the object that called the interposer.
fn caller_scope() -> Option<Real> {
    loaded_object_of(caller_address()?)
}

/// The HIP functions visible from the loaded object that holds `address`; `None` when no
/// loaded object does (an unloaded runtime's address) or its scope has no complete runtime.
fn loaded_object_of(address: usize) -> Option<Real> {
    let mut info = DlInfo { fname: std::ptr::null(), fbase: std::ptr::null_mut(), sname: std::ptr::null(), saddr: std::ptr::null_mut() };
    // SAFETY: valid out-pointer; any address may be asked about.
    if unsafe { dladdr(address as *const c_void, &mut info) } == 0 || info.fname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated name from dladdr.
    unsafe { loaded(info.fname) }
}

/// The HIP functions visible from the object loaded under `name`, if one is.
///
/// # Safety
/// `name` is NUL-terminated.
unsafe fn loaded(name: *const c_char) -> Option<Real> {
    // SAFETY: RTLD_NOLOAD only opens what is loaded already.
    let handle = unsafe { dlopen(name, RTLD_LAZY | RTLD_NOLOAD) };
    if handle.is_null() {
        // What dlopen left for dlerror() is ours, not the caller's.
        // SAFETY: no arguments; the message is not read.
        unsafe { dlerror() };
        return None;
    }
    // SAFETY: a live handle; its lookup scope is the object and its dependencies.
    let real = unsafe { Real::from(handle) };
    // SAFETY: the reference RTLD_NOLOAD took; the object stays loaded by its own users.
    unsafe { dlclose(handle) };
    // The object may see this library's own functions (the program, whose scope is the global
    // one): never call ourselves.
    real.filter(|r| r.create as usize != crate::hipStreamCreate as *const () as usize)
}

/// The return address of the first frame outside this library.
fn caller_address() -> Option<usize> {
    struct Walk {
        own_base: *mut c_void,
        found: Option<usize>,
    }
    unsafe extern "C" fn frame(context: *mut UnwindContext, arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the `Walk` of `caller_address`, alive during the backtrace.
        let walk = unsafe { &mut *arg.cast::<Walk>() };
        // SAFETY: a context the unwinder passes to this callback.
        let ip = unsafe { _Unwind_GetIP(context) };
        if ip == 0 {
            return URC_END_OF_STACK;
        }
        match object_base(ip - 1) {
            Some(base) if base == walk.own_base => URC_NO_REASON,
            _ => {
                walk.found = Some(ip - 1);
                URC_END_OF_STACK
            }
        }
    }
    let mut walk = Walk { own_base: object_base(crate::hipStreamCreate as *const () as usize)?, found: None };
    // SAFETY: `frame` only reads the context and writes `walk`, which outlives the call.
    unsafe { _Unwind_Backtrace(frame, (&raw mut walk).cast()) };
    walk.found
}

fn object_base(address: usize) -> Option<*mut c_void> {
    let mut info = DlInfo { fname: std::ptr::null(), fbase: std::ptr::null_mut(), sname: std::ptr::null(), saddr: std::ptr::null_mut() };
    // SAFETY: valid out-pointer; any address may be asked about.
    (unsafe { dladdr(address as *const c_void, &mut info) } != 0).then_some(info.fbase)
}

impl Real {
    /// The runtime whose functions `handle`'s lookup finds; `None` when one of them is missing.
    /// A missing one leaves nothing for the caller's next `dlerror()`.
    ///
    /// # Safety
    /// `handle` is `RTLD_NEXT` or a live `dlopen` handle.
    pub unsafe fn from(handle: *mut c_void) -> Option<Real> {
        let dlsym = real_dlsym()?;
        macro_rules! sym {
            ($name:literal as $ty:ty) => {{
                let name: &CStr = $name;
                // SAFETY: the name is NUL-terminated; a non-null result is HIP's function of
                // that name, whose signature the field's type spells.
                let p = unsafe { dlsym(handle, name.as_ptr()) };
                if p.is_null() {
                    // SAFETY: no arguments; the message is not read.
                    unsafe { dlerror() };
                    return None;
                }
                // SAFETY: a non-null function address of the type the field's signature spells
                // (see above); function and data pointers have one size on every target we build.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
            }};
        }
        Some(Real {
            create: sym!(c"hipStreamCreate" as Create),
            create_with_flags: sym!(c"hipStreamCreateWithFlags" as CreateWithFlags),
            create_with_priority: sym!(c"hipStreamCreateWithPriority" as CreateWithPriority),
            destroy: sym!(c"hipStreamDestroy" as OnStream),
            reset: sym!(c"hipDeviceReset" as Reset),
            query: sym!(c"hipStreamQuery" as OnStream),
            get_device: sym!(c"hipGetDevice" as GetDevice),
            priority_range: sym!(c"hipDeviceGetStreamPriorityRange" as PriorityRange),
        })
    }

    /// Which runtime this is.
    pub fn id(&self) -> usize {
        self.create_with_priority as usize
    }

    /// Whether every function is the same as `other`'s (a runtime loaded again at the same
    /// address may be another build).
    pub fn same(&self, other: &Real) -> bool {
        self.addresses() == other.addresses()
    }

    fn addresses(&self) -> [usize; 8] {
        [
            self.create as usize,
            self.create_with_flags as usize,
            self.create_with_priority as usize,
            self.destroy as usize,
            self.reset as usize,
            self.query as usize,
            self.get_device as usize,
            self.priority_range as usize,
        ]
    }

    pub fn current_device(&self) -> Result<c_int, HipError> {
        let mut device = 0;
        // SAFETY: valid out-pointer.
        check(unsafe { (self.get_device)(&mut device) }).map(|()| device)
    }
}

fn check(rc: HipError) -> Result<(), HipError> {
    if rc == HIP_SUCCESS { Ok(()) } else { Err(rc) }
}

/// The cache's view of HIP. Streams are keyed by address; `device` is always the calling
/// thread's current device (the interposers read it first), so the calls below need no
/// `hipSetDevice`.
impl rocm_cmdbuf_stream_pool::StreamOps for Real {
    type Stream = usize;
    type Error = HipError;

    fn priority_range(&self, _device: i32) -> Result<(i32, i32), HipError> {
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: valid out-pointers.
        check(unsafe { (self.priority_range)(&mut least, &mut greatest) }).map(|()| (least, greatest))
    }

    fn create(&self, _device: i32, flags: u32, priority: i32) -> Result<usize, HipError> {
        let mut stream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check(unsafe { (self.create_with_priority)(&mut stream, flags, priority) }).map(|()| stream as usize)
    }

    fn destroy(&self, stream: usize) -> Result<(), HipError> {
        // SAFETY: a stream this process created and no longer uses.
        check(unsafe { (self.destroy)(stream as HipStream) })
    }

    fn is_idle(&self, stream: usize) -> Result<bool, HipError> {
        // SAFETY: the pool queries only streams it holds, which are live until its own destroy.
        match unsafe { (self.query)(stream as HipStream) } {
            HIP_ERROR_NOT_READY => Ok(false),
            rc => check(rc).map(|()| true),
        }
    }
}
