//! A hasher for the numbers the library hands out itself: handle ids (one counter, never a
//! caller's: a forged handle is only looked up, never inserted). Nobody chooses them to collide,
//! so the keyed SipHash's defence buys nothing, and it cost a third of an address update that
//! moves nothing (a handle lookup on every call). A multiply spreads them.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default)]
pub(crate) struct NumberHasher(u64);

/// What a map keyed by such numbers is built with.
pub(crate) type Numbers = BuildHasherDefault<NumberHasher>;

impl Hasher for NumberHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        let x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // hashbrown takes the bucket from the low bits and its tag, like dashmap its shard, from
        // the high ones: both get the product's high bits.
        self.0 = x ^ (x >> 32);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
