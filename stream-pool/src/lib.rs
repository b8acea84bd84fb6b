//! The stream handle cache's logic, independent of how streams are made: idle handles per
//! (device, flags, priority) key, the set of handles currently handed out, and the two
//! `RCB_STREAM_CACHE*` variables that configure it ([`Settings::from_vars`]).
//!
//! `std` only, and a crate of its own so that both users share one copy: `librocm_cmdbuf.so`
//! (behind its `Runtime` interface) and `librocm_cmdbuf_preload.so` (behind the real
//! `hipStream*` functions), which must not link the library and its `rcb_*` exports (see
//! docs/streams.md).
//!
//! Locks: one mutex over the idle lists and counters (few keys, short critical sections) and
//! sixteen shards over the handed-out set; a shard is locked inside the idle lock, never the
//! other way round. No lock is ever held while [`StreamOps`] is called.
//!
//! Two releases of one handle at once: the first marks the handle's record and keeps it until
//! the handle is filed idle (the record leaves in the same step, under the idle lock) or
//! destroyed; the second finds the mark and is refused ([`ReleaseError::Releasing`]). Without
//! the mark the second found the handle neither handed out nor idle, and a caller that destroys
//! such handles itself (the preload, for streams it did not make) destroyed the one the first
//! release then filed idle, for the next acquire to hand out dead.
//!
//! Device resets: every device has an epoch, read under the idle lock when a handle is handed
//! out and advanced by [`Pool::reset`]. A release compares the two under the same lock before
//! it keeps or destroys the handle, so a release that was between its steps when a reset ran
//! neither keeps the handle the reset destroyed nor destroys it a second time; an acquire that
//! was between its steps forgets the handle it hands out. A count of resets, read without a
//! lock, spares both the extra look when no reset has happened since the handle was handed out.

use std::collections::HashMap;
use std::ffi::OsString;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What the pool needs from a GPU runtime.
pub trait StreamOps {
    type Stream: Copy + Eq + Hash;
    type Error;
    /// `(least, greatest)` priority of `device`; numerically lower is higher priority.
    fn priority_range(&self, device: i32) -> Result<(i32, i32), Self::Error>;
    fn create(&self, device: i32, flags: u32, priority: i32) -> Result<Self::Stream, Self::Error>;
    fn destroy(&self, stream: Self::Stream) -> Result<(), Self::Error>;
    fn is_idle(&self, stream: Self::Stream) -> Result<bool, Self::Error>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Off: every acquire creates and every release destroys (handles are still tracked).
    pub enabled: bool,
    /// Idle handles kept per key; a release beyond it destroys the handle.
    pub max_per_key: usize,
}

/// `RCB_STREAM_CACHE`: `0` or `1` (the default) keeps released streams for reuse.
pub const ENABLED_VAR: &str = "RCB_STREAM_CACHE";
/// `RCB_STREAM_CACHE_MAX_PER_KEY`: idle streams kept per (device, flags, priority), default 64.
pub const MAX_PER_KEY_VAR: &str = "RCB_STREAM_CACHE_MAX_PER_KEY";

impl Default for Settings {
    fn default() -> Self {
        Settings { enabled: true, max_per_key: 64 }
    }
}

impl Settings {
    /// Reads [`ENABLED_VAR`] and [`MAX_PER_KEY_VAR`] through `lookup` (the environment, or a map
    /// in tests): values are trimmed, and an unset or empty one takes its default. A malformed
    /// value is an error whose message names the variable and the value; the library fails with
    /// it, the preload turns the cache off and prints it.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Settings, String> {
        let text = |name: &str| -> Result<Option<String>, String> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => match v.into_string() {
                    Ok(s) if s.trim().is_empty() => Ok(None),
                    Ok(s) => Ok(Some(s.trim().to_owned())),
                    Err(_) => Err(format!("environment variable {name} is not valid UTF-8")),
                },
            }
        };
        let defaults = Settings::default();
        let enabled = match text(ENABLED_VAR)?.as_deref() {
            None | Some("1") => defaults.enabled,
            Some("0") => false,
            Some(other) => return Err(format!("environment variable {ENABLED_VAR} is {other:?}; expected 0 or 1")),
        };
        let max_per_key = match text(MAX_PER_KEY_VAR)? {
            None => defaults.max_per_key,
            Some(s) => s.parse().map_err(|_| format!("environment variable {MAX_PER_KEY_VAR} is {s:?}; expected a count of streams"))?,
        };
        Ok(Settings { enabled, max_per_key })
    }
}

