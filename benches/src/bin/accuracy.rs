//! Shaping accuracy: how close the rate that leaves a shaper is to the rate it was configured
//! with, for kernel HTB, kernel TBF and cakewalk's CAKE (AF_PACKET), on the same veth lab in
//! the same run (goal G9 of docs/design.md).
//!
//! Lab: `a (198.18.0.1) — ra [r] rb — b (198.18.0.2)`. In `r` either a kernel bridge with
//! the kernel qdisc on `rb`'s egress, or cakewalk moving frames between `ra` and `rb` at layer 2.
//! iperf3 offers UDP from `a` to `b` at 1.5x the configured rate; a sampler inside `r` reads
//! `rb`'s `tx_bytes` (every byte that left the shaper, Ethernet header included, which is what
//! HTB/TBF and CAKE in `raw` mode count) and `ra`'s `rx_bytes` (what was offered). The rate is
//! taken over a window after a warm-up, from the sampler's own timestamps.
//!
//! It does not measure latency (see `latency`) or packets per second (see `pktgen`).

use anyhow::{bail, Context, Result};
use cakewalk_benches::cakewalk::Knobs;
use cakewalk_benches::lab::{require_tool, Lab, LabError, IP_B};
use cakewalk_benches::plot::{line_chart, Series};
use cakewalk_benches::progress::Progress;
use cakewalk_benches::report::{load_average, machine_line, publish, utc_now, Table};
use cakewalk_benches::sampler::{rate_bps, run_if_sampler, Counter, Sampler};
use cakewalk_benches::units::{parse_rate_list, tc_rate, BadRate};
use cakewalk_benches::{install_stop_flag, repo_root, sleep_unless_stopped, stop_requested};
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Which shapers to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Only {
    /// Kernel HTB and TBF (needs no cakewalk binary).
    Kernel,
    /// cakewalk only.
    Cakewalk,
    /// Kernel HTB and TBF and cakewalk.
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shaper {
    Htb,
    Tbf,
    Cake,
}

impl Shaper {
    fn name(self) -> &'static str {
        match self {
            Shaper::Htb => "kernel HTB",
            Shaper::Tbf => "kernel TBF",
            Shaper::Cake => "cakewalk CAKE (afpacket)",
        }
    }
}

/// Shaping accuracy of kernel HTB/TBF and cakewalk CAKE on a veth lab.
#[derive(Debug, Parser)]
#[command(name = "accuracy", version)]
struct Args {
    /// Configured rates, tc units, comma-separated.
    #[arg(long, default_value = "10mbit,100mbit,200mbit,300mbit,500mbit,1gbit")]
    rates: String,
    /// Which shapers to measure.
    #[arg(long, value_enum, default_value = "all")]
    only: Only,
    /// Offered load as a multiple of the configured rate.
    #[arg(long, default_value_t = 1.5)]
    offer: f64,
    /// Seconds of traffic before the measuring window (queues fill, bursts drain).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds in the measuring window.
    #[arg(long, default_value_t = 5.0)]
    window: f64,
    /// Parallel iperf3 senders (each offers its share); 0 picks 1 up to 250 Mbit/s offered, else 2.
    #[arg(long, default_value_t = 0)]
    streams: u32,
    /// UDP payload bytes per datagram (1472 makes 1514-byte frames).
    #[arg(long, default_value_t = 1472)]
    len: u32,
    /// Repetitions per row; the row reports the median (and the spread in its note).
    #[arg(long, default_value_t = 1)]
    reps: u32,
    #[command(flatten)]
    binary: cakewalk_benches::cakewalk::BinaryArgs,
    /// Directory for the Markdown table and PNG plot.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not update BENCHMARKS.md (results/ files are still written).
    #[arg(long)]
    no_benchmarks_md: bool,
    /// Short run for CI: 100mbit only, 1 s warm-up, 2 s window, results not written to
    /// BENCHMARKS.md.
    #[arg(long)]
    smoke: bool,
}

