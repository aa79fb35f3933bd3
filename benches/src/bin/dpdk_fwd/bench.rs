//! The benchmark's driver: the arguments, what it learns about the machine before EAL init,
//! the EAL arguments, the shaped row's calibration, and the interleaved reps of every row
//! with their medians, ratios and the goals line.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use forwarder::port::dpdk::{Eal, EthDev, EthDevConfig, Mempool, RxQueue, TxQueue};
use qdisc::Rate;

use crate::report::write_section;
use crate::rows::{
    engine_row, engine_two_workers_row, measure, thread_table, write_pcap, BURST, ENGINE_ROWS,
    TX_SELECT_ROWS,
};

#[derive(Parser, Debug)]
#[command(about = "single-core DPDK forwarding throughput: cakewalk paths vs a bare rx->tx loop")]
pub(crate) struct Args {
    /// Seconds per row and repetition.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) seconds: f64,
    /// Repetitions (median reported).
    #[arg(long, default_value_t = 3)]
    pub(crate) reps: usize,
    /// Distinct UDP flows in the replayed file.
    #[arg(long, default_value_t = 1024)]
    pub(crate) flows: u32,
    /// Frame length without FCS.
    #[arg(long, default_value_t = 60)]
    pub(crate) frame: usize,
    /// Core to run on (EAL `-l`).
    #[arg(long, default_value_t = 1)]
    pub(crate) core: usize,
    /// Run without hugepages (slower memory; for machines without them).
    #[arg(long)]
    pub(crate) no_huge: bool,
    /// Print the table as JSON too.
    #[arg(long)]
    pub(crate) json: bool,
    /// Rewrite the `dpdk` section of BENCHMARKS.md with this run's table.
    #[arg(long)]
    pub(crate) write: bool,
    /// The BENCHMARKS.md that `--write` updates (default: the workspace's).
    #[arg(long)]
    pub(crate) benchmarks: Option<PathBuf>,
    /// Run only this row once (bare, parse, fifo+bypass, fifo, cake, cake+bypass, floor,
    /// engine-fifo+bypass, engine-cake), e.g. under `perf record`.
    #[arg(long)]
    pub(crate) only: Option<String>,
    /// Thread counts for the scaling table, comma-separated: each thread is its own pinned
    /// lcore with its own net_pcap -> net_null pair and its own TX queue (at most the core
    /// count). Default: 1 and 2, as far as the machine has cores; `0` skips the table.
    #[arg(long, value_delimiter = ',')]
    pub(crate) threads: Option<Vec<usize>>,
    /// Run a few seconds in total (for the test suite): short rows, one repetition.
    #[arg(long)]
    pub(crate) smoke: bool,
}

/// A row's per-packet work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    Bare,
    /// The bare loop plus `wire::parse_into` of every frame: what parsing alone costs.
    Parse,
    Fifo {
        bypass: bool,
    },
    Cake {
        bypass: bool,
        rate: Option<Rate>,
    },
    /// The `cake` row with `DrrFloor` in CAKE's place.
    Floor,
}

