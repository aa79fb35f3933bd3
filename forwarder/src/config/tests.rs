//! Unit tests of configuration loading: defaults, every key and its bounds, command-line
//! overrides, refused combinations and the effective configuration printed back.

use super::*;
use qdisc::cake::AckFilterMode;
use qdisc::cake::{DiffservMode, FlowMode};

fn err(text: &str) -> String {
    Config::from_toml_str(text).unwrap_err().to_string()
}

#[test]
fn a_file_run_would_refuse_at_start_is_refused_when_loaded() {
    // Each of these passed check-config and a reload, then stopped `cakewalk run` (or
    // was silently replaced by it).
    for (text, want) in [
        (
            "[engine]\nburst = 0",
            "engine.burst: 0 is out of range; use 1 to 1024",
        ),
        (
            "[engine]\nduration = \"fast\"",
            "engine.duration: fast is out of range",
        ),
        (
            "[ports]\npool_buffers = 0",
            "ports.pool_buffers: 0 is too small",
        ),
        (
            "[ports]\nbuffer_size = 10",
            "ports.buffer_size: 10 is too small",
        ),
        (
            "[ports.b]\nrx_queues = 0",
            "ports.b.rx_queues: 0 is too small",
        ),
        (
            "[stats]\nbogus = 1",
            "in the [stats] section: unknown field `bogus`",
        ),
        (
            "[stats]\ninterval = \"fast\"",
            "stats.interval: 'fast' is not a duration",
        ),
        (
            "[stats]\nprometheus = \"0.0.0.0:9187\"",
            "stats.prometheus: '0.0.0.0:9187' is not loopback",
        ),
    ] {
        let e = err(text);
        assert!(e.starts_with(want), "{text}: {e}");
    }
    let public = "[stats]\nprometheus = \"0.0.0.0:9187\"\nprometheus_public = true";
    assert!(Config::from_toml_str(public).is_ok());
    let mut o = Overrides::default();
    o.set("engine.burst", 0, "--set");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(
        e.starts_with("--set (engine.burst): 0 is out of range"),
        "{e}"
    );
}

#[test]
fn a_number_given_for_a_string_key_on_the_command_line_is_taken_as_written() {
    // As `--set engine.duration=0` arrives: a TOML integer.
    let mut o = Overrides::default();
    o.set("engine.duration", 0, "--set");
    o.set("stats.interval", 0, "--set");
    o.set("ports.a.kind", "afpacket", "--set");
    o.set("ports.a.iface", 0, "--set");
    let c = Config::load(None, &o).unwrap();
    assert_eq!(c.engine.duration, "0");
    assert_eq!(c.ports.a.iface, "0");
    assert_eq!(c.stats.get("interval").and_then(|v| v.as_str()), Some("0"));
    // A number where a number belongs is untouched.
    let mut o = Overrides::default();
    o.set("engine.burst", 64, "--set");
    assert_eq!(Config::load(None, &o).unwrap().engine.burst, 64);
}

#[test]
fn autorate_ingress_on_several_tx_queues_is_refused_from_a_file_and_from_flags() {
    let e = err("[shaper]\nautorate_ingress = true\n[engine]\ntx_queues = 4");
    assert!(
        e.starts_with("shaper.autorate_ingress: autorate-ingress needs one TX queue"),
        "{e}"
    );
    let mut o = Overrides::default();
    o.set("engine.tx_queues", 2, "--queues");
    let e = Config::from_toml_with("[shaper]\nautorate-ingress = true", "f.toml", &o)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--queues (shaper.autorate_ingress)"), "{e}");
    assert!(e.contains(AUTORATE_NEEDS_ONE_QUEUE), "{e}");
    assert!(Config::from_toml_str("[shaper]\nautorate_ingress = true").is_ok());
}

#[test]
fn an_empty_file_gives_the_defaults() {
    let c = Config::from_toml_str("").unwrap();
    let key = crate::flow_key::process_key();
    assert_eq!(
        c.to_cake_config(),
        CakeConfig {
            hash_key: key,
            ..CakeConfig::default()
        }
    );
    assert_eq!(c.shaper.queue, QueueKind::Cake);
    assert_eq!(c.shaper.sync_interval_ns, 200_000);
    assert!(c.shaper.bypass);
}

