//! Unit tests of the engine: forwarding through synth ports with FIFO and CAKE queues, one
//! and several workers and receive queues, TX queue selection and ownership, core pinning,
//! the drain at stop and the conservation of every packet.

use std::time::Duration;

use qdisc::mq::Offerer;
use qdisc::{DropReason, PacketMeta};

use super::worker::*;
use super::*;
use crate::app::{build_queues, QueueChoice};
use crate::counters::synth::SynthStats;
use crate::counters::TinSnapshot;
use crate::counters::{egress, port};
use crate::port::pool::{Pool, PoolBuf};
use crate::port::synth::{PacketSize, SynthConfig, SynthPlan, SynthRx, SynthTx};
use crate::stats::{QueueView, Reporter, Sources};
use qdisc::mq::TxQueueOptions;

struct View(Arc<dyn Shaper<PoolBuf>>);

impl QueueView for View {
    fn stats(&self) -> qdisc::mq::TxQueueStats {
        self.0.stats()
    }
    fn backlog(&self) -> u64 {
        self.0.backlog()
    }
    fn tins(&self) -> Vec<TinSnapshot> {
        self.0.tins()
    }
    fn rate(&self) -> qdisc::Rate {
        self.0.rate()
    }
}

/// Runs `packets` synth packets from port 0 to port 1 and returns the final report.
/// Starts the engine, waits (at most 20 s) until every receive port is finished, and
/// stops receiving; the caller joins.
fn start_until_rx_done<P: PortBuf>(
    ecfg: &EngineConfig,
    ports: EnginePorts<P>,
    shapers: Vec<Arc<dyn Shaper<P>>>,
) -> Running<P> {
    let running = start(ecfg, ports, shapers).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !running.rx_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    running.stop_rx();
    running
}

fn forward(
    choice: QueueChoice,
    workers: usize,
    queues: usize,
    packets: u64,
) -> crate::stats::Report {
    forward_then_stop(choice, workers, queues, packets, None)
}

/// [`forward`], stopped by `stop_rx` after `stop_after` instead of when the generator is
/// done (`None`).
fn forward_then_stop(
    choice: QueueChoice,
    workers: usize,
    queues: usize,
    packets: u64,
    stop_after: Option<Duration>,
) -> crate::stats::Report {
    forward_at(choice, workers, queues, packets, stop_after, None)
}

/// [`forward_then_stop`] with the generator paced to `rate` (`None`: its default).
fn forward_at(
    choice: QueueChoice,
    workers: usize,
    queues: usize,
    packets: u64,
    stop_after: Option<Duration>,
    rate: Option<&str>,
) -> crate::stats::Report {
    let default = SynthConfig::default();
    let cfg = SynthConfig {
        flows: 37,
        size: PacketSize::Imix,
        // ECN-capable, so a starved run makes CAKE mark rather than drop.
        ecn: true,
        packets,
        rate: rate.map_or(default.rate.clone(), Into::into),
        ..default
    };
    let plan = SynthPlan::new(&cfg, 0).unwrap();
    let stats = Arc::new(SynthStats::default());
    let pool = Pool::new(2048, 2048);
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> =
        vec![Box::new(SynthRx::new(&plan, pool, 0, 1, &stats))];
    let mk_tx = |n: usize| -> Vec<Box<dyn PortTx<Buf = PoolBuf>>> {
        (0..n)
            .map(|_| Box::new(SynthTx::new(37, stats.clone())) as Box<dyn PortTx<Buf = PoolBuf>>)
            .collect()
    };
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![mk_tx(queues), mk_tx(queues)],
        forward: vec![Some(1), None],
    };
    let (shapers, _) = build_queues(&choice, 2, queues, TxQueueOptions::default()).unwrap();
    let views: Vec<Arc<dyn QueueView>> = shapers
        .iter()
        .map(|s| Arc::new(View(s.clone())) as Arc<dyn QueueView>)
        .collect();
    let all = shapers.clone();
    // By flow hash: these runs are about the hand-off between workers, which the
    // default (each worker on its own queues) avoids.
    let ecfg = EngineConfig {
        workers,
        tx_queues: queues,
        pin: false,
        tx_select: TxSelect::FlowHash,
        ..EngineConfig::default()
    };
    let running = match stop_after {
        None => start_until_rx_done(&ecfg, ports, shapers),
        Some(after) => {
            let running = start(&ecfg, ports, shapers).unwrap();
            std::thread::sleep(after);
            running.stop_rx();
            running
        }
    };
    let handoff = running.handoff_counts();
    let counters = running.counters().clone();
    assert_eq!(running.join(), 0);
    for s in &all {
        let _ = s.run(clock::now_ns(), 0, &mut Vec::new(), &mut |_o: &mut Vec<
            PoolBuf,
        >| {});
    }
    let mut r = Reporter::new(Sources {
        port_names: vec!["a".into(), "b".into()],
        counters,
        queues: views,
        synth: vec![(0, stats)],
        handoff: Box::new(handoff),
        backend: Vec::new(),
        directions: vec![crate::stats::DirectionSource {
            direction: crate::config::direction::Direction::Upload,
            ingress: 0,
            egress: 1,
        }],
    });
    let report = r.final_report(1.0);
    // One direction forwarded (a -> b): it holds its own conservation as the whole does.
    assert_eq!(report.directions.len(), 1);
    assert_eq!(
        report.directions[0].conservation.ok, report.conservation.ok,
        "{:?}",
        report.directions
    );
    report
}

