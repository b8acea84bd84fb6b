//! The command buffer through its C ABI: graphs of the test kernels, in-place address updates,
//! fault injection, quirks, and every error path. Runs on the software GPU by default and on a
//! real GPU with `RCB_BACKEND=cuda` (hipsim-only checks are skipped there).

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use common::{args, fails, last_error, ok, pack};
use rocm_cmdbuf::ffi::*;
use std::ptr::{null, null_mut};

/// fill(x = 1) → axpy(y += 2x) → add(out = x + y) → memcpy(d = out), over four allocations.
struct Chain {
    y: u64,
    out: u64,
    d: u64,
    nodes: [rcb_node; 4],
}

fn record_chain(gpu: &Gpu, cb: &Cb, x: u64, y: u64, out: u64, d: u64) -> Chain {
    let n = N as u64;
    let k = &gpu.k;
    let n0 = cb.kernel(&[], k.fill_u32, n, &args::fill(x, 1.0f32.to_bits(), n));
    let n1 = cb.kernel(&[n0], k.axpy_f32, n, &args::axpy(y, x, 2.0, n));
    let n2 = cb.kernel(&[n1], k.add_f32, n, &args::add(out, x, y, n));
    let n3 = cb.memcpy(&[n2], d, out, BYTES);
    Chain { y, out, d, nodes: [n0, n1, n2, n3] }
}

fn chain_buffers(gpu: &Gpu) -> (u64, u64, u64, u64) {
    (gpu.upload(&[0.0; N]), gpu.upload(&iota(0.0)), gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]))
}

/// A primary command buffer holding the chain over fresh buffers, finalized (not launched).
fn finalized_chain(gpu: &Gpu) -> (Cb, (u64, u64, u64, u64)) {
    let (x, y, out, d) = chain_buffers(gpu);
    let cb = Cb::primary();
    cb.set_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)]);
    record_chain(gpu, &cb, x, y, out, d);
    cb.finalize();
    (cb, (x, y, out, d))
}

/// Records the chain, launches it, moves x and out, updates in place with `update` (given the
/// new table), launches again and checks the results at the new addresses and the old
/// buffers untouched.
fn chain_moves_in_place(gpu: &Gpu, update: impl Fn(&Cb, &[(u64, u64)]) -> rcb_update_report) {
    let (x, y, out, d) = chain_buffers(gpu);
    let cb = Cb::primary();
    cb.set_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)]);
    let c = record_chain(gpu, &cb, x, y, out, d);
    // x: fill, axpy, add (3); y: axpy, add (2); out: add, memcpy src (2); d: memcpy dst (1).
    assert_eq!(cb.sites(), 8);
    cb.finalize();
    cb.launch(gpu);
    assert_eq!(gpu.read(c.y, N), iota(2.0));
    assert_eq!(gpu.read(c.out, N), iota(3.0));
    assert_eq!(gpu.read(c.d, N), iota(3.0));

    let (x2, out2) = (gpu.moved_copy(x, BYTES as usize), gpu.moved_copy(out, BYTES as usize));
    gpu.write(x2, &[0.0; N]);
    gpu.write(x, &[-7.0; N]);
    gpu.write(out, &[-9.0; N]);
    let report = update(&cb, &[(x2, BYTES), (y, BYTES), (out2, BYTES), (d, BYTES)]);
    assert_eq!(report.moved_allocations, 2);
    assert_eq!(report.patched_sites, 5);
    assert_eq!(report.updated_nodes, 4);
    assert_eq!(report.needs_rerecord, 0);
    cb.launch(gpu);
    assert_eq!(gpu.read(x2, N), vec![1.0; N], "fill wrote at the new address");
    assert_eq!(gpu.read(y, N), iota(4.0));
    assert_eq!(gpu.read(out2, N), iota(5.0));
    assert_eq!(gpu.read(d, N), iota(5.0), "memcpy read from the new address");
    assert_eq!(gpu.read(x, N), vec![-7.0; N], "old x untouched");
    assert_eq!(gpu.read(out, N), vec![-9.0; N], "old out untouched");
    for p in [x, y, out, d, x2, out2] {
        gpu.rt.free(p).unwrap();
    }
}

#[test]
fn a_chain_runs_and_follows_moved_allocations() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    chain_moves_in_place(&gpu, Cb::update_allocs);
}

/// `rcb_cmdbuf_memory_use` counts the argument bytes exactly and parts that add up to its
/// total, more for more nodes, in any state, and follows the rule for sized structs.
#[test]
fn memory_use_counts_the_arguments_and_parts_that_add_up() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let buffers: Vec<u64> = (0..64).map(|_| gpu.upload(&[0.0; N])).collect();
    let allocs: Vec<(u64, u64)> = buffers.iter().map(|&x| (x, BYTES)).collect();
    let record = |n: usize| {
        let cb = Cb::primary();
        cb.set_allocs(&allocs[..n]);
        for (i, &x) in buffers[..n].iter().enumerate() {
            cb.kernel(&[], gpu.k.fill_u32, N as u64, &args::fill(x, i as u32, N as u64));
        }
        cb
    };
    // fill(u32 *, u32, u64) packs to 24 bytes: 8, 4, 4 of padding, 8.
    const FILL_BYTES: u64 = 24;
    let parts = |m: &rcb_memory_use| {
        m.argument_copies + m.node_records + m.node_lists + m.site_lists + m.allocation_table + m.update_scratch + m.other
    };
    let small = record(8);
    let recording = small.memory();
    assert_eq!(recording.argument_bytes, 8 * FILL_BYTES, "{recording:?}");
    small.finalize();
    let m = small.memory();
    assert_eq!((m.struct_size as usize, m.reserved), (size_of::<rcb_memory_use>(), 0));
    assert_eq!(m.argument_bytes, 8 * FILL_BYTES, "{m:?}");
    assert_eq!(m.total_bytes, parts(&m), "{m:?}");
    // Each node's copy is as long as its arguments.
    assert!(m.argument_copies == m.argument_bytes && m.node_records > 0 && m.site_lists > 0, "{m:?}");
    assert!(m.allocation_table >= 8 * size_of::<rcb_allocation>() as u64 && m.heap_blocks >= 8, "{m:?}");
    let large = record(64);
    large.finalize();
    let l = large.memory();
    assert_eq!((l.argument_bytes, l.total_bytes), (64 * FILL_BYTES, parts(&l)), "{l:?}");
    // Each more node keeps at least its arguments, its allocation's entry and its one site.
    assert!(l.total_bytes - m.total_bytes >= 56 * (FILL_BYTES + 16 + 8), "8 nodes {m:?}, 64 nodes {l:?}");
    // Finalize made the room a first update needs: moving every allocation (8, within the 64
    // finalize makes room for) grows nothing.
    let moves: Vec<(u64, u64)> = (0..8).map(|i| (i, gpu.upload(&[0.0; N]))).collect();
    let report = small.move_allocs(&moves);
    assert_eq!((report.moved_allocations, report.updated_nodes), (8, 8));
    let updated = small.memory();
    assert_eq!((updated.update_scratch, updated.total_bytes), (m.update_scratch, m.total_bytes), "{updated:?}, at finalize {m:?}");

    // A newer header's larger struct: this library's bytes written, told in struct_size.
    let mut big = [0xAAu8; 128];
    big[..4].copy_from_slice(&128u32.to_ne_bytes());
    ok(unsafe { rcb_cmdbuf_memory_use(small.0, big.as_mut_ptr().cast()) });
    assert_eq!(u32::from_ne_bytes(big[..4].try_into().unwrap()) as usize, size_of::<rcb_memory_use>());
    assert_eq!(u64::from_ne_bytes(big[8..16].try_into().unwrap()), m.total_bytes);
    assert!(big[size_of::<rcb_memory_use>()..].iter().all(|&b| b == 0xAA), "nothing past the struct");
    let mut short = rcb_memory_use { struct_size: 16, ..rcb_memory_use::default() };
    fails(unsafe { rcb_cmdbuf_memory_use(small.0, &mut short) }, RCB_STATUS_INVALID_ARGUMENT, "struct_size");
    assert_eq!((short.struct_size, short.total_bytes), (16, 0), "nothing written");
    fails(unsafe { rcb_cmdbuf_memory_use(small.0, null_mut()) }, RCB_STATUS_NULL_ARGUMENT, "out");
    let mut m = rcb_memory_use::default();
    fails(unsafe { rcb_cmdbuf_memory_use(0x10 as *const rcb_cmdbuf, &mut m) }, RCB_STATUS_INVALID_HANDLE, "rcb_cmdbuf");
}

/// Every finalize, a re-record's too, gives back the room recording kept: the address lookup's
/// index (which the re-record rebuilt) and the spare capacity of the node records and sites.
#[test]
fn a_re_record_keeps_no_more_memory_than_the_first_record() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let buffers: Vec<u64> = (0..40).map(|_| gpu.upload(&[0.0; N])).collect();
    let allocs: Vec<(u64, u64)> = buffers.iter().map(|&x| (x, BYTES)).collect();
    let cb = Cb::primary();
    cb.set_allocs(&allocs);
    for (i, &x) in buffers.iter().enumerate() {
        cb.kernel(&[], gpu.k.fill_u32, N as u64, &args::fill(x, i as u32, N as u64));
    }
    cb.finalize();
    let first = cb.memory();
    for round in 1..=2 {
        ok(unsafe { rcb_cmdbuf_begin_update(cb.0) });
        // Re-recording starts with the table: every recorded address is looked up again.
        cb.set_allocs(&allocs);
        cb.finalize();
        let again = cb.memory();
        let parts = |m: &rcb_memory_use| (m.allocation_table, m.site_lists, m.node_records, m.node_lists, m.argument_copies);
        assert_eq!(parts(&again), parts(&first), "after re-record {round}: {again:?}, first {first:?}");
        assert!(again.total_bytes <= first.total_bytes, "after re-record {round}: {again:?}, first {first:?}");
    }
    let mut sites = 0;
    ok(unsafe { rcb_cmdbuf_site_count(cb.0, &mut sites) });
    assert_eq!(sites, buffers.len(), "each kernel's pointer found again");
    cb.launch(&gpu);
    for (i, &x) in buffers.iter().enumerate() {
        assert_eq!(common::download_u32(gpu.rt, x, N), vec![i as u32; N]);
    }
}

#[test]
fn naming_only_the_moved_allocations_moves_them_like_a_whole_table() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    // Out of order, with y named at its own base (not counted).
    chain_moves_in_place(&gpu, |cb, t| cb.move_allocs(&[(2, t[2].0), (1, t[1].0), (0, t[0].0)]));
}

#[test]
fn bad_moves_fail_naming_the_entry_and_change_nothing() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let (x, y, out, d) = chain_buffers(&gpu);
    let cb = Cb::primary();
    cb.set_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)]);
    record_chain(&gpu, &cb, x, y, out, d);
    let mut report = rcb_update_report::default();
    fails(unsafe { rcb_cmdbuf_move_allocations(cb.0, null(), 0, &mut report) }, RCB_STATUS_INVALID_STATE, "recording");
    cb.finalize();
    let sim = common::hipsim("a refused move pushes no node (the runtime's call counters)");
    let pushes = sim.as_ref().map(|s| s.call_count("hipGraphExecKernelNodeSetParams"));

    let x2 = gpu.moved_copy(x, BYTES as usize);
    let cases: [(&[(u64, u64)], &str); 6] = [
        (&[(0, x2), (4, x2)], "moves[1].index 4 is outside the table of 4 allocation(s)"),
        (&[(0, x2), (u64::MAX, x2)], "moves[1].index 18446744073709551615"),
        (&[(3, d), (0, x2), (3, x2)], "allocation 3 is moved twice"),
        // Repeats in a list otherwise in ascending order (the one-pass path).
        (&[(0, x2), (0, x2)], "allocation 0 is moved twice"),
        (&[(0, x2), (1, y), (1, x2)], "allocation 1 is moved twice"),
        (&[(0, x2), (2, u64::MAX - 8)], "moves[1]"),
    ];
    for (moves, needle) in cases {
        fails(cb.try_move_allocs(moves).map(|_| RCB_OK).unwrap_or_else(|s| s), RCB_STATUS_INVALID_ARGUMENT, needle);
    }
    let one = [rcb_allocation_move { index: 0, base: x2 }];
    fails(unsafe { rcb_cmdbuf_move_allocations(cb.0, null(), 1, &mut report) }, RCB_STATUS_NULL_ARGUMENT, "`moves`");
    fails(unsafe { rcb_cmdbuf_move_allocations(cb.0, one.as_ptr(), 1, null_mut()) }, RCB_STATUS_NULL_ARGUMENT, "`report`");
    fails(unsafe { rcb_cmdbuf_move_allocations(null_mut(), one.as_ptr(), 1, &mut report) }, RCB_STATUS_NULL_ARGUMENT, "`cb`");
    if let (Some(s), Some(before)) = (&sim, pushes) {
        assert_eq!(s.call_count("hipGraphExecKernelNodeSetParams"), before, "a refused move pushed nothing");
    }
    cb.launch(&gpu);
    assert_eq!(gpu.read(x, N), vec![1.0; N], "still recorded at the old address");
    assert_eq!(gpu.read(x2, N), vec![0.0; N]);

    assert_eq!(cb.move_allocs(&[]), rcb_update_report::default(), "nothing named, nothing moved");
    let report = cb.move_allocs(&[(0, x2)]);
    assert_eq!((report.moved_allocations, report.patched_sites, report.updated_nodes, report.needs_rerecord), (1, 3, 3, 0));
    gpu.write(x2, &[0.0; N]);
    cb.launch(&gpu);
    assert_eq!(gpu.read(x2, N), vec![1.0; N], "the valid move took effect");
    assert_eq!(cb.update_allocs(&[(x2, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)]).moved_allocations, 0, "the table follows the moves");
}

