//! Unit tests of the CAKE instance: set-associative lookups and host fairness, the flow
//! state machine, overflow and limits, the ACK filter through the queue, bypass, rate
//! changes and reconfiguration, and the quirks listed in the module docs.

use super::*;
use crate::testing::{udp_meta, TestPacket};
use crate::{DropReason, TcpAckInfo};

fn cake(config: CakeConfig) -> Cake<TestPacket> {
    Cake::new(&config).unwrap()
}

fn unlimited(flow_mode: FlowMode, diffserv: DiffservMode) -> Cake<TestPacket> {
    cake(CakeConfig {
        flow_mode,
        diffserv,
        ..CakeConfig::default()
    })
}

fn pkt(len: usize, flow: u32, seq: u64) -> TestPacket {
    TestPacket::new(len, flow, seq)
}

fn with_hash(h: u32) -> PacketMeta {
    PacketMeta {
        l4_hash: Some(h),
        ..udp_meta(1, 2, 3, 0)
    }
}

fn drain(c: &mut Cake<TestPacket>, now: u64) -> Vec<TestPacket> {
    let mut out = Vec::new();
    while let Dequeue::Packet(p) = c.dequeue(now) {
        out.push(p);
    }
    out
}

#[test]
fn a_default_instance_preallocates_under_two_mebibytes() {
    let c = cake(CakeConfig::default());
    let bytes = c.preallocated_bytes();
    assert!(bytes < 2 << 20, "{bytes} bytes");
    assert_eq!(std::mem::size_of::<Flow>(), 64);
    assert!(c.slab_bytes() >= 10241 * std::mem::size_of::<Slot<TestPacket>>());
}

#[test]
fn new_rejects_an_invalid_config() {
    let bad = CakeConfig {
        packet_limit: 0,
        ..CakeConfig::default()
    };
    assert_eq!(
        Cake::<TestPacket>::new(&bad).unwrap_err(),
        ConfigError::ZeroPacketLimit
    );
    let mut c = cake(CakeConfig::default());
    assert!(c.reconfigure(&bad).is_err());
    assert_eq!(
        c.config().packet_limit,
        10240,
        "a refused reconfigure changes nothing"
    );
}

#[test]
fn set_associative_lookup_counts_misses_hits_and_collisions() {
    let mut c = unlimited(FlowMode::Flows, DiffservMode::Besteffort);
    // Nine hashes that all want bucket 16 (set 16..24).
    let hashes: Vec<u32> = (0..9).map(|j| 16 + 1024 * j).collect();
    for (n, &h) in hashes.iter().enumerate().take(8) {
        c.enqueue(0, pkt(100, n as u32, 0), &with_hash(h));
        assert_eq!(c.classify(&with_hash(h)).flow, 16 + n, "way {n}");
    }
    let st = &c.stats().tins[0];
    assert_eq!(
        (st.way_misses, st.way_collisions, st.way_directs),
        (8, 0, 0)
    );
    // A ninth flow finds every way busy and shares its home bucket.
    c.enqueue(0, pkt(100, 8, 0), &with_hash(hashes[8]));
    assert_eq!(c.stats().tins[0].way_collisions, 1);
    // The first flow's tag sits in the first way: a direct hit until it is evicted;
    // the second flow's tag sits in the second way: an indirect hit.
    c.enqueue(0, pkt(100, 1, 1), &with_hash(hashes[1]));
    assert_eq!(c.stats().tins[0].way_indirect_hits, 1);
    c.enqueue(0, pkt(100, 8, 1), &with_hash(hashes[8]));
    assert_eq!(c.stats().tins[0].way_directs, 1);
    c.check_invariants().unwrap();
}

#[test]
fn flowblind_puts_everything_in_flow_zero() {
    let mut c = unlimited(FlowMode::Flowblind, DiffservMode::Besteffort);
    for f in 0..10 {
        c.enqueue(0, pkt(100, f, 0), &udp_meta(f, f, f, 0));
        assert_eq!(c.classify(&udp_meta(f, f, f, 0)).flow, 0);
    }
    assert_eq!(c.stats().tins[0].sparse_flows, 1);
    let out: Vec<u32> = drain(&mut c, 1).iter().map(|p| p.flow).collect();
    assert_eq!(out, (0..10).collect::<Vec<_>>(), "one FIFO");
}

#[test]
fn host_modes_hash_by_host_only() {
    let mut c = unlimited(FlowMode::Srchost, DiffservMode::Besteffort);
    let a = c.classify(&udp_meta(1, 1, 1, 0));
    let b = c.classify(&udp_meta(1, 7, 99, 0));
    assert_eq!(a.flow_hash, b.flow_hash, "same source host, one queue");
    assert_eq!(a.src_host, None, "no host fairness outside the dual modes");
    c.reconfigure(&CakeConfig {
        flow_mode: FlowMode::Hosts,
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    })
    .unwrap();
    let a = c.classify(&udp_meta(1, 1, 1, 0));
    let b = c.classify(&udp_meta(1, 7, 1, 0));
    assert_ne!(a.flow_hash, b.flow_hash);
}

#[test]
fn l4_hash_is_reused_in_flow_modes_unless_nat_rewrote_the_keys() {
    let c = unlimited(FlowMode::TripleIsolate, DiffservMode::Besteffort);
    let m = with_hash(0xdead_beef);
    let cl = c.classify(&m);
    assert!(cl.used_l4_hash);
    assert_eq!(cl.flow_hash, 0xdead_beef);
    assert_eq!(cl.flow, 0xdead_beef % 1024);
    let rewritten = PacketMeta {
        keys_rewritten: true,
        ..m
    };
    assert!(
        c.classify(&rewritten).used_l4_hash,
        "without nat a rewrite does not matter"
    );
    let nat = cake(CakeConfig {
        nat: true,
        ..CakeConfig::default()
    });
    assert!(!nat.classify(&rewritten).used_l4_hash);
    assert!(nat.classify(&m).used_l4_hash);
    let hosts = unlimited(FlowMode::Dsthost, DiffservMode::Besteffort);
    assert!(
        !hosts.classify(&m).used_l4_hash,
        "host modes never use the flow hash"
    );
}

#[test]
fn dscp_and_fwmark_choose_the_tin() {
    let mut c = cake(CakeConfig {
        fwmark_mask: 0xf0,
        ..CakeConfig::default()
    });
    assert_eq!(c.classify(&udp_meta(1, 1, 1, 46)).tin, 2);
    assert_eq!(c.classify(&udp_meta(1, 1, 1, 46)).tin_name, "Voice");
    assert_eq!(c.classify(&udp_meta(1, 1, 1, 8)).tin, 1);
    assert_eq!(c.classify(&udp_meta(1, 1, 1, 0)).tin, 0);
    // Mark 1 (after masking and shifting) selects tin_order[0] = Bulk.
    let marked = PacketMeta {
        mark: 0x10,
        ..udp_meta(1, 1, 1, 46)
    };
    assert_eq!(c.classify(&marked).tin, 1);
    let out_of_range = PacketMeta {
        mark: 0x90,
        ..udp_meta(1, 1, 1, 46)
    };
    assert_eq!(
        c.classify(&out_of_range).tin,
        2,
        "mark 9 > tin count falls back to DSCP"
    );
    c.enqueue(0, pkt(100, 0, 0), &udp_meta(1, 1, 1, 46));
    assert_eq!(c.stats().tins[2].backlog_bytes, 100);
    assert_eq!(c.tin_names(), &["Best Effort", "Bulk", "Voice"]);
    assert_eq!(c.tin_order(), &[1, 0, 2]);
}

