//! [`SharedRate`]: the one global rate of a multi-queue shaper and each queue's published
//! activity, plus the pure share computation every queue runs at its sync (docs/design.md,
//! "cake_mq").
//!
//! There is no lock and no shared counter. Each queue writes only its own cache-line-padded
//! [`QueueActivity`] (once per run or per sync, never per packet) and reads its siblings' with
//! relaxed loads; the result is only eventually consistent, exactly as in Linux's cake_mq. This
//! module does not touch any qdisc: [`super::TxQueue`] applies the share with `set_rate`.

use crossbeam_utils::CachePadded;

use super::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use crate::rate_tree::water::{self, Fill, Point, Want};
use crate::Rate;

/// How the global rate is split among the active queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SyncPolicy {
    /// Linux cake_mq: `rate / active queues`, where a sibling is active when it has a backlog
    /// or delivered a packet since this queue's last sync. Under unequal demand the aggregate
    /// falls short of the configured rate.
    Equal,
    /// Max-min fair (the default): a queue that uses clearly less than its share keeps what it
    /// uses (and never less than the equal share, so it can grow), and the rest is split among
    /// the saturated queues, so the aggregate holds the configured rate under unequal demand.
    #[default]
    WorkConserving,
}

impl SyncPolicy {
    fn to_u32(self) -> u32 {
        match self {
            SyncPolicy::Equal => 0,
            SyncPolicy::WorkConserving => 1,
        }
    }

    fn from_u32(value: u32) -> SyncPolicy {
        if value == 0 {
            SyncPolicy::Equal
        } else {
            SyncPolicy::WorkConserving
        }
    }
}

/// Rate-sync parameters shared by all queues of one [`SharedRate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncConfig {
    /// How the rate is split.
    pub policy: SyncPolicy,
    /// Least time between two syncs of one queue (Linux: 200 µs, fixed).
    pub sync_interval_ns: u64,
    /// A queue counts as saturated when it delivered at least this share (in percent) of its
    /// current rate during its last sync window; below it, its demand is what it delivered.
    pub saturation_percent: u32,
}

impl Default for SyncConfig {
    fn default() -> SyncConfig {
        SyncConfig {
            policy: SyncPolicy::WorkConserving,
            sync_interval_ns: 200_000,
            saturation_percent: 90,
        }
    }
}

/// What one queue publishes about itself. Only that queue's runner writes it.
#[derive(Debug, Default)]
pub(crate) struct QueueActivity {
    /// Bytes queued in the qdisc at the end of the last run (also the producers' "not empty"
    /// hint for the bypass).
    pub(crate) backlog_bytes: AtomicU64,
    /// When the queue last delivered a packet (ns).
    pub(crate) last_active_ns: AtomicU64,
    /// Delivered rate over the last sync window, bytes per second.
    pub(crate) measured_bps: AtomicU64,
    /// Whether the queue used (nearly) all of its share in the last window.
    pub(crate) saturated: AtomicBool,
    /// The queue's long-run rate when it was thin at its last sync and uses under half of its
    /// share (a sparse or light sender), which siblings keep reserved while it is quiet (see
    /// [`SPARSE_HORIZON_NS`]); 0 otherwise.
    pub(crate) sparse_bps: AtomicU64,
    /// The share the queue applies now, bytes per second (0 = unlimited).
    pub(crate) share_bps: AtomicU64,
}

/// The global rate and the per-queue activity of one multi-queue shaper.
#[derive(Debug)]
pub struct SharedRate {
    global: CachePadded<Global>,
    queues: Box<[CachePadded<QueueActivity>]>,
}

#[derive(Debug)]
struct Global {
    rate_bps: AtomicU64,
    /// Bumped by every rate or sync change so that queues resync at their next run.
    generation: AtomicU64,
    policy: AtomicU32,
    sync_interval_ns: AtomicU64,
    saturation_percent: AtomicU32,
}

/// A snapshot of one queue's published activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivitySnapshot {
    /// Bytes queued at the end of its last run.
    pub backlog_bytes: u64,
    /// When it last delivered a packet (ns).
    pub last_active_ns: u64,
    /// Delivered rate over its last sync window.
    pub measured: Rate,
    /// Whether it used (nearly) all of its share in that window.
    pub saturated: bool,
    /// The share it applies now.
    pub share: Rate,
}

