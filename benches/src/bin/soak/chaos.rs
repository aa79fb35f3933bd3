//! The chaos driver's actions against one running forwarder: control commands through the
//! real `cakewalk ctl` client and through a raw socket (garbage, invalid UTF-8, endless
//! lines), SIGHUP with valid and broken config files, links taken down and up, and control
//! clients that connect and then stall, trickle one byte at a time, pipeline without reading,
//! or arrive fifty at once. Every request that should be answered is timed against the reply
//! deadline; everything is logged to the [`Journal`], failures included.

use crate::rng::Rng;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What happened, shared by the driver and its background clients.
pub(crate) struct Journal {
    start: Instant,
    failures: Mutex<Vec<String>>,
    counts: Mutex<BTreeMap<&'static str, u64>>,
    replies: Mutex<Vec<Duration>>,
    cycle: Mutex<String>,
}

impl Journal {
    pub(crate) fn new() -> Journal {
        Journal {
            start: Instant::now(),
            failures: Mutex::new(Vec::new()),
            counts: Mutex::new(BTreeMap::new()),
            replies: Mutex::new(Vec::new()),
            cycle: Mutex::new(String::new()),
        }
    }

    pub(crate) fn set_cycle(&self, name: &str) {
        *self.cycle.lock().unwrap() = name.to_string();
    }

    pub(crate) fn log(&self, what: &str) {
        println!("[{:7.2}s] {what}", self.start.elapsed().as_secs_f64());
    }

    pub(crate) fn fail(&self, what: &str) {
        let cycle = self.cycle.lock().unwrap().clone();
        let line = format!(
            "{cycle} at {:.2}s: {what}",
            self.start.elapsed().as_secs_f64()
        );
        println!("[{:7.2}s] FAIL {what}", self.start.elapsed().as_secs_f64());
        self.failures.lock().unwrap().push(line);
    }

    pub(crate) fn count(&self, kind: &'static str) {
        *self.counts.lock().unwrap().entry(kind).or_default() += 1;
    }

    fn reply_time(&self, d: Duration) {
        self.replies.lock().unwrap().push(d);
    }

    pub(crate) fn failures(&self) -> Vec<String> {
        self.failures.lock().unwrap().clone()
    }

    pub(crate) fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().unwrap().clone()
    }

    /// Replies timed so far: count, median and largest.
    pub(crate) fn reply_summary(&self) -> (usize, Duration, Duration) {
        let mut v = self.replies.lock().unwrap().clone();
        v.sort();
        let median = v.get(v.len() / 2).copied().unwrap_or_default();
        (v.len(), median, v.last().copied().unwrap_or_default())
    }
}

/// Writes a whole config file from a `[shaper]` section and extra `[ports]` lines.
pub(crate) type Render = Box<dyn Fn(&str, &str) -> String + Send + Sync>;

/// The forwarder under test, as the actions reach it.
pub(crate) struct Target {
    /// The cakewalk binary (for `cakewalk ctl`).
    pub(crate) bin: PathBuf,
    /// Its control socket.
    pub(crate) socket: PathBuf,
    /// Its process id (SIGHUP).
    pub(crate) pid: u32,
    /// The config file it re-reads on SIGHUP.
    pub(crate) config: PathBuf,
    /// Writes a whole config file around a `[shaper]` section and extra text.
    pub(crate) render: Render,
    /// Its stderr, where reload outcomes are logged.
    pub(crate) stderr: PathBuf,
    /// Longest a reply may take.
    pub(crate) deadline: Duration,
    /// Links that may be taken down: (namespace, device); empty without a lab.
    pub(crate) links: Vec<(String, String)>,
    /// When the forwarder was started (to put link outages on its clock).
    pub(crate) started: Instant,
}

