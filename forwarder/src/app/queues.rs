//! The TX queues of the egress ports: one [`qdisc::mq::MultiQueue`] per port (CAKE, FIFO or
//! none), split into per-queue [`Shaper`]s for the workers and one [`LiveTarget`] per port for
//! the control socket and reloads, plus the tin reports that read the queues' qdiscs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

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
}

impl<P: PortBuf, Q: MqQdisc<P> + TinReport> MqSlot<P, Q> {
    fn new(mq: Arc<MultiQueue<P, Q>>, i: usize) -> MqSlot<P, Q> {
        MqSlot {
            mq,
            i,
            last_tins: Mutex::new(Vec::new()),
        }
    }

    /// The tins, read between the queue's runs: by the worker that runs it (a report never
    /// holds the queue while a worker offers to it: a burst arriving then is queued instead
    /// of bypassed, and a queue offered more than CAKE's own path carries never gets back to
    /// the bypass, measured on DPDK vdevs at 4 instead of 12-16 Mpps), or from this thread
    /// when `ask_runner` is false or no worker came. A queue busy on every try keeps its
    /// last figures, so that a scraper does not see its series vanish.
    fn read_tins(&self, ask_runner: bool) -> Vec<TinSnapshot> {
        let mut ask_runner = ask_runner;
        let read = read_between_runs(
            self.mq.queue(self.i),
            |q: &mut Q| q.tin_snapshots(),
            &mut ask_runner,
        );
        let mut last = self.last_tins.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tins) = read {
            *last = tins;
        }
        last.clone()
    }
}

/// Tries at reading a busy queue (20 us apart) before a report goes without it (or keeps its last figures).
const READ_TRIES: usize = 1000;

/// How long a read waits for a queue's runner to make it. A worker serves a queue's reads
/// at its next run, within microseconds while it is busy and within its longest idle sleep
/// (160 us) otherwise; one that has not come by then is stuck, and the read takes the
/// runner lock itself.
const RUNNER_READ_WAIT: Duration = Duration::from_millis(50);

/// Runs `read` on `queue`'s qdisc between two of its runs: made by the queue's runner
/// (the worker that runs it) when one comes, else under the runner lock from this
/// thread, which tries for a while and gives up on a queue busy all that time (`None`).
/// With `ask_runner` false it goes straight to the lock; a runner that did not come
/// within [`RUNNER_READ_WAIT`] clears it.
///
/// A read from this thread holds the queue for as long as this thread is off its core
/// should the scheduler preempt it meanwhile (the supervisor and the control socket
/// share their core with everything else): flat out at 100 000 circuits, the longest
/// of one `ctl circuits`' 256-slot holds was 7.3 ms against 13 us on average, a stall
/// of tens of thousands of packets. Made by the worker, a read stalls the queue only
/// while the worker itself is off its core (as its packets would be), and costs it what
/// a reader holding the lock cost it anyway.
pub(super) fn read_between_runs<P: qdisc::Packet + Send, Q: MqQdisc<P>, R: Send + 'static>(
    queue: &TxQueue<P, Q>,
    read: impl Fn(&mut Q) -> R + Send + Sync + 'static,
    ask_runner: &mut bool,
) -> Option<R> {
    let read = Arc::new(read);
    if *ask_runner {
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let by_runner = read.clone();
        let ticket = queue.request_read(Box::new(move |s| {
            let _ = answer.send(by_runner(s));
        }));
        if let Ok(got) = answered.recv_timeout(RUNNER_READ_WAIT) {
            return Some(got);
        }
        if !queue.withdraw_read(ticket) {
            // The runner took it after all: it is being made.
            return answered.recv().ok();
        }
        *ask_runner = false;
    }
    for _ in 0..READ_TRIES {
        if let Some(got) = queue.try_with_qdisc(|s| read(s)) {
            return Some(got);
        }
        // A sleep, not a yield: on a loaded core a yield comes straight back while the
        // worker still holds the queue.
        std::thread::sleep(Duration::from_micros(20));
    }
    None
}

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
        self.mq.queue(self.i).run(now_ns, budget, out, transmit)
    }
    #[inline]
    fn run_wanted(&self, now_ns: u64) -> bool {
        self.mq.queue(self.i).run_wanted(now_ns)
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
        self.read_tins(true)
    }
    fn tins_now(&self) -> Vec<TinSnapshot> {
        // The final report: the workers have stopped.
        self.read_tins(false)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_read_is_made_by_the_runner_or_else_under_the_lock() {
        use crate::port::pool::PoolBuf;
        use qdisc::fifo::Fifo;
        use qdisc::mq::{TxQueue, TxQueueOptions};
        let q = Arc::new(TxQueue::<PoolBuf, Fifo<PoolBuf>>::new(
            Fifo::new(8),
            TxQueueOptions::default(),
        ));
        let who = |_: &mut Fifo<PoolBuf>| std::thread::current().name().map(String::from);
        // No runner: the read is withdrawn after the wait and made here, under the lock, and
        // the rest of the report goes straight to the lock.
        let mut ask_runner = true;
        let here = std::thread::current().name().map(String::from);
        assert_eq!(read_between_runs(&q, who, &mut ask_runner), Some(here));
        assert!(!ask_runner);
        // A runner that polls the queue as a worker does makes it, on its own thread.
        let stop = Arc::new(AtomicBool::new(false));
        let runner = {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::Builder::new()
                .name("runner".into())
                .spawn(move || {
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        if q.run_wanted(0) {
                            q.run(0, 32, &mut out, |_| {});
                        }
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                })
                .unwrap()
        };
        let mut ask_runner = true;
        for _ in 0..3 {
            let by = read_between_runs(&q, who, &mut ask_runner);
            assert_eq!(by, Some(Some("runner".to_string())));
        }
        assert!(ask_runner);
        stop.store(true, Ordering::Relaxed);
        runner.join().unwrap();
    }
}
