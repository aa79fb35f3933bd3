//! cakewalk's configuration: the TOML file (`[shaper]` here; `[ports]`, `[engine]`, `[stats]`
//! and `[control]` defined next to the code that uses them), command-line overrides laid on
//! top, tc-style units ([`units`]), tc's cake words ([`keywords`]) and the tc converter
//! ([`tc`]).
//!
//! Layering, lowest first: built-in defaults (the kernel's), `shaper.options` (a tc option
//! string), the individual `[shaper]` keys, then command-line overrides. Unknown keys are
//! errors, and every error names the key (or the flag) and a fix:
//! `shaper.rate: 'fast' is not a rate; try '200mbit'`. Reading the file is the only I/O.
//!
//! `[shaper]` keys (snake_case; the kebab-case spelling is accepted too):
//!
//! | key | value | tc word |
//! |---|---|---|
//! | `options` | tc cake words, applied first | the whole option string |
//! | `bandwidth` / `rate` | `"200mbit"`, `"unlimited"`, or an integer in bit/s | `bandwidth` |
//! | `autorate_ingress` | bool | `autorate-ingress` |
//! | `rtt` | `"100ms"`, an integer in µs, or a preset (`"lan"`, `"internet"` …) | `rtt`, presets |
//! | `target` | duration | — |
//! | `diffserv` | `besteffort` `diffserv3` `diffserv4` `diffserv8` `precedence` | same |
//! | `flow_mode` | `flowblind` … `triple-isolate` | same |
//! | `nat`, `wash`, `split_gso`, `ingress` | bool | `nat`/`nonat` … |
//! | `ack_filter` | `false`, `true`, `"aggressive"` | `ack-filter[-aggressive]` |
//! | `memlimit` | `"32mb"` or bytes | `memlimit` |
//! | `fwmark` | `0xff` or `"0xff"` | `fwmark` |
//! | `overhead` | bytes (-64..=256) or keywords (`"ethernet"`, `"pppoe-ptm ether-vlan"`) | `overhead`, keywords |
//! | `mpu` | 0..=256 | `mpu` |
//! | `atm` | `"atm"`, `"ptm"`, `"none"` | `atm`/`ptm`/`noatm` |
//! | `raw` | bool | `raw` |
//! | `packet_limit`, `mtu`, `seed` | integers | — |
//! | `queue` | `"cake"` or `"fifo"` | — |
//! | `sync_interval` | duration (default `"200us"`) | — |
//! | `sync_policy` | `"work-conserving"` or `"equal"` | — |
//! | `bypass` | bool (default true) | — |

pub mod direction;
pub mod keywords;
pub mod limits;
pub mod tc;
pub mod units;

#[cfg(test)]
mod props;
mod shaper;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use qdisc::cake::CakeConfig;
use serde::Deserialize;
use thiserror::Error;

use shaper::{cake_toml, RawShaper};
pub use shaper::{QueueKind, ShaperConfig, SyncPolicy};

/// A configuration that cannot be used, with where and how to fix it.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file '{}': {cause}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (part of this message, so not chained again: `{:#}` would print it twice).
        cause: std::io::Error,
    },
    /// The file is larger than any config file ([`limits::MAX_CONFIG_BYTES`]).
    #[error("config file '{}' is larger than {} KiB, the most cakewalk reads; is it the right file (not a device such as /dev/zero, or a capture)?", path.display(), limits::MAX_CONFIG_BYTES / 1024)]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The TOML did not parse or did not match the schema (unknown key, wrong type).
    #[error("{origin}: {message}")]
    Toml {
        /// The file name, or the override flags involved.
        origin: String,
        /// toml's message (with line and column for a file).
        message: String,
    },
    /// A key's value is not acceptable.
    #[error("{key}: {message}")]
    Key {
        /// `shaper.rate`, or `--rate (shaper.rate)` for an override.
        key: String,
        /// What is wrong and what to write instead.
        message: String,
    },
}

