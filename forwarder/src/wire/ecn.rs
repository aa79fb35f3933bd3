//! In-place rewrites of the IP TOS / traffic-class byte: ECN Congestion Experienced marking
//! (RFC 3168) and DSCP washing. IPv4 checksums are updated incrementally (RFC 1624); IPv6 has
//! none. Both rewrites touch only the one byte (two nibbles for IPv6) and the checksum.

use super::ethernet::{self, ethertype};
use super::ipv4::Ipv4Packet;
use super::ipv6::Ipv6Packet;

const ECN_MASK: u8 = 0x03;
const ECN_CE: u8 = 0x03;

/// Marks ECN CE on the IP packet in `frame` (any VLAN tags, inside PPPoE or MPLS). Returns true when the packet was
/// ECN-capable (ECT(0), ECT(1) or already CE) and now carries CE; false when it is not
/// ECN-capable or not IP, in which case it is unchanged and the caller drops it instead.
pub fn set_ce(frame: &mut [u8]) -> bool {
    match ethernet::walk(frame) {
        Ok(l2) if matches!(l2.ethertype, ethertype::IPV4 | ethertype::IPV6) => {
            set_ce_at(frame, l2.l3_offset)
        }
        _ => false,
    }
}

/// [`set_ce`] for a frame whose IP header offset is already known (from
/// [`super::Parsed::l3_offset`] of a frame parsed as IPv4 or IPv6). The IP version is taken
/// from the header itself.
pub fn set_ce_at(frame: &mut [u8], l3_offset: usize) -> bool {
    let Some(l3) = frame.get_mut(l3_offset..) else {
        return false;
    };
    match l3.first().map(|b| b >> 4) {
        Some(4) => match Ipv4Packet::new_checked(l3) {
            Ok(mut ip) => match ip.ecn() {
                0 => false,
                ECN_CE => true,
                _ => {
                    let tos = ip.tos() | ECN_CE;
                    ip.set_tos(tos);
                    true
                }
            },
            Err(_) => false,
        },
        Some(6) => match Ipv6Packet::new_checked(l3) {
            Ok(mut ip) => match ip.ecn() {
                0 => false,
                ECN_CE => true,
                _ => {
                    let tc = ip.traffic_class() | ECN_CE;
                    ip.set_traffic_class(tc);
                    true
                }
            },
            Err(_) => false,
        },
        _ => false,
    }
}