impl SharedRate {
    /// Shared state for `queues` queues (at least one) splitting `rate`.
    pub fn new(queues: usize, rate: Rate, sync: SyncConfig) -> SharedRate {
        let queues = (0..queues.max(1))
            .map(|_| CachePadded::new(QueueActivity::default()))
            .collect();
        SharedRate {
            global: CachePadded::new(Global {
                rate_bps: AtomicU64::new(rate.bytes_per_sec()),
                generation: AtomicU64::new(0),
                policy: AtomicU32::new(sync.policy.to_u32()),
                sync_interval_ns: AtomicU64::new(sync.sync_interval_ns),
                saturation_percent: AtomicU32::new(sync.saturation_percent.min(100)),
            }),
            queues,
        }
    }

    /// Number of queues sharing the rate.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The configured global rate.
    pub fn rate(&self) -> Rate {
        Rate::from_bytes_per_sec(self.global.rate_bps.load(Ordering::Relaxed))
    }

    /// Changes the global rate; every queue applies its new share at its next run.
    pub fn set_rate(&self, rate: Rate) {
        self.global
            .rate_bps
            .store(rate.bytes_per_sec(), Ordering::Relaxed);
        self.global.generation.fetch_add(1, Ordering::Release);
    }

    /// The sync parameters in force.
    pub fn sync_config(&self) -> SyncConfig {
        SyncConfig {
            policy: SyncPolicy::from_u32(self.global.policy.load(Ordering::Relaxed)),
            sync_interval_ns: self.global.sync_interval_ns.load(Ordering::Relaxed),
            saturation_percent: self.global.saturation_percent.load(Ordering::Relaxed),
        }
    }

    /// Changes the sync parameters; every queue resyncs at its next run.
    pub fn set_sync_config(&self, sync: SyncConfig) {
        let g = &self.global;
        g.policy.store(sync.policy.to_u32(), Ordering::Relaxed);
        g.sync_interval_ns
            .store(sync.sync_interval_ns, Ordering::Relaxed);
        g.saturation_percent
            .store(sync.saturation_percent.min(100), Ordering::Relaxed);
        g.generation.fetch_add(1, Ordering::Release);
    }

    /// What queue `index` last published, or `None` for an index out of range.
    pub fn activity(&self, index: usize) -> Option<ActivitySnapshot> {
        let a = self.queues.get(index)?;
        Some(ActivitySnapshot {
            backlog_bytes: a.backlog_bytes.load(Ordering::Relaxed),
            last_active_ns: a.last_active_ns.load(Ordering::Relaxed),
            measured: Rate::from_bytes_per_sec(a.measured_bps.load(Ordering::Relaxed)),
            saturated: a.saturated.load(Ordering::Relaxed),
            share: Rate::from_bytes_per_sec(a.share_bps.load(Ordering::Relaxed)),
        })
    }

    pub(crate) fn generation(&self) -> u64 {
        self.global.generation.load(Ordering::Acquire)
    }

    pub(crate) fn sync_interval_ns(&self) -> u64 {
        self.global.sync_interval_ns.load(Ordering::Relaxed)
    }

    pub(crate) fn queue(&self, index: usize) -> &QueueActivity {
        &self.queues[index]
    }

