//! The circular VMM pool through its C ABI, on the software GPU (or a real one with
//! `RCB_BACKEND=cuda`): results per iteration, waiting only for the slot's own previous use,
//! time-outs, clean failure under fault injection, a graph that needs no update, bad input.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod common;

use common::{args, last_error, pack};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Backend, CaptureMode, DevicePtr, Exec, Graph, Stream};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

const NON_BLOCKING: u32 = 1;
/// Elements per buffer in the add tests.
const LEN: usize = 16;
const BYTES: u64 = (LEN * 4) as u64;
/// Slot buffers of the add tests: x, y, out.
const SIZES: [u64; 3] = [BYTES, BYTES, BYTES];

fn config(backing: u32, slots: u32, sizes: &[u64], timeout_ms: u32) -> rcb_vmm_pool_config {
    rcb_vmm_pool_config {
        device: 0,
        backing,
        num_slots: slots,
        num_buffers: sizes.len() as u32,
        buffer_sizes: sizes.as_ptr(),
        num_peers: 0,
        peers: null(),
        timeout_ms,
        ..Default::default()
    }
}

fn new_pool(config: &rcb_vmm_pool_config) -> *mut rcb_vmm_pool {
    let mut pool = null_mut();
    let status = unsafe { rcb_vmm_pool_new(config, &mut pool) };
    assert_eq!(status, RCB_OK, "rcb_vmm_pool_new: {}", last_error());
    pool
}

fn acquire(pool: *mut rcb_vmm_pool) -> rcb_vmm_slot {
    let mut slot = rcb_vmm_slot { iteration: u64::MAX, index: u32::MAX, num_buffers: 0, buffers: null(), ..Default::default() };
    assert_eq!(unsafe { rcb_vmm_pool_acquire(pool, &mut slot) }, RCB_OK, "acquire: {}", last_error());
    slot
}

fn buffers(slot: &rcb_vmm_slot) -> Vec<u64> {
    unsafe { std::slice::from_raw_parts(slot.buffers, slot.num_buffers as usize) }.to_vec()
}

fn release(pool: *mut rcb_vmm_pool, slot: &rcb_vmm_slot, stream: Stream) {
    assert_eq!(unsafe { rcb_vmm_pool_release(pool, slot, stream.0) }, RCB_OK, "release: {}", last_error());
}

fn copy(pool: *mut rcb_vmm_pool, stream: Stream, copies: &[rcb_vmm_copy]) {
    assert_eq!(unsafe { rcb_vmm_pool_copy(pool, stream.0, copies.as_ptr(), copies.len()) }, RCB_OK, "copy: {}", last_error());
}

fn timeline(pool: *mut rcb_vmm_pool, slot: u32) -> u64 {
    let mut v = u64::MAX;
    assert_eq!(unsafe { rcb_vmm_pool_timeline(pool, slot, &mut v) }, RCB_OK, "timeline: {}", last_error());
    v
}

fn free(pool: *mut rcb_vmm_pool) {
    assert_eq!(unsafe { rcb_vmm_pool_free(pool) }, RCB_OK, "free: {}", last_error());
}

fn inputs(i: usize) -> (Vec<f32>, Vec<f32>) {
    let x = (0..LEN).map(|j| (i * 100 + j) as f32).collect();
    let y = (0..LEN).map(|j| (i as f32) * 0.5 - j as f32).collect();
    (x, y)
}

fn expected(i: usize) -> Vec<f32> {
    let (x, y) = inputs(i);
    x.iter().zip(&y).map(|(a, b)| a + b).collect()
}

const COUNTED: [&str; 4] = ["alloc", "physical", "reservation", "mapping"];

fn live(sim: Option<&common::Hipsim>) -> Vec<u64> {
    sim.map_or_else(Vec::new, |s| COUNTED.iter().map(|k| s.live_count(k)).collect())
}