#[test]
fn hosts_get_equal_shares_whatever_their_flow_count() {
    // Triple-isolate, unlimited: host 1 runs 4 bulk flows, host 2 runs one.
    let mut c = unlimited(FlowMode::TripleIsolate, DiffservMode::Besteffort);
    let metas: Vec<PacketMeta> = (0..4)
        .map(|f| udp_meta(1, 1, f, 0))
        .chain(std::iter::once(udp_meta(2, 2, 100, 0)))
        .collect();
    let mut seq = 0;
    for _ in 0..40 {
        for (f, m) in metas.iter().enumerate() {
            c.enqueue(0, pkt(1000, f as u32, seq), m);
            seq += 1;
        }
    }
    let mut bytes = [0u64; 2];
    for i in 0..2000u64 {
        if let Dequeue::Packet(p) = c.dequeue(i) {
            bytes[usize::from(p.flow == 4)] += p.len as u64;
            // Keep every flow backlogged.
            c.enqueue(i, pkt(1000, p.flow, seq), &metas[p.flow as usize]);
            seq += 1;
        }
    }
    let ratio = bytes[0] as f64 / bytes[1] as f64;
    assert!((ratio - 1.0).abs() < 0.05, "host bytes {bytes:?}");
    let cl = c.classify(&metas[0]);
    assert_eq!(c.src_bulk[cl.src_host.unwrap()], 4);
    c.check_invariants().unwrap();
}

#[test]
fn flows_mode_ignores_hosts() {
    let mut c = unlimited(FlowMode::Flows, DiffservMode::Besteffort);
    let metas: Vec<PacketMeta> = (0..4)
        .map(|f| udp_meta(1, 1, f, 0))
        .chain(std::iter::once(udp_meta(2, 2, 100, 0)))
        .collect();
    let mut seq = 0;
    for _ in 0..40 {
        for (f, m) in metas.iter().enumerate() {
            c.enqueue(0, pkt(1000, f as u32, seq), m);
            seq += 1;
        }
    }
    let mut per_flow = [0u64; 5];
    for i in 0..2000u64 {
        if let Dequeue::Packet(p) = c.dequeue(i) {
            per_flow[p.flow as usize] += 1;
            c.enqueue(i, pkt(1000, p.flow, seq), &metas[p.flow as usize]);
            seq += 1;
        }
    }
    let (min, max) = (
        per_flow.iter().min().unwrap(),
        per_flow.iter().max().unwrap(),
    );
    assert!(max - min <= 3, "{per_flow:?}");
}

#[test]
fn unlimited_mode_splits_tins_by_tin_quantum() {
    let mut c = unlimited(FlowMode::Flows, DiffservMode::Diffserv3);
    let metas = [
        udp_meta(1, 1, 1, 0),
        udp_meta(1, 1, 2, 8),
        udp_meta(1, 1, 3, 46),
    ];
    let mut seq = 0;
    for _ in 0..50 {
        for (f, m) in metas.iter().enumerate() {
            c.enqueue(0, pkt(100, f as u32, seq), m);
            seq += 1;
        }
    }
    let mut bytes = [0u64; 3];
    for i in 0..6000u64 {
        if let Dequeue::Packet(p) = c.dequeue(i) {
            bytes[p.flow as usize] += 100;
            c.enqueue(i, pkt(100, p.flow, seq), &metas[p.flow as usize]);
            seq += 1;
        }
    }
    // Best effort 1024, bulk 64, voice 256.
    let be_bulk = bytes[0] as f64 / bytes[1] as f64;
    let voice_bulk = bytes[2] as f64 / bytes[1] as f64;
    assert!((be_bulk - 16.0).abs() < 1.0, "{bytes:?}");
    assert!((voice_bulk - 4.0).abs() < 0.3, "{bytes:?}");
}

#[test]
fn sent_counters_count_deliveries_not_enqueues() {
    let mut c = cake(CakeConfig::default());
    c.enqueue(0, pkt(300, 0, 0), &udp_meta(1, 1, 1, 0));
    assert_eq!(c.stats().tins[0].sent_packets, 0);
    assert_eq!(c.len(), 1);
    assert_eq!(c.backlog_bytes(), 300);
    assert!(matches!(c.dequeue(5), Dequeue::Packet(_)));
    let st = &c.stats().tins[0];
    assert_eq!(
        (st.sent_packets, st.sent_bytes, st.backlog_bytes),
        (1, 300, 0)
    );
    assert_eq!(c.dequeue(6), Dequeue::Empty);
}

#[test]
fn bypass_charges_the_shaper_only_when_empty_and_open() {
    let mut c = cake(CakeConfig {
        rate: Rate::from_bytes_per_sec(1_000_000), // 1 µs per byte
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    });
    let m = udp_meta(1, 1, 1, 0);
    assert!(c.try_bypass(1_000, &pkt(1000, 0, 0), &m));
    assert_eq!(c.stats().tins[0].sent_packets, 1);
    assert_eq!(c.stats().bypassed_packets, 1);
    // The shaper is now busy until 1_000 + 1_000_000 ns.
    assert!(!c.try_bypass(500_000, &pkt(1000, 0, 1), &m));
    assert_eq!(
        c.stats().tins[0].sent_packets,
        1,
        "a refused bypass changes nothing"
    );
    assert!(c.try_bypass(1_001_000, &pkt(1000, 0, 2), &m));
    // Something queued: never bypass.
    c.enqueue(1_500_000, pkt(1000, 0, 3), &m);
    assert!(!c.try_bypass(10_000_000, &pkt(1000, 0, 4), &m));
    assert_eq!(c.dequeue(1_500_000), Dequeue::NotBefore(2_001_000));
    assert_eq!(c.next_wakeup(), Some(2_001_000));
}

#[test]
fn time_going_backwards_is_clamped_and_counted() {
    let mut c = cake(CakeConfig::default());
    c.enqueue(1_000, pkt(100, 0, 0), &udp_meta(1, 1, 1, 0));
    c.enqueue(500, pkt(100, 0, 1), &udp_meta(1, 1, 1, 0));
    assert_eq!(c.stats().clock_clamps, 1);
    assert!(matches!(c.dequeue(200), Dequeue::Packet(_)));
    assert_eq!(c.stats().clock_clamps, 2);
    assert_eq!(
        c.slots[c.flows[c.classify(&udp_meta(1, 1, 1, 0)).flow].head as usize].enqueue_ns,
        1_000
    );
}

#[test]
fn packet_limit_drops_the_head_of_the_fattest_flow() {
    let mut c = cake(CakeConfig {
        packet_limit: 10,
        ..CakeConfig::default()
    });
    // Flow 0: six 1000-byte packets; flow 1: four 100-byte packets.
    for s in 0..6 {
        c.enqueue(0, pkt(1000, 0, s), &udp_meta(1, 1, 0, 0));
    }
    for s in 0..4 {
        c.enqueue(0, pkt(100, 1, s), &udp_meta(2, 2, 1, 0));
    }
    let r = c.enqueue(0, pkt(100, 1, 4), &udp_meta(2, 2, 1, 0));
    assert_eq!(
        (r.dropped_packets, r.dropped_bytes, r.reason),
        (1, 1000, Some(DropReason::Overflow))
    );
    assert_eq!(c.len(), 10);
    let out = drain(&mut c, 1);
    let flow0: Vec<u64> = out.iter().filter(|p| p.flow == 0).map(|p| p.seq).collect();
    assert_eq!(flow0, vec![1, 2, 3, 4, 5], "the head (seq 0) went");
    c.check_invariants().unwrap();
}

