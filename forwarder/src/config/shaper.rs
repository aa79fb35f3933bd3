//! The `[shaper]` table: the TOML keys as written ([`RawShaper`]), their checks and their
//! resolution into the CAKE configuration and queue settings in force ([`ShaperConfig`]),
//! and the effective table printed back. Keys given both in the tc-style `options` string
//! and as TOML keys resolve to the keys.

use std::fmt::Write as _;

use qdisc::cake::{AckFilterMode, AtmMode, CakeConfig};
use qdisc::Rate;
use serde::Deserialize;

use super::keywords::{self, CakeOptions};
use super::units::{self, UnitError};
use super::{limits, tc, ConfigError};

/// Which queueing discipline each TX queue runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueKind {
    /// CAKE (the default).
    #[default]
    Cake,
    /// The pfifo_fast-style baseline.
    Fifo,
}

impl QueueKind {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Cake => "cake",
            QueueKind::Fifo => "fifo",
        }
    }
}

/// How the global rate is split between active TX queues (DESIGN.md, rate sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Queues using less than their share give the rest to busy ones (the default).
    #[default]
    WorkConserving,
    /// Each active queue gets rate / active, as Linux's cake_mq does.
    Equal,
}

impl SyncPolicy {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            SyncPolicy::WorkConserving => "work-conserving",
            SyncPolicy::Equal => "equal",
        }
    }
}

/// The resolved `[shaper]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShaperConfig {
    /// Every CAKE option, defaults filled in.
    pub cake: CakeConfig,
    /// The CAKE options that were given (from `options` and the keys), for printing.
    pub given: CakeOptions,
    /// CAKE or FIFO per TX queue.
    pub queue: QueueKind,
    /// How often each queue rescales its share of the rate, ns (default 200 µs).
    pub sync_interval_ns: u64,
    /// How the rate is split between active queues.
    pub sync_policy: SyncPolicy,
    /// Allow the empty-queue enqueue bypass (default on).
    pub bypass: bool,
    /// The configured `seed`: CAKE's random numbers and the flow hash key. `None`: the
    /// random numbers use CAKE's default seed and the key is drawn at random per process
    /// ([`crate::flow_key`]).
    pub seed: Option<u64>,
}

impl Default for ShaperConfig {
    fn default() -> Self {
        ShaperConfig {
            cake: CakeConfig::default(),
            given: CakeOptions::default(),
            queue: QueueKind::Cake,
            sync_interval_ns: 200_000,
            sync_policy: SyncPolicy::WorkConserving,
            bypass: true,
            seed: None,
        }
    }
}

/// The `[shaper]` table as written. Flexible values (`"200mbit"` or `200000000`) stay
/// `toml::Value` until [`RawShaper::resolve`], which knows each key's name for its errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShaper {
    options: Option<String>,
    bandwidth: Option<toml::Value>,
    rate: Option<toml::Value>,
    #[serde(alias = "autorate-ingress")]
    autorate_ingress: Option<bool>,
    rtt: Option<toml::Value>,
    target: Option<toml::Value>,
    diffserv: Option<String>,
    #[serde(alias = "flow-mode")]
    flow_mode: Option<String>,
    nat: Option<bool>,
    wash: Option<bool>,
    #[serde(alias = "split-gso")]
    split_gso: Option<bool>,
    ingress: Option<bool>,
    #[serde(alias = "ack-filter")]
    ack_filter: Option<toml::Value>,
    memlimit: Option<toml::Value>,
    fwmark: Option<toml::Value>,
    overhead: Option<toml::Value>,
    mpu: Option<i64>,
    atm: Option<toml::Value>,
    raw: Option<bool>,
    #[serde(alias = "packet-limit", alias = "limit")]
    pub(super) packet_limit: Option<i64>,
    pub(super) mtu: Option<i64>,
    seed: Option<u64>,
    queue: Option<String>,
    #[serde(alias = "sync-interval")]
    sync_interval: Option<toml::Value>,
    #[serde(alias = "sync-policy")]
    sync_policy: Option<String>,
    bypass: Option<bool>,
    /// `[shaper.download]`: the download's own keys ([`super::direction`]).
    pub(super) download: Option<toml::Table>,
    /// `[shaper.upload]`: the upload's own keys.
    pub(super) upload: Option<toml::Table>,
}

