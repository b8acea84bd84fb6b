//! The exchange: every pending event taken out of the shards, joined by correlation id one
//! partition at a time, sorted, and handed to a [`Sink`] in batches.
//!
//! Output, and its order (a function of the events alone; ties fall through to every field, so
//! only identical events can swap places, and they are indistinguishable):
//! 1. every activity once, with the main API event of its id, else its auxiliary one, else none;
//!    by device, start, correlation id, then end, stream, kind and name; in batches of one device;
//! 2. the kept main API event of every id with activities, with the first of them in the order
//!    above and their number; by that activity's device, start, correlation id, then end,
//!    thread, kind and name; in batches of one device;
//! 3. the kept main API event of every id without activities, by start, id and the rest;
//! 4. one "dropped" report per correlation id that has activities but no API event, by id;
//! 5. one "duplicate" report per correlation id that has more than one main or more than one
//!    auxiliary API event, by id. Of several API events of one kind under one id, the one kept
//!    (joined and reported) is the earliest by start, then the rest of the order above; the
//!    others are counted in the report, never joined.

use super::{Activity, ApiEvent, Bucket, Correlator, DEVICE_NONE, radix};
use crate::error::Result;
use std::cmp::Ordering;
use std::ptr;

/// Most records handed to one call of a sink.
pub const BATCH: usize = 4096;

/// An activity and the API event joined to it (null when its id has none). Both point into the
/// correlator and are valid only during the sink call that receives them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CorrelatedActivity {
    pub activity: *const Activity,
    pub api: *const ApiEvent,
}

/// A main API event, the first activity of its id (null when none) and how many activities its id
/// has. Pointers valid only during the sink call that receives them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CorrelatedApiEvent {
    pub api: *const ApiEvent,
    pub first_activity: *const Activity,
    pub activities: u64,
}

/// What one correlation id holds: a dropped report (activities, no API event) or a duplicate
/// report (more than one API event of a kind).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Report {
    pub correlation_id: u64,
    /// Activities under the id.
    pub activities: u64,
    /// Main API events under the id (one is kept; the others are duplicates).
    pub api_events: u32,
    /// Auxiliary API events under the id (likewise).
    pub auxiliary_api_events: u32,
    /// Device of the id's first activity, [`DEVICE_NONE`] when it has none.
    pub device_id: u32,
    pub reserved: u32,
}

/// Counts of one exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Activities reported (all of them).
    pub activities: u64,
    /// Activities joined to a main API event.
    pub joined_main: u64,
    /// Activities joined to an auxiliary API event (their id has no main one).
    pub joined_auxiliary: u64,
    /// Activities whose id has no API event (the sum of the dropped reports' `activities`).
    pub without_api: u64,
    /// Main API events reported (one per id that has one).
    pub api_events: u64,
    /// Of those, API events none of whose activities arrived.
    pub api_without_activity: u64,
    /// Auxiliary API events taken (they are joined, never reported alone).
    pub auxiliary_api_events: u64,
    /// Ids with activities but no API event (one dropped report each).
    pub dropped_ids: u64,
    /// Ids with more than one API event of a kind (one duplicate report each).
    pub duplicate_ids: u64,
    /// API events beyond the kept one of their id and kind, main and auxiliary.
    pub duplicate_api_events: u64,
}

