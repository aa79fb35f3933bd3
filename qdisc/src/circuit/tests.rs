//! Unit tests of the circuit shaper: classification to slots and the default class, lazy
//! instances and their release, the scheduler's bookkeeping, the bypass, and reconfigure.

use std::sync::Arc;

use super::*;
use crate::cake::DiffservMode;
use crate::testing::{udp_meta, TestPacket};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn meta(circuit: Option<u32>, flow: u32) -> PacketMeta {
    PacketMeta {
        circuit,
        ..udp_meta(circuit.unwrap_or(999), 1, flow, 0)
    }
}

/// Circuits at `rates_mbit`, shaped as strictly as sch_cake.c (no burst), so that the
/// tests below can name the packet each shaper holds; the burst has tests of its own.
fn config(rates_mbit: &[u64]) -> CircuitShaperConfig {
    let plans: Vec<Option<CircuitPlan>> = rates_mbit
        .iter()
        .map(|&r| Some(CircuitPlan::new(Rate::from_bits_per_sec(r * 1_000_000))))
        .collect();
    CircuitShaperConfig {
        plans: Arc::from(plans),
        idle_release_ns: SEC,
        circuit_burst: 0,
        ..CircuitShaperConfig::default()
    }
}

fn shaper(c: &CircuitShaperConfig) -> CircuitShaper<TestPacket> {
    CircuitShaper::new(c).unwrap()
}

/// Dequeues everything available until `until`, stepping to each `NotBefore`; returns the
/// packets in order.
fn drain_until(q: &mut CircuitShaper<TestPacket>, mut now: u64, until: u64) -> Vec<TestPacket> {
    let mut out = Vec::new();
    while now <= until {
        match q.dequeue(now) {
            Dequeue::Packet(p) => out.push(p),
            Dequeue::NotBefore(t) => now = t,
            Dequeue::Empty => break,
        }
        q.check_invariants().unwrap();
    }
    out
}

/// Offers a burst at time 0 to `q` as its runner would, the metas already written.
fn offer(
    q: &crate::mq::TxQueue<TestPacket, CircuitShaper<TestPacket>>,
    pkts: &mut Vec<TestPacket>,
    metas: &mut [PacketMeta],
    out: &mut Vec<TestPacket>,
) -> crate::mq::BurstOutcome {
    q.enqueue_burst(0, pkts, metas, |_, _| {}, out, crate::mq::Offerer::Runner)
}

#[test]
fn packets_go_to_their_slot_and_unmatched_ones_to_the_default_class() {
    let mut q = shaper(&config(&[10, 20]));
    q.enqueue(0, TestPacket::new(1000, 0, 0), &meta(Some(0), 0));
    q.enqueue(0, TestPacket::new(1000, 1, 0), &meta(Some(1), 1));
    q.enqueue(0, TestPacket::new(1000, 2, 0), &meta(None, 2));
    // A slot without a plan counts as unmatched.
    q.enqueue(0, TestPacket::new(1000, 3, 0), &meta(Some(7), 3));
    assert_eq!(q.len(), 4);
    assert_eq!(q.backlog_bytes(), 4000);
    assert_eq!(q.active_instances(), 3);
    assert_eq!(q.instance(0).unwrap().len(), 1);
    assert_eq!(q.instance(1).unwrap().len(), 1);
    assert_eq!(q.default_instance().unwrap().len(), 2);
    q.check_invariants().unwrap();
    let out = drain_until(&mut q, 0, SEC);
    assert_eq!(out.len(), 4);
    assert!(q.is_empty());
    assert_eq!(q.circuit_stats(0).unwrap().counters.sent_packets, 1);
    assert_eq!(q.default_stats().counters.sent_bytes, 2000);
    assert_eq!(q.totals().sent_packets, 4);
    assert!(q.circuit_stats(5).is_none());
}

