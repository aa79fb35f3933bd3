//! Ethernet II frames and 802.1Q / 802.1ad (QinQ) VLAN tags: a checked view over the 14-byte
//! header and a walk over stacked tags to where the network header starts. Nothing here looks
//! past the last VLAN tag.

use super::Malformed;

/// Ethernet header length without tags.
pub const HEADER_LEN: usize = 14;
/// One VLAN tag (TCI + inner EtherType).
pub const VLAN_TAG_LEN: usize = 4;
/// Most VLAN tags walked before the frame is called malformed (QinQ uses two).
pub const MAX_VLAN_TAGS: usize = 4;

/// EtherType values the parser knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ outer tag some switches still send.
    pub const QINQ_LEGACY: u16 = 0x9100;
}

mod field {
    use core::ops::Range;
    pub(super) const DESTINATION: Range<usize> = 0..6;
    pub(super) const SOURCE: Range<usize> = 6..12;
    pub(super) const ETHERTYPE: Range<usize> = 12..14;
}

/// A read-only view of an Ethernet II header. After [`EthernetFrame::new_checked`] no accessor
/// panics.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Returns a view of `buffer` after checking it holds a whole header.
    ///
    /// # Errors
    /// [`Malformed::TruncatedEthernet`] when `buffer` is shorter than 14 bytes.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::TruncatedEthernet);
        }
        Ok(EthernetFrame { buffer })
    }

    /// Destination MAC address.
    pub fn destination(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        mac
    }

    /// Source MAC address.
    pub fn source(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        mac
    }

    /// The outer EtherType (a VLAN TPID when the frame is tagged).
    pub fn ethertype(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::ETHERTYPE];
        u16::from_be_bytes([b[0], b[1]])
    }
}

/// Where the L2 walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2 {
    /// EtherType of the payload after all VLAN tags.
    pub ethertype: u16,
    /// Offset of the network header.
    pub l3_offset: usize,
    /// VLAN tags walked.
    pub vlan_tags: u8,
}

fn is_vlan_tpid(ethertype: u16) -> bool {
    matches!(
        ethertype,
        ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_LEGACY
    )
}

/// Walks the Ethernet header and any VLAN tags.
///
/// # Errors
/// [`Malformed::TruncatedEthernet`], [`Malformed::TruncatedVlan`] when a tag is cut off, and
/// [`Malformed::TooManyVlanTags`] past [`MAX_VLAN_TAGS`].
pub fn walk(frame: &[u8]) -> Result<L2, Malformed> {
    let eth = EthernetFrame::new_checked(frame)?;
    let mut ethertype = eth.ethertype();
    let mut offset = HEADER_LEN;
    let mut tags = 0u8;
    while is_vlan_tpid(ethertype) {
        if usize::from(tags) == MAX_VLAN_TAGS {
            return Err(Malformed::TooManyVlanTags);
        }
        // The tag is TCI (2 bytes) then the inner EtherType (2 bytes).
        let inner = frame
            .get(offset + 2..offset + VLAN_TAG_LEN)
            .ok_or(Malformed::TruncatedVlan)?;
        ethertype = u16::from_be_bytes([inner[0], inner[1]]);
        offset += VLAN_TAG_LEN;
        tags += 1;
    }
    Ok(L2 {
        ethertype,
        l3_offset: offset,
        vlan_tags: tags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static UNTAGGED_IPV4: [u8; 14] = [
        0x02, 0, 0, 0, 0, 0x02, // dst
        0x02, 0, 0, 0, 0, 0x01, // src
        0x08, 0x00, // IPv4
    ];

    static QINQ_IPV6: [u8; 22] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, //
        0x88, 0xa8, 0x00, 0x64, // S-tag, VID 100
        0x81, 0x00, 0x00, 0x0a, // C-tag, VID 10
        0x86, 0xdd, // IPv6
    ];

    #[test]
    fn untagged_frame_has_network_header_at_14() {
        let eth = EthernetFrame::new_checked(&UNTAGGED_IPV4[..]).unwrap();
        assert_eq!(eth.destination(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(eth.source(), [2, 0, 0, 0, 0, 1]);
        let l2 = walk(&UNTAGGED_IPV4).unwrap();
        assert_eq!(
            l2,
            L2 {
                ethertype: ethertype::IPV4,
                l3_offset: 14,
                vlan_tags: 0
            }
        );
    }

    #[test]
    fn qinq_frame_walks_both_tags() {
        let l2 = walk(&QINQ_IPV6).unwrap();
        assert_eq!(l2.ethertype, ethertype::IPV6);
        assert_eq!(l2.l3_offset, 22);
        assert_eq!(l2.vlan_tags, 2);
    }

    #[test]
    fn cut_vlan_tag_is_malformed() {
        assert_eq!(walk(&QINQ_IPV6[..17]), Err(Malformed::TruncatedVlan));
        assert_eq!(walk(&QINQ_IPV6[..13]), Err(Malformed::TruncatedEthernet));
    }

    #[test]
    fn endless_vlan_tags_are_malformed() {
        let mut frame = vec![0u8; 12];
        for _ in 0..6 {
            frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        frame.extend_from_slice(&[0x08, 0x00]);
        assert_eq!(walk(&frame), Err(Malformed::TooManyVlanTags));
    }
}
