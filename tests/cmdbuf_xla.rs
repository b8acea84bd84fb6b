//! What XLA's recording path needs beyond `tests/cmdbuf.rs`: arguments whose kind is unknown
//! (`RCB_ARG_SCAN`), in-place moves refused (`needs_rerecord`) rather than silently wrong when
//! nodes the library cannot patch (cloned children, raw and captured graphs) may reference a
//! moved allocation, and kernel nodes whose argument sizes are unknown (`kernelParams`). Graphs run on the software GPU by default and on a real GPU with
//! `RCB_BACKEND=cuda`; results are compared in device memory.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use common::{Arg, args, fails, last_error, ok, pack};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::Function;
use std::ffi::c_void;
use std::ptr::{null, null_mut};

/// `rcb_test_fill_u32(dst, value, n)`'s arguments as one 24-byte struct: dst@0, value@8, n@16.
fn fill_struct(dst: u64, value: f32, n: u64) -> Vec<u8> {
    pack(&args::fill(dst, value.to_bits(), n))
}

#[test]
fn scanned_arguments_become_sites_wherever_their_aligned_words_hold_addresses() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let k = &gpu.k;
    let n = N as u64;
    let (x, y, out) = (gpu.upload(&[0.0; N]), gpu.upload(&iota(0.0)), gpu.upload(&[0.0; N]));
    let cb = Cb::primary();
    // fill(x = 1) passed as ONE scanned struct; axpy(y += 2x) with y and n scanned, x a pointer.
    let fill = fill_struct(x, 1.0, n);
    let fill_node = cb.raw_kernel(&[], k.fill_u32, n, &[(&fill, RCB_ARG_SCAN)]);
    let (yb, xb, ab, nb) = (y.to_ne_bytes(), x.to_ne_bytes(), 2.0f32.to_ne_bytes(), n.to_ne_bytes());
    let axpy = [(&yb[..], RCB_ARG_SCAN), (&xb[..], RCB_ARG_DEVICE_PTR), (&ab[..], RCB_ARG_VALUE), (&nb[..], RCB_ARG_SCAN)];
    let axpy_node = cb.raw_kernel(&[fill_node], k.axpy_f32, n, &axpy);
    cb.memcpy(&[axpy_node], out, y, BYTES);
    assert_eq!(cb.sites(), 0, "no table yet: nothing is inside an allocation");
    // The table comes after the nodes: the scanned words are looked at again.
    cb.set_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES)]);
    // fill: x (value and n words are no addresses); axpy: y (scanned), x; memcpy: out, y.
    assert_eq!(cb.sites(), 5);
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!(gpu.read(x, N), vec![1.0; N], "the scanned struct was packed like a value");
    assert_eq!(gpu.read(out, N), iota(2.0));

    let (x2, y2) = (gpu.upload(&[0.0; N]), gpu.moved_copy(y, BYTES as usize));
    gpu.write(x, &[-1.0; N]);
    gpu.write(y, &[-1.0; N]);
    let r = cb.update_allocs(&[(x2, BYTES), (y2, BYTES), (out, BYTES)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.updated_nodes, r.needs_rerecord), (2, 4, 3, 0));
    cb.launch(&gpu);
    assert_eq!(gpu.read(x2, N), vec![1.0; N], "the scanned word inside the struct followed x");
    assert_eq!(gpu.read(y2, N), iota(4.0), "the scanned y followed y");
    assert_eq!(gpu.read(out, N), iota(4.0));
    assert_eq!(gpu.read(x, N), vec![-1.0; N], "old x untouched");
    assert_eq!(gpu.read(y, N), vec![-1.0; N], "old y untouched");

    // update_kernel replaces the scanned sites: the fill now writes a new allocation z.
    cb.begin_update();
    let z = gpu.upload(&[0.0; N]);
    cb.set_allocs(&[(x2, BYTES), (y2, BYTES), (out, BYTES), (z, BYTES)]);
    let fill = fill_struct(z, 9.0, n);
    cb.update_raw_kernel(fill_node, k.fill_u32, n, &[(&fill, RCB_ARG_SCAN)]);
    cb.finalize();
    assert_eq!(cb.sites(), 5);
    let z2 = gpu.upload(&[0.0; N]);
    gpu.write(x2, &[0.5; N]);
    let r = cb.move_allocs(&[(3, z2)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.updated_nodes), (1, 1, 1), "z's one site is the new scanned word");
    let r = cb.move_allocs(&[(0, x)]);
    assert_eq!((r.patched_sites, r.updated_nodes), (1, 1), "x keeps only axpy's pointer");
    gpu.write(x, &[0.5; N]);
    cb.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, z2, N), vec![9.0f32.to_bits(); N], "the fill wrote the moved z");
    assert_eq!(gpu.read(z, N), vec![0.0; N], "old z untouched");
    assert_eq!(gpu.read(x, N), vec![0.5; N], "the fill's old scanned word is no site any more");
    assert_eq!(gpu.read(out, N), iota(5.0), "y2 += 2 * 0.5");
}

