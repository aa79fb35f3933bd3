//! The Prometheus endpoint: the latest report in the Prometheus text exposition format
//! (version 0.0.4), served on a loopback TCP port to whatever scrapes it.
//!
//! The page is written by a small encoder of our own ([`Exposition`]) rather than a client
//! library: the figures are snapshots of counters the engine owns, rendered once per report,
//! which the format takes as plain text, while client libraries model live metric objects
//! (counters that can only be incremented) and write OpenMetrics. The encoder keeps the rules
//! `promtool check metrics` enforces: every family has HELP and TYPE and its samples together,
//! label values and help text are escaped, names carry base units (bytes, seconds).
//!
//! The server answers every HTTP request with the whole page. It serves any number of
//! connections at once from one thread over non-blocking sockets: a connection has
//! [`CONNECTION_DEADLINE`] to send its request and take the answer, and past
//! [`MAX_CONNECTIONS`] the oldest silent one is closed, so connections that never send a
//! request cannot delay a scrape.

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Report;
use crate::counters::SOJOURN_BUCKETS_US;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The address does not parse.
    #[error("prometheus address '{0}' is not an address; try '127.0.0.1:9187'")]
    BadAddress(String),
    /// The address is not loopback and that was not allowed.
    #[error("prometheus address '{0}' is not loopback; use 127.0.0.1 or set stats.prometheus_public = true")]
    NotLoopback(String),
    /// Binding failed.
    #[error("cannot listen on '{addr}'; pick a free port")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when the process restarts).
    Counter,
    /// A value now.
    Gauge,
    /// Cumulative buckets with `_bucket`, `_sum` and `_count` samples.
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A text exposition being written, one whole family at a time.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

/// The samples of one family (see [`Exposition::family`]).
pub struct Family<'a> {
    out: &'a mut String,
    name: &'a str,
}

/// Writes `v` as the format's float: `+Inf`, `-Inf`, `NaN` or a decimal.
fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Writes `{k="v",...}` with each value escaped (backslash, double quote, line feed).
fn write_labels(out: &mut String, labels: &[(&str, &str)], le: Option<f64>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    if let Some(le) = le {
        if !first {
            out.push(',');
        }
        out.push_str("le=\"");
        write_value(out, le);
        out.push('"');
    }
    out.push('}');
}

