//! The TX queues of the egress ports: one [`qdisc::mq::MultiQueue`] per port (CAKE, FIFO or
//! none), split into per-queue [`Shaper`]s for the workers and one [`LiveTarget`] per port for
//! the control socket and reloads, plus the tin reports that read the queues' qdiscs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use qdisc::cake::{Cake, CakeConfig};
use qdisc::circuit::{CircuitShaper, CircuitShaperConfig};
use qdisc::fifo::{Fifo, FifoConfig};
use qdisc::mq::{MqQdisc, MultiQueue, Offerer, TxQueue, TxQueueOptions};
use qdisc::{PacketMeta, Rate};

use crate::control::LiveTarget;
use crate::counters::TinSnapshot;
use crate::engine::shaper::TinReport;
use crate::engine::{self, Shaper};
use crate::port::PortBuf;
use crate::stats::QueueView;

/// One egress port's queues, usable as live targets and as per-queue shapers.
pub(super) struct PortQueues<P: PortBuf, Q: MqQdisc<P>> {
    mq: Arc<MultiQueue<P, Q>>,
}

/// Queue `i` of a [`MultiQueue`] as an engine [`Shaper`].
pub(super) struct MqSlot<P: PortBuf, Q: MqQdisc<P>> {
    mq: Arc<MultiQueue<P, Q>>,
    i: usize,
    /// The tins as last read: a queue its runner holds on every try keeps its last figures
    /// in reports instead of dropping out of them (a scraper would see its series vanish).
    last_tins: Mutex<Vec<TinSnapshot>>,
    /// Set by a report that wants the tins: the worker that runs the queue reads them after
    /// its next run, so that a report never holds the queue while a worker offers to it (a
    /// burst arriving then is queued instead of bypassed, and a queue offered more than
    /// CAKE's own path carries never gets back to the bypass: measured on DPDK vdevs, 4
    /// instead of 12-16 Mpps).
    tins_wanted: AtomicBool,
    /// Counts the reads the worker made for a report.
    tins_read: AtomicU64,
    /// The worker did not answer the last request (stopped or stuck): read directly.
    runner_silent: AtomicBool,
}

impl<P: PortBuf, Q: MqQdisc<P> + TinReport> MqSlot<P, Q> {
    fn new(mq: Arc<MultiQueue<P, Q>>, i: usize) -> MqSlot<P, Q> {
        MqSlot {
            mq,
            i,
            last_tins: Mutex::new(Vec::new()),
            tins_wanted: AtomicBool::new(false),
            tins_read: AtomicU64::new(0),
            runner_silent: AtomicBool::new(false),
        }
    }

    /// Reads the tins when the queue is free; true when it was.
    fn read_tins(&self) -> bool {
        match self.mq.queue(self.i).try_with_qdisc(|q| q.tin_snapshots()) {
            Some(tins) => {
                *self.last_tins.lock().unwrap_or_else(|e| e.into_inner()) = tins;
                true
            }
            None => false,
        }
    }

