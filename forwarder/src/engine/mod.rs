//! The worker loops: each worker, pinned to one core, polls its receive queues in bursts,
//! offers each burst to the TX queues' [`Shaper`]s (a bypassed packet goes straight into the
//! transmit burst), runs the TX queues it owns and transmits in bursts. Packets the port had
//! no room for stay in the burst and are retried; nothing is dropped for a full ring.
//!
//! A packet is parsed ([`crate::wire::parse_into`]) only when something needs its meta:
//! with several TX queues per port every packet is (its queue comes from the flow hash);
//! with one, the queue classifies on demand, so a burst that bypasses an idle FIFO is never
//! parsed at all (Linux's `TCQ_F_CAN_BYPASS` skips classification the same way).
//!
//! Per loop iteration a worker reads the clock once ([`crate::clock::now_ns`]) and allocates
//! nothing; it writes only its own counter block ([`crate::counters`]), every few busy
//! iterations and on the first idle one. A TX queue with nothing to drain, dequeue or sync
//! ([`Shaper::run_wanted`]) is not run. Stopping is two-phase:
//! [`Running::stop_rx`] stops receiving and lets the workers drain their queues until they
//! are empty or the drain deadline passes; [`Running::join`] waits for them.
//!
//! The engine does not build ports or shapers: [`crate::app`] does and hands them over.

pub mod shaper;
mod worker;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::counters::{Layout, Snapshot, WorkerCounters};
use crate::port::{PortBuf, PortRx, PortTx};
pub use shaper::{Passthrough, Shaper, TinReport};
use worker::{RxSlot, TxSlot, Worker};

/// What a worker does when a loop iteration found no work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdleMode {
    /// Back off politely: spin a little, then sleep in short steps (the default; shares a
    /// small machine well).
    #[default]
    Sleep,
    /// Busy-poll (lowest latency; burns the core).
    Spin,
}

/// How a received packet's TX queue is chosen when a port has several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxSelect {
    /// The default: [`TxSelect::Worker`] with several workers and several TX queues (no
    /// packet waits in a ring between cores, where a full ring drops), else
    /// [`TxSelect::FlowHash`] (one worker runs every queue, so the hash spreads flows over
    /// them at no cost). Worker needs each flow to arrive on one receive queue, which every
    /// port keeps (the generator splits its flows between queues, a pcap port has one,
    /// AF_PACKET joins a hash fanout group); a DPDK port without RSS on several receive
    /// queues does not, and gets flow-hash ([`TxSelect::resolve`]).
    #[default]
    Auto,
    /// By the flow hash, as Linux's `skb_tx_hash`: any worker may offer to any queue, and a
    /// queue another worker runs is reached through its intake.
    FlowHash,
    /// A worker sends on the queues it runs itself, as Linux's XPS maps a CPU to its own TX
    /// queue: no packet crosses cores. Each flow must arrive on one receive queue (RSS on a
    /// NIC, AF_PACKET's hash fanout), or its packets would be split between two CAKE
    /// instances. With fewer TX queues than workers, a worker that runs none of a port's
    /// queues sends on queue `worker % tx_queues`.
    Worker,
}

