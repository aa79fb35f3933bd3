//! Circuits at run time: builds each direction's circuit shapers from the roster
//! ([`crate::circuit::Roster`]), publishes the prefix table the workers classify by, and
//! serves what changes them live (a reload of the files, a one-off plan change, a change of
//! a direction's CAKE options) and what reads them (the circuit list, one circuit in full,
//! the per-interval report).
//!
//! Every change goes the same way: the roster is rebuilt (slots kept, [`SlotMap`]), each
//! direction's queues get the new [`CircuitShaperConfig`] through
//! `MultiQueue::reconfigure` (applied by each queue's runner at a safe point; the shaper
//! diffs the plans slot by slot and changes a rate alone through `set_rate`, so nothing
//! queued is lost), and only then is the new prefix table published. A refused change
//! leaves everything as it was.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;
use circuits::publish::Published;
use circuits::{CircuitSet, Lpm};
use qdisc::cake::CakeConfig;
use qdisc::circuit::{CircuitPlan, CircuitShaper, CircuitShaperConfig, CircuitStats, TreeRef};
use qdisc::mq::MultiQueue;
use qdisc::rate_tree::{TreeNode, TreeSyncConfig};
use qdisc::Rate;

use crate::circuit::roster::{circuit_cake, RateOverrides};
use crate::circuit::{CircuitsSettings, Roster, SlotMap, Unmatched};
use crate::config::units::format_rate;
use crate::config::Config;
use crate::control::CircuitControl;
use crate::direction::Direction;
use crate::port::PortBuf;
use crate::stats::circuits::{
    CircuitDirRow, CircuitRow, CircuitTinRow, CircuitsReport, NodeDirRow, NodeRow, SortBy,
    TreeReport,
};
use crate::stats::CircuitMetrics;

/// The queues of one direction.
pub(super) type CircuitQueues<P> = Arc<MultiQueue<P, CircuitShaper<P>>>;

/// What is in force, changed under one lock.
struct State {
    settings: CircuitsSettings,
    /// Each direction's CAKE options (what circuits inherit).
    cakes: [CakeConfig; 2],
    /// The packets all circuits of one TX queue may hold together: a part of the buffer
    /// pool that feeds it (`CircuitShaperConfig::total_limit_for_pool`).
    total_packet_limit: usize,
    slots: SlotMap,
    roster: Roster,
    /// The set last read from the files.
    set: CircuitSet,
    overrides: RateOverrides,
    /// Each direction's node tree (`None` without nodes), shared by its queues' configs.
    trees: [Option<TreeRef>; 2],
}

/// The last successful reading of every circuit direction, by (direction, slot): interval
/// rates are over the time since it, and a circuit whose queue could not be read this time
/// (its runner held it on every try) shows its last figures instead of zeros, which would
/// make the next interval's rate a multiple of the real one.
#[derive(Default)]
struct Sampler {
    /// Per direction, by slot (slots are dense: a new circuit takes the lowest free one).
    last: [Vec<Option<Seen>>; 2],
}

impl Sampler {
    /// The last reading of slot `slot` in direction `i`, if it was of circuit `id`.
    fn seen(&self, i: usize, slot: u32, id: &str) -> Option<&Seen> {
        self.last[i]
            .get(slot as usize)
            .and_then(Option::as_ref)
            .filter(|p| p.id == id)
    }

    /// Records `row` as slot `slot`'s reading in direction `i` at `at_ns`, in place when the
    /// slot's circuit is the same (each interval reads every circuit: no allocation then).
    fn record(&mut self, i: usize, slot: u32, id: &str, at_ns: u64, row: &CircuitDirRow) {
        let v = &mut self.last[i];
        let at = slot as usize;
        if v.len() <= at {
            v.resize_with(at + 1, || None);
        }
        let row = CircuitDirRow {
            tins: Vec::new(),
            drops_by_reason: BTreeMap::new(),
            ..row.clone()
        };
        match &mut v[at] {
            Some(seen) if seen.id == id => {
                seen.at_ns = at_ns;
                seen.row = row;
            }
            other => {
                *other = Some(Seen {
                    id: id.to_string(),
                    at_ns,
                    row,
                });
            }
        }
    }
}

struct Seen {
    /// The circuit that held the slot (a slot a reload gave to another circuit starts over).
    id: String,
    at_ns: u64,
    row: CircuitDirRow,
}

/// One direction as [`Runtime::read`] found it: each circuit's figures, the instances in
/// use, their memory, and the tree's counters.
/// Each circuit's figures by slot (a vector: a report walks every slot, and a hash map of
/// 100 000 entries was a cache miss per lookup, 60 % of a report's time).
type Read = (Vec<Option<Figures>>, usize, u64, Option<TreeReport>);

/// Slots read at a time between a queue's runs (tens of microseconds with cold instances).
const READ_CHUNK: u32 = 256;

