//! The `[circuits]` section: which circuit files to load (LibreQoS `ShapedDevices.csv` and
//! `network.json`, or cakewalk's TOML; docs/circuits.md), what happens to traffic that
//! matches no circuit, and the limits of each circuit's queue. Reading the files is
//! [`super::load`]'s job; this module only checks the section's own values, so that
//! `check-config` and a reload judge it as `run` does.

use std::path::{Path, PathBuf};

use qdisc::Rate;
use serde::{Deserialize, Serialize};

use crate::config::units::{format_duration_ns, format_rate, parse_duration_ns, parse_rate};

/// The `[circuits]` table as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CircuitsToml {
    /// Circuit files, relative to the config file's directory: `.csv` (ShapedDevices),
    /// `.json` (network.json), `.toml` (cakewalk's form).
    pub files: Vec<PathBuf>,
    /// Traffic that matches no circuit: `"link"` (shaped by the link alone) or a rate pair
    /// `"10mbit/2mbit"` (download/upload) that all of it shares as one circuit.
    pub unmatched: String,
    /// How long a circuit's queue stays allocated after its last packet left ("30s").
    pub idle_release: String,
    /// Most memory one circuit's queue may hold ("auto": derived from its rate, as CAKE's
    /// memlimit is; or a size such as "4mb").
    pub memory_limit: String,
    /// How long a removed circuit's slot waits before a new circuit may take it ("5s"),
    /// so that packets still queued for it are never counted under another circuit.
    pub drain: String,
    /// Bytes each circuit's shaper may send ahead of its plan ("1514", one full frame:
    /// the bucket of a token-bucket shaper such as LibreQoS's HTB, which allows more; "0"
    /// shapes as strictly as sch_cake.c). The lead is also at most 1 ms of the plan.
    pub burst: String,
    /// The nodes this box serves when the network is split across several boxes
    /// (docs/circuits.md, "Several boxes"): only the circuits under them are loaded, with
    /// the nodes on their path to the root. `"(root)"` adds the circuits without a parent
    /// node. Empty: every circuit.
    pub serve_nodes: Vec<String>,
}

impl Default for CircuitsToml {
    fn default() -> Self {
        CircuitsToml {
            files: Vec::new(),
            unmatched: "link".into(),
            idle_release: "30s".into(),
            memory_limit: "auto".into(),
            drain: "5s".into(),
            burst: "1514".into(),
            serve_nodes: Vec::new(),
        }
    }
}

/// Where unmatched traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// Passes under the link's shaper alone, with no circuit.
    Link,
    /// Shares one circuit with these rates (download, upload).
    Rates {
        /// Towards the subscribers.
        download: Rate,
        /// From the subscribers.
        upload: Rate,
    },
}

impl Unmatched {
    /// `link` or `DOWN/UP` (`10mbit/2mbit`); one rate is both directions.
    ///
    /// # Errors
    /// What is wrong and what to write instead.
    pub fn parse(text: &str) -> Result<Unmatched, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("link") || t.is_empty() {
            return Ok(Unmatched::Link);
        }
        let (down, up) = t.split_once('/').unwrap_or((t, t));
        let rate = |s: &str| {
            parse_rate(s).map_err(|e| {
                format!("{e}; write \"link\" (no circuit, only the link's shaper) or a download/upload pair such as \"10mbit/2mbit\"")
            })
        };
        let (download, upload) = (rate(down)?, rate(up)?);
        if download.is_unlimited() || upload.is_unlimited() {
            return Err(format!(
                "'{t}' leaves unmatched traffic unlimited in a direction; write \"link\" to let it pass under the link's shaper, or give both rates"
            ));
        }
        Ok(Unmatched::Rates { download, upload })
    }

    /// As the config file writes it.
    pub fn show(self) -> String {
        match self {
            Unmatched::Link => "link".to_string(),
            Unmatched::Rates { download, upload } => {
                format!("{}/{}", format_rate(download), format_rate(upload))
            }
        }
    }
}

/// The resolved `[circuits]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitsSettings {
    /// The files, as written.
    pub files: Vec<PathBuf>,
    /// The directory relative file names are read from (the config file's), `None` for the
    /// current directory.
    pub base: Option<PathBuf>,
    /// Where unmatched traffic goes.
    pub unmatched: Unmatched,
    /// Idle time before a circuit's queue is released, ns.
    pub idle_release_ns: u64,
    /// Per circuit queue memory limit, bytes; `None` derives it from the rate.
    pub memory_limit: Option<u64>,
    /// How long a removed circuit's slot is held, ns.
    pub drain_ns: u64,
    /// Each circuit's burst, bytes (`qdisc::circuit::CircuitShaperConfig::circuit_burst`).
    pub burst: u32,
    /// The nodes this box serves (`circuits::serve`); empty for all.
    pub serve_nodes: Vec<String>,
}

