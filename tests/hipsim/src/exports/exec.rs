use std::ffi::{c_char, c_void};
use std::sync::Arc;

use super::graph::{kernel_from, memcpy_kind_ok};
use crate::abi::{KernelNodeParams, MemsetParams};
use crate::capture;
use crate::error::{GRAPH_EXEC_UPDATE_FAILURE, HipResult, INVALID_HANDLE, INVALID_VALUE};
use crate::exec::{self, ExecGraph, ExecNode};
use crate::ffi::{hip_export, out, out_opt};
use crate::graph::{self, MemsetOp, Op};
use crate::stream::resolve;
use crate::{device, kernarg, knobs};

fn instantiate(e: *mut usize, g: usize) -> HipResult {
    if e.is_null() {
        return Err(INVALID_VALUE);
    }
    let snap = ExecGraph::snapshot(&graph::lock(), g)?;
    let h = crate::handles::next_handle();
    kernarg::instantiated(h, device::current()?, &snap)?;
    exec::execs().insert(h, Arc::new(snap));
    // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
    unsafe { out(e, h) }
}

/// Applies `apply` to the exec's copy of template node `node` once `check` accepts it and the
/// update's `bytes` of kernel-argument staging are had (see `kernarg.rs`); in-flight launches
/// keep their copy.
fn modify(e: usize, node: usize, bytes: u64, check: impl FnOnce(&ExecNode) -> HipResult, apply: impl FnOnce(&mut ExecNode)) -> HipResult {
    let mut execs = exec::execs();
    let ex = execs.get_mut(&e).ok_or(INVALID_HANDLE)?;
    let Some(n) = ex.find(node) else {
        return Err(if graph::lock().owner_of(node).is_ok() { INVALID_VALUE } else { INVALID_HANDLE });
    };
    check(n)?;
    if kernarg::update(e, bytes)? == kernarg::Update::Apply {
        apply(Arc::make_mut(ex).find_mut(node).expect("found above"));
    }
    Ok(())
}

fn is_kernel(n: &ExecNode) -> HipResult {
    if matches!(n.op, Op::Kernel(_)) { Ok(()) } else { Err(INVALID_VALUE) }
}

hip_export! {
    fn hipGraphInstantiate(e: *mut usize, g: usize, err_node: *mut usize, log: *mut c_char, log_size: usize) {
        // SAFETY: the C caller's out-pointer is null (skipped) or writable, as HIP requires.
        unsafe { out_opt(err_node, 0) };
        if log_size > 0 {
            // SAFETY: the C caller's log is null (skipped) or has `log_size` writable bytes.
            unsafe { out_opt(log, 0) };
        }
        instantiate(e, g)
    }

    fn hipGraphInstantiateWithFlags(e: *mut usize, g: usize, flags: u64) {
        if flags & !0xF != 0 {
            return Err(INVALID_VALUE);
        }
        instantiate(e, g)
    }

    fn hipGraphExecDestroy(e: usize) {
        exec::execs().remove(&e).ok_or(INVALID_HANDLE)?;
        exec::destroyed(e);
        kernarg::destroyed(e);
        Ok(())
    }

    fn hipGraphLaunch(e: usize, s: usize) {
        let ex = exec::get(e)?;
        let t = resolve(s)?;
        if capture::is_capturing(&t) && !knobs::get().clr_graph_launch() {
            let child = ex.to_template(&mut graph::lock())?;
            return capture::record(&t, &Op::Child(child)).map(drop);
        }
        let dev = t.device();
        let launch = exec::InFlight::new(e);
        let events = ex.launch_events();
        t.submit(Box::new(move || {
            let _finished_when_dropped = launch;
            let ran = ex.run(dev, &events);
            if ran.is_err() {
                ex.complete_records(&events);
            }
            ran
        }))
    }

    fn hipGraphExecKernelNodeSetParams(e: usize, node: usize, p: *const KernelNodeParams) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `kernel_from`).
        let op = Op::Kernel(unsafe { kernel_from(p) }?);
        modify(e, node, kernarg::node_update_bytes(&op), is_kernel, |n| n.op = op)
    }

    fn hipGraphExecMemcpyNodeSetParams1D(
        e: usize, node: usize, dst: *mut c_void, src: *const c_void, count: usize, kind: i32,
    ) {
        memcpy_kind_ok(kind)?;
        let op = Op::Memcpy { dst: dst as u64, src: src as u64, count, kind };
        let check = |n: &ExecNode| match n.op {
            Op::Memcpy { dst: old_dst, src: old_src, .. } => {
                let m = crate::memory::lock();
                let same = |a: u64, b: u64| m.class_of(a) == m.class_of(b);
                if knobs::get().memcpy_class() && !(same(old_dst, dst as u64) && same(old_src, src as u64)) {
                    return Err(INVALID_VALUE);
                }
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        };
        modify(e, node, kernarg::node_update_bytes(&op), check, |n| n.op = op)
    }

    fn hipGraphExecMemsetNodeSetParams(e: usize, node: usize, p: *const MemsetParams) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `from_c`).
        let op = Op::Memset(unsafe { MemsetOp::from_c(p) }?);
        let check = |n: &ExecNode| if matches!(n.op, Op::Memset(_)) { Ok(()) } else { Err(INVALID_VALUE) };
        modify(e, node, kernarg::node_update_bytes(&op), check, |n| n.op = op)
    }

    fn hipGraphExecChildGraphNodeSetParams(e: usize, node: usize, child: usize) {
        let snap = ExecGraph::snapshot(&graph::lock(), child)?;
        let check = |n: &ExecNode| match &n.child {
            Some(c) => {
                c.same_topology(&snap).map_err(|_| INVALID_VALUE)?;
                if knobs::get().memcpy_class() {
                    let m = crate::memory::lock();
                    if !c.same_memcpy_classes(&snap, &|a| m.class_of(a)) {
                        return Err(INVALID_VALUE);
                    }
                }
                Ok(())
            }
            None => Err(INVALID_VALUE),
        };
        let bytes = kernarg::child_update_bytes(&snap);
        modify(e, node, bytes, check, |n| n.child.as_mut().expect("checked").take_params(&snap))
    }

    fn hipGraphExecUpdate(e: usize, g: usize, err_node: *mut usize, result: *mut i32) {
        if result.is_null() {
            return Err(INVALID_VALUE);
        }
        let snap = ExecGraph::snapshot(&graph::lock(), g)?;
        let mut execs = exec::execs();
        let ex = execs.get_mut(&e).ok_or(INVALID_HANDLE)?;
        if let Err((code, node)) = ex.same_topology(&snap) {
            // SAFETY: the C caller's out-pointer, checked for null above, is writable.
            unsafe { *result = code };
            // SAFETY: the C caller's out-pointer is null (skipped) or writable, as HIP requires.
            unsafe { out_opt(err_node, node) };
            return Err(GRAPH_EXEC_UPDATE_FAILURE);
        }
        if kernarg::update(e, kernarg::graph_update_bytes(&snap))? == kernarg::Update::Apply {
            Arc::make_mut(ex).take_params(&snap);
        }
        // SAFETY: the C caller's out-pointer, checked for null above, is writable.
        unsafe { *result = 0 };
        // SAFETY: the C caller's out-pointer is null (skipped) or writable, as HIP requires.
        unsafe { out_opt(err_node, 0) };
        Ok(())
    }
}
