//! A device reset, or a second release of the same stream, that runs while a release or an
//! acquire is between its steps: the pool never keeps, hands out or destroys again a stream the
//! reset destroyed, and a second release leaves the stream to the first. Each test stops one
//! thread inside a runtime call (the gap where the pool holds no lock), runs the reset or the
//! release on another, and lets the first go on, so the interleaving is the same on every run.

use rocm_cmdbuf_stream_pool::{Idleness, Pool, ReleaseError, Released, Settings, StreamOps};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};

const NOWHERE: u8 = 0;
const IN_IS_IDLE: u8 = 1;
const IN_CREATE: u8 = 2;
const IN_DESTROY: u8 = 3;

/// A runtime of one device whose streams a test can all kill at once (the reset), that records
/// every destroy and every call on a dead stream, and that stops once, at `pause`, until the test
/// has done its part.
struct Runtime {
    next: AtomicUsize,
    live: Mutex<HashSet<usize>>,
    destroyed: Mutex<Vec<usize>>,
    dead_calls: Mutex<Vec<(&'static str, usize)>>,
    busy: AtomicBool,
    pause: AtomicU8,
    arrived: Barrier,
    resume: Barrier,
}

impl Runtime {
    fn new(pause: u8) -> Self {
        Runtime {
            next: AtomicUsize::new(0),
            live: Mutex::new(HashSet::new()),
            destroyed: Mutex::new(Vec::new()),
            dead_calls: Mutex::new(Vec::new()),
            busy: AtomicBool::new(false),
            pause: AtomicU8::new(pause),
            arrived: Barrier::new(2),
            resume: Barrier::new(2),
        }
    }

    fn stop_if(&self, here: u8) {
        if self.pause.compare_exchange(here, NOWHERE, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.arrived.wait();
            self.resume.wait();
        }
    }

    /// What `hipDeviceReset` does to the runtime: every stream dies.
    fn reset_device(&self) {
        self.live.lock().unwrap().clear();
    }

    fn alive(&self, s: usize, call: &'static str) -> bool {
        let alive = self.live.lock().unwrap().contains(&s);
        if !alive {
            self.dead_calls.lock().unwrap().push((call, s));
        }
        alive
    }
}

impl StreamOps for Runtime {
    type Stream = usize;
    type Error = &'static str;

    fn priority_range(&self, _device: i32) -> Result<(i32, i32), &'static str> {
        Ok((0, 0))
    }

    fn create(&self, _device: i32, _flags: u32, _priority: i32) -> Result<usize, &'static str> {
        let s = self.next.fetch_add(16, Ordering::Relaxed) + 16;
        self.live.lock().unwrap().insert(s);
        self.stop_if(IN_CREATE);
        Ok(s)
    }

    fn destroy(&self, s: usize) -> Result<(), &'static str> {
        self.destroyed.lock().unwrap().push(s);
        if !self.alive(s, "destroy") {
            return Err("destroy of a dead stream");
        }
        self.live.lock().unwrap().remove(&s);
        self.stop_if(IN_DESTROY);
        Ok(())
    }

    fn is_idle(&self, s: usize) -> Result<bool, &'static str> {
        // The query itself ran before the reset; only what the pool does afterwards counts.
        let alive = self.live.lock().unwrap().contains(&s);
        self.stop_if(IN_IS_IDLE);
        if !alive {
            self.dead_calls.lock().unwrap().push(("is_idle", s));
            return Err("query of a dead stream");
        }
        Ok(!self.busy.load(Ordering::Relaxed))
    }
}

/// Runs `during` on another thread until it stops at the runtime's pause, resets device 0 (the
/// pool first, then the runtime, as `rcb_stream_cache_reset` and the preload's `hipDeviceReset`
/// do), lets it finish and returns what it returned.
fn with_reset_in_between<T: Send>(rt: &Runtime, pool: &Pool<usize>, during: impl FnOnce() -> T + Send) -> T {
    with_pause(rt, during, || {
        pool.reset(rt, Some(0)).expect("the reset's own destroys succeed");
        rt.reset_device();
    })
    .0
}

/// Runs `during` on another thread until it stops at the runtime's pause, runs `meanwhile`,
/// lets `during` finish and returns what both returned.
fn with_pause<T: Send, U>(rt: &Runtime, during: impl FnOnce() -> T + Send, meanwhile: impl FnOnce() -> U) -> (T, U) {
    std::thread::scope(|scope| {
        let worker = scope.spawn(during);
        rt.arrived.wait();
        let meanwhile = meanwhile();
        rt.resume.wait();
        (worker.join().expect("the worker does not panic"), meanwhile)
    })
}

fn pool() -> Pool<usize> {
    Pool::new(Settings { enabled: true, max_per_key: 8 })
}

