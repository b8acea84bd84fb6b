//! Scenario `correlator`: the profiler correlator at the scale of a MaxText llama2-7b
//! profile as ROCm/xla PR 859 describes it (3.78 M kernel activities over 1.27 M correlation
//! ids), with 4.7 M HIP API events (a chosen value), against what XLA's `rocm_collector.cc` does with the same events, measured in the same run.
//!
//! The workload is a simulated profile: 8 host threads issue API calls, one device each, with
//! correlation ids from one counter; most ids that reach a device carry one kernel, graph
//! launches carry 100–500; API events arrive in the order their calls end, activities in buffers
//! of 1024 records per device in the order they complete. A few ids lose their API event, a few
//! have a duplicate, 5 % also have an auxiliary API event.

use crate::table::{Table, ratio, time};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::Runtime;
use std::ffi::{CString, c_void};
use std::ptr::null_mut;
use std::time::Instant;

/// The profile's scale.
const ACT_IDS: usize = 1_270_000;
const ACTIVITIES: usize = 3_780_000;
const API_EVENTS: usize = 4_700_000;
const DEVICES: u32 = 8;
const STREAMS: u64 = 4;
const BUFFER: usize = 1024;
/// Events handed to a thread at a time in the multi-threaded adds (a profiler buffer).
const CHUNK: usize = 256;
/// Shard counts measured against each other (1: a single lock).
const SWEEP_SHARDS: [u32; 5] = [1, 16, 64, 256, 1024];

/// Kind codes of the simulated profile (the library does not interpret them).
const KIND_KERNEL: u32 = 1;
const KIND_API: u32 = 100;

pub struct Workload {
    pub api: Vec<rcb_api_event>,
    pub acts: Vec<rcb_activity>,
    /// Owns the strings the events' `name` fields point to.
    _names: Vec<CString>,
}

/// xorshift64*: reproducible, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// Kernel names of typical lengths (XLA fusions, rocBLAS/hipBLASLt kernels), and HIP API names.
fn names(rng: &mut Rng) -> (Vec<CString>, usize) {
    let mut v = Vec::new();
    for i in 0..2000 {
        let len = rng.range(20, 120) as usize;
        let mut s = format!("kernel_{i}_");
        while s.len() < len {
            s.push((b'a' + rng.below(26) as u8) as char);
        }
        v.push(CString::new(s).unwrap_or_default());
    }
    let kernels = v.len();
    for api in ["hipLaunchKernel", "hipModuleLaunchKernel", "hipGraphLaunch", "hipMemcpyAsync", "hipEventRecord", "hipStreamWaitEvent"] {
        v.push(CString::new(api).unwrap_or_default());
    }
    (v, kernels)
}

/// What becomes of the API events of the `i`-th id (from 1) that reaches a device.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// One main API event.
    Main,
    /// No API event: its activities give a dropped report.
    Lost,
    /// Only an auxiliary API event.
    AuxOnly,
    /// A main and an auxiliary API event.
    MainAux,
    /// Two main API events: a duplicate report.
    Duplicate,
}

fn role(i: usize) -> Role {
    match (i % 1000, i % 20, i % 10_000) {
        (0, ..) => Role::Lost,
        (500, ..) => Role::AuxOnly,
        (_, 1, _) => Role::MainAux,
        (.., 3) => Role::Duplicate,
        _ => Role::Main,
    }
}

fn api_events_of(r: Role) -> usize {
    match r {
        Role::Lost => 0,
        Role::Main | Role::AuxOnly => 1,
        Role::MainAux | Role::Duplicate => 2,
    }
}

