//! Hitless runtime changes over a Unix socket, and the client `cakewalk ctl` uses.
//!
//! The protocol is one text command per line, one reply per command (the reply ends with an
//! empty line); the client sends its command, closes its write side and reads to the end.
//! Connections are served concurrently (at most [`MAX_CONNECTIONS`]), each with read and
//! write deadlines, and never hold up the server's stop. The commands:
//!
//! * `set rate 500mbit` — the shared rate of every TX queue of both directions (a pure
//!   parameter write); `set download rate 475mbit`, `set upload rate 45mbit` or
//!   `set port wan rate 45mbit` change one direction (the one leaving through that port).
//!   Every `set` takes the same selector (`set upload ack-filter`).
//! * `set diffserv diffserv4`, `set flow-mode flows`, `set overhead 18`, `set <tc words>` —
//!   CAKE options, applied by each queue's runner at a safe point between dequeues.
//! * `stats` / `stats json` — the latest report as text or as one JSON object.
//! * `circuits [top N] [by rate|drops|sojourn] [json]` — the circuits and nodes
//!   (docs/circuits.md); `circuit ID [json]` — one circuit in full, both directions with
//!   their tins; `circuit set ID download|upload RATE` — a one-off plan change;
//!   `circuits reload` — read the circuit files again (a refused file keeps the circuits in
//!   force and says why).
//! * `nodes [json]` — each node's sums over the circuits under it (`circuits top 0`).
//!
//! No change loses a queued packet: rates change through `SharedRate`, other options through
//! `TxQueue`'s reconfigure-at-a-safe-point path. [`apply_reload`] applies a whole new config
//! the same way (for SIGHUP) and lists what would need a restart.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use qdisc::cake::CakeConfig;
use qdisc::Rate;

use crate::config::direction::Direction;
use crate::config::Config;

