//! When a slot may be reused: the GPU-written timeline value of each slot, and the host-side
//! turn order that keeps the iterations of one slot in sequence.
//!
//! A slot's timeline holds `iteration + 1` of the last use whose work has finished on the GPU
//! (0: never used). Iteration `i` may take its slot once every earlier iteration of the slot has
//! taken it or given up (its *turn*) and the GPU has written the value awaited by the last one
//! that took it.

use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{DevicePtr, Runtime, Signal, StreamMemory};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Busy-wait rounds before yielding: a few microseconds, the usual distance between the GPU
/// finishing a step and the host asking for the slot again.
const SPIN_ROUNDS: u32 = 512;

/// One slot's timeline word in signal memory, freed on drop.
pub struct Timeline {
    memory: &'static dyn StreamMemory,
    signal: Signal,
}

impl Timeline {
    pub fn new(rt: &'static dyn Runtime, device: i32) -> Result<Self> {
        let memory = rt.stream_memory()?;
        let signal = memory.signal_alloc(device)?;
        let timeline = Self { memory, signal };
        // Signal memory starts with whatever the runtime put there; 0 means "never used".
        timeline.word().store(0, Ordering::Release);
        Ok(timeline)
    }

    /// Where the GPU writes the value (`stream_write_u64`).
    pub fn device_address(&self) -> DevicePtr {
        self.signal.device
    }

    pub fn value(&self) -> u64 {
        self.word().load(Ordering::Acquire)
    }

    /// Raises the value to at least `value` from the host (when the GPU could not be asked to).
    pub fn raise_from_host(&self, value: u64) {
        self.word().fetch_max(value, Ordering::AcqRel);
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: signal memory is 8 host-visible, 8-aligned bytes that live as long as `self`;
        // the GPU writes it whole, so atomic loads see either the old or the new value.
        unsafe { AtomicU64::from_ptr(self.signal.host) }
    }
}

impl Timeline {
    /// Frees the signal memory, returning the result instead of logging it on drop.
    pub fn close(self) -> Result<()> {
        let timeline = std::mem::ManuallyDrop::new(self);
        timeline.memory.signal_free(timeline.signal)
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        if let Err(e) = self.memory.signal_free(self.signal) {
            log::warn!("vmm pool: freeing a slot timeline: {e}");
        }
    }
}

/// Waits until `word >= awaited`: spins briefly with acquire loads, then yields until
/// `deadline`. On timeout returns the last value observed.
pub fn wait_at_least(word: impl Fn() -> u64, awaited: u64, deadline: Instant) -> Result<(), u64> {
    for _ in 0..SPIN_ROUNDS {
        if word() >= awaited {
            return Ok(());
        }
        std::hint::spin_loop();
    }
    loop {
        let observed = word();
        if observed >= awaited {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(observed);
        }
        std::thread::yield_now();
    }
}

/// Host-side order of one slot's iterations.
#[derive(Debug)]
pub struct Turn {
    /// The iteration that may take the slot next.
    next: u64,
    /// Timeline value that says the last iteration to take the slot has finished on the GPU.
    awaited: u64,
    /// The iterations holding the slot between acquire and release: one when acquires wait on the
    /// host; with stream-ordered acquires a later use may take the slot (its stream waiting for
    /// the earlier one's release on the GPU) before the earlier one is released.
    holders: Vec<u64>,
    /// Later iterations that timed out before their turn came; their turn is passed on.
    gave_up: Vec<u64>,
    /// Holders whose release failed before their timeline value was written: the value a later
    /// use of the slot would wait for may never come, until that iteration is released again.
    unwritten: Vec<u64>,
}

impl Turn {
    pub fn new(slot: u64) -> Self {
        Self { next: slot, awaited: 0, holders: Vec::new(), gave_up: Vec::new(), unwritten: Vec::new() }
    }

    /// `Some(awaited timeline value)` once it is `iteration`'s turn.
    pub fn ready(&self, iteration: u64) -> Option<u64> {
        (self.next == iteration).then_some(self.awaited)
    }

    pub fn next(&self) -> u64 {
        self.next
    }

    /// `iteration` took the slot (its turn, the timeline reached the awaited value).
    pub fn take(&mut self, iteration: u64, slots: u64) {
        self.holders.push(iteration);
        self.awaited = iteration + 1;
        self.pass(iteration, slots);
    }

