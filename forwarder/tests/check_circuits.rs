//! `cakewalk check-circuits` run as an operator would: LibreQoS's files and the TOML form,
//! a clean set with its summary, and broken files whose every problem is named by file and
//! line with exit status 1.

use std::path::Path;
use std::process::{Command, Output};

fn cakewalk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .args(args)
        .output()
        .expect("the cakewalk binary runs")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("temp file is writable");
    p.display().to_string()
}

const HEADER: &str = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment,sqm\n";

const NETWORK: &str = r#"{
  "Site_1": {
    "downloadBandwidthMbps": 1000,
    "uploadBandwidthMbps": 500,
    "children": {
      "AP_A": { "downloadBandwidthMbps": 100, "uploadBandwidthMbps": 50 }
    }
  }
}
"#;

#[test]
fn libreqos_files_are_summarised_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write(
        dir.path(),
        "ShapedDevices.csv",
        &format!(
            "{HEADER}1,One,1,cpe,AP_A,,\"100.64.0.1, 100.64.0.8/29\",2001:db8::/56,10,2,80,20,,cake diffserv4\n\
             1,One,2,router,AP_A,02:00:00:00:00:02,100.64.0.2,,10,2,80,20,,cake diffserv4\n\
             2,Two,3,cpe,Site_1,,100.64.0.3,,,,50,10,,none\n"
        ),
    );
    let net = write(dir.path(), "network.json", NETWORK);
    let o = cakewalk(&["check-circuits", &net, &csv]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for line in [
        "circuit files are valid",
        "circuits: 2  devices: 3  prefixes: 4 IPv4, 1 IPv6  nodes: 2",
        "plans: download 130 Mbit/s, upload 30 Mbit/s in total",
        "  Site_1: 2 circuits; download 130 Mbit/s of 1 Gbit/s (0.1x); upload 30 Mbit/s of 500 Mbit/s (0.1x)",
        "    AP_A: 1 circuits; download 80 Mbit/s of 100 Mbit/s (0.8x); upload 20 Mbit/s of 50 Mbit/s (0.4x)",
        "prefix table: ",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

#[test]
fn every_problem_is_named_by_file_and_line_and_nothing_loads() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write(
        dir.path(),
        "ShapedDevices.csv",
        &format!(
            "{HEADER}1,One,1,cpe,AP_A,,100.64.0.0/29,,,,80,20,,\n\
             2,Two,2,cpe,AP_Z,,100.64.0.3,,90,,80,20,,\n\
             3,Three,3,cpe,,,,,,,80,20,,\n\
             4,Four,4,cpe,,,100.64.0.300,,,,80,20,,\n"
        ),
    );
    let net = write(dir.path(), "network.json", NETWORK);
    let o = cakewalk(&["check-circuits", &csv, &net]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "ShapedDevices.csv:5: error: IPv4: `100.64.0.300` is not an IPv4 or IPv6 address",
        "ShapedDevices.csv:3: error: circuit `2`: download min 90 Mbit/s is above its max 80 Mbit/s",
        "ShapedDevices.csv:3: error: circuit `2`: parent node `AP_Z` is not in the network file",
        "ShapedDevices.csv:4: error: circuit `3` has no address",
        "ShapedDevices.csv:3: error: 100.64.0.3/32 of circuit `2` lies inside 100.64.0.0/29 of circuit `1`",
        "problem(s) in the circuit files; nothing loaded",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert!(o.stdout.is_empty());
}

#[test]
fn the_toml_form_loads_and_unknown_file_kinds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let toml = write(
        dir.path(),
        "circuits.toml",
        "[[circuit]]\nid = \"alice\"\ndownload_mbps = 100\nupload_mbps = 20\naddresses = [\"192.0.2.1\", \"2001:db8:1::/56\"]\n",
    );
    let o = cakewalk(&["check-circuits", &toml]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains("circuits: 1  devices: 1  prefixes: 1 IPv4, 1 IPv6  nodes: 0"));
    let other = write(dir.path(), "circuits.txt", "");
    let o = cakewalk(&["check-circuits", &other]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("name a .csv (ShapedDevices), .json (network.json) or .toml file"));
}

#[test]
fn check_config_reads_the_circuit_files_relative_to_itself_and_sums_each_direction() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "ShapedDevices.csv",
        &format!(
            "{HEADER}1,One,1,cpe,AP_A,,100.64.0.1,,,,80,20,,cake diffserv4\n\
             2,Two,2,cpe,Site_1,,100.64.0.2,,,,50,10,,none\n"
        ),
    );
    write(dir.path(), "network.json", NETWORK);
    let cfg = write(
        dir.path(),
        "cakewalk.toml",
        "[shaper]\nrate = \"1gbit\"\n[shaper.upload]\nrate = \"100mbit\"\n\
         [circuits]\nfiles = [\"ShapedDevices.csv\", \"network.json\"]\nunmatched = \"10mbit/2mbit\"\n",
    );
    // From another directory: the files are found beside the config.
    let o = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .args(["check-config", &cfg])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for line in [
        "# circuits: 2 from ShapedDevices.csv, network.json: 2 devices, 2 prefixes, 2 nodes;",
        "unmatched traffic: one shared circuit at 10mbit/2mbit",
        "# download: 2 circuits, plans 130 Mbit/s in total (0.1x the link's 1gbit); queues: 1",
        "# upload: 2 circuits, plans 30 Mbit/s in total (0.3x the link's 100mbit); queues: 1",
        "[circuits]\nfiles = [\"ShapedDevices.csv\", \"network.json\"]\nunmatched = \"10mbit/2mbit\"",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

#[test]
fn check_config_refuses_bad_circuit_files_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "d.csv",
        &format!("{HEADER}1,One,1,cpe,,,100.64.0.1,,,,80,20,,\n2,Two,2,cpe,,,100.64.0.300,,,,fast,10,,\n"),
    );
    let cfg = write(dir.path(), "c.toml", "[circuits]\nfiles = [\"d.csv\"]\n");
    let o = cakewalk(&["check-config", &cfg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("d.csv:3: error:"), "{err}");
    assert!(err.contains("`fast` is not a rate in Mbps"), "{err}");
    let missing = write(
        dir.path(),
        "m.toml",
        "[circuits]\nfiles = [\"nowhere.csv\"]\n",
    );
    let o = cakewalk(&["check-config", &missing]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot read circuit file 'nowhere.csv'"),
        "{err}"
    );
    let fifo = write(
        dir.path(),
        "f.toml",
        "[shaper]\nqueue = \"fifo\"\n[circuits]\nfiles = [\"d.csv\"]\n",
    );
    let o = cakewalk(&["check-config", &fifo]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("circuits.files: circuits are shaped by CAKE"),
        "{err}"
    );
    let bad = write(
        dir.path(),
        "u.toml",
        "[circuits]\nfiles = [\"d.csv\"]\nunmatched = \"fast\"\n",
    );
    let o = cakewalk(&["check-config", &bad]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("circuits.unmatched: "), "{err}");
}

