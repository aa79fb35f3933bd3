//! [`SharedTree`]: the lock-free protocol around a [`RateTree`]'s computation, the tree
//! form of cake_mq's `SharedRate` (docs/design.md, "Shared rates: from cake_mq to a tree").
//!
//! Every leaf has a cache-padded slot: its demand, written only by the owner that runs the
//! leaf (once per sync, never per packet), and its share, written by the computation. A
//! bitmap, one bit per leaf, lists the active leaves so that a computation reads only
//! those; an owner touches its leaf's bit only when the leaf turns active or idle. Whichever
//! owner's periodic sync finds a computation due takes the runner try-lock (the one
//! `mq::sync::RunnerLock`, with its MISSED flag) and computes; an owner that finds the lock
//! held leaves MISSED, and the holder computes again before it lets go, so a demand
//! published before a sync is never left out by a race, only delayed. Owners apply their
//! leaves' shares with the rate-only `set_rate` at their next sync ([`LeafMeter`]). No
//! dedicated thread, no lock on the packet path.

use crossbeam_utils::CachePadded;

use super::{share_rate, Allocator, Demand, RateTree};
use crate::mq::sync::{AtomicBool, AtomicU64, Ordering, RunnerLock};
use crate::Rate;

/// How often the tree is recomputed and when a leaf counts as saturated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeSyncConfig {
    /// Least time between two computations (ns); a leaf turning active or idle brings the
    /// next one forward to half of it. Owners sync each leaf (publish its demand, apply its
    /// share) twice per interval. See [`TreeSyncConfig::for_leaves`] for the choice.
    pub interval_ns: u64,
    /// A leaf counts as saturated when it delivered at least this share (in percent) of its
    /// applied rate over its last window (as cake_mq's `SyncConfig`).
    pub saturation_percent: u32,
}

impl Default for TreeSyncConfig {
    /// 1 ms and 90 %: the choice for up to 2 500 leaves ([`TreeSyncConfig::for_leaves`]).
    fn default() -> TreeSyncConfig {
        TreeSyncConfig {
            interval_ns: 1_000_000,
            saturation_percent: 90,
        }
    }
}

impl TreeSyncConfig {
    /// The interval for a tree of `leaves`: 1 ms, or 1 µs per leaf when that is longer
    /// (10 ms at 10 000 leaves). One computation costs about 28 ns per active leaf
    /// (BENCHMARKS.md, "Rate tree"), under 3 % of one core at this interval; an owner's
    /// sync of a leaf, 10 ns when warm, took a few hundred in the whole binary with
    /// 10 000 live circuits (cold meters and slots: `scripts/bench-circuits-tree`), and
    /// it syncs every leaf it runs twice per interval. A node's idle share is lent within
    /// two intervals.
    pub fn for_leaves(leaves: usize) -> TreeSyncConfig {
        TreeSyncConfig {
            interval_ns: (leaves as u64 * 1_000).max(1_000_000),
            ..TreeSyncConfig::default()
        }
    }
}

/// A leaf's slot: one cache line, so owners of different leaves never share one.
#[derive(Debug, Default)]
struct Slot {
    /// [`Demand`] encoded: [`IDLE`], [`SATURATED`] or a thin leaf's bytes per second.
    demand: AtomicU64,
    /// The share the last computation that counted the leaf published (bytes/s,
    /// `u64::MAX` when no cap bounds it).
    share: AtomicU64,
    /// The leaf's max in force (bytes/s, `u64::MAX` for none): the tree's, until
    /// [`SharedTree::set_leaf_max`] changes it in place.
    max: AtomicU64,
    /// What the leaf applies when it turns active before a computation counts it: the
    /// tree's wake share, held to the max in force.
    wake: AtomicU64,
}

const IDLE: u64 = 0;
const SATURATED: u64 = u64::MAX;
/// No computation yet.
const NEVER: u64 = u64::MAX;

fn encode(demand: Demand) -> u64 {
    match demand {
        Demand::Idle => IDLE,
        Demand::Saturated => SATURATED,
        Demand::Thin(d) => d.clamp(1, SATURATED - 1),
    }
}

fn decode(word: u64) -> Demand {
    match word {
        IDLE => Demand::Idle,
        SATURATED => Demand::Saturated,
        d => Demand::Thin(d),
    }
}