/// After the reset, the pool hands out only live streams and made no call on a dead one.
fn assert_only_live_streams_afterwards(rt: &Runtime, pool: &Pool<usize>, dead: usize) {
    assert_eq!(pool.stats(None).kept, 0, "the dead stream was kept");
    let next = pool.acquire(rt, 0, 0, 0).unwrap();
    assert_ne!(next, dead, "the acquire after the reset handed out the stream the reset destroyed");
    assert!(rt.live.lock().unwrap().contains(&next));
    assert_eq!(pool.release(rt, next, Idleness::Query).unwrap(), Released::Kept);
    assert_eq!(*rt.dead_calls.lock().unwrap(), [], "the pool called the runtime on a dead stream");
}

#[test]
fn an_idle_stream_released_across_a_reset_is_not_kept() {
    let (rt, pool) = (Runtime::new(IN_IS_IDLE), pool());
    let s = pool.acquire(&rt, 0, 0, 0).unwrap();
    let released = with_reset_in_between(&rt, &pool, || pool.release(&rt, s, Idleness::Query));
    assert!(matches!(released, Err(ReleaseError::NotHeld)), "{released:?}");
    assert!(!rt.destroyed.lock().unwrap().contains(&s), "destroyed again after the reset");
    assert_only_live_streams_afterwards(&rt, &pool, s);
}

#[test]
fn a_busy_stream_released_across_a_reset_is_not_destroyed_again() {
    let (rt, pool) = (Runtime::new(IN_IS_IDLE), pool());
    let s = pool.acquire(&rt, 0, 0, 0).unwrap();
    rt.busy.store(true, Ordering::Relaxed);
    let released = with_reset_in_between(&rt, &pool, || pool.release(&rt, s, Idleness::Query));
    rt.busy.store(false, Ordering::Relaxed);
    assert!(matches!(released, Err(ReleaseError::NotHeld)), "{released:?}");
    assert_eq!(*rt.destroyed.lock().unwrap(), [], "the busy stream was destroyed after the reset had");
    assert_only_live_streams_afterwards(&rt, &pool, s);
}

#[test]
fn a_stream_created_across_a_reset_is_never_kept_or_touched_on_release() {
    let (rt, pool) = (Runtime::new(IN_CREATE), pool());
    let s = with_reset_in_between(&rt, &pool, || pool.acquire(&rt, 0, 0, 0)).unwrap();
    // The caller raced its own reset and got a stream the reset destroyed; giving it back must
    // not query it, destroy it or keep it.
    let released = pool.release(&rt, s, Idleness::Query);
    assert!(matches!(released, Err(ReleaseError::NotHeld)), "{released:?}");
    assert_eq!(*rt.destroyed.lock().unwrap(), []);
    assert_only_live_streams_afterwards(&rt, &pool, s);
}

#[test]
fn a_second_release_while_the_first_queries_is_refused_and_leaves_the_stream_to_it() {
    let (rt, pool) = (Runtime::new(IN_IS_IDLE), pool());
    let s = pool.acquire(&rt, 0, 0, 0).unwrap();
    let (first, second) = with_pause(&rt, || pool.release(&rt, s, Idleness::Query), || pool.release(&rt, s, Idleness::Query));
    // The second release found the stream neither handed out nor idle before the mark, and the
    // preload then destroyed it for real while the first filed it idle.
    assert!(matches!(second, Err(ReleaseError::Releasing)), "{second:?}");
    assert_eq!(first.unwrap(), Released::Kept);
    assert_eq!(*rt.destroyed.lock().unwrap(), [], "the second release destroyed the stream");
    assert!(matches!(pool.release(&rt, s, Idleness::Query), Err(ReleaseError::AlreadyReleased)), "filed idle by the first");
    assert_eq!(pool.stats(None).in_use, 0);
    assert_eq!(pool.acquire(&rt, 0, 0, 0).unwrap(), s);
    assert!(rt.live.lock().unwrap().contains(&s));
    assert_eq!(*rt.dead_calls.lock().unwrap(), []);
}

#[test]
fn a_second_release_while_the_first_destroys_is_refused_and_the_record_goes_after_the_destroy() {
    let (rt, pool) = (Runtime::new(IN_DESTROY), pool());
    let s = pool.acquire(&rt, 0, 0, 0).unwrap();
    rt.busy.store(true, Ordering::Relaxed);
    let (first, (second, reborn)) = with_pause(
        &rt,
        || pool.release(&rt, s, Idleness::Query),
        || {
            let second = pool.release(&rt, s, Idleness::Query);
            // The runtime makes its next stream at the address just freed, as an allocator may.
            rt.next.store(s - 16, Ordering::Relaxed);
            (second, pool.acquire(&rt, 0, 0, 0).unwrap())
        },
    );
    rt.busy.store(false, Ordering::Relaxed);
    assert!(matches!(second, Err(ReleaseError::Releasing)), "{second:?}");
    assert_eq!(first.unwrap(), Released::Destroyed);
    assert_eq!(*rt.destroyed.lock().unwrap(), [s], "destroyed once, by the first release");
    // The first release removed its own record, not the new stream's at the same address.
    assert_eq!(reborn, s);
    assert_eq!(pool.stats(None).in_use, 1);
    assert_eq!(pool.release(&rt, reborn, Idleness::Query).unwrap(), Released::Kept);
    assert_eq!(*rt.dead_calls.lock().unwrap(), []);
}
