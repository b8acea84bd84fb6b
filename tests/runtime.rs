//! The `Runtime` interface, backend-agnostic: the same bodies run on the software GPU in CI and
//! on an NVIDIA H200 with `RCB_BACKEND=cuda` (see `ci/gpu.sh`). Every test checks device memory,
//! node tables or error codes, never only that a call returned.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod common;

use common::{args, launch, pack};
use rocm_cmdbuf::error::ErrorKind;
use rocm_cmdbuf::runtime::{
    CaptureMode, DevicePtr, Edge, EdgeData, KernelParams, MemcpyParams, MemcpyReadBack, MemsetParams, NodeType, Runtime, Stream,
};
use std::sync::atomic::{AtomicU64, Ordering};

const N: usize = 1000;

fn fill(rt: &dyn Runtime, ptr: DevicePtr, value: u32) {
    rt.direct().copy_to_device(ptr, &value.to_le_bytes().repeat(N)).expect("upload");
}

fn zeroed(rt: &dyn Runtime) -> DevicePtr {
    let p = rt.malloc(0, N * 4).expect("malloc");
    fill(rt, p, 0);
    p
}

fn stream(rt: &dyn Runtime) -> Stream {
    rt.stream_create(0, 0, 0).expect("stream")
}

fn f(v: f32) -> u32 {
    v.to_bits()
}

#[test]
fn each_test_kernel_runs_with_packed_arguments() {
    let Some(rt) = common::runtime() else { return };
    let k = common::kernels(rt, 0);
    let s = stream(rt);
    let (a, b, c) = (zeroed(rt), zeroed(rt), zeroed(rt));

    let fill_args = pack(&args::fill(a, f(2.0), N as u64));
    assert_eq!(fill_args.len(), 24, "(ptr, u32, u64) packs to 24 bytes");
    rt.direct().launch_kernel(&launch(k.fill_u32, &fill_args), s).unwrap();
    common::run(rt, k.fill_u32, &args::fill(b, f(3.0), N as u64), s);
    // b += 0.5 * a ; c = a + b ; then copy the first half of c's bytes into a.
    common::run(rt, k.axpy_f32, &args::axpy(b, a, 0.5, N as u64), s);
    common::run(rt, k.add_f32, &args::add(c, a, b, N as u64), s);
    common::run(rt, k.sleep, &args::sleep(10), s);
    common::run(rt, k.copy_u8, &args::copy(a, c, N as u64 * 2), s);
    rt.stream_synchronize(s).unwrap();

    assert_eq!(common::download_f32(rt, b, N), vec![4.0; N]);
    assert_eq!(common::download_f32(rt, c, N), vec![6.0; N]);
    let a_now = common::download_f32(rt, a, N);
    assert_eq!(&a_now[..N / 2], &vec![6.0; N / 2][..], "copied half");
    assert_eq!(&a_now[N / 2..], &vec![2.0; N / 2][..], "untouched half");
    rt.stream_destroy(s).unwrap();
}

