//! IPv4 headers (RFC 791): a checked view with options and fragments, the header checksum,
//! and the in-place TOS rewrites CAKE needs (ECN CE marking and DSCP washing, each with an
//! incremental checksum update per RFC 1624).

use super::{checksum, Malformed};

/// Header length without options.
pub const MIN_HEADER_LEN: usize = 20;

mod field {
    use core::ops::Range;
    pub(super) const VER_IHL: usize = 0;
    pub(super) const TOS: usize = 1;
    pub(super) const TOTAL_LEN: Range<usize> = 2..4;
    pub(super) const FLAGS_FRAG: Range<usize> = 6..8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: Range<usize> = 10..12;
    pub(super) const SRC: Range<usize> = 12..16;
    pub(super) const DST: Range<usize> = 16..20;
}

const MORE_FRAGMENTS: u16 = 0x2000;
const FRAGMENT_OFFSET: u16 = 0x1fff;

/// A view of an IPv4 header. After [`Ipv4Packet::new_checked`] the version is 4, the header
/// length is in range and the whole header (options included) and the declared total length
/// are inside the buffer, so no accessor panics.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Returns a view after checking version, header length and total length.
    ///
    /// # Errors
    /// [`Malformed::TruncatedIpv4`] when the fixed header or the declared total length does
    /// not fit, [`Malformed::BadIpVersion`] when the version is not 4, and
    /// [`Malformed::BadIpv4HeaderLength`] when IHL < 5 or the total length is below it.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Malformed::TruncatedIpv4);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Malformed::BadIpVersion);
        }
        let packet = Ipv4Packet { buffer };
        let header_len = packet.header_len();
        let total_len = usize::from(packet.total_len());
        if header_len < MIN_HEADER_LEN || total_len < header_len {
            return Err(Malformed::BadIpv4HeaderLength);
        }
        if total_len > packet.buffer.as_ref().len() {
            return Err(Malformed::TruncatedIpv4);
        }
        Ok(packet)
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The TOS byte: DSCP in the upper six bits, ECN in the lower two.
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// DSCP (0..=63).
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// The ECN field (0..=3).
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x03
    }

    /// Total length (header plus payload) in bytes.
    pub fn total_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::TOTAL_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    fn flags_frag(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::FLAGS_FRAG];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Fragment offset in 8-byte units.
    pub fn fragment_offset(&self) -> u16 {
        self.flags_frag() & FRAGMENT_OFFSET
    }

    /// The More Fragments flag.
    pub fn more_fragments(&self) -> bool {
        self.flags_frag() & MORE_FRAGMENTS != 0
    }

    /// True for any piece of a fragmented datagram, the first one included.
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (MORE_FRAGMENTS | FRAGMENT_OFFSET) != 0
    }

    /// Transport protocol number.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Source address.
    pub fn src_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// Returns true when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(0, &self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }

    /// The payload, up to the declared total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Writes a new TOS byte and updates the header checksum incrementally (RFC 1624).
    pub fn set_tos(&mut self, tos: u8) {
        let b = self.buffer.as_mut();
        let old = u16::from_be_bytes([b[field::VER_IHL], b[field::TOS]]);
        b[field::TOS] = tos;
        let new = u16::from_be_bytes([b[field::VER_IHL], tos]);
        let check = u16::from_be_bytes([b[field::CHECKSUM][0], b[field::CHECKSUM][1]]);
        let check = checksum::update(check, old, new);
        b[field::CHECKSUM].copy_from_slice(&check.to_be_bytes());
    }

    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        let header_len = self.header_len();
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let check = checksum::checksum(&b[..header_len]);
        b[field::CHECKSUM].copy_from_slice(&check.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A 20-byte header, UDP, 10.0.0.1 -> 10.0.0.2, DSCP 46 (EF), ECT(0), total length 28,
    // with a correct checksum, followed by an 8-byte UDP header.
    static EF_UDP: [u8; 28] = [
        0x45, 0xba, 0x00, 0x1c, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0x66, 0x14, 10, 0, 0, 1, 10, 0,
        0, 2, //
        0x04, 0x00, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
    ];

    #[test]
    fn static_header_fields_read_back() {
        let ip = Ipv4Packet::new_checked(&EF_UDP[..]).unwrap();
        assert_eq!(ip.header_len(), 20);
        assert_eq!(ip.dscp(), 46);
        assert_eq!(ip.ecn(), 2);
        assert_eq!(ip.total_len(), 28);
        assert_eq!(ip.protocol(), 17);
        assert_eq!(ip.src_addr(), [10, 0, 0, 1]);
        assert_eq!(ip.dst_addr(), [10, 0, 0, 2]);
        assert!(!ip.is_fragment());
        assert!(
            ip.verify_checksum(),
            "fixture checksum {:#06x}",
            ip.checksum()
        );
        assert_eq!(ip.payload().len(), 8);
    }

    #[test]
    fn set_tos_keeps_the_checksum_valid() {
        let mut frame = EF_UDP;
        let mut ip = Ipv4Packet::new_checked(&mut frame[..]).unwrap();
        ip.set_tos(0xbb);
        assert_eq!(ip.ecn(), 3);
        assert!(ip.verify_checksum());
        let incremental = ip.checksum();
        ip.fill_checksum();
        assert_eq!(ip.checksum(), incremental);
    }

    #[test]
    fn bad_version_and_lengths_are_rejected() {
        let mut frame = EF_UDP;
        frame[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&frame[..]).err(),
            Some(Malformed::BadIpVersion)
        );
        frame[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&frame[..]).err(),
            Some(Malformed::BadIpv4HeaderLength)
        );
        frame[0] = 0x45;
        frame[3] = 0x40; // total length 64 > 28 bytes present
        assert_eq!(
            Ipv4Packet::new_checked(&frame[..]).err(),
            Some(Malformed::TruncatedIpv4)
        );
        assert_eq!(
            Ipv4Packet::new_checked(&EF_UDP[..19]).err(),
            Some(Malformed::TruncatedIpv4)
        );
    }
}
