//! The `circuits` criterion bench's loop (`qdisc/benches/circuits.rs`) as a plain program
//! for callgrind: a fixed number of packets through one link-wide CAKE or through the
//! per-circuit shaper with 10 000 circuits, the same packets, so that instructions and
//! simulated cache misses per packet compare the two on a machine too busy for timings.
//!
//! Run: `cargo build --release -p cakewalk-benches --example circuits_probe`, then
//! `valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=/tmp/c.out
//! target/release/examples/circuits_probe MODE PACKETS` for MODE `link`, `circuits`,
//! `held` or `grouped` and two run lengths (say 100000 and 200000); the difference in
//! "Collected" (and in the D1/LL misses) divided by the difference in packets is the cost
//! per packet without the setup.

use std::hint::black_box;
use std::sync::Arc;

use qdisc::cake::{Cake, CakeConfig};
use qdisc::circuit::{CircuitPlan, CircuitShaper, CircuitShaperConfig};
use qdisc::testing::{udp_meta, LenPacket};
use qdisc::{PacketMeta, Qdisc, Rate};

const CIRCUITS: u32 = 10_000;
const FLOWS: u32 = 100_000;
const BURST: usize = 32;
const STEP_NS: u64 = 100;

/// Flow `f`'s meta, as the bench builds it.
fn metas(circuits: bool, grouped: bool) -> Vec<PacketMeta> {
    (0..FLOWS)
        .map(|f| {
            let c = if grouped {
                f / (FLOWS / CIRCUITS)
            } else {
                f % CIRCUITS
            };
            let m = udp_meta(c, f % 16, f, 0);
            PacketMeta {
                circuit: circuits.then_some(c),
                ..m
            }
        })
        .collect()
}

fn shaper(plan: Rate) -> CircuitShaper<LenPacket> {
    let config = CircuitShaperConfig {
        plans: (0..CIRCUITS)
            .map(|_| Some(CircuitPlan::new(plan)))
            .collect::<Arc<[_]>>(),
        ..CircuitShaperConfig::default()
    };
    CircuitShaper::new(&config).expect("valid probe config")
}

/// The enqueue out of line, as criterion's generic harness calls it.
#[inline(never)]
fn enqueue<Q: Qdisc<LenPacket>>(q: &mut Q, now: u64, pkt: LenPacket, meta: &PacketMeta) {
    black_box(q.enqueue(now, pkt, meta));
}

/// The dequeue out of line; see [`enqueue`].
#[inline(never)]
fn dequeue<Q: Qdisc<LenPacket>>(q: &mut Q, now: u64) {
    black_box(q.dequeue(now));
}

fn run<Q: Qdisc<LenPacket>>(mut q: Q, metas: &[PacketMeta], packets: u64) {
    let mut now = 1_000_000u64;
    let mut seen = vec![false; metas.len()];
    let mut queued = 0;
    for (i, m) in metas.iter().enumerate() {
        let key = m.circuit.map_or(i, |c| c as usize);
        if queued < CIRCUITS && !seen[key] {
            seen[key] = true;
            q.enqueue(now, LenPacket(64), m);
            queued += 1;
        }
    }
    let mut i = 0usize;
    let mut n = 0;
    while n < packets {
        for _ in 0..BURST {
            now += STEP_NS;
            enqueue(&mut q, now, LenPacket(64), &metas[i]);
            i += 1;
            if i == metas.len() {
                i = 0;
            }
        }
        for _ in 0..BURST {
            dequeue(&mut q, now);
        }
        n += BURST as u64;
    }
    println!("{n} packets, {} queued at the end", q.len());
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "circuits".into());
    let packets: u64 = args
        .next()
        .map_or(100_000, |a| a.parse().expect("PACKETS is a number"));
    let plan = Rate::from_bits_per_sec(100_000_000);
    match mode.as_str() {
        "link" => run(
            Cake::<LenPacket>::new(&CakeConfig::default()).expect("valid probe config"),
            &metas(false, false),
            packets,
        ),
        "circuits" => run(shaper(plan), &metas(true, false), packets),
        "held" => run(
            shaper(Rate::from_bits_per_sec(256_000)),
            &metas(true, false),
            packets,
        ),
        "grouped" => run(shaper(plan), &metas(true, true), packets),
        other => panic!("unknown mode {other}: link, circuits, held or grouped"),
    }
}
