//! IPv6 headers (RFC 8200): a checked view of the fixed header, the walk over extension
//! headers (hop-by-hop, routing, fragment, destination options, AH) to the upper-layer header,
//! bounded to [`MAX_EXTENSION_HEADERS`], and the in-place traffic-class rewrites for ECN and
//! DSCP (IPv6 has no header checksum).

use super::Malformed;

/// Fixed header length.
pub const HEADER_LEN: usize = 40;
/// Most extension headers walked before the packet is called malformed.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Next-header values with special meaning to the walk.
pub mod next_header {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing header.
    pub const ROUTING: u8 = 43;
    /// Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating security payload (opaque: the walk stops here).
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AUTH: u8 = 51;
    /// No next header.
    pub const NONE: u8 = 59;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
}

mod field {
    use core::ops::Range;
    pub(super) const VER_TC_FLOW: Range<usize> = 0..4;
    pub(super) const PAYLOAD_LEN: Range<usize> = 4..6;
    pub(super) const NEXT_HEADER: usize = 6;
    pub(super) const SRC: Range<usize> = 8..24;
    pub(super) const DST: Range<usize> = 24..40;
}

/// A view of an IPv6 fixed header. After [`Ipv6Packet::new_checked`] the version is 6 and the
/// fixed header plus the declared payload are inside the buffer.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Returns a view after checking version and lengths.
    ///
    /// # Errors
    /// [`Malformed::TruncatedIpv6`] when the fixed header or the declared payload does not
    /// fit, [`Malformed::BadIpVersion`] when the version is not 6.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed::TruncatedIpv6);
        }
        if b[0] >> 4 != 6 {
            return Err(Malformed::BadIpVersion);
        }
        let packet = Ipv6Packet { buffer };
        if HEADER_LEN + usize::from(packet.payload_len()) > packet.buffer.as_ref().len() {
            return Err(Malformed::TruncatedIpv6);
        }
        Ok(packet)
    }

    fn first_word(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The traffic class byte: DSCP in the upper six bits, ECN in the lower two.
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// DSCP (0..=63).
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// The ECN field (0..=3).
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PAYLOAD_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The first next-header value.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Source address.
    pub fn src_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// The payload after the fixed header, up to the declared length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Writes a new traffic class byte, leaving version and flow label alone.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let b = self.buffer.as_mut();
        b[0] = (b[0] & 0xf0) | (tc >> 4);
        b[1] = (b[1] & 0x0f) | (tc << 4);
    }
}

/// Where the extension-header walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// The upper-layer protocol (or ESP / no-next-header, where the walk stops).
    pub protocol: u8,
    /// Offset of the upper-layer header within the IPv6 payload.
    pub offset: usize,
    /// True when a fragment header said this is a piece of a fragmented packet (first piece
    /// included; an atomic fragment with offset 0 and M clear is not one).
    pub fragment: bool,
}

