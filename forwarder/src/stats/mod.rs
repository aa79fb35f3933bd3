//! Reporting. The engine's per-worker counter blocks live in [`crate::counters`]; this
//! module turns them, the TX queues' own counters and the synth sink's figures into a
//! [`Report`]: a one-line live view on stderr each interval, one JSON object per interval in
//! a file (`--stats-json`), Prometheus text on a loopback TCP port ([`prometheus`]), and a
//! final report whose conservation line checks, exactly, that every received packet was
//! transmitted, dropped (by reason) or is still queued.
//!
//! Nothing here runs on the data path: reports are built by the supervising thread.

pub mod circuits;
pub mod prometheus;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use qdisc::mq::TxQueueStats;
use qdisc::{DropReason, Rate};
use serde::{Deserialize, Serialize};

use crate::counters::synth::{SynthStats, SynthTotals};
use crate::counters::{egress, port, Snapshot, TinSnapshot, WorkerCounters};
use crate::direction::Direction;

/// The `[stats]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsConfig {
    /// Seconds between live lines ("1s").
    pub interval: String,
    /// Print the live line on stderr.
    pub live: bool,
    /// Append one JSON object per interval to this file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json: Option<PathBuf>,
    /// Serve Prometheus text on this address ("127.0.0.1:9187"); loopback only unless
    /// `prometheus_public` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<String>,
    /// Allow a non-loopback Prometheus address.
    pub prometheus_public: bool,
    /// The control socket path (empty: `$XDG_RUNTIME_DIR/cakewalk.sock`, or
    /// `/run/cakewalk.sock` as root, or `/tmp/cakewalk-$UID.sock`); "off" disables it.
    pub control_socket: String,
    /// Per-circuit Prometheus series: "off" (the default: one series per circuit is a lot
    /// of series), "top:N" (the N circuits sending most), or "all"; per-node sums likewise.
    pub circuit_metrics: String,
}

/// Which circuits get Prometheus series of their own (`[stats] circuit_metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitMetrics {
    /// None.
    Off,
    /// The N sending most in the interval.
    Top(usize),
    /// Every circuit.
    All,
}

impl CircuitMetrics {
    /// Reads `off`, `top:N` or `all`.
    ///
    /// # Errors
    /// What to write instead.
    pub fn parse(text: &str) -> Result<CircuitMetrics, String> {
        let t = text.trim();
        match t {
            "off" | "" => return Ok(CircuitMetrics::Off),
            "all" => return Ok(CircuitMetrics::All),
            _ => {}
        }
        match t.strip_prefix("top:").map(|n| n.trim().parse::<usize>()) {
            Some(Ok(n)) if n > 0 => Ok(CircuitMetrics::Top(n)),
            _ => Err(format!(
                "'{t}' is not a choice; use \"off\", \"top:N\" (the N circuits sending most, as \"top:100\") or \"all\""
            )),
        }
    }
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            interval: "1s".into(),
            live: true,
            json: None,
            prometheus: None,
            prometheus_public: false,
            control_socket: String::new(),
            circuit_metrics: "off".into(),
        }
    }
}

/// A read-only view of one TX queue for reports.
pub trait QueueView: Send + Sync {
    /// The queue's counters.
    fn stats(&self) -> TxQueueStats;
    /// Packets waiting in the queue.
    fn backlog(&self) -> u64;
    /// Per-tin figures (may be empty).
    fn tins(&self) -> Vec<TinSnapshot>;
    /// Per-tin figures read by the caller itself, once no worker runs the queue (the final
    /// report).
    fn tins_now(&self) -> Vec<TinSnapshot> {
        self.tins()
    }
    /// The configured global rate.
    fn rate(&self) -> Rate;
}

/// Everything a report is built from.
pub struct Sources {
    /// Port names, by index.
    pub port_names: Vec<String>,
    /// The engine's counters.
    pub counters: Arc<WorkerCounters>,
    /// Per egress queue: its view.
    pub queues: Vec<Arc<dyn QueueView>>,
    /// Synth ports: (port index, figures).
    pub synth: Vec<(usize, Arc<SynthStats>)>,
    /// Packets handed between workers and not yet sent, per egress.
    pub handoff: Box<dyn Fn(usize) -> u64 + Send + Sync>,
    /// Backends' own counters (pcap, AF_PACKET), per port: (port index, reader).
    pub backend: Vec<(usize, BackendCounters)>,
    /// The directions forwarded: each from its ingress port to its egress port.
    pub directions: Vec<DirectionSource>,
}