/// Per iteration: inputs copied into the slot, a sleep that keeps the GPU behind, add, the
/// live-out copied back to this iteration's own caller buffer, release.
fn run_iterations(backing: u32, slots: u32) {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let sim = common::hipsim("every allocation, physical handle, reservation and mapping freed (the runtime's live objects)");
    let k = common::kernels(rt, 0);
    let before = live(sim.as_ref());
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let pool = new_pool(&config(backing, slots, &SIZES, 30_000));
    let n = slots as usize;
    let iterations = 3 * n + 1;
    let caller: Vec<(u64, u64, u64)> = (0..iterations)
        .map(|i| {
            let (x, y) = inputs(i);
            (common::upload_f32(rt, 0, &x), common::upload_f32(rt, 0, &y), common::upload_f32(rt, 0, &[0.0; LEN]))
        })
        .collect();
    let mut seen: Vec<Option<Vec<u64>>> = vec![None; n];
    for (i, &(x, y, out)) in caller.iter().enumerate() {
        let slot = acquire(pool);
        assert_eq!((slot.iteration, slot.index as usize), (i as u64, i % n));
        let addrs = buffers(&slot);
        // Stable: the slot has the same addresses every time round.
        assert_eq!(*seen[i % n].get_or_insert_with(|| addrs.clone()), addrs);
        if i >= n {
            // The slot's previous use is finished: its timeline moved and its result is home.
            assert!(timeline(pool, slot.index) > (i - n) as u64, "iteration {i}");
            assert_eq!(
                common::download_f32(rt, caller[i - n].2, LEN),
                expected(i - n),
                "iteration {} done before {i} took its slot",
                i - n
            );
        }
        if i > 0 && (n > 1 || i < n) {
            // Acquire did not wait for the whole stream: other slots' work is still queued.
            assert!(!rt.stream_is_idle(stream).unwrap(), "iteration {i} of {n} slot(s) waited for more than its slot");
        }
        let [sx, sy, sout] = addrs[..] else { panic!("three buffers") };
        copy(pool, stream, &[rcb_vmm_copy { dst: sx, src: x, bytes: BYTES }, rcb_vmm_copy { dst: sy, src: y, bytes: BYTES }]);
        common::run(rt, k.sleep, &args::sleep(20_000), stream);
        common::run(rt, k.add_f32, &args::add(sout, sx, sy, LEN as u64), stream);
        copy(pool, stream, &[rcb_vmm_copy { dst: out, src: sout, bytes: BYTES }]);
        release(pool, &slot, stream);
    }
    rt.stream_synchronize(stream).unwrap();
    for (i, &(_, _, out)) in caller.iter().enumerate() {
        assert_eq!(common::download_f32(rt, out, LEN), expected(i), "iteration {i}");
    }
    let all: Vec<u64> = seen.iter().flat_map(|s| s.clone().unwrap()).collect();
    let mut distinct = all.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), all.len(), "no buffer of one slot aliases another slot: {all:x?}");
    free(pool);
    for (x, y, out) in caller {
        [x, y, out].into_iter().for_each(|p| rt.free(p).unwrap());
    }
    rt.stream_destroy(stream).unwrap();
    assert_eq!(live(sim.as_ref()), before, "{COUNTED:?} balance after free");
}

#[test]
fn vmm_backing_one_slot() {
    run_iterations(RCB_VMM_BACKING_VMM, 1);
}

#[test]
fn vmm_backing_two_slots() {
    run_iterations(RCB_VMM_BACKING_VMM, 2);
}

#[test]
fn vmm_backing_three_slots() {
    run_iterations(RCB_VMM_BACKING_VMM, 3);
}

#[test]
fn device_backing_one_slot() {
    run_iterations(RCB_VMM_BACKING_DEVICE, 1);
}

#[test]
fn device_backing_three_slots() {
    run_iterations(RCB_VMM_BACKING_DEVICE, 3);
}

#[test]
fn a_stalled_stream_makes_acquire_time_out_and_free_wait() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let k = common::kernels(rt, 0);
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let timeout = Duration::from_millis(50);
    let pool = new_pool(&config(RCB_VMM_BACKING_VMM, 1, &SIZES, timeout.as_millis() as u32));
    let first = acquire(pool);
    common::run(rt, k.sleep, &args::sleep(1_000_000), stream);
    release(pool, &first, stream);

    let mut slot = rcb_vmm_slot { iteration: 77, index: 77, num_buffers: 0, buffers: null(), ..Default::default() };
    let start = Instant::now();
    assert_eq!(unsafe { rcb_vmm_pool_acquire(pool, &mut slot) }, RCB_STATUS_TIMEOUT);
    assert!(start.elapsed() >= timeout, "gave up before the configured timeout");
    let msg = last_error();
    assert!(msg.contains("slot 0") && msg.contains("timeline value 1") && msg.contains("observed 0"), "{msg}");
    assert_eq!((slot.iteration, slot.index), (77, 77), "output untouched on failure");
    // The GPU is still busy: free refuses to unmap under it and leaves the pool usable.
    assert_eq!(unsafe { rcb_vmm_pool_free(pool) }, RCB_STATUS_TIMEOUT, "{}", last_error());

    rt.stream_synchronize(stream).unwrap();
    // The timed-out iteration 1 is spent; iteration 2 does not wait for it.
    let next = acquire(pool);
    assert_eq!((next.iteration, next.index), (2, 0));
    assert_eq!(unsafe { rcb_vmm_pool_free(pool) }, RCB_STATUS_INVALID_STATE, "slot still held");
    assert!(last_error().contains("held by iteration 2"));
    release(pool, &next, stream);
    free(pool);
    rt.stream_destroy(stream).unwrap();
}

