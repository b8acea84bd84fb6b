//! `rcb_correlator_*`: the profiler correlator behind the C ABI.
//!
//! The adds are called from the GPU runtime's profiler threads, many at once, for every event:
//! looking the handle up in the registry on each of them would make every thread write the same
//! cache lines (the registry's lock, the object's reference count). Each thread therefore keeps
//! the last correlator it used, checked against a generation number that every
//! `rcb_correlator_free` bumps: the common call reads one shared word and writes nothing shared
//! but its shard.

use super::handle::handle_type;
use super::{
    arg_out, arg_out_sized, arg_ref, arg_sized, arg_slice, boundary, live, rcb_status, register, sized_struct, unregister, write_out,
};
use crate::error::{Error, ErrorKind, Result};
use crate::profiler::{
    self, Activity, ApiEvent, CorrelatedActivity, CorrelatedApiEvent, Correlator, MAX_PENDING, Report, Sink, Stats, Summary,
};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

// The version node of each export of this module (abi/librocm_cmdbuf.map, through build.rs).
include!(concat!(env!("OUT_DIR"), "/symbol_versions/correlator.rs"));

/// A profiler correlator (opaque): HIP API events and device activities, joined by their 64-bit
/// correlation id when exchanged. Created by `rcb_correlator_new`, owned by the caller, freed
/// with `rcb_correlator_free`. The value is a handle id, never an address, so a freed or forged
/// handle yields `RCB_STATUS_INVALID_HANDLE`.
///
/// Thread-safety: the add, exchange, clear, trim and stats calls may run on any threads at once,
/// on one correlator (events added during an exchange go to the next one); `rcb_correlator_free`
/// must not run concurrently with any other call on the same correlator.
pub struct rcb_correlator {
    _private: [u8; 0],
}

/// `rcb_api_event.flags`: an auxiliary API event (in XLA's collector, one of
/// `auxiliary_api_events_map_`). It is joined to the activities of its id that have no main API
/// event, and never reported on its own.
pub const RCB_API_EVENT_AUXILIARY: u32 = 1;
/// The device of an API event none of whose activities arrived, in `rcb_correlated_api_events_fn`
/// and `rcb_correlation_report.device_id`.
pub const RCB_DEVICE_NONE: u32 = u32::MAX;
/// Shards of a correlator whose config says 0.
pub const RCB_CORRELATOR_DEFAULT_SHARDS: u32 = 256;
/// Most shards a correlator may have.
pub const RCB_CORRELATOR_MAX_SHARDS: u32 = 4096;
/// Most events of one kind (activities, API events) one shard of a correlator holds between two
/// exchanges (192 GiB of them: an add beyond gives `RCB_STATUS_OUT_OF_MEMORY`), and most events
/// one batch add accepts.
pub const RCB_CORRELATOR_MAX_PENDING: u64 = 0xFFFF_FFFE;
/// Most records (or reports) in one call of a sink callback.
pub const RCB_CORRELATOR_BATCH: usize = 4096;
// Literals, so that cbindgen can write them into the header.
const _: () = {
    assert!(RCB_DEVICE_NONE == profiler::DEVICE_NONE);
    assert!(RCB_API_EVENT_AUXILIARY == profiler::API_AUXILIARY);
    assert!(RCB_CORRELATOR_DEFAULT_SHARDS as usize == profiler::DEFAULT_SHARDS);
    assert!(RCB_CORRELATOR_MAX_SHARDS as usize == profiler::MAX_SHARDS);
    assert!(RCB_CORRELATOR_MAX_PENDING == MAX_PENDING);
    assert!(RCB_CORRELATOR_BATCH == profiler::BATCH);
};

