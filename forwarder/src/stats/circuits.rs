//! What the reports say about circuits (docs/circuits.md, "Statistics"): per circuit and
//! direction its delivered rate against its plan, drops, backlog and CAKE's peak sojourn
//! (with its tins in the full view of one circuit), and per node the sums of the circuits
//! under it (virtual nodes too). Plain data and its text; the app reads the circuit shapers
//! and fills it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{fmt_bps, fmt_ns};

/// One tin of one circuit direction.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CircuitTinRow {
    /// The tin's name.
    pub name: String,
    /// Packets delivered.
    pub sent_packets: u64,
    /// Bytes delivered.
    pub sent_bytes: u64,
    /// Packets dropped.
    pub dropped_packets: u64,
    /// Packets CE-marked.
    pub ecn_marked_packets: u64,
    /// Bytes queued.
    pub backlog_bytes: u64,
    /// CAKE's peak, average and base delay, ns.
    pub delay_ns: [u64; 3],
    /// Sparse and bulk flows now.
    pub flows: [u32; 2],
}

/// One direction of one circuit.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CircuitDirRow {
    /// The plan in force, bit/s (0 = unlimited).
    pub plan_bps: u64,
    /// Delivered over the last interval, bit/s.
    pub tx_bps: f64,
    /// Packets delivered since start.
    pub sent_packets: u64,
    /// Bytes delivered since start.
    pub sent_bytes: u64,
    /// Packets dropped since start (every reason).
    pub dropped_packets: u64,
    /// The same by reason (`aqm`, `overflow`, `ack_filter`, ...), the reasons that dropped
    /// any (in the full view of one circuit only).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub drops_by_reason: BTreeMap<String, u64>,
    /// Packets queued now.
    pub backlog_packets: u64,
    /// Bytes queued now.
    pub backlog_bytes: u64,
    /// CAKE's peak sojourn over its tins, ns.
    pub sojourn_peak_ns: u64,
    /// True while the circuit has a queue of its own.
    pub active: bool,
    /// Its tins (in the full view of one circuit only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tins: Vec<CircuitTinRow>,
}

/// One circuit, both directions.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CircuitRow {
    /// Its ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its slot on the data path.
    pub slot: u32,
    /// Its parent node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Towards the subscriber.
    pub download: CircuitDirRow,
    /// From the subscriber.
    pub upload: CircuitDirRow,
}

impl CircuitRow {
    /// Delivered over the interval, both directions, bit/s.
    pub fn tx_bps(&self) -> f64 {
        self.download.tx_bps + self.upload.tx_bps
    }

    /// Drops since start, both directions.
    pub fn drops(&self) -> u64 {
        self.download.dropped_packets + self.upload.dropped_packets
    }

    /// The larger peak sojourn of the two directions.
    pub fn sojourn_ns(&self) -> u64 {
        self.download
            .sojourn_peak_ns
            .max(self.upload.sojourn_peak_ns)
    }
}

/// One direction of a node: the sums of its circuits.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NodeDirRow {
    /// The node's cap, bit/s (0: none).
    pub cap_bps: u64,
    /// The sum of its circuits' plans, bit/s.
    pub plans_bps: u64,
    /// Delivered over the interval, bit/s.
    pub tx_bps: f64,
    /// Bytes delivered since start.
    pub sent_bytes: u64,
    /// Packets dropped since start.
    pub dropped_packets: u64,
    /// Bytes queued now.
    pub backlog_bytes: u64,
    /// The largest peak sojourn among its circuits, ns: the worst queue delay under it.
    pub sojourn_peak_ns: u64,
}

/// One node of the tree.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeRow {
    /// Its name.
    pub name: String,
    /// Depth in the tree (0 at the top).
    pub depth: usize,
    /// Groups for reporting, shapes nothing.
    pub is_virtual: bool,
    /// Circuits in its subtree.
    pub circuits: usize,
    /// Towards the subscribers.
    pub download: NodeDirRow,
    /// From the subscribers.
    pub upload: NodeDirRow,
}