/// One direction the forwarder carries: what arrives on `ingress` leaves through `egress`.
#[derive(Debug, Clone, Copy)]
pub struct DirectionSource {
    /// Download or upload.
    pub direction: Direction,
    /// The port it arrives on.
    pub ingress: usize,
    /// The port it leaves through (whose TX queues shape it).
    pub egress: usize,
}

/// One direction's figures: its configured and current rate, and its own conservation
/// (what arrived on its ingress port was sent, dropped or is queued on its egress port).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DirectionReport {
    /// `download` or `upload`.
    pub direction: Direction,
    /// The port it arrives on.
    pub ingress: String,
    /// The port it leaves through.
    pub egress: String,
    /// The configured shared rate of its TX queues, bit/s (0 = unlimited).
    pub rate_bps: u64,
    /// What it transmitted over the interval, bit/s.
    pub tx_bps: f64,
    /// received (on the ingress port) = transmitted + dropped + queued (on the egress port).
    pub conservation: Conservation,
}

/// Reads one backend's own counters (name, value).
pub type BackendCounters = Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

/// A backend's own counters (what happened below the engine: oversize frames, kernel drops).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackendReport {
    /// Port name.
    pub port: String,
    /// Counters by name.
    pub counters: BTreeMap<&'static str, u64>,
}

/// One port's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PortReport {
    /// Name.
    pub port: String,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames the parser found malformed (forwarded as non-IP); only frames that needed
    /// classifying are parsed (see `counters::port::MALFORMED`).
    pub malformed: u64,
    /// Receive rate over the interval, bit/s.
    pub rx_bps: f64,
    /// Transmit rate over the interval, bit/s.
    pub tx_bps: f64,
    /// Transmit rate over the interval, packets/s.
    pub tx_pps: f64,
}

/// One TX queue's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueueReport {
    /// Egress port name.
    pub port: String,
    /// Queue number on that port.
    pub queue: usize,
    /// Packets that took the bypass.
    pub bypass: u64,
    /// Packets taken into the qdisc.
    pub enqueued: u64,
    /// Packets the qdisc released.
    pub dequeued: u64,
    /// Drops by reason.
    pub drops: BTreeMap<&'static str, u64>,
    /// Packets waiting (qdisc, intake, transmit burst, hand-off).
    pub queued: u64,
    /// Packets offered by a worker that does not run this queue (each crossed cores).
    pub handed_in: u64,
    /// Configured global rate, bit/s (0 = unlimited).
    pub rate_bps: u64,
    /// Per-tin figures.
    pub tins: Vec<TinSnapshot>,
}

/// One synth port's end-to-end figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SynthReport {
    /// Port name (the generator's).
    pub port: String,
    /// Counters.
    #[serde(flatten)]
    pub totals: SynthTotals,
    /// Generated but not received (dropped, or still in flight).
    pub lost: u64,
    /// One-way delay percentiles (ns) since the start: p50, p99, p99.9, max.
    pub delay_ns: [u64; 4],
}

/// received = transmitted + dropped + queued, exactly.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Conservation {
    /// Frames received on every port.
    pub received: u64,
    /// Frames transmitted on every port.
    pub transmitted: u64,
    /// Frames dropped, every reason.
    pub dropped: u64,
    /// Frames still queued.
    pub queued: u64,
    /// received − transmitted − dropped − queued. While running: the frames between
    /// receive and queue plus the skew of counters read one after another, a few bursts
    /// either way; a value that keeps growing means frames go missing, which the final
    /// report's check then fails on. 0 in a final report that holds.
    pub unaccounted: i64,
    /// The equation holds; always true on an interval report (see [`Conservation::check`]).
    pub ok: bool,
}

impl Conservation {
    /// The check over these totals. Only a final report (made after the workers stopped)
    /// can fail it: an interval report's sum is off by the packets in flight between
    /// receive and queue and by counters that moved while being read, so judging it would
    /// set the gauge the docs say to alert on, and the JSON's `ok`, to false on every
    /// interval of a busy run.
    pub fn check(
        received: u64,
        transmitted: u64,
        dropped: u64,
        queued: u64,
        final_report: bool,
    ) -> Conservation {
        let accounted = i128::from(transmitted) + i128::from(dropped) + i128::from(queued);
        let unaccounted = i128::from(received) - accounted;
        Conservation {
            received,
            transmitted,
            dropped,
            queued,
            unaccounted: i64::try_from(unaccounted).unwrap_or(if unaccounted < 0 {
                i64::MIN
            } else {
                i64::MAX
            }),
            ok: !final_report || unaccounted == 0,
        }
    }
}

