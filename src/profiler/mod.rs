//! The profiler correlator: HIP API events and device activities joined by their 64-bit
//! correlation id.
//!
//! XLA's ROCm collector (`rocm_collector.cc`) keeps a hash map of API events and a hash map of
//! activity vectors under one mutex, then walks both in `ApiActivityInfoExchange`. Here the
//! events are appended, unjoined, to one of `shards` buckets chosen by a hash of their id, each
//! under its own lock: an add is a hash, an uncontended lock and a push, whatever the number of
//! events already held, and threads that add different ids rarely meet. All joining is done by
//! [`Correlator::exchange`]: every event of an id lives in one bucket, which is split by another
//! hash of the id into partitions small enough for a core's cache, each joined on its own; the
//! output is then sorted into an order that depends only on the events, never on the threads
//! that added them or on their timing.
//!
//! Thread-safety: `&self` everywhere; adds from any number of threads at once, concurrently with
//! an exchange (events added during an exchange go to the next one).

mod exchange;
mod radix;

pub use exchange::{BATCH, CorrelatedActivity, CorrelatedApiEvent, Report, Sink, Summary};

use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// `ApiEvent::flags`: an auxiliary API event (XLA's `auxiliary_api_events_map_`): it enriches
/// activities of its id that have no main API event, and is never reported on its own.
pub const API_AUXILIARY: u32 = 1;
/// The device of an API event none of whose activities arrived.
pub const DEVICE_NONE: u32 = u32::MAX;
/// Shards when the configuration says 0.
pub const DEFAULT_SHARDS: usize = 256;
/// Most shards a correlator may have.
pub const MAX_SHARDS: usize = 4096;
/// Most events of one kind one shard holds between two exchanges (indices into a shard's
/// vectors are 32-bit inside an exchange; that many events take 192 GiB), and most events one
/// batch add takes.
pub const MAX_PENDING: u64 = u32::MAX as u64 - 1;

/// A host-side HIP API event (a callback record). Plain old data, the layout of `rcb_api_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ApiEvent {
    pub correlation_id: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The caller's value (a name pointer or id): stored and given back, never dereferenced.
    pub name: u64,
    pub thread_id: u64,
    /// The caller's kind code, not interpreted.
    pub kind: u32,
    /// [`API_AUXILIARY`] or 0; other bits are rejected.
    pub flags: u32,
}

/// A device activity record. Plain old data, the layout of `rcb_activity`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Activity {
    pub correlation_id: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The caller's value (a name pointer or id): stored and given back, never dereferenced.
    pub name: u64,
    pub stream_id: u64,
    pub device_id: u32,
    /// The caller's kind code, not interpreted.
    pub kind: u32,
}

impl ApiEvent {
    pub fn is_auxiliary(&self) -> bool {
        self.flags & API_AUXILIARY != 0
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Number of shards (rounded up to a power of two); 0 takes [`DEFAULT_SHARDS`], 1 is a single
    /// lock.
    pub shards: usize,
    /// Most activities held between two exchanges; 0: no limit.
    pub max_activities: u64,
    /// Most API events (main and auxiliary) held between two exchanges; 0: no limit.
    pub max_api_events: u64,
}

/// What a correlator holds, and what it refused, now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub shards: u64,
    pub pending_activities: u64,
    pub pending_api_events: u64,
    /// Bytes reserved for events and for the exchange's buffers (what clearing and exchanging keep
    /// for the next session).
    pub reserved_bytes: u64,
    /// Events added over the correlator's life.
    pub added_activities: u64,
    pub added_api_events: u64,
    /// Events refused because a limit of the configuration was reached, over the correlator's
    /// life.
    pub over_limit: u64,
}

/// One shard's events, in the order they arrived.
#[derive(Default)]
struct Bucket {
    activities: Vec<Activity>,
    api_events: Vec<ApiEvent>,
    added_activities: u64,
    added_api_events: u64,
}

/// A cache-line pair of its own per shard, so that threads adding to neighbouring shards do not
/// invalidate each other's lock.
#[repr(align(128))]
struct Shard(Mutex<Bucket>);