/// A held slot makes free refuse at once, even when an earlier slot is still busy on the GPU
/// for longer than the pool's timeout: the holder is the caller's to release, no wait helps.
#[test]
fn free_refuses_a_held_slot_at_once_behind_a_busy_one() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let k = common::kernels(rt, 0);
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let pool = new_pool(&config(RCB_VMM_BACKING_DEVICE, 2, &SIZES, 100));
    let busy = acquire(pool);
    common::run(rt, k.sleep, &args::sleep(500_000), stream);
    release(pool, &busy, stream);
    let held = acquire(pool);
    assert_eq!(held.index, 1);
    assert_eq!(unsafe { rcb_vmm_pool_free(pool) }, RCB_STATUS_INVALID_STATE, "{}", last_error());
    assert!(last_error().contains("slot 1 is still held by iteration 1"), "{}", last_error());
    release(pool, &held, stream);
    rt.stream_synchronize(stream).unwrap();
    free(pool);
    rt.stream_destroy(stream).unwrap();
}

/// Fails the n-th call of each creation call in turn; nothing may be left behind.
#[test]
fn creation_fails_cleanly_at_every_step() {
    let Some(_) = common::runtime() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let _serial = common::serial();
    let steps: &[(u32, &str, u32)] = &[
        (RCB_VMM_BACKING_VMM, "hipMemGetAllocationGranularity", 1),
        (RCB_VMM_BACKING_VMM, "hipExtMallocWithFlags", 3),
        (RCB_VMM_BACKING_VMM, "hipMemCreate", 3),
        (RCB_VMM_BACKING_VMM, "hipMemAddressReserve", 3),
        (RCB_VMM_BACKING_VMM, "hipMemMap", 3),
        (RCB_VMM_BACKING_VMM, "hipMemSetAccess", 3),
        (RCB_VMM_BACKING_DEVICE, "hipExtMallocWithFlags", 3),
        (RCB_VMM_BACKING_DEVICE, "hipMalloc", 6),
    ];
    let sizes = [BYTES, 0, 3 << 20];
    for &(backing, call, calls_per_pool) in steps {
        for nth in 1..=calls_per_pool {
            let before = live(Some(&sim));
            let (maps, unmaps) = (sim.call_count("hipMemMap"), sim.call_count("hipMemUnmap"));
            sim.set_faults(&format!("{call}:{nth}"));
            let mut pool = 0x5a5a as *mut rcb_vmm_pool;
            let status = unsafe { rcb_vmm_pool_new(&config(backing, 3, &sizes, 1000), &mut pool) };
            sim.set_faults("");
            let msg = last_error();
            assert_ne!(status, RCB_OK, "{call}:{nth} must fail creation");
            assert!(msg.contains(call), "{call}:{nth}: {msg}");
            assert_eq!(pool as usize, 0x5a5a, "output untouched");
            assert_eq!(live(Some(&sim)), before, "{call}:{nth} leaked {COUNTED:?}");
            let mapped = sim.call_count("hipMemMap") - maps - u64::from(call == "hipMemMap");
            assert_eq!(sim.call_count("hipMemUnmap") - unmaps, mapped, "{call}:{nth}: one unmap per successful map");
        }
    }
}

/// A graph recorded once per slot over the pool's addresses runs 100 iterations with changing
/// inputs without a single update.
#[test]
fn a_recorded_graph_needs_no_update_across_100_iterations() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let sim = common::hipsim("no graph update or re-instantiation (the runtime's call counters)");
    let k = common::kernels(rt, 0);
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let pool = new_pool(&config(RCB_VMM_BACKING_VMM, 2, &SIZES, 30_000));
    let mut execs: Vec<(Graph, Exec)> = Vec::new();
    for _ in 0..2 {
        let slot = acquire(pool);
        let [x, y, out] = buffers(&slot)[..] else { panic!("three buffers") };
        let graph = rt.graph_create().unwrap();
        let blob = pack(&args::add(out, x, y, LEN as u64));
        rt.add_kernel_node(graph, &[], &common::launch(k.add_f32, &blob)).unwrap();
        execs.push((graph, rt.instantiate(graph).unwrap()));
        release(pool, &slot, stream);
    }
    let updates = ["hipGraphExecKernelNodeSetParams", "hipGraphExecUpdate", "hipGraphKernelNodeSetParams", "hipGraphInstantiate"];
    let count = |s: &common::Hipsim| updates.iter().map(|u| s.call_count(u)).collect::<Vec<_>>();
    let counts_before = sim.as_ref().map(count);
    let caller: Vec<(DevicePtr, DevicePtr, DevicePtr)> = (0..100)
        .map(|i| {
            let (x, y) = inputs(i);
            (common::upload_f32(rt, 0, &x), common::upload_f32(rt, 0, &y), common::upload_f32(rt, 0, &[0.0; LEN]))
        })
        .collect();
    for &(x, y, out) in &caller {
        let slot = acquire(pool);
        let [sx, sy, sout] = buffers(&slot)[..] else { panic!("three buffers") };
        copy(pool, stream, &[rcb_vmm_copy { dst: sx, src: x, bytes: BYTES }, rcb_vmm_copy { dst: sy, src: y, bytes: BYTES }]);
        rt.graph_launch(execs[slot.index as usize].1, stream).unwrap();
        copy(pool, stream, &[rcb_vmm_copy { dst: out, src: sout, bytes: BYTES }]);
        release(pool, &slot, stream);
    }
    rt.stream_synchronize(stream).unwrap();
    for (i, &(_, _, out)) in caller.iter().enumerate() {
        assert_eq!(common::download_f32(rt, out, LEN), expected(i), "iteration {i}");
    }
    assert_eq!(sim.as_ref().map(count), counts_before, "no graph update or re-instantiation: {updates:?}");
    for (graph, exec) in execs {
        rt.exec_destroy(exec).unwrap();
        rt.graph_destroy(graph).unwrap();
    }
    for (x, y, out) in caller {
        [x, y, out].into_iter().for_each(|p| rt.free(p).unwrap());
    }
    free(pool);
    rt.stream_destroy(stream).unwrap();
}

