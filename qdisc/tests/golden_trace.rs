//! A pinned digest of CAKE's exact behaviour, so that a change meant to be a pure
//! optimisation can prove it changed nothing.
//!
//! Random configurations (every diffserv and flow-isolation mode, unlimited and shaped
//! rates, ingress, wash, overhead, small packet and memory limits, the ACK filter, the NIC
//! hash) each run a random workload of bursts and dequeues in virtual time. Every enqueue
//! outcome, every dequeued packet (its id and ECN mark), every `NotBefore` time, the rate
//! changes in between and the final counters go into one FNV-1a digest, which is compared
//! with the value pinned below. The property tests check invariants; this test checks that
//! nothing at all moved: which packet leaves when, which one is dropped, which one is marked.
//!
//! When a change is meant to alter behaviour (a bug fix, a deliberate deviation from Linux),
//! the digest changes with it: run `GOLDEN_TRACE_PRINT=1 cargo test -p qdisc --test
//! golden_trace -- --nocapture`, check that the change explains it, and pin the new values
//! (64 and 300 configurations) in the same commit. For an A/B check of an optimisation,
//! `GOLDEN_TRACE_CONFIGS=300` runs more configurations (build with `--release`; the 300
//! digest is also checked by every release-build test run).
//!
//! The digest says *that* behaviour moved, not *what*. The lockstep test runs the same
//! workloads through `Cake` and the plain reference model of `sch_cake.c` (`reference/`)
//! side by side and names the first event where they disagree (`LOCKSTEP_ONLY=n` runs
//! configuration `n` alone, e.g. to debug a disagreement).

mod reference;

use qdisc::cake::{AckFilterMode, Cake, CakeConfig, ConfigError, DiffservMode, FlowMode};
use qdisc::testing::{udp_meta, TestPacket};
use qdisc::{Dequeue, DropReason, Enqueued, PacketMeta, Qdisc, Rate, TcpAckInfo};

use reference::lockstep::Lockstep;

/// The digest of the default run (`CONFIGS` configurations).
const PINNED: u64 = 0x97bad87386d7d77f;

/// Configurations in the default run: enough to reach every mode, small enough for a debug
/// build.
const CONFIGS: u64 = 64;

/// The digest of the longer run (`LONG_CONFIGS` configurations).
const PINNED_LONG: u64 = 0xb91e44d77f0409db;

/// Configurations in the longer run, the A/B check of an optimisation.
const LONG_CONFIGS: u64 = 300;

/// The pinned digest of a run of `configs` configurations, if one is pinned.
fn pinned(configs: u64) -> Option<u64> {
    match configs {
        CONFIGS => Some(PINNED),
        LONG_CONFIGS => Some(PINNED_LONG),
        _ => None,
    }
}

/// What a workload drives: `Cake` alone, or `Cake` in lockstep with the reference.
trait Subject {
    fn enqueue(&mut self, now: u64, pkt: TestPacket, meta: &PacketMeta) -> Enqueued;
    fn dequeue(&mut self, now: u64) -> Dequeue<TestPacket>;
    fn set_rate(&mut self, rate: Rate);
    /// The `Cake` whose final state goes into the digest.
    fn cake(&self) -> &Cake<TestPacket>;
    /// Called once at the end of the workload.
    fn finish(&mut self) {}
}

impl Subject for Cake<TestPacket> {
    fn enqueue(&mut self, now: u64, pkt: TestPacket, meta: &PacketMeta) -> Enqueued {
        Qdisc::enqueue(self, now, pkt, meta)
    }

    fn dequeue(&mut self, now: u64) -> Dequeue<TestPacket> {
        Qdisc::dequeue(self, now)
    }

    fn set_rate(&mut self, rate: Rate) {
        Qdisc::set_rate(self, rate);
    }

    fn cake(&self) -> &Cake<TestPacket> {
        self
    }
}

impl Subject for Lockstep {
    fn enqueue(&mut self, now: u64, pkt: TestPacket, meta: &PacketMeta) -> Enqueued {
        Lockstep::enqueue(self, now, pkt, meta)
    }

    fn dequeue(&mut self, now: u64) -> Dequeue<TestPacket> {
        Lockstep::dequeue(self, now)
    }

    fn set_rate(&mut self, rate: Rate) {
        Lockstep::set_rate(self, rate);
    }

    fn cake(&self) -> &Cake<TestPacket> {
        &self.cake
    }

    fn finish(&mut self) {
        self.compare_counters();
    }
}