/// A rate tree shared by the owners that run its leaves.
pub struct SharedTree {
    tree: RateTree,
    config: TreeSyncConfig,
    slots: Box<[CachePadded<Slot>]>,
    /// One bit per leaf: set while the leaf is active.
    active: Box<[AtomicU64]>,
    last_compute_ns: CachePadded<AtomicU64>,
    /// Set when a leaf turned active or idle since the last computation: the active set
    /// changed, which moves shares the most, so the next computation comes sooner.
    transition: CachePadded<AtomicBool>,
    computations: AtomicU64,
    compute: RunnerLock<Allocator>,
}

impl std::fmt::Debug for SharedTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTree")
            .field("leaves", &self.tree.leaves())
            .field("shaping_nodes", &self.tree.shaping_nodes())
            .field("config", &self.config)
            .field("computations", &self.computations())
            .finish_non_exhaustive()
    }
}

impl SharedTree {
    /// Shared state for `tree`; every leaf starts idle with its wake share.
    pub fn new(tree: RateTree, config: TreeSyncConfig) -> SharedTree {
        let slots = (0..tree.leaves() as u32)
            .map(|l| {
                let slot = Slot::default();
                let leaf = &tree.leaves[l as usize];
                slot.share.store(leaf.wake, Ordering::Relaxed);
                slot.wake.store(leaf.wake, Ordering::Relaxed);
                slot.max.store(leaf.max, Ordering::Relaxed);
                CachePadded::new(slot)
            })
            .collect();
        let active = (0..tree.leaves().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        let alloc = Allocator::new(&tree);
        SharedTree {
            tree,
            config,
            slots,
            active,
            last_compute_ns: CachePadded::new(AtomicU64::new(NEVER)),
            transition: CachePadded::new(AtomicBool::new(false)),
            computations: AtomicU64::new(0),
            compute: RunnerLock::new(alloc),
        }
    }

    /// The topology.
    pub fn tree(&self) -> &RateTree {
        &self.tree
    }

    /// The sync parameters.
    pub fn config(&self) -> TreeSyncConfig {
        self.config
    }

    /// Computations run so far.
    pub fn computations(&self) -> u64 {
        self.computations.load(Ordering::Relaxed)
    }

    /// Leaves active now (counted from the bitmap; for reports, not the data path).
    pub fn active_leaves(&self) -> usize {
        self.active
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }

    /// `leaf`'s max in force: its plan's, or what [`SharedTree::set_leaf_max`] set.
    pub fn leaf_max(&self, leaf: u32) -> Rate {
        share_rate(self.slots[leaf as usize].max.load(Ordering::Relaxed))
    }

    /// Changes `leaf`'s max in place (a plan's rate changed, nothing else): no new tree,
    /// nothing allocated, every other leaf and every owner's meter left as they are. The
    /// next computation counts the new max, and comes as soon as after a leaf turned
    /// active or idle (half an interval). A share above the new max is lowered at once,
    /// so that the leaf's owner applies it at its next sync even before that computation.
    /// A min above the new max is held to it. Any thread may call it (the control path).
    pub fn set_leaf_max(&self, leaf: u32, max: Rate) {
        let slot = &self.slots[leaf as usize];
        let max = super::cap_bps(Some(max));
        slot.max.store(max, Ordering::Relaxed);
        // The wake share stays a fair part with every leaf saturated, never above the max
        // (a raised max keeps the old wake share until a computation counts the leaf).
        let wake = self.tree.leaves[leaf as usize].wake.min(max);
        slot.wake.store(wake, Ordering::Relaxed);
        // A computation still running may publish a share from the old max once more;
        // the one the transition brings forward corrects it.
        if slot.share.load(Ordering::Relaxed) > max {
            slot.share.store(max, Ordering::Relaxed);
        }
        self.transition.store(true, Ordering::Relaxed);
    }

    /// Publishes `leaf`'s demand. Only the owner that runs the leaf may call it, once per
    /// sync. A leaf that turns idle gets its wake share back, so that it starts from a fair
    /// part, not from what it had alone, when it returns before a computation counts it.
    pub fn publish(&self, leaf: u32, demand: Demand) {
        let slot = &self.slots[leaf as usize];
        slot.demand.store(encode(demand), Ordering::Relaxed);
        let word = &self.active[leaf as usize / 64];
        let bit = 1u64 << (leaf % 64);
        // Only this owner changes this bit, so its own last change is what it reads here.
        let was_active = word.load(Ordering::Relaxed) & bit != 0;
        match (demand, was_active) {
            (Demand::Idle, true) => {
                word.fetch_and(!bit, Ordering::Release);
                self.note_transition();
                // A computation still counting the leaf may overwrite this with the share
                // of its last demand, which is no worse than before.
                slot.share
                    .store(slot.wake.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            (Demand::Saturated | Demand::Thin(_), false) => {
                word.fetch_or(bit, Ordering::Release);
                self.note_transition();
            }
            _ => {}
        }
    }

    fn note_transition(&self) {
        // Read first: the flag's line is written once per computation, not per transition.
        if !self.transition.load(Ordering::Relaxed) {
            self.transition.store(true, Ordering::Relaxed);
        }
    }

    /// The share the tree gives `leaf` now.
    pub fn share(&self, leaf: u32) -> Rate {
        share_rate(self.slots[leaf as usize].share.load(Ordering::Relaxed))
    }

    /// Computes every active leaf's share if the interval has passed since the last
    /// computation (half of it after a leaf turned active or idle) and no other owner
    /// is computing; returns whether this call computed.
    /// An owner that finds another computing leaves it a flag to compute once more, so the
    /// demands it published before this call are counted before the lock is let go.
    pub fn compute_if_due(&self, now_ns: u64) -> bool {
        let last = self.last_compute_ns.load(Ordering::Relaxed);
        let wait = if self.transition.load(Ordering::Relaxed) {
            self.config.interval_ns / 2
        } else {
            self.config.interval_ns
        };
        if last != NEVER && now_ns.saturating_sub(last) < wait {
            return false;
        }
        let Some(mut guard) = self.compute.lock_or_flag_missed() else {
            return false;
        };
        loop {
            // Stamped first: owners that come due meanwhile see it and do not flag MISSED.
            self.last_compute_ns.store(now_ns, Ordering::Relaxed);
            self.transition.store(false, Ordering::Relaxed);
            guard.with(|alloc| self.compute_locked(alloc));
            self.computations.fetch_add(1, Ordering::Relaxed);
            match guard.try_unlock() {
                Ok(()) => return true,
                Err(again) => guard = again,
            }
        }
    }

    fn compute_locked(&self, alloc: &mut Allocator) {
        let active = self.active.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                Some(w as u32 * 64 + b)
            })
        });
        let demands = active.map(|leaf| {
            let slot = &self.slots[leaf as usize];
            let word = slot.demand.load(Ordering::Relaxed);
            (leaf, decode(word), slot.max.load(Ordering::Relaxed))
        });
        alloc.allocate_with_max(&self.tree, demands, |leaf, share| {
            self.slots[leaf as usize]
                .share
                .store(share, Ordering::Relaxed);
        });
    }
}

