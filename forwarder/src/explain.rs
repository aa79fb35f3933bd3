//! `cakewalk explain`: shows how one packet would be handled — the header facts the parser
//! finds, the TX queue it lands on, its CAKE tin, flow and host hashes — without running the
//! forwarder. The packet is built as real bytes and goes through [`crate::wire::parse`], so
//! the answer is what the data path would compute.
//!
//! Spec grammar: `[PROTO] SRC[:PORT] > DST[:PORT] [dscp D] [ecn E] [label N] [mark N]
//! [vlan V] [pppoe S | mpls L]`, with PROTO one of `tcp` (default), `udp`, `icmp`, `icmpv6`, `sctp`, `dccp`,
//! `udplite` or a number, IPv6 addresses in brackets when a port follows
//! (`[2001:db8::1]:443`), D a number (0..=63) or a name (`ef`, `cs1`, `af41`, `va`, `le`,
//! `be`), E `not-ect`/`ect0`/`ect1`/`ce` or 0..=3, V a VLAN id (0..=4095) or two as
//! `OUTER.INNER` (an 802.1ad tag around an 802.1Q one), S a PPPoE session id (0..=65535) and
//! L an MPLS label stack, outermost first (`16.17`; labels 0..=1048575, at most 8). Ports are
//! hashed for every protocol whose header starts with them (TCP, UDP, UDP-Lite, SCTP, DCCP),
//! as the data path does. The output says what the parser walked through to the IP header
//! (VLAN tags, a PPPoE session, MPLS labels), as the parser reports it: the L2 length alone
//! cannot tell a PPPoE header from two VLAN tags.

use std::fmt;
use std::net::IpAddr;

use qdisc::cake::{Cake, CakeConfig, Classification, ConfigError};
use qdisc::{L3Kind, Packet, PacketMeta};
use thiserror::Error;

use crate::classify;
use crate::config::{keywords, QueueKind};
use crate::wire;
use crate::wire::ethernet::Encapsulation;

/// A packet spec that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// The spec has no `>` between source and destination.
    #[error("packet spec '{0}' has no '>' between source and destination; try 'tcp 10.0.0.1:1234 > 10.0.0.2:80 dscp ef'")]
    NoArrow(String),
    /// The words around the `>` are not `[PROTO] SRC > DST`.
    #[error("packet spec '{spec}' {problem}; write [PROTO] SRC > DST, as in 'tcp 10.0.0.1:1234 > 10.0.0.2:80 dscp ef'")]
    Shape {
        /// The spec.
        spec: String,
        /// What is wrong around the `>`.
        problem: &'static str,
    },
    /// An address that does not parse.
    #[error("'{0}' is not an address[:port]; try '10.0.0.1:1234' or '[2001:db8::1]:443'")]
    BadEndpoint(String),
    /// Source and destination of different IP versions.
    #[error("source {0} and destination {1} are different IP versions; use two IPv4 or two IPv6 addresses")]
    MixedFamilies(IpAddr, IpAddr),
    /// An unknown protocol.
    #[error("'{0}' is not a protocol; use tcp, udp, icmp, icmpv6, sctp, dccp, udplite or a number 0..=255")]
    BadProtocol(String),
    /// An unknown DSCP.
    #[error(
        "'{0}' is not a DSCP; use 0..=63 or a name such as ef, cs1..cs7, af11..af43, va, le, be"
    )]
    BadDscp(String),
    /// An unknown ECN value.
    #[error("'{0}' is not an ECN value; use not-ect, ect0, ect1, ce or 0..=3")]
    BadEcn(String),
    /// A keyword after the addresses that is not known, or its value is missing or bad.
    #[error(
        "'{0}' is not understood after the addresses; use dscp D, ecn E, label N, mark N, vlan V, pppoe S or mpls L"
    )]
    BadKeyword(String),
    /// A VLAN id that is not one.
    #[error("'{0}' is not a VLAN id; use 0..=4095, or OUTER.INNER for a QinQ pair (vlan 100.20)")]
    BadVlan(String),
    /// A PPPoE session id or MPLS label stack that is not one, or both at once.
    #[error("'{0}' is not an encapsulation; use pppoe SESSION (0..=65535) or mpls LABEL[.LABEL...] (labels 0..=1048575, at most 8), one of the two")]
    BadEncapsulation(String),
    /// A flag that says what the packet spec says too (the one would silently win).
    #[error("{flag} is given as well as a packet spec that {what}; give it once, in the spec or as the flag")]
    FlagAndSpec {
        /// The flag (`--proto`).
        flag: &'static str,
        /// What the spec already says ("names the protocol").
        what: &'static str,
    },
    /// Neither a spec nor the flags that make one.
    #[error("give a packet spec ('tcp 10.0.0.1:1234 > 10.0.0.2:80') or both --src and --dst")]
    NoPacket,
    /// A keyword given twice (the later value would silently win).
    #[error("'{0}' is given twice in the packet spec; give it once (in the spec or with its flag, such as --dscp)")]
    Repeated(String),
}

