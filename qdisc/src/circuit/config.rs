//! The configuration of a [`super::CircuitShaper`]: one [`CircuitPlan`] per circuit slot,
//! the link-wide CAKE options and cap, the plan of unmatched traffic, and the limits of the
//! lazily created per-circuit instances (docs/design.md, "Circuits: one CAKE per
//! subscriber").

use std::sync::Arc;

use crate::cake::{CakeConfig, ConfigError, DiffservMode, FlowMode};
use crate::Rate;

/// One circuit's plan: its rate and the CAKE that runs inside it.
///
/// LibreQoS's `sqm none` (a plain rate limit, no flow queueing or AQM) is
/// [`CircuitPlan::plain`]: CAKE reduced to one FIFO (besteffort, flow-blind) whose CoDel
/// target and interval are an hour, so that nothing but the memory limit ever drops. It
/// stays a CAKE instance so that the shaper, the statistics and the rate-only path are the
/// same for both kinds of plan; [`CircuitPlan::is_plain`] recognises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircuitPlan {
    /// The plan's maximum rate (its CAKE shapes to this). `Rate::UNLIMITED` does not shape
    /// the circuit: it then runs under the link cap only.
    pub rate: Rate,
    /// The plan's guaranteed minimum, for the node tree's borrowing; the shaper itself
    /// does not read it.
    pub min: Option<Rate>,
    /// Index of the parent node in the node tree; the shaper itself does not read it.
    pub parent: Option<u32>,
    /// The per-circuit CAKE options. Its `rate` is ignored in favour of
    /// [`CircuitPlan::rate`], and its memory limit, when unset, is the shaper's
    /// [`CircuitShaperConfig::circuit_memory_limit`].
    pub cake: CakeConfig,
}

/// CoDel target and interval of a [`CircuitPlan::plain`] plan: an hour, longer than any
/// memory limit can hold at any rate the validator accepts, so CoDel never drops.
pub const PLAIN_AQM_NS: u64 = 3_600_000_000_000;

impl CircuitPlan {
    /// A plan of `rate` with the default CAKE (diffserv3, triple-isolate).
    pub fn new(rate: Rate) -> CircuitPlan {
        CircuitPlan {
            rate,
            min: None,
            parent: None,
            cake: CakeConfig::default(),
        }
    }

    /// LibreQoS's `sqm none`: a plain rate limit of `rate`, one FIFO and no AQM (see the
    /// type's docs).
    pub fn plain(rate: Rate) -> CircuitPlan {
        CircuitPlan {
            rate,
            min: None,
            parent: None,
            cake: CakeConfig {
                diffserv: DiffservMode::Besteffort,
                flow_mode: FlowMode::Flowblind,
                target_ns: PLAIN_AQM_NS,
                interval_ns: PLAIN_AQM_NS,
                ..CakeConfig::default()
            },
        }
    }

    /// Returns true when this plan is a plain rate limit ([`CircuitPlan::plain`]).
    pub fn is_plain(&self) -> bool {
        self.cake.diffserv == DiffservMode::Besteffort
            && self.cake.flow_mode == FlowMode::Flowblind
            && self.cake.target_ns >= PLAIN_AQM_NS
    }
}