#[test]
fn every_shaper_key_is_read() {
    let c = Config::from_toml_str(
        r#"
        [shaper]
        bandwidth = "500mbit"
        diffserv = "diffserv4"
        flow_mode = "dual-dsthost"
        nat = true
        wash = true
        ack_filter = "aggressive"
        split_gso = false
        rtt = "lan"
        overhead = "ethernet"
        ingress = true
        memlimit = "32mb"
        fwmark = "0xff"
        packet_limit = 5000
        queue = "fifo"
        sync_interval = "500us"
        sync_policy = "equal"
        bypass = false
        "#,
    )
    .unwrap();
    let k = c.to_cake_config();
    assert_eq!(k.rate.bits_per_sec(), 500_000_000);
    assert_eq!(k.diffserv, DiffservMode::Diffserv4);
    assert_eq!(k.flow_mode, FlowMode::DualDsthost);
    assert!(k.nat && k.wash && k.ingress && !k.split_gso);
    assert_eq!(k.ack_filter, AckFilterMode::Aggressive);
    assert_eq!((k.interval_ns, k.target_ns), (1_000_000, 50_000));
    assert_eq!((k.overhead, k.mpu, k.raw), (38, 84, false));
    assert_eq!(k.memlimit, Some(32 << 20));
    assert_eq!(k.fwmark_mask, 0xff);
    assert_eq!(k.packet_limit, 5000);
    assert_eq!(c.shaper.queue, QueueKind::Fifo);
    assert_eq!(c.shaper.sync_interval_ns, 500_000);
    assert_eq!(c.shaper.sync_policy, SyncPolicy::Equal);
    assert!(!c.shaper.bypass);
}

#[test]
fn the_options_string_is_overridden_by_keys() {
    let c = Config::from_toml_str(
        "[shaper]\noptions = \"bandwidth 200mbit diffserv4 triple-isolate ethernet\"\nbandwidth = \"100mbit\"\n",
    )
    .unwrap();
    let k = c.to_cake_config();
    assert_eq!(k.rate.bits_per_sec(), 100_000_000);
    assert_eq!(k.diffserv, DiffservMode::Diffserv4);
    assert_eq!(k.overhead, 38);
}

#[test]
fn every_size_and_count_has_an_upper_bound_that_is_enforced() {
    for (toml, want) in [
        (
            "[ports]\nbuffer_size = 4294967295",
            "ports.buffer_size: 4294967295 is too large; use the largest frame a port carries, 64 to 262144 bytes",
        ),
        (
            "[ports]\npool_buffers = 1000000000",
            "ports.pool_buffers: 1000000000 is too large; use 1 to 4194304",
        ),
        (
            "[ports]\npool_buffers = 4194304\nbuffer_size = 262144",
            "ports.pool_buffers: 4194304 buffers of 262144 bytes take 1024.0 GiB per port, more than the 4 GiB",
        ),
        (
            "[ports.a]\nrx_queues = 100000",
            "ports.a.rx_queues: 100000 is too large; use 1 to 1024",
        ),
        (
            "[ports.synth]\nflows = 4294967295",
            "ports.synth.flows: 4294967295 is too large; use 1 to 1048576",
        ),
        (
            "[shaper]\nmemlimit = \"100gb\"",
            "shaper.memlimit: 107374182400 bytes is above the largest memory limit, 4gb",
        ),
        (
            "[shaper]\npacket_limit = 4294967295",
            "shaper.packet_limit: 4294967295 is out of range; valid range is 1 to 4194304",
        ),
        (
            "[engine]\ncores = [100000]",
            "engine.cores: core 100000 is not a core number",
        ),
    ] {
        assert!(err(toml).starts_with(want), "{toml}: {}", err(toml));
    }
    let many: Vec<String> = (0..1025).map(|c| c.to_string()).collect();
    let e = err(&format!("[engine]\ncores = [{}]", many.join(",")));
    assert!(
        e.starts_with("engine.cores: a list of 1025 is too large; use at most 1024 cores"),
        "{e}"
    );
    // At the bounds: accepted.
    Config::from_toml_str("[ports]\nbuffer_size = 262144\npool_buffers = 16384").unwrap();
    Config::from_toml_str("[shaper]\nmemlimit = \"4gb\"").unwrap();
}

