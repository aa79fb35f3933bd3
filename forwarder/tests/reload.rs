//! The deployment example and live reload: `deploy/cakewalk.toml` must load with every key
//! its comments promise, and (once the binary runs) SIGHUP after editing the config must
//! change the rate without losing a queued packet.

use std::path::PathBuf;

use forwarder::config::{Config, Overrides};

fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

#[test]
fn the_deploy_example_config_loads_with_its_documented_values() {
    let path = repo_file("deploy/cakewalk.toml");
    let c = Config::load(Some(&path), &Overrides::default())
        .unwrap_or_else(|e| panic!("deploy/cakewalk.toml: {e}"));
    // A 500/50 cable line: 475 down in ingress mode, 45 up with the ACK filter.
    use forwarder::config::direction::Direction;
    let (down, up) = (
        c.cake_for(Direction::Download),
        c.cake_for(Direction::Upload),
    );
    assert_eq!(down.rate.bits_per_sec(), 475_000_000);
    assert!(down.ingress);
    assert_eq!(down.ack_filter, qdisc::cake::AckFilterMode::Off);
    assert_eq!(up.rate.bits_per_sec(), 45_000_000);
    assert!(!up.ingress);
    assert_eq!(up.ack_filter, qdisc::cake::AckFilterMode::Filter);
    // The download leaves towards the LAN (port a), the upload through the uplink (port b).
    assert_eq!(c.cake_for_egress(0), down);
    assert_eq!(c.cake_for_egress(1), up);
    for cake in [&down, &up] {
        // docsis = 18 bytes of overhead, mpu 64 (tc-cake(8) keywords), in both directions.
        assert_eq!((cake.overhead, cake.mpu, cake.raw), (18, 64, false));
    }
    assert_eq!(c.ports.port_name(0), "lan");
    assert_eq!(c.ports.port_name(1), "wan");
    // A service runs until stopped (the built-in default stops after 10 s).
    assert_eq!(c.engine.duration, "0");
    let stats: forwarder::stats::StatsConfig = toml::Value::Table(c.stats.clone())
        .try_into()
        .unwrap_or_else(|e| panic!("deploy/cakewalk.toml [stats]: {e}"));
    assert_eq!(stats.prometheus.as_deref(), Some("127.0.0.1:9187"));
}

#[test]
fn every_key_in_the_deploy_example_has_a_comment_above_it() {
    let text = std::fs::read_to_string(repo_file("deploy/cakewalk.toml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with('[') {
            continue;
        }
        let key = t.split('=').next().unwrap_or("").trim();
        // A key continues a commented block, or sits in a table whose first key is explained.
        let commented = lines[..i]
            .iter()
            .rev()
            .take_while(|l| !l.trim().is_empty())
            .any(|l| l.trim().starts_with('#'));
        let same_as_port_a =
            ["name", "kind", "iface", "rx_queues"].contains(&key) && text.contains("[ports.a]");
        assert!(
            commented || same_as_port_a,
            "key '{key}' (line {}) has no comment",
            i + 1
        );
    }
}

fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits for `child` at most `limit` (then kills it) and returns its output.
fn wait_bounded(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> std::process::Output {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("cakewalk did not exit within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn sighup_after_editing_the_config_changes_the_rate_live_and_conserves_every_packet() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("cakewalk.toml");
    let sock = dir.path().join("ctl.sock");
    let json = dir.path().join("stats.json");
    let write_conf = |rate: &str, pool: u32| {
        std::fs::write(
            &conf,
            format!(
                "[shaper]\nrate = \"{rate}\"\n[ports]\npool_buffers = {pool}\n\
                 [ports.synth]\nrate = \"100mbit\"\n"
            ),
        )
        .unwrap();
    };
    write_conf("20mbit", 16384);
    // Runs until SIGTERM; every wait below is on progress (stats lines), bounded in time.
    let child = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .arg("run")
        .arg("--config")
        .arg(&conf)
        .args(["--duration", "0", "--control"])
        .arg(&sock)
        .arg("--stats-json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let rate_at = |l: &serde_json::Value| l["queues"][1]["rate_bps"].as_u64().unwrap_or(0);
    let wait_for = |what: &str, ok: &dyn Fn(&[serde_json::Value]) -> bool| {
        let start = Instant::now();
        while !ok(&json_lines(&json)) {
            if start.elapsed() > Duration::from_secs(40) {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                panic!("timed out waiting for {what}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for("3 stats intervals at 20mbit", &|l| {
        l.iter().filter(|l| rate_at(l) == 20_000_000).count() >= 3
    });
    // A live change (rate) and a restart-only one (pool size) in the same edit.
    write_conf("60mbit", 8192);
    let kill = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(kill.success());
    wait_for("3 stats intervals at 60mbit", &|l| {
        l.iter().filter(|l| rate_at(l) == 60_000_000).count() >= 3
    });
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let out = wait_bounded(child, Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "SIGHUP must not stop the forwarder: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("applied live: rate 20Mbit -> 60Mbit")
            || stderr.contains("applied live: rate 20mbit -> 60mbit"),
        "{stderr}"
    );
    assert!(
        stderr.contains("needs a restart") && stderr.contains("ports.pool_buffers"),
        "{stderr}"
    );

    let lines = json_lines(&json);
    let tx_at = |l: &serde_json::Value| l["ports"][1]["tx_bps"].as_f64().unwrap_or(0.0);
    // Skip the first interval at each rate (warm-up and the interval the change fell in).
    let before: Vec<f64> = lines
        .iter()
        .filter(|l| rate_at(l) == 20_000_000)
        .skip(1)
        .map(tx_at)
        .collect();
    let after: Vec<f64> = lines[..lines.len().saturating_sub(1)]
        .iter()
        .filter(|l| rate_at(l) == 60_000_000)
        .skip(1)
        .map(tx_at)
        .collect();
    assert!(
        !before.is_empty() && !after.is_empty(),
        "before {before:?} after {after:?}"
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ratio = mean(&after) / mean(&before);
    assert!(
        (2.0..4.0).contains(&ratio),
        "delivered rate after/before SIGHUP = {ratio} ({before:?} -> {after:?})"
    );
    // Nothing queued was lost across the change: received = sent + dropped (by reason) + queued.
    let last = lines.last().unwrap();
    assert_eq!(last["final_report"], true);
    assert_eq!(last["conservation"]["ok"], true, "{}", last["conservation"]);
    assert!(stdout.contains("conservation"), "{stdout}");
}

#[test]
fn sighup_with_a_broken_config_keeps_running_on_the_old_one() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("cakewalk.toml");
    let sock = dir.path().join("ctl.sock");
    std::fs::write(&conf, "[shaper]\nrate = \"50mbit\"\n").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .arg("run")
        .arg("--config")
        .arg(&conf)
        .args(["--duration", "3s", "--control"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let start = Instant::now();
    while !sock.exists() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&conf, "[shaper]\nrate = \"2gbps\"\n").unwrap();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let out = wait_bounded(child, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("shaper.rate") && stderr.contains("keeping the running configuration"),
        "{stderr}"
    );
}

#[test]
fn the_docs_and_dashboard_name_only_metrics_the_endpoint_serves() {
    let source = std::fs::read_to_string(repo_file("forwarder/src/stats/prometheus.rs")).unwrap();
    let names = |text: &str| -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut rest = text;
        while let Some(i) = rest.find("cakewalk_") {
            let tail = &rest[i + "cakewalk_".len()..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            if end > 0 {
                out.insert(tail[..end].to_string());
            }
            rest = &tail[end..];
        }
        out
    };
    let served = names(&source);
    for doc in ["docs/metrics.md", "docs/grafana-dashboard.json"] {
        let text = std::fs::read_to_string(repo_file(doc)).unwrap();
        for n in names(&text) {
            // A histogram's samples are its name with these suffixes.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s).filter(|f| served.contains(*f)))
                .unwrap_or(&n);
            // `{name}` in the HELP template is not a metric.
            assert!(
                served.contains(family) || n == "{name}",
                "{doc} names cakewalk_{n}, which forwarder/src/stats/prometheus.rs does not serve"
            );
        }
    }
    let doc = std::fs::read_to_string(repo_file("docs/metrics.md")).unwrap();
    for n in &served {
        assert!(
            doc.contains(&format!("cakewalk_{n}")) || n.is_empty(),
            "docs/metrics.md does not describe cakewalk_{n}"
        );
    }
}