/// One kind of chaos, with its weight in the random choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    SetRate,
    SetDiffserv,
    SetFlowMode,
    SetOverhead,
    TcWords,
    Stats,
    StatsJson,
    Garbage,
    SighupValid,
    SighupBroken,
    LinkFlap,
    StuckClient,
    TrickleClient,
    NonReader,
    IdleHerd,
}

const WEIGHTS: [(Action, u64); 15] = [
    (Action::SetRate, 24),
    (Action::SetDiffserv, 8),
    (Action::SetFlowMode, 6),
    (Action::SetOverhead, 4),
    (Action::TcWords, 5),
    (Action::Stats, 5),
    (Action::StatsJson, 6),
    (Action::Garbage, 6),
    (Action::SighupValid, 4),
    (Action::SighupBroken, 3),
    (Action::LinkFlap, 4),
    (Action::StuckClient, 3),
    (Action::TrickleClient, 2),
    (Action::NonReader, 2),
    (Action::IdleHerd, 1),
];

impl Action {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::SetRate => "set-rate",
            Action::SetDiffserv => "set-diffserv",
            Action::SetFlowMode => "set-flow-mode",
            Action::SetOverhead => "set-overhead",
            Action::TcWords => "set-tc-words",
            Action::Stats => "stats",
            Action::StatsJson => "stats-json",
            Action::Garbage => "garbage",
            Action::SighupValid => "sighup-valid",
            Action::SighupBroken => "sighup-broken",
            Action::LinkFlap => "link-flap",
            Action::StuckClient => "stuck-client",
            Action::TrickleClient => "trickle-client",
            Action::NonReader => "non-reading-client",
            Action::IdleHerd => "idle-herd",
        }
    }

    /// A random action; link flaps only where there are links.
    pub(crate) fn pick(rng: &mut Rng, links: bool) -> Action {
        let usable: Vec<(Action, u64)> = WEIGHTS
            .iter()
            .copied()
            .filter(|(a, _)| links || *a != Action::LinkFlap)
            .collect();
        let total: u64 = usable.iter().map(|(_, w)| w).sum();
        let mut x = rng.below(total);
        for (a, w) in usable {
            if x < w {
                return a;
            }
            x -= w;
        }
        Action::Stats
    }
}

const DIFFSERV: [&str; 5] = [
    "besteffort",
    "diffserv3",
    "diffserv4",
    "diffserv8",
    "precedence",
];
const FLOW_MODES: [&str; 8] = [
    "flowblind",
    "srchost",
    "dsthost",
    "hosts",
    "flows",
    "dual-srchost",
    "dual-dsthost",
    "triple-isolate",
];
const OVERHEAD_WORDS: [&str; 4] = ["ethernet", "docsis", "pppoe-ptm", "raw"];
const TC_WORDS: [&str; 16] = [
    "nat",
    "nonat",
    "wash",
    "nowash",
    "ack-filter",
    "ack-filter-aggressive",
    "no-ack-filter",
    "split-gso",
    "no-split-gso",
    "rtt 5ms",
    "rtt 300ms",
    "mpu 64",
    "memlimit 2mb",
    "atm overhead 44",
    "noatm",
    "ingress",
];

/// A rate between 1 kbit/s and 10 Gbit/s, log-uniform, in tc units; the two ends and
/// `unlimited` come up often.
pub(crate) fn random_rate(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => "1kbit".into(),
        1 => "10gbit".into(),
        2 => "unlimited".into(),
        _ => {
            let decade = rng.between(3, 9);
            let m = rng.between(1, 9);
            match decade {
                3..=5 => format!("{}kbit", m * 10u64.pow((decade - 3) as u32)),
                6..=8 => format!("{}mbit", m * 10u64.pow((decade - 6) as u32)),
                _ => format!("{m}gbit"),
            }
        }
    }
}