/// The whole file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    shaper: RawShaper,
    #[serde(default)]
    ports: crate::port::PortsConfig,
    #[serde(default)]
    engine: crate::engine::EngineConfig,
    #[serde(default)]
    stats: toml::Table,
    #[serde(default)]
    circuits: crate::circuit::CircuitsToml,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `[shaper]`: CAKE and the multi-queue layer.
    pub shaper: ShaperConfig,
    /// `[ports]`: the two ports and their backends.
    pub ports: crate::port::PortsConfig,
    /// `[engine]`: workers, TX queues, bursts, idle mode, duration.
    pub engine: crate::engine::EngineConfig,
    /// `[stats]`, until the stats module's typed section is committed.
    pub stats: toml::Table,
    /// Each direction's shaper: `[shaper]` with the direction's own keys on top.
    pub directions: direction::Directions,
    /// `[circuits]`: per-subscriber shaping, when it names files.
    pub circuits: Option<crate::circuit::CircuitsSettings>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            directions: direction::Directions::same_as(&ShaperConfig::default()),
            shaper: ShaperConfig::default(),
            ports: crate::port::PortsConfig::default(),
            engine: crate::engine::EngineConfig::default(),
            stats: toml::Table::new(),
            circuits: None,
        }
    }
}

/// One command-line override: a dotted key, its value, and the flag that set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// Dotted key (`shaper.rate`, `engine.workers`, `ports.a.kind`).
    pub key: String,
    /// The value, as TOML would hold it.
    pub value: toml::Value,
    /// The flag, for error messages (`--rate`).
    pub flag: String,
}

/// Command-line overrides, applied in order on top of the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// The overrides.
    pub entries: Vec<Override>,
}

/// Keys whose values are strings but may be written as a bare number on the command line
/// (durations with their "0 = none" form, names and interfaces that are numbers).
const STRING_KEYS: &[&str] = &[
    "engine.duration",
    "engine.drain_timeout",
    "stats.interval",
    "ports.a.name",
    "ports.b.name",
    "ports.a.iface",
    "ports.b.iface",
];

/// Keys that say the same thing: setting one from the command line removes the others from
/// the file's table, so the flag wins instead of clashing.
const SAME_MEANING: &[(&str, &[&str])] = &[
    ("shaper.rate", &["shaper.bandwidth"]),
    ("shaper.bandwidth", &["shaper.rate"]),
    ("shaper.overhead", &["shaper.raw"]),
    ("shaper.raw", &["shaper.overhead"]),
];

/// The keys that mean the same as `key`: `shaper.bandwidth` for `shaper.rate`, and so on in
/// a direction's table (`shaper.upload.bandwidth` for `shaper.upload.rate`).
fn same_meaning(key: &str) -> Vec<String> {
    let (prefix, last) = match key.strip_prefix("shaper.") {
        Some(rest) => match rest.split_once('.') {
            Some((dir, last)) => (format!("shaper.{dir}."), last),
            None => ("shaper.".to_string(), rest),
        },
        None => return Vec::new(),
    };
    SAME_MEANING
        .iter()
        .filter(|(k, _)| k.strip_prefix("shaper.") == Some(last))
        .flat_map(|(_, others)| others.iter())
        .filter_map(|o| o.strip_prefix("shaper."))
        .map(|o| format!("{prefix}{o}"))
        .collect()
}

impl Overrides {
    /// Adds `key = value`, set by `flag`.
    pub fn set(&mut self, key: &str, value: impl Into<toml::Value>, flag: &str) {
        self.entries.push(Override {
            key: key.to_string(),
            value: value.into(),
            flag: flag.to_string(),
        });
    }

    /// Returns true when nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Refuses two overrides of one key (or of two keys that mean the same, as `--rate` and
    /// `--set shaper.bandwidth=...`): the later would silently win.
    fn check_clashes(&self) -> Result<(), ConfigError> {
        let same = |a: &str, b: &str| a == b || same_meaning(a).contains(&b.to_string());
        for (i, later) in self.entries.iter().enumerate() {
            if let Some(first) = self.entries[..i].iter().find(|e| same(&e.key, &later.key)) {
                let flags = if first.flag == later.flag {
                    format!("{} given twice", first.flag)
                } else {
                    format!("{} and {}", first.flag, later.flag)
                };
                return Err(ConfigError::Key {
                    key: format!("{flags} ({})", later.key),
                    message: format!(
                        "both set {}; give only one of them",
                        if first.key == later.key {
                            first.key.clone()
                        } else {
                            format!("{} / {}", first.key, later.key)
                        }
                    ),
                });
            }
        }
        Ok(())
    }

