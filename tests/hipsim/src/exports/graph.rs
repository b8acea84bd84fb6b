use std::ffi::c_void;

use crate::abi::{
    BatchMemOpNodeParams, DrvMemcpy3D, DrvMemcpySide, HostNodeParams, KernelNodeParams, MemAllocNodeParams, Memcpy3DParms, MemsetParams,
    PitchedPtr, Pos,
};
use crate::error::{HipResult, INVALID_VALUE};
use crate::event::EVENTS;
use crate::ffi::{hip_export, out, slice};
use crate::graph::{self, Copy3D, CopySide, KernelOp, MemcpyReport, MemsetOp, Op};
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

/// # Safety
/// `node` is null or writable; `deps` is null with `n` zero or has `n` readable entries.
unsafe fn add_memcpy(node: *mut usize, g: usize, deps: *const usize, n: usize, op: Op, report: MemcpyReport) -> HipResult {
    if node.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: per the contract.
    let deps = unsafe { slice(deps, n)? };
    let h = graph::lock().add_reporting(g, deps, op, Some(report))?;
    // SAFETY: per the contract.
    unsafe { out(node, h) }
}

/// One side of a 3-D copy given as a pitched pointer and a position; hipsim has no arrays.
fn pitched_side(array: *mut c_void, pos: Pos, p: PitchedPtr) -> HipResult<CopySide> {
    if !array.is_null() {
        return Err(INVALID_VALUE);
    }
    Ok(CopySide { ptr: p.ptr as u64, x: pos.x, y: pos.y, z: pos.z, pitch: p.pitch, rows: p.ysize })
}

