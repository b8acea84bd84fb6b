//! User objects: a destructor run when the last reference goes, references owned by the program
//! or by graphs. As in ROCm's clr, a clone of a graph (hipGraphClone, and the clone a child-graph
//! node makes) owns one reference to every user object of its source, and destroying a graph
//! releases what it owns. Destructors run outside the graph lock, on the thread whose call
//! released the last reference, so that a test's destructor may call back into the runtime.

use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

use crate::error::{HipResult, INVALID_VALUE};
use crate::handles::Registry;

pub type Destructor = unsafe extern "C" fn(*mut c_void);

pub struct UserObject {
    destroy: Destructor,
    ptr: usize,
    refs: Mutex<u32>,
}

pub static OBJECTS: LazyLock<Registry<UserObject>> = LazyLock::new(Registry::new);

/// Destructors whose last reference went, run by [`run_pending`].
static PENDING: Mutex<Vec<(Destructor, usize)>> = Mutex::new(Vec::new());

pub fn create(ptr: *mut c_void, destroy: Destructor, refs: u32) -> HipResult<usize> {
    if refs == 0 {
        return Err(INVALID_VALUE);
    }
    Ok(OBJECTS.insert(UserObject { destroy, ptr: ptr as usize, refs: Mutex::new(refs) }))
}

pub fn retain(h: usize, count: u32) -> HipResult {
    let o = OBJECTS.get(h)?;
    let mut refs = o.refs.lock().unwrap();
    *refs = refs.checked_add(count).ok_or(INVALID_VALUE)?;
    Ok(())
}

/// Drops `count` references; the last one queues the destructor for [`run_pending`].
pub fn release(h: usize, count: u32) -> HipResult {
    let o = OBJECTS.get(h)?;
    let mut refs = o.refs.lock().unwrap();
    *refs = refs.checked_sub(count).ok_or(INVALID_VALUE)?;
    if *refs == 0 {
        drop(refs);
        OBJECTS.remove(h)?;
        PENDING.lock().unwrap().push((o.destroy, o.ptr));
    }
    Ok(())
}

/// Runs the destructors queued so far; call with no lock of this library held.
pub fn run_pending() {
    let due = std::mem::take(&mut *PENDING.lock().unwrap());
    for (destroy, ptr) in due {
        // SAFETY: the program gave this destructor and its argument for exactly this call.
        unsafe { destroy(ptr as *mut c_void) };
    }
}
