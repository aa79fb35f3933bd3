//! The words of `tc qdisc ... cake [options]` (iproute2 `tc/q_cake.c`), parsed into
//! [`CakeOptions`]: only what the words set, so a later layer (the TOML keys, then the command
//! line) can override it, and `from-tc` can print just what was given. Every option of tc's
//! cake, and all its keyword presets (`ethernet`, `docsis`, `pppoe-ptm`, `conservative`, the
//! RTT presets …), is accepted; anything else is an error naming the word.

use qdisc::cake::{AckFilterMode, AtmMode, CakeConfig, DiffservMode, FlowMode};
use qdisc::Rate;
use thiserror::Error;

use super::units::{self, UnitError};

/// A cake option string that tc would refuse (or that cakewalk cannot honour).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TcError {
    /// A word that is not a cake option.
    #[error("unknown cake option '{word}'{suggestion}; see `cakewalk from-tc help` for the list")]
    Unknown {
        /// The word.
        word: String,
        /// ", did you mean 'x'?" or empty.
        suggestion: String,
    },
    /// An option that needs a value was last.
    #[error("cake option '{option}' needs a value, e.g. '{option} {example}'")]
    MissingValue {
        /// The option.
        option: &'static str,
        /// An example value.
        example: &'static str,
    },
    /// A value in the wrong unit.
    #[error("cake option '{option}': {cause}")]
    BadUnit {
        /// The option.
        option: &'static str,
        /// What was wrong (part of this message, so not chained again).
        cause: UnitError,
    },
    /// Not a decimal integer (tc reads these in base 10: `0x10` is not 16).
    #[error("cake option '{option}': '{value}' is not a whole number in decimal; give one from {range}{why}")]
    NotDecimal {
        /// The option.
        option: &'static str,
        /// What was given.
        value: String,
        /// The valid range.
        range: &'static str,
        /// Why a number in another base is refused, when one was given.
        why: &'static str,
    },
    /// An integer out of tc's range.
    #[error("cake option '{option}': '{value}' is out of range; valid range is {range}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// What was given.
        value: String,
        /// The valid range.
        range: &'static str,
    },
    /// Two RTT presets in one string (tc's `duparg`).
    #[error("cake options '{first}' and '{second}' are both RTT presets; give only one")]
    DuplicatePreset {
        /// The first preset.
        first: String,
        /// The second one.
        second: String,
    },
    /// Several tc lines that do not map onto the two directions (no `dev`, a `dev` no port
    /// carries, two lines for one direction).
    #[error("{message}")]
    Direction {
        /// What does not map, and what to write instead.
        message: String,
    },
    /// An option the named qdisc refuses (`cake_mq` has no `autorate-ingress`).
    #[error(
        "cake option '{option}' is not supported by {qdisc} (the kernel refuses it too); {fix}"
    )]
    Unsupported {
        /// The option.
        option: &'static str,
        /// The qdisc kind.
        qdisc: &'static str,
        /// Why, and what to do instead.
        fix: String,
    },
    /// A tc command for another qdisc (`fq_codel`, `ingress`, `htb`): there is nothing of
    /// cake in it to convert.
    #[error("'{qdisc}' is not cake: from-tc converts 'tc qdisc add dev DEV root cake ...' (or cake_mq) lines only; for an IFB ingress set-up, convert the cake line on the IFB device and set ingress = true")]
    NotCake {
        /// The qdisc kind the command names.
        qdisc: String,
    },
    /// A tc command that names no qdisc kind at all.
    #[error("'{command}' names no qdisc; give the whole line, as in 'tc qdisc add dev eth0 root cake bandwidth 100mbit'")]
    NoQdisc {
        /// The command as given.
        command: String,
    },
    /// `help` was asked for.
    #[error("{}", USAGE)]
    Help,
}