    fn apply(&self, table: &mut toml::Table) -> Result<(), ConfigError> {
        self.check_clashes()?;
        for o in &self.entries {
            for other in same_meaning(&o.key) {
                remove_dotted(table, &other);
            }
            let value = match &o.value {
                // `--set engine.duration=0` or `--set ports.a.iface=0` (DPDK port 0) reads
                // as a TOML integer, and these keys hold strings: "expected a string" would
                // leave the user to guess at shell quoting. Numbers are what they meant.
                toml::Value::Integer(_) | toml::Value::Float(_)
                    if STRING_KEYS.contains(&o.key.as_str()) =>
                {
                    toml::Value::String(o.value.to_string())
                }
                v => v.clone(),
            };
            set_dotted(table, &o.key, value).map_err(|message| ConfigError::Key {
                key: format!("{} ({})", o.flag, o.key),
                message,
            })?;
        }
        Ok(())
    }

    /// How an error names `key`: `--rate (shaper.rate)` when a flag set `key` (or, failing
    /// that, one of the keys in `decided_by` that made it wrong), else just `key`.
    fn label(&self, key: &str, decided_by: &[&str]) -> String {
        match std::iter::once(key)
            .chain(decided_by.iter().copied())
            .find_map(|k| self.origin_of(k))
        {
            Some(o) => format!("{} ({key})", o.flag),
            None => key.to_string(),
        }
    }

    fn origin_of(&self, key: &str) -> Option<&Override> {
        self.entries.iter().rev().find(|o| o.key == key)
    }
}

/// Why autorate-ingress is refused on several TX queues, in the words of every path that
/// refuses it (the config loader, `from-tc` for cake_mq, the control socket, reload), so a
/// user sees one explanation wherever it was asked for.
pub const AUTORATE_NEEDS_ONE_QUEUE: &str = "autorate-ingress needs one TX queue: the queues share one rate and each sees only part of the arrivals";

/// Why `cake` cannot run on `tx_queues` queues, if it cannot: autorate-ingress estimates
/// the link rate from one instance's arrivals, but cake_mq's queues each see only part of
/// the traffic and share one rate (Linux refuses `autorate-ingress` on cake_mq too,
/// tc-testing 5f62). The config loader, the control socket and SIGHUP reload all ask this;
/// `from-tc` refuses cake_mq with autorate-ingress with the same reason.
pub fn autorate_conflict(cake: &CakeConfig, tx_queues: usize) -> Option<String> {
    (cake.autorate_ingress && tx_queues > 1).then(|| {
        format!(
            "{AUTORATE_NEEDS_ONE_QUEUE} (Linux refuses it on cake_mq as well), but engine.tx_queues is {tx_queues}; set engine.tx_queues = 1 (--queues 1) or give a fixed rate"
        )
    })
}

