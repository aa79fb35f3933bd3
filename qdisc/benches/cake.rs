//! Enqueue+dequeue cost per packet (ns) of CAKE and the FIFO baseline, in virtual time.
//!
//! Rows: FIFO, and CAKE in besteffort and diffserv3 with flows and triple-isolate (the
//! `cake_diffserv3_flows` rows are the goal configuration without host fairness), at 1, 64,
//! 1024 and 10 000 active flows, unlimited and shaped. The `cake_subscriber_` rows run the
//! goal configuration in a subscriber's instance (`SubscriberCake`, 64 flows per tin) at 1
//! and 64 flows.
//!
//! Each iteration enqueues one packet (flows in round robin) and dequeues one, after a
//! start with one packet queued per active flow. Packets are 1000 bytes; one row repeats
//! the goal configuration with 64-byte frames. Unlimited runs advance the clock 100 ns per
//! packet; shaped runs (10 Gbit/s) advance it by exactly one packet's serialization time,
//! so the shaper lets one packet out per iteration.
//!
//! The `_burst32` rows drive the goal configuration the way the forwarder's TX queues do:
//! 32 enqueues (an RX burst), then 32 dequeues (a TX burst). They report ns per packet.
//!
//! The `drr_floor` rows run `qdisc::testing::DrrFloor`, which keeps only CAKE's DRR++
//! skeleton, on the goal row's workload: they price what CAKE adds on top in the same run.
//!
//! Run: `cargo bench -p qdisc --bench cake -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use qdisc::cake::{Cake, CakeConfig, DiffservMode, FlowMode, SubscriberCake};
use qdisc::fifo::Fifo;
use qdisc::testing::{udp_meta, DrrFloor, LenPacket};
use qdisc::{Dequeue, PacketMeta, Qdisc, Rate};

const LEN: u32 = 1000;
const SHAPED: Rate = Rate::from_bits_per_sec(10_000_000_000);

fn metas(flows: u32, diffserv: bool) -> Vec<PacketMeta> {
    (0..flows)
        .map(|f| {
            let dscp = match (diffserv, f % 10) {
                (true, 0) => 46,
                (true, 1) => 8,
                _ => 0,
            };
            // 64 source hosts talking to 16 destination hosts.
            udp_meta(f % 64, f % 16, f, dscp)
        })
        .collect()
}

fn run<Q: Qdisc<LenPacket>>(
    c: &mut Criterion,
    name: &str,
    flows: u32,
    shaped: bool,
    q: Q,
    metas: &[PacketMeta],
) {
    run_sized(c, name, flows, shaped, q, metas, LEN);
}

/// [`run`] with packets of `len` bytes.
fn run_sized<Q: Qdisc<LenPacket>>(
    c: &mut Criterion,
    name: &str,
    flows: u32,
    shaped: bool,
    mut q: Q,
    metas: &[PacketMeta],
    len: u32,
) {
    let step = if shaped {
        u64::from(len) * 1_000_000_000 / SHAPED.bytes_per_sec()
    } else {
        100
    };
    let mut now = 1_000_000u64;
    for m in metas.iter().take(flows.min(10_000) as usize) {
        q.enqueue(now, LenPacket(len), m);
    }
    let mut i = 0usize;
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    let id = BenchmarkId::new(if shaped { "shaped" } else { "unlimited" }, flows);
    group.bench_function(id, |b| {
        b.iter(|| {
            now += step;
            let m = &metas[i];
            i += 1;
            if i == metas.len() {
                i = 0;
            }
            q.enqueue(now, LenPacket(len), m);
            match q.dequeue(now) {
                Dequeue::Packet(p) => {
                    black_box(p);
                }
                other => {
                    black_box(other);
                }
            }
        })
    });
    group.finish();
}

/// [`run_sized`] in the forwarder's pattern: each step enqueues `BURST` packets, then
/// dequeues `BURST`; the time reported is per packet.
// The harness times whole bursts itself to report per packet; the qdisc still never reads
// a clock.
#[allow(clippy::disallowed_methods)]
fn run_burst<Q: Qdisc<LenPacket>>(
    c: &mut Criterion,
    name: &str,
    mut q: Q,
    metas: &[PacketMeta],
    len: u32,
) {
    const BURST: usize = 32;
    let mut now = 1_000_000u64;
    for m in metas {
        q.enqueue(now, LenPacket(len), m);
    }
    let mut i = 0usize;
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    let id = BenchmarkId::new("unlimited", metas.len());
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            // Whole bursts, at least one, covering `iters` packets.
            for _ in 0..iters.div_ceil(BURST as u64) {
                for _ in 0..BURST {
                    now += 100;
                    q.enqueue(now, LenPacket(len), &metas[i]);
                    i += 1;
                    if i == metas.len() {
                        i = 0;
                    }
                }
                for _ in 0..BURST {
                    black_box(q.dequeue(now));
                }
            }
            let packets = iters.div_ceil(BURST as u64) * BURST as u64;
            start.elapsed().mul_f64(iters as f64 / packets as f64)
        })
    });
    group.finish();
}

