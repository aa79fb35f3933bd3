//! The sections of `BENCHMARKS.md` for the criterion benches other than the qdisc matrix:
//! the rate tree (`qdisc/benches/tree.rs`), the circuit prefix table
//! (`circuits/benches/lpm.rs`) and per-circuit CAKE (`qdisc/benches/circuits.rs`).
//! `scripts/bench-criterion NAME` runs the bench, keeps its output (the memory lines the
//! benches print are not in criterion's files) and renders the section with the
//! `criterion_section` binary. Each section is one table and a few lines: when and where it
//! ran, the command, and what the numbers mean, computed from the rows.

use std::collections::BTreeMap;

use crate::criterion::{Measurement, RunInfo};
use crate::report::Table;

/// The benches this module renders, by section name: (section, package, bench, criterion's
/// default arguments).
pub const BENCHES: [(&str, &str, &str, &str); 3] = [
    (
        "tree",
        "qdisc",
        "tree",
        "--warm-up-time 1 --measurement-time 10",
    ),
    (
        "lpm",
        "circuits",
        "lpm",
        "--warm-up-time 1 --measurement-time 2",
    ),
    (
        "circuits",
        "qdisc",
        "circuits",
        "--warm-up-time 1 --measurement-time 3",
    ),
];

/// The section's text for `name` ("tree", "lpm", "circuits"), from criterion's `rows` and the
/// bench's printed output `log`; `None` for a name this module does not render.
pub fn render(
    name: &str,
    rows: &BTreeMap<String, Measurement>,
    log: &str,
    run: &RunInfo,
) -> Option<String> {
    match name {
        "tree" => Some(tree(rows, run)),
        "lpm" => Some(lpm(rows, log, run)),
        "circuits" => Some(circuits(rows, log, run)),
        _ => None,
    }
}

/// The sentence every paragraph opens with: when, which commit, where, the load, the command.
fn run_line(run: &RunInfo) -> String {
    crate::report::provenance(
        &run.date,
        &run.commit,
        &run.machine,
        &run.load,
        &run.command,
    )
}

