//! The one-pass header parser the data path calls per packet: Ethernet → VLAN tags → PPPoE
//! session or MPLS labels → IPv4/IPv6 (options, extension headers, fragments) → TCP/UDP/ICMP ports, producing the
//! [`PacketMeta`] the qdisc classifies on. It never fails and never panics: a frame it cannot
//! read becomes a non-IP packet (flow 0, default tin) with a [`Malformed`] reason, and is still
//! forwarded.

use qdisc::{FlowKeys, L3Kind, PacketMeta, TcpAckInfo};

use super::ethernet::{self, ethertype, Encapsulation};
use super::ipv4::Ipv4Packet;
use super::ipv6::{self, Ipv6Packet};
use super::tcp::TcpSegment;

/// DSCP reported for ARP, as the kernel's CAKE does (CS7).
pub const ARP_DSCP: u8 = 56;

/// IP protocol numbers the parser reads ports from or checks.
pub mod protocol {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// DCCP.
    pub const DCCP: u8 = 33;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// UDP-Lite.
    pub const UDPLITE: u8 = 136;
}

/// Why a frame could not be parsed. Cheap to copy and count: the data path keeps one counter
/// per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// Shorter than an Ethernet header.
    TruncatedEthernet,
    /// A VLAN tag runs past the end of the frame.
    TruncatedVlan,
    /// More stacked VLAN tags than [`ethernet::MAX_VLAN_TAGS`].
    TooManyVlanTags,
    /// The IPv4 header or its declared total length runs past the end of the frame.
    TruncatedIpv4,
    /// The IP version nibble does not match the EtherType.
    BadIpVersion,
    /// IPv4 IHL below 5, or a total length shorter than the header.
    BadIpv4HeaderLength,
    /// The IPv6 header or its declared payload runs past the end of the frame.
    TruncatedIpv6,
    /// An IPv6 extension header runs past the end of the payload.
    TruncatedIpv6ExtensionHeader,
    /// More IPv6 extension headers than [`ipv6::MAX_EXTENSION_HEADERS`].
    TooManyIpv6ExtensionHeaders,
    /// The transport header is cut off.
    TruncatedL4,
    /// TCP data offset below 5 words or past the end of the segment.
    BadTcpDataOffset,
    /// A PPPoE session header or an MPLS label stack runs past the end of the frame.
    TruncatedEncapsulation,
    /// More MPLS labels than [`ethernet::MAX_MPLS_LABELS`].
    TooManyMplsLabels,
}

impl Malformed {
    /// All reasons, in display order (for per-reason counters).
    pub const ALL: [Malformed; 13] = [
        Malformed::TruncatedEthernet,
        Malformed::TruncatedVlan,
        Malformed::TooManyVlanTags,
        Malformed::TruncatedIpv4,
        Malformed::BadIpVersion,
        Malformed::BadIpv4HeaderLength,
        Malformed::TruncatedIpv6,
        Malformed::TruncatedIpv6ExtensionHeader,
        Malformed::TooManyIpv6ExtensionHeaders,
        Malformed::TruncatedL4,
        Malformed::BadTcpDataOffset,
        Malformed::TruncatedEncapsulation,
        Malformed::TooManyMplsLabels,
    ];

    /// Short snake_case name for stats output and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Malformed::TruncatedEthernet => "truncated_ethernet",
            Malformed::TruncatedVlan => "truncated_vlan",
            Malformed::TooManyVlanTags => "too_many_vlan_tags",
            Malformed::TruncatedIpv4 => "truncated_ipv4",
            Malformed::BadIpVersion => "bad_ip_version",
            Malformed::BadIpv4HeaderLength => "bad_ipv4_header_length",
            Malformed::TruncatedIpv6 => "truncated_ipv6",
            Malformed::TruncatedIpv6ExtensionHeader => "truncated_ipv6_extension_header",
            Malformed::TooManyIpv6ExtensionHeaders => "too_many_ipv6_extension_headers",
            Malformed::TruncatedL4 => "truncated_l4",
            Malformed::BadTcpDataOffset => "bad_tcp_data_offset",
            Malformed::TruncatedEncapsulation => "truncated_encapsulation",
            Malformed::TooManyMplsLabels => "too_many_mpls_labels",
        }
    }

    /// Position in [`Malformed::ALL`], for indexing a counter array.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl core::fmt::Display for Malformed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// What [`parse`] found in one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The header facts for the qdisc.
    pub meta: PacketMeta,
    /// Offset of the network header (after all VLAN tags, and the PPPoE header or MPLS labels
    /// when an IP packet was found inside them); 0 when the Ethernet header itself
    /// was cut off.
    pub l3_offset: u16,
    /// Offset of the transport header; 0 when none was located (non-IP, fragments, malformed).
    pub l4_offset: u16,
    /// Why the frame was treated as non-IP despite its EtherType, if it was.
    pub malformed: Option<Malformed>,
    /// VLAN tags walked before the network header; 0 when the L2 walk itself failed.
    pub vlan_tags: u8,
    /// The PPPoE session or MPLS label stack walked through to reach the IP header.
    /// `l2_len` alone cannot tell these apart from VLAN tags (a PPPoE header is as long as
    /// two tags), so `explain` reports this.
    pub encapsulation: Encapsulation,
}