/// The circuits part of a report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CircuitsReport {
    /// Circuits in force.
    pub circuits: usize,
    /// Circuits with a queue of their own, download and upload.
    pub active: [usize; 2],
    /// Memory the circuit queues take, download and upload, bytes.
    pub memory_bytes: [u64; 2],
    /// Where unmatched traffic goes (`link` or its rates).
    pub unmatched: String,
    /// The circuits listed (all, the top ones, or none, as asked).
    pub rows: Vec<CircuitRow>,
    /// Every node.
    pub nodes: Vec<NodeRow>,
    /// The node trees' work, both directions summed (absent without nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeReport>,
}

/// What the node trees did since start, both directions summed: how often each was
/// computed and how many circuits the queues synced with it (docs/design.md, "Shared
/// rates: from cake_mq to a tree"). Their rates over an interval give the sync's cost.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct TreeReport {
    /// Computations of every circuit's share.
    pub computations: u64,
    /// Syncs of the queues (each publishes its live circuits' demands, applies their shares).
    pub syncs: u64,
    /// Circuits synced, summed over those syncs.
    pub leaf_syncs: u64,
    /// Circuits active in the trees now.
    pub active_leaves: u64,
}

/// How `ctl circuits` orders its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    /// Delivered rate, both directions.
    Rate,
    /// Drops since start.
    Drops,
    /// Peak sojourn.
    Sojourn,
}

impl SortBy {
    /// Reads `rate`, `drops` or `sojourn`.
    pub fn parse(word: &str) -> Option<SortBy> {
        match word {
            "rate" => Some(SortBy::Rate),
            "drops" => Some(SortBy::Drops),
            "sojourn" | "delay" => Some(SortBy::Sojourn),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            SortBy::Rate => "rate",
            SortBy::Drops => "drops",
            SortBy::Sojourn => "sojourn",
        }
    }
}

/// Orders `rows` by `by`, largest first (ties by ID), and keeps the first `top`.
pub fn top(rows: &mut Vec<CircuitRow>, by: SortBy, top: usize) {
    rows.sort_by(|a, b| {
        let order = match by {
            SortBy::Rate => b.tx_bps().total_cmp(&a.tx_bps()),
            SortBy::Drops => b.drops().cmp(&a.drops()),
            SortBy::Sojourn => b.sojourn_ns().cmp(&a.sojourn_ns()),
        };
        order.then_with(|| a.id.cmp(&b.id))
    });
    rows.truncate(top);
}

fn plan(bps: u64) -> String {
    if bps == 0 {
        "unlimited".into()
    } else {
        fmt_bps(bps as f64)
    }
}

fn dir_text(d: &CircuitDirRow) -> String {
    format!(
        "{} of {}, {} dropped, queued {} pkts, sojourn {}{}",
        fmt_bps(d.tx_bps),
        plan(d.plan_bps),
        d.dropped_packets,
        d.backlog_packets,
        fmt_ns(d.sojourn_peak_ns),
        if d.active { "" } else { " (idle)" }
    )
}

impl CircuitsReport {
    /// The list `ctl circuits` prints: a header, one line per listed circuit, one per node.
    pub fn text(&self, by: SortBy) -> String {
        let mut out = format!(
            "circuits: {} in force, {} active download, {} active upload, memory {:.1} MiB; unmatched: {}; listed by {}\n",
            self.circuits,
            self.active[0],
            self.active[1],
            (self.memory_bytes[0] + self.memory_bytes[1]) as f64 / f64::from(1u32 << 20),
            self.unmatched,
            by.name()
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "circuit {} ({}): download {}; upload {}",
                r.id,
                r.name,
                dir_text(&r.download),
                dir_text(&r.upload)
            );
        }
        for n in &self.nodes {
            let cap = |d: &NodeDirRow| {
                if d.cap_bps == 0 {
                    String::new()
                } else {
                    format!(" (cap {})", fmt_bps(d.cap_bps as f64))
                }
            };
            let _ = writeln!(
                out,
                "{:indent$}node {}{}: {} circuits; download {} of plans {}{}, {} dropped, sojourn {:.1} ms; upload {} of plans {}{}, {} dropped, sojourn {:.1} ms",
                "",
                n.name,
                if n.is_virtual { " (virtual)" } else { "" },
                n.circuits,
                fmt_bps(n.download.tx_bps),
                fmt_bps(n.download.plans_bps as f64),
                cap(&n.download),
                n.download.dropped_packets,
                n.download.sojourn_peak_ns as f64 / 1e6,
                fmt_bps(n.upload.tx_bps),
                fmt_bps(n.upload.plans_bps as f64),
                cap(&n.upload),
                n.upload.dropped_packets,
                n.upload.sojourn_peak_ns as f64 / 1e6,
                indent = n.depth * 2,
            );
        }
        out
    }
}

