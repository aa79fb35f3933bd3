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
    assert_eq!(c.shaper.cake.rate.bits_per_sec(), 45_000_000);
    // docsis = 18 bytes of overhead, mpu 64 (cake-spec.md, tc keywords).
    assert_eq!(c.shaper.cake.overhead, 18);
    assert_eq!(c.shaper.cake.mpu, 64);
    assert!(!c.shaper.cake.raw);
    assert_eq!(c.ports.port_name(0), "lan");
    assert_eq!(c.ports.port_name(1), "wan");
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
