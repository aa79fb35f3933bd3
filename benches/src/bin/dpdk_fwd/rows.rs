//! The measured rows: the bare loop, the inline queue paths (FIFO, CAKE and the DRR floor,
//! with and without the bypass), the forwarder's engine on fresh vdev pairs, and the thread
//! scaling table, each counting what it forwarded over a fixed time.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{bail, Context};
use forwarder::port::dpdk::{Eal, EthDev, EthDevConfig, Mbuf, Mempool, RxQueue, TxQueue};
use forwarder::port::{PortBuf, PortRx, PortTx};
use qdisc::cake::{Cake, CakeConfig};
use qdisc::fifo::{Fifo, FifoConfig};
use qdisc::mq::{MqQdisc, MultiQueue, TxQueueOptions};
use qdisc::testing::DrrFloor;
use qdisc::Rate;

use crate::bench::{median, Args, Kind, Machine, Ports};

pub(crate) const BURST: usize = 32;

/// The queueing layer of a FIFO or CAKE row: one `MultiQueue` with a TX queue per thread
/// (cake_mq over one shared rate for CAKE), as the engine builds it for its workers.
enum Shaping {
    None,
    Fifo(MultiQueue<Mbuf, Fifo<Mbuf>>),
    Cake(MultiQueue<Mbuf, Cake<Mbuf>>),
    Floor(MultiQueue<Mbuf, DrrFloor<Mbuf>>),
}

impl Shaping {
    fn new(kind: Kind, queues: usize) -> anyhow::Result<Shaping> {
        Ok(match kind {
            Kind::Bare | Kind::Parse => Shaping::None,
            Kind::Fifo { bypass } => Shaping::Fifo(MultiQueue::from_config(
                queues,
                TxQueueOptions {
                    bypass,
                    ..TxQueueOptions::default()
                },
                &FifoConfig {
                    limit_packets: 1024,
                },
            )?),
            Kind::Cake { bypass, rate } => Shaping::Cake(MultiQueue::from_config(
                queues,
                TxQueueOptions {
                    bypass,
                    ..TxQueueOptions::default()
                },
                &CakeConfig {
                    rate: rate.unwrap_or(Rate::UNLIMITED),
                    ..CakeConfig::default()
                },
            )?),
            Kind::Floor => Shaping::Floor(
                MultiQueue::from_config(
                    queues,
                    TxQueueOptions {
                        bypass: false,
                        ..TxQueueOptions::default()
                    },
                    // As many packet slots as CAKE's default packet limit.
                    &(CakeConfig::default().packet_limit as usize),
                )
                .unwrap_or_else(|never| match never {}),
            ),
        })
    }

    /// Runs `kind` for `seconds` on `ports`, feeding TX queue `queue`.
    fn work(&self, ports: &mut Ports, queue: usize, kind: Kind, seconds: f64) -> Counts {
        match self {
            Shaping::None => bare(ports, seconds, kind == Kind::Parse),
            Shaping::Fifo(mq) => through_queue(ports, mq.queue(queue), seconds),
            Shaping::Cake(mq) => through_queue(ports, mq.queue(queue), seconds),
            Shaping::Floor(mq) => through_queue(ports, mq.queue(queue), seconds),
        }
    }
}

/// Nanoseconds since `new`, from the engine's own clock (`forwarder::clock::now_ns`: the TSC,
/// at a rate measured against the monotonic clock; DPDK's `rte_get_tsc_hz` is rounded to
/// 10 MHz, which made the shaped row's time run 0.2 % slow on a 2445 MHz TSC).
struct TscClock {
    t0: u64,
}

impl TscClock {
    fn new() -> TscClock {
        TscClock {
            t0: forwarder::clock::now_ns(),
        }
    }
    #[inline]
    fn now_ns(&self) -> u64 {
        forwarder::clock::now_ns().saturating_sub(self.t0)
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) rx: u64,
    pub(crate) tx: u64,
    /// Every drop: the TX port's refusals, the intake's and the qdisc's (at enqueue and
    /// by its AQM at dequeue).
    pub(crate) dropped: u64,
    /// Still in the queue at the end (freed with it).
    pub(crate) queued: u64,
    pub(crate) ns: u64,
}

impl Counts {
    pub(crate) fn mpps(&self) -> f64 {
        self.tx as f64 / self.ns.max(1) as f64 * 1e3
    }
}