/// One packet to explain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketSpec {
    /// IP protocol number.
    pub protocol: u8,
    /// Source address.
    pub src: IpAddr,
    /// Source port (0 when none).
    pub src_port: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dst_port: u16,
    /// DSCP.
    pub dscp: u8,
    /// ECN bits.
    pub ecn: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// Firewall mark (tin override through `fwmark`).
    pub mark: u32,
    /// VLAN ids, outermost first (empty: untagged).
    pub vlan: Vec<u16>,
    /// The PPPoE session the IP packet travels in (inside the VLAN tags), if any.
    pub pppoe: Option<u16>,
    /// The MPLS labels above the IP packet (inside the VLAN tags), outermost first.
    pub mpls: Vec<u32>,
}

/// The name `explain` and the spec use for IP protocol `p` ("tcp"), or "proto N".
pub fn protocol_name(p: u8) -> String {
    match p {
        wire::protocol::TCP => "tcp".into(),
        wire::protocol::UDP => "udp".into(),
        wire::protocol::ICMP => "icmp".into(),
        wire::protocol::ICMPV6 => "icmpv6".into(),
        wire::protocol::SCTP => "sctp".into(),
        wire::protocol::DCCP => "dccp".into(),
        wire::protocol::UDPLITE => "udplite".into(),
        other => format!("proto {other}"),
    }
}

/// The packet flags of `cakewalk explain`, for [`compose_spec`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecFlags<'a> {
    /// `--proto`.
    pub proto: Option<&'a str>,
    /// `--src`.
    pub src: Option<&'a str>,
    /// `--dst`.
    pub dst: Option<&'a str>,
    /// `--dscp`.
    pub dscp: Option<&'a str>,
}

/// Puts the spec words and the flags together into one spec text. A flag that repeats what
/// the spec says is an error, never silently dropped: `--proto udp` with a spec that names
/// `tcp`, `--src`/`--dst` beside a spec (which always names both), `--dscp` beside a spec's
/// `dscp` ([`PacketSpec::parse`] refuses that one as given twice).
///
/// # Errors
/// [`SpecError::FlagAndSpec`], or [`SpecError::NoPacket`] without a spec, `--src` or `--dst`.
pub fn compose_spec(words: &[String], flags: &SpecFlags<'_>) -> Result<String, SpecError> {
    let mut text = if words.is_empty() {
        let (Some(src), Some(dst)) = (flags.src, flags.dst) else {
            return Err(SpecError::NoPacket);
        };
        format!("{} {src} > {dst}", flags.proto.unwrap_or("tcp"))
    } else {
        let given = [("--src", flags.src), ("--dst", flags.dst)];
        if let Some((flag, _)) = given.iter().find(|(_, v)| v.is_some()) {
            return Err(SpecError::FlagAndSpec {
                flag,
                what: "names the source and destination",
            });
        }
        let joined = words.join(" ");
        match flags.proto {
            None => joined,
            Some(proto) => {
                let spaced = joined.replace('>', " > ");
                let before_arrow = spaced.split_whitespace().position(|w| w == ">");
                if before_arrow == Some(2) {
                    return Err(SpecError::FlagAndSpec {
                        flag: "--proto",
                        what: "names the protocol",
                    });
                }
                format!("{proto} {joined}")
            }
        }
    };
    if let Some(d) = flags.dscp {
        text.push_str(&format!(" dscp {d}"));
    }
    Ok(text)
}

fn parse_vlan_id(s: &str) -> Option<u16> {
    keywords::parse_c_u32(s)
        .filter(|v| *v < 4096)
        .map(|v| v as u16)
}

/// Parses a DSCP number or name.
///
/// # Errors
/// [`SpecError::BadDscp`].
pub fn parse_dscp(s: &str) -> Result<u8, SpecError> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || SpecError::BadDscp(s.to_string());
    if let Some(v) = keywords::parse_c_u32(&t) {
        return u8::try_from(v).ok().filter(|d| *d < 64).ok_or_else(bad);
    }
    let v = match t.as_str() {
        "be" | "df" | "default" => 0,
        "le" | "lowerefffort" => 1,
        "ef" => 46,
        "va" | "voice-admit" => 44,
        _ => {
            if let Some(n) = t.strip_prefix("cs") {
                let n: u8 = n.parse().map_err(|_| bad())?;
                if n > 7 {
                    return Err(bad());
                }
                n * 8
            } else if let Some(n) = t.strip_prefix("af") {
                let b = n.as_bytes();
                match b {
                    [c @ b'1'..=b'4', d @ b'1'..=b'3'] => (c - b'0') * 8 + (d - b'0') * 2,
                    _ => return Err(bad()),
                }
            } else {
                return Err(bad());
            }
        }
    };
    Ok(v)
}

/// Returns the usual name of a DSCP value, if it has one.
pub fn dscp_name(dscp: u8) -> Option<&'static str> {
    const NAMES: [(u8, &str); 21] = [
        (0, "BE"),
        (1, "LE"),
        (8, "CS1"),
        (10, "AF11"),
        (12, "AF12"),
        (14, "AF13"),
        (16, "CS2"),
        (18, "AF21"),
        (20, "AF22"),
        (22, "AF23"),
        (24, "CS3"),
        (26, "AF31"),
        (28, "AF32"),
        (30, "AF33"),
        (32, "CS4"),
        (34, "AF41"),
        (36, "AF42"),
        (38, "AF43"),
        (40, "CS5"),
        (44, "VA"),
        (46, "EF"),
    ];
    match dscp {
        48 => Some("CS6"),
        56 => Some("CS7"),
        _ => NAMES.iter().find(|(d, _)| *d == dscp).map(|(_, n)| *n),
    }
}

