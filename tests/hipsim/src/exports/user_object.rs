use std::ffi::c_void;

use crate::error::INVALID_VALUE;
use crate::ffi::{hip_export, out};
use crate::graph;
use crate::user_object::{self, Destructor};

/// hipUserObjectNoDestructorSync, the one flag hipUserObjectCreate takes.
const NO_DESTRUCTOR_SYNC: u32 = 1;
/// hipGraphUserObjectMove: the graph takes the caller's references instead of new ones.
const MOVE: u32 = 1;

hip_export! {
    fn hipUserObjectCreate(o: *mut usize, ptr: *mut c_void, destroy: Option<Destructor>, refs: u32, flags: u32) {
        if o.is_null() || flags != NO_DESTRUCTOR_SYNC {
            return Err(INVALID_VALUE);
        }
        let h = user_object::create(ptr, destroy.ok_or(INVALID_VALUE)?, refs)?;
        // SAFETY: the C caller's out-pointer, checked for null above, is writable.
        unsafe { out(o, h) }
    }

    fn hipUserObjectRetain(o: usize, count: u32) {
        user_object::retain(o, count)
    }

    fn hipUserObjectRelease(o: usize, count: u32) {
        user_object::release(o, count)?;
        user_object::run_pending();
        Ok(())
    }

    fn hipGraphRetainUserObject(g: usize, o: usize, count: u32, flags: u32) {
        if flags & !MOVE != 0 || count == 0 {
            return Err(INVALID_VALUE);
        }
        let mut gs = graph::lock();
        gs.graph(g)?;
        if flags & MOVE == 0 {
            user_object::retain(o, count)?;
        }
        let owned = gs.graph_mut(g)?.user_objects.entry(o).or_default();
        *owned = owned.checked_add(count).ok_or(INVALID_VALUE)?;
        Ok(())
    }

    fn hipGraphReleaseUserObject(g: usize, o: usize, count: u32) {
        let mut gs = graph::lock();
        let owned = gs.graph_mut(g)?.user_objects.get_mut(&o).ok_or(INVALID_VALUE)?;
        *owned = owned.checked_sub(count).ok_or(INVALID_VALUE)?;
        if *owned == 0 {
            gs.graph_mut(g)?.user_objects.remove(&o);
        }
        drop(gs);
        user_object::release(o, count)?;
        user_object::run_pending();
        Ok(())
    }
}
