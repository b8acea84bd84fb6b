//! The stream handle cache through its C ABI (`rcb_stream_*`), on the software GPU (or a real
//! one with `RCB_BACKEND=cuda`; the hipsim call-counter checks are then skipped).
//!
//! The cache is process-wide, so every test holds `common::serial()`, starts from an empty cache
//! (`rcb_stream_cache_trim(-1)`) and asserts on differences of the counters.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod common;

use common::{args, last_error};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Runtime, Stream};
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

fn acquire(device: i32, flags: u32, priority: i32) -> Stream {
    let mut s = std::ptr::null_mut();
    let status = unsafe { rcb_stream_acquire(device, flags, priority, &mut s) };
    assert_eq!(status, RCB_OK, "acquire({device}, {flags}, {priority}): {}", last_error());
    assert!(!s.is_null());
    Stream(s)
}

fn release(s: Stream) {
    assert_eq!(rcb_stream_release(s.0), RCB_OK, "release: {}", last_error());
}

fn release_idle(s: Stream) {
    assert_eq!(rcb_stream_release_idle(s.0), RCB_OK, "release idle: {}", last_error());
}

/// The runtime's stream queries, as hipsim counts them (`None` on a real GPU).
fn queries() -> Option<u64> {
    common::hipsim("the runtime's stream queries (call counters)").map(|sim| sim.call_count("hipStreamQuery"))
}

fn stats(device: i32) -> rcb_stream_stats {
    let mut s = rcb_stream_stats::default();
    assert_eq!(unsafe { rcb_stream_cache_stats(device, &mut s) }, RCB_OK, "{}", last_error());
    s
}

fn empty_cache() {
    assert_eq!(rcb_stream_cache_trim(-1), RCB_OK, "{}", last_error());
    assert_eq!(stats(-1).kept, 0);
}

/// Streams the runtime created, as hipsim counts them (`None` on a real GPU).
fn creations() -> Option<u64> {
    common::hipsim("the runtime's stream creations (call counters)").map(|sim| sim.call_count("hipStreamCreateWithPriority"))
}

fn delta(after: Option<u64>, before: Option<u64>) -> Option<u64> {
    Some(after? - before?)
}

/// A stream from an emptied cache, still running a kernel of 300 ms.
fn busy_stream(rt: &dyn Runtime) -> Stream {
    empty_cache();
    let k = common::kernels(rt, 0);
    let busy = acquire(0, 0, 0);
    common::run(rt, k.sleep, &args::sleep(300_000), busy);
    assert!(!rt.stream_is_idle(busy).unwrap(), "the sleep kernel should still run");
    busy
}

/// Releasing through `release_c` a stream twice (the first release by `release_first`), one the
/// cache never handed out, and NULL: each refused with its own status and message, the stream
/// left alive and the cache unchanged.
fn refused_releases_change_nothing(rt: &dyn Runtime, release_c: extern "C" fn(*mut c_void) -> rcb_status, release_first: fn(Stream)) {
    empty_cache();
    let s = acquire(0, 0, 0);
    release_first(s);
    let before = stats(-1);
    assert_eq!(release_c(s.0), RCB_STATUS_INVALID_HANDLE, "double release");
    assert!(last_error().contains("already released"), "{}", last_error());
    let foreign = rt.stream_create(0, 0, 0).unwrap();
    assert_eq!(release_c(foreign.0), RCB_STATUS_INVALID_HANDLE, "never acquired");
    assert!(rt.stream_is_idle(foreign).unwrap(), "a refused release leaves the stream alive");
    rt.stream_destroy(foreign).unwrap();
    assert_eq!(release_c(std::ptr::null_mut()), RCB_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("`stream`"), "{}", last_error());
    assert_eq!(stats(-1), before, "refused releases changed the cache");
}