/// The simulated profile; `scale` divides the sizes (quick runs).
pub fn workload(scale: usize) -> Workload {
    let (act_ids, activities, api_events) = (ACT_IDS / scale, ACTIVITIES / scale, API_EVENTS / scale);
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let (names, kernels) = names(&mut rng);
    let name = |i: usize| names[i].as_ptr() as u64;
    let from_devices: usize = (1..=act_ids).map(|i| api_events_of(role(i))).sum();
    let ids = act_ids + (api_events - from_devices);
    // Graph launches: enough ids of 100..=500 kernels that the total is `activities`.
    let mut graph_sizes = Vec::new();
    let mut extra = activities - act_ids;
    while extra > 0 {
        let k = (rng.range(100, 500) as usize).min(extra + 1);
        graph_sizes.push(k);
        extra -= k - 1;
    }
    // Which ids reach a device: `act_ids` of `ids`, chosen evenly at random.
    let mut carries = vec![false; ids];
    let mut chosen = 0;
    while chosen < act_ids {
        let i = rng.below(ids as u64) as usize;
        if !carries[i] {
            carries[i] = true;
            chosen += 1;
        }
    }
    let base_id: u64 = 1 << 20;
    let host_step = 3_000_000_000 / ids as u64; // about 3 s of profile
    let mut stream_free = vec![0u64; (DEVICES as u64 * STREAMS) as usize];
    let mut api = Vec::with_capacity(api_events);
    let mut acts = Vec::with_capacity(activities);
    let mut index = 0usize; // among the ids that reach a device
    let mut graphs = graph_sizes.iter();
    let t0: u64 = 1_000_000_000_000;
    for (k, &has_acts) in carries.iter().enumerate() {
        let id = base_id + k as u64;
        let thread = rng.below(DEVICES as u64);
        let device = thread as u32;
        let t = t0 + k as u64 * host_step + rng.below(host_step);
        let mut n = 0;
        let mut r = Role::Main;
        if has_acts {
            // Graph launches spread evenly over the ids that reach a device.
            let graph = (index * graph_sizes.len()) / act_ids != ((index + 1) * graph_sizes.len()) / act_ids;
            index += 1;
            r = role(index);
            n = if graph { graphs.next().copied().unwrap_or(1) } else { 1 };
            let stream = if n > 1 { 0 } else { rng.below(STREAMS) };
            let slot = (device as u64 * STREAMS + stream) as usize;
            let mut start = stream_free[slot].max(t + 5_000);
            for j in 0..n {
                let end = start + rng.range(2_000, 50_000);
                let kernel = if n > 1 { (id as usize * 7 + j) % kernels } else { rng.below(kernels as u64) as usize };
                acts.push(rcb_activity {
                    correlation_id: id,
                    start_ns: start,
                    end_ns: end,
                    name: name(kernel),
                    stream_id: device as u64 * 100 + stream,
                    device_id: device,
                    kind: KIND_KERNEL,
                });
                start = end + rng.range(100, 2_000);
            }
            stream_free[slot] = start;
        }
        let api_name = name(
            kernels
                + if n > 1 {
                    2
                } else if has_acts {
                    rng.below(2) as usize
                } else {
                    3 + rng.below(3) as usize
                },
        );
        let main = rcb_api_event {
            correlation_id: id,
            start_ns: t,
            end_ns: t + rng.range(1_000, 8_000),
            name: api_name,
            thread_id: 1000 + thread,
            kind: KIND_API,
            flags: 0,
        };
        let aux = rcb_api_event { flags: RCB_API_EVENT_AUXILIARY, kind: KIND_API + 1, ..main };
        match r {
            Role::Main => api.push(main),
            Role::Lost => {}
            Role::AuxOnly => api.push(aux),
            Role::MainAux => api.extend([main, aux]),
            Role::Duplicate => api.extend([main, rcb_api_event { start_ns: t + 1, ..main }]),
        }
    }
    // API events arrive when their call ends; activities per device in completion order, in
    // buffers, the buffers in the order they fill up.
    api.sort_by_key(|e| e.end_ns);
    let mut per_device: Vec<Vec<rcb_activity>> = vec![Vec::new(); DEVICES as usize];
    for a in acts.drain(..) {
        per_device[a.device_id as usize].push(a);
    }
    for d in per_device.iter_mut() {
        d.sort_by_key(|a| a.end_ns);
    }
    let mut buffers: Vec<&[rcb_activity]> = per_device.iter().flat_map(|d| d.chunks(BUFFER)).collect();
    buffers.sort_by_key(|b| b.last().map_or(0, |a| a.end_ns));
    let acts: Vec<rcb_activity> = buffers.concat();
    Workload { api, acts, _names: names }
}

