//! COBALT, CAKE's AQM: CoDel with a gradual count decay, plus BLUE for flows that ignore
//! drops (sch_cake.c `cobalt_should_drop`, `cobalt_queue_full`, `cobalt_queue_empty`).
//! Per-flow state ([`CobaltVars`]) and per-tin parameters ([`CobaltParams`]); the functions
//! here decide, the caller drops or marks.

/// `2^32 / sqrt(n)` for n < 16, as the kernel caches them (8 Newton steps each). Entries 0
/// and 1 saturate to `u32::MAX`.
pub const INV_SQRT_CACHE: [u32; 16] = [
    0xFFFF_FFFF,
    0xFFFF_FFFF,
    3_037_000_500,
    2_479_700_525,
    2_147_483_647,
    1_920_767_767,
    1_753_413_056,
    1_623_345_051,
    1_518_500_250,
    1_431_655_765,
    1_358_187_914,
    1_294_981_364,
    1_239_850_263,
    1_191_209_601,
    1_147_878_294,
    1_108_955_788,
];

/// One Newton-Raphson step towards `2^32 / sqrt(count)` from the previous estimate, in the
/// kernel's fixed-point arithmetic (including its wrap-around on a stale estimate).
pub fn newton_step(count: u32, rec_inv_sqrt: u32) -> u32 {
    let x = u64::from(rec_inv_sqrt);
    let y = (x * x) >> 32;
    let v = (3u64 << 32).wrapping_sub(u64::from(count).wrapping_mul(y)) >> 2;
    (v.wrapping_mul(x) >> 31) as u32
}

/// Returns the new `rec_inv_sqrt` for `count`: the cache below 16, a Newton step above.
pub fn inv_sqrt(count: u32, rec_inv_sqrt: u32) -> u32 {
    match INV_SQRT_CACHE.get(count as usize) {
        Some(&v) => v,
        None => newton_step(count, rec_inv_sqrt),
    }
}

/// `t + interval / sqrt(count)`: CoDel's control law.
#[inline]
pub fn control(t: u64, interval_ns: u64, rec_inv_sqrt: u32) -> u64 {
    let add = (u128::from(interval_ns) * u128::from(rec_inv_sqrt)) >> 32;
    t.saturating_add(add as u64)
}

/// Per-tin COBALT parameters (recomputed on reconfigure, left alone by `set_rate` unless
/// `CakeConfig::round_target`). BLUE's steps are the same for every tin (sch_cake.c sets
/// them once), constants here: 24 bytes, so that a tin's state fits one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CobaltParams {
    /// CoDel interval (ns).
    pub interval_ns: u64,
    /// CoDel target (ns).
    pub target_ns: u64,
    /// Serialization time of one MTU at the tin's rate (ns; 0 when unlimited).
    pub mtu_time_ns: u64,
}

impl CobaltParams {
    /// BLUE increment (Q0.32; 1/256).
    pub const P_INC: u32 = 1 << 24;
    /// BLUE decrement (Q0.32; 1/4096).
    pub const P_DEC: u32 = 1 << 20;

    /// Derives the parameters for a tin whose MTU takes `mtu_time_ns` to send
    /// (sch_cake.c `cake_set_rate`): target = max(1.5 MTU time, configured target),
    /// interval = max(rtt + target − configured target, 2 target).
    pub fn new(target_cfg_ns: u64, interval_cfg_ns: u64, mtu_time_ns: u64) -> CobaltParams {
        let target = (mtu_time_ns.saturating_mul(3) / 2).max(target_cfg_ns);
        let interval = (interval_cfg_ns.saturating_add(target) - target_cfg_ns.min(target))
            .max(target.saturating_mul(2));
        CobaltParams {
            interval_ns: interval,
            target_ns: target,
            mtu_time_ns,
        }
    }
}

