//! `criterion_section`: renders what criterion wrote for the rate tree, the circuit prefix
//! table or per-circuit CAKE as that bench's section of `BENCHMARKS.md`
//! ([`cakewalk_benches::sections`]). `scripts/bench-criterion NAME` runs the bench and then
//! this; run alone, it renders whatever `target/criterion` holds.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

use cakewalk_benches::criterion::{collect, results_dir, since, RunInfo};
use cakewalk_benches::report::{load_average, machine_line, update_section, utc_now};
use cakewalk_benches::sections::{render, BENCHES};

#[derive(Parser, Debug)]
#[command(about = "Render a criterion bench's results as its section of BENCHMARKS.md")]
struct Args {
    /// The section: tree, lpm or circuits.
    name: String,
    /// Criterion's output directory (default: $CARGO_TARGET_DIR/criterion, else
    /// target/criterion).
    #[arg(long)]
    criterion_dir: Option<PathBuf>,
    /// Use only rows written at or after this time (seconds since the Unix epoch).
    #[arg(long)]
    since: Option<u64>,
    /// The bench's printed output (its memory lines), if kept.
    #[arg(long)]
    log: Option<PathBuf>,
    /// The command to print as the one that reproduces the table.
    #[arg(long)]
    command: Option<String>,
    /// Rewrite the section in the file given by --file.
    #[arg(long)]
    write: bool,
    /// The file whose section --write rewrites.
    #[arg(long, default_value = "BENCHMARKS.md")]
    file: PathBuf,
}

fn run(args: &Args) -> anyhow::Result<()> {
    let Some((_, package, bench, _)) = BENCHES.iter().find(|b| b.0 == args.name) else {
        anyhow::bail!(
            "no section '{}': say one of {}",
            args.name,
            BENCHES.map(|b| b.0).join(", ")
        );
    };
    let dir = results_dir(args.criterion_dir.clone());
    let since = since(args.since);
    let rows = collect(&dir, since)?;
    if rows.is_empty() {
        anyhow::bail!(
            "no criterion results in {}: run `cargo bench -p {package} --bench {bench}` first \
             (scripts/bench-criterion {} does both)",
            dir.display(),
            args.name
        );
    }
    let log = match &args.log {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => String::new(),
    };
    let run = RunInfo {
        date: utc_now(),
        commit: cakewalk_benches::report::commit(),
        machine: machine_line(),
        load: load_average(),
        command: args
            .command
            .clone()
            .unwrap_or_else(|| format!("scripts/bench-criterion {} --write", args.name)),
    };
    let body = render(&args.name, &rows, &log, &run).expect("every name of BENCHES renders");
    println!("{body}");
    if args.write {
        update_section(&args.file, &args.name, &body)
            .with_context(|| format!("updating {}", args.file.display()))?;
        eprintln!("wrote the {} section of {}", args.name, args.file.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