/// How to build a correlator. Read during `rcb_correlator_new` only; the caller keeps ownership.
/// A config that is zero but for its `struct_size` gives the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_correlator_config {
    /// `sizeof(rcb_correlator_config)` (the rule for sized structs).
    pub struct_size: u32,
    /// Number of shards, each with its own lock, that events are spread over by correlation id;
    /// rounded up to a power of two, at most `RCB_CORRELATOR_MAX_SHARDS`. 0 takes
    /// `RCB_CORRELATOR_DEFAULT_SHARDS`; 1 is a single lock.
    pub shards: u32,
    /// Most activities held between two exchanges (XLA's `max_activity_api_events`); an add
    /// beyond it fails with `RCB_STATUS_OUT_OF_MEMORY` and is counted in
    /// `rcb_correlator_counters.over_limit`. 0: no limit of the config, only the per-shard one of
    /// `RCB_CORRELATOR_MAX_PENDING`, i.e. memory grows with every event added until the next
    /// exchange or clear: a long-running process whose exchanges may stop (a profiler that is
    /// never flushed) should set a bound.
    pub max_activities: u64,
    /// Likewise for API events, main and auxiliary (XLA's `max_callback_api_events`).
    pub max_api_events: u64,
}

/// A host-side HIP API event (an API callback record), copied into the correlator by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct rcb_api_event {
    /// The full 64-bit correlation id; never narrowed.
    pub correlation_id: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The caller's name pointer or name id (or any 64-bit value it wants back). Stored and given
    /// back as is, never dereferenced: a pointer must stay valid for as long as the caller reads
    /// it back, i.e. until the exchange that reports the event has returned.
    pub name: u64,
    /// The caller's id of the host thread that made the call.
    pub thread_id: u64,
    /// The caller's kind code (XLA: `RocmTracerEventType`); not interpreted.
    pub kind: u32,
    /// `RCB_API_EVENT_AUXILIARY` or 0; any other bit is rejected with
    /// `RCB_STATUS_INVALID_ARGUMENT`.
    pub flags: u32,
}

/// A device activity record (a kernel, copy or set executed on a device), copied into the
/// correlator by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct rcb_activity {
    /// The full 64-bit correlation id; never narrowed. Many activities may share one (the kernels
    /// of one `hipGraphLaunch`); each is kept and reported.
    pub correlation_id: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The caller's name pointer or name id, as in `rcb_api_event.name`.
    pub name: u64,
    /// The caller's stream or queue id.
    pub stream_id: u64,
    /// The caller's device id (any value; `RCB_DEVICE_NONE` sorts last).
    pub device_id: u32,
    /// The caller's kind code; not interpreted.
    pub kind: u32,
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<rcb_api_event>() == size_of::<ApiEvent>() && align_of::<rcb_api_event>() == align_of::<ApiEvent>());
    assert!(offset_of!(rcb_api_event, correlation_id) == offset_of!(ApiEvent, correlation_id));
    assert!(offset_of!(rcb_api_event, start_ns) == offset_of!(ApiEvent, start_ns));
    assert!(offset_of!(rcb_api_event, end_ns) == offset_of!(ApiEvent, end_ns));
    assert!(offset_of!(rcb_api_event, name) == offset_of!(ApiEvent, name));
    assert!(offset_of!(rcb_api_event, thread_id) == offset_of!(ApiEvent, thread_id));
    assert!(offset_of!(rcb_api_event, kind) == offset_of!(ApiEvent, kind));
    assert!(offset_of!(rcb_api_event, flags) == offset_of!(ApiEvent, flags));
    assert!(size_of::<rcb_activity>() == size_of::<Activity>() && align_of::<rcb_activity>() == align_of::<Activity>());
    assert!(offset_of!(rcb_activity, correlation_id) == offset_of!(Activity, correlation_id));
    assert!(offset_of!(rcb_activity, start_ns) == offset_of!(Activity, start_ns));
    assert!(offset_of!(rcb_activity, end_ns) == offset_of!(Activity, end_ns));
    assert!(offset_of!(rcb_activity, name) == offset_of!(Activity, name));
    assert!(offset_of!(rcb_activity, stream_id) == offset_of!(Activity, stream_id));
    assert!(offset_of!(rcb_activity, device_id) == offset_of!(Activity, device_id));
    assert!(offset_of!(rcb_activity, kind) == offset_of!(Activity, kind));
    assert!(size_of::<rcb_correlated_activity>() == size_of::<CorrelatedActivity>());
    assert!(offset_of!(rcb_correlated_activity, api) == offset_of!(CorrelatedActivity, api));
    assert!(size_of::<rcb_correlated_api_event>() == size_of::<CorrelatedApiEvent>());
    assert!(offset_of!(rcb_correlated_api_event, first_activity) == offset_of!(CorrelatedApiEvent, first_activity));
    assert!(offset_of!(rcb_correlated_api_event, activities) == offset_of!(CorrelatedApiEvent, activities));
    assert!(size_of::<rcb_correlation_report>() == size_of::<Report>());
    assert!(offset_of!(rcb_correlation_report, activities) == offset_of!(Report, activities));
    assert!(offset_of!(rcb_correlation_report, api_events) == offset_of!(Report, api_events));
    assert!(offset_of!(rcb_correlation_report, auxiliary_api_events) == offset_of!(Report, auxiliary_api_events));
    assert!(offset_of!(rcb_correlation_report, device_id) == offset_of!(Report, device_id));
};