#[test]
fn each_circuit_is_held_to_its_plan() {
    // 8 and 16 Mbit/s: 1000 and 2000 bytes per ms.
    let mut q = shaper(&config(&[8, 16]));
    let mut seq = 0;
    for _ in 0..400 {
        for slot in 0..2 {
            q.enqueue(0, TestPacket::new(1000, slot, seq), &meta(Some(slot), slot));
            seq += 1;
        }
    }
    let out = drain_until(&mut q, 0, 100 * MS);
    let a = out.iter().filter(|p| p.flow == 0).count();
    let b = out.iter().filter(|p| p.flow == 1).count();
    // 100 ms: ~100 and ~200 packets (plus CAKE's initial packet each).
    assert!((99..=102).contains(&a), "{a}");
    assert!((199..=202).contains(&b), "{b}");
}

#[test]
fn plans_at_the_ends_of_the_range_are_held_to_their_rates() {
    // 8 kbit/s (1000 bytes per second: waits of a second, beyond the timer wheel's reach,
    // in its overflow heap), 80 Mbit/s (10 000 bytes per ms: waits of 100 us, in the wheel)
    // and 100 Gbit/s (80 ns per packet: released within a bucket of the wheel), all at once.
    let plans: Vec<Option<CircuitPlan>> = [8_000u64, 80_000_000, 100_000_000_000]
        .iter()
        .map(|&bps| Some(CircuitPlan::new(Rate::from_bits_per_sec(bps))))
        .collect();
    let c = CircuitShaperConfig {
        plans: Arc::from(plans),
        idle_release_ns: 60 * SEC,
        circuit_burst: 0,
        ..CircuitShaperConfig::default()
    };
    let mut q = shaper(&c);
    let mut seq = 0;
    for _ in 0..2000 {
        for slot in 0..3 {
            q.enqueue(0, TestPacket::new(1000, slot, seq), &meta(Some(slot), slot));
            seq += 1;
        }
    }
    // Step the clock as a worker would, a little late each time, and never release a
    // packet before its circuit's rate allows it.
    let (mut now, mut sent) = (0u64, [0u64; 3]);
    while now <= 10 * SEC {
        match q.dequeue(now) {
            Dequeue::Packet(p) => {
                sent[p.flow as usize] += 1;
                // CAKE sends its first packet at once: after it, one per 1000 bytes' time.
                let rate_bytes_per_sec = [1_000u64, 10_000_000, 12_500_000_000][p.flow as usize];
                let earliest = (sent[p.flow as usize] - 1) * 1000 * SEC / rate_bytes_per_sec;
                assert!(
                    now + 1 >= earliest,
                    "circuit {} packet {} at {now} ns, before {earliest}",
                    p.flow,
                    sent[p.flow as usize]
                );
            }
            Dequeue::NotBefore(t) => now = t + 1_500,
            Dequeue::Empty => break,
        }
        q.check_invariants().unwrap();
    }
    // 10 s: 10 packets (+1) at 8 kbit/s; the faster two are done with all 2000 (at 80
    // Mbit/s the queue stands 200 ms: COBALT drops a few).
    assert!((10..=11).contains(&sent[0]), "{sent:?}");
    for slot in 1..3u32 {
        let c = q.circuit_stats(slot).unwrap().counters;
        let dropped: u64 = c.drops.iter().sum();
        assert_eq!(c.sent_packets, sent[slot as usize]);
        assert_eq!(c.sent_packets + dropped, 2000, "circuit {slot}: {sent:?}");
    }
    assert_eq!(sent[2], 2000, "{sent:?}");
    assert!(sent[1] >= 1900, "{sent:?}");
}

