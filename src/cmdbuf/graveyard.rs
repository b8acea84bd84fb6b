//! What freed command buffers leave behind while their launches run: a process-wide list of their
//! launch tracking (`launches.rs`), each holding the executable graphs and graphs that launches
//! made before the free may still use, and the events that follow those launches. A free does
//! not wait for them (XLA frees command buffers whose launches are still queued, as CUDA's
//! `cuGraphExecDestroy` allows); later command-buffer calls (a creation, launch, finalize or free,
//! on any thread) each query at most [`QUERIES`] of the events, destroy what they find finished,
//! and never wait on the host. Those calls may come after a device reset destroyed the objects,
//! or query an event while its stream captures; `rcb_cmdbuf_free`'s documentation tells callers
//! how to leave nothing here when that matters.
//!
//! Whatever is still here when the process exits is leaked, never destroyed: the runtime may be
//! gone by then, and nothing runs at exit to wait for the GPU. A forked child starts with an
//! empty list: the parent's is abandoned there (leaked, never touched), since its lock may be
//! held by a parent thread that does not exist in the child and its objects are the parent's.

use super::launches::Launches;
use crate::counters::Counters;
use crate::error::Leaks;
use crate::runtime::Runtime;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Event queries one library call spends on the graveyard at most.
pub const QUERIES: usize = 8;

struct Buried {
    rt: &'static dyn Runtime,
    launches: Launches,
}

type Graves = Mutex<VecDeque<Buried>>;

/// The process's list: null until first used, and again in a forked child. Published with an
/// atomic, never a lock or a once-cell, which a fork could leave held (or half-run) in the child.
static GRAVES: AtomicPtr<Graves> = AtomicPtr::new(std::ptr::null_mut());
/// Whether anything is buried, read without the lock by every call that reaps.
static OCCUPIED: AtomicBool = AtomicBool::new(false);

crate::at_fork::forget_in_forked_child!(forget_in_child);

/// In a forked child, the parent's list is abandoned: the next free starts an empty one.
extern "C" fn forget_in_child() {
    OCCUPIED.store(false, Ordering::Release);
    GRAVES.store(std::ptr::null_mut(), Ordering::Release);
}

/// The process's list, made on first use.
fn graves() -> &'static Graves {
    let current = GRAVES.load(Ordering::Acquire);
    // SAFETY: a non-null value is a leaked list, never freed.
    if let Some(graves) = unsafe { current.as_ref() } {
        return graves;
    }
    let fresh = Box::into_raw(Box::new(Mutex::new(VecDeque::new())));
    match GRAVES.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked; never freed.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // SAFETY: `fresh` was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above: a leaked list.
            unsafe { &*winner }
        }
    }
}

/// A panic while the lock was held left the list whole (each change is one push or pop).
fn lock() -> MutexGuard<'static, VecDeque<Buried>> {
    graves().lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps a freed command buffer's `launches` until what waits in them is destroyed.
pub fn bury(rt: &'static dyn Runtime, launches: Launches) {
    let mut graves = lock();
    graves.push_back(Buried { rt, launches });
    OCCUPIED.store(true, Ordering::Release);
}

/// Looks at the oldest buried command buffer (skipped while another thread looks): destroys what
/// its finished launches used, with at most [`QUERIES`] event queries, and lets it go once nothing
/// waits.
pub fn reap() {
    if !OCCUPIED.load(Ordering::Acquire) {
        return;
    }
    let mut graves = match graves().try_lock() {
        Ok(graves) => graves,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    if let Some(mut grave) = graves.pop_front() {
        // Retirements count in the process totals.
        let mut counters = Counters::process_only();
        let mut leaks = Leaks::default();
        let done = grave.launches.reap_within(grave.rt, QUERIES, &mut counters, Some(&mut leaks));
        if done {
            grave.launches.release_events(grave.rt, &mut counters, &mut leaks);
        }
        leaks.log("destroying what a freed command buffer's launches used");
        if !done {
            graves.push_back(grave);
        }
    }
    OCCUPIED.store(!graves.is_empty(), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fork while another thread holds the list's lock: the child's handler gives it a new,
    /// empty list, so its first free does not wait for a lock no thread of its will release.
    #[test]
    fn a_forked_child_abandons_the_parents_list_and_its_lock() {
        let parents: *const Graves = graves();
        let held = lock();
        OCCUPIED.store(true, Ordering::Release);
        forget_in_child();
        assert!(!OCCUPIED.load(Ordering::Acquire), "the parent's list counts as occupied in the child");
        let childs = graves();
        assert!(!std::ptr::eq(childs, parents), "the child kept the parent's list");
        assert!(childs.try_lock().is_ok_and(|g| g.is_empty()), "the child's list is locked or not empty");
        drop(held);
    }
}
