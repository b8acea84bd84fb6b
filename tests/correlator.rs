//! The profiler correlator through its C ABI: the `hipGraphLaunch` shape, 64-bit ids, dropped and
//! duplicate reports, auxiliary joins, the order of the output, 16 threads against a
//! single-threaded reference, identical output run to run, repeated flushes, clearing, limits,
//! and bad input. No GPU is involved.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI on locals and handles they own throughout; each call's contract is the header's"
)]

mod common;

use common::last_error;
use rocm_cmdbuf::ffi::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};

const AUX: u32 = RCB_API_EVENT_AUXILIARY;

/// An exchange's output, by value (the pointers are valid only during the callbacks).
#[derive(Clone, Debug, Default, PartialEq)]
struct Output {
    /// (device passed to the callback, activity, joined API event).
    activities: Vec<(u32, rcb_activity, Option<rcb_api_event>)>,
    /// (device, API event, first activity, activities under its id).
    api_events: Vec<(u32, rcb_api_event, Option<rcb_activity>, u64)>,
    without_activity: Vec<(u32, rcb_api_event, Option<rcb_activity>, u64)>,
    dropped: Vec<rcb_correlation_report>,
    duplicates: Vec<rcb_correlation_report>,
    /// (callback, device, device_records, n) of every call.
    calls: Vec<(&'static str, u32, u64, usize)>,
    /// Fail the callback call with this index (counting from 0) by returning 7.
    fail_at: Option<usize>,
    /// Add this activity to `add_to` from inside the first activities callback.
    add_inside: Option<(*mut rcb_correlator, rcb_activity)>,
}

fn out(user: *mut c_void) -> &'static mut Output {
    // SAFETY: every sink below passes a live Output as user data.
    unsafe { &mut *(user as *mut Output) }
}

fn fails(o: &mut Output) -> bool {
    o.fail_at == Some(o.calls.len() - 1)
}

unsafe extern "C" fn on_activities(user: *mut c_void, device: u32, total: u64, r: *const rcb_correlated_activity, n: usize) -> i32 {
    let o = out(user);
    o.calls.push(("activities", device, total, n));
    if let Some((c, a)) = o.add_inside.take() {
        // Adding and reading the counters are allowed from a callback of the same correlator.
        assert_eq!(unsafe { rcb_correlator_add_activity(c, &a) }, RCB_OK);
        let mut counters = rcb_correlator_counters::default();
        assert_eq!(unsafe { rcb_correlator_stats(c, &mut counters) }, RCB_OK);
        assert_eq!(counters.pending_activities, 1, "the event added during the exchange");
    }
    for r in unsafe { std::slice::from_raw_parts(r, n) } {
        o.activities.push((device, unsafe { *r.activity }, unsafe { r.api.as_ref() }.copied()));
    }
    if fails(o) { 7 } else { 0 }
}

fn api_records(r: *const rcb_correlated_api_event, n: usize, device: u32) -> Vec<(u32, rcb_api_event, Option<rcb_activity>, u64)> {
    unsafe { std::slice::from_raw_parts(r, n) }
        .iter()
        .map(|r| (device, unsafe { *r.api }, unsafe { r.first_activity.as_ref() }.copied(), r.activities))
        .collect()
}

unsafe extern "C" fn on_api(user: *mut c_void, device: u32, total: u64, r: *const rcb_correlated_api_event, n: usize) -> i32 {
    let o = out(user);
    o.calls.push(("api_events", device, total, n));
    o.api_events.extend(api_records(r, n, device));
    if fails(o) { 7 } else { 0 }
}

unsafe extern "C" fn on_orphans(user: *mut c_void, device: u32, total: u64, r: *const rcb_correlated_api_event, n: usize) -> i32 {
    let o = out(user);
    o.calls.push(("api_events_without_activity", device, total, n));
    o.without_activity.extend(api_records(r, n, device));
    if fails(o) { 7 } else { 0 }
}