#[test]
fn released_streams_are_reused_instead_of_created() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    empty_cache();
    let (before, created_before) = (stats(0), creations());
    for _round in 0..10 {
        let streams: Vec<Stream> = (0..8).map(|_| acquire(0, 0, 0)).collect();
        assert_eq!(streams.iter().collect::<HashSet<_>>().len(), 8, "eight distinct streams at once");
        streams.into_iter().for_each(release);
    }
    let after = stats(0);
    assert_eq!((after.misses - before.misses, after.hits - before.hits), (8, 72));
    assert_eq!((after.kept, after.in_use), (8, 0));
    if let Some(created) = delta(creations(), created_before) {
        assert_eq!(created, 8, "hipsim saw {created} stream creations for 80 acquires");
    }

    // A reused stream does real work correctly.
    let k = common::kernels(rt, 0);
    let buf = rt.malloc(0, 4 * 100).unwrap();
    let s = acquire(0, 0, 0);
    common::run(rt, k.fill_u32, &args::fill(buf, 0xC0FFEE, 100), s);
    rt.stream_synchronize(s).unwrap();
    release(s);
    assert_eq!(common::download_u32(rt, buf, 100), vec![0xC0FFEE; 100]);
    rt.free(buf).unwrap();
}

#[test]
fn a_busy_stream_is_destroyed_on_release_never_handed_out() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    let busy = busy_stream(rt);
    let (before, created_before) = (stats(0), creations());
    release(busy);
    let after = stats(0);
    assert_eq!((after.destroyed - before.destroyed, after.kept), (1, 0));

    let next = acquire(0, 0, 0);
    assert_eq!(stats(0).misses - after.misses, 1, "the next acquire had nothing idle to reuse");
    assert!(rt.stream_is_idle(next).unwrap());
    if let Some(created) = delta(creations(), created_before) {
        assert_eq!(created, 1);
    }
    release(next);
}

#[test]
fn a_synchronized_stream_released_idle_is_kept_without_a_query() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    empty_cache();
    let k = common::kernels(rt, 0);
    let buf = rt.malloc(0, 4 * 100).unwrap();
    let s = acquire(0, 0, 0);
    common::run(rt, k.fill_u32, &args::fill(buf, 7, 100), s);
    rt.stream_synchronize(s).unwrap();
    let (before, queries_before) = (stats(0), queries());
    release_idle(s);
    let after = stats(0);
    assert_eq!((after.kept - before.kept, after.in_use, after.destroyed), (1, before.in_use - 1, before.destroyed));
    if let Some(queried) = delta(queries(), queries_before) {
        assert_eq!(queried, 0, "hipStreamQuery was called {queried} time(s) by a known-idle release");
    }

    // Reused, and usable.
    let again = acquire(0, 0, 0);
    assert_eq!((again, stats(0).hits - after.hits), (s, 1));
    common::run(rt, k.fill_u32, &args::fill(buf, 9, 100), again);
    rt.stream_synchronize(again).unwrap();
    assert_eq!(common::download_u32(rt, buf, 100), vec![9; 100]);
    // The querying release still asks.
    let queries_before = queries();
    release(again);
    if let Some(queried) = delta(queries(), queries_before) {
        assert_eq!(queried, 1);
    }
    rt.free(buf).unwrap();
}

#[test]
fn a_known_idle_release_trusts_the_caller_where_the_querying_one_destroys() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    // A caller that breaks the promise: the stream still runs a kernel. The querying release
    // would destroy it (a_busy_stream_is_destroyed_on_release_never_handed_out); this one keeps
    // it, since it never asks.
    let busy = busy_stream(rt);
    let before = stats(0);
    release_idle(busy);
    let after = stats(0);
    assert_eq!((after.kept - before.kept, after.destroyed - before.destroyed), (1, 0));
    // The next acquirer gets it; work it enqueues runs after the pending kernel, in stream order.
    let next = acquire(0, 0, 0);
    assert_eq!(next, busy);
    let buf = rt.malloc(0, 4 * 16).unwrap();
    common::run(rt, common::kernels(rt, 0).fill_u32, &args::fill(buf, 3, 16), next);
    rt.stream_synchronize(next).unwrap();
    assert_eq!(common::download_u32(rt, buf, 16), vec![3; 16]);
    release(next);
    rt.free(buf).unwrap();
}