#[test]
fn an_idle_circuit_releases_its_instance_and_a_new_packet_recreates_it() {
    let mut q = shaper(&config(&[10]));
    q.enqueue(0, TestPacket::new(500, 0, 0), &meta(Some(0), 0));
    assert_eq!(drain_until(&mut q, 0, 0).len(), 1);
    assert_eq!(q.active_instances(), 1);
    // Not yet: empty for less than idle_release_ns.
    assert!(matches!(q.dequeue(SEC / 2), Dequeue::Empty));
    assert_eq!(q.active_instances(), 1);
    assert!(matches!(q.dequeue(SEC + 1), Dequeue::Empty));
    assert_eq!(q.active_instances(), 0);
    assert_eq!(q.spare_instances(), 1);
    let st = q.circuit_stats(0).unwrap();
    assert!(!st.active);
    assert_eq!(st.counters.sent_packets, 1, "counters outlive the instance");
    q.enqueue(2 * SEC, TestPacket::new(500, 0, 1), &meta(Some(0), 0));
    assert_eq!(q.active_instances(), 1);
    assert_eq!(q.spare_instances(), 0, "taken from the pool");
    let st = q.circuit_stats(0).unwrap();
    assert_eq!(
        st.tins[0].sent_packets + st.tins[1].sent_packets + st.tins[2].sent_packets,
        0
    );
    assert_eq!(drain_until(&mut q, 2 * SEC, 3 * SEC).len(), 1);
    assert_eq!(q.circuit_stats(0).unwrap().counters.sent_packets, 2);
    q.check_invariants().unwrap();
}

#[test]
fn the_link_cap_holds_the_sum_and_circuits_share_it() {
    let mut c = config(&[80, 80, 80, 80]);
    c.link.rate = Rate::from_bits_per_sec(80_000_000); // 10 000 bytes per ms
    let mut q = shaper(&c);
    let mut seq = 0;
    for _ in 0..1000 {
        for slot in 0..4 {
            q.enqueue(0, TestPacket::new(1000, slot, seq), &meta(Some(slot), slot));
            seq += 1;
        }
    }
    let out = drain_until(&mut q, 0, 100 * MS);
    let total = out.len();
    assert!((995..=1010).contains(&total), "{total}");
    for slot in 0..4 {
        let n = out.iter().filter(|p| p.flow == slot).count();
        assert!((245..=255).contains(&n), "slot {slot}: {n}");
    }
}

#[test]
fn the_bypass_passes_an_empty_circuit_and_stops_at_the_first_that_cannot_pass() {
    let mut q = shaper(&config(&[8, 8]));
    let pkts: Vec<TestPacket> = (0..3).map(|i| TestPacket::new(1000, 0, i)).collect();
    let metas = [meta(Some(0), 0), meta(Some(1), 1), meta(Some(0), 0)];
    let done = q.bypass_burst(0, &pkts, &metas);
    // Slot 0's first packet uses its credit; slot 1 passes; slot 0's second must wait.
    assert_eq!(done.packets, 2);
    assert_eq!(done.bytes, 2000);
    assert_eq!(q.circuit_stats(0).unwrap().counters.sent_packets, 1);
    assert_eq!(q.circuit_stats(1).unwrap().counters.sent_packets, 1);
    assert!(q.is_empty());
    q.check_invariants().unwrap();
}

#[test]
fn a_rate_only_plan_change_keeps_the_instance_state() {
    let c = config(&[8, 8]);
    let mut q = shaper(&c);
    for i in 0..50 {
        q.enqueue(0, TestPacket::new(1000, 0, i), &meta(Some(0), i as u32 % 5));
        q.enqueue(0, TestPacket::new(1000, 1, i), &meta(Some(1), 1));
    }
    drain_until(&mut q, 0, 10 * MS);
    let inst = q.instance(0).unwrap();
    let (len, backlog, cursors) = (inst.len(), inst.backlog_bytes(), inst.cursors());
    let tins = q.circuit_stats(0).unwrap().tins;
    let mut plans: Vec<Option<CircuitPlan>> = c.plans.to_vec();
    plans[0].as_mut().unwrap().rate = Rate::from_bits_per_sec(16_000_000);
    let c2 = CircuitShaperConfig {
        plans: Arc::from(plans),
        ..c.clone()
    };
    q.reconfigure(&c2).unwrap();
    let inst = q.instance(0).unwrap();
    assert_eq!(
        (inst.len(), inst.backlog_bytes(), inst.cursors()),
        (len, backlog, cursors)
    );
    assert_eq!(inst.current_rate(), Rate::from_bits_per_sec(16_000_000));
    assert_eq!(
        inst.config().rate,
        Rate::from_bits_per_sec(8_000_000),
        "set_rate, not reconfigure"
    );
    let after = q.circuit_stats(0).unwrap().tins;
    for (a, b) in tins.iter().zip(&after) {
        // Same queues, flows and counters; only the threshold rate follows the plan.
        let state = |t: &CircuitTinStats| {
            (
                t.backlog_bytes,
                t.sparse_flows,
                t.bulk_flows,
                t.sent_packets,
                t.dropped_packets,
            )
        };
        assert_eq!(state(a), state(b));
    }
    q.check_invariants().unwrap();
}

