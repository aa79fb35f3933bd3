//! pfifo_fast-style three-band FIFO: the baseline every benchmark compares against.
//!
//! Three strict-priority bands, each a FIFO, with one packet limit for all of them and tail
//! drop. It never shapes: [`Qdisc::set_rate`] only records the value (so cake_mq's rate sync
//! can drive it unchanged), and [`Qdisc::try_bypass`] succeeds whenever nothing is queued.
//! Storage is allocated once in [`Fifo::new`]; enqueue and dequeue never allocate.
//!
//! # Band map
//! Linux's pfifo_fast picks a band from `skb->priority` through its priomap, and
//! `skb->priority` comes from the IPv4 TOS bits (`rt_tos2priority`). We map DSCP directly, in
//! the same spirit (band 0 first, band 2 last):
//!
//! | DSCP | name | band |
//! |---|---|---|
//! | 40..=63 | CS5, VA (44), EF (46), CS6, CS7 (network control, voice) | 0 |
//! | 1 (LE, RFC 8622) and 8 (CS1, scavenger) | lower effort | 2 |
//! | anything else | best effort, AF classes, video | 1 |

use std::collections::VecDeque;

use crate::{BurstBypass, Dequeue, DropReason, Enqueued, Packet, PacketMeta, Qdisc, Rate};

/// Number of bands.
pub const BANDS: usize = 3;

/// Returns the band (0 = served first) for a DSCP value; see the module docs for the table.
pub fn band_for_dscp(dscp: u8) -> usize {
    match dscp & 0x3f {
        40..=63 => 0,
        1 | 8 => 2,
        _ => 1,
    }
}

/// Counters of one [`Fifo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FifoStats {
    /// Packets accepted by `enqueue`.
    pub enqueued: u64,
    /// Packets handed out by `dequeue`.
    pub dequeued: u64,
    /// Packets that took the bypass (never queued).
    pub bypassed: u64,
    /// Packets tail-dropped at the limit.
    pub overflow_drops: u64,
    /// Bytes tail-dropped at the limit.
    pub overflow_drop_bytes: u64,
    /// Rate changes received (recorded, not applied).
    pub rate_changes: u64,
}

/// A pfifo_fast-style three-band FIFO with a packet limit shared by all bands.
#[derive(Debug)]
pub struct Fifo<P> {
    bands: [VecDeque<P>; BANDS],
    limit: usize,
    len: usize,
    backlog_bytes: u64,
    last_rate: Rate,
    stats: FifoStats,
}

impl<P: Packet> Fifo<P> {
    /// A FIFO holding at most `limit_packets` packets (at least one) across its three bands.
    pub fn new(limit_packets: usize) -> Fifo<P> {
        let limit = limit_packets.max(1);
        Fifo {
            bands: std::array::from_fn(|_| VecDeque::with_capacity(limit)),
            limit,
            len: 0,
            backlog_bytes: 0,
            last_rate: Rate::UNLIMITED,
            stats: FifoStats::default(),
        }
    }

    /// The packet limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Changes the packet limit. Packets already queued beyond a smaller limit stay queued;
    /// new ones are dropped until the queue falls below it. Growing it may allocate.
    pub fn set_limit(&mut self, limit_packets: usize) {
        self.limit = limit_packets.max(1);
        for band in &mut self.bands {
            band.reserve(self.limit.saturating_sub(band.len()));
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> FifoStats {
        self.stats
    }

    /// The last rate given to [`Qdisc::set_rate`] (a FIFO does not shape, so it only records).
    pub fn last_set_rate(&self) -> Rate {
        self.last_rate
    }

    /// Packets queued in `band` (0..3); 0 for a band out of range.
    pub fn band_len(&self, band: usize) -> usize {
        self.bands.get(band).map_or(0, VecDeque::len)
    }
}

impl<P: Packet> Qdisc<P> for Fifo<P> {
    /// The band is only needed to queue: a packet that bypasses needs no meta at all.
    const BYPASS_READS_META: bool = false;

    fn enqueue(&mut self, _now_ns: u64, pkt: P, meta: &PacketMeta) -> Enqueued {
        let bytes = pkt.len() as u64;
        if self.len >= self.limit {
            self.stats.overflow_drops += 1;
            self.stats.overflow_drop_bytes += bytes;
            return Enqueued {
                dropped_packets: 1,
                dropped_bytes: bytes,
                reason: Some(DropReason::Overflow),
                ack_filtered: 0,
            };
        }
        self.bands[band_for_dscp(meta.dscp)].push_back(pkt);
        self.len += 1;
        self.backlog_bytes += bytes;
        self.stats.enqueued += 1;
        Enqueued::default()
    }

    fn dequeue(&mut self, _now_ns: u64) -> Dequeue<P> {
        for band in &mut self.bands {
            if let Some(pkt) = band.pop_front() {
                self.len -= 1;
                self.backlog_bytes = self.backlog_bytes.saturating_sub(pkt.len() as u64);
                self.stats.dequeued += 1;
                return Dequeue::Packet(pkt);
            }
        }
        Dequeue::Empty
    }

    fn len(&self) -> usize {
        self.len
    }

    fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes
    }

    /// An empty FIFO lets the whole burst through (it never shapes): one check and one
    /// counter update per burst. The metas are not read.
    #[inline]
    fn bypass_burst(&mut self, _now_ns: u64, pkts: &[P], _metas: &[PacketMeta]) -> BurstBypass {
        if self.len != 0 {
            return BurstBypass::default();
        }
        self.stats.bypassed += pkts.len() as u64;
        BurstBypass {
            packets: pkts.len(),
            bytes: pkts.iter().map(|p| p.len() as u64).sum(),
        }
    }

    fn set_rate(&mut self, rate: Rate) {
        self.last_rate = rate;
        self.stats.rate_changes += 1;
    }

    fn rate(&self) -> Rate {
        Rate::UNLIMITED
    }

    fn next_wakeup(&self) -> Option<u64> {
        None
    }
}

/// Configuration of a [`Fifo`] as applied by [`crate::mq::MultiQueue::reconfigure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FifoConfig {
    /// Packet limit per queue.
    pub limit_packets: usize,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testing::{udp_meta, TestPacket};