/// One circuit direction as read from a shaper: what a report needs, copied under the lock.
struct Figures {
    counters: qdisc::circuit::CircuitCounters,
    backlog_packets: u64,
    backlog_bytes: u64,
    sojourn_peak_ns: u64,
    active: bool,
    tins: Vec<CircuitTinRow>,
}

impl Figures {
    fn of(st: &CircuitStats, tins: bool) -> Figures {
        Figures {
            counters: st.counters,
            backlog_packets: st.backlog_packets,
            backlog_bytes: st.backlog_bytes,
            sojourn_peak_ns: st.sojourn_peak_ns,
            active: st.active,
            tins: if tins {
                st.tins[..st.tin_count]
                    .iter()
                    .map(|t| CircuitTinRow {
                        name: t.name.to_string(),
                        sent_packets: t.sent_packets,
                        sent_bytes: t.sent_bytes,
                        dropped_packets: t.dropped_packets,
                        ecn_marked_packets: t.ecn_marked_packets,
                        backlog_bytes: t.backlog_bytes,
                        delay_ns: [t.peak_delay_ns, t.avg_delay_ns, t.base_delay_ns],
                        flows: [t.sparse_flows, t.bulk_flows],
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The figures of a slot read from its counters alone (no backlog, delay or tins).
    fn counters_only(counters: qdisc::circuit::CircuitCounters, active: bool) -> Figures {
        Figures {
            counters,
            backlog_packets: 0,
            backlog_bytes: 0,
            sojourn_peak_ns: 0,
            active,
            tins: Vec::new(),
        }
    }

    fn add(&mut self, other: Figures) {
        let c = &mut self.counters;
        c.sent_packets += other.counters.sent_packets;
        c.sent_bytes += other.counters.sent_bytes;
        for (a, b) in c.drops.iter_mut().zip(other.counters.drops) {
            *a += b;
        }
        self.backlog_packets += other.backlog_packets;
        self.backlog_bytes += other.backlog_bytes;
        self.sojourn_peak_ns = self.sojourn_peak_ns.max(other.sojourn_peak_ns);
        self.active |= other.active;
        if self.tins.is_empty() {
            self.tins = other.tins;
        }
    }
}

/// The circuits of a running forwarder.
pub(super) struct Runtime<P: PortBuf> {
    state: Mutex<State>,
    table: Arc<Published<Lpm>>,
    /// Per direction, its queues when it has circuits.
    queues: [Option<CircuitQueues<P>>; 2],
    sampler: Mutex<Sampler>,
    /// Set once the workers have stopped: reads take the queues' runner locks themselves
    /// instead of asking for a runner that will never come.
    runners_gone: AtomicBool,
}

/// Circuits loaded and checked before the queues are built.
pub(super) struct Prepared {
    state: State,
    lpm: Lpm,
}

fn now_ns() -> u64 {
    crate::clock::now_ns()
}

/// Loads the files of `settings` and builds the roster with `config`'s direction options.
///
/// # Errors
/// A file that cannot be read or is refused (every problem with its file and line).
pub(super) fn prepare(config: &Config, settings: &CircuitsSettings) -> anyhow::Result<Prepared> {
    let (set, warnings) = crate::circuit::load(settings)?;
    for w in &warnings {
        crate::log_line!("circuits: {w}");
    }
    let cakes = Direction::BOTH.map(|d| config.cake_for(d));
    let mut slots = SlotMap::default();
    let mut roster = Roster::build(
        &set,
        settings,
        &cakes,
        &mut slots,
        now_ns(),
        &RateOverrides::new(),
    )
    .context("the circuit files")?;
    let lpm = roster
        .lpm
        .take()
        .context("the prefix table was not built")?;
    for line in roster.summary_lines(&cakes.clone().map(|c| c.rate)) {
        crate::log_line!("circuits: {line}");
    }
    let mut state = State {
        settings: settings.clone(),
        cakes,
        total_packet_limit: total_packet_limit(config),
        slots,
        roster,
        set,
        overrides: RateOverrides::new(),
        trees: [None, None],
    };
    for dir in Direction::BOTH {
        let (tree, _) = tree_for(&state, dir, None).map_err(anyhow::Error::msg)?;
        state.trees[dir.index()] = tree;
    }
    Ok(Prepared { state, lpm })
}

/// The shared limit of one TX queue's circuits under `config`'s pool and queues.
pub(crate) fn total_packet_limit(config: &Config) -> usize {
    CircuitShaperConfig::total_limit_for_pool(config.ports.pool_buffers, config.engine.tx_queues)
}

impl Prepared {
    /// The prefix table the workers will classify by.
    pub(super) fn lpm(&self) -> &Lpm {
        &self.lpm
    }

    /// The circuit shaper configuration of `dir`.
    pub(super) fn shaper_config(&self, dir: Direction) -> Result<CircuitShaperConfig, String> {
        shaper_config(&self.state, dir)
    }

    /// The runtime over the queues built from [`Prepared::shaper_config`].
    pub(super) fn start<P: PortBuf>(self, queues: [Option<CircuitQueues<P>>; 2]) -> Runtime<P> {
        Runtime {
            state: Mutex::new(self.state),
            table: Arc::new(Published::new(self.lpm)),
            queues,
            sampler: Mutex::new(Sampler::default()),
            runners_gone: AtomicBool::new(false),
        }
    }
}

/// The circuit shaper configuration of `dir` in `state`, with the direction's tree as
/// `state.trees` holds it.
fn shaper_config(state: &State, dir: Direction) -> Result<CircuitShaperConfig, String> {
    Ok(CircuitShaperConfig {
        rate_tree: state.trees[dir.index()].clone(),
        ..plans_config(state, dir)?
    })
}

/// The tree leaves and max changes of one direction: [`tree_for`]'s answer.
type TreeChoice = (Option<TreeRef>, Vec<(u32, Rate)>);

/// The node tree of `dir` in `state` (`None` without nodes): `old` itself, with the leaf
/// maxes to change in it, when `state` differs from it in circuit plan rates alone (a
/// reload that changed rates, `ctl circuit set`): no new tree, every queue keeps its meters
/// (docs/circuits.md, "Commands"); a new tree otherwise. Changes nothing yet.
fn tree_for(state: &State, dir: Direction, old: Option<&TreeRef>) -> Result<TreeChoice, String> {
    if state.roster.nodes.is_empty() {
        return Ok((None, Vec::new()));
    }
    let d = dir.index();
    let config = plans_config(state, dir)?;
    // Each circuit runs at its share of its nodes' caps: one tree per direction, carried
    // by the config every TX queue of the direction gets.
    let nodes: Vec<TreeNode> = state
        .roster
        .nodes
        .iter()
        .map(|n| TreeNode {
            parent: n.parent.map(|p| p as u32),
            cap: n.caps[d].map(Rate::from_bits_per_sec),
            is_virtual: n.is_virtual,
        })
        .collect();
    let sync = TreeSyncConfig::for_leaves(config.plans.len());
    if let Some(old) = old {
        if let Some(changes) = old.max_changes(&config, &nodes, sync) {
            return Ok((Some(old.clone()), changes));
        }
    }
    let tree = TreeRef::build(&config, &nodes, sync)
        .map_err(|e| format!("{}: the node tree: {e}", dir.name()))?;
    Ok((Some(tree), Vec::new()))
}

/// The circuit shaper configuration of `dir` in `state` without its tree.
fn plans_config(state: &State, dir: Direction) -> Result<CircuitShaperConfig, String> {
    let d = dir.index();
    let plans: Vec<Option<CircuitPlan>> = state
        .roster
        .entries
        .iter()
        .map(|e| {
            e.as_ref().map(|e| {
                let p = e.plan(dir);
                CircuitPlan {
                    rate: p.rate,
                    min: p.min,
                    parent: e.ancestors.first().map(|&n| n as u32),
                    cake: p.cake.clone(),
                }
            })
        })
        .collect();
    let default_plan = match state.settings.unmatched {
        Unmatched::Link => None,
        Unmatched::Rates { download, upload } => {
            let rate = [download, upload][d];
            let cake = circuit_cake(
                &state.cakes[d],
                &circuits::SqmChoice::Default,
                rate,
                state.settings.memory_limit,
            )?;
            Some(CircuitPlan {
                rate,
                min: None,
                parent: None,
                cake,
            })
        }
    };
    let defaults = CircuitShaperConfig::default();
    let config = CircuitShaperConfig {
        link: state.cakes[d].clone(),
        plans: Arc::from(plans),
        default_plan,
        idle_release_ns: state.settings.idle_release_ns,
        circuit_memory_limit: state
            .settings
            .memory_limit
            .unwrap_or(defaults.circuit_memory_limit),
        total_packet_limit: state.total_packet_limit,
        circuit_burst: state.settings.burst,
        ..defaults
    };
    config
        .validate()
        .map_err(|e| format!("{}: {e}", dir.name()))?;
    Ok(config)
}

impl<P: PortBuf> Runtime<P> {
    /// The table the workers classify by.
    pub(super) fn table(&self) -> Arc<Published<Lpm>> {
        self.table.clone()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rebuilds the roster of `next` (slots taken from the state in force) and applies it:
    /// the queues first, then the table. On refusal nothing changes.
    fn apply(&self, mut next: State) -> Result<(), String> {
        let mut state = self.state();
        next.slots = state.slots.clone();
        let mut roster = Roster::build(
            &next.set,
            &next.settings,
            &next.cakes,
            &mut next.slots,
            now_ns(),
            &next.overrides,
        )
        .map_err(|e| e.to_string())?;
        let lpm = roster.lpm.take();
        next.roster = roster;
        let mut changes = Vec::new();
        for dir in Direction::BOTH {
            let (tree, maxes) = tree_for(&next, dir, state.trees[dir.index()].as_ref())?;
            next.trees[dir.index()] = tree;
            changes.push(maxes);
        }
        let mut configs = Vec::new();
        for dir in Direction::BOTH {
            if let Some(q) = &self.queues[dir.index()] {
                let cfg = shaper_config(&next, dir)?;
                <CircuitShaper<P> as qdisc::mq::MqQdisc<P>>::validate(&cfg)
                    .map_err(|e| format!("{}: {e}", dir.name()))?;
                configs.push((q.clone(), cfg));
            }
        }
        // Everything checked: a tree kept takes its new maxes in place, before the queues
        // see the configs that carry it.
        for (tree, maxes) in next.trees.iter().zip(&changes) {
            if let Some(tree) = tree {
                tree.set_maxes(maxes);
            }
        }
        for (q, cfg) in configs {
            q.reconfigure(&cfg).map_err(|e| e.to_string())?;
        }
        if let Some(lpm) = lpm {
            self.table.publish(lpm);
        }
        *state = next;
        Ok(())
    }

    /// A copy of the state to change (the roster is rebuilt by [`Runtime::apply`]).
    fn draft(&self) -> State {
        let s = self.state();
        State {
            settings: s.settings.clone(),
            cakes: s.cakes.clone(),
            total_packet_limit: s.total_packet_limit,
            slots: SlotMap::default(),
            roster: Roster::default(),
            set: s.set.clone(),
            overrides: s.overrides.clone(),
            trees: [None, None],
        }
    }

    /// Every circuit's figures in `dir`, summed over the direction's queues (a circuit's
    /// packets meet one queue, but a reload may have moved nothing, so each is asked), with
    /// the tins of `tins_of` only; plus the instances in use and their memory. Each queue
    /// is read between its runs, by its runner (`queues::read_between_runs`), a chunk of
    /// slots at a time, copying a few words per slot.
    /// Also the direction's tree counters (`None` without a tree).
    /// With `full` false only each slot's counters are read, not its instance (backlog,
    /// delays and tins stay zero): enough for rates.
    fn read(&self, dir: Direction, tins_of: Option<u32>, full: bool) -> Read {
        let mut out: Vec<Option<Figures>> = Vec::new();
        let (mut active, mut memory) = (0usize, 0u64);
        let mut tree: Option<TreeReport> = None;
        let Some(q) = &self.queues[dir.index()] else {
            return (out, 0, 0, None);
        };
        let mut unread = false;
        // Cleared when a queue's runner did not come for a read: the rest of this report
        // reads under the locks rather than wait for it again at every chunk.
        let mut ask_runner = !self.runners_gone.load(Ordering::Acquire);
        for queue in q.queues() {
            // A chunk of slots per read: while it is made the queue is not run and its
            // arrivals wait (in the receive ring, or in the intake when another thread
            // makes it); a read of every slot at once (10 000 circuits: milliseconds of
            // cold instance lines) overflowed the intake at a million packets a second.
            let mut start = 0u32;
            let mut last = None;
            let mut queue_memory = 0u64;
            loop {
                let chunk = move |s: &mut CircuitShaper<P>| {
                    let slots = s.config().plans.len() as u32;
                    let end = start.saturating_add(READ_CHUNK).min(slots);
                    let part: Vec<(u32, Figures)> = (start..end)
                        .filter_map(|slot| {
                            if !full {
                                let (c, active) = s.circuit_counters(slot)?;
                                return Some((slot, Figures::counters_only(c, active)));
                            }
                            let st = s.circuit_stats(slot)?;
                            Some((slot, Figures::of(&st, tins_of == Some(slot))))
                        })
                        .collect();
                    // The instances' memory by slot, as the slots are read: summed at the
                    // end, the walk of every instance took 1.4 ms in one read at 100 000
                    // circuits (16 000 instances), a stall of the queue per report.
                    let memory: u64 = (start..end)
                        .map(|slot| s.planned_instance_bytes(slot) as u64)
                        .sum();
                    let totals = (end >= slots).then(|| {
                        (
                            s.active_instances(),
                            s.memory_bytes_besides_planned() as u64,
                            s.tree_counters(),
                        )
                    });
                    (part, end, memory, totals)
                };
                let got = super::queues::read_between_runs(queue, chunk, &mut ask_runner);
                // A queue busy on every try: the whole direction goes without this time (its
                // rows keep their last figures). A circuit's figures are summed over every
                // queue, so a sum that missed one queue (the circuit's own, say) would read
                // as a fall in its cumulative counters and a burst in the next interval.
                let Some((part, end, chunk_memory, totals)) = got else {
                    unread = true;
                    break;
                };
                queue_memory += chunk_memory;
                for (slot, f) in part {
                    let at = slot as usize;
                    if out.len() <= at {
                        out.resize_with(at + 1, || None);
                    }
                    match &mut out[at] {
                        None => out[at] = Some(f),
                        Some(sum) => sum.add(f),
                    }
                }
                if totals.is_some() {
                    last = totals;
                    break;
                }
                start = end;
            }
            let Some((a, m, t)) = last else { continue };
            active += a;
            memory += m + queue_memory;
            if let Some(t) = t {
                // The queues share one tree: its computations and active leaves once,
                // each queue's own syncs summed.
                let sum = tree.get_or_insert_with(TreeReport::default);
                sum.computations = sum.computations.max(t.computations);
                sum.active_leaves = sum.active_leaves.max(t.active_leaves);
                sum.syncs += t.syncs;
                sum.leaf_syncs += t.leaf_syncs;
            }
        }
        if unread {
            out.clear();
        }
        (out, active, memory, tree)
    }

    /// From now on no worker runs the queues (they have stopped): reads take the runner
    /// locks themselves.
    pub(super) fn runners_stopped(&self) {
        self.runners_gone.store(true, Ordering::Release);
    }

    /// The report of every circuit and node; `tins` fills each circuit's tins. Rates are
    /// over the time since the previous report that `advance` moved the sampler on. With
    /// `full` false the circuits' backlogs, delays and tins are not read (see
    /// [`Runtime::read`]) and the report has the totals but no row per circuit or node (the
    /// sampler still moves on: `ctl circuits` ranks by its rates).
    fn report(&self, tins_of: Option<u32>, advance: bool, full: bool) -> CircuitsReport {
        let figures = Direction::BOTH.map(|d| self.read(d, tins_of, full));
        let now = now_ns();
        let state = self.state();
        let mut sampler = self.sampler.lock().unwrap_or_else(|e| e.into_inner());
        let mut rows = Vec::new();
        let mut circuits = 0;
        for (slot, e) in state.roster.circuits() {
            circuits += 1;
            let mut dir_row = |d: Direction| {
                let i = d.index();
                let plan_bps = e.plan(d).rate.bits_per_sec();
                let prev = sampler.seen(i, slot, &e.id);
                let Some(st) = figures[i].0.get(slot as usize).and_then(Option::as_ref) else {
                    return CircuitDirRow {
                        plan_bps,
                        ..prev.map(|p| p.row.clone()).unwrap_or_default()
                    };
                };
                let sent = st.counters.sent_bytes;
                let tx_bps = match prev {
                    Some(p) if now > p.at_ns => {
                        sent.saturating_sub(p.row.sent_bytes) as f64 * 8.0
                            / ((now - p.at_ns) as f64 / 1e9)
                    }
                    _ => 0.0,
                };
                let row = CircuitDirRow {
                    plan_bps,
                    tx_bps,
                    sent_packets: st.counters.sent_packets,
                    sent_bytes: sent,
                    dropped_packets: st.counters.drops.iter().sum(),
                    drops_by_reason: if st.tins.is_empty() {
                        BTreeMap::new()
                    } else {
                        qdisc::DropReason::ALL
                            .iter()
                            .map(|r| (r.name().to_string(), st.counters.drops[r.index()]))
                            .filter(|&(_, n)| n > 0)
                            .collect()
                    },
                    backlog_packets: st.backlog_packets,
                    backlog_bytes: st.backlog_bytes,
                    sojourn_peak_ns: st.sojourn_peak_ns,
                    active: st.active,
                    tins: st.tins.clone(),
                };
                if advance {
                    sampler.record(i, slot, &e.id, now, &row);
                }
                row
            };
            let download = dir_row(Direction::Download);
            let upload = dir_row(Direction::Upload);
            if full {
                rows.push(CircuitRow {
                    id: e.id.clone(),
                    name: e.name.clone(),
                    slot,
                    parent: e.parent.clone(),
                    download,
                    upload,
                });
            }
        }
        let nodes = if full {
            node_rows(&state.roster, &rows)
        } else {
            Vec::new()
        };
        CircuitsReport {
            circuits,
            active: [figures[0].1, figures[1].1],
            memory_bytes: [figures[0].2, figures[1].2],
            unmatched: state.settings.unmatched.show(),
            rows,
            nodes,
            tree: match (figures[0].3, figures[1].3) {
                (None, None) => None,
                (a, b) => {
                    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
                    Some(TreeReport {
                        computations: a.computations + b.computations,
                        syncs: a.syncs + b.syncs,
                        leaf_syncs: a.leaf_syncs + b.leaf_syncs,
                        active_leaves: a.active_leaves + b.active_leaves,
                    })
                }
            },
        }
    }

    /// The circuits part of an interval report, with the circuits `metrics` selects.
    /// Without per-circuit metrics (the default) only the counters are read: the report
    /// keeps the totals and the rates `ctl circuits` ranks by, and no instance line of the
    /// thousands of circuits is touched (each is a cache miss the worker pays again).
    pub(super) fn interval_report(&self, metrics: CircuitMetrics) -> CircuitsReport {
        let mut r = self.report(None, true, metrics != CircuitMetrics::Off);
        match metrics {
            // Built without rows.
            CircuitMetrics::Off => {}
            CircuitMetrics::Top(n) => crate::stats::circuits::top(&mut r.rows, SortBy::Rate, n),
            CircuitMetrics::All => {}
        }
        r
    }
}

/// Each node's sums over the circuits under it (its whole subtree).
fn node_rows(roster: &Roster, rows: &[CircuitRow]) -> Vec<NodeRow> {
    let mut out: Vec<NodeRow> = roster
        .nodes
        .iter()
        .map(|n| {
            let mut depth = 0;
            let mut up = n.parent;
            while let Some(p) = up {
                depth += 1;
                up = roster.nodes.get(p).and_then(|p| p.parent);
                if depth > roster.nodes.len() {
                    break;
                }
            }
            NodeRow {
                name: n.name.clone(),
                depth,
                is_virtual: n.is_virtual,
                circuits: 0,
                download: NodeDirRow {
                    cap_bps: n.caps[0].unwrap_or(0),
                    ..NodeDirRow::default()
                },
                upload: NodeDirRow {
                    cap_bps: n.caps[1].unwrap_or(0),
                    ..NodeDirRow::default()
                },
            }
        })
        .collect();
    let by_id: HashMap<&str, &CircuitRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    for (_, e) in roster.circuits() {
        let Some(row) = by_id.get(e.id.as_str()) else {
            continue;
        };
        for &n in &e.ancestors {
            let node = &mut out[n];
            node.circuits += 1;
            for (nd, cd) in [
                (&mut node.download, &row.download),
                (&mut node.upload, &row.upload),
            ] {
                nd.plans_bps += cd.plan_bps;
                nd.tx_bps += cd.tx_bps;
                nd.sent_bytes += cd.sent_bytes;
                nd.dropped_packets += cd.dropped_packets;
                nd.backlog_bytes += cd.backlog_bytes;
                nd.sojourn_peak_ns = nd.sojourn_peak_ns.max(cd.sojourn_peak_ns);
            }
        }
    }
    // Tree order: each node followed by its subtree, children in file order. The children
    // lists are built once: finding each node's children by a scan of all nodes made a
    // report quadratic (seconds per report at 50 000 nodes).
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); out.len()];
    let mut roots = Vec::new();
    for (i, n) in roster.nodes.iter().enumerate() {
        match n.parent {
            None => roots.push(i),
            Some(p) => {
                if let Some(list) = children.get_mut(p) {
                    list.push(i);
                }
            }
        }
    }
    let mut ordered = Vec::with_capacity(out.len());
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(i) = stack.pop() {
        ordered.push(out[i].clone());
        stack.extend(children[i].iter().rev());
    }
    ordered
}

impl<P: PortBuf> CircuitControl for Runtime<P> {
    fn reload(&self, config: Option<&Config>) -> Result<String, String> {
        let mut next = self.draft();
        if let Some(c) = config {
            match &c.circuits {
                Some(s) => next.settings = s.clone(),
                None => {
                    return Err("the new configuration has no [circuits] files; circuits stay as they are (turning them off needs a restart)".into())
                }
            }
            next.cakes = Direction::BOTH.map(|d| c.cake_for(d));
        }
        let (set, warnings) = crate::circuit::load(&next.settings).map_err(|e| e.to_string())?;
        for w in &warnings {
            crate::log_line!("circuits: {w}");
        }
        next.set = set;
        // The files are the truth again: one-off changes end here.
        next.overrides.clear();
        let old: HashMap<String, [Rate; 2]> = self
            .state()
            .roster
            .circuits()
            .map(|(_, e)| (e.id.clone(), [e.plans[0].rate, e.plans[1].rate]))
            .collect();
        self.apply(next)?;
        let state = self.state();
        let (mut added, mut changed) = (0, 0);
        for (_, e) in state.roster.circuits() {
            match old.get(&e.id) {
                None => added += 1,
                Some(r) if *r != [e.plans[0].rate, e.plans[1].rate] => changed += 1,
                Some(_) => {}
            }
        }
        let kept: usize = state
            .roster
            .circuits()
            .filter(|(_, e)| old.contains_key(&e.id))
            .count();
        Ok(format!(
            "circuits reloaded: {} in force ({added} added, {} removed, {changed} with a new plan)",
            state.roster.len(),
            old.len() - kept
        ))
    }

    fn set_rate(&self, id: &str, dir: Direction, rate: Rate) -> Result<String, String> {
        if rate.is_unlimited() {
            return Err("a circuit's plan is a rate; give one such as 200mbit".into());
        }
        let mut next = self.draft();
        if next.set.circuit_by_id(id).is_none() {
            return Err(format!(
                "no circuit '{id}'; `cakewalk ctl circuits` lists them"
            ));
        }
        next.overrides.insert((id.to_string(), dir), rate);
        self.apply(next)?;
        Ok(format!(
            "ok circuit {id} {} {} (until the circuit files are read again)",
            dir.name(),
            format_rate(rate)
        ))
    }

    fn direction_options(&self, dir: Direction, cake: &CakeConfig) -> Result<(), String> {
        let mut next = self.draft();
        next.cakes[dir.index()] = cake.clone();
        self.apply(next)
    }

    fn list(&self, top: usize, by: SortBy, json: bool) -> String {
        let mut r = self.report(None, false, true);
        crate::stats::circuits::top(&mut r.rows, by, top);
        if json {
            format!("{}\n", serde_json::to_string(&r).unwrap_or_default())
        } else {
            r.text(by)
        }
    }

    fn show(&self, id: &str, json: bool) -> Result<String, String> {
        let slot = self.state().roster.slot_of(id);
        let r = self.report(slot, false, true);
        let row = r
            .rows
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| format!("no circuit '{id}'; `cakewalk ctl circuits` lists them"))?;
        Ok(if json {
            format!("{}\n", serde_json::to_string(&row).unwrap_or_default())
        } else {
            row.text()
        })
    }

    fn has(&self, dir: Direction) -> bool {
        self.queues[dir.index()].is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Site > {AP_A, V (virtual) > AP_B}: circuit 1 on AP_A, 2 and 3 on AP_B, 4 on Site
    /// itself, 5 with no parent.
    fn roster() -> Roster {
        let csv = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n\
            1,A,1,cpe,AP_A,,100.64.0.1,,,,100,20,\n\
            2,B,2,cpe,AP_B,,100.64.0.2,,,,50,10,\n\
            3,C,3,cpe,AP_B,,100.64.0.3,,,,50,10,\n\
            4,D,4,cpe,Site,,100.64.0.4,,,,10,5,\n\
            5,E,5,cpe,,,100.64.0.5,,,,10,5,\n";
        let net = r#"{"Site": {"downloadBandwidthMbps": 1000, "uploadBandwidthMbps": 500, "children": {
            "AP_A": {"downloadBandwidthMbps": 300, "uploadBandwidthMbps": 60},
            "V": {"virtual": true, "downloadBandwidthMbps": 400, "uploadBandwidthMbps": 80, "children": {
                "AP_B": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 40}}}}}}"#;
        roster_of(csv, net)
    }