    /// Computes queue `me`'s share at `now_ns`. `last_check_ns` is when `me` last synced;
    /// `my_demand_bps` is `None` when `me` is saturated, else what it delivered;
    /// `my_share_before` is the share it applied until now (`u64::MAX` on a first sync,
    /// which leaves a thin queue's room unbounded). Returns the
    /// share (bytes/s, 0 = unlimited) and the number of active queues, `me` included.
    pub(crate) fn compute_share(
        &self,
        me: usize,
        now_ns: u64,
        last_check_ns: u64,
        my_demand_bps: Option<u64>,
        my_share_before: u64,
    ) -> (u64, u32) {
        let rate = self.global.rate_bps.load(Ordering::Relaxed);
        let policy = SyncPolicy::from_u32(self.global.policy.load(Ordering::Relaxed));
        let mut demands = DemandSet::default();
        demands.push(my_demand_bps);
        for (i, q) in self.queues.iter().enumerate() {
            if i == me {
                continue;
            }
            // cake_mq's test (sch_cake.c cake_dequeue): a sibling is active if it has a
            // backlog or delivered something since my last check.
            let backlog = q.backlog_bytes.load(Ordering::Relaxed);
            let last_active = q.last_active_ns.load(Ordering::Relaxed);
            let saturated = q.saturated.load(Ordering::Relaxed);
            if backlog == 0 && last_active <= last_check_ns {
                if policy == SyncPolicy::WorkConserving && !saturated {
                    if let Some(d) = sparse_demand(q, now_ns, last_active) {
                        demands.reserved = demands.reserved.saturating_add(d);
                    }
                }
                continue;
            }
            // A light sender counts with its long-run rate whether it is sending right now or
            // not (its bursts above that rate are paid back by its quiet stretches); others
            // with what they delivered in their last window.
            let demand = if saturated {
                None
            } else {
                match q.sparse_bps.load(Ordering::Relaxed) {
                    0 => Some(q.measured_bps.load(Ordering::Relaxed)),
                    light => Some(light),
                }
            };
            demands.push(demand);
        }
        let active = demands.count;
        if rate == 0 {
            return (0, active);
        }
        let equal = (rate / u64::from(active)).max(1);
        let share = match policy {
            SyncPolicy::Equal => equal,
            SyncPolicy::WorkConserving => {
                let share = work_conserving_share(rate, my_demand_bps, &demands);
                match my_demand_bps {
                    // Saturated queues get the fair level; alone, there is nobody to
                    // overshoot against.
                    None => share,
                    Some(_) if active == 1 => share,
                    // A thin queue gets room to grow, but only a bounded amount: its growth
                    // before the saturated siblings notice is what overshoots the global rate.
                    // The room shrinks by 1/32 per sync, not at once, so that a bursty
                    // queue's quiet windows do not leave its next burst held back.
                    Some(d) => {
                        let room = d.saturating_add(d.max(rate / (8 * u64::from(active))));
                        share.min(room.max(my_share_before - my_share_before / 32))
                    }
                }
            }
        };
        (share.max(1), active)
    }
}

/// How long a sparse queue that went quiet keeps a reservation (CAKE's default interval).
///
/// cake_mq's activity test only sees queues that sent something since the last check, so a
/// sparse sender (a VoIP or game flow, one packet every few ms, far apart compared with the
/// 200 µs sync) looks idle at nearly every sync: the busy queues take the whole rate and the
/// sparse packets go out on top of it (8 queues with a 2 % flow each overshot the global
/// rate by 6 % in the latency lab; Linux's equal split has the same flaw). Under the
/// work-conserving policy a queue that was thin at its last sync and whose long-run rate is
/// under half of its share publishes that rate ([`QueueActivity::sparse_bps`]), and its
/// siblings keep it reserved after its last packet, fading linearly to nothing over this
/// horizon. A queue that was busy keeps nothing: its share is released at the next sync, as
/// in cake_mq.
pub(crate) const SPARSE_HORIZON_NS: u64 = 100_000_000;

/// The reservation of a quiet, sparse sibling (see [`SPARSE_HORIZON_NS`]); `None` when it
/// is not sparse or was last active longer ago than the horizon.
fn sparse_demand(q: &QueueActivity, now_ns: u64, last_active: u64) -> Option<u64> {
    let age = now_ns.checked_sub(last_active)?;
    if age >= SPARSE_HORIZON_NS {
        return None;
    }
    let sparse = q.sparse_bps.load(Ordering::Relaxed);
    let left = SPARSE_HORIZON_NS - age;
    let demand = (u128::from(sparse) * u128::from(left) / u128::from(SPARSE_HORIZON_NS)) as u64;
    (demand > 0).then_some(demand)
}