#[test]
fn a_scanned_value_equal_to_an_address_inside_an_allocation_is_patched() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let y = gpu.upload(&[0.0; 2 * N]);
    let x = gpu.upload(&[1.0; 2 * N]);
    // Allocation 2 is bookkeeping only: its base (64) equals the element count.
    let fake_base = N as u64;
    let cb = Cb::primary();
    cb.set_allocs(&[(y, 2 * BYTES), (x, 2 * BYTES), (fake_base, 16)]);
    let (yb, xb, ab, nb) = (y.to_ne_bytes(), x.to_ne_bytes(), 1.0f32.to_ne_bytes(), fake_base.to_ne_bytes());
    cb.raw_kernel(
        &[],
        gpu.k.axpy_f32,
        N as u64,
        &[(&yb[..], RCB_ARG_DEVICE_PTR), (&xb[..], RCB_ARG_DEVICE_PTR), (&ab[..], RCB_ARG_VALUE), (&nb[..], RCB_ARG_SCAN)],
    );
    assert_eq!(cb.sites(), 3, "the scanned n looks like an address inside allocation 2");
    cb.finalize();
    let r = cb.update_allocs(&[(y, 2 * BYTES), (x, 2 * BYTES), (2 * fake_base, 16)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.updated_nodes), (1, 1, 1));
    cb.launch(&gpu);
    assert_eq!(gpu.read(y, 2 * N), vec![1.0; 2 * N], "n became 128: the documented price of scanning");
}

fn add_child(parent: &Cb, deps: &[rcb_node], child: &Cb) -> rcb_node {
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child(parent.0, deps.as_ptr(), deps.len(), child.0, &mut node) });
    node
}

fn update_child(parent: &Cb, node: rcb_node, child: &Cb) {
    ok(unsafe { rcb_cmdbuf_update_child(parent.0, node, child.0) });
}

/// The report of a refused update: nothing moved, nothing patched, re-record.
const REFUSED: rcb_update_report = rcb_update_report {
    struct_size: size_of::<rcb_update_report>() as u32,
    moved_allocations: 0,
    patched_sites: 0,
    updated_nodes: 0,
    needs_rerecord: 1,
    reinstantiated: 0,
};

fn fill_args(x: u64, value: f32) -> [Arg; 3] {
    args::fill(x, value.to_bits(), N as u64)
}

fn axpy_args(y: u64, x: u64, a: f32) -> [Arg; 4] {
    args::axpy(y, x, a, N as u64)
}

/// A nested command buffer with no allocation table: fill(x = value) → axpy(y += 2x).
fn fill_axpy_child(gpu: &Gpu, x: u64, y: u64, value: f32) -> Cb {
    let child = Cb::nested();
    let f = child.kernel(&[], gpu.k.fill_u32, N as u64, &fill_args(x, value));
    child.kernel(&[f], gpu.k.axpy_f32, N as u64, &axpy_args(y, x, 2.0));
    child.finalize();
    child
}