impl TxSelect {
    /// The name the config file uses.
    pub fn name(self) -> &'static str {
        match self {
            TxSelect::Auto => "auto",
            TxSelect::FlowHash => "flow-hash",
            TxSelect::Worker => "worker",
        }
    }

    /// The choice in effect with `workers` workers and `tx_queues` TX queues per port, when
    /// the ports keep each flow on one receive queue (`flows_stay_on_one_rx_queue`), and why,
    /// in words `check-config` and the start line print.
    pub fn resolve(
        self,
        workers: usize,
        tx_queues: usize,
        flows_stay_on_one_rx_queue: bool,
    ) -> (TxSelect, String) {
        let crossing = "about half the packets would cross to another worker's queue through a ring that drops when full (51 % dropped in BENCHMARKS.md, \"DPDK forwarding, one core\")";
        match self {
            TxSelect::Auto if workers <= 1 || tx_queues <= 1 => (
                TxSelect::FlowHash,
                if workers <= 1 {
                    "auto with one worker: it runs every TX queue itself, so the flow hash spreads flows over them and nothing crosses cores".to_string()
                } else {
                    "auto with one TX queue per port: there is nothing to choose".to_string()
                },
            ),
            TxSelect::Auto if !flows_stay_on_one_rx_queue => (
                TxSelect::FlowHash,
                format!("auto: a port spreads one flow over several receive queues (a DPDK NIC without RSS), so sending on the receiving worker's queue would split flows between CAKE instances; by flow hash instead, although {crossing}"),
            ),
            TxSelect::Auto => (
                TxSelect::Worker,
                format!("auto with {workers} workers and {tx_queues} TX queues: each worker sends on its own TX queues (Linux's XPS), as every port keeps a flow on one receive queue; by flow hash {crossing}"),
            ),
            TxSelect::FlowHash if workers > 1 && tx_queues > 1 => (
                TxSelect::FlowHash,
                format!("as set; with {workers} workers {crossing}; \"auto\" picks \"worker\""),
            ),
            TxSelect::Worker if workers <= 1 => (
                TxSelect::Worker,
                "as set; with one worker every packet of a receive queue goes to one TX queue, where \"auto\" spreads flows over them by hash".to_string(),
            ),
            other => (other, "as set".to_string()),
        }
    }
}

/// The `[engine]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Worker threads (one per core).
    pub workers: usize,
    /// TX queues (CAKE instances) per port.
    pub tx_queues: usize,
    /// Packets per receive and transmit burst.
    pub burst: usize,
    /// What an idle worker does.
    pub idle: IdleMode,
    /// How long to keep transmitting queued packets after receiving stopped ("1s").
    pub drain_timeout: String,
    /// Stop by itself after this long ("10s"; "0" runs until interrupted).
    pub duration: String,
    /// Cores to pin workers to, in order; empty picks the last cores of the machine. For
    /// software ports only: DPDK ports' workers run on EAL's worker lcores
    /// ([`crate::port::lcores`]).
    pub cores: Vec<usize>,
    /// Pin workers to cores at all.
    pub pin: bool,
    /// How a packet's TX queue is chosen when a port has several.
    pub tx_select: TxSelect,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            workers: 1,
            tx_queues: 1,
            burst: 32,
            idle: IdleMode::Sleep,
            drain_timeout: "1s".into(),
            duration: "10s".into(),
            cores: Vec::new(),
            pin: true,
            tx_select: TxSelect::Auto,
        }
    }
}

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A count was zero or too large.
    #[error("engine setting {name} = {value} is out of range; use {hint}")]
    BadSetting {
        /// The setting.
        name: &'static str,
        /// The value given.
        value: String,
        /// What would work.
        hint: &'static str,
    },
    /// The ports handed to the engine do not match the layout.
    #[error("port {port} has {got} TX queues but the engine expects {want}; this is a bug in the caller")]
    QueueMismatch {
        /// The port.
        port: usize,
        /// TX halves given.
        got: usize,
        /// TX queues per port.
        want: usize,
    },
    /// `engine.cores` names a core this process cannot run on.
    #[error("engine.cores names core {core}, but this process can run only on cores {usable}; list cores from those (or leave engine.cores empty to pick the last cores)")]
    NoSuchCore {
        /// The core named.
        core: usize,
        /// The cores the process may run on, as a list ("0-3").
        usable: String,
    },
    /// A worker thread could not be started.
    #[error("cannot start worker thread {worker}")]
    Spawn {
        /// The worker.
        worker: usize,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Parsed engine timing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineTiming {
    /// Drain deadline after receiving stops (ns).
    pub drain_timeout_ns: u64,
    /// Run duration (ns); `None` runs until stopped.
    pub duration_ns: Option<u64>,
}

impl EngineConfig {
    /// Checks the counts and parses the durations.
    pub fn timing(&self) -> Result<EngineTiming, EngineError> {
        let dur = |name: &'static str, s: &str| -> Result<Option<u64>, EngineError> {
            let t = s.trim();
            if t.is_empty() || t == "0" {
                return Ok(None);
            }
            crate::config::units::parse_run_length_ns(t)
                .map(Some)
                .map_err(|_| EngineError::BadSetting {
                    name,
                    value: s.to_string(),
                    hint: "a duration with its unit, like '10s' or '500ms', or '0' for none",
                })
        };
        if self.workers == 0 || self.workers > 256 {
            return Err(EngineError::BadSetting {
                name: "workers",
                value: self.workers.to_string(),
                hint: "1 to 256 (one per core)",
            });
        }
        if self.tx_queues == 0 || self.tx_queues > 1024 {
            return Err(EngineError::BadSetting {
                name: "tx_queues",
                value: self.tx_queues.to_string(),
                hint: "1 to 1024",
            });
        }
        if self.burst == 0 || self.burst > 1024 {
            return Err(EngineError::BadSetting {
                name: "burst",
                value: self.burst.to_string(),
                hint: "1 to 1024 (32 is typical)",
            });
        }
        Ok(EngineTiming {
            drain_timeout_ns: dur("drain_timeout", &self.drain_timeout)?.unwrap_or(0),
            duration_ns: dur("duration", &self.duration)?,
        })
    }
}

