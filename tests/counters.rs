//! The counters through their C ABI: what each call of a command buffer and of a trace cache
//! adds, per command buffer and to the process totals, fallbacks by reason, resets, and the
//! struct-size contract. Every test holds `common::serial()`: the totals are process-wide.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use common::{args, fails, ok, pack};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Function, Runtime, Stream};
use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};

const N: u64 = 64;
const BYTES: u64 = N * 4;

fn blank() -> rcb_counters {
    rcb_counters::default()
}

fn counters_of(cb: *const rcb_cmdbuf) -> rcb_counters {
    let mut c = blank();
    ok(unsafe { rcb_counters_get(cb, &mut c) });
    assert_eq!(c.version, RCB_COUNTERS_VERSION);
    assert_eq!(c.fallbacks_total, c.fallbacks.iter().sum::<u64>());
    c
}

fn totals() -> rcb_counters {
    counters_of(null())
}

/// fill(a) → fill(b) → memcpy(c ← b), over three allocations of `BYTES`.
fn three_nodes(gpu: &Gpu) -> (Cb, [u64; 3], [rcb_node; 3]) {
    let bufs = [0; 3].map(|_| gpu.upload(&[0.0; N as usize]));
    let cb = Cb::primary();
    cb.set_allocs(&bufs.map(|b| (b, BYTES)));
    let k = gpu.k.fill_u32;
    let n0 = cb.kernel(&[], k, N, &args::fill(bufs[0], 1, N));
    let n1 = cb.kernel(&[n0], k, N, &args::fill(bufs[1], 2, N));
    let n2 = cb.memcpy(&[n1], bufs[2], bufs[1], BYTES);
    (cb, bufs, [n0, n1, n2])
}

#[test]
fn a_command_buffer_counts_its_instantiation_pushes_updates_and_fallbacks() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let (cb, bufs, nodes) = three_nodes(&gpu);
    let c = counters_of(cb.0);
    assert_eq!((c.instantiations, c.exec_param_pushes, c.captures, c.fallbacks_total), (0, 0, 0, 0), "nothing before finalize");
    cb.finalize();
    assert_eq!(counters_of(cb.0).instantiations, 1);

    // b moves: the second fill and the memcpy (its source) are pushed, one allocation moved.
    let b2 = gpu.moved_copy(bufs[1], BYTES as usize);
    let r = cb.move_allocs(&[(1, b2)]);
    assert_eq!((r.updated_nodes, r.needs_rerecord), (2, 0));
    let after_move = counters_of(cb.0);
    assert_eq!((after_move.exec_param_pushes, after_move.address_updates, after_move.instantiations), (2, 1, 1));
    assert!(after_move.exec_param_push_bytes > 0);

    // Moving b back pushes the same two nodes: the same estimate again.
    cb.move_allocs(&[(1, bufs[1])]);
    let c = counters_of(cb.0);
    assert_eq!(c.exec_param_pushes, 4);
    assert_eq!(c.exec_param_push_bytes, 2 * after_move.exec_param_push_bytes);

    // An update in which nothing moved pushes nothing and is no address update.
    let r = cb.move_allocs(&[(1, bufs[1])]);
    assert_eq!(r.updated_nodes, 0);
    assert_eq!((counters_of(cb.0).exec_param_pushes, counters_of(cb.0).address_updates), (4, 2));

    // Re-recording a node pushes it once.
    cb.begin_update();
    cb.update_kernel(nodes[0], gpu.k.fill_u32, N, &args::fill(bufs[0], 7, N));
    cb.finalize();
    assert_eq!(counters_of(cb.0).exec_param_pushes, 5);

    // A table of another shape: a fallback, by reason, and nothing pushed.
    let r = cb.update_allocs(&[(bufs[0], BYTES)]);
    assert_eq!(r.needs_rerecord, 1);
    let c = counters_of(cb.0);
    assert_eq!((c.fallbacks[RCB_FALLBACK_SHAPE_CHANGED as usize], c.fallbacks_total, c.exec_param_pushes), (1, 1, 5));
    assert_eq!((c.captures, c.reinstantiations, c.relocations, c.trace_hits), (0, 0, 0, 0));

    ok(unsafe { rcb_counters_reset(cb.0) });
    let c = counters_of(cb.0);
    assert_eq!((c.instantiations, c.exec_param_pushes, c.exec_param_push_bytes, c.fallbacks_total), (0, 0, 0, 0));
}

#[test]
fn a_capture_and_a_refused_move_are_counted() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N as usize]);
    let cb = Cb::primary();
    cb.set_allocs(&[(x, BYTES)]);
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    // Read during the capture: allowed, and the capture is already counted.
    assert_eq!(counters_of(cb.0).captures, 1);
    common::run(gpu.rt, gpu.k.fill_u32, &args::fill(x, 3, N), gpu.stream);
    ok(unsafe { rcb_cmdbuf_capture_end(cb.0) });
    cb.finalize();
    // A captured graph's addresses are not patch sites: the move is refused.
    let x2 = gpu.moved_copy(x, BYTES as usize);
    assert_eq!(cb.move_allocs(&[(0, x2)]).needs_rerecord, 1);
    let c = counters_of(cb.0);
    assert_eq!((c.captures, c.instantiations, c.exec_param_pushes), (1, 1, 0));
    assert_eq!((c.fallbacks[RCB_FALLBACK_OPAQUE_REFERENCE as usize], c.fallbacks_total), (1, 1));
}

