//! The synth port's counters: each generator and sink queue publishes its own block once
//! per burst (single writer, relaxed stores), and the reports sum them and read the one-way
//! delay histograms.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;

/// Largest delay the histogram records (60 s); larger values are clamped.
pub const HIST_MAX_NS: u64 = 60_000_000_000;

/// Counters of one generator queue, published once per burst.
#[derive(Debug, Default)]
pub struct GenCounters {
    /// Frames generated.
    pub packets: AtomicU64,
    /// Bytes generated.
    pub bytes: AtomicU64,
    /// Bursts cut short because the pool was empty.
    pub pool_empty: AtomicU64,
    /// Set once the generator reached its packet or time limit.
    pub finished: AtomicBool,
}

/// Counters of one sink queue, published once per burst.
#[derive(Debug, Default)]
pub struct SinkCounters {
    /// Synth frames received.
    pub packets: AtomicU64,
    /// Bytes received (synth frames).
    pub bytes: AtomicU64,
    /// Frames that were not synth frames (or of unknown flows).
    pub foreign: AtomicU64,
    /// Frames that arrived after a later frame of the same flow.
    pub reordered: AtomicU64,
    /// Frames seen twice.
    pub duplicates: AtomicU64,
    /// Frames carrying ECN CE.
    pub ce_marked: AtomicU64,
}

/// Shared view of one synth port's generator and sink counters and delay histograms.
#[derive(Debug)]
pub struct SynthStats {
    /// One entry per generator queue.
    pub generators: Mutex<Vec<Arc<GenCounters>>>,
    /// One entry per sink queue.
    pub sinks: Mutex<Vec<Arc<SinkCounters>>>,
    /// One-way delay (ns) since the start.
    pub delay_total: Mutex<Histogram<u64>>,
    /// One-way delay (ns) since the stats reader last took it.
    pub delay_interval: Mutex<Histogram<u64>>,
}

impl Default for SynthStats {
    fn default() -> Self {
        SynthStats {
            generators: Mutex::new(Vec::new()),
            sinks: Mutex::new(Vec::new()),
            delay_total: Mutex::new(new_delay_histogram()),
            delay_interval: Mutex::new(new_delay_histogram()),
        }
    }
}

/// A delay histogram from 1 ns to 60 s with 2 significant digits (percentiles within 1 %):
/// the sink records every frame, and with three the counts the delays of a loaded run fall
/// in spanned 50 KiB, a cache miss per frame on a core whose caches the shaper's state
/// already fills (4 % of a worker at 10 000 circuits).
pub fn new_delay_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 2).expect("static histogram bounds are valid")
}

/// Totals of a synth port, summed over its queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SynthTotals {
    /// Frames generated.
    pub sent_packets: u64,
    /// Bytes generated.
    pub sent_bytes: u64,
    /// Synth frames received by the sink.
    pub received_packets: u64,
    /// Bytes received by the sink.
    pub received_bytes: u64,
    /// Frames that arrived late (after a later frame of the same flow).
    pub reordered: u64,
    /// Frames received twice.
    pub duplicates: u64,
    /// Non-synth frames received.
    pub foreign: u64,
    /// CE-marked frames received.
    pub ce_marked: u64,
    /// Times the generator found its pool empty.
    pub pool_empty: u64,
}

impl SynthStats {
    /// Sums the counters of every queue.
    pub fn totals(&self) -> SynthTotals {
        let mut t = SynthTotals::default();
        for g in lock(&self.generators).iter() {
            t.sent_packets += g.packets.load(Relaxed);
            t.sent_bytes += g.bytes.load(Relaxed);
            t.pool_empty += g.pool_empty.load(Relaxed);
        }
        for s in lock(&self.sinks).iter() {
            t.received_packets += s.packets.load(Relaxed);
            t.received_bytes += s.bytes.load(Relaxed);
            t.reordered += s.reordered.load(Relaxed);
            t.duplicates += s.duplicates.load(Relaxed);
            t.foreign += s.foreign.load(Relaxed);
            t.ce_marked += s.ce_marked.load(Relaxed);
        }
        t
    }

    /// Registers one more generator queue and returns its counters.
    pub fn add_generator(&self) -> Arc<GenCounters> {
        let counters = Arc::new(GenCounters::default());
        lock(&self.generators).push(counters.clone());
        counters
    }

    /// Registers one more sink queue and returns its counters.
    pub fn add_sink(&self) -> Arc<SinkCounters> {
        let counters = Arc::new(SinkCounters::default());
        lock(&self.sinks).push(counters.clone());
        counters
    }

    /// Adds a sink's delays (a histogram from [`new_delay_histogram`]) to both totals.
    pub fn add_delays(&self, delays: &Histogram<u64>) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = lock(&self.delay_total).add(delays);
        let _ = lock(&self.delay_interval).add(delays);
    }

    /// True when this port has generators and all of them reached their limits.
    pub fn generators_finished(&self) -> bool {
        let g = lock(&self.generators);
        !g.is_empty() && g.iter().all(|c| c.finished.load(Relaxed))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
