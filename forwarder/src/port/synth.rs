//! The built-in packet generator and verifying sink: `cakewalk run` with no config uses it.
//!
//! The receive half ([`SynthRx`]) builds UDP frames for N flows (IPv4 and/or IPv6, fixed size
//! or IMIX 7:4:1 of 64/576/1500 bytes, a DSCP per flow from a weighted mix), paced to an
//! offered rate by a token bucket refilled once per burst from the worker's burst clock, or
//! flat out. Every payload carries a magic, the flow id, a per-flow sequence number and the
//! send time. The transmit half ([`SynthTx`]) is the sink: it checks each flow's sequence
//! (reordering, duplicates; loss is `sent - unique received`), counts CE marks and records
//! one-way delay in an HDR histogram. Both halves publish their counters once per burst into a
//! shared [`SynthStats`] (single writer, relaxed stores), never per packet.
//!
//! Frames are never sent anywhere by this module; the addresses inside them are from the
//! benchmarking ranges (198.18.0.0/15, 2001:2::/48). Padding bytes after the 22-byte payload
//! header are whatever the pool buffer held before. UDP checksums are left zero (per-packet
//! checksumming would cost more than the rest of the generator): fine for IPv4 and for the
//! forwarder, but a Linux host receiving the IPv6 frames drops them, so feed kernels IPv4.

use std::str::FromStr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::pool::{Pool, PoolBuf};
use super::{PortBuf, PortRx, PortTx};
use crate::clock;
use crate::counters::synth::{
    new_delay_histogram, GenCounters, SinkCounters, SynthStats, HIST_MAX_NS,
};

/// Bytes of synth header at the start of the UDP payload: magic, flow, sequence, timestamp.
pub const PAYLOAD_HEADER_LEN: usize = 22;
const MAGIC: [u8; 2] = *b"cw";
const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
/// The smallest IPv4 frame that holds the synth header (64 bytes).
pub const MIN_FRAME_V4: usize = ETH_LEN + IPV4_LEN + UDP_LEN + PAYLOAD_HEADER_LEN;
/// The smallest IPv6 frame that holds the synth header (84 bytes).
pub const MIN_FRAME_V6: usize = ETH_LEN + IPV6_LEN + UDP_LEN + PAYLOAD_HEADER_LEN;
const IMIX: [usize; 3] = [64, 576, 1500];
const IMIX_WEIGHTS: [usize; 3] = [7, 4, 1];
/// How often the sink publishes its delay histogram (ns).
const HIST_PUBLISH_NS: u64 = 50_000_000;

/// Why a synth setting was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SynthError {
    /// The packet size is neither a number nor `imix`.
    #[error(
        "packet size '{0}' is not valid; use a frame length in bytes from 64 to 1518 or 'imix'"
    )]
    BadSize(String),
    /// The DSCP mix could not be parsed.
    #[error("dscp mix '{0}' is not valid; use 'value:weight' pairs like '0:8,46:1' (names: be, cs1..cs7, af11..af43, ef)")]
    BadDscp(String),
    /// The offered rate could not be parsed.
    #[error("offered rate '{0}' is not a rate; try 'auto', '500mbit', '2gbit', a packet rate such as '1mpps' or '500kpps', or 'unlimited'")]
    BadRate(String),
    /// The duration could not be parsed.
    #[error("duration '{0}' is not a duration; try '10s' or '500ms'")]
    BadDuration(String),
    /// Zero flows.
    #[error("flows = 0 generates nothing; use at least 1 flow")]
    NoFlows,
}

/// Which IP version(s) the generator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IpVersion {
    /// IPv4 only.
    #[default]
    Ipv4,
    /// IPv6 only.
    Ipv6,
    /// Even flows IPv4, odd flows IPv6.
    Mixed,
}

/// How a port's generator splits its flows between its receive queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RxSteering {
    /// By flow, round robin: as a NIC's RSS spreads flows, whatever their subscriber.
    #[default]
    Flow,
    /// With circuits, each circuit's flows on the receive queue of the worker that owns the
    /// circuit's TX queue, as a NIC's flow rules (rte_flow) or XDP's cpumap steer by
    /// subscriber prefix; flows of no circuit round robin. Without circuits, as `flow`.
    Circuit,
}

