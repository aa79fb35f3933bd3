//! The one-pass header parser the data path calls per packet: Ethernet → VLAN tags →
//! IPv4/IPv6 (options, extension headers, fragments) → TCP/UDP/ICMP ports, producing the
//! [`PacketMeta`] the qdisc classifies on. It never fails and never panics: a frame it cannot
//! read becomes a non-IP packet (flow 0, default tin) with a [`Malformed`] reason, and is still
//! forwarded.

use qdisc::{FlowKeys, L3Kind, PacketMeta, TcpAckInfo};

use super::ethernet::{self, ethertype};
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
}

impl Malformed {
    /// All reasons, in display order (for per-reason counters).
    pub const ALL: [Malformed; 11] = [
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
    /// Offset of the network header (after all VLAN tags); 0 when the Ethernet header itself
    /// was cut off.
    pub l3_offset: u16,
    /// Offset of the transport header; 0 when none was located (non-IP, fragments, malformed).
    pub l4_offset: u16,
    /// Why the frame was treated as non-IP despite its EtherType, if it was.
    pub malformed: Option<Malformed>,
}

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
        }
    }
}

/// The transport-layer facts found after the IP header.
struct Transport {
    src_port: u16,
    dst_port: u16,
}

/// Reads ports from the upper-layer header at the start of `l4`.
fn transport(protocol: u8, l4: &[u8]) -> Result<Transport, Malformed> {
    let ports = |l4: &[u8], min: usize| -> Result<Transport, Malformed> {
        match l4 {
            [a, b, c, d, ..] if l4.len() >= min => Ok(Transport {
                src_port: u16::from_be_bytes([*a, *b]),
                dst_port: u16::from_be_bytes([*c, *d]),
            }),
            _ => Err(Malformed::TruncatedL4),
        }
    };
    match protocol {
        protocol::TCP => {
            let tcp = TcpSegment::new_checked(l4)?;
            Ok(Transport {
                src_port: tcp.src_port(),
                dst_port: tcp.dst_port(),
            })
        }
        protocol::UDP | protocol::UDPLITE => ports(l4, 8),
        protocol::SCTP | protocol::DCCP => ports(l4, 4),
        protocol::ICMP | protocol::ICMPV6 if l4.len() < 4 => Err(Malformed::TruncatedL4),
        _ => Ok(Transport {
            src_port: 0,
            dst_port: 0,
        }),
    }
}

fn mapped_v4(a: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xff;
    m[11] = 0xff;
    m[12..].copy_from_slice(&a);
    m
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
/// header; does not allocate.
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
    let l2 = match ethernet::walk(frame) {
        Ok(l2) => l2,
        Err(m) => return Parsed::non_ip(0, 0, Some(m)),
    };
    let located = match l2.ethertype {
        ethertype::IPV4 => locate_ipv4(frame, l2.l3_offset),
        ethertype::IPV6 => locate_ipv6(frame, l2.l3_offset),
        ethertype::ARP => return Parsed::non_ip(l2.l3_offset, ARP_DSCP, None),
        _ => return Parsed::non_ip(l2.l3_offset, 0, None),
    };
    match located {
        Ok(loc) => Parsed {
            meta: PacketMeta {
                keys: loc.keys,
                dscp: loc.dscp,
                ecn: loc.ecn,
                l2_len: loc.l3_offset as u16,
                ..PacketMeta::default()
            },
            l3_offset: loc.l3_offset as u16,
            l4_offset: loc.l4_offset.unwrap_or(0) as u16,
            malformed: None,
        },
        Err(m) => Parsed::non_ip(l2.l3_offset, 0, Some(m)),
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