#[test]
fn a_diamond_over_interior_pointers_follows_its_allocation() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let n = N as u64;
    let k = &gpu.k;
    // Apart: out's base, were it ys's end, could be either's.
    let x = gpu.upload_apart(&[0.0; N]);
    // y1 and y2 are two halves of one allocation; out gets y1 + y2.
    let ys = gpu.upload_apart(&[iota(0.0), iota(100.0)].concat());
    let out = gpu.upload_apart(&[0.0; N]);
    let (y1, y2) = (ys, ys + BYTES);
    let cb = Cb::primary();
    cb.set_allocs(&[(x, BYTES), (ys, 2 * BYTES), (out, BYTES)]);
    let top = cb.kernel(&[], k.fill_u32, n, &args::fill(x, 1.0f32.to_bits(), n));
    let left = cb.kernel(&[top], k.axpy_f32, n, &args::axpy(y1, x, 3.0, n));
    let right = cb.kernel(&[top], k.axpy_f32, n, &args::axpy(y2, x, 5.0, n));
    cb.kernel(&[left, right], k.add_f32, n, &args::add(out, y1, y2, n));
    cb.finalize();
    cb.launch(&gpu);
    let expect: Vec<f32> = (0..N).map(|i| (i as f32 + 3.0) + (i as f32 + 105.0)).collect();
    assert_eq!(gpu.read(out, N), expect);

    let ys2 = gpu.moved_copy(ys, 2 * BYTES as usize);
    gpu.write(ys, &[-1.0; 2 * N]);
    let report = cb.update_allocs(&[(x, BYTES), (ys2, 2 * BYTES), (out, BYTES)]);
    assert_eq!((report.moved_allocations, report.patched_sites, report.updated_nodes), (1, 4, 3));
    cb.launch(&gpu);
    let expect: Vec<f32> = (0..N).map(|i| (i as f32 + 6.0) + (i as f32 + 110.0)).collect();
    assert_eq!(gpu.read(out, N), expect);
    assert_eq!(gpu.read(ys2 + BYTES, N), iota(110.0), "the interior pointer kept its offset");
    assert_eq!(gpu.read(ys, 2 * N), vec![-1.0; 2 * N], "old buffer untouched");
}

#[test]
fn memset_and_memcpy_nodes_are_patched() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let a = gpu.upload(&[0.0; N]);
    let b = gpu.upload(&[0.0; N]);
    let cb = Cb::primary();
    cb.set_allocs(&[(a, BYTES), (b, BYTES)]);
    // a[0..16) = 0xab bytes, a[16..32) = 0x1234 halves, a[32..64) = 0xdeadbeef words (interior dsts).
    let s1 = cb.memset(&[], a, 0xab, 1, 16);
    let s2 = cb.memset(&[s1], a + 16, 0x1234, 2, 8);
    let s4 = cb.memset(&[s2], a + 32, 0xdead_beef, 4, 8);
    // b[64..128) = a[0..64)
    cb.memcpy(&[s4], b + 64, a, 64);
    assert_eq!(cb.sites(), 5);
    cb.finalize();
    let mut expect = vec![0xabu8; 16];
    expect.extend([0x34, 0x12].repeat(8));
    expect.extend(0xdead_beefu32.to_le_bytes().repeat(8));
    cb.launch(&gpu);
    assert_eq!(gpu.read_bytes(b + 64, 64), expect);

    let a2 = gpu.rt.malloc(0, BYTES as usize).unwrap();
    let b2 = gpu.rt.malloc(0, BYTES as usize).unwrap();
    gpu.rt.direct().copy_to_device(a2, &[0; BYTES as usize]).unwrap();
    gpu.rt.direct().copy_to_device(b2, &[0; BYTES as usize]).unwrap();
    gpu.rt.direct().copy_to_device(a, &[0x5a; BYTES as usize]).unwrap();
    gpu.rt.direct().copy_to_device(b, &[0x5a; BYTES as usize]).unwrap();
    let report = cb.update_allocs(&[(a2, BYTES), (b2, BYTES)]);
    assert_eq!((report.moved_allocations, report.patched_sites, report.updated_nodes), (2, 5, 4));
    cb.launch(&gpu);
    assert_eq!(gpu.read_bytes(b2 + 64, 64), expect);
    assert_eq!(gpu.read_bytes(a2, 64), expect);
    assert_eq!(gpu.read_bytes(a, BYTES as usize), vec![0x5a; BYTES as usize], "old buffers untouched");
    assert_eq!(gpu.read_bytes(b, BYTES as usize), vec![0x5a; BYTES as usize]);
}

#[test]
fn a_value_argument_equal_to_an_old_base_is_not_rewritten() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let y = gpu.upload(&[0.0; 2 * N]);
    let x = gpu.upload(&[1.0; 2 * N]);
    // Allocation 2 is bookkeeping only: its base (64) equals the element count, a plain value.
    let fake_base = N as u64;
    let cb = Cb::primary();
    cb.set_allocs(&[(y, 2 * BYTES), (x, 2 * BYTES), (fake_base, 16)]);
    cb.kernel(&[], gpu.k.axpy_f32, N as u64, &args::axpy(y, x, 1.0, fake_base));
    assert_eq!(cb.sites(), 2, "only the two pointers are sites");
    cb.finalize();
    let report = cb.update_allocs(&[(y, 2 * BYTES), (x, 2 * BYTES), (2 * fake_base, 16)]);
    assert_eq!((report.moved_allocations, report.patched_sites, report.updated_nodes), (1, 0, 0));
    cb.launch(&gpu);
    let got = gpu.read(y, 2 * N);
    assert_eq!(&got[..N], &[1.0; N][..]);
    assert_eq!(&got[N..], &[0.0; N][..], "n stayed 64: a rewritten n (128) would have written here");
}

#[test]
fn each_touched_node_is_pushed_once_and_nothing_when_nothing_moved() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let (x, y, out, d) = chain_buffers(&gpu);
    let cb = Cb::primary();
    let allocs = [(x, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)];
    cb.set_allocs(&allocs);
    record_chain(&gpu, &cb, x, y, out, d);
    cb.finalize();
    let instantiations = sim.call_count("hipGraphInstantiate");

    let before = sim.call_count("hipGraphExecKernelNodeSetParams");
    let memcpy_before = sim.call_count("hipGraphExecMemcpyNodeSetParams1D");
    let report = cb.update_allocs(&allocs);
    assert_eq!((report.moved_allocations, report.patched_sites, report.updated_nodes), (0, 0, 0));
    assert_eq!(sim.call_count("hipGraphExecKernelNodeSetParams"), before);

    // x moves: three kernel nodes point into it (fill once, axpy once, add once).
    let x2 = gpu.moved_copy(x, BYTES as usize);
    let report = cb.update_allocs(&[(x2, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)]);
    assert_eq!((report.patched_sites, report.updated_nodes), (3, 3));
    assert_eq!(sim.call_count("hipGraphExecKernelNodeSetParams") - before, 3);
    assert_eq!(sim.call_count("hipGraphExecMemcpyNodeSetParams1D"), memcpy_before);

    cb.begin_update();
    cb.finalize();
    assert_eq!(sim.call_count("hipGraphInstantiate"), instantiations, "a finalize after an update does not re-instantiate");
}

#[test]
fn moves_and_size_changes_are_found_anywhere_in_a_long_table() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    // The chain's four buffers among 60 entries, at indices on both sides of the boundaries
    // where the table is compared in chunks; the other entries are never referenced.
    let (x, y, out, d) = chain_buffers(&gpu);
    let at = [15usize, 16, 33, 59];
    let filler: Vec<u64> = (0..60).map(|i| 0x7000_0000_0000 + i as u64 * 0x1000).collect();
    let table_with = |bases: [u64; 4], sizes: [u64; 4]| -> Vec<(u64, u64)> {
        let mut t: Vec<(u64, u64)> = filler.iter().map(|&b| (b, 64)).collect();
        for k in 0..4 {
            t[at[k]] = (bases[k], sizes[k]);
        }
        t
    };
    let cb = Cb::primary();
    cb.set_allocs(&table_with([x, y, out, d], [BYTES; 4]));
    record_chain(&gpu, &cb, x, y, out, d);
    cb.finalize();
    cb.launch(&gpu);

    // A size change in the last chunk after a move in the first: nothing changes.
    let (x2, d2) = (gpu.moved_copy(x, BYTES as usize), gpu.moved_copy(d, BYTES as usize));
    let refused = cb.update_allocs(&table_with([x2, y, out, d2], [BYTES, BYTES, BYTES, 2 * BYTES]));
    assert_eq!(refused, rcb_update_report { needs_rerecord: 1, ..Default::default() });
    gpu.write(x2, &[0.0; N]);
    gpu.write(d2, &[0.0; N]);
    cb.launch(&gpu);
    assert_eq!(gpu.read(x2, N), vec![0.0; N], "the refused update moved nothing");

    // Moves in the first and the last chunk, the entries between unchanged.
    gpu.write(x, &[-7.0; N]);
    gpu.write(d, &[-9.0; N]);
    let report = cb.update_allocs(&table_with([x2, y, out, d2], [BYTES; 4]));
    assert_eq!((report.moved_allocations, report.patched_sites, report.needs_rerecord), (2, 4, 0));
    cb.launch(&gpu);
    assert_eq!(gpu.read(x2, N), vec![1.0; N], "fill wrote at the new x");
    assert_eq!(gpu.read(d2, N), gpu.read(out, N), "memcpy wrote at the new d");
    assert_eq!(gpu.read(x, N), vec![-7.0; N], "old x untouched");
    assert_eq!(gpu.read(d, N), vec![-9.0; N], "old d untouched");
    for p in [x, y, out, d, x2, d2] {
        gpu.rt.free(p).unwrap();
    }
}

#[test]
fn a_changed_size_or_count_needs_a_rerecord_and_changes_nothing() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let (cb, (x, y, out, d)) = finalized_chain(&gpu);
    let x2 = gpu.moved_copy(x, BYTES as usize);
    let grown = cb.update_allocs(&[(x2, BYTES), (y, BYTES), (out, 2 * BYTES), (d, BYTES)]);
    assert_eq!(grown, rcb_update_report { needs_rerecord: 1, ..Default::default() });
    let fewer = cb.update_allocs(&[(x2, BYTES), (y, BYTES), (out, BYTES)]);
    assert_eq!(fewer, rcb_update_report { needs_rerecord: 1, ..Default::default() });
    cb.launch(&gpu);
    assert_eq!(gpu.read(x, N), vec![1.0; N], "still recorded at the old address");
    assert_eq!(gpu.read(x2, N), vec![0.0; N]);
    assert_eq!(gpu.read(out, N), iota(3.0));
}

#[test]
fn a_failing_push_needs_a_rerecord_and_the_rerecord_is_correct() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let n = N as u64;
    let (x, y, out, d) = chain_buffers(&gpu);
    let cb = Cb::primary();
    cb.set_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)]);
    let c = record_chain(&gpu, &cb, x, y, out, d);
    cb.finalize();

    let (x2, y2, out2) = (gpu.moved_copy(x, BYTES as usize), gpu.moved_copy(y, BYTES as usize), gpu.moved_copy(out, BYTES as usize));
    let moved = [(x2, BYTES), (y2, BYTES), (out2, BYTES), (d, BYTES)];
    sim.set_faults("hipGraphExecKernelNodeSetParams:3");
    let report = cb.update_allocs(&moved);
    sim.set_faults("");
    assert_eq!(report.needs_rerecord, 1);
    assert_eq!(report.moved_allocations, 3);
    assert_eq!(report.updated_nodes, 2, "two kernel nodes reached the exec before the third push failed");
    fails(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "needs_rerecord");

    // The full re-record of the C API contract.
    cb.begin_update();
    cb.set_allocs(&moved);
    let k = &gpu.k;
    let [n0, n1, n2, n3] = c.nodes;
    cb.update_kernel(n0, k.fill_u32, n, &args::fill(x2, 1.0f32.to_bits(), n));
    cb.update_kernel(n1, k.axpy_f32, n, &args::axpy(y2, x2, 2.0, n));
    cb.update_kernel(n2, k.add_f32, n, &args::add(out2, x2, y2, n));
    ok(unsafe { rcb_cmdbuf_update_memcpy_d2d(cb.0, n3, d, out2, BYTES) });
    cb.finalize();
    gpu.write(x, &[-7.0; N]);
    gpu.write(y, &[-7.0; N]);
    cb.launch(&gpu);
    assert_eq!(gpu.read(y2, N), iota(2.0));
    assert_eq!(gpu.read(out2, N), iota(3.0));
    assert_eq!(gpu.read(d, N), iota(3.0));
    assert_eq!(gpu.read(y, N), vec![-7.0; N]);

    // After the re-record, in-place updates work again.
    let y3 = gpu.moved_copy(y2, BYTES as usize);
    let report = cb.update_allocs(&[(x2, BYTES), (y3, BYTES), (out2, BYTES), (d, BYTES)]);
    assert_eq!((report.needs_rerecord, report.patched_sites), (0, 2));
    cb.launch(&gpu);
    assert_eq!(gpu.read(y3, N), iota(4.0));
}

#[test]
fn a_failed_push_is_repaired_by_the_next_finalize() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let (cb, (x, y, out, d)) = finalized_chain(&gpu);
    let x2 = gpu.moved_copy(x, BYTES as usize);
    sim.set_faults("hipGraphExecKernelNodeSetParams:1");
    let report = cb.update_allocs(&[(x2, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)]);
    sim.set_faults("");
    assert_eq!((report.needs_rerecord, report.updated_nodes), (1, 0));
    cb.begin_update();
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(gpu.read(x2, N), vec![1.0; N]);
    assert_eq!(gpu.read(out, N), iota(3.0));
}

#[test]
fn a_push_failing_during_moves_is_finished_by_the_next_moves() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let (cb, (x, _, out, _)) = finalized_chain(&gpu);
    let x2 = gpu.moved_copy(x, BYTES as usize);
    // x has three kernel sites: the second push fails.
    sim.set_faults("hipGraphExecKernelNodeSetParams:2");
    let report = cb.move_allocs(&[(0, x2)]);
    sim.set_faults("");
    assert_eq!((report.moved_allocations, report.needs_rerecord, report.updated_nodes), (1, 1, 1));
    fails(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "stale parameters");
    // Nothing more moved: the two nodes left behind are pushed all the same.
    let report = cb.move_allocs(&[]);
    assert_eq!((report.moved_allocations, report.needs_rerecord, report.updated_nodes), (0, 0, 2));
    gpu.write(x2, &[0.0; N]);
    cb.launch(&gpu);
    assert_eq!(gpu.read(x2, N), vec![1.0; N]);
    assert_eq!(gpu.read(out, N), iota(3.0), "out = x2 + y = 1 + (i + 2): the add read x at its new address");
}

