//! The `extra` launch-parameter list through which both runtimes pass one packed argument
//! buffer: `{BUFFER_POINTER, p, BUFFER_SIZE, &n, END}`, the two keys in either order (CUDA hands
//! its own copy back with SIZE first). HIP and CUDA differ only in the key values (HIP ends the
//! list with 3, CUDA with 0), so both backends build and parse it here and pass their keys.

use std::ffi::c_void;

/// One runtime's key values.
pub struct Keys {
    pub buffer_pointer: usize,
    pub buffer_size: usize,
    pub end: usize,
}

/// Calls `f` with the packed arguments as a five-entry list (pointer first, as ROCm 5.2
/// requires; the size exact, as CUDA requires), or with null for a kernel without arguments. The
/// list and the size it points at live until `f` returns.
pub fn with_list<R>(args: &[u8], keys: &Keys, f: impl FnOnce(*mut *mut c_void) -> R) -> R {
    if args.is_empty() {
        return f(std::ptr::null_mut());
    }
    let mut size = args.len();
    let mut list: [*mut c_void; 5] = [
        keys.buffer_pointer as *mut c_void,
        // The runtimes only read the buffer; the list's type is what makes the pointer `*mut`.
        args.as_ptr().cast_mut().cast(),
        keys.buffer_size as *mut c_void,
        (&raw mut size).cast(),
        keys.end as *mut c_void,
    ];
    f(list.as_mut_ptr())
}

/// A well-formed list has one pointer and one size before END; a list with more pairs is not
/// one the runtimes build, and reading on would only go further past what they allocated.
const MAX_PAIRS: usize = 2;

