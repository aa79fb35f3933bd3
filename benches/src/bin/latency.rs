//! Latency under load, the cake_mq table (goals G11/G12 of docs/design.md): a veth lab with
//! a shaper at rate R in the middle, TCP load from iperf3 and a latency probe (irtt every
//! 10 ms, or ping -i 0.05 without irtt), for
//!
//! - the bufferbloat reference: kernel HTB at R with its default pfifo leaf (and, with
//!   `--fifo both`, cakewalk's own FIFO);
//! - cakewalk CAKE on 1, 2, 4 and 8 TX queues with `equal` and `work-conserving` rate sync.
//!
//! Tests: `nupN` (N TCP upstreams, besteffort), `rrul` (4 up + 4 down TCP streams marked BE,
//! CS1, CS5 and EF, diffserv3) and `unequal` (one UDP flow at 1.5x R plus eight light ones, so
//! one TX queue carries almost all the demand: `equal` sync leaves rate unused there,
//! `work-conserving` should not). Reported per row: base latency (idle) p50, loaded p50 and
//! p99, probe loss, and the throughput leaving the shaper each way over the loaded window
//! (from `tx_bytes` sampled inside the middle namespace).
//!
//! It does not measure shaping accuracy (see `accuracy`) or packet rates (see `pktgen`).

use anyhow::{bail, Context, Result};
use cakewalk_benches::cakewalk::Knobs;
use cakewalk_benches::lab::{have_tool, require_tool, Lab, LabError, Wire, IP_B};
use cakewalk_benches::plot::{bar_chart, Drawn};
use cakewalk_benches::progress::Progress;
use cakewalk_benches::report::{load_average, machine_line, publish, utc_now, Table};
use cakewalk_benches::sampler::{rate_bps, run_if_sampler, Counter, Sampler};
use cakewalk_benches::units::{parse_rate, tc_rate};
use cakewalk_benches::{install_stop_flag, repo_root, sleep_unless_stopped, stop_requested};
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Which FIFO reference rows to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FifoRef {
    /// Kernel HTB at R with its default pfifo leaf.
    Kernel,
    /// cakewalk with `queue = "fifo"` at R.
    Cakewalk,
    /// Both.
    Both,
    /// None.
    None,
}

/// Which shaper groups to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Only {
    /// Only the kernel reference rows (needs no cakewalk binary).
    Kernel,
    /// Only cakewalk rows.
    Cakewalk,
    /// Everything.
    All,
}

/// Latency under load: kernel FIFO reference vs cakewalk CAKE on N TX queues.
#[derive(Debug, Parser)]
#[command(name = "latency", version)]
struct Args {
    /// Shaped rate R, tc units.
    #[arg(long, default_value = "100mbit")]
    rate: String,
    /// TX queue counts for the cakewalk rows, comma-separated.
    #[arg(long, default_value = "1,2,4,8")]
    queues: String,
    /// Upstream counts for the nup tests, comma-separated (8-32).
    #[arg(long, default_value = "8,32")]
    streams: String,
    /// Seconds of idle probing for the base latency.
    #[arg(long, default_value_t = 2.0)]
    base: f64,
    /// Seconds of load before the loaded probe starts.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds of loaded probing (and throughput window).
    #[arg(long, default_value_t = 8.0)]
    duration: f64,
    /// FIFO reference rows.
    #[arg(long, value_enum, default_value = "kernel")]
    fifo: FifoRef,
    /// Shaper groups to run.
    #[arg(long, value_enum, default_value = "all")]
    only: Only,
    /// Leave out the rrul rows.
    #[arg(long)]
    no_rrul: bool,
    /// Leave out the unequal-load rows.
    #[arg(long)]
    no_unequal: bool,
    #[command(flatten)]
    binary: cakewalk_benches::cakewalk::BinaryArgs,
    /// Directory for the Markdown table and PNG plot.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not update BENCHMARKS.md.
    #[arg(long)]
    no_benchmarks_md: bool,
    /// Short run for CI: 50mbit, 1 queue, nup4 only, 1 s base, 1 s warm-up, 2 s loaded,
    /// results not written to BENCHMARKS.md.
    #[arg(long)]
    smoke: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    Nup(u32),
    Rrul,
    Unequal,
}

