//! What the library asked of the GPU runtime, counted per command buffer and for the whole
//! process: stream captures, instantiations (re-instantiations by the update budget among them),
//! parameter pushes to executable graphs, in-place address updates, trace-cache relocations and
//! hits, and each fallback by its reason. A steady state that records nothing shows as counts
//! that stop growing.
//!
//! A command buffer keeps its own [`Counts`] (changed under its `&mut`) and adds every event to
//! its share of the process totals, a [`Tally`]: atomics that only its owner changes, with a
//! plain load and store (the owner's `&mut` orders the changes), which any thread may read. An
//! address update added two or three counts to atomics every thread shares, each a locked
//! read-modify-write (about as many as the command buffer's lock and unlock together). The
//! process totals are the sum of every tally and of the atomics that objects other than
//! command buffers (the trace cache) add to. A tally is never freed: a freed command buffer's
//! goes to the next one with its counts, so the totals include what freed command buffers did,
//! and the process holds about as many tallies as it ever had command buffers live at once
//! (those being created count: one whose walk of the list found none free makes a new one, even
//! if another was freed meanwhile; a trace-cache miss that flattens its capture makes a command
//! buffer too). Finding
//! a tally walks a list and takes no lock, which a forked child could find held by a thread it
//! does not have.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Why the library took a slower or coarser path than asked. The numbers are the C ABI's
/// `RCB_FALLBACK_*` values and index [`Counts::fallbacks`]; they are never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Fallback {
    /// An address update got a table of another count or with a changed size: re-record.
    ShapeChanged = 0,
    /// An address update was refused because a node the library cannot patch (a cloned child, a
    /// captured graph, a `kernelParams` node) may reference a moved allocation: re-record.
    OpaqueReference = 1,
    /// A runtime call failed part-way through an address update: re-record.
    PushFailed = 2,
    /// A child could not be flattened and became one cloned child node (for a reason without a
    /// number of its own).
    FlattenedAsChild = 3,
    /// A trace-cache relocation failed part-way; the command was captured again.
    RelocationFailed = 4,
    /// The update budget was spent but the executable graph was not re-instantiated (a node's
    /// template lags behind it, `MAX_RETIRED` old executables still wait for their launches, or
    /// `MAX_KEPT_EXECS` are kept for launches no event follows): the update went to the live
    /// executable in place.
    ReinstantiateBlocked = 5,
    /// Re-instantiating failed in the runtime: the update went to the old executable.
    ReinstantiateFailed = 6,
    /// An address update was refused because a recorded address lies in several allocations
    /// (aliased, nested or overlapping entries) that did not all move by the same delta, so
    /// which one it came from is unknown: re-record.
    OverlappingAllocations = 7,
    /// A child became one cloned child node because a memcpy node's parameters, read back from
    /// the runtime, could not be trusted (HIP before 7.2 never fills a 1-D node's; in 7.2 they
    /// are those it was created with, stale once a command buffer has changed the node; after
    /// 7.2 they are not yet read).
    MemcpyUnreadable = 8,
    /// An address update was refused, or a trace-cache entry will never be relocated, because a
    /// node of a kernel on `RCB_OPAQUE_KERNELS` (a collective) may read addresses the library
    /// cannot see (`cmdbuf/opaque.rs`).
    OpaqueKernel = 9,
    /// A child holding a conditional node was not flattened (its body runs on a value set
    /// through a handle made for its own graph) and, since CUDA forbids conditional nodes in a
    /// child graph, not added as a child node either: the call failed with nothing added.
    ConditionalNode = 10,
    /// A child holding a memory allocation or free node was not flattened (a copy would
    /// allocate elsewhere than the address the nodes after it hold); it became one cloned child
    /// node where the runtime allows that (HIP), else the call failed with nothing added (CUDA).
    MemoryNode = 11,
    /// A memcpy node of the executable graph could not take its new operands in place: they
    /// lie in another kind of allocation or on another device than those it was instantiated
    /// with, which CUDA's executable memcpy setter refuses (checked before the setter), or the
    /// setter refused them. The executable graph was re-instantiated from its template, or,
    /// where that was not possible, the update was refused (`needs_rerecord`) with nothing
    /// changed or the executable left refusing launches.
    MemcpyNotInPlace = 12,
    /// An executable graph or graph that a launch the library could not follow may still use
    /// was kept instead of destroyed when it was replaced (or its command buffer freed): nothing
    /// the library can observe proves that launch finished, so only
    /// `rcb_cmdbuf_launches_done` gives it back (`launches.rs`). Counted once per object.
    KeptUntracked = 13,
    /// The calling thread's stream capture mode could not be given back after the library's
    /// own event call (set relaxed around it, see `Runtime::event_is_complete`), twice: the
    /// thread stays relaxed, so calls it makes during a capture are no longer refused as unsafe.
    /// Process totals only.
    CaptureModeLeftRelaxed = 14,
}