/// A random valid `[shaper]` section.
pub(crate) fn random_shaper(rng: &mut Rng) -> String {
    let overhead = if rng.percent(50) {
        rng.between(0, 64).to_string()
    } else {
        format!("\"{}\"", rng.pick(&OVERHEAD_WORDS))
    };
    format!(
        "[shaper]\nrate = \"{}\"\ndiffserv = \"{}\"\nflow_mode = \"{}\"\noverhead = {overhead}\n",
        random_rate(rng),
        rng.pick(&DIFFSERV),
        rng.pick(&FLOW_MODES),
    )
}

/// What `cakewalk ctl` answered.
enum CtlOutcome {
    /// Exit 0: the reply on stdout.
    Ok(String),
    /// The forwarder answered with an error.
    Refused(String),
    /// No answer: connection or exchange failed, or the client hung.
    NoReply(String),
}

/// The driver's state for one forwarder run.
pub(crate) struct Chaos {
    pub(crate) target: Arc<Target>,
    pub(crate) journal: Arc<Journal>,
    /// The `[shaper]` section the config file holds while no broken file is in place.
    shaper: String,
    background: Vec<JoinHandle<()>>,
    flapping: Arc<AtomicBool>,
    /// Outages on the driver's clock.
    quiet: Arc<Mutex<Vec<(Instant, Instant)>>>,
    stuck: Arc<Mutex<usize>>,
    /// Set when the forwarder is told to stop: a background client cut off by its exit
    /// is not a failure.
    stopping: Arc<AtomicBool>,
}

