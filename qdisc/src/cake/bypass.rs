//! CAKE's side of the enqueue bypass for a whole burst ([`crate::Qdisc::bypass_burst`]).
//!
//! A packet that meets an empty CAKE whose shaper has credit is charged as if it had been
//! enqueued and dequeued at once. Done per packet, that bookkeeping (clock clamp, tin clock,
//! shaper gate, seven statistics) costs several times what the bypass saves on a 64-byte
//! frame; within one burst `now` is the same for every packet, so the clock and tin-clock
//! work happens once per burst and the statistics are summed in locals and written once.
//! The result is exactly what `try_bypass` packet by packet would leave behind (a unit test
//! compares the two).

use super::config::AtmMode;
use super::diffserv::MAX_TINS;
use super::stats::ewma;
use super::{clamp_u32, Cake};
use crate::{BurstBypass, Packet, PacketMeta};

/// Per-tin sums of one burst, flushed into `CakeStats` at its end.
#[derive(Clone, Copy, Default)]
struct TinSums {
    packets: u64,
    bytes: u64,
    max_len: u32,
}

/// The global length statistics of one burst, flushed into `CakeStats` at its end.
#[derive(Clone, Copy)]
struct LengthSums {
    min_net: u32,
    max_net: u32,
    min_adj: u32,
    max_adj: u32,
    avg_netoff_fp: u64,
}

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    pub(super) fn bypass_burst_inner(
        &mut self,
        now_ns: u64,
        pkts: &[P],
        metas: &[PacketMeta],
    ) -> BurstBypass {
        let shaped = !self.rate.is_unlimited();
        if self.qlen != 0
            || (shaped && self.send_gate(now_ns.max(self.last_now)) < self.time_next.next_ns)
        {
            return BurstBypass::default();
        }
        // The common configuration (no overhead compensation, no MPU, no cell framing)
        // charges the frame length as is: a loop without the adjustment is much shorter.
        let identity = !self.overhead.compensate
            && self.overhead.mpu == 0
            && self.overhead.atm == AtmMode::None;
        match (shaped, identity) {
            (false, true) => self.bypass_run::<false, true>(now_ns, pkts, metas),
            (false, false) => self.bypass_run::<false, false>(now_ns, pkts, metas),
            (true, true) => self.bypass_run::<true, true>(now_ns, pkts, metas),
            (true, false) => self.bypass_run::<true, false>(now_ns, pkts, metas),
        }
    }

    /// The burst loop, specialised on whether the shaper is on and whether lengths are
    /// charged as they are.
    #[inline]
    fn bypass_run<const SHAPED: bool, const IDENTITY: bool>(
        &mut self,
        now_ns: u64,
        pkts: &[P],
        metas: &[PacketMeta],
    ) -> BurstBypass {
        let now = self.clamp_now(now_ns);
        if self.time_next.next_ns < now {
            self.time_next.set(now);
            self.failsafe_next = now;
        }
        let overhead = self.overhead;
        let mut lengths = LengthSums {
            min_net: self.stats.min_netlen,
            max_net: self.stats.max_netlen,
            min_adj: self.stats.min_adjlen,
            max_adj: self.stats.max_adjlen,
            avg_netoff_fp: u64::from(self.stats.avg_netoff_fp),
        };
        let mut sums = [TinSums::default(); MAX_TINS];
        // The tin of the current run of packets and its sums, kept in registers: a burst is
        // mostly one tin, and summing through the array would chain every packet's store
        // to the next one's load.
        let mut run_tin = usize::MAX;
        let mut run = TinSums::default();
        let (mut same_min, mut same_max) = (u32::MAX, 0u32);
        let gate = self.send_gate(now);
        for (pkt, meta) in pkts.iter().zip(metas) {
            if SHAPED && gate < self.time_next.next_ns {
                break;
            }
            let t = self.select_tin(meta) % MAX_TINS;
            let len = clamp_u32(pkt.len());
            let l2 = u32::from(meta.l2_len);
            let adj = if IDENTITY && meta.gso_segs <= 1 {
                // Network and adjusted length are both `len`: one min/max pair for both.
                same_min = same_min.min(len);
                same_max = same_max.max(len);
                len
            } else {
                let (adj, netlen) = if meta.gso_segs <= 1 {
                    overhead.adjust(len, l2)
                } else {
                    overhead.adjust_gso(len, l2, meta.gso_segs)
                };
                lengths.min_net = lengths.min_net.min(netlen);
                lengths.max_net = lengths.max_net.max(netlen);
                lengths.min_adj = lengths.min_adj.min(adj);
                lengths.max_adj = lengths.max_adj.max(adj);
                adj
            };
            lengths.avg_netoff_fp = ewma(lengths.avg_netoff_fp, u64::from(l2.min(0xffff)) << 16, 8);
            if t != run_tin {
                self.switch_run(now, &mut sums, &mut run_tin, &mut run, t);
            }
            if SHAPED {
                self.advance_shaper(t, adj, now, false);
            }
            run.packets += 1;
            run.bytes += u64::from(len);
            run.max_len = run.max_len.max(len);
        }
        self.switch_run(now, &mut sums, &mut run_tin, &mut run, usize::MAX);
        lengths.min_net = lengths.min_net.min(same_min);
        lengths.min_adj = lengths.min_adj.min(same_min);
        lengths.max_net = lengths.max_net.max(same_max);
        lengths.max_adj = lengths.max_adj.max(same_max);
        let (packets, bytes) = self.flush_bypass_stats(&sums, &lengths);
        BurstBypass {
            packets: packets as usize,
            bytes,
        }
    }

    /// Ends the current run of one tin (adding its sums to `sums`) and starts one of tin
    /// `next` (`usize::MAX`: none), bringing that tin's clock up to `now` the first time
    /// the burst uses it, as the per-packet bypass does.
    #[inline]
    fn switch_run(
        &mut self,
        now: u64,
        sums: &mut [TinSums; MAX_TINS],
        run_tin: &mut usize,
        run: &mut TinSums,
        next: usize,
    ) {
        if let Some(s) = sums.get_mut(*run_tin) {
            s.packets += run.packets;
            s.bytes += run.bytes;
            s.max_len = s.max_len.max(run.max_len);
        }
        *run = TinSums::default();
        *run_tin = next;
        let first_use = sums.get(next).is_some_and(|s| s.packets == 0);
        if first_use {
            let clock = &mut self.tins[next].clock;
            if clock.next_ns < now {
                clock.set(now);
            }
        }
    }

    /// Writes the burst's sums into the statistics; returns the packets and bytes sent.
    fn flush_bypass_stats(
        &mut self,
        sums: &[TinSums; MAX_TINS],
        lengths: &LengthSums,
    ) -> (u64, u64) {
        let sent: u64 = sums.iter().map(|s| s.packets).sum();
        if sent == 0 {
            return (0, 0);
        }
        let st = &mut self.stats;
        st.min_netlen = lengths.min_net;
        st.max_netlen = lengths.max_net;
        st.min_adjlen = lengths.min_adj;
        st.max_adjlen = lengths.max_adj;
        st.avg_netoff_fp = lengths.avg_netoff_fp as u32;
        st.bypassed_packets += sent;
        for (t, s) in sums.iter().enumerate() {
            if s.packets != 0 {
                let ts = &mut st.tins[t];
                ts.sent_packets += s.packets;
                ts.sent_bytes += s.bytes;
                ts.max_skblen = ts.max_skblen.max(s.max_len);
            }
        }
        (sent, sums.iter().map(|s| s.bytes).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::clamp_u32;
    use crate::cake::{AtmMode, Cake, CakeConfig, DiffservMode, FlowMode};
    use crate::testing::{udp_meta, TestPacket};
    use crate::{Packet, PacketMeta, Qdisc, Rate};

    fn metas() -> Vec<PacketMeta> {
        (0..40u16)
            .map(|i| {
                let dscp = [0, 46, 8, 10, 34][usize::from(i) % 5];
                let mut m = udp_meta(u32::from(i % 7), u32::from(i % 3), u32::from(i), dscp);
                m.l2_len = [14, 18, 0][usize::from(i) % 3];
                m.gso_segs = if i % 11 == 0 { 3 } else { 1 };
                m
            })
            .collect()
    }

    fn lens() -> impl Iterator<Item = usize> {
        (0..40usize).map(|i| 60 + (i * 97) % 1455)
    }

    /// The bypass of one packet written plainly, packet by packet (what the burst bypass
    /// must equal): the checks, the clock clamp, the length statistics, the tin and global
    /// clocks and the sent counters.
    fn bypass_one(
        c: &mut Cake<TestPacket>,
        now_ns: u64,
        pkt: &TestPacket,
        meta: &PacketMeta,
    ) -> bool {
        if c.qlen != 0 {
            return false;
        }
        let now = now_ns.max(c.last_now);
        if !c.rate.is_unlimited() && c.send_gate(now) < c.time_next.next_ns {
            return false;
        }
        let now = c.clamp_now(now_ns);
        let t = c.select_tin(meta);
        let len = clamp_u32(pkt.len());
        let l2 = u32::from(meta.l2_len);
        let (adj, netlen) = c.overhead.adjust_gso(len, l2, meta.gso_segs);
        c.stats.track_lengths(netlen, adj, l2);
        let tin = &mut c.tins[t];
        if tin.clock.next_ns < now {
            tin.clock.set(now);
        }
        if c.time_next.next_ns < now {
            c.time_next.set(now);
            c.failsafe_next = now;
        }
        c.advance_shaper(t, adj, now, false);
        let st = &mut c.stats.tins[t];
        st.sent_packets += 1;
        st.sent_bytes += u64::from(len);
        st.max_skblen = st.max_skblen.max(len);
        c.stats.bypassed_packets += 1;
        true
    }

    /// Runs the same bursts through `bypass_burst` and through [`bypass_one`] per packet and
    /// compares how many each let through and every statistic.
    fn same_as_per_packet(config: &CakeConfig, times: &[u64]) {
        let metas = metas();
        let mut burst_cake: Cake<TestPacket> = Cake::new(config).unwrap();
        let mut single_cake: Cake<TestPacket> = Cake::new(config).unwrap();
        for &now in times {
            let pkts: Vec<_> = lens()
                .enumerate()
                .map(|(i, len)| TestPacket::new(len, 0, i as u64))
                .collect();
            let done = burst_cake.bypass_burst(now, &pkts, &metas);
            let bytes: u64 = pkts[..done.packets].iter().map(|p| p.len as u64).sum();
            assert_eq!(done.bytes, bytes);

            let single = pkts
                .iter()
                .zip(&metas)
                .take_while(|(p, m)| bypass_one(&mut single_cake, now, p, m))
                .count();
            assert_eq!(done.packets, single, "bypassed at {now}");
            // `clock_clamps` counts calls with a stale `now`: one per burst here, one per
            // packet there.
            let (mut a, mut b) = (burst_cake.stats().clone(), single_cake.stats().clone());
            assert_eq!(a.clock_clamps == 0, b.clock_clamps == 0);
            (a.clock_clamps, b.clock_clamps) = (0, 0);
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "stats at {now}");
            assert_eq!(burst_cake.next_wakeup(), single_cake.next_wakeup());
        }
    }

    #[test]
    fn a_burst_bypass_leaves_what_per_packet_bypasses_leave() {
        let times = [0, 10, 10, 5_000, 1_000_000, 1_000_000, 999_999, 30_000_000];
        for rate in [
            Rate::UNLIMITED,
            Rate::from_bits_per_sec(100_000_000),
            Rate::from_bits_per_sec(2_000_000),
        ] {
            for diffserv in [
                DiffservMode::Besteffort,
                DiffservMode::Diffserv3,
                DiffservMode::Diffserv8,
            ] {
                // Raw lengths, then Ethernet-like compensation with an MPU, then ATM cells.
                let framings = [
                    (true, 0, 0, AtmMode::None),
                    (false, 38, 84, AtmMode::None),
                    (false, 10, 0, AtmMode::Atm),
                ];
                for (raw, overhead, mpu, atm) in framings {
                    let config = CakeConfig {
                        rate,
                        diffserv,
                        flow_mode: FlowMode::TripleIsolate,
                        raw,
                        overhead,
                        mpu,
                        atm,
                        ..CakeConfig::default()
                    };
                    same_as_per_packet(&config, &times);
                }
            }
        }
    }

    #[test]
    fn a_busy_cake_bypasses_nothing() {
        let metas = metas();
        let mut cake: Cake<TestPacket> = Cake::new(&CakeConfig::default()).unwrap();
        cake.enqueue(0, TestPacket::new(100, 0, 99), &metas[0]);
        let pkts: Vec<_> = (0..3).map(|i| TestPacket::new(100, 1, i)).collect();
        assert_eq!(cake.bypass_burst(1, &pkts, &metas[..3]).packets, 0);
        assert!(!cake.try_bypass(1, &pkts[0], &metas[0]));
    }
}