/// The horizon of a leaf's average rate, which is its demand while thin: long enough to
/// smooth a slow leaf's packets (a 1 Mbit/s leaf sends a 500-byte packet every 4 ms) into a
/// rate, short enough to follow a change of demand within a few tens of ms.
const DEMAND_HORIZON_NS: u64 = 20_000_000;

/// The least room a thin leaf gets above its average (bytes/s): two full-size packets per
/// [`DEMAND_HORIZON_NS`], the most a slow leaf's average moves with its packets (see
/// `alloc::thin_share`).
pub(super) const MIN_ROOM_BPS: u64 = 2 * 1514 * 1_000_000_000 / DEMAND_HORIZON_NS;

/// How long a light leaf that went quiet keeps its average reserved (cake_mq's
/// `SPARSE_HORIZON_NS`, for the same reason: a sparse sender is quiet at most syncs).
const QUIET_HORIZON_NS: u64 = 100_000_000;

/// A thin leaf's rate moves only when its share moves by more than 1/`THIN_DEADBAND` of it
/// ([`LeafMeter::take_share`]).
pub const THIN_DEADBAND: u64 = 8;

/// The owner's side of one leaf: measures what the leaf delivered over each sync window,
/// publishes its demand, and hands back its share when it changed. Lives with the leaf's
/// shaper, on the owner's thread; nothing in it is shared.
#[derive(Debug, Clone)]
pub struct LeafMeter {
    leaf: u32,
    window_start_ns: u64,
    window_bytes: u64,
    /// The average rate over [`DEMAND_HORIZON_NS`] (bytes/s); 0 before the first window.
    average_bps: u64,
    last_delivery_ns: u64,
    /// Saturated at its last sync.
    busy: bool,
    /// The rate the leaf applies now.
    applied: Rate,
}

