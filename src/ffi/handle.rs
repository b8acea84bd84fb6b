//! Live-handle registries: the one place where a C handle becomes the object it stands for.
//!
//! A C handle is an id, never a Rust address: a freed or forged handle is looked up, not
//! dereferenced, so it yields `RCB_STATUS_INVALID_HANDLE` instead of a crash. Ids are handed out in
//! turn from 2^28 values below 2^32 (command buffers put theirs in the upper half of their
//! 64-bit node handles), an id still live skipped, and an id comes round again only after every
//! other one has had its turn: a stale handle can reach a newer object only some 268 million
//! turns after it was handed out, while a long-running process that keeps making and freeing
//! handles (XLA's traced command buffers) never runs out. A NULL handle is a NULL pointer
//! argument like any other (`RCB_STATUS_NULL_ARGUMENT`, naming the argument), except that a
//! `_free` function takes it as a no-op.
//!
//! Each C handle type names its object type and registry through [`Handle`], as rustls-ffi's
//! `Castable` ties a C type to its Rust type: the pointer's type picks the registry, so no call
//! site casts a handle or chooses what to look it up in.
//!
//! Command buffers, whose short calls (an address update that moves little) are the hot path,
//! keep their objects in [`Place`]s, which are never given back: a thread goes straight to the
//! place of the command buffer it called last, and the place's lock, which the call takes
//! anyway, says whether it still holds that handle's object; only another handle, or one freed
//! since, is looked up. The other types are looked up on every call and hold their objects by
//! reference count for the call.

use crate::error::{Error, ErrorKind, Result};
use dashmap::{DashMap, DashSet};
use once_cell::sync::Lazy;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A C handle type (an opaque marker struct) whose pointer values are ids in its registry.
pub(crate) trait Handle: Sized + 'static {
    /// What a handle stands for, shared by the calls in flight on it: a `Mutex` around an object
    /// that one call at a time changes, the object itself when it synchronizes its own state.
    type Object: Send + Sync + 'static;
    /// The C type's name, for messages.
    const NAME: &'static str;
    /// The live handles of this type.
    fn registry() -> &'static Registry<Self>;
}

/// Makes a C type a handle of `$object`s with a registry of its own, named in messages as it is
/// spelled in C.
macro_rules! handle_type {
    ($c_type:ident => $object:ty) => {
        impl $crate::ffi::handle::Handle for $c_type {
            type Object = $object;
            const NAME: &'static str = stringify!($c_type);
            fn registry() -> &'static $crate::ffi::handle::Registry<Self> {
                static LIVE: $crate::ffi::handle::Registry<$c_type> = $crate::ffi::handle::Registry::new();
                &LIVE
            }
        }
    };
}
pub(crate) use handle_type;

/// Ids of every type: one space, so a handle of one type is never a live handle of another.
static IDS: IdSpace = IdSpace::new(0x1000, (1 << 28) - 0x100);

/// Ids `first + 16 k` for `k < slots`, handed out in turn and round again, skipping those live.
pub(crate) struct IdSpace {
    first: usize,
    slots: u64,
    /// How many ids were ever taken (and skipped): the next is `next % slots`.
    next: AtomicU64,
    live: Lazy<DashSet<usize, Ids>>,
}

impl IdSpace {
    pub const fn new(first: usize, slots: u64) -> Self {
        Self { first, slots, next: AtomicU64::new(0), live: Lazy::new(DashSet::default) }
    }

    /// The next id that is not live, now live; an error when every id is live.
    fn take(&self) -> Result<usize> {
        for _ in 0..self.slots {
            let k = self.next.fetch_add(1, Ordering::Relaxed) % self.slots;
            let id = self.first + 16 * k as usize;
            if self.live.insert(id) {
                return Ok(id);
            }
        }
        Err(Error::new(ErrorKind::OutOfMemory, format!("all {} handle ids are live: free some handles", self.slots)))
    }

    /// `id` is free to be taken again, when its turn comes round.
    fn give_back(&self, id: usize) {
        self.live.remove(&id);
    }
}

