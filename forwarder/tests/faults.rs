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

#[allow(dead_code)]
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
