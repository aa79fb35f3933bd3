//! The circuit shaper in virtual time: every circuit held to its plan under overload, the
//! link cap holding the sum and shared between circuits, idle instances released and
//! recreated, a reconfigure in the middle of traffic that loses and reorders nothing, and
//! conservation over random plans, traffic and reconfigures.
//!
//! Every check compares quantities from the same simulated run (delivered vs configured,
//! one circuit against another); nothing depends on the machine's speed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use proptest::prelude::*;
use qdisc::cake::DiffservMode;
use qdisc::circuit::{CircuitPlan, CircuitShaper, CircuitShaperConfig};
use qdisc::testing::{udp_meta, TestPacket};
use qdisc::{Dequeue, PacketMeta, Qdisc, Rate};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// A constant-rate source of one flow in one circuit.
struct Src {
    flow: u32,
    meta: PacketMeta,
    len: usize,
    gap_ns: u64,
    stop_ns: u64,
    ect: bool,
    seq: u64,
}

/// What the driver saw of one flow.
#[derive(Default, Clone)]
struct Rec {
    offered: u64,
    delivered: u64,
    delivered_bytes: u64,
    window_bytes: u64,
    last_seq: Option<u64>,
    order_violations: u64,
}

/// A lean event-driven driver: sources in a heap by next arrival (the shared `Harness`
/// visits every source per event, too slow for a hundred circuits in a debug build).
struct Sim {
    q: CircuitShaper<TestPacket>,
    now: u64,
    srcs: Vec<Src>,
    next: BinaryHeap<Reverse<(u64, usize)>>,
    recs: Vec<Rec>,
    window: (u64, u64),
    enqueue_drops: u64,
    /// A busy worker: dequeues only every `.0` ns, at most `.1` packets each time (`None`:
    /// at once, everything due).
    poll: Option<(u64, usize)>,
}

impl Sim {
    fn new(config: &CircuitShaperConfig) -> Sim {
        Sim {
            q: CircuitShaper::new(config).unwrap(),
            now: 0,
            srcs: Vec::new(),
            next: BinaryHeap::new(),
            recs: Vec::new(),
            window: (0, u64::MAX),
            enqueue_drops: 0,
            poll: None,
        }
    }

    /// Adds a source of `len`-byte packets at `rate` (frame bytes) for `circuit`.
    fn add(&mut self, circuit: Option<u32>, len: usize, rate: Rate, start: u64, stop: u64) -> u32 {
        let flow = self.srcs.len() as u32;
        let gap_ns = (len as u128 * 1_000_000_000 / u128::from(rate.bytes_per_sec())) as u64;
        let meta = PacketMeta {
            circuit,
            ..udp_meta(circuit.unwrap_or(0xffff), 1, flow, 0)
        };
        self.srcs.push(Src {
            flow,
            meta,
            len,
            gap_ns: gap_ns.max(1),
            stop_ns: stop,
            ect: false,
            seq: 0,
        });
        self.recs.push(Rec::default());
        self.next.push(Reverse((start, flow as usize)));
        flow
    }

    fn deliver(&mut self, p: TestPacket) {
        let r = &mut self.recs[p.flow as usize];
        r.delivered += 1;
        r.delivered_bytes += p.len as u64;
        if self.now >= self.window.0 && self.now < self.window.1 {
            r.window_bytes += p.len as u64;
        }
        if r.last_seq.is_some_and(|s| p.seq <= s) {
            r.order_violations += 1;
        }
        r.last_seq = Some(p.seq);
    }

