//! Live changes to a busy queue, in virtual time. A rate change reaches a queue that waits
//! for its shaper: through the
//! control path (the global rate set on the `MultiQueue`) and through the cake_mq sync (a
//! queue's share grows when its sibling goes quiet). Either way the wait still pending,
//! computed at the old rate, is rescaled to the new one: a raised rate takes effect at once,
//! not after a slot computed at 2 kbit/s (6 s for one 1514-byte packet). A diffserv change
//! to fewer tins keeps every queued packet.

use qdisc::cake::{Cake, CakeConfig, DiffservMode};
use qdisc::mq::{MultiQueue, NextRun, Offerer, RunResult, SyncConfig, SyncPolicy, TxQueueOptions};
use qdisc::testing::{udp_meta, TestPacket};
use qdisc::Rate;

const SYNC_NS: u64 = 200_000;

fn queues(n: usize, rate: Rate) -> MultiQueue<TestPacket, Cake<TestPacket>> {
    let options = TxQueueOptions {
        bypass: false,
        sync: SyncConfig {
            policy: SyncPolicy::Equal,
            sync_interval_ns: SYNC_NS,
            ..SyncConfig::default()
        },
        ..TxQueueOptions::default()
    };
    let config = CakeConfig {
        rate,
        diffserv: DiffservMode::Besteffort,
        ..CakeConfig::default()
    };
    MultiQueue::from_config(n, options, &config).unwrap()
}

/// Offers `n` 1514-byte packets of one flow to queue `q` at `now`.
fn offer(mq: &MultiQueue<TestPacket, Cake<TestPacket>>, q: usize, now: u64, n: u64) {
    let mut metas = vec![udp_meta(q as u32 + 1, 2, 3, 0); n as usize];
    let mut pkts: Vec<TestPacket> = (0..n)
        .map(|seq| TestPacket::new(1514, q as u32 + 1, seq))
        .collect();
    let mut bypassed = Vec::new();
    mq.queue(q).enqueue_burst(
        now,
        &mut pkts,
        &mut metas,
        |_, _| {},
        &mut bypassed,
        Offerer::Runner,
    );
    assert!(bypassed.is_empty(), "the bypass is off");
}

/// Runs queue `q` at `now`: (packets sent, when it wants to run next).
fn run(mq: &MultiQueue<TestPacket, Cake<TestPacket>>, q: usize, now: u64) -> (usize, NextRun) {
    let mut out = Vec::new();
    match mq.queue(q).run(now, 32, &mut out, |o| o.clear()) {
        RunResult::Ran { sent, next } => (sent, next),
        RunResult::Busy => panic!("nobody else runs it"),
    }
}

#[test]
fn a_raised_global_rate_ends_the_wait_computed_at_the_old_one() {
    let mq = queues(1, Rate::from_bits_per_sec(50_000_000));
    mq.set_rate(Rate::from_bits_per_sec(2_000));
    offer(&mq, 0, 0, 3);
    let (sent, next) = run(&mq, 0, 0);
    assert_eq!(sent, 1);
    let NextRun::At(slow) = next else {
        panic!("{next:?}")
    };
    assert!(slow > 5_000_000_000, "one packet at 2 kbit/s: {slow} ns");
    // A moment later the rate goes back up: a poll-mode runner waiting until `slow` is told
    // to run now, and the run sends.
    let now = 100_000_000;
    assert!(!mq.queue(0).run_urgent(now), "nothing changed yet");
    mq.set_rate(Rate::from_bits_per_sec(50_000_000));
    assert!(mq.queue(0).run_urgent(now));
    let (sent, next) = run(&mq, 0, now);
    assert_eq!(sent, 2, "{next:?}");
    assert!(!mq.queue(0).run_urgent(now + 1));
}

#[test]
fn a_share_that_grows_ends_the_wait_computed_at_the_small_share() {
    let mq = queues(2, Rate::from_bits_per_sec(16_000));
    // Queue 1 sends one packet and goes quiet; queue 0, syncing after it, counts it as
    // active and gets half the rate: 1514 bytes at 1000 bytes/s, a 1.5 s wait.
    offer(&mq, 1, 1_000, 1);
    assert_eq!(run(&mq, 1, 1_000).0, 1);
    offer(&mq, 0, 2_000, 3);
    let (sent, next) = run(&mq, 0, 2_000);
    assert_eq!(sent, 1);
    let NextRun::At(small_share) = next else {
        panic!("{next:?}")
    };
    assert!(small_share > 1_400_000_000, "{small_share}");
    // One sync interval later queue 1 is still quiet: queue 0's next sync gives it the whole
    // rate, and the wait left shrinks to half.
    let now = 2_000 + SYNC_NS;
    assert!(mq.queue(0).run_urgent(now), "a sync may grow the share");
    let (sent, next) = run(&mq, 0, now);
    assert_eq!(sent, 0);
    let NextRun::At(whole_rate) = next else {
        panic!("{next:?}")
    };
    let (before, after) = (small_share - now, whole_rate - now);
    assert!(
        after < before * 6 / 10,
        "the wait left went from {before} to {after} ns"
    );
}

#[test]
fn a_live_diffserv_change_to_fewer_tins_keeps_what_is_queued() {
    // diffserv4 to besteffort on a busy queue: the reconfigure is applied at the next run,
    // and the packets of the three tins that vanish wait in the one left.
    let mq = queues(1, Rate::from_bits_per_sec(1_000_000));
    let config = |diffserv| CakeConfig {
        rate: Rate::from_bits_per_sec(1_000_000),
        diffserv,
        ..CakeConfig::default()
    };
    mq.reconfigure(&config(DiffservMode::Diffserv4)).unwrap();
    let mut out = Vec::new();
    let _ = mq.queue(0).run(0, 0, &mut out, |o| o.clear());
    for (i, dscp) in [0u8, 8, 34, 46].into_iter().enumerate() {
        let mut metas = vec![udp_meta(i as u32 + 1, 2, 3, dscp); 100];
        let mut pkts: Vec<TestPacket> = (0..100)
            .map(|seq| TestPacket::new(1000, i as u32 + 1, seq))
            .collect();
        mq.queue(0).enqueue_burst(
            1_000,
            &mut pkts,
            &mut metas,
            |_, _| {},
            &mut out,
            Offerer::Runner,
        );
    }
    let _ = mq.queue(0).run(1_000, 0, &mut out, |o| o.clear());
    let queued = mq.queue(0).backlog();
    let drops = |mq: &MultiQueue<TestPacket, Cake<TestPacket>>| -> u64 {
        mq.queue(0).stats().qdisc_drops.iter().sum()
    };
    let dropped = drops(&mq);
    assert_eq!(queued as u64 + dropped, 400);
    mq.reconfigure(&config(DiffservMode::Besteffort)).unwrap();
    let _ = mq.queue(0).run(2_000, 0, &mut out, |o| o.clear());
    assert_eq!(mq.queue(0).backlog(), queued, "nothing queued was dropped");
    assert_eq!(drops(&mq), dropped);
}