#[test]
fn a_full_plan_change_and_a_removal_lose_nothing() {
    let c = config(&[8, 8, 8]);
    let mut q = shaper(&c);
    for i in 0..30 {
        for slot in 0..3 {
            // ECN-capable, so that COBALT marks instead of dropping: every packet must
            // come out.
            let mut p = TestPacket::new(1000, slot, i);
            p.ect = true;
            q.enqueue(0, p, &meta(Some(slot), slot));
        }
    }
    let mut plans: Vec<Option<CircuitPlan>> = c.plans.to_vec();
    plans[0].as_mut().unwrap().cake.diffserv = DiffservMode::Besteffort;
    plans[2] = None;
    plans.push(Some(CircuitPlan::plain(Rate::from_bits_per_sec(1_000_000))));
    let c2 = CircuitShaperConfig {
        plans: Arc::from(plans),
        ..c.clone()
    };
    q.reconfigure(&c2).unwrap();
    q.check_invariants().unwrap();
    assert_eq!(q.len(), 90);
    let out = drain_until(&mut q, 0, 10 * SEC);
    assert_eq!(out.len(), 90);
    for slot in 0..3 {
        let seqs: Vec<u64> = out
            .iter()
            .filter(|p| p.flow == slot)
            .map(|p| p.seq)
            .collect();
        assert_eq!(seqs, (0..30).collect::<Vec<_>>(), "slot {slot}");
    }
    // The removed slot drained and gave its instance back at once.
    assert!(q.instance(2).is_none());
    assert!(q.instance(0).is_some());
}

#[test]
fn a_plain_plan_is_recognised() {
    assert!(CircuitPlan::plain(Rate::from_bits_per_sec(1_000_000)).is_plain());
    assert!(!CircuitPlan::new(Rate::from_bits_per_sec(1_000_000)).is_plain());
}

#[test]
fn validation_names_the_slot() {
    let mut c = config(&[8, 8]);
    let mut plans = c.plans.to_vec();
    plans[1].as_mut().unwrap().min = Some(Rate::from_bits_per_sec(9_000_000));
    c.plans = Arc::from(plans);
    let e = c.validate().unwrap_err();
    assert!(e.to_string().contains("slot 1"), "{e}");
    let c = CircuitShaperConfig {
        circuit_memory_limit: 0,
        ..CircuitShaperConfig::default()
    };
    assert_eq!(c.validate(), Err(CircuitConfigError::ZeroMemoryLimit));
}

#[test]
fn a_tx_queue_bypasses_an_empty_circuit_while_another_is_backlogged() {
    use crate::mq::{TxQueue, TxQueueOptions};
    let q = TxQueue::new(shaper(&config(&[8, 8])), TxQueueOptions::default());
    let mut out = Vec::new();
    // Slot 0: three packets; the first passes, the others wait for its shaper.
    let mut pkts: Vec<TestPacket> = (0..3).map(|i| TestPacket::new(1000, 0, i)).collect();
    let mut metas = vec![meta(Some(0), 0); 3];
    let r = offer(&q, &mut pkts, &mut metas, &mut out);
    assert_eq!((r.bypassed, r.queued), (1, 2));
    // Slot 1 holds nothing: its packet passes although slot 0 is backlogged.
    let mut pkts = vec![TestPacket::new(1000, 1, 0)];
    let mut metas = vec![meta(Some(1), 1)];
    out.clear();
    let r = offer(&q, &mut pkts, &mut metas, &mut out);
    assert_eq!((r.bypassed, r.queued), (1, 0));
    assert_eq!(out.len(), 1);
    // Slot 0 again: it holds packets, so this one queues behind them.
    let mut pkts = vec![TestPacket::new(1000, 0, 3)];
    let mut metas = vec![meta(Some(0), 0)];
    let r = offer(&q, &mut pkts, &mut metas, &mut out);
    assert_eq!((r.bypassed, r.queued), (0, 1));
    assert_eq!(q.backlog(), 3);
}

