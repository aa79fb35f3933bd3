//! Unit tests of the synth port: settings parsing, the frames the generator builds, pacing,
//! and what the sink counts (reordering, duplicates, loss, foreign frames).

use super::*;

fn plan(cfg: &SynthConfig) -> SynthPlan {
    SynthPlan::new(cfg, 0).unwrap()
}

#[test]
fn sizes_dscp_rates_and_durations_parse_like_tc() {
    assert_eq!("imix".parse::<PacketSize>().unwrap(), PacketSize::Imix);
    assert_eq!("64".parse::<PacketSize>().unwrap(), PacketSize::Fixed(64));
    assert!("huge".parse::<PacketSize>().is_err());
    assert_eq!(parse_dscp_mix("0:8,ef:1").unwrap(), vec![(0, 8), (46, 1)]);
    assert_eq!(parse_dscp_mix("af41,cs1").unwrap(), vec![(34, 1), (8, 1)]);
    assert!(parse_dscp_mix("99").is_err());
    assert_eq!(parse_rate_bps("500mbit").unwrap(), 500_000_000);
    assert_eq!(parse_rate_bps("unlimited").unwrap(), 0);
    for (text, pace) in [
        ("1mpps", Pace::Packets(1_000_000)),
        ("500kpps", Pace::Packets(500_000)),
        ("1.5Mpps", Pace::Packets(1_500_000)),
        ("20000pps", Pace::Packets(20_000)),
        ("auto", Pace::Auto),
        ("unlimited", Pace::Unlimited),
        ("200mbit", Pace::Bits(200_000_000)),
    ] {
        assert_eq!(parse_pace(text).unwrap(), pace, "{text}");
    }
    for bad in ["0.1pps", "xpps", "mpps", "-1kpps"] {
        assert!(parse_pace(bad).is_err(), "{bad}");
    }
    assert!(parse_pace("fast")
        .unwrap_err()
        .to_string()
        .contains("'1mpps'"));
    assert_eq!(resolve_auto_rate("auto", 200_000_000), "400mbit");
    assert_eq!(resolve_auto_rate("AUTO", 0), "unlimited");
    assert_eq!(resolve_auto_rate("1mpps", 200_000_000), "1mpps");
    let e = parse_rate_bps("2gbps").unwrap_err().to_string();
    assert!(e.contains("'2gbps'") && e.contains("try"), "{e}");
    assert_eq!(parse_duration_ns("500ms").unwrap(), Some(500_000_000));
    assert_eq!(parse_duration_ns("").unwrap(), None);
}

#[test]
fn synth_table_parses_from_toml() {
    let c: SynthConfig =
        toml::from_str("flows = 8\nsize = 1500\nip = \"ipv6\"\nrate = \"10mbit\"").unwrap();
    assert_eq!(c.flows, 8);
    assert_eq!(c.size, PacketSize::Fixed(1500));
    assert_eq!(c.ip, IpVersion::Ipv6);
    let c: SynthConfig = toml::from_str("size = \"imix\"").unwrap();
    assert_eq!(c.size, PacketSize::Imix);
    assert!(toml::from_str::<SynthConfig>("flow = 8").is_err());
}

#[test]
fn generated_frames_carry_flow_sequence_and_valid_ipv4_checksums() {
    let cfg = SynthConfig {
        flows: 3,
        size: PacketSize::Fixed(64),
        packets: 9,
        ..SynthConfig::default()
    };
    let stats = Arc::new(SynthStats::default());
    let mut rx = SynthRx::new(&plan(&cfg), Pool::new(32, 2048), 0, 1, &stats);
    let mut burst = Vec::with_capacity(32);
    assert_eq!(rx.rx_burst(&mut burst, 32), 9);
    assert!(rx.is_finished());
    for (i, b) in burst.iter().enumerate() {
        let f = b.data();
        assert_eq!(f.len(), 64);
        assert_eq!(flow_and_seq(f), Some((i as u32 % 3, i as u64 / 3)));
        assert_eq!(fold(ones_sum(&f[14..34])), 0xffff, "ipv4 checksum");
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 30);
    }
    assert_eq!(stats.totals().sent_packets, 9);
}

