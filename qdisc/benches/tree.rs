//! The cost of the rate tree (docs/design.md, "Shared rates: from cake_mq to a tree"): one
//! computation of every leaf's share, and one owner's sync of one leaf.
//!
//! Rows:
//! * `allocate/{flat,tree3}/{1000,10000}`: `Allocator::allocate` with every leaf active
//!   (a quarter thin, the rest saturated), leaves directly under the root (`flat`, the
//!   cake_mq shape) or under 3 levels (root, 10 sites, 100 access points).
//! * `compute/tree3/{1000,10000}`: `SharedTree::compute_if_due`, the same computation read
//!   from the leaves' slots and the active bitmap and published back to them.
//! * `sync/leaf_sync_x1000`: one owner's sync of 1 000 leaves, each `LeafMeter::publish`
//!   then `take_share`.
//!
//! A worker's sync cost per second is then `leaves x 2 / interval x leaf_sync` for its own
//! leaves plus its part of `computations per second x compute` (BENCHMARKS.md, "Rate tree").
//!
//! Times are the bench thread's CPU time (`/proc/thread-self/schedstat`), so that on a
//! loaded machine the time other processes hold the CPU is not counted (the cache misses
//! they cause still are). Linux updates that count once per scheduler tick, so each row
//! takes 10 samples of a second or so: a tick is then under 1 % of a sample.
//!
//! Run: `cargo bench -p qdisc --bench tree -- --warm-up-time 1 --measurement-time 10`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use qdisc::rate_tree::{
    Allocator, Demand, LeafMeter, RateTree, SharedTree, TreeLeaf, TreeNode, TreeSyncConfig,
};
use qdisc::Rate;

const MBIT: u64 = 1_000_000 / 8;

fn tree(leaves: usize, levels: bool) -> RateTree {
    let mut nodes = Vec::new();
    if levels {
        for _ in 0..10 {
            nodes.push(TreeNode {
                parent: None,
                cap: Some(Rate::from_bytes_per_sec(2_000 * MBIT)),
                is_virtual: false,
            });
        }
        for ap in 0..100u32 {
            nodes.push(TreeNode {
                parent: Some(ap % 10),
                cap: Some(Rate::from_bytes_per_sec(300 * MBIT)),
                is_virtual: false,
            });
        }
    }
    let leaves: Vec<TreeLeaf> = (0..leaves)
        .map(|l| TreeLeaf {
            parent: levels.then_some(10 + (l % 100) as u32),
            max: Rate::from_bytes_per_sec([10, 25, 50, 100][l % 4] * MBIT),
            min: (l % 5 == 1).then(|| Rate::from_bytes_per_sec(2 * MBIT)),
        })
        .collect();
    RateTree::new(Rate::from_bytes_per_sec(10_000 * MBIT), &nodes, &leaves).unwrap()
}

/// The CPU time this thread has run, in ns, from `/proc/thread-self/schedstat`: Linux
/// updates it at every scheduler tick, so samples must be long (see `sample_size` below).
fn cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("the tree bench reads /proc/thread-self/schedstat (Linux)");
    let ns = stat
        .split_whitespace()
        .next()
        .expect("schedstat has a first field");
    ns.parse()
        .expect("schedstat's first field is a count of ns")
}

/// Runs `f` `iters` times and returns the CPU time it took.
fn timed(iters: u64, mut f: impl FnMut()) -> Duration {
    let start = cpu_ns();
    for _ in 0..iters {
        f();
    }
    Duration::from_nanos((cpu_ns() - start).max(1))
}

fn demand(leaf: u32) -> Demand {
    if leaf % 4 == 3 {
        Demand::Thin(u64::from(leaf % 97 + 1) * 10_000)
    } else {
        Demand::Saturated
    }
}

fn allocate(c: &mut Criterion) {
    let mut g = c.benchmark_group("allocate");
    g.sample_size(10);
    for levels in [false, true] {
        for leaves in [1_000usize, 10_000] {
            let t = tree(leaves, levels);
            let mut alloc = Allocator::new(&t);
            let name = if levels { "tree3" } else { "flat" };
            g.bench_with_input(BenchmarkId::new(name, leaves), &leaves, |b, &n| {
                b.iter_custom(|iters| {
                    timed(iters, || {
                        let mut sum = 0u64;
                        alloc.allocate(&t, (0..n as u32).map(|l| (l, demand(l))), |_, s| {
                            sum = sum.wrapping_add(s)
                        });
                        black_box(sum);
                    })
                })
            });
        }
    }
    g.finish();
}

fn compute(c: &mut Criterion) {
    let mut g = c.benchmark_group("compute");
    g.sample_size(10);
    for leaves in [1_000usize, 10_000] {
        let config = TreeSyncConfig {
            interval_ns: 0,
            ..TreeSyncConfig::default()
        };
        let shared = SharedTree::new(tree(leaves, true), config);
        for l in 0..leaves as u32 {
            shared.publish(l, demand(l));
        }
        let mut now = 0;
        g.bench_with_input(BenchmarkId::new("tree3", leaves), &leaves, |b, _| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    now += 1;
                    black_box(shared.compute_if_due(now));
                })
            })
        });
    }
    g.finish();
}

fn leaf_sync(c: &mut Criterion) {
    let shared = SharedTree::new(tree(1_000, true), TreeSyncConfig::default());
    let mut meters: Vec<LeafMeter> = (0..1_000).map(|l| LeafMeter::new(&shared, l, 0)).collect();
    let mut now = 0;
    let mut g = c.benchmark_group("sync");
    g.sample_size(10);
    g.bench_function("leaf_sync_x1000", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                now += 500_000;
                // One owner's sync of 1 000 leaves; BENCHMARKS.md divides the row by 1 000.
                let mut changed = 0;
                for (i, m) in meters.iter_mut().enumerate() {
                    m.delivered(if i % 4 == 3 { 20 } else { 40_000 });
                    m.publish(&shared, now, (i % 4 != 3) as u64 * 1_000);
                    changed += m.take_share(&shared).is_some() as u32;
                }
                black_box(changed);
            })
        })
    });
    g.finish();
}

criterion_group!(benches, allocate, compute, leaf_sync);
criterion_main!(benches);
