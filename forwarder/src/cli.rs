//! The `cakewalk` command line (clap derive): `run`, `check-config`, `check-circuits`,
//! `explain`, `from-tc` and `ctl`. Each subcommand turns its flags into library calls; this
//! file and `main.rs` are the only places that use `anyhow` and print.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{self, units, Config, Overrides};
use crate::explain;

/// cakewalk: a poll-mode packet forwarder with a userspace CAKE shaper.
#[derive(Debug, Parser)]
#[command(name = "cakewalk", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Forward packets between two ports through the shaper.
    Run(RunArgs),
    /// Read a config file and print the effective configuration (exit 1 on error). Checks the
    /// file alone; `preflight --config FILE` checks the machine that runs it.
    CheckConfig(CheckArgs),
    /// Show how one packet would be classified: TX queue, tin, flow.
    Explain(ExplainArgs),
    /// Read subscriber circuit files (LibreQoS ShapedDevices.csv and network.json, or
    /// cakewalk's TOML form), report every problem with its file and line, and summarise the
    /// circuits, devices, prefixes and nodes, with the plans under each node against its cap
    /// (exit 1 on an error). Checks the files only: per-circuit shaping is not wired yet.
    CheckCircuits(CheckCircuitsArgs),
    /// Convert a tc cake command or option string to a `[shaper]` TOML section.
    FromTc(FromTcArgs),
    /// Talk to a running forwarder over its control socket.
    Ctl(CtlArgs),
    /// Check that this machine can run the configured ports (AF_PACKET: interface present and
    /// up, CAP_NET_RAW, MTU and offloads against the buffer size; DPDK: hugepages, IOMMU, NIC
    /// drivers) and cores, and print the fix for each problem (exit 1 when something blocks a
    /// start). Without --config: the DPDK checks.
    Preflight(PreflightArgs),
}

/// `cakewalk preflight`.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// TOML config file: its ports, workers and cores are checked, and the file itself.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// File-system root to inspect (for testing against a fake sysfs tree).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Hugepage memory needed, in MiB.
    #[arg(long, default_value_t = 512)]
    pub min_hugepage_mib: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Which queueing discipline to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueArg {
    /// CAKE.
    Cake,
    /// pfifo_fast-style FIFO.
    Fifo,
}

/// What an idle worker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IdleArg {
    /// Back off and sleep.
    Sleep,
    /// Busy-poll.
    Spin,
}

/// Port backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PortKindArg {
    /// Built-in generator and sink.
    Synth,
    /// pcap files.
    Pcap,
    /// Linux AF_PACKET sockets.
    Afpacket,
    /// DPDK (feature "dpdk").
    Dpdk,
}

