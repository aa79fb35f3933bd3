//! `fwd`: packets per second through the cakewalk engine on one pinned core, 64-byte frames
//! from the built-in generator into a null sink, for the bare port loop (rx -> tx, nothing
//! else), the engine with no qdisc, FIFO and CAKE (unlimited, with and without the bypass) and
//! CAKE shaped. Every row is printed beside the bare loop's rate from the same run.
//!
//! ```text
//! cargo run --release -p cakewalk-benches --bin fwd            # 5 s per row
//! cargo run --release -p cakewalk-benches --bin fwd -- --smoke # ~1 s per row
//! cargo run --release -p cakewalk-benches --bin fwd -- --only CAKE
//! cargo run --release -p cakewalk-benches --bin fwd -- --write # also BENCHMARKS.md + plot
//! ```
//!
//! This is a measurement, not a test: it prints a table and exits 0.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use cakewalk_benches::plot::bar_chart;
use cakewalk_benches::progress::Progress;
use cakewalk_benches::repo_root;
use cakewalk_benches::report::{load_average, machine_line, publish, utc_now, Table};
use clap::Parser;

use forwarder::app::{build_queues, QueueChoice};
use forwarder::counters::egress;
use forwarder::counters::synth::SynthStats;
use forwarder::engine::{self, EngineConfig, EnginePorts, IdleMode};
use forwarder::port::pool::{Pool, PoolBuf};
use forwarder::port::synth::{PacketSize, SynthConfig, SynthPlan, SynthRx};
use forwarder::port::{PortRx, PortTx};
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
    let start = forwarder::clock::now_ns();
    let mut counted = 0u64;
    let mut t0 = 0u64;
    loop {
        let now = forwarder::clock::now_ns() - start;
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

/// One engine row with `queues` TX queues on the output port; returns (Mpps, delivered bit/s).
fn engine_row(
    choice: &QueueChoice,
    bypass: bool,
    queues: usize,
    seconds: f64,
    warmup: f64,
) -> (f64, f64) {
    let pool = Pool::new(16384, 2048);
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = vec![Box::new(generator(pool))];
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: (0..2)
            .map(|_| {
                (0..queues)
                    .map(|_| Box::new(NullTx) as Box<dyn PortTx<Buf = PoolBuf>>)
                    .collect()
            })
            .collect(),
        forward: vec![Some(1), None],
    };
    let options = TxQueueOptions {
        bypass,
        ..TxQueueOptions::default()
    };
    let (shapers, _) = build_queues(choice, 2, queues, options).expect("queues build");
    let cfg = EngineConfig {
        workers: 1,
        tx_queues: queues,
        idle: IdleMode::Spin,
        duration: "0".into(),
        ..EngineConfig::default()
    };
    let running = engine::start(&cfg, ports, shapers).expect("engine starts");
    let shared = running.shared().clone();
    let layout = shared.counters.layout;
    // The output port's egresses: port 1's queues.
    let tx_of = |s: &forwarder::counters::Snapshot| {
        (layout.queues..2 * layout.queues).fold((0, 0), |(p, b), e| {
            (
                p + s.egress(e, egress::TX_PACKETS),
                b + s.egress(e, egress::TX_BYTES),
            )
        })
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

/// Packets per second through the engine on one pinned core, beside the bare port loop.
#[derive(Debug, Parser)]
#[command(name = "fwd", version)]
struct Args {
    /// Seconds each measurement runs (after the warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Warm-up seconds before each measurement.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Repetitions per row; medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// About a second per row, one repetition (CI's smoke run).
    #[arg(long)]
    smoke: bool,
    /// Only the rows whose name contains this text (for profiling).
    #[arg(long)]
    only: Option<String>,
    /// Also write the table to BENCHMARKS.md (section "fwd"), benches/results/fwd.md and a
    /// plot benches/results/fwd.png.
    #[arg(long)]
    write: bool,
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.smoke {
        (args.seconds, args.warmup, args.reps) = (1.0, 0.3, 1);
    }
    let sane = args.seconds > 0.0 && args.seconds <= 600.0 && (0.0..=60.0).contains(&args.warmup);
    if !sane {
        eprintln!(
            "error: --seconds {} / --warmup {} out of range; use 0 < seconds <= 600 and 0 <= warmup <= 60",
            args.seconds, args.warmup
        );
        return ExitCode::from(2);
    }
    if args.reps == 0 || args.reps > 50 {
        eprintln!("error: --reps {} out of range; use 1..=50", args.reps);
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let (seconds, warmup, reps) = (args.seconds, args.warmup, args.reps);
    // Before pinning: afterwards this thread sees one core.
    let machine = machine_line();
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
    // (name, qdisc, bypass, TX queues on the output port)
    let rows: Vec<(&str, QueueChoice, bool, usize)> = vec![
        ("engine, no qdisc", QueueChoice::None, true, 1),
        ("FIFO + bypass", QueueChoice::Fifo, true, 1),
        ("FIFO, no bypass", QueueChoice::Fifo, false, 1),
        (
            "CAKE unlimited + bypass",
            QueueChoice::Cake(unlimited.clone()),
            true,
            1,
        ),
        (
            "CAKE unlimited, no bypass",
            QueueChoice::Cake(unlimited.clone()),
            false,
            1,
        ),
        // The cake_mq shape: the worker hashes each packet to one of 4 TX queues, each with
        // its own CAKE instance (which reuses that hash as its flow hash).
        (
            "CAKE unlimited, no bypass, 4 TX queues",
            QueueChoice::Cake(unlimited),
            false,
            4,
        ),
        ("CAKE shaped 1 Gbit", QueueChoice::Cake(shaped_cfg), true, 1),
    ];
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|(name, _, _, _)| args.only.as_deref().map_or(true, |o| name.contains(o)))
        .collect();
    if rows.is_empty() {
        anyhow::bail!(
            "--only {:?} matches no row; rows are: engine, FIFO, CAKE, bypass, shaped",
            args.only.as_deref().unwrap_or("")
        );
    }
    // Each repetition runs the bare loop and the engine row, each warm-up + measurement.
    let bound = rows.len() as f64 * reps as f64 * 2.0 * (seconds + warmup);
    println!("cakewalk fwd: synth (64 B, 1024 flows) -> engine (1 worker, pinned, burst 32) -> null sink");
    println!("{seconds} s per measurement after {warmup} s warm-up; each row is paired with a bare-loop run just before it; medians of {reps}; this run stops by itself within {:.0} s", bound.ceil() + 5.0);
    let mut table = Table::new(&["row", "Mpps", "ns/pkt", "bare Mpps", "vs bare", "delivered"]);
    let mut progress = Progress::new("fwd", (rows.len() * reps) as u64);
    let (mut names, mut ratio_values) = (Vec::new(), Vec::new());
    for (name, choice, bypass, queues) in rows {
        let mut mpps = Vec::new();
        let mut bares = Vec::new();
        let mut ratios = Vec::new();
        let mut bpss = Vec::new();
        for _ in 0..reps {
            progress.step(name);
            let bare = bare_loop(seconds, warmup);
            let (m, bps) = engine_row(&choice, bypass, queues, seconds, warmup);
            mpps.push(m);
            bares.push(bare);
            ratios.push(m / bare);
            bpss.push(bps);
            progress.inc();
        }
        let (m, bare, ratio, bps) = (median(mpps), median(bares), median(ratios), median(bpss));
        let delivered = if name.contains("shaped") {
            format!("{:.4}x rate", bps / shaped.bits_per_sec() as f64)
        } else {
            format!("{:.2} Gbit/s", bps / 1e9)
        };
        let row = vec![
            name.to_string(),
            format!("{m:.3}"),
            format!("{:.1}", 1e3 / m.max(1e-9)),
            format!("{bare:.3}"),
            format!("{ratio:.2}"),
            delivered,
        ];
        progress.println(&format!("| {} |", row.join(" | ")));
        table.push(row);
        names.push(name.to_string());
        ratio_values.push(ratio);
    }
    progress.finish();
    let table = table.to_markdown();
    if !args.write {
        println!("{table}");
        return Ok(());
    }
    let root = repo_root();
    let out = root.join("benches/results");
    std::fs::create_dir_all(&out)?;
    let png = out.join("fwd.png");
    bar_chart(
        &png,
        "fwd: engine rate / bare port loop, one core, 64 B",
        "ratio to bare loop",
        &names,
        &["vs bare".to_string()],
        &ratio_values.iter().map(|&r| vec![r]).collect::<Vec<_>>(),
        false,
    )?;
    let command = format!(
        "cargo run --release -p cakewalk-benches --bin fwd -- --seconds {seconds} --warmup \
         {warmup} --reps {reps} --write"
    );
    let body = format!(
        "## Forwarding engine, one core (`benches/src/bin/fwd.rs`)\n{table}\n{} The \
         generator's 64-byte frames, 1024 flows, through one engine worker (burst 32) to a null \
         sink.\n",
        cakewalk_benches::report::provenance(
            &utc_now(),
            &cakewalk_benches::report::commit(),
            &machine,
            &load_average(),
            &command
        ),
    );
    publish(&root, &out, "fwd", &png, "fwd", &body, true)
}