unsafe extern "C" fn on_dropped(user: *mut c_void, r: *const rcb_correlation_report, n: usize) -> i32 {
    let o = out(user);
    o.calls.push(("dropped", 0, 0, n));
    o.dropped.extend_from_slice(unsafe { std::slice::from_raw_parts(r, n) });
    if fails(o) { 7 } else { 0 }
}

unsafe extern "C" fn on_duplicates(user: *mut c_void, r: *const rcb_correlation_report, n: usize) -> i32 {
    let o = out(user);
    o.calls.push(("duplicates", 0, 0, n));
    o.duplicates.extend_from_slice(unsafe { std::slice::from_raw_parts(r, n) });
    if fails(o) { 7 } else { 0 }
}

fn sink(o: &mut Output) -> rcb_correlator_sink {
    rcb_correlator_sink {
        user_data: o as *mut Output as *mut c_void,
        activities: Some(on_activities),
        api_events: Some(on_api),
        api_events_without_activity: Some(on_orphans),
        dropped: Some(on_dropped),
        duplicates: Some(on_duplicates),
        ..Default::default()
    }
}

struct Correlator(*mut rcb_correlator);
// SAFETY: a handle id; the add calls are thread-safe.
unsafe impl Send for Correlator {}
unsafe impl Sync for Correlator {}

impl Drop for Correlator {
    fn drop(&mut self) {
        unsafe { rcb_correlator_free(self.0) };
    }
}

fn correlator_with(config: rcb_correlator_config) -> Correlator {
    let mut c = null_mut();
    assert_eq!(unsafe { rcb_correlator_new(&config, &mut c) }, RCB_OK);
    assert!(!c.is_null());
    Correlator(c)
}

fn correlator() -> Correlator {
    correlator_with(rcb_correlator_config::default())
}

impl Correlator {
    fn api(&self, e: rcb_api_event) {
        assert_eq!(unsafe { rcb_correlator_add_api_event(self.0, &e) }, RCB_OK, "{}", last_error());
    }
    fn act(&self, a: rcb_activity) {
        assert_eq!(unsafe { rcb_correlator_add_activity(self.0, &a) }, RCB_OK, "{}", last_error());
    }
    fn exchange(&self) -> (Output, rcb_correlator_summary) {
        let mut o = Output::default();
        let mut summary = rcb_correlator_summary::default();
        let s = sink(&mut o);
        assert_eq!(unsafe { rcb_correlator_exchange(self.0, &s, &mut summary) }, RCB_OK, "{}", last_error());
        (o, summary)
    }
    fn stats(&self) -> rcb_correlator_counters {
        let mut c = rcb_correlator_counters::default();
        assert_eq!(unsafe { rcb_correlator_stats(self.0, &mut c) }, RCB_OK);
        c
    }
}

fn api(id: u64, start: u64) -> rcb_api_event {
    rcb_api_event { correlation_id: id, start_ns: start, end_ns: start + 500, name: 0xA000 + id, thread_id: 7, kind: 1, flags: 0 }
}

fn act(id: u64, device: u32, start: u64) -> rcb_activity {
    rcb_activity { correlation_id: id, start_ns: start, end_ns: start + 100, name: 0xB000 + id, stream_id: 3, device_id: device, kind: 2 }
}

#[test]
fn a_graph_launch_keeps_all_its_activities() {
    // One hipGraphLaunch: one API event, 1000 kernels under its correlation id.
    let c = correlator();
    let launch = api(42, 1_000);
    c.api(launch);
    // Added in reverse, to show the output order is by start time, not by arrival.
    for k in (0..1000u64).rev() {
        c.act(rcb_activity { name: 0xC000 + k, ..act(42, 0, 10_000 + 10 * k) });
    }
    let (o, s) = c.exchange();
    assert_eq!(o.activities.len(), 1000);
    for (k, (device, a, joined)) in o.activities.iter().enumerate() {
        assert_eq!((*device, a.start_ns, a.name), (0, 10_000 + 10 * k as u64, 0xC000 + k as u64));
        assert_eq!(*joined, Some(launch), "activity {k} lost its API event");
    }
    assert_eq!(o.api_events, vec![(0, launch, Some(rcb_activity { name: 0xC000, ..act(42, 0, 10_000) }), 1000)]);
    assert!(o.dropped.is_empty() && o.duplicates.is_empty() && o.without_activity.is_empty());
    assert_eq!(s, rcb_correlator_summary { activities: 1000, joined_main: 1000, api_events: 1, ..Default::default() }, "summary {s:?}");
}

