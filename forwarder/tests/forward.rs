//! The real `cakewalk` binary on software ports: synth -> forwarder -> synth sink, pcap in ->
//! pcap out, SIGINT, and the control socket. Every run is bounded by a packet count or a
//! duration; rates are checked as ratios with generous bounds, never against wall-clock
//! thresholds.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `cakewalk run` (the subcommand comes first so the caller's flags follow it), unpinned:
/// tests run side by side, and two forwarders pinned to the same core would starve each
/// other while the other core idles.
fn cakewalk_run() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cakewalk"));
    c.args(["run", "--set", "engine.pin=false"]);
    c
}

fn run_ok(args: &[&str]) -> (String, String) {
    let out: Output = cakewalk_run()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "cakewalk run {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("stats json written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn ctl_path(dir: &Path) -> PathBuf {
    dir.join("ctl.sock")
}

#[test]
fn unshaped_synth_run_delivers_every_packet_with_conservation() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let (stdout, _) = run_ok(&[
        "--rate",
        "unlimited",
        "--duration",
        "30s",
        "--stats-json",
        &s(&json),
        "--control",
        &s(&ctl_path(dir.path())),
        "--set",
        "engine.drain_timeout=\"20s\"",
        "--set",
        "ports.synth.ecn=true",
        "--set",
        "ports.synth.packets=100000",
        "--set",
        "ports.synth.rate=\"200mbit\"",
    ]);
    assert!(stdout.contains("stopped: inputs finished"), "{stdout}");
    assert!(
        stdout.contains("conservation: received 100000 = transmitted 100000"),
        "{stdout}"
    );
    let last = json_lines(&json).pop().unwrap();
    let synth = &last["synth"][0];
    assert_eq!(synth["sent_packets"], 100000);
    assert_eq!(synth["received_packets"], 100000);
    assert_eq!(synth["lost"], 0);
    assert_eq!(synth["reordered"], 0);
    assert_eq!(synth["duplicates"], 0);
    assert_eq!(last["conservation"]["ok"], true);
    assert_eq!(last["conservation"]["unaccounted"], 0);
}

#[test]
fn shaped_synth_run_delivers_about_the_configured_rate() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let (stdout, _) = run_ok(&[
        "--rate",
        "20mbit",
        "--duration",
        "4s",
        "--stats-json",
        &s(&json),
        "--control",
        &s(&ctl_path(dir.path())),
        "--set",
        "ports.synth.rate=\"60mbit\"",
    ]);
    assert!(stdout.contains(": ok"), "{stdout}");
    let lines = json_lines(&json);
    // Interval lines (not the final one) in which the generator really offered more than the
    // rate: on a busy machine a starved generator may not, and then there is nothing to shape.
    let rates: Vec<f64> = lines[1..lines.len() - 1]
        .iter()
        .filter(|l| l["ports"][0]["rx_bps"].as_f64().unwrap() > 30e6)
        .map(|l| l["ports"][1]["tx_bps"].as_f64().unwrap())
        .collect();
    assert!(
        !rates.is_empty(),
        "the generator never offered 1.5x the rate: {lines:?}"
    );
    // Never above the rate (the shaper's promise); about the rate, but a forwarder that
    // loses the CPU to the tests beside it dequeues late and CAKE does not make up for a
    // stall, so the lower bound is generous.
    let max = rates.iter().cloned().fold(0.0, f64::max) / 20e6;
    let mean = rates.iter().sum::<f64>() / rates.len() as f64 / 20e6;
    assert!(max < 1.15, "delivered above the rate: {rates:?}");
    assert!(mean > 0.5, "delivered/configured = {mean} ({rates:?})");
    let last = lines.last().unwrap();
    let drops: u64 = last["drops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(drops > 0, "offered 3x the rate, so CAKE must drop");
    assert_eq!(last["conservation"]["ok"], true);
}

/// Frames of `flows` UDP flows, `per_flow` each, interleaved; payload byte 0..1 = flow, 2..3 = seq.
fn flow_frames(flows: u16, per_flow: u16) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for seq in 0..per_flow {
        for f in 0..flows {
            let mut buf = vec![0u8; 256];
            let len = forwarder::wire::build_udp_frame(
                &mut buf,
                IpAddr::V4(Ipv4Addr::new(198, 18, 0, f as u8)),
                IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)),
                4000 + f,
                5000,
                0,
                0,
                60 + usize::from(seq % 50),
            )
            .expect("fits");
            buf.truncate(len);
            let n = len - 4;
            buf[n..n + 2].copy_from_slice(&f.to_be_bytes());
            buf[n + 2..n + 4].copy_from_slice(&seq.to_be_bytes());
            out.push(buf);
        }
    }
    out
}