/// The receive and transmit halves of every port, as the engine takes them.
pub struct EnginePorts<P: PortBuf> {
    /// Per port, its receive queues.
    pub rx: Vec<Vec<Box<dyn PortRx<Buf = P>>>>,
    /// Per port, one transmit half per TX queue (`tx_queues` of them).
    pub tx: Vec<Vec<Box<dyn PortTx<Buf = P>>>>,
    /// Per port, where its received packets go (`None`: the port is not polled).
    pub forward: Vec<Option<usize>>,
}

const RUNNING: u8 = 0;
const DRAINING: u8 = 1;
const STOPPED: u8 = 2;

/// State shared between the workers and the thread that runs the engine.
#[derive(Debug)]
pub struct EngineShared {
    state: AtomicU8,
    drain_deadline_ns: AtomicU64,
    /// One counter block per worker.
    pub counters: Arc<WorkerCounters>,
    rx_done: Vec<AtomicBool>,
    /// Set by each worker once it has seen the drain start: from then on it never offers
    /// another packet, so no queue or handoff of another worker's can fill up again.
    offers_stopped: Vec<AtomicBool>,
    /// Per worker, a count its loop advances every iteration (0: not started yet;
    /// [`WORKER_DONE`]: left its loop): a worker stuck in a port call stops advancing it,
    /// which the supervisor's watchdog notices.
    heartbeats: Vec<CachePadded<AtomicU64>>,
}

/// A worker's heartbeat once it has left its loop.
pub const WORKER_DONE: u64 = u64::MAX;

impl EngineShared {
    /// Counters summed over every worker.
    pub fn snapshot(&self) -> Snapshot {
        self.counters.snapshot()
    }

    /// Every worker's heartbeat (see the field): compare two readings to see which workers'
    /// loops advanced in between.
    pub fn heartbeats(&self) -> Vec<u64> {
        self.heartbeats.iter().map(|h| h.load(Relaxed)).collect()
    }
}

/// A running engine.
pub struct Running<P> {
    shared: Arc<EngineShared>,
    shapers: Shapers<P>,
    handoff: Arc<Vec<ArrayQueue<P>>>,
    handles: Vec<JoinHandle<()>>,
    drain_timeout_ns: u64,
}

impl<P: PortBuf> Running<P> {
    /// The counters and state shared with the workers.
    pub fn shared(&self) -> &Arc<EngineShared> {
        &self.shared
    }

    /// The workers' counter blocks (what the reports read).
    pub fn counters(&self) -> &Arc<WorkerCounters> {
        &self.shared.counters
    }

    /// The TX queues' shapers, indexed by egress (port × tx_queues + queue).
    pub fn shapers(&self) -> &Shapers<P> {
        &self.shapers
    }

    /// Packets handed between workers and not yet transmitted, per egress.
    pub fn handoff_len(&self, egress: usize) -> usize {
        self.handoff.get(egress).map_or(0, |q| q.len())
    }

