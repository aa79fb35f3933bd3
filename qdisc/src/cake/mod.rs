//! One CAKE instance (Linux `sch_cake`): tins, set-associative flow tables with host
//! fairness, DRR++, COBALT and the time-based shaper, with the overflow heap, ACK filter and
//! autorate (docs/design.md, "The CAKE model"). It does not share a rate between TX queues; that is
//! [`crate::mq`]'s job, which drives a `Cake` through [`Qdisc`].
//!
//! # Call protocol
//! * [`Qdisc::enqueue`], [`Qdisc::dequeue`], [`Qdisc::try_bypass`], [`Qdisc::set_rate`] and
//!   [`Cake::reconfigure`] may interleave in any order on one thread; each runs to
//!   completion, so there is no "middle of a dequeue" for a rate change or a reconfigure
//!   to land in.
//! * `now_ns` should not go backwards. An older value is clamped to the newest seen and
//!   counted in [`CakeStats::clock_clamps`].
//! * `dequeue` returns [`Dequeue::NotBefore`] when the shaper holds packets back; call it
//!   again at that time (or use [`Qdisc::next_wakeup`]).
//!
//! # Costs
//! Enqueue is O(1) apart from the ACK filter (a walk of the flow's queue) and, only after
//! an overflow, O(log 8192) heap upkeep; an overflow drop after 65535 quiet dequeues
//! rebuilds the heap in O(8192). Dequeue is O(tins + flows visited), normally O(1).
//! `set_rate` is O(tins). Nothing allocates after [`Cake::new`], except `reconfigure`
//! growing the packet slab or turning the ACK filter on.
//!
//! # Choices where Linux has quirks (each is tested)
//! * **`rec_inv_sqrt` of a fresh flow is 0**, as in the kernel, so the first dropping episode
//!   of a never-used flow schedules its first drop at once ([`cobalt::CobaltVars`]).
//! * **Sent counters are counted at delivery**, not at enqueue as in Linux, so they match
//!   what left the port; bypassed packets count too.
//! * **NAT**: cakewalk has no conntrack, so the kernel's NAT lookup (and its bug of not
//!   updating the destination port) cannot be reproduced. The `nat` flag keeps one effect:
//!   with `nat` on and `PacketMeta::keys_rewritten` set, the precomputed hash is not
//!   reused.
//! * **Packet limit**: treated like `sch->limit`: after each enqueue, packets are dropped
//!   from the head of the fattest flow while more than `packet_limit` are queued (Linux's
//!   CAKE only enforces its memory limit).
//! * **GSO** super-frames are never split (the `Packet` trait cannot split a buffer); they
//!   are charged per segment as on the kernel's unsplit path.
//! * **wash** is left to the caller's rewrite step: the qdisc never writes packet bytes.
//! * **Reconfigure to fewer tins** purges the dropped tins; purged packets are counted as
//!   `Overflow` drops and in [`CakeStats::purged_packets`].
//! * **Memory limit 0** (`memlimit: Some(0)`) means "auto", as the kernel's 0 does.
//! * **Peak memory** (`memory_used`) is sampled before the overflow drops, as in Linux,
//!   so it can exceed the limit by one packet.
//!
//! # Beyond Linux (each is tested)
//! * The shaper clocks keep sub-nanosecond remainders ([`shaper::Clock`]): Linux truncates
//!   every packet's duration and runs fast by up to 7 % at 40 Gbit/s with small frames.
//! * An empty decaying flow whose COBALT state cannot change before its `drop_next` is not
//!   visited (Linux visits the decaying head on every dequeue only to rotate it to the
//!   tail); the list stays in expiry order and the flow is retired when it expires.
//! * Full rounds of the unlimited-mode tin DRR that cannot end it are applied in closed
//!   form (same deficits as running them).
//! * Leaving unlimited mode through `set_rate` starts the shaper clocks at the last `now`
//!   seen, so no burst is released for the time spent unlimited.

mod ack_filter;
mod bypass;
pub mod cobalt;
mod config;
pub mod diffserv;
mod hash;
mod heap;
pub mod shaper;
mod stats;
mod table;

use crate::{
    cold_path, BurstBypass, Dequeue, DropReason, Enqueued, Packet, PacketMeta, Qdisc, Rate,
    TcpAckInfo,
};

pub use config::{
    AckFilterMode, AtmMode, CakeConfig, ConfigError, DiffservMode, FlowMode, LinkPreset, RttPreset,
    MAX_PACKET_LIMIT, MIN_RATE_BYTES_PER_SEC,
};
pub use diffserv::{diffserv_table, diffserv_tin, tin_count, tin_order, MAX_TINS};
pub use hash::{flow_hash, host_hash};
pub use stats::{CakeStats, TinStats, DELAY_HISTOGRAM_MAX_US, DELAY_SAMPLE_EVERY};

use ack_filter::AckEntry;
use cobalt::{CobaltParams, CobaltVars, Verdict};
use heap::OverflowHeap;
use shaper::{Clock, Overhead, RateNs};
use stats::ewma;
use table::FlowTable;

/// Flow queues per tin.
pub const FLOWS_PER_TIN: usize = 1024;
/// Ways per set of the set-associative flow and host tables.
pub const SET_WAYS: usize = 8;
const ALL_FLOWS: usize = MAX_TINS * FLOWS_PER_TIN;
/// Dequeues after an overflow during which the heap is kept up to date.
const OVERFLOW_TIMEOUT: u32 = 65535;
/// Autorate waits this long after a reconfigure before changing the rate again.
const AUTORATE_HOLDOFF_NS: u64 = 250_000_000;
/// Least credit the shaper may bank while busy (see `Cake::bound_catch_up`).
const MAX_CATCH_UP_NS: u64 = 50_000_000;

/// Bound on the flow visits of one dequeue that deliver nothing: more than a valid state can
/// need (every flow refilled, emptied and moved a few times, plus every packet the queue
/// can hold dropped by COBALT), and a constant so that no dequeue computes it.
const DEQUEUE_VISIT_BUDGET: u32 = 4 * ALL_FLOWS as u32 + 2 * MAX_PACKET_LIMIT + 64;

const NIL: u32 = u32::MAX;
const NIL16: u16 = u16::MAX;

// Flow set membership (the kernel's CAKE_SET_*).
const SET_NONE: u8 = 0;
const SET_SPARSE: u8 = 1;
const SET_SPARSE_WAIT: u8 = 2;
const SET_BULK: u8 = 3;
const SET_DECAYING: u8 = 4;

// The three flow lists of a tin.
const NEW: u8 = 0;
const OLD: u8 = 1;
const DECAY: u8 = 2;
const NO_LIST: u8 = u8::MAX;

/// Entries of [`QUANTUM_DIV`]: a power of two above any host's bulk count (at most the
/// 1024 flows of its tin), so that a mask keeps the index in bounds without a clamp.
const QUANTUM_DIV_LEN: usize = 2 * FLOWS_PER_TIN;

/// `65535 / n`: the host-fairness divisor table. A load of 0 (no bulk flow on either host)
/// reads 1's divisor, so that no caller clamps the load to at least 1; loads above 1024
/// cannot occur and read 1024's divisor.
static QUANTUM_DIV: [u16; QUANTUM_DIV_LEN] = {
    let mut t = [65535u16; QUANTUM_DIV_LEN];
    let mut i = 1;
    while i < QUANTUM_DIV_LEN {
        let n = if i > FLOWS_PER_TIN { FLOWS_PER_TIN } else { i };
        t[i] = (65535 / n) as u16;
        i += 1;
    }
    t
};

/// Per-flow state: one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Flow {
    head: u32,
    tail: u32,
    backlog: u64,
    deficit: i32,
    srchost: u16,
    dsthost: u16,
    set: u8,
    list: u8,
    cv: CobaltVars,
}

impl Default for Flow {
    fn default() -> Flow {
        Flow {
            head: NIL,
            tail: NIL,
            backlog: 0,
            deficit: 0,
            srchost: 0,
            dsthost: 0,
            set: SET_NONE,
            list: NO_LIST,
            cv: CobaltVars::default(),
        }
    }
}

/// A flow's links in its tin's list: kept apart from [`Flow`] so that moving a flow between
/// lists touches its neighbours' 4-byte links, not their whole cache lines.
#[derive(Debug, Clone, Copy)]
struct Link {
    next: u16,
    prev: u16,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            next: NIL16,
            prev: NIL16,
        }
    }
}

/// Host-fairness tags (`struct cake_host` minus the bulk counts, which live in compact
/// arrays of their own because every quantum refill reads them).
#[derive(Debug, Clone, Copy, Default)]
struct Host {
    src_tag: u32,
    dst_tag: u32,
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: u16,
    tail: u16,
}

impl Default for List {
    fn default() -> List {
        List {
            head: NIL16,
            tail: NIL16,
        }
    }
}

/// Per-tin scheduling state (counters live in [`TinStats`]).
#[derive(Debug, Clone, Default)]
struct Tin {
    lists: [List; 3],
    flow_quantum: u16,
    /// Deliveries left before the next delay sample.
    delay_sample_wait: u32,
    cparams: CobaltParams,
    rate: RateNs,
    clock: Clock,
}

/// A tin's part in the unlimited-mode DRR between tins, packed into 8 bytes so that a turn
/// of the tin walk (about four per dequeue with 1000-byte packets) reads one entry at a
/// scaled index instead of a [`Tin`] and a [`TinStats`] at multiplied ones.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(8))]
struct TinTurn {
    deficit: i32,
    quantum: u16,
    /// Sparse plus bulk flows (`TinStats::sparse_flows + bulk_flows`, at most 1024): the
    /// tin has work while this is non-zero.
    active_flows: u16,
}

/// A packet slot in the preallocated slab.
#[derive(Debug, Clone)]
struct Slot<P> {
    pkt: Option<P>,
    next: u32,
    len: u32,
    adj_len: u32,
    footprint: u32,
    enqueue_ns: u64,
}

