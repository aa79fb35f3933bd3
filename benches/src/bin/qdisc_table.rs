//! `qdisc_table`: turns what criterion wrote for `qdisc/benches/cake.rs` into the qdisc
//! section of `BENCHMARKS.md` (see [`cakewalk_benches::criterion`]). `scripts/bench-qdisc`
//! runs the bench and then this; run alone, it renders whatever `target/criterion` holds.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

use cakewalk_benches::criterion::{collect, results_dir, section, since, RunInfo};
use cakewalk_benches::report::{load_average, machine_line, update_section, utc_now};

#[derive(Parser, Debug)]
#[command(about = "Render criterion's qdisc results as the qdisc section of BENCHMARKS.md")]
struct Args {
    /// Criterion's output directory (default: $CARGO_TARGET_DIR/criterion, else
    /// target/criterion).
    #[arg(long)]
    criterion_dir: Option<PathBuf>,
    /// Use only rows written at or after this time (seconds since the Unix epoch), so that
    /// older results in the directory are left out.
    #[arg(long)]
    since: Option<u64>,
    /// The command to print as the one that reproduces the table.
    #[arg(long, default_value = "scripts/bench-qdisc --write")]
    command: String,
    /// Rewrite the qdisc section of the file given by --file.
    #[arg(long)]
    write: bool,
    /// The file whose qdisc section --write rewrites.
    #[arg(long, default_value = "BENCHMARKS.md")]
    file: PathBuf,
}

fn run(args: &Args) -> anyhow::Result<()> {
    let dir = results_dir(args.criterion_dir.clone());
    let since = since(args.since);
    let rows = collect(&dir, since)?;
    if rows.is_empty() {
        anyhow::bail!(
            "no criterion results in {}{}: run `cargo bench -p qdisc --bench cake` first \
             (scripts/bench-qdisc does both)",
            dir.display(),
            if since.is_some() {
                " newer than --since"
            } else {
                ""
            }
        );
    }
    let run = RunInfo {
        date: utc_now(),
        commit: cakewalk_benches::report::commit(),
        machine: machine_line(),
        load: load_average(),
        command: args.command.clone(),
    };
    let body = section(&rows, &run);
    println!("{body}");
    if args.write {
        update_section(&args.file, "qdisc", &body)
            .with_context(|| format!("updating {}", args.file.display()))?;
        eprintln!("wrote the qdisc section of {}", args.file.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
