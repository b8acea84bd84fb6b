//! Model-based property tests of the pure parts under the C ABI: argument packing, the address
//! → allocation lookup and the patch table, each against a model written the obvious, slow way,
//! over random inputs that favour the edges (overlapping and empty allocations, ranges ending at
//! the top of the address space, removals of a node's sites before and after grouping, arguments of every size and
//! kind). The C fuzzer (tests/fuzz) reaches these through the ABI but cannot tell a wrong
//! answer from a right one; these compare every answer.
//!
//! `RCB_PROPERTY_CASES` sets the number of cases per property (default 2000), `RCB_PROPERTY_SEED`
//! the seed; a failure names the case's seed.

use super::allocations::{Allocation, AllocationTable, Reach, validate};
use super::args::{ArgKind, KernelArg, MAX_BLOB_BYTES, pack};
use super::patch::{PatchTable, Site, Slot};
use std::collections::HashSet;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs `property` on `RCB_PROPERTY_CASES` generators, each seeded from `RCB_PROPERTY_SEED`.
fn cases(name: &str, property: impl Fn(&mut XorShift)) {
    let seed = env("RCB_PROPERTY_SEED", 0x5EED_1234_ABCD_0001);
    for case in 0..env("RCB_PROPERTY_CASES", 2000) {
        let case_seed = seed ^ (case + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| property(&mut XorShift(case_seed | 1))));
        if let Err(e) = outcome {
            panic!("property {name}, case {case} (RCB_PROPERTY_SEED={seed}): {}", e.downcast_ref::<String>().map_or("", |s| s));
        }
    }
}

/// The lookup as the header states it: the allocations containing `p` (`base <= p < base +
/// size`; an empty one at `p == base`, only where no non-empty one contains `p`), and for a
/// kernel argument (`ends`) the non-empty ones ending at `p` too: patched through the lowest
/// index containing `p`, else the lowest ending at it, else the lowest empty one at it; the
/// others listed.
fn lookup_model(allocs: &[Allocation], p: u64, ends: bool) -> Option<(u32, u64, Vec<u32>)> {
    let all = |f: &dyn Fn(&Allocation) -> bool| -> Vec<u32> { (0..allocs.len()).filter(|&i| f(&allocs[i])).map(|i| i as u32).collect() };
    let inside = all(&|a| a.size > 0 && a.base <= p && p - a.base < a.size);
    let ending = if ends { all(&|a| a.size > 0 && a.base + a.size == p) } else { Vec::new() };
    let empty = all(&|a| a.size == 0 && a.base == p);
    let (first, mut others) = if let Some((&first, rest)) = inside.split_first() {
        (first, [rest, &ending].concat())
    } else if let Some((&first, rest)) = ending.split_first() {
        (first, [rest, &empty].concat())
    } else {
        let (&first, rest) = empty.split_first()?;
        (first, rest.to_vec())
    };
    others.sort_unstable();
    Some((first, p - allocs[first as usize].base, others))
}

fn random_allocation(r: &mut XorShift) -> Allocation {
    let size = r.pick(&[0, 1, 8, 0x10, 0x100, 0x1000, 0x2000]);
    let base = if r.below(16) == 0 {
        // Ending at, or one short of, the top of the address space.
        u64::MAX - size - r.below(2)
    } else {
        // A few clustered bases, so that ranges nest, alias and touch.
        0x1_0000_0000 + 0x800 * r.below(8) + 0x10 * r.below(3)
    };
    Allocation { base, size }
}

#[test]
fn allocation_lookup_agrees_with_the_model() {
    cases("allocation lookup", |r| {
        let mut allocs: Vec<Allocation> = (0..r.below(12)).map(|_| random_allocation(r)).collect();
        validate(&allocs).expect("generated ranges stay inside the address space");
        let mut table = AllocationTable::default();
        table.set(&allocs);
        for _ in 0..40 {
            if r.below(8) == 0 && !allocs.is_empty() {
                let i = r.below(allocs.len() as u64) as usize;
                let moved = random_allocation(r);
                if moved.size == allocs[i].size {
                    allocs[i].base = moved.base;
                    table.rebase(&[(i as u32, moved.base)]);
                }
            }
            let p = match (r.below(4), allocs.is_empty()) {
                (0, _) | (_, true) => r.next(),
                (k, false) => {
                    let a = allocs[r.below(allocs.len() as u64) as usize];
                    let edge = [a.base.wrapping_sub(1), a.base, a.base.wrapping_add(a.size.saturating_sub(1)), a.base.wrapping_add(a.size)];
                    edge[(k as usize + r.below(4) as usize) % 4]
                }
            };
            let (reach, ends) = if r.below(2) == 0 { (Reach::Inside, false) } else { (Reach::ThroughEnd, true) };
            let got = table.lookup(p, reach).map(|c| (c.allocation, c.offset, c.others));
            assert_eq!(got, lookup_model(&allocs, p, ends), "address {p:#x} ({reach:?}) in {allocs:x?}");
        }
    });
}