#[test]
fn ids_that_collide_when_narrowed_to_32_bits_stay_apart() {
    let c = correlator();
    let (low, high) = (1u64, 1 + (1u64 << 32));
    c.api(api(low, 100));
    c.api(api(high, 200));
    c.act(act(high, 0, 1_000));
    c.act(act(low, 0, 2_000));
    c.act(act(high, 1, 3_000));
    let (o, s) = c.exchange();
    let joined: Vec<(u64, u64)> = o.activities.iter().map(|(_, a, j)| (a.correlation_id, j.map_or(0, |e| e.correlation_id))).collect();
    assert_eq!(joined, vec![(high, high), (low, low), (high, high)]);
    assert!(o.duplicates.is_empty(), "{:?}", o.duplicates);
    assert_eq!((s.joined_main, s.api_events, s.duplicate_ids), (3, 2, 0));
    // The 32-bit views of both ids are equal: what the narrowing collector would have merged.
    assert_eq!(low as u32, high as u32);
}

#[test]
fn activities_without_an_api_event_give_one_dropped_report_per_id() {
    let c = correlator();
    c.api(api(12, 0));
    c.act(act(12, 0, 50));
    for k in 0..3 {
        c.act(act(10, 1, 100 + k));
    }
    c.act(act(11, 0, 60));
    let (o, s) = c.exchange();
    assert_eq!(
        o.dropped,
        vec![
            rcb_correlation_report { correlation_id: 10, activities: 3, device_id: 1, ..Default::default() },
            rcb_correlation_report { correlation_id: 11, activities: 1, device_id: 0, ..Default::default() },
        ]
    );
    assert_eq!(o.calls.iter().filter(|c| c.0 == "dropped").count(), 1);
    // They are still reported, once each, with no API event.
    assert_eq!(o.activities.len(), 5);
    assert_eq!(o.activities.iter().filter(|(_, _, j)| j.is_none()).count(), 4);
    assert_eq!((s.dropped_ids, s.without_api, s.joined_main), (2, 4, 1));
}

