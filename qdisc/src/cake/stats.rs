//! CAKE's statistics, named after the kernel's `TCA_CAKE_STATS_*` and
//! `TCA_CAKE_TIN_STATS_*` attributes so cakewalk's output lines up with `tc -s qdisc`.
//!
//! The hot path writes these fields directly; reading them is free. Delays are kept in
//! nanoseconds (the EWMAs would lose everything below 256 µs in whole microseconds) and
//! offered in microseconds through accessors. Each tin also keeps an `hdrhistogram` of
//! sojourn times in µs, fed with one packet in [`DELAY_SAMPLE_EVERY`] to keep the cost per
//! packet under a nanosecond.

use hdrhistogram::Histogram;

use crate::{cold_path, DropReason};

/// One delivered packet in this many is recorded in the per-tin delay histogram.
pub const DELAY_SAMPLE_EVERY: u32 = 16;

/// Highest delay the histograms track (µs); longer sojourns are clamped to it.
pub const DELAY_HISTOGRAM_MAX_US: u64 = 60_000_000;

/// Statistics of one tin (`TCA_CAKE_TIN_STATS_*`).
///
/// `repr(C)`, line-aligned, the counters a packet touches first: the first 64 bytes, one
/// line, hold what both an enqueue and a dequeue write (flow counts, backlog, sent, delay
/// EWMAs), then come the lookup counters and the rarer ones. In a subscriber's instance,
/// cold whenever a packet comes, every line touched is a miss: at the 248 bytes of the
/// fields alone each tin's first 64 bytes straddled two lines. The stride is 256, a power
/// of two, so indexing a tin costs the link instance no more than before.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct TinStats {
    /// Flows in the sparse rotation (`tc` shows this plus `decaying_flows` as sp_flows).
    pub sparse_flows: u32,
    /// Flows in the bulk rotation.
    pub bulk_flows: u32,
    /// Empty flows still decaying their COBALT state.
    pub decaying_flows: u32,
    /// Largest frame seen (bytes).
    pub max_skblen: u32,
    /// Bytes queued in this tin now.
    pub backlog_bytes: u64,
    /// Packets delivered (dequeued or bypassed). Linux counts these at enqueue; cakewalk
    /// counts what actually left, so `sent` matches the port's TX counters.
    pub sent_packets: u64,
    /// Bytes (frame length) delivered.
    pub sent_bytes: u64,
    /// Average delay EWMA (ns).
    pub avg_delay_ns: u64,
    /// Peak-tracking delay EWMA (ns).
    pub peak_delay_ns: u64,
    /// Base (minimum-tracking) delay EWMA (ns).
    pub base_delay_ns: u64,
    /// Lookups that hit the tag in the first way (not exported by Linux).
    pub way_directs: u64,
    /// Lookups that took an empty way.
    pub way_misses: u64,
    /// Set-associative lookups that found their tag in another way than the first.
    pub way_indirect_hits: u64,
    /// Lookups that found all 8 ways busy with other flows and evicted one.
    pub way_collisions: u64,
    /// Packets CE-marked by COBALT.
    pub ecn_marked_packets: u64,
    /// Packets dropped from this tin, all reasons.
    pub dropped_packets: u64,
    /// Packets dropped by the ACK filter.
    pub acks_dropped_packets: u64,
    /// Flows with BLUE active.
    pub unresponsive_flows: u32,
    /// The per-flow DRR quantum (bytes).
    pub flow_quantum: u32,
    /// The tin's threshold rate in bytes/s (0 = unlimited).
    pub threshold_rate: u64,
    /// COBALT target (µs).
    pub target_us: u64,
    /// COBALT interval (µs).
    pub interval_us: u64,
    /// Sojourn times in µs: this tin's first delivered packet, then one in
    /// [`DELAY_SAMPLE_EVERY`]. Always empty in a subscriber's instance
    /// ([`crate::cake::SubscriberCake`]), which keeps none.
    pub delay_histogram: Histogram<u64>,
}