/// One activity of an exchange and the API event joined to it: the main API event of its
/// correlation id, else its auxiliary one (tell them apart by `api->flags`), else NULL. Both
/// point into the correlator and are valid only during the callback that receives them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_correlated_activity {
    pub activity: *const rcb_activity,
    pub api: *const rcb_api_event,
}

/// One main API event of an exchange, the first activity of its correlation id (NULL when none
/// arrived) and the number of activities under that id. Pointers valid only during the callback
/// that receives them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_correlated_api_event {
    pub api: *const rcb_api_event,
    pub first_activity: *const rcb_activity,
    pub activities: u64,
}

/// What one correlation id held, in a dropped report (activities but no API event at all) or a
/// duplicate report (more than one main, or more than one auxiliary, API event).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct rcb_correlation_report {
    pub correlation_id: u64,
    /// Activities under the id.
    pub activities: u64,
    /// Main API events under the id: one is kept (joined and reported), the others are only
    /// counted here.
    pub api_events: u32,
    /// Auxiliary API events under the id (likewise).
    pub auxiliary_api_events: u32,
    /// The device of the id's first activity; `RCB_DEVICE_NONE` when it has none.
    pub device_id: u32,
    pub reserved: u32,
}

/// Receives `n` (1 to `RCB_CORRELATOR_BATCH`) activity records, all of device `device_id`, in
/// exchange order; `device_records` is the number of records that device has in this exchange
/// (the same in each of its calls: reserve for them at the first). `records` and what it points
/// to are valid only during the call. Returns 0 to go on; any other value stops the exchange
/// (`RCB_STATUS_CALLBACK_FAILED`).
pub type rcb_correlated_activities_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        device_id: u32,
        device_records: u64,
        records: *const rcb_correlated_activity,
        n: usize,
    ) -> i32,
>;
/// Receives `n` (1 to `RCB_CORRELATOR_BATCH`) API event records, all of device `device_id` (the
/// device of their first activity; `RCB_DEVICE_NONE` for those without any), in exchange order;
/// `device_records` as in `rcb_correlated_activities_fn`. Valid only during the call; returns 0
/// to go on.
pub type rcb_correlated_api_events_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        device_id: u32,
        device_records: u64,
        records: *const rcb_correlated_api_event,
        n: usize,
    ) -> i32,
>;
/// Receives `n` (1 to `RCB_CORRELATOR_BATCH`) reports, by ascending correlation id. Valid only
/// during the call; returns 0 to go on, as `rcb_correlated_activities_fn`.
pub type rcb_correlation_reports_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, reports: *const rcb_correlation_report, n: usize) -> i32>;

