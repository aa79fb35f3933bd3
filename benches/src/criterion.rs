//! The qdisc section of `BENCHMARKS.md`: reads what criterion wrote for the bench
//! `qdisc/benches/cake.rs` (`target/criterion/**/new/`) and renders the matrix as one table,
//! criterion's mean and the fastest sample of every row, with the goal rows checked.
//!
//! Only rows measured since a given time are used, so a run of a few rows never mixes with
//! older results left in `target/criterion` by another revision.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context as _;

use crate::report::Table;

/// One criterion row, in nanoseconds per iteration (one packet in every row of the bench).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Criterion's estimate of the mean.
    pub mean_ns: f64,
    /// Criterion's estimate of the median sample.
    pub median_ns: f64,
    /// The fastest sample: the least `time / iterations` over the samples.
    pub min_ns: f64,
}

#[derive(serde::Deserialize)]
struct Benchmark {
    full_id: String,
}

#[derive(serde::Deserialize)]
struct Estimates {
    mean: Estimate,
    median: Estimate,
}

#[derive(serde::Deserialize)]
struct Estimate {
    point_estimate: f64,
}

#[derive(serde::Deserialize)]
struct Sample {
    iters: Vec<f64>,
    times: Vec<f64>,
}

/// Reads one row from a criterion `new/` directory: its id and its measurement.
///
/// # Errors
/// A file missing or not in criterion's format, with its path.
pub fn read_row(new_dir: &Path) -> anyhow::Result<(String, Measurement)> {
    fn json<T: serde::de::DeserializeOwned>(path: PathBuf) -> anyhow::Result<T> {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
    let bench: Benchmark = json(new_dir.join("benchmark.json"))?;
    let estimates: Estimates = json(new_dir.join("estimates.json"))?;
    let sample: Sample = json(new_dir.join("sample.json"))?;
    let min_ns = sample
        .iters
        .iter()
        .zip(&sample.times)
        .filter(|(i, _)| **i > 0.0)
        .map(|(i, t)| t / i)
        .fold(f64::INFINITY, f64::min);
    if !min_ns.is_finite() {
        anyhow::bail!("{} holds no samples", new_dir.join("sample.json").display());
    }
    Ok((
        bench.full_id,
        Measurement {
            mean_ns: estimates.mean.point_estimate,
            median_ns: estimates.median.point_estimate,
            min_ns,
        },
    ))
}

/// Criterion's results directory: `given`, else `$CARGO_TARGET_DIR/criterion`, else
/// `target/criterion`.
pub fn results_dir(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| PathBuf::from("target"), PathBuf::from)
            .join("criterion")
    })
}

/// A `--since` argument (seconds since the Unix epoch) as a time.
pub fn since(secs: Option<u64>) -> Option<SystemTime> {
    secs.map(|s| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s))
}

/// Every row under `criterion_dir` whose estimates were written at or after `since` (all of
/// them when `None`), by criterion id ("cake_diffserv3_triple/unlimited/1024").
///
/// # Errors
/// An unreadable directory or row.
pub fn collect(
    criterion_dir: &Path,
    since: Option<SystemTime>,
) -> anyhow::Result<BTreeMap<String, Measurement>> {
    let mut rows = BTreeMap::new();
    let mut stack = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            if !path.is_dir() {
                continue;
            }
            let estimates = path.join("estimates.json");
            if path.file_name().is_some_and(|n| n == "new") && estimates.is_file() {
                let written = std::fs::metadata(&estimates)?.modified()?;
                let recent = match since {
                    Some(s) => written >= s,
                    None => true,
                };
                if recent {
                    let (id, m) = read_row(&path)?;
                    rows.insert(id, m);
                }
            } else if path
                .file_name()
                .is_some_and(|n| n != "report" && n != "base")
            {
                stack.push(path);
            }
        }
    }
    Ok(rows)
}