/// Why the control socket failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Could not bind the socket.
    #[error("cannot create control socket '{path}'; set stats.control_socket to a writable path or 'off'")]
    Bind {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Something that is not a socket is at the path (a typo naming a real file, say): it
    /// is left alone rather than replaced.
    #[error("cannot create control socket '{path}': a file that is not a socket is already there; remove it if it is not needed, or set stats.control_socket (--control) to another path")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Another process answers on the socket (a second cakewalk with the same path).
    #[error("cannot create control socket '{path}': another process (a running cakewalk?) is serving it; stop that one, or give this one another path with --control (stats.control_socket)")]
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// Could not connect (client side).
    #[error("cannot connect to control socket '{path}'; is cakewalk running with that socket?")]
    Connect {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The server took no command or gave no reply in time.
    #[error("control socket '{path}' gave no reply within {waited:?}; the forwarder may be overloaded or stopping: try again, and check that it is still running")]
    NoReply {
        /// The path.
        path: PathBuf,
        /// How long the client waited.
        waited: Duration,
    },
    /// The exchange failed after connecting.
    #[error("control socket '{path}' exchange failed")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The default socket path: `/run/cakewalk.sock` as root, else `$XDG_RUNTIME_DIR/cakewalk.sock`,
/// else `/tmp/cakewalk-$UID.sock`.
pub fn default_socket_path() -> PathBuf {
    let uid = unix_uid();
    if uid == 0 {
        return PathBuf::from("/run/cakewalk.sock");
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&dir).join("cakewalk.sock");
    }
    PathBuf::from(format!("/tmp/cakewalk-{uid}.sock"))
}

fn unix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

/// Something a control command can change live: all TX queues of one port.
pub trait LiveTarget: Send + Sync {
    /// Sets the global rate.
    fn set_rate(&self, rate: Rate);
    /// Applies a CAKE configuration at each queue's next safe point.
    ///
    /// # Errors
    /// The qdisc's message when it refuses the configuration (nothing changes then).
    fn reconfigure(&self, cake: &CakeConfig) -> Result<(), String>;
    /// The configured global rate.
    fn rate(&self) -> Rate;
}

/// The circuits of a running forwarder, as the control socket and reloads change and read
/// them. Every change is all or nothing: a refused one leaves the circuits in force.
pub trait CircuitControl: Send + Sync {
    /// Reads the circuit files again, with `config`'s `[circuits]` and direction options
    /// when given (a SIGHUP), else the ones in force. Says what changed.
    ///
    /// # Errors
    /// Why the files or the change were refused.
    fn reload(&self, config: Option<&Config>) -> Result<String, String>;
    /// Changes one circuit's plan in `dir` until the files are read again.
    ///
    /// # Errors
    /// No such circuit, or a rate its queue refuses.
    fn set_rate(&self, id: &str, dir: Direction, rate: Rate) -> Result<String, String>;
    /// `dir`'s CAKE options changed: every circuit there inherits them.
    ///
    /// # Errors
    /// A circuit whose `sqm` cannot be laid over the new options.
    fn direction_options(&self, dir: Direction, cake: &CakeConfig) -> Result<(), String>;
    /// The list: the first `top` circuits by `by`, then every node.
    fn list(&self, top: usize, by: crate::stats::circuits::SortBy, json: bool) -> String;
    /// One circuit in full.
    ///
    /// # Errors
    /// No such circuit.
    fn show(&self, id: &str, json: bool) -> Result<String, String>;
    /// Whether `dir` is shaped per circuit.
    fn has(&self, dir: Direction) -> bool;
}

/// One direction as the control socket changes it: the TX queues of the port it leaves
/// through, and the CAKE configuration in force there.
pub struct DirectionTarget {
    /// Download or upload.
    pub direction: Direction,
    /// The name of the port it leaves through (`set port wan rate 40mbit`).
    pub port: String,
    /// The port's TX queues.
    pub queues: Arc<dyn LiveTarget>,
    /// The CAKE configuration in force.
    pub cake: Mutex<CakeConfig>,
}

impl DirectionTarget {
    /// `direction` leaving through `port`'s `queues`, starting with `cake`.
    pub fn new(
        direction: Direction,
        port: &str,
        queues: Arc<dyn LiveTarget>,
        cake: CakeConfig,
    ) -> DirectionTarget {
        DirectionTarget {
            direction,
            port: port.to_string(),
            queues,
            cake: Mutex::new(cake),
        }
    }

    /// The CAKE configuration in force.
    pub fn cake(&self) -> CakeConfig {
        self.cake.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What the control server and [`apply_reload`] act on.
pub struct ControlState {
    /// One target per direction (per egress port).
    pub directions: Vec<DirectionTarget>,
    /// The config the process started with (for deciding what needs a restart).
    pub started_with: Config,
    /// Latest text report.
    pub latest_text: Arc<Mutex<String>>,
    /// Latest JSON report.
    pub latest_json: Arc<Mutex<String>>,
    /// Builds a report now, as (text, JSON), once the forwarder runs: `stats` answers with
    /// the state as of the question (a rate just set shows at once), not as of the last
    /// interval. Until it is set, the latest report is the answer.
    pub fresh: Mutex<Option<FreshReport>>,
    /// The circuits, when `[circuits]` names files.
    pub circuits: Option<Arc<dyn CircuitControl>>,
}

/// Builds a report when asked: (text, one JSON object).
pub type FreshReport = Box<dyn Fn() -> (String, String) + Send + Sync>;

impl ControlState {
    fn report(&self, json: bool) -> String {
        let fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(build) = fresh.as_ref() {
            let (text, json_text) = build();
            return if json { json_text } else { text };
        }
        drop(fresh);
        let latest = if json {
            &self.latest_json
        } else {
            &self.latest_text
        };
        latest.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

static CURRENT: OnceLock<Mutex<Option<Arc<ControlState>>>> = OnceLock::new();

/// Makes `state` the one [`apply_reload`] acts on (the running forwarder's).
pub fn install(state: Option<Arc<ControlState>>) {
    *CURRENT
        .get_or_init(|| Mutex::new(None))
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = state;
}

fn current() -> Option<Arc<ControlState>> {
    CURRENT
        .get_or_init(|| Mutex::new(None))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Applies what can change live from `new` (rate and every CAKE option) to the running
/// forwarder, and returns the settings that differ but need a restart (ports, engine,
/// stats). Without a running forwarder nothing is applied and nothing is listed.
pub fn apply_reload(new: &Config) -> Vec<String> {
    let Some(st) = current() else {
        return Vec::new();
    };
    let old = &st.started_with;
    let mut restart = Vec::new();
    let wanted: Vec<(usize, CakeConfig)> = st
        .directions
        .iter()
        .enumerate()
        .map(|(i, t)| (i, new.cake_for(t.direction)))
        .collect();
    if let Err(e) = apply_cakes(&st, &wanted) {
        restart.push(format!("shaper (refused live: {e})"));
    }
    if old.ports != new.ports {
        restart.push("ports".to_string());
    }
    if old.engine != new.engine {
        restart.push("engine".to_string());
    }
    if old.stats != new.stats {
        restart.push("stats".to_string());
    }
    if old.shaper.queue != new.shaper.queue {
        restart.push("shaper.queue".to_string());
    }
    if old.shaper.bypass != new.shaper.bypass {
        restart.push("shaper.bypass".to_string());
    }
    restart
}

/// Applies `wanted` (target index, new CAKE configuration) to the targets: all of them, or,
/// when one is refused, none. A change of the rate alone is a rate write; anything else a
/// reconfiguration at each queue's next safe point.
fn apply_cakes(st: &ControlState, wanted: &[(usize, CakeConfig)]) -> Result<(), String> {
    for (i, cake) in wanted {
        let Some(t) = st.directions.get(*i) else {
            continue;
        };
        // The same limits as at start (the minimum rate): a live change must not reach a
        // state `cakewalk run` refuses. The queues running are the ones the process
        // started with.
        let named = |e: String| format!("{}: {e}", t.direction.name());
        cake.validate().map_err(|e| named(e.to_string()))?;
        if let Some(why) = crate::config::autorate_conflict(cake, st.started_with.engine.tx_queues)
        {
            return Err(named(why));
        }
    }
    for (i, cake) in wanted {
        let Some(t) = st.directions.get(*i) else {
            continue;
        };
        let mut cur = t.cake.lock().unwrap_or_else(|e| e.into_inner());
        let rate_only = CakeConfig {
            rate: cur.rate,
            ..cake.clone()
        } == *cur;
        let circuits = st.circuits.as_ref().filter(|c| c.has(t.direction));
        if let Some(c) = circuits {
            // The link's options are every circuit's there: the plans are rebuilt on them
            // (a change of the link's rate alone still reaches the queues as a rate write).
            c.direction_options(t.direction, cake)
                .map_err(|e| format!("{}: {e}", t.direction.name()))?;
        } else if rate_only {
            t.queues.set_rate(cake.rate);
        } else {
            t.queues
                .reconfigure(cake)
                .map_err(|e| format!("{}: {e}", t.direction.name()))?;
        }
        *cur = cake.clone();
    }
    Ok(())
}

/// Which directions a `set` acts on, and the words after the selector: `set upload rate
/// 40mbit`, `set port wan rate 40mbit`, or `set rate 40mbit` for every direction.
fn select<'w>(
    st: &ControlState,
    words: &'w [&'w str],
) -> Result<(Vec<usize>, &'w [&'w str], String), String> {
    let all = || (0..st.directions.len()).collect::<Vec<_>>();
    match words {
        [dir, rest @ ..] if Direction::parse(dir).is_some() => {
            let d = Direction::parse(dir).unwrap_or(Direction::Download);
            let picked: Vec<usize> = all()
                .into_iter()
                .filter(|i| st.directions[*i].direction == d)
                .collect();
            if picked.is_empty() {
                return Err(format!("this forwarder shapes no {} direction", d.name()));
            }
            Ok((picked, rest, format!("{} ", d.name())))
        }
        ["port", name, rest @ ..] => {
            let picked: Vec<usize> = all()
                .into_iter()
                .filter(|i| st.directions[*i].port == *name)
                .collect();
            if picked.is_empty() {
                let names: Vec<&str> = st.directions.iter().map(|t| t.port.as_str()).collect();
                return Err(format!(
                    "no port named '{}'; the ports are {}",
                    shortened(name),
                    names.join(" and ")
                ));
            }
            let dir = st.directions[picked[0]].direction.name();
            Ok((picked, rest, format!("{dir} ")))
        }
        ["port"] => Err(
            "'set port' needs a port name and a setting, as in 'set port wan rate 40mbit'".into(),
        ),
        rest => Ok((all(), rest, String::new())),
    }
}

/// Executes one command line and returns the reply.
pub fn handle_command(st: &ControlState, line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [] => "error: empty command; try 'stats' or 'set rate 500mbit'".into(),
        ["stats"] | ["stats", "text"] => st.report(false),
        ["stats", "json"] => st.report(true),
        ["circuits", rest @ ..] | ["circuit", rest @ ..] => circuits_command(st, &words[0..1], rest),
        ["nodes"] => circuits_command(st, &["circuits"], &["top", "0"]),
        ["nodes", "json"] => circuits_command(st, &["circuits"], &["top", "0", "json"]),
        ["set", rest @ ..] => match select(st, rest) {
            Ok((picked, setting, said)) => set(st, &picked, setting, &said, line),
            Err(e) => format!("error: {e}"),
        },
        _ => format!(
            "error: unknown command '{}'; use 'set [download|upload] rate <rate>', 'set diffserv <mode>', 'set overhead <n>', 'set flow-mode <mode>', 'stats' or 'stats json'",
            shortened(line)
        ),
    }
}

/// Most circuits `circuits` lists unless told (`top N`).
const DEFAULT_TOP: usize = 20;

/// `circuits ...` and `circuit ...`.
fn circuits_command(st: &ControlState, first: &[&str], rest: &[&str]) -> String {
    use crate::stats::circuits::SortBy;
    let Some(c) = st.circuits.as_ref() else {
        return "error: this forwarder shapes no circuits; name circuit files in [circuits] files (docs/circuits.md)".into();
    };
    let usage = "use 'circuits [top N] [by rate|drops|sojourn] [json]', 'circuits reload', 'circuit ID [json]' or 'circuit set ID download|upload RATE'";
    match (first, rest) {
        (["circuits"], ["reload"]) => match c.reload(None) {
            Ok(said) => format!("ok {said}"),
            Err(e) => format!("error: {e}; the circuits in force are kept"),
        },
        (["circuits"], words) => {
            let (mut top, mut by, mut json) = (DEFAULT_TOP, SortBy::Rate, false);
            let mut i = 0;
            while i < words.len() {
                match (words[i], words.get(i + 1)) {
                    ("top", Some(n)) => match n.parse::<usize>() {
                        Ok(n) => top = n,
                        Err(_) => {
                            return format!("error: 'top {}' needs a count; {usage}", shortened(n))
                        }
                    },
                    ("by", Some(k)) => match SortBy::parse(k) {
                        Some(k) => by = k,
                        None => {
                            return format!("error: cannot sort by '{}'; {usage}", shortened(k))
                        }
                    },
                    ("json", _) => {
                        json = true;
                        i += 1;
                        continue;
                    }
                    (w, _) => {
                        return format!("error: '{}' is not understood; {usage}", shortened(w))
                    }
                }
                i += 2;
            }
            c.list(top, by, json)
        }
        (["circuit"], ["set", id, dir, rate]) => {
            let Some(d) = Direction::parse(dir) else {
                return format!(
                    "error: '{}' is not a direction; write download or upload",
                    shortened(dir)
                );
            };
            match crate::config::units::parse_rate(rate) {
                Ok(r) => match c.set_rate(id, d, r) {
                    Ok(said) => said,
                    Err(e) => format!("error: {e}"),
                },
                Err(e) => format!("error: {e}"),
            }
        }
        (["circuit"], [id]) | (["circuit"], [id, "json"]) => match c.show(id, rest.len() == 2) {
            Ok(text) => text,
            Err(e) => format!("error: {e}"),
        },
        _ => format!("error: {usage}"),
    }
}

/// Reads the circuit files again for a reload of `new`, when the running forwarder has
/// circuits: `Some(Ok(what changed))` or `Some(Err(why not))`; `None` without circuits.
pub fn reload_circuits(new: &Config) -> Option<Result<String, String>> {
    let st = current()?;
    let c = st.circuits.as_ref()?;
    Some(c.reload(Some(new)))
}

/// `set`, after the direction selector: changes `picked` directions.
fn set(st: &ControlState, picked: &[usize], setting: &[&str], said: &str, line: &str) -> String {
    let current = |i: usize| st.directions[i].cake();
    match setting {
        ["rate", r] | ["bandwidth", r] => match crate::config::units::parse_rate(r) {
            Ok(rate) => {
                let wanted: Vec<(usize, CakeConfig)> = picked
                    .iter()
                    .map(|&i| {
                        (
                            i,
                            CakeConfig {
                                rate,
                                ..current(i)
                            },
                        )
                    })
                    .collect();
                match apply_cakes(st, &wanted) {
                    Ok(()) => format!("ok {said}rate {}", crate::config::units::format_rate(rate)),
                    Err(e) => format!("error: {e}"),
                }
            }
            Err(e) => format!("error: {e}"),
        },
        // Without these two arms, a bare 'set' replied "ok" having changed nothing, and
        // 'set rate' without its one value fell through to the tc words, where 'rate' is
        // not a cake option ("unknown cake option 'rate', did you mean 'atm'...").
        [] => "error: 'set' needs a setting; try 'set rate 500mbit', 'set upload rate 45mbit', 'set diffserv diffserv4' or tc cake words ('set overhead 18')".into(),
        ["rate" | "bandwidth", ..] => format!(
            "error: '{}' takes one rate, as in 'set rate 500mbit' or 'set upload rate 45mbit' ('unlimited' or 0 for no shaping)",
            shortened(line)
        ),
        rest => {
            // "set diffserv diffserv4" / "set flow-mode flows" name the option; tc words
            // ("set diffserv4", "set overhead 18") are taken as they are.
            let tc_words: Vec<&str> = match rest {
                ["diffserv", mode] | ["flow-mode", mode] | ["flowmode", mode] => vec![*mode],
                other => other.to_vec(),
            };
            let text = tc_words.join(" ");
            match crate::config::keywords::CakeOptions::parse(&text) {
                Ok(opts) => {
                    let wanted: Vec<(usize, CakeConfig)> = picked
                        .iter()
                        .map(|&i| {
                            let mut cake = current(i);
                            opts.apply_to(&mut cake);
                            (i, cake)
                        })
                        .collect();
                    match apply_cakes(st, &wanted) {
                        Ok(()) => format!("ok {said}{text}"),
                        Err(e) => format!("error: {e}"),
                    }
                }
                Err(e) => format!("error: {e}"),
            }
        }
    }
}

/// `line` as quoted back in an error: its first 60 characters.
fn shortened(line: &str) -> String {
    match line.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_string(),
    }
}

/// Listens on `path` (replacing a stale socket file) and serves commands until `stop` is set.
pub fn serve(
    path: &Path,
    state: Arc<ControlState>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, ControlError> {
    let bind_err = |source| ControlError::Bind {
        path: path.to_path_buf(),
        source,
    };
    // Only a stale socket (one nobody answers on, left by a process that died) is replaced:
    // never a regular file the path names by mistake, nor a live forwarder's socket.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(ControlError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        if UnixStream::connect(path).is_ok() {
            return Err(ControlError::InUse {
                path: path.to_path_buf(),
            });
        }
        let _ = std::fs::remove_file(path);
    }
    let listener = UnixListener::bind(path).map_err(bind_err)?;
    // Owner only, whatever the umask: a command changes the shaping of the whole box.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
    }
    listener.set_nonblocking(true).map_err(bind_err)?;
    let path = path.to_path_buf();
    Ok(std::thread::spawn(move || {
        let open = Arc::new(Connections::new());
        // Connection threads hold the state only weakly, this thread holds it until the
        // server stops: one stuck on a client must not keep the queues (and the buffers
        // they hold) alive after the forwarder stopped.
        let weak = Arc::downgrade(&state);
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => admit(s, &weak, &stop, &open),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let _ = std::fs::remove_file(&path);
        drop(state);
    }))
}