/// Hashes a handle id. Ids come from one counter, never from a caller (a forged handle is only
/// looked up, never inserted), so the keyed SipHash's defence against chosen keys buys nothing,
/// and it cost a third of an address update that moves nothing (a lookup on every call). A
/// multiply spreads the ids.
#[derive(Default)]
struct IdHasher(u64);

/// What the maps and sets keyed by handle ids are built with.
type Ids = BuildHasherDefault<IdHasher>;

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, id: u64) {
        let x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // hashbrown takes the bucket from the low bits and its tag, like dashmap its shard, from
        // the high ones: both get the product's high bits.
        self.0 = x ^ (x >> 32);
    }

    fn write_usize(&mut self, id: usize) {
        self.write_u64(id as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The live handles of one type.
pub(crate) struct Registry<H: Handle> {
    live: Lazy<DashMap<usize, Arc<H::Object>, Ids>>,
    /// The places of freed handles, for the type's next ones (only for objects kept in a
    /// [`Place`]; see [`register_placed`]).
    spare: Mutex<Vec<Arc<H::Object>>>,
}

impl<H: Handle> Registry<H> {
    pub const fn new() -> Self {
        Self { live: Lazy::new(DashMap::default), spare: Mutex::new(Vec::new()) }
    }

    /// Whether `id` is a live handle of this type.
    pub fn contains(&self, id: usize) -> bool {
        self.live.contains_key(&id)
    }
}

/// A live object, held for one call; the registry's guard is already released.
pub(crate) struct Live<H: Handle> {
    id: usize,
    object: Arc<H::Object>,
}

impl<H: Handle> Live<H> {
    /// The handle's id (command buffers encode it in their node handles).
    pub fn id(&self) -> usize {
        self.id
    }

    /// The object itself, for a holder that outlives the call.
    pub fn shared(&self) -> &Arc<H::Object> {
        &self.object
    }
}

impl<H: Handle> Deref for Live<H> {
    type Target = H::Object;
    fn deref(&self) -> &H::Object {
        &self.object
    }
}

impl<H: Handle<Object = Mutex<T>>, T> Live<H> {
    /// Locks the object; one that panicked mid-call is reported rather than used half-changed.
    pub fn lock(&self) -> Result<MutexGuard<'_, T>> {
        self.object
            .lock()
            .map_err(|_| Error::invalid_state(format!("this {} is unusable: an earlier call panicked while changing it; free it", H::NAME)))
    }
}

/// Where the object of a handle that each call locks lives: a place is never given back, but
/// emptied when its handle is freed and filled again by a later handle of the type. So an
/// address of a place stays valid for as long as the process runs, and a thread may keep the
/// place of the handle it called last and go straight to it, without the registry's lookup and
/// reference count (two locked atomic operations each; most of a short call's fixed cost): the
/// place's lock, which every call takes anyway, is what tells it whether the place still holds
/// that handle's object. A freed handle's object is taken out under that lock, so a free waits
/// for a call in flight on the same handle (which the free functions' contracts forbid) instead
/// of leaving the object to it.
pub(crate) struct Place<T> {
    /// The id of the handle whose object the place holds, with the object; `None` while spare.
    /// Boxed, so that a spare place keeps a few bytes, not a whole object's.
    held: Mutex<Option<(usize, Box<T>)>>,
}

/// A place's object, locked for a call.
pub(crate) struct Placed<'a, T>(MutexGuard<'a, Option<(usize, Box<T>)>>);

impl<T> Deref for Placed<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // A `Placed` is made only from a place that holds an object (`Place::lock`).
        self.0.as_ref().map(|(_, object)| &**object).unwrap_or_else(|| unreachable!("a locked place holds its object"))
    }
}

impl<T> std::ops::DerefMut for Placed<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().map(|(_, object)| &mut **object).unwrap_or_else(|| unreachable!("a locked place holds its object"))
    }
}