pub(crate) struct Ports {
    pub(crate) rx: RxQueue,
    pub(crate) tx: TxQueue,
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// What `run` learns about the machine before EAL init pins this thread to one core
/// (after which it would count one core).
pub(crate) struct Machine {
    pub(crate) line: String,
    /// Thread counts of the scaling table (empty: no table).
    pub(crate) threads: Vec<usize>,
    /// The cores bench threads are pinned to, `--core` first.
    pub(crate) cores: Vec<core_affinity::CoreId>,
}

pub(super) fn run() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.smoke {
        args.seconds = 0.2;
        args.reps = 1;
    }
    if args.reps == 0 || args.seconds <= 0.0 {
        bail!("--reps and --seconds must be positive");
    }
    let mut cores = core_affinity::get_core_ids().unwrap_or_default();
    cores.sort_by_key(|c| (c.id != args.core, c.id));
    if cores.first().is_some_and(|c| c.id != args.core) {
        bail!(
            "--core {}: not one of this process's cores ({})",
            args.core,
            cores
                .iter()
                .map(|c| c.id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let n = cores.len().max(1);
    // More threads than cores would time-share a core and measure the scheduler.
    let threads = match &args.threads {
        None => (1..=2.min(n)).collect(),
        Some(t) if t == &[0] => Vec::new(),
        Some(t) => {
            if let Some(&bad) = t.iter().find(|&&t| t == 0 || t > n) {
                bail!(
                    "--threads {bad}: this machine has {n} core{}; use 1 to {n} threads \
                     (or --threads 0 to skip the scaling table)",
                    if n == 1 { "" } else { "s" }
                );
            }
            t.clone()
        }
    };
    let pcap: PathBuf = std::env::temp_dir().join(format!("dpdk_fwd-{}.pcap", std::process::id()));
    write_pcap(&pcap, args.flows, args.frame)?;
    let machine = Machine {
        line: cakewalk_benches::report::machine_line(),
        threads,
        cores,
    };
    let result = bench(&args, &pcap, &machine);
    let _ = std::fs::remove_file(&pcap);
    result
}

/// The EAL's arguments: the bench's core, no PCI probe, and the null/pcap vdev pairs every
/// row needs (the inline rows', one per extra scaling thread, one per engine row and rep,
/// and the two-worker rows' when `two_workers`).
fn eal_args(
    args: &Args,
    pcap: &std::path::Path,
    max_threads: usize,
    two_workers: bool,
) -> Vec<String> {
    let mut eal_args = vec![
        "-l".to_string(),
        args.core.to_string(),
        "--log-level=lib.eal:error".into(),
        // Never probe the machine's own PCI NICs: only the two vdevs take part.
        "--no-pci".into(),
        format!("--vdev=net_pcap0,rx_pcap={},infinite_rx=1", pcap.display()),
        "--vdev=net_null0".into(),
    ];
    // Threads 2.. of the scaling table each get their own pair (thread 1 uses pair 0).
    for k in 1..max_threads {
        eal_args.push(format!(
            "--vdev=net_pcap_t{k},rx_pcap={},infinite_rx=1",
            pcap.display()
        ));
        eal_args.push(format!("--vdev=net_null_t{k}"));
    }
    // Engine rows take their ports over for good, so each gets its own fresh pair.
    for i in 1..=ENGINE_ROWS.len() * args.reps {
        eal_args.push(format!(
            "--vdev=net_pcap{i},rx_pcap={},infinite_rx=1",
            pcap.display()
        ));
        eal_args.push(format!("--vdev=net_null{i}"));
    }
    // The two-worker engine rows: two receive queues (each replays the file) and two TX
    // queues per device, a fresh pair per row and rep.
    if two_workers {
        for i in 0..TX_SELECT_ROWS.len() * args.reps {
            eal_args.push(format!(
                "--vdev=net_pcap_w{i},rx_pcap={p},rx_pcap={p},tx_pcap=/dev/null,tx_pcap=/dev/null,infinite_rx=1",
                p = pcap.display()
            ));
            eal_args.push(format!("--vdev=net_null_w{i}"));
        }
    }
    if args.no_huge {
        eal_args.extend(["--no-huge", "--no-shconf", "-m", "1024"].map(String::from));
    } else {
        eal_args.push("--in-memory".into());
    }
    eal_args
}

/// The rate of the shaped row: 90 % of what shaped CAKE can carry here, in bits of frame
/// length (CAKE's raw mode), so that row measures the shaper rather than a CPU that cannot
/// keep up. Returns that rate and the packet rate it stands for.
fn calibrate(ports: &mut Ports, args: &Args) -> anyhow::Result<(Rate, f64)> {
    // Calibration: the shaped row asks for 90 % of what shaped CAKE can carry here, in
    // bits of frame length (CAKE's raw mode), so that row measures the shaper rather than
    // a CPU that cannot keep up. Shaped CAKE costs more per packet than unshaped CAKE
    // (a standing queue: bulk flows, refill visits, COBALT at work), so start from 90 % of
    // the unshaped rate and, while the shaped run falls short of its rate, step down to
    // 90 % of what it delivered.
    let unshaped = measure(
        ports,
        Kind::Cake {
            bypass: false,
            rate: None,
        },
        args.seconds,
    )?;
    let to_rate = |pps: f64| Rate::from_bits_per_sec((pps * args.frame as f64 * 8.0) as u64);
    let mut target_pps = unshaped.mpps() * 1e6 * 0.9;
    for _ in 0..4 {
        // A rate of 0 would mean "unlimited": never let the shaped row silently become one.
        if target_pps < 1000.0 {
            bail!("CAKE carried {target_pps:.0} packets/s in calibration; is the TX port sending?");
        }
        let kind = Kind::Cake {
            bypass: false,
            rate: Some(to_rate(target_pps)),
        };
        let delivered = measure(ports, kind, args.seconds)?.mpps() * 1e6;
        eprintln!(
            "calibration: shaped to {:.2} Mpps, delivered {:.2} Mpps",
            target_pps / 1e6,
            delivered / 1e6
        );
        if delivered >= 0.98 * target_pps {
            break;
        }
        target_pps = 0.9 * delivered;
    }
    if target_pps < 1000.0 {
        bail!("CAKE carried {target_pps:.0} packets/s in calibration; is the TX port sending?");
    }
    Ok((to_rate(target_pps), target_pps))
}

pub(crate) fn bench(args: &Args, pcap: &std::path::Path, machine: &Machine) -> anyhow::Result<()> {
    let max_threads = machine.threads.iter().copied().max().unwrap_or(1);
    let two_workers = machine.cores.len() >= 2;
    let eal_args = eal_args(args, pcap, max_threads, two_workers);
    let eal = Eal::init(&eal_args)?;
    let pool = Mempool::new(&eal, "bench", 65535, 0)?;
    let cfg = EthDevConfig::default();
    let mut rx_dev = EthDev::open(&eal, "net_pcap0", &cfg, &pool)?;
    let mut tx_dev = EthDev::open(&eal, "net_null0", &cfg, &pool)?;
    let (mut rxs, _) = rx_dev.split()?;
    let (_, mut txs) = tx_dev.split()?;
    let mut all_ports = vec![Ports {
        rx: rxs.pop().context("one rx queue")?,
        tx: txs.pop().context("one tx queue")?,
    }];
    for k in 1..max_threads {
        // Its own pool (kept alive by the devices), so threads share no mempool either.
        let pool = Mempool::new(&eal, &format!("bench_t{k}"), 16383, 0)?;
        let mut rx_dev = EthDev::open(&eal, &format!("net_pcap_t{k}"), &cfg, &pool)?;
        let mut tx_dev = EthDev::open(&eal, &format!("net_null_t{k}"), &cfg, &pool)?;
        let (mut rxs, _) = rx_dev.split()?;
        let (_, mut txs) = tx_dev.split()?;
        all_ports.push(Ports {
            rx: rxs.pop().context("one rx queue")?,
            tx: txs.pop().context("one tx queue")?,
        });
    }
    let ports = &mut all_ports[0];
    // Warm up caches, the pcap replay and the branch predictors.
    let _ = measure(ports, Kind::Bare, 0.3)?;
    if let Some(only) = &args.only {
        if let Some((_, kind)) = ENGINE_ROWS
            .iter()
            .find(|(n, _)| n.replace(' ', "-") == *only)
        {
            let m = engine_row(&eal, &pool, 1, *kind, args)?;
            println!("{only}: {m:.2} Mpps ({:.1} ns/pkt)", 1e3 / m);
            return Ok(());
        }
        let kind = match only.as_str() {
            "bare" => Kind::Bare,
            "parse" => Kind::Parse,
            "fifo+bypass" => Kind::Fifo { bypass: true },
            "fifo" => Kind::Fifo { bypass: false },
            "cake" => Kind::Cake { bypass: false, rate: None },
            "cake+bypass" => Kind::Cake { bypass: true, rate: None },
            "floor" => Kind::Floor,
            other => bail!("--only '{other}' is not a row; try bare, parse, fifo+bypass, fifo, cake, cake+bypass, floor, engine-fifo+bypass or engine-cake"),
        };
        let c = measure(ports, kind, args.seconds)?;
        println!(
            "{only}: {:.2} Mpps ({:.1} ns/pkt)",
            c.mpps(),
            1e3 / c.mpps()
        );
        return Ok(());
    }
    const CAKE: usize = 4; // index of the unshaped, no-bypass CAKE row below
    const SHAPED: usize = 6; // index of the shaped CAKE row
    const FLOOR: usize = 7; // index of the DRR++ floor row

    let (rate, target_pps) = calibrate(ports, args)?;
    let rows: Vec<(String, Kind)> = vec![
        ("bare rx->tx".into(), Kind::Bare),
        ("bare + parse".into(), Kind::Parse),
        ("fifo+bypass".into(), Kind::Fifo { bypass: true }),
        ("fifo".into(), Kind::Fifo { bypass: false }),
        (
            "cake".into(),
            Kind::Cake {
                bypass: false,
                rate: None,
            },
        ),
        (
            "cake+bypass".into(),
            Kind::Cake {
                bypass: true,
                rate: None,
            },
        ),
        (
            format!("cake shaped {:.0} Mbit", rate.bits_per_sec() as f64 / 1e6),
            Kind::Cake {
                bypass: false,
                rate: Some(rate),
            },
        ),
        ("drr floor".into(), Kind::Floor),
    ];
    // Each row (but the first) is paired with a bare run right before it, and its ratio
    // to bare is the median of those pairs: load from other processes on this shared
    // machine then hits both halves of a pair alike.
    let n_rows = rows.len() + ENGINE_ROWS.len();
    let mut mpps: Vec<Vec<f64>> = vec![Vec::new(); n_rows];
    let mut ratio: Vec<Vec<f64>> = vec![Vec::new(); n_rows];
    let mut pair = 0;
    for rep in 0..args.reps {
        for (i, (name, kind)) in rows.iter().enumerate() {
            let bare = if i == 0 {
                None
            } else {
                Some(measure(ports, Kind::Bare, args.seconds)?.mpps())
            };
            let c = measure(ports, *kind, args.seconds)?;
            eprintln!(
                "rep {rep} {name:<22} {:>7.2} Mpps (rx {} tx {} dropped {} queued {}; paired bare {bare:.2?})",
                c.mpps(),
                c.rx,
                c.tx,
                c.dropped,
                c.queued
            );
            mpps[i].push(c.mpps());
            ratio[i].push(bare.map_or(1.0, |b| c.mpps() / b));
        }
        for (j, (name, kind)) in ENGINE_ROWS.iter().enumerate() {
            pair += 1;
            let bare = measure(ports, Kind::Bare, args.seconds)?.mpps();
            let m = engine_row(&eal, &pool, pair, *kind, args)?;
            eprintln!("rep {rep} {name:<22} {m:>7.2} Mpps (paired bare {bare:.2})");
            mpps[rows.len() + j].push(m);
            ratio[rows.len() + j].push(m / bare);
        }
    }
    let scaling = thread_table(&eal, &mut all_ports, machine, args)?;
    // Two workers, by TX queue choice: medians over the reps (each rep runs both rows).
    let mut two: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); TX_SELECT_ROWS.len()];
    if two_workers {
        let mut index = 0;
        for rep in 0..args.reps {
            for (k, (name, sel)) in TX_SELECT_ROWS.iter().enumerate() {
                let (m, dropped) = engine_two_workers_row(&eal, &pool, index, *sel, machine, args)?;
                index += 1;
                eprintln!(
                    "rep {rep} engine 2 workers tx_select {name:<10} {m:>7.2} Mpps, {:.1} % dropped",
                    dropped * 100.0
                );
                two[k].0.push(m);
                two[k].1.push(dropped);
            }
        }
    }
    let two: Vec<(f64, f64)> = two
        .iter_mut()
        .map(|(m, d)| {
            if m.is_empty() {
                (0.0, 0.0)
            } else {
                (median(m), median(d))
            }
        })
        .collect();
    let med: Vec<f64> = mpps.iter_mut().map(|r| median(r)).collect();
    let rat: Vec<f64> = ratio.iter_mut().map(|r| median(r)).collect();
    let names: Vec<String> = rows
        .iter()
        .map(|(n, _)| n.clone())
        .chain(ENGINE_ROWS.iter().map(|(n, _)| n.to_string()))
        .collect();
    let engine = rows.len();
    let shaped_med = med[SHAPED];
    println!(
        "dpdk_fwd: 1 core, {}-byte frames ({} on the wire), {} flows, burst {BURST}, net_pcap(infinite_rx) -> net_null, {} s x {} reps, median; ratio = median of (row / bare run just before it)",
        args.frame,
        args.frame + 4,
        args.flows,
        args.seconds,
        args.reps
    );
    println!(
        "{:<28} {:>8} {:>10} {:>8}",
        "row", "Mpps", "ns/pkt", "ratio"
    );
    for i in 0..n_rows {
        println!(
            "{:<28} {:>8.2} {:>10.1} {:>8.3}",
            names[i],
            med[i],
            1e3 / med[i],
            rat[i]
        );
    }
    let goals = format!(
        "G1 FIFO+bypass/bare {:.3}, engine {:.3} (>= 0.80); G2 FIFO+bypass/FIFO {:.3} (>= 1.20); \
         G4 CAKE/floor {:.3} (>= 0.65); G5 CAKE+bypass/CAKE {:.3} (>= 1.3); shaped CAKE {:.4} of \
         its rate",
        rat[2],
        rat[engine],
        rat[2] / rat[3],
        rat[CAKE] / rat[FLOOR],
        rat[CAKE + 1] / rat[CAKE],
        shaped_med * 1e6 / target_pps
    );
    println!("{goals}");
    let mut st = cakewalk_benches::report::Table::new(&[
        "threads",
        "row",
        "Mpps (median, all threads)",
        "ratio to bare",
        "added ns/frame/thread",
    ]);
    if !scaling.is_empty() {
        println!(
            "scaling: each thread its own pinned lcore, net_pcap -> net_null pair and TX queue; Mpps summed over threads"
        );
        println!(
            "{:>7} {:<20} {:>8} {:>8} {:>12}",
            "threads", "row", "Mpps", "ratio", "added ns/thr"
        );
    }
    for r in &scaling {
        println!(
            "{:>7} {:<20} {:>8.2} {:>8.3} {:>12.1}",
            r.threads, r.name, r.mpps, r.ratio, r.added_ns
        );
        st.push(vec![
            r.threads.to_string(),
            r.name.to_string(),
            format!("{:.2}", r.mpps),
            format!("{:.3}", r.ratio),
            format!("{:.1}", r.added_ns),
        ]);
    }
    let mut wt = cakewalk_benches::report::Table::new(&[
        "tx_select, 2 engine workers",
        "Mpps delivered (median)",
        "dropped (median)",
    ]);
    if two_workers {
        println!("engine, 2 workers, 2 RX + 2 TX queues, CAKE unlimited + bypass:");
        for ((name, _), (m, d)) in TX_SELECT_ROWS.iter().zip(&two) {
            println!(
                "  tx_select {name:<10} {m:>7.2} Mpps, {:.1} % dropped",
                d * 100.0
            );
            wt.push(vec![
                format!("\"{name}\""),
                format!("{m:.2}"),
                format!("{:.1} %", d * 100.0),
            ]);
        }
    }
    if args.write {
        write_section(
            args,
            machine,
            (&names, &med, &rat),
            &goals,
            (!scaling.is_empty()).then_some(&st),
            two_workers.then_some(&wt),
        )?;
    }
    if args.json {
        let rows: Vec<serde_json::Value> = (0..n_rows)
            .map(|i| serde_json::json!({"row": names[i], "mpps": med[i], "ratio": rat[i]}))
            .collect();
        let threads: Vec<serde_json::Value> = scaling
            .iter()
            .map(|r| {
                serde_json::json!({"threads": r.threads, "row": r.name, "mpps": r.mpps,
                    "ratio": r.ratio, "added_ns_per_frame_per_thread": r.added_ns})
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"frame": args.frame, "flows": args.flows, "rows": rows,
                "threads": threads})
        );
    }
    Ok(())
}
