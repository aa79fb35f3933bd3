//! Faults a hostile operator, client or disk can cause, each tried on the real `cakewalk`
//! binary: inputs that make no progress, stuck control clients, outputs that cannot be
//! written, sizes without bounds. Every run is bounded by a duration and a kill deadline;
//! timings are compared side by side as ratios or against the configured drain timeout,
//! never against a wall-clock threshold of their own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `cakewalk run`, unpinned (tests run side by side).
fn cakewalk_run() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cakewalk"));
    c.args(["run", "--set", "engine.pin=false"]);
    c
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn spawn(mut c: Command) -> Child {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

/// Waits for `child`; kills it and fails when it is still running after `limit` (a hang
/// guard far above any expected run time, not a speed check).
fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "cakewalk did not exit within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn ctl_path(dir: &Path) -> PathBuf {
    dir.join("ctl.sock")
}

#[test]
fn a_looped_capture_with_no_frame_that_fits_a_buffer_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.pcap");
    forwarder::port::pcap::write_pcap(&input, &[vec![0x45; 3000]]).unwrap();
    let mut c = cakewalk_run();
    c.args(["--port-kind", "pcap", "--input", &s(&input)])
        .args([
            "--set",
            "ports.loop=true",
            "--duration",
            "2s",
            "--control",
            "off",
        ]);
    let out = wait_bounded(spawn(c), Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("would send nothing, ever")
            && stderr.contains("--set ports.buffer_size=3000"),
        "{stderr}"
    );
}

#[test]
fn a_looped_capture_of_mostly_oversize_frames_stops_at_its_duration() {
    // One frame in a thousand fits: the replay makes progress, slowly, and must still stop.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mostly-big.pcap");
    let mut frames = vec![vec![0x45; 3000]; 999];
    frames.push(vec![0x45; 100]);
    forwarder::port::pcap::write_pcap(&input, &frames).unwrap();
    let mut c = cakewalk_run();
    c.args(["--port-kind", "pcap", "--input", &s(&input)])
        .args([
            "--set",
            "ports.loop=true",
            "--duration",
            "1s",
            "--control",
            "off",
        ]);
    let out = wait_bounded(spawn(c), Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("stopped: duration reached"), "{stdout}");
}

fn wait_for_socket(sock: &Path) {
    let start = Instant::now();
    while !sock.exists() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sock.exists(), "the control socket never appeared");
}

/// `cakewalk ctl --socket SOCK ARGS...`: exit status and stdout + stderr.
fn ctl(sock: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .args(["ctl", "--socket", &s(sock)])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ctl runs");
    (
        out.status.success(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// Clients that misbehave on the control socket: one pipelines 5000 `stats json` and never
/// reads a reply, 50 more connect and say nothing. Held open until dropped.
struct StuckClients {
    _idle: Vec<std::os::unix::net::UnixStream>,
    _pipelining: std::thread::JoinHandle<()>,
}

fn stuck_clients(sock: &Path) -> StuckClients {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let mut p = UnixStream::connect(sock).unwrap();
    let pipelining = std::thread::spawn(move || {
        let _ = p.set_write_timeout(Some(Duration::from_secs(60)));
        let _ = p.write_all("stats json\n".repeat(5000).as_bytes());
        // Never reads; keeps the connection open for as long as the test might need it.
        std::thread::sleep(Duration::from_secs(120));
        drop(p);
    });
    // Let the server start replying (and fill the socket) before the idle ones arrive.
    std::thread::sleep(Duration::from_millis(300));
    let idle = (0..50)
        .map(|_| UnixStream::connect(sock).unwrap())
        .collect();
    StuckClients {
        _idle: idle,
        _pipelining: pipelining,
    }
}

/// Seconds from spawn to exit of a 3 s shaped run with a control socket, with or without
/// stuck clients; with them, checks that `ctl set rate` and `ctl stats` still answer.
fn timed_run_with_control(dir: &Path, with_stuck_clients: bool) -> f64 {
    let sock = dir.join(if with_stuck_clients {
        "stuck.sock"
    } else {
        "quiet.sock"
    });
    let mut c = cakewalk_run();
    c.args([
        "--duration",
        "3s",
        "--rate",
        "20mbit",
        "--control",
        &s(&sock),
    ])
    .args(["--set", "engine.drain_timeout=\"1s\""]);
    let start = Instant::now();
    let child = spawn(c);
    wait_for_socket(&sock);
    let stuck = with_stuck_clients.then(|| stuck_clients(&sock));
    let (ok, reply) = ctl(&sock, &["set", "rate", "40mbit"]);
    assert!(ok && reply.starts_with("ok rate 40mbit"), "{reply}");
    let (ok, reply) = ctl(&sock, &["stats"]);
    assert!(ok && !reply.starts_with("error"), "{reply}");
    let out = wait_bounded(child, Duration::from_secs(120));
    let took = start.elapsed().as_secs_f64();
    drop(stuck);
    assert!(out.status.success(), "{}", text(&out.stderr));
    took
}

#[test]
fn stuck_control_clients_neither_block_other_clients_nor_delay_the_exit() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = timed_run_with_control(dir.path(), false);
    let stuck = timed_run_with_control(dir.path(), true);
    // Both runs last their 3 s plus start and drain (1 s at most); a stuck client used to
    // hold the exit until it went away.
    assert!(
        stuck < quiet * 1.5 + 1.0,
        "with stuck clients the run took {stuck:.1} s, without {quiet:.1} s"
    );
}

#[test]
fn sigterm_is_not_delayed_by_a_stuck_control_client() {
    let dir = tempfile::tempdir().unwrap();
    let sock = ctl_path(dir.path());
    let mut c = cakewalk_run();
    c.args([
        "--duration",
        "0",
        "--rate",
        "20mbit",
        "--control",
        &s(&sock),
    ])
    .args(["--set", "engine.drain_timeout=\"1s\""]);
    let child = spawn(c);
    wait_for_socket(&sock);
    let _stuck = stuck_clients(&sock);
    std::thread::sleep(Duration::from_millis(500));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // SIGTERM drains for at most drain_timeout (1 s); a generous margin on top for a busy
    // machine, far below the time a stuck client used to hold the exit (for as long as it
    // stayed connected).
    let out = wait_bounded(child, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("stopped: signal"));
}