fn rate_arg(s: &str) -> Result<String, String> {
    units::parse_rate(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// `--rate`: one rate for both directions, or `DOWNLOAD/UPLOAD`.
fn rate_pair_arg(s: &str) -> Result<String, String> {
    match s.split_once('/') {
        Some((down, up)) => {
            for (which, r) in [("download", down), ("upload", up)] {
                units::parse_rate(r.trim()).map_err(|e| {
                    format!("{e} (the {which} in DOWNLOAD/UPLOAD, as in 475mbit/45mbit)")
                })?;
            }
            Ok(s.to_string())
        }
        None => rate_arg(s),
    }
}

fn direction_arg(s: &str) -> Result<String, String> {
    config::direction::Direction::parse(s)
        .map(|d| d.name().to_string())
        .ok_or_else(|| format!("'{s}' is not a direction; use download or upload"))
}

fn duration_arg(s: &str) -> Result<String, String> {
    units::parse_run_length_ns(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

fn diffserv_arg(s: &str) -> Result<String, String> {
    config::keywords::parse_diffserv(s)
        .map(|_| s.to_string())
        .ok_or_else(|| {
            format!("'{s}' is not a diffserv mode; use besteffort, diffserv3, diffserv4, diffserv8 or precedence")
        })
}

fn flow_mode_arg(s: &str) -> Result<String, String> {
    config::keywords::parse_flow_mode(s)
        .map(|_| s.to_string())
        .ok_or_else(|| {
            format!("'{s}' is not a flow mode; use flowblind, srchost, dsthost, hosts, flows, dual-srchost, dual-dsthost or triple-isolate")
        })
}

/// Flags that override the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct OverrideArgs {
    /// Shaped rate, tc style ("500mbit", "2gbit", "unlimited"): one rate for both
    /// directions, or DOWNLOAD/UPLOAD ("475mbit/45mbit"). The download is what leaves
    /// towards the LAN (through the port that is not ports.uplink), the upload what leaves
    /// through the uplink port (port b unless ports.uplink says otherwise).
    #[arg(long, value_parser = rate_pair_arg, value_name = "RATE|DOWN/UP")]
    pub rate: Option<String>,
    /// Download rate only (shaper.download.rate): what leaves towards the LAN.
    #[arg(long, value_parser = rate_arg)]
    pub download: Option<String>,
    /// Upload rate only (shaper.upload.rate): what leaves through the uplink port.
    #[arg(long, value_parser = rate_arg)]
    pub upload: Option<String>,
    /// Diffserv mode (besteffort, diffserv3, diffserv4, diffserv8, precedence).
    #[arg(long, value_parser = diffserv_arg)]
    pub diffserv: Option<String>,
    /// Flow isolation mode (flowblind ... triple-isolate).
    #[arg(long, value_parser = flow_mode_arg)]
    pub flow_mode: Option<String>,
    /// Per-packet overhead: bytes (-64..256) or keywords ("ethernet", "docsis", "pppoe-ptm").
    #[arg(long, allow_hyphen_values = true)]
    pub overhead: Option<String>,
    /// tc cake option words for `[shaper]` options ("bandwidth 200mbit diffserv4 nat").
    #[arg(long)]
    pub tc: Option<String>,
    /// Queueing discipline per TX queue.
    #[arg(long, value_enum)]
    pub queue: Option<QueueArg>,
    /// Worker threads.
    #[arg(long)]
    pub workers: Option<u32>,
    /// TX queues (shaper instances) per port.
    #[arg(long)]
    pub queues: Option<u32>,
    /// Stop after this long ("10s"; "0" = until interrupted).
    #[arg(long, value_parser = duration_arg)]
    pub duration: Option<String>,
    /// What an idle worker does.
    #[arg(long, value_enum)]
    pub idle: Option<IdleArg>,
    /// Write stats as JSON lines to this file.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (127.0.0.1:9187, the port docs/metrics.md uses).
    #[arg(long)]
    pub prometheus: Option<String>,
    /// Control socket path.
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Backend for both ports.
    #[arg(long, value_enum)]
    pub port_kind: Option<PortKindArg>,
    /// pcap file read on port A.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// pcap file written with what port B transmits.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Interface(s) for afpacket/dpdk: "eth0" (port A) or "eth0,eth1" (A and B).
    #[arg(long)]
    pub iface: Option<String>,
    /// DPDK EAL arguments for dpdk ports, as one string ("-l 1-2 --vdev=net_null0").
    #[arg(long, allow_hyphen_values = true, value_name = "ARGS")]
    pub eal: Option<String>,
    /// Any other key: --set engine.burst=64 (the value is read as TOML, else as a string).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// Splits an `--eal '...'` string into arguments: whitespace separates, single or double
/// quotes group (no escapes; EAL arguments never need them).
fn split_eal_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn toml_value(s: &str) -> toml::Value {
    let doc = format!("v = {s}");
    toml::from_str::<toml::Table>(&doc)
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(s.to_string()))
}

fn path_value(p: &std::path::Path) -> toml::Value {
    toml::Value::String(p.display().to_string())
}

impl OverrideArgs {
    /// Turns the flags into config overrides.
    ///
    /// # Errors
    /// When a `--set` is not `KEY=VALUE`.
    pub fn to_overrides(&self) -> anyhow::Result<Overrides> {
        let mut o = Overrides::default();
        if let Some(v) = &self.tc {
            o.set("shaper.options", v.as_str(), "--tc");
        }
        match self.rate.as_deref().map(|v| v.split_once('/')) {
            Some(Some((down, up))) => {
                o.set("shaper.download.rate", down.trim(), "--rate");
                o.set("shaper.upload.rate", up.trim(), "--rate");
            }
            Some(None) => o.set("shaper.rate", self.rate.as_deref().unwrap_or(""), "--rate"),
            None => {}
        }
        if let Some(v) = &self.download {
            o.set("shaper.download.rate", v.as_str(), "--download");
        }
        if let Some(v) = &self.upload {
            o.set("shaper.upload.rate", v.as_str(), "--upload");
        }
        if let Some(v) = &self.diffserv {
            o.set("shaper.diffserv", v.as_str(), "--diffserv");
        }
        if let Some(v) = &self.flow_mode {
            o.set("shaper.flow_mode", v.as_str(), "--flow-mode");
        }
        if let Some(v) = &self.overhead {
            o.set("shaper.overhead", v.as_str(), "--overhead");
        }
        if let Some(q) = self.queue {
            let name = match q {
                QueueArg::Cake => "cake",
                QueueArg::Fifo => "fifo",
            };
            o.set("shaper.queue", name, "--queue");
        }
        if let Some(n) = self.workers {
            o.set("engine.workers", i64::from(n), "--workers");
        }
        if let Some(n) = self.queues {
            o.set("engine.tx_queues", i64::from(n), "--queues");
        }
        if let Some(d) = &self.duration {
            o.set("engine.duration", d.as_str(), "--duration");
        }
        if let Some(i) = self.idle {
            let name = match i {
                IdleArg::Sleep => "sleep",
                IdleArg::Spin => "spin",
            };
            o.set("engine.idle", name, "--idle");
        }
        if let Some(p) = &self.stats_json {
            o.set("stats.json", path_value(p), "--stats-json");
        }
        if let Some(a) = &self.prometheus {
            o.set("stats.prometheus", a.as_str(), "--prometheus");
        }
        if let Some(p) = &self.control {
            o.set("stats.control_socket", path_value(p), "--control");
        }
        if let Some(k) = self.port_kind {
            let name = match k {
                PortKindArg::Synth => "synth",
                PortKindArg::Pcap => "pcap",
                PortKindArg::Afpacket => "afpacket",
                PortKindArg::Dpdk => "dpdk",
            };
            o.set("ports.a.kind", name, "--port-kind");
            o.set("ports.b.kind", name, "--port-kind");
        }
        if let Some(p) = &self.input {
            o.set("ports.a.input", path_value(p), "--input");
        }
        if let Some(p) = &self.output {
            o.set("ports.b.output", path_value(p), "--output");
        }
        if let Some(i) = &self.iface {
            let mut parts = i.splitn(2, ',');
            if let Some(a) = parts.next().filter(|s| !s.is_empty()) {
                o.set("ports.a.iface", a, "--iface");
            }
            if let Some(b) = parts.next().filter(|s| !s.is_empty()) {
                o.set("ports.b.iface", b, "--iface");
            }
        }
        if let Some(e) = &self.eal {
            let args: Vec<toml::Value> = split_eal_args(e)
                .into_iter()
                .map(toml::Value::String)
                .collect();
            o.set("ports.eal_args", toml::Value::Array(args), "--eal");
        }
        for kv in &self.set {
            let (k, v) = kv.split_once('=').with_context(|| {
                format!("--set '{kv}' is not KEY=VALUE; try --set engine.burst=64")
            })?;
            o.set(k.trim(), toml_value(v.trim()), "--set");
        }
        Ok(o)
    }
}

/// `cakewalk run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML config file (defaults apply without one).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Overrides.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// `cakewalk check-config`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The config file.
    pub file: PathBuf,
    /// Overrides, checked too.
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// `cakewalk check-circuits`.
#[derive(Debug, Args)]
pub struct CheckCircuitsArgs {
    /// The files: `*.csv` (ShapedDevices), `*.json` (network.json), `*.toml` (cakewalk's form).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Show only what a box serving this node carries (its subtree and the path to the
    /// root), as `[circuits] serve_nodes` loads it; repeat for several, "(root)" for the
    /// circuits without a parent node.
    #[arg(long = "serve-node", value_name = "NAME")]
    pub serve_nodes: Vec<String>,
}

/// `cakewalk explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// TOML config file (for diffserv, flow mode and queue count).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// The packet: "tcp 10.0.0.1:1234 > 10.0.0.2:80 dscp ef" (or use the flags).
    pub spec: Vec<String>,
    /// Protocol, when the spec names none (an error when it does).
    #[arg(long)]
    pub proto: Option<String>,
    /// Source address with an optional port ("10.0.0.1:1234"), instead of a spec.
    #[arg(long)]
    pub src: Option<String>,
    /// Destination address with an optional port ("10.0.0.2:80"), instead of a spec.
    #[arg(long)]
    pub dst: Option<String>,
    /// DSCP, when not in the spec (number or name).
    #[arg(long)]
    pub dscp: Option<String>,
    /// The direction the packet travels: "download" (towards the LAN) or "upload" (out of the
    /// uplink port). Without it, both directions are shown when their settings differ.
    #[arg(long, value_parser = direction_arg)]
    pub direction: Option<String>,
    /// Overrides (e.g. --diffserv, --queues).
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// `cakewalk from-tc`.
#[derive(Debug, Args)]
pub struct FromTcArgs {
    /// The config whose ports say which interface carries which direction: a tc line's
    /// `dev` becomes the direction leaving through the port with that interface.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// The tc command or cake options, quoted or as separate words. Several tc commands (an
    /// egress cake on the uplink and an ingress cake on its ifb, one per line or each
    /// starting with `tc qdisc`) convert to [shaper.download] and [shaper.upload]: an ifb
    /// device is the download, the uplink's egress the upload.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub words: Vec<String>,
}

/// `cakewalk ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Control socket of the running forwarder (default: from --config, else the standard
    /// path).
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
    /// Config file the forwarder was started with (for its socket path).
    #[arg(long, short, global = true)]
    pub config: Option<PathBuf>,
    /// The request.
    #[command(subcommand)]
    pub request: CtlRequest,
}

/// Control requests.
#[derive(Debug, Subcommand)]
pub enum CtlRequest {
    /// Change a setting without losing packets, in both directions unless --direction or
    /// --port picks one.
    Set {
        /// Only this direction: "download" (what leaves towards the LAN) or "upload" (what
        /// leaves through the uplink port).
        #[arg(long, value_parser = direction_arg, conflicts_with = "port")]
        direction: Option<String>,
        /// Only the direction that leaves through the port with this name ([ports.a] name).
        #[arg(long)]
        port: Option<String>,
        /// What to change.
        #[command(subcommand)]
        what: CtlSet,
    },
    /// Print the current statistics.
    Stats {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// The circuits and nodes: `circuits [top N] [by rate|drops|sojourn] [json]`, or
    /// `circuits reload` to read the circuit files again.
    Circuits {
        /// `top N`, `by rate|drops|sojourn`, `json`, or `reload`.
        #[arg(trailing_var_arg = true)]
        words: Vec<String>,
    },
    /// Every node's sums over the circuits under it (virtual nodes too): `nodes [json]`.
    Nodes {
        /// `json` for one JSON object.
        #[arg(trailing_var_arg = true)]
        words: Vec<String>,
    },
    /// One circuit in full (`circuit ID [json]`), or a one-off plan change until the files
    /// are read again (`circuit set ID download|upload RATE`).
    Circuit {
        /// `ID [json]` or `set ID download|upload RATE`.
        #[arg(trailing_var_arg = true, required = true)]
        words: Vec<String>,
    },
}

/// Settings `ctl set` can change.
#[derive(Debug, Clone, Subcommand)]
pub enum CtlSet {
    /// Shaped rate ("500mbit").
    Rate {
        /// The rate.
        #[arg(value_parser = rate_arg)]
        rate: String,
    },
    /// Diffserv mode.
    Diffserv {
        /// The mode.
        #[arg(value_parser = diffserv_arg)]
        mode: String,
    },
    /// Overhead: bytes or keywords.
    Overhead {
        /// The overhead.
        #[arg(allow_hyphen_values = true)]
        overhead: String,
    },
    /// Flow isolation mode.
    FlowMode {
        /// The mode.
        #[arg(value_parser = flow_mode_arg)]
        mode: String,
    },
}

/// Writes `text` to standard output. A reader that went away (`cakewalk ctl stats | head`)
/// ends the output quietly, as SIGPIPE would end a C tool, instead of a panic in `print!`.
///
/// # Errors
/// Any other write error.
pub fn out(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Runs the parsed command line. Returns the process exit code.
///
/// # Errors
/// Anything that stops the command; `main` prints it as `error: {e:#}`.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            let overrides = args.overrides.to_overrides()?;
            let config = Config::load(args.config.as_deref(), &overrides)?;
            // SIGHUP re-reads the file and applies what can change live (reload.rs).
            let _reload =
                crate::reload::Reloader::spawn(args.config.clone(), overrides, config.clone())
                    .context("installing the SIGHUP handler")?;
            crate::app::run(config)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig(args) => {
            let overrides = args.overrides.to_overrides()?;
            let config = Config::load(Some(&args.file), &overrides)?;
            let circuits = match circuit_summary(&config) {
                Ok(lines) => lines,
                Err(e) => {
                    crate::log_line!("{e:#}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            out(&format!(
                "{}{circuits}{}",
                check_config_header(&args.file, &config),
                config.effective()
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain(args) => explain_cmd(args),
        Command::CheckCircuits(args) => check_circuits_cmd(&args),
        Command::FromTc(args) => {
            let input = args.words.join(" ");
            if input.trim() == "help" {
                out(&format!("{}\n", config::keywords::USAGE))?;
                return Ok(ExitCode::SUCCESS);
            }
            let ports = match &args.config {
                Some(path) => Some(Config::load(Some(path), &Overrides::default())?.ports),
                None => None,
            };
            let conversion = config::tc::convert_lines(&input, ports.as_ref())
                .with_context(|| format!("cannot convert tc options '{input}'"))?;
            let toml = conversion.toml;
            // The section must be one `cakewalk run` accepts (the shaper's limits, such as
            // its minimum rate, are checked when a config is loaded).
            Config::from_toml_str(&toml).with_context(|| {
                format!("tc options '{input}' convert to a [shaper] section cakewalk refuses")
            })?;
            for w in &conversion.warnings {
                crate::log_line!("warning: {w}");
            }
            out(&toml)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ctl(args) => ctl_cmd(args),
        Command::Preflight(args) => preflight_cmd(args),
    }
}

/// `check-circuits`: loads the files as the forwarder will, prints warnings and the summary,
/// or every problem and exit 1.
fn check_circuits_cmd(args: &CheckCircuitsArgs) -> anyhow::Result<ExitCode> {
    let mut texts = Vec::new();
    for path in &args.files {
        let name = path.display().to_string();
        let format = circuits::Format::from_name(&name).with_context(|| {
            format!("{name}: name a .csv (ShapedDevices), .json (network.json) or .toml file")
        })?;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
        texts.push((format, name, text));
    }
    let loaded = circuits::load(
        texts
            .iter()
            .map(|(f, name, text)| (*f, name.as_str(), text.as_str())),
    );
    match loaded {
        Ok((all, warnings)) => {
            for w in &warnings {
                crate::log_line!("{w}");
            }
            let set =
                circuits::serve::serve_nodes(&all, &args.serve_nodes).context("--serve-node")?;
            if !args.serve_nodes.is_empty() {
                out(&format!(
                    "serving {}: {} of {} circuits, {} of {} nodes (the subtrees and their path to the root)\n",
                    args.serve_nodes.join(", "),
                    set.circuits.len(),
                    all.circuits.len(),
                    set.nodes.len(),
                    all.nodes.len()
                ))?;
            }
            let mut summary = circuits::summary::Summary::of(&set);
            let table = circuits::prefix_table(&set).context("building the prefix table")?;
            summary.table_bytes = Some(table.memory_bytes());
            out(&format!("circuit files are valid\n{summary}"))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(circuits::Refused(problems)) => {
            for p in &problems {
                crate::log_line!("{p}");
            }
            let errors = problems
                .iter()
                .filter(|p| p.severity == circuits::Severity::Error)
                .count();
            crate::log_line!("error: {errors} problem(s) in the circuit files; nothing loaded");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// What `check-config` says about the circuits of `[circuits]`, as TOML comments: the files
/// read as `run` reads them, then one line per direction (circuits, plans against the link,
/// the queue options they run). Empty without circuits.
///
/// # Errors
/// A file that cannot be read, or every problem of the files, each with its file and line.
fn circuit_summary(config: &Config) -> anyhow::Result<String> {
    let Some(settings) = &config.circuits else {
        return Ok(String::new());
    };
    let (set, warnings) = crate::circuit::load(settings)?;
    let mut h = String::new();
    for w in &warnings {
        h.push_str(&comment_lines(&w.to_string()));
    }
    let cakes = config::direction::Direction::BOTH.map(|d| config.cake_for(d));
    let roster = crate::circuit::Roster::build(
        &set,
        settings,
        &cakes,
        &mut crate::circuit::SlotMap::default(),
        0,
        &Default::default(),
    )?;
    let files: Vec<String> = settings
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    h.push_str(&comment_lines(&format!(
        "circuits: {} from {}: {} devices, {} prefixes, {} nodes; unmatched traffic: {}",
        roster.len(),
        files.join(", "),
        roster.devices,
        roster.prefixes,
        roster.nodes.len(),
        match settings.unmatched {
            crate::circuit::Unmatched::Link => "the link's shaper alone".to_string(),
            u => format!("one shared circuit at {}", u.show()),
        }
    )));
    let links = cakes.map(|c| c.rate);
    for line in roster.summary_lines(&links) {
        h.push_str(&comment_lines(&line));
    }
    h.push('\n');
    Ok(h)
}

/// What `check-config` judged, as TOML comments above the effective configuration: the file
/// alone, not the machine it may be copied to.
fn check_config_header(file: &std::path::Path, config: &Config) -> String {
    let uses_machine = [&config.ports.a, &config.ports.b].iter().any(|p| {
        matches!(
            p.kind,
            crate::port::PortKind::Afpacket | crate::port::PortKind::Dpdk
        )
    });
    let mut h = format!(
        "# check-config {}: the file alone is valid (every key and value, and what\n\
         # `cakewalk run` refuses at start). This machine was not checked",
        file.display()
    );
    if uses_machine {
        h.push_str(&format!(
            ": its interfaces,\n\
             # capabilities, offloads and hugepages are checked on the box that runs it by\n\
             # `cakewalk preflight --config {}`.\n",
            file.display()
        ));
    } else {
        h.push_str(" (no interface ports are configured).\n");
    }
    let e = &config.engine;
    let (pick, why) = e.tx_select.resolve(e.workers, e.tx_queues, true);
    let mut note = format!("engine.tx_select: \"{}\" in effect ({why}).", pick.name());
    let dpdk_rx = [&config.ports.a, &config.ports.b]
        .iter()
        .any(|p| p.kind == crate::port::PortKind::Dpdk && p.rx_queues > 1);
    if pick == crate::engine::TxSelect::Worker
        && e.tx_select == crate::engine::TxSelect::Auto
        && dpdk_rx
    {
        note.push_str(" A DPDK NIC without RSS gets \"flow-hash\" at start instead.");
    }
    let receiving = [&config.ports.a, &config.ports.b]
        .iter()
        .map(|p| p.rx_queues.max(1))
        .max()
        .unwrap_or(1);
    if pick == crate::engine::TxSelect::Worker && receiving < e.workers {
        note.push_str(&format!(
            " With {receiving} receive queue(s) per port only {receiving} worker(s) receive and send; set rx_queues = {} in [ports.a] and [ports.b] to use every worker.",
            e.workers
        ));
    }
    h.push_str(&comment_lines(&note));
    h.push('\n');
    for dir in config::direction::Direction::BOTH {
        let port = config::direction::egress_port(config.ports.uplink, dir);
        let line = format!(
            "{}: leaves through port {} ({}): {}",
            dir.name(),
            ["a", "b"][port],
            config.ports.port_name(port),
            config::direction::summary(&config.cake_for(dir))
        );
        h.push_str(&comment_lines(&line));
    }
    h.push('\n');
    h
}

/// `text` as TOML comment lines of at most about 92 columns.
fn comment_lines(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > 92 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    if line.len() > 1 {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn preflight_cmd(args: PreflightArgs) -> anyhow::Result<ExitCode> {
    // On a real box, interfaces are asked of the kernel (this network namespace, as the
    // forwarder would open them); a fake tree answers from its own sys/class/net.
    let links = if args.root == std::path::Path::new("/") {
        crate::preflight::Links::Kernel
    } else {
        crate::preflight::Links::Sysfs
    };
    let mut opts = crate::preflight::Options {
        root: args.root.clone(),
        min_hugepage_mib: args.min_hugepage_mib,
        links,
        ..crate::preflight::Options::default()
    };
    if let Some(path) = &args.config {
        match Config::load(Some(path), &Overrides::default()) {
            Ok(config) => {
                opts = opts.with_ports(&config.ports);
                opts.queues = config.engine.workers.max(1);
                opts.cores = config.engine.cores.clone();
                opts.config = Some(Ok(()));
            }
            Err(e) => opts.config = Some(Err(e.to_string())),
        }
    }
    let report = crate::preflight::run(&opts);
    if args.json {
        out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report).context("encoding the report as JSON")?
        ))?;
    } else {
        out(&format!("{report}\n"))?;
    }
    Ok(if report.may_start() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn explain_cmd(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let overrides = args.overrides.to_overrides()?;
    let config = Config::load(args.config.as_deref(), &overrides)?;
    let spec_text = explain::compose_spec(
        &args.spec,
        &explain::SpecFlags {
            proto: args.proto.as_deref(),
            src: args.src.as_deref(),
            dst: args.dst.as_deref(),
            dscp: args.dscp.as_deref(),
        },
    )?;
    let spec = explain::PacketSpec::parse(&spec_text)?;
    let queues = config.engine.tx_queues.max(1);
    crate::flow_key::install_queue_key(config.shaper.seed);
    // The direction the packet travels picks the CAKE settings it meets: given, or both when
    // they differ (the same packet classifies alike when they do not).
    let dirs: Vec<config::direction::Direction> = match &args.direction {
        Some(d) => config::direction::Direction::parse(d).into_iter().collect(),
        None => config::direction::Direction::BOTH.to_vec(),
    };
    let same = config
        .directions
        .get(config::direction::Direction::Download)
        .cake
        == config
            .directions
            .get(config::direction::Direction::Upload)
            .cake;
    let mut text = String::new();
    for (i, dir) in dirs.iter().enumerate() {
        if args.direction.is_none() && same && i > 0 {
            break;
        }
        let mut e =
            explain::explain_queue(&spec, config.shaper.queue, &config.cake_for(*dir), queues)?;
        e.seeded = config.shaper.seed.is_some();
        if args.direction.is_some() || !same {
            let port = config::direction::egress_port(config.ports.uplink, *dir);
            text.push_str(&format!(
                "{}{} (leaves through port {}, {}):\n",
                if i > 0 { "\n" } else { "" },
                dir.name(),
                ["a", "b"][port],
                config.ports.port_name(port)
            ));
        }
        text.push_str(&e.to_string());
    }
    out(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn ctl_cmd(args: CtlArgs) -> anyhow::Result<ExitCode> {
    let socket = match (&args.socket, &args.config) {
        (Some(s), _) => s.clone(),
        (None, Some(path)) => {
            let config = Config::load(Some(path), &Overrides::default())?;
            match config
                .stats
                .get("control_socket")
                .and_then(toml::Value::as_str)
            {
                Some(s) if !s.is_empty() && s != "off" => PathBuf::from(s),
                _ => crate::control::default_socket_path(),
            }
        }
        (None, None) => crate::control::default_socket_path(),
    };
    let command = match &args.request {
        CtlRequest::Set {
            direction,
            port,
            what,
        } => {
            let selector = match (direction, port) {
                (Some(d), _) => format!("{d} "),
                (None, Some(p)) => format!("port {p} "),
                (None, None) => String::new(),
            };
            let setting = match what {
                CtlSet::Rate { rate } => format!("rate {rate}"),
                CtlSet::Diffserv { mode } => format!("diffserv {mode}"),
                CtlSet::Overhead { overhead } => {
                    if overhead.trim().parse::<i64>().is_ok() {
                        format!("overhead {overhead}")
                    } else {
                        overhead.clone()
                    }
                }
                CtlSet::FlowMode { mode } => format!("flow-mode {mode}"),
            };
            format!("set {selector}{setting}")
        }
        CtlRequest::Stats { json: true } => "stats json".to_string(),
        CtlRequest::Stats { json: false } => "stats".to_string(),
        CtlRequest::Circuits { words } if words.is_empty() => "circuits".to_string(),
        CtlRequest::Circuits { words } => format!("circuits {}", words.join(" ")),
        CtlRequest::Circuit { words } => format!("circuit {}", words.join(" ")),
        CtlRequest::Nodes { words } => format!("nodes {}", words.join(" ")).trim_end().to_string(),
    };
    let reply = crate::control::client::send(&socket, &command)
        .with_context(|| format!("sending '{command}' to {}", socket.display()))?;
    let reply = reply.trim_end();
    if let Some(err) = reply.strip_prefix("error: ") {
        anyhow::bail!("the forwarder refused '{command}': {err}");
    }
    out(&format!("{reply}\n"))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eal_strings_split_on_spaces_and_keep_quoted_groups() {
        assert_eq!(
            split_eal_args(
                "-l 1-2  --vdev=net_null0 --vdev='net_pcap0,rx_pcap=/tmp/a b.pcap' \"\""
            ),
            vec![
                "-l",
                "1-2",
                "--vdev=net_null0",
                "--vdev=net_pcap0,rx_pcap=/tmp/a b.pcap",
                ""
            ]
        );
        assert!(split_eal_args("   ").is_empty());
    }
}