#[test]
fn a_config_file_is_read_with_a_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    // Valid TOML (comments), just too much of it for a config file.
    let big = dir.path().join("big.toml");
    std::fs::write(&big, "# padding\n".repeat(200_000)).unwrap();
    let e = Config::load(Some(&big), &Overrides::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("is larger than 1024 KiB, the most cakewalk reads"),
        "{e}"
    );
    let e = Config::load(Some(Path::new("/dev/zero")), &Overrides::default()).unwrap_err();
    assert!(matches!(e, ConfigError::TooLarge { .. }), "{e}");
    let bin = dir.path().join("bin.toml");
    std::fs::write(&bin, b"rate = \xff\n").unwrap();
    let e = Config::load(Some(&bin), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("not UTF-8 text (byte 7"), "{e}");
}

#[test]
fn an_integer_rtt_too_long_to_count_is_refused_not_saturated() {
    let e = err("[shaper]\nrtt = 9223372036854775807");
    assert!(
        e.starts_with("shaper.rtt: 9223372036854775807 µs is too long to count in ns"),
        "{e}"
    );
    let e = err("[shaper]\nrtt = 3600000001");
    assert!(
        e.contains("longer than the 1h the AQM can be tuned for"),
        "{e}"
    );
    let e = err("[shaper]\ntarget = \"7200s\"");
    assert!(
        e.starts_with("shaper.target: 7200s is longer than the 1h"),
        "{e}"
    );
    Config::from_toml_str("[shaper]\nrtt = \"interplanetary\"").unwrap();
}

#[test]
fn a_hex_overhead_string_is_called_not_decimal() {
    let e = err("[shaper]\noverhead = \"0x10\"");
    assert!(
        e.starts_with("shaper.overhead: '0x10' is not a whole number in decimal"),
        "{e}"
    );
    let e = err("[shaper]\noptions = \"overhead 0x10\"");
    assert!(e.contains("is not a whole number in decimal"), "{e}");
}

#[test]
fn the_effective_config_shows_stats_even_when_the_file_sets_none() {
    let text = Config::default().effective();
    assert!(
        text.contains("\n[stats]\ninterval = \"1s\"\nlive = true\n"),
        "{text}"
    );
    assert!(
        text.contains("# control_socket \"\" is the default path, here "),
        "{text}"
    );
    let back = Config::from_toml_str(&text).unwrap();
    assert_eq!(back.effective(), text, "reads back the same");
    let set = Config::from_toml_str("[stats]\ninterval = \"5s\"\nprometheus = \"127.0.0.1:9187\"")
        .unwrap();
    let text = set.effective();
    assert!(
        text.contains("interval = \"5s\"") && text.contains("prometheus = \"127.0.0.1:9187\""),
        "{text}"
    );
}

#[test]
fn a_sync_interval_below_the_minimum_the_zero_error_names_is_refused() {
    for v in ["\"1ns\"", "\"9us\"", "\"2s\""] {
        let e = err(&format!("[shaper]\nsync_interval = {v}"));
        assert!(
            e.starts_with("shaper.sync_interval: ") && e.contains("use \"10us\" to \"1s\""),
            "{v}: {e}"
        );
    }
    Config::from_toml_str("[shaper]\nsync_interval = \"10us\"").unwrap();
}

