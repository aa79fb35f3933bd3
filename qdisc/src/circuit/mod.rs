//! Per-circuit CAKE: [`CircuitShaper`] shapes each subscriber ("circuit") at its own plan
//! with a CAKE instance of its own, under an optional link-wide cap, for up to tens of
//! thousands of circuits per TX queue (docs/design.md, "Circuits: one CAKE per
//! subscriber").
//!
//! * **Slots.** The caller's classifier writes the circuit's slot (a dense `u32`, stable
//!   across reloads) into [`PacketMeta::circuit`]; [`CircuitShaperConfig::plans`] maps slots
//!   to [`CircuitPlan`]s. Unmatched traffic (and traffic of a slot without a plan) forms the
//!   default class.
//! * **Lazy instances.** A slot's CAKE is taken from a pool on its first packet and returned
//!   after it has been empty for [`CircuitShaperConfig::idle_release_ns`]; an idle slot
//!   costs only its entry in a compact array, which also keeps its cumulative counters.
//! * **Scheduling.** Circuits whose CAKE may send now wait on a ready ring served by DRR in
//!   bytes (quantum one MTU); circuits their own shaper holds wait in a timer wheel keyed by
//!   their [`Qdisc::next_wakeup`]. The link cap is a time-based gate charged per delivered
//!   packet. A dequeue is O(1) amortised (O(log n) for a hold beyond the wheel's 8 ms).
//! * **Bypass** per circuit: a packet passes at once when its circuit holds nothing and
//!   both its circuit's shaper and the link gate have credit.
//!
//! Internally circuit ids are `slot + 1`; id 0 is the default class.

mod config;
mod gate;
mod reconfig;
mod sched;
mod shed;
mod stats;
#[cfg(test)]
mod tests;
mod tree;

pub use config::{
    CircuitConfigError, CircuitPlan, CircuitShaperConfig, DEFAULT_CIRCUIT_BURST, MAX_SLOTS,
    PLAIN_AQM_NS,
};
pub use stats::{CircuitCounters, CircuitStats, CircuitTinStats};
pub use tree::{TreeCounters, TreeRef};

use crate::cake::{CakeConfig, SubscriberCake};
use crate::mq::sync::prefetch;
use crate::{BurstBypass, Dequeue, DropReason, Enqueued, Packet, PacketMeta, Qdisc, Rate};

use gate::LinkGate;
use sched::{IdleQueue, ReadyRing, TimerWheel};

/// The CAKE instance each circuit runs: subscriber-sized (64 flow queues per tin), so that
/// ten thousand live instances fit in memory. Everything here goes through this alias.
pub type CircuitCake<P> = SubscriberCake<P>;

const NIL: u32 = u32::MAX;
/// Packets between two stages of the burst's prefetch ([`Qdisc::prefetch_classified`]).
/// In the circuits row of `scripts/bench-circuits` (bursts of 32, a circuit's packets in
/// runs of 4), 5 forwarded at least as much as 4, 8 and 12 in alternating pairs.
const BURST_STAGE_LAG: usize = 5;
/// The id of the default class.
const DEFAULT_ID: u32 = 0;

/// Where a circuit stands in the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sched {
    /// Not scheduled: its instance is empty or absent.
    Idle,
    /// On the ready ring.
    Ready,
    /// On the ready ring after its own shaper held it: it waits for its turn, but it
    /// waited for rate first, so the rate tree counts it as held back.
    Released,
    /// In the timer wheel, held by its own shaper.
    Held,
}

/// The per-id record, kept for every slot whether or not it has an instance.
///
/// `repr(C)`, line-aligned, in this order: what a packet reads and writes (the instance,
/// the scheduling state and the sent counters) is the first 48 bytes, within the line a
/// prefetch of the record loads. In the compiler's order, 104 bytes at any offset in a
/// line, `inst` and `planned` came last, beyond the prefetched line, and the burst's
/// prefetch stalled on each circuit's record. The instance itself is here, not behind an
/// index into a list of instances: from a cold circuit's record its header is one load
/// away, not two (a stage fewer in each prefetch pipeline).
#[derive(Debug)]
#[repr(C, align(64))]
struct SlotState<P> {
    /// The circuit's live instance, if it has one.
    cake: Option<Box<CircuitCake<P>>>,
    /// Its position in `CircuitShaper::live` while it has an instance, else `NIL`.
    inst: u32,
    /// DRR deficit in bytes while on the ready ring.
    deficit: i32,
    /// When its instance last became empty.
    empty_since: u64,
    sched: Sched,
    /// True while an entry for this id is in the idle queue.
    queued_idle: bool,
    /// True when the slot has a plan (a copy of `plans[slot].is_some()`, so that the
    /// packet path reads this record rather than the plans array).
    planned: bool,
    counters: CircuitCounters,
}

