//! What a [`super::CircuitShaper`] reports per circuit: cumulative counters kept per slot
//! in a compact array (they outlive the slot's instance), and the live figures of its
//! instance (backlog, rate, delays, per tin) while it has one.

use crate::cake::{CakeStats, MAX_TINS};
use crate::{DropReason, Rate};

/// A slot's cumulative counters: kept in the shaper's per-slot array, so they survive the
/// release of the slot's instance.
///
/// `repr(C)`: the sent counters, written per packet, first (see the shaper's slot record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct CircuitCounters {
    /// Packets delivered (dequeued or bypassed).
    pub sent_packets: u64,
    /// Bytes (frame length) delivered.
    pub sent_bytes: u64,
    /// Packets dropped, by [`DropReason::index`].
    pub drops: [u64; DropReason::ALL.len()],
    /// Bytes dropped, all reasons.
    pub dropped_bytes: u64,
}

impl CircuitCounters {
    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// Packets dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    pub(super) fn add(&mut self, other: &CircuitCounters) {
        self.sent_packets += other.sent_packets;
        self.sent_bytes += other.sent_bytes;
        for (a, b) in self.drops.iter_mut().zip(other.drops) {
            *a += b;
        }
        self.dropped_bytes += other.dropped_bytes;
    }
}

/// One tin of a circuit's instance (the per-tin part of "one circuit in full"), counted
/// since the instance was taken for this circuit (a recycled instance is reset first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CircuitTinStats {
    /// The tin's name in the circuit's diffserv mode.
    pub name: &'static str,
    /// The tin's threshold rate in bytes/s (0 = unlimited).
    pub threshold_rate: u64,
    /// Packets delivered.
    pub sent_packets: u64,
    /// Bytes delivered.
    pub sent_bytes: u64,
    /// Packets dropped (AQM and overflow).
    pub dropped_packets: u64,
    /// Packets marked CE.
    pub ecn_marked_packets: u64,
    /// Bytes queued now.
    pub backlog_bytes: u64,
    /// CAKE's peak delay (a fast-rising, slowly decaying estimate), in ns.
    pub peak_delay_ns: u64,
    /// CAKE's average delay, in ns.
    pub avg_delay_ns: u64,
    /// CAKE's base delay, in ns.
    pub base_delay_ns: u64,
    /// Sparse flows now.
    pub sparse_flows: u32,
    /// Bulk flows now.
    pub bulk_flows: u32,
}

/// One circuit's figures ([`super::CircuitShaper::circuit_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircuitStats {
    /// Cumulative counters (across instance releases).
    pub counters: CircuitCounters,
    /// Packets queued now.
    pub backlog_packets: u64,
    /// Bytes queued now.
    pub backlog_bytes: u64,
    /// The rate its instance shapes to now (after rate-only changes), or its plan's rate
    /// when it has no instance; `Rate::UNLIMITED` for a slot without a plan.
    pub rate: Rate,
    /// True while the slot holds an instance.
    pub active: bool,
    /// The largest of its tins' peak delays (CAKE's `pk_delay`, a decaying peak of the
    /// sojourn time), in ns; 0 without an instance.
    pub sojourn_peak_ns: u64,
    /// Tins in use (the first `tin_count` of `tins`); 0 without an instance.
    pub tin_count: usize,
    /// Per-tin figures.
    pub tins: [CircuitTinStats; MAX_TINS],
}

/// The tin figures of `s`, named after `names`.
pub(super) fn tin_figures(
    s: &CakeStats,
    names: &'static [&'static str],
) -> [CircuitTinStats; MAX_TINS] {
    let mut out = [CircuitTinStats::default(); MAX_TINS];
    for (i, (o, t)) in out.iter_mut().zip(s.tins.iter()).enumerate() {
        if i >= s.tin_count {
            break;
        }
        *o = CircuitTinStats {
            name: names.get(i).copied().unwrap_or(""),
            threshold_rate: t.threshold_rate,
            sent_packets: t.sent_packets,
            sent_bytes: t.sent_bytes,
            dropped_packets: t.dropped_packets,
            ecn_marked_packets: t.ecn_marked_packets,
            backlog_bytes: t.backlog_bytes,
            peak_delay_ns: t.peak_delay_ns,
            avg_delay_ns: t.avg_delay_ns,
            base_delay_ns: t.base_delay_ns,
            sparse_flows: t.sparse_flows,
            bulk_flows: t.bulk_flows,
        };
    }
    out
}
