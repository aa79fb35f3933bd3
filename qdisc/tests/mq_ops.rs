//! Conservation of one cake_mq TX queue under random operations: single offers and bursts
//! (bypassed, queued or dropped at the intake), runs with small budgets, time steps, rate
//! changes and full reconfigures (which may purge tins), with the ACK filter, tight packet
//! and memory limits and shaped rates so that every drop reason occurs.
//!
//! After every run (and after every burst that needs no run, since nothing else would
//! publish it) the queue's published counters must account for every packet offered:
//! `offered = bypassed + dequeued + drops + waiting`, and each drop reason must match what
//! CAKE itself counted (AQM drops, which the queue derives by conservation, included).
//! Bytes must close too: `offered bytes = sent bytes + dropped bytes + waiting bytes`,
//! checked whenever the intake is empty (the queue does not publish what its intake holds
//! in bytes) and always after the final drain.

use proptest::prelude::*;
use qdisc::cake::{AckFilterMode, Cake, CakeConfig, DiffservMode};
use qdisc::mq::{Intake, Offerer, TxQueue, TxQueueOptions};
use qdisc::testing::{udp_meta, TestPacket};
use qdisc::{DropReason, PacketMeta, Qdisc, Rate, TcpAckInfo};

#[derive(Debug, Clone)]
enum Op {
    /// One packet through `TxQueue::enqueue`.
    Offer {
        flow: u32,
        len: usize,
        ack: bool,
    },
    /// `n` packets of one flow through `TxQueue::enqueue_burst`, offered by the queue's
    /// runner or by a peer (a worker offering to a queue another one runs).
    Burst {
        flow: u32,
        n: usize,
        len: usize,
        ack: bool,
        peer: bool,
    },
    Run {
        budget: usize,
    },
    Advance {
        ns: u64,
    },
    SetRate {
        rate: u8,
    },
    Reconfigure {
        diffserv: u8,
        limit: u32,
        memlimit: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6u32, 40..1600usize, any::<bool>())
            .prop_map(|(flow, len, ack)| Op::Offer { flow, len, ack }),
        6 => (0..6u32, 1..24usize, 40..1600usize, any::<bool>(), any::<bool>())
            .prop_map(|(flow, n, len, ack, peer)| Op::Burst { flow, n, len, ack, peer }),
        4 => (1..48usize).prop_map(|budget| Op::Run { budget }),
        3 => (0..3_000_000u64).prop_map(|ns| Op::Advance { ns }),
        1 => (0..4u8).prop_map(|rate| Op::SetRate { rate }),
        1 => (0..4u8, 2..64u32, 0..3u8)
            .prop_map(|(diffserv, limit, memlimit)| Op::Reconfigure { diffserv, limit, memlimit }),
    ]
}

fn rate(choice: u8) -> Rate {
    match choice {
        0 => Rate::UNLIMITED,
        1 => Rate::from_bits_per_sec(1_000_000),
        2 => Rate::from_bits_per_sec(50_000_000),
        _ => Rate::from_bits_per_sec(10_000_000_000),
    }
}

fn config(diffserv: u8, limit: u32, memlimit: u8, rate_choice: u8) -> CakeConfig {
    CakeConfig {
        rate: rate(rate_choice),
        diffserv: match diffserv {
            0 => DiffservMode::Besteffort,
            1 => DiffservMode::Diffserv3,
            2 => DiffservMode::Diffserv4,
            _ => DiffservMode::Diffserv8,
        },
        ack_filter: AckFilterMode::Aggressive,
        packet_limit: limit,
        // None, a few full-size packets, or less than one: then a large packet alone
        // overflows, and a burst of them is dropped whole.
        memlimit: [None, Some(8 * 1024), Some(1200)][usize::from(memlimit % 3)],
        // A short target, so that COBALT drops within the run.
        target_ns: 100_000,
        interval_ns: 2_000_000,
        ..CakeConfig::default()
    }
}

/// Flow `flow`'s metadata: TCP (so ACKs can be filtered), in a tin chosen by the flow.
fn meta(flow: u32) -> PacketMeta {
    let dscp = [0, 8, 46, 34, 10, 0][flow as usize % 6];
    let mut m = udp_meta(flow % 3, 7, flow, dscp);
    m.keys.protocol = 6;
    m
}

fn packet(flow: u32, seq: u64, len: usize, ack: bool) -> TestPacket {
    let mut p = TestPacket::new(len, flow, seq);
    if ack {
        p.len = 66;
        p.ack = Some(TcpAckInfo {
            flags: 0x10,
            ack_seq: seq as u32 * 100,
            ..TcpAckInfo::default()
        });
    }
    p
}

/// What the test itself saw leave or come back.
#[derive(Default)]
struct Tally {
    offered: u64,
    bypassed: u64,
    transmitted: u64,
    handed_back: u64,
    offered_bytes: u64,
    /// Bytes of what bypassed or was transmitted.
    sent_bytes: u64,
    handed_back_bytes: u64,
}

impl Tally {
    fn offer(&mut self, p: &TestPacket) {
        self.offered += 1;
        self.offered_bytes += p.len as u64;
    }

    fn intake(&mut self, r: Intake<TestPacket>) {
        match r {
            Intake::Bypass(p) => {
                self.bypassed += 1;
                self.sent_bytes += p.len as u64;
            }
            Intake::Queued => {}
            Intake::Dropped(_, p) => {
                self.handed_back += 1;
                self.handed_back_bytes += p.len as u64;
            }
        }
    }

    fn transmit(&mut self, out: &mut Vec<TestPacket>) {
        self.transmitted += out.len() as u64;
        self.sent_bytes += out.iter().map(|p| p.len as u64).sum::<u64>();
        out.clear();
    }
}

