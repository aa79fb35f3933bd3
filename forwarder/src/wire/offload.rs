//! Finishing what a sender left to its NIC's checksum offload.
//!
//! A Linux host with `tx-checksumming` on (every veth by default) hands down TCP and UDP
//! packets whose checksum field holds only the pseudo-header sum (`CHECKSUM_PARTIAL`): the
//! device that transmits them is meant to finish it. A packet socket receives such a frame as
//! it is, so a userspace forwarder that sends it on unchanged delivers a frame with a bad
//! checksum, which the receiving host drops without a trace. This module completes the sum in
//! place; it does not validate anything else and never allocates.

use super::ethernet;
use super::ipv4::Ipv4Packet;
use super::ipv6::{self, Ipv6Packet};

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
/// Offsets of the checksum field in the TCP and UDP headers.
const TCP_CHECK: usize = 16;
const UDP_CHECK: usize = 6;

/// Completes the TCP or UDP checksum of `frame` (Ethernet, any VLAN tags, IPv4 or IPv6 with
/// extension headers), whose checksum field holds the pseudo-header sum as a sender that left
/// the rest to its NIC wrote it. Returns false, changing nothing, when the frame is not an
/// unfragmented TCP or UDP packet whose headers fit, which a `CHECKSUM_PARTIAL` frame always
/// is (the kernel offloads nothing else to a veth).
pub fn complete_partial_checksum(frame: &mut [u8]) -> bool {
    let Ok(l2) = ethernet::walk(frame) else {
        return false;
    };
    let l3 = l2.l3_offset;
    let Some(ip) = frame.get(l3..) else {
        return false;
    };
    let (l4, end, protocol) = match l2.ethertype {
        ETHERTYPE_IPV4 => {
            let Ok(p) = Ipv4Packet::new_checked(ip) else {
                return false;
            };
            if p.is_fragment() {
                return false;
            }
            (
                l3 + p.header_len(),
                l3 + usize::from(p.total_len()),
                p.protocol(),
            )
        }
        ETHERTYPE_IPV6 => {
            let Ok(p) = Ipv6Packet::new_checked(ip) else {
                return false;
            };
            let Ok(upper) = ipv6::walk_extensions(p.next_header(), p.payload()) else {
                return false;
            };
            if upper.fragment {
                return false;
            }
            let fixed = l3 + ipv6::HEADER_LEN;
            (
                fixed + upper.offset,
                fixed + usize::from(p.payload_len()),
                upper.protocol,
            )
        }
        _ => return false,
    };
    let at = match protocol {
        IPPROTO_TCP => TCP_CHECK,
        IPPROTO_UDP => UDP_CHECK,
        _ => return false,
    };
    let Some(segment) = frame.get_mut(l4..end) else {
        return false;
    };
    if segment.len() < at + 2 {
        return false;
    }
    // The field holds the pseudo-header sum, so the sum over the segment as it is (field
    // included) is the full sum; the checksum is its complement (RFC 768: a UDP checksum of
    // zero is sent as all ones).
    let mut check = !super::checksum::sum(0, segment);
    if protocol == IPPROTO_UDP && check == 0 {
        check = 0xffff;
    }
    segment[at..at + 2].copy_from_slice(&check.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{build_tcp_frame, build_udp_frame, checksum, TcpSpec};
    use std::net::IpAddr;

    /// Replaces the L4 checksum of a fully checksummed frame with what a sender with
    /// checksum offload leaves there: the pseudo-header sum, not inverted.
    fn make_partial(frame: &mut [u8], l4: usize, v6: bool, protocol: u8) {
        let at = l4
            + if protocol == IPPROTO_TCP {
                TCP_CHECK
            } else {
                UDP_CHECK
            };
        let l4_len = (frame.len() - l4) as u32;
        let addrs = if v6 { &frame[22..54] } else { &frame[26..34] };
        let pseudo = checksum::sum(l4_len + u32::from(protocol), addrs);
        frame[at..at + 2].copy_from_slice(&pseudo.to_be_bytes());
    }

    fn udp(src: &str, dst: &str) -> Vec<u8> {
        let mut buf = [0u8; 256];
        let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let len = build_udp_frame(&mut buf, s, d, 1234, 80, 0, 0, 37).unwrap();
        buf[..len].to_vec()
    }

    #[test]
    fn partial_udp_and_tcp_checksums_are_completed_to_the_full_ones() {
        let v4 = udp("10.0.0.1", "10.0.0.2");
        let v6 = udp("2001:db8::1", "2001:db8::2");
        let mut buf = [0u8; 256];
        let len = build_tcp_frame(
            &mut buf,
            &TcpSpec {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                src_port: 40000,
                dst_port: 5201,
                dscp: 0,
                ecn: 0,
                flags: 0x18,
                seq: 7,
                ack: 9,
                options: &[],
                payload_len: 101,
            },
        )
        .unwrap();
        let tcp = buf[..len].to_vec();
        for (full, l4, is_v6, protocol) in [
            (v4, 34, false, IPPROTO_UDP),
            (v6, 54, true, IPPROTO_UDP),
            (tcp, 34, false, IPPROTO_TCP),
        ] {
            let mut frame = full.clone();
            make_partial(&mut frame, l4, is_v6, protocol);
            assert_ne!(frame, full);
            assert!(complete_partial_checksum(&mut frame));
            assert_eq!(frame, full);
        }
    }

    #[test]
    fn the_checksum_is_found_behind_ipv6_extension_headers_and_vlan_tags() {
        let plain = udp("2001:db8::1", "2001:db8::2");
        // A hop-by-hop header (8 bytes, PadN) between the fixed header and UDP, under a tag.
        let mut full = Vec::new();
        full.extend_from_slice(&plain[..12]);
        full.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        full.extend_from_slice(&plain[12..54]);
        full.extend_from_slice(&[IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0]);
        full.extend_from_slice(&plain[54..]);
        full[18 + 6] = 0; // next header: hop-by-hop
        let payload_len = u16::from_be_bytes([full[22], full[23]]) + 8;
        full[22..24].copy_from_slice(&payload_len.to_be_bytes());
        let l4 = 18 + 40 + 8;
        let mut frame = full.clone();
        // The pseudo-header's addresses sit 4 bytes further in than in an untagged frame.
        let pseudo = checksum::sum(
            (frame.len() - l4) as u32 + u32::from(IPPROTO_UDP),
            &frame[26..58],
        );
        frame[l4 + 6..l4 + 8].copy_from_slice(&pseudo.to_be_bytes());
        assert!(complete_partial_checksum(&mut frame));
        assert_eq!(frame, full);
    }

    #[test]
    fn frames_that_are_not_tcp_or_udp_are_left_alone() {
        let mut arp = [0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp;
        assert!(!complete_partial_checksum(&mut arp));
        assert_eq!(arp, before);
        let mut runt = [0u8; 10];
        assert!(!complete_partial_checksum(&mut runt));
    }
}