/// Writes a classic pcap file (microsecond timestamps, Ethernet link type) by hand: the
/// format is 24 header bytes plus 16 per record, not worth a dependency here.
pub(crate) fn write_pcap(path: &std::path::Path, flows: u32, frame: usize) -> anyhow::Result<()> {
    let payload = frame
        .checked_sub(14 + 20 + 8)
        .context("--frame must be at least 42")?;
    let mut out = Vec::with_capacity(24 + flows as usize * (16 + frame));
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes()); // magic, microseconds
    out.extend_from_slice(&2u16.to_le_bytes()); // version 2.4
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes()); // thiszone
    out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    out.extend_from_slice(&65535u32.to_le_bytes()); // snaplen
    out.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    let mut buf = vec![0u8; frame];
    for i in 0..flows {
        let src = Ipv4Addr::new(10, 1, (i >> 8) as u8, i as u8);
        let len = forwarder::wire::build_udp_frame(
            &mut buf,
            IpAddr::V4(src),
            IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)),
            1024 + (i % 50_000) as u16,
            5201,
            0,
            0,
            payload,
        )
        .context("frame fits")?;
        for word in [0u32, i, len as u32, len as u32] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&buf[..len]);
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// Runs `kind` for `seconds` on this thread and counts.
pub(crate) fn measure(ports: &mut Ports, kind: Kind, seconds: f64) -> anyhow::Result<Counts> {
    Ok(Shaping::new(kind, 1)?.work(ports, 0, kind, seconds))
}

