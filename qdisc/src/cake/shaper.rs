//! The time-based shaper (sch_cake.c `cake_set_rate`, `cake_advance_shaper`): rates as
//! nanoseconds per byte in fixed point, virtual clocks advanced by each packet's
//! serialization time, and the overhead arithmetic that turns a frame length into the length
//! charged to the shaper.
//!
//! Accuracy beyond Linux: the kernel truncates every packet's duration to whole
//! nanoseconds, which at 40 Gbit/s and 64-byte frames (12.8 ns each) loses up to 7 % of
//! the rate. [`Clock`] keeps the sub-nanosecond remainder, so the delivered rate matches
//! the configured one to within rounding of one nanosecond per rate change.

use super::config::AtmMode;
use crate::cold_path;

/// A rate as `ns_per_byte = ns >> shft` (the kernel's `rate_ns`/`rate_shft`). `ns == 0`
/// means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateNs {
    /// Nanoseconds per byte, scaled by `2^shft`.
    pub ns: u64,
    /// The scale.
    pub shft: u8,
}

impl RateNs {
    /// Converts `bytes_per_sec` (0 = unlimited; below 64 treated as 64).
    pub fn new(bytes_per_sec: u64) -> RateNs {
        if bytes_per_sec == 0 {
            return RateNs::default();
        }
        let mut shft = 34u8;
        let mut ns = (1_000_000_000u64 << 34) / bytes_per_sec.max(64);
        while ns >> 34 != 0 {
            ns >>= 1;
            shft -= 1;
        }
        RateNs { ns, shft }
    }

    /// Whether this rate shapes at all.
    #[inline]
    pub fn is_unlimited(self) -> bool {
        self.ns == 0
    }

    /// The whole nanoseconds `len` bytes take (truncated, as the kernel computes
    /// `mtu_time`).
    pub fn duration_ns(self, len: u64) -> u64 {
        ((u128::from(len) * u128::from(self.ns)) >> self.shft) as u64
    }
}

/// A virtual clock advanced by serialization times, keeping the sub-nanosecond remainder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Clock {
    /// The clock in ns.
    pub next_ns: u64,
    /// Fraction of a nanosecond, in units of `2^-shft` of the rate in use.
    frac: u64,
}

impl Clock {
    /// A clock at `t` with no fraction.
    pub fn at(t: u64) -> Clock {
        Clock {
            next_ns: t,
            frac: 0,
        }
    }

    /// Returns how many whole ns `len` bytes advance the clock at `rate`, carrying the
    /// remainder into the next call. The fraction is in the units of `rate`; after a rate
    /// change call [`Clock::reset_fraction`].
    #[inline]
    pub fn duration(&mut self, rate: RateNs, len: u32) -> u64 {
        let t = u128::from(len) * u128::from(rate.ns) + u128::from(self.frac);
        let mask = (1u128 << rate.shft) - 1;
        self.frac = (t & mask) as u64;
        (t >> rate.shft) as u64
    }

    /// Drops the carried fraction (less than 1 ns).
    pub fn reset_fraction(&mut self) {
        self.frac = 0;
    }

    /// Sets the clock to `t`, dropping the fraction.
    pub fn set(&mut self, t: u64) {
        *self = Clock::at(t);
    }
}

/// The overhead options, copied out of the config for the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overhead {
    /// False for `raw`: the L2 header is not subtracted and `overhead` is not added.
    pub compensate: bool,
    /// Bytes added per packet (-64..=256).
    pub overhead: i32,
    /// Minimum packet unit.
    pub mpu: u32,
    /// Cell framing.
    pub atm: AtmMode,
}

impl Overhead {
    /// The adjusted length of one frame of `len` bytes with `l2_len` bytes of L2 header,
    /// and its network length (`len` minus the L2 header when compensating):
    /// `(adjusted, netlen)` (sch_cake.c `cake_calc_overhead`).
    ///
    /// With `raw` (no compensation) the frame length is used as is, but the MPU and ATM/PTM
    /// framing still apply, as in the kernel.
    #[inline]
    pub fn adjust(&self, len: u32, l2_len: u32) -> (u32, u32) {
        // Compensation by mask, not branches: both settings are common, and on the packet
        // path a taken branch costs more than the two `and`s.
        let compensate = -i64::from(self.compensate);
        let mut l = i64::from(len) - (i64::from(l2_len.min(len)) & compensate);
        let netlen = l as u32;
        l += i64::from(self.overhead) & compensate;
        let mut l = l.max(i64::from(self.mpu)).max(0) as u64;
        // DSL framing is the cold side: links slow enough that a call per packet does not
        // matter.
        match self.atm {
            AtmMode::None => {}
            AtmMode::Atm => {
                cold_path();
                l = l.div_ceil(48) * 53;
            }
            AtmMode::Ptm => {
                cold_path();
                l += l.div_ceil(64);
            }
        }
        (l.min(u64::from(u32::MAX)) as u32, netlen)
    }

    /// The adjusted length of a frame that may be an unsplit GSO super-frame of `segs`
    /// segments. cakewalk never segments (the `Packet` trait cannot split a buffer), so a
    /// super-frame is charged like the kernel's unsplit path: `segs − 1` equal segments plus
    /// the remainder, each with its own overhead. Segment size is `ceil(len / segs)`; the
    /// L2 header is counted in each segment, because each goes on the wire with one.
    #[inline]
    pub fn adjust_gso(&self, len: u32, l2_len: u32, segs: u16) -> (u32, u32) {
        if segs <= 1 {
            return self.adjust(len, l2_len);
        }
        self.adjust_segments(len, l2_len, segs)
    }