/// Where `rcb_correlator_exchange` delivers its output. Each callback may be NULL: that part is
/// not delivered (and, for the two record kinds, not sorted). Every call gets `user_data`.
/// Borrowed for the call to `rcb_correlator_exchange` only.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcb_correlator_sink {
    /// `sizeof(rcb_correlator_sink)` (the rule for sized structs).
    pub struct_size: u32,
    pub user_data: *mut c_void,
    /// Every activity once, with its API event.
    pub activities: rcb_correlated_activities_fn,
    /// Every main API event (the kept one of its id) whose id has activities, with the first of
    /// them.
    pub api_events: rcb_correlated_api_events_fn,
    /// Every main API event (the kept one of its id) none of whose activities arrived; called with
    /// `device_id` `RCB_DEVICE_NONE`. XLA's collector drops these: leave it NULL to skip them.
    pub api_events_without_activity: rcb_correlated_api_events_fn,
    /// One report per correlation id whose activities have no API event, main or auxiliary.
    pub dropped: rcb_correlation_reports_fn,
    /// One report per correlation id with more than one main or more than one auxiliary API
    /// event.
    pub duplicates: rcb_correlation_reports_fn,
}

/// Counts of one exchange, written by `rcb_correlator_exchange` on success.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_correlator_summary {
    /// In: `sizeof(rcb_correlator_summary)`; out: the bytes written (the rule for sized structs).
    pub struct_size: u32,
    /// Activities reported: every activity taken.
    pub activities: u64,
    /// Activities joined to a main API event.
    pub joined_main: u64,
    /// Activities joined to an auxiliary API event (their id has no main one).
    pub joined_auxiliary: u64,
    /// Activities whose id has no API event (reported with `api` NULL; the sum of the dropped
    /// reports' `activities`).
    pub without_api: u64,
    /// Main API events reported: one per correlation id that has any.
    pub api_events: u64,
    /// Of those, the ones none of whose activities arrived (device `RCB_DEVICE_NONE`).
    pub api_without_activity: u64,
    /// Auxiliary API events taken (joined, never reported alone).
    pub auxiliary_api_events: u64,
    /// Correlation ids with activities but no API event: the number of dropped reports.
    pub dropped_ids: u64,
    /// Correlation ids with more than one API event of a kind: the number of duplicate reports.
    pub duplicate_ids: u64,
    /// API events beyond the kept one of their id and kind, main and auxiliary together.
    pub duplicate_api_events: u64,
}

/// What a correlator holds now, and its totals (`rcb_correlator_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct rcb_correlator_counters {
    /// In: `sizeof(rcb_correlator_counters)`; out: the bytes written (the rule for sized structs).
    pub struct_size: u32,
    /// The number of shards (a power of two).
    pub shards: u64,
    /// Events added and not yet exchanged or cleared.
    pub pending_activities: u64,
    pub pending_api_events: u64,
    /// Bytes reserved for events and for the exchange's buffers: what exchanging and clearing keep
    /// for the next session; `rcb_correlator_trim` gives back what holds no pending event,
    /// `rcb_correlator_free` everything.
    pub reserved_bytes: u64,
    /// Events added over the correlator's life.
    pub added_activities: u64,
    pub added_api_events: u64,
    /// Events refused over the correlator's life because a limit was reached: the config's, or
    /// a shard's `RCB_CORRELATOR_MAX_PENDING`.
    pub over_limit: u64,
}

// The sizes in 0.1.0, when the structs got their size.
sized_struct!(rcb_correlator_config, 24);
sized_struct!(rcb_correlator_sink, 56);
sized_struct!(rcb_correlator_summary, 88);
sized_struct!(rcb_correlator_counters, 64);

// The correlator synchronizes its own state (adds come from many threads at once), so it is
// shared as it is, without a lock around it.
handle_type!(rcb_correlator => Correlator);

/// Bumped by every free, so that no thread keeps using a correlator it cached before the free.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last correlator this thread used: (handle id, generation when looked up, object).
    static LAST: RefCell<Option<(usize, u64, Arc<Correlator>)>> = const { RefCell::new(None) };
}