/// Slots reserved for fallback reasons (room for reasons added later without a new layout).
pub const FALLBACK_SLOTS: usize = 16;

impl Fallback {
    pub const ALL: [Fallback; 15] = [
        Fallback::ShapeChanged,
        Fallback::OpaqueReference,
        Fallback::PushFailed,
        Fallback::FlattenedAsChild,
        Fallback::RelocationFailed,
        Fallback::ReinstantiateBlocked,
        Fallback::ReinstantiateFailed,
        Fallback::OverlappingAllocations,
        Fallback::MemcpyUnreadable,
        Fallback::OpaqueKernel,
        Fallback::ConditionalNode,
        Fallback::MemoryNode,
        Fallback::MemcpyNotInPlace,
        Fallback::KeptUntracked,
        Fallback::CaptureModeLeftRelaxed,
    ];

    /// A short stable name (what `rcb_fallback_reason_name` returns).
    pub fn name(self) -> &'static CStr {
        match self {
            Fallback::ShapeChanged => c"shape_changed",
            Fallback::OpaqueReference => c"opaque_reference",
            Fallback::PushFailed => c"push_failed",
            Fallback::FlattenedAsChild => c"flattened_as_child",
            Fallback::RelocationFailed => c"relocation_failed",
            Fallback::ReinstantiateBlocked => c"reinstantiate_blocked",
            Fallback::ReinstantiateFailed => c"reinstantiate_failed",
            Fallback::OverlappingAllocations => c"overlapping_allocations",
            Fallback::MemcpyUnreadable => c"memcpy_unreadable",
            Fallback::OpaqueKernel => c"opaque_kernel",
            Fallback::ConditionalNode => c"conditional_node",
            Fallback::MemoryNode => c"memory_node",
            Fallback::MemcpyNotInPlace => c"memcpy_not_in_place",
            Fallback::KeptUntracked => c"kept_untracked",
            Fallback::CaptureModeLeftRelaxed => c"capture_mode_left_relaxed",
        }
    }

    pub fn from_code(code: u32) -> Option<Fallback> {
        Self::ALL.get(code as usize).copied()
    }
}

const _: () = assert!(Fallback::ALL.len() <= FALLBACK_SLOTS);

/// One thing the library did, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A stream capture begun by the library (`hipStreamBeginCapture`).
    Capture,
    /// An executable graph instantiated (`hipGraphInstantiate`), re-instantiations included.
    Instantiation,
    /// An instantiation that replaced an executable graph, because the update budget was about to
    /// be spent or a memcpy node could not take its new operands in place (also counted as an
    /// [`Event::Instantiation`]).
    Reinstantiation,
    /// An executable graph destroyed once the work launched from it had finished: one a
    /// re-instantiation replaced, or that of a freed command buffer.
    Retirement,
    /// Parameters of this many nodes pushed to an executable graph (`hipGraphExec*SetParams`),
    /// estimated to take this many bytes of the runtime's kernel-argument staging.
    ExecPushes {
        nodes: u64,
        bytes: u64,
    },
    /// An address update that moved at least one allocation in place.
    AddressUpdate,
    /// A trace-cache entry relocated in place instead of captured again.
    Relocation,
    /// A trace-cache lookup answered by an entry with exactly the allocations asked for.
    TraceHit,
    Fallback(Fallback),
}

/// Counts of [`Event`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub captures: u64,
    pub instantiations: u64,
    pub reinstantiations: u64,
    pub retirements: u64,
    pub exec_pushes: u64,
    pub exec_push_bytes: u64,
    pub address_updates: u64,
    pub relocations: u64,
    pub trace_hits: u64,
    /// By [`Fallback`] number.
    pub fallbacks: [u64; FALLBACK_SLOTS],
}