impl CircuitRow {
    /// One circuit in full (`ctl circuit ID`): both directions with their tins.
    pub fn text(&self) -> String {
        let mut out = format!(
            "circuit {} ({}), slot {}{}\n",
            self.id,
            self.name,
            self.slot,
            self.parent
                .as_ref()
                .map_or(String::new(), |p| format!(", under {p}"))
        );
        for (name, d) in [("download", &self.download), ("upload", &self.upload)] {
            let reasons: Vec<String> = d
                .drops_by_reason
                .iter()
                .map(|(r, n)| format!("{r} {n}"))
                .collect();
            let _ = writeln!(
                out,
                "  {name}: {}; sent {} pkts {} bytes{}",
                dir_text(d),
                d.sent_packets,
                d.sent_bytes,
                if reasons.is_empty() {
                    String::new()
                } else {
                    format!("; drops by reason: {}", reasons.join(", "))
                }
            );
            for t in &d.tins {
                let _ = writeln!(
                    out,
                    "    tin {}: sent {} pkts {} bytes, dropped {}, marks {}, backlog {} bytes, sparse {} bulk {}, delay peak {} avg {} base {}",
                    t.name,
                    t.sent_packets,
                    t.sent_bytes,
                    t.dropped_packets,
                    t.ecn_marked_packets,
                    t.backlog_bytes,
                    t.flows[0],
                    t.flows[1],
                    fmt_ns(t.delay_ns[0]),
                    fmt_ns(t.delay_ns[1]),
                    fmt_ns(t.delay_ns[2]),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, down_bps: f64, drops: u64, sojourn: u64) -> CircuitRow {
        CircuitRow {
            id: id.into(),
            name: format!("n{id}"),
            slot: 0,
            parent: None,
            download: CircuitDirRow {
                tx_bps: down_bps,
                dropped_packets: drops,
                sojourn_peak_ns: sojourn,
                plan_bps: 10_000_000,
                ..CircuitDirRow::default()
            },
            upload: CircuitDirRow::default(),
        }
    }

    #[test]
    fn one_circuit_in_full_names_its_drops_by_reason() {
        let mut r = row("a", 1e6, 5, 9);
        r.download.drops_by_reason = [("aqm".to_string(), 4), ("overflow".to_string(), 1)].into();
        let text = r.text();
        assert!(
            text.contains("download: ") && text.contains("; drops by reason: aqm 4, overflow 1"),
            "{text}"
        );
        let json = serde_json::to_string(&r).unwrap();
        assert!(
            json.contains(r#""drops_by_reason":{"aqm":4,"overflow":1}"#),
            "{json}"
        );
        assert!(
            !serde_json::to_string(&row("b", 1e6, 0, 0))
                .unwrap()
                .contains("drops_by_reason"),
            "left out when no reason dropped"
        );
    }

    #[test]
    fn the_top_circuits_by_each_key() {
        let all = vec![
            row("a", 1e6, 5, 9),
            row("b", 3e6, 1, 2),
            row("c", 2e6, 7, 4),
        ];
        let ids = |by, n| {
            let mut r = all.clone();
            top(&mut r, by, n);
            r.iter().map(|r| r.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(ids(SortBy::Rate, 2), ["b", "c"]);
        assert_eq!(ids(SortBy::Drops, 3), ["c", "a", "b"]);
        assert_eq!(ids(SortBy::Sojourn, 1), ["a"]);
        let report = CircuitsReport {
            circuits: 3,
            unmatched: "link".into(),
            rows: vec![all[1].clone()],
            ..CircuitsReport::default()
        };
        let text = report.text(SortBy::Rate);
        assert!(text.starts_with("circuits: 3 in force"), "{text}");
        assert!(
            text.contains("circuit b (nb): download 3.00Mbit of 10.00Mbit, 1 dropped"),
            "{text}"
        );
    }
}
