//! What `cakewalk check-circuits` prints about a loaded set: counts of circuits, devices,
//! prefixes and nodes, the prefix table's size, and per node the sum of the plans of every
//! circuit under it (its subtree) against the node's own cap, which is how oversubscribed
//! each site and access point is.

use std::fmt;

use crate::model::{show_rate, CircuitSet, Names};
use crate::prefix::Family;

/// The totals of one node's subtree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTotals {
    /// The node's name.
    pub name: String,
    /// Depth in the tree (0 at the top).
    pub depth: usize,
    /// Virtual (groups, does not shape).
    pub is_virtual: bool,
    /// Circuits in the subtree.
    pub circuits: usize,
    /// Sum of their download maxima, bits per second.
    pub download_plans_bps: u64,
    /// Sum of their upload maxima.
    pub upload_plans_bps: u64,
    /// The node's download cap.
    pub download_cap_bps: Option<u64>,
    /// The node's upload cap.
    pub upload_cap_bps: Option<u64>,
}

/// The summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Circuits.
    pub circuits: usize,
    /// Devices.
    pub devices: usize,
    /// IPv4 prefixes.
    pub v4_prefixes: usize,
    /// IPv6 prefixes.
    pub v6_prefixes: usize,
    /// Nodes and their subtrees, in tree order.
    pub nodes: Vec<NodeTotals>,
    /// Circuits with no parent node.
    pub root_circuits: usize,
    /// Sum of all download maxima.
    pub download_plans_bps: u64,
    /// Sum of all upload maxima.
    pub upload_plans_bps: u64,
    /// Bytes of the prefix table, when it was built.
    pub table_bytes: Option<usize>,
}

impl Summary {
    /// Summarises `set` (validated, so every parent is known or absent).
    pub fn of(set: &CircuitSet) -> Summary {
        let mut nodes: Vec<NodeTotals> = set
            .nodes
            .iter()
            .map(|n| {
                let mut depth = 0;
                let mut up = n.parent;
                while let Some(p) = up {
                    depth += 1;
                    up = set.nodes[p].parent;
                    if depth > set.nodes.len() {
                        break;
                    }
                }
                NodeTotals {
                    name: n.name.clone(),
                    depth,
                    is_virtual: n.is_virtual,
                    circuits: 0,
                    download_plans_bps: 0,
                    upload_plans_bps: 0,
                    download_cap_bps: n.download_bps,
                    upload_cap_bps: n.upload_bps,
                }
            })
            .collect();
        let mut root_circuits = 0;
        let names = Names::of(set);
        for c in &set.circuits {
            let mut at = c.parent.as_deref().and_then(|p| names.node(p));
            if at.is_none() {
                root_circuits += 1;
            }
            let mut steps = 0;
            while let Some(n) = at {
                let t = &mut nodes[n];
                t.circuits += 1;
                t.download_plans_bps = t.download_plans_bps.saturating_add(c.download.max_bps);
                t.upload_plans_bps = t.upload_plans_bps.saturating_add(c.upload.max_bps);
                at = set.nodes[n].parent;
                steps += 1;
                if steps > set.nodes.len() {
                    break;
                }
            }
        }
        let count = |f: Family| set.prefixes().filter(|(p, _, _)| p.family == f).count();
        Summary {
            circuits: set.circuits.len(),
            devices: set.devices.len(),
            v4_prefixes: count(Family::V4),
            v6_prefixes: count(Family::V6),
            nodes,
            root_circuits,
            download_plans_bps: set.circuits.iter().map(|c| c.download.max_bps).sum(),
            upload_plans_bps: set.circuits.iter().map(|c| c.upload.max_bps).sum(),
            table_bytes: None,
        }
    }
}

fn versus(plans: u64, cap: Option<u64>) -> String {
    match cap {
        Some(cap) if cap > 0 => format!(
            "{} of {} ({:.1}x)",
            show_rate(plans),
            show_rate(cap),
            plans as f64 / cap as f64
        ),
        _ => format!("{} (no cap)", show_rate(plans)),
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "circuits: {}  devices: {}  prefixes: {} IPv4, {} IPv6  nodes: {}",
            self.circuits,
            self.devices,
            self.v4_prefixes,
            self.v6_prefixes,
            self.nodes.len()
        )?;
        writeln!(
            f,
            "plans: download {}, upload {} in total",
            show_rate(self.download_plans_bps),
            show_rate(self.upload_plans_bps)
        )?;
        if let Some(b) = self.table_bytes {
            writeln!(f, "prefix table: {:.1} KiB", b as f64 / 1024.0)?;
        }
        if !self.nodes.is_empty() {
            writeln!(f, "nodes (plans under each node against its cap):")?;
            for n in &self.nodes {
                writeln!(
                    f,
                    "  {}{}{}: {} circuits; download {}; upload {}",
                    "  ".repeat(n.depth),
                    n.name,
                    if n.is_virtual { " (virtual)" } else { "" },
                    n.circuits,
                    versus(n.download_plans_bps, n.download_cap_bps),
                    versus(n.upload_plans_bps, n.upload_cap_bps)
                )?;
            }
            writeln!(f, "  (no parent node): {} circuits", self.root_circuits)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_add_up_the_tree() {
        let net = r#"{"site": {"downloadBandwidthMbps": 100, "uploadBandwidthMbps": 50,
            "children": {"ap": {"downloadBandwidthMbps": 40, "uploadBandwidthMbps": 20}}}}"#;
        let csv = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n\
            1,a,1,d,ap,,100.64.0.1,,,,30,10,\n2,b,2,d,ap,,100.64.0.2,2001:db8::/64,,,30,10,\n3,c,3,d,site,,100.64.0.3,,,,25,5,\n4,e,4,d,,,100.64.0.4,,,,5,5,\n";
        let (set, warnings) = crate::load([
            (crate::Format::NetworkJson, "network.json", net),
            (crate::Format::ShapedDevices, "ShapedDevices.csv", csv),
        ])
        .unwrap();
        assert!(warnings.is_empty());
        let s = Summary::of(&set);
        assert_eq!(
            (s.circuits, s.devices, s.v4_prefixes, s.v6_prefixes),
            (4, 4, 4, 1)
        );
        assert_eq!(s.nodes[0].download_plans_bps, 85_000_000);
        assert_eq!(s.nodes[1].circuits, 2);
        assert_eq!(s.root_circuits, 1);
        let text = s.to_string();
        assert!(
            text.contains("  site: 3 circuits; download 85 Mbit/s of 100 Mbit/s (0.8x)"),
            "{text}"
        );
        assert!(
            text.contains("    ap: 2 circuits; download 60 Mbit/s of 40 Mbit/s (1.5x)"),
            "{text}"
        );
    }
}
