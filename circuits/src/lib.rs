//! Subscriber circuits for cakewalk: the model an ISP edge box shapes by (a circuit is one
//! subscriber's plan, download and upload, over one or more devices' addresses, under a tree
//! of nodes), the importers for the files operators already keep (LibreQoS's
//! `ShapedDevices.csv` and `network.json`, and a small TOML form), the checks that refuse
//! ambiguous or impossible files with the line at fault, and the longest-prefix match that
//! maps a packet's address to its circuit.
//!
//! Pure logic like `qdisc`: parsing is of text handed in, never of a path, and nothing here
//! reads a clock or starts a thread. The forwarder reads the files and calls [`load`];
//! `cakewalk check-circuits` prints [`summary::Summary`]. docs/circuits.md describes the
//! formats.
//!
//! Map: [`prefix`] (addresses and prefixes), [`model`] (circuits, devices, nodes),
//! [`shaped_devices`], [`network_json`] and [`native`] (importers), [`validate`] (whole-set
//! checks), [`lpm`] (the lookup table), [`publish`] (lock-free hand-over of a rebuilt table),
//! [`serve`] (the part of the tree one box carries), [`summary`] (what `check-circuits`
//! says); `popcnt` (the lookup compiled for the CPU's bit count, the crate's only `unsafe`).

pub mod lpm;
pub mod model;
pub mod native;
pub mod network_json;
mod popcnt;
pub mod prefix;
pub mod problem;
pub mod publish;
pub mod serve;
pub mod shaped_devices;
pub mod summary;
pub mod validate;

pub use lpm::Lpm;
pub use model::{Circuit, CircuitSet, Device, Names, Node, Origin, Plan, Sqm, SqmChoice};
pub use prefix::{Family, Prefix};
pub use problem::{Problem, Refused, Severity};

/// The file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// LibreQoS `ShapedDevices.csv`.
    ShapedDevices,
    /// LibreQoS `network.json`.
    NetworkJson,
    /// cakewalk's TOML.
    Native,
}

impl Format {
    /// The format a file name implies (`.csv`, `.json`, `.toml`).
    pub fn from_name(name: &str) -> Option<Format> {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".csv") {
            Some(Format::ShapedDevices)
        } else if lower.ends_with(".json") {
            Some(Format::NetworkJson)
        } else if lower.ends_with(".toml") {
            Some(Format::Native)
        } else {
            None
        }
    }
}

/// Imports one file's text.
pub fn import(format: Format, file: &str, text: &str, problems: &mut Vec<Problem>) -> CircuitSet {
    match format {
        Format::ShapedDevices => shaped_devices::import(file, text, problems),
        Format::NetworkJson => network_json::import(file, text, problems),
        Format::Native => native::import(file, text, problems),
    }
}

/// Imports every `(format, file name, text)`, merges them and validates the whole. Returns
/// the set and its warnings, or every problem when there is an error.
///
/// # Errors
/// [`Refused`] with every problem found (errors and warnings) when any is an error.
pub fn load<'a>(
    files: impl IntoIterator<Item = (Format, &'a str, &'a str)>,
) -> Result<(CircuitSet, Vec<Problem>), Refused> {
    let mut problems = Vec::new();
    let mut set = CircuitSet::default();
    let mut have_network = false;
    for (format, file, text) in files {
        have_network |= format == Format::NetworkJson
            || (format == Format::Native && text.contains("[[node]]"));
        set.merge(import(format, file, text, &mut problems));
    }
    problems.extend(validate::validate(&set, have_network));
    if problem::has_errors(&problems) {
        return Err(Refused(problems));
    }
    Ok((set, problems))
}

/// The prefix table of a loaded set: each device's prefixes answer with its circuit's index.
///
/// # Errors
/// [`lpm::BuildError`] when there are more than 2^31 - 2 circuits.
pub fn prefix_table(set: &CircuitSet) -> Result<Lpm, lpm::BuildError> {
    Lpm::build(set.prefixes().map(|(p, c, _)| (p, c as u32)))
}
