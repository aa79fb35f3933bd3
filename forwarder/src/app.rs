//! The forwarder's top level: builds ports, TX queues (CAKE or FIFO in a
//! [`qdisc::mq::MultiQueue`] per egress port) and workers from a [`Config`], then supervises
//! them: live stats each interval, the control socket, Prometheus, SIGINT/SIGTERM and the
//! duration limit. Stopping drains the queues within the drain timeout, prints the final
//! report and checks conservation; a mismatch is an error (non-zero exit).
//!
//! Software ports (synth, pcap, AF_PACKET) share one buffer type ([`PoolBuf`]) and mix freely;
//! DPDK ports are started by the `dpdk` backend itself.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use qdisc::cake::{Cake, CakeConfig};
use qdisc::fifo::{Fifo, FifoConfig};
use qdisc::mq::{MqQdisc, MultiQueue, Offerer, SyncConfig, TxQueue, TxQueueOptions};
use qdisc::{PacketMeta, Rate};
use serde::de::DeserializeOwned;

use crate::config::{Config, QueueKind};
use crate::control::{self, ControlState, LiveTarget};
use crate::counters::synth::SynthStats;
use crate::counters::TinSnapshot;
use crate::engine::shaper::TinReport;
use crate::engine::{self, EngineConfig, EnginePorts, Shaper, WorkerHook};
use crate::port::pcap::{PcapCounters, PcapFrames, PcapRx, PcapSink, PcapTx};
use crate::port::pool::{Pool, PoolBuf};
use crate::port::synth::{SynthPlan, SynthRx, SynthTx};
use crate::port::{PortBuf, PortKind, PortRx, PortSpec, PortTx, PortsConfig};
use crate::stats::{
    prometheus, BackendCounters, QueueView, Report, Reporter, Sources, StatsConfig,
};

/// The `[stats]` section, whether the config holds it typed or as a raw table.
trait StatsSection {
    fn stats_config(&self) -> anyhow::Result<StatsConfig>;
}

impl StatsSection for toml::Table {
    fn stats_config(&self) -> anyhow::Result<StatsConfig> {
        section("stats", self)
    }
}

impl StatsSection for StatsConfig {
    fn stats_config(&self) -> anyhow::Result<StatsConfig> {
        Ok(self.clone())
    }
}

/// Reads a typed section out of a raw TOML table (unknown keys are errors).
fn section<T: DeserializeOwned>(name: &str, table: &toml::Table) -> anyhow::Result<T> {
    toml::Value::Table(table.clone())
        .try_into()
        .with_context(|| format!("in the [{name}] section"))
}

/// One egress port's queues, usable as live targets and as per-queue shapers.
struct PortQueues<P: PortBuf, Q: MqQdisc<P>> {
    mq: Arc<MultiQueue<P, Q>>,
}

