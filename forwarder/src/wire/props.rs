//! Property tests for the wire module: the parser and the rewrites never panic on any bytes,
//! built frames parse back to what was built, and ECN marking / DSCP washing keep the IPv4
//! header checksum valid.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use qdisc::L3Kind;

use super::ipv4::Ipv4Packet;
use super::*;

fn ip_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
}

/// `frame` with the bytes at `flips` (positions taken modulo its length) overwritten, then
/// cut to `cut` modulo its length + 1.
fn mangle(mut frame: Vec<u8>, flips: &[(usize, u8)], cut: usize) -> Vec<u8> {
    for &(at, byte) in flips {
        let i = at % frame.len();
        frame[i] = byte;
    }
    frame.truncate(cut % (frame.len() + 1));
    frame
}

/// A valid UDP frame with random fields, optionally behind 0..=2 VLAN tags.
fn udp_frame() -> impl Strategy<Value = (Vec<u8>, IpAddr, IpAddr, u16, u16, u8, u8)> {
    (
        ip_pair(),
        any::<u16>(),
        any::<u16>(),
        0u8..64,
        0u8..4,
        0usize..64,
        0usize..3,
    )
        .prop_map(|((src, dst), sp, dp, dscp, ecn, payload, tags)| {
            let mut buf = vec![0u8; 256];
            let n = build_udp_frame(&mut buf, src, dst, sp, dp, dscp, ecn, payload)
                .expect("256 bytes fit every generated frame");
            buf.truncate(n);
            for t in 0..tags {
                let tpid = if t == 0 { [0x81, 0x00] } else { [0x88, 0xa8] };
                let mut tagged = buf[..12].to_vec();
                tagged.extend_from_slice(&tpid);
                tagged.extend_from_slice(&[0x00, 0x10 + t as u8]);
                tagged.extend_from_slice(&buf[12..]);
                buf = tagged;
            }
            (buf, src, dst, sp, dp, dscp, ecn)
        })
}

/// An IPv6 UDP frame with DSCP and ECN set: a meta unlike most generated ones.
fn frame_for_stale() -> Vec<u8> {
    let mut buf = vec![0u8; 128];
    let n = build_udp_frame(
        &mut buf,
        "2001:db8::1".parse().expect("literal"),
        "2001:db8::2".parse().expect("literal"),
        1,
        2,
        46,
        1,
        4,
    )
    .expect("fits");
    buf.truncate(n);
    buf
}

fn ipv4_checksum_ok(frame: &[u8]) -> bool {
    let p = parse(frame);
    Ipv4Packet::new_checked(&frame[usize::from(p.l3_offset)..])
        .map(|ip| ip.verify_checksum())
        .unwrap_or(false)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let p = parse(&bytes);
        prop_assert!(usize::from(p.l3_offset) <= bytes.len().max(14));
        prop_assert!(usize::from(p.l4_offset) <= bytes.len());
        if p.malformed.is_some() {
            prop_assert_eq!(p.meta.keys.l3, L3Kind::NonIp);
        }
        let _ = tcp_ack_info(&bytes);
        let mut copy = bytes.clone();
        let _ = set_ce(&mut copy);
        let _ = wash_dscp(&mut copy);
        let _ = set_ce_at(&mut copy, usize::from(p.l3_offset));
    }

    #[test]
    fn parse_never_panics_on_mutated_valid_frames(
        (frame, ..) in udp_frame(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let mut f = mangle(frame, &flips, cut);
        let p = parse(&f);
        prop_assert!(usize::from(p.l4_offset) <= f.len());
        let _ = tcp_ack_info(&f);
        let _ = set_ce(&mut f);
        let _ = wash_dscp(&mut f);
    }

    #[test]
    fn parse_into_overwrites_a_stale_meta_with_what_parse_finds(
        (frame, ..) in udp_frame(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
        stale_port in any::<u16>(),
    ) {
        let f = mangle(frame, &flips, cut);
        // A slot still holding the previous burst's packet: every field must be replaced.
        let mut meta = parse(&frame_for_stale()).meta;
        meta.keys.src_port = stale_port;
        meta.l4_hash = Some(7);
        meta.mark = 9;
        let p = parse(&f);
        prop_assert_eq!(parse_into(&f, &mut meta), p.malformed);
        prop_assert_eq!(meta, p.meta);
    }

    #[test]
    fn built_frames_parse_back_to_their_fields((f, src, dst, sp, dp, dscp, ecn) in udp_frame()) {
        let p = parse(&f);
        prop_assert_eq!(p.malformed, None);
        let k = p.meta.keys;
        let (s16, d16) = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (s.to_ipv6_mapped().octets(), d.to_ipv6_mapped().octets()),
            (IpAddr::V6(s), IpAddr::V6(d)) => (s.octets(), d.octets()),
            _ => unreachable!("ip_pair yields one family"),
        };
        prop_assert_eq!(k.src_addr, s16);
        prop_assert_eq!(k.dst_addr, d16);
        prop_assert_eq!((k.protocol, k.src_port, k.dst_port), (17, sp, dp));
        prop_assert_eq!((p.meta.dscp, p.meta.ecn), (dscp, ecn));
    }

    #[test]
    fn set_ce_keeps_ipv4_checksums_valid((mut f, src, _, _, _, dscp, ecn) in udp_frame()) {
        let capable = set_ce(&mut f);
        prop_assert_eq!(capable, ecn != 0);
        let p = parse(&f);
        prop_assert_eq!(p.meta.dscp, dscp);
        prop_assert_eq!(p.meta.ecn, if ecn != 0 { 3 } else { 0 });
        if src.is_ipv4() {
            prop_assert!(ipv4_checksum_ok(&f));
        }
    }

    #[test]
    fn wash_keeps_ecn_and_ipv4_checksums_valid((mut f, src, _, _, _, dscp, ecn) in udp_frame()) {
        let changed = wash_dscp(&mut f);
        prop_assert_eq!(changed, dscp != 0);
        let p = parse(&f);
        prop_assert_eq!((p.meta.dscp, p.meta.ecn), (0, ecn));
        if src.is_ipv4() {
            prop_assert!(ipv4_checksum_ok(&f));
        }
    }
}