/// Frame sizes the generator emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PacketSize {
    /// Every frame this long (bytes, FCS excluded; raised to the minimum for the IP version).
    Fixed(usize),
    /// The simple IMIX: 64, 576 and 1500 bytes in the ratio 7:4:1.
    #[default]
    Imix,
}

impl FromStr for PacketSize {
    type Err = SynthError;
    fn from_str(s: &str) -> Result<Self, SynthError> {
        let t = s.trim().to_ascii_lowercase();
        if t == "imix" {
            return Ok(PacketSize::Imix);
        }
        match t.trim_end_matches('b').parse::<usize>() {
            Ok(n) if (60..=9216).contains(&n) => Ok(PacketSize::Fixed(n)),
            _ => Err(SynthError::BadSize(s.to_string())),
        }
    }
}

/// Written as it is read: a number of bytes, or "imix".
impl Serialize for PacketSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PacketSize::Fixed(n) => s.serialize_u64(*n as u64),
            PacketSize::Imix => s.serialize_str("imix"),
        }
    }
}

impl<'de> Deserialize<'de> for PacketSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            N(u64),
            S(String),
        }
        let s = match Repr::deserialize(d)? {
            Repr::N(n) => n.to_string(),
            Repr::S(s) => s,
        };
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The `[ports.synth]` table: what the built-in generator sends.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthConfig {
    /// Number of flows (distinct UDP 5-tuples).
    pub flows: u32,
    /// IP version(s).
    pub ip: IpVersion,
    /// Frame size: a number of bytes or "imix".
    pub size: PacketSize,
    /// DSCP mix as "value:weight" pairs; each flow gets one DSCP, spread by weight.
    pub dscp: String,
    /// Mark packets ECN-capable (ECT(0)) so the AQM marks instead of dropping.
    pub ecn: bool,
    /// Offered rate per generator: a bit rate ("500mbit"), a packet rate ("1mpps", "500kpps",
    /// "20000pps"), "unlimited" for flat out, or "auto" (the default): [`AUTO_OFFER_FACTOR`]
    /// times the shaped rate, flat out when the shaper is unlimited ([`resolve_auto_rate`]).
    pub rate: String,
    /// Stop after this many packets per generating port (0 = no limit).
    pub packets: u64,
    /// Stop generating after this long ("10s"; empty = no limit of its own).
    pub duration: String,
    /// Seed for flow DSCP assignment and the IMIX order.
    pub seed: u64,
    /// Generate on port B too (towards A), not only on port A.
    pub both_directions: bool,
    /// How flows are split between a port's receive queues ("flow" or "circuit").
    pub rx_steering: RxSteering,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            flows: 64,
            ip: IpVersion::Ipv4,
            size: PacketSize::Imix,
            dscp: "0".into(),
            ecn: false,
            rate: "auto".into(),
            packets: 0,
            duration: String::new(),
            seed: 1,
            both_directions: false,
            rx_steering: RxSteering::Flow,
        }
    }
}

/// How many times the shaped rate the generator offers by default: enough over the rate that
/// a queue builds and CAKE shows its work (and drops what the link cannot carry), not so
/// much that the run is mostly a flood of drops.
pub const AUTO_OFFER_FACTOR: u64 = 2;

/// How fast a generator offers frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Flat out.
    Unlimited,
    /// Bits per second of frames.
    Bits(u64),
    /// Frames per second, whatever their size (pktgen style).
    Packets(u64),
    /// [`AUTO_OFFER_FACTOR`] times the shaped rate; flat out until resolved
    /// ([`resolve_auto_rate`]).
    Auto,
}