/// Runs `f` on the live correlator behind `c`.
fn with<R>(c: *const rcb_correlator, f: impl FnOnce(&Correlator) -> Result<R>) -> Result<R> {
    // NULL is never cached: it reaches the lookup, which reports it.
    let id = c.addr();
    // Read before the lookup: a free after this read makes the next call look up again.
    let generation = GENERATION.load(Ordering::Acquire);
    let mut f = Some(f);
    // The cached object is used while the cache entry is borrowed, so that it cannot be dropped
    // under `f`; a nested call (from a sink callback) can share that borrow, and only skips
    // caching when it has to look up another correlator. No reference count is touched.
    let fast = LAST.try_with(|last| {
        let entry = last.try_borrow().ok()?;
        match &*entry {
            Some((cached, g, object)) if *cached == id && *g == generation => f.take().map(|f| f(object)),
            _ => None,
        }
    });
    if let Ok(Some(result)) = fast {
        return result;
    }
    let object = Arc::clone(live(c, "c")?.shared());
    let _ = LAST.try_with(|last| {
        if let Ok(mut slot) = last.try_borrow_mut() {
            *slot = Some((id, generation, Arc::clone(&object)));
        }
    });
    match f.take() {
        Some(f) => f(&object),
        None => Err(Error::invalid_state("rcb_correlator: internal error: the call ran twice")),
    }
}

/// Creates a correlator. On success `*out` is a new handle that the caller owns and frees with
/// `rcb_correlator_free`; on failure `*out` is untouched. Returns `RCB_STATUS_INVALID_ARGUMENT`
/// for more than `RCB_CORRELATOR_MAX_SHARDS` shards.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `config` must be NULL or point to a valid `rcb_correlator_config` of `struct_size` readable
/// bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_new(config: *const rcb_correlator_config, out: *mut *mut rcb_correlator) -> rcb_status {
    boundary(|| {
        // SAFETY: validity is the caller's promise.
        let config = unsafe { arg_sized(config, "config") }?;
        let out = arg_out(out, "out")?;
        let correlator = Correlator::new(&profiler::Config {
            shards: config.shards as usize,
            max_activities: config.max_activities,
            max_api_events: config.max_api_events,
        })?;
        // SAFETY: checked by arg_out.
        unsafe { write_out(out, register::<rcb_correlator>(correlator)?) };
        Ok(())
    })
}

/// Frees a correlator and every event it holds (memory is given back at once). `NULL` is a
/// no-op; a freed or unknown handle gives `RCB_STATUS_INVALID_HANDLE`. Called from a sink's
/// callback during an exchange of `c`: `RCB_STATUS_INVALID_STATE`, nothing freed (free it once
/// `rcb_correlator_exchange` has returned).
///
/// Thread-safety: any thread, not concurrently with other calls on `c`.
///
/// # Safety
/// `c` must be NULL or a handle from `rcb_correlator_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_free(c: *mut rcb_correlator) -> rcb_status {
    boundary(|| {
        if c.is_null() {
            return Ok(());
        }
        // Emptied first, so that a free from inside an exchange's callback is refused with the
        // handle still live. Other threads may still hold the object in their cache until their
        // next call: it stays empty.
        live(c, "c")?.shared().release_memory()?;
        let Some(_object) = unregister(c)? else { return Ok(()) };
        GENERATION.fetch_add(1, Ordering::AcqRel);
        let _ = LAST.try_with(|last| last.try_borrow_mut().map(|mut slot| slot.take()));
        Ok(())
    })
}

/// Adds one API event (copied; `event` is borrowed for the call). Main and auxiliary events are
/// told apart by `event->flags`. A second event of the same kind under one correlation id is
/// kept too and reported as a duplicate by the next exchange; nothing is replaced.
///
/// Returns `RCB_STATUS_INVALID_ARGUMENT` for an unknown flag, `RCB_STATUS_OUT_OF_MEMORY` when the
/// config's `max_api_events` is reached (the event is counted in `over_limit`, not stored).
/// Cost: a hash, one shard's lock, a push; independent of how many events are held.
///
/// Thread-safety: any number of threads at once, also during an exchange of the same correlator
/// (the event then goes to the next exchange).
///
/// # Safety
/// `c` NULL or a handle; `event` NULL or a valid `rcb_api_event`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_add_api_event(c: *mut rcb_correlator, event: *const rcb_api_event) -> rcb_status {
    boundary(|| {
        // SAFETY: validity is the caller's promise; identical layout (checked above).
        let event = unsafe { arg_ref(event as *const ApiEvent, "event") }?;
        with(c, |c| c.add_api_event(event))
    })
}