/// Walks the extension headers in `payload` (the bytes after the fixed header), starting from
/// the fixed header's next-header value.
///
/// # Errors
/// [`Malformed::TruncatedIpv6ExtensionHeader`] when a header runs past the payload and
/// [`Malformed::TooManyIpv6ExtensionHeaders`] past [`MAX_EXTENSION_HEADERS`].
pub fn walk_extensions(first: u8, payload: &[u8]) -> Result<UpperLayer, Malformed> {
    let mut protocol = first;
    let mut offset = 0usize;
    let mut fragment = false;
    for _ in 0..=MAX_EXTENSION_HEADERS {
        let len = match protocol {
            next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DEST_OPTS => {
                let h = payload
                    .get(offset..offset + 2)
                    .ok_or(Malformed::TruncatedIpv6ExtensionHeader)?;
                (usize::from(h[1]) + 1) * 8
            }
            next_header::FRAGMENT => {
                let h = payload
                    .get(offset..offset + 8)
                    .ok_or(Malformed::TruncatedIpv6ExtensionHeader)?;
                // Offset (13 bits) and M flag share bytes 2..4; both zero = atomic fragment.
                let off_m = u16::from_be_bytes([h[2], h[3]]);
                if off_m & 0xfff9 != 0 {
                    fragment = true;
                }
                8
            }
            next_header::AUTH => {
                let h = payload
                    .get(offset..offset + 2)
                    .ok_or(Malformed::TruncatedIpv6ExtensionHeader)?;
                (usize::from(h[1]) + 2) * 4
            }
            _ => {
                return Ok(UpperLayer {
                    protocol,
                    offset,
                    fragment,
                })
            }
        };
        if offset + len > payload.len() {
            return Err(Malformed::TruncatedIpv6ExtensionHeader);
        }
        protocol = payload[offset];
        offset += len;
        if fragment {
            // Later pieces carry no upper-layer header; stop like the kernel's dissector.
            return Ok(UpperLayer {
                protocol,
                offset,
                fragment,
            });
        }
    }
    Err(Malformed::TooManyIpv6ExtensionHeaders)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Traffic class 0xb9 (DSCP 46, ECT(1)), flow label 0x12345, payload 8 bytes of UDP,
    // 2001:db8::1 -> 2001:db8::2.
    static EF_UDP6: [u8; 48] = [
        0x6b, 0x91, 0x23, 0x45, 0x00, 0x08, 17, 64, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, //
        0x04, 0x00, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
    ];

    #[test]
    fn static_header_fields_read_back() {
        let ip = Ipv6Packet::new_checked(&EF_UDP6[..]).unwrap();
        assert_eq!(ip.traffic_class(), 0xb9);
        assert_eq!(ip.dscp(), 46);
        assert_eq!(ip.ecn(), 1);
        assert_eq!(ip.flow_label(), 0x12345);
        assert_eq!(ip.next_header(), 17);
        assert_eq!(ip.src_addr()[15], 1);
        assert_eq!(ip.dst_addr()[15], 2);
        assert_eq!(ip.payload().len(), 8);
    }

    #[test]
    fn traffic_class_rewrite_keeps_version_and_flow_label() {
        let mut frame = EF_UDP6;
        let mut ip = Ipv6Packet::new_checked(&mut frame[..]).unwrap();
        ip.set_traffic_class(0x03);
        assert_eq!(ip.traffic_class(), 0x03);
        assert_eq!(ip.flow_label(), 0x12345);
        assert_eq!(frame[0] >> 4, 6);
    }

    #[test]
    fn extension_headers_are_walked_to_the_transport_header() {
        // hop-by-hop (8 bytes) -> destination options (16 bytes) -> TCP
        let mut payload = vec![next_header::DEST_OPTS, 0, 1, 4, 0, 0, 0, 0];
        payload.extend_from_slice(&[6, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        payload.extend_from_slice(&[0; 20]);
        let up = walk_extensions(next_header::HOP_BY_HOP, &payload).unwrap();
        assert_eq!(
            up,
            UpperLayer {
                protocol: 6,
                offset: 24,
                fragment: false
            }
        );
    }

    #[test]
    fn fragment_header_marks_fragments_but_not_atomic_ones() {
        let later = [17, 0, 0x05, 0x00, 0, 0, 0, 1];
        let up = walk_extensions(next_header::FRAGMENT, &later).unwrap();
        assert!(up.fragment);
        let mut atomic = vec![17, 0, 0, 0, 0, 0, 0, 1];
        atomic.extend_from_slice(&[0; 8]);
        let up = walk_extensions(next_header::FRAGMENT, &atomic).unwrap();
        assert!(!up.fragment);
        assert_eq!((up.protocol, up.offset), (17, 8));
    }

    #[test]
    fn authentication_header_length_is_in_four_byte_units() {
        // AH with payload length 4 -> (4 + 2) * 4 = 24 bytes, then UDP.
        let mut payload = vec![17, 4, 0, 0];
        payload.extend_from_slice(&[0; 20]);
        payload.extend_from_slice(&[0; 8]);
        let up = walk_extensions(next_header::AUTH, &payload).unwrap();
        assert_eq!((up.protocol, up.offset), (17, 24));
    }

    #[test]
    fn looping_or_cut_extension_chains_are_malformed() {
        let mut chain = Vec::new();
        for _ in 0..10 {
            chain.extend_from_slice(&[next_header::DEST_OPTS, 0, 0, 0, 0, 0, 0, 0]);
        }
        assert_eq!(
            walk_extensions(next_header::DEST_OPTS, &chain),
            Err(Malformed::TooManyIpv6ExtensionHeaders)
        );
        assert_eq!(
            walk_extensions(next_header::ROUTING, &[6, 3, 0, 0]),
            Err(Malformed::TruncatedIpv6ExtensionHeader)
        );
    }
}