/// What XLA's collector would do with the records: copy each into a vector per device.
#[derive(Clone, Copy)]
#[allow(dead_code)] // written, and kept to be counted
struct Joined {
    activity: rcb_activity,
    api: rcb_api_event,
    has_api: u32,
}

#[derive(Default)]
struct Collected {
    /// False: the callbacks keep nothing (the library's share of an exchange alone).
    keep: bool,
    per_device: Vec<Vec<Joined>>,
    api_per_device: Vec<Vec<rcb_api_event>>,
    dropped: u64,
    duplicates: u64,
}

impl Collected {
    fn events(&self) -> usize {
        self.per_device.iter().map(Vec::len).sum::<usize>() + self.api_per_device.iter().map(Vec::len).sum::<usize>()
    }
}

fn device_vec<T>(v: &mut Vec<Vec<T>>, device: u32, total: u64) -> &mut Vec<T> {
    let d = device as usize;
    if v.len() <= d {
        v.resize_with(d + 1, Vec::new);
    }
    // The first batch of a device tells its total: one allocation per device.
    let out = &mut v[d];
    out.reserve_exact((total as usize).saturating_sub(out.len()));
    out
}

unsafe extern "C" fn on_activities(user: *mut c_void, device: u32, total: u64, records: *const rcb_correlated_activity, n: usize) -> i32 {
    // SAFETY: `user` is the Collected of `exchange`; the records are valid for the call.
    let (c, records) = unsafe { (&mut *(user as *mut Collected), std::slice::from_raw_parts(records, n)) };
    if !c.keep {
        return 0;
    }
    device_vec(&mut c.per_device, device, total).extend(records.iter().map(|r| {
        // SAFETY: the library keeps `activity` valid and non-NULL for the duration of the callback.
        let activity = unsafe { *r.activity };
        // SAFETY: `api` is NULL or valid for the duration of the callback, as `activity`.
        match unsafe { r.api.as_ref() } {
            Some(api) => Joined { activity, api: *api, has_api: 1 },
            None => Joined { activity, api: rcb_api_event::default(), has_api: 0 },
        }
    }));
    0
}

unsafe extern "C" fn on_api_events(user: *mut c_void, device: u32, total: u64, records: *const rcb_correlated_api_event, n: usize) -> i32 {
    // SAFETY: as above.
    let (c, records) = unsafe { (&mut *(user as *mut Collected), std::slice::from_raw_parts(records, n)) };
    if c.keep {
        // SAFETY: as above.
        device_vec(&mut c.api_per_device, device, total).extend(records.iter().map(|r| unsafe { *r.api }));
    }
    0
}

unsafe extern "C" fn on_dropped(user: *mut c_void, _: *const rcb_correlation_report, n: usize) -> i32 {
    // SAFETY: as above.
    unsafe { (*(user as *mut Collected)).dropped += n as u64 };
    0
}

unsafe extern "C" fn on_duplicates(user: *mut c_void, _: *const rcb_correlation_report, n: usize) -> i32 {
    // SAFETY: as above.
    unsafe { (*(user as *mut Collected)).duplicates += n as u64 };
    0
}

