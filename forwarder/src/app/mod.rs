//! The forwarder's top level: builds ports, TX queues (CAKE or FIFO in a
//! [`qdisc::mq::MultiQueue`] per egress port) and workers from a [`Config`], then supervises
//! them: live stats each interval, the control socket, Prometheus, SIGINT/SIGTERM and the
//! duration limit. Stopping drains the queues within the drain timeout, prints the final
//! report and checks conservation; a mismatch is an error (non-zero exit).
//!
//! Software ports (synth, pcap, AF_PACKET) share one buffer type ([`PoolBuf`]) and mix freely;
//! DPDK ports are started by the `dpdk` backend itself.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use qdisc::mq::{SyncConfig, TxQueueOptions};

use crate::config::{Config, QueueKind};
use crate::counters::synth::SynthStats;
use crate::engine::{EngineConfig, EnginePorts};
use crate::port::pcap::{PcapCounters, PcapFrames, PcapRx, PcapSink, PcapTx};
use crate::port::pool::{Pool, PoolBuf};
use crate::port::synth::{RxSteering, SynthPlan, SynthRx, SynthTx};
use crate::port::{PortKind, PortRx, PortSpec, PortTx, PortsConfig};
use crate::stats::BackendCounters;

mod circuits;
mod queues;
mod supervise;

pub use queues::{build_port_queues, build_queues, Built, QueueChoice};

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

/// Changes a port's generator plan before its queues are built (`(port, plan)`).
pub type PlanSteering<'a> = &'a dyn Fn(usize, &mut SynthPlan);

/// Builds ports A and B from `cfg` with `tx_queues` transmit halves each; `steer`, when
/// given, places each generating port's flows on its receive queues.
pub fn build_soft_ports(
    cfg: &PortsConfig,
    tx_queues: usize,
    steer: Option<PlanSteering<'_>>,
) -> anyhow::Result<SoftPorts> {
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
                let mut plan = SynthPlan::new(&cfg.synth, p as u8)
                    .with_context(|| format!("port {name}: [ports.synth]"))?;
                if let (Some(steer), true) = (steer, generate) {
                    steer(p, &mut plan);
                }
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
    let prepared = match &config.circuits {
        Some(settings) => Some(circuits::prepare(&config, settings)?),
        None => None,
    };
    let steering = match (&prepared, ports.synth.rx_steering) {
        (Some(prepared), RxSteering::Circuit) => Some(circuit_steering(&config, &ports, prepared)),
        _ => None,
    };
    let soft = build_soft_ports(
        &ports,
        ecfg.tx_queues,
        steering.as_ref().map(|s| s as PlanSteering<'_>),
    )?;
    drop(steering);
    supervise::supervise(
        &config,
        soft.ports,
        soft.synth,
        soft.backend,
        soft.health,
        None,
        prepared,
    )
}

/// `ports.synth.rx_steering = "circuit"`: each generated flow on the receive queue of the
/// worker that owns its circuit's TX queue on the way out, so that no packet of a circuit
/// crosses to another worker (as a NIC's flow rules or XDP's cpumap steer by subscriber
/// prefix). A flow of no circuit, or whose owner polls none of the port's queues, stays
/// round robin.
fn circuit_steering<'a>(
    config: &'a Config,
    ports: &'a PortsConfig,
    prepared: &'a circuits::Prepared,
) -> impl Fn(usize, &mut SynthPlan) + 'a {
    let workers = config.engine.workers.max(1);
    let tx_queues = config.engine.tx_queues.max(1);
    let rx_counts = [ports.a.rx_queues.max(1), ports.b.rx_queues.max(1)];
    let rx_workers =
        crate::engine::rx_queue_workers(&rx_counts, &[true, ports.bidirectional], workers);
    move |p, plan| {
        let out = 1 - p;
        let side = crate::classify::Side::of(config.egress_direction(out));
        let lpm = prepared.lpm();
        plan.steer(|_, frame| {
            let mut meta = qdisc::PacketMeta::default();
            crate::wire::parse_into(frame, &mut meta);
            let slot = crate::classify::circuit_of(lpm, side, &meta.keys)?;
            let q = crate::classify::circuit_queue(slot, tx_queues);
            let owner = crate::engine::tx_queue_owner(out, q, tx_queues, workers);
            let rx = rx_workers[p].iter().position(|&w| w == owner)?;
            u16::try_from(rx).ok()
        });
    }
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
    let per_queue = if config.circuits.is_some() {
        // Circuits: each queue's circuits together hold at most their shared limit, which
        // is sized from the pool; only the rings can still take it over.
        circuits::total_packet_limit(config) as u64
    } else {
        (limit_bytes / config.ports.buffer_size.max(1) as u64).min(u64::from(packet_limit))
    };
    let limit_what = if config.circuits.is_some() {
        "under the circuits' shared limit".to_string()
    } else {
        format!(
            "under CAKE's memory limit of {:.1} MiB per queue at {} bytes per buffer",
            limit_bytes as f64 / f64::from(1u32 << 20),
            config.ports.buffer_size
        )
    };
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
            "the {queues} TX queue(s) of a port may hold up to {can_hold} buffers ({in_cake} {limit_what}{rings}), more than the {pool} of the pool that feeds them: under overload the pool runs dry and receiving stalls before CAKE drops anything; raise ports.pool_buffers to {can_hold} or lower shaper.memlimit"
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
    let hook: crate::engine::WorkerHook = Arc::new(move |w| {
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
    let result = supervise::supervise(
        config,
        EnginePorts { rx, tx, forward },
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Some(hook),
        None,
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

    #[test]
    fn circuits_fit_the_pool_by_their_shared_limit() {
        let with = |engine: &str| {
            Config::from_toml_str(&format!(
                "[shaper]\nrate = \"10gbit\"\n[circuits]\nfiles = [\"ShapedDevices.csv\"]\n[engine]\n{engine}"
            ))
            .unwrap()
        };
        // Ten thousand circuits may each hold 2048 packets, but together at most three
        // quarters of the pool: no warning at a link rate whose CAKE limit would not fit.
        let one = with("tx_queues = 1");
        assert_eq!(circuits::total_packet_limit(&one), 16384 * 3 / 4);
        assert_eq!(pool_warning(&one), None);
        let w = pool_warning(&with("tx_queues = 2\nworkers = 2")).expect("the rings");
        assert!(w.contains("under the circuits' shared limit"), "{w}");
    }
}
