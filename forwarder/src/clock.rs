//! The process's one clock: monotonic nanoseconds since its first reading. A leaf: the ports
//! and the engine read it, it depends on nothing in the crate.
//!
//! Workers read the real clock once per loop iteration with [`now_ns`]; everything else on
//! that thread (the generator's send stamp, the sink's delay, the pcap writer's timestamps)
//! uses [`recent_ns`], the value of that read, so the data path never reads the clock per
//! packet. Code that runs outside a worker loop simply gets a fresh reading from
//! [`recent_ns`] the first time.
//!
//! # A cheaper counter between readings
//! A monotonic clock reading costs about 30 ns (a vDSO call), as much as forwarding a
//! frame. When a backend registers a constant-rate counter ([`use_ticks`]: the DPDK backend
//! registers the TSC), [`now_ns`] reads the counter instead and converts it with the rate it
//! measured against the monotonic clock on this thread, which it reads again only every
//! [`ANCHOR_NS`]: every value is then within a few nanoseconds of the monotonic clock, never
//! drifts from it (each reading re-anchors), and never goes backwards on a thread. The rate
//! is measured here, not taken from the backend: DPDK rounds the TSC frequency it reports to
//! 10 MHz (0.2 % at 2.4 GHz), which would shape that much below the configured rate.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// A constant-rate counter registered with [`use_ticks`].
static TICKS: OnceLock<fn() -> u64> = OnceLock::new();

/// How long [`now_ns`] converts counter ticks before it reads the monotonic clock again.
pub const ANCHOR_NS: u64 = 200_000;

/// The counter's rate is only trusted once measured over at least this long.
const MIN_BASELINE_NS: u64 = 1_000_000;

thread_local! {
    static RECENT: Cell<u64> = const { Cell::new(0) };
    static INTERP: Cell<Interp> = const { Cell::new(Interp::new()) };
}

/// Reads the monotonic clock (ns since the process's first reading, at least 1) and
/// remembers it as this thread's [`recent_ns`].
#[inline]
pub fn now_ns() -> u64 {
    let ns = match TICKS.get() {
        Some(ticks) => {
            let tick = ticks();
            INTERP.with(|c| {
                let mut interp = c.get();
                let ns = interp.at(tick, monotonic_ns);
                c.set(interp);
                ns
            })
        }
        None => monotonic_ns(),
    };
    RECENT.with(|r| r.set(ns));
    ns
}

/// This thread's last [`now_ns`] reading (reads the clock if this thread never has).
#[inline]
pub fn recent_ns() -> u64 {
    let ns = RECENT.with(|r| r.get());
    if ns == 0 {
        now_ns()
    } else {
        ns
    }
}

/// Lets [`now_ns`] read `ticks`, a counter that runs at a constant rate on every core (the
/// TSC of a CPU with an invariant TSC), between readings of the monotonic clock (see the
/// module docs). Returns false, changing nothing, when a counter is registered already.
pub fn use_ticks(ticks: fn() -> u64) -> bool {
    TICKS.set(ticks).is_ok()
}

/// The monotonic clock itself.
fn monotonic_ns() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    (epoch.elapsed().as_nanos() as u64).max(1)
}

/// One thread's conversion from counter ticks to nanoseconds, anchored to the monotonic
/// clock every [`ANCHOR_NS`] (sans-I/O: the caller passes the tick and the clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interp {
    /// The first (tick, ns) reading on this thread: the baseline the rate is measured over.
    base: Option<(u64, u64)>,
    /// The latest (tick, ns) reading.
    anchor: (u64, u64),
    /// Nanoseconds per tick in 32.32 fixed point; 0 until measured over `MIN_BASELINE_NS`.
    mult: u64,
    /// Ticks after `anchor` that are converted before the clock is read again.
    span: u64,
    /// The last value returned (values never go backwards).
    last: u64,
}

impl Interp {
    const fn new() -> Interp {
        Interp {
            base: None,
            anchor: (0, 0),
            mult: 0,
            span: 0,
            last: 0,
        }
    }

