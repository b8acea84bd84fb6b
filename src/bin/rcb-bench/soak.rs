//! Scenario `soak` (run only when named; `--quick` is the short version CI runs): what a
//! long-lived process sees after many steps.
//!
//! 1. One million address updates (`--quick`: 20 000) of a primary command buffer of 100
//!    kernel nodes, alternating between two tables in which every one of the 300 allocations
//!    differs (each update patches 300 sites and re-sends 100 nodes); ten times along the way
//!    and at the end it is launched and every output checked at the current placement.
//! 2. 100 000 create/free cycles (`--quick`: 2 000) of each object kind, each used once in
//!    between: a command buffer, a trace cache, a stream of the cache (then trimmed), a VMM pool
//!    of each backing, a correlator.
//!
//! Printed: the process's resident set size at the start, after a tenth and at the end, and the
//! mean time per update or cycle. The scenario fails when the resident set grows by more than
//! 16 MiB after the first tenth, when a call fails or an output is wrong, and, on the software
//! GPU, when its live objects (allocations, graphs, executable graphs, streams, VMM handles and
//! mappings) differ before and after a part.

use crate::table::{Table, time};
use crate::update::{add_args, add_launch};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Function, KernelParams, Runtime, Stream};
use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

type R<T> = Result<T, String>;

const NODES: usize = 100;
const ELEMENTS: usize = 16;
const BYTES: usize = ELEMENTS * 4;
/// How much the resident set may grow after the first tenth of a soak (allocator noise).
const RSS_SLACK: u64 = 16 << 20;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn status(what: &str, s: rcb_status) -> R<()> {
    if s == RCB_OK {
        return Ok(());
    }
    let mut buf = [0 as c_char; 512];
    // SAFETY: a writable buffer of the given length.
    unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: the export NUL-terminated the buffer.
    Err(format!("{what}: status {s}: {}", unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy()))
}

/// The process's resident set size in bytes (`VmRSS` of /proc/self/status).
fn rss() -> R<u64> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(err)?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or("no VmRSS in /proc/self/status")?;
    Ok(kib << 10)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The software GPU's live-object counters (`hipsimLiveCount`), when it is the runtime.
struct LiveObjects {
    count: Option<unsafe extern "C" fn(*const c_char) -> u64>,
    _lib: Option<libloading::Library>,
}

const KINDS: [&CStr; 8] = [c"alloc", c"physical", c"reservation", c"mapping", c"stream", c"event", c"graph", c"exec"];

impl LiveObjects {
    fn new(rt: &dyn Runtime) -> LiveObjects {
        // SAFETY: the runtime's own library, already loaded; only probed for hipsim's counter.
        let lib = unsafe { libloading::Library::new(rt.info().library.as_str()) }.ok();
        // SAFETY: hipsimLiveCount takes a NUL-terminated name and returns a count.
        let count = lib
            .as_ref()
            .and_then(|l| unsafe { l.get::<unsafe extern "C" fn(*const c_char) -> u64>(b"hipsimLiveCount\0") }.ok().map(|f| *f));
        LiveObjects { count, _lib: lib }
    }

    fn snapshot(&self) -> Option<Vec<u64>> {
        // SAFETY: NUL-terminated names; the function is hipsim's.
        self.count.map(|f| KINDS.iter().map(|k| unsafe { f(k.as_ptr()) }).collect())
    }

    /// Fails when a counter moved since `before`; the cell says what was checked.
    fn compare(&self, before: &Option<Vec<u64>>, what: &str) -> R<String> {
        let (Some(before), Some(now)) = (before, self.snapshot()) else { return Ok("(real GPU: not counted)".into()) };
        for (k, (b, n)) in KINDS.iter().zip(before.iter().zip(&now)) {
            if b != n {
                return Err(format!("{what}: {} live {} objects before, {n} after", b, k.to_string_lossy()));
            }
        }
        Ok("unchanged".into())
    }
}

