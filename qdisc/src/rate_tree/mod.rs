//! Rate trees: node caps with borrowing, the general case of the cake_mq shared rate
//! (docs/design.md, "Shared rates: from cake_mq to a tree").
//!
//! A [`RateTree`] is a link (the root) above nodes (sites, access points: LibreQoS's
//! `network.json`) above leaves (one shaper per subscriber direction). Each node's rate is
//! shared max-min fairly among its children that want it, every child up to its own cap
//! and each guaranteed its min while it has demand; what a child leaves unused is lent to
//! its siblings (HTB's rate/ceil, without a lock). Virtual nodes group without capping.
//!
//! * `water` is the water-filling core every split uses, the cake_mq queues' included.
//! * [`Allocator`] computes every active leaf's share from the leaves' demands, in time
//!   linear in active leaves plus nodes, with scratch allocated once.
//! * [`SharedTree`] is the lock-free protocol around it: leaves publish their demand in
//!   their own cache-padded slots, whichever owner's periodic sync wins the try-lock computes,
//!   and every owner applies its leaves' shares with the rate-only `set_rate` at its next sync.
//!
//! Nothing here reads a clock or starts a thread.

mod alloc;
mod shared;
pub(crate) mod water;

pub use alloc::Allocator;
pub use shared::{LeafMeter, SharedTree, TreeSyncConfig, THIN_DEADBAND};
pub use water::Want;

use crate::Rate;

/// A node as configured: caps per direction come in one at a time (one tree per direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeNode {
    /// Index of the parent node in the same slice, which must come earlier; `None` hangs
    /// the node under the root (the link).
    pub parent: Option<u32>,
    /// The node's cap in this direction; `None` (or [`Rate::UNLIMITED`]) groups for fairness
    /// without capping.
    pub cap: Option<Rate>,
    /// A virtual node neither caps nor groups: its children share its parent's rate as if
    /// they hung there (LibreQoS's `"virtual": true`).
    pub is_virtual: bool,
}

/// A leaf (one circuit direction) as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLeaf {
    /// Index of the parent node; `None` hangs the leaf under the root.
    pub parent: Option<u32>,
    /// The leaf's ceiling (its plan's max); [`Rate::UNLIMITED`] is bounded only by its
    /// ancestors.
    pub max: Rate,
    /// The rate it is guaranteed while it has demand.
    pub min: Option<Rate>,
}

/// What one leaf wants, as its owner measured it over its last sync window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// Nothing queued and nothing delivered: it takes no part in the split.
    Idle,
    /// It used (nearly) all of its share, or the shaper held packets back: it wants its max.
    Saturated,
    /// It used clearly less than its share: what it delivered, in bytes per second.
    Thin(u64),
}

/// Why a tree could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// A node's parent is not an earlier node.
    #[error("node {node} names parent {parent}, which is not an earlier node; list parents before their children")]
    NodeParent { node: u32, parent: u32 },
    /// A leaf's parent does not exist.
    #[error("leaf {leaf} names parent node {parent}, but there are only {nodes} nodes")]
    LeafParent { leaf: u32, parent: u32, nodes: u32 },
    /// A leaf's min is above its max.
    #[error("leaf {leaf} has min {min} above its max {max}; lower the min or raise the max")]
    MinAboveMax { leaf: u32, min: Rate, max: Rate },
    /// Too many leaves or nodes for 32-bit indices.
    #[error("{0} leaves or nodes exceed the tree's limit of 2^31")]
    TooLarge(usize),
}

/// No cap, in bytes per second.
const NO_CAP: u64 = u64::MAX;

fn cap_bps(rate: Option<Rate>) -> u64 {
    match rate {
        Some(r) if !r.is_unlimited() => r.bytes_per_sec(),
        _ => NO_CAP,
    }
}

/// A shaping node of the resolved tree (virtual nodes are gone).
#[derive(Debug, Clone, Copy)]
struct Node {
    cap: u64,
    /// Index of the parent shaping node; the root is its own parent.
    parent: u32,
}

/// A leaf of the resolved tree.
#[derive(Debug, Clone, Copy)]
struct Leaf {
    max: u64,
    min: u64,
    /// Index of the parent shaping node.
    parent: u32,
    /// What it applies when it turns active, until a computation counts it: its share with
    /// every leaf saturated (at least its min, never above its fair part of any ancestor).
    wake: u64,
}

/// The resolved topology of one direction: the root (index 0, the link) and the shaping
/// nodes in parent-before-child order, and the leaves. Immutable: a plan whose max alone
/// changed is changed in place in the [`SharedTree`] around it
/// ([`SharedTree::set_leaf_max`]); any other change is a new `RateTree`.
#[derive(Debug, Clone)]
pub struct RateTree {
    nodes: Box<[Node]>,
    leaves: Box<[Leaf]>,
}

