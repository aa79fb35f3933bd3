//! Per-subscriber shaping ("circuits"; docs/circuits.md): the `[circuits]` section
//! ([`config`]), reading the circuit files it names ([`load`]), the stable slot each circuit
//! holds on the data path ([`slots`]), and the circuits in force with each direction's plan
//! and queue options ([`roster`]).
//!
//! The data path sees only a slot number: the prefix table in the [`roster::Roster`] answers
//! with it, the engine writes it into `PacketMeta::circuit`, and the circuit shaper keeps one
//! queue per slot.

pub mod config;
pub mod roster;
pub mod slots;

use std::path::Path;

use circuits::{CircuitSet, Problem};

pub use config::{CircuitsSettings, CircuitsToml, Unmatched};
pub use roster::Roster;
pub use slots::SlotMap;

/// Why the circuit files were not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read.
    #[error("cannot read circuit file '{path}': {cause}; fix [circuits] files or the file's permissions")]
    Read {
        /// The file.
        path: String,
        /// Why.
        cause: std::io::Error,
    },
    /// A file is larger than any circuit file.
    #[error("circuit file '{path}' is larger than {} MiB, the most cakewalk reads; is it the right file?", crate::config::limits::MAX_CIRCUIT_FILE_BYTES >> 20)]
    TooLarge {
        /// The file.
        path: String,
    },
    /// The files have errors: every problem, each with its file and line.
    #[error(transparent)]
    Refused(#[from] circuits::Refused),
    /// `serve_nodes` names a node the files do not have.
    #[error("circuits.serve_nodes: {0}")]
    UnknownNode(#[from] circuits::serve::UnknownNode),
}

/// Reads and checks every file of `settings` as one set, then keeps the part under
/// `serve_nodes` (all of it when that is empty). Returns the set and its warnings.
///
/// # Errors
/// [`LoadError`] naming the file (and line) at fault; nothing is loaded then.
pub fn load(settings: &CircuitsSettings) -> Result<(CircuitSet, Vec<Problem>), LoadError> {
    let mut texts = Vec::with_capacity(settings.files.len());
    for file in &settings.files {
        let name = file.display().to_string();
        let text = read_limited(&settings.path_of(file), &name)?;
        // The extension was checked when the section was resolved.
        let format = circuits::Format::from_name(&name).unwrap_or(circuits::Format::Native);
        texts.push((format, name, text));
    }
    let (set, warnings) =
        circuits::load(texts.iter().map(|(f, n, t)| (*f, n.as_str(), t.as_str())))?;
    Ok((
        circuits::serve::serve_nodes(&set, &settings.serve_nodes)?,
        warnings,
    ))
}

fn read_limited(path: &Path, name: &str) -> Result<String, LoadError> {
    use std::io::Read;
    let read = |cause| LoadError::Read {
        path: name.to_string(),
        cause,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    let max = crate::config::limits::MAX_CIRCUIT_FILE_BYTES;
    file.take(max + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > max {
        return Err(LoadError::TooLarge {
            path: name.to_string(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        read(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (byte {} is not valid UTF-8)",
                e.utf8_error().valid_up_to()
            ),
        ))
    })
}