#[test]
fn a_graph_of_every_node_kind_runs_in_dependency_order() {
    let Some(rt) = common::runtime() else { return };
    let k = common::kernels(rt, 0);
    let (x, y, z, out) = (zeroed(rt), zeroed(rt), zeroed(rt), zeroed(rt));
    let g = rt.graph_create().unwrap();
    // x = 1 (memset), y = 2 (kernel), z = x (memcpy), join, child { y += 3 z }, out = y + z.
    let memset = MemsetParams { dst: x, value: f(1.0), element_size: 4, width: N, height: 1, pitch: 0 };
    let set = rt.add_memset_node(g, &[], &memset).unwrap();
    let fill_args = pack(&args::fill(y, f(2.0), N as u64));
    let fill_y = rt.add_kernel_node(g, &[], &launch(k.fill_u32, &fill_args)).unwrap();
    let copy = rt.add_memcpy_node(g, &[set], &MemcpyParams { dst: z, src: x, bytes: N * 4 }).unwrap();
    let join = rt.add_empty_node(g, &[copy, fill_y]).unwrap();
    let child = rt.graph_create().unwrap();
    let axpy_args = pack(&args::axpy(y, z, 3.0, N as u64));
    rt.add_kernel_node(child, &[], &launch(k.axpy_f32, &axpy_args)).unwrap();
    let child_node = rt.add_child_node(g, &[join], child).unwrap();
    rt.graph_destroy(child).unwrap();
    let add_args = pack(&args::add(out, y, z, N as u64));
    let add = rt.add_kernel_node(g, &[child_node], &launch(k.add_f32, &add_args)).unwrap();

    let types: Vec<NodeType> = [set, fill_y, copy, join, child_node, add].iter().map(|&n| rt.node_type(n).unwrap()).collect();
    assert_eq!(types, [NodeType::Memset, NodeType::Kernel, NodeType::Memcpy, NodeType::Empty, NodeType::Child, NodeType::Kernel]);
    assert_eq!(rt.graph_nodes(g).unwrap().len(), 6);
    let mut edges: Vec<(usize, usize)> = {
        let nodes = [set, fill_y, copy, join, child_node, add];
        let at = |n| nodes.iter().position(|&m| m == n).expect("known node");
        rt.graph_edges(g).unwrap().iter().map(|e| (at(e.from), at(e.to))).collect()
    };
    edges.sort();
    assert_eq!(edges, [(0, 2), (1, 3), (2, 3), (3, 4), (4, 5)]);

    let exec = rt.instantiate(g).unwrap();
    let s = stream(rt);
    rt.graph_launch(exec, s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_f32(rt, z, N), vec![1.0; N]);
    assert_eq!(common::download_f32(rt, y, N), vec![5.0; N]);
    assert_eq!(common::download_f32(rt, out, N), vec![6.0; N]);
    rt.exec_destroy(exec).unwrap();
    rt.graph_destroy(g).unwrap();
    rt.stream_destroy(s).unwrap();
}

#[test]
fn exec_kernel_node_set_moves_a_pointer_with_extra_style_arguments() {
    let Some(rt) = common::runtime() else { return };
    let k = common::kernels(rt, 0);
    let (old, new) = (zeroed(rt), zeroed(rt));
    let g = rt.graph_create().unwrap();
    let old_args = pack(&args::fill(old, 9, N as u64));
    let node = rt.add_kernel_node(g, &[], &launch(k.fill_u32, &old_args)).unwrap();
    let exec = rt.instantiate(g).unwrap();
    let s = stream(rt);
    rt.graph_launch(exec, s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_u32(rt, old, N), vec![9; N]);

    fill(rt, old, 0);
    let new_args = pack(&args::fill(new, 11, N as u64));
    rt.exec_kernel_node_set(exec, node, &launch(k.fill_u32, &new_args)).unwrap();
    rt.graph_launch(exec, s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_u32(rt, new, N), vec![11; N], "the new buffer gets the result");
    assert_eq!(common::download_u32(rt, old, N), vec![0; N], "the old buffer is untouched");
    // The template keeps what it was built with.
    assert_eq!(rt.kernel_node_read(node).unwrap().args.unwrap(), old_args);
    rt.exec_destroy(exec).unwrap();
    rt.graph_destroy(g).unwrap();
    rt.stream_destroy(s).unwrap();
}

#[test]
fn exec_memcpy_and_memset_setters_retarget_the_copies() {
    let Some(rt) = common::runtime() else { return };
    let (a, b, c, d) = (zeroed(rt), zeroed(rt), zeroed(rt), zeroed(rt));
    let g = rt.graph_create().unwrap();
    let set = rt.add_memset_node(g, &[], &MemsetParams { dst: a, value: 1, element_size: 4, width: N, height: 1, pitch: 0 }).unwrap();
    let copy = rt.add_memcpy_node(g, &[set], &MemcpyParams { dst: b, src: a, bytes: N * 4 }).unwrap();
    let exec = rt.instantiate(g).unwrap();
    rt.exec_memset_node_set(exec, set, &MemsetParams { dst: c, value: 4, element_size: 4, width: N, height: 1, pitch: 0 }).unwrap();
    rt.exec_memcpy_node_set(exec, copy, &MemcpyParams { dst: d, src: c, bytes: N * 4 }).unwrap();
    let s = stream(rt);
    rt.graph_launch(exec, s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_u32(rt, c, N), vec![4; N]);
    assert_eq!(common::download_u32(rt, d, N), vec![4; N]);
    assert_eq!(common::download_u32(rt, a, N), vec![0; N], "old memset target untouched");
    assert_eq!(common::download_u32(rt, b, N), vec![0; N], "old memcpy target untouched");
    rt.exec_destroy(exec).unwrap();
    rt.graph_destroy(g).unwrap();
    rt.stream_destroy(s).unwrap();
}