/// A full report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// True for the report made after the workers stopped. Only there is the conservation
    /// check exact: interval reports read counters that move while they are read.
    pub final_report: bool,
    /// Per port.
    pub ports: Vec<PortReport>,
    /// Per TX queue.
    pub queues: Vec<QueueReport>,
    /// Drops by reason, over all queues.
    pub drops: BTreeMap<&'static str, u64>,
    /// Synth ports.
    pub synth: Vec<SynthReport>,
    /// Backend counters.
    pub backend: Vec<BackendReport>,
    /// Per direction: rates and conservation.
    pub directions: Vec<DirectionReport>,
    /// The conservation check.
    pub conservation: Conservation,
    /// Circuits, when the forwarder shapes them (filled by the app, which reads the circuit
    /// shapers): totals and nodes, and the circuits `[stats] circuit_metrics` selects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub circuits: Option<circuits::CircuitsReport>,
}

/// Percentiles p50, p99, p99.9 and max of `h`.
pub fn percentiles(h: &hdrhistogram::Histogram<u64>) -> [u64; 4] {
    if h.is_empty() {
        return [0; 4];
    }
    [
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
    ]
}

/// Builds reports and remembers the previous snapshot for interval rates.
pub struct Reporter {
    sources: Sources,
    last: Option<(Snapshot, f64)>,
}

impl Reporter {
    /// A reporter over `sources`.
    pub fn new(sources: Sources) -> Reporter {
        Reporter {
            sources,
            last: None,
        }
    }

    /// Builds an interval report at `elapsed_s`.
    pub fn report(&mut self, elapsed_s: f64) -> Report {
        let (r, snap) = self.build(elapsed_s, false);
        self.last = Some((snap, elapsed_s));
        r
    }

    /// Builds the final report (call after the workers stopped and the queues published).
    pub fn final_report(&mut self, elapsed_s: f64) -> Report {
        let (r, snap) = self.build(elapsed_s, true);
        self.last = Some((snap, elapsed_s));
        r
    }

    /// A report as of `elapsed_s` for someone who asked (`ctl stats`), with rates over the
    /// time since the last interval report: the interval reports are not disturbed.
    pub fn peek(&self, elapsed_s: f64) -> Report {
        self.build(elapsed_s, false).0
    }

