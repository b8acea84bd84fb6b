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

fn instantiate(e: *mut usize, g: usize) -> HipResult {
    if e.is_null() {
        return Err(INVALID_VALUE);
    }
    let snap = ExecGraph::snapshot(&graph::lock(), g)?;
    let h = crate::handles::next_handle();
    exec::execs().insert(h, Arc::new(snap));
    // SAFETY: the C caller's out-pointer is null (refused) or writable, as HIP requires.
    unsafe { out(e, h) }
}

/// Applies `f` to the exec's copy of template node `node`; in-flight launches keep theirs.
fn modify(e: usize, node: usize, f: impl FnOnce(&mut ExecNode) -> HipResult) -> HipResult {
    let mut execs = exec::execs();
    let ex = execs.get_mut(&e).ok_or(INVALID_HANDLE)?;
    let Some(n) = Arc::make_mut(ex).find_mut(node) else {
        return Err(if graph::lock().owner_of(node).is_ok() { INVALID_VALUE } else { INVALID_HANDLE });
    };
    f(n)
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
        exec::execs().remove(&e).map(drop).ok_or(INVALID_HANDLE)
    }

    fn hipGraphLaunch(e: usize, s: usize) {
        let ex = exec::get(e)?;
        let t = resolve(s)?;
        if capture::is_capturing(&t) {
            let child = ex.to_template(&mut graph::lock())?;
            return capture::record(&t, &Op::Child(child)).map(drop);
        }
        let dev = t.device();
        t.submit(Box::new(move || ex.run(dev)))
    }

    fn hipGraphExecKernelNodeSetParams(e: usize, node: usize, p: *const KernelNodeParams) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `kernel_from`).
        let op = unsafe { kernel_from(p) }?;
        modify(e, node, |n| match n.op {
            Op::Kernel(_) => {
                n.op = Op::Kernel(op);
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        })
    }

    fn hipGraphExecMemcpyNodeSetParams1D(
        e: usize, node: usize, dst: *mut c_void, src: *const c_void, count: usize, kind: i32,
    ) {
        memcpy_kind_ok(kind)?;
        modify(e, node, |n| match n.op {
            Op::Memcpy { .. } => {
                n.op = Op::Memcpy { dst: dst as u64, src: src as u64, count, kind };
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        })
    }

    fn hipGraphExecMemsetNodeSetParams(e: usize, node: usize, p: *const MemsetParams) {
        // SAFETY: the C caller's pointers are valid as HIP requires (see `from_c`).
        let m = unsafe { MemsetOp::from_c(p) }?;
        modify(e, node, |n| match n.op {
            Op::Memset(_) => {
                n.op = Op::Memset(m);
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        })
    }

    fn hipGraphExecChildGraphNodeSetParams(e: usize, node: usize, child: usize) {
        let snap = ExecGraph::snapshot(&graph::lock(), child)?;
        modify(e, node, |n| match n.child.as_mut() {
            Some(c) => {
                c.same_topology(&snap).map_err(|_| INVALID_VALUE)?;
                c.take_params(&snap);
                Ok(())
            }
            None => Err(INVALID_VALUE),
        })
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
        Arc::make_mut(ex).take_params(&snap);
        // SAFETY: the C caller's out-pointer, checked for null above, is writable.
        unsafe { *result = 0 };
        // SAFETY: the C caller's out-pointer is null (skipped) or writable, as HIP requires.
        unsafe { out_opt(err_node, 0) };
        Ok(())
    }
}
