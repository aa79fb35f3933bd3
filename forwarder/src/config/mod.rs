//! cakewalk's configuration: the TOML file, command-line overrides, and tc-style units
//! ([`units`]).
pub mod units;
