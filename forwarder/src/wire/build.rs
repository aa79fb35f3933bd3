//! Frame builders for the generator, tests, benchmarks and the lab: well-formed Ethernet +
//! IPv4/IPv6 + UDP/TCP frames written into a caller's buffer with correct lengths and
//! checksums. Not on the forwarding path; never panics (a too-small buffer returns `None`).

use std::net::IpAddr;

use super::checksum;
use super::parse::protocol;

/// Source MAC of built frames (locally administered).
pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Destination MAC of built frames (locally administered).
pub const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const TCP_LEN: usize = 20;

/// A TCP segment to build with [`build_tcp_frame`].
#[derive(Debug, Clone, Copy)]
pub struct TcpSpec<'a> {
    /// Source address (IPv4 or IPv6; must match `dst`).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// DSCP (0..=63).
    pub dscp: u8,
    /// ECN bits (0..=3).
    pub ecn: u8,
    /// Flags byte (ACK = 0x10).
    pub flags: u8,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Raw option bytes; padded with EOL to a multiple of 4 (at most 40).
    pub options: &'a [u8],
    /// Payload bytes (zeros).
    pub payload_len: usize,
}

/// Writes the Ethernet and IP headers for an upper-layer segment of `l4_len` bytes and
/// returns the offset of the upper-layer header plus the pseudo-header checksum sum.
fn write_l2_l3(
    buf: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    dscp: u8,
    ecn: u8,
    proto: u8,
    l4_len: usize,
) -> Option<(usize, u32)> {
    let tos = (dscp << 2) | (ecn & 0x03);
    buf.get_mut(0..6)?.copy_from_slice(&DST_MAC);
    buf.get_mut(6..12)?.copy_from_slice(&SRC_MAC);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(IPV4_LEN + l4_len).ok()?;
            buf.get_mut(12..14)?.copy_from_slice(&[0x08, 0x00]);
            let ip = buf.get_mut(ETH_LEN..ETH_LEN + IPV4_LEN)?;
            ip[0] = 0x45;
            ip[1] = tos;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[4..6].copy_from_slice(&[0, 0]); // identification
            ip[6..8].copy_from_slice(&[0x40, 0x00]); // DF
            ip[8] = 64;
            ip[9] = proto;
            ip[10..12].copy_from_slice(&[0, 0]);
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let check = checksum::checksum(ip);
            ip[10..12].copy_from_slice(&check.to_be_bytes());
            let pseudo = u32::from(checksum::sum(0, &s.octets()))
                + u32::from(checksum::sum(0, &d.octets()))
                + u32::from(proto)
                + u32::from(total)
                - IPV4_LEN as u32;
            Some((ETH_LEN + IPV4_LEN, pseudo))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let payload = u16::try_from(l4_len).ok()?;
            buf.get_mut(12..14)?.copy_from_slice(&[0x86, 0xdd]);
            let ip = buf.get_mut(ETH_LEN..ETH_LEN + IPV6_LEN)?;
            ip[0] = 0x60 | (tos >> 4);
            ip[1] = tos << 4;
            ip[2..4].copy_from_slice(&[0, 0]);
            ip[4..6].copy_from_slice(&payload.to_be_bytes());
            ip[6] = proto;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            let pseudo = u32::from(checksum::sum(0, &s.octets()))
                + u32::from(checksum::sum(0, &d.octets()))
                + u32::from(proto)
                + u32::from(payload);
            Some((ETH_LEN + IPV6_LEN, pseudo))
        }
        _ => None,
    }
}

fn finish_l4_checksum(l4: &mut [u8], pseudo: u32, field: usize, zero_means_none: bool) {
    let mut check = !checksum::sum(pseudo, l4);
    if check == 0 && zero_means_none {
        check = 0xffff;
    }
    l4[field..field + 2].copy_from_slice(&check.to_be_bytes());
}

