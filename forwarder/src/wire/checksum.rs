//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624). Pure arithmetic over
//! byte slices: it never indexes past the slice and never allocates.

/// Returns the one's-complement sum of `data` as big-endian 16-bit words, added to `initial`
/// and folded to 16 bits (not inverted). An odd last byte is padded with zero.
pub fn sum(initial: u32, data: &[u8]) -> u16 {
    let mut acc = u64::from(initial);
    let mut chunks = data.chunks_exact(2);
    for pair in &mut chunks {
        acc += u64::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold(acc)
}

/// Folds a wide one's-complement accumulator to 16 bits.
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Returns the checksum field value for `data` (the inverted sum).
pub fn checksum(data: &[u8]) -> u16 {
    !sum(0, data)
}

/// Returns the checksum after one 16-bit word of the covered data changed from `old` to `new`:
/// `HC' = ~(~HC + ~m + m')` (RFC 1624 eqn. 3), which never yields the ambiguous `0xffff → 0`
/// error of the older RFC 1141 form.
pub fn update(check: u16, old: u16, new: u16) -> u16 {
    let acc = u64::from(!check) + u64::from(!old) + u64::from(new);
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 1071 §3 worked example: words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn sum_matches_the_rfc_1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(0, &data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_the_last_byte_with_zero() {
        assert_eq!(sum(0, &[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }

    #[test]
    fn incremental_update_equals_recomputation() {
        let mut data = [0x45u8, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11];
        let before = checksum(&data);
        let old = u16::from_be_bytes([data[0], data[1]]);
        data[1] = 0xb9;
        let new = u16::from_be_bytes([data[0], data[1]]);
        assert_eq!(update(before, old, new), checksum(&data));
    }
}
