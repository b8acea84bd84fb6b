//! Flattening children into a command buffer through the C ABI: a command buffer child, captured
//! graphs (both kernel argument styles, memcpy, memset), launch attributes carried over (through
//! each runtime's own attribute calls), nested child graphs, the whole-child
//! fallback (host node, `kernelParams` on HIP, memcpy nodes whose report cannot be trusted or is
//! no plain 1-D device copy) with dependencies kept, opaque kernels (a kernel that reads its
//! buffer's address from device memory, on `RCB_OPAQUE_KERNELS`: never patched, every move
//! refused), and the error paths (a failed add leaves the parent as it was). Runs
//! on the software GPU by default and on CUDA with `RCB_BACKEND=cuda`.

#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "the tests call the C ABI and the runtime on locals and handles they own throughout; each call's contract is the header's"
)]

mod cmdbuf_helpers;
mod common;

use cmdbuf_helpers::*;
use common::{args, fails, last_error, ok, pack};
use rocm_cmdbuf::ffi::*;
use rocm_cmdbuf::runtime::{Backend, CaptureMode, Graph, MemcpyReadBack, Node};
use std::ffi::c_void;
use std::ptr::{null, null_mut};

fn flatten(cb: &Cb, deps: &[rcb_node], child: *const rcb_cmdbuf, graph: Graph) -> Result<(rcb_node, rcb_flatten_report), rcb_status> {
    let mut group = 0;
    let mut report = rcb_flatten_report { flattened: 9, nodes: 9, sites: 9, reason: [0; RCB_FLATTEN_REASON_LEN], ..Default::default() };
    let s = unsafe { rcb_cmdbuf_add_flattened_child(cb.0, deps.as_ptr(), deps.len(), child, graph.0, &mut group, &mut report) };
    if s == RCB_OK { Ok((group, report)) } else { Err(s) }
}

fn reason(r: &rcb_flatten_report) -> String {
    unsafe { std::ffi::CStr::from_ptr(r.reason.as_ptr()) }.to_string_lossy().into_owned()
}

fn node_count(cb: &Cb) -> usize {
    let mut n = 0;
    ok(unsafe { rcb_cmdbuf_node_count(cb.0, &mut n) });
    n
}

/// Packed arguments of the fill and axpy kernels over `N` elements.
fn fill_args(x: u64, value: u32) -> Vec<u8> {
    pack(&args::fill(x, value, N as u64))
}

fn axpy_args(y: u64, x: u64, a: f32) -> Vec<u8> {
    pack(&args::axpy(y, x, a, N as u64))
}

/// Driver entry points the `Runtime` interface does not need, from the backend's own library:
/// HIP (hipsim) and the CUDA driver export them with the same shapes under two names.
struct DriverApi {
    lib: libloading::Library,
    cuda: bool,
}

type LaunchFn =
    unsafe extern "C" fn(*mut c_void, u32, u32, u32, u32, u32, u32, u32, *mut c_void, *mut *mut c_void, *mut *mut c_void) -> i32;
type MemsetD32Fn = unsafe extern "C" fn(u64, u32, usize, *mut c_void) -> i32;
/// `hipGraphKernelNodeSetAttribute` / `cuGraphKernelNodeSetAttribute` (and the getters): node,
/// attribute id, value (a union whose `int` members start at offset 0; 64 bytes at most).
type NodeAttributeFn = unsafe extern "C" fn(*mut c_void, i32, *mut c_void) -> i32;
/// The launch attribute the attribute test sets, and the value it sets: on HIP the cooperative
/// one (2; clr refuses every priority), on CUDA the priority (8; on the H200, CUDA answered
/// `CUDA_ERROR_INVALID_VALUE` to the cooperative attribute on this test's kernel node).
const ATTRIBUTE_COOPERATIVE: i32 = 2;
const ATTRIBUTE_PRIORITY: i32 = 8;

impl DriverApi {
    fn of(gpu: &Gpu) -> DriverApi {
        let cuda = gpu.rt.info().backend == Backend::Cuda;
        let (var, default) = if cuda { ("RCB_CUDA_LIBRARY", "libcuda.so.1") } else { ("RCB_HIP_LIBRARY", "libamdhip64.so.6") };
        let path = std::env::var_os(var).unwrap_or_else(|| default.into());
        DriverApi { lib: unsafe { libloading::Library::new(path) }.unwrap(), cuda }
    }

    fn sym<T: Copy>(&self, hip: &str, cuda: &str) -> T {
        let name = format!("{}\0", if self.cuda { cuda } else { hip });
        unsafe { *self.lib.get::<T>(name.as_bytes()).unwrap() }
    }

    /// A `kernelParams`-style launch: one pointer per argument, into `args` at `offsets`.
    fn launch_kernel_params(&self, f: rocm_cmdbuf::runtime::Function, args: &mut [u8], offsets: &[usize], stream: *mut c_void) {
        let launch: LaunchFn = self.sym("hipModuleLaunchKernel", "cuLaunchKernel");
        let mut params: Vec<*mut c_void> = offsets.iter().map(|&o| unsafe { args.as_mut_ptr().add(o) } as *mut c_void).collect();
        let rc = unsafe { launch(f.0, 1, 1, 1, N as u32, 1, 1, 0, stream, params.as_mut_ptr(), null_mut()) };
        assert_eq!(rc, 0);
    }

    fn memset_d32_async(&self, dst: u64, value: u32, count: usize, stream: *mut c_void) {
        let f: MemsetD32Fn = self.sym("hipMemsetD32Async", "cuMemsetD32Async");
        assert_eq!(unsafe { f(dst, value, count, stream) }, 0);
    }

    /// The attribute the test sets, and a value for it other than its default (0 for both).
    fn test_attribute(&self) -> (i32, i32) {
        if self.cuda { (ATTRIBUTE_PRIORITY, -1) } else { (ATTRIBUTE_COOPERATIVE, 1) }
    }

    fn set_attribute(&self, node: Node) {
        let f: NodeAttributeFn = self.sym("hipGraphKernelNodeSetAttribute", "cuGraphKernelNodeSetAttribute");
        let (id, value) = self.test_attribute();
        let mut v = [0i32; 16];
        v[0] = value;
        assert_eq!(unsafe { f(node.0, id, v.as_mut_ptr().cast()) }, 0);
    }

    fn attribute(&self, node: Node) -> i32 {
        let f: NodeAttributeFn = self.sym("hipGraphKernelNodeGetAttribute", "cuGraphKernelNodeGetAttribute");
        let mut v = [-7i32; 16];
        assert_eq!(unsafe { f(node.0, self.test_attribute().0, v.as_mut_ptr().cast()) }, 0);
        v[0]
    }

    /// A memcpy node copying `bytes` from pinned host memory at `src` to `dst`: a copy the
    /// flattener does not re-create (it re-creates device-to-device copies only).
    fn add_host_to_device_copy(&self, graph: Graph, dst: u64, src: *mut u64, bytes: usize) -> Node {
        let mut node = null_mut();
        if self.cuda {
            type CtxFn = unsafe extern "C" fn(*mut *mut c_void) -> i32;
            type AddFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, *const u8, *mut c_void) -> i32;
            let mut ctx = null_mut();
            assert_eq!(unsafe { self.sym::<CtxFn>("", "cuCtxGetCurrent")(&mut ctx) }, 0);
            // CUDA_MEMCPY3D: srcMemoryType HOST (1) and srcHost, dstMemoryType DEVICE (2) and
            // dstDevice, then WidthInBytes, Height and Depth.
            let mut p = [0u8; 200];
            p[32..36].copy_from_slice(&1u32.to_le_bytes());
            p[40..48].copy_from_slice(&(src as u64).to_le_bytes());
            p[120..124].copy_from_slice(&2u32.to_le_bytes());
            p[136..144].copy_from_slice(&dst.to_le_bytes());
            p[176..184].copy_from_slice(&(bytes as u64).to_le_bytes());
            p[184..192].copy_from_slice(&1u64.to_le_bytes());
            p[192..200].copy_from_slice(&1u64.to_le_bytes());
            let add: AddFn = self.sym("", "cuGraphAddMemcpyNode");
            assert_eq!(unsafe { add(&mut node, graph.0, null(), 0, p.as_ptr(), ctx) }, 0);
        } else {
            type AddFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, u64, *mut u64, usize, i32) -> i32;
            let add: AddFn = self.sym("hipGraphAddMemcpyNode1D", "");
            // hipMemcpyHostToDevice.
            assert_eq!(unsafe { add(&mut node, graph.0, null(), 0, dst, src, bytes, 1) }, 0);
        }
        Node(node)
    }

    /// A memory allocation node of `bytes` on device 0 (`hipMemAllocNodeParams` and
    /// `CUDA_MEM_ALLOC_NODE_PARAMS`: 88 bytes of pool properties, whose allocation type and
    /// location are the first words, then the access descriptors, the size and the address).
    fn add_mem_alloc_node(&self, graph: Graph, bytes: usize) -> (Node, u64) {
        type AddFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, *mut u8) -> i32;
        let mut p = [0u8; 120];
        // Pinned (1) memory on a device (location type 1), device 0.
        p[0..4].copy_from_slice(&1u32.to_le_bytes());
        p[8..12].copy_from_slice(&1u32.to_le_bytes());
        p[104..112].copy_from_slice(&(bytes as u64).to_le_bytes());
        let add: AddFn = self.sym("hipGraphAddMemAllocNode", "cuGraphAddMemAllocNode");
        let mut node = null_mut();
        assert_eq!(unsafe { add(&mut node, graph.0, null(), 0, p.as_mut_ptr()) }, 0);
        (Node(node), u64::from_le_bytes(p[112..120].try_into().unwrap()))
    }

    /// CUDA only: an IF conditional node whose body sets `dst` (`n` 32-bit words) to `value`.
    fn add_conditional_node(&self, gpu: &Gpu, graph: Graph, dst: u64, value: u32, n: usize) -> Node {
        type CtxFn = unsafe extern "C" fn(*mut *mut c_void) -> i32;
        type HandleFn = unsafe extern "C" fn(*mut u64, *mut c_void, *mut c_void, u32, u32) -> i32;
        type AddFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, *mut u8) -> i32;
        let mut ctx = null_mut();
        assert_eq!(unsafe { self.sym::<CtxFn>("", "cuCtxGetCurrent")(&mut ctx) }, 0);
        let mut handle = 0u64;
        // Default value 1 with CU_GRAPH_COND_ASSIGN_DEFAULT (1): the body runs unless a kernel says otherwise.
        assert_eq!(unsafe { self.sym::<HandleFn>("", "cuGraphConditionalHandleCreate")(&mut handle, graph.0, ctx, 1, 1) }, 0);
        // CUgraphNodeParams (256 bytes): type CU_GRAPH_NODE_TYPE_CONDITIONAL (13), then at 16
        // CUDA_CONDITIONAL_NODE_PARAMS: handle, type IF (0), size 1, phGraph_out (set by the
        // driver), ctx.
        let mut p = [0u8; 256];
        p[0..4].copy_from_slice(&13u32.to_le_bytes());
        p[16..24].copy_from_slice(&handle.to_le_bytes());
        p[28..32].copy_from_slice(&1u32.to_le_bytes());
        p[40..48].copy_from_slice(&(ctx as u64).to_le_bytes());
        let mut node = null_mut();
        assert_eq!(unsafe { self.sym::<AddFn>("", "cuGraphAddNode")(&mut node, graph.0, null(), 0, p.as_mut_ptr()) }, 0);
        let bodies = u64::from_le_bytes(p[32..40].try_into().unwrap()) as *const *mut c_void;
        let body = Graph(unsafe { *bodies });
        let set = rocm_cmdbuf::runtime::MemsetParams { dst, value, element_size: 4, width: n, height: 1, pitch: n * 4 };
        gpu.rt.add_memset_node(body, &[], &set).unwrap();
        Node(node)
    }
}

fn u32s(gpu: &Gpu, ptr: u64) -> Vec<u32> {
    common::download_u32(gpu.rt, ptr, N)
}

fn zeroed(gpu: &Gpu) -> u64 {
    gpu.upload(&[0.0; N])
}