fn check(what: &str, s: rcb_status) -> Result<(), String> {
    if s == RCB_OK {
        return Ok(());
    }
    let mut buf = [0 as std::ffi::c_char; 512];
    // SAFETY: a writable buffer of its length.
    unsafe { rcb_last_error_message(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: NUL-terminated by rcb_last_error_message.
    Err(format!("{what}: {}", unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy()))
}

/// The two collectors the scenario compares, behind one interface.
trait Collector: Sync {
    fn add_api_event(&self, e: &rcb_api_event) -> Result<(), String>;
    fn add_activity(&self, a: &rcb_activity) -> Result<(), String>;
    /// One call per chunk (the library's batch calls); one per event where there are none.
    fn add_api_events(&self, events: &[rcb_api_event]) -> Result<(), String> {
        events.iter().try_for_each(|e| self.add_api_event(e))
    }
    fn add_activities(&self, acts: &[rcb_activity]) -> Result<(), String> {
        acts.iter().try_for_each(|a| self.add_activity(a))
    }
}

struct Lib(*mut rcb_correlator);
// SAFETY: the correlator's add calls are thread-safe; the handle is an id.
unsafe impl Send for Lib {}
// SAFETY: as for Send: every call through a shared Lib is one the C ABI allows from any thread.
unsafe impl Sync for Lib {}

impl Drop for Lib {
    fn drop(&mut self) {
        // SAFETY: a live handle, freed once.
        unsafe { rcb_correlator_free(self.0) };
    }
}

impl Lib {
    fn new(shards: u32) -> Result<Self, String> {
        let config = rcb_correlator_config { shards, ..Default::default() };
        let mut c = null_mut();
        // SAFETY: valid config and out-pointer.
        check("rcb_correlator_new", unsafe { rcb_correlator_new(&config, &mut c) })?;
        Ok(Lib(c))
    }

    /// One exchange; `keep`: into per-device vectors, else into callbacks that keep nothing.
    fn exchange(&self, keep: bool) -> Result<(f64, Collected, rcb_correlator_summary), String> {
        let mut collected = Collected { keep, ..Default::default() };
        let sink = rcb_correlator_sink {
            user_data: &mut collected as *mut Collected as *mut c_void,
            activities: Some(on_activities),
            api_events: Some(on_api_events),
            // XLA's collector drops API events without an activity: not asked for.
            api_events_without_activity: None,
            dropped: Some(on_dropped),
            duplicates: Some(on_duplicates),
            ..Default::default()
        };
        let mut summary = rcb_correlator_summary::default();
        let t = Instant::now();
        // SAFETY: live handle, valid sink whose user data outlives the call, writable summary.
        check("rcb_correlator_exchange", unsafe { rcb_correlator_exchange(self.0, &sink, &mut summary) })?;
        let ns = t.elapsed().as_nanos() as f64;
        Ok((ns, collected, summary))
    }

    fn reserved_bytes(&self) -> Result<u64, String> {
        let mut c = rcb_correlator_counters::default();
        // SAFETY: live handle, writable counters.
        check("rcb_correlator_stats", unsafe { rcb_correlator_stats(self.0, &mut c) })?;
        Ok(c.reserved_bytes)
    }
}

impl Collector for Lib {
    fn add_api_event(&self, e: &rcb_api_event) -> Result<(), String> {
        // SAFETY: live handle, valid event.
        check("rcb_correlator_add_api_event", unsafe { rcb_correlator_add_api_event(self.0, e) })
    }
    fn add_activity(&self, a: &rcb_activity) -> Result<(), String> {
        // SAFETY: as above.
        check("rcb_correlator_add_activity", unsafe { rcb_correlator_add_activity(self.0, a) })
    }
}

/// The library's batch calls.
struct LibBatch<'a>(&'a Lib);

impl Collector for LibBatch<'_> {
    fn add_api_event(&self, e: &rcb_api_event) -> Result<(), String> {
        self.0.add_api_event(e)
    }
    fn add_activity(&self, a: &rcb_activity) -> Result<(), String> {
        self.0.add_activity(a)
    }
    fn add_api_events(&self, events: &[rcb_api_event]) -> Result<(), String> {
        // SAFETY: live handle, valid array.
        check("rcb_correlator_add_api_events", unsafe { rcb_correlator_add_api_events(self.0.0, events.as_ptr(), events.len()) })
    }
    fn add_activities(&self, acts: &[rcb_activity]) -> Result<(), String> {
        // SAFETY: as above.
        check("rcb_correlator_add_activities", unsafe { rcb_correlator_add_activities(self.0.0, acts.as_ptr(), acts.len()) })
    }
}