/// Two workers, two receive queues on port 0 (the generator splits its flows between
/// them, as RSS does) and two TX queues per port, with `tx_select`; returns, per
/// generator queue, (frames generated, frames the sink of the same-numbered TX queue of
/// port 1 received).
fn forward_two_rx_queues(tx_select: TxSelect) -> Vec<(u64, u64)> {
    let cfg = SynthConfig {
        flows: 37,
        size: PacketSize::Imix,
        // ECN-capable, so a starved run makes CAKE mark rather than drop.
        ecn: true,
        packets: 20_000,
        // Paced, so neither worker is overloaded: an unpaced flood (in a debug build on a
        // busy machine) may fill a queue's intake, which then drops (intake_full).
        rate: "200mbit".into(),
        ..SynthConfig::default()
    };
    let plan = SynthPlan::new(&cfg, 0).unwrap();
    let stats = Arc::new(SynthStats::default());
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = (0..2)
        .map(|q| {
            Box::new(SynthRx::new(&plan, Pool::new(2048, 2048), q, 2, &stats))
                as Box<dyn PortRx<Buf = PoolBuf>>
        })
        .collect();
    let mk_tx = || -> Vec<Box<dyn PortTx<Buf = PoolBuf>>> {
        (0..2)
            .map(|_| Box::new(SynthTx::new(37, stats.clone())) as Box<dyn PortTx<Buf = PoolBuf>>)
            .collect()
    };
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![mk_tx(), mk_tx()],
        forward: vec![Some(1), None],
    };
    let choice = QueueChoice::Cake(qdisc::cake::CakeConfig::default());
    let (shapers, _) = build_queues(&choice, 2, 2, TxQueueOptions::default()).unwrap();
    let all = shapers.clone();
    let ecfg = EngineConfig {
        workers: 2,
        tx_queues: 2,
        pin: false,
        tx_select,
        ..EngineConfig::default()
    };
    let running = start_until_rx_done(&ecfg, ports, shapers);
    assert_eq!(running.join(), 0);
    let generated: Vec<u64> = stats
        .generators
        .lock()
        .unwrap()
        .iter()
        .map(|g| g.packets.load(Relaxed))
        .collect();
    // Sinks 0 and 1 are port 0's TX queues, 2 and 3 port 1's.
    let received: Vec<u64> = stats
        .sinks
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.packets.load(Relaxed))
        .collect();
    let totals = stats.totals();
    let queue_stats: Vec<_> = all.iter().map(|s| s.stats()).collect();
    assert_eq!(
        totals.received_packets, totals.sent_packets,
        "nothing lost ({tx_select:?}): {queue_stats:#?}"
    );
    assert_eq!(totals.reordered, 0);
    generated
        .into_iter()
        .zip(received[2..].iter().copied())
        .collect()
}