impl<P> Default for SlotState<P> {
    fn default() -> SlotState<P> {
        SlotState {
            cake: None,
            inst: NIL,
            deficit: 0,
            sched: Sched::Idle,
            queued_idle: false,
            empty_since: 0,
            planned: false,
            counters: CircuitCounters::default(),
        }
    }
}

/// One CAKE per circuit under a link cap. See the module docs; the configuration is
/// [`CircuitShaperConfig`]. Implements [`Qdisc`] and [`crate::mq::MqQdisc`], so it serves
/// as the qdisc of a [`crate::mq::TxQueue`] unchanged.
#[derive(Debug)]
pub struct CircuitShaper<P> {
    config: CircuitShaperConfig,
    /// The default class's instance configuration, cached.
    default_cfg: CakeConfig,
    gate: LinkGate,
    slots: Vec<SlotState<P>>,
    /// The ids whose slot holds an instance, in no order (each slot's `inst` is its
    /// position here): what walks every live instance reads.
    live: Vec<u32>,
    /// Boxed so that taking an instance from the pool and releasing it moves a pointer,
    /// not the instance's few kilobytes of inline state.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<CircuitCake<P>>>,
    ring: ReadyRing,
    heap: TimerWheel,
    idle: IdleQueue,
    qlen: usize,
    backlog: u64,
    last_now: u64,
    /// Counters of circuits whose slot was handed to a new circuit.
    retired: CircuitCounters,
    /// The node tree the circuits share, when the config carries one (`tree.rs`).
    tree: Option<tree::TreeLink>,
    /// The total packet limit's bookkeeping (`shed.rs`).
    shed: shed::Shed,
}

impl<P: Packet> CircuitShaper<P> {
    /// A shaper with no instance yet: each circuit's is created on its first packet.
    ///
    /// # Errors
    /// Whatever [`CircuitShaperConfig::validate`] rejects.
    pub fn new(config: &CircuitShaperConfig) -> Result<CircuitShaper<P>, CircuitConfigError> {
        config.validate()?;
        let mut s = CircuitShaper {
            config: config.clone(),
            default_cfg: config.default_instance_config(),
            gate: LinkGate::new(&config.link),
            slots: Vec::new(),
            live: Vec::new(),
            spare: Vec::new(),
            ring: ReadyRing::new(),
            heap: TimerWheel::new(),
            idle: IdleQueue::default(),
            qlen: 0,
            backlog: 0,
            last_now: 0,
            retired: CircuitCounters::default(),
            tree: tree::TreeLink::for_config(config, None),
            shed: shed::Shed::default(),
        };
        s.grow(config.plans.len() + 1);
        s.slots[DEFAULT_ID as usize].planned = true;
        for (slot, plan) in config.plans.iter().enumerate() {
            s.slots[slot + 1].planned = plan.is_some();
        }
        Ok(s)
    }

    /// The configuration in force.
    pub fn config(&self) -> &CircuitShaperConfig {
        &self.config
    }

    /// Instances alive now (circuits with packets or recently active, and the default
    /// class when it has one).
    pub fn active_instances(&self) -> usize {
        self.live.len()
    }

    /// Released instances kept for reuse.
    pub fn spare_instances(&self) -> usize {
        self.spare.len()
    }

    /// Bytes this shaper holds apart from the packets: the per-slot array, the scheduling
    /// structures, and every live and spare instance's preallocated tables and packet slab.
    /// Walks every live instance (a cold line or more each); a reader that walks the slots
    /// anyway sums [`Self::planned_instance_bytes`] over them and adds
    /// [`Self::memory_bytes_besides_planned`] instead.
    pub fn memory_bytes(&self) -> usize {
        let planned = self.config.plans.len() as u32;
        self.memory_bytes_besides_planned()
            + (0..planned)
                .map(|slot| self.planned_instance_bytes(slot))
                .sum::<usize>()
    }

    /// The bytes of the live instance of circuit slot `slot` (0 without one): its share of
    /// [`Self::memory_bytes`].
    pub fn planned_instance_bytes(&self, slot: u32) -> usize {
        slot.checked_add(1)
            .and_then(|id| self.slots.get(id as usize))
            .and_then(|s| s.cake.as_deref())
            .map_or(0, Self::instance_bytes)
    }

    /// [`Self::memory_bytes`] but for the instances of the circuit slots below
    /// `config().plans.len()`: the shared structures, the spare instances, the default
    /// class's instance and those of slots beyond the plans (removed circuits still
    /// draining). Reads only those instances.
    pub fn memory_bytes_besides_planned(&self) -> usize {
        use std::mem::size_of;
        let planned = self.config.plans.len() as u32;
        size_of::<Self>()
            + self.slots.capacity() * size_of::<SlotState<P>>()
            + self.live.capacity() * size_of::<u32>()
            + self.spare.capacity() * size_of::<usize>()
            + self.ring.bytes()
            + self.heap.bytes()
            + self.idle.bytes()
            + self
                .live_instances_where(|id| id == DEFAULT_ID || id > planned)
                .map(|(_, c)| Self::instance_bytes(c))
                .sum::<usize>()
            + self
                .spare
                .iter()
                .map(|c| Self::instance_bytes(c))
                .sum::<usize>()
    }

