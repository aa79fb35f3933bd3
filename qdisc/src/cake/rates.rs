//! The shaper and autorate (sch_cake.c `cake_configure_rates`, `cake_advance_shaper` and
//! the autorate-ingress estimator in `cake_enqueue`): the per-tin and global rates, the
//! charge of each packet to the clocks, and the bound on the credit banked while busy.

use super::stats::ewma;
use super::AqmMode;
use super::{
    diffserv, Cake, CobaltParams, RateNs, AUTORATE_HOLDOFF_NS, MAX_AHEAD_NS, MAX_CATCH_UP_NS,
    MAX_TINS, MIN_RATE_BYTES_PER_SEC,
};
use crate::Packet;

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    /// Sets every tin's rate and, unless `rate_only`, its COBALT parameters and flow
    /// quantum (with `round_target`, the COBALT parameters on a rate-only change too: the
    /// MTU time the round's floor counts in is the rate's in force), plus the memory limit (sch_cake.c `cake_configure_rates` after a3729e0df005:
    /// never purges, never moves cursors).
    pub(super) fn configure_rates(&mut self, rate: u64, rate_only: bool) {
        let was_unlimited = self.rate.is_unlimited();
        let old_rate = self.rate;
        let mut old_tin_rates = [RateNs::default(); MAX_TINS];
        for (old, tin) in old_tin_rates.iter_mut().zip(&self.tins) {
            *old = tin.rate();
        }
        let shares = diffserv::tin_shares(self.config.diffserv, rate);
        let mtu = u64::from(self.config.mtu);
        for (t, share) in shares.iter().enumerate().take(self.tin_cnt) {
            let tin = &mut self.tins[t];
            tin.set_rate(RateNs::new(share.threshold_bytes_per_sec));
            tin.clock.reset_fraction();
            let st = &mut self.stats.tins[t];
            st.threshold_rate = share.threshold_bytes_per_sec;
            if rate_only && self.aqm != AqmMode::Rounds {
                continue;
            }
            if !rate_only {
                self.turns[t].quantum = share.tin_quantum;
                tin.flow_quantum = if share.threshold_bytes_per_sec == 0 {
                    1514
                } else {
                    (share.threshold_bytes_per_sec >> 12).clamp(300, 1514) as u16
                };
            }
            let mtu_time = tin.rate().duration_ns(mtu);
            tin.cparams =
                CobaltParams::new(self.config.target_ns, self.config.interval_ns, mtu_time);
            st.target_us = tin.cparams.target_ns / 1000;
            st.interval_us = tin.cparams.interval_ns / 1000;
            st.flow_quantum = u32::from(tin.flow_quantum);
        }
        if !rate_only || self.aqm == AqmMode::Rounds {
            let mtu_time = self.tins[0].cparams.mtu_time_ns;
            for tin in &mut self.tins[self.tin_cnt..] {
                tin.cparams.mtu_time_ns = mtu_time;
            }
        }
        self.rate_bps = rate;
        self.rate = self.tins[0].rate();
        self.ahead_ns = if self.rate.is_unlimited() {
            0
        } else {
            self.rate
                .duration_ns(u64::from(self.config.burst))
                .min(MAX_AHEAD_NS)
        };
        self.time_next.reset_fraction();
        if !was_unlimited && !self.rate.is_unlimited() {
            // Deliberate deviation from sch_cake, which keeps the next-send times computed
            // at the old rate: after `2kbit` then `50mbit` the queue would send nothing for
            // the 6 s one 1514-byte packet takes at 2 kbit/s, dropping all arrivals
            // meanwhile. The wait still pending (and the failsafe's) is rescaled to the
            // new rate, as if the packet in flight had been sent at it from the start: a
            // raised rate takes effect at once, a lowered one at once too.
            let now = self.last_now;
            let new_rate = self.rate;
            self.time_next.next_ns = rescale_wait(self.time_next.next_ns, now, old_rate, new_rate);
            self.failsafe_next = rescale_wait(self.failsafe_next, now, old_rate, new_rate);
            for (tin, old) in self.tins.iter_mut().zip(old_tin_rates).take(self.tin_cnt) {
                if !old.is_unlimited() && !tin.rate().is_unlimited() {
                    tin.clock.next_ns = rescale_wait(tin.clock.next_ns, now, old, tin.rate());
                }
            }
        }
        if was_unlimited && !self.rate.is_unlimited() {
            // Coming out of unlimited mode the clocks are stale; without this the shaper
            // would let out a burst worth the whole unshaped period.
            let now = self.last_now;
            if self.time_next.next_ns < now {
                self.time_next.set(now);
                self.failsafe_next = now;
            }
            for tin in &mut self.tins {
                if tin.clock.next_ns < now {
                    tin.clock.set(now);
                }
            }
        }
        if !rate_only {
            self.buffer_limit = self.compute_buffer_limit();
            self.stats.memory_limit = self.buffer_limit;
        }
    }

    /// Charges `len` adjusted bytes to tin `t` and the global shaper
    /// (sch_cake.c `cake_advance_shaper`). Drops (`drop`) do not advance the failsafe.
    #[inline]
    pub(super) fn advance_shaper(&mut self, t: usize, len: u32, now: u64, drop: bool) {
        if self.rate.is_unlimited() {
            return;
        }
        let tin = &mut self.tins[t];
        let rate = tin.rate();
        let td = tin.clock.duration(rate, len);
        if tin.clock.next_ns < now {
            tin.clock.next_ns = tin.clock.next_ns.saturating_add(td);
        } else if tin.clock.next_ns < now.saturating_add(td) {
            tin.clock.next_ns = now.saturating_add(td);
        }
        let g = self.time_next.duration(self.rate, len);
        self.time_next.next_ns = self.time_next.next_ns.saturating_add(g);
        if !drop {
            self.failsafe_next = self.failsafe_next.saturating_add(g + g / 2);
        }
    }

    /// Deliberate deviation from sch_cake: bounds how far `time_next_packet` may lag behind
    /// `now` while busy. Like the kernel, the shaper catches up after a short lag (a worker
    /// descheduled for a few ms by a busy machine sends the backlog it owes, so the delivered
    /// rate still equals the configured one; a 2 ms bound measurably cost 15-35 % of the rate
    /// on a loaded 2-core box). Unlike the kernel, whose watchdog never lags much, a userspace
    /// worker can stall for hundreds of ms; releasing all of that credit at line rate would
    /// overshoot the rate in any window that starts after the stall and move the queue into
    /// the next hop's buffer. So the credit is capped at `max(50 ms, 4 MTU times)`: half of
    /// CAKE's default interval, far above scheduler stalls, far below a measurement window.
    #[inline]
    pub(super) fn bound_catch_up(&mut self, now: u64) {
        let allowance = MAX_CATCH_UP_NS.max(4 * self.rate.duration_ns(u64::from(self.hot.mtu)));
        let floor = now.saturating_sub(allowance);
        if self.time_next.next_ns < floor {
            self.time_next.set(floor);
            self.stats.catch_up_clamps += 1;
        }
    }

    pub(super) fn update_autorate(&mut self, now: u64) {
        let a = &mut self.autorate;
        let interval = now.saturating_sub(a.last_packet_time).min(1_000_000_000);
        let shift = if interval > a.avg_packet_interval {
            2
        } else {
            8
        };
        a.avg_packet_interval = ewma(a.avg_packet_interval, interval, shift);
        a.last_packet_time = now;
        if interval <= a.avg_packet_interval {
            return;
        }
        let window = now.saturating_sub(a.avg_window_begin);
        if window > 0 {
            let b = (u128::from(a.avg_window_bytes) * 1_000_000_000 / u128::from(window))
                .min(u128::from(u64::MAX)) as u64;
            let shift = if b > a.avg_peak_bandwidth { 2 } else { 8 };
            a.avg_peak_bandwidth = ewma(a.avg_peak_bandwidth, b, shift);
        }
        a.avg_window_bytes = 0;
        a.avg_window_begin = now;
        self.stats.capacity_estimate = a.avg_peak_bandwidth;
        // Linux never updates last_reconfig_time, so after the first 250 ms every burst end
        // reconfigures; we keep that.
        if now > a.last_reconfig_time.saturating_add(AUTORATE_HOLDOFF_NS) {
            let rate = ((u128::from(a.avg_peak_bandwidth) * 15) >> 4) as u64;
            let rate = if rate == 0 {
                0
            } else {
                rate.max(MIN_RATE_BYTES_PER_SEC)
            };
            self.configure_rates(rate, false);
        }
    }
}

/// `next` (a time still ahead of `now`, computed at rate `old`) moved so that what is left
/// of its wait takes as long at rate `new`; a time already passed is left alone.
fn rescale_wait(next: u64, now: u64, old: RateNs, new: RateNs) -> u64 {
    if next <= now || old.ns == 0 {
        return next;
    }
    // left x (ns per byte at new) / (ns per byte at old), in fixed point: each rate is
    // `ns >> shft` ns per byte.
    // At most about a year: keeps the fixed-point product below 2^123.
    let left = u128::from((next - now).min(1 << 55));
    let scaled = (left * u128::from(new.ns)) << old.shft >> new.shft;
    let left = scaled / u128::from(old.ns);
    now.saturating_add(u64::try_from(left).unwrap_or(u64::MAX))
}