    /// [`Overhead::adjust_gso`] for a super-frame of `segs` > 1 segments: out of line, so
    /// that the ordinary frame's path inlines into the enqueue and bypass (a call there
    /// cost more instructions than the adjustment itself).
    #[cold]
    #[inline(never)]
    fn adjust_segments(&self, len: u32, l2_len: u32, segs: u16) -> (u32, u32) {
        let segs = u32::from(segs);
        let seg = len.div_ceil(segs).max(1);
        let (one, net) = self.adjust(seg, l2_len);
        let last_len = len.saturating_sub(seg.saturating_mul(segs - 1));
        let (last, _) = self.adjust(last_len, l2_len);
        let total = u64::from(one) * u64::from(segs - 1) + u64::from(last);
        (total.min(u64::from(u32::MAX)) as u32, net)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cake::config::{CakeConfig, LinkPreset};

    #[test]
    fn rate_ns_keeps_34_bits_of_precision() {
        let r = RateNs::new(125_000_000); // 1 Gbit/s: 8 ns per byte
        assert!(r.ns < 1 << 34 && r.ns >= 1 << 33);
        assert_eq!(r.duration_ns(1500), 12_000);
        let slow = RateNs::new(1);
        assert_eq!(slow, RateNs::new(64), "below 64 B/s is clamped to 64");
        assert_eq!(slow.duration_ns(64), 1_000_000_000);
        assert!(RateNs::new(0).is_unlimited());
        let fast = RateNs::new(12_500_000_000); // 100 Gbit/s
        assert_eq!(fast.duration_ns(1_250_000), 100_000 - 1);
    }

    #[test]
    fn clock_carries_sub_nanosecond_remainders() {
        // 40 Gbit/s: 64 bytes take 12.8 ns; a million of them take exactly 12.8 ms.
        let rate = RateNs::new(5_000_000_000);
        let mut c = Clock::at(0);
        let mut total = 0u64;
        for _ in 0..1_000_000 {
            total += c.duration(rate, 64);
        }
        assert!((12_799_999..=12_800_000).contains(&total), "{total}");
    }

    fn overhead_of(p: LinkPreset) -> Overhead {
        let mut c = CakeConfig::default();
        p.apply(&mut c);
        Overhead {
            compensate: !c.raw,
            overhead: c.overhead,
            mpu: c.mpu,
            atm: c.atm,
        }
    }

    #[test]
    fn raw_uses_the_frame_length() {
        let o = overhead_of(LinkPreset::Raw);
        assert_eq!(o.adjust(1514, 14), (1514, 1514));
        assert_eq!(o.adjust(60, 14), (60, 60));
    }

    #[test]
    fn every_keyword_charges_its_overhead() {
        // (preset, adjusted length of a 1514-byte Ethernet frame, of a 60-byte frame)
        let cases = [
            // ATM: ceil((1500 + 48) / 48) * 53 = 33 cells.
            (LinkPreset::Conservative, 33 * 53, 2 * 53),
            (LinkPreset::Ethernet, 1538, 84),
            (LinkPreset::Docsis, 1518, 64),
            (LinkPreset::EtherVlan, 1504, 50),
            (LinkPreset::IpoaVcmux, 32 * 53, 2 * 53),
            (LinkPreset::IpoaLlcsnap, 32 * 53, 2 * 53),
            (LinkPreset::BridgedVcmux, 32 * 53, 2 * 53),
            (LinkPreset::BridgedLlcsnap, 32 * 53, 2 * 53),
            (LinkPreset::PppoaVcmux, 32 * 53, 2 * 53),
            (LinkPreset::PppoaLlc, 32 * 53, 2 * 53),
            (LinkPreset::PppoeVcmux, 32 * 53, 2 * 53),
            (LinkPreset::PppoeLlcsnap, 33 * 53, 2 * 53),
            // PTM: 1530 + ceil(1530 / 64) = 1530 + 24.
            (LinkPreset::PppoePtm, 1554, 78),
            (LinkPreset::BridgedPtm, 1522 + 24, 68 + 2),
        ];
        for (p, big, small) in cases {
            let o = overhead_of(p);
            assert_eq!(o.adjust(1514, 14).0, big, "{} 1514", p.name());
            assert_eq!(o.adjust(60, 14).0, small, "{} 60", p.name());
            assert_eq!(o.adjust(1514, 14).1, 1500, "{} netlen", p.name());
        }
    }

    #[test]
    fn negative_overhead_and_bogus_l2_lengths_never_underflow() {
        let o = Overhead {
            compensate: true,
            overhead: -64,
            mpu: 0,
            atm: AtmMode::Atm,
        };
        assert_eq!(o.adjust(20, 14), (0, 6));
        assert_eq!(o.adjust(10, 400), (0, 0));
        assert_eq!(o.adjust(u32::MAX, 0).1, u32::MAX);
        let o = Overhead { overhead: 256, ..o };
        assert!(o.adjust(u32::MAX, 0).0 == u32::MAX);
    }

    #[test]
    fn gso_super_frames_are_charged_per_segment() {
        let o = overhead_of(LinkPreset::Ethernet);
        // Three 1514-byte segments, each with its own 38 bytes of overhead (minus L2).
        assert_eq!(o.adjust_gso(3 * 1514, 14, 3).0, 3 * 1538);
        assert_eq!(o.adjust_gso(1514, 14, 0), o.adjust(1514, 14));
        // Fewer bytes than segments: no panic, every segment at least the mpu.
        assert_eq!(o.adjust_gso(3, 14, 60000).0, 84 * 60000);
    }
}