/// Words allowed in a string `overhead` key.
const OVERHEAD_WORDS: &[&str] = &[
    "raw",
    "conservative",
    "ethernet",
    "docsis",
    "ether-vlan",
    "pppoe-ptm",
    "bridged-ptm",
    "ipoa-vcmux",
    "ipoa-llcsnap",
    "bridged-vcmux",
    "bridged-llcsnap",
    "pppoa-vcmux",
    "pppoa-llc",
    "pppoe-vcmux",
    "pppoe-llcsnap",
    "via-ethernet",
    "atm",
    "ptm",
    "noatm",
];

fn key_err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Key {
        key: format!("shaper.{key}"),
        message: message.into(),
    }
}

fn unit_err(key: &str, e: UnitError) -> ConfigError {
    let text = e.to_string();
    // "rate 'x' is not a rate; ..." reads better after the key without its leading kind.
    let message = text
        .split_once(' ')
        .filter(|(_, rest)| rest.starts_with('\''))
        .map_or(text.clone(), |(_, rest)| rest.to_string());
    key_err(key, message)
}

fn value_kind(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

fn parse_rate_value(key: &str, v: &toml::Value) -> Result<Rate, ConfigError> {
    match v {
        toml::Value::String(s) => units::parse_rate(s).map_err(|e| unit_err(key, e)),
        toml::Value::Integer(n) if (1..8).contains(n) => Err(unit_err(
            key,
            UnitError::RateTooSmall {
                value: n.to_string(),
            },
        )),
        toml::Value::Integer(n) if *n >= 0 => Ok(Rate::from_bits_per_sec(*n as u64)),
        toml::Value::Integer(n) => Err(key_err(
            key,
            format!("{n} is negative; expected a rate such as \"200mbit\" (an integer is bit/s)"),
        )),
        other => Err(key_err(
            key,
            format!(
                "expected a rate such as \"200mbit\" (an integer is bit/s), found {}",
                value_kind(other)
            ),
        )),
    }
}

fn parse_duration_value(key: &str, v: &toml::Value) -> Result<u64, ConfigError> {
    match v {
        toml::Value::String(s) => units::parse_duration_ns(s).map_err(|e| unit_err(key, e)),
        toml::Value::Integer(n) if *n >= 0 => (*n as u64).checked_mul(1000).ok_or_else(|| {
            key_err(
                key,
                format!("{n} µs is too long to count in ns; expected a duration such as \"5ms\" (an integer is µs)"),
            )
        }),
        toml::Value::Integer(n) => Err(key_err(
            key,
            format!("{n} is negative; expected a duration such as \"5ms\" (an integer is µs)"),
        )),
        other => Err(key_err(
            key,
            format!(
                "expected a duration such as \"5ms\" (an integer is µs), found {}",
                value_kind(other)
            ),
        )),
    }
}

fn parse_size_value(key: &str, v: &toml::Value) -> Result<u64, ConfigError> {
    match v {
        toml::Value::String(s) => units::parse_size(s).map_err(|e| unit_err(key, e)),
        toml::Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        toml::Value::Integer(n) => Err(key_err(
            key,
            format!("{n} is negative; expected a size such as \"32mb\" (an integer is bytes)"),
        )),
        other => Err(key_err(
            key,
            format!(
                "expected a size such as \"32mb\" (an integer is bytes), found {}",
                value_kind(other)
            ),
        )),
    }
}

/// `ns` when it is at most [`limits::MAX_AQM_TIME_NS`].
fn aqm_time(key: &str, ns: u64) -> Result<u64, ConfigError> {
    if ns > limits::MAX_AQM_TIME_NS {
        return Err(key_err(
            key,
            format!(
                "{} is longer than the 1h the AQM can be tuned for (the 'interplanetary' preset); use a shorter duration or a preset",
                units::format_duration_ns(ns)
            ),
        ));
    }
    Ok(ns)
}

fn ranged(key: &str, n: i64, lo: i64, hi: i64) -> Result<i64, ConfigError> {
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(key_err(
            key,
            format!("{n} is out of range; valid range is {lo} to {hi}"),
        ))
    }
}

