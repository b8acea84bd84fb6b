//! Moving allocations in place: the work is proportional to the sites of the allocations that
//! moved, never to the number of nodes. Given the whole new table it also compares each entry;
//! given only the moves ([`CmdBuf::move_allocations`], what XLA knows after comparing its own
//! tables) it does not look at the others.

use super::allocations::{self, Allocation};
use super::budget;
use super::memory::Heap;
use super::nodes::{NodeRecord, Params};
use super::patch::{PatchTable, Site, Slot};
use super::state::Op;
use super::{CmdBuf, NodeId};
use crate::counters::{Event, Fallback};
use crate::error::{Error, Result};
use crate::runtime::{KernelParams, Node};
use std::mem::MaybeUninit;

/// Allocation `index` of the recorded table now starts at `base` (its size unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationMove {
    pub index: u64,
    pub base: u64,
}

/// What an address update did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpdateReport {
    /// Allocations whose base changed.
    pub moved_allocations: u32,
    /// Recorded addresses rewritten.
    pub patched_sites: u64,
    /// Nodes whose new parameters reached the runtime (each once).
    pub updated_nodes: u64,
    /// The update could not be applied in place: the table changed shape (count or a size), a
    /// moved allocation may be referenced where the library cannot patch it, an address that
    /// lies in several allocations would have to follow moves that differ, or a runtime call
    /// failed part-way. The caller must re-record.
    pub needs_rerecord: bool,
    /// The executable graph was re-instantiated with the moved addresses instead of being
    /// pushed the touched nodes, because its update budget was about to be spent.
    pub reinstantiated: bool,
}

/// Table entries compared at once by [`CmdBuf::update_allocations`] before it looks at each.
const COMPARE_CHUNK: usize = 16;

/// How many sites ahead the writing pass asks for the cache line it will store into (in command
/// buffers of [`LOOK_AHEAD_FROM_NODES`] nodes or more): far enough for a miss to memory to arrive
/// while the sites before it are written (a few nanoseconds each).
const PATCH_AHEAD: usize = 16;

/// The smallest command buffer whose writing pass looks ahead. The look-ahead walks the sites a
/// second time, about a fifth of the library's own instructions per touched node of `rcb-bench`'s
/// chain; on one H200 the update given the moves leaned closer to the setters' floor without it
/// at 100 to 10 000 nodes and further from it at 100 000, within the spread of a few passes
/// (`docs/benchmarks.md`). The threshold lies between the two sizes measured.
pub const LOOK_AHEAD_FROM_NODES: usize = 32 * 1024;

/// The moved allocations finalize makes room for (16 bytes each, so at most 1 KiB): an update
/// that moves more grows the list once.
const MOVES_ROOM: usize = 64;

/// Buffers reused by every update, so an update allocates nothing once they have grown. Finalize
/// makes the room a first update needs on most graphs ([`Scratch::prepare`]), not what an update
/// of everything would on any: sized for the whole graph, they took 16 bytes a site, 16 an
/// allocation and 4 a node (100 bytes a node of `rcb-bench`'s chain, 3 sites and 3 allocations
/// each) for updates that move a tenth of the table.
#[derive(Default)]
pub(super) struct Scratch {
    marks: Marks,
    /// `(allocation, new base)` of the allocations that moved.
    pub(super) moved: Vec<(u32, u64)>,
    touched: Vec<NodeId>,
}

impl Scratch {
    /// The heap the buffers hold (see `memory.rs`).
    pub(super) fn heap(&self) -> Heap {
        [Heap::vec(&self.marks.bits), Heap::vec(&self.moved), Heap::vec(&self.touched)].into_iter().sum()
    }

    /// At finalize, so that the first update grows nothing on a graph of `nodes` nodes and
    /// `allocations` allocations that moves up to [`MOVES_ROOM`] of them: a mark and room in the
    /// touched list for each node (4 bytes a node, as the template's dirty list), and room for
    /// those moves. Growing the lists was most of what a first update did beyond a later one: on
    /// the software GPU, 1 500 of its 1 600 more instructions at 100 nodes, 2 800 of 3 800 at
    /// 1 000 (`docs/benchmarks.md`).
    pub(super) fn prepare(&mut self, nodes: usize, allocations: usize) {
        self.marks.cover(nodes);
        reserve_written(&mut self.touched, nodes, 0);
        reserve_written(&mut self.moved, allocations.min(MOVES_ROOM), (0, 0));
    }
}

