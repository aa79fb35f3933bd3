//! `soak`: runs the real forwarder under traffic for a set time while a seeded chaos driver
//! changes everything an operator, a client or a network can change under it, and checks
//! that it keeps its promises throughout:
//!
//! - it stays live: a stats report every interval, counters that never go down, packets
//!   received all along, and a queue shaped at 1 Mbit/s or more never goes seconds without
//!   sending (a raised rate takes effect at once);
//! - every control request is answered within the reply deadline, whatever other clients do;
//! - SIGTERM ends it within `engine.drain_timeout` plus one second, exit status 0;
//! - conservation holds at exit (received = transmitted + dropped + queued), and the control
//!   socket is removed.
//!
//! The run is a series of cycles, one forwarder each: the built-in synth ports, and (with
//! `--lab SUFFIX`, the namespaces `scripts/lab/setup SUFFIX` made) AF_PACKET between veths
//! with a second cakewalk generating traffic into it; one or two workers, one or two TX
//! queues. The chaos is [`chaos::Action`]: rate flips from 1 kbit to 10 gbit, diffserv,
//! flow-mode and overhead changes, stats, garbage, SIGHUP with valid and broken configs, link
//! down/up, and stuck, trickling, non-reading and herding control clients. Everything is
//! bounded in count and time. The seed is printed first; `--seed` replays the same actions.
//!
//!   soak --minutes 30 [--lab SUFFIX] [--seed N]      (scripts/soak wraps this)

mod chaos;
mod monitor;
mod rng;

use anyhow::{bail, Context, Result};
use chaos::{Action, Chaos, Journal, Target};
use clap::Parser;
use monitor::Monitor;
use rng::Rng;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Soak the forwarder under traffic and chaos; exit 1 when a promise broke.
#[derive(Debug, Parser)]
struct Args {
    /// How long to soak, in minutes.
    #[arg(long, default_value_t = 5.0)]
    minutes: f64,
    /// The test command's smoke mode: ninety seconds.
    #[arg(long)]
    smoke: bool,
    /// Seed of the chaos (printed at start; give it to replay a run).
    #[arg(long)]
    seed: Option<u64>,
    /// The cakewalk binary (default: $CAKEWALK, else target/release/cakewalk, else next to
    /// this program).
    #[arg(long)]
    cakewalk: Option<PathBuf>,
    /// Suffix of a lab made by `scripts/lab/setup SUFFIX`: AF_PACKET cycles run in it.
    #[arg(long)]
    lab: Option<String>,
    /// Longest a control reply (or a reload's log line) may take, in seconds.
    #[arg(long, default_value_t = 3.0)]
    reply_deadline: f64,
    /// Most chaos actions in the whole run.
    #[arg(long, default_value_t = 100_000)]
    max_actions: u64,
    /// Keep the work directory (configs, logs, stats) even when everything passed.
    #[arg(long)]
    keep: bool,
}

/// How long the forwarder may take to drain at SIGTERM (engine.drain_timeout).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// The SIGTERM promise: drain_timeout plus one second.
const EXIT_LIMIT: Duration = Duration::from_secs(2);
/// A report is due every half second; this long without one is a stall.
const STALL_LIMIT: Duration = Duration::from_secs(5);
/// Length of the windows in which traffic must have moved.
const PROGRESS_WINDOW_S: f64 = 3.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortKind {
    Synth,
    Afpacket,
}

struct Cycle {
    n: usize,
    kind: PortKind,
    workers: u32,
    queues: u32,
    length: Duration,
}

impl Cycle {
    fn name(&self) -> String {
        let kind = match self.kind {
            PortKind::Synth => "synth",
            PortKind::Afpacket => "afpacket",
        };
        format!(
            "cycle {} ({kind}, {} worker(s), {} queue(s))",
            self.n, self.workers, self.queues
        )
    }
}

/// Names of the lab's namespaces, as scripts/lab/lib.sh makes them.
struct Lab {
    a: String,
    r: String,
    b: String,
}

impl Lab {
    fn new(suffix: &str) -> Lab {
        Lab {
            a: format!("cw-a-{suffix}"),
            r: format!("cw-r-{suffix}"),
            b: format!("cw-b-{suffix}"),
        }
    }
}