/// Adds the workload from `threads` threads (1: the calling thread): chunks of [`CHUNK`] API
/// events and activities dealt round-robin, each thread alternating between the two kinds as
/// the runtime's callback threads would. Wall-clock nanoseconds.
fn add(c: &dyn Collector, w: &Workload, threads: usize) -> Result<f64, String> {
    let api_chunks: Vec<&[rcb_api_event]> = w.api.chunks(CHUNK).collect();
    let act_chunks: Vec<&[rcb_activity]> = w.acts.chunks(CHUNK).collect();
    let work = |t: usize| -> Result<(), String> {
        let n = api_chunks.len().max(act_chunks.len());
        for i in (t..n).step_by(threads) {
            if let Some(chunk) = api_chunks.get(i) {
                c.add_api_events(chunk)?;
            }
            if let Some(chunk) = act_chunks.get(i) {
                c.add_activities(chunk)?;
            }
        }
        Ok(())
    };
    if threads == 1 {
        let t = Instant::now();
        work(0)?;
        return Ok(t.elapsed().as_nanos() as f64);
    }
    // Wall time from the first thread's start to the last one's end: the spawning thread may be
    // descheduled while the others run (more threads than cores).
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    work(t).map(|()| (start, Instant::now()))
                })
            })
            .collect();
        let mut span: Option<(Instant, Instant)> = None;
        let mut result = Ok(());
        for h in handles {
            match h.join() {
                Ok(Ok((a, b))) => span = Some(span.map_or((a, b), |(s, e)| (s.min(a), e.max(b)))),
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err("an adding thread panicked".to_string()),
            }
        }
        result.map(|()| span.map_or(0.0, |(a, b)| (b - a).as_nanos() as f64))
    })
}

/// Resident memory of `f` above what the process held before it, in bytes: at its peak, and
/// when `f` sampled it (through the function it is given, at the end of the flush, before
/// anything is freed). Freed memory is given back to the system first and the kernel's
/// high-water mark reset; None where /proc cannot do that.
fn rss_of<R>(f: impl FnOnce(&dyn Fn() -> Option<u64>) -> R) -> (R, Memory) {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's malloc_trim only gives free memory back.
    unsafe { malloc_trim(0) };
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_kib("VmRSS:").filter(|_| reset);
    let sample = || Some(status_kib("VmRSS:")?.saturating_sub(before?) * 1024);
    let r = f(&sample);
    let peak = status_kib("VmHWM:").and_then(|p| Some(p.saturating_sub(before?) * 1024));
    (r, Memory { peak, after: None })
}

/// Bytes of resident memory above the session's start.
#[derive(Clone, Copy, Default)]
struct Memory {
    peak: Option<u64>,
    /// Right after the flush, its output included.
    after: Option<u64>,
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("n/a".to_string(), |b| format!("{:.0} MiB", b as f64 / (1 << 20) as f64))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn per_event(ns: f64, events: f64) -> String {
    format!("{:.1} ns", ns / events)
}

/// XLA's collector, in C++ (correlator_ref.cc, compiled by build.rs).
#[cfg(rcb_bench_cxx_reference)]
mod xla {
    use super::*;