#[test]
fn a_command_buffer_child_keeps_its_layout_and_its_nodes_move_with_the_parent() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let k = &gpu.k;
    let (x, y, out, z) = mixed_buffers(&gpu, 1.0);
    // child: fill(x = 1.0) → axpy(y += 2x); memset(z = 5) alone.
    let child = Cb::nested();
    let a = child.kernel(&[], k.fill_u32, N as u64, &args::fill(x, 1.0f32.to_bits(), N as u64));
    child.kernel(&[a], k.axpy_f32, N as u64, &args::axpy(y, x, 2.0, N as u64));
    child.memset(&[], z, 5, 4, N as u64);
    child.finalize();

    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (out, BYTES), (z, BYTES)]);
    let (group, report) = flatten(&parent, &[], child.0, Graph(null_mut())).unwrap();
    assert_eq!((report.flattened, report.nodes, report.sites), (1, 3, 4), "{}", reason(&report));
    assert_eq!(node_count(&parent), 4, "two exit nodes: a join node is added");
    parent.kernel(&[group], k.add_f32, N as u64, &args::add(out, x, y, N as u64));
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!(gpu.read(out, N), vec![4.0; N], "out = x + (y + 2x) = 1 + 3");
    assert_eq!(u32s(&gpu, z), vec![5; N]);

    let (x2, y2, out2, z2) = (zeroed(&gpu), gpu.upload(&[10.0; N]), zeroed(&gpu), zeroed(&gpu));
    let r = parent.update_allocs(&[(x2, BYTES), (y2, BYTES), (out2, BYTES), (z2, BYTES)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.needs_rerecord), (4, 7, 0));
    parent.launch(&gpu);
    assert_eq!(gpu.read(out2, N), vec![13.0; N]);
    assert_eq!(u32s(&gpu, z2), vec![5; N]);
    assert_eq!(gpu.read(y, N), vec![3.0; N], "the old buffers are not touched any more");
}

/// A range as a child records it: `distance(out, begin, end)` and `distance(out + 8, out, end)`
/// (the length, and where the end points as seen from `out`), each end named as one past
/// allocation 0, which the child's table says begins at `begin`.
fn range_child(gpu: &Gpu, begin: u64, out: u64) -> Cb {
    let child = Cb::nested();
    child.set_allocs(&[(begin, BYTES), (out, 16)]);
    let end: Vec<u8> = [0, BYTES].iter().flat_map(|w: &u64| w.to_ne_bytes()).collect();
    let ptr = |p: u64| p.to_ne_bytes().to_vec();
    let length = child.raw_kernel(
        &[],
        gpu.k.distance_u64,
        1,
        &[(&ptr(out), RCB_ARG_DEVICE_PTR), (&ptr(begin), RCB_ARG_DEVICE_PTR), (&end, RCB_ARG_ALLOCATION)],
    );
    child.raw_kernel(
        &[length],
        gpu.k.distance_u64,
        1,
        &[(&ptr(out + 8), RCB_ARG_DEVICE_PTR), (&ptr(out), RCB_ARG_DEVICE_PTR), (&end, RCB_ARG_ALLOCATION)],
    );
    child.finalize();
    child
}

/// The two words a range writes at `out`.
fn range_words(gpu: &Gpu, out: u64) -> [u64; 2] {
    let b = gpu.read_bytes(out, 16);
    [0, 8].map(|i| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes")))
}

/// A child's end pointer, named there, reaches the parent as an address one past an
/// allocation's end: the parent attributes it to that allocation and moves it with it.
#[test]
fn a_flattened_end_pointer_follows_its_allocation() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    // a is the first half of a buffer the table lists nothing else of.
    let (a, out) = (gpu.upload(&[0.0; 2 * N]), gpu.upload(&[0.0; 4]));
    let child = range_child(&gpu, a, out);
    let parent = Cb::primary();
    parent.set_allocs(&[(a, BYTES), (out, 16)]);
    let (_, report) = flatten(&parent, &[], child.0, Graph(null_mut())).unwrap();
    assert_eq!((report.flattened, report.sites), (1, 6), "{}", reason(&report));
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!(range_words(&gpu, out), [BYTES, (a + BYTES).wrapping_sub(out)]);

    let a2 = gpu.upload(&[0.0; 2 * N]);
    let r = parent.move_allocs(&[(0, a2)]);
    parent.launch(&gpu);
    assert_eq!(range_words(&gpu, out), [BYTES, (a2 + BYTES).wrapping_sub(out)], "the end moved with a");
    assert_eq!((r.patched_sites, r.needs_rerecord), (3, 0));
}

/// Buffers x, y, d, z for `capture_mixed`: y holds `y`, the others zeros.
fn mixed_buffers(gpu: &Gpu, y: f32) -> (u64, u64, u64, u64) {
    (zeroed(gpu), gpu.upload(&[y; N]), zeroed(gpu), zeroed(gpu))
}

/// Captures fill(x) [extra] → axpy(y += 2x) [extra] → memcpy(d ← y) and memset(z) on a stream.
fn capture_mixed(gpu: &Gpu, api: &DriverApi, x: u64, y: u64, d: u64, z: u64) -> Graph {
    let rt = gpu.rt;
    rt.begin_capture(gpu.stream, CaptureMode::ThreadLocal).unwrap();
    common::run(rt, gpu.k.fill_u32, &args::fill(x, 2.0f32.to_bits(), N as u64), gpu.stream);
    common::run(rt, gpu.k.axpy_f32, &args::axpy(y, x, 0.5, N as u64), gpu.stream);
    rt.copy_device_async(d, y, BYTES as usize, gpu.stream).unwrap();
    api.memset_d32_async(z, 9, N, gpu.stream.0);
    rt.end_capture(gpu.stream).unwrap()
}

#[test]
fn a_captured_graph_is_flattened_launched_and_relocated() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let (x, y, d, z) = mixed_buffers(&gpu, 1.0);
    let g = capture_mixed(&gpu, &api, x, y, d, z);

    let parent = Cb::primary();
    // The table comes after the flatten: sites are found again from the scanned words.
    let (group, report) = flatten(&parent, &[], null(), g).unwrap();
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (d, BYTES), (z, BYTES)]);
    assert_eq!((report.flattened, report.nodes), (1, 4), "{}", reason(&report));
    // fill: x; axpy: y, x; memcpy: d, y; memset: z. The scanned n (64) and a are no addresses.
    assert_eq!(parent.sites(), 6);
    let e = parent.memset(&[group], x, 0, 4, 1);
    parent.finalize();
    gpu.rt.graph_destroy(g).unwrap();
    parent.launch(&gpu);
    assert_eq!(gpu.read(d, N), vec![2.0; N], "d = y + 0.5 * 2");
    assert_eq!(u32s(&gpu, z), vec![9; N]);
    assert_eq!(u32s(&gpu, x)[0], 0, "the node after the group ran last");
    assert_ne!(e, group);

    let (x2, y2, d2, z2) = mixed_buffers(&gpu, 5.0);
    let r = parent.update_allocs(&[(x2, BYTES), (y2, BYTES), (d2, BYTES), (z2, BYTES)]);
    assert_eq!((r.patched_sites, r.updated_nodes, r.needs_rerecord), (7, 5, 0));
    parent.launch(&gpu);
    assert_eq!(gpu.read(d2, N), vec![6.0; N]);
    assert_eq!(u32s(&gpu, z2), vec![9; N]);
    assert_eq!(gpu.read(d, N), vec![2.0; N], "old buffers untouched");
}

#[test]
fn kernel_params_launches_are_flattened_with_a_known_layout_and_fall_back_on_hip() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let (x, y, d) = (zeroed(&gpu), gpu.upload(&[1.0; N]), zeroed(&gpu));
    let rt = gpu.rt;
    rt.begin_capture(gpu.stream, CaptureMode::ThreadLocal).unwrap();
    common::run(rt, gpu.k.fill_u32, &args::fill(x, 2.0f32.to_bits(), N as u64), gpu.stream);
    api.launch_kernel_params(gpu.k.axpy_f32, &mut axpy_args(y, x, 0.5), &[0, 8, 16, 24], gpu.stream.0);
    let g = rt.end_capture(gpu.stream).unwrap();

    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (d, BYTES)]);
    let (group, report) = flatten(&parent, &[], null(), g).unwrap();
    if api.cuda {
        // cuFuncGetParamInfo gives the layout. Sites: fill's x; axpy's y and x (a and n are no
        // addresses).
        assert_eq!((report.flattened, report.nodes, report.sites), (1, 2, 3), "{}", reason(&report));
        assert_eq!(node_count(&parent), 2);
    } else {
        assert_eq!((report.flattened, report.nodes, report.sites), (0, 2, 0));
        assert!(reason(&report).contains("kernelParams"), "{}", reason(&report));
        assert_eq!(node_count(&parent), 1, "one cloned child node");
    }
    parent.memcpy(&[group], d, y, BYTES);
    parent.finalize();
    rt.graph_destroy(g).unwrap();
    parent.launch(&gpu);
    assert_eq!(gpu.read(d, N), vec![2.0; N], "d = y + 0.5 * 2");
    if report.flattened == 1 {
        let y2 = gpu.upload(&[5.0; N]);
        let r = parent.update_allocs(&[(x, BYTES), (y2, BYTES), (d, BYTES)]);
        assert_eq!((r.patched_sites, r.updated_nodes, r.needs_rerecord), (2, 2, 0), "axpy's y and the memcpy's source");
        parent.launch(&gpu);
        assert_eq!(gpu.read(d, N), vec![6.0; N], "d = y2 + 0.5 * 2");
    } else {
        let y2 = gpu.upload(&[5.0; N]);
        let r = parent.update_allocs(&[(x, BYTES), (y2, BYTES), (d, BYTES)]);
        assert_eq!(r, rcb_update_report { needs_rerecord: 1, ..Default::default() }, "the fallback clone reads y: refused, not stale");
    }
}

/// child = sleep(20 ms) → fill(x = 7) with whatever `odd` adds beside them; the parent copies x
/// after the group, so it sees 7 only if it waited for the whole child.
fn sleeping_child(gpu: &Gpu, x: u64, odd: impl FnOnce(Graph)) -> Graph {
    let rt = gpu.rt;
    let g = rt.graph_create().unwrap();
    let s = rt.add_kernel_node(g, &[], &common::launch(gpu.k.sleep, &pack(&args::sleep(20_000)))).unwrap();
    rt.add_kernel_node(g, &[s], &common::launch(gpu.k.fill_u32, &fill_args(x, 7))).unwrap();
    odd(g);
    g
}

fn assert_fallback_keeps_dependencies(gpu: &Gpu, g: Graph, x: u64, expect_reason: &str) {
    let d = zeroed(gpu);
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (d, BYTES)]);
    let (group, report) = flatten(&parent, &[], null(), g).unwrap();
    assert_eq!((report.flattened, report.sites), (0, 0));
    assert!(reason(&report).contains(expect_reason), "{}", reason(&report));
    parent.memcpy(&[group], d, x, BYTES);
    assert_eq!(node_count(&parent), 2, "nothing of the child is dropped or duplicated");
    parent.finalize();
    parent.launch(gpu);
    assert_eq!(u32s(gpu, d), vec![7; N], "the copy waited for all of the child");
    // The fallback clone's addresses are unknown: even d, which only the parent's copy writes,
    // does not move in place (it would have, silently leaving x stale had x moved too).
    let (x2, d2) = (zeroed(gpu), zeroed(gpu));
    let refused = rcb_update_report { needs_rerecord: 1, ..Default::default() };
    assert_eq!(parent.move_allocs(&[(1, d2)]), refused);
    assert_eq!(parent.update_allocs(&[(x2, BYTES), (d2, BYTES)]), refused);
    gpu.write(d, &[0.0; N]);
    parent.launch(gpu);
    assert_eq!(u32s(gpu, d), vec![7; N], "nothing moved");
    assert_eq!(u32s(gpu, d2), vec![0; N]);
}

/// Pinned host memory (8 bytes) and a device word, for a copy from the host that the flattener
/// does not re-create; freed when dropped.
struct HostWord<'a> {
    gpu: &'a Gpu,
    signal: rocm_cmdbuf::runtime::Signal,
    device: u64,
}

impl<'a> HostWord<'a> {
    fn new(gpu: &'a Gpu) -> Self {
        HostWord { gpu, signal: gpu.rt.stream_memory().unwrap().signal_alloc(0).unwrap(), device: gpu.rt.malloc(0, 8).unwrap() }
    }

    fn add_copy(&self, api: &DriverApi, g: Graph) {
        api.add_host_to_device_copy(g, self.device, self.signal.host, 8);
    }
}

impl Drop for HostWord<'_> {
    fn drop(&mut self) {
        let _ = self.gpu.rt.stream_memory().map(|m| m.signal_free(self.signal));
        let _ = self.gpu.rt.free(self.device);
    }
}

#[test]
fn a_child_with_a_copy_from_the_host_falls_back_whole_with_dependencies_intact() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let x = zeroed(&gpu);
    let word = HostWord::new(&gpu);
    let g = sleeping_child(&gpu, x, |g| word.add_copy(&api, g));
    assert_fallback_keeps_dependencies(&gpu, g, x, "memcpy");
    gpu.rt.graph_destroy(g).unwrap();
}

