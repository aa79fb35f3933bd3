//! Drives [`Cake`] and the reference model ([`RefCake`]) with the same events and stops
//! at the first one whose outcome differs: which packet left (by sequence number and CE
//! mark), `NotBefore` or `Empty`, what an enqueue dropped, whether a bypass was allowed.
//! The failure names the event index, the configuration and both outcomes. At any point
//! [`Lockstep::compare_counters`] checks the counters both keep (per-tin sent, dropped,
//! marked and ACK-filtered packets, backlogs, flow counts, delay averages, the way
//! counters, overlimits, drops by reason, queue length and the dequeue cursors).

use std::fmt::Debug;

use qdisc::cake::{Cake, CakeConfig, ConfigError};
use qdisc::testing::TestPacket;
use qdisc::{Dequeue, Enqueued, PacketMeta, Qdisc, Rate};

use super::RefCake;

/// What a dequeue produced, reduced to what the lockstep compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A packet: its flow and sequence number, and whether it carries a CE mark.
    Packet {
        flow: u32,
        seq: u64,
        ce: bool,
    },
    NotBefore(u64),
    Empty,
}

impl Outcome {
    fn of(d: &Dequeue<TestPacket>) -> Outcome {
        match d {
            Dequeue::Packet(p) => Outcome::Packet {
                flow: p.flow,
                seq: p.seq,
                ce: p.ce,
            },
            Dequeue::NotBefore(t) => Outcome::NotBefore(*t),
            Dequeue::Empty => Outcome::Empty,
        }
    }
}

/// `Cake` and the reference, fed the same events.
pub(crate) struct Lockstep {
    pub(crate) cake: Cake<TestPacket>,
    pub(crate) reference: RefCake<TestPacket>,
    /// Names the run in failure messages (the configuration, and the seed if any).
    label: String,
    /// Events so far: enqueues, dequeues, bypass attempts and rate changes.
    events: u64,
}

impl Lockstep {
    /// Both models built from `config`, or `Cake`'s error when it refuses it.
    pub(crate) fn new(
        config: &CakeConfig,
        label: impl Into<String>,
    ) -> Result<Lockstep, ConfigError> {
        let cake = Cake::new(config)?;
        let label = format!("{} with {config:?}", label.into());
        Ok(Lockstep {
            cake,
            reference: RefCake::new(config),
            label,
            events: 0,
        })
    }

    /// Events applied so far.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    fn check<T: PartialEq + Debug>(&self, what: &str, cake: T, reference: T) {
        assert!(
            cake == reference,
            "Cake and the reference disagree at event {} ({what}) in {}:\n  Cake:      \
             {cake:?}\n  reference: {reference:?}",
            self.events,
            self.label,
        );
    }

    /// Enqueues `pkt` into both; returns `Cake`'s result.
    pub(crate) fn enqueue(&mut self, now: u64, pkt: TestPacket, meta: &PacketMeta) -> Enqueued {
        self.events += 1;
        let theirs = self.reference.enqueue(now, pkt.clone(), meta);
        let ours = self.cake.enqueue(now, pkt.clone(), meta);
        self.check(
            &format!("enqueue of packet {} at {now} ns", pkt.seq),
            ours,
            theirs,
        );
        self.check_shaper("the enqueue");
        ours
    }

    /// Compares the queue length and when the shaper next opens, after `what`.
    fn check_shaper(&self, what: &str) {
        self.check(
            &format!("queue length after {what}"),
            self.cake.len(),
            self.reference.len(),
        );
        self.check(
            &format!("shaper wake-up after {what}"),
            self.cake.next_wakeup(),
            self.reference.next_wakeup(),
        );
    }

    /// Dequeues from both; returns `Cake`'s packet.
    pub(crate) fn dequeue(&mut self, now: u64) -> Dequeue<TestPacket> {
        self.events += 1;
        let theirs = self.reference.dequeue(now);
        let ours = self.cake.dequeue(now);
        self.check(
            &format!("dequeue at {now} ns"),
            Outcome::of(&ours),
            Outcome::of(&theirs),
        );
        self.check_shaper("the dequeue");
        ours
    }

    /// Offers `pkt` to both bypasses; returns whether `Cake` took it.
    pub(crate) fn try_bypass(&mut self, now: u64, pkt: &TestPacket, meta: &PacketMeta) -> bool {
        self.events += 1;
        let theirs = self.reference.try_bypass(now, pkt, meta);
        let ours = self.cake.try_bypass(now, pkt, meta);
        self.check(
            &format!("bypass of packet {} at {now} ns", pkt.seq),
            ours,
            theirs,
        );
        ours
    }

    /// Changes the rate of both.
    pub(crate) fn set_rate(&mut self, rate: Rate) {
        self.events += 1;
        self.reference.set_rate(rate);
        self.cake.set_rate(rate);
        self.check_shaper("the rate change");
    }

    /// Compares every counter both models keep.
    pub(crate) fn compare_counters(&self) {
        let s = self.cake.stats();
        let r = self.reference.stats();
        self.check("tin count", s.tin_count, self.reference.tin_count());
        for (t, ts) in s.tins[..s.tin_count].iter().enumerate() {
            let rs = self.reference.tin_stats(t);
            let pairs = [
                ("sent packets", ts.sent_packets, rs.sent_packets),
                ("sent bytes", ts.sent_bytes, rs.sent_bytes),
                ("backlog bytes", ts.backlog_bytes, rs.backlog_bytes),
                ("dropped packets", ts.dropped_packets, rs.dropped_packets),
                (
                    "ECN-marked packets",
                    ts.ecn_marked_packets,
                    rs.ecn_marked_packets,
                ),
                (
                    "ACKs dropped",
                    ts.acks_dropped_packets,
                    rs.acks_dropped_packets,
                ),
                ("average delay", ts.avg_delay_ns, rs.avg_delay_ns),
                ("peak delay", ts.peak_delay_ns, rs.peak_delay_ns),
                ("base delay", ts.base_delay_ns, rs.base_delay_ns),
                (
                    "sparse flows",
                    ts.sparse_flows.into(),
                    rs.sparse_flows.into(),
                ),
                ("bulk flows", ts.bulk_flows.into(), rs.bulk_flows.into()),
                (
                    "decaying flows",
                    ts.decaying_flows.into(),
                    rs.decaying_flows.into(),
                ),
                (
                    "unresponsive flows",
                    ts.unresponsive_flows.into(),
                    rs.unresponsive_flows.into(),
                ),
                ("way directs", ts.way_directs, rs.way_directs),
                (
                    "way indirect hits",
                    ts.way_indirect_hits,
                    rs.way_indirect_hits,
                ),
                ("way misses", ts.way_misses, rs.way_misses),
                ("way collisions", ts.way_collisions, rs.way_collisions),
            ];
            for (what, ours, theirs) in pairs {
                self.check(&format!("tin {t} {what}"), ours, theirs);
            }
        }
        self.check("overlimits", s.overlimits, r.overlimits);
        self.check("drops by reason", s.drops, r.drops);
        self.check("dropped bytes by reason", s.drop_bytes, r.drop_bytes);
        self.check("catch-up clamps", s.catch_up_clamps, r.catch_up_clamps);
        self.check("bypassed packets", s.bypassed_packets, r.bypassed_packets);
        self.check(
            "memory limit",
            s.memory_limit,
            self.reference.buffer_limit(),
        );
        self.check("queue length", self.cake.len(), self.reference.len());
        self.check(
            "backlog bytes",
            self.cake.backlog_bytes(),
            self.reference.backlog_bytes(),
        );
        self.check("cursors", self.cake.cursors(), self.reference.cursors());
    }
}