/// Which nodes the update under way has touched already (so that each is pushed once, without
/// a set): one bit a node, in an array of its own, so that the writing pass reads no node
/// record. Every bit is clear between updates: the update clears those it set (its touched
/// list) before it pushes anything, so no exit leaves one behind. A number of the last update
/// per node took 32 times the room and wrapped every 2^32 updates.
#[derive(Default)]
struct Marks {
    bits: Vec<u64>,
}

impl Marks {
    /// Room for `nodes` nodes, all clear.
    fn cover(&mut self, nodes: usize) {
        let words = nodes.div_ceil(64);
        reserve_written(&mut self.bits, words, 0);
        self.bits.resize(words, 0);
    }

    /// Whether this update touches `node` for the first time (and notes that it has).
    #[inline]
    fn first_touch(&mut self, node: NodeId) -> bool {
        let (word, bit) = (node as usize / 64, 1u64 << (node % 64));
        let first = self.bits[word] & bit == 0;
        self.bits[word] |= bit;
        first
    }

    /// Clears the marks of `touched`, every node marked since the last clear.
    fn clear(&mut self, touched: &[NodeId]) {
        for &node in touched {
            self.bits[node as usize / 64] &= !(1u64 << (node % 64));
        }
        debug_assert!(self.bits.iter().all(|&w| w == 0), "a node was marked but not listed as touched");
    }
}

/// Where each node's argument blob starts, by node (null for a node without one): the writing
/// pass stores a site's new address through it and so reads no node record (on large graphs one
/// cache miss per touched node). Kept in step with the records by `CmdBuf::attach_sites`, which
/// every change of a node's parameters ends with, and by `CmdBuf::remove_nodes_from`.
#[derive(Default)]
pub(super) struct BlobBases(Vec<*mut u8>);

// SAFETY: the addresses point into the blobs of the same command buffer's records, which move
// between threads with it and are used by one thread at a time (through `&mut`).
unsafe impl Send for BlobBases {}

impl BlobBases {
    /// Node `node`'s blob now starts at `base` (null: it has none).
    pub(super) fn set(&mut self, node: NodeId, base: *mut u8) {
        let i = node as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, std::ptr::null_mut());
        }
        self.0[i] = base;
    }

    /// Forgets the nodes from `nodes` on (removed).
    pub(super) fn truncate(&mut self, nodes: usize) {
        self.0.truncate(nodes);
    }

    /// Gives back the room `set` made to grow (at finalize, as the records do): doubling would
    /// otherwise keep up to 8 bytes a node.
    pub(super) fn shrink(&mut self) {
        self.0.shrink_to_fit();
    }

    pub(super) fn heap(&self) -> Heap {
        Heap::vec(&self.0)
    }
}

/// Kernel nodes an update hands the runtime in one call (`Graphs::kernel_nodes_set`), at
/// most: 64 bytes each, on the stack (2 KiB, below the 4 KiB past which a frame is probed page by
/// page), and enough that the call's own cost is spread over many setters of 0.2 µs or more.
const PUSH_BATCH: usize = 32;

