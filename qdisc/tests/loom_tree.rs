//! Loom models of the rate tree's publish / compute / apply protocol (`SharedTree`): two
//! owners, each running leaves of one small tree, publish their demands and try to compute
//! at every sync, with the interval at zero so that every sync is due.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p qdisc --release --test loom_tree`. Loom
//! explores every interleaving of the slots, the active bitmap and the compute try-lock; its
//! `UnsafeCell` check fails if two owners ever compute at once (the allocator's scratch sits
//! in the lock's cell). The models check, with no extra computation after the owners are
//! done, that the published shares are those of the last demands: a demand published before
//! a sync is never left out by a race.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use qdisc::rate_tree::{
    Allocator, Demand, RateTree, SharedTree, TreeLeaf, TreeNode, TreeSyncConfig,
};
use qdisc::Rate;

fn r(bps: u64) -> Rate {
    Rate::from_bytes_per_sec(bps)
}

/// Root 100; a node capped at 60 over leaf 0 (max 50) and leaf 1 (max 50, min 20); leaf 2
/// (max 100) under the root.
fn tree() -> RateTree {
    let leaf = |parent, max, min: u64| TreeLeaf {
        parent,
        max: r(max),
        min: (min > 0).then(|| r(min)),
    };
    RateTree::new(
        r(100),
        &[TreeNode {
            parent: None,
            cap: Some(r(60)),
            is_virtual: false,
        }],
        &[
            leaf(Some(0), 50, 0),
            leaf(Some(0), 50, 20),
            leaf(None, 100, 0),
        ],
    )
    .unwrap()
}

/// The shares a fresh computation gives `demands` (the oracle of the final state).
fn expected(demands: &[Demand]) -> Vec<Option<u64>> {
    let tree = tree();
    let mut out = vec![None; demands.len()];
    Allocator::new(&tree).allocate(
        &tree,
        demands.iter().enumerate().map(|(i, &d)| (i as u32, d)),
        |l, s| out[l as usize] = Some(s),
    );
    out
}

/// Explores `f` with loom, at most `preemptions` preemptions per execution (three, as in
/// `tests/loom.rs`, for one sync per owner; two when an owner syncs twice, which is as many
/// as finish in minutes).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(f);
}

fn shared() -> Arc<SharedTree> {
    let config = TreeSyncConfig {
        interval_ns: 0,
        ..TreeSyncConfig::default()
    };
    Arc::new(SharedTree::new(tree(), config))
}

/// One owner's syncs: each publishes its leaves' demands, then tries to compute.
fn owner(t: &SharedTree, syncs: &[&[(u32, Demand)]]) {
    for (i, sync) in syncs.iter().enumerate() {
        for &(leaf, demand) in sync.iter() {
            t.publish(leaf, demand);
        }
        t.compute_if_due(i as u64);
    }
}

fn check(t: &SharedTree, demands: &[Demand]) {
    for (leaf, want) in expected(demands).into_iter().enumerate() {
        if let Some(want) = want {
            assert_eq!(
                t.share(leaf as u32).bytes_per_sec(),
                want,
                "leaf {leaf} under {demands:?}"
            );
        }
    }
}

#[test]
fn concurrent_syncs_publish_the_shares_of_every_demand() {
    model(3, || {
        let t = shared();
        let b = {
            let t = t.clone();
            thread::spawn(move || owner(&t, &[&[(1, Demand::Saturated)]]))
        };
        owner(&t, &[&[(0, Demand::Saturated), (2, Demand::Saturated)]]);
        b.join().unwrap();
        check(&t, &[Demand::Saturated; 3]);
    });
}

#[test]
fn a_leaf_that_turns_idle_lends_its_share_back() {
    model(2, || {
        let t = shared();
        let b = {
            let t = t.clone();
            thread::spawn(move || {
                owner(&t, &[&[(1, Demand::Saturated)], &[(1, Demand::Idle)]]);
            })
        };
        owner(&t, &[&[(0, Demand::Saturated), (2, Demand::Thin(30))]]);
        b.join().unwrap();
        check(&t, &[Demand::Saturated, Demand::Idle, Demand::Thin(30)]);
    });
}
