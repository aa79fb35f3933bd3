//! CAKE's configuration: every option `tc qdisc ... cake` takes, with the kernel's defaults
//! (sch_cake.c `cake_init`, tc-cake(8)) and validation that says what to do about a bad value.

use crate::Rate;

/// Diffserv mode: how many tins and how DSCP maps to them (sch_cake.c `cake_config_diffserv*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DiffservMode {
    /// One tin.
    Besteffort,
    /// Best effort, bulk (1/16), voice (1/4). The default.
    #[default]
    Diffserv3,
    /// Best effort, bulk, video, voice.
    Diffserv4,
    /// Eight tins.
    Diffserv8,
    /// Eight tins by IP precedence (`dscp >> 3`).
    Precedence,
}

impl DiffservMode {
    /// Every mode, in the order above.
    pub const ALL: [DiffservMode; 5] = [
        DiffservMode::Besteffort,
        DiffservMode::Diffserv3,
        DiffservMode::Diffserv4,
        DiffservMode::Diffserv8,
        DiffservMode::Precedence,
    ];
}

/// Flow isolation mode (sch_cake.c `CAKE_FLOW_*`, used by `cake_hash`). The discriminants
/// are the kernel's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlowMode {
    /// Every packet in one flow.
    Flowblind = 0,
    /// Fairness by source host.
    Srchost = 1,
    /// Fairness by destination host.
    Dsthost = 2,
    /// Fairness by host pair.
    Hosts = 3,
    /// Fairness by 5-tuple.
    Flows = 4,
    /// Flows, with fairness between source hosts.
    DualSrchost = 5,
    /// Flows, with fairness between destination hosts.
    DualDsthost = 6,
    /// Flows, with fairness between source and destination hosts. The default.
    #[default]
    TripleIsolate = 7,
}

impl FlowMode {
    /// Every mode, in the kernel's order (`ALL[m as usize] == m`).
    pub const ALL: [FlowMode; 8] = [
        FlowMode::Flowblind,
        FlowMode::Srchost,
        FlowMode::Dsthost,
        FlowMode::Hosts,
        FlowMode::Flows,
        FlowMode::DualSrchost,
        FlowMode::DualDsthost,
        FlowMode::TripleIsolate,
    ];
}

/// Link-layer cell framing compensation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AtmMode {
    /// No cell framing.
    #[default]
    None,
    /// ATM: 48-byte payload in 53-byte cells.
    Atm,
    /// PTM (VDSL2): one byte per 64.
    Ptm,
}

/// ACK filter mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AckFilterMode {
    /// Off (the default).
    #[default]
    Off,
    /// Drop an older ACK made redundant by a newer one in the same flow.
    Filter,
    /// Also drop a lone redundant ACK right before the newest.
    Aggressive,
}