    fn build(&self, elapsed_s: f64, final_report: bool) -> (Report, Snapshot) {
        let s = &self.sources;
        let snap = s.counters.snapshot();
        let layout = snap.layout;
        // Rates are over the time since the last interval report, except in the final report,
        // where they are over the whole run: its last interval is only the drain.
        let (dt, prev) = match &self.last {
            Some((p, t)) if !final_report && elapsed_s > *t => (elapsed_s - t, Some(p)),
            _ => (elapsed_s.max(1e-9), None),
        };
        let delta = prev.map(|p| snap.delta(p));
        let d = delta.as_ref().unwrap_or(&snap);
        let mut ports = Vec::new();
        for p in 0..layout.ports {
            let (txp, txb) = snap.port_tx(p);
            let (dtxp, dtxb) = d.port_tx(p);
            ports.push(PortReport {
                port: s
                    .port_names
                    .get(p)
                    .cloned()
                    .unwrap_or_else(|| p.to_string()),
                rx_packets: snap.port(p, port::RX_PACKETS),
                rx_bytes: snap.port(p, port::RX_BYTES),
                tx_packets: txp,
                tx_bytes: txb,
                malformed: snap.port(p, port::MALFORMED),
                rx_bps: d.port(p, port::RX_BYTES) as f64 * 8.0 / dt,
                tx_bps: dtxb as f64 * 8.0 / dt,
                tx_pps: dtxp as f64 / dt,
            });
        }
        let mut queues = Vec::new();
        let mut drops_total: BTreeMap<&'static str, u64> =
            DropReason::ALL.iter().map(|r| (r.name(), 0)).collect();
        let mut dropped = 0u64;
        let mut queued_total = 0u64;
        // Per egress port: (dropped, queued, configured rate) for the direction it carries.
        let mut per_egress = vec![(0u64, 0u64, 0u64); layout.ports];
        for (e, q) in s.queues.iter().enumerate() {
            let st = q.stats();
            let mut drops = BTreeMap::new();
            for r in DropReason::ALL {
                let mut n = st.drops(r) + snap.drops(e, r);
                if r == DropReason::Aqm {
                    n += st.dequeue_drops;
                }
                drops.insert(r.name(), n);
                *drops_total.entry(r.name()).or_default() += n;
                dropped += n;
            }
            let queued = q.backlog() + snap.egress(e, egress::PENDING) + (s.handoff)(e);
            queued_total += queued;
            if let Some(slot) = per_egress.get_mut(e / layout.queues.max(1)) {
                slot.0 += drops.values().sum::<u64>();
                slot.1 += queued;
                slot.2 = q.rate().bits_per_sec();
            }
            queues.push(QueueReport {
                port: s
                    .port_names
                    .get(e / layout.queues)
                    .cloned()
                    .unwrap_or_default(),
                queue: e % layout.queues,
                bypass: st.bypassed,
                enqueued: st.enqueued,
                dequeued: st.dequeued,
                drops,
                queued,
                handed_in: snap.egress(e, egress::HANDED_IN),
                rate_bps: q.rate().bits_per_sec(),
                tins: if final_report { q.tins_now() } else { q.tins() },
            });
        }
        let synth = s
            .synth
            .iter()
            .map(|(p, st)| {
                let totals = st.totals();
                let delay = percentiles(&st.delay_total.lock().unwrap_or_else(|e| e.into_inner()));
                SynthReport {
                    port: s.port_names.get(*p).cloned().unwrap_or_default(),
                    lost: totals.sent_packets.saturating_sub(totals.received_packets),
                    totals,
                    delay_ns: delay,
                }
            })
            .collect();
        let backend = s
            .backend
            .iter()
            .map(|(p, read)| BackendReport {
                port: s.port_names.get(*p).cloned().unwrap_or_default(),
                counters: read().into_iter().collect(),
            })
            .collect();
        let received: u64 = ports.iter().map(|p| p.rx_packets).sum();
        let transmitted: u64 = ports.iter().map(|p| p.tx_packets).sum();
        let conservation =
            Conservation::check(received, transmitted, dropped, queued_total, final_report);
        let directions = s
            .directions
            .iter()
            .filter(|d| d.ingress < ports.len() && d.egress < ports.len())
            .map(|d| {
                let (dropped, queued, rate_bps) =
                    per_egress.get(d.egress).copied().unwrap_or_default();
                DirectionReport {
                    direction: d.direction,
                    ingress: ports[d.ingress].port.clone(),
                    egress: ports[d.egress].port.clone(),
                    rate_bps,
                    tx_bps: ports[d.egress].tx_bps,
                    conservation: Conservation::check(
                        ports[d.ingress].rx_packets,
                        ports[d.egress].tx_packets,
                        dropped,
                        queued,
                        final_report,
                    ),
                }
            })
            .collect();
        let report = Report {
            elapsed_s,
            final_report,
            ports,
            queues,
            drops: drops_total,
            synth,
            backend,
            directions,
            conservation,
            circuits: None,
        };
        (report, snap)
    }
}

/// A configured rate: "unlimited" for 0, else as [`fmt_bps`].
fn fmt_rate(bps: u64) -> String {
    if bps == 0 {
        "unlimited".to_string()
    } else {
        fmt_bps(bps as f64)
    }
}

/// Formats bits per second like tc ("1.23Gbit").
pub fn fmt_bps(bps: f64) -> String {
    let (v, u) = if bps >= 1e9 {
        (bps / 1e9, "Gbit")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit")
    } else if bps >= 1e3 {
        (bps / 1e3, "Kbit")
    } else {
        (bps, "bit")
    };
    format!("{v:.2}{u}")
}

/// Formats a duration in ns as ms, us or ns with one decimal.
pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else {
        format!("{ns}ns")
    }
}

impl Report {
    /// The one-line live view.
    pub fn live_line(&self, interval_delay_ns: Option<[u64; 4]>) -> String {
        let mut out = format!("[{:6.1}s]", self.elapsed_s);
        for p in &self.ports {
            let _ = write!(
                out,
                " {} rx {} tx {} ({:.3} Mpps)",
                p.port,
                fmt_bps(p.rx_bps),
                fmt_bps(p.tx_bps),
                p.tx_pps / 1e6
            );
        }
        let drops: Vec<String> = self
            .drops
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        let _ = write!(
            out,
            " | drops {} | queued {}",
            if drops.is_empty() {
                "0".to_string()
            } else {
                drops.join(",")
            },
            self.conservation.queued
        );
        for d in &self.directions {
            let _ = write!(
                out,
                " | {} {} of {}",
                d.direction.name(),
                fmt_bps(d.tx_bps),
                fmt_rate(d.rate_bps)
            );
        }
        if let Some(d) = interval_delay_ns {
            let _ = write!(out, " | delay p50 {} p99 {}", fmt_ns(d[0]), fmt_ns(d[1]));
        }
        out
    }

