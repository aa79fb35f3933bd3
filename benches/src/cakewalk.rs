//! Starting cakewalk in the middle namespace of a [`crate::lab::Wire`]: finding the binary,
//! building its command line from the knobs the harnesses vary (rate, diffserv, TX queues,
//! rate-sync mode, qdisc) and checking that it stayed up. One place to adapt when the CLI
//! changes.

use crate::lab::{Lab, LabError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The flags of a harness that starts cakewalk, flattened into its own
/// (`#[command(flatten)]`): which binary, and what to add to its command line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BinaryArgs {
    /// The cakewalk binary (built with `cargo build --release -p forwarder`).
    #[arg(long)]
    pub cakewalk: Option<PathBuf>,
    /// Extra arguments for `cakewalk run` after the generated ones.
    #[arg(long, allow_hyphen_values = true)]
    pub cakewalk_args: Option<String>,
}

impl BinaryArgs {
    /// The binary to run ([`find`] with `--cakewalk`).
    pub fn find(&self) -> Option<PathBuf> {
        find(self.cakewalk.as_deref())
    }

    /// The extra arguments, split at white space.
    pub fn extra(&self) -> Vec<String> {
        self.cakewalk_args
            .iter()
            .flat_map(|a| a.split_whitespace().map(String::from))
            .collect()
    }
}

/// What a harness varies between cakewalk runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knobs {
    /// Shaped rate in bit/s.
    pub rate_bps: u64,
    /// Diffserv mode keyword ("besteffort", "diffserv3", ...); `None` keeps the default.
    pub diffserv: Option<String>,
    /// TX queues (cake_mq instances) per port.
    pub tx_queues: u32,
    /// Rate-sync mode between queues ("equal" or "work-conserving"); `None` keeps the default.
    pub sync: Option<String>,
    /// Queue discipline ("cake" or "fifo"); `None` is CAKE.
    pub qdisc: Option<String>,
    /// Extra arguments appended verbatim.
    pub extra: Vec<String>,
}

impl Knobs {
    /// CAKE at `rate_bps` with every other knob at its default.
    pub fn cake(rate_bps: u64) -> Knobs {
        Knobs {
            rate_bps,
            diffserv: None,
            tx_queues: 1,
            sync: None,
            qdisc: None,
            extra: Vec::new(),
        }
    }
}

/// Returns the cakewalk binary: `explicit` if given, else `$CAKEWALK`, else the first of
/// `$CARGO_TARGET_DIR/release`, `target/release` and the directory of the running harness
/// that holds one.
pub fn find(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let mut cands: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("CAKEWALK") {
        cands.push(p.into());
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        cands.push(PathBuf::from(t).join("release/cakewalk"));
    }
    cands.push(crate::repo_root().join("target/release/cakewalk"));
    if let Ok(me) = std::env::current_exe() {
        if let Some(dir) = me.parent() {
            cands.push(dir.join("cakewalk"));
        }
    }
    cands.into_iter().find(|p| p.is_file())
}

/// Returns the full command line that runs cakewalk between `ra` and `rb` on AF_PACKET
/// (`cakewalk run --port-kind afpacket --iface ra,rb ...`), running until killed, with its
/// control socket off so runs never share one.
pub fn command(bin: &Path, k: &Knobs) -> Vec<String> {
    let rate = crate::units::tc_rate(k.rate_bps);
    let mut v: Vec<String> = [
        bin.to_string_lossy().as_ref(),
        "run",
        "--port-kind",
        "afpacket",
        "--iface",
        "ra,rb",
        "--rate",
        &rate,
        "--duration",
        "0",
        "--set",
        "stats.control_socket=off",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if k.tx_queues > 1 {
        v.extend(["--queues".into(), k.tx_queues.to_string()]);
    }
    if let Some(d) = &k.diffserv {
        v.extend(["--diffserv".into(), d.clone()]);
    }
    if let Some(s) = &k.sync {
        v.extend(["--set".into(), format!("shaper.sync_policy={s}")]);
    }
    if let Some(q) = &k.qdisc {
        v.extend(["--queue".into(), q.clone()]);
    }
    v.extend(k.extra.iter().cloned());
    v
}

/// cakewalk did not come up.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The lab could not start the process.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// It exited during start-up.
    #[error("cakewalk exited at start ({status}): {stderr}; command: {cmd}")]
    Exited {
        /// Exit status.
        status: String,
        /// Its stderr.
        stderr: String,
        /// The command line.
        cmd: String,
    },
}

/// Starts cakewalk in `ns`, waits `settle` and checks it is still running. Returns the lab's
/// process index (kill it with [`Lab::kill`]).
///
/// # Errors
/// [`StartError::Exited`] with its stderr when it quit during `settle`.
pub fn start(
    lab: &mut Lab,
    ns: &str,
    bin: &Path,
    k: &Knobs,
    settle: Duration,
) -> Result<usize, StartError> {
    let cmd = command(bin, k);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let idx = lab.spawn(ns, &refs, false)?;
    let _ = crate::sleep_unless_stopped(settle);
    if let Ok(Some(status)) = lab.child(idx).try_wait() {
        let stderr = lab.finish_any(idx, Duration::from_millis(10)).stderr;
        return Err(StartError::Exited {
            status: status.to_string(),
            stderr: stderr.trim().to_string(),
            cmd: cmd.join(" "),
        });
    }
    Ok(idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_names_both_ports_and_only_the_knobs_that_were_set() {
        let mut k = Knobs::cake(100_000_000);
        let c = command(Path::new("/x/cakewalk"), &k).join(" ");
        assert_eq!(
            c,
            "/x/cakewalk run --port-kind afpacket --iface ra,rb --rate 100mbit --duration 0 --set stats.control_socket=off"
        );
        k.tx_queues = 4;
        k.sync = Some("equal".into());
        let c = command(Path::new("cw"), &k).join(" ");
        assert!(
            c.ends_with("--queues 4 --set shaper.sync_policy=equal"),
            "{c}"
        );
    }
}