fn parse_protocol(s: &str) -> Option<u8> {
    Some(match s.to_ascii_lowercase().as_str() {
        "tcp" => wire::protocol::TCP,
        "udp" => wire::protocol::UDP,
        "icmp" => wire::protocol::ICMP,
        "icmpv6" | "icmp6" => wire::protocol::ICMPV6,
        "sctp" => wire::protocol::SCTP,
        "dccp" => wire::protocol::DCCP,
        "udplite" | "udp-lite" => wire::protocol::UDPLITE,
        other => return other.parse().ok(),
    })
}

fn parse_endpoint(s: &str) -> Result<(IpAddr, u16), SpecError> {
    let bad = || SpecError::BadEndpoint(s.to_string());
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, 0));
    }
    let (addr, port) = if let Some(rest) = s.strip_prefix('[') {
        let (a, p) = rest.split_once(']').ok_or_else(bad)?;
        (a, p.strip_prefix(':').unwrap_or(p))
    } else {
        s.rsplit_once(':').ok_or_else(bad)?
    };
    let ip: IpAddr = addr.parse().map_err(|_| bad())?;
    let port = if port.is_empty() {
        0
    } else {
        port.parse().map_err(|_| bad())?
    };
    Ok((ip, port))
}

impl PacketSpec {
    /// Parses a spec like `tcp 10.0.0.1:1234 > 10.0.0.2:80 dscp ef`.
    ///
    /// # Errors
    /// A [`SpecError`] naming the part that is wrong.
    pub fn parse(spec: &str) -> Result<PacketSpec, SpecError> {
        let spaced = spec.replace('>', " > ");
        let words: Vec<&str> = spaced.split_whitespace().collect();
        let arrow = words
            .iter()
            .position(|w| *w == ">")
            .ok_or_else(|| SpecError::NoArrow(spec.to_string()))?;
        let shape = |problem| SpecError::Shape {
            spec: spec.to_string(),
            problem,
        };
        let (protocol, src_word) = match arrow {
            1 => (wire::protocol::TCP, words[0]),
            2 => (
                parse_protocol(words[0]).ok_or_else(|| SpecError::BadProtocol(words[0].into()))?,
                words[1],
            ),
            0 => return Err(shape("has no source before '>'")),
            _ => return Err(shape("has more than a protocol and a source before '>'")),
        };
        let dst_word = words
            .get(arrow + 1)
            .ok_or_else(|| shape("has no destination after '>'"))?;
        let (src, src_port) = parse_endpoint(src_word)?;
        let (dst, dst_port) = parse_endpoint(dst_word)?;
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(SpecError::MixedFamilies(src, dst));
        }
        let mut p = PacketSpec {
            protocol,
            src,
            src_port,
            dst,
            dst_port,
            dscp: 0,
            ecn: 0,
            flow_label: 0,
            mark: 0,
            vlan: Vec::new(),
            pppoe: None,
            mpls: Vec::new(),
        };
        let mut rest = words[arrow + 2..].iter();
        let mut seen: Vec<&str> = Vec::new();
        while let Some(&kw) = rest.next() {
            let val = rest.next().copied();
            let missing = || SpecError::BadKeyword(kw.to_string());
            let key = match kw {
                "tos" => "dscp",
                "flowlabel" => "label",
                other => other,
            };
            if seen.contains(&key) {
                return Err(SpecError::Repeated(key.to_string()));
            }
            seen.push(key);
            match kw {
                "dscp" | "tos" => p.dscp = parse_dscp(val.ok_or_else(missing)?)?,
                "ecn" => {
                    let v = val.ok_or_else(missing)?;
                    p.ecn = match v.to_ascii_lowercase().as_str() {
                        "not-ect" | "0" => 0,
                        "ect1" | "ect(1)" | "1" => 1,
                        "ect0" | "ect(0)" | "2" => 2,
                        "ce" | "3" => 3,
                        _ => return Err(SpecError::BadEcn(v.to_string())),
                    };
                }
                "label" | "flowlabel" => {
                    p.flow_label = val
                        .and_then(keywords::parse_c_u32)
                        .filter(|l| *l < 1 << 20)
                        .ok_or_else(missing)?;
                }
                "mark" => p.mark = val.and_then(keywords::parse_c_u32).ok_or_else(missing)?,
                "vlan" => {
                    let v = val.ok_or_else(missing)?;
                    let ids: Option<Vec<u16>> = v.split('.').map(parse_vlan_id).collect();
                    p.vlan = ids
                        .filter(|ids| ids.len() <= 2)
                        .ok_or_else(|| SpecError::BadVlan(v.to_string()))?;
                }
                "pppoe" => {
                    let v = val.ok_or_else(missing)?;
                    let bad = || SpecError::BadEncapsulation(format!("pppoe {v}"));
                    let id = keywords::parse_c_u32(v).and_then(|id| u16::try_from(id).ok());
                    p.pppoe = Some(id.ok_or_else(bad)?);
                }
                "mpls" => {
                    let v = val.ok_or_else(missing)?;
                    let labels: Option<Vec<u32>> = v
                        .split('.')
                        .map(|l| keywords::parse_c_u32(l).filter(|l| *l < 1 << 20))
                        .collect();
                    p.mpls = labels
                        .filter(|l| l.len() <= wire::ethernet::MAX_MPLS_LABELS)
                        .ok_or_else(|| SpecError::BadEncapsulation(format!("mpls {v}")))?;
                }
                _ => return Err(SpecError::BadKeyword(kw.to_string())),
            }
        }
        if p.pppoe.is_some() && !p.mpls.is_empty() {
            return Err(SpecError::BadEncapsulation("pppoe and mpls".into()));
        }
        Ok(p)
    }

    /// Builds the packet's frame and parses it as the data path would.
    pub fn meta(&self) -> PacketMeta {
        self.parsed().meta
    }

    /// [`PacketSpec::meta`] with what the parser walked through to the IP header.
    pub fn parsed(&self) -> wire::Parsed {
        let mut buf = [0u8; 256];
        let built = match self.protocol {
            wire::protocol::UDP => wire::build_udp_frame(
                &mut buf,
                self.src,
                self.dst,
                self.src_port,
                self.dst_port,
                self.dscp,
                self.ecn,
                64,
            ),
            wire::protocol::TCP => wire::build_tcp_frame(
                &mut buf,
                &wire::TcpSpec {
                    src: self.src,
                    dst: self.dst,
                    src_port: self.src_port,
                    dst_port: self.dst_port,
                    dscp: self.dscp,
                    ecn: self.ecn,
                    flags: 0x10,
                    seq: 1,
                    ack: 1,
                    options: &[],
                    payload_len: 64,
                },
            ),
            // Every other protocol as its header bytes: SCTP, DCCP and UDP-Lite start with
            // the ports, which the parser hashes; for the rest the bytes mean nothing to it.
            other => wire::build_ports_frame(
                &mut buf,
                self.src,
                self.dst,
                other,
                self.src_port,
                self.dst_port,
                self.dscp,
                self.ecn,
                64,
            ),
        };
        let built = built.and_then(|mut len| {
            if let (IpAddr::V6(_), Some(f)) = (self.src, buf.get_mut(14..18)) {
                f[1] = (f[1] & 0xf0) | ((self.flow_label >> 16) as u8 & 0x0f);
                f[2] = (self.flow_label >> 8) as u8;
                f[3] = self.flow_label as u8;
            }
            // The encapsulation first: it sits inside the VLAN tags.
            if let Some(session) = self.pppoe {
                len = wire::push_pppoe(&mut buf, len, session)?;
            }
            if !self.mpls.is_empty() {
                len = wire::push_mpls(&mut buf, len, &self.mpls)?;
            }
            // Innermost first: each tag goes right after the MAC addresses.
            for (i, id) in self.vlan.iter().enumerate().rev() {
                let tpid = if i == 0 && self.vlan.len() > 1 {
                    0x88a8
                } else {
                    0x8100
                };
                len = wire::push_vlan_tag(&mut buf, len, tpid, *id)?;
            }
            Some(len)
        });
        // An IPv6 extension header number (hop-by-hop, routing, fragment, ...) as the
        // protocol has no content to walk here: the parser would read zeros as the next
        // header. Such a spec is explained from its fields, as is one that does not build.
        let mut parsed = match built.map(|len| wire::parse(&buf[..len])) {
            Some(p) if p.malformed.is_none() && p.meta.keys.protocol == self.protocol => p,
            _ => self.parsed_without_ports(),
        };
        parsed.meta.mark = self.mark;
        parsed
    }

    /// What the parser would report, from the spec's fields.
    fn parsed_without_ports(&self) -> wire::Parsed {
        let encapsulation = match (self.pppoe, self.mpls.len()) {
            (Some(_), _) => Encapsulation::Pppoe,
            (None, 0) => Encapsulation::None,
            (None, n) => Encapsulation::Mpls(n as u8),
        };
        let meta = self.meta_without_ports();
        wire::Parsed {
            meta,
            l3_offset: meta.l2_len,
            vlan_tags: self.vlan.len() as u8,
            encapsulation,
            ..wire::Parsed::default()
        }
    }

    fn meta_without_ports(&self) -> PacketMeta {
        let mut meta = PacketMeta {
            dscp: self.dscp,
            ecn: self.ecn,
            l2_len: 14
                + 4 * self.vlan.len() as u16
                + if self.pppoe.is_some() { 8 } else { 0 }
                + 4 * self.mpls.len() as u16,
            ..PacketMeta::default()
        };
        let k = &mut meta.keys;
        k.protocol = self.protocol;
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                k.l3 = L3Kind::Ipv4;
                k.src_addr = s.to_ipv6_mapped().octets();
                k.dst_addr = d.to_ipv6_mapped().octets();
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                k.l3 = L3Kind::Ipv6;
                k.src_addr = s.octets();
                k.dst_addr = d.octets();
                k.flow_label = self.flow_label;
            }
            _ => {}
        }
        meta
    }
}