struct Row {
    shaper: Shaper,
    configured: u64,
    measured: Option<f64>,
    offered: Option<f64>,
    note: String,
}

impl Row {
    fn error_pct(&self) -> Option<f64> {
        self.measured
            .map(|m| (m / self.configured as f64 - 1.0) * 100.0)
    }
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

fn run(mut args: Args) -> Result<()> {
    if args.smoke {
        args.rates = "100mbit".into();
        args.warmup = 1.0;
        args.window = 2.0;
        args.no_benchmarks_md = true;
    }
    let rates = parse_rate_list(&args.rates).map_err(|BadRate(s)| {
        anyhow::anyhow!("--rates: rate '{s}' is not a rate; try '100mbit' or '1gbit'")
    })?;
    if !(1.0..=10.0).contains(&args.offer) {
        bail!(
            "--offer {} is out of range; use 1.0..10 (1.5 is the default)",
            args.offer
        );
    }
    if args.warmup < 0.5 || args.window < 1.0 || args.warmup + args.window > 60.0 {
        bail!(
            "--warmup {} / --window {} out of range; warm-up >= 0.5 s, window >= 1 s, sum <= 60 s",
            args.warmup,
            args.window
        );
    }
    require_tool("iperf3", "iperf3")?;
    let mut shapers = Vec::new();
    if matches!(args.only, Only::Kernel | Only::All) {
        shapers.extend([Shaper::Htb, Shaper::Tbf]);
    }
    let cakewalk = args.binary.find();
    if matches!(args.only, Only::Cakewalk | Only::All) {
        match &cakewalk {
            Some(_) => shapers.push(Shaper::Cake),
            None if args.only == Only::Cakewalk => bail!(
                "no cakewalk binary found; build it with `cargo build --release -p forwarder` or pass --cakewalk PATH"
            ),
            None => eprintln!(
                "note: no cakewalk binary found (cargo build --release -p forwarder); measuring kernel shapers only"
            ),
        }
    }
    let stop = install_stop_flag();
    if !(1..=9).contains(&args.reps) {
        bail!("--reps {} is out of range; use 1..9", args.reps);
    }
    let per_row = (args.warmup + args.window + 4.0) * f64::from(args.reps);
    let rows_n = rates.len() * shapers.len();
    let bound = per_row * rows_n as f64 + 5.0;
    eprintln!(
        "accuracy: {} shapers x {} rates, {:.0} s warm-up + {:.0} s window each; this run stops by itself within {:.0} s",
        shapers.len(), rates.len(), args.warmup, args.window, bound
    );
    let deadline = Instant::now() + Duration::from_secs_f64(bound);

    let mut lab = Lab::new("acc").map_err(|e| match e {
        LabError::NotRoot => {
            anyhow::anyhow!("{e} (or use `scripts/bench-smoke`, which skips this when not root)")
        }
        e => e.into(),
    })?;
    let wire = lab.wire(1)?;
    let (na, nr, nb) = (wire.a.clone(), wire.r.clone(), wire.b.clone());

    let mut progress = Progress::new("accuracy", rows_n as u64);
    let mut rows = Vec::new();
    for &shaper in &shapers {
        lab.kernel_bridge(&wire, shaper != Shaper::Cake)?;
        for &rate in &rates {
            if stop_requested() || Instant::now() > deadline {
                break;
            }
            progress.step(&format!("{} at {}", shaper.name(), tc_rate(rate)));
            let mut runs: Vec<Row> = (0..args.reps)
                .map(|_| {
                    measure(
                        &mut lab,
                        &args,
                        cakewalk.as_deref(),
                        (&na, &nr, &nb),
                        shaper,
                        rate,
                    )
                    .unwrap_or_else(|e| Row {
                        shaper,
                        configured: rate,
                        measured: None,
                        offered: None,
                        note: format!("failed: {e:#}"),
                    })
                })
                .collect();
            let row = median_row(&mut runs);
            progress.println(&format!(
                "{:<26} {:>9}  measured {:>10} Mbit/s  error {:>8}  offered {:>10} Mbit/s {}",
                shaper.name(),
                tc_rate(rate),
                row.measured
                    .map_or("-".into(), |m| format!("{:.3}", m / 1e6)),
                row.error_pct().map_or("-".into(), |e| format!("{e:+.3}%")),
                row.offered
                    .map_or("-".into(), |m| format!("{:.1}", m / 1e6)),
                row.note
            ));
            rows.push(row);
            progress.inc();
        }
    }
    progress.finish();
    drop(lab);
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        bail!("interrupted; namespaces removed, no results written");
    }
    write_results(&args, &rates, &rows)?;
    // A smoke run is a check: a row that could not be measured fails it.
    let broken = rows.iter().filter(|r| r.note.starts_with("failed")).count();
    if args.smoke && broken > 0 {
        bail!("{broken} row(s) failed; see the table above");
    }
    Ok(())
}