    /// One line per direction: its rates and its own conservation, `download (wan -> lan):
    /// rate 50.00Mbit, sent 47.12Mbit; received 1000 = transmitted 990 + dropped 8 + queued 2:
    /// ok`.
    pub fn direction_lines(&self) -> Vec<String> {
        self.directions
            .iter()
            .map(|d| {
                let c = &d.conservation;
                format!(
                    "{} ({} -> {}): rate {}, sent {}; received {} = transmitted {} + dropped {} + queued {}: {}",
                    d.direction.name(),
                    d.ingress,
                    d.egress,
                    fmt_rate(d.rate_bps),
                    fmt_bps(d.tx_bps),
                    c.received,
                    c.transmitted,
                    c.dropped,
                    c.queued,
                    if !self.final_report {
                        "live counters, exact only at exit"
                    } else if c.ok {
                        "ok"
                    } else {
                        "MISMATCH"
                    }
                )
            })
            .collect()
    }

    /// The conservation line.
    pub fn conservation_line(&self) -> String {
        let c = &self.conservation;
        let reasons: Vec<String> = self
            .drops
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        format!(
            "conservation: received {} = transmitted {} + dropped {}{} + queued {}: {}",
            c.received,
            c.transmitted,
            c.dropped,
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            },
            c.queued,
            if !self.final_report {
                "live counters, exact only at exit"
            } else if c.ok {
                "ok"
            } else {
                "MISMATCH"
            }
        )
    }

    /// The multi-line final report.
    pub fn final_text(&self) -> String {
        let mut out = format!(
            "cakewalk {} after {:.2}s\n",
            if self.final_report {
                "final report"
            } else {
                "report"
            },
            self.elapsed_s
        );
        for p in &self.ports {
            let _ = writeln!(
                out,
                "port {}: rx {} pkts {} bytes, tx {} pkts {} bytes, malformed {}",
                p.port, p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes, p.malformed
            );
        }
        for q in &self.queues {
            // A queue that never saw a packet (port a's queues when only a sends) is one
            // line; its tins, all zero, are in the JSON report.
            let idle = q.bypass == 0
                && q.enqueued == 0
                && q.queued == 0
                && q.drops.values().all(|n| *n == 0);
            if idle {
                let _ = writeln!(out, "queue {}/{}: idle", q.port, q.queue);
                continue;
            }
            let drops: Vec<String> = q
                .drops
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(r, n)| format!("{r} {n}"))
                .collect();
            let rate = if q.rate_bps == 0 {
                "unlimited".to_string()
            } else {
                fmt_bps(q.rate_bps as f64)
            };
            // Only where workers hand packets to each other, so one worker's report is as
            // it was.
            let handed = if q.handed_in > 0 {
                format!(", handed in from other workers {}", q.handed_in)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "queue {}/{}: rate {rate}, bypass {}, enqueued {}, dequeued {}, queued {}, drops {}{handed}",
                q.port,
                q.queue,
                q.bypass,
                q.enqueued,
                q.dequeued,
                q.queued,
                if drops.is_empty() { "0".into() } else { drops.join(", ") }
            );
            // Tins that carried nothing stay out of the text (a diffserv8 queue has eight).
            let used = q.tins.iter().filter(|t| {
                t.sent_packets + t.dropped_packets + t.ecn_marked_packets + t.backlog_bytes > 0
                    || t.sparse_flows + t.bulk_flows > 0
            });
            for t in used {
                let _ = writeln!(
                    out,
                    "  tin {}: sent {} pkts {} bytes, dropped {}, marks {}, sparse {} bulk {}, sojourn p50 {} p99 {} p99.9 {} max {}",
                    t.name,
                    t.sent_packets,
                    t.sent_bytes,
                    t.dropped_packets,
                    t.ecn_marked_packets,
                    t.sparse_flows,
                    t.bulk_flows,
                    fmt_ns(t.sojourn_ns[0]),
                    fmt_ns(t.sojourn_ns[1]),
                    fmt_ns(t.sojourn_ns[2]),
                    fmt_ns(t.sojourn_ns[3]),
                );
            }
        }
        if let Some(c) = &self.circuits {
            out.push_str(&c.text(circuits::SortBy::Rate));
        }
        for s in &self.synth {
            let t = &s.totals;
            let _ = writeln!(
                out,
                "synth: sent {} received {} lost {} reordered {} duplicates {} ce {} foreign {}, one-way delay p50 {} p99 {} p99.9 {} max {}",
                t.sent_packets,
                t.received_packets,
                s.lost,
                t.reordered,
                t.duplicates,
                t.ce_marked,
                t.foreign,
                fmt_ns(s.delay_ns[0]),
                fmt_ns(s.delay_ns[1]),
                fmt_ns(s.delay_ns[2]),
                fmt_ns(s.delay_ns[3]),
            );
        }
        for b in &self.backend {
            let list: Vec<String> = b.counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(out, "backend {}: {}", b.port, list.join(", "));
        }
        if let Some(line) = self.drops_line() {
            out.push_str(&line);
            out.push('\n');
        }
        for line in self.direction_lines() {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str(&self.conservation_line());
        out.push('\n');
        out
    }

    /// Says which drops are the shaper doing its job (CAKE's AQM, its queue limit and its ACK
    /// filter, on traffic offered above the rate) and which are faults to look into (a ring
    /// between workers or a port that refused); `None` without drops.
    pub fn drops_line(&self) -> Option<String> {
        let list = |shaping: bool| -> (u64, Vec<String>) {
            let picked: Vec<(&str, u64)> = self
                .drops
                .iter()
                .filter(|(r, n)| **n > 0 && SHAPER_DROPS.contains(*r) == shaping)
                .map(|(r, n)| (*r, *n))
                .collect();
            (
                picked.iter().map(|(_, n)| n).sum(),
                picked.iter().map(|(r, n)| format!("{r} {n}")).collect(),
            )
        };
        let (by_shaper, shaper_list) = list(true);
        let (faults, fault_list) = list(false);
        if by_shaper + faults == 0 {
            return None;
        }
        let mut line = format!(
            "drops: {by_shaper} by the shaper doing its job{}",
            if shaper_list.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}: more was offered than the shaped rate carries, and CAKE dropped from the fattest flows)",
                    shaper_list.join(", ")
                )
            }
        );
        if faults == 0 {
            line.push_str("; none elsewhere");
        } else {
            line.push_str(&format!(
                "; {faults} elsewhere ({}: not the shaper's choice, see docs/metrics.md)",
                fault_list.join(", ")
            ));
        }
        Some(line)
    }
}

