//! The `cakewalk` binary's configuration edges, run as a user would: `check-config` on good
//! and bad files, `explain`, `from-tc` on every tc-testing string, and bad command-line
//! values. Checks exit codes and the text of messages; nothing here forwards packets.

use std::path::Path;
use std::process::{Command, Output};

fn cakewalk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .args(args)
        .output()
        .expect("the cakewalk binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("temp file is writable");
    p.display().to_string()
}

#[test]
fn check_config_prints_the_effective_config_of_a_good_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "good.toml",
        "[shaper]\noptions = \"bandwidth 200mbit diffserv4 triple-isolate ethernet\"\nnat = true\n\n[engine]\nworkers = 2\n",
    );
    let o = cakewalk(&["check-config", &f]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "bandwidth = \"200mbit\"",
        "diffserv = \"diffserv4\"",
        "flow_mode = \"triple-isolate\"",
        "nat = true",
        "overhead = 38",
        "mpu = 84",
        "queue = \"cake\"",
        "sync_interval = \"200us\"",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(out.contains("\n[engine]\nworkers = 2\n"), "{out}");
}

#[test]
fn check_config_names_the_key_and_the_fix_for_a_bad_value() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "bad.toml", "[shaper]\nrate = \"fast\"\n");
    let o = cakewalk(&["check-config", &f]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: shaper.rate: 'fast' is not a rate; try '200mbit'"),
        "{err}"
    );

    let f = write(dir.path(), "gbps.toml", "[shaper]\nbandwidth = \"2gbps\"\n");
    let err = stderr(&cakewalk(&["check-config", &f]));
    assert!(
        err.contains("shaper.bandwidth: '2gbps' is not a rate; try '2gbit' or '250mbyte'"),
        "{err}"
    );
}

