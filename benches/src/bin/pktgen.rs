//! pktgen-style enqueue throughput of one `TxQueue` (fed with `enqueue_burst`, then `run` when
//! it says so), the lockless-bypass table for this machine:
//! 1 and 2 pinned threads feeding one queue with 64-byte frames, as a bare handoff loop, FIFO
//! with and without the bypass, and CAKE (1024 flows, triple-isolate) with and without it.
//!
//! Like Linux's `pktgen` in `queue_xmit` mode on a dummy device, "transmit" only looks at a
//! TX burst (behind `black_box`) and counts it: what is measured is the cost of the queueing
//! layer. The bare loop hands each burst of generated frames straight to that transmit; the
//! queue rows hand the same frames to `TxQueue::enqueue_burst`, send the bypassed ones as one
//! TX burst right after, and call `run` when the queue says so. Each row
//! runs every thread for `--seconds` after a warm-up; Mpps is summed over threads and every
//! row is also given as a ratio to the bare loop measured in the same run
//! (goals G1-G4 of docs/design.md). After each row the queue is drained and conservation
//! (`generated = transmitted + dropped`) is checked.
//!
//! It does not move real packets (see `dpdk_fwd` and `accuracy`).

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cakewalk_benches::plot::{bar_chart, Drawn};
use cakewalk_benches::report::{load_average, machine_line, update_section, utc_now, Table};
use clap::Parser;
use qdisc::cake::{Cake, CakeConfig, FlowMode};
use qdisc::fifo::Fifo;
use qdisc::mq::{MqQdisc, MultiQueue, NextRun, Offerer, RunResult, TxQueue, TxQueueOptions};
use qdisc::{FlowKeys, L3Kind, Packet, PacketMeta, Rate};

/// Enqueue throughput of one TX queue: bare loop vs FIFO vs CAKE, with and without bypass.
#[derive(Debug, Parser)]
#[command(name = "pktgen", version)]
struct Args {
    /// Seconds each row measures (after the warm-up).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Warm-up seconds per row.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Repetitions per row; the median is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Thread counts, comma-separated (each thread pinned to its own core; at most the core count).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Frames per burst (one clock read and one `run` per burst).
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Distinct flows (5-tuples over 64 source hosts).
    #[arg(long, default_value_t = 1024)]
    flows: usize,
    /// CAKE's rate in Mbit/s; 0 = unlimited (the shaper never holds a frame back).
    #[arg(long, default_value_t = 0)]
    cake_rate_mbit: u64,
    /// Only these rows (0 bare, 1 FIFO+bypass, 2 FIFO, 3 CAKE+bypass, 4 CAKE); all when empty.
    /// The bare loop always runs, as the reference.
    #[arg(long, value_delimiter = ',')]
    rows: Vec<usize>,
    /// Give each thread its own TX queue (cake_mq over one shared rate) instead of one queue
    /// shared by all threads.
    #[arg(long)]
    queue_per_thread: bool,
    /// Write the table into the `pktgen` (or `pktgen-mq`) section of BENCHMARKS.md and the plot
    /// into `benches/results/pktgen.png` (or `pktgen-mq.png`).
    #[arg(long)]
    write: bool,
    /// Run about one second in total (for the test suite): short rows, one repetition.
    #[arg(long)]
    smoke: bool,
}

/// A 64-byte frame: just its length (its flow is given by the meta passed beside it).
struct Frame {
    len: u32,
}

impl Packet for Frame {
    fn len(&self) -> usize {
        self.len as usize
    }

    fn set_ce(&mut self) -> bool {
        false
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    Bare,
    Fifo { bypass: bool },
    Cake { bypass: bool },
}

impl Setup {
    const ALL: [Setup; 5] = [
        Setup::Bare,
        Setup::Fifo { bypass: true },
        Setup::Fifo { bypass: false },
        Setup::Cake { bypass: true },
        Setup::Cake { bypass: false },
    ];

    fn name(self) -> &'static str {
        match self {
            Setup::Bare => "bare handoff loop",
            Setup::Fifo { bypass: true } => "FIFO + bypass",
            Setup::Fifo { bypass: false } => "FIFO, no bypass",
            Setup::Cake { bypass: true } => "CAKE + bypass",
            Setup::Cake { bypass: false } => "CAKE, no bypass",
        }
    }
}