/// A time in ns as the tables show it: "10.3 ns", "28.9 µs", "285 µs", "1.2 ms".
fn time(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else {
        (ns / 1e6, "ms")
    };
    if v < 100.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

/// The leaf counts of the tree bench, its columns.
const LEAVES: [usize; 2] = [1_000, 10_000];

/// The rate tree: one computation of every leaf's share at 1 000 and 10 000 leaves, and one
/// owner's sync of one leaf; then what that costs per second at the sync interval.
pub fn tree(rows: &BTreeMap<String, Measurement>, run: &RunInfo) -> String {
    let mut t = Table::new(&["row", "1 000 leaves", "10 000 leaves", "per leaf"]);
    let per_leaf = |ids: &[Option<f64>]| {
        let v: Vec<f64> = ids
            .iter()
            .zip(LEAVES)
            .filter_map(|(m, n)| m.map(|m| m / n as f64))
            .collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        match v.len() {
            0 => "-".to_string(),
            _ if format!("{lo:.0}") == format!("{hi:.0}") => format!("{lo:.0} ns"),
            _ => format!("{lo:.0}-{hi:.0} ns"),
        }
    };
    let families = [
        (
            "`Allocator::allocate`, flat (the cake_mq shape)",
            "allocate/flat",
        ),
        ("`Allocator::allocate`, 3 levels", "allocate/tree3"),
        (
            "`SharedTree::compute_if_due`, 3 levels (slots, bitmap, publish)",
            "compute/tree3",
        ),
    ];
    for (label, id) in families {
        let ms: Vec<Option<f64>> = LEAVES
            .iter()
            .map(|n| rows.get(&format!("{id}/{n}")).map(|m| m.mean_ns))
            .collect();
        if ms.iter().all(Option::is_none) {
            continue;
        }
        let cell = |m: &Option<f64>| m.map_or("-".to_string(), time);
        t.push(vec![
            label.to_string(),
            cell(&ms[0]),
            cell(&ms[1]),
            per_leaf(&ms),
        ]);
    }
    let sync = rows
        .get("sync/leaf_sync_x1000")
        .map(|m| m.mean_ns / 1_000.0);
    if let Some(s) = sync {
        t.push(vec![
            "one owner's sync of a leaf (`LeafMeter::publish` + `take_share`)".into(),
            String::new(),
            String::new(),
            time(s),
        ]);
    }
    // The share of one core spent per second at the interval `for_leaves` picks: one
    // computation per interval, and a worker owning half the leaves syncing each twice.
    let costs: Vec<String> = LEAVES
        .iter()
        .filter_map(|&n| {
            let interval = qdisc::rate_tree::TreeSyncConfig::for_leaves(n).interval_ns as f64;
            let compute = 100.0 * rows.get(&format!("compute/tree3/{n}"))?.mean_ns / interval;
            let share = match sync {
                Some(sync) => format!("{compute:.1} / {:.1} %", 100.0 * n as f64 * sync / interval),
                None => format!("{compute:.1} %"),
            };
            Some((share, thousands(&n.to_string()), time(interval)))
        })
        .enumerate()
        .map(|(i, (share, n, interval))| {
            let leaves = if i == 0 { " leaves" } else { "" };
            format!("{share} at {n}{leaves} ({interval})")
        })
        .collect();
    format!(
        "## Rate tree (criterion, `qdisc/benches/tree.rs`)\n{}\n{} Cells: mean CPU time, every \
         leaf active.{}\n",
        t.to_markdown(),
        run_line(run),
        if costs.is_empty() {
            String::new()
        } else {
            format!(
                " A core's share at the sync interval, computing{}: {}.",
                if sync.is_some() {
                    " / syncing half the leaves (warm)"
                } else {
                    ""
                },
                costs.join(", ")
            )
        }
    )
}

/// Addresses per iteration of the lpm bench (its `BATCH`).
const LPM_BATCH: f64 = 4096.0;

/// `lpm v4 10000: 1.27 MiB, 136.0 bytes per prefix` lines of the lpm bench's output, by
/// (family, prefixes).
fn lpm_memory(log: &str) -> BTreeMap<(String, String), String> {
    log.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("lpm ")?;
            let (key, value) = rest.split_once(": ")?;
            let (fam, n) = key.split_once(' ')?;
            let (mib, per) = value.split_once(", ")?;
            let per = per.strip_suffix(" bytes per prefix")?;
            let per: f64 = per.parse().ok()?;
            Some((
                (fam.to_string(), n.to_string()),
                format!("{mib}, {per:.0} B/prefix"),
            ))
        })
        .collect()
}

/// The circuit prefix table: the poptrie in bursts and one by one beside the alternatives,
/// ns per lookup (the median sample), skewed / uniform addresses in each cell, with its
/// memory.
pub fn lpm(rows: &BTreeMap<String, Measurement>, log: &str, run: &RunInfo) -> String {
    let memory = lpm_memory(log);
    let mut t = Table::new(&[
        "table",
        "poptrie, bursts of 32",
        "poptrie, one by one",
        "bsearch",
        "ip_network_table",
        "prefix-trie",
        "memory",
    ]);
    let impls = [
        "poptrie_batch",
        "poptrie",
        "bsearch",
        "treebitmap",
        "prefix_trie",
    ];
    let mut speedups = Vec::new();
    for (fam, label) in [("v4", "IPv4"), ("v6", "IPv6")] {
        for n in ["10000", "100000"] {
            // Each implementation's ns per lookup, skewed then uniform.
            let ns: Vec<[Option<f64>; 2]> = impls
                .iter()
                .map(|name| {
                    ["skewed", "uniform"].map(|mix| {
                        rows.get(&format!("lpm/{name}_{fam}_{mix}/{n}"))
                            .map(|m| m.median_ns / LPM_BATCH)
                    })
                })
                .collect();
            if ns.iter().flatten().all(Option::is_none) {
                continue;
            }
            for mix in 0..2 {
                let crates = ns[2..]
                    .iter()
                    .filter_map(|v| v[mix])
                    .fold(f64::INFINITY, f64::min);
                if let Some(best) = ns[0][mix] {
                    if crates.is_finite() {
                        speedups.push(crates / best);
                    }
                }
            }
            let cell = |v: &Option<f64>| match v {
                None => "-".to_string(),
                Some(v) if *v < 50.0 => format!("{v:.1}"),
                Some(v) => format!("{v:.0}"),
            };
            let mut row = vec![format!("{label}, {}", thousands(n))];
            row.extend(ns.iter().map(|[a, b]| format!("{} / {}", cell(a), cell(b))));
            row.push(
                memory
                    .get(&(fam.to_string(), n.to_string()))
                    .cloned()
                    .unwrap_or_default(),
            );
            t.push(row);
        }
    }
    let lo = speedups.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = speedups.iter().copied().fold(0.0, f64::max);
    format!(
        "## Circuit prefix table (criterion, `circuits/benches/lpm.rs`)\n{}\n{} Cells: ns per \
         lookup (median sample), skewed / uniform addresses (skewed: 90 % from 1 000 \
         subscribers).{}\n",
        t.to_markdown(),
        run_line(run),
        if speedups.is_empty() {
            String::new()
        } else {
            format!(" Poptrie in bursts: {lo:.1}-{hi:.1}x the fastest other.")
        }
    )
}

