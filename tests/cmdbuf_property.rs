//! Property: for random small graphs over random allocation tables and random moves, updating
//! addresses in place either gives exactly the memory a fresh record at the new addresses gives,
//! or is refused (`needs_rerecord`) with nothing changed; it never writes a buffer no allocation
//! lies in any more. Given the whole new table or only the moved allocations.
//!
//! The tables are what XLA's allocator and its users make: allocations that alias one another
//! (one array passed twice, donation), nested and partly overlapping views of one buffer, empty
//! entries anywhere (at a buffer's start, inside it, one past its end), entries end to end. Each
//! pointer argument comes from one known allocation — the truth the fresh record uses — and is
//! given to the library either as an address (which it must attribute on its own) or named by
//! allocation (`RCB_ARG_ALLOCATION`); among them are end pointers, one past their allocation's
//! end (a range given as begin and end), which by address alone may come from the allocation
//! that begins there. Tables whose entries neither overlap nor touch are never refused.
//!
//! `RCB_PROPERTY_CASES` sets the number of cases (default 2000); `RCB_PROPERTY_SEED` the seed.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use common::rng::XorShift;
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::Function;

/// Elements per physical buffer; each operation covers `SPAN` of them.
const LEN: usize = 32;
const SPAN: usize = 16;
const BYTES: u64 = (LEN * 4) as u64;

/// An allocation of the table: `len` elements from element `start` of physical buffer `buffer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct View {
    buffer: usize,
    start: usize,
    len: usize,
}

/// A pointer as its truth: `offset` elements into allocation `alloc`; `named` when the library
/// is told so (`RCB_ARG_ALLOCATION`), else it gets the address alone.
#[derive(Clone, Copy, Debug)]
struct Ptr {
    alloc: usize,
    offset: usize,
    named: bool,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Fill {
        dst: Ptr,
        value: u32,
    },
    Axpy {
        y: Ptr,
        x: Ptr,
        a: f32,
    },
    Add {
        out: Ptr,
        x: Ptr,
        y: Ptr,
    },
    Copy {
        dst: Ptr,
        src: Ptr,
    },
    Set {
        dst: Ptr,
        pattern: u32,
    },
    /// `*out = end - begin` (`rcb_test_distance_u64`), `end` one past its allocation's end.
    Range {
        out: Ptr,
        begin: Ptr,
        end: Ptr,
    },
}

#[derive(Debug)]
struct Case {
    buffers: usize,
    /// The table when recorded, as views of the old physical buffers.
    old: Vec<View>,
    /// The table after the moves, as views of the new layout: buffers `0..buffers` are the old
    /// ones, `buffers..` fresh ones.
    new: Vec<View>,
    new_buffers: usize,
    ops: Vec<(Op, Vec<usize>)>,
    initial: Vec<Vec<f32>>,
}

impl Case {
    /// Whether no two non-empty allocations share an element, no empty one sits inside a
    /// non-empty one or at another empty one, and none touches another (a non-empty one ending
    /// where another one begins): then no address, an end pointer included, may come from two
    /// allocations, and the library has nothing to guess.
    fn disjoint(&self) -> bool {
        let inside = |v: &View, buffer: usize, e: usize| v.buffer == buffer && v.start <= e && e < v.start + v.len;
        let ends_at = |v: &View, buffer: usize, e: usize| v.len > 0 && v.buffer == buffer && v.start + v.len == e;
        self.old.iter().enumerate().all(|(i, a)| {
            self.old.iter().enumerate().all(|(j, b)| {
                i == j
                    || !ends_at(b, a.buffer, a.start)
                        && if a.len == 0 {
                            !inside(b, a.buffer, a.start) && (b.len > 0 || (b.buffer, b.start) != (a.buffer, a.start))
                        } else {
                            b.len == 0 || (a.start..a.start + a.len).all(|e| !inside(b, a.buffer, e))
                        }
            })
        })
    }
}