#[test]
fn a_flattened_kernel_node_keeps_its_launch_attributes() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let rt = gpu.rt;
    let (x, y) = (zeroed(&gpu), zeroed(&gpu));
    // fill(x = 7) → fill(y = 9); the first has the attribute set.
    let g = rt.graph_create().unwrap();
    let marked = rt.add_kernel_node(g, &[], &common::launch(gpu.k.fill_u32, &fill_args(x, 7))).unwrap();
    rt.add_kernel_node(g, &[marked], &common::launch(gpu.k.fill_u32, &fill_args(y, 9))).unwrap();
    api.set_attribute(marked);
    let set = api.test_attribute().1;
    assert_eq!(api.attribute(marked), set, "the runtime keeps the attribute on the source");

    let parent = Cb::primary();
    // HIP copies attributes source first (CUDA destination first): called in CUDA's order, the
    // runtime sees the new node as the source and fails on the old one's attribute.
    let (_, report) = flatten(&parent, &[], null(), g).unwrap_or_else(|s| panic!("{s}: {}", last_error()));
    assert_eq!((report.flattened, report.nodes), (1, 2), "{}", reason(&report));
    let mut template = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(parent.0, &mut template) });
    let copies = rt.graph_nodes(Graph(template)).unwrap();
    assert_eq!(copies.len(), 2);
    assert_eq!((api.attribute(copies[0]), api.attribute(copies[1])), (set, 0), "the attribute reached its own node's copy only");
    parent.finalize();
    rt.graph_destroy(g).unwrap();
    parent.launch(&gpu);
    assert_eq!((u32s(&gpu, x), u32s(&gpu, y)), (vec![7; N], vec![9; N]));
}

/// A kernel node whose arguments take more bytes than any launch can (32 764; only the software
/// GPU makes one) is not flattened, since its pointer offsets would not fit a site: the child
/// becomes one cloned child node, counted as `flattened_as_child`, that still runs whole.
#[test]
fn a_kernel_node_with_more_argument_bytes_than_a_launch_takes_is_cloned_not_flattened() {
    // hipsim's quirks are process-wide.
    let _serial = common::serial();
    let Some(_sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let wide = rt.direct().module_function(gpu.k.module, "rcb_test_wide_args_u64").unwrap();
    let out = zeroed(&gpu);
    // `out`, then 4096 words (the last 4096): 32 776 bytes.
    let blob: Vec<u8> = std::iter::once(out).chain(1..=4096).flat_map(u64::to_ne_bytes).collect();
    let g = rt.graph_create().unwrap();
    rt.add_kernel_node(g, &[], &common::launch(wide, &blob)).unwrap();
    let parent = Cb::primary();
    parent.set_allocs(&[(out, BYTES)]);
    let (_, report) = flatten(&parent, &[], null(), g).unwrap_or_else(|s| panic!("{s}: {}", last_error()));
    assert_eq!((report.flattened, report.nodes, report.sites), (0, 1, 0), "{}", reason(&report));
    assert!(reason(&report).contains("32776 bytes"), "{}", reason(&report));
    assert_eq!(fallbacks(&parent)[RCB_FALLBACK_FLATTENED_AS_CHILD as usize], 1);
    assert_eq!(node_count(&parent), 1);
    parent.finalize();
    rt.graph_destroy(g).unwrap();
    parent.launch(&gpu);
    assert_eq!(gpu.read_bytes(out, 8), 4096u64.to_ne_bytes(), "the clone got every argument byte");
}

/// The HIP versions whose 1-D memcpy nodes report their parameters (as they were created): 7.2,
/// the last one read.
const HIP_7_2: std::ops::Range<i32> = 70_200_000..70_300_000;

fn fallbacks(cb: &Cb) -> [u64; RCB_FALLBACK_REASON_SLOTS] {
    let mut c = rcb_counters::default();
    ok(unsafe { rcb_counters_get(cb.0, &mut c) });
    c.fallbacks
}

/// Flattens `source` (a raw graph or a command buffer) into a new primary and asserts that it was
/// flattened when `trusted`, else that it fell back for its memcpy node with a reason naming the
/// runtime's version; then runs it (`d` must then hold 1.0 everywhere) either way.
fn flatten_memcpy_source(gpu: &Gpu, child: *const rcb_cmdbuf, graph: Graph, trusted: bool, d: u64, why: &str) {
    let parent = Cb::primary();
    let (_, report) = flatten(&parent, &[], child, graph).unwrap();
    let counted = fallbacks(&parent);
    if trusted {
        assert_eq!(report.flattened, 1, "{why}: {}", reason(&report));
        assert_eq!(counted.iter().sum::<u64>(), 0);
    } else {
        let version = gpu.rt.info().version;
        let hip = format!("HIP {}.{}.{}", version / 10_000_000, version / 100_000 % 100, version % 100_000);
        assert_eq!(report.flattened, 0, "{why}");
        assert!(reason(&report).contains("memcpy") && reason(&report).contains(&hip), "{why}: {}", reason(&report));
        assert_eq!(
            (counted[RCB_FALLBACK_MEMCPY_UNREADABLE as usize], counted[RCB_FALLBACK_FLATTENED_AS_CHILD as usize]),
            (1, 0),
            "{why}: counted as its own reason"
        );
    }
    parent.finalize();
    parent.launch(gpu);
    assert_eq!(gpu.read(d, N), vec![1.0; N], "{why}: the copy ran where its node was last set to");
}

/// A memcpy node is re-created from what the runtime reports of it only where that report can be
/// trusted: CUDA always; HIP 7.2 for a node no command buffer changed, at the top level of the
/// child (a nested graph is a clone, which cannot tell whether it was made from a changed
/// template); HIP before 7.2 never (it does not fill a 1-D node's parameters: the software GPU
/// then reports zeros, a 0-byte copy that a blind read-back would flatten and the launch would
/// skip), nor after 7.2 (not yet read). Run at the software GPU's default version (7.2.4) here
/// and at 5.7.1, 6.4.3 and 7.3.0 by `memcpy_read_back_follows_the_rocm_version`.
#[test]
fn memcpy_nodes_are_read_back_only_where_the_runtime_reports_them() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let fresh_ok = api.cuda || HIP_7_2.contains(&gpu.rt.info().version);
    // A fresh capture: y = 1 → d.
    let (x, y, d, z) = mixed_buffers(&gpu, 0.0);
    let g = capture_mixed(&gpu, &api, x, y, d, z);
    flatten_memcpy_source(&gpu, null(), g, fresh_ok, d, "a captured memcpy");
    gpu.rt.graph_destroy(g).unwrap();

    // A command buffer's memcpy node, moved by an update of its template: it copies into d2 now,
    // while HIP 7.2 still reports d. Flattened from the template, and from a command buffer
    // that embeds it.
    let (src, d, d2) = (gpu.upload(&[1.0; N]), zeroed(&gpu), zeroed(&gpu));
    let child = Cb::nested();
    child.set_allocs(&[(src, BYTES), (d, BYTES)]);
    child.memcpy(&[], d, src, BYTES);
    child.finalize();
    assert_eq!(child.update_allocs(&[(src, BYTES), (d2, BYTES)]).patched_sites, 1);
    let mut template = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(child.0, &mut template) });
    flatten_memcpy_source(&gpu, null(), Graph(template), api.cuda, d2, "the changed template");
    let holder = Cb::nested();
    let mut c = 0;
    ok(unsafe { rcb_cmdbuf_add_child(holder.0, null(), 0, child.0, &mut c) });
    holder.finalize();
    gpu.write(d2, &[0.0; N]);
    flatten_memcpy_source(&gpu, holder.0, Graph(null_mut()), api.cuda, d2, "a command buffer embedding it");
    // A graph of the caller's embedding a clone of it through the runtime: the clone is not the
    // template, and nothing tells where it came from.
    let raw = gpu.rt.graph_create().unwrap();
    gpu.rt.add_child_node(raw, &[], Graph(template)).unwrap();
    gpu.write(d2, &[0.0; N]);
    flatten_memcpy_source(&gpu, null(), raw, api.cuda, d2, "a raw graph embedding it");
    gpu.rt.graph_destroy(raw).unwrap();
    assert_eq!(gpu.read(d, N), vec![0.0; N], "nothing copied where the node no longer points");
}

/// Runs `memcpy_nodes_are_read_back_only_where_the_runtime_reports_them` again on the software
/// GPU modelling ROCm 5.7.1, 6.4.3 and 7.3.0 (which reports like 7.2 there, but has not been read
/// on AMD's side), each in a process of its own (the runtime's version is read once, when it is
/// loaded).
#[test]
fn memcpy_read_back_follows_the_rocm_version() {
    let Some(_sim) = common::hipsim_or_skip() else { return };
    for version in ["50731921", "60443484", "70300000"] {
        let test = "memcpy_nodes_are_read_back_only_where_the_runtime_reports_them";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--test-threads", "1"])
            .env("HIPSIM_VERSION", version)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "HIPSIM_VERSION={version}:\n{text}");
    }
}

/// `hipMemcpy3DParms` as the tests fill it: pitched pointers as (ptr, pitch, xsize, ysize).
#[repr(C)]
#[derive(Default)]
struct Memcpy3DParms {
    src_array: u64,
    src_pos: [u64; 3],
    src_ptr: [u64; 4],
    dst_array: u64,
    dst_pos: [u64; 3],
    dst_ptr: [u64; 4],
    extent: [u64; 3],
    kind: u64,
}

/// `HIP_MEMCPY3D` (`hipDrvGraphAddMemcpyNode`) as the tests fill it: per side x in bytes, y, z,
/// LOD, memory type, host, device, array, pitch, height; then width in bytes, height, depth.
#[repr(C)]
#[derive(Default)]
struct DrvMemcpy3D {
    src: [u64; 10],
    dst: [u64; 10],
    extent: [u64; 3],
}

type AddMemcpy3DFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, *const Memcpy3DParms) -> i32;
type AddMemcpy1DFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, u64, u64, usize, i32) -> i32;
type AddMemcpySymbolFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, u64, u64, usize, usize, i32) -> i32;
type AddDrvMemcpyFn =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, *const DrvMemcpy3D, *mut c_void) -> i32;

/// hipMemcpyKind.
const HOST_TO_DEVICE: i32 = 1;
const DEVICE_TO_HOST: i32 = 2;
const DEVICE_TO_DEVICE: i32 = 3;
const DEFAULT_KIND: i32 = 4;
/// hipMemoryTypeDevice.
const MEMORY_DEVICE: u64 = 2;

/// A graph holding the one memcpy node `add` makes in it (an added node, `hipSuccess`).
fn one_node_graph(gpu: &Gpu, add: impl FnOnce(*mut *mut c_void, *mut c_void) -> i32) -> Graph {
    let g = gpu.rt.graph_create().unwrap();
    let mut node = null_mut();
    assert_eq!(add(&mut node, g.0), 0);
    g
}

/// Flattens `g` into a new primary and asserts it fell back whole for a memcpy node that is no
/// plain 1-D device-to-device copy, with `needle` in the reason; then runs it.
fn flatten_refuses_the_copy(gpu: &Gpu, g: Graph, needle: &str) {
    let parent = Cb::primary();
    let (_, report) = flatten(&parent, &[], null(), g).unwrap();
    let why = reason(&report);
    assert_eq!(report.flattened, 0, "{needle}: {why}");
    assert!(why.contains("not a 1-D device-to-device copy") && why.contains(needle), "{needle}: {why}");
    assert_eq!(fallbacks(&parent)[RCB_FALLBACK_FLATTENED_AS_CHILD as usize], 1, "{needle}");
    assert_eq!(node_count(&parent), 1, "{needle}: one cloned child node");
    parent.finalize();
    parent.launch(gpu);
    gpu.rt.graph_destroy(g).unwrap();
}