    fn instance_bytes(c: &CircuitCake<P>) -> usize {
        c.preallocated_bytes() + c.slab_bytes()
    }

    /// Bytes one idle slot costs (its entry in the per-slot array and the scheduling
    /// structures' per-id entries).
    pub fn idle_slot_bytes() -> usize {
        use std::mem::size_of;
        size_of::<SlotState<P>>() + 2 * size_of::<u32>() + size_of::<(u64, u32)>() * 2
    }

    /// `slot`'s figures: cumulative counters and, while it has an instance, its backlog,
    /// rate, delays and tins. `None` for a slot beyond every configuration seen.
    pub fn circuit_stats(&self, slot: u32) -> Option<CircuitStats> {
        let id = (slot as usize).checked_add(1)?;
        if id >= self.slots.len() {
            return None;
        }
        Some(self.stats_of(id as u32))
    }

    /// `slot`'s cumulative counters and whether it has an instance, from its compact record
    /// alone: no line of its instance is read (a report that lists no circuit still keeps
    /// their rates, at a few bytes per slot). `None` as for [`CircuitShaper::circuit_stats`].
    pub fn circuit_counters(&self, slot: u32) -> Option<(CircuitCounters, bool)> {
        let id = (slot as usize).checked_add(1)?;
        let s = self.slots.get(id)?;
        Some((s.counters, s.cake.is_some()))
    }

    /// The default class's figures.
    pub fn default_stats(&self) -> CircuitStats {
        self.stats_of(DEFAULT_ID)
    }

