//! Ethernet II frames and what access networks wrap around the IP packet: a checked view over
//! the 14-byte header, and a walk over stacked 802.1Q / 802.1ad (QinQ) VLAN tags, then a
//! PPPoE session header (RFC 2516, PPP protocol IPv4 or IPv6) or an MPLS label stack (to the
//! bottom of the stack, the payload's IP version read from its first nibble), to where the
//! IP header starts. The shaper classifies, hashes and marks the inner IP packet, as a
//! subscriber's traffic arrives inside these. Nothing here looks past the start of the IP
//! header.

use super::Malformed;

/// Ethernet header length without tags.
pub const HEADER_LEN: usize = 14;
/// One VLAN tag (TCI + inner EtherType).
pub const VLAN_TAG_LEN: usize = 4;
/// Most VLAN tags walked before the frame is called malformed (QinQ uses two).
pub const MAX_VLAN_TAGS: usize = 4;
/// The PPPoE session header (6 bytes) and the PPP protocol field (2 bytes).
pub const PPPOE_HEADER_LEN: usize = 8;
/// One MPLS label stack entry.
pub const MPLS_LABEL_LEN: usize = 4;
/// Most MPLS labels walked before the frame is called malformed (access and VPN stacks use
/// two or three).
pub const MAX_MPLS_LABELS: usize = 8;

/// PPP protocol numbers of the packets a PPPoE session carries that the parser reads.
pub mod ppp {
    /// IPv4.
    pub const IPV4: u16 = 0x0021;
    /// IPv6.
    pub const IPV6: u16 = 0x0057;
}

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
    /// PPPoE session stage (RFC 2516).
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// MPLS unicast.
    pub const MPLS_UNICAST: u16 = 0x8847;
    /// MPLS multicast.
    pub const MPLS_MULTICAST: u16 = 0x8848;
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

/// What wraps the IP packet after the VLAN tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encapsulation {
    /// Nothing: the EtherType names the payload.
    #[default]
    None,
    /// A PPPoE session header.
    Pppoe,
    /// An MPLS label stack of this many entries.
    Mpls(u8),
}

/// Where the L2 walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2 {
    /// EtherType of the payload: [`ethertype::IPV4`] or [`ethertype::IPV6`] also for an IP
    /// packet found inside PPPoE or MPLS; otherwise the last EtherType read.
    pub ethertype: u16,
    /// Offset of the network header (the inner IP header when one was found).
    pub l3_offset: usize,
    /// VLAN tags walked.
    pub vlan_tags: u8,
    /// PPPoE or MPLS walked through to reach the IP header.
    pub encapsulation: Encapsulation,
}

fn is_vlan_tpid(ethertype: u16) -> bool {
    matches!(
        ethertype,
        ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_LEGACY
    )
}

/// Walks the Ethernet header, any VLAN tags, and a PPPoE session or MPLS label stack to the
/// IP header inside. A PPPoE frame that carries no IP (LCP, a discovery-stage code) and an
/// MPLS payload that is not IP (a pseudowire) end the walk as non-IP at the PPPoE header or
/// after the labels, with their EtherType.
///
/// # Errors
/// [`Malformed::TruncatedEthernet`], [`Malformed::TruncatedVlan`] when a tag is cut off,
/// [`Malformed::TooManyVlanTags`] past [`MAX_VLAN_TAGS`],
/// [`Malformed::TruncatedEncapsulation`] when a PPPoE header or an MPLS label (or the byte
/// after the last label) is cut off, and [`Malformed::TooManyMplsLabels`] past
/// [`MAX_MPLS_LABELS`].
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
    let mut l2 = L2 {
        ethertype,
        l3_offset: offset,
        vlan_tags: tags,
        encapsulation: Encapsulation::None,
    };
    match ethertype {
        ethertype::PPPOE_SESSION => pppoe(frame, &mut l2)?,
        ethertype::MPLS_UNICAST | ethertype::MPLS_MULTICAST => mpls(frame, &mut l2)?,
        _ => {}
    }
    Ok(l2)
}

/// Steps over a PPPoE session header when it carries IPv4 or IPv6.
fn pppoe(frame: &[u8], l2: &mut L2) -> Result<(), Malformed> {
    let h = frame
        .get(l2.l3_offset..l2.l3_offset + PPPOE_HEADER_LEN)
        .ok_or(Malformed::TruncatedEncapsulation)?;
    // Version 1, type 1, code 0 (session data); anything else is not a data packet.
    if h[0] != 0x11 || h[1] != 0x00 {
        return Ok(());
    }
    let inner = match u16::from_be_bytes([h[6], h[7]]) {
        ppp::IPV4 => ethertype::IPV4,
        ppp::IPV6 => ethertype::IPV6,
        _ => return Ok(()),
    };
    l2.ethertype = inner;
    l2.l3_offset += PPPOE_HEADER_LEN;
    l2.encapsulation = Encapsulation::Pppoe;
    Ok(())
}

