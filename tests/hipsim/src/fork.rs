//! Forking: the locks every stream call takes (the call counters, the stream registry) are held
//! across `fork()` by the forking thread, so that a child forked while another thread is inside
//! hipsim finds them free. Enough for a child to create, query and destroy streams of its own
//! (what the preload's fork test does); the parent's streams have no worker thread there.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

extern "C" fn prepare() {
    // Always in this order, which no other path nests the other way.
    let held: Vec<Box<dyn Any>> = vec![crate::knobs::get().hold(), crate::stream::STREAMS.hold()];
    HELD.with_borrow_mut(|h| *h = held);
}

extern "C" fn release() {
    HELD.with_borrow_mut(Vec::clear);
}

static REGISTER: Once = Once::new();

/// Installs the handlers once; called on the first use of the call counters.
pub fn register() {
    REGISTER.call_once(|| {
        // SAFETY: plain function pointers with no preconditions.
        unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
    });
}