impl RateTree {
    /// Resolves `nodes` (parents before children) and `leaves` under a root of `root_cap`
    /// (the link rate; [`Rate::UNLIMITED`] for none).
    pub fn new(
        root_cap: Rate,
        nodes: &[TreeNode],
        leaves: &[TreeLeaf],
    ) -> Result<RateTree, TreeError> {
        for len in [nodes.len(), leaves.len()] {
            if len >= 1 << 31 {
                return Err(TreeError::TooLarge(len));
            }
        }
        // Where each configured node lands: its own shaping node, or (virtual) its parent's.
        let mut resolved = Vec::with_capacity(nodes.len());
        let mut shaping = vec![Node {
            cap: cap_bps(Some(root_cap)),
            parent: 0,
        }];
        for (i, n) in nodes.iter().enumerate() {
            let parent = match n.parent {
                None => 0,
                Some(p) if (p as usize) < i => resolved[p as usize],
                Some(p) => {
                    return Err(TreeError::NodeParent {
                        node: i as u32,
                        parent: p,
                    })
                }
            };
            if n.is_virtual {
                resolved.push(parent);
            } else {
                resolved.push(shaping.len() as u32);
                shaping.push(Node {
                    cap: cap_bps(n.cap),
                    parent,
                });
            }
        }
        let leaves = leaves
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let parent = match l.parent {
                    None => 0,
                    Some(p) => *resolved.get(p as usize).ok_or(TreeError::LeafParent {
                        leaf: i as u32,
                        parent: p,
                        nodes: nodes.len() as u32,
                    })?,
                };
                let max = cap_bps(Some(l.max));
                let min = l.min.map_or(0, Rate::bytes_per_sec);
                if min > max {
                    return Err(TreeError::MinAboveMax {
                        leaf: i as u32,
                        min: l.min.unwrap_or_default(),
                        max: l.max,
                    });
                }
                Ok(Leaf {
                    max,
                    min,
                    parent,
                    wake: max,
                })
            })
            .collect::<Result<Box<[Leaf]>, TreeError>>()?;
        let mut tree = RateTree {
            nodes: shaping.into_boxed_slice(),
            leaves,
        };
        let mut alloc = Allocator::new(&tree);
        let mut wake = vec![0; tree.leaves.len()];
        alloc.allocate(
            &tree,
            (0..tree.leaves.len() as u32).map(|l| (l, Demand::Saturated)),
            |leaf, share| wake[leaf as usize] = share,
        );
        for (leaf, share) in tree.leaves.iter_mut().zip(wake) {
            leaf.wake = share;
        }
        Ok(tree)
    }

    /// Number of leaves.
    pub fn leaves(&self) -> usize {
        self.leaves.len()
    }

    /// Number of shaping nodes, the root included (virtual nodes do not count).
    pub fn shaping_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The root's cap (the link rate).
    pub fn root_cap(&self) -> Rate {
        Rate::from_bytes_per_sec(self.nodes[0].cap)
    }

    /// True when `RateTree::new(root_cap, nodes, leaves)` would build this tree but for
    /// the leaves' maxes: the same root cap, the same nodes with the same caps, the same
    /// leaves under the same parents with the same mins. Such a change can be made in
    /// place ([`SharedTree::set_leaf_max`]) instead of building a tree.
    pub fn same_but_maxes(&self, root_cap: Rate, nodes: &[TreeNode], leaves: &[TreeLeaf]) -> bool {
        if self.nodes[0].cap != cap_bps(Some(root_cap)) || leaves.len() != self.leaves.len() {
            return false;
        }
        // Where each configured node landed, as `new` resolves it (one word per node).
        let mut resolved: Vec<u32> = Vec::with_capacity(nodes.len());
        let mut shaping = 1usize;
        for (i, n) in nodes.iter().enumerate() {
            let parent = match n.parent {
                None => 0,
                Some(p) if (p as usize) < i => resolved[p as usize],
                Some(_) => return false,
            };
            if n.is_virtual {
                resolved.push(parent);
                continue;
            }
            match self.nodes.get(shaping) {
                Some(have) if have.cap == cap_bps(n.cap) && have.parent == parent => {}
                _ => return false,
            }
            resolved.push(shaping as u32);
            shaping += 1;
        }
        if shaping != self.nodes.len() {
            return false;
        }
        leaves.iter().zip(self.leaves.iter()).all(|(l, have)| {
            let parent = match l.parent {
                None => Some(0),
                Some(p) => resolved.get(p as usize).copied(),
            };
            parent == Some(have.parent) && l.min.map_or(0, Rate::bytes_per_sec) == have.min
        })
    }

    /// The share `leaf` applies when it turns active before a computation counts it.
    pub fn wake_share(&self, leaf: u32) -> Rate {
        share_rate(self.leaves[leaf as usize].wake)
    }
}

/// A share in bytes per second as a [`Rate`]: a share no cap bounds is unlimited.
fn share_rate(bps: u64) -> Rate {
    if bps >= NO_CAP / 2 {
        Rate::UNLIMITED
    } else {
        Rate::from_bytes_per_sec(bps.max(1))
    }
}
