//! Kernel-node launch attributes, with clr's semantics: a node remembers which attribute was set
//! last, reads and copies only that one, and `hipGraphKernelNodeCopyAttributes` takes the
//! source first (`hSrc, hDst`), the reverse of CUDA's `cuGraphKernelNodeCopyAttributes`.

use crate::abi::AccessPolicyWindow;
use crate::error::{HipResult, INVALID_CONTEXT, INVALID_VALUE};
use crate::ffi::hip_export;
use crate::graph::{self, KernelAttrs, Op};

const ACCESS_POLICY_WINDOW: i32 = 1;
const COOPERATIVE: i32 = 2;
const PRIORITY: i32 = 8;
/// hipAccessPropertyPersisting, which clr refuses as a window's miss property.
const ACCESS_PERSISTING: i32 = 2;

fn known(attr: i32) -> HipResult {
    if [ACCESS_POLICY_WINDOW, COOPERATIVE, PRIORITY].contains(&attr) { Ok(()) } else { Err(INVALID_VALUE) }
}

/// The attributes of `node`, which must be a kernel node.
fn attrs_of(gs: &mut graph::Graphs, node: usize) -> HipResult<&mut KernelAttrs> {
    let n = gs.node_mut(node)?;
    if !matches!(n.op, Op::Kernel(_)) {
        return Err(INVALID_VALUE);
    }
    Ok(&mut n.attrs)
}

hip_export! {
    fn hipGraphKernelNodeSetAttribute(node: usize, attr: i32, value: *const u8) {
        known(attr)?;
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut gs = graph::lock();
        let a = attrs_of(&mut gs, node)?;
        match attr {
            ACCESS_POLICY_WINDOW => {
                // SAFETY: the C caller's value is a readable hipKernelNodeAttrValue, whose window
                // member starts it; it may be unaligned for this struct only in theory.
                let w = unsafe { value.cast::<AccessPolicyWindow>().read_unaligned() };
                let bad_ratio = !(0.0..=1.0).contains(&w.hit_ratio) || (w.num_bytes > 0 && w.hit_ratio == 0.0);
                if bad_ratio || w.miss_prop == ACCESS_PERSISTING {
                    return Err(INVALID_VALUE);
                }
                a.window = w;
            }
            // SAFETY: the C caller's value is a readable hipKernelNodeAttrValue (an int first).
            COOPERATIVE => a.cooperative = unsafe { value.cast::<i32>().read_unaligned() },
            // clr checks `priority < Priority::Low (1) || priority > Priority::High (-1)`, which
            // every value fails, so a kernel node's priority can never be set.
            _ => return Err(INVALID_VALUE),
        }
        a.in_use = attr;
        Ok(())
    }

    fn hipGraphKernelNodeGetAttribute(node: usize, attr: i32, value: *mut u8) {
        known(attr)?;
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut gs = graph::lock();
        let a = *attrs_of(&mut gs, node)?;
        if a.in_use != 0 && a.in_use != attr {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the C caller's value is a writable hipKernelNodeAttrValue; only the member
        // asked for is written, as clr does.
        unsafe {
            match attr {
                ACCESS_POLICY_WINDOW => value.cast::<AccessPolicyWindow>().write_unaligned(a.window),
                COOPERATIVE => value.cast::<i32>().write_unaligned(a.cooperative),
                _ => value.cast::<i32>().write_unaligned(a.priority),
            }
        }
        Ok(())
    }

    fn hipGraphKernelNodeCopyAttributes(src: usize, dst: usize) {
        // clr does not check that the nodes are kernel nodes (it reinterprets whatever they
        // are); hipsim refuses other nodes with hipErrorInvalidValue.
        if src == 0 || dst == 0 {
            return Err(INVALID_VALUE);
        }
        let mut gs = graph::lock();
        let from = *attrs_of(&mut gs, src)?;
        let to = attrs_of(&mut gs, dst)?;
        if from.in_use == 0 && to.in_use == 0 {
            return Ok(());
        }
        if to.in_use != 0 && from.in_use != to.in_use {
            return Err(INVALID_CONTEXT);
        }
        to.in_use = from.in_use;
        match from.in_use {
            ACCESS_POLICY_WINDOW => to.window = from.window,
            COOPERATIVE => to.cooperative = from.cooperative,
            PRIORITY => to.priority = from.priority,
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }
}