impl RawShaper {
    pub(super) fn resolve(self) -> Result<ShaperConfig, ConfigError> {
        let mut given = match &self.options {
            Some(s) => CakeOptions::parse(s).map_err(|e| key_err("options", e.to_string()))?,
            None => CakeOptions::default(),
        };
        // The TOML keys win over the same settings in the `options` string.
        given.merge(&self.cake_keys()?);
        let mut shaper = ShaperConfig {
            given,
            ..ShaperConfig::default()
        };
        shaper.given.apply_to(&mut shaper.cake);
        self.apply_queue_keys(&mut shaper)?;
        shaper.cake.validate().map_err(|e| ConfigError::Key {
            key: "shaper".to_string(),
            message: e.to_string(),
        })?;
        Ok(shaper)
    }

    /// The CAKE settings given as TOML keys, checked in the order of the table's keys.
    fn cake_keys(&self) -> Result<CakeOptions, ConfigError> {
        let mut keys = CakeOptions::default();
        self.rate_keys(&mut keys)?;
        self.aqm_keys(&mut keys)?;
        self.mode_keys(&mut keys)?;
        self.limit_keys(&mut keys)?;
        self.framing_keys(&mut keys)?;
        Ok(keys)
    }

    /// `rate` (or its tc name `bandwidth`) and `autorate_ingress`.
    fn rate_keys(&self, keys: &mut CakeOptions) -> Result<(), ConfigError> {
        match (&self.bandwidth, &self.rate) {
            (Some(_), Some(_)) => {
                return Err(key_err(
                    "rate",
                    "both 'rate' and 'bandwidth' are set; they are the same key, keep one",
                ))
            }
            (Some(v), None) => keys.rate = Some(parse_rate_value("bandwidth", v)?),
            (None, Some(v)) => keys.rate = Some(parse_rate_value("rate", v)?),
            (None, None) => {}
        }
        if keys.rate.is_some() && self.autorate_ingress.is_none() {
            // As in tc, giving a bandwidth turns autorate off unless asked for.
            keys.autorate_ingress = Some(false);
        }
        if self.autorate_ingress.is_some() {
            keys.autorate_ingress = self.autorate_ingress;
        }
        Ok(())
    }

    /// `rtt` (a duration or a preset) and `target`.
    fn aqm_keys(&self, keys: &mut CakeOptions) -> Result<(), ConfigError> {
        if let Some(v) = &self.rtt {
            let preset = v.as_str().and_then(|s| {
                keywords::RTT_PRESETS
                    .iter()
                    .find(|(name, _, _)| *name == s.trim())
            });
            if let Some(&(_, target_us, interval_us)) = preset {
                keys.interval_ns = Some(interval_us * 1000);
                keys.target_ns = Some(target_us * 1000);
            } else {
                let ns = parse_duration_value("rtt", v).map_err(|e| match e {
                    ConfigError::Key { key, message } => ConfigError::Key {
                        key,
                        message: format!(
                            "{message}; or a preset: datacentre lan metro regional internet oceanic satellite interplanetary"
                        ),
                    },
                    other => other,
                })?;
                keys.interval_ns = Some(aqm_time("rtt", ns)?);
                keys.target_ns = Some((ns / 1000 / 20).max(1) * 1000);
            }
        }
        if let Some(v) = &self.target {
            keys.target_ns = Some(aqm_time("target", parse_duration_value("target", v)?)?);
        }
        Ok(())
    }

