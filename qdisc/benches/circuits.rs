//! Enqueue+dequeue cost per packet (ns) of the per-circuit shaper against one link-wide
//! CAKE at the same offered load, in virtual time, and the shaper's memory per idle slot
//! and per live instance.
//!
//! Every row offers 100 000 flows; in the circuit rows flow `f` belongs to circuit
//! `f % 10 000`. Packets are 64-byte frames, or an IMIX cycle (seven 64-byte, four
//! 576-byte and one 1500-byte frame). Each step enqueues a burst of 32 packets (flows in
//! round robin), then dequeues 32, the way the forwarder's TX queues run; the clock
//! advances 100 ns per packet (10 Mpps offered). A start with 10 000 packets queued (one per
//! circuit, within the link CAKE's packet limit) keeps a standing backlog.
//!
//! The rows' flow order puts consecutive packets in different circuits (the worst case for
//! the circuit layer: every enqueue touches a cold instance), except `circuits_grouped`,
//! where a circuit's ten flows follow each other (what a receive burst from one subscriber
//! looks like).
//!
//! * `link_cake`: one CAKE (diffserv3, triple-isolate), unlimited: the baseline.
//! * `circuits`: 10 000 circuits at 100 Mbit/s each (their plans never bind at 1000
//!   packets per second each), default CAKE per circuit, no link cap: the cost of the
//!   circuit layer itself.
//! * `circuits_held`: plans of 256 kbit/s, half what each circuit is offered at 64 bytes,
//!   so circuits wait in the timer wheel between packets.
//! * `circuits_capped`: 100 Mbit/s plans under a link cap of half the offered load.
//! * `circuits_grouped`: `circuits` with a circuit's flows consecutive.
//!
//! The memory figures are printed once, before the timings (`memory:` lines).
//!
//! Run: `cargo bench -p qdisc --bench circuits -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use qdisc::cake::{Cake, CakeConfig};
use qdisc::circuit::{CircuitPlan, CircuitShaper, CircuitShaperConfig};
use qdisc::testing::{udp_meta, LenPacket};
use qdisc::{PacketMeta, Qdisc, Rate};

const CIRCUITS: u32 = 10_000;
const FLOWS: u32 = 100_000;
const BURST: usize = 32;
const STEP_NS: u64 = 100;
const IMIX: [u32; 12] = [64, 64, 64, 64, 64, 64, 64, 576, 576, 576, 576, 1500];

/// Flow `f`'s meta; its circuit is `f % CIRCUITS`, or `f / (FLOWS / CIRCUITS)` when
/// `grouped`.
fn metas(circuits: bool, grouped: bool) -> Vec<PacketMeta> {
    (0..FLOWS)
        .map(|f| {
            let c = if grouped {
                f / (FLOWS / CIRCUITS)
            } else {
                f % CIRCUITS
            };
            // Each circuit is one subscriber host talking to 16 destinations.
            let m = udp_meta(c, f % 16, f, 0);
            PacketMeta {
                circuit: circuits.then_some(c),
                ..m
            }
        })
        .collect()
}

fn shaper_config(plan: Rate, link: Rate) -> CircuitShaperConfig {
    let mut config = CircuitShaperConfig {
        plans: (0..CIRCUITS)
            .map(|_| Some(CircuitPlan::new(plan)))
            .collect::<Arc<[_]>>(),
        ..CircuitShaperConfig::default()
    };
    config.link.rate = link;
    config
}

fn shaper(plan: Rate, link: Rate) -> CircuitShaper<LenPacket> {
    CircuitShaper::new(&shaper_config(plan, link)).expect("valid bench config")
}

fn link_cake() -> Cake<LenPacket> {
    Cake::new(&CakeConfig::default()).expect("valid bench config")
}