/// One thread's counts over its measured window.
#[derive(Default, Clone, Copy)]
struct Counts {
    generated: u64,
    transmitted: u64,
    dropped: u64,
    window: Duration,
    last_now_ns: u64,
}

/// One row's result.
struct Row {
    mpps: f64,
    drops: u64,
}

struct Bench {
    seconds: f64,
    warmup: f64,
    burst: usize,
    metas: Vec<PacketMeta>,
    cores: Vec<core_affinity::CoreId>,
    cake: CakeConfig,
    queue_per_thread: bool,
}

fn metas(flows: usize) -> Vec<PacketMeta> {
    (0..flows.max(1))
        .map(|f| {
            let mut keys = FlowKeys {
                l3: L3Kind::Ipv4,
                protocol: 17,
                src_port: 1024 + (f % 50_000) as u16,
                dst_port: 9,
                ..FlowKeys::default()
            };
            keys.src_addr[10..12].copy_from_slice(&[0xff, 0xff]);
            keys.src_addr[12..16].copy_from_slice(&[198, 18, 0, (f % 64) as u8 + 1]);
            keys.dst_addr[10..12].copy_from_slice(&[0xff, 0xff]);
            keys.dst_addr[12..16].copy_from_slice(&[198, 19, 0, 1]);
            PacketMeta {
                keys,
                l2_len: 14,
                ..PacketMeta::default()
            }
        })
        .collect()
}

impl Bench {
    fn row(&self, setup: Setup, threads: usize) -> Result<Row> {
        let options = |bypass| TxQueueOptions {
            intake_capacity: 4096,
            bypass,
            ..TxQueueOptions::default()
        };
        let (counts, drained, qdisc_drops) = match setup {
            Setup::Bare => (
                self.threads(threads, |_, stop, warm| self.bare(stop, warm)),
                0,
                0,
            ),
            Setup::Fifo { bypass } => {
                let qdiscs = (0..self.queues(threads))
                    .map(|_| Fifo::new(10_000))
                    .collect();
                self.run_queues(threads, qdiscs, options(bypass), Rate::UNLIMITED)
            }
            Setup::Cake { bypass } => {
                let mut qdiscs = Vec::new();
                for _ in 0..self.queues(threads) {
                    qdiscs.push(Cake::new(&self.cake)?);
                }
                self.run_queues(threads, qdiscs, options(bypass), self.cake.rate)
            }
        };
        let mut mpps = 0.0;
        let (mut generated, mut transmitted, mut dropped) = (0, drained, qdisc_drops);
        for [warmup, measured] in &counts {
            for c in [warmup, measured] {
                generated += c.generated;
                transmitted += c.transmitted;
                dropped += c.dropped;
            }
            mpps += measured.transmitted as f64 / measured.window.as_secs_f64().max(1e-9) / 1e6;
        }
        if generated != transmitted + dropped {
            bail!(
                "{}: conservation broken: generated {generated} != transmitted {transmitted} + dropped {dropped}",
                setup.name()
            );
        }
        Ok(Row {
            mpps,
            drops: dropped,
        })
    }

    /// One queue shared by all threads, or one per thread with `--queue-per-thread`.
    fn queues(&self, threads: usize) -> usize {
        if self.queue_per_thread {
            threads
        } else {
            1
        }
    }

    /// Runs the threads against a `MultiQueue` of `qdiscs` (thread `i` feeds queue
    /// `i % queues`), then drains every queue.
    fn run_queues<Q: MqQdisc<Frame>>(
        &self,
        threads: usize,
        qdiscs: Vec<Q>,
        options: TxQueueOptions,
        rate: Rate,
    ) -> (Vec<[Counts; 2]>, u64, u64) {
        let mq = MultiQueue::from_qdiscs(qdiscs, options, rate);
        let counts = self.threads(threads, |i, stop, warm| {
            self.queue(mq.queue(i % mq.len()), stop, warm)
        });
        let (mut drained, mut drops) = (0, 0);
        for q in mq.queues() {
            let (d, x) = drain(q, last_now(&counts));
            drained += d;
            drops += x;
        }
        (counts, drained, drops)
    }