/// Writes an Ethernet + IPv4/IPv6 + UDP frame with `payload_len` zero bytes of payload into
/// `buf`, with valid IP and UDP checksums. Returns the frame length, or `None` when `buf` is
/// too small, the addresses are of different families or the lengths overflow.
///
/// # Examples
/// ```
/// let mut buf = [0u8; 1514];
/// let len = forwarder::wire::build_udp_frame(
///     &mut buf, "2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap(),
///     5000, 5001, 0, 0, 100,
/// ).unwrap();
/// assert_eq!(len, 14 + 40 + 8 + 100);
/// ```
// Mirrors the header fields one to one; TcpSpec is the struct form.
#[allow(clippy::too_many_arguments)]
pub fn build_udp_frame(
    buf: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    dscp: u8,
    ecn: u8,
    payload_len: usize,
) -> Option<usize> {
    let l4_len = UDP_LEN + payload_len;
    let (l4_start, pseudo) = write_l2_l3(buf, src, dst, dscp, ecn, protocol::UDP, l4_len)?;
    let l4 = buf.get_mut(l4_start..l4_start + l4_len)?;
    l4[0..2].copy_from_slice(&src_port.to_be_bytes());
    l4[2..4].copy_from_slice(&dst_port.to_be_bytes());
    l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    l4[6..8].copy_from_slice(&[0, 0]);
    l4[UDP_LEN..].fill(0);
    finish_l4_checksum(l4, pseudo, 6, true);
    Some(l4_start + l4_len)
}

/// Writes an Ethernet + IPv4/IPv6 frame carrying protocol `proto` whose upper-layer header
/// starts with the two ports, as SCTP, DCCP and UDP-Lite headers do, followed by zeros up to
/// `l4_len` bytes (no upper-layer checksum). For a protocol without ports the port bytes are
/// just its first four header bytes. Returns the frame length, or `None` as
/// [`build_udp_frame`] does.
// Mirrors the header fields one to one, as build_udp_frame.
#[allow(clippy::too_many_arguments)]
pub fn build_ports_frame(
    buf: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    src_port: u16,
    dst_port: u16,
    dscp: u8,
    ecn: u8,
    l4_len: usize,
) -> Option<usize> {
    let l4_len = l4_len.max(4);
    let (l4_start, _) = write_l2_l3(buf, src, dst, dscp, ecn, proto, l4_len)?;
    let l4 = buf.get_mut(l4_start..l4_start + l4_len)?;
    l4.fill(0);
    l4[0..2].copy_from_slice(&src_port.to_be_bytes());
    l4[2..4].copy_from_slice(&dst_port.to_be_bytes());
    Some(l4_start + l4_len)
}

/// Inserts a VLAN tag (`tpid`, `tci`) after the MAC addresses of the `len`-byte frame at the
/// start of `buf`, as a tagging switch port would; returns the new length, or `None` when
/// `buf` has no room for four more bytes or the frame is shorter than its MAC addresses.
pub fn push_vlan_tag(buf: &mut [u8], len: usize, tpid: u16, tci: u16) -> Option<usize> {
    const MACS: usize = 12;
    if len < MACS || len + 4 > buf.len() {
        return None;
    }
    buf.copy_within(MACS..len, MACS + 4);
    buf[MACS..MACS + 2].copy_from_slice(&tpid.to_be_bytes());
    buf[MACS + 2..MACS + 4].copy_from_slice(&tci.to_be_bytes());
    Some(len + 4)
}

/// Opens a gap of `n` bytes after the 14-byte Ethernet header of the untagged `len`-byte IP
/// frame at the start of `buf` and sets its EtherType to `ethertype`; returns the frame's
/// old EtherType and new length, or `None` when there is no room or the frame is not an
/// untagged IPv4 or IPv6 one.
fn open_after_ethernet(
    buf: &mut [u8],
    len: usize,
    n: usize,
    ethertype: u16,
) -> Option<(u16, usize)> {
    if len < ETH_LEN || len + n > buf.len() {
        return None;
    }
    let inner = u16::from_be_bytes([buf[12], buf[13]]);
    if inner != 0x0800 && inner != 0x86dd {
        return None;
    }
    buf.copy_within(ETH_LEN..len, ETH_LEN + n);
    buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
    Some((inner, len + n))
}