impl TinStats {
    pub(crate) fn new() -> TinStats {
        TinStats {
            threshold_rate: 0,
            sent_packets: 0,
            sent_bytes: 0,
            backlog_bytes: 0,
            target_us: 0,
            interval_us: 0,
            dropped_packets: 0,
            ecn_marked_packets: 0,
            acks_dropped_packets: 0,
            peak_delay_ns: 0,
            avg_delay_ns: 0,
            base_delay_ns: 0,
            way_indirect_hits: 0,
            way_misses: 0,
            way_collisions: 0,
            way_directs: 0,
            sparse_flows: 0,
            bulk_flows: 0,
            decaying_flows: 0,
            unresponsive_flows: 0,
            max_skblen: 0,
            flow_quantum: 0,
            delay_histogram: unused_histogram(),
        }
    }

    /// Zeroes every counter and empties the histogram, keeping its allocation (the
    /// pattern names every field, so a new one cannot be forgotten here).
    pub(crate) fn clear(&mut self) {
        let TinStats {
            threshold_rate,
            sent_packets,
            sent_bytes,
            backlog_bytes,
            target_us,
            interval_us,
            dropped_packets,
            ecn_marked_packets,
            acks_dropped_packets,
            peak_delay_ns,
            avg_delay_ns,
            base_delay_ns,
            way_indirect_hits,
            way_misses,
            way_collisions,
            way_directs,
            sparse_flows,
            bulk_flows,
            decaying_flows,
            unresponsive_flows,
            max_skblen,
            flow_quantum,
            delay_histogram,
        } = self;
        *threshold_rate = 0;
        *sent_packets = 0;
        *sent_bytes = 0;
        *backlog_bytes = 0;
        *target_us = 0;
        *interval_us = 0;
        *dropped_packets = 0;
        *ecn_marked_packets = 0;
        *acks_dropped_packets = 0;
        *peak_delay_ns = 0;
        *avg_delay_ns = 0;
        *base_delay_ns = 0;
        *way_indirect_hits = 0;
        *way_misses = 0;
        *way_collisions = 0;
        *way_directs = 0;
        *sparse_flows = 0;
        *bulk_flows = 0;
        *decaying_flows = 0;
        *unresponsive_flows = 0;
        *max_skblen = 0;
        *flow_quantum = 0;
        delay_histogram.reset();
    }
}

/// The delay histogram of a tin in use: 1 µs to [`DELAY_HISTOGRAM_MAX_US`] with
/// `sigfig` significant decimal digits (2 for the link instance: 20 KiB of counts).
pub(crate) fn delay_histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, DELAY_HISTOGRAM_MAX_US, sigfig)
        .expect("static histogram bounds are valid")
}

/// The histogram of a tin the diffserv mode does not use: nothing is recorded into it
/// (its tin delivers nothing), so it holds the fewest counts hdrhistogram allows (a few
/// bytes) instead of a used tin's kilobytes.
pub(crate) fn unused_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 2, 0).expect("static histogram bounds are valid")
}

/// Whether `h` is an [`unused_histogram`], to be replaced when its tin comes into use.
pub(crate) fn is_unused_histogram(h: &Histogram<u64>) -> bool {
    h.high() < DELAY_HISTOGRAM_MAX_US
}

impl TinStats {
    /// `TCA_CAKE_TIN_STATS_PEAK_DELAY_US`.
    pub fn peak_delay_us(&self) -> u64 {
        self.peak_delay_ns / 1000
    }

    /// `TCA_CAKE_TIN_STATS_AVG_DELAY_US`.
    pub fn avg_delay_us(&self) -> u64 {
        self.avg_delay_ns / 1000
    }

    /// `TCA_CAKE_TIN_STATS_BASE_DELAY_US`.
    pub fn base_delay_us(&self) -> u64 {
        self.base_delay_ns / 1000
    }

    /// What `tc` reports as SPARSE_FLOWS: sparse plus decaying.
    pub fn sparse_flows_reported(&self) -> u32 {
        self.sparse_flows + self.decaying_flows
    }
}

