//! The circuits in force: for every slot ([`super::slots`]) the circuit that holds it, its
//! download and upload plans with the CAKE options each direction's queue runs, and the node
//! chain it hangs under (for per-node sums); plus the prefix table that maps a subscriber's
//! address to the slot. Built from a loaded [`circuits::CircuitSet`] and each direction's
//! `[shaper]` options; rebuilt whole on a reload.
//!
//! A circuit direction's CAKE options are its direction's (`[shaper]` with
//! `[shaper.download]` / `[shaper.upload]` on top), then its `sqm` column: `cake WORDS` adds
//! tc words, `fq_codel` is CAKE `besteffort flows`, `none` is `besteffort flowblind` with an
//! AQM that never acts (one queue at the plan's rate: a plain rate limit,
//! `qdisc::circuit::CircuitPlan::plain`). The rate is the plan's maximum; the memory
//! limit is `[circuits] memory_limit`, or derived from the plan's rate when "auto".

use circuits::{CircuitSet, Problem, Refused, SqmChoice};
use qdisc::cake::{CakeConfig, DiffservMode, FlowMode};
use qdisc::Rate;
use std::collections::HashMap;

use super::config::CircuitsSettings;
use super::slots::SlotMap;
use crate::direction::Direction;

/// One direction of one circuit, as its queue runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPlan {
    /// The most it may send.
    pub rate: Rate,
    /// What it is guaranteed while it has demand, if anything.
    pub min: Option<Rate>,
    /// Its queue's CAKE options (`rate` included).
    pub cake: CakeConfig,
}

/// A circuit as the forwarder holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its parent node's name.
    pub parent: Option<String>,
    /// Indices into [`Roster::nodes`]: its parent, then the parent's parent, up to the top.
    pub ancestors: Vec<usize>,
    /// Download and upload, indexed by [`Direction`].
    pub plans: [DirPlan; 2],
    /// Where it was defined (`file:line`).
    pub origin: String,
}

impl Entry {
    /// The plan of `dir`.
    pub fn plan(&self, dir: Direction) -> &DirPlan {
        &self.plans[dir.index()]
    }
}

/// A node of the tree, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its name.
    pub name: String,
    /// Its parent's index.
    pub parent: Option<usize>,
    /// Groups for reporting, shapes nothing.
    pub is_virtual: bool,
    /// Download and upload caps, bit/s.
    pub caps: [Option<u64>; 2],
}

/// The circuits in force.
#[derive(Debug, Clone, Default)]
pub struct Roster {
    /// By slot: the circuit holding it (`None`: free or draining).
    pub entries: Vec<Option<Entry>>,
    /// The node tree.
    pub nodes: Vec<NodeInfo>,
    /// The prefix table, answering with slots.
    pub lpm: Option<circuits::Lpm>,
    /// Devices and prefixes loaded (for the summary).
    pub devices: usize,
    /// Prefixes in the table.
    pub prefixes: usize,
}

/// One-off plan changes (`ctl circuit set ID download 200mbit`), kept until the files are
/// read again.
pub type RateOverrides = HashMap<(String, Direction), Rate>;

/// The CAKE options of one circuit direction: `base` (the direction's), the circuit's `sqm`
/// on top, at `rate`.
///
/// # Errors
/// The `sqm` words CAKE does not take.
pub fn circuit_cake(
    base: &CakeConfig,
    sqm: &SqmChoice,
    rate: Rate,
    memory_limit: Option<u64>,
) -> Result<CakeConfig, String> {
    let mut cake = base.clone();
    match sqm {
        SqmChoice::Default => {}
        SqmChoice::None => {
            // A plain rate limit: one queue whose AQM never acts (`CircuitPlan::plain`).
            cake.diffserv = DiffservMode::Besteffort;
            cake.flow_mode = FlowMode::Flowblind;
            cake.target_ns = qdisc::circuit::PLAIN_AQM_NS;
            cake.interval_ns = qdisc::circuit::PLAIN_AQM_NS;
        }
        SqmChoice::FqCodel => {
            cake.diffserv = DiffservMode::Besteffort;
            cake.flow_mode = FlowMode::Flows;
        }
        SqmChoice::Cake(words) => {
            let opts = crate::config::keywords::CakeOptions::parse(words)
                .map_err(|e| format!("sqm `cake {words}`: {e}"))?;
            if opts.rate.is_some() || opts.autorate_ingress.is_some() {
                return Err(format!(
                    "sqm `cake {words}`: a circuit's rate is its plan; leave bandwidth and autorate-ingress out of sqm"
                ));
            }
            opts.apply_to(&mut cake);
        }
    }
    cake.rate = rate;
    // One circuit's queue sees only its own arrivals; its rate is its plan, never estimated.
    cake.autorate_ingress = false;
    cake.memlimit = memory_limit;
    cake.validate().map_err(|e| e.to_string())?;
    Ok(cake)
}