/// Per-flow COBALT state.
///
/// A fresh flow starts zeroed, as the kernel's does, **including `rec_inv_sqrt = 0`**: the
/// first time such a flow enters the dropping state its first drop is scheduled at `now`
/// instead of `now + interval` (the control law multiplies by 0). We keep that quirk so
/// our drop pattern matches Linux packet for packet; later entries use the cached ≈1.0.
/// See the test `first_entry_into_dropping_schedules_at_once_like_linux`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CobaltVars {
    /// Drops (or marks) in the current dropping episode, decayed gradually.
    pub count: u32,
    /// `2^32 / sqrt(count)`.
    pub rec_inv_sqrt: u32,
    /// BLUE drop probability (Q0.32).
    pub p_drop: u32,
    /// Whether CoDel is in the dropping state.
    pub dropping: bool,
    /// Next scheduled drop; also an activity timeout while `count == 0`.
    pub drop_next: u64,
    /// Last BLUE adjustment.
    pub blue_timer: u64,
}

/// What [`CobaltVars::should_drop`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver unchanged.
    Pass,
    /// Deliver with CE set (the packet was ECN-capable).
    Marked,
    /// Drop (CoDel on a non-ECT packet, or BLUE).
    Drop,
}

impl CobaltVars {
    fn invsqrt(&mut self) {
        self.rec_inv_sqrt = inv_sqrt(self.count, self.rec_inv_sqrt);
    }

    /// Decides the fate of a packet with `sojourn_ns` at the head of the flow
    /// (sch_cake.c `cobalt_should_drop`). `set_ce` is called when CoDel wants to signal; it
    /// returns true when the packet took the CE mark. `bulk` is the tin's bulk flow count in
    /// ingress mode, twice that with `CakeConfig::round_target`, and 0 otherwise. `rand` is a uniform random u32 for BLUE.
    #[inline]
    pub fn should_drop(
        &mut self,
        p: &CobaltParams,
        now: u64,
        sojourn_ns: u64,
        bulk: u32,
        rand: u32,
        set_ce: impl FnOnce() -> bool,
    ) -> Verdict {
        let over = sojourn_ns > p.target_ns
            && sojourn_ns
                > p.mtu_time_ns
                    .saturating_mul(2)
                    .saturating_mul(u64::from(bulk))
            && sojourn_ns > p.mtu_time_ns.saturating_mul(4);
        if !over && self.count == 0 && self.p_drop == 0 {
            // Below target with no CoDel or BLUE state, the common case: what the general
            // path below does then, laid out as one straight path (its branches were all
            // taken jumps here).
            self.dropping = false;
            self.drop_next = now.saturating_add(p.interval_ns);
            return Verdict::Pass;
        }
        let mut due = self.count > 0 && now >= self.drop_next;
        if over {
            if !self.dropping {
                self.dropping = true;
                self.drop_next = control(now, p.interval_ns, self.rec_inv_sqrt);
            }
            if self.count == 0 {
                self.count = 1;
            }
        } else {
            self.dropping = false;
        }
        let mut verdict = Verdict::Pass;
        if due && self.dropping {
            verdict = if set_ce() {
                Verdict::Marked
            } else {
                Verdict::Drop
            };
            self.count = self.count.saturating_add(1);
            self.invsqrt();
            self.drop_next = control(self.drop_next, p.interval_ns, self.rec_inv_sqrt);
        } else {
            // Gradual decay: one count per elapsed control interval, not CoDel's reset.
            while due {
                self.count -= 1;
                self.invsqrt();
                self.drop_next = control(self.drop_next, p.interval_ns, self.rec_inv_sqrt);
                due = self.count > 0 && now >= self.drop_next;
            }
        }
        // BLUE never marks: a flow that overflows the queue is not listening to ECN either.
        if self.p_drop != 0 && verdict == Verdict::Pass && rand < self.p_drop {
            verdict = Verdict::Drop;
        }
        if self.count == 0 {
            self.drop_next = now.saturating_add(p.interval_ns);
        } else if now > self.drop_next && verdict == Verdict::Pass {
            self.drop_next = now;
        }
        verdict
    }