/// Statistics of one CAKE instance (`TCA_CAKE_STATS_*`) and its tins.
///
/// `repr(C)`, cache-line aligned: the scalars every packet reads or writes come first, in
/// one line, then the tins (see [`TinStats`]), then what only drops, clamps and reports
/// touch.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct CakeStats {
    /// The **peak** memory used (as Linux reports it).
    pub memory_used: u64,
    /// Dequeues refused because the shaper had no credit.
    pub overlimits: u64,
    /// Packets sent through [`crate::Qdisc::try_bypass`].
    pub bypassed_packets: u64,
    /// Smallest network length seen (frame minus L2 header when compensating).
    pub min_netlen: u32,
    /// Largest network length seen.
    pub max_netlen: u32,
    /// Smallest adjusted length charged.
    pub min_adjlen: u32,
    /// Largest adjusted length charged.
    pub max_adjlen: u32,
    pub(crate) avg_netoff_fp: u32,
    /// Per-tin statistics, indexed by tin (always 8; see [`CakeStats::active_tins`]). An
    /// array rather than a `Vec`: the per-packet counters are then at fixed offsets from
    /// the instance, with no pointer to load and no length to check.
    pub tins: [TinStats; super::diffserv::MAX_TINS],
    /// How many tins the current diffserv mode uses.
    pub tin_count: usize,
    /// Autorate's capacity estimate (bytes/s); the configured rate without autorate.
    pub capacity_estimate: u64,
    /// The memory limit in force (bytes of `Packet::footprint`).
    pub memory_limit: u64,
    /// Times the shaper's clock lagged `now` by more than its catch-up allowance and was
    /// pulled forward (a worker stall; see `Cake::bound_catch_up`).
    pub catch_up_clamps: u64,
    /// Calls whose `now` was older than one seen before (clamped to it).
    pub clock_clamps: u64,
    /// Packets discarded when a tin was emptied (also counted as `Overflow` drops). A
    /// reconfigure to fewer tins moves their packets instead, so this stays 0.
    pub purged_packets: u64,
    /// Drops by reason (packets), indexed like [`DropReason::ALL`].
    pub drops: [u64; DropReason::ALL.len()],
    /// Drops by reason (bytes), indexed like [`DropReason::ALL`].
    pub drop_bytes: [u64; DropReason::ALL.len()],
}

impl CakeStats {
    pub(crate) fn new() -> CakeStats {
        CakeStats {
            capacity_estimate: 0,
            memory_limit: 0,
            memory_used: 0,
            min_netlen: u32::MAX,
            max_netlen: 0,
            min_adjlen: u32::MAX,
            max_adjlen: 0,
            overlimits: 0,
            clock_clamps: 0,
            catch_up_clamps: 0,
            bypassed_packets: 0,
            purged_packets: 0,
            drops: [0; DropReason::ALL.len()],
            drop_bytes: [0; DropReason::ALL.len()],
            tins: std::array::from_fn(|_| TinStats::new()),
            tin_count: 1,
            avg_netoff_fp: 0,
        }
    }

    /// Zeroes every counter and empties the histograms, keeping their allocations, as
    /// [`CakeStats::new`] leaves them (the pattern names every field).
    pub(crate) fn clear(&mut self) {
        let CakeStats {
            capacity_estimate,
            memory_limit,
            memory_used,
            min_netlen,
            max_netlen,
            min_adjlen,
            max_adjlen,
            overlimits,
            catch_up_clamps,
            clock_clamps,
            bypassed_packets,
            purged_packets,
            drops,
            drop_bytes,
            tins,
            tin_count,
            avg_netoff_fp,
        } = self;
        for n in [
            capacity_estimate,
            memory_limit,
            memory_used,
            overlimits,
            catch_up_clamps,
            clock_clamps,
            bypassed_packets,
            purged_packets,
        ] {
            *n = 0;
        }
        for n in [max_netlen, max_adjlen, avg_netoff_fp] {
            *n = 0;
        }
        *min_netlen = u32::MAX;
        *min_adjlen = u32::MAX;
        drops.fill(0);
        drop_bytes.fill(0);
        for t in tins {
            t.clear();
        }
        *tin_count = 1;
    }