#[test]
fn a_known_idle_release_refuses_and_fails_as_the_querying_one_does() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    refused_releases_change_nothing(rt, rcb_stream_release_idle, release_idle);

    // A stream over the bound is destroyed however idle it is; its destroy failing is the
    // runtime's error, and the stream counts as released.
    let Some(sim) = common::hipsim_or_skip() else { return };
    empty_cache();
    let max = rocm_cmdbuf_stream_pool::Settings::default().max_per_key;
    let kept: Vec<Stream> = (0..max).map(|_| acquire(0, 0, 0)).collect();
    let surplus = acquire(0, 0, 0);
    kept.into_iter().for_each(release_idle);
    let before = stats(-1);
    sim.set_faults("hipStreamDestroy:1");
    let status = rcb_stream_release_idle(surplus.0);
    sim.set_faults("");
    assert_eq!(status, RCB_STATUS_RUNTIME_ERROR);
    assert!(last_error().contains("hipStreamDestroy"), "{}", last_error());
    let after = stats(-1);
    assert_eq!((after.kept, after.in_use, after.destroyed - before.destroyed), (max as u64, before.in_use - 1, 1));
    assert_eq!(rcb_stream_release_idle(surplus.0), RCB_STATUS_INVALID_HANDLE, "forgotten after the failure");
    rt.stream_destroy(surplus).unwrap();
}

#[test]
fn flags_priorities_and_devices_are_never_mixed() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    empty_cache();
    let devices: Vec<i32> = (0..rt.info().device_count.min(2)).collect();
    let (least, greatest) = rt.stream_priority_range(0).unwrap();
    let priorities = [least, greatest];
    let keys: Vec<(i32, u32, i32)> =
        devices.iter().flat_map(|&d| [0u32, 1].into_iter().flat_map(move |f| priorities.into_iter().map(move |p| (d, f, p)))).collect();
    // Two rounds: the first creates one stream per key, the second must find each in its own key.
    let before = stats(-1);
    let mut first = Vec::new();
    for round in 0..2 {
        let streams: Vec<Stream> = keys.iter().map(|&(d, f, p)| acquire(d, f, p)).collect();
        for (s, &(_, f, p)) in streams.iter().zip(&keys) {
            assert_eq!(rt.stream_flags(*s).unwrap(), f);
            assert_eq!(rt.stream_priority(*s).unwrap(), p);
        }
        if round == 0 {
            first = streams.clone();
        } else {
            assert_eq!(streams, first, "each key got back its own stream");
        }
        streams.into_iter().for_each(release);
    }
    let s = stats(-1);
    assert_eq!((s.misses - before.misses, s.hits - before.hits), (keys.len() as u64, keys.len() as u64));

    // An out-of-range priority is clamped as creation clamps it, so it shares the clamped key.
    let beyond = greatest - (least - greatest).abs() - 5;
    let clamped = acquire(0, 0, beyond);
    assert_eq!(rt.stream_priority(clamped).unwrap(), greatest);
    assert_eq!(stats(-1).hits - before.hits, keys.len() as u64 + 1);
    release(clamped);
}

#[test]
fn at_most_max_per_key_idle_streams_are_kept() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    empty_cache();
    let max = rocm_cmdbuf::config::get().unwrap().stream_cache.max_per_key as u64;
    let live_before = common::hipsim("the runtime's live streams").map(|sim| sim.live_count("stream"));
    let before = stats(0);
    let streams: Vec<Stream> = (0..max + 6).map(|_| acquire(0, 1, 0)).collect();
    streams.into_iter().for_each(release);
    let after = stats(0);
    assert_eq!((after.kept, after.destroyed - before.destroyed), (max, 6));
    if let (Some(sim), Some(live_before)) = (common::hipsim("the runtime's live streams"), live_before) {
        assert_eq!(sim.live_count("stream"), live_before + max);
    }
    let _ = rt;
}