impl Family<'_> {
    /// One sample with `labels`.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(self.name);
        write_labels(self.out, labels, None);
        self.out.push(' ');
        write_value(self.out, value);
        self.out.push('\n');
    }

    /// One sample of a counter or integer gauge (written exactly, without a float's rounding).
    pub fn integer(&mut self, labels: &[(&str, &str)], value: u64) {
        self.out.push_str(self.name);
        write_labels(self.out, labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    /// One histogram with `labels`: `buckets` are (upper bound, observations at or below it)
    /// in increasing order, without the `+Inf` bucket, which is `count`.
    pub fn histogram(
        &mut self,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        count: u64,
        sum: f64,
    ) {
        for &(le, n) in buckets
            .iter()
            .chain(std::iter::once(&(f64::INFINITY, count)))
        {
            let _ = write!(self.out, "{}_bucket", self.name);
            write_labels(self.out, labels, Some(le));
            let _ = writeln!(self.out, " {n}");
        }
        let _ = write!(self.out, "{}_sum", self.name);
        write_labels(self.out, labels, None);
        self.out.push(' ');
        write_value(self.out, sum);
        self.out.push('\n');
        let _ = write!(self.out, "{}_count", self.name);
        write_labels(self.out, labels, None);
        let _ = writeln!(self.out, " {count}");
    }
}

impl Exposition {
    /// Writes family `name` (HELP and TYPE, then what `samples` adds).
    pub fn family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        samples: impl FnOnce(&mut Family<'_>),
    ) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(
            self.out,
            "# HELP {name} {help}\n# TYPE {name} {}",
            kind.name()
        );
        samples(&mut Family {
            out: &mut self.out,
            name,
        });
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Renders `r` in the Prometheus text format.
pub fn render(r: &Report) -> String {
    let mut x = Exposition::default();
    let ports = &r.ports;
    type PortField = fn(&super::PortReport) -> u64;
    let port_counters: [(&str, &str, PortField); 5] = [
        (
            "cakewalk_rx_packets_total",
            "Frames received on the port.",
            |p| p.rx_packets,
        ),
        (
            "cakewalk_rx_bytes_total",
            "Bytes of the frames received on the port (L2 header included, FCS excluded).",
            |p| p.rx_bytes,
        ),
        (
            "cakewalk_tx_packets_total",
            "Frames transmitted on the port.",
            |p| p.tx_packets,
        ),
        (
            "cakewalk_tx_bytes_total",
            "Bytes of the frames transmitted on the port (L2 header included, FCS excluded).",
            |p| p.tx_bytes,
        ),
        (
            "cakewalk_malformed_total",
            "Received frames whose headers did not parse (forwarded as non-IP).",
            |p| p.malformed,
        ),
    ];
    for (name, help, field) in port_counters {
        x.family(name, Kind::Counter, help, |f| {
            for p in ports {
                f.integer(&[("port", &p.port)], field(p));
            }
        });
    }
    let queues = &r.queues;
    let qnum: Vec<String> = queues.iter().map(|q| q.queue.to_string()).collect();
    x.family(
        "cakewalk_drops_total",
        Kind::Counter,
        "Packets dropped by the TX queue, by reason.",
        |f| {
            for (q, n) in queues.iter().zip(&qnum) {
                for (reason, count) in &q.drops {
                    f.integer(
                        &[("port", &q.port), ("queue", n), ("reason", reason)],
                        *count,
                    );
                }
            }
        },
    );
    type QueueField = fn(&super::QueueReport) -> u64;
    let queue_figures: [(&str, Kind, &str, QueueField); 4] = [
        (
            "cakewalk_bypass_total",
            Kind::Counter,
            "Packets sent straight out because the queue was empty and the shaper had credit.",
            |q| q.bypass,
        ),
        (
            "cakewalk_handed_in_total",
            Kind::Counter,
            "Packets offered to the queue by a worker that does not run it (each crossed cores).",
            |q| q.handed_in,
        ),
        (
            "cakewalk_queued_packets",
            Kind::Gauge,
            "Packets waiting in the TX queue (qdisc, intake, transmit burst, hand-off).",
            |q| q.queued,
        ),
        (
            "cakewalk_rate_bytes_per_second",
            Kind::Gauge,
            "The configured global rate the TX queues of the port share (0: unlimited).",
            |q| q.rate_bps / 8,
        ),
    ];
    for (name, kind, help, field) in queue_figures {
        x.family(name, kind, help, |f| {
            for (q, n) in queues.iter().zip(&qnum) {
                f.integer(&[("port", &q.port), ("queue", n)], field(q));
            }
        });
    }
    type TinField = fn(&crate::counters::TinSnapshot) -> u64;
    let tin_figures: [(&str, Kind, &str, TinField); 6] = [
        (
            "cakewalk_tin_sent_packets_total",
            Kind::Counter,
            "Packets delivered from the tin.",
            |t| t.sent_packets,
        ),
        (
            "cakewalk_tin_sent_bytes_total",
            Kind::Counter,
            "Bytes delivered from the tin.",
            |t| t.sent_bytes,
        ),
        (
            "cakewalk_tin_dropped_packets_total",
            Kind::Counter,
            "Packets dropped from the tin, all reasons.",
            |t| t.dropped_packets,
        ),
        (
            "cakewalk_tin_ecn_marked_packets_total",
            Kind::Counter,
            "Packets CE-marked instead of dropped.",
            |t| t.ecn_marked_packets,
        ),
        (
            "cakewalk_tin_sparse_flows",
            Kind::Gauge,
            "Flows on the tin's sparse (new) list.",
            |t| t.sparse_flows,
        ),
        (
            "cakewalk_tin_bulk_flows",
            Kind::Gauge,
            "Flows on the tin's bulk (old) list.",
            |t| t.bulk_flows,
        ),
    ];
    for (name, kind, help, field) in tin_figures {
        x.family(name, kind, help, |f| {
            for (q, n) in queues.iter().zip(&qnum) {
                for t in &q.tins {
                    f.integer(
                        &[("port", &q.port), ("queue", n), ("tin", &t.name)],
                        field(t),
                    );
                }
            }
        });
    }
    x.family(
        "cakewalk_tin_sojourn_seconds",
        Kind::Histogram,
        "Time packets spent in the tin, one delivered packet in 16 sampled, since start.",
        |f| {
            for (q, n) in queues.iter().zip(&qnum) {
                for t in &q.tins {
                    let h = &t.sojourn_histogram;
                    let buckets: Vec<(f64, u64)> = SOJOURN_BUCKETS_US
                        .iter()
                        .zip(&h.buckets)
                        .map(|(us, c)| (*us as f64 / 1e6, *c))
                        .collect();
                    f.histogram(
                        &[("port", &q.port), ("queue", n), ("tin", &t.name)],
                        &buckets,
                        h.count,
                        h.sum_us as f64 / 1e6,
                    );
                }
            }
        },
    );
    x.family(
        "cakewalk_tin_sojourn_p99_seconds",
        Kind::Gauge,
        "99th percentile of the time packets spent in the tin, since start.",
        |f| {
            for (q, n) in queues.iter().zip(&qnum) {
                for t in &q.tins {
                    f.sample(
                        &[("port", &q.port), ("queue", n), ("tin", &t.name)],
                        t.sojourn_ns[1] as f64 / 1e9,
                    );
                }
            }
        },
    );
    if !r.synth.is_empty() {
        let synth = &r.synth;
        x.family(
            "cakewalk_synth_sent_packets_total",
            Kind::Counter,
            "Packets the built-in generator sent on the port.",
            |f| {
                synth
                    .iter()
                    .for_each(|s| f.integer(&[("port", &s.port)], s.totals.sent_packets))
            },
        );
        x.family(
            "cakewalk_synth_received_packets_total",
            Kind::Counter,
            "Of the generated packets, those the sink received back.",
            |f| {
                synth
                    .iter()
                    .for_each(|s| f.integer(&[("port", &s.port)], s.totals.received_packets));
            },
        );
        x.family(
            "cakewalk_synth_delay_p99_seconds",
            Kind::Gauge,
            "99th percentile of the generator-to-sink delay since start.",
            |f| {
                synth
                    .iter()
                    .for_each(|s| f.sample(&[("port", &s.port)], s.delay_ns[1] as f64 / 1e9));
            },
        );
    }
    let dirs = &r.directions;
    x.family(
        "cakewalk_direction_rate_bytes_per_second",
        Kind::Gauge,
        "The configured rate of the direction: the shared rate of the TX queues of the port it leaves through (0: unlimited).",
        |f| {
            for d in dirs {
                f.integer(
                    &[("direction", d.direction.name()), ("port", &d.egress)],
                    d.rate_bps / 8,
                );
            }
        },
    );
    x.family(
        "cakewalk_direction_tx_bytes_per_second",
        Kind::Gauge,
        "What the direction transmitted over the last stats interval.",
        |f| {
            for d in dirs {
                f.sample(
                    &[("direction", d.direction.name()), ("port", &d.egress)],
                    d.tx_bps / 8.0,
                );
            }
        },
    );
    x.family(
        "cakewalk_direction_conservation_unaccounted_packets",
        Kind::Gauge,
        "The direction's received (on its ingress port) - transmitted - dropped - queued (on its egress port).",
        |f| {
            for d in dirs {
                f.sample(
                    &[("direction", d.direction.name()), ("port", &d.egress)],
                    d.conservation.unaccounted as f64,
                );
            }
        },
    );
    if !r.backend.is_empty() {
        let backend = &r.backend;
        x.family(
            "cakewalk_backend_frames_total",
            Kind::Counter,
            "Frames the port's backend counted below the engine (pcap files, AF_PACKET), by counter.",
            |f| {
                for b in backend {
                    for (counter, n) in &b.counters {
                        f.integer(&[("port", &b.port), ("counter", counter)], *n);
                    }
                }
            },
        );
    }
    if let Some(circuits) = &r.circuits {
        render_circuits(&mut x, circuits);
    }
    let c = &r.conservation;
    x.family(
        "cakewalk_conservation_ok",
        Kind::Gauge,
        "0 when received = transmitted + dropped + queued failed at exit (a bug: alert on it).",
        |f| f.integer(&[], u64::from(c.ok)),
    );
    x.family(
        "cakewalk_conservation_unaccounted_packets",
        Kind::Gauge,
        "received - transmitted - dropped - queued: in flight while running, 0 at a clean exit.",
        |f| f.sample(&[], c.unaccounted as f64),
    );
    x.finish()
}

/// The circuit families: totals always; a series per listed circuit and per node only when
/// `[stats] circuit_metrics` asks (the report then holds them), as one series per subscriber
/// is more than most Prometheus servers want by default.
fn render_circuits(x: &mut Exposition, c: &super::circuits::CircuitsReport) {
    const DIRS: [&str; 2] = ["download", "upload"];
    x.family(
        "cakewalk_circuits",
        Kind::Gauge,
        "Circuits in force (loaded from the circuit files).",
        |f| f.integer(&[], c.circuits as u64),
    );
    x.family(
        "cakewalk_circuits_active",
        Kind::Gauge,
        "Circuits holding a queue of their own (they had traffic within the idle release time).",
        |f| {
            for (d, n) in DIRS.iter().zip(c.active) {
                f.integer(&[("direction", d)], n as u64);
            }
        },
    );
    x.family(
        "cakewalk_circuits_memory_bytes",
        Kind::Gauge,
        "Memory the circuit queues take.",
        |f| {
            for (d, n) in DIRS.iter().zip(c.memory_bytes) {
                f.integer(&[("direction", d)], n);
            }
        },
    );
    if !c.rows.is_empty() {
        type RowField = fn(&super::circuits::CircuitDirRow) -> f64;
        let per_circuit: [(&str, Kind, &str, RowField); 6] = [
            (
                "cakewalk_circuit_sent_bytes_total",
                Kind::Counter,
                "Bytes the circuit delivered (frame length).",
                |d| d.sent_bytes as f64,
            ),
            (
                "cakewalk_circuit_sent_packets_total",
                Kind::Counter,
                "Packets the circuit delivered.",
                |d| d.sent_packets as f64,
            ),
            (
                "cakewalk_circuit_dropped_packets_total",
                Kind::Counter,
                "Packets the circuit's queue dropped, every reason.",
                |d| d.dropped_packets as f64,
            ),
            (
                "cakewalk_circuit_backlog_bytes",
                Kind::Gauge,
                "Bytes queued in the circuit's queue.",
                |d| d.backlog_bytes as f64,
            ),
            (
                "cakewalk_circuit_plan_bits_per_second",
                Kind::Gauge,
                "The circuit's plan in force (0: unlimited).",
                |d| d.plan_bps as f64,
            ),
            (
                "cakewalk_circuit_sojourn_peak_seconds",
                Kind::Gauge,
                "CAKE's peak sojourn over the circuit's tins (a fast-rising, slowly decaying peak).",
                |d| d.sojourn_peak_ns as f64 / 1e9,
            ),
        ];
        for (name, kind, help, field) in per_circuit {
            x.family(name, kind, help, |f| {
                for r in &c.rows {
                    for (d, row) in DIRS.iter().zip([&r.download, &r.upload]) {
                        f.sample(&[("circuit", &r.id), ("direction", d)], field(row));
                    }
                }
            });
        }
    }
    if !c.nodes.is_empty() {
        type NodeField = fn(&super::circuits::NodeDirRow) -> f64;
        let per_node: [(&str, Kind, &str, NodeField); 5] = [
            (
                "cakewalk_node_sent_bytes_total",
                Kind::Counter,
                "Bytes the circuits under the node delivered (its whole subtree; virtual nodes too).",
                |d| d.sent_bytes as f64,
            ),
            (
                "cakewalk_node_dropped_packets_total",
                Kind::Counter,
                "Packets the queues of the circuits under the node dropped.",
                |d| d.dropped_packets as f64,
            ),
            (
                "cakewalk_node_plans_bits_per_second",
                Kind::Gauge,
                "The sum of the plans of the circuits under the node.",
                |d| d.plans_bps as f64,
            ),
            (
                "cakewalk_node_cap_bits_per_second",
                Kind::Gauge,
                "The node's own cap from network.json (0: none).",
                |d| d.cap_bps as f64,
            ),
            (
                "cakewalk_node_sojourn_peak_seconds",
                Kind::Gauge,
                "The largest peak sojourn among the circuits under the node.",
                |d| d.sojourn_peak_ns as f64 / 1e9,
            ),
        ];
        for (name, kind, help, field) in per_node {
            x.family(name, kind, help, |f| {
                for n in &c.nodes {
                    for (d, row) in DIRS.iter().zip([&n.download, &n.upload]) {
                        f.sample(&[("node", &n.name), ("direction", d)], field(row));
                    }
                }
            });
        }
    }
}

/// How long a connection may take to send its request and take the answer.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);

/// Connections served at once; past it the oldest one that has not sent a request is closed.
pub const MAX_CONNECTIONS: usize = 64;

/// Longest request read; the rest of a longer one is not waited for.
const MAX_REQUEST: usize = 8192;

/// One open connection.
struct Conn {
    stream: TcpStream,
    opened: Instant,
    request: Vec<u8>,
    /// The answer once the request is in, and how much of it was written.
    answer: Option<(Vec<u8>, usize)>,
}

impl Conn {
    /// Moves the connection on; false once it is done (answered, closed, or broken).
    fn step(&mut self, page: &dyn Fn() -> String) -> bool {
        if self.answer.is_none() {
            let mut buf = [0u8; 2048];
            loop {
                match self.stream.read(&mut buf) {
                    // Closed before a whole request: answer what came, if anything.
                    Ok(0) if self.request.is_empty() => return false,
                    Ok(0) => break,
                    Ok(n) => {
                        self.request.extend_from_slice(&buf[..n]);
                        if self.request.windows(4).any(|w| w == b"\r\n\r\n")
                            || self.request.windows(2).any(|w| w == b"\n\n")
                            || self.request.len() >= MAX_REQUEST
                        {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            let body = page();
            let mut answer = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            answer.extend_from_slice(body.as_bytes());
            self.answer = Some((answer, 0));
        }
        let Some((answer, written)) = self.answer.as_mut() else {
            return false;
        };
        while *written < answer.len() {
            match self.stream.write(&answer[*written..]) {
                Ok(0) => return false,
                Ok(n) => *written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        false
    }
}

/// The page for the endpoint: the latest report `latest` holds (empty before the first),
/// rendered when first asked for and kept until the next report, however many scrapes come.
pub fn page_of(latest: Arc<std::sync::Mutex<Option<Arc<Report>>>>) -> impl Fn() -> String {
    let rendered: std::cell::RefCell<Option<(Arc<Report>, String)>> = Default::default();
    move || {
        let Some(r) = latest.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return String::new();
        };
        let mut cache = rendered.borrow_mut();
        match &*cache {
            Some((of, text)) if Arc::ptr_eq(of, &r) => text.clone(),
            _ => {
                let text = render(&r);
                *cache = Some((r, text.clone()));
                text
            }
        }
    }
}

/// Starts the endpoint on `addr`; it answers each request with `page()` until `stop` is
/// set.
pub fn serve(
    addr: &str,
    allow_public: bool,
    page: impl Fn() -> String + Send + 'static,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, PrometheusError> {
    let sa: SocketAddr = addr
        .parse()
        .map_err(|_| PrometheusError::BadAddress(addr.to_string()))?;
    if !sa.ip().is_loopback() && !allow_public {
        return Err(PrometheusError::NotLoopback(addr.to_string()));
    }
    let listener = TcpListener::bind(sa).map_err(|source| PrometheusError::Bind {
        addr: addr.to_string(),
        source,
    })?;
    let _ = listener.set_nonblocking(true);
    Ok(std::thread::spawn(move || {
        let mut conns: Vec<Conn> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let mut progressed = false;
            while let Ok((stream, _)) = listener.accept() {
                progressed = true;
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                if conns.len() >= MAX_CONNECTIONS {
                    // Make room: the oldest connection still silent (or else the oldest).
                    let victim = conns.iter().position(|c| c.request.is_empty()).unwrap_or(0);
                    conns.remove(victim);
                }
                conns.push(Conn {
                    stream,
                    opened: Instant::now(),
                    request: Vec::new(),
                    answer: None,
                });
            }
            let before = conns.len();
            conns.retain_mut(|c| c.opened.elapsed() < CONNECTION_DEADLINE && c.step(&page));
            progressed |= conns.len() != before;
            // Poll quickly while someone is connected, slowly when nobody is.
            let pause = if progressed {
                Duration::ZERO
            } else if conns.is_empty() {
                Duration::from_millis(25)
            } else {
                Duration::from_millis(2)
            };
            std::thread::sleep(pause);
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped_and_families_come_whole() {
        let mut x = Exposition::default();
        x.family("t_total", Kind::Counter, "a \\ b\nc", |f| {
            f.integer(&[("port", "l\"a\\n\nx")], 3);
            f.integer(&[("port", "b")], 4);
        });
        x.family("g", Kind::Gauge, "g.", |f| f.sample(&[], f64::INFINITY));
        let text = x.finish();
        assert_eq!(
            text,
            "# HELP t_total a \\\\ b\\nc\n# TYPE t_total counter\nt_total{port=\"l\\\"a\\\\n\\nx\"} 3\nt_total{port=\"b\"} 4\n# HELP g g.\n# TYPE g gauge\ng +Inf\n"
        );
    }

    #[test]
    fn circuits_give_totals_always_and_series_per_circuit_and_node_when_listed() {
        use super::super::circuits::{
            CircuitDirRow, CircuitRow, CircuitsReport, NodeDirRow, NodeRow,
        };
        let mut c = CircuitsReport {
            circuits: 2,
            active: [1, 2],
            memory_bytes: [100, 200],
            unmatched: "link".into(),
            ..CircuitsReport::default()
        };
        let mut x = Exposition::default();
        render_circuits(&mut x, &c);
        let totals = x.finish();
        assert!(totals.contains("cakewalk_circuits 2\n"), "{totals}");
        assert!(
            totals.contains("cakewalk_circuits_active{direction=\"upload\"} 2\n"),
            "{totals}"
        );
        assert!(
            !totals.contains("cakewalk_circuit_sent"),
            "off: no series per circuit: {totals}"
        );
        c.rows.push(CircuitRow {
            id: "sub \"1\"".into(),
            name: "one".into(),
            slot: 0,
            parent: Some("tower".into()),
            download: CircuitDirRow::default(),
            upload: CircuitDirRow {
                sent_bytes: 1500,
                plan_bps: 2_000_000,
                ..CircuitDirRow::default()
            },
        });
        c.nodes.push(NodeRow {
            name: "tower".into(),
            depth: 0,
            is_virtual: false,
            circuits: 1,
            download: NodeDirRow::default(),
            upload: NodeDirRow {
                cap_bps: 3_000_000,
                sojourn_peak_ns: 2_000_000,
                ..NodeDirRow::default()
            },
        });
        let mut x = Exposition::default();
        render_circuits(&mut x, &c);
        let text = x.finish();
        for line in [
            "cakewalk_circuit_sent_bytes_total{circuit=\"sub \\\"1\\\"\",direction=\"upload\"} 1500\n",
            "cakewalk_circuit_plan_bits_per_second{circuit=\"sub \\\"1\\\"\",direction=\"upload\"} 2000000\n",
            "cakewalk_node_cap_bits_per_second{node=\"tower\",direction=\"upload\"} 3000000\n",
            "cakewalk_node_sojourn_peak_seconds{node=\"tower\",direction=\"upload\"} 0.002\n",
            "# TYPE cakewalk_node_sent_bytes_total counter\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in {text}");
        }
    }

    #[test]
    fn a_histogram_ends_with_the_inf_bucket_sum_and_count() {
        let mut x = Exposition::default();
        x.family("h_seconds", Kind::Histogram, "h.", |f| {
            f.histogram(&[("tin", "Voice")], &[(0.001, 2), (0.01, 5)], 7, 0.25);
        });
        let text = x.finish();
        assert!(
            text.ends_with(
                "h_seconds_bucket{tin=\"Voice\",le=\"0.001\"} 2\nh_seconds_bucket{tin=\"Voice\",le=\"0.01\"} 5\nh_seconds_bucket{tin=\"Voice\",le=\"+Inf\"} 7\nh_seconds_sum{tin=\"Voice\"} 0.25\nh_seconds_count{tin=\"Voice\"} 7\n"
            ),
            "{text}"
        );
    }
}