#[test]
fn check_config_refuses_unknown_keys_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "typo.toml", "[shaper]\nbandwith = \"10mbit\"\n");
    let o = cakewalk(&["check-config", &f]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("unknown field `bandwith`"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn check_config_of_a_missing_file_names_the_path() {
    let o = cakewalk(&["check-config", "/nonexistent/cakewalk.toml"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot read config file '/nonexistent/cakewalk.toml'"));
}

#[test]
fn command_line_overrides_are_checked_and_win() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.toml", "[shaper]\nbandwidth = \"10mbit\"\n");
    let o = cakewalk(&[
        "check-config",
        &f,
        "--rate",
        "30mbit",
        "--overhead",
        "docsis",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("bandwidth = \"30mbit\""), "{out}");
    assert!(out.contains("overhead = 18"), "{out}");
}

#[test]
fn explain_shows_queue_tin_and_flow() {
    let o = cakewalk(&[
        "explain",
        "--queues",
        "4",
        "tcp 10.0.0.1:1234 > 10.0.0.2:80 dscp ef",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("tx queue:"), "{out}");
    assert!(out.contains("of 4"), "{out}");
    assert!(out.contains("tin:        2 Voice (diffserv3)"), "{out}");
    assert!(out.contains("flow:"), "{out}");
    assert!(out.contains("dscp 46 (EF)"), "{out}");

    let o = cakewalk(&[
        "explain",
        "--diffserv",
        "besteffort",
        "--src",
        "[2001:db8::1]:5000",
        "--dst",
        "[2001:db8::2]:6000",
        "--proto",
        "udp",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("tin:        0"), "{}", stdout(&o));
}

#[test]
fn explain_with_a_bad_spec_says_what_to_write() {
    let o = cakewalk(&["explain", "tcp 10.0.0.1 10.0.0.2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("has no '>'"), "{}", stderr(&o));
    let o = cakewalk(&["explain", "tcp 10.0.0.1 > 10.0.0.2 dscp loud"]);
    assert!(
        stderr(&o).contains("'loud' is not a DSCP"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn explain_answers_as_the_data_path_for_sctp_vlan_and_refuses_a_second_protocol() {
    let o = cakewalk(&["explain", "sctp 10.0.0.1:1 > 10.0.0.2:80 vlan 100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("packet:     sctp 10.0.0.1:1 > 10.0.0.2:80")
            && out.contains("Ipv4 sctp ports 1 > 80")
            && out.contains("behind 1 VLAN tag"),
        "{out}"
    );
    let o = cakewalk(&["explain", "--proto", "udp", "tcp 10.0.0.1:1 > 10.0.0.2:2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("--proto is given as well as a packet spec that names the protocol"),
        "{}",
        stderr(&o)
    );
    let o = cakewalk(&["explain", "--proto", "dccp", "10.0.0.1:1 > 10.0.0.2:2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("dccp ports 1 > 2"), "{}", stdout(&o));
}

#[test]
fn from_tc_refuses_every_non_cake_qdisc_and_keeps_what_it_cannot_convert_in_view() {
    for cmd in [
        "tc qdisc add dev eth0 ingress",
        "tc qdisc add dev eth0 root fq_codel",
        "tc qdisc add dev eth0 root handle 1: htb default 10",
    ] {
        let o = cakewalk(&["from-tc", cmd]);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", stdout(&o));
        assert!(stdout(&o).is_empty(), "{cmd}: {}", stdout(&o));
        assert!(stderr(&o).contains("is not cake"), "{cmd}: {}", stderr(&o));
    }
    let o = cakewalk(&[
        "from-tc",
        "tc qdisc add dev eth0 parent 1:10 cake bandwidth 20mbit ack-filter",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(out.contains("ack_filter = true\n"), "{out}");
    assert!(out.contains("iface = \"eth0\""), "{out}");
    assert!(
        err.starts_with("warning: 'parent 1:10'") && err.contains("hierarchy is lost"),
        "{err}"
    );
}

#[test]
fn the_prometheus_flag_suggests_the_documented_port() {
    let out = stdout(&cakewalk(&["run", "--help"]));
    assert!(
        out.contains("127.0.0.1:9187") && !out.contains("9100"),
        "{out}"
    );
}

/// The option strings of the kernel's tc-testing `qdiscs/cake.json`.
const TC_TESTING: [&str; 17] = [
    "bandwidth 1000",
    "autorate-ingress",
    "rtt 200",
    "besteffort",
    "diffserv8",
    "diffserv4",
    "flowblind",
    "dsthost nat",
    "hosts wash",
    "flowblind no-split-gso",
    "dual-srchost ack-filter",
    "dual-dsthost ack-filter-aggressive",
    "memlimit 10000 ptm",
    "fwmark 8 atm",
    "overhead 128 mpu 256",
    "conservative ingress",
    "mpu 128",
];

#[test]
fn from_tc_converts_every_tc_testing_string_to_a_loadable_config() {
    let dir = tempfile::tempdir().unwrap();
    for (i, options) in TC_TESTING.iter().enumerate() {
        let cmd = format!("tc qdisc add dev dummy0 handle 1: root cake {options}");
        let o = cakewalk(&["from-tc", &cmd]);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        let toml = stdout(&o);
        assert!(toml.contains("[shaper]"), "{toml}");
        let f = write(dir.path(), &format!("tc{i}.toml"), &toml);
        let check = cakewalk(&["check-config", &f]);
        assert!(
            check.status.success(),
            "{cmd} -> {toml}: {}",
            stderr(&check)
        );
    }
    let out = stdout(&cakewalk(&["from-tc", "bandwidth", "1000"]));
    assert!(out.contains("bandwidth = \"1kbit\""), "{out}");
    let out = stdout(&cakewalk(&["from-tc", "rtt 200"]));
    assert!(out.contains("rtt = \"200us\""), "{out}");
}

#[test]
fn from_tc_refuses_invalid_options_clearly() {
    let o = cakewalk(&["from-tc", "bandwidth 10mbit diffserv5"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("unknown cake option 'diffserv5'"), "{err}");
    let o = cakewalk(&["from-tc", "overhead 512"]);
    assert!(
        stderr(&o).contains("valid range is -64 to 256"),
        "{}",
        stderr(&o)
    );
    let o = cakewalk(&["from-tc", "tc qdisc add dev eth0 root fq_codel"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn from_tc_refuses_options_that_would_give_a_config_run_refuses() {
    for options in ["bandwidth 100bit", "target 0"] {
        let o = cakewalk(&["from-tc", options]);
        assert_eq!(o.status.code(), Some(1), "{options}: {}", stdout(&o));
        assert!(stdout(&o).is_empty(), "{options}: {}", stdout(&o));
        assert!(stderr(&o).contains("cakewalk refuses"), "{}", stderr(&o));
    }
}

#[test]
fn bad_command_line_values_exit_2_with_the_fix() {
    let o = cakewalk(&["run", "--rate", "2gbps"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("try '2gbit' or '250mbyte'"),
        "{}",
        stderr(&o)
    );

    let o = cakewalk(&["run", "--queue", "red"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("possible values: cake, fifo"),
        "{}",
        stderr(&o)
    );

    let o = cakewalk(&["run", "--diffserv", "diffserv5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not a diffserv mode"),
        "{}",
        stderr(&o)
    );

    let o = cakewalk(&["run", "--duration", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("'soon' is not a length of time"),
        "{}",
        stderr(&o)
    );

    // A bare number would be tc's microseconds: a run of 10 us is never what was meant.
    let o = cakewalk(&["run", "--duration", "10"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("'10' has no unit; give one, such as '10s'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_pcap_run_without_an_input_file_says_there_is_nothing_to_forward() {
    let o = cakewalk(&["run", "--port-kind", "pcap", "--duration", "1s"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("nothing to forward: port a is a pcap port without an input file; give one with --input FILE"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_with_a_bad_config_stops_before_forwarding() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "bad.toml", "[shaper]\nqueue = \"red\"\n");
    let o = cakewalk(&["run", "--config", &f]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("error: shaper.queue: 'red' is not a queue kind"),
        "{}",
        stderr(&o)
    );
    let o = cakewalk(&["run", "--overhead", "ethernett", "--duration", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--overhead (shaper.overhead): 'ethernett' is not an overhead keyword, did you mean 'ethernet'?"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn from_tc_help_lists_every_option() {
    let o = cakewalk(&["from-tc", "help"]);
    assert!(o.status.success());
    let out = stdout(&o);
    for word in [
        "bandwidth",
        "diffserv8",
        "dual-dsthost",
        "ack-filter-aggressive",
        "pppoe-ptm",
        "mpu",
    ] {
        assert!(out.contains(word), "{word} missing from:\n{out}");
    }
}

#[test]
fn engine_and_port_flags_reach_their_sections() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "empty.toml", "");
    let o = cakewalk(&[
        "check-config",
        &f,
        "--workers",
        "3",
        "--queues",
        "2",
        "--idle",
        "spin",
        "--duration",
        "5s",
        "--port-kind",
        "pcap",
        "--input",
        "in.pcap",
        "--output",
        "out.pcap",
        "--queue",
        "fifo",
        "--set",
        "engine.burst=64",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for want in [
        "workers = 3",
        "tx_queues = 2",
        "burst = 64",
        "idle = \"spin\"",
        "duration = \"5s\"",
        "kind = \"pcap\"",
        "input = \"in.pcap\"",
        "output = \"out.pcap\"",
        "queue = \"fifo\"",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let o = cakewalk(&["check-config", &f, "--set", "engine.workerz=2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("workerz"), "{}", stderr(&o));
}

#[test]
fn autorate_ingress_on_several_tx_queues_is_refused_from_a_file_as_from_tc() {
    // The same reason as `from-tc ... cake_mq autorate-ingress` gives (test below).
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "mq.toml",
        "[shaper]\nautorate_ingress = true\n\n[engine]\ntx_queues = 2\n",
    );
    let o = cakewalk(&["check-config", &f]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("autorate-ingress needs one TX queue")
            && stderr(&o).contains("tx_queues is 2"),
        "{}",
        stderr(&o)
    );
    let o = cakewalk(&["check-config", &f, "--queues", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn from_tc_refuses_autorate_ingress_on_cake_mq() {
    let o = cakewalk(&[
        "from-tc",
        "tc qdisc add dev eth0 root cake_mq autorate-ingress",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not supported by cake_mq")
            && stderr(&o).contains("autorate-ingress needs one TX queue"),
        "{}",
        stderr(&o)
    );
    let o = cakewalk(&[
        "from-tc",
        "tc qdisc add dev eth0 root cake_mq bandwidth 1gbit",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_control_socket_that_cannot_be_created_stops_the_run() {
    // A socket the operator named must exist, or the run must not start quietly without it.
    let o = cakewalk(&[
        "run",
        "--control",
        "/nonexistent-cakewalk-dir/ctl.sock",
        "--duration",
        "1s",
    ]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("/nonexistent-cakewalk-dir/ctl.sock"), "{err}");
    assert!(err.contains("'off'"), "{err}");
}

#[test]
fn an_option_given_twice_is_refused_instead_of_the_last_one_winning() {
    let o = cakewalk(&["explain", "tcp 10.0.0.1:1 > 10.0.0.2:2 dscp ef dscp cs1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("'dscp' is given twice"),
        "{}",
        stderr(&o)
    );
    let o = cakewalk(&[
        "explain",
        "tcp 10.0.0.1:1 > 10.0.0.2:2",
        "--rate",
        "10mbit",
        "--set",
        "shaper.bandwidth=20mbit",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("--rate and --set") && err.contains("give only one"),
        "{err}"
    );
}

#[test]
fn a_run_whose_log_reader_goes_away_keeps_running_and_stops_cleanly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    // As `cakewalk run 2>&1 | head -1`: the reader takes the first live line and leaves.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .args(["run", "--duration", "3s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains(" rx "), "{first}");
    drop(child.stdout.take());
    // Both pipes are closed now; later live lines and the final report go nowhere.
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn check_config_says_it_checked_the_file_and_preflight_checks_the_machine() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "af.toml",
        "[ports.a]\nkind = \"afpacket\"\niface = \"lan0\"\n[ports.b]\nkind = \"afpacket\"\niface = \"wan0\"\n",
    );
    let o = cakewalk(&["check-config", &f]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!("# check-config {f}: the file alone is valid"))
            && out.contains("This machine was not checked")
            && out.contains(&format!("`cakewalk preflight --config {f}`")),
        "{out}"
    );
    // The same file against a box where lan0 is missing and wan0 is down.
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sysfs/afpacket-bad"
    );
    let o = cakewalk(&["preflight", "--root", root, "--config", &f]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("preflight checks the machine tree under")
            && out.contains("[FAIL] link a: no interface 'lan0'")
            && out.contains("[FAIL] link b: 'wan0' is down"),
        "{out}"
    );
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sysfs/afpacket-good"
    );
    let o = cakewalk(&["preflight", "--root", root, "--config", &f]);
    assert!(o.status.success(), "{}", stdout(&o));
}

#[test]
fn check_config_says_which_tx_select_is_in_effect_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "e.toml",
        "[engine]\nworkers = 2\ntx_queues = 2\n",
    );
    let out = stdout(&cakewalk(&["check-config", &f]));
    assert!(
        out.contains("# engine.tx_select: \"worker\" in effect (auto with 2 workers and 2 TX"),
        "{out}"
    );
    assert!(out.contains("tx_select = \"auto\""), "{out}");
    let out = stdout(&cakewalk(&["check-config", &f, "--workers", "1"]));
    assert!(
        out.contains("# engine.tx_select: \"flow-hash\" in effect (auto with one worker"),
        "{out}"
    );
    let out = stdout(&cakewalk(&[
        "check-config",
        &f,
        "--set",
        "engine.tx_select=flow-hash",
    ]));
    assert!(
        out.contains("\"flow-hash\" in effect (as set; with 2 workers about half"),
        "{out}"
    );
}

#[test]
fn check_config_prints_each_direction_and_rate_flags_set_one_or_both() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "cable.toml",
        "[shaper]\nrate = \"100mbit\"\n[shaper.download]\ningress = true\n[shaper.upload]\nack_filter = true\n[ports.a]\nname = \"lan\"\n[ports.b]\nname = \"wan\"\n",
    );
    let o = cakewalk(&["check-config", &f, "--rate", "475mbit/45mbit"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("# download: leaves through port a (lan): rate 475mbit"),
        "{out}"
    );
    assert!(
        out.contains("# upload: leaves through port b (wan): rate 45mbit"),
        "{out}"
    );
    assert!(
        out.contains("[shaper.upload]\nbandwidth = \"45mbit\""),
        "{out}"
    );
    // --upload alone changes the upload; the download keeps the common rate.
    let o = cakewalk(&["check-config", &f, "--upload", "20mbit"]);
    let out = stdout(&o);
    assert!(
        out.contains("download: leaves through port a (lan): rate 100mbit"),
        "{out}"
    );
    assert!(
        out.contains("upload: leaves through port b (wan): rate 20mbit"),
        "{out}"
    );
    // The same direction twice on the command line is refused, naming both flags.
    let o = cakewalk(&[
        "check-config",
        &f,
        "--rate",
        "1mbit/2mbit",
        "--upload",
        "3mbit",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--rate and --upload"), "{}", stderr(&o));
    let o = cakewalk(&["check-config", &f, "--rate", "1mbit/fast"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the upload in DOWNLOAD/UPLOAD"),
        "{}",
        stderr(&o)
    );
    let help = stdout(&cakewalk(&["run", "--help"]));
    assert!(
        help.contains("DOWNLOAD/UPLOAD") && help.contains("--upload"),
        "{help}"
    );
}

#[test]
fn explain_answers_per_direction_and_from_tc_joins_two_lines_into_one_config() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "dirs.toml",
        "[shaper]\nrate = \"100mbit\"\n[shaper.download]\ndiffserv = \"besteffort\"\n[shaper.upload]\ndiffserv = \"diffserv4\"\n",
    );
    let spec = "tcp 10.0.0.1:5000 > 192.0.2.4:443 dscp ef";
    let o = cakewalk(&["explain", "-c", &f, spec]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let down = out
        .find("download (leaves through port a")
        .expect("download shown");
    let up = out
        .find("upload (leaves through port b")
        .expect("upload shown");
    assert!(
        out[down..up].contains("tin:        0 Best Effort (besteffort)"),
        "{out}"
    );
    assert!(out[up..].contains("Voice (diffserv4)"), "{out}");
    let o = cakewalk(&["explain", "-c", &f, "--direction", "upload", spec]);
    let out = stdout(&o);
    assert!(
        out.starts_with("upload (") && !out.contains("download ("),
        "{out}"
    );

    let o = cakewalk(&[
        "from-tc",
        "tc qdisc replace dev eth1 root cake bandwidth 45mbit docsis ack-filter",
        "tc qdisc replace dev ifb4eth1 root cake bandwidth 475mbit docsis ingress",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let toml = stdout(&o);
    let conf = write(dir.path(), "from-tc.toml", &toml);
    let o = cakewalk(&["check-config", &conf]);
    let out = stdout(&o);
    assert!(
        out.contains("# download: leaves through port a (a): rate 475mbit")
            && out.contains("# upload: leaves through port b (b): rate 45mbit"),
        "{out}"
    );
    let download = &out[out.find("[shaper.download]").expect("download table")..];
    let upload = &out[out.find("[shaper.upload]").expect("upload table")..];
    assert!(
        download.contains("ingress = true\nack_filter = false\n"),
        "{out}"
    );
    assert!(
        upload.contains("ingress = false\nack_filter = true\n"),
        "{out}"
    );
    assert!(upload.contains("overhead = 18\n"), "{out}");
}