impl<T> Place<T> {
    /// The object of handle `id`, locked: `None` when the place holds no object or another
    /// handle's (the handle was freed). One whose call panicked mid-change is reported rather
    /// than used half-changed.
    pub fn lock(&self, id: usize, name: &str) -> Result<Option<Placed<'_, T>>> {
        let (guard, poisoned) = match self.held.lock() {
            Ok(guard) => (guard, false),
            Err(poisoned) => (poisoned.into_inner(), true),
        };
        if !matches!(&*guard, Some((held, _)) if *held == id) {
            // Another handle's object, poisoned or not, says nothing about this handle.
            return Ok(None);
        }
        if poisoned {
            return Err(Error::invalid_state(format!("this {name} is unusable: an earlier call panicked while changing it; free it")));
        }
        Ok(Some(Placed(guard)))
    }

    /// Takes handle `id`'s object out (`None` when the place does not hold it), after the call
    /// that holds the lock, if any, returns; a lock poisoned by a panic is cleared, so the
    /// place can be filled again.
    fn empty(&self, id: usize) -> Option<T> {
        let mut guard = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let object = if matches!(&*guard, Some((held, _)) if *held == id) { guard.take().map(|(_, object)| *object) } else { None };
        drop(guard);
        self.held.clear_poison();
        object
    }
}

/// Handle `id`'s object in `place`, locked; `RCB_STATUS_INVALID_HANDLE` when the place no longer
/// holds it (freed since the place was found).
pub(crate) fn locked<H: Handle<Object = Place<T>>, T>(place: &Place<T>, id: usize) -> Result<Placed<'_, T>> {
    place.lock(id, H::NAME)?.ok_or_else(|| not_live::<H>(id))
}

/// Registers `object` in a spare place of its type, or in a new one; the new handle is the
/// caller's, released by [`take_placed`]. Fails only when 2^28 handles are live at once, with
/// `object` dropped.
pub(crate) fn register_placed<H: Handle<Object = Place<T>>, T>(object: T) -> Result<*mut H> {
    let id = IDS.take()?;
    let spare = H::registry().spare.lock().unwrap_or_else(PoisonError::into_inner).pop();
    let place = spare.unwrap_or_else(|| {
        let place = Arc::new(Place { held: Mutex::new(None) });
        // Never given back: a thread may hold the place's address for as long as it runs.
        std::mem::forget(Arc::clone(&place));
        place
    });
    *place.held.lock().unwrap_or_else(PoisonError::into_inner) = Some((id, Box::new(object)));
    H::registry().live.insert(id, place);
    Ok(std::ptr::without_provenance_mut(id))
}

/// The object behind a handle of a placed type for its `_free` function, taken out of its place,
/// which becomes spare: `None` for NULL (a no-op). Waits for a call in flight on the handle.
pub(crate) fn take_placed<H: Handle<Object = Place<T>>, T>(handle: *mut H) -> Result<Option<T>> {
    if handle.is_null() {
        return Ok(None);
    }
    let id = handle.addr();
    let place = Arc::clone(live(handle, H::NAME)?.shared());
    // A free racing with this one on another thread has emptied the place first.
    let object = place.empty(id).ok_or_else(|| not_live::<H>(id))?;
    H::registry().live.remove(&id);
    IDS.give_back(id);
    H::registry().spare.lock().unwrap_or_else(PoisonError::into_inner).push(place);
    Ok(Some(object))
}

/// Registers `object`; the new handle is the caller's, released by the type's `_free`. Fails
/// only when 2^28 handles are live at once, with `object` dropped.
pub(crate) fn register<H: Handle>(object: H::Object) -> Result<*mut H> {
    let id = IDS.take()?;
    H::registry().live.insert(id, Arc::new(object));
    Ok(std::ptr::without_provenance_mut(id))
}

/// The object behind `handle`, argument `arg` of the call: NULL is `NullArgument` naming `arg`,
/// a handle that is not live (freed, never created, or of another type) `InvalidHandle`.
pub(crate) fn live<H: Handle>(handle: *const H, arg: &str) -> Result<Live<H>> {
    if handle.is_null() {
        return Err(super::null_argument(arg));
    }
    let id = handle.addr();
    let object = H::registry().live.get(&id).map(|e| Arc::clone(e.value())).ok_or_else(|| not_live::<H>(id))?;
    Ok(Live { id, object })
}