/// Kernels in [`kernels_cut_by_copies`], and the kernels each of its copies follows.
const PUSH_RUN_KERNELS: usize = 70;
const PUSH_RUN_COPIES_AFTER: [usize; 2] = [9, 44];

/// Kernels `0..PUSH_RUN_KERNELS` computing `out_i = x + y` into allocations of their own, with a
/// copy `d_j = x` after each kernel of `PUSH_RUN_COPIES_AFTER` (cutting the runs of kernel nodes
/// an update pushes at once), every node touched by a move of `x`: records them into `cb` with
/// their table, and returns `x`, the outputs and the copies' destinations.
fn kernels_cut_by_copies(gpu: &Gpu, cb: &Cb) -> (u64, Vec<u64>, Vec<u64>) {
    let (x, y) = (gpu.upload(&iota(0.0)), gpu.upload(&iota(100.0)));
    let outs: Vec<u64> = (0..PUSH_RUN_KERNELS).map(|_| gpu.upload(&[0.0; N])).collect();
    let ds: Vec<u64> = PUSH_RUN_COPIES_AFTER.iter().map(|_| gpu.upload(&[0.0; N])).collect();
    let mut allocs = vec![(x, BYTES), (y, BYTES)];
    allocs.extend(outs.iter().chain(&ds).map(|&a| (a, BYTES)));
    cb.set_allocs(&allocs);
    let mut copies = ds.iter();
    for (i, &out) in outs.iter().enumerate() {
        cb.kernel(&[], gpu.k.add_f32, N as u64, &args::add(out, x, y, N as u64));
        if PUSH_RUN_COPIES_AFTER.contains(&i) {
            cb.memcpy(&[], *copies.next().expect("one copy per listed kernel"), x, BYTES);
        }
    }
    (x, outs, ds)
}

/// Writes new values to `x2` (where `x` of [`kernels_cut_by_copies`] moved) and others to `x`,
/// runs `launch`, and checks that every kernel and copy read `x2`.
fn check_kernels_cut_by_copies(gpu: &Gpu, x: u64, x2: u64, outs: &[u64], ds: &[u64], launch: impl FnOnce(), what: &str) {
    gpu.write(x2, &[5.0; N]);
    gpu.write(x, &[-7.0; N]);
    launch();
    let want: Vec<f32> = iota(105.0);
    for (i, &out) in outs.iter().enumerate() {
        assert_eq!(gpu.read(out, N), want, "{what}: kernel {i} read x at its new address");
    }
    for &d in ds {
        assert_eq!(gpu.read(d, N), vec![5.0; N], "{what}: a copy read x at its new address");
    }
}

/// Moves allocation 0 (`x` of [`kernels_cut_by_copies`]) of `cb` to `x2` with the runtime's
/// kernel setter (`setters[0]`; `setters[1]` its memcpy setter) failing at its call `fault`, and
/// checks that the update stopped there: the setters' calls, and a report asking for a re-record
/// with the nodes set before the failure. Returns how many kernels and copies those were.
fn move_failing_at(sim: &common::Hipsim, cb: &Cb, setters: [&str; 2], fault: u64, x2: u64) -> (u64, u64) {
    let calls = || setter_calls(sim, setters);
    let before = calls();
    sim.set_faults(&format!("{}:{fault}", setters[0]));
    let report = cb.move_allocs(&[(0, x2)]);
    sim.set_faults("");
    let kernels_set = fault - 1;
    let copies_set = PUSH_RUN_COPIES_AFTER.iter().filter(|&&after| (after as u64) < kernels_set).count() as u64;
    let after = calls();
    assert_eq!([after[0] - before[0], after[1] - before[1]], [fault, copies_set], "fault {fault}: setter calls");
    assert_eq!((report.needs_rerecord, report.updated_nodes), (1, kernels_set + copies_set), "fault {fault}");
    (kernels_set, copies_set)
}

/// How many times each of `setters` has been called.
fn setter_calls(sim: &common::Hipsim, setters: [&str; 2]) -> [u64; 2] {
    setters.map(|setter| sim.call_count(setter))
}

/// Kernel nodes of a primary reach the runtime a run of up to 32 at a time, cut by other nodes:
/// a setter failing in the second run, at its first node or inside it, stops the update there
/// as a push one by one did ([`kernels_cut_by_copies`], in recorded order).
#[test]
fn a_push_failing_past_the_first_run_of_kernel_nodes_stops_there_and_the_next_moves_finish_it() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    // The 33rd kernel setter fails at the first node of the second run (the copy after kernel 9
    // cuts the first run), the 32nd and the 40th inside runs.
    for fault in [32u64, 33, 40] {
        let cb = Cb::primary();
        let (x, outs, ds) = kernels_cut_by_copies(&gpu, &cb);
        cb.finalize();
        // Moving x there and back without a fault: what pushing every node counts.
        let x2 = gpu.moved_copy(x, BYTES as usize);
        let before = counts(&cb);
        assert_eq!(cb.move_allocs(&[(0, x2)]).updated_nodes, 72);
        assert_eq!(cb.move_allocs(&[(0, x)]).updated_nodes, 72);
        let whole = (counts(&cb).exec_param_push_bytes - before.exec_param_push_bytes) / 2;

        let before = counts(&cb);
        let (kernels_set, copies_set) =
            move_failing_at(&sim, &cb, ["hipGraphExecKernelNodeSetParams", "hipGraphExecMemcpyNodeSetParams1D"], fault, x2);
        let failed = counts(&cb);
        assert_eq!(failed.exec_param_pushes - before.exec_param_pushes, kernels_set + copies_set, "fault {fault}");
        fails(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "stale parameters");

        // Nothing more moved: the failed node and every one after it are pushed, once each.
        let report = cb.move_allocs(&[]);
        assert_eq!((report.needs_rerecord, report.updated_nodes), (0, 72 - kernels_set - copies_set), "fault {fault}");
        let repaired = counts(&cb);
        assert_eq!(repaired.exec_param_push_bytes - before.exec_param_push_bytes, whole, "fault {fault}: bytes of the two parts");
        check_kernels_cut_by_copies(&gpu, x, x2, &outs, &ds, || cb.launch(&gpu), &format!("fault {fault}"));
    }
}

/// The same for a nested command buffer, whose kernel nodes reach its template a run at a time:
/// the next moves push the rest, and the parent's launch after `rcb_cmdbuf_update_child`
/// computes every result.
#[test]
fn a_template_push_failing_past_the_first_run_of_a_nested_buffers_kernel_nodes_stops_there_and_the_next_moves_finish_it() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let setters = ["hipGraphKernelNodeSetParams", "hipGraphMemcpyNodeSetParams1D"];
    for fault in [32u64, 33, 40] {
        let child = Cb::nested();
        let (x, outs, ds) = kernels_cut_by_copies(&gpu, &child);
        child.finalize();
        let parent = Cb::primary();
        let mut node = 0;
        ok(unsafe { rcb_cmdbuf_add_child(parent.0, null(), 0, child.0, &mut node) });
        parent.finalize();

        let x2 = gpu.moved_copy(x, BYTES as usize);
        let (kernels_set, copies_set) = move_failing_at(&sim, &child, setters, fault, x2);

        // Nothing more moved: the failed node and every one after it are pushed, once each, to
        // the template.
        let [kernels_before, copies_before] = setter_calls(&sim, setters);
        let report = child.move_allocs(&[]);
        assert_eq!((report.needs_rerecord, report.updated_nodes), (0, 72 - kernels_set - copies_set), "fault {fault}");
        let [kernels, copies] = setter_calls(&sim, setters);
        let copies_left = PUSH_RUN_COPIES_AFTER.len() as u64 - copies_set;
        assert_eq!(
            (kernels - kernels_before, copies - copies_before),
            (PUSH_RUN_KERNELS as u64 - kernels_set, copies_left),
            "fault {fault}"
        );
        parent.begin_update();
        ok(unsafe { rcb_cmdbuf_update_child(parent.0, node, child.0) });
        parent.finalize();
        check_kernels_cut_by_copies(&gpu, x, x2, &outs, &ds, || parent.launch(&gpu), &format!("fault {fault}"));
    }
}

#[test]
fn quirks_that_break_reading_parameters_back_change_nothing() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    // The quirk changes only what hipGraphKernelNodeGetParams returns: the run under it is
    // meaningful only if that read-back is where a library would look, so the counter shows the
    // library never made it (its argument blobs are its own) while the results stay right.
    sim.set_quirks("clr138");
    let reads = sim.call_count("hipGraphKernelNodeGetParams");
    let launches = sim.call_count("hipGraphLaunch");
    chain_moves_in_place(&gpu, Cb::update_allocs);
    assert_eq!(sim.call_count("hipGraphKernelNodeGetParams"), reads, "parameters read back");
    assert!(sim.call_count("hipGraphLaunch") > launches, "nothing launched under the quirk");
    sim.set_quirks("");
}

#[test]
fn a_nested_buffer_updates_its_template_and_reaches_the_parent_through_update_child() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let (x, y, out, d) = chain_buffers(&gpu);
    let allocs = [(x, BYTES), (y, BYTES), (out, BYTES), (d, BYTES)];
    let child = Cb::nested();
    child.set_allocs(&allocs);
    record_chain(&gpu, &child, x, y, out, d);
    child.finalize();
    fails(unsafe { rcb_cmdbuf_launch(child.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "nested");
    let mut exec = null_mut();
    fails(unsafe { rcb_cmdbuf_exec(child.0, &mut exec) }, RCB_STATUS_INVALID_STATE, "nested");

    let parent = Cb::primary();
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child(parent.0, null(), 0, child.0, &mut node) });
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!(gpu.read(d, N), iota(3.0));

    let sim = common::hipsim("a nested child's update sets each node of the template once (the runtime's call counters)");
    let template_sets = sim.as_ref().map(|s| (s.call_count("hipGraphKernelNodeSetParams"), s.call_count("hipGraphMemcpyNodeSetParams1D")));
    let out2 = gpu.moved_copy(out, BYTES as usize);
    let report = child.update_allocs(&[(x, BYTES), (y, BYTES), (out2, BYTES), (d, BYTES)]);
    assert_eq!((report.patched_sites, report.updated_nodes), (2, 2));
    if let (Some(sim), Some((kernels, copies))) = (sim, template_sets) {
        assert_eq!(sim.call_count("hipGraphKernelNodeSetParams") - kernels, 1, "the add node, in the template");
        assert_eq!(sim.call_count("hipGraphMemcpyNodeSetParams1D") - copies, 1);
    }
    parent.begin_update();
    ok(unsafe { rcb_cmdbuf_update_child(parent.0, node, child.0) });
    parent.finalize();
    gpu.write(out, &[-3.0; N]);
    parent.launch(&gpu);
    assert_eq!(gpu.read(out2, N), iota(5.0));
    assert_eq!(gpu.read(d, N), iota(5.0));
    assert_eq!(gpu.read(out, N), vec![-3.0; N]);

    // A nested parent cannot update a child node in place.
    let nested_parent = Cb::nested();
    let mut n2 = 0;
    ok(unsafe { rcb_cmdbuf_add_child(nested_parent.0, null(), 0, child.0, &mut n2) });
    nested_parent.finalize();
    nested_parent.begin_update();
    fails(unsafe { rcb_cmdbuf_update_child(nested_parent.0, n2, child.0) }, RCB_STATUS_UNSUPPORTED, "nested");
}

#[test]
fn a_raw_graph_child_is_cloned() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let g = gpu.rt.graph_create().unwrap();
    gpu.rt.add_kernel_node(g, &[], &common::launch(gpu.k.fill_u32, &pack(&args::fill(x, 5, N as u64)))).unwrap();
    let cb = Cb::primary();
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child_graph(cb.0, null(), 0, g.0, &mut node) });
    gpu.rt.graph_destroy(g).unwrap();
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![5; N]);
}

#[test]
fn a_captured_stream_becomes_the_graph() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    let mut node = 0;
    fails(
        with_launch(gpu.k.fill_u32, 1, &args::fill(x, 1, 1), |l| unsafe { rcb_cmdbuf_add_kernel(cb.0, null(), 0, l, &mut node) }),
        RCB_STATUS_INVALID_STATE,
        "capturing",
    );
    common::run(gpu.rt, gpu.k.fill_u32, &args::fill(x, 9, N as u64), gpu.stream);
    ok(unsafe { rcb_cmdbuf_capture_end(cb.0) });
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![0; N], "captured, not run");
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![9; N]);

    // Capture needs an empty recording buffer.
    let busy = Cb::primary();
    busy.kernel(&[], gpu.k.fill_u32, 1, &args::fill(x, 1, 1));
    fails(unsafe { rcb_cmdbuf_capture_begin(busy.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "no nodes");
    fails(unsafe { rcb_cmdbuf_capture_end(busy.0) }, RCB_STATUS_INVALID_STATE, "no capture");
}

#[test]
fn an_empty_buffer_gets_one_empty_node_and_launches() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let cb = Cb::primary();
    cb.finalize();
    let mut g = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(cb.0, &mut g) });
    let nodes = gpu.rt.graph_nodes(rocm_cmdbuf::runtime::Graph(g)).unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(gpu.rt.node_type(nodes[0]).unwrap(), rocm_cmdbuf::runtime::NodeType::Empty);
    cb.launch(&gpu);
    let mut exec = null_mut();
    ok(unsafe { rcb_cmdbuf_exec(cb.0, &mut exec) });
    assert!(!exec.is_null());
}