/// Connections served at once. Each has a thread of its own for at most
/// [`CONNECTION_LIFETIME`]; past the bound the connection silent the longest is shut down
/// to make room.
pub const MAX_CONNECTIONS: usize = 64;

/// How long one read or one write may wait for the client: an idle or non-reading client
/// is dropped after this, without delaying anyone else.
pub const IO_DEADLINE: Duration = Duration::from_secs(2);

/// The longest one connection is served, however it trickles.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// Most bytes read from one connection: commands are a few words, and a client that sends
/// an endless line must not grow the server's memory.
const MAX_REQUEST_BYTES: u64 = 64 * 1024;

/// One connection being served: a handle that can shut it down, and when it last sent a
/// byte (nanoseconds since the server started).
struct OpenConnection {
    id: u64,
    handle: UnixStream,
    last_heard: Arc<AtomicU64>,
}

/// The connections being served, in the order they came.
struct Connections {
    open: Mutex<std::collections::VecDeque<OpenConnection>>,
    next_id: AtomicU64,
    started: std::time::Instant,
}

impl Connections {
    fn new() -> Connections {
        Connections {
            open: Mutex::new(std::collections::VecDeque::new()),
            next_id: AtomicU64::new(0),
            started: std::time::Instant::now(),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<OpenConnection>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        nanos_since(self.started)
    }
}

fn nanos_since(started: std::time::Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A connection's reader that notes when each byte arrived, so that the server sheds the
/// client that has been silent longest, not one that is slowly sending a command.
struct Heard<R> {
    inner: R,
    /// The server's start, which `last_heard` counts from.
    started: std::time::Instant,
    last_heard: Arc<AtomicU64>,
}

impl<R: Read> Read for Heard<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.last_heard
                .store(nanos_since(self.started), Ordering::Relaxed);
        }
        Ok(n)
    }
}