/// Resident set size at the start, after a tenth of the iterations, and at the end, and the
/// time the iterations took (without `check`, run ten times along the way and at the end).
struct Run {
    rss: [u64; 3],
    busy: Duration,
}

fn soak(iterations: usize, mut step: impl FnMut(usize) -> R<()>, mut check: impl FnMut() -> R<()>) -> R<Run> {
    let mut run = Run { rss: [rss()?, 0, 0], busy: Duration::ZERO };
    let tenth = (iterations / 10).max(1);
    let mut i = 0;
    while i < iterations {
        let end = (i + tenth).min(iterations);
        let t = Instant::now();
        for j in i..end {
            step(j)?;
        }
        run.busy += t.elapsed();
        check()?;
        if i == 0 {
            run.rss[1] = rss()?;
        }
        i = end;
    }
    run.rss[2] = rss()?;
    // Flat: what the first tenth set up may stay, but the rest must not keep growing.
    if run.rss[2] > run.rss[1] + RSS_SLACK {
        return Err(format!("the resident set grew from {} to {} after the first tenth", mib(run.rss[1]), mib(run.rss[2])));
    }
    Ok(run)
}

fn per(run: &Run, iterations: usize) -> String {
    time(run.busy.as_nanos() as f64 / iterations.max(1) as f64)
}

pub fn run(rt: &'static dyn Runtime, quick: bool) -> R<()> {
    let (updates, cycles) = if quick { (20_000, 2_000) } else { (1_000_000, 100_000) };
    let live = LiveObjects::new(rt);
    // Settled before the first snapshot: the process's first command buffer settles the update
    // budget, whose probe keeps a 128-byte buffer for the process.
    rocm_cmdbuf::settle_budget(rt).map_err(err)?;
    let add = crate::kernels::load(rt, "rcb_test_add_f32")?;
    let stream = rt.stream_create(0, 1, 0).map_err(err)?;
    let mut table = Table::new(
        format!("soak: resident set size and mean time per iteration ({updates} updates, {cycles} cycles per object kind)"),
        &["what", "iterations", "RSS at start", "after a tenth", "at the end", "per iteration", "software GPU's live objects"],
    );

    let before = live.snapshot();
    let r = updates_soak(rt, add, stream, updates)?;
    let objects = live.compare(&before, "updates")?;
    table.row(vec![
        format!("address update of {NODES} kernel nodes, 300 allocations moved (`rcb_cmdbuf_update_allocations`)"),
        updates.to_string(),
        mib(r.rss[0]),
        mib(r.rss[1]),
        mib(r.rss[2]),
        per(&r, updates),
        objects,
    ]);

    let kinds: [(&str, CycleFn); 6] = [
        ("command buffer: new, table, kernel, finalize, free", cmdbuf_cycle),
        ("trace cache: new, one capture, free", trace_cache_cycle),
        ("stream: acquire, release, trim", stream_cycle),
        ("VMM pool, VMM backing: new, acquire, release, free", |c| pool_cycle(c, RCB_VMM_BACKING_VMM)),
        ("VMM pool, device backing: new, acquire, release, free", |c| pool_cycle(c, RCB_VMM_BACKING_DEVICE)),
        ("correlator: new, 16 + 16 events, exchange, free", correlator_cycle),
    ];
    let x = rt.malloc(0, BYTES).map_err(err)?;
    for (name, cycle) in kinds {
        let mut c = Cycle { rt, add, stream, x };
        let before = live.snapshot();
        let r = soak(cycles, |_| cycle(&mut c), || rt.stream_synchronize(stream).map_err(err))?;
        let objects = live.compare(&before, name)?;
        table.row(vec![name.into(), cycles.to_string(), mib(r.rss[0]), mib(r.rss[1]), mib(r.rss[2]), per(&r, cycles), objects]);
    }
    rt.free(x).map_err(err)?;
    rt.stream_destroy(stream).map_err(err)?;
    table.print();
    Ok(())
}

