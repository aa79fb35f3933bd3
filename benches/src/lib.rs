//! Shared helpers for the benchmark harnesses in `src/bin/`: a network-namespace lab that
//! cleans up after itself ([`lab`]), a counter sampler that runs inside a namespace
//! ([`sampler`]), starting cakewalk in it ([`cakewalk`]), Markdown tables and the
//! `BENCHMARKS.md` section writer ([`report`]), the qdisc section from criterion's results
//! ([`criterion`]) and the other criterion benches' sections ([`sections`]), PNG plots
//! ([`plot`]), rate and duration parsing ([`units`]) and a progress bar that also logs
//! ([`progress`]).
//!
//! None of this shapes packets; the harnesses compare shapers (kernel HTB/TBF, cakewalk) by
//! what leaves them on the wire. Every network helper acts only inside namespaces it created.

pub mod cakewalk;
pub mod criterion;
pub mod lab;
pub mod plot;
pub mod progress;
pub mod report;
pub mod sampler;
pub mod sections;
pub mod units;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs SIGINT/SIGTERM handlers that only raise a flag, so a harness can stop its traffic
/// and let its `Drop` guards delete the namespaces. Returns the flag (the same one every call).
pub fn install_stop_flag() -> Arc<AtomicBool> {
    STOP.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // A second signal while we clean up exits at once (conditional_shutdown).
            let _ = signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag));
            let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
        }
        flag
    })
    .clone()
}

/// Returns true once SIGINT or SIGTERM arrived (false when no handler was installed).
pub fn stop_requested() -> bool {
    STOP.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// Sleeps up to `dur` in small steps; returns `Err(Interrupted)` as soon as a stop was requested.
pub fn sleep_unless_stopped(dur: std::time::Duration) -> Result<(), Interrupted> {
    let end = std::time::Instant::now() + dur;
    loop {
        if stop_requested() {
            return Err(Interrupted);
        }
        let now = std::time::Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(std::time::Duration::from_millis(50)));
    }
}

/// The run was interrupted by SIGINT/SIGTERM.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("interrupted by a signal; namespaces are being removed")]
pub struct Interrupted;

/// Returns the repository root: the current directory when it is a cakewalk checkout (has
/// `benches/Cargo.toml`), else the workspace this harness was built from.
pub fn repo_root() -> std::path::PathBuf {
    if let Ok(cwd) = std::env::current_dir() {
        if cwd.join("benches/Cargo.toml").is_file() {
            return cwd;
        }
    }
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}