/// Refuses the `[ports]`, `[engine]` and `[stats]` values `cakewalk run` would refuse (or
/// silently replace) at start, so that `check-config`, `preflight` and a SIGHUP reload judge
/// a file as `run` does: the shaper section alone passing is not a config that starts.
fn check_run_settings(
    ports: &crate::port::PortsConfig,
    engine: &crate::engine::EngineConfig,
    stats: &toml::Table,
    overrides: &Overrides,
) -> Result<(), ConfigError> {
    if let Err(e) = engine.timing() {
        let (key, message) = match &e {
            crate::engine::EngineError::BadSetting { name, value, hint } => (
                format!("engine.{name}"),
                format!("{value} is out of range; use {hint}"),
            ),
            other => ("engine".to_string(), other.to_string()),
        };
        return Err(ConfigError::Key {
            key: overrides.label(&key, &[]),
            message,
        });
    }
    use limits::*;
    let counts = [
        (
            "ports.pool_buffers",
            ports.pool_buffers,
            1,
            MAX_POOL_BUFFERS,
            "1 to 4194304; the default 16384 suits up to about 1 Gbit/s (docs/operations.md, Sizing)",
        ),
        (
            "ports.buffer_size",
            ports.buffer_size,
            crate::port::pool::MIN_BUF_SIZE,
            MAX_BUFFER_SIZE,
            "the largest frame a port carries, 64 to 262144 bytes (2048, the default, holds a 1500-byte MTU)",
        ),
        ("ports.a.rx_queues", ports.a.rx_queues, 1, MAX_RX_QUEUES, "1 to 1024"),
        ("ports.b.rx_queues", ports.b.rx_queues, 1, MAX_RX_QUEUES, "1 to 1024"),
        (
            "ports.synth.flows",
            ports.synth.flows as usize,
            1,
            MAX_SYNTH_FLOWS as usize,
            "1 to 1048576",
        ),
        (
            "engine.cores",
            engine.cores.len(),
            0,
            MAX_CORES_LISTED,
            "at most 1024 cores, one per worker",
        ),
    ];
    for (key, value, min, max, hint) in counts {
        // A list is judged by its length.
        let shown = if key == "engine.cores" {
            format!("a list of {value}")
        } else {
            value.to_string()
        };
        let message = if value < min {
            format!("{shown} is too small; use {hint}")
        } else if value > max {
            format!("{shown} is too large; use {hint}")
        } else {
            continue;
        };
        return Err(ConfigError::Key {
            key: overrides.label(key, &[]),
            message,
        });
    }
    if let Some(&core) = engine.cores.iter().find(|&&c| c > MAX_CORE_ID) {
        return Err(ConfigError::Key {
            key: overrides.label("engine.cores", &[]),
            message: format!("core {core} is not a core number; cores are numbered from 0 (at most {MAX_CORE_ID}), as in /proc/cpuinfo"),
        });
    }
    let pool_bytes = ports.pool_buffers as u64 * ports.buffer_size as u64;
    if pool_bytes > MAX_POOL_BYTES {
        return Err(ConfigError::Key {
            key: overrides.label("ports.pool_buffers", &["ports.buffer_size"]),
            message: format!(
                "{} buffers of {} bytes take {:.1} GiB per port, more than the 4 GiB a pool may take; lower ports.pool_buffers or ports.buffer_size",
                ports.pool_buffers,
                ports.buffer_size,
                pool_bytes as f64 / f64::from(1u32 << 30)
            ),
        });
    }
    let stats: crate::stats::StatsConfig =
        toml::Value::Table(stats.clone())
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Toml {
                origin: "in the [stats] section".to_string(),
                message: e.to_string().trim_end().to_string(),
            })?;
    if let Err(message) = crate::stats::CircuitMetrics::parse(&stats.circuit_metrics) {
        return Err(ConfigError::Key {
            key: overrides.label("stats.circuit_metrics", &[]),
            message,
        });
    }
    if units::parse_optional_duration_ns(&stats.interval).is_err() {
        return Err(ConfigError::Key {
            key: overrides.label("stats.interval", &[]),
            message: format!(
                "'{}' is not a duration; use one with its unit, like '10s' or '500ms'",
                stats.interval
            ),
        });
    }
    if let Some(addr) = &stats.prometheus {
        let message = match addr.parse::<std::net::SocketAddr>() {
            Err(_) => Some(format!(
                "'{addr}' is not an address:port; use one like \"127.0.0.1:9187\""
            )),
            Ok(sa) if !sa.ip().is_loopback() && !stats.prometheus_public => Some(format!(
                "'{addr}' is not loopback; use 127.0.0.1 or set stats.prometheus_public = true"
            )),
            Ok(_) => None,
        };
        if let Some(message) = message {
            return Err(ConfigError::Key {
                key: overrides.label("stats.prometheus", &[]),
                message,
            });
        }
    }
    Ok(())
}

