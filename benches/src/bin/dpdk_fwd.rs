//! `dpdk_fwd`: single-core forwarding throughput on DPDK virtual devices, as ratios to a
//! bare rx->tx loop measured in the same process on the same port bindings (docs/design.md,
//! "Performance goals": G1, G2, G4, G5).
//!
//! Frames: 60-byte IPv4/UDP frames (64 bytes on the wire with the FCS) over `--flows` flows,
//! written to a pcap file and replayed forever by `net_pcap,rx_pcap=FILE,infinite_rx=1`;
//! transmitted to `net_null`, which frees them. One EAL, one core (`-l CORE`), burst 32.
//!
//! Rows, each `--reps` times interleaved (so drift hits every row alike), median reported:
//! * `bare`: rx_burst -> tx_burst, nothing else;
//! * `bare + parse`: the bare loop plus `wire::parse_into` of every frame, a burst at a time
//!   into the burst's meta array, as the engine parses when it needs every meta (CAKE,
//!   several TX queues);
//! * `fifo+bypass` / `fifo`: offer the burst to one `qdisc::mq::TxQueue`
//!   (`enqueue_burst`, as the engine does with one TX queue) over the FIFO baseline,
//!   with and without the enqueue bypass; frames are parsed only when the queue needs their
//!   meta (queued, or CAKE), so a burst that bypasses the idle FIFO is never parsed;
//! * `cake` / `cake+bypass`: the same with CAKE (diffserv3, triple-isolate), unlimited rate;
//! * `cake shaped`: CAKE shaped to 90 % of what shaped CAKE carried in calibration runs
//!   (bits of frame length), also reporting delivered/configured;
//! * `drr floor`: the `cake` row's path with `qdisc::testing::DrrFloor` (CAKE's DRR++ skeleton
//!   and nothing else) in place of CAKE: the best ratio any CAKE could reach on this path;
//! * `engine ...`: the forwarder's engine itself, one pinned worker, on fresh vdev pairs, with
//!   the queues `cakewalk run` builds (`app::build_queues`).
//!
//! Every row but `bare` is paired with a bare run just before it; its ratio is the median
//! of those pairs.
//!
//! Then the thread scaling table (pktgen's rows on real vdevs), for each count of
//! `--threads` (default 1 and 2, at most the cores): each thread is its own pinned lcore with
//! its own `net_pcap` -> `net_null` pair and pool, and feeds its own TX queue of one
//! `MultiQueue` (FIFO or unlimited CAKE, with and without bypass); Mpps is summed over the
//! threads and each row is paired with a bare run of the same thread count.
//!
//! The clock is the engine's (the TSC between monotonic-clock readings), read once per burst,
//! as in the engine. Needs root and hugepages
//! (`hugepage-setup reserve --pages 512`), or `--no-huge`.
//!
//! Run: `cargo run --release -p cakewalk-benches --features dpdk --bin dpdk_fwd -- --seconds 3`

#[cfg(not(feature = "dpdk"))]
fn main() -> std::process::ExitCode {
    eprintln!(
        "error: dpdk_fwd was built without DPDK; build with `--features dpdk` (needs libdpdk-dev)"
    );
    std::process::ExitCode::FAILURE
}

#[cfg(feature = "dpdk")]
fn main() -> std::process::ExitCode {
    match imp::run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "dpdk")]
mod imp {
    use std::net::{IpAddr, Ipv4Addr};
    use std::path::PathBuf;

    use anyhow::{bail, Context};
    use clap::Parser;
    use forwarder::port::dpdk::{Eal, EthDev, EthDevConfig, Mbuf, Mempool, RxQueue, TxQueue};
    use forwarder::port::{PortBuf, PortRx, PortTx};
    use qdisc::cake::{Cake, CakeConfig};
    use qdisc::fifo::{Fifo, FifoConfig};
    use qdisc::mq::{MqQdisc, MultiQueue, TxQueueOptions};
    use qdisc::testing::DrrFloor;
    use qdisc::Rate;