impl Counts {
    pub fn add(&mut self, event: Event) {
        match event {
            Event::Capture => self.captures += 1,
            Event::Instantiation => self.instantiations += 1,
            Event::Reinstantiation => self.reinstantiations += 1,
            Event::Retirement => self.retirements += 1,
            Event::ExecPushes { nodes, bytes } => {
                self.exec_pushes += nodes;
                self.exec_push_bytes += bytes;
            }
            Event::AddressUpdate => self.address_updates += 1,
            Event::Relocation => self.relocations += 1,
            Event::TraceHit => self.trace_hits += 1,
            Event::Fallback(why) => self.fallbacks[why as usize] += 1,
        }
    }

    pub fn fallback(&self, why: Fallback) -> u64 {
        self.fallbacks[why as usize]
    }

    pub fn fallbacks_total(&self) -> u64 {
        self.fallbacks.iter().sum()
    }

    /// A short table, one count a line (then each fallback reason that occurred), as `RCB_STATS`
    /// prints it.
    pub fn table(&self) -> String {
        let counts = [
            ("stream captures", self.captures.to_string()),
            ("instantiations", format!("{} ({} re-instantiations)", self.instantiations, self.reinstantiations)),
            ("executable graphs destroyed", self.retirements.to_string()),
            (
                "executable-node pushes",
                format!("{} (about {} KiB of kernel-argument staging)", self.exec_pushes, self.exec_push_bytes / 1024),
            ),
            ("address updates in place", self.address_updates.to_string()),
            ("trace-cache relocations", self.relocations.to_string()),
            ("trace-cache hits", self.trace_hits.to_string()),
            ("fallbacks", self.fallbacks_total().to_string()),
        ]
        .map(|(label, value)| (label.to_owned(), value));
        let reasons = Fallback::ALL
            .into_iter()
            .filter(|&why| self.fallback(why) > 0)
            .map(|why| (format!("  {}", why.name().to_string_lossy()), self.fallback(why).to_string()));
        counts.into_iter().chain(reasons).map(|(label, value)| format!("  {label:<28} {value}\n")).collect()
    }
}

/// [`Counts`] as atomics, field for field: the totals that objects other than command buffers
/// add to, a command buffer's [`Tally`], and what the last reset of the totals took off the
/// tallies.
struct Totals {
    captures: AtomicU64,
    instantiations: AtomicU64,
    reinstantiations: AtomicU64,
    retirements: AtomicU64,
    exec_pushes: AtomicU64,
    exec_push_bytes: AtomicU64,
    address_updates: AtomicU64,
    relocations: AtomicU64,
    trace_hits: AtomicU64,
    fallbacks: [AtomicU64; FALLBACK_SLOTS],
}

impl Totals {
    /// All zero.
    const fn new() -> Self {
        Self {
            captures: AtomicU64::new(0),
            instantiations: AtomicU64::new(0),
            reinstantiations: AtomicU64::new(0),
            retirements: AtomicU64::new(0),
            exec_pushes: AtomicU64::new(0),
            exec_push_bytes: AtomicU64::new(0),
            address_updates: AtomicU64::new(0),
            relocations: AtomicU64::new(0),
            trace_hits: AtomicU64::new(0),
            fallbacks: [const { AtomicU64::new(0) }; FALLBACK_SLOTS],
        }
    }

    /// Adds `event` with `add` (a shared atomic's `fetch_add`, or a tally's load and store).
    #[inline]
    fn add(&self, event: Event, add: impl Fn(&AtomicU64, u64)) {
        match event {
            Event::Capture => add(&self.captures, 1),
            Event::Instantiation => add(&self.instantiations, 1),
            Event::Reinstantiation => add(&self.reinstantiations, 1),
            Event::Retirement => add(&self.retirements, 1),
            Event::ExecPushes { nodes, bytes } => {
                add(&self.exec_pushes, nodes);
                add(&self.exec_push_bytes, bytes)
            }
            Event::AddressUpdate => add(&self.address_updates, 1),
            Event::Relocation => add(&self.relocations, 1),
            Event::TraceHit => add(&self.trace_hits, 1),
            Event::Fallback(why) => add(&self.fallbacks[why as usize], 1),
        }
    }

