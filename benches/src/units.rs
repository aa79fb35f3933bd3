//! Rates on the harness command lines ("100mbit", "1gbit"), read and printed through the
//! forwarder's own tc-style units ([`forwarder::config::units`]), so that a harness takes
//! exactly the rates `cakewalk` takes and prints them the way `cakewalk` reads them back.
//! Rates here are bits per second and must be positive: a harness always shapes.

use forwarder::config::units;
use qdisc::Rate;

/// A rate string that is not a positive rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rate '{0}' is not a rate; try '100mbit', '1gbit' or '500kbit' (bits per second)")]
pub struct BadRate(pub String);

/// Parses a tc-style rate into bits per second with [`units::parse_rate`].
///
/// # Errors
/// [`BadRate`] for anything that is not a rate, for "unlimited" and 0, and for tc's byte
/// units (`mbps`), which are refused so that a benchmark never runs 8x off.
///
/// # Examples
/// ```
/// assert_eq!(cakewalk_benches::units::parse_rate("100mbit").unwrap(), 100_000_000);
/// assert_eq!(cakewalk_benches::units::parse_rate("1.5gbit").unwrap(), 1_500_000_000);
/// assert!(cakewalk_benches::units::parse_rate("2gbps").is_err());
/// ```
pub fn parse_rate(s: &str) -> Result<u64, BadRate> {
    match units::parse_rate(s) {
        Ok(rate) if !rate.is_unlimited() => Ok(rate.bits_per_sec()),
        _ => Err(BadRate(s.to_string())),
    }
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

/// Formats bits per second the way tc prints them ("100mbit", "1gbit", "1500kbit"), with
/// [`units::format_rate`].
pub fn tc_rate(bps: u64) -> String {
    units::format_rate(Rate::from_bits_per_sec(bps))
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
        assert_eq!(parse_rate("500kbit").unwrap(), 500_000);
        assert_eq!(parse_rate("12000").unwrap(), 12_000);
    }

    #[test]
    fn byte_units_unlimited_and_garbage_are_refused_with_the_value_in_the_message() {
        let e = parse_rate("2gbps").unwrap_err();
        assert!(e.to_string().contains("'2gbps'"), "{e}");
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("").is_err());
        assert!(parse_rate("unlimited").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate_list(",").is_err());
    }

    #[test]
    fn formatting_round_trips_through_parsing() {
        for bps in [10_000_000, 1_000_000_000, 1_500_000, 1000] {
            assert_eq!(parse_rate(&tc_rate(bps)).unwrap(), bps);
        }
    }
}