/// tc's usage text for cake, with cakewalk's additions (`target`, `fwmark`).
pub const USAGE: &str = "cake options: [ bandwidth RATE | unlimited* | autorate-ingress ]
              [ rtt TIME | target TIME | datacentre | lan | metro | regional |
                internet* | oceanic | satellite | interplanetary ]
              [ besteffort | diffserv8 | diffserv4 | diffserv3* | precedence ]
              [ flowblind | srchost | dsthost | hosts | flows |
                dual-srchost | dual-dsthost | triple-isolate* ]
              [ nat | nonat* ] [ wash | nowash* ] [ split-gso* | no-split-gso ]
              [ ack-filter | ack-filter-aggressive | no-ack-filter* ]
              [ memlimit LIMIT ] [ fwmark MASK ]
              [ ptm | atm | noatm* ] [ overhead N | conservative | raw* ]
              [ ethernet | docsis | ether-vlan | pppoe-ptm | bridged-ptm |
                ipoa-vcmux | ipoa-llcsnap | bridged-vcmux | bridged-llcsnap |
                pppoa-vcmux | pppoa-llc | pppoe-vcmux | pppoe-llcsnap ]
              [ mpu N ] [ ingress | egress* ]
              (* marks defaults)";

/// RTT presets: (name, target µs, interval µs), as in tc.
pub const RTT_PRESETS: [(&str, u64, u64); 8] = [
    ("datacentre", 5, 100),
    ("lan", 50, 1_000),
    ("metro", 500, 10_000),
    ("regional", 1_500, 30_000),
    ("internet", 5_000, 100_000),
    ("oceanic", 15_000, 300_000),
    ("satellite", 50_000, 1_000_000),
    ("interplanetary", 50_000_000, 1_000_000_000),
];

/// Link-layer keywords that add to the overhead: (name, bytes, cell framing).
/// `None` framing leaves the ATM/PTM mode as it was.
const OVERHEAD_KEYWORDS: [(&str, i32, Option<AtmMode>); 12] = [
    ("ipoa-vcmux", 8, Some(AtmMode::Atm)),
    ("ipoa-llcsnap", 16, Some(AtmMode::Atm)),
    ("bridged-vcmux", 24, Some(AtmMode::Atm)),
    ("bridged-llcsnap", 32, Some(AtmMode::Atm)),
    ("pppoa-vcmux", 10, Some(AtmMode::Atm)),
    ("pppoa-llc", 14, Some(AtmMode::Atm)),
    ("pppoe-vcmux", 32, Some(AtmMode::Atm)),
    ("pppoe-llcsnap", 40, Some(AtmMode::Atm)),
    ("pppoe-ptm", 30, Some(AtmMode::Ptm)),
    ("bridged-ptm", 22, Some(AtmMode::Ptm)),
    ("ether-vlan", 4, None),
    ("via-ethernet", 0, None),
];

/// Every word tc's cake accepts, for suggestions.
const WORDS: &[&str] = &[
    "bandwidth",
    "unlimited",
    "autorate-ingress",
    "rtt",
    "target",
    "datacentre",
    "lan",
    "metro",
    "regional",
    "internet",
    "oceanic",
    "satellite",
    "interplanetary",
    "besteffort",
    "precedence",
    "diffserv8",
    "diffserv4",
    "diffserv3",
    "diffserv",
    "flowblind",
    "srchost",
    "dsthost",
    "hosts",
    "flows",
    "dual-srchost",
    "dual-dsthost",
    "triple-isolate",
    "nat",
    "nonat",
    "wash",
    "nowash",
    "split-gso",
    "no-split-gso",
    "ack-filter",
    "ack-filter-aggressive",
    "no-ack-filter",
    "memlimit",
    "fwmark",
    "ptm",
    "atm",
    "noatm",
    "overhead",
    "conservative",
    "raw",
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
    "mpu",
    "ingress",
    "egress",
];

