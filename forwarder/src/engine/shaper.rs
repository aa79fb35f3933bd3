//! What the engine needs from one TX queue, as one small trait ([`Shaper`]) with two
//! implementations: [`qdisc::mq::TxQueue`] over any [`MqQdisc`] (CAKE, FIFO), and
//! [`Passthrough`] (no qdisc at all: the bare port loop the benchmarks compare against).
//!
//! The trait follows `TxQueue`'s call protocol: any worker may [`Shaper::offer`]; a bypassed
//! packet must be transmitted before the next call into the queue; [`Shaper::run`] hands
//! dequeued packets to `transmit` while it holds the queue. Drops are counted by the queue
//! itself ([`TxQueueStats`]) so conservation can be checked against the engine's own counts.

use qdisc::cake::Cake;
use qdisc::mq::{
    BurstOutcome, Intake, MqQdisc, NextRun, Offerer, RunResult, TxQueue, TxQueueStats,
};
use qdisc::{Packet, PacketMeta, Rate};

use crate::counters::{SojournBuckets, TinSnapshot};

/// A qdisc that can describe its tins for stats output.
pub trait TinReport {
    /// Per-tin figures; empty for disciplines without tins.
    fn tin_snapshots(&self) -> Vec<TinSnapshot> {
        Vec::new()
    }
}

impl<P> TinReport for qdisc::fifo::Fifo<P> {}

/// A circuit shaper's tins are per circuit (`ctl circuit ID`); the queue itself has none.
impl<P: Packet> TinReport for qdisc::circuit::CircuitShaper<P> {}

impl<P: Packet> TinReport for Cake<P> {
    fn tin_snapshots(&self) -> Vec<TinSnapshot> {
        let names = self.tin_names();
        let stats = self.stats();
        stats
            .active_tins()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let h = &t.delay_histogram;
                let us = |q: f64| h.value_at_quantile(q) * 1000;
                TinSnapshot {
                    name: names
                        .get(i)
                        .map_or_else(|| format!("tin{i}"), |n| n.to_string()),
                    sent_packets: t.sent_packets,
                    sent_bytes: t.sent_bytes,
                    dropped_packets: t.dropped_packets,
                    ecn_marked_packets: t.ecn_marked_packets,
                    acks_dropped_packets: t.acks_dropped_packets,
                    backlog_bytes: t.backlog_bytes,
                    sparse_flows: u64::from(t.sparse_flows_reported()),
                    bulk_flows: u64::from(t.bulk_flows),
                    sojourn_ns: if h.is_empty() {
                        [0; 4]
                    } else {
                        [us(0.5), us(0.99), us(0.999), h.max() * 1000]
                    },
                    sojourn_histogram: SojournBuckets::from_histogram(h),
                }
            })
            .collect()
    }
}

/// One TX queue as the engine sees it.
pub trait Shaper<P>: Send + Sync {
    /// Offers `pkt` (see `TxQueue::enqueue`).
    fn offer(&self, now_ns: u64, pkt: P, meta: &PacketMeta) -> Intake<P>;

    /// Offers a burst (see `TxQueue::enqueue_burst`): `pkts[i]` with `metas[i]`, which
    /// `classify` writes only when the queue needs it (at most once per packet; a burst that
    /// bypasses a FIFO is never classified; a caller that classified already passes a
    /// no-op). Bypassed packets are appended to `out` in order (or swapped in when `out` is
    /// empty) and must be transmitted before the next call into this queue; packets the
    /// queue cannot take are dropped here and counted by the queue. `pkts` is emptied. The
    /// outcome carries the bytes of the bypassed packets and of the whole burst. A worker
    /// that does not run this queue offers as [`Offerer::Peer`]: while the queue holds
    /// packets its burst goes to the intake, so the owner's runs never wait behind it.
    fn offer_burst(
        &self,
        now_ns: u64,
        pkts: &mut Vec<P>,
        metas: &mut [PacketMeta],
        classify: &mut dyn FnMut(&P, &mut PacketMeta),
        out: &mut Vec<P>,
        offerer: Offerer,
    ) -> BurstOutcome;

    /// Whether [`Shaper::offer_burst`] could now drop part of a burst of `burst` packets at
    /// the intake (see `TxQueue::offer_would_overflow`).
    fn offer_would_overflow(&self, burst: usize) -> bool;

    /// Runs the queue: dequeues up to `budget` packets into `out` and calls `transmit(out)`
    /// while holding the queue (see `TxQueue::run`).
    fn run(
        &self,
        now_ns: u64,
        budget: usize,
        out: &mut Vec<P>,
        transmit: &mut dyn FnMut(&mut Vec<P>),
    ) -> RunResult;

    /// Whether [`Shaper::run`] at `now_ns` has anything to do (see `TxQueue::run_wanted`):
    /// the worker that runs this queue skips the run when not. The default always runs.
    fn run_wanted(&self, _now_ns: u64) -> bool {
        true
    }

    /// Whether a run at `now_ns` must not wait for the time the last run said the next
    /// packet is due (see `TxQueue::run_urgent`: packets in the intake, a change to apply, a
    /// rate change or a sync that may grow the share). The default never says so.
    fn run_urgent(&self, _now_ns: u64) -> bool {
        false
    }

    /// Packets waiting in the queue.
    fn backlog(&self) -> u64;

    /// The queue's counters (drops by reason, bypassed, dequeued).
    fn stats(&self) -> TxQueueStats;

    /// Sets the global shaped rate; a pure parameter write that loses no queued packet.
    fn set_rate(&self, rate: Rate);

    /// The configured global rate.
    fn rate(&self) -> Rate;

