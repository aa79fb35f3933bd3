//! A rate tree in virtual time: 1 000 real CAKE leaves (`SubscriberCake`, one per circuit,
//! as `qdisc::circuit` runs them) under 3 sites and 12 access points, synced by two owners
//! through one `SharedTree`, under shifting demand.
//!
//! Every check compares quantities from the same simulated run against a plain oracle (a
//! floating-point bisection over each node's water level, written apart from the crate's
//! quickselect) or times measured on the simulation's own clock; nothing depends on the
//! machine's speed. Leaves are driven event by event: CBR arrivals at their exact times,
//! dequeues at the shaper's own wake-up times, so CAKE shapes as it would on a wire.
//!
//! Phases (1 s each, the first 1.5 s):
//! * A: every circuit greedy. Each gets at least its min and its oracle share within 2 %.
//! * B: site 0 idle but for one circuit, alone under its access point and site: it gets
//!   its full max. Half of site 1 sends thin CBR below its fair share, the rest is greedy.
//! * C: every circuit greedy again: what site 0 lent is taken back within two intervals.
//! * D: site 0 idle: its share is lent within two intervals of its last packet.
//!
//! In every phase, every node's delivered sum over every 100 ms window (but the first of
//! each phase, when demand changes) is within 1 % of its cap of the oracle's. Throughout,
//! no packet is dropped, lost or reordered, and no rate change clears a tin or moves CAKE's
//! dequeue cursors. `TREE_SIM_DEBUG=1` prints every node's rate and oracle per window.

use qdisc::cake::{CakeConfig, DiffservMode, LinkPreset, SubscriberCake};
use qdisc::rate_tree::{LeafMeter, RateTree, SharedTree, TreeLeaf, TreeNode, TreeSyncConfig};
use qdisc::testing::{udp_meta, TestPacket};
use qdisc::{Dequeue, Qdisc, Rate};

const MS: u64 = 1_000_000;
const MBIT: u64 = 1_000_000 / 8;
const PKT: usize = 500;
const INTERVAL: u64 = MS;
/// The owners sync every half interval (as `SharedTree`'s owners do), the second owner a
/// quarter interval after the first.
const OWNER_PERIOD: u64 = INTERVAL / 2;
const TICK: u64 = INTERVAL / 4;
const WINDOW: u64 = 100 * MS;
const CIRCUITS: usize = 1000;
const SITES: usize = 3;
const APS: usize = 12;
const ROOT_BPS: u64 = 1000 * MBIT;
const SITE_BPS: [u64; SITES] = [400 * MBIT, 400 * MBIT, 300 * MBIT];
const AP_BPS: u64 = 120 * MBIT;
const PLANS: [u64; 4] = [10 * MBIT, 25 * MBIT, 50 * MBIT, 100 * MBIT];
const PHASE: u64 = 1000 * MS;
/// A source switched on starts within this much, at a time of its own.
const START_SPREAD: u64 = 5 * MS;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Src {
    Off,
    Greedy,
    /// Constant bit rate, bytes per second.
    Cbr(u64),
}

fn ap_of(circuit: usize) -> usize {
    circuit % APS
}

fn site_of_ap(ap: usize) -> usize {
    ap / (APS / SITES)
}

fn plan(circuit: usize) -> (u64, u64) {
    let max = if circuit == 0 {
        100 * MBIT
    } else {
        PLANS[circuit / APS % PLANS.len()]
    };
    let min = if circuit % 5 == 1 { 2 * MBIT } else { 0 };
    (max, min)
}

fn tree() -> RateTree {
    let mut nodes: Vec<TreeNode> = SITE_BPS
        .iter()
        .map(|&cap| TreeNode {
            parent: None,
            cap: Some(Rate::from_bytes_per_sec(cap)),
            is_virtual: false,
        })
        .collect();
    nodes.extend((0..APS).map(|ap| TreeNode {
        parent: Some(site_of_ap(ap) as u32),
        cap: Some(Rate::from_bytes_per_sec(AP_BPS)),
        is_virtual: false,
    }));
    let leaves: Vec<TreeLeaf> = (0..CIRCUITS)
        .map(|c| {
            let (max, min) = plan(c);
            TreeLeaf {
                parent: Some((SITES + ap_of(c)) as u32),
                max: Rate::from_bytes_per_sec(max),
                min: (min > 0).then(|| Rate::from_bytes_per_sec(min)),
            }
        })
        .collect();
    RateTree::new(Rate::from_bytes_per_sec(ROOT_BPS), &nodes, &leaves).unwrap()
}