/// Counters for one device or, summed, for all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Acquires served by an idle handle.
    pub hits: u64,
    /// Acquires that found no idle handle and created one.
    pub misses: u64,
    /// Handles destroyed on release (busy, unreadable, over the bound, cache off), by trim or by a
    /// device reset.
    pub destroyed: u64,
    /// Idle handles kept now.
    pub kept: u64,
    /// Handles handed out and not yet released.
    pub in_use: u64,
}

/// Why a release did not return the handle to the pool.
#[derive(Debug)]
pub enum ReleaseError<E> {
    /// The handle is not handed out and not in the pool: never acquired, or forgotten by a
    /// [`Pool::reset`] of its device (also one that ran while this release was in progress). The
    /// pool has not touched it after the reset.
    NotHeld,
    /// The handle is idle in the pool: it was released already. It stays there, alive.
    AlreadyReleased,
    /// Another release of the handle is in progress (on another thread). That one decides what
    /// becomes of the handle; this one touches nothing.
    Releasing,
    /// The handle was destroyed (it was not cacheable) and the destroy failed; the pool has
    /// forgotten it.
    Destroy(E),
}

/// How a release learns whether the handle is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idleness {
    /// Ask the runtime ([`StreamOps::is_idle`]); an error counts as busy.
    Query,
    /// The caller vouches for it: the stream was synchronized successfully and nothing was
    /// enqueued on it since. No query is made. A caller that breaks the promise may have the
    /// handle given to the next acquirer with work still pending, which that acquirer's work
    /// then runs after (ordering, not memory safety).
    Known,
}

/// What a release did with the handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    Kept,
    Destroyed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    device: i32,
    flags: u32,
    priority: i32,
}

struct Slot<S> {
    key: Key,
    idle: Vec<S>,
    hits: u64,
    misses: u64,
    destroyed: u64,
}

struct Idle<S> {
    // A handful of keys in practice (devices × flag sets × priorities): a scan beats hashing.
    slots: Vec<Slot<S>>,
    ranges: Vec<(i32, (i32, i32))>,
    /// Per device, how many resets of that device alone it has had (absent: none)...
    epochs: Vec<(i32, u64)>,
    /// ... and how many resets of every device: a device's epoch is the sum.
    all_epochs: u64,
    /// Releases that destroyed a handle so far: numbers them ([`Release::Destroying`]).
    destroys: u64,
}

/// What the handed-out set knows of a handle: the key it was asked for, its device's epoch
/// and the pool's count of resets when it was handed out (for a creation: before the runtime was
/// asked for it), and whether a release of it is in progress.
#[derive(Clone, Copy)]
struct Held {
    key: Key,
    epoch: u64,
    resets: u64,
    release: Release,
}

/// How far a release of a handed-out handle has come.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    None,
    /// Taken by a release that has not yet decided between filing and destroying.
    Deciding,
    /// Being destroyed by the release that numbered it so ([`Idle::destroys`]): once the destroy
    /// returns, that release removes the record only if it still holds this number, so never
    /// the record of a new handle the runtime made at the same address in the meantime.
    Destroying(u64),
}

const SHARDS: usize = 16;

pub struct Pool<S> {
    settings: Settings,
    idle: Mutex<Idle<S>>,
    /// Every handed-out handle and the key it was asked for: it is filed back under that key,
    /// never under flags or a priority read back from the runtime (which may report bits of its
    /// own, and would make every later request for the same key miss).
    held: [Mutex<HashMap<S, Held, BuildHasherDefault<AddrHasher>>>; SHARDS],
    /// Resets of any device so far; advanced under the idle lock with the epochs.
    resets: AtomicU64,
}