/// The library re-creates a memcpy node as a 1-D device-to-device copy, so that is all it reads
/// a report as: HIP 7.2 reports every other memcpy node too (a 3-D node as given, one copying
/// from or to the host or of the default kind with its kind, a copy to or from a symbol with a
/// null destination or source, a driver node's HIP_MEMCPY3D as 3-D parameters), and re-created as
/// a 1-D device copy each would copy something else, or fault. Each falls back whole and runs
/// as it was made.
#[test]
fn memcpy_nodes_other_than_plain_device_copies_are_never_read_as_one() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    if gpu.rt.info().backend != Backend::Hip {
        common::skip("every check", "HIP's memcpy node calls and reports; the runtime is CUDA");
        return;
    }
    if !matches!(gpu.rt.memcpy_read_back(), MemcpyReadBack::AsCreated(_)) {
        common::skip("every check", format!("HIP {} reads no memcpy node back", gpu.rt.info().version));
        return;
    }
    let api = DriverApi::of(&gpu);
    let (ones, d) = (gpu.upload(&[1.0; N]), zeroed(&gpu));
    let bytes = BYTES as usize;

    // One row from row 1 of a pitched source (a captured hipMemcpyParam2DAsync or
    // hipMemcpy3DAsync of one row is such a node): row 0 holds zeros.
    let rows = gpu.upload(&[[0.0; N], [1.0; N]].concat());
    let add3: AddMemcpy3DFn = api.sym("hipGraphAddMemcpyNode", "");
    let p = Memcpy3DParms {
        src_pos: [0, 1, 0],
        src_ptr: [rows, BYTES, BYTES, 2],
        dst_ptr: [d, BYTES, BYTES, 1],
        extent: [BYTES, 1, 1],
        kind: DEVICE_TO_DEVICE as u64,
        ..Default::default()
    };
    let g = one_node_graph(&gpu, |node, g| unsafe { add3(node, g, null(), 0, &p) });
    flatten_refuses_the_copy(&gpu, g, "offset");
    assert_eq!(gpu.read(d, N), vec![1.0; N], "row 1 copied");

    // Copies of another kind: from and to the host, and of the default kind between device
    // buffers (re-created as a device copy, the first two fault).
    let add1: AddMemcpy1DFn = api.sym("hipGraphAddMemcpyNode1D", "");
    let host_ones = [1.0f32; N];
    let mut host = [0.0f32; N];
    gpu.write(d, &[0.0; N]);
    let g = one_node_graph(&gpu, |node, g| unsafe { add1(node, g, null(), 0, d, host_ones.as_ptr() as u64, bytes, HOST_TO_DEVICE) });
    flatten_refuses_the_copy(&gpu, g, "kind is 1");
    assert_eq!(gpu.read(d, N), vec![1.0; N]);
    let g = one_node_graph(&gpu, |node, g| unsafe { add1(node, g, null(), 0, host.as_mut_ptr() as u64, ones, bytes, DEVICE_TO_HOST) });
    flatten_refuses_the_copy(&gpu, g, "kind is 2");
    assert_eq!(host, [1.0; N]);
    gpu.write(d, &[0.0; N]);
    let g = one_node_graph(&gpu, |node, g| unsafe { add1(node, g, null(), 0, d, ones, bytes, DEFAULT_KIND) });
    flatten_refuses_the_copy(&gpu, g, "kind is 4");
    assert_eq!(gpu.read(d, N), vec![1.0; N]);

    // To and from a symbol (the software GPU takes a device address for one).
    let to_symbol: AddMemcpySymbolFn = api.sym("hipGraphAddMemcpyNodeToSymbol", "");
    let from_symbol: AddMemcpySymbolFn = api.sym("hipGraphAddMemcpyNodeFromSymbol", "");
    gpu.write(d, &[0.0; N]);
    let g = one_node_graph(&gpu, |node, g| unsafe { to_symbol(node, g, null(), 0, d, ones, bytes, 0, DEVICE_TO_DEVICE) });
    flatten_refuses_the_copy(&gpu, g, "null");
    assert_eq!(gpu.read(d, N), vec![1.0; N]);
    gpu.write(d, &[0.0; N]);
    let g = one_node_graph(&gpu, |node, g| unsafe { from_symbol(node, g, null(), 0, d, ones, bytes, 0, DEVICE_TO_DEVICE) });
    flatten_refuses_the_copy(&gpu, g, "null");
    assert_eq!(gpu.read(d, N), vec![1.0; N]);

    // A driver node, whose HIP_MEMCPY3D the report reads as 3-D parameters.
    let add_drv: AddDrvMemcpyFn = api.sym("hipDrvGraphAddMemcpyNode", "");
    let mut drv = DrvMemcpy3D { extent: [BYTES, 1, 1], ..Default::default() };
    (drv.src[4], drv.src[6], drv.dst[4], drv.dst[6]) = (MEMORY_DEVICE, ones, MEMORY_DEVICE, d);
    gpu.write(d, &[0.0; N]);
    let g = one_node_graph(&gpu, |node, g| unsafe { add_drv(node, g, null(), 0, &drv, null_mut()) });
    flatten_refuses_the_copy(&gpu, g, "kind is 0");
    assert_eq!(gpu.read(d, N), vec![1.0; N]);
}

/// A runtime failure while the planned nodes are being added (a node, or a raw kernel node's
/// launch attributes): the nodes added so far are destroyed again, so the parent is as it was (its nodes, sites and runtime graph) and records,
/// finalizes and runs on. When destroying them fails too, those left stay recorded and the error
/// says so.
#[test]
fn a_failed_add_while_flattening_leaves_the_parent_as_it_was() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let Some(sim) = common::hipsim_or_skip() else { return };
    let k = &gpu.k;
    let (x, y, d, w) = (zeroed(&gpu), gpu.upload(&[1.0; N]), zeroed(&gpu), zeroed(&gpu));
    // child: fill(x = 2) → axpy(y += x) → memset(d = 5), added in that order.
    let child = Cb::nested();
    let f = child.kernel(&[], k.fill_u32, N as u64, &args::fill(x, 2.0f32.to_bits(), N as u64));
    let a = child.kernel(&[f], k.axpy_f32, N as u64, &args::axpy(y, x, 1.0, N as u64));
    child.memset(&[a], d, 5, 4, N as u64);
    child.finalize();
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (d, BYTES), (w, BYTES)]);
    let first = parent.kernel(&[], k.fill_u32, N as u64, &args::fill(w, 7, N as u64));
    let sites = parent.sites();

    // The memset fails: the fill and the axpy were added.
    let destroyed = sim.call_count("hipGraphDestroyNode");
    sim.set_faults("hipGraphAddMemsetNode:1");
    let failed = flatten(&parent, &[first], child.0, Graph(null_mut())).unwrap_err();
    let message = last_error();
    sim.set_faults("");
    assert_eq!(failed, RCB_STATUS_RUNTIME_ERROR, "{message}");
    assert!(message.contains("after adding 2 node(s), destroyed again") && message.contains("as it was"), "{message}");
    assert_eq!(sim.call_count("hipGraphDestroyNode") - destroyed, 2);
    assert_eq!((node_count(&parent), parent.sites()), (1, sites), "nothing of the child recorded");

    let (group, report) = flatten(&parent, &[first], child.0, Graph(null_mut())).unwrap();
    assert_eq!((report.flattened, report.nodes), (1, 3), "{}", reason(&report));
    parent.memcpy(&[group], x, d, BYTES);
    parent.finalize();
    let mut template = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(parent.0, &mut template) });
    assert_eq!(gpu.rt.graph_nodes(Graph(template)).unwrap().len(), 5, "the runtime's graph holds no node of the failed attempt");
    parent.launch(&gpu);
    assert_eq!((u32s(&gpu, w), gpu.read(y, N), u32s(&gpu, x)), (vec![7; N], vec![3.0; N], vec![5; N]));

    // The memset fails, and so does destroying the axpy: both stay.
    let other = Cb::primary();
    sim.set_faults("hipGraphAddMemsetNode:1,hipGraphDestroyNode:1");
    let failed = flatten(&other, &[], child.0, Graph(null_mut())).unwrap_err();
    let message = last_error();
    sim.set_faults("");
    assert_eq!(failed, RCB_STATUS_RUNTIME_ERROR, "{message}");
    assert!(message.contains("destroying them failed") && message.contains("2 stay"), "{message}");
    assert_eq!(node_count(&other), 2);

    // A raw kernel node added whose launch attributes then fail to copy goes too.
    let raw = gpu.rt.graph_create().unwrap();
    gpu.rt.add_kernel_node(raw, &[], &common::launch(k.fill_u32, &fill_args(w, 9))).unwrap();
    let third = Cb::primary();
    sim.set_faults("hipGraphKernelNodeCopyAttributes:1");
    let failed = flatten(&third, &[], null(), raw).unwrap_err();
    let message = last_error();
    sim.set_faults("");
    gpu.rt.graph_destroy(raw).unwrap();
    assert_eq!(failed, RCB_STATUS_RUNTIME_ERROR, "{message}");
    assert!(message.contains("after adding 1 node(s), destroyed again"), "{message}");
    let mut template = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(third.0, &mut template) });
    assert_eq!((node_count(&third), gpu.rt.graph_nodes(Graph(template)).unwrap().len()), (0, 0));
}

#[test]
fn nested_child_graphs_are_flattened_recursively_keeping_their_order() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let (x, y, d) = (zeroed(&gpu), gpu.upload(&[1.0; N]), zeroed(&gpu));
    // inner: fill(x = 3.0) → axpy(y += 1x); outer: inner → memcpy(d ← y), and an empty node.
    let inner = rt.graph_create().unwrap();
    let f = rt.add_kernel_node(inner, &[], &common::launch(gpu.k.fill_u32, &fill_args(x, 3.0f32.to_bits()))).unwrap();
    rt.add_kernel_node(inner, &[f], &common::launch(gpu.k.axpy_f32, &axpy_args(y, x, 1.0))).unwrap();
    let outer = rt.graph_create().unwrap();
    let c = rt.add_child_node(outer, &[], inner).unwrap();
    rt.add_memcpy_node(outer, &[c], &rocm_cmdbuf::runtime::MemcpyParams { dst: d, src: y, bytes: BYTES as usize }).unwrap();
    rt.add_empty_node(outer, &[]).unwrap();

    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (d, BYTES)]);
    let (_, report) = flatten(&parent, &[], null(), outer).unwrap();
    assert_eq!((report.flattened, report.nodes, report.sites), (1, 4, 5), "{}", reason(&report));
    assert_eq!(node_count(&parent), 5, "two exits (memcpy, empty): one join node");
    parent.finalize();
    rt.graph_destroy(outer).unwrap();
    rt.graph_destroy(inner).unwrap();
    parent.launch(&gpu);
    assert_eq!(gpu.read(d, N), vec![4.0; N]);

    let (x2, y2, d2) = (zeroed(&gpu), gpu.upload(&[2.0; N]), zeroed(&gpu));
    parent.update_allocs(&[(x2, BYTES), (y2, BYTES), (d2, BYTES)]);
    parent.launch(&gpu);
    assert_eq!(gpu.read(d2, N), vec![5.0; N]);
}

#[test]
fn a_single_exit_is_the_group_and_deps_reach_the_roots() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let k = &gpu.k;
    let (x, y) = (zeroed(&gpu), zeroed(&gpu));
    let child = Cb::nested();
    child.kernel(&[], k.axpy_f32, N as u64, &args::axpy(y, x, 1.0, N as u64));
    child.finalize();
    let parent = Cb::primary();
    let before = parent.kernel(&[], k.fill_u32, N as u64, &args::fill(x, 2.0f32.to_bits(), N as u64));
    let (group, report) = flatten(&parent, &[before], child.0, Graph(null_mut())).unwrap();
    assert_eq!((report.flattened, report.nodes), (1, 1));
    assert_eq!(node_count(&parent), 2, "no join node for a single exit");
    parent.memset(&[group], x, 0, 4, N as u64);
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!(gpu.read(y, N), vec![2.0; N], "axpy ran after fill and before the memset");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(_gpu) = gpu() else { return };
    let parent = Cb::primary();
    let child = Cb::nested();
    let mut group = 0;
    let mut report = rcb_flatten_report::default();
    let s = unsafe { rcb_cmdbuf_add_flattened_child(parent.0, null(), 0, null(), null_mut(), &mut group, &mut report) };
    fails(s, RCB_STATUS_NULL_ARGUMENT, "both NULL");
    let s = unsafe { rcb_cmdbuf_add_flattened_child(parent.0, null(), 0, child.0, 0x10 as *mut c_void, &mut group, &mut report) };
    fails(s, RCB_STATUS_INVALID_ARGUMENT, "both set");
    fails(flatten(&parent, &[], child.0, Graph(null_mut())).unwrap_err(), RCB_STATUS_INVALID_STATE, "child");
    let s = unsafe { rcb_cmdbuf_add_flattened_child(parent.0, null(), 0, child.0, null_mut(), null_mut(), &mut report) };
    fails(s, RCB_STATUS_NULL_ARGUMENT, "`group`");
    fails(flatten(&parent, &[], parent.0, Graph(null_mut())).unwrap_err(), RCB_STATUS_INVALID_ARGUMENT, "its own child");
    child.finalize();
    fails(flatten(&parent, &[7], child.0, Graph(null_mut())).unwrap_err(), RCB_STATUS_INVALID_ARGUMENT, "deps");
    assert_eq!(node_count(&parent), 0);
    parent.finalize();
    fails(flatten(&parent, &[], child.0, Graph(null_mut())).unwrap_err(), RCB_STATUS_INVALID_STATE, "recording");
    assert_eq!(group, 0, "outputs are written only on success");
}