/// A run of touched kernel nodes with their parameters, for one call of
/// `Graphs::kernel_nodes_set`: the setters then run back to back in the runtime's loop,
/// where one call per node ran the update's loop, the dynamic dispatch and the setter's wrapper
/// between two setters, code the driver's setter had just pushed out of the nearest caches (on
/// one H200, `real_graphs.py`'s update against the setters alone, call by call: medians
/// 0.005–0.04 lower on nine of its ten rows; `docs/benchmarks.md`).
struct KernelBatch<'a> {
    items: [MaybeUninit<(Node, KernelParams<'a>)>; PUSH_BATCH],
    len: usize,
}

impl<'a> KernelBatch<'a> {
    fn new() -> Self {
        Self { items: [const { MaybeUninit::uninit() }; PUSH_BATCH], len: 0 }
    }

    /// Adds a node, unless the batch is full (returns whether it did).
    fn push(&mut self, node: Node, params: KernelParams<'a>) -> bool {
        let Some(item) = self.items.get_mut(self.len) else { return false };
        item.write((node, params));
        self.len += 1;
        true
    }

    fn as_slice(&self) -> &[(Node, KernelParams<'a>)] {
        // SAFETY: the first `len` items were written by `push` (plain `Copy` data, nothing to
        // drop), and `MaybeUninit<T>` has `T`'s layout.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast(), self.len) }
    }
}

/// Makes room in `v` for `n` elements in all, writing `fill` over the room when it is new: the
/// first update after finalize would otherwise take the page faults of that fresh memory (one per
/// 4 KiB), which are finalize's to take.
pub(super) fn reserve_written<T: Copy>(v: &mut Vec<T>, n: usize, fill: T) {
    if v.capacity() < n {
        v.reserve_exact(n - v.len());
        v.spare_capacity_mut().iter_mut().for_each(|e| {
            e.write(fill);
        });
    }
}

impl CmdBuf {
    /// Compares `new` with the recorded table and moves what moved: each site of a moved
    /// allocation gets the move's delta added to the address its slot holds (the old base plus
    /// its offset, by construction), then each touched node is pushed once
    /// (to the executable graph of a primary buffer, to the template of a nested one).
    ///
    /// A different count or a changed size reports `needs_rerecord` and changes nothing, and so
    /// does a move that a node the library cannot patch may see (see `opaque.rs`). A
    /// failing push reports `needs_rerecord` too: the shadow parameters and the table are then
    /// the new ones, the nodes not yet pushed are remembered (and refused at launch) until a
    /// re-record or the next finalize or update pushes them.
    pub fn update_allocations(&mut self, new: &[Allocation]) -> Result<UpdateReport> {
        self.state.allow(Op::UpdateAllocations)?;
        let old = self.allocs.entries();
        if new.len() != old.len() {
            log::info!("allocation count changed from {} to {}: re-record needed", old.len(), new.len());
            self.counters.record(Event::Fallback(Fallback::ShapeChanged));
            return Ok(UpdateReport { needs_rerecord: true, ..UpdateReport::default() });
        }
        let scratch = &mut self.scratch;
        scratch.moved.clear();
        for (c, (new, old)) in new.chunks(COMPARE_CHUNK).zip(old.chunks(COMPARE_CHUNK)).enumerate() {
            // Most of a table is unchanged: a chunk is first compared word by word without a
            // branch (the compiler vectorizes it), and only a chunk that differs is walked.
            let (n, o) = (allocations::words(new), allocations::words(old));
            if n.iter().zip(o).fold(0, |acc, (n, o)| acc | (n ^ o)) == 0 {
                continue;
            }
            for (j, (n, o)) in new.iter().zip(old).enumerate() {
                let i = c * COMPARE_CHUNK + j;
                if n.size != o.size {
                    log::info!("allocation {i} changed size from {} to {}: re-record needed", o.size, n.size);
                    self.counters.record(Event::Fallback(Fallback::ShapeChanged));
                    return Ok(UpdateReport { needs_rerecord: true, ..UpdateReport::default() });
                }
                if n.base != o.base {
                    // Unmoved entries equal recorded ones, which were validated when recorded.
                    allocations::in_address_space(i, n)?;
                    scratch.moved.push((i as u32, n.base));
                }
            }
        }
        Ok(self.apply_moves())
    }

    /// [`Self::update_allocations`] given only what moved: each entry of `moves` names an
    /// allocation of the recorded table and its new base. An index outside the table, an
    /// allocation named twice or a base whose range overflows fails with nothing changed;
    /// entries that keep their base are not counted. Costs the moves and their sites only.
    pub fn move_allocations(&mut self, moves: &[AllocationMove]) -> Result<UpdateReport> {
        self.state.allow(Op::UpdateAllocations)?;
        let old = self.allocs.entries();
        let moved = &mut self.scratch.moved;
        moved.clear();
        moved.reserve(moves.len());
        // Moves in ascending order of index (how a caller that walks its table lists them) are
        // distinct and sorted as they come: one pass checks them and keeps the entries that
        // change; a list out of order is listed whole again, sorted and checked for repeats.
        let mut ascending = true;
        let mut previous = None;
        for (k, m) in moves.iter().enumerate() {
            let Some(o) = usize::try_from(m.index).ok().and_then(|i| old.get(i)) else {
                return Err(outside_the_table(k, m.index, old.len()));
            };
            allocations::in_address_space(m.index as usize, &Allocation { base: m.base, size: o.size })
                .map_err(|e| e.context(format!("moves[{k}]")))?;
            ascending &= previous < Some(m.index);
            previous = Some(m.index);
            if o.base != m.base {
                moved.push((m.index as u32, m.base));
            }
        }
        if !ascending {
            moved.clear();
            moved.extend(moves.iter().map(|m| (m.index as u32, m.base)));
            moved.sort_unstable_by_key(|&(alloc, _)| alloc);
            if let Some(pair) = moved.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(Error::invalid_argument(format!("allocation {} is moved twice", pair[0].0)));
            }
            moved.retain(|&(alloc, base)| old[alloc as usize].base != base);
        }
        Ok(self.apply_moves())
    }

    /// Rewrites the sites of the allocations in `scratch.moved` and pushes each touched node once,
    /// unless a node the library cannot patch may reference one of them (then nothing changes).
    ///
    /// On large graphs the cost is the cache misses on the node records and argument blobs the
    /// sites point into, one or two per touched node, scattered over the graph. The writing pass
    /// walks the moved allocations' sites (each allocation's contiguous) and, in a command buffer
    /// of [`LOOK_AHEAD_FROM_NODES`] nodes or more, asks for the line of the site [`PATCH_AHEAD`]
    /// after the current one, read by a second walk over the same sites (no list of the writes is
    /// made: it took 16 bytes per moved site, allocated by the first update). The pushing pass
    /// hands the kernel nodes to the runtime a run at a time (see [`KernelBatch`]: to a primary's
    /// executable graph, to a nested one's template), and asks for the next node's record while
    /// the runtime takes one pushed by itself.
    fn apply_moves(&mut self) -> UpdateReport {
        if let Some((why, reason)) = self.opaque_refusal() {
            log::debug!("address update refused, re-record needed: {reason}");
            self.counters.record(Event::Fallback(why));
            return UpdateReport { needs_rerecord: true, ..UpdateReport::default() };
        }
        // `overlaps` groups the sites first: finalize did, and nothing adds or removes one until
        // the next update phase (this costs a comparison); the memcpy class rule and the writes
        // below read them grouped.
        if let Some(reason) = self.patches.overlaps().refusal(&self.scratch.moved, self.allocs.entries()) {
            log::debug!("address update refused, re-record needed: {reason}");
            self.counters.record(Event::Fallback(Fallback::OverlappingAllocations));
            return UpdateReport { needs_rerecord: true, ..UpdateReport::default() };
        }
        // A memcpy node whose executable copy cannot take its new operands in place makes this
        // update a re-instantiation, decided before anything changes (see `memcpy_class.rs`).
        let memcpy = self.memcpy_moves_blocked();
        if let Some(why) = &memcpy {
            self.counters.record(Event::Fallback(Fallback::MemcpyNotInPlace));
            if let Some(blocked) = self.reinstantiation_blocked() {
                log::debug!(
                    "address update refused, re-record needed: {why}, and the executable graph cannot be re-instantiated now ({blocked})"
                );
                return UpdateReport { needs_rerecord: true, ..UpdateReport::default() };
            }
        }
        let scratch = &mut self.scratch;
        let mut report = UpdateReport { moved_allocations: scratch.moved.len() as u32, ..UpdateReport::default() };
        // Finalize made a mark for every node, and no node is added until the next finalize.
        debug_assert_eq!(scratch.marks.bits.len(), self.nodes.len().div_ceil(64));
        scratch.touched.clear();
        let primary = self.exec.is_some();
        for node in self.unpushed.drain(..) {
            if self.nodes[node as usize].unpushed && scratch.marks.first_touch(node) {
                scratch.touched.push(node);
            }
        }
        let (bases, marks, touched) = (&self.blob_bases.0, &mut scratch.marks, &mut scratch.touched);
        report.patched_sites = if self.nodes.len() >= LOOK_AHEAD_FROM_NODES {
            write_sites::<true>(&scratch.moved, &self.patches, self.allocs.entries(), bases, &mut self.nodes, marks, touched)
        } else {
            write_sites::<false>(&scratch.moved, &self.patches, self.allocs.entries(), bases, &mut self.nodes, marks, touched)
        };
        self.allocs.rebase(&scratch.moved);
        scratch.marks.clear(&scratch.touched);
        for &node in &scratch.touched {
            let record = &mut self.nodes[node as usize];
            // Cleared before the pushes: one that fails marks its node and those after it again,
            // a re-instantiation that fails marks every touched node (`finish_by_reinstantiating`),
            // and one that succeeds leaves none behind.
            record.unpushed = false;
            // The parameters go to the executable graph only; a re-instantiation brings the
            // template up to date first.
            if primary {
                record.template_lags_behind(node, &mut self.template_dirty);
            }
        }

        if let Some(why) = memcpy {
            return self.finish_by_reinstantiating(report, &why);
        }
        if primary && !scratch.touched.is_empty() && self.budget.limit() != 0 {
            let bytes =
                scratch.touched.iter().map(|&n| budget::push_bytes(&self.nodes[n as usize].params, self.budget.node_charge())).sum();
            if self.budget.exceeded_by(bytes) && self.reinstantiate_for_budget() {
                report.updated_nodes = self.scratch.touched.len() as u64;
                report.reinstantiated = true;
                if report.moved_allocations > 0 {
                    self.counters.record(Event::AddressUpdate);
                }
                return report;
            }
        }
        let mut bytes = 0;
        // A nested command buffer's pushes go to its template (see `CmdBuf::memcpy_set`).
        let mut memcpy_pushed = false;
        let (rt, charge) = (self.rt, self.budget.node_charge());
        let touched = self.scratch.touched.len();
        let mut k = 0;
        while k < touched {
            let (failed, e) = match &self.nodes[self.scratch.touched[k] as usize].params {
                // Kernel nodes go to the runtime a run at a time.
                Params::Kernel(_) => {
                    let start = k;
                    let (mut batch, mut batch_bytes) = (KernelBatch::new(), 0);
                    while let Some(&node) = self.scratch.touched.get(k) {
                        let record = &self.nodes[node as usize];
                        let Params::Kernel(kernel) = &record.params else { break };
                        if !batch.push(record.raw, kernel.params()) {
                            break;
                        }
                        batch_bytes += budget::push_bytes(&record.params, charge);
                        k += 1;
                    }
                    match rt.kernel_nodes_set(self.exec, batch.as_slice()) {
                        Ok(()) => {
                            report.updated_nodes += (k - start) as u64;
                            bytes += batch_bytes;
                            continue;
                        }
                        Err((set, e)) => {
                            let pushed = &self.scratch.touched[start..start + set];
                            report.updated_nodes += set as u64;
                            bytes += pushed.iter().map(|&n| budget::push_bytes(&self.nodes[n as usize].params, charge)).sum::<u64>();
                            (start + set, e)
                        }
                    }
                }
                _ => {
                    let node = self.scratch.touched[k];
                    if let Some(&next) = self.scratch.touched.get(k + 1) {
                        let next = &self.nodes[next as usize];
                        next.prefetch();
                        next.params.prefetch_push();
                    }
                    let record = &mut self.nodes[node as usize];
                    match record.params.push(rt, self.exec, record.raw) {
                        Ok(()) => {
                            report.updated_nodes += 1;
                            bytes += budget::push_bytes(&record.params, charge);
                            memcpy_pushed |= matches!(record.params, Params::Memcpy(_));
                            k += 1;
                            continue;
                        }
                        Err(e) => (k, e),
                    }
                }
            };
            let node = self.scratch.touched[failed];
            // A memcpy setter that refuses its node's new operands (a rule the library does not
            // check): every touched node's parameters are in its record, and the template takes
            // them, so a new executable graph finishes the update.
            if primary && matches!(self.nodes[node as usize].params, Params::Memcpy(_)) {
                self.counters.record(Event::Fallback(Fallback::MemcpyNotInPlace));
                if self.reinstantiation_blocked().is_none() {
                    if report.updated_nodes > 0 {
                        self.pushed(report.updated_nodes, bytes);
                    }
                    let why = format!("the executable graph's memcpy setter refused node {node}'s new operands ({e})");
                    return self.finish_by_reinstantiating(report, &why);
                }
            }
            log::warn!("address update stopped after {failed} of {touched} node(s): {e}; the command buffer needs a re-record");
            for rest in failed..touched {
                self.mark_unpushed(self.scratch.touched[rest]);
            }
            report.needs_rerecord = true;
            self.counters.record(Event::Fallback(Fallback::PushFailed));
            break;
        }
        if primary && report.updated_nodes > 0 {
            self.pushed(report.updated_nodes, bytes);
        }
        self.note_memcpy_set(!primary && memcpy_pushed);
        if report.moved_allocations > 0 && !report.needs_rerecord {
            self.counters.record(Event::AddressUpdate);
        }
        report
    }

    /// Ends an update whose touched nodes (`scratch.touched`, their records written and their
    /// templates marked) go to a new executable graph instead of the present one (`why`); the
    /// caller checked that re-instantiating is possible. Should it fail, the touched nodes are
    /// left unpushed, which refuses launches until a re-record, and the update asks for one.
    fn finish_by_reinstantiating(&mut self, mut report: UpdateReport, why: &str) -> UpdateReport {
        match self.reinstantiate_for_memcpy(why) {
            Ok(()) => {
                report.updated_nodes = self.scratch.touched.len() as u64;
                report.reinstantiated = true;
                if report.moved_allocations > 0 {
                    self.counters.record(Event::AddressUpdate);
                }
            }
            Err(e) => {
                log::warn!("address update not applied: {e}; the command buffer needs a re-record");
                for k in 0..self.scratch.touched.len() {
                    self.mark_unpushed(self.scratch.touched[k]);
                }
                report.needs_rerecord = true;
            }
        }
        report
    }

    /// Why the allocations in `scratch.moved` cannot move in place, if they cannot, and how that
    /// is counted: the graph came from capture, or an opaque node may reference one of them (see
    /// `opaque.rs`).
    fn opaque_refusal(&self) -> Option<(Fallback, String)> {
        if self.captured && !self.scratch.moved.is_empty() {
            return Some((
                Fallback::OpaqueReference,
                String::from("the command buffer's graph came from stream capture, whose addresses are not patch sites"),
            ));
        }
        self.pins.refusal(&self.scratch.moved)
    }
}

/// The writing pass of an update: adds each moved allocation's delta (`moved`: allocation, new
/// base; `entries` still holds the old bases) to the address each of its sites holds, and lists
/// in `touched` each node it touches for the first time (marked in `marks`). Returns the sites
/// written. With `AHEAD`, asks for the line of the site [`PATCH_AHEAD`] after the current one,
/// read by a second walk over the same sites.
///
/// A function of its own, given the tables as arguments: a store through a blob's raw pointer
/// may alias any field of the command buffer as far as the compiler knows, so written inside
/// `apply_moves` each site reloaded the tables' addresses and lengths from it. Arguments promise
/// the compiler they do not alias, a promise that survives inlining (on `rcb-bench
/// update-loop`'s chain, one site per moved allocation, 97 instructions per moved allocation and
/// its site written inside `apply_moves`, about 84 here, counted on the software GPU); inlined, the
/// call's own cost (18 of an update's 438 instructions when nothing moves) is saved too.
#[inline(always)]
fn write_sites<const AHEAD: bool>(
    moved: &[(u32, u64)],
    patches: &PatchTable,
    entries: &[Allocation],
    bases: &[*mut u8],
    nodes: &mut [NodeRecord],
    marks: &mut Marks,
    touched: &mut Vec<NodeId>,
) -> u64 {
    let sites_of = |&(alloc, _): &(u32, u64)| patches.grouped_of(alloc);
    // The same sites, `PATCH_AHEAD` ahead of the one being written, across allocations.
    let mut ahead = moved.iter().flat_map(sites_of).skip(PATCH_AHEAD);
    let mut written = 0;
    for &(alloc, base) in moved {
        let old = entries[alloc as usize];
        let delta = base.wrapping_sub(old.base);
        let sites = patches.grouped_of(alloc);
        written += sites.len() as u64;
        for s in sites {
            if AHEAD
                && let Some(next) = ahead.next()
                && let Slot::KernelArg(at) = next.slot
            {
                crate::prefetch::line(bases[next.node as usize].wrapping_add(usize::from(at)));
            }
            match s.slot {
                Slot::KernelArg(at) => {
                    let word = bases[s.node as usize].wrapping_add(usize::from(at));
                    debug_assert!(
                        matches!(&nodes[s.node as usize].params, Params::Kernel(k) if k.blob.as_ptr_range().contains(&word.cast_const()) && usize::from(at) + 8 <= k.blob.len()),
                        "node {}'s blob is not where its sites say",
                        s.node
                    );
                    // SAFETY: `bases` holds the start of the node's live blob (kept in step with
                    // its record by `attach_sites`), and the site was recorded from that blob's
                    // pointer at `at`, 8 bytes inside it (see `Slot::kernel_arg`); no reference
                    // to the blob is live while the records are borrowed mutably here.
                    let held = unsafe { word.cast::<u64>().read_unaligned() };
                    // A slot holds the old base plus its offset (by construction): the new
                    // address adds the move's delta.
                    if held.wrapping_sub(old.base) > old.size {
                        site_outside_allocation(s.node, alloc);
                    }
                    // SAFETY: as for the read above.
                    unsafe { word.cast::<u64>().write_unaligned(held.wrapping_add(delta)) };
                }
                _ => write_operand(&mut nodes[s.node as usize].params, s, alloc, old, delta),
            }
            if marks.first_touch(s.node) {
                touched.push(s.node);
            }
        }
    }
    written
}

/// [`write_sites`] for a memcpy or memset operand, in the node's record: kept out of the
/// kernel arguments' loop, whose registers it would take.
#[inline(never)]
fn write_operand(params: &mut Params, s: &Site, alloc: u32, old: Allocation, delta: u64) {
    let held = params.read(s.slot);
    if held.wrapping_sub(old.base) > old.size {
        site_outside_allocation(s.node, alloc);
    }
    params.write(s.slot, held.wrapping_add(delta));
}

#[cold]
fn outside_the_table(k: usize, index: u64, entries: usize) -> Error {
    Error::invalid_argument(format!("moves[{k}].index {index} is outside the table of {entries} allocation(s)"))
}

/// A site whose slot does not hold an address inside its allocation breaks the rule the delta
/// relies on (a slot holds the old base plus its offset): the written address would be wrong, so
/// a debug build stops and a release build says so, naming the node.
#[cold]
fn site_outside_allocation(node: u32, alloc: u32) {
    debug_assert!(false, "node {node}'s site of allocation {alloc} holds an address outside it");
    log::error!("node {node}'s site of allocation {alloc} holds an address outside it: its update is wrong (a bug of rocm_cmdbuf)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_is_touched_once_per_update_and_every_mark_is_clear_after_it() {
        let mut marks = Marks::default();
        marks.cover(130);
        assert_eq!(marks.bits.len(), 3);
        for update in [vec![0, 63, 64, 129, 63, 0, 129], vec![129, 1, 1, 64], vec![]] {
            let mut touched = Vec::new();
            for &node in &update {
                if marks.first_touch(node) {
                    touched.push(node);
                }
            }
            let mut distinct = update.clone();
            distinct.sort_unstable();
            distinct.dedup();
            touched.sort_unstable();
            assert_eq!(touched, distinct, "each node once in update {update:?}");
            marks.clear(&touched);
            assert!(marks.bits.iter().all(|&w| w == 0), "marks left after update {update:?}");
        }
        // Growing keeps the marks clear (a re-record added nodes).
        marks.cover(200);
        assert_eq!(marks.bits, vec![0; 4]);
        assert!(marks.first_touch(199) && !marks.first_touch(199));
    }
}