/// Queue `i` of a [`MultiQueue`] as an engine [`Shaper`].
struct MqSlot<P: PortBuf, Q: MqQdisc<P>> {
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
    fn peer_offer_would_drop(&self) -> bool {
        self.mq.queue(self.i).peer_offer_would_drop()
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

struct ShaperView<P>(Arc<dyn Shaper<P>>);

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

/// Rx and tx halves of the software ports plus what reports need.
pub struct SoftPorts {
    /// Halves for the engine.
    pub ports: EnginePorts<PoolBuf>,
    /// Synth ports' figures.
    pub synth: Vec<(usize, Arc<SynthStats>)>,
    /// Backend counters of pcap and AF_PACKET ports.
    pub backend: Vec<(usize, BackendCounters)>,
    /// Health checks of ports that can fail under a running forwarder (an AF_PACKET port's
    /// interface deleted).
    pub health: Vec<(usize, PortHealth)>,
}

/// Says what broke, and what to do about it, once a port can no longer do its job (forward,
/// or write its output); `None` while it can.
pub type PortHealth = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// How often the supervisor runs the ports' health checks.
const HEALTH_CHECK_EVERY: Duration = Duration::from_millis(250);

/// Builds ports A and B from `cfg` with `tx_queues` transmit halves each.
pub fn build_soft_ports(cfg: &PortsConfig, tx_queues: usize) -> anyhow::Result<SoftPorts> {
    let mut rx: Vec<Vec<Box<dyn PortRx<Buf = PoolBuf>>>> = Vec::new();
    let mut tx: Vec<Vec<Box<dyn PortTx<Buf = PoolBuf>>>> = Vec::new();
    let mut synth = Vec::new();
    let mut backend: Vec<(usize, BackendCounters)> = Vec::new();
    let mut health: Vec<(usize, PortHealth)> = Vec::new();
    // One set of figures for every synth port: generators on one side, sinks on the other.
    let synth_stats = Arc::new(SynthStats::default());
    let specs: [&PortSpec; 2] = [&cfg.a, &cfg.b];
    let pcap = specs.iter().filter(|s| s.kind == PortKind::Pcap);
    let inputs: Vec<&Path> = pcap.clone().filter_map(|s| s.input.as_deref()).collect();
    let outputs: Vec<&Path> = pcap.filter_map(|s| s.output.as_deref()).collect();
    crate::port::pcap::check_paths(&inputs, &outputs)?;
    for (p, spec) in specs.iter().enumerate() {
        let name = cfg.port_name(p);
        let pool = Pool::new(cfg.pool_buffers, cfg.buffer_size);
        let mut prx: Vec<Box<dyn PortRx<Buf = PoolBuf>>> = Vec::new();
        let mut ptx: Vec<Box<dyn PortTx<Buf = PoolBuf>>> = Vec::new();
        match spec.kind {
            PortKind::Synth => {
                let stats = synth_stats.clone();
                let generate = p == 0 || cfg.synth.both_directions;
                let plan = SynthPlan::new(&cfg.synth, p as u8)
                    .with_context(|| format!("port {name}: [ports.synth]"))?;
                if generate {
                    let n = spec.rx_queues.max(1);
                    for q in 0..n {
                        prx.push(Box::new(SynthRx::new(&plan, pool, q, n, &stats)));
                    }
                }
                for _ in 0..tx_queues {
                    ptx.push(Box::new(SynthTx::new(plan.flows(), stats.clone())));
                }
                // Delivery is verified only by a synth sink: a generator whose frames go
                // to a pcap or AF_PACKET port would report every frame as lost.
                let verified = specs.iter().all(|s| s.kind == PortKind::Synth);
                if synth.is_empty() && verified {
                    synth.push((p, stats));
                }
            }
            PortKind::Pcap => {
                let counters = Arc::new(PcapCounters::default());
                if let Some(input) = &spec.input {
                    let frames = Arc::new(
                        PcapFrames::load(input).with_context(|| format!("port {name}"))?,
                    );
                    if let Some(d) = frames.damaged() {
                        crate::log_line!(
                            "warning: port {name}: '{}' is damaged: record {} (at byte {}) claims {} bytes, more than the capture's snaplen ({}) and any frame, so nothing after it can be read; replaying the {} frames before it (the file was not cut short: its length fields are wrong from there on)",
                            input.display(),
                            d.frames_before + 1,
                            d.offset,
                            d.claimed_len,
                            d.snaplen,
                            d.frames_before
                        );
                    }
                    if frames.truncated() {
                        crate::log_line!(
                            "warning: port {name}: '{}' ends in the middle of a frame (the capture was cut short); replaying its {} complete frames",
                            input.display(),
                            frames.len()
                        );
                    }
                    // Frames that do not fit a buffer are skipped one by one while
                    // replaying; say so up front, with the size that would carry them,
                    // rather than leave only the pcap_oversize counter at the end.
                    let (over, longest) = frames.longer_than(pool.buf_size());
                    // Looped, such a file would be read forever without one frame to send.
                    if over == frames.len() && cfg.loop_input {
                        bail!(
                            "port {name}: every one of the {} frames in '{}' is longer than a buffer ({} bytes; the longest is {longest}), so a looped replay (ports.loop) would send nothing, ever: raise ports.buffer_size to at least {longest} (--set ports.buffer_size={longest})",
                            frames.len(),
                            input.display(),
                            pool.buf_size(),
                        );
                    }
                    if over > 0 {
                        crate::log_line!(
                            "warning: port {name}: {over} of the {} frames in '{}' are longer than a buffer ({} bytes; the longest is {longest}) and will be skipped (counted as pcap_oversize): raise ports.buffer_size to at least {longest} (--set ports.buffer_size={longest})",
                            frames.len(),
                            input.display(),
                            pool.buf_size(),
                        );
                    }
                    if frames.snapped() > 0 {
                        crate::log_line!(
                            "warning: port {name}: {} of the {} frames in '{}' were captured shorter than they were on the wire (a capture snaplen); they are replayed as captured, so their headers may not parse: capture with -s 0 for whole frames",
                            frames.snapped(),
                            frames.len(),
                            input.display()
                        );
                    }
                    prx.push(Box::new(PcapRx::new(
                        frames,
                        pool,
                        cfg.loop_input,
                        counters.clone(),
                    )));
                }
                let sink = match &spec.output {
                    Some(out) => Some(Arc::new(Mutex::new(
                        PcapSink::create(out).with_context(|| format!("port {name}"))?,
                    ))),
                    None => None,
                };
                for _ in 0..tx_queues {
                    ptx.push(Box::new(PcapTx::new(sink.clone(), counters.clone())));
                }
                if spec.output.is_some() {
                    let c = counters.clone();
                    health.push((
                        p,
                        Box::new(move || {
                            c.failure.get().map(|e| {
                                format!("{e}; frames not written are counted as tx_refused; free space or choose another --output, then run again")
                            })
                        }),
                    ));
                }
                let c = counters;
                backend.push((
                    p,
                    Box::new(move || {
                        use std::sync::atomic::Ordering::Relaxed;
                        vec![
                            ("pcap_read", c.read.load(Relaxed)),
                            ("pcap_oversize", c.oversize.load(Relaxed)),
                            ("pcap_written", c.written.load(Relaxed)),
                            ("pcap_write_errors", c.write_errors.load(Relaxed)),
                        ]
                    }),
                ));
            }
            PortKind::Afpacket => {
                let mut ac = crate::port::afpacket::AfPacketConfig::new(spec.iface.clone());
                ac.rx_queues = spec.rx_queues.max(1);
                ac.tx_queues = tx_queues;
                let port = crate::port::afpacket::AfPacketPort::open(&ac, pool)
                    .with_context(|| format!("port {name}: opening '{}'", spec.iface))?;
                let st = port.stats();
                let check = port.health_check();
                health.push((
                    p,
                    Box::new(move || {
                        check().map(|why| format!("{why}; start it again once the interface is back (the systemd unit's Restart=on-failure does so)"))
                    }),
                ));
                backend.push((
                    p,
                    Box::new(move || {
                        let t = st.totals();
                        vec![
                            ("rx_oversize", t.rx_oversize),
                            ("rx_no_buffer", t.rx_no_buffer),
                            ("rx_kernel_drops", t.rx_kernel_drops),
                            ("rx_errors", t.rx_errors),
                            ("tx_kernel_drops", t.tx_kernel_drops),
                            ("tx_errors", t.tx_errors),
                            ("tx_full", t.tx_full),
                        ]
                    }),
                ));
                let (r, t) = port.split();
                for h in r {
                    prx.push(Box::new(h));
                }
                for h in t {
                    ptx.push(Box::new(h));
                }
            }
            PortKind::Dpdk => bail!(
                "port {name}: kind = \"dpdk\" cannot be mixed with software ports here; set both ports to dpdk and build with --features dpdk"
            ),
        }
        rx.push(prx);
        tx.push(ptx);
    }
    let forward = vec![Some(1), cfg.bidirectional.then_some(0)];
    // Only a pcap port without an input file receives nothing; a run with no port that
    // receives and forwards would end at once having done nothing, so say why instead.
    if !(0..2).any(|p| !rx[p].is_empty() && forward[p].is_some()) {
        bail!(
            "nothing to forward: port {} is a pcap port without an input file; give one with --input FILE (ports.a.input)",
            cfg.port_name(0)
        );
    }
    Ok(SoftPorts {
        ports: EnginePorts { rx, tx, forward },
        synth,
        backend,
        health,
    })
}

/// Packets the lock-free intake of one TX queue holds (other workers' packets waiting for
/// the queue's runner).
const INTAKE_CAPACITY: usize = 4096;

fn queue_options(config: &Config) -> TxQueueOptions {
    let policy = match config.shaper.sync_policy {
        crate::config::SyncPolicy::Equal => qdisc::mq::SyncPolicy::Equal,
        crate::config::SyncPolicy::WorkConserving => qdisc::mq::SyncPolicy::WorkConserving,
    };
    TxQueueOptions {
        intake_capacity: INTAKE_CAPACITY,
        bypass: config.shaper.bypass,
        sync: SyncConfig {
            policy,
            sync_interval_ns: config.shaper.sync_interval_ns,
            ..SyncConfig::default()
        },
    }
}

/// Runs the forwarder with `config` until its duration ends, its inputs run out, or
/// SIGINT/SIGTERM; prints the final report.
///
/// # Errors
/// A port, queue or socket that cannot be set up, or a conservation mismatch at exit.
pub fn run(config: Config) -> anyhow::Result<()> {
    let ecfg: EngineConfig = config.engine.clone();
    ecfg.timing()?;
    crate::flow_key::install_queue_key(config.shaper.seed);
    let dpdk = [config.ports.a.kind, config.ports.b.kind].map(|k| k == PortKind::Dpdk);
    if dpdk[0] || dpdk[1] {
        if !(dpdk[0] && dpdk[1]) {
            bail!("ports.a and ports.b must both be dpdk or both be software ports (synth, pcap, afpacket): DPDK mbufs and pool buffers do not mix");
        }
        return run_dpdk(&config);
    }
    if let Some(w) = pool_warning(&config) {
        crate::log_line!("warning: {w}");
    }
    let ports = with_generator_paced(&config);
    let soft = build_soft_ports(&ports, ecfg.tx_queues)?;
    supervise(
        &config,
        soft.ports,
        soft.synth,
        soft.backend,
        soft.health,
        None,
    )
}

/// The `[ports]` table with the generator's offered rate "auto" resolved against the shaped
/// rate ([`crate::port::synth::resolve_auto_rate`]), saying so when a synth port generates:
/// a flood far above the rate would report most packets dropped.
pub fn with_generator_paced(config: &Config) -> PortsConfig {
    let mut ports = config.ports.clone();
    // Port A's generator feeds port B's egress; with one on port B too (both directions),
    // one offered rate serves both, so it follows the faster direction (flat out when
    // either is unlimited), and the slower one drops more.
    let egress = |p: usize| config.cake_for_egress(p).rate.bits_per_sec();
    let shaped = if ports.synth.both_directions {
        let (ab, ba) = (egress(1), egress(0));
        if ab == 0 || ba == 0 {
            0
        } else {
            ab.max(ba)
        }
    } else {
        egress(1)
    };
    let rate = crate::port::synth::resolve_auto_rate(&ports.synth.rate, shaped);
    let generates = ports.a.kind == PortKind::Synth;
    if rate != ports.synth.rate && generates && shaped != 0 {
        crate::log_line!(
            "generator: offering {rate} per generating port, {}x the shaped rate (ports.synth.rate = \"auto\"; set it, e.g. --set ports.synth.rate=1mpps, to offer another rate)",
            crate::port::synth::AUTO_OFFER_FACTOR
        );
    }
    ports.synth.rate = rate;
    ports
}

/// When one port's TX queues together may hold more buffers than the pool that feeds them
/// has, an overload empties the pool first: receiving stalls and the ring, not CAKE, picks
/// what to drop, while CAKE's queues stay full. Says so, and what to change. With several
/// workers the rings between them (each queue's intake, each port queue's handoff) hold
/// buffers too.
pub fn pool_warning(config: &Config) -> Option<String> {
    if config.shaper.queue != QueueKind::Cake {
        return None;
    }
    // The limit at the full configured rate: a queue's share is never above it. The
    // direction that may hold the most decides.
    let limit_bytes = crate::config::direction::Direction::BOTH
        .iter()
        .map(|d| {
            let cake = config.cake_for(*d);
            (
                cake.memory_limit_at(cake.rate.bytes_per_sec()),
                cake.packet_limit,
            )
        })
        .max()
        .unwrap_or_default();
    let (limit_bytes, packet_limit) = limit_bytes;
    let per_queue =
        (limit_bytes / config.ports.buffer_size.max(1) as u64).min(u64::from(packet_limit));
    let engine = &config.engine;
    let queues = engine.tx_queues as u64;
    let rings_per_queue = if engine.workers > 1 {
        (INTAKE_CAPACITY + crate::engine::handoff_capacity(engine.burst)) as u64
    } else {
        0
    };
    let in_cake = per_queue.saturating_mul(queues);
    let in_rings = rings_per_queue.saturating_mul(queues);
    let can_hold = in_cake.saturating_add(in_rings);
    let pool = config.ports.pool_buffers as u64;
    let rings = if in_rings > 0 {
        format!(
            ", plus {in_rings} in the rings between the {} workers",
            engine.workers
        )
    } else {
        String::new()
    };
    (can_hold > pool).then(|| {
        format!(
            "the {queues} TX queue(s) of a port may hold up to {can_hold} buffers ({in_cake} under CAKE's memory limit of {:.1} MiB per queue at {} bytes per buffer{rings}), more than the {pool} of the pool that feeds them: under overload the pool runs dry and receiving stalls before CAKE drops anything; raise ports.pool_buffers to {can_hold} or lower shaper.memlimit",
            limit_bytes as f64 / f64::from(1u32 << 20),
            config.ports.buffer_size,
        )
    })
}

#[cfg(not(feature = "dpdk"))]
fn run_dpdk(_config: &Config) -> anyhow::Result<()> {
    bail!("kind = \"dpdk\" needs a build with DPDK: cargo build --release -p forwarder --features dpdk")
}

#[cfg(feature = "dpdk")]
fn run_dpdk(config: &Config) -> anyhow::Result<()> {
    use crate::port::dpdk::{DpdkPorts, DpdkPortsConfig, Mbuf};
    let ecfg = &config.engine;
    let ports = &config.ports;
    let dcfg = DpdkPortsConfig {
        eal_args: ports.eal_args.clone(),
        ports: vec![ports.a.iface.clone(), ports.b.iface.clone()],
        rx_queues: ports.a.rx_queues.max(ports.b.rx_queues).max(1) as u16,
        tx_queues: ecfg.tx_queues as u16,
        min_mbufs_per_port: u32::try_from(ports.pool_buffers).unwrap_or(u32::MAX),
        ..DpdkPortsConfig::default()
    };
    let mut set = DpdkPorts::open(&dcfg).context("opening the DPDK ports")?;
    // Without RSS a NIC's receive queues do not keep a flow on one queue (net_pcap replays
    // the whole file on each): the default tx_select then keeps flows whole by hash.
    let flows_stay = dcfg.rx_queues <= 1 || set.devs.iter().all(|d| d.rss_hf() != 0);
    let mut resolved = config.clone();
    if !flows_stay && config.engine.tx_select == crate::engine::TxSelect::Auto {
        let (pick, why) = ecfg
            .tx_select
            .resolve(ecfg.workers, ecfg.tx_queues, flows_stay);
        crate::log_line!("engine.tx_select: \"{}\" in effect ({why})", pick.name());
        resolved.engine.tx_select = pick;
    }
    // Workers run on EAL's worker lcores, pinned by the hook below; the engine's own
    // pinning (engine.cores) is for software ports.
    let cpus = dpdk_worker_cpus(&set.eal, ecfg)?;
    resolved.engine.pin = false;
    let config = &resolved;
    let (r, t) = set.take_queues();
    let rx: Vec<Vec<Box<dyn PortRx<Buf = Mbuf>>>> = r
        .into_iter()
        .map(|qs| {
            qs.into_iter()
                .map(|q| Box::new(q) as Box<dyn PortRx<Buf = Mbuf>>)
                .collect()
        })
        .collect();
    let tx: Vec<Vec<Box<dyn PortTx<Buf = Mbuf>>>> = t
        .into_iter()
        .map(|qs| {
            qs.into_iter()
                .map(|q| Box::new(q) as Box<dyn PortTx<Buf = Mbuf>>)
                .collect()
        })
        .collect();
    let forward = vec![Some(1), ports.bidirectional.then_some(0)];
    let hook_eal = set.eal.clone();
    let hook: WorkerHook = Arc::new(move |w| {
        if let Some(cpu) = cpus.as_ref().and_then(|c| c.get(w)) {
            if !core_affinity::set_for_current(core_affinity::CoreId { id: *cpu }) {
                crate::log_line!("warning: worker {w} could not be pinned to CPU {cpu}");
            }
        }
        match hook_eal.register_thread() {
            Ok(g) => Box::new(g) as Box<dyn std::any::Any>,
            Err(e) => {
                crate::log_line!("warning: worker not registered as a DPDK lcore: {e}");
                Box::new(())
            }
        }
    });
    // The queue halves are dropped inside `supervise` (with the engine), before `set`.
    let result = supervise(
        config,
        EnginePorts { rx, tx, forward },
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Some(hook),
    );
    drop(set);
    result
}

/// The CPU each worker of DPDK ports is pinned to: EAL's worker lcores in order
/// ([`crate::port::lcores`]); logs the layout and what is wrong with it. `None` with
/// `engine.pin = false`.
#[cfg(feature = "dpdk")]
fn dpdk_worker_cpus(
    eal: &crate::port::dpdk::Eal,
    ecfg: &EngineConfig,
) -> anyhow::Result<Option<Vec<usize>>> {
    use crate::port::lcores;
    if !ecfg.cores.is_empty() {
        crate::log_line!(
            "warning: engine.cores {:?} is for software ports and is ignored here: DPDK workers run on EAL's worker lcores; choose them with -l/--lcores in ports.eal_args (--eal '-l 0-{}', the first is the main lcore)",
            ecfg.cores,
            ecfg.workers
        );
    }
    if !ecfg.pin {
        return Ok(None);
    }
    // Before any worker runs: a CPU busy now is busy with someone else's work.
    let busy = lcores::busy_cpus(Duration::from_millis(200));
    let plan = lcores::place(ecfg.workers, &eal.main_lcore(), &eal.worker_lcores(), &busy)
        .map_err(anyhow::Error::msg)?;
    crate::log_line!("{}", plan.summary);
    for w in &plan.warnings {
        crate::log_line!("warning: {w}");
    }
    Ok(Some(plan.workers.iter().map(|(_, cpu)| *cpu).collect()))
}

/// Runs the engine over `ports` and supervises it until it stops; prints the final report.
fn supervise<P: PortBuf>(
    config: &Config,
    ports: EnginePorts<P>,
    synth: Vec<(usize, Arc<SynthStats>)>,
    backend: Vec<(usize, BackendCounters)>,
    health: Vec<(usize, PortHealth)>,
    hook: Option<WorkerHook>,
) -> anyhow::Result<()> {
    let ecfg: EngineConfig = config.engine.clone();
    let scfg: StatsConfig = config.stats.stats_config()?;
    let timing = ecfg.timing()?;
    let interval_ns = crate::config::units::parse_optional_duration_ns(&scfg.interval)
        .context("stats.interval")?
        .unwrap_or(1_000_000_000)
        .max(10_000_000);
    // Each egress port carries one direction, shaped by that direction's settings.
    let choices: Vec<QueueChoice> = (0..2)
        .map(|p| match config.shaper.queue {
            QueueKind::Cake => QueueChoice::Cake(config.cake_for_egress(p)),
            QueueKind::Fifo => QueueChoice::Fifo,
        })
        .collect();
    let (shapers, targets) =
        build_port_queues::<P>(&choices, ecfg.tx_queues, queue_options(config))?;
    let port_names = vec![config.ports.port_name(0), config.ports.port_name(1)];

    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .context("installing the SIGINT handler")?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())
        .context("installing the SIGTERM handler")?;

    let mut outputs = Outputs::new(&scfg)?;
    let directions = targets
        .iter()
        .enumerate()
        .map(|(p, queues)| {
            control::DirectionTarget::new(
                config.egress_direction(p),
                &port_names[p],
                queues.clone(),
                config.cake_for_egress(p),
            )
        })
        .collect();
    let state = Arc::new(ControlState {
        directions,
        started_with: config.clone(),
        latest_text: outputs.latest_text.clone(),
        latest_json: outputs.latest_json.clone(),
        fresh: Mutex::new(None),
    });
    control::install(Some(state.clone()));
    let aux_stop = Arc::new(AtomicBool::new(false));
    let aux = serve_control_and_metrics(&scfg, &state, &outputs, &aux_stop)?;
    let views: Vec<Arc<dyn QueueView>> = shapers
        .iter()
        .map(|s| Arc::new(ShaperView::<P>(s.clone())) as Arc<dyn QueueView>)
        .collect();
    let all_shapers = shapers.clone();
    let ports = stall_for_tests(ports)?;
    let mut notifier = crate::notify::Notifier::from_env();
    let started = Instant::now();
    let running =
        engine::start_with_hook(&ecfg, ports, shapers, hook).context("starting the engine")?;
    let handoff_src = running.handoff_counts();
    let reporter = Arc::new(Mutex::new(Reporter::new(Sources {
        port_names: port_names.clone(),
        counters: running.counters().clone(),
        queues: views,
        synth: synth.clone(),
        backend,
        handoff: Box::new(handoff_src),
        directions: direction_sources(config),
    })));
    {
        // `ctl stats` answers with the state when asked, not the last interval's.
        let reporter = Arc::downgrade(&reporter);
        *state.fresh.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(move || {
            let Some(reporter) = reporter.upgrade() else {
                return (String::new(), String::new());
            };
            let r = reporter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .peek(started.elapsed().as_secs_f64());
            let json = serde_json::to_string(&r).unwrap_or_default();
            (r.final_text(), format!("{json}\n"))
        }));
    }