#[test]
fn concurrent_acquires_get_distinct_iterations_and_exclusive_slots() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let pool = new_pool(&config(RCB_VMM_BACKING_DEVICE, 3, &[BYTES], 30_000)) as usize;
    let held: Vec<std::sync::atomic::AtomicBool> = (0..3).map(|_| Default::default()).collect();
    let mut iterations: Vec<u64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let held = &held;
                s.spawn(move || {
                    let pool = pool as *mut rcb_vmm_pool;
                    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
                    let mut mine = Vec::new();
                    for _ in 0..50 {
                        let slot = acquire(pool);
                        assert!(
                            !held[slot.index as usize].swap(true, std::sync::atomic::Ordering::AcqRel),
                            "slot {} held twice",
                            slot.index
                        );
                        assert_eq!(slot.index as u64, slot.iteration % 3);
                        mine.push(slot.iteration);
                        held[slot.index as usize].store(false, std::sync::atomic::Ordering::Release);
                        release(pool, &slot, stream);
                    }
                    rt.stream_synchronize(stream).unwrap();
                    rt.stream_destroy(stream).unwrap();
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    iterations.sort();
    assert_eq!(iterations, (0..200).collect::<Vec<u64>>());
    free(pool as *mut rcb_vmm_pool);
}

#[test]
fn zero_size_buffers_get_address_zero_in_both_backings() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    for backing in [RCB_VMM_BACKING_VMM, RCB_VMM_BACKING_DEVICE] {
        let pool = new_pool(&config(backing, 2, &[0, 8, 0], 1000));
        for _ in 0..2 {
            let slot = acquire(pool);
            let b = buffers(&slot);
            assert!(b[0] == 0 && b[1] != 0 && b[2] == 0, "{b:x?}");
            release(pool, &slot, stream);
        }
        rt.stream_synchronize(stream).unwrap();
        free(pool);
    }
    rt.stream_destroy(stream).unwrap();
}

/// A peer granted access writes into the pool's VMM memory from its own stream.
#[test]
fn a_listed_peer_can_use_vmm_slots() {
    let Some(rt) = common::runtime() else { return };
    if !common::has_devices(rt, 2) {
        return;
    }
    let _serial = common::serial();
    if !rt.can_access_peer(1, 0).unwrap() {
        return common::skip("every check", "device 1 cannot access device 0");
    }
    let k1 = common::kernels(rt, 1);
    let stream1 = rt.stream_create(1, NON_BLOCKING, 0).unwrap();
    let peers = [1];
    let mut cfg = config(RCB_VMM_BACKING_VMM, 2, &[BYTES], 1000);
    (cfg.peers, cfg.num_peers) = (peers.as_ptr(), 1);
    let pool = new_pool(&cfg);
    let slot = acquire(pool);
    let b = buffers(&slot)[0];
    common::run(rt, k1.fill_u32, &args::fill(b, 0xfeed, LEN as u64), stream1);
    release(pool, &slot, stream1);
    rt.stream_synchronize(stream1).unwrap();
    assert_eq!(common::download_u32(rt, b, LEN), vec![0xfeed; LEN]);
    free(pool);
    rt.stream_destroy(stream1).unwrap();
}