#[test]
fn memory_limit_counts_footprints_and_tracks_the_peak() {
    let mut c = cake(CakeConfig {
        memlimit: Some(10_000),
        ..CakeConfig::default()
    });
    assert_eq!(c.stats().memory_limit, 10_000);
    let mut dropped = 0;
    for s in 0..20 {
        dropped += c
            .enqueue(1_000_000_000, pkt(1000, 0, s), &udp_meta(1, 1, 0, 0))
            .dropped_packets;
    }
    assert_eq!((c.len(), dropped), (10, 10));
    // Linux samples the peak before the overflow drop, so it briefly exceeds the limit.
    assert_eq!(c.stats().memory_used, 11_000, "peak, not current");
    assert_eq!(c.memory_current(), 10_000);
    assert_eq!(c.stats().dropped(DropReason::Overflow), 10);
    // The victim flow turned on BLUE.
    assert_eq!(c.stats().tins[0].unresponsive_flows, 1);
    c.check_invariants().unwrap();
}

#[test]
fn auto_memory_limit_is_four_times_rate_times_rtt_capped_by_the_packet_limit() {
    let shaped = |bits: u64| {
        cake(CakeConfig {
            rate: Rate::from_bits_per_sec(bits),
            ..CakeConfig::default()
        })
        .stats()
        .memory_limit
    };
    assert_eq!(shaped(10_000_000), 4 << 20, "at least 4 MiB");
    // 1 Gbit/s: 125 MB/s × 100 ms × 4 = 50 MB, capped at 10240 × 1514.
    assert_eq!(shaped(1_000_000_000), 10240 * 1514);
    assert_eq!(
        cake(CakeConfig::default()).stats().memory_limit,
        10240 * 1514
    );
}

#[test]
fn overflow_heap_survives_upkeep_through_enqueues_and_dequeues() {
    let mut c = cake(CakeConfig {
        packet_limit: 50,
        ..CakeConfig::default()
    });
    let mut seed = 7u64;
    for i in 0..2000u64 {
        let r = wyrand(&mut seed);
        let f = (r % 13) as u32;
        if (r >> 20) % 3 < 1 {
            c.dequeue(i);
        } else {
            c.enqueue(
                i,
                pkt(64 + (r % 1400) as usize, f, i),
                &udp_meta(f, f, f, 0),
            );
        }
        if i % 50 == 0 {
            c.check_invariants().unwrap();
        }
    }
    assert!(c.overflow_timeout > 0);
    c.check_invariants().unwrap();
}

struct AckPacket {
    info: TcpAckInfo,
    len: usize,
}

impl Packet for AckPacket {
    fn len(&self) -> usize {
        self.len
    }

    fn set_ce(&mut self) -> bool {
        false
    }

    fn tcp_ack_info(&self) -> Option<TcpAckInfo> {
        Some(self.info)
    }
}

fn tcp_meta() -> PacketMeta {
    let mut m = udp_meta(1, 2, 3, 0);
    m.keys.protocol = 6;
    m
}

fn ack_pkt(seq: u32) -> AckPacket {
    AckPacket {
        info: TcpAckInfo {
            flags: 0x10,
            ack_seq: seq,
            ..TcpAckInfo::default()
        },
        len: 66,
    }
}

#[test]
fn ack_filter_replaces_redundant_acks_in_the_queue() {
    let mut c: Cake<AckPacket> = Cake::new(&CakeConfig {
        ack_filter: AckFilterMode::Filter,
        ..CakeConfig::default()
    })
    .unwrap();
    let m = tcp_meta();
    assert_eq!(c.enqueue(0, ack_pkt(100), &m).dropped_packets, 0);
    assert_eq!(c.enqueue(0, ack_pkt(200), &m).dropped_packets, 0);
    let r = c.enqueue(0, ack_pkt(300), &m);
    assert_eq!(
        (r.dropped_packets, r.reason),
        (1, Some(DropReason::AckFilter))
    );
    assert_eq!(c.len(), 2);
    assert_eq!(c.stats().tins[0].acks_dropped_packets, 1);
    c.check_invariants().unwrap();
    let mut seqs = Vec::new();
    while let Dequeue::Packet(p) = c.dequeue(1) {
        seqs.push(p.info.ack_seq);
    }
    assert_eq!(seqs, vec![200, 300]);
}

#[test]
fn aggressive_ack_filter_keeps_only_the_newest_ack() {
    let mut c: Cake<AckPacket> = Cake::new(&CakeConfig {
        ack_filter: AckFilterMode::Aggressive,
        ..CakeConfig::default()
    })
    .unwrap();
    for s in 1..=5 {
        c.enqueue(0, ack_pkt(s * 100), &tcp_meta());
    }
    assert_eq!(c.len(), 1);
    c.check_invariants().unwrap();
}

#[test]
fn reconfigure_to_fewer_tins_moves_their_packets_and_drops_none() {
    let mut c = unlimited(FlowMode::TripleIsolate, DiffservMode::Diffserv8);
    for d in [0u8, 8, 46, 56] {
        for s in 0..3 {
            c.enqueue(
                0,
                pkt(100, u32::from(d), s),
                &udp_meta(1, 1, u32::from(d), d),
            );
        }
    }
    // Move the DRR cursor into a high tin.
    c.dequeue(1);
    c.reconfigure(&CakeConfig {
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    })
    .unwrap();
    assert_eq!(c.cursors().0, 0);
    // diffserv8's tins above 0 are gone: their packets wait in best effort's one tin.
    assert_eq!(c.stats().purged_packets, 0);
    assert_eq!(c.stats().dropped_total(), 0);
    assert_eq!(c.len(), 11);
    c.check_invariants().unwrap();
    // Every flow keeps its order.
    let out = drain(&mut c, 2);
    assert_eq!(out.len(), 11);
    for flow in [0u32, 8, 46, 56] {
        let seqs: Vec<u64> = out
            .iter()
            .filter(|p| p.flow == flow)
            .map(|p| p.seq)
            .collect();
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(seqs, sorted, "flow {flow}");
    }
}

#[test]
fn a_busy_diffserv4_queue_changed_to_besteffort_or_diffserv3_keeps_every_packet() {
    // The packets of a vanished tin go where its traffic maps now: diffserv4's voice (tin
    // 3: EF) is diffserv3's voice (tin 2).
    for (to, voice_tin) in [(DiffservMode::Besteffort, 0), (DiffservMode::Diffserv3, 2)] {
        let mut c = cake(CakeConfig {
            rate: Rate::from_bits_per_sec(10_000_000),
            diffserv: DiffservMode::Diffserv4,
            ..CakeConfig::default()
        });
        let mut n = 0;
        for (i, dscp) in [0u8, 8, 34, 46].into_iter().cycle().take(400).enumerate() {
            let flow = u32::from(dscp) * 10 + (i % 5) as u32;
            c.enqueue(0, pkt(1000, flow, i as u64), &udp_meta(flow, 2, 3, dscp));
            n += 1;
        }
        assert_eq!(c.len(), n);
        c.reconfigure(&CakeConfig {
            rate: Rate::from_bits_per_sec(10_000_000),
            diffserv: to,
            ..CakeConfig::default()
        })
        .unwrap();
        assert_eq!(c.len(), n, "{to:?}: nothing dropped");
        assert_eq!(c.stats().dropped_total(), 0);
        assert!(
            c.stats().tins[voice_tin].backlog_bytes >= 100 * 1000,
            "{to:?}"
        );
        c.check_invariants().unwrap();
        // Every packet leaves or is dropped by the AQM on the way out (they waited 10 s).
        let out = drain(&mut c, 10_000_000_000);
        assert_eq!(out.len() as u64 + c.stats().dropped_total(), n as u64);
        c.check_invariants().unwrap();
    }
}