    /// Every field, in the order of [`Counts::fields_mut`].
    fn fields(&self) -> impl Iterator<Item = &AtomicU64> {
        [
            &self.captures,
            &self.instantiations,
            &self.reinstantiations,
            &self.retirements,
            &self.exec_pushes,
            &self.exec_push_bytes,
            &self.address_updates,
            &self.relocations,
            &self.trace_hits,
        ]
        .into_iter()
        .chain(&self.fallbacks)
    }

    /// The counts now (each field read on its own).
    fn read(&self) -> Counts {
        let mut c = Counts::default();
        c.fields_mut().zip(self.fields()).for_each(|(n, counter)| *n = counter.load(Ordering::Relaxed));
        c
    }

    /// Sets every field to `c`'s (each on its own: a concurrent reader may see some of them set).
    fn store(&self, mut c: Counts) {
        self.fields().zip(c.fields_mut()).for_each(|(counter, n)| counter.store(*n, Ordering::Relaxed));
    }
}

impl Counts {
    /// Every count, in the order of [`Totals::fields`].
    fn fields_mut(&mut self) -> impl Iterator<Item = &mut u64> {
        [
            &mut self.captures,
            &mut self.instantiations,
            &mut self.reinstantiations,
            &mut self.retirements,
            &mut self.exec_pushes,
            &mut self.exec_push_bytes,
            &mut self.address_updates,
            &mut self.relocations,
            &mut self.trace_hits,
        ]
        .into_iter()
        .chain(&mut self.fallbacks)
    }

    /// Field by field, `f` of this count and `other`'s.
    fn zip(mut self, mut other: Counts, f: impl Fn(u64, u64) -> u64) -> Counts {
        self.fields_mut().zip(other.fields_mut()).for_each(|(n, o)| *n = f(*n, *o));
        self
    }
}

/// What objects other than command buffers counted.
static SHARED: Totals = Totals::new();

/// What the tallies held at the last reset of the totals.
static BASELINE: Totals = Totals::new();

/// A command buffer's share of the process totals (see the module's comment), in a list of
/// every tally the process made.
struct Tally {
    counts: Totals,
    /// A [`Counters`] holds it. Taken with `Acquire` and given back with `Release`, so that its
    /// next owner's loads see the last owner's stores.
    in_use: AtomicBool,
    next: AtomicPtr<Tally>,
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tally").field("counts", &self.counts.read()).finish_non_exhaustive()
    }
}

/// The bytes a tally takes, kept for as long as the process runs (one per command buffer live at
/// once).
pub const TALLY_BYTES: usize = std::mem::size_of::<Tally>();

/// A list of tallies, newest first, which only grows: tallies are never freed.
struct Tallies(AtomicPtr<Tally>);

/// Every tally the process made.
static TALLIES: Tallies = Tallies(AtomicPtr::new(std::ptr::null_mut()));

impl Tallies {
    /// Every tally of the list, newest first; one added during the walk may be missed.
    fn iter(&self) -> impl Iterator<Item = &'static Tally> {
        // SAFETY: the list holds only tallies leaked by `take`, never freed, each published with
        // `Release` after its `next` was set.
        let at = |p: *mut Tally| unsafe { p.as_ref() };
        std::iter::successors(at(self.0.load(Ordering::Acquire)), move |t| at(t.next.load(Ordering::Acquire)))
    }

    /// A tally no one holds, now held: a free one from the list, else a new one added to it.
    fn take(&self) -> &'static Tally {
        // A plain load first: a locked compare-exchange on every held tally passed would cost one
        // locked operation per live command buffer.
        let free = |t: &&Tally| {
            !t.in_use.load(Ordering::Relaxed) && t.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
        };
        if let Some(free) = self.iter().find(free) {
            return free;
        }
        let tally: &'static Tally =
            Box::leak(Box::new(Tally { counts: Totals::new(), in_use: AtomicBool::new(true), next: AtomicPtr::default() }));
        let mut head = self.0.load(Ordering::Relaxed);
        loop {
            tally.next.store(head, Ordering::Relaxed);
            match self.0.compare_exchange_weak(head, std::ptr::from_ref(tally).cast_mut(), Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return tally,
                Err(now) => head = now,
            }
        }
    }

    /// What the tallies hold now, summed (each field read on its own).
    fn sum(&self) -> Counts {
        self.iter().fold(Counts::default(), |sum, t| sum.zip(t.counts.read(), u64::wrapping_add))
    }
}