    /// Runs until `end` (events at `end` included).
    fn run_until(&mut self, end: u64) {
        loop {
            while let Some(&Reverse((t, i))) = self.next.peek() {
                if t > self.now {
                    break;
                }
                self.next.pop();
                let s = &mut self.srcs[i];
                if t >= s.stop_ns {
                    continue;
                }
                let mut p = TestPacket::new(s.len, s.flow, s.seq);
                p.ect = s.ect;
                p.sent_ns = t;
                s.seq += 1;
                let meta = s.meta;
                self.next.push(Reverse((t + s.gap_ns, i)));
                self.recs[i].offered += 1;
                let r = self.q.enqueue(self.now, p, &meta);
                self.enqueue_drops += u64::from(r.dropped_packets);
            }
            let mut wake = None;
            let (period, budget) = self.poll.unwrap_or((1, usize::MAX));
            if self.now % period == 0 {
                let mut sent = 0;
                while sent < budget {
                    match self.q.dequeue(self.now) {
                        Dequeue::Packet(p) => self.deliver(p),
                        Dequeue::NotBefore(t) => {
                            wake = Some(t);
                            break;
                        }
                        Dequeue::Empty => break,
                    }
                    sent += 1;
                }
            }
            // A busy worker looks again at its next poll while it holds anything.
            if self.poll.is_some() {
                wake = (self.q.len() > 0).then_some((self.now / period + 1) * period);
            }
            let arrival = self.next.peek().map(|r| r.0 .0);
            let next = match (wake, arrival) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => {
                        self.now = self.now.max(end);
                        return;
                    }
                },
            };
            if next > end {
                self.now = end;
                return;
            }
            self.now = next.max(self.now + 1);
        }
    }

    fn offered(&self) -> u64 {
        self.recs.iter().map(|r| r.offered).sum()
    }

    fn delivered(&self) -> u64 {
        self.recs.iter().map(|r| r.delivered).sum()
    }
}

fn plans(rates: &[Rate]) -> Arc<[Option<CircuitPlan>]> {
    rates.iter().map(|&r| Some(CircuitPlan::new(r))).collect()
}

fn mbit(m: u64) -> Rate {
    Rate::from_bits_per_sec(m * 1_000_000)
}

/// Packet length that gives a circuit of `rate` at least ~500 packets a second, so that
/// one packet of quantisation stays well under the accuracy asked.
fn len_for(rate: Rate) -> usize {
    (rate.bytes_per_sec() / 500).clamp(200, 1500) as usize
}

#[test]
fn a_hundred_circuits_under_overload_each_deliver_their_plan() {
    // Assorted plans from 1 to 100 Mbit/s.
    let rates: Vec<Rate> = (0..100u64).map(|i| mbit(1 + (i * 37) % 100)).collect();
    let config = CircuitShaperConfig {
        plans: plans(&rates),
        ..CircuitShaperConfig::default()
    };
    let mut sim = Sim::new(&config);
    for (slot, &r) in rates.iter().enumerate() {
        // Two flows per circuit, together 1.25 times the plan.
        let each = Rate::from_bytes_per_sec(r.bytes_per_sec() * 5 / 8);
        for _ in 0..2 {
            sim.add(Some(slot as u32), len_for(r), each, 0, u64::MAX);
        }
    }
    sim.window = (SEC / 2, 2 * SEC);
    sim.run_until(2 * SEC);
    for (slot, &r) in rates.iter().enumerate() {
        let got: u64 = sim.recs[2 * slot].window_bytes + sim.recs[2 * slot + 1].window_bytes;
        let want = r.bytes_per_sec() * 3 / 2;
        let ratio = got as f64 / want as f64;
        assert!(
            (ratio - 1.0).abs() < 0.005,
            "slot {slot} at {r}: {got} of {want} bytes (ratio {ratio:.5})"
        );
        assert_eq!(sim.recs[2 * slot].order_violations, 0);
    }
    sim.q.check_invariants().unwrap();
}

#[test]
fn under_a_link_cap_below_the_sum_the_cap_holds_and_circuits_share_it() {
    // 20 circuits of 50 Mbit/s under a 400 Mbit/s cap. Four want only 5 Mbit/s and get
    // it; the other sixteen share the rest equally.
    let rates = vec![mbit(50); 20];
    let mut config = CircuitShaperConfig {
        plans: plans(&rates),
        ..CircuitShaperConfig::default()
    };
    config.link.rate = mbit(400);
    let mut sim = Sim::new(&config);
    for slot in 0..20u32 {
        let want = if slot < 4 { mbit(5) } else { mbit(60) };
        sim.add(Some(slot), 1000, want, 0, u64::MAX);
    }
    sim.window = (SEC / 2, 2 * SEC);
    sim.run_until(2 * SEC);
    let secs = 1.5;
    let total: u64 = sim.recs.iter().map(|r| r.window_bytes).sum();
    let link = mbit(400).bytes_per_sec() as f64 * secs;
    let ratio = total as f64 / link;
    assert!(
        (ratio - 1.0).abs() < 0.005,
        "link: {total} of {link} (ratio {ratio:.5})"
    );
    let small = mbit(5).bytes_per_sec() as f64 * secs;
    let fair = (link - 4.0 * small) / 16.0;
    for (slot, r) in sim.recs.iter().enumerate() {
        let want = if slot < 4 { small } else { fair };
        let ratio = r.window_bytes as f64 / want;
        assert!(
            (ratio - 1.0).abs() < 0.02,
            "slot {slot}: {} of {want} (ratio {ratio:.4})",
            r.window_bytes
        );
        assert_eq!(r.order_violations, 0);
    }
}