fn random_view(rng: &mut XorShift, buffer: usize) -> View {
    match rng.below(8) {
        0 => View { buffer, start: [0, 8, 16, LEN][rng.below(4)], len: 0 },
        1 | 2 => View { buffer, start: [0, 8, 16][rng.below(3)], len: SPAN },
        _ => View { buffer, start: 0, len: LEN },
    }
}

fn random_case(rng: &mut XorShift) -> Case {
    let buffers = 2 + rng.below(3);
    let overlapping = rng.below(2) == 0;
    let mut old: Vec<View> = Vec::new();
    for b in 0..buffers {
        old.push(random_view(rng, b));
        // More views of the same buffer: aliased, nested, partly overlapping, empty.
        while overlapping && old.len() < 8 && rng.below(2) == 0 {
            let view = if rng.below(3) == 0 {
                old[rng.below(old.len())]
            } else {
                let buffer = rng.below(buffers);
                random_view(rng, buffer)
            };
            old.push(view);
        }
    }
    for k in (1..old.len()).rev() {
        old.swap(k, rng.below(k + 1));
    }
    // Moves: per old buffer, its allocations stay, all move together to a fresh buffer (one
    // delta), or each moves on its own (to a fresh buffer or to another allocation's place).
    let mut new = old.clone();
    let mut new_buffers = buffers;
    for b in 0..buffers {
        let members: Vec<usize> = (0..old.len()).filter(|&i| old[i].buffer == b).collect();
        match rng.below(4) {
            0 => {}
            1 => {
                members.iter().for_each(|&i| new[i].buffer = new_buffers);
                new_buffers += 1;
            }
            _ => {
                for &i in &members {
                    match rng.below(3) {
                        0 => {}
                        1 => {
                            new[i].buffer = new_buffers;
                            new_buffers += 1;
                        }
                        _ => {
                            let other = old[rng.below(old.len())];
                            if other.len == old[i].len {
                                new[i] = View { len: old[i].len, ..other };
                            }
                        }
                    }
                }
            }
        }
    }
    let usable: Vec<usize> = (0..old.len()).filter(|&i| old[i].len >= SPAN).collect();
    let mut ops = Vec::new();
    if !usable.is_empty() {
        let named = rng.below(3);
        let ptr = |rng: &mut XorShift| {
            let alloc = usable[rng.below(usable.len())];
            let offset = if old[alloc].len == LEN { SPAN * rng.below(2) } else { 0 };
            Ptr { alloc, offset, named: named == 2 || (named == 1 && rng.below(2) == 0) }
        };
        // One past the end of a usable allocation.
        let end = |rng: &mut XorShift| {
            let alloc = usable[rng.below(usable.len())];
            Ptr { alloc, offset: old[alloc].len, named: named == 2 || (named == 1 && rng.below(2) == 0) }
        };
        for i in 0..2 + rng.below(5) {
            let op = match rng.below(6) {
                0 => Op::Fill { dst: ptr(rng), value: (rng.below(8) as f32).to_bits() },
                1 => Op::Axpy { y: ptr(rng), x: ptr(rng), a: (1 + rng.below(3)) as f32 },
                2 => Op::Add { out: ptr(rng), x: ptr(rng), y: ptr(rng) },
                3 => Op::Copy { dst: ptr(rng), src: ptr(rng) },
                4 => Op::Set { dst: ptr(rng), pattern: (rng.below(8) as f32).to_bits() },
                _ => Op::Range { out: ptr(rng), begin: ptr(rng), end: end(rng) },
            };
            // A chain (so results do not depend on scheduling) plus random extra edges.
            let mut deps: Vec<usize> = (0..i.saturating_sub(1)).filter(|_| rng.below(3) == 0).collect();
            if i > 0 {
                deps.push(i - 1);
            }
            ops.push((op, deps));
        }
    }
    let initial = (0..new_buffers).map(|_| (0..LEN).map(|_| rng.below(8) as f32).collect()).collect();
    Case { buffers, old, new, new_buffers, ops, initial }
}

/// The table of `views` over physical buffers at `bases`.
fn table_of(views: &[View], bases: &[u64]) -> Vec<(u64, u64)> {
    views.iter().map(|v| (bases[v.buffer] + (v.start * 4) as u64, (v.len * 4) as u64)).collect()
}