#[test]
fn pcap_in_pcap_out_is_byte_identical_and_keeps_per_flow_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let output = dir.path().join("out.pcap");
    let frames = flow_frames(8, 200);
    forwarder::port::pcap::write_pcap(&input, &frames).unwrap();
    let (stdout, _) = run_ok(&[
        "--port-kind",
        "pcap",
        "--input",
        &s(&input),
        "--output",
        &s(&output),
        "--queues",
        "2",
        "--duration",
        "30s",
        "--control",
        &s(&ctl_path(dir.path())),
        "--set",
        "ports.bidirectional=false",
    ]);
    assert!(stdout.contains("stopped: inputs finished"), "{stdout}");
    let back = forwarder::port::pcap::PcapFrames::load(&output).unwrap();
    assert_eq!(back.len(), frames.len(), "{stdout}");
    let mut want = frames.clone();
    let mut got: Vec<Vec<u8>> = (0..back.len()).map(|i| back.frame(i).to_vec()).collect();
    // Per flow (source port), the order is the input order.
    for f in 0..8u16 {
        let pick = |v: &Vec<Vec<u8>>| -> Vec<Vec<u8>> {
            v.iter()
                .filter(|fr| fr[34..36] == (4000 + f).to_be_bytes())
                .cloned()
                .collect()
        };
        assert_eq!(pick(&got), pick(&want), "flow {f} differs or is reordered");
    }
    // And as a whole, the same bytes.
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn a_capture_with_frames_larger_than_the_buffers_says_so_and_what_to_raise() {
    // Jumbo frames in a capture replayed with 2 KiB buffers were skipped with nothing but a
    // pcap_oversize counter in the final report.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let mut frames = flow_frames(1, 3);
    frames.push(vec![0x02; 9000]);
    forwarder::port::pcap::write_pcap(&input, &frames).unwrap();
    let args = [
        "--port-kind",
        "pcap",
        "--input",
        &s(&input),
        "--duration",
        "30s",
        "--control",
        &s(&ctl_path(dir.path())),
    ];
    let (stdout, stderr) = run_ok(&args);
    assert!(
        stderr.contains("1 of the 4 frames in")
            && stderr.contains("raise ports.buffer_size to at least 9000"),
        "{stderr}"
    );
    assert!(stdout.contains("pcap_oversize 1"), "{stdout}");
    let mut bigger = args.to_vec();
    bigger.extend(["--set", "ports.buffer_size=9000"]);
    let (stdout, stderr) = run_ok(&bigger);
    assert!(!stderr.contains("longer than a buffer"), "{stderr}");
    assert!(stdout.contains("port a: rx 4 pkts"), "{stdout}");
}

#[test]
fn a_generator_into_a_capture_reports_no_unverified_losses() {
    // The synth sink verifies delivery; with a pcap port in its place nothing does, and the
    // report used to call every generated frame lost.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcap");
    let (stdout, _) = run_ok(&[
        "--duration",
        "300ms",
        "--rate",
        "100mbit",
        "--set",
        "ports.bidirectional=false",
        "--set",
        "ports.b.kind=\"pcap\"",
        "--output",
        &s(&out),
    ]);
    assert!(!stdout.contains("synth:"), "{stdout}");
    assert!(
        stdout.contains("conservation:") && stdout.contains(": ok"),
        "{stdout}"
    );
    assert!(
        std::fs::metadata(&out).unwrap().len() > 24,
        "frames were written"
    );
}