    fn roster_of(csv: &str, net: &str) -> Roster {
        let (set, _) = circuits::load([
            (circuits::Format::ShapedDevices, "d.csv", csv),
            (circuits::Format::NetworkJson, "n.json", net),
        ])
        .unwrap();
        let settings = CircuitsSettings::resolve(&crate::circuit::CircuitsToml {
            files: vec!["d.csv".into()],
            ..Default::default()
        })
        .unwrap()
        .unwrap();
        let config = Config::from_toml_str("[shaper]\nrate = \"1gbit\"").unwrap();
        let cakes = Direction::BOTH.map(|d| config.cake_for(d));
        Roster::build(
            &set,
            &settings,
            &cakes,
            &mut SlotMap::default(),
            0,
            &RateOverrides::default(),
        )
        .unwrap()
    }

    /// A row whose download delivered `n` Mbit/s, sent `n` KB, dropped `n` and peaked at
    /// `n` ms of sojourn.
    fn row(id: &str, n: u64) -> CircuitRow {
        let d = CircuitDirRow {
            plan_bps: n * 1_000_000,
            tx_bps: (n * 1_000_000) as f64,
            sent_bytes: n * 1000,
            dropped_packets: n,
            backlog_bytes: n,
            sojourn_peak_ns: n * 1_000_000,
            ..CircuitDirRow::default()
        };
        CircuitRow {
            id: id.into(),
            name: id.into(),
            slot: 0,
            parent: None,
            download: d,
            upload: CircuitDirRow::default(),
        }
    }

