//! The real HIP functions behind the interposers, found on first use.
//!
//! `dlsym(RTLD_NEXT, ...)` finds them when HIP is in the global scope (linked by the program or
//! `dlopen`ed with `RTLD_GLOBAL`). A HIP runtime `dlopen`ed with `RTLD_LOCAL` (Python extension
//! modules) is invisible to `RTLD_NEXT`; it is found by its soname with `RTLD_NOLOAD`, which
//! never loads anything new. Nothing here allocates: the table lives in a `OnceLock`.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

pub type HipError = c_int;
pub type HipStream = *mut c_void;

pub const HIP_SUCCESS: HipError = 0;
/// What an interposer returns when HIP's own functions cannot be found.
pub const HIP_ERROR_SYMBOL_NOT_FOUND: HipError = 302;
const HIP_ERROR_NOT_READY: HipError = 600;

type Create = unsafe extern "C" fn(*mut HipStream) -> HipError;
type CreateWithFlags = unsafe extern "C" fn(*mut HipStream, c_uint) -> HipError;
type CreateWithPriority = unsafe extern "C" fn(*mut HipStream, c_uint, c_int) -> HipError;
type OnStream = unsafe extern "C" fn(HipStream) -> HipError;
type GetFlags = unsafe extern "C" fn(HipStream, *mut c_uint) -> HipError;
type GetPriority = unsafe extern "C" fn(HipStream, *mut c_int) -> HipError;
type GetDevice = unsafe extern "C" fn(*mut c_int) -> HipError;
type PriorityRange = unsafe extern "C" fn(*mut c_int, *mut c_int) -> HipError;

pub struct Real {
    pub create: Create,
    pub create_with_flags: CreateWithFlags,
    pub create_with_priority: CreateWithPriority,
    pub destroy: OnStream,
    query: OnStream,
    get_flags: GetFlags,
    get_priority: GetPriority,
    get_device: GetDevice,
    priority_range: PriorityRange,
}

const RTLD_LAZY: c_int = 0x1;
const RTLD_NOLOAD: c_int = 0x4;
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
const SONAMES: [&CStr; 4] = [c"libamdhip64.so.7", c"libamdhip64.so.6", c"libamdhip64.so.5", c"libamdhip64.so"];

unsafe extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
}

static REAL: OnceLock<Real> = OnceLock::new();

/// The real functions, or `None` while no HIP runtime with all of them is loaded (tried again on
/// the next call, so a runtime loaded later is still found).
pub fn get() -> Option<&'static Real> {
    if let Some(real) = REAL.get() {
        return Some(real);
    }
    // SAFETY: RTLD_NEXT is a valid pseudo-handle.
    let found = unsafe { Real::from(RTLD_NEXT) }.or_else(|| {
        SONAMES.iter().find_map(|name| {
            // SAFETY: RTLD_NOLOAD only returns a library that is already loaded.
            let handle = unsafe { dlopen(name.as_ptr(), RTLD_LAZY | RTLD_NOLOAD) };
            // SAFETY: a live handle from dlopen.
            if handle.is_null() { None } else { unsafe { Real::from(handle) } }
        })
    })?;
    Some(REAL.get_or_init(|| found))
}

impl Real {
    /// # Safety
    /// `handle` is `RTLD_NEXT` or a live `dlopen` handle of a HIP runtime.
    unsafe fn from(handle: *mut c_void) -> Option<Real> {
        macro_rules! sym {
            ($name:literal as $ty:ty) => {{
                // SAFETY: the name is NUL-terminated; a non-null result is HIP's function of
                // that name, whose signature the field's type spells.
                let p = unsafe { dlsym(handle, concat!($name, "\0").as_ptr() as *const c_char) };
                if p.is_null() {
                    return None;
                }
                // SAFETY: a non-null function address of the type the field's signature spells
                // (see above); function and data pointers have one size on every target we build.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
            }};
        }
        Some(Real {
            create: sym!("hipStreamCreate" as Create),
            create_with_flags: sym!("hipStreamCreateWithFlags" as CreateWithFlags),
            create_with_priority: sym!("hipStreamCreateWithPriority" as CreateWithPriority),
            destroy: sym!("hipStreamDestroy" as OnStream),
            query: sym!("hipStreamQuery" as OnStream),
            get_flags: sym!("hipStreamGetFlags" as GetFlags),
            get_priority: sym!("hipStreamGetPriority" as GetPriority),
            get_device: sym!("hipGetDevice" as GetDevice),
            priority_range: sym!("hipDeviceGetStreamPriorityRange" as PriorityRange),
        })
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

    fn flags(&self, stream: usize) -> Result<u32, HipError> {
        let mut flags = 0;
        // SAFETY: valid out-pointer.
        check(unsafe { (self.get_flags)(stream as HipStream, &mut flags) }).map(|()| flags)
    }

    fn priority(&self, stream: usize) -> Result<i32, HipError> {
        let mut priority = 0;
        // SAFETY: valid out-pointer.
        check(unsafe { (self.get_priority)(stream as HipStream, &mut priority) }).map(|()| priority)
    }
}