impl Test {
    fn label(self) -> String {
        match self {
            Test::Nup(n) => format!("nup{n}"),
            Test::Rrul => "rrul".into(),
            Test::Unequal => "unequal".into(),
        }
    }
    fn diffserv(self) -> &'static str {
        match self {
            Test::Rrul => "diffserv3",
            _ => "besteffort",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Middle {
    KernelFifo,
    CakewalkFifo,
    Cake { queues: u32, sync: &'static str },
}

impl Middle {
    fn label(&self) -> String {
        match self {
            Middle::KernelFifo => "kernel HTB+pfifo".into(),
            Middle::CakewalkFifo => "cakewalk fifo".into(),
            Middle::Cake { sync, .. } => format!("cakewalk CAKE {sync}"),
        }
    }
    fn queues(&self) -> String {
        match self {
            Middle::Cake { queues, .. } => queues.to_string(),
            _ => "1".into(),
        }
    }
}

struct Plan {
    middle: Middle,
    test: Test,
}

#[derive(Default)]
struct Latency {
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    loss_pct: Option<f64>,
}

struct Row {
    plan: Plan,
    base: Latency,
    loaded: Latency,
    up_bps: Option<f64>,
    down_bps: Option<f64>,
    note: String,
}

fn main() -> ExitCode {
    run_if_sampler();
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn list_u32(flag: &str, s: &str, lo: u32, hi: u32) -> Result<Vec<u32>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let n: u32 = p
                .trim()
                .parse()
                .with_context(|| format!("{flag}: '{p}' is not a number; try '{lo},{hi}'"))?;
            if !(lo..=hi).contains(&n) {
                bail!("{flag}: {n} is out of range; use {lo}..{hi}");
            }
            Ok(n)
        })
        .collect()
}

fn run(mut args: Args) -> Result<()> {
    if args.smoke {
        args.rate = "50mbit".into();
        args.queues = "1".into();
        args.streams = "4".into();
        args.base = 1.0;
        args.warmup = 1.0;
        args.duration = 2.0;
        args.no_rrul = true;
        args.no_unequal = true;
        args.no_benchmarks_md = true;
    }
    let rate = parse_rate(&args.rate).map_err(|e| anyhow::anyhow!("--rate: {e}"))?;
    let queues = list_u32("--queues", &args.queues, 1, 8)?;
    let streams = list_u32("--streams", &args.streams, 1, 64)?;
    if args.base < 0.5 || args.warmup < 0.5 || args.duration < 1.0 || args.duration > 60.0 {
        bail!("--base/--warmup must be >= 0.5 s and --duration 1..60 s");
    }
    require_tool("iperf3", "iperf3")?;
    let probe = if have_tool("irtt") {
        Probe::Irtt
    } else if have_tool("ping") {
        Probe::Ping
    } else {
        bail!("no latency probe: install 'irtt' (apt-get install irtt) or 'ping' (apt-get install iputils-ping)");
    };
    let cakewalk = args.binary.find();
    let want_cw = matches!(args.only, Only::Cakewalk | Only::All);
    if want_cw && cakewalk.is_none() {
        if args.only == Only::Cakewalk {
            bail!("no cakewalk binary found; build it with `cargo build --release -p forwarder` or pass --cakewalk PATH");
        }
        eprintln!("note: no cakewalk binary found (cargo build --release -p forwarder); kernel reference rows only");
    }
    let have_cw = want_cw && cakewalk.is_some();

    let mut tests: Vec<Test> = streams.iter().map(|&n| Test::Nup(n)).collect();
    if !args.no_rrul {
        tests.push(Test::Rrul);
    }
    let mut plans = Vec::new();
    let mut fifos = Vec::new();
    if matches!(args.fifo, FifoRef::Kernel | FifoRef::Both) && args.only != Only::Cakewalk {
        fifos.push(Middle::KernelFifo);
    }
    if matches!(args.fifo, FifoRef::Cakewalk | FifoRef::Both) && have_cw {
        fifos.push(Middle::CakewalkFifo);
    }
    for m in fifos {
        for &t in &tests {
            plans.push(Plan {
                middle: m.clone(),
                test: t,
            });
        }
    }
    if have_cw {
        for &q in &queues {
            for sync in ["equal", "work-conserving"] {
                let m = Middle::Cake { queues: q, sync };
                for &t in &tests {
                    plans.push(Plan {
                        middle: m.clone(),
                        test: t,
                    });
                }
                if q >= 2 && !args.no_unequal {
                    plans.push(Plan {
                        middle: m.clone(),
                        test: Test::Unequal,
                    });
                }
            }
        }
    }
    if plans.is_empty() {
        bail!("nothing to run with these flags");
    }
    let stop = install_stop_flag();
    let per_row = 1.0 + args.base + args.warmup + args.duration + 4.0;
    let bound = per_row * plans.len() as f64 + 5.0;
    eprintln!(
        "latency: {} rows at {} ({:.0} s base + {:.0} s warm-up + {:.0} s loaded each); this run stops by itself within {:.0} s",
        plans.len(),
        tc_rate(rate),
        args.base,
        args.warmup,
        args.duration,
        bound
    );
    let deadline = Instant::now() + Duration::from_secs_f64(bound);

    let mut lab = Lab::new("lat").map_err(|e| match e {
        LabError::NotRoot => anyhow::anyhow!("{e} (scripts/bench-smoke skips this when not root)"),
        e => e.into(),
    })?;
    let max_q = queues.iter().copied().max().unwrap_or(1);
    let wire = lab.wire(max_q)?;
    let probe_srv = match probe {
        Probe::Irtt => Some(lab.spawn(
            &wire.b,
            &["irtt", "server", "-b", &format!("{IP_B}:2112")],
            false,
        )?),
        Probe::Ping => None,
    };
    sleep_unless_stopped(Duration::from_millis(300))?;

    let mut progress = Progress::new("latency", plans.len() as u64);
    let mut rows = Vec::new();
    for plan in plans {
        if stop_requested() || Instant::now() > deadline {
            break;
        }
        progress.step(&format!(
            "{} q={} {} {}",
            plan.middle.label(),
            plan.middle.queues(),
            plan.test.diffserv(),
            plan.test.label()
        ));
        let row = match measure(
            &mut lab,
            &wire,
            &args,
            cakewalk.as_deref(),
            probe,
            rate,
            &plan,
        ) {
            Ok(r) => r,
            Err(e) => Row {
                plan,
                base: Latency::default(),
                loaded: Latency::default(),
                up_bps: None,
                down_bps: None,
                note: format!("failed: {e:#}"),
            },
        };
        progress.println(&format!(
            "{:<32} q={} {:<10} {:<7} base {:>7} loaded p50 {:>8} p99 {:>8} ms  up {:>8} down {:>8} Mbit/s {}",
            row.plan.middle.label(),
            row.plan.middle.queues(),
            row.plan.test.diffserv(),
            row.plan.test.label(),
            ms(row.base.p50_ms),
            ms(row.loaded.p50_ms),
            ms(row.loaded.p99_ms),
            mbit(row.up_bps),
            mbit(row.down_bps),
            row.note
        ));
        rows.push(row);
        progress.inc();
    }
    progress.finish();
    if let Some(i) = probe_srv {
        lab.kill(i);
    }
    drop(lab);
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        bail!("interrupted; namespaces removed, no results written");
    }
    write_results(&args, rate, probe, &rows)?;
    // A smoke run is a check: a row that could not be measured fails it.
    let broken = rows.iter().filter(|r| r.note.starts_with("failed")).count();
    if args.smoke && broken > 0 {
        bail!("{broken} row(s) failed; see the table above");
    }
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

fn mbit(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}", v / 1e6))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Irtt,
    Ping,
}

