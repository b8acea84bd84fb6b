//! Shared by the command-buffer tests (`cmdbuf`, `cmdbuf_property`, `cmdbuf_xla`, `concurrency`,
//! `flatten`, `trace_cache`): the C ABI wrapped just enough to write graphs of the test kernels in
//! a line each, on top of the common kit.
#![allow(dead_code)]

use crate::common::{self, Arg, TestKernels, last_error, ok};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Function, Runtime, Stream};
use std::ffi::c_void;
use std::ptr::null_mut;

/// Elements of a test buffer, and its size in bytes.
pub const N: usize = 64;
pub const BYTES: u64 = (N * 4) as u64;

/// `offset, offset + 1, ...`: N distinct values, so a misplaced element shows.
pub fn iota(offset: f32) -> Vec<f32> {
    (0..N).map(|i| i as f32 + offset).collect()
}

pub struct Gpu {
    pub rt: &'static dyn Runtime,
    pub k: TestKernels,
    pub stream: Stream,
}

pub fn gpu() -> Option<Gpu> {
    let rt = common::runtime()?;
    let k = common::kernels(rt, 0);
    let stream = rt.stream_create(0, 1, 0).expect("stream");
    Some(Gpu { rt, k, stream })
}

impl Gpu {
    pub fn sync(&self) {
        self.rt.stream_synchronize(self.stream).expect("synchronize");
    }

    pub fn upload(&self, values: &[f32]) -> u64 {
        common::upload_f32(self.rt, 0, values)
    }

    /// A buffer holding `values`, followed by as many bytes again that a test lists in no table:
    /// no listed allocation can begin where this one ends. A real runtime packs small
    /// allocations end to end, and a kernel's pointer given by address at one allocation's base
    /// where another ends may come from either (`rcb_allocation`).
    pub fn upload_apart(&self, values: &[f32]) -> u64 {
        let p = common::upload_f32(self.rt, 0, &[values, values].concat());
        self.write(p, values);
        p
    }

    pub fn write(&self, ptr: u64, values: &[f32]) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.rt.direct().copy_to_device(ptr, &bytes).expect("write");
    }

    pub fn read(&self, ptr: u64, n: usize) -> Vec<f32> {
        common::download_f32(self.rt, ptr, n)
    }

    pub fn read_bytes(&self, ptr: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.rt.direct().copy_from_device(&mut b, ptr).expect("read");
        b
    }

    /// A new buffer holding a copy of `bytes` bytes at `old` (a moved allocation).
    pub fn moved_copy(&self, old: u64, bytes: usize) -> u64 {
        let data = self.read_bytes(old, bytes);
        let p = self.rt.malloc(0, bytes.max(1)).expect("malloc");
        self.rt.direct().copy_to_device(p, &data).expect("copy");
        p
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = self.rt.stream_destroy(self.stream);
    }
}

/// Runs `body` with a launch of `f` over `n` elements; the argument values live for the call.
pub fn with_launch<R>(f: Function, n: u64, args: &[Arg], body: impl FnOnce(&rcb_kernel_launch) -> R) -> R {
    let values: Vec<Vec<u8>> = args.iter().map(|a| a.bytes()).collect();
    let raw: Vec<(&[u8], u32)> = args
        .iter()
        .zip(&values)
        .map(|(a, v)| (v.as_slice(), if matches!(a, Arg::Ptr(_)) { RCB_ARG_DEVICE_PTR } else { RCB_ARG_VALUE }))
        .collect();
    with_raw_launch(f, n, &raw, body)
}