impl Chaos {
    pub(crate) fn new(target: Target, journal: Arc<Journal>, shaper: String) -> Chaos {
        Chaos {
            target: Arc::new(target),
            journal,
            shaper,
            background: Vec::new(),
            flapping: Arc::new(AtomicBool::new(false)),
            quiet: Arc::new(Mutex::new(Vec::new())),
            stuck: Arc::new(Mutex::new(0)),
            stopping: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Says the forwarder is being stopped (before SIGTERM).
    pub(crate) fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Runs one action.
    pub(crate) fn act(&mut self, action: Action, rng: &mut Rng) {
        self.journal.count(action.name());
        match action {
            Action::SetRate => {
                let r = random_rate(rng);
                self.ctl_ok(&["set", "rate", &r], "ok rate");
            }
            Action::SetDiffserv => {
                let d = *rng.pick(&DIFFSERV);
                self.ctl_ok(&["set", "diffserv", d], "ok");
            }
            Action::SetFlowMode => {
                let f = *rng.pick(&FLOW_MODES);
                self.ctl_ok(&["set", "flow-mode", f], "ok");
            }
            Action::SetOverhead => {
                let o = if rng.percent(50) {
                    (rng.between(0, 320) as i64 - 64).to_string()
                } else {
                    rng.pick(&OVERHEAD_WORDS).to_string()
                };
                self.ctl_ok(&["set", "overhead", &o], "ok");
            }
            Action::TcWords => {
                let w = *rng.pick(&TC_WORDS);
                self.raw(
                    format!("set {w}\n").as_bytes(),
                    &format!("set {w}"),
                    Some("ok"),
                );
            }
            Action::Stats => {
                self.ctl_ok(&["stats"], "");
            }
            Action::StatsJson => {
                if let Some(reply) = self.ctl_ok(&["stats", "--json"], "") {
                    if serde_json::from_str::<serde_json::Value>(&reply).is_err() {
                        let head: String = reply.chars().take(120).collect();
                        self.journal.fail(&format!(
                            "ctl stats --json: the reply is not JSON: {head:?}"
                        ));
                    }
                }
            }
            Action::Garbage => self.garbage(rng),
            Action::SighupValid => {
                let shaper = random_shaper(rng);
                let text = (self.target.render)(&shaper, "");
                self.shaper = shaper;
                let rate = self.shaper.lines().nth(1).unwrap_or("").to_string();
                self.sighup(
                    &text,
                    &format!("valid config ({rate})"),
                    &["applied live", "no live setting changed"],
                );
            }
            Action::SighupBroken => {
                let (what, text, expect): (&str, String, &[&str]) = match rng.below(5) {
                    0 => (
                        "a TOML syntax error",
                        "[shaper\nrate = ".into(),
                        &["keeping the running configuration"],
                    ),
                    1 => (
                        "a bad rate",
                        (self.target.render)("[shaper]\nrate = \"fast\"\n", ""),
                        &["keeping the running configuration"],
                    ),
                    2 => (
                        "an unknown key",
                        (self.target.render)(&format!("{}frobnicate = 1\n", self.shaper), ""),
                        &["keeping the running configuration"],
                    ),
                    3 => (
                        "a restart-only change (ports.pool_buffers)",
                        (self.target.render)(&self.shaper, "pool_buffers = 8192\n"),
                        &["needs a restart"],
                    ),
                    _ => (
                        "a 4 GiB buffer size",
                        (self.target.render)(&self.shaper, "buffer_size = 4294967295\n"),
                        &["keeping the running configuration", "needs a restart"],
                    ),
                };
                self.sighup(&text, what, expect);
                // The good file back, for the next reload.
                let good = (self.target.render)(&self.shaper, "");
                let _ = std::fs::write(&self.target.config, good);
            }
            Action::LinkFlap => self.link_flap(rng),
            Action::StuckClient => self.stuck_client(rng),
            Action::TrickleClient => self.trickle_client(rng),
            Action::NonReader => self.non_reader(rng),
            Action::IdleHerd => self.idle_herd(rng),
        }
    }

    /// Runs `cakewalk ctl ARGS`; a reply that does not start with `want` (or none, or a late
    /// one) is a failure. Returns the reply.
    fn ctl_ok(&self, args: &[&str], want: &str) -> Option<String> {
        let cmd = format!("ctl {}", args.join(" "));
        let t0 = Instant::now();
        let outcome = self.ctl(args);
        let took = t0.elapsed();
        let late = took > self.target.deadline;
        match &outcome {
            CtlOutcome::NoReply(_) => {}
            _ => self.journal.reply_time(took),
        }
        match outcome {
            CtlOutcome::Ok(reply) => {
                let first = reply.lines().next().unwrap_or("").to_string();
                self.journal.log(&format!(
                    "{cmd} -> {} ({} ms)",
                    shorten(&first),
                    took.as_millis()
                ));
                if late {
                    self.journal.fail(&format!(
                        "{cmd}: the reply took {took:?}, past the deadline of {:?}",
                        self.target.deadline
                    ));
                }
                if !first.starts_with(want) {
                    self.journal.fail(&format!(
                        "{cmd}: expected a reply starting with '{want}', got {first:?}"
                    ));
                }
                Some(reply)
            }
            CtlOutcome::Refused(e) => {
                self.journal
                    .log(&format!("{cmd} -> refused ({} ms)", took.as_millis()));
                self.journal.fail(&format!("{cmd}: refused: {}", e.trim()));
                None
            }
            CtlOutcome::NoReply(e) => {
                self.journal
                    .log(&format!("{cmd} -> no reply ({} ms)", took.as_millis()));
                self.journal.fail(&format!("{cmd}: no reply: {}", e.trim()));
                None
            }
        }
    }

    fn ctl(&self, args: &[&str]) -> CtlOutcome {
        let child = Command::new(&self.target.bin)
            .arg("ctl")
            .arg("--socket")
            .arg(&self.target.socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => return CtlOutcome::NoReply(format!("cannot start cakewalk ctl: {e}")),
        };
        // Past the deadline (and the client's own timeouts) it is a hang: kill it.
        let limit = self.target.deadline * 3 + Duration::from_secs(5);
        let t0 = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if t0.elapsed() > limit => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return CtlOutcome::NoReply(format!("cakewalk ctl hung for {limit:?}"));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return CtlOutcome::NoReply(e.to_string()),
            }
        }
        let out = match child.wait_with_output() {
            Ok(o) => o,
            Err(e) => return CtlOutcome::NoReply(e.to_string()),
        };
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if out.status.success() {
            CtlOutcome::Ok(stdout)
        } else if stderr.contains("refused") {
            CtlOutcome::Refused(stderr)
        } else {
            CtlOutcome::NoReply(stderr)
        }
    }