/// What `explain` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The packet as given.
    pub spec: PacketSpec,
    /// What the parser produced.
    pub meta: PacketMeta,
    /// TX queues configured.
    pub n_queues: usize,
    /// The hash the queue was chosen by.
    pub queue_hash: u32,
    /// The TX queue.
    pub queue: usize,
    /// The CAKE configuration used.
    pub cake: CakeConfig,
    /// Where CAKE puts it: tin, flow and host entries.
    pub class: Classification,
    /// With the FIFO as the queue (`queue = "fifo"`): its band (0 first), and CAKE's
    /// classification does not apply.
    pub fifo_band: Option<usize>,
    /// VLAN tags the parser walked.
    pub vlan_tags: u8,
    /// The PPPoE session or MPLS stack the parser walked through.
    pub encapsulation: Encapsulation,
    /// The hashes were keyed by a configured `shaper.seed` (the same in every process with
    /// that seed); false: by this process's random key, which a running forwarder does not
    /// share.
    pub seeded: bool,
}

/// A stand-in packet type: classification never looks at a packet, only at its meta.
struct Probe;

impl Packet for Probe {
    fn len(&self) -> usize {
        0
    }

    fn set_ce(&mut self) -> bool {
        false
    }
}

/// Explains how `spec` is handled with `cake` on `n_queues` TX queues.
///
/// # Errors
/// When `cake` is not a valid CAKE configuration.
pub fn explain(
    spec: &PacketSpec,
    cake: &CakeConfig,
    n_queues: usize,
) -> Result<Explanation, ConfigError> {
    explain_queue(spec, QueueKind::Cake, cake, n_queues)
}

