//! The Prometheus endpoint of the real binary, judged by what consumes it: a live scrape
//! passes `promtool check metrics` (with a port name that needs escaping), every metric the
//! shipped Grafana dashboard queries is on the page, and connections that never send a
//! request do not hold a scrape back.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A forwarder on synth ports serving Prometheus on a free loopback port, stopped on drop.
struct Forwarder {
    child: Option<Child>,
    addr: String,
}

impl Forwarder {
    /// Starts one with `extra` arguments; returns once the page holds a report.
    fn start(extra: &[&str]) -> Forwarder {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
            .args(["run", "--set", "engine.pin=false", "--duration", "60s"])
            .args(["--control", "off", "--prometheus", &addr])
            .args(["--rate", "20mbit", "--set", "ports.synth.rate=\"40mbit\""])
            .args(["--set", "stats.interval=\"200ms\""])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let mut f = Forwarder {
            child: Some(child),
            addr,
        };
        // Bounded: 300 tries; the page is empty until the first report.
        for _ in 0..300 {
            if f.try_scrape()
                .is_some_and(|b| b.contains("cakewalk_rx_packets_total"))
            {
                return f;
            }
            if let Some(c) = f.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    let out = f.child.take().unwrap().wait_with_output().unwrap();
                    panic!(
                        "cakewalk exited early ({status}): {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no report on {} after 300 tries", f.addr);
    }

    fn try_scrape(&self) -> Option<String> {
        let mut c = TcpStream::connect(&self.addr).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .ok()?;
        let mut raw = String::new();
        c.read_to_string(&mut raw).ok()?;
        let (head, body) = raw.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.0 200 OK")
            .then(|| body.to_string())
    }

    fn scrape(&self) -> String {
        self.try_scrape().expect("the endpoint answers")
    }

    /// SIGINT, then the exit (bounded).
    fn stop(mut self) -> Output {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("cakewalk did not exit within 30 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The metric names of the samples on `page`.
fn sample_names(page: &str) -> std::collections::BTreeSet<String> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn a_live_scrape_passes_promtool_check_metrics_with_a_port_name_that_needs_escaping() {
    let have_promtool = Command::new("promtool").arg("--version").output().is_ok();
    if !have_promtool {
        // scripts/test's setup installs it (Debian package `prometheus`) when it can.
        assert!(
            !is_root(),
            "promtool is missing: apt-get install prometheus (scripts/test setup does)"
        );
        forwarder::testing::skip(
            "promtool not installed (apt-get install prometheus) and not root",
        );
        return;
    }
    let f = Forwarder::start(&[
        "--set",
        "ports.a.name=\"l\\\"an\"",
        "--set",
        "ports.b.name=\"w\\\\an\"",
        "--diffserv",
        "diffserv4",
    ]);
    let page = f.scrape();
    let out = f.stop();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(page.contains("port=\"l\\\"an\""), "{page}");
    assert!(page.contains("port=\"w\\\\an\""), "{page}");
    assert!(
        page.contains("cakewalk_tin_sojourn_seconds_bucket{"),
        "{page}"
    );
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let result = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(
        result.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}\npage:\n{page}"
    );
}

#[test]
fn every_metric_the_grafana_dashboard_queries_is_on_a_live_page() {
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/grafana-dashboard.json"
    ))
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut queries = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match v {
                        serde_json::Value::String(s)
                            if ["expr", "query", "definition"].contains(&k.as_str()) =>
                        {
                            out.push(s.clone());
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&json, &mut queries);
    let mut used = std::collections::BTreeSet::new();
    for q in &queries {
        let mut rest = q.as_str();
        while let Some(i) = rest.find("cakewalk_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            used.insert(name);
        }
    }
    assert!(used.len() >= 10, "the dashboard's queries: {queries:?}");
    // Synth ports and CAKE: every family the forwarder has is on the page.
    let f = Forwarder::start(&[]);
    let page = f.scrape();
    drop(f);
    let on_page = sample_names(&page);
    let missing: Vec<&String> = used.iter().filter(|n| !on_page.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, which the page does not have:\n{page}"
    );
}

#[test]
fn connections_that_never_send_a_request_do_not_hold_a_scrape_back() {
    let f = Forwarder::start(&[]);
    // 20 connections that say nothing: a server that serves one connection at a time waits
    // out each one's read timeout before it gets to the scrape behind them.
    let idle: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&f.addr).expect("connect"))
        .collect();
    let started = Instant::now();
    let page = f.scrape();
    let took = started.elapsed();
    assert!(page.contains("cakewalk_rx_packets_total"), "{page}");
    // No wall-clock threshold: the scrape was answered while every idle connection was
    // still open and unanswered, so none of them stood in its way.
    for (i, c) in idle.iter().enumerate() {
        c.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        match (&*c).read(&mut b) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!(
                "idle connection {i} was answered or closed ({other:?}) before the scrape finished, {took:?} after it started"
            ),
        }
    }
    // More silent connections than the server keeps: the oldest are closed to make room,
    // and a scrape still gets its answer.
    let crowd: Vec<TcpStream> = (0..80)
        .map(|_| TcpStream::connect(&f.addr).expect("connect"))
        .collect();
    assert!(f.scrape().contains("cakewalk_rx_packets_total"));
    drop(crowd);
    drop(idle);
    let out = f.stop();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