/// The criterion id of the goal row (docs/design.md, goal G6).
pub const GOAL_ROW: &str = "cake_diffserv3_triple/unlimited/1024";
/// The goal row's bound, ns per packet.
pub const GOAL_NS: f64 = 50.0;
/// The DRR++ floor on the goal row's workload (goal G4).
pub const FLOOR_ROW: &str = "drr_floor_diffserv3/unlimited/1024";
/// G4: the goal row's packet rate as a share of the floor's, at least this.
pub const FLOOR_SHARE: f64 = 0.65;
/// The FIFO row checked against [`FIFO_NS`].
pub const FIFO_ROW: &str = "fifo/unlimited/1024";
/// The FIFO's bound, ns per packet.
pub const FIFO_NS: f64 = 10.0;

/// The flow counts of the matrix, its columns.
const FLOWS: [u32; 4] = [1, 64, 1024, 10_000];

/// The rows of the table in order: a label, the time axis ("unlimited", "shaped 10 Gbit")
/// and the criterion id of each column (`FLOWS`), `None` where the bench has no such row.
fn layout() -> Vec<(String, &'static str, Vec<Option<String>>)> {
    let mut rows = Vec::new();
    let families = [
        ("fifo", "FIFO (3-band)", false),
        ("cake_besteffort_flows", "CAKE besteffort, flows", true),
        (
            "cake_besteffort_triple",
            "CAKE besteffort, triple-isolate",
            true,
        ),
        ("cake_diffserv3_flows", "CAKE diffserv3, flows", true),
        (
            "cake_diffserv3_triple",
            "CAKE diffserv3, triple-isolate",
            true,
        ),
    ];
    for (id, label, shaped) in families {
        for (time, axis) in [("unlimited", "unlimited"), ("shaped", "shaped 10 Gbit")] {
            if time == "shaped" && !shaped {
                continue;
            }
            let ids = FLOWS
                .iter()
                .map(|f| Some(format!("{id}/{time}/{f}")))
                .collect();
            rows.push((label.to_string(), axis, ids));
        }
    }
    let extras = [
        (
            "CAKE diffserv3, triple-isolate, bursts of 32 in / 32 out",
            "cake_diffserv3_triple_burst32/unlimited/1024",
        ),
        (
            "CAKE diffserv3, triple-isolate, 64-byte frames",
            "cake_diffserv3_triple_64B/unlimited/1024",
        ),
        (
            "CAKE diffserv3, triple-isolate, 64-byte frames, bursts of 32",
            "cake_diffserv3_triple_64B_burst32/unlimited/1024",
        ),
        (
            "CAKE diffserv3, triple-isolate, NIC RSS hash reused",
            "cake_diffserv3_triple_rss/unlimited/1024",
        ),
        (
            "DRR++ floor (`qdisc::testing::DrrFloor`), 1000 B",
            FLOOR_ROW,
        ),
        (
            "DRR++ floor, 64 B",
            "drr_floor_diffserv3_64B/unlimited/1024",
        ),
        (
            "CAKE `try_bypass` (empty)",
            "cake_diffserv3_triple/bypass/1",
        ),
    ];
    for (label, id) in extras {
        let flows: u32 = id
            .rsplit('/')
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        let ids = FLOWS
            .iter()
            .map(|f| (*f == flows).then(|| id.to_string()))
            .collect();
        rows.push((label.to_string(), "unlimited", ids));
    }
    rows
}

fn cell(m: Option<&Measurement>, bold: bool) -> String {
    match m {
        None => "-".to_string(),
        Some(m) if bold => format!("**{:.1} / {:.1}**", m.mean_ns, m.min_ns),
        Some(m) => format!("{:.1} / {:.1}", m.mean_ns, m.min_ns),
    }
}