/// Site_1 > {AP_A, AP_B}; a circuit on each AP and one without a parent.
fn split_network(dir: &Path) -> (String, String) {
    let net = write(
        dir,
        "network.json",
        r#"{ "Site_1": { "downloadBandwidthMbps": 1000, "uploadBandwidthMbps": 500, "children": {
               "AP_A": { "downloadBandwidthMbps": 100, "uploadBandwidthMbps": 50 },
               "AP_B": { "downloadBandwidthMbps": 100, "uploadBandwidthMbps": 50 } } } }"#,
    );
    let csv = write(
        dir,
        "ShapedDevices.csv",
        &format!(
            "{HEADER}1,One,1,cpe,AP_A,,100.64.0.1,,,,80,20,,\n\
             2,Two,2,cpe,AP_B,,100.64.0.2,,,,50,10,,\n\
             3,Three,3,cpe,,,100.64.0.3,,,,10,5,,\n"
        ),
    );
    (net, csv)
}

#[test]
fn serve_node_shows_what_one_box_carries() {
    let dir = tempfile::tempdir().unwrap();
    let (net, csv) = split_network(dir.path());
    let o = cakewalk(&["check-circuits", &net, &csv, "--serve-node", "AP_B"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("serving AP_B: 1 of 3 circuits, 2 of 3 nodes"),
        "{out}"
    );
    assert!(out.contains("circuits: 1  devices: 1"), "{out}");
    assert!(out.contains("AP_B: 1 circuits"), "{out}");
    assert!(!out.contains("AP_A"), "{out}");
    let o = cakewalk(&[
        "check-circuits",
        &net,
        &csv,
        "--serve-node",
        "AP_A",
        "--serve-node",
        "(root)",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("2 of 3 circuits"), "{out}");
    let o = cakewalk(&["check-circuits", &net, &csv, "--serve-node", "ap_b"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("`ap_b`, which is not a node") && err.contains("did you mean `AP_B`"),
        "{err}"
    );
}

#[test]
fn check_config_loads_only_the_served_nodes() {
    let dir = tempfile::tempdir().unwrap();
    split_network(dir.path());
    let cfg = write(
        dir.path(),
        "c.toml",
        "[circuits]\nfiles = [\"network.json\", \"ShapedDevices.csv\"]\nserve_nodes = [\"AP_A\"]\n",
    );
    let o = cakewalk(&["check-config", &cfg]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("# circuits: 1 from"), "{out}");
    assert!(out.contains("serve_nodes = [\"AP_A\"]"), "{out}");
    let bad = write(
        dir.path(),
        "b.toml",
        "[circuits]\nfiles = [\"network.json\", \"ShapedDevices.csv\"]\nserve_nodes = [\"AP_C\"]\n",
    );
    let o = cakewalk(&["check-config", &bad]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("circuits.serve_nodes: serve_nodes names `AP_C`"),
        "{err}"
    );
    assert!(err.contains("did you mean `AP_A`, `AP_B`"), "{err}");
}