/// Serves `s` on a thread of its own. At [`MAX_CONNECTIONS`] the connection that has sent
/// nothing for longest is shut down first (the oldest of those, on a tie): a command takes
/// milliseconds, so that one is a client that connected and went quiet, never one trickling
/// a command in byte by byte. A new client is always served (refusing it would let stuck
/// clients lock every operator out). The accept loop never waits on a client, and the
/// server stops without waiting for the connection threads (each ends by itself within
/// [`IO_DEADLINE`] of its last exchange).
fn admit(
    s: UnixStream,
    state: &Weak<ControlState>,
    stop: &Arc<AtomicBool>,
    open: &Arc<Connections>,
) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(IO_DEADLINE));
    let _ = s.set_write_timeout(Some(IO_DEADLINE));
    let Ok(handle) = s.try_clone() else { return };
    let id = open.next_id.fetch_add(1, Ordering::Relaxed);
    let last_heard = Arc::new(AtomicU64::new(open.now()));
    {
        let mut list = open.open();
        while list.len() >= MAX_CONNECTIONS {
            let quietest = list
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| (c.last_heard.load(Ordering::Relaxed), c.id))
                .map(|(i, _)| i);
            if let Some(shed) = quietest.and_then(|i| list.remove(i)) {
                // Its thread's blocked read returns at once and the thread ends.
                let _ = shed.handle.shutdown(std::net::Shutdown::Both);
            }
        }
        list.push_back(OpenConnection {
            id,
            handle,
            last_heard: last_heard.clone(),
        });
    }
    let reader = Heard {
        inner: s,
        started: open.started,
        last_heard,
    };
    let (state, stop, guard) = (
        state.clone(),
        stop.clone(),
        OpenGuard {
            open: open.clone(),
            id,
        },
    );
    let spawned = std::thread::Builder::new()
        .name("cakewalk-ctl".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let _guard = guard;
            serve_one(reader, &state, &stop);
        });
    // Could not start a thread: the stream (and its slot) went with the closure.
    drop(spawned);
}

