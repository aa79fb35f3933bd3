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

use super::{CircuitShaper, CircuitShaperConfig, DEFAULT_ID, NIL};
use crate::cake::CakeConfig;
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
        let leaves: Vec<TreeLeaf> = config
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
            .collect();
        let tree = RateTree::new(config.link.rate, nodes, &leaves)?;
        Ok(TreeRef(Arc::new(SharedTree::new(tree, sync))))
    }
}

/// The shaper's link to its tree: a meter per member slot and when the next sync is due.
#[derive(Debug)]
pub(super) struct TreeLink {
    shared: Arc<SharedTree>,
    /// Per slot: its meter and its sent bytes at the last sync, while it is a member.
    meters: Vec<Option<(LeafMeter, u64)>>,
    /// The slots with a meter, in no particular order.
    members: Vec<u32>,
    next_sync_ns: u64,
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
        })
    }
}

impl<P: Packet> CircuitShaper<P> {
    /// The rate a new instance of `id` starts at under the tree: the share in its leaf's
    /// slot (its wake share when it was idle); `None` without a tree or for the default
    /// class.
    pub(super) fn tree_wake_rate(&self, id: u32) -> Option<Rate> {
        let link = self.tree.as_ref()?;
        let slot = id.checked_sub(1)?;
        ((slot as usize) < link.meters.len()).then(|| link.shared.share(slot))
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

    fn sync_tree_now(&mut self, now: u64) {
        let Some(mut link) = self.tree.take() else {
            return;
        };
        let shared = link.shared.clone();
        link.next_sync_ns = now + shared.config().interval_ns / 2;
        // Circuits with an instance join.
        for inst in &self.insts {
            let slot = inst.owner.wrapping_sub(1);
            if inst.owner == DEFAULT_ID || slot as usize >= link.meters.len() {
                continue;
            }
            let entry = &mut link.meters[slot as usize];
            if entry.is_none() {
                let sent = self.slots[inst.owner as usize].counters.sent_bytes;
                *entry = Some((LeafMeter::new(&shared, slot, now), sent));
                link.members.push(slot);
            }
        }
        // Every member publishes; one that is idle without an instance leaves.
        let mut i = 0;
        while i < link.members.len() {
            let slot = link.members[i];
            let state = &self.slots[slot as usize + 1];
            let backlog = match state.inst {
                NIL => 0,
                idx => self.insts[idx as usize].cake.backlog_bytes(),
            };
            let (meter, last_sent) = link.meters[slot as usize]
                .as_mut()
                .expect("members have meters");
            meter.delivered(state.counters.sent_bytes.saturating_sub(*last_sent));
            *last_sent = state.counters.sent_bytes;
            let demand = meter.publish(&shared, now, backlog);
            if demand == Demand::Idle && state.inst == NIL {
                link.meters[slot as usize] = None;
                link.members.swap_remove(i);
            } else {
                i += 1;
            }
        }
        shared.compute_if_due(now);
        // Each live member runs at its share (again after a reconfigure set its plan's).
        for &slot in &link.members {
            let id = slot + 1;
            let idx = self.slots[id as usize].inst;
            if idx == NIL {
                continue;
            }
            let (meter, _) = link.meters[slot as usize]
                .as_mut()
                .expect("members have meters");
            meter.take_share(&shared);
            let share = meter.applied();
            let cake = &self.insts[idx as usize].cake;
            if cake.current_rate() != share {
                let old = cake.config().clone();
                let new = CakeConfig {
                    rate: share,
                    ..old.clone()
                };
                self.retune(id, &old, &new, now);
            }
        }
        self.tree = Some(link);
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
}