    fn last_tins(&self) -> Vec<TinSnapshot> {
        self.last_tins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the tins from this thread (retrying a busy queue), else the last figures.
    fn tins_direct(&self) -> Vec<TinSnapshot> {
        for _ in 0..TIN_READ_TRIES {
            if self.read_tins() {
                break;
            }
            std::thread::yield_now();
        }
        self.last_tins()
    }
}

/// Tries at reading a busy queue's tins before a report falls back to the last figures.
const TIN_READ_TRIES: usize = 200;

/// How long a report waits for the queue's worker to read the tins before it reads them
/// itself. A worker answers within one loop iteration unless the OS took its CPU away (on a
/// shared machine, tens of milliseconds).
const TIN_READ_WAIT: Duration = Duration::from_millis(100);

impl<P: PortBuf, Q: MqQdisc<P> + TinReport> Shaper<P> for MqSlot<P, Q>
where
    MultiQueue<P, Q>: Send + Sync,
    TxQueue<P, Q>: Send + Sync,
{
    #[inline]
    fn offer(&self, now_ns: u64, pkt: P, meta: &PacketMeta) -> qdisc::mq::Intake<P> {
        self.mq.queue(self.i).enqueue(now_ns, pkt, meta)
    }
    #[inline]
    fn offer_burst(
        &self,
        now_ns: u64,
        pkts: &mut Vec<P>,
        metas: &mut [PacketMeta],
        classify: &mut dyn FnMut(&P, &mut PacketMeta),
        out: &mut Vec<P>,
        offerer: Offerer,
    ) -> qdisc::mq::BurstOutcome {
        Shaper::offer_burst(
            self.mq.queue(self.i),
            now_ns,
            pkts,
            metas,
            classify,
            out,
            offerer,
        )
    }
    #[inline]
    fn offer_would_overflow(&self, burst: usize) -> bool {
        self.mq.queue(self.i).offer_would_overflow(burst)
    }
    #[inline]
    fn run(
        &self,
        now_ns: u64,
        budget: usize,
        out: &mut Vec<P>,
        transmit: &mut dyn FnMut(&mut Vec<P>),
    ) -> qdisc::mq::RunResult {
        let r = self.mq.queue(self.i).run(now_ns, budget, out, transmit);
        if self.tins_wanted.load(Ordering::Relaxed) && self.read_tins() {
            self.tins_wanted.store(false, Ordering::Relaxed);
            self.tins_read.fetch_add(1, Ordering::Release);
        }
        r
    }
    #[inline]
    fn run_wanted(&self, now_ns: u64) -> bool {
        self.mq.queue(self.i).run_wanted(now_ns) || self.tins_wanted.load(Ordering::Relaxed)
    }
    #[inline]
    fn run_urgent(&self, now_ns: u64) -> bool {
        self.mq.queue(self.i).run_urgent(now_ns)
    }
    fn backlog(&self) -> u64 {
        self.mq.queue(self.i).backlog() as u64
    }
    fn stats(&self) -> qdisc::mq::TxQueueStats {
        self.mq.queue(self.i).stats()
    }
    fn set_rate(&self, rate: Rate) {
        self.mq.set_rate(rate);
    }
    fn rate(&self) -> Rate {
        self.mq.rate()
    }
    fn tins(&self) -> Vec<TinSnapshot> {
        if !self.runner_silent.load(Ordering::Relaxed) {
            let before = self.tins_read.load(Ordering::Acquire);
            self.tins_wanted.store(true, Ordering::Relaxed);
            let deadline = Instant::now() + TIN_READ_WAIT;
            while Instant::now() < deadline {
                if self.tins_read.load(Ordering::Acquire) != before {
                    return self.last_tins();
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            // No worker runs it (stopped, stuck, or never scheduled): from now on read it
            // directly, until a worker answers a request again.
            self.runner_silent.store(true, Ordering::Relaxed);
        } else if self.tins_read.load(Ordering::Acquire) > 0
            && !self.tins_wanted.load(Ordering::Relaxed)
        {
            self.runner_silent.store(false, Ordering::Relaxed);
        }
        self.tins_direct()
    }
    fn tins_now(&self) -> Vec<TinSnapshot> {
        self.tins_direct()
    }
}

impl<P: PortBuf> LiveTarget for PortQueues<P, Cake<P>> {
    fn set_rate(&self, rate: Rate) {
        self.mq.set_rate(rate);
    }
    fn reconfigure(&self, cake: &CakeConfig) -> Result<(), String> {
        self.mq.reconfigure(cake).map_err(|e| e.to_string())
    }
    fn rate(&self) -> Rate {
        self.mq.rate()
    }
}

/// A direction shaped per circuit: its link rate is the queues' shared rate; every other
/// change reaches it through the circuits ([`crate::control::CircuitControl`]), which
/// rebuild the plans on the new options.
impl<P: PortBuf> LiveTarget for PortQueues<P, CircuitShaper<P>> {
    fn set_rate(&self, rate: Rate) {
        self.mq.set_rate(rate);
    }
    fn reconfigure(&self, _cake: &CakeConfig) -> Result<(), String> {
        Err("a direction shaped per circuit changes its options through its circuits; this is a bug in the caller".into())
    }
    fn rate(&self) -> Rate {
        self.mq.rate()
    }
}

/// One direction's circuit queues: the engine's shapers, the live target, the queues.
pub(super) type BuiltCircuits<P> = (
    Vec<Arc<dyn Shaper<P>>>,
    Arc<dyn LiveTarget>,
    Arc<MultiQueue<P, CircuitShaper<P>>>,
);

/// Builds `queues` circuit-shaper TX queues from `config`: the engine's shapers, the live
/// target, and the queues themselves for the circuits' runtime.
///
/// # Errors
/// When the circuit shaper refuses the configuration.
pub(super) fn build_circuit_queues<P: PortBuf>(
    config: &CircuitShaperConfig,
    queues: usize,
    options: TxQueueOptions,
) -> anyhow::Result<BuiltCircuits<P>> {
    let mq: MultiQueue<P, CircuitShaper<P>> =
        MultiQueue::from_config(queues, options, config).context("building the circuit queues")?;
    let mq = Arc::new(mq);
    let shapers = (0..queues)
        .map(|i| Arc::new(MqSlot::new(mq.clone(), i)) as Arc<dyn Shaper<P>>)
        .collect();
    Ok((shapers, Arc::new(PortQueues { mq: mq.clone() }), mq))
}

impl<P: PortBuf> LiveTarget for PortQueues<P, Fifo<P>> {
    fn set_rate(&self, rate: Rate) {
        self.mq.set_rate(rate);
    }
    fn reconfigure(&self, cake: &CakeConfig) -> Result<(), String> {
        self.mq.set_rate(cake.rate);
        Ok(())
    }
    fn rate(&self) -> Rate {
        self.mq.rate()
    }
}

pub(super) struct ShaperView<P>(pub(super) Arc<dyn Shaper<P>>);

impl<P: PortBuf> QueueView for ShaperView<P> {
    fn stats(&self) -> qdisc::mq::TxQueueStats {
        self.0.stats()
    }
    fn backlog(&self) -> u64 {
        self.0.backlog()
    }
    fn tins(&self) -> Vec<TinSnapshot> {
        self.0.tins()
    }
    fn tins_now(&self) -> Vec<TinSnapshot> {
        self.0.tins_now()
    }
    fn rate(&self) -> Rate {
        self.0.rate()
    }
}

/// Which queueing discipline the TX queues run, for [`build_queues`].
#[derive(Debug, Clone)]
pub enum QueueChoice {
    /// CAKE with this configuration.
    Cake(CakeConfig),
    /// The FIFO baseline.
    Fifo,
    /// No queue at all (the bare port loop).
    None,
}

/// Per-egress shapers and per-port live targets.
pub type Built<P> = (Vec<Arc<dyn Shaper<P>>>, Vec<Arc<dyn LiveTarget>>);

/// Builds `queues` TX queues for each of `ports` egress ports, all with `choice`.
///
/// # Errors
/// When CAKE refuses the configuration.
pub fn build_queues<P: PortBuf>(
    choice: &QueueChoice,
    ports: usize,
    queues: usize,
    options: TxQueueOptions,
) -> anyhow::Result<Built<P>> {
    build_port_queues(&vec![choice.clone(); ports], queues, options)
}

/// Builds `queues` TX queues for each egress port, port `p` with `choices[p]`: each
/// direction its own queues, its own shared rate and its own CAKE options.
///
/// # Errors
/// When CAKE refuses a configuration.
pub fn build_port_queues<P: PortBuf>(
    choices: &[QueueChoice],
    queues: usize,
    options: TxQueueOptions,
) -> anyhow::Result<Built<P>> {
    let mut shapers: Vec<Arc<dyn Shaper<P>>> = Vec::new();
    let mut targets: Vec<Arc<dyn LiveTarget>> = Vec::new();
    for choice in choices {
        match choice {
            QueueChoice::Cake(cfg) => {
                let mq: MultiQueue<P, Cake<P>> = MultiQueue::from_config(queues, options, cfg)
                    .context("building the CAKE queues")?;
                let mq = Arc::new(mq);
                for i in 0..queues {
                    shapers.push(Arc::new(MqSlot::new(mq.clone(), i)));
                }
                targets.push(Arc::new(PortQueues { mq }));
            }
            QueueChoice::Fifo => {
                let mq: MultiQueue<P, Fifo<P>> = MultiQueue::from_config(
                    queues,
                    options,
                    &FifoConfig {
                        limit_packets: 1000,
                    },
                )
                .context("building the FIFO queues")?;
                let mq = Arc::new(mq);
                for i in 0..queues {
                    shapers.push(Arc::new(MqSlot::new(mq.clone(), i)));
                }
                targets.push(Arc::new(PortQueues { mq }));
            }
            QueueChoice::None => {
                for _ in 0..queues {
                    shapers.push(Arc::new(engine::Passthrough));
                }
            }
        }
    }
    Ok((shapers, targets))
}
