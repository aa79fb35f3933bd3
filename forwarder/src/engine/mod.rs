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

use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use qdisc::mq::{NextRun, Offerer, RunResult};
use qdisc::{DropReason, PacketMeta};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::counters::{egress, port, Layout, Snapshot, WorkerCounters};
use crate::port::{PortBuf, PortRx, PortTx};
pub use shaper::{Passthrough, Shaper, TinReport};

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
        let crossing = "about half the packets would cross to another worker's queue through a ring that drops when full (51 % dropped in BENCHMARKS.md, \"The engine with two workers\")";
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

struct RxSlot<P> {
    rx: Box<dyn PortRx<Buf = P>>,
    port: usize,
    out: usize,
    /// The one egress every packet of this slot goes to ([`TxSelect::Worker`], or a port with
    /// one TX queue); `None`: by flow hash.
    egress: Option<usize>,
    finished: bool,
}

struct TxSlot<P> {
    tx: Box<dyn PortTx<Buf = P>>,
    egress: usize,
    pending: Vec<P>,
    /// The bytes in `pending`, kept as packets come and go so that a transmit need not sum
    /// them (a bypassed burst's bytes come with it from the queue).
    pending_bytes: u64,
    /// The shaper said it holds its packets until this time: no point running it before.
    due_ns: u64,
}

/// The shaper of every egress queue, shared by all workers.
pub type Shapers<P> = Arc<Vec<Arc<dyn Shaper<P>>>>;

/// A worker's per-burst buffers, allocated once.
struct Buffers<P> {
    /// As long as a transmit burst: a burst that bypasses whole swaps buffers with one.
    burst: Vec<P>,
    /// Scratch metas for sorting a burst over several TX queues.
    metas: Vec<PacketMeta>,
    scratch: Vec<P>,
    /// Per egress, the packets of the burst being sorted to it.
    bpkts: Vec<Vec<P>>,
    /// Always `bs` long: `bmetas[e][..bpkts[e].len()]` belong to the packets in `bpkts[e]`,
    /// so the parser can write them in place.
    bmetas: Vec<Vec<PacketMeta>>,
}

impl<P> Buffers<P> {
    fn new(bs: usize, egress_count: usize) -> Buffers<P> {
        Buffers {
            burst: Vec::with_capacity(bs * 4),
            metas: vec![PacketMeta::default(); bs],
            scratch: Vec::with_capacity(bs * 4),
            bpkts: (0..egress_count).map(|_| Vec::with_capacity(bs)).collect(),
            bmetas: (0..egress_count)
                .map(|_| vec![PacketMeta::default(); bs])
                .collect(),
        }
    }
}