#[test]
fn set_rate_leaves_queues_cursors_and_cobalt_alone() {
    let mut c = cake(CakeConfig {
        rate: Rate::from_bits_per_sec(100_000_000),
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    });
    for f in 0..20 {
        c.enqueue(0, pkt(1000, f, 0), &udp_meta(f, f, f, 0));
    }
    c.dequeue(0);
    c.dequeue(100_000);
    let before = (
        c.cursors(),
        c.len(),
        c.backlog_bytes(),
        c.tins[0].cparams,
        c.stats().tins[0].flow_quantum,
    );
    c.set_rate(Rate::from_bits_per_sec(50_000_000));
    let after = (
        c.cursors(),
        c.len(),
        c.backlog_bytes(),
        c.tins[0].cparams,
        c.stats().tins[0].flow_quantum,
    );
    assert_eq!(before, after);
    assert_eq!(c.stats().tins[0].threshold_rate, 6_250_000);
    assert_eq!(c.current_rate(), Rate::from_bits_per_sec(50_000_000));
    assert_eq!(
        c.rate(),
        Rate::from_bits_per_sec(100_000_000),
        "rate() is the configured one"
    );
    c.check_invariants().unwrap();
}

#[test]
fn ingress_mode_charges_aqm_drops_to_the_shaper() {
    let config = |ingress| CakeConfig {
        rate: Rate::from_bytes_per_sec(1_000_000),
        diffserv: DiffservMode::Besteffort,
        ingress,
        ..CakeConfig::default()
    };
    let run = |ingress| {
        let mut c = cake(config(ingress));
        let m = udp_meta(1, 1, 1, 0);
        for s in 0..200 {
            c.enqueue(0, pkt(1000, 0, s), &m);
        }
        // 200 ms of backlog at 1 ms per packet: COBALT starts dropping after ~5 ms.
        let mut now = 0;
        let mut delivered = 0;
        while now < 100_000_000 {
            match c.dequeue(now) {
                Dequeue::Packet(_) => delivered += 1,
                Dequeue::NotBefore(t) => now = t,
                Dequeue::Empty => break,
            }
        }
        (delivered, c.stats().dropped(DropReason::Aqm))
    };
    let (egress_sent, egress_drops) = run(false);
    let (ingress_sent, ingress_drops) = run(true);
    assert!(egress_drops > 0 && ingress_drops > 0);
    assert!(
        egress_sent >= 99,
        "egress sends at the full rate: {egress_sent}"
    );
    assert!(
        ingress_sent + ingress_drops <= 102 && ingress_sent < egress_sent,
        "drops cost shaper time in ingress mode: {ingress_sent} sent, {ingress_drops} dropped"
    );
}

/// Eight window-limited senders at 5 Mbit/s, each holding two 1000-byte packets queued and
/// sending one more per packet delivered (a dropped packet shrinks its window, as TCP's
/// does): AQM drops and packets delivered in two seconds.
fn eight_windowed_flows(round_target: bool) -> (u64, u64) {
    let mut c = cake(CakeConfig {
        rate: Rate::from_bits_per_sec(5_000_000),
        diffserv: DiffservMode::Besteffort,
        flow_mode: FlowMode::Flows,
        round_target,
        ..CakeConfig::default()
    });
    let mut seq = 0;
    for f in 0..8 {
        for _ in 0..2 {
            seq += 1;
            c.enqueue(0, pkt(1000, f, seq), &udp_meta(1, 2, f, 0));
        }
    }
    let (mut now, mut delivered) = (0, 0);
    while now < 2_000_000_000 {
        match c.dequeue(now) {
            Dequeue::Packet(p) => {
                delivered += 1;
                seq += 1;
                let f = p.flow;
                c.enqueue(now, pkt(1000, f, seq), &udp_meta(1, 2, f, 0));
            }
            Dequeue::NotBefore(t) => now = t,
            Dequeue::Empty => break,
        }
    }
    (c.stats().dropped(DropReason::Aqm), delivered)
}

#[test]
fn round_target_lets_a_slow_queue_serve_a_round_of_bulk_flows_without_dropping() {
    // A round of 8 flows takes 8 x 1.6 ms at 5 Mbit/s, and each packet waits two: 26 ms,
    // over the 5 ms target (and 4 MTU times, 9.7 ms), so plain COBALT keeps dropping until
    // every window is one packet; with the rounds' floor (4 x 8 MTU times, 78 ms) it never
    // starts.
    let (plain_drops, plain_sent) = eight_windowed_flows(false);
    let (round_drops, round_sent) = eight_windowed_flows(true);
    assert!(plain_drops >= 8, "plain COBALT dropped {plain_drops}");
    assert_eq!(round_drops, 0, "with the round's floor");
    assert!(
        round_sent >= plain_sent && round_sent >= 1240,
        "{round_sent} delivered (plain {plain_sent}); 5 Mbit/s carries 1250 in 2 s"
    );
}

#[test]
fn round_target_set_rate_recomputes_cobalt_from_the_new_rate_and_nothing_else() {
    let config = CakeConfig {
        rate: Rate::from_bits_per_sec(30_000_000),
        diffserv: DiffservMode::Besteffort,
        round_target: true,
        ..CakeConfig::default()
    };
    let mut c = cake(config.clone());
    for f in 0..20 {
        c.enqueue(0, pkt(1000, f, 0), &udp_meta(f, f, f, 0));
    }
    c.dequeue(0);
    let before = (c.cursors(), c.len(), c.stats().tins[0].flow_quantum);
    c.set_rate(Rate::from_bits_per_sec(5_000_000));
    assert_eq!(
        before,
        (c.cursors(), c.len(), c.stats().tins[0].flow_quantum),
        "queues, cursors and the quantum stay"
    );
    // As sch_cake.c's cake_set_rate derives them at 5 Mbit/s: the MTU time 2.4 ms, the
    // target max(1.5 MTU times, 5 ms).
    let at_5 = cake(CakeConfig {
        rate: Rate::from_bits_per_sec(5_000_000),
        ..config
    });
    assert_eq!(c.tins[0].cparams, at_5.tins[0].cparams);
    assert_eq!(c.tins[0].cparams.mtu_time_ns / 100_000, 24);
    c.check_invariants().unwrap();
}

#[test]
fn autorate_estimates_the_arrival_rate() {
    let mut c = cake(CakeConfig {
        autorate_ingress: true,
        rate: Rate::from_bytes_per_sec(10_000_000),
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    });
    // Bursts of 10 packets 1 µs apart, then a 1 ms gap: the window rate is ~10 MB/s…
    let m = udp_meta(1, 1, 1, 0);
    let mut now = 0;
    for _ in 0..2000 {
        for _ in 0..10 {
            now += 1_000;
            c.enqueue(now, pkt(1000, 0, 0), &m);
            c.dequeue(now);
        }
        now += 1_000_000;
    }
    let est = c.stats().capacity_estimate;
    assert!(est > 1_000_000, "estimate {est}");
    assert_eq!(c.current_rate().bytes_per_sec(), est * 15 / 16);
}

#[test]
fn tin_parameters_follow_the_rate() {
    let c = cake(CakeConfig {
        rate: Rate::from_bytes_per_sec(64_000),
        ..CakeConfig::default()
    });
    let st = &c.stats().tins[0];
    assert_eq!(st.flow_quantum, 300, "rate >> 12 clamped to 300");
    // 1514 bytes at 64 kB/s take 23.66 ms, so target becomes 1.5 of that.
    assert_eq!(st.target_us, 35_484);
    assert_eq!(c.stats().tins[1].threshold_rate, 4_000);
    let unlimited = cake(CakeConfig::default());
    assert_eq!(unlimited.stats().tins[0].flow_quantum, 1514);
    assert_eq!(unlimited.stats().tins[0].target_us, 5_000);
    assert_eq!(unlimited.stats().tins[0].interval_us, 100_000);
}