#[test]
fn duplicate_api_events_are_counted_and_never_replace_each_other() {
    // Added in two orders: the kept event (the earliest) and the reports are the same.
    let events = [
        api(5, 300),
        api(5, 100),
        api(5, 200),
        rcb_api_event { flags: AUX, ..api(6, 10) },
        api(6, 30),
        rcb_api_event { flags: AUX, ..api(6, 20) },
    ];
    let mut outputs = Vec::new();
    for order in [events.to_vec(), events.iter().rev().copied().collect()] {
        let c = correlator();
        for e in order {
            c.api(e);
        }
        c.act(act(5, 0, 1_000));
        c.act(act(6, 0, 2_000));
        let (o, s) = c.exchange();
        assert_eq!(
            o.duplicates,
            vec![
                rcb_correlation_report { correlation_id: 5, activities: 1, api_events: 3, ..Default::default() },
                rcb_correlation_report { correlation_id: 6, activities: 1, api_events: 1, auxiliary_api_events: 2, ..Default::default() },
            ]
        );
        assert_eq!((s.duplicate_ids, s.duplicate_api_events, s.auxiliary_api_events), (2, 3, 2));
        // id 5 keeps its earliest main event; id 6 is joined to its main event, not an auxiliary.
        assert_eq!(o.activities[0].2, Some(api(5, 100)));
        assert_eq!(o.activities[1].2, Some(api(6, 30)));
        // Ordered by start: id 6 (30) before id 5 (100).
        assert_eq!(o.api_events.iter().map(|e| e.1).collect::<Vec<_>>(), vec![api(6, 30), api(5, 100)]);
        outputs.push(o);
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn an_auxiliary_api_event_joins_when_there_is_no_main_one() {
    let c = correlator();
    let aux = rcb_api_event { flags: AUX, ..api(8, 5) };
    c.api(aux);
    c.act(act(8, 2, 40));
    c.api(api(9, 0)); // no activity
    let (o, s) = c.exchange();
    assert_eq!(o.activities, vec![(2, act(8, 2, 40), Some(aux))]);
    // An auxiliary event is never reported alone; the main event without activity goes to its own
    // callback, device RCB_DEVICE_NONE.
    assert!(o.api_events.is_empty());
    assert_eq!(o.without_activity, vec![(RCB_DEVICE_NONE, api(9, 0), None, 0)]);
    assert_eq!((s.joined_auxiliary, s.auxiliary_api_events, s.api_events, s.api_without_activity, s.dropped_ids), (1, 1, 1, 1, 0));
}

#[test]
fn the_output_is_ordered_by_device_then_start_then_id_in_batches_of_one_device() {
    let c = correlator();
    let mut expected = Vec::new();
    let mut x = 0x9E37_79B9u64;
    for k in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = act(1000 + k % 3000, (x % 3) as u32 * 5, x % 50_000);
        c.act(a);
        expected.push(a);
    }
    for id in 1000..4000 {
        c.api(api(id, id));
    }
    let (o, s) = c.exchange();
    expected.sort_by_key(|a| (a.device_id, a.start_ns, a.correlation_id, a.end_ns, a.stream_id, a.kind, a.name));
    assert_eq!(o.activities.iter().map(|x| x.1).collect::<Vec<_>>(), expected);
    assert!(o.activities.iter().all(|(d, a, _)| *d == a.device_id));
    // Batches: at most RCB_CORRELATOR_BATCH, one device each, with the device's total.
    for device in [0, 5, 10] {
        let calls: Vec<_> = o.calls.iter().filter(|c| c.0 == "activities" && c.1 == device).collect();
        let total = expected.iter().filter(|a| a.device_id == device).count();
        assert_eq!(calls.iter().map(|c| c.3).sum::<usize>(), total);
        assert!(calls.iter().all(|c| c.2 == total as u64 && c.3 <= RCB_CORRELATOR_BATCH && c.3 > 0));
    }
    // API events by the device of their first activity, then start.
    let keys: Vec<(u32, u64, u64)> = o.api_events.iter().map(|(d, e, _, _)| (*d, e.start_ns, e.correlation_id)).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(s.api_events, 3000);
}

/// Events over distinct ids (one activity each), shared ids (hundreds each, graph launches),
/// duplicates, auxiliaries and ids without API events, on four devices.
fn mixed_events() -> (Vec<rcb_api_event>, Vec<rcb_activity>) {
    let (mut apis, mut acts) = (Vec::new(), Vec::new());
    for id in 0..4000u64 {
        let big = 1u64 << 40; // ids past 2^32
        let cid = if id % 2 == 0 { id } else { big + id };
        let device = (id % 4) as u32;
        let n = if id % 97 == 0 { 300 } else { 1 + id % 3 };
        for k in 0..n {
            // Equal start times on purpose: ties are broken by the other fields.
            acts.push(rcb_activity { name: k % 5, ..act(cid, device, 1_000 * (id / 7) + 10 * (k / 2)) });
        }
        if id % 50 != 3 {
            apis.push(api(cid, id * 10));
        }
        if id % 11 == 0 {
            apis.push(rcb_api_event { flags: AUX, thread_id: 9, ..api(cid, id * 10 + 1) });
        }
        if id % 101 == 0 {
            apis.push(rcb_api_event { thread_id: 8, ..api(cid, id * 10) }); // same start: a tie
        }
    }
    for id in 100_000..101_000u64 {
        apis.push(api(id, id)); // no activity
    }
    (apis, acts)
}

#[test]
fn sixteen_threads_give_the_single_threaded_output() {
    let (apis, acts) = mixed_events();
    let reference = correlator();
    for e in &apis {
        reference.api(*e);
    }
    for a in &acts {
        reference.act(*a);
    }
    let (expected, expected_summary) = reference.exchange();
    assert!(expected.activities.len() == acts.len() && !expected.dropped.is_empty() && !expected.duplicates.is_empty());

    for shards in [0, 1, 4096] {
        let c = correlator_with(rcb_correlator_config { shards, ..Default::default() });
        std::thread::scope(|s| {
            for t in 0..16usize {
                let (c, apis, acts) = (&c, &apis, &acts);
                s.spawn(move || {
                    // Interleaved: thread t takes every 16th chunk of 37 events, half of the
                    // threads one call per event, the others one call per chunk.
                    for (i, chunk) in apis.chunks(37).enumerate().filter(|(i, _)| i % 16 == t) {
                        if (t + i) % 2 == 0 {
                            chunk.iter().for_each(|e| c.api(*e));
                        } else {
                            assert_eq!(unsafe { rcb_correlator_add_api_events(c.0, chunk.as_ptr(), chunk.len()) }, RCB_OK);
                        }
                    }
                    for (i, chunk) in acts.chunks(37).enumerate().filter(|(i, _)| i % 16 == (t + 5) % 16) {
                        if (t + i) % 2 == 0 {
                            chunk.iter().for_each(|a| c.act(*a));
                        } else {
                            assert_eq!(unsafe { rcb_correlator_add_activities(c.0, chunk.as_ptr(), chunk.len()) }, RCB_OK);
                        }
                    }
                });
            }
        });
        let (o, summary) = c.exchange();
        assert_eq!(summary, expected_summary, "shards {shards}");
        assert!(o == expected, "shards {shards}: the 16-thread output differs from the single-threaded one");
    }
}

#[test]
fn the_same_events_give_the_same_output_run_after_run() {
    let (apis, acts) = mixed_events();
    let mut runs = Vec::new();
    for run in 0..3 {
        let c = correlator();
        // Each run adds in another order: reversed, or rotated.
        let (mut a, mut b) = (apis.clone(), acts.clone());
        match run {
            1 => {
                a.reverse();
                b.reverse();
            }
            2 => {
                a.rotate_left(1234);
                b.rotate_left(4321);
            }
            _ => {}
        }
        for e in &a {
            c.api(*e);
        }
        for x in &b {
            c.act(*x);
        }
        runs.push(c.exchange());
    }
    assert!(runs[0] == runs[1] && runs[1] == runs[2], "outputs differ between runs");
}

#[test]
fn a_second_exchange_is_empty_and_clearing_keeps_capacity() {
    let c = correlator();
    for k in 0..5000 {
        c.api(api(k, k));
        c.act(act(k, 0, k));
    }
    let (o, _) = c.exchange();
    assert_eq!(o.activities.len(), 5000);
    let (o, s) = c.exchange();
    assert!(o.calls.is_empty(), "a second exchange reported {:?}", o.calls);
    assert_eq!(s, rcb_correlator_summary::default());
    let after_flush = c.stats();
    assert_eq!((after_flush.pending_activities, after_flush.pending_api_events), (0, 0));
    assert!(after_flush.reserved_bytes >= 5000 * 2 * 48, "capacity given back: {after_flush:?}");

    for k in 0..5000 {
        c.act(act(k, 0, k));
    }
    assert_eq!(c.stats().pending_activities, 5000);
    assert_eq!(unsafe { rcb_correlator_clear(c.0) }, RCB_OK);
    let cleared = c.stats();
    assert_eq!((cleared.pending_activities, cleared.reserved_bytes), (0, after_flush.reserved_bytes));
    assert!(c.exchange().0.calls.is_empty());
    // Sessions of the same size reuse the memory: it does not grow.
    for _ in 0..3 {
        for k in 0..5000 {
            c.api(api(k, k));
            c.act(act(k, 0, k));
        }
        let (o, _) = c.exchange();
        assert_eq!(o.activities.len(), 5000);
        assert_eq!(c.stats().reserved_bytes, after_flush.reserved_bytes);
    }
    let totals = c.stats();
    assert_eq!((totals.added_activities, totals.added_api_events), (25_000, 20_000));

    // Trimming gives the memory back but keeps pending events.
    for k in 0..10 {
        c.act(act(k, 0, k));
    }
    assert_eq!(unsafe { rcb_correlator_trim(c.0) }, RCB_OK);
    let trimmed = c.stats();
    assert_eq!(trimmed.pending_activities, 10);
    assert!(trimmed.reserved_bytes < after_flush.reserved_bytes / 10, "{trimmed:?}");
    assert_eq!(c.exchange().0.activities.len(), 10);
}

#[test]
fn a_failing_callback_keeps_every_event_for_the_next_exchange() {
    let c = correlator();
    for k in 0..10_000u64 {
        c.api(api(k, k));
        c.act(act(k, (k % 2) as u32, k));
    }
    let (expected, _) = {
        let r = correlator();
        for k in 0..10_000u64 {
            r.api(api(k, k));
            r.act(act(k, (k % 2) as u32, k));
        }
        r.exchange()
    };
    let mut o = Output { fail_at: Some(1), ..Default::default() };
    let s = sink(&mut o);
    let mut summary = rcb_correlator_summary { activities: 99, ..Default::default() };
    assert_eq!(unsafe { rcb_correlator_exchange(c.0, &s, &mut summary) }, RCB_STATUS_CALLBACK_FAILED);
    assert!(last_error().contains("`activities` callback returned 7"), "{}", last_error());
    assert_eq!(summary.activities, 99, "the summary is written on success only");
    assert_eq!(c.stats().pending_activities, 10_000);
    assert_eq!(c.exchange().0, expected);
}

#[test]
fn events_added_during_an_exchange_go_to_the_next_one() {
    let c = correlator();
    c.api(api(1, 0));
    c.act(act(1, 0, 10));
    let late = act(2, 0, 20);
    let mut o = Output { add_inside: Some((c.0, late)), ..Default::default() };
    let s = sink(&mut o);
    let mut summary = rcb_correlator_summary::default();
    assert_eq!(unsafe { rcb_correlator_exchange(c.0, &s, &mut summary) }, RCB_OK, "{}", last_error());
    assert_eq!(o.activities.len(), 1);
    let (next, _) = c.exchange();
    assert_eq!(next.activities, vec![(0, late, None)]);
}

#[test]
fn callbacks_left_null_are_skipped() {
    let c = correlator();
    c.api(api(1, 0));
    c.act(act(1, 0, 10));
    c.act(act(2, 0, 10));
    let mut o = Output::default();
    let s = rcb_correlator_sink { activities: None, api_events: None, api_events_without_activity: None, duplicates: None, ..sink(&mut o) };
    let mut summary = rcb_correlator_summary::default();
    assert_eq!(unsafe { rcb_correlator_exchange(c.0, &s, &mut summary) }, RCB_OK);
    assert_eq!(o.calls, vec![("dropped", 0, 0, 1)]);
    assert_eq!((summary.activities, summary.dropped_ids), (2, 1));
}

#[test]
fn limits_refuse_events_and_count_them() {
    let c = correlator_with(rcb_correlator_config { max_activities: 3, max_api_events: 1, ..Default::default() });
    for k in 0..3 {
        c.act(act(k, 0, k));
    }
    assert_eq!(unsafe { rcb_correlator_add_activity(c.0, &act(9, 0, 9)) }, RCB_STATUS_OUT_OF_MEMORY);
    assert!(last_error().contains("limit of 3 activities"), "{}", last_error());
    let two = [act(10, 0, 0), act(11, 0, 0)];
    assert_eq!(unsafe { rcb_correlator_add_activities(c.0, two.as_ptr(), 2) }, RCB_STATUS_OUT_OF_MEMORY);
    c.api(api(0, 0));
    assert_eq!(unsafe { rcb_correlator_add_api_event(c.0, &api(1, 0)) }, RCB_STATUS_OUT_OF_MEMORY);
    assert_eq!(c.stats().over_limit, 4);
    assert_eq!(c.exchange().0.activities.len(), 3);
    // The exchange made room again.
    assert_eq!(unsafe { rcb_correlator_add_activities(c.0, two.as_ptr(), 2) }, RCB_OK);
    assert_eq!(unsafe { rcb_correlator_clear(c.0) }, RCB_OK);
    for k in 0..3 {
        c.act(act(k, 0, k));
    }
}

#[test]
fn bad_input_gets_its_status_and_changes_nothing() {
    let mut c = null_mut();
    assert_eq!(unsafe { rcb_correlator_new(null(), &mut c) }, RCB_STATUS_NULL_ARGUMENT);
    let config = rcb_correlator_config::default();
    assert_eq!(unsafe { rcb_correlator_new(&config, null_mut()) }, RCB_STATUS_NULL_ARGUMENT);
    let bad = rcb_correlator_config { shards: RCB_CORRELATOR_MAX_SHARDS + 1, ..Default::default() };
    assert_eq!(unsafe { rcb_correlator_new(&bad, &mut c) }, RCB_STATUS_INVALID_ARGUMENT);
    let unsized_config = rcb_correlator_config { struct_size: 0, ..Default::default() };
    assert_eq!(unsafe { rcb_correlator_new(&unsized_config, &mut c) }, RCB_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("`config->struct_size` is 0"), "{}", last_error());
    assert!(c.is_null(), "an output written on failure");

    let live = correlator();
    let e = api(1, 0);
    let a = act(1, 0, 0);
    assert_eq!(unsafe { rcb_correlator_add_api_event(null_mut(), &e) }, RCB_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("`c`"));
    assert_eq!(unsafe { rcb_correlator_add_api_event(live.0, null()) }, RCB_STATUS_NULL_ARGUMENT);
    assert!(last_error().contains("`event`"));
    assert_eq!(unsafe { rcb_correlator_add_activity(live.0, null()) }, RCB_STATUS_NULL_ARGUMENT);
    assert_eq!(unsafe { rcb_correlator_add_activities(live.0, null(), 3) }, RCB_STATUS_NULL_ARGUMENT);
    assert_eq!(unsafe { rcb_correlator_add_activities(live.0, null(), 0) }, RCB_OK);
    let flagged = rcb_api_event { flags: 6, ..e };
    assert_eq!(unsafe { rcb_correlator_add_api_event(live.0, &flagged) }, RCB_STATUS_INVALID_ARGUMENT);
    let batch = [e, flagged];
    assert_eq!(unsafe { rcb_correlator_add_api_events(live.0, batch.as_ptr(), 2) }, RCB_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("events[1]"), "{}", last_error());
    assert_eq!(live.stats().pending_api_events, 0, "a refused batch adds nothing");
    let forged = 0x1234usize as *mut rcb_correlator;
    assert_eq!(unsafe { rcb_correlator_add_activity(forged, &a) }, RCB_STATUS_INVALID_HANDLE);
    let mut summary = rcb_correlator_summary::default();
    let mut o = Output::default();
    let s = sink(&mut o);
    assert_eq!(unsafe { rcb_correlator_exchange(live.0, null(), &mut summary) }, RCB_STATUS_NULL_ARGUMENT);
    assert_eq!(unsafe { rcb_correlator_exchange(live.0, &s, null_mut()) }, RCB_STATUS_NULL_ARGUMENT);
    assert_eq!(unsafe { rcb_correlator_stats(live.0, null_mut()) }, RCB_STATUS_NULL_ARGUMENT);
    assert_eq!(unsafe { rcb_correlator_clear(null_mut()) }, RCB_STATUS_NULL_ARGUMENT);

    // Freed: every call reports the handle, a second free too, and free(NULL) is a no-op.
    let freed = correlator();
    let h = freed.0;
    freed.act(a);
    assert_eq!(unsafe { rcb_correlator_free(h) }, RCB_OK);
    std::mem::forget(freed);
    assert_eq!(unsafe { rcb_correlator_add_activity(h, &a) }, RCB_STATUS_INVALID_HANDLE);
    assert!(last_error().contains("rcb_correlator"), "{}", last_error());
    assert_eq!(unsafe { rcb_correlator_exchange(h, &s, &mut summary) }, RCB_STATUS_INVALID_HANDLE);
    assert_eq!(unsafe { rcb_correlator_free(h) }, RCB_STATUS_INVALID_HANDLE);
    assert_eq!(unsafe { rcb_correlator_free(null_mut()) }, RCB_OK);
}

#[test]
fn a_handle_freed_on_another_thread_is_refused_on_this_one() {
    let c = correlator();
    let h = c.0 as usize;
    std::mem::forget(c);
    // This thread uses the correlator (and keeps it in its cache), another one frees it.
    assert_eq!(unsafe { rcb_correlator_add_activity(h as *mut _, &act(1, 0, 0)) }, RCB_OK);
    std::thread::spawn(move || assert_eq!(unsafe { rcb_correlator_free(h as *mut _) }, RCB_OK)).join().unwrap();
    assert_eq!(unsafe { rcb_correlator_add_activity(h as *mut _, &act(2, 0, 0)) }, RCB_STATUS_INVALID_HANDLE);
    // Two live correlators used in turn on one thread stay apart.
    let (a, b) = (correlator(), correlator());
    for k in 0..10 {
        a.act(act(k, 0, k));
        b.act(act(k + 100, 1, k));
    }
    let ((oa, _), (ob, _)) = (a.exchange(), b.exchange());
    assert!(oa.activities.iter().all(|x| x.1.correlation_id < 100) && oa.activities.len() == 10);
    assert!(ob.activities.iter().all(|x| x.1.correlation_id >= 100) && ob.activities.len() == 10);
}

/// A sink's callback that frees the correlator of its exchange: the free is refused (it would
/// wait forever for the exchange it runs in), the exchange completes, the handle stays live.
#[test]
fn a_sink_that_frees_its_correlator_gets_an_error_not_a_deadlock() {
    struct Freeing {
        c: *mut rcb_correlator,
        status: Option<rcb_status>,
        message: String,
    }
    unsafe extern "C" fn free_inside(user: *mut c_void, _: u32, _: u64, _: *const rcb_correlated_activity, _: usize) -> i32 {
        let f = unsafe { &mut *(user as *mut Freeing) };
        f.status = Some(unsafe { rcb_correlator_free(f.c) });
        f.message = last_error();
        0
    }
    let c = correlator();
    c.api(api(1, 10));
    c.act(act(1, 0, 20));
    let mut f = Freeing { c: c.0, status: None, message: String::new() };
    let s = rcb_correlator_sink {
        user_data: (&raw mut f).cast(),
        activities: Some(free_inside),
        api_events: None,
        api_events_without_activity: None,
        dropped: None,
        duplicates: None,
        ..Default::default()
    };
    let mut summary = rcb_correlator_summary::default();
    assert_eq!(unsafe { rcb_correlator_exchange(c.0, &s, &mut summary) }, RCB_OK, "{}", last_error());
    assert_eq!(f.status, Some(RCB_STATUS_INVALID_STATE), "{}", f.message);
    assert!(f.message.contains("exchanging"), "{}", f.message);
    assert_eq!(summary.joined_main, 1);
    // Still live and usable; freed for real by the guard.
    c.act(act(2, 0, 30));
    assert_eq!(c.stats().pending_activities, 1);
}