impl Probe {
    fn name(self) -> &'static str {
        match self {
            Probe::Irtt => "irtt -i 10ms",
            Probe::Ping => "ping -i 0.05",
        }
    }
}

/// Runs the probe from a to b for `secs` and returns RTT percentiles and loss. irtt gives up
/// without a result when its handshake is lost (a flooded queue can drop it), so a failed
/// probe is run once more before the row is reported as failed.
fn probe_latency(lab: &mut Lab, w: &Wire, probe: Probe, secs: f64) -> Result<Latency> {
    probe_once(lab, w, probe, secs).or_else(|first| {
        eprintln!("probe failed ({first:#}); probing again");
        probe_once(lab, w, probe, secs)
    })
}

fn probe_once(lab: &mut Lab, w: &Wire, probe: Probe, secs: f64) -> Result<Latency> {
    let d = format!("{}ms", (secs * 1000.0) as u64);
    match probe {
        Probe::Irtt => {
            let out = std::env::temp_dir().join(format!("cwb-irtt-{}.json", std::process::id()));
            let out_s = out.to_string_lossy().into_owned();
            let idx = lab.spawn(
                &w.a,
                &[
                    "irtt",
                    "client",
                    "-i",
                    "10ms",
                    "-d",
                    &d,
                    "-Q",
                    "-o",
                    &out_s,
                    &format!("{IP_B}:2112"),
                ],
                false,
            )?;
            lab.finish(idx, Duration::from_secs_f64(secs + 5.0))?;
            let text = std::fs::read_to_string(&out).with_context(|| {
                format!("reading {out_s} (irtt wrote no result: its handshake got no reply)")
            })?;
            let _ = std::fs::remove_file(&out);
            Ok(irtt_latency(&text))
        }
        Probe::Ping => {
            let count = ((secs / 0.05) as u64).max(1).to_string();
            let idx = lab.spawn(
                &w.a,
                &["ping", "-n", "-i", "0.05", "-c", &count, "-W", "1", IP_B],
                true,
            )?;
            let f = lab.finish_any(idx, Duration::from_secs_f64(secs + 3.0));
            Ok(ping_latency(&f.stdout, count.parse().unwrap_or(1)))
        }
    }
}