/// What the L2 walk went through, as [`Parsed`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Walked {
    vlan_tags: u8,
    encapsulation: Encapsulation,
}

/// What [`parse_to`] returns beside the meta: the network and transport header offsets,
/// the malformed reason and the L2 walk.
type Found = (u16, u16, Option<Malformed>, Walked);

impl Parsed {
    fn non_ip(l3_offset: usize, dscp: u8, malformed: Option<Malformed>) -> Parsed {
        Parsed {
            meta: PacketMeta {
                dscp,
                l2_len: l3_offset as u16,
                ..PacketMeta::default()
            },
            l3_offset: l3_offset as u16,
            l4_offset: 0,
            malformed,
            vlan_tags: 0,
            encapsulation: Encapsulation::None,
        }
    }
}

/// The transport-layer facts found after the IP header.
struct Transport {
    src_port: u16,
    dst_port: u16,
}

/// What the parser needs to know about an IP protocol: the shortest transport header it
/// accepts, and whether that header starts with source and destination ports.
#[derive(Clone, Copy)]
struct L4Rule {
    min_len: u8,
    ports: bool,
}

/// [`L4Rule`] by protocol number. A table rather than a `match`: the match compiled to a jump
/// table, and its indirect branch was the costliest instruction of the per-frame parse
/// (perf annotate of dpdk_fwd); a table load and two predictable branches are cheaper.
static L4_RULES: [L4Rule; 256] = {
    let mut t = [L4Rule {
        min_len: 0,
        ports: false,
    }; 256];
    t[protocol::TCP as usize] = L4Rule {
        min_len: super::tcp::MIN_HEADER_LEN as u8,
        ports: true,
    };
    t[protocol::UDP as usize] = L4Rule {
        min_len: 8,
        ports: true,
    };
    t[protocol::UDPLITE as usize] = L4Rule {
        min_len: 8,
        ports: true,
    };
    t[protocol::SCTP as usize] = L4Rule {
        min_len: 4,
        ports: true,
    };
    t[protocol::DCCP as usize] = L4Rule {
        min_len: 4,
        ports: true,
    };
    t[protocol::ICMP as usize] = L4Rule {
        min_len: 4,
        ports: false,
    };
    t[protocol::ICMPV6 as usize] = L4Rule {
        min_len: 4,
        ports: false,
    };
    t
};

/// Reads ports from the upper-layer header at the start of `l4`.
#[inline(always)]
fn transport(protocol: u8, l4: &[u8]) -> Result<Transport, Malformed> {
    let rule = L4_RULES[usize::from(protocol)];
    if l4.len() < usize::from(rule.min_len) {
        return Err(Malformed::TruncatedL4);
    }
    if protocol == protocol::TCP {
        // Also checks the data offset.
        TcpSegment::new_checked(l4)?;
    }
    match l4 {
        [a, b, c, d, ..] if rule.ports => Ok(Transport {
            src_port: u16::from_be_bytes([*a, *b]),
            dst_port: u16::from_be_bytes([*c, *d]),
        }),
        _ => Ok(Transport {
            src_port: 0,
            dst_port: 0,
        }),
    }
}

/// `::ffff:a.b.c.d`, built in a register: byte stores into an array read back as one 16-byte
/// load would defeat store-to-load forwarding.
#[inline(always)]
fn mapped_v4(a: [u8; 4]) -> [u8; 16] {
    (0xffff_u128 << 32 | u128::from(u32::from_be_bytes(a))).to_be_bytes()
}

/// Where the IP and transport headers are, shared by [`parse`] and [`tcp_ack_info`].
struct Located {
    keys: FlowKeys,
    dscp: u8,
    ecn: u8,
    l3_offset: usize,
    /// Offset of the transport header, when one was read.
    l4_offset: Option<usize>,
    /// Transport header plus payload length, from the IP length fields.
    l4_len: usize,
}

// Inlined into `parse` so `Located` lives in registers: returned through memory it was
// written field by field and read back with wider loads, a store-forwarding stall per frame
// (perf annotate of dpdk_fwd's parse row).
#[inline(always)]
fn locate_ipv4(frame: &[u8], l3: usize) -> Result<Located, Malformed> {
    let ip = Ipv4Packet::new_checked(frame.get(l3..).unwrap_or_default())?;
    let mut keys = FlowKeys {
        l3: L3Kind::Ipv4,
        src_addr: mapped_v4(ip.src_addr()),
        dst_addr: mapped_v4(ip.dst_addr()),
        protocol: ip.protocol(),
        ..FlowKeys::default()
    };
    let mut l4_offset = None;
    // Like the kernel's dissector without FLOW_DISSECTOR_F_PARSE_1ST_FRAG, every fragment
    // (the first too) goes without ports, so all pieces of a datagram share one flow.
    if !ip.is_fragment() {
        let t = transport(ip.protocol(), ip.payload())?;
        keys.src_port = t.src_port;
        keys.dst_port = t.dst_port;
        l4_offset = Some(l3 + ip.header_len());
    }
    Ok(Located {
        keys,
        dscp: ip.dscp(),
        ecn: ip.ecn(),
        l3_offset: l3,
        l4_offset,
        l4_len: ip.payload().len(),
    })
}