    /// A function giving [`Running::handoff_len`] that outlives the engine (for reports).
    pub fn handoff_counts(&self) -> impl Fn(usize) -> u64 + Send + Sync + 'static {
        let h = self.handoff.clone();
        move |e| h.get(e).map_or(0, |q| q.len() as u64)
    }

    /// True once every polled receive queue said it will deliver nothing more.
    pub fn rx_finished(&self) -> bool {
        self.shared.rx_done.iter().all(|d| d.load(Relaxed))
    }

    /// Stops receiving; workers drain their queues until empty or the drain timeout.
    pub fn stop_rx(&self) {
        let deadline = clock::now_ns() + self.drain_timeout_ns;
        self.shared.drain_deadline_ns.store(deadline, Relaxed);
        let _ = self
            .shared
            .state
            .compare_exchange(RUNNING, DRAINING, Relaxed, Relaxed);
    }

    /// Stops at once, without draining.
    pub fn stop_now(&self) {
        self.shared.state.store(STOPPED, Relaxed);
    }

    /// True once every worker has exited.
    pub fn is_finished(&self) -> bool {
        self.handles.iter().all(|h| h.is_finished())
    }

    /// Waits for the workers; returns how many panicked.
    pub fn join(self) -> usize {
        let mut panicked = 0;
        for h in self.handles {
            if h.join().is_err() {
                panicked += 1;
            }
        }
        panicked
    }
}

/// The circuits the workers classify by (docs/circuits.md): the published prefix table
/// (answering with circuit slots) and, per egress port, which address of a packet leaving
/// through it names its subscriber (`None`: that port's direction has no circuits).
#[derive(Clone)]
pub struct CircuitTables {
    /// The prefix table; a reload publishes a new one, each worker picks it up at its next
    /// burst.
    pub table: Arc<circuits::publish::Published<circuits::Lpm>>,
    /// Per egress port.
    pub sides: Vec<Option<crate::classify::Side>>,
    /// Unmatched packets share one circuit (`[circuits] unmatched` with rates): with
    /// several TX queues they all go to the first, so that the class is one queue at its
    /// rate, not one per TX queue. Otherwise they keep the flow hash.
    pub unmatched_one_queue: bool,
}

/// The shaper of every egress queue, shared by all workers.
pub type Shapers<P> = Arc<Vec<Arc<dyn Shaper<P>>>>;

/// A hook run at the start of each worker thread (with the worker's index); what it returns
/// lives as long as the worker (a DPDK lcore registration, for instance).
pub type WorkerHook = Arc<dyn Fn(usize) -> Box<dyn std::any::Any> + Send + Sync>;

/// Starts one worker per configured core over `ports`, with `shapers[e]` the shaper of
/// egress `e` = port × `cfg.tx_queues` + queue.
///
/// # Errors
/// Bad settings, ports that do not match `cfg.tx_queues`, or a thread that cannot start.
pub fn start<P: PortBuf>(
    cfg: &EngineConfig,
    ports: EnginePorts<P>,
    shapers: Vec<Arc<dyn Shaper<P>>>,
) -> Result<Running<P>, EngineError> {
    start_with_hook(cfg, ports, shapers, None)
}

/// [`start`] with a hook each worker runs first.
///
/// # Errors
/// As [`start`].
pub fn start_with_hook<P: PortBuf>(
    cfg: &EngineConfig,
    ports: EnginePorts<P>,
    shapers: Vec<Arc<dyn Shaper<P>>>,
    hook: Option<WorkerHook>,
) -> Result<Running<P>, EngineError> {
    start_with_circuits(cfg, ports, shapers, hook, None)
}

/// The worker that polls each receive queue (`[port][queue]`, given each port's queue
/// count): the queues of forwarded ports, port by port, round robin over `workers`; a port
/// that forwards nowhere is not polled (its entries are 0 and unused).
pub fn rx_queue_workers(
    rx_queues: &[usize],
    forwarded: &[bool],
    workers: usize,
) -> Vec<Vec<usize>> {
    let mut next = 0;
    rx_queues
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            if !forwarded.get(p).copied().unwrap_or(false) {
                return vec![0; n];
            }
            (0..n)
                .map(|_| {
                    next += 1;
                    (next - 1) % workers.max(1)
                })
                .collect()
        })
        .collect()
}