#[test]
fn bad_input_gets_a_distinct_status_naming_the_argument() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let mut out = 0x77 as *mut rcb_vmm_pool;
    let status = |cfg: &rcb_vmm_pool_config, out: &mut *mut rcb_vmm_pool| unsafe { rcb_vmm_pool_new(cfg, out) };
    assert_eq!(unsafe { rcb_vmm_pool_new(null(), &mut out) }, RCB_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("`config`"));
    assert_eq!(unsafe { rcb_vmm_pool_new(&config(RCB_VMM_BACKING_VMM, 1, &SIZES, 0), null_mut()) }, RCB_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("`out`"));
    let cases: Vec<(rcb_vmm_pool_config, &str)> = vec![
        (config(RCB_VMM_BACKING_VMM, 0, &SIZES, 0), "num_slots"),
        (config(RCB_VMM_BACKING_VMM, 1, &[], 0), "num_buffers"),
        (config(RCB_VMM_BACKING_DEVICE, 1, &[8, u64::MAX], 0), "buffer_sizes[1]"),
        // Each size is within the limit, the slot's chunk (2^46 + 256 + 4096 bytes) is not.
        (config(RCB_VMM_BACKING_VMM, 1, &[1 << 46, 0, 4096], 0), "buffer_sizes: "),
        (config(0, 1, &SIZES, 0), "backing"),
        (rcb_vmm_pool_config { device: 99, ..config(RCB_VMM_BACKING_VMM, 1, &SIZES, 0) }, "device"),
        (rcb_vmm_pool_config { num_peers: 1, peers: &0, ..config(RCB_VMM_BACKING_VMM, 1, &SIZES, 0) }, "peers[0]"),
    ];
    for (cfg, name) in &cases {
        assert_eq!(status(cfg, &mut out), RCB_STATUS_INVALID_ARGUMENT, "{name}");
        assert!(last_error().starts_with(name), "{name}: {}", last_error());
    }
    let null_sizes = rcb_vmm_pool_config { buffer_sizes: null(), ..config(RCB_VMM_BACKING_VMM, 1, &SIZES, 0) };
    assert_eq!(status(&null_sizes, &mut out), RCB_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("`buffer_sizes`"));
    assert_eq!(out as usize, 0x77, "output untouched on failure");

    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let pool = new_pool(&config(RCB_VMM_BACKING_DEVICE, 2, &SIZES, 1000));
    assert_eq!(unsafe { rcb_vmm_pool_acquire(pool, null_mut()) }, RCB_STATUS_NULL_ARGUMENT);
    let slot = acquire(pool);
    assert_eq!(slot.iteration, 0, "a failed acquire takes no iteration");
    let b = buffers(&slot);
    let outside = common::upload_f32(rt, 0, &[0.0; LEN]);
    let bad_copies: &[(rcb_vmm_copy, &str)] = &[
        (rcb_vmm_copy { dst: outside, src: outside, bytes: 4 }, "neither dst"),
        (rcb_vmm_copy { dst: b[0] + 8, src: outside, bytes: BYTES }, "run past the end of slot 0 buffer 0"),
    ];
    for (c, what) in bad_copies {
        let ok = rcb_vmm_copy { dst: b[1], src: outside, bytes: 4 };
        assert_eq!(unsafe { rcb_vmm_pool_copy(pool, stream.0, [ok, rcb_vmm_copy { ..*c }].as_ptr(), 2) }, RCB_STATUS_INVALID_ARGUMENT);
        assert!(last_error().starts_with("copies[1]") && last_error().contains(what), "{}", last_error());
    }
    assert_eq!(unsafe { rcb_vmm_pool_copy(pool, stream.0, null(), 1) }, RCB_STATUS_NULL_ARGUMENT);
    let forged = rcb_vmm_slot { index: 5, ..slot };
    assert_eq!(unsafe { rcb_vmm_pool_release(pool, &forged, stream.0) }, RCB_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("slot 5 does not exist"));
    let wrong = rcb_vmm_slot { iteration: 9, ..slot };
    assert_eq!(unsafe { rcb_vmm_pool_release(pool, &wrong, stream.0) }, RCB_STATUS_INVALID_STATE);
    release(pool, &slot, stream);
    assert_eq!(unsafe { rcb_vmm_pool_release(pool, &slot, stream.0) }, RCB_STATUS_INVALID_STATE, "double release");
    assert!(last_error().contains("already released"));
    rt.stream_synchronize(stream).unwrap();

    assert_eq!(unsafe { rcb_vmm_pool_free(null_mut()) }, RCB_OK);
    free(pool);
    for status in [unsafe { rcb_vmm_pool_free(pool) }, unsafe { rcb_vmm_pool_acquire(pool, &mut rcb_vmm_slot { ..slot }) }] {
        assert_eq!(status, RCB_STATUS_INVALID_HANDLE);
        assert!(last_error().contains("rcb_vmm_pool handle"), "{}", last_error());
    }
    assert_eq!(unsafe { rcb_vmm_pool_acquire(0x1234 as *mut rcb_vmm_pool, &mut rcb_vmm_slot { ..slot }) }, RCB_STATUS_INVALID_HANDLE);
    // A NULL pool is a NULL argument, as a NULL handle of every other type.
    assert_eq!(unsafe { rcb_vmm_pool_acquire(null_mut(), &mut rcb_vmm_slot { ..slot }) }, RCB_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("`pool`"), "{}", last_error());
    rt.free(outside).unwrap();
    rt.stream_destroy(stream).unwrap();
}

