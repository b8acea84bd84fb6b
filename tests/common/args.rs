//! Arguments of the five test kernels: as values ([`Arg`], which the C ABI's `rcb_kernel_arg`
//! lists are built from) and packed into the blob the kernels read ([`pack`]).

/// One argument of a test kernel.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A device address (`RCB_ARG_DEVICE_PTR` in the C ABI).
    Ptr(u64),
    U32(u32),
    U64(u64),
    F32(f32),
}

impl Arg {
    /// The value's bytes, in the machine's order.
    pub fn bytes(self) -> Vec<u8> {
        match self {
            Arg::Ptr(v) | Arg::U64(v) => v.to_ne_bytes().to_vec(),
            Arg::U32(v) => v.to_ne_bytes().to_vec(),
            Arg::F32(v) => v.to_ne_bytes().to_vec(),
        }
    }
}

/// The blob the kernels read: each argument at the next multiple of its size, no tail padding
/// (the packing rule `rcb_kernel_arg` documents).
pub fn pack(args: &[Arg]) -> Vec<u8> {
    let mut blob = Vec::new();
    for a in args {
        let bytes = a.bytes();
        blob.resize(blob.len().next_multiple_of(bytes.len()), 0);
        blob.extend(bytes);
    }
    blob
}

/// `rcb_test_fill_u32(dst, value, n)`: `dst[i] = value` for `i < n`.
pub fn fill(dst: u64, value: u32, n: u64) -> [Arg; 3] {
    [Arg::Ptr(dst), Arg::U32(value), Arg::U64(n)]
}

/// `rcb_test_axpy_f32(y, x, a, n)`: `y[i] += a * x[i]` for `i < n`.
pub fn axpy(y: u64, x: u64, a: f32, n: u64) -> [Arg; 4] {
    [Arg::Ptr(y), Arg::Ptr(x), Arg::F32(a), Arg::U64(n)]
}

/// `rcb_test_add_f32(out, x, y, n)`: `out[i] = x[i] + y[i]` for `i < n`.
pub fn add(out: u64, x: u64, y: u64, n: u64) -> [Arg; 4] {
    [Arg::Ptr(out), Arg::Ptr(x), Arg::Ptr(y), Arg::U64(n)]
}

/// `rcb_test_copy_u8(dst, src, n)`: `n` bytes from `src` to `dst`.
pub fn copy(dst: u64, src: u64, n: u64) -> [Arg; 3] {
    [Arg::Ptr(dst), Arg::Ptr(src), Arg::U64(n)]
}

/// `rcb_test_sleep(microseconds)`: keeps the stream busy that long.
pub fn sleep(microseconds: u64) -> [Arg; 1] {
    [Arg::U64(microseconds)]
}

/// `rcb_test_distance_u64(out, begin, end)`: `*out = end - begin`, neither pointer read.
pub fn distance(out: u64, begin: u64, end: u64) -> [Arg; 3] {
    [Arg::Ptr(out), Arg::Ptr(begin), Arg::Ptr(end)]
}