/// Adds one activity (copied; `activity` is borrowed for the call). Any number of activities may
/// share a correlation id; each is kept.
///
/// Returns `RCB_STATUS_OUT_OF_MEMORY` when the config's `max_activities` is reached (the activity
/// is counted in `over_limit`, not stored). Cost as `rcb_correlator_add_api_event`.
///
/// Thread-safety: as `rcb_correlator_add_api_event`.
///
/// # Safety
/// `c` NULL or a handle; `activity` NULL or a valid `rcb_activity`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_add_activity(c: *mut rcb_correlator, activity: *const rcb_activity) -> rcb_status {
    boundary(|| {
        // SAFETY: validity is the caller's promise; identical layout (checked above).
        let activity = unsafe { arg_ref(activity as *const Activity, "activity") }?;
        with(c, |c| c.add_activity(activity))
    })
}

/// Adds `n` API events (copied; `events` is borrowed for the call; NULL allowed when `n` is 0):
/// all of them, or none when one has an unknown flag (the message names its index) or the limit
/// would be passed (only a shard holding `RCB_CORRELATOR_MAX_PENDING` stops it midway).
/// Consecutive events of one shard are pushed under one lock.
///
/// Thread-safety: as `rcb_correlator_add_api_event`.
///
/// # Safety
/// `c` NULL or a handle; `events` NULL or `n` valid entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_add_api_events(c: *mut rcb_correlator, events: *const rcb_api_event, n: usize) -> rcb_status {
    boundary(|| {
        // SAFETY: the count is the caller's promise, bounded first; identical layout.
        let events = unsafe { arg_slice(events as *const ApiEvent, n, "events", MAX_PENDING as usize) }?;
        with(c, |c| c.add_api_events(events))
    })
}

/// Adds `n` activities (copied; `activities` is borrowed for the call; NULL allowed when `n` is
/// 0): all of them, or none when the limit would be passed (only a shard holding
/// `RCB_CORRELATOR_MAX_PENDING` stops it midway). Consecutive activities of one shard (the
/// records of one graph launch) are pushed under one lock: the call for a buffer of activity
/// records that a profiler delivers at once.
///
/// Thread-safety: as `rcb_correlator_add_api_event`.
///
/// # Safety
/// `c` NULL or a handle; `activities` NULL or `n` valid entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_add_activities(c: *mut rcb_correlator, activities: *const rcb_activity, n: usize) -> rcb_status {
    boundary(|| {
        // SAFETY: the count is the caller's promise, bounded first; identical layout.
        let activities = unsafe { arg_slice(activities as *const Activity, n, "activities", MAX_PENDING as usize) }?;
        with(c, |c| c.add_activities(activities))
    })
}

/// Calls a sink's C callbacks.
struct CSink {
    sink: rcb_correlator_sink,
}

fn callback_result(what: &str, code: i32) -> Result<()> {
    match code {
        0 => Ok(()),
        code => Err(Error::new(ErrorKind::CallbackFailed, format!("the sink's `{what}` callback returned {code}"))),
    }
}

impl Sink for CSink {
    fn wants_activities(&self) -> bool {
        self.sink.activities.is_some()
    }

    fn wants_api_events(&self) -> bool {
        self.sink.api_events.is_some()
    }

    fn wants_api_events_without_activity(&self) -> bool {
        self.sink.api_events_without_activity.is_some()
    }