    let Stopped {
        reason: stop_reason,
        port_fault,
    } = watch(
        &running,
        &stop,
        (&health, &port_names),
        Schedule {
            started,
            duration_ns: timing.duration_ns,
            interval_ns,
        },
        &mut notifier,
        |elapsed_ns| {
            let r = reporter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .report(elapsed_ns as f64 / 1e9);
            outputs.publish(&r, scfg.live, &synth);
            r
        },
    );
    let panicked = running.join();
    // Let every queue publish its final counters: a burst a worker offered last may have
    // changed them (say, the qdisc dropped part of it) with no run after it. A budget of 0
    // moves and dequeues nothing; what waits in an intake is counted as queued.
    let now = crate::clock::now_ns();
    for s in &all_shapers {
        let mut out = Vec::new();
        let _ = s.run(now, 0, &mut out, &mut |_o: &mut Vec<P>| {});
        drop(out);
    }
    // From here on `stats` answers with the final report.
    *state.fresh.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let r = reporter
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .final_report(started.elapsed().as_secs_f64());
    outputs.publish(&r, false, &synth);
    aux_stop.store(true, Ordering::Relaxed);
    for h in aux {
        let _ = h.join();
    }
    control::install(None);
    // A closed stdout (piped into `head`) must not turn a clean stop into a panic.
    let _ = crate::cli::out(&format!("stopped: {stop_reason}\n{}", r.final_text()));
    verdict(&r, panicked, port_fault)
}

