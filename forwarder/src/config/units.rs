//! tc-style units: rates (`2gbit`, `500mbit`, `250mbyte`, `1000` = bit/s), durations (`5ms`,
//! `100us`, a bare number = µs) and sizes (`32mb`, `64k`, `4096`), parsed the way
//! `tc(8)` parses them, plus the inverse formatting used when printing a config. Lowercase
//! `kbps`/`mbps`/`gbps` are refused: tc reads them as *bytes* per second, which is almost
//! never what the writer meant.

use std::fmt::Write as _;

use qdisc::Rate;
use thiserror::Error;

/// A value that is not in the expected unit.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnitError {
    /// Not a rate.
    #[error("rate '{value}' is not a rate; try {hint}")]
    NotARate {
        /// What was given.
        value: String,
        /// One or two suggestions, quoted.
        hint: String,
    },
    /// Not a duration.
    #[error("duration '{value}' is not a duration; try '5ms', '100us' or '1s' (a bare number is microseconds)")]
    NotADuration {
        /// What was given.
        value: String,
    },
    /// A run length (how long to run or to drain) given as a bare number, which tc's
    /// convention would read as microseconds.
    #[error("'{value}' has no unit; give one, such as '{value}s' or '500ms' (a bare number would be microseconds here, as in tc)")]
    NoUnit {
        /// What was given.
        value: String,
    },
    /// Not a run length (how long to run or to drain).
    #[error("'{value}' is not a length of time; try '10s', '500ms' or '2m'")]
    NotARunLength {
        /// What was given.
        value: String,
    },
    /// Not a size.
    #[error("size '{value}' is not a size; try '32mb', '64k' or '4096' (bytes)")]
    NotASize {
        /// What was given.
        value: String,
    },
    /// A positive rate below one byte per second, which would otherwise round to 0, the
    /// value that means "unlimited".
    #[error("rate '{value}' is below 1 byte/s and would mean unlimited; give at least 512bit (the shaper's minimum), or 'unlimited' (or 0) for no shaping")]
    RateTooSmall {
        /// What was given.
        value: String,
    },
    /// Well-formed but too large to represent.
    #[error("{kind} '{value}' is too large")]
    TooLarge {
        /// "rate", "duration" or "size".
        kind: &'static str,
        /// What was given.
        value: String,
    },
}

/// Splits `s` into its leading decimal number and the unit suffix.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let bytes = s.as_bytes();
    let mut end = 0;
    let mut seen_digit = false;
    let mut seen_dot = false;
    while let Some(&c) = bytes.get(end) {
        match c {
            b'0'..=b'9' => seen_digit = true,
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        end += 1;
    }
    if !seen_digit {
        return None;
    }
    // An exponent (`1e9`), as strtod accepts; no unit starts with 'e'.
    if matches!(bytes.get(end), Some(b'e' | b'E'))
        && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)
    {
        end += 1;
        while bytes.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
    }
    let number: f64 = s[..end].parse().ok()?;
    number.is_finite().then_some((number, &s[end..]))
}

const BIT_SUFFIXES: [(&str, f64); 10] = [
    ("", 1.0),
    ("bit", 1.0),
    ("kbit", 1e3),
    ("mbit", 1e6),
    ("gbit", 1e9),
    ("tbit", 1e12),
    ("kibit", 1024.0),
    ("mibit", 1024.0 * 1024.0),
    ("gibit", 1024.0 * 1024.0 * 1024.0),
    ("tibit", 1024.0 * 1024.0 * 1024.0 * 1024.0),
];

