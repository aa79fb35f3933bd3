//! The circuit shaper's side of a rate tree (docs/design.md, "Shared rates: from cake_mq to
//! a tree"): each circuit is a leaf (its slot is its leaf index); at every half interval
//! the shaper measures its live circuits, publishes their demands, lets the tree compute
//! if due, and applies each circuit's share to its CAKE with the rate-only `set_rate`.
//!
//! A slot must be run by one shaper only (the one TX queue its circuit is steered to): a
//! leaf's demand has one writer. A circuit whose instance was released publishes idle at
//! the next sync and leaves the tree's active set; a circuit that gets an instance joins at
//! the next sync and, until then (at most half an interval), runs at the share in its
//! leaf's slot: its wake share when it was idle, its fair part with every leaf saturated.

use std::sync::Arc;

use super::{CircuitShaper, CircuitShaperConfig, Sched, DEFAULT_ID};
use crate::rate_tree::{
    Demand, LeafMeter, RateTree, SharedTree, TreeError, TreeLeaf, TreeNode, TreeSyncConfig,
};
use crate::{Packet, Qdisc, Rate};

/// A [`SharedTree`] in a [`CircuitShaperConfig`]: configs compare equal when they share
/// the same tree (the tree holds atomics, which have no equality of their own).
#[derive(Debug, Clone)]
pub struct TreeRef(pub Arc<SharedTree>);

impl PartialEq for TreeRef {
    fn eq(&self, other: &TreeRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TreeRef {}

impl TreeRef {
    /// The tree of one direction: `nodes` (parents before children, each with this
    /// direction's cap, as `circuits::Node` has them) under the link rate as root cap, and
    /// one leaf per slot of `config` (its plan's rate as max, its min and parent node).
    /// Every TX queue's shaper of that direction gets a config carrying the same tree.
    pub fn build(
        config: &CircuitShaperConfig,
        nodes: &[TreeNode],
        sync: TreeSyncConfig,
    ) -> Result<TreeRef, TreeError> {
        let tree = RateTree::new(config.link.rate, nodes, &leaves_of(config))?;
        Ok(TreeRef(Arc::new(SharedTree::new(tree, sync))))
    }

    /// The leaves whose max differs between this tree and the one [`TreeRef::build`] would
    /// build from `config`, `nodes` and `sync`, with their new max, when nothing else
    /// differs (the same link rate, nodes, parents and mins: a plan's rate changed, by
    /// `ctl circuit set` or a reload); `None` when something else does, and a tree must
    /// be built. Reads and allocates nothing of the live tree's; changes nothing.
    pub fn max_changes(
        &self,
        config: &CircuitShaperConfig,
        nodes: &[TreeNode],
        sync: TreeSyncConfig,
    ) -> Option<Vec<(u32, Rate)>> {
        let shared = &self.0;
        let leaves = leaves_of(config);
        if shared.config() != sync
            || !shared
                .tree()
                .same_but_maxes(config.link.rate, nodes, &leaves)
        {
            return None;
        }
        Some(
            leaves
                .iter()
                .enumerate()
                .filter(|(i, l)| shared.leaf_max(*i as u32) != l.max)
                .map(|(i, l)| (i as u32, l.max))
                .collect(),
        )
    }

    /// Applies [`TreeRef::max_changes`] in place ([`SharedTree::set_leaf_max`]): every
    /// shaper that shares this tree keeps it, with its meters; each changed leaf's owner
    /// applies its new share with the rate-only `set_rate` at its next sync.
    pub fn set_maxes(&self, changes: &[(u32, Rate)]) {
        for &(leaf, max) in changes {
            self.0.set_leaf_max(leaf, max);
        }
    }
}

/// One leaf per slot of `config`: its plan's rate as max, its min (dropped when above
/// the max) and parent node.
fn leaves_of(config: &CircuitShaperConfig) -> Vec<TreeLeaf> {
    config
        .plans
        .iter()
        .map(|plan| match plan {
            Some(p) => TreeLeaf {
                parent: p.parent,
                max: p.rate,
                min: p.min.filter(|m| p.rate.is_unlimited() || *m <= p.rate),
            },
            None => TreeLeaf {
                parent: None,
                max: Rate::UNLIMITED,
                min: None,
            },
        })
        .collect()
}

/// The shaper's link to its tree: a meter per member slot and when the next sync is due.
#[derive(Debug)]
pub(super) struct TreeLink {
    shared: Arc<SharedTree>,
    /// Per slot: its meter and its sent and dropped bytes at the last sync, while it is a
    /// member.
    meters: Vec<Option<(LeafMeter, u64, u64)>>,
    /// The slots with a meter, in no particular order.
    members: Vec<u32>,
    next_sync_ns: u64,
    /// Syncs run and member leaves synced (published and applied), for reports.
    syncs: u64,
    leaf_syncs: u64,
    /// An instance was created since the last sync: the next one looks for joiners (a
    /// walk over every live instance, skipped otherwise).
    pub(super) join_pending: bool,
    /// The tree's computation count when this shaper last read its members' shares: no
    /// computation since, no share to read (a new max lowers a share in place, but also
    /// brings the next computation forward).
    read_at: u64,
}

impl TreeLink {
    /// The link for `config`'s tree, keeping `old`'s meters when the tree is the same.
    pub(super) fn for_config(
        config: &CircuitShaperConfig,
        old: Option<TreeLink>,
    ) -> Option<TreeLink> {
        let tree = config.rate_tree.as_ref()?;
        if let Some(old) = old.filter(|o| Arc::ptr_eq(&o.shared, &tree.0)) {
            return Some(old);
        }
        let leaves = tree.0.tree().leaves();
        Some(TreeLink {
            shared: tree.0.clone(),
            meters: vec![None; leaves],
            members: Vec::with_capacity(leaves),
            next_sync_ns: 0,
            syncs: 0,
            leaf_syncs: 0,
            join_pending: true,
            read_at: u64::MAX,
        })
    }
}

/// What a shaper's side of its tree did, for reports ([`CircuitShaper::tree_counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeCounters {
    /// Computations of the whole tree so far, by any shaper that shares it.
    pub computations: u64,
    /// This shaper's syncs (each publishes its live circuits' demands and applies their
    /// shares).
    pub syncs: u64,
    /// Circuits this shaper synced, summed over its syncs.
    pub leaf_syncs: u64,
    /// Leaves of the whole tree active now.
    pub active_leaves: u64,
}

impl<P> CircuitShaper<P> {
    /// What this shaper's side of its node tree did; `None` without a tree.
    pub fn tree_counters(&self) -> Option<TreeCounters> {
        let link = self.tree.as_ref()?;
        Some(TreeCounters {
            computations: link.shared.computations(),
            syncs: link.syncs,
            leaf_syncs: link.leaf_syncs,
            active_leaves: link.shared.active_leaves() as u64,
        })
    }
}

impl<P: Packet> CircuitShaper<P> {
    /// The rate a new instance of `id` starts at under the tree: the rate its meter has
    /// applied while it is a member (so that instance and meter agree, and the sync need
    /// not read the instance to tell), else the share in its leaf's slot (its wake share
    /// when it was idle); `None` without a tree or for the default class.
    pub(super) fn tree_wake_rate(&self, id: u32) -> Option<Rate> {
        let link = self.tree.as_ref()?;
        let slot = id.checked_sub(1)?;
        match link.meters.get(slot as usize)? {
            Some((meter, _, _)) => Some(meter.applied()),
            None => Some(link.shared.share(slot)),
        }
    }