/// `out = x + y` for every node, over its own three allocations in placement `a` or `b`.
fn updates_soak(rt: &'static dyn Runtime, add: Function, stream: Stream, updates: usize) -> R<Run> {
    let mut placements = [Vec::new(), Vec::new()];
    for p in &mut placements {
        for _ in 0..3 * NODES {
            p.push(rt.malloc(0, BYTES).map_err(err)?);
        }
    }
    let tables: Vec<Vec<rcb_allocation>> =
        placements.iter().map(|p| p.iter().map(|&base| rcb_allocation { base, size: BYTES as u64 }).collect()).collect();
    // Both placements hold the same inputs: x = i, y = node.
    for p in &placements {
        for node in 0..NODES {
            write_f32(rt, p[3 * node + 1], &(0..ELEMENTS).map(|i| i as f32).collect::<Vec<_>>())?;
            write_f32(rt, p[3 * node + 2], &[node as f32; ELEMENTS])?;
        }
    }
    let cb = record(add, &placements[0])?;
    let current = std::cell::Cell::new(0);
    let check = |current: usize| -> R<()> {
        let p = &placements[current];
        for node in 0..NODES {
            write_f32(rt, p[3 * node], &[-1.0; ELEMENTS])?;
        }
        // SAFETY: a live, finalized handle and a stream of the runtime.
        status("rcb_cmdbuf_launch", unsafe { rcb_cmdbuf_launch(cb, stream.0) })?;
        rt.stream_synchronize(stream).map_err(err)?;
        for node in 0..NODES {
            let out = read_f32(rt, p[3 * node])?;
            if out.iter().enumerate().any(|(i, &v)| v != i as f32 + node as f32) {
                return Err(format!("node {node} computed {out:?} at placement {current}"));
            }
        }
        Ok(())
    };
    check(0)?;
    let run = soak(
        updates,
        |_| {
            current.set(current.get() ^ 1);
            let t = &tables[current.get()];
            let mut report = rcb_update_report::default();
            // SAFETY: a live handle, a table of t.len() entries, a writable report.
            status("rcb_cmdbuf_update_allocations", unsafe { rcb_cmdbuf_update_allocations(cb, t.as_ptr(), t.len(), &mut report) })?;
            if report.needs_rerecord != 0 || report.moved_allocations != 300 || report.updated_nodes != NODES as u64 {
                return Err(format!("update report {report:?}"));
            }
            Ok(())
        },
        || check(current.get()),
    );
    // SAFETY: a live handle, freed once.
    let freed = status("rcb_cmdbuf_free", unsafe { rcb_cmdbuf_free(cb) });
    for &p in placements.iter().flatten() {
        rt.free(p).map_err(err)?;
    }
    freed?;
    run
}

fn record(add: Function, placement: &[u64]) -> R<*mut rcb_cmdbuf> {
    let mut cb = null_mut();
    // SAFETY: a valid out-pointer.
    status("rcb_cmdbuf_new", unsafe { rcb_cmdbuf_new(0, &mut cb) })?;
    // The budget of a runtime whose updates leak, whatever the measurement found here, so that
    // the updates also re-instantiate (every 113 at the fixed charge).
    // SAFETY: a live handle, not yet finalized.
    status("rcb_cmdbuf_set_exec_update_budget", unsafe { rcb_cmdbuf_set_exec_update_budget(cb, rocm_cmdbuf::DEFAULT_BUDGET_BYTES) })?;
    let table: Vec<rcb_allocation> = placement.iter().map(|&base| rcb_allocation { base, size: BYTES as u64 }).collect();
    // SAFETY: a live handle and a table of table.len() entries.
    status("rcb_cmdbuf_set_allocations", unsafe { rcb_cmdbuf_set_allocations(cb, table.as_ptr(), table.len()) })?;
    let mut prev: Option<rcb_node> = None;
    for node in 0..NODES {
        let values = [placement[3 * node], placement[3 * node + 1], placement[3 * node + 2], ELEMENTS as u64];
        let args = add_args(&values);
        let mut node = 0;
        let deps: &[rcb_node] = prev.as_slice();
        // SAFETY: a live handle, `deps.len()` handles, a launch whose arguments outlive the call.
        status("rcb_cmdbuf_add_kernel", unsafe {
            rcb_cmdbuf_add_kernel(cb, deps.as_ptr(), deps.len(), &add_launch(add, &args, ELEMENTS as u32), &mut node)
        })?;
        prev = Some(node);
    }
    // SAFETY: a live handle.
    status("rcb_cmdbuf_finalize", unsafe { rcb_cmdbuf_finalize(cb) })?;
    Ok(cb)
}

