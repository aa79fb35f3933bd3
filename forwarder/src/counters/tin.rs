//! A TX queue's per-tin figures as the reports show them (CAKE's `tc -s` per-tin block).

use serde::Serialize;

/// Upper bounds (µs) of the sojourn-time histogram's buckets: 50 µs to 10 s, about three per
/// decade, around CAKE's 5 ms target and 100 ms interval.
pub const SOJOURN_BUCKETS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// Per-tin figures for stats output (CAKE's `tc -s` per-tin block).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TinSnapshot {
    /// Tin name ("bulk", "best_effort", "video", "voice", "tin0"...).
    pub name: String,
    /// Packets delivered (dequeued or bypassed). sch_cake.c counts its sent packets in
    /// `cake_enqueue`; cakewalk's CAKE counts them at delivery, so they match the port's TX
    /// counters.
    pub sent_packets: u64,
    /// Bytes (frame length) delivered.
    pub sent_bytes: u64,
    /// Packets dropped.
    pub dropped_packets: u64,
    /// Packets ECN-marked.
    pub ecn_marked_packets: u64,
    /// ACKs dropped by the ACK filter.
    pub acks_dropped_packets: u64,
    /// Bytes queued.
    pub backlog_bytes: u64,
    /// Sparse flows (sparse + decaying).
    pub sparse_flows: u64,
    /// Bulk flows.
    pub bulk_flows: u64,
    /// Sojourn time (ns): p50, p99, p99.9, max; zeros when nothing was measured.
    pub sojourn_ns: [u64; 4],
    /// The sampled sojourn times as cumulative buckets (for Prometheus; not in the JSON).
    #[serde(skip)]
    pub sojourn_histogram: SojournBuckets,
}

/// A tin's sojourn-time histogram folded into fixed buckets
/// ([`SOJOURN_BUCKETS_US`]): what a Prometheus histogram needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SojournBuckets {
    /// Per bucket bound, the samples at or below it (cumulative).
    pub buckets: Vec<u64>,
    /// Samples in all.
    pub count: u64,
    /// Their sum (µs).
    pub sum_us: u64,
}

impl SojournBuckets {
    /// Folds `h` (µs values) into the fixed buckets. A recorded value counts as the middle of
    /// its histogram bucket (within the histogram's 1 % precision) under the first bound at
    /// or above it; values past the last bound only in the count.
    pub fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> SojournBuckets {
        let bounds = &SOJOURN_BUCKETS_US;
        let mut per = vec![0u64; bounds.len()];
        let mut sum_us = 0u64;
        for v in h.iter_recorded() {
            let n = v.count_at_value();
            let value = h.median_equivalent(v.value_iterated_to());
            sum_us = sum_us.saturating_add(value.saturating_mul(n));
            if let Some(i) = bounds.iter().position(|b| value <= *b) {
                per[i] += n;
            }
        }
        let mut running = 0u64;
        let buckets = per
            .into_iter()
            .map(|n| {
                running += n;
                running
            })
            .collect();
        SojournBuckets {
            buckets,
            count: h.len(),
            sum_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sojourn_samples_fold_into_cumulative_buckets_with_their_sum() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 2).unwrap();
        for us in [30, 700, 700, 4_000, 90_000_000] {
            h.saturating_record(us);
        }
        let b = SojournBuckets::from_histogram(&h);
        let bounds = SOJOURN_BUCKETS_US;
        let at = |us: u64| b.buckets[bounds.iter().position(|x| *x == us).unwrap()];
        assert_eq!(
            (at(50), at(500), at(1_000), at(5_000), at(10_000_000)),
            (1, 1, 3, 4, 4)
        );
        assert_eq!(
            b.count, 5,
            "the clamped 90 s sample is only in the count (+Inf)"
        );
        let expected: u64 = 30 + 700 + 700 + 4_000 + 60_000_000;
        assert!(
            b.sum_us.abs_diff(expected) < expected / 50,
            "{} vs {expected}",
            b.sum_us
        );
        let empty = hdrhistogram::Histogram::<u64>::new(2).unwrap();
        assert_eq!(SojournBuckets::from_histogram(&empty).count, 0);
    }
}