    #[test]
    fn the_sampler_keeps_each_slots_last_reading_for_its_own_circuit() {
        let mut s = Sampler::default();
        let row = |sent_bytes| CircuitDirRow {
            sent_bytes,
            drops_by_reason: BTreeMap::from([("aqm".to_string(), 1)]),
            ..CircuitDirRow::default()
        };
        assert!(s.seen(1, 7, "a").is_none());
        s.record(1, 7, "a", 10, &row(100));
        let seen = s.seen(1, 7, "a").unwrap();
        assert_eq!((seen.at_ns, seen.row.sent_bytes), (10, 100));
        assert!(seen.row.drops_by_reason.is_empty(), "no breakdowns kept");
        assert!(s.seen(0, 7, "a").is_none(), "the other direction");
        assert!(
            s.seen(1, 7, "b").is_none(),
            "a slot another circuit took starts over"
        );
        s.record(1, 7, "a", 20, &row(300));
        assert_eq!(s.seen(1, 7, "a").unwrap().row.sent_bytes, 300);
        s.record(1, 7, "b", 30, &row(5));
        assert!(s.seen(1, 7, "a").is_none());
        assert_eq!(s.seen(1, 7, "b").unwrap().at_ns, 30);
        assert!(
            s.seen(1, 3, "b").is_none(),
            "below the highest slot, never read"
        );
    }