#[test]
fn the_state_machine_refuses_misuse() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let fill = |cb: &Cb| cb.try_kernel(&[], gpu.k.fill_u32, 1, &args::fill(x, 1, 1));
    let cb = Cb::primary();
    let node = fill(&cb).unwrap();
    let update = |cb: &Cb| with_launch(gpu.k.fill_u32, 1, &args::fill(x, 2, 1), |l| unsafe { rcb_cmdbuf_update_kernel(cb.0, node, l) });
    fails(update(&cb), RCB_STATUS_INVALID_STATE, "recording");
    fails(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "recording");
    fails(unsafe { rcb_cmdbuf_begin_update(cb.0) }, RCB_STATUS_INVALID_STATE, "recording");
    let mut report = rcb_update_report::default();
    fails(unsafe { rcb_cmdbuf_update_allocations(cb.0, null(), 0, &mut report) }, RCB_STATUS_INVALID_STATE, "recording");
    let mut exec = null_mut();
    fails(unsafe { rcb_cmdbuf_exec(cb.0, &mut exec) }, RCB_STATUS_INVALID_STATE, "not been finalized");
    cb.finalize();
    assert_eq!(fill(&cb), Err(RCB_STATUS_INVALID_STATE));
    assert!(last_error().contains("finalized"), "{}", last_error());
    fails(update(&cb), RCB_STATUS_INVALID_STATE, "finalized");
    fails(unsafe { rcb_cmdbuf_finalize(cb.0) }, RCB_STATUS_INVALID_STATE, "finalized");
    let t = table(&[(x, BYTES)]);
    fails(unsafe { rcb_cmdbuf_set_allocations(cb.0, t.as_ptr(), 1) }, RCB_STATUS_INVALID_STATE, "update_allocations");
    cb.begin_update();
    ok(update(&cb));
    fails(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "updating");
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, 1), vec![2], "the update reached the exec");
}

#[test]
fn bad_arguments_get_distinct_statuses_naming_the_argument() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let mut out = null_mut();
    fails(unsafe { rcb_cmdbuf_new(0, null_mut()) }, RCB_STATUS_NULL_ARGUMENT, "`out`");
    fails(unsafe { rcb_cmdbuf_new(99, &mut out) }, RCB_STATUS_INVALID_ARGUMENT, "device 99");
    ok(unsafe { rcb_cmdbuf_free(null_mut()) });

    let cb = Cb::primary();
    let other = Cb::primary();
    let a = cb.kernel(&[], gpu.k.fill_u32, 1, &args::fill(x, 1, 1));
    let foreign = other.kernel(&[], gpu.k.fill_u32, 1, &args::fill(x, 1, 1));
    let mut node = 0;
    // Dependencies.
    fails(unsafe { rcb_cmdbuf_add_empty(cb.0, &foreign, 1, &mut node) }, RCB_STATUS_FOREIGN_NODE, "belongs to");
    let made_up: rcb_node = 12345;
    fails(unsafe { rcb_cmdbuf_add_empty(cb.0, &made_up, 1, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "not a node handle");
    let beyond = a + 7;
    fails(unsafe { rcb_cmdbuf_add_empty(cb.0, &beyond, 1, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "does not exist");
    fails(unsafe { rcb_cmdbuf_add_empty(cb.0, [a, a].as_ptr(), 2, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "deps");
    fails(unsafe { rcb_cmdbuf_add_empty(cb.0, null(), 1, &mut node) }, RCB_STATUS_NULL_ARGUMENT, "`deps`");
    fails(unsafe { rcb_cmdbuf_add_empty(cb.0, null(), 0, null_mut()) }, RCB_STATUS_NULL_ARGUMENT, "`node`");
    fails(unsafe { rcb_cmdbuf_add_empty(null_mut(), null(), 0, &mut node) }, RCB_STATUS_NULL_ARGUMENT, "`cb`");

    // Launch descriptions.
    let k = gpu.k.fill_u32;
    let add = |l: &rcb_kernel_launch| {
        let mut n = 0;
        unsafe { rcb_cmdbuf_add_kernel(cb.0, null(), 0, l, &mut n) }
    };
    fails(unsafe { rcb_cmdbuf_add_kernel(cb.0, null(), 0, null(), &mut node) }, RCB_STATUS_NULL_ARGUMENT, "`launch`");
    let base = |f: &mut dyn FnMut(&mut rcb_kernel_launch) -> rcb_status| {
        with_launch(k, 1, &args::fill(x, 1, 1), |l| {
            let mut l = rcb_kernel_launch { ..*l };
            f(&mut l)
        })
    };
    fails(
        base(&mut |l| {
            l.function = null_mut();
            add(l)
        }),
        RCB_STATUS_NULL_ARGUMENT,
        "launch->function",
    );
    fails(
        base(&mut |l| {
            l.grid[1] = 0;
            add(l)
        }),
        RCB_STATUS_INVALID_ARGUMENT,
        "grid[1]",
    );
    fails(
        base(&mut |l| {
            l.num_args = 5000;
            add(l)
        }),
        RCB_STATUS_INVALID_ARGUMENT,
        "launch->args",
    );
    fails(
        base(&mut |l| {
            l.args = null();
            add(l)
        }),
        RCB_STATUS_NULL_ARGUMENT,
        "launch->args",
    );
    let bad_args = |edit: fn(&mut rcb_kernel_arg)| {
        let p = x;
        let mut arg = rcb_kernel_arg { value: &p as *const u64 as *const _, size: 8, kind: RCB_ARG_DEVICE_PTR };
        edit(&mut arg);
        let l = rcb_kernel_launch {
            function: k.0,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            args: &arg,
            num_args: 1,
            ..Default::default()
        };
        add(&l)
    };
    fails(bad_args(|a| a.kind = 7), RCB_STATUS_INVALID_ARGUMENT, "launch->args[0].kind is 7");
    fails(bad_args(|a| a.value = null()), RCB_STATUS_NULL_ARGUMENT, "launch->args[0].value");
    fails(bad_args(|a| a.size = 4), RCB_STATUS_INVALID_ARGUMENT, "must be 8");
    fails(bad_args(|a| a.size = 0), RCB_STATUS_INVALID_ARGUMENT, "size 0");

    // Memcpy and memset.
    fails(unsafe { rcb_cmdbuf_add_memcpy_d2d(cb.0, null(), 0, x, x + 4, 0, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "0 bytes");
    fails(unsafe { rcb_cmdbuf_add_memset(cb.0, null(), 0, x, 1, 3, 4, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "element_size");
    fails(unsafe { rcb_cmdbuf_add_memset(cb.0, null(), 0, x, 0x1ff, 1, 4, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "does not fit");
    fails(unsafe { rcb_cmdbuf_add_memset(cb.0, null(), 0, x, 1, 4, 0, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "count 0");

    // Allocation tables.
    let t = table(&[(x, BYTES)]);
    fails(unsafe { rcb_cmdbuf_set_allocations(cb.0, null(), 1) }, RCB_STATUS_NULL_ARGUMENT, "`allocs`");
    fails(unsafe { rcb_cmdbuf_set_allocations(cb.0, t.as_ptr(), (1 << 24) + 1) }, RCB_STATUS_INVALID_ARGUMENT, "allocs");
    let wraps = table(&[(x, BYTES), (u64::MAX - 1, 4)]);
    fails(unsafe { rcb_cmdbuf_set_allocations(cb.0, wraps.as_ptr(), 2) }, RCB_STATUS_INVALID_ARGUMENT, "allocation 1");

    // Node kinds and foreign nodes in updates.
    cb.finalize();
    cb.begin_update();
    fails(unsafe { rcb_cmdbuf_update_memcpy_d2d(cb.0, a, x, x, 4) }, RCB_STATUS_INVALID_ARGUMENT, "kernel node, not a memcpy");
    fails(unsafe { rcb_cmdbuf_update_memset(cb.0, foreign, x, 0, 4, 1) }, RCB_STATUS_FOREIGN_NODE, "belongs to");
    fails(unsafe { rcb_cmdbuf_update_child(cb.0, a, cb.0) }, RCB_STATUS_INVALID_ARGUMENT, "own child");
    let mut report = rcb_update_report::default();
    cb.finalize();
    fails(unsafe { rcb_cmdbuf_update_allocations(cb.0, t.as_ptr(), 1, null_mut()) }, RCB_STATUS_NULL_ARGUMENT, "`report`");
    assert_eq!(unsafe { rcb_cmdbuf_update_allocations(cb.0, t.as_ptr(), 1, &mut report) }, RCB_OK);
    let mut g = null_mut();
    fails(unsafe { rcb_cmdbuf_graph(cb.0, null_mut()) }, RCB_STATUS_NULL_ARGUMENT, "`graph`");
    ok(unsafe { rcb_cmdbuf_graph(cb.0, &mut g) });

    // Unknown and freed handles.
    let stale = Cb::primary();
    let raw = stale.0;
    drop(stale);
    fails(unsafe { rcb_cmdbuf_finalize(raw) }, RCB_STATUS_INVALID_HANDLE, "rcb_cmdbuf");
    fails(unsafe { rcb_cmdbuf_free(raw) }, RCB_STATUS_INVALID_HANDLE, "not live");
    fails(unsafe { rcb_cmdbuf_finalize(0x10 as *mut rcb_cmdbuf) }, RCB_STATUS_INVALID_HANDLE, "not live");
    // A node of a freed command buffer is no longer anyone's.
    let gone = Cb::primary();
    let gone_node = gone.kernel(&[], gpu.k.fill_u32, 1, &args::fill(x, 1, 1));
    drop(gone);
    let fresh = Cb::primary();
    fresh.kernel(&[], gpu.k.fill_u32, 1, &args::fill(x, 1, 1));
    fails(unsafe { rcb_cmdbuf_add_empty(fresh.0, &gone_node, 1, &mut node) }, RCB_STATUS_INVALID_ARGUMENT, "not a node handle");
}

#[test]
fn distinct_command_buffers_work_in_parallel_threads() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let gpu = &gpu;
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let stream = gpu.rt.stream_create(0, 1, 0).unwrap();
                let x = gpu.upload(&[0.0; N]);
                let cb = Cb::primary();
                cb.set_allocs(&[(x, BYTES)]);
                let mut prev = Vec::new();
                for i in 0..8u32 {
                    prev = vec![cb.kernel(&prev, gpu.k.fill_u32, N as u64, &args::fill(x, t * 100 + i, N as u64))];
                }
                cb.finalize();
                let x2 = gpu.moved_copy(x, BYTES as usize);
                assert_eq!(cb.update_allocs(&[(x2, BYTES)]).updated_nodes, 8);
                ok(unsafe { rcb_cmdbuf_launch(cb.0, stream.0) });
                gpu.rt.stream_synchronize(stream).unwrap();
                assert_eq!(common::download_u32(gpu.rt, x2, N), vec![t * 100 + 7; N]);
                gpu.rt.stream_destroy(stream).unwrap();
            });
        }
    });
}

#[test]
fn a_primary_template_catches_up_with_in_place_updates_when_embedded() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let (cb, (x, y, out, d)) = finalized_chain(&gpu);
    let out2 = gpu.moved_copy(out, BYTES as usize);
    assert_eq!(cb.update_allocs(&[(x, BYTES), (y, BYTES), (out2, BYTES), (d, BYTES)]).updated_nodes, 2);
    // The template (cloned here) must hold out2 too, not only the executable graph.
    let parent = Cb::primary();
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child(parent.0, null(), 0, cb.0, &mut node) });
    parent.finalize();
    gpu.write(out, &[-3.0; N]);
    parent.launch(&gpu);
    assert_eq!(gpu.read(out2, N), iota(3.0));
    assert_eq!(gpu.read(d, N), iota(3.0));
    assert_eq!(gpu.read(out, N), vec![-3.0; N]);
}

/// Issues fill(x = value) on the test stream, outside any command buffer.
fn fill_on_stream(gpu: &Gpu, x: u64, value: u32) {
    common::run(gpu.rt, gpu.k.fill_u32, &args::fill(x, value, N as u64), gpu.stream);
}

fn capturing(gpu: &Gpu) -> bool {
    gpu.rt.stream_is_capturing(gpu.stream).expect("hipStreamIsCapturing")
}

/// Frees `cb` now, returning the status; its drop then finds the handle gone.
fn free_now(cb: &Cb) -> rcb_status {
    unsafe { rcb_cmdbuf_free(cb.0) }
}

fn node_count(cb: usize) -> Result<usize, rcb_status> {
    let mut count = usize::MAX;
    match unsafe { rcb_cmdbuf_node_count(cb as *mut rcb_cmdbuf, &mut count) } {
        RCB_OK => Ok(count),
        s => Err(s),
    }
}

/// A thread goes straight to the command buffer it called last (its place is never given
/// back): once that one is freed and a new one takes its place, the old handle is refused on
/// every thread that called it, and the new handle reaches its own command buffer.
#[test]
fn a_freed_handle_is_refused_after_a_new_command_buffer_takes_its_place() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let old = Cb::primary();
    let stale = old.0 as usize;
    assert_eq!(node_count(stale), Ok(0));
    let (called_tx, called_rx) = std::sync::mpsc::channel();
    let (new_tx, new_rx) = std::sync::mpsc::channel::<usize>();
    let other = std::thread::spawn(move || {
        let before = node_count(stale);
        called_tx.send(()).unwrap();
        let new = new_rx.recv().unwrap();
        (before, node_count(stale), node_count(new))
    });
    called_rx.recv().unwrap();
    assert_eq!(free_now(&old), RCB_OK);
    let new = Cb::primary();
    new.memset(&[], x, 0, 4, N as u64);
    assert_eq!(node_count(stale), Err(RCB_STATUS_INVALID_HANDLE), "the freed handle, on the thread that freed it");
    assert_eq!(node_count(new.0 as usize), Ok(1));
    new_tx.send(new.0 as usize).unwrap();
    let (before, after, theirs) = other.join().unwrap();
    assert_eq!(before, Ok(0));
    assert_eq!(after, Err(RCB_STATUS_INVALID_HANDLE), "the freed handle, on another thread that called it");
    assert_eq!(theirs, Ok(1), "the new handle, on that thread");
    drop(old);
}

/// The runtimes end a thread-local capture only on the thread that began it, and differ on what
/// a wrong-thread end leaves (HIP keeps the capture, CUDA ends it and drops what it captured):
/// `capture_end` on another thread fails without asking the runtime, keeps the capture on both
/// and says which thread can end it (which then does, with what was captured); a free on
/// another thread gives the handle back and says the same.
#[test]
fn a_capture_can_be_ended_only_on_the_thread_that_began_it() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let stream = gpu.rt.stream_create(0, 1, 0).expect("stream");
    let cb = Cb::primary();
    let (handle, raw) = (cb.0 as usize, stream.0 as usize);
    let (began_tx, began_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let x = gpu.upload(&[0.0; N]);
    let (rt, fill) = (gpu.rt, gpu.k.fill_u32.0 as usize);
    let owner = std::thread::spawn(move || {
        ok(unsafe { rcb_cmdbuf_capture_begin(handle as *mut rcb_cmdbuf, raw as *mut std::ffi::c_void) });
        let (fill, stream) = (rocm_cmdbuf::runtime::Function(fill as *mut _), rocm_cmdbuf::runtime::Stream(raw as *mut _));
        common::run(rt, fill, &args::fill(x, 7, N as u64), stream);
        began_tx.send(()).unwrap();
        // Ends the capture whatever the main thread did (a failed assertion drops the sender).
        let _ = end_rx.recv();
        unsafe { rcb_cmdbuf_capture_end(handle as *mut rcb_cmdbuf) }
    });
    began_rx.recv().unwrap();
    let s = unsafe { rcb_cmdbuf_capture_end(cb.0) };
    fails(s, RCB_STATUS_INVALID_STATE, "only the thread that began the capture can end it");
    assert!(gpu.rt.stream_is_capturing(stream).unwrap(), "the capture is kept");
    end_tx.send(()).unwrap();
    assert_eq!(owner.join().unwrap(), RCB_OK, "the thread that began the capture ends it");
    assert!(!gpu.rt.stream_is_capturing(stream).unwrap());
    cb.finalize();
    // What was captured before the wrong-thread call is all there: the fill runs.
    cb.launch(&gpu);
    assert_eq!(gpu.read_bytes(x, 4 * N), [7u32; N].map(u32::to_ne_bytes).concat(), "the captured fill ran");
    gpu.rt.stream_destroy(stream).expect("stream destroy");

    // Freed on another thread: the free gives the handle back but cannot end the capture, and
    // says so; the thread that began it ends it with the runtime.
    let other = gpu.rt.stream_create(0, 1, 0).expect("stream");
    let cb = Cb::primary();
    let (handle, raw) = (cb.0 as usize, other.0 as usize);
    let (began_tx, began_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let owner = std::thread::spawn(move || {
        ok(unsafe { rcb_cmdbuf_capture_begin(handle as *mut rcb_cmdbuf, raw as *mut std::ffi::c_void) });
        began_tx.send(()).unwrap();
        let _ = end_rx.recv();
        let stream = rocm_cmdbuf::runtime::Stream(raw as *mut std::ffi::c_void);
        rt.graph_destroy(rt.end_capture(stream).expect("end the capture")).expect("graph destroy");
    });
    began_rx.recv().unwrap();
    fails(free_now(&cb), RCB_STATUS_RUNTIME_ERROR, "only the thread that began the capture can end it");
    assert!(!last_error().contains("rcb_cmdbuf_capture_end"), "the freed handle cannot end it: {}", last_error());
    assert!(gpu.rt.stream_is_capturing(other).unwrap());
    end_tx.send(()).unwrap();
    owner.join().unwrap();
    assert!(!gpu.rt.stream_is_capturing(other).unwrap());
    gpu.rt.stream_destroy(other).expect("stream destroy");
}

#[test]
fn a_failed_capture_end_keeps_the_capture_for_a_retry_or_the_free() {
    let _g = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    fill_on_stream(&gpu, x, 9);
    sim.set_faults("hipStreamEndCapture:1");
    let s = unsafe { rcb_cmdbuf_capture_end(cb.0) };
    sim.set_faults("");
    fails(s, RCB_STATUS_RUNTIME_ERROR, "the stream is still capturing");
    assert!(last_error().contains("hipStreamEndCapture"), "{}", last_error());
    assert!(capturing(&gpu));
    ok(unsafe { rcb_cmdbuf_capture_end(cb.0) });
    assert!(!capturing(&gpu));
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![9; N], "the retry kept what was captured");

    // Freed instead of retried: the free ends the capture.
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    sim.set_faults("hipStreamEndCapture:1");
    let s = unsafe { rcb_cmdbuf_capture_end(cb.0) };
    sim.set_faults("");
    fails(s, RCB_STATUS_RUNTIME_ERROR, "still capturing");
    ok(free_now(&cb));
    assert!(!capturing(&gpu));
    gpu.sync();

    // The runtime cannot say: the capture is kept, and the retry ends it.
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    sim.set_faults("hipStreamEndCapture:1,hipStreamIsCapturing:1");
    let s = unsafe { rcb_cmdbuf_capture_end(cb.0) };
    sim.set_faults("");
    fails(s, RCB_STATUS_RUNTIME_ERROR, "whether the stream is still capturing is unknown");
    ok(unsafe { rcb_cmdbuf_capture_end(cb.0) });
    assert!(!capturing(&gpu));
}

/// Found by the fault matrix (tests/faults): when destroying the graph a capture replaces
/// failed, that graph was leaked with only a log line. It is destroyed again by the free.
#[test]
fn a_graph_the_runtime_failed_to_destroy_at_capture_end_is_destroyed_by_the_free() {
    let _g = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let graphs = sim.live_count("graph");
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    fill_on_stream(&gpu, x, 4);
    sim.set_faults("hipGraphDestroy:1");
    let s = unsafe { rcb_cmdbuf_capture_end(cb.0) };
    sim.set_faults("");
    ok(s);
    assert_eq!(sim.live_count("graph"), graphs + 2, "the replaced graph is still there, and the captured one");
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![4; N]);
    ok(free_now(&cb));
    assert_eq!(sim.live_count("graph"), graphs, "the free destroyed both");
}

#[test]
fn a_capture_end_that_the_runtime_ends_anyway_returns_to_recording() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    // Synchronizing a capturing stream invalidates the capture; its end then fails and ends it.
    assert!(gpu.rt.stream_synchronize(gpu.stream).is_err());
    fails(unsafe { rcb_cmdbuf_capture_end(cb.0) }, RCB_STATUS_RUNTIME_ERROR, "the stream is usable");
    assert!(!capturing(&gpu));
    gpu.sync();
    // Recording again, with nothing captured: it can capture anew.
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    fill_on_stream(&gpu, x, 4);
    ok(unsafe { rcb_cmdbuf_capture_end(cb.0) });
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![4; N]);
}

