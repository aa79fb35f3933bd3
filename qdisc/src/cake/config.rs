//! CAKE's configuration: every option `tc qdisc ... cake` takes, with the kernel's defaults
//! (cake-spec.md §8) and validation that says what to do about a bad value.

use crate::Rate;

/// Diffserv mode: how many tins and how DSCP maps to them (cake-spec.md §3).
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

/// Flow isolation mode (cake-spec.md §2). The discriminants are the kernel's values.
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
    /// Seed for the dither and BLUE random numbers; a replay with the same seed is identical.
    pub seed: u64,
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
            autorate_ingress: false,
            memlimit: None,
            fwmark_mask: 0,
            packet_limit: 10240,
            mtu: 1514,
            seed: 0x5eed_cafe,
        }
    }
}