#[test]
fn a_listed_core_the_process_cannot_run_on_is_an_error_not_ignored() {
    let cfg = EngineConfig {
        cores: vec![4000],
        ..EngineConfig::default()
    };
    let e = pick_cores(&cfg).unwrap_err().to_string();
    assert!(
        e.starts_with("engine.cores names core 4000, but this process can run only on cores ")
            && e.contains("list cores from those"),
        "{e}"
    );
    let unpinned = EngineConfig { pin: false, ..cfg };
    assert!(pick_cores(&unpinned).unwrap().is_none());
    assert_eq!(core_list([0, 1, 2, 3, 6, 8, 9].into_iter()), "0-3,6,8-9");
    assert_eq!(core_list([5].into_iter()), "5");
    assert_eq!(core_list(std::iter::empty()), "none");
}

#[test]
fn with_tx_select_worker_each_worker_sends_on_its_own_queue_and_nothing_crosses_cores() {
    // Worker 0 polls receive queue 0 and runs port 1's queue 0 (egress 2); worker 1 the
    // ones numbered 1. Every frame of a receive queue leaves by its worker's own queue.
    let per_queue = forward_two_rx_queues(TxSelect::Worker);
    for (q, (generated, received)) in per_queue.iter().enumerate() {
        assert!(*generated > 0);
        assert_eq!(
            received, generated,
            "TX queue {q} carried exactly receive queue {q}'s frames"
        );
    }
    // By flow hash, the same flows spread over both queues regardless of where they came in.
    let per_queue = forward_two_rx_queues(TxSelect::FlowHash);
    assert!(
        per_queue
            .iter()
            .any(|(generated, received)| generated != received),
        "{per_queue:?}"
    );
    // The default is the worker's own queue once there are two workers: nothing crosses.
    assert_eq!(EngineConfig::default().tx_select, TxSelect::Auto);
    let per_queue = forward_two_rx_queues(TxSelect::Auto);
    for (generated, received) in &per_queue {
        assert_eq!(received, generated, "{per_queue:?}");
    }
}

#[test]
fn auto_picks_the_workers_own_queues_only_where_it_loses_nothing() {
    let pick = |w, q, one_rx| TxSelect::Auto.resolve(w, q, one_rx).0;
    assert_eq!(pick(2, 2, true), TxSelect::Worker);
    assert_eq!(pick(4, 2, true), TxSelect::Worker);
    assert_eq!(
        pick(1, 4, true),
        TxSelect::FlowHash,
        "one worker owns every queue"
    );
    assert_eq!(pick(2, 1, true), TxSelect::FlowHash);
    assert_eq!(
        pick(2, 2, false),
        TxSelect::FlowHash,
        "no RSS: keep flows whole"
    );
    let (set, why) = TxSelect::FlowHash.resolve(2, 2, true);
    assert_eq!(set, TxSelect::FlowHash);
    assert!(
        why.starts_with("as set") && why.contains("\"auto\" picks \"worker\""),
        "{why}"
    );
    let (_, why) = TxSelect::Auto.resolve(2, 2, true);
    assert!(
        why.contains("each worker sends on its own TX queues"),
        "{why}"
    );
}

#[test]
fn one_worker_forwards_every_packet_through_cake_in_order() {
    let r = forward(
        QueueChoice::Cake(qdisc::cake::CakeConfig::default()),
        1,
        1,
        20_000,
    );
    let s = &r.synth[0];
    assert_eq!(
        (s.totals.sent_packets, s.totals.received_packets),
        (20_000, 20_000)
    );
    assert_eq!((s.lost, s.totals.reordered, s.totals.duplicates), (0, 0, 0));
    assert!(r.conservation.ok, "{:?}", r.conservation);
}

