//! `rcb-demo`: the library's job in one run, through its public C ABI. Records a command
//! buffer (fill, axpy, add and a memcpy over three allocations), launches it, moves two of the
//! allocations, patches the recorded addresses in place with `rcb_cmdbuf_update_allocations`,
//! launches again and checks every result, then prints what the command buffer asked of the
//! runtime (its counters). Exits non-zero on a wrong result.
//!
//! The three buffers lie end to end in one device allocation, as an allocator packs them (the
//! CUDA driver does so with separate allocations too), so the end of `x` is the base of `y`. A
//! pointer found by value there is ambiguous, and moving `x` without `y` would be refused
//! (`needs_rerecord`); the kernel nodes therefore name each pointer's allocation
//! (`RCB_ARG_ALLOCATION`), as XLA does, and follow it. The memcpy's operands are addresses it
//! reads and writes, matched only by the allocation they lie in, so they need no name.
//!
//! Runs on the configured GPU runtime, or on the software GPU beside the executable when no GPU
//! is present.

#[path = "../rcb-bench/backend.rs"]
mod backend;
#[path = "../rcb-bench/counters.rs"]
mod counters;
#[path = "../rcb-bench/kernels.rs"]
mod kernels;

use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Function, Runtime, Stream};
use std::ffi::c_void;
use std::process::ExitCode;

const N: usize = 1024;
const BYTES: u64 = (N * 4) as u64;