/// Up to [`MAX_TRACKED`] finite demands and a count of unbounded ones, without allocating.
struct DemandSet {
    finite: [u64; MAX_TRACKED],
    finite_len: usize,
    unbounded: u32,
    count: u32,
    /// Kept for quiet sparse queues: taken off the rate before the split, which they take
    /// no part in (they are not active).
    reserved: u64,
}

/// Finite demands beyond this many are treated as unbounded (a safe over-estimate).
const MAX_TRACKED: usize = 64;

impl Default for DemandSet {
    fn default() -> DemandSet {
        DemandSet {
            finite: [0; MAX_TRACKED],
            finite_len: 0,
            unbounded: 0,
            count: 0,
            reserved: 0,
        }
    }
}

impl DemandSet {
    fn push(&mut self, demand: Option<u64>) {
        self.count += 1;
        match demand {
            Some(d) if self.finite_len < MAX_TRACKED => {
                self.finite[self.finite_len] = d;
                self.finite_len += 1;
            }
            _ => self.unbounded += 1,
        }
    }
}

/// Max-min fair share of `rate` for the queue whose demand is `mine` (`None` = saturated),
/// given all active demands (mine included). A queue below the fair level keeps what it uses;
/// the fair level is what the saturated queues get. A thin queue gets at least the equal share
/// (never worse than Linux's split, and room to grow until its next sync) and at most the
/// fair level.
fn work_conserving_share(rate: u64, mine: Option<u64>, demands: &DemandSet) -> u64 {
    // Never below half the rate for the active queues: a reservation is an estimate.
    let rate = rate.saturating_sub(demands.reserved).max(rate / 2);
    let finite = &demands.finite[..demands.finite_len];
    let unbounded = u64::from(demands.count) - finite.len() as u64;
    // The one-level case of the tree's split (docs/design.md, "Shared rates: from cake_mq
    // to a tree"): no floors, each thin queue capped at what it used.
    let wants = finite.iter().map(|&d| Want { min: 0, max: d });
    let mut points = [Point::default(); MAX_TRACKED];
    let fill = water::fill(rate, wants, unbounded, &mut points);
    let equal = rate / u64::from(demands.count.max(1));
    match (fill, mine) {
        // Everyone is below its fair level: the slack goes to whoever grows first.
        (Fill::Met { slack }, Some(d)) => slack.saturating_add(d).max(equal),
        (Fill::Met { slack }, None) => slack.max(equal),
        // Saturated queues get the fair level, and so does a thin queue above it; a thin
        // queue below it keeps at least the equal share (never worse than Linux's split,
        // and room to grow until its next sync).
        (Fill::Level(level), _) => level.max(equal),
        // Without floors the mins never exceed the rate.
        (Fill::Scaled { .. }, _) => equal,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn set(demands: &[Option<u64>]) -> DemandSet {
        let mut s = DemandSet::default();
        for &d in demands {
            s.push(d);
        }
        s
    }

    #[test]
    fn saturated_queues_split_what_thin_queues_leave() {
        let d = set(&[None, Some(50), None]);
        assert_eq!(work_conserving_share(1000, None, &d), 475);
    }

    #[test]
    fn thin_queue_keeps_at_least_the_equal_share() {
        let d = set(&[Some(50), None]);
        assert_eq!(work_conserving_share(1000, Some(50), &d), 950);
        let d = set(&[Some(50), None, None, None]);
        assert!(work_conserving_share(1000, Some(50), &d) >= 250);
    }

    #[test]
    fn equal_demand_gives_equal_shares() {
        for n in 1..=8 {
            let d = set(&vec![None; n]);
            assert_eq!(work_conserving_share(800, None, &d), 800 / n as u64);
        }
    }

    #[test]
    fn idle_siblings_do_not_count_as_active() {
        let shared = SharedRate::new(3, Rate::from_bytes_per_sec(900), SyncConfig::default());
        shared.queue(1).last_active_ns.store(100, Ordering::Relaxed);
        shared.queue(2).last_active_ns.store(500, Ordering::Relaxed);
        shared.queue(2).saturated.store(true, Ordering::Relaxed);
        let (share, active) = shared.compute_share(0, 200, 200, None, 0);
        assert_eq!(active, 2);
        assert_eq!(share, 450);
    }
}