/// All of CAKE's options. `Default` gives `tc qdisc add ... cake` with no options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CakeConfig {
    /// Shaped rate; `Rate::UNLIMITED` (the default) does not shape.
    pub rate: Rate,
    /// Diffserv mode (default diffserv3).
    pub diffserv: DiffservMode,
    /// Flow isolation mode (default triple-isolate).
    pub flow_mode: FlowMode,
    /// Use NAT-translated addresses for host fairness. cakewalk has no conntrack; the flag is
    /// kept for config compatibility and the caller reports rewrites in `PacketMeta`.
    pub nat: bool,
    /// Clear DSCP on egress (classification still uses the original value).
    pub wash: bool,
    /// ACK filter.
    pub ack_filter: AckFilterMode,
    /// Split GSO super-frames (default on).
    pub split_gso: bool,
    /// CoDel interval, in ns (default 100 ms).
    pub interval_ns: u64,
    /// CoDel target, in ns (default 5 ms).
    pub target_ns: u64,
    /// Per-packet overhead in bytes, -64..=256. Only applied when `raw` is false.
    pub overhead: i32,
    /// Minimum packet unit, 0..=256 bytes.
    pub mpu: u32,
    /// Cell framing compensation.
    pub atm: AtmMode,
    /// True (the default) when no overhead is configured: the frame length is used as is.
    pub raw: bool,
    /// Ingress mode: drops are charged to the shaper.
    pub ingress: bool,
    /// COBALT's target follows the flows' rounds at the rate in force: a packet is over
    /// target only past four MTU times per bulk flow of its tin (sch_cake.c
    /// `cobalt_should_drop` has two in ingress mode; four leave each bulk TCP flow the
    /// four-packet window with which it still finds a loss by duplicate ACKs rather than a
    /// timeout), and `set_rate` recomputes the tins' COBALT parameters from the new rate as
    /// sch_cake.c `cake_set_rate` does. Ingress mode's charging of drops to the shaper is not
    /// implied; with `ingress` on, ingress mode's floor applies instead. For a subscriber's queue, whose rate is its own slow link (docs/circuits.md,
    /// "Low-rate plans"); off for the link's shaper.
    pub round_target: bool,
    /// Estimate capacity from arrivals and shape to 15/16 of it.
    pub autorate_ingress: bool,
    /// Memory limit in bytes; `None` derives it from rate and interval.
    pub memlimit: Option<u64>,
    /// Mask applied to `PacketMeta::mark` for the tin override; 0 disables it.
    pub fwmark_mask: u32,
    /// Packet limit (the kernel's `sch->limit`, default 10240).
    pub packet_limit: u32,
    /// MTU plus L2 header, used for COBALT's MTU time and the memory-limit cap (1514).
    pub mtu: u32,
    /// Bytes the shaper may send ahead of its clock (0, the default: none, as sch_cake.c).
    /// A packet leaves once the clock is within this many bytes' time at the rate in force
    /// (at most 1 ms of it) of now, and the clock still advances by every packet's time
    /// from where it was, so the long-run rate stays exact and no window of any length
    /// carries more than the rate's bytes plus `burst` plus one packet: a token bucket this
    /// deep, as an HTB or TBF has. A subscriber's queue uses it so that a burst that
    /// arrives at one instant leaves in the same visit instead of one cold visit per
    /// packet (docs/circuits.md, "Burst").
    pub burst: u32,
    /// Seed for the dither and BLUE random numbers; a replay with the same seed is identical.
    pub seed: u64,
    /// Key of the flow and host hashes. Whoever knows it can craft 5-tuples that share one
    /// set of flow buckets and defeat the flow isolation (hash flooding), so a forwarder
    /// should draw it at random, as Linux keys its flow dissector at boot; a fixed key
    /// gives replays that classify identically.
    pub hash_key: u64,
}

impl Default for CakeConfig {
    fn default() -> Self {
        CakeConfig {
            rate: Rate::UNLIMITED,
            diffserv: DiffservMode::Diffserv3,
            flow_mode: FlowMode::TripleIsolate,
            nat: false,
            wash: false,
            ack_filter: AckFilterMode::Off,
            split_gso: true,
            interval_ns: 100_000_000,
            target_ns: 5_000_000,
            overhead: 0,
            mpu: 0,
            atm: AtmMode::None,
            raw: true,
            ingress: false,
            round_target: false,
            autorate_ingress: false,
            memlimit: None,
            fwmark_mask: 0,
            packet_limit: 10240,
            mtu: 1514,
            burst: 0,
            seed: 0x5eed_cafe,
            hash_key: 0x5eed_cafe,
        }
    }
}

/// Largest packet limit accepted: the packet slab is allocated up front, so a limit of a few
/// billion would try to allocate gigabytes before the first packet.
pub const MAX_PACKET_LIMIT: u32 = 1 << 22;

/// Largest [`CakeConfig::burst`] accepted: 1 MiB, 8 ms at 1 Gbit/s; a deeper bucket
/// lets out bursts that fill the next hop's buffer, which a shaper is there to prevent.
pub const MAX_BURST: u32 = 1 << 20;

/// The lowest shaped rate the kernel accepts (sch_cake.c `MIN_RATE`).
pub const MIN_RATE_BYTES_PER_SEC: u64 = 64;

