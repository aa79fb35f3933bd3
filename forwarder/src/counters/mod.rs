//! Counters and snapshots: what the data path writes and the reports read. A leaf: it
//! depends on nothing else in the crate, so the engine and the ports write here and
//! [`crate::stats`] reads here without either knowing the other.
//!
//! The engine's counters are one flat block of `u64`s per worker ([`WorkerCounters`]),
//! written only by that worker (a plain local copy on the hot path, published with relaxed
//! stores once per loop iteration) and summed by the reader. No counter line is ever written
//! by two threads, so counting costs no shared cache-line traffic.
//!
//! The block holds, per port, received/transmitted packets and bytes and parse issues, and
//! per TX queue ("egress": port × queue), what was offered, bypassed, dequeued, sent, still
//! waiting in the transmit burst, and dropped by reason. Beside it: a TX queue's per-tin
//! figures ([`TinSnapshot`]) and the synth port's generator and sink counters ([`synth`]).

pub mod synth;
mod tin;

pub use tin::{SojournBuckets, TinSnapshot, SOJOURN_BUCKETS_US};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use qdisc::DropReason;

/// Per-port counter fields.
pub mod port {
    /// Frames received.
    pub const RX_PACKETS: usize = 0;
    /// Bytes received.
    pub const RX_BYTES: usize = 1;
    /// Frames the parser could not fully read (forwarded anyway, as non-IP). Only frames
    /// that were classified count: with one TX queue per port, a frame that bypasses an
    /// idle FIFO is never parsed (its queue needs no meta), so it is not counted; with CAKE,
    /// with several TX queues or when it is queued, every frame is parsed.
    pub const MALFORMED: usize = 2;
    /// Fields per port.
    pub const FIELDS: usize = 3;
}

/// Per-egress (port × TX queue) counter fields.
pub mod egress {
    /// Packets offered to the queue by a worker that does not run it: each crossed to the
    /// running worker's core (its intake or hand-off ring), as a packet steered to another
    /// CPU does in Linux (RPS, XDP's cpumap).
    pub const HANDED_IN: usize = 0;
    /// Packets that bypassed the queue.
    pub const BYPASS: usize = 1;
    /// Packets the shaper released.
    pub const DEQUEUED: usize = 2;
    /// Packets transmitted.
    pub const TX_PACKETS: usize = 3;
    /// Bytes transmitted.
    pub const TX_BYTES: usize = 4;
    /// Packets waiting in the transmit burst (a gauge).
    pub const PENDING: usize = 5;
    /// First drop counter; reason `r` is at `DROPS + r as index in DropReason::ALL`.
    pub const DROPS: usize = 6;
    /// Fields per egress.
    pub const FIELDS: usize = DROPS + super::DropReason::ALL.len();
}

/// Extra entries after each block so two workers' blocks never share a cache line.
const PAD: usize = 16;

/// The shape of a counter block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Ports.
    pub ports: usize,
    /// TX queues per port.
    pub queues: usize,
}

impl Layout {
    /// Egress queues in total.
    pub fn egress_count(&self) -> usize {
        self.ports * self.queues
    }

    /// Entries in a block.
    pub fn len(&self) -> usize {
        self.ports * port::FIELDS + self.egress_count() * egress::FIELDS
    }

    /// True for an empty layout.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Index of port field `field` of port `p`.
    #[inline]
    pub fn port(&self, p: usize, field: usize) -> usize {
        p * port::FIELDS + field
    }

    /// Index of egress field `field` of egress `e`.
    #[inline]
    pub fn egress(&self, e: usize, field: usize) -> usize {
        self.ports * port::FIELDS + e * egress::FIELDS + field
    }
}

/// A worker's published block.
#[derive(Debug)]
pub struct Counters {
    vals: Box<[AtomicU64]>,
}