#[test]
fn moving_what_a_cloned_child_references_is_refused_and_other_moves_apply() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let sim = common::hipsim("a refused update pushes nothing (the runtime's call counters)");
    let n = N as u64;
    let (x, y, out, w) = (gpu.upload(&[0.0; N]), gpu.upload(&iota(0.0)), gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    // The child has no table: its references are every address its nodes hold all the same.
    let child = fill_axpy_child(&gpu, x, y, 1.0);
    let parent = Cb::primary();
    let c = add_child(&parent, &[], &child);
    let copy = parent.memcpy(&[c], out, y, BYTES);
    parent.kernel(&[], gpu.k.fill_u32, n, &fill_args(w, 5.0));
    // The table comes after the child: its references are mapped to it now.
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES), (w, BYTES)]);
    assert_eq!(parent.sites(), 3, "the memcpy's two operands and the fill's w; nothing of the clone");
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!(gpu.read(out, N), iota(2.0));

    let pushes = sim.as_ref().map(|s| s.call_count("hipGraphExecKernelNodeSetParams") + s.call_count("hipGraphExecMemcpyNodeSetParams1D"));
    let (x2, y2) = (gpu.upload(&[0.0; N]), gpu.moved_copy(y, BYTES as usize));
    assert_eq!(parent.move_allocs(&[(0, x2)]), REFUSED, "x is written by the clone");
    assert_eq!(parent.move_allocs(&[(3, w), (1, y2)]), REFUSED, "y is read by the clone (w at its own base is no move)");
    assert_eq!(parent.update_allocs(&[(x, BYTES), (y2, BYTES), (out, BYTES), (w, BYTES)]), REFUSED, "the same given the whole table");
    if let (Some(s), Some(before)) = (&sim, pushes) {
        let after = s.call_count("hipGraphExecKernelNodeSetParams") + s.call_count("hipGraphExecMemcpyNodeSetParams1D");
        assert_eq!(after, before, "a refused update pushes nothing");
    }
    let unchanged = parent.update_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES), (w, BYTES)]);
    assert_eq!(unchanged, rcb_update_report::default(), "nothing moved is never refused");
    gpu.write(y2, &[-1.0; N]);
    parent.launch(&gpu);
    assert_eq!(gpu.read(out, N), iota(4.0), "the refused moves changed nothing: the memcpy still reads the old y");
    assert_eq!(gpu.read(y2, N), vec![-1.0; N]);

    // Allocations only the parent's own nodes reference still move in place.
    let (out2, w2) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    let r = parent.move_allocs(&[(2, out2), (3, w2)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.updated_nodes, r.needs_rerecord), (2, 2, 2, 0));
    parent.launch(&gpu);
    assert_eq!(gpu.read(out2, N), iota(6.0));
    assert_eq!(common::download_u32(gpu.rt, w2, N), vec![5.0f32.to_bits(); N]);

    // Re-record: the child at the new addresses, then update_child replaces the reference set.
    parent.begin_update();
    parent.set_allocs(&[(x2, BYTES), (y2, BYTES), (out2, BYTES), (w2, BYTES)]);
    let moved_child = fill_axpy_child(&gpu, x2, y2, 1.0);
    update_child(&parent, c, &moved_child);
    ok(unsafe { rcb_cmdbuf_update_memcpy_d2d(parent.0, copy, out2, y2, BYTES) });
    parent.finalize();
    gpu.write(y2, &iota(10.0));
    parent.launch(&gpu);
    assert_eq!(gpu.read(out2, N), iota(12.0), "the re-recorded child runs at the new addresses");
    assert_eq!(parent.move_allocs(&[(1, y)]), REFUSED, "the new child reads y2");
    // A child of the same shape over a new allocation v only: x and y are free to move, v is not.
    let (v, v2) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    parent.begin_update();
    parent.set_allocs(&[(x2, BYTES), (y2, BYTES), (out2, BYTES), (w2, BYTES), (v, BYTES)]);
    let v_child = fill_axpy_child(&gpu, v, v, 3.0);
    update_child(&parent, c, &v_child);
    parent.finalize();
    assert_eq!(parent.move_allocs(&[(4, v2)]), REFUSED);
    let r = parent.move_allocs(&[(0, x), (1, y)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.needs_rerecord), (2, 1, 0), "the memcpy's source follows y");
    gpu.write(y, &iota(20.0));
    parent.launch(&gpu);
    assert_eq!(gpu.read(out2, N), iota(20.0));
    assert_eq!(common::download_u32(gpu.rt, v, N), vec![9.0f32.to_bits(); N], "v = 3 + 2 * 3, by the new child");
}