impl CircuitsSettings {
    /// Resolves the section; `None` when it names no file (circuits off).
    ///
    /// # Errors
    /// `(key, message)` for the key at fault.
    pub fn resolve(raw: &CircuitsToml) -> Result<Option<CircuitsSettings>, (String, String)> {
        let key = |k: &str| format!("circuits.{k}");
        let unmatched = Unmatched::parse(&raw.unmatched).map_err(|m| (key("unmatched"), m))?;
        let dur = |k: &str, v: &str| {
            parse_duration_ns(v).map_err(|_| {
                (
                    key(k),
                    format!("'{v}' is not a duration; use one with its unit, like '30s'"),
                )
            })
        };
        let idle_release_ns = dur("idle_release", &raw.idle_release)?;
        let drain_ns = dur("drain", &raw.drain)?;
        let memory_limit = match raw.memory_limit.trim() {
            "" | "auto" => None,
            v => Some(crate::config::units::parse_size(v).map_err(|_| {
                (
                    key("memory_limit"),
                    format!("'{v}' is not a size; use \"auto\" or one like \"4mb\""),
                )
            })?),
        };
        let burst = crate::config::units::parse_size(&raw.burst)
            .ok()
            .and_then(|b| u32::try_from(b).ok())
            .filter(|&b| b <= qdisc::cake::MAX_BURST)
            .ok_or_else(|| {
                (
                    key("burst"),
                    format!(
                        "'{}' is not a burst; use a size of at most {} bytes, such as \"1514\" (one frame, the default) or \"0\" (none)",
                        raw.burst,
                        qdisc::cake::MAX_BURST
                    ),
                )
            })?;
        if memory_limit == Some(0) {
            return Err((
                key("memory_limit"),
                "0 holds nothing; use \"auto\" or a size such as \"4mb\"".into(),
            ));
        }
        for f in &raw.files {
            let name = f.display().to_string();
            if circuits::Format::from_name(&name).is_none() {
                return Err((
                    key("files"),
                    format!("'{name}' is neither .csv (ShapedDevices), .json (network.json) nor .toml (cakewalk's form); name each file with its kind's extension"),
                ));
            }
        }
        if let Some(i) = raw.serve_nodes.iter().position(|n| n.trim().is_empty()) {
            return Err((
                key("serve_nodes"),
                format!("entry {} is empty; name a node of network.json, or \"(root)\" for the circuits without a parent", i + 1),
            ));
        }
        if raw.files.is_empty() {
            return Ok(None);
        }
        Ok(Some(CircuitsSettings {
            files: raw.files.clone(),
            base: None,
            unmatched,
            idle_release_ns,
            memory_limit,
            drain_ns,
            burst,
            serve_nodes: raw.serve_nodes.clone(),
        }))
    }

    /// The path a file is read from.
    pub fn path_of(&self, file: &Path) -> PathBuf {
        match &self.base {
            Some(b) if file.is_relative() => b.join(file),
            _ => file.to_path_buf(),
        }
    }

    /// Back to the table (for `check-config`'s effective configuration).
    pub fn to_toml(&self) -> CircuitsToml {
        CircuitsToml {
            files: self.files.clone(),
            unmatched: self.unmatched.show(),
            idle_release: format_duration_ns(self.idle_release_ns),
            memory_limit: self
                .memory_limit
                .map_or_else(|| "auto".to_string(), crate::config::units::format_size),
            drain: format_duration_ns(self.drain_ns),
            burst: self.burst.to_string(),
            serve_nodes: self.serve_nodes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmatched_is_link_or_a_rate_pair() {
        assert_eq!(Unmatched::parse("link").unwrap(), Unmatched::Link);
        let Unmatched::Rates { download, upload } = Unmatched::parse("10mbit/2mbit").unwrap()
        else {
            panic!("a pair")
        };
        assert_eq!(
            (download.bits_per_sec(), upload.bits_per_sec()),
            (10_000_000, 2_000_000)
        );
        assert_eq!(
            Unmatched::parse("10mbit/2mbit").unwrap().show(),
            "10mbit/2mbit"
        );
        let one = Unmatched::parse("5mbit").unwrap();
        assert_eq!(one.show(), "5mbit/5mbit");
        let e = Unmatched::parse("fast/2mbit").unwrap_err();
        assert!(e.contains("\"link\""), "{e}");
        let e = Unmatched::parse("unlimited/2mbit").unwrap_err();
        assert!(e.contains("unlimited in a direction"), "{e}");
    }

    #[test]
    fn the_section_names_the_key_at_fault() {
        let bad = |t: CircuitsToml| CircuitsSettings::resolve(&t).unwrap_err();
        let files = vec![PathBuf::from("a.csv")];
        let (k, m) = bad(CircuitsToml {
            files: vec![PathBuf::from("devices.txt")],
            ..CircuitsToml::default()
        });
        assert_eq!(k, "circuits.files");
        assert!(m.contains("devices.txt"), "{m}");
        let (k, _) = bad(CircuitsToml {
            files: files.clone(),
            idle_release: "soon".into(),
            ..CircuitsToml::default()
        });
        assert_eq!(k, "circuits.idle_release");
        let (k, _) = bad(CircuitsToml {
            files: files.clone(),
            memory_limit: "0".into(),
            ..CircuitsToml::default()
        });
        assert_eq!(k, "circuits.memory_limit");
        for burst in ["2mb", "-1", "a frame"] {
            let (k, m) = bad(CircuitsToml {
                files: files.clone(),
                burst: burst.into(),
                ..CircuitsToml::default()
            });
            assert_eq!(k, "circuits.burst");
            assert!(m.contains("\"1514\""), "{m}");
        }
        assert_eq!(
            CircuitsSettings::resolve(&CircuitsToml::default()),
            Ok(None)
        );
        let s = CircuitsSettings::resolve(&CircuitsToml {
            files,
            memory_limit: "4mb".into(),
            ..CircuitsToml::default()
        })
        .unwrap()
        .unwrap();
        assert_eq!(s.memory_limit, Some(4 << 20));
        assert_eq!(s.idle_release_ns, 30_000_000_000);
        assert_eq!(s.burst, qdisc::circuit::DEFAULT_CIRCUIT_BURST);
        let back = CircuitsSettings::resolve(&s.to_toml()).unwrap().unwrap();
        assert_eq!(back, s);
    }
}
