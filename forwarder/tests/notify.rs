//! The real binary under systemd's notify protocol, with `NOTIFY_SOCKET` pointing at a socket
//! this test reads: `READY=1` once forwarding, `WATCHDOG=1` pings while every worker advances
//! and none while a worker is stuck in a port call (the test hook `CAKEWALK_TEST_STALL_RX`
//! makes port A's receive queue hang once), and `STOPPING=1` on SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn notify_socket_gets_ready_watchdog_pings_only_while_workers_advance_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // WATCHDOG_PID must be the forwarder's own pid, as systemd sets it: the shell's, kept
    // by exec.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_cakewalk"))
        .args(["run", "--set", "engine.pin=false", "--duration", "60s"])
        .args(["--control", "off", "--rate", "20mbit"])
        .args(["--set", "ports.synth.rate=\"40mbit\""])
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "200000")
        .env("CAKEWALK_TEST_STALL_RX", "1000:1500")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut messages: Vec<String> = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut sent_term = false;
    let started = Instant::now();
    // Bounded: 60 s at most, whatever happens.
    while started.elapsed() < Duration::from_secs(60) {
        if let Ok(n) = sock.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).to_string());
        }
        let resumed = messages.iter().any(|m| m.contains("advance again"));
        let pinged_after = resumed
            && messages
                .iter()
                .skip_while(|m| !m.contains("advance again"))
                .any(|m| m.contains("WATCHDOG=1"));
        if pinged_after && !sent_term {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            sent_term = true;
        }
        if sent_term && child.try_wait().unwrap().is_some() {
            // Whatever is still in the socket.
            sock.set_nonblocking(true).unwrap();
            while let Ok(n) = sock.recv(&mut buf) {
                messages.push(String::from_utf8_lossy(&buf[..n]).to_string());
            }
            break;
        }
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = messages.join("\n---\n");
    assert!(
        sent_term,
        "never saw the stall and the pings resume:\n{all}\n{stderr}"
    );
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    let first = |what: &str| messages.iter().position(|m| m.contains(what));
    let ready = first("READY=1").expect("READY=1 sent");
    let stall = first("worker(s) [0] made no progress").expect("the stall reported");
    let stopping = first("STOPPING=1").expect("STOPPING=1 sent");
    assert!(ready < stall && stall < stopping, "{all}");
    assert!(
        messages[ready..stall]
            .iter()
            .any(|m| m.contains("WATCHDOG=1")),
        "pings before the stall:\n{all}"
    );
    // Between every stall report and the report that the workers advance again, no ping:
    // ordering only, no clock.
    let mut withheld = false;
    for m in &messages {
        if m.contains("made no progress") {
            withheld = true;
        } else if m.contains("advance again") {
            withheld = false;
        } else if withheld {
            assert!(
                !m.contains("WATCHDOG=1"),
                "a ping while a worker was stuck:\n{all}"
            );
        }
    }
    assert!(
        messages.iter().any(|m| m.contains("STATUS=[")),
        "the live line as STATUS:\n{all}"
    );
    assert!(stderr.contains("made no progress"), "{stderr}");
}