const BYTE_SUFFIXES: [(&str, f64); 9] = [
    ("byte", 8.0),
    ("kbyte", 8e3),
    ("mbyte", 8e6),
    ("gbyte", 8e9),
    ("tbyte", 8e12),
    ("kibyte", 8.0 * 1024.0),
    ("mibyte", 8.0 * 1024.0 * 1024.0),
    ("gibyte", 8.0 * 1024.0 * 1024.0 * 1024.0),
    ("tibyte", 8.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
];

/// tc's byte-rate spellings with a capital `B`, which are unambiguous.
const TC_BYTE_SUFFIXES: [(&str, f64); 9] = [
    ("Bps", 8.0),
    ("KBps", 8e3),
    ("MBps", 8e6),
    ("GBps", 8e9),
    ("TBps", 8e12),
    ("KiBps", 8.0 * 1024.0),
    ("MiBps", 8.0 * 1024.0 * 1024.0),
    ("GiBps", 8.0 * 1024.0 * 1024.0 * 1024.0),
    ("TiBps", 8.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
];

fn rate_hint(number: Option<f64>, suffix: &str) -> String {
    let lower = suffix.to_ascii_lowercase();
    let prefix = lower.trim_end_matches("bps").trim_end_matches("bit/s");
    let scale = match prefix {
        "k" => Some(("kbit", 1e3)),
        "m" => Some(("mbit", 1e6)),
        "g" => Some(("gbit", 1e9)),
        "t" => Some(("tbit", 1e12)),
        _ => None,
    };
    match (number, scale) {
        (Some(n), Some((unit, scale))) => {
            let bytes = n * scale / 8.0;
            let (bn, bunit) = if bytes >= 1e9 {
                (bytes / 1e9, "gbyte")
            } else if bytes >= 1e6 {
                (bytes / 1e6, "mbyte")
            } else if bytes >= 1e3 {
                (bytes / 1e3, "kbyte")
            } else {
                (bytes, "byte")
            };
            format!("'{}{unit}' or '{}{bunit}'", trim_float(n), trim_float(bn))
        }
        _ => "'200mbit' (bit/s units: bit kbit mbit gbit tbit; byte/s: byte kbyte mbyte gbyte)"
            .to_string(),
    }
}

fn trim_float(x: f64) -> String {
    let mut s = format!("{x:.3}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    s
}

/// Parses a tc-style rate. A bare number is bit/s, `bit`/`kbit`/`mbit`/`gbit`/`tbit` (and the
/// binary `kibit`…) are bit/s, `byte`/`kbyte`/`mbyte`/`gbyte` and tc's `Bps`/`KBps`/`MBps`…
/// are byte/s; `unlimited` (or 0) is no shaping.
///
/// # Errors
/// [`UnitError::NotARate`] with suggestions, or [`UnitError::TooLarge`].
///
/// # Examples
/// ```
/// use forwarder::config::units::parse_rate;
/// assert_eq!(parse_rate("2gbit").unwrap().bits_per_sec(), 2_000_000_000);
/// assert_eq!(parse_rate("250mbyte").unwrap().bytes_per_sec(), 250_000_000);
/// assert!(parse_rate("2gbps").unwrap_err().to_string().contains("try '2gbit' or '250mbyte'"));
/// ```
pub fn parse_rate(s: &str) -> Result<Rate, UnitError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") {
        return Ok(Rate::UNLIMITED);
    }
    let Some((number, suffix)) = split_number(t) else {
        return Err(UnitError::NotARate {
            value: s.to_string(),
            hint: rate_hint(None, ""),
        });
    };
    let scale = BIT_SUFFIXES
        .iter()
        .chain(BYTE_SUFFIXES.iter())
        .find(|(name, _)| name.eq_ignore_ascii_case(suffix))
        .or_else(|| TC_BYTE_SUFFIXES.iter().find(|(name, _)| *name == suffix))
        .map(|&(_, scale)| scale)
        .or((suffix == "bps").then_some(8.0));
    let Some(scale) = scale else {
        return Err(UnitError::NotARate {
            value: s.to_string(),
            hint: rate_hint(Some(number), suffix),
        });
    };
    let bytes = (number * scale / 8.0).round();
    if bytes == 0.0 && number > 0.0 {
        // Rounding a positive rate to 0 would silently turn shaping off.
        return Err(UnitError::RateTooSmall {
            value: s.to_string(),
        });
    }
    // Rates are reported and written back in bit/s, so the bit rate must fit in 64 bits too
    // (about 18 Ebit/s, far above any link).
    if bytes >= (u64::MAX / 8) as f64 {
        return Err(UnitError::TooLarge {
            kind: "rate",
            value: s.to_string(),
        });
    }
    Ok(Rate::from_bytes_per_sec(bytes as u64))
}

/// Parses a tc-style duration into nanoseconds: `s`/`sec`/`secs`, `ms`/`msec`/`msecs`,
/// `us`/`usec`/`usecs`/`µs`, `ns`; a bare number is microseconds, as tc reads it.
///
/// # Errors
/// [`UnitError::NotADuration`] or [`UnitError::TooLarge`].
///
/// # Examples
/// ```
/// use forwarder::config::units::parse_duration_ns;
/// assert_eq!(parse_duration_ns("5ms").unwrap(), 5_000_000);
/// assert_eq!(parse_duration_ns("200").unwrap(), 200_000);
/// ```
pub fn parse_duration_ns(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let err = || UnitError::NotADuration {
        value: s.to_string(),
    };
    let (number, suffix) = split_number(t).ok_or_else(err)?;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "ns" | "nsec" | "nsecs" => 1.0,
        "" | "us" | "usec" | "usecs" | "µs" => 1e3,
        "ms" | "msec" | "msecs" => 1e6,
        "s" | "sec" | "secs" => 1e9,
        _ => return Err(err()),
    };
    let ns = (number * scale).round();
    if ns >= u64::MAX as f64 {
        return Err(UnitError::TooLarge {
            kind: "duration",
            value: s.to_string(),
        });
    }
    Ok(ns as u64)
}