#[inline(always)]
fn locate_ipv6(frame: &[u8], l3: usize) -> Result<Located, Malformed> {
    let ip = Ipv6Packet::new_checked(frame.get(l3..).unwrap_or_default())?;
    let payload = ip.payload();
    let up = ipv6::walk_extensions(ip.next_header(), payload)?;
    let mut keys = FlowKeys {
        l3: L3Kind::Ipv6,
        src_addr: ip.src_addr(),
        dst_addr: ip.dst_addr(),
        protocol: up.protocol,
        flow_label: ip.flow_label(),
        ..FlowKeys::default()
    };
    let mut l4_offset = None;
    if !up.fragment {
        let l4 = payload.get(up.offset..).unwrap_or_default();
        let t = transport(up.protocol, l4)?;
        keys.src_port = t.src_port;
        keys.dst_port = t.dst_port;
        l4_offset = Some(l3 + ipv6::HEADER_LEN + up.offset);
    }
    Ok(Located {
        keys,
        dscp: ip.dscp(),
        ecn: ip.ecn(),
        l3_offset: l3,
        l4_offset,
        l4_len: payload.len().saturating_sub(up.offset),
    })
}

/// Parses one Ethernet frame into the header facts the qdisc needs.
///
/// Never fails: ARP is reported as non-IP with DSCP 56; other EtherTypes as non-IP with
/// DSCP 0; a frame whose headers are cut off or inconsistent as non-IP with
/// [`Parsed::malformed`] set. Reads at most the L2, IP and the first bytes of the transport
/// header; does not allocate. The data path uses [`parse_into`], which writes the same meta
/// in place.
///
/// # Examples
/// ```
/// use forwarder::wire;
/// let mut buf = [0u8; 128];
/// let len = wire::build_udp_frame(
///     &mut buf, "10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(),
///     1234, 80, 46, 2, 20,
/// ).unwrap();
/// let parsed = wire::parse(&buf[..len]);
/// assert_eq!(parsed.meta.dscp, 46);
/// assert_eq!(parsed.meta.keys.dst_port, 80);
/// assert!(parsed.malformed.is_none());
/// ```
pub fn parse(frame: &[u8]) -> Parsed {
    let mut meta = PacketMeta::default();
    let (l3_offset, l4_offset, malformed, walked) = parse_to(frame, &mut meta);
    Parsed {
        meta,
        l3_offset,
        l4_offset,
        malformed,
        vlan_tags: walked.vlan_tags,
        encapsulation: walked.encapsulation,
    }
}

/// [`parse`] for the data path: overwrites all of `meta` with [`Parsed::meta`] and returns
/// [`Parsed::malformed`].
///
/// Why a second entry point: a `Parsed` returned by value is written field by field and then
/// copied on with wide loads (into the burst's meta array), and each such load waits for the
/// narrow stores before it (a failed store-to-load forward, the bulk of what parsing cost per
/// frame in `dpdk_fwd`). Writing the fields straight into the slot the qdisc reads, a burst
/// at a time, leaves nothing to forward.
///
/// # Examples
/// ```
/// use forwarder::wire;
/// let mut buf = [0u8; 128];
/// let len = wire::build_udp_frame(
///     &mut buf, "10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(),
///     1234, 80, 46, 2, 20,
/// ).unwrap();
/// let mut meta = qdisc::PacketMeta::default();
/// assert_eq!(wire::parse_into(&buf[..len], &mut meta), None);
/// assert_eq!(meta, wire::parse(&buf[..len]).meta);
/// ```
#[inline]
pub fn parse_into(frame: &[u8], meta: &mut PacketMeta) -> Option<Malformed> {
    parse_to(frame, meta).2
}

/// The parser behind [`parse`] and [`parse_into`]: writes the meta to `out` and returns the
/// network and transport header offsets, the malformed reason and what the L2 walk went
/// through ([`parse_into`] drops the last, and the compiler with it).
#[inline(always)]
fn parse_to(frame: &[u8], out: &mut PacketMeta) -> Found {
    if fast_ipv4(frame, out) {
        return (
            ethernet::HEADER_LEN as u16,
            (ethernet::HEADER_LEN + super::ipv4::MIN_HEADER_LEN) as u16,
            None,
            Walked::default(),
        );
    }
    parse_general(frame, out)
}

