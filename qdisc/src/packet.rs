//! The packet contract between the qdisc and the I/O layers: [`Packet`] is implemented by
//! each backend's owned buffer type, and [`PacketMeta`] carries the header facts the caller's
//! parser (`forwarder::wire`) found, so the qdisc never parses bytes itself.

/// An owned packet buffer. The qdisc never copies or inspects payload; it only asks for the
/// length, marks ECN, and (with the ACK filter on) asks for TCP ACK facts.
pub trait Packet {
    /// Frame length in bytes as seen on the link layer, L2 header included, FCS excluded.
    fn len(&self) -> usize;

    /// Returns true for a zero-length frame (never queued by a sane backend).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Memory footprint charged against the memory limit (the kernel's `skb->truesize`; for a
    /// DPDK mbuf, its buffer size). Defaults to the frame length.
    fn footprint(&self) -> usize {
        self.len()
    }

    /// Sets ECN Congestion Experienced. Returns true when the packet was ECN-capable
    /// (ECT(0), ECT(1) or already CE) and now carries CE; false when it is not ECN-capable
    /// (or not IP), in which case it is unchanged and the caller must drop it instead.
    fn set_ce(&mut self) -> bool;

    /// Clears the DSCP and keeps the ECN bits (CAKE's `wash`, sch_cake.c
    /// `cake_handle_diffserv`). CAKE calls it after it has chosen the packet's tin from the
    /// DSCP, so the marks still classify here and are gone downstream. A packet that is not
    /// IP stays as it is; the default does nothing.
    fn wash_dscp(&mut self) {}

    /// TCP ACK facts for the ACK filter, or `None` when this is not a TCP segment (or could not
    /// be parsed). Only called when the ACK filter is on.
    fn tcp_ack_info(&self) -> Option<TcpAckInfo> {
        None
    }
}

/// Which network layer protocol the parser found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L3Kind {
    /// Not IP (ARP, malformed or truncated frames, other ethertypes): flow 0, default tin.
    #[default]
    NonIp,
    /// IPv4; addresses are stored IPv4-mapped in the 16-byte fields.
    Ipv4,
    /// IPv6.
    Ipv6,
}

/// The flow identity found in a packet's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKeys {
    /// Network protocol.
    pub l3: L3Kind,
    /// Source address (IPv4 as `::ffff:a.b.c.d`).
    pub src_addr: [u8; 16],
    /// Destination address (IPv4 as `::ffff:a.b.c.d`).
    pub dst_addr: [u8; 16],
    /// Transport protocol number (6 TCP, 17 UDP, 1 ICMP, ...); 0 when unknown.
    pub protocol: u8,
    /// Source port (0 when the protocol has none or for non-first fragments).
    pub src_port: u16,
    /// Destination port (0 when the protocol has none or for non-first fragments).
    pub dst_port: u16,
    /// IPv6 flow label (20 bits), 0 for IPv4. A non-zero label replaces the ports in the
    /// flow key, as in the kernel's dissector.
    pub flow_label: u32,
}

/// Header facts about one packet, filled by the caller's parser before enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketMeta {
    /// Flow identity.
    pub keys: FlowKeys,
    /// DSCP (0..=63). ARP is reported as 56 (CS7), as the kernel's CAKE does.
    pub dscp: u8,
    /// The two ECN bits of the IP header (0 = not ECT).
    pub ecn: u8,
    /// A precomputed L4 hash (a NIC's RSS hash over the 4-tuple), reused as the flow hash when
    /// valid and the keys were not rewritten, as sch_cake.c's `cake_hash` reuses `skb->hash`.
    pub l4_hash: Option<u32>,
    /// True when a rewrite (NAT) changed the keys after `l4_hash` was computed.
    pub keys_rewritten: bool,
    /// Firewall-mark-style tin override, masked by the config's fwmark mask.
    pub mark: u32,
    /// Bytes of link-layer header before the network header (14 for untagged Ethernet),
    /// subtracted when an overhead is configured (sch_cake.c `cake_overhead`).
    pub l2_len: u16,
    /// Segments in a GSO super-frame (0 or 1 for an ordinary packet).
    pub gso_segs: u16,
    /// The circuit (subscriber) slot the caller's classifier chose, for
    /// [`crate::circuit::CircuitShaper`]; `None` when the packet matched no circuit (the
    /// default class). Every other discipline ignores it.
    pub circuit: Option<u32>,
}

/// What the ACK filter needs to know about a TCP segment (sch_cake.c `cake_ack_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpAckInfo {
    /// The TCP flags byte (FIN=0x01 SYN=0x02 RST=0x04 PSH=0x08 ACK=0x10 URG=0x20 ECE=0x40 CWR=0x80).
    pub flags: u8,
    /// Acknowledgement number.
    pub ack_seq: u32,
    /// TCP payload bytes.
    pub payload_len: u16,
    /// Timestamp option (TSval, TSecr), if present.
    pub timestamp: Option<(u32, u32)>,
    /// SACK blocks (left, right edges); only the first `sack_count` are valid.
    pub sack: [(u32, u32); 4],
    /// Number of valid SACK blocks.
    pub sack_count: u8,
    /// True when an option other than NOP, EOL, MD5, SACK or timestamp is present (or an
    /// option is malformed): such a segment is never filtered.
    pub other_options: bool,
}