/// One side of a HIP_MEMCPY3D and whether it lies on the device; hipsim has no arrays.
fn drv_side(s: &DrvMemcpySide) -> HipResult<(CopySide, bool)> {
    let (ptr, device) = match s.memory_type {
        1 => (s.host as u64, false),
        2 | 11 => (s.device as u64, true),
        _ => return Err(INVALID_VALUE),
    };
    Ok((CopySide { ptr, x: s.x_in_bytes, y: s.y, z: s.z, pitch: s.pitch, rows: s.height }, device))
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
        unsafe { add(node, g, deps, n, Op::EventRecord(e, EVENTS.get(e)?)) }
    }

    fn hipGraphAddEventWaitNode(node: *mut usize, g: usize, deps: *const usize, n: usize, e: usize) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::EventWait(e, EVENTS.get(e)?)) }
    }

    fn hipGraphEventRecordNodeGetEvent(node: usize, e: *mut usize) {
        let Op::EventRecord(handle, _) = graph::lock().node(node)?.op else { return Err(INVALID_VALUE) };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(e, handle) }
    }

    fn hipGraphEventWaitNodeGetEvent(node: usize, e: *mut usize) {
        let Op::EventWait(handle, _) = graph::lock().node(node)?.op else { return Err(INVALID_VALUE) };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(e, handle) }
    }

    fn hipGraphHostNodeGetParams(node: usize, p: *mut HostNodeParams) {
        // clr reinterprets any node as a host node here; hipsim refuses the others.
        let Op::Host { func, user } = graph::lock().node(node)?.op else { return Err(INVALID_VALUE) };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, HostNodeParams { func: Some(func), user_data: user as *mut c_void }) }
    }

    fn hipGraphAddBatchMemOpNode(node: *mut usize, g: usize, deps: *const usize, n: usize, p: *const BatchMemOpNodeParams) {
        // SAFETY: the C caller's `p` is null or a readable hipBatchMemOpNodeParams, as HIP requires.
        let p = unsafe { p.as_ref() }.ok_or(INVALID_VALUE)?;
        if p.count == 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's array has `count` operations, as HIP requires.
        let ops = unsafe { slice(p.param_array, p.count as usize) }?.to_vec();
        ops.iter().try_for_each(graph::check_mem_op)?;
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::MemOps { ctx: p.ctx as usize, ops, flags: p.flags }) }
    }

    fn hipGraphBatchMemOpNodeGetParams(node: usize, p: *mut BatchMemOpNodeParams) {
        let gs = graph::lock();
        let Op::MemOps { ctx, ops, flags } = &gs.node(node)?.op else { return Err(INVALID_VALUE) };
        // The array is the node's own, valid until its parameters change or its graph goes.
        let params = BatchMemOpNodeParams {
            ctx: *ctx as *mut c_void,
            count: ops.len() as u32,
            param_array: ops.as_ptr().cast_mut(),
            flags: *flags,
        };
        // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
        unsafe { out(p, params) }
    }

    fn hipGraphAddMemAllocNode(node: *mut usize, g: usize, deps: *const usize, n: usize, p: *mut MemAllocNodeParams) {
        // SAFETY: the C caller's `p` is null or a readable and writable hipMemAllocNodeParams.
        let p = unsafe { p.as_mut() }.ok_or(INVALID_VALUE)?;
        if p.bytesize == 0 {
            return Err(INVALID_VALUE);
        }
        let ptr = crate::memory::lock().reserve_unbacked(crate::device::current()?, p.bytesize);
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::MemAlloc) }?;
        p.dptr = ptr as *mut c_void;
        Ok(())
    }

    fn hipGraphAddMemFreeNode(node: *mut usize, g: usize, deps: *const usize, n: usize, ptr: *mut c_void) {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add`).
        unsafe { add(node, g, deps, n, Op::MemFree) }
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
        let Some(report) = gs.node(node)?.memcpy_report else { return Err(INVALID_VALUE) };
        if p.is_null() {
            return Err(INVALID_VALUE);
        }
        // From ROCm 7.2 clr zero-fills a 1-D node's 3-D parameters and sets pointers, extent and
        // kind when the node is created; before, it never writes them (modelled as zeros: a
        // 0-byte copy between null pointers). Other memcpy nodes report what they were given
        // (a driver node its HIP_MEMCPY3D, read as these parameters).
        let words = if report.one_d && !knobs::get().rocm_7_2_memcpy() { [0; 20] } else { report.words };
        // SAFETY: the C caller's `p` is writable for the 160 bytes of hipMemcpy3DParms, as HIP
        // requires.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr().cast::<u8>(), p.cast::<u8>(), size_of::<Memcpy3DParms>()) };
        Ok(())
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

    fn hipGraphAddMemcpyNode(node: *mut usize, g: usize, deps: *const usize, n: usize, p: *const Memcpy3DParms) {
        // SAFETY: the C caller's `p` is null or a readable hipMemcpy3DParms, as HIP requires.
        let params = unsafe { p.as_ref() }.ok_or(INVALID_VALUE)?;
        memcpy_kind_ok(params.kind)?;
        let copy = Copy3D {
            src: pitched_side(params.src_array, params.src_pos, params.src_ptr)?,
            dst: pitched_side(params.dst_array, params.dst_pos, params.dst_ptr)?,
            width: params.extent.x,
            height: params.extent.y,
            depth: params.extent.z,
            kind: params.kind,
        }
        .checked()?;
        // SAFETY: `p` is readable (above); the C caller's other pointers as HIP requires.
        unsafe { add_memcpy(node, g, deps, n, Op::Memcpy3D(copy), MemcpyReport::as_given(p)) }
    }

    fn hipDrvGraphAddMemcpyNode(node: *mut usize, g: usize, deps: *const usize, n: usize, p: *const DrvMemcpy3D, _ctx: usize) {
        // SAFETY: the C caller's `p` is null or a readable HIP_MEMCPY3D, as HIP requires.
        let params = unsafe { p.as_ref() }.ok_or(INVALID_VALUE)?;
        let ((src, src_device), (dst, dst_device)) = (drv_side(&params.src)?, drv_side(&params.dst)?);
        let kind = match (src_device, dst_device) {
            (false, false) => 0,
            (false, true) => 1,
            (true, false) => 2,
            (true, true) => 3,
        };
        let copy = Copy3D { src, dst, width: params.width_in_bytes, height: params.height, depth: params.depth, kind }.checked()?;
        // clr keeps the HIP_MEMCPY3D where a memcpy node keeps its parameters, and reports its
        // first 160 bytes as hipMemcpy3DParms.
        // SAFETY: `p` is readable for its 184 bytes (above); the C caller's other pointers as HIP
        // requires.
        unsafe { add_memcpy(node, g, deps, n, Op::Memcpy3D(copy), MemcpyReport::as_given(p)) }
    }

    // hipsim has no module globals: a symbol is its device address.
    fn hipGraphAddMemcpyNodeToSymbol(
        node: *mut usize, g: usize, deps: *const usize, n: usize,
        symbol: *const c_void, src: *const c_void, count: usize, offset: usize, kind: i32,
    ) {
        memcpy_kind_ok(kind)?;
        let op = Op::Memcpy { dst: symbol as u64 + offset as u64, src: src as u64, count, kind };
        // clr's node is a 1-D one built with a null destination.
        let report = MemcpyReport::one_d(0, src as u64, count, kind);
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add_memcpy`).
        unsafe { add_memcpy(node, g, deps, n, op, report) }
    }

    fn hipGraphAddMemcpyNodeFromSymbol(
        node: *mut usize, g: usize, deps: *const usize, n: usize,
        dst: *mut c_void, symbol: *const c_void, count: usize, offset: usize, kind: i32,
    ) {
        memcpy_kind_ok(kind)?;
        let op = Op::Memcpy { dst: dst as u64, src: symbol as u64 + offset as u64, count, kind };
        // clr's node is a 1-D one built with a null source.
        let report = MemcpyReport::one_d(dst as u64, 0, count, kind);
        // SAFETY: the C caller's pointers are valid as HIP requires (see `add_memcpy`).
        unsafe { add_memcpy(node, g, deps, n, op, report) }
    }

    fn hipGraphDestroyNode(node: usize) {
        let mut gs = graph::lock();
        gs.remove(node)?;
        drop(gs);
        crate::user_object::run_pending();
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