#[test]
fn trim_destroys_idle_streams_per_device_or_all() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    if !common::has_devices(rt, 2) {
        return;
    }
    empty_cache();
    let held = acquire(0, 0, 0);
    let idle: Vec<Stream> = [0, 0, 0, 1, 1].iter().map(|&d| acquire(d, 0, 0)).collect();
    idle.into_iter().for_each(release);
    let live = common::hipsim("the runtime's live streams").map(|sim| sim.live_count("stream"));
    let before = stats(-1);
    assert_eq!((stats(0).kept, stats(1).kept), (3, 2));

    assert_eq!(rcb_stream_cache_trim(0), RCB_OK, "{}", last_error());
    assert_eq!((stats(0).kept, stats(1).kept), (0, 2));
    assert_eq!(rcb_stream_cache_trim(-1), RCB_OK, "{}", last_error());
    assert_eq!(stats(1).kept, 0);
    assert_eq!(stats(-1).destroyed - before.destroyed, 5);
    if let (Some(sim), Some(live)) = (common::hipsim("the runtime's live streams"), live) {
        assert_eq!(sim.live_count("stream"), live - 5);
    }
    // The stream still held is untouched by trim and still usable.
    assert!(rt.stream_is_idle(held).unwrap());
    assert_eq!(stats(0).in_use, 1);
    release(held);
    assert_eq!(stats(0).kept, 1);

    for bad in [-2, rt.info().device_count] {
        assert_eq!(rcb_stream_cache_trim(bad), RCB_STATUS_INVALID_ARGUMENT);
        assert!(last_error().contains(&format!("device {bad}")), "{}", last_error());
    }
}

#[test]
fn bad_input_gets_a_distinct_status_and_changes_nothing() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    refused_releases_change_nothing(rt, rcb_stream_release, release);

    let before = stats(-1);
    let created = creations();
    assert_eq!(unsafe { rcb_stream_acquire(0, 0, 0, std::ptr::null_mut()) }, RCB_STATUS_NULL_ARGUMENT);
    assert_eq!(creations(), created, "nothing is created for a NULL output");
    let mut out: *mut c_void = 0x1234 as *mut c_void;
    assert_eq!(unsafe { rcb_stream_acquire(rt.info().device_count, 0, 0, &mut out) }, RCB_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("device"), "{}", last_error());
    assert_eq!(out, 0x1234 as *mut c_void, "output written only on success");
    assert_eq!(unsafe { rcb_stream_cache_stats(-1, std::ptr::null_mut()) }, RCB_STATUS_NULL_ARGUMENT);
    assert_eq!(stats(-1), before);
}

#[test]
fn runtime_failures_are_reported_and_unreadable_streams_not_kept() {
    let _serial = common::serial();
    let Some(_rt) = common::runtime() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    empty_cache();
    let before = stats(0);
    sim.set_faults("hipStreamCreateWithPriority:1");
    let mut out = std::ptr::null_mut();
    let status = unsafe { rcb_stream_acquire(0, 0, 0, &mut out) };
    sim.set_faults("");
    assert_eq!(status, RCB_STATUS_RUNTIME_ERROR);
    assert!(last_error().contains("hipStreamCreateWithPriority"), "{}", last_error());
    assert!(out.is_null());
    assert_eq!(stats(0).in_use, before.in_use);

    // A query that fails on release means "do not keep".
    let s = acquire(0, 0, 0);
    sim.set_faults("hipStreamQuery:1");
    release(s);
    sim.set_faults("");
    assert_eq!((stats(0).kept, stats(0).destroyed - before.destroyed), (0, 1));
}

/// A runtime that reports flag bits of its own (hipsim's `stream_flag_bits` quirk): streams are
/// filed under the flags asked for, so the second acquire of a key finds the first's stream.
#[test]
fn streams_are_filed_under_the_flags_asked_for() {
    let _serial = common::serial();
    let Some(rt) = common::runtime() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    empty_cache();
    sim.set_quirks("stream_flag_bits");
    let first = acquire(0, 1, 0);
    let reported = rt.stream_flags(first);
    release(first);
    let second = acquire(0, 1, 0);
    sim.set_quirks("");
    assert_ne!(reported.unwrap(), 1, "the quirk reports extra bits");
    assert_eq!(second, first, "the second acquire missed the stream filed by the first");
    release(second);
}