/// The common case in one pass with few branches: an untagged, unfragmented IPv4 packet
/// without options carrying a well-formed UDP or TCP header. Writes exactly what
/// [`parse_general`] would and returns true; returns false, writing nothing, for every other
/// frame (the general parser then decides, malformed ones included).
///
/// Why: the general walk (VLAN loop, EtherType dispatch, checked views, protocol table)
/// costs about twice the instructions, which showed as much of the per-frame cost of the
/// forwarding path in dpdk_fwd.
#[inline(always)]
fn fast_ipv4(frame: &[u8], out: &mut PacketMeta) -> bool {
    const L3: usize = ethernet::HEADER_LEN;
    const L4: usize = L3 + super::ipv4::MIN_HEADER_LEN;
    // Ethernet, IPv4 and the four port bytes; a UDP frame has at least 42.
    let Some(h) = frame.first_chunk::<{ L4 + 4 }>() else {
        return false;
    };
    // EtherType IPv4, version 4 with IHL 5 (no options).
    if h[12..14] != [0x08, 0x00] || h[L3] != 0x45 {
        return false;
    }
    let total_len = usize::from(u16::from_be_bytes([h[L3 + 2], h[L3 + 3]]));
    let flags_frag = u16::from_be_bytes([h[L3 + 6], h[L3 + 7]]);
    // Any fragment (MF or an offset) goes to the general parser, as do cut datagrams.
    if total_len < L4 - L3 || total_len > frame.len() - L3 || flags_frag & 0x3fff != 0 {
        return false;
    }
    let l4_len = total_len - (L4 - L3);
    let protocol = h[L3 + 9];
    let well_formed = match protocol {
        protocol::UDP => l4_len >= 8,
        protocol::TCP => {
            // TcpSegment::new_checked: 20 bytes and a data offset between 5 words and the
            // segment's end.
            let data_offset = frame.get(L4 + 12).map_or(0, |b| usize::from(b >> 4) * 4);
            l4_len >= super::tcp::MIN_HEADER_LEN
                && (super::tcp::MIN_HEADER_LEN..=l4_len).contains(&data_offset)
        }
        _ => false,
    };
    if !well_formed {
        return false;
    }
    let tos = h[L3 + 1];
    *out = PacketMeta {
        keys: FlowKeys {
            l3: L3Kind::Ipv4,
            src_addr: mapped_v4([h[L3 + 12], h[L3 + 13], h[L3 + 14], h[L3 + 15]]),
            dst_addr: mapped_v4([h[L3 + 16], h[L3 + 17], h[L3 + 18], h[L3 + 19]]),
            protocol,
            src_port: u16::from_be_bytes([h[L4], h[L4 + 1]]),
            dst_port: u16::from_be_bytes([h[L4 + 2], h[L4 + 3]]),
            flow_label: 0,
        },
        dscp: tos >> 2,
        ecn: tos & 0x03,
        l2_len: L3 as u16,
        ..PacketMeta::default()
    };
    true
}

/// Every frame [`fast_ipv4`] leaves: the full walk.
#[inline(always)]
fn parse_general(frame: &[u8], out: &mut PacketMeta) -> Found {
    let l2 = match ethernet::walk(frame) {
        Ok(l2) => l2,
        Err(m) => {
            *out = Parsed::non_ip(0, 0, Some(m)).meta;
            return (0, 0, Some(m), Walked::default());
        }
    };
    let walked = Walked {
        vlan_tags: l2.vlan_tags,
        encapsulation: l2.encapsulation,
    };
    let non_ip = |out: &mut PacketMeta, l3_offset: usize, dscp: u8, malformed| {
        *out = Parsed::non_ip(l3_offset, dscp, malformed).meta;
        (l3_offset as u16, 0, malformed, walked)
    };
    let located = match l2.ethertype {
        ethertype::IPV4 => locate_ipv4(frame, l2.l3_offset),
        ethertype::IPV6 => locate_ipv6(frame, l2.l3_offset),
        ethertype::ARP => return non_ip(out, l2.l3_offset, ARP_DSCP, None),
        _ => return non_ip(out, l2.l3_offset, 0, None),
    };
    match located {
        Ok(loc) => {
            *out = PacketMeta {
                keys: loc.keys,
                dscp: loc.dscp,
                ecn: loc.ecn,
                l2_len: loc.l3_offset as u16,
                ..PacketMeta::default()
            };
            (
                loc.l3_offset as u16,
                loc.l4_offset.unwrap_or(0) as u16,
                None,
                walked,
            )
        }
        Err(m) => non_ip(out, l2.l3_offset, 0, Some(m)),
    }
}