fn write_f32(rt: &dyn Runtime, ptr: u64, values: &[f32]) -> R<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    rt.direct().copy_to_device(ptr, &bytes).map_err(err)
}

fn read_f32(rt: &dyn Runtime, ptr: u64) -> R<Vec<f32>> {
    let mut bytes = vec![0u8; BYTES];
    rt.direct().copy_from_device(&mut bytes, ptr).map_err(err)?;
    Ok(bytes.chunks_exact(4).map(|c| f32::from_ne_bytes(c.try_into().expect("4 bytes"))).collect())
}

type CycleFn = fn(&mut Cycle) -> R<()>;

/// What a create/free cycle uses: the runtime, the add kernel, a stream and one allocation.
struct Cycle {
    rt: &'static dyn Runtime,
    add: Function,
    stream: Stream,
    x: u64,
}

fn cmdbuf_cycle(c: &mut Cycle) -> R<()> {
    let mut cb = null_mut();
    // SAFETY: a valid out-pointer.
    status("rcb_cmdbuf_new", unsafe { rcb_cmdbuf_new(0, &mut cb) })?;
    let table = [rcb_allocation { base: c.x, size: BYTES as u64 }];
    let values = [c.x, c.x, c.x, ELEMENTS as u64];
    let args = add_args(&values);
    let mut node = 0;
    // SAFETY: a live handle, a one-entry table, a launch whose arguments outlive the call.
    let used = unsafe {
        status("rcb_cmdbuf_set_allocations", rcb_cmdbuf_set_allocations(cb, table.as_ptr(), 1))
            .and_then(|()| {
                status("rcb_cmdbuf_add_kernel", rcb_cmdbuf_add_kernel(cb, null(), 0, &add_launch(c.add, &args, ELEMENTS as u32), &mut node))
            })
            .and_then(|()| status("rcb_cmdbuf_finalize", rcb_cmdbuf_finalize(cb)))
    };
    // SAFETY: a live handle, freed once.
    let freed = status("rcb_cmdbuf_free", unsafe { rcb_cmdbuf_free(cb) });
    used.and(freed)
}

/// The traced command: one add kernel on the captured stream.
unsafe extern "C" fn trace_add(user_data: *mut c_void, stream: *mut c_void) -> i32 {
    // SAFETY: the cycle passes its own `Cycle`, alive for the call.
    let c = unsafe { &*(user_data as *const Cycle) };
    let blob: Vec<u8> = [c.x, c.x, c.x, ELEMENTS as u64].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let params = KernelParams { function: c.add, grid: [1, 1, 1], block: [ELEMENTS as u32, 1, 1], shared_mem_bytes: 0, args: &blob };
    i32::from(c.rt.direct().launch_kernel(&params, Stream(stream)).is_err())
}

fn trace_cache_cycle(c: &mut Cycle) -> R<()> {
    let mut tc = null_mut();
    // SAFETY: a valid out-pointer.
    status("rcb_trace_cache_new", unsafe { rcb_trace_cache_new(2, &mut tc) })?;
    let table = [rcb_allocation { base: c.x, size: BYTES as u64 }];
    let (mut graph, mut outcome) = (null_mut(), 0);
    // SAFETY: a live cache, a one-entry table, user data alive for the call, writable outputs.
    let traced = status("rcb_trace_cache_get_or_trace", unsafe {
        rcb_trace_cache_get_or_trace(
            tc,
            c.stream.0,
            table.as_ptr(),
            1,
            Some(trace_add),
            c as *mut Cycle as *mut c_void,
            &mut graph,
            &mut outcome,
        )
    });
    // SAFETY: a live handle, freed once.
    let freed = status("rcb_trace_cache_free", unsafe { rcb_trace_cache_free(tc) });
    traced.and(freed)?;
    if outcome != RCB_TRACE_TRACED {
        return Err(format!("a new cache's first call gave outcome {outcome}"));
    }
    Ok(())
}