/// The worker that owns TX queue `queue` of port `port` (of `tx_queues` per port).
pub fn tx_queue_owner(port: usize, queue: usize, tx_queues: usize, workers: usize) -> usize {
    (port * tx_queues + queue) % workers.max(1)
}

/// [`start_with_hook`] with circuits: every packet leaving through a port with a
/// [`CircuitTables::sides`] entry is classified to its circuit, and with several TX queues
/// steered by it.
///
/// # Errors
/// As [`start`].
pub fn start_with_circuits<P: PortBuf>(
    cfg: &EngineConfig,
    ports: EnginePorts<P>,
    shapers: Vec<Arc<dyn Shaper<P>>>,
    hook: Option<WorkerHook>,
    circuits: Option<CircuitTables>,
) -> Result<Running<P>, EngineError> {
    let timing = cfg.timing()?;
    let layout = Layout {
        ports: ports.tx.len(),
        queues: cfg.tx_queues,
    };
    for (p, tx) in ports.tx.iter().enumerate() {
        if tx.len() != cfg.tx_queues {
            return Err(EngineError::QueueMismatch {
                port: p,
                got: tx.len(),
                want: cfg.tx_queues,
            });
        }
    }
    if shapers.len() != layout.egress_count() {
        return Err(EngineError::QueueMismatch {
            port: usize::MAX,
            got: shapers.len(),
            want: layout.egress_count(),
        });
    }
    let workers = cfg.workers;
    let shared = Arc::new(EngineShared {
        state: AtomicU8::new(RUNNING),
        drain_deadline_ns: AtomicU64::new(u64::MAX),
        counters: Arc::new(WorkerCounters::new(layout, workers)),
        rx_done: (0..workers).map(|_| AtomicBool::new(false)).collect(),
        offers_stopped: (0..workers).map(|_| AtomicBool::new(false)).collect(),
        heartbeats: (0..workers)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    });
    let shapers: Shapers<P> = Arc::new(shapers);
    let handoff: Arc<Vec<ArrayQueue<P>>> = Arc::new(
        (0..layout.egress_count())
            .map(|_| ArrayQueue::new(handoff_capacity(cfg.burst)))
            .collect(),
    );
    let cores = pick_cores(cfg)?;
    let mut ws: Vec<Worker<P>> = (0..workers)
        .map(|id| Worker {
            id,
            rx: Vec::new(),
            tx: Vec::new(),
            owned: vec![None; layout.egress_count()],
            shapers: shapers.clone(),
            handoff: handoff.clone(),
            shared: shared.clone(),
            layout,
            burst: cfg.burst,
            idle: cfg.idle,
            core: cores.as_ref().map(|c| c[id % c.len()]),
            hook: hook.clone(),
            circuits: circuits.as_ref().map(|c| worker::WorkerCircuits {
                reader: c.table.reader(),
                table: c.table.clone(),
                unmatched_one_queue: c.unmatched_one_queue,
            }),
        })
        .collect();
    let side_of = |out: usize| {
        circuits
            .as_ref()
            .and_then(|c| c.sides.get(out).copied().flatten())
    };
    let forwarded: Vec<bool> = (0..ports.rx.len())
        .map(|p| ports.forward.get(p).copied().flatten().is_some())
        .collect();
    let rx_counts: Vec<usize> = ports.rx.iter().map(Vec::len).collect();
    let rx_workers = rx_queue_workers(&rx_counts, &forwarded, workers);
    for (p, queues) in ports.rx.into_iter().enumerate() {
        let Some(out) = ports.forward.get(p).copied().flatten() else {
            continue;
        };
        for (q, rx) in queues.into_iter().enumerate() {
            ws[rx_workers[p][q]].rx.push(RxSlot {
                rx,
                port: p,
                out,
                egress: None,
                side: side_of(out),
                finished: false,
            });
        }
    }
    for (p, queues) in ports.tx.into_iter().enumerate() {
        for (q, tx) in queues.into_iter().enumerate() {
            let e = p * cfg.tx_queues + q;
            let w = &mut ws[tx_queue_owner(p, q, cfg.tx_queues, workers)];
            w.owned[e] = Some(w.tx.len());
            w.tx.push(TxSlot {
                tx,
                egress: e,
                pending: Vec::with_capacity(cfg.burst * 4),
                pending_bytes: 0,
                due_ns: 0,
                behind: false,
            });
        }
    }
    // Where each receive queue's packets go when it is one egress for all of them: a port
    // with one TX queue, or TxSelect::Worker (the worker's own queues of the output port,
    // its receive queues spread over them).
    let nq = cfg.tx_queues;
    // Ports handed to the engine keep each flow on one receive queue unless the caller
    // resolved `Auto` otherwise (a DPDK NIC without RSS).
    let (tx_select, _) = cfg.tx_select.resolve(cfg.workers, nq, true);
    for w in &mut ws {
        let mut seen = vec![0usize; layout.egress_count().div_ceil(nq.max(1))];
        for slot in &mut w.rx {
            let base = slot.out * nq;
            slot.egress = if nq == 1 {
                Some(base)
            } else if slot.side.is_some() {
                // A circuit's flows arrive on every receive queue, and all of them must
                // meet its one shaper: steered by circuit, whatever tx_select says.
                None
            } else if tx_select == TxSelect::Worker {
                let mine: Vec<usize> = (base..base + nq)
                    .filter(|&e| w.owned[e].is_some())
                    .collect();
                let k = seen[slot.out];
                seen[slot.out] += 1;
                Some(if mine.is_empty() {
                    base + w.id % nq
                } else {
                    mine[k % mine.len()]
                })
            } else {
                None
            };
        }
    }
    let mut handles = Vec::new();
    for w in ws {
        if w.rx.is_empty() {
            shared.rx_done[w.id].store(true, Relaxed);
        }
        let id = w.id;
        let h = std::thread::Builder::new()
            .name(format!("cakewalk-w{id}"))
            .spawn(move || w.run())
            .map_err(|source| EngineError::Spawn { worker: id, source })?;
        handles.push(h);
    }
    Ok(Running {
        shared,
        shapers,
        handoff,
        handles,
        drain_timeout_ns: timing.drain_timeout_ns,
    })
}