/// Percentiles of irtt's JSON round trips (RTT in ns; lost packets have none).
fn irtt_latency(json: &str) -> Latency {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let trips = v["round_trips"].as_array().cloned().unwrap_or_default();
    let rtts: Vec<f64> = trips
        .iter()
        .filter_map(|t| t["delay"]["rtt"].as_f64())
        .map(|ns| ns / 1e6)
        .collect();
    summarize(rtts, trips.len())
}

/// Percentiles of ping's "time=X ms" lines.
fn ping_latency(out: &str, sent: usize) -> Latency {
    let rtts: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next())
        .filter_map(|t| t.parse().ok())
        .collect();
    summarize(rtts, sent)
}

fn summarize(mut rtts: Vec<f64>, sent: usize) -> Latency {
    if rtts.is_empty() {
        return Latency {
            loss_pct: (sent > 0).then_some(100.0),
            ..Latency::default()
        };
    }
    rtts.sort_by(f64::total_cmp);
    let pick = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize];
    Latency {
        p50_ms: Some(pick(0.5)),
        p99_ms: Some(pick(0.99)),
        loss_pct: (sent > 0).then(|| 100.0 * (1.0 - rtts.len() as f64 / sent as f64).max(0.0)),
    }
}

fn kernel_htb(lab: &Lab, w: &Wire, rate: u64) -> Result<(), LabError> {
    let r = tc_rate(rate);
    for dev in ["ra", "rb"] {
        let _ = lab.tc(&w.r, &["qdisc", "del", "dev", dev, "root"]);
        lab.tc(
            &w.r,
            &[
                "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
            ],
        )?;
        lab.tc(
            &w.r,
            &[
                "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", &r,
                "ceil", &r,
            ],
        )?;
    }
    Ok(())
}

/// DSCP as TOS bytes for the rrul streams: BE, CS1 (bulk), CS5, EF.
const RRUL_TOS: [&str; 4] = ["0x00", "0x20", "0xa0", "0xb8"];

