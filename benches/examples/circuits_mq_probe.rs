//! The circuits row of `scripts/bench-circuits` without the ports: one TX queue of the
//! per-circuit shaper driven as the engine drives it (`enqueue_burst` of 32 packets, then
//! `run`), with the generator's order, a circuit's flows in runs of 4 (its /30), 10 000
//! circuits at 100 Mbit/s and 100 000 flows, at about the rate one core forwards. For
//! callgrind: instructions and simulated cache misses per packet are deterministic, so two
//! revisions compare on a machine too noisy for timings.
//!
//! Run: `cargo build --release -p cakewalk-benches --example circuits_mq_probe`, then
//! `valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no
//! --toggle-collect='*measured*' target/release/examples/circuits_mq_probe PACKETS`: the
//! counts cover PACKETS packets after a warm-up that gives every circuit its instance.

use std::sync::Arc;
use std::time::Instant;

use qdisc::cake::CakeConfig;
use qdisc::circuit::{CircuitPlan, CircuitShaper, CircuitShaperConfig};
use qdisc::mq::{MqQdisc, MultiQueue, Offerer, TxQueueOptions};
use qdisc::testing::{udp_meta, LenPacket};
use qdisc::{Packet, PacketMeta, Rate};

const CIRCUITS: u32 = 10_000;
const FLOWS: u32 = 100_000;
/// Consecutive flows of one circuit, as the generator's addresses give them.
const RUN: u32 = 4;
const BURST: usize = 32;
/// A burst every 12.8 us: 2.5 Mpps, what one core forwards here.
const BURST_NS: u64 = 12_800;
/// IMIX by packet: 7 x 64, 4 x 576, 1 x 1500 bytes.
const SIZES: [u32; 12] = [64, 576, 64, 64, 576, 64, 1500, 64, 576, 64, 64, 576];
/// Packets before the measured part: every circuit gets its instance in the first 40 000.
const WARM_UP: u64 = 200_000;

/// The generator and the engine's loop around one TX queue.
struct Probe<Q: MqQdisc<LenPacket>> {
    mq: MultiQueue<LenPacket, Q>,
    metas: Vec<PacketMeta>,
    now: u64,
    flow: usize,
    size: usize,
    pkts: Vec<LenPacket>,
    burst_metas: Vec<PacketMeta>,
    out: Vec<LenPacket>,
    sent: Vec<LenPacket>,
    delivered: u64,
}

impl<Q: MqQdisc<LenPacket>> Probe<Q> {
    fn run(&mut self, packets: u64) {
        let q = self.mq.queue(0);
        let mut offered = 0;
        while offered < packets {
            self.now += BURST_NS;
            self.burst_metas.clear();
            for _ in 0..BURST {
                self.pkts.push(LenPacket(SIZES[self.size]));
                self.burst_metas.push(self.metas[self.flow]);
                self.flow = (self.flow + 1) % self.metas.len();
                self.size = (self.size + 1) % SIZES.len();
            }
            offered += BURST as u64;
            q.enqueue_burst(
                self.now,
                &mut self.pkts,
                &mut self.burst_metas,
                |_, _| {},
                &mut self.out,
                Offerer::Runner,
            );
            self.delivered += self.out.len() as u64;
            self.out.clear();
            let delivered = &mut self.delivered;
            q.run(self.now, 64, &mut self.sent, |s: &mut Vec<LenPacket>| {
                *delivered += s.len() as u64;
                s.clear();
            });
        }
    }
}

/// The part callgrind counts (`--toggle-collect='*measured*'`).
#[inline(never)]
fn measured<Q: MqQdisc<LenPacket>>(probe: &mut Probe<Q>, packets: u64) {
    probe.run(packets);
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let link = args
        .next_if(|a| a == "link" || a == "circuits")
        .is_some_and(|a| a == "link");
    let packets: u64 = args
        .next()
        .map_or(2_000_000, |a| a.parse().expect("PACKETS is a number"));
    let metas: Vec<PacketMeta> = (0..FLOWS)
        .map(|f| {
            let c = (f / RUN) % CIRCUITS;
            PacketMeta {
                circuit: (!link).then_some(c),
                ..udp_meta(c, f % 16, f, 0)
            }
        })
        .collect();
    if link {
        // The link-wide CAKE the binary's shaped row runs: 40 Gbit/s, more than is offered.
        let config = CakeConfig {
            rate: Rate::from_bits_per_sec(40_000_000_000),
            ..CakeConfig::default()
        };
        let mq =
            MultiQueue::from_config(1, TxQueueOptions::default(), &config).expect("valid config");
        return probe::<qdisc::cake::Cake<LenPacket>>(mq, metas, packets);
    }
    let config = CircuitShaperConfig {
        plans: (0..CIRCUITS)
            .map(|_| Some(CircuitPlan::new(Rate::from_bits_per_sec(100_000_000))))
            .collect::<Arc<[_]>>(),
        ..CircuitShaperConfig::default()
    };
    let mq = MultiQueue::from_config(1, TxQueueOptions::default(), &config).expect("valid config");
    probe::<CircuitShaper<LenPacket>>(mq, metas, packets);
}

fn probe<Q: MqQdisc<LenPacket>>(
    mq: MultiQueue<LenPacket, Q>,
    metas: Vec<PacketMeta>,
    packets: u64,
) {
    let mut probe = Probe {
        mq,
        metas,
        now: 1_000_000,
        flow: 0,
        size: 0,
        pkts: Vec::new(),
        burst_metas: Vec::new(),
        out: Vec::new(),
        sent: Vec::new(),
        delivered: 0,
    };
    probe.run(WARM_UP);
    let start = Instant::now();
    measured(&mut probe, packets);
    let ns = start.elapsed().as_nanos() as f64 / packets as f64;
    let bytes: usize = probe.sent.iter().map(Packet::len).sum();
    println!(
        "{ns:.1} ns per packet; {} offered, {} delivered, {bytes} bytes left unsent",
        WARM_UP + packets,
        probe.delivered
    );
}
