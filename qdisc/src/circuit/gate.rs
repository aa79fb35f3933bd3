//! The link cap over all circuits: a time-based gate like CAKE's own shaper (sch_cake.c
//! `cake_advance_shaper`), built from [`crate::cake::shaper`]'s clock and overhead types.
//! Each delivered packet advances the clock by its serialization time at the cap; nothing
//! is sent while the clock is ahead of `now`.

use crate::cake::shaper::{Clock, Overhead, RateNs};
use crate::cake::CakeConfig;
use crate::Rate;

/// Least credit the gate may bank while busy, as CAKE's `MAX_CATCH_UP_NS`.
const MAX_CATCH_UP_NS: u64 = 50_000_000;

/// The L2 header the gate assumes when the link compensates overhead: the gate charges
/// packets at delivery, when their [`crate::PacketMeta`] is gone (untagged Ethernet).
pub(super) const LINK_L2_LEN: u32 = 14;

#[derive(Debug, Clone)]
pub(super) struct LinkGate {
    rate_bps: u64,
    rate: RateNs,
    clock: Clock,
    overhead: Overhead,
    mtu: u32,
}

impl LinkGate {
    pub(super) fn new(link: &CakeConfig) -> LinkGate {
        let mut g = LinkGate {
            rate_bps: 0,
            rate: RateNs::default(),
            clock: Clock::default(),
            overhead: Overhead::default(),
            mtu: link.mtu,
        };
        g.configure(link, 0);
        g
    }

    /// Applies `link`'s rate and overhead options.
    pub(super) fn configure(&mut self, link: &CakeConfig, now: u64) {
        self.overhead = Overhead {
            compensate: !link.raw,
            overhead: link.overhead,
            mpu: link.mpu,
            atm: link.atm,
        };
        self.mtu = link.mtu;
        self.set_rate(link.rate, now);
    }

    /// A pure parameter write; the wait still pending is rescaled to the new rate, as
    /// CAKE's own rate change does.
    pub(super) fn set_rate(&mut self, rate: Rate, now: u64) {
        let bps = rate.bytes_per_sec();
        let bps = if bps == 0 { 0 } else { bps.max(64) };
        let new = RateNs::new(bps);
        if !self.rate.is_unlimited() && !new.is_unlimited() && self.clock.next_ns > now {
            let wait = self.clock.next_ns - now;
            let scaled = (u128::from(wait) * u128::from(self.rate_bps) / u128::from(bps)) as u64;
            self.clock.next_ns = now.saturating_add(scaled);
        } else if self.rate.is_unlimited() && !new.is_unlimited() {
            // Leaving unlimited: no burst for the time spent unlimited.
            self.clock.set(now);
        }
        self.clock.reset_fraction();
        self.rate = new;
        self.rate_bps = bps;
    }

    pub(super) fn rate(&self) -> Rate {
        Rate::from_bytes_per_sec(self.rate_bps)
    }

    pub(super) fn is_unlimited(&self) -> bool {
        self.rate.is_unlimited()
    }

    /// True when a packet may be sent at `now`.
    #[inline]
    pub(super) fn is_open(&self, now: u64) -> bool {
        self.rate.is_unlimited() || self.clock.next_ns <= now
    }

    /// When the gate opens (meaningful only while shaping).
    pub(super) fn opens_at(&self) -> u64 {
        self.clock.next_ns
    }

    /// The shaper was idle: no credit is banked for the idle time (CAKE resets its clock
    /// on an enqueue into an empty queue the same way).
    pub(super) fn wake(&mut self, now: u64) {
        if self.clock.next_ns < now {
            self.clock.set(now);
        }
    }

    /// Charges one delivered frame of `len` bytes.
    #[inline]
    pub(super) fn charge(&mut self, now: u64, len: u32) {
        if self.rate.is_unlimited() {
            return;
        }
        let allowance = MAX_CATCH_UP_NS.max(4 * self.rate.duration_ns(u64::from(self.mtu)));
        let floor = now.saturating_sub(allowance);
        if self.clock.next_ns < floor {
            self.clock.set(floor);
        }
        let (adj, _) = self.overhead.adjust(len, LINK_L2_LEN);
        let d = self.clock.duration(self.rate, adj);
        self.clock.next_ns = self.clock.next_ns.saturating_add(d);
    }

    /// The round-robin quantum between circuits: one MTU.
    pub(super) fn quantum(&self) -> i32 {
        self.mtu.clamp(256, 65536) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_passes_its_rate_and_banks_no_idle_credit() {
        let link = CakeConfig {
            rate: Rate::from_bits_per_sec(8_000_000), // 1 MB/s: 1000 bytes per ms
            ..CakeConfig::default()
        };
        let mut g = LinkGate::new(&link);
        g.wake(1_000_000_000);
        let mut now = 1_000_000_000;
        let mut sent = 0u64;
        while now < 2_000_000_000 {
            if g.is_open(now) {
                g.charge(now, 1000);
                sent += 1000;
            } else {
                now = g.opens_at();
            }
        }
        assert!((999_000..=1_001_000).contains(&sent), "{sent}");
    }
}