#[test]
fn references_are_mapped_again_by_every_set_allocations_and_reach_through_nested_children() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let (x, y, z) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    // grandchild: fill(x); child: the grandchild, then fill(y); parent: the child, then fill(z).
    let grandchild = Cb::nested();
    grandchild.kernel(&[], gpu.k.fill_u32, N as u64, &fill_args(x, 1.0));
    grandchild.finalize();
    let child = Cb::nested();
    let g = add_child(&child, &[], &grandchild);
    child.kernel(&[g], gpu.k.fill_u32, N as u64, &fill_args(y, 2.0));
    child.finalize();
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (z, BYTES), (y, BYTES)]);
    let c = add_child(&parent, &[], &child);
    parent.kernel(&[c], gpu.k.fill_u32, N as u64, &fill_args(z, 3.0));
    parent.finalize();
    let (x2, y2, z2) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    assert_eq!(parent.move_allocs(&[(0, x2)]), REFUSED, "x is referenced two levels down");
    assert_eq!(parent.move_allocs(&[(2, y2)]), REFUSED);
    assert_eq!(parent.move_allocs(&[(1, z2)]).needs_rerecord, 0);
    parent.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, z2, N), vec![3.0f32.to_bits(); N]);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![1.0f32.to_bits(); N]);

    // The same addresses under other indices: the pins follow the new table.
    parent.begin_update();
    parent.set_allocs(&[(z2, BYTES), (y, BYTES), (x, BYTES)]);
    parent.finalize();
    assert_eq!(parent.move_allocs(&[(0, z)]).needs_rerecord, 0, "z is only the parent's own fill");
    assert_eq!(parent.move_allocs(&[(1, y2)]), REFUSED);
    assert_eq!(parent.move_allocs(&[(2, x2)]), REFUSED);
    // A table without them pins nothing.
    parent.begin_update();
    parent.set_allocs(&[(z, BYTES)]);
    parent.finalize();
    assert_eq!(parent.move_allocs(&[(0, z2)]).needs_rerecord, 0);
}