impl Tally {
    /// Adds `event`: a load and a store, not a locked read-modify-write, since only the tally's
    /// holder changes it (through `&mut`).
    #[inline]
    fn add(&self, event: Event) {
        self.counts.add(event, |counter, n| counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed));
    }

    /// Gives the tally back to its list, for the next holder (its counts stay).
    fn release(&self) {
        self.in_use.store(false, Ordering::Release);
    }
}

/// Adds `event` to the process totals only (for objects that are not command buffers).
pub fn record_total(event: Event) {
    SHARED.add(event, |counter, n| {
        counter.fetch_add(n, Ordering::Relaxed);
    });
}

/// The process totals now (each field read on its own: a concurrent event may be seen in one
/// field and not yet in another).
pub fn totals() -> Counts {
    // A reset racing with this read may leave a field's baseline above what was read before it.
    let since_reset = TALLIES.sum().zip(BASELINE.read(), u64::saturating_sub);
    SHARED.read().zip(since_reset, u64::wrapping_add)
}

/// Zeroes the process totals (events counted concurrently may survive the reset).
pub fn reset_totals() {
    SHARED.store(Counts::default());
    BASELINE.store(TALLIES.sum());
}

/// The counts of one object, added to the process totals as they happen: through a tally of
/// its own for a command buffer ([`Counters::new`]), to the shared totals otherwise
/// ([`Counters::process_only`]).
#[derive(Debug)]
pub struct Counters {
    counts: Counts,
    tally: Option<&'static Tally>,
}

impl Counters {
    /// Counters with a tally of their own (a command buffer's), held until they are dropped.
    pub fn new() -> Self {
        Self { counts: Counts::default(), tally: Some(TALLIES.take()) }
    }

    /// Counters that add to the shared process totals (for work done on behalf of no live
    /// command buffer, as the graveyard's retirements), whose own counts nobody reads.
    pub fn process_only() -> Self {
        Self { counts: Counts::default(), tally: None }
    }

