use std::ffi::c_void;

use crate::abi::{HostNodeParams, KernelNodeParams, Memcpy3DParms, MemsetParams, PitchedPtr, Pos};
use crate::error::{HipResult, INVALID_VALUE};
use crate::event::EVENTS;
use crate::ffi::{hip_export, out, slice};
use crate::graph::{self, KernelOp, MemsetOp, Op};
use crate::knobs;
use crate::module::kernel_op;

/// # Safety
/// `p` is null or points at node parameters whose arrays are valid as HIP requires.
pub(super) unsafe fn kernel_from(p: *const KernelNodeParams) -> HipResult<KernelOp> {
    // SAFETY: null or readable, per the contract.
    let p = unsafe { p.as_ref() }.ok_or(INVALID_VALUE)?;
    // SAFETY: the parameters' arrays are valid, per the contract.
    unsafe { kernel_op(p.func as usize, p.grid_dim, p.block_dim, p.shared_mem_bytes, p.kernel_params, p.extra) }
}

/// # Safety
/// `node` is null or writable; `deps` is null with `n` zero or has `n` readable entries.
unsafe fn add(node: *mut usize, g: usize, deps: *const usize, n: usize, op: Op) -> HipResult {
    if node.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: per the contract.
    let deps = unsafe { slice(deps, n)? };
    let h = graph::lock().add(g, deps, op)?;
    // SAFETY: per the contract.
    unsafe { out(node, h) }
}

/// CUDA-style list output: count only when `list` is NULL, else fill up to `*num`.
///
/// # Safety
/// `num` is null or readable and writable; `list` is null or has `*num` writable entries.
unsafe fn write_list(items: &[usize], list: *mut usize, num: *mut usize) -> HipResult {
    // SAFETY: per the contract.
    let num = unsafe { num.as_mut() }.ok_or(INVALID_VALUE)?;
    if list.is_null() {
        *num = items.len();
        return Ok(());
    }
    for i in 0..*num {
        // SAFETY: `list` has `*num` entries, per the contract.
        unsafe { *list.add(i) = items.get(i).copied().unwrap_or(0) };
    }
    *num = (*num).min(items.len());
    Ok(())
}

pub(super) fn memcpy_kind_ok(kind: i32) -> HipResult {
    if (0..=4).contains(&kind) { Ok(()) } else { Err(INVALID_VALUE) }
}