#[test]
fn a_queue_waiting_for_its_next_send_time_still_takes_what_arrives_into_cake() {
    // At 8 kbit/s a full-size frame waits 1.5 s for its turn. The worker used to leave such
    // a queue alone until then; once one packet went into the queue's intake (offered by
    // another worker, or while the stats reporter held the queue to read its tins), every
    // later offer queued behind it there, the intake filled and dropped (intake_full: not
    // the shaper's choice) instead of CAKE dropping from the fattest flow. Here the test
    // offers that one packet as a peer would, once the queue holds a backlog.
    let slow = qdisc::cake::CakeConfig {
        rate: qdisc::Rate::from_bits_per_sec(8_000),
        // Small, so that CAKE's overflow drops free buffers and the generator keeps going.
        memlimit: Some(256 * 1024),
        ..qdisc::cake::CakeConfig::default()
    };
    let cfg = SynthConfig {
        flows: 37,
        ..SynthConfig::default()
    };
    let plan = SynthPlan::new(&cfg, 0).unwrap();
    let stats = Arc::new(SynthStats::default());
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = vec![Box::new(SynthRx::new(
        &plan,
        Pool::new(2048, 2048),
        0,
        1,
        &stats,
    ))];
    let tx = || -> Vec<Box<dyn PortTx<Buf = PoolBuf>>> {
        vec![Box::new(SynthTx::new(37, stats.clone()))]
    };
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![tx(), tx()],
        forward: vec![Some(1), None],
    };
    let (shapers, _) =
        build_queues(&QueueChoice::Cake(slow), 2, 1, TxQueueOptions::default()).unwrap();
    let egress = shapers[1].clone();
    let ecfg = EngineConfig {
        pin: false,
        ..EngineConfig::default()
    };
    let running = start(&ecfg, ports, shapers).unwrap();
    let start_at = std::time::Instant::now();
    while egress.backlog() == 0 && start_at.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let pool = Pool::new(4, 2048);
    let mut pkt = pool.alloc().unwrap();
    pkt.set_len(100);
    let mut metas = [PacketMeta::default()];
    let offered = egress.offer_burst(
        clock::now_ns(),
        &mut vec![pkt],
        &mut metas,
        &mut |_, _| {},
        &mut Vec::new(),
        Offerer::Peer,
    );
    assert_eq!(offered.queued, 1, "into the intake: {offered:?}");
    std::thread::sleep(Duration::from_millis(500));
    running.stop_now();
    assert_eq!(running.join(), 0);
    let _ = egress.run(clock::now_ns(), 0, &mut Vec::new(), &mut |_o: &mut Vec<
        PoolBuf,
    >| {});
    let st = egress.stats();
    assert!(st.enqueued > 2_000, "{st:?}");
    assert_eq!(st.intake_full, 0, "{st:?}");
}

#[test]
fn two_workers_hand_bypassed_packets_over_without_loss_or_reordering() {
    let r = forward(QueueChoice::Fifo, 2, 2, 20_000);
    let s = &r.synth[0];
    // A worker starved by a busy machine can let a FIFO overflow: such drops are
    // counted, and every packet not received is one of them.
    assert_eq!(s.lost, r.conservation.dropped, "{r:?}");
    assert_eq!((s.totals.reordered, s.totals.duplicates), (0, 0), "{r:?}");
    assert!(r.conservation.ok, "{:?}", r.conservation);
    // Both of port b's queues carried traffic.
    assert!(r.queues[2].bypass + r.queues[2].dequeued > 0);
    assert!(r.queues[3].bypass + r.queues[3].dequeued > 0);
}

