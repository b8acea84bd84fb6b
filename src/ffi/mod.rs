//! The C ABI: status codes, the panic boundary, argument checks and one module per C object.
//! Nothing outside this module deals with raw pointers from C or with status codes.

// C names (`rcb_status`, `rcb_cmdbuf`) are spelled exactly as in the header.
#![allow(non_camel_case_types)]

mod cmdbuf;
mod correlator;
mod counters;
mod handle;
mod runtime;
mod status;
mod stream;
mod trace_cache;
mod unsized_abi;
mod vmm_pool;

pub use cmdbuf::*;
pub use correlator::*;
pub use counters::*;
pub use runtime::*;
pub use status::*;
pub use stream::*;
pub use trace_cache::*;
pub use vmm_pool::*;

use handle::{Handle, Place, live, locked, register, register_placed, take, take_placed, unlocked, unregister};

use crate::error::{Error, ErrorKind, Result};
use std::any::Any;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs the body of a fallible export: sets up logging, turns an error into its status code and
/// last-error message, and turns a panic into `RCB_STATUS_PANIC` so it never reaches the host.
pub(crate) fn boundary(f: impl FnOnce() -> Result<()>) -> rcb_status {
    crate::logging::init();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            clear_last_error();
            RCB_OK
        }
        Ok(Err(e)) => {
            log::debug!("{e}");
            set_last_error(&e.message);
            status::code(e.kind)
        }
        Err(payload) => {
            let message = format!("internal panic: {}", panic_text(payload.as_ref()));
            log::error!("{message}");
            set_last_error(&message);
            RCB_STATUS_PANIC
        }
    }
}

/// Runs the body of an export that cannot fail; a panic yields `fallback`.
pub(crate) fn boundary_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// A required input pointer, borrowed for the call.
///
/// # Safety
/// `p` must be NULL or point to a valid `T` for the duration of the call.
pub(crate) unsafe fn arg_ref<'a, T>(p: *const T, name: &str) -> Result<&'a T> {
    // SAFETY: non-null checked; validity is the caller's promise.
    unsafe { p.as_ref() }.ok_or_else(|| null_argument(name))
}

/// An input array of `n` elements; NULL is allowed when `n` is 0. `max` rejects absurd counts
/// before anything is read.
///
/// # Safety
/// `p` must be NULL or point to `n` valid elements for the duration of the call.
pub(crate) unsafe fn arg_slice<'a, T>(p: *const T, n: usize, name: &str, max: usize) -> Result<&'a [T]> {
    if n > max {
        return Err(Error::invalid_argument(format!("{name}: count {n} exceeds the limit of {max}")));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_argument(name));
    }
    // SAFETY: non-null, count checked; validity is the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Checks an output pointer up front, so nothing is done when it is NULL; write it with
/// [`write_out`] only once the call has succeeded.
pub(crate) fn arg_out<T>(p: *mut T, name: &str) -> Result<*mut T> {
    if p.is_null() { Err(null_argument(name)) } else { Ok(p) }
}

/// # Safety
/// `p` came from [`arg_out`] and points to writable memory for a `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, value: T) {
    // SAFETY: see above; `write` does not drop the uninitialised old value.
    unsafe { p.write(value) }
}

/// The largest `struct_size` accepted. No struct of the ABI comes near it; a larger value is a
/// `struct_size` left unset, whose bytes must not be read.
const MAX_STRUCT_SIZE: u32 = 4096;

/// A struct of the C ABI that begins with `uint32_t struct_size` (the rule in the header's
/// opening comment, written in cbindgen.toml): the caller sets the size of the struct as its
/// header declares it, and the library reads or writes only the fields within that size.
///
/// # Safety
/// The type is `#[repr(C)]`, its first field is `struct_size: u32`, and any bytes, zeros
/// included, are a valid value of it (its fields are integers, arrays of them, raw pointers and
/// `Option`s of function pointers): a caller's older struct leaves the fields it lacks at zero.
pub(crate) unsafe trait SizedStruct: Copy + Default {
    /// Its name in the header, for messages.
    const NAME: &'static str;
    /// Its size in 0.1.0, the first release with the rule: the smallest `struct_size` accepted,
    /// whatever fields are appended later.
    const MIN_SIZE: u32;
}