/// Renders the rows as the matrix table, a column per flow count; rows with no measurement
/// are left out, and rows the layout does not know (a bench added later) follow at the end
/// under their id.
pub fn matrix(rows: &BTreeMap<String, Measurement>) -> Table {
    let mut headers = vec!["qdisc".to_string(), "time".to_string()];
    headers.extend(FLOWS.iter().map(|f| match f {
        1 => "1 flow".to_string(),
        10_000 => "10 000 flows".to_string(),
        f => format!("{f} flows"),
    }));
    let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
    let mut placed = Vec::new();
    for (label, axis, ids) in layout() {
        let cells: Vec<String> = ids
            .iter()
            .map(|id| {
                let m = id.as_ref().and_then(|id| rows.get(id));
                cell(m, id.as_deref() == Some(GOAL_ROW))
            })
            .collect();
        placed.extend(ids.into_iter().flatten());
        if cells.iter().all(|c| c == "-") {
            continue;
        }
        let mut row = vec![label, axis.to_string()];
        row.extend(cells);
        t.push(row);
    }
    for (id, m) in rows {
        if !placed.contains(id) {
            t.push(vec![format!("`{id}`"), String::new(), cell(Some(m), false)]);
        }
    }
    t
}

/// One sentence per goal whose rows were measured: the goal row against 50 ns (G6), the
/// goal row's packet rate as a share of the DRR++ floor's (G4), and the FIFO against 10 ns.
/// The measured value is given where the table does not show it (the share).
pub fn goals(rows: &BTreeMap<String, Measurement>) -> Vec<String> {
    let verdict = |met: bool| if met { "met" } else { "not met" };
    let mut out = Vec::new();
    if let Some(g) = rows.get(GOAL_ROW) {
        out.push(format!(
            "G6 (bold) <= {GOAL_NS:.0} ns: {}.",
            verdict(g.mean_ns <= GOAL_NS)
        ));
        if let Some(f) = rows.get(FLOOR_ROW) {
            let share = f.mean_ns / g.mean_ns;
            out.push(format!(
                "G4 >= {FLOOR_SHARE:.2} of the floor's rate: {share:.2}, {}.",
                verdict(share >= FLOOR_SHARE)
            ));
        }
    }
    if let Some(f) = rows.get(FIFO_ROW) {
        out.push(format!(
            "FIFO <= {FIFO_NS:.0} ns: {}.",
            verdict(f.mean_ns <= FIFO_NS)
        ));
    }
    out
}

/// What the section says about the run besides the table.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// When the run ended ("2026-12-05 20:29 UTC").
    pub date: String,
    /// The commit measured.
    pub commit: String,
    /// The machine line ([`crate::report::machine_line`]).
    pub machine: String,
    /// The 1-minute load average at the end.
    pub load: String,
    /// The command that reproduces the run.
    pub command: String,
}

