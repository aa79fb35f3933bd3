//! Rate sync of cake_mq queues in virtual time: N `TxQueue`s over one `SharedRate`, driven
//! tick by tick by one thread, with greedy (always backlogged) and thin (fixed-rate) sources.
//!
//! Every check is a ratio of delivered to configured bytes within one run, or a time measured
//! in the simulation's own clock; nothing depends on the machine's speed. The queues use
//! `VirtualShaper`, a minimal exact shaper (a virtual clock advanced by each packet's
//! serialization time, reset only when the queue was idle), so that what is measured is the
//! sync, not a shaper's error.

use std::collections::VecDeque;
use std::convert::Infallible;

use qdisc::mq::{MqQdisc, MultiQueue, SyncConfig, SyncPolicy, TxQueueOptions};
use qdisc::{Dequeue, Enqueued, Packet, PacketMeta, Qdisc, Rate};

const PKT_BYTES: usize = 1000;
const TICK_NS: u64 = 5_000;
const GBIT: Rate = Rate::from_bits_per_sec(1_000_000_000);

#[derive(Debug)]
struct Pkt;

impl Packet for Pkt {
    fn len(&self) -> usize {
        PKT_BYTES
    }

    fn set_ce(&mut self) -> bool {
        false
    }
}

/// An exact FIFO shaper for the sync tests.
struct VirtualShaper {
    queue: VecDeque<Pkt>,
    rate_bps: u64,
    time_next_ns: u64,
}

impl VirtualShaper {
    fn packet_ns(&self) -> u64 {
        (PKT_BYTES as u64 * 1_000_000_000).div_ceil(self.rate_bps.max(1))
    }
}

impl Qdisc<Pkt> for VirtualShaper {
    fn enqueue(&mut self, now_ns: u64, pkt: Pkt, _meta: &PacketMeta) -> Enqueued {
        if self.queue.is_empty() {
            self.time_next_ns = self.time_next_ns.max(now_ns);
        }
        self.queue.push_back(pkt);
        Enqueued::default()
    }

    fn dequeue(&mut self, now_ns: u64) -> Dequeue<Pkt> {
        if self.queue.is_empty() {
            return Dequeue::Empty;
        }
        if self.time_next_ns > now_ns {
            return Dequeue::NotBefore(self.time_next_ns);
        }
        self.time_next_ns += self.packet_ns();
        Dequeue::Packet(self.queue.pop_front().expect("checked non-empty"))
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn backlog_bytes(&self) -> u64 {
        (self.queue.len() * PKT_BYTES) as u64
    }

    fn try_bypass(&mut self, now_ns: u64, _pkt: &Pkt, _meta: &PacketMeta) -> bool {
        if !self.queue.is_empty() || self.time_next_ns > now_ns {
            return false;
        }
        self.time_next_ns = now_ns + self.packet_ns();
        true
    }

    fn set_rate(&mut self, rate: Rate) {
        self.rate_bps = rate.bytes_per_sec();
    }

    fn rate(&self) -> Rate {
        Rate::from_bytes_per_sec(self.rate_bps)
    }

    fn next_wakeup(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.time_next_ns)
    }
}

impl MqQdisc<Pkt> for VirtualShaper {
    type Config = Rate;
    type Error = Infallible;

    fn build(rate: &Rate) -> Result<VirtualShaper, Infallible> {
        Ok(VirtualShaper {
            queue: VecDeque::new(),
            rate_bps: rate.bytes_per_sec(),
            time_next_ns: 0,
        })
    }

    fn validate(_rate: &Rate) -> Result<(), Infallible> {
        Ok(())
    }

    fn reconfigure(&mut self, rate: &Rate) -> Result<(), Infallible> {
        self.set_rate(*rate);
        Ok(())
    }

    fn config_rate(rate: &Rate) -> Rate {
        *rate
    }
}

/// What feeds one queue.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Keeps at least 32 packets waiting.
    Greedy,
    /// Offers packets at this fraction of the global rate.
    Thin(f64),
    /// Offers nothing.
    Off,
}

struct Sim {
    mq: MultiQueue<Pkt, VirtualShaper>,
    sources: Vec<Source>,
    credit: Vec<f64>,
    now_ns: u64,
    delivered: Vec<u64>,
    last_delivery_ns: Vec<u64>,
}

impl Sim {
    fn new(sources: &[Source], policy: SyncPolicy) -> Sim {
        let options = TxQueueOptions {
            intake_capacity: 4096,
            bypass: true,
            sync: SyncConfig {
                policy,
                ..SyncConfig::default()
            },
        };
        let mq = MultiQueue::from_config(sources.len(), options, &GBIT).unwrap();
        Sim {
            mq,
            sources: sources.to_vec(),
            credit: vec![0.0; sources.len()],
            now_ns: 0,
            delivered: vec![0; sources.len()],
            last_delivery_ns: vec![0; sources.len()],
        }
    }

