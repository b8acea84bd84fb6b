//! Property: for random small graphs and random moves, updating addresses in place gives the
//! same memory as re-recording from scratch at the new addresses, whether the update is given
//! the whole new table or only the moved allocations.
//!
//! `RCB_PROPERTY_CASES` sets the number of cases (default 2000); `RCB_PROPERTY_SEED` the seed.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use common::args;
use rocm_cmdbuf::ffi::rcb_node;

/// Elements per buffer; each operation covers `SPAN` of them at offset 0 or `SPAN`.
const LEN: usize = 32;
const SPAN: usize = 16;
const BYTES: u64 = (LEN * 4) as u64;

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
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// An address as (buffer, element offset), resolved against a set of bases when recorded.
type Slice = (usize, usize);

#[derive(Clone, Copy, Debug)]
enum Op {
    Fill { dst: Slice, value: u32 },
    Axpy { y: Slice, x: Slice, a: f32 },
    Add { out: Slice, x: Slice, y: Slice },
    Copy { dst: Slice, src: Slice },
    Set { dst: Slice, pattern: u32 },
}

struct Case {
    buffers: usize,
    ops: Vec<(Op, Vec<usize>)>,
    initial: Vec<Vec<f32>>,
    moved: Vec<bool>,
}

fn random_case(rng: &mut XorShift) -> Case {
    let buffers = 3 + rng.below(3);
    let slice = |rng: &mut XorShift| (rng.below(buffers), SPAN * rng.below(2));
    let mut ops = Vec::new();
    for i in 0..2 + rng.below(5) {
        let op = match rng.below(5) {
            0 => Op::Fill { dst: slice(rng), value: (rng.below(8) as f32).to_bits() },
            1 => Op::Axpy { y: slice(rng), x: slice(rng), a: (1 + rng.below(3)) as f32 },
            2 => Op::Add { out: slice(rng), x: slice(rng), y: slice(rng) },
            3 => Op::Copy { dst: slice(rng), src: slice(rng) },
            _ => Op::Set { dst: slice(rng), pattern: (rng.below(8) as f32).to_bits() },
        };
        // A chain (so results do not depend on scheduling) plus random extra edges.
        let mut deps: Vec<usize> = (0..i.saturating_sub(1)).filter(|_| rng.below(3) == 0).collect();
        if i > 0 {
            deps.push(i - 1);
        }
        ops.push((op, deps));
    }
    let initial = (0..buffers).map(|_| (0..LEN).map(|_| rng.below(8) as f32).collect()).collect();
    let mut moved: Vec<bool> = (0..buffers).map(|_| rng.below(2) == 0).collect();
    if !moved.contains(&true) {
        moved[rng.below(buffers)] = true;
    }
    Case { buffers, ops, initial, moved }
}

fn record(gpu: &Gpu, cb: &Cb, case: &Case, bases: &[u64]) {
    let at = |(b, off): Slice| bases[b] + (off * 4) as u64;
    let n = SPAN as u64;
    let k = &gpu.k;
    let mut nodes: Vec<rcb_node> = Vec::new();
    for (op, deps) in &case.ops {
        let deps: Vec<rcb_node> = deps.iter().map(|&d| nodes[d]).collect();
        let node = match *op {
            Op::Fill { dst, value } => cb.kernel(&deps, k.fill_u32, n, &args::fill(at(dst), value, n)),
            Op::Axpy { y, x, a } => cb.kernel(&deps, k.axpy_f32, n, &args::axpy(at(y), at(x), a, n)),
            Op::Add { out, x, y } => cb.kernel(&deps, k.add_f32, n, &args::add(at(out), at(x), at(y), n)),
            Op::Copy { dst, src } => cb.memcpy(&deps, at(dst), at(src), n * 4),
            Op::Set { dst, pattern } => cb.memset(&deps, at(dst), pattern, 4, n),
        };
        nodes.push(node);
    }
}

fn upload_initial(gpu: &Gpu, case: &Case, bases: &[u64]) {
    for (b, data) in bases.iter().zip(&case.initial) {
        gpu.write(*b, data);
    }
}

fn results(gpu: &Gpu, bases: &[u64]) -> Vec<Vec<f32>> {
    bases.iter().map(|&b| gpu.read(b, LEN)).collect()
}

fn table_of(bases: &[u64]) -> Vec<(u64, u64)> {
    bases.iter().map(|&b| (b, BYTES)).collect()
}

#[test]
fn updating_in_place_equals_recording_from_scratch() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let cases: usize = std::env::var("RCB_PROPERTY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let seed: u64 = std::env::var("RCB_PROPERTY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x9e37_79b9_7f4a_7c15);
    let mut rng = XorShift(seed);
    for i in 0..cases {
        let case = random_case(&mut rng);
        let malloc = || gpu.rt.malloc(0, BYTES as usize).unwrap();
        let old: Vec<u64> = (0..case.buffers).map(|_| malloc()).collect();
        let new: Vec<u64> = old.iter().zip(&case.moved).map(|(&b, &m)| if m { malloc() } else { b }).collect();

        let in_place = Cb::primary();
        in_place.set_allocs(&table_of(&old));
        record(&gpu, &in_place, &case, &old);
        in_place.finalize();
        upload_initial(&gpu, &case, &old);
        in_place.launch(&gpu);
        let report = if i % 2 == 0 {
            in_place.update_allocs(&table_of(&new))
        } else {
            // Only what moved, in a random order, sometimes with an unmoved one named too.
            let mut moves: Vec<(u64, u64)> =
                (0..case.buffers).filter(|&b| case.moved[b] || rng.below(4) == 0).map(|b| (b as u64, new[b])).collect();
            for k in (1..moves.len()).rev() {
                moves.swap(k, rng.below(k + 1));
            }
            in_place.move_allocs(&moves)
        };
        assert_eq!(report.needs_rerecord, 0, "case {i}");
        assert_eq!(report.moved_allocations as usize, case.moved.iter().filter(|&&m| m).count(), "case {i}");
        let sentinel = vec![-1.0f32; LEN];
        for (b, _) in old.iter().zip(&case.moved).filter(|(_, m)| **m) {
            gpu.write(*b, &sentinel);
        }
        upload_initial(&gpu, &case, &new);
        in_place.launch(&gpu);
        let updated = results(&gpu, &new);
        for (b, _) in old.iter().zip(&case.moved).filter(|(_, m)| **m) {
            assert_eq!(gpu.read(*b, LEN), sentinel, "case {i}: an old buffer was written: {:?}", case.ops);
        }

        let scratch = Cb::primary();
        scratch.set_allocs(&table_of(&new));
        record(&gpu, &scratch, &case, &new);
        scratch.finalize();
        upload_initial(&gpu, &case, &new);
        scratch.launch(&gpu);
        assert_eq!(updated, results(&gpu, &new), "case {i}: {:?} moved {:?}", case.ops, case.moved);

        let mut all = old.clone();
        all.extend(new.iter().zip(&case.moved).filter(|(_, m)| **m).map(|(b, _)| *b));
        for b in all {
            gpu.rt.free(b).unwrap();
        }
    }
}