/// Parses an offered rate: "auto", a tc-style bit rate ("500mbit", "2gbit"), a packet rate
/// ("1mpps", "500kpps", "20000pps", "1.5mpps") or "unlimited" / "0" / "".
///
/// # Errors
/// [`SynthError::BadRate`] naming the value, with examples.
pub fn parse_pace(s: &str) -> Result<Pace, SynthError> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || SynthError::BadRate(s.into());
    match t.as_str() {
        "" | "0" | "unlimited" => return Ok(Pace::Unlimited),
        "auto" => return Ok(Pace::Auto),
        _ => {}
    }
    if let Some(num) = t.strip_suffix("pps") {
        let (num, scale) = match num.as_bytes().last() {
            Some(b'k') => (&num[..num.len() - 1], 1e3),
            Some(b'm') => (&num[..num.len() - 1], 1e6),
            Some(b'g') => (&num[..num.len() - 1], 1e9),
            _ => (num, 1.0),
        };
        let v: f64 = num.trim().parse().map_err(|_| bad())?;
        let pps = v * scale;
        if !(1.0..=1e12).contains(&pps) {
            return Err(bad());
        }
        return Ok(Pace::Packets(pps.round() as u64));
    }
    crate::config::units::parse_rate(&t)
        .map(|r| match r.bits_per_sec() {
            0 => Pace::Unlimited,
            b => Pace::Bits(b),
        })
        .map_err(|_| bad())
}

/// Parses a tc-style rate ("500mbit", "2gbit", "unlimited") into bits per second through
/// [`crate::config::units`]; 0 means unlimited (and "auto", until resolved, too).
///
/// # Errors
/// [`SynthError::BadRate`], also for a packet rate, which has no bit rate.
pub fn parse_rate_bps(s: &str) -> Result<u64, SynthError> {
    match parse_pace(s)? {
        Pace::Unlimited | Pace::Auto => Ok(0),
        Pace::Bits(b) => Ok(b),
        Pace::Packets(_) => Err(SynthError::BadRate(s.into())),
    }
}

/// The offered rate "auto" stands for with a shaper at `shaped_bps` (0: unlimited), as a
/// rate string: [`AUTO_OFFER_FACTOR`] times it, or "unlimited". Any other rate is returned
/// as it is.
pub fn resolve_auto_rate(rate: &str, shaped_bps: u64) -> String {
    if rate.trim().eq_ignore_ascii_case("auto") {
        if shaped_bps == 0 {
            "unlimited".to_string()
        } else {
            crate::config::units::format_rate(qdisc::Rate::from_bits_per_sec(
                shaped_bps.saturating_mul(AUTO_OFFER_FACTOR),
            ))
        }
    } else {
        rate.to_string()
    }
}

/// Parses a duration ("10s", "500ms") into ns through
/// [`crate::config::units::parse_optional_duration_ns`]; empty or "0" means none.
pub fn parse_duration_ns(s: &str) -> Result<Option<u64>, SynthError> {
    crate::config::units::parse_optional_duration_ns(s)
        .map_err(|_| SynthError::BadDuration(s.into()))
}

