//! The built-in kernels (the first six exist in CUDA C for the NVIDIA tests; the last two,
//! `rcb_test_indirect_fill_u32` and `rcb_test_wide_args_u64`, only here) and the packing of launch arguments into a kernarg
//! buffer (natural alignment, no tail padding).

use std::ffi::{CStr, c_void};

use crate::error::{HipResult, ILLEGAL_ADDRESS, INVALID_VALUE};
use crate::memory;

pub struct Kernel {
    /// The name `hipModuleGetFunction` finds and `hipKernelNameRef` reports.
    pub name: &'static CStr,
    /// Parameter sizes in declaration order.
    params: &'static [usize],
    body: fn(i32, &Args) -> HipResult,
}

pub static KERNELS: [Kernel; 8] = [
    Kernel { name: c"rcb_test_fill_u32", params: &[8, 4, 8], body: fill_u32 },
    Kernel { name: c"rcb_test_axpy_f32", params: &[8, 8, 4, 8], body: axpy_f32 },
    Kernel { name: c"rcb_test_add_f32", params: &[8, 8, 8, 8], body: add_f32 },
    Kernel { name: c"rcb_test_copy_u8", params: &[8, 8, 8], body: copy_u8 },
    Kernel { name: c"rcb_test_sleep", params: &[8], body: sleep },
    Kernel { name: c"rcb_test_distance_u64", params: &[8, 8, 8], body: distance_u64 },
    Kernel { name: c"rcb_test_indirect_fill_u32", params: &[8, 4, 8], body: indirect_fill_u32 },
    Kernel { name: c"rcb_test_wide_args_u64", params: &[8; 1 + WIDE_WORDS], body: wide_args_u64 },
];

/// Words after the output pointer of `rcb_test_wide_args_u64`: 32 776 bytes of arguments in all,
/// more than any real runtime takes (CUDA's and HIP's limit is 32 764).
const WIDE_WORDS: usize = 4096;

pub fn find(name: &str) -> Option<&'static Kernel> {
    KERNELS.iter().find(|k| k.name.to_bytes() == name.as_bytes())
}

const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;
const PARAM_END: usize = 3;

pub struct Args<'a> {
    bytes: &'a [u8],
    offsets: Vec<usize>,
}

impl Args<'_> {
    fn raw<const N: usize>(&self, i: usize) -> [u8; N] {
        self.bytes[self.offsets[i]..self.offsets[i] + N].try_into().expect("sized by descriptor")
    }
    fn u64(&self, i: usize) -> u64 {
        u64::from_ne_bytes(self.raw(i))
    }
    fn u32(&self, i: usize) -> u32 {
        u32::from_ne_bytes(self.raw(i))
    }
    fn f32(&self, i: usize) -> f32 {
        f32::from_ne_bytes(self.raw(i))
    }
}

impl Kernel {
    /// Offsets of each parameter and the packed size (end of the last parameter).
    pub fn layout(&self) -> (Vec<usize>, usize) {
        let mut offs = Vec::new();
        let mut at = 0usize;
        for &s in self.params {
            at = at.div_ceil(s) * s;
            offs.push(at);
            at += s;
        }
        (offs, at)
    }

    /// Copies argument values from either launch style into an owned kernarg buffer.
    ///
    /// # Safety
    /// `kernel_params` is null or holds one pointer per parameter, each to the parameter's bytes;
    /// `extra` is null or a launch-parameter list ended by END.
    pub unsafe fn pack(&self, kernel_params: *mut *mut c_void, extra: *mut *mut c_void) -> HipResult<Vec<u8>> {
        let (offs, size) = self.layout();
        match (kernel_params.is_null(), extra.is_null()) {
            (false, false) => Err(INVALID_VALUE),
            (true, true) if self.params.is_empty() => Ok(Vec::new()),
            (true, true) => Err(INVALID_VALUE),
            (false, true) => {
                let mut buf = vec![0u8; size];
                for (i, (&off, &len)) in offs.iter().zip(self.params).enumerate() {
                    // SAFETY: the caller passes one pointer per parameter, each to `len` bytes.
                    let p = unsafe { *kernel_params.add(i) } as *const u8;
                    if p.is_null() {
                        return Err(INVALID_VALUE);
                    }
                    // SAFETY: `p` points at the parameter's `len` bytes (above), and `layout` sized
                    // `buf` to hold every parameter at its offset.
                    unsafe { std::ptr::copy_nonoverlapping(p, buf[off..].as_mut_ptr(), len) };
                }
                Ok(buf)
            }
            (true, false) => {
                // SAFETY: `extra` is a HIP_LAUNCH_PARAM list; it is read only up to its END key.
                let (ptr, given) = unsafe { parse_extra(extra)? };
                if given < size {
                    return Err(INVALID_VALUE);
                }
                let mut buf = vec![0u8; size];
                // SAFETY: the list's buffer holds the `given` bytes its SIZE says, at least `size`.
                unsafe { std::ptr::copy_nonoverlapping(ptr, buf.as_mut_ptr(), size) };
                Ok(buf)
            }
        }
    }

    pub fn run(&self, dev: i32, args: &[u8]) -> HipResult {
        let (offsets, size) = self.layout();
        if args.len() != size {
            return Err(INVALID_VALUE);
        }
        (self.body)(dev, &Args { bytes: args, offsets })
    }
}