fn check(q: &TxQueue<TestPacket, Cake<TestPacket>>, tally: &Tally, when: &str) {
    let s = q.stats();
    let waiting = q.backlog() as u64;
    assert_eq!(
        tally.offered,
        s.bypassed + s.dequeued + s.total_drops() + waiting,
        "{when}: offered = bypassed + dequeued + drops + waiting; {s:?}, waiting {waiting}"
    );
    assert_eq!(tally.bypassed, s.bypassed, "{when}: bypassed");
    assert_eq!(tally.transmitted, s.dequeued, "{when}: dequeued");
    assert_eq!(tally.handed_back, s.intake_full, "{when}: intake drops");
    let (cake, cake_drop_bytes, qlen, backlog_bytes) = q
        .try_with_qdisc(|c| {
            let st = c.stats();
            (
                st.drops,
                st.dropped_bytes_total(),
                c.len(),
                c.backlog_bytes(),
            )
        })
        .expect("nothing else holds the queue");
    // Bytes: whatever left (bypassed or dequeued) is in `sent_bytes`, whatever the qdisc
    // dropped (at enqueue, purged or in dequeue) in CAKE's drop bytes, the intake's drops
    // came back to the test. Only when the intake holds nothing is the rest all in CAKE.
    if qlen as u64 == waiting {
        assert_eq!(
            tally.offered_bytes,
            s.sent_bytes + cake_drop_bytes + tally.handed_back_bytes + backlog_bytes,
            "{when}: offered bytes = sent + dropped + waiting; {s:?}, waiting {backlog_bytes} B"
        );
    }
    assert_eq!(tally.sent_bytes, s.sent_bytes, "{when}: sent bytes");
    let at = |r: DropReason| DropReason::ALL.iter().position(|x| *x == r).unwrap();
    for reason in [DropReason::Overflow, DropReason::AckFilter] {
        assert_eq!(
            s.qdisc_drops[at(reason)],
            cake[at(reason)],
            "{when}: {} drops, queue vs CAKE",
            reason.name()
        );
    }
    assert_eq!(
        s.qdisc_drops[at(DropReason::Aqm)] + s.dequeue_drops,
        cake[at(DropReason::Aqm)],
        "{when}: AQM drops, queue vs CAKE"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_packet_offered_to_a_tx_queue_is_accounted_for_under_its_reason(
        start in (0..4u8, 2..64u32, 0..3u8, 0..4u8),
        bypass in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let (diffserv, limit, memlimit, rate_choice) = start;
        let first = config(diffserv, limit, memlimit, rate_choice);
        let cake = Cake::new(&first).expect("the test's configurations are valid");
        let q = TxQueue::new(cake, TxQueueOptions {
            intake_capacity: 16,
            bypass,
            ..TxQueueOptions::default()
        });
        let mut tally = Tally::default();
        let mut now = 1_000_000u64;
        let mut seq = 0u64;
        let mut current_rate = rate_choice;
        let mut out = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let when = format!("op {i} {op:?}");
            match *op {
                Op::Offer { flow, len, ack } => {
                    seq += 1;
                    let p = packet(flow, seq, len, ack);
                    tally.offer(&p);
                    tally.intake(q.enqueue(now, p, &meta(flow)));
                    // The call protocol: a run after every single offer.
                    q.run(now, 64, &mut out, |o| tally.transmit(o));
                    check(&q, &tally, &when);
                }
                Op::Burst { flow, n, len, ack, peer } => {
                    let mut pkts: Vec<_> = (0..n)
                        .map(|_| {
                            seq += 1;
                            packet(flow, seq, len, ack)
                        })
                        .collect();
                    for p in &pkts {
                        tally.offer(p);
                    }
                    // One length for the whole burst: the intake's drops, freed inside the
                    // call, are counted in bytes from it.
                    let bytes_each = pkts[0].len as u64;
                    let mut metas = vec![PacketMeta::default(); n];
                    let mut bypassed = Vec::new();
                    let m = meta(flow);
                    let offerer = if peer { Offerer::Peer } else { Offerer::Runner };
                    let classify = |_: &TestPacket, md: &mut PacketMeta| *md = m;
                    let outcome =
                        q.enqueue_burst(now, &mut pkts, &mut metas, classify, &mut bypassed, offerer);
                    prop_assert_eq!(outcome.bypassed, bypassed.len());
                    prop_assert_eq!(outcome.bypassed + outcome.queued + outcome.dropped, n);
                    prop_assert_eq!(outcome.offered_bytes, n as u64 * bytes_each);
                    tally.bypassed += bypassed.len() as u64;
                    tally.sent_bytes += bypassed.iter().map(|p| p.len as u64).sum::<u64>();
                    tally.handed_back += outcome.dropped as u64;
                    tally.handed_back_bytes += outcome.dropped as u64 * bytes_each;
                    if !outcome.run_needed {
                        check(&q, &tally, &when);
                    }
                }
                Op::Run { budget } => {
                    q.run(now, budget, &mut out, |o| tally.transmit(o));
                    check(&q, &tally, &when);
                }
                Op::Advance { ns } => now += ns,
                Op::SetRate { rate: r } => {
                    current_rate = r;
                    q.set_rate(rate(r));
                }
                Op::Reconfigure { diffserv, limit, memlimit } => {
                    q.request_reconfigure(config(diffserv, limit, memlimit, current_rate))
                        .expect("the test's configurations are valid");
                }
            }
        }
        // Drain: everything still waiting leaves or is dropped, and the books still close.
        q.set_rate(Rate::UNLIMITED);
        for _ in 0..64 {
            now += 1_000_000;
            q.run(now, 64, &mut out, |o| tally.transmit(o));
        }
        check(&q, &tally, "after the drain");
        prop_assert_eq!(q.backlog(), 0);
    }
}