/// Everything a [`super::CircuitShaper`] is built from. Each TX queue of a
/// [`crate::mq::MultiQueue`] gets its own shaper built from the same config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircuitShaperConfig {
    /// The link-wide options: `rate` caps the sum of all circuits (`Rate::UNLIMITED`: no
    /// cap); the overhead options (`raw`, `overhead`, `mpu`, `atm`) say what each delivered
    /// packet costs that cap; `mtu` sets the quantum of the round robin between circuits.
    /// With no [`CircuitShaperConfig::default_plan`], unmatched traffic runs through a CAKE
    /// with these options, unshaped but under the cap.
    pub link: CakeConfig,
    /// Slot → plan. `None` is a free or removed slot: what it holds drains, then its
    /// instance is released; packets classified to it go to the default class.
    pub plans: Arc<[Option<CircuitPlan>]>,
    /// The plan of traffic that matched no circuit; `None`: it passes under the link cap
    /// only.
    pub default_plan: Option<CircuitPlan>,
    /// A circuit's instance is released after it has been empty this long (it is released
    /// between one and two times this after it emptied, see docs/design.md).
    pub idle_release_ns: u64,
    /// The memory limit (bytes of packet footprint) of each circuit's instance, unless its
    /// plan sets `cake.memlimit`.
    pub circuit_memory_limit: u64,
    /// The packet limit of each circuit's instance (the smaller of this and its plan's
    /// `cake.packet_limit`): the most its packet slab grows to.
    pub circuit_packet_limit: u32,
    /// The most packets all circuits together may hold; over it, each enqueue drops from
    /// the circuit that holds the most (when it holds at least twice the average, else from
    /// the arriving packet's own circuit). The forwarder sets it from the buffer pool that
    /// feeds the queue, so that a flood at a few circuits cannot empty the pool and stall
    /// receiving for every other subscriber. `usize::MAX`: no shared limit.
    pub total_packet_limit: usize,
    /// Released instances kept for reuse; more are freed. None is built before a
    /// circuit needs it.
    pub spare_instances: usize,
    /// Each circuit's [`CakeConfig::burst`]: bytes its shaper may send ahead of its plan's
    /// clock ([`DEFAULT_CIRCUIT_BURST`], one full Ethernet frame; 0 shapes as strictly as
    /// sch_cake.c). Without it a burst that arrives at one instant, as TCP sends them,
    /// leaves one packet per visit, each after the circuit's state went cold again.
    pub circuit_burst: u32,
    /// The node tree this direction's circuits share ([`super::TreeRef::build`]): each
    /// circuit then runs at its share of its nodes' caps, not at its plan alone.
    pub rate_tree: Option<super::TreeRef>,
}

impl Default for CircuitShaperConfig {
    /// No circuits, no link cap, default CAKE for unmatched traffic's queue, 30 s idle
    /// release, 4 MiB and 2048 packets per instance, 16 spare instances, a burst of one frame.
    fn default() -> CircuitShaperConfig {
        CircuitShaperConfig {
            link: CakeConfig::default(),
            plans: Arc::from(Vec::new()),
            default_plan: None,
            idle_release_ns: 30_000_000_000,
            circuit_memory_limit: 4 << 20,
            circuit_packet_limit: 2048,
            total_packet_limit: usize::MAX,
            spare_instances: 16,
            circuit_burst: DEFAULT_CIRCUIT_BURST,
            rate_tree: None,
        }
    }
}

/// Why a [`CircuitShaperConfig`] was refused. Every message says which part and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CircuitConfigError {
    /// The link options are invalid.
    #[error("link: {0}")]
    Link(ConfigError),
    /// A circuit's plan is invalid.
    #[error("circuit slot {slot}: {source}")]
    Plan {
        /// The slot.
        slot: u32,
        /// What was wrong with its CAKE options or rate.
        source: ConfigError,
    },
    /// The default plan is invalid.
    #[error("default plan: {0}")]
    DefaultPlan(ConfigError),
    /// A plan's minimum is above its maximum.
    #[error("circuit slot {slot}: min {min} is above the plan's rate {rate}; lower min or raise the rate")]
    MinAboveRate {
        /// The slot.
        slot: u32,
        /// The minimum.
        min: Rate,
        /// The maximum.
        rate: Rate,
    },
    /// More slots than a `u32` slot index can name.
    #[error("{slots} circuit slots is more than the {max} a slot index can name; split the circuits over more shapers")]
    TooManySlots {
        /// Slots asked for.
        slots: usize,
        /// The largest number accepted.
        max: usize,
    },
    /// A zero per-circuit memory limit.
    #[error("circuit_memory_limit 0 would drop every packet; use at least one MTU (the default is 4 MiB)")]
    ZeroMemoryLimit,
    /// A zero per-circuit packet limit.
    #[error(
        "circuit_packet_limit 0 would drop every packet; use at least 1 (the default is 2048)"
    )]
    ZeroPacketLimit,
    /// A zero limit for all circuits together.
    #[error("total_packet_limit 0 would drop every packet; use at least 1 (usize::MAX for no shared limit)")]
    ZeroTotalPacketLimit,
}

