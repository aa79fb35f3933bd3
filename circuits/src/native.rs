//! cakewalk's own circuit file, TOML, for setups small enough to write by hand:
//!
//! ```toml
//! [[node]]
//! name = "tower"
//! download_mbps = 1000
//! upload_mbps = 200
//!
//! [[circuit]]
//! id = "alice"
//! download_mbps = 100
//! upload_mbps = 20
//! parent = "tower"                  # optional
//! addresses = ["100.64.0.1", "2001:db8:1::/56"]
//! # optional: name, download_min_mbps, upload_min_mbps, sqm = "cake diffserv4", mac
//! ```
//!
//! A node's `parent` names another node defined above it. Each circuit becomes one device
//! holding its addresses.

use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use crate::model::{parse_mac, Circuit, CircuitSet, Device, Lines, Names, Node, Origin, Plan, Sqm};
use crate::problem::Problem;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    node: Vec<Spanned<NodeEntry>>,
    #[serde(default)]
    circuit: Vec<Spanned<CircuitEntry>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: String,
    download_mbps: Option<f64>,
    upload_mbps: Option<f64>,
    parent: Option<String>,
    #[serde(default, rename = "virtual")]
    is_virtual: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CircuitEntry {
    id: String,
    name: Option<String>,
    download_mbps: f64,
    upload_mbps: f64,
    download_min_mbps: Option<f64>,
    upload_min_mbps: Option<f64>,
    parent: Option<String>,
    sqm: Option<String>,
    mac: Option<String>,
    #[serde(default)]
    addresses: Vec<String>,
}

fn bps(mbps: f64, what: &str) -> Result<u64, String> {
    if mbps.is_finite() && (0.0..=1.0e9).contains(&mbps) {
        Ok((mbps * 1.0e6).round() as u64)
    } else {
        Err(format!("{what} {mbps} is not a rate in Mbps"))
    }
}

/// Reads `text` (the contents of `file`).
pub fn import(file: &str, text: &str, problems: &mut Vec<Problem>) -> CircuitSet {
    let name: Arc<str> = Arc::from(file);
    let mut set = CircuitSet::default();
    let mut names = Names::default();
    let lines = Lines::new(text);
    let parsed: File = match toml::from_str(text) {
        Ok(f) => f,
        Err(e) => {
            let line = e.span().map_or(0, |s| lines.line_of(s.start));
            problems.push(Problem::error(
                &Origin::new(&name, line),
                e.message().to_string(),
            ));
            return set;
        }
    };
    for entry in parsed.node {
        let origin = Origin::new(&name, lines.line_of(entry.span().start));
        let n = entry.into_inner();
        let parent = match n.parent.as_deref() {
            None => None,
            Some(p) => match names.node(p) {
                Some(i) => Some(i),
                None => {
                    problems.push(Problem::error(
                        &origin,
                        format!(
                            "node `{}`: parent node `{p}` is not defined above it",
                            n.name
                        ),
                    ));
                    continue;
                }
            },
        };
        let cap = |v: Option<f64>, what: &str, problems: &mut Vec<Problem>| {
            v.and_then(|m| match bps(m, what) {
                Ok(b) => Some(b),
                Err(e) => {
                    problems.push(Problem::error(&origin, e));
                    None
                }
            })
        };
        let download_bps = cap(n.download_mbps, "download_mbps", problems);
        let upload_bps = cap(n.upload_mbps, "upload_mbps", problems);
        names.add_node(&n.name, set.nodes.len());
        set.nodes.push(Node {
            name: n.name,
            download_bps,
            upload_bps,
            parent,
            is_virtual: n.is_virtual,
            origin,
        });
    }
    for entry in parsed.circuit {
        let origin = Origin::new(&name, lines.line_of(entry.span().start));
        let c = entry.into_inner();
        match circuit(&mut set, &mut names, &origin, c) {
            Ok(()) => {}
            Err(e) => problems.push(Problem::error(&origin, e)),
        }
    }
    set
}

fn circuit(
    set: &mut CircuitSet,
    names: &mut Names,
    origin: &Origin,
    c: CircuitEntry,
) -> Result<(), String> {
    let min = |v: Option<f64>, what: &str| v.map(|m| bps(m, what)).transpose();
    let download = Plan {
        max_bps: bps(c.download_mbps, "download_mbps")?,
        min_bps: min(c.download_min_mbps, "download_min_mbps")?,
    };
    let upload = Plan {
        max_bps: bps(c.upload_mbps, "upload_mbps")?,
        min_bps: min(c.upload_min_mbps, "upload_min_mbps")?,
    };
    let sqm = Sqm::parse(c.sqm.as_deref().unwrap_or(""))?;
    let mac = c.mac.as_deref().map(parse_mac).transpose()?;
    let mut prefixes = Vec::new();
    for a in &c.addresses {
        prefixes.push(a.parse().map_err(|e| format!("addresses: {e}"))?);
    }
    if names.circuit(&c.id).is_some() {
        return Err(format!("circuit `{}` is defined twice", c.id));
    }
    let index = set.circuits.len();
    names.add_circuit(&c.id, index);
    set.circuits.push(Circuit {
        name: c.name.unwrap_or_else(|| c.id.clone()),
        id: c.id.clone(),
        download,
        upload,
        parent: c.parent,
        sqm,
        devices: vec![set.devices.len()],
        origin: origin.clone(),
    });
    set.devices.push(Device {
        id: c.id,
        name: String::new(),
        mac,
        prefixes,
        comment: String::new(),
        circuit: index,
        origin: origin.clone(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_file_loads_with_lines() {
        let text = r#"
[[node]]
name = "tower"
download_mbps = 1000
upload_mbps = 200

[[node]]
name = "ap1"
parent = "tower"
download_mbps = 300
upload_mbps = 60

[[circuit]]
id = "alice"
download_mbps = 100
upload_mbps = 20
download_min_mbps = 10
parent = "ap1"
sqm = "cake diffserv4"
addresses = ["100.64.0.1", "2001:db8:1::/56"]
"#;
        let mut problems = Vec::new();
        let set = import("c.toml", text, &mut problems);
        assert_eq!(problems, vec![]);
        assert_eq!(set.nodes[1].parent, Some(0));
        assert_eq!(set.nodes[1].origin.line, 7);
        let c = &set.circuits[0];
        assert_eq!((c.name.as_str(), c.origin.line), ("alice", 13));
        assert_eq!(c.download.min_bps, Some(10_000_000));
        assert_eq!(set.devices[0].prefixes.len(), 2);
    }

    #[test]
    fn mistakes_name_their_line() {
        let mut problems = Vec::new();
        import(
            "c.toml",
            "[[circuit]]\nid = \"a\"\ndownload_mbps = 1\nupload_mbps = 1\nspeed = 3\n",
            &mut problems,
        );
        assert!(
            problems[0]
                .to_string()
                .starts_with("c.toml:5: error: unknown field `speed`"),
            "{problems:?}"
        );
        let mut problems = Vec::new();
        import(
            "c.toml",
            "[[node]]\nname = \"x\"\nparent = \"y\"\n[[circuit]]\nid = \"a\"\ndownload_mbps = -1\nupload_mbps = 1\n",
            &mut problems,
        );
        assert!(problems[0]
            .to_string()
            .starts_with("c.toml:1: error: node `x`: parent node `y`"));
        assert!(problems[1]
            .to_string()
            .starts_with("c.toml:4: error: download_mbps -1"));
    }
}