fn measure(
    lab: &mut Lab,
    w: &Wire,
    args: &Args,
    cakewalk: Option<&std::path::Path>,
    probe: Probe,
    rate: u64,
    plan: &Plan,
) -> Result<Row> {
    let mut mid = None;
    match &plan.middle {
        Middle::KernelFifo => {
            lab.kernel_bridge(w, true)?;
            kernel_htb(lab, w, rate)?;
        }
        m => {
            lab.kernel_bridge(w, false)?;
            let bin = cakewalk.context("no cakewalk binary")?;
            let mut k = Knobs::cake(rate);
            k.diffserv = Some(plan.test.diffserv().into());
            match m {
                Middle::Cake { queues, sync } => {
                    k.tx_queues = *queues;
                    k.sync = Some((*sync).into());
                }
                _ => k.qdisc = Some("fifo".into()),
            }
            k.extra = args.binary.extra();
            mid = Some(cakewalk_benches::cakewalk::start(
                lab,
                &w.r,
                bin,
                &k,
                Duration::from_millis(700),
            )?);
        }
    }
    let result = measure_traffic(lab, w, args, probe, rate, plan);
    let mut note = String::new();
    if let Some(idx) = mid {
        if let Ok(Some(status)) = lab.child(idx).try_wait() {
            note = format!("cakewalk exited during the run ({status})");
        }
        lab.kill(idx);
    }
    let mut row = result?;
    if !note.is_empty() {
        row.note = format!("{note} {}", row.note).trim().to_string();
    }
    Ok(row)
}

fn measure_traffic(
    lab: &mut Lab,
    w: &Wire,
    args: &Args,
    probe: Probe,
    rate: u64,
    plan: &Plan,
) -> Result<Row> {
    let base = probe_latency(lab, w, probe, args.base)?;
    let load_secs = args.warmup + args.duration + 0.5;
    let t = format!("{}", load_secs.ceil() as u64);
    let mut procs = Vec::new();
    let server = |lab: &mut Lab, port: u16| -> Result<usize, LabError> {
        lab.spawn(
            &w.b,
            &["iperf3", "-s", "-1", "-p", &port.to_string(), "-B", IP_B],
            false,
        )
    };
    let mut clients: Vec<Vec<String>> = Vec::new();
    let c = |port: u16, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["iperf3", "-c", IP_B, "-p", &port.to_string(), "-t", &t]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    match plan.test {
        Test::Nup(n) => {
            procs.push(server(lab, 5301)?);
            clients.push(c(5301, &["-P", &n.to_string()]));
        }
        Test::Rrul => {
            for (i, tos) in RRUL_TOS.iter().enumerate() {
                let port = 5301 + i as u16;
                procs.push(server(lab, port)?);
                clients.push(c(port, &["--bidir", "-S", tos]));
            }
        }
        Test::Unequal => {
            procs.push(server(lab, 5301)?);
            procs.push(server(lab, 5302)?);
            let heavy = ((rate as f64) * 1.5).round() as u64;
            let light = ((rate as f64) * 0.02).round() as u64;
            clients.push(c(5301, &["-u", "-l", "1472", "-b", &heavy.to_string()]));
            clients.push(c(
                5302,
                &["-u", "-l", "1472", "-P", "8", "-b", &light.to_string()],
            ));
        }
    }
    sleep_unless_stopped(Duration::from_millis(200))?;
    let sampler = Sampler::start(
        lab,
        &w.r,
        &["ra", "rb"],
        Duration::from_millis(100),
        Duration::from_secs_f64(args.warmup + args.duration + 0.2),
    )?;
    for cmd in &clients {
        let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
        procs.push(lab.spawn(&w.a, &refs, false)?);
    }
    sleep_unless_stopped(Duration::from_secs_f64(args.warmup))?;
    let loaded = probe_latency(lab, w, probe, args.duration);
    let samples = sampler.collect(lab, Duration::from_secs(5));
    for p in procs {
        lab.kill(p);
    }
    let loaded = loaded?;
    let samples = samples?;
    let from = Duration::from_secs_f64(args.warmup);
    let to = Duration::from_secs_f64(args.warmup + args.duration);
    let up = rate_bps(&samples, "rb", Counter::TxBytes, from, to);
    let down = rate_bps(&samples, "ra", Counter::TxBytes, from, to);
    let mut note = String::new();
    if loaded.p50_ms.is_none() {
        note.push_str("no probe replies under load");
    }
    Ok(Row {
        plan: Plan {
            middle: plan.middle.clone(),
            test: plan.test,
        },
        base,
        loaded,
        up_bps: up,
        down_bps: down,
        note,
    })
}