/// Where reports go: the JSON lines file, the latest text and JSON for `ctl stats`, the
/// Prometheus text, and the live line on stderr.
struct Outputs {
    latest_text: Arc<Mutex<String>>,
    latest_json: Arc<Mutex<String>>,
    latest_prom: Arc<Mutex<String>>,
    json: Option<std::io::BufWriter<std::fs::File>>,
}

impl Outputs {
    fn new(scfg: &StatsConfig) -> anyhow::Result<Outputs> {
        // Until the first report, say when it comes: a bare `{}` read as a report with no
        // ports.
        let not_yet = format!(
            "no report yet: the first comes {} after start (stats.interval)",
            scfg.interval
        );
        let json = match &scfg.json {
            Some(p) => Some(std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            )),
            None => None,
        };
        Ok(Outputs {
            latest_text: Arc::new(Mutex::new(format!("{not_yet}\n"))),
            latest_json: Arc::new(Mutex::new(format!(
                "{}\n",
                serde_json::json!({ "report": null, "error": not_yet })
            ))),
            latest_prom: Arc::new(Mutex::new(String::new())),
            json,
        })
    }

    /// Publishes `r` everywhere; with `live`, also the live line (with the synth sink's
    /// delays of the interval, which it then resets).
    fn publish(&mut self, r: &Report, live: bool, synth: &[(usize, Arc<SynthStats>)]) {
        let line = serde_json::to_string(r).unwrap_or_default();
        if let Some(j) = self.json.as_mut() {
            let _ = writeln!(j, "{line}");
            let _ = j.flush();
        }
        *self.latest_json.lock().unwrap_or_else(|e| e.into_inner()) = format!("{line}\n");
        *self.latest_text.lock().unwrap_or_else(|e| e.into_inner()) = r.final_text();
        *self.latest_prom.lock().unwrap_or_else(|e| e.into_inner()) = prometheus::render(r);
        if live {
            let delay = synth.first().map(|(_, s)| {
                let mut h = s.delay_interval.lock().unwrap_or_else(|e| e.into_inner());
                let p = crate::stats::percentiles(&h);
                h.reset();
                p
            });
            crate::log_line!("{}", r.live_line(delay));
        }
    }
}