struct CycleSummary {
    line: String,
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("soak: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool> {
    let args = Args::parse();
    let minutes = if args.smoke { 1.5 } else { args.minutes };
    if !(minutes > 0.0 && minutes <= 7.0 * 24.0 * 60.0) {
        bail!("--minutes {minutes}: give a positive number of minutes, at most a week");
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let bin = cakewalk_benches::cakewalk::find(args.cakewalk.as_deref()).context(
        "no cakewalk binary: build it (cargo build --release -p forwarder) or pass --cakewalk",
    )?;
    let lab = args.lab.as_deref().map(Lab::new);
    if let Some(l) = &lab {
        if !Path::new("/run/netns").join(&l.r).exists() {
            bail!(
                "--lab: namespace {} does not exist; make it with scripts/lab/setup",
                l.r
            );
        }
    }
    let work = std::env::temp_dir().join(format!("cakewalk-soak-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let deadline = Duration::from_secs_f64(args.reply_deadline.max(0.1));

    println!("soak: seed {seed} (replay: scripts/soak --seed {seed} --minutes {minutes})");
    println!(
        "soak: {minutes} min against {} {}; reply deadline {deadline:?}, SIGTERM limit {EXIT_LIMIT:?}; work dir {}",
        bin.display(),
        if lab.is_some() { "on synth and AF_PACKET ports" } else { "on synth ports (no lab: AF_PACKET skipped)" },
        work.display()
    );

    let mut rng = Rng::new(seed);
    let journal = Arc::new(Journal::new());
    let total = Duration::from_secs_f64(minutes * 60.0);
    let cycle_len = (total / 4).clamp(Duration::from_secs(25), Duration::from_secs(60));
    let end = Instant::now() + total;
    let mut summaries = Vec::new();
    let mut actions = 0u64;
    let mut n = 0;
    while actions < args.max_actions {
        let left = end.saturating_duration_since(Instant::now());
        if left < Duration::from_secs(12) {
            break;
        }
        n += 1;
        let kind = if lab.is_some() && n % 2 == 0 {
            PortKind::Afpacket
        } else {
            PortKind::Synth
        };
        let (workers, queues) = *rng.pick(&[(1, 1), (1, 2), (2, 2)]);
        let cycle = Cycle {
            n,
            kind,
            workers,
            queues,
            length: cycle_len.min(left),
        };
        let ctx = Ctx {
            bin: &bin,
            lab: lab.as_ref(),
            work: &work,
            deadline,
            journal: journal.clone(),
        };
        summaries.push(run_cycle(
            &ctx,
            &cycle,
            &mut rng,
            &mut actions,
            args.max_actions,
        ));
    }

    let failures = journal.failures();
    println!("\n=== soak summary (seed {seed}) ===");
    for s in &summaries {
        println!("{}", s.line);
    }
    let counts = journal.counts();
    let list: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("actions: {actions} ({})", list.join(", "));
    let (replies, median, max) = journal.reply_summary();
    println!(
        "control replies timed: {replies}, median {} ms, largest {} ms",
        median.as_millis(),
        max.as_millis()
    );
    if failures.is_empty() {
        println!("soak: PASS: every promise held");
        if !args.keep {
            let _ = std::fs::remove_dir_all(&work);
        }
        Ok(true)
    } else {
        println!("soak: FAIL: {} broken promise(s):", failures.len());
        for f in &failures {
            println!("  - {f}");
        }
        println!(
            "logs, configs and stats are in {}; replay with --seed {seed}",
            work.display()
        );
        Ok(false)
    }
}

struct Ctx<'a> {
    bin: &'a Path,
    lab: Option<&'a Lab>,
    work: &'a Path,
    deadline: Duration,
    journal: Arc<Journal>,
}

/// The config file of a cycle's forwarder around a `[shaper]` section, with `ports_extra`
/// lines in its `[ports]` table.
fn render(
    kind: PortKind,
    cycle_dir: &Path,
    workers: u32,
    queues: u32,
) -> impl Fn(&str, &str) -> String + Send + Sync {
    let json = cycle_dir.join("stats.json");
    let socket = cycle_dir.join("ctl.sock");
    move |shaper: &str, ports_extra: &str| {
        let ports = match kind {
            PortKind::Synth => "[ports.synth]\nrate = \"100mbit\"\nflows = 64\nip = \"mixed\"\ndscp = \"0:4,ef:1,cs1:1,af41:1\"\n".to_string(),
            PortKind::Afpacket => "[ports.a]\nkind = \"afpacket\"\niface = \"ra\"\n[ports.b]\nkind = \"afpacket\"\niface = \"rb\"\n".to_string(),
        };
        format!(
            "{shaper}\n[ports]\n{ports_extra}\n{ports}\n[engine]\nworkers = {workers}\ntx_queues = {queues}\nduration = \"0\"\ndrain_timeout = \"{}s\"\n\n[stats]\ninterval = \"500ms\"\nlive = true\njson = \"{}\"\ncontrol_socket = \"{}\"\n",
            DRAIN_TIMEOUT.as_secs(),
            json.display(),
            socket.display()
        )
    }
}

fn spawn_logged(cmd: &mut Command, dir: &Path, name: &str) -> Result<Child> {
    let out = std::fs::File::create(dir.join(format!("{name}.stdout")))?;
    let err = std::fs::File::create(dir.join(format!("{name}.stderr")))?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {name}"))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Waits up to `limit` for `child` to exit.
fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// A second cakewalk in the lab's namespace A: synth traffic out of its AF_PACKET port
/// into the forwarder under test.
fn start_generator(ctx: &Ctx, lab: &Lab, dir: &Path) -> Result<Child> {
    let conf = dir.join("generator.toml");
    std::fs::write(
        &conf,
        "[shaper]\nrate = \"unlimited\"\n[ports.b]\nkind = \"afpacket\"\niface = \"eth0\"\n\
         [ports.synth]\nrate = \"40mbit\"\nflows = 32\ndscp = \"0:4,ef:1,cs1:1\"\n\
         [engine]\nduration = \"0\"\n[stats]\ncontrol_socket = \"off\"\nlive = false\ninterval = \"10s\"\n",
    )?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.a])
        .arg(ctx.bin)
        .arg("run")
        .arg("--config")
        .arg(&conf);
    spawn_logged(&mut cmd, dir, "generator")
}

fn run_cycle(
    ctx: &Ctx,
    cycle: &Cycle,
    rng: &mut Rng,
    actions: &mut u64,
    max_actions: u64,
) -> CycleSummary {
    let j = &ctx.journal;
    j.set_cycle(&cycle.name());
    j.log(&format!(
        "=== {} for {:.0} s ===",
        cycle.name(),
        cycle.length.as_secs_f64()
    ));
    let dir = ctx.work.join(format!("cycle-{}", cycle.n));
    let failed_before = j.failures().len();
    let summary = |extra: &str| CycleSummary {
        line: format!(
            "{}: {extra}; {} failure(s)",
            cycle.name(),
            j.failures().len() - failed_before
        ),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        j.fail(&format!("cannot create {}: {e}", dir.display()));
        return summary("not run");
    }
    let render = render(cycle.kind, &dir, cycle.workers, cycle.queues);
    let shaper = chaos::random_shaper(rng);
    let config = dir.join("cakewalk.toml");
    if let Err(e) = std::fs::write(&config, render(&shaper, "")) {
        j.fail(&format!("cannot write {}: {e}", config.display()));
        return summary("not run");
    }
    j.log(&format!(
        "starting with {}",
        shaper.trim().replace('\n', ", ")
    ));

    let lab = match cycle.kind {
        PortKind::Afpacket => ctx.lab,
        PortKind::Synth => None,
    };
    let mut generator = match lab.map(|l| start_generator(ctx, l, &dir)).transpose() {
        Ok(g) => g,
        Err(e) => {
            j.fail(&format!("cannot start the traffic generator: {e:#}"));
            return summary("not run");
        }
    };
    let mut cmd = match lab {
        Some(l) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &l.r]).arg(ctx.bin);
            c
        }
        None => Command::new(ctx.bin),
    };
    cmd.arg("run").arg("--config").arg(&config);
    let started = Instant::now();
    let mut fwd = match spawn_logged(&mut cmd, &dir, "cakewalk") {
        Ok(c) => c,
        Err(e) => {
            j.fail(&format!("{e:#}"));
            stop_generator(ctx, generator.as_mut());
            return summary("not run");
        }
    };
    let stderr = dir.join("cakewalk.stderr");
    let stdout = dir.join("cakewalk.stdout");
    let socket = dir.join("ctl.sock");
    let monitor = Monitor::spawn(dir.join("stats.json"), STALL_LIMIT);

    // Up: the socket answers and the first report is out.
    let up_by = Instant::now() + Duration::from_secs(20);
    while !(socket.exists() && monitor.count() > 0) {
        if Instant::now() > up_by || matches!(fwd.try_wait(), Ok(Some(_))) {
            j.fail(&format!("the forwarder did not come up (socket and a first report) within 20 s; stderr:\n{}", tail(&stderr, 20)));
            let _ = fwd.kill();
            let _ = fwd.wait();
            let _ = monitor.finish();
            stop_generator(ctx, generator.as_mut());
            return summary("did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let links = lab.map_or_else(Vec::new, |l| {
        vec![
            (l.r.clone(), "ra".to_string()),
            (l.r.clone(), "rb".to_string()),
            (l.a.clone(), "eth0".to_string()),
            (l.b.clone(), "eth0".to_string()),
        ]
    });
    let target = Target {
        bin: ctx.bin.to_path_buf(),
        socket: socket.clone(),
        pid: fwd.id(),
        config: config.clone(),
        render: Box::new(render),
        stderr: stderr.clone(),
        deadline: ctx.deadline,
        links,
        started,
    };
    let mut chaos = Chaos::new(target, j.clone(), shaper);
    let chaos_end = started + cycle.length.saturating_sub(Duration::from_secs(3));
    let mut exited_early = false;
    while Instant::now() < chaos_end && *actions < max_actions {
        let action = Action::pick(rng, lab.is_some());
        chaos.act(action, rng);
        *actions += 1;
        if let Ok(Some(status)) = fwd.try_wait() {
            j.fail(&format!(
                "the forwarder exited during the chaos ({status}); stderr:\n{}",
                tail(&stderr, 20)
            ));
            exited_early = true;
            break;
        }
        std::thread::sleep(rng.millis(50, 400));
    }

    let mut exit_line = "exited early".to_string();
    if !exited_early {
        // Half the time a client is stuck on the socket when SIGTERM comes: it must not
        // delay the exit.
        if rng.percent(50) {
            chaos.act(Action::StuckClient, rng);
            std::thread::sleep(Duration::from_millis(100));
        }
        chaos.stopping();
        let before = monitor
            .last()
            .and_then(|v| v["elapsed_s"].as_f64())
            .unwrap_or(0.0);
        let t0 = Instant::now();
        if !chaos::send_signal(fwd.id(), "-TERM") {
            j.fail("SIGTERM could not be sent");
        }
        match wait_for_exit(&mut fwd, Duration::from_secs(30)) {
            None => {
                j.fail("the forwarder did not exit within 30 s of SIGTERM; killed");
                let _ = fwd.kill();
                let _ = fwd.wait();
            }
            Some(status) => {
                let took = t0.elapsed();
                exit_line = format!(
                    "SIGTERM at {before:.1}s, exited in {} ms ({status})",
                    took.as_millis()
                );
                j.log(&exit_line);
                if took > EXIT_LIMIT {
                    j.fail(&format!(
                        "SIGTERM: exit took {took:?}, more than drain_timeout ({DRAIN_TIMEOUT:?}) plus one second"
                    ));
                }
                if !status.success() {
                    j.fail(&format!(
                        "the forwarder exited with {status}; stderr:\n{}",
                        tail(&stderr, 15)
                    ));
                }
            }
        }
    }
    let (samples, stalls, last) = monitor.finish();
    let quiet = chaos.finish();
    stop_generator(ctx, generator.as_mut());
    for s in stalls {
        j.fail(&s);
    }
    for f in monitor::progress_failures(&samples, &quiet, PROGRESS_WINDOW_S) {
        j.fail(&f);
    }
    for f in monitor::counters_going_down(&samples) {
        j.fail(&f);
    }
    let conservation = std::fs::read_to_string(&stdout)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("conservation:"))
        .map(str::to_string);
    if !exited_early {
        match &last {
            Some(v) if v["final_report"] == true => {
                let c = &v["conservation"];
                if c["ok"] != true || c["unaccounted"] != 0 {
                    j.fail(&format!("conservation broken at exit: {c}"));
                }
            }
            _ => j.fail("no final report in the stats JSON"),
        }
        match &conservation {
            Some(l) if l.ends_with(": ok") => {}
            Some(l) => j.fail(&format!(
                "the final report's conservation line is not ok: {l}"
            )),
            None => j.fail("the final report has no conservation line"),
        }
        if socket.exists() {
            j.fail("the control socket was left behind after exit");
        }
    }
    j.log(&format!(
        "{} reports read, {} link outages",
        samples.len(),
        quiet.len()
    ));
    summary(&format!(
        "{exit_line}; {}",
        conservation.unwrap_or_else(|| "no conservation line".into())
    ))
}

fn stop_generator(ctx: &Ctx, generator: Option<&mut Child>) {
    let Some(g) = generator else { return };
    let _ = chaos::send_signal(g.id(), "-TERM");
    if wait_for_exit(g, Duration::from_secs(10)).is_none() {
        ctx.journal
            .log("the traffic generator did not stop within 10 s of SIGTERM; killed");
        let _ = g.kill();
        let _ = g.wait();
    }
}