#[test]
fn within_one_burst_a_circuit_that_must_wait_does_not_stop_the_others() {
    use crate::mq::{TxQueue, TxQueueOptions};
    use crate::Packet as _;
    let q = TxQueue::new(shaper(&config(&[8, 8, 8])), TxQueueOptions::default());
    let mut out = Vec::new();
    // Slots 0 0 1 0 2 1: each slot's first packet passes; its later ones wait for its
    // shaper, behind it, whatever came between.
    let slots = [0u32, 0, 1, 0, 2, 1];
    let mut pkts: Vec<TestPacket> = (0..slots.len() as u64)
        .map(|i| TestPacket::new(1000, slots[i as usize], i))
        .collect();
    let mut metas: Vec<PacketMeta> = slots.iter().map(|&s| meta(Some(s), s)).collect();
    let r = offer(&q, &mut pkts, &mut metas, &mut out);
    assert_eq!((r.bypassed, r.queued, r.dropped), (3, 3, 0));
    assert_eq!(r.bypassed_bytes, 3000);
    assert_eq!(r.offered_bytes, 6000);
    assert!(pkts.is_empty());
    let passed: Vec<u64> = out.iter().map(|p| p.seq).collect();
    assert_eq!(
        passed,
        [0, 2, 4],
        "first of slots 0, 1 and 2, in burst order"
    );
    assert_eq!(q.backlog(), 3);
    // The waiting ones leave in order within each slot, all of them.
    let mut sent = Vec::new();
    let (mut now, mut tx) = (0, Vec::new());
    while sent.len() < 3 && now < SEC {
        now += MS;
        q.run(now, 64, &mut tx, |burst: &mut Vec<TestPacket>| {
            sent.extend(burst.drain(..).map(|p| (p.flow, p.seq)));
        });
    }
    sent.sort_unstable();
    assert_eq!(sent, [(0, 1), (0, 3), (1, 5)]);
    assert_eq!(out.iter().map(|p| p.len()).sum::<usize>(), 3000);
}

#[test]
fn only_a_link_rate_change_is_rate_only_for_the_multi_queue() {
    use crate::mq::MqQdisc;
    type S = CircuitShaper<TestPacket>;
    let c = config(&[8, 8]);
    let mut link = c.clone();
    link.link.rate = Rate::from_bits_per_sec(100_000_000);
    assert!(<S as MqQdisc<TestPacket>>::is_rate_only_change(&c, &link));
    let mut plan = c.clone();
    let mut plans = plan.plans.to_vec();
    plans[1].as_mut().unwrap().rate = Rate::from_bits_per_sec(9_000_000);
    plan.plans = Arc::from(plans);
    assert!(!<S as MqQdisc<TestPacket>>::is_rate_only_change(&c, &plan));
    let mut overhead = link.clone();
    overhead.link.overhead = 18;
    overhead.link.raw = false;
    assert!(!<S as MqQdisc<TestPacket>>::is_rate_only_change(
        &link, &overhead
    ));
}

