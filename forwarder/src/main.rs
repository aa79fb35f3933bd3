//! The `cakewalk` binary: parses the command line, hands over to [`forwarder::cli::run`] and
//! turns an error into `error: …` on stderr and a non-zero exit code.

use std::process::ExitCode;

/// mimalloc, not glibc's malloc: it maps memory in large aligned regions and advises the
/// kernel to back them with huge pages (with THP in its default `madvise` mode). The
/// circuits' CAKE instances (1.3 GiB for 10 000 circuits active both ways) are visited in
/// no order a cache can follow, and in 4 KiB pages each visit paid page walks as well as
/// misses: glibc leaves its per-thread arenas, where the workers allocate them, in 4 KiB
/// pages (docs/performance-notes.md, "What binds on the Xeon VM is the TLB").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = forwarder::cli::Cli::parse();
    match forwarder::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            forwarder::log_line!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