struct Fill {
    rt: &'static dyn Runtime,
    f: Function,
    x: u64,
}

unsafe extern "C" fn trace_fill(user_data: *mut c_void, stream: *mut c_void) -> i32 {
    let w = unsafe { &*(user_data as *const Fill) };
    let blob = pack(&args::fill(w.x, 5, N));
    if w.rt.direct().launch_kernel(&common::launch(w.f, &blob), Stream(stream)).is_ok() { 0 } else { -1 }
}

#[test]
fn process_totals_add_up_command_buffers_freed_ones_and_trace_caches() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    ok(unsafe { rcb_counters_reset(null_mut()) });
    let zero = totals();
    assert_eq!((zero.instantiations, zero.exec_param_pushes, zero.captures, zero.fallbacks_total), (0, 0, 0, 0));

    let (a, a_bufs, _) = three_nodes(&gpu);
    a.finalize();
    a.move_allocs(&[(0, gpu.moved_copy(a_bufs[0], BYTES as usize))]);
    let a_counts = counters_of(a.0);
    {
        let (b, _, _) = three_nodes(&gpu);
        b.finalize();
        assert_eq!(b.update_allocs(&[]).needs_rerecord, 1);
    }
    let t = totals();
    assert_eq!(t.instantiations, 2, "both, the freed one included");
    assert_eq!((t.exec_param_pushes, t.exec_param_push_bytes), (a_counts.exec_param_pushes, a_counts.exec_param_push_bytes));
    assert_eq!((t.fallbacks[RCB_FALLBACK_SHAPE_CHANGED as usize], t.address_updates), (1, 1));

    // A trace cache: one capture, then a hit, then a relocation (no capture).
    let mut tc = null_mut();
    ok(unsafe { rcb_trace_cache_new(4, &mut tc) });
    let x = gpu.upload(&[0.0; N as usize]);
    let x2 = gpu.upload(&[0.0; N as usize]);
    let fill = Fill { rt: gpu.rt, f: gpu.k.fill_u32, x };
    let get = |base: u64| {
        let allocs = table(&[(base, BYTES)]);
        let (mut g, mut outcome) = (null_mut(), u32::MAX);
        let user = &fill as *const Fill as *mut c_void;
        ok(unsafe { rcb_trace_cache_get_or_trace(tc, gpu.stream.0, allocs.as_ptr(), 1, Some(trace_fill), user, &mut g, &mut outcome) });
        outcome
    };
    assert_eq!([get(x), get(x), get(x2)], [RCB_TRACE_TRACED, RCB_TRACE_HIT, RCB_TRACE_RELOCATED]);
    ok(unsafe { rcb_trace_cache_free(tc) });
    let t = totals();
    assert_eq!((t.captures, t.trace_hits, t.relocations), (1, 1, 1));
    assert_eq!(counters_of(a.0).captures, 0, "a command buffer counts only its own");

    ok(unsafe { rcb_counters_reset(null_mut()) });
    assert_eq!(totals().instantiations, 0);
    assert_eq!(counters_of(a.0).instantiations, 1, "resetting the totals leaves each command buffer's own");
}

#[test]
fn the_struct_size_is_checked_and_reasons_are_named() {
    let _serial = common::serial();
    let mut c = blank();
    c.struct_size = RCB_COUNTERS_V1_SIZE - 1;
    fails(unsafe { rcb_counters_get(null(), &mut c) }, RCB_STATUS_INVALID_ARGUMENT, "struct_size");
    assert_eq!(c.version, 0, "nothing written");
    // A caller whose struct is larger (a later header) gets version 1, told in struct_size how
    // many bytes were written, and nothing past them.
    let mut big = [0xAAAA_AAAA_AAAA_AAAA_u64; 64];
    big[0] = 512;
    ok(unsafe { rcb_counters_get(null(), big.as_mut_ptr().cast()) });
    assert_eq!((big[0] & 0xffff_ffff, big[0] >> 32), (u64::from(RCB_COUNTERS_V1_SIZE), u64::from(RCB_COUNTERS_VERSION)));
    assert!(big[RCB_COUNTERS_V1_SIZE as usize / 8..].iter().all(|&w| w == 0xAAAA_AAAA_AAAA_AAAA), "nothing past version 1");
    fails(unsafe { rcb_counters_get(null(), null_mut()) }, RCB_STATUS_NULL_ARGUMENT, "out");
    let mut c = blank();
    fails(unsafe { rcb_counters_get(0x10 as *const rcb_cmdbuf, &mut c) }, RCB_STATUS_INVALID_HANDLE, "rcb_cmdbuf");
    let name = |r: u32| unsafe { CStr::from_ptr(rcb_fallback_reason_name(r)) }.to_str().unwrap().to_owned();
    assert_eq!(name(RCB_FALLBACK_OPAQUE_REFERENCE), "opaque_reference");
    assert_eq!(name(RCB_FALLBACK_REINSTANTIATE_BLOCKED), "reinstantiate_blocked");
    assert!(rcb_fallback_reason_name(RCB_FALLBACK_REASON_SLOTS as u32).is_null());
}
