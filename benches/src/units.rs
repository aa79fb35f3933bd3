//! tc-style rate parsing and formatting for the harness command lines ("100mbit", "1gbit",
//! "1.5gbit", "500M"). Rates are bits per second; bytes-based units ("mbps" in tc means
//! megabytes) are refused with a hint, because mixing them up is the classic shaper mistake.

/// A rate string that is not a rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rate '{0}' is not a rate; try '100mbit', '1gbit' or '500kbit' (bits per second)")]
pub struct BadRate(pub String);

/// Parses a tc-style rate into bits per second.
///
/// Accepts a number with an optional suffix `bit`, `kbit`, `mbit`, `gbit`, `tbit`
/// (also `k`, `m`, `g`, `t`, case-insensitive), powers of 1000 as in tc.
///
/// # Errors
/// [`BadRate`] for anything else, including tc's byte units (`mbps`), which we refuse so a
/// benchmark never runs 8x off.
///
/// # Examples
/// ```
/// assert_eq!(cakewalk_benches::units::parse_rate("100mbit").unwrap(), 100_000_000);
/// assert_eq!(cakewalk_benches::units::parse_rate("1.5G").unwrap(), 1_500_000_000);
/// assert!(cakewalk_benches::units::parse_rate("2gbps").is_err());
/// ```
pub fn parse_rate(s: &str) -> Result<u64, BadRate> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| BadRate(s.to_string()))?;
    let mult = match unit {
        "" | "bit" => 1e0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        "t" | "tbit" => 1e12,
        _ => return Err(BadRate(s.to_string())),
    };
    let bps = value * mult;
    if !bps.is_finite() || !(1.0..=1e13).contains(&bps) {
        return Err(BadRate(s.to_string()));
    }
    Ok(bps.round() as u64)
}

/// Parses a comma-separated list of rates ("10mbit,100mbit,1gbit").
///
/// # Errors
/// The first [`BadRate`] in the list, or one for an empty list.
pub fn parse_rate_list(s: &str) -> Result<Vec<u64>, BadRate> {
    let v: Vec<u64> = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse_rate)
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(BadRate(s.to_string()));
    }
    Ok(v)
}

/// Formats bits per second the way tc prints them ("100mbit", "1gbit", "1500kbit").
pub fn tc_rate(bps: u64) -> String {
    for (div, unit) in [
        (1_000_000_000, "gbit"),
        (1_000_000, "mbit"),
        (1_000, "kbit"),
    ] {
        if bps >= div && bps.is_multiple_of(div) {
            return format!("{}{unit}", bps / div);
        }
    }
    format!("{bps}bit")
}

/// Formats bits per second for a table, in Mbit/s with three decimals.
pub fn mbit(bps: f64) -> String {
    format!("{:.3}", bps / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_units_parse_in_powers_of_1000() {
        assert_eq!(parse_rate("10mbit").unwrap(), 10_000_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("500K").unwrap(), 500_000);
        assert_eq!(parse_rate("12345").unwrap(), 12_345);
    }

    #[test]
    fn byte_units_and_garbage_are_refused_with_the_value_in_the_message() {
        let e = parse_rate("2gbps").unwrap_err();
        assert!(e.to_string().contains("'2gbps'"), "{e}");
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("").is_err());
        assert!(parse_rate_list(",").is_err());
    }

    #[test]
    fn formatting_round_trips_through_parsing() {
        for bps in [10_000_000, 1_000_000_000, 1_500_000, 999] {
            assert_eq!(parse_rate(&tc_rate(bps)).unwrap(), bps);
        }
    }
}