/// A packet unlinked from its flow for delivery: its slot and the lengths read from it
/// (passed on so that the delivery does not read the slot again).
#[derive(Debug, Clone, Copy)]
struct Popped {
    slot: u32,
    adj: u32,
    len: u32,
}

/// Where a packet would go: the answer to `cakewalk explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    /// Tin index.
    pub tin: usize,
    /// Tin name in the current diffserv mode.
    pub tin_name: &'static str,
    /// The flow hash (tag) used for the set-associative lookup.
    pub flow_hash: u32,
    /// True when the precomputed `l4_hash` was used as the flow hash.
    pub used_l4_hash: bool,
    /// Flow queue within the tin (0..1024).
    pub flow: usize,
    /// Source host entry within the tin, in dual-srchost and triple-isolate modes.
    pub src_host: Option<usize>,
    /// Destination host entry within the tin, in dual-dsthost and triple-isolate modes.
    pub dst_host: Option<usize>,
}

/// Autorate-ingress estimator state.
#[derive(Debug, Clone, Default)]
struct Autorate {
    avg_packet_interval: u64,
    last_packet_time: u64,
    avg_window_begin: u64,
    avg_window_bytes: u64,
    avg_peak_bandwidth: u64,
    last_reconfig_time: u64,
}

/// One CAKE instance over packets of type `P`. See the module docs for the call protocol.
#[derive(Debug, Clone)]
pub struct Cake<P> {
    config: CakeConfig,
    tin_cnt: usize,
    tin_index: &'static [u8; 64],
    tin_order: &'static [usize],
    tin_names: &'static [&'static str],
    dsrc: bool,
    ddst: bool,
    overhead: Overhead,
    ingress: bool,
    ack_mode: AckFilterMode,

    rate_bps: u64,
    rate: RateNs,
    time_next: Clock,
    failsafe_next: u64,

    buffer_used: u64,
    buffer_limit: u64,
    qlen: u32,
    backlog: u64,

    tins: [Tin; MAX_TINS],
    turns: [TinTurn; MAX_TINS],
    flows: FlowTable<Flow>,
    links: FlowTable<Link>,
    tags: FlowTable<u32>,
    hosts: FlowTable<Host>,
    src_bulk: FlowTable<u16>,
    dst_bulk: FlowTable<u16>,
    heap: OverflowHeap,
    overflow_timeout: u32,

    slots: Vec<Slot<P>>,
    free_head: u32,
    ack: Vec<AckEntry>,

    cur_tin: usize,
    cur_flow: usize,
    rng: u64,
    last_now: u64,
    autorate: Autorate,
    stats: CakeStats,
}

#[inline]
fn wyrand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0xa076_1d64_78bd_642f);
    let t = u128::from(*state) * u128::from(*state ^ 0xe703_7ed1_a0b4_28db);
    (t as u64) ^ ((t >> 64) as u64)
}

/// `flow_quantum / load` in bytes, with `dither` (a random u16, or 0) added before the
/// shift to avoid accumulating round-off (sch_cake.c's `quantum_div` refill).
#[inline(always)]
fn scaled_quantum(flow_quantum: u16, load: u16, dither: u32) -> i32 {
    let div = u32::from(QUANTUM_DIV[usize::from(load) % QUANTUM_DIV_LEN]);
    ((u32::from(flow_quantum) * div + dither) >> 16) as i32
}

/// `x / q` for a tin quantum: a shift for the power-of-two quanta of every mode but
/// diffserv8 and precedence, whose 7/8 steps need the division.
#[inline(always)]
fn div_quantum(x: u32, q: u32) -> u32 {
    if q.is_power_of_two() {
        x >> q.trailing_zeros()
    } else {
        x / q
    }
}

/// [`Cake::host_load`] over one tin's bulk counts `(source, destination)`: the larger count
/// of `f`'s hosts that `dsrc` and `ddst` say count, 0 when neither does.
#[inline(always)]
fn host_load_in(
    f: &Flow,
    (src_bulk, dst_bulk): (&[u16; FLOWS_PER_TIN], &[u16; FLOWS_PER_TIN]),
    dsrc: bool,
    ddst: bool,
) -> u16 {
    let mut load = 0u16;
    if dsrc {
        load = load.max(src_bulk[usize::from(f.srchost) % FLOWS_PER_TIN]);
    }
    if ddst {
        load = load.max(dst_bulk[usize::from(f.dsthost) % FLOWS_PER_TIN]);
    }
    load
}

/// The tin of global flow id `fid`, reduced modulo `MAX_TINS` (a no-op for a valid id) so
/// that per-tin arrays index it without a bounds check.
#[inline(always)]
fn tin_of(fid: usize) -> usize {
    (fid / FLOWS_PER_TIN) % MAX_TINS
}