impl<S: Copy + Eq + Hash> Pool<S> {
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            idle: Mutex::new(Idle { slots: Vec::new(), ranges: Vec::new(), epochs: Vec::new(), all_epochs: 0, destroys: 0 }),
            held: std::array::from_fn(|_| Mutex::new(HashMap::default())),
            resets: AtomicU64::new(0),
        }
    }

    /// An idle handle with exactly `flags` and `priority` (clamped to the device's range), or a
    /// new one. When a reset of the device runs during the call, the handle may be one the reset
    /// destroyed (the caller raced its own reset): it is handed out but not recorded, so that its
    /// release is [`ReleaseError::NotHeld`] and touches nothing.
    pub fn acquire<O: StreamOps<Stream = S>>(&self, ops: &O, device: i32, flags: u32, priority: i32) -> Result<S, O::Error> {
        let (held, cached) = {
            let mut idle = lock(&self.idle);
            let range = match idle.range(device) {
                Some(range) => range,
                None => {
                    drop(idle);
                    let range = ops.priority_range(device)?;
                    idle = lock(&self.idle);
                    idle.remember(device, range);
                    range
                }
            };
            let key = Key { device, flags, priority: clamp(priority, range) };
            let epoch = idle.epoch(device);
            let resets = self.resets.load(Ordering::SeqCst);
            let slot = idle.slot(key);
            let cached = if self.settings.enabled { slot.idle.pop() } else { None };
            match cached {
                Some(_) => slot.hits += 1,
                None => slot.misses += 1,
            }
            (Held { key, epoch, resets, release: Release::None }, cached)
        };
        let stream = match cached {
            Some(stream) => stream,
            None => ops.create(device, flags, held.key.priority)?,
        };
        lock(self.shard(stream)).insert(stream, held);
        // The record is in before the count is read again: a reset that the read misses comes
        // later, and its sweep of the records finds this one.
        if self.reset_since(&held) {
            lock(self.shard(stream)).remove(&stream);
        }
        Ok(stream)
    }

    /// Takes back a handed-out handle: kept when the cache is on, it is idle (as `idleness`
    /// tells) and its key is below the bound; destroyed otherwise. A handle that is not handed
    /// out is left alone: [`ReleaseError::AlreadyReleased`] when it is idle in the pool (a second
    /// release must never destroy a handle the pool would hand out again),
    /// [`ReleaseError::NotHeld`] otherwise; so is one that another release of it has in hand
    /// ([`ReleaseError::Releasing`]). A reset of the handle's device that runs while the release
    /// is in progress (between marking the handle's record and filing it) makes it
    /// [`ReleaseError::NotHeld`] too: the reset destroyed the handle, which is neither kept nor
    /// destroyed again.
    pub fn release<O: StreamOps<Stream = S>>(&self, ops: &O, stream: S, idleness: Idleness) -> Result<Released, ReleaseError<O::Error>> {
        let marked = lock(self.shard(stream)).get_mut(&stream).map(|held| match held.release {
            Release::None => {
                held.release = Release::Deciding;
                Ok(*held)
            }
            Release::Deciding | Release::Destroying(_) => Err(ReleaseError::Releasing),
        });
        let held = match marked {
            Some(marked) => marked?,
            None => {
                let idle = lock(&self.idle);
                return Err(if idle.slots.iter().any(|slot| slot.idle.contains(&stream)) {
                    ReleaseError::AlreadyReleased
                } else {
                    ReleaseError::NotHeld
                });
            }
        };
        // Forgotten by a reset since it was handed out: never queried. The reset's sweep removes
        // the marked record (it may not have reached it yet; until then a second release is
        // refused as in progress).
        if self.reset_since(&held) {
            return Err(ReleaseError::NotHeld);
        }
        // An error reading the state counts as "not idle": a handle we cannot vouch for is
        // never handed out again. The query comes last: with the cache off it is not made.
        let idle = || match idleness {
            Idleness::Query => matches!(ops.is_idle(stream), Ok(true)),
            Idleness::Known => true,
        };
        let reusable = self.settings.enabled && idle();
        let destroying = {
            let mut idle = lock(&self.idle);
            // A reset during the query destroyed it: neither kept nor destroyed again (and the
            // reset's sweep removes the record).
            if idle.epoch(held.key.device) != held.epoch {
                return Err(ReleaseError::NotHeld);
            }
            let max = self.settings.max_per_key;
            let slot = idle.slot(held.key);
            if reusable && slot.idle.len() < max {
                // The record leaves and the handle is filed in one step under the idle lock: a
                // second release finds one or the other, never neither.
                lock(self.shard(stream)).remove(&stream);
                slot.idle.push(stream);
                return Ok(Released::Kept);
            }
            slot.destroyed += 1;
            idle.destroys += 1;
            let destroying = Release::Destroying(idle.destroys);
            if let Some(record) = lock(self.shard(stream)).get_mut(&stream) {
                record.release = destroying;
            }
            destroying
        };
        // The record stays marked until the handle is gone, so that a second release never
        // reaches a caller that would destroy it too.
        let destroyed = ops.destroy(stream);
        let mut shard = lock(self.shard(stream));
        if shard.get(&stream).is_some_and(|record| record.release == destroying) {
            shard.remove(&stream);
        }
        drop(shard);
        destroyed.map_err(ReleaseError::Destroy)?;
        Ok(Released::Destroyed)
    }

    /// Destroys the idle handles of `device` (all devices when `None`) and returns how many were
    /// destroyed. Every handle is destroyed even when some destroys fail; the first failure is
    /// returned with the count so far.
    pub fn trim<O: StreamOps<Stream = S>>(&self, ops: &O, device: Option<i32>) -> Result<usize, (usize, O::Error)> {
        let taken: Vec<S> = {
            let mut idle = lock(&self.idle);
            let mut taken = Vec::new();
            for slot in idle.slots.iter_mut().filter(|s| device.is_none_or(|d| s.key.device == d)) {
                slot.destroyed += slot.idle.len() as u64;
                taken.append(&mut slot.idle);
            }
            taken
        };
        let mut first_error = None;
        for &stream in &taken {
            if let Err(e) = ops.destroy(stream) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None => Ok(taken.len()),
            Some(e) => Err((taken.len(), e)),
        }
    }

    /// Before a reset of `device` (every device when `None`), which destroys all of its
    /// streams: destroys its idle handles (as [`Pool::trim`], whose result it returns) and forgets
    /// the handed-out ones, so that neither is ever handed out or released through the pool again
    /// (a later release of one is [`ReleaseError::NotHeld`], and so is one that was in progress
    /// during this call).
    pub fn reset<O: StreamOps<Stream = S>>(&self, ops: &O, device: Option<i32>) -> Result<usize, (usize, O::Error)> {
        // The epoch first: a release that took its record before the loop below and files the
        // handle after it must find the epoch changed; one that filed it before is trimmed.
        {
            let mut idle = lock(&self.idle);
            idle.advance(device);
            self.resets.fetch_add(1, Ordering::SeqCst);
        }
        for shard in &self.held {
            lock(shard).retain(|_, held| device.is_some_and(|d| held.key.device != d));
        }
        self.trim(ops, device)
    }

    pub fn stats(&self, device: Option<i32>) -> Stats {
        let wanted = |d: i32| device.is_none_or(|w| w == d);
        let mut stats = Stats::default();
        for slot in lock(&self.idle).slots.iter().filter(|s| wanted(s.key.device)) {
            stats.hits += slot.hits;
            stats.misses += slot.misses;
            stats.destroyed += slot.destroyed;
            stats.kept += slot.idle.len() as u64;
        }
        // A handle being released counts as in use until its release has filed or destroyed it.
        for shard in &self.held {
            stats.in_use += lock(shard).values().filter(|held| wanted(held.key.device)).count() as u64;
        }
        stats
    }

    /// Whether a reset of `held`'s device ran since it was handed out.
    fn reset_since(&self, held: &Held) -> bool {
        self.resets.load(Ordering::SeqCst) != held.resets && lock(&self.idle).epoch(held.key.device) != held.epoch
    }

    fn shard(&self, stream: S) -> &Mutex<HashMap<S, Held, BuildHasherDefault<AddrHasher>>> {
        let hash = BuildHasherDefault::<AddrHasher>::default().hash_one(stream);
        &self.held[(hash >> 60) as usize % SHARDS]
    }
}