    /// Every slot that holds an instance now, with its figures, in no particular order.
    pub fn active_circuits(&self) -> impl Iterator<Item = (u32, CircuitStats)> + '_ {
        self.live
            .iter()
            .filter(|&&id| id != DEFAULT_ID)
            .map(|&id| (id - 1, self.stats_of(id)))
    }

    /// The sum of every slot's counters, the default class's, and those of circuits whose
    /// slot has since been given to another circuit: nothing a release or reuse forgets.
    pub fn totals(&self) -> CircuitCounters {
        let mut t = self.retired;
        for s in &self.slots {
            t.add(&s.counters);
        }
        t
    }

    /// `slot`'s live instance, if it has one (for tests and `explain`).
    pub fn instance(&self, slot: u32) -> Option<&CircuitCake<P>> {
        let id = (slot as usize).checked_add(1)?;
        self.slots.get(id)?.cake.as_deref()
    }

    /// The default class's live instance, if it has one.
    pub fn default_instance(&self) -> Option<&CircuitCake<P>> {
        self.slots[DEFAULT_ID as usize].cake.as_deref()
    }

    fn stats_of(&self, id: u32) -> CircuitStats {
        let s = &self.slots[id as usize];
        let plan_rate = if id == DEFAULT_ID {
            self.default_cfg.rate
        } else {
            self.config.plan(id - 1).map_or(Rate::UNLIMITED, |p| p.rate)
        };
        let mut out = CircuitStats {
            counters: s.counters,
            backlog_packets: 0,
            backlog_bytes: 0,
            rate: plan_rate,
            active: s.cake.is_some(),
            sojourn_peak_ns: 0,
            tin_count: 0,
            tins: Default::default(),
        };
        if let Some(cake) = s.cake.as_deref() {
            let st = cake.stats();
            out.backlog_packets = cake.len() as u64;
            out.backlog_bytes = cake.backlog_bytes();
            out.rate = cake.current_rate();
            out.tin_count = st.tin_count;
            out.tins = stats::tin_figures(st, cake.tin_names());
            out.sojourn_peak_ns = out.tins[..st.tin_count]
                .iter()
                .map(|t| t.peak_delay_ns)
                .max()
                .unwrap_or(0);
        }
        out
    }

    /// Makes room for ids below `ids`.
    fn grow(&mut self, ids: usize) {
        if self.slots.len() < ids {
            self.slots.resize_with(ids, SlotState::default);
        }
        self.ring.grow(ids);
        self.heap.grow(ids);
        self.idle.grow(ids);
    }

    #[inline]
    fn clamp(&mut self, now: u64) -> u64 {
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    /// The id a packet belongs to: its slot's when the slot has a plan, else the default
    /// class's.
    #[inline]
    fn class_of(&self, meta: &PacketMeta) -> u32 {
        match meta.circuit {
            Some(slot) if self.slots.get(slot as usize + 1).is_some_and(|s| s.planned) => slot + 1,
            _ => DEFAULT_ID,
        }
    }

    /// The instance configuration id `id` should run now.
    fn want_config(&self, id: u32) -> CakeConfig {
        match self.config.plan(id.wrapping_sub(1)) {
            Some(plan) if id != DEFAULT_ID => self.config.instance_config(plan),
            _ => self.default_cfg.clone(),
        }
    }

    /// Gives `id` an instance, from the pool (or a new one) when it has none.
    #[inline]
    fn ensure_instance(&mut self, id: u32) {
        if self.slots[id as usize].cake.is_none() {
            self.attach_instance(id);
        }
    }

    /// Every live instance with its id, in no particular order.
    fn live_instances(&self) -> impl Iterator<Item = (u32, &CircuitCake<P>)> + '_ {
        self.live_instances_where(|_| true)
    }

    /// The live instances whose id `pick` accepts; the others' lines are not read.
    fn live_instances_where<'a>(
        &'a self,
        pick: impl Fn(u32) -> bool + 'a,
    ) -> impl Iterator<Item = (u32, &'a CircuitCake<P>)> + 'a {
        self.live
            .iter()
            .filter(move |&&id| pick(id))
            .filter_map(|&id| Some((id, self.slots[id as usize].cake.as_deref()?)))
    }

    /// [`Self::ensure_instance`]'s work for an id without an instance.
    #[cold]
    #[inline(never)]
    fn attach_instance(&mut self, id: u32) {
        let want = self.want_config(id);
        let mut cake = match self.spare.pop() {
            Some(mut c) => {
                if *c.config() != want {
                    // Validated with the config; a refusal would leave the old settings,
                    // which is still a working instance.
                    let _ = c.reconfigure(&want);
                }
                // As new: counters, clocks, COBALT state and rate of the previous owner gone,
                // nothing allocated.
                c.reset();
                c
            }
            None => match CircuitCake::new(&want) {
                Ok(c) => Box::new(c),
                Err(_) => Box::new(
                    CircuitCake::new(&CakeConfig::default())
                        .expect("the default CAKE config is valid"),
                ),
            },
        };
        if let Some(share) = self.tree_wake_rate(id) {
            // Under a node tree a new instance starts at its share, not its plan's max.
            cake.set_rate(share);
        }
        if let Some(link) = self.tree.as_mut() {
            link.join_pending = true;
        }
        let s = &mut self.slots[id as usize];
        s.inst = self.live.len() as u32;
        s.cake = Some(cake);
        self.live.push(id);
    }

    /// Returns `id`'s (empty) instance to the pool.
    fn release(&mut self, id: u32) {
        let s = &mut self.slots[id as usize];
        let Some(cake) = s.cake.take() else {
            return;
        };
        let pos = std::mem::replace(&mut s.inst, NIL);
        self.live.swap_remove(pos as usize);
        if let Some(&moved) = self.live.get(pos as usize) {
            self.slots[moved as usize].inst = pos;
        }
        if self.spare.len() < self.config.spare_instances {
            self.spare.push(cake);
        }
    }

    /// Puts `id` (whose instance just became non-empty) on the ring or in the timer wheel.
    fn schedule(&mut self, id: u32, now: u64) {
        let quantum = self.gate.quantum();
        let s = &mut self.slots[id as usize];
        match s.cake.as_deref().and_then(|c| c.next_wakeup()) {
            Some(t) if t > now => {
                self.heap.insert(id, t);
                s.sched = Sched::Held;
            }
            _ => {
                self.ring.push_back(id);
                s.sched = Sched::Ready;
                s.deficit = quantum;
            }
        }
    }

    /// `id` holds nothing now and is off the ring and heap: it waits for release (at
    /// once when its slot no longer has a plan).
    fn mark_empty(&mut self, id: u32, now: u64) {
        let s = &mut self.slots[id as usize];
        let removed = !s.planned;
        s.sched = Sched::Idle;
        s.empty_since = now;
        if removed {
            self.release(id);
        } else if !s.queued_idle {
            s.queued_idle = true;
            self.idle.push(now, id);
        }
    }

    /// Releases the instances that have been empty for `idle_release_ns`. Every enqueue
    /// and dequeue does this; a caller whose shaper may sit idle for long can call it from
    /// its housekeeping to give the memory back sooner.
    #[inline]
    pub fn release_idle(&mut self, now_ns: u64) {
        let now = self.clamp(now_ns);
        // The common case, every packet: nothing due. A compare here, inlined, rather than
        // a call into the loop below.
        match self.idle.front() {
            Some((t, _)) if t.saturating_add(self.config.idle_release_ns) <= now => {
                self.release_due(now);
            }
            _ => {}
        }
    }

    /// The work of [`Self::release_idle`] once its first entry is due.
    #[cold]
    #[inline(never)]
    fn release_due(&mut self, now: u64) {
        let after = self.config.idle_release_ns;
        while let Some((t, id)) = self.idle.front() {
            if t.saturating_add(after) > now {
                break;
            }
            self.idle.pop();
            let s = &mut self.slots[id as usize];
            s.queued_idle = false;
            let Some(cake) = s.cake.as_deref() else {
                continue;
            };
            if s.sched != Sched::Idle {
                continue;
            }
            if s.empty_since.saturating_add(after) <= now {
                if cake.is_empty() {
                    self.release(id);
                }
            } else {
                // It was busy again since this entry: wait for its latest emptying.
                s.queued_idle = true;
                let since = s.empty_since;
                self.idle.push(since, id);
            }
        }
    }

    /// Runs `op` on `id`'s instance, which it has (made by [`Self::ensure_instance`], or
    /// it is scheduled), and keeps the totals exact whatever it queued, sent or dropped:
    /// returns `(packets, bytes)` before and after.
    #[inline]
    fn with_instance<R>(
        &mut self,
        id: u32,
        op: impl FnOnce(&mut CircuitCake<P>) -> R,
    ) -> (R, (usize, u64), (usize, u64)) {
        let cake = live_in(&mut self.slots, id);
        let before = (cake.len(), cake.backlog_bytes());
        let r = op(cake);
        let after = (cake.len(), cake.backlog_bytes());
        self.qlen = self.qlen - before.0 + after.0;
        self.backlog = self.backlog - before.1 + after.1;
        (r, before, after)
    }

    /// Starts loading the state of the circuits served after `id`, one stage per dequeue
    /// ahead, so that each dependent load of a cold circuit finds its line fetched a
    /// dequeue earlier: the fifth on the ready ring gets its slot record prefetched, the
    /// fourth its instance header, the third its active tins, the second its lists' head
    /// flows, the next its head packet's slot. A hint only; the ring may change before they
    /// are served. (With four stages, tins and head flows in one, reading the tins' list
    /// heads to find the flows stalled on each circuit's tin line.)
    #[inline]
    fn prefetch_next_ready(&self, id: u32) {
        let inst_of = |id: u32| self.slots[id as usize].cake.as_deref();
        let Some(n1) = self.ring.next_of(id) else {
            return;
        };
        if let Some(c) = inst_of(n1) {
            c.prefetch_dequeue_packet();
        }
        let Some(n2) = self.ring.next_of(n1) else {
            return;
        };
        if let Some(c) = inst_of(n2) {
            c.prefetch_dequeue_flows();
        }
        let Some(n3) = self.ring.next_of(n2) else {
            return;
        };
        if let Some(c) = inst_of(n3) {
            c.prefetch_dequeue_tins();
        }
        let Some(n4) = self.ring.next_of(n3) else {
            return;
        };
        if let Some(c) = inst_of(n4) {
            c.prefetch_header();
        }
        if let Some(n5) = self.ring.next_of(n4) {
            prefetch(&self.slots[n5 as usize]);
        }
    }

    /// The first stage of the burst's prefetch for `metas[j]`: its circuit's slot record.
    #[inline]
    fn prefetch_record(&self, metas: &[PacketMeta], j: usize) {
        if starts_run(metas, j) {
            if let Some(s) = metas[j]
                .circuit
                .and_then(|c| self.slots.get(c as usize + 1))
            {
                prefetch(s);
            }
        }
    }

    /// The second stage for `metas[j]`: its instance's hot lines, found through the slot
    /// record the first stage loaded.
    #[inline]
    fn prefetch_instance(&self, metas: &[PacketMeta], j: usize) {
        if starts_run(metas, j) {
            if let Some(c) = self.slots[self.class_of(&metas[j]) as usize]
                .cake
                .as_deref()
            {
                c.prefetch_header();
            }
        }
    }

    /// The third stage for `metas[j]`: what its enqueue touches beyond the hot lines, the
    /// packet slot being the one it takes as the nth packet of its circuit's run.
    #[inline]
    fn prefetch_packet(&self, metas: &[PacketMeta], j: usize) {
        let m = &metas[j];
        if let Some(c) = self.slots[self.class_of(m) as usize].cake.as_deref() {
            let run = metas[..j].iter().rev();
            let nth = run.take_while(|p| p.circuit == m.circuit).count();
            c.prefetch_flow(m, nth as u32);
        }
    }

    /// Checks the shaper's bookkeeping: the totals match the instances, every instance
    /// with packets is scheduled exactly once, owners and slots agree. For tests and
    /// fuzzing.
    ///
    /// # Errors
    /// A description of the first inconsistency.
    pub fn check_invariants(&self) -> Result<(), String> {
        let qlen: usize = self.live_instances().map(|(_, c)| c.len()).sum();
        let backlog: u64 = self.live_instances().map(|(_, c)| c.backlog_bytes()).sum();
        if qlen != self.qlen || backlog != self.backlog {
            return Err(format!(
                "totals {}/{} but instances hold {qlen}/{backlog}",
                self.qlen, self.backlog
            ));
        }
        for (pos, &id) in self.live.iter().enumerate() {
            let s = self
                .slots
                .get(id as usize)
                .ok_or_else(|| format!("live id {id} beyond the slots"))?;
            let Some(cake) = s.cake.as_deref() else {
                return Err(format!("live id {id} has no instance"));
            };
            if s.inst as usize != pos {
                return Err(format!("live id {id} at {pos} records {}", s.inst));
            }
            if !cake.is_empty() && s.sched == Sched::Idle {
                return Err(format!("id {id} holds packets but is not scheduled"));
            }
            cake.check_invariants()?;
        }
        let with_instance = self.slots.iter().filter(|s| s.cake.is_some()).count();
        if with_instance != self.live.len() {
            return Err(format!(
                "{with_instance} slots hold an instance, {} are live",
                self.live.len()
            ));
        }
        let mut ready = 0;
        let mut held = 0;
        for (id, s) in self.slots.iter().enumerate() {
            match s.sched {
                Sched::Ready | Sched::Released => ready += 1,
                Sched::Held => {
                    held += 1;
                    if !self.heap.contains(id as u32) {
                        return Err(format!("id {id} held but not in the timer wheel"));
                    }
                }
                Sched::Idle => {
                    if self.heap.contains(id as u32) {
                        return Err(format!("id {id} idle but in the timer wheel"));
                    }
                }
            }
            if s.cake.is_none() && s.inst != NIL {
                return Err(format!(
                    "id {id} records live position {} without an instance",
                    s.inst
                ));
            }
            if s.sched != Sched::Idle && s.cake.is_none() {
                return Err(format!("id {id} scheduled without an instance"));
            }
        }
        if ready != self.ring.len() || held != self.heap.len() {
            return Err(format!(
                "{ready} ready and {held} held ids, ring {} heap {}",
                self.ring.len(),
                self.heap.len()
            ));
        }
        Ok(())
    }
}