    /// `diffserv`, `flow_mode`, the on/off flags and `ack_filter`.
    fn mode_keys(&self, keys: &mut CakeOptions) -> Result<(), ConfigError> {
        if let Some(s) = &self.diffserv {
            keys.diffserv = Some(keywords::parse_diffserv(s.trim()).ok_or_else(|| {
                key_err(
                    "diffserv",
                    format!(
                        "'{s}' is not a diffserv mode{}; use besteffort, diffserv3, diffserv4, diffserv8 or precedence",
                        keywords::suggest(s, &["besteffort", "diffserv3", "diffserv4", "diffserv8", "precedence"])
                    ),
                )
            })?);
        }
        if let Some(s) = &self.flow_mode {
            const MODES: [&str; 8] = [
                "flowblind",
                "srchost",
                "dsthost",
                "hosts",
                "flows",
                "dual-srchost",
                "dual-dsthost",
                "triple-isolate",
            ];
            keys.flow_mode = Some(keywords::parse_flow_mode(s.trim()).ok_or_else(|| {
                key_err(
                    "flow_mode",
                    format!(
                        "'{s}' is not a flow mode{}; use one of {}",
                        keywords::suggest(s, &MODES),
                        MODES.join(", ")
                    ),
                )
            })?);
        }
        keys.nat = self.nat;
        keys.wash = self.wash;
        keys.split_gso = self.split_gso;
        keys.ingress = self.ingress;
        if let Some(v) = &self.ack_filter {
            let mode = match v {
                toml::Value::Boolean(true) => Some(AckFilterMode::Filter),
                toml::Value::Boolean(false) => Some(AckFilterMode::Off),
                toml::Value::String(s) => match s.trim() {
                    "ack-filter" | "filter" | "on" => Some(AckFilterMode::Filter),
                    "ack-filter-aggressive" | "aggressive" => Some(AckFilterMode::Aggressive),
                    "no-ack-filter" | "off" | "none" => Some(AckFilterMode::Off),
                    _ => None,
                },
                _ => None,
            };
            keys.ack_filter = Some(mode.ok_or_else(|| {
                key_err(
                    "ack_filter",
                    format!("{v} is not an ACK filter mode; use false, true or \"aggressive\""),
                )
            })?);
        }
        Ok(())
    }

    /// `memlimit` and `fwmark`.
    fn limit_keys(&self, keys: &mut CakeOptions) -> Result<(), ConfigError> {
        if let Some(v) = &self.memlimit {
            let bytes = parse_size_value("memlimit", v)?;
            if bytes > limits::MAX_MEMLIMIT {
                return Err(key_err(
                    "memlimit",
                    format!("{bytes} bytes is above the largest memory limit, 4gb (tc's 32-bit limit); use at most \"4gb\""),
                ));
            }
            keys.memlimit = Some(bytes);
        }
        if let Some(v) = &self.fwmark {
            let mask = match v {
                toml::Value::Integer(n) => u32::try_from(*n).ok(),
                toml::Value::String(s) => keywords::parse_c_u32(s),
                _ => None,
            };
            keys.fwmark = Some(mask.ok_or_else(|| {
                key_err(
                    "fwmark",
                    format!("{v} is not a 32-bit mask; try 0xff (or \"0xff\")"),
                )
            })?);
        }
        Ok(())
    }