/// Bursts of [`BURST`] enqueues then [`BURST`] dequeues; reports ns per packet.
// The harness times whole bursts itself to report per packet; the qdisc still never reads
// a clock.
#[allow(clippy::disallowed_methods)]
fn run<Q: Qdisc<LenPacket>>(
    c: &mut Criterion,
    group: &str,
    row: &str,
    mut q: Q,
    metas: &[PacketMeta],
    lens: &[u32],
) {
    let mut now = 1_000_000u64;
    // One packet for each of the first 10 000 circuits (or flows, without circuits).
    let mut seen = vec![false; metas.len()];
    let mut queued = 0;
    for (i, m) in metas.iter().enumerate() {
        let key = m.circuit.map_or(i, |c| c as usize);
        if queued < CIRCUITS && !seen[key] {
            seen[key] = true;
            q.enqueue(now, LenPacket(lens[i % lens.len()]), m);
            queued += 1;
        }
    }
    let mut i = 0usize;
    let mut l = 0usize;
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new(row, metas.len()), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters.div_ceil(BURST as u64) {
                for _ in 0..BURST {
                    now += STEP_NS;
                    q.enqueue(now, LenPacket(lens[l]), &metas[i]);
                    i += 1;
                    if i == metas.len() {
                        i = 0;
                    }
                    l += 1;
                    if l == lens.len() {
                        l = 0;
                    }
                }
                for _ in 0..BURST {
                    black_box(q.dequeue(now));
                }
            }
            start.elapsed()
        })
    });
    g.finish();
}

/// Prints the memory of the shaper with every slot idle and with every circuit active.
fn memory() {
    let empty = shaper(Rate::from_bits_per_sec(100_000_000), Rate::UNLIMITED);
    let none = CircuitShaper::<LenPacket>::new(&CircuitShaperConfig::default())
        .expect("valid default config");
    let idle = empty.memory_bytes();
    let per_idle = (idle - none.memory_bytes()) as f64 / f64::from(CIRCUITS);
    let mut busy = empty;
    let ms = metas(true, false);
    for m in ms.iter().take(CIRCUITS as usize) {
        busy.enqueue(0, LenPacket(64), m);
    }
    let active = busy.memory_bytes();
    let per_active = (active - idle) as f64 / busy.active_instances() as f64;
    let cake = link_cake();
    println!(
        "memory: idle slot {per_idle:.0} B (SlotState and scheduler entries: {} B); \
         active instance {per_active:.0} B ({} instances, {:.1} MiB in all); \
         link-wide Cake {} B",
        CircuitShaper::<LenPacket>::idle_slot_bytes(),
        busy.active_instances(),
        active as f64 / f64::from(1 << 20),
        cake.preallocated_bytes() + cake.slab_bytes(),
    );
}

fn benches(c: &mut Criterion) {
    memory();
    let link_metas = metas(false, false);
    let circuit_metas = metas(true, false);
    let grouped_metas = metas(true, true);
    let unlimited = Rate::UNLIMITED;
    let plan = Rate::from_bits_per_sec(100_000_000);
    for (name, lens) in [("64B", &[64u32][..]), ("imix", &IMIX[..])] {
        let group = format!("circuits_{name}");
        run(c, &group, "link_cake", link_cake(), &link_metas, lens);
        run(
            c,
            &group,
            "circuits",
            shaper(plan, unlimited),
            &circuit_metas,
            lens,
        );
        let held = Rate::from_bits_per_sec(256_000);
        run(
            c,
            &group,
            "circuits_held",
            shaper(held, unlimited),
            &circuit_metas,
            lens,
        );
        // Half the offered load: 10 Mpps of the mix's mean frame.
        let mean = lens.iter().map(|&l| u64::from(l)).sum::<u64>() / lens.len() as u64;
        let cap = Rate::from_bytes_per_sec(mean * 10_000_000 / 2);
        run(
            c,
            &group,
            "circuits_capped",
            shaper(plan, cap),
            &circuit_metas,
            lens,
        );
        run(
            c,
            &group,
            "circuits_grouped",
            shaper(plan, unlimited),
            &grouped_metas,
            lens,
        );
    }
}

criterion_group!(circuit_benches, benches);
criterion_main!(circuit_benches);