fn stream_cycle(_: &mut Cycle) -> R<()> {
    let mut s = null_mut();
    // SAFETY: a valid out-pointer; the stream is released once.
    unsafe {
        status("rcb_stream_acquire", rcb_stream_acquire(0, 0, 0, &mut s))?;
        status("rcb_stream_release", rcb_stream_release(s))?;
        status("rcb_stream_cache_trim", rcb_stream_cache_trim(0))
    }
}

fn pool_cycle(c: &mut Cycle, backing: u32) -> R<()> {
    let sizes = [BYTES as u64];
    let config = rcb_vmm_pool_config {
        device: 0,
        backing,
        num_slots: 2,
        num_buffers: 1,
        buffer_sizes: sizes.as_ptr(),
        num_peers: 0,
        peers: null(),
        timeout_ms: 0,
        ..Default::default()
    };
    let mut pool = null_mut();
    // SAFETY: a valid config whose array outlives the call, a valid out-pointer.
    status("rcb_vmm_pool_new", unsafe { rcb_vmm_pool_new(&config, &mut pool) })?;
    let mut slot = rcb_vmm_slot::default();
    // SAFETY: a live pool, a writable slot, the stream of the runtime.
    let used = unsafe {
        status("rcb_vmm_pool_acquire", rcb_vmm_pool_acquire(pool, &mut slot))
            .and_then(|()| status("rcb_vmm_pool_release", rcb_vmm_pool_release(pool, &slot, c.stream.0)))
    };
    // SAFETY: a live pool, freed once (it waits for the timeline write).
    let freed = status("rcb_vmm_pool_free", unsafe { rcb_vmm_pool_free(pool) });
    used.and(freed)
}

fn correlator_cycle(_: &mut Cycle) -> R<()> {
    let mut c = null_mut();
    let config = rcb_correlator_config::default();
    // SAFETY: a valid config and out-pointer.
    status("rcb_correlator_new", unsafe { rcb_correlator_new(&config, &mut c) })?;
    let events: Vec<rcb_api_event> = (0..16u64)
        .map(|id| rcb_api_event { correlation_id: id, start_ns: id, end_ns: id + 1, name: 0, thread_id: 0, kind: 0, flags: 0 })
        .collect();
    let activities: Vec<rcb_activity> = (0..16u64)
        .map(|id| rcb_activity { correlation_id: id, start_ns: id, end_ns: id + 2, name: 0, stream_id: 0, device_id: 0, kind: 0 })
        .collect();
    let mut summary = rcb_correlator_summary::default();
    // Nothing delivered: the exchange joins and counts only.
    let sink = rcb_correlator_sink {
        user_data: null_mut(),
        activities: None,
        api_events: None,
        api_events_without_activity: None,
        dropped: None,
        duplicates: None,
        ..Default::default()
    };
    // SAFETY: a live correlator, arrays of the stated lengths, a sink without callbacks, a writable summary.
    let used = unsafe {
        status("rcb_correlator_add_api_events", rcb_correlator_add_api_events(c, events.as_ptr(), events.len()))
            .and_then(|()| status("rcb_correlator_add_activities", rcb_correlator_add_activities(c, activities.as_ptr(), activities.len())))
            .and_then(|()| status("rcb_correlator_exchange", rcb_correlator_exchange(c, &sink, &mut summary)))
    };
    // SAFETY: a live handle, freed once.
    let freed = status("rcb_correlator_free", unsafe { rcb_correlator_free(c) });
    used.and(freed)?;
    if summary.joined_main != 16 {
        return Err(format!("the exchange joined {} of 16 activities", summary.joined_main));
    }
    Ok(())
}