/// Flattens `child`, a finalized command buffer holding three levels: a child node of `middle`
/// (itself a child node of `inner`: fill(x = 3) → axpy(y += x), then memset(z = 5)), a memcpy
/// (d ← y) after it, and a child node of the raw graph `g` (fill(w = 7)). Every node must be
/// re-created in `parent`, run, and follow its allocations when they move.
fn flatten_children_of_children(gpu: &Gpu, child: &Cb) {
    let k = &gpu.k;
    let (x, y, d, z, w) = (zeroed(gpu), gpu.upload(&[1.0; N]), zeroed(gpu), zeroed(gpu), zeroed(gpu));
    let inner = Cb::nested();
    let f = inner.kernel(&[], k.fill_u32, N as u64, &args::fill(x, 3.0f32.to_bits(), N as u64));
    inner.kernel(&[f], k.axpy_f32, N as u64, &args::axpy(y, x, 1.0, N as u64));
    inner.finalize();
    let middle = Cb::nested();
    let mut c = 0;
    ok(unsafe { rcb_cmdbuf_add_child(middle.0, null(), 0, inner.0, &mut c) });
    middle.memset(&[c], z, 5, 4, N as u64);
    middle.finalize();
    let g = gpu.rt.graph_create().unwrap();
    gpu.rt.add_kernel_node(g, &[], &common::launch(k.fill_u32, &fill_args(w, 7))).unwrap();

    let mut m = 0;
    ok(unsafe { rcb_cmdbuf_add_child(child.0, null(), 0, middle.0, &mut m) });
    child.memcpy(&[m], d, y, BYTES);
    let mut raw = 0;
    ok(unsafe { rcb_cmdbuf_add_child_graph(child.0, null(), 0, g.0, &mut raw) });
    child.finalize();
    gpu.rt.graph_destroy(g).unwrap();

    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (d, BYTES), (z, BYTES), (w, BYTES)]);
    let (group, report) = flatten(&parent, &[], child.0, Graph(null_mut())).unwrap();
    // fill: x; axpy: y, x; memset: z; memcpy: d, y; fill: w.
    assert_eq!((report.flattened, report.nodes, report.sites), (1, 5, 7), "{}", reason(&report));
    assert_eq!(node_count(&parent), 6, "two exits (memcpy, fill w): one join node");
    let e = zeroed(gpu);
    parent.memcpy(&[group], e, d, BYTES);
    parent.finalize();
    parent.launch(gpu);
    assert_eq!(gpu.read(d, N), vec![4.0; N], "d = y + x = 1 + 3");
    assert_eq!(gpu.read(e, N), vec![4.0; N], "the copy after the group saw the whole child");
    assert_eq!(u32s(gpu, z), vec![5; N]);
    assert_eq!(u32s(gpu, w), vec![7; N]);

    let (x2, y2, d2, z2, w2) = (zeroed(gpu), gpu.upload(&[10.0; N]), zeroed(gpu), zeroed(gpu), zeroed(gpu));
    let r = parent.update_allocs(&[(x2, BYTES), (y2, BYTES), (d2, BYTES), (z2, BYTES), (w2, BYTES)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.needs_rerecord), (5, 8, 0), "the child's 7 and the copy's d");
    parent.launch(gpu);
    assert_eq!(gpu.read(d2, N), vec![13.0; N]);
    assert_eq!(u32s(gpu, z2), vec![5; N]);
    assert_eq!(u32s(gpu, w2), vec![7; N]);
    assert_eq!(gpu.read(y, N), vec![4.0; N], "the old buffers are not touched any more");

    // Neither command buffer was harmed: the child can still be embedded.
    let other = Cb::primary();
    let mut n = 0;
    ok(unsafe { rcb_cmdbuf_add_child(other.0, null(), 0, child.0, &mut n) });
}

#[test]
fn a_nested_command_buffer_holding_child_nodes_is_flattened_recursively() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    flatten_children_of_children(&gpu, &Cb::nested());
}

#[test]
fn a_primary_command_buffer_holding_child_nodes_is_flattened_recursively() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let child = Cb::primary();
    flatten_children_of_children(&gpu, &child);
    child.launch(&gpu);
}

fn update_flattened(cb: &Cb, group: rcb_node, child: *const rcb_cmdbuf, graph: Graph) -> Result<rcb_flatten_report, rcb_status> {
    let mut report = rcb_flatten_report { flattened: 9, nodes: 9, sites: 9, reason: [0; RCB_FLATTEN_REASON_LEN], ..Default::default() };
    let s = unsafe { rcb_cmdbuf_update_flattened_child(cb.0, group, child, graph.0, &mut report) };
    if s == RCB_OK { Ok(report) } else { Err(s) }
}

#[test]
fn a_flattened_group_takes_a_new_trace_of_the_same_shape_and_refuses_another_shape() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let (x, y, d, z) = mixed_buffers(&gpu, 1.0);
    let g = capture_mixed(&gpu, &api, x, y, d, z);
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (y, BYTES), (d, BYTES), (z, BYTES)]);
    let (group, _) = flatten(&parent, &[], null(), g).unwrap();
    parent.finalize();
    gpu.rt.graph_destroy(g).unwrap();

    // A re-record: the table says where the buffers are now, and the command traced again
    // there (a new capture of the same shape) replaces the group's parameters.
    let (x2, y2, d2, z2) = mixed_buffers(&gpu, 5.0);
    parent.begin_update();
    parent.set_allocs(&[(x2, BYTES), (y2, BYTES), (d2, BYTES), (z2, BYTES)]);
    let g2 = capture_mixed(&gpu, &api, x2, y2, d2, z2);
    let report = update_flattened(&parent, group, null(), g2).unwrap();
    assert_eq!((report.flattened, report.nodes, report.sites), (1, 4, 6), "{}", reason(&report));
    gpu.rt.graph_destroy(g2).unwrap();

    // Another shape (one node fewer) is refused and changes nothing.
    let rt = gpu.rt;
    rt.begin_capture(gpu.stream, CaptureMode::ThreadLocal).unwrap();
    common::run(rt, gpu.k.fill_u32, &args::fill(x, 2.0f32.to_bits(), N as u64), gpu.stream);
    let small = rt.end_capture(gpu.stream).unwrap();
    assert_eq!(update_flattened(&parent, group, null(), small), Err(RCB_STATUS_INVALID_ARGUMENT));
    assert!(last_error().contains("another shape"), "{}", last_error());
    rt.graph_destroy(small).unwrap();
    // A node that is not a group is refused too.
    let g3 = capture_mixed(&gpu, &api, x2, y2, d2, z2);
    assert_eq!(update_flattened(&parent, 0, null(), g3), Err(RCB_STATUS_INVALID_ARGUMENT));
    rt.graph_destroy(g3).unwrap();
    parent.finalize();

    parent.launch(&gpu);
    assert_eq!(gpu.read(d2, N), vec![6.0; N], "d2 = y2 + 0.5 * 2");
    assert_eq!(u32s(&gpu, z2), vec![9; N]);
    assert_eq!(gpu.read(d, N), vec![0.0; N], "the first buffers were never used");
    // The new sites are the new addresses: a move patches them like any other.
    let (y3, d3) = (gpu.upload(&[7.0; N]), zeroed(&gpu));
    let r = parent.move_allocs(&[(1, y3), (2, d3)]);
    assert_eq!((r.moved_allocations, r.needs_rerecord), (2, 0));
    parent.launch(&gpu);
    assert_eq!(gpu.read(d3, N), vec![8.0; N]);
}

#[test]
fn a_fallback_group_takes_the_new_child_as_a_whole() {
    // hipsim's counters and quirks are process-wide.
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let x = zeroed(&gpu);
    let word = HostWord::new(&gpu);
    let g = sleeping_child(&gpu, x, |g| word.add_copy(&api, g));
    let parent = Cb::primary();
    let (group, report) = flatten(&parent, &[], null(), g).unwrap();
    assert_eq!(report.flattened, 0);
    parent.finalize();
    let x2 = zeroed(&gpu);
    let g2 = sleeping_child(&gpu, x2, |g| word.add_copy(&api, g));
    parent.begin_update();
    let report = update_flattened(&parent, group, null(), g2).unwrap();
    assert_eq!(report.flattened, 0);
    assert!(reason(&report).contains("one child node"), "{}", reason(&report));
    parent.finalize();
    gpu.rt.graph_destroy(g).unwrap();
    gpu.rt.graph_destroy(g2).unwrap();
    parent.launch(&gpu);
    assert_eq!(u32s(&gpu, x2), vec![7; N], "the new child's graph ran");
    assert_eq!(u32s(&gpu, x), vec![0; N]);
}

/// What a user object's destructor sees: how often it ran, and on the software GPU the buffer it
/// poisons (a collective's work buffer freed with its graph); CUDA forbids runtime calls in a
/// destructor, so there it only counts.
struct Owned {
    runs: std::sync::atomic::AtomicU32,
    poison: Option<u64>,
}

unsafe extern "C" fn destroy_owned(p: *mut c_void) {
    let owned = unsafe { &*(p as *const Owned) };
    owned.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if let (Some(x), Some(rt)) = (owned.poison, common::runtime()) {
        let _ = rt.direct().copy_to_device(x, &[0xFF; N * 4]);
    }
}

impl DriverApi {
    /// A user object with `owned`'s destructor, its only reference moved to `graph`.
    fn attach_user_object(&self, graph: Graph, owned: &Owned) {
        type CreateFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, unsafe extern "C" fn(*mut c_void), u32, u32) -> i32;
        type RetainFn = unsafe extern "C" fn(*mut c_void, *mut c_void, u32, u32) -> i32;
        let create: CreateFn = self.sym("hipUserObjectCreate", "cuUserObjectCreate");
        let retain: RetainFn = self.sym("hipGraphRetainUserObject", "cuGraphRetainUserObject");
        let mut object = null_mut();
        // Flags: no destructor synchronization (the only one); the graph takes the reference.
        assert_eq!(unsafe { create(&mut object, owned as *const Owned as *mut c_void, destroy_owned, 1, 1) }, 0);
        assert_eq!(unsafe { retain(graph.0, object, 1, 1) }, 0);
    }
}

/// How often the destructor ran once it has run at least `at_least` times; a GPU runs
/// destructors on a thread of its own some time after the last reference goes, so this waits
/// for that (bounded), and counts again after so a second run shows.
fn runs_after(gpu: &Gpu, owned: &Owned, at_least: u32) -> u32 {
    let load = || owned.runs.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..10_000 {
        if load() >= at_least {
            break;
        }
        gpu.sync();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    gpu.sync();
    load()
}

/// A graph of `copy(y ← x)` owning a user object whose destructor poisons `x`.
fn owning_graph(gpu: &Gpu, api: &DriverApi, y: u64, x: u64, owned: &Owned) -> Graph {
    let g = gpu.rt.graph_create().unwrap();
    gpu.rt.add_kernel_node(g, &[], &common::launch(gpu.k.copy_u8, &pack(&args::copy(y, x, (N * 4) as u64)))).unwrap();
    api.attach_user_object(g, owned);
    g
}

/// A flattened copy may read what its source graph owns through user
/// objects (NCCL's work buffers), which die with the graph. The command buffer keeps a clone,
/// which carries them, until it is freed; a source replaced by an update lives until the launches
/// that may use it have finished.
#[test]
fn a_flattened_graph_keeps_its_sources_user_objects_until_the_free() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let hip = gpu.rt.info().backend == Backend::Hip;
    let (x1, x2, y) = (gpu.upload(&iota(1.0)), gpu.upload(&iota(500.0)), zeroed(&gpu));
    let first = Owned { runs: 0.into(), poison: hip.then_some(x1) };
    let second = Owned { runs: 0.into(), poison: hip.then_some(x2) };
    let g = owning_graph(&gpu, &api, y, x1, &first);
    let cb = Cb::primary();
    let (group, report) = flatten(&cb, &[], null(), g).unwrap();
    assert_eq!(report.flattened, 1, "{}", reason(&report));
    cb.finalize();
    // The caller's graph goes at once; the copies' object must not.
    gpu.rt.graph_destroy(g).unwrap();
    for _ in 0..50 {
        cb.launch(&gpu);
    }
    gpu.sync();
    assert_eq!(gpu.read(y, N), iota(1.0));
    assert_eq!(runs_after(&gpu, &first, 0), 0, "the source's user object died with the caller's graph");
    // Another source of the same shape: the old clone waits for the launch already queued. On
    // the software GPU that launch is held behind a device word until after the update, so a
    // clone destroyed too early shows (its destructor runs at once and poisons the buffer).
    let g2 = owning_graph(&gpu, &api, y, x2, &second);
    let word = gpu.rt.malloc(0, 8).unwrap();
    gpu.rt.direct().copy_to_device(word, &0u64.to_ne_bytes()).unwrap();
    if hip {
        type WaitFn = unsafe extern "C" fn(*mut c_void, *mut c_void, u64, u32, u64) -> i32;
        let wait: WaitFn = api.sym("hipStreamWaitValue64", "");
        assert_eq!(unsafe { wait(gpu.stream.0, word as *mut c_void, 1, 0, u64::MAX) }, 0);
    }
    ok(unsafe { rcb_cmdbuf_launch(cb.0, gpu.stream.0) });
    cb.begin_update();
    let mut r = rcb_flatten_report { flattened: 9, nodes: 9, sites: 9, reason: [0; RCB_FLATTEN_REASON_LEN], ..Default::default() };
    ok(unsafe { rcb_cmdbuf_update_flattened_child(cb.0, group, null(), g2.0, &mut r) });
    cb.finalize();
    gpu.rt.graph_destroy(g2).unwrap();
    if hip {
        let held = first.runs.load(std::sync::atomic::Ordering::SeqCst);
        // Opened from a stream of its own: a copy now would wait for the held stream.
        let opener = gpu.rt.stream_create(0, 1, 0).unwrap();
        gpu.rt.stream_memory().unwrap().stream_write_u64(opener, word, 1).unwrap();
        gpu.rt.stream_synchronize(opener).unwrap();
        gpu.rt.stream_destroy(opener).unwrap();
        assert_eq!(held, 0, "the replaced source's object went while a launch that reads it was held");
    }
    gpu.sync();
    gpu.rt.free(word).unwrap();
    assert_eq!(gpu.read(y, N), iota(1.0), "the launch before the update read the first source's buffer intact");
    // The next launch finds that launch finished and gives the old clone up.
    cb.launch(&gpu);
    gpu.sync();
    assert_eq!(gpu.read(y, N), iota(500.0));
    assert_eq!(runs_after(&gpu, &first, 1), 1, "the replaced source's object goes once its launches finished");
    assert_eq!(runs_after(&gpu, &second, 0), 0);
    drop(cb);
    assert_eq!(runs_after(&gpu, &second, 1), 1, "freeing the command buffer gives the last clone up");
    assert_eq!(runs_after(&gpu, &first, 1), 1);
}