/// Takes a connection off the list when its thread ends, however it ends.
struct OpenGuard {
    open: Arc<Connections>,
    id: u64,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let id = self.id;
        self.open.open().retain(|c| c.id != id);
    }
}

fn serve_one(s: Heard<UnixStream>, state: &Weak<ControlState>, stop: &AtomicBool) {
    let deadline = std::time::Instant::now() + CONNECTION_LIFETIME;
    let Ok(mut w) = s.inner.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(s.take(MAX_REQUEST_BYTES));
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if stop.load(Ordering::Relaxed) || std::time::Instant::now() > deadline {
            break;
        }
        let cut_off = line.last() != Some(&b'\n') && reader.get_ref().limit() == 0;
        let mut reply = if cut_off {
            format!("error: more than {MAX_REQUEST_BYTES} bytes on one connection; send one short command per line")
        } else {
            match std::str::from_utf8(&line) {
                Ok(text) if text.trim().is_empty() => continue,
                Ok(text) => match state.upgrade() {
                    Some(st) => handle_command(&st, text.trim()),
                    None => "error: cakewalk is stopping".to_string(),
                },
                Err(_) => "error: the command is not valid UTF-8; send plain text commands such as 'stats' or 'set rate 500mbit'".to_string(),
            }
        };
        if !reply.ends_with('\n') {
            reply.push('\n');
        }
        if w.write_all(reply.as_bytes()).is_err() || cut_off {
            break;
        }
    }
}