    /// Sends `payload` on a fresh connection, closes the write side and reads the reply; a
    /// missing or late reply is a failure, and so is one not starting with `want`.
    fn raw(&self, payload: &[u8], what: &str, want: Option<&str>) {
        let t0 = Instant::now();
        match exchange(&self.target.socket, payload, self.target.deadline) {
            Ok(reply) => {
                let took = t0.elapsed();
                self.journal.reply_time(took);
                let first = reply.lines().next().unwrap_or("").to_string();
                self.journal.log(&format!(
                    "raw {} -> {} ({} ms)",
                    shorten(what),
                    shorten(&first),
                    took.as_millis()
                ));
                if reply.trim().is_empty() {
                    self.journal.fail(&format!(
                        "raw {}: the connection closed without a reply",
                        shorten(what)
                    ));
                } else if let Some(w) = want.filter(|w| !first.starts_with(w)) {
                    self.journal.fail(&format!(
                        "raw {}: expected a reply starting with '{w}', got {first:?}",
                        shorten(what)
                    ));
                }
                if took > self.target.deadline {
                    self.journal.fail(&format!(
                        "raw {}: the reply took {took:?}, past the deadline of {:?}",
                        shorten(what),
                        self.target.deadline
                    ));
                }
            }
            Err(e) => {
                self.journal.log(&format!(
                    "raw {} -> no reply ({} ms)",
                    shorten(what),
                    t0.elapsed().as_millis()
                ));
                self.journal.fail(&format!(
                    "raw {}: no reply within {:?}: {e}",
                    shorten(what),
                    self.target.deadline
                ));
            }
        }
    }

    fn garbage(&self, rng: &mut Rng) {
        let long = vec![b'x'; 100 * 1024];
        let cases: [(&str, &[u8]); 9] = [
            ("unknown command", b"frobnicate\n"),
            ("set rate without a value", b"set rate\n"),
            ("a rate below the minimum", b"set rate 100bit\n"),
            ("invalid UTF-8", b"set rate \xff\xfe\n"),
            ("a NUL byte", b"set\0rate 5mbit\n"),
            ("an unknown diffserv mode", b"set diffserv diffserv9\n"),
            ("an overhead out of range", b"set overhead 100000\n"),
            ("100 KiB without a newline", &long),
            ("a negative rate", b"set rate -5mbit\n"),
        ];
        let (what, payload) = cases[rng.below(cases.len() as u64) as usize];
        self.raw(payload, what, Some("error"));
    }

    /// Writes `text` to the config file, sends SIGHUP and waits for the reload's log lines
    /// (an error may span several lines), which must contain one of `expect`.
    fn sighup(&self, text: &str, what: &str, expect: &[&str]) {
        let before = std::fs::metadata(&self.target.stderr).map_or(0, |m| m.len());
        if let Err(e) = std::fs::write(&self.target.config, text) {
            self.journal
                .fail(&format!("cannot write the config file: {e}"));
            return;
        }
        let t0 = Instant::now();
        if !send_signal(self.target.pid, "-HUP") {
            self.journal
                .fail("SIGHUP could not be sent (is the forwarder gone?)");
            return;
        }
        let mut logged = String::new();
        while t0.elapsed() < self.target.deadline {
            std::thread::sleep(Duration::from_millis(20));
            if stderr_since(&self.target.stderr, before).contains("reload: ") {
                // A reload may log more than one line (live changes, then restart-only ones).
                std::thread::sleep(Duration::from_millis(100));
                logged = stderr_since(&self.target.stderr, before);
                break;
            }
        }
        let took = t0.elapsed();
        // Without the live lines the forwarder prints meanwhile.
        let logged: Vec<&str> = logged.lines().filter(|l| !l.starts_with('[')).collect();
        let logged = logged.join(" / ");
        self.journal.log(&format!(
            "SIGHUP with {what} -> {} ({} ms)",
            shorten(&logged),
            took.as_millis()
        ));
        if logged.is_empty() {
            self.journal.fail(&format!(
                "SIGHUP with {what}: no reload line within {:?}",
                self.target.deadline
            ));
        } else if !expect.iter().any(|e| logged.contains(e)) {
            self.journal.fail(&format!(
                "SIGHUP with {what}: expected one of {expect:?} in {logged:?}"
            ));
        }
    }