/// Why a [`CakeConfig`] was refused. Every message names the bad value and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A shaped rate below 64 bytes/s.
    #[error("rate {bytes_per_sec} B/s is below the minimum of 64 B/s (512 bit/s); raise it, or use 0 for unlimited")]
    RateTooLow {
        /// The rejected rate in bytes per second.
        bytes_per_sec: u64,
    },
    /// A zero CoDel target.
    #[error("target 0 is not allowed; use at least 1us (the default is 5ms)")]
    ZeroTarget,
    /// A zero CoDel interval.
    #[error("interval (rtt) 0 is not allowed; use at least 1us (the default is 100ms)")]
    ZeroInterval,
    /// A zero packet limit.
    #[error("packet limit 0 would drop every packet; use at least 1 (the default is 10240)")]
    ZeroPacketLimit,
    /// A packet limit so large the slab could not be preallocated.
    #[error(
        "packet limit {limit} is above the maximum of {max}; lower it or set a memlimit instead"
    )]
    PacketLimitTooLarge {
        /// The rejected limit.
        limit: u32,
        /// The largest accepted limit.
        max: u32,
    },
    /// An overhead outside tc's range.
    #[error("overhead {overhead} is outside -64..=256 bytes; pick a value in that range")]
    OverheadOutOfRange {
        /// The rejected overhead.
        overhead: i32,
    },
    /// An MPU above tc's maximum.
    #[error("mpu {mpu} is above the maximum of 256 bytes; lower it")]
    MpuTooLarge {
        /// The rejected MPU.
        mpu: u32,
    },
    /// An MTU of zero or above 64 KiB.
    #[error("mtu {mtu} is outside 1..=65536 bytes; use the link MTU plus its L2 header (1514 on Ethernet)")]
    MtuOutOfRange {
        /// The rejected MTU.
        mtu: u32,
    },
    /// A burst above [`MAX_BURST`].
    #[error("burst {burst} bytes is above the {max} accepted; a shaper's burst is a few frames (one MTU, 1514, is the usual), 0 for none")]
    BurstTooLarge {
        /// The rejected burst.
        burst: u32,
        /// The largest accepted.
        max: u32,
    },
    /// A keyword that is not a link-layer preset.
    #[error("'{0}' is not a link-layer preset; try raw, conservative, ethernet, docsis, ether-vlan, pppoe-ptm, bridged-ptm, pppoa-vcmux, pppoe-llcsnap, ...")]
    UnknownLinkPreset(String),
    /// A keyword that is not an RTT preset.
    #[error("'{0}' is not an rtt preset; try datacentre, lan, metro, regional, internet, oceanic, satellite or interplanetary")]
    UnknownRttPreset(String),
}

impl CakeConfig {
    /// The memory limit (bytes of packet footprint) an instance keeps while shaping at
    /// `rate_bytes_per_sec` (0: unlimited): `memlimit` if set, else 4 x rate x RTT and at
    /// least 4 MiB, capped by `packet_limit` full-size packets unless `memlimit` is larger
    /// (sch_cake.c `cake_reconfigure`). Pure, so callers can size buffer pools from it.
    pub fn memory_limit_at(&self, rate_bytes_per_sec: u64) -> u64 {
        let memlimit = self.memlimit.unwrap_or(0);
        let base = if memlimit != 0 {
            memlimit
        } else if rate_bytes_per_sec != 0 {
            // 4 × rate × RTT, at least 4 MiB.
            let t = u128::from(rate_bytes_per_sec) * u128::from(self.interval_ns / 1000) / 250_000;
            (t.min(u128::from(u64::MAX)) as u64).max(4 << 20)
        } else {
            u64::MAX
        };
        base.min((u64::from(self.packet_limit) * u64::from(self.mtu)).max(memlimit))
    }

