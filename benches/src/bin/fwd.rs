//! `fwd`: packets per second through the cakewalk engine on one pinned core, 64-byte frames
//! from the built-in generator into a null sink, for the bare port loop (rx -> tx, nothing
//! else), the engine with no qdisc, FIFO and CAKE (unlimited, with and without the bypass) and
//! CAKE shaped. Every row is printed beside the bare loop's rate from the same run.
//!
//! ```text
//! cargo run --release -p cakewalk-benches --bin fwd            # 5 s per row
//! cargo run --release -p cakewalk-benches --bin fwd -- --smoke # ~1 s per row
//! cargo run --release -p cakewalk-benches --bin fwd -- --only CAKE
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

/// The bare loop: rx_burst -> tx_burst on this (pinned) thread, one clock read per burst
/// like the engine; returns Mpps.
fn bare_loop(seconds: f64, warmup: f64) -> f64 {
    let pool = Pool::new(4096, 2048);
    let mut rx = generator(pool);
    let mut tx = NullTx;
    let mut burst = Vec::with_capacity(32);
    let warm_ns = (warmup * 1e9) as u64;
    let end_ns = ((warmup + seconds) * 1e9) as u64;
    let start = forwarder::engine::clock::now_ns();
    let mut counted = 0u64;
    let mut t0 = 0u64;
    loop {
        let now = forwarder::engine::clock::now_ns() - start;
        rx.rx_burst(&mut burst, 32);
        let n = tx.tx_burst(&mut burst) as u64;
        if now >= warm_ns {
            if t0 == 0 {
                t0 = now;
            } else {
                counted += n;
            }
        }
        if now >= end_ns {
            return counted as f64 / ((now - t0) as f64 / 1e9) / 1e6;
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
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
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    // `--only TEXT` runs just the rows whose name contains TEXT (for profiling).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
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
    let reps = if smoke { 1 } else { 3 };
    println!("cakewalk fwd: synth (64 B, 1024 flows) -> engine (1 worker, pinned, burst 32) -> null sink");
    println!("{seconds} s per measurement after {warmup} s warm-up; each row is paired with a bare-loop run just before it; medians of {reps}");
    let rows: Vec<(&str, QueueChoice, bool)> = vec![
        ("engine, no qdisc", QueueChoice::None, true),
        ("FIFO + bypass", QueueChoice::Fifo, true),
        ("FIFO, no bypass", QueueChoice::Fifo, false),
        (
            "CAKE unlimited + bypass",
            QueueChoice::Cake(unlimited.clone()),
            true,
        ),
        (
            "CAKE unlimited, no bypass",
            QueueChoice::Cake(unlimited),
            false,
        ),
        ("CAKE shaped 1 Gbit", QueueChoice::Cake(shaped_cfg), true),
    ];
    println!("| row | Mpps | ns/pkt | bare Mpps | vs bare | delivered |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, choice, bypass) in rows {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let mut mpps = Vec::new();
        let mut bares = Vec::new();
        let mut ratios = Vec::new();
        let mut bpss = Vec::new();
        for _ in 0..reps {
            let bare = bare_loop(seconds, warmup);
            let (m, bps) = engine_row(&choice, bypass, seconds, warmup);
            mpps.push(m);
            bares.push(bare);
            ratios.push(m / bare);
            bpss.push(bps);
        }
        let (m, bare, ratio, bps) = (median(mpps), median(bares), median(ratios), median(bpss));
        let delivered = if name.contains("shaped") {
            format!("{:.4}x rate", bps / shaped.bits_per_sec() as f64)
        } else {
            format!("{:.2} Gbit/s", bps / 1e9)
        };
        println!(
            "| {name} | {m:.3} | {:.1} | {bare:.3} | {ratio:.2} | {delivered} |",
            1e3 / m.max(1e-9)
        );
    }
}
