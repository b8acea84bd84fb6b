//! Packing kernel arguments into the one blob a kernel node owns (passed extra-style).
//!
//! Layout rule (the same as a kernel's parameter space): each argument is placed at the next
//! multiple of its alignment, where the alignment is the largest power of two dividing its
//! size, capped at 16; the blob ends right after the last argument (no tail padding). The rule
//! is right for scalars, pointers and vectors. A struct whose real alignment is smaller than the
//! rule says (an 8-byte struct of two `u32`, alignment 4, would be placed at a multiple of 8)
//! must be passed split into its fields, or padded by the caller so that both sides agree.

use crate::error::{Error, Result};

/// Most arguments one launch may have (a larger count is certainly a caller bug).
pub const MAX_ARGS: usize = 4096;
/// Largest packed blob: the CUDA 12.1+ kernel parameter limit, also above any HIP kernarg size.
pub const MAX_BLOB_BYTES: usize = 32764;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// Plain bytes: never patched, even when they equal an allocation address.
    Value,
    /// An 8-byte device address: patched when it lies inside an allocation or one past the end
    /// of one (see `allocations.rs`).
    DevicePtr,
    /// Bytes of any size whose kind the caller does not know: packed like a value, and each of
    /// its 8-byte words at an 8-byte-aligned offset of the blob is a candidate address (a site
    /// as for `DevicePtr`), as for a kernel node flattened from a raw graph.
    Scan,
    /// An 8-byte device address the caller names: `offset` bytes into allocation `index` of the
    /// table (`value` is not read). Packed as that address, and always a site of that
    /// allocation: nothing is matched, so nothing is ambiguous.
    Allocation { index: u32, offset: u64 },
}

/// A pointer argument named by allocation ([`ArgKind::Allocation`]) as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Named {
    /// Byte offset of the address in the blob.
    pub at: u32,
    pub allocation: u32,
    pub offset: u64,
}

/// One argument as the caller gives it; `value` is borrowed for the call.
#[derive(Clone, Copy, Debug)]
pub struct KernelArg<'a> {
    pub value: &'a [u8],
    pub kind: ArgKind,
}

/// The packed blob and where its device pointers are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedArgs {
    pub blob: Vec<u8>,
    /// Byte offsets in `blob` of the words that may hold device addresses, ascending: each
    /// `DevicePtr` argument and the [`aligned_words`] of each `Scan` argument.
    pub pointers: Vec<u32>,
    /// The `Allocation` arguments, in order.
    pub named: Vec<Named>,
}

/// Alignment of an argument of `size` bytes (`size` > 0).
pub fn alignment(size: usize) -> usize {
    1 << size.trailing_zeros().min(4)
}

/// Packs `args`; `address(index, offset)` gives the address of an [`ArgKind::Allocation`]
/// argument, or the error that names what is wrong with it.
pub fn pack(args: &[KernelArg<'_>], address: impl Fn(u32, u64) -> Result<u64>) -> Result<PackedArgs> {
    if args.len() > MAX_ARGS {
        return Err(Error::invalid_argument(format!("{} kernel arguments exceed the limit of {MAX_ARGS}", args.len())));
    }
    let mut end = 0usize;
    let mut offsets = Vec::with_capacity(args.len());
    let mut addresses = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let size = match a.kind {
            ArgKind::Allocation { index, offset } => {
                addresses.push(address(index, offset).map_err(|e| e.context(format!("kernel argument {i}")))?);
                8
            }
            _ => a.value.len(),
        };
        if size == 0 {
            return Err(Error::invalid_argument(format!("kernel argument {i} has size 0")));
        }
        if a.kind == ArgKind::DevicePtr && size != 8 {
            return Err(Error::invalid_argument(format!("kernel argument {i} is a device pointer of size {size}; it must be 8")));
        }
        let at = end.next_multiple_of(alignment(size));
        end = at + size;
        if end > MAX_BLOB_BYTES {
            return Err(Error::invalid_argument(format!(
                "kernel arguments need more than {MAX_BLOB_BYTES} bytes (argument {i} ends at byte {end})"
            )));
        }
        offsets.push(at);
    }
    let mut blob = vec![0u8; end];
    let mut pointers = Vec::new();
    let mut named = Vec::new();
    let mut addresses = addresses.into_iter();
    for (a, &at) in args.iter().zip(&offsets) {
        match a.kind {
            ArgKind::Allocation { index, offset } => {
                let p = addresses.next().expect("one address per named argument");
                write_ptr(&mut blob, at as u32, p);
                named.push(Named { at: at as u32, allocation: index, offset });
                continue;
            }
            ArgKind::Value => {}
            ArgKind::DevicePtr => pointers.push(at as u32),
            ArgKind::Scan => pointers.extend(aligned_words(at, at + a.value.len())),
        }
        blob[at..at + a.value.len()].copy_from_slice(a.value);
    }
    Ok(PackedArgs { blob, pointers, named })
}