#[test]
fn a_drain_started_mid_traffic_leaves_nothing_stranded_in_another_workers_queues() {
    // Worker 0 receives and offers to queues that worker 1 owns (through its handoff
    // and intake). When the drain starts, worker 1 must not leave before worker 0 has
    // stopped offering, or what worker 0 offered last stays queued at the end. Stopped
    // mid-traffic many times, since it is a race.
    for round in 0..12 {
        let queues = 1 + round % 2;
        let choice = if round % 4 < 2 {
            QueueChoice::Fifo
        } else {
            QueueChoice::Cake(qdisc::cake::CakeConfig::default())
        };
        let r = forward_then_stop(
            choice,
            2,
            queues,
            u64::MAX / 4,
            Some(Duration::from_millis(20)),
        );
        let s = &r.synth[0];
        assert!(r.conservation.ok, "round {round}: {:?}", r.conservation);
        assert_eq!(r.conservation.queued, 0, "round {round}: {r:?}");
        assert_eq!(s.lost, r.conservation.dropped, "round {round}: {r:?}");
    }
}

#[test]
fn a_worker_offering_to_another_workers_single_queue_hands_its_bypassed_bursts_over() {
    // One TX queue, two workers: worker 0 receives, worker 1 owns port b's queue, so every
    // burst worker 0 offers unparsed bypasses into worker 1's handoff (or queues). Paced,
    // so that worker 1 empties the queue between bursts: a flood on a busy machine (tests
    // side by side on two cores) kept it backlogged for the whole run, and no burst could
    // bypass.
    let r = forward_at(QueueChoice::Fifo, 2, 1, 20_000, None, Some("200mbit"));
    let s = &r.synth[0];
    assert_eq!(s.lost, r.conservation.dropped, "{r:?}");
    assert_eq!((s.totals.reordered, s.totals.duplicates), (0, 0), "{r:?}");
    assert!(r.conservation.ok, "{:?}", r.conservation);
    assert!(r.queues[1].bypass > 0, "{r:?}");
}

#[test]
fn the_bare_loop_without_a_qdisc_conserves_too() {
    let r = forward(QueueChoice::None, 1, 1, 5_000);
    assert_eq!(r.synth[0].totals.received_packets, 5_000);
    assert!(r.conservation.ok);
}

/// A transmit half that refuses everything for its first `stall` calls, then takes at
/// most 7 packets per call.
struct Stalling {
    inner: SynthTx,
    calls: u32,
    stall: u32,
}

impl PortTx for Stalling {
    type Buf = PoolBuf;
    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        self.calls += 1;
        if self.calls <= self.stall {
            return 0;
        }
        let rest = burst.split_off(burst.len().min(7));
        let n = self.inner.tx_burst(burst);
        *burst = rest;
        n
    }
}

#[test]
fn a_port_that_refuses_packets_gets_them_later_in_order_and_nothing_is_dropped() {
    let cfg = SynthConfig {
        flows: 5,
        packets: 3000,
        ..SynthConfig::default()
    };
    let plan = SynthPlan::new(&cfg, 0).unwrap();
    let stats = Arc::new(SynthStats::default());
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = vec![Box::new(SynthRx::new(
        &plan,
        Pool::new(1024, 2048),
        0,
        1,
        &stats,
    ))];
    let stalling = Stalling {
        inner: SynthTx::new(5, stats.clone()),
        calls: 0,
        stall: 200,
    };
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![
            vec![Box::new(SynthTx::new(5, stats.clone())) as Box<dyn PortTx<Buf = PoolBuf>>],
            vec![Box::new(stalling) as Box<dyn PortTx<Buf = PoolBuf>>],
        ],
        forward: vec![Some(1), None],
    };
    let (shapers, _) = build_queues(&QueueChoice::None, 2, 1, TxQueueOptions::default()).unwrap();
    let ecfg = EngineConfig {
        pin: false,
        drain_timeout: "10s".into(),
        ..EngineConfig::default()
    };
    let running = start_until_rx_done(&ecfg, ports, shapers);
    assert_eq!(running.join(), 0);
    let t = stats.totals();
    assert_eq!((t.sent_packets, t.received_packets), (3000, 3000));
    assert_eq!((t.reordered, t.duplicates), (0, 0));
}

