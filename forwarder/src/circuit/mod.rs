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
    /// A file changed while it was read: something was still writing it.
    #[error("circuit file '{path}' changed while it was read (is something still writing it?); nothing loaded: write the new file beside it and rename it over the old one, then reload")]
    Changed {
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
    read_checked(path, name, || {})
}

/// [`read_limited`], with `between` run after the read and before the check that the file
/// did not change meanwhile (tests change it there). A file written in place while a reload
/// reads it (an integration's export rewriting ShapedDevices.csv) would otherwise load
/// the rows written so far, and the circuits not yet written would be removed. The open
/// file's length and modification time are compared before and after the read (a file
/// renamed over it meanwhile is another file: what was read is whole); a writer that
/// pauses for the whole read goes unseen, so the docs say to replace the files by a rename.
fn read_checked(path: &Path, name: &str, between: impl FnOnce()) -> Result<String, LoadError> {
    use std::io::Read;
    let read = |cause| LoadError::Read {
        path: name.to_string(),
        cause,
    };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let stamp = |m: std::fs::Metadata| (m.is_file(), m.len(), m.modified().ok());
    let before = stamp(file.metadata().map_err(read)?);
    let mut bytes = Vec::new();
    let max = crate::config::limits::MAX_CIRCUIT_FILE_BYTES;
    (&mut file)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > max {
        return Err(LoadError::TooLarge {
            path: name.to_string(),
        });
    }
    between();
    let after = stamp(file.metadata().map_err(read)?);
    // Only a regular file has a length to compare (not a pipe or a /proc file).
    if before.0 && (before != after || bytes.len() as u64 != before.1) {
        return Err(LoadError::Changed {
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

#[cfg(test)]
mod read_tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_written_while_it_is_read_is_refused_and_a_renamed_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ShapedDevices.csv");
        std::fs::write(&path, "Circuit ID\n1\n").unwrap();
        assert_eq!(read_limited(&path, "s.csv").unwrap(), "Circuit ID\n1\n");
        // A writer appending rows as the reload reads.
        let appended = read_checked(&path, "s.csv", || {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(b"2\n").unwrap();
        });
        let err = appended.unwrap_err();
        assert!(matches!(err, LoadError::Changed { .. }), "{err}");
        assert!(
            err.to_string().contains("rename it over the old one"),
            "{err}"
        );
        // A new file renamed over it: what was read is the old file, whole.
        let next = dir.path().join("next.csv");
        std::fs::write(&next, "Circuit ID\n1\n2\n3\n").unwrap();
        let renamed = read_checked(&path, "s.csv", || std::fs::rename(&next, &path).unwrap());
        assert_eq!(renamed.unwrap(), "Circuit ID\n1\n2\n");
    }
}
