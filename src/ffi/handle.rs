//! Live-handle registries. A C handle is an id, never a Rust address: a freed or forged handle
//! is looked up, not dereferenced, so it yields `RCB_STATUS_INVALID_HANDLE` instead of a crash,
//! and ids are never reused, so a stale handle cannot reach a newer object.

use crate::error::{Error, ErrorKind, Result};
use dashmap::DashMap;
use once_cell::sync::Lazy;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

// One counter for all types, so a handle of one type is never a live handle of another.
static NEXT_ID: AtomicUsize = AtomicUsize::new(0x1000);

pub(crate) struct Registry<T> {
    type_name: &'static str,
    live: Lazy<DashMap<usize, Arc<Mutex<T>>>>,
}

impl<T> Registry<T> {
    pub const fn new(type_name: &'static str) -> Self {
        Self { type_name, live: Lazy::new(DashMap::new) }
    }

    /// Registers `value` and returns its handle id.
    pub fn insert(&self, value: T) -> usize {
        let id = NEXT_ID.fetch_add(16, Ordering::Relaxed);
        self.live.insert(id, Arc::new(Mutex::new(value)));
        id
    }

    /// The object behind `id`; the map's guard is released before returning.
    pub fn get(&self, id: usize) -> Result<Arc<Mutex<T>>> {
        self.live.get(&id).map(|e| Arc::clone(e.value())).ok_or_else(|| self.unknown(id))
    }

    /// Unregisters `id`; the object is dropped when the last in-flight user lets go.
    pub fn remove(&self, id: usize) -> Result<Arc<Mutex<T>>> {
        self.live.remove(&id).map(|(_, v)| v).ok_or_else(|| self.unknown(id))
    }

    /// Unregisters `id` and hands the object back, so that its teardown can report what failed.
    /// `None` when a call still in flight holds it (which the free functions' contracts forbid):
    /// it is dropped, failures only logged, when that call returns.
    pub fn take(&self, id: usize) -> Result<Option<T>> {
        let object = self.remove(id)?;
        // A poisoned object is torn down all the same: that is all that is left to do with it.
        Ok(Arc::try_unwrap(object).ok().map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner)))
    }

    fn unknown(&self, id: usize) -> Error {
        Error::new(
            ErrorKind::InvalidHandle,
            format!("{} handle {id:#x} is not live (already freed, never created, or another type)", self.type_name),
        )
    }
}

/// Locks an object; one that panicked mid-call is reported rather than used half-changed.
pub(crate) fn lock<'a, T>(object: &'a Mutex<T>, type_name: &str) -> Result<MutexGuard<'a, T>> {
    object
        .lock()
        .map_err(|_| Error::invalid_state(format!("this {type_name} is unusable: an earlier call panicked while changing it; free it")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_and_foreign_handles_are_rejected() {
        static A: Registry<u32> = Registry::new("rcb_a");
        static B: Registry<u32> = Registry::new("rcb_b");
        let a = A.insert(7);
        let b = B.insert(8);
        assert_eq!(*A.get(a).unwrap().lock().unwrap(), 7);
        assert_eq!(B.get(a).unwrap_err().kind, ErrorKind::InvalidHandle);
        A.remove(a).unwrap();
        let e = A.remove(a).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidHandle);
        assert!(e.message.contains("rcb_a"), "{}", e.message);
        assert_ne!(A.insert(9), a, "ids are never reused");
        assert_eq!(*B.get(b).unwrap().lock().unwrap(), 8);
    }
}