    /// Per-tin figures (empty when the queue is busy or has no tins).
    fn tins(&self) -> Vec<TinSnapshot> {
        Vec::new()
    }

    /// [`Shaper::tins`] read by the caller itself, for when no worker runs the queue any more
    /// (the final report).
    fn tins_now(&self) -> Vec<TinSnapshot> {
        self.tins()
    }
}

impl<P, Q> Shaper<P> for TxQueue<P, Q>
where
    P: Packet + Send,
    Q: MqQdisc<P> + TinReport,
    TxQueue<P, Q>: Send + Sync,
{
    #[inline]
    fn offer(&self, now_ns: u64, pkt: P, meta: &PacketMeta) -> Intake<P> {
        self.enqueue(now_ns, pkt, meta)
    }

    #[inline]
    fn offer_burst(
        &self,
        now_ns: u64,
        pkts: &mut Vec<P>,
        metas: &mut [PacketMeta],
        classify: &mut dyn FnMut(&P, &mut PacketMeta),
        out: &mut Vec<P>,
        offerer: Offerer,
    ) -> BurstOutcome {
        // One runner-lock round trip for the whole burst.
        self.enqueue_burst(now_ns, pkts, metas, classify, out, offerer)
    }

    #[inline]
    fn offer_would_overflow(&self, burst: usize) -> bool {
        TxQueue::offer_would_overflow(self, burst)
    }

    #[inline]
    fn run(
        &self,
        now_ns: u64,
        budget: usize,
        out: &mut Vec<P>,
        transmit: &mut dyn FnMut(&mut Vec<P>),
    ) -> RunResult {
        TxQueue::run(self, now_ns, budget, out, transmit)
    }

    #[inline]
    fn run_wanted(&self, now_ns: u64) -> bool {
        TxQueue::run_wanted(self, now_ns)
    }

    #[inline]
    fn run_urgent(&self, now_ns: u64) -> bool {
        TxQueue::run_urgent(self, now_ns)
    }

    fn backlog(&self) -> u64 {
        TxQueue::backlog(self) as u64
    }

    fn stats(&self) -> TxQueueStats {
        TxQueue::stats(self)
    }

    fn set_rate(&self, rate: Rate) {
        TxQueue::set_rate(self, rate);
    }

    fn rate(&self) -> Rate {
        self.shared().rate()
    }

    fn tins(&self) -> Vec<TinSnapshot> {
        self.try_with_qdisc(|q| q.tin_snapshots())
            .unwrap_or_default()
    }
}

/// No queueing discipline: every packet bypasses straight to the port.
#[derive(Debug, Default)]
pub struct Passthrough;

impl<P: Packet + Send> Shaper<P> for Passthrough {
    #[inline]
    fn offer(&self, _now_ns: u64, pkt: P, _meta: &PacketMeta) -> Intake<P> {
        Intake::Bypass(pkt)
    }

    fn offer_burst(
        &self,
        _now_ns: u64,
        pkts: &mut Vec<P>,
        _metas: &mut [PacketMeta],
        _classify: &mut dyn FnMut(&P, &mut PacketMeta),
        out: &mut Vec<P>,
        // No queue to hold against anyone: every packet bypasses, whoever offers it.
        _offerer: Offerer,
    ) -> BurstOutcome {
        let bypassed = pkts.len();
        let bytes = pkts.iter().map(|p| p.len() as u64).sum();
        if out.is_empty() {
            std::mem::swap(pkts, out);
        } else {
            out.append(pkts);
        }
        BurstOutcome {
            bypassed,
            bypassed_bytes: bytes,
            offered_bytes: bytes,
            ..BurstOutcome::default()
        }
    }

    fn offer_would_overflow(&self, _burst: usize) -> bool {
        false
    }

    fn run(
        &self,
        _now_ns: u64,
        _budget: usize,
        _out: &mut Vec<P>,
        _transmit: &mut dyn FnMut(&mut Vec<P>),
    ) -> RunResult {
        RunResult::Ran {
            sent: 0,
            next: NextRun::Idle,
        }
    }

    fn run_wanted(&self, _now_ns: u64) -> bool {
        false
    }

    fn backlog(&self) -> u64 {
        0
    }

    fn stats(&self) -> TxQueueStats {
        TxQueueStats::default()
    }

    fn set_rate(&self, _rate: Rate) {}

    fn rate(&self) -> Rate {
        Rate::UNLIMITED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use qdisc::fifo::Fifo;
    use qdisc::mq::TxQueueOptions;
    use qdisc::testing::{udp_meta, TestPacket};

    #[test]
    fn a_fifo_tx_queue_bypasses_when_idle_and_runs_what_it_queued() {
        let q: TxQueue<TestPacket, Fifo<TestPacket>> =
            TxQueue::new(Fifo::new(16), TxQueueOptions::default());
        let m = udp_meta(1, 2, 3, 0);
        let s: &dyn Shaper<TestPacket> = &q;
        assert!(matches!(
            s.offer(1, TestPacket::new(64, 0, 0), &m),
            Intake::Bypass(_)
        ));
        let mut sent = Vec::new();
        let mut out = Vec::new();
        s.run(1, 32, &mut out, &mut |o: &mut Vec<TestPacket>| {
            sent.append(o)
        });
        assert!(out.is_empty());
    }

    #[test]
    fn passthrough_hands_every_packet_back() {
        let s = Passthrough;
        let m = udp_meta(1, 2, 3, 0);
        let o = Shaper::<TestPacket>::offer(&s, 1, TestPacket::new(64, 0, 0), &m);
        assert!(matches!(o, Intake::Bypass(_)));
    }
}