fn status(s: rcb_status, what: &str) -> Result<(), String> {
    if s == RCB_OK {
        return Ok(());
    }
    let mut buf = vec![0 as std::ffi::c_char; 512];
    // SAFETY: a writable buffer of the given length.
    unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: NUL-terminated by rcb_last_error_message.
    let msg = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    Err(format!("{what} failed with status {s}: {msg}"))
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

struct Kernels {
    fill: Function,
    axpy: Function,
    add: Function,
}

enum Arg {
    /// The base of an allocation of the table, named by its index.
    Base(u64),
    Value(Vec<u8>),
}

/// Adds a kernel node; argument values live in `args` for the duration of the call.
fn add_kernel(cb: *mut rcb_cmdbuf, deps: &[rcb_node], f: Function, args: &[Arg]) -> Result<rcb_node, String> {
    let named: Vec<rcb_arg_allocation> =
        args.iter().map(|a| rcb_arg_allocation { allocation: if let Arg::Base(i) = a { *i } else { 0 }, offset: 0 }).collect();
    let raw: Vec<rcb_kernel_arg> = args
        .iter()
        .zip(&named)
        .map(|(a, n)| match a {
            Arg::Base(_) => rcb_kernel_arg {
                value: n as *const rcb_arg_allocation as *const c_void,
                size: std::mem::size_of::<rcb_arg_allocation>() as u32,
                kind: RCB_ARG_ALLOCATION,
            },
            Arg::Value(v) => rcb_kernel_arg { value: v.as_ptr() as *const c_void, size: v.len() as u32, kind: RCB_ARG_VALUE },
        })
        .collect();
    let launch = rcb_kernel_launch {
        function: f.0,
        grid: [N.div_ceil(256) as u32, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
        args: raw.as_ptr(),
        num_args: raw.len(),
        ..Default::default()
    };
    let mut node = 0;
    // SAFETY: every pointer is valid for the call.
    status(unsafe { rcb_cmdbuf_add_kernel(cb, deps.as_ptr(), deps.len(), &launch, &mut node) }, "rcb_cmdbuf_add_kernel")?;
    Ok(node)
}

fn upload(rt: &dyn Runtime, p: u64, values: &[f32]) -> Result<(), String> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    rt.direct().copy_to_device(p, &bytes).map_err(err)
}

fn download(rt: &dyn Runtime, p: u64, n: usize) -> Result<Vec<f32>, String> {
    let mut bytes = vec![0u8; n * 4];
    rt.direct().copy_from_device(&mut bytes, p).map_err(err)?;
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Indices of the buffers in the allocation table.
const X: u64 = 0;
const Y: u64 = 1;
const OUT: u64 = 2;

/// x = 1; y += 2·x; out[0..N) = x + y; out[N..2N) = out[0..N).
fn record(cb: *mut rcb_cmdbuf, k: &Kernels, out: u64) -> Result<(), String> {
    let n = (N as u64).to_ne_bytes().to_vec();
    let fill = add_kernel(cb, &[], k.fill, &[Arg::Base(X), Arg::Value(1.0f32.to_bits().to_ne_bytes().to_vec()), Arg::Value(n.clone())])?;
    let axpy =
        add_kernel(cb, &[fill], k.axpy, &[Arg::Base(Y), Arg::Base(X), Arg::Value(2.0f32.to_ne_bytes().to_vec()), Arg::Value(n.clone())])?;
    let add = add_kernel(cb, &[axpy], k.add, &[Arg::Base(OUT), Arg::Base(X), Arg::Base(Y), Arg::Value(n)])?;
    let mut copy = 0;
    // SAFETY: valid handle and out-pointer; the dependency array outlives the call.
    status(unsafe { rcb_cmdbuf_add_memcpy_d2d(cb, &add, 1, out + BYTES, out, BYTES, &mut copy) }, "rcb_cmdbuf_add_memcpy_d2d")
}

fn check(what: &str, got: &[f32], want: impl Fn(usize) -> f32) -> Result<(), String> {
    match got.iter().enumerate().find(|&(i, &v)| v != want(i)) {
        None => Ok(()),
        Some((i, v)) => Err(format!("{what}[{i}] is {v}, expected {}", want(i))),
    }
}

fn launch(cb: *mut rcb_cmdbuf, rt: &dyn Runtime, stream: Stream) -> Result<(), String> {
    // SAFETY: a live handle and stream.
    status(unsafe { rcb_cmdbuf_launch(cb, stream.0) }, "rcb_cmdbuf_launch")?;
    rt.stream_synchronize(stream).map_err(err)
}

fn demo(rt: &'static dyn Runtime, cb: *mut rcb_cmdbuf) -> Result<(), String> {
    let k = Kernels {
        fill: kernels::load(rt, "rcb_test_fill_u32")?,
        axpy: kernels::load(rt, "rcb_test_axpy_f32")?,
        add: kernels::load(rt, "rcb_test_add_f32")?,
    };
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let iota: Vec<f32> = (0..N).map(|i| i as f32).collect();
    // x, y and out packed end to end in one device allocation.
    let arena = rt.malloc(0, 4 * BYTES as usize).map_err(err)?;
    let (x, y, out) = (arena, arena + BYTES, arena + 2 * BYTES);
    upload(rt, x, &vec![0.0; N])?;
    upload(rt, y, &iota)?;
    upload(rt, out, &vec![0.0; 2 * N])?;
    let allocs =
        [rcb_allocation { base: x, size: BYTES }, rcb_allocation { base: y, size: BYTES }, rcb_allocation { base: out, size: 2 * BYTES }];
    // SAFETY: a live handle and a table of allocs.len() entries.
    status(unsafe { rcb_cmdbuf_set_allocations(cb, allocs.as_ptr(), allocs.len()) }, "rcb_cmdbuf_set_allocations")?;
    record(cb, &k, out)?;
    let (mut nodes, mut sites) = (0, 0);
    // SAFETY: a live handle and writable counts.
    unsafe {
        status(rcb_cmdbuf_node_count(cb, &mut nodes), "rcb_cmdbuf_node_count")?;
        status(rcb_cmdbuf_site_count(cb, &mut sites), "rcb_cmdbuf_site_count")?;
        status(rcb_cmdbuf_finalize(cb), "rcb_cmdbuf_finalize")?;
    }
    println!(
        "recorded {nodes} nodes (fill, axpy, add, memcpy) over 3 allocations packed end to end (x {x:#x}, y {y:#x}, out {out:#x}; \
         kernel pointers named by allocation): {sites} patch sites"
    );
    launch(cb, rt, stream)?;
    let o = download(rt, out, 2 * N)?;
    check("y", &download(rt, y, N)?, |i| i as f32 + 2.0)?;
    check("out", &o, |i| (i % N) as f32 + 3.0)?;
    println!("launch 1: y = i + 2, out = i + 3 in both halves: OK");

    // The allocator moves x and out, packed again in a new allocation (so by different deltas),
    // and leaves y: same contents, old buffers poisoned.
    let arena2 = rt.malloc(0, 3 * BYTES as usize).map_err(err)?;
    let (x2, out2) = (arena2, arena2 + BYTES);
    upload(rt, x2, &download(rt, x, N)?)?;
    upload(rt, out2, &o)?;
    rt.direct().copy_to_device(x, &vec![0xff; BYTES as usize]).map_err(err)?;
    rt.direct().copy_to_device(out, &vec![0xff; 2 * BYTES as usize]).map_err(err)?;
    let moved = [rcb_allocation { base: x2, size: BYTES }, allocs[1], rcb_allocation { base: out2, size: 2 * BYTES }];
    let mut report = rcb_update_report::default();
    // SAFETY: a live handle, a table of moved.len() entries, a writable report.
    status(unsafe { rcb_cmdbuf_update_allocations(cb, moved.as_ptr(), moved.len(), &mut report) }, "rcb_cmdbuf_update_allocations")?;
    println!(
        "moved x {x:#x} -> {x2:#x} and out {out:#x} -> {out2:#x}: {} allocations moved, {} sites patched, {} nodes updated, needs_rerecord = {}",
        report.moved_allocations, report.patched_sites, report.updated_nodes, report.needs_rerecord
    );
    if report.needs_rerecord != 0 {
        return Err(String::from("the update needed a re-record"));
    }
    launch(cb, rt, stream)?;
    check("x (new)", &download(rt, x2, N)?, |_| 1.0)?;
    check("y", &download(rt, y, N)?, |i| i as f32 + 4.0)?;
    check("out (new)", &download(rt, out2, 2 * N)?, |i| (i % N) as f32 + 5.0)?;
    let poisoned = f32::from_bits(u32::MAX);
    if download(rt, x, N)?.iter().chain(&download(rt, out, 2 * N)?).any(|v| v.to_bits() != poisoned.to_bits()) {
        return Err(String::from("an old buffer was written after the move"));
    }
    println!("launch 2: results at the new addresses (y = i + 4, out = i + 5), old buffers untouched: OK");
    counters::print("counters of the command buffer", &counters::get(cb)?);
    for p in [arena, arena2] {
        rt.free(p).map_err(err)?;
    }
    rt.stream_destroy(stream).map_err(err)
}

fn main() -> ExitCode {
    backend::probe_if_asked();
    let rt = match backend::load() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rcb-demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let info = rt.info();
    println!("rcb-demo on {} ({}, version {})", info.backend.name(), info.library, info.version);
    let mut cb = std::ptr::null_mut();
    // SAFETY: a writable out-pointer.
    if let Err(e) = status(unsafe { rcb_cmdbuf_new(0, &mut cb) }, "rcb_cmdbuf_new") {
        eprintln!("rcb-demo: {e}");
        return ExitCode::FAILURE;
    }
    let result = demo(rt, cb);
    // SAFETY: the handle from rcb_cmdbuf_new, freed once.
    unsafe { rcb_cmdbuf_free(cb) };
    match result {
        Ok(()) => {
            println!("results OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rcb-demo: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