#[test]
fn overhead_is_charged_and_length_stats_tracked() {
    let mut config = CakeConfig {
        rate: Rate::from_bytes_per_sec(1_000_000),
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    };
    LinkPreset::Ethernet.apply(&mut config);
    let mut c = cake(config);
    c.enqueue(0, pkt(60, 0, 0), &udp_meta(1, 1, 1, 0));
    c.enqueue(0, pkt(1514, 0, 1), &udp_meta(1, 1, 1, 0));
    let s = c.stats();
    assert_eq!(
        (s.min_netlen, s.max_netlen, s.min_adjlen, s.max_adjlen),
        (46, 1500, 84, 1538)
    );
    assert!(matches!(c.dequeue(0), Dequeue::Packet(_)));
    // 84 bytes at 1 µs/byte.
    assert_eq!(c.dequeue(0), Dequeue::NotBefore(84_000));
}

#[test]
fn any_packet_meta_is_handled_without_panicking() {
    let mut c = cake(CakeConfig {
        packet_limit: 64,
        ack_filter: AckFilterMode::Aggressive,
        fwmark_mask: u32::MAX,
        ..CakeConfig::default()
    });
    let mut seed = 99u64;
    for i in 0..3000u64 {
        let r = wyrand(&mut seed);
        let mut m = PacketMeta::default();
        m.keys.l3 = match r % 3 {
            0 => crate::L3Kind::NonIp,
            1 => crate::L3Kind::Ipv4,
            _ => crate::L3Kind::Ipv6,
        };
        m.keys.src_addr = (r as u128 * 0x1234_5678_9abc).to_le_bytes();
        m.keys.dst_addr = ((r >> 7) as u128).to_le_bytes();
        m.keys.src_port = (r >> 16) as u16;
        m.keys.flow_label = (r >> 20) as u32;
        m.dscp = (r >> 30) as u8;
        m.ecn = (r >> 38) as u8;
        m.l4_hash = (r & 1 == 0).then_some((r >> 33) as u32);
        m.mark = (r >> 40) as u32;
        m.l2_len = (r >> 44) as u16;
        m.gso_segs = (r >> 50) as u16;
        let len = match r % 5 {
            0 => 0,
            1 => usize::MAX,
            _ => (r % 70_000) as usize,
        };
        c.enqueue(i, pkt(len, 0, i), &m);
        let _ = c.classify(&m);
        if r & 3 == 0 {
            c.dequeue(i * 1000);
        }
        let _ = c.try_bypass(i, &pkt(len, 0, i), &m);
    }
    c.check_invariants().unwrap();
}

#[test]
fn decaying_flows_are_served_and_retired() {
    let mut c = cake(CakeConfig::default());
    let m = udp_meta(1, 1, 1, 0);
    c.enqueue(0, pkt(100, 0, 0), &m);
    assert!(matches!(c.dequeue(1), Dequeue::Packet(_)));
    // Empty now, but COBALT's activity timeout keeps it decaying for one interval.
    assert_eq!(c.dequeue(2), Dequeue::Empty);
    c.enqueue(3, pkt(100, 0, 1), &m);
    assert!(matches!(c.dequeue(4), Dequeue::Packet(_)));
    // The flow emptied: the next dequeue retires it once the interval has passed.
    c.enqueue(200_000_000, pkt(100, 1, 0), &udp_meta(2, 2, 2, 0));
    assert!(matches!(c.dequeue(200_000_001), Dequeue::Packet(_)));
    c.check_invariants().unwrap();
}

#[test]
fn a_retired_flow_comes_back_to_its_home_way_with_its_hosts() {
    let mut c = cake(CakeConfig::default());
    let m = udp_meta(1, 1, 1, 0);
    c.enqueue(0, pkt(100, 0, 0), &m);
    assert!(matches!(c.dequeue(1), Dequeue::Packet(_)));
    // Another flow's dequeues past the activity timeout retire the first (set None, tag
    // kept in its home way).
    let other = udp_meta(2, 2, 2, 0);
    for (i, t) in [200_000_000u64, 200_000_010].into_iter().enumerate() {
        c.enqueue(t, pkt(100, 1, i as u64), &other);
        assert!(matches!(c.dequeue(t + 1), Dequeue::Packet(_)));
    }
    let expect = c.classify(&m);
    let fid = expect.tin * FLOWS_PER_TIN + expect.flow;
    assert_eq!(c.flows[fid].set, FlowSet::None);
    assert_eq!(c.flows[fid].tag, expect.flow_hash);
    // A retired flow's host indices mean nothing (its hosts' entries may have gone to
    // others since): make them wrong, so that only a reallocation puts them right.
    let wrong = |h: Option<usize>| ((h.unwrap_or(0) + 1) % FLOWS_PER_TIN) as u16;
    c.flows[fid].srchost = wrong(expect.src_host);
    c.flows[fid].dsthost = wrong(expect.dst_host);
    let ways_before = {
        let st = &c.stats().tins[expect.tin];
        (
            st.way_directs,
            st.way_misses,
            st.way_indirect_hits,
            st.way_collisions,
        )
    };
    // It comes back where the search would put it, with the hosts the search would give it,
    // and the way counters count nothing (as for a tag found in the home way by the search).
    c.enqueue(200_000_020, pkt(100, 0, 1), &m);
    assert_eq!(c.flows[fid].set, FlowSet::Sparse);
    assert_eq!(
        expect.src_host.map(|h| h as u16),
        Some(c.flows[fid].srchost)
    );
    assert_eq!(
        expect.dst_host.map(|h| h as u16),
        Some(c.flows[fid].dsthost)
    );
    let st = &c.stats().tins[expect.tin];
    assert_eq!(
        (
            st.way_directs,
            st.way_misses,
            st.way_indirect_hits,
            st.way_collisions
        ),
        ways_before
    );
    c.check_invariants().unwrap();
    assert!(matches!(c.dequeue(200_000_021), Dequeue::Packet(p) if p.flow == 0));
}

/// The tin DRR loop exactly as Linux runs it, from the start of a round; returns the tin
/// it stops at.
fn naive_drr(c: &mut Cake<TestPacket>) -> usize {
    let mut t = 0;
    loop {
        let turn = &mut c.turns[t];
        let active = turn.active_flows > 0;
        if turn.deficit >= 0 && active {
            return t;
        }
        if turn.deficit <= 0 {
            turn.deficit += i32::from(turn.quantum);
        }
        t = (t + 1) % c.tin_cnt;
    }
}

#[test]
fn skipping_drr_rounds_matches_running_them() {
    let mut seed = 5u64;
    for _ in 0..500 {
        let mut a = unlimited(FlowMode::Flows, DiffservMode::Diffserv8);
        let mut any = false;
        for t in 0..8 {
            let r = wyrand(&mut seed);
            a.turns[t].deficit = (r % 20_000) as i32 - 15_000;
            let active = r >> 40 & 1 == 1;
            a.turns[t].active_flows = u16::from(active);
            any |= active;
        }
        if !any {
            continue;
        }
        let mut b = a.clone();
        let ta = naive_drr(&mut a);
        b.skip_drr_rounds();
        let tb = naive_drr(&mut b);
        let da: Vec<i32> = a.turns.iter().map(|t| t.deficit).collect();
        let db: Vec<i32> = b.turns.iter().map(|t| t.deficit).collect();
        assert_eq!((ta, da), (tb, db));
    }
}

#[test]
fn ack_filter_keeps_the_overflow_heap_valid() {
    let mut c: Cake<AckPacket> = Cake::new(&CakeConfig {
        ack_filter: AckFilterMode::Aggressive,
        packet_limit: 8,
        ..CakeConfig::default()
    })
    .unwrap();
    // Data segments overflow the limit so the heap is maintained; shrinking ACKs (each
    // newer one shorter than the one it replaces) then shrink flows in place.
    for s in 0..60u32 {
        let mut m = tcp_meta();
        m.keys.src_port = 1000 + (s % 5) as u16;
        let mut p = ack_pkt(s * 10);
        if s % 4 == 0 {
            p.info.payload_len = 1000;
            p.len = 1066;
        } else {
            p.len = 600 - s as usize * 8;
        }
        c.enqueue(u64::from(s), p, &m);
        c.check_invariants().unwrap();
    }
    assert!(c.stats().dropped(DropReason::AckFilter) > 0);
    assert!(c.stats().dropped(DropReason::Overflow) > 0);
}