#[test]
fn free_reports_a_failed_release_and_releases_the_handle() {
    let Some(_) = common::runtime() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let _serial = common::serial();
    // Each backing with the first teardown call failing: the rest is still given back.
    let cases: &[(u32, &str, [u64; 4])] = &[
        // An unmap that fails leaves the mapping, which keeps the reservation from being freed
        // too; the physical handle is released (its memory lives on while mapped).
        (RCB_VMM_BACKING_VMM, "hipMemUnmap", [0, 0, 1, 1]),
        // The first slot's signal word; every buffer is still freed.
        (RCB_VMM_BACKING_DEVICE, "hipFree", [1, 0, 0, 0]),
    ];
    for &(backing, call, leaked) in cases {
        let before = live(Some(&sim));
        let pool = new_pool(&config(backing, 2, &SIZES, 1000));
        sim.set_faults(&format!("{call}:1"));
        let status = unsafe { rcb_vmm_pool_free(pool) };
        sim.set_faults("");
        let msg = last_error();
        assert_eq!(status, RCB_STATUS_RUNTIME_ERROR, "{call}: {msg}");
        assert!(msg.contains(call) && msg.contains("leaked"), "{call}: {msg}");
        assert_eq!(unsafe { rcb_vmm_pool_free(pool) }, RCB_STATUS_INVALID_HANDLE, "{call}: the handle is gone");
        let now = live(Some(&sim));
        let grew: Vec<u64> = now.iter().zip(&before).map(|(n, b)| n - b).collect();
        assert_eq!(grew, leaked, "{call}: leaked {COUNTED:?}");
    }
}

fn acquire_on_stream(pool: *mut rcb_vmm_pool, stream: Stream) -> rcb_vmm_slot {
    let mut slot = rcb_vmm_slot { iteration: u64::MAX, index: u32::MAX, num_buffers: 0, buffers: null(), ..Default::default() };
    assert_eq!(unsafe { rcb_vmm_pool_acquire_on_stream(pool, stream.0, &mut slot) }, RCB_OK, "acquire on stream: {}", last_error());
    slot
}

/// Two streams share one slot; each iteration's slot is still in use on the other stream by a
/// step far longer than the pool's timeout. The stream-ordered acquire returns at once every
/// time (the host never waits for the GPU, and a long step is no timeout), and every result is
/// exact: the second stream's work ran only after the first's release.
#[test]
fn a_stream_ordered_acquire_never_waits_on_the_host_and_keeps_uses_apart() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let k = common::kernels(rt, 0);
    let streams = [rt.stream_create(0, NON_BLOCKING, 0).unwrap(), rt.stream_create(0, NON_BLOCKING, 0).unwrap()];
    // A 50 ms timeout, 200 ms steps.
    let pool = new_pool(&config(RCB_VMM_BACKING_VMM, 1, &SIZES, 50));
    let iterations = 4;
    let caller: Vec<(u64, u64, u64)> = (0..iterations)
        .map(|i| {
            let (x, y) = inputs(i);
            (common::upload_f32(rt, 0, &x), common::upload_f32(rt, 0, &y), common::upload_f32(rt, 0, &[0.0; LEN]))
        })
        .collect();
    let start = Instant::now();
    for (i, &(x, y, out)) in caller.iter().enumerate() {
        let stream = streams[i % 2];
        let slot = acquire_on_stream(pool, stream);
        assert_eq!((slot.iteration, slot.index), (i as u64, 0));
        let [sx, sy, sout] = buffers(&slot)[..] else { panic!("three buffers") };
        copy(pool, stream, &[rcb_vmm_copy { dst: sx, src: x, bytes: BYTES }, rcb_vmm_copy { dst: sy, src: y, bytes: BYTES }]);
        common::run(rt, k.sleep, &args::sleep(200_000), stream);
        common::run(rt, k.add_f32, &args::add(sout, sx, sy, LEN as u64), stream);
        copy(pool, stream, &[rcb_vmm_copy { dst: out, src: sout, bytes: BYTES }]);
        release(pool, &slot, stream);
    }
    let enqueued = start.elapsed();
    assert!(enqueued < Duration::from_millis(150), "the host waited for the GPU: {enqueued:?} to enqueue {iterations} steps of 200 ms");
    for stream in streams {
        rt.stream_synchronize(stream).unwrap();
    }
    for (i, &(_, _, out)) in caller.iter().enumerate() {
        assert_eq!(common::download_f32(rt, out, LEN), expected(i), "iteration {i}");
    }
    assert_eq!(timeline(pool, 0), iterations as u64);
    free(pool);
    for stream in streams {
        rt.stream_destroy(stream).unwrap();
    }
}