#[test]
fn an_idle_circuit_releases_its_instance_and_comes_back_with_its_counters() {
    let config = CircuitShaperConfig {
        plans: plans(&[mbit(10), mbit(10)]),
        idle_release_ns: 200 * MS,
        ..CircuitShaperConfig::default()
    };
    let mut sim = Sim::new(&config);
    // Slot 0 talks for 100 ms, pauses 500 ms, talks again; slot 1 keeps talking.
    sim.add(Some(0), 1000, mbit(5), 0, 100 * MS);
    sim.add(Some(0), 1000, mbit(5), 600 * MS, 700 * MS);
    sim.add(Some(1), 1000, mbit(5), 0, SEC);
    sim.run_until(250 * MS);
    assert!(
        sim.q.instance(0).is_some(),
        "empty for less than idle_release_ns"
    );
    sim.run_until(350 * MS);
    assert!(sim.q.instance(0).is_none(), "released");
    assert_eq!(sim.q.active_instances(), 1);
    let before = sim.q.circuit_stats(0).unwrap().counters;
    assert_eq!(before.sent_packets, sim.recs[0].delivered);
    sim.run_until(650 * MS);
    assert!(sim.q.instance(0).is_some(), "recreated by its next packet");
    sim.run_until(2 * SEC);
    let after = sim.q.circuit_stats(0).unwrap().counters;
    assert_eq!(
        after.sent_packets,
        sim.recs[0].delivered + sim.recs[1].delivered
    );
    assert_eq!(sim.q.totals().sent_packets, sim.delivered());
}

#[test]
fn a_reconfigure_mid_traffic_loses_and_reorders_nothing_in_unchanged_circuits() {
    let rates: Vec<Rate> = (0..10).map(|i| mbit(10 + i)).collect();
    let config = CircuitShaperConfig {
        plans: plans(&rates),
        ..CircuitShaperConfig::default()
    };
    let mut sim = Sim::new(&config);
    // Each circuit offered 80 % of its plan, ECN-capable: nothing needs dropping.
    for (slot, &r) in rates.iter().enumerate() {
        let f = sim.add(
            Some(slot as u32),
            1000,
            Rate::from_bytes_per_sec(r.bytes_per_sec() * 4 / 5),
            0,
            2 * SEC,
        );
        sim.srcs[f as usize].ect = true;
    }
    sim.run_until(SEC);
    let queued_before: Vec<usize> = (0..10)
        .map(|s| sim.q.instance(s).map_or(0, |i| i.len()))
        .collect();
    // Slot 3 changes rate, slot 7 is removed, slots 10 and 11 are added.
    let mut new_plans: Vec<Option<CircuitPlan>> = config.plans.to_vec();
    new_plans[3].as_mut().unwrap().rate = mbit(30);
    new_plans[7] = None;
    new_plans.push(Some(CircuitPlan::new(mbit(5))));
    new_plans.push(Some(CircuitPlan::plain(mbit(5))));
    let config2 = CircuitShaperConfig {
        plans: new_plans.into(),
        ..config.clone()
    };
    sim.q.reconfigure(&config2).unwrap();
    sim.q.check_invariants().unwrap();
    for (s, &q) in queued_before.iter().enumerate() {
        let now = sim.q.instance(s as u32).map_or(0, |i| i.len());
        assert_eq!(now, q, "slot {s}: the reconfigure changed its queue");
    }
    sim.add(Some(10), 500, mbit(2), SEC, 2 * SEC);
    sim.add(Some(11), 500, mbit(2), SEC, 2 * SEC);
    sim.run_until(3 * SEC);
    assert!(sim.q.is_empty());
    assert_eq!(sim.offered(), sim.delivered() + sim.enqueue_drops);
    assert_eq!(sim.enqueue_drops, 0);
    for (flow, r) in sim.recs.iter().enumerate() {
        assert_eq!(r.order_violations, 0, "flow {flow}");
        assert_eq!(r.offered, r.delivered, "flow {flow}");
    }
    // Slot 7's later packets went to the default class; its instance was released once
    // drained.
    assert!(sim.q.instance(7).is_none());
    assert!(sim.q.default_stats().counters.sent_packets > 0);
    let t = sim.q.totals();
    assert_eq!(t.sent_packets, sim.delivered());
    assert_eq!(t.dropped_total(), 0);
}