/// Where an exchange's output goes. A method returning an error stops the exchange; the
/// correlator then keeps every event it had.
pub trait Sink {
    /// False: activity records are not wanted (not sorted either).
    fn wants_activities(&self) -> bool {
        true
    }
    /// False: API event records of ids with activities are not wanted (not sorted either).
    fn wants_api_events(&self) -> bool {
        true
    }
    /// False: API event records of ids without activities are not wanted (not sorted either).
    fn wants_api_events_without_activity(&self) -> bool {
        true
    }
    /// At most [`BATCH`] records, all of `device`, which has `total` in this exchange.
    fn activities(&mut self, device: u32, total: u64, records: &[CorrelatedActivity]) -> Result<()>;
    /// At most [`BATCH`] records, all of `device`, which has `total` in this exchange.
    fn api_events(&mut self, device: u32, total: u64, records: &[CorrelatedApiEvent]) -> Result<()>;
    /// At most [`BATCH`] records of API events none of whose activities arrived, of `total`.
    fn api_events_without_activity(&mut self, total: u64, records: &[CorrelatedApiEvent]) -> Result<()>;
    /// At most [`BATCH`] reports.
    fn dropped(&mut self, reports: &[Report]) -> Result<()>;
    /// At most [`BATCH`] reports.
    fn duplicates(&mut self, reports: &[Report]) -> Result<()>;
}

const NONE: u32 = u32::MAX;
/// Device ids below this are found in a table (HIP numbers devices from 0; roctracer from the
/// CPU count); others in a map.
const DIRECT: usize = 4096;

/// One correlation id of the shard being joined. Free when all three counts are 0.
#[derive(Clone, Copy, Default)]
struct Slot {
    id: u64,
    n_act: u32,
    n_main: u32,
    n_aux: u32,
    /// Indices into the shard's vectors: its first activity, its kept main and auxiliary events.
    first_act: u32,
    main: u32,
    aux: u32,
}

impl Slot {
    fn used(&self) -> bool {
        self.n_act | self.n_main | self.n_aux != 0
    }
}

/// Where an event lives during an exchange: its shard in the high half, its index in the low.
fn at(shard: usize, index: usize) -> u64 {
    ((shard as u64) << 32) | index as u64
}

fn split(at: u64) -> (usize, usize) {
    ((at >> 32) as usize, (at & 0xFFFF_FFFF) as usize)
}

/// Sort entry of an activity: its start time inline, the rest of its key behind `at`.
#[derive(Clone, Copy)]
struct ActEntry {
    start: u64,
    at: u64,
}

/// Sort entry of a main API event, with its id's first activity (same shard; `NONE` when none)
/// and number of activities.
#[derive(Clone, Copy)]
struct ApiEntry {
    start: u64,
    at: u64,
    first_act: u32,
    n_act: u32,
}

impl radix::Keyed for ActEntry {
    fn key(&self) -> u64 {
        self.start
    }
}

impl radix::Keyed for ApiEntry {
    fn key(&self) -> u64 {
        self.start
    }
}

/// Buffers kept from one exchange to the next, so that a flush allocates nothing once the
/// correlator has seen its largest session.
pub(super) struct Scratch {
    /// The shards' vectors while they are joined; they go back to the shards afterwards (with
    /// their capacity), so that the shards hold the only large allocation between exchanges.
    taken: Vec<Bucket>,
    /// Per shard, per activity: the index of the API event joined to it, or `NONE`.
    joined: Vec<Vec<u32>>,
    table: Vec<Slot>,
    /// Per event of the shard being joined: its slot in `table`.
    act_slot: Vec<u32>,
    api_slot: Vec<u32>,
    /// Devices seen by this correlator, in the order they first came, and their entries (same
    /// index); kept across exchanges, so that the vectors keep their capacity.
    devices: Vec<u32>,
    /// `devices` index + 1 of a device id below [`DIRECT`] (0: not seen), and of the others.
    direct: Vec<u32>,
    other_devices: std::collections::BTreeMap<u32, usize>,
    acts: Vec<Vec<ActEntry>>,
    apis: Vec<Vec<ApiEntry>>,
    /// Main API events of ids without activities.
    orphans: Vec<ApiEntry>,
    tmp_acts: Vec<ActEntry>,
    tmp_apis: Vec<ApiEntry>,
    /// Where a shard's events are partitioned to (then swapped with the shard's own vectors).
    spare_acts: Vec<Activity>,
    spare_apis: Vec<ApiEvent>,
    dropped: Vec<Report>,
    duplicates: Vec<Report>,
}