/// The drop reasons that are CAKE doing its job: the AQM, the queue's limit (dropping from
/// the fattest flow) and the ACK filter. The others (a full ring between workers, a port
/// that refused a frame, a frame that could not be parsed) are not the shaper's choice.
pub const SHAPER_DROPS: [&str; 3] = ["aqm", "overflow", "ack_filter"];

#[cfg(test)]
mod tests {
    use super::*;

    fn report(final_report: bool, transmitted: u64) -> Report {
        let mut drops = BTreeMap::new();
        drops.insert("aqm", 3);
        Report {
            elapsed_s: 2.0,
            final_report,
            ports: vec![PortReport {
                port: "a".into(),
                rx_packets: 10,
                rx_bytes: 1000,
                tx_packets: transmitted,
                tx_bytes: 700,
                malformed: 0,
                rx_bps: 4000.0,
                tx_bps: 2800.0,
                tx_pps: 3.5,
            }],
            queues: vec![QueueReport {
                port: "a".into(),
                queue: 0,
                bypass: 1,
                enqueued: 9,
                dequeued: 6,
                drops: drops.clone(),
                queued: 0,
                handed_in: 0,
                rate_bps: 8_000_000,
                tins: vec![TinSnapshot {
                    name: "Best Effort".into(),
                    ..TinSnapshot::default()
                }],
            }],
            drops,
            synth: Vec::new(),
            backend: Vec::new(),
            directions: Vec::new(),
            conservation: Conservation::check(10, transmitted, 3, 0, final_report),
            circuits: None,
        }
    }

    #[test]
    fn the_metrics_page_shows_the_latest_report_rendered_once() {
        let latest = Arc::new(std::sync::Mutex::new(None));
        let page = prometheus::page_of(Arc::clone(&latest));
        assert_eq!(page(), "", "no report yet");
        let first = Arc::new(report(false, 7));
        *latest.lock().unwrap() = Some(Arc::clone(&first));
        let text = page();
        assert_eq!(text, prometheus::render(&first));
        assert_eq!(page(), text, "a second scrape of the same report");
        let mut next = report(false, 9);
        next.elapsed_s += 1.0;
        *latest.lock().unwrap() = Some(Arc::new(next.clone()));
        assert_eq!(
            page(),
            prometheus::render(&next),
            "a new report, a new page"
        );
        assert_ne!(page(), text);
    }

