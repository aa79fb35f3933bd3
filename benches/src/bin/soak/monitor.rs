//! Watches a running forwarder through its JSON stats file (`stats.json`, one report per
//! interval): collects each report's counters, flags a report stream that stops (the
//! forwarder's supervisor no longer runs), and afterwards finds windows in which traffic
//! should have moved and did not (nothing received, or a queue shaped at a real rate that
//! sent nothing).

use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one report says, reduced to what the liveness checks read.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// The forwarder's own clock: seconds since it started.
    pub(crate) elapsed_s: f64,
    /// Packets received on port A so far.
    pub(crate) rx_a: u64,
    /// Packets transmitted on port B so far.
    pub(crate) tx_b: u64,
    /// The global rate of port B's queues (0 for unlimited).
    pub(crate) rate_bps: u64,
    /// This is the report printed at exit.
    pub(crate) final_report: bool,
}

impl Sample {
    fn from_json(v: &Value) -> Option<Sample> {
        let port = |name: &str, key: &str| {
            v["ports"].as_array()?.iter().find(|p| p["port"] == name)?[key].as_u64()
        };
        let ports = v["ports"].as_array()?;
        let (a, b) = (
            ports.first()?["port"].as_str()?,
            ports.get(1)?["port"].as_str()?,
        );
        let rate_bps = v["queues"]
            .as_array()?
            .iter()
            .filter(|q| q["port"] == b)
            .filter_map(|q| q["rate_bps"].as_u64())
            .next()
            .unwrap_or(0);
        Some(Sample {
            elapsed_s: v["elapsed_s"].as_f64()?,
            rx_a: port(a, "rx_packets")?,
            tx_b: port(b, "tx_packets")?,
            rate_bps,
            final_report: v["final_report"].as_bool().unwrap_or(false),
        })
    }
}

/// A thread reading the stats file until stopped.
pub(crate) struct Monitor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    last: Arc<Mutex<Option<Value>>>,
    stalls: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    /// Starts reading `path` every 100 ms; a gap of more than `stall_limit` between two new
    /// reports (after the first) is recorded as a stall.
    pub(crate) fn spawn(path: PathBuf, stall_limit: Duration) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let last = Arc::new(Mutex::new(None));
        let stalls = Arc::new(Mutex::new(Vec::new()));
        let (stop_t, samples_t, last_t, stalls_t) =
            (stop.clone(), samples.clone(), last.clone(), stalls.clone());
        let thread = std::thread::spawn(move || {
            let mut seen = 0usize;
            let mut last_new: Option<Instant> = None;
            let mut stalled = false;
            while !stop_t.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                // Only complete lines: the writer may be in the middle of one.
                let lines: Vec<&str> = text
                    .split_inclusive('\n')
                    .filter(|l| l.ends_with('\n'))
                    .collect();
                if lines.len() > seen {
                    for l in &lines[seen..] {
                        if let Ok(v) = serde_json::from_str::<Value>(l) {
                            if let Some(s) = Sample::from_json(&v) {
                                samples_t.lock().unwrap().push(s);
                            }
                            *last_t.lock().unwrap() = Some(v);
                        }
                    }
                    seen = lines.len();
                    last_new = Some(Instant::now());
                    stalled = false;
                } else if let Some(t) = last_new {
                    if !stalled && t.elapsed() > stall_limit {
                        stalled = true;
                        let at = samples_t
                            .lock()
                            .unwrap()
                            .last()
                            .map_or(0.0, |s| s.elapsed_s);
                        stalls_t.lock().unwrap().push(format!(
                            "no stats report for more than {stall_limit:?} after the one at {at:.1}s: the forwarder's supervisor is stuck"
                        ));
                    }
                }
            }
        });
        Monitor {
            stop,
            thread: Some(thread),
            samples,
            last,
            stalls,
        }
    }

    /// Reports read so far.
    pub(crate) fn count(&self) -> usize {
        self.samples.lock().unwrap().len()
    }

    /// The newest report, whole.
    pub(crate) fn last(&self) -> Option<Value> {
        self.last.lock().unwrap().clone()
    }

    /// Stops the thread after one more read and returns the samples, the stalls seen and
    /// the last report.
    pub(crate) fn finish(mut self) -> (Vec<Sample>, Vec<String>, Option<Value>) {
        // One more pass picks up the final report written just before exit.
        std::thread::sleep(Duration::from_millis(250));
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let samples = self.samples.lock().unwrap().clone();
        let stalls = self.stalls.lock().unwrap().clone();
        (samples, stalls, self.last())
    }
}

/// The lowest rate at which a queue with a backlog must visibly send within a window: at
/// 1 Mbit/s a window of seconds carries hundreds of full-size frames.
pub(crate) const SENDING_RATE_BPS: u64 = 1_000_000;