#[test]
fn dequeue_returns_even_when_counts_and_lists_disagree() {
    // Only a bug could make a tin's flow counts claim flows that its lists do not hold;
    // the visit budget must still end the dequeue instead of hanging the caller.
    for diffserv in [DiffservMode::Besteffort, DiffservMode::Diffserv3] {
        let mut c = unlimited(FlowMode::TripleIsolate, diffserv);
        c.enqueue(0, pkt(1000, 1, 0), &udp_meta(1, 2, 3, 0));
        let t = c.select_tin(&udp_meta(1, 2, 3, 0));
        c.tins[t].lists = Lists::default();
        c.stats.tins[t].sparse_flows = 1;
        assert!(matches!(c.dequeue(1), Dequeue::Empty));
        assert!(matches!(c.dequeue(2), Dequeue::Empty));
    }
}

#[test]
fn every_tin_samples_its_own_delays_when_tins_alternate() {
    // Best effort and voice packets alternate; each tin's histogram must see its own share.
    let mut c = unlimited(FlowMode::Flows, DiffservMode::Diffserv3);
    let (be, ef) = (udp_meta(1, 1, 1, 0), udp_meta(2, 2, 2, 46));
    for i in 0..320u64 {
        let m = if i % 2 == 0 { &be } else { &ef };
        c.enqueue(i * 1000, pkt(100, (i % 2) as u32, i), m);
        assert!(matches!(c.dequeue(i * 1000 + 500), Dequeue::Packet(_)));
    }
    for t in [c.select_tin(&be), c.select_tin(&ef)] {
        let st = &c.stats().tins[t];
        assert_eq!(st.sent_packets, 160);
        assert_eq!(st.delay_histogram.len(), 10, "tin {t}");
    }
}

/// Tin `t`'s old list, head first.
fn old_list(c: &Cake<TestPacket>, t: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut f = c.tins[t].lists[ListId::Old].head;
    while f != NIL16 {
        out.push(usize::from(f));
        f = c.links[usize::from(f)].next;
    }
    out
}

/// Deficit refills at the head of tin `t`'s old list one visit at a time, as sch_cake.c
/// runs them, for at most `budget` visits. Returns the number of refills.
fn naive_refills(c: &mut Cake<TestPacket>, t: usize, budget: u32) -> u32 {
    let mut refills = 0;
    while refills < budget {
        let fid = usize::from(c.tins[t].lists[ListId::Old].head);
        if c.flows[fid].deficit > 0 {
            break;
        }
        c.leave_sparse_rotation(t, fid);
        let dither = (c.next_rand() >> 48) as u32;
        let q = c.flow_quantum(fid, dither);
        c.flows[fid].deficit = c.flows[fid].deficit.saturating_add(q);
        c.list_move_head_to_tail(fid, ListId::Old, ListId::Old);
        c.cur_flow = (fid % FLOWS_PER_TIN) as u32;
        refills += 1;
    }
    refills
}

#[test]
fn a_run_of_refills_matches_refilling_one_flow_at_a_time() {
    let mut seed = 11u64;
    let mut runs = 0;
    for _ in 0..300 {
        let mut a = unlimited(FlowMode::TripleIsolate, DiffservMode::Besteffort);
        let flows = 1 + (wyrand(&mut seed) % 40) as u32;
        for f in 0..flows {
            let m = udp_meta(f % 3, f % 2, f, 0);
            for k in 0..3 {
                a.enqueue(0, pkt(1500, f, k), &m);
            }
        }
        // Serve a little so that flows turn bulk and sit on the old list.
        for i in 0..u64::from(flows) * 2 {
            a.dequeue(i);
        }
        let old = old_list(&a, 0);
        if old.is_empty() {
            continue;
        }
        // Deficits deep enough that runs wrap the list, host loads small enough that
        // they end.
        for &fid in &old {
            a.flows[fid].deficit = -((wyrand(&mut seed) % 6000) as i32);
        }
        let budget = 1 + (wyrand(&mut seed) % 200) as u32;
        let mut b = a.clone();
        let refills = naive_refills(&mut a, 0, budget);
        let left = b.refill_old_run(0, old[0], budget);
        assert_eq!(left.is_some(), refills < budget, "budget {budget}");
        assert_eq!(budget - left.unwrap_or(0), refills);
        assert_eq!(old_list(&a, 0), old_list(&b, 0));
        let deficits = |c: &Cake<TestPacket>| -> Vec<i32> {
            old.iter().map(|&f| c.flows[f].deficit).collect()
        };
        assert_eq!(deficits(&a), deficits(&b));
        assert_eq!(a.rng, b.rng);
        if left.is_none() {
            assert_eq!(a.cur_flow, b.cur_flow);
        }
        b.check_invariants().unwrap();
        runs += 1;
    }
    assert!(runs > 200, "only {runs} runs had an old list");
}

#[test]
fn raising_the_rate_rescales_the_wait_still_pending() {
    // 2 kbit/s: one 1514-byte packet holds the shaper for about 6 s.
    let mut c = cake(CakeConfig {
        rate: Rate::from_bits_per_sec(2_000),
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    });
    for seq in 0..3 {
        c.enqueue(0, pkt(1514, 1, seq), &udp_meta(1, 2, 3, 0));
    }
    assert!(matches!(c.dequeue(0), Dequeue::Packet(_)));
    let slow = c.next_wakeup().unwrap();
    assert!(slow > 5_000_000_000, "{slow}");
    // 1 ms later the rate goes to 50 Mbit/s: the rest of the wait is 25000 times shorter.
    c.set_rate(Rate::from_bits_per_sec(50_000_000));
    let fast = c.next_wakeup().unwrap();
    assert!(fast < 1_000_000, "still waiting until {fast} ns");
    assert!(matches!(c.dequeue(1_000_000), Dequeue::Packet(_)));
    c.check_invariants().unwrap();
    // Lowering the rate lengthens what is left of the wait in the same proportion.
    let mut c = cake(CakeConfig {
        rate: Rate::from_bits_per_sec(2_000),
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    });
    for seq in 0..2 {
        c.enqueue(0, pkt(1514, 1, seq), &udp_meta(1, 2, 3, 0));
    }
    assert!(matches!(c.dequeue(0), Dequeue::Packet(_)));
    let before = c.next_wakeup().unwrap();
    c.set_rate(Rate::from_bits_per_sec(1_000));
    let after = c.next_wakeup().unwrap();
    assert!(after.abs_diff(2 * before) <= 2, "{before} -> {after}");
}

#[test]
fn a_rescaled_wait_keeps_the_tin_clocks_in_step() {
    let mut c = cake(CakeConfig {
        rate: Rate::from_bits_per_sec(8_000),
        diffserv: DiffservMode::Diffserv4,
        ..CakeConfig::default()
    });
    for seq in 0..4 {
        c.enqueue(0, pkt(1000, 1, seq), &udp_meta(1, 2, 3, 0));
    }
    assert!(matches!(c.dequeue(0), Dequeue::Packet(_)));
    c.set_rate(Rate::from_bits_per_sec(80_000_000));
    // Every clock was ~1 s ahead; now ~100 µs: the next packets leave within a few ms.
    let sent = (1..=20u64)
        .filter(|ms| matches!(c.dequeue(ms * 1_000_000), Dequeue::Packet(_)))
        .count();
    assert_eq!(sent, 3);
    c.check_invariants().unwrap();
}

// A subscriber-sized instance: 64 flows per tin.

