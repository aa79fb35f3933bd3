//! `hugepage-setup`: reserve hugepages per NUMA node and mount hugetlbfs (`reserve`), show
//! what is reserved (`status`), and give it back (`release`). Every command is idempotent;
//! `--dry-run` prints the plan without changing anything.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hugepage_setup::{apply, plan, status_table, PageSize, RealSystem, Request, Snapshot};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Reserve hugepages per NUMA node, mount hugetlbfs, report; idempotent"
)]
struct Cli {
    /// Print what would be done and change nothing.
    #[arg(long, global = true)]
    dry_run: bool,
    /// File-system root that /sys and /proc are read under (for tests and containers).
    #[arg(long, global = true, default_value = "/", hide = true)]
    root: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Make sure at least N pages are reserved on each NUMA node (or on --node K) and that a
    /// hugetlbfs is mounted for them.
    Reserve {
        /// Pages per node.
        #[arg(long)]
        pages: u64,
        /// Page size: 2M or 1G.
        #[arg(long, default_value = "2M")]
        size: PageSize,
        /// Only this NUMA node.
        #[arg(long)]
        node: Option<u32>,
    },
    /// Show reserved and free pages per node and size, and the hugetlbfs mounts.
    Status,
    /// Set the reservation to 0 (all sizes, or --size; all nodes, or --node K).
    Release {
        /// Only this page size.
        #[arg(long)]
        size: Option<PageSize>,
        /// Only this NUMA node.
        #[arg(long)]
        node: Option<u32>,
    },
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let snap = Snapshot::read(&cli.root).context("reading the hugepage state")?;
    let (req, command) = match cli.cmd {
        Cmd::Status => {
            print!("{}", status_table(&snap));
            return Ok(());
        }
        Cmd::Reserve { pages, size, node } => {
            let node_arg = node.map(|n| format!(" --node {n}")).unwrap_or_default();
            (
                Request::Reserve { pages, size, node },
                format!("reserve --pages {pages} --size {size}{node_arg}"),
            )
        }
        Cmd::Release { size, node } => (Request::Release { size, node }, "release".to_owned()),
    };
    let actions = plan(&snap, &req)?;
    if actions.is_empty() {
        println!("nothing to do: the reservation already matches");
    }
    if cli.dry_run {
        for a in &actions {
            println!("would {a}");
        }
        return Ok(());
    }
    let mut sys = RealSystem {
        root: cli.root.clone(),
    };
    let out = apply(&mut sys, &actions, &command)?;
    for line in &out.done {
        println!("did {line}");
    }
    print!("{}", status_table(&Snapshot::read(&cli.root)?));
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