/// Finds windows of at least `window_s` (in the forwarder's clock) in which port A received
/// nothing, or port B's queues, shaped at [`SENDING_RATE_BPS`] or more (or unlimited) for the
/// whole window, sent nothing. Windows that touch `quiet` (intervals in which traffic was
/// interrupted on purpose, such as a link taken down) are not judged. One failure per
/// stretch: after a failure the search resumes at the window's end.
pub(crate) fn progress_failures(
    samples: &[Sample],
    quiet: &[(f64, f64)],
    window_s: f64,
) -> Vec<String> {
    let live: Vec<&Sample> = samples.iter().filter(|s| !s.final_report).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < live.len() {
        let (a, t0) = (live[i], live[i].elapsed_s);
        let Some(j) = (i + 1..live.len()).find(|&j| live[j].elapsed_s >= t0 + window_s) else {
            break;
        };
        let b = live[j];
        let overlaps = quiet.iter().any(|&(q0, q1)| q0 <= b.elapsed_s && q1 >= t0);
        if overlaps {
            i += 1;
            continue;
        }
        let mut failed = false;
        if b.rx_a <= a.rx_a {
            out.push(format!(
                "port A received nothing between {t0:.1}s and {:.1}s",
                b.elapsed_s
            ));
            failed = true;
        }
        let sending = live[i..=j]
            .iter()
            .all(|s| s.rate_bps == 0 || s.rate_bps >= SENDING_RATE_BPS);
        if sending && b.tx_b <= a.tx_b {
            let rates: Vec<String> = live[i..=j].iter().map(|s| s.rate_bps.to_string()).collect();
            out.push(format!(
                "port B sent nothing between {t0:.1}s and {:.1}s although its rate was at least 1 Mbit/s throughout (rate_bps per report: {})",
                b.elapsed_s,
                rates.join(", ")
            ));
            failed = true;
        }
        i = if failed { j } else { i + 1 };
    }
    out
}

/// Counters never go down while the forwarder runs (docs/metrics.md): finds the reports
/// where port A's received or port B's transmitted count is below the report before.
pub(crate) fn counters_going_down(samples: &[Sample]) -> Vec<String> {
    samples
        .windows(2)
        .filter(|w| w[1].rx_a < w[0].rx_a || w[1].tx_b < w[0].tx_b)
        .map(|w| {
            format!(
                "counters went down between the reports at {:.1}s and {:.1}s: rx {} -> {}, tx {} -> {}",
                w[0].elapsed_s, w[1].elapsed_s, w[0].rx_a, w[1].rx_a, w[0].tx_b, w[1].tx_b
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, rx: u64, tx: u64, rate: u64) -> Sample {
        Sample {
            elapsed_s: t,
            rx_a: rx,
            tx_b: tx,
            rate_bps: rate,
            final_report: false,
        }
    }

    #[test]
    fn a_queue_that_stops_sending_at_a_real_rate_is_found_once() {
        let mut v: Vec<Sample> = (0..10u32)
            .map(|i| {
                s(
                    f64::from(i),
                    100 * u64::from(i),
                    10 * u64::from(i),
                    50_000_000,
                )
            })
            .collect();
        for (i, x) in v.iter_mut().enumerate().skip(4) {
            x.tx_b = 40;
            x.rx_a = 100 * i as u64;
        }
        let f = progress_failures(&v, &[], 3.0);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].contains("port B sent nothing between 4.0s and 7.0s"),
            "{f:?}"
        );
    }

    #[test]
    fn a_counter_going_down_is_found() {
        let v = [s(1.0, 10, 5, 0), s(2.0, 12, 4, 0), s(3.0, 13, 6, 0)];
        let f = counters_going_down(&v);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("tx 5 -> 4"), "{f:?}");
    }

    #[test]
    fn slow_rates_and_quiet_windows_are_not_judged() {
        let v: Vec<Sample> = (0..10u32).map(|i| s(f64::from(i), 5, 3, 1_000)).collect();
        let f = progress_failures(&v, &[], 3.0);
        assert!(f.iter().all(|m| m.contains("received nothing")), "{f:?}");
        assert!(progress_failures(&v, &[(0.0, 20.0)], 3.0).is_empty());
    }

    #[test]
    fn a_report_line_is_read_into_a_sample() {
        let v: Value = serde_json::from_str(
            r#"{"elapsed_s":2.5,"final_report":false,"ports":[{"port":"lan","rx_packets":9},{"port":"wan","tx_packets":4}],"queues":[{"port":"lan","rate_bps":1},{"port":"wan","rate_bps":7}]}"#,
        )
        .unwrap();
        let x = Sample::from_json(&v).unwrap();
        assert_eq!((x.rx_a, x.tx_b, x.rate_bps), (9, 4, 7));
    }
}