#[inline]
fn clamp_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl<P: Packet> Cake<P> {
    /// Creates an instance with every table preallocated: 8 tins × 1024 flows and a packet
    /// slab of `packet_limit + 1` slots.
    ///
    /// # Errors
    /// Whatever [`CakeConfig::validate`] rejects.
    pub fn new(config: &CakeConfig) -> Result<Cake<P>, ConfigError> {
        config.validate()?;
        let mut cake = Cake {
            config: config.clone(),
            tin_cnt: 1,
            tin_index: diffserv_table(config.diffserv),
            tin_order: tin_order(config.diffserv),
            tin_names: diffserv::tin_names(config.diffserv),
            dsrc: false,
            ddst: false,
            overhead: Overhead::default(),
            ingress: false,
            ack_mode: AckFilterMode::Off,
            rate_bps: 0,
            rate: RateNs::default(),
            time_next: Clock::default(),
            failsafe_next: 0,
            buffer_used: 0,
            buffer_limit: 0,
            qlen: 0,
            backlog: 0,
            tins: Default::default(),
            turns: Default::default(),
            flows: FlowTable::new(Flow::default()),
            links: FlowTable::new(Link::default()),
            tags: FlowTable::new(0),
            hosts: FlowTable::new(Host::default()),
            src_bulk: FlowTable::new(0),
            dst_bulk: FlowTable::new(0),
            heap: OverflowHeap::new(ALL_FLOWS),
            overflow_timeout: 0,
            slots: Vec::new(),
            free_head: NIL,
            ack: Vec::new(),
            cur_tin: 0,
            cur_flow: 0,
            rng: config.seed,
            last_now: 0,
            autorate: Autorate::default(),
            stats: CakeStats::new(),
        };
        cake.apply_config();
        Ok(cake)
    }

    /// Applies a full new configuration at this (always safe) point between calls.
    ///
    /// Unlike [`Qdisc::set_rate`] this recomputes everything: tin tables, COBALT
    /// parameters, memory limit, overhead. Tins at or above the new tin count are purged
    /// (their packets counted as `Overflow` drops); the cursors are kept when still valid.
    ///
    /// # Errors
    /// Whatever [`CakeConfig::validate`] rejects; the instance is then unchanged.
    pub fn reconfigure(&mut self, config: &CakeConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let old_mode = self.config.flow_mode;
        self.config = config.clone();
        self.apply_config();
        for t in self.tin_cnt..MAX_TINS {
            self.purge_tin(t);
        }
        if old_mode != config.flow_mode {
            self.recount_hosts();
        }
        Ok(())
    }

    fn apply_config(&mut self) {
        let c = &self.config;
        self.tin_cnt = tin_count(c.diffserv);
        self.tin_index = diffserv_table(c.diffserv);
        self.tin_order = tin_order(c.diffserv);
        self.tin_names = diffserv::tin_names(c.diffserv);
        let mode = c.flow_mode as u8;
        self.dsrc = mode & 5 == 5;
        self.ddst = mode & 6 == 6;
        self.overhead = Overhead {
            compensate: !c.raw,
            overhead: c.overhead,
            mpu: c.mpu,
            atm: c.atm,
        };
        self.ingress = c.ingress;
        self.ack_mode = c.ack_filter;
        self.stats.tin_count = self.tin_cnt;
        let want = c.packet_limit as usize + 1;
        self.slots
            .reserve_exact(want.saturating_sub(self.slots.len()));
        while self.slots.len() < want {
            let i = self.slots.len() as u32;
            self.slots.push(Slot {
                pkt: None,
                next: self.free_head,
                len: 0,
                adj_len: 0,
                footprint: 0,
                enqueue_ns: 0,
            });
            self.free_head = i;
        }
        if c.ack_filter != AckFilterMode::Off {
            self.ack.resize(self.slots.len(), AckEntry::default());
        } else {
            self.ack = Vec::new();
        }
        if self.cur_tin >= self.tin_cnt {
            self.cur_tin = 0;
        }
        let rate = c.rate.bytes_per_sec();
        self.autorate.avg_peak_bandwidth = rate;
        self.stats.capacity_estimate = rate;
        self.configure_rates(rate, false);
    }

    /// Sets every tin's rate and, unless `rate_only`, its COBALT parameters and flow
    /// quantum, plus the memory limit (sch_cake.c `cake_configure_rates` after a3729e0df005:
    /// never purges, never moves cursors).
    fn configure_rates(&mut self, rate: u64, rate_only: bool) {
        let was_unlimited = self.rate.is_unlimited();
        let shares = diffserv::tin_shares(self.config.diffserv, rate);
        let mtu = u64::from(self.config.mtu);
        for (t, share) in shares.iter().enumerate().take(self.tin_cnt) {
            let tin = &mut self.tins[t];
            tin.rate = RateNs::new(share.threshold_bytes_per_sec);
            tin.clock.reset_fraction();
            let st = &mut self.stats.tins[t];
            st.threshold_rate = share.threshold_bytes_per_sec;
            if rate_only {
                continue;
            }
            self.turns[t].quantum = share.tin_quantum;
            tin.flow_quantum = if share.threshold_bytes_per_sec == 0 {
                1514
            } else {
                (share.threshold_bytes_per_sec >> 12).clamp(300, 1514) as u16
            };
            let mtu_time = tin.rate.duration_ns(mtu);
            tin.cparams =
                CobaltParams::new(self.config.target_ns, self.config.interval_ns, mtu_time);
            st.target_us = tin.cparams.target_ns / 1000;
            st.interval_us = tin.cparams.interval_ns / 1000;
            st.flow_quantum = u32::from(tin.flow_quantum);
        }
        if !rate_only {
            let mtu_time = self.tins[0].cparams.mtu_time_ns;
            for tin in &mut self.tins[self.tin_cnt..] {
                tin.cparams.mtu_time_ns = mtu_time;
            }
        }
        self.rate_bps = rate;
        self.rate = self.tins[0].rate;
        self.time_next.reset_fraction();
        if was_unlimited && !self.rate.is_unlimited() {
            // Coming out of unlimited mode the clocks are stale; without this the shaper
            // would let out a burst worth the whole unshaped period.
            let now = self.last_now;
            if self.time_next.next_ns < now {
                self.time_next.set(now);
                self.failsafe_next = now;
            }
            for tin in &mut self.tins {
                if tin.clock.next_ns < now {
                    tin.clock.set(now);
                }
            }
        }
        if !rate_only {
            self.buffer_limit = self.compute_buffer_limit();
            self.stats.memory_limit = self.buffer_limit;
        }
    }

    fn compute_buffer_limit(&self) -> u64 {
        self.config.memory_limit_at(self.rate_bps)
    }

    /// Empties tin `t`: drops its packets and returns its flows and hosts to rest.
    fn purge_tin(&mut self, t: usize) {
        let base = t * FLOWS_PER_TIN;
        for fid in base..base + FLOWS_PER_TIN {
            while let Some(s) = self.pop_head(t, fid) {
                let len = self.slots[s as usize].len;
                self.release_slot(s);
                self.stats.count_drop(DropReason::Overflow, u64::from(len));
                self.stats.tins[t].dropped_packets += 1;
                self.stats.purged_packets += 1;
            }
            self.links[fid] = Link::default();
            let rec_inv_sqrt = self.flows[fid].cv.rec_inv_sqrt;
            self.flows[fid] = Flow::default();
            self.flows[fid].cv.rec_inv_sqrt = rec_inv_sqrt;
        }
        self.src_bulk.tin_mut(t).fill(0);
        self.dst_bulk.tin_mut(t).fill(0);
        let tin = &mut self.tins[t];
        tin.lists = Default::default();
        self.turns[t] = TinTurn {
            quantum: self.turns[t].quantum,
            ..TinTurn::default()
        };
        let st = &mut self.stats.tins[t];
        st.sparse_flows = 0;
        st.bulk_flows = 0;
        st.decaying_flows = 0;
        st.unresponsive_flows = 0;
        st.backlog_bytes = 0;
        self.overflow_timeout = 0;
    }

    /// Recomputes host bulk counts after a flow-mode change.
    fn recount_hosts(&mut self) {
        self.src_bulk.fill(0);
        self.dst_bulk.fill(0);
        for fid in 0..ALL_FLOWS {
            if self.flows[fid].set == SET_BULK {
                self.inc_host_bulk(fid);
            }
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &CakeConfig {
        &self.config
    }

    /// The statistics.
    pub fn stats(&self) -> &CakeStats {
        &self.stats
    }

    /// The names of the tins in use, indexed by tin.
    pub fn tin_names(&self) -> &'static [&'static str] {
        self.tin_names
    }

    /// The display order of the tins (what a mark override of `n` selects: `order[n-1]`).
    pub fn tin_order(&self) -> &'static [usize] {
        self.tin_order
    }

    /// The shaping rate in force now: the configured rate, or what the last
    /// [`Qdisc::set_rate`] or autorate set.
    pub fn current_rate(&self) -> Rate {
        Rate::from_bytes_per_sec(self.rate_bps)
    }

    /// The dequeue cursors `(cur_tin, cur_flow)`, for tests that prove a rate change
    /// leaves them alone.
    pub fn cursors(&self) -> (usize, usize) {
        (self.cur_tin, self.cur_flow)
    }

    /// Bytes this instance allocated up front apart from the packets themselves: flow, tag,
    /// host and heap tables, and the delay histograms. The packet slab (slot metadata plus
    /// the packets, `packet_limit + 1` slots) is [`Cake::slab_bytes`].
    pub fn preallocated_bytes(&self) -> usize {
        use std::mem::size_of;
        let hist: usize = self
            .stats
            .tins
            .iter()
            .map(|t| t.delay_histogram.distinct_values() * size_of::<u64>())
            .sum();
        size_of::<Self>()
            + self.flows.len() * size_of::<Flow>()
            + self.links.len() * size_of::<Link>()
            + self.tags.len() * size_of::<u32>()
            + self.hosts.len() * size_of::<Host>()
            + (self.src_bulk.len() + self.dst_bulk.len()) * size_of::<u16>()
            + self.heap.bytes()
            + self.ack.capacity() * size_of::<AckEntry>()
            + hist
    }

    /// Bytes of the packet slab: `packet_limit + 1` slots of queue metadata and packet.
    pub fn slab_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot<P>>()
    }

    #[inline]
    fn clamp_now(&mut self, now: u64) -> u64 {
        if now < self.last_now {
            cold_path();
            self.stats.clock_clamps += 1;
            self.last_now
        } else {
            self.last_now = now;
            now
        }
    }

    #[inline]
    fn next_rand(&mut self) -> u64 {
        wyrand(&mut self.rng)
    }

    /// Picks the tin (sch_cake.c `cake_select_tin`).
    #[inline]
    fn select_tin(&self, meta: &PacketMeta) -> usize {
        // No shortcut for one tin: besteffort's tables map everything to tin 0 anyway.
        let mask = self.config.fwmark_mask;
        if mask != 0 {
            // The fwmark override is the rare configuration; keep the DSCP path straight.
            cold_path();
            let mark = (meta.mark & mask) >> mask.trailing_zeros();
            if mark >= 1 && (mark as usize) <= self.tin_cnt {
                return self.tin_order[mark as usize - 1] % MAX_TINS;
            }
        }
        let t = usize::from(self.tin_index[usize::from(meta.dscp & 63)]);
        // Reduced modulo MAX_TINS (a no-op: t < tin_cnt <= MAX_TINS) so that the compiler
        // sees it in bounds and drops the checks of every per-tin table the enqueue indexes.
        if t >= self.tin_cnt {
            0
        } else {
            t % MAX_TINS
        }
    }

    /// The flow hash under the current mode, and whether `l4_hash` was reused.
    #[inline(always)]
    fn hash_of(&self, meta: &PacketMeta) -> (u32, bool) {
        let mode = self.config.flow_mode as u8;
        let seed = self.config.seed;
        if mode & 4 != 0 {
            if let Some(h) = meta.l4_hash {
                if !(self.config.nat && meta.keys_rewritten) {
                    return (h, true);
                }
            }
            return (flow_hash(&meta.keys, seed), false);
        }
        // Host-only modes (and flowblind) are the rare configurations.
        cold_path();
        let mut h = 0;
        if mode & 1 != 0 {
            h ^= host_hash(&meta.keys, seed, false);
        }
        if mode & 2 != 0 {
            h ^= host_hash(&meta.keys, seed, true);
        }
        (h, false)
    }

    /// Where `meta` would go, without changing anything (for `cakewalk explain`).
    pub fn classify(&self, meta: &PacketMeta) -> Classification {
        let tin = self.select_tin(meta);
        let (hash, used_l4_hash) = self.hash_of(meta);
        let base = tin * FLOWS_PER_TIN;
        let mut c = Classification {
            tin,
            tin_name: self.tin_names.get(tin).copied().unwrap_or("?"),
            flow_hash: hash,
            used_l4_hash,
            flow: 0,
            src_host: None,
            dst_host: None,
        };
        if self.config.flow_mode == FlowMode::Flowblind {
            return c;
        }
        let i = (hash as usize) % FLOWS_PER_TIN;
        let outer = i - i % SET_WAYS;
        let ways = (0..SET_WAYS).map(|k| outer + (i % SET_WAYS + k) % SET_WAYS);
        let flow = ways
            .clone()
            .find(|&j| self.tags[base + j] == hash)
            .or_else(|| ways.clone().find(|&j| self.flows[base + j].set == SET_NONE))
            .unwrap_or(i);
        c.flow = flow;
        let f = &self.flows[base + flow];
        let reuse = self.tags[base + flow] == hash && f.set != SET_NONE;
        let host = |h: u32, dst: bool| -> usize {
            let i = (h as usize) % FLOWS_PER_TIN;
            let outer = i - i % SET_WAYS;
            let ways = (0..SET_WAYS).map(|k| outer + (i % SET_WAYS + k) % SET_WAYS);
            let tag = |j: usize| {
                let e = &self.hosts[base + j];
                if dst {
                    (e.dst_tag, self.dst_bulk[base + j])
                } else {
                    (e.src_tag, self.src_bulk[base + j])
                }
            };
            ways.clone()
                .find(|&j| tag(j).0 == h)
                .or_else(|| ways.clone().find(|&j| tag(j).1 == 0))
                .unwrap_or(i)
        };
        if self.dsrc {
            c.src_host = Some(if reuse {
                usize::from(f.srchost)
            } else {
                host(host_hash(&meta.keys, self.config.seed, false), false)
            });
        }
        if self.ddst {
            c.dst_host = Some(if reuse {
                usize::from(f.dsthost)
            } else {
                host(host_hash(&meta.keys, self.config.seed, true), true)
            });
        }
        c
    }

    /// The set-associative lookup with host allocation (sch_cake.c `cake_hash`). Returns
    /// the global flow id.
    #[inline(always)]
    fn lookup(&mut self, tin: usize, meta: &PacketMeta) -> usize {
        let base = tin * FLOWS_PER_TIN;
        if self.config.flow_mode == FlowMode::Flowblind {
            return base;
        }
        let (hash, _) = self.hash_of(meta);
        let i = (hash as usize) % FLOWS_PER_TIN;
        if self.tags[base + i] == hash && self.flows[base + i].set != SET_NONE {
            self.stats.tins[tin].way_directs += 1;
            return base + i;
        }
        let inner = i % SET_WAYS;
        let outer = base + i - inner;
        let mut allocate = false;
        let mut chosen = None;
        for n in 0..SET_WAYS {
            let j = outer + (inner + n) % SET_WAYS;
            if self.tags[j] == hash {
                if n != 0 {
                    self.stats.tins[tin].way_indirect_hits += 1;
                }
                if self.flows[j].set == SET_NONE {
                    allocate = true;
                }
                chosen = Some(j);
                break;
            }
        }
        if chosen.is_none() {
            for n in 0..SET_WAYS {
                let j = outer + (inner + n) % SET_WAYS;
                if self.flows[j].set == SET_NONE {
                    self.stats.tins[tin].way_misses += 1;
                    allocate = true;
                    chosen = Some(j);
                    break;
                }
            }
        }
        let fid = match chosen {
            Some(j) => j,
            None => {
                // Every way busy with another flow: share the home bucket.
                self.stats.tins[tin].way_collisions += 1;
                allocate = true;
                let j = outer + inner;
                if self.flows[j].set == SET_BULK {
                    self.dec_host_bulk(j);
                }
                j
            }
        };
        self.tags[fid] = hash;
        if allocate {
            if self.dsrc {
                let h = host_hash(&meta.keys, self.config.seed, false);
                let idx = self.alloc_host(base, h, false);
                self.flows[fid].srchost = idx as u16;
                if self.flows[fid].set == SET_BULK {
                    self.src_bulk[base + idx] += 1;
                }
            }
            if self.ddst {
                let h = host_hash(&meta.keys, self.config.seed, true);
                let idx = self.alloc_host(base, h, true);
                self.flows[fid].dsthost = idx as u16;
                if self.flows[fid].set == SET_BULK {
                    self.dst_bulk[base + idx] += 1;
                }
            }
        }
        fid
    }

    /// Finds or takes a host entry for `h` in the tin at `base`; returns its index in the
    /// tin.
    fn alloc_host(&mut self, base: usize, h: u32, dst: bool) -> usize {
        let i = (h as usize) % FLOWS_PER_TIN;
        let inner = i % SET_WAYS;
        let outer = i - inner;
        let get = |j: usize| {
            let e = &self.hosts[base + j];
            if dst {
                (e.dst_tag, self.dst_bulk[base + j])
            } else {
                (e.src_tag, self.src_bulk[base + j])
            }
        };
        for n in 0..SET_WAYS {
            let j = outer + (inner + n) % SET_WAYS;
            if get(j).0 == h {
                return j;
            }
        }
        let mut pick = i;
        for n in 0..SET_WAYS {
            let j = outer + (inner + n) % SET_WAYS;
            if get(j).1 == 0 {
                pick = j;
                break;
            }
        }
        let e = &mut self.hosts[base + pick];
        if dst {
            e.dst_tag = h;
        } else {
            e.src_tag = h;
        }
        pick
    }

    #[inline]
    fn inc_host_bulk(&mut self, fid: usize) {
        let base = fid - fid % FLOWS_PER_TIN;
        let f = self.flows[fid];
        if self.dsrc {
            let h = &mut self.src_bulk[base + usize::from(f.srchost)];
            *h = h.saturating_add(1);
        }
        if self.ddst {
            let h = &mut self.dst_bulk[base + usize::from(f.dsthost)];
            *h = h.saturating_add(1);
        }
    }

    #[inline]
    fn dec_host_bulk(&mut self, fid: usize) {
        let base = fid - fid % FLOWS_PER_TIN;
        let f = self.flows[fid];
        if self.dsrc {
            let h = &mut self.src_bulk[base + usize::from(f.srchost)];
            *h = h.saturating_sub(1);
        }
        if self.ddst {
            let h = &mut self.dst_bulk[base + usize::from(f.dsthost)];
            *h = h.saturating_sub(1);
        }
    }

    /// The host-scaled quantum of a flow, `flow_quantum / load`, with `dither` (a random
    /// u16, or 0) added before the shift to avoid accumulating round-off.
    #[inline(always)]
    fn flow_quantum(&self, fid: usize, dither: u32) -> i32 {
        let tin = tin_of(fid);
        let load = self.host_load(fid, self.dsrc, self.ddst);
        scaled_quantum(self.tins[tin].flow_quantum, load, dither)
    }

    /// The larger bulk count of flow `fid`'s source and destination hosts, those that
    /// `dsrc` and `ddst` say count (0 when neither counts; [`QUANTUM_DIV`] reads 0 as 1).
    #[inline(always)]
    fn host_load(&self, fid: usize, dsrc: bool, ddst: bool) -> u16 {
        let t = tin_of(fid);
        let bulk = (self.src_bulk.tin(t), self.dst_bulk.tin(t));
        host_load_in(&self.flows[fid], bulk, dsrc, ddst)
    }

    // ---- intrusive lists -------------------------------------------------------------

    #[inline(always)]
    fn list_unlink(&mut self, fid: usize) {
        let which = self.flows[fid].list;
        let tin = tin_of(fid);
        // `NO_LIST` is out of range: one check for "on no list" and for the bounds.
        let Some(list) = self.tins[tin].lists.get_mut(usize::from(which)) else {
            return;
        };
        let Link { next, prev } = self.links[fid];
        if prev == NIL16 {
            list.head = next;
        } else {
            self.links[usize::from(prev)].next = next;
        }
        if next == NIL16 {
            list.tail = prev;
        } else {
            self.links[usize::from(next)].prev = prev;
        }
        self.links[fid] = Link::default();
        self.flows[fid].list = NO_LIST;
    }

    #[inline(always)]
    fn list_push_tail(&mut self, fid: usize, which: u8) {
        let tin = tin_of(fid);
        let list = &mut self.tins[tin].lists[usize::from(which)];
        let old_tail = list.tail;
        if old_tail == NIL16 {
            list.head = fid as u16;
        } else {
            self.links[usize::from(old_tail)].next = fid as u16;
        }
        list.tail = fid as u16;
        self.links[fid] = Link {
            next: NIL16,
            prev: old_tail,
        };
        self.flows[fid].list = which;
    }

    #[inline]
    fn list_move_tail(&mut self, fid: usize, which: u8) {
        self.list_unlink(fid);
        self.list_push_tail(fid, which);
    }

    /// [`Cake::list_move_tail`] for a flow known to head its list, as every flow a dequeue
    /// visits does: the unlink needs no `prev` and the flow's list is known.
    #[inline(always)]
    fn list_move_head_to_tail(&mut self, fid: usize, from: u8, to: u8) {
        let tin = tin_of(fid);
        debug_assert_eq!(self.flows[fid].list, from);
        debug_assert_eq!(
            usize::from(self.tins[tin].lists[usize::from(from)].head),
            fid
        );
        let next = self.links[fid].next;
        if from == to && next == NIL16 {
            // The only flow of the list already is its tail.
            return;
        }
        let list = &mut self.tins[tin].lists[usize::from(from)];
        list.head = next;
        if next == NIL16 {
            list.tail = NIL16;
        } else {
            self.links[usize::from(next)].prev = NIL16;
        }
        self.list_push_tail(fid, to);
    }

    // ---- packet slab -----------------------------------------------------------------

    #[inline]
    fn alloc_slot(&mut self) -> Option<u32> {
        let s = self.free_head;
        if s == NIL {
            return None;
        }
        self.free_head = self.slots[s as usize].next;
        Some(s)
    }

    /// Drops the packet in slot `s` (if any) and returns the slot to the free list.
    #[inline]
    fn release_slot(&mut self, s: u32) -> Option<P> {
        let slot = &mut self.slots[s as usize];
        let p = slot.pkt.take();
        slot.next = self.free_head;
        self.free_head = s;
        p
    }

    /// Unlinks the head packet of flow `fid` and updates every backlog counter. The slot
    /// still holds the packet.
    #[inline(always)]
    fn pop_head(&mut self, t: usize, fid: usize) -> Option<u32> {
        debug_assert_eq!(t, tin_of(fid));
        let s = self.flows[fid].head;
        if s == NIL {
            return None;
        }
        let slot = &self.slots[s as usize];
        let (next, len, foot) = (slot.next, slot.len, slot.footprint);
        let f = &mut self.flows[fid];
        f.head = next;
        if next == NIL {
            f.tail = NIL;
        }
        f.backlog -= u64::from(len);
        self.stats.tins[t].backlog_bytes -= u64::from(len);
        self.backlog -= u64::from(len);
        self.buffer_used -= u64::from(foot);
        self.qlen -= 1;
        if self.overflow_timeout != 0 {
            self.heap_flow_shrank(fid);
        }
        Some(s)
    }

    /// Heap upkeep for a flow whose backlog shrank. Out of line: it runs only for 65535
    /// dequeues after an overflow, and inlined into the packet path it cost that path
    /// ~40 instructions per packet in register spills even when it never ran.
    #[cold]
    #[inline(never)]
    fn heap_flow_shrank(&mut self, fid: usize) {
        let flows = &self.flows;
        self.heap.flow_shrank(fid, |f| flows[f].backlog);
    }

    /// Heap upkeep for a flow whose backlog grew; out of line as [`Cake::heap_flow_shrank`].
    #[cold]
    #[inline(never)]
    fn heap_flow_grew(&mut self, fid: usize) {
        let flows = &self.flows;
        self.heap.flow_grew(fid, |f| flows[f].backlog);
    }

    /// Charges `len` adjusted bytes to tin `t` and the global shaper
    /// (sch_cake.c `cake_advance_shaper`). Drops (`drop`) do not advance the failsafe.
    #[inline]
    fn advance_shaper(&mut self, t: usize, len: u32, now: u64, drop: bool) {
        if self.rate.is_unlimited() {
            return;
        }
        let tin = &mut self.tins[t];
        let td = tin.clock.duration(tin.rate, len);
        if tin.clock.next_ns < now {
            tin.clock.next_ns = tin.clock.next_ns.saturating_add(td);
        } else if tin.clock.next_ns < now.saturating_add(td) {
            tin.clock.next_ns = now.saturating_add(td);
        }
        let g = self.time_next.duration(self.rate, len);
        self.time_next.next_ns = self.time_next.next_ns.saturating_add(g);
        if !drop {
            self.failsafe_next = self.failsafe_next.saturating_add(g + g / 2);
        }
    }

    /// Deliberate deviation from sch_cake: bounds how far `time_next_packet` may lag behind
    /// `now` while busy. Like the kernel, the shaper catches up after a short lag (a worker
    /// descheduled for a few ms by a busy machine sends the backlog it owes, so the delivered
    /// rate still equals the configured one; a 2 ms bound measurably cost 15-35 % of the rate
    /// on a loaded 2-core box). Unlike the kernel, whose watchdog never lags much, a userspace
    /// worker can stall for hundreds of ms; releasing all of that credit at line rate would
    /// overshoot the rate in any window that starts after the stall and move the queue into
    /// the next hop's buffer. So the credit is capped at `max(50 ms, 4 MTU times)`: half of
    /// CAKE's default interval, far above scheduler stalls, far below a measurement window.
    #[inline]
    fn bound_catch_up(&mut self, now: u64) {
        let allowance = MAX_CATCH_UP_NS.max(4 * self.rate.duration_ns(u64::from(self.config.mtu)));
        let floor = now.saturating_sub(allowance);
        if self.time_next.next_ns < floor {
            self.time_next.set(floor);
            self.stats.catch_up_clamps += 1;
        }
    }

    /// Drops the head of the fattest flow across all tins (sch_cake.c `cake_drop`).
    /// Returns the dropped bytes, or `None` when the heap was stale and must be rebuilt.
    fn drop_fattest(&mut self, now: u64) -> Option<u64> {
        if self.overflow_timeout == 0 {
            let flows = &self.flows;
            self.heap.rebuild(|f| flows[f].backlog);
        }
        self.overflow_timeout = OVERFLOW_TIMEOUT;
        let fid = self.heap.root();
        let t = tin_of(fid);
        let Some(s) = self.pop_head(t, fid) else {
            self.overflow_timeout = 0;
            return None;
        };
        if self.flows[fid].cv.queue_full(&self.tins[t].cparams, now) {
            self.stats.tins[t].unresponsive_flows += 1;
        }
        let (len, adj) = {
            let slot = &self.slots[s as usize];
            (slot.len, slot.adj_len)
        };
        self.stats.tins[t].dropped_packets += 1;
        self.stats.count_drop(DropReason::Overflow, u64::from(len));
        if self.ingress {
            self.advance_shaper(t, adj, now, true);
        }
        self.release_slot(s);
        Some(u64::from(len))
    }

    fn update_autorate(&mut self, now: u64) {
        let a = &mut self.autorate;
        let interval = now.saturating_sub(a.last_packet_time).min(1_000_000_000);
        let shift = if interval > a.avg_packet_interval {
            2
        } else {
            8
        };
        a.avg_packet_interval = ewma(a.avg_packet_interval, interval, shift);
        a.last_packet_time = now;
        if interval <= a.avg_packet_interval {
            return;
        }
        let window = now.saturating_sub(a.avg_window_begin);
        if window > 0 {
            let b = (u128::from(a.avg_window_bytes) * 1_000_000_000 / u128::from(window))
                .min(u128::from(u64::MAX)) as u64;
            let shift = if b > a.avg_peak_bandwidth { 2 } else { 8 };
            a.avg_peak_bandwidth = ewma(a.avg_peak_bandwidth, b, shift);
        }
        a.avg_window_bytes = 0;
        a.avg_window_begin = now;
        self.stats.capacity_estimate = a.avg_peak_bandwidth;
        // Linux never updates last_reconfig_time, so after the first 250 ms every burst end
        // reconfigures; we keep that.
        if now > a.last_reconfig_time.saturating_add(AUTORATE_HOLDOFF_NS) {
            let rate = ((u128::from(a.avg_peak_bandwidth) * 15) >> 4) as u64;
            let rate = if rate == 0 {
                0
            } else {
                rate.max(MIN_RATE_BYTES_PER_SEC)
            };
            self.configure_rates(rate, false);
        }
    }

    // Inlined into the caller's packet loop: out of line, every packet paid for saving and
    // restoring registers and reloading the fields the caller already held (probe loop
    // -0.8 ns at 1000 B, -1.5 ns at 64 B; the golden digest is unchanged).
    #[inline(always)]
    fn enqueue_inner(&mut self, now: u64, pkt: P, meta: &PacketMeta) -> Enqueued {
        let now = self.clamp_now(now);
        let len = clamp_u32(pkt.len());
        let footprint = clamp_u32(pkt.footprint());
        let t = self.select_tin(meta);
        let fid = self.lookup(t, meta);

        // Ensure the shaper state is not stale after an idle period. Unlimited, nothing
        // reads the clocks, and leaving unlimited mode brings them up to date.
        if !self.rate.is_unlimited() && self.stats.tins[t].backlog_bytes == 0 {
            let tin = &mut self.tins[t];
            if tin.clock.next_ns < now {
                tin.clock.set(now);
            }
            if self.qlen == 0 {
                if self.time_next.next_ns < now {
                    self.time_next.set(now);
                    self.failsafe_next = now;
                } else if self.time_next.next_ns > now && self.failsafe_next > now {
                    self.stats.overlimits += 1;
                }
            }
        }
        let st = &mut self.stats.tins[t];
        st.max_skblen = st.max_skblen.max(len);
        let l2 = u32::from(meta.l2_len);
        let (adj, netlen) = self.overhead.adjust_gso(len, l2, meta.gso_segs);
        self.stats.track_lengths(netlen, adj, l2);

        let Some(s) = self.alloc_slot() else {
            // Unreachable while qlen <= packet_limit < slots; never panic on it.
            self.stats.count_drop(DropReason::Overflow, u64::from(len));
            self.stats.tins[t].dropped_packets += 1;
            return Enqueued {
                dropped_packets: 1,
                dropped_bytes: u64::from(len),
                reason: Some(DropReason::Overflow),
                ack_filtered: 0,
            };
        };
        let ack_info = if self.ack_mode != AckFilterMode::Off {
            pkt.tcp_ack_info()
        } else {
            None
        };
        {
            let slot = &mut self.slots[s as usize];
            slot.pkt = Some(pkt);
            slot.next = NIL;
            slot.len = len;
            slot.adj_len = adj;
            slot.footprint = footprint;
            slot.enqueue_ns = now;
        }
        let f = &mut self.flows[fid];
        if f.tail == NIL {
            f.head = s;
        } else {
            self.slots[f.tail as usize].next = s;
        }
        f.tail = s;
        f.backlog += u64::from(len);
        self.qlen += 1;
        self.buffer_used += u64::from(footprint);
        self.backlog += u64::from(len);
        self.stats.tins[t].backlog_bytes += u64::from(len);

        let mut result = if self.ack_mode != AckFilterMode::Off {
            cold_path();
            self.enqueue_ack_filter(t, fid, s, meta, ack_info, now)
        } else {
            Enqueued::default()
        };

        if self.overflow_timeout != 0 {
            self.heap_flow_grew(fid);
            if result.dropped_packets != 0 {
                // An ACK-filter replacement can leave the flow smaller than before.
                self.heap_flow_shrank(fid);
            }
        }
        if self.config.autorate_ingress {
            cold_path();
            // Only the estimator reads the window's bytes; without it they stay 0.
            self.autorate.avg_window_bytes = self
                .autorate
                .avg_window_bytes
                .saturating_add(u64::from(len));
            self.update_autorate(now);
        } else {
            self.autorate.avg_window_bytes = 0;
            self.autorate.last_packet_time = now;
        }

        // Flow chain state machine.
        let set = self.flows[fid].set;
        if set == SET_NONE || set == SET_DECAYING {
            let st = &mut self.stats.tins[t];
            if set == SET_DECAYING {
                st.decaying_flows -= 1;
            }
            st.sparse_flows += 1;
            self.turns[t].active_flows += 1;
            self.list_move_tail(fid, NEW);
            self.flows[fid].set = SET_SPARSE;
            self.flows[fid].deficit = self.flow_quantum(fid, 0);
        } else if set == SET_SPARSE_WAIT {
            self.flows[fid].set = SET_BULK;
            let st = &mut self.stats.tins[t];
            st.sparse_flows -= 1;
            st.bulk_flows += 1;
            self.inc_host_bulk(fid);
        }

        if self.buffer_used > self.stats.memory_used {
            cold_path();
            self.stats.memory_used = self.buffer_used;
        }
        if self.buffer_used > self.buffer_limit || self.qlen > self.config.packet_limit {
            self.drop_overflow(now, &mut result);
        }
        self.stats.memory_current = self.buffer_used;
        result
    }

    /// The ACK filter's part of an enqueue (packet in slot `s` of flow `fid` in tin `t`):
    /// records the packet's keys and drops the ACK it makes redundant, if any. Out of line,
    /// like [`Cake::drop_overflow`], so that the enqueue's result stays in registers.
    #[inline(never)]
    fn enqueue_ack_filter(
        &mut self,
        t: usize,
        fid: usize,
        s: u32,
        meta: &PacketMeta,
        info: Option<TcpAckInfo>,
        now: u64,
    ) -> Enqueued {
        let mut result = Enqueued::default();
        if let Some(e) = self.ack.get_mut(s as usize) {
            *e = AckEntry {
                keys: meta.keys,
                info,
            };
        }
        if let Some(victim) = self.ack_filter(fid, s) {
            let (vlen, vadj) = {
                let v = &self.slots[victim as usize];
                (v.len, v.adj_len)
            };
            self.release_slot(victim);
            let st = &mut self.stats.tins[t];
            st.acks_dropped_packets += 1;
            st.dropped_packets += 1;
            self.stats
                .count_drop(DropReason::AckFilter, u64::from(vlen));
            if self.ingress {
                self.advance_shaper(t, vadj, now, true);
            }
            result.dropped_packets += 1;
            result.dropped_bytes += u64::from(vlen);
            result.reason = Some(DropReason::AckFilter);
            result.ack_filtered += 1;
        }
        result
    }

    /// Drops from the fattest flows until the queue is within its byte and packet limits
    /// (sch_cake.c's overflow loop), adding the drops to `result`. Out of line: it runs only
    /// over the limits.
    #[cold]
    #[inline(never)]
    fn drop_overflow(&mut self, now: u64, result: &mut Enqueued) {
        let limit = self.config.packet_limit;
        let mut stale = 0;
        while self.buffer_used > self.buffer_limit || self.qlen > limit {
            match self.drop_fattest(now) {
                Some(bytes) => {
                    result.dropped_packets += 1;
                    result.dropped_bytes += bytes;
                    result.reason = Some(DropReason::Overflow);
                }
                None => {
                    stale += 1;
                    if stale > 1 || self.qlen == 0 {
                        break;
                    }
                }
            }
        }
    }

    /// Runs the ACK filter for the packet just appended in slot `trigger` of flow `fid`;
    /// unlinks and returns the victim's slot.
    fn ack_filter(&mut self, fid: usize, trigger: u32) -> Option<u32> {
        let head = self.flows[fid].head;
        if head == trigger {
            return None;
        }
        let slots = &self.slots;
        let ack = &self.ack;
        let order = std::iter::successors(Some(head), |&s| {
            let n = slots[s as usize].next;
            (n != NIL).then_some(n)
        });
        let victim = ack_filter::find_redundant(
            order,
            |s| ack.get(s as usize).copied().unwrap_or_default(),
            trigger,
            self.ack_mode == AckFilterMode::Aggressive,
        )?;
        // Unlink the victim (it is never the tail: the trigger is).
        let vnext = self.slots[victim as usize].next;
        if head == victim {
            self.flows[fid].head = vnext;
        } else {
            let mut s = head;
            while self.slots[s as usize].next != victim {
                s = self.slots[s as usize].next;
                if s == NIL {
                    return None;
                }
            }
            self.slots[s as usize].next = vnext;
        }
        let v = &self.slots[victim as usize];
        let (len, foot) = (u64::from(v.len), u64::from(v.footprint));
        self.flows[fid].backlog -= len;
        self.stats.tins[tin_of(fid)].backlog_bytes -= len;
        self.backlog -= len;
        self.buffer_used -= foot;
        self.qlen -= 1;
        Some(victim)
    }

    fn dequeue_inner(&mut self, now: u64) -> Dequeue<P> {
        let now = self.clamp_now(now);
        let mut first_flow = true;
        // Every visit that does not deliver either refills a deficit, drops a packet or
        // moves an empty flow on, so the loop ends; bound those visits anyway, so that
        // corrupted state can never hang the caller.
        let mut budget = DEQUEUE_VISIT_BUDGET;
        'begin: loop {
            if self.qlen == 0 {
                return Dequeue::Empty;
            }
            if !self.rate.is_unlimited() {
                self.bound_catch_up(now);
            }
            if !self.rate.is_unlimited() && self.time_next.next_ns > now && self.failsafe_next > now
            {
                self.stats.overlimits += 1;
                return Dequeue::NotBefore(self.time_next.next_ns.min(self.failsafe_next));
            }
            // Choose a tin.
            if self.rate.is_unlimited() {
                let mut wrapped = false;
                let mut empty = true;
                // The cursor in a local, stored once: as a field it was stored and the tin
                // count reloaded on every turn, and the walk turns ~4 times per dequeue
                // at 1000 bytes.
                // At most MAX_TINS, visibly, so that `turns[t]` needs no bounds check.
                let tin_cnt = self.tin_cnt.min(MAX_TINS);
                let mut t = self.cur_tin % MAX_TINS;
                loop {
                    let turn = &mut self.turns[t];
                    let active = turn.active_flows > 0;
                    if turn.deficit >= 0 && active {
                        break;
                    }
                    if turn.deficit <= 0 {
                        turn.deficit += i32::from(turn.quantum);
                    }
                    if active {
                        empty = false;
                    }
                    t += 1;
                    if t >= tin_cnt {
                        t = 0;
                        if wrapped {
                            if empty {
                                self.cur_tin = 0;
                                return Dequeue::Empty;
                            }
                            self.skip_drr_rounds();
                        } else {
                            wrapped = true;
                        }
                    }
                }
                self.cur_tin = t;
            } else {
                let mut best_time = i64::MAX;
                let mut best = 0;
                let mut any = false;
                for t in 0..self.tin_cnt {
                    if self.turns[t].active_flows > 0 {
                        let d = self.tins[t].clock.next_ns as i64 - now as i64;
                        if d <= 0 || d <= best_time {
                            best_time = d;
                            best = t;
                            any = true;
                        }
                    }
                }
                self.cur_tin = best;
                if !any {
                    return Dequeue::Empty;
                }
            }
            let t = self.cur_tin % MAX_TINS;
            // The first visit of a dequeue goes to the decaying list's head (sch_cake.c's
            // `first_flow`). Beyond Linux: when that head is empty, has credit and its COBALT
            // state cannot change before `drop_next`, visiting it would only rotate it to the
            // tail; leaving it at the head keeps the list in expiry order and saves a flow
            // visit per dequeue. Decided here, once, so that the visits below run straight
            // (the idle head is the common case, a visit to it the rare one).
            let mut visit_decay_head = false;
            if first_flow {
                let decay_head = self.tins[t].lists[usize::from(DECAY)].head;
                if decay_head != NIL16 {
                    first_flow = false;
                    if !self.decay_visit_is_idle(usize::from(decay_head), now) {
                        cold_path();
                        visit_decay_head = true;
                    }
                }
            }
            // Serve this tin.
            'serve: loop {
                // The heads one by one, never the lists as a whole: list moves store single
                // 16-bit fields, and one wide load over several fresh narrow stores cannot be
                // forwarded from the store buffer (a stall of tens of cycles per visit).
                let lists = &self.tins[t].lists;
                let (new_head, old_head, decay_head) = (
                    lists[usize::from(NEW)].head,
                    lists[usize::from(OLD)].head,
                    lists[usize::from(DECAY)].head,
                );
                let (which, head) = if visit_decay_head {
                    cold_path();
                    visit_decay_head = false;
                    (DECAY, decay_head)
                } else if new_head != NIL16 {
                    (NEW, new_head)
                } else if old_head != NIL16 {
                    (OLD, old_head)
                } else if decay_head != NIL16 {
                    (DECAY, decay_head)
                } else {
                    // Only reachable when the tin's counts and lists disagree: count it.
                    budget -= 1;
                    if budget == 0 {
                        return Dequeue::Empty;
                    }
                    continue 'begin;
                };
                let fid = usize::from(head);
                first_flow = false;
                self.cur_flow = fid % FLOWS_PER_TIN;

                if self.flows[fid].deficit <= 0 {
                    if which == OLD {
                        let Some(left) = self.refill_old_run(t, fid, budget) else {
                            return Dequeue::Empty;
                        };
                        budget = left;
                        continue;
                    }
                    self.leave_sparse_rotation(t, fid);
                    let dither = (self.next_rand() >> 48) as u32;
                    let q = self.flow_quantum(fid, dither);
                    let f = &mut self.flows[fid];
                    f.deficit = f.deficit.saturating_add(q);
                    self.list_move_head_to_tail(fid, which, OLD);
                    budget -= 1;
                    if budget == 0 {
                        return Dequeue::Empty;
                    }
                    continue;
                }

                // Retrieve a packet via the AQM.
                loop {
                    let Some(s) = self.pop_head(t, fid) else {
                        self.flow_went_empty(t, fid, which, now);
                        budget -= 1;
                        if budget == 0 {
                            return Dequeue::Empty;
                        }
                        // Linux goes back to `begin`. While this tin still has flows,
                        // nothing `begin` looks at has changed (no time passed, nothing was
                        // charged, this tin's deficit is still >= 0 and its counts > 0), so
                        // it would pick this tin again: go straight to the flow choice.
                        let turn = &self.turns[t];
                        if self.qlen > 0 && turn.active_flows > 0 && turn.deficit >= 0 {
                            continue 'serve;
                        }
                        continue 'begin;
                    };
                    let (enq, adj, len) = {
                        let slot = &self.slots[s as usize];
                        (slot.enqueue_ns, slot.adj_len, slot.len)
                    };
                    let sojourn = now.saturating_sub(enq);
                    let bulk = if self.ingress {
                        self.stats.tins[t].bulk_flows
                    } else {
                        0
                    };
                    let rand = (self.next_rand() >> 32) as u32;
                    let params = &self.tins[t].cparams;
                    let slot = &mut self.slots[s as usize];
                    let verdict =
                        self.flows[fid]
                            .cv
                            .should_drop(params, now, sojourn, bulk, rand, || {
                                slot.pkt.as_mut().is_some_and(|p| p.set_ce())
                            });
                    // Never drop the last packet of a flow.
                    if verdict != Verdict::Drop || self.flows[fid].head == NIL {
                        let marked = verdict == Verdict::Marked;
                        let head = Popped { slot: s, adj, len };
                        return self.deliver(t, fid, head, now, sojourn, marked);
                    }
                    self.drop_at_dequeue(t, fid, s, adj, len, now);
                    if self.ingress {
                        break;
                    }
                }
            }
        }
    }

    /// Serves a run of deficit refills at the head of tin `t`'s old list, starting with
    /// flow `head` (whose deficit is <= 0), as Linux does them one visit at a time: each
    /// visited flow gets its host-scaled quantum (one random dither each, in visit order)
    /// and moves to the tail, until the head has credit. With the new list empty (the only
    /// way a visit reaches the old list past the first) nothing else can change in between,
    /// so the run walks the list as a ring and rotates it once at the end, instead of
    /// rereading the list heads and relinking every visited flow. With host fairness a
    /// 1000-byte packet takes several refills per flow, so this loop is most of what a bulk
    /// tin costs. Returns the visit budget left, or `None` when it ran out.
    #[inline(never)]
    fn refill_old_run(&mut self, t: usize, head: usize, budget: u32) -> Option<u32> {
        // One loop per host mode, so that each visit reads only the bulk counts its mode
        // keeps and the mode flags take no registers (they were spilled and reloaded on
        // every visit).
        match (self.dsrc, self.ddst) {
            (true, true) => self.refill_old_run_in::<true, true>(t, head, budget),
            (true, false) => self.refill_old_run_in::<true, false>(t, head, budget),
            (false, true) => self.refill_old_run_in::<false, true>(t, head, budget),
            (false, false) => self.refill_old_run_in::<false, false>(t, head, budget),
        }
    }

    /// [`Cake::refill_old_run`] for the host modes `DSRC` and `DDST`.
    #[inline(always)]
    fn refill_old_run_in<const DSRC: bool, const DDST: bool>(
        &mut self,
        t: usize,
        head: usize,
        budget: u32,
    ) -> Option<u32> {
        let t = t % MAX_TINS;
        // What every visit of the run reads, in locals: as fields they were reloaded after
        // each store into the flow tables (the compiler cannot tell those apart from `self`).
        let flow_quantum = self.tins[t].flow_quantum;
        let mut rng = self.rng;
        let mut left = budget;
        let mut fid = head;
        let end = loop {
            // The visits over the tables alone (split borrows), so that no field of `self`
            // is reloaded per visit; a sparse flow leaves the loop to be handled through
            // `self`, then the loop resumes at the same visit.
            let Cake {
                flows,
                links,
                src_bulk,
                dst_bulk,
                ..
            } = &mut *self;
            let (src_bulk, dst_bulk) = (src_bulk.tin(t), dst_bulk.tin(t));
            let end = loop {
                let f = &mut flows[fid];
                if f.set == SET_SPARSE {
                    break None;
                }
                let load = host_load_in(f, (src_bulk, dst_bulk), DSRC, DDST);
                let dither = (wyrand(&mut rng) >> 48) as u32;
                // Cannot overflow: a run visits only flows without credit (deficit <= 0),
                // and a quantum is below 2^16.
                debug_assert!(f.deficit <= 0);
                f.deficit = f
                    .deficit
                    .wrapping_add(scaled_quantum(flow_quantum, load, dither));
                let next = links[fid].next;
                let next = if next == NIL16 {
                    head
                } else {
                    usize::from(next)
                };
                left -= 1;
                if left == 0 {
                    break Some((false, next));
                }
                fid = next;
                if flows[fid].deficit > 0 {
                    break Some((true, fid));
                }
            };
            match end {
                Some(end) => break end,
                // Sparse flows sit on the new list, so this never runs here; kept so that
                // the run is exactly the visit loop whatever the state.
                None => self.leave_sparse_rotation_cold(t, fid),
            }
        };
        let (credit, new_head) = end;
        self.rng = rng;
        if !credit {
            self.cur_flow = fid % FLOWS_PER_TIN;
        }
        self.rotate_old_list(t, head, new_head);
        credit.then_some(left)
    }

    /// [`Cake::leave_sparse_rotation`] out of the refill run's loop, where it never runs.
    #[cold]
    #[inline(never)]
    fn leave_sparse_rotation_cold(&mut self, t: usize, fid: usize) {
        self.leave_sparse_rotation(t, fid);
    }

    /// A sparse flow of tin `t` that ran out of deficit: it turns bulk if it still holds
    /// packets, else waits (sch_cake.c keeps flows with deficits out of the sparse
    /// rotation).
    #[inline(always)]
    fn leave_sparse_rotation(&mut self, t: usize, fid: usize) {
        if self.flows[fid].set != SET_SPARSE {
            return;
        }
        if self.flows[fid].head != NIL {
            let st = &mut self.stats.tins[t];
            st.sparse_flows -= 1;
            st.bulk_flows += 1;
            self.flows[fid].set = SET_BULK;
            self.inc_host_bulk(fid);
        } else {
            self.flows[fid].set = SET_SPARSE_WAIT;
        }
    }

    /// Makes `new_head` the head of tin `t`'s old list (which starts at `head`), keeping
    /// the ring order: the flows before it move to the tail, in order, as if each had been
    /// moved there one by one.
    #[inline(always)]
    fn rotate_old_list(&mut self, t: usize, head: usize, new_head: usize) {
        if new_head == head {
            return;
        }
        let list = &mut self.tins[t].lists[usize::from(OLD)];
        let tail = usize::from(list.tail);
        let new_tail = self.links[new_head].prev;
        list.head = new_head as u16;
        list.tail = new_tail;
        self.links[tail].next = head as u16;
        self.links[head].prev = tail as u16;
        self.links[usize::from(new_tail)].next = NIL16;
        self.links[new_head].prev = NIL16;
    }

    /// Drops the packet in slot `s`, which COBALT chose at dequeue from flow `fid` of tin
    /// `t`. Out of line: rare, and inlined it cost the delivery path registers.
    #[cold]
    #[inline(never)]
    fn drop_at_dequeue(&mut self, t: usize, fid: usize, s: u32, adj: u32, len: u32, now: u64) {
        if self.ingress {
            self.advance_shaper(t, adj, now, true);
            let f = &mut self.flows[fid];
            f.deficit = f.deficit.saturating_sub(adj.min(i32::MAX as u32) as i32);
            let turn = &mut self.turns[t];
            turn.deficit = turn.deficit.saturating_sub(adj.min(i32::MAX as u32) as i32);
        }
        self.stats.tins[t].dropped_packets += 1;
        self.stats.count_drop(DropReason::Aqm, u64::from(len));
        self.release_slot(s);
    }

    /// Fast-forwards the unlimited-mode tin DRR over full rounds that cannot end it. Called
    /// at the start of a round (cursor at tin 0): each round visits every tin once, adding
    /// its quantum when its deficit is <= 0, and the loop ends at the first active tin whose
    /// deficit is >= 0. With 1000-byte packets and bulk's quantum of 64 that takes ~15
    /// rounds; applying all but the last in closed form gives the same deficits.
    fn skip_drr_rounds(&mut self) {
        let mut rounds = u32::MAX;
        for turn in &self.turns[..self.tin_cnt] {
            if turn.active_flows == 0 {
                continue;
            }
            let q = u32::from(turn.quantum.max(1));
            // Visits until this tin's deficit is >= 0 when checked.
            let need = if turn.deficit >= 0 {
                0
            } else {
                div_quantum(turn.deficit.unsigned_abs() + (q - 1), q)
            };
            rounds = rounds.min(need);
        }
        if rounds < 2 || rounds == u32::MAX {
            return;
        }
        let skip = rounds - 1;
        for turn in &mut self.turns[..self.tin_cnt] {
            if turn.deficit > 0 {
                continue;
            }
            let q = u32::from(turn.quantum.max(1));
            // Adds happen while the deficit is <= 0.
            let adds = skip.min(div_quantum(turn.deficit.unsigned_abs(), q) + 1);
            turn.deficit = turn.deficit.saturating_add((adds * q) as i32);
        }
    }

    /// Whether visiting decaying flow `fid` now would change nothing but its list position.
    #[inline]
    fn decay_visit_is_idle(&self, fid: usize, now: u64) -> bool {
        let f = &self.flows[fid];
        f.head == NIL
            && f.deficit > 0
            && f.cv.count == 0
            && f.cv.p_drop == 0
            && now < f.cv.drop_next
    }

    /// A flow was found empty at dequeue, at the head of list `which`: decay it or retire it.
    fn flow_went_empty(&mut self, t: usize, fid: usize, which: u8, now: u64) {
        if self.flows[fid].cv.queue_empty(&self.tins[t].cparams, now) {
            let st = &mut self.stats.tins[t];
            st.unresponsive_flows = st.unresponsive_flows.saturating_sub(1);
        }
        let set = self.flows[fid].set;
        if self.flows[fid].cv.is_decaying(now) {
            self.list_move_head_to_tail(fid, which, DECAY);
            if set == SET_BULK {
                self.stats.tins[t].bulk_flows -= 1;
                self.turns[t].active_flows -= 1;
                self.dec_host_bulk(fid);
                self.stats.tins[t].decaying_flows += 1;
            } else if set == SET_SPARSE || set == SET_SPARSE_WAIT {
                self.stats.tins[t].sparse_flows -= 1;
                self.turns[t].active_flows -= 1;
                self.stats.tins[t].decaying_flows += 1;
            }
            self.flows[fid].set = SET_DECAYING;
        } else {
            self.list_unlink(fid);
            let st = &mut self.stats.tins[t];
            if set == SET_SPARSE || set == SET_SPARSE_WAIT {
                st.sparse_flows -= 1;
                self.turns[t].active_flows -= 1;
            } else if set == SET_BULK {
                st.bulk_flows -= 1;
                self.turns[t].active_flows -= 1;
                self.dec_host_bulk(fid);
            } else {
                st.decaying_flows = st.decaying_flows.saturating_sub(1);
            }
            self.flows[fid].set = SET_NONE;
        }
    }

    #[inline]
    fn deliver(
        &mut self,
        t: usize,
        fid: usize,
        Popped { slot: s, adj, len }: Popped,
        now: u64,
        delay: u64,
        marked: bool,
    ) -> Dequeue<P> {
        let st = &mut self.stats.tins[t];
        st.ecn_marked_packets += u64::from(marked);
        st.avg_delay_ns = ewma(st.avg_delay_ns, delay, 8);
        st.peak_delay_ns = ewma(
            st.peak_delay_ns,
            delay,
            if delay > st.peak_delay_ns { 2 } else { 8 },
        );
        st.base_delay_ns = ewma(
            st.base_delay_ns,
            delay,
            if delay < st.base_delay_ns { 2 } else { 8 },
        );
        st.sent_packets += 1;
        st.sent_bytes += u64::from(len);
        // Sampled per tin (its first packet, then one in DELAY_SAMPLE_EVERY): one counter
        // shared by all tins sampled only one tin when two alternated.
        let tin = &mut self.tins[t];
        if tin.delay_sample_wait == 0 {
            tin.delay_sample_wait = DELAY_SAMPLE_EVERY - 1;
            st.delay_histogram.saturating_record((delay / 1000).max(1));
        } else {
            tin.delay_sample_wait -= 1;
        }
        self.advance_shaper(t, adj, now, false);
        let a = adj.min(i32::MAX as u32) as i32;
        let f = &mut self.flows[fid];
        // Cannot overflow: a flow is served only with credit (deficit > 0) and 0 <= a.
        debug_assert!(f.deficit > 0);
        f.deficit = f.deficit.wrapping_sub(a);
        let turn = &mut self.turns[t];
        turn.deficit = turn.deficit.saturating_sub(a);
        self.overflow_timeout = self.overflow_timeout.saturating_sub(1);
        self.stats.memory_current = self.buffer_used;
        match self.release_slot(s) {
            Some(p) => Dequeue::Packet(p),
            None => Dequeue::Empty,
        }
    }

    /// Checks the internal invariants (counters against lists and queues). Costs a walk
    /// of every flow and packet; meant for tests and fuzzing.
    ///
    /// # Errors
    /// A description of the first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut qlen = 0u64;
        let mut backlog = 0u64;
        let mut used = 0u64;
        for t in 0..MAX_TINS {
            let (mut sparse, mut bulk, mut decaying) = (0u32, 0u32, 0u32);
            let mut tin_backlog = 0u64;
            for fid in t * FLOWS_PER_TIN..(t + 1) * FLOWS_PER_TIN {
                let f = &self.flows[fid];
                let mut s = f.head;
                let mut fb = 0u64;
                let mut last = NIL;
                while s != NIL {
                    let slot = &self.slots[s as usize];
                    if slot.pkt.is_none() {
                        return Err(format!("flow {fid} links an empty slot {s}"));
                    }
                    fb += u64::from(slot.len);
                    used += u64::from(slot.footprint);
                    qlen += 1;
                    last = s;
                    s = slot.next;
                    if qlen > self.slots.len() as u64 {
                        return Err("packet list cycle".into());
                    }
                }
                if last != f.tail {
                    return Err(format!("flow {fid} tail {} != last {last}", f.tail));
                }
                if fb != f.backlog {
                    return Err(format!("flow {fid} backlog {} != {fb}", f.backlog));
                }
                tin_backlog += fb;
                match f.set {
                    SET_SPARSE | SET_SPARSE_WAIT => sparse += 1,
                    SET_BULK => bulk += 1,
                    SET_DECAYING => decaying += 1,
                    _ => {
                        if f.head != NIL {
                            return Err(format!("flow {fid} has packets but no set"));
                        }
                        if f.list != NO_LIST {
                            return Err(format!("flow {fid} is listed with no set"));
                        }
                    }
                }
                if f.set != SET_NONE && f.list == NO_LIST {
                    return Err(format!("active flow {fid} is on no list"));
                }
            }
            let st = &self.stats.tins[t];
            if u32::from(self.turns[t].active_flows) != sparse + bulk {
                return Err(format!(
                    "tin {t} active flows {} != {}",
                    self.turns[t].active_flows,
                    sparse + bulk
                ));
            }
            if (sparse, bulk, decaying) != (st.sparse_flows, st.bulk_flows, st.decaying_flows) {
                return Err(format!(
                    "tin {t} counts {:?} != {:?}",
                    (st.sparse_flows, st.bulk_flows, st.decaying_flows),
                    (sparse, bulk, decaying)
                ));
            }
            if tin_backlog != st.backlog_bytes {
                return Err(format!(
                    "tin {t} backlog {} != {tin_backlog}",
                    st.backlog_bytes
                ));
            }
            backlog += tin_backlog;
            let mut listed = 0;
            for (w, l) in self.tins[t].lists.iter().enumerate() {
                let mut fid = l.head;
                let mut prev = NIL16;
                while fid != NIL16 {
                    let f = &self.flows[usize::from(fid)];
                    let link = self.links[usize::from(fid)];
                    if usize::from(f.list) != w || link.prev != prev {
                        return Err(format!("list {w} of tin {t} broken at flow {fid}"));
                    }
                    listed += 1;
                    if listed > FLOWS_PER_TIN {
                        return Err("flow list cycle".into());
                    }
                    prev = fid;
                    fid = link.next;
                }
                if prev != l.tail {
                    return Err(format!("list {w} of tin {t} tail mismatch"));
                }
            }
            if listed != (sparse + bulk + decaying) as usize {
                return Err(format!("tin {t}: {listed} listed flows vs counts"));
            }
        }
        if qlen != u64::from(self.qlen) {
            return Err(format!("qlen {} != {qlen}", self.qlen));
        }
        if backlog != self.backlog {
            return Err(format!("backlog {} != {backlog}", self.backlog));
        }
        if used != self.buffer_used {
            return Err(format!("buffer_used {} != {used}", self.buffer_used));
        }
        if self.dsrc || self.ddst {
            for t in 0..MAX_TINS {
                let base = t * FLOWS_PER_TIN;
                let mut src = vec![0u32; FLOWS_PER_TIN];
                let mut dst = vec![0u32; FLOWS_PER_TIN];
                for fid in base..base + FLOWS_PER_TIN {
                    if self.flows[fid].set == SET_BULK {
                        src[usize::from(self.flows[fid].srchost)] += 1;
                        dst[usize::from(self.flows[fid].dsthost)] += 1;
                    }
                }
                for h in 0..FLOWS_PER_TIN {
                    let (sb, db) = (self.src_bulk[base + h], self.dst_bulk[base + h]);
                    if self.dsrc && u32::from(sb) != src[h] {
                        return Err(format!("tin {t} src host {h} bulk {} != {}", sb, src[h]));
                    }
                    if self.ddst && u32::from(db) != dst[h] {
                        return Err(format!("tin {t} dst host {h} bulk {} != {}", db, dst[h]));
                    }
                }
            }
        }
        if self.overflow_timeout != 0 {
            self.heap.check(|f| self.flows[f].backlog)?;
        }
        Ok(())
    }
}