/// Offsets of the 8-byte words that lie wholly inside `start..end` of a blob and start at a
/// multiple of 8 of it: where an address can sit when nothing says which bytes are addresses.
/// Offsets fit in `u32` because a blob never exceeds [`MAX_BLOB_BYTES`] (a flattened node's
/// blob comes from the runtime, which has the same limit).
pub fn aligned_words(start: usize, end: usize) -> impl Iterator<Item = u32> {
    (start.next_multiple_of(8)..end.saturating_sub(7)).step_by(8).map(|w| w as u32)
}

/// Reads the 8-byte address at `at` in `blob`.
pub fn read_ptr(blob: &[u8], at: u32) -> u64 {
    let at = at as usize;
    let mut b = [0u8; 8];
    b.copy_from_slice(&blob[at..at + 8]);
    u64::from_ne_bytes(b)
}

/// Writes an 8-byte address at `at` in `blob`.
pub fn write_ptr(blob: &mut [u8], at: u32, address: u64) {
    let at = at as usize;
    blob[at..at + 8].copy_from_slice(&address.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(b: &[u8]) -> KernelArg<'_> {
        KernelArg { value: b, kind: ArgKind::Value }
    }
    fn p(b: &[u8]) -> KernelArg<'_> {
        KernelArg { value: b, kind: ArgKind::DevicePtr }
    }
    fn no_table(index: u32, _: u64) -> Result<u64> {
        Err(Error::invalid_argument(format!("no allocation {index}")))
    }

    #[test]
    fn named_allocations_are_packed_as_their_address_and_listed() {
        let c = [9u8; 4];
        let named = |index, offset| KernelArg { value: &[], kind: ArgKind::Allocation { index, offset } };
        let table = |index: u32, offset: u64| Ok(0x1000 * (index as u64 + 1) + offset);
        // u32@0, named(1, 8)@8, named(0, 0)@16.
        let packed = pack(&[v(&c), named(1, 8), named(0, 0)], table).unwrap();
        assert_eq!(packed.blob.len(), 24);
        assert_eq!(read_ptr(&packed.blob, 8), 0x2008);
        assert_eq!(read_ptr(&packed.blob, 16), 0x1000);
        assert!(packed.pointers.is_empty());
        assert_eq!(packed.named, vec![Named { at: 8, allocation: 1, offset: 8 }, Named { at: 16, allocation: 0, offset: 0 }]);
        let e = pack(&[v(&c), named(5, 0)], no_table).unwrap_err();
        assert!(e.message.contains("kernel argument 1") && e.message.contains("no allocation 5"), "{}", e.message);
    }

    #[test]
    fn alignment_is_the_largest_power_of_two_dividing_the_size_capped_at_16() {
        let cases = [(1, 1), (2, 2), (3, 1), (4, 4), (6, 2), (8, 8), (12, 4), (16, 16), (24, 8), (32, 16), (48, 16)];
        for (size, align) in cases {
            assert_eq!(alignment(size), align, "size {size}");
        }
    }

    #[test]
    fn packs_mixed_sizes_with_natural_alignment_and_no_tail_padding() {
        let ptr = 0x1000_2000_3000_4000u64.to_ne_bytes();
        let f = 2.5f32.to_ne_bytes();
        let n = 77u64.to_ne_bytes();
        let wide = [0xabu8; 16];
        let c = [7u8];
        // (u64* y, float a, u64 n, 16-byte value, u8 c, float* x)
        let packed = pack(&[p(&ptr), v(&f), v(&n), v(&wide), v(&c), p(&ptr)], no_table).unwrap();
        // y@0, a@8, n@16, wide@32 (16-aligned), c@48, x@56; ends at 64.
        assert_eq!(packed.blob.len(), 64);
        assert_eq!(packed.pointers, vec![0, 56]);
        assert_eq!(&packed.blob[8..12], &f);
        assert_eq!(&packed.blob[12..16], &[0; 4], "padding is zeroed");
        assert_eq!(&packed.blob[16..24], &n);
        assert_eq!(&packed.blob[24..32], &[0; 8]);
        assert_eq!(&packed.blob[32..48], &wide);
        assert_eq!(packed.blob[48], 7);
        assert_eq!(read_ptr(&packed.blob, 56), 0x1000_2000_3000_4000);
        // (u64, u32) is 12 bytes, not the 16 of a padded struct.
        assert_eq!(pack(&[p(&ptr), v(&f)], no_table).unwrap().blob.len(), 12);
    }

    #[test]
    fn scan_arguments_are_packed_as_values_and_offer_their_whole_aligned_words() {
        fn s(b: &[u8]) -> KernelArg<'_> {
            KernelArg { value: b, kind: ArgKind::Scan }
        }
        let (c, twenty, ptr, four, sixteen) = ([1u8; 4], [2u8; 20], 7u64.to_ne_bytes(), [3u8; 4], [4u8; 16]);
        // u32@0, scan 20@4 (4..24), ptr@24, scan 4@32, scan 16@48 (16-aligned, 36..48 padding).
        let packed = pack(&[v(&c), s(&twenty), p(&ptr), s(&four), s(&sixteen)], no_table).unwrap();
        assert_eq!(packed.blob.len(), 64);
        assert_eq!(&packed.blob[4..24], &twenty);
        assert_eq!(&packed.blob[48..64], &sixteen);
        // 4..8 is not a whole aligned word of the scan argument; 32..36 is too short for one.
        assert_eq!(packed.pointers, vec![8, 16, 24, 48, 56]);
        assert_eq!(aligned_words(0, 7).count(), 0);
        assert_eq!(aligned_words(3, 24).collect::<Vec<_>>(), vec![8, 16]);
        assert_eq!(aligned_words(0, 16).collect::<Vec<_>>(), vec![0, 8]);
    }

    #[test]
    fn zero_arguments_give_an_empty_blob() {
        let packed = pack(&[], no_table).unwrap();
        assert!(packed.blob.is_empty() && packed.pointers.is_empty() && packed.named.is_empty());
    }

    #[test]
    fn rejects_bad_arguments_naming_the_index() {
        let e = pack(&[v(&[1]), v(&[])], no_table).unwrap_err();
        assert!(e.message.contains("argument 1") && e.message.contains("size 0"), "{}", e.message);
        let e = pack(&[p(&[0; 4])], no_table).unwrap_err();
        assert!(e.message.contains("argument 0") && e.message.contains("must be 8"), "{}", e.message);
        let big = vec![0u8; 20000];
        let e = pack(&[v(&big), v(&big)], no_table).unwrap_err();
        assert!(e.message.contains("argument 1"), "{}", e.message);
    }

    #[test]
    fn read_and_write_round_trip() {
        let mut blob = vec![0u8; 24];
        write_ptr(&mut blob, 16, 0xdead_beef_0000_0010);
        assert_eq!(read_ptr(&blob, 16), 0xdead_beef_0000_0010);
        assert_eq!(&blob[..16], &[0; 16]);
    }
}