#[test]
fn reads_are_refused_during_a_capture() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let cb = Cb::primary();
    let mut before = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(cb.0, &mut before) });
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    let (mut graph, mut exec, mut count) = (null_mut(), null_mut(), usize::MAX);
    fails(unsafe { rcb_cmdbuf_graph(cb.0, &mut graph) }, RCB_STATUS_INVALID_STATE, "capturing");
    fails(unsafe { rcb_cmdbuf_exec(cb.0, &mut exec) }, RCB_STATUS_INVALID_STATE, "capturing");
    fails(unsafe { rcb_cmdbuf_node_count(cb.0, &mut count) }, RCB_STATUS_INVALID_STATE, "capturing");
    fails(unsafe { rcb_cmdbuf_site_count(cb.0, &mut count) }, RCB_STATUS_INVALID_STATE, "capturing");
    assert_eq!((graph, exec, count), (null_mut(), null_mut(), usize::MAX), "nothing handed out");
    fill_on_stream(&gpu, x, 2);
    ok(unsafe { rcb_cmdbuf_capture_end(cb.0) });
    ok(unsafe { rcb_cmdbuf_graph(cb.0, &mut graph) });
    assert_ne!(graph, before, "the captured graph replaced the one from before the capture");
    ok(unsafe { rcb_cmdbuf_node_count(cb.0, &mut count) });
    assert_eq!(count, 0, "a captured graph's own nodes are not counted");
    cb.finalize();
    ok(unsafe { rcb_cmdbuf_exec(cb.0, &mut exec) });
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![2; N]);
}

#[test]
fn free_reports_a_failed_destroy_and_releases_the_handle() {
    let _g = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let (graphs, execs) = (sim.live_count("graph"), sim.live_count("exec"));
    let cb = Cb::primary();
    cb.kernel(&[], gpu.k.fill_u32, N as u64, &args::fill(x, 1, N as u64));
    cb.finalize();
    sim.set_faults("hipGraphExecDestroy:1");
    let s = free_now(&cb);
    sim.set_faults("");
    fails(s, RCB_STATUS_RUNTIME_ERROR, "hipGraphExecDestroy");
    assert!(last_error().contains("leaked"), "{}", last_error());
    fails(free_now(&cb), RCB_STATUS_INVALID_HANDLE, "not live");
    assert_eq!(sim.live_count("graph"), graphs, "the graph was destroyed after the failure");
    assert_eq!(sim.live_count("exec"), execs + 1, "only the executable graph whose destroy failed leaked");

    // A capture whose end fails at the free: the stream is left capturing, and the status says so.
    let cb = Cb::primary();
    ok(unsafe { rcb_cmdbuf_capture_begin(cb.0, gpu.stream.0) });
    sim.set_faults("hipStreamEndCapture:1");
    let s = free_now(&cb);
    sim.set_faults("");
    fails(s, RCB_STATUS_RUNTIME_ERROR, "the stream is still capturing");
    fails(free_now(&cb), RCB_STATUS_INVALID_HANDLE, "not live");
    assert!(capturing(&gpu));
    let g = gpu.rt.end_capture(gpu.stream).unwrap();
    gpu.rt.graph_destroy(g).unwrap();
    gpu.sync();
}

/// A fill whose pointer is named `(allocation, offset)` (`RCB_ARG_ALLOCATION`), as raw bytes.
fn named_fill(allocation: u64, offset: u64, value: f32, n: u64) -> [(Vec<u8>, u32); 3] {
    let named: Vec<u8> = [allocation, offset].iter().flat_map(|w| w.to_ne_bytes()).collect();
    [(named, RCB_ARG_ALLOCATION), (value.to_bits().to_ne_bytes().to_vec(), RCB_ARG_VALUE), (n.to_ne_bytes().to_vec(), RCB_ARG_VALUE)]
}

fn raw(args: &[(Vec<u8>, u32)]) -> Vec<(&[u8], u32)> {
    args.iter().map(|(b, k)| (b.as_slice(), *k)).collect()
}

#[test]
fn a_named_pointer_is_its_allocation_plus_offset_and_follows_only_that_allocation() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let half = (N / 2) as u64;
    let a = gpu.upload(&[0.0; N]);
    let b = gpu.upload(&[0.0; N]);
    // One array passed twice: allocations 0 and 1 alias. The fill writes the second half of
    // allocation 1, named; a plain pointer to the same address would be ambiguous.
    let cb = Cb::primary();
    cb.set_allocs(&[(a, BYTES), (a, BYTES)]);
    cb.raw_kernel(&[], gpu.k.fill_u32, half, &raw(&named_fill(1, BYTES / 2, 7.0, half)));
    cb.finalize();
    cb.launch(&gpu);
    let expect: Vec<f32> = (0..N).map(|i| if i < N / 2 { 0.0 } else { 7.0 }).collect();
    assert_eq!(gpu.read(a, N), expect, "the address is allocation 1's base plus the offset");
    gpu.write(a, &[0.0; N]);
    let report = cb.move_allocs(&[(1, b)]);
    assert_eq!((report.needs_rerecord, report.patched_sites), (0, 1), "a named pointer is never ambiguous");
    cb.launch(&gpu);
    assert_eq!(gpu.read(b, N), expect, "it followed allocation 1");
    assert_eq!(gpu.read(a, N), vec![0.0; N], "allocation 0 was left alone");
    // Moving allocation 0 only (now elsewhere) touches nothing.
    let report = cb.move_allocs(&[(0, b)]);
    assert_eq!((report.needs_rerecord, report.patched_sites), (0, 0));

    // A table that no longer agrees with the name: the pointer is matched by its address.
    let cb = Cb::primary();
    cb.set_allocs(&[(a, BYTES), (a, BYTES)]);
    cb.raw_kernel(&[], gpu.k.fill_u32, half, &raw(&named_fill(1, 0, 3.0, half)));
    cb.set_allocs(&[(a, BYTES)]);
    assert_eq!(cb.sites(), 1, "allocation 1 is gone; the address is allocation 0's");
    cb.finalize();
    let report = cb.move_allocs(&[(0, b)]);
    assert_eq!((report.needs_rerecord, report.patched_sites), (0, 1));
    gpu.write(a, &[0.0; N]);
    gpu.write(b, &[0.0; N]);
    cb.launch(&gpu);
    assert_eq!(gpu.read(b, N)[..N / 2], vec![3.0; N / 2][..], "it followed the allocation that holds its address");
    assert_eq!(gpu.read(a, N), vec![0.0; N]);
}

#[test]
fn a_named_pointer_outside_the_table_is_refused_naming_the_argument() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let a = gpu.upload(&[0.0; N]);
    let cb = Cb::primary();
    let add = |args: &[(Vec<u8>, u32)]| {
        let mut node = 0;
        with_raw_launch(gpu.k.fill_u32, 1, &raw(args), |l| unsafe { rcb_cmdbuf_add_kernel(cb.0, null(), 0, l, &mut node) })
    };
    fails(add(&named_fill(0, 0, 1.0, 1)), RCB_STATUS_INVALID_ARGUMENT, "outside the table of 0");
    cb.set_allocs(&[(a, BYTES)]);
    fails(add(&named_fill(1, 0, 1.0, 1)), RCB_STATUS_INVALID_ARGUMENT, "allocation 1, outside the table of 1");
    fails(add(&named_fill(0, BYTES + 1, 1.0, 1)), RCB_STATUS_INVALID_ARGUMENT, "past the end of allocation 0");
    fails(add(&named_fill(1 << 40, 0, 1.0, 1)), RCB_STATUS_INVALID_ARGUMENT, "past the most a table holds");
    let mut short = named_fill(0, 0, 1.0, 1);
    short[0].0.truncate(8);
    fails(add(&short), RCB_STATUS_INVALID_ARGUMENT, "must be sizeof(rcb_arg_allocation) = 16");
    let mut count = 0;
    ok(unsafe { rcb_cmdbuf_node_count(cb.0, &mut count) });
    assert_eq!(count, 0, "nothing was added");
    // One past the end is allowed.
    assert_eq!(add(&named_fill(0, BYTES, 1.0, 1)), RCB_OK);
}