impl<S> Idle<S> {
    fn range(&self, device: i32) -> Option<(i32, i32)> {
        self.ranges.iter().find(|(d, _)| *d == device).map(|&(_, range)| range)
    }

    fn remember(&mut self, device: i32, range: (i32, i32)) {
        if self.range(device).is_none() {
            self.ranges.push((device, range));
        }
    }

    fn epoch(&self, device: i32) -> u64 {
        self.all_epochs + self.epochs.iter().find(|(d, _)| *d == device).map_or(0, |&(_, epoch)| epoch)
    }

    /// Starts a new epoch for `device`, or for every device when `None`.
    fn advance(&mut self, device: Option<i32>) {
        match device {
            None => self.all_epochs += 1,
            Some(d) => match self.epochs.iter_mut().find(|(e, _)| *e == d) {
                Some((_, epoch)) => *epoch += 1,
                None => self.epochs.push((d, 1)),
            },
        }
    }

    fn slot(&mut self, key: Key) -> &mut Slot<S> {
        let i = match self.slots.iter().position(|s| s.key == key) {
            Some(i) => i,
            None => {
                self.slots.push(Slot { key, idle: Vec::new(), hits: 0, misses: 0, destroyed: 0 });
                self.slots.len() - 1
            }
        };
        &mut self.slots[i]
    }
}