    #[test]
    fn each_direction_shows_its_rates_and_its_own_conservation_everywhere() {
        let mut r = report(true, 7);
        r.directions.push(DirectionReport {
            direction: Direction::Upload,
            ingress: "lan".into(),
            egress: "wan".into(),
            rate_bps: 10_000_000,
            tx_bps: 9_800_000.0,
            conservation: Conservation::check(10, 7, 3, 0, true),
        });
        let text = r.final_text();
        assert!(
            text.contains("upload (lan -> wan): rate 10.00Mbit, sent 9.80Mbit; received 10 = transmitted 7 + dropped 3 + queued 0: ok"),
            "{text}"
        );
        assert!(
            r.live_line(None)
                .contains(" | upload 9.80Mbit of 10.00Mbit"),
            "{}",
            r.live_line(None)
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["directions"][0]["direction"], "upload");
        assert_eq!(json["directions"][0]["rate_bps"], 10_000_000);
        let prom = prometheus::render(&r);
        assert!(
            prom.contains("cakewalk_direction_rate_bytes_per_second{direction=\"upload\",port=\"wan\"} 1250000\n"),
            "{prom}"
        );
        assert!(
            prom.contains("cakewalk_direction_tx_bytes_per_second{direction=\"upload\",port=\"wan\"} 1225000\n"),
            "{prom}"
        );
        r.directions[0].conservation = Conservation::check(10, 6, 3, 0, true);
        assert!(r.final_text().contains(": MISMATCH"));
    }

    #[test]
    fn the_conservation_line_says_ok_mismatch_or_live() {
        assert!(report(true, 7).conservation_line().ends_with(": ok"));
        let bad = report(true, 6).conservation_line();
        assert!(
            bad.ends_with("MISMATCH") && bad.contains("(aqm 3)"),
            "{bad}"
        );
        assert!(report(false, 6)
            .conservation_line()
            .contains("exact only at exit"));
        assert!(report(true, 7)
            .final_text()
            .starts_with("cakewalk final report"));
    }

    #[test]
    fn the_final_text_shows_an_idle_queue_as_one_line_and_only_tins_that_carried_traffic() {
        let mut r = report(true, 7);
        r.queues[0].tins.push(TinSnapshot {
            name: "Voice".into(),
            sent_packets: 6,
            ..TinSnapshot::default()
        });
        let mut idle = r.queues[0].clone();
        idle.queue = 1;
        idle.bypass = 0;
        idle.enqueued = 0;
        idle.dequeued = 0;
        idle.drops.values_mut().for_each(|n| *n = 0);
        r.queues.push(idle);
        let text = r.final_text();
        assert!(text.contains("\n  tin Voice: sent 6 pkts"), "{text}");
        assert!(!text.contains("tin Best Effort"), "{text}");
        assert!(text.contains("\nqueue a/1: idle\n"), "{text}");
    }

    #[test]
    fn only_the_final_report_can_fail_the_conservation_check() {
        // An interval report of a busy run: 735 packets were between receive and queue, or
        // the counters moved while read; that is not a loss, and must not set the gauge the
        // docs say to alert on to 0.
        let live = Conservation::check(10_000, 6_000, 3_000, 265, false);
        assert!(live.ok, "{live:?}");
        assert_eq!(live.received, 10_000);
        // ... but the gap is reported, so that a leak shows while running.
        assert_eq!(live.unaccounted, 735);
        assert_eq!(Conservation::check(10, 9, 0, 3, false).unaccounted, -2);
        assert_eq!(
            Conservation::check(u64::MAX, 0, 0, 0, false).unaccounted,
            i64::MAX
        );
        // At exit the sum is exact: one packet missing is a mismatch.
        assert!(!Conservation::check(10_000, 6_000, 3_000, 999, true).ok);
        assert!(Conservation::check(10_000, 6_000, 3_000, 1_000, true).ok);
    }