    fn activities(&mut self, device: u32, total: u64, records: &[CorrelatedActivity]) -> Result<()> {
        let Some(f) = self.sink.activities else { return Ok(()) };
        // SAFETY: the caller promises the callback may be called with its user data; identical
        // layout (checked above); the records outlive the call.
        let code = unsafe { f(self.sink.user_data, device, total, records.as_ptr() as *const rcb_correlated_activity, records.len()) };
        callback_result("activities", code)
    }

    fn api_events(&mut self, device: u32, total: u64, records: &[CorrelatedApiEvent]) -> Result<()> {
        let Some(f) = self.sink.api_events else { return Ok(()) };
        // SAFETY: as above.
        let code = unsafe { f(self.sink.user_data, device, total, records.as_ptr() as *const rcb_correlated_api_event, records.len()) };
        callback_result("api_events", code)
    }

    fn api_events_without_activity(&mut self, total: u64, records: &[CorrelatedApiEvent]) -> Result<()> {
        let Some(f) = self.sink.api_events_without_activity else { return Ok(()) };
        // SAFETY: as above.
        let code =
            unsafe { f(self.sink.user_data, RCB_DEVICE_NONE, total, records.as_ptr() as *const rcb_correlated_api_event, records.len()) };
        callback_result("api_events_without_activity", code)
    }

    fn dropped(&mut self, reports: &[Report]) -> Result<()> {
        let Some(f) = self.sink.dropped else { return Ok(()) };
        // SAFETY: as above.
        let code = unsafe { f(self.sink.user_data, reports.as_ptr() as *const rcb_correlation_report, reports.len()) };
        callback_result("dropped", code)
    }

    fn duplicates(&mut self, reports: &[Report]) -> Result<()> {
        let Some(f) = self.sink.duplicates else { return Ok(()) };
        // SAFETY: as above.
        let code = unsafe { f(self.sink.user_data, reports.as_ptr() as *const rcb_correlation_report, reports.len()) };
        callback_result("duplicates", code)
    }
}

impl From<Summary> for rcb_correlator_summary {
    fn from(s: Summary) -> Self {
        rcb_correlator_summary {
            activities: s.activities,
            joined_main: s.joined_main,
            joined_auxiliary: s.joined_auxiliary,
            without_api: s.without_api,
            api_events: s.api_events,
            api_without_activity: s.api_without_activity,
            auxiliary_api_events: s.auxiliary_api_events,
            dropped_ids: s.dropped_ids,
            duplicate_ids: s.duplicate_ids,
            duplicate_api_events: s.duplicate_api_events,
            ..Self::default()
        }
    }
}