struct Worker<P> {
    id: usize,
    rx: Vec<RxSlot<P>>,
    tx: Vec<TxSlot<P>>,
    /// Global egress index -> index in `tx` when this worker owns it.
    owned: Vec<Option<usize>>,
    shapers: Shapers<P>,
    /// Packets another worker got back as a bypass of a queue this worker owns.
    handoff: Arc<Vec<ArrayQueue<P>>>,
    shared: Arc<EngineShared>,
    layout: Layout,
    burst: usize,
    idle: IdleMode,
    core: Option<core_affinity::CoreId>,
    hook: Option<WorkerHook>,
}

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
        })
        .collect();
    // Receive queues round-robin over workers; TX queue e belongs to worker e % workers.
    let mut next = 0;
    for (p, queues) in ports.rx.into_iter().enumerate() {
        let Some(out) = ports.forward.get(p).copied().flatten() else {
            continue;
        };
        for rx in queues {
            ws[next % workers].rx.push(RxSlot {
                rx,
                port: p,
                out,
                egress: None,
                finished: false,
            });
            next += 1;
        }
    }
    for (p, queues) in ports.tx.into_iter().enumerate() {
        for (q, tx) in queues.into_iter().enumerate() {
            let e = p * cfg.tx_queues + q;
            let w = &mut ws[e % workers];
            w.owned[e] = Some(w.tx.len());
            w.tx.push(TxSlot {
                tx,
                egress: e,
                pending: Vec::with_capacity(cfg.burst * 4),
                pending_bytes: 0,
                due_ns: 0,
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

impl<P: PortBuf> Worker<P> {
    fn run(mut self) {
        if let Some(core) = self.core {
            if !core_affinity::set_for_current(core) {
                crate::log_line!(
                    "warning: worker {} could not be pinned to core {}; it runs unpinned",
                    self.id,
                    core.id
                );
            }
        }
        let _hook_guard = self.hook.as_ref().map(|h| h(self.id));
        let bs = self.burst;
        let lp = self.layout;
        let mut local = vec![0u64; lp.len()];
        let mut b = Buffers::new(bs, lp.egress_count());
        let mut unfinished = self.rx.len();
        let mut idle_iters: u32 = 0;
        let mut busy_iters: u32 = 0;
        let shared = self.shared.clone();
        let counters = shared.counters.block(self.id);
        let mut offers_stopped = false;
        let heartbeat = &shared.heartbeats[self.id];
        let mut beat = 0u64;
        loop {
            // A store to this worker's own cache line, read by the supervisor a few times a
            // second.
            beat = (beat + 1) % WORKER_DONE;
            heartbeat.store(beat, Relaxed);
            let now = clock::now_ns();
            let state = shared.state.load(Relaxed);
            if state == STOPPED {
                break;
            }
            if state == DRAINING && !offers_stopped {
                // Release: whatever this worker offered to other workers' queues and handoffs
                // while it was still running is visible to a worker that sees this flag.
                shared.offers_stopped[self.id].store(true, Release);
                offers_stopped = true;
            }
            let mut work = 0usize;
            // The soonest time a shaper releases a held packet (u64::MAX: none holds any).
            let mut wake_at = u64::MAX;
            // Backpressure: while a port cannot take what this worker already holds for it,
            // stop receiving and let the receive rings absorb (or drop) the excess there.
            let backlogged = self.tx.iter().any(|t| t.pending.len() >= 2 * bs);
            if state == RUNNING && !backlogged {
                work += self.receive(now, &mut b, &mut local, &mut unfinished, &shared);
            }
            work += self.run_and_transmit(now, &mut b, &mut local, &mut wake_at);
            if work > 0 {
                // Published every few busy iterations and on the first idle one: readers
                // (stats, the final report after the last, idle, iterations) see them at
                // most microseconds late, and the stores stay off the per-burst path.
                busy_iters = busy_iters.wrapping_add(1);
                if busy_iters & 7 == 0 {
                    counters.publish(&local);
                }
                idle_iters = 0;
                continue;
            }
            if state == DRAINING {
                // Only once no worker can offer any more: a worker still in the burst it
                // received before it saw the drain could otherwise bypass into this worker's
                // handoff (or queue into its intake) just after this worker found them
                // empty and left, stranding those packets until the end.
                let quiet = shared.offers_stopped.iter().all(|f| f.load(Acquire));
                let drained = quiet
                    && self.tx.iter().all(|s| {
                        s.pending.is_empty()
                            && self.handoff[s.egress].is_empty()
                            && self.shapers[s.egress].backlog() == 0
                    });
                if drained || now >= shared.drain_deadline_ns.load(Relaxed) {
                    break;
                }
            }
            idle_iters = idle_iters.saturating_add(1);
            if idle_iters == 1 || idle_iters & 1023 == 0 {
                counters.publish(&local);
            }
            match self.idle {
                IdleMode::Spin => std::hint::spin_loop(),
                IdleMode::Sleep => {
                    // A shaper holding packets is due soon: never oversleep its release time
                    // (a late dequeue is bandwidth lost); keep polling when it is closer than
                    // a sleep's usual overshoot.
                    let until_due = wake_at.saturating_sub(now);
                    if until_due < 200_000 {
                        std::hint::spin_loop();
                    } else if idle_iters > 64 {
                        let us = (10u64 << ((idle_iters - 64) / 64).min(4)).min(until_due / 2_000);
                        std::thread::sleep(Duration::from_micros(us));
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        for slot in self.tx.iter_mut() {
            slot.tx.flush();
            local[lp.egress(slot.egress, egress::PENDING)] = slot.pending.len() as u64;
        }
        counters.publish(&local);
        heartbeat.store(WORKER_DONE, Relaxed);
        // Anything still in a transmit burst was reported as pending and is freed here.
    }

    /// The receive phase of one loop iteration: a burst from each receive queue this worker
    /// polls, classified and offered to its TX queues (sorted by flow hash when its port has
    /// several). Returns the packets received.
    #[inline(always)]
    fn receive(
        &mut self,
        now: u64,
        b: &mut Buffers<P>,
        local: &mut [u64],
        unfinished: &mut usize,
        shared: &EngineShared,
    ) -> usize {
        let bs = self.burst;
        let nq = self.layout.queues;
        let lp = self.layout;
        let mut work = 0usize;
        for slot in self.rx.iter_mut() {
            let base = slot.out * nq;
            if slot
                .egress
                .is_some_and(|e| self.owned[e].is_none() && self.shapers[e].peer_offer_would_drop())
            {
                // Another worker runs this egress and its intake is full: the whole
                // burst would be dropped on arrival. Leave it in the receive ring,
                // where an overload is dropped for free, and spend the time on this
                // worker's own queues (receive livelock otherwise: measured on DPDK
                // null devices, two workers each receiving for the other's queue
                // shaped 1 Gbit/s to a quarter of it).
                continue;
            }
            let n = slot.rx.rx_burst(&mut b.burst, bs);
            if n == 0 {
                if !slot.finished && slot.rx.is_finished() {
                    slot.finished = true;
                    *unfinished -= 1;
                    if *unfinished == 0 {
                        shared.rx_done[self.id].store(true, Relaxed);
                    }
                }
                continue;
            }
            work += n;
            // Received bytes: the queues sum them as they take the packets.
            let mut bytes = 0u64;
            let mut malformed = 0u64;
            debug_assert!(b.burst.len() <= bs, "rx_burst returns at most bs");
            if let Some(e) = slot.egress {
                // One TX queue for the whole burst (the port has one, or this worker
                // sends on its own): nothing to sort, so the burst is offered as it
                // came and each packet is parsed only if the queue needs its meta (a
                // burst that bypasses an empty FIFO never is: Linux's
                // TCQ_F_CAN_BYPASS). MALFORMED counts the frames that were parsed.
                let mut classify = |pkt: &P, meta: &mut PacketMeta| {
                    malformed += u64::from(classify_into(pkt, meta));
                };
                let offered = offer_to(
                    self.shapers[e].as_ref(),
                    now,
                    &mut b.burst,
                    &mut b.bmetas[e],
                    &mut classify,
                    self.owned[e].map(|i| &mut self.tx[i]),
                    &self.handoff[e],
                    &mut b.scratch,
                );
                bytes += offered.bytes;
                count_offer(local, lp, e, offered);
            } else {
                // The TX queue comes from the flow hash, so every packet is parsed:
                // the whole burst first, each meta written in place, then sorted by
                // queue (a meta copied right after parsing waits on its stores; see
                // `wire::parse_into`).
                for (pkt, meta) in b.burst.iter().zip(b.metas.iter_mut()) {
                    malformed += u64::from(classify_into(pkt, meta));
                }
                // The queue's software hash stays in the meta for CAKE to reuse.
                for (pkt, meta) in b.burst.drain(..).zip(b.metas.iter_mut()) {
                    let e = base + crate::classify::assign_tx_queue(meta, nq);
                    b.bmetas[e][b.bpkts[e].len()] = *meta;
                    b.bpkts[e].push(pkt);
                }
                // One offer per TX queue per burst (per-flow order is kept: a flow
                // maps to one queue).
                for e in base..base + nq {
                    if b.bpkts[e].is_empty() {
                        continue;
                    }
                    let offered = offer_to(
                        self.shapers[e].as_ref(),
                        now,
                        &mut b.bpkts[e],
                        &mut b.bmetas[e],
                        &mut |_, _| {},
                        self.owned[e].map(|i| &mut self.tx[i]),
                        &self.handoff[e],
                        &mut b.scratch,
                    );
                    bytes += offered.bytes;
                    count_offer(local, lp, e, offered);
                }
            }
            local[lp.port(slot.port, port::RX_PACKETS)] += n as u64;
            local[lp.port(slot.port, port::RX_BYTES)] += bytes;
            local[lp.port(slot.port, port::MALFORMED)] += malformed;
        }
        work
    }

    /// The transmit phase of one loop iteration: each TX queue this worker runs is run when
    /// it has work (its dequeued packets transmitted under its lock, behind what other
    /// workers handed over), then whatever waits for the port is sent. Lowers `wake_at` to
    /// the soonest time a shaper releases a held packet. Returns the packets sent or refused.
    #[inline(always)]
    fn run_and_transmit(
        &mut self,
        now: u64,
        b: &mut Buffers<P>,
        local: &mut [u64],
        wake_at: &mut u64,
    ) -> usize {
        let bs = self.burst;
        let lp = self.layout;
        let mut work = 0usize;
        for slot in self.tx.iter_mut() {
            let e = slot.egress;
            let handoff = &self.handoff[e];
            let room = bs.saturating_sub(slot.pending.len());
            let mut tx_pkts = 0u64;
            let mut tx_bytes = 0u64;
            let mut tx_refused = 0u64;
            // A queue with nothing to drain, dequeue, apply or sync is not run at all (its
            // lock round trip and publish would cost more than a bypassed burst). One
            // waiting for its next send time is left alone until then, unless something
            // cannot wait: packets in its intake (at a low rate the wait is seconds, and
            // they would fill the intake and be dropped there, not by CAKE), a change, or
            // a rate change or sync that the qdisc meets by rescaling the wait.
            let due = now >= slot.due_ns || self.shapers[e].run_urgent(now);
            if room > 0 && due && self.shapers[e].run_wanted(now) {
                // `out[kept..]` is what the run added since the last transmit (a run may
                // transmit more than once, and each transmit may leave some behind).
                let mut kept = slot.pending.len();
                let port_tx = &mut slot.tx;
                let pending_bytes = &mut slot.pending_bytes;
                let r = self.shapers[e].run(now, room, &mut slot.pending, &mut |out| {
                    let fresh = kept.min(out.len());
                    // Packets other workers bypassed went out of the queue before
                    // anything dequeued now: put them in front of it.
                    if !handoff.is_empty() {
                        b.scratch.extend(out.drain(fresh..));
                        while let Some(p) = handoff.pop() {
                            out.push(p);
                        }
                        out.append(&mut b.scratch);
                    }
                    *pending_bytes += out[fresh..].iter().map(|p| p.len() as u64).sum::<u64>();
                    let (n, b, r) = transmit(port_tx.as_mut(), out, pending_bytes);
                    tx_pkts += n;
                    tx_bytes += b;
                    tx_refused += r;
                    kept = out.len();
                });
                if let RunResult::Ran { sent, next } = r {
                    local[lp.egress(e, egress::DEQUEUED)] += sent as u64;
                    slot.due_ns = 0;
                    match next {
                        NextRun::Idle => {}
                        NextRun::Now => *wake_at = now,
                        NextRun::At(t) => {
                            *wake_at = (*wake_at).min(t);
                            slot.due_ns = t;
                        }
                    }
                }
            }
            // `is_empty` first: a pop that finds the ring empty costs a full fence.
            while slot.pending.len() < bs * 2 && !handoff.is_empty() {
                let Some(p) = handoff.pop() else { break };
                slot.pending_bytes += p.len() as u64;
                slot.pending.push(p);
            }
            if !slot.pending.is_empty() {
                let (n, b, r) =
                    transmit(slot.tx.as_mut(), &mut slot.pending, &mut slot.pending_bytes);
                tx_pkts += n;
                tx_bytes += b;
                tx_refused += r;
            }
            if tx_pkts + tx_refused > 0 {
                local[lp.egress(e, egress::TX_PACKETS)] += tx_pkts;
                local[lp.egress(e, egress::TX_BYTES)] += tx_bytes;
                local[lp.egress(e, egress::DROPS + DropReason::TxRefused.index())] += tx_refused;
                work += (tx_pkts + tx_refused) as usize;
            }
            local[lp.egress(e, egress::PENDING)] = slot.pending.len() as u64;
        }
        work
    }
}

/// Parses `pkt` into `meta` (with the NIC's flow hash); returns true when the frame was
/// malformed.
#[inline]
fn classify_into<P: PortBuf>(pkt: &P, meta: &mut PacketMeta) -> bool {
    let malformed = crate::wire::parse_into(pkt.data(), meta).is_some();
    meta.l4_hash = pkt.rss_hash();
    malformed
}

/// What [`offer_to`] did with a burst.
struct Offered {
    /// Packets that took the bypass.
    bypassed: u64,
    /// Bypassed packets dropped because the owner's handoff queue was full. The shaper let
    /// them through (its bypass count and rate sync include them, as they include a
    /// dequeued packet that the port then cannot take), so they are lost on the way to the
    /// port: counted as [`DropReason::TxFull`], not as a queue's intake drop.
    handoff_full: u64,
    /// Bytes of the whole burst.
    bytes: u64,
}

/// Offers `pkts` to an egress's shaper. Bypassed packets go to the slot's pending burst
/// when this worker owns the egress (swapped in whole when it is empty), otherwise to the
/// owner's handoff queue through `scratch`; a worker that does not own the egress offers
/// as a peer, so it never holds the queue against the owner's runs while the queue is busy.
#[allow(clippy::too_many_arguments)]
#[inline]
fn offer_to<P: PortBuf>(
    shaper: &dyn Shaper<P>,
    now: u64,
    pkts: &mut Vec<P>,
    metas: &mut [PacketMeta],
    classify: &mut dyn FnMut(&P, &mut PacketMeta),
    owned: Option<&mut TxSlot<P>>,
    handoff: &ArrayQueue<P>,
    scratch: &mut Vec<P>,
) -> Offered {
    match owned {
        Some(slot) => {
            let outcome = shaper.offer_burst(
                now,
                pkts,
                metas,
                classify,
                &mut slot.pending,
                Offerer::Runner,
            );
            slot.pending_bytes += outcome.bypassed_bytes;
            Offered {
                bypassed: outcome.bypassed as u64,
                handoff_full: 0,
                bytes: outcome.offered_bytes,
            }
        }
        None => {
            let outcome = shaper.offer_burst(now, pkts, metas, classify, scratch, Offerer::Peer);
            let mut full = 0u64;
            for p in scratch.drain(..) {
                if let Err(p) = handoff.push(p) {
                    drop(p);
                    full += 1;
                }
            }
            Offered {
                bypassed: outcome.bypassed as u64,
                handoff_full: full,
                bytes: outcome.offered_bytes,
            }
        }
    }
}

/// Packets the handoff ring of one egress holds: what other workers let through its TX
/// queue's bypass, waiting for the worker that owns the port.
pub fn handoff_capacity(burst: usize) -> usize {
    burst * 64
}

/// Adds one offer's bypass and handoff-full counts to egress `e`'s counters.
#[inline]
fn count_offer(local: &mut [u64], lp: Layout, e: usize, offered: Offered) {
    local[lp.egress(e, egress::BYPASS)] += offered.bypassed;
    local[lp.egress(e, egress::DROPS + DropReason::TxFull.index())] += offered.handoff_full;
}

/// Transmits from the front of `burst`, whose bytes are `bytes` (updated to what is left);
/// returns packets and bytes sent, and packets the port took but refused for good.
#[inline]
fn transmit<P: PortBuf>(
    tx: &mut dyn PortTx<Buf = P>,
    burst: &mut Vec<P>,
    bytes: &mut u64,
) -> (u64, u64, u64) {
    debug_assert_eq!(
        *bytes,
        burst.iter().map(|p| p.len() as u64).sum::<u64>(),
        "pending bytes out of step with the pending burst"
    );
    let taken = tx.tx_burst(burst);
    if taken == 0 {
        return (0, 0, 0);
    }
    // Usually the port took everything; otherwise only what is left is summed.
    let left: u64 = burst.iter().map(|p| p.len() as u64).sum();
    let taken_bytes = bytes.saturating_sub(left);
    *bytes = left;
    let (refused, refused_bytes) = tx.take_refused();
    let refused = refused.min(taken as u64);
    (
        taken as u64 - refused,
        taken_bytes.saturating_sub(refused_bytes),
        refused,
    )
}

#[cfg(test)]
mod tests;