    fn step(&mut self) {
        self.now_ns += TICK_NS;
        let meta = PacketMeta::default();
        let mut out = Vec::new();
        for i in 0..self.sources.len() {
            let q = self.mq.queue(i);
            let offered = match self.sources[i] {
                Source::Greedy => 32usize.saturating_sub(q.backlog()),
                Source::Thin(fraction) => {
                    let bytes = GBIT.bytes_per_sec() as f64 * fraction * TICK_NS as f64 / 1e9;
                    self.credit[i] += bytes / PKT_BYTES as f64;
                    let whole = self.credit[i].floor();
                    self.credit[i] -= whole;
                    whole as usize
                }
                Source::Off => 0,
            };
            let mut sent = 0u64;
            for _ in 0..offered {
                if let qdisc::mq::Intake::Bypass(_) = q.enqueue(self.now_ns, Pkt, &meta) {
                    sent += 1;
                }
            }
            q.run(self.now_ns, 256, &mut out, |o| {
                sent += o.len() as u64;
                o.clear();
            });
            if sent > 0 {
                self.delivered[i] += sent * PKT_BYTES as u64;
                self.last_delivery_ns[i] = self.now_ns;
            }
        }
    }

    fn run_for(&mut self, ns: u64) {
        let end = self.now_ns + ns;
        while self.now_ns < end {
            self.step();
        }
    }

    /// Delivered bytes of all queues over `ns` after a warm-up, as a fraction of the rate.
    fn aggregate_ratio(&mut self, warmup_ns: u64, ns: u64) -> f64 {
        self.run_for(warmup_ns);
        let before: u64 = self.delivered.iter().sum();
        self.run_for(ns);
        let after: u64 = self.delivered.iter().sum();
        (after - before) as f64 / (GBIT.bytes_per_sec() as f64 * ns as f64 / 1e9)
    }
}

#[test]
fn equal_demand_on_one_to_eight_queues_holds_the_global_rate_within_one_percent() {
    for policy in [SyncPolicy::WorkConserving, SyncPolicy::Equal] {
        for n in 1..=8 {
            let mut sim = Sim::new(&vec![Source::Greedy; n], policy);
            let ratio = sim.aggregate_ratio(20_000_000, 200_000_000);
            println!("{policy:?} n={n}: aggregate {ratio:.5}");
            assert!(
                (ratio - 1.0).abs() < 0.01,
                "{policy:?} with {n} queues delivered {ratio:.4} of the rate"
            );
            let per_queue: Vec<f64> = sim
                .delivered
                .iter()
                .map(|&b| b as f64 / sim.delivered[0] as f64)
                .collect();
            assert!(
                per_queue.iter().all(|r| (r - 1.0).abs() < 0.02),
                "{policy:?} with {n} queues split unevenly: {per_queue:?}"
            );
        }
    }
}

#[test]
fn work_conserving_split_gives_a_thin_queues_leftover_to_the_bulk_queue() {
    let sources = [Source::Thin(0.05), Source::Greedy];
    let mut wc = Sim::new(&sources, SyncPolicy::WorkConserving);
    let wc_ratio = wc.aggregate_ratio(20_000_000, 300_000_000);
    assert!(
        (wc_ratio - 1.0).abs() < 0.01,
        "work-conserving delivered {wc_ratio:.4} of the rate"
    );
    println!("work-conserving thin+bulk: aggregate {wc_ratio:.5}");
    let thin_ratio = wc.delivered[0] as f64 / wc.delivered.iter().sum::<u64>() as f64;
    assert!(
        (0.04..0.06).contains(&thin_ratio),
        "thin queue got {thin_ratio:.4}"
    );

    let mut equal = Sim::new(&sources, SyncPolicy::Equal);
    let equal_ratio = equal.aggregate_ratio(20_000_000, 300_000_000);
    println!("equal thin+bulk: aggregate {equal_ratio:.5}");
    assert!(
        equal_ratio < 0.60,
        "equal split should fall short (Linux cake_mq), delivered {equal_ratio:.4}"
    );
}

#[test]
fn a_queue_going_idle_releases_its_share_within_two_sync_intervals() {
    for policy in [SyncPolicy::WorkConserving, SyncPolicy::Equal] {
        let mut sim = Sim::new(&[Source::Greedy, Source::Greedy], policy);
        sim.run_for(20_000_000);
        let half = GBIT.bytes_per_sec() / 2;
        assert_eq!(sim.mq.queue(0).stats().share.bytes_per_sec(), half);
        sim.sources[1] = Source::Off;
        while sim.mq.queue(1).backlog() > 0 {
            sim.step();
        }
        let idle_at = sim.last_delivery_ns[1];
        let interval = SyncConfig::default().sync_interval_ns;
        while sim.now_ns <= idle_at + 2 * interval {
            sim.step();
        }
        let s = sim.mq.queue(0).stats();
        assert_eq!(
            s.share,
            GBIT,
            "{policy:?}: share still {} {} ns after the sibling went idle",
            s.share,
            sim.now_ns - idle_at
        );
        assert_eq!(s.active_queues, 1);
    }
}

#[test]
fn a_global_rate_change_reaches_every_queue_at_its_next_run() {
    let mut sim = Sim::new(&[Source::Greedy; 4], SyncPolicy::WorkConserving);
    sim.run_for(5_000_000);
    let new_rate = Rate::from_bits_per_sec(400_000_000);
    sim.mq.set_rate(new_rate);
    sim.step();
    for q in sim.mq.queues() {
        assert_eq!(
            q.stats().share.bytes_per_sec(),
            new_rate.bytes_per_sec() / 4
        );
    }
}