/// The default [`CircuitShaperConfig::circuit_burst`]: one full Ethernet frame, the
/// smallest useful bucket of a token-bucket shaper (a TBF whose bucket is smaller than a
/// frame never sends that frame).
pub const DEFAULT_CIRCUIT_BURST: u32 = 1514;

/// The most slots a config may have: slot `u32::MAX - 1` is the last one a `u32` index can
/// name once the default class takes an index of its own.
pub const MAX_SLOTS: usize = (u32::MAX - 1) as usize;

impl CircuitShaperConfig {
    /// Checks every part without building anything.
    ///
    /// # Errors
    /// The first problem found, naming the part.
    pub fn validate(&self) -> Result<(), CircuitConfigError> {
        if self.circuit_memory_limit == 0 {
            return Err(CircuitConfigError::ZeroMemoryLimit);
        }
        if self.circuit_packet_limit == 0 {
            return Err(CircuitConfigError::ZeroPacketLimit);
        }
        if self.total_packet_limit == 0 {
            return Err(CircuitConfigError::ZeroTotalPacketLimit);
        }
        if self.plans.len() > MAX_SLOTS {
            return Err(CircuitConfigError::TooManySlots {
                slots: self.plans.len(),
                max: MAX_SLOTS,
            });
        }
        self.link.validate().map_err(CircuitConfigError::Link)?;
        for (slot, plan) in self.plans.iter().enumerate() {
            let Some(plan) = plan else { continue };
            let slot = slot as u32;
            self.instance_config(plan)
                .validate()
                .map_err(|source| CircuitConfigError::Plan { slot, source })?;
            if let Some(min) = plan.min {
                if !plan.rate.is_unlimited() && min > plan.rate {
                    return Err(CircuitConfigError::MinAboveRate {
                        slot,
                        min,
                        rate: plan.rate,
                    });
                }
            }
        }
        if let Some(plan) = &self.default_plan {
            self.instance_config(plan)
                .validate()
                .map_err(CircuitConfigError::DefaultPlan)?;
        }
        Ok(())
    }

    /// The CAKE configuration of `plan`'s instance: its options at its rate, with the
    /// per-circuit memory and packet limits applied, and COBALT's target following the
    /// flows' rounds at the rate in force (`CakeConfig::round_target`): a circuit's queue is
    /// a slow link of its own, often a few Mbit/s, where a few full frames per flow outlast
    /// the 5 ms target; under a node tree its rate is its share, below its plan.
    pub fn instance_config(&self, plan: &CircuitPlan) -> CakeConfig {
        CakeConfig {
            rate: plan.rate,
            memlimit: Some(plan.cake.memlimit.unwrap_or(self.circuit_memory_limit)),
            packet_limit: plan.cake.packet_limit.min(self.circuit_packet_limit),
            round_target: true,
            burst: self.circuit_burst,
            ..plan.cake.clone()
        }
    }

    /// The CAKE configuration of the default class's instance: the default plan's, or the
    /// link's options unshaped.
    pub fn default_instance_config(&self) -> CakeConfig {
        match &self.default_plan {
            Some(plan) => self.instance_config(plan),
            None => self.instance_config(&CircuitPlan {
                rate: Rate::UNLIMITED,
                min: None,
                parent: None,
                cake: CakeConfig {
                    memlimit: None,
                    ..self.link.clone()
                },
            }),
        }
    }

    /// The plan of `slot`, if the slot holds one.
    pub fn plan(&self, slot: u32) -> Option<&CircuitPlan> {
        self.plans.get(slot as usize).and_then(Option::as_ref)
    }
}
