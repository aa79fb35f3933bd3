//! Property tests for config parsing: formatting and parsing units round-trip, and no input
//! to the unit parsers, the tc word parser or the TOML loader panics.

use proptest::prelude::*;
use qdisc::Rate;

use super::keywords::CakeOptions;
use super::units::*;
use super::Config;

const WORDS: &[&str] = &[
    "bandwidth",
    "100mbit",
    "unlimited",
    "autorate-ingress",
    "rtt",
    "200",
    "lan",
    "metro",
    "besteffort",
    "diffserv4",
    "diffserv8",
    "flowblind",
    "dual-srchost",
    "nat",
    "wash",
    "no-split-gso",
    "ack-filter",
    "ack-filter-aggressive",
    "memlimit",
    "32mb",
    "fwmark",
    "0xff",
    "overhead",
    "-10",
    "300",
    "mpu",
    "64",
    "ethernet",
    "docsis",
    "conservative",
    "raw",
    "pppoe-ptm",
    "ether-vlan",
    "atm",
    "ptm",
    "ingress",
    "egress",
    "bogus",
    "",
];

proptest! {
    #[test]
    fn rates_round_trip_through_their_format(bytes in 0u64..(1 << 50)) {
        let r = Rate::from_bytes_per_sec(bytes);
        prop_assert_eq!(parse_rate(&format_rate(r)).unwrap(), r);
    }

    #[test]
    fn durations_round_trip_through_their_format(ns in 0u64..(1 << 50)) {
        prop_assert_eq!(parse_duration_ns(&format_duration_ns(ns)).unwrap(), ns);
    }

    #[test]
    fn sizes_round_trip_through_their_format(bytes in 0u64..(1 << 50)) {
        prop_assert_eq!(parse_size(&format_size(bytes)).unwrap(), bytes);
    }

    #[test]
    fn unit_parsers_never_panic(s in ".{0,24}") {
        let _ = parse_rate(&s);
        let _ = parse_duration_ns(&s);
        let _ = parse_size(&s);
    }

    #[test]
    fn tc_word_salad_never_panics_and_valid_results_render_to_toml_that_loads(
        picks in proptest::collection::vec(0usize..WORDS.len(), 0..10)
    ) {
        let text: Vec<&str> = picks.iter().map(|&i| WORDS[i]).collect();
        let text = text.join(" ");
        if let Ok(opts) = CakeOptions::parse(&text) {
            let toml = super::tc::render(&opts, "");
            let cfg = opts.to_cake_config();
            match Config::from_toml_str(&toml) {
                Ok(c) => prop_assert_eq!(c.shaper.cake, cfg),
                // Only CakeConfig::validate may refuse what tc's grammar accepts.
                Err(e) => prop_assert!(cfg.validate().is_err(), "{}: {}", toml, e),
            }
        }
    }

    #[test]
    fn the_toml_loader_never_panics(s in "\\PC{0,64}") {
        let _ = Config::from_toml_str(&s);
        let _ = Config::from_toml_str(&format!("[shaper]\n{s}"));
    }
}