/// Parses a DSCP mix ("0:8,46:1", "ef", "cs1:1,be:4") into (dscp, weight) pairs.
pub fn parse_dscp_mix(s: &str) -> Result<Vec<(u8, u32)>, SynthError> {
    let bad = || SynthError::BadDscp(s.to_string());
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (v, w) = match part.split_once(':') {
            Some((v, w)) => (v.trim(), w.trim().parse::<u32>().map_err(|_| bad())?),
            None => (part, 1),
        };
        let dscp = dscp_by_name(v).ok_or_else(bad)?;
        if w > 0 {
            out.push((dscp, w));
        }
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

fn dscp_by_name(v: &str) -> Option<u8> {
    let v = v.to_ascii_lowercase();
    if let Ok(n) = v.parse::<u8>() {
        return (n < 64).then_some(n);
    }
    let named = match v.as_str() {
        "be" | "cs0" | "df" => 0,
        "le" => 1,
        "ef" => 46,
        "va" => 44,
        _ => {
            if let Some(c) = v.strip_prefix("cs") {
                let n: u8 = c.parse().ok()?;
                return (n <= 7).then_some(n * 8);
            }
            let a = v.strip_prefix("af")?.as_bytes();
            if a.len() != 2 {
                return None;
            }
            let (class, prec) = (a[0].wrapping_sub(b'0'), a[1].wrapping_sub(b'0'));
            if !(1..=4).contains(&class) || !(1..=3).contains(&prec) {
                return None;
            }
            return Some(class * 8 + prec * 2);
        }
    };
    Some(named)
}

/// A small deterministic generator (splitmix64) for the seedable choices.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The generator settings after parsing, shared by the queues of one port.
#[derive(Debug, Clone)]
pub struct SynthPlan {
    flows: u32,
    ip: IpVersion,
    sizes: Vec<usize>,
    dscp_of_flow: Vec<u8>,
    ecn: bool,
    pace: Pace,
    packets: u64,
    duration_ns: Option<u64>,
    /// Port index folded into addresses so A->B and B->A flows differ.
    port: u8,
    /// The receive queue of each flow when it is not round robin ([`SynthPlan::steer`]).
    rx_queue_of_flow: Option<Arc<[u16]>>,
}

impl SynthPlan {
    /// Validates `cfg` for the generator on port `port` (0 = A, 1 = B).
    pub fn new(cfg: &SynthConfig, port: u8) -> Result<SynthPlan, SynthError> {
        if cfg.flows == 0 {
            return Err(SynthError::NoFlows);
        }
        let mix = parse_dscp_mix(&cfg.dscp)?;
        let pace = parse_pace(&cfg.rate)?;
        let duration_ns = parse_duration_ns(&cfg.duration)?;
        let mut rng = SplitMix(cfg.seed ^ u64::from(port).wrapping_mul(0x1234_5678_9abc));
        let sizes = match cfg.size {
            PacketSize::Fixed(n) => vec![n],
            PacketSize::Imix => {
                let mut v = Vec::new();
                for (s, w) in IMIX.iter().zip(IMIX_WEIGHTS) {
                    for _ in 0..w {
                        v.push(*s);
                    }
                }
                // Fisher-Yates with the seed, so large frames are spread out.
                for i in (1..v.len()).rev() {
                    let j = (rng.next() % (i as u64 + 1)) as usize;
                    v.swap(i, j);
                }
                v
            }
        };
        let total: u64 = mix.iter().map(|&(_, w)| u64::from(w)).sum();
        let dscp_of_flow = (0..cfg.flows)
            .map(|f| {
                // Spread flows over the mix by weight, deterministic in the flow index, so any
                // `total` consecutive flows follow the weights exactly.
                let slot = u64::from(f) % total;
                let mut acc = 0u64;
                for &(d, w) in &mix {
                    acc += u64::from(w);
                    if slot < acc {
                        return d;
                    }
                }
                mix[0].0
            })
            .collect();
        Ok(SynthPlan {
            flows: cfg.flows,
            ip: cfg.ip,
            sizes,
            dscp_of_flow,
            ecn: cfg.ecn,
            pace,
            packets: cfg.packets,
            duration_ns,
            port,
            rx_queue_of_flow: None,
        })
    }

    /// Puts each flow on the receive queue `queue_of(flow, frame)` names, from a frame of
    /// the flow as the generator builds it (64 bytes or the IPv6 minimum); `None` keeps
    /// round robin for that flow. Queue numbers wrap at the port's queue count.
    pub fn steer(&mut self, mut queue_of: impl FnMut(u32, &[u8]) -> Option<u16>) {
        let steered = (0..self.flows)
            .map(|f| {
                let mut flow = GenFlow::new(self, f);
                let mut frame = vec![0u8; if flow.v6 { MIN_FRAME_V6 } else { MIN_FRAME_V4 }];
                flow.write(&mut frame, 0);
                queue_of(f, &frame).unwrap_or(u16::MAX)
            })
            .collect();
        self.rx_queue_of_flow = Some(steered);
    }

    /// The receive queue (of `queues`) that generates `flow`.
    fn rx_queue_of(&self, flow: u32, queues: usize) -> usize {
        match self.rx_queue_of_flow.as_deref().map(|q| q[flow as usize]) {
            Some(q) if q != u16::MAX => usize::from(q) % queues,
            _ => flow as usize % queues,
        }
    }

    /// Flows in the plan.
    pub fn flows(&self) -> u32 {
        self.flows
    }

    /// Offered rate in bit/s, 0 = flat out or paced by packets.
    pub fn rate_bps(&self) -> u64 {
        match self.pace {
            Pace::Bits(b) => b,
            _ => 0,
        }
    }

    /// How fast the generator offers frames.
    pub fn pace(&self) -> Pace {
        self.pace
    }

    fn is_v6(&self, flow: u32) -> bool {
        match self.ip {
            IpVersion::Ipv4 => false,
            IpVersion::Ipv6 => true,
            IpVersion::Mixed => flow % 2 == 1,
        }
    }

    /// Builds the Ethernet + IP + UDP header template of `flow`; returns its length.
    fn template(&self, flow: u32, out: &mut [u8; 64]) -> usize {
        let dst_mac = [0x02, 0, 0, 0, self.port ^ 1, 0x02];
        let src_mac = [0x02, 0, 0, 0, self.port, 0x01];
        out[0..6].copy_from_slice(&dst_mac);
        out[6..12].copy_from_slice(&src_mac);
        let tos = (self.dscp_of_flow[flow as usize] << 2) | (u8::from(self.ecn) * 2);
        let host = flow.to_be_bytes();
        let sport = 1024 + (flow % 60000) as u16;
        let dport = 5001 + (flow / 60000) as u16;
        let l4 = if self.is_v6(flow) {
            out[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let ip = &mut out[ETH_LEN..ETH_LEN + IPV6_LEN];
            ip[0] = 0x60 | (tos >> 4);
            ip[1] = tos << 4;
            ip[2] = 0;
            ip[3] = 0;
            ip[4] = 0; // payload length, per packet
            ip[5] = 0;
            ip[6] = 17;
            ip[7] = 64;
            let src = [
                0x20, 0x01, 0, 2, 0, self.port, 0, 0, 0, 0, 0, 0, host[0], host[1], host[2],
                host[3],
            ];
            let mut dst = src;
            dst[5] = self.port ^ 1;
            dst[7] = 1;
            ip[8..24].copy_from_slice(&src);
            ip[24..40].copy_from_slice(&dst);
            ETH_LEN + IPV6_LEN
        } else {
            out[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let ip = &mut out[ETH_LEN..ETH_LEN + IPV4_LEN];
            ip[0] = 0x45;
            ip[1] = tos;
            ip[2] = 0; // total length, per packet
            ip[3] = 0;
            ip[4] = 0;
            ip[5] = 0;
            ip[6] = 0x40; // DF
            ip[7] = 0;
            ip[8] = 64;
            ip[9] = 17;
            ip[10] = 0; // checksum, per packet
            ip[11] = 0;
            // 198.18.0.0/15: A's hosts in 198.18/16, B's in 198.19/16.
            ip[12..16].copy_from_slice(&[198, 18 + self.port, host[2], host[3]]);
            ip[16..20].copy_from_slice(&[198, 19 - self.port.min(1), host[2], host[3] ^ 0x80]);
            ETH_LEN + IPV4_LEN
        };
        out[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
        out[l4 + 2..l4 + 4].copy_from_slice(&dport.to_be_bytes());
        out[l4 + 4..l4 + 8].fill(0);
        l4 + UDP_LEN
    }
}

/// One flow's prebuilt header and state.
#[derive(Clone)]
struct GenFlow {
    id: u32,
    header: [u8; 64],
    header_len: usize,
    v6: bool,
    /// One's-complement sum of the IPv4 header with length and checksum zero.
    ipv4_partial: u32,
    seq: u64,
}

impl GenFlow {
    fn new(plan: &SynthPlan, id: u32) -> GenFlow {
        let mut header = [0u8; 64];
        let header_len = plan.template(id, &mut header);
        let v6 = plan.is_v6(id);
        let ipv4_partial = if v6 {
            0
        } else {
            ones_sum(&header[ETH_LEN..ETH_LEN + IPV4_LEN])
        };
        GenFlow {
            id,
            header,
            header_len,
            v6,
            ipv4_partial,
            seq: 0,
        }
    }

    /// Writes this flow's next frame, as long as `frame`, sent at `now_ns`.
    #[inline]
    fn write(&mut self, frame: &mut [u8], now_ns: u64) {
        let len = frame.len();
        let h = self.header_len;
        frame[..h].copy_from_slice(&self.header[..h]);
        let udp_len = (len - h + UDP_LEN) as u16;
        if self.v6 {
            frame[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&udp_len.to_be_bytes());
        } else {
            let total = (len - ETH_LEN) as u16;
            frame[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&total.to_be_bytes());
            let csum = fold(self.ipv4_partial + u32::from(total));
            frame[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&(!csum).to_be_bytes());
        }
        frame[h - 4..h - 2].copy_from_slice(&udp_len.to_be_bytes());
        let p = &mut frame[h..h + PAYLOAD_HEADER_LEN];
        p[0..2].copy_from_slice(&MAGIC);
        p[2..6].copy_from_slice(&self.id.to_be_bytes());
        p[6..14].copy_from_slice(&self.seq.to_be_bytes());
        p[14..22].copy_from_slice(&now_ns.to_be_bytes());
        self.seq += 1;
    }
}

/// The generator: one receive queue of a synth port.
pub struct SynthRx {
    plan: SynthPlan,
    pool: Pool,
    flows: Vec<GenFlow>,
    next_flow: usize,
    next_size: usize,
    /// Bytes per second, 0 = flat out.
    /// The pace in units per second: bytes (bit pacing) or frames ([`Pace::Packets`]); 0 =
    /// flat out.
    rate_units_per_s: u64,
    /// Each frame costs one unit instead of its length.
    per_packet: bool,
    start_ns: u64,
    /// Bytes the bucket has credited since `start_ns` and that were spent or forfeited.
    spent_units: u128,
    sent_packets: u64,
    sent_bytes: u64,
    pool_empty: u64,
    packet_limit: u64,
    finished: bool,
    counters: Arc<GenCounters>,
}

impl SynthRx {
    /// The generator for queue `queue` of `queues` on a port; flows are split between queues
    /// and so are the offered rate and the packet limit.
    pub fn new(
        plan: &SynthPlan,
        pool: Pool,
        queue: usize,
        queues: usize,
        stats: &SynthStats,
    ) -> SynthRx {
        let queues = queues.max(1);
        let flows: Vec<GenFlow> = (0..plan.flows)
            .filter(|&f| plan.rx_queue_of(f, queues) == queue)
            .map(|id| GenFlow::new(plan, id))
            .collect();
        let counters = stats.add_generator();
        // Round robin, each queue's share of the rate and the limit is an even split; steered,
        // it follows the queue's share of the flows, so every flow is offered alike.
        // (Cumulative floors, so that the queues' shares add up to the whole.)
        let all = u128::from(plan.flows);
        let before = (0..plan.flows)
            .filter(|&f| plan.rx_queue_of(f, queues) < queue)
            .count() as u128;
        let upto = before + flows.len() as u128;
        let share = |x: u64| match plan.rx_queue_of_flow {
            None => x / queues as u64 + u64::from((queue as u64) < x % queues as u64),
            Some(_) => (u128::from(x) * upto / all - u128::from(x) * before / all) as u64,
        };
        SynthRx {
            rate_units_per_s: match plan.pace {
                Pace::Bits(b) => share(b) / 8,
                // At least one frame a second per queue, so a tiny rate still offers.
                Pace::Packets(p) => share(p).max(1),
                Pace::Unlimited | Pace::Auto => 0,
            },
            per_packet: matches!(plan.pace, Pace::Packets(_)),
            packet_limit: if plan.packets == 0 {
                u64::MAX
            } else {
                share(plan.packets)
            },
            plan: plan.clone(),
            pool,
            finished: flows.is_empty(),
            flows,
            next_flow: 0,
            next_size: 0,
            start_ns: 0,
            spent_units: 0,
            sent_packets: 0,
            sent_bytes: 0,
            pool_empty: 0,
            counters,
        }
    }

    #[inline]
    fn next_frame_len(&mut self, v6: bool) -> usize {
        let len = self.plan.sizes[self.next_size];
        self.next_size += 1;
        if self.next_size == self.plan.sizes.len() {
            self.next_size = 0;
        }
        let min = if v6 { MIN_FRAME_V6 } else { MIN_FRAME_V4 };
        len.max(min).min(self.pool.buf_size())
    }

    /// Writes the next frame of the next flow into `buf`; returns its length.
    #[inline]
    fn build(&mut self, buf: &mut PoolBuf, now_ns: u64) -> usize {
        let fi = self.next_flow;
        self.next_flow += 1;
        if self.next_flow == self.flows.len() {
            self.next_flow = 0;
        }
        let v6 = self.flows[fi].v6;
        let len = self.next_frame_len(v6);
        self.flows[fi].write(buf.set_len(len), now_ns);
        len
    }

    fn publish(&self) {
        self.counters.packets.store(self.sent_packets, Relaxed);
        self.counters.bytes.store(self.sent_bytes, Relaxed);
        self.counters.pool_empty.store(self.pool_empty, Relaxed);
        if self.finished {
            self.counters.finished.store(true, Relaxed);
        }
    }
}

impl PortRx for SynthRx {
    type Buf = PoolBuf;

    fn rx_burst(&mut self, burst: &mut Vec<PoolBuf>, max: usize) -> usize {
        if self.finished {
            return 0;
        }
        let now = clock::recent_ns();
        if self.start_ns == 0 {
            self.start_ns = now;
        }
        let elapsed = now - self.start_ns;
        if self.plan.duration_ns.is_some_and(|d| elapsed >= d) {
            self.finished = true;
            self.publish();
            return 0;
        }
        // Token bucket: credit = rate * elapsed - spent, capped at a burst of big frames so
        // a stall does not turn into a flood afterwards.
        let mut credit = u64::MAX;
        if self.rate_units_per_s != 0 {
            let earned = u128::from(elapsed) * u128::from(self.rate_units_per_s) / 1_000_000_000;
            // Up to 10 ms of credit (at least a burst of big frames) survives a stall.
            let burst_units = if self.per_packet { 1 } else { 1518 };
            let depth = (max as u128 * burst_units).max(u128::from(self.rate_units_per_s) / 100);
            if earned > self.spent_units + depth {
                self.spent_units = earned - depth;
            }
            credit = (earned.saturating_sub(self.spent_units)).min(u128::from(u64::MAX)) as u64;
        }
        // How many frames the bucket and the limits allow, then all their buffers at once.
        let mut want = 0usize;
        let (mut fi, mut si) = (self.next_flow, self.next_size);
        let left = self.packet_limit - self.sent_packets;
        while want < max && (want as u64) < left {
            let min = if self.flows[fi].v6 {
                MIN_FRAME_V6
            } else {
                MIN_FRAME_V4
            };
            let len = self.plan.sizes[si].max(min).min(self.pool.buf_size()) as u64;
            let cost = if self.per_packet { 1 } else { len };
            if cost > credit {
                break;
            }
            credit -= cost;
            want += 1;
            fi = if fi + 1 == self.flows.len() {
                0
            } else {
                fi + 1
            };
            si = if si + 1 == self.plan.sizes.len() {
                0
            } else {
                si + 1
            };
        }
        let start = burst.len();
        let n = self.pool.alloc_burst(burst, want);
        if n < want {
            self.pool_empty += 1;
        }
        for buf in &mut burst[start..] {
            let len = self.build(buf, now) as u64;
            if self.rate_units_per_s != 0 {
                self.spent_units += if self.per_packet { 1 } else { u128::from(len) };
            }
            self.sent_packets += 1;
            self.sent_bytes += len;
        }
        if self.sent_packets >= self.packet_limit {
            self.finished = true;
        }
        self.publish();
        n
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}

/// The sink's record of one flow.
#[derive(Debug, Clone, Copy, Default)]
struct SinkFlow {
    /// One past the highest sequence seen.
    next: u64,
    /// Bit i set: sequence `next - 1 - i` was seen.
    window: u64,
}

/// The verifying sink: one transmit queue of a synth port.
pub struct SynthTx {
    flows: Vec<SinkFlow>,
    packets: u64,
    bytes: u64,
    foreign: u64,
    reordered: u64,
    duplicates: u64,
    ce_marked: u64,
    hist: Histogram<u64>,
    last_publish_ns: u64,
    counters: Arc<SinkCounters>,
    stats: Arc<SynthStats>,
}

impl SynthTx {
    /// A sink that knows flows `0..flows`.
    pub fn new(flows: u32, stats: Arc<SynthStats>) -> SynthTx {
        let counters = stats.add_sink();
        SynthTx {
            flows: vec![SinkFlow::default(); flows as usize],
            packets: 0,
            bytes: 0,
            foreign: 0,
            reordered: 0,
            duplicates: 0,
            ce_marked: 0,
            hist: new_delay_histogram(),
            last_publish_ns: 0,
            counters,
            stats,
        }
    }

    /// Checks one frame.
    #[inline]
    fn verify(&mut self, frame: &[u8], now_ns: u64) {
        let Some((payload, ecn)) = synth_payload(frame) else {
            self.foreign += 1;
            return;
        };
        let flow = u32::from_be_bytes([payload[2], payload[3], payload[4], payload[5]]);
        let Some(f) = self.flows.get_mut(flow as usize) else {
            self.foreign += 1;
            return;
        };
        let seq = u64::from_be_bytes(payload[6..14].try_into().unwrap_or([0; 8]));
        let sent = u64::from_be_bytes(payload[14..22].try_into().unwrap_or([0; 8]));
        if seq >= f.next {
            let shift = seq - f.next + 1;
            f.window = if shift >= 64 { 0 } else { f.window << shift };
            f.window |= 1;
            f.next = seq + 1;
        } else {
            let back = f.next - 1 - seq;
            if back < 64 {
                let bit = 1u64 << back;
                if f.window & bit != 0 {
                    self.duplicates += 1;
                    return;
                }
                f.window |= bit;
            }
            self.reordered += 1;
        }
        self.packets += 1;
        self.bytes += frame.len() as u64;
        if ecn == 3 {
            self.ce_marked += 1;
        }
        let delay = now_ns.saturating_sub(sent).clamp(1, HIST_MAX_NS);
        // Cannot fail: the value is clamped into the histogram's range.
        let _ = self.hist.record(delay);
    }

    fn publish(&mut self, now_ns: u64, force: bool) {
        let c = &self.counters;
        c.packets.store(self.packets, Relaxed);
        c.bytes.store(self.bytes, Relaxed);
        c.foreign.store(self.foreign, Relaxed);
        c.reordered.store(self.reordered, Relaxed);
        c.duplicates.store(self.duplicates, Relaxed);
        c.ce_marked.store(self.ce_marked, Relaxed);
        if (force || now_ns.saturating_sub(self.last_publish_ns) >= HIST_PUBLISH_NS)
            && !self.hist.is_empty()
        {
            self.last_publish_ns = now_ns;
            self.stats.add_delays(&self.hist);
            self.hist.reset();
        }
    }
}

impl PortTx for SynthTx {
    type Buf = PoolBuf;

    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        // The sink is a measuring instrument: one fresh clock read per burst, so a packet
        // that went straight through in the same loop iteration still shows its delay.
        let now = clock::now_ns();
        let n = burst.len();
        for b in burst.iter() {
            self.verify(b.data(), now);
        }
        burst.clear();
        self.publish(now, false);
        n
    }

    fn flush(&mut self) {
        self.publish(clock::recent_ns(), true);
    }
}

impl Drop for SynthTx {
    fn drop(&mut self) {
        self.publish(clock::recent_ns(), true);
    }
}

/// Finds the synth payload header of `frame` and the IP ECN bits, or `None` for any other
/// frame. Never panics on short or odd frames.
pub fn synth_payload(frame: &[u8]) -> Option<(&[u8], u8)> {
    let mut l3 = ETH_LEN;
    let mut ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = u16::from_be_bytes([*frame.get(l3 + 2)?, *frame.get(l3 + 3)?]);
        l3 += 4;
    }
    let (l4, ecn) = match ethertype {
        0x0800 => {
            let vihl = *frame.get(l3)?;
            if vihl >> 4 != 4 || *frame.get(l3 + 9)? != 17 {
                return None;
            }
            (l3 + usize::from(vihl & 0x0f) * 4, frame.get(l3 + 1)? & 3)
        }
        0x86dd => {
            if *frame.get(l3 + 6)? != 17 {
                return None;
            }
            (l3 + IPV6_LEN, (frame.get(l3 + 1)? >> 4) & 3)
        }
        _ => return None,
    };
    let p = frame.get(l4 + UDP_LEN..l4 + UDP_LEN + PAYLOAD_HEADER_LEN)?;
    (p[0..2] == MAGIC).then_some((p, ecn))
}

fn ones_sum(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Reads flow id and sequence number from a synth frame (for tests and tools).
pub fn flow_and_seq(frame: &[u8]) -> Option<(u32, u64)> {
    let (p, _) = synth_payload(frame)?;
    let flow = u32::from_be_bytes(p[2..6].try_into().ok()?);
    let seq = u64::from_be_bytes(p[6..14].try_into().ok()?);
    Some((flow, seq))
}

#[cfg(test)]
mod tests;