/// Starts the control socket and the Prometheus endpoint as configured; their threads end
/// when `aux_stop` is set.
fn serve_control_and_metrics(
    scfg: &StatsConfig,
    state: &Arc<ControlState>,
    outputs: &Outputs,
    aux_stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut aux = Vec::new();
    if scfg.control_socket != "off" {
        let path = if scfg.control_socket.is_empty() {
            control::default_socket_path()
        } else {
            PathBuf::from(&scfg.control_socket)
        };
        match control::serve(&path, Arc::clone(state), Arc::clone(aux_stop)) {
            Ok(h) => aux.push(h),
            // The default socket is a convenience (its directory may not be writable
            // without root); a socket the operator named is a requirement.
            Err(e) if scfg.control_socket.is_empty() => crate::log_line!("warning: {e}"),
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(addr) = &scfg.prometheus {
        let h = prometheus::serve(
            addr,
            scfg.prometheus_public,
            outputs.latest_prom.clone(),
            Arc::clone(aux_stop),
        )?;
        aux.push(h);
    }
    Ok(aux)
}

/// Why the run stopped, and the port failure that stopped it, if one did.
struct Stopped {
    reason: String,
    port_fault: Option<String>,
}

/// When a run started, how long it may last and how often it reports.
#[derive(Clone, Copy)]
struct Schedule {
    started: Instant,
    duration_ns: Option<u64>,
    interval_ns: u64,
}

/// Watches the running engine until it has stopped: checks the ports' health, starts the
/// drain on a signal, a port failure, the end of the run's duration or of its inputs (a
/// second signal stops at once), and calls `report` (with the time since the start) at
/// every report interval.
fn watch<P: PortBuf>(
    running: &engine::Running<P>,
    stop: &AtomicBool,
    (health, port_names): (&[(usize, PortHealth)], &[String]),
    schedule: Schedule,
    notifier: &mut crate::notify::Notifier,
    mut report: impl FnMut(u64) -> Report,
) -> Stopped {
    let Schedule {
        started,
        duration_ns,
        interval_ns,
    } = schedule;
    let mut next_report = interval_ns;
    let mut draining = false;
    let mut stop_reason = "duration reached".to_string();
    let mut port_fault: Option<String> = None;
    let mut next_health_check = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        notifier.tick(Instant::now(), &running.shared().heartbeats());
        let elapsed_ns = started.elapsed().as_nanos() as u64;
        if !draining {
            if Instant::now() >= next_health_check {
                next_health_check = Instant::now() + HEALTH_CHECK_EVERY;
                port_fault = health.iter().find_map(|(p, check)| {
                    let name = port_names.get(*p).cloned().unwrap_or_default();
                    check().map(|why| format!("port {name}: {why}"))
                });
            }
            let why = if stop.load(Ordering::Relaxed) {
                Some("signal".to_string())
            } else if let Some(fault) = &port_fault {
                crate::log_line!("error: {fault}; stopping");
                Some(fault.clone())
            } else if duration_ns.is_some_and(|d| elapsed_ns >= d) {
                Some("duration reached".to_string())
            } else if running.rx_finished() {
                Some("inputs finished".to_string())
            } else {
                None
            };
            if let Some(w) = why {
                notifier.stopping(&w);
                stop_reason = w;
                stop.store(false, Ordering::Relaxed);
                running.stop_rx();
                draining = true;
            }
        } else if stop.load(Ordering::Relaxed) {
            running.stop_now();
        }
        if running.is_finished() {
            break;
        }
        if elapsed_ns >= next_report {
            next_report += interval_ns;
            let r = report(elapsed_ns);
            notifier.status(&r.live_line(None));
        }
    }
    Stopped {
        reason: stop_reason,
        port_fault,
    }
}

/// The run's exit status from its final report: an error when a worker panicked, a port
/// failed, or a packet is unaccounted for (overall or in one direction).
fn verdict(r: &Report, panicked: usize, port_fault: Option<String>) -> anyhow::Result<()> {
    if panicked > 0 {
        bail!("{panicked} worker thread(s) panicked; the report above is incomplete");
    }
    if let Some(fault) = port_fault {
        bail!("cakewalk stopped: {fault}");
    }
    if !r.conservation.ok {
        bail!(
            "conservation check failed: {}; this is a bug, please report it with the config used",
            r.conservation_line()
        );
    }
    if let Some(d) = r.directions.iter().position(|d| !d.conservation.ok) {
        bail!(
            "conservation check failed for one direction: {}; this is a bug, please report it with the config used",
            r.direction_lines()[d]
        );
    }
    Ok(())
}

/// The directions forwarded: A -> B always, B -> A when bidirectional; each named by the
/// port it leaves through.
fn direction_sources(config: &Config) -> Vec<crate::stats::DirectionSource> {
    let mut out = vec![crate::stats::DirectionSource {
        direction: config.egress_direction(1),
        ingress: 0,
        egress: 1,
    }];
    if config.ports.bidirectional {
        out.push(crate::stats::DirectionSource {
            direction: config.egress_direction(0),
            ingress: 1,
            egress: 0,
        });
    }
    // Download first, as everywhere else.
    out.sort_by_key(|d| d.direction);
    out
}

/// Makes port A's first receive queue stall once when the test hook asks for it
/// ([`crate::port::stall`]).
fn stall_for_tests<P: PortBuf>(mut ports: EnginePorts<P>) -> anyhow::Result<EnginePorts<P>> {
    let Some((after, stall_for)) = crate::port::stall::from_env().map_err(anyhow::Error::msg)?
    else {
        return Ok(ports);
    };
    if let Some(first) = ports.rx.first_mut().filter(|q| !q.is_empty()) {
        let rx = first.remove(0);
        first.insert(
            0,
            Box::new(crate::port::stall::stalling(rx, after, stall_for)),
        );
        crate::log_line!(
            "test hook: port a's first receive queue stalls for {stall_for:?} after {after:?}"
        );
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_that_can_hold_more_buffers_than_the_pool_are_warned_about() {
        let at = |queues: usize, extra: &str| {
            let c = Config::from_toml_str(&format!(
                "[shaper]\nrate = \"100mbit\"\n{extra}\n[engine]\ntx_queues = {queues}"
            ))
            .unwrap();
            pool_warning(&c)
        };
        // 100 Mbit/s: a 5 MB memory limit per queue, 2441 buffers of 2 KiB; the pool has 16384.
        assert_eq!(at(6, ""), None);
        let w = at(9, "").expect("9 x 2441 > 16384");
        assert!(
            w.starts_with("the 9 TX queue(s) of a port may hold up to 21969 buffers")
                && w.contains("raise ports.pool_buffers to 21969 or lower shaper.memlimit"),
            "{w}"
        );
        assert_eq!(at(9, "memlimit = \"2mb\""), None, "a lower memlimit fits");
        // Two workers: each queue's intake (4096) and handoff (32 x 64) hold buffers too.
        let two = Config::from_toml_str(
            "[shaper]\nrate = \"100mbit\"\n[engine]\ntx_queues = 2\nworkers = 2",
        )
        .unwrap();
        let w = pool_warning(&two).expect("2 x (2441 + 4096 + 2048) > 16384");
        assert!(
            w.contains("up to 17170 buffers (4882 under CAKE's")
                && w.contains("plus 12288 in the rings between the 2 workers"),
            "{w}"
        );
        assert_eq!(
            at(9, "queue = \"fifo\""),
            None,
            "the FIFO has its own small limit"
        );
    }
}