/// The result as one row per shaper and queue count and one column per test, each cell the
/// loaded p50 / p99 in ms and the throughput (up, or up / down for rrul); base p50 is the
/// median of the row's idle probes. Rows' notes come back as lines for below the table.
fn latency_table(rows: &[Row]) -> (Table, Vec<String>) {
    let mut tests: Vec<Test> = Vec::new();
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in rows {
        if !tests.contains(&r.plan.test) {
            tests.push(r.plan.test);
        }
        let key = (r.plan.middle.label(), r.plan.middle.queues());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let mut headers = vec!["shaper".to_string(), "queues".into(), "base p50".into()];
    headers.extend(tests.iter().map(|t| t.label()));
    let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
    let mut notes = Vec::new();
    for (label, queues) in groups {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| r.plan.middle.label() == label && r.plan.middle.queues() == queues)
            .collect();
        let mut bases: Vec<f64> = mine.iter().filter_map(|r| r.base.p50_ms).collect();
        bases.sort_by(f64::total_cmp);
        let mut cells = vec![
            label.clone(),
            queues.clone(),
            ms(bases.get(bases.len() / 2).copied()),
        ];
        for test in &tests {
            let Some(r) = mine.iter().find(|r| r.plan.test == *test) else {
                cells.push("-".into());
                continue;
            };
            let through = match test {
                Test::Rrul => format!("{} / {}", mbit(r.up_bps), mbit(r.down_bps)),
                _ => mbit(r.up_bps),
            };
            let mut cell = format!(
                "{} / {} ({through})",
                ms(r.loaded.p50_ms),
                ms(r.loaded.p99_ms)
            );
            match r.loaded.loss_pct {
                Some(l) if l >= 0.05 => cell.push_str(&format!(", loss {l:.1} %")),
                _ => {}
            }
            if !r.note.is_empty() {
                cell.push_str(" *");
                notes.push(format!(
                    "- \\* {label}, {queues} queues, {}: {}.",
                    test.label(),
                    r.note
                ));
            }
            cells.push(cell);
        }
        t.push(cells);
    }
    (t, notes)
}

