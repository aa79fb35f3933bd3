//! Loom models of `TxQueue`'s concurrency: the intake, the runner try-lock, the MISSED flag and
//! the bypass, with two or three threads.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p qdisc --release --test loom`. Under loom the
//! intake is a loom mutex around a `VecDeque` (crossbeam's `ArrayQueue` uses std atomics loom
//! cannot see; see `qdisc/src/mq/intake.rs`), while the runner lock, MISSED flag, activity
//! atomics and the qdisc cell are loom's, so loom explores every interleaving of the protocol
//! and its `UnsafeCell` check fails if two threads ever hold the qdisc at once.
//!
//! Every producer follows the documented call protocol: enqueue its packets, transmit any
//! bypassed one at once, then `run` once. The models check, with no extra run afterwards:
//! nothing is stranded (no lost wake-up), nothing is lost or duplicated, and each producer's
//! packets reach the wire in order.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use qdisc::fifo::Fifo;
use qdisc::mq::{Intake, Offerer, RunResult, TxQueue, TxQueueOptions};
use qdisc::{DropReason, Packet, PacketMeta};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pkt {
    producer: u32,
    seq: u32,
}

impl Packet for Pkt {
    fn len(&self) -> usize {
        64
    }

    fn set_ce(&mut self) -> bool {
        false
    }
}

type Queue = TxQueue<Pkt, Fifo<Pkt>>;
type Wire = Arc<Mutex<Vec<Pkt>>>;

fn queue(bypass: bool, intake_capacity: usize) -> Arc<Queue> {
    let options = TxQueueOptions {
        intake_capacity,
        bypass,
        ..TxQueueOptions::default()
    };
    Arc::new(TxQueue::new(Fifo::new(16), options))
}

/// One producer: `count` packets, then one run. Returns the packets dropped at the intake.
fn produce(q: &Queue, wire: &Wire, producer: u32, count: u32) -> u32 {
    let meta = PacketMeta::default();
    let mut dropped = 0;
    for seq in 0..count {
        match q.enqueue(0, Pkt { producer, seq }, &meta) {
            Intake::Bypass(p) => wire.lock().unwrap().push(p),
            Intake::Queued => {}
            Intake::Dropped(reason, _) => {
                assert_eq!(reason, DropReason::IntakeFull);
                dropped += 1;
            }
        }
    }
    let mut out = Vec::new();
    let result = q.run(0, 64, &mut out, |sent| wire.lock().unwrap().append(sent));
    assert!(out.is_empty());
    if let RunResult::Ran { sent, .. } = result {
        assert!(sent <= 64);
    }
    dropped
}

/// One producer offering its `count` packets as one burst, then running only when told to.
fn produce_burst(q: &Queue, wire: &Wire, producer: u32, count: u32) -> u32 {
    let mut burst: Vec<Pkt> = (0..count).map(|seq| Pkt { producer, seq }).collect();
    let mut metas = vec![PacketMeta::default(); burst.len()];
    let mut bypassed = Vec::new();
    let outcome = q.enqueue_burst(
        0,
        &mut burst,
        &mut metas,
        |_, _| {},
        &mut bypassed,
        Offerer::Runner,
    );
    wire.lock().unwrap().append(&mut bypassed);
    // What the burst could not put anywhere was dropped at the full intake.
    let dropped = outcome.dropped as u32;
    if outcome.run_needed {
        let mut out = Vec::new();
        q.run(0, 64, &mut out, |sent| wire.lock().unwrap().append(sent));
    }
    dropped
}

/// Every packet sent is on the wire once or was dropped, per-producer order holds, and
/// nothing is left queued.
fn check(q: &Queue, wire: &Wire, producers: u32, count: u32, dropped: u32) {
    let wire = wire.lock().unwrap();
    assert_eq!(
        wire.len() as u32 + dropped,
        producers * count,
        "lost or duplicated: {wire:?}"
    );
    for p in 0..producers {
        let seqs: Vec<u32> = wire
            .iter()
            .filter(|x| x.producer == p)
            .map(|x| x.seq)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "reordered: {wire:?}");
    }
    assert_eq!(q.backlog(), 0, "stranded packets: {wire:?}");
    let s = q.stats();
    assert_eq!(
        s.bypassed + s.dequeued + s.intake_full,
        u64::from(producers * count)
    );
}

/// Explores `f` with loom, at most three preemptions per execution (two threads).
fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f);
}

/// Explores `f` with at most `preemptions` preemptions per execution (three threads need a
/// lower bound to finish in seconds).
fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(f);
}

fn run_producers(bypass: bool, capacity: usize, producers: u32, count: u32) {
    run_mixed(bypass, capacity, producers, count, false);
}