    /// Syncs the live circuits with the tree when half an interval has passed (see the
    /// module docs). Called at the top of every dequeue; a compare when not due.
    #[inline]
    pub(super) fn sync_tree(&mut self, now: u64) {
        match &self.tree {
            Some(link) if now >= link.next_sync_ns => self.sync_tree_now(now),
            _ => {}
        }
    }

    /// One sync. It reads only the shaper's compact per-slot records and the meters, never
    /// a circuit's CAKE instance, except to set the rate of one whose share changed: with
    /// ten thousand live circuits each instance is a cold line in a gigabyte of them, and
    /// reading two words of each at every sync took 90 % of a worker (`perf record`,
    /// `scripts/bench-circuits-tree`). So a member's instance always runs at its meter's
    /// applied rate: set when it joins or is created (`tree_wake_rate`), kept by a
    /// reconfigure (`retune_keeping_rate`), and changed here only with the meter's.
    #[inline(never)]
    fn sync_tree_now(&mut self, now: u64) {
        let Some(mut link) = self.tree.take() else {
            return;
        };
        let shared = link.shared.clone();
        link.next_sync_ns = now + shared.config().interval_ns / 2;
        // Circuits with an instance join, the instance at the meter's rate.
        let joiners = if link.join_pending {
            self.live.len()
        } else {
            0
        };
        let joined = link.join_pending;
        link.join_pending = false;
        for idx in 0..joiners {
            let owner = self.live[idx];
            let slot = owner.wrapping_sub(1);
            if owner == DEFAULT_ID || slot as usize >= link.meters.len() {
                continue;
            }
            let entry = &mut link.meters[slot as usize];
            if entry.is_none() {
                let counters = &self.slots[owner as usize].counters;
                let (sent, dropped) = (counters.sent_bytes, counters.dropped_bytes);
                let meter = LeafMeter::new(&shared, slot, now);
                let applied = meter.applied();
                *entry = Some((meter, sent, dropped));
                link.members.push(slot);
                let rate = self.slots[owner as usize]
                    .cake
                    .as_deref()
                    .map(|c| c.current_rate());
                if rate.is_some_and(|r| r != applied) {
                    self.set_share(owner, applied, now);
                }
            }
        }
        // Every member publishes; one that is idle without an instance leaves. What the
        // meter asks of the backlog is whether the leaf's shaper held packets back for
        // want of rate: whether the circuit waits in the timer wheel for its own shaper.
        // Packets on the ready ring wait only for their turn (with a thousand circuits
        // served per run, nearly every one has a packet there at a sync): counted as held
        // back, they flipped thin circuits to saturated and back at every sync. But a
        // circuit that its shaper released onto the ring (`Released`) waited for rate
        // before it waited for its turn: counted as thin there, a slow circuit at overload
        // (a packet every 80 ms) read as thin at most syncs while a worker was busy, and
        // its share moved to its siblings and back. A circuit that dropped packets since
        // the last sync (its AQM or the shared limit) was short of rate too.
        let mut i = 0;
        while i < link.members.len() {
            let slot = link.members[i];
            let state = &self.slots[slot as usize + 1];
            let (meter, last_sent, last_dropped) = link.meters[slot as usize]
                .as_mut()
                .expect("members have meters");
            let dropped = state.counters.dropped_bytes != *last_dropped;
            let held_back =
                u64::from(matches!(state.sched, Sched::Held | Sched::Released) || dropped);
            meter.delivered(state.counters.sent_bytes.saturating_sub(*last_sent));
            *last_sent = state.counters.sent_bytes;
            *last_dropped = state.counters.dropped_bytes;
            let demand = meter.publish(&shared, now, held_back);
            if demand == Demand::Idle && state.cake.is_none() {
                link.meters[slot as usize] = None;
                link.members.swap_remove(i);
            } else {
                i += 1;
            }
        }
        link.syncs += 1;
        link.leaf_syncs += link.members.len() as u64;
        shared.compute_if_due(now);
        // Each member whose share changed runs at it (one without an instance starts at
        // it when it gets one). The count is read first: a computation that ends while
        // the shares are read counts as unread.
        let computed = shared.computations();
        let members: &[u32] = if computed == link.read_at && !joined {
            &[]
        } else {
            &link.members
        };
        link.read_at = computed;
        for &slot in members {
            let (meter, _, _) = link.meters[slot as usize]
                .as_mut()
                .expect("members have meters");
            if let Some(share) = meter.take_share(&shared) {
                if self.slots[slot as usize + 1].cake.is_some() {
                    self.set_share(slot + 1, share, now);
                }
            }
        }
        self.tree = Some(link);
    }