    /// `iteration` gives up on its turn; the slot goes to the next iteration that still waits.
    pub fn pass(&mut self, iteration: u64, slots: u64) {
        debug_assert_eq!(self.next, iteration);
        let mut next = iteration + slots;
        while let Some(i) = self.gave_up.iter().position(|&g| g == next) {
            self.gave_up.swap_remove(i);
            next += slots;
        }
        self.next = next;
    }

    /// `iteration` timed out before its turn: remember it so its turn is skipped.
    pub fn give_up(&mut self, iteration: u64) {
        self.gave_up.push(iteration);
    }

    /// The earliest iteration holding the slot.
    pub fn holder(&self) -> Option<u64> {
        self.holders.iter().copied().min()
    }

    pub fn awaited(&self) -> u64 {
        self.awaited
    }

    /// Fails when `iteration` does not hold the slot.
    pub fn check_holder(&self, slot: usize, iteration: u64) -> Result<()> {
        if self.holders.contains(&iteration) {
            return Ok(());
        }
        match self.holder() {
            Some(h) => Err(Error::invalid_state(format!("slot {slot} is held by iteration {h}, not by iteration {iteration}"))),
            None => {
                Err(Error::invalid_state(format!("slot {slot} is not held (iteration {iteration} was already released or never acquired)")))
            }
        }
    }

    pub fn release(&mut self, iteration: u64) {
        self.holders.retain(|&h| h != iteration);
        self.unwritten.retain(|&h| h != iteration);
    }

    /// `iteration`'s release failed before its timeline value was written; it still holds the slot.
    pub fn release_failed(&mut self, iteration: u64) {
        if !self.unwritten.contains(&iteration) {
            self.unwritten.push(iteration);
        }
    }

    /// The earliest holder whose release failed before writing its timeline value.
    pub fn unwritten(&self) -> Option<u64> {
        self.unwritten.iter().copied().min()
    }
}

/// The timeout error: names the slot, the awaited and the observed value.
pub fn timeout(slot: usize, iteration: u64, waited: Duration, what: String) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("vmm pool slot {slot}: iteration {iteration} timed out after {} ms waiting for {what}", waited.as_millis()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_return_at_once_when_reached_and_report_the_observed_value_otherwise() {
        let deadline = Instant::now();
        assert_eq!(wait_at_least(|| 5, 5, deadline), Ok(()));
        assert_eq!(wait_at_least(|| 4, 5, deadline), Err(4));
    }

    #[test]
    fn a_value_written_by_another_thread_ends_the_wait() {
        let word = std::sync::Arc::new(AtomicU64::new(0));
        let writer = {
            let word = word.clone();
            std::thread::spawn(move || word.store(3, Ordering::Release))
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        assert_eq!(wait_at_least(|| word.load(Ordering::Acquire), 3, deadline), Ok(()));
        writer.join().unwrap();
    }

    #[test]
    fn turns_go_round_in_iteration_order_and_skip_iterations_that_gave_up() {
        // Slot 1 of 3: iterations 1, 4, 7, 10, ...
        let mut t = Turn::new(1);
        assert_eq!(t.ready(1), Some(0));
        assert_eq!(t.ready(4), None);
        t.take(1, 3);
        assert_eq!((t.holder(), t.ready(4)), (Some(1), Some(2)));
        // 7 gives up while 4 waits; when 4 gives up too, the turn goes straight to 10.
        t.give_up(7);
        t.pass(4, 3);
        assert_eq!((t.next(), t.ready(10)), (10, Some(2)), "10 still waits for iteration 1's work");
        t.check_holder(1, 1).unwrap();
        t.release(1);
        let e = t.check_holder(1, 1).unwrap_err();
        assert!(e.message.contains("slot 1 is not held"), "{}", e.message);
        t.take(10, 3);
        let e = t.check_holder(1, 4).unwrap_err();
        assert!(e.message.contains("held by iteration 10"), "{}", e.message);
        // A failed release keeps the holder and is remembered until a release succeeds.
        t.release_failed(10);
        assert_eq!((t.holder(), t.unwritten()), (Some(10), Some(10)));
        t.release(10);
        assert_eq!((t.holder(), t.unwritten()), (None, None));
    }
}