/// FNV-1a over 64-bit words: stable across Rust releases, unlike `DefaultHasher`.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn word(&mut self, v: u64) {
        for b in v.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// xorshift64: the workload's only source of randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

fn reason_code(r: Option<DropReason>) -> u64 {
    match r {
        None => 0,
        Some(r) => 1 + r as u64,
    }
}

fn random_config(r: &mut Rng) -> CakeConfig {
    let mut c = CakeConfig {
        diffserv: DiffservMode::ALL[r.below(5) as usize],
        flow_mode: FlowMode::ALL[r.below(8) as usize],
        ..CakeConfig::default()
    };
    c.rate = if r.one_in(3) {
        Rate::UNLIMITED
    } else {
        Rate::from_bits_per_sec(1_000_000 + r.below(10_000_000_000))
    };
    c.ingress = r.one_in(4);
    c.wash = r.one_in(4);
    c.nat = r.one_in(4);
    if r.one_in(3) {
        c.overhead = r.below(60) as i32 - 10;
    }
    if r.one_in(4) {
        c.packet_limit = 50 + r.below(2000) as u32;
    }
    if r.one_in(4) {
        c.memlimit = Some(20_000 + r.below(2_000_000));
    }
    c.ack_filter = match r.below(6) {
        0 => AckFilterMode::Filter,
        1 => AckFilterMode::Aggressive,
        _ => AckFilterMode::Off,
    };
    c
}

/// Runs configuration `seed` on `Cake` and returns its digest.
fn run_one(seed: u64) -> u64 {
    run_with(seed, Cake::new).0
}

/// Runs configuration `seed` on what `make` builds from it; returns the digest and the
/// subject (`None` when the configuration was refused).
fn run_with<S: Subject>(
    seed: u64,
    make: impl FnOnce(&CakeConfig) -> Result<S, ConfigError>,
) -> (u64, Option<S>) {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let cfg = random_config(&mut r);
    let mut h = Fnv::new();
    let mut q = match make(&cfg) {
        Ok(q) => q,
        Err(e) => {
            for b in e.to_string().bytes() {
                h.word(u64::from(b));
            }
            return (h.0, None);
        }
    };
    let cap = if r.one_in(2) { 40 } else { 3000 };
    let flows = 1 + r.below(cap) as u32;
    let srcs = 1 + r.below(70) as u32;
    let dsts = 1 + r.below(20) as u32;
    const DSCP: [u8; 10] = [0, 0, 0, 8, 46, 10, 26, 34, 1, 48];
    let metas: Vec<PacketMeta> = (0..flows)
        .map(|f| {
            let mut m = udp_meta(
                f % srcs,
                f % dsts,
                f,
                DSCP[(f as usize * 7 + seed as usize) % 10],
            );
            if f % 5 == 0 {
                m.ecn = 2;
            }
            if r.one_in(8) {
                m.l4_hash = Some(r.next() as u32);
            }
            m
        })
        .collect();
    let mut acks = vec![0u32; flows as usize];
    let mut now = 1_000_000 + r.below(1_000_000);
    let mut id = 0u64;
    let steps = 1500 + r.below(2500);
    let burst = 1 + r.below(40);
    let long_gaps = r.one_in(3);
    for _ in 0..steps {
        now += if long_gaps {
            r.below(200_000)
        } else {
            r.below(3_000)
        };
        for _ in 0..r.below(burst + 1) {
            let f = if r.one_in(3) {
                r.below(4) as u32 % flows
            } else {
                r.below(u64::from(flows)) as u32
            };
            let meta = &metas[f as usize];
            let len = if r.one_in(2) {
                60 + r.below(100) as u32
            } else {
                60 + r.below(1454) as u32
            };
            // A third of the flows send pure ACKs, so the ACK filter has work.
            let ack = (f % 3 == 0).then(|| {
                acks[f as usize] += 1 + r.below(3000) as u32;
                TcpAckInfo {
                    flags: 0x10,
                    ack_seq: acks[f as usize],
                    ..TcpAckInfo::default()
                }
            });
            id += 1;
            let pkt = TestPacket {
                ect: meta.ecn != 0,
                ack,
                ..TestPacket::new(len as usize, f, id)
            };
            let e = q.enqueue(now, pkt, meta);
            h.word(u64::from(e.dropped_packets));
            h.word(e.dropped_bytes);
            h.word(reason_code(e.reason));
        }
        for _ in 0..r.below(burst + 2) {
            match q.dequeue(now) {
                Dequeue::Packet(p) => {
                    h.word(p.seq);
                    h.word(u64::from(p.ce));
                }
                Dequeue::NotBefore(t) => {
                    h.word(u64::MAX - 1);
                    h.word(t);
                    break;
                }
                Dequeue::Empty => {
                    h.word(u64::MAX);
                    break;
                }
            }
        }
        if r.one_in(500) && !cfg.rate.is_unlimited() {
            q.set_rate(Rate::from_bits_per_sec(1_000_000 + r.below(10_000_000_000)));
        }
    }
    q.finish();
    let q_cake = q.cake();
    let s = q_cake.stats();
    for t in &s.tins[..s.tin_count] {
        for v in [
            t.sent_packets,
            t.sent_bytes,
            t.backlog_bytes,
            t.dropped_packets,
            t.ecn_marked_packets,
            t.acks_dropped_packets,
            t.avg_delay_ns,
            t.peak_delay_ns,
            t.base_delay_ns,
            u64::from(t.sparse_flows),
            u64::from(t.bulk_flows),
            u64::from(t.decaying_flows),
        ] {
            h.word(v);
        }
    }
    // The six reasons there were when the digest was pinned; the ones added since are the
    // forwarder's (a port refusing a frame) and stay 0 in a qdisc.
    for v in s.drops[..6].iter().chain(&s.drop_bytes[..6]) {
        h.word(*v);
    }
    assert!(s.drops[6..]
        .iter()
        .chain(&s.drop_bytes[6..])
        .all(|&v| v == 0));
    h.word(s.overlimits);
    let (tin, flow) = q_cake.cursors();
    h.word(tin as u64);
    h.word(flow as u64);
    h.word(q_cake.len() as u64);
    h.word(q_cake.backlog_bytes());
    assert_eq!(q_cake.check_invariants(), Ok(()), "configuration {seed}");
    (h.0, Some(q))
}