/// A wait that cannot be enqueued spends its iteration and enqueues nothing (the caller then
/// runs without the pool); a release whose write cannot be enqueued is written from the host
/// after the stream finished, so the slot's next stream-ordered use is not left waiting.
#[test]
fn stream_ordered_acquire_and_release_survive_failed_stream_memory_operations() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let k = common::kernels(rt, 0);
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let pool = new_pool(&config(RCB_VMM_BACKING_DEVICE, 1, &SIZES, 30_000));
    let first = acquire_on_stream(pool, stream);
    common::run(rt, k.sleep, &args::sleep(20_000), stream);
    release(pool, &first, stream);

    // The slot is still in use on the GPU: the next acquire must enqueue a wait, which fails.
    sim.set_faults("hipStreamWaitValue64:1");
    let mut slot = rcb_vmm_slot { iteration: 77, index: 77, num_buffers: 0, buffers: null(), ..Default::default() };
    let status = unsafe { rcb_vmm_pool_acquire_on_stream(pool, stream.0, &mut slot) };
    sim.set_faults("");
    assert_eq!(status, RCB_STATUS_RUNTIME_ERROR, "{}", last_error());
    assert!(last_error().contains("hipStreamWaitValue64"), "{}", last_error());
    assert_eq!((slot.iteration, slot.index), (77, 77), "output untouched on failure");

    // Iteration 2 goes on; its release cannot enqueue the write and is written from the host.
    let second = acquire_on_stream(pool, stream);
    assert_eq!(second.iteration, 2);
    common::run(rt, k.sleep, &args::sleep(20_000), stream);
    sim.set_faults("hipStreamWriteValue64:1");
    release(pool, &second, stream);
    sim.set_faults("");
    assert_eq!(timeline(pool, 0), 3, "written from the host after the stream finished");
    let third = acquire_on_stream(pool, stream);
    release(pool, &third, stream);
    rt.stream_synchronize(stream).unwrap();
    assert_eq!(timeline(pool, 0), 4);
    free(pool);
    rt.stream_destroy(stream).unwrap();
}

/// A release that can neither enqueue its timeline write nor write it from the host (the write
/// and the synchronize after it both fail) leaves its slot held with the timeline short of the
/// value the slot's next use awaits. Every later acquire of that slot, stream-ordered or on the
/// host, is refused at once, spending its iteration and enqueuing nothing, rather than waiting
/// for a value no one writes; the other slot goes on. Released again, the slot comes round.
#[test]
fn a_release_that_wrote_no_timeline_makes_later_acquires_of_its_slot_refuse() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let k = common::kernels(rt, 0);
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    // A long timeout: a host acquire that waited for the timeline would show.
    let pool = new_pool(&config(RCB_VMM_BACKING_DEVICE, 2, &SIZES, 30_000));
    let first = acquire_on_stream(pool, stream);
    common::run(rt, k.sleep, &args::sleep(20_000), stream);
    sim.set_faults("hipStreamWriteValue64:1,hipStreamSynchronize:1");
    let released = unsafe { rcb_vmm_pool_release(pool, &first, stream.0) };
    sim.set_faults("");
    assert_eq!(released, RCB_STATUS_RUNTIME_ERROR, "{}", last_error());
    assert!(last_error().contains("still held"), "{}", last_error());

    // Slot 1 is not affected.
    let other = acquire_on_stream(pool, stream);
    assert_eq!((other.iteration, other.index), (1, 1));
    release(pool, &other, stream);

    let waits = sim.call_count("hipStreamWaitValue64");
    let start = Instant::now();
    let mut slot = rcb_vmm_slot { iteration: 77, index: 77, num_buffers: 0, buffers: null(), ..Default::default() };
    let on_stream = unsafe { rcb_vmm_pool_acquire_on_stream(pool, stream.0, &mut slot) };
    let on_stream_error = last_error();
    let on_host = {
        let skipped = acquire(pool);
        assert_eq!((skipped.iteration, skipped.index), (3, 1), "iteration 2 was spent");
        release(pool, &skipped, stream);
        unsafe { rcb_vmm_pool_acquire(pool, &mut slot) }
    };
    let on_host_error = last_error();
    assert!(start.elapsed() < Duration::from_secs(5), "an acquire waited: {:?}", start.elapsed());
    assert_eq!(on_stream, RCB_STATUS_INVALID_STATE, "{on_stream_error}");
    assert!(
        on_stream_error.contains("release of iteration 0 failed") && on_stream_error.contains("nothing was enqueued"),
        "{on_stream_error}"
    );
    assert_eq!(on_host, RCB_STATUS_INVALID_STATE, "{on_host_error}");
    assert!(on_host_error.contains("iteration 4 is spent"), "{on_host_error}");
    assert_eq!(sim.call_count("hipStreamWaitValue64"), waits, "no wait enqueued for the unwritten value");
    assert_eq!((slot.iteration, slot.index), (77, 77), "output untouched on failure");
    rt.stream_synchronize(stream).unwrap();
    assert_eq!(timeline(pool, 0), 0, "the failed release wrote nothing");

    // Released again, iteration 0's value is written and slot 0 is used again.
    release(pool, &first, stream);
    let _ = acquire_on_stream(pool, stream); // iteration 5, slot 1
    let again = acquire_on_stream(pool, stream);
    assert_eq!((again.iteration, again.index), (6, 0));
    release(pool, &again, stream);
    let fifth = rcb_vmm_slot { iteration: 5, index: 1, ..again };
    release(pool, &fifth, stream);
    rt.stream_synchronize(stream).unwrap();
    assert_eq!((timeline(pool, 0), timeline(pool, 1)), (7, 6));
    free(pool);
    rt.stream_destroy(stream).unwrap();
}