#[test]
fn exec_update_takes_new_parameters_and_refuses_a_new_topology() {
    let Some(rt) = common::runtime() else { return };
    let k = common::kernels(rt, 0);
    let (a, b) = (zeroed(rt), zeroed(rt));
    let one_fill = |dst, value| {
        let g = rt.graph_create().unwrap();
        let args = pack(&args::fill(dst, value, N as u64));
        let node = rt.add_kernel_node(g, &[], &launch(k.fill_u32, &args)).unwrap();
        (g, node)
    };
    let (g1, _) = one_fill(a, 1);
    let exec = rt.instantiate(g1).unwrap();
    let (g2, _) = one_fill(b, 2);
    rt.direct().exec_update(exec, g2).unwrap();
    let s = stream(rt);
    rt.graph_launch(exec, s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_u32(rt, b, N), vec![2; N]);
    assert_eq!(common::download_u32(rt, a, N), vec![0; N]);

    let (g3, first) = one_fill(a, 3);
    rt.add_empty_node(g3, &[first]).unwrap();
    let e = rt.direct().exec_update(exec, g3).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Runtime);
    assert!(e.message.contains("GraphExecUpdate"), "{}", e.message);
    for g in [g1, g2, g3] {
        rt.graph_destroy(g).unwrap();
    }
    rt.exec_destroy(exec).unwrap();
    rt.stream_destroy(s).unwrap();
}

#[test]
fn captured_launches_become_kernel_nodes_with_the_same_arguments() {
    let Some(rt) = common::runtime() else { return };
    let k = common::kernels(rt, 0);
    let (x, y) = (zeroed(rt), zeroed(rt));
    let s = rt.stream_create(0, 1, 0).unwrap();
    let fill_args = pack(&args::fill(x, f(2.0), N as u64));
    let axpy_args = pack(&args::axpy(y, x, 4.0, N as u64));
    rt.begin_capture(s, CaptureMode::ThreadLocal).unwrap();
    rt.direct().launch_kernel(&launch(k.fill_u32, &fill_args), s).unwrap();
    rt.direct().launch_kernel(&launch(k.axpy_f32, &axpy_args), s).unwrap();
    let g = rt.end_capture(s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_f32(rt, x, N), vec![0.0; N], "capture does not run the kernels");

    let nodes = rt.graph_nodes(g).unwrap();
    assert_eq!(nodes.len(), 2);
    let mut blobs: Vec<Vec<u8>> = nodes
        .iter()
        .map(|&n| {
            assert_eq!(rt.node_type(n).unwrap(), NodeType::Kernel);
            rt.kernel_node_read(n).unwrap().args.unwrap()
        })
        .collect();
    blobs.sort();
    let mut expected = vec![fill_args.clone(), axpy_args.clone()];
    expected.sort();
    assert_eq!(blobs, expected);
    assert_eq!(rt.graph_edges(g).unwrap().len(), 1);

    let exec = rt.instantiate(g).unwrap();
    rt.graph_launch(exec, s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_f32(rt, y, N), vec![8.0; N]);
    rt.exec_destroy(exec).unwrap();
    rt.graph_destroy(g).unwrap();
    rt.stream_destroy(s).unwrap();
}