    /// Checks every option against the ranges `tc` and the kernel accept.
    ///
    /// # Errors
    /// The first [`ConfigError`] found: a shaped rate below 64 B/s (0 means unlimited and is
    /// fine), a zero target or interval, a packet limit of 0 or above [`MAX_PACKET_LIMIT`],
    /// an overhead outside -64..=256, an mpu above 256, or an mtu outside 1..=65536.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let rate = self.rate.bytes_per_sec();
        if rate != 0 && rate < MIN_RATE_BYTES_PER_SEC {
            return Err(ConfigError::RateTooLow {
                bytes_per_sec: rate,
            });
        }
        if self.target_ns == 0 {
            return Err(ConfigError::ZeroTarget);
        }
        if self.interval_ns == 0 {
            return Err(ConfigError::ZeroInterval);
        }
        if self.packet_limit == 0 {
            return Err(ConfigError::ZeroPacketLimit);
        }
        if self.packet_limit > MAX_PACKET_LIMIT {
            return Err(ConfigError::PacketLimitTooLarge {
                limit: self.packet_limit,
                max: MAX_PACKET_LIMIT,
            });
        }
        if !(-64..=256).contains(&self.overhead) {
            return Err(ConfigError::OverheadOutOfRange {
                overhead: self.overhead,
            });
        }
        if self.mpu > 256 {
            return Err(ConfigError::MpuTooLarge { mpu: self.mpu });
        }
        if self.mtu == 0 || self.mtu > 65536 {
            return Err(ConfigError::MtuOutOfRange { mtu: self.mtu });
        }
        if self.burst > MAX_BURST {
            return Err(ConfigError::BurstTooLarge {
                burst: self.burst,
                max: MAX_BURST,
            });
        }
        Ok(())
    }

    /// Sets the RTT the way `tc ... rtt T` does: interval = T, target = max(T/20, 1 µs).
    pub fn set_rtt(&mut self, rtt_ns: u64) {
        self.interval_ns = rtt_ns;
        self.target_ns = (rtt_ns / 20).max(1_000);
    }

    /// Applies a link-layer keyword (overhead, mpu, ATM/PTM framing).
    pub fn apply_link_preset(&mut self, preset: LinkPreset) {
        preset.apply(self);
    }

    /// Applies an RTT keyword (target and interval).
    pub fn apply_rtt_preset(&mut self, preset: RttPreset) {
        self.target_ns = preset.target_ns();
        self.interval_ns = preset.interval_ns();
    }
}

/// The link-layer keywords of `tc qdisc ... cake` (tc-cake(8), overhead keywords).
///
/// Each sets the overhead and clears `raw`; some also set the MPU or ATM/PTM framing. As in
/// tc, a keyword only sets what it names: `ether-vlan` adds 4 bytes to whatever overhead is
/// already configured, every other keyword replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkPreset {
    /// No overhead compensation (the default): frame length as seen, no ATM/PTM.
    Raw,
    /// ATM with 48 bytes of overhead: safe for any ADSL link.
    Conservative,
    /// Ethernet: preamble, SFD, FCS and inter-frame gap (+38), mpu 84.
    Ethernet,
    /// DOCSIS cable: +18, mpu 64.
    Docsis,
    /// Adds 4 bytes for an 802.1Q tag on top of the current overhead.
    EtherVlan,
    /// ATM, IP over AAL5 VC-mux (+8).
    IpoaVcmux,
    /// ATM, IP over AAL5 LLC/SNAP (+16).
    IpoaLlcsnap,
    /// ATM, bridged VC-mux (+24).
    BridgedVcmux,
    /// ATM, bridged LLC/SNAP (+32).
    BridgedLlcsnap,
    /// ATM, PPPoA VC-mux (+10).
    PppoaVcmux,
    /// ATM, PPPoA LLC (+14).
    PppoaLlc,
    /// ATM, PPPoE over VC-mux (+32).
    PppoeVcmux,
    /// ATM, PPPoE over LLC/SNAP (+40).
    PppoeLlcsnap,
    /// PTM (VDSL2), PPPoE (+30).
    PppoePtm,
    /// PTM (VDSL2), bridged (+22).
    BridgedPtm,
}

impl LinkPreset {
    /// Every preset, in tc's documentation order.
    pub const ALL: [LinkPreset; 15] = [
        LinkPreset::Raw,
        LinkPreset::Conservative,
        LinkPreset::Ethernet,
        LinkPreset::Docsis,
        LinkPreset::EtherVlan,
        LinkPreset::IpoaVcmux,
        LinkPreset::IpoaLlcsnap,
        LinkPreset::BridgedVcmux,
        LinkPreset::BridgedLlcsnap,
        LinkPreset::PppoaVcmux,
        LinkPreset::PppoaLlc,
        LinkPreset::PppoeVcmux,
        LinkPreset::PppoeLlcsnap,
        LinkPreset::PppoePtm,
        LinkPreset::BridgedPtm,
    ];

