//! Unit tests of [`TxQueue`]: bypass, intake, runner lock, lazy classification and sync.

use super::*;
use crate::cake::{Cake, CakeConfig};
use crate::fifo::Fifo;
use crate::testing::{udp_meta, TestPacket};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn tx_queues_can_be_shared_between_threads() {
    assert_send_sync::<TxQueue<TestPacket, Fifo<TestPacket>>>();
    assert_send_sync::<TxQueue<TestPacket, Cake<TestPacket>>>();
}

fn fifo_queue(bypass: bool, capacity: usize) -> TxQueue<TestPacket, Fifo<TestPacket>> {
    let options = TxQueueOptions {
        intake_capacity: capacity,
        bypass,
        ..TxQueueOptions::default()
    };
    TxQueue::new(Fifo::new(64), options)
}

#[test]
fn an_idle_queue_bypasses_and_a_held_queue_keeps_arrival_order() {
    let q = fifo_queue(true, 8);
    let meta = udp_meta(1, 2, 1, 0);
    assert!(matches!(
        q.enqueue(0, TestPacket::new(64, 1, 0), &meta),
        Intake::Bypass(_)
    ));
    // While a runner holds the queue, packets wait in the intake in order.
    let guard = q.runner.try_lock_idle().unwrap();
    for seq in 1..4 {
        assert_eq!(
            q.enqueue(0, TestPacket::new(64, 1, seq), &meta),
            Intake::Queued
        );
    }
    drop(guard);
    // Work is waiting, so the next packet must queue behind it, not bypass.
    assert_eq!(
        q.enqueue(0, TestPacket::new(64, 1, 4), &meta),
        Intake::Queued
    );
    let mut out = Vec::new();
    let r = q.run(0, 16, &mut out, |_| {});
    assert_eq!(
        r,
        RunResult::Ran {
            sent: 4,
            next: NextRun::Idle
        }
    );
    let seqs: Vec<u64> = out.iter().map(|p| p.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    let s = q.stats();
    assert_eq!((s.bypassed, s.enqueued, s.dequeued), (1, 4, 4));
}

#[test]
fn a_full_intake_hands_the_packet_back_with_its_reason() {
    let q = fifo_queue(false, 1);
    let meta = udp_meta(1, 2, 1, 0);
    let guard = q.runner.try_lock_idle().unwrap();
    assert_eq!(
        q.enqueue(0, TestPacket::new(64, 1, 0), &meta),
        Intake::Queued
    );
    let dropped = q.enqueue(0, TestPacket::new(64, 1, 1), &meta);
    assert!(matches!(
        dropped,
        Intake::Dropped(DropReason::IntakeFull, ref p) if p.seq == 1
    ));
    drop(guard);
    assert_eq!(q.stats().drops(DropReason::IntakeFull), 1);
}

#[test]
fn a_run_while_another_holds_the_queue_is_busy_and_the_holder_goes_round_again() {
    let q = fifo_queue(false, 8);
    let meta = udp_meta(1, 2, 1, 0);
    let guard = q.runner.lock_or_flag_missed().unwrap();
    q.enqueue(0, TestPacket::new(64, 1, 0), &meta);
    assert_eq!(q.run(0, 8, &mut Vec::new(), |_| {}), RunResult::Busy);
    // The holder sees MISSED and must not let go yet.
    let guard = guard.try_unlock().unwrap_err();
    drop(guard);
    let mut out = Vec::new();
    assert!(matches!(
        q.run(0, 8, &mut out, |_| {}),
        RunResult::Ran { sent: 1, .. }
    ));
}

#[test]
fn a_shaped_queue_says_when_to_run_again() {
    let config = CakeConfig {
        rate: Rate::from_bits_per_sec(1_000_000),
        ..CakeConfig::default()
    };
    let q = TxQueue::new(
        Cake::new(&config).unwrap(),
        TxQueueOptions {
            bypass: false,
            ..TxQueueOptions::default()
        },
    );
    let mut pkts: Vec<TestPacket> = (0..3).map(|seq| TestPacket::new(1000, 1, seq)).collect();
    let mut metas = [udp_meta(1, 2, 1, 0); 3];
    let mut bypassed = Vec::new();
    let outcome = q.enqueue_burst(
        1_000,
        &mut pkts,
        &mut metas,
        |_, _| {},
        &mut bypassed,
        Offerer::Runner,
    );
    assert_eq!(outcome.queued, 3);
    assert!(outcome.run_needed);
    let mut out = Vec::new();
    match q.run(1_000, 8, &mut out, |_| {}) {
        RunResult::Ran {
            sent: 1,
            next: NextRun::At(t),
        } => assert!(t > 1_000),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn drops_while_the_shaper_waits_are_published_without_a_run() {
    // At 2 kbit/s one 1000-byte packet takes 4 s: the engine runs this queue again only
    // then, and the bursts offered meanwhile overflow the 10-packet limit.
    let config = CakeConfig {
        rate: Rate::from_bits_per_sec(2_000),
        packet_limit: 10,
        ..CakeConfig::default()
    };
    let q = TxQueue::new(
        Cake::new(&config).unwrap(),
        TxQueueOptions {
            bypass: false,
            ..TxQueueOptions::default()
        },
    );
    let mut metas = vec![udp_meta(1, 2, 1, 0); 32];
    let mut out = Vec::new();
    let mut pkts = vec![TestPacket::new(1000, 1, 0), TestPacket::new(1000, 1, 1)];
    q.enqueue_burst(
        0,
        &mut pkts,
        &mut metas,
        |_, _| {},
        &mut out,
        Offerer::Runner,
    );
    let next = match q.run(0, 8, &mut out, |o| o.clear()) {
        RunResult::Ran {
            next: NextRun::At(t),
            ..
        } => t,
        other => panic!("unexpected {other:?}"),
    };
    assert!(
        next > 1_000_000_000,
        "the next send is seconds away: {next}"
    );
    let drops =
        |q: &TxQueue<TestPacket, Cake<TestPacket>>| -> u64 { q.stats().qdisc_drops.iter().sum() };
    for (i, ms) in (1..=20u64).enumerate() {
        let mut pkts: Vec<TestPacket> = (0..32)
            .map(|s| TestPacket::new(1000, 1, 100 * i as u64 + s))
            .collect();
        let now = ms * 1_000_000;
        q.enqueue_burst(
            now,
            &mut pkts,
            &mut metas,
            |_, _| {},
            &mut out,
            Offerer::Runner,
        );
    }
    // 640 more offered, at most 10 held: the rest were dropped, and the counters say so
    // although no run has happened since.
    assert!(drops(&q) >= 600, "drops published: {}", drops(&q));
    assert!(q.stats().enqueued >= 640, "{:?}", q.stats());
}

#[test]
fn a_bypassing_burst_needs_no_run() {
    let q = fifo_queue(true, 8);
    let mut metas = [udp_meta(1, 2, 1, 0); 4];
    let mut sent = Vec::new();
    let outcome = q.enqueue_burst(
        0,
        &mut burst(0..4, 1),
        &mut metas,
        |_, _| {},
        &mut sent,
        Offerer::Runner,
    );
    assert_eq!(outcome.bypassed, 4);
    assert!(!outcome.run_needed);
    assert_eq!(sent.iter().map(|p| p.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(q.stats().bypassed, 4);
}

/// A classifier that writes the meta from the packet (DSCP = flow, so the FIFO band
/// shows that the meta was used) and records which packets it saw.
fn recording_classifier(seen: &mut Vec<u64>) -> impl FnMut(&TestPacket, &mut PacketMeta) + '_ {
    |p, m| {
        seen.push(p.seq);
        *m = udp_meta(1, 2, p.flow, p.flow as u8);
    }
}

/// Offers `pkts` at time 0 through a recording classifier; returns the outcome and
/// the sequence numbers the classifier saw. Every packet is taken: bypassed to `out`,
/// queued or dropped.
fn offer_recording(
    q: &TxQueue<TestPacket, Fifo<TestPacket>>,
    mut pkts: Vec<TestPacket>,
    out: &mut Vec<TestPacket>,
) -> (BurstOutcome, Vec<u64>) {
    let mut metas = vec![PacketMeta::default(); pkts.len()];
    let mut seen = Vec::new();
    let outcome = q.enqueue_burst(
        0,
        &mut pkts,
        &mut metas,
        recording_classifier(&mut seen),
        out,
        Offerer::Runner,
    );
    assert!(pkts.is_empty(), "the offer takes every packet");
    (outcome, seen)
}

fn burst(seqs: std::ops::Range<u64>, flow: u32) -> Vec<TestPacket> {
    seqs.map(|seq| TestPacket::new(64, flow, seq)).collect()
}

#[test]
fn a_burst_that_bypasses_an_empty_fifo_is_never_classified_and_is_not_moved() {
    let q = fifo_queue(true, 8);
    let mut pkts = burst(0..4, 1);
    let buffer = pkts.as_ptr();
    let mut metas = vec![PacketMeta::default(); 4];
    let mut seen = Vec::new();
    let mut out = Vec::with_capacity(8);
    let outcome = q.enqueue_burst(
        0,
        &mut pkts,
        &mut metas,
        recording_classifier(&mut seen),
        &mut out,
        Offerer::Runner,
    );
    assert_eq!((outcome.bypassed, outcome.queued), (4, 0));
    assert_eq!((outcome.bypassed_bytes, outcome.offered_bytes), (256, 256));
    assert!(!outcome.run_needed);
    assert!(
        seen.is_empty(),
        "bypassed packets were classified: {seen:?}"
    );
    assert!(pkts.is_empty());
    // The whole burst changed hands by swapping buffers.
    assert_eq!(out.as_ptr(), buffer);
    assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
    // Into a non-empty `out`, the burst is appended behind what is there.
    let mut pkts = burst(4..6, 1);
    let mut seen = Vec::new();
    q.enqueue_burst(
        0,
        &mut pkts,
        &mut metas,
        recording_classifier(&mut seen),
        &mut out,
        Offerer::Runner,
    );
    assert!(seen.is_empty());
    assert_eq!(
        out.iter().map(|p| p.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    let s = q.stats();
    assert_eq!((s.bypassed, s.sent_bytes, s.enqueued), (6, 6 * 64, 0));
}

#[test]
fn a_packet_that_is_queued_is_classified_exactly_once() {
    // Bypass off: every packet goes into the qdisc, each classified once, and the
    // classification is what the qdisc sorts by (DSCP 46 leaves first).
    let q = fifo_queue(false, 8);
    let pkts = vec![TestPacket::new(64, 0, 0), TestPacket::new(64, 46, 1)];
    let mut out = Vec::new();
    let (outcome, seen) = offer_recording(&q, pkts, &mut out);
    assert_eq!((outcome.bypassed, outcome.queued), (0, 2));
    assert_eq!((outcome.bypassed_bytes, outcome.offered_bytes), (0, 128));
    assert!(outcome.run_needed);
    assert_eq!(seen, [0, 1]);
    assert!(out.is_empty());
    let mut sent = Vec::new();
    q.run(0, 8, &mut sent, |_| {});
    assert_eq!(sent.iter().map(|p| p.seq).collect::<Vec<_>>(), [1, 0]);

    // A backlog: the burst queues behind it, classified once each.
    let q = fifo_queue(true, 8);
    let guard = q.runner.try_lock_idle().unwrap();
    let (outcome, seen) = offer_recording(&q, burst(0..2, 1), &mut out);
    // The runner was held: both went to the intake, classified.
    assert_eq!((outcome.bypassed, outcome.queued), (0, 2));
    assert_eq!(seen, [0, 1]);
    drop(guard);
    // Packets wait in the intake: this burst queues behind them, also classified once.
    let (outcome, seen) = offer_recording(&q, burst(2..4, 1), &mut out);
    assert_eq!((outcome.bypassed, outcome.queued), (0, 2));
    assert_eq!(seen, [2, 3]);
    assert!(out.is_empty());
    let mut sent = Vec::new();
    q.run(0, 8, &mut sent, |_| {});
    assert_eq!(sent.iter().map(|p| p.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
}

#[test]
fn an_unclassified_burst_into_a_full_intake_is_dropped_and_counted() {
    let q = fifo_queue(true, 1);
    let guard = q.runner.try_lock_idle().unwrap();
    let (outcome, seen) = offer_recording(&q, burst(0..3, 1), &mut Vec::new());
    assert_eq!((outcome.queued, outcome.dropped), (1, 2));
    assert_eq!(outcome.offered_bytes, 3 * 64);
    // Packets beyond the intake's room are dropped without being classified.
    assert_eq!(seen, [0]);
    drop(guard);
    assert_eq!(q.stats().drops(DropReason::IntakeFull), 2);
}

#[test]
fn cake_reads_the_meta_to_bypass_so_every_packet_is_classified_once() {
    let q = TxQueue::new(
        Cake::new(&CakeConfig::default()).unwrap(),
        TxQueueOptions::default(),
    );
    let mut pkts = burst(0..4, 1);
    let mut metas = vec![PacketMeta::default(); 4];
    let mut seen = Vec::new();
    let mut out = vec![TestPacket::new(64, 9, 99)];
    let outcome = q.enqueue_burst(
        0,
        &mut pkts,
        &mut metas,
        recording_classifier(&mut seen),
        &mut out,
        Offerer::Runner,
    );
    assert_eq!(outcome.bypassed, 4);
    assert_eq!((outcome.bypassed_bytes, outcome.offered_bytes), (256, 256));
    assert_eq!(seen, [0, 1, 2, 3]);
    assert_eq!(
        out.iter().map(|p| p.seq).collect::<Vec<_>>(),
        [99, 0, 1, 2, 3]
    );
    assert_eq!(q.stats().bypassed, 4);
}

/// The lazy path leaves the queue exactly as the classified path does.
#[test]
fn a_peer_queues_behind_held_packets_through_the_intake_without_the_lock() {
    let q = fifo_queue(true, 8);
    // One flow, one DSCP: the FIFO's bands keep it in order.
    let classify = |_: &TestPacket, m: &mut PacketMeta| *m = udp_meta(1, 2, 1, 0);
    let mut out = Vec::new();
    let mut metas = vec![PacketMeta::default(); 8];
    // On an empty queue a peer's burst bypasses, as any burst does.
    let o = q.enqueue_burst(
        0,
        &mut burst(0..2, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Peer,
    );
    assert_eq!((o.bypassed, o.queued), (2, 0));
    // The bypass is off for this one (the FIFO's credit is not the point): queue 2 packets.
    let held = fifo_queue(false, 8);
    let o = held.enqueue_burst(
        0,
        &mut burst(0..2, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Runner,
    );
    assert_eq!(
        (o.queued, held.intake.len(), held.backlog()),
        (2, 0, 2),
        "into the FIFO"
    );
    // While the queue holds packets, a peer's burst goes to the intake even with the
    // runner lock free: the FIFO's count does not move until the runner drains it.
    let o = held.enqueue_burst(
        1,
        &mut burst(2..5, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Peer,
    );
    assert_eq!((o.queued, o.dropped), (3, 0));
    assert_eq!((held.intake.len(), held.backlog()), (3, 5));
    assert!(!held.offer_would_overflow(1));
    let mut sent = Vec::new();
    held.run(2, 32, &mut sent, |_| {});
    let seqs: Vec<u64> = sent.iter().map(|p| p.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4], "in order, nothing lost");
}

#[test]
fn a_full_intake_drops_a_peers_burst_unclassified_and_says_so_beforehand() {
    let q = fifo_queue(false, 4);
    let mut out = Vec::new();
    let mut metas = vec![PacketMeta::default(); 8];
    let classified = std::cell::Cell::new(0);
    let classify = |p: &TestPacket, m: &mut PacketMeta| {
        classified.set(classified.get() + 1);
        *m = udp_meta(1, 2, 1, p.seq as u8);
    };
    q.enqueue_burst(
        0,
        &mut burst(0..1, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Runner,
    );
    let o = q.enqueue_burst(
        0,
        &mut burst(1..7, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Peer,
    );
    assert_eq!((o.queued, o.dropped), (4, 2), "4 fit the intake");
    assert_eq!(
        classified.get(),
        5,
        "the 2 that could not fit were never classified"
    );
    assert!(q.offer_would_overflow(1));
    let o = q.enqueue_burst(
        0,
        &mut burst(7..9, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Peer,
    );
    assert_eq!((o.queued, o.dropped), (0, 2));
    assert_eq!(q.stats().drops(DropReason::IntakeFull), 4);
    let mut sent = Vec::new();
    q.run(1, 32, &mut sent, |_| {});
    assert_eq!(
        sent.len(),
        1 + 4,
        "conservation: 9 offered = 5 sent + 4 dropped"
    );
    assert!(!q.offer_would_overflow(1));
    assert!(!q.offer_would_overflow(4), "empty: room for a whole intake");
    assert!(
        !q.offer_would_overflow(32),
        "a burst larger than the intake is refused only by a nonempty one"
    );
}

#[test]
fn a_burst_classified_beforehand_leaves_the_queue_as_one_classified_lazily() {
    for bypass in [true, false] {
        let (a, b) = (fifo_queue(bypass, 64), fifo_queue(bypass, 64));
        let mut sent_a = Vec::new();
        let mut sent_b = Vec::new();
        for round in 0..4u64 {
            let seqs = round * 8..round * 8 + 8;
            let mut metas: Vec<PacketMeta> =
                seqs.clone().map(|s| udp_meta(1, 2, 1, s as u8)).collect();
            a.enqueue_burst(
                round,
                &mut burst(seqs.clone(), 1),
                &mut metas,
                |_, _| {},
                &mut sent_a,
                Offerer::Runner,
            );
            let mut lazy_metas = vec![PacketMeta::default(); 8];
            b.enqueue_burst(
                round,
                &mut burst(seqs, 1),
                &mut lazy_metas,
                |p, m| *m = udp_meta(1, 2, 1, p.seq as u8),
                &mut sent_b,
                Offerer::Runner,
            );
            if round % 2 == 1 {
                a.run(round, 32, &mut sent_a, |_| {});
                b.run(round, 32, &mut sent_b, |_| {});
            }
        }
        a.run(9, 64, &mut sent_a, |_| {});
        b.run(9, 64, &mut sent_b, |_| {});
        assert_eq!(sent_a, sent_b);
        assert_eq!(a.stats(), b.stats());
    }
}

#[test]
fn bypassed_bytes_count_in_exactly_one_sync_window() {
    // A burst that makes a sync due closes the window [last sync, now) first and then
    // adds its own bytes, delivered at `now`, to the next one (as `run` does with what
    // it dequeues after its sync). No byte is lost or counted in two windows.
    let q = fifo_queue(true, 8);
    let interval = q.shared().sync_interval_ns();
    q.run(0, 8, &mut Vec::new(), |_| {});
    let mut metas = vec![PacketMeta::default(); 10];
    let mut out = Vec::new();
    let mut offer = |t: u64| {
        let mut pkts: Vec<TestPacket> = (0..10).map(|s| TestPacket::new(100, 1, s)).collect();
        let o = q.enqueue_burst(
            t,
            &mut pkts,
            &mut metas,
            |_, _| {},
            &mut out,
            Offerer::Runner,
        );
        assert_eq!(o.bypassed, 10);
    };
    let measured = |q: &TxQueue<TestPacket, Fifo<TestPacket>>| {
        q.shared().activity(0).unwrap().measured.bytes_per_sec()
    };
    let quarter = interval / 4;
    for k in 1..=4 {
        offer(k * quarter);
    }
    // Bursts at 1/4, 2/4 and 3/4 of the first window: 3000 bytes.
    assert_eq!(measured(&q), 3000 * 1_000_000_000 / interval);
    for k in 5..=8 {
        offer(k * quarter);
    }
    // The burst that closed the first window (at its end) and three more: 4000 bytes.
    assert_eq!(measured(&q), 4000 * 1_000_000_000 / interval);
    assert_eq!(q.stats().sent_bytes, 8000);
}

#[test]
fn run_is_wanted_exactly_when_it_has_work() {
    let q = fifo_queue(true, 8);
    // Nothing synced yet.
    assert!(q.run_wanted(0));
    q.run(0, 8, &mut Vec::new(), |_| {});
    assert!(!q.run_wanted(0));
    // A burst that bypasses leaves nothing to do, yet publishes its delivery: siblings'
    // syncs must see this queue as active without a run.
    let mut out = Vec::new();
    let mut metas = vec![PacketMeta::default(); 4];
    q.enqueue_burst(
        1,
        &mut burst(0..4, 1),
        &mut metas,
        |_, _| {},
        &mut out,
        Offerer::Runner,
    );
    assert_eq!(out.len(), 4);
    assert!(!q.run_wanted(1));
    assert_eq!(q.shared().activity(0).unwrap().last_active_ns, 1);
    // A packet in the intake, then one in the qdisc.
    let guard = q.runner.try_lock_idle().unwrap();
    q.enqueue(1, TestPacket::new(64, 1, 4), &udp_meta(1, 2, 1, 0));
    drop(guard);
    assert!(q.run_wanted(1));
    q.run(1, 8, &mut Vec::new(), |_| {});
    assert!(!q.run_wanted(1));
    let no_bypass = fifo_queue(false, 8);
    no_bypass.run(1, 8, &mut Vec::new(), |_| {});
    no_bypass.enqueue_burst(
        1,
        &mut burst(0..1, 1),
        &mut metas,
        |_, _| {},
        &mut out,
        Offerer::Runner,
    );
    assert!(no_bypass.run_wanted(1));
    no_bypass.run(1, 8, &mut Vec::new(), |_| {});
    assert!(!no_bypass.run_wanted(1));
    // A sync falls due, a new global rate, a configuration to apply.
    let interval = q.shared().sync_interval_ns();
    assert!(q.run_wanted(interval));
    q.set_rate(Rate::from_bits_per_sec(1_000_000_000));
    assert!(q.run_wanted(1));
    q.run(1, 8, &mut Vec::new(), |_| {});
    assert!(!q.run_wanted(1));
    q.request_reconfigure(crate::fifo::FifoConfig { limit_packets: 32 })
        .unwrap();
    assert!(q.run_wanted(1));
    q.run(1, 8, &mut Vec::new(), |_| {});
    assert!(!q.run_wanted(1));
}

#[test]
fn a_runner_behind_on_its_queue_takes_in_no_more_than_it_sends() {
    let options = TxQueueOptions {
        intake_capacity: 1024,
        bypass: false,
        ..TxQueueOptions::default()
    };
    let q = TxQueue::new(Fifo::new(4096), options);
    let classify = |_: &TestPacket, m: &mut PacketMeta| *m = udp_meta(1, 2, 1, 0);
    let mut out = Vec::new();
    let mut metas = vec![PacketMeta::default(); 32];
    // One packet in the FIFO, so that the peers' bursts go to the intake.
    q.enqueue_burst(
        0,
        &mut burst(0..1, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Runner,
    );
    for b in 0..20u64 {
        let o = q.enqueue_burst(
            1,
            &mut burst(1 + b * 32..1 + (b + 1) * 32, 1),
            &mut metas,
            classify,
            &mut out,
            Offerer::Peer,
        );
        assert_eq!(o.queued, 32);
    }
    let in_qdisc = |q: &TxQueue<TestPacket, Fifo<TestPacket>>| q.backlog() - q.intake.len();
    let budget = 16;
    let mut sent = Vec::new();
    let mut delivered = Vec::new();
    // Not behind yet: up to four budgets from the intake, one budget out.
    q.run(2, budget, &mut sent, |_| {});
    assert_eq!(sent.len(), budget);
    assert_eq!(in_qdisc(&q), 1 + 4 * budget - budget);
    delivered.extend(sent.iter().map(|p| p.seq));
    // Behind from then on (each run sends its whole budget with more ready): the qdisc
    // takes in what it sends and no more; the rest waits in the intake.
    for _ in 0..5 {
        let (qdisc_before, intake_before) = (in_qdisc(&q), q.intake.len());
        sent.clear();
        q.run(3, budget, &mut sent, |_| {});
        assert_eq!(sent.len(), budget);
        assert_eq!(in_qdisc(&q), qdisc_before);
        assert_eq!(q.intake.len(), intake_before - budget);
        delivered.extend(sent.iter().map(|p| p.seq));
    }
    // Nothing lost or reordered.
    while q.backlog() > 0 {
        sent.clear();
        q.run(4, 1000, &mut sent, |_| {});
        delivered.extend(sent.iter().map(|p| p.seq));
    }
    assert_eq!(delivered, (0..641).collect::<Vec<u64>>());
}

#[test]
fn an_intake_that_a_statistics_read_fills_says_so_before_a_burst_would_overflow_it() {
    let q = fifo_queue(false, 4);
    let mut out = Vec::new();
    let mut metas = vec![PacketMeta::default(); 8];
    let classify = |p: &TestPacket, m: &mut PacketMeta| *m = udp_meta(1, 2, 1, p.seq as u8);
    // While a statistics read holds the runner lock, even the runner's own bursts go to the
    // intake: the room it has left decides whether the next burst fits.
    q.try_with_qdisc(|_| {
        let o = q.enqueue_burst(
            0,
            &mut burst(0..2, 1),
            &mut metas,
            classify,
            &mut out,
            Offerer::Runner,
        );
        assert_eq!((o.queued, o.dropped), (2, 0));
        assert!(!q.offer_would_overflow(2), "two places left");
        assert!(q.offer_would_overflow(3));
        assert!(q.offer_would_overflow(32));
    })
    .expect("an idle queue lets a reader in");
    let mut sent = Vec::new();
    q.run(1, 32, &mut sent, |_| {});
    assert_eq!(sent.len(), 2, "the runner drains what waited");
    assert!(!q.offer_would_overflow(32));
}

#[test]
fn a_read_asked_of_the_runner_is_made_at_its_next_run_and_a_withdrawn_one_never() {
    let q = fifo_queue(false, 8);
    let mut out = Vec::new();
    let mut metas = vec![PacketMeta::default(); 8];
    let classify = |p: &TestPacket, m: &mut PacketMeta| *m = udp_meta(1, 2, 1, p.seq as u8);
    q.enqueue_burst(
        0,
        &mut burst(0..3, 1),
        &mut metas,
        classify,
        &mut out,
        Offerer::Runner,
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (a, b) = (seen.clone(), seen.clone());
    let first = q.request_read(Box::new(move |f: &mut Fifo<TestPacket>| {
        a.lock().unwrap().push(("first", crate::Qdisc::len(f)))
    }));
    let second = q.request_read(Box::new(move |f: &mut Fifo<TestPacket>| {
        b.lock().unwrap().push(("second", crate::Qdisc::len(f)))
    }));
    assert_ne!(first, second, "each read has its own ticket");
    assert!(q.withdraw_read(second), "not made yet: taken back");
    assert!(!q.withdraw_read(second), "only once");
    assert!(
        q.run_wanted(0) && q.run_urgent(0),
        "a waiting read wants a run"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing is made before the run"
    );
    let mut sent = Vec::new();
    q.run(1, 2, &mut sent, |_| {});
    // Made at the start of the run, before the dequeue: the qdisc as the offers left it.
    assert_eq!(*seen.lock().unwrap(), vec![("first", 3)]);
    assert!(!q.withdraw_read(first), "made: nothing to take back");
    q.run(2, 2, &mut sent, |_| {});
    assert_eq!(seen.lock().unwrap().len(), 1, "each read is made once");
    assert_eq!(sent.len(), 3);
    assert!(!q.run_wanted(3), "nothing left to do");
    // Several readers at once: one read per run, oldest first, the others keep it urgent.
    for i in 0..3 {
        let s = seen.clone();
        q.request_read(Box::new(move |_: &mut Fifo<TestPacket>| {
            s.lock().unwrap().push(("queued", i))
        }));
    }
    for made in 2..=4 {
        assert!(q.run_urgent(4));
        q.run(4, 2, &mut sent, |_| {});
        assert_eq!(seen.lock().unwrap().len(), made);
    }
    assert_eq!(
        seen.lock().unwrap()[1..],
        [("queued", 0), ("queued", 1), ("queued", 2)]
    );
    assert!(!q.run_urgent(5) && !q.run_wanted(5));
}