impl<P: Packet> Qdisc<P> for CircuitShaper<P> {
    /// The bypass decides per circuit (see [`Qdisc::bypass_burst`] below).
    const BYPASS_WHILE_BACKLOGGED: bool = true;

    fn enqueue(&mut self, now_ns: u64, pkt: P, meta: &PacketMeta) -> Enqueued {
        let now = self.clamp(now_ns);
        self.release_idle(now);
        let id = self.class_of(meta);
        if self.qlen == 0 {
            self.gate.wake(now);
        }
        self.ensure_instance(id);
        let (r, before, after) = self.with_instance(id, |c| c.enqueue(now, pkt, meta));
        let s = &mut self.slots[id as usize];
        if r.dropped_packets > 0 {
            // Rare: most enqueues drop nothing, and then skip the split by reason.
            crate::cold_path();
            for (reason, n) in r.drops_by_reason() {
                s.counters.drops[reason.index()] += u64::from(n);
            }
            s.counters.dropped_bytes += r.dropped_bytes;
        }
        if s.sched == Sched::Idle {
            if after.0 > 0 {
                self.schedule(id, now);
            } else if before.0 == 0 {
                // Taken for a packet it dropped at once: it waits for release as if used.
                self.mark_empty(id, now);
            }
        }
        self.shed.saw(id, after.0);
        let mut r = r;
        if self.qlen > self.config.total_packet_limit {
            crate::cold_path();
            self.shed_over_total(now, id, &mut r);
        }
        r
    }

