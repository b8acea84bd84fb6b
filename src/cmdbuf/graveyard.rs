//! What freed command buffers leave behind while their launches run: a process-wide list of their
//! launch tracking (`launches.rs`), each holding the executable graphs and graphs that launches
//! made before the free may still use, and the events that follow those launches. A free does
//! not wait for them (XLA frees command buffers whose launches are still queued, as CUDA's
//! `cuGraphExecDestroy` allows); later command-buffer calls (a creation, launch, finalize or free,
//! on any thread) each query at most [`QUERIES`] of the events, destroy what they find finished,
//! and never wait on the host.
//!
//! Whatever is still here when the process exits is leaked, never destroyed: the runtime may be
//! gone by then, and nothing runs at exit to wait for the GPU.

use super::launches::Launches;
use crate::counters::Counters;
use crate::error::Leaks;
use crate::runtime::Runtime;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Event queries one library call spends on the graveyard at most.
pub const QUERIES: usize = 8;

struct Buried {
    rt: &'static dyn Runtime,
    launches: Launches,
}

static GRAVES: Mutex<VecDeque<Buried>> = Mutex::new(VecDeque::new());
/// Whether anything is buried, read without the lock by every call that reaps.
static OCCUPIED: AtomicBool = AtomicBool::new(false);

/// A panic while the lock was held left the list whole (each change is one push or pop).
fn lock() -> MutexGuard<'static, VecDeque<Buried>> {
    GRAVES.lock().unwrap_or_else(PoisonError::into_inner)
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
    let mut graves = match GRAVES.try_lock() {
        Ok(graves) => graves,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    if let Some(mut grave) = graves.pop_front() {
        // Retirements count in the process totals.
        let mut counters = Counters::default();
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