    /// The flow was chosen as the overflow victim: raise BLUE's probability (at most once per
    /// target) and enter dropping. Returns true when BLUE just became active.
    pub fn queue_full(&mut self, p: &CobaltParams, now: u64) -> bool {
        let mut up = false;
        if now.saturating_sub(self.blue_timer) > p.target_ns {
            up = self.p_drop == 0;
            self.p_drop = self.p_drop.saturating_add(CobaltParams::P_INC);
            self.blue_timer = now;
        }
        self.dropping = true;
        self.drop_next = now;
        if self.count == 0 {
            self.count = 1;
        }
        up
    }

    /// The flow was found empty: decay BLUE and CoDel state. Returns true when BLUE just
    /// became inactive.
    pub fn queue_empty(&mut self, p: &CobaltParams, now: u64) -> bool {
        if self.p_drop == 0 && self.count == 0 {
            // No BLUE or CoDel state to decay, the common case, straight.
            self.dropping = false;
            return false;
        }
        let mut down = false;
        if self.p_drop != 0 && now.saturating_sub(self.blue_timer) > p.target_ns {
            self.p_drop = self.p_drop.saturating_sub(CobaltParams::P_DEC);
            self.blue_timer = now;
            down = self.p_drop == 0;
        }
        self.dropping = false;
        if self.count != 0 && now >= self.drop_next {
            self.count -= 1;
            self.invsqrt();
            self.drop_next = control(self.drop_next, p.interval_ns, self.rec_inv_sqrt);
        }
        down
    }