/// Clamps like the runtimes do: into `[greatest, least]`, whichever way round they come.
fn clamp(priority: i32, (least, greatest): (i32, i32)) -> i32 {
    priority.clamp(least.min(greatest), least.max(greatest))
}

/// The pool's state stays consistent at every unlock, so a panic elsewhere does not poison it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Handles are addresses: one multiply spreads them well enough, at a fraction of SipHash's cost
/// on the hit path.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashSet;

    /// A runtime that numbers its streams and lets a test mark them busy or unreadable.
    #[derive(Default)]
    struct Fake {
        next: RefCell<usize>,
        live: RefCell<HashMap<usize, (u32, i32)>>,
        busy: RefCell<HashSet<usize>>,
        unreadable: RefCell<HashSet<usize>>,
        created: RefCell<u64>,
        destroyed: RefCell<u64>,
        queries: RefCell<u64>,
    }

    impl StreamOps for Fake {
        type Stream = usize;
        type Error = String;
        fn priority_range(&self, device: i32) -> Result<(i32, i32), String> {
            if device == 7 { Err("no device 7".into()) } else { Ok((0, -2)) }
        }
        fn create(&self, _device: i32, flags: u32, priority: i32) -> Result<usize, String> {
            let mut next = self.next.borrow_mut();
            *next += 16;
            self.live.borrow_mut().insert(*next, (flags, priority));
            *self.created.borrow_mut() += 1;
            Ok(*next)
        }
        fn destroy(&self, s: usize) -> Result<(), String> {
            *self.destroyed.borrow_mut() += 1;
            self.live.borrow_mut().remove(&s).map(drop).ok_or_else(|| format!("destroy of dead stream {s}"))
        }
        fn is_idle(&self, s: usize) -> Result<bool, String> {
            *self.queries.borrow_mut() += 1;
            if self.unreadable.borrow().contains(&s) {
                return Err("unreadable".into());
            }
            Ok(!self.busy.borrow().contains(&s))
        }
    }

    fn pool(max_per_key: usize) -> Pool<usize> {
        Pool::new(Settings { enabled: true, max_per_key })
    }

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_vars(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.into()))
    }

    #[test]
    fn settings_default_on_with_64_per_key_and_name_a_malformed_variable() {
        assert_eq!(settings(&[]), Ok(Settings { enabled: true, max_per_key: 64 }));
        assert_eq!(settings(&[(ENABLED_VAR, " "), (MAX_PER_KEY_VAR, "")]), Ok(Settings::default()), "empty is unset");
        assert_eq!(settings(&[(ENABLED_VAR, "0"), (MAX_PER_KEY_VAR, " 8 ")]), Ok(Settings { enabled: false, max_per_key: 8 }));
        let e = settings(&[(ENABLED_VAR, "yes")]).unwrap_err();
        assert!(e.contains("RCB_STREAM_CACHE ") && e.contains("yes"), "{e}");
        let e = settings(&[(MAX_PER_KEY_VAR, "-1")]).unwrap_err();
        assert!(e.contains("RCB_STREAM_CACHE_MAX_PER_KEY") && e.contains("-1"), "{e}");
    }

    #[test]
    fn a_released_idle_stream_is_reused_for_the_same_key_only() {
        let (fake, pool) = (Fake::default(), pool(4));
        let a = pool.acquire(&fake, 0, 1, -1).unwrap();
        assert_eq!(pool.release(&fake, a, Idleness::Query).unwrap(), Released::Kept);
        let other_flags = pool.acquire(&fake, 0, 0, -1).unwrap();
        let other_priority = pool.acquire(&fake, 0, 1, 0).unwrap();
        let other_device = pool.acquire(&fake, 1, 1, -1).unwrap();
        assert!(![other_flags, other_priority, other_device].contains(&a));
        assert_eq!(pool.acquire(&fake, 0, 1, -1).unwrap(), a);
        assert_eq!(*fake.created.borrow(), 4);
        let s = pool.stats(Some(0));
        assert_eq!((s.hits, s.misses, s.kept, s.in_use), (1, 3, 0, 3));
        assert_eq!(pool.stats(None).in_use, 4);
    }

    #[test]
    fn priorities_are_clamped_before_keying() {
        let (fake, pool) = (Fake::default(), pool(4));
        let a = pool.acquire(&fake, 0, 0, -50).unwrap();
        assert_eq!(fake.live.borrow()[&a].1, -2);
        pool.release(&fake, a, Idleness::Query).unwrap();
        assert_eq!(pool.acquire(&fake, 0, 0, -2).unwrap(), a);
        let b = pool.acquire(&fake, 0, 0, 9).unwrap();
        assert_eq!(fake.live.borrow()[&b].1, 0);
    }

    #[test]
    fn busy_unreadable_and_surplus_streams_are_destroyed() {
        let (fake, pool) = (Fake::default(), pool(1));
        let busy = pool.acquire(&fake, 0, 0, 0).unwrap();
        fake.busy.borrow_mut().insert(busy);
        assert_eq!(pool.release(&fake, busy, Idleness::Query).unwrap(), Released::Destroyed);
        assert!(!fake.live.borrow().contains_key(&busy));

        let a = pool.acquire(&fake, 0, 0, 0).unwrap();
        let b = pool.acquire(&fake, 0, 0, 0).unwrap();
        assert_eq!(pool.release(&fake, a, Idleness::Query).unwrap(), Released::Kept);
        assert_eq!(pool.release(&fake, b, Idleness::Query).unwrap(), Released::Destroyed, "over the bound of 1");

        *fake.next.borrow_mut() = 1000;
        fake.unreadable.borrow_mut().insert(1016);
        let c = pool.acquire(&fake, 0, 0, -1).unwrap();
        assert_eq!(c, 1016);
        assert_eq!(pool.release(&fake, c, Idleness::Query).unwrap(), Released::Destroyed, "its state could not be read");
        let s = pool.stats(None);
        assert_eq!((s.destroyed, s.kept, s.in_use), (3, 1, 0));
    }

    #[test]
    fn a_known_idle_release_keeps_the_stream_without_a_query() {
        let (fake, pool) = (Fake::default(), pool(1));
        let a = pool.acquire(&fake, 0, 0, 0).unwrap();
        let b = pool.acquire(&fake, 0, 0, 0).unwrap();
        // The runtime would call both busy: a known-idle release takes the caller's word.
        fake.busy.borrow_mut().extend([a, b]);
        assert_eq!(pool.release(&fake, a, Idleness::Known).unwrap(), Released::Kept);
        assert_eq!(pool.release(&fake, b, Idleness::Known).unwrap(), Released::Destroyed, "over the bound of 1");
        assert_eq!(*fake.queries.borrow(), 0);
        assert_eq!(pool.acquire(&fake, 0, 0, 0).unwrap(), a);

        // The querying release still asks, and still refuses the busy stream.
        assert_eq!(pool.release(&fake, a, Idleness::Query).unwrap(), Released::Destroyed);
        assert_eq!(*fake.queries.borrow(), 1);
        assert!(!fake.live.borrow().contains_key(&a));
        let s = pool.stats(None);
        assert_eq!((s.hits, s.misses, s.destroyed, s.kept, s.in_use), (1, 2, 2, 0, 0));
    }

    #[test]
    fn a_known_idle_release_refuses_and_destroys_as_the_querying_one_does() {
        let (fake, pool) = (Fake::default(), pool(4));
        assert!(matches!(pool.release(&fake, 12345, Idleness::Known), Err(ReleaseError::NotHeld)));
        let a = pool.acquire(&fake, 0, 0, 0).unwrap();
        pool.release(&fake, a, Idleness::Known).unwrap();
        assert!(matches!(pool.release(&fake, a, Idleness::Known), Err(ReleaseError::AlreadyReleased)), "double release");
        assert_eq!((*fake.destroyed.borrow(), pool.stats(None).kept), (0, 1));

        // A failed destroy is reported and the handle forgotten.
        let full = Pool::new(Settings { enabled: true, max_per_key: 0 });
        let d = full.acquire(&fake, 0, 0, -1).unwrap();
        fake.live.borrow_mut().remove(&d);
        assert!(matches!(full.release(&fake, d, Idleness::Known), Err(ReleaseError::Destroy(e)) if e.contains("dead stream")));
        assert!(matches!(full.release(&fake, d, Idleness::Known), Err(ReleaseError::NotHeld)));

        // With the cache off, a known-idle release destroys too.
        let off = Pool::new(Settings { enabled: false, max_per_key: 64 });
        let s = off.acquire(&fake, 0, 0, 0).unwrap();
        assert_eq!(off.release(&fake, s, Idleness::Known).unwrap(), Released::Destroyed);
        assert!(!fake.live.borrow().contains_key(&s));
        assert_eq!(*fake.queries.borrow(), 0);
    }

    #[test]
    fn a_double_or_foreign_release_is_refused_without_side_effects() {
        let (fake, pool) = (Fake::default(), pool(4));
        let a = pool.acquire(&fake, 0, 0, 0).unwrap();
        pool.release(&fake, a, Idleness::Query).unwrap();
        assert!(matches!(pool.release(&fake, a, Idleness::Query), Err(ReleaseError::AlreadyReleased)));
        assert!(matches!(pool.release(&fake, 12345, Idleness::Query), Err(ReleaseError::NotHeld)));
        assert_eq!(*fake.destroyed.borrow(), 0);
        assert_eq!(pool.stats(None).kept, 1);
        assert_eq!(pool.acquire(&fake, 0, 0, 0).unwrap(), a);
        assert_eq!(pool.stats(None).in_use, 1);
    }

    #[test]
    fn disabled_creates_and_destroys_every_time() {
        let fake = Fake::default();
        let pool = Pool::new(Settings { enabled: false, max_per_key: 64 });
        for _ in 0..3 {
            let s = pool.acquire(&fake, 0, 0, 0).unwrap();
            assert_eq!(pool.release(&fake, s, Idleness::Query).unwrap(), Released::Destroyed);
        }
        assert_eq!((*fake.created.borrow(), *fake.destroyed.borrow()), (3, 3));
        let s = pool.stats(None);
        assert_eq!((s.hits, s.misses, s.destroyed, s.kept), (0, 3, 3, 0));
    }

    #[test]
    fn trim_destroys_idle_streams_of_one_device_or_all() {
        let (fake, pool) = (Fake::default(), pool(8));
        let streams: Vec<usize> = [0, 0, 1].iter().map(|&d| pool.acquire(&fake, d, 0, 0).unwrap()).collect();
        let held = pool.acquire(&fake, 0, 0, 0).unwrap();
        for s in streams {
            pool.release(&fake, s, Idleness::Query).unwrap();
        }
        assert_eq!(pool.trim(&fake, Some(0)).unwrap(), 2);
        assert_eq!((pool.stats(Some(0)).kept, pool.stats(Some(1)).kept), (0, 1));
        assert_eq!(pool.trim(&fake, None).unwrap(), 1);
        assert_eq!(fake.live.borrow().len(), 1, "the handed-out stream survives trim");
        assert_eq!(pool.release(&fake, held, Idleness::Query).unwrap(), Released::Kept);
        assert_eq!(pool.stats(None).destroyed, 3);
    }

    #[test]
    fn a_reset_destroys_the_idle_streams_of_its_device_and_forgets_the_held_ones() {
        let (fake, pool) = (Fake::default(), pool(8));
        let idle0 = pool.acquire(&fake, 0, 0, 0).unwrap();
        let held0 = pool.acquire(&fake, 0, 0, 0).unwrap();
        let idle1 = pool.acquire(&fake, 1, 0, 0).unwrap();
        let held1 = pool.acquire(&fake, 1, 0, 0).unwrap();
        pool.release(&fake, idle0, Idleness::Query).unwrap();
        pool.release(&fake, idle1, Idleness::Query).unwrap();
        assert_eq!(pool.reset(&fake, Some(0)).unwrap(), 1);
        assert!(!fake.live.borrow().contains_key(&idle0));
        let (s0, s1) = (pool.stats(Some(0)), pool.stats(Some(1)));
        assert_eq!((s0.kept, s0.in_use, s1.kept, s1.in_use), (0, 0, 1, 1));
        // The reset destroyed it: a release must not touch it again.
        assert!(matches!(pool.release(&fake, held0, Idleness::Query), Err(ReleaseError::NotHeld)));
        assert_eq!(*fake.destroyed.borrow(), 1);
        assert_ne!(pool.acquire(&fake, 0, 0, 0).unwrap(), idle0, "nothing idle is left on device 0");
        assert_eq!(pool.acquire(&fake, 1, 0, 0).unwrap(), idle1, "device 1 keeps its streams");
        assert_eq!(pool.release(&fake, held1, Idleness::Query).unwrap(), Released::Kept);
    }

    #[test]
    fn a_reset_of_every_device_forgets_them_all_and_later_streams_are_kept_again() {
        let (fake, pool) = (Fake::default(), pool(8));
        let idle = [0, 1].map(|d| pool.acquire(&fake, d, 0, 0).unwrap());
        let held = [0, 1].map(|d| pool.acquire(&fake, d, 0, 0).unwrap());
        for s in idle {
            assert_eq!(pool.release(&fake, s, Idleness::Query).unwrap(), Released::Kept);
        }
        assert_eq!(pool.reset(&fake, None).unwrap(), 2);
        assert_eq!(pool.stats(None).in_use, 0);
        for s in held {
            assert!(matches!(pool.release(&fake, s, Idleness::Query), Err(ReleaseError::NotHeld)));
        }
        assert_eq!(*fake.destroyed.borrow(), 2, "only the idle streams were destroyed, once each");
        // A device first seen after the reset, and one seen before, both keep their new streams.
        for d in [1, 2] {
            let s = pool.acquire(&fake, d, 0, 0).unwrap();
            assert!(!idle.contains(&s) && !held.contains(&s));
            assert_eq!(pool.release(&fake, s, Idleness::Query).unwrap(), Released::Kept);
            assert_eq!(pool.acquire(&fake, d, 0, 0).unwrap(), s);
        }
    }

    #[test]
    fn runtime_errors_leave_the_pool_unchanged() {
        let (fake, pool) = (Fake::default(), pool(4));
        assert_eq!(pool.acquire(&fake, 7, 0, 0).unwrap_err(), "no device 7");
        assert_eq!(pool.stats(None), Stats::default());
    }
}