/// The client side, for `cakewalk ctl`.
pub mod client {
    use super::*;

    /// How long the client waits for the server to take its command or to reply.
    pub const CLIENT_DEADLINE: Duration = Duration::from_secs(5);

    /// Sends `command` to the control socket at `path` and returns the reply.
    ///
    /// # Errors
    /// [`ControlError`] when the socket cannot be reached or the exchange fails.
    pub fn send(path: &Path, command: &str) -> Result<String, ControlError> {
        let io = |source: std::io::Error| match source.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                ControlError::NoReply {
                    path: path.to_path_buf(),
                    waited: CLIENT_DEADLINE,
                }
            }
            _ => ControlError::Io {
                path: path.to_path_buf(),
                source,
            },
        };
        let mut s = UnixStream::connect(path).map_err(|source| ControlError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        s.set_read_timeout(Some(CLIENT_DEADLINE)).map_err(io)?;
        s.set_write_timeout(Some(CLIENT_DEADLINE)).map_err(io)?;
        let mut request = command.trim().as_bytes().to_vec();
        request.push(b'\n');
        let sent = s
            .write_all(&request)
            .and_then(|()| s.shutdown(std::net::Shutdown::Write));
        // A server that closes the connection (stopping, or making room for newer clients)
        // may do so before reading the command: a reply it sent is still there to read.
        let mut reply = Vec::new();
        let read = s.read_to_end(&mut reply);
        if reply.is_empty() {
            sent.map_err(io)?;
            read.map_err(io)?;
        }
        Ok(String::from_utf8_lossy(&reply).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[derive(Default)]
    struct Probe {
        rate: AtomicU64,
        reconfigs: AtomicU64,
    }

    impl LiveTarget for Probe {
        fn set_rate(&self, rate: Rate) {
            self.rate.store(rate.bytes_per_sec(), Ordering::Relaxed);
        }
        fn reconfigure(&self, cake: &CakeConfig) -> Result<(), String> {
            self.rate
                .store(cake.rate.bytes_per_sec(), Ordering::Relaxed);
            self.reconfigs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn rate(&self) -> Rate {
            Rate::from_bytes_per_sec(self.rate.load(Ordering::Relaxed))
        }
    }

    fn target(probe: Arc<Probe>) -> Vec<DirectionTarget> {
        vec![DirectionTarget::new(
            Direction::Download,
            "lan",
            probe,
            CakeConfig::default(),
        )]
    }

    fn state(probe: Arc<Probe>) -> Arc<ControlState> {
        Arc::new(ControlState {
            directions: target(probe),
            started_with: Config::default(),
            latest_text: Arc::new(Mutex::new("text report".into())),
            latest_json: Arc::new(Mutex::new("{}".into())),
            fresh: Mutex::new(None),
            circuits: None,
        })
    }

    #[test]
    fn set_rate_and_cake_options_reach_every_target() {
        let probe = Arc::new(Probe::default());
        let st = state(probe.clone());
        assert!(handle_command(&st, "set rate 8mbit").starts_with("ok"));
        assert_eq!(probe.rate.load(Ordering::Relaxed), 1_000_000);
        assert!(handle_command(&st, "set diffserv diffserv4").starts_with("ok"));
        assert_eq!(probe.reconfigs.load(Ordering::Relaxed), 1);
        assert_eq!(probe.rate.load(Ordering::Relaxed), 1_000_000, "rate kept");
        assert!(handle_command(&st, "set rate fast").starts_with("error"));
        assert!(handle_command(&st, "frobnicate").contains("unknown command"));
        assert_eq!(handle_command(&st, "stats"), "text report");
    }

    #[test]
    fn a_set_without_its_value_is_refused_and_changes_nothing() {
        let probe = Arc::new(Probe::default());
        let st = state(probe.clone());
        for (cmd, want) in [
            ("set", "'set' needs a setting"),
            ("set rate", "takes one rate"),
            ("set bandwidth", "takes one rate"),
            ("set rate 100mbit extra", "takes one rate"),
        ] {
            let reply = handle_command(&st, cmd);
            assert!(
                reply.starts_with("error: ") && reply.contains(want),
                "{cmd}: {reply}"
            );
        }
        assert_eq!(probe.rate.load(Ordering::Relaxed), 0);
        assert_eq!(probe.reconfigs.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn set_rate_below_the_shaper_minimum_is_refused_and_changes_nothing() {
        let probe = Arc::new(Probe::default());
        let st = state(probe.clone());
        assert!(handle_command(&st, "set rate 8mbit").starts_with("ok"));
        let reply = handle_command(&st, "set rate 100bit");
        assert!(
            reply.starts_with("error:") && reply.contains("below the minimum"),
            "{reply}"
        );
        assert_eq!(probe.rate.load(Ordering::Relaxed), 1_000_000, "rate kept");
        assert_eq!(st.directions[0].cake().rate.bytes_per_sec(), 1_000_000);
        assert!(handle_command(&st, "set rate unlimited").starts_with("ok"));
        assert!(handle_command(&st, "set rate 512bit").starts_with("ok"));
    }

    #[test]
    fn autorate_ingress_is_refused_live_on_several_tx_queues_as_at_start() {
        let probe = Arc::new(Probe::default());
        let mut two_queues = Config::default();
        two_queues.engine.tx_queues = 2;
        let st = ControlState {
            directions: target(probe.clone()),
            started_with: two_queues,
            latest_text: Arc::new(Mutex::new(String::new())),
            latest_json: Arc::new(Mutex::new(String::new())),
            fresh: Mutex::new(None),
            circuits: None,
        };
        let reply = handle_command(&st, "set autorate-ingress");
        assert!(
            reply.starts_with("error:")
                && reply.contains(crate::config::AUTORATE_NEEDS_ONE_QUEUE)
                && reply.contains("tx_queues is 2"),
            "{reply}"
        );
        assert!(!st.directions[0].cake().autorate_ingress, "nothing changed");
        assert_eq!(probe.reconfigs.load(Ordering::Relaxed), 0);
        // One queue: allowed.
        let st = state(probe.clone());
        assert!(handle_command(&st, "set autorate-ingress").starts_with("ok"));
        assert!(st.directions[0].cake().autorate_ingress);
    }

    #[test]
    fn a_direction_or_a_port_picks_what_a_set_changes() {
        let (down, up) = (Arc::new(Probe::default()), Arc::new(Probe::default()));
        let st = ControlState {
            directions: vec![
                DirectionTarget::new(
                    Direction::Download,
                    "lan",
                    down.clone(),
                    CakeConfig::default(),
                ),
                DirectionTarget::new(Direction::Upload, "wan", up.clone(), CakeConfig::default()),
            ],
            started_with: Config::default(),
            latest_text: Arc::new(Mutex::new(String::new())),
            latest_json: Arc::new(Mutex::new(String::new())),
            fresh: Mutex::new(None),
            circuits: None,
        };
        assert_eq!(handle_command(&st, "set rate 8mbit"), "ok rate 8mbit");
        assert_eq!(
            handle_command(&st, "set upload rate 16mbit"),
            "ok upload rate 16mbit"
        );
        assert_eq!(
            down.rate.load(Ordering::Relaxed),
            1_000_000,
            "download kept"
        );
        assert_eq!(up.rate.load(Ordering::Relaxed), 2_000_000);
        assert_eq!(
            handle_command(&st, "set port lan rate 24mbit"),
            "ok download rate 24mbit"
        );
        assert_eq!(down.rate.load(Ordering::Relaxed), 3_000_000);
        assert_eq!(up.rate.load(Ordering::Relaxed), 2_000_000, "upload kept");
        assert_eq!(
            handle_command(&st, "set upload ack-filter"),
            "ok upload ack-filter"
        );
        assert_eq!(
            st.directions[1].cake().ack_filter,
            qdisc::cake::AckFilterMode::Filter
        );
        assert_eq!(
            st.directions[0].cake().ack_filter,
            qdisc::cake::AckFilterMode::Off
        );
        assert_eq!(down.reconfigs.load(Ordering::Relaxed), 0);
        let reply = handle_command(&st, "set port dmz rate 1mbit");
        assert!(
            reply.starts_with("error: no port named 'dmz'; the ports are lan and wan"),
            "{reply}"
        );
        let reply = handle_command(&st, "set upload rate");
        assert!(reply.contains("takes one rate"), "{reply}");
        // A refused change to one direction changes neither.
        let reply = handle_command(&st, "set rate 100bit");
        assert!(reply.contains("below the minimum"), "{reply}");
        assert_eq!(up.rate.load(Ordering::Relaxed), 2_000_000);
    }

    #[test]
    fn apply_reload_changes_cake_live_and_lists_what_needs_a_restart() {
        assert!(
            apply_reload(&Config::default()).is_empty(),
            "nothing running"
        );
        let probe = Arc::new(Probe::default());
        install(Some(state(probe.clone())));
        let new =
            Config::from_toml_str("[shaper]\nrate = \"80mbit\"\n[engine]\nworkers = 2").unwrap();
        let restart = apply_reload(&new);
        install(None);
        assert_eq!(probe.rate.load(Ordering::Relaxed), 10_000_000);
        assert_eq!(restart, vec!["engine".to_string()]);
    }

    #[test]
    fn the_client_talks_to_the_server_over_a_unix_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let probe = Arc::new(Probe::default());
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, state(probe.clone()), stop.clone()).unwrap();
        let reply = client::send(&path, "set rate 16mbit").unwrap();
        assert!(reply.starts_with("ok"), "{reply}");
        assert_eq!(probe.rate.load(Ordering::Relaxed), 2_000_000);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        assert!(client::send(&path, "stats").is_err());
    }

    #[test]
    fn only_a_stale_socket_is_replaced_never_a_file_or_a_live_socket() {
        let dir = tempfile::tempdir().unwrap();
        let probe = Arc::new(Probe::default());
        let stop = Arc::new(AtomicBool::new(false));
        // A regular file at the path (a typo naming the config file, say) is kept.
        let file = dir.path().join("cakewalk.toml");
        std::fs::write(&file, "rate = 1").unwrap();
        let e = serve(&file, state(probe.clone()), stop.clone()).unwrap_err();
        assert!(matches!(e, ControlError::NotASocket { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "rate = 1");
        // A socket left by a process that died is replaced.
        let path = dir.path().join("ctl.sock");
        drop(UnixListener::bind(&path).unwrap());
        let h = serve(&path, state(probe.clone()), stop.clone()).unwrap();
        // A second server on a live socket is refused, and the first keeps serving.
        let e = serve(&path, state(probe.clone()), stop.clone()).unwrap_err();
        assert!(matches!(e, ControlError::InUse { .. }), "{e}");
        let reply = client::send(&path, "set rate 16mbit").unwrap();
        assert!(reply.starts_with("ok"), "{reply}");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    #[test]
    fn invalid_utf8_gets_a_reply_that_says_so_and_the_next_command_still_works() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let probe = Arc::new(Probe::default());
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, state(probe.clone()), stop.clone()).unwrap();
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"set rate \xff\xfe\nset rate 16mbit\n")
            .unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(
            reply.starts_with("error: the command is not valid UTF-8")
                && reply.contains("\nok rate 16mbit"),
            "{reply}"
        );
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    #[test]
    fn past_the_bound_the_oldest_connection_is_closed_and_a_new_client_served() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let probe = Arc::new(Probe::default());
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, state(probe.clone()), stop.clone()).unwrap();
        // Twice the bound of clients that send nothing and never read.
        let idle: Vec<UnixStream> = (0..2 * MAX_CONNECTIONS)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        // A real client is still answered, at once, every time.
        for _ in 0..5 {
            assert_eq!(client::send(&path, "stats").unwrap(), "text report\n");
        }
        // The oldest idle ones (silent longest) were closed to make room: they read EOF.
        let mut first = idle.into_iter().next().unwrap();
        first
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(first.read(&mut buf).unwrap(), 0);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    #[test]
    fn past_the_bound_a_client_trickling_a_command_outlasts_quiet_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let probe = Arc::new(Probe::default());
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, state(probe.clone()), stop.clone()).unwrap();
        // The busy client is the oldest connection, which the server used to shed first.
        let mut busy = UnixStream::connect(&path).unwrap();
        busy.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut replies = BufReader::new(busy.try_clone().unwrap());
        let mut ask = |busy: &mut UnixStream, bytes: &[u8]| {
            busy.write_all(bytes).unwrap();
            let mut reply = String::new();
            replies.read_line(&mut reply).unwrap();
            reply
        };
        assert_eq!(ask(&mut busy, b"stats\n"), "text report\n");
        let quiet: Vec<UnixStream> = (0..MAX_CONNECTIONS - 2)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        // Connections are taken in the order they came: once this one is answered, every
        // quiet one is in, and the busy client speaks after them all.
        assert_eq!(client::send(&path, "stats").unwrap(), "text report\n");
        assert_eq!(ask(&mut busy, b"stats\n"), "text report\n");
        busy.write_all(b"st").unwrap();
        // As many again as the bound: each sheds the connection silent longest.
        let newer: Vec<UnixStream> = (0..MAX_CONNECTIONS - 1)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        let mut buf = [0u8; 16];
        for mut q in quiet {
            q.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            assert_eq!(q.read(&mut buf).unwrap(), 0);
        }
        assert_eq!(ask(&mut busy, b"ats\n"), "text report\n");
        drop(newer);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    #[test]
    fn the_socket_is_the_owners_alone_and_an_endless_line_is_cut_off() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let probe = Arc::new(Probe::default());
        let stop = Arc::new(AtomicBool::new(false));
        let h = serve(&path, state(probe.clone()), stop.clone()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        // A megabyte without a newline: the server stops reading at its limit and closes.
        let mut s = UnixStream::connect(&path).unwrap();
        let junk = vec![b'x'; 1 << 20];
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        assert!(reply.len() < 1024, "{} bytes of reply", reply.len());
        // And it still serves the next client.
        let reply = client::send(&path, "set rate 16mbit").unwrap();
        assert!(reply.starts_with("ok"), "{reply}");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }
}