#[test]
fn graph_queries_read_back_what_was_added() {
    let Some(rt) = common::runtime() else { return };
    let k = common::kernels(rt, 0);
    let (a, b) = (zeroed(rt), zeroed(rt));
    let g = rt.graph_create().unwrap();
    let args = pack(&args::axpy(b, a, 1.5, N as u64));
    let kparams = KernelParams { function: k.axpy_f32, grid: [3, 2, 1], block: [64, 2, 1], shared_mem_bytes: 128, args: &args };
    let kernel = rt.add_kernel_node(g, &[], &kparams).unwrap();
    let read = rt.kernel_node_read(kernel).unwrap();
    assert_eq!(read.function, k.axpy_f32);
    assert_eq!((read.grid, read.block, read.shared_mem_bytes), ([3, 2, 1], [64, 2, 1], 128));
    assert_eq!(read.args.unwrap(), args, "the same packed bytes");

    // What a memcpy node reports depends on the runtime (see `MemcpyReadBack`).
    let copy = MemcpyParams { dst: b, src: a, bytes: 256 };
    let copy_node = rt.add_memcpy_node(g, &[], &copy).unwrap();
    let moved = MemcpyParams { dst: a, src: b, bytes: 128 };
    match rt.memcpy_read_back() {
        MemcpyReadBack::Reliable => {
            assert_eq!(rt.memcpy_node_read(copy_node).unwrap(), copy);
            rt.memcpy_node_set(copy_node, &moved).unwrap();
            assert_eq!(rt.memcpy_node_read(copy_node).unwrap(), moved);
        }
        MemcpyReadBack::AsCreated(_) => {
            assert_eq!(rt.memcpy_node_read(copy_node).unwrap(), copy);
            rt.memcpy_node_set(copy_node, &moved).unwrap();
            assert_eq!(rt.memcpy_node_read(copy_node).unwrap(), copy, "as it was created");
        }
        MemcpyReadBack::Never(why) => {
            let e = rt.memcpy_node_read(copy_node).unwrap_err();
            assert_eq!((e.kind, e.message), (ErrorKind::Unsupported, why));
        }
    }

    let set = MemsetParams { dst: a, value: 0xdead_beef, element_size: 4, width: 64, height: 1, pitch: 0 };
    let set_node = rt.add_memset_node(g, &[], &set).unwrap();
    let back = rt.memset_node_read(set_node).unwrap();
    assert_eq!((back.dst, back.value, back.element_size, back.width, back.height), (a, 0xdead_beef, 4, 64, 1));

    let changed_args = pack(&args::axpy(a, b, -1.0, 7));
    rt.kernel_node_set(kernel, &KernelParams { args: &changed_args, ..kparams }).unwrap();
    assert_eq!(rt.kernel_node_read(kernel).unwrap().args.unwrap(), changed_args);

    let child = rt.graph_create().unwrap();
    rt.add_empty_node(child, &[]).unwrap();
    rt.add_empty_node(child, &[]).unwrap();
    let child_node = rt.add_child_node(g, &[], child).unwrap();
    let embedded = rt.child_node_graph(child_node).unwrap();
    assert_eq!(rt.graph_nodes(embedded).unwrap().len(), 2);

    assert!(rt.graph_edges(g).unwrap().is_empty());
    let new_edges = [
        Edge { from: kernel, to: copy_node, data: EdgeData::default() },
        Edge { from: set_node, to: child_node, data: EdgeData::default() },
    ];
    rt.add_edges(g, &new_edges).unwrap();
    let mut got: Vec<(rocm_cmdbuf::runtime::Node, rocm_cmdbuf::runtime::Node, EdgeData)> =
        rt.graph_edges(g).unwrap().iter().map(|e| (e.from, e.to, e.data)).collect();
    let mut want: Vec<_> = new_edges.iter().map(|e| (e.from, e.to, e.data)).collect();
    got.sort_by_key(|e| (e.0.0 as usize, e.1.0 as usize));
    want.sort_by_key(|e| (e.0.0 as usize, e.1.0 as usize));
    assert_eq!(got, want);
    rt.graph_destroy(child).unwrap();
    rt.graph_destroy(g).unwrap();
}

#[test]
fn one_physical_chunk_mapped_twice_is_seen_through_both_ranges() {
    let Some(rt) = common::runtime() else { return };
    let Some(granularity) = common::supported("VMM", rt.vmm().and_then(|vmm| vmm.granularity(0))) else { return };
    assert!(granularity > 0);
    let k = common::kernels(rt, 0);
    let vmm = rt.vmm().unwrap();
    let chunk = vmm.create(0, granularity).unwrap();
    let (r1, r2) = (vmm.reserve(granularity, granularity).unwrap(), vmm.reserve(granularity, granularity).unwrap());
    assert_ne!(r1, r2);
    for r in [r1, r2] {
        vmm.map(r, granularity, chunk).unwrap();
        vmm.set_access(r, granularity, &[0]).unwrap();
    }
    let s = stream(rt);
    let words = (granularity / 4) as u64;
    common::run(rt, k.fill_u32, &args::fill(r1, 0x5a5a_0001, words), s);
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_u32(rt, r2, N), vec![0x5a5a_0001; N], "written through r1, read through r2");
    rt.direct().copy_to_device(r2 + 4 * 10, &7u32.to_le_bytes()).unwrap();
    assert_eq!(common::download_u32(rt, r1 + 4 * 10, 1), vec![7]);
    for r in [r1, r2] {
        vmm.unmap(r, granularity).unwrap();
        vmm.free_range(r, granularity).unwrap();
    }
    vmm.release(chunk).unwrap();
    rt.stream_destroy(s).unwrap();
}