#[test]
fn imix_follows_seven_four_one_and_ipv6_frames_are_long_enough() {
    let cfg = SynthConfig {
        flows: 4,
        ip: IpVersion::Mixed,
        packets: 1200,
        ..SynthConfig::default()
    };
    let stats = Arc::new(SynthStats::default());
    let mut rx = SynthRx::new(&plan(&cfg), Pool::new(2048, 2048), 0, 1, &stats);
    let mut burst = Vec::with_capacity(2048);
    while rx.rx_burst(&mut burst, 64) > 0 {}
    assert_eq!(burst.len(), 1200);
    let count = |n: usize| burst.iter().filter(|b| b.data().len() == n).count();
    let small = count(64) + count(MIN_FRAME_V6);
    assert_eq!((small, count(576), count(1500)), (700, 400, 100));
    assert!(burst
        .iter()
        .all(|b| flow_and_seq(b.data()).is_some() && b.data().len() >= 64));
}

#[test]
fn the_sink_counts_reordering_and_duplicates_and_loss_is_sent_minus_received() {
    let cfg = SynthConfig {
        flows: 1,
        size: PacketSize::Fixed(100),
        packets: 5,
        ..SynthConfig::default()
    };
    let stats = Arc::new(SynthStats::default());
    let mut rx = SynthRx::new(&plan(&cfg), Pool::new(16, 2048), 0, 1, &stats);
    let mut tx = SynthTx::new(1, stats.clone());
    let mut burst = Vec::new();
    rx.rx_burst(&mut burst, 32);
    let frames: Vec<Vec<u8>> = burst.iter().map(|b| b.data().to_vec()).collect();
    drop(burst);
    // Deliver 0, 2, 1, 1 (dup); 3 and 4 are lost.
    let pool = Pool::new(8, 2048);
    let mut out: Vec<PoolBuf> = [0, 2, 1, 1]
        .iter()
        .map(|&i| pool.alloc_copy(&frames[i]).unwrap())
        .collect();
    assert_eq!(tx.tx_burst(&mut out), 4);
    assert!(out.is_empty());
    tx.flush();
    let t = stats.totals();
    assert_eq!(t.sent_packets, 5);
    assert_eq!(t.received_packets, 3);
    assert_eq!(t.reordered, 1);
    assert_eq!(t.duplicates, 1);
    assert_eq!(t.sent_packets - t.received_packets, 2);
    assert_eq!(stats.delay_total.lock().unwrap().len(), 3);
}

#[test]
fn pacing_never_sends_more_than_the_bucket_allows() {
    let cfg = SynthConfig {
        flows: 2,
        size: PacketSize::Fixed(1000),
        rate: "8mbit".into(), // 1 MB/s = 1000 frames/s
        ..SynthConfig::default()
    };
    let stats = Arc::new(SynthStats::default());
    let mut rx = SynthRx::new(&plan(&cfg), Pool::new(4096, 2048), 0, 1, &stats);
    let mut burst = Vec::new();
    let t0 = clock::now_ns();
    rx.rx_burst(&mut burst, 32);
    let first = burst.len();
    burst.clear();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let t1 = clock::now_ns();
    rx.rx_burst(&mut burst, 32);
    // Credit after the first burst is at most one bucket (32 frames) plus what the
    // elapsed time earned.
    let earned = (t1 - t0) / 1_000_000 + 1;
    assert!(first <= 1, "first burst {first}");
    assert!(
        burst.len() as u64 <= earned.min(32),
        "{} > {earned}",
        burst.len()
    );
}