impl Scratch {
    pub(super) fn new(shards: usize) -> Self {
        Self {
            taken: (0..shards).map(|_| Bucket::default()).collect(),
            joined: (0..shards).map(|_| Vec::new()).collect(),
            table: Vec::new(),
            act_slot: Vec::new(),
            api_slot: Vec::new(),
            devices: Vec::new(),
            direct: Vec::new(),
            other_devices: std::collections::BTreeMap::new(),
            acts: Vec::new(),
            apis: Vec::new(),
            orphans: Vec::new(),
            tmp_acts: Vec::new(),
            tmp_apis: Vec::new(),
            spare_acts: Vec::new(),
            spare_apis: Vec::new(),
            dropped: Vec::new(),
            duplicates: Vec::new(),
        }
    }

    /// Bytes held by the buffers, events taken aside (none between exchanges) included.
    pub(super) fn reserved_bytes(&self) -> u64 {
        fn bytes<T>(v: &Vec<T>) -> usize {
            v.capacity() * size_of::<T>()
        }
        let shards: usize = self.taken.iter().map(|b| bytes(&b.activities) + bytes(&b.api_events)).sum::<usize>()
            + self.joined.iter().map(bytes).sum::<usize>();
        let devices = self.acts.iter().map(bytes).sum::<usize>() + self.apis.iter().map(bytes).sum::<usize>();
        (shards
            + devices
            + bytes(&self.table)
            + bytes(&self.act_slot)
            + bytes(&self.api_slot)
            + bytes(&self.orphans)
            + bytes(&self.tmp_acts)
            + bytes(&self.tmp_apis)
            + bytes(&self.spare_acts)
            + bytes(&self.spare_apis)
            + bytes(&self.dropped)
            + bytes(&self.duplicates)) as u64
    }

    /// Index of `device` in `devices`/`acts`/`apis`, added when new.
    fn device_index(&mut self, device: u32) -> usize {
        let d = device as usize;
        if d < DIRECT {
            if self.direct.len() <= d {
                self.direct.resize(d + 1, 0);
            }
            if self.direct[d] == 0 {
                self.direct[d] = self.new_device(device) as u32 + 1;
            }
            return self.direct[d] as usize - 1;
        }
        if let Some(&i) = self.other_devices.get(&device) {
            return i;
        }
        let i = self.new_device(device);
        self.other_devices.insert(device, i);
        i
    }

    fn new_device(&mut self, device: u32) -> usize {
        self.devices.push(device);
        self.acts.push(Vec::new());
        self.apis.push(Vec::new());
        self.devices.len() - 1
    }

    /// Indices into `devices` by ascending device id.
    fn device_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.devices.len()).collect();
        order.sort_unstable_by_key(|&i| self.devices[i]);
        order
    }

    fn activity(&self, at: u64) -> &Activity {
        let (shard, i) = split(at);
        &self.taken[shard].activities[i]
    }

    fn api_event(&self, at: u64) -> &ApiEvent {
        let (shard, i) = split(at);
        &self.taken[shard].api_events[i]
    }
}

/// The activity order after (device, start, id): the remaining fields.
fn act_rest(a: &Activity, b: &Activity) -> Ordering {
    (a.end_ns, a.stream_id, a.kind, a.name).cmp(&(b.end_ns, b.stream_id, b.kind, b.name))
}

fn act_order(a: &Activity, b: &Activity) -> Ordering {
    (a.device_id, a.start_ns, a.correlation_id).cmp(&(b.device_id, b.start_ns, b.correlation_id)).then_with(|| act_rest(a, b))
}

/// The API event order after (device, start): the remaining fields.
fn api_after_start(a: &ApiEvent, b: &ApiEvent) -> Ordering {
    (a.correlation_id, a.end_ns, a.thread_id, a.kind, a.name).cmp(&(b.correlation_id, b.end_ns, b.thread_id, b.kind, b.name))
}