impl Roster {
    /// Builds the roster of `set`, assigning slots through `slots` at `now_ns`, with each
    /// direction's CAKE options `cakes` (indexed by [`Direction`]) and the one-off
    /// `overrides` laid over the plans.
    ///
    /// # Errors
    /// Every circuit whose queue options CAKE refuses, and a prefix table that cannot be built.
    pub fn build(
        set: &CircuitSet,
        settings: &CircuitsSettings,
        cakes: &[CakeConfig; 2],
        slots: &mut SlotMap,
        now_ns: u64,
        overrides: &RateOverrides,
    ) -> Result<Roster, Refused> {
        let mut problems = Vec::new();
        let nodes: Vec<NodeInfo> = set
            .nodes
            .iter()
            .map(|n| NodeInfo {
                name: n.name.clone(),
                parent: n.parent,
                is_virtual: n.is_virtual,
                caps: [n.download_bps, n.upload_bps],
            })
            .collect();
        let by_name: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let assigned = slots.assign(
            set.circuits.iter().map(|c| c.id.as_str()),
            now_ns,
            settings.drain_ns,
        );
        let mut entries: Vec<Option<Entry>> = vec![None; slots.len() as usize];
        for (c, &slot) in set.circuits.iter().zip(&assigned) {
            let mut plans = Vec::with_capacity(2);
            for dir in Direction::BOTH {
                let (plan, sqm) = match dir {
                    Direction::Download => (c.download, &c.sqm.download),
                    Direction::Upload => (c.upload, &c.sqm.upload),
                };
                let rate = overrides
                    .get(&(c.id.clone(), dir))
                    .copied()
                    .unwrap_or(Rate::from_bits_per_sec(plan.max_bps));
                match circuit_cake(&cakes[dir.index()], sqm, rate, settings.memory_limit) {
                    Ok(cake) => plans.push(DirPlan {
                        rate,
                        min: plan.min_bps.map(Rate::from_bits_per_sec),
                        cake,
                    }),
                    Err(e) => {
                        problems.push(Problem::error(
                            &c.origin,
                            format!("circuit '{}', {}: {e}", c.id, dir.name()),
                        ));
                        plans.push(DirPlan {
                            rate,
                            min: None,
                            cake: cakes[dir.index()].clone(),
                        });
                    }
                }
            }
            let mut ancestors = Vec::new();
            let mut up = c.parent.as_deref().and_then(|p| by_name.get(p).copied());
            while let Some(n) = up {
                if ancestors.contains(&n) || ancestors.len() > nodes.len() {
                    break;
                }
                ancestors.push(n);
                up = nodes[n].parent;
            }
            let [download, upload]: [DirPlan; 2] = plans
                .try_into()
                .unwrap_or_else(|_| unreachable!("one plan per direction"));
            entries[slot as usize] = Some(Entry {
                id: c.id.clone(),
                name: c.name.clone(),
                parent: c.parent.clone(),
                ancestors,
                plans: [download, upload],
                origin: c.origin.to_string(),
            });
        }
        let lpm = circuits::lpm::Lpm::build(set.prefixes().map(|(p, c, _)| (p, assigned[c])));
        let lpm = match lpm {
            Ok(l) => Some(l),
            Err(e) => {
                problems.push(Problem {
                    severity: circuits::Severity::Error,
                    origin: None,
                    message: format!("the prefix table cannot be built: {e}"),
                });
                None
            }
        };
        if circuits::problem::has_errors(&problems) {
            return Err(Refused(problems));
        }
        Ok(Roster {
            entries,
            nodes,
            prefixes: lpm.as_ref().map_or(0, |l| l.len()),
            lpm,
            devices: set.devices.len(),
        })
    }

