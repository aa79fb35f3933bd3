//! [`Allocator`]: one computation of every active leaf's share in a [`RateTree`], in time
//! linear in active leaves plus nodes, with all scratch allocated when it is built.
//!
//! Bottom-up, each node's want is the sum of its active children's (capped by its own cap)
//! and its floor the sum of their mins; top-down, each node's grant is filled among its
//! children by [`water::fill`], so a child that wants less than its fair part lends the
//! rest to its siblings, and a node never passes its cap. A thin leaf (one that used less
//! than its share) is counted at what it used, and given headroom above that to grow into
//! until the next computation (see [`thin_share`]).

use super::shared::MIN_ROOM_BPS;
use super::water::{self, Point, Want};
use super::{Demand, RateTree, NO_CAP};

/// Marks a child entry as a node rather than a leaf.
const NODE: u32 = 1 << 31;

#[derive(Debug, Clone, Copy, Default)]
struct Child {
    want: Want,
    /// A leaf's ceiling (its max in force); unused for a node.
    ceil: u64,
    /// Leaf index, or node index | [`NODE`].
    id: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Active {
    leaf: u32,
    want: Want,
    ceil: u64,
}

/// Scratch for computing a [`RateTree`]'s shares; build one per tree and reuse it.
#[derive(Debug, Clone)]
pub struct Allocator {
    active: Box<[Active]>,
    /// Per node: the sum of its children's wants (then its own, capped), their floors, its
    /// child count (then the fill cursor), where its children start, and its grant.
    want: Box<[u64]>,
    floor: Box<[u64]>,
    count: Box<[u32]>,
    start: Box<[u32]>,
    grant: Box<[u64]>,
    children: Box<[Child]>,
    points: Box<[Point]>,
}

impl Allocator {
    /// Scratch sized for `tree`.
    pub fn new(tree: &RateTree) -> Allocator {
        let nodes = tree.nodes.len();
        let leaves = tree.leaves.len();
        Allocator {
            active: vec![Active::default(); leaves].into_boxed_slice(),
            want: vec![0; nodes].into_boxed_slice(),
            floor: vec![0; nodes].into_boxed_slice(),
            count: vec![0; nodes].into_boxed_slice(),
            start: vec![0; nodes].into_boxed_slice(),
            grant: vec![0; nodes].into_boxed_slice(),
            children: vec![Child::default(); leaves + nodes].into_boxed_slice(),
            points: vec![Point::default(); 2 * (leaves + nodes)].into_boxed_slice(),
        }
    }

    /// Computes the share of every leaf in `demands` (each leaf at most once; `Idle` ones
    /// and any beyond the tree's leaf count are skipped) and hands each to `publish` as
    /// `(leaf, bytes per second)`, `u64::MAX` for a share no cap bounds. Leaves not listed
    /// are idle and get nothing.
    pub fn allocate(
        &mut self,
        tree: &RateTree,
        demands: impl IntoIterator<Item = (u32, Demand)>,
        publish: impl FnMut(u32, u64),
    ) {
        let maxes = demands.into_iter().filter_map(|(leaf, demand)| {
            let spec = tree.leaves.get(leaf as usize)?;
            Some((leaf, demand, spec.max))
        });
        self.allocate_with_max(tree, maxes, publish);
    }