/// Takes every frame it is offered but refuses every third one for good, as a kernel
/// does with a frame longer than the egress MTU.
struct Refusing {
    taken: u64,
    refused: crate::port::Refused,
}

impl PortTx for Refusing {
    type Buf = PoolBuf;
    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        let n = burst.len();
        for b in burst.drain(..) {
            self.taken += 1;
            if self.taken % 3 == 0 {
                self.refused.count(b.data().len());
            }
        }
        n
    }
    fn take_refused(&mut self) -> (u64, u64) {
        self.refused.take()
    }
}

#[test]
fn frames_a_port_refuses_count_as_dropped_not_transmitted() {
    let frames: std::collections::VecDeque<Vec<u8>> = (0..30).map(|i| vec![0u8; 60 + i]).collect();
    let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    // Every third frame, as the port counts them in arrival order.
    let refused_bytes: u64 = frames
        .iter()
        .skip(2)
        .step_by(3)
        .map(|f| f.len() as u64)
        .sum();
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = vec![Box::new(Frames {
        pool: Pool::new(64, 2048),
        frames,
        per_burst: 4,
    })];
    let refusing = Refusing {
        taken: 0,
        refused: crate::port::Refused::default(),
    };
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![
            vec![Box::new(Count(Arc::new(AtomicU64::new(0)))) as Box<dyn PortTx<Buf = PoolBuf>>],
            vec![Box::new(refusing) as Box<dyn PortTx<Buf = PoolBuf>>],
        ],
        forward: vec![Some(1), None],
    };
    let (shapers, _) = build_queues(&QueueChoice::None, 2, 1, TxQueueOptions::default()).unwrap();
    let ecfg = EngineConfig {
        pin: false,
        ..EngineConfig::default()
    };
    let running = start_until_rx_done(&ecfg, ports, shapers);
    let shared = running.shared().clone();
    assert_eq!(running.join(), 0);
    let snap = shared.snapshot();
    let refused = snap.egress(1, egress::DROPS + DropReason::TxRefused.index());
    assert_eq!(refused, 10);
    assert_eq!(snap.egress(1, egress::TX_PACKETS), 20);
    assert_eq!(snap.egress(1, egress::TX_BYTES), bytes - refused_bytes);
}

/// Hands out fixed frames, `per_burst` at a time, then finishes.
struct Frames {
    pool: Pool,
    frames: std::collections::VecDeque<Vec<u8>>,
    per_burst: usize,
}

impl PortRx for Frames {
    type Buf = PoolBuf;
    fn rx_burst(&mut self, burst: &mut Vec<PoolBuf>, max: usize) -> usize {
        let mut n = 0;
        while n < max.min(self.per_burst) {
            let Some(f) = self.frames.pop_front() else {
                break;
            };
            burst.push(self.pool.alloc_copy(&f).expect("pool big enough"));
            n += 1;
        }
        n
    }
    fn is_finished(&self) -> bool {
        self.frames.is_empty()
    }
}

/// Takes everything and counts it.
struct Count(Arc<AtomicU64>);

impl PortTx for Count {
    type Buf = PoolBuf;
    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        let n = burst.len();
        self.0.fetch_add(n as u64, Relaxed);
        burst.clear();
        n
    }
}