#[test]
fn patch_table_agrees_with_the_model() {
    cases("patch table", |r| {
        let mut t = PatchTable::default();
        let mut allocations = 1 + r.below(6) as u32;
        t.reset(allocations as usize);
        // Each live site: its allocation, the site, and every allocation its address lies in.
        let mut model: Vec<(u32, Site, Vec<u32>)> = Vec::new();
        // Every distinct set of two or more allocations added since the last reset, live or not.
        let mut sets = HashSet::new();
        for _ in 0..60 {
            match r.below(10) {
                0 if r.below(4) == 0 => {
                    allocations = 1 + r.below(6) as u32;
                    t.reset(allocations as usize);
                    model.clear();
                    sets.clear();
                }
                0..=2 if !model.is_empty() => {
                    // Mostly a node that has sites, at times one that has none.
                    let node = if r.below(8) == 0 { r.below(32) as u32 } else { model[r.below(model.len() as u64) as usize].1.node };
                    t.remove_node(node);
                    model.retain(|(_, s, _)| s.node != node);
                }
                3 if r.below(3) == 0 => t.group(),
                _ => {
                    let offset = 8 * r.below(64) as u16;
                    let slot = r.pick(&[Slot::KernelArg(offset), Slot::MemcpyDst, Slot::MemcpySrc, Slot::MemsetDst]);
                    let site = Site { node: r.below(32) as u32, slot };
                    let alloc = r.below(u64::from(allocations)) as u32;
                    let mut others: Vec<u32> = (0..allocations).filter(|&a| a != alloc && r.below(5) == 0).collect();
                    if r.below(2) == 0 {
                        others.clear();
                    }
                    t.add(site.node, site.slot, alloc, &others);
                    if !others.is_empty() {
                        let mut set = others.clone();
                        set.push(alloc);
                        set.sort_unstable();
                        sets.insert(set);
                    }
                    let mut set = others.clone();
                    set.push(alloc);
                    model.push((alloc, site, set));
                }
            }
            if r.below(3) == 0 {
                // At times the refusal is asked first, so that it groups what recording changed.
                let refusal_first = r.below(2) == 0;
                if refusal_first {
                    refusal_agrees(&mut t, &model, &sets, allocations, r);
                }
                assert_eq!(t.len(), model.len());
                for a in 0..allocations {
                    let key = |s: &Site| (s.node, format!("{:?}", s.slot));
                    let mut got: Vec<Site> = t.of_allocation(a).to_vec();
                    let mut want: Vec<Site> = model.iter().filter(|(m, _, _)| *m == a).map(|&(_, s, _)| s).collect();
                    got.sort_by_key(key);
                    want.sort_by_key(key);
                    assert_eq!(got, want, "sites of allocation {a}");
                    // The memcpy operands among them.
                    let copies = t.copies_of(a);
                    assert!(copies.iter().all(|&(of, _)| of == a), "memcpy operand sites of allocation {a}: {copies:?}");
                    let mut got: Vec<Site> = copies.iter().map(|&(_, s)| s).collect();
                    got.sort_by_key(key);
                    want.retain(|s| matches!(s.slot, Slot::MemcpyDst | Slot::MemcpySrc));
                    assert_eq!(got, want, "memcpy operand sites of allocation {a}");
                }
                if !refusal_first {
                    refusal_agrees(&mut t, &model, &sets, allocations, r);
                }
            }
        }
    });
}

