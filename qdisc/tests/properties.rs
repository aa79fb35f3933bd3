//! Property tests of CAKE (proptest): conservation, order and invariants over random
//! operation sequences (including rate changes and reconfiguration), agreement event by
//! event with the plain reference model of `sch_cake.c` (`reference/`), and fairness
//! between flows and between hosts, and low delay for sparse flows, in virtual time.

mod reference;

use std::collections::HashSet;

use proptest::prelude::*;
use qdisc::cake::{AckFilterMode, Cake, CakeConfig, DiffservMode, FlowMode, LinkPreset};
use qdisc::testing::{udp_meta, Harness, Source, TestPacket};
use qdisc::{Dequeue, Qdisc, Rate, TcpAckInfo};

use reference::lockstep::Lockstep;

const SEC: u64 = 1_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        flow: u8,
        len: u16,
        ect: bool,
        ack: bool,
    },
    Dequeue {
        dt_us: u16,
    },
    Bypass {
        flow: u8,
        len: u16,
    },
    SetRate {
        kbit: u32,
    },
    Reconfigure {
        kbit: u32,
        limit: u16,
        preset: u8,
        ingress: bool,
        memlimit: Option<u32>,
    },
    ChangeModes {
        diffserv: u8,
        flow_mode: u8,
    },
}

fn op(modes: bool) -> impl Strategy<Value = Op> {
    let base = prop_oneof![
        8 => (0u8..24, 0u16..1600, any::<bool>(), any::<bool>())
            .prop_map(|(flow, len, ect, ack)| Op::Enqueue { flow, len, ect, ack }),
        6 => (0u16..3000).prop_map(|dt_us| Op::Dequeue { dt_us }),
        1 => (0u8..24, 0u16..1600).prop_map(|(flow, len)| Op::Bypass { flow, len }),
        1 => prop_oneof![Just(0u32), 1u32..200_000].prop_map(|kbit| Op::SetRate { kbit }),
        1 => (prop_oneof![Just(0u32), 1u32..200_000], 1u16..64, 0u8..15, any::<bool>(),
              proptest::option::of(1000u32..100_000))
            .prop_map(|(kbit, limit, preset, ingress, memlimit)| Op::Reconfigure {
                kbit, limit, preset, ingress, memlimit,
            }),
    ];
    if modes {
        prop_oneof![
            10 => base,
            1 => (0u8..5, 0u8..8).prop_map(|(diffserv, flow_mode)| Op::ChangeModes { diffserv, flow_mode }),
        ]
        .boxed()
    } else {
        base.boxed()
    }
}

const DIFFSERV: [DiffservMode; 5] = DiffservMode::ALL;
const FLOW_MODES: [FlowMode; 8] = FlowMode::ALL;