/// Wraps the IP packet of the untagged `len`-byte frame at the start of `buf` in a PPPoE
/// session header (RFC 2516: version and type 1, code 0, `session`, the PPP protocol of
/// IPv4 or IPv6), as a BNG sees a subscriber's traffic; push VLAN tags after this. Returns
/// the new length, or `None` when `buf` has no room for 8 more bytes or the frame is not an
/// untagged IP one.
pub fn push_pppoe(buf: &mut [u8], len: usize, session: u16) -> Option<usize> {
    const HEADER: usize = 8;
    let (inner, new_len) = open_after_ethernet(buf, len, HEADER, 0x8864)?;
    let ppp: u16 = if inner == 0x0800 { 0x0021 } else { 0x0057 };
    // The payload length counts the PPP protocol field and the IP packet.
    let payload = u16::try_from(len - ETH_LEN + 2).ok()?;
    let h = &mut buf[ETH_LEN..ETH_LEN + HEADER];
    h[0] = 0x11;
    h[1] = 0x00;
    h[2..4].copy_from_slice(&session.to_be_bytes());
    h[4..6].copy_from_slice(&payload.to_be_bytes());
    h[6..8].copy_from_slice(&ppp.to_be_bytes());
    Some(new_len)
}

/// Puts the IP packet of the untagged `len`-byte frame at the start of `buf` under an MPLS
/// label stack (`labels` outermost first, each below 2^20; traffic class 0, TTL 64, the last
/// one bottom of stack), as an MPLS access network carries it; push VLAN tags after this.
/// Returns the new length, or `None` when `labels` is empty or holds a label of 2^20 or
/// more, `buf` has no room, or the frame is not an untagged IP one.
pub fn push_mpls(buf: &mut [u8], len: usize, labels: &[u32]) -> Option<usize> {
    if labels.is_empty() || labels.iter().any(|&l| l >= 1 << 20) {
        return None;
    }
    let (_, new_len) = open_after_ethernet(buf, len, 4 * labels.len(), 0x8847)?;
    for (i, &label) in labels.iter().enumerate() {
        let bottom = u32::from(i + 1 == labels.len());
        let entry = label << 12 | bottom << 8 | 64;
        buf[ETH_LEN + 4 * i..ETH_LEN + 4 * i + 4].copy_from_slice(&entry.to_be_bytes());
    }
    Some(new_len)
}