/// Refuses a port key that the port's backend never reads (`--input` on a synth port, an
/// `iface` on a pcap port), which would otherwise be silently ignored.
fn check_port_keys(
    ports: &crate::port::PortsConfig,
    overrides: &Overrides,
) -> Result<(), ConfigError> {
    use crate::port::PortKind;
    for (side, spec) in [("a", &ports.a), ("b", &ports.b)] {
        let checks: [(&str, bool, &[PortKind]); 3] = [
            ("input", spec.input.is_some(), &[PortKind::Pcap]),
            ("output", spec.output.is_some(), &[PortKind::Pcap]),
            (
                "iface",
                !spec.iface.is_empty(),
                &[PortKind::Afpacket, PortKind::Dpdk],
            ),
        ];
        for (field, set, kinds) in checks {
            if !set || kinds.contains(&spec.kind) {
                continue;
            }
            let key = format!("ports.{side}.{field}");
            let key = overrides.label(&key, &[]);
            let readers: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
            return Err(ConfigError::Key {
                key,
                message: format!(
                    "only {} ports use it, but port {side} is a {} port; add --port-kind {} (or kind = \"{}\" in [ports.{side}]), or leave it out",
                    readers.join(" and "),
                    spec.kind.name(),
                    readers[0],
                    readers[0],
                ),
            });
        }
    }
    // Interface ports need their interface, and two of them need two.
    for (side, spec) in [("a", &ports.a), ("b", &ports.b)] {
        if matches!(spec.kind, PortKind::Afpacket | PortKind::Dpdk) && spec.iface.trim().is_empty()
        {
            return Err(ConfigError::Key {
                key: overrides.label(&format!("ports.{side}.iface"), &["ports.a.iface"]),
                message: format!(
                    "port {side} ({}) names no interface; give both as --iface A,B (or iface = \"...\" in [ports.{side}])",
                    spec.kind.name()
                ),
            });
        }
        // No machine has such an interface (the kernel's dev_valid_name): say so here,
        // where the file is checked, not only when preflight or the run looks for it.
        let name = spec.iface.trim();
        let impossible = name.len() > 15
            || name == "."
            || name == ".."
            || name
                .chars()
                .any(|c| c == '/' || c == ':' || c.is_whitespace());
        if spec.kind == PortKind::Afpacket && impossible {
            return Err(ConfigError::Key {
                key: overrides.label(&format!("ports.{side}.iface"), &["ports.a.iface"]),
                message: format!(
                    "'{name}' cannot be a Linux interface name (at most 15 bytes, no '/', ':' or spaces); use the name `ip link` shows"
                ),
            });
        }
    }
    if ports.a.kind == ports.b.kind
        && matches!(ports.a.kind, PortKind::Afpacket | PortKind::Dpdk)
        && ports.a.iface.trim() == ports.b.iface.trim()
    {
        return Err(ConfigError::Key {
            key: overrides.label("ports.b.iface", &[]),
            message: format!(
                "both ports are '{}': cakewalk forwards between two interfaces; name a different one for port b",
                ports.b.iface.trim()
            ),
        });
    }
    let dpdk = |spec: &crate::port::PortSpec| spec.kind == PortKind::Dpdk;
    if !ports.eal_args.is_empty() && !dpdk(&ports.a) && !dpdk(&ports.b) {
        return Err(ConfigError::Key {
            key: overrides.label("ports.eal_args", &[]),
            message: format!(
                "only dpdk ports use it, but port a is a {} port and port b a {} port; add --port-kind dpdk (or kind = \"dpdk\" in [ports.a] and [ports.b]), or leave it out",
                ports.a.kind.name(),
                ports.b.kind.name(),
            ),
        });
    }
    Ok(())
}

fn set_dotted(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().ok_or("empty key")?;
    let mut t = table;
    for p in parts {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = entry
            .as_table_mut()
            .ok_or_else(|| format!("'{p}' is not a table in the config file"))?;
    }
    t.insert(last.to_string(), value);
    Ok(())
}

fn remove_dotted(table: &mut toml::Table, key: &str) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut t = table;
    for p in parts {
        match t.get_mut(p).and_then(toml::Value::as_table_mut) {
            Some(next) => t = next,
            None => return,
        }
    }
    t.remove(last);
}

/// Reads the text of the config file at `p`, at most [`limits::MAX_CONFIG_BYTES`] of it.
fn read_limited(p: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let read_err = |cause| ConfigError::Read {
        path: p.to_path_buf(),
        cause,
    };
    let file = std::fs::File::open(p).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(limits::MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limits::MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: p.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (byte {} is not valid UTF-8)",
                e.utf8_error().valid_up_to()
            ),
        ))
    })
}