/// Parses a duration that may be absent: empty or "0" is `None`, anything else as
/// [`parse_duration_ns`] (for settings such as the synth port's run time, where 0 means
/// "no limit").
///
/// # Errors
/// As [`parse_duration_ns`].
///
/// # Examples
/// ```
/// use forwarder::config::units::parse_optional_duration_ns;
/// assert_eq!(parse_optional_duration_ns("500ms").unwrap(), Some(500_000_000));
/// assert_eq!(parse_optional_duration_ns(" ").unwrap(), None);
/// assert_eq!(parse_optional_duration_ns("0").unwrap(), None);
/// ```
pub fn parse_optional_duration_ns(s: &str) -> Result<Option<u64>, UnitError> {
    let t = s.trim();
    if t.is_empty() || t == "0" {
        return Ok(None);
    }
    parse_duration_ns(t).map(Some)
}

/// Parses a run length (`engine.duration`, `engine.drain_timeout`): as
/// [`parse_duration_ns`], but a bare number other than 0 is refused, since `--duration 10`
/// meaning ten microseconds (tc's unit) would stop the run before it started.
///
/// # Errors
/// [`UnitError::NoUnit`] for a bare number, else as [`parse_duration_ns`].
///
/// # Examples
/// ```
/// use forwarder::config::units::parse_run_length_ns;
/// assert_eq!(parse_run_length_ns("10s").unwrap(), 10_000_000_000);
/// assert_eq!(parse_run_length_ns("0").unwrap(), 0);
/// assert!(parse_run_length_ns("10").unwrap_err().to_string().contains("'10s'"));
/// let e = parse_run_length_ns("fast").unwrap_err().to_string();
/// assert!(e.contains("try '10s'") && !e.contains("bare number"), "{e}");
/// ```
pub fn parse_run_length_ns(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    match split_number(t) {
        Some((n, "")) if n != 0.0 => Err(UnitError::NoUnit {
            value: t.to_string(),
        }),
        // The generic hint would offer a bare number, which a run length refuses.
        _ => parse_duration_ns(t).map_err(|e| match e {
            UnitError::NotADuration { value } => UnitError::NotARunLength { value },
            other => other,
        }),
    }
}