fn cake_config(diffserv: DiffservMode, flow_mode: FlowMode, shaped: bool) -> CakeConfig {
    CakeConfig {
        rate: if shaped { SHAPED } else { Rate::UNLIMITED },
        diffserv,
        flow_mode,
        ..CakeConfig::default()
    }
}

/// A CAKE instance of [`cake_config`] for the bench's packets.
fn cake(diffserv: DiffservMode, flow_mode: FlowMode, shaped: bool) -> Cake<LenPacket> {
    Cake::new(&cake_config(diffserv, flow_mode, shaped))
        .expect("the bench configurations are valid")
}

fn benches(c: &mut Criterion) {
    for flows in [1u32, 64, 1024, 10_000] {
        let plain = metas(flows, false);
        run(
            c,
            "fifo",
            flows,
            false,
            Fifo::<LenPacket>::new(20_000),
            &plain,
        );
        let ds = metas(flows, true);
        // The matrix: besteffort and diffserv3, flows and triple-isolate.
        for shaped in [false, true] {
            for (name, diffserv, flow_mode, metas) in [
                (
                    "cake_besteffort_flows",
                    DiffservMode::Besteffort,
                    FlowMode::Flows,
                    &plain,
                ),
                (
                    "cake_besteffort_triple",
                    DiffservMode::Besteffort,
                    FlowMode::TripleIsolate,
                    &plain,
                ),
                (
                    "cake_diffserv3_flows",
                    DiffservMode::Diffserv3,
                    FlowMode::Flows,
                    &ds,
                ),
                (
                    "cake_diffserv3_triple",
                    DiffservMode::Diffserv3,
                    FlowMode::TripleIsolate,
                    &ds,
                ),
            ] {
                let q = cake(diffserv, flow_mode, shaped);
                run(c, name, flows, shaped, q, metas);
            }
        }
        if flows <= 64 {
            // A subscriber's instance (64 flows per tin) in the goal configuration.
            for shaped in [false, true] {
                let q: SubscriberCake<LenPacket> = Cake::new(&cake_config(
                    DiffservMode::Diffserv3,
                    FlowMode::TripleIsolate,
                    shaped,
                ))
                .expect("the bench configurations are valid");
                run(c, "cake_subscriber_diffserv3_triple", flows, shaped, q, &ds);
            }
        }
        if flows == 1024 {
            // The NIC's RSS hash reused as the flow hash.
            let rss: Vec<PacketMeta> = ds
                .iter()
                .map(|m| PacketMeta {
                    l4_hash: Some(qdisc::cake::flow_hash(&m.keys, 0x9e37)),
                    ..*m
                })
                .collect();
            let q = cake(DiffservMode::Diffserv3, FlowMode::TripleIsolate, false);
            run(c, "cake_diffserv3_triple_rss", flows, false, q, &rss);
            // Minimum-size frames, the size packet rates (Mpps) are usually quoted at.
            let q = cake(DiffservMode::Diffserv3, FlowMode::TripleIsolate, false);
            run_sized(c, "cake_diffserv3_triple_64B", flows, false, q, &ds, 64);
            // The goal configuration as the forwarder drives it: bursts of 32.
            for (name, len) in [
                ("cake_diffserv3_triple_burst32", LEN),
                ("cake_diffserv3_triple_64B_burst32", 64),
            ] {
                let q = cake(DiffservMode::Diffserv3, FlowMode::TripleIsolate, false);
                run_burst(c, name, q, &ds, len);
            }
            run(
                c,
                "drr_floor_diffserv3",
                flows,
                false,
                DrrFloor::new(20_000),
                &ds,
            );
            let floor = DrrFloor::new(20_000);
            run_sized(c, "drr_floor_diffserv3_64B", flows, false, floor, &ds, 64);
        }
    }
}

/// The idle fast path: an empty, unshaped CAKE taking every packet through `try_bypass`.
fn bypass(c: &mut Criterion) {
    let mut q: Cake<LenPacket> = cake(DiffservMode::Diffserv3, FlowMode::TripleIsolate, false);
    let m = udp_meta(1, 1, 1, 0);
    let p = LenPacket(LEN);
    let mut now = 0u64;
    c.bench_function("cake_diffserv3_triple/bypass/1", |b| {
        b.iter(|| {
            now += 100;
            black_box(q.try_bypass(now, &p, &m))
        })
    });
}

criterion_group!(cake_benches, benches, bypass);
criterion_main!(cake_benches);