    fn link_flap(&mut self, rng: &mut Rng) {
        if self.flapping.swap(true, Ordering::SeqCst) {
            self.journal.log("link flap skipped: one is in progress");
            return;
        }
        let (ns, dev) = rng.pick(&self.target.links).clone();
        let down_for = rng.millis(200, 2000);
        self.journal.log(&format!(
            "link {ns}/{dev} down for {} ms",
            down_for.as_millis()
        ));
        let (journal, flapping, quiet) = (
            self.journal.clone(),
            self.flapping.clone(),
            self.quiet.clone(),
        );
        self.background.push(std::thread::spawn(move || {
            let t0 = Instant::now();
            let set = |state: &str| {
                Command::new("ip")
                    .args(["-n", &ns, "link", "set", &dev, state])
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if !set("down") {
                journal.fail(&format!("ip -n {ns} link set {dev} down failed"));
            }
            std::thread::sleep(down_for);
            if !set("up") {
                journal.fail(&format!("ip -n {ns} link set {dev} up failed"));
            }
            // A veth passes traffic again a moment after it is up.
            std::thread::sleep(Duration::from_millis(500));
            quiet.lock().unwrap().push((t0, Instant::now()));
            journal.log(&format!("link {ns}/{dev} up again"));
            flapping.store(false, Ordering::SeqCst);
        }));
    }

    /// A background client, at most four stuck ones at a time.
    fn spawn_client(&mut self, name: &'static str, body: impl FnOnce(&Journal) + Send + 'static) {
        {
            let mut n = self.stuck.lock().unwrap();
            if *n >= 4 {
                self.journal.log(&format!(
                    "{name} skipped: four clients are already stalling"
                ));
                return;
            }
            *n += 1;
        }
        let (journal, stuck) = (self.journal.clone(), self.stuck.clone());
        self.background.push(std::thread::spawn(move || {
            body(&journal);
            *stuck.lock().unwrap() -= 1;
        }));
    }

    fn stuck_client(&mut self, rng: &mut Rng) {
        let hold = rng.millis(1000, 6000);
        let partial = rng.percent(50);
        let socket = self.target.socket.clone();
        self.journal.log(&format!(
            "stuck client: connects{}, holds {} ms",
            if partial {
                ", sends 'set ra' and no newline"
            } else {
                " and sends nothing"
            },
            hold.as_millis()
        ));
        self.spawn_client("stuck client", move |_| {
            if let Ok(mut s) = UnixStream::connect(&socket) {
                if partial {
                    let _ = s.write_all(b"set ra");
                }
                std::thread::sleep(hold);
            }
        });
    }

    fn trickle_client(&mut self, rng: &mut Rng) {
        let gaps: Vec<Duration> = (0..6).map(|_| rng.millis(150, 500)).collect();
        let socket = self.target.socket.clone();
        let deadline = self.target.deadline;
        let stopping = self.stopping.clone();
        self.journal
            .log("trickle client: 'stats' one byte at a time");
        self.spawn_client("trickle client", move |journal| {
            let t0 = Instant::now();
            let reply = (|| -> std::io::Result<String> {
                let mut s = UnixStream::connect(&socket)?;
                s.set_write_timeout(Some(deadline))?;
                for (b, gap) in b"stats\n".iter().zip(&gaps) {
                    std::thread::sleep(*gap);
                    s.write_all(&[*b])?;
                }
                s.shutdown(std::net::Shutdown::Write)?;
                read_reply(&mut s, deadline)
            })();
            match reply {
                Ok(r) if !r.trim().is_empty() => journal.log(&format!(
                    "trickle client answered after {} ms",
                    t0.elapsed().as_millis()
                )),
                _ if stopping.load(Ordering::SeqCst) => {
                    journal.log("trickle client cut off by the forwarder's exit");
                }
                Ok(_) => journal.fail("trickle client: the connection closed without a reply"),
                Err(e) => journal.fail(&format!(
                    "trickle client: no reply within {deadline:?} of its last byte: {e}"
                )),
            }
        });
    }

    fn non_reader(&mut self, rng: &mut Rng) {
        let hold = rng.millis(1000, 5000);
        let socket = self.target.socket.clone();
        self.journal.log(&format!(
            "non-reading client: pipelines 'stats json' until the socket is full, reads nothing for {} ms",
            hold.as_millis()
        ));
        self.spawn_client("non-reading client", move |_| {
            if let Ok(mut s) = UnixStream::connect(&socket) {
                let _ = s.set_nonblocking(true);
                for _ in 0..5000 {
                    if s.write_all(b"stats json\n").is_err() {
                        break;
                    }
                }
                std::thread::sleep(hold);
            }
        });
    }

    fn idle_herd(&mut self, rng: &mut Rng) {
        let hold = rng.millis(1000, 4000);
        let socket = self.target.socket.clone();
        self.journal.log(&format!(
            "idle herd: 50 connections held {} ms",
            hold.as_millis()
        ));
        self.spawn_client("idle herd", move |_| {
            let conns: Vec<UnixStream> = (0..50)
                .filter_map(|_| UnixStream::connect(&socket).ok())
                .collect();
            std::thread::sleep(hold);
            drop(conns);
        });
    }

    /// Waits for every background client and link flap (each is bounded) and returns the
    /// link outages on the forwarder's clock, in seconds.
    pub(crate) fn finish(mut self) -> Vec<(f64, f64)> {
        for h in self.background.drain(..) {
            let _ = h.join();
        }
        let base = self.target.started;
        self.quiet
            .lock()
            .unwrap()
            .iter()
            .map(|(a, b)| {
                (
                    a.saturating_duration_since(base).as_secs_f64(),
                    b.saturating_duration_since(base).as_secs_f64(),
                )
            })
            .collect()
    }
}

/// One exchange on a fresh connection: send, close the write side, read to the end.
fn exchange(
    socket: &std::path::Path,
    payload: &[u8],
    deadline: Duration,
) -> std::io::Result<String> {
    let mut s = UnixStream::connect(socket)?;
    s.set_write_timeout(Some(deadline))?;
    // The server may stop reading a payload that is too long and answer at once: the
    // write failing then is expected; the reply still counts.
    let _ = s.write_all(payload);
    let _ = s.shutdown(std::net::Shutdown::Write);
    read_reply(&mut s, deadline)
}

fn read_reply(s: &mut UnixStream, deadline: Duration) -> std::io::Result<String> {
    s.set_read_timeout(Some(deadline))?;
    let t0 = Instant::now();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if !buf.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        }
        if t0.elapsed() > deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "reply not finished in time",
            ));
        }
    }
    Ok(String::from_utf8_lossy(&buf).to_string())
}

/// What the forwarder wrote to stderr after its first `from` bytes.
fn stderr_since(path: &std::path::Path, from: u64) -> String {
    let all = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(all.get(from as usize..).unwrap_or_default()).to_string()
}

/// `kill SIG PID`.
pub(crate) fn send_signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

fn shorten(s: &str) -> String {
    match s.char_indices().nth(100) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