#[test]
fn a_multi_queue_of_circuit_shapers_reconfigures_in_place() {
    use crate::mq::{MultiQueue, TxQueueOptions};
    let c = config(&[8, 8]);
    let mq: MultiQueue<TestPacket, CircuitShaper<TestPacket>> =
        MultiQueue::from_config(2, TxQueueOptions::default(), &c).unwrap();
    let q = mq.queue(0);
    for i in 0..5 {
        q.enqueue(0, TestPacket::new(1000, 0, i), &meta(Some(0), 0));
    }
    let mut plans = c.plans.to_vec();
    plans[0].as_mut().unwrap().rate = Rate::from_bits_per_sec(16_000_000);
    plans.push(Some(CircuitPlan::new(Rate::from_bits_per_sec(1_000_000))));
    let c2 = CircuitShaperConfig {
        plans: Arc::from(plans),
        ..c.clone()
    };
    mq.reconfigure(&c2).unwrap();
    let mut out = Vec::new();
    q.run(0, 64, &mut out, |_| {});
    let rate = q
        .try_with_qdisc(|s| s.instance(0).map(|i| i.current_rate()))
        .flatten();
    assert_eq!(rate, Some(Rate::from_bits_per_sec(16_000_000)));
    assert_eq!(q.try_with_qdisc(|s| s.config().plans.len()), Some(3));
    let bad = CircuitShaperConfig {
        circuit_packet_limit: 0,
        ..c2
    };
    assert!(mq.reconfigure(&bad).is_err());
}

#[test]
fn a_flood_at_a_few_circuits_pays_the_shared_limit_and_spares_the_others() {
    // 23 circuits at 1 Mbit/s, each allowed 2048 packets, all together 300.
    let c = CircuitShaperConfig {
        total_packet_limit: 300,
        ..config(&[1; 23])
    };
    let mut q = shaper(&c);
    let (mut offered, mut dropped) = (0u64, 0u64);
    fn offer(q: &mut CircuitShaper<TestPacket>, slot: u32, seq: u64) -> u64 {
        let r = q.enqueue(0, TestPacket::new(100, slot, seq), &meta(Some(slot), slot));
        if r.dropped_packets > 0 {
            assert_eq!(r.reason, Some(DropReason::Overflow));
        }
        u64::from(r.dropped_packets)
    }
    // Twenty quiet subscribers queue five packets each...
    for slot in 3..23 {
        for seq in 0..5 {
            dropped += offer(&mut q, slot, seq);
            offered += 1;
        }
    }
    // ...then three are flooded, interleaved, far beyond the shared limit.
    for seq in 0..3000 {
        dropped += offer(&mut q, (seq % 3) as u32, seq);
        offered += 1;
        assert!(q.len() <= 300, "over the shared limit: {}", q.len());
    }
    q.check_invariants().unwrap();
    assert_eq!(offered, dropped + q.len() as u64, "conservation");
    for slot in 3..23 {
        let s = q.circuit_stats(slot).unwrap();
        assert_eq!(
            s.counters.drops.iter().sum::<u64>(),
            0,
            "quiet circuit {slot} lost packets"
        );
        assert_eq!(q.instance(slot).unwrap().len(), 5);
    }
    // The flooded three share what is left about evenly.
    let flooded: Vec<usize> = (0..3).map(|s| q.instance(s).unwrap().len()).collect();
    assert!(
        flooded.iter().all(|&n| (50..=80).contains(&n)),
        "flooded circuits' queues: {flooded:?}"
    );
    // Lowering the limit sheds the excess over the next enqueues, from the largest.
    let mut lower = c.clone();
    lower.total_packet_limit = 150;
    q.reconfigure(&lower).unwrap();
    for seq in 0..100 {
        dropped += offer(&mut q, (seq % 3) as u32, 10_000 + seq);
        offered += 1;
    }
    assert!(q.len() <= 150, "{}", q.len());
    assert_eq!(
        offered,
        dropped + q.len() as u64,
        "conservation after lowering"
    );
    for slot in 3..23 {
        assert_eq!(q.instance(slot).unwrap().len(), 5, "quiet circuit {slot}");
    }
}

#[test]
fn what_a_packet_touches_in_a_slot_record_is_its_first_line() {
    use std::mem::{align_of, offset_of, size_of};
    type S = SlotState<TestPacket>;
    assert_eq!(align_of::<S>(), 64);
    assert_eq!(offset_of!(S, cake), 0);
    let hot_end = offset_of!(S, counters) + 2 * size_of::<u64>();
    assert!(hot_end <= 64, "the hot fields end at byte {hot_end}");
    assert!(offset_of!(S, planned) < offset_of!(S, counters));
    assert_eq!(offset_of!(CircuitCounters, sent_packets), 0);
    assert_eq!(offset_of!(CircuitCounters, sent_bytes), 8);
}

