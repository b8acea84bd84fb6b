//! Scenario `streams`: the stream handle cache against creating and destroying streams, per
//! stream and for the 112 streams of a PjRt client. Goes through the C ABI, as a caller would.

use crate::table::{Table, median_ns, ratio, time};
use rocm_cmdbuf::ffi::{
    RCB_OK, rcb_last_error_message, rcb_status, rcb_stream_acquire, rcb_stream_cache_stats, rcb_stream_cache_trim, rcb_stream_release,
    rcb_stream_release_idle, rcb_stream_stats,
};
use rocm_cmdbuf::runtime::{Runtime, Stream};

/// Streams a PjRt client creates. They are spread over the devices and alternate between
/// blocking and non-blocking, so no (device, flags, priority) key needs more than 56 of them:
/// within the default `RCB_STREAM_CACHE_MAX_PER_KEY` of 64 even on one device.
const CLIENT_STREAMS: usize = 112;
/// Cache hits timed together: one hit is too short for the clock.
const HIT_BATCH: usize = 10_000;

pub fn run(rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let (runs, client_runs) = if quick { (3, 1) } else { (21, 5) };
    if let Ok(latency) = std::env::var("HIPSIM_LATENCY") {
        println!("\nsoftware GPU latencies: HIPSIM_LATENCY={latency}");
    }
    check(rcb_stream_cache_trim(-1))?;
    let result = per_stream(rt, runs).and_then(|()| client(rt, client_runs));
    check(rcb_stream_cache_trim(-1))?;
    result
}

fn per_stream(rt: &dyn Runtime, runs: usize) -> Result<(), String> {
    let mut failure = None;
    let raw = median_ns(runs, || {
        if let Err(e) = rt.stream_create(0, 0, 0).and_then(|s| rt.stream_destroy(s)) {
            failure.get_or_insert(e.to_string());
        }
    });
    // A release asks the runtime whether the stream is idle: that call is the floor of a hit.
    let s = acquire(0, 0)?;
    let query = median_ns(runs, || {
        for _ in 0..HIT_BATCH {
            std::hint::black_box(rt.stream_is_idle(s)).ok();
        }
    }) / HIT_BATCH as f64;
    release(s)?;
    let before = stats()?;
    let hit = median_ns(runs, || {
        for _ in 0..HIT_BATCH {
            if let Err(e) = acquire(0, 0).and_then(release) {
                failure.get_or_insert(e);
            }
        }
    }) / HIT_BATCH as f64;
    // Nothing is ever enqueued on these streams, so each is idle as rcb_stream_release_idle's
    // caller promises: the release skips the query.
    let hit_idle = median_ns(runs, || {
        for _ in 0..HIT_BATCH {
            if let Err(e) = acquire(0, 0).and_then(release_idle) {
                failure.get_or_insert(e);
            }
        }
    }) / HIT_BATCH as f64;
    if let Some(e) = failure {
        return Err(e);
    }
    let missed = stats()?.misses - before.misses;
    if missed != 0 {
        return Err(format!("{missed} measured acquire(s) missed the cache"));
    }
    let mut t = Table::new("stream acquire + release (cache hit) vs create + destroy", &["what", "per stream", "speed-up"]);
    t.row(vec!["create + destroy (baseline)".into(), time(raw), "1.0×".into()]);
    t.row(vec!["`rcb_stream_acquire` + `rcb_stream_release`, hit".into(), time(hit), ratio(raw, hit)]);
    t.row(vec!["of which the runtime's stream query".into(), time(query), String::new()]);
    t.row(vec!["of which the cache itself".into(), time(hit - query), String::new()]);
    t.row(vec!["`rcb_stream_acquire` + `rcb_stream_release_idle`, hit (no query)".into(), time(hit_idle), ratio(raw, hit_idle)]);
    t.print();
    Ok(())
}

fn client(rt: &dyn Runtime, runs: usize) -> Result<(), String> {
    let mut failure = None;
    let devices = rt.info().device_count;
    let key = |i: usize| ((i as i32) % devices, ((i as i32 / devices) % 2) as u32);
    let raw = median_ns(runs, || {
        let streams: Result<Vec<Stream>, _> =
            (0..CLIENT_STREAMS).map(key).map(|(device, flags)| rt.stream_create(device, flags, 0)).collect();
        let destroyed = streams.and_then(|streams| streams.into_iter().try_for_each(|s| rt.stream_destroy(s)));
        if let Err(e) = destroyed {
            failure.get_or_insert(e.to_string());
        }
    });
    // median_ns warms up with one untimed cycle: it fills the empty cache, the timed ones hit.
    check(rcb_stream_cache_trim(-1))?;
    let before = stats()?;
    let cached = median_ns(runs, || {
        let cycle = (0..CLIENT_STREAMS)
            .map(key)
            .map(|(device, flags)| acquire(device, flags))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|streams| streams.into_iter().try_for_each(release));
        if let Err(e) = cycle {
            failure.get_or_insert(e);
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let missed = stats()?.misses - before.misses;
    if missed != CLIENT_STREAMS as u64 {
        return Err(format!("{missed} acquires missed the cache; expected only the warm-up's {CLIENT_STREAMS}"));
    }
    let title = format!("client re-creation: {CLIENT_STREAMS} streams over {devices} device(s), half non-blocking");
    let mut t = Table::new(title, &["what", "per cycle", "speed-up"]);
    t.row(vec![format!("create {CLIENT_STREAMS} + destroy {CLIENT_STREAMS} (baseline)"), time(raw), "1.0×".into()]);
    t.row(vec![format!("acquire {CLIENT_STREAMS} + release {CLIENT_STREAMS}, warm cache"), time(cached), ratio(raw, cached)]);
    t.print();
    Ok(())
}

fn acquire(device: i32, flags: u32) -> Result<Stream, String> {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check(unsafe { rcb_stream_acquire(device, flags, 0, &mut s) })?;
    Ok(Stream(s))
}

fn release(s: Stream) -> Result<(), String> {
    check(rcb_stream_release(s.0))
}

fn release_idle(s: Stream) -> Result<(), String> {
    check(rcb_stream_release_idle(s.0))
}

/// Summed over every device.
fn stats() -> Result<rcb_stream_stats, String> {
    let mut s = rcb_stream_stats::default();
    // SAFETY: valid out-pointer.
    check(unsafe { rcb_stream_cache_stats(-1, &mut s) })?;
    Ok(s)
}

fn check(status: rcb_status) -> Result<(), String> {
    if status == RCB_OK {
        return Ok(());
    }
    let mut buf = [0 as std::ffi::c_char; 512];
    // SAFETY: buf is writable for its length.
    unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: always NUL-terminated.
    Err(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}
