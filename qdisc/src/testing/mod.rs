//! Test helpers shared by this crate's tests, other crates' tests and the fuzz targets:
//! [`TestPacket`], a packet that records its flow and sequence number so tests can check
//! conservation and per-flow order, and [`Harness`], a virtual-time driver that feeds
//! constant-rate [`Source`]s into any [`Qdisc`] and records what comes out, stepping the
//! clock straight to the next arrival or shaper wake-up (quinn's `Pair`, sans-I/O).
//! [`DrrFloor`] is the benchmarks' floor under CAKE.

mod floor;

pub use floor::DrrFloor;

use hdrhistogram::Histogram;

use crate::{Dequeue, FlowKeys, L3Kind, Packet, PacketMeta, Qdisc, Rate, TcpAckInfo};

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
    /// TCP ACK facts returned to the ACK filter (`None`: not TCP).
    pub ack: Option<TcpAckInfo>,
    /// Set when the qdisc washed its DSCP.
    pub washed: bool,
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
            ack: None,
            washed: false,
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

    fn wash_dscp(&mut self) {
        self.washed = true;
    }

    fn tcp_ack_info(&self) -> Option<TcpAckInfo> {
        self.ack
    }
}

/// A packet for benchmarks, as small as a DPDK mbuf pointer: just its length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LenPacket(pub u32);

impl Packet for LenPacket {
    fn len(&self) -> usize {
        self.0 as usize
    }