fn write_results(args: &Args, rate: u64, probe: Probe, rows: &[Row]) -> Result<()> {
    let root = repo_root();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("benches/results"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let (t, notes) = latency_table(rows);
    let stem = if args.smoke {
        "latency-smoke"
    } else {
        "latency"
    };
    let png = out.join(format!("{stem}.png"));
    let cats: Vec<String> = rows
        .iter()
        .map(|r| {
            let short = match &r.plan.middle {
                Middle::KernelFifo => "htb+pfifo".to_string(),
                Middle::CakewalkFifo => "cw fifo".to_string(),
                Middle::Cake { queues, sync } => {
                    format!(
                        "cake {} q{queues}",
                        if *sync == "equal" { "eq" } else { "wc" }
                    )
                }
            };
            format!("{short} {}", r.plan.test.label())
        })
        .collect();
    let names = vec![
        "base p50".to_string(),
        "loaded p50".to_string(),
        "loaded p99".to_string(),
    ];
    let vals = vec![
        rows.iter()
            .map(|r| r.base.p50_ms.unwrap_or(f64::NAN))
            .collect(),
        rows.iter()
            .map(|r| r.loaded.p50_ms.unwrap_or(f64::NAN))
            .collect(),
        rows.iter()
            .map(|r| r.loaded.p99_ms.unwrap_or(f64::NAN))
            .collect::<Vec<f64>>(),
    ];
    let drawn = bar_chart(
        &png,
        &format!("Latency under load at {} (ms, log scale)", tc_rate(rate)),
        "RTT (ms)",
        &cats,
        &names,
        &vals,
        true,
    )?;
    let cmd = format!(
        "sudo target/release/latency --rate {} --queues {} --streams {} --base {} --warmup {} --duration {} --fifo {:?}{}{}",
        tc_rate(rate),
        args.queues,
        args.streams,
        args.base,
        args.warmup,
        args.duration,
        args.fifo,
        if args.no_rrul { " --no-rrul" } else { "" },
        if args.no_unequal { " --no-unequal" } else { "" },
    )
    .to_lowercase();
    let body = format!(
        "## Latency under load (`benches/src/bin/latency.rs`)\n{}\n{} Cells: loaded p50 / p99 \
         ms of {} (Mbit/s up, or up / down). nupN: N TCP upstreams; rrul: 4 up + 4 down; \
         unequal: a UDP flow at 1.5x the rate and 8 light ones. G12: p50 <= base + 5 ms, p99 <= \
         15 ms and a tenth of the FIFO's; G11: unequal within 1 %.{}{}\n",
        t.to_markdown(),
        cakewalk_benches::report::provenance(
            &utc_now(),
            &cakewalk_benches::report::commit(),
            &machine_line(),
            &load_average(),
            &cmd
        ),
        probe.name(),
        notes
            .iter()
            .map(|n| format!(" {}", n.trim_start_matches("- ")))
            .collect::<String>(),
        if drawn == Drawn::WithoutText {
            " Plot drawn without text: no font found."
        } else {
            ""
        },
    );
    publish(
        &root,
        &out,
        stem,
        &png,
        "latency",
        &body,
        !args.no_benchmarks_md,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irtt_json_gives_percentiles_and_loss() {
        let json = r#"{"round_trips":[
            {"delay":{"rtt":1000000}},{"delay":{"rtt":2000000}},
            {"delay":{"rtt":3000000}},{"lost":"true","delay":{}}]}"#;
        let l = irtt_latency(json);
        assert_eq!(l.p50_ms, Some(2.0));
        assert_eq!(l.p99_ms, Some(3.0));
        assert!((l.loss_pct.unwrap() - 25.0).abs() < 1e-9);
    }

    #[test]
    fn ping_output_gives_percentiles() {
        let out = "64 bytes from 198.18.0.2: icmp_seq=1 ttl=64 time=0.045 ms\n\
                   64 bytes from 198.18.0.2: icmp_seq=2 ttl=64 time=19.5 ms\n";
        let l = ping_latency(out, 2);
        assert_eq!(l.p50_ms, Some(19.5));
        assert_eq!(l.loss_pct, Some(0.0));
    }

    #[test]
    fn a_probe_with_no_replies_reports_full_loss_and_no_percentiles() {
        let l = summarize(Vec::new(), 10);
        assert!(l.p50_ms.is_none());
        assert_eq!(l.loss_pct, Some(100.0));
    }

    #[test]
    fn the_table_has_a_row_per_shaper_and_queue_count_and_a_column_per_test() {
        let lat = |p50, p99| Latency {
            p50_ms: Some(p50),
            p99_ms: Some(p99),
            loss_pct: Some(0.0),
        };
        let row = |middle: Middle, test, base, up, note: &str| Row {
            plan: Plan { middle, test },
            base: lat(base, base),
            loaded: lat(1.0, 2.0),
            up_bps: Some(up),
            down_bps: Some(50e6),
            note: note.into(),
        };
        let cake = |queues| Middle::Cake {
            queues,
            sync: "equal",
        };
        let rows = vec![
            row(Middle::KernelFifo, Test::Nup(8), 0.1, 99.8e6, ""),
            row(cake(2), Test::Nup(8), 0.2, 100e6, ""),
            row(cake(2), Test::Rrul, 0.4, 72.8e6, ""),
            row(
                cake(2),
                Test::Unequal,
                0.3,
                99.5e6,
                "no probe replies under load",
            ),
        ];
        let (t, notes) = latency_table(&rows);
        let md = t.to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| shaper | queues | base p50 | nup8 | rrul | unequal |"
        );
        assert_eq!(
            lines[2],
            "| kernel HTB+pfifo | 1 | 0.10 | 1.00 / 2.00 (99.8) | - | - |"
        );
        assert_eq!(
            lines[3],
            "| cakewalk CAKE equal | 2 | 0.30 | 1.00 / 2.00 (100.0) | 1.00 / 2.00 (72.8 / 50.0) \
             | 1.00 / 2.00 (99.5) * |"
        );
        assert_eq!(
            notes,
            ["- \\* cakewalk CAKE equal, 2 queues, unequal: no probe replies under load."]
        );
    }
}