/// Returns the ACK filter's view of a TCP segment in `frame` (IPv4 or IPv6, any VLAN tags),
/// or `None` when the frame is not an unfragmented, well-formed TCP segment.
pub fn tcp_ack_info(frame: &[u8]) -> Option<TcpAckInfo> {
    let l2 = ethernet::walk(frame).ok()?;
    let loc = match l2.ethertype {
        ethertype::IPV4 => locate_ipv4(frame, l2.l3_offset).ok()?,
        ethertype::IPV6 => locate_ipv6(frame, l2.l3_offset).ok()?,
        _ => return None,
    };
    if loc.keys.protocol != protocol::TCP {
        return None;
    }
    let start = loc.l4_offset?;
    let l4 = frame.get(start..start + loc.l4_len)?;
    let tcp = TcpSegment::new_checked(l4).ok()?;
    Some(tcp.ack_info(loc.l4_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MACS: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

    fn frame(ethertype: [u8; 2], rest: &[u8]) -> Vec<u8> {
        let mut f = MACS.to_vec();
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(rest);
        f
    }

    // IPv4 with a 4-byte option (IHL 6), TCP 40000 -> 443, DSCP 10 (AF11), ECT(1), then a
    // 20-byte TCP header. Checksums are not checked by the parser.
    static IPV4_OPTIONS_TCP: [u8; 44] = [
        0x46, 0x29, 0x00, 0x2c, 0, 1, 0x40, 0, 64, 6, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7, //
        0x01, 0x01, 0x01, 0x00, // NOP NOP NOP EOL
        0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0,
    ];

    #[test]
    fn ipv4_with_options_reaches_the_tcp_ports() {
        let f = frame([0x08, 0x00], &IPV4_OPTIONS_TCP);
        let p = parse(&f);
        assert_eq!(p.malformed, None);
        assert_eq!(p.l3_offset, 14);
        assert_eq!(p.l4_offset, 14 + 24);
        let k = p.meta.keys;
        assert_eq!(k.l3, L3Kind::Ipv4);
        assert_eq!(&k.src_addr[10..], &[0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(&k.dst_addr[12..], &[198, 51, 100, 7]);
        assert_eq!((k.protocol, k.src_port, k.dst_port), (6, 40000, 443));
        assert_eq!((p.meta.dscp, p.meta.ecn, p.meta.l2_len), (10, 1, 14));
    }

    #[test]
    fn ipv4_fragments_carry_no_ports() {
        let mut later = IPV4_OPTIONS_TCP;
        later[6] = 0x00;
        later[7] = 0x10; // offset 16 × 8 bytes
        let p = parse(&frame([0x08, 0x00], &later));
        assert_eq!(p.malformed, None);
        assert_eq!((p.meta.keys.src_port, p.meta.keys.dst_port), (0, 0));
        assert_eq!(p.meta.keys.protocol, 6);
        assert_eq!(p.l4_offset, 0);

        let mut first = IPV4_OPTIONS_TCP;
        first[6] = 0x20; // MF, offset 0
        let p = parse(&frame([0x08, 0x00], &first));
        assert_eq!(p.meta.keys.src_port, 0, "all pieces share one flow");
    }

    #[test]
    fn trailing_ethernet_padding_is_ignored() {
        let mut padded = IPV4_OPTIONS_TCP.to_vec();
        padded.extend_from_slice(&[0; 16]);
        let p = parse(&frame([0x08, 0x00], &padded));
        assert_eq!(p.malformed, None);
        assert_eq!(p.meta.keys.dst_port, 443);
    }

    /// The walk is reported as it went: `l2_len` 26 is one VLAN tag and a PPPoE header (not
    /// three tags), 22 two MPLS labels (not two tags).
    #[test]
    fn pppoe_over_vlan_and_mpls_are_reported_as_walked() {
        let mut buf = [0u8; 256];
        let (src, dst) = ("100.64.0.1".parse().unwrap(), "192.0.2.1".parse().unwrap());
        let len = crate::wire::build_udp_frame(&mut buf, src, dst, 4000, 53, 46, 0, 20).unwrap();
        let mut pppoe = buf;
        let n = crate::wire::push_pppoe(&mut pppoe, len, 0x2a).unwrap();
        let n = crate::wire::push_vlan_tag(&mut pppoe, n, ethertype::VLAN, 100).unwrap();
        let p = parse(&pppoe[..n]);
        assert_eq!(p.malformed, None);
        assert_eq!((p.vlan_tags, p.encapsulation), (1, Encapsulation::Pppoe));
        assert_eq!((p.l3_offset, p.meta.l2_len), (26, 26));
        assert_eq!((p.meta.keys.dst_port, p.meta.dscp), (53, 46));

        let mut mpls = buf;
        let n = crate::wire::push_mpls(&mut mpls, len, &[16, 1_048_575]).unwrap();
        let p = parse(&mpls[..n]);
        assert_eq!(p.malformed, None);
        assert_eq!((p.vlan_tags, p.encapsulation), (0, Encapsulation::Mpls(2)));
        assert_eq!((p.l3_offset, p.meta.keys.src_port), (22, 4000));

        // Untagged (the fast path) and plain QinQ report no encapsulation.
        let p = parse(&buf[..len]);
        assert_eq!((p.vlan_tags, p.encapsulation), (0, Encapsulation::None));
        let n = crate::wire::push_vlan_tag(&mut buf, len, ethertype::VLAN, 20).unwrap();
        let n = crate::wire::push_vlan_tag(&mut buf, n, ethertype::QINQ, 100).unwrap();
        let p = parse(&buf[..n]);
        assert_eq!((p.vlan_tags, p.encapsulation), (2, Encapsulation::None));
    }

    #[test]
    fn vlan_and_qinq_tags_are_skipped() {
        let mut tagged = vec![0x00, 0x0a, 0x08, 0x00];
        tagged.extend_from_slice(&IPV4_OPTIONS_TCP);
        let p = parse(&frame([0x81, 0x00], &tagged));
        assert_eq!((p.l3_offset, p.meta.l2_len), (18, 18));
        assert_eq!(p.meta.keys.dst_port, 443);

        let mut qinq = vec![0x00, 0x64, 0x81, 0x00, 0x00, 0x0a, 0x08, 0x00];
        qinq.extend_from_slice(&IPV4_OPTIONS_TCP);
        let p = parse(&frame([0x88, 0xa8], &qinq));
        assert_eq!(p.l3_offset, 22);
        assert_eq!(p.meta.keys.dst_port, 443);
        let p = parse(&frame([0x91, 0x00], &qinq));
        assert_eq!(p.l3_offset, 22);
    }

    /// `IPV4_OPTIONS_TCP` behind `outer` (an EtherType and the headers after it).
    fn wrapped(outer: &[u8]) -> Vec<u8> {
        let mut f = MACS.to_vec();
        f.extend_from_slice(outer);
        f.extend_from_slice(&IPV4_OPTIONS_TCP);
        f
    }

    #[test]
    fn pppoe_and_mpls_reach_the_inner_ip_header_for_keys_dscp_and_l2_len() {
        let pppoe = [0x88, 0x64, 0x11, 0x00, 0x00, 0x07, 0x00, 0x2e, 0x00, 0x21];
        let vlan_pppoe = [
            0x81, 0x00, 0x00, 0x0a, 0x88, 0x64, 0x11, 0x00, 0x00, 0x07, 0x00, 0x2e, 0x00, 0x21,
        ];
        let mpls = [0x88, 0x47, 0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
        for (outer, l3) in [(&pppoe[..], 22), (&vlan_pppoe[..], 26), (&mpls[..], 22)] {
            let f = wrapped(outer);
            let p = parse(&f);
            assert_eq!(p.malformed, None, "{outer:02x?}");
            assert_eq!((p.l3_offset, p.meta.l2_len), (l3, l3));
            assert_eq!(p.l4_offset, l3 + 24);
            let k = p.meta.keys;
            assert_eq!(
                (k.l3, k.protocol, k.src_port, k.dst_port),
                (L3Kind::Ipv4, 6, 40000, 443)
            );
            assert_eq!(&k.dst_addr[12..], &[198, 51, 100, 7]);
            assert_eq!((p.meta.dscp, p.meta.ecn), (10, 1));
            assert!(tcp_ack_info(&f).is_some(), "the ACK filter sees inside too");
        }
        // IPv6 inside PPPoE.
        let mut f = MACS.to_vec();
        f.extend_from_slice(&[0x88, 0x64, 0x11, 0x00, 0x00, 0x07, 0x00, 0x42, 0x00, 0x57]);
        f.extend_from_slice(&IPV6_EXT_UDP);
        let p = parse(&f);
        assert_eq!(
            (p.meta.keys.l3, p.meta.keys.dst_port, p.meta.dscp),
            (L3Kind::Ipv6, 6000, 46)
        );
    }

    #[test]
    fn cut_or_endless_encapsulations_are_malformed_non_ip() {
        let f = wrapped(&[0x88, 0x64, 0x11, 0x00, 0x00, 0x07, 0x00, 0x2e, 0x00, 0x21]);
        assert_eq!(
            parse(&f[..18]).malformed,
            Some(Malformed::TruncatedEncapsulation)
        );
        assert_eq!(parse(&f[..30]).malformed, Some(Malformed::TruncatedIpv4));
        let mut labels = MACS.to_vec();
        labels.extend_from_slice(&[0x88, 0x47]);
        for _ in 0..9 {
            labels.extend_from_slice(&[0, 1, 0, 64]);
        }
        let p = parse(&labels);
        assert_eq!(
            (p.malformed, p.meta.keys.l3),
            (Some(Malformed::TooManyMplsLabels), L3Kind::NonIp)
        );
        // PPP control traffic is non-IP, not malformed.
        let lcp = wrapped(&[0x88, 0x64, 0x11, 0x00, 0x00, 0x07, 0x00, 0x2e, 0xc0, 0x21]);
        let p = parse(&lcp);
        assert_eq!(
            (p.malformed, p.meta.keys.l3, p.l3_offset),
            (None, L3Kind::NonIp, 14)
        );
    }

    #[test]
    fn arp_is_non_ip_with_dscp_56() {
        let arp = [0u8; 28];
        let p = parse(&frame([0x08, 0x06], &arp));
        assert_eq!(p.meta.keys.l3, L3Kind::NonIp);
        assert_eq!(p.meta.dscp, ARP_DSCP);
        assert_eq!(p.malformed, None);
    }

    #[test]
    fn other_ethertypes_are_non_ip_with_dscp_0() {
        let p = parse(&frame([0x88, 0xcc], &[0u8; 40])); // LLDP
        assert_eq!(p.meta.keys.l3, L3Kind::NonIp);
        assert_eq!((p.meta.dscp, p.malformed), (0, None));
    }

    // IPv6, TC 0x2e<<2 (EF), hop-by-hop (8) -> fragment (atomic, 8) -> UDP 5000 -> 6000.
    static IPV6_EXT_UDP: [u8; 64] = [
        0x6b, 0x80, 0x00, 0x00, 0x00, 0x18, 0, 64, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, //
        44, 0, 1, 4, 0, 0, 0, 0, // hop-by-hop: next = fragment, PadN
        17, 0, 0, 0, 0, 0, 0, 9, // fragment: next = UDP, offset 0, M = 0
        0x13, 0x88, 0x17, 0x70, 0x00, 0x08, 0x00, 0x00, // UDP
    ];

    #[test]
    fn ipv6_extension_headers_lead_to_the_udp_ports() {
        let p = parse(&frame([0x86, 0xdd], &IPV6_EXT_UDP));
        assert_eq!(p.malformed, None);
        let k = p.meta.keys;
        assert_eq!(k.l3, L3Kind::Ipv6);
        assert_eq!((k.protocol, k.src_port, k.dst_port), (17, 5000, 6000));
        assert_eq!(p.meta.dscp, 46);
        assert_eq!(p.l4_offset, 14 + 40 + 16);
    }

    #[test]
    fn ipv6_non_atomic_fragments_carry_no_ports() {
        let mut f = IPV6_EXT_UDP;
        f[51] = 0x01; // M flag
        let p = parse(&frame([0x86, 0xdd], &f));
        assert_eq!(p.malformed, None);
        assert_eq!((p.meta.keys.src_port, p.meta.keys.protocol), (0, 17));
    }

    #[test]
    fn ipv6_flow_label_is_reported() {
        let mut f = IPV6_EXT_UDP;
        f[1] |= 0x0a;
        f[2] = 0xbc;
        f[3] = 0xde;
        let p = parse(&frame([0x86, 0xdd], &f));
        assert_eq!(p.meta.keys.flow_label, 0xabcde);
    }

    #[test]
    fn icmp_has_no_ports_but_is_ip() {
        let mut icmp = IPV4_OPTIONS_TCP;
        icmp[9] = 1;
        let p = parse(&frame([0x08, 0x00], &icmp));
        assert_eq!(p.malformed, None);
        assert_eq!((p.meta.keys.l3, p.meta.keys.protocol), (L3Kind::Ipv4, 1));
        assert_eq!(p.meta.keys.src_port, 0);
    }

    #[test]
    fn cut_frames_are_forwarded_as_non_ip_with_a_reason() {
        let whole = frame([0x08, 0x00], &IPV4_OPTIONS_TCP);
        let cases = [
            (10, Malformed::TruncatedEthernet),
            (20, Malformed::TruncatedIpv4),
            (14 + 30, Malformed::TruncatedIpv4), // total length says 44
        ];
        for (len, reason) in cases {
            let p = parse(&whole[..len]);
            assert_eq!(p.malformed, Some(reason), "len {len}");
            assert_eq!(p.meta.keys.l3, L3Kind::NonIp);
            assert_eq!(p.meta.dscp, 0);
        }
        // Total length consistent with a cut TCP header.
        let mut short = IPV4_OPTIONS_TCP[..34].to_vec();
        short[3] = 34;
        let p = parse(&frame([0x08, 0x00], &short));
        assert_eq!(p.malformed, Some(Malformed::TruncatedL4));

        let v6 = frame([0x86, 0xdd], &IPV6_EXT_UDP);
        assert_eq!(parse(&v6[..50]).malformed, Some(Malformed::TruncatedIpv6));
        let mut bad_ext = IPV6_EXT_UDP;
        bad_ext[41] = 20; // hop-by-hop claims 168 bytes
        assert_eq!(
            parse(&frame([0x86, 0xdd], &bad_ext)).malformed,
            Some(Malformed::TruncatedIpv6ExtensionHeader)
        );
    }

    #[test]
    fn version_mismatch_is_malformed() {
        let p = parse(&frame([0x86, 0xdd], &IPV4_OPTIONS_TCP));
        assert_eq!(p.malformed, Some(Malformed::BadIpVersion));
        let mut v = IPV6_EXT_UDP;
        v[0] = 0x4b;
        assert_eq!(
            parse(&frame([0x86, 0xdd], &v)).malformed,
            Some(Malformed::BadIpVersion)
        );
    }

    /// The `match` the rule table replaced, kept as the oracle.
    fn transport_by_match(protocol: u8, l4: &[u8]) -> Result<(u16, u16), Malformed> {
        let ports = |min: usize| match l4 {
            [a, b, c, d, ..] if l4.len() >= min => {
                Ok((u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d])))
            }
            _ => Err(Malformed::TruncatedL4),
        };
        match protocol {
            protocol::TCP => {
                let tcp = TcpSegment::new_checked(l4)?;
                Ok((tcp.src_port(), tcp.dst_port()))
            }
            protocol::UDP | protocol::UDPLITE => ports(8),
            protocol::SCTP | protocol::DCCP => ports(4),
            protocol::ICMP | protocol::ICMPV6 if l4.len() < 4 => Err(Malformed::TruncatedL4),
            _ => Ok((0, 0)),
        }
    }

    #[test]
    fn the_l4_rule_table_agrees_with_the_match_for_every_protocol_and_length() {
        let mut l4 = [0u8; 64];
        for (i, b) in l4.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        for data_offset in [0x00, 0x40, 0x50, 0x80, 0xf0] {
            l4[12] = data_offset;
            for protocol in 0..=255u8 {
                for len in 0..=l4.len() {
                    let got = transport(protocol, &l4[..len]).map(|t| (t.src_port, t.dst_port));
                    let want = transport_by_match(protocol, &l4[..len]);
                    assert_eq!(
                        got, want,
                        "protocol {protocol} len {len} offset {data_offset:#x}"
                    );
                }
            }
        }
    }

    /// What `parse_to` returns and writes, through the fast path or only the general one.
    fn both_paths(f: &[u8]) -> ((u16, u16, Option<Malformed>, PacketMeta), bool) {
        let mut fast = PacketMeta {
            mark: 3,
            ..PacketMeta::default()
        };
        let mut general = fast;
        let (a, b, c, w) = parse_to(f, &mut fast);
        let (x, y, z, v) = parse_general(f, &mut general);
        assert_eq!((a, b, c, w, fast), (x, y, z, v, general), "frame {f:02x?}");
        let mut probe = PacketMeta::default();
        ((a, b, c, fast), fast_ipv4(f, &mut probe))
    }

    #[test]
    fn the_ipv4_fast_path_agrees_with_the_general_parser_on_every_edge() {
        let mut udp = [0u8; 64];
        let n = crate::wire::build_udp_frame(
            &mut udp,
            "192.0.2.1".parse().unwrap(),
            "198.51.100.7".parse().unwrap(),
            1234,
            80,
            46,
            2,
            20,
        )
        .unwrap();
        let udp = &udp[..n];
        assert!(both_paths(udp).1, "a plain UDP frame takes the fast path");
        let tcp = frame([0x08, 0x00], &{
            let mut t = IPV4_OPTIONS_TCP;
            // Without the option: IHL 5, total length 40, the TCP header right after.
            t.copy_within(24.., 20);
            t[0] = 0x45;
            t[3] = 40;
            t
        });
        let tcp = &tcp[..14 + 40];
        assert!(both_paths(tcp).1, "a plain TCP frame takes the fast path");
        // Every cut, every byte of the headers at a few values, each through both paths.
        for base in [udp, tcp] {
            for len in 0..=base.len() {
                both_paths(&base[..len]);
            }
            for at in 12..base.len().min(14 + 20 + 14) {
                for v in [
                    0x00, 0x01, 0x05, 0x06, 0x11, 0x20, 0x40, 0x45, 0x46, 0x50, 0xff,
                ] {
                    let mut f = base.to_vec();
                    f[at] = v;
                    both_paths(&f);
                }
            }
        }
    }

    #[test]
    fn malformed_reasons_have_distinct_names_and_indices() {
        let mut names: Vec<&str> = Malformed::ALL.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Malformed::ALL.len());
        for (i, m) in Malformed::ALL.iter().enumerate() {
            assert_eq!(m.index(), i);
        }
    }

    #[test]
    fn tcp_ack_info_reads_through_vlan_and_ipv6() {
        let mut buf = [0u8; 200];
        let spec = crate::wire::TcpSpec {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            dscp: 0,
            ecn: 0,
            flags: 0x10,
            seq: 5,
            ack: 77,
            options: &[5, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            payload_len: 3,
        };
        let n = crate::wire::build_tcp_frame(&mut buf, &spec).unwrap();
        let mut tagged = buf[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&buf[12..n]);
        let info = tcp_ack_info(&tagged).unwrap();
        assert_eq!(info.ack_seq, 77);
        assert_eq!(info.payload_len, 3);
        assert_eq!((info.sack_count, info.sack[0]), (1, (1, 2)));
        assert!(tcp_ack_info(&frame([0x08, 0x06], &[0; 28])).is_none());
    }
}
