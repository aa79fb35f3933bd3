//! `bench_section`: rewrites one section of `BENCHMARKS.md` with the Markdown read from
//! stdin, for the harnesses that are shell scripts (`scripts/bench-ab`,
//! `scripts/bench-dpdk-run`). The section is written as the Rust harnesses write theirs
//! ([`cakewalk_benches::report::update_section`]: between its markers, prose wrapped), so
//! every section of the file has one writer and a re-run replaces all of its text.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Rewrite one section of BENCHMARKS.md with the Markdown on stdin")]
struct Args {
    /// The section's name, as in its markers `<!-- bench:NAME:begin -->`.
    name: String,
    /// The file to rewrite (default: BENCHMARKS.md at the repository root).
    #[arg(long)]
    file: Option<PathBuf>,
}

fn run(args: &Args) -> anyhow::Result<()> {
    if args.name.is_empty()
        || !args
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        anyhow::bail!(
            "section name '{}' is not one word of letters, digits and '-' (say: ab)",
            args.name
        );
    }
    let mut body = String::new();
    std::io::stdin()
        .read_to_string(&mut body)
        .context("reading the section's Markdown from stdin")?;
    if body.trim().is_empty() {
        anyhow::bail!("stdin was empty: pipe the section's Markdown into bench_section");
    }
    let path = args
        .file
        .clone()
        .unwrap_or_else(|| cakewalk_benches::repo_root().join("BENCHMARKS.md"));
    cakewalk_benches::report::update_section(&path, &args.name, &body)
        .with_context(|| format!("updating {}", path.display()))?;
    eprintln!("wrote the {} section of {}", args.name, path.display());
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
