//! `cakewalk preflight` and `check-config` against a real kernel, as the systemd unit runs
//! them: each case starts the binary in a network namespace of its own (`unshare --net`) with
//! only the veths it makes, so nothing outside is touched and everything vanishes with the
//! process, pass or fail. Needs root (`scripts/test lab`); prints SKIP otherwise.

use std::path::Path;
use std::process::{Command, Output};

const CONFIG: &str = "[ports.a]\nkind = \"afpacket\"\niface = \"va\"\n[ports.b]\nkind = \"afpacket\"\niface = \"vb\"\n[engine]\nduration = \"1s\"\n";

/// Makes va <-> vb, both up, offloads off on both ends.
const VETHS: &str = "ip link add va type veth peer name vb; ip link set va up; ip link set vb up; \
    ethtool -K va gro off tso off gso off; ethtool -K vb gro off tso off gso off;";

fn can_run() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|eff| eff & (1 << 21) != 0); // CAP_SYS_ADMIN: unshare
    let tools = ["unshare", "ip", "ethtool"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !root || !tools {
        forwarder::testing::skip(
            "needs root and unshare, ip, ethtool; run scripts/test lab as root",
        );
    }
    root && tools
}

/// Runs `setup` then `cakewalk ARGS` in a fresh network namespace.
fn in_namespace(setup: &str, args: &[&str]) -> Output {
    let bin = env!("CARGO_BIN_EXE_cakewalk");
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!("set -e; {setup} exec '{bin}' {}", quoted.join(" "));
    Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &script])
        .output()
        .expect("unshare runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn config(dir: &Path) -> String {
    let p = dir.join("cakewalk.toml");
    std::fs::write(&p, CONFIG).expect("temp dir is writable");
    p.display().to_string()
}

#[test]
#[ignore = "needs root: creates network namespaces and a veth pair"]
fn a_missing_interface_passes_check_config_but_fails_preflight_and_run() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = config(dir.path());
    // The file is fine wherever it is checked, and says it did not look at the machine.
    let o = in_namespace("", &["check-config", &f]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("This machine was not checked"),
        "{}",
        text(&o)
    );
    // The machine has neither interface: preflight, the unit's ExecStartPre, refuses.
    let o = in_namespace("", &["preflight", "--config", &f]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(out.starts_with("preflight checks this machine"), "{out}");
    assert!(
        out.contains("[FAIL] link a: no interface 'va' in this network namespace")
            && out.contains("[FAIL] link b: no interface 'vb'")
            // What this namespace holds, not what the host's /sys lists.
            && out.contains("(interfaces: lo)")
            && out.contains("not ready: 2 check(s) failed"),
        "{out}"
    );
    // And the run itself refuses, naming the interface.
    let o = in_namespace("", &["run", "--config", &f, "--control", "off"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("interface 'va' not found"),
        "{}",
        text(&o)
    );
    // One interface only: still not ready.
    let o = in_namespace(
        "ip link add va type veth peer name vx; ip link set va up; ip link set vx up;",
        &["preflight", "--config", &f],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no interface 'vb'"), "{}", text(&o));
}

#[test]
#[ignore = "needs root: creates network namespaces and a veth pair"]
fn preflight_passes_a_ready_pair_and_names_the_fix_for_gro_and_a_down_link() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = config(dir.path());
    let o = in_namespace(VETHS, &["preflight", "--config", &f]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for line in [
        "[ ok ] capabilities:",
        "[ ok ] link a: 'va' up with carrier, driver veth",
        "[ ok ] mtu b: MTU 1500",
        "[ ok ] offloads a: gro off, lro off, tso off, gso off",
        "[ ok ] ports: ports a ('va') and b ('vb') are two interfaces",
        "[skip] dpdk:",
        "ready: 0 warning(s)",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    let o = in_namespace(
        &format!("{VETHS} ethtool -K vb gro on;"),
        &["preflight", "--config", &f],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("[FAIL] offloads b: gro on 'vb'")
            && out.contains("fix: ethtool -K vb gro off"),
        "{out}"
    );
    let o = in_namespace(
        &format!("{VETHS} ip link set vb mtu 9000; ip link set va down;"),
        &["preflight", "--config", &f],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("[FAIL] link a: 'va' is down") && out.contains("fix: ip link set va up"),
        "{out}"
    );
    assert!(
        out.contains("[FAIL] mtu b: 'vb' has MTU 9000")
            && out.contains("raise ports.buffer_size to 9018"),
        "{out}"
    );
}