    /// The tc keyword.
    pub fn name(self) -> &'static str {
        match self {
            LinkPreset::Raw => "raw",
            LinkPreset::Conservative => "conservative",
            LinkPreset::Ethernet => "ethernet",
            LinkPreset::Docsis => "docsis",
            LinkPreset::EtherVlan => "ether-vlan",
            LinkPreset::IpoaVcmux => "ipoa-vcmux",
            LinkPreset::IpoaLlcsnap => "ipoa-llcsnap",
            LinkPreset::BridgedVcmux => "bridged-vcmux",
            LinkPreset::BridgedLlcsnap => "bridged-llcsnap",
            LinkPreset::PppoaVcmux => "pppoa-vcmux",
            LinkPreset::PppoaLlc => "pppoa-llc",
            LinkPreset::PppoeVcmux => "pppoe-vcmux",
            LinkPreset::PppoeLlcsnap => "pppoe-llcsnap",
            LinkPreset::PppoePtm => "pppoe-ptm",
            LinkPreset::BridgedPtm => "bridged-ptm",
        }
    }

    /// Parses a tc keyword.
    ///
    /// # Errors
    /// [`ConfigError::UnknownLinkPreset`] for anything else.
    pub fn from_name(name: &str) -> Result<LinkPreset, ConfigError> {
        LinkPreset::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| ConfigError::UnknownLinkPreset(name.to_owned()))
    }

    /// The overhead the keyword sets (for `ether-vlan`, the amount it adds).
    pub fn overhead(self) -> i32 {
        match self {
            LinkPreset::Raw => 0,
            LinkPreset::Conservative => 48,
            LinkPreset::Ethernet => 38,
            LinkPreset::Docsis => 18,
            LinkPreset::EtherVlan => 4,
            LinkPreset::IpoaVcmux => 8,
            LinkPreset::IpoaLlcsnap => 16,
            LinkPreset::BridgedVcmux => 24,
            LinkPreset::BridgedLlcsnap => 32,
            LinkPreset::PppoaVcmux => 10,
            LinkPreset::PppoaLlc => 14,
            LinkPreset::PppoeVcmux => 32,
            LinkPreset::PppoeLlcsnap => 40,
            LinkPreset::PppoePtm => 30,
            LinkPreset::BridgedPtm => 22,
        }
    }

    /// The cell framing the keyword selects, if it selects one.
    pub fn atm(self) -> Option<AtmMode> {
        match self {
            LinkPreset::Raw => Some(AtmMode::None),
            LinkPreset::Conservative
            | LinkPreset::IpoaVcmux
            | LinkPreset::IpoaLlcsnap
            | LinkPreset::BridgedVcmux
            | LinkPreset::BridgedLlcsnap
            | LinkPreset::PppoaVcmux
            | LinkPreset::PppoaLlc
            | LinkPreset::PppoeVcmux
            | LinkPreset::PppoeLlcsnap => Some(AtmMode::Atm),
            LinkPreset::PppoePtm | LinkPreset::BridgedPtm => Some(AtmMode::Ptm),
            LinkPreset::Ethernet | LinkPreset::Docsis => Some(AtmMode::None),
            LinkPreset::EtherVlan => None,
        }
    }

    /// The MPU the keyword sets, if it sets one.
    pub fn mpu(self) -> Option<u32> {
        match self {
            LinkPreset::Ethernet => Some(84),
            LinkPreset::Docsis => Some(64),
            _ => None,
        }
    }

    /// Writes the keyword's settings into `config`.
    pub fn apply(self, config: &mut CakeConfig) {
        match self {
            LinkPreset::Raw => {
                config.raw = true;
                config.overhead = 0;
                config.atm = AtmMode::None;
            }
            LinkPreset::EtherVlan => {
                config.raw = false;
                config.overhead = config.overhead.saturating_add(4);
            }
            _ => {
                config.raw = false;
                config.overhead = self.overhead();
            }
        }
        if let Some(atm) = self.atm() {
            config.atm = atm;
        }
        if let Some(mpu) = self.mpu() {
            config.mpu = mpu;
        }
    }
}

