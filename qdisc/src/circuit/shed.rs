//! The circuits' shared packet limit ([`CircuitShaperConfig::total_packet_limit`]). Every
//! circuit's CAKE bounds its own queue, but ten thousand bounds add up to more buffers than
//! any pool holds: a flood at a few subscribers would empty the pool that feeds the port,
//! and receiving would stall for all of them. Over the shared limit an enqueue drops from
//! the circuit that holds the most, as sch_cake.c's `cake_drop` drops from the fattest
//! flow, so the flooded circuits pay and the others keep their buffers.
//!
//! Finding the largest of thousands of queues on every drop would cost a scan per packet
//! under a flood. A candidate is kept instead: each enqueue compares the circuit's length
//! with the candidate's last known one (two numbers already in hand, no other instance
//! touched), and a drop reads the candidate's real length. The candidate pays when it holds
//! more than the arriving packet's circuit; otherwise a full scan looks for one that does, at
//! most once every `max(64, active / 8)` drops, and between scans the arriving circuit pays.
//!
//! The longest pays even when none stands out: when every circuit is overloaded (thousands
//! of subscribers at once) and the arriving one paid instead, the circuits whose bursts came
//! while the limit was reached paid again and again (the generator's round robin brings each
//! one at the same phase), their queues ran dry between bursts and they delivered down to 0.8
//! of their share while the others delivered 1.04. Dropping from the longest evens the queues
//! out, so every circuit stays backlogged and gets its share.

use super::{CircuitShaper, CircuitShaperConfig};
use crate::{DropReason, Enqueued, Packet, Qdisc};

/// The candidate and the scan budget.
#[derive(Debug, Default)]
pub(super) struct Shed {
    /// The circuit (id) that held the most packets when last looked at.
    fattest: Option<u32>,
    /// Its length then: an upper bound once it has sent since.
    fattest_len: usize,
    /// Drops until the next full scan is allowed.
    scan_in: usize,
}

impl Shed {
    /// Notes that circuit `id` holds `len` packets after an enqueue.
    #[inline]
    pub(super) fn saw(&mut self, id: u32, len: usize) {
        if len > self.fattest_len || self.fattest.is_none() {
            self.fattest = Some(id);
            self.fattest_len = len;
        }
    }
}

impl<P: Packet> CircuitShaper<P> {
    /// Drops from the largest circuits until all together hold at most the shared limit
    /// (or nothing more can go), adding the drops to `r`. `arriving` is the circuit that
    /// just took a packet.
    #[cold]
    #[inline(never)]
    pub(super) fn shed_over_total(&mut self, now: u64, arriving: u32, r: &mut Enqueued) {
        let limit = self.config.total_packet_limit;
        // One enqueue adds one packet: a couple of drops bring it back under, unless the
        // limit was just lowered; the rest then goes over the next enqueues.
        for _ in 0..64 {
            if self.qlen <= limit {
                break;
            }
            let victim = self.shed_victim(arriving);
            if self.slots[victim as usize].cake.is_none() {
                break;
            }
            let (dropped, _, _) = self.with_instance(victim, |c| c.drop_for_space(now));
            let Some(bytes) = dropped else { break };
            let s = &mut self.slots[victim as usize];
            s.counters.drops[DropReason::Overflow.index()] += 1;
            s.counters.dropped_bytes += bytes;
            if r.dropped_packets == u32::from(r.ack_filtered) {
                r.reason = Some(DropReason::Overflow);
            }
            r.dropped_packets += 1;
            r.dropped_bytes += bytes;
        }
    }

    /// The circuit to drop from: the candidate when it holds more than the arriving
    /// circuit, else the largest found by a scan (when one is due and it holds more), else
    /// the arriving circuit.
    fn shed_victim(&mut self, arriving: u32) -> u32 {
        let active = self.live.len().max(1);
        let len_of = |id: u32| self.slots[id as usize].cake.as_deref().map(|c| c.len());
        let arriving_len = len_of(arriving).unwrap_or(0);
        // Strictly more, so that equal queues leave the drop to the arriving circuit.
        let big = arriving_len + 1;
        if let Some(f) = self.shed.fattest {
            if let Some(len) = len_of(f) {
                self.shed.fattest_len = len;
                if len >= big {
                    return f;
                }
            }
        }
        if self.shed.scan_in > 0 {
            self.shed.scan_in -= 1;
            return arriving;
        }
        self.shed.scan_in = (active / 8).max(64);
        let largest = self
            .live_instances()
            .map(|(id, c)| (c.len(), id))
            .max()
            .unwrap_or((0, arriving));
        self.shed.fattest = Some(largest.1);
        self.shed.fattest_len = largest.0;
        if largest.0 >= big {
            largest.1
        } else {
            arriving
        }
    }
}

impl CircuitShaperConfig {
    /// The shared limit for a shaper fed by a pool of `pool_buffers` buffers that
    /// `queues` such shapers share: three quarters of each one's part, so that the rings
    /// and ports keep the rest.
    pub fn total_limit_for_pool(pool_buffers: usize, queues: usize) -> usize {
        (pool_buffers / queues.max(1) * 3 / 4).max(1)
    }
}