    /// The circuits in force.
    pub fn circuits(&self) -> impl Iterator<Item = (u32, &Entry)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(s, e)| e.as_ref().map(|e| (s as u32, e)))
    }

    /// The slot of the circuit with this ID.
    pub fn slot_of(&self, id: &str) -> Option<u32> {
        self.circuits().find(|(_, e)| e.id == id).map(|(s, _)| s)
    }

    /// How many circuits are in force.
    pub fn len(&self) -> usize {
        self.circuits().count()
    }

    /// True when no circuit is in force.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sum of every circuit's plan in `dir`, bit/s.
    pub fn planned_bps(&self, dir: Direction) -> u64 {
        self.circuits()
            .map(|(_, e)| e.plan(dir).rate.bits_per_sec())
            .sum()
    }

    /// One line per direction for `check-config` and the start log: how many circuits, their
    /// plans in total against the link, and the queue options most of them run.
    pub fn summary_lines(&self, links: &[Rate; 2]) -> Vec<String> {
        Direction::BOTH
            .iter()
            .map(|&d| {
                let planned = self.planned_bps(d);
                let link = links[d.index()];
                let against = if link.is_unlimited() {
                    "the link unlimited".to_string()
                } else {
                    format!(
                        "{:.1}x the link's {}",
                        planned as f64 / link.bits_per_sec() as f64,
                        crate::config::units::format_rate(link)
                    )
                };
                let mut kinds: HashMap<String, usize> = HashMap::new();
                for (_, e) in self.circuits() {
                    let c = &e.plan(d).cake;
                    *kinds
                        .entry(format!(
                            "{} {}",
                            crate::config::keywords::diffserv_name(c.diffserv),
                            crate::config::keywords::flow_mode_name(c.flow_mode)
                        ))
                        .or_default() += 1;
                }
                let mut kinds: Vec<(String, usize)> = kinds.into_iter().collect();
                kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
                format!(
                    "{}: {} circuits, plans {} in total ({against}); queues: {}",
                    d.name(),
                    self.len(),
                    circuits::model::show_rate(planned),
                    if kinds.is_empty() {
                        "none".to_string()
                    } else {
                        kinds.join(", ")
                    }
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit::config::{CircuitsSettings, CircuitsToml};

    const CSV: &str = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment,sqm\n\
        1,Alice,1,cpe,AP_A,,100.64.0.1,,10,2,100,20,,cake diffserv4\n\
        2,Bob,2,cpe,,,100.64.0.2,2001:db8::/56,,,50,10,,none/fq_codel\n";
    const NET: &str = r#"{"Site": {"downloadBandwidthMbps": 1000, "uploadBandwidthMbps": 500,
        "children": {"AP_A": {"downloadBandwidthMbps": 300, "uploadBandwidthMbps": 60}}}}"#;

    fn settings() -> CircuitsSettings {
        CircuitsSettings::resolve(&CircuitsToml {
            files: vec!["x.csv".into()],
            ..CircuitsToml::default()
        })
        .unwrap()
        .unwrap()
    }

    fn set(csv: &str) -> CircuitSet {
        circuits::load([
            (circuits::Format::ShapedDevices, "d.csv", csv),
            (circuits::Format::NetworkJson, "n.json", NET),
        ])
        .unwrap()
        .0
    }

    fn cakes() -> [CakeConfig; 2] {
        let c = crate::config::Config::from_toml_str(
            "[shaper]\nrate = \"1gbit\"\ndiffserv = \"diffserv3\"\n[shaper.upload]\nrate = \"500mbit\"\nack_filter = true",
        )
        .unwrap();
        [
            c.cake_for(Direction::Download),
            c.cake_for(Direction::Upload),
        ]
    }

    #[test]
    fn each_circuit_direction_is_its_direction_with_its_sqm_on_top() {
        let mut slots = SlotMap::default();
        let r = Roster::build(
            &set(CSV),
            &settings(),
            &cakes(),
            &mut slots,
            0,
            &HashMap::new(),
        )
        .unwrap();
        let alice = r.entries[0].as_ref().unwrap();
        assert_eq!(alice.id, "1");
        let down = alice.plan(Direction::Download);
        assert_eq!(down.rate.bits_per_sec(), 100_000_000);
        assert_eq!(down.min.map(|m| m.bits_per_sec()), Some(10_000_000));
        assert_eq!(down.cake.rate, down.rate);
        assert_eq!(
            down.cake.diffserv,
            DiffservMode::Diffserv4,
            "sqm cake diffserv4"
        );
        let up = alice.plan(Direction::Upload);
        assert_eq!(
            up.cake.ack_filter,
            qdisc::cake::AckFilterMode::Filter,
            "the upload's own key"
        );
        assert_eq!(up.cake.memlimit, None, "derived from the plan's rate");
        // AP_A under Site.
        assert_eq!(
            alice
                .ancestors
                .iter()
                .map(|&n| r.nodes[n].name.as_str())
                .collect::<Vec<_>>(),
            ["AP_A", "Site"]
        );
        let bob = r.entries[1].as_ref().unwrap();
        let (d, u) = (
            &bob.plan(Direction::Download).cake,
            &bob.plan(Direction::Upload).cake,
        );
        assert_eq!(
            (d.diffserv, d.flow_mode),
            (DiffservMode::Besteffort, FlowMode::Flowblind)
        );
        assert_eq!(
            (u.diffserv, u.flow_mode),
            (DiffservMode::Besteffort, FlowMode::Flows)
        );
        // The table answers with slots.
        let lpm = r.lpm.as_ref().unwrap();
        assert_eq!(lpm.lookup("100.64.0.2".parse().unwrap()), Some(1));
        assert_eq!(lpm.lookup("2001:db8:0:ff::1".parse().unwrap()), Some(1));
        assert_eq!(lpm.lookup("100.64.0.3".parse().unwrap()), None);
        let lines = r.summary_lines(&[Rate::from_bits_per_sec(1_000_000_000), Rate::UNLIMITED]);
        assert_eq!(
            lines[0],
            "download: 2 circuits, plans 150 Mbit/s in total (0.1x the link's 1gbit); queues: 1 besteffort flowblind, 1 diffserv4 triple-isolate"
        );
        assert!(lines[1].contains("the link unlimited"), "{lines:?}");
    }

    #[test]
    fn a_reload_keeps_slots_and_an_override_changes_one_plan() {
        let mut slots = SlotMap::default();
        let s = settings();
        Roster::build(&set(CSV), &s, &cakes(), &mut slots, 0, &HashMap::new()).unwrap();
        // Alice removed, Carol added: Bob keeps slot 1, Carol may not take Alice's slot yet.
        let csv = CSV
            .lines()
            .take(1)
            .chain(CSV.lines().skip(2))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n3,Carol,3,cpe,,,100.64.0.3,,,,30,5,,\n";
        let mut o = HashMap::new();
        o.insert(
            ("2".to_string(), Direction::Upload),
            Rate::from_bits_per_sec(7_000_000),
        );
        let r = Roster::build(&set(&csv), &s, &cakes(), &mut slots, 1, &o).unwrap();
        assert!(r.entries[0].is_none(), "Alice's slot drains");
        assert_eq!(r.slot_of("2"), Some(1));
        assert_eq!(r.slot_of("3"), Some(2));
        let bob = r.entries[1].as_ref().unwrap();
        assert_eq!(bob.plan(Direction::Upload).rate.bits_per_sec(), 7_000_000);
        assert_eq!(
            bob.plan(Direction::Upload).cake.rate.bits_per_sec(),
            7_000_000
        );
        assert_eq!(
            bob.plan(Direction::Download).rate.bits_per_sec(),
            50_000_000
        );
    }

    #[test]
    fn sqm_words_cake_refuses_name_the_circuit_and_line() {
        let csv = CSV.replace("cake diffserv4", "cake bandwidth 5mbit");
        let mut slots = SlotMap::default();
        let e = Roster::build(
            &set(&csv),
            &settings(),
            &cakes(),
            &mut slots,
            0,
            &HashMap::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("d.csv:2: error: circuit '1', download: sqm `cake bandwidth 5mbit`"),
            "{e}"
        );
    }
}