fn start_servers(lab: &mut Lab, nb: &str, n: u16) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for i in 0..n {
        let port = (5201 + i).to_string();
        v.push(lab.spawn(nb, &["iperf3", "-s", "-p", &port, "-B", IP_B], false)?);
    }
    sleep_unless_stopped(Duration::from_millis(200))?;
    Ok(v)
}

fn kernel_qdisc(lab: &Lab, nr: &str, shaper: Shaper, rate: u64) -> Result<(), LabError> {
    let r = tc_rate(rate);
    let _ = lab.tc(nr, &["qdisc", "del", "dev", "rb", "root"]);
    match shaper {
        Shaper::Htb => {
            lab.tc(
                nr,
                &[
                    "qdisc", "add", "dev", "rb", "root", "handle", "1:", "htb", "default", "10",
                ],
            )?;
            lab.tc(
                nr,
                &[
                    "class", "add", "dev", "rb", "parent", "1:", "classid", "1:10", "htb", "rate",
                    &r, "ceil", &r,
                ],
            )
        }
        Shaper::Tbf => {
            // Burst: at least one jiffy of traffic at the rate (tc-tbf(8)) and 10 frames.
            let burst = (rate / 8 / 1000).max(15_140).to_string();
            lab.tc(
                nr,
                &[
                    "qdisc", "add", "dev", "rb", "root", "tbf", "rate", &r, "burst", &burst,
                    "latency", "50ms",
                ],
            )
        }
        Shaper::Cake => Ok(()),
    }
}

/// Returns the run with the median measured rate; with several runs its note gives the
/// spread (max - min) relative to the rate. A failed run wins, so failures are never hidden.
fn median_row(runs: &mut Vec<Row>) -> Row {
    if let Some(i) = runs.iter().position(|r| r.measured.is_none()) {
        return runs.swap_remove(i);
    }
    let n = runs.len();
    let values: Vec<f64> = runs.iter().filter_map(|r| r.measured).collect();
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    runs.sort_by(|a, b| {
        a.measured
            .unwrap_or(0.0)
            .total_cmp(&b.measured.unwrap_or(0.0))
    });
    let mut row = runs.swap_remove(n / 2);
    if n > 1 {
        let spread = (hi - lo) / row.configured as f64 * 100.0;
        row.note = format!("median of {n}, spread {spread:.3} %; {}", row.note)
            .trim_end_matches("; ")
            .to_string();
    }
    row
}

