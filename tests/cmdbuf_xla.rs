//! What XLA's recording path needs beyond `tests/cmdbuf.rs`: arguments whose kind is unknown
//! (`RCB_ARG_SCAN`). Graphs run on the software GPU by default and on a real GPU with
//! `RCB_BACKEND=cuda`; results are compared in device memory.

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use rocm_cmdbuf::ffi::*;

const N: usize = 64;
const BYTES: u64 = (N * 4) as u64;

fn iota(offset: f32) -> Vec<f32> {
    (0..N).map(|i| i as f32 + offset).collect()
}

/// `rcb_test_fill_u32(dst, value, n)`'s arguments as one 24-byte struct: dst@0, value@8, n@16.
fn fill_struct(dst: u64, value: f32, n: u64) -> Vec<u8> {
    [dst.to_ne_bytes().as_slice(), &value.to_bits().to_ne_bytes(), &[0; 4], &n.to_ne_bytes()].concat()
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