#[test]
fn bad_values_name_the_key_and_the_fix() {
    assert_eq!(
        err("[shaper]\nrate = \"2gbps\""),
        "shaper.rate: '2gbps' is not a rate; try '2gbit' or '250mbyte'"
    );
    assert!(err("[shaper]\nrate = \"fast\"")
        .starts_with("shaper.rate: 'fast' is not a rate; try '200mbit'"));
    let e = err("[shaper]\ndiffserv = \"diffserv5\"");
    assert!(
        e.starts_with("shaper.diffserv: 'diffserv5' is not a diffserv mode"),
        "{e}"
    );
    let e = err("[shaper]\nflow_mode = \"triple\"");
    assert!(e.contains("is not a flow mode"), "{e}");
    let e = err("[shaper]\noverhead = 300");
    assert_eq!(
        e,
        "shaper.overhead: 300 is out of range; valid range is -64 to 256"
    );
    let e = err("[shaper]\noverhead = \"ethernett\"");
    assert!(e.contains("did you mean 'ethernet'?"), "{e}");
    let e = err("[shaper]\nrtt = \"soon\"");
    assert!(
        e.starts_with("shaper.rtt: 'soon' is not a duration") && e.contains("preset"),
        "{e}"
    );
    let e = err("[shaper]\nqueue = \"red\"");
    assert!(e.contains("use \"cake\" or \"fifo\""), "{e}");
    let e = err("[shaper]\noptions = \"bandwidth 1mbit diffserv9\"");
    assert!(
        e.starts_with("shaper.options: unknown cake option 'diffserv9'"),
        "{e}"
    );
    let e = err("[shaper]\nrate = \"1mbit\"\nbandwidth = \"2mbit\"");
    assert!(e.contains("keep one"), "{e}");
}

#[test]
fn a_rate_below_one_byte_per_second_is_refused_not_unlimited() {
    for text in [
        "rate = 1",
        "rate = 7",
        "rate = \"1bit\"",
        "bandwidth = \"0.5bit\"",
    ] {
        let e = err(&format!("[shaper]\n{text}"));
        assert!(e.contains("would mean unlimited"), "{text}: {e}");
    }
    let c = Config::from_toml_str("[shaper]\nrate = 0").unwrap();
    assert!(c.to_cake_config().rate.is_unlimited());
}

#[test]
fn a_negative_integer_is_called_negative() {
    for (text, kind) in [
        ("rate = -5", "rate"),
        ("rtt = -100", "duration"),
        ("memlimit = -1", "size"),
    ] {
        let e = err(&format!("[shaper]\n{text}"));
        assert!(e.contains("is negative") && e.contains(kind), "{text}: {e}");
        assert!(!e.contains("found an integer"), "{text}: {e}");
    }
}

#[test]
fn an_afpacket_interface_name_no_kernel_accepts_is_refused() {
    for name in ["a-name-of-sixteen", "eth0/1", "eth0:1", "my nic", ".."] {
        let e = err(&format!(
            "[ports.a]\nkind = \"afpacket\"\niface = \"{name}\"\n[ports.b]\nkind = \"afpacket\"\niface = \"eth1\""
        ));
        assert!(
            e.starts_with("ports.a.iface:") && e.contains("cannot be a Linux interface name"),
            "{name}: {e}"
        );
    }
    assert!(Config::from_toml_str(
        "[ports.a]\nkind = \"afpacket\"\niface = \"enp1s0f0np0.100\"\n[ports.b]\nkind = \"afpacket\"\niface = \"eth1\""
    )
    .is_ok());
}