fn measure(
    lab: &mut Lab,
    args: &Args,
    cakewalk: Option<&std::path::Path>,
    (na, nr, nb): (&str, &str, &str),
    shaper: Shaper,
    rate: u64,
) -> Result<Row> {
    let mut mid = None;
    match shaper {
        Shaper::Htb | Shaper::Tbf => kernel_qdisc(lab, nr, shaper, rate)?,
        Shaper::Cake => {
            let bin = cakewalk.context("no cakewalk binary")?;
            let mut knobs = Knobs::cake(rate);
            knobs.extra = args.binary.extra();
            mid = Some(cakewalk_benches::cakewalk::start(
                lab,
                nr,
                bin,
                &knobs,
                Duration::from_millis(700),
            )?);
        }
    }
    let streams = match args.streams {
        0 if rate as f64 * args.offer > 250e6 => 2,
        0 => 1,
        n => n.min(4),
    };
    let total = args.warmup + args.window;
    // Fresh servers per row: an iperf3 server stays busy with a killed client's test.
    let servers = start_servers(lab, nb, streams as u16)?;
    let sampler = Sampler::start(
        lab,
        nr,
        &["ra", "rb"],
        Duration::from_millis(100),
        Duration::from_secs_f64(total + 0.3),
    )?;
    let per_stream = ((rate as f64 * args.offer) / streams as f64).round() as u64;
    let secs = format!("{}", (total + 1.0).ceil() as u64);
    let len = args.len.to_string();
    let bw = per_stream.to_string();
    let mut clients = Vec::new();
    for i in 0..streams {
        let port = (5201 + i).to_string();
        clients.push(lab.spawn(
            na,
            &[
                "iperf3", "-c", IP_B, "-p", &port, "-u", "-b", &bw, "-l", &len, "-t", &secs,
            ],
            false,
        )?);
    }
    let samples = sampler.collect(lab, Duration::from_secs_f64(total + 3.0));
    for c in clients.into_iter().chain(servers) {
        lab.kill(c);
    }
    let mut note = String::new();
    if let Some(idx) = mid {
        if let Ok(Some(status)) = lab.child(idx).try_wait() {
            note = format!("cakewalk exited during the run ({status})");
        }
        lab.kill(idx);
    }
    let samples = samples?;
    let from = Duration::from_secs_f64(args.warmup);
    let to = Duration::from_secs_f64(total);
    let measured = rate_bps(&samples, "rb", Counter::TxBytes, from, to);
    let offered = rate_bps(&samples, "ra", Counter::RxBytes, from, to);
    if let Some(o) = offered {
        if o < rate as f64 * 1.02 {
            note = format!("{note} not saturated");
        }
    }
    if measured.is_none() {
        note = format!("{note} no samples in the window");
    }
    Ok(Row {
        shaper,
        configured: rate,
        measured,
        offered,
        note: note.trim().to_string(),
    })
}

/// The result as one row per configured rate and one column per shaper measured ("measured
/// Mbit/s (error %)"), with the rows' notes as lines to print below the table.
fn accuracy_table(rates: &[u64], rows: &[Row]) -> (Table, Vec<String>) {
    let shapers: Vec<Shaper> = [Shaper::Htb, Shaper::Tbf, Shaper::Cake]
        .into_iter()
        .filter(|s| rows.iter().any(|r| r.shaper == *s))
        .collect();
    let mut headers = vec!["configured".to_string()];
    headers.extend(
        shapers
            .iter()
            .map(|s| format!("{} Mbit/s (error %)", s.name())),
    );
    let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
    let mut notes = Vec::new();
    for &rate in rates {
        let mut cells = vec![tc_rate(rate)];
        for &s in &shapers {
            let Some(r) = rows.iter().find(|r| r.shaper == s && r.configured == rate) else {
                cells.push("-".into());
                continue;
            };
            let mut cell = match (r.measured, r.error_pct()) {
                (Some(m), Some(e)) => format!("{:.3} ({e:+.3})", m / 1e6),
                _ => "-".into(),
            };
            if !r.note.is_empty() {
                cell.push_str(" *");
                let offered = r.offered.map_or(String::new(), |o| {
                    format!(" (offered {:.1} Mbit/s)", o / 1e6)
                });
                notes.push(format!(
                    "- \\* {} at {}: {}{offered}.",
                    s.name(),
                    tc_rate(rate),
                    r.note
                ));
            }
            cells.push(cell);
        }
        t.push(cells);
    }
    (t, notes)
}