/// Implements [`SizedStruct`] for a struct whose size in 0.1.0 was `$min` bytes, and a `Default`
/// that is what a C caller writes (`T x = {sizeof x}`): zeros, with `struct_size` set to the
/// struct's size.
macro_rules! sized_struct {
    ($t:ident, $min:expr) => {
        // SAFETY: `$t` is a `#[repr(C)]` struct of the C ABI whose first field is
        // `struct_size: u32` (checked below) and whose fields are plain data (the contract of
        // `SizedStruct`, kept by every struct this macro is used for).
        unsafe impl $crate::ffi::SizedStruct for $t {
            const NAME: &'static str = stringify!($t);
            const MIN_SIZE: u32 = $min;
        }
        const _: () = assert!(std::mem::offset_of!($t, struct_size) == 0 && $min as usize <= size_of::<$t>());
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: zeros are a valid value of a `SizedStruct` (its contract).
                let mut value: Self = unsafe { std::mem::zeroed() };
                value.struct_size = size_of::<Self>() as u32;
                value
            }
        }
    };
}
pub(crate) use sized_struct;

/// Reads the `struct_size` of the caller's struct at `p` and checks it.
///
/// # Safety
/// `p` is non-NULL and points to at least a readable `u32`.
unsafe fn struct_size_of<T: SizedStruct>(p: *const T, name: &str) -> Result<usize> {
    // SAFETY: the first field of every sized struct, readable per the caller's promise.
    let size = unsafe { p.cast::<u32>().read_unaligned() };
    if size < T::MIN_SIZE || size > MAX_STRUCT_SIZE {
        return Err(Error::invalid_argument(format!(
            "`{name}->struct_size` is {size}; set it to sizeof({}) ({} bytes in the header of this library, {})",
            T::NAME,
            size_of::<T>(),
            env!("CARGO_PKG_VERSION")
        )));
    }
    Ok(size as usize)
}

/// A required sized input struct, copied: the fields within the caller's `struct_size`, the
/// others at their defaults (zero). Bytes of the caller's struct past this library's must be
/// zero: a field the library does not know is refused (`RCB_STATUS_UNSUPPORTED`), never ignored.
///
/// # Safety
/// `p` must be NULL or point to a struct with `struct_size` readable bytes.
pub(crate) unsafe fn arg_sized<T: SizedStruct>(p: *const T, name: &str) -> Result<T> {
    if p.is_null() {
        return Err(null_argument(name));
    }
    // SAFETY: non-NULL; the caller promises the struct.
    let size = unsafe { struct_size_of(p, name) }?;
    let known = size_of::<T>();
    let mut value = T::default();
    // SAFETY: `size` bytes are readable at `p` (the caller's promise) and `value` holds `known`;
    // any bytes are a valid value of a `SizedStruct`.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&raw mut value).cast::<u8>(), size.min(known)) };
    if size > known {
        // SAFETY: bytes `known..size` of the caller's struct, readable per its promise.
        let extra = unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(known), size - known) };
        if let Some(i) = extra.iter().position(|&b| b != 0) {
            return Err(Error::unsupported(format!(
                "`{name}`: byte {} of the caller's {size}-byte {} is set, past the {known} bytes this library ({}) \
                 knows: the program was built against a newer header and asks for what this library lacks",
                known + i,
                T::NAME,
                env!("CARGO_PKG_VERSION")
            )));
        }
    }
    Ok(value)
}

/// A sized output struct, checked up front with [`arg_out_sized`] so that nothing is done when
/// it is NULL or its `struct_size` is wrong; [`SizedOut::write`] fills it once the call has
/// succeeded.
pub(crate) struct SizedOut<T> {
    p: *mut T,
    /// The bytes to write: the caller's `struct_size`, at most this library's struct.
    len: usize,
}