/// The template of a nested command buffer that keeps a graph's user objects (a trace-cache
/// entry: a capture flattened node by node, the capture kept beside it), taken as a raw graph
/// (`rcb_cmdbuf_graph`, as the trace cache returns it and XLA flattens or clones it) and
/// embedded into a primary command buffer three ways: flattened, cloned as a child node, and
/// given to a child node by an update. The nested command buffer is then freed (the cache entry
/// evicted): the primary's copies must still read the source's objects until the primary is
/// freed.
#[test]
fn a_raw_template_brings_what_its_command_buffer_keeps() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let hip = gpu.rt.info().backend == Backend::Hip;
    for how in ["flattened", "child node", "child node update"] {
        let (x, y) = (gpu.upload(&iota(7.0)), zeroed(&gpu));
        let owned = Owned { runs: 0.into(), poison: hip.then_some(x) };
        let g = owning_graph(&gpu, &api, y, x, &owned);
        // The trace-cache entry: the capture flattened into a nested command buffer.
        let entry = Cb::nested();
        let (_, report) = flatten(&entry, &[], null(), g).unwrap();
        assert_eq!(report.flattened, 1, "{}", reason(&report));
        entry.finalize();
        gpu.rt.graph_destroy(g).unwrap();
        let mut template = null_mut();
        ok(unsafe { rcb_cmdbuf_graph(entry.0, &mut template) });
        let cb = Cb::primary();
        match how {
            "flattened" => {
                let (_, report) = flatten(&cb, &[], null(), Graph(template)).unwrap();
                assert_eq!(report.flattened, 1, "{}", reason(&report));
            }
            "child node" => {
                let mut node = 0;
                ok(unsafe { rcb_cmdbuf_add_child_graph(cb.0, null(), 0, template, &mut node) });
            }
            _ => {
                // A child node first given another graph of the same shape, then the template.
                let other = gpu.rt.graph_create().unwrap();
                let z = zeroed(&gpu);
                gpu.rt.add_kernel_node(other, &[], &common::launch(gpu.k.copy_u8, &pack(&args::copy(z, z, (N * 4) as u64)))).unwrap();
                let mut node = 0;
                ok(unsafe { rcb_cmdbuf_add_child_graph(cb.0, null(), 0, other.0, &mut node) });
                cb.finalize();
                cb.begin_update();
                ok(unsafe { rcb_cmdbuf_update_child_graph(cb.0, node, template) });
                cb.finalize();
                gpu.rt.graph_destroy(other).unwrap();
            }
        }
        if how != "child node update" {
            cb.finalize();
        }
        drop(entry);
        assert_eq!(runs_after(&gpu, &owned, 0), 0, "{how}: the object died with the cache entry");
        for _ in 0..20 {
            cb.launch(&gpu);
        }
        gpu.sync();
        assert_eq!(gpu.read(y, N), iota(7.0), "{how}: the copies read the source's buffer intact");
        drop(cb);
        assert_eq!(runs_after(&gpu, &owned, 1), 1, "{how}: freeing the command buffer gives the object up once");
    }
}

/// A graph of `copy(y1 ← x)` and `copy(y2 ← x)` owning a user object whose destructor poisons
/// `x`.
fn owning_two_copies(gpu: &Gpu, api: &DriverApi, y1: u64, y2: u64, x: u64, owned: &Owned) -> Graph {
    let g = gpu.rt.graph_create().unwrap();
    for y in [y1, y2] {
        gpu.rt.add_kernel_node(g, &[], &common::launch(gpu.k.copy_u8, &pack(&args::copy(y, x, (N * 4) as u64)))).unwrap();
    }
    api.attach_user_object(g, owned);
    g
}

/// A push that failed part-way through an update of a flattened
/// group left the nodes before it on the new source and the rest on the old one, and the group
/// kept clones of both (one source more at every such failure). Now every node of the group
/// takes the new source's parameters, the ones not pushed yet are pushed by the finalize, and
/// the old source is given up once the launches before the update have finished: one source
/// kept, whatever failed.
#[test]
fn a_push_failing_part_way_through_a_flattened_update_leaves_one_source() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let (x1, x2, y1, y2) = (gpu.upload(&iota(1.0)), gpu.upload(&iota(500.0)), zeroed(&gpu), zeroed(&gpu));
    let first = Owned { runs: 0.into(), poison: Some(x1) };
    let second = Owned { runs: 0.into(), poison: Some(x2) };
    let g1 = owning_two_copies(&gpu, &api, y1, y2, x1, &first);
    let cb = Cb::primary();
    let (group, report) = flatten(&cb, &[], null(), g1).unwrap();
    assert_eq!((report.flattened, report.nodes), (1, 2), "{}", reason(&report));
    cb.finalize();
    gpu.rt.graph_destroy(g1).unwrap();
    cb.launch(&gpu);
    assert_eq!((gpu.read(y1, N), gpu.read(y2, N)), (iota(1.0), iota(1.0)));

    // The second node's push fails.
    let g2 = owning_two_copies(&gpu, &api, y1, y2, x2, &second);
    cb.begin_update();
    sim.set_faults("hipGraphExecKernelNodeSetParams:2");
    let updated = update_flattened(&cb, group, null(), g2);
    let message = last_error();
    sim.set_faults("");
    assert_eq!(updated.err(), Some(RCB_STATUS_RUNTIME_ERROR), "{message}");
    assert!(message.contains("node 1 of 2") && message.contains("finalize pushes them again"), "{message}");
    gpu.rt.graph_destroy(g2).unwrap();
    // The finalize pushes the second node: both read the new source.
    cb.finalize();
    cb.launch(&gpu);
    assert_eq!((gpu.read(y1, N), gpu.read(y2, N)), (iota(500.0), iota(500.0)), "a node of the group still reads the old source");
    // A launch after the ones before the update finished gives the old source up.
    cb.launch(&gpu);
    assert_eq!(runs_after(&gpu, &first, 1), 1, "the old source is still kept beside the new one");
    assert_eq!(runs_after(&gpu, &second, 0), 0);
    drop(cb);
    assert_eq!(runs_after(&gpu, &second, 1), 1);
}

/// Runs `opaque_kernel_moves`, whose kernel reads its buffer's address from device memory, in a
/// process of its own for each value of `RCB_OPAQUE_KERNELS` (the list is read once per
/// process): listed, every move is refused and the re-recorded command writes the new buffer
/// only; `none`, the move is applied and the kernel writes the old buffer (what the list
/// prevents).
#[test]
fn a_kernel_reading_addresses_from_device_memory_is_refused_never_patched_stale() {
    let Some(_sim) = common::hipsim_or_skip() else { return };
    for list in ["rcb_test_indirect*", "none"] {
        let test = "opaque_kernel_moves";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--include-ignored", "--test-threads", "1"])
            .env("RCB_OPAQUE_KERNELS", list)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "RCB_OPAQUE_KERNELS={list}:\n{text}");
    }
}

/// `rcb_test_indirect_fill_u32(slot, value, n)` (the software GPU's only) fills the buffer whose
/// address `slot` holds, as a collective finds its buffers in a work descriptor in device memory
/// (`slot` is the library's own memory, outside the table, as such a descriptor is).
#[test]
#[ignore = "run by a_kernel_reading_addresses_from_device_memory_is_refused_never_patched_stale with RCB_OPAQUE_KERNELS set"]
fn opaque_kernel_moves() {
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let listed = std::env::var("RCB_OPAQUE_KERNELS").unwrap() != "none";
    let rt = gpu.rt;
    let indirect = rt.direct().module_function(gpu.k.module, "rcb_test_indirect_fill_u32").unwrap();
    let slot_to = |target: u64| {
        let slot = rt.malloc(0, 8).unwrap();
        rt.direct().copy_to_device(slot, &target.to_ne_bytes()).unwrap();
        slot
    };
    let poison = f32::from_bits(0xdead_beef);
    let (a, c) = (zeroed(&gpu), zeroed(&gpu));
    let slot = slot_to(a);
    // A foreign graph: the indirect fill (a = 5) and a plain fill (c = 9), which has sites.
    let graph_for = |slot: u64, c: u64| {
        let g = rt.graph_create().unwrap();
        rt.add_kernel_node(g, &[], &common::launch(indirect, &pack(&args::fill(slot, 5, N as u64)))).unwrap();
        rt.add_kernel_node(g, &[], &common::launch(gpu.k.fill_u32, &fill_args(c, 9))).unwrap();
        g
    };
    refusals_name_an_opaque_kernel_however_it_is_held(&gpu, indirect, slot, listed);
    let g = graph_for(slot, c);
    let parent = Cb::primary();
    parent.set_allocs(&[(a, BYTES), (c, BYTES)]);
    let (_, report) = flatten(&parent, &[], null(), g).unwrap();
    assert_eq!((report.flattened, report.nodes, report.sites), (1, 2, 1), "{}", reason(&report));
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!((u32s(&gpu, a), u32s(&gpu, c)), (vec![5; N], vec![9; N]));

    // Both move; the old buffers are poisoned.
    let (a2, c2) = (zeroed(&gpu), zeroed(&gpu));
    gpu.write(a, &[poison; N]);
    gpu.write(c, &[poison; N]);
    let before = fallbacks(&parent)[RCB_FALLBACK_OPAQUE_KERNEL as usize];
    let moved = parent.update_allocs(&[(a2, BYTES), (c2, BYTES)]);
    if !listed {
        // The plain fill follows c; the indirect one still reads `slot`, which holds a.
        assert_eq!((moved.needs_rerecord, moved.patched_sites), (0, 1));
        parent.launch(&gpu);
        assert_eq!((u32s(&gpu, a), u32s(&gpu, a2)), (vec![5; N], vec![0; N]), "without the list the old buffer is written");
        rt.graph_destroy(g).unwrap();
        return;
    }
    assert_eq!((moved.needs_rerecord, moved.patched_sites), (1, 0), "refused, nothing patched");
    assert_eq!(fallbacks(&parent)[RCB_FALLBACK_OPAQUE_KERNEL as usize], before + 1, "counted as its own reason");
    // Even an allocation the kernel does not reach is pinned: it reads what the library cannot see.
    assert_eq!(parent.update_allocs(&[(a, BYTES), (c2, BYTES)]).needs_rerecord, 1);
    // Re-recorded as a collective library would capture it again: a new descriptor for a2.
    let g2 = graph_for(slot_to(a2), c2);
    let again = Cb::primary();
    again.set_allocs(&[(a2, BYTES), (c2, BYTES)]);
    flatten(&again, &[], null(), g2).unwrap();
    again.finalize();
    again.launch(&gpu);
    assert_eq!((u32s(&gpu, a2), u32s(&gpu, c2)), (vec![5; N], vec![9; N]));
    assert_eq!((gpu.read(a, N), gpu.read(c, N)), (vec![poison; N], vec![poison; N]), "the old buffers are never written");

    // Added directly, its slot passed as RCB_ARG_SCAN: not a site either, and every move refused.
    let direct = Cb::primary();
    direct.set_allocs(&[(slot, 8), (c, BYTES)]);
    let (slot_bytes, value, n) = (slot.to_ne_bytes(), 5u32.to_ne_bytes(), (N as u64).to_ne_bytes());
    direct.raw_kernel(&[], indirect, N as u64, &[(&slot_bytes, RCB_ARG_SCAN), (&value, RCB_ARG_VALUE), (&n, RCB_ARG_VALUE)]);
    direct.kernel(&[], gpu.k.fill_u32, N as u64, &args::fill(c, 9, N as u64));
    assert_eq!(direct.sites(), 1, "only the plain fill's pointer");
    direct.finalize();
    assert_eq!(direct.update_allocs(&[(slot, 8), (c2, BYTES)]).needs_rerecord, 1);
    // A child holding it, embedded in another command buffer, carries the pin.
    let holder = Cb::primary();
    holder.set_allocs(&[(c, BYTES)]);
    let (_, report) = flatten(&holder, &[], parent.0, Graph(null_mut())).unwrap();
    assert_eq!((report.flattened, report.sites), (1, 1), "{}", reason(&report));
    holder.finalize();
    assert_eq!(holder.update_allocs(&[(c2, BYTES)]).needs_rerecord, 1, "the flattened copy of an opaque kernel pins too");

    // A kernel of a foreign graph whose name the runtime cannot give might be on the list: its
    // words are not sites and it pins everything. One the caller adds is taken as not on it.
    let plain = rt.graph_create().unwrap();
    rt.add_kernel_node(plain, &[], &common::launch(gpu.k.fill_u32, &fill_args(c, 9))).unwrap();
    let unnamed = Cb::primary();
    unnamed.set_allocs(&[(c, BYTES)]);
    sim.set_faults("hipKernelNameRef:1");
    let (_, report) = flatten(&unnamed, &[], null(), plain).unwrap();
    assert_eq!((report.flattened, report.sites), (1, 0), "{}", reason(&report));
    unnamed.finalize();
    assert_eq!(unnamed.update_allocs(&[(c2, BYTES)]).needs_rerecord, 1);
    assert_eq!(fallbacks(&unnamed)[RCB_FALLBACK_OPAQUE_KERNEL as usize], 1);
    let own = Cb::primary();
    own.set_allocs(&[(c, BYTES)]);
    sim.set_faults("hipKernelNameRef:1");
    own.kernel(&[], gpu.k.fill_u32, N as u64, &args::fill(c, 9, N as u64));
    sim.set_faults("");
    assert_eq!(own.sites(), 1);
    own.finalize();
    assert_eq!(own.update_allocs(&[(c2, BYTES)]).needs_rerecord, 0);
    rt.graph_destroy(plain).unwrap();
    rt.graph_destroy(g).unwrap();
    rt.graph_destroy(g2).unwrap();
}