    /// [`Allocator::allocate`] with each leaf's max given beside its demand (bytes per
    /// second, [`NO_CAP`] for none) instead of read from the tree: the max in force after
    /// an in-place change ([`super::SharedTree::set_leaf_max`]). A min above the max is
    /// held to the max.
    pub(super) fn allocate_with_max(
        &mut self,
        tree: &RateTree,
        demands: impl IntoIterator<Item = (u32, Demand, u64)>,
        mut publish: impl FnMut(u32, u64),
    ) {
        let nodes = tree.nodes.len();
        self.want.fill(0);
        self.floor.fill(0);
        self.count.fill(0);
        // The active leaves, and each one's want added to its parent.
        let mut active = 0;
        for (leaf, demand, ceil) in demands {
            let Some(spec) = tree.leaves.get(leaf as usize) else {
                continue;
            };
            let used = match demand {
                Demand::Idle => continue,
                Demand::Saturated => None,
                Demand::Thin(d) => Some(d),
            };
            if active == self.active.len() {
                debug_assert!(false, "a leaf was listed twice");
                break;
            }
            let max = used.map_or(ceil, |d| d.min(ceil));
            let want = Want {
                min: spec.min.min(max),
                max,
            };
            self.active[active] = Active { leaf, want, ceil };
            active += 1;
            let p = spec.parent as usize;
            self.want[p] = self.want[p].saturating_add(want.max);
            self.floor[p] = self.floor[p].saturating_add(want.min);
            self.count[p] += 1;
        }
        // Children before parents: each node's want, capped, joins its parent's.
        for n in (1..nodes).rev() {
            let node = tree.nodes[n];
            let want = self.want[n].min(node.cap);
            self.want[n] = want;
            self.floor[n] = self.floor[n].min(want);
            if want > 0 {
                let p = node.parent as usize;
                self.want[p] = self.want[p].saturating_add(want);
                self.floor[p] = self.floor[p].saturating_add(self.floor[n]);
                self.count[p] += 1;
            }
        }
        // Each node's children in one run of `children` (a counting sort by parent).
        let mut at = 0;
        for n in 0..nodes {
            self.start[n] = at;
            at += self.count[n];
            self.count[n] = self.start[n];
        }
        for a in &self.active[..active] {
            let p = tree.leaves[a.leaf as usize].parent as usize;
            self.children[self.count[p] as usize] = Child {
                want: a.want,
                ceil: a.ceil,
                id: a.leaf,
            };
            self.count[p] += 1;
        }
        for n in 1..nodes {
            if self.want[n] > 0 {
                let p = tree.nodes[n].parent as usize;
                self.children[self.count[p] as usize] = Child {
                    want: Want {
                        min: self.floor[n],
                        max: self.want[n],
                    },
                    ceil: 0,
                    id: n as u32 | NODE,
                };
                self.count[p] += 1;
            }
        }
        // Parents before children: fill each node's grant among its children; a leaf's
        // share goes out through `publish` at once.
        self.grant[0] = tree.nodes[0].cap;
        for n in 0..nodes {
            if n > 0 && self.want[n] == 0 {
                continue;
            }
            let kids = &mut self.children[self.start[n] as usize..self.count[n] as usize];
            if kids.is_empty() {
                continue;
            }
            let fill = water::fill(
                self.grant[n],
                kids.iter().map(|c| c.want),
                0,
                &mut self.points,
            );
            for c in kids.iter() {
                let granted = fill.grant(c.want);
                if c.id & NODE != 0 {
                    self.grant[(c.id & !NODE) as usize] = granted;
                } else {
                    // A want below the leaf's max is a thin leaf's use (saturated leaves
                    // want their max): unless the level held it below that, it gets room.
                    let spec = tree.leaves[c.id as usize];
                    let share = if c.want.max == c.ceil || granted < c.want.max {
                        granted
                    } else {
                        thin_share(spec.min.min(c.ceil), c.ceil, c.want.max)
                    };
                    publish(c.id, share);
                }
            }
        }
    }
}

/// The share of a thin leaf that got all it used (`used`, its average rate): room above
/// that to grow into before the next computation, and never less than its min.
///
/// The room is a quarter of its rate plus the larger of 1/64 of its max (another quarter
/// of its rate when it has none) and
/// [`super::shared::MIN_ROOM_BPS`]: enough that a thin leaf reads as thin again (under the
/// 90 % saturation mark) instead of flipping to saturated, which would make it want its
/// whole max and shrink its saturated cousins' shares for an interval. A slow leaf's
/// average jumps by a packet's worth at each packet, so the room must hold a couple of
/// packets per averaging horizon whatever its rate. The room is not taken from the
/// siblings' split (they get what the leaf did not use); it is what the tree may
/// overshoot, for one interval, if every thin leaf grows at once.
fn thin_share(min: u64, max: u64, used: u64) -> u64 {
    let of_ceiling = if max == NO_CAP { used / 4 } else { max / 64 };
    let room = used / 4 + of_ceiling.max(MIN_ROOM_BPS);
    used.saturating_add(room).max(min).min(max)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::{TreeLeaf, TreeNode};
    use super::*;
    use crate::Rate;

    fn r(bps: u64) -> Rate {
        Rate::from_bytes_per_sec(bps)
    }

    fn shares(tree: &RateTree, demands: &[Demand]) -> Vec<u64> {
        let mut out = vec![0; tree.leaves()];
        Allocator::new(tree).allocate(
            tree,
            demands.iter().enumerate().map(|(i, &d)| (i as u32, d)),
            |l, s| out[l as usize] = s,
        );
        out
    }

    fn leaf(parent: Option<u32>, max: u64, min: u64) -> TreeLeaf {
        TreeLeaf {
            parent,
            max: r(max),
            min: (min > 0).then(|| r(min)),
        }
    }

    fn node(parent: Option<u32>, cap: u64) -> TreeNode {
        TreeNode {
            parent,
            cap: Some(r(cap)),
            is_virtual: false,
        }
    }

    #[test]
    fn a_node_caps_its_leaves_and_lends_what_they_leave() {
        // Root 1000: node 0 (cap 300) with two leaves, one leaf of 800 directly below.
        let tree = RateTree::new(
            r(1000),
            &[node(None, 300)],
            &[
                leaf(Some(0), 500, 0),
                leaf(Some(0), 500, 100),
                leaf(None, 800, 0),
            ],
        )
        .unwrap();
        use Demand::*;
        assert_eq!(
            shares(&tree, &[Saturated, Saturated, Saturated]),
            [150, 150, 700]
        );
        // The node's idle leaf lends its part to its sibling, then up to the root.
        assert_eq!(shares(&tree, &[Saturated, Idle, Saturated])[0], 300);
        assert_eq!(
            shares(&tree, &[Saturated, Idle, Idle])[0],
            300,
            "the node caps it"
        );
        assert_eq!(shares(&tree, &[Idle, Idle, Saturated])[2], 800);
        // A min is kept while its leaf has demand.
        let s = shares(&tree, &[Saturated, Saturated, Idle]);
        assert_eq!(s, [150, 150, 0]);
        let tree = RateTree::new(
            r(1000),
            &[node(None, 300)],
            &[
                leaf(Some(0), 500, 0),
                leaf(Some(0), 500, 200),
                leaf(None, 800, 0),
            ],
        )
        .unwrap();
        assert_eq!(
            shares(&tree, &[Saturated, Saturated, Saturated]),
            [100, 200, 700]
        );
        assert_eq!(shares(&tree, &[Saturated, Saturated, Idle]), [100, 200, 0]);
        let tree = RateTree::new(
            r(1000),
            &[node(None, 300)],
            &[
                leaf(Some(0), 500, 0),
                leaf(Some(0), 500, 250),
                leaf(None, 800, 0),
            ],
        )
        .unwrap();
        assert_eq!(
            shares(&tree, &[Saturated, Saturated, Saturated]),
            [50, 250, 700]
        );
    }

    #[test]
    fn a_thin_leaf_keeps_room_to_grow_and_its_siblings_get_the_rest() {
        let tree = RateTree::new(
            r(20_000_000),
            &[],
            &[leaf(None, 10_000_000, 0), leaf(None, 10_000_000, 0)],
        )
        .unwrap();
        let s = shares(&tree, &[Demand::Thin(100_000), Demand::Saturated]);
        assert_eq!(
            s[1], 10_000_000,
            "the thin leaf's unused part is lent, up to the max"
        );
        assert_eq!(s[0], 100_000 + 25_000 + 10_000_000 / 64);
        let tree = RateTree::new(r(1_000_000), &[], &[leaf(None, 1_000_000, 0); 2]).unwrap();
        let s = shares(&tree, &[Demand::Thin(100_000), Demand::Saturated]);
        assert_eq!(s, [100_000 + 25_000 + MIN_ROOM_BPS, 900_000]);
    }

    #[test]
    fn virtual_nodes_group_without_capping() {
        let virt = TreeNode {
            parent: None,
            cap: Some(r(10)),
            is_virtual: true,
        };
        let tree = RateTree::new(
            r(900),
            &[virt, node(Some(0), 600)],
            &[
                leaf(Some(0), 900, 0),
                leaf(Some(1), 900, 0),
                leaf(Some(1), 900, 0),
            ],
        )
        .unwrap();
        assert_eq!(tree.shaping_nodes(), 2);
        let s = shares(&tree, &[Demand::Saturated; 3]);
        assert_eq!(s, [450, 225, 225]);
    }

    #[test]
    fn a_bad_parent_is_refused() {
        assert!(matches!(
            RateTree::new(r(1), &[node(Some(0), 1)], &[]),
            Err(super::super::TreeError::NodeParent { .. })
        ));
        assert!(RateTree::new(r(1), &[], &[leaf(Some(3), 1, 0)]).is_err());
        assert!(RateTree::new(r(1), &[], &[leaf(None, 1, 2)]).is_err());
    }
}