    /// `overhead`, `mpu`, `atm` and `raw`: what a packet is charged for on the link.
    fn framing_keys(&self, keys: &mut CakeOptions) -> Result<(), ConfigError> {
        if let Some(v) = &self.overhead {
            overhead_keys(v, keys)?;
        }
        if let Some(n) = self.mpu {
            keys.mpu = Some(ranged("mpu", n, 0, 256)? as u32);
        }
        if let Some(v) = &self.atm {
            let mode = match v {
                toml::Value::Boolean(true) => Some(AtmMode::Atm),
                toml::Value::Boolean(false) => Some(AtmMode::None),
                toml::Value::String(s) => match s.trim() {
                    "atm" => Some(AtmMode::Atm),
                    "ptm" => Some(AtmMode::Ptm),
                    "none" | "noatm" => Some(AtmMode::None),
                    _ => None,
                },
                _ => None,
            };
            keys.atm = Some(mode.ok_or_else(|| {
                key_err(
                    "atm",
                    format!("{v} is not a cell framing; use \"atm\", \"ptm\" or \"none\""),
                )
            })?);
        }
        if let Some(raw) = self.raw {
            if raw {
                keys.overhead = Some(0);
                keys.atm.get_or_insert(AtmMode::None);
            }
            keys.raw = Some(raw);
        }
        Ok(())
    }

    /// The queue's own settings: `packet_limit`, `mtu`, `seed`, `queue`, the rate sync and
    /// `bypass`.
    fn apply_queue_keys(&self, shaper: &mut ShaperConfig) -> Result<(), ConfigError> {
        if let Some(n) = self.packet_limit {
            shaper.cake.packet_limit =
                ranged("packet_limit", n, 1, qdisc::cake::MAX_PACKET_LIMIT.into())? as u32;
        }
        if let Some(n) = self.mtu {
            shaper.cake.mtu = ranged("mtu", n, 68, 65535)? as u32;
        }
        if let Some(seed) = self.seed {
            shaper.cake.seed = seed;
            shaper.seed = Some(seed);
        }
        if let Some(q) = &self.queue {
            shaper.queue = match q.trim() {
                "cake" => QueueKind::Cake,
                "fifo" => QueueKind::Fifo,
                _ => {
                    return Err(key_err(
                        "queue",
                        format!("'{q}' is not a queue kind; use \"cake\" or \"fifo\""),
                    ))
                }
            };
        }
        if let Some(v) = &self.sync_interval {
            let ns = parse_duration_value("sync_interval", v)?;
            if ns == 0 {
                return Err(key_err(
                    "sync_interval",
                    "0 would sync on every packet; use at least \"10us\" (default \"200us\")",
                ));
            }
            if !limits::SYNC_INTERVAL_NS.contains(&ns) {
                return Err(key_err(
                    "sync_interval",
                    format!(
                        "{} is out of range; use \"10us\" to \"1s\" (default \"200us\"): shorter syncs more often than a burst takes, longer leaves a queue's share stale for that long",
                        units::format_duration_ns(ns)
                    ),
                ));
            }
            shaper.sync_interval_ns = ns;
        }
        if let Some(p) = &self.sync_policy {
            shaper.sync_policy = match p.trim() {
                "work-conserving" | "work_conserving" => SyncPolicy::WorkConserving,
                "equal" => SyncPolicy::Equal,
                _ => {
                    return Err(key_err(
                        "sync_policy",
                        format!("'{p}' is not a sync policy; use \"work-conserving\" or \"equal\""),
                    ))
                }
            };
        }
        if let Some(b) = self.bypass {
            shaper.bypass = b;
        }
        Ok(())
    }
}