/// However a kernel on `RCB_OPAQUE_KERNELS` reaches a command buffer (a
/// child node of a raw graph, set again with a new one; a child node of a captured command
/// buffer; of a command buffer whose kernelParams node of unknown references comes before the
/// kernel; a kernelParams node of the kernel itself), a refused move is counted as the kernel's
/// (`RCB_FALLBACK_OPAQUE_KERNEL`, the reason naming it), not as an unknown reference; with the
/// list `none` the same refusals are unknown references. Every move is refused either way.
fn refusals_name_an_opaque_kernel_however_it_is_held(gpu: &Gpu, indirect: rocm_cmdbuf::runtime::Function, slot: u64, listed: bool) {
    let rt = gpu.rt;
    let (c, c2) = (zeroed(gpu), zeroed(gpu));
    let refused = |cb: &Cb, what: &str| {
        let before = fallbacks(cb);
        assert_eq!(cb.update_allocs(&[(c2, BYTES)]).needs_rerecord, 1, "{what}: refused");
        let after = fallbacks(cb);
        let [kernel, reference] =
            [RCB_FALLBACK_OPAQUE_KERNEL, RCB_FALLBACK_OPAQUE_REFERENCE].map(|r| after[r as usize] - before[r as usize]);
        assert_eq!(
            (kernel, reference),
            if listed { (1, 0) } else { (0, 1) },
            "{what}: counted as the kernel's, or as an unknown reference"
        );
    };
    let indirect_args = args::fill(slot, 5, N as u64);
    let raw = || {
        let g = rt.graph_create().unwrap();
        rt.add_kernel_node(g, &[], &common::launch(indirect, &pack(&indirect_args))).unwrap();
        g
    };
    // A raw graph's child node, then the same node given a new graph.
    let (g, g2) = (raw(), raw());
    let cb = Cb::primary();
    cb.set_allocs(&[(c, BYTES)]);
    let mut node = 0;
    ok(unsafe { rcb_cmdbuf_add_child_graph(cb.0, null(), 0, g.0, &mut node) });
    cb.finalize();
    refused(&cb, "a raw graph's child node");
    cb.begin_update();
    ok(unsafe { rcb_cmdbuf_update_child_graph(cb.0, node, g2.0) });
    cb.finalize();
    refused(&cb, "a raw graph's child node set again");
    // A captured command buffer's child node.
    let captured = Cb::nested();
    ok(unsafe { rcb_cmdbuf_capture_begin(captured.0, gpu.stream.0) });
    common::run(rt, indirect, &indirect_args, gpu.stream);
    ok(unsafe { rcb_cmdbuf_capture_end(captured.0) });
    captured.finalize();
    let cb = Cb::primary();
    cb.set_allocs(&[(c, BYTES)]);
    ok(unsafe { rcb_cmdbuf_add_child(cb.0, null(), 0, captured.0, &mut node) });
    cb.finalize();
    refused(&cb, "a captured command buffer's child node");
    // A command buffer holding a kernelParams node of a plain kernel, then the kernel.
    let mut v = (c, 9u32, N as u64);
    let mut fill = [&mut v.0 as *mut u64 as *mut c_void, &mut v.1 as *mut u32 as *mut c_void, &mut v.2 as *mut u64 as *mut c_void];
    let by_pointers = |cb: &Cb, f: rocm_cmdbuf::runtime::Function, values: &mut [*mut c_void]| {
        let launch = rcb_kernel_params_launch {
            function: f.0,
            grid: [1, 1, 1],
            block: [N as u32, 1, 1],
            kernel_params: values.as_mut_ptr(),
            ..Default::default()
        };
        let mut node = 0;
        ok(unsafe { rcb_cmdbuf_add_kernel_params(cb.0, null(), 0, &launch, &mut node) });
    };
    let nested = Cb::nested();
    nested.set_allocs(&[(c, BYTES)]);
    by_pointers(&nested, gpu.k.fill_u32, &mut fill);
    nested.raw_kernel(
        &[],
        indirect,
        N as u64,
        &[(&slot.to_ne_bytes(), RCB_ARG_VALUE), (&5u32.to_ne_bytes(), RCB_ARG_VALUE), (&(N as u64).to_ne_bytes(), RCB_ARG_VALUE)],
    );
    nested.finalize();
    let cb = Cb::primary();
    cb.set_allocs(&[(c, BYTES)]);
    ok(unsafe { rcb_cmdbuf_add_child(cb.0, null(), 0, nested.0, &mut node) });
    cb.finalize();
    refused(&cb, "the child node of a command buffer with a kernelParams node before the kernel");
    // A kernelParams node of the kernel itself.
    let mut w = (slot, 5u32, N as u64);
    let mut values = [&mut w.0 as *mut u64 as *mut c_void, &mut w.1 as *mut u32 as *mut c_void, &mut w.2 as *mut u64 as *mut c_void];
    let cb = Cb::primary();
    cb.set_allocs(&[(c, BYTES)]);
    by_pointers(&cb, indirect, &mut values);
    cb.finalize();
    refused(&cb, "a kernelParams node of the kernel");
    for graph in [g, g2] {
        rt.graph_destroy(graph).unwrap();
    }
}

/// Waits, with a deadline, until `stream` has run everything queued on it (a failure, never a
/// hang, when something on it never finishes).
fn finish(gpu: &Gpu, stream: rocm_cmdbuf::runtime::Stream, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !gpu.rt.stream_is_idle(stream).unwrap() {
        assert!(std::time::Instant::now() < deadline, "{what}: the stream did not finish within 20 s");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The host function of the host nodes below: counts its calls in the `AtomicU32` its user data
/// points at.
unsafe extern "C" fn count_call(user: *mut c_void) {
    unsafe { &*(user as *const std::sync::atomic::AtomicU32) }.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Another host function: its body differs from `count_call`'s, so that an optimized build does not
/// merge the two into one address (rustc merges identical functions), which would make the
/// "other function" below the same one.
unsafe extern "C" fn count_other(user: *mut c_void) {
    unsafe { &*(user as *const std::sync::atomic::AtomicU32) }.fetch_add(2, std::sync::atomic::Ordering::SeqCst);
}

/// A graph of sleep(20 ms) → fill(x = 7) → host(count) → record(e), and apart from them
/// wait(gate) → copy(w ← z): the event record, event wait and host nodes are flattened with their
/// edges, so a second stream waiting on `e` after a launch sees x written, the host function runs
/// once per launch with its user data, and the copy waits until another stream records `gate`.
#[test]
fn event_and_host_nodes_are_flattened_and_keep_their_order() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let calls = std::sync::atomic::AtomicU32::new(0);
    let user = &calls as *const _ as *mut c_void;
    let host = rocm_cmdbuf::runtime::HostNode { function: count_call, user_data: user };
    let (e, gate) = (rt.event_create(0).unwrap(), rt.event_create(0).unwrap());
    let (x, z, w, d) = (zeroed(&gpu), zeroed(&gpu), zeroed(&gpu), zeroed(&gpu));
    let source = |x: u64, w: u64, host: &rocm_cmdbuf::runtime::HostNode| {
        let g = rt.graph_create().unwrap();
        let s = rt.add_kernel_node(g, &[], &common::launch(gpu.k.sleep, &pack(&args::sleep(20_000)))).unwrap();
        let f = rt.add_kernel_node(g, &[s], &common::launch(gpu.k.fill_u32, &fill_args(x, 7))).unwrap();
        let h = rt.add_host_node(g, &[f], host).unwrap();
        rt.add_event_record_node(g, &[h], e).unwrap();
        let wait = rt.add_event_wait_node(g, &[], gate).unwrap();
        rt.add_kernel_node(g, &[wait], &common::launch(gpu.k.copy_u8, &pack(&args::copy(w, z, BYTES)))).unwrap();
        g
    };
    let g = source(x, w, &host);
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (z, BYTES), (w, BYTES)]);
    let (group, report) = flatten(&parent, &[], null(), g).unwrap();
    assert_eq!((report.flattened, report.nodes, report.sites), (1, 6, 3), "{}", reason(&report));
    assert_eq!(fallbacks(&parent).iter().sum::<u64>(), 0);
    let mut template = null_mut();
    ok(unsafe { rcb_cmdbuf_graph(parent.0, &mut template) });
    let copies = rt.graph_nodes(Graph(template)).unwrap();
    let kinds: Vec<_> = copies.iter().map(|&n| rt.node_type(n).unwrap()).collect();
    use rocm_cmdbuf::runtime::NodeType;
    assert_eq!(kinds.iter().filter(|k| matches!(k, NodeType::EventRecord | NodeType::EventWait | NodeType::Host)).count(), 3, "{kinds:?}");
    let record = copies[kinds.iter().position(|k| *k == NodeType::EventRecord).unwrap()];
    assert_eq!(rt.event_record_node_event(record).unwrap(), e, "the same event");
    let h = copies[kinds.iter().position(|k| *k == NodeType::Host).unwrap()];
    assert_eq!(rt.host_node_read(h).unwrap(), host, "the same function and user data");
    // Every edge copied: sleep → fill → host → record, wait → copy (the order the software GPU
    // runs a graph's branches in would hide a lost one).
    let wait = copies[kinds.iter().position(|k| *k == NodeType::EventWait).unwrap()];
    let preds = |n: Node| -> Vec<Node> { rt.graph_edges(Graph(template)).unwrap().iter().filter(|e| e.to == n).map(|e| e.from).collect() };
    let kernels: Vec<Node> = copies.iter().zip(&kinds).filter(|(_, k)| **k == NodeType::Kernel).map(|(&n, _)| n).collect();
    let [sleep_node, fill_node, copy_node] = kernels[..] else { panic!("{kinds:?}") };
    assert_eq!(
        (preds(sleep_node), preds(fill_node), preds(h), preds(record), preds(wait), preds(copy_node)),
        (vec![], vec![sleep_node], vec![fill_node], vec![h], vec![], vec![wait])
    );
    parent.finalize();
    rt.graph_destroy(g).unwrap();

    let other = rt.stream_create(0, 1, 0).unwrap();
    let run = |x: u64, w: u64, launches: u32| {
        gpu.write(z, &[launches as f32; N]);
        // The gate: recorded by another stream after 20 ms, before the launch is issued.
        common::run(rt, gpu.k.sleep, &args::sleep(20_000), other);
        rt.event_record(gate, other).unwrap();
        parent.launch(&gpu);
        // A second stream waits on the recorded event, then copies x: it sees the fill.
        rocm_cmdbuf::runtime::Streams::stream_synchronize(rt, other).unwrap();
        wait_event(&gpu, other, e);
        rt.copy_device_async(d, x, BYTES as usize, other).unwrap();
        finish(&gpu, other, "the copy after the event");
        finish(&gpu, gpu.stream, "the launch");
        assert_eq!(u32s(&gpu, d), vec![7; N], "launch {launches}: the stream waiting on the event saw the fill");
        assert_eq!(gpu.read(w, N), vec![launches as f32; N], "launch {launches}: the copy waited for the gate");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), launches, "once per launch");
    };
    run(x, w, 1);
    run(x, w, 2);
    // A host function is code the library cannot see and the event nodes synchronize with work
    // outside the graph: no move in place while they are in it; nothing changes.
    let (x2, w2) = (zeroed(&gpu), zeroed(&gpu));
    let r = parent.update_allocs(&[(x2, BYTES), (z, BYTES), (w2, BYTES)]);
    assert_eq!((r.moved_allocations, r.patched_sites, r.needs_rerecord), (0, 0, 1));
    assert_eq!(fallbacks(&parent)[RCB_FALLBACK_OPAQUE_REFERENCE as usize], 1);
    gpu.write(x2, &[0.0; N]);
    run(x, w, 3);
    assert_eq!(u32s(&gpu, x2), vec![0; N], "the new x is not written");

    // A re-trace with the same event and host node updates in place; another function or user
    // data is refused with nothing changed.
    parent.begin_update();
    let g2 = source(x2, w2, &host);
    assert_eq!(update_flattened(&parent, group, null(), g2).map(|r| r.flattened), Ok(1));
    rt.graph_destroy(g2).unwrap();
    let g3 = source(x2, w2, &rocm_cmdbuf::runtime::HostNode { function: count_other, user_data: user });
    assert_eq!(update_flattened(&parent, group, null(), g3), Err(RCB_STATUS_UNSUPPORTED));
    assert!(last_error().contains("host node with other parameters"), "{}", last_error());
    rt.graph_destroy(g3).unwrap();
    parent.finalize();
    run(x2, w2, 4);

    drop(parent);
    rt.stream_destroy(other).unwrap();
    rt.event_destroy(e).unwrap();
    rt.event_destroy(gate).unwrap();
}

