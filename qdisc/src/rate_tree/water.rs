//! The water-filling core shared by every rate split in the crate: the one-level
//! work-conserving split of cake_mq (`mq::shared_rate`) and each node of a
//! [`super::RateTree`] (docs/design.md, "Shared rates: from cake_mq to a tree").
//!
//! Given a capacity and the children that want part of it, each with a floor (`min`) and a
//! ceiling (`max`), it finds the water level `L` at which every child gets
//! `clamp(L, min, max)` and the grants add up to the capacity: mins first, then the rest
//! max-min fair, no child above its ceiling, capacity nobody wants left over as slack. It
//! runs in time linear in the number of children (a quickselect over the breakpoints, not a
//! sort) and allocates nothing: the caller lends the scratch.

/// What one child asks of its parent's rate, in bytes per second: at least `min`, at most
/// `max` (`min <= max`; callers clamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// The floor, granted before any water-filling (HTB's `rate`).
    pub min: u64,
    /// The ceiling: the child's own cap or what it can use (HTB's `ceil`).
    pub max: u64,
}

/// One breakpoint of the fill function: `sign * min(L, value)` (see [`fill`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Point {
    value: u64,
    sign: i8,
}

/// The outcome of one fill: how a child's [`Want`] turns into its grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Every child gets its `max`; `slack` of the capacity is left over.
    Met { slack: u64 },
    /// Each child gets `clamp(level, min, max)`; the grants add up to the capacity, less the
    /// rounding of the level down to a whole byte per second.
    Level(u64),
    /// The mins alone exceed the capacity: each child gets `min * capacity / total_min`.
    Scaled { capacity: u64, total_min: u64 },
}

impl Fill {
    /// The grant of a child that wants `want`.
    pub(crate) fn grant(self, want: Want) -> u64 {
        match self {
            Fill::Met { .. } => want.max,
            Fill::Level(level) => level.max(want.min).min(want.max),
            Fill::Scaled {
                capacity,
                total_min,
            } => (u128::from(want.min) * u128::from(capacity) / u128::from(total_min)) as u64,
        }
    }
}