/// The order among API events of one id and kind, to pick the kept one.
fn api_order(a: &ApiEvent, b: &ApiEvent) -> Ordering {
    a.start_ns.cmp(&b.start_ns).then_with(|| api_after_start(a, b))
}

/// Sorts runs of entries with equal start times (left in input order by the stable radix sort,
/// an order that depends on the adding threads) by the rest of the key.
fn order_ties<T: radix::Keyed>(v: &mut [T], rest: impl Fn(&T, &T) -> Ordering) {
    let mut i = 0;
    while i < v.len() {
        let key = v[i].key();
        let j = i + v[i..].iter().take_while(|e| e.key() == key).count();
        if j - i > 1 {
            v[i..j].sort_unstable_by(&rest);
        }
        i = j;
    }
}

pub(super) fn run(c: &Correlator, s: &mut Scratch, sink: &mut dyn Sink) -> Result<Summary> {
    if s.taken.len() != c.shards.len() {
        *s = Scratch::new(c.shards.len());
    }
    for (shard, taken) in c.shards.iter().zip(s.taken.iter_mut()) {
        let mut b = shard.lock();
        std::mem::swap(&mut b.activities, &mut taken.activities);
        std::mem::swap(&mut b.api_events, &mut taken.api_events);
    }
    let result = join_and_report(s, sink);
    let succeeded = result.is_ok();
    // Give the vectors back: on success emptied (capacity kept), on failure with their events, in
    // both cases with whatever was added meanwhile.
    let (mut taken_acts, mut taken_apis) = (0u64, 0u64);
    for (shard, taken) in c.shards.iter().zip(s.taken.iter_mut()) {
        taken_acts += taken.activities.len() as u64;
        taken_apis += taken.api_events.len() as u64;
        if succeeded {
            taken.activities.clear();
            taken.api_events.clear();
        }
        let mut b = shard.lock();
        taken.activities.append(&mut b.activities);
        taken.api_events.append(&mut b.api_events);
        std::mem::swap(&mut b.activities, &mut taken.activities);
        std::mem::swap(&mut b.api_events, &mut taken.api_events);
        drop(b);
        // What the shard received meanwhile is small; its buffer is not worth keeping twice.
        taken.activities = Vec::new();
        taken.api_events = Vec::new();
    }
    if succeeded {
        c.activity_limit.release(taken_acts);
        c.api_limit.release(taken_apis);
    }
    result
}

/// Which outputs the sink takes; the others are neither collected nor sorted.
#[derive(Clone, Copy)]
struct Wants {
    activities: bool,
    api_events: bool,
    orphans: bool,
}

fn join_and_report(s: &mut Scratch, sink: &mut dyn Sink) -> Result<Summary> {
    let mut sum = Summary::default();
    let want = Wants {
        activities: sink.wants_activities(),
        api_events: sink.wants_api_events(),
        orphans: sink.wants_api_events_without_activity(),
    };
    s.acts.iter_mut().for_each(Vec::clear);
    s.apis.iter_mut().for_each(Vec::clear);
    s.orphans.clear();
    s.dropped.clear();
    s.duplicates.clear();

    for shard in 0..s.taken.len() {
        join_shard(s, shard, want, &mut sum);
    }

    let (mut acts, mut apis, mut orphans) = (std::mem::take(&mut s.acts), std::mem::take(&mut s.apis), std::mem::take(&mut s.orphans));
    for v in acts.iter_mut() {
        radix::sort(v, &mut s.tmp_acts);
        order_ties(v, |x, y| {
            let (a, b) = (s.activity(x.at), s.activity(y.at));
            a.correlation_id.cmp(&b.correlation_id).then_with(|| act_rest(a, b))
        });
    }
    for v in apis.iter_mut().chain(std::iter::once(&mut orphans)) {
        radix::sort(v, &mut s.tmp_apis);
        order_ties(v, |x, y| api_after_start(s.api_event(x.at), s.api_event(y.at)));
    }
    s.dropped.sort_unstable_by_key(|r| r.correlation_id);
    s.duplicates.sort_unstable_by_key(|r| r.correlation_id);
    let delivered = deliver(s, &acts, &apis, &orphans, sink);
    (s.acts, s.apis, s.orphans) = (acts, apis, orphans);
    delivered.map(|()| sum)
}