    /// Every stage of [`Qdisc::prefetch_classified`] for a burst classified already.
    fn prefetch(&self, metas: &[PacketMeta]) {
        for i in 0..metas.len() {
            self.prefetch_classified(metas, i);
        }
    }

    /// Prefetches in stages over the burst, as DPDK applications do, each stage reading
    /// what the one before started loading: a packet's slot record as soon as it is
    /// classified, its instance's hot lines `BURST_STAGE_LAG` (five) packets later, its tin,
    /// flow and packet slot as many again later (the rest of the second stage at the
    /// burst's last packet, the rest of the third as the burst is offered,
    /// [`Qdisc::prefetch_before_offer`]). A
    /// circuit's state is cold when its packets come (thousands of circuits share the
    /// caches), and its enqueue is a chain of dependent loads; staged, the misses of the
    /// burst's circuits overlap, and each stage's loads have the classification of the
    /// packets in between to arrive in (with the stages run back to back after the whole
    /// burst was classified, each stalled on the lines the one before had just asked for).
    /// Consecutive packets of one circuit load its record and hot lines once.
    fn prefetch_classified(&self, metas: &[PacketMeta], i: usize) {
        let [records, instances, packets] = burst_stages(metas.len(), i);
        for j in records {
            self.prefetch_record(metas, j);
        }
        for j in instances {
            self.prefetch_instance(metas, j);
        }
        for j in packets {
            self.prefetch_packet(metas, j);
        }
    }