/// The oracle: a node's capacity split among children `(floor, demand)` at the level that
/// fills it, found by bisection on the real line.
fn split(cap: f64, kids: &[(f64, f64)]) -> Vec<f64> {
    let floors: f64 = kids.iter().map(|k| k.0).sum();
    if kids.iter().map(|k| k.1).sum::<f64>() <= cap {
        return kids.iter().map(|k| k.1).collect();
    }
    if floors >= cap {
        return kids.iter().map(|k| k.0 * cap / floors).collect();
    }
    let fill = |l: f64| kids.iter().map(|&(f, d)| l.clamp(f, d)).sum::<f64>();
    let (mut lo, mut hi) = (0.0, cap);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if fill(mid) <= cap {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    kids.iter().map(|&(f, d)| lo.clamp(f, d)).collect()
}

/// Expected rates: per circuit, per AP, per site and for the root, from each circuit's
/// offered demand.
struct Expected {
    circuit: Vec<f64>,
    ap: Vec<f64>,
    site: Vec<f64>,
    root: f64,
}

fn oracle(srcs: &[Src]) -> Expected {
    let demand: Vec<(f64, f64)> = (0..CIRCUITS)
        .map(|c| {
            let (max, min) = plan(c);
            let d = match srcs[c] {
                Src::Off => 0.0,
                Src::Greedy => max as f64,
                Src::Cbr(r) => r.min(max) as f64,
            };
            ((min as f64).min(d), d)
        })
        .collect();
    let kids_of_ap =
        |ap: usize| -> Vec<usize> { (0..CIRCUITS).filter(|&c| ap_of(c) == ap).collect() };
    let ap_demand: Vec<(f64, f64)> = (0..APS)
        .map(|ap| {
            let kids = kids_of_ap(ap);
            let d = kids
                .iter()
                .map(|&c| demand[c].1)
                .sum::<f64>()
                .min(AP_BPS as f64);
            let f = kids.iter().map(|&c| demand[c].0).sum::<f64>().min(d);
            (f, d)
        })
        .collect();
    let aps_of_site =
        |s: usize| -> Vec<usize> { (0..APS).filter(|&ap| site_of_ap(ap) == s).collect() };
    let site_demand: Vec<(f64, f64)> = (0..SITES)
        .map(|s| {
            let aps = aps_of_site(s);
            let d = aps
                .iter()
                .map(|&a| ap_demand[a].1)
                .sum::<f64>()
                .min(SITE_BPS[s] as f64);
            let f = aps.iter().map(|&a| ap_demand[a].0).sum::<f64>().min(d);
            (f, d)
        })
        .collect();
    let site = split(ROOT_BPS as f64, &site_demand);
    let mut ap = vec![0.0; APS];
    for (s, &site_rate) in site.iter().enumerate() {
        let aps = aps_of_site(s);
        let kids: Vec<(f64, f64)> = aps.iter().map(|&a| ap_demand[a]).collect();
        for (&a, g) in aps.iter().zip(split(site_rate, &kids)) {
            ap[a] = g;
        }
    }
    let mut circuit = vec![0.0; CIRCUITS];
    for (a, &ap_rate) in ap.iter().enumerate() {
        let kids = kids_of_ap(a);
        let k: Vec<(f64, f64)> = kids.iter().map(|&c| demand[c]).collect();
        for (&c, g) in kids.iter().zip(split(ap_rate, &k)) {
            circuit[c] = g;
        }
    }
    Expected {
        root: site.iter().sum(),
        circuit,
        ap,
        site,
    }
}

struct Circuit {
    index: usize,
    cake: SubscriberCake<TestPacket>,
    meter: LeafMeter,
    src: Src,
    next_arrival: u64,
    /// When the shaper next lets a packet out (`u64::MAX`: nothing queued).
    wake: u64,
    enqueued: u64,
    sent: u64,
    delivered_bytes: u64,
    last_departure: u64,
    rate_changes: u64,
}

impl Circuit {
    fn new(index: usize, shared: &SharedTree) -> Circuit {
        let meter = LeafMeter::new(shared, index as u32, 0);
        let mut config = CakeConfig {
            rate: meter.applied(),
            diffserv: DiffservMode::Besteffort,
            ..CakeConfig::default()
        };
        LinkPreset::Raw.apply(&mut config);
        Circuit {
            index,
            cake: SubscriberCake::new(&config).unwrap(),
            meter,
            src: Src::Off,
            next_arrival: u64::MAX,
            wake: u64::MAX,
            enqueued: 0,
            sent: 0,
            delivered_bytes: 0,
            last_departure: 0,
            rate_changes: 0,
        }
    }

    /// Switches the source at `now`; it starts within [`START_SPREAD`], at a time of its own,
    /// so that circuits with equal shares are not in phase (they would all cross a
    /// measurement window's edge together).
    fn set_source(&mut self, src: Src, now: u64) {
        self.src = src;
        self.next_arrival = match src {
            Src::Off => u64::MAX,
            _ => now + (self.index as u64 * 7_919_000) % START_SPREAD,
        };
    }

    fn enqueue(&mut self, now: u64) {
        let flow = self.index as u32;
        let pkt = TestPacket::new(PKT, flow, self.enqueued);
        let r = self.cake.enqueue(now, pkt, &udp_meta(flow, flow, flow, 0));
        assert_eq!(
            r.dropped_packets, 0,
            "circuit {} dropped at {now}",
            self.index
        );
        self.enqueued += 1;
    }

    /// A greedy source keeps two packets queued: always backlogged, never long enough for
    /// COBALT to drop.
    fn top_up(&mut self, now: u64) {
        while self.src == Src::Greedy && self.cake.len() < 2 {
            self.enqueue(now);
        }
    }

    fn dequeue_all(&mut self, now: u64) {
        loop {
            match self.cake.dequeue(now) {
                Dequeue::Packet(p) => {
                    assert_eq!(p.seq, self.sent, "circuit {} reordered or lost", self.index);
                    self.sent += 1;
                    self.delivered_bytes += p.len as u64;
                    self.meter.delivered(p.len as u64);
                    self.last_departure = now;
                    self.top_up(now);
                }
                Dequeue::NotBefore(t) => {
                    assert!(t > now, "the shaper woke us at {now} for {t}");
                    self.wake = t;
                    return;
                }
                Dequeue::Empty => {
                    self.wake = u64::MAX;
                    return;
                }
            }
        }
    }

    /// Runs the circuit's events up to `t`, each at its own time.
    fn advance(&mut self, t: u64) {
        loop {
            let ev = self.next_arrival.min(self.wake);
            if ev > t {
                return;
            }
            if self.next_arrival <= self.wake {
                let now = self.next_arrival;
                match self.src {
                    Src::Cbr(rate) => {
                        self.enqueue(now);
                        self.next_arrival = now + PKT as u64 * 1_000_000_000 / rate;
                    }
                    Src::Greedy => {
                        self.top_up(now);
                        self.next_arrival = u64::MAX;
                    }
                    Src::Off => unreachable!("an idle source has no arrivals"),
                }
                self.dequeue_all(now);
            } else {
                self.dequeue_all(self.wake);
            }
        }
    }

    /// The owner's sync of this leaf: publish, then (after the owner's computation) apply.
    fn publish(&mut self, shared: &SharedTree, now: u64) {
        self.meter.publish(shared, now, self.cake.backlog_bytes());
    }

    fn apply(&mut self, shared: &SharedTree, now: u64) {
        if let Some(rate) = self.meter.take_share(shared) {
            let before = (
                self.cake.len(),
                self.cake.backlog_bytes(),
                self.cake.cursors(),
            );
            self.cake.set_rate(rate);
            let after = (
                self.cake.len(),
                self.cake.backlog_bytes(),
                self.cake.cursors(),
            );
            assert_eq!(
                before, after,
                "a rate change touched circuit {}'s queues",
                self.index
            );
            self.rate_changes += 1;
            self.dequeue_all(now);
        }
    }
}

struct Sim {
    shared: SharedTree,
    circuits: Vec<Circuit>,
    now: u64,
    /// Per 100 ms window: (window start, bytes each circuit delivered in it).
    windows: Vec<(u64, Vec<u64>)>,
    window_mark: Vec<u64>,
    /// Each circuit's applied rate (bytes/s) at every owner period, from `snapshot_from`.
    snapshots: Vec<(u64, Vec<u64>)>,
}

impl Sim {
    fn new() -> Sim {
        let config = TreeSyncConfig {
            interval_ns: INTERVAL,
            ..TreeSyncConfig::default()
        };
        let shared = SharedTree::new(tree(), config);
        let circuits = (0..CIRCUITS).map(|c| Circuit::new(c, &shared)).collect();
        Sim {
            shared,
            circuits,
            now: 0,
            windows: Vec::new(),
            window_mark: vec![0; CIRCUITS],
            snapshots: Vec::new(),
        }
    }

    fn set_sources(&mut self, f: impl Fn(usize) -> Src) {
        let now = self.now;
        for c in &mut self.circuits {
            c.set_source(f(c.index), now);
        }
    }

    fn run_until(&mut self, end: u64, snapshot_until: u64) {
        while self.now < end {
            let t = self.now + TICK;
            for c in &mut self.circuits {
                c.advance(t);
            }
            for owner in 0..2u64 {
                if (t + owner * OWNER_PERIOD / 2) % OWNER_PERIOD != 0 {
                    continue;
                }
                let mine = |c: &&mut Circuit| c.index as u64 % 2 == owner;
                for c in self.circuits.iter_mut().filter(mine) {
                    c.publish(&self.shared, t);
                }
                self.shared.compute_if_due(t);
                for c in self.circuits.iter_mut().filter(mine) {
                    c.apply(&self.shared, t);
                }
            }
            if t <= snapshot_until {
                let applied = self
                    .circuits
                    .iter()
                    .map(|c| c.meter.applied().bytes_per_sec());
                self.snapshots.push((t, applied.collect()));
            }
            if t % WINDOW == 0 {
                let bytes = self
                    .circuits
                    .iter()
                    .zip(&mut self.window_mark)
                    .map(|(c, mark)| {
                        let b = c.delivered_bytes - *mark;
                        *mark = c.delivered_bytes;
                        b
                    })
                    .collect();
                self.windows.push((t - WINDOW, bytes));
            }
            self.now = t;
        }
    }

    fn applied(&self) -> Vec<u64> {
        self.circuits
            .iter()
            .map(|c| c.meter.applied().bytes_per_sec())
            .collect()
    }

    /// The applied rates at the first snapshot at or after `t`.
    fn snapshot_at(&self, t: u64) -> &[u64] {
        &self
            .snapshots
            .iter()
            .find(|(at, _)| *at >= t)
            .expect("snapshot taken")
            .1
    }

    /// Checks every node's sum over the windows of `[start, end)` but the first against
    /// the oracle of `srcs`, within 1 % of the node's cap.
    fn check_node_sums(&self, phase: &str, start: u64, end: u64, srcs: &[Src]) {
        let want = oracle(srcs);
        let secs = WINDOW as f64 / 1e9;
        for (at, bytes) in self
            .windows
            .iter()
            .filter(|(at, _)| *at > start && *at < end)
        {
            let rate = |cs: &mut dyn Iterator<Item = usize>| -> f64 {
                cs.map(|c| bytes[c] as f64).sum::<f64>() / secs
            };
            let check = |name: String, got: f64, want: f64, cap: u64| {
                if std::env::var("TREE_SIM_DEBUG").is_ok() {
                    eprintln!(
                        "{phase} {} {name} {:.3} {:.3}",
                        at / MS,
                        got / MBIT as f64,
                        want / MBIT as f64
                    );
                }
                let err = (got - want).abs() / cap as f64;
                assert!(
                    err <= 0.01,
                    "{phase}, window at {} ms: {name} delivered {:.2} Mbit/s, oracle {:.2} (cap {})",
                    at / MS,
                    got / MBIT as f64,
                    want / MBIT as f64,
                    cap / MBIT
                );
                assert!(got <= cap as f64 * 1.01, "{phase}: {name} over its cap");
            };
            check("root".into(), rate(&mut (0..CIRCUITS)), want.root, ROOT_BPS);
            for (s, &cap) in SITE_BPS.iter().enumerate() {
                let got = rate(&mut (0..CIRCUITS).filter(|&c| site_of_ap(ap_of(c)) == s));
                check(format!("site {s}"), got, want.site[s], cap);
            }
            for a in 0..APS {
                let got = rate(&mut (0..CIRCUITS).filter(|&c| ap_of(c) == a));
                check(format!("ap {a}"), got, want.ap[a], AP_BPS);
            }
        }
    }

    /// Bytes each circuit delivered over the windows in `[start, end)`, as a rate.
    fn circuit_rates(&self, start: u64, end: u64) -> Vec<f64> {
        let mut sum = vec![0u64; CIRCUITS];
        let mut span = 0;
        for (_, bytes) in self
            .windows
            .iter()
            .filter(|(at, _)| *at >= start && *at < end)
        {
            for (s, b) in sum.iter_mut().zip(bytes) {
                *s += b;
            }
            span += WINDOW;
        }
        sum.iter().map(|&b| b as f64 * 1e9 / span as f64).collect()
    }
}

fn in_site0(c: usize) -> bool {
    site_of_ap(ap_of(c)) == 0
}

#[test]
fn a_thousand_cakes_share_a_three_level_tree_under_shifting_demand() {
    let mut sim = Sim::new();
    let greedy = vec![Src::Greedy; CIRCUITS];

    // A: everyone greedy.
    sim.set_sources(|_| Src::Greedy);
    sim.run_until(PHASE, 0);
    sim.check_node_sums("A", 0, PHASE, &greedy);
    let want = oracle(&greedy);
    let got = sim.circuit_rates(PHASE / 2, PHASE);
    for (c, (&got, &fair)) in got.iter().zip(&want.circuit).enumerate() {
        let (max, min) = plan(c);
        assert!(got >= min as f64 * 0.98, "circuit {c} below its min: {got}");
        assert!(got <= max as f64 * 1.01, "circuit {c} above its max");
        let err = (got - fair).abs() / fair;
        assert!(
            err <= 0.02,
            "A: circuit {c} delivered {:.3} Mbit/s, max-min fair is {:.3}",
            got / MBIT as f64,
            fair / MBIT as f64
        );
    }
    let all_greedy = sim.applied();

    // B: site 0 idle but for circuit 0; half of site 1 thin.
    let b: Vec<Src> = (0..CIRCUITS)
        .map(|c| match site_of_ap(ap_of(c)) {
            0 if c == 0 => Src::Greedy,
            0 => Src::Off,
            1 if c % 2 == 0 => Src::Cbr(MBIT * 4 / 10),
            _ => Src::Greedy,
        })
        .collect();
    sim.set_sources(|c| b[c]);
    sim.run_until(2 * PHASE, 0);
    sim.check_node_sums("B", PHASE, 2 * PHASE, &b);
    let alone = sim.circuit_rates(PHASE + WINDOW, 2 * PHASE)[0];
    assert!(
        (alone / plan(0).0 as f64 - 1.0).abs() <= 0.01,
        "B: circuit 0, alone under its node, delivered {:.2} Mbit/s of its max {}",
        alone / MBIT as f64,
        plan(0).0 / MBIT
    );

    // C: everyone greedy again: site 0's share taken back within two intervals.
    sim.set_sources(|_| Src::Greedy);
    let back = sim.now;
    sim.run_until(3 * PHASE, back + 20 * MS);
    sim.check_node_sums("C", 2 * PHASE, 3 * PHASE, &greedy);
    assert_eq!(
        sim.applied(),
        all_greedy,
        "C: the steady shares are phase A's"
    );
    // The last circuit of site 0 starts sending within 5 ms (sources start out of phase).
    let at = sim.snapshot_at(back + START_SPREAD + 2 * INTERVAL);
    let late: Vec<usize> = (0..CIRCUITS).filter(|&c| at[c] != all_greedy[c]).collect();
    assert!(
        late.is_empty(),
        "C: not taken back within two intervals: {late:?}"
    );

    // D: site 0 idle: lent within two intervals of its last packet.
    let d: Vec<Src> = (0..CIRCUITS)
        .map(|c| if in_site0(c) { Src::Off } else { Src::Greedy })
        .collect();
    sim.set_sources(|c| d[c]);
    let start = sim.now;
    sim.run_until(4 * PHASE, start + 50 * MS);
    sim.check_node_sums("D", 3 * PHASE, 4 * PHASE, &d);
    let idle_since = (0..CIRCUITS)
        .filter(|&c| in_site0(c))
        .map(|c| sim.circuits[c].last_departure)
        .max()
        .unwrap();
    assert!(idle_since < start + 40 * MS);
    let steady = sim.applied();
    let at = sim.snapshot_at(idle_since + 2 * INTERVAL);
    let late: Vec<usize> = (0..CIRCUITS)
        .filter(|&c| !in_site0(c) && at[c] != steady[c])
        .collect();
    assert!(
        late.is_empty(),
        "D: site 0's share not lent within two intervals: {late:?}"
    );
    // Site 1, held to 350 Mbit/s in A, now gets its cap: its circuits above their mins grow.
    for c in (0..CIRCUITS).filter(|&c| site_of_ap(ap_of(c)) == 1 && plan(c).1 == 0) {
        assert!(
            steady[c] > all_greedy[c],
            "D: circuit {c} did not get site 0's part"
        );
    }

    // No drops, nothing lost: every packet offered was delivered or is still queued.
    for c in &sim.circuits {
        let stats = c.cake.stats();
        assert_eq!(
            stats.drops.iter().sum::<u64>(),
            0,
            "circuit {} dropped",
            c.index
        );
        assert_eq!(stats.purged_packets, 0);
        assert_eq!(c.enqueued, c.sent + c.cake.len() as u64);
    }
    let changes: u64 = sim.circuits.iter().map(|c| c.rate_changes).sum();
    assert!(
        changes > CIRCUITS as u64,
        "the shares moved: {changes} rate changes"
    );
}