#[test]
fn sigint_drains_queues_and_exits_zero_with_a_final_report() {
    let dir = tempfile::tempdir().unwrap();
    let child = cakewalk_run()
        .args(["--duration", "0", "--rate", "20mbit", "--control"])
        .arg(ctl_path(dir.path()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = wait_bounded(child, Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "exit {}: {stdout}", out.status);
    assert!(stdout.contains("stopped: signal"), "{stdout}");
    assert!(stdout.contains("cakewalk final report"), "{stdout}");
    assert!(stdout.contains("conservation: received"), "{stdout}");
    assert!(stdout.contains(": ok"), "{stdout}");
}

fn wait_bounded(mut child: std::process::Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("cakewalk did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn control_socket_set_rate_changes_the_rate_and_counters_still_conserve() {
    let dir = tempfile::tempdir().unwrap();
    let sock = ctl_path(dir.path());
    let json = dir.path().join("stats.json");
    let child = cakewalk_run()
        .args(["--duration", "8s", "--rate", "20mbit", "--control"])
        .arg(&sock)
        .arg("--stats-json")
        .arg(&json)
        .args(["--set", "ports.synth.rate=\"100mbit\""])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !sock.exists() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(2000));
    let reply = forwarder::control::client::send(&sock, "set rate 60mbit").unwrap();
    assert!(reply.starts_with("ok"), "{reply}");
    let reply = forwarder::control::client::send(&sock, "set overhead 18").unwrap();
    assert!(reply.starts_with("ok"), "{reply}");
    let reply = forwarder::control::client::send(&sock, "set diffserv diffserv4").unwrap();
    assert!(reply.starts_with("ok"), "{reply}");
    let reply = forwarder::control::client::send(&sock, "set diffserv sideways").unwrap();
    assert!(reply.starts_with("error"), "{reply}");
    let stats = forwarder::control::client::send(&sock, "stats json").unwrap();
    assert!(stats.contains("\"conservation\""), "{stats}");
    let out = wait_bounded(child, Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let lines = json_lines(&json);
    let rate_at = |l: &Value| l["queues"][1]["rate_bps"].as_u64().unwrap();
    let tx_at = |l: &Value| l["ports"][1]["tx_bps"].as_f64().unwrap();
    assert_eq!(rate_at(&lines[0]), 20_000_000);
    assert_eq!(rate_at(lines.last().unwrap()), 60_000_000);
    let tins = lines.last().unwrap()["queues"][1]["tins"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(tins, 4, "diffserv4 applied live");
    // At 20 Mbit no interval can deliver much more than 20 Mbit; once the rate is 60 Mbit
    // (offered 100 Mbit) an interval well above it shows the new rate is in force. Ratios of
    // the same run, with a generous margin for a busy machine.
    let before_max = lines
        .iter()
        .filter(|l| rate_at(l) == 20_000_000)
        .map(tx_at)
        .fold(0.0, f64::max);
    let after_max = lines[..lines.len() - 1]
        .iter()
        .filter(|l| rate_at(l) == 60_000_000)
        .map(tx_at)
        .fold(0.0, f64::max);
    assert!(
        before_max < 20e6 * 1.2,
        "shaped at 20 Mbit but delivered {before_max}"
    );
    assert!(
        after_max > 20e6 * 1.5,
        "after 'set rate 60mbit' at most {after_max} bit/s"
    );
    assert_eq!(lines.last().unwrap()["conservation"]["ok"], true);
}

#[test]
fn the_default_run_command_needs_no_config_and_stops_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, stderr) = run_ok(&["--duration", "2s", "--control", &s(&ctl_path(dir.path()))]);
    assert!(stdout.contains("stopped: duration reached"), "{stdout}");
    assert!(stdout.contains("tin "), "CAKE tins in the report: {stdout}");
    assert!(
        stderr.contains("[   1.0s]"),
        "live view on stderr: {stderr}"
    );
}

#[test]
fn two_workers_and_two_queues_per_port_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let (stdout, _) = run_ok(&[
        "--workers",
        "2",
        "--queues",
        "2",
        "--duration",
        "30s",
        "--stats-json",
        &s(&json),
        "--control",
        &s(&ctl_path(dir.path())),
        "--set",
        "engine.drain_timeout=\"20s\"",
        "--set",
        "ports.synth.ecn=true",
        "--set",
        "ports.synth.packets=50000",
        "--set",
        "ports.synth.rate=\"100mbit\"",
    ]);
    assert!(stdout.contains("stopped: inputs finished"), "{stdout}");
    let last = json_lines(&json).pop().unwrap();
    let synth = &last["synth"][0];
    assert_eq!(synth["received_packets"], 50000, "{stdout}");
    assert_eq!(synth["lost"], 0);
    assert_eq!(synth["reordered"], 0);
    assert_eq!(last["conservation"]["ok"], true);
}

#[test]
fn ipv6_and_a_dscp_mix_reach_the_matching_diffserv4_tins() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let (stdout, _) = run_ok(&[
        "--diffserv",
        "diffserv4",
        "--duration",
        "30s",
        "--stats-json",
        &s(&json),
        "--control",
        &s(&ctl_path(dir.path())),
        "--set",
        "engine.drain_timeout=\"20s\"",
        "--set",
        "ports.synth.ecn=true",
        "--set",
        "ports.synth.packets=20000",
        "--set",
        "ports.synth.ip=\"mixed\"",
        "--set",
        "ports.synth.dscp=\"0:4,ef:2,cs1:1,af41:1\"",
        "--set",
        "ports.synth.rate=\"100mbit\"",
    ]);
    let last = json_lines(&json).pop().unwrap();
    assert_eq!(last["synth"][0]["lost"], 0, "{stdout}");
    let tins = last["queues"][1]["tins"].as_array().unwrap();
    assert_eq!(tins.len(), 4, "{tins:?}");
    for t in tins {
        assert!(
            t["sent_packets"].as_u64().unwrap() > 0,
            "tin {t} got nothing"
        );
    }
}