    /// Starts `threads` pinned threads running `work(stop, warmup_done)` together.
    fn threads<F>(&self, threads: usize, work: F) -> Vec<[Counts; 2]>
    where
        F: Fn(usize, &AtomicBool, &Barrier) -> [Counts; 2] + Sync,
    {
        let stop = AtomicBool::new(false);
        let start = Barrier::new(threads + 1);
        let warm = Barrier::new(threads + 1);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let (stop, start, warm, work) = (&stop, &start, &warm, &work);
                    let core = self.cores.get(i % self.cores.len().max(1)).copied();
                    s.spawn(move || {
                        if let Some(core) = core {
                            core_affinity::set_for_current(core);
                        }
                        start.wait();
                        work(i, stop, warm)
                    })
                })
                .collect();
            start.wait();
            std::thread::sleep(Duration::from_secs_f64(self.warmup));
            // Threads reset their counters at the warm-up barrier, then run until `stop`.
            stop.store(true, Ordering::Relaxed);
            warm.wait();
            stop.store(false, Ordering::Relaxed);
            warm.wait();
            std::thread::sleep(Duration::from_secs_f64(self.seconds));
            stop.store(true, Ordering::Relaxed);
            handles
                .into_iter()
                .map(|h| h.join().expect("worker panicked"))
                .collect()
        })
    }

    fn bare(&self, stop: &AtomicBool, warm: &Barrier) -> [Counts; 2] {
        let mut gen = Generator::default();
        let mut rx: Vec<Frame> = Vec::with_capacity(self.burst);
        let mut rx_metas: Vec<PacketMeta> = Vec::with_capacity(self.burst);
        let mut tx: Vec<Frame> = Vec::with_capacity(self.burst);
        let mut measure = |stop: &AtomicBool| {
            let mut c = Counts::default();
            let t0 = Instant::now();
            // At least one burst per window, so that a thread the scheduler starts late still
            // measures something.
            loop {
                // The queue rows read the clock once per burst; so does this one.
                black_box(t0.elapsed().as_nanos() as u64);
                gen.fill(&self.metas, self.burst, &mut rx, &mut rx_metas);
                c.generated += self.burst as u64;
                for (f, meta) in rx.drain(..).zip(rx_metas.drain(..)) {
                    black_box(meta);
                    tx.push(f);
                }
                c.transmitted += transmit(&mut tx);
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            c.window = t0.elapsed();
            c
        };
        let warmup = measure(stop);
        warm.wait();
        warm.wait();
        [warmup, measure(stop)]
    }

    fn queue<Q: MqQdisc<Frame>>(
        &self,
        q: &TxQueue<Frame, Q>,
        stop: &AtomicBool,
        warm: &Barrier,
    ) -> [Counts; 2] {
        let mut gen = Generator::default();
        let mut rx: Vec<Frame> = Vec::with_capacity(self.burst);
        let mut rx_metas: Vec<PacketMeta> = Vec::with_capacity(self.burst);
        let mut out: Vec<Frame> = Vec::with_capacity(self.burst * 4);
        let mut tx: Vec<Frame> = Vec::with_capacity(self.burst);
        let mut measure = |stop: &AtomicBool, out: &mut Vec<Frame>| {
            let mut c = Counts::default();
            let t0 = Instant::now();
            // At least one burst per window (see `bare`).
            loop {
                let now = t0.elapsed().as_nanos() as u64;
                gen.fill(&self.metas, self.burst, &mut rx, &mut rx_metas);
                c.generated += self.burst as u64;
                let outcome = q.enqueue_burst(
                    now,
                    &mut rx,
                    &mut rx_metas,
                    |_, _| {},
                    &mut tx,
                    Offerer::Runner,
                );
                rx_metas.clear();
                c.dropped += outcome.dropped as u64;
                // The bypassed frames go out right after the call, as one TX burst.
                c.transmitted += transmit(&mut tx);
                if outcome.run_needed {
                    q.run(now, self.burst * 2, out, |o| c.transmitted += transmit(o));
                }
                c.last_now_ns = now;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            c.window = t0.elapsed();
            c
        };
        let warmup = measure(stop, &mut out);
        warm.wait();
        warm.wait();
        [warmup, measure(stop, &mut out)]
    }
}

/// The traffic source of every row: fills an RX burst of 64-byte frames, cycling through the
/// flows, the way a NIC's RX burst hands frames to the forwarder (the bare loop and the queue
/// rows share it, so they differ only in what happens to the burst).
#[derive(Default)]
struct Generator {
    flow: usize,
}

impl Generator {
    /// Appends `n` frames to `rx` and their metas (already classified, as a NIC that
    /// parsed them would hand them over) to `rx_metas`, cycling over the flows of `metas`.
    fn fill(
        &mut self,
        metas: &[PacketMeta],
        n: usize,
        rx: &mut Vec<Frame>,
        rx_metas: &mut Vec<PacketMeta>,
    ) {
        let mut flow = self.flow;
        for _ in 0..n {
            let meta = match metas.get(flow) {
                Some(m) => m,
                None => {
                    flow = 0;
                    &metas[0]
                }
            };
            rx.push(Frame { len: 64 });
            rx_metas.push(*meta);
            flow += 1;
        }
        self.flow = flow;
    }
}

/// The null device: "sends" a TX burst by looking at it once, and returns how many frames.
fn transmit(burst: &mut Vec<Frame>) -> u64 {
    black_box(&burst[..]);
    let n = burst.len() as u64;
    burst.clear();
    n
}

fn last_now(counts: &[[Counts; 2]]) -> u64 {
    counts.iter().map(|c| c[1].last_now_ns).max().unwrap_or(0)
}

/// Sends everything left in `q` after the threads stopped (stepping time past any shaper
/// delay). Returns the frames sent and the drops the qdisc counted (intake drops excluded:
/// the threads counted those).
fn drain<Q: MqQdisc<Frame>>(q: &TxQueue<Frame, Q>, mut now: u64) -> (u64, u64) {
    let mut out = Vec::new();
    let mut sent = 0u64;
    for _ in 0..1_000_000 {
        match q.run(now, 4096, &mut out, |o| {
            sent += o.len() as u64;
            o.clear();
        }) {
            RunResult::Ran {
                next: NextRun::Idle,
                ..
            } if q.backlog() == 0 => break,
            RunResult::Ran {
                next: NextRun::At(t),
                ..
            } => now = now.max(t),
            _ => {}
        }
    }
    let s = q.stats();
    (sent, s.total_drops() - s.intake_full)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = Args::parse();
    if args.smoke {
        args.seconds = 0.03;
        args.warmup = 0.01;
        args.reps = 1;
    }
    if args.burst == 0 || args.threads.contains(&0) {
        bail!("--burst and --threads must be at least 1; try --burst 32 --threads 1,2");
    }
    // Threads are pinned one per core: more threads than cores would time-share a core and
    // measure the scheduler, not the queue.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(&too_many) = args.threads.iter().find(|&&t| t > cores) {
        bail!(
            "--threads {too_many}: this machine has {cores} core{}; use at most {cores}",
            if cores == 1 { "" } else { "s" }
        );
    }
    let cake = CakeConfig {
        rate: Rate::from_bits_per_sec(args.cake_rate_mbit.saturating_mul(1_000_000)),
        flow_mode: FlowMode::TripleIsolate,
        ..CakeConfig::default()
    };
    let bench = Bench {
        seconds: args.seconds,
        warmup: args.warmup,
        burst: args.burst,
        metas: metas(args.flows),
        cores: core_affinity::get_core_ids().unwrap_or_default(),
        cake,
        queue_per_thread: args.queue_per_thread,
    };
    let header = format!(
        "pktgen: {} ({}); load {}; {} s x {} reps per row, burst {}, {} flows, CAKE rate {}, {}",
        machine_line(),
        utc_now(),
        load_average(),
        args.seconds,
        args.reps,
        args.burst,
        args.flows,
        bench.cake.rate,
        if args.queue_per_thread {
            "one queue per thread (cake_mq)"
        } else {
            "one queue for all threads"
        }
    );
    println!("{header}");
    // Median Mpps per thread count (series) and setup (category), for the plot.
    let mut plotted: Vec<Vec<f64>> = Vec::with_capacity(args.threads.len());
    let mut categories: Vec<String> = Vec::new();
    // Each setup's cells, one value per thread count: Mpps, ratio, added ns, drops.
    let mut cells: Vec<(Setup, [Vec<String>; 4])> = Vec::new();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    for &threads in &args.threads {
        // Every repetition of a row runs right after a bare run of its own, and the row's
        // ratio is the median of those pairs: on a shared machine the load changes from
        // second to second, and a pair sees nearly the same load.
        let selected: Vec<Setup> = Setup::ALL
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| i > 0 && (args.rows.is_empty() || args.rows.contains(&i)))
            .map(|(_, s)| s)
            .collect();
        let mut bare_runs = Vec::new();
        let mut rows = Vec::new();
        for &setup in &selected {
            let (mut runs, mut ratios, mut added, mut drops) = (vec![], vec![], vec![], 0);
            for _ in 0..args.reps.max(1) {
                let bare = bench.row(Setup::Bare, threads)?.mpps;
                let row = bench.row(setup, threads)?;
                bare_runs.push(bare);
                runs.push(row.mpps);
                ratios.push(if bare > 0.0 { row.mpps / bare } else { 0.0 });
                // Per-thread cost of one frame, minus the bare loop's: what the queue adds.
                let ns = |mpps: f64| threads as f64 * 1e3 / mpps.max(1e-9);
                added.push(ns(row.mpps) - ns(bare));
                drops += row.drops;
            }
            rows.push((
                setup,
                median(&mut runs),
                median(&mut ratios),
                median(&mut added),
                drops,
            ));
        }
        if selected.is_empty() {
            bare_runs.push(bench.row(Setup::Bare, threads)?.mpps);
        }
        let bare = median(&mut bare_runs);
        let mut series = Vec::new();
        for (setup, mpps, ratio, added, drops) in
            std::iter::once((Setup::Bare, bare, 1.0, 0.0, 0)).chain(rows)
        {
            if plotted.is_empty() {
                categories.push(setup.name().to_string());
                cells.push((setup, Default::default()));
            }
            series.push(mpps);
            if let Some((_, c)) = cells.iter_mut().find(|(s, _)| *s == setup) {
                for (column, value) in c.iter_mut().zip([
                    format!("{mpps:.2}"),
                    format!("{ratio:.3}"),
                    format!("{added:.1}"),
                    drops.to_string(),
                ]) {
                    column.push(value);
                }
            }
        }
        plotted.push(series);
    }
    let markdown = table(&args.threads, &cells).to_markdown();
    print!("{markdown}");
    if args.write {
        let cli = &args;
        let args: Vec<String> = std::env::args().skip(1).collect();
        let command = format!(
            "cargo run --release -p cakewalk-benches --bin pktgen -- {}",
            args.join(" ")
        );
        let section = if cli.queue_per_thread {
            "pktgen-mq"
        } else {
            "pktgen"
        };
        let results = cakewalk_benches::repo_root().join("benches/results");
        std::fs::create_dir_all(&results)
            .with_context(|| format!("creating {}", results.display()))?;
        let png = results.join(format!("{section}.png"));
        let names: Vec<String> = cli
            .threads
            .iter()
            .map(|t| format!("{t} thread{}", if *t == 1 { "" } else { "s" }))
            .collect();
        let drawn = bar_chart(
            &png,
            &format!(
                "pktgen: 64-byte frames through {} (Mpps)",
                section_what(cli)
            ),
            "Mpps",
            &categories,
            &names,
            &plotted,
            false,
        )
        .with_context(|| format!("drawing {}", png.display()))?;
        println!("wrote {}", png.display());
        let body = section_body(
            cli,
            &markdown,
            &cakewalk_benches::report::provenance(
                &utc_now(),
                &cakewalk_benches::report::commit(),
                &machine_line(),
                &load_average(),
                &command,
            ),
            bench.cake.rate,
            drawn,
        );
        let path = cakewalk_benches::repo_root().join("BENCHMARKS.md");
        update_section(&path, section, &body)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote the {section} section of {}", path.display());
    }
    Ok(())
}