/// Fills `capacity` among the children whose wants `wants` yields, plus `unbounded`
/// children with no floor and no ceiling. `points` is scratch with room for two points per
/// want (fewer are used when mins are zero).
///
/// The fill function `f(L) = sum clamp(L, min, max)` is rewritten as
/// `sum min + sum min(L, max) - sum min(L, min)`: one signed breakpoint per bound, so the
/// level can be found by a quickselect that halves the unresolved breakpoints at each step
/// (those at or below the level add a constant, those above add a slope), O(children)
/// expected, where a sort would be O(children log children).
pub(crate) fn fill<I>(capacity: u64, wants: I, unbounded: u64, points: &mut [Point]) -> Fill
where
    I: Iterator<Item = Want> + Clone,
{
    let mut total_min: u128 = 0;
    let mut total_max: u128 = 0;
    let mut n = 0;
    for w in wants.clone() {
        debug_assert!(w.min <= w.max, "a want's min is above its max: {w:?}");
        total_min += u128::from(w.min);
        total_max += u128::from(w.max);
        if w.max > w.min {
            points[n] = Point {
                value: w.max,
                sign: 1,
            };
            n += 1;
            if w.min > 0 {
                points[n] = Point {
                    value: w.min,
                    sign: -1,
                };
                n += 1;
            }
        }
    }
    let cap = u128::from(capacity);
    if unbounded == 0 && total_max <= cap {
        return Fill::Met {
            slack: (cap - total_max) as u64,
        };
    }
    if total_min >= cap {
        return if total_min == 0 {
            Fill::Level(0)
        } else {
            Fill::Scaled {
                capacity,
                total_min: total_min.min(u128::from(u64::MAX)) as u64,
            }
        };
    }
    // f(L) = constant + slope * L + (the unresolved points in `rest`).
    let cap = cap as i128;
    let mut constant = total_min as i128;
    let mut slope = i128::from(unbounded.min(i64::MAX as u64) as i64);
    let mut lo: i128 = 0;
    let mut rest = &mut points[..n];
    while !rest.is_empty() {
        let mid = rest.len() / 2;
        rest.select_nth_unstable_by_key(mid, |p| p.value);
        let pivot = i128::from(rest[mid].value);
        let (at_or_below, above) = rest.split_at_mut(mid + 1);
        let below_sum: i128 = at_or_below
            .iter()
            .map(|p| i128::from(p.sign) * i128::from(p.value))
            .sum();
        let above_slope: i128 = above.iter().map(|p| i128::from(p.sign)).sum();
        let f_pivot = constant + slope * pivot + below_sum + above_slope * pivot;
        if f_pivot <= cap {
            // The level is at or above the pivot: every point up to it is a constant.
            constant += below_sum;
            lo = pivot;
            rest = above;
        } else {
            // The level is below the pivot: the pivot and every point above it are linear.
            slope += above_slope + i128::from(at_or_below[mid].sign);
            rest = &mut at_or_below[..mid];
        }
    }
    let level = if slope > 0 {
        ((cap - constant) / slope).max(lo)
    } else {
        lo
    };
    Fill::Level(level.clamp(0, i128::from(u64::MAX)) as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(capacity: u64, wants: &[Want], unbounded: u64) -> Fill {
        let mut points = vec![Point::default(); 2 * wants.len()];
        fill(capacity, wants.iter().copied(), unbounded, &mut points)
    }

    /// The plain definition: raise the level one step at a time (bisection on the real line)
    /// until the clamped sum would pass the capacity.
    fn oracle_level(capacity: u64, wants: &[Want], unbounded: u64) -> u64 {
        let f = |l: u64| -> u128 {
            wants
                .iter()
                .map(|w| u128::from(l.max(w.min).min(w.max)))
                .sum::<u128>()
                + u128::from(unbounded) * u128::from(l)
        };
        let (mut lo, mut hi) = (0u64, u64::MAX);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if f(mid) <= u128::from(capacity) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    fn want(min: u64, max: u64) -> Want {
        Want { min, max }
    }

    #[test]
    fn mins_first_then_the_rest_max_min_fair() {
        // 100 among a child wanting 10, one guaranteed 40 wanting 90, one wanting 90.
        let wants = [want(0, 10), want(40, 90), want(0, 90)];
        let fill = run(100, &wants, 0);
        assert_eq!(fill, Fill::Level(45));
        let grants: Vec<u64> = wants.iter().map(|&w| fill.grant(w)).collect();
        assert_eq!(grants, [10, 45, 45]);
        let fill = run(80, &wants, 0);
        let grants: Vec<u64> = wants.iter().map(|&w| fill.grant(w)).collect();
        assert_eq!(grants, [10, 40, 30]);
    }

    #[test]
    fn unused_capacity_is_slack_and_oversubscribed_mins_scale() {
        assert_eq!(
            run(100, &[want(0, 10), want(5, 20)], 0),
            Fill::Met { slack: 70 }
        );
        let wants = [want(60, 90), want(60, 90)];
        let fill = run(100, &wants, 0);
        assert_eq!(fill.grant(wants[0]), 50);
    }

    proptest! {
        #[test]
        fn the_level_is_the_highest_whose_clamped_sum_fits(
            capacity in 0u64..1_000_000,
            raw in prop::collection::vec((0u64..200_000, 0u64..200_000), 0..40),
            unbounded in 0u64..4,
        ) {
            let wants: Vec<Want> = raw.iter().map(|&(a, b)| want(a.min(b), a.max(b))).collect();
            let fill = run(capacity, &wants, unbounded);
            let total_min: u64 = wants.iter().map(|w| w.min).sum();
            let total_max: u64 = wants.iter().map(|w| w.max).sum();
            match fill {
                Fill::Met { slack } => {
                    prop_assert_eq!(unbounded, 0);
                    prop_assert_eq!(slack, capacity - total_max);
                }
                Fill::Scaled { .. } => prop_assert!(total_min >= capacity),
                Fill::Level(level) => {
                    prop_assert_eq!(level, oracle_level(capacity, &wants, unbounded));
                    let granted: u64 = wants.iter().map(|&w| fill.grant(w)).sum::<u64>()
                        + unbounded * level;
                    prop_assert!(granted <= capacity);
                    // Short of the capacity by less than one byte per second per child.
                    prop_assert!(capacity - granted <= wants.len() as u64 + unbounded);
                }
            }
        }
    }
}