#[test]
fn a_bursts_prefetch_starts_every_stage_of_every_packet_once_and_in_order() {
    for len in 1..=64 {
        // When each packet's stage was started, per stage: (step, stage), the steps being
        // the classification of packets 0..len, then the offers of packets 0..len.
        let mut started = vec![[None; 3]; len];
        let mut start = |j: usize, stage: usize, step: usize| {
            let at = &mut started[j][stage];
            assert!(at.is_none(), "len {len}: stage {stage} of {j} twice");
            *at = Some((step, stage));
        };
        for i in 0..len {
            for (stage, range) in burst_stages(len, i).into_iter().enumerate() {
                for j in range {
                    assert!(j <= i, "len {len}: stage {stage} of {j} before its class");
                    start(j, stage, i);
                }
            }
        }
        for i in 0..len {
            for j in deferred_before_offer(len, i) {
                assert!(
                    j >= i,
                    "len {len}: packet {j}'s third stage after its offer"
                );
                start(j, 2, len + i);
            }
        }
        for (j, s) in started.iter().enumerate() {
            let order: Vec<_> = s.iter().map(|x| x.expect("every stage started")).collect();
            assert!(
                order.windows(2).all(|w| w[0] <= w[1]),
                "len {len}, packet {j}: {order:?}"
            );
        }
    }
    // A burst of 32: the last ten packets' third stages start ten offers ahead of them.
    assert_eq!(burst_deferred(32), 22..32);
    assert_eq!(deferred_before_offer(32, 12), 22..23);
    assert!(deferred_before_offer(32, 0).is_empty());
}

#[test]
fn memory_read_by_slot_adds_up_to_the_walk_of_every_instance() {
    // A report sums `planned_instance_bytes` over the slots it reads anyway and adds
    // `memory_bytes_besides_planned`: together they must count every instance once, the
    // default class's and those of removed slots still draining included.
    let c = config(&[8, 8, 8, 8]);
    let mut q = shaper(&c);
    for slot in 0..4 {
        for i in 0..5 {
            q.enqueue(0, TestPacket::new(1000, slot, i), &meta(Some(slot), slot));
        }
    }
    q.enqueue(0, TestPacket::new(1000, 9, 0), &meta(None, 9));
    let walk = |q: &CircuitShaper<TestPacket>| {
        use std::mem::size_of;
        let inst = |c: &CircuitCake<TestPacket>| c.preallocated_bytes() + c.slab_bytes();
        size_of::<CircuitShaper<TestPacket>>()
            + q.slots.capacity() * size_of::<SlotState<TestPacket>>()
            + q.live.capacity() * size_of::<u32>()
            + q.spare.capacity() * size_of::<usize>()
            + q.ring.bytes()
            + q.heap.bytes()
            + q.idle.bytes()
            + q.live_instances().map(|(_, c)| inst(c)).sum::<usize>()
            + q.spare.iter().map(|c| inst(c)).sum::<usize>()
    };
    let by_slot = |q: &CircuitShaper<TestPacket>| {
        q.memory_bytes_besides_planned()
            + (0..q.config().plans.len() as u32)
                .map(|s| q.planned_instance_bytes(s))
                .sum::<usize>()
    };
    assert_eq!(q.active_instances(), 5);
    assert_eq!(q.memory_bytes(), walk(&q));
    assert_eq!(by_slot(&q), walk(&q));
    // Slots 2 and 3 removed while they hold packets: they drain beyond the plans.
    let c2 = CircuitShaperConfig {
        plans: Arc::from(c.plans[..2].to_vec()),
        ..c.clone()
    };
    q.reconfigure(&c2).unwrap();
    assert_eq!(q.active_instances(), 5);
    assert_eq!(q.memory_bytes(), walk(&q));
    assert_eq!(by_slot(&q), walk(&q));
    // Drained and released: spares now.
    drain_until(&mut q, 0, 10 * SEC);
    q.dequeue(20 * SEC);
    assert_eq!((q.active_instances(), q.spare.len()), (0, 5));
    assert_eq!(q.memory_bytes(), walk(&q));
    assert_eq!(by_slot(&q), walk(&q));
    assert_eq!(q.planned_instance_bytes(u32::MAX), 0);
}