/// CAKE options as given: `None` means "not said, keep the default or the layer below".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CakeOptions {
    /// `bandwidth RATE` or `unlimited` (`Rate::UNLIMITED`).
    pub rate: Option<Rate>,
    /// `autorate-ingress` (and `bandwidth`/`unlimited` turning it off, as tc does).
    pub autorate_ingress: Option<bool>,
    /// CoDel interval (`rtt`, or a preset), ns.
    pub interval_ns: Option<u64>,
    /// CoDel target (`target`, or derived from `rtt`/a preset), ns.
    pub target_ns: Option<u64>,
    /// Diffserv mode.
    pub diffserv: Option<DiffservMode>,
    /// Flow isolation mode.
    pub flow_mode: Option<FlowMode>,
    /// `nat` / `nonat`.
    pub nat: Option<bool>,
    /// `wash` / `nowash`.
    pub wash: Option<bool>,
    /// `split-gso` / `no-split-gso`.
    pub split_gso: Option<bool>,
    /// `ingress` / `egress`.
    pub ingress: Option<bool>,
    /// ACK filter mode.
    pub ack_filter: Option<AckFilterMode>,
    /// `memlimit`, bytes.
    pub memlimit: Option<u64>,
    /// `fwmark MASK`.
    pub fwmark: Option<u32>,
    /// Cell framing (`atm`, `ptm`, `noatm`, or implied by a keyword).
    pub atm: Option<AtmMode>,
    /// Per-packet overhead in bytes (turns compensation on, i.e. not raw).
    pub overhead: Option<i32>,
    /// `raw`: no overhead compensation.
    pub raw: Option<bool>,
    /// Minimum packet unit.
    pub mpu: Option<u32>,
}

/// Name of a diffserv mode as tc spells it.
pub fn diffserv_name(mode: DiffservMode) -> &'static str {
    match mode {
        DiffservMode::Besteffort => "besteffort",
        DiffservMode::Diffserv3 => "diffserv3",
        DiffservMode::Diffserv4 => "diffserv4",
        DiffservMode::Diffserv8 => "diffserv8",
        DiffservMode::Precedence => "precedence",
    }
}

/// Parses a diffserv mode name (`diffserv` alone means diffserv4, as in tc).
pub fn parse_diffserv(word: &str) -> Option<DiffservMode> {
    Some(match word {
        "besteffort" => DiffservMode::Besteffort,
        "diffserv3" => DiffservMode::Diffserv3,
        "diffserv4" | "diffserv" => DiffservMode::Diffserv4,
        "diffserv8" => DiffservMode::Diffserv8,
        "precedence" => DiffservMode::Precedence,
        _ => return None,
    })
}

/// Name of a flow mode as tc spells it.
pub fn flow_mode_name(mode: FlowMode) -> &'static str {
    match mode {
        FlowMode::Flowblind => "flowblind",
        FlowMode::Srchost => "srchost",
        FlowMode::Dsthost => "dsthost",
        FlowMode::Hosts => "hosts",
        FlowMode::Flows => "flows",
        FlowMode::DualSrchost => "dual-srchost",
        FlowMode::DualDsthost => "dual-dsthost",
        FlowMode::TripleIsolate => "triple-isolate",
    }
}

/// Parses a flow mode name.
pub fn parse_flow_mode(word: &str) -> Option<FlowMode> {
    Some(match word {
        "flowblind" => FlowMode::Flowblind,
        "srchost" => FlowMode::Srchost,
        "dsthost" => FlowMode::Dsthost,
        "hosts" => FlowMode::Hosts,
        "flows" => FlowMode::Flows,
        "dual-srchost" => FlowMode::DualSrchost,
        "dual-dsthost" => FlowMode::DualDsthost,
        "triple-isolate" => FlowMode::TripleIsolate,
        _ => return None,
    })
}

/// Name of an ACK filter mode as tc spells it.
pub fn ack_filter_name(mode: AckFilterMode) -> &'static str {
    match mode {
        AckFilterMode::Off => "no-ack-filter",
        AckFilterMode::Filter => "ack-filter",
        AckFilterMode::Aggressive => "ack-filter-aggressive",
    }
}