    unsafe extern "C" {
        fn rcb_ref_map_name() -> *const std::ffi::c_char;
        fn rcb_ref_new(names: i32) -> *mut c_void;
        fn rcb_ref_free(c: *mut c_void, names: i32);
        fn rcb_ref_add_api_event(c: *mut c_void, names: i32, e: *const rcb_api_event);
        fn rcb_ref_add_activity(c: *mut c_void, names: i32, a: *const rcb_activity);
        fn rcb_ref_flush(c: *mut c_void, names: i32);
        fn rcb_ref_device_events(c: *mut c_void, names: i32, device: u32) -> usize;
    }

    /// `names`: 0 keeps names as std::string (as XLA does), 1 as const char*.
    pub struct Xla {
        c: *mut c_void,
        names: i32,
    }
    // SAFETY: the C++ collector takes its mutex in AddEvent, as XLA's.
    unsafe impl Send for Xla {}
    // SAFETY: as for Send: adds from shared references go through that mutex.
    unsafe impl Sync for Xla {}

    pub fn map_name() -> String {
        // SAFETY: a static NUL-terminated string.
        unsafe { std::ffi::CStr::from_ptr(rcb_ref_map_name()) }.to_string_lossy().into_owned()
    }

    impl Xla {
        pub fn new(names: i32) -> Self {
            // SAFETY: plain constructor.
            Xla { c: unsafe { rcb_ref_new(names) }, names }
        }
        /// Flush: the exchange and the copies into per-device collectors. Returns the events
        /// the device collectors hold.
        pub fn flush(&self) -> usize {
            // SAFETY: a live collector.
            unsafe {
                rcb_ref_flush(self.c, self.names);
                (0..DEVICES).map(|d| rcb_ref_device_events(self.c, self.names, d)).sum()
            }
        }
    }

    impl Drop for Xla {
        fn drop(&mut self) {
            // SAFETY: a live collector, freed once.
            unsafe { rcb_ref_free(self.c, self.names) };
        }
    }

    impl Collector for Xla {
        fn add_api_event(&self, e: &rcb_api_event) -> Result<(), String> {
            // SAFETY: a live collector; `e` has the layout the C++ side reads.
            unsafe { rcb_ref_add_api_event(self.c, self.names, e) };
            Ok(())
        }
        fn add_activity(&self, a: &rcb_activity) -> Result<(), String> {
            // SAFETY: as above.
            unsafe { rcb_ref_add_activity(self.c, self.names, a) };
            Ok(())
        }
    }
}

/// One XLA collector session: (add ns, flush ns, peak bytes, events in the device collectors).
#[cfg(rcb_bench_cxx_reference)]
fn xla_session(w: &Workload, names: i32, threads: usize) -> Result<(f64, f64, Memory, usize), String> {
    let (r, mut memory) = rss_of(|sample| -> Result<_, String> {
        let c = xla::Xla::new(names);
        let add_ns = add(&c, w, threads)?;
        let t = Instant::now();
        let n = c.flush();
        let flush_ns = t.elapsed().as_nanos() as f64;
        Ok((add_ns, flush_ns, n, sample()))
    });
    let (add_ns, flush_ns, n, after) = r?;
    memory.after = after;
    Ok((add_ns, flush_ns, memory, n))
}

/// One XLA collector session, or None when the baseline was not built.
#[cfg(not(rcb_bench_cxx_reference))]
type XlaSession = Option<(f64, f64, Memory, usize)>;

pub fn run(_rt: &'static dyn Runtime, quick: bool) -> Result<(), String> {
    let (scale, runs) = if quick { (100, 1) } else { (1, 3) };
    let w = workload(scale);
    let events = (w.api.len() + w.acts.len()) as f64;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut thread_counts = vec![2, threads, 16];
    thread_counts.sort();
    thread_counts.dedup();

    // The library, one thread: a first session (its memory faulted in), then later ones.
    let lib = Lib::new(0)?;
    let (first, mut lib_memory) = rss_of(|sample| -> Result<_, String> {
        let add_ns = add(&lib, &w, 1)?;
        let (ex_ns, collected, summary) = lib.exchange(true)?;
        Ok((add_ns, ex_ns, collected.events(), collected.dropped, collected.duplicates, summary, sample()))
    });
    let (cold_ns, first_exchange_ns, lib_events, dropped, duplicates, summary, after) = first?;
    lib_memory.after = after;
    let reserved = lib.reserved_bytes()?;
    let (mut warm, mut batch, mut ex_keep, mut ex_alone) = (vec![], vec![], vec![first_exchange_ns], vec![]);
    for _ in 0..runs {
        warm.push(add(&lib, &w, 1)?);
        ex_keep.push(lib.exchange(true)?.0);
        batch.push(add(&LibBatch(&lib), &w, 1)?);
        ex_alone.push(lib.exchange(false)?.0);
    }
    drop(lib);
    // Shard counts (1: a single lock) against thread counts, each in a later session; then the
    // exchange of the last of them.
    let sweep_threads: Vec<usize> = std::iter::once(1).chain(thread_counts.iter().copied()).collect();
    let mut sweep = Vec::new();
    for shards in SWEEP_SHARDS {
        let c = Lib::new(shards)?;
        add(&c, &w, 1)?;
        c.exchange(false)?;
        let mut row = Vec::new();
        let mut ex = 0.0;
        for &n in &sweep_threads {
            row.push(add(&c, &w, n)?);
            ex = c.exchange(false)?.0;
        }
        sweep.push((shards, row, ex));
    }
    let multi: Vec<(usize, u32, f64)> = thread_counts
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| {
            sweep.iter().filter(|r| r.0 == RCB_CORRELATOR_DEFAULT_SHARDS || r.0 == 1).map(move |r| (n, r.0, r.1[i + 1])).collect::<Vec<_>>()
        })
        .collect();