impl Shard {
    fn lock(&self) -> MutexGuard<'_, Bucket> {
        // A bucket is two vectors and counters changed by single pushes: a panic while it was held
        // cannot leave it half-changed.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A limit on pending events, checked without a shared write when it is not set.
struct Limit {
    max: u64,
    /// Pending events, counted only when there is a limit: an atomic every add would touch is
    /// what sharding avoids.
    pending: AtomicU64,
}

impl Limit {
    fn new(max: u64) -> Self {
        Self { max: if max == 0 { u64::MAX } else { max }, pending: AtomicU64::new(0) }
    }

    fn counted(&self) -> bool {
        self.max != u64::MAX
    }

    /// Reserves room for `n` events; false (nothing reserved) when that would pass the limit.
    fn reserve(&self, n: u64) -> bool {
        if !self.counted() {
            return true;
        }
        let before = self.pending.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) <= self.max {
            return true;
        }
        self.pending.fetch_sub(n, Ordering::Relaxed);
        false
    }

    fn release(&self, n: u64) {
        if self.counted() && n > 0 {
            self.pending.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

pub struct Correlator {
    shards: Box<[Shard]>,
    /// `64 - log2(shards)`: the shard of an id is the top bits of its multiplicative hash.
    shift: u32,
    activity_limit: Limit,
    api_limit: Limit,
    over_limit: AtomicU64,
    /// Serialises exchanges and clears; holds the buffers an exchange reuses.
    exchange: Mutex<exchange::Scratch>,
    /// Bytes of those buffers, as the last exchange or trim left them: read by `stats`, which
    /// must not wait for an exchange (a sink callback may call it).
    scratch_bytes: AtomicU64,
}

/// Fibonacci hashing: consecutive ids (as correlation ids are) spread over every shard.
#[inline]
fn mix(id: u64) -> u64 {
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Correlator {
    pub fn new(config: &Config) -> Result<Self> {
        let shards = match config.shards {
            0 => DEFAULT_SHARDS,
            n if n > MAX_SHARDS => {
                return Err(Error::invalid_argument(format!("shards: {n} exceeds the limit of {MAX_SHARDS}")));
            }
            n => n.next_power_of_two(),
        };
        Ok(Self {
            shards: (0..shards).map(|_| Shard(Mutex::default())).collect(),
            shift: 64 - shards.trailing_zeros(),
            activity_limit: Limit::new(config.max_activities),
            api_limit: Limit::new(config.max_api_events),
            over_limit: AtomicU64::new(0),
            exchange: Mutex::new(exchange::Scratch::new(shards)),
            scratch_bytes: AtomicU64::new(0),
        })
    }

    #[inline]
    fn shard_of(&self, id: u64) -> usize {
        // `checked_shr` keeps a single shard (shift 64) at index 0.
        mix(id).checked_shr(self.shift).unwrap_or(0) as usize
    }

    fn refuse(&self, n: u64, what: &str, max: u64) -> Error {
        let before = self.over_limit.fetch_add(n, Ordering::Relaxed);
        if before == 0 {
            log::warn!("rcb_correlator: the limit of {max} pending {what} is reached; further events are refused and counted");
        }
        Error::new(
            ErrorKind::OutOfMemory,
            format!(
                "the correlator already holds its limit of {max} {what}; exchange or clear it first (refused events are counted in over_limit)"
            ),
        )
    }

    /// A shard that holds [`MAX_PENDING`] events of a kind refused `n` of them: counted in
    /// `over_limit` like the refusals of a configured limit.
    fn shard_full(&self, n: u64, what: &str) -> Error {
        self.over_limit.fetch_add(n, Ordering::Relaxed);
        Error::new(
            ErrorKind::OutOfMemory,
            format!("a shard of the correlator holds the most {what} it can ({MAX_PENDING}); exchange or clear it first"),
        )
    }

    pub fn add_activity(&self, activity: &Activity) -> Result<()> {
        if !self.activity_limit.reserve(1) {
            return Err(self.refuse(1, "activities", self.activity_limit.max));
        }
        let mut bucket = self.shards[self.shard_of(activity.correlation_id)].lock();
        if !push(&mut bucket.activities, activity) {
            drop(bucket);
            self.activity_limit.release(1);
            return Err(self.shard_full(1, "activities"));
        }
        bucket.added_activities += 1;
        Ok(())
    }

    pub fn add_api_event(&self, event: &ApiEvent) -> Result<()> {
        check_flags(event)?;
        if !self.api_limit.reserve(1) {
            return Err(self.refuse(1, "API events", self.api_limit.max));
        }
        let mut bucket = self.shards[self.shard_of(event.correlation_id)].lock();
        if !push(&mut bucket.api_events, event) {
            drop(bucket);
            self.api_limit.release(1);
            return Err(self.shard_full(1, "API events"));
        }
        bucket.added_api_events += 1;
        Ok(())
    }

    /// Adds every activity or none (when the limit would be passed); only a shard that holds
    /// [`MAX_PENDING`] activities stops it midway. Consecutive activities of one shard (the
    /// records of one graph launch) are pushed under one lock.
    pub fn add_activities(&self, activities: &[Activity]) -> Result<()> {
        if !self.activity_limit.reserve(activities.len() as u64) {
            return Err(self.refuse(activities.len() as u64, "activities", self.activity_limit.max));
        }
        let added = self.add_runs(
            activities,
            |a| a.correlation_id,
            |b, a| {
                let pushed = push(&mut b.activities, a);
                b.added_activities += u64::from(pushed);
                pushed
            },
        );
        if added < activities.len() {
            self.activity_limit.release((activities.len() - added) as u64);
            return Err(self.shard_full((activities.len() - added) as u64, "activities").context(format!("activities[{added}]")));
        }
        Ok(())
    }

    /// Adds every API event or none (a bad flag or the limit); only a shard that holds
    /// [`MAX_PENDING`] API events stops it midway.
    pub fn add_api_events(&self, events: &[ApiEvent]) -> Result<()> {
        for (i, e) in events.iter().enumerate() {
            check_flags(e).map_err(|err| err.context(format!("events[{i}]")))?;
        }
        if !self.api_limit.reserve(events.len() as u64) {
            return Err(self.refuse(events.len() as u64, "API events", self.api_limit.max));
        }
        let added = self.add_runs(
            events,
            |e| e.correlation_id,
            |b, e| {
                let pushed = push(&mut b.api_events, e);
                b.added_api_events += u64::from(pushed);
                pushed
            },
        );
        if added < events.len() {
            self.api_limit.release((events.len() - added) as u64);
            return Err(self.shard_full((events.len() - added) as u64, "API events").context(format!("events[{added}]")));
        }
        Ok(())
    }

    /// Pushes `items` in order, holding a shard's lock across a run of items of that shard; stops
    /// at the first item `push` refuses. Returns how many were pushed.
    fn add_runs<T>(&self, items: &[T], id: impl Fn(&T) -> u64, mut push: impl FnMut(&mut Bucket, &T) -> bool) -> usize {
        let mut held: Option<(usize, MutexGuard<'_, Bucket>)> = None;
        for (i, item) in items.iter().enumerate() {
            let shard = self.shard_of(id(item));
            let bucket = match &mut held {
                Some((s, guard)) if *s == shard => guard,
                _ => {
                    // The previous guard is dropped first: never two shards locked at once.
                    held = None;
                    &mut held.insert((shard, self.shards[shard].lock())).1
                }
            };
            if !push(bucket, item) {
                return i;
            }
        }
        items.len()
    }

    /// Drops every pending event; the memory they used is kept for the next session.
    pub fn clear(&self) {
        let _exclusive = self.exchange.lock().unwrap_or_else(PoisonError::into_inner);
        for shard in self.shards.iter() {
            let mut b = shard.lock();
            self.activity_limit.release(b.activities.len() as u64);
            self.api_limit.release(b.api_events.len() as u64);
            b.activities.clear();
            b.api_events.clear();
        }
    }

    /// Gives back every byte held (pending events and reserved capacity); used when the handle is
    /// freed, since another thread may keep the emptied object alive a little longer.
    ///
    /// Refused while an exchange of this correlator runs: the free then comes from one of its
    /// sink's callbacks (a free alongside another call is outside the contract), which would
    /// otherwise wait forever for the exchange it runs in.
    pub fn release_memory(&self) -> Result<()> {
        let mut scratch = match self.exchange.try_lock() {
            Ok(scratch) => scratch,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(Error::invalid_state(
                    "the correlator is exchanging: a sink's callback cannot free the correlator of its exchange (free it after rcb_correlator_exchange returns)",
                ));
            }
        };
        *scratch = exchange::Scratch::new(0);
        self.scratch_bytes.store(0, Ordering::Relaxed);
        for shard in self.shards.iter() {
            let mut b = shard.lock();
            self.activity_limit.release(b.activities.len() as u64);
            self.api_limit.release(b.api_events.len() as u64);
            b.activities = Vec::new();
            b.api_events = Vec::new();
        }
        Ok(())
    }

    /// Gives back the memory that holds no pending event: the exchange's buffers and the unused
    /// capacity of the shards. Pending events stay.
    pub fn trim(&self) {
        let mut scratch = self.exchange.lock().unwrap_or_else(PoisonError::into_inner);
        *scratch = exchange::Scratch::new(self.shards.len());
        self.scratch_bytes.store(scratch.reserved_bytes(), Ordering::Relaxed);
        for shard in self.shards.iter() {
            let mut b = shard.lock();
            b.activities.shrink_to_fit();
            b.api_events.shrink_to_fit();
        }
    }

    pub fn stats(&self) -> Stats {
        let scratch = self.scratch_bytes.load(Ordering::Relaxed);
        let mut s = Stats {
            shards: self.shards.len() as u64,
            over_limit: self.over_limit.load(Ordering::Relaxed),
            reserved_bytes: scratch,
            ..Stats::default()
        };
        for shard in self.shards.iter() {
            let b = shard.lock();
            s.pending_activities += b.activities.len() as u64;
            s.pending_api_events += b.api_events.len() as u64;
            s.reserved_bytes += (b.activities.capacity() * size_of::<Activity>() + b.api_events.capacity() * size_of::<ApiEvent>()) as u64;
            s.added_activities += b.added_activities;
            s.added_api_events += b.added_api_events;
        }
        s
    }

    /// Joins and reports every pending event through `sink` (see [`exchange`] for the order and
    /// the reports), then drops them, keeping their memory. When the sink fails, every event
    /// taken is put back and the error returned.
    pub fn exchange(&self, sink: &mut dyn Sink) -> Result<Summary> {
        let mut scratch = self.exchange.lock().unwrap_or_else(PoisonError::into_inner);
        let result = exchange::run(self, &mut scratch, sink);
        self.scratch_bytes.store(scratch.reserved_bytes(), Ordering::Relaxed);
        result
    }
}

/// Pushes `item` unless the vector holds [`MAX_PENDING`] already, and asks for the cache line a
/// few items ahead. A shard's next slot is memory
/// that has not been touched for a long time, and the lock's release waits for the store to it:
/// without the prefetch that wait is a miss to memory on most adds (measured: it was most of the
/// cost of an add).
#[inline]
fn push<T: Copy>(v: &mut Vec<T>, item: &T) -> bool {
    if v.len() as u64 >= MAX_PENDING {
        return false;
    }
    v.push(*item);
    // The address may lie past the allocation: a prefetch never faults.
    crate::prefetch::line(v.as_ptr().wrapping_add(v.len() + 4));
    true
}

fn check_flags(e: &ApiEvent) -> Result<()> {
    if e.flags & !API_AUXILIARY != 0 {
        return Err(Error::invalid_argument(format!(
            "flags {:#x} of the API event with correlation id {} has bits other than RCB_API_EVENT_AUXILIARY",
            e.flags, e.correlation_id
        )));
    }
    Ok(())
}
