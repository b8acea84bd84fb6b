//! Opaque handles for C: numbers from one counter, never reused, so a destroyed or
//! foreign handle is always detected by a registry lookup instead of being dereferenced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{HipResult, INVALID_HANDLE};

static NEXT: AtomicUsize = AtomicUsize::new(0x5100_0000);

/// Pointer-looking (aligned, non-null) but never mapped.
pub fn next_handle() -> usize {
    NEXT.fetch_add(0x40, Ordering::Relaxed)
}

pub struct Registry<T> {
    map: Mutex<HashMap<usize, Arc<T>>>,
}

impl<T> Registry<T> {
    pub fn new() -> Self {
        Registry { map: Mutex::new(HashMap::new()) }
    }

    pub fn insert(&self, value: T) -> usize {
        let h = next_handle();
        self.map.lock().unwrap().insert(h, Arc::new(value));
        h
    }

    pub fn get(&self, h: usize) -> HipResult<Arc<T>> {
        self.map.lock().unwrap().get(&h).cloned().ok_or(INVALID_HANDLE)
    }

    pub fn remove(&self, h: usize) -> HipResult<Arc<T>> {
        self.map.lock().unwrap().remove(&h).ok_or(INVALID_HANDLE)
    }

    pub fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }

    /// Takes out every entry `pred` selects.
    pub fn remove_where(&self, pred: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        let mut map = self.map.lock().unwrap();
        let handles: Vec<usize> = map.iter().filter(|(_, v)| pred(v)).map(|(&h, _)| h).collect();
        handles.iter().filter_map(|h| map.remove(h)).collect()
    }

    /// The registry's lock, held until the box is dropped (see `fork.rs`).
    pub fn hold(&'static self) -> Box<dyn std::any::Any>
    where
        T: Send + Sync + 'static,
    {
        Box::new(self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    pub fn values(&self) -> Vec<Arc<T>> {
        self.map.lock().unwrap().values().cloned().collect()
    }
}