    /// EWMA of the L2 header length (bytes), from the 16.16 fixed-point average the packet
    /// path keeps (a second field for the whole bytes cost a bypass a line of its own).
    pub fn avg_netoff(&self) -> u32 {
        self.avg_netoff_fp >> 16
    }

    /// The tins the current mode uses, indexed by tin.
    pub fn active_tins(&self) -> &[TinStats] {
        &self.tins[..self.tin_count]
    }

    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// Bytes dropped for `reason`.
    pub fn dropped_bytes(&self, reason: DropReason) -> u64 {
        self.drop_bytes[reason.index()]
    }

    /// Packets dropped for any reason (including purges).
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Bytes dropped for any reason.
    pub fn dropped_bytes_total(&self) -> u64 {
        self.drop_bytes.iter().sum()
    }

    #[inline]
    pub(crate) fn count_drop(&mut self, reason: DropReason, bytes: u64) {
        let i = reason.index();
        self.drops[i] += 1;
        self.drop_bytes[i] += bytes;
    }

    #[inline]
    pub(crate) fn track_lengths(&mut self, netlen: u32, adjlen: u32, l2_len: u32) {
        // Compare before storing: on a steady packet mix none of these change, and the
        // packet path then writes nothing here.
        if netlen < self.min_netlen {
            cold_path();
            self.min_netlen = netlen;
        }
        if netlen > self.max_netlen {
            cold_path();
            self.max_netlen = netlen;
        }
        if adjlen < self.min_adjlen {
            cold_path();
            self.min_adjlen = adjlen;
        }
        if adjlen > self.max_adjlen {
            cold_path();
            self.max_adjlen = adjlen;
        }
        // EWMA with shift 8 in 16.16 fixed point, as the kernel keeps avg_netoff. At its
        // fixed point (the average equals the sample) the EWMA returns its input.
        let sample = u64::from(l2_len.min(0xffff)) << 16;
        if u64::from(self.avg_netoff_fp) != sample {
            cold_path();
            self.avg_netoff_fp = ewma(u64::from(self.avg_netoff_fp), sample, 8) as u32;
        }
    }
}

/// The kernel's `cake_ewma`: `avg -= avg >> shift; avg += sample >> shift`.
#[inline]
pub(crate) fn ewma(avg: u64, sample: u64, shift: u32) -> u64 {
    avg - (avg >> shift) + (sample >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_converges_to_a_steady_sample() {
        let mut a = 0;
        for _ in 0..4000 {
            a = ewma(a, 1_000_000, 8);
        }
        assert!((999_000..=1_000_000).contains(&a), "{a}");
    }

    #[test]
    fn avg_netoff_tracks_the_l2_header() {
        let mut s = CakeStats::new();
        for _ in 0..4000 {
            s.track_lengths(1500, 1538, 14);
        }
        assert_eq!(
            (s.avg_netoff(), s.min_netlen, s.max_adjlen),
            (14, 1500, 1538)
        );
    }

    #[test]
    fn clear_leaves_the_statistics_as_new_with_the_histograms_kept() {
        let fresh = || {
            let mut s = CakeStats::new();
            s.tins[1].delay_histogram = delay_histogram(1);
            s
        };
        let mut s = fresh();
        s.count_drop(DropReason::Aqm, 100);
        s.track_lengths(1500, 1538, 14);
        s.memory_used = 7;
        s.tin_count = 3;
        s.tins[1].sent_packets = 9;
        s.tins[1].way_collisions = 2;
        s.tins[1].delay_histogram.saturating_record(1234);
        s.clear();
        assert_eq!(format!("{s:?}"), format!("{:?}", fresh()));
        assert_eq!(s.tins[1].delay_histogram.distinct_values(), 368);
    }

    #[test]
    fn drops_are_counted_by_reason() {
        let mut s = CakeStats::new();
        s.count_drop(DropReason::Aqm, 100);
        s.count_drop(DropReason::Overflow, 50);
        s.count_drop(DropReason::Overflow, 50);
        assert_eq!(s.dropped(DropReason::Overflow), 2);
        assert_eq!(s.dropped_bytes(DropReason::Aqm), 100);
        assert_eq!((s.dropped_total(), s.dropped_bytes_total()), (3, 200));
    }
}