/// Writes an Ethernet + IPv4/IPv6 + TCP frame described by `spec` into `buf`, with valid
/// checksums. Returns the frame length, or `None` when `buf` is too small, the addresses are
/// of different families or the options exceed 40 bytes.
pub fn build_tcp_frame(buf: &mut [u8], spec: &TcpSpec<'_>) -> Option<usize> {
    if spec.options.len() > 40 {
        return None;
    }
    let opt_len = spec.options.len().div_ceil(4) * 4;
    let header_len = TCP_LEN + opt_len;
    let l4_len = header_len + spec.payload_len;
    let (l4_start, pseudo) = write_l2_l3(
        buf,
        spec.src,
        spec.dst,
        spec.dscp,
        spec.ecn,
        protocol::TCP,
        l4_len,
    )?;
    let l4 = buf.get_mut(l4_start..l4_start + l4_len)?;
    l4[0..2].copy_from_slice(&spec.src_port.to_be_bytes());
    l4[2..4].copy_from_slice(&spec.dst_port.to_be_bytes());
    l4[4..8].copy_from_slice(&spec.seq.to_be_bytes());
    l4[8..12].copy_from_slice(&spec.ack.to_be_bytes());
    l4[12] = ((header_len / 4) as u8) << 4;
    l4[13] = spec.flags;
    l4[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    l4[16..20].fill(0);
    l4[TCP_LEN..].fill(0);
    l4[TCP_LEN..TCP_LEN + spec.options.len()].copy_from_slice(spec.options);
    finish_l4_checksum(l4, pseudo, 16, false);
    Some(l4_start + l4_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l4_checksum_ok(frame: &[u8], l3: usize, v6: bool) -> bool {
        let (pseudo, l4) = if v6 {
            let ip = &frame[l3..];
            let plen = u16::from_be_bytes([ip[4], ip[5]]);
            let p = u32::from(checksum::sum(0, &ip[8..40])) + u32::from(ip[6]) + u32::from(plen);
            (p, &ip[40..40 + usize::from(plen)])
        } else {
            let ip = &frame[l3..];
            let total = u16::from_be_bytes([ip[2], ip[3]]);
            let p =
                u32::from(checksum::sum(0, &ip[12..20])) + u32::from(ip[9]) + u32::from(total - 20);
            (p, &ip[20..usize::from(total)])
        };
        checksum::sum(pseudo, l4) == 0xffff
    }

    #[test]
    fn udp_frames_carry_valid_checksums_in_both_families() {
        let mut buf = [0u8; 256];
        let n = build_udp_frame(
            &mut buf,
            "10.1.2.3".parse().unwrap(),
            "10.4.5.6".parse().unwrap(),
            7,
            9,
            10,
            1,
            33,
        )
        .unwrap();
        assert_eq!(n, 14 + 20 + 8 + 33);
        assert!(checksum::sum(0, &buf[14..34]) == 0xffff);
        assert!(l4_checksum_ok(&buf[..n], 14, false));

        let n = build_udp_frame(
            &mut buf,
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            7,
            9,
            10,
            1,
            33,
        )
        .unwrap();
        assert_eq!(n, 14 + 40 + 8 + 33);
        assert!(l4_checksum_ok(&buf[..n], 14, true));
    }

    #[test]
    fn small_buffers_and_mixed_families_are_refused() {
        let mut buf = [0u8; 40];
        let v4 = "10.0.0.1".parse().unwrap();
        let v6 = "2001:db8::1".parse().unwrap();
        assert_eq!(build_udp_frame(&mut buf, v4, v4, 1, 2, 0, 0, 100), None);
        let mut big = [0u8; 200];
        assert_eq!(build_udp_frame(&mut big, v4, v6, 1, 2, 0, 0, 10), None);
    }

    #[test]
    fn ports_frames_parse_with_their_ports_and_tags_go_after_the_macs() {
        let mut buf = [0u8; 256];
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let n = build_ports_frame(&mut buf, a, b, protocol::SCTP, 1, 80, 0, 0, 16).unwrap();
        assert_eq!(n, 14 + 20 + 16);
        assert!(checksum::sum(0, &buf[14..34]) == 0xffff);
        let m = crate::wire::parse(&buf[..n]).meta;
        assert_eq!(
            (m.keys.protocol, m.keys.src_port, m.keys.dst_port),
            (132, 1, 80)
        );
        let n = push_vlan_tag(&mut buf, n, 0x8100, 100).unwrap();
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0, 100, 0x08, 0x00]);
        let m = crate::wire::parse(&buf[..n]).meta;
        assert_eq!((m.l2_len, m.keys.dst_port), (18, 80));
        assert_eq!(push_vlan_tag(&mut buf[..n + 3], n, 0x8100, 1), None);
    }

    #[test]
    fn tcp_frames_have_padded_options_and_valid_checksums() {
        let mut buf = [0u8; 256];
        let spec = TcpSpec {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            src_port: 80,
            dst_port: 40000,
            dscp: 0,
            ecn: 0,
            flags: 0x10,
            seq: 1,
            ack: 1000,
            options: &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            payload_len: 0,
        };
        let n = build_tcp_frame(&mut buf, &spec).unwrap();
        assert_eq!(n, 14 + 20 + 32);
        assert!(l4_checksum_ok(&buf[..n], 14, false));
        let info = crate::wire::tcp_ack_info(&buf[..n]).unwrap();
        assert_eq!(info.ack_seq, 1000);
        assert_eq!(info.timestamp, Some((1, 2)));
    }
}