/// # Safety
/// `p` must be NULL or point to a struct with `struct_size` readable and writable bytes.
pub(crate) unsafe fn arg_out_sized<T: SizedStruct>(p: *mut T, name: &str) -> Result<SizedOut<T>> {
    if p.is_null() {
        return Err(null_argument(name));
    }
    // SAFETY: non-NULL; the caller promises the struct.
    let size = unsafe { struct_size_of(p, name) }?;
    Ok(SizedOut { p, len: size.min(size_of::<T>()) })
}

impl<T: SizedStruct> SizedOut<T> {
    /// Writes the fields of `value` that fit the caller's struct, then its `struct_size`: the
    /// number of bytes written. Bytes past them (fields of a newer header) are left as they were.
    ///
    /// # Safety
    /// The struct checked by [`arg_out_sized`] is still writable.
    pub(crate) unsafe fn write(&self, value: T) {
        // SAFETY: `len` bytes fit both the caller's struct and `value`; an untyped copy, so the
        // padding of `value` may be uninitialised.
        unsafe {
            std::ptr::copy_nonoverlapping((&raw const value).cast::<u8>(), self.p.cast::<u8>(), self.len);
            self.p.cast::<u32>().write_unaligned(self.len as u32);
        }
    }
}

/// Copies `text` into the C buffer `buf` of `len` bytes as a NUL-terminated string: at most
/// `len - 1` bytes, never splitting a UTF-8 character. Nothing is written when `len` is 0.
///
/// # Safety
/// `buf` must point to at least `len` writable bytes (it may be NULL when `len` is 0).
pub(crate) unsafe fn write_c_str(text: &str, buf: *mut c_char, len: usize) {
    let Some(room) = len.checked_sub(1) else { return };
    let mut n = text.len().min(room);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller promises `len` writable bytes at `buf`, and n < len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
}