/// Records the case at the addresses of `table`; `names` lets pointers be named as the case says
/// (the in-place command buffer), else every pointer is given as its address (the fresh record
/// the update is compared with, which must not depend on how names are decoded).
fn record(gpu: &Gpu, cb: &Cb, case: &Case, table: &[(u64, u64)], names: bool) {
    let address = |p: Ptr| table[p.alloc].0 + (p.offset * 4) as u64;
    let n = SPAN as u64;
    let k = &gpu.k;
    // Each kernel argument as bytes and kind: a pointer named or given as its address.
    let pointer = |p: Ptr| -> (Vec<u8>, u32) {
        if p.named && names {
            let named = [p.alloc as u64, (p.offset * 4) as u64];
            (named.iter().flat_map(|w| w.to_ne_bytes()).collect(), RCB_ARG_ALLOCATION)
        } else {
            (address(p).to_ne_bytes().to_vec(), RCB_ARG_DEVICE_PTR)
        }
    };
    let value = |bytes: &[u8]| (bytes.to_vec(), RCB_ARG_VALUE);
    let kernel = |deps: &[rcb_node], f: Function, args: Vec<(Vec<u8>, u32)>| {
        let raw: Vec<(&[u8], u32)> = args.iter().map(|(b, kind)| (b.as_slice(), *kind)).collect();
        cb.raw_kernel(deps, f, n, &raw)
    };
    let mut nodes: Vec<rcb_node> = Vec::new();
    for (op, deps) in &case.ops {
        let deps: Vec<rcb_node> = deps.iter().map(|&d| nodes[d]).collect();
        let count = value(&n.to_ne_bytes());
        let node = match *op {
            Op::Fill { dst, value: v } => kernel(&deps, k.fill_u32, vec![pointer(dst), value(&v.to_ne_bytes()), count]),
            Op::Axpy { y, x, a } => kernel(&deps, k.axpy_f32, vec![pointer(y), pointer(x), value(&a.to_ne_bytes()), count]),
            Op::Add { out, x, y } => kernel(&deps, k.add_f32, vec![pointer(out), pointer(x), pointer(y), count]),
            Op::Copy { dst, src } => cb.memcpy(&deps, address(dst), address(src), n * 4),
            Op::Set { dst, pattern } => cb.memset(&deps, address(dst), pattern, 4, n),
            Op::Range { out, begin, end } => kernel(&deps, k.distance_u64, vec![pointer(out), pointer(begin), pointer(end)]),
        };
        nodes.push(node);
    }
}

fn upload_initial(gpu: &Gpu, case: &Case, bases: &[u64]) {
    for (b, data) in bases.iter().zip(&case.initial) {
        gpu.write(*b, data);
    }
}

/// The buffers' contents as bits: a distance written over floats may read as a NaN, which
/// equals nothing.
fn results(gpu: &Gpu, bases: &[u64]) -> Vec<Vec<u32>> {
    bases.iter().map(|&b| gpu.read(b, LEN).iter().map(|v| v.to_bits()).collect()).collect()
}