/// On HIP a release and a stream-ordered acquire refuse a stream whose capture state the runtime
/// cannot tell (clr answers hipErrorStreamCaptureImplicit for the null stream while another
/// stream captures in global mode; here a fault of `hipStreamIsCapturing`): it may be capturing,
/// and the timeline write or wait would then run outside the capture. Nothing changes; once the
/// query answers, both go through.
#[test]
fn an_unknown_capture_state_is_refused_where_the_runtime_would_not_capture() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let pool = new_pool(&config(RCB_VMM_BACKING_DEVICE, 1, &SIZES, 1000));
    let first = acquire(pool);
    sim.set_faults("hipStreamIsCapturing:1,hipStreamIsCapturing:2");
    let released = unsafe { rcb_vmm_pool_release(pool, &first, stream.0) };
    let release_error = last_error();
    let mut second = rcb_vmm_slot { iteration: 77, index: 77, num_buffers: 0, buffers: null(), ..Default::default() };
    let acquired = unsafe { rcb_vmm_pool_acquire_on_stream(pool, stream.0, &mut second) };
    let acquire_error = last_error();
    sim.set_faults("");
    assert_eq!(released, RCB_STATUS_RUNTIME_ERROR, "{release_error}");
    assert!(release_error.contains("cannot be told") && release_error.contains("still held"), "{release_error}");
    assert_eq!(acquired, RCB_STATUS_RUNTIME_ERROR, "{acquire_error}");
    assert!(acquire_error.contains("cannot be told") && acquire_error.contains("no iteration was taken"), "{acquire_error}");
    rt.stream_synchronize(stream).unwrap();
    assert_eq!((second.iteration, timeline(pool, 0)), (77, 0), "nothing written or taken");
    release(pool, &first, stream);
    let second = acquire_on_stream(pool, stream);
    assert_eq!(second.iteration, 1, "the refused acquire took no iteration");
    release(pool, &second, stream);
    rt.stream_synchronize(stream).unwrap();
    assert_eq!(timeline(pool, 0), 2);
    free(pool);
    rt.stream_destroy(stream).unwrap();
}

/// A release and a stream-ordered acquire on a capturing stream. CUDA captures the timeline write
/// and the wait, so they take effect when the graph runs. HIP runs them on the stream at once,
/// outside the capture (the software GPU does so under its `clr_stream_memops` quirk): a release
/// there would free the slot before the captured work ran, so both are refused and change
/// nothing.
#[test]
fn a_capturing_stream_gets_the_timeline_only_where_the_runtime_captures_it() {
    let Some(rt) = common::runtime() else { return };
    let _serial = common::serial();
    let sim = common::hipsim("the software GPU's model of clr's stream memory operations");
    if let Some(sim) = &sim {
        sim.set_quirks("clr_stream_memops");
    }
    let stream = rt.stream_create(0, NON_BLOCKING, 0).unwrap();
    let pool = new_pool(&config(RCB_VMM_BACKING_DEVICE, 1, &SIZES, 1000));
    let first = acquire(pool);
    rt.begin_capture(stream, CaptureMode::ThreadLocal).unwrap();
    let released = unsafe { rcb_vmm_pool_release(pool, &first, stream.0) };
    let release_error = last_error();
    let mut second = rcb_vmm_slot { iteration: 77, index: 77, num_buffers: 0, buffers: null(), ..Default::default() };
    let acquired = unsafe { rcb_vmm_pool_acquire_on_stream(pool, stream.0, &mut second) };
    let acquire_error = last_error();
    let graph = rt.end_capture(stream).unwrap();
    let captured = rt.graph_nodes(graph).unwrap().len();
    if rt.info().backend == Backend::Hip {
        assert_eq!(released, RCB_STATUS_INVALID_STATE, "{release_error}");
        assert!(release_error.contains("capturing") && release_error.contains("still held"), "{release_error}");
        assert_eq!(acquired, RCB_STATUS_INVALID_STATE, "{acquire_error}");
        assert!(acquire_error.contains("no iteration was taken"), "{acquire_error}");
        assert_eq!((second.iteration, captured, timeline(pool, 0)), (77, 0, 0), "nothing written, waited for or captured");
        rt.graph_destroy(graph).unwrap();
        release(pool, &first, stream);
        second = acquire_on_stream(pool, stream);
    } else {
        assert_eq!((released, acquired), (RCB_OK, RCB_OK), "{release_error} / {acquire_error}");
        assert_eq!((captured, timeline(pool, 0)), (2, 0), "the write and the wait wait for the graph");
        let exec = rt.instantiate(graph).unwrap();
        rt.graph_launch(exec, stream).unwrap();
        rt.stream_synchronize(stream).unwrap();
        rt.exec_destroy(exec).unwrap();
        rt.graph_destroy(graph).unwrap();
    }
    assert_eq!(second.iteration, 1, "the refused acquire took no iteration");
    release(pool, &second, stream);
    rt.stream_synchronize(stream).unwrap();
    assert_eq!(timeline(pool, 0), 2);
    free(pool);
    rt.stream_destroy(stream).unwrap();
    if let Some(sim) = &sim {
        sim.set_quirks("");
    }
}