/// Accepts {PTR, buf, SIZE, &size, END} with the two keys in either order.
///
/// # Safety
/// As the `extra` of [`Kernel::pack`].
unsafe fn parse_extra(extra: *mut *mut c_void) -> HipResult<(*const u8, usize)> {
    let (mut buf, mut size) = (None, None);
    for pair in 0..3 {
        // SAFETY: every key before END is followed by its value.
        let key = unsafe { *extra.add(2 * pair) } as usize;
        if key == PARAM_END {
            break;
        }
        // SAFETY: a key that is not END is followed by its value.
        let val = unsafe { *extra.add(2 * pair + 1) };
        match key {
            PARAM_BUFFER_POINTER => buf = Some(val as *const u8),
            // SAFETY: a non-null SIZE value points at a `size_t`, as HIP requires.
            PARAM_BUFFER_SIZE if !val.is_null() => size = Some(unsafe { *(val as *const usize) }),
            _ => return Err(INVALID_VALUE),
        }
    }
    match (buf, size) {
        (Some(b), Some(s)) if !b.is_null() || s == 0 => Ok((b, s)),
        _ => Err(INVALID_VALUE),
    }
}

/// Byte length of `n` elements of `elem` bytes; an impossible size is an illegal access.
fn span(n: u64, elem: u64) -> HipResult<usize> {
    n.checked_mul(elem).and_then(|b| usize::try_from(b).ok()).ok_or(ILLEGAL_ADDRESS)
}

fn read_f32(m: &memory::Mem, dev: i32, addr: u64, len: usize) -> HipResult<Vec<f32>> {
    let mut b = vec![0u8; len];
    m.read(dev, addr, &mut b)?;
    Ok(b.chunks_exact(4).map(|c| f32::from_ne_bytes(c.try_into().expect("4 bytes"))).collect())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn fill_u32(dev: i32, a: &Args) -> HipResult {
    let (dst, value, len) = (a.u64(0), a.u32(1), span(a.u64(2), 4)?);
    let mut m = memory::lock();
    m.check(dev, dst, len, true)?;
    let data: Vec<u8> = value.to_ne_bytes().iter().copied().cycle().take(len).collect();
    m.write(dev, dst, &data)
}

fn axpy_f32(dev: i32, a: &Args) -> HipResult {
    let (y, x, alpha, len) = (a.u64(0), a.u64(1), a.f32(2), span(a.u64(3), 4)?);
    let mut m = memory::lock();
    m.check(dev, y, len, true)?;
    m.check(dev, x, len, false)?;
    let mut yv = read_f32(&m, dev, y, len)?;
    let xv = read_f32(&m, dev, x, len)?;
    yv.iter_mut().zip(&xv).for_each(|(y, x)| *y += alpha * x);
    m.write(dev, y, &f32_bytes(&yv))
}

fn add_f32(dev: i32, a: &Args) -> HipResult {
    let (out, x, y, len) = (a.u64(0), a.u64(1), a.u64(2), span(a.u64(3), 4)?);
    let mut m = memory::lock();
    m.check(dev, out, len, true)?;
    m.check(dev, x, len, false)?;
    m.check(dev, y, len, false)?;
    let xv = read_f32(&m, dev, x, len)?;
    let yv = read_f32(&m, dev, y, len)?;
    let sum: Vec<f32> = xv.iter().zip(&yv).map(|(a, b)| a + b).collect();
    m.write(dev, out, &f32_bytes(&sum))
}

fn copy_u8(dev: i32, a: &Args) -> HipResult {
    let (dst, src, len) = (a.u64(0), a.u64(1), span(a.u64(2), 1)?);
    let mut m = memory::lock();
    m.check(dev, dst, len, true)?;
    m.check(dev, src, len, false)?;
    let mut b = vec![0u8; len];
    m.read(dev, src, &mut b)?;
    m.write(dev, dst, &b)
}

/// `*out = end - begin` (wrapping): a range given as two pointers, neither dereferenced, so
/// that a pointer's value shows in the results even where nothing may be read (the end of a range
/// one past its allocation).
fn distance_u64(dev: i32, a: &Args) -> HipResult {
    let (out, begin, end) = (a.u64(0), a.u64(1), a.u64(2));
    let mut m = memory::lock();
    m.check(dev, out, 8, true)?;
    m.write(dev, out, &end.wrapping_sub(begin).to_ne_bytes())
}

/// `rcb_test_wide_args_u64(u64* out, u64 words[4096])`: `*out` = the last word, so that a test
/// sees the whole oversized argument buffer arrive.
fn wide_args_u64(dev: i32, a: &Args) -> HipResult {
    let out = a.u64(0);
    let mut m = memory::lock();
    m.check(dev, out, 8, true)?;
    m.write(dev, out, &a.u64(WIDE_WORDS).to_ne_bytes())
}

/// `rcb_test_indirect_fill_u32(const u64* slot, u32 value, u64 n)`: fills `n` words at the
/// address stored in `*slot` with `value`, as a collective finds its buffers in a work
/// descriptor in device memory: the buffer's address is in no argument.
fn indirect_fill_u32(dev: i32, a: &Args) -> HipResult {
    let (slot, value, len) = (a.u64(0), a.u32(1), span(a.u64(2), 4)?);
    let mut m = memory::lock();
    m.check(dev, slot, 8, false)?;
    let mut word = [0u8; 8];
    m.read(dev, slot, &mut word)?;
    let dst = u64::from_ne_bytes(word);
    m.check(dev, dst, len, true)?;
    let data: Vec<u8> = value.to_ne_bytes().iter().copied().cycle().take(len).collect();
    m.write(dev, dst, &data)
}

fn sleep(_dev: i32, a: &Args) -> HipResult {
    std::thread::sleep(std::time::Duration::from_micros(a.u64(0)));
    Ok(())
}
