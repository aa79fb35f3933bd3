//! `fwd`: packets per second through the cakewalk engine on one pinned core, 64-byte frames
//! from the built-in generator into a null sink, for the bare port loop (rx -> tx, nothing
//! else), the engine with no qdisc, FIFO and CAKE (unlimited, with and without the bypass) and
//! CAKE shaped. Every row is printed beside the bare loop's rate from the same run.
//!
//! ```text
//! cargo run --release -p cakewalk-benches --bin fwd            # 5 s per row
//! cargo run --release -p cakewalk-benches --bin fwd -- --smoke # ~1 s per row
//! ```
//!
//! This is a measurement, not a test: it prints a table and exits 0.

use std::time::{Duration, Instant};

use forwarder::app::{build_queues, QueueChoice};
use forwarder::engine::{self, EngineConfig, EnginePorts, IdleMode};
use forwarder::port::pool::{Pool, PoolBuf};
use forwarder::port::synth::{PacketSize, SynthConfig, SynthPlan, SynthRx, SynthStats};
use forwarder::port::{PortRx, PortTx};
use forwarder::stats::counters::egress;
use qdisc::cake::CakeConfig;
use qdisc::mq::TxQueueOptions;
use qdisc::Rate;

/// A transmit half that counts and frees.
struct NullTx;

impl PortTx for NullTx {
    type Buf = PoolBuf;
    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        let n = burst.len();
        burst.clear();
        n
    }
}

fn generator(pool: Pool) -> SynthRx {
    let cfg = SynthConfig {
        flows: 1024,
        size: PacketSize::Fixed(64),
        ..SynthConfig::default()
    };
    let plan = SynthPlan::new(&cfg, 0).expect("static synth config is valid");
    SynthRx::new(&plan, pool, 0, 1, &SynthStats::default())
}

/// The bare loop: rx_burst -> tx_burst on this (pinned) thread; returns Mpps.
fn bare_loop(seconds: f64, warmup: f64) -> f64 {
    let pool = Pool::new(4096, 2048);
    let mut rx = generator(pool);
    let mut tx = NullTx;
    let mut burst = Vec::with_capacity(32);
    let start = Instant::now();
    let mut counted = 0u64;
    let mut t0 = None;
    loop {
        forwarder::engine::clock::now_ns();
        rx.rx_burst(&mut burst, 32);
        let n = tx.tx_burst(&mut burst) as u64;
        let el = start.elapsed().as_secs_f64();
        if el >= warmup {
            if t0.is_none() {
                t0 = Some(Instant::now());
            } else {
                counted += n;
            }
        }
        if el >= warmup + seconds {
            break;
        }
    }
    counted as f64 / t0.map_or(1.0, |t| t.elapsed().as_secs_f64()) / 1e6
}

/// One engine row; returns (Mpps, delivered bit/s).
fn engine_row(choice: &QueueChoice, bypass: bool, seconds: f64, warmup: f64) -> (f64, f64) {
    let pool = Pool::new(16384, 2048);
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = vec![Box::new(generator(pool))];
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![vec![Box::new(NullTx)], vec![Box::new(NullTx)]],
        forward: vec![Some(1), None],
    };
    let options = TxQueueOptions {
        bypass,
        ..TxQueueOptions::default()
    };
    let (shapers, _) = build_queues(choice, 2, 1, options).expect("queues build");
    let cfg = EngineConfig {
        workers: 1,
        idle: IdleMode::Spin,
        duration: "0".into(),
        ..EngineConfig::default()
    };
    let running = engine::start(&cfg, ports, shapers).expect("engine starts");
    let shared = running.shared().clone();
    let layout = shared.layout;
    let tx_of = |s: &forwarder::stats::counters::Snapshot| {
        (
            s.egress(layout.queues, egress::TX_PACKETS),
            s.egress(layout.queues, egress::TX_BYTES),
        )
    };
    std::thread::sleep(Duration::from_secs_f64(warmup));
    let (p0, b0) = tx_of(&shared.snapshot());
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (p1, b1) = tx_of(&shared.snapshot());
    let dt = t0.elapsed().as_secs_f64();
    running.stop_now();
    running.join();
    ((p1 - p0) as f64 / dt / 1e6, (b1 - b0) as f64 * 8.0 / dt)
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (seconds, warmup) = if smoke { (1.0, 0.3) } else { (5.0, 1.0) };
    // Pin this thread (the bare loop) to the core the engine's single worker uses.
    if let Some(ids) = core_affinity::get_core_ids() {
        if let Some(last) = ids.last() {
            core_affinity::set_for_current(*last);
        }
    }
    let shaped = Rate::from_bits_per_sec(1_000_000_000);
    let unlimited = CakeConfig::default();
    let shaped_cfg = CakeConfig {
        rate: shaped,
        ..CakeConfig::default()
    };
    println!("cakewalk fwd: synth (64 B, 1024 flows) -> engine (1 worker, pinned, burst 32) -> null sink; {seconds} s per row after {warmup} s warm-up");
    let bare = bare_loop(seconds, warmup);
    let rows: Vec<(&str, QueueChoice, bool)> = vec![
        ("engine, no qdisc", QueueChoice::None, true),
        ("FIFO + bypass", QueueChoice::Fifo, true),
        ("FIFO, no bypass", QueueChoice::Fifo, false),
        ("CAKE unlimited + bypass", QueueChoice::Cake(unlimited.clone()), true),
        ("CAKE unlimited, no bypass", QueueChoice::Cake(unlimited), false),
        ("CAKE shaped 1 Gbit", QueueChoice::Cake(shaped_cfg), true),
    ];
    println!("{:<28} {:>9} {:>9} {:>9} {:>12}", "row", "Mpps", "ns/pkt", "vs bare", "delivered");
    println!(
        "{:<28} {:>9.3} {:>9.1} {:>9.2} {:>12}",
        "bare port loop (rx->tx)",
        bare,
        1e3 / bare,
        1.0,
        "-"
    );
    for (name, choice, bypass) in rows {
        let (mpps, bps) = engine_row(&choice, bypass, seconds, warmup);
        let delivered = if name.contains("shaped") {
            format!("{:.4}x rate", bps / shaped.bits_per_sec() as f64)
        } else {
            format!("{:.2} Gbit", bps / 1e9)
        };
        println!(
            "{:<28} {:>9.3} {:>9.1} {:>9.2} {:>12}",
            name,
            mpps,
            1e3 / mpps.max(1e-9),
            mpps / bare,
            delivered
        );
    }
}