/// [`parse_duration_ns`] as a [`std::time::Duration`].
///
/// # Errors
/// As [`parse_duration_ns`].
pub fn parse_duration(s: &str) -> Result<std::time::Duration, UnitError> {
    parse_duration_ns(s).map(std::time::Duration::from_nanos)
}

/// Parses a tc-style size in bytes: `k`/`kb`/`kib`, `m`/`mb`/`mib`, `g`/`gb`/`gib` are powers
/// of 1024 (as tc), `kbit`/`mbit`/`gbit` are 1024-based bits; a bare number or `b` is bytes.
///
/// # Errors
/// [`UnitError::NotASize`] or [`UnitError::TooLarge`].
///
/// # Examples
/// ```
/// use forwarder::config::units::parse_size;
/// assert_eq!(parse_size("32mb").unwrap(), 32 << 20);
/// assert_eq!(parse_size("4096").unwrap(), 4096);
/// ```
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let err = || UnitError::NotASize {
        value: s.to_string(),
    };
    let (number, suffix) = split_number(t).ok_or_else(err)?;
    let k = 1024.0;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => k,
        "m" | "mb" | "mib" => k * k,
        "g" | "gb" | "gib" => k * k * k,
        "kbit" => k / 8.0,
        "mbit" => k * k / 8.0,
        "gbit" => k * k * k / 8.0,
        _ => return Err(err()),
    };
    let bytes = (number * scale).round();
    if bytes >= u64::MAX as f64 {
        return Err(UnitError::TooLarge {
            kind: "size",
            value: s.to_string(),
        });
    }
    Ok(bytes as u64)
}

/// Formats a rate so that [`parse_rate`] reads it back exactly: `unlimited`, `200mbit`,
/// `1kbit`, `1500bit`.
pub fn format_rate(rate: Rate) -> String {
    if rate.is_unlimited() {
        return "unlimited".to_string();
    }
    let bits = rate.bits_per_sec();
    for (unit, scale) in [
        ("tbit", 1_000_000_000_000u64),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if bits % scale == 0 {
            return format!("{}{unit}", bits / scale);
        }
    }
    format!("{bits}bit")
}

/// Formats nanoseconds so that [`parse_duration_ns`] reads them back exactly: `5ms`,
/// `200us`, `1s`, `7ns`.
pub fn format_duration_ns(ns: u64) -> String {
    let mut out = String::new();
    let (n, unit) = if ns == 0 {
        (0, "us")
    } else if ns % 1_000_000_000 == 0 {
        (ns / 1_000_000_000, "s")
    } else if ns % 1_000_000 == 0 {
        (ns / 1_000_000, "ms")
    } else if ns % 1_000 == 0 {
        (ns / 1_000, "us")
    } else {
        (ns, "ns")
    };
    let _ = write!(out, "{n}{unit}");
    out
}