/// Forwards 10 well-formed and 6 malformed frames (an IPv4 header cut short), in bursts
/// of 4, through `queues` TX queues; returns (transmitted, malformed counted).
fn forward_malformed(choice: QueueChoice, queues: usize, bypass: bool) -> (u64, u64) {
    let mut good = [0u8; 128];
    let len = crate::wire::build_udp_frame(
        &mut good,
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        1234,
        80,
        0,
        0,
        20,
    )
    .unwrap();
    let frames = (0..16)
        .map(|i| good[..if i % 8 < 5 { len } else { 14 + 10 }].to_vec())
        .collect();
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = vec![Box::new(Frames {
        pool: Pool::new(64, 2048),
        frames,
        per_burst: 4,
    })];
    let sent = Arc::new(AtomicU64::new(0));
    let tx = |c: &Arc<AtomicU64>| -> Vec<Box<dyn PortTx<Buf = PoolBuf>>> {
        (0..queues)
            .map(|_| Box::new(Count(c.clone())) as Box<dyn PortTx<Buf = PoolBuf>>)
            .collect()
    };
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![tx(&Arc::new(AtomicU64::new(0))), tx(&sent)],
        forward: vec![Some(1), None],
    };
    let options = TxQueueOptions {
        bypass,
        ..TxQueueOptions::default()
    };
    let (shapers, _) = build_queues(&choice, 2, queues, options).unwrap();
    let ecfg = EngineConfig {
        pin: false,
        tx_queues: queues,
        ..EngineConfig::default()
    };
    let running = start_until_rx_done(&ecfg, ports, shapers);
    let shared = running.shared().clone();
    assert_eq!(running.join(), 0);
    let snap = shared.snapshot();
    // Received and transmitted bytes add up to the frames, however they went through.
    let bytes = (10 * len + 6 * 24) as u64;
    assert_eq!(snap.port(0, port::RX_BYTES), bytes);
    let tx: u64 = (queues..2 * queues)
        .map(|e| snap.egress(e, egress::TX_BYTES))
        .sum();
    assert_eq!(tx, bytes);
    (sent.load(Relaxed), snap.port(0, port::MALFORMED))
}

#[test]
fn malformed_counts_the_frames_that_were_classified() {
    // Queued frames are classified, so every malformed one is counted, and forwarded.
    assert_eq!(forward_malformed(QueueChoice::Fifo, 1, false), (16, 6));
    // CAKE reads the meta even to bypass: every frame is classified.
    let cake = QueueChoice::Cake(qdisc::cake::CakeConfig::default());
    assert_eq!(forward_malformed(cake, 1, true), (16, 6));
    // Several TX queues: the queue comes from the flow hash, so every frame is parsed.
    assert_eq!(forward_malformed(QueueChoice::Fifo, 2, true), (16, 6));
    // One TX queue over an idle FIFO with the bypass: no frame needs a meta, none is
    // parsed, so none is counted (as Linux never classifies a packet that bypasses an
    // empty pfifo_fast).
    assert_eq!(forward_malformed(QueueChoice::Fifo, 1, true), (16, 0));
}

#[test]
fn bad_engine_settings_name_the_setting_and_the_fix() {
    let e = EngineConfig {
        workers: 0,
        ..EngineConfig::default()
    }
    .timing()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("workers = 0") && e.contains("use 1 to 256"),
        "{e}"
    );
    let e = EngineConfig {
        duration: "soon".into(),
        ..EngineConfig::default()
    }
    .timing()
    .unwrap_err()
    .to_string();
    assert!(e.contains("'soon'") || e.contains("soon"), "{e}");
}

#[test]
fn bypassed_packets_a_full_handoff_cannot_take_are_tx_full_drops() {
    // A worker that does not own the egress hands bypassed packets to the owner; the
    // handoff holds 2, so 3 of a 5-packet burst are lost after the shaper let them out.
    let (shapers, _) =
        build_queues::<PoolBuf>(&QueueChoice::Fifo, 1, 1, TxQueueOptions::default()).unwrap();
    let pool = Pool::new(16, 256);
    let mut pkts: Vec<PoolBuf> = (0..5)
        .map(|_| pool.alloc_copy(&[0u8; 60]).unwrap())
        .collect();
    let mut metas = vec![PacketMeta::default(); 5];
    let handoff = ArrayQueue::new(2);
    let mut scratch = Vec::new();
    let offered = offer_to(
        shapers[0].as_ref(),
        0,
        &mut pkts,
        &mut metas,
        &mut |_, _| {},
        None,
        &handoff,
        &mut scratch,
    );
    assert_eq!((offered.bypassed, offered.handoff_full), (5, 3));
    assert_eq!((handoff.len(), scratch.len(), offered.bytes), (2, 0, 300));
    let lp = Layout {
        ports: 1,
        queues: 1,
    };
    let mut local = vec![0u64; lp.len()];
    count_offer(&mut local, lp, 0, offered);
    let drops = |r: DropReason| local[lp.egress(0, egress::DROPS + r.index())];
    // Lost on the way to the port, not refused by the queue's intake: conservation
    // (received = transmitted + dropped + queued) counts them once, under tx_full.
    assert_eq!(drops(DropReason::TxFull), 3);
    assert_eq!(drops(DropReason::IntakeFull), 0);
    assert_eq!(local[lp.egress(0, egress::BYPASS)], 5);
    assert_eq!(shapers[0].stats().total_drops(), 0);
}