#[test]
fn a_burst_into_an_idle_circuit_leaves_at_once_within_the_circuit_burst() {
    use crate::mq::{TxQueue, TxQueueOptions};
    // 100 Mbit/s: a 300-byte packet takes 24 us. Four arrive at one instant.
    let offer_four = |burst: u32| {
        let c = CircuitShaperConfig {
            circuit_burst: burst,
            ..config(&[100])
        };
        let q = TxQueue::new(shaper(&c), TxQueueOptions::default());
        let mut out = Vec::new();
        let mut pkts: Vec<TestPacket> = (0..4).map(|i| TestPacket::new(300, 0, i)).collect();
        let mut metas = vec![meta(Some(0), 0); 4];
        let r = offer(&q, &mut pkts, &mut metas, &mut out);
        (r.bypassed, r.queued)
    };
    // As sch_cake.c: the first passes, the others wait for their times.
    assert_eq!(offer_four(0), (1, 3));
    // With the default burst (one full frame) the shaper may lead its clock by 1514
    // bytes' time: all four leave now, and the clock is 1200 bytes ahead.
    assert_eq!(CircuitShaperConfig::default().circuit_burst, 1514);
    assert_eq!(offer_four(DEFAULT_CIRCUIT_BURST), (4, 0));
    // 600 bytes: the clock may lead by two packets' time when the third goes.
    assert_eq!(offer_four(600), (3, 1));
}

#[test]
fn a_peer_hands_its_burst_to_the_runner_even_for_an_empty_circuit_shaper() {
    use crate::mq::{Offerer, TxQueue, TxQueueOptions};
    // The circuits' state belongs to the runner's core: a peer worker's burst goes through
    // the intake, even when every circuit is empty and could take the bypass.
    let q = TxQueue::new(shaper(&config(&[100, 100])), TxQueueOptions::default());
    let mut out = Vec::new();
    let mut pkts: Vec<TestPacket> = (0..2).map(|i| TestPacket::new(300, i, 0)).collect();
    let mut metas = vec![meta(Some(0), 0), meta(Some(1), 1)];
    let r = q.enqueue_burst(0, &mut pkts, &mut metas, |_, _| {}, &mut out, Offerer::Peer);
    assert_eq!((r.bypassed, r.dropped), (0, 0));
    assert!(out.is_empty());
    assert_eq!(q.backlog(), 2);
    // The runner's own burst to the same empty circuits takes the bypass.
    let q = TxQueue::new(shaper(&config(&[100, 100])), TxQueueOptions::default());
    let mut pkts: Vec<TestPacket> = (0..2).map(|i| TestPacket::new(300, i, 0)).collect();
    let r = offer(&q, &mut pkts, &mut metas, &mut out);
    assert_eq!(r.bypassed, 2);
}

#[test]
fn a_changed_burst_applies_to_live_instances_on_reconfigure() {
    // A reload that changes `[circuits] burst` reaches the instances already running.
    let strict = config(&[100]);
    let mut q = shaper(&strict);
    let four = |q: &mut CircuitShaper<TestPacket>, at: u64| {
        let pkts: Vec<TestPacket> = (0..4).map(|i| TestPacket::new(300, 0, i)).collect();
        let metas = vec![meta(Some(0), 0); 4];
        q.bypass_burst(at, &pkts, &metas).packets
    };
    assert_eq!(four(&mut q, 0), 1);
    // Leave it idle long enough for the clock to fall behind, keeping its instance.
    let _ = drain_until(&mut q, 0, 10 * MS);
    q.reconfigure(&CircuitShaperConfig {
        circuit_burst: DEFAULT_CIRCUIT_BURST,
        ..strict
    })
    .unwrap();
    assert!(q.instance(0).is_some());
    assert_eq!(four(&mut q, 20 * MS), 4);
}