impl LeafMeter {
    /// The meter of `leaf`, which starts at its wake share at `now_ns`; the owner applies
    /// [`LeafMeter::applied`] to the leaf's shaper when it builds it.
    pub fn new(tree: &SharedTree, leaf: u32, now_ns: u64) -> LeafMeter {
        LeafMeter {
            leaf,
            window_start_ns: now_ns,
            window_bytes: 0,
            average_bps: 0,
            last_delivery_ns: now_ns,
            busy: false,
            applied: tree.share(leaf),
        }
    }

    /// The leaf's index in the tree.
    pub fn leaf(&self) -> u32 {
        self.leaf
    }

    /// The rate the leaf applies now.
    pub fn applied(&self) -> Rate {
        self.applied
    }

    /// Counts `bytes` the leaf delivered (a local add; the owner may call it per dequeue
    /// batch or once per sync with the batch total).
    pub fn delivered(&mut self, bytes: u64) {
        self.window_bytes = self.window_bytes.saturating_add(bytes);
    }

    /// Closes the window at `now_ns` and publishes the leaf's demand.
    ///
    /// * Saturated: it holds packets back (waiting packets mean it was short of rate, never
    ///   of demand, as in cake_mq's sync), or it used at least the saturation share of its
    ///   rate in the window and on average.
    /// * Thin: it delivered something, at its average rate; a leaf that was saturated and
    ///   drained counts at what this window delivered, so most of its share is lent at once.
    /// * Thin while quiet: a light leaf (on average under 7/8 of its rate, as a thin leaf
    ///   is under its headroom) keeps its average reserved for up to `QUIET_HORIZON_NS`
    ///   after its last packet, fading with the average; otherwise a quiet, empty leaf is
    ///   idle and its share is lent at the next computation.
    pub fn publish(&mut self, tree: &SharedTree, now_ns: u64, backlog_bytes: u64) -> Demand {
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        // In u64 while the products fit (below about 18 GB per window and 900 GB/s, that
        // is always): a 128-bit division is a library call, and a worker syncs thousands of
        // leaves each time. The same results either way.
        let measured = match (elapsed, self.window_bytes.checked_mul(1_000_000_000)) {
            (0, _) => 0,
            (e, Some(b)) => b / e,
            (e, None) => (u128::from(self.window_bytes) * 1_000_000_000 / u128::from(e)) as u64,
        };
        // An exponential average weighted by time, from zero: a leaf that wakes with one
        // packet in a short window has not shown a rate of one packet per window (counting
        // it so read a 0.4 Mbit/s leaf as 8 Mbit/s and saturated, after every packet).
        // A leaf that wakes with more than it can send holds it back, and is saturated.
        let weight = elapsed.min(DEMAND_HORIZON_NS);
        let sum = self
            .average_bps
            .checked_mul(DEMAND_HORIZON_NS - weight)
            .zip(measured.checked_mul(weight))
            .and_then(|(a, m)| a.checked_add(m));
        self.average_bps = match sum {
            Some(sum) => sum / DEMAND_HORIZON_NS,
            None => {
                ((u128::from(self.average_bps) * u128::from(DEMAND_HORIZON_NS - weight)
                    + u128::from(measured) * u128::from(weight))
                    / u128::from(DEMAND_HORIZON_NS)) as u64
            }
        };
        if self.window_bytes > 0 {
            self.last_delivery_ns = now_ns;
        }
        let applied = u128::from(self.applied.bytes_per_sec());
        let mark = u128::from(tree.config.saturation_percent);
        let uses_it = |rate: u64| applied > 0 && u128::from(rate) * 100 >= mark * applied;
        let demand = if backlog_bytes > 0
            || self.window_bytes > 0 && uses_it(measured) && uses_it(self.average_bps)
        {
            Demand::Saturated
        } else if self.window_bytes > 0 {
            Demand::Thin(
                if self.busy {
                    measured
                } else {
                    self.average_bps
                }
                .max(1),
            )
        } else if self.average_bps > 0
            && u128::from(self.average_bps) * 8 < applied * 7
            && now_ns.saturating_sub(self.last_delivery_ns) < QUIET_HORIZON_NS
        {
            Demand::Thin(self.average_bps)
        } else {
            self.average_bps = 0;
            Demand::Idle
        };
        self.busy = demand == Demand::Saturated;
        tree.publish(self.leaf, demand);
        self.window_start_ns = now_ns;
        self.window_bytes = 0;
        demand
    }