fn subscriber(config: CakeConfig) -> SubscriberCake<TestPacket> {
    Cake::new(&config).unwrap()
}

/// Enqueues `per_flow` 1000-byte packets of each flow in `hashes` round-robin (flow id =
/// position in `hashes`, the hash picks the bucket), then dequeues `n` packets unlimited and
/// returns the packets delivered per flow.
fn deliveries<const FLOWS: usize>(
    c: &mut Cake<TestPacket, FLOWS>,
    hashes: &[u32],
    per_flow: u64,
    n: usize,
) -> Vec<u32> {
    for seq in 0..per_flow {
        for (f, &h) in hashes.iter().enumerate() {
            c.enqueue(0, pkt(1000, f as u32, seq), &with_hash(h));
        }
    }
    c.check_invariants().unwrap();
    let mut got = vec![0u32; hashes.len()];
    for _ in 0..n {
        match c.dequeue(0) {
            Dequeue::Packet(p) => got[p.flow as usize] += 1,
            other => panic!("{other:?} with packets queued"),
        }
    }
    c.check_invariants().unwrap();
    got
}

#[test]
fn eight_flows_with_one_home_bucket_each_get_a_way_and_an_equal_share() {
    let mut c = subscriber(CakeConfig {
        flow_mode: FlowMode::Flows,
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    });
    // Hashes 0, 64, ..., 448 all have home bucket 0: the set-associative lookup spreads
    // them over the 8 ways of set 0, so none shares a queue.
    let hashes: Vec<u32> = (0..8).map(|k| k * 64).collect();
    let got = deliveries(&mut c, &hashes, 40, 8 * 20);
    assert_eq!(c.stats().tins[0].way_collisions, 0);
    for (f, &n) in got.iter().enumerate() {
        assert!((19..=21).contains(&n), "flow {f}: {n} of 160, {got:?}");
    }
}

#[test]
fn a_subscriber_instance_with_more_flows_than_buckets_shares_per_bucket() {
    let mut c = subscriber(CakeConfig {
        flow_mode: FlowMode::Flows,
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    });
    // 96 flows over 64 buckets: hashes 0..64 fill every way of every set, then 64..96 find
    // their sets full and share their home buckets 0..32 with flows 0..32.
    let hashes: Vec<u32> = (0..96).collect();
    let got = deliveries(&mut c, &hashes, 40, 64 * 20);
    assert!(c.stats().tins[0].way_collisions > 0);
    assert_eq!(
        c.stats().tins[0].sparse_flows + c.stats().tins[0].bulk_flows,
        64
    );
    // Every bucket gets an equal share, split between the flows that share it.
    for b in 0..64 {
        let bucket: u32 = got
            .iter()
            .enumerate()
            .filter(|&(f, _)| f % 64 == b)
            .map(|(_, &n)| n)
            .sum();
        assert!((19..=21).contains(&bucket), "bucket {b}: {bucket}, {got:?}");
    }
    for (f, &n) in got.iter().enumerate() {
        let want = if f % 64 < 32 { 10 } else { 20 };
        assert!(n.abs_diff(want) <= 1, "flow {f}: {n} not ~{want}, {got:?}");
    }
}

/// Host A's 6 flows (60 packets each) and host B's 1 flow (360 packets) through `c`: the
/// packets of each host among the first 300 delivered.
fn two_hosts<const FLOWS: usize>(c: &mut Cake<TestPacket, FLOWS>) -> (u32, u32) {
    for seq in 0..60 {
        for f in 0..6u32 {
            c.enqueue(0, pkt(1000, f, seq), &udp_meta(10, 99, 1000 + f, 0));
        }
        for k in 0..6 {
            c.enqueue(0, pkt(1000, 6, seq * 6 + k), &udp_meta(20, 99, 2000, 0));
        }
    }
    let (mut a, mut b) = (0, 0);
    for _ in 0..300 {
        match c.dequeue(0) {
            Dequeue::Packet(p) if p.flow < 6 => a += 1,
            Dequeue::Packet(_) => b += 1,
            other => panic!("{other:?}"),
        }
    }
    (a, b)
}

#[test]
fn a_subscriber_instance_isolates_hosts_like_the_link_instance() {
    // Dual-srchost: source host A with 6 flows and source host B with 1 flow share the
    // queue equally, in the 64-flow instance as in the 1024-flow one.
    let config = CakeConfig {
        flow_mode: FlowMode::DualSrchost,
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    };
    let (a, b) = two_hosts(&mut subscriber(config.clone()));
    // Within the first quanta that each of A's new flows gets whole.
    assert!(a.abs_diff(b) <= 20, "host A {a}, host B {b}");
    assert_eq!((a, b), two_hosts(&mut cake(config)));
}