hip_export! {
    fn hipGraphCreate(g: *mut usize, flags: u32) {
        if g.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(g, graph::lock().create(false, true)) }
    }

    fn hipGraphDestroy(g: usize) {
        let mut gs = graph::lock();
        if gs.graph(g)?.embedded {
            return Err(INVALID_VALUE);
        }
        gs.destroy(g)?;
        drop(gs);
        crate::user_object::run_pending();
        Ok(())
    }

    fn hipGraphClone(clone: *mut usize, g: usize) {
        if clone.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(clone, graph::lock().clone_graph(g, false)?) }
    }

    fn hipGraphAddKernelNode(node: *mut usize, g: usize, deps: *const usize, n: usize, p: *const KernelNodeParams) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::Kernel(kernel_from(p)?)) }
    }

    fn hipGraphAddMemcpyNode1D(
        node: *mut usize, g: usize, deps: *const usize, n: usize,
        dst: *mut c_void, src: *const c_void, count: usize, kind: i32,
    ) {
        memcpy_kind_ok(kind)?;
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::Memcpy { dst: dst as u64, src: src as u64, count, kind }) }
    }

    fn hipGraphAddMemsetNode(node: *mut usize, g: usize, deps: *const usize, n: usize, p: *const MemsetParams) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::Memset(MemsetOp::from_c(p)?)) }
    }

    fn hipGraphAddEmptyNode(node: *mut usize, g: usize, deps: *const usize, n: usize) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::Empty) }
    }

    fn hipGraphAddHostNode(node: *mut usize, g: usize, deps: *const usize, n: usize, p: *const HostNodeParams) {
        // SAFETY: the C caller's `p` is null or a readable hipHostNodeParams, as HIP requires.
        let p = unsafe { p.as_ref() }.ok_or(INVALID_VALUE)?;
        let func = p.func.ok_or(INVALID_VALUE)?;
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::Host { func, user: p.user_data as usize }) }
    }

    fn hipGraphAddEventRecordNode(node: *mut usize, g: usize, deps: *const usize, n: usize, e: usize) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::EventRecord(EVENTS.get(e)?)) }
    }

    fn hipGraphAddEventWaitNode(node: *mut usize, g: usize, deps: *const usize, n: usize, e: usize) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::EventWait(EVENTS.get(e)?)) }
    }

    fn hipGraphAddChildGraphNode(node: *mut usize, g: usize, deps: *const usize, n: usize, child: usize) {
        if node.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's array is null with a zero count or has that many entries, as HIP requires.
        let deps = unsafe { slice(deps, n) }?;
        let mut gs = graph::lock();
        gs.graph(g)?;
        let copy = gs.clone_graph(child, true)?;
        match gs.add(g, deps, Op::Child(copy)) {
            // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
            Ok(h) => unsafe { out(node, h) },
            Err(e) => {
                gs.destroy(copy)?;
                Err(e)
            }
        }
    }

    fn hipGraphAddDependencies(g: usize, from: *const usize, to: *const usize, n: usize) {
        // SAFETY: the C caller's array is null with a zero count or has that many entries, as HIP requires.
        let (from, to) = (unsafe { slice(from, n) }?, unsafe { slice(to, n) }?);
        let mut gs = graph::lock();
        gs.graph(g)?;
        from.iter().zip(to).try_for_each(|(&a, &b)| gs.add_edge(g, a, b))
    }

    fn hipGraphGetNodes(g: usize, nodes: *mut usize, num: *mut usize) {
        let gs = graph::lock();
        let items: Vec<usize> = gs.graph(g)?.nodes.iter().map(|n| n.handle).collect();
        // SAFETY: the C caller's pointers are valid as HIP requires (see `write_list`).
        unsafe { write_list(&items, nodes, num) }
    }

    fn hipGraphGetRootNodes(g: usize, nodes: *mut usize, num: *mut usize) {
        let gs = graph::lock();
        let items: Vec<usize> = gs.graph(g)?.nodes.iter().filter(|n| n.deps.is_empty()).map(|n| n.handle).collect();
        // SAFETY: the C caller's pointers are valid as HIP requires (see `write_list`).
        unsafe { write_list(&items, nodes, num) }
    }

    fn hipGraphGetEdges(g: usize, from: *mut usize, to: *mut usize, num: *mut usize) {
        let gs = graph::lock();
        let edges: Vec<(usize, usize)> =
            gs.graph(g)?.nodes.iter().flat_map(|n| n.deps.iter().map(move |&d| (d, n.handle))).collect();
        if from.is_null() != to.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's pointers are valid as HIP requires (see `write_list`).
        unsafe { write_list(&edges.iter().map(|e| e.0).collect::<Vec<_>>(), from, num) }?;
        if !to.is_null() {
            // SAFETY: `write_list` checked `num` for null; HIP requires it to be readable.
            let n = unsafe { *num };
            for (i, e) in edges.iter().take(n).enumerate() {
                // SAFETY: the C caller's `to` has room for the `n` entries `num` promised.
                unsafe { *to.add(i) = e.1 };
            }
        }
        Ok(())
    }

    fn hipGraphNodeGetType(node: usize, t: *mut i32) {
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(t, graph::lock().node(node)?.op.type_code()) }
    }

    fn hipGraphNodeGetDependencies(node: usize, deps: *mut usize, num: *mut usize) {
        let gs = graph::lock();
        // SAFETY: the C caller's pointers are valid as HIP requires (see `write_list`).
        unsafe { write_list(&gs.node(node)?.deps, deps, num) }
    }

    fn hipGraphNodeGetDependentNodes(node: usize, deps: *mut usize, num: *mut usize) {
        let gs = graph::lock();
        let g = gs.owner_of(node)?;
        let items: Vec<usize> =
            gs.graph(g)?.nodes.iter().filter(|n| n.deps.contains(&node)).map(|n| n.handle).collect();
        // SAFETY: the C caller's pointers are valid as HIP requires (see `write_list`).
        unsafe { write_list(&items, deps, num) }
    }

    fn hipGraphKernelNodeGetParams(node: usize, p: *mut KernelNodeParams) {
        let params = graph::lock().node_mut(node)?.kernel_params()?;
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, params) }
    }

    fn hipGraphKernelNodeSetParams(node: usize, p: *const KernelNodeParams) {
        // Values are copied before the node drops its old arrays, so `p` may point into them.
        // SAFETY: the C caller's pointers are valid as HIP requires (see `kernel_from`).
        let op = unsafe { kernel_from(p) }?;
        let mut gs = graph::lock();
        let n = gs.node_mut(node)?;
        if !matches!(n.op, Op::Kernel(_)) {
            return Err(INVALID_VALUE);
        }
        n.set_op(Op::Kernel(op));
        Ok(())
    }

    fn hipGraphMemcpyNodeGetParams(node: usize, p: *mut Memcpy3DParms) {
        let gs = graph::lock();
        let n = gs.node(node)?;
        if !matches!(n.op, Op::Memcpy { .. }) {
            return Err(INVALID_VALUE);
        }
        let zero = Pos { x: 0, y: 0, z: 0 };
        let pitched = |ptr: u64| PitchedPtr { ptr: ptr as *mut c_void, pitch: 0, xsize: 0, ysize: 0 };
        // Every node hipsim makes is a 1-D one (hipGraphAddMemcpyNode1D, a captured copy). From
        // ROCm 7.2 clr zero-fills its 3-D parameters and sets pointers, extent and kind when the
        // node is created; before, it never writes them (modelled as zeros: a 0-byte copy
        // between null pointers, which reads as a valid 1-D copy).
        let params = match &n.memcpy_as_created {
            Some(Op::Memcpy { dst, src, count, kind }) if knobs::get().rocm_7_2_memcpy() => Memcpy3DParms {
                src_array: std::ptr::null_mut(),
                src_pos: zero,
                src_ptr: pitched(*src),
                dst_array: std::ptr::null_mut(),
                dst_pos: zero,
                dst_ptr: pitched(*dst),
                extent: Pos { x: *count, y: 1, z: 1 },
                kind: *kind,
            },
            _ => Memcpy3DParms {
                src_array: std::ptr::null_mut(),
                src_pos: zero,
                src_ptr: pitched(0),
                dst_array: std::ptr::null_mut(),
                dst_pos: zero,
                dst_ptr: pitched(0),
                extent: zero,
                kind: 0,
            },
        };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, params) }
    }

    fn hipGraphMemcpyNodeSetParams1D(node: usize, dst: *mut c_void, src: *const c_void, count: usize, kind: i32) {
        memcpy_kind_ok(kind)?;
        let mut gs = graph::lock();
        let n = gs.node_mut(node)?;
        if !matches!(n.op, Op::Memcpy { .. }) {
            return Err(INVALID_VALUE);
        }
        n.set_op(Op::Memcpy { dst: dst as u64, src: src as u64, count, kind });
        Ok(())
    }

    fn hipGraphMemsetNodeSetParams(node: usize, p: *const MemsetParams) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `from_c`).
        let m = unsafe { MemsetOp::from_c(p) }?;
        let mut gs = graph::lock();
        let n = gs.node_mut(node)?;
        if !matches!(n.op, Op::Memset(_)) {
            return Err(INVALID_VALUE);
        }
        n.set_op(Op::Memset(m));
        Ok(())
    }

    fn hipGraphMemsetNodeGetParams(node: usize, p: *mut MemsetParams) {
        let Op::Memset(m) = graph::lock().node(node)?.op else { return Err(INVALID_VALUE) };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, MemsetParams {
            dst: m.dst as *mut c_void,
            element_size: m.elem,
            height: m.height,
            pitch: m.pitch,
            value: m.value,
            width: m.width,
        }) }
    }

    fn hipGraphChildGraphNodeGetGraph(node: usize, g: *mut usize) {
        let Op::Child(c) = graph::lock().node(node)?.op else { return Err(INVALID_VALUE) };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(g, c) }
    }
}