    /// The node rows of a report are linear in the node count: a tree four times as large
    /// takes less than eight times as long (timed side by side, best of five; finding each
    /// node's children by a scan made it sixteen, and seconds per report at 50 000 nodes).
    #[test]
    fn node_rows_are_linear_in_the_nodes() {
        let tree = |sites: usize| {
            let mut net = String::from("{");
            for s in 0..sites {
                let aps: Vec<String> = (0..10)
                    .map(|a| format!("\"ap{s}_{a}\": {{\"downloadBandwidthMbps\": 100, \"uploadBandwidthMbps\": 100}}"))
                    .collect();
                net += &format!(
                    "{}\"site{s}\": {{\"downloadBandwidthMbps\": 1000, \"uploadBandwidthMbps\": 1000, \"children\": {{{}}}}}",
                    if s > 0 { "," } else { "" },
                    aps.join(",")
                );
            }
            net.push('}');
            let csv = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n\
                1,A,1,cpe,ap0_0,,100.64.0.1,,,,100,20,\n";
            roster_of(csv, &net)
        };
        let time = |roster: &Roster| {
            (0..5)
                .map(|_| {
                    let start = std::time::Instant::now();
                    std::hint::black_box(node_rows(roster, &[]));
                    start.elapsed()
                })
                .min()
                .unwrap()
        };
        let (small, large) = (tree(200), tree(800));
        assert_eq!(node_rows(&large, &[]).len(), 8_800, "every node, once");
        let (t_small, t_large) = (time(&small), time(&large));
        let ratio = t_large.as_secs_f64() / t_small.as_secs_f64();
        assert!(
            ratio < 8.0,
            "2 200 nodes in {t_small:?}, 8 800 in {t_large:?}: {ratio:.1} times as long"
        );
    }