#[test]
fn a_packet_rate_paces_frames_whatever_their_size() {
    // 1000 frames/s of IMIX: large and small frames cost one frame of credit each.
    let cfg = SynthConfig {
        flows: 2,
        rate: "1kpps".into(),
        ..SynthConfig::default()
    };
    let stats = Arc::new(SynthStats::default());
    let mut rx = SynthRx::new(&plan(&cfg), Pool::new(4096, 2048), 0, 1, &stats);
    let mut burst = Vec::new();
    let t0 = clock::now_ns();
    rx.rx_burst(&mut burst, 32);
    let first = burst.len();
    burst.clear();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let t1 = clock::now_ns();
    rx.rx_burst(&mut burst, 32);
    let earned = (t1 - t0) / 1_000_000 + 1;
    assert!(first <= 1, "first burst {first}");
    assert!(
        burst.len() as u64 <= earned.min(32),
        "{} > {earned}",
        burst.len()
    );
    assert!(
        !burst.is_empty(),
        "20 ms at 1000 frames/s earned at least one"
    );
}

#[test]
fn foreign_frames_are_counted_not_verified() {
    let stats = Arc::new(SynthStats::default());
    let mut tx = SynthTx::new(4, stats.clone());
    let pool = Pool::new(4, 2048);
    let mut out = vec![
        pool.alloc_copy(&[0u8; 60]).unwrap(),
        pool.alloc_copy(&[1]).unwrap(),
    ];
    tx.tx_burst(&mut out);
    tx.flush();
    assert_eq!(stats.totals().foreign, 2);
    assert_eq!(stats.totals().received_packets, 0);
}

#[test]
fn steered_flows_go_to_their_queue_and_the_shares_add_up_to_the_whole() {
    let cfg = SynthConfig {
        flows: 10,
        size: PacketSize::Fixed(64),
        packets: 1001,
        rate: "999pps".into(),
        ..SynthConfig::default()
    };
    let mut plan = plan(&cfg);
    // Flows 0-6 name queue 4 (queue 1 of 3: numbers wrap), flow 7 stays round robin (7 % 3
    // = 1), 8 and 9 name queue 0; queue 2 gets none.
    let mut seen = Vec::new();
    plan.steer(|f, frame| {
        assert_eq!(
            flow_and_seq(frame),
            Some((f, 0)),
            "the probe frame is the flow's own"
        );
        seen.push(f);
        match f {
            0..=6 => Some(4),
            7 => None,
            _ => Some(0),
        }
    });
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    let stats = Arc::new(SynthStats::default());
    let mut rxs: Vec<SynthRx> = (0..3)
        .map(|q| SynthRx::new(&plan, Pool::new(4096, 2048), q, 3, &stats))
        .collect();
    let flows_of = |rx: &SynthRx| rx.flows.iter().map(|f| f.id).collect::<Vec<_>>();
    assert_eq!(flows_of(&rxs[0]), vec![8, 9]);
    assert_eq!(flows_of(&rxs[1]), vec![0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(rxs[2].flows.is_empty() && rxs[2].is_finished());
    // Rate and packet limit follow each queue's share of the flows, and add up.
    let rates: Vec<u64> = rxs.iter().map(|r| r.rate_units_per_s).collect();
    let limits: Vec<u64> = rxs
        .iter()
        .map(|r| {
            if r.flows.is_empty() {
                0
            } else {
                r.packet_limit
            }
        })
        .collect();
    assert_eq!(rates[0] + rates[1], 999);
    assert_eq!(limits.iter().sum::<u64>(), 1001);
    assert_eq!((limits[0], limits[1]), (200, 801));
    // Each queue sends only its flows.
    let mut burst = Vec::with_capacity(64);
    rxs[0].rate_units_per_s = 0;
    rxs[0].rx_burst(&mut burst, 64);
    assert!(burst
        .iter()
        .all(|b| matches!(flow_and_seq(b.data()), Some((8 | 9, _)))));
}