    /// The third stages the burst's last packet left (see `burst_stages`): the one for
    /// packet `i + 2 * BURST_STAGE_LAG` before packet `i` is offered, as it would have been
    /// had the classification gone on; before the first, those of the packets within that
    /// distance. The lines of the third stage follow from the second's (the instance's
    /// header), which at the burst's last packet had only just been asked for.
    fn prefetch_before_offer(&self, metas: &[PacketMeta], i: usize) {
        for j in deferred_before_offer(metas.len(), i) {
            self.prefetch_packet(metas, j);
        }
    }

    fn dequeue(&mut self, now_ns: u64) -> Dequeue<P> {
        let now = self.clamp(now_ns);
        self.release_idle(now);
        self.sync_tree(now);
        let quantum = self.gate.quantum();
        loop {
            while let Some(id) = self.heap.pop_due(now) {
                self.ring.push_back(id);
                let s = &mut self.slots[id as usize];
                s.sched = Sched::Released;
                s.deficit = quantum;
            }
            let Some(id) = self.ring.head() else {
                return match self.heap.peek() {
                    Some((t, _)) if self.gate.is_unlimited() => Dequeue::NotBefore(t),
                    Some((t, _)) => Dequeue::NotBefore(t.max(self.gate.opens_at())),
                    None => Dequeue::Empty,
                };
            };
            if !self.gate.is_open(now) {
                crate::cold_path();
                return Dequeue::NotBefore(self.gate.opens_at());
            }
            let s = &mut self.slots[id as usize];
            if s.deficit <= 0 {
                s.deficit += quantum;
                self.ring.rotate();
                continue;
            }
            if s.cake.is_none() {
                crate::cold_path();
                self.ring.pop_front();
                self.slots[id as usize].sched = Sched::Idle;
                continue;
            }
            self.prefetch_next_ready(id);
            let (out, before, after) = self.with_instance(id, |c| c.dequeue(now));
            let (sent, sent_bytes) = match &out {
                // Without a COBALT drop in this call the backlog fell by exactly the packet's
                // length: no need to read it from the packet, whose buffer is cold here.
                Dequeue::Packet(_) if before.0 - after.0 == 1 => (1, before.1 - after.1),
                Dequeue::Packet(p) => (1, p.len() as u64),
                _ => (0, 0),
            };
            let dropped = (before.0 - after.0).saturating_sub(sent) as u64;
            let s = &mut self.slots[id as usize];
            if dropped > 0 {
                s.counters.drops[DropReason::Aqm.index()] += dropped;
                s.counters.dropped_bytes += (before.1 - after.1).saturating_sub(sent_bytes);
            }
            match out {
                Dequeue::Packet(p) => {
                    s.counters.sent_packets += 1;
                    s.counters.sent_bytes += sent_bytes;
                    s.deficit -= sent_bytes as i32;
                    self.gate.charge(now, sent_bytes as u32);
                    if after.0 == 0 {
                        self.ring.pop_front();
                        self.mark_empty(id, now);
                    } else if let Some(t) = s.cake.as_deref().and_then(|c| c.next_wakeup()) {
                        if t > now {
                            self.ring.pop_front();
                            self.heap.insert(id, t);
                            s.sched = Sched::Held;
                        }
                    }
                    return Dequeue::Packet(p);
                }
                Dequeue::NotBefore(t) => {
                    self.ring.pop_front();
                    self.heap.insert(id, t.max(now + 1));
                    s.sched = Sched::Held;
                }
                Dequeue::Empty => {
                    self.ring.pop_front();
                    self.mark_empty(id, now);
                }
            }
        }
    }

    fn len(&self) -> usize {
        self.qlen
    }

    fn backlog_bytes(&self) -> u64 {
        self.backlog
    }

    /// Lets packets through from the front of the burst while each one's circuit holds
    /// nothing, its circuit's shaper has credit and the link gate is open; stops at the
    /// first that cannot pass, so that order is kept.
    fn bypass_burst(&mut self, now_ns: u64, pkts: &[P], metas: &[PacketMeta]) -> BurstBypass {
        let now = self.clamp(now_ns);
        let mut done = BurstBypass::default();
        if self.qlen == 0 {
            self.gate.wake(now);
        }
        for (pkt, meta) in pkts.iter().zip(metas) {
            if !self.gate.is_open(now) {
                break;
            }
            let id = self.class_of(meta);
            let s = &self.slots[id as usize];
            if s.sched != Sched::Idle || s.cake.as_deref().is_some_and(|c| !c.is_empty()) {
                break;
            }
            let fresh = s.cake.is_none();
            self.ensure_instance(id);
            if !live_in(&mut self.slots, id).try_bypass(now, pkt, meta) {
                if fresh {
                    self.mark_empty(id, now);
                }
                break;
            }
            let len = pkt.len() as u64;
            self.gate.charge(now, len as u32);
            let s = &mut self.slots[id as usize];
            s.counters.sent_packets += 1;
            s.counters.sent_bytes += len;
            self.mark_empty(id, now);
            done.packets += 1;
            done.bytes += len;
        }
        done
    }