impl DriverApi {
    /// `hipStreamWaitEvent` / `cuStreamWaitEvent`, which the `Runtime` interface does not make.
    fn wait_event(&self, stream: rocm_cmdbuf::runtime::Stream, event: rocm_cmdbuf::runtime::Event) {
        type WaitFn = unsafe extern "C" fn(*mut c_void, *mut c_void, u32) -> i32;
        let wait: WaitFn = self.sym("hipStreamWaitEvent", "cuStreamWaitEvent");
        assert_eq!(unsafe { wait(stream.0, event.0, 0) }, 0);
    }
}

fn wait_event(gpu: &Gpu, stream: rocm_cmdbuf::runtime::Stream, event: rocm_cmdbuf::runtime::Event) {
    DriverApi::of(gpu).wait_event(stream, event);
}

/// A stream write captured into a graph (a memory-operation node on CUDA and on the software
/// GPU, which captures what clr runs at once) is flattened with its operation; the word it writes
/// is pinned: a move of that allocation is refused, a move of another is patched.
#[test]
fn a_memory_operation_node_is_flattened_and_pins_the_word_it_writes() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let rt = gpu.rt;
    let Some(memory) = common::supported("stream memory operations", rt.stream_memory()) else { return };
    let (x, word) = (zeroed(&gpu), rt.malloc(0, 8).unwrap());
    rt.direct().copy_to_device(word, &0u64.to_le_bytes()).unwrap();
    let g = if memory.memory_ops_captured() {
        rt.begin_capture(gpu.stream, CaptureMode::ThreadLocal).unwrap();
        common::run(rt, gpu.k.fill_u32, &args::fill(x, 3, N as u64), gpu.stream);
        memory.stream_write_u64(gpu.stream, word, 0x5eed).unwrap();
        rt.end_capture(gpu.stream).unwrap()
    } else {
        // clr runs a stream write outside the capture: its node comes from
        // hipGraphAddBatchMemOpNode (ROCm 6.4+). One WRITE_VALUE_64 (5) of 0x5eed to the word.
        let g = rt.graph_create().unwrap();
        let f = rt.add_kernel_node(g, &[], &common::launch(gpu.k.fill_u32, &fill_args(x, 3))).unwrap();
        let write = rocm_cmdbuf::runtime::MemOp([5, word, 0x5eed, 0, 0, 0]);
        let ops = rocm_cmdbuf::runtime::MemOpNode { context: 0, ops: vec![write], flags: 0 };
        let Some(_) = common::supported("memory-operation nodes", rt.add_mem_op_node(g, &[f], &ops)) else { return };
        g
    };
    let parent = Cb::primary();
    parent.set_allocs(&[(x, BYTES), (word, 8)]);
    let (_, report) = flatten(&parent, &[], null(), g).unwrap();
    assert_eq!((report.flattened, report.nodes, report.sites), (1, 2, 1), "{}", reason(&report));
    parent.finalize();
    rt.graph_destroy(g).unwrap();
    parent.launch(&gpu);
    finish(&gpu, gpu.stream, "the launch");
    let mut got = [0u8; 8];
    rt.direct().copy_from_device(&mut got, word).unwrap();
    assert_eq!(u64::from_le_bytes(got), 0x5eed, "the copied operation wrote its word");
    assert_eq!(u32s(&gpu, x), vec![3; N]);

    // The operation's word is no patch site, and another agent may synchronize with the graph
    // through it: no allocation moves in place, the kernel's buffer included.
    let refused = rcb_update_report { needs_rerecord: 1, ..Default::default() };
    let (word2, x2) = (rt.malloc(0, 8).unwrap(), zeroed(&gpu));
    assert_eq!(parent.move_allocs(&[(1, word2)]), refused, "the operation's word");
    assert_eq!(parent.move_allocs(&[(0, x2)]), refused, "the kernel's buffer");
    assert_eq!(fallbacks(&parent)[RCB_FALLBACK_OPAQUE_REFERENCE as usize], 2);
    gpu.write(x, &[0.0; N]);
    parent.launch(&gpu);
    finish(&gpu, gpu.stream, "the launch");
    assert_eq!((u32s(&gpu, x), u32s(&gpu, x2)), (vec![3; N], vec![0; N]), "nothing changed");
    rt.free(word).unwrap();
    rt.free(word2).unwrap();
}

/// A memory allocation node: never flattened (a copy would allocate elsewhere), counted as its
/// own reason; HIP clones such a graph as a child node, CUDA adds it only by moving the node out
/// of the caller's graph, so there the call fails and adds nothing.
#[test]
fn a_memory_allocation_node_is_refused_with_its_own_reason() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let g = gpu.rt.graph_create().unwrap();
    let (alloc, _) = api.add_mem_alloc_node(g, 4096);
    let x = zeroed(&gpu);
    gpu.rt.add_kernel_node(g, &[alloc], &common::launch(gpu.k.fill_u32, &fill_args(x, 1))).unwrap();
    let parent = Cb::primary();
    let flattened = flatten(&parent, &[], null(), g);
    // Read before the next call, which clears it.
    let e = last_error();
    let counted = fallbacks(&parent);
    assert_eq!(counted[RCB_FALLBACK_MEMORY_NODE as usize], 1);
    assert_eq!(counted.iter().sum::<u64>(), 1);
    if api.cuda {
        assert_eq!(flattened.map(|(_, r)| r.flattened), Err(RCB_STATUS_UNSUPPORTED));
        assert!(e.contains("memory allocation node") && e.contains("nothing was added"), "{e}");
        assert_eq!(node_count(&parent), 0);
    } else {
        let (_, report) = flattened.unwrap();
        assert_eq!(report.flattened, 0);
        assert!(reason(&report).contains("memory allocation node"), "{}", reason(&report));
        assert_eq!(node_count(&parent), 1, "one cloned child node");
    }
    gpu.rt.graph_destroy(g).unwrap();
}

/// XLA's `lax.cond` and `lax.while_loop` graphs on CUDA hold conditional nodes: neither flattened
/// (the body runs on a value set through a handle of its own graph) nor clonable into a child
/// node (CUDA forbids it): the call says so with `RCB_STATUS_UNSUPPORTED` and its own counter, and
/// adds nothing. HIP has no conditional node.
#[test]
fn a_conditional_node_is_refused_with_a_status_and_nothing_added() {
    let _serial = common::serial();
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    if !api.cuda {
        return common::skip("every check", "HIP has no conditional node");
    }
    let x = zeroed(&gpu);
    let g = gpu.rt.graph_create().unwrap();
    api.add_conditional_node(&gpu, g, x, 9, N);
    // The graph itself runs: its body sets x.
    let exec = gpu.rt.instantiate(g).unwrap();
    gpu.rt.graph_launch(exec, gpu.stream).unwrap();
    gpu.sync();
    gpu.rt.exec_destroy(exec).unwrap();
    assert_eq!(u32s(&gpu, x), vec![9; N]);

    let parent = Cb::primary();
    let e = parent.memset(&[], x, 0, 4, 1);
    assert_eq!(flatten(&parent, &[e], null(), g).map(|(_, r)| r.flattened), Err(RCB_STATUS_UNSUPPORTED));
    let message = last_error();
    assert!(message.contains("conditional node") && message.contains("nothing was added"), "{message}");
    assert_eq!(fallbacks(&parent)[RCB_FALLBACK_CONDITIONAL_NODE as usize], 1);
    assert_eq!(node_count(&parent), 1, "only the memset before it");
    // The command buffer is intact: it finalizes and runs without the child.
    parent.finalize();
    parent.launch(&gpu);
    assert_eq!(u32s(&gpu, x)[0], 0);
    gpu.rt.graph_destroy(g).unwrap();
}

/// A graph of `copy(y ← x)` for each `y` of `ys`, owning a user object whose destructor poisons
/// `x`.
fn owning_copies(gpu: &Gpu, api: &DriverApi, ys: &[u64], x: u64, owned: &Owned) -> Graph {
    let g = gpu.rt.graph_create().unwrap();
    for &y in ys {
        gpu.rt.add_kernel_node(g, &[], &common::launch(gpu.k.copy_u8, &pack(&args::copy(y, x, (N * 4) as u64)))).unwrap();
    }
    api.attach_user_object(g, owned);
    g
}

/// A push failing at the middle node of a three-node group. The
/// node after it is not pushed, yet must take the new source's parameters too (recorded as not
/// pushed, so the finalize pushes it): otherwise it would go on reading the old source, which is
/// given up once the launches before the update have finished.
#[test]
fn a_push_failing_at_the_middle_node_of_a_flattened_group_leaves_the_rest_on_the_new_source() {
    let _serial = common::serial();
    let Some(sim) = common::hipsim_or_skip() else { return };
    let Some(gpu) = gpu() else { return };
    let api = DriverApi::of(&gpu);
    let (x1, x2) = (gpu.upload(&iota(1.0)), gpu.upload(&iota(500.0)));
    let ys = [zeroed(&gpu), zeroed(&gpu), zeroed(&gpu)];
    let first = Owned { runs: 0.into(), poison: Some(x1) };
    let second = Owned { runs: 0.into(), poison: Some(x2) };
    let g1 = owning_copies(&gpu, &api, &ys, x1, &first);
    let cb = Cb::primary();
    let (group, report) = flatten(&cb, &[], null(), g1).unwrap();
    assert_eq!((report.flattened, report.nodes), (1, 3), "{}", reason(&report));
    cb.finalize();
    gpu.rt.graph_destroy(g1).unwrap();
    cb.launch(&gpu);
    let read_all = || ys.iter().map(|&y| gpu.read(y, N)).collect::<Vec<_>>();
    assert_eq!(read_all(), vec![iota(1.0); 3]);

    let g2 = owning_copies(&gpu, &api, &ys, x2, &second);
    cb.begin_update();
    sim.set_faults("hipGraphExecKernelNodeSetParams:2");
    let updated = update_flattened(&cb, group, null(), g2);
    let message = last_error();
    sim.set_faults("");
    assert_eq!(updated.err(), Some(RCB_STATUS_RUNTIME_ERROR), "{message}");
    assert!(message.contains("node 1 of 3"), "{message}");
    gpu.rt.graph_destroy(g2).unwrap();
    cb.finalize();
    for y in ys {
        gpu.rt.direct().copy_to_device(y, &vec![0u8; N * 4]).unwrap();
    }
    cb.launch(&gpu);
    assert_eq!(read_all(), vec![iota(500.0); 3], "a node of the group still reads the old source");
    cb.launch(&gpu);
    assert_eq!(runs_after(&gpu, &first, 1), 1, "the old source is still kept beside the new one");
    assert_eq!(read_all(), vec![iota(500.0); 3]);
    drop(cb);
    assert_eq!(runs_after(&gpu, &second, 1), 1);
}