fn api_records(s: &Scratch, entries: &[ApiEntry], out: &mut Vec<CorrelatedApiEvent>) {
    out.clear();
    out.extend(entries.iter().map(|e| {
        let (shard, i) = split(e.at);
        let bucket = &s.taken[shard];
        let first_activity = match e.first_act {
            NONE => ptr::null(),
            k => &bucket.activities[k as usize] as *const Activity,
        };
        CorrelatedApiEvent { api: &bucket.api_events[i], first_activity, activities: e.n_act as u64 }
    }));
}

fn deliver(s: &Scratch, acts: &[Vec<ActEntry>], apis: &[Vec<ApiEntry>], orphans: &[ApiEntry], sink: &mut dyn Sink) -> Result<()> {
    let mut out = Vec::with_capacity(BATCH);
    let order = s.device_order();
    for &d in &order {
        let (device, entries) = (s.devices[d], &acts[d]);
        for chunk in entries.chunks(BATCH) {
            out.clear();
            out.extend(chunk.iter().map(|e| {
                let (shard, i) = split(e.at);
                let bucket = &s.taken[shard];
                let api = match s.joined[shard][i] {
                    NONE => ptr::null(),
                    k => &bucket.api_events[k as usize] as *const ApiEvent,
                };
                CorrelatedActivity { activity: &bucket.activities[i], api }
            }));
            sink.activities(device, entries.len() as u64, &out)?;
        }
    }
    let mut out = Vec::with_capacity(BATCH);
    for &d in &order {
        let (device, entries) = (s.devices[d], &apis[d]);
        for chunk in entries.chunks(BATCH) {
            api_records(s, chunk, &mut out);
            sink.api_events(device, entries.len() as u64, &out)?;
        }
    }
    for chunk in orphans.chunks(BATCH) {
        api_records(s, chunk, &mut out);
        sink.api_events_without_activity(orphans.len() as u64, &out)?;
    }
    for chunk in s.dropped.chunks(BATCH) {
        sink.dropped(chunk)?;
    }
    for chunk in s.duplicates.chunks(BATCH) {
        sink.duplicates(chunk)?;
    }
    Ok(())
}

/// Second multiplier: the shard took the top bits of the first hash, so the table uses another.
#[inline]
fn slot_hash(id: u64, bits: u32) -> usize {
    (id.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - bits)) as usize
}

fn find_or_insert(table: &mut [Slot], bits: u32, id: u64) -> usize {
    let mask = table.len() - 1;
    let mut i = slot_hash(id, bits);
    loop {
        let slot = &mut table[i];
        if !slot.used() {
            slot.id = id;
            return i;
        }
        if slot.id == id {
            return i;
        }
        i = (i + 1) & mask;
    }
}

/// Most events of one partition: its events and its table then fit in a core's L2 cache.
const PARTITION: usize = 4096;

/// Third multiplier, for the partitions of a shard (the shard and the table use the others).
#[inline]
fn partition_of(id: u64, bits: u32) -> usize {
    // `checked_shr`: one partition (bits 0) is partition 0.
    id.wrapping_mul(0xA076_1D64_78BD_642F).checked_shr(64 - bits).unwrap_or(0) as usize
}