#[test]
fn stream_writes_land_in_signal_memory_after_earlier_work() {
    let Some(rt) = common::runtime() else { return };
    let Some(signal) = common::supported("stream memory operations", rt.stream_memory().and_then(|memory| memory.signal_alloc(0))) else {
        return;
    };
    // SAFETY: the signal is 8 aligned host-visible bytes that the GPU writes atomically.
    let host = unsafe { AtomicU64::from_ptr(signal.host) };
    host.store(0, Ordering::Release);
    let memory = rt.stream_memory().unwrap();
    let k = common::kernels(rt, 0);
    let s = stream(rt);
    memory.stream_write_u64(s, signal.device, 1).unwrap();
    common::run(rt, k.sleep, &args::sleep(20_000), s);
    memory.stream_write_u64(s, signal.device, 0x1_0000_0002).unwrap();
    while !rt.stream_is_idle(s).unwrap() {
        std::thread::yield_now();
    }
    assert_eq!(host.load(Ordering::Acquire), 0x1_0000_0002, "the last write in stream order");
    memory.signal_free(signal).unwrap();
    rt.stream_destroy(s).unwrap();
}

#[test]
fn stream_flags_are_kept_and_priorities_clamped_to_the_device_range() {
    let Some(rt) = common::runtime() else { return };
    let (least, greatest) = rt.stream_priority_range(0).unwrap();
    assert!(greatest <= least, "greater priority is numerically lower: ({least}, {greatest})");
    let cases = [(1, greatest - 100, greatest), (0, least + 100, least), (1, least, least)];
    for (flags, asked, got) in cases {
        let s = rt.stream_create(0, flags, asked).unwrap();
        assert_eq!(rt.stream_flags(s).unwrap() & 1, flags, "non-blocking flag for priority {asked}");
        assert_eq!(rt.stream_priority(s).unwrap(), got, "priority {asked} clamped into ({least}, {greatest})");
        assert!(rt.stream_is_idle(s).unwrap());
        rt.stream_destroy(s).unwrap();
    }
}

#[test]
fn device_to_device_async_copies_follow_stream_order() {
    let Some(rt) = common::runtime() else { return };
    let k = common::kernels(rt, 0);
    let (a, b) = (zeroed(rt), zeroed(rt));
    let s = stream(rt);
    common::run(rt, k.fill_u32, &args::fill(a, 77, N as u64), s);
    rt.copy_device_async(b, a, N * 4, s).unwrap();
    rt.stream_synchronize(s).unwrap();
    assert_eq!(common::download_u32(rt, b, N), vec![77; N]);
    rt.stream_destroy(s).unwrap();
}

#[test]
fn any_thread_can_call_in() {
    let Some(rt) = common::runtime() else { return };
    let results: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4u32)
            .map(|i| {
                scope.spawn(move || {
                    let k = common::kernels(rt, 0);
                    let p = zeroed(rt);
                    let s = stream(rt);
                    rt.direct().launch_kernel(&launch(k.fill_u32, &pack(&args::fill(p, 100 + i, N as u64))), s).unwrap();
                    rt.stream_synchronize(s).unwrap();
                    rt.stream_destroy(s).unwrap();
                    let got = common::download_u32(rt, p, N);
                    rt.free(p).unwrap();
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, got) in results.iter().enumerate() {
        assert_eq!(*got, vec![100 + i as u32; N]);
    }
}

#[test]
fn bad_devices_are_invalid_arguments_and_runtime_errors_name_the_call() {
    let Some(rt) = common::runtime() else { return };
    let count = rt.info().device_count;
    for device in [-1, count, 99] {
        let e = rt.malloc(device, 64).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
        assert!(e.message.contains(&format!("device {device}")), "{}", e.message);
        assert_eq!(rt.stream_create(device, 0, 0).unwrap_err().kind, ErrorKind::InvalidArgument);
    }
    let k = common::kernels(rt, 0);
    let e = rt.direct().module_function(k.module, "rcb_test_no_such_kernel").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Runtime, "{e}");
    assert!(e.message.contains("ModuleGetFunction") && e.message.contains("rcb_test_no_such_kernel"), "{}", e.message);
    let e = rt.direct().module_function(k.module, "nul\0name").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
}