#[test]
fn unknown_references_refuse_every_move_while_the_node_exists() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let (x, y) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    let (x2, y2) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    let f = gpu.k.fill_u32;

    // A raw graph child that writes x: moving y, which it does not touch, is refused all the same.
    let g = rt.graph_create().unwrap();
    rt.add_kernel_node(g, &[], &common::launch(f, &pack(&args::fill(x, 7, N as u64)))).unwrap();
    let raw_parent = Cb::primary();
    raw_parent.set_allocs(&[(x, BYTES), (y, BYTES)]);
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child_graph(raw_parent.0, null(), 0, g.0, &mut node) });
    raw_parent.kernel(&[node], gpu.k.fill_u32, N as u64, &fill_args(y, 1.0));
    raw_parent.finalize();
    rt.graph_destroy(g).unwrap();
    assert_eq!(raw_parent.move_allocs(&[(1, y2)]), REFUSED);
    assert_eq!(raw_parent.update_allocs(&[(x, BYTES), (y2, BYTES)]), REFUSED);
    assert_eq!(raw_parent.update_allocs(&[(x, BYTES), (y, BYTES)]), rcb_update_report::default(), "nothing moved");
    raw_parent.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![7; N]);
    assert_eq!(common::download_u32(gpu.rt, y2, N), vec![0; N], "y did not move");

    // A captured command buffer, and a parent of a child cloned from it.
    let captured = Cb::nested();
    captured.set_allocs(&[(x, BYTES), (y, BYTES)]);
    ok(unsafe { rcb_cmdbuf_capture_begin(captured.0, gpu.stream.0) });
    common::run(rt, f, &args::fill(y, 8, N as u64), gpu.stream);
    ok(unsafe { rcb_cmdbuf_capture_end(captured.0) });
    captured.finalize();
    assert_eq!(captured.move_allocs(&[(0, x2)]), REFUSED, "a captured graph's addresses are unknown");
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (y, BYTES)]);
    let c = add_child(&parent, &[], &captured);
    parent.kernel(&[c], gpu.k.fill_u32, N as u64, &fill_args(x, 2.0));
    parent.finalize();
    assert_eq!(parent.move_allocs(&[(0, x2)]), REFUSED, "x is the parent's own, but the clone's references are unknown");
    parent.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, y, N), vec![8; N]);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![2.0f32.to_bits(); N]);
    assert_eq!(common::download_u32(gpu.rt, x2, N), vec![0; N]);

    // A captured primary command buffer refuses too.
    let primary = Cb::primary();
    primary.set_allocs(&[(x, BYTES)]);
    ok(unsafe { rcb_cmdbuf_capture_begin(primary.0, gpu.stream.0) });
    common::run(rt, f, &args::fill(x, 4, N as u64), gpu.stream);
    ok(unsafe { rcb_cmdbuf_capture_end(primary.0) });
    primary.finalize();
    assert_eq!(primary.update_allocs(&[(x2, BYTES)]), REFUSED);
    primary.launch(&gpu);
    assert_eq!(common::download_u32(gpu.rt, x, N), vec![4; N], "still at the recorded address");
}

/// `rcb_test_fill_u32(dst, value, n)`'s arguments, held where `kernelParams` points.
struct FillValues {
    dst: u64,
    value: u32,
    n: u64,
}

/// Runs `body` with a `kernelParams` launch of `f` whose pointers point into `values`.
fn with_params_launch<R>(f: Function, values: &mut [*mut c_void], body: impl FnOnce(&rcb_kernel_params_launch) -> R) -> R {
    let launch = rcb_kernel_params_launch {
        function: f.0,
        grid: [1, 1, 1],
        block: [N as u32, 1, 1],
        shared_mem_bytes: 0,
        kernel_params: values.as_mut_ptr(),
        ..Default::default()
    };
    body(&launch)
}

fn fill_pointers(v: &mut FillValues) -> [*mut c_void; 3] {
    [&mut v.dst as *mut u64 as *mut c_void, &mut v.value as *mut u32 as *mut c_void, &mut v.n as *mut u64 as *mut c_void]
}

fn add_fill_params(gpu: &Gpu, cb: &Cb, deps: &[rcb_node], dst: u64, value: f32) -> rcb_node {
    let mut v = FillValues { dst, value: value.to_bits(), n: N as u64 };
    let mut node = 0;
    let s = with_params_launch(gpu.k.fill_u32, &mut fill_pointers(&mut v), |l| unsafe {
        rcb_cmdbuf_add_kernel_params(cb.0, deps.as_ptr(), deps.len(), l, &mut node)
    });
    ok(s);
    // The runtime copied the values during the call: nothing may read them from here any more.
    unsafe {
        std::ptr::write_volatile(&mut v.dst, 0xdead_0000);
        std::ptr::write_volatile(&mut v.value, 0);
    }
    node
}

fn update_fill_params(gpu: &Gpu, cb: &Cb, node: rcb_node, dst: u64, value: f32) -> rcb_status {
    let mut v = FillValues { dst, value: value.to_bits(), n: N as u64 };
    with_params_launch(gpu.k.fill_u32, &mut fill_pointers(&mut v), |l| unsafe { rcb_cmdbuf_update_kernel_params(cb.0, node, l) })
}

fn u32s(gpu: &Gpu, p: u64) -> Vec<u32> {
    common::download_u32(gpu.rt, p, N)
}