/// Random moves of `allocations` allocations: refused by `t` exactly when some live site of
/// `model` has allocations that move apart; and each of `sets` is kept once.
fn refusal_agrees(t: &mut PatchTable, model: &[(u32, Site, Vec<u32>)], sets: &HashSet<Vec<u32>>, allocations: u32, r: &mut XorShift) {
    let old: Vec<Allocation> = (0..allocations).map(|a| Allocation { base: 0x1000 * u64::from(a), size: 0x1000 }).collect();
    let delta: Vec<u64> = (0..allocations).map(|_| r.pick(&[0, 0, 0x10_0000, 0x20_0000])).collect();
    let moved: Vec<(u32, u64)> =
        (0..allocations).filter(|&a| delta[a as usize] != 0).map(|a| (a, old[a as usize].base + delta[a as usize])).collect();
    let apart = model.iter().any(|(_, _, set)| set.iter().any(|&a| delta[a as usize] != delta[set[0] as usize]));
    assert_eq!(
        t.overlaps().refusal(&moved, &old).is_some(),
        apart,
        "moves {moved:x?} of sites {:?}",
        model.iter().map(|v| &v.2).collect::<Vec<_>>()
    );
    assert_eq!(t.overlaps().sets(), sets.len(), "each set kept once, also when added again after a grouping");
}

/// The packing rule of the header, computed argument by argument.
/// The address of a named argument in the packing properties' table of 6 allocations.
fn model_table(index: u32, offset: u64) -> crate::error::Result<u64> {
    if index < 6 { Ok(0x10_0000 * u64::from(index + 1) + offset) } else { Err(crate::error::Error::invalid_argument("outside")) }
}

/// A packing by the model: the blob, the pointer offsets and the named pointers as `(at,
/// allocation, offset)`; or the index of the first argument it refuses.
type Packed = (Vec<u8>, Vec<u32>, Vec<(u32, u32, u64)>);

fn pack_model(args: &[(Vec<u8>, ArgKind)]) -> Result<Packed, usize> {
    let mut blob = Vec::new();
    let mut pointers = Vec::new();
    let mut named = Vec::new();
    for (i, (value, kind)) in args.iter().enumerate() {
        let value = match kind {
            ArgKind::Allocation { index, offset } => match model_table(*index, *offset) {
                Ok(p) => p.to_ne_bytes().to_vec(),
                Err(_) => return Err(i),
            },
            _ => value.clone(),
        };
        let size = value.len();
        if size == 0 || (*kind == ArgKind::DevicePtr && size != 8) {
            return Err(i);
        }
        let align = (1..=16).rev().find(|a: &usize| a.is_power_of_two() && size % a == 0).expect("1 divides");
        while blob.len() % align != 0 {
            blob.push(0);
        }
        let at = blob.len();
        if at + size > MAX_BLOB_BYTES {
            return Err(i);
        }
        blob.extend_from_slice(&value);
        match kind {
            ArgKind::Allocation { index, offset } => named.push((at as u32, *index, *offset)),
            ArgKind::Value => {}
            ArgKind::DevicePtr => pointers.push(at as u32),
            ArgKind::Scan => pointers.extend((at..at + size).filter(|w| w % 8 == 0 && w + 8 <= at + size).map(|w| w as u32)),
        }
    }
    Ok((blob, pointers, named))
}

#[test]
fn argument_packing_agrees_with_the_model() {
    cases("argument packing", |r| {
        let n = r.below(12) as usize;
        let args: Vec<(Vec<u8>, ArgKind)> = (0..n)
            .map(|_| {
                let size = match r.below(16) {
                    0 => 0,
                    1 => 20_000,
                    2..=5 => 8,
                    _ => 1 + r.below(40) as usize,
                };
                let named = ArgKind::Allocation { index: r.below(7) as u32, offset: r.below(0x100) };
                let kind = r.pick(&[ArgKind::Value, ArgKind::DevicePtr, ArgKind::Scan, named]);
                ((0..size).map(|_| r.next() as u8).collect(), kind)
            })
            .collect();
        let borrowed: Vec<KernelArg<'_>> = args.iter().map(|(v, k)| KernelArg { value: v, kind: *k }).collect();
        match (pack(&borrowed, model_table), pack_model(&args)) {
            (Ok(p), Ok((blob, pointers, named))) => {
                assert_eq!(p.blob, blob, "blob of {n} arguments");
                assert_eq!(p.pointers, pointers, "pointer offsets of {n} arguments");
                let got: Vec<(u32, u32, u64)> = p.named.iter().map(|n| (n.at, n.allocation, n.offset)).collect();
                assert_eq!(got, named, "named pointers of {n} arguments");
            }
            (Err(e), Err(i)) => assert!(e.message.contains(&format!("argument {i}")), "{} (the model refuses argument {i})", e.message),
            (got, want) => panic!("pack gave {:?}, the model {want:?}", got.map(|p| p.blob.len())),
        }
    });
}