/// "100000" as "100 000".
fn thousands(n: &str) -> String {
    let mut out = String::new();
    for (i, c) in n.chars().enumerate() {
        if i > 0 && (n.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// The `memory:` line of the circuits bench's output, in short: bytes per idle slot, per
/// active instance, and of the link CAKE.
fn circuits_memory(log: &str) -> Option<String> {
    let line = log
        .lines()
        .find_map(|l| l.trim().strip_prefix("memory: "))?;
    let bytes = |after: &str| -> Option<String> {
        let rest = &line[line.find(after)? + after.len()..];
        let n: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some(thousands(&n))
    };
    Some(format!(
        "{} B per idle slot, {} B per active instance, {} B the link CAKE",
        bytes("idle slot")?,
        bytes("active instance")?,
        bytes("link-wide Cake")?
    ))
}

/// Per-circuit CAKE: 10 000 circuits against one link-wide CAKE, ns per packet at 64-byte
/// frames and IMIX, and the shaper's memory.
pub fn circuits(rows: &BTreeMap<String, Measurement>, log: &str, run: &RunInfo) -> String {
    let mut t = Table::new(&[
        "row",
        "64-byte frames",
        "vs link",
        "IMIX (7x64, 4x576, 1x1500)",
        "vs link",
    ]);
    let rows_of = [
        ("one link-wide CAKE (the baseline)", "link_cake"),
        ("10 000 circuits, 100 Mbit/s plans", "circuits"),
        ("circuits held by 256 kbit/s plans", "circuits_held"),
        (
            "circuits under a link cap of half the load",
            "circuits_capped",
        ),
        (
            "circuits, a circuit's flows consecutive",
            "circuits_grouped",
        ),
    ];
    let get = |group: &str, row: &str| {
        rows.get(&format!("circuits_{group}/{row}/100000"))
            .map(|m| m.mean_ns)
    };
    for (label, row) in rows_of {
        let mut cells = vec![label.to_string()];
        let mut any = false;
        for group in ["64B", "imix"] {
            let v = get(group, row);
            let base = get(group, "link_cake");
            any |= v.is_some();
            cells.push(v.map_or("-".into(), |v| format!("{v:.0}")));
            cells.push(match (v, base) {
                (Some(v), Some(b)) => format!("{:.2}", v / b),
                _ => "-".into(),
            });
        }
        if any {
            t.push(cells);
        }
    }
    format!(
        "## Per-circuit CAKE (criterion, `qdisc/benches/circuits.rs`)\n{}\n{} ns per packet \
         (mean), 100 000 flows, circuits interleaved.{}\n",
        t.to_markdown(),
        run_line(run),
        circuits_memory(log).map_or(String::new(), |m| format!(" Memory: {m}.")),
    )
}

/// The dpdk section (`benches/src/bin/dpdk_fwd/`): the one-core rows (name, median Mpps,
/// ratio to bare) as the table; `head` (when, where, what) and the goals as its paragraph,
/// with the thread scaling (rows of `threads`, `row`, `Mpps`, ...) as goal G7's range and
/// the two-worker rows (the `tx_select` value, `Mpps`, `dropped`) as a sentence.
pub fn dpdk(
    head: &str,
    rows: &[(String, f64, f64)],
    goals: &str,
    scaling: Option<&Table>,
    two_workers: Option<&Table>,
) -> String {
    let mut t = Table::new(&["row", "Mpps (median)", "ns/packet", "ratio to bare"]);
    for (name, mpps, ratio) in rows {
        t.push(vec![
            name.clone(),
            format!("{mpps:.2}"),
            format!("{:.1}", 1e3 / mpps),
            format!("{ratio:.3}"),
        ]);
    }
    let mut extra = String::new();
    if let Some(st) = scaling {
        // Each row's rate at the most threads over its rate at one (goal G7).
        let mpps = |threads: &str, row: &str| {
            st.rows
                .iter()
                .find(|r| {
                    r.first().map(String::as_str) == Some(threads)
                        && r.get(1).map(String::as_str) == Some(row)
                })
                .and_then(|r| r.get(2)?.parse::<f64>().ok())
        };
        let most = st
            .rows
            .iter()
            .filter_map(|r| r.first())
            .max_by_key(|t| t.parse::<u32>().unwrap_or(0));
        if let Some(most) = most.filter(|m| *m != "1") {
            let ratios: Vec<f64> = st
                .rows
                .iter()
                .filter_map(|r| r.get(1))
                .filter_map(|n| Some(mpps(most, n)? / mpps("1", n)?))
                .collect();
            let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ratios.iter().copied().fold(0.0, f64::max);
            if !ratios.is_empty() {
                extra += &format!(" G7, {most} threads / 1: {lo:.2}-{hi:.2} (>= 1.8).");
            }
        }
    }
    if let Some(wt) = two_workers {
        let parts: Vec<String> = wt
            .rows
            .iter()
            .map(|r| format!("{} {} Mpps ({} dropped)", r[0], r[1], r[2]))
            .collect();
        extra += &format!(
            " 2 engine workers, CAKE + bypass, tx_select {}.",
            parts.join(", ")
        );
    }
    format!(
        "## DPDK forwarding, one core (`benches/src/bin/dpdk_fwd/`)\n{}\n{head} {goals}.{extra}\n",
        t.to_markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(ns: f64) -> Measurement {
        Measurement {
            mean_ns: ns,
            median_ns: ns,
            min_ns: ns,
        }
    }

    fn run() -> RunInfo {
        RunInfo {
            date: "2026-12-06 03:41 UTC".into(),
            commit: "5e4b6d3".into(),
            machine: "Intel Xeon, 2 cores".into(),
            load: "9.6".into(),
            command: "scripts/bench-criterion tree --write".into(),
        }
    }

    fn short(section: &str) {
        let lines = section.lines().count();
        assert!(
            section.starts_with("## ") && lines <= 20,
            "{lines} lines:\n{section}"
        );
        assert!(section.contains("5e4b6d3") && section.contains("load 9.6: `"));
        let wrapped = crate::report::wrap_prose(section, crate::report::PROSE_WIDTH);
        let table = wrapped.lines().filter(|l| l.starts_with('|')).count();
        assert!(
            wrapped.lines().count() <= table + 8,
            "a table and a few lines:\n{wrapped}"
        );
    }

    #[test]
    fn the_tree_section_derives_the_cost_per_second_from_its_rows() {
        let rows: BTreeMap<String, Measurement> = [
            ("allocate/flat/1000", 28_900.0),
            ("allocate/flat/10000", 285_000.0),
            ("allocate/tree3/1000", 22_400.0),
            ("allocate/tree3/10000", 279_000.0),
            ("compute/tree3/1000", 24_600.0),
            ("compute/tree3/10000", 275_000.0),
            ("sync/leaf_sync_x1000", 10_300.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), m(v)))
        .collect();
        let s = tree(&rows, &run());
        short(&s);
        for needle in [
            "| `Allocator::allocate`, flat (the cake_mq shape) | 28.9 µs | 285 µs | 28-29 ns |",
            "| `Allocator::allocate`, 3 levels | 22.4 µs | 279 µs | 22-28 ns |",
            "|  |  | 10.3 ns |",
            "computing / syncing half the leaves (warm): 2.5 / 1.0 % at 1 000 leaves (1.0 ms), ",
        ] {
            assert!(s.contains(needle), "{needle}:\n{s}");
        }
        // At 10 000 leaves the interval is whatever `for_leaves` gives now.
        let interval = qdisc::rate_tree::TreeSyncConfig::for_leaves(10_000).interval_ns as f64;
        let at_10k = format!(
            "{:.1} / {:.1} % at 10 000 ({}).",
            100.0 * 275_000.0 / interval,
            100.0 * 5_000.0 * 2.0 * 10.3 / interval,
            time(interval)
        );
        assert!(s.contains(&at_10k), "{at_10k}:\n{s}");
    }

    #[test]
    fn the_lpm_section_reads_memory_from_the_log_and_compares_with_the_crates() {
        let mut rows = BTreeMap::new();
        for (name, ns) in [
            ("poptrie_batch", 19.1),
            ("poptrie", 26.2),
            ("bsearch", 136.0),
            ("treebitmap", 157.0),
            ("prefix_trie", 64.0),
        ] {
            rows.insert(format!("lpm/{name}_v4_skewed/10000"), m(ns * LPM_BATCH));
        }
        let log = "lpm v4 10000: 1.30 MiB, 136.2 bytes per prefix\nother line\n";
        let s = lpm(&rows, log, &run());
        short(&s);
        assert!(
            s.contains(
                "| IPv4, 10 000 | 19.1 / - | 26.2 / - | 136 / - | 157 / - | 64 / - | 1.30 MiB, 136 B/prefix |"
            ),
            "{s}"
        );
        assert!(
            s.contains("Poptrie in bursts: 3.4-3.4x the fastest other."),
            "{s}"
        );
        assert_eq!(thousands("100000"), "100 000");
    }

    #[test]
    fn the_circuits_section_gives_each_row_against_the_link_cake() {
        let mut rows = BTreeMap::new();
        for (group, row, ns) in [
            ("64B", "link_cake", 875.0),
            ("64B", "circuits", 6405.0),
            ("imix", "link_cake", 1054.0),
            ("imix", "circuits", 4493.0),
        ] {
            rows.insert(format!("circuits_{group}/{row}/100000"), m(ns));
        }
        let log = "memory: idle slot 144 B (SlotState and scheduler entries: 96 B); active instance 59498 B (10000 instances, 567.6 MiB in all); link-wide Cake 1113584 B\n";
        let s = circuits(&rows, log, &run());
        short(&s);
        assert!(
            s.contains("| 10 000 circuits, 100 Mbit/s plans | 6405 | 7.32 | 4493 | 4.26 |"),
            "{s}"
        );
        assert!(
            s.contains("Memory: 144 B per idle slot, 59 498 B per active instance, 1 113 584 B"),
            "{s}"
        );
        assert!(render("nope", &rows, log, &run()).is_none());
    }

    #[test]
    fn the_dpdk_section_folds_scaling_and_two_workers_into_a_line_each() {
        let rows = vec![
            ("bare rx->tx".to_string(), 87.91, 1.0),
            ("cake".to_string(), 15.97, 0.179),
        ];
        let mut st = Table::new(&["threads", "row", "Mpps", "ratio", "added"]);
        for (t, r, m) in [
            ("1", "bare rx->tx", "73.47"),
            ("2", "bare rx->tx", "158.92"),
            ("1", "CAKE, no bypass", "14.85"),
            ("2", "CAKE, no bypass", "29.65"),
        ] {
            st.push(vec![t.into(), r.into(), m.into(), "1".into(), "0".into()]);
        }
        let mut wt = Table::new(&["engine", "Mpps", "dropped"]);
        wt.push(vec!["\"worker\"".into(), "39.90".into(), "0.0 %".into()]);
        let s = dpdk("Head.", &rows, "G1 x", Some(&st), Some(&wt));
        assert!(s.contains("| cake | 15.97 | 62.6 | 0.179 |"), "{s}");
        assert!(
            s.contains("Head. G1 x. G7, 2 threads / 1: 2.00-2.16 (>= 1.8)."),
            "{s}"
        );
        assert!(
            s.contains("tx_select \"worker\" 39.90 Mpps (0.0 % dropped)."),
            "{s}"
        );
        let wrapped = crate::report::wrap_prose(&s, crate::report::PROSE_WIDTH);
        assert!(wrapped.lines().count() <= 9, "{wrapped}");
    }
}