fn digest(configs: u64) -> u64 {
    let mut h = Fnv::new();
    for seed in 0..configs {
        h.word(run_one(seed));
    }
    h.0
}

/// Configurations to run: `GOLDEN_TRACE_CONFIGS`, or the default run's.
fn configs_to_run() -> u64 {
    std::env::var("GOLDEN_TRACE_CONFIGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CONFIGS)
}

fn assert_pinned(configs: u64, d: u64) {
    if std::env::var_os("GOLDEN_TRACE_PRINT").is_some() || configs != CONFIGS {
        println!("golden trace: {configs} configurations, digest {d:#018x}");
    }
    if let Some(pin) = pinned(configs) {
        assert_eq!(
            d, pin,
            "CAKE's exact behaviour changed ({configs} configurations: digest {d:#018x}, \
             pinned {pin:#018x}); if the change is meant to alter behaviour, pin the new \
             digests (see the module docs)"
        );
    }
}

#[test]
fn cake_behaves_exactly_as_pinned() {
    let configs = configs_to_run();
    assert_pinned(configs, digest(configs));
}

/// The longer run's digest, checked in every release-build test run (a debug build takes
/// most of a minute over it).
#[test]
#[cfg_attr(debug_assertions, ignore = "300 configurations: run with --release")]
fn cake_behaves_exactly_as_pinned_over_the_long_run() {
    assert_pinned(LONG_CONFIGS, digest(LONG_CONFIGS));
}

/// Every golden workload through `Cake` and the reference in lockstep: the first event
/// where they disagree fails the test with both outcomes. The digest of `Cake`'s side must
/// still be the pinned one, so the lockstep provably ran the pinned workloads.
#[test]
fn cake_agrees_with_the_reference_event_by_event() {
    let configs = configs_to_run();
    let mut h = Fnv::new();
    let mut events = 0;
    let mut refused = 0;
    let only: Option<u64> = std::env::var("LOCKSTEP_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    for seed in 0..configs {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let (d, lockstep) = run_with(seed, |cfg| {
            Lockstep::new(cfg, format!("golden configuration {seed}"))
        });
        match lockstep {
            Some(l) => events += l.events(),
            None => refused += 1,
        }
        h.word(d);
    }
    println!(
        "lockstep: {configs} golden configurations ({refused} refused by Cake), {events} \
         events, no disagreement"
    );
    if only.is_none() {
        assert_pinned(configs, h.0);
    }
}

#[test]
fn the_digest_tells_configurations_apart_and_repeats_itself() {
    assert_ne!(run_one(0), run_one(1));
    assert_eq!(run_one(2), run_one(2));
}