    /// The leaf's share if it differs from the rate applied now; the owner applies it with
    /// the shaper's rate-only `set_rate` (never a reconfigure: no tin is cleared, no cursor
    /// moves).
    ///
    /// A leaf that was not saturated at its last [`LeafMeter::publish`] keeps its rate
    /// while the share stays within [`THIN_DEADBAND`] of it: a thin leaf's share is what
    /// it used plus room ([`crate::rate_tree::Allocator`]), which moves with every packet
    /// of a slow leaf, and applying each move touches the leaf's shaper, a cold instance
    /// among thousands, at every sync (with 10 000 circuits, most of a worker). The room is
    /// at least a quarter of its rate, so the leaf neither runs short nor takes more
    /// than an eighth of its share from its siblings; a saturated leaf gets every change.
    pub fn take_share(&mut self, tree: &SharedTree) -> Option<Rate> {
        let share = tree.share(self.leaf);
        if share == self.applied {
            return None;
        }
        if !self.busy && !share.is_unlimited() && !self.applied.is_unlimited() {
            let (s, a) = (share.bytes_per_sec(), self.applied.bytes_per_sec());
            if s.abs_diff(a) <= a / THIN_DEADBAND {
                return None;
            }
        }
        self.applied = share;
        Some(share)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::TreeLeaf;
    use super::*;

    fn tree(leaves: usize) -> SharedTree {
        let leaves: Vec<TreeLeaf> = (0..leaves)
            .map(|_| TreeLeaf {
                parent: None,
                max: Rate::from_bytes_per_sec(1000),
                min: None,
            })
            .collect();
        let tree = RateTree::new(Rate::from_bytes_per_sec(1000), &[], &leaves).unwrap();
        SharedTree::new(tree, TreeSyncConfig::default())
    }

    #[test]
    fn computations_wait_for_the_interval_and_count_only_active_leaves() {
        let t = tree(130);
        assert_eq!(t.share(129).bytes_per_sec(), 7, "wake share: 1000 / 130");
        t.publish(3, Demand::Saturated);
        t.publish(129, Demand::Saturated);
        assert!(t.compute_if_due(5));
        assert_eq!(t.share(3).bytes_per_sec(), 500);
        assert_eq!(t.share(129).bytes_per_sec(), 500);
        assert!(!t.compute_if_due(5 + 999_999), "within the interval");
        // A transition brings the next computation forward to half an interval.
        t.publish(7, Demand::Thin(1));
        assert!(!t.compute_if_due(5 + 499_999));
        assert!(t.compute_if_due(5 + 500_000));
        assert_eq!(t.share(3).bytes_per_sec(), 499);
        t.publish(7, Demand::Idle);
        t.publish(129, Demand::Idle);
        assert_eq!(
            t.share(129).bytes_per_sec(),
            7,
            "an idle leaf is back to its wake share"
        );
        assert!(t.compute_if_due(5 + 500_000 + 500_000));
        assert_eq!(t.share(3).bytes_per_sec(), 1000);
        assert_eq!(t.computations(), 3);
    }

    #[test]
    fn a_meter_reads_saturated_thin_and_idle_from_what_the_leaf_did() {
        let t = tree(2);
        let mut m = LeafMeter::new(&t, 0, 0);
        assert_eq!(m.applied().bytes_per_sec(), 500);
        m.delivered(499);
        assert_eq!(m.publish(&t, 1_000_000_000, 0), Demand::Saturated);
        m.delivered(100);
        assert_eq!(m.publish(&t, 2_000_000_000, 0), Demand::Thin(100));
        m.delivered(1);
        assert_eq!(
            m.publish(&t, 3_000_000_000, 1),
            Demand::Saturated,
            "held back"
        );
        assert_eq!(m.publish(&t, 4_000_000_000, 0), Demand::Idle);
        t.publish(1, Demand::Saturated);
        m.delivered(100);
        m.publish(&t, 5_000_000_000, 0);
        assert!(t.compute_if_due(5_000_000_000));
        assert_eq!(m.take_share(&t), Some(Rate::from_bytes_per_sec(1000)));
        assert_eq!(m.take_share(&t), None);
        // Quiet for one short window: a light leaf keeps its (fading) average reserved.
        assert_eq!(m.publish(&t, 5_001_000_000, 0), Demand::Thin(95));
    }
}