/// `distance(out, begin, end)` then `distance(out + 8, out, end)`: a range given to kernels as
/// begin and end pointers (iterator pairs; a size-0 slice at a buffer's end is one such end).
/// The first word is the range's length, the second where its end points as seen from `out`,
/// which never moves: a stale end pointer shows in one or the other.
fn record_range(gpu: &Gpu, cb: &Cb, begin: u64, end: u64, out: u64) {
    let length = cb.kernel(&[], gpu.k.distance_u64, 1, &args::distance(out, begin, end));
    cb.kernel(&[length], gpu.k.distance_u64, 1, &args::distance(out + 8, out, end));
}

/// Runs `cb` and reads the two words at `out`.
fn run_range(gpu: &Gpu, cb: &Cb, out: u64) -> [u64; 2] {
    gpu.write(out, &[0.0; 4]);
    cb.launch(gpu);
    let b = gpu.read_bytes(out, 16);
    [0, 8].map(|i| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes")))
}

/// What a fresh record of the range at `begin, end` writes: the reference an update must match.
fn fresh_range(gpu: &Gpu, begin: u64, end: u64, out: u64) -> [u64; 2] {
    let fresh = Cb::primary();
    record_range(gpu, &fresh, begin, end, out);
    fresh.finalize();
    run_range(gpu, &fresh, out)
}

/// XLA's and PyTorch's allocators pack allocations end to end, so the end pointer of `a` is
/// the base of the allocation `b` after it: by address alone it may come from either. Moving
/// `a` alone must not patch it as `b`'s base (a stale end, reported as a success): the move is
/// refused with nothing changed, through either update call. Moving both by one delta is done
/// in place and equals a fresh record at the new addresses.
#[test]
fn an_end_pointer_where_the_next_allocation_begins_moves_only_with_both() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    // a and b end to end in one buffer; out on its own, where neither ends.
    let slab = gpu.upload_apart(&[0.0; 2 * N]);
    let out = gpu.upload(&[0.0; 4]);
    let table = |a: u64| [(a, BYTES), (a + BYTES, BYTES), (out, 16)];
    let cb = Cb::primary();
    cb.set_allocs(&table(slab));
    record_range(&gpu, &cb, slab, slab + BYTES, out);
    cb.finalize();
    assert_eq!(run_range(&gpu, &cb, out), fresh_range(&gpu, slab, slab + BYTES, out));
    assert_eq!(run_range(&gpu, &cb, out)[0], BYTES);

    // a alone, b staying.
    let a2 = gpu.upload(&[0.0; N]);
    let alone = [(a2, BYTES), (slab + BYTES, BYTES), (out, 16)];
    for (how, r) in [("the new table", cb.update_allocs(&alone)), ("the moves", cb.move_allocs(&[(0, a2)]))] {
        if r.needs_rerecord == 0 {
            assert_eq!(
                run_range(&gpu, &cb, out),
                fresh_range(&gpu, a2, a2 + BYTES, out),
                "{how}: a moved alone, its end pointer left behind"
            );
        }
        assert_eq!(r, rcb_update_report { needs_rerecord: 1, ..Default::default() }, "{how}: refused, nothing moved");
        assert_eq!(run_range(&gpu, &cb, out), fresh_range(&gpu, slab, slab + BYTES, out), "{how}: still recorded at a");
    }
    assert_eq!(counts(&cb).fallbacks[RCB_FALLBACK_OVERLAPPING_ALLOCATIONS as usize], 2);

    // a and b together, one delta.
    let slab2 = gpu.upload(&[0.0; 2 * N]);
    let r = cb.update_allocs(&table(slab2));
    assert_eq!((r.moved_allocations, r.needs_rerecord), (2, 0));
    assert_eq!(run_range(&gpu, &cb, out), fresh_range(&gpu, slab2, slab2 + BYTES, out));
    assert_eq!(run_range(&gpu, &cb, out)[0], BYTES);
}

/// An end pointer with no allocation after it comes from the allocation it ends: a site of it
/// at offset `size`, moved with it (before, it was no site at all and stayed where it was). A
/// size-0 allocation at that end may be where it came from too: it moves with `a` or the move
/// is refused.
#[test]
fn an_end_pointer_with_nothing_after_it_follows_its_allocation() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    // a is the first half of a buffer the table lists nothing else of, so no other allocation
    // can begin at its end whatever the allocator does.
    let (buffer, out) = (gpu.upload_apart(&[0.0; N]), gpu.upload(&[0.0; 4]));
    let cb = Cb::primary();
    cb.set_allocs(&[(buffer, BYTES), (out, 16)]);
    record_range(&gpu, &cb, buffer, buffer + BYTES, out);
    cb.finalize();
    assert_eq!(cb.sites(), 6, "two end pointers among the sites");
    let a2 = gpu.upload(&[0.0; 2 * N]);
    let r = cb.move_allocs(&[(0, a2)]);
    assert_eq!(run_range(&gpu, &cb, out), fresh_range(&gpu, a2, a2 + BYTES, out), "a moved: its end pointer too");
    assert_eq!((r.moved_allocations, r.patched_sites, r.needs_rerecord), (1, 3, 0));

    // With an empty allocation e at a's end.
    let empty = Cb::primary();
    empty.set_allocs(&[(buffer, BYTES), (out, 16), (buffer + BYTES, 0)]);
    record_range(&gpu, &empty, buffer, buffer + BYTES, out);
    empty.finalize();
    let r = empty.move_allocs(&[(0, a2)]);
    assert_eq!(r, rcb_update_report { needs_rerecord: 1, ..Default::default() }, "a moved without e: refused");
    let r = empty.move_allocs(&[(0, a2), (2, a2 + BYTES)]);
    assert_eq!((r.moved_allocations, r.needs_rerecord), (2, 0));
    assert_eq!(run_range(&gpu, &empty, out), fresh_range(&gpu, a2, a2 + BYTES, out));
}

/// A device buffer of `bytes` mapped through the virtual memory API (what XLA's platform
/// allocator hands out on CUDA): another kind of allocation than `malloc`'s. Unmapped and
/// released when dropped.
struct Mapped {
    rt: &'static dyn rocm_cmdbuf::runtime::Runtime,
    ptr: u64,
    size: usize,
    handle: rocm_cmdbuf::runtime::PhysicalMem,
}

impl Mapped {
    fn new(gpu: &Gpu, values: &[f32]) -> Option<Mapped> {
        let vmm = common::supported("virtual memory", gpu.rt.vmm())?;
        let size = vmm.granularity(0).unwrap();
        let handle = vmm.create(0, size).unwrap();
        let ptr = vmm.reserve(size, 0).unwrap();
        vmm.map(ptr, size, handle).unwrap();
        vmm.set_access(ptr, size, &[0]).unwrap();
        gpu.write(ptr, values);
        Some(Mapped { rt: gpu.rt, ptr, size, handle })
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if let Ok(vmm) = self.rt.vmm() {
            let _ = vmm.unmap(self.ptr, self.size);
            let _ = vmm.free_range(self.ptr, self.size);
            let _ = vmm.release(self.handle);
        }
    }
}

fn counts(cb: &Cb) -> rcb_counters {
    let mut c: rcb_counters = unsafe { std::mem::zeroed() };
    c.struct_size = size_of::<rcb_counters>() as u32;
    ok(unsafe { rcb_counters_get(cb.0, &mut c) });
    c
}

/// memcpy(d ← s) → axpy(y += 2d) over (s, d, y): what a command buffer recorded at `s, d, y`
/// leaves in d and y, from s = iota(1) and y = 1.
fn memcpy_then_axpy(gpu: &Gpu, cb: &Cb, s: u64, d: u64, y: u64) -> rcb_node {
    let c = cb.memcpy(&[], d, s, BYTES);
    cb.kernel(&[c], gpu.k.axpy_f32, N as u64, &args::axpy(y, d, 2.0, N as u64));
    c
}

/// Runs `cb` from fresh inputs and returns (d, y) as bytes.
fn run_copy_axpy(gpu: &Gpu, cb: &Cb, s: u64, d: u64, y: u64) -> (Vec<u8>, Vec<u8>) {
    gpu.write(s, &iota(1.0));
    gpu.write(d, &[0.0; N]);
    gpu.write(y, &[1.0; N]);
    cb.launch(gpu);
    (gpu.read_bytes(d, BYTES as usize), gpu.read_bytes(y, BYTES as usize))
}

/// What a fresh record at `s, d, y` computes: the reference an update must match bit for bit.
fn fresh_copy_axpy(gpu: &Gpu, s: u64, d: u64, y: u64) -> (Vec<u8>, Vec<u8>) {
    let fresh = Cb::primary();
    memcpy_then_axpy(gpu, &fresh, s, d, y);
    fresh.finalize();
    run_copy_axpy(gpu, &fresh, s, d, y)
}

/// CUDA's `cuGraphExecMemcpyNodeSetParams` fails when an operand moves between a
/// plain allocation and a mapped one (measured on the H200). The library checks that before the
/// setter on CUDA and re-instantiates; on the software GPU the `memcpy_class` quirk models the
/// rule (clr has none, and the HIP backend reports no classes), so there the setter refuses and
/// the same re-instantiation repairs the update. Either way the update succeeds, reports the
/// re-instantiation, and the results equal a fresh record's bit for bit; a move within one kind
/// stays in place. Then the same through `rcb_cmdbuf_update_memcpy_d2d`.
#[test]
fn a_memcpy_operand_moved_to_another_kind_of_allocation_reinstantiates_bit_exact() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let sim = common::hipsim("the software GPU's clr model, which takes such a move in place");
    if let Some(sim) = &sim {
        sim.set_quirks("memcpy_class");
    }
    let (s, d, y) = (gpu.upload(&iota(1.0)), gpu.upload(&[0.0; N]), gpu.upload(&[1.0; N]));
    let Some(mapped) = Mapped::new(&gpu, &[0.0; N]) else { return };
    let cb = Cb::primary();
    cb.set_allocs(&[(s, BYTES), (d, BYTES), (y, BYTES)]);
    let copy = memcpy_then_axpy(&gpu, &cb, s, d, y);
    cb.finalize();
    assert_eq!(run_copy_axpy(&gpu, &cb, s, d, y), fresh_copy_axpy(&gpu, s, d, y));

    // d: plain → mapped, then back; each a new instantiation.
    for (step, to) in [(1, mapped.ptr), (2, d)] {
        let r = cb.update_allocs(&[(s, BYTES), (to, BYTES), (y, BYTES)]);
        assert_eq!((r.reinstantiated, r.needs_rerecord, r.updated_nodes), (1, 0, 2), "step {step}");
        let c = counts(&cb);
        assert_eq!((c.fallbacks[RCB_FALLBACK_MEMCPY_NOT_IN_PLACE as usize], c.instantiations), (step, 1 + step), "step {step}");
        assert_eq!(c.fallbacks[RCB_FALLBACK_PUSH_FAILED as usize], 0);
        assert_eq!(run_copy_axpy(&gpu, &cb, s, to, y), fresh_copy_axpy(&gpu, s, to, y), "step {step}");
    }
    // Within one kind: in place.
    let d2 = gpu.upload(&[0.0; N]);
    let r = cb.update_allocs(&[(s, BYTES), (d2, BYTES), (y, BYTES)]);
    assert_eq!((r.reinstantiated, r.needs_rerecord, r.updated_nodes), (0, 0, 2));
    assert_eq!(run_copy_axpy(&gpu, &cb, s, d2, y), fresh_copy_axpy(&gpu, s, d2, y));

    // The node updated directly: the same rule.
    cb.begin_update();
    cb.set_allocs(&[(s, BYTES), (mapped.ptr, BYTES), (y, BYTES)]);
    ok(unsafe { rcb_cmdbuf_update_memcpy_d2d(cb.0, copy, mapped.ptr, s, BYTES) });
    cb.update_kernel(copy + 1, gpu.k.axpy_f32, N as u64, &args::axpy(y, mapped.ptr, 2.0, N as u64));
    cb.finalize();
    assert_eq!(counts(&cb).instantiations, 4);
    assert_eq!(run_copy_axpy(&gpu, &cb, s, mapped.ptr, y), fresh_copy_axpy(&gpu, s, mapped.ptr, y));

    // The software GPU without the quirk, as clr: the same moves in place.
    if let Some(sim) = &sim {
        sim.set_quirks("");
        let r = cb.update_allocs(&[(s, BYTES), (d, BYTES), (y, BYTES)]);
        assert_eq!((r.reinstantiated, r.needs_rerecord, r.updated_nodes), (0, 0, 2));
        assert_eq!(run_copy_axpy(&gpu, &cb, s, d, y), fresh_copy_axpy(&gpu, s, d, y));
    }
}