impl<P: Packet> Qdisc<P> for Cake<P> {
    fn enqueue(&mut self, now_ns: u64, pkt: P, meta: &PacketMeta) -> Enqueued {
        self.enqueue_inner(now_ns, pkt, meta)
    }

    fn dequeue(&mut self, now_ns: u64) -> Dequeue<P> {
        self.dequeue_inner(now_ns)
    }

    fn len(&self) -> usize {
        self.qlen as usize
    }

    fn backlog_bytes(&self) -> u64 {
        self.backlog
    }

    fn try_bypass(&mut self, now_ns: u64, pkt: &P, meta: &PacketMeta) -> bool {
        if self.qlen != 0 {
            return false;
        }
        let now = now_ns.max(self.last_now);
        if !self.rate.is_unlimited() && now < self.time_next.next_ns {
            return false;
        }
        let now = self.clamp_now(now_ns);
        let t = self.select_tin(meta);
        let len = clamp_u32(pkt.len());
        let l2 = u32::from(meta.l2_len);
        let (adj, netlen) = self.overhead.adjust_gso(len, l2, meta.gso_segs);
        self.stats.track_lengths(netlen, adj, l2);
        let tin = &mut self.tins[t];
        if tin.clock.next_ns < now {
            tin.clock.set(now);
        }
        if self.time_next.next_ns < now {
            self.time_next.set(now);
            self.failsafe_next = now;
        }
        self.advance_shaper(t, adj, now, false);
        let st = &mut self.stats.tins[t];
        st.sent_packets += 1;
        st.sent_bytes += u64::from(len);
        st.max_skblen = st.max_skblen.max(len);
        self.stats.bypassed_packets += 1;
        true
    }

    #[inline]
    fn bypass_burst<'m, I, F>(&mut self, now_ns: u64, pkts: &mut I, sent: F) -> BurstBypass<'m, P>
    where
        I: Iterator<Item = (P, &'m PacketMeta)>,
        F: FnMut(P),
    {
        self.bypass_burst_inner(now_ns, pkts, sent)
    }

    fn set_rate(&mut self, rate: Rate) {
        let bps = rate.bytes_per_sec();
        let bps = if bps == 0 {
            0
        } else {
            bps.max(MIN_RATE_BYTES_PER_SEC)
        };
        self.configure_rates(bps, true);
    }

    fn rate(&self) -> Rate {
        self.config.rate
    }

    /// `Some(t)` while packets are queued and the instance shapes: the time the shaper gate
    /// opens next (`min(time_next_packet, failsafe)`), which may already have passed.
    /// `None` when empty or unlimited (nothing is ever held back then).
    fn next_wakeup(&self) -> Option<u64> {
        if self.qlen == 0 || self.rate.is_unlimited() {
            return None;
        }
        Some(self.time_next.next_ns.min(self.failsafe_next))
    }
}

#[cfg(test)]
mod tests;