/// One step of a random run.
#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        slot: Option<u32>,
        flow: u8,
        len: u16,
        ect: bool,
    },
    Burst {
        slot: Option<u32>,
        n: u8,
    },
    Dequeue {
        advance_us: u32,
        n: u8,
    },
    Reconfigure {
        slot: u8,
        rate_mbit: u16,
        diffserv: bool,
        remove: bool,
    },
    LinkRate {
        mbit: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (proptest::option::of(0u32..12), any::<u8>(), 60u16..1600, any::<bool>())
            .prop_map(|(slot, flow, len, ect)| Op::Enqueue { slot, flow, len, ect }),
        1 => (proptest::option::of(0u32..12), 1u8..16).prop_map(|(slot, n)| Op::Burst { slot, n }),
        3 => (0u32..5000, 1u8..40).prop_map(|(advance_us, n)| Op::Dequeue { advance_us, n }),
        1 => (0u8..12, 1u16..200, any::<bool>(), any::<bool>())
            .prop_map(|(slot, rate_mbit, diffserv, remove)| Op::Reconfigure { slot, rate_mbit, diffserv, remove }),
        1 => (0u16..400).prop_map(|mbit| Op::LinkRate { mbit }),
    ]
}

/// The test's flow id of `flow` in `slot`: unique per (reconfigure epoch of the slot,
/// slot or none, flow), so that order is checked per queue a packet can take.
fn flow_id(epochs: &[u32; 12], slot: Option<u32>, flow: u8) -> u32 {
    let (s, e) = match slot {
        Some(s) => (s, epochs[s as usize]),
        None => (0xff, 0),
    };
    (e << 16) | (s << 8) | u32::from(flow)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the plans, traffic, bypasses and reconfigures: packets in = out + dropped
    /// + queued, per circuit counters add up to the totals, per-flow order is kept and
    /// the bookkeeping stays consistent after every step.
    #[test]
    fn conservation_over_random_plans_and_traffic(
        rates in proptest::collection::vec(proptest::option::of(1u64..100), 1..10),
        link in 0u64..500,
        ops in proptest::collection::vec(op(), 1..300),
        total in proptest::option::of(1usize..200),
    ) {
        let mut config = CircuitShaperConfig {
            plans: rates.iter().map(|r| r.map(|m| CircuitPlan::new(mbit(m)))).collect(),
            idle_release_ns: 20 * MS,
            circuit_packet_limit: 64,
            // Sometimes a shared limit below what the circuits may hold together.
            total_packet_limit: total.unwrap_or(usize::MAX),
            ..CircuitShaperConfig::default()
        };
        config.link.rate = mbit(link);
        let mut q: CircuitShaper<TestPacket> = CircuitShaper::new(&config).unwrap();
        let mut now = 0u64;
        let (mut offered, mut delivered, mut bypassed) = (0u64, 0u64, 0u64);
        let mut seqs = [0u64; 256];
        let mut epochs = [0u32; 12];
        let mut last: std::collections::HashMap<u32, u64> = Default::default();
        // CAKE's set-associative table (sch_cake.c `cake_hash`) lets a flow that finds no
        // free way share another's queue and take its tag, so the owner's next packets may
        // start a queue of their own, ahead of its older ones: with 64 flows per tin a busy
        // class can hit that. Order is promised only while no instance saw a collision.
        let reordered = std::cell::Cell::new(None);
        let mut collided = false;
        let mut check = |p: &TestPacket| {
            if let Some(s) = last.insert(p.flow, p.seq) {
                if p.seq <= s && reordered.get().is_none() {
                    reordered.set(Some((p.flow, p.seq, s)));
                }
            }
        };
        for op in ops {
            match op {
                Op::Enqueue { slot, flow, len, ect } => {
                    let f = flow_id(&epochs, slot, flow);
                    let mut p = TestPacket::new(usize::from(len), f, seqs[usize::from(flow)]);
                    seqs[usize::from(flow)] += 1;
                    p.ect = ect;
                    let meta = PacketMeta { circuit: slot, ..udp_meta(slot.unwrap_or(99), 1, u32::from(flow), 0) };
                    q.enqueue(now, p, &meta);
                    offered += 1;
                }
                Op::Burst { slot, n } => {
                    let f = flow_id(&epochs, slot, 255);
                    let pkts: Vec<TestPacket> = (0..n).map(|_| {
                        let p = TestPacket::new(200, f, seqs[255]);
                        seqs[255] += 1;
                        p
                    }).collect();
                    let meta = PacketMeta { circuit: slot, ..udp_meta(slot.unwrap_or(99), 1, 255, 0) };
                    let metas = vec![meta; pkts.len()];
                    let done = q.bypass_burst(now, &pkts, &metas);
                    offered += pkts.len() as u64;
                    for p in &pkts[..done.packets] {
                        check(p);
                    }
                    bypassed += done.packets as u64;
                    for p in pkts.into_iter().skip(done.packets) {
                        q.enqueue(now, p, &meta);
                    }
                }
                Op::Dequeue { advance_us, n } => {
                    now += u64::from(advance_us) * 1000;
                    for _ in 0..n {
                        match q.dequeue(now) {
                            Dequeue::Packet(p) => { check(&p); delivered += 1; }
                            _ => break,
                        }
                    }
                }
                Op::Reconfigure { slot, rate_mbit, diffserv, remove } => {
                    let mut plans: Vec<Option<CircuitPlan>> = config.plans.to_vec();
                    let s = usize::from(slot);
                    if plans.len() <= s {
                        plans.resize(s + 1, None);
                    }
                    plans[s] = if remove {
                        None
                    } else {
                        let mut p = CircuitPlan::new(mbit(u64::from(rate_mbit)));
                        if diffserv {
                            p.cake.diffserv = DiffservMode::Diffserv4;
                        }
                        Some(p)
                    };
                    config.plans = plans.into();
                    // The slot's traffic may now go to another queue (its own or the
                    // default class's) while older packets drain from the previous one:
                    // order is only promised within each, so its flows start afresh.
                    epochs[s] += 1;
                    let before = q.len();
                    q.reconfigure(&config).unwrap();
                    prop_assert_eq!(q.len(), before, "a reconfigure dropped packets");
                }
                Op::LinkRate { mbit: m } => q.set_rate(mbit(u64::from(m))),
            }
            if let Err(e) = q.check_invariants() {
                panic!("{e}");
            }
            let collisions = |c: &qdisc::circuit::CircuitCake<TestPacket>| {
                c.stats().tins.iter().map(|t| t.way_collisions).sum::<u64>()
            };
            collided |= (0..16).filter_map(|slot| q.instance(slot)).chain(q.default_instance())
                .any(|c| collisions(c) > 0);
            if let Some((flow, seq, after)) = reordered.get() {
                prop_assert!(collided, "flow {} reordered (seq {} after {}) without a way collision", flow, seq, after);
            }
        }
        // Drain, then account for everything.
        for _ in 0..100_000 {
            match q.dequeue(now) {
                Dequeue::Packet(p) => { check(&p); delivered += 1; }
                Dequeue::NotBefore(t) => now = t,
                Dequeue::Empty => break,
            }
        }
        prop_assert!(q.is_empty());
        if let Some((flow, seq, after)) = reordered.get() {
            prop_assert!(collided, "flow {} reordered (seq {} after {}) without a way collision", flow, seq, after);
        }
        let t = q.totals();
        prop_assert_eq!(t.sent_packets, delivered + bypassed);
        prop_assert_eq!(offered, delivered + bypassed + t.dropped_total());
    }
}

