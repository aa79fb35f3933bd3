//! What the importers and the validator report: a problem with a severity, the file and line
//! it is about, and a sentence saying what is wrong and what to do. Importers keep going after
//! a bad row so that one run lists every problem of a file.

use std::fmt;

use crate::model::Origin;

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth knowing; the circuits still load.
    Warning,
    /// The files are refused.
    Error,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// How bad.
    pub severity: Severity,
    /// The file and line, when there is one.
    pub origin: Option<Origin>,
    /// What is wrong and what to do.
    pub message: String,
}

impl Problem {
    /// An error at `origin`.
    pub fn error(origin: &Origin, message: impl Into<String>) -> Problem {
        Problem {
            severity: Severity::Error,
            origin: Some(origin.clone()),
            message: message.into(),
        }
    }

    /// A warning at `origin`.
    pub fn warning(origin: &Origin, message: impl Into<String>) -> Problem {
        Problem {
            severity: Severity::Warning,
            origin: Some(origin.clone()),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        match &self.origin {
            Some(o) => write!(f, "{o}: {what}: {}", self.message),
            None => write!(f, "{what}: {}", self.message),
        }
    }
}

/// The files were refused: every error (and warning) found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} error(s) in the circuit files:\n{}", count_errors(.0), list(.0))]
pub struct Refused(pub Vec<Problem>);

fn count_errors(problems: &[Problem]) -> usize {
    problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .count()
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// True when any problem is an error.
pub fn has_errors(problems: &[Problem]) -> bool {
    problems.iter().any(|p| p.severity == Severity::Error)
}