/// The probability that `n` flows hashed uniformly into `sets` sets of [`SET_WAYS`] ways
/// put more than [`SET_WAYS`] into some set (some flows must then share a queue).
fn set_overflow_probability(n: usize, sets: usize) -> f64 {
    // ways[m] = number of ways to put m labelled flows into the sets seen so far, each set
    // holding at most SET_WAYS.
    let binom =
        |n: usize, k: usize| -> f64 { (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product() };
    let mut ways = vec![0f64; n + 1];
    ways[0] = 1.0;
    for _ in 0..sets {
        let mut next = vec![0f64; n + 1];
        for (m, slot) in next.iter_mut().enumerate() {
            *slot = (0..=m.min(SET_WAYS))
                .map(|k| binom(m, k) * ways[m - k])
                .sum();
        }
        ways = next;
    }
    1.0 - ways[n] / (sets as f64).powi(n as i32)
}

#[test]
fn subscriber_collision_rates() {
    // The rates SUBSCRIBER_FLOWS_PER_TIN's docs quote.
    let sets = SUBSCRIBER_FLOWS_PER_TIN / SET_WAYS;
    let pct = |n| (set_overflow_probability(n, sets) * 1e4).round() / 100.0;
    assert_eq!(set_overflow_probability(8, sets), 0.0);
    assert_eq!(pct(16), 0.03);
    assert_eq!(pct(20), 0.27);
    assert_eq!(pct(24), 1.32);
    assert_eq!(pct(32), 11.15);
    let half = |n| (set_overflow_probability(n, sets / 2) * 100.0).round();
    assert_eq!((half(16), half(20)), (3.0, 16.0));
}

#[test]
fn a_subscriber_instance_fits_in_64_kib_fresh_and_while_active() {
    use crate::testing::LenPacket;
    use std::mem::size_of;
    // A packet handle of 8 bytes with a niche, as DPDK's `Mbuf` is: 32-byte slots.
    assert_eq!(size_of::<Slot<LenPacket>>(), 32);
    let mut c: SubscriberCake<LenPacket> = Cake::new(&CakeConfig::default()).unwrap();
    // Tables: 8 tins × 64 flows × (flow 64 + link 4 + tag 4 + host 8 + bulk counts 2 × 2
    // + heap 2 × 2) bytes; the slab's first 64 slots; no delay histograms, only the 8
    // unused ones of 3 counts.
    let tables = 8 * 64 * (64 + 4 + 4 + 8 + 4 + 4);
    let hist = 8 * 3 * 8;
    let inline = size_of::<SubscriberCake<LenPacket>>();
    assert_eq!(c.slab_bytes(), 64 * 32);
    assert_eq!(c.memory_bytes(), tables + 64 * 32 + hist);
    assert!(
        inline + c.memory_bytes() <= 60 << 10,
        "{inline} + {}",
        c.memory_bytes()
    );
    // Active: 20 flows over all three tins with 100 packets queued grow the slab to 128
    // slots; up to 128 queued packets the instance stays within 64 KiB.
    for seq in 0..100u32 {
        let f = seq % 20;
        c.enqueue(
            0,
            LenPacket(1000),
            &udp_meta(1, 2, f, [0, 8, 46][f as usize % 3]),
        );
    }
    assert_eq!(c.len(), 100);
    assert_eq!(c.memory_bytes(), tables + 128 * 32 + hist);
    assert!(
        inline + c.memory_bytes() <= 64 << 10,
        "{inline} + {}",
        c.memory_bytes()
    );
    c.check_invariants().unwrap();
}

#[test]
fn a_subscriber_slab_doubles_up_to_the_packet_limit_and_no_further() {
    let slot = std::mem::size_of::<Slot<TestPacket>>();
    let mut c = subscriber(CakeConfig {
        packet_limit: 300,
        ..CakeConfig::default()
    });
    let mut sizes = vec![c.slab_bytes() / slot];
    for seq in 0..1000u64 {
        c.enqueue(
            0,
            pkt(100, (seq % 7) as u32, seq),
            &udp_meta(1, 2, (seq % 7) as u32, 0),
        );
        if sizes.last() != Some(&(c.slab_bytes() / slot)) {
            sizes.push(c.slab_bytes() / slot);
        }
    }
    assert_eq!(sizes, [64, 128, 256, 301]);
    assert_eq!(c.len(), 300);
    assert_eq!(c.stats().dropped(DropReason::Overflow), 700);
    c.check_invariants().unwrap();
    // The link instance preallocates its slab.
    let link = cake(CakeConfig {
        packet_limit: 300,
        ..CakeConfig::default()
    });
    assert_eq!(link.slab_bytes(), 301 * slot);
}

#[test]
fn the_ack_filter_grows_with_a_subscriber_slab() {
    let mut c = subscriber(CakeConfig {
        ack_filter: AckFilterMode::Aggressive,
        ..CakeConfig::default()
    });
    for seq in 0..200u64 {
        let mut p = pkt(1000, (seq % 4) as u32, seq);
        p.ack = Some(TcpAckInfo {
            flags: 0x10,
            ack_seq: seq as u32 * 1000,
            ..TcpAckInfo::default()
        });
        c.enqueue(0, p, &udp_meta(1, 2, (seq % 4) as u32, 0));
        c.check_invariants().unwrap();
    }
    // Only the newest ACK of each of the 4 flows stays; the slab never had to grow.
    assert_eq!(c.len(), 4);
    assert_eq!(c.ack.len(), c.slots.len());
}

/// Everything `c` answers to a fixed, varied sequence (several flows, hosts and tins, pure
/// ACKs, a shaped rate with overflow and AQM drops, then a drain), as text to compare.
fn transcript<const FLOWS: usize>(c: &mut Cake<TestPacket, FLOWS>) -> Vec<String> {
    let mut out = Vec::new();
    let mut now = 1_000_000u64;
    for seq in 0..3000u64 {
        let f = (seq * 7 % 23) as u32;
        let mut p = pkt(64 + (seq as usize * 37) % 1400, f, seq);
        p.ect = seq % 3 == 0;
        if f % 5 == 0 {
            p.ack = Some(TcpAckInfo {
                flags: 0x10,
                ack_seq: seq as u32 * 100,
                ..TcpAckInfo::default()
            });
        }
        let m = udp_meta(f % 4, f % 3, f, [0, 8, 46, 10][f as usize % 4]);
        out.push(format!("{:?}", c.enqueue(now, p, &m)));
        now += 3_000;
        if seq % 3 == 0 {
            out.push(format!("{:?}", c.dequeue(now)));
        }
    }
    loop {
        match c.dequeue(now) {
            Dequeue::Empty => break,
            Dequeue::NotBefore(t) => now = t,
            d => out.push(format!("{d:?}")),
        }
    }
    out.push(format!("{:?}", c.stats()));
    c.check_invariants().unwrap();
    out
}

fn reset_behaves_as_new<const FLOWS: usize>() {
    let config = CakeConfig {
        rate: Rate::from_bits_per_sec(20_000_000),
        ack_filter: AckFilterMode::Filter,
        packet_limit: 500,
        ..CakeConfig::default()
    };
    let mut fresh: Cake<TestPacket, FLOWS> = Cake::new(&config).unwrap();
    let want = transcript(&mut fresh);
    let mut used: Cake<TestPacket, FLOWS> = Cake::new(&config).unwrap();
    transcript(&mut used);
    // Used and left with packets queued, a clock advanced and statistics counted.
    for seq in 0..100 {
        used.enqueue(
            5_000_000_000,
            pkt(1000, seq % 9, u64::from(seq)),
            &udp_meta(1, 2, seq % 9, 0),
        );
    }
    let (bytes, slab) = (used.memory_bytes(), used.slots.as_ptr());
    used.reset();
    assert_eq!(used.len(), 0);
    assert_eq!(
        (used.memory_bytes(), used.slots.as_ptr()),
        (bytes, slab),
        "reallocated"
    );
    used.check_invariants().unwrap();
    assert_eq!(
        format!("{:?}", used.stats()),
        format!(
            "{:?}",
            Cake::<TestPacket, FLOWS>::new(&config).unwrap().stats()
        )
    );
    let got = transcript(&mut used);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "step {i}");
    }
}

#[test]
fn a_reset_instance_behaves_exactly_as_a_new_one() {
    reset_behaves_as_new::<SUBSCRIBER_FLOWS_PER_TIN>();
    reset_behaves_as_new::<FLOWS_PER_TIN>();
}

#[test]
fn wash_clears_the_dscp_of_queued_and_passed_packets_after_classifying() {
    for wash in [false, true] {
        let mut c = cake(CakeConfig {
            wash,
            ..CakeConfig::default()
        });
        let ef = PacketMeta {
            dscp: 46,
            ..udp_meta(1, 2, 3, 0)
        };
        c.enqueue(0, pkt(100, 0, 0), &ef);
        let out = drain(&mut c, 0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].washed, wash, "queued packet, wash {wash}");
        // EF still chose the Voice tin: the wash comes after the classification.
        assert_eq!(c.stats().tins[2].sent_packets, 1, "wash {wash}");
        let mut passed = [pkt(100, 0, 1), pkt(100, 0, 2)];
        c.rewrite_passed(&mut passed, &[ef, ef]);
        assert!(
            passed.iter().all(|p| p.washed == wash),
            "passed packets, wash {wash}"
        );
    }
}

#[test]
fn the_fields_every_packet_reads_fill_the_first_five_lines() {
    use crate::testing::LenPacket;
    use std::mem::{align_of, offset_of};
    type C = Cake<LenPacket, SUBSCRIBER_FLOWS_PER_TIN>;
    assert_eq!(align_of::<C>(), 64);
    // Each line starts where the declaration's comments say.
    assert_eq!(offset_of!(C, rate), 64);
    assert_eq!(offset_of!(C, overhead), 128);
    assert_eq!(offset_of!(C, turns), 192);
    assert_eq!(offset_of!(C, slots), 256);
    // The two fields of the autorate state every enqueue writes end line 4.
    assert_eq!(offset_of!(C, autorate), 320 - 16);
    assert_eq!(offset_of!(Autorate, last_packet_time), 8);
    // Each tin's state is one line.
    assert_eq!((align_of::<Tin>(), std::mem::size_of::<Tin>()), (64, 64));
    assert_eq!(offset_of!(C, tins) % 64, 0);
    // The per-packet scalars of the statistics share one line, and each tin's per-packet
    // counters are one line of their own.
    assert_eq!(align_of::<CakeStats>(), 64);
    assert!(offset_of!(CakeStats, avg_netoff_fp) < 64 - 4);
    assert_eq!(offset_of!(CakeStats, tins), 64);
    assert_eq!(std::mem::size_of::<TinStats>(), 256);
    assert_eq!(offset_of!(TinStats, base_delay_ns), 64 - 8);
}