impl Config {
    /// Reads the config file at `path` (or starts from the defaults when `None`) and lays
    /// `overrides` on top.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, key or flag at fault.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let (text, origin) = match path {
            Some(p) => (read_limited(p)?, p.display().to_string()),
            None => (String::new(), "defaults".to_string()),
        };
        let mut config = Config::from_toml_with(&text, &origin, overrides)?;
        // Circuit files are named relative to the config file, wherever cakewalk runs.
        if let (Some(c), Some(dir)) = (config.circuits.as_mut(), path.and_then(Path::parent)) {
            c.base = Some(dir.to_path_buf());
        }
        Ok(config)
    }

    /// Parses a config from TOML text with no overrides.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key at fault.
    ///
    /// # Examples
    /// ```
    /// let c = forwarder::config::Config::from_toml_str("[shaper]\nrate = \"200mbit\"").unwrap();
    /// assert_eq!(c.to_cake_config().rate.bits_per_sec(), 200_000_000);
    /// let e = forwarder::config::Config::from_toml_str("[shaper]\nrate = \"fast\"").unwrap_err();
    /// assert_eq!(e.to_string(), "shaper.rate: 'fast' is not a rate; try '200mbit' (bit/s units: bit kbit mbit gbit tbit; byte/s: byte kbyte mbyte gbyte)");
    /// ```
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_with(text, "config", &Overrides::default())
    }

    fn from_toml_with(
        text: &str,
        origin: &str,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        // Parse the text as written first, so schema errors point at the user's lines.
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Toml {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let raw = if overrides.is_empty() {
            raw
        } else {
            let mut table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Toml {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
            overrides.apply(&mut table)?;
            let flags: Vec<&str> = overrides.entries.iter().map(|o| o.flag.as_str()).collect();
            RawConfig::deserialize(toml::Value::Table(table)).map_err(|e| ConfigError::Toml {
                origin: format!("command-line overrides ({})", flags.join(" ")),
                message: e.to_string().trim_end().to_string(),
            })?
        };
        let mut raw = raw;
        let mut tables = [
            direction::DirectionTables {
                named: raw.shaper.download.take(),
                per_port: None,
            },
            direction::DirectionTables {
                named: raw.shaper.upload.take(),
                per_port: None,
            },
        ];
        let shaper = raw.shaper.resolve().map_err(|e| match e {
            ConfigError::Key { key, message } => ConfigError::Key {
                key: overrides.label(&key, &[]),
                message,
            },
            other => other,
        })?;
        for dir in direction::Direction::BOTH {
            let port = direction::egress_port(raw.ports.uplink, dir);
            let spec = if port == 0 {
                &mut raw.ports.a
            } else {
                &mut raw.ports.b
            };
            tables[dir as usize].per_port = spec.shaper.take();
        }
        let directions = direction::resolve(&shaper, raw.ports.uplink, tables, overrides)?;
        check_port_keys(&raw.ports, overrides)?;
        check_run_settings(&raw.ports, &raw.engine, &raw.stats, overrides)?;
        if let Some(message) = autorate_conflict(&shaper.cake, raw.engine.tx_queues) {
            return Err(ConfigError::Key {
                key: overrides.label("shaper.autorate_ingress", &["engine.tx_queues"]),
                message,
            });
        }
        for dir in direction::Direction::BOTH {
            let own = &directions.get(dir).own;
            if own.autorate_ingress.is_none() {
                continue;
            }
            if let Some(message) =
                autorate_conflict(&directions.get(dir).cake, raw.engine.tx_queues)
            {
                let key = format!("shaper.{}.autorate_ingress", dir.name());
                return Err(ConfigError::Key {
                    key: overrides.label(&key, &["engine.tx_queues"]),
                    message,
                });
            }
        }
        let circuits = crate::circuit::CircuitsSettings::resolve(&raw.circuits).map_err(
            |(key, message)| ConfigError::Key {
                key: overrides.label(&key, &[]),
                message,
            },
        )?;
        if circuits.is_some() && shaper.queue != QueueKind::Cake {
            return Err(ConfigError::Key {
                key: overrides.label("circuits.files", &["shaper.queue"]),
                message: "circuits are shaped by CAKE, but shaper.queue is \"fifo\"; set shaper.queue = \"cake\" or leave [circuits] files empty".into(),
            });
        }
        Ok(Config {
            shaper,
            ports: raw.ports,
            engine: raw.engine,
            stats: raw.stats,
            directions,
            circuits,
        })
    }

    /// The CAKE configuration every TX queue starts with.
    pub fn to_cake_config(&self) -> CakeConfig {
        CakeConfig {
            hash_key: crate::flow_key::cake_key(self.shaper.seed),
            ..self.shaper.cake.clone()
        }
    }

    /// The direction that leaves through egress port `port` (0 = A, 1 = B).
    pub fn egress_direction(&self, port: usize) -> direction::Direction {
        direction::of_egress(self.ports.uplink, port)
    }

    /// The CAKE configuration of `dir`'s TX queues.
    pub fn cake_for(&self, dir: direction::Direction) -> CakeConfig {
        CakeConfig {
            hash_key: crate::flow_key::cake_key(self.shaper.seed),
            ..self.directions.get(dir).cake.clone()
        }
    }

    /// The CAKE configuration of the TX queues of egress port `port`.
    pub fn cake_for_egress(&self, port: usize) -> CakeConfig {
        self.cake_for(self.egress_direction(port))
    }

    /// Renders the effective configuration as TOML that reads back as the same
    /// configuration: `[shaper]` with every default filled in, each direction's effective
    /// CAKE settings (`[shaper.download]`, `[shaper.upload]`), then `[ports]`, `[engine]` and
    /// `[stats]` as resolved.
    pub fn effective(&self) -> String {
        let mut out = self.shaper.to_toml();
        for dir in direction::Direction::BOTH {
            let port = direction::egress_port(self.ports.uplink, dir);
            let towards = match dir {
                direction::Direction::Download => "towards the LAN",
                direction::Direction::Upload => "towards the uplink (ports.uplink)",
            };
            let _ = writeln!(
                out,
                "\n# {}: what leaves through port {} ({}) {towards}; every CAKE key in effect",
                dir.name(),
                ["a", "b"][port],
                self.ports.port_name(port),
            );
            out.push_str(&cake_toml(
                &self.directions.get(dir).cake,
                &format!("shaper.{}", dir.name()),
            ));
        }
        #[derive(serde::Serialize)]
        struct Sections<'a> {
            ports: &'a crate::port::PortsConfig,
            engine: &'a crate::engine::EngineConfig,
        }
        let sections = Sections {
            ports: &self.ports,
            engine: &self.engine,
        };
        match toml::to_string(&sections) {
            Ok(text) => {
                let _ = write!(out, "\n{text}");
            }
            // Not reachable for these plain structs; say so rather than print nothing.
            Err(e) => {
                let _ = writeln!(out, "\n# [ports] and [engine] could not be rendered: {e}");
            }
        }
        // Every [stats] key, defaults included, as for the other sections (a file that sets
        // none used to show no [stats] at all). Loading checked that the table parses.
        let stats: crate::stats::StatsConfig = toml::Value::Table(self.stats.clone())
            .try_into()
            .unwrap_or_default();
        #[derive(serde::Serialize)]
        struct StatsSection<'a> {
            stats: &'a crate::stats::StatsConfig,
        }
        match toml::to_string(&StatsSection { stats: &stats }) {
            Ok(text) => {
                let _ = write!(out, "\n{text}");
            }
            Err(e) => {
                let _ = writeln!(out, "\n# [stats] could not be rendered: {e}");
            }
        }
        if stats.control_socket.is_empty() {
            let _ = writeln!(
                out,
                "# control_socket \"\" is the default path, here {}",
                crate::control::default_socket_path().display()
            );
        }
        if let Some(c) = &self.circuits {
            #[derive(serde::Serialize)]
            struct CircuitsSection {
                circuits: crate::circuit::CircuitsToml,
            }
            match toml::to_string(&CircuitsSection {
                circuits: c.to_toml(),
            }) {
                Ok(text) => {
                    let _ = write!(out, "\n{text}");
                }
                Err(e) => {
                    let _ = writeln!(out, "\n# [circuits] could not be rendered: {e}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