#[test]
fn engine_table_parses_from_toml_and_rejects_unknown_keys() {
    let c: EngineConfig =
        toml::from_str("workers = 2\nidle = \"spin\"\ncores = [1]\nduration = \"0\"").unwrap();
    assert_eq!(
        (c.workers, c.idle, c.cores.clone()),
        (2, IdleMode::Spin, vec![1])
    );
    assert_eq!(c.timing().unwrap().duration_ns, None);
    assert!(toml::from_str::<EngineConfig>("worker = 2").is_err());
}

#[test]
fn a_queue_held_by_a_reader_leaves_its_workers_arrivals_in_the_receive_ring() {
    // A statistics read that holds a queue's runner lock from another thread (preempted
    // there, say) stops the queue's own worker from running it: its arrivals go to the
    // intake, which used to fill and drop (intake_full) while the worker kept receiving
    // flat out. Now the worker leaves them in the receive ring until the intake has room
    // for a burst again. The reader here holds the queue for 20 ms ten times over.
    use qdisc::cake::Cake;
    let cfg = SynthConfig {
        flows: 64,
        rate: "unlimited".into(),
        ..SynthConfig::default()
    };
    let plan = SynthPlan::new(&cfg, 0).unwrap();
    let stats = Arc::new(SynthStats::default());
    let rx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = vec![Box::new(SynthRx::new(
        &plan,
        Pool::new(4096, 2048),
        0,
        1,
        &stats,
    ))];
    let tx = || -> Vec<Box<dyn PortTx<Buf = PoolBuf>>> {
        vec![Box::new(SynthTx::new(64, stats.clone()))]
    };
    let ports = EnginePorts {
        rx: vec![rx, Vec::new()],
        tx: vec![tx(), tx()],
        forward: vec![Some(1), None],
    };
    let cake = |rate| {
        let c = qdisc::cake::CakeConfig {
            rate,
            ..qdisc::cake::CakeConfig::default()
        };
        Arc::new(qdisc::mq::TxQueue::new(
            Cake::<PoolBuf>::new(&c).unwrap(),
            TxQueueOptions::default(),
        ))
    };
    let egress = cake(qdisc::Rate::UNLIMITED);
    let shapers: Vec<Arc<dyn Shaper<PoolBuf>>> = vec![cake(qdisc::Rate::UNLIMITED), egress.clone()];
    let ecfg = EngineConfig {
        pin: false,
        ..EngineConfig::default()
    };
    let running = start(&ecfg, ports, shapers).unwrap();
    let mut held = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while held < 10 && std::time::Instant::now() < deadline {
        if egress
            .try_with_qdisc(|_| std::thread::sleep(Duration::from_millis(20)))
            .is_some()
        {
            held += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    running.stop_now();
    assert_eq!(running.join(), 0);
    let _ = egress.run(clock::now_ns(), 0, &mut Vec::new(), |_| {});
    let st = egress.stats();
    assert_eq!(held, 10, "the reader got the queue ten times");
    assert!(st.dequeued + st.bypassed > 10_000, "{st:?}");
    assert_eq!(st.intake_full, 0, "{st:?}");
}