    #[inline]
    pub fn record(&mut self, event: Event) {
        self.counts.add(event);
        match self.tally {
            Some(tally) => tally.add(event),
            None => record_total(event),
        }
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Zeroes this object's counts; the process totals keep them.
    pub fn reset(&mut self) {
        self.counts = Counts::default();
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        if let Some(tally) = self.tally {
            tally.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_lands_in_its_own_field_and_fallbacks_by_reason() {
        let mut c = Counts::default();
        for e in
            [Event::Capture, Event::Instantiation, Event::Instantiation, Event::Reinstantiation, Event::Retirement, Event::AddressUpdate]
        {
            c.add(e);
        }
        c.add(Event::ExecPushes { nodes: 3, bytes: 300 });
        c.add(Event::ExecPushes { nodes: 2, bytes: 20 });
        c.add(Event::Relocation);
        c.add(Event::TraceHit);
        c.add(Event::TraceHit);
        c.add(Event::Fallback(Fallback::PushFailed));
        c.add(Event::Fallback(Fallback::ReinstantiateBlocked));
        c.add(Event::Fallback(Fallback::ReinstantiateBlocked));
        let want = Counts {
            captures: 1,
            instantiations: 2,
            reinstantiations: 1,
            retirements: 1,
            exec_pushes: 5,
            exec_push_bytes: 320,
            address_updates: 1,
            relocations: 1,
            trace_hits: 2,
            fallbacks: std::array::from_fn(|i| match i {
                2 => 1,
                5 => 2,
                _ => 0,
            }),
        };
        assert_eq!(c, want);
        assert_eq!((c.fallback(Fallback::ReinstantiateBlocked), c.fallbacks_total()), (2, 3));
    }

    /// A list of the test's own: command buffers of tests running at the same time take none
    /// of its tallies.
    fn own_list() -> &'static Tallies {
        Box::leak(Box::new(Tallies(AtomicPtr::default())))
    }

    #[test]
    fn a_tally_counts_each_event_in_the_field_counts_does() {
        let list = own_list();
        let tally = list.take();
        let mut want = Counts::default();
        let events = [
            Event::Capture,
            Event::Instantiation,
            Event::Reinstantiation,
            Event::Retirement,
            Event::ExecPushes { nodes: 3, bytes: 1000 },
            Event::AddressUpdate,
            Event::Relocation,
            Event::TraceHit,
        ]
        .into_iter()
        .chain(Fallback::ALL.map(Event::Fallback));
        // Each event a different number of times, so that two fields swapped show.
        for (k, e) in events.enumerate() {
            for _ in 0..=k {
                tally.add(e);
                want.add(e);
            }
        }
        assert_eq!(tally.counts.read(), want);
        assert_eq!(list.sum(), want);
    }

    #[test]
    fn a_released_tally_goes_with_its_counts_to_the_next_holder_and_the_list_grows_only_past_those_held() {
        let list = own_list();
        let (a, b) = (list.take(), list.take());
        assert!(!std::ptr::eq(a, b));
        a.add(Event::AddressUpdate);
        b.add(Event::Capture);
        a.release();
        let c = list.take();
        assert!(std::ptr::eq(a, c), "the free tally is taken again");
        assert_eq!(list.iter().count(), 2);
        c.add(Event::AddressUpdate);
        let d = list.take();
        assert!(!std::ptr::eq(d, a) && !std::ptr::eq(d, b));
        assert_eq!(list.iter().count(), 3);
        let sum = list.sum();
        assert_eq!((sum.address_updates, sum.captures), (2, 1), "a released tally's counts stay in the sum");
    }

    #[test]
    fn threads_taking_counting_and_releasing_tallies_while_another_sums_them_lose_no_event() {
        const THREADS: u64 = 8;
        const ROUNDS: u64 = 5000;
        const EVENTS: u64 = 40;
        let list = own_list();
        let done = AtomicBool::new(false);
        let start = std::sync::Barrier::new(THREADS as usize);
        // How many threads hold each tally, by its address (the map's lock is not held while a
        // tally is taken or given back).
        let holders = std::sync::Mutex::new(std::collections::HashMap::<usize, std::sync::Arc<std::sync::atomic::AtomicU32>>::new());
        let holders_of = |tally: &Tally| {
            let mut map = holders.lock().expect("no thread panics holding the map");
            std::sync::Arc::clone(map.entry(std::ptr::from_ref(tally).addr()).or_default())
        };
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut last = Counts::default();
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) || reads == 0 {
                    let now = list.sum();
                    // Each tally only grows and the list only gains tallies: no read goes back.
                    assert!(
                        now.address_updates >= last.address_updates && now.exec_push_bytes >= last.exec_push_bytes,
                        "{now:?} after {last:?}"
                    );
                    assert!(now.address_updates <= THREADS * ROUNDS * EVENTS);
                    last = now;
                    reads += 1;
                }
            });
            let writers: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        // All at once, so that holders overlap.
                        start.wait();
                        for _ in 0..ROUNDS {
                            let tally = list.take();
                            let holders = holders_of(tally);
                            assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "a tally held twice at once");
                            // Gives another thread the time to take the same tally, were `take` wrong.
                            std::thread::yield_now();
                            for _ in 0..EVENTS {
                                tally.add(Event::AddressUpdate);
                                tally.add(Event::ExecPushes { nodes: 2, bytes: 3 });
                            }
                            holders.fetch_sub(1, Ordering::SeqCst);
                            tally.release();
                        }
                    })
                })
                .collect();
            // The reader stops once every writer has stopped, failed or not.
            let written: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
            done.store(true, Ordering::Release);
            reader.join().expect("the reader's check failed");
            assert!(written.iter().all(Result::is_ok), "a writer's check failed");
        });
        let sum = list.sum();
        let events = THREADS * ROUNDS * EVENTS;
        // Two holders of one tally at once would lose events (a load and a store each).
        assert_eq!((sum.address_updates, sum.exec_pushes, sum.exec_push_bytes), (events, 2 * events, 3 * events));
        assert!(list.iter().count() as u64 <= THREADS, "{} tallies for {THREADS} holders at most", list.iter().count());
    }

    #[test]
    fn fallback_numbers_are_their_positions_and_names_are_distinct() {
        for (i, why) in Fallback::ALL.iter().enumerate() {
            assert_eq!(*why as usize, i);
            assert_eq!(Fallback::from_code(i as u32), Some(*why));
        }
        assert_eq!(Fallback::from_code(Fallback::ALL.len() as u32), None);
        let mut names: Vec<&CStr> = Fallback::ALL.iter().map(|f| f.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Fallback::ALL.len());
    }
}