impl Counters {
    /// A zeroed block for `layout`.
    pub fn new(layout: Layout) -> Counters {
        Counters {
            vals: (0..layout.len() + PAD).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Publishes `local` (same layout).
    pub fn publish(&self, local: &[u64]) {
        for (a, v) in self.vals.iter().zip(local) {
            a.store(*v, Relaxed);
        }
    }

    /// Adds this block into `sum`.
    pub fn add_into(&self, sum: &mut [u64]) {
        for (s, a) in sum.iter_mut().zip(self.vals.iter()) {
            *s += a.load(Relaxed);
        }
    }
}

/// Every worker's counter block: worker `w` writes block `w` only; reports sum them all.
#[derive(Debug)]
pub struct WorkerCounters {
    /// The layout of every block.
    pub layout: Layout,
    blocks: Box<[Counters]>,
}

impl WorkerCounters {
    /// Zeroed blocks for `workers` workers.
    pub fn new(layout: Layout, workers: usize) -> WorkerCounters {
        WorkerCounters {
            layout,
            blocks: (0..workers).map(|_| Counters::new(layout)).collect(),
        }
    }

    /// Worker `worker`'s block.
    ///
    /// # Panics
    /// When `worker` is not below the worker count given to [`WorkerCounters::new`].
    pub fn block(&self, worker: usize) -> &Counters {
        &self.blocks[worker]
    }

    /// Counters summed over every worker.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::sum(self.layout, self.blocks.iter())
    }
}

/// Counters summed over every worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The layout of `vals`.
    pub layout: Layout,
    /// The values.
    pub vals: Vec<u64>,
}

impl Snapshot {
    /// Sums `blocks`.
    pub fn sum<'a>(layout: Layout, blocks: impl IntoIterator<Item = &'a Counters>) -> Snapshot {
        let mut vals = vec![0; layout.len()];
        for b in blocks {
            b.add_into(&mut vals);
        }
        Snapshot { layout, vals }
    }

    /// Port field.
    pub fn port(&self, p: usize, field: usize) -> u64 {
        self.vals[self.layout.port(p, field)]
    }

    /// Egress field.
    pub fn egress(&self, e: usize, field: usize) -> u64 {
        self.vals[self.layout.egress(e, field)]
    }

    /// Drops of egress `e` for `reason`.
    pub fn drops(&self, e: usize, reason: DropReason) -> u64 {
        self.egress(e, egress::DROPS + reason.index())
    }

    /// Packets transmitted on port `p` (summed over its TX queues).
    pub fn port_tx(&self, p: usize) -> (u64, u64) {
        let q = self.layout.queues;
        (q * p..q * (p + 1)).fold((0, 0), |(pk, by), e| {
            (
                pk + self.egress(e, egress::TX_PACKETS),
                by + self.egress(e, egress::TX_BYTES),
            )
        })
    }

    /// The field-wise difference `self - earlier` (gauges are taken from `self`).
    pub fn delta(&self, earlier: &Snapshot) -> Snapshot {
        let mut vals: Vec<u64> = self
            .vals
            .iter()
            .zip(&earlier.vals)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        for e in 0..self.layout.egress_count() {
            let i = self.layout.egress(e, egress::PENDING);
            vals[i] = self.vals[i];
        }
        Snapshot {
            layout: self.layout,
            vals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_from_several_workers_sum_field_by_field() {
        let layout = Layout {
            ports: 2,
            queues: 2,
        };
        let a = Counters::new(layout);
        let b = Counters::new(layout);
        let mut local = vec![0u64; layout.len()];
        local[layout.port(1, port::RX_PACKETS)] = 5;
        local[layout.egress(3, egress::DROPS + DropReason::Aqm.index())] = 2;
        a.publish(&local);
        b.publish(&local);
        let s = Snapshot::sum(layout, [&a, &b]);
        assert_eq!(s.port(1, port::RX_PACKETS), 10);
        assert_eq!(s.drops(3, DropReason::Aqm), 4);
        assert_eq!(s.port(0, port::RX_PACKETS), 0);
    }
}