/// [`explain`] for the queue discipline `kind`: with the FIFO, the packet's band instead
/// of CAKE's tin, flow and hosts.
///
/// # Errors
/// When `cake` is not a valid CAKE configuration.
pub fn explain_queue(
    spec: &PacketSpec,
    kind: QueueKind,
    cake: &CakeConfig,
    n_queues: usize,
) -> Result<Explanation, ConfigError> {
    let parsed = spec.parsed();
    let mut meta = parsed.meta;
    let n = n_queues.max(1);
    let queue_hash = classify::queue_hash(&meta);
    // As the engine does: with several queues CAKE reuses the queue's software hash.
    let queue = classify::assign_tx_queue(&mut meta, n);
    // A small packet limit keeps the probe instance's preallocation tiny.
    let probe_config = CakeConfig {
        packet_limit: 16,
        ..cake.clone()
    };
    let instance = Cake::<Probe>::new(&probe_config)?;
    Ok(Explanation {
        spec: spec.clone(),
        meta,
        n_queues: n,
        queue_hash,
        queue,
        cake: cake.clone(),
        class: instance.classify(&meta),
        fifo_band: (kind == QueueKind::Fifo).then(|| qdisc::fifo::band_for_dscp(meta.dscp)),
        vlan_tags: parsed.vlan_tags,
        encapsulation: parsed.encapsulation,
        seeded: false,
    })
}

/// ", behind 1 VLAN tag and a PPPoE session": what the parser walked to the IP header.
fn behind(vlan_tags: u8, encapsulation: Encapsulation) -> String {
    let plural = |n: u8, what: &str| match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    };
    let mut parts = Vec::new();
    if vlan_tags > 0 {
        parts.push(plural(vlan_tags, "VLAN tag"));
    }
    match encapsulation {
        Encapsulation::None => {}
        Encapsulation::Pppoe => parts.push("a PPPoE session".into()),
        Encapsulation::Mpls(n) => parts.push(plural(n, "MPLS label")),
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(", behind {}", parts.join(" and "))
    }
}