fn kernel_params_node_runs_updates_and_pins_every_allocation(gpu: &Gpu) {
    let (x, y, z) = (gpu.upload(&[0.0; N]), gpu.upload(&iota(0.0)), gpu.upload(&[0.0; N]));
    let cb = Cb::primary();
    cb.set_allocs(&[(x, BYTES), (y, BYTES), (z, BYTES)]);
    // fill(x = 2) by kernelParams → axpy(y += 2x) with known sizes → memcpy(z ← y).
    let fill = add_fill_params(gpu, &cb, &[], x, 2.0);
    let axpy = cb.kernel(&[fill], gpu.k.axpy_f32, N as u64, &axpy_args(y, x, 2.0));
    cb.memcpy(&[axpy], z, y, BYTES);
    assert_eq!(cb.sites(), 4, "axpy's y and x, the memcpy's operands; nothing of the kernelParams node");
    cb.finalize();
    cb.launch(gpu);
    assert_eq!(u32s(gpu, x), vec![2.0f32.to_bits(); N], "the values were copied when the node was added");
    assert_eq!(gpu.read(z, N), iota(4.0));

    // Any move is refused while the node exists, even of z, which only the memcpy touches.
    let z2 = gpu.upload(&[0.0; N]);
    assert_eq!(cb.move_allocs(&[(2, z2)]), REFUSED);
    assert_eq!(cb.update_allocs(&[(x, BYTES), (y, BYTES), (z2, BYTES)]), REFUSED);
    assert_eq!(cb.update_allocs(&[(x, BYTES), (y, BYTES), (z, BYTES)]), rcb_update_report::default(), "nothing moved");

    // The update changes the result: fill z (not x) with 5, so axpy adds 2 * 2 (x keeps 2).
    let sim = common::hipsim("an update reaches the executable graph, then the template (the runtime's call counters)");
    let counts = || sim.as_ref().map(|s| (s.call_count("hipGraphExecKernelNodeSetParams"), s.call_count("hipGraphKernelNodeSetParams")));
    let before = counts();
    cb.begin_update();
    let s = with_raw_launch(gpu.k.fill_u32, N as u64, &[], |l| unsafe { rcb_cmdbuf_update_kernel(cb.0, fill, l) });
    fails(s, RCB_STATUS_INVALID_ARGUMENT, "kernelParams kernel node, not a kernel node");
    fails(update_fill_params(gpu, &cb, axpy, x, 1.0), RCB_STATUS_INVALID_ARGUMENT, &format!("node {}", (axpy & 0xffff_ffff) - 1));
    assert!(last_error().contains("add_kernel_params"), "{}", last_error());
    ok(update_fill_params(gpu, &cb, fill, x, 7.0));
    if let (Some(before), Some(after)) = (before, counts()) {
        assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1), "to the executable graph, then to the template");
    }
    cb.finalize();
    gpu.write(y, &iota(0.0));
    cb.launch(gpu);
    assert_eq!(u32s(gpu, x), vec![7.0f32.to_bits(); N]);
    assert_eq!(gpu.read(z, N), iota(14.0), "y = i + 2 * 7");

    // The template got the update too: a clone of this command buffer computes the same, and the
    // clone's references are unknown in its parent.
    let parent = Cb::primary();
    parent.set_allocs(&[(z, BYTES)]);
    let c = add_child(&parent, &[], &cb);
    parent.memset(&[c], z2, 0, 4, N as u64);
    parent.finalize();
    gpu.write(x, &[0.0; N]);
    gpu.write(y, &iota(0.0));
    parent.launch(gpu);
    assert_eq!(gpu.read(z, N), iota(14.0));
    assert_eq!(parent.move_allocs(&[(0, z2)]), REFUSED);
}