/// Runs `kind` on one thread per entry of `ports`, thread `i` pinned to `cores[i]`,
/// registered as a DPDK lcore (for its mempool cache) and feeding TX queue `i`; the
/// threads start together. Returns each thread's counts.
fn measure_threads(
    eal: &Eal,
    ports: &mut [Ports],
    cores: &[core_affinity::CoreId],
    kind: Kind,
    seconds: f64,
) -> anyhow::Result<Vec<Counts>> {
    let shaping = Shaping::new(kind, ports.len())?;
    let start = std::sync::Barrier::new(ports.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = ports
            .iter_mut()
            .enumerate()
            .map(|(i, p)| {
                let (shaping, start, core) = (&shaping, &start, cores[i]);
                s.spawn(move || -> anyhow::Result<Counts> {
                    let pinned = core_affinity::set_for_current(core);
                    let lcore = eal.register_thread();
                    // Every thread reaches the barrier, so one failing cannot hang the rest.
                    start.wait();
                    if !pinned {
                        bail!("could not pin bench thread {i} to core {}", core.id);
                    }
                    let _lcore = lcore?;
                    Ok(shaping.work(p, i, kind, seconds))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a bench thread panicked"))?
            })
            .collect()
    })
}

pub(crate) fn bare(ports: &mut Ports, seconds: f64, parse: bool) -> Counts {
    let clock = TscClock::new();
    let end = (seconds * 1e9) as u64;
    let mut burst: Vec<Mbuf> = Vec::with_capacity(BURST);
    let mut metas = vec![qdisc::PacketMeta::default(); BURST];
    let mut c = Counts::default();
    loop {
        for _ in 0..64 {
            c.rx += ports.rx.rx_burst(&mut burst, BURST) as u64;
            if parse {
                // As the forwarder parses: a burst at a time, into the burst's meta array.
                for (m, meta) in burst.iter().zip(metas.iter_mut()) {
                    std::hint::black_box(forwarder::wire::parse_into(m.data(), meta));
                }
                std::hint::black_box(&mut metas);
            }
            c.tx += ports.tx.tx_burst(&mut burst) as u64;
            c.dropped += burst.len() as u64;
            burst.clear();
        }
        let now = clock.now_ns();
        if now >= end {
            c.ns = now;
            return c;
        }
    }
}

fn through_queue<Q: MqQdisc<Mbuf>>(
    ports: &mut Ports,
    q: &qdisc::mq::TxQueue<Mbuf, Q>,
    seconds: f64,
) -> Counts {
    let clock = TscClock::new();
    let end = (seconds * 1e9) as u64;
    // Both 4 bursts long: a bypassed burst swaps the two buffers.
    let mut rxb: Vec<Mbuf> = Vec::with_capacity(4 * BURST);
    let mut txb: Vec<Mbuf> = Vec::with_capacity(4 * BURST);
    let mut metas = vec![qdisc::PacketMeta::default(); BURST];
    let mut c = Counts::default();
    let tx = &mut ports.tx;
    loop {
        // One clock read per burst, as the engine does.
        let now = clock.now_ns();
        if now >= end {
            c.ns = now;
            break;
        }
        c.rx += ports.rx.rx_burst(&mut rxb, BURST) as u64;
        // The whole burst under one runner-lock round trip, as the engine offers it with
        // one TX queue: each frame is parsed (`parse_into`, in place) only if the queue
        // needs its meta, and a burst that bypasses lands in `txb` without being moved.
        // Its drops are in the queue's stats, read at the end.
        let _ = q.enqueue_burst(
            now,
            &mut rxb,
            &mut metas,
            |m, meta| {
                forwarder::wire::parse_into(m.data(), meta);
                meta.l4_hash = m.rss_hash();
            },
            &mut txb,
            qdisc::mq::Offerer::Runner,
        );
        let mut sent = 0u64;
        // As the engine: a queue with nothing to drain, dequeue or sync is not run.
        if q.run_wanted(now) {
            let _ = q.run(now, BURST, &mut txb, |out| sent += tx.tx_burst(out) as u64);
        }
        if !txb.is_empty() {
            sent += tx.tx_burst(&mut txb) as u64;
        }
        c.tx += sent;
        c.dropped += txb.len() as u64;
        txb.clear();
    }
    // Drops counted by the queue itself (intake, qdisc enqueue and dequeue), so that
    // rx = tx + dropped + queued. Packets still held are freed when the caller drops `mq`.
    c.dropped += q.stats().total_drops();
    c.queued = q.backlog() as u64;
    c
}

/// The forwarder's own engine (one worker pinned to `--core`, busy-polling) over a fresh
/// net_pcap/net_null pair: what `cakewalk run` does per packet, threads and counters
/// included.
pub(crate) const ENGINE_ROWS: [(&str, Kind); 2] = [
    ("engine fifo+bypass", Kind::Fifo { bypass: true }),
    (
        "engine cake",
        Kind::Cake {
            bypass: false,
            rate: None,
        },
    ),
];

/// Opens `rx_name` -> `tx_name` with `cfg` as the engine's two ports (A receives and
/// forwards to B); the devices stay open for good, as engine rows need.
fn engine_ports(
    eal: &Eal,
    pool: &Mempool,
    rx_name: &str,
    tx_name: &str,
    cfg: &EthDevConfig,
) -> anyhow::Result<forwarder::engine::EnginePorts<Mbuf>> {
    let mut a = EthDev::open(eal, rx_name, cfg, pool)?;
    let mut b = EthDev::open(eal, tx_name, cfg, pool)?;
    let (arx, atx) = a.split()?;
    let (_brx, btx) = b.split()?;
    let rx = |v: Vec<RxQueue>| -> Vec<Box<dyn PortRx<Buf = Mbuf>>> {
        v.into_iter()
            .map(|q| Box::new(q) as Box<dyn PortRx<Buf = Mbuf>>)
            .collect()
    };
    let tx = |v: Vec<TxQueue>| -> Vec<Box<dyn PortTx<Buf = Mbuf>>> {
        v.into_iter()
            .map(|q| Box::new(q) as Box<dyn PortTx<Buf = Mbuf>>)
            .collect()
    };
    Ok(forwarder::engine::EnginePorts {
        rx: vec![rx(arx), Vec::new()],
        tx: vec![tx(atx), tx(btx)],
        forward: vec![Some(1), None],
    })
}

/// Registers each engine worker as a DPDK lcore (mempool caches), as `cakewalk run` does.
/// Registers each worker thread with the EAL and pins worker `i` to `cores[i]`. The
/// pinning is done here rather than by the engine (`pin: false`): the EAL has narrowed
/// the main thread's affinity to its `-l` core, so the engine's check of the cores this
/// process may use would see only that one, while a thread may still move itself to any
/// core of the machine's set (captured before the EAL started).
fn lcore_hook(eal: &Eal, cores: Vec<core_affinity::CoreId>) -> forwarder::engine::WorkerHook {
    let hook_eal = eal.clone();
    std::sync::Arc::new(move |i| {
        if let Some(&core) = cores.get(i) {
            core_affinity::set_for_current(core);
        }
        match hook_eal.register_thread() {
            Ok(g) => Box::new(g) as Box<dyn std::any::Any>,
            Err(_) => Box::new(()),
        }
    })
}

pub(crate) fn engine_row(
    eal: &Eal,
    pool: &Mempool,
    pair: usize,
    kind: Kind,
    args: &Args,
) -> anyhow::Result<f64> {
    use forwarder::app::{build_queues, QueueChoice};
    use forwarder::engine::{self, EngineConfig, IdleMode};
    use std::time::{Duration, Instant};

    let ports = engine_ports(
        eal,
        pool,
        &format!("net_pcap{pair}"),
        &format!("net_null{pair}"),
        &EthDevConfig::default(),
    )?;
    // The queues `cakewalk run` builds (app::build_queues): one MultiQueue per egress port,
    // offered a burst at a time.
    let (choice, bypass) = match kind {
        Kind::Fifo { bypass } => (QueueChoice::Fifo, bypass),
        Kind::Cake { bypass, rate } => (
            QueueChoice::Cake(CakeConfig {
                rate: rate.unwrap_or(Rate::UNLIMITED),
                ..CakeConfig::default()
            }),
            bypass,
        ),
        Kind::Bare | Kind::Parse | Kind::Floor => bail!("engine rows are fifo or cake"),
    };
    let (shapers, _targets) = build_queues::<Mbuf>(
        &choice,
        2,
        1,
        TxQueueOptions {
            bypass,
            ..TxQueueOptions::default()
        },
    )?;
    let ecfg = EngineConfig {
        workers: 1,
        tx_queues: 1,
        idle: IdleMode::Spin,
        duration: "0".into(),
        pin: false,
        ..EngineConfig::default()
    };
    let hook = lcore_hook(eal, vec![core_affinity::CoreId { id: args.core }]);
    let running = engine::start_with_hook(&ecfg, ports, shapers, Some(hook))?;
    std::thread::sleep(Duration::from_millis(200));
    let (t0, s0) = (Instant::now(), running.shared().snapshot().port_tx(1).0);
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let (t1, s1) = (Instant::now(), running.shared().snapshot().port_tx(1).0);
    running.stop_now();
    running.join();
    Ok((s1 - s0) as f64 / (t1 - t0).as_secs_f64() / 1e6)
}

/// The engine with two workers (pinned to the first two bench cores) on a fresh
/// `net_pcap` with two receive queues (each replays the file) -> `net_null` with two TX
/// queues, two TX queues per port, CAKE unlimited with the bypass (`cakewalk run`'s
/// defaults), TX queues chosen by `tx_select`. Returns (Mpps delivered, share of the
/// received frames that were dropped).
pub(crate) fn engine_two_workers_row(
    eal: &Eal,
    pool: &Mempool,
    index: usize,
    tx_select: forwarder::engine::TxSelect,
    machine: &Machine,
    args: &Args,
) -> anyhow::Result<(f64, f64)> {
    use forwarder::app::{build_queues, QueueChoice};
    use forwarder::counters::port;
    use forwarder::engine::{self, EngineConfig, IdleMode};
    use std::time::{Duration, Instant};

    let cfg = EthDevConfig {
        rx_queues: 2,
        tx_queues: 2,
        ..EthDevConfig::default()
    };
    let ports = engine_ports(
        eal,
        pool,
        &format!("net_pcap_w{index}"),
        &format!("net_null_w{index}"),
        &cfg,
    )?;
    let choice = QueueChoice::Cake(CakeConfig {
        rate: Rate::UNLIMITED,
        ..CakeConfig::default()
    });
    let (shapers, _targets) = build_queues::<Mbuf>(&choice, 2, 2, TxQueueOptions::default())?;
    let ecfg = EngineConfig {
        workers: 2,
        tx_queues: 2,
        idle: IdleMode::Spin,
        duration: "0".into(),
        pin: false,
        tx_select,
        ..EngineConfig::default()
    };
    let hook = lcore_hook(eal, machine.cores.iter().take(2).copied().collect());
    let running = engine::start_with_hook(&ecfg, ports, shapers, Some(hook))?;
    std::thread::sleep(Duration::from_millis(200));
    let snap = |r: &engine::Running<Mbuf>| {
        let s = r.shared().snapshot();
        (s.port(0, port::RX_PACKETS), s.port_tx(1).0)
    };
    let (t0, (rx0, tx0)) = (Instant::now(), snap(&running));
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let (t1, (rx1, tx1)) = (Instant::now(), snap(&running));
    running.stop_now();
    running.join();
    let (received, sent) = ((rx1 - rx0) as f64, (tx1 - tx0) as f64);
    let dropped = if received > 0.0 {
        ((received - sent) / received).max(0.0)
    } else {
        0.0
    };
    Ok((sent / (t1 - t0).as_secs_f64() / 1e6, dropped))
}

/// The TX queue choices of the two-worker engine table.
pub(crate) const TX_SELECT_ROWS: [(&str, forwarder::engine::TxSelect); 2] = [
    ("flow-hash", forwarder::engine::TxSelect::FlowHash),
    ("worker", forwarder::engine::TxSelect::Worker),
];

/// The rows of the scaling table, in pktgen's order (the bare loop runs before each).
const THREAD_ROWS: [(&str, Kind); 4] = [
    ("FIFO + bypass", Kind::Fifo { bypass: true }),
    ("FIFO, no bypass", Kind::Fifo { bypass: false }),
    (
        "CAKE + bypass",
        Kind::Cake {
            bypass: true,
            rate: None,
        },
    ),
    (
        "CAKE, no bypass",
        Kind::Cake {
            bypass: false,
            rate: None,
        },
    ),
];

/// One line of the scaling table: medians over the reps.
pub(crate) struct ThreadRow {
    pub(crate) threads: usize,
    pub(crate) name: &'static str,
    pub(crate) mpps: f64,
    pub(crate) ratio: f64,
    /// Nanoseconds per frame per thread above the paired bare run.
    pub(crate) added_ns: f64,
}

/// The scaling table: for each thread count, the bare loop and the four queue rows, each
/// paired with a bare run of the same thread count just before it (ratio and added ns are
/// medians over those pairs; the bare line is the median of all its runs).
pub(crate) fn thread_table(
    eal: &Eal,
    ports: &mut [Ports],
    machine: &Machine,
    args: &Args,
) -> anyhow::Result<Vec<ThreadRow>> {
    let sum = |c: &[Counts]| c.iter().map(Counts::mpps).sum::<f64>();
    let mut samples: Vec<Vec<(f64, f64, f64)>> =
        vec![Vec::new(); machine.threads.len() * (THREAD_ROWS.len() + 1)];
    for rep in 0..args.reps {
        for (ti, &t) in machine.threads.iter().enumerate() {
            let base = ti * (THREAD_ROWS.len() + 1);
            for (ri, (name, kind)) in THREAD_ROWS.iter().enumerate() {
                let bare = sum(&measure_threads(
                    eal,
                    &mut ports[..t],
                    &machine.cores,
                    Kind::Bare,
                    args.seconds,
                )?);
                let c = measure_threads(eal, &mut ports[..t], &machine.cores, *kind, args.seconds)?;
                let m = sum(&c);
                let dropped: u64 = c.iter().map(|c| c.dropped).sum();
                let each: Vec<String> = c.iter().map(|c| format!("{:.2}", c.mpps())).collect();
                eprintln!(
                    "rep {rep} {t} thread(s) {name:<16} {m:>7.2} Mpps (per thread {}; dropped {dropped}; paired bare {bare:.2})",
                    each.join(" + ")
                );
                let per_thread_ns = |mpps: f64| t as f64 * 1e3 / mpps;
                samples[base].push((bare, 1.0, 0.0));
                samples[base + 1 + ri].push((m, m / bare, per_thread_ns(m) - per_thread_ns(bare)));
            }
        }
    }
    let mut out = Vec::new();
    for (ti, &t) in machine.threads.iter().enumerate() {
        for ri in 0..=THREAD_ROWS.len() {
            let s = &samples[ti * (THREAD_ROWS.len() + 1) + ri];
            let col =
                |f: fn(&(f64, f64, f64)) -> f64| median(&mut s.iter().map(f).collect::<Vec<_>>());
            out.push(ThreadRow {
                threads: t,
                name: if ri == 0 {
                    "bare rx->tx"
                } else {
                    THREAD_ROWS[ri - 1].0
                },
                mpps: col(|x| x.0),
                ratio: col(|x| x.1),
                added_ns: col(|x| x.2),
            });
        }
    }
    Ok(out)
}