/// Producer 0 uses `enqueue_burst` when `burst` is set; the others enqueue one by one.
fn run_mixed(bypass: bool, capacity: usize, producers: u32, count: u32, burst: bool) {
    let q = queue(bypass, capacity);
    let wire: Wire = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (1..producers)
        .map(|p| {
            let q = Arc::clone(&q);
            let wire = Arc::clone(&wire);
            thread::spawn(move || produce(&q, &wire, p, count))
        })
        .collect();
    let mut dropped = if burst {
        produce_burst(&q, &wire, 0, count)
    } else {
        produce(&q, &wire, 0, count)
    };
    for h in handles {
        dropped += h.join().unwrap();
    }
    check(&q, &wire, producers, count, dropped);
}

#[test]
fn two_producers_with_bypass_lose_nothing_and_keep_order() {
    model(|| run_producers(true, 4, 2, 2));
}

#[test]
fn two_producers_without_bypass_lose_nothing_and_keep_order() {
    model(|| run_producers(false, 4, 2, 2));
}

#[test]
fn three_producers_with_bypass_leave_nothing_stranded() {
    model_bounded(2, || run_producers(true, 4, 3, 1));
}

#[test]
fn a_full_intake_drops_with_a_reason_and_loses_nothing_else() {
    model(|| run_producers(false, 1, 2, 2));
}

#[test]
fn a_dedicated_runner_and_a_producer_never_strand_a_packet() {
    model(|| {
        let q = queue(true, 4);
        let wire: Wire = Arc::new(Mutex::new(Vec::new()));
        let runner = {
            let q = Arc::clone(&q);
            let wire = Arc::clone(&wire);
            thread::spawn(move || {
                let mut out = Vec::new();
                q.run(0, 64, &mut out, |sent| wire.lock().unwrap().append(sent));
            })
        };
        let dropped = produce(&q, &wire, 0, 2);
        runner.join().unwrap();
        check(&q, &wire, 1, 2, dropped);
    });
}

#[test]
fn a_burst_and_a_single_producer_lose_nothing_and_keep_order() {
    model(|| run_mixed(true, 4, 2, 2, true));
}

#[test]
fn two_burst_producers_never_strand_a_packet() {
    model(|| {
        let q = queue(true, 4);
        let wire: Wire = Arc::new(Mutex::new(Vec::new()));
        let other = {
            let q = Arc::clone(&q);
            let wire = Arc::clone(&wire);
            thread::spawn(move || produce_burst(&q, &wire, 1, 2))
        };
        let dropped = produce_burst(&q, &wire, 0, 2) + other.join().unwrap();
        check(&q, &wire, 2, 2, dropped);
    });
}

#[test]
fn two_queues_syncing_at_once_each_get_between_half_and_all_of_the_rate() {
    use qdisc::mq::MultiQueue;
    use qdisc::Rate;
    model(|| {
        let rate = Rate::from_bytes_per_sec(1_000);
        let mq: Arc<MultiQueue<Pkt, Fifo<Pkt>>> = Arc::new(MultiQueue::from_qdiscs(
            vec![Fifo::new(4), Fifo::new(4)],
            TxQueueOptions::default(),
            rate,
        ));
        let other = {
            let mq = Arc::clone(&mq);
            thread::spawn(move || {
                let q = mq.queue(1);
                q.enqueue(
                    1,
                    Pkt {
                        producer: 1,
                        seq: 0,
                    },
                    &PacketMeta::default(),
                );
                q.run(1, 8, &mut Vec::new(), |o| o.clear());
            })
        };
        let q = mq.queue(0);
        q.enqueue(
            1,
            Pkt {
                producer: 0,
                seq: 0,
            },
            &PacketMeta::default(),
        );
        q.run(1, 8, &mut Vec::new(), |o| o.clear());
        other.join().unwrap();
        for q in mq.queues() {
            let share = q.stats().share.bytes_per_sec();
            assert!((500..=1_000).contains(&share), "share {share}");
        }
    });
}

#[test]
fn a_read_asked_of_the_runner_is_made_once_or_withdrawn_never_both() {
    // A reader hands a read to the runner and takes it back if it was not made; the
    // producer runs the queue once. Whatever the interleaving, the read is made exactly when
    // it was not withdrawn, at most once, and sees the qdisc alone (loom's cell check).
    model(|| {
        let q = queue(false, 4);
        let wire: Wire = Arc::new(Mutex::new(Vec::new()));
        let made = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let reader = {
            let q = Arc::clone(&q);
            let made = Arc::clone(&made);
            thread::spawn(move || {
                let ticket = q.request_read(Box::new(move |_f: &mut Fifo<Pkt>| {
                    made.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
                }));
                q.withdraw_read(ticket)
            })
        };
        let dropped = produce(&q, &wire, 0, 1);
        let withdrawn = reader.join().unwrap();
        // A read still waiting here is made by the next run, as a poll-mode runner's would.
        let mut out = Vec::new();
        q.run(0, 64, &mut out, |sent| wire.lock().unwrap().append(sent));
        let made = made.load(loom::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            made,
            usize::from(!withdrawn),
            "withdrawn {withdrawn}, made {made}"
        );
        check(&q, &wire, 1, 1, dropped);
    });
}
