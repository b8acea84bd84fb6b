//! A least-significant-digit radix sort of entries by a 64-bit key (a start time), stable.
//!
//! An exchange sorts millions of entries per device by start time. Comparison sorts took most of
//! the exchange (about 40 % of it at the scale of a MaxText llama2-7b profile, `rcb-bench correlator`); the keys of one profile span a few
//! seconds to minutes of nanoseconds, so after subtracting the smallest key three or four passes
//! of 11 bits sort them.

const DIGIT_BITS: u32 = 11;
const BUCKETS: usize = 1 << DIGIT_BITS;
/// Below this many entries a comparison sort is cheaper than the histograms.
const SMALL: usize = 512;

pub(super) trait Keyed: Copy {
    fn key(&self) -> u64;
}

/// Sorts `v` by key, keeping the order of equal keys; `tmp` is scratch, kept for the next call.
pub(super) fn sort<T: Keyed>(v: &mut Vec<T>, tmp: &mut Vec<T>) {
    let n = v.len();
    if n < SMALL {
        v.sort_by_key(T::key);
        return;
    }
    let (mut min, mut max) = (u64::MAX, 0);
    for x in v.iter() {
        min = min.min(x.key());
        max = max.max(x.key());
    }
    let bits = 64 - (max - min).leading_zeros();
    let passes = bits.div_ceil(DIGIT_BITS) as usize;
    let mut hist = vec![0usize; passes * BUCKETS];
    for x in v.iter() {
        let k = x.key() - min;
        for (p, h) in hist.chunks_exact_mut(BUCKETS).enumerate() {
            h[digit(k, p)] += 1;
        }
    }
    if tmp.len() < n {
        tmp.resize(n, v[0]);
    }
    let mut in_v = true;
    for (p, h) in hist.chunks_exact_mut(BUCKETS).enumerate() {
        if h.contains(&n) {
            continue; // every key has the same digit here
        }
        let mut sum = 0;
        for c in h.iter_mut() {
            (*c, sum) = (sum, sum + *c);
        }
        let (src, dst) = if in_v { (&v[..], &mut tmp[..n]) } else { (&tmp[..n], &mut v[..]) };
        for x in src {
            let d = digit(x.key() - min, p);
            // SAFETY: `d < BUCKETS`, and the prefix sums of a histogram of `src` keep every
            // position below `n`, the length of both halves.
            unsafe {
                let at = h.get_unchecked_mut(d);
                *dst.get_unchecked_mut(*at) = *x;
                *at += 1;
            }
        }
        in_v = !in_v;
    }
    if !in_v {
        std::mem::swap(v, tmp);
        v.truncate(n);
    }
}

#[inline]
fn digit(key: u64, pass: usize) -> usize {
    ((key >> (pass as u32 * DIGIT_BITS)) as usize) & (BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct E(u64, u32);
    impl Keyed for E {
        fn key(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn sorts_stably_like_the_standard_library() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        for (n, spread) in [(0usize, 1u64), (5, 3), (600, 1), (5000, 7), (20_000, 1 << 40), (20_000, u64::MAX)] {
            let mut v: Vec<E> = (0..n)
                .map(|i| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    E(1_000u64.wrapping_add(seed % spread.max(1)), i as u32)
                })
                .collect();
            let mut expected = v.clone();
            expected.sort_by_key(|e| e.0);
            let mut tmp = Vec::new();
            sort(&mut v, &mut tmp);
            assert_eq!(v, expected, "n = {n}, spread = {spread}");
        }
    }
}