#[test]
fn sixteen_threads_never_share_a_stream() {
    let _serial = common::serial();
    let Some(_rt) = common::runtime() else { return };
    empty_cache();
    let before = stats(0);
    let created_before = creations();
    let owned: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let threads: Vec<_> = (0..16u32)
        .map(|t| {
            let owned = Arc::clone(&owned);
            std::thread::spawn(move || {
                for i in 0..10_000u32 {
                    // Two keys, and every eighth iteration holds two streams at once.
                    let flags = (t + i) % 2;
                    let mut held = vec![acquire(0, flags, 0)];
                    if i % 8 == 0 {
                        held.push(acquire(0, flags, 0));
                    }
                    for s in &held {
                        assert!(owned.lock().unwrap().insert(s.0 as usize), "stream {:p} held by two owners", s.0);
                    }
                    for s in held {
                        assert!(owned.lock().unwrap().remove(&(s.0 as usize)));
                        release(s);
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let after = stats(0);
    let acquires = 16 * (10_000 + 10_000 / 8);
    assert_eq!((after.hits + after.misses) - (before.hits + before.misses), acquires);
    assert_eq!(after.in_use, 0);
    assert!(after.misses - before.misses <= 2 * 32, "at most 32 streams per key are ever held at once");
    if let Some(created) = delta(creations(), created_before) {
        assert_eq!(created, after.misses - before.misses);
    }
}

/// A device reset destroys every stream of the device, the ones the
/// cache keeps idle and the ones it handed out. `rcb_stream_cache_reset` before the reset
/// destroys the former and forgets the latter: a stream handed out before the reset and released
/// after it is refused without being queried or destroyed (on real HIP either is a use after
/// free), never kept, and the next acquire gets a live stream; another device keeps its streams.
#[test]
fn streams_from_before_a_device_reset_are_never_touched_or_handed_out_again() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let rt = common::runtime().unwrap();
    let hip = unsafe { libloading::Library::new(std::env::var_os("RCB_HIP_LIBRARY").unwrap()) }.unwrap();
    let set_device: unsafe extern "C" fn(i32) -> i32 = unsafe { *hip.get(b"hipSetDevice\0").unwrap() };
    let device_reset: unsafe extern "C" fn() -> i32 = unsafe { *hip.get(b"hipDeviceReset\0").unwrap() };
    empty_cache();
    let two = common::has_devices(rt, 2);
    let (held, held_synchronized, idle) = (acquire(0, 0, 0), acquire(0, 0, 0), acquire(0, 0, 0));
    release(idle);
    let elsewhere = two.then(|| acquire(1, 0, 0));
    elsewhere.into_iter().for_each(release);
    let before = (stats(0), two.then(|| stats(1)));

    assert_eq!(rcb_stream_cache_reset(0), RCB_OK, "{}", last_error());
    assert_eq!((stats(0).kept, stats(0).in_use), (0, 0), "device 0's streams are still in the cache");
    assert_eq!(stats(0).destroyed - before.0.destroyed, 1, "the idle stream was not destroyed");
    assert_eq!(unsafe { set_device(0) }, 0);
    assert_eq!(unsafe { device_reset() }, 0);

    let touched = || (sim.call_count("hipStreamQuery"), sim.call_count("hipStreamDestroy"));
    let untouched = touched();
    assert_eq!(rcb_stream_release(held.0), RCB_STATUS_INVALID_HANDLE);
    assert!(last_error().contains("rcb_stream_cache_reset"), "{}", last_error());
    // Its owner synchronized it before the reset: released idle, it must still not be kept.
    assert_eq!(rcb_stream_release_idle(held_synchronized.0), RCB_STATUS_INVALID_HANDLE);
    assert_eq!(touched(), untouched, "a stream the reset destroyed was queried or destroyed");
    assert_eq!(stats(0).kept, 0);
    let fresh = acquire(0, 0, 0);
    assert!(![held, held_synchronized, idle].contains(&fresh), "a stream from before the reset was handed out");
    assert!(rt.stream_is_idle(fresh).unwrap(), "the stream acquired after the reset is not live");
    release(fresh);
    if let Some(other) = elsewhere {
        assert_eq!(Some(stats(1).kept), before.1.map(|s| s.kept), "device 1's idle stream went with device 0's reset");
        assert_eq!(acquire(1, 0, 0), other, "device 1's cached stream was not kept");
        release(other);
    }
    // Every device at once: nothing kept, nothing handed out is remembered.
    let last = acquire(0, 0, 0);
    assert_eq!(rcb_stream_cache_reset(-1), RCB_OK, "{}", last_error());
    assert_eq!((stats(-1).kept, stats(-1).in_use), (0, 0));
    rt.stream_destroy(last).unwrap();
    for bad in [-2, rt.info().device_count] {
        assert_eq!(rcb_stream_cache_reset(bad), RCB_STATUS_INVALID_ARGUMENT);
    }
}