#[test]
fn updating_in_place_equals_recording_from_scratch_or_is_refused() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let cases: usize = std::env::var("RCB_PROPERTY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let seed: u64 = std::env::var("RCB_PROPERTY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x9e37_79b9_7f4a_7c15);
    let mut rng = XorShift(seed);
    // (in place, refused) for disjoint and for overlapping tables.
    let mut outcomes = [[0usize; 2]; 2];
    let mut named_in_place = 0;
    // Updates done in place that moved an end pointer given by address.
    let mut ends_moved = 0;
    for i in 0..cases {
        let case = random_case(&mut rng);
        let malloc = || gpu.rt.malloc(0, BYTES as usize).unwrap();
        let bases: Vec<u64> = (0..case.new_buffers).map(|_| malloc()).collect();
        let (old_table, new_table) = (table_of(&case.old, &bases), table_of(&case.new, &bases));

        let in_place = Cb::primary();
        in_place.set_allocs(&old_table);
        record(&gpu, &in_place, &case, &old_table, true);
        in_place.finalize();
        upload_initial(&gpu, &case, &bases);
        in_place.launch(&gpu);
        let moved = (0..case.old.len()).filter(|&a| old_table[a].0 != new_table[a].0).count();
        let report = if i % 2 == 0 {
            in_place.update_allocs(&new_table)
        } else {
            // Only what moved, in a random order, sometimes with an unmoved one named too.
            let mut moves: Vec<(u64, u64)> = (0..case.old.len())
                .filter(|&a| old_table[a].0 != new_table[a].0 || rng.below(4) == 0)
                .map(|a| (a as u64, new_table[a].0))
                .collect();
            for k in (1..moves.len()).rev() {
                moves.swap(k, rng.below(k + 1));
            }
            in_place.move_allocs(&moves)
        };
        let disjoint = case.disjoint();
        // Every address named: nothing to guess, nothing to refuse.
        let all_named = case.ops.iter().all(|(op, _)| match *op {
            Op::Fill { dst, .. } => dst.named,
            Op::Axpy { y, x, .. } => y.named && x.named,
            Op::Add { out, x, y } | Op::Range { out, begin: x, end: y } => out.named && x.named && y.named,
            Op::Copy { .. } | Op::Set { .. } => false,
        });
        if all_named {
            assert_eq!(report.needs_rerecord, 0, "case {i}: refused although every pointer is named: {case:?}");
            named_in_place += 1;
        }
        outcomes[usize::from(!disjoint)][usize::from(report.needs_rerecord != 0)] += 1;
        if report.needs_rerecord != 0 {
            assert!(!disjoint, "case {i}: a table of disjoint allocations was refused: {case:?}");
            assert_eq!((report.moved_allocations, report.patched_sites, report.updated_nodes), (0, 0, 0), "case {i}: refused with changes");
        } else {
            assert_eq!(report.moved_allocations as usize, moved, "case {i}");
            // Buffers no allocation lies in any more must not be written.
            let sentinel = vec![-1.0f32; LEN];
            let gone: Vec<usize> = (0..case.buffers).filter(|&b| !case.new.iter().any(|v| v.buffer == b)).collect();
            upload_initial(&gpu, &case, &bases);
            gone.iter().for_each(|&b| gpu.write(bases[b], &sentinel));
            in_place.launch(&gpu);
            let updated = results(&gpu, &bases);
            for &b in &gone {
                assert!(
                    updated[b].iter().all(|&v| v == (-1.0f32).to_bits()),
                    "case {i}: a buffer no allocation lies in was written: {case:?}"
                );
            }

            let scratch = Cb::primary();
            scratch.set_allocs(&new_table);
            record(&gpu, &scratch, &case, &new_table, false);
            scratch.finalize();
            upload_initial(&gpu, &case, &bases);
            gone.iter().for_each(|&b| gpu.write(bases[b], &sentinel));
            scratch.launch(&gpu);
            assert_eq!(updated, results(&gpu, &bases), "case {i}: {case:?}");
            let moved_end = |(op, _): &(Op, Vec<usize>)| matches!(*op, Op::Range { end, .. } if !end.named && old_table[end.alloc].0 != new_table[end.alloc].0);
            ends_moved += usize::from(case.ops.iter().any(moved_end));
        }
        for b in bases {
            gpu.rt.free(b).unwrap();
        }
    }
    println!(
        "{cases} cases: disjoint tables {} in place, {} refused; overlapping tables {} in place, {} refused; {named_in_place} with every pointer named; {ends_moved} moved an end pointer given by address in place",
        outcomes[0][0], outcomes[0][1], outcomes[1][0], outcomes[1][1]
    );
    if cases >= 200 {
        // Both kinds of table, both outcomes on overlapping ones, all-named cases and moved end
        // pointers were exercised.
        assert!(
            outcomes[0][0] > 0 && outcomes[1][0] > 0 && outcomes[1][1] > 0 && named_in_place > 0 && ends_moved > 0,
            "{outcomes:?} {named_in_place} {ends_moved}"
        );
    }
}