/// The cores the workers are pinned to, in worker order; `None` when they are not pinned.
///
/// # Errors
/// [`EngineError::NoSuchCore`] when `engine.cores` names a core this process cannot run on
/// (it used to be skipped silently, and the workers ran unpinned).
fn pick_cores(cfg: &EngineConfig) -> Result<Option<Vec<core_affinity::CoreId>>, EngineError> {
    if !cfg.pin {
        return Ok(None);
    }
    let all = core_affinity::get_core_ids().unwrap_or_default();
    if !cfg.cores.is_empty() {
        let mut picked = Vec::with_capacity(cfg.cores.len());
        for &c in &cfg.cores {
            match all.iter().find(|id| id.id == c) {
                Some(id) => picked.push(*id),
                None => {
                    return Err(EngineError::NoSuchCore {
                        core: c,
                        usable: core_list(all.iter().map(|id| id.id)),
                    })
                }
            }
        }
        return Ok(Some(picked));
    }
    if all.is_empty() {
        return Ok(None);
    }
    // Leave the first core to the stats/control threads when there is more than one.
    let n = all.len();
    let skip = n.saturating_sub(cfg.workers);
    Ok(Some(all[skip..].to_vec()))
}

/// `ids` as a cpuset list ("0-3,6").
fn core_list(ids: impl Iterator<Item = usize>) -> String {
    let mut ids: Vec<usize> = ids.collect();
    ids.sort_unstable();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        while i + 1 < ids.len() && ids[i + 1] == ids[i] + 1 {
            i += 1;
        }
        parts.push(if ids[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", ids[i])
        });
        i += 1;
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(",")
    }
}

/// Packets the handoff ring of one egress holds: what other workers let through its TX
/// queue's bypass, waiting for the worker that owns the port.
pub fn handoff_capacity(burst: usize) -> usize {
    burst * 64
}

#[cfg(test)]
mod tests;