/// Reorders `v` by partition (stable), through `spare`; returns where each partition starts, and
/// its end as the last entry.
fn partition<T: Copy>(v: &mut Vec<T>, spare: &mut Vec<T>, bits: u32, id: impl Fn(&T) -> u64) -> Vec<usize> {
    let parts = 1usize << bits;
    let mut starts = vec![0usize; parts + 1];
    if bits == 0 || v.is_empty() {
        starts[1..].fill(v.len());
        return starts;
    }
    for x in v.iter() {
        starts[partition_of(id(x), bits) + 1] += 1;
    }
    for p in 0..parts {
        starts[p + 1] += starts[p];
    }
    let mut next = starts.clone();
    spare.clear();
    spare.reserve(v.len());
    // SAFETY: the prefix sums give every element its own position below `v.len()`, so every
    // element of `spare` up to that length is written once before the length is set.
    unsafe {
        let out = spare.as_mut_ptr();
        for x in v.iter() {
            let p = partition_of(id(x), bits);
            out.add(next[p]).write(*x);
            next[p] += 1;
        }
        spare.set_len(v.len());
    }
    std::mem::swap(v, spare);
    starts
}

/// Joins one shard: its events are split by another hash of their id into partitions small
/// enough for the cache, each joined on its own. Adds spread over few shards (cheap: few lines
/// written, measured in docs/profiler.md), joins over many small partitions.
fn join_shard(s: &mut Scratch, shard: usize, want: Wants, sum: &mut Summary) {
    let mut bucket = std::mem::take(&mut s.taken[shard]);
    let events = bucket.activities.len() + bucket.api_events.len();
    let bits = events.div_ceil(PARTITION).next_power_of_two().trailing_zeros();
    let act_starts = partition(&mut bucket.activities, &mut s.spare_acts, bits, |a| a.correlation_id);
    let api_starts = partition(&mut bucket.api_events, &mut s.spare_apis, bits, |e| e.correlation_id);
    let mut joined = std::mem::take(&mut s.joined[shard]);
    joined.clear();
    for p in 0..(1usize << bits) {
        let part = Part { shard, acts: act_starts[p]..act_starts[p + 1], apis: api_starts[p]..api_starts[p + 1] };
        join_part(s, &bucket, &mut joined, part, want, sum);
    }
    s.taken[shard] = bucket;
    s.joined[shard] = joined;
}

/// One partition of a shard: index ranges into its vectors.
struct Part {
    shard: usize,
    acts: std::ops::Range<usize>,
    apis: std::ops::Range<usize>,
}