#[test]
fn a_port_key_its_backend_does_not_read_is_refused() {
    let mut o = Overrides::default();
    o.set("ports.a.input", "in.pcap", "--input");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(
        e.starts_with("--input (ports.a.input): only pcap ports use it, but port a is a synth port; add --port-kind pcap"),
        "{e}"
    );
    let e = err("[ports.b]\nkind = \"synth\"\noutput = \"out.pcap\"");
    assert!(
        e.starts_with("ports.b.output: only pcap ports use it"),
        "{e}"
    );
    let e = err("[ports.a]\nkind = \"pcap\"\niface = \"eth0\"");
    assert!(
        e.starts_with(
            "ports.a.iface: only afpacket and dpdk ports use it, but port a is a pcap port"
        ),
        "{e}"
    );
    let mut o = Overrides::default();
    o.set(
        "ports.eal_args",
        toml::Value::Array(vec!["--no-pci".into()]),
        "--eal",
    );
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(
        e.starts_with("--eal (ports.eal_args): only dpdk ports use it, but port a is a synth port and port b a synth port; add --port-kind dpdk"),
        "{e}"
    );
    let mut o = Overrides::default();
    o.set("ports.a.kind", "afpacket", "--port-kind");
    o.set("ports.b.kind", "afpacket", "--port-kind");
    o.set("ports.a.iface", "veth0", "--iface");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(
        e.starts_with("--iface (ports.b.iface): port b (afpacket) names no interface; give both as --iface A,B"),
        "{e}"
    );
    o.set("ports.b.iface", "veth0", "--iface");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(
        e.starts_with("--iface (ports.b.iface): both ports are 'veth0'"),
        "{e}"
    );
    // The keys are fine on the ports that read them.
    Config::from_toml_str(
        "[ports.a]\nkind = \"pcap\"\ninput = \"in.pcap\"\n[ports.b]\nkind = \"afpacket\"\niface = \"eth1\"",
    )
    .unwrap();
}

#[test]
fn an_empty_overhead_is_refused_not_ignored() {
    for text in ["overhead = \"\"", "overhead = \"  \""] {
        let e = err(&format!("[shaper]\n{text}"));
        assert!(e.starts_with("shaper.overhead: is empty"), "{text}: {e}");
    }
    let mut o = Overrides::default();
    o.set("shaper.overhead", "", "--overhead");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(
        e.starts_with("--overhead (shaper.overhead): is empty"),
        "{e}"
    );
}

#[test]
fn unknown_keys_and_sections_are_refused() {
    let e = err("[shaper]\nratee = \"1mbit\"");
    assert!(e.contains("unknown field `ratee`"), "{e}");
    let e = err("[shaprr]\nrate = 1");
    assert!(e.contains("unknown field `shaprr`"), "{e}");
    let e = err("[shaper]\nnat = \"yes\"");
    assert!(e.contains("nat") || e.contains("boolean"), "{e}");
}

#[test]
fn overrides_win_over_the_file_and_errors_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[shaper]\nbandwidth = \"100mbit\"\nraw = true\n").unwrap();
    let mut o = Overrides::default();
    o.set("shaper.rate", "300mbit", "--rate");
    o.set("shaper.overhead", "docsis", "--overhead");
    let c = Config::load(Some(&path), &o).unwrap();
    let k = c.to_cake_config();
    assert_eq!(k.rate.bits_per_sec(), 300_000_000);
    assert_eq!((k.overhead, k.mpu, k.raw), (18, 64, false));

    let mut bad = Overrides::default();
    bad.set("shaper.rate", "fast", "--rate");
    let e = Config::load(Some(&path), &bad).unwrap_err().to_string();
    assert!(
        e.starts_with("--rate (shaper.rate): 'fast' is not a rate"),
        "{e}"
    );
}

#[test]
fn a_missing_file_names_the_path() {
    let e = Config::load(
        Some(Path::new("/nonexistent/cakewalk.toml")),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("cannot read config file '/nonexistent/cakewalk.toml'"),
        "{e}"
    );
}

#[test]
fn a_missing_file_says_why_once_in_the_error_chain() {
    let e = Config::load(
        Some(Path::new("/nonexistent/cakewalk.toml")),
        &Overrides::default(),
    )
    .unwrap_err();
    // main prints errors with `{:#}`, which appends every source in the chain.
    let shown = format!("{:#}", anyhow::Error::new(e));
    assert_eq!(
        shown.matches("No such file or directory").count(),
        1,
        "{shown}"
    );
}