#[test]
fn a_kernel_params_node_computes_updates_and_refuses_every_move() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    kernel_params_node_runs_updates_and_pins_every_allocation(&gpu);
    // The runtime's own copies of kernelParams dangle on ROCm (clr#138): nothing reads them.
    if let Some(sim) = common::hipsim("the same under ROCm's dangling kernelParams (the clr138 quirk)") {
        sim.set_quirks("clr138");
        let reads = sim.call_count("hipGraphKernelNodeGetParams");
        kernel_params_node_runs_updates_and_pins_every_allocation(&gpu);
        assert_eq!(sim.call_count("hipGraphKernelNodeGetParams"), reads, "the dangling parameters were read back");
        sim.set_quirks("");
    }
}

#[test]
fn a_nested_kernel_params_node_is_updated_in_its_template_and_never_flattened() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let sim = common::hipsim("a nested buffer pushes nothing to an executable graph (the runtime's call counters)");
    let (x, d) = (gpu.upload(&[0.0; N]), gpu.upload(&[0.0; N]));
    let child = Cb::nested();
    let fill = add_fill_params(&gpu, &child, &[], x, 3.0);
    child.finalize();
    let exec_sets = sim.as_ref().map(|s| s.call_count("hipGraphExecKernelNodeSetParams"));
    child.begin_update();
    ok(update_fill_params(&gpu, &child, fill, x, 4.0));
    child.finalize();
    if let (Some(s), Some(before)) = (&sim, exec_sets) {
        assert_eq!(s.call_count("hipGraphExecKernelNodeSetParams"), before, "a nested buffer has no executable graph");
    }

    // Flattening cannot re-create the node: the whole child becomes one clone.
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (d, BYTES)]);
    let mut group = 0;
    let mut report = rcb_flatten_report { flattened: 9, nodes: 9, sites: 9, reason: [0; RCB_FLATTEN_REASON_LEN], ..Default::default() };
    ok(unsafe { rcb_cmdbuf_add_flattened_child(parent.0, null(), 0, child.0, null_mut(), &mut group, &mut report) });
    let reason = unsafe { std::ffi::CStr::from_ptr(report.reason.as_ptr()) }.to_string_lossy().into_owned();
    assert_eq!((report.flattened, report.nodes), (0, 1));
    assert!(reason.contains("kernelParams"), "{reason}");
    parent.memcpy(&[group], d, x, BYTES);
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!(u32s(&gpu, d), vec![4.0f32.to_bits(); N], "the template holds the update");
    assert_eq!(parent.move_allocs(&[(1, x)]), REFUSED, "the clone's references are unknown");
}

#[test]
fn bad_kernel_params_launches_are_refused_naming_the_argument() {
    let _g = common::serial();
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[0.0; N]);
    let cb = Cb::primary();
    let mut node = 0;
    let add = |l: &rcb_kernel_params_launch, node: *mut rcb_node| unsafe { rcb_cmdbuf_add_kernel_params(cb.0, null(), 0, l, node) };
    fails(unsafe { rcb_cmdbuf_add_kernel_params(cb.0, null(), 0, null(), &mut node) }, RCB_STATUS_NULL_ARGUMENT, "`launch`");
    let mut v = FillValues { dst: x, value: 1, n: N as u64 };
    let mut values = fill_pointers(&mut v);
    with_params_launch(gpu.k.fill_u32, &mut values, |l| {
        fails(add(l, null_mut()), RCB_STATUS_NULL_ARGUMENT, "`node`");
        fails(add(&rcb_kernel_params_launch { function: null_mut(), ..*l }, &mut node), RCB_STATUS_NULL_ARGUMENT, "launch->function");
        fails(add(&rcb_kernel_params_launch { grid: [1, 0, 1], ..*l }, &mut node), RCB_STATUS_INVALID_ARGUMENT, "grid[1]");
        // The runtime knows fill has three parameters: no pointers is its error, not a crash.
        fails(add(&rcb_kernel_params_launch { kernel_params: null_mut(), ..*l }, &mut node), RCB_STATUS_RUNTIME_ERROR, "AddKernelNode");
        ok(add(l, &mut node));
    });
    assert_eq!(node & 0xffff_ffff, 1, "only the valid call added a node");
    fails(update_fill_params(&gpu, &cb, node, x, 2.0), RCB_STATUS_INVALID_STATE, "recording");
}