/// The `overhead` key: bytes (a number, or a decimal string), or tc's framing keywords
/// ("ethernet", "pppoe-ptm", ...), which may also set `atm` and `mpu`.
fn overhead_keys(v: &toml::Value, keys: &mut CakeOptions) -> Result<(), ConfigError> {
    match v {
        toml::Value::Integer(n) => {
            keys.overhead = Some(ranged("overhead", *n, -64, 256)? as i32);
            keys.raw = Some(false);
        }
        toml::Value::String(s) => {
            let numeric = s
                .trim()
                .starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+');
            if let Ok(n) = s.trim().parse::<i64>() {
                keys.overhead = Some(ranged("overhead", n, -64, 256)? as i32);
                keys.raw = Some(false);
            } else if numeric {
                return Err(key_err(
                        "overhead",
                        format!("'{s}' is not a whole number in decimal; give bytes from -64 to 256 (hex such as 0x10 is refused, as tc reads it in base 10) or a keyword such as \"ethernet\""),
                    ));
            } else {
                let words: Vec<&str> = s.split_whitespace().collect();
                if words.is_empty() {
                    return Err(key_err(
                            "overhead",
                            "is empty; give a number of bytes (-64 to 256) or a keyword such as \"ethernet\", or leave the key out",
                        ));
                }
                if let Some(bad) = words.iter().find(|w| !OVERHEAD_WORDS.contains(w)) {
                    return Err(key_err(
                            "overhead",
                            format!(
                                "'{bad}' is not an overhead keyword{}; use a number of bytes (-64 to 256) or {}",
                                keywords::suggest(bad, OVERHEAD_WORDS),
                                "ethernet, docsis, conservative, raw, pppoe-ptm, bridged-ptm, ether-vlan, pppoa-vcmux …"
                            ),
                        ));
                }
                let mut o = CakeOptions::default();
                o.apply_words(&words)
                    .map_err(|e| key_err("overhead", e.to_string()))?;
                keys.overhead = o.overhead;
                keys.raw = o.raw;
                if o.atm.is_some() {
                    keys.atm = o.atm;
                }
                if o.mpu.is_some() {
                    keys.mpu = o.mpu;
                }
            }
        }
        other => {
            return Err(key_err(
                "overhead",
                format!(
                    "expected bytes (-64 to 256) or a keyword such as \"ethernet\", found {}",
                    value_kind(other)
                ),
            ))
        }
    }
    Ok(())
}

impl ShaperConfig {
    /// Renders the effective section (every key, defaults included) as TOML that
    /// [`Config::from_toml_str`](super::Config::from_toml_str) reads back to the same values.
    pub fn to_toml(&self) -> String {
        let mut out = cake_toml(&self.cake, "shaper");
        match self.seed {
            Some(seed) => {
                let _ = writeln!(out, "seed = {seed}");
            }
            None => out.push_str(
                "# seed: not set; the flow hash key is drawn at random when the forwarder starts\n",
            ),
        }
        let _ = writeln!(out, "queue = \"{}\"", self.queue.name());
        let _ = writeln!(
            out,
            "sync_interval = \"{}\"",
            units::format_duration_ns(self.sync_interval_ns)
        );
        let _ = writeln!(out, "sync_policy = \"{}\"", self.sync_policy.name());
        let _ = writeln!(out, "bypass = {}", self.bypass);
        out
    }
}

/// Every CAKE key of `c` as the TOML table `[section]`.
pub(super) fn cake_toml(c: &CakeConfig, section: &str) -> String {
    let mut o = CakeOptions {
        rate: Some(c.rate),
        autorate_ingress: Some(c.autorate_ingress),
        interval_ns: Some(c.interval_ns),
        target_ns: Some(c.target_ns),
        diffserv: Some(c.diffserv),
        flow_mode: Some(c.flow_mode),
        nat: Some(c.nat),
        wash: Some(c.wash),
        split_gso: Some(c.split_gso),
        ingress: Some(c.ingress),
        ack_filter: Some(c.ack_filter),
        memlimit: c.memlimit,
        fwmark: Some(c.fwmark_mask),
        atm: Some(c.atm),
        overhead: Some(c.overhead),
        raw: Some(c.raw),
        mpu: Some(c.mpu),
    };
    if c.raw {
        o.overhead = None;
    }
    let mut out = tc::render_section(&o, "", section);
    if c.memlimit.is_none() {
        out.push_str("# memlimit: automatic (from rate and rtt, as the kernel derives it)\n");
    }
    if !c.raw {
        // render() prints `raw` or `overhead`; say both when compensating.
        out.push_str("raw = false\n");
    }
    let _ = writeln!(out, "packet_limit = {}", c.packet_limit);
    let _ = writeln!(out, "mtu = {}", c.mtu);
    out
}