/// The table: one row per setup, each cell its values at the thread counts, " / " between.
fn table(threads: &[usize], cells: &[(Setup, [Vec<String>; 4])]) -> Table {
    let counts: Vec<String> = threads.iter().map(usize::to_string).collect();
    let plural = if threads == [1] { "" } else { "s" };
    let mpps = format!("Mpps (median), {} thread{plural}", counts.join(" / "));
    let mut t = Table::new(&[
        "setup",
        &mpps,
        "ratio to bare (median of pairs)",
        "added ns/frame/thread",
        "drops (intake full)",
    ]);
    for (setup, columns) in cells {
        let mut row = vec![setup.name().to_string()];
        row.extend(columns.iter().map(|c| c.join(" / ")));
        t.push(row);
    }
    t
}

/// The section: its title, the table, and when, where and how it ran.
fn section_body(args: &Args, markdown: &str, provenance: &str, rate: Rate, drawn: Drawn) -> String {
    format!(
        "## pktgen: enqueue throughput of {}\n{markdown}\n{provenance} 64-byte frames, burst {}, \
         {} flows{}.{}\n",
        section_what(args),
        args.burst,
        args.flows,
        if rate.is_unlimited() {
            String::new()
        } else {
            format!(", CAKE at {rate}")
        },
        if drawn == Drawn::WithoutText {
            " Plot drawn without text: no font found."
        } else {
            ""
        }
    )
}