    /// The time at counter value `tick`; calls `clock` (the monotonic clock) only when the
    /// rate is not known yet or the last reading is `ANCHOR_NS` old (or the counter went
    /// backwards).
    #[inline]
    fn at(&mut self, tick: u64, clock: impl FnOnce() -> u64) -> u64 {
        let since = tick.wrapping_sub(self.anchor.0);
        let ns = if since < self.span {
            self.anchor.1 + ((u128::from(since) * u128::from(self.mult)) >> 32) as u64
        } else {
            let ns = clock();
            self.anchor_at(tick, ns);
            ns
        };
        self.last = self.last.max(ns);
        self.last
    }

    /// Takes (tick, ns) as the new anchor and re-measures the rate over the whole baseline.
    fn anchor_at(&mut self, tick: u64, ns: u64) {
        self.anchor = (tick, ns);
        let Some((base_tick, base_ns)) = self.base else {
            self.base = Some((tick, ns));
            return;
        };
        if tick <= base_tick || ns <= base_ns {
            // The counter (or the clock) went backwards, e.g. a thread moved to a core whose
            // counter differs: start the baseline over and read the clock until it is long.
            self.base = Some((tick, ns));
            self.span = 0;
            return;
        }
        let (ticks, elapsed) = (tick - base_tick, ns - base_ns);
        if elapsed < MIN_BASELINE_NS {
            return;
        }
        self.mult =
            ((u128::from(elapsed) << 32) / u128::from(ticks)).min(u128::from(u64::MAX)) as u64;
        self.span = if self.mult == 0 {
            0
        } else {
            ((u128::from(ANCHOR_NS) << 32) / u128::from(self.mult)).min(u128::from(u64::MAX)) as u64
        };
    }
}

/// Wall-clock time (ns since the Unix epoch) that corresponds to monotonic `mono_ns`, for
/// file timestamps. Reads both clocks; not for the data path.
pub fn wall_ns_at(mono_ns: u64) -> u64 {
    let wall_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mono_now = now_ns();
    wall_now.saturating_sub(mono_now.saturating_sub(mono_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_never_goes_backwards_and_recent_follows_it() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a >= 1);
        assert_eq!(recent_ns(), b);
    }

    /// A counter at 3 ticks per ns against a clock that reads exactly tick / 3 (+ offset).
    fn drive(interp: &mut Interp, tick: u64, reads: &mut u32) -> u64 {
        interp.at(tick, || {
            *reads += 1;
            1_000 + tick / 3
        })
    }

    #[test]
    fn ticks_are_converted_between_clock_readings_once_the_rate_is_measured() {
        let mut i = Interp::new();
        let mut reads = 0;
        // Until the baseline spans a millisecond, every call reads the clock.
        for k in 0..10u64 {
            let tick = 3_000 + k * 300_000; // 100 µs steps
            assert_eq!(drive(&mut i, tick, &mut reads), 1_000 + tick / 3);
        }
        assert_eq!(reads, 10);
        let tick = 3_000 + 3_000_000; // 1 ms after the first reading: the rate is measured
        drive(&mut i, tick, &mut reads);
        assert_eq!(reads, 11);
        // Now 1 µs steps are converted (within a nanosecond) and the clock is read again
        // once per ANCHOR_NS.
        let start = tick;
        for k in 1..=1_000u64 {
            let tick = start + k * 3_000;
            let ns = drive(&mut i, tick, &mut reads);
            assert!(ns.abs_diff(1_000 + tick / 3) <= 1, "{ns} at {tick}");
        }
        let anchors = reads - 11;
        assert!(
            (4..=6).contains(&anchors),
            "{anchors} clock readings in 1 ms"
        );
    }

    #[test]
    fn a_counter_that_goes_backwards_or_a_slower_clock_never_turns_time_back() {
        let mut i = Interp::new();
        let mut reads = 0;
        for k in 0..=20u64 {
            drive(&mut i, 3_000 + k * 300_000, &mut reads);
        }
        let before = drive(&mut i, 3_000 + 20 * 300_000 + 3_000, &mut reads);
        // The counter jumps back: the clock is read, the baseline starts over, and the value
        // stays where it was until the clock passes it.
        let after = i.at(10, || before - 500);
        assert_eq!(after, before);
        assert_eq!(i.span, 0);
        assert!(i.at(20, || before + 7) == before + 7);
    }
}