/// The RTT keywords of `tc qdisc ... cake` (tc-cake(8), round-trip-time keywords).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RttPreset {
    /// 5 µs / 100 µs.
    Datacentre,
    /// 50 µs / 1 ms.
    Lan,
    /// 500 µs / 10 ms.
    Metro,
    /// 1.5 ms / 30 ms.
    Regional,
    /// 5 ms / 100 ms (the default).
    Internet,
    /// 15 ms / 300 ms.
    Oceanic,
    /// 50 ms / 1 s.
    Satellite,
    /// 50 s / 1000 s.
    Interplanetary,
}

impl RttPreset {
    /// Every preset, shortest first.
    pub const ALL: [RttPreset; 8] = [
        RttPreset::Datacentre,
        RttPreset::Lan,
        RttPreset::Metro,
        RttPreset::Regional,
        RttPreset::Internet,
        RttPreset::Oceanic,
        RttPreset::Satellite,
        RttPreset::Interplanetary,
    ];

    /// The tc keyword.
    pub fn name(self) -> &'static str {
        match self {
            RttPreset::Datacentre => "datacentre",
            RttPreset::Lan => "lan",
            RttPreset::Metro => "metro",
            RttPreset::Regional => "regional",
            RttPreset::Internet => "internet",
            RttPreset::Oceanic => "oceanic",
            RttPreset::Satellite => "satellite",
            RttPreset::Interplanetary => "interplanetary",
        }
    }

    /// Parses a tc keyword.
    ///
    /// # Errors
    /// [`ConfigError::UnknownRttPreset`] for anything else.
    pub fn from_name(name: &str) -> Result<RttPreset, ConfigError> {
        RttPreset::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| ConfigError::UnknownRttPreset(name.to_owned()))
    }

    /// CoDel target in ns.
    pub fn target_ns(self) -> u64 {
        match self {
            RttPreset::Datacentre => 5_000,
            RttPreset::Lan => 50_000,
            RttPreset::Metro => 500_000,
            RttPreset::Regional => 1_500_000,
            RttPreset::Internet => 5_000_000,
            RttPreset::Oceanic => 15_000_000,
            RttPreset::Satellite => 50_000_000,
            RttPreset::Interplanetary => 50_000_000_000,
        }
    }

    /// CoDel interval in ns.
    pub fn interval_ns(self) -> u64 {
        match self {
            RttPreset::Datacentre => 100_000,
            RttPreset::Lan => 1_000_000,
            RttPreset::Metro => 10_000_000,
            RttPreset::Regional => 30_000_000,
            RttPreset::Internet => 100_000_000,
            RttPreset::Oceanic => 300_000_000,
            RttPreset::Satellite => 1_000_000_000,
            RttPreset::Interplanetary => 1_000_000_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flow_mode_sits_at_its_kernel_value_in_all() {
        for (i, m) in FlowMode::ALL.into_iter().enumerate() {
            assert_eq!(m as usize, i);
        }
    }

    #[test]
    fn default_config_is_valid() {
        assert_eq!(CakeConfig::default().validate(), Ok(()));
    }

    #[test]
    fn validation_rejects_each_bad_value_with_a_fix() {
        let bad = |f: fn(&mut CakeConfig)| {
            let mut c = CakeConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        let e = bad(|c| c.rate = Rate::from_bytes_per_sec(63));
        assert!(e.to_string().contains("63 B/s"), "{e}");
        assert!(e.to_string().contains("use 0 for unlimited"), "{e}");
        assert_eq!(bad(|c| c.target_ns = 0), ConfigError::ZeroTarget);
        assert_eq!(bad(|c| c.interval_ns = 0), ConfigError::ZeroInterval);
        assert_eq!(bad(|c| c.packet_limit = 0), ConfigError::ZeroPacketLimit);
        assert!(matches!(
            bad(|c| c.packet_limit = u32::MAX),
            ConfigError::PacketLimitTooLarge { .. }
        ));
        assert_eq!(
            bad(|c| c.overhead = -65),
            ConfigError::OverheadOutOfRange { overhead: -65 }
        );
        assert_eq!(
            bad(|c| c.overhead = 257),
            ConfigError::OverheadOutOfRange { overhead: 257 }
        );
        assert_eq!(bad(|c| c.mpu = 257), ConfigError::MpuTooLarge { mpu: 257 });
        assert_eq!(bad(|c| c.mtu = 0), ConfigError::MtuOutOfRange { mtu: 0 });
    }

    #[test]
    fn validation_accepts_the_edges() {
        let mut c = CakeConfig {
            rate: Rate::from_bytes_per_sec(64),
            overhead: -64,
            mpu: 256,
            packet_limit: 1,
            ..CakeConfig::default()
        };
        assert_eq!(c.validate(), Ok(()));
        c.overhead = 256;
        c.rate = Rate::UNLIMITED;
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn link_presets_set_tc_overheads() {
        let table: [(&str, i32, AtmMode, u32); 14] = [
            ("conservative", 48, AtmMode::Atm, 0),
            ("ethernet", 38, AtmMode::None, 84),
            ("docsis", 18, AtmMode::None, 64),
            ("ipoa-vcmux", 8, AtmMode::Atm, 0),
            ("ipoa-llcsnap", 16, AtmMode::Atm, 0),
            ("bridged-vcmux", 24, AtmMode::Atm, 0),
            ("bridged-llcsnap", 32, AtmMode::Atm, 0),
            ("pppoa-vcmux", 10, AtmMode::Atm, 0),
            ("pppoa-llc", 14, AtmMode::Atm, 0),
            ("pppoe-vcmux", 32, AtmMode::Atm, 0),
            ("pppoe-llcsnap", 40, AtmMode::Atm, 0),
            ("pppoe-ptm", 30, AtmMode::Ptm, 0),
            ("bridged-ptm", 22, AtmMode::Ptm, 0),
            ("raw", 0, AtmMode::None, 0),
        ];
        for (name, overhead, atm, mpu) in table {
            let mut c = CakeConfig::default();
            c.apply_link_preset(LinkPreset::from_name(name).unwrap());
            assert_eq!((c.overhead, c.atm, c.mpu), (overhead, atm, mpu), "{name}");
            assert_eq!(c.raw, name == "raw", "{name}");
            assert_eq!(c.validate(), Ok(()), "{name}");
        }
    }

    #[test]
    fn ether_vlan_adds_four_bytes_to_the_current_overhead() {
        let mut c = CakeConfig::default();
        c.apply_link_preset(LinkPreset::Ethernet);
        c.apply_link_preset(LinkPreset::EtherVlan);
        assert_eq!((c.overhead, c.mpu, c.raw), (42, 84, false));
    }

    #[test]
    fn unknown_keywords_suggest_valid_ones() {
        let e = LinkPreset::from_name("ethernett").unwrap_err();
        assert!(e.to_string().contains("'ethernett'") && e.to_string().contains("ethernet"));
        let e = RttPreset::from_name("moon").unwrap_err();
        assert!(e.to_string().contains("satellite"));
    }

    #[test]
    fn rtt_presets_match_tc() {
        for p in RttPreset::ALL {
            assert_eq!(RttPreset::from_name(p.name()), Ok(p));
            // Every preset but interplanetary is target = interval / 20.
            if p != RttPreset::Interplanetary {
                assert_eq!(p.target_ns() * 20, p.interval_ns(), "{}", p.name());
            }
        }
        assert_eq!(RttPreset::Interplanetary.target_ns(), 50_000_000_000);
        let mut c = CakeConfig::default();
        c.set_rtt(200_000);
        assert_eq!((c.target_ns, c.interval_ns), (10_000, 200_000));
        c.set_rtt(1_000);
        assert_eq!(c.target_ns, 1_000, "target never below 1us");
    }
}