    fn set_ce(&mut self) -> bool {
        false
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

/// A constant-bit-rate packet source for the [`Harness`].
#[derive(Debug, Clone)]
pub struct Source {
    /// Flow id written into every packet (the index into [`Harness::flows`]).
    pub flow: u32,
    /// Header facts given to the qdisc with every packet.
    pub meta: PacketMeta,
    /// Frame length of every packet.
    pub len: usize,
    /// Time between two packets (ns).
    pub gap_ns: u64,
    /// First packet time.
    pub start_ns: u64,
    /// No packets at or after this time.
    pub stop_ns: u64,
    /// Whether packets are ECN-capable.
    pub ect: bool,
    next_ns: u64,
    seq: u64,
}

impl Source {
    /// A source sending `len`-byte packets of `flow` at `rate` (frame bytes) from time 0 on.
    pub fn cbr(flow: u32, meta: PacketMeta, len: usize, rate: Rate) -> Source {
        let gap_ns =
            ((len as u128 * 1_000_000_000) / u128::from(rate.bytes_per_sec().max(1))) as u64;
        Source {
            flow,
            meta,
            len,
            gap_ns: gap_ns.max(1),
            start_ns: 0,
            stop_ns: u64::MAX,
            ect: false,
            next_ns: 0,
            seq: 0,
        }
    }

    /// Restricts the source to `[start_ns, stop_ns)`.
    pub fn window(mut self, start_ns: u64, stop_ns: u64) -> Source {
        self.start_ns = start_ns;
        self.stop_ns = stop_ns;
        self.next_ns = start_ns;
        self
    }

    /// Makes the packets ECN-capable.
    pub fn ect(mut self) -> Source {
        self.ect = true;
        self
    }
}

/// What the [`Harness`] saw of one flow.
#[derive(Debug, Clone)]
pub struct FlowRecord {
    /// Packets offered to the qdisc.
    pub offered_packets: u64,
    /// Packets that came out.
    pub delivered_packets: u64,
    /// Frame bytes that came out.
    pub delivered_bytes: u64,
    /// Delivered packets carrying CE.
    pub ce_marked: u64,
    /// Highest sequence number delivered so far.
    pub last_seq: Option<u64>,
    /// Packets delivered with a sequence number not above the previous one (reordering or
    /// duplication).
    pub order_violations: u64,
    /// Sojourn (queueing delay) of delivered packets, in ns.
    pub delay_ns: Histogram<u64>,
    /// Sojourn of packets delivered at or after [`Harness::measure_from_ns`].
    pub steady_delay_ns: Histogram<u64>,
    /// Frame bytes delivered at or after [`Harness::measure_from_ns`].
    pub steady_bytes: u64,
}

impl Default for FlowRecord {
    fn default() -> FlowRecord {
        let h = || Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
        FlowRecord {
            offered_packets: 0,
            delivered_packets: 0,
            delivered_bytes: 0,
            ce_marked: 0,
            last_seq: None,
            order_violations: 0,
            delay_ns: h(),
            steady_delay_ns: h(),
            steady_bytes: 0,
        }
    }
}

/// A virtual-time test bench: sources → qdisc → (optional) bottleneck link → records.
///
/// [`Harness::run_until`] processes events in time order: arrivals due now are enqueued,
/// then the qdisc is drained while the link is free, then the clock jumps to the earliest
/// of the next arrival, the qdisc's `NotBefore` time and the link becoming free. Ten
/// simulated seconds of a 1 Gbit/s shaper take well under a second of CPU.
#[derive(Debug)]
pub struct Harness<Q> {
    /// The discipline under test.
    pub qdisc: Q,
    /// Virtual time (ns).
    pub now_ns: u64,
    /// Per-flow records, indexed by [`Source::flow`].
    pub flows: Vec<FlowRecord>,
    /// Packets offered in total.
    pub offered_packets: u64,
    /// Frame bytes offered in total.
    pub offered_bytes: u64,
    /// Packets the qdisc reported dropped from `enqueue`.
    pub enqueue_dropped_packets: u64,
    /// Packets delivered in total.
    pub delivered_packets: u64,
    /// Frame bytes delivered in total.
    pub delivered_bytes: u64,
    /// Steady-state measurements (`steady_*` in [`FlowRecord`]) start here.
    pub measure_from_ns: u64,
    /// When set, every delivered `(flow, seq)` is appended here.
    pub log: Option<Vec<(u32, u64)>>,
    sources: Vec<Source>,
    link_rate: Rate,
    link_free_ns: u64,
}

impl<Q: Qdisc<TestPacket>> Harness<Q> {
    /// A harness around `qdisc` with an infinitely fast link.
    pub fn new(qdisc: Q) -> Harness<Q> {
        Harness {
            qdisc,
            now_ns: 0,
            flows: Vec::new(),
            offered_packets: 0,
            offered_bytes: 0,
            enqueue_dropped_packets: 0,
            delivered_packets: 0,
            delivered_bytes: 0,
            measure_from_ns: 0,
            log: None,
            sources: Vec::new(),
            link_rate: Rate::UNLIMITED,
            link_free_ns: 0,
        }
    }

    /// Puts a bottleneck link of `rate` (frame bytes) after the qdisc: after each packet
    /// the harness waits for it to serialize before dequeuing the next one, as a NIC ring
    /// would. This is what paces an unlimited qdisc.
    pub fn with_link(mut self, rate: Rate) -> Harness<Q> {
        self.link_rate = rate;
        self
    }

    /// Adds a source.
    pub fn add(&mut self, mut source: Source) {
        source.next_ns = source.next_ns.max(source.start_ns);
        let need = source.flow as usize + 1;
        if self.flows.len() < need {
            self.flows.resize_with(need, FlowRecord::default);
        }
        self.sources.push(source);
    }

    /// The record of `flow`.
    pub fn flow(&self, flow: u32) -> &FlowRecord {
        &self.flows[flow as usize]
    }

    fn record(&mut self, p: TestPacket) {
        let now = self.now_ns;
        let steady = now >= self.measure_from_ns;
        let rec = &mut self.flows[p.flow as usize];
        rec.delivered_packets += 1;
        rec.delivered_bytes += p.len as u64;
        rec.ce_marked += u64::from(p.ce);
        if rec.last_seq.is_some_and(|s| p.seq <= s) {
            rec.order_violations += 1;
        }
        rec.last_seq = Some(p.seq);
        let delay = now.saturating_sub(p.sent_ns).max(1);
        rec.delay_ns.saturating_record(delay);
        if steady {
            rec.steady_delay_ns.saturating_record(delay);
            rec.steady_bytes += p.len as u64;
        }
        self.delivered_packets += 1;
        self.delivered_bytes += p.len as u64;
        if let Some(log) = &mut self.log {
            log.push((p.flow, p.seq));
        }
        if !self.link_rate.is_unlimited() {
            let ser = (p.len as u128 * 1_000_000_000) / u128::from(self.link_rate.bytes_per_sec());
            self.link_free_ns = now + ser as u64;
        }
    }

    fn arrivals(&mut self) {
        let now = self.now_ns;
        for i in 0..self.sources.len() {
            while self.sources[i].next_ns <= now
                && self.sources[i].next_ns < self.sources[i].stop_ns
            {
                let src = &mut self.sources[i];
                let mut p = TestPacket::new(src.len, src.flow, src.seq);
                p.ect = src.ect;
                p.sent_ns = now;
                src.seq += 1;
                src.next_ns += src.gap_ns;
                let meta = src.meta;
                let flow = src.flow as usize;
                self.flows[flow].offered_packets += 1;
                self.offered_packets += 1;
                self.offered_bytes += p.len as u64;
                let r = self.qdisc.enqueue(now, p, &meta);
                self.enqueue_dropped_packets += u64::from(r.dropped_packets);
            }
        }
    }

    /// Runs the simulation until `end_ns` (inclusive of events at `end_ns`).
    pub fn run_until(&mut self, end_ns: u64) {
        loop {
            self.arrivals();
            let mut wake = None;
            while self.link_free_ns <= self.now_ns {
                match self.qdisc.dequeue(self.now_ns) {
                    Dequeue::Packet(p) => self.record(p),
                    Dequeue::NotBefore(t) => {
                        wake = Some(t);
                        break;
                    }
                    Dequeue::Empty => break,
                }
            }
            if self.link_free_ns > self.now_ns && !self.qdisc.is_empty() {
                wake = Some(self.link_free_ns);
            }
            let next_arrival = self
                .sources
                .iter()
                .filter(|s| s.next_ns < s.stop_ns)
                .map(|s| s.next_ns)
                .min();
            let next = match (wake, next_arrival) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => {
                        self.now_ns = self.now_ns.max(end_ns);
                        return;
                    }
                },
            };
            if next > end_ns {
                self.now_ns = self.now_ns.max(end_ns);
                return;
            }
            self.now_ns = next.max(self.now_ns + 1);
        }
    }

    /// Dequeues everything left at the current time (ignoring the link and the shaper's
    /// timing: it steps to each wake-up), for conservation checks at the end of a run.
    pub fn drain(&mut self) {
        self.sources.clear();
        let mut guard = 0u64;
        while !self.qdisc.is_empty() && guard < 100_000_000 {
            guard += 1;
            match self.qdisc.dequeue(self.now_ns) {
                Dequeue::Packet(p) => self.record(p),
                Dequeue::NotBefore(t) => self.now_ns = t.max(self.now_ns + 1),
                Dequeue::Empty => break,
            }
        }
    }
}