fn null_argument(name: &str) -> Error {
    Error::new(ErrorKind::NullArgument, format!("argument `{name}` is NULL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status_with_its_message() {
        let status = boundary(|| panic!("deliberate test panic {}", 42));
        assert_eq!(status, RCB_STATUS_PANIC);
        let mut buf = [0 as std::ffi::c_char; 128];
        // SAFETY: a writable buffer of the given length.
        unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the export NUL-terminated the buffer.
        let msg = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(msg, "internal panic: deliberate test panic 42");
    }

    #[test]
    fn errors_map_to_codes_and_success_clears_the_message() {
        let status = boundary(|| Err(Error::new(ErrorKind::Timeout, "slot 3 never freed")));
        assert_eq!(status, RCB_STATUS_TIMEOUT);
        // SAFETY: a null buffer with length 0 asks for the length only.
        assert_eq!(unsafe { rcb_last_error_message(std::ptr::null_mut(), 0) }, "slot 3 never freed".len());
        assert_eq!(boundary(|| Ok(())), RCB_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { rcb_last_error_message(std::ptr::null_mut(), 0) }, 0);
    }

    /// A sized struct that was 16 bytes in 0.1.0 and got `c` later.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Grown {
        struct_size: u32,
        a: u32,
        b: u64,
        c: u64,
    }
    sized_struct!(Grown, 16);

    /// A caller's struct: `len` bytes of 0xAA with `struct_size` set to `size`.
    fn caller_struct(len: usize, size: u32) -> Vec<u64> {
        let mut words = vec![0xAAAA_AAAA_AAAA_AAAA_u64; len.div_ceil(8)];
        words[0] = (words[0] & !0xFFFF_FFFF) | u64::from(size);
        words
    }

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn an_output_gets_the_fields_that_fit_the_caller_s_struct_and_says_how_much() {
        let value = Grown { a: 1, b: 2, c: 3, ..Grown::default() };
        // A caller built against the 0.1.0 header: 16 bytes, nothing written past them.
        let mut old = caller_struct(32, 16);
        // SAFETY: a writable buffer larger than the struct_size it states.
        let out = unsafe { arg_out_sized(old.as_mut_ptr().cast::<Grown>(), "report") }.unwrap();
        // SAFETY: checked above; the buffer is still alive.
        unsafe { out.write(value) };
        let b = bytes(&old);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 16, "struct_size: the bytes written");
        assert_eq!((u32::from_ne_bytes(b[4..8].try_into().unwrap()), u64::from_ne_bytes(b[8..16].try_into().unwrap())), (1, 2));
        assert!(b[16..].iter().all(|&x| x == 0xAA), "nothing past the caller's struct: {:x?}", &b[16..]);
        // A caller whose newer header has 40 bytes: its extra field is left as it was.
        let mut new = caller_struct(48, 40);
        // SAFETY: as above.
        let out = unsafe { arg_out_sized(new.as_mut_ptr().cast::<Grown>(), "report") }.unwrap();
        // SAFETY: as above.
        unsafe { out.write(value) };
        let b = bytes(&new);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 24);
        assert_eq!(u64::from_ne_bytes(b[16..24].try_into().unwrap()), 3);
        assert!(b[24..].iter().all(|&x| x == 0xAA));
    }

    #[test]
    fn an_input_takes_defaults_past_the_caller_s_struct_and_refuses_fields_it_does_not_know() {
        let mut old = caller_struct(32, 16);
        old[1] = 7;
        // SAFETY: a readable buffer larger than the struct_size it states.
        let v = unsafe { arg_sized(old.as_ptr().cast::<Grown>(), "config") }.unwrap();
        assert_eq!((v.b, v.c), (7, 0), "`c` is past the caller's struct: its default, not the 0xAA after it");
        let mut new = [0u64; 6];
        new[0] = 48;
        new[2] = 9;
        // SAFETY: 48 readable bytes.
        let v = unsafe { arg_sized(new.as_ptr().cast::<Grown>(), "config") }.unwrap();
        assert_eq!(v.c, 9, "zero bytes past the library's struct are accepted");
        new[4] = 1 << 16;
        // SAFETY: as above.
        let e = unsafe { arg_sized(new.as_ptr().cast::<Grown>(), "config") }.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unsupported);
        assert!(e.message.contains("byte 34 of the caller's 48-byte Grown is set"), "{}", e.message);
    }

    #[test]
    fn a_struct_size_that_is_no_size_of_the_struct_is_refused_before_anything_is_written() {
        for size in [0, 8, 15, MAX_STRUCT_SIZE + 1] {
            let mut s = caller_struct(32, size);
            // SAFETY: readable and writable for the 32 bytes it may state (the larger size is
            // refused before anything past the first word is read).
            let e = unsafe { arg_out_sized(s.as_mut_ptr().cast::<Grown>(), "report") }.err().unwrap();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(e.message.starts_with(&format!("`report->struct_size` is {size}; set it to sizeof(Grown) (24 bytes")), "{}", e.message);
            // SAFETY: as above.
            let e = unsafe { arg_sized(s.as_ptr().cast::<Grown>(), "config") }.unwrap_err();
            assert!(e.message.contains("`config->struct_size`"), "{}", e.message);
            assert!(bytes(&s)[4..].iter().all(|&x| x == 0xAA));
        }
        // SAFETY: NULL is what is checked.
        let e = unsafe { arg_out_sized(std::ptr::null_mut::<Grown>(), "report") }.err().unwrap();
        assert_eq!(e.kind, ErrorKind::NullArgument);
    }

    #[test]
    fn argument_checks_name_the_argument() {
        // SAFETY: null is what is being checked; nothing is read.
        let e = unsafe { arg_ref::<u32>(std::ptr::null(), "launch") }.unwrap_err();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::NullArgument, "argument `launch` is NULL"));
        // SAFETY: null is what is being checked; nothing is read.
        let e = unsafe { arg_slice::<u32>(std::ptr::null(), 3, "deps", 10) }.unwrap_err();
        assert!(e.message.contains("`deps`"));
        // SAFETY: null is what is being checked; nothing is read.
        let e = unsafe { arg_slice::<u32>(std::ptr::null(), 11, "deps", 10) }.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        // SAFETY: a null pointer with a zero count is never read.
        assert!(unsafe { arg_slice::<u32>(std::ptr::null(), 0, "deps", 10) }.unwrap().is_empty());
    }
}