    #[cfg(rcb_bench_cxx_reference)]
    let (map, xla_string, xla_pointer, xla_multi) = {
        let strings = xla_session(&w, 0, 1)?;
        let pointers = xla_session(&w, 1, 1)?;
        let mut multi = Vec::new();
        for &n in &thread_counts {
            multi.push((n, xla_session(&w, 0, n)?.0));
        }
        (xla::map_name(), Some(strings), Some(pointers), multi)
    };
    #[cfg(not(rcb_bench_cxx_reference))]
    let (map, xla_string, xla_pointer, xla_multi): (String, XlaSession, XlaSession, Vec<(usize, f64)>) =
        ("not built: no C++ compiler when rcb-bench was built".to_string(), None, None, Vec::new());

    let ev = |ns: f64| per_event(ns, events);
    let base_add = xla_string.map(|x| x.0);
    let vs = |base: Option<f64>, ns: f64| base.map_or("—".to_string(), |b| ratio(b, ns));
    let mut t = Table::new(
        format!(
            "correlator: add, {} API events + {} activities ({} ids reach a device), per event (wall time / events); baseline: XLA's collector in C++ ({map}, g++ -O2)",
            w.api.len(),
            w.acts.len(),
            ACT_IDS / scale
        ),
        &["collector", "threads", "per event", "XLA (std::string names) / this"],
    );
    if let Some((a, ..)) = xla_string {
        t.row(vec!["XLA's RocmTraceCollectorImpl::AddEvent, std::string names (baseline)".into(), "1".into(), ev(a), vs(base_add, a)]);
    }
    if let Some((a, ..)) = xla_pointer {
        t.row(vec!["XLA's AddEvent, names as const char*".into(), "1".into(), ev(a), vs(base_add, a)]);
    }
    t.row(vec!["rcb_correlator_add_*, first session".into(), "1".into(), ev(cold_ns), vs(base_add, cold_ns)]);
    t.row(vec![
        "rcb_correlator_add_*, later sessions (memory kept)".into(),
        "1".into(),
        ev(median(warm.clone())),
        vs(base_add, median(warm)),
    ]);
    t.row(vec![
        format!("rcb_correlator_add_activities / _api_events, {CHUNK} per call"),
        "1".into(),
        ev(median(batch.clone())),
        vs(base_add, median(batch)),
    ]);
    for &(n, xla_ns) in &xla_multi {
        t.row(vec!["XLA's AddEvent, std::string names".into(), n.to_string(), ev(xla_ns), vs(base_add, xla_ns)]);
    }
    for &(n, shards, ns) in &multi {
        let what = if shards == 1 {
            "rcb_correlator_add_*, 1 shard (a single lock)".to_string()
        } else {
            format!("rcb_correlator_add_*, {shards} shards (default)")
        };
        t.row(vec![what, n.to_string(), ev(ns), vs(base_add, ns)]);
    }
    t.print();