/// Each memcpy operand is held to the kind of allocation of its own side: a node instantiated to
/// copy from mapped memory into a plain allocation keeps its destination in place when it moves
/// to another plain allocation, and its source when it moves to other mapped memory, and is
/// re-instantiated when its destination moves into mapped memory; every result bit for bit a
/// fresh record's. (The other memcpy tests give both operands one kind, where a check that mixed
/// up the sides would pass.) On the software GPU the `memcpy_class` quirk's setter holds each
/// side to its kind.
#[test]
fn each_memcpy_operand_is_held_to_the_kind_of_its_own_side() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let sim = (gpu.rt.info().backend == rocm_cmdbuf::runtime::Backend::Hip).then(|| common::hipsim("the memcpy_class quirk")).flatten();
    if let Some(sim) = &sim {
        sim.set_quirks("memcpy_class");
    }
    let (Some(from), Some(from2), Some(into)) =
        (Mapped::new(&gpu, &iota(1.0)), Mapped::new(&gpu, &iota(1.0)), Mapped::new(&gpu, &[0.0; N]))
    else {
        return;
    };
    let (d, d2, y) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]), gpu.upload(&[1.0; N]));
    let cb = Cb::primary();
    cb.set_allocs(&[(from.ptr, BYTES), (d, BYTES), (y, BYTES)]);
    memcpy_then_axpy(&gpu, &cb, from.ptr, d, y);
    cb.finalize();
    assert_eq!(run_copy_axpy(&gpu, &cb, from.ptr, d, y), fresh_copy_axpy(&gpu, from.ptr, d, y));

    // (source, destination, re-instantiated, nodes updated): the destination to another plain
    // allocation, then the source to other mapped memory, both in place; then the destination
    // into mapped memory, a new instantiation.
    for (step, (s, to, again, nodes)) in [(from.ptr, d2, 0, 2), (from2.ptr, d2, 0, 1), (from2.ptr, into.ptr, 1, 2)].into_iter().enumerate()
    {
        let r = cb.update_allocs(&[(s, BYTES), (to, BYTES), (y, BYTES)]);
        assert_eq!((r.reinstantiated, r.needs_rerecord, r.updated_nodes), (again, 0, nodes), "step {step}");
        assert_eq!(run_copy_axpy(&gpu, &cb, s, to, y), fresh_copy_axpy(&gpu, s, to, y), "step {step}");
    }
    let c = counts(&cb);
    assert_eq!((c.fallbacks[RCB_FALLBACK_MEMCPY_NOT_IN_PLACE as usize], c.fallbacks[RCB_FALLBACK_PUSH_FAILED as usize]), (1, 0));
    if let Some(sim) = &sim {
        sim.set_quirks("");
    }
}

/// When the executable graph cannot be re-instantiated now (as many replaced executables as are
/// kept still wait for their launches, which the host never waits for), a move across kinds is
/// refused. Where the runtime tells the kinds apart (CUDA) that is decided before anything
/// changes: the command buffer keeps running where it was. Where only the setter knows (the
/// software GPU's quirk), the refusing setter leaves the nodes unpushed: launches are refused
/// until they reach an executable graph, which the next finalize does once the old launches have
/// finished.
#[test]
fn a_memcpy_move_across_kinds_that_cannot_reinstantiate_is_refused_with_nothing_changed() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    // The software GPU needs the quirk to have the rule; a real runtime has its own.
    let sim = (gpu.rt.info().backend == rocm_cmdbuf::runtime::Backend::Hip).then(|| common::hipsim("the memcpy_class quirk")).flatten();
    if let Some(sim) = &sim {
        sim.set_quirks("memcpy_class");
    }
    let (s, d, y) = (gpu.upload(&iota(1.0)), gpu.upload(&[0.0; N]), gpu.upload(&[1.0; N]));
    let Some(mapped) = Mapped::new(&gpu, &[0.0; N]) else { return };
    let cb = Cb::primary();
    cb.set_allocs(&[(s, BYTES), (d, BYTES), (y, BYTES)]);
    memcpy_then_axpy(&gpu, &cb, s, d, y);
    cb.finalize();
    // Every launch below stays queued behind a second-long kernel.
    common::run(gpu.rt, gpu.k.sleep, &args::sleep(1_000_000), gpu.stream);
    let launch = || ok(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) });
    launch();
    let table = |to: u64| [(s, BYTES), (to, BYTES), (y, BYTES)];
    assert_eq!(cb.update_allocs(&table(mapped.ptr)).reinstantiated, 1);
    launch();
    assert_eq!(cb.update_allocs(&table(d)).reinstantiated, 1);
    launch();
    let r = cb.update_allocs(&table(mapped.ptr));
    assert_eq!(counts(&cb).fallbacks[RCB_FALLBACK_MEMCPY_NOT_IN_PLACE as usize], 3);
    if gpu.rt.memory_class(d).is_some() {
        assert_eq!(r, rcb_update_report { needs_rerecord: 1, ..Default::default() }, "refused, nothing moved");
        launch();
        gpu.sync();
        // Still recorded at d.
        assert_eq!(run_copy_axpy(&gpu, &cb, s, d, y), fresh_copy_axpy(&gpu, s, d, y));
    } else {
        assert_eq!((r.moved_allocations, r.needs_rerecord, r.reinstantiated), (1, 1, 0));
        fails(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) }, RCB_STATUS_INVALID_STATE, "stale parameters");
        gpu.sync();
        // The old launches finished: the next finalize takes the nodes left behind, through a
        // new executable graph.
        let before = counts(&cb).reinstantiations;
        cb.begin_update();
        cb.finalize();
        assert_eq!(counts(&cb).reinstantiations, before + 1);
        assert_eq!(run_copy_axpy(&gpu, &cb, s, mapped.ptr, y), fresh_copy_axpy(&gpu, s, mapped.ptr, y));
    }
    if let Some(sim) = &sim {
        sim.set_quirks("");
    }
}

/// CUDA's `cuGraphExecMemcpyNodeSetParams` wants new operands "allocated
/// from the same contexts as the original"; given memory of another context of the same device
/// it took one of these two nodes and refused the other (H200, driver 580). The library compares
/// the context with the kind of allocation before the setter: a memcpy operand moved into
/// another context's memory re-instantiates, bit for bit, and where re-instantiating is not
/// possible now (launches queued behind a second-long kernel hold as many old executables as
/// are kept) the move is refused before anything changes, the command buffer still running at
/// its old address (with only the setter's refusal to go by, the update was left half pushed and
/// launches refused until a re-record). CUDA only: the software GPU has one context per device.
#[test]
fn a_memcpy_operand_moved_to_memory_of_another_context_reinstantiates_or_is_refused_with_nothing_changed() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    if gpu.rt.info().backend != rocm_cmdbuf::runtime::Backend::Cuda {
        common::skip("every check", "contexts other than a device's primary one are CUDA's");
        return;
    }
    let other = OtherContext::new(BYTES as usize);
    let (s, d, e) = (gpu.upload(&iota(1.0)), gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    assert_ne!(gpu.rt.memory_class(d), gpu.rt.memory_class(other.ptr), "another context, another class");
    let cb = Cb::primary();
    cb.set_allocs(&[(s, BYTES), (d, BYTES), (e, BYTES)]);
    let first = cb.memcpy(&[], d, s, BYTES);
    cb.memcpy(&[first], e, d, BYTES);
    cb.finalize();
    // s → middle → e, the middle at `middle`; both results bit for bit.
    let run = |middle: u64| {
        gpu.write(middle, &[-1.0; N]);
        gpu.write(e, &[-1.0; N]);
        cb.launch(&gpu);
        (gpu.read(middle, N), gpu.read(e, N))
    };
    assert_eq!(run(d), (iota(1.0), iota(1.0)));
    let table = |middle: u64| [(s, BYTES), (middle, BYTES), (e, BYTES)];
    for (step, middle) in [(1, other.ptr), (2, d)] {
        let r = cb.update_allocs(&table(middle));
        assert_eq!((r.reinstantiated, r.needs_rerecord, r.updated_nodes), (1, 0, 2), "step {step}");
        let c = counts(&cb);
        assert_eq!((c.fallbacks[RCB_FALLBACK_MEMCPY_NOT_IN_PLACE as usize], c.instantiations), (step, 1 + step));
        assert_eq!(run(middle), (iota(1.0), iota(1.0)), "step {step}");
    }
    // Every launch below stays queued behind a second-long kernel.
    common::run(gpu.rt, gpu.k.sleep, &args::sleep(1_000_000), gpu.stream);
    let launch = || ok(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) });
    launch();
    assert_eq!(cb.update_allocs(&table(other.ptr)).reinstantiated, 1);
    launch();
    assert_eq!(cb.update_allocs(&table(d)).reinstantiated, 1);
    launch();
    let r = cb.update_allocs(&table(other.ptr));
    assert_eq!(r, rcb_update_report { needs_rerecord: 1, ..Default::default() }, "refused before anything changed");
    gpu.sync();
    assert_eq!(run(d), (iota(1.0), iota(1.0)), "still at its old address");
}

/// The memcpy nodes inside a child node's graph are not checked for the
/// kind of allocation (see `memcpy_class.rs`). A move never reaches them (their addresses pin
/// their allocations, see `cmdbuf_xla`), but `rcb_cmdbuf_update_child` gives the runtime a
/// whole new graph: where its memcpy node copies between other kinds than the executable
/// child's, CUDA's `cuGraphExecChildGraphNodeSetParams` refuses it (measured on an H200, driver
/// 580; the software GPU's `memcpy_class` quirk models it), and the update fails naming the
/// call, with nothing changed: the old child still runs exactly and the caller records again.
/// Where the runtime has no such rule (clr) the new child runs.
#[test]
fn a_child_update_whose_memcpy_crosses_kinds_of_allocation_fails_with_the_old_child_running() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let sim = (gpu.rt.info().backend == rocm_cmdbuf::runtime::Backend::Hip).then(|| common::hipsim("the memcpy_class quirk")).flatten();
    let (s, d) = (gpu.upload(&iota(1.0)), gpu.upload(&[0.0; N]));
    let Some(mapped) = Mapped::new(&gpu, &[0.0; N]) else { return };
    let child_over = |dst: u64| {
        let child = Cb::nested();
        child.memcpy(&[], dst, s, BYTES);
        child.finalize();
        child
    };
    let parent = Cb::primary();
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child(parent.0, null(), 0, child_over(d).0, &mut node) });
    parent.finalize();
    // The copy lands in d or in the mapped memory; (d, mapped) after a launch.
    let run = || {
        gpu.write(d, &[-1.0; N]);
        gpu.write(mapped.ptr, &[-1.0; N]);
        parent.launch(&gpu);
        (gpu.read(d, N), gpu.read(mapped.ptr, N))
    };
    assert_eq!(run(), (iota(1.0), vec![-1.0; N]));
    if let Some(sim) = &sim {
        sim.set_quirks("memcpy_class");
    }
    let crossing = child_over(mapped.ptr);
    parent.begin_update();
    fails(unsafe { rcb_cmdbuf_update_child(parent.0, node, crossing.0) }, RCB_STATUS_RUNTIME_ERROR, "ChildGraphNodeSetParams");
    parent.finalize();
    assert_eq!(run(), (iota(1.0), vec![-1.0; N]), "the old child");
    let Some(sim) = sim else {
        common::skip("the update taken where the runtime has no kind rule", "the software GPU's quirks");
        return;
    };
    sim.set_quirks("");
    parent.begin_update();
    ok(unsafe { rcb_cmdbuf_update_child(parent.0, node, crossing.0) });
    parent.finalize();
    assert_eq!(run(), (vec![-1.0; N], iota(1.0)), "the new child");
}

/// Memory of a CUDA context of device 0 other than the primary one the library uses
/// (`cuCtxCreate_v2`), current only while it allocates; destroyed, with its memory, at the drop.
struct OtherContext {
    lib: *mut libc::c_void,
    ctx: *mut libc::c_void,
    ptr: u64,
}

type CtxCreateFn = unsafe extern "C" fn(*mut *mut libc::c_void, u32, i32) -> i32;
type MemAllocFn = unsafe extern "C" fn(*mut u64, usize) -> i32;
type CtxFn = unsafe extern "C" fn(*mut libc::c_void) -> i32;
type CtxPopFn = unsafe extern "C" fn(*mut *mut libc::c_void) -> i32;

impl OtherContext {
    fn new(bytes: usize) -> OtherContext {
        let lib = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!lib.is_null(), "libcuda.so.1 is loaded by the cuda backend");
        let sym = |name: &std::ffi::CStr| {
            let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            assert!(!p.is_null(), "{name:?}");
            p
        };
        let create = unsafe { std::mem::transmute::<*mut libc::c_void, CtxCreateFn>(sym(c"cuCtxCreate_v2")) };
        let alloc = unsafe { std::mem::transmute::<*mut libc::c_void, MemAllocFn>(sym(c"cuMemAlloc_v2")) };
        let pop = unsafe { std::mem::transmute::<*mut libc::c_void, CtxPopFn>(sym(c"cuCtxPopCurrent_v2")) };
        let mut ctx = null_mut();
        assert_eq!(unsafe { create(&mut ctx, 0, 0) }, 0, "cuCtxCreate_v2");
        let mut ptr = 0;
        assert_eq!(unsafe { alloc(&mut ptr, bytes) }, 0, "cuMemAlloc_v2 in the other context");
        let mut popped = null_mut();
        assert_eq!(unsafe { pop(&mut popped) }, 0, "cuCtxPopCurrent_v2");
        assert_eq!(popped, ctx);
        OtherContext { lib, ctx, ptr }
    }
}

impl Drop for OtherContext {
    fn drop(&mut self) {
        let destroy = unsafe { libc::dlsym(self.lib, c"cuCtxDestroy_v2".as_ptr()) };
        if !destroy.is_null() {
            unsafe { std::mem::transmute::<*mut libc::c_void, CtxFn>(destroy)(self.ctx) };
        }
    }
}

