//! Model-based property tests of the pure parts under the C ABI: argument packing, the address
//! → allocation lookup and the patch table, each against a model written the obvious, slow way,
//! over random inputs that favour the edges (overlapping and empty allocations, ranges ending at
//! the top of the address space, removals and reuse of site ids, arguments of every size and
//! kind). The C fuzzer (tests/fuzz) reaches these through the ABI but cannot tell a wrong
//! answer from a right one; these compare every answer.
//!
//! `RCB_PROPERTY_CASES` sets the number of cases per property (default 2000), `RCB_PROPERTY_SEED`
//! the seed; a failure names the case's seed.

use super::allocations::{Allocation, AllocationTable, validate};
use super::args::{ArgKind, KernelArg, MAX_BLOB_BYTES, pack};
use super::patch::{PatchTable, Site, Slot};
use std::collections::HashMap;

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

/// The lookup as the header states it: among the allocations containing `p` (`base <= p <
/// base + size`, or `p == base` when empty), the greatest base, then the lowest index.
fn lookup_model(allocs: &[Allocation], p: u64) -> Option<(u32, u64)> {
    let contains = |a: &Allocation| if a.size == 0 { p == a.base } else { a.base <= p && p - a.base < a.size };
    let mut best: Option<(usize, &Allocation)> = None;
    for (i, a) in allocs.iter().enumerate().filter(|(_, a)| contains(a)) {
        if best.is_none_or(|(_, b)| a.base > b.base) {
            best = Some((i, a));
        }
    }
    best.map(|(i, a)| (i as u32, p - a.base))
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
                    table.rebase(i, moved.base);
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
            assert_eq!(table.lookup(p), lookup_model(&allocs, p), "address {p:#x} in {allocs:x?}");
        }
    });
}

#[test]
fn patch_table_agrees_with_the_model() {
    cases("patch table", |r| {
        let mut t = PatchTable::default();
        let mut allocations = 1 + r.below(6) as u32;
        t.reset(allocations as usize);
        let mut model: HashMap<u32, (u32, Site)> = HashMap::new();
        for _ in 0..60 {
            match r.below(10) {
                0 if r.below(4) == 0 => {
                    allocations = 1 + r.below(6) as u32;
                    t.reset(allocations as usize);
                    model.clear();
                }
                0..=2 if !model.is_empty() => {
                    let ids: Vec<u32> = model.keys().copied().collect();
                    let id = r.pick(&ids);
                    t.remove(id);
                    model.remove(&id);
                }
                _ => {
                    let offset = 8 * r.below(64) as u32;
                    let slot = r.pick(&[Slot::KernelArg(offset), Slot::MemcpyDst, Slot::MemcpySrc, Slot::MemsetDst]);
                    let site = Site { node: r.below(32) as u32, slot, offset: r.below(0x1000) };
                    let alloc = r.below(u64::from(allocations)) as u32;
                    let id = t.add(site.node, site.slot, alloc, site.offset);
                    assert!(model.insert(id, (alloc, site)).is_none(), "id {id} handed out while live");
                }
            }
            if r.below(3) == 0 {
                assert_eq!(t.len(), model.len());
                for a in 0..allocations {
                    let mut got: Vec<Site> = t.of_allocation(a).to_vec();
                    let mut want: Vec<Site> = model.values().filter(|(m, _)| *m == a).map(|&(_, s)| s).collect();
                    let key = |s: &Site| (s.node, format!("{:?}", s.slot), s.offset);
                    got.sort_by_key(key);
                    want.sort_by_key(key);
                    assert_eq!(got, want, "sites of allocation {a}");
                }
            }
        }
    });
}

/// The packing rule of the header, computed argument by argument.
fn pack_model(args: &[(Vec<u8>, ArgKind)]) -> Result<(Vec<u8>, Vec<u32>), usize> {
    let mut blob = Vec::new();
    let mut pointers = Vec::new();
    for (i, (value, kind)) in args.iter().enumerate() {
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
        blob.extend_from_slice(value);
        match kind {
            ArgKind::Value => {}
            ArgKind::DevicePtr => pointers.push(at as u32),
            ArgKind::Scan => pointers.extend((at..at + size).filter(|w| w % 8 == 0 && w + 8 <= at + size).map(|w| w as u32)),
        }
    }
    Ok((blob, pointers))
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
                let kind = r.pick(&[ArgKind::Value, ArgKind::DevicePtr, ArgKind::Scan]);
                ((0..size).map(|_| r.next() as u8).collect(), kind)
            })
            .collect();
        let borrowed: Vec<KernelArg<'_>> = args.iter().map(|(v, k)| KernelArg { value: v, kind: *k }).collect();
        match (pack(&borrowed), pack_model(&args)) {
            (Ok(p), Ok((blob, pointers))) => {
                assert_eq!(p.blob, blob, "blob of {n} arguments");
                assert_eq!(p.pointers, pointers, "pointer offsets of {n} arguments");
            }
            (Err(e), Err(i)) => assert!(e.message.contains(&format!("argument {i}")), "{} (the model refuses argument {i})", e.message),
            (got, want) => panic!("pack gave {:?}, the model {want:?}", got.map(|p| p.blob.len())),
        }
    });
}