#[test]
fn prometheus_endpoint_serves_cakewalk_metrics_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let child = cakewalk_run()
        .args(["--duration", "4s", "--prometheus", &addr, "--control"])
        .arg(ctl_path(dir.path()))
        .args(["--set", "ports.synth.rate=\"50mbit\""])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2200));
    let mut body = String::new();
    for _ in 0..20 {
        if let Ok(mut c) = std::net::TcpStream::connect(&addr) {
            use std::io::{Read, Write};
            c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            c.read_to_string(&mut body).unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = wait_bounded(child, Duration::from_secs(30));
    assert!(out.status.success());
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    assert!(
        body.contains("cakewalk_rx_packets_total{port=\"a\"}"),
        "{body}"
    );
    assert!(
        body.contains("cakewalk_drops_total{port=\"b\",queue=\"0\",reason=\"aqm\"}"),
        "{body}"
    );
    assert!(body.contains("cakewalk_conservation_ok 1"), "{body}");
    assert!(
        body.contains("cakewalk_conservation_unaccounted_packets "),
        "{body}"
    );
}

#[test]
fn a_non_loopback_prometheus_address_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = cakewalk_run()
        .args([
            "--duration",
            "1s",
            "--prometheus",
            "0.0.0.0:9187",
            "--control",
        ])
        .arg(ctl_path(dir.path()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not loopback") && err.contains("prometheus_public"),
        "{err}"
    );
}

/// DPDK null vdevs on both ports (root, built with `--features dpdk`); run by
/// `scripts/test dpdk`.
#[cfg(feature = "dpdk")]
#[test]
#[ignore = "needs root and libdpdk; run with --include-ignored"]
fn dpdk_null_ports_forward_through_cake_with_conservation() {
    if !std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
    {
        forwarder::testing::skip("not root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("--file-prefix=cwfwd{}", std::process::id());
    let eal = format!(
        "ports.eal_args=[\"--no-huge\",\"-m\",\"1024\",\"--no-pci\",\"--vdev=net_null0\",\"--vdev=net_null1\",\"{prefix}\"]"
    );
    let (stdout, _) = run_ok(&[
        "--port-kind",
        "dpdk",
        "--iface",
        "net_null0,net_null1",
        "--duration",
        "2s",
        "--control",
        &s(&ctl_path(dir.path())),
        "--set",
        &eal,
    ]);
    assert!(stdout.contains("port a: rx "), "{stdout}");
    assert!(stdout.contains(": ok"), "{stdout}");
}

/// Workers of DPDK ports run on EAL's worker lcores and the main lcore supervises; a layout
/// that puts a worker on the supervisor's CPU is a warning with the fix (root, built with
/// `--features dpdk`; run by `scripts/test dpdk`).
#[cfg(feature = "dpdk")]
#[test]
#[ignore = "needs root and libdpdk; run with --include-ignored"]
fn dpdk_workers_run_on_the_eal_worker_lcores_and_a_shared_core_is_a_warning() {
    if !std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
    {
        forwarder::testing::skip("not root");
        return;
    }
    let two_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let run = |lcores: &str| -> String {
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("--file-prefix=cwlc{}", std::process::id());
        let eal = format!(
            "ports.eal_args=[\"--no-huge\",\"-m\",\"512\",\"--no-pci\",\"--vdev=net_null0\",\"--vdev=net_null1\",\"{prefix}\",{lcores}]"
        );
        // Pinned (the other tests here run unpinned): the placement is what is tested.
        let out = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
            .args([
                "run",
                "--port-kind",
                "dpdk",
                "--iface",
                "net_null0,net_null1",
            ])
            .args(["--duration", "1s", "--control", &s(&ctl_path(dir.path()))])
            .args(["--set", &eal])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{lcores}: {stderr}");
        stderr
    };
    if two_cpus {
        let err = run("\"-l\",\"0-1\"");
        assert!(
            err.contains("main lcore 0 (CPU 0) supervises; worker 0 on lcore 1 (CPU 1)"),
            "{err}"
        );
        assert!(!err.contains("shares"), "{err}");
    }
    let err = run("\"-l\",\"0\"");
    assert!(
        err.contains("gives no worker lcore") && err.contains("--eal '-l 0,N'"),
        "{err}"
    );
    let err = run("\"--lcores\",\"0@0,1@0\"");
    assert!(
        err.contains("worker 0 on lcore 1 (CPU 0)")
            && err.contains("worker 0 (lcore 1) shares CPU 0 with the main lcore 0"),
        "{err}"
    );
}

#[test]
fn before_the_first_interval_ctl_stats_answers_with_a_report_built_when_asked() {
    // The JSON form used to be a bare `{}`, which a dashboard read as a report of nothing;
    // then a "no report yet" until the first interval. A report is now built when asked.
    let dir = tempfile::tempdir().unwrap();
    let sock = ctl_path(dir.path());
    let mut child = cakewalk_run()
        .args(["--duration", "20s", "--control", &s(&sock)])
        .args(["--rate", "10mbit", "--set", "stats.interval=\"30s\""])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary runs");
    let ctl = |args: &[&str]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
            .args(["ctl", "--socket", &s(&sock), "stats"])
            .args(args)
            .output()
            .expect("ctl runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let start = Instant::now();
    let mut v = Value::Null;
    let mut json = String::new();
    while start.elapsed() < Duration::from_secs(15) {
        json = ctl(&["--json"]);
        // Between the socket and the engine's start the answer is still "no report yet".
        v = serde_json::from_str(json.trim()).unwrap_or(Value::Null);
        if v["queues"].is_array() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = ctl(&[]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(v["queues"].is_array(), "{json}");
    assert!(v["elapsed_s"].as_f64().unwrap() < 30.0, "{json}");
    assert_eq!(v["queues"][0]["rate_bps"], 10_000_000, "{json}");
    assert!(text.contains("conservation"), "{text}");
}

#[test]
fn the_readme_demo_paces_the_generator_and_says_which_drops_are_the_shapers_job() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let (stdout, stderr) = run_ok(&[
        "--rate",
        "200mbit",
        "--diffserv",
        "diffserv4",
        "--overhead",
        "ethernet",
        "--queues",
        "2",
        "--duration",
        "2s",
        "--stats-json",
        &s(&json),
        "--control",
        "off",
    ]);
    assert!(
        stderr.contains("generator: offering 400mbit per generating port, 2x the shaped rate"),
        "{stderr}"
    );
    let last = json_lines(&json).pop().unwrap();
    let synth = &last["synth"][0];
    let (sent, lost) = (
        synth["sent_packets"].as_u64().unwrap(),
        synth["lost"].as_u64().unwrap(),
    );
    // Offered at twice the rate, at most about half (plus the Ethernet overhead's share) is
    // dropped; a flood reported more than 90 % "lost".
    assert!(
        sent > 0 && lost * 4 < sent * 3,
        "lost {lost} of {sent}:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("drops: {lost} by the shaper doing its job"))
            && stdout.contains("none elsewhere"),
        "{stdout}"
    );
}

#[test]
fn a_packet_rate_paces_the_generator() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    run_ok(&[
        "--duration",
        "10s",
        "--stats-json",
        &s(&json),
        "--control",
        "off",
        "--set",
        "ports.synth.rate=20kpps",
        "--set",
        "ports.synth.packets=2000",
    ]);
    let last = json_lines(&json).pop().unwrap();
    assert_eq!(last["synth"][0]["received_packets"], 2000);
    // 2000 frames at 20 000 per second take at least 0.1 s (the bucket holds 10 ms).
    let elapsed = last["elapsed_s"].as_f64().unwrap();
    assert!(elapsed >= 0.09, "{elapsed}");
}