/// Joins every pending event by correlation id and delivers the result through `sink`, then
/// drops the events (their memory is kept for the next session). A flush: events added later
/// (also during this call, from other threads) go to the next exchange; an exchange with nothing
/// pending calls no callback and succeeds.
///
/// Delivered, in this order of callbacks, each in batches of at most `RCB_CORRELATOR_BATCH`:
/// 1. `activities`: every activity exactly once, with the main API event of its correlation id,
///    else its auxiliary one, else NULL; ordered by device, start, correlation id (then end,
///    stream, kind, name); each batch of one device.
/// 2. `api_events`: the main API event of every correlation id that has activities (one per
///    id), with the first of those activities (in the order of 1) and their number; ordered by
///    that activity's device, then start, correlation id (then end, thread, kind, name); each
///    batch of one device. Auxiliary API events are never reported alone.
/// 3. `api_events_without_activity`: the main API event of every correlation id without
///    activities, ordered by start, correlation id (then end, thread, kind, name).
/// 4. `dropped`: one report per correlation id with activities but no API event, by id.
/// 5. `duplicates`: one report per correlation id with more than one main or more than one
///    auxiliary API event, by id. Of several events of one kind, the one kept (joined, reported
///    in 2 or 3) is the earliest by start (then end, thread, kind, name); the others are only
///    counted.
///
/// The order depends on the events only, never on which threads added them or when: the same
/// events give the same output, pointer values aside.
///
/// An exchange joins what is pending when it starts: a correlation id whose API event arrives
/// in one exchange and its activities in a later one (activities are delivered asynchronously,
/// after the API call) is reported in two parts: the API event without activities, then the
/// activities without an API event (a dropped report). Exchange when the work of the ids
/// wanted has completed and its activities have been added (XLA's collector exchanges once, at
/// the end of a profiling session).
///
/// Pointers in the records point into the correlator and are valid only during the callback
/// that receives them. When a callback returns non-zero the exchange stops with
/// `RCB_STATUS_CALLBACK_FAILED`, and every event it took is kept for the next exchange (records
/// already delivered will be delivered again). `*summary` is written on success only.
///
/// Thread-safety: any thread; exchanges (and clears, trims) of one correlator run one at a time,
/// adds and stats run alongside. Callbacks run on the calling thread and must not call
/// `rcb_correlator_exchange`, `_clear` or `_trim` on the same correlator (they would wait for
/// themselves); adding to it is fine.
///
/// # Safety
/// `c` NULL or a handle; `sink` NULL or a valid `rcb_correlator_sink` whose callbacks are NULL or
/// safe to call with its `user_data` (`struct_size` bytes readable); `summary` NULL or
/// a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_exchange(
    c: *mut rcb_correlator,
    sink: *const rcb_correlator_sink,
    summary: *mut rcb_correlator_summary,
) -> rcb_status {
    boundary(|| {
        // SAFETY: validity is the caller's promise.
        let sink = unsafe { arg_sized(sink, "sink") }?;
        // SAFETY: the caller promises a NULL or writable sized struct.
        let summary_out = unsafe { arg_out_sized(summary, "summary") }?;
        let result = with(c, |c| c.exchange(&mut CSink { sink }))?;
        // SAFETY: checked by arg_out_sized.
        unsafe { summary_out.write(result.into()) };
        Ok(())
    })
}

/// Drops every pending event without reporting it (an abandoned profiling session); the memory
/// is kept for the next session.
///
/// Thread-safety: any thread; waits for a running exchange of the same correlator. Events added
/// concurrently may or may not be dropped.
///
/// # Safety
/// `c` NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_clear(c: *mut rcb_correlator) -> rcb_status {
    boundary(|| {
        with(c, |c| {
            c.clear();
            Ok(())
        })
    })
}

/// Gives back the memory that holds no pending event: the exchange's buffers and the shards'
/// unused capacity (what `rcb_correlator_exchange` and `rcb_correlator_clear` keep for the next
/// session). Pending events stay. The next session pays for its memory again.
///
/// Thread-safety: any thread; waits for a running exchange of the same correlator.
///
/// # Safety
/// `c` NULL or a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_trim(c: *mut rcb_correlator) -> rcb_status {
    boundary(|| {
        with(c, |c| {
            c.trim();
            Ok(())
        })
    })
}

/// Writes what the correlator holds now (pending events, reserved bytes) and its totals into
/// `*counters`. Takes each shard's lock in turn: a snapshot, not an atomic one while other
/// threads add. During an exchange, the exchange's buffers are counted as the last exchange left
/// them.
///
/// Thread-safety: any thread, also during an exchange (from its callbacks too).
///
/// # Safety
/// `c` NULL or a handle; `counters` NULL or a sized struct writable for its `struct_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rcb_correlator_stats(c: *mut rcb_correlator, counters: *mut rcb_correlator_counters) -> rcb_status {
    boundary(|| {
        // SAFETY: the caller promises a NULL or writable sized struct.
        let out = unsafe { arg_out_sized(counters, "counters") }?;
        let s: Stats = with(c, |c| Ok(c.stats()))?;
        let counters = rcb_correlator_counters {
            shards: s.shards,
            pending_activities: s.pending_activities,
            pending_api_events: s.pending_api_events,
            reserved_bytes: s.reserved_bytes,
            added_activities: s.added_activities,
            added_api_events: s.added_api_events,
            over_limit: s.over_limit,
            ..Default::default()
        };
        // SAFETY: checked by arg_out_sized.
        unsafe { out.write(counters) };
        Ok(())
    })
}
