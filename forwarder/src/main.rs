//! The `cakewalk` binary: parses the command line, hands over to [`forwarder::cli::run`] and
//! turns an error into `error: …` on stderr and a non-zero exit code.

use std::process::ExitCode;

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