#[test]
fn the_effective_shaper_section_reads_back_the_same() {
    for text in [
        "",
        "[shaper]\noptions = \"bandwidth 1gbit diffserv8 pppoe-ptm ether-vlan nat wash ack-filter memlimit 10000 fwmark 8\"",
        "[shaper]\nrate = \"10mbit\"\nraw = true\nqueue = \"fifo\"\nsync_policy = \"equal\"",
    ] {
        let c = Config::from_toml_str(text).unwrap();
        let again = Config::from_toml_str(&c.shaper.to_toml()).unwrap();
        assert_eq!(again.to_cake_config(), c.to_cake_config(), "{text}");
        assert_eq!(again.shaper.queue, c.shaper.queue);
        assert_eq!(again.shaper.sync_policy, c.shaper.sync_policy);
    }
}

#[test]
fn the_whole_effective_config_is_toml_that_reads_back_the_same() {
    let deploy = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/cakewalk.toml"
    ))
    .unwrap();
    for text in [
        "",
        deploy.as_str(),
        "[ports.a]\nkind = \"pcap\"\ninput = \"in.pcap\"\n[ports.b]\nkind = \"pcap\"\noutput = \"out.pcap\"\n[ports.synth]\nsize = 64\n[engine]\nidle = \"spin\"\ncores = [1]",
    ] {
        let c = Config::from_toml_str(text).unwrap();
        let shown = c.effective();
        assert!(!shown.contains("Config {"), "no Rust debug text: {shown}");
        let mut again = Config::from_toml_str(&shown).unwrap();
        // Every shaper key is written out, so all of them now count as given.
        again.shaper.given = c.shaper.given.clone();
        // Each direction is written out whole too: the same CAKE settings.
        for d in direction::Direction::BOTH {
            again.directions.get_mut(d).own = c.directions.get(d).own.clone();
        }
        // Every [stats] key is written out too: the same settings, a fuller table.
        let resolved = |t: &toml::Table| -> crate::stats::StatsConfig {
            toml::Value::Table(t.clone()).try_into().unwrap()
        };
        assert_eq!(resolved(&again.stats), resolved(&c.stats), "{shown}");
        again.stats = c.stats.clone();
        assert_eq!(again, c, "{shown}");
    }
}

#[test]
fn one_key_set_twice_on_the_command_line_is_refused() {
    let mut o = Overrides::default();
    o.set("shaper.rate", "100mbit", "--rate");
    o.set("shaper.rate", "200mbit", "--set");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(
        e.contains("--rate and --set") && e.contains("give only one"),
        "{e}"
    );
    let mut o = Overrides::default();
    o.set("engine.burst", 16, "--set");
    o.set("engine.burst", 64, "--set");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(e.contains("--set given twice (engine.burst)"), "{e}");
    let mut o = Overrides::default();
    o.set("shaper.rate", "100mbit", "--rate");
    o.set("shaper.bandwidth", "200mbit", "--set");
    let e = Config::load(None, &o).unwrap_err().to_string();
    assert!(e.contains("shaper.rate / shaper.bandwidth"), "{e}");
    // Different keys are fine.
    let mut o = Overrides::default();
    o.set("shaper.rate", "100mbit", "--rate");
    o.set("engine.burst", 64, "--set");
    assert!(Config::load(None, &o).is_ok());
}

#[test]
fn the_flow_hash_key_is_secret_unless_a_seed_is_configured() {
    let unset = Config::from_toml_str("[shaper]\nrate = \"100mbit\"").unwrap();
    let cake = unset.to_cake_config();
    assert_eq!(cake.hash_key, crate::flow_key::process_key());
    assert_eq!(
        cake.seed,
        CakeConfig::default().seed,
        "the dither and BLUE random numbers stay seeded as before"
    );
    assert!(
        unset
            .effective()
            .contains("# seed: not set; the flow hash key is drawn at random"),
        "{}",
        unset.effective()
    );
    let set = Config::from_toml_str("[shaper]\nseed = 7").unwrap();
    let cake = set.to_cake_config();
    assert_eq!((cake.hash_key, cake.seed), (7, 7));
    assert!(set.effective().contains("\nseed = 7\n"));
    let again = Config::from_toml_str(&set.effective()).unwrap();
    assert_eq!(again.to_cake_config().hash_key, 7);
}