    let base_ex = xla_string.map(|x| x.1);
    let mut t = Table::new(
        "correlator: exchange (flush) of all of it into per-device vectors".to_string(),
        &["exchange", "time", "XLA (std::string names) / this"],
    );
    if let Some((_, f, ..)) = xla_string {
        t.row(vec![
            "XLA's Flush: ApiActivityInfoExchange + per-device collectors, std::string names (baseline)".into(),
            time(f),
            vs(base_ex, f),
        ]);
    }
    if let Some((_, f, ..)) = xla_pointer {
        t.row(vec!["XLA's Flush, names as const char*".into(), time(f), vs(base_ex, f)]);
    }
    let keep = median(ex_keep);
    t.row(vec!["rcb_correlator_exchange, records copied into per-device vectors by the callbacks".into(), time(keep), vs(base_ex, keep)]);
    let alone = median(ex_alone);
    t.row(vec!["rcb_correlator_exchange, callbacks that keep nothing (the library's share)".into(), time(alone), vs(base_ex, alone)]);
    t.print();

    let mut header = vec!["shards".to_string()];
    header.extend(sweep_threads.iter().map(|n| format!("add, {n} thread{}", if *n == 1 { "" } else { "s" })));
    header.push("exchange (callbacks keep nothing)".into());
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new("correlator: shards (each with its own lock) against adding threads, per event, later sessions", &header);
    for (shards, row, ex) in &sweep {
        let mut cells = vec![if *shards == RCB_CORRELATOR_DEFAULT_SHARDS { format!("{shards} (default)") } else { shards.to_string() }];
        cells.extend(row.iter().map(|&ns| ev(ns)));
        cells.push(time(*ex));
        t.row(cells);
    }
    t.print();

    let mut t = Table::new(
        "correlator: memory of a first session (add everything, then flush into per-device vectors), resident above the process's before it".to_string(),
        &["collector", "peak", "right after the flush, its per-device output included", "reserved by the correlator after the flush"],
    );
    if let Some((_, _, m, _)) = xla_string {
        t.row(vec!["XLA's collector, std::string names".into(), mib(m.peak), mib(m.after), "—".into()]);
    }
    if let Some((_, _, m, _)) = xla_pointer {
        t.row(vec!["XLA's collector, names as const char*".into(), mib(m.peak), mib(m.after), "—".into()]);
    }
    t.row(vec!["rocm_cmdbuf".into(), mib(lib_memory.peak), mib(lib_memory.after), mib(Some(reserved))]);
    t.print();

    let xla_events = xla_string.map_or(String::new(), |x| format!("; XLA's device collectors hold {}", x.3));
    println!(
        "\nBoth report every activity: the library {} activities ({} joined to a main API event, {} to an auxiliary one, {} without), {} API events with activities, {} dropped and {} duplicate reports{}; records per device: {} in all.",
        summary.activities,
        summary.joined_main,
        summary.joined_auxiliary,
        summary.without_api,
        summary.api_events - summary.api_without_activity,
        dropped,
        duplicates,
        xla_events,
        lib_events,
    );
    Ok(())
}