/// Steps over an MPLS label stack to its bottom, then reads the payload's IP version.
fn mpls(frame: &[u8], l2: &mut L2) -> Result<(), Malformed> {
    let mut offset = l2.l3_offset;
    for labels in 1..=MAX_MPLS_LABELS {
        let entry = frame
            .get(offset..offset + MPLS_LABEL_LEN)
            .ok_or(Malformed::TruncatedEncapsulation)?;
        offset += MPLS_LABEL_LEN;
        // The S bit (bottom of stack) is the lowest bit of the third byte.
        if entry[2] & 0x01 == 0 {
            continue;
        }
        let version = frame.get(offset).ok_or(Malformed::TruncatedEncapsulation)? >> 4;
        let inner = match version {
            4 => ethertype::IPV4,
            6 => ethertype::IPV6,
            // A pseudowire (control word, Ethernet) or anything else: not IP.
            _ => return Ok(()),
        };
        l2.ethertype = inner;
        l2.l3_offset = offset;
        l2.encapsulation = Encapsulation::Mpls(labels as u8);
        return Ok(());
    }
    Err(Malformed::TooManyMplsLabels)
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
                vlan_tags: 0,
                encapsulation: Encapsulation::None,
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

    fn with(ethertype: [u8; 2], rest: &[u8]) -> Vec<u8> {
        let mut f = UNTAGGED_IPV4[..12].to_vec();
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(rest);
        f
    }

    const PPPOE_IPV6: [u8; 9] = [0x11, 0x00, 0x12, 0x34, 0x00, 0x2a, 0x00, 0x57, 0x60];

    #[test]
    fn pppoe_sessions_lead_to_the_inner_ip_header() {
        let l2 = walk(&with([0x88, 0x64], &PPPOE_IPV6)).unwrap();
        assert_eq!(
            (l2.ethertype, l2.l3_offset, l2.encapsulation),
            (ethertype::IPV6, 22, Encapsulation::Pppoe)
        );
        let mut v4 = PPPOE_IPV6;
        v4[7] = 0x21;
        assert_eq!(
            walk(&with([0x88, 0x64], &v4)).unwrap().ethertype,
            ethertype::IPV4
        );
        // A PPPoE session behind a C-tag.
        let mut tagged = vec![0x00, 0x0a, 0x88, 0x64];
        tagged.extend_from_slice(&v4);
        let l2 = walk(&with([0x81, 0x00], &tagged)).unwrap();
        assert_eq!(
            (l2.ethertype, l2.l3_offset, l2.vlan_tags),
            (ethertype::IPV4, 26, 1)
        );
    }

    #[test]
    fn pppoe_control_and_other_codes_are_not_ip() {
        let mut lcp = PPPOE_IPV6;
        lcp[6] = 0xc0;
        lcp[7] = 0x21;
        let l2 = walk(&with([0x88, 0x64], &lcp)).unwrap();
        assert_eq!((l2.ethertype, l2.l3_offset), (ethertype::PPPOE_SESSION, 14));
        let mut padi = PPPOE_IPV6;
        padi[1] = 0x09;
        assert_eq!(
            walk(&with([0x88, 0x64], &padi)).unwrap().encapsulation,
            Encapsulation::None
        );
        assert_eq!(
            walk(&with([0x88, 0x64], &PPPOE_IPV6[..7])),
            Err(Malformed::TruncatedEncapsulation)
        );
    }

    #[test]
    fn mpls_stacks_end_at_the_bottom_label_and_read_the_version() {
        // Two labels, the second with S set, then IPv4.
        let stack = [0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40, 0x45];
        let l2 = walk(&with([0x88, 0x47], &stack)).unwrap();
        assert_eq!(
            (l2.ethertype, l2.l3_offset, l2.encapsulation),
            (ethertype::IPV4, 22, Encapsulation::Mpls(2))
        );
        let mut v6 = stack;
        v6[8] = 0x60;
        assert_eq!(
            walk(&with([0x88, 0x48], &v6)).unwrap().ethertype,
            ethertype::IPV6
        );
        let mut pw = stack;
        pw[8] = 0x00; // a pseudowire control word
        let l2 = walk(&with([0x88, 0x47], &pw)).unwrap();
        assert_eq!(l2.ethertype, ethertype::MPLS_UNICAST);
        assert_eq!(
            walk(&with([0x88, 0x47], &stack[..8])),
            Err(Malformed::TruncatedEncapsulation)
        );
        assert_eq!(
            walk(&with([0x88, 0x47], &stack[..6])),
            Err(Malformed::TruncatedEncapsulation)
        );
        let endless = [0x00, 0x01, 0x00, 0x40].repeat(MAX_MPLS_LABELS + 1);
        assert_eq!(
            walk(&with([0x88, 0x47], &endless)),
            Err(Malformed::TooManyMplsLabels)
        );
    }
}
