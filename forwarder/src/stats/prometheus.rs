//! A tiny Prometheus text-format endpoint: a std::net listener thread that answers every
//! HTTP request with the latest report rendered as `cakewalk_*` metrics (labels port, queue,
//! tin, reason). It binds to loopback unless told otherwise and serves one connection at a
//! time; it is a scrape target, not a web server.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Report;

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

/// Renders `r` in the Prometheus text format.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let mut metric = |name: &str, help: &str, kind: &str| {
        let _ = writeln!(
            o,
            "# HELP cakewalk_{name} {help}\n# TYPE cakewalk_{name} {kind}"
        );
    };
    metric("rx_packets_total", "Frames received per port.", "counter");
    metric(
        "tx_packets_total",
        "Frames transmitted per port.",
        "counter",
    );
    let mut o2 = o;
    for p in &r.ports {
        let _ = writeln!(
            o2,
            "cakewalk_rx_packets_total{{port=\"{}\"}} {}",
            p.port, p.rx_packets
        );
        let _ = writeln!(
            o2,
            "cakewalk_rx_bytes_total{{port=\"{}\"}} {}",
            p.port, p.rx_bytes
        );
        let _ = writeln!(
            o2,
            "cakewalk_tx_packets_total{{port=\"{}\"}} {}",
            p.port, p.tx_packets
        );
        let _ = writeln!(
            o2,
            "cakewalk_tx_bytes_total{{port=\"{}\"}} {}",
            p.port, p.tx_bytes
        );
        let _ = writeln!(
            o2,
            "cakewalk_malformed_total{{port=\"{}\"}} {}",
            p.port, p.malformed
        );
    }
    for q in &r.queues {
        let l = format!("port=\"{}\",queue=\"{}\"", q.port, q.queue);
        for (reason, n) in &q.drops {
            let _ = writeln!(o2, "cakewalk_drops_total{{{l},reason=\"{reason}\"}} {n}");
        }
        let _ = writeln!(o2, "cakewalk_bypass_total{{{l}}} {}", q.bypass);
        let _ = writeln!(o2, "cakewalk_queued_packets{{{l}}} {}", q.queued);
        let _ = writeln!(o2, "cakewalk_rate_bits_per_second{{{l}}} {}", q.rate_bps);
        for t in &q.tins {
            let tl = format!("{l},tin=\"{}\"", t.name);
            let _ = writeln!(
                o2,
                "cakewalk_tin_sent_packets_total{{{tl}}} {}",
                t.sent_packets
            );
            let _ = writeln!(
                o2,
                "cakewalk_tin_dropped_packets_total{{{tl}}} {}",
                t.dropped_packets
            );
            let _ = writeln!(
                o2,
                "cakewalk_tin_ecn_marked_packets_total{{{tl}}} {}",
                t.ecn_marked_packets
            );
            let _ = writeln!(o2, "cakewalk_tin_sparse_flows{{{tl}}} {}", t.sparse_flows);
            let _ = writeln!(o2, "cakewalk_tin_bulk_flows{{{tl}}} {}", t.bulk_flows);
            let _ = writeln!(
                o2,
                "cakewalk_tin_sojourn_p99_seconds{{{tl}}} {}",
                t.sojourn_ns[1] as f64 / 1e9
            );
        }
    }
    for s in &r.synth {
        let l = format!("port=\"{}\"", s.port);
        let _ = writeln!(
            o2,
            "cakewalk_synth_sent_packets_total{{{l}}} {}",
            s.totals.sent_packets
        );
        let _ = writeln!(
            o2,
            "cakewalk_synth_received_packets_total{{{l}}} {}",
            s.totals.received_packets
        );
        let _ = writeln!(
            o2,
            "cakewalk_synth_delay_p99_seconds{{{l}}} {}",
            s.delay_ns[1] as f64 / 1e9
        );
    }
    let c = &r.conservation;
    let _ = writeln!(o2, "cakewalk_conservation_ok {}", u8::from(c.ok));
    let _ = writeln!(
        o2,
        "cakewalk_conservation_unaccounted_packets {}",
        c.unaccounted
    );
    o2
}

/// Starts the endpoint on `addr`; it serves `latest` until `stop` is set.
pub fn serve(
    addr: &str,
    allow_public: bool,
    latest: Arc<Mutex<String>>,
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
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    let mut buf = [0u8; 2048];
                    let _ = s.read(&mut buf);
                    let body = latest.lock().map(|b| b.clone()).unwrap_or_default();
                    let _ = write!(
                        s,
                        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }))
}