    #[test]
    fn prometheus_text_uses_cakewalk_names_and_labels() {
        let mut r = report(true, 7);
        r.queues[0].tins[0].sojourn_histogram = crate::counters::SojournBuckets {
            buckets: vec![1; crate::counters::SOJOURN_BUCKETS_US.len()],
            count: 2,
            sum_us: 20_000_000,
        };
        r.backend.push(BackendReport {
            port: "b".into(),
            counters: [("rx_kernel_drops", 5)].into_iter().collect(),
        });
        let text = prometheus::render(&r);
        assert!(
            text.contains(
                "cakewalk_backend_frames_total{port=\"b\",counter=\"rx_kernel_drops\"} 5"
            ),
            "{text}"
        );
        assert!(text.contains("cakewalk_rate_bytes_per_second{port=\"a\",queue=\"0\"} 1000000"));
        assert!(text.contains(
            "cakewalk_tin_sojourn_seconds_bucket{port=\"a\",queue=\"0\",tin=\"Best Effort\",le=\"10\"} 1\ncakewalk_tin_sojourn_seconds_bucket{port=\"a\",queue=\"0\",tin=\"Best Effort\",le=\"+Inf\"} 2\ncakewalk_tin_sojourn_seconds_sum{port=\"a\",queue=\"0\",tin=\"Best Effort\"} 20\n"
        ), "{text}");
        // Every family once, with HELP and TYPE first.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!(types.len(), helps);
        let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), types.len(), "{text}");
        assert!(
            text.contains("cakewalk_rx_packets_total{port=\"a\"} 10"),
            "{text}"
        );
        assert!(text.contains("cakewalk_drops_total{port=\"a\",queue=\"0\",reason=\"aqm\"} 3"));
        assert!(text.contains("tin=\"Best Effort\""));
        assert!(text.contains("cakewalk_conservation_ok 1"));
        assert!(
            text.contains("cakewalk_conservation_unaccounted_packets 0"),
            "{text}"
        );
    }

    #[test]
    fn the_live_line_names_ports_rates_and_drops() {
        let line = report(false, 7).live_line(Some([1_000, 2_000_000, 0, 0]));
        assert!(line.contains(" a rx 4.00Kbit"), "{line}");
        assert!(line.contains("drops aqm=3"), "{line}");
        assert!(line.contains("p99 2.0ms"), "{line}");
    }

    #[test]
    fn stats_table_parses_and_rejects_unknown_keys() {
        let c: StatsConfig =
            toml::from_str("interval = \"500ms\"\nprometheus = \"127.0.0.1:9187\"").unwrap();
        assert_eq!(c.prometheus.as_deref(), Some("127.0.0.1:9187"));
        assert!(toml::from_str::<StatsConfig>("intervall = \"1s\"").is_err());
    }

    #[test]
    fn the_drops_line_tells_the_shapers_work_from_faults() {
        let mut r = report(true, 7);
        r.drops.insert("overflow", 2);
        assert_eq!(
            r.drops_line().unwrap(),
            "drops: 5 by the shaper doing its job (aqm 3, overflow 2: more was offered than the shaped rate carries, and CAKE dropped from the fattest flows); none elsewhere"
        );
        r.drops.insert("intake_full", 4);
        let line = r.drops_line().unwrap();
        assert!(
            line.ends_with(
                "; 4 elsewhere (intake_full 4: not the shaper's choice, see docs/metrics.md)"
            ),
            "{line}"
        );
        assert!(r.final_text().contains(&line), "{}", r.final_text());
        r.drops.clear();
        assert_eq!(r.drops_line(), None);
    }

    #[test]
    fn the_final_report_gives_rates_over_the_whole_run() {
        let layout = crate::counters::Layout {
            ports: 2,
            queues: 1,
        };
        let counters = Arc::new(WorkerCounters::new(layout, 1));
        let sent = |bytes: u64| {
            let mut local = vec![0u64; layout.len()];
            local[layout.egress(1, crate::counters::egress::TX_BYTES)] = bytes;
            counters.block(0).publish(&local);
        };
        let mut r = Reporter::new(Sources {
            port_names: vec!["a".into(), "b".into()],
            counters: Arc::clone(&counters),
            queues: Vec::new(),
            synth: Vec::new(),
            handoff: Box::new(|_| 0),
            backend: Vec::new(),
            directions: Vec::new(),
        });
        sent(1000);
        assert_eq!(r.report(1.0).ports[1].tx_bps, 8000.0);
        sent(1010);
        assert_eq!(
            r.report(2.0).ports[1].tx_bps,
            80.0,
            "an interval: since the last report"
        );
        sent(1020);
        assert_eq!(
            r.final_report(4.0).ports[1].tx_bps,
            1020.0 * 8.0 / 4.0,
            "the final report: over the whole run, not its drain"
        );
    }
}
