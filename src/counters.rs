//! What the library asked of the GPU runtime, counted per command buffer and for the whole
//! process: stream captures, instantiations (re-instantiations by the update budget among them),
//! parameter pushes to executable graphs, in-place address updates, trace-cache relocations and
//! hits, and each fallback by its reason. A steady state that records nothing shows as counts
//! that stop growing.
//!
//! A command buffer keeps its own [`Counts`] (changed under its `&mut`) and adds every event to
//! the process totals too, which are atomics (relaxed: each is a count, no ordering between
//! them is promised). Objects that are not command buffers (the trace cache) add to the totals
//! only. Totals include what command buffers already freed did.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The process totals: [`Counts`] as atomics, field for field.
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

static TOTALS: Totals = Totals {
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
};

impl Totals {
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
}

/// Adds `event` to the process totals only (for objects that are not command buffers).
pub fn record_total(event: Event) {
    let bump = |counter: &AtomicU64, n: u64| counter.fetch_add(n, Ordering::Relaxed);
    match event {
        Event::Capture => bump(&TOTALS.captures, 1),
        Event::Instantiation => bump(&TOTALS.instantiations, 1),
        Event::Reinstantiation => bump(&TOTALS.reinstantiations, 1),
        Event::Retirement => bump(&TOTALS.retirements, 1),
        Event::ExecPushes { nodes, bytes } => {
            bump(&TOTALS.exec_pushes, nodes);
            bump(&TOTALS.exec_push_bytes, bytes)
        }
        Event::AddressUpdate => bump(&TOTALS.address_updates, 1),
        Event::Relocation => bump(&TOTALS.relocations, 1),
        Event::TraceHit => bump(&TOTALS.trace_hits, 1),
        Event::Fallback(why) => bump(&TOTALS.fallbacks[why as usize], 1),
    };
}

/// The process totals now (each field read on its own: a concurrent event may be seen in one
/// field and not yet in another).
pub fn totals() -> Counts {
    let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    Counts {
        captures: get(&TOTALS.captures),
        instantiations: get(&TOTALS.instantiations),
        reinstantiations: get(&TOTALS.reinstantiations),
        retirements: get(&TOTALS.retirements),
        exec_pushes: get(&TOTALS.exec_pushes),
        exec_push_bytes: get(&TOTALS.exec_push_bytes),
        address_updates: get(&TOTALS.address_updates),
        relocations: get(&TOTALS.relocations),
        trace_hits: get(&TOTALS.trace_hits),
        fallbacks: std::array::from_fn(|i| get(&TOTALS.fallbacks[i])),
    }
}

/// Zeroes the process totals (events counted concurrently may survive the reset).
pub fn reset_totals() {
    TOTALS.fields().for_each(|counter| counter.store(0, Ordering::Relaxed));
}

/// The counts of one object, added to the process totals as they happen.
#[derive(Debug, Default)]
pub struct Counters {
    counts: Counts,
}

impl Counters {
    pub fn record(&mut self, event: Event) {
        self.counts.add(event);
        record_total(event);
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Zeroes this object's counts; the process totals keep them.
    pub fn reset(&mut self) {
        self.counts = Counts::default();
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