/// What the frames go through, for the section title and the plot.
fn section_what(args: &Args) -> &'static str {
    if args.queue_per_thread {
        "one TxQueue per thread over one shared rate (cake_mq)"
    } else {
        "one TxQueue"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_bench() -> Bench {
        Bench {
            seconds: 0.01,
            warmup: 0.005,
            burst: 32,
            metas: metas(64),
            cores: core_affinity::get_core_ids().unwrap_or_default(),
            cake: CakeConfig::default(),
            queue_per_thread: false,
        }
    }

    #[test]
    fn every_row_runs_and_conserves_frames_with_one_and_two_threads() {
        let bench = tiny_bench();
        for threads in [1, 2] {
            for setup in Setup::ALL {
                let row = bench
                    .row(setup, threads)
                    .expect("row failed its conservation check");
                assert!(row.mpps > 0.0, "{} sent nothing", setup.name());
            }
        }
    }

    #[test]
    fn queue_per_thread_rows_conserve_frames() {
        let mut bench = tiny_bench();
        bench.queue_per_thread = true;
        for setup in Setup::ALL {
            bench
                .row(setup, 2)
                .expect("row failed its conservation check");
        }
    }

    #[test]
    fn a_shaped_cake_row_drains_and_conserves_frames() {
        let mut bench = tiny_bench();
        bench.cake.rate = Rate::from_bits_per_sec(10_000_000);
        for setup in [Setup::Cake { bypass: true }, Setup::Cake { bypass: false }] {
            bench
                .row(setup, 1)
                .expect("row failed its conservation check");
        }
    }

    #[test]
    fn the_section_folds_the_thread_counts_into_one_row_per_setup() {
        let cells = vec![
            (
                Setup::Bare,
                [
                    vec!["373.31".to_string(), "246.61".into()],
                    vec!["1.000".into(), "1.000".into()],
                    vec!["0.0".into(), "0.0".into()],
                    vec!["0".into(), "0".into()],
                ],
            ),
            (
                Setup::Cake { bypass: false },
                [
                    vec!["12.77".into(), "3.08".into()],
                    vec!["0.039".into(), "0.014".into()],
                    vec!["74.7".into(), "638.9".into()],
                    vec!["0".into(), "142802945".into()],
                ],
            ),
        ];
        let md = table(&[1, 2], &cells).to_markdown();
        let args = Args::parse_from(["pktgen"]);
        let body = section_body(&args, &md, "When.", Rate::UNLIMITED, Drawn::WithText);
        assert_eq!(
            body,
            "## pktgen: enqueue throughput of one TxQueue\n\
             | setup | Mpps (median), 1 / 2 threads | ratio to bare (median of pairs) | added ns/frame/thread | drops (intake full) |\n\
             |---|---|---|---|---|\n\
             | bare handoff loop | 373.31 / 246.61 | 1.000 / 1.000 | 0.0 / 0.0 | 0 / 0 |\n\
             | CAKE, no bypass | 12.77 / 3.08 | 0.039 / 0.014 | 74.7 / 638.9 | 0 / 142802945 |\n\
             \nWhen. 64-byte frames, burst 32, 1024 flows.\n"
        );
        assert!(table(&[1], &cells[..1]).headers[1].ends_with(", 1 thread"));
    }
}
