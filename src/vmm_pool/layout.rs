//! Where each buffer of a slot lives inside the slot's one VMM chunk.

use crate::error::{Error, Result};

/// Buffers inside a chunk start on this boundary: enough for any vector load a kernel issues,
/// small enough that many small buffers share one granule.
pub const BUFFER_ALIGNMENT: u64 = 256;

/// The largest buffer (and slot) the pool accepts: beyond any device's memory, far below
/// address-arithmetic overflow.
pub const MAX_BUFFER_BYTES: u64 = 1 << 46;

/// Offsets of the buffers in one slot's chunk (`None` for a zero-size buffer, which gets
/// address 0) and the chunk size rounded up to the allocation granularity.
#[derive(Debug, PartialEq, Eq)]
pub struct ChunkLayout {
    pub offsets: Vec<Option<u64>>,
    pub bytes: u64,
}

/// Checks every size (an absurd one names its index) and packs the buffers back to back.
pub fn chunk_layout(sizes: &[u64], granularity: u64) -> Result<ChunkLayout> {
    check_sizes(sizes)?;
    if granularity == 0 || !granularity.is_power_of_two() {
        return Err(Error::unsupported(format!("the runtime reported allocation granularity {granularity}, not a power of two")));
    }
    let mut end = 0u64;
    let offsets = sizes
        .iter()
        .map(|&size| {
            (size > 0).then(|| {
                let at = end.next_multiple_of(BUFFER_ALIGNMENT);
                end = at + size;
                at
            })
        })
        .collect();
    let bytes = end.next_multiple_of(granularity);
    if bytes > MAX_BUFFER_BYTES {
        return Err(Error::invalid_argument(format!("buffer_sizes: {bytes} bytes per slot in all exceed the limit of {MAX_BUFFER_BYTES}")));
    }
    Ok(ChunkLayout { offsets, bytes })
}

/// Rejects absurd sizes before anything is allocated.
pub fn check_sizes(sizes: &[u64]) -> Result<()> {
    match sizes.iter().position(|&s| s > MAX_BUFFER_BYTES) {
        Some(i) => Err(Error::invalid_argument(format!("buffer_sizes[{i}]: {} bytes exceeds the limit of {MAX_BUFFER_BYTES}", sizes[i]))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const MIB2: u64 = 2 << 20;

    #[test]
    fn buffers_pack_aligned_and_the_chunk_rounds_to_the_granularity() {
        let l = chunk_layout(&[100, 0, 4096, 1], MIB2).unwrap();
        assert_eq!(l.offsets, vec![Some(0), None, Some(256), Some(256 + 4096)]);
        assert_eq!(l.bytes, MIB2);
        let l = chunk_layout(&[MIB2, 1], MIB2).unwrap();
        assert_eq!((l.offsets[1], l.bytes), (Some(MIB2), 2 * MIB2));
    }

    #[test]
    fn all_zero_sizes_need_no_chunk() {
        let l = chunk_layout(&[0, 0], MIB2).unwrap();
        assert_eq!((l.offsets, l.bytes), (vec![None, None], 0));
    }

    #[test]
    fn absurd_sizes_name_the_buffer() {
        let e = chunk_layout(&[8, u64::MAX], MIB2).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.starts_with("buffer_sizes[1]"), "{}", e.message);
        let e = chunk_layout(&[MAX_BUFFER_BYTES, MAX_BUFFER_BYTES], MIB2).unwrap_err();
        assert!(e.message.contains("per slot"), "{}", e.message);
        assert_eq!(chunk_layout(&[8], 3).unwrap_err().kind, ErrorKind::Unsupported);
    }
}