/// Copies the argument buffer out of a launch-parameter list. The list ends at `keys.end` or at
/// a null key; an unknown key means the list is something else (a blob no runtime documents)
/// and the arguments are unknown.
///
/// Each entry is read only once the entries before it say it exists: a key before its value,
/// and nothing after END, after an unknown key, or after `MAX_PAIRS` pairs. The longest read is
/// therefore the five entries of a well-formed list, never one past its END.
///
/// # Safety
/// `extra` must point to a list whose entries are readable up to its END (or up to its first
/// unknown key, or its first `2 * MAX_PAIRS + 1` entries, whichever comes first); a SIZE value
/// that is not null must point to a `size_t`, and the buffer must hold that many bytes.
pub unsafe fn parse(extra: *const *mut c_void, keys: &Keys) -> Result<Vec<u8>, String> {
    let (mut buffer, mut size): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut at = 0;
    loop {
        // SAFETY: entry `at` is the first one or follows a value whose known key promised it.
        let key = unsafe { *extra.add(at) } as usize;
        if key == keys.end || key == 0 {
            return match (buffer.is_null(), size) {
                (_, Some(0)) => Ok(Vec::new()),
                // SAFETY: the caller promises `n` readable bytes at `buffer`.
                (false, Some(n)) => Ok(unsafe { std::slice::from_raw_parts(buffer, n) }.to_vec()),
                _ => Err(String::from("the kernel node's extra list has no buffer or no size")),
            };
        }
        if key != keys.buffer_pointer && key != keys.buffer_size {
            return Err(format!("the kernel node's extra is opaque (key {key:#x} at entry {at}), not a launch-parameter list"));
        }
        if at == 2 * MAX_PAIRS {
            return Err(format!("the kernel node's extra list has no END after {MAX_PAIRS} pairs"));
        }
        // SAFETY: a known key is followed by its value.
        let value = unsafe { *extra.add(at + 1) };
        if key == keys.buffer_pointer {
            buffer = value as *const u8;
        } else if !value.is_null() {
            // SAFETY: the caller promises a non-null SIZE value points at a size_t.
            size = Some(unsafe { *(value as *const usize) });
        }
        at += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    type P = *mut c_void;

    const HIP: Keys = Keys { buffer_pointer: 0x1, buffer_size: 0x2, end: 0x3 };
    const CUDA: Keys = Keys { buffer_pointer: 0x1, buffer_size: 0x2, end: 0x0 };

    /// Two anonymous pages, the second PROT_NONE: a list copied to the very end of the first
    /// faults (SIGSEGV, failing the test run) on any read past its last entry. Stable Rust has
    /// no sanitizer or Miri here; the guard page catches the read on any build.
    struct GuardedList {
        base: *mut c_void,
        page: usize,
    }

    impl GuardedList {
        fn new() -> Self {
            // SAFETY: plain queries and a fresh private mapping that nothing else uses.
            unsafe {
                let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
                let base =
                    libc::mmap(null_mut(), 2 * page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
                assert_ne!(base, libc::MAP_FAILED, "mmap");
                assert_eq!(libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE), 0, "mprotect");
                GuardedList { base, page }
            }
        }

        /// Copies `entries` so that the last one ends where the guard page starts.
        fn place(&self, entries: &[P]) -> *const P {
            let bytes = std::mem::size_of_val(entries);
            assert!(bytes <= self.page);
            // SAFETY: the destination lies inside the first, writable page.
            unsafe {
                let at = self.base.cast::<u8>().add(self.page - bytes).cast::<P>();
                std::ptr::copy_nonoverlapping(entries.as_ptr(), at, entries.len());
                at
            }
        }
    }

    impl Drop for GuardedList {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`.
            unsafe { libc::munmap(self.base, 2 * self.page) };
        }
    }

    fn list(first: (usize, P), second: (usize, P), end: usize) -> [P; 5] {
        [first.0 as P, first.1, second.0 as P, second.1, end as P]
    }

    #[test]
    fn reads_a_five_entry_list_in_either_key_order_and_nothing_past_its_end() {
        let guard = GuardedList::new();
        let args = [7u8, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0];
        let mut size = args.len();
        let (ptr, len) = (args.as_ptr().cast_mut().cast::<c_void>(), &mut size as *mut usize as P);
        for keys in [&HIP, &CUDA] {
            let pointer_first = list((keys.buffer_pointer, ptr), (keys.buffer_size, len), keys.end);
            let size_first = list((keys.buffer_size, len), (keys.buffer_pointer, ptr), keys.end);
            for entries in [pointer_first, size_first] {
                let extra = guard.place(&entries);
                // SAFETY: the guard placed a well-formed list (or one the parser must stop in); a read past it faults.
                assert_eq!(unsafe { parse(extra, keys) }.unwrap(), args);
            }
        }
    }

    #[test]
    fn stops_at_an_early_end_a_null_key_or_an_unknown_key() {
        let guard = GuardedList::new();
        let args = [1u8; 8];
        let mut size = 8usize;
        let (ptr, len) = (args.as_ptr().cast_mut().cast::<c_void>(), &mut size as *mut usize as P);
        // END right after the size: the size alone says nothing of the buffer.
        let extra = guard.place(&[HIP.buffer_size as P, len, HIP.end as P]);
        // SAFETY: the guard placed a well-formed list (or one the parser must stop in); a read past it faults.
        assert!(unsafe { parse(extra, &HIP) }.unwrap_err().contains("no buffer"));
        // A size of 0 needs no buffer.
        let mut zero = 0usize;
        let extra = guard.place(&[HIP.buffer_size as P, &mut zero as *mut usize as P, 0 as P]);
        // SAFETY: the guard placed a well-formed list (or one the parser must stop in); a read past it faults.
        assert_eq!(unsafe { parse(extra, &HIP) }.unwrap(), Vec::<u8>::new());
        // HIP's END (3) is an unknown key to CUDA; its value is never read.
        let extra = guard.place(&[CUDA.buffer_pointer as P, ptr, HIP.end as P]);
        // SAFETY: the guard placed a well-formed list (or one the parser must stop in); a read past it faults.
        let e = unsafe { parse(extra, &CUDA) }.unwrap_err();
        assert!(e.contains("opaque") && e.contains("0x3"), "{e}");
        // A blob whose first word is no key.
        let extra = guard.place(&[0x9 as P]);
        // SAFETY: the guard placed a well-formed list (or one the parser must stop in); a read past it faults.
        assert!(unsafe { parse(extra, &HIP) }.unwrap_err().contains("0x9"));
    }

    #[test]
    fn a_list_without_end_is_refused_at_its_third_key_without_reading_its_value() {
        let guard = GuardedList::new();
        let args = [1u8; 8];
        let mut size = 8usize;
        let (ptr, len) = (args.as_ptr().cast_mut().cast::<c_void>(), &mut size as *mut usize as P);
        for keys in [&HIP, &CUDA] {
            let extra = guard.place(&[keys.buffer_pointer as P, ptr, keys.buffer_size as P, len, keys.buffer_pointer as P]);
            // SAFETY: the guard placed a well-formed list (or one the parser must stop in); a read past it faults.
            let e = unsafe { parse(extra, keys) }.unwrap_err();
            assert!(e.contains("no END"), "{e}");
        }
    }
}
