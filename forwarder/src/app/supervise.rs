//! Supervising a running engine: starts the workers, serves the control socket and
//! Prometheus, prints live stats each interval, watches for SIGINT/SIGTERM, the duration limit,
//! port faults and worker panics, then drains, prints the final report and turns a failed
//! conservation check into an error.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;

use super::queues::ShaperView;
use super::{build_port_queues, queue_options, PortHealth, QueueChoice, HEALTH_CHECK_EVERY};
use crate::config::{Config, QueueKind};
use crate::control::{self, ControlState};
use crate::counters::synth::SynthStats;
use crate::engine::{self, EngineConfig, EnginePorts, WorkerHook};
use crate::port::PortBuf;
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

/// Runs the engine over `ports` and supervises it until it stops; prints the final report.
pub(super) fn supervise<P: PortBuf>(
    config: &Config,
    ports: EnginePorts<P>,
    synth: Vec<(usize, Arc<SynthStats>)>,
    backend: Vec<(usize, BackendCounters)>,
    health: Vec<(usize, PortHealth)>,
    hook: Option<WorkerHook>,
    prepared: Option<super::circuits::Prepared>,
) -> anyhow::Result<()> {
    let ecfg: EngineConfig = config.engine.clone();
    let scfg: StatsConfig = config.stats.stats_config()?;
    let timing = ecfg.timing()?;
    let interval_ns = crate::config::units::parse_optional_duration_ns(&scfg.interval)
        .context("stats.interval")?
        .unwrap_or(1_000_000_000)
        .max(10_000_000);
    // Each egress port carries one direction, shaped by that direction's settings; with
    // circuits, per circuit under the direction's link rate.
    let (shapers, targets, circuits) = match &config.circuits {
        Some(settings) => {
            let prepared = match prepared {
                Some(p) => p,
                None => super::circuits::prepare(config, settings)?,
            };
            let mut shapers = Vec::new();
            let mut targets = Vec::new();
            let mut queues = [None, None];
            for p in 0..2 {
                let dir = config.egress_direction(p);
                let cfg = prepared
                    .shaper_config(dir)
                    .map_err(anyhow::Error::msg)
                    .context("the circuit shaper")?;
                let (s, t, mq) = super::queues::build_circuit_queues::<P>(
                    &cfg,
                    ecfg.tx_queues,
                    queue_options(config),
                )?;
                shapers.extend(s);
                targets.push(t);
                queues[dir.index()] = Some(mq);
            }
            (shapers, targets, Some(Arc::new(prepared.start(queues))))
        }
        None => {
            let choices: Vec<QueueChoice> = (0..2)
                .map(|p| match config.shaper.queue {
                    QueueKind::Cake => QueueChoice::Cake(config.cake_for_egress(p)),
                    QueueKind::Fifo => QueueChoice::Fifo,
                })
                .collect();
            let (s, t) = build_port_queues::<P>(&choices, ecfg.tx_queues, queue_options(config))?;
            (s, t, None)
        }
    };
    let circuit_metrics =
        crate::stats::CircuitMetrics::parse(&scfg.circuit_metrics).map_err(anyhow::Error::msg)?;
    let tables = circuits.as_ref().map(|rt| engine::CircuitTables {
        table: rt.table(),
        sides: (0..2)
            .map(|p| Some(crate::classify::Side::of(config.egress_direction(p))))
            .collect(),
        unmatched_one_queue: matches!(
            config.circuits.as_ref().map(|c| c.unmatched),
            Some(crate::circuit::Unmatched::Rates { .. })
        ),
    });
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
        circuits: circuits
            .clone()
            .map(|rt| rt as Arc<dyn control::CircuitControl>),
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
    let running = engine::start_with_circuits(&ecfg, ports, shapers, hook, tables)
        .context("starting the engine")?;
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
            let mut r = reporter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .report(elapsed_ns as f64 / 1e9);
            r.circuits = circuits
                .as_ref()
                .map(|c| c.interval_report(circuit_metrics));
            outputs.publish(r, scfg.live, false, &synth)
        },
    );
    let panicked = running.join();
    if let Some(c) = &circuits {
        c.runners_stopped();
    }
    // Let every queue publish its final counters: a burst a worker offered last may have
    // changed them (say, the qdisc dropped part of it) with no run after it. A budget of 0
    // moves and dequeues nothing; what waits in an intake is counted as queued.
    let now = crate::clock::now_ns();
    for s in &all_shapers {
        let mut out = Vec::new();
        let _ = s.run(now, 0, &mut out, &mut |_o: &mut Vec<P>| {});
        drop(out);
    }
    let mut r = reporter
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .final_report(started.elapsed().as_secs_f64());
    r.circuits = circuits
        .as_ref()
        .map(|c| c.interval_report(circuit_metrics));
    let r = outputs.publish(r, false, true, &synth);
    // From here on `stats` answers with the final report.
    *state.fresh.lock().unwrap_or_else(|e| e.into_inner()) = None;
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
    /// The latest report, for the Prometheus endpoint to render when scraped.
    latest_prom: Arc<Mutex<Option<Arc<Report>>>>,
    json: Option<JsonLines>,
}