    #[test]
    fn a_node_sums_its_subtree_virtual_nodes_too_and_keeps_the_worst_sojourn() {
        let roster = roster();
        let rows = [
            row("1", 1),
            row("2", 2),
            row("3", 4),
            row("4", 8),
            row("5", 16),
        ];
        let nodes = node_rows(&roster, &rows);
        let names: Vec<(&str, usize)> = nodes.iter().map(|n| (n.name.as_str(), n.depth)).collect();
        assert_eq!(
            names,
            [("Site", 0), ("AP_A", 1), ("V", 1), ("AP_B", 2)],
            "tree order, each node then its subtree"
        );
        let node = |name: &str| nodes.iter().find(|n| n.name == name).unwrap();
        // Site: every circuit but the parentless one.
        let site = node("Site");
        assert_eq!(site.circuits, 4);
        assert_eq!(site.download.tx_bps, 15e6);
        assert_eq!(site.download.sent_bytes, 15_000);
        assert_eq!(site.download.dropped_packets, 15);
        assert_eq!(site.download.backlog_bytes, 15);
        assert_eq!(
            site.download.sojourn_peak_ns, 8_000_000,
            "the worst, not a sum"
        );
        assert_eq!(site.download.cap_bps, 1_000_000_000);
        assert_eq!(site.upload.cap_bps, 500_000_000);
        // The virtual node carries what is under it, as AP_B does.
        for name in ["V", "AP_B"] {
            let n = node(name);
            assert_eq!(n.circuits, 2, "{name}");
            assert_eq!(n.download.dropped_packets, 6, "{name}");
            assert_eq!(n.download.sojourn_peak_ns, 4_000_000, "{name}");
        }
        assert!(node("V").is_virtual);
        let ap_a = node("AP_A");
        assert_eq!((ap_a.circuits, ap_a.download.sent_bytes), (1, 1000));
        // The plans are the circuits' (from the rows), the upload untouched here.
        assert_eq!(node("AP_B").download.plans_bps, 6_000_000);
        assert_eq!(site.upload.tx_bps, 0.0);
        // The text `ctl circuits` prints names each node with its sojourn.
        let report = CircuitsReport {
            nodes,
            ..CircuitsReport::default()
        };
        let text = report.text(SortBy::Rate);
        assert!(
            text.contains("  node V (virtual): 2 circuits; download 6"),
            "{text}"
        );
        assert!(text.contains("6 dropped, sojourn 4.0 ms"), "{text}");
    }
}