/// Formats bytes so that [`parse_size`] reads them back exactly: `32mb`, `64kb`, `10000`.
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("gb", 30), ("mb", 20), ("kb", 10)] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(s: &str) -> u64 {
        parse_rate(s).unwrap().bits_per_sec()
    }

    #[test]
    fn a_rate_whose_bits_do_not_fit_in_64_bits_is_too_large() {
        // Found by fuzzing config_parse: 51 Ebit/s fitted in bytes/s but came back from the
        // written config as 18.4 Ebit/s.
        let e = parse_rate("50999999999999mbit").unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        let top = parse_rate("18000000tbit").unwrap();
        assert_eq!(parse_rate(&format_rate(top)).unwrap(), top);
    }

    #[test]
    fn a_positive_rate_below_one_byte_per_second_is_not_unlimited() {
        for s in ["1bit", "3", "0.4bit", "0.0000001mbit"] {
            let e = parse_rate(s).unwrap_err();
            assert!(matches!(e, UnitError::RateTooSmall { .. }), "{s}: {e}");
            assert!(e.to_string().contains("would mean unlimited"), "{e}");
        }
        assert_eq!(parse_rate("0bit").unwrap(), Rate::UNLIMITED);
        assert_eq!(parse_rate("0.0mbit").unwrap(), Rate::UNLIMITED);
        assert_eq!(parse_rate("8bit").unwrap().bytes_per_sec(), 1);
    }

    #[test]
    fn rates_parse_like_tc() {
        assert_eq!(bits("2gbit"), 2_000_000_000);
        assert_eq!(bits("500mbit"), 500_000_000);
        assert_eq!(bits("100kbit"), 100_000);
        assert_eq!(bits("1000"), 1000);
        assert_eq!(bits("1.5mbit"), 1_500_000);
        assert_eq!(bits("1gibit"), 1 << 30);
        assert_eq!(bits("10Mbit"), 10_000_000);
        assert_eq!(parse_rate("250mbyte").unwrap().bytes_per_sec(), 250_000_000);
        assert_eq!(parse_rate("1000bps").unwrap().bytes_per_sec(), 1000);
        assert_eq!(parse_rate("5MBps").unwrap().bytes_per_sec(), 5_000_000);
        assert_eq!(parse_rate("unlimited").unwrap(), Rate::UNLIMITED);
        assert_eq!(parse_rate("0").unwrap(), Rate::UNLIMITED);
    }

    #[test]
    fn ambiguous_bps_rates_are_refused_with_both_readings() {
        let e = parse_rate("2gbps").unwrap_err();
        assert_eq!(
            e.to_string(),
            "rate '2gbps' is not a rate; try '2gbit' or '250mbyte'"
        );
        let e = parse_rate("100mbps").unwrap_err().to_string();
        assert!(e.contains("'100mbit' or '12.5mbyte'"), "{e}");
    }

    #[test]
    fn words_are_not_rates() {
        let e = parse_rate("fast").unwrap_err().to_string();
        assert!(
            e.starts_with("rate 'fast' is not a rate; try '200mbit'"),
            "{e}"
        );
        assert!(parse_rate("").is_err());
        assert!(parse_rate("-5mbit").is_err());
        assert!(parse_rate("5 furlongs").is_err());
        assert!(parse_rate("1e400gbit").is_err());
    }

    #[test]
    fn durations_default_to_microseconds_like_tc() {
        assert_eq!(parse_duration_ns("5ms").unwrap(), 5_000_000);
        assert_eq!(parse_duration_ns("100us").unwrap(), 100_000);
        assert_eq!(parse_duration_ns("1s").unwrap(), 1_000_000_000);
        assert_eq!(parse_duration_ns("200").unwrap(), 200_000);
        assert_eq!(parse_duration_ns("2.5msec").unwrap(), 2_500_000);
        assert_eq!(parse_duration_ns("40ns").unwrap(), 40);
        let e = parse_duration_ns("5 minutes").unwrap_err().to_string();
        assert!(e.starts_with("duration '5 minutes' is not a duration; try '5ms'"));
    }

    #[test]
    fn sizes_use_powers_of_1024_like_tc() {
        assert_eq!(parse_size("32mb").unwrap(), 32 << 20);
        assert_eq!(parse_size("64k").unwrap(), 64 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1gb").unwrap(), 1 << 30);
        assert_eq!(parse_size("8kbit").unwrap(), 1024);
        assert!(parse_size("lots")
            .unwrap_err()
            .to_string()
            .contains("try '32mb'"));
    }

    #[test]
    fn formatting_round_trips() {
        for s in ["200mbit", "1kbit", "1504bit", "2gbit", "unlimited", "8bit"] {
            assert_eq!(format_rate(parse_rate(s).unwrap()), s);
        }
        for s in ["5ms", "100us", "1s", "7ns", "1500us"] {
            assert_eq!(format_duration_ns(parse_duration_ns(s).unwrap()), s);
        }
        for s in ["32mb", "64kb", "10000", "1gb"] {
            assert_eq!(format_size(parse_size(s).unwrap()), s);
        }
    }
}
