//! The criterion goal row (`cake_diffserv3_triple/unlimited/1024`) as a plain loop, for
//! perf, callgrind and A/B timing of builds: best of N rounds, ns per enqueue+dequeue.
//!
//! Run: `cargo run --release -p cakewalk-benches --example cake_probe -- [len] [iters] [flows] [burst]`
//! (defaults 1000 200000 1024 1; `burst` 32 is the forwarder's pattern of 32 enqueues, then
//! 32 dequeues). Instructions per packet, from two run lengths under callgrind:
//! `valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/cake_probe
//! 1000 2000` and again with 4000; the difference in "Collected" divided by 40 x 2000.
//! A/B: build each variant, copy the binary aside, alternate the binaries a few times and
//! compare the best numbers; one run alone is at the mercy of the shared host.

use std::hint::black_box;
use std::time::Instant;

use qdisc::cake::{Cake, CakeConfig, DiffservMode, FlowMode};
use qdisc::testing::{udp_meta, LenPacket};
use qdisc::{Dequeue, PacketMeta, Qdisc, Rate};

/// The enqueue out of line, as criterion's bench loop calls it (its generic harness keeps
/// `Cake::enqueue` and `Cake::dequeue` out of line): inlined into this loop, the packet path
/// compiles differently (other registers, other spills) and measures several ns apart.
#[inline(never)]
fn enqueue(q: &mut Cake<LenPacket>, now: u64, pkt: LenPacket, meta: &PacketMeta) {
    black_box(q.enqueue(now, pkt, meta));
}

/// The dequeue out of line; see [`enqueue`].
#[inline(never)]
fn dequeue(q: &mut Cake<LenPacket>, now: u64) -> Dequeue<LenPacket> {
    q.dequeue(now)
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric arguments: len iters flows burst"))
        .collect();
    let len = args.first().copied().unwrap_or(1000) as u32;
    let iters = args.get(1).copied().unwrap_or(200_000);
    let flows = args.get(2).copied().unwrap_or(1024) as u32;
    let burst = args.get(3).copied().unwrap_or(1).max(1) as usize;
    let rounds = 40;
    let metas: Vec<PacketMeta> = (0..flows)
        .map(|f| {
            let dscp = match f % 10 {
                0 => 46,
                1 => 8,
                _ => 0,
            };
            udp_meta(f % 64, f % 16, f, dscp)
        })
        .collect();
    let mut q: Cake<LenPacket> = Cake::new(&CakeConfig {
        rate: Rate::UNLIMITED,
        diffserv: DiffservMode::Diffserv3,
        flow_mode: FlowMode::TripleIsolate,
        ..CakeConfig::default()
    })
    .unwrap();
    let mut now = 1_000_000u64;
    for m in &metas {
        q.enqueue(now, LenPacket(len), m);
    }
    let mut i = 0usize;
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t0 = Instant::now();
        let mut n = 0;
        while n < iters {
            for _ in 0..burst {
                now += 100;
                enqueue(&mut q, now, LenPacket(len), &metas[i]);
                i += 1;
                if i == metas.len() {
                    i = 0;
                }
            }
            for _ in 0..burst {
                match dequeue(&mut q, now) {
                    Dequeue::Packet(p) => {
                        black_box(p);
                    }
                    other => {
                        black_box(other);
                    }
                }
            }
            n += burst as u64;
        }
        let ns = t0.elapsed().as_nanos() as f64 / n as f64;
        best = best.min(ns);
    }
    println!(
        "{best:.2} ns/pkt (len {len}, flows {flows}, burst {burst}, queued {})",
        q.len()
    );
}