/// Applies `ops` to an instance of `FLOWS` flows per tin and checks, after every step, the
/// instance's own invariants and that packets in = out + dropped + queued, and at the end
/// (after draining) conservation of packets and bytes: in = out + dropped, every packet
/// out at most once, and (unless `modes` lets flows move between queues, or the caller
/// expects shared queues) per-flow order.
fn run_ops<const FLOWS: usize>(
    initial: CakeConfig,
    ops: &[Op],
    modes: bool,
) -> Result<(), TestCaseError> {
    let mut config = initial;
    let mut c: Cake<TestPacket, FLOWS> = Cake::new(&config).unwrap();
    let mut now = 0u64;
    let mut seqs = [0u64; 24];
    let (mut in_pkts, mut in_bytes, mut out_pkts, mut out_bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut seen = HashSet::new();
    let mut last = [None::<u64>; 24];
    let mut deliver =
        |p: TestPacket, out_pkts: &mut u64, out_bytes: &mut u64| -> Result<(), TestCaseError> {
            *out_pkts += 1;
            *out_bytes += p.len as u64;
            prop_assert!(
                seen.insert((p.flow, p.seq)),
                "duplicate {:?}",
                (p.flow, p.seq)
            );
            if !modes {
                let l = &mut last[p.flow as usize];
                prop_assert!(
                    l.map_or(true, |s| s < p.seq),
                    "flow {} out of order: {:?} then {}",
                    p.flow,
                    l,
                    p.seq
                );
                *l = Some(p.seq);
            }
            Ok(())
        };
    for o in ops {
        match *o {
            Op::Enqueue {
                flow,
                len,
                ect,
                ack,
            } => {
                // One DSCP per flow: a flow split over tins may legitimately reorder.
                let dscp = [0u8, 8, 46, 10, 16, 24, 32, 48][usize::from(flow % 8)];
                let f = usize::from(flow);
                let mut p = TestPacket::new(usize::from(len), u32::from(flow), seqs[f]);
                p.ect = ect;
                if ack {
                    // A pure ACK, newer than every earlier one of this flow: the ACK
                    // filter may drop those still queued.
                    p.ack = Some(TcpAckInfo {
                        flags: 0x10,
                        ack_seq: (seqs[f] as u32).wrapping_mul(1000),
                        ..TcpAckInfo::default()
                    });
                }
                seqs[f] += 1;
                in_pkts += 1;
                in_bytes += u64::from(len);
                c.enqueue(
                    now,
                    p,
                    &udp_meta(
                        u32::from(flow % 5),
                        u32::from(flow % 3),
                        u32::from(flow),
                        dscp,
                    ),
                );
            }
            Op::Dequeue { dt_us } => {
                now += u64::from(dt_us) * 1000;
                if let Dequeue::Packet(p) = c.dequeue(now) {
                    deliver(p, &mut out_pkts, &mut out_bytes)?;
                }
            }
            Op::Bypass { flow, len } => {
                let f = usize::from(flow);
                let p = TestPacket::new(usize::from(len), u32::from(flow), seqs[f]);
                let dscp = [0u8, 8, 46, 10, 16, 24, 32, 48][usize::from(flow % 8)];
                let m = udp_meta(
                    u32::from(flow % 5),
                    u32::from(flow % 3),
                    u32::from(flow),
                    dscp,
                );
                if c.try_bypass(now, &p, &m) {
                    seqs[f] += 1;
                    in_pkts += 1;
                    in_bytes += u64::from(len);
                    deliver(p, &mut out_pkts, &mut out_bytes)?;
                }
            }
            Op::SetRate { kbit } => c.set_rate(Rate::from_bits_per_sec(u64::from(kbit) * 1000)),
            Op::Reconfigure {
                kbit,
                limit,
                preset,
                ingress,
                memlimit,
            } => {
                config.rate = Rate::from_bits_per_sec(u64::from(kbit) * 1000);
                config.packet_limit = u32::from(limit);
                config.ingress = ingress;
                config.memlimit = memlimit.map(u64::from);
                LinkPreset::ALL[usize::from(preset)].apply(&mut config);
                config.overhead = config.overhead.clamp(-64, 256);
                c.reconfigure(&config).unwrap();
            }
            Op::ChangeModes {
                diffserv,
                flow_mode,
            } => {
                config.diffserv = DIFFSERV[usize::from(diffserv)];
                config.flow_mode = FLOW_MODES[usize::from(flow_mode)];
                c.reconfigure(&config).unwrap();
            }
        }
        if let Err(e) = c.check_invariants() {
            return Err(TestCaseError::fail(format!("after {o:?}: {e}")));
        }
        prop_assert_eq!(
            in_pkts,
            out_pkts + c.stats().dropped_total() + c.len() as u64,
            "packets in = out + dropped + queued after {:?}",
            o
        );
    }
    let mut guard = 0;
    while !c.is_empty() && guard < 100_000 {
        guard += 1;
        match c.dequeue(now) {
            Dequeue::Packet(p) => deliver(p, &mut out_pkts, &mut out_bytes)?,
            Dequeue::NotBefore(t) => now = t,
            Dequeue::Empty => break,
        }
    }
    let s = c.stats();
    prop_assert_eq!(c.len(), 0);
    prop_assert_eq!(
        in_pkts,
        out_pkts + s.dropped_total(),
        "packets in = out + dropped"
    );
    prop_assert_eq!(
        in_bytes,
        out_bytes + s.dropped_bytes_total(),
        "bytes in = out + dropped"
    );
    c.check_invariants().map_err(TestCaseError::fail)?;
    Ok(())
}

fn initial_config() -> impl Strategy<Value = CakeConfig> {
    (
        0usize..5,
        0usize..8,
        prop_oneof![Just(0u64), 1u64..100_000],
        1u32..80,
        0u8..3,
        prop_oneof![Just(0u32), 1u32..4000],
    )
        .prop_map(|(ds, fm, kbit, limit, ack, burst)| CakeConfig {
            diffserv: DIFFSERV[ds],
            flow_mode: FLOW_MODES[fm],
            rate: Rate::from_bits_per_sec(kbit * 1000),
            packet_limit: limit,
            burst,
            ack_filter: [
                AckFilterMode::Off,
                AckFilterMode::Filter,
                AckFilterMode::Aggressive,
            ][usize::from(ack)],
            ..CakeConfig::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn packets_and_bytes_are_conserved_and_flows_stay_in_order(
        config in initial_config(),
        ops in proptest::collection::vec(op(false), 1..400),
    ) {
        run_ops::<1024>(config, &ops, false)?;
    }

    #[test]
    fn packets_are_conserved_across_mode_changes(
        config in initial_config(),
        ops in proptest::collection::vec(op(true), 1..300),
    ) {
        run_ops::<1024>(config, &ops, true)?;
    }

    /// A subscriber-sized instance: 24 flows in 64 buckets per tin.
    #[test]
    fn a_subscriber_instance_conserves_packets_and_keeps_flow_order(
        config in initial_config(),
        ops in proptest::collection::vec(op(false), 1..400),
    ) {
        run_ops::<{ qdisc::cake::SUBSCRIBER_FLOWS_PER_TIN }>(config, &ops, false)?;
    }

    /// The smallest instance, one set of 8 ways per tin: 24 flows must share queues, and
    /// packets are still neither lost nor duplicated. (Order is not checked: a flow whose
    /// shared bucket's tag another flow took finds a free way when one turns up, and its
    /// new packets may leave before the old ones, as in sch_cake.c's `cake_hash`.)
    #[test]
    fn an_eight_flow_instance_shares_queues_without_losing_packets(
        config in initial_config(),
        ops in proptest::collection::vec(op(false), 1..400),
    ) {
        run_ops::<8>(config, &ops, true)?;
    }

    #[test]
    fn an_eight_flow_instance_conserves_packets_across_mode_changes(
        config in initial_config(),
        ops in proptest::collection::vec(op(true), 1..300),
    ) {
        run_ops::<8>(config, &ops, true)?;
    }
}

/// One step of a lockstep case: what [`Op`] does, minus reconfiguration (the reference
/// does not model `Cake::reconfigure`), plus SACK blocks on the ACKs.
#[derive(Debug, Clone)]
enum StepOp {
    Enqueue {
        flow: u8,
        len: u16,
        ect: bool,
        ack: bool,
        /// SACK blocks as (start, length) offsets from the cumulative ACK; a start below
        /// it makes a DSACK.
        sack: Vec<(i16, u16)>,
        /// GSO segments, firewall mark, whether the flow's precomputed L4 hash comes
        /// with the packet, and whether NAT rewrote its keys.
        extras: (u16, u8, bool, bool),
    },
    Dequeue {
        dt_us: u16,
    },
    Bypass {
        flow: u8,
        len: u16,
    },
    SetRate {
        kbit: u32,
    },
}

fn step_op() -> impl Strategy<Value = StepOp> {
    prop_oneof![
        8 => (
            0u8..24,
            0u16..1600,
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec((-3000i16..3000, 1u16..3000), 0..4),
            (prop_oneof![8 => Just(0u16), 1 => 2u16..5], 0u8..10, any::<bool>(), any::<bool>()),
        )
            .prop_map(|(flow, len, ect, ack, sack, extras)| StepOp::Enqueue {
                flow,
                len,
                ect,
                ack,
                sack,
                extras,
            }),
        6 => (0u16..3000).prop_map(|dt_us| StepOp::Dequeue { dt_us }),
        1 => (0u8..24, 0u16..1600).prop_map(|(flow, len)| StepOp::Bypass { flow, len }),
        1 => prop_oneof![Just(0u32), 1u32..200_000].prop_map(|kbit| StepOp::SetRate { kbit }),
    ]
}

/// Configurations for the lockstep: every diffserv and flow mode, unlimited and shaped,
/// every link-layer preset (raw, overheads, MPU, ATM and PTM framing), ingress, small
/// packet and memory limits, both ACK filter modes, NAT, the firewall-mark override, the
/// random seed and the hash key.
fn lockstep_config() -> impl Strategy<Value = CakeConfig> {
    (
        (initial_config(), 0usize..LinkPreset::ALL.len()),
        (any::<bool>(), any::<bool>()),
        proptest::option::of(1000u64..100_000),
        prop_oneof![Just(0u32), Just(0xff), Just(0xf0)],
        (any::<u64>(), any::<u64>()),
    )
        .prop_map(
            |((mut c, preset), (ingress, nat), memlimit, fwmark_mask, (seed, hash_key))| {
                LinkPreset::ALL[preset].apply(&mut c);
                c.ingress = ingress;
                c.nat = nat;
                c.memlimit = memlimit;
                c.fwmark_mask = fwmark_mask;
                c.seed = seed;
                c.hash_key = hash_key;
                // sch_cake.c has no burst (`a_burst_lets_out_at_most_...` checks it).
                c.burst = 0;
                c
            },
        )
}

/// Runs `ops` through `Cake` and the reference in lockstep, then drains both and compares
/// their counters. The first disagreement panics with the event, the configuration and
/// both outcomes (and proptest shrinks the case).
fn run_lockstep(config: &CakeConfig, ops: &[StepOp]) {
    let Ok(mut l) = Lockstep::new(config, "property case") else {
        return;
    };
    let mut now = 1_000_000u64;
    let mut seqs = [0u64; 24];
    let mut acked = [0u32; 24];
    for o in ops {
        match o {
            StepOp::Enqueue {
                flow,
                len,
                ect,
                ack,
                sack,
                extras: (gso_segs, mark, with_l4_hash, rewritten),
            } => {
                let f = usize::from(*flow);
                let dscp = [0u8, 8, 46, 10, 16, 24, 32, 48][f % 8];
                let mut p = TestPacket::new(usize::from(*len), u32::from(*flow), seqs[f]);
                p.ect = *ect;
                if *ack {
                    acked[f] = acked[f].wrapping_add(1000);
                    let mut info = TcpAckInfo {
                        flags: 0x10,
                        ack_seq: acked[f],
                        ..TcpAckInfo::default()
                    };
                    for (n, &(start, len)) in sack.iter().enumerate() {
                        let start = acked[f].wrapping_add_signed(i32::from(start));
                        info.sack[n] = (start, start.wrapping_add(u32::from(len)));
                    }
                    info.sack_count = sack.len() as u8;
                    p.ack = Some(info);
                }
                seqs[f] += 1;
                let mut meta = udp_meta(
                    u32::from(*flow % 5),
                    u32::from(*flow % 3),
                    u32::from(*flow),
                    dscp,
                );
                meta.gso_segs = *gso_segs;
                meta.mark = u32::from(*mark) * 0x11;
                meta.l4_hash = with_l4_hash.then(|| u32::from(*flow).wrapping_mul(0x9e37_79b9));
                meta.keys_rewritten = *rewritten;
                l.enqueue(now, p, &meta);
            }
            StepOp::Dequeue { dt_us } => {
                now += u64::from(*dt_us) * 1000;
                l.dequeue(now);
            }
            StepOp::Bypass { flow, len } => {
                let f = usize::from(*flow);
                let p = TestPacket::new(usize::from(*len), u32::from(*flow), seqs[f]);
                let dscp = [0u8, 8, 46, 10, 16, 24, 32, 48][f % 8];
                let meta = udp_meta(
                    u32::from(*flow % 5),
                    u32::from(*flow % 3),
                    u32::from(*flow),
                    dscp,
                );
                if l.try_bypass(now, &p, &meta) {
                    seqs[f] += 1;
                }
            }
            StepOp::SetRate { kbit } => {
                l.set_rate(Rate::from_bits_per_sec(u64::from(*kbit) * 1000))
            }
        }
    }
    let mut guard = 0;
    while l.cake.len() > 0 && guard < 100_000 {
        guard += 1;
        match l.dequeue(now) {
            Dequeue::NotBefore(t) => now = t,
            Dequeue::Empty => break,
            Dequeue::Packet(_) => {}
        }
    }
    l.compare_counters();
}

/// Cases of the lockstep property: 256, or `PROPTEST_CASES` (a release build runs tens of
/// thousands a minute).
fn lockstep_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(lockstep_cases()))]

    #[test]
    fn cake_agrees_with_the_reference_event_by_event(
        config in lockstep_config(),
        ops in proptest::collection::vec(step_op(), 1..600),
    ) {
        run_lockstep(&config, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `burst` makes the shaper a token bucket of that depth (GCRA): however packets
    /// arrive, the bytes that leave between any two departures, both included, are at
    /// most the rate's over the time between them plus the burst plus the last packet;
    /// with the lead bounded by `MAX_AHEAD_NS` (1 ms) as well. Without a burst, the same
    /// holds with none (sch_cake.c).
    #[test]
    fn a_burst_lets_out_at_most_its_bytes_beyond_the_rate_in_any_window(
        burst in prop_oneof![Just(0u32), 1u32..20_000],
        // 1 kbit/s (a frame in 12 s, the 1 ms bound binds) to 100 Gbit/s (in 121 ns).
        kbit in prop_oneof![1u64..1_000, 1_000u64..400_000, 400_000u64..=100_000_000],
        arrivals in proptest::collection::vec((0u32..400, 64usize..=1514, 0u32..6), 1..300),
    ) {
        let rate = Rate::from_bits_per_sec(kbit * 1_000);
        let mut c: Cake<TestPacket> = Cake::new(&CakeConfig {
            rate,
            burst,
            diffserv: DiffservMode::Besteffort,
            ..CakeConfig::default()
        })
        .unwrap();
        // Arrivals `gap` us apart, each of `len` bytes in flow `flow`; dequeue whatever may
        // leave before each arrival at the times the shaper names, then after the last
        // until all has left (COBALT may drop some at the lowest rates).
        let mut now = 0u64;
        let mut out: Vec<(u64, u64)> = Vec::new();
        let serve = |c: &mut Cake<TestPacket>, now: &mut u64, until: u64, out: &mut Vec<(u64, u64)>| {
            loop {
                match c.dequeue(*now) {
                    Dequeue::Packet(p) => out.push((*now, p.len as u64)),
                    Dequeue::NotBefore(next) if next <= until => *now = (*now).max(next),
                    _ => break,
                }
            }
        };
        for (seq, &(gap_us, len, flow)) in arrivals.iter().enumerate() {
            let at = now + u64::from(gap_us) * 1000;
            serve(&mut c, &mut now, at, &mut out);
            now = at;
            c.enqueue(now, TestPacket::new(len, flow, seq as u64), &udp_meta(flow, 1, flow, 0));
        }
        serve(&mut c, &mut now, u64::MAX, &mut out);
        prop_assert!(c.is_empty());
        let bytes_per_sec = rate.bytes_per_sec() as u128;
        let lead_ns = (u128::from(burst) * 1_000_000_000 / bytes_per_sec).min(1_000_000);
        for i in 0..out.len() {
            let mut sum = 0u128;
            for j in i..out.len() {
                sum += u128::from(out[j].1);
                let span = u128::from(out[j].0 - out[i].0);
                // The rate's bytes over the span and the lead, the last packet, and the
                // clock's rounding: it keeps whole nanoseconds (carrying the fraction), so
                // a packet may leave up to 1 ns early, and a byte per packet.
                let allowed = (span + lead_ns + 1) * bytes_per_sec / 1_000_000_000
                    + u128::from(out[j].1)
                    + (j - i + 1) as u128;
                prop_assert!(
                    sum <= allowed,
                    "departures {}..={}: {} bytes in {} ns at {} B/s, burst {}",
                    i, j, sum, span, bytes_per_sec, burst
                );
            }
        }
    }
}

fn shaped(bits: u64, flow_mode: FlowMode) -> Cake<TestPacket> {
    Cake::new(&CakeConfig {
        rate: Rate::from_bits_per_sec(bits),
        diffserv: DiffservMode::Besteffort,
        flow_mode,
        ..CakeConfig::default()
    })
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn bulk_flows_each_get_one_nth_of_the_rate(
        sizes in proptest::collection::vec(64usize..=1514, 2..=12),
    ) {
        let n = sizes.len() as f64;
        let rate = 10_000_000u64;
        let mut h = Harness::new(shaped(rate, FlowMode::Flows));
        for (f, &len) in sizes.iter().enumerate() {
            // Every flow alone would fill the link.
            h.add(Source::cbr(f as u32, udp_meta(f as u32, 0, f as u32, 0), len, Rate::from_bits_per_sec(rate)));
        }
        h.measure_from_ns = SEC;
        h.run_until(4 * SEC);
        let total: u64 = h.flows.iter().map(|r| r.steady_bytes).sum();
        prop_assert!((total as f64 / (rate as f64 / 8.0 * 3.0) - 1.0).abs() < 0.01);
        for (f, r) in h.flows.iter().enumerate() {
            let share = r.steady_bytes as f64 / total as f64;
            prop_assert!((share * n - 1.0).abs() < 0.02, "flow {} ({} B) share {} of {}", f, sizes[f], share, n);
        }
    }

    #[test]
    fn triple_isolate_gives_a_ten_flow_host_and_a_one_flow_host_equal_shares(
        len_a in 64usize..=1514,
        len_b in 64usize..=1514,
    ) {
        let rate = 10_000_000u64;
        let mut h = Harness::new(shaped(rate, FlowMode::TripleIsolate));
        for f in 0..10 {
            h.add(Source::cbr(f, udp_meta(1, 1, f, 0), len_a, Rate::from_bits_per_sec(rate / 4)));
        }
        h.add(Source::cbr(10, udp_meta(2, 2, 10, 0), len_b, Rate::from_bits_per_sec(rate)));
        h.measure_from_ns = SEC;
        h.run_until(4 * SEC);
        let a: u64 = h.flows[..10].iter().map(|r| r.steady_bytes).sum();
        let b = h.flows[10].steady_bytes;
        let ratio = a as f64 / b as f64;
        prop_assert!((ratio - 1.0).abs() < 0.03, "host A {} B, host B {} B", a, b);
    }

    #[test]
    fn sparse_flows_see_almost_no_queueing_beside_bulk_flows(
        bulk in 1usize..8,
        sparse_len in 64usize..300,
        gap_ms in 5u64..50,
    ) {
        let rate = 10_000_000u64;
        let mut h = Harness::new(shaped(rate, FlowMode::TripleIsolate));
        for f in 0..bulk {
            h.add(Source::cbr(f as u32, udp_meta(1, 1, f as u32, 0), 1514, Rate::from_bits_per_sec(rate)));
        }
        let sparse = bulk as u32;
        let mut src = Source::cbr(sparse, udp_meta(2, 2, sparse, 0), sparse_len, Rate::from_bits_per_sec(1));
        src.gap_ns = gap_ms * 1_000_000;
        h.add(src);
        h.measure_from_ns = SEC;
        h.run_until(4 * SEC);
        let s = &h.flow(sparse).steady_delay_ns;
        // One full-size bulk packet can be on the wire when it arrives (1.2 ms at 10 Mbit/s).
        let mtu_time = 1514 * 8 * SEC / rate;
        prop_assert!(s.max() <= mtu_time + 100_000, "sparse max delay {} ns", s.max());
        // Every sparse packet got through (the last may still be waiting at the end).
        let f = h.flow(sparse);
        prop_assert!(f.offered_packets - f.delivered_packets <= 1);
        let bulk_p50 = h.flow(0).steady_delay_ns.value_at_quantile(0.5);
        prop_assert!(bulk_p50 > 2 * mtu_time, "bulk p50 {}", bulk_p50);
    }
}