fn join_part(s: &mut Scratch, bucket: &Bucket, joined: &mut Vec<u32>, part: Part, want: Wants, sum: &mut Summary) {
    let (acts, apis) = (&bucket.activities[part.acts.clone()], &bucket.api_events[part.apis.clone()]);
    if acts.is_empty() && apis.is_empty() {
        return;
    }
    let (a0, p0, shard) = (part.acts.start, part.apis.start, part.shard);
    // Taken out of the scratch for the call, so that the device lists can grow meanwhile.
    let mut table = std::mem::take(&mut s.table);
    let (mut act_slot, mut api_slot) = (std::mem::take(&mut s.act_slot), std::mem::take(&mut s.api_slot));
    act_slot.clear();
    api_slot.clear();
    // Slots of ids to report: a second API event of a kind, activities without any API event.
    let (mut duplicate, mut dropped) = (Vec::new(), Vec::new());
    // Load factor at most 2/3 even if every event has its own id.
    let capacity = ((acts.len() + apis.len()) * 3 / 2 + 16).next_power_of_two();
    let bits = capacity.trailing_zeros();
    table.clear();
    table.resize(capacity, Slot::default());

    // Indices in the table are relative to the partition; `joined` and `at` use the shard's.
    for (i, e) in apis.iter().enumerate() {
        let k = find_or_insert(&mut table, bits, e.correlation_id);
        api_slot.push(k as u32);
        let slot = &mut table[k];
        let was_duplicate = slot.n_main > 1 || slot.n_aux > 1;
        let (count, kept) = if e.is_auxiliary() { (&mut slot.n_aux, &mut slot.aux) } else { (&mut slot.n_main, &mut slot.main) };
        if *count == 0 || api_order(e, &apis[*kept as usize]).is_lt() {
            *kept = i as u32;
        }
        *count += 1;
        if !was_duplicate && (slot.n_main > 1 || slot.n_aux > 1) {
            duplicate.push(k as u32);
        }
    }
    for (j, a) in acts.iter().enumerate() {
        let k = find_or_insert(&mut table, bits, a.correlation_id);
        act_slot.push(k as u32);
        let slot = &mut table[k];
        if slot.n_act == 0 {
            slot.first_act = j as u32;
            // Every API event of the partition is in the table already.
            if slot.n_main == 0 && slot.n_aux == 0 {
                dropped.push(k as u32);
            }
        } else if act_order(a, &acts[slot.first_act as usize]).is_lt() {
            slot.first_act = j as u32;
        }
        slot.n_act += 1;
    }

    let mut device: Option<(u32, usize)> = None;
    for (j, (a, &k)) in acts.iter().zip(act_slot.iter()).enumerate() {
        let slot = &table[k as usize];
        let api = if slot.n_main > 0 {
            sum.joined_main += 1;
            (p0 + slot.main as usize) as u32
        } else if slot.n_aux > 0 {
            sum.joined_auxiliary += 1;
            (p0 + slot.aux as usize) as u32
        } else {
            sum.without_api += 1;
            NONE
        };
        joined.push(api);
        if want.activities {
            let i = match device {
                Some((d, i)) if d == a.device_id => i,
                _ => s.device_index(a.device_id),
            };
            device = Some((a.device_id, i));
            s.acts[i].push(ActEntry { start: a.start_ns, at: at(shard, a0 + j) });
        }
    }
    sum.activities += acts.len() as u64;

    // The kept main event of each id, found in arrival order: no jumps through the table's order
    // into the event vectors.
    let mut device: Option<(u32, usize)> = None;
    for (i, (e, &k)) in apis.iter().zip(api_slot.iter()).enumerate() {
        let slot = &table[k as usize];
        if e.is_auxiliary() {
            sum.auxiliary_api_events += 1;
            continue;
        }
        if slot.main != i as u32 {
            continue;
        }
        sum.api_events += 1;
        let first_act = (a0 + slot.first_act as usize) as u32;
        let entry = ApiEntry { start: e.start_ns, at: at(shard, p0 + i), first_act, n_act: slot.n_act };
        if slot.n_act == 0 {
            sum.api_without_activity += 1;
            if want.orphans {
                s.orphans.push(ApiEntry { first_act: NONE, ..entry });
            }
        } else if want.api_events {
            let d = acts[slot.first_act as usize].device_id;
            let di = match device {
                Some((cached, di)) if cached == d => di,
                _ => s.device_index(d),
            };
            device = Some((d, di));
            s.apis[di].push(entry);
        }
    }

    let report = |slot: &Slot| Report {
        correlation_id: slot.id,
        activities: slot.n_act as u64,
        api_events: slot.n_main,
        auxiliary_api_events: slot.n_aux,
        device_id: if slot.n_act > 0 { acts[slot.first_act as usize].device_id } else { DEVICE_NONE },
        reserved: 0,
    };
    for &k in &dropped {
        sum.dropped_ids += 1;
        s.dropped.push(report(&table[k as usize]));
    }
    for &k in &duplicate {
        let slot = &table[k as usize];
        sum.duplicate_ids += 1;
        sum.duplicate_api_events += (slot.n_main.saturating_sub(1) + slot.n_aux.saturating_sub(1)) as u64;
        s.duplicates.push(report(slot));
    }
    s.table = table;
    (s.act_slot, s.api_slot) = (act_slot, api_slot);
}