/// Runs `body` with a launch of `f` over `n` elements whose arguments are raw bytes with an
/// `RCB_ARG_*` kind each (any size, e.g. one `RCB_ARG_SCAN` argument for a whole struct).
pub fn with_raw_launch<R>(f: Function, n: u64, args: &[(&[u8], u32)], body: impl FnOnce(&rcb_kernel_launch) -> R) -> R {
    let raw: Vec<rcb_kernel_arg> = args
        .iter()
        .map(|(bytes, kind)| rcb_kernel_arg { value: bytes.as_ptr() as *const c_void, size: bytes.len() as u32, kind: *kind })
        .collect();
    let launch = rcb_kernel_launch {
        function: f.0,
        grid: [n.div_ceil(256).max(1) as u32, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
        args: raw.as_ptr(),
        num_args: raw.len(),
        ..Default::default()
    };
    body(&launch)
}

/// A command buffer freed on drop.
pub struct Cb(pub *mut rcb_cmdbuf);

pub fn table(allocs: &[(u64, u64)]) -> Vec<rcb_allocation> {
    allocs.iter().map(|&(base, size)| rcb_allocation { base, size }).collect()
}

impl Cb {
    pub fn primary() -> Cb {
        let mut cb = null_mut();
        ok(unsafe { rcb_cmdbuf_new(0, &mut cb) });
        Cb(cb)
    }

    pub fn nested() -> Cb {
        let mut cb = null_mut();
        ok(unsafe { rcb_cmdbuf_new_nested(0, &mut cb) });
        Cb(cb)
    }

    pub fn set_allocs(&self, allocs: &[(u64, u64)]) {
        let t = table(allocs);
        ok(unsafe { rcb_cmdbuf_set_allocations(self.0, t.as_ptr(), t.len()) });
    }

    pub fn try_kernel(&self, deps: &[rcb_node], f: Function, n: u64, args: &[Arg]) -> Result<rcb_node, rcb_status> {
        let mut node = 0;
        let s = with_launch(f, n, args, |l| unsafe { rcb_cmdbuf_add_kernel(self.0, deps.as_ptr(), deps.len(), l, &mut node) });
        if s == RCB_OK { Ok(node) } else { Err(s) }
    }

    pub fn kernel(&self, deps: &[rcb_node], f: Function, n: u64, args: &[Arg]) -> rcb_node {
        self.try_kernel(deps, f, n, args).unwrap_or_else(|s| panic!("add_kernel: {s}: {}", last_error()))
    }

    pub fn raw_kernel(&self, deps: &[rcb_node], f: Function, n: u64, args: &[(&[u8], u32)]) -> rcb_node {
        let mut node = 0;
        ok(with_raw_launch(f, n, args, |l| unsafe { rcb_cmdbuf_add_kernel(self.0, deps.as_ptr(), deps.len(), l, &mut node) }));
        node
    }

    pub fn update_raw_kernel(&self, node: rcb_node, f: Function, n: u64, args: &[(&[u8], u32)]) {
        ok(with_raw_launch(f, n, args, |l| unsafe { rcb_cmdbuf_update_kernel(self.0, node, l) }));
    }

    pub fn update_kernel(&self, node: rcb_node, f: Function, n: u64, args: &[Arg]) {
        ok(with_launch(f, n, args, |l| unsafe { rcb_cmdbuf_update_kernel(self.0, node, l) }));
    }

    pub fn memcpy(&self, deps: &[rcb_node], dst: u64, src: u64, bytes: u64) -> rcb_node {
        let mut node = 0;
        ok(unsafe { rcb_cmdbuf_add_memcpy_d2d(self.0, deps.as_ptr(), deps.len(), dst, src, bytes, &mut node) });
        node
    }

    pub fn memset(&self, deps: &[rcb_node], dst: u64, pattern: u32, element_size: u32, count: u64) -> rcb_node {
        let mut node = 0;
        ok(unsafe { rcb_cmdbuf_add_memset(self.0, deps.as_ptr(), deps.len(), dst, pattern, element_size, count, &mut node) });
        node
    }

    pub fn finalize(&self) {
        ok(unsafe { rcb_cmdbuf_finalize(self.0) });
    }

    pub fn begin_update(&self) {
        ok(unsafe { rcb_cmdbuf_begin_update(self.0) });
    }

    pub fn launch(&self, gpu: &Gpu) {
        ok(unsafe { rcb_cmdbuf_launch(self.0, gpu.stream.0) });
        gpu.sync();
    }

    pub fn update_allocs(&self, allocs: &[(u64, u64)]) -> rcb_update_report {
        let t = table(allocs);
        let mut report = rcb_update_report::default();
        ok(unsafe { rcb_cmdbuf_update_allocations(self.0, t.as_ptr(), t.len(), &mut report) });
        report
    }

    /// `rcb_cmdbuf_move_allocations` with `(index, new base)` pairs; the status and the report.
    pub fn try_move_allocs(&self, moves: &[(u64, u64)]) -> Result<rcb_update_report, rcb_status> {
        let m: Vec<rcb_allocation_move> = moves.iter().map(|&(index, base)| rcb_allocation_move { index, base }).collect();
        let mut report = rcb_update_report::default();
        let s = unsafe { rcb_cmdbuf_move_allocations(self.0, m.as_ptr(), m.len(), &mut report) };
        if s == RCB_OK { Ok(report) } else { Err(s) }
    }

    pub fn move_allocs(&self, moves: &[(u64, u64)]) -> rcb_update_report {
        self.try_move_allocs(moves).unwrap_or_else(|s| panic!("move_allocations: {s}: {}", last_error()))
    }

    pub fn sites(&self) -> usize {
        let mut n = 0;
        ok(unsafe { rcb_cmdbuf_site_count(self.0, &mut n) });
        n
    }

    pub fn memory(&self) -> rcb_memory_use {
        let mut m = rcb_memory_use::default();
        ok(unsafe { rcb_cmdbuf_memory_use(self.0, &mut m) });
        m
    }
}

impl Drop for Cb {
    fn drop(&mut self) {
        unsafe { rcb_cmdbuf_free(self.0) };
    }
}
