//! Test helpers shared by this crate's tests, other crates' tests and the fuzz targets:
//! [`TestPacket`], a packet that records its flow and sequence number so tests can check
//! conservation and per-flow order.

use crate::{FlowKeys, L3Kind, Packet, PacketMeta};

/// A packet for tests: a length, an ECN capability, and the identity needed to check order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestPacket {
    /// Frame length in bytes.
    pub len: usize,
    /// Whether the packet is ECN-capable (ECT).
    pub ect: bool,
    /// Set when the qdisc marked CE.
    pub ce: bool,
    /// Which flow the test put it in.
    pub flow: u32,
    /// Per-flow sequence number.
    pub seq: u64,
    /// When the test enqueued it (ns).
    pub sent_ns: u64,
}

impl TestPacket {
    /// A non-ECT packet of `len` bytes in `flow` with sequence `seq`.
    pub fn new(len: usize, flow: u32, seq: u64) -> TestPacket {
        TestPacket {
            len,
            ect: false,
            ce: false,
            flow,
            seq,
            sent_ns: 0,
        }
    }
}

impl Packet for TestPacket {
    fn len(&self) -> usize {
        self.len
    }

    fn set_ce(&mut self) -> bool {
        if self.ect {
            self.ce = true;
        }
        self.ect
    }
}

/// IPv4 UDP metadata for flow number `flow` from host `src_host` to host `dst_host`.
pub fn udp_meta(src_host: u32, dst_host: u32, flow: u32, dscp: u8) -> PacketMeta {
    let mut keys = FlowKeys {
        l3: L3Kind::Ipv4,
        protocol: 17,
        ..FlowKeys::default()
    };
    keys.src_addr[10] = 0xff;
    keys.src_addr[11] = 0xff;
    keys.src_addr[12..16].copy_from_slice(&(0x0a00_0000 | src_host).to_be_bytes());
    keys.dst_addr[10] = 0xff;
    keys.dst_addr[11] = 0xff;
    keys.dst_addr[12..16].copy_from_slice(&(0x0a01_0000 | dst_host).to_be_bytes());
    keys.src_port = 1024 + (flow % 60000) as u16;
    keys.dst_port = 5000 + (flow / 60000) as u16;
    PacketMeta {
        keys,
        dscp,
        l2_len: 14,
        ..PacketMeta::default()
    }
}