/// 300 random steps of single-node re-records (the same node at times twice in one update phase,
/// so that its sites are removed by node twice before the grouping), a whole table given again
/// while re-recording, and moves (the whole table, or lists in ascending or descending order):
/// after each, every node reads its current source at its current place, so the sites kept
/// once and the blob addresses by node stay in step with the records.
#[test]
fn random_rerecords_and_moves_keep_every_node_reading_its_current_source() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let mut r = common::rng::XorShift(0x1234_5678);
    const X: usize = 5;
    const K: usize = 6;
    let mut xs: Vec<u64> = (0..X).map(|i| gpu.upload(&iota(1000.0 * i as f32))).collect();
    let mut os: Vec<u64> = (0..K).map(|_| gpu.upload(&[0.0; N])).collect();
    let table = |xs: &[u64], os: &[u64]| -> Vec<(u64, u64)> { xs.iter().chain(os.iter()).map(|&p| (p, BYTES)).collect() };
    let cb = Cb::primary();
    cb.set_allocs(&table(&xs, &os));
    let mut src: Vec<usize> = (0..K).map(|k| k % X).collect();
    let mut nodes = Vec::new();
    for k in 0..K {
        let n = if k % 3 == 2 {
            cb.memcpy(&[], os[k], xs[src[k]], BYTES)
        } else {
            cb.kernel(&[], gpu.k.copy_u8, BYTES, &args::copy(os[k], xs[src[k]], BYTES))
        };
        nodes.push(n);
    }
    cb.finalize();
    for step in 0..300 {
        match r.below(4) {
            0 => {
                cb.begin_update();
                if r.below(5) == 0 {
                    cb.set_allocs(&table(&xs, &os));
                }
                for _ in 0..1 + r.below(4) {
                    let k = r.below(K);
                    src[k] = r.below(X);
                    if k % 3 == 2 {
                        ok(unsafe { rcb_cmdbuf_update_memcpy_d2d(cb.0, nodes[k], os[k], xs[src[k]], BYTES) });
                    } else {
                        cb.update_kernel(nodes[k], gpu.k.copy_u8, BYTES, &args::copy(os[k], xs[src[k]], BYTES));
                    }
                }
                cb.finalize();
            }
            _ => {
                let mut moves = Vec::new();
                for j in 0..X + K {
                    if r.below(3) == 0 {
                        let old = if j < X { xs[j] } else { os[j - X] };
                        let new = gpu.moved_copy(old, BYTES as usize);
                        gpu.write(old, &[-7.0; N]);
                        if j < X {
                            xs[j] = new
                        } else {
                            os[j - X] = new
                        }
                        moves.push((j as u64, new));
                    }
                }
                let rep = match r.below(3) {
                    0 => cb.update_allocs(&table(&xs, &os)),
                    1 => cb.move_allocs(&moves),
                    _ => {
                        moves.reverse();
                        cb.move_allocs(&moves)
                    }
                };
                assert_eq!(rep.needs_rerecord, 0, "step {step}");
            }
        }
        for &o in &os {
            gpu.write(o, &[0.0; N]);
        }
        cb.launch(&gpu);
        for k in 0..K {
            assert_eq!(gpu.read(os[k], N), gpu.read(xs[src[k]], N), "step {step} node {k} src {}", src[k]);
        }
    }
    assert_eq!(cb.sites(), 2 * K, "one source and one destination site per kernel node, none left of a re-record");
}

/// How a node of `random_moves_by_any_delta_keep_every_address_exact` names its address.
#[derive(Clone, Copy, Debug)]
enum DeltaKind {
    Ptr,
    Named,
    Scan,
    Memcpy,
}

/// A node of that test: its kind, allocation and offset.
#[derive(Clone, Copy, Debug)]
struct DeltaSite {
    kind: DeltaKind,
    a: usize,
    off: u64,
}

/// A value argument's bytes.
fn word(v: u64) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// Random re-records and moves (through the whole table and through the moves, ascending and
/// descending; down by a few words, onto another allocation's base, anywhere), with pushes
/// failing on the software GPU, over nodes whose pointers are plain, named or scanned at any
/// offset up to the end of an aliased or end-to-end allocation and memcpys from inside one: after
/// every step each node's kernel writes the address it holds, which must be its allocation's
/// current base plus its offset. An update adds the move's delta to the address a slot holds, so
/// a site applied twice or kept stale would show here as a wrong address.
#[test]
fn random_moves_by_any_delta_keep_every_address_exact() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    const POOL_WORDS: usize = 4096; // 32 KiB
    const M: usize = 6; // allocations
    const K: usize = 14; // nodes
    let sim = common::hipsim("pushes failing by fault injection");
    let seed: u64 = std::env::var("RCB_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x9e37_79b9_7f4a_7c15);
    let steps: usize = std::env::var("RCB_PROPERTY_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut r = common::rng::XorShift(seed);
    let pool = gpu.upload(&vec![0.0f32; POOL_WORDS * 2]);
    let pattern: Vec<u8> = (0..POOL_WORDS as u64).flat_map(|i| (pool + 8 * i).to_ne_bytes()).collect();
    gpu.rt.direct().copy_to_device(pool, &pattern).expect("pattern");
    // outs: one word per node, outside every allocation.
    let outs = gpu.upload(&vec![0.0f32; 4 * K]);
    let out = |k: usize| outs + 8 * k as u64;

    let rand_alloc = |r: &mut common::rng::XorShift| -> (u64, u64) {
        let base = pool + 8 * r.below(2000) as u64;
        let size = 8 * (1 + r.below(200)) as u64;
        (base, size)
    };
    let mut table: Vec<(u64, u64)> = (0..M).map(|_| rand_alloc(&mut r)).collect();
    // some aliasing / end-to-end
    table[1] = table[0];
    table[3] = (table[2].0 + table[2].1, table[3].1);

    let pick = |r: &mut common::rng::XorShift, table: &[(u64, u64)], memcpy: bool| -> DeltaSite {
        let a = r.below(M);
        let size = table[a].1;
        if memcpy {
            return DeltaSite { kind: DeltaKind::Memcpy, a, off: 8 * r.below((size / 8) as usize) as u64 };
        }
        let kind = [DeltaKind::Ptr, DeltaKind::Named, DeltaKind::Scan][r.below(3)];
        DeltaSite { kind, a, off: 8 * r.below((size / 8 + 1) as usize) as u64 }
    };

    let kernel_args = |k: usize, p: DeltaSite, table: &[(u64, u64)]| -> Vec<(Vec<u8>, u32)> {
        let addr = table[p.a].0 + p.off;
        let end = match p.kind {
            DeltaKind::Ptr => (word(addr), RCB_ARG_DEVICE_PTR),
            DeltaKind::Scan => (word(addr), RCB_ARG_SCAN),
            DeltaKind::Named => ([word(p.a as u64), word(p.off)].concat(), RCB_ARG_ALLOCATION),
            DeltaKind::Memcpy => unreachable!(),
        };
        vec![(word(out(k)), RCB_ARG_VALUE), (word(0), RCB_ARG_VALUE), end]
    };

    let cb = Cb::primary();
    cb.set_allocs(&table);
    let mut ps: Vec<DeltaSite> = Vec::new();
    let mut nodes = Vec::new();
    for k in 0..K {
        let p = pick(&mut r, &table, k % 4 == 3);
        let n = match p.kind {
            DeltaKind::Memcpy => cb.memcpy(&[], out(k), table[p.a].0 + p.off, 8),
            _ => {
                let a = kernel_args(k, p, &table);
                let v: Vec<(&[u8], u32)> = a.iter().map(|(b, k)| (b.as_slice(), *k)).collect();
                cb.raw_kernel(&[], gpu.k.distance_u64, 1, &v)
            }
        };
        ps.push(p);
        nodes.push(n);
    }
    cb.finalize();

    let check = |cb: &Cb, table: &[(u64, u64)], ps: &[DeltaSite], what: &str| {
        gpu.rt.direct().copy_to_device(outs, &vec![0u8; 16 * K]).expect("zero");
        cb.launch(&gpu);
        let got = gpu.read_bytes(outs, 8 * K);
        for (k, p) in ps.iter().enumerate() {
            let v = u64::from_ne_bytes(got[8 * k..8 * k + 8].try_into().unwrap());
            let want = table[p.a].0 + p.off;
            assert_eq!(v, want, "{what}: node {k} {p:?} table {table:x?}");
        }
    };
    check(&cb, &table, &ps, "initial");

    let (mut accepted, mut refused, mut failed) = (0, 0, 0);
    for step in 0..steps {
        let what = format!("seed {seed} step {step}");
        match r.below(6) {
            0 => {
                // Re-record a few nodes (and maybe the whole table).
                cb.begin_update();
                if r.one_in(3) {
                    cb.set_allocs(&table);
                }
                for _ in 0..1 + r.below(3) {
                    let k = r.below(K);
                    let p = pick(&mut r, &table, k % 4 == 3);
                    match p.kind {
                        DeltaKind::Memcpy => ok(unsafe { rcb_cmdbuf_update_memcpy_d2d(cb.0, nodes[k], out(k), table[p.a].0 + p.off, 8) }),
                        _ => {
                            let a = kernel_args(k, p, &table);
                            let v: Vec<(&[u8], u32)> = a.iter().map(|(b, k)| (b.as_slice(), *k)).collect();
                            cb.update_raw_kernel(nodes[k], gpu.k.distance_u64, 1, &v);
                        }
                    }
                    ps[k] = p;
                }
                cb.finalize();
            }
            _ => {
                let mut new = table.clone();
                let mut moves = Vec::new();
                for j in 0..M {
                    if r.one_in(2) {
                        let base = match r.below(4) {
                            0 => new[(j + 1) % M].0,                                              // alias another
                            1 => table[j].0.wrapping_sub(8 * (1 + r.below(40)) as u64).max(pool), // small negative
                            _ => pool + 8 * r.below(2000) as u64,
                        };
                        new[j].0 = base;
                        moves.push((j as u64, base));
                    }
                }
                let inject = sim.as_ref().filter(|_| r.one_in(5));
                if let Some(sim) = inject {
                    sim.set_faults(&format!("hipGraphExecKernelNodeSetParams:{}", 1 + r.below(4)));
                }
                let rep = match r.below(3) {
                    0 => cb.update_allocs(&new),
                    1 => cb.move_allocs(&moves),
                    _ => {
                        moves.reverse();
                        cb.move_allocs(&moves)
                    }
                };
                if let Some(sim) = inject {
                    sim.set_faults("");
                }
                if rep.needs_rerecord == 0 {
                    accepted += 1;
                    table = new;
                } else if rep.moved_allocations == 0 {
                    // refused: nothing changed
                    refused += 1;
                    check(&cb, &table, &ps, &format!("{what} after a refusal"));
                    // The contract's re-record.
                    table = new;
                    cb.begin_update();
                    cb.set_allocs(&table);
                    for k in 0..K {
                        let p = ps[k];
                        match p.kind {
                            DeltaKind::Memcpy => {
                                ok(unsafe { rcb_cmdbuf_update_memcpy_d2d(cb.0, nodes[k], out(k), table[p.a].0 + p.off, 8) })
                            }
                            _ => {
                                let a = kernel_args(k, p, &table);
                                let v: Vec<(&[u8], u32)> = a.iter().map(|(b, k)| (b.as_slice(), *k)).collect();
                                cb.update_raw_kernel(nodes[k], gpu.k.distance_u64, 1, &v);
                            }
                        }
                    }
                    cb.finalize();
                } else {
                    // A push failed: shadow and table are the new ones; the next update pushes the rest.
                    failed += 1;
                    table = new;
                    let rep = cb.move_allocs(&[]);
                    assert_eq!(rep.needs_rerecord, 0, "{what}");
                }
            }
        }
        check(&cb, &table, &ps, &what);
    }
    eprintln!("accepted {accepted} refused {refused} failed pushes {failed}");
}

/// A command buffer of at least `LOOK_AHEAD_FROM_NODES` nodes (`src/cmdbuf/update.rs`),
/// whose writing pass asks for the lines of the sites ahead: random moves, in either order, of
/// allocations that several nodes point into keep every address exact. The buffer is nested, so
/// each update reaches its template, whose kernel arguments are read back from the runtime after
/// every step and compared with a model (each node's first argument names it).
#[test]
fn moves_in_a_buffer_large_enough_to_look_ahead_keep_every_address_exact() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    const M: usize = 512; // allocations
    const K: usize = 33_000; // nodes
    const _: () = assert!(K >= rocm_cmdbuf::LOOK_AHEAD_FROM_NODES, "too few nodes to look ahead");
    const SIZE: u64 = 1 << 16;
    let mut r = common::rng::XorShift(0x5eed_1a7e_100c_a4ed);
    // Addresses only: a nested buffer is never launched, and nothing reads through them.
    let mut table: Vec<(u64, u64)> = (0..M).map(|a| (0x7000_0000_0000 + (a as u64) * 2 * SIZE, SIZE)).collect();
    let cb = Cb::nested();
    cb.set_allocs(&table);
    let sites: Vec<(usize, u64)> = (0..K).map(|_| (r.below(M), 8 * r.below((SIZE / 8) as usize) as u64)).collect();
    for (k, &(a, off)) in sites.iter().enumerate() {
        let args = [(word(k as u64), RCB_ARG_VALUE), (word(0), RCB_ARG_VALUE), (word(table[a].0 + off), RCB_ARG_DEVICE_PTR)];
        let v: Vec<(&[u8], u32)> = args.iter().map(|(b, kind)| (b.as_slice(), *kind)).collect();
        cb.raw_kernel(&[], gpu.k.distance_u64, 1, &v);
    }
    cb.finalize();
    let mut g = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(cb.0, &mut g) });
    let template = gpu.rt.graph_nodes(rocm_cmdbuf::runtime::Graph(g)).unwrap();
    assert_eq!(template.len(), K);
    for step in 0..4 {
        let mut moves = Vec::new();
        for (j, entry) in table.iter_mut().enumerate() {
            if r.one_in(4) {
                // Into a free range of its own, in a region below the first placements or in one
                // above every placement, so that deltas of both signs occur.
                let region = if r.one_in(2) { 0x6000_0000_0000 } else { 0x7100_0000_0000 };
                entry.0 = region + (step * M + j) as u64 * 2 * SIZE + 8 * r.below(64) as u64;
                moves.push((j as u64, entry.0));
            }
        }
        if step % 2 == 1 {
            moves.reverse();
        }
        let rep = cb.move_allocs(&moves);
        assert_eq!(rep.needs_rerecord, 0, "step {step}");
        assert_eq!(rep.moved_allocations as usize, moves.len(), "step {step}");
        let touched = sites.iter().filter(|&&(a, _)| moves.iter().any(|&(j, _)| j as usize == a)).count();
        assert_eq!(rep.updated_nodes as usize, touched, "step {step}");
        for &node in &template {
            let args = gpu.rt.kernel_node_read(node).unwrap().args.unwrap();
            let k = u64::from_ne_bytes(args[0..8].try_into().unwrap()) as usize;
            let held = u64::from_ne_bytes(args[16..24].try_into().unwrap());
            let (a, off) = sites[k];
            assert_eq!(held, table[a].0 + off, "step {step}: node {k} of allocation {a}");
        }
    }
}