/// Clears the DSCP of the IP packet in `frame`, keeping the ECN bits and fixing the IPv4
/// checksum. Writes nothing when the DSCP is already zero (as sch_cake's wash does). Returns
/// true when the frame changed.
pub fn wash_dscp(frame: &mut [u8]) -> bool {
    let l3_offset = match ethernet::walk(frame) {
        Ok(l2) if matches!(l2.ethertype, ethertype::IPV4 | ethertype::IPV6) => l2.l3_offset,
        _ => return false,
    };
    let Some(l3) = frame.get_mut(l3_offset..) else {
        return false;
    };
    match l3.first().map(|b| b >> 4) {
        Some(4) => match Ipv4Packet::new_checked(l3) {
            Ok(mut ip) if ip.dscp() != 0 => {
                let tos = ip.tos() & ECN_MASK;
                ip.set_tos(tos);
                true
            }
            _ => false,
        },
        Some(6) => match Ipv6Packet::new_checked(l3) {
            Ok(mut ip) if ip.dscp() != 0 => {
                let tc = ip.traffic_class() & ECN_MASK;
                ip.set_traffic_class(tc);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{build_udp_frame, parse};
    use std::net::IpAddr;

    fn frame(src: &str, dst: &str, dscp: u8, ecn: u8) -> Vec<u8> {
        let mut buf = vec![0u8; 256];
        let src: IpAddr = src.parse().unwrap();
        let dst: IpAddr = dst.parse().unwrap();
        let len = build_udp_frame(&mut buf, src, dst, 1000, 2000, dscp, ecn, 32).unwrap();
        buf.truncate(len);
        buf
    }

    fn ipv4_checksum_ok(frame: &[u8]) -> bool {
        Ipv4Packet::new_checked(&frame[14..])
            .unwrap()
            .verify_checksum()
    }

    #[test]
    fn ect0_ipv4_becomes_ce_with_a_valid_checksum() {
        let mut f = frame("10.0.0.1", "10.0.0.2", 46, 2);
        assert!(set_ce(&mut f));
        let p = parse(&f);
        assert_eq!((p.meta.ecn, p.meta.dscp), (3, 46));
        assert!(ipv4_checksum_ok(&f));
    }

    #[test]
    fn ect1_and_ce_ipv4_report_ecn_capable() {
        let mut f = frame("10.0.0.1", "10.0.0.2", 0, 1);
        assert!(set_ce(&mut f));
        assert_eq!(parse(&f).meta.ecn, 3);
        let before = f.clone();
        assert!(set_ce(&mut f));
        assert_eq!(f, before, "marking CE twice changes nothing");
    }

    #[test]
    fn not_ect_packets_are_left_alone() {
        let mut f = frame("10.0.0.1", "10.0.0.2", 10, 0);
        let before = f.clone();
        assert!(!set_ce(&mut f));
        assert_eq!(f, before);
        let mut f6 = frame("2001:db8::1", "2001:db8::2", 10, 0);
        assert!(!set_ce(&mut f6));
    }

    #[test]
    fn ipv6_ce_marking_keeps_dscp_and_flow_label() {
        let mut f = frame("2001:db8::1", "2001:db8::2", 34, 2);
        f[15] |= 0x0a; // a flow label
        let label = parse(&f).meta.keys.flow_label;
        assert!(set_ce(&mut f));
        let p = parse(&f);
        assert_eq!((p.meta.ecn, p.meta.dscp), (3, 34));
        assert_eq!(p.meta.keys.flow_label, label);
    }

    #[test]
    fn non_ip_and_runt_frames_are_not_marked() {
        let mut arp = vec![0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!set_ce(&mut arp));
        let mut runt = frame("10.0.0.1", "10.0.0.2", 0, 2);
        runt.truncate(30);
        assert!(!set_ce(&mut runt));
    }

    #[test]
    fn wash_zeroes_dscp_keeps_ecn_and_fixes_the_checksum() {
        let mut f = frame("10.0.0.1", "10.0.0.2", 46, 1);
        assert!(wash_dscp(&mut f));
        let p = parse(&f);
        assert_eq!((p.meta.dscp, p.meta.ecn), (0, 1));
        assert!(ipv4_checksum_ok(&f));
        let before = f.clone();
        assert!(!wash_dscp(&mut f), "already zero: nothing written");
        assert_eq!(f, before);

        let mut f6 = frame("2001:db8::1", "2001:db8::2", 8, 2);
        assert!(wash_dscp(&mut f6));
        let p = parse(&f6);
        assert_eq!((p.meta.dscp, p.meta.ecn), (0, 2));
    }

    #[test]
    fn set_ce_at_uses_the_parsed_offset_through_vlan_tags() {
        let mut f = frame("10.0.0.1", "10.0.0.2", 0, 2);
        // Insert an 802.1Q tag after the MAC addresses.
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&f[12..]);
        let p = parse(&tagged);
        assert_eq!(p.l3_offset, 18);
        assert!(set_ce_at(&mut tagged, usize::from(p.l3_offset)));
        assert!(Ipv4Packet::new_checked(&tagged[18..])
            .unwrap()
            .verify_checksum());
        assert!(set_ce(&mut f));
    }

    #[test]
    fn marking_and_washing_rewrite_the_ip_header_inside_pppoe_and_mpls() {
        let inner = frame("10.0.0.1", "10.0.0.2", 46, 2);
        let pppoe = [0x88, 0x64, 0x11, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x21];
        let mpls = [0x88, 0x47, 0x00, 0x01, 0x01, 0x40];
        for outer in [&pppoe[..], &mpls[..]] {
            let mut f = inner[..12].to_vec();
            f.extend_from_slice(outer);
            f.extend_from_slice(&inner[14..]);
            let l3 = usize::from(parse(&f).l3_offset);
            assert_eq!(l3, 12 + outer.len());
            let before = f.clone();
            assert!(set_ce(&mut f));
            assert_eq!(parse(&f).meta.ecn, 3);
            assert!(Ipv4Packet::new_checked(&f[l3..]).unwrap().verify_checksum());
            assert_eq!(f[..l3], before[..l3], "the outer headers are untouched");
            assert!(wash_dscp(&mut f));
            let p = parse(&f);
            assert_eq!((p.meta.dscp, p.meta.ecn), (0, 3));
            assert!(Ipv4Packet::new_checked(&f[l3..]).unwrap().verify_checksum());
        }
    }
}
