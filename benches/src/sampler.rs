//! Interface counter sampling from inside a namespace. A harness binary re-runs itself as
//! `ip netns exec NS <self> __cw_sample OUT INTERVAL_MS DURATION_MS DEV...`; that child reads
//! `/sys/class/net/DEV/statistics/*` (sysfs of the namespace, which `ip netns exec` mounts)
//! every interval and writes one line per device with its own monotonic timestamp to OUT.
//! Rates are computed from the child's timestamps, so the cost of starting processes never
//! enters a measurement.

use crate::lab::{Lab, LabError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The hidden first argument that turns a harness binary into a sampler.
pub const SAMPLER_ARG: &str = "__cw_sample";

/// One reading of one device's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Nanoseconds since the sampler started.
    pub t_ns: u64,
    /// Device name.
    pub dev: String,
    /// `rx_bytes`.
    pub rx_bytes: u64,
    /// `tx_bytes`.
    pub tx_bytes: u64,
    /// `rx_packets`.
    pub rx_packets: u64,
    /// `tx_packets`.
    pub tx_packets: u64,
}

/// Which counter to compute a rate from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Bytes received.
    RxBytes,
    /// Bytes transmitted (what left the qdisc on this device).
    TxBytes,
}

/// Call first thing in `main`: when the process was started as a sampler it samples, then
/// exits; otherwise it returns at once.
pub fn run_if_sampler() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(SAMPLER_ARG) {
        return;
    }
    let code = match sample_main(&args[2..]) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sampler: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn sample_main(args: &[String]) -> std::io::Result<()> {
    let bad = || std::io::Error::other("usage: __cw_sample OUT INTERVAL_MS DURATION_MS DEV...");
    let out = args.first().ok_or_else(bad)?;
    let interval_ms: u64 = args.get(1).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let duration_ms: u64 = args.get(2).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let devs = &args[3..];
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    let start = Instant::now();
    let mut tick = 0u64;
    loop {
        for dev in devs {
            let t = start.elapsed().as_nanos() as u64;
            let read = |c: &str| -> u64 {
                std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/{c}"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0)
            };
            let (rb, tb, rp, tp) = (
                read("rx_bytes"),
                read("tx_bytes"),
                read("rx_packets"),
                read("tx_packets"),
            );
            writeln!(file, "{t} {dev} {rb} {tb} {rp} {tp}")?;
        }
        file.flush()?;
        tick += 1;
        let next = Duration::from_millis(interval_ms * tick);
        if next > Duration::from_millis(duration_ms) {
            return Ok(());
        }
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// A sampler started in the background by [`Sampler::start`].
pub struct Sampler {
    idx: usize,
    out: PathBuf,
}

impl Sampler {
    /// Starts sampling `devs` in `ns` every `interval` for `duration` (then it exits by itself).
    ///
    /// # Errors
    /// [`LabError::Spawn`] when the process cannot start.
    pub fn start(
        lab: &mut Lab,
        ns: &str,
        devs: &[&str],
        interval: Duration,
        duration: Duration,
    ) -> Result<Sampler, LabError> {
        let exe = std::env::current_exe().map_err(|source| LabError::Spawn {
            cmd: "current_exe".into(),
            source,
        })?;
        let out = std::env::temp_dir().join(format!(
            "cwb-sample-{}-{}-{}.txt",
            std::process::id(),
            ns,
            devs.join("_")
        ));
        let exe = exe.to_string_lossy().into_owned();
        let out_s = out.to_string_lossy().into_owned();
        let iv = interval.as_millis().max(1).to_string();
        let dur = duration.as_millis().to_string();
        let mut args = vec![exe.as_str(), SAMPLER_ARG, out_s.as_str(), &iv, &dur];
        args.extend_from_slice(devs);
        let idx = lab.spawn(ns, &args, false)?;
        Ok(Sampler { idx, out })
    }

    /// Waits for the sampler to finish (at most `timeout`) and returns its samples.
    ///
    /// # Errors
    /// [`LabError::Failed`] when the sampler failed.
    pub fn collect(self, lab: &mut Lab, timeout: Duration) -> Result<Vec<Sample>, LabError> {
        lab.finish(self.idx, timeout)?;
        let samples = parse_samples(&self.out);
        let _ = std::fs::remove_file(&self.out);
        Ok(samples)
    }
}

fn parse_samples(path: &Path) -> Vec<Sample> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 6 {
                return None;
            }
            Some(Sample {
                t_ns: f[0].parse().ok()?,
                dev: f[1].to_string(),
                rx_bytes: f[2].parse().ok()?,
                tx_bytes: f[3].parse().ok()?,
                rx_packets: f[4].parse().ok()?,
                tx_packets: f[5].parse().ok()?,
            })
        })
        .collect()
}

/// Returns the rate in bit/s of `counter` on `dev` between the first sample at or after
/// `from` and the last sample at or before `to` (times since the sampler started), or `None`
/// when fewer than two samples fall in the window.
pub fn rate_bps(
    samples: &[Sample],
    dev: &str,
    counter: Counter,
    from: Duration,
    to: Duration,
) -> Option<f64> {
    let (from, to) = (from.as_nanos() as u64, to.as_nanos() as u64);
    let in_window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.dev == dev && s.t_ns >= from && s.t_ns <= to)
        .collect();
    let (a, b) = (in_window.first()?, in_window.last()?);
    if b.t_ns <= a.t_ns {
        return None;
    }
    let bytes = match counter {
        Counter::RxBytes => b.rx_bytes.checked_sub(a.rx_bytes)?,
        Counter::TxBytes => b.tx_bytes.checked_sub(a.tx_bytes)?,
    };
    Some(bytes as f64 * 8.0 * 1e9 / (b.t_ns - a.t_ns) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_ms: u64, tx: u64) -> Sample {
        Sample {
            t_ns: t_ms * 1_000_000,
            dev: "v".into(),
            rx_bytes: 0,
            tx_bytes: tx,
            rx_packets: 0,
            tx_packets: 0,
        }
    }

    #[test]
    fn rate_uses_the_samples_inside_the_window_only() {
        // 1 MB per 100 ms = 80 Mbit/s inside [1 s, 2 s]; a warm-up burst before it.
        let mut v = vec![s(0, 0), s(500, 50_000_000)];
        for i in 0..=10 {
            v.push(s(1000 + i * 100, 60_000_000 + i * 1_000_000));
        }
        let r = rate_bps(
            &v,
            "v",
            Counter::TxBytes,
            Duration::from_secs(1),
            Duration::from_secs(2),
        )
        .unwrap();
        assert!((r / 80e6 - 1.0).abs() < 1e-9, "{r}");
    }

    #[test]
    fn a_window_with_one_sample_has_no_rate() {
        let v = vec![s(0, 0), s(1000, 10)];
        assert!(rate_bps(
            &v,
            "v",
            Counter::TxBytes,
            Duration::from_millis(900),
            Duration::from_millis(1100)
        )
        .is_none());
    }

    #[test]
    fn sample_files_parse_and_skip_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.txt");
        std::fs::write(&p, "1 v 2 3 4 5\n2 v 9\n").unwrap();
        let v = parse_samples(&p);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].tx_bytes, 3);
    }
}