    /// Washes each passed packet whose circuit's CAKE washes (its instance exists: the
    /// bypass created it).
    fn rewrite_passed(&self, pkts: &mut [P], metas: &[PacketMeta]) {
        for (pkt, meta) in pkts.iter_mut().zip(metas) {
            if let Some(c) = self.slots[self.class_of(meta) as usize].cake.as_deref() {
                // The instance's own rule (its hot copy of `wash`, not the cold config).
                c.rewrite_passed(std::slice::from_mut(pkt), std::slice::from_ref(meta));
            }
        }
    }

    /// Sets the link cap (the share the cake_mq sync gives this queue); circuits keep
    /// their plans. A pure parameter write.
    fn set_rate(&mut self, rate: Rate) {
        self.gate.set_rate(rate, self.last_now);
    }

    /// The configured link cap.
    fn rate(&self) -> Rate {
        self.config.link.rate
    }

    /// The link gate's opening while a circuit is ready, else the earliest held circuit's
    /// wake-up (no earlier than the gate's); `None` when nothing is queued.
    fn next_wakeup(&self) -> Option<u64> {
        if self.qlen == 0 {
            return None;
        }
        let gate = if self.gate.is_unlimited() {
            0
        } else {
            self.gate.opens_at()
        };
        if !self.ring.is_empty() {
            // Something may go now, or when the gate opens.
            return Some(gate.max(self.last_now));
        }
        self.heap.peek().map(|(t, _)| t.max(gate))
    }
}

/// The packets of a burst of `len` whose prefetch stages (slot record, instance, packet)
/// start at the call for packet `i`: its own first stage, the second of the packet
/// [`BURST_STAGE_LAG`] before it and the third of the one twice that before it; at the last
/// packet, every second stage not started yet. The third stages not started by then
/// ([`burst_deferred`]) start as the burst is offered.
fn burst_stages(len: usize, i: usize) -> [std::ops::Range<usize>; 3] {
    const LAG: usize = BURST_STAGE_LAG;
    let behind = |lag: usize| if i >= lag { i - lag..i - lag + 1 } else { 0..0 };
    let second = if i + 1 == len {
        i.saturating_sub(LAG)..i + 1
    } else {
        behind(LAG)
    };
    [i..i + 1, second, behind(2 * LAG)]
}

/// The packets of a burst of `len` whose third prefetch stage [`burst_stages`] leaves to
/// [`Qdisc::prefetch_before_offer`]: those less than twice [`BURST_STAGE_LAG`] before the
/// end.
fn burst_deferred(len: usize) -> std::ops::Range<usize> {
    len.saturating_sub(2 * BURST_STAGE_LAG)..len
}

/// The deferred third stages ([`burst_deferred`]) to start before packet `i` of a burst of
/// `len` is offered: packet `i + 2 * BURST_STAGE_LAG`'s, and before the first packet those
/// of every deferred packet within that distance.
fn deferred_before_offer(len: usize, i: usize) -> std::ops::Range<usize> {
    let deferred = burst_deferred(len);
    let upto = i + 2 * BURST_STAGE_LAG;
    let from = if i == 0 { deferred.start } else { upto };
    from.max(deferred.start)..(upto + 1).min(deferred.end)
}

/// Whether `metas[j]` starts a run of one circuit's packets in its burst.
#[inline(always)]
fn starts_run(metas: &[PacketMeta], j: usize) -> bool {
    j == 0 || metas[j].circuit != metas[j - 1].circuit
}

/// `id`'s instance, which it has: [`CircuitShaper::ensure_instance`] made it, or the id
/// is scheduled (a scheduled id always has one, `check_invariants` says).
#[inline(always)]
fn live_in<P>(slots: &mut [SlotState<P>], id: u32) -> &mut CircuitCake<P> {
    match slots[id as usize].cake.as_deref_mut() {
        Some(c) => c,
        None => unreachable!("circuit id {id} has no instance"),
    }
}

impl<P> CircuitShaper<P> {
    /// The link cap in force now (after the cake_mq sync's `set_rate`).
    pub fn current_link_rate(&self) -> Rate {
        self.gate.rate()
    }
}