/// Unregisters `handle` for its `_free` function and hands the object back: `None` for NULL
/// (freeing NULL is a no-op). Calls still in flight keep the object until they return.
pub(crate) fn unregister<H: Handle>(handle: *mut H) -> Result<Option<Arc<H::Object>>> {
    if handle.is_null() {
        return Ok(None);
    }
    let id = handle.addr();
    let (_, object) = H::registry().live.remove(&id).ok_or_else(|| not_live::<H>(id))?;
    IDS.give_back(id);
    Ok(Some(object))
}

/// Unregisters `handle` for its `_free` function and hands the object back, so that its teardown
/// can report what failed. `check` runs on the live object first and may refuse the free (the
/// handle then stays live). `None` for NULL (a no-op), and when a call still in flight holds the
/// object (which the free functions' contracts forbid): it is dropped, failures only logged,
/// when that call returns.
pub(crate) fn take<H: Handle>(handle: *mut H, check: impl FnOnce(&Live<H>) -> Result<()>) -> Result<Option<H::Object>> {
    if handle.is_null() {
        return Ok(None);
    }
    check(&live(handle, H::NAME)?)?;
    Ok(unregister(handle)?.and_then(|object| Arc::try_unwrap(object).ok()))
}

/// The object out of its lock; a poisoned one is torn down all the same, as that is all that is
/// left to do with it.
pub(crate) fn unlocked<T>(object: Mutex<T>) -> T {
    object.into_inner().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn not_live<H: Handle>(id: usize) -> Error {
    Error::new(ErrorKind::InvalidHandle, format!("{} handle {id:#x} is not live (already freed, never created, or another type)", H::NAME))
}

#[cfg(test)]
mod tests {
    #![allow(non_camel_case_types)]
    use super::*;

    struct rcb_a;
    struct rcb_b;
    struct rcb_p;
    struct rcb_q;
    handle_type!(rcb_a => Mutex<u32>);
    handle_type!(rcb_b => u32);
    // One placed type per test: tests run in parallel, and a type's spare places are shared.
    handle_type!(rcb_p => Place<u32>);
    handle_type!(rcb_q => Place<u32>);

    /// The place behind a live handle, as a thread would keep it.
    fn place_of<H: Handle<Object = Place<u32>>>(p: *mut H) -> *const Place<u32> {
        Arc::as_ptr(live(p, "p").unwrap().shared())
    }

    #[test]
    fn a_freed_places_handle_is_refused_there_and_the_place_serves_the_next_handle() {
        let a = register_placed::<rcb_p, _>(7).unwrap();
        let kept = place_of(a);
        // SAFETY: places are never dropped.
        let place = unsafe { &*kept };
        assert_eq!(*place.lock(a.addr(), "rcb_p").unwrap().unwrap(), 7);
        assert_eq!(take_placed(a).unwrap(), Some(7));
        assert!(place.lock(a.addr(), "rcb_p").unwrap().is_none(), "a freed handle's place holds nothing of it");
        assert_eq!(take_placed(a).unwrap_err().kind, ErrorKind::InvalidHandle, "a second free");
        assert!(take_placed(std::ptr::null_mut::<rcb_p>()).unwrap().is_none(), "freeing NULL is a no-op");

        let b = register_placed::<rcb_p, _>(8).unwrap();
        assert_ne!(b, a);
        assert_eq!(place_of(b), kept, "the spare place is taken again");
        assert!(place.lock(a.addr(), "rcb_p").unwrap().is_none(), "the old handle does not reach the new object");
        *place.lock(b.addr(), "rcb_p").unwrap().unwrap() += 1;
        assert_eq!(live(a, "p").err().unwrap().kind, ErrorKind::InvalidHandle);

        // A call that panicked poisons the place: its handle is refused, the free still takes
        // the object, and the place serves the next handle.
        let id = b.addr();
        let poisoned = std::thread::spawn(move || {
            let _held = place.lock(id, "rcb_p").unwrap();
            panic!("a call panicked while changing the object");
        })
        .join();
        assert!(poisoned.is_err());
        assert_eq!(place.lock(b.addr(), "rcb_p").err().unwrap().kind, ErrorKind::InvalidState);
        assert!(place.lock(a.addr(), "rcb_p").unwrap().is_none(), "another handle's panic says nothing of a freed one");
        assert_eq!(take_placed(b).unwrap(), Some(9));
        let c = register_placed::<rcb_p, _>(10).unwrap();
        assert_eq!(place_of(c), kept);
        assert_eq!(*place.lock(c.addr(), "rcb_p").unwrap().unwrap(), 10);
        assert_eq!(take_placed(c).unwrap(), Some(10));
    }

    #[test]
    fn a_free_waits_for_the_call_in_flight_on_its_handle() {
        let a = register_placed::<rcb_q, _>(1).unwrap();
        // SAFETY: places are never dropped.
        let place = unsafe { &*place_of(a) };
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let id = a.addr();
        let call = std::thread::spawn(move || {
            let mut object = place.lock(id, "rcb_p").unwrap().unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            *object += 1;
        });
        locked_rx.recv().unwrap();
        assert_eq!(take_placed(a).unwrap(), Some(2), "the free takes the object as the call left it");
        call.join().unwrap();
    }

    #[test]
    fn null_freed_and_foreign_handles_are_rejected() {
        let a = register::<rcb_a>(Mutex::new(7)).unwrap();
        let b = register::<rcb_b>(8).unwrap();
        assert_eq!(*live(a, "a").unwrap().lock().unwrap(), 7);
        let e = live(std::ptr::null::<rcb_a>(), "pool").err().unwrap();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::NullArgument, "argument `pool` is NULL"));
        let foreign: *const rcb_b = a.cast();
        assert_eq!(live(foreign, "b").err().unwrap().kind, ErrorKind::InvalidHandle);
        assert!(IDS.live.contains(&a.addr()));
        assert_eq!(take(a, |_| Ok(())).unwrap().map(unlocked), Some(7));
        assert!(!IDS.live.contains(&a.addr()), "a freed handle's id can come round again");
        let e = unregister(a).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidHandle);
        assert!(e.message.contains("rcb_a"), "{}", e.message);
        assert!(unregister(std::ptr::null_mut::<rcb_a>()).unwrap().is_none(), "freeing NULL is a no-op");
        assert_ne!(register::<rcb_a>(Mutex::new(9)).unwrap(), a, "a freed id is not taken again at once");
        assert_eq!(*live(b, "b").unwrap(), 8);
    }

    #[test]
    fn ids_come_round_again_after_all_others_skipping_live_ones_and_run_out_only_when_all_are_live() {
        let ids = IdSpace::new(0x1000, 4);
        let first: Vec<usize> = (0..4).map(|_| ids.take().unwrap()).collect();
        assert_eq!(first, [0x1000, 0x1010, 0x1020, 0x1030]);
        assert_eq!(ids.take().unwrap_err().kind, ErrorKind::OutOfMemory, "all four live");
        ids.give_back(0x1020);
        ids.give_back(0x1000);
        // The turn goes on from where it stopped: 0x1000 is free again, but 0x1010 is live.
        assert_eq!(ids.take().unwrap(), 0x1000);
        assert_eq!(ids.take().unwrap(), 0x1020);
        assert!(ids.take().is_err());
        // Freed at once, an id still waits for every other id's turn.
        for id in [0x1000, 0x1010, 0x1020, 0x1030] {
            ids.give_back(id);
        }
        let next = ids.take().unwrap();
        ids.give_back(next);
        let others: Vec<usize> = (0..3).map(|_| ids.take().unwrap()).collect();
        assert!(!others.contains(&next), "{next:#x} came round again before {others:x?} had their turn");
        assert_eq!(ids.take().unwrap(), next);
    }

    #[test]
    fn a_refused_or_shared_take_leaves_what_it_must() {
        let b = register::<rcb_b>(1).unwrap();
        let e = take(b, |_| Err(Error::invalid_state("busy"))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidState);
        assert!(rcb_b::registry().contains(b.addr()), "a refused free leaves the handle live");
        let in_flight = live(b, "b").unwrap();
        assert_eq!(take(b, |_| Ok(())).unwrap(), None, "a call in flight keeps the object");
        assert!(!rcb_b::registry().contains(b.addr()));
        assert_eq!(**in_flight.shared(), 1);
    }
}