fn write_results(args: &Args, rates: &[u64], rows: &[Row]) -> Result<()> {
    let root = repo_root();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("benches/results"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let (t, notes) = accuracy_table(rates, rows);
    let stem = if args.smoke {
        "accuracy-smoke"
    } else {
        "accuracy"
    };
    let png = out.join(format!("{stem}.png"));
    let mut series = Vec::new();
    for s in [Shaper::Htb, Shaper::Tbf, Shaper::Cake] {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.shaper == s && !r.note.contains("not saturated"))
            .filter_map(|r| r.error_pct().map(|e| (r.configured as f64 / 1e6, e)))
            .collect();
        if !points.is_empty() {
            series.push(Series {
                name: s.name().into(),
                points,
            });
        }
    }
    let drawn = line_chart(
        &png,
        "Shaping accuracy: delivered vs configured (veth, UDP at 1.5x; saturated rows)",
        "configured rate (Mbit/s, log)",
        "error (%)",
        &series,
        true,
    )?;
    let cmd = format!(
        "sudo target/release/accuracy --rates {} --only {:?} --warmup {} --window {}",
        rates
            .iter()
            .map(|&r| tc_rate(r))
            .collect::<Vec<_>>()
            .join(","),
        args.only,
        args.warmup,
        args.window
    )
    .to_lowercase();
    let body = format!(
        "## Shaping accuracy (`benches/src/bin/accuracy.rs`)\n{}\n{} UDP at {}x the rate; \
         Mbit/s: the egress veth's `tx_bytes` (L2). G9: |error| <= 0.1 %, never above HTB's.{}{}\n",
        t.to_markdown(),
        cakewalk_benches::report::provenance(
            &utc_now(),
            &cakewalk_benches::report::commit(),
            &machine_line(),
            &load_average(),
            &cmd
        ),
        args.offer,
        notes
            .iter()
            .map(|n| format!(" {}", n.trim_start_matches("- ")))
            .collect::<String>(),
        if drawn == cakewalk_benches::plot::Drawn::WithoutText {
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
        "accuracy",
        &body,
        !args.no_benchmarks_md,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(m: Option<f64>) -> Row {
        Row {
            shaper: Shaper::Htb,
            configured: 100_000_000,
            measured: m,
            offered: None,
            note: String::new(),
        }
    }

    #[test]
    fn the_median_run_is_reported_with_its_spread() {
        let mut v = vec![row(Some(99e6)), row(Some(101e6)), row(Some(100e6))];
        let r = median_row(&mut v);
        assert_eq!(r.measured, Some(100e6));
        assert_eq!(r.note, "median of 3, spread 2.000 %");
    }

    #[test]
    fn a_failed_repetition_is_never_hidden_by_the_median() {
        let mut v = vec![row(Some(99e6)), row(None), row(Some(100e6))];
        assert!(median_row(&mut v).measured.is_none());
    }

    #[test]
    fn the_table_has_a_row_per_rate_a_column_per_shaper_and_notes_below() {
        let rows = vec![
            Row {
                shaper: Shaper::Htb,
                configured: 1_000_000_000,
                measured: Some(800e6),
                offered: Some(800.8e6),
                note: "not saturated".into(),
            },
            Row {
                shaper: Shaper::Cake,
                configured: 1_000_000_000,
                measured: Some(999e6),
                offered: Some(1500e6),
                note: String::new(),
            },
            Row {
                shaper: Shaper::Cake,
                configured: 10_000_000,
                measured: None,
                offered: None,
                note: String::new(),
            },
        ];
        let (t, notes) = accuracy_table(&[10_000_000, 1_000_000_000], &rows);
        let md = t.to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| configured | kernel HTB Mbit/s (error %) | cakewalk CAKE (afpacket) Mbit/s (error %) |"
        );
        assert_eq!(lines[2], "| 10mbit | - | - |");
        assert_eq!(
            lines[3],
            "| 1gbit | 800.000 (-20.000) * | 999.000 (-0.100) |"
        );
        assert_eq!(
            notes,
            ["- \\* kernel HTB at 1gbit: not saturated (offered 800.8 Mbit/s)."]
        );
    }
}