/// Circuits as `scripts/bench-circuits-tree` runs them: 218 kbit/s plans, ten flows of
/// 1500-byte packets each, offered 1.1 times the plan in a burst of ten (the generator
/// visits a circuit's flows one after the other), under a node capped at 0.72 of their
/// plans: each circuit's fair share is the cap over the circuits, a packet every 80 ms.
/// A worker busy with other work serves the circuits every 2 ms, at most 6 packets (the
/// cap is 5.2 packets per 2 ms), so circuits wait on the ready ring for their turn.
/// `total_limit` is the circuits' shared limit. Returns the node's delivered bytes over
/// its cap, and each circuit's over its fair share, sorted, over a minute.
fn slow_circuits_under_a_node(total_limit: usize, poll: Option<(u64, usize)>) -> (f64, Vec<f64>) {
    use qdisc::rate_tree::{TreeNode, TreeSyncConfig};
    let circuits = 200u32;
    let plan = Rate::from_bits_per_sec(218_000);
    let cap = Rate::from_bytes_per_sec(plan.bytes_per_sec() * u64::from(circuits) * 72 / 100);
    let mut config = CircuitShaperConfig {
        plans: (0..circuits)
            .map(|_| {
                let mut p = CircuitPlan::new(plan);
                p.parent = Some(0);
                Some(p)
            })
            .collect(),
        total_packet_limit: total_limit,
        ..CircuitShaperConfig::default()
    };
    config.link.rate = mbit(10_000);
    let node = TreeNode {
        parent: None,
        cap: Some(cap),
        is_virtual: false,
    };
    let sync = TreeSyncConfig::for_leaves(10_000);
    config.rate_tree = Some(qdisc::circuit::TreeRef::build(&config, &[node], sync).unwrap());
    let mut sim = Sim::new(&config);
    let each = Rate::from_bytes_per_sec(plan.bytes_per_sec() * 11 / 100);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for slot in 0..circuits {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let start = rng % (SEC / 2);
        for f in 0..10 {
            sim.add(Some(slot), 1500, each, start + f * 1000, u64::MAX);
        }
    }
    sim.poll = poll;
    let (from, to) = (5 * SEC, 65 * SEC);
    sim.window = (from, to);
    sim.run_until(to);
    let secs = (to - from) as f64 / SEC as f64;
    let fair = cap.bytes_per_sec() as f64 * secs / f64::from(circuits);
    let mut ratios: Vec<f64> = (0..circuits as usize)
        .map(|c| {
            let bytes: u64 = sim.recs[c * 10..c * 10 + 10]
                .iter()
                .map(|r| r.window_bytes)
                .sum();
            bytes as f64 / fair
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let node = ratios.iter().sum::<f64>() / f64::from(circuits);
    (node, ratios)
}

#[test]
fn slow_circuits_waiting_for_a_busy_worker_still_share_their_node_fairly() {
    // At a sync on the ready ring, a circuit its shaper released must count as held back
    // for rate, not as thin: read as thin, each got a thin leaf's share (up to its plan)
    // and the node delivered 1.15 times its cap.
    let (node, ratios) = slow_circuits_under_a_node(usize::MAX, Some((2 * MS, 6)));
    assert!(
        (node - 1.0).abs() < 0.01,
        "the node's sum: {node:.4} of its cap"
    );
    for (i, r) in ratios.iter().enumerate() {
        assert!(
            (r - 1.0).abs() < 0.01,
            "circuit {i} of the sorted list: {r:.4} of its share"
        );
    }
}

#[test]
fn over_the_shared_limit_the_longest_queue_pays_and_every_circuit_keeps_its_share() {
    // Every circuit overloaded and together over the shared limit (twenty packets each):
    // when the arriving circuit paid whenever none stood out, the circuits whose bursts
    // came at the limit paid again and again, ran dry between bursts and delivered less
    // (here a tenth of them under 0.82 of their share, the lowest 0.57). With the longest
    // paying, nine in ten are within 2 % and the lowest above 0.7 (a few circuits whose
    // flows the limit hit keep BLUE's drop probability for a while; in the binary, with
    // 10 000 circuits, 99.4 % were within 1 %: BENCHMARKS.md, "Circuits under a node
    // tree").
    let (node, ratios) = slow_circuits_under_a_node(200 * 20, None);
    assert!(
        (node - 1.0).abs() < 0.01,
        "the node's sum: {node:.4} of its cap"
    );
    let (lo, p10, p90) = (ratios[0], ratios[20], ratios[180]);
    assert!(
        lo > 0.7 && (p10 - 1.0).abs() < 0.02 && (p90 - 1.0).abs() < 0.02,
        "per circuit: lowest {lo:.4}, p10 {p10:.4}, p90 {p90:.4} of its share"
    );
}