    fn drain(f: &mut Fifo<TestPacket>) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        while let Dequeue::Packet(p) = f.dequeue(0) {
            out.push((p.flow, p.seq));
        }
        out
    }

    #[test]
    fn packets_leave_in_arrival_order_within_a_band() {
        let mut f = Fifo::new(16);
        for seq in 0..5 {
            f.enqueue(0, TestPacket::new(100, 1, seq), &udp_meta(1, 2, 1, 0));
        }
        assert_eq!(drain(&mut f), (0..5).map(|s| (1, s)).collect::<Vec<_>>());
        assert!(f.is_empty());
        assert_eq!(f.backlog_bytes(), 0);
    }

    #[test]
    fn voice_goes_before_best_effort_before_scavenger() {
        let mut f = Fifo::new(16);
        f.enqueue(0, TestPacket::new(100, 8, 0), &udp_meta(1, 2, 8, 8));
        f.enqueue(0, TestPacket::new(100, 0, 0), &udp_meta(1, 2, 0, 0));
        f.enqueue(0, TestPacket::new(100, 46, 0), &udp_meta(1, 2, 46, 46));
        assert_eq!(drain(&mut f), vec![(46, 0), (0, 0), (8, 0)]);
    }

    #[test]
    fn tail_drop_at_the_limit_reports_overflow() {
        let mut f = Fifo::new(2);
        let meta = udp_meta(1, 2, 1, 0);
        assert_eq!(
            f.enqueue(0, TestPacket::new(60, 1, 0), &meta),
            Enqueued::default()
        );
        f.enqueue(0, TestPacket::new(60, 1, 1), &meta);
        let r = f.enqueue(0, TestPacket::new(60, 1, 2), &meta);
        assert_eq!(r.dropped_packets, 1);
        assert_eq!(r.dropped_bytes, 60);
        assert_eq!(r.reason, Some(DropReason::Overflow));
        assert_eq!(f.len(), 2);
        assert_eq!(f.stats().overflow_drops, 1);
    }

    #[test]
    fn bypass_only_when_empty_and_rate_is_only_recorded() {
        let mut f = Fifo::new(4);
        let meta = udp_meta(1, 2, 1, 0);
        let p = TestPacket::new(60, 1, 0);
        assert!(f.try_bypass(0, &p, &meta));
        f.enqueue(0, p.clone(), &meta);
        assert!(!f.try_bypass(0, &p, &meta));
        f.set_rate(Rate::from_bits_per_sec(1_000_000));
        assert_eq!(f.rate(), Rate::UNLIMITED);
        assert_eq!(f.last_set_rate(), Rate::from_bits_per_sec(1_000_000));
        assert_eq!(f.stats().bypassed, 1);
    }

    #[test]
    fn a_burst_bypasses_whole_into_an_empty_fifo_and_not_at_all_into_a_busy_one() {
        // The metas are never read: a burst may bypass unclassified.
        const { assert!(!<Fifo<TestPacket> as Qdisc<TestPacket>>::BYPASS_READS_META) };
        let mut f = Fifo::new(4);
        let burst: Vec<TestPacket> = (0..5).map(|i| TestPacket::new(60, 1, i)).collect();
        let blank = [PacketMeta::default(); 5];
        let done = f.bypass_burst(0, &burst, &blank);
        assert_eq!(
            done,
            BurstBypass {
                packets: 5,
                bytes: 300
            }
        );
        assert_eq!(f.stats().bypassed, 5);
        f.enqueue(0, TestPacket::new(60, 1, 5), &udp_meta(1, 2, 1, 0));
        assert_eq!(f.bypass_burst(0, &burst, &blank), BurstBypass::default());
        assert_eq!(f.stats().bypassed, 5);
    }

    #[test]
    fn dscp_map_matches_the_documented_table() {
        assert_eq!(band_for_dscp(46), 0);
        assert_eq!(band_for_dscp(56), 0);
        assert_eq!(band_for_dscp(0), 1);
        assert_eq!(band_for_dscp(34), 1);
        assert_eq!(band_for_dscp(8), 2);
        assert_eq!(band_for_dscp(1), 2);
    }
}
