//! Scenario `trace-cache`: (1) hit latency of `rcb_trace_cache_get_or_trace` with 16 entries of
//! 48 allocations each, looking up the least recently used entry every time (the longest scan);
//! (2) a miss of a known shape (relocation in place) vs a miss that captures, vs the plain
//! capture that XLA does today. The traced command is 16 `rcb_test_add_f32` kernels over the 48
//! allocations of its key (each named by a node, as relocation requires).

use crate::flatten::capture;
use crate::table::{Table, median_ns, ratio, time};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Function, Runtime, Stream};
use std::ffi::c_void;
use std::ptr::null_mut;

const ENTRIES: usize = 16;
const ALLOCATIONS: usize = 3 * KERNELS;
const KERNELS: usize = 16;

type R<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

struct Trace {
    rt: &'static dyn Runtime,
    f: Function,
    bases: Vec<u64>,
}

unsafe extern "C" fn trace(user_data: *mut c_void, stream: *mut c_void) -> i32 {
    // SAFETY: `user_data` is the `Trace` passed by `get`.
    let t = unsafe { &*(user_data as *const Trace) };
    match issue(t, Stream(stream)) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// Issues the kernels on a stream the cache is capturing.
fn issue(t: &Trace, stream: Stream) -> R<()> {
    for k in 0..KERNELS {
        let args: Vec<u8> = [t.bases[3 * k], t.bases[3 * k + 1], t.bases[3 * k + 2], 16].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let p = rocm_cmdbuf::runtime::KernelParams { function: t.f, grid: [1, 1, 1], block: [16, 1, 1], shared_mem_bytes: 0, args: &args };
        t.rt.direct().launch_kernel(&p, stream).map_err(err)?;
    }
    Ok(())
}

struct Key {
    trace: Trace,
    table: Vec<rcb_allocation>,
}

fn key(rt: &'static dyn Runtime, f: Function, size: u64) -> R<Key> {
    let bases: Vec<u64> = (0..ALLOCATIONS).map(|_| rt.malloc(0, size as usize).map_err(err)).collect::<R<_>>()?;
    let table = bases.iter().map(|&base| rcb_allocation { base, size }).collect();
    Ok(Key { trace: Trace { rt, f, bases }, table })
}

fn get(tc: *mut rcb_trace_cache, stream: Stream, k: &Key) -> R<u32> {
    let (mut g, mut outcome) = (null_mut(), 0);
    // SAFETY: a live cache, a table of k.table.len() entries, user data that outlives the call.
    let s = unsafe {
        rcb_trace_cache_get_or_trace(
            tc,
            stream.0,
            k.table.as_ptr(),
            k.table.len(),
            Some(trace),
            &k.trace as *const Trace as *mut c_void,
            &mut g,
            &mut outcome,
        )
    };
    if s == RCB_OK { Ok(outcome) } else { Err(format!("rcb_trace_cache_get_or_trace: status {s}")) }
}

fn cache(capacity: usize) -> R<*mut rcb_trace_cache> {
    let mut tc = null_mut();
    // SAFETY: a valid out-pointer.
    let s = unsafe { rcb_trace_cache_new(capacity, &mut tc) };
    if s == RCB_OK { Ok(tc) } else { Err(format!("rcb_trace_cache_new: status {s}")) }
}

/// Median of `get` over `keys` in turn, checking every outcome.
fn time_gets(runs: usize, tc: *mut rcb_trace_cache, stream: Stream, keys: &[&Key], expect: u32) -> R<f64> {
    let mut i = 0;
    let mut failure = None;
    let ns = median_ns(runs, || {
        match get(tc, stream, keys[i % keys.len()]) {
            Ok(o) if o == expect => {}
            Ok(o) => {
                failure.get_or_insert(format!("outcome {o}, expected {expect}"));
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
        i += 1;
    });
    failure.map_or(Ok(ns), Err)
}

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let f = crate::kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let runs = if quick { 5 } else { 101 };

    // (1) 16 entries of distinct shapes (sizes), so that none relocates into another.
    let keys: Vec<Key> = (0..ENTRIES).map(|j| key(rt, f, 64 * (j as u64 + 1))).collect::<R<_>>()?;
    let tc = cache(ENTRIES)?;
    for k in &keys {
        get(tc, stream, k)?;
    }
    let refs: Vec<&Key> = keys.iter().collect();
    // In insertion order, each lookup finds its key last (least recently used).
    let hit = time_gets(runs.max(ENTRIES * 8), tc, stream, &refs, RCB_TRACE_HIT);

    // (2) one shape, two placements.
    let (a, b) = (&keys[0], key(rt, f, 64)?);
    let single = cache(1)?;
    get(single, stream, a)?;
    let relocate = time_gets(runs, single, stream, &[&b, a], RCB_TRACE_RELOCATED);
    let other = &keys[1];
    let traced = time_gets(runs, single, stream, &[other, a], RCB_TRACE_TRACED);
    let mut failure = None;
    let mut flip = false;
    let plain = median_ns(runs, || {
        flip = !flip;
        let bases = if flip { &a.trace.bases } else { &b.trace.bases };
        match capture(rt, f, stream, &bases[..3 * KERNELS]).and_then(|g| rt.graph_destroy(g).map_err(err)) {
            Ok(()) => {}
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    });
    // SAFETY: handles from `cache`, freed once.
    unsafe {
        rcb_trace_cache_free(tc);
        rcb_trace_cache_free(single);
    }
    for k in keys.iter().chain([&b]) {
        for &p in &k.trace.bases {
            rt.free(p).map_err(err)?;
        }
    }
    rt.stream_destroy(stream).map_err(err)?;
    let (hit, relocate, traced) = (hit?, relocate?, traced?);
    if let Some(e) = failure {
        return Err(e);
    }
    let backend = rt.info().backend.name();
    let mut t = Table::new(
        format!("trace-cache: hit, {ENTRIES} entries × {ALLOCATIONS} allocations, least recently used key, on {backend}"),
        &["lookup", "median"],
    );
    t.row(vec!["hit (C ABI call included)".into(), time(hit)]);
    t.print();
    let mut t = Table::new(
        format!("trace-cache: a miss, {KERNELS} kernels over {ALLOCATIONS} allocations, on {backend}"),
        &["path", "median", "plain capture / this"],
    );
    t.row(vec!["plain capture (begin + trace + end; today's XLA)".into(), time(plain), ratio(plain, plain)]);
    t.row(vec!["miss → TRACED (capture + flatten)".into(), time(traced), ratio(plain, traced)]);
    t.row(vec!["miss → RELOCATED (patch in place)".into(), time(relocate), ratio(plain, relocate)]);
    t.print();
    Ok(())
}