fn show_addr(a: IpAddr, port: u16) -> String {
    match (a, port) {
        (IpAddr::V6(v6), p) if p != 0 => format!("[{v6}]:{p}"),
        (a, 0) => a.to_string(),
        (a, p) => format!("{a}:{p}"),
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.spec;
        let m = &self.meta;
        let dscp_name = dscp_name(m.dscp)
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        let join = |v: Vec<String>| v.join(".");
        let mut vlan = match s.vlan.as_slice() {
            [] => String::new(),
            ids => format!(" vlan {}", join(ids.iter().map(u16::to_string).collect())),
        };
        if let Some(session) = s.pppoe {
            vlan.push_str(&format!(" pppoe {session}"));
        }
        if !s.mpls.is_empty() {
            vlan.push_str(&format!(
                " mpls {}",
                join(s.mpls.iter().map(u32::to_string).collect())
            ));
        }
        writeln!(
            f,
            "packet:     {} {} > {} dscp {}{} ecn {}{vlan}",
            protocol_name(s.protocol),
            show_addr(s.src, s.src_port),
            show_addr(s.dst, s.dst_port),
            m.dscp,
            dscp_name,
            m.ecn
        )?;
        let tags = behind(self.vlan_tags, self.encapsulation);
        writeln!(
            f,
            "parsed:     {:?} {} ports {} > {} flow label {:#x}{tags}",
            m.keys.l3,
            protocol_name(m.keys.protocol),
            m.keys.src_port,
            m.keys.dst_port,
            m.keys.flow_label
        )?;
        writeln!(
            f,
            "tx queue:   {} of {} (queue hash {:#010x})",
            self.queue, self.n_queues, self.queue_hash
        )?;
        if self.seeded {
            writeln!(
                f,
                "hash key:   shaper.seed: a forwarder with the same seed computes the same hashes, queue and flow"
            )?;
        } else {
            writeln!(
                f,
                "hash key:   drawn at random by this process: a running forwarder keys its hashes with its own secret key, so its queue, flow and host ids for this packet differ from these; set shaper.seed for ids that match (replays, tests)"
            )?;
        }
        if let Some(band) = self.fifo_band {
            return writeln!(
                f,
                "fifo band:  {band} of {} (pfifo_fast-style: DSCP 40-63 first, CS1 and DSCP 1 last)",
                qdisc::fifo::BANDS
            );
        }
        let c = &self.class;
        writeln!(
            f,
            "tin:        {} {} ({})",
            c.tin,
            c.tin_name,
            keywords::diffserv_name(self.cake.diffserv)
        )?;
        writeln!(
            f,
            "flow:       {} (hash {:#010x}{}, {})",
            c.flow,
            c.flow_hash,
            if c.used_l4_hash {
                ", the queue hash reused"
            } else {
                ""
            },
            keywords::flow_mode_name(self.cake.flow_mode)
        )?;
        let host = |h: Option<usize>| h.map_or("-".to_string(), |h| h.to_string());
        writeln!(
            f,
            "hosts:      src {} dst {}",
            host(c.src_host),
            host(c.dst_host)
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_grammar_reads_ports_dscp_and_ecn() {
        let p = PacketSpec::parse("tcp 10.0.0.1:1234 > 10.0.0.2:80 dscp ef ecn ect0").unwrap();
        assert_eq!(p.protocol, 6);
        assert_eq!((p.src_port, p.dst_port), (1234, 80));
        assert_eq!((p.dscp, p.ecn), (46, 2));
        let p = PacketSpec::parse("udp [2001:db8::1]:53>[2001:db8::2]:5353 dscp cs1 label 0x12345")
            .unwrap();
        assert_eq!(
            (p.protocol, p.src_port, p.dst_port, p.dscp),
            (17, 53, 5353, 8)
        );
        assert_eq!(p.flow_label, 0x12345);
        let p = PacketSpec::parse("10.0.0.1 > 10.0.0.2").unwrap();
        assert_eq!((p.protocol, p.src_port), (6, 0));
    }

    #[test]
    fn dscp_names_map_to_code_points() {
        for (name, v) in [
            ("ef", 46),
            ("CS7", 56),
            ("af41", 34),
            ("af11", 10),
            ("va", 44),
            ("le", 1),
            ("be", 0),
            ("63", 63),
        ] {
            assert_eq!(parse_dscp(name).unwrap(), v, "{name}");
        }
        assert!(parse_dscp("af51").is_err());
        assert!(parse_dscp("64").is_err());
        assert_eq!(dscp_name(46), Some("EF"));
    }

    #[test]
    fn bad_specs_say_what_to_write() {
        let e = PacketSpec::parse("tcp 10.0.0.1:1 10.0.0.2:2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no '>'"), "{e}");
        // A '>' is there: say what is missing around it, not that it is missing.
        for (spec, want) in [
            ("tcp 10.0.0.1:1 >", "has no destination after '>'"),
            ("> 10.0.0.2:2", "has no source before '>'"),
            (
                "tcp from 10.0.0.1 > 10.0.0.2",
                "more than a protocol and a source",
            ),
        ] {
            let e = PacketSpec::parse(spec).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains("no '>'"), "{spec}: {e}");
        }
        let e = PacketSpec::parse("tcp 10.0.0.1:1 > 2001:db8::2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("different IP versions"), "{e}");
        let e = PacketSpec::parse("xtp 10.0.0.1 > 10.0.0.2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'xtp' is not a protocol"), "{e}");
        let e = PacketSpec::parse("10.0.0.1 > 10.0.0.2 dscp fast")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'fast' is not a DSCP"), "{e}");
        let e = PacketSpec::parse("10.0.0.1 > 10.0.0.2 colour red")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'colour'"), "{e}");
        for twice in [
            "10.0.0.1 > 10.0.0.2 dscp ef dscp cs1",
            "10.0.0.1 > 10.0.0.2 tos 8 ecn ce dscp 46",
            "10.0.0.1 > 10.0.0.2 mark 1 mark 1",
        ] {
            let e = PacketSpec::parse(twice).unwrap_err().to_string();
            assert!(e.contains("given twice"), "{twice}: {e}");
        }
    }

    #[test]
    fn explanation_matches_the_data_path_parse() {
        let p = PacketSpec::parse("udp 10.0.0.1:1234 > 10.0.0.2:80 dscp ef").unwrap();
        let e = explain(&p, &CakeConfig::default(), 4).unwrap();
        assert_eq!(e.meta.keys.l3, L3Kind::Ipv4);
        assert_eq!(e.meta.keys.dst_port, 80);
        assert_eq!(e.meta.dscp, 46);
        assert_eq!(e.queue, classify::tx_queue_for(&e.meta, 4));
        assert!(e.to_string().contains("tx queue:"));
        assert_eq!((e.class.tin, e.class.tin_name), (2, "Voice"));
        assert!(e
            .to_string()
            .contains("hash key:   drawn at random by this process"));
        let seeded = Explanation { seeded: true, ..e };
        assert!(seeded.to_string().contains("hash key:   shaper.seed"));
    }

    #[test]
    fn tins_follow_the_configured_diffserv_mode() {
        let p = PacketSpec::parse("udp 10.0.0.1:1 > 10.0.0.2:2 dscp cs1").unwrap();
        let ds4 = CakeConfig {
            diffserv: qdisc::cake::DiffservMode::Diffserv4,
            ..CakeConfig::default()
        };
        let e = explain(&p, &ds4, 1).unwrap();
        assert_eq!(e.class.tin_name, "Bulk");
        let be = CakeConfig {
            diffserv: qdisc::cake::DiffservMode::Besteffort,
            ..CakeConfig::default()
        };
        assert_eq!(explain(&p, &be, 1).unwrap().class.tin, 0);
    }

    #[test]
    fn triple_isolate_reports_both_hosts_and_flowblind_uses_flow_zero() {
        let p = PacketSpec::parse("tcp 10.0.0.1:1 > 10.0.0.2:2").unwrap();
        let e = explain(&p, &CakeConfig::default(), 1).unwrap();
        assert!(e.class.src_host.is_some() && e.class.dst_host.is_some());
        let blind = CakeConfig {
            flow_mode: qdisc::cake::FlowMode::Flowblind,
            ..CakeConfig::default()
        };
        let e = explain(&p, &blind, 1).unwrap();
        assert_eq!(e.class.flow % 1024, 0);
    }

    #[test]
    fn the_fifo_shows_its_band_and_no_cake_classification() {
        let p = PacketSpec::parse("udp 10.0.0.1:1 > 10.0.0.2:2 dscp ef").unwrap();
        let e = explain_queue(&p, QueueKind::Fifo, &CakeConfig::default(), 1).unwrap();
        assert_eq!(e.fifo_band, Some(0));
        let shown = e.to_string();
        assert!(shown.contains("fifo band:  0 of 3"), "{shown}");
        assert!(
            !shown.contains("tin:") && !shown.contains("flow:"),
            "{shown}"
        );
        let p = PacketSpec::parse("udp 10.0.0.1:1 > 10.0.0.2:2 dscp cs1").unwrap();
        let e = explain_queue(&p, QueueKind::Fifo, &CakeConfig::default(), 1).unwrap();
        assert_eq!(e.fifo_band, Some(2));
        assert_eq!(
            explain(&p, &CakeConfig::default(), 1).unwrap().fifo_band,
            None
        );
    }

    #[test]
    fn sctp_and_dccp_ports_are_hashed_as_the_data_path_hashes_them() {
        for (name, proto) in [("sctp", 132), ("dccp", 33), ("udplite", 136)] {
            let p = PacketSpec::parse(&format!("{name} 10.0.0.1:1 > 10.0.0.2:80")).unwrap();
            let e = explain(&p, &CakeConfig::default(), 2).unwrap();
            assert_eq!(
                (
                    e.meta.keys.protocol,
                    e.meta.keys.src_port,
                    e.meta.keys.dst_port
                ),
                (proto, 1, 80),
                "{name}"
            );
            let shown = e.to_string();
            assert!(
                shown.contains(&format!("packet:     {name} 10.0.0.1:1 > 10.0.0.2:80"))
                    && shown.contains(&format!("Ipv4 {name} ports 1 > 80")),
                "{shown}"
            );
            // Another port pair is another flow, as it is for the data path.
            let q = PacketSpec::parse(&format!("{name} 10.0.0.1:2 > 10.0.0.2:80")).unwrap();
            let other = explain(&q, &CakeConfig::default(), 2).unwrap();
            assert_ne!(e.class.flow_hash, other.class.flow_hash, "{name}");
        }
    }

    #[test]
    fn every_protocol_number_keeps_its_number_dscp_and_ecn_in_both_families() {
        for spec in [
            "10.0.0.1:1 > 10.0.0.2:2",
            "[2001:db8::1]:1 > [2001:db8::2]:2",
        ] {
            for proto in 0..=255u8 {
                let p =
                    PacketSpec::parse(&format!("{proto} {spec} dscp ef ecn ce vlan 7")).unwrap();
                let m = p.meta();
                assert_eq!(
                    (m.keys.protocol, m.dscp, m.ecn),
                    (proto, 46, 3),
                    "{proto} {spec}"
                );
            }
        }
    }

    #[test]
    fn protocols_are_shown_by_name() {
        let p = PacketSpec::parse("tcp 10.0.0.1:1234 > 10.0.0.2:80").unwrap();
        let shown = explain(&p, &CakeConfig::default(), 1).unwrap().to_string();
        assert!(
            shown.starts_with("packet:     tcp 10.0.0.1:1234"),
            "{shown}"
        );
        assert!(!shown.contains("proto 6"), "{shown}");
        assert_eq!(protocol_name(47), "proto 47");
        let p = PacketSpec::parse("47 10.0.0.1 > 10.0.0.2").unwrap();
        let shown = explain(&p, &CakeConfig::default(), 1).unwrap().to_string();
        assert!(shown.starts_with("packet:     proto 47 "), "{shown}");
    }

    #[test]
    fn vlan_tags_in_the_spec_reach_the_parser_and_do_not_change_the_flow() {
        let plain = PacketSpec::parse("udp 10.0.0.1:5 > 10.0.0.2:53 dscp ef").unwrap();
        let tagged = PacketSpec::parse("udp 10.0.0.1:5 > 10.0.0.2:53 dscp ef vlan 100").unwrap();
        let qinq = PacketSpec::parse("udp 10.0.0.1:5 > 10.0.0.2:53 dscp ef vlan 100.20").unwrap();
        assert_eq!(tagged.vlan, vec![100]);
        assert_eq!(qinq.vlan, vec![100, 20]);
        let cake = CakeConfig::default();
        let (e0, e1, e2) = (
            explain(&plain, &cake, 4).unwrap(),
            explain(&tagged, &cake, 4).unwrap(),
            explain(&qinq, &cake, 4).unwrap(),
        );
        assert_eq!((e1.meta.l2_len, e2.meta.l2_len), (18, 22));
        for e in [&e1, &e2] {
            assert_eq!(e.meta.keys, e0.meta.keys);
            assert_eq!(
                (e.queue, e.class.tin, e.class.flow),
                (e0.queue, e0.class.tin, e0.class.flow)
            );
        }
        let shown = e2.to_string();
        assert!(
            shown.contains("ecn 0 vlan 100.20") && shown.contains("behind 2 VLAN tags"),
            "{shown}"
        );
        for bad in ["vlan 4096", "vlan x", "vlan 1.2.3", "vlan"] {
            let e = PacketSpec::parse(&format!("10.0.0.1 > 10.0.0.2 {bad}")).unwrap_err();
            assert!(
                matches!(e, SpecError::BadVlan(_) | SpecError::BadKeyword(_)),
                "{bad}: {e}"
            );
        }
    }

    /// The parser's own account, not the L2 length: 26 bytes is one tag and a PPPoE header
    /// (the length alone said "3 VLAN tags"), 22 bytes two MPLS labels (it said 2 tags).
    #[test]
    fn pppoe_over_vlan_and_mpls_are_shown_as_the_parser_walked_them() {
        let cake = CakeConfig::default();
        let plain = explain(
            &PacketSpec::parse("udp 100.64.0.1:5 > 10.0.0.2:53 dscp ef").unwrap(),
            &cake,
            4,
        )
        .unwrap();
        let pppoe = PacketSpec::parse("udp 100.64.0.1:5 > 10.0.0.2:53 dscp ef vlan 100 pppoe 0x2a")
            .unwrap();
        assert_eq!((pppoe.pppoe, pppoe.vlan.as_slice()), (Some(42), &[100][..]));
        let e = explain(&pppoe, &cake, 4).unwrap();
        assert_eq!((e.vlan_tags, e.encapsulation), (1, Encapsulation::Pppoe));
        assert_eq!(e.meta.l2_len, 26);
        assert_eq!(
            (e.meta.keys, e.queue, e.class.tin),
            (plain.meta.keys, plain.queue, plain.class.tin)
        );
        let shown = e.to_string();
        assert!(
            shown.contains("vlan 100 pppoe 42")
                && shown.contains(", behind 1 VLAN tag and a PPPoE session\n"),
            "{shown}"
        );

        let mpls =
            PacketSpec::parse("tcp [2001:db8::1]:5 > [2001:db8::2]:80 mpls 16.1048575").unwrap();
        let e = explain(&mpls, &cake, 1).unwrap();
        assert_eq!((e.vlan_tags, e.encapsulation), (0, Encapsulation::Mpls(2)));
        assert_eq!((e.meta.l2_len, e.meta.keys.dst_port), (22, 80));
        let shown = e.to_string();
        assert!(
            shown.contains("mpls 16.1048575") && shown.contains(", behind 2 MPLS labels\n"),
            "{shown}"
        );

        for bad in [
            "pppoe 65536",
            "pppoe x",
            "mpls 1048576",
            "mpls 1.2.3.4.5.6.7.8.9",
            "mpls 1..2",
            "pppoe 1 mpls 2",
        ] {
            let e = PacketSpec::parse(&format!("10.0.0.1 > 10.0.0.2 {bad}")).unwrap_err();
            assert!(matches!(e, SpecError::BadEncapsulation(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn flags_that_repeat_the_spec_are_refused_not_ignored() {
        let words = |s: &str| vec![s.to_string()];
        let flags = SpecFlags {
            proto: Some("udp"),
            ..SpecFlags::default()
        };
        let e = compose_spec(&words("tcp 10.0.0.1:1 > 10.0.0.2:2"), &flags).unwrap_err();
        assert!(e.to_string().starts_with("--proto is given as well"), "{e}");
        // A spec without a protocol takes the flag's.
        let t = compose_spec(&words("10.0.0.1:1 > 10.0.0.2:2"), &flags).unwrap();
        assert_eq!(PacketSpec::parse(&t).unwrap().protocol, 17);
        let src = SpecFlags {
            src: Some("10.0.0.9"),
            ..SpecFlags::default()
        };
        assert!(compose_spec(&words("10.0.0.1 > 10.0.0.2"), &src).is_err());
        assert_eq!(compose_spec(&[], &src), Err(SpecError::NoPacket));
        let only_flags = SpecFlags {
            proto: Some("sctp"),
            src: Some("10.0.0.1:7"),
            dst: Some("10.0.0.2:9"),
            dscp: Some("ef"),
        };
        let p = PacketSpec::parse(&compose_spec(&[], &only_flags).unwrap()).unwrap();
        assert_eq!((p.protocol, p.src_port, p.dscp), (132, 7, 46));
        let dscp = SpecFlags {
            dscp: Some("cs1"),
            ..SpecFlags::default()
        };
        let t = compose_spec(&words("10.0.0.1 > 10.0.0.2 dscp ef"), &dscp).unwrap();
        assert!(matches!(PacketSpec::parse(&t), Err(SpecError::Repeated(_))));
    }

    #[test]
    fn icmp_packets_have_no_ports() {
        let p = PacketSpec::parse("icmp 10.0.0.1 > 10.0.0.2").unwrap();
        let e = explain(&p, &CakeConfig::default(), 2).unwrap();
        assert_eq!(e.meta.keys.protocol, 1);
        assert_eq!(e.meta.keys.src_port, 0);
    }
}