/// The `--stats-json` file: one line per report, each written whole or not at all. A write
/// that fails (a full disk) is said once on stderr and the run goes on; the partial line is
/// cut off, so that the file stays lines of JSON, and the next line that fits is written
/// (and said).
struct JsonLines {
    path: PathBuf,
    file: std::fs::File,
    /// The length of the whole lines written.
    good_len: u64,
    failing: bool,
}

impl JsonLines {
    fn write(&mut self, line: &str) {
        use std::io::{Seek, SeekFrom};
        // Written as it is, not copied to add the newline (a line can be tens of MB); a
        // failure in either write is cut back to the last whole line below.
        let written = self
            .file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.write_all(b"\n"));
        match written {
            Ok(()) => {
                self.good_len += line.len() as u64 + 1;
                if std::mem::take(&mut self.failing) {
                    crate::log_line!(
                        "stats: writing the JSON lines to '{}' works again",
                        self.path.display()
                    );
                }
            }
            Err(e) => {
                // Not a regular file (a pipe, /dev/full): nothing to cut.
                if self.file.set_len(self.good_len).is_ok() {
                    let _ = self.file.seek(SeekFrom::Start(self.good_len));
                }
                if !std::mem::replace(&mut self.failing, true) {
                    crate::log_line!(
                        "warning: writing the stats JSON lines to '{}' failed: {e}; the run goes \
                         on, and each interval's line is lost until one can be written",
                        self.path.display()
                    );
                }
            }
        }
    }
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
            Some(p) => Some(JsonLines {
                path: p.clone(),
                file: std::fs::File::create(p)
                    .with_context(|| format!("creating {}", p.display()))?,
                good_len: 0,
                failing: false,
            }),
            None => None,
        };
        Ok(Outputs {
            latest_text: Arc::new(Mutex::new(format!("{not_yet}\n"))),
            latest_json: Arc::new(Mutex::new(format!(
                "{}\n",
                serde_json::json!({ "report": null, "error": not_yet })
            ))),
            latest_prom: Arc::new(Mutex::new(None)),
            json,
        })
    }

    /// Publishes `r` everywhere; with `live`, also the live line (with the synth sink's
    /// delays of the interval, which it then resets). Nothing is rendered that nobody
    /// reads: the Prometheus text when scraped, the text and JSON for `ctl stats` only for
    /// the final report (`for_control`; while the forwarder runs `ctl stats` builds its
    /// own), the JSON line only for a `--stats-json` file. With every circuit's series
    /// (`circuit_metrics = "all"`) at 100 000 circuits under 50 500 nodes the Prometheus
    /// text is 130 MB, the JSON 58 MB and the text 27 MB per interval, and rendering them
    /// all kept this thread busy.
    fn publish(
        &mut self,
        r: Report,
        live: bool,
        for_control: bool,
        synth: &[(usize, Arc<SynthStats>)],
    ) -> Arc<Report> {
        let r = Arc::new(r);
        if self.json.is_some() || for_control {
            let line = serde_json::to_string(&*r).unwrap_or_default();
            if let Some(j) = self.json.as_mut() {
                j.write(&line);
            }
            if for_control {
                *self.latest_json.lock().unwrap_or_else(|e| e.into_inner()) = format!("{line}\n");
            }
        }
        if for_control {
            *self.latest_text.lock().unwrap_or_else(|e| e.into_inner()) = r.final_text();
        }
        *self.latest_prom.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&r));
        if live {
            let delay = synth.first().map(|(_, s)| {
                let mut h = s.delay_interval.lock().unwrap_or_else(|e| e.into_inner());
                let p = crate::stats::percentiles(&h);
                h.reset();
                p
            });
            crate::log_line!("{}", r.live_line(delay));
        }
        r
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
        let page = prometheus::page_of(outputs.latest_prom.clone());
        let h = prometheus::serve(addr, scfg.prometheus_public, page, Arc::clone(aux_stop))?;
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
    mut report: impl FnMut(u64) -> Arc<Report>,
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