/// Name of a cell framing mode as tc spells it.
pub fn atm_name(mode: AtmMode) -> &'static str {
    match mode {
        AtmMode::None => "noatm",
        AtmMode::Atm => "atm",
        AtmMode::Ptm => "ptm",
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Returns ", did you mean 'x'?" for the closest known word within a small edit distance;
/// when several are equally close ("diffserv5"), names up to four of them.
pub(crate) fn suggest(word: &str, candidates: &[&str]) -> String {
    let close: Vec<(usize, &str)> = candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .collect();
    let Some(best) = close.iter().map(|(d, _)| *d).min() else {
        return String::new();
    };
    let mut names: Vec<&str> = close
        .iter()
        .filter(|(d, _)| *d == best)
        .map(|(_, c)| *c)
        .collect();
    names.sort_unstable();
    names.dedup();
    names.truncate(4);
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    match quoted.split_last() {
        Some((last, [])) => format!(", did you mean {last}?"),
        Some((last, rest)) => format!(", did you mean {} or {last}?", rest.join(", ")),
        None => String::new(),
    }
}

/// Parses an integer the way tc's `get_u32(.., 0)` does: decimal, `0x` hex or `0` octal.
pub(crate) fn parse_c_u32(s: &str) -> Option<u32> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// `v` as a decimal integer, as tc reads `overhead` and `mpu`: a number too large to hold is
/// out of range, anything else that is not decimal digits is [`TcError::NotDecimal`].
fn decimal(option: &'static str, v: &str, range: &'static str) -> Result<i64, TcError> {
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let hex = v.starts_with("0x") || v.starts_with("0X");
        return Err(TcError::NotDecimal {
            option,
            value: v.to_string(),
            range,
            why: if hex {
                " (tc reads it in base 10, so hex is refused)"
            } else {
                ""
            },
        });
    }
    v.parse::<i64>().map_err(|_| TcError::OutOfRange {
        option,
        value: v.to_string(),
        range,
    })
}

impl CakeOptions {
    /// Parses a tc cake option string (`"bandwidth 200mbit diffserv4 ethernet"`), words
    /// separated by whitespace.
    ///
    /// # Errors
    /// A [`TcError`] naming the first bad word.
    ///
    /// # Examples
    /// ```
    /// use forwarder::config::keywords::CakeOptions;
    /// let o = CakeOptions::parse("bandwidth 100mbit pppoe-ptm ether-vlan").unwrap();
    /// assert_eq!(o.overhead, Some(34));
    /// ```
    pub fn parse(s: &str) -> Result<CakeOptions, TcError> {
        let mut o = CakeOptions::default();
        let words: Vec<&str> = s.split_whitespace().collect();
        o.apply_words(&words)?;
        Ok(o)
    }