    /// Sets `id`'s instance to `share` through its rate-only path (also a share equal to
    /// its configured rate, its plan's max: a retune from the configured options to the
    /// same options with that rate would see no change at all).
    fn set_share(&mut self, id: u32, share: Rate, now: u64) {
        let Some(cake) = self.slots[id as usize].cake.as_deref_mut() else {
            return;
        };
        cake.set_rate(share);
        let wake = cake.next_wakeup();
        self.reschedule(id, wake, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit::CircuitPlan;
    use crate::testing::{udp_meta, TestPacket};
    use crate::{Dequeue, PacketMeta};

    const MS: u64 = 1_000_000;
    const MBIT: u64 = 1_000_000;

    #[test]
    fn a_node_cap_holds_its_circuits_and_the_rest_goes_to_their_cousins() {
        // Link 100 Mbit/s; node 0 capped at 30 over circuits 0 and 1 (plans 50), circuit 2
        // (plan 100) under the link. Without the tree the DRR would give each a third.
        let plan = |mbit: u64, parent: Option<u32>| {
            let mut p = CircuitPlan::new(Rate::from_bits_per_sec(mbit * MBIT));
            p.parent = parent;
            Some(p)
        };
        let mut config = CircuitShaperConfig {
            plans: Arc::from(vec![plan(50, Some(0)), plan(50, Some(0)), plan(100, None)]),
            ..CircuitShaperConfig::default()
        };
        config.link.rate = Rate::from_bits_per_sec(100 * MBIT);
        let node = TreeNode {
            parent: None,
            cap: Some(Rate::from_bits_per_sec(30 * MBIT)),
            is_virtual: false,
        };
        let tree = TreeRef::build(&config, &[node], TreeSyncConfig::default()).unwrap();
        config.rate_tree = Some(tree);
        let mut q: CircuitShaper<TestPacket> = CircuitShaper::new(&config).unwrap();
        let meta = |slot: u32| PacketMeta {
            circuit: Some(slot),
            ..udp_meta(slot, 1, slot, 0)
        };
        let mut sent = [0u64; 3];
        let mut seq = 0;
        let mut now = 0;
        while now < 1_000 * MS {
            for slot in 0..3u32 {
                while q.instance(slot).map_or(0, |c| c.len()) < 8 {
                    q.enqueue(now, TestPacket::new(1000, slot, seq), &meta(slot));
                    seq += 1;
                }
            }
            loop {
                match q.dequeue(now) {
                    Dequeue::Packet(p) if now >= 200 * MS => sent[p.flow as usize] += 1000,
                    Dequeue::Packet(_) => {}
                    _ => break,
                }
            }
            now += 50_000;
        }
        let mbit = |bytes: u64| bytes as f64 * 8.0 / 0.8 / MBIT as f64;
        let got = sent.map(mbit);
        for (g, want) in got.iter().zip([15.0, 15.0, 70.0]) {
            assert!((g / want - 1.0).abs() < 0.02, "delivered {got:?} Mbit/s");
        }
        q.check_invariants().unwrap();
    }

    /// Link 100 Mbit/s; node 0 capped at 30 over circuits 0 and 1 (plans 50), circuit 2
    /// (plan `c2` Mbit/s) under the link.
    /// Keeps circuits `0..senders` eight 1000-byte packets deep and sends whatever is due,
    /// every 50 us until `until`; `seq` numbers the packets.
    fn saturate(
        q: &mut CircuitShaper<TestPacket>,
        senders: u32,
        until: u64,
        now: &mut u64,
        seq: &mut u64,
    ) {
        while *now < until {
            for slot in 0..senders {
                while q.instance(slot).map_or(0, |c| c.len()) < 8 {
                    let meta = PacketMeta {
                        circuit: Some(slot),
                        ..udp_meta(slot, 1, slot, 0)
                    };
                    q.enqueue(*now, TestPacket::new(1000, slot, *seq), &meta);
                    *seq += 1;
                }
            }
            while let Dequeue::Packet(_) = q.dequeue(*now) {}
            *now += 50_000;
        }
    }

    fn three_circuits(c2: u64) -> (CircuitShaperConfig, [TreeNode; 1]) {
        let plan = |mbit: u64, parent: Option<u32>| {
            let mut p = CircuitPlan::new(Rate::from_bits_per_sec(mbit * MBIT));
            p.parent = parent;
            Some(p)
        };
        let mut config = CircuitShaperConfig {
            plans: Arc::from(vec![plan(50, Some(0)), plan(50, Some(0)), plan(c2, None)]),
            ..CircuitShaperConfig::default()
        };
        config.link.rate = Rate::from_bits_per_sec(100 * MBIT);
        let node = TreeNode {
            parent: None,
            cap: Some(Rate::from_bits_per_sec(30 * MBIT)),
            is_virtual: false,
        };
        (config, [node])
    }

    #[test]
    fn a_plan_max_changes_in_place_without_a_new_tree_or_a_disturbed_queue() {
        let sync = TreeSyncConfig::default();
        let (mut config, nodes) = three_circuits(100);
        let tree = TreeRef::build(&config, &nodes, sync).unwrap();
        config.rate_tree = Some(tree.clone());
        let mut q: CircuitShaper<TestPacket> = CircuitShaper::new(&config).unwrap();
        let (mut seq, mut now) = (0, 0);
        saturate(&mut q, 3, 100 * MS, &mut now, &mut seq);
        let mbit = |r: Rate| r.bits_per_sec() / MBIT;
        let rate_of = |q: &CircuitShaper<TestPacket>, slot: u32| {
            mbit(q.instance(slot).unwrap().current_rate())
        };
        assert_eq!(
            rate_of(&q, 2),
            70,
            "circuit 2 runs at its share, not its plan"
        );
        // Circuit 2's plan: 100 -> 40 Mbit/s, nothing else. Only its max differs.
        let (mut lower, _) = three_circuits(40);
        let changes = tree.max_changes(&lower, &nodes, sync).expect("in place");
        assert_eq!(changes, [(2, Rate::from_bits_per_sec(40 * MBIT))]);
        let (mut capped, _) = three_circuits(100);
        capped.link.rate = Rate::from_bits_per_sec(90 * MBIT);
        assert_eq!(
            tree.max_changes(&capped, &nodes, sync),
            None,
            "a link rate is a new tree"
        );
        let other_cap = [TreeNode {
            cap: Some(Rate::from_bits_per_sec(20 * MBIT)),
            ..nodes[0]
        }];
        assert_eq!(
            tree.max_changes(&lower, &other_cap, sync),
            None,
            "a node cap is a new tree"
        );

        let queues = |q: &CircuitShaper<TestPacket>| {
            (0..3)
                .map(|s| {
                    let c = q.instance(s).unwrap();
                    (
                        c.len(),
                        c.backlog_bytes(),
                        c.cursors(),
                        mbit(c.current_rate()),
                    )
                })
                .collect::<Vec<_>>()
        };
        let before = (queues(&q), q.len(), q.backlog_bytes());
        let counters = q.tree_counters().unwrap();
        tree.set_maxes(&changes);
        lower.rate_tree = Some(tree.clone());
        q.reconfigure(&lower).unwrap();
        // No new tree, the shaper's link to it (meters, counters) kept; nothing queued
        // moved, no cursor moved, and no rate changed yet (not even to the plan's 40).
        assert!(Arc::ptr_eq(
            &q.config().rate_tree.as_ref().unwrap().0,
            &tree.0
        ));
        assert_eq!(q.tree_counters().unwrap(), counters);
        assert_eq!((queues(&q), q.len(), q.backlog_bytes()), before);
        q.check_invariants().unwrap();
        // The next sync (half an interval on) applies the new share through set_rate.
        let next = now + sync.interval_ns / 2;
        q.dequeue(next);
        assert_eq!(rate_of(&q, 2), 40, "within one sync");
        assert_eq!(q.tree_counters().unwrap().syncs, counters.syncs + 1);
        // What circuit 2 leaves, circuits 0 and 1 cannot take (their node holds them at 30):
        // their shares stay.
        assert_eq!((rate_of(&q, 0), rate_of(&q, 1)), (15, 15));
        now = next;
        saturate(&mut q, 3, now + 200 * MS, &mut now, &mut seq);
        // Raised again: the share follows at the sync that computes next.
        let (mut higher, _) = three_circuits(100);
        let changes = tree.max_changes(&higher, &nodes, sync).unwrap();
        tree.set_maxes(&changes);
        higher.rate_tree = Some(tree.clone());
        q.reconfigure(&higher).unwrap();
        assert_eq!(rate_of(&q, 2), 40);
        q.dequeue(now + sync.interval_ns / 2);
        assert_eq!(rate_of(&q, 2), 70);
        q.check_invariants().unwrap();
    }

    #[test]
    fn a_share_back_at_the_plans_max_is_applied() {
        // Node 0 capped at 30 over circuits 0 and 1, both with plans of 20: 15 each while
        // both send; once circuit 1 goes quiet, circuit 0's share is its plan's 20, which
        // is also its instance's configured rate.
        let sync = TreeSyncConfig::default();
        let mut plan = CircuitPlan::new(Rate::from_bits_per_sec(20 * MBIT));
        plan.parent = Some(0);
        let mut config = CircuitShaperConfig {
            plans: Arc::from(vec![Some(plan.clone()), Some(plan)]),
            ..CircuitShaperConfig::default()
        };
        config.link.rate = Rate::from_bits_per_sec(100 * MBIT);
        let node = TreeNode {
            parent: None,
            cap: Some(Rate::from_bits_per_sec(30 * MBIT)),
            is_virtual: false,
        };
        config.rate_tree = Some(TreeRef::build(&config, &[node], sync).unwrap());
        let mut q: CircuitShaper<TestPacket> = CircuitShaper::new(&config).unwrap();
        let (mut seq, mut now) = (0, 0);
        let rate = |q: &CircuitShaper<TestPacket>| q.instance(0).unwrap().current_rate();
        saturate(&mut q, 2, 100 * MS, &mut now, &mut seq);
        assert_eq!(rate(&q), Rate::from_bits_per_sec(15 * MBIT));
        saturate(&mut q, 1, now + 400 * MS, &mut now, &mut seq);
        assert_eq!(rate(&q), Rate::from_bits_per_sec(20 * MBIT));
        q.check_invariants().unwrap();
    }
}