    const BURST: usize = 32;

    #[derive(Parser, Debug)]
    #[command(
        about = "single-core DPDK forwarding throughput: cakewalk paths vs a bare rx->tx loop"
    )]
    struct Args {
        /// Seconds per row and repetition.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Repetitions (median reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Distinct UDP flows in the replayed file.
        #[arg(long, default_value_t = 1024)]
        flows: u32,
        /// Frame length without FCS.
        #[arg(long, default_value_t = 60)]
        frame: usize,
        /// Core to run on (EAL `-l`).
        #[arg(long, default_value_t = 1)]
        core: usize,
        /// Run without hugepages (slower memory; for machines without them).
        #[arg(long)]
        no_huge: bool,
        /// Print the table as JSON too.
        #[arg(long)]
        json: bool,
        /// Rewrite the `dpdk` section of BENCHMARKS.md with this run's table.
        #[arg(long)]
        write: bool,
        /// The BENCHMARKS.md that `--write` updates (default: the workspace's).
        #[arg(long)]
        benchmarks: Option<PathBuf>,
        /// Run only this row once (bare, parse, fifo+bypass, fifo, cake, cake+bypass, floor,
        /// engine-fifo+bypass, engine-cake), e.g. under `perf record`.
        #[arg(long)]
        only: Option<String>,
        /// Thread counts for the scaling table, comma-separated: each thread is its own pinned
        /// lcore with its own net_pcap -> net_null pair and its own TX queue (at most the core
        /// count). Default: 1 and 2, as far as the machine has cores; `0` skips the table.
        #[arg(long, value_delimiter = ',')]
        threads: Option<Vec<usize>>,
        /// Run a few seconds in total (for the test suite): short rows, one repetition.
        #[arg(long)]
        smoke: bool,
    }

    /// A row's per-packet work.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        Bare,
        /// The bare loop plus `wire::parse_into` of every frame: what parsing alone costs.
        Parse,
        Fifo {
            bypass: bool,
        },
        Cake {
            bypass: bool,
            rate: Option<Rate>,
        },
        /// The `cake` row with `DrrFloor` in CAKE's place.
        Floor,
    }

    struct Ports {
        rx: RxQueue,
        tx: TxQueue,
    }

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
    struct Counts {
        rx: u64,
        tx: u64,
        /// Every drop: the TX port's refusals, the intake's and the qdisc's (at enqueue and
        /// by its AQM at dequeue).
        dropped: u64,
        /// Still in the queue at the end (freed with it).
        queued: u64,
        ns: u64,
    }

    impl Counts {
        fn mpps(&self) -> f64 {
            self.tx as f64 / self.ns.max(1) as f64 * 1e3
        }
    }

    /// Writes a classic pcap file (microsecond timestamps, Ethernet link type) by hand: the
    /// format is 24 header bytes plus 16 per record, not worth a dependency here.
    fn write_pcap(path: &std::path::Path, flows: u32, frame: usize) -> anyhow::Result<()> {
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
    fn measure(ports: &mut Ports, kind: Kind, seconds: f64) -> anyhow::Result<Counts> {
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

    fn bare(ports: &mut Ports, seconds: f64, parse: bool) -> Counts {
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
    const ENGINE_ROWS: [(&str, Kind); 2] = [
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

    fn engine_row(
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
    fn engine_two_workers_row(
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
    const TX_SELECT_ROWS: [(&str, forwarder::engine::TxSelect); 2] = [
        ("flow-hash", forwarder::engine::TxSelect::FlowHash),
        ("worker", forwarder::engine::TxSelect::Worker),
    ];

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// What `run` learns about the machine before EAL init pins this thread to one core
    /// (after which it would count one core).
    struct Machine {
        line: String,
        /// Thread counts of the scaling table (empty: no table).
        threads: Vec<usize>,
        /// The cores bench threads are pinned to, `--core` first.
        cores: Vec<core_affinity::CoreId>,
    }

    pub(super) fn run() -> anyhow::Result<()> {
        let mut args = Args::parse();
        if args.smoke {
            args.seconds = 0.2;
            args.reps = 1;
        }
        if args.reps == 0 || args.seconds <= 0.0 {
            bail!("--reps and --seconds must be positive");
        }
        let mut cores = core_affinity::get_core_ids().unwrap_or_default();
        cores.sort_by_key(|c| (c.id != args.core, c.id));
        if cores.first().is_some_and(|c| c.id != args.core) {
            bail!(
                "--core {}: not one of this process's cores ({})",
                args.core,
                cores
                    .iter()
                    .map(|c| c.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let n = cores.len().max(1);
        // More threads than cores would time-share a core and measure the scheduler.
        let threads = match &args.threads {
            None => (1..=2.min(n)).collect(),
            Some(t) if t == &[0] => Vec::new(),
            Some(t) => {
                if let Some(&bad) = t.iter().find(|&&t| t == 0 || t > n) {
                    bail!(
                        "--threads {bad}: this machine has {n} core{}; use 1 to {n} threads \
                         (or --threads 0 to skip the scaling table)",
                        if n == 1 { "" } else { "s" }
                    );
                }
                t.clone()
            }
        };
        let pcap: PathBuf =
            std::env::temp_dir().join(format!("dpdk_fwd-{}.pcap", std::process::id()));
        write_pcap(&pcap, args.flows, args.frame)?;
        let machine = Machine {
            line: cakewalk_benches::report::machine_line(),
            threads,
            cores,
        };
        let result = bench(&args, &pcap, &machine);
        let _ = std::fs::remove_file(&pcap);
        result
    }

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
    struct ThreadRow {
        threads: usize,
        name: &'static str,
        mpps: f64,
        ratio: f64,
        /// Nanoseconds per frame per thread above the paired bare run.
        added_ns: f64,
    }

    /// The scaling table: for each thread count, the bare loop and the four queue rows, each
    /// paired with a bare run of the same thread count just before it (ratio and added ns are
    /// medians over those pairs; the bare line is the median of all its runs).
    fn thread_table(
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
                    let c =
                        measure_threads(eal, &mut ports[..t], &machine.cores, *kind, args.seconds)?;
                    let m = sum(&c);
                    let dropped: u64 = c.iter().map(|c| c.dropped).sum();
                    let each: Vec<String> = c.iter().map(|c| format!("{:.2}", c.mpps())).collect();
                    eprintln!(
                        "rep {rep} {t} thread(s) {name:<16} {m:>7.2} Mpps (per thread {}; dropped {dropped}; paired bare {bare:.2})",
                        each.join(" + ")
                    );
                    let per_thread_ns = |mpps: f64| t as f64 * 1e3 / mpps;
                    samples[base].push((bare, 1.0, 0.0));
                    samples[base + 1 + ri].push((
                        m,
                        m / bare,
                        per_thread_ns(m) - per_thread_ns(bare),
                    ));
                }
            }
        }
        let mut out = Vec::new();
        for (ti, &t) in machine.threads.iter().enumerate() {
            for ri in 0..=THREAD_ROWS.len() {
                let s = &samples[ti * (THREAD_ROWS.len() + 1) + ri];
                let col = |f: fn(&(f64, f64, f64)) -> f64| {
                    median(&mut s.iter().map(f).collect::<Vec<_>>())
                };
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

    /// The EAL's arguments: the bench's core, no PCI probe, and the null/pcap vdev pairs every
    /// row needs (the inline rows', one per extra scaling thread, one per engine row and rep,
    /// and the two-worker rows' when `two_workers`).
    fn eal_args(
        args: &Args,
        pcap: &std::path::Path,
        max_threads: usize,
        two_workers: bool,
    ) -> Vec<String> {
        let mut eal_args = vec![
            "-l".to_string(),
            args.core.to_string(),
            "--log-level=lib.eal:error".into(),
            // Never probe the machine's own PCI NICs: only the two vdevs take part.
            "--no-pci".into(),
            format!("--vdev=net_pcap0,rx_pcap={},infinite_rx=1", pcap.display()),
            "--vdev=net_null0".into(),
        ];
        // Threads 2.. of the scaling table each get their own pair (thread 1 uses pair 0).
        for k in 1..max_threads {
            eal_args.push(format!(
                "--vdev=net_pcap_t{k},rx_pcap={},infinite_rx=1",
                pcap.display()
            ));
            eal_args.push(format!("--vdev=net_null_t{k}"));
        }
        // Engine rows take their ports over for good, so each gets its own fresh pair.
        for i in 1..=ENGINE_ROWS.len() * args.reps {
            eal_args.push(format!(
                "--vdev=net_pcap{i},rx_pcap={},infinite_rx=1",
                pcap.display()
            ));
            eal_args.push(format!("--vdev=net_null{i}"));
        }
        // The two-worker engine rows: two receive queues (each replays the file) and two TX
        // queues per device, a fresh pair per row and rep.
        if two_workers {
            for i in 0..TX_SELECT_ROWS.len() * args.reps {
                eal_args.push(format!(
                    "--vdev=net_pcap_w{i},rx_pcap={p},rx_pcap={p},tx_pcap=/dev/null,tx_pcap=/dev/null,infinite_rx=1",
                    p = pcap.display()
                ));
                eal_args.push(format!("--vdev=net_null_w{i}"));
            }
        }
        if args.no_huge {
            eal_args.extend(["--no-huge", "--no-shconf", "-m", "1024"].map(String::from));
        } else {
            eal_args.push("--in-memory".into());
        }
        eal_args
    }

    /// The rate of the shaped row: 90 % of what shaped CAKE can carry here, in bits of frame
    /// length (CAKE's raw mode), so that row measures the shaper rather than a CPU that cannot
    /// keep up. Returns that rate and the packet rate it stands for.
    fn calibrate(ports: &mut Ports, args: &Args) -> anyhow::Result<(Rate, f64)> {
        // Calibration: the shaped row asks for 90 % of what shaped CAKE can carry here, in
        // bits of frame length (CAKE's raw mode), so that row measures the shaper rather than
        // a CPU that cannot keep up. Shaped CAKE costs more per packet than unshaped CAKE
        // (a standing queue: bulk flows, refill visits, COBALT at work), so start from 90 % of
        // the unshaped rate and, while the shaped run falls short of its rate, step down to
        // 90 % of what it delivered.
        let unshaped = measure(
            ports,
            Kind::Cake {
                bypass: false,
                rate: None,
            },
            args.seconds,
        )?;
        let to_rate = |pps: f64| Rate::from_bits_per_sec((pps * args.frame as f64 * 8.0) as u64);
        let mut target_pps = unshaped.mpps() * 1e6 * 0.9;
        for _ in 0..4 {
            // A rate of 0 would mean "unlimited": never let the shaped row silently become one.
            if target_pps < 1000.0 {
                bail!(
                    "CAKE carried {target_pps:.0} packets/s in calibration; is the TX port sending?"
                );
            }
            let kind = Kind::Cake {
                bypass: false,
                rate: Some(to_rate(target_pps)),
            };
            let delivered = measure(ports, kind, args.seconds)?.mpps() * 1e6;
            eprintln!(
                "calibration: shaped to {:.2} Mpps, delivered {:.2} Mpps",
                target_pps / 1e6,
                delivered / 1e6
            );
            if delivered >= 0.98 * target_pps {
                break;
            }
            target_pps = 0.9 * delivered;
        }
        if target_pps < 1000.0 {
            bail!("CAKE carried {target_pps:.0} packets/s in calibration; is the TX port sending?");
        }
        Ok((to_rate(target_pps), target_pps))
    }

    /// Rewrites the dpdk section of BENCHMARKS.md: the rows (`names`, median Mpps and
    /// ratio to bare), the goals line, and the thread-scaling and two-worker tables when
    /// they were measured.
    fn write_section(
        args: &Args,
        machine: &Machine,
        (names, med, rat): (&[String], &[f64], &[f64]),
        goals: &str,
        scaling: Option<&cakewalk_benches::report::Table>,
        max_threads: usize,
        two_workers: Option<&cakewalk_benches::report::Table>,
    ) -> anyhow::Result<()> {
        let mut t = cakewalk_benches::report::Table::new(&[
            "row",
            "Mpps (median)",
            "ns/packet",
            "ratio to bare",
        ]);
        for i in 0..names.len() {
            t.push(vec![
                names[i].clone(),
                format!("{:.2}", med[i]),
                format!("{:.1}", 1e3 / med[i]),
                format!("{:.3}", rat[i]),
            ]);
        }
        let body = format!(
            "## DPDK forwarding, one core (`benches/src/bin/dpdk_fwd.rs`)\n\n\
             dpdk_fwd: {} ({}); load {}; {} s x {} reps per row, interleaved; {}-byte frames ({} on the wire), {} flows, burst {BURST}; \
             `net_pcap,infinite_rx=1` -> `net_null` on one pinned core\n\n\
             Command: `sudo hugepage-setup reserve --pages 512 && cargo run --release -p cakewalk-benches --features dpdk --bin dpdk_fwd -- --seconds {} --reps {} --write`\n\n{}\n\
             Inline rows do the engine's per-packet work with one TX queue in one loop \
             (`TxQueue::enqueue_burst`, which parses with `wire::parse_into` only when the \
             queue needs a frame's meta, then a tx burst); engine rows run the forwarder's engine \
             itself (one busy-polling worker, queues from `app::build_queues`). The shaped row asks \
             for 90 % of what shaped CAKE carried in calibration runs. `drr floor` is the `cake` row \
             with CAKE's DRR++ skeleton alone (`qdisc::testing::DrrFloor`) in its place: no CAKE can \
             beat it. Each ratio is the median over the reps of the row's rate over a bare run made \
             just before it. Goals (docs/design.md), this run: {goals}. The machine is shared: compare ratios, not runs.{}",
            machine.line,
            cakewalk_benches::report::utc_now(),
            cakewalk_benches::report::load_average(),
            args.seconds,
            args.reps,
            args.frame,
            args.frame + 4,
            args.flows,
            args.seconds,
            args.reps,
            t.to_markdown(),
            match scaling {
                None => String::new(),
                Some(st) => format!(
                    "\n\n### Thread scaling on DPDK vdevs\n\n\
                     Threads {:?}, each its own pinned lcore (cores {}) with its own \
                     `net_pcap,infinite_rx=1` -> `net_null` pair, mbuf pool and TX queue of one \
                     `qdisc::mq::MultiQueue` (CAKE unlimited). Mpps is summed over the threads; \
                     ratios and added ns per frame per thread are medians against a bare run of \
                     the same thread count made just before each row.\n\n{}",
                    machine.threads,
                    machine.cores[..max_threads]
                        .iter()
                        .map(|c| c.id.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    st.to_markdown().trim_end()
                ),
            },
        );
        let body = if let Some(wt) = two_workers {
            format!(
                "{body}\n\n### The engine with two workers: TX queue choice\n\n\
                 The engine, two busy-polling workers, on a `net_pcap` with two receive queues \
                 -> `net_null` with two TX queues, CAKE unlimited with the bypass. `flow-hash` \
                 picks a frame's TX queue by flow hash, so about half go to the other worker's \
                 queue (its intake or hand-off ring; a full one drops); `worker` sends on the \
                 worker's own queue (Linux's XPS). Dropped = 1 - delivered / received; medians \
                 over {} reps.\n\n{}",
                args.reps,
                wt.to_markdown().trim_end()
            )
        } else {
            body
        };
        let path = args.benchmarks.clone().unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md")
        });
        cakewalk_benches::report::update_section(&path, "dpdk", &body)
            .with_context(|| format!("updating {}", path.display()))?;
        println!("wrote the dpdk section of {}", path.display());
        Ok(())
    }

    fn bench(args: &Args, pcap: &std::path::Path, machine: &Machine) -> anyhow::Result<()> {
        let max_threads = machine.threads.iter().copied().max().unwrap_or(1);
        let two_workers = machine.cores.len() >= 2;
        let eal_args = eal_args(args, pcap, max_threads, two_workers);
        let eal = Eal::init(&eal_args)?;
        let pool = Mempool::new(&eal, "bench", 65535, 0)?;
        let cfg = EthDevConfig::default();
        let mut rx_dev = EthDev::open(&eal, "net_pcap0", &cfg, &pool)?;
        let mut tx_dev = EthDev::open(&eal, "net_null0", &cfg, &pool)?;
        let (mut rxs, _) = rx_dev.split()?;
        let (_, mut txs) = tx_dev.split()?;
        let mut all_ports = vec![Ports {
            rx: rxs.pop().context("one rx queue")?,
            tx: txs.pop().context("one tx queue")?,
        }];
        for k in 1..max_threads {
            // Its own pool (kept alive by the devices), so threads share no mempool either.
            let pool = Mempool::new(&eal, &format!("bench_t{k}"), 16383, 0)?;
            let mut rx_dev = EthDev::open(&eal, &format!("net_pcap_t{k}"), &cfg, &pool)?;
            let mut tx_dev = EthDev::open(&eal, &format!("net_null_t{k}"), &cfg, &pool)?;
            let (mut rxs, _) = rx_dev.split()?;
            let (_, mut txs) = tx_dev.split()?;
            all_ports.push(Ports {
                rx: rxs.pop().context("one rx queue")?,
                tx: txs.pop().context("one tx queue")?,
            });
        }
        let ports = &mut all_ports[0];
        // Warm up caches, the pcap replay and the branch predictors.
        let _ = measure(ports, Kind::Bare, 0.3)?;
        if let Some(only) = &args.only {
            if let Some((_, kind)) = ENGINE_ROWS
                .iter()
                .find(|(n, _)| n.replace(' ', "-") == *only)
            {
                let m = engine_row(&eal, &pool, 1, *kind, args)?;
                println!("{only}: {m:.2} Mpps ({:.1} ns/pkt)", 1e3 / m);
                return Ok(());
            }
            let kind = match only.as_str() {
                "bare" => Kind::Bare,
                "parse" => Kind::Parse,
                "fifo+bypass" => Kind::Fifo { bypass: true },
                "fifo" => Kind::Fifo { bypass: false },
                "cake" => Kind::Cake { bypass: false, rate: None },
                "cake+bypass" => Kind::Cake { bypass: true, rate: None },
                "floor" => Kind::Floor,
                other => bail!("--only '{other}' is not a row; try bare, parse, fifo+bypass, fifo, cake, cake+bypass, floor, engine-fifo+bypass or engine-cake"),
            };
            let c = measure(ports, kind, args.seconds)?;
            println!(
                "{only}: {:.2} Mpps ({:.1} ns/pkt)",
                c.mpps(),
                1e3 / c.mpps()
            );
            return Ok(());
        }
        const CAKE: usize = 4; // index of the unshaped, no-bypass CAKE row below
        const SHAPED: usize = 6; // index of the shaped CAKE row
        const FLOOR: usize = 7; // index of the DRR++ floor row

        let (rate, target_pps) = calibrate(ports, args)?;
        let rows: Vec<(String, Kind)> = vec![
            ("bare rx->tx".into(), Kind::Bare),
            ("bare + parse".into(), Kind::Parse),
            ("fifo+bypass".into(), Kind::Fifo { bypass: true }),
            ("fifo".into(), Kind::Fifo { bypass: false }),
            (
                "cake".into(),
                Kind::Cake {
                    bypass: false,
                    rate: None,
                },
            ),
            (
                "cake+bypass".into(),
                Kind::Cake {
                    bypass: true,
                    rate: None,
                },
            ),
            (
                format!("cake shaped {:.0} Mbit", rate.bits_per_sec() as f64 / 1e6),
                Kind::Cake {
                    bypass: false,
                    rate: Some(rate),
                },
            ),
            ("drr floor".into(), Kind::Floor),
        ];
        // Each row (but the first) is paired with a bare run right before it, and its ratio
        // to bare is the median of those pairs: load from other processes on this shared
        // machine then hits both halves of a pair alike.
        let n_rows = rows.len() + ENGINE_ROWS.len();
        let mut mpps: Vec<Vec<f64>> = vec![Vec::new(); n_rows];
        let mut ratio: Vec<Vec<f64>> = vec![Vec::new(); n_rows];
        let mut pair = 0;
        for rep in 0..args.reps {
            for (i, (name, kind)) in rows.iter().enumerate() {
                let bare = if i == 0 {
                    None
                } else {
                    Some(measure(ports, Kind::Bare, args.seconds)?.mpps())
                };
                let c = measure(ports, *kind, args.seconds)?;
                eprintln!(
                    "rep {rep} {name:<22} {:>7.2} Mpps (rx {} tx {} dropped {} queued {}; paired bare {bare:.2?})",
                    c.mpps(),
                    c.rx,
                    c.tx,
                    c.dropped,
                    c.queued
                );
                mpps[i].push(c.mpps());
                ratio[i].push(bare.map_or(1.0, |b| c.mpps() / b));
            }
            for (j, (name, kind)) in ENGINE_ROWS.iter().enumerate() {
                pair += 1;
                let bare = measure(ports, Kind::Bare, args.seconds)?.mpps();
                let m = engine_row(&eal, &pool, pair, *kind, args)?;
                eprintln!("rep {rep} {name:<22} {m:>7.2} Mpps (paired bare {bare:.2})");
                mpps[rows.len() + j].push(m);
                ratio[rows.len() + j].push(m / bare);
            }
        }
        let scaling = thread_table(&eal, &mut all_ports, machine, args)?;
        // Two workers, by TX queue choice: medians over the reps (each rep runs both rows).
        let mut two: Vec<(Vec<f64>, Vec<f64>)> =
            vec![(Vec::new(), Vec::new()); TX_SELECT_ROWS.len()];
        if two_workers {
            let mut index = 0;
            for rep in 0..args.reps {
                for (k, (name, sel)) in TX_SELECT_ROWS.iter().enumerate() {
                    let (m, dropped) =
                        engine_two_workers_row(&eal, &pool, index, *sel, machine, args)?;
                    index += 1;
                    eprintln!(
                        "rep {rep} engine 2 workers tx_select {name:<10} {m:>7.2} Mpps, {:.1} % dropped",
                        dropped * 100.0
                    );
                    two[k].0.push(m);
                    two[k].1.push(dropped);
                }
            }
        }
        let two: Vec<(f64, f64)> = two
            .iter_mut()
            .map(|(m, d)| {
                if m.is_empty() {
                    (0.0, 0.0)
                } else {
                    (median(m), median(d))
                }
            })
            .collect();
        let med: Vec<f64> = mpps.iter_mut().map(|r| median(r)).collect();
        let rat: Vec<f64> = ratio.iter_mut().map(|r| median(r)).collect();
        let names: Vec<String> = rows
            .iter()
            .map(|(n, _)| n.clone())
            .chain(ENGINE_ROWS.iter().map(|(n, _)| n.to_string()))
            .collect();
        let engine = rows.len();
        let shaped_med = med[SHAPED];
        println!(
            "dpdk_fwd: 1 core, {}-byte frames ({} on the wire), {} flows, burst {BURST}, net_pcap(infinite_rx) -> net_null, {} s x {} reps, median; ratio = median of (row / bare run just before it)",
            args.frame,
            args.frame + 4,
            args.flows,
            args.seconds,
            args.reps
        );
        println!(
            "{:<28} {:>8} {:>10} {:>8}",
            "row", "Mpps", "ns/pkt", "ratio"
        );
        for i in 0..n_rows {
            println!(
                "{:<28} {:>8.2} {:>10.1} {:>8.3}",
                names[i],
                med[i],
                1e3 / med[i],
                rat[i]
            );
        }
        let goals = format!(
            "G1 FIFO+bypass/bare {:.3} inline, {:.3} engine (>= 0.80); G2 FIFO+bypass/FIFO {:.3} (>= 1.20); \
             G4 CAKE/DRR++ floor {:.3} (>= 0.65; CAKE/bare {:.3} inline, {:.3} engine); \
             G5 CAKE+bypass/CAKE {:.3} (>= 1.3); CAKE shaped delivered/configured {:.4}",
            rat[2],
            rat[engine],
            rat[2] / rat[3],
            rat[CAKE] / rat[FLOOR],
            rat[CAKE],
            rat[engine + 1],
            rat[CAKE + 1] / rat[CAKE],
            shaped_med * 1e6 / target_pps
        );
        println!("{goals}");
        let mut st = cakewalk_benches::report::Table::new(&[
            "threads",
            "row",
            "Mpps (median, all threads)",
            "ratio to bare",
            "added ns/frame/thread",
        ]);
        if !scaling.is_empty() {
            println!(
                "scaling: each thread its own pinned lcore, net_pcap -> net_null pair and TX queue; Mpps summed over threads"
            );
            println!(
                "{:>7} {:<20} {:>8} {:>8} {:>12}",
                "threads", "row", "Mpps", "ratio", "added ns/thr"
            );
        }
        for r in &scaling {
            println!(
                "{:>7} {:<20} {:>8.2} {:>8.3} {:>12.1}",
                r.threads, r.name, r.mpps, r.ratio, r.added_ns
            );
            st.push(vec![
                r.threads.to_string(),
                r.name.to_string(),
                format!("{:.2}", r.mpps),
                format!("{:.3}", r.ratio),
                format!("{:.1}", r.added_ns),
            ]);
        }
        let mut wt = cakewalk_benches::report::Table::new(&[
            "engine, 2 workers",
            "Mpps delivered (median)",
            "dropped (median)",
        ]);
        if two_workers {
            println!("engine, 2 workers, 2 RX + 2 TX queues, CAKE unlimited + bypass:");
            for ((name, _), (m, d)) in TX_SELECT_ROWS.iter().zip(&two) {
                println!(
                    "  tx_select {name:<10} {m:>7.2} Mpps, {:.1} % dropped",
                    d * 100.0
                );
                wt.push(vec![
                    format!("tx_select = \"{name}\""),
                    format!("{m:.2}"),
                    format!("{:.1} %", d * 100.0),
                ]);
            }
        }
        if args.write {
            write_section(
                args,
                machine,
                (&names, &med, &rat),
                &goals,
                (!scaling.is_empty()).then_some(&st),
                max_threads,
                two_workers.then_some(&wt),
            )?;
        }
        if args.json {
            let rows: Vec<serde_json::Value> = (0..n_rows)
                .map(|i| serde_json::json!({"row": names[i], "mpps": med[i], "ratio": rat[i]}))
                .collect();
            let threads: Vec<serde_json::Value> = scaling
                .iter()
                .map(|r| {
                    serde_json::json!({"threads": r.threads, "row": r.name, "mpps": r.mpps,
                        "ratio": r.ratio, "added_ns_per_frame_per_thread": r.added_ns})
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({"frame": args.frame, "flows": args.flows, "rows": rows,
                    "threads": threads})
            );
        }
        Ok(())
    }
}
