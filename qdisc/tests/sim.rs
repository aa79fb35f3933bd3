//! CAKE in virtual time: shaper accuracy from 1 Mbit/s to 40 Gbit/s under every overhead
//! mode, COBALT's standing queue against unresponsive and ECN-capable overload, diffserv3
//! priority and caps, and a rate change in the middle of a dequeue sequence.
//!
//! Every check compares quantities from the same simulated run (delivered vs configured,
//! one flow's delay vs another's); nothing depends on the machine's speed.

use qdisc::cake::{Cake, CakeConfig, DiffservMode, FlowMode, LinkPreset};
use qdisc::testing::{udp_meta, Harness, Source, TestPacket};
use qdisc::{Dequeue, DropReason, PacketMeta, Qdisc, Rate};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn cake(config: CakeConfig) -> Cake<TestPacket> {
    Cake::new(&config).unwrap()
}

/// Adjusted length of one `len`-byte Ethernet frame under `preset`, computed here from the
/// tc definitions rather than by the code under test.
fn adjusted(preset: LinkPreset, len: u64) -> u64 {
    let net = len - 14;
    match preset {
        LinkPreset::Raw => len,
        LinkPreset::Ethernet => (net + 38).max(84),
        LinkPreset::Docsis => (net + 18).max(64),
        LinkPreset::Conservative => (net + 48).div_ceil(48) * 53,
        LinkPreset::PppoePtm => {
            let l = net + 30;
            l + l.div_ceil(64)
        }
        other => panic!("no reference for {other:?}"),
    }
}

fn rate_accuracy(bits_per_sec: u64, len: usize, preset: LinkPreset, secs: u64) {
    let rate = Rate::from_bits_per_sec(bits_per_sec);
    let mut config = CakeConfig {
        rate,
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    };
    preset.apply(&mut config);
    let mut h = Harness::new(cake(config));
    // Offer 1.5× the rate in frame bytes (more than enough for every overhead mode).
    let offered = Rate::from_bytes_per_sec(rate.bytes_per_sec() * 3 / 2);
    h.add(Source::cbr(0, udp_meta(1, 1, 0, 0), len, offered));
    h.run_until(secs * SEC);
    let f = h.flow(0);
    let delivered_adj = f.delivered_packets * adjusted(preset, len as u64);
    let configured = rate.bytes_per_sec() * secs;
    let ratio = delivered_adj as f64 / configured as f64;
    assert!(
        (ratio - 1.0).abs() < 0.001,
        "{bits_per_sec} bit/s {preset:?}: delivered {delivered_adj} of {configured} adjusted bytes (ratio {ratio:.6})"
    );
    assert_eq!(f.order_violations, 0);
}

#[test]
fn shaper_delivers_the_configured_rate_at_1_mbit_for_every_overhead_mode() {
    for preset in [
        LinkPreset::Raw,
        LinkPreset::Ethernet,
        LinkPreset::Docsis,
        LinkPreset::Conservative,
        LinkPreset::PppoePtm,
    ] {
        rate_accuracy(1_000_000, 1514, preset, 10);
    }
}

#[test]
fn shaper_delivers_the_configured_rate_at_100_mbit_for_every_overhead_mode() {
    for preset in [
        LinkPreset::Raw,
        LinkPreset::Ethernet,
        LinkPreset::Docsis,
        LinkPreset::Conservative,
        LinkPreset::PppoePtm,
    ] {
        rate_accuracy(100_000_000, 1514, preset, 10);
    }
}