    /// Whether the flow must stay on the decaying list before it may rest.
    pub fn is_decaying(&self, now: u64) -> bool {
        self.p_drop != 0 || self.count != 0 || now < self.drop_next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_inverse_square_roots_are_two_to_the_32_over_root_n() {
        for (n, &v) in INV_SQRT_CACHE.iter().enumerate().skip(2) {
            let exact = 4_294_967_296.0 / (n as f64).sqrt();
            assert!((v as f64 - exact).abs() <= 2.0, "n={n} {v} vs {exact}");
        }
    }

    #[test]
    fn newton_steps_converge_to_the_inverse_square_root() {
        // Walk count upwards the way CoDel does and compare with the exact value.
        let mut x = INV_SQRT_CACHE[15];
        for count in 16..5000u32 {
            x = inv_sqrt(count, x);
            let exact = 4_294_967_296.0 / f64::from(count).sqrt();
            let err = (f64::from(x) - exact).abs() / exact;
            assert!(err < 2e-3, "count {count}: {x} vs {exact}");
        }
        // One step from the cached value for 15 to 16 lands within 0.2 % of 2^32/4.
        let y = newton_step(16, INV_SQRT_CACHE[15]);
        assert!((i64::from(y) - (1i64 << 30)).abs() < (1 << 21), "{y}");
    }

    #[test]
    fn control_law_divides_the_interval_by_root_count() {
        assert_eq!(
            control(1000, 100_000_000, INV_SQRT_CACHE[4]),
            1000 + 49_999_999
        );
        assert_eq!(control(5, 100, 0), 5);
        assert_eq!(control(u64::MAX - 1, u64::MAX, u32::MAX), u64::MAX);
    }

    #[test]
    fn params_stretch_target_to_one_and_a_half_mtu_times() {
        let p = CobaltParams::new(5_000_000, 100_000_000, 0);
        assert_eq!((p.target_ns, p.interval_ns), (5_000_000, 100_000_000));
        // 1514 B at 64 kB/s ≈ 23.6 ms, so target becomes 35.5 ms and interval grows with it.
        let p = CobaltParams::new(5_000_000, 100_000_000, 23_656_250);
        assert_eq!(p.target_ns, 35_484_375);
        assert_eq!(p.interval_ns, 100_000_000 + 35_484_375 - 5_000_000);
        let p = CobaltParams::new(5_000_000, 6_000_000, 0);
        assert_eq!(p.interval_ns, 10_000_000, "interval at least twice target");
    }

    fn params() -> CobaltParams {
        CobaltParams::new(5_000_000, 100_000_000, 0)
    }

    #[test]
    fn first_entry_into_dropping_schedules_at_once_like_linux() {
        let p = params();
        let mut v = CobaltVars::default();
        assert_eq!(
            v.should_drop(&p, 1_000_000_000, 10_000_000, 0, u32::MAX, || false),
            Verdict::Pass
        );
        assert!(v.dropping);
        assert_eq!(
            v.drop_next, 1_000_000_000,
            "rec_inv_sqrt starts at 0 (kernel quirk)"
        );
        // The very next over-target packet is dropped.
        assert_eq!(
            v.should_drop(&p, 1_000_000_001, 10_000_000, 0, u32::MAX, || false),
            Verdict::Drop
        );
        assert_eq!(v.count, 2);
    }

    #[test]
    fn a_second_dropping_episode_waits_an_interval() {
        let p = params();
        let mut v = CobaltVars {
            rec_inv_sqrt: INV_SQRT_CACHE[1],
            ..CobaltVars::default()
        };
        v.should_drop(&p, 1_000, 10_000_000, 0, u32::MAX, || false);
        assert_eq!(v.drop_next, 1_000 + 99_999_999);
        assert_eq!(
            v.should_drop(&p, 2_000, 10_000_000, 0, u32::MAX, || false),
            Verdict::Pass
        );
    }

    #[test]
    fn ect_packets_are_marked_instead_of_dropped() {
        let p = params();
        let mut v = CobaltVars::default();
        v.should_drop(&p, 1_000, 10_000_000, 0, u32::MAX, || true);
        assert_eq!(
            v.should_drop(&p, 2_000, 10_000_000, 0, u32::MAX, || true),
            Verdict::Marked
        );
    }

    #[test]
    fn count_decays_one_step_per_interval_rather_than_resetting() {
        let p = params();
        let mut v = CobaltVars {
            count: 10,
            rec_inv_sqrt: INV_SQRT_CACHE[10],
            drop_next: 0,
            ..CobaltVars::default()
        };
        // Below target and due: count shrinks by the number of elapsed control intervals.
        v.should_drop(&p, 40_000_000, 0, 0, u32::MAX, || false);
        assert!(v.count < 10 && v.count > 0, "{}", v.count);
    }

    #[test]
    fn blue_rises_on_overflow_and_falls_when_empty() {
        let p = params();
        let mut v = CobaltVars::default();
        assert!(v.queue_full(&p, 10_000_000));
        assert_eq!(v.p_drop, 1 << 24);
        assert!(!v.queue_full(&p, 10_000_001), "at most one step per target");
        assert_eq!(v.p_drop, 1 << 24);
        assert!(v.dropping && v.count == 1);
        // BLUE drops when the random draw is below p_drop, and never marks.
        assert_eq!(
            v.should_drop(&p, 10_000_002, 0, 0, 0, || true),
            Verdict::Drop
        );
        let mut steps = 0;
        let mut now = 10_000_002;
        while v.p_drop > 0 {
            now += 6_000_000;
            let down = v.queue_empty(&p, now);
            steps += 1;
            assert_eq!(down, v.p_drop == 0);
        }
        assert_eq!(steps, 16, "1/256 up, 1/4096 down");
    }

    #[test]
    fn p_drop_saturates_instead_of_wrapping() {
        let p = params();
        let mut v = CobaltVars {
            p_drop: u32::MAX - 5,
            ..CobaltVars::default()
        };
        v.queue_full(&p, 100_000_000);
        assert_eq!(v.p_drop, u32::MAX);
    }
}