/// The whole `qdisc` section of `BENCHMARKS.md`.
pub fn section(rows: &BTreeMap<String, Measurement>, run: &RunInfo) -> String {
    let goals = goals(rows);
    format!(
        "## qdisc micro-benchmarks (criterion, `qdisc/benches/cake.rs`)\n{table}\n{} Cells: \
         mean / fastest sample, ns per packet (1000 B) in and out.{goals}\n",
        crate::report::provenance(
            &run.date,
            &run.commit,
            &run.machine,
            &run.load,
            &run.command
        ),
        table = matrix(rows).to_markdown(),
        goals = goals.iter().map(|g| format!(" {g}")).collect::<String>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_row(root: &Path, dir: &str, id: &str, mean: f64, samples: &[(f64, f64)]) {
        let new = root.join(dir).join("new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(
            new.join("benchmark.json"),
            format!(r#"{{"group_id":"x","full_id":"{id}","directory_name":"{dir}"}}"#),
        )
        .unwrap();
        std::fs::write(
            new.join("estimates.json"),
            format!(
                r#"{{"mean":{{"point_estimate":{mean},"standard_error":0.1}},"median":{{"point_estimate":{mean},"standard_error":0.1}}}}"#
            ),
        )
        .unwrap();
        let (iters, times): (Vec<f64>, Vec<f64>) = samples.iter().copied().unzip();
        std::fs::write(
            new.join("sample.json"),
            serde_json::json!({"sampling_mode": "Linear", "iters": iters, "times": times})
                .to_string(),
        )
        .unwrap();
    }

    #[test]
    fn rows_are_read_with_their_mean_and_fastest_sample() {
        let dir = tempfile::tempdir().unwrap();
        write_row(
            dir.path(),
            "cake_diffserv3_triple/unlimited/1024",
            GOAL_ROW,
            48.04,
            &[(10.0, 500.0), (20.0, 940.0), (30.0, 1500.0)],
        );
        write_row(
            dir.path(),
            "fifo/unlimited/1024",
            FIFO_ROW,
            3.8,
            &[(100.0, 370.0)],
        );
        let rows = collect(dir.path(), None).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[GOAL_ROW],
            Measurement {
                mean_ns: 48.04,
                median_ns: 48.04,
                min_ns: 47.0
            }
        );
        let in_future = SystemTime::now() + std::time::Duration::from_secs(3600);
        assert!(collect(dir.path(), Some(in_future)).unwrap().is_empty());
    }

    #[test]
    fn the_table_follows_the_layout_and_keeps_unknown_rows() {
        let mut rows = BTreeMap::new();
        let m = |mean_ns, min_ns| Measurement {
            mean_ns,
            median_ns: mean_ns,
            min_ns,
        };
        rows.insert(GOAL_ROW.to_string(), m(47.94, 46.9));
        rows.insert("cake_diffserv3_triple/shaped/1024".into(), m(48.6, 46.9));
        rows.insert(FLOOR_ROW.to_string(), m(23.9, 22.4));
        rows.insert("a_new_bench/unlimited/1".into(), m(1.0, 0.9));
        let md = matrix(&rows).to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| qdisc | time | 1 flow | 64 flows | 1024 flows | 10 000 flows |"
        );
        assert_eq!(
            lines[2],
            "| CAKE diffserv3, triple-isolate | unlimited | - | - | **47.9 / 46.9** | - |"
        );
        assert_eq!(
            lines[3],
            "| CAKE diffserv3, triple-isolate | shaped 10 Gbit | - | - | 48.6 / 46.9 | - |"
        );
        assert!(lines[4].starts_with(
            "| DRR++ floor (`qdisc::testing::DrrFloor`), 1000 B | unlimited | - | - | 23.9"
        ));
        assert_eq!(
            lines[5],
            "| `a_new_bench/unlimited/1` |  | 1.0 / 0.9 |  |  |  |"
        );
        assert_eq!(lines.len(), 6);
        let g = goals(&rows).join(" ");
        assert!(
            g.contains("G6 (bold) <= 50 ns: met.") && g.contains("0.50, not met"),
            "{g}"
        );
    }

    #[test]
    fn the_section_names_its_command_commit_and_machine() {
        let mut rows = BTreeMap::new();
        rows.insert(
            FIFO_ROW.to_string(),
            Measurement {
                mean_ns: 3.8,
                median_ns: 3.8,
                min_ns: 3.7,
            },
        );
        let run = RunInfo {
            date: "2026-12-05 20:29 UTC".into(),
            commit: "0d13c69".into(),
            machine: "Intel Xeon, 2 cores".into(),
            load: "0.9".into(),
            command: "scripts/bench-qdisc --write".into(),
        };
        let s = section(&rows, &run);
        assert!(s.starts_with("## qdisc micro-benchmarks (criterion, `qdisc/benches/cake.rs`)\n"));
        for needle in [
            "0d13c69",
            "Intel Xeon",
            "`scripts/bench-qdisc --write`",
            "FIFO <= 10 ns: met.",
        ] {
            assert!(s.contains(needle), "{needle}: {s}");
        }
    }
}