    /// Applies tc cake words in order on top of what is already set.
    ///
    /// # Errors
    /// A [`TcError`] naming the first bad word.
    pub fn apply_words(&mut self, words: &[&str]) -> Result<(), TcError> {
        let mut preset: Option<&str> = None;
        let mut it = words.iter().copied();
        // tc accumulates keyword overheads from 0 within one command; an explicit
        // `overhead N` resets the running sum.
        let mut running_overhead = self.overhead.unwrap_or(0);
        while let Some(word) = it.next() {
            let mut value = |option: &'static str, example: &'static str| {
                it.next().ok_or(TcError::MissingValue { option, example })
            };
            match word {
                "bandwidth" => {
                    let v = value("bandwidth", "100mbit")?;
                    let rate = units::parse_rate(v).map_err(|source| TcError::BadUnit {
                        option: "bandwidth",
                        cause: source,
                    })?;
                    self.rate = Some(rate);
                    self.autorate_ingress = Some(false);
                }
                "unlimited" => {
                    self.rate = Some(Rate::UNLIMITED);
                    self.autorate_ingress = Some(false);
                }
                "autorate-ingress" => self.autorate_ingress = Some(true),
                "rtt" => {
                    let v = value("rtt", "100ms")?;
                    let ns = units::parse_duration_ns(v).map_err(|source| TcError::BadUnit {
                        option: "rtt",
                        cause: source,
                    })?;
                    self.interval_ns = Some(ns);
                    // tc: target = rtt / 20, at least 1 µs.
                    self.target_ns = Some((ns / 1000 / 20).max(1) * 1000);
                }
                "target" => {
                    let v = value("target", "5ms")?;
                    let ns = units::parse_duration_ns(v).map_err(|source| TcError::BadUnit {
                        option: "target",
                        cause: source,
                    })?;
                    self.target_ns = Some(ns);
                }
                "memlimit" => {
                    let v = value("memlimit", "32mb")?;
                    let bytes = units::parse_size(v).map_err(|source| TcError::BadUnit {
                        option: "memlimit",
                        cause: source,
                    })?;
                    self.memlimit = Some(bytes);
                }
                "fwmark" => {
                    let v = value("fwmark", "0xff")?;
                    let mask = parse_c_u32(v).ok_or_else(|| TcError::OutOfRange {
                        option: "fwmark",
                        value: v.to_string(),
                        range: "a 32-bit mask such as 0xff or 8",
                    })?;
                    self.fwmark = Some(mask);
                }
                "overhead" => {
                    let v = value("overhead", "38")?;
                    let n = decimal("overhead", v, "-64 to 256")?;
                    let n = i32::try_from(n)
                        .ok()
                        .filter(|n| (-64..=256).contains(n))
                        .ok_or_else(|| TcError::OutOfRange {
                            option: "overhead",
                            value: v.to_string(),
                            range: "-64 to 256",
                        })?;
                    running_overhead = n;
                    self.overhead = Some(n);
                    self.raw = Some(false);
                }
                "mpu" => {
                    let v = value("mpu", "64")?;
                    let n = decimal("mpu", v, "0 to 256")?;
                    let n = u32::try_from(n).ok().filter(|n| *n <= 256).ok_or_else(|| {
                        TcError::OutOfRange {
                            option: "mpu",
                            value: v.to_string(),
                            range: "0 to 256",
                        }
                    })?;
                    self.mpu = Some(n);
                }
                "nat" => self.nat = Some(true),
                "nonat" => self.nat = Some(false),
                "wash" => self.wash = Some(true),
                "nowash" => self.wash = Some(false),
                "split-gso" => self.split_gso = Some(true),
                "no-split-gso" => self.split_gso = Some(false),
                "ingress" => self.ingress = Some(true),
                "egress" => self.ingress = Some(false),
                "ack-filter" => self.ack_filter = Some(AckFilterMode::Filter),
                "ack-filter-aggressive" => self.ack_filter = Some(AckFilterMode::Aggressive),
                "no-ack-filter" => self.ack_filter = Some(AckFilterMode::Off),
                "atm" => self.atm = Some(AtmMode::Atm),
                "ptm" => self.atm = Some(AtmMode::Ptm),
                "noatm" => self.atm = Some(AtmMode::None),
                "raw" => {
                    running_overhead = 0;
                    self.atm = Some(AtmMode::None);
                    self.overhead = Some(0);
                    self.raw = Some(true);
                }
                "conservative" => {
                    running_overhead = 48;
                    self.atm = Some(AtmMode::Atm);
                    self.overhead = Some(48);
                    self.raw = Some(false);
                }
                "ethernet" => {
                    running_overhead += 38;
                    self.overhead = Some(running_overhead);
                    self.raw = Some(false);
                    self.mpu = Some(84);
                }
                "docsis" => {
                    running_overhead += 18;
                    self.atm = Some(AtmMode::None);
                    self.overhead = Some(running_overhead);
                    self.raw = Some(false);
                    self.mpu = Some(64);
                }
                "help" => return Err(TcError::Help),
                w => {
                    if let Some(&(_, target_us, interval_us)) =
                        RTT_PRESETS.iter().find(|(name, _, _)| *name == w)
                    {
                        if let Some(first) = preset {
                            return Err(TcError::DuplicatePreset {
                                first: first.to_string(),
                                second: w.to_string(),
                            });
                        }
                        preset = Some(w);
                        self.interval_ns = Some(interval_us * 1000);
                        self.target_ns = Some(target_us * 1000);
                    } else if let Some(mode) = parse_diffserv(w) {
                        self.diffserv = Some(mode);
                    } else if let Some(mode) = parse_flow_mode(w) {
                        self.flow_mode = Some(mode);
                    } else if let Some(&(_, bytes, framing)) =
                        OVERHEAD_KEYWORDS.iter().find(|(name, _, _)| *name == w)
                    {
                        if w == "via-ethernet" {
                            // Accepted and ignored, as tc does (the L2 header is always
                            // compensated for).
                            continue;
                        }
                        running_overhead += bytes;
                        self.overhead = Some(running_overhead);
                        self.raw = Some(false);
                        if framing.is_some() {
                            self.atm = framing;
                        }
                    } else {
                        return Err(TcError::Unknown {
                            word: w.to_string(),
                            suggestion: suggest(w, WORDS),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Overlays `other` on `self`: every option `other` sets wins.
    pub fn merge(&mut self, other: &CakeOptions) {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        take!(
            rate,
            autorate_ingress,
            interval_ns,
            target_ns,
            diffserv,
            flow_mode,
            nat,
            wash,
            split_gso,
            ingress,
            ack_filter,
            memlimit,
            fwmark,
            atm,
            overhead,
            raw,
            mpu
        );
    }

    /// Writes every option that is set into `cfg`.
    pub fn apply_to(&self, cfg: &mut CakeConfig) {
        if let Some(v) = self.rate {
            cfg.rate = v;
        }
        if let Some(v) = self.autorate_ingress {
            cfg.autorate_ingress = v;
        }
        match (self.interval_ns, self.target_ns) {
            (Some(i), Some(t)) => {
                cfg.interval_ns = i;
                cfg.target_ns = t;
            }
            (Some(i), None) => {
                cfg.interval_ns = i;
                cfg.target_ns = (i / 20).max(1000);
            }
            (None, Some(t)) => cfg.target_ns = t,
            (None, None) => {}
        }
        if let Some(v) = self.diffserv {
            cfg.diffserv = v;
        }
        if let Some(v) = self.flow_mode {
            cfg.flow_mode = v;
        }
        if let Some(v) = self.nat {
            cfg.nat = v;
        }
        if let Some(v) = self.wash {
            cfg.wash = v;
        }
        if let Some(v) = self.split_gso {
            cfg.split_gso = v;
        }
        if let Some(v) = self.ingress {
            cfg.ingress = v;
        }
        if let Some(v) = self.ack_filter {
            cfg.ack_filter = v;
        }
        if let Some(v) = self.memlimit {
            cfg.memlimit = Some(v);
        }
        if let Some(v) = self.fwmark {
            cfg.fwmark_mask = v;
        }
        if let Some(v) = self.atm {
            cfg.atm = v;
        }
        if let Some(v) = self.overhead {
            cfg.overhead = v;
            cfg.raw = false;
        }
        if let Some(v) = self.raw {
            cfg.raw = v;
        }
        if let Some(v) = self.mpu {
            cfg.mpu = v;
        }
    }

    /// Returns the [`CakeConfig`] these options give on top of the defaults.
    pub fn to_cake_config(&self) -> CakeConfig {
        let mut cfg = CakeConfig::default();
        self.apply_to(&mut cfg);
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(s: &str) -> CakeConfig {
        CakeOptions::parse(s).unwrap().to_cake_config()
    }

    #[test]
    fn empty_string_gives_the_kernel_defaults() {
        assert_eq!(cfg(""), CakeConfig::default());
    }

    #[test]
    fn bandwidth_1000_is_1kbit_and_rtt_200_is_200us() {
        assert_eq!(cfg("bandwidth 1000").rate.bits_per_sec(), 1000);
        let c = cfg("rtt 200");
        assert_eq!(c.interval_ns, 200_000);
        assert_eq!(c.target_ns, 10_000);
    }

    #[test]
    fn rtt_presets_set_interval_and_target() {
        let c = cfg("lan");
        assert_eq!((c.interval_ns, c.target_ns), (1_000_000, 50_000));
        let c = cfg("satellite");
        assert_eq!((c.interval_ns, c.target_ns), (1_000_000_000, 50_000_000));
        assert!(matches!(
            CakeOptions::parse("lan metro"),
            Err(TcError::DuplicatePreset { .. })
        ));
    }

    #[test]
    fn overhead_keywords_accumulate_like_tc() {
        let c = cfg("pppoe-ptm ether-vlan");
        assert_eq!((c.overhead, c.atm, c.raw), (34, AtmMode::Ptm, false));
        let c = cfg("ethernet");
        assert_eq!((c.overhead, c.mpu, c.atm), (38, 84, AtmMode::None));
        let c = cfg("docsis");
        assert_eq!((c.overhead, c.mpu), (18, 64));
        let c = cfg("conservative");
        assert_eq!((c.overhead, c.atm, c.raw), (48, AtmMode::Atm, false));
        let c = cfg("overhead 10 ether-vlan");
        assert_eq!(c.overhead, 14);
        let c = cfg("ethernet raw");
        assert!(c.raw);
        let c = cfg("via-ethernet");
        assert!(c.raw, "via-ethernet is ignored");
    }

    #[test]
    fn every_link_and_rtt_keyword_agrees_with_the_qdisc_crate_presets() {
        // Two independent readings of tc's tables: this parser and qdisc's LinkPreset.
        for preset in qdisc::cake::LinkPreset::ALL {
            let mut theirs = CakeConfig::default();
            preset.apply(&mut theirs);
            assert_eq!(cfg(preset.name()), theirs, "{}", preset.name());
        }
        for preset in qdisc::cake::RttPreset::ALL {
            let c = cfg(preset.name());
            assert_eq!(
                (c.interval_ns, c.target_ns),
                (preset.interval_ns(), preset.target_ns()),
                "{}",
                preset.name()
            );
        }
    }

    #[test]
    fn bandwidth_turns_autorate_off_in_order() {
        assert!(!cfg("autorate-ingress bandwidth 10mbit").autorate_ingress);
        assert!(cfg("bandwidth 10mbit autorate-ingress").autorate_ingress);
    }

    #[test]
    fn fwmark_accepts_hex_and_decimal() {
        assert_eq!(cfg("fwmark 8").fwmark_mask, 8);
        assert_eq!(cfg("fwmark 0xff00").fwmark_mask, 0xff00);
    }

    #[test]
    fn a_hex_overhead_or_mpu_is_called_not_decimal_not_out_of_range() {
        for (words, option) in [
            ("overhead 0x10", "overhead"),
            ("mpu 0x40", "mpu"),
            ("overhead 1e2", "overhead"),
        ] {
            let e = CakeOptions::parse(words).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("cake option '{option}': '"))
                    && e.contains("is not a whole number in decimal")
                    && !e.contains("out of range"),
                "{words}: {e}"
            );
        }
        let e = CakeOptions::parse("overhead 300").unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
        let e = CakeOptions::parse("overhead 99999999999999999999")
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        assert_eq!(
            CakeOptions::parse("overhead -10").unwrap().overhead,
            Some(-10)
        );
    }

    #[test]
    fn bad_words_name_the_word_and_suggest_a_fix() {
        let e = CakeOptions::parse("bandwidth 10mbit diffserv5").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("unknown cake option 'diffserv5', did you mean"));
        // Equally close words are all named, so the user sees the real choices.
        assert!(
            e.to_string()
                .contains("'diffserv3', 'diffserv4' or 'diffserv8'"),
            "{e}"
        );
        let e = CakeOptions::parse("triple-isolat").unwrap_err().to_string();
        assert!(e.contains("did you mean 'triple-isolate'?"), "{e}");
        let e = CakeOptions::parse("overhead 300").unwrap_err().to_string();
        assert_eq!(
            e,
            "cake option 'overhead': '300' is out of range; valid range is -64 to 256"
        );
        let e = CakeOptions::parse("mpu -1").unwrap_err().to_string();
        assert!(e.contains("valid range is 0 to 256"));
        let e = CakeOptions::parse("bandwidth").unwrap_err().to_string();
        assert_eq!(
            e,
            "cake option 'bandwidth' needs a value, e.g. 'bandwidth 100mbit'"
        );
        let e = CakeOptions::parse("bandwidth 2gbps")
            .unwrap_err()
            .to_string();
        assert!(e.contains("try '2gbit' or '250mbyte'"), "{e}");
        let e = CakeOptions::parse("rtt soon").unwrap_err().to_string();
        assert!(e.starts_with("cake option 'rtt': duration 'soon'"), "{e}");
    }

    #[test]
    fn later_layers_override_earlier_ones() {
        let mut base = CakeOptions::parse("bandwidth 10mbit diffserv4 wash").unwrap();
        base.merge(&CakeOptions::parse("bandwidth 20mbit").unwrap());
        let c = base.to_cake_config();
        assert_eq!(c.rate.bits_per_sec(), 20_000_000);
        assert_eq!(c.diffserv, DiffservMode::Diffserv4);
        assert!(c.wash);
    }
}
