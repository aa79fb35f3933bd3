//! One CAKE instance (Linux `sch_cake`): tins, set-associative flow tables with host
//! fairness, DRR++, COBALT and the time-based shaper, with the overflow heap, ACK filter and
//! autorate (docs/design.md, "The CAKE model"). It does not share a rate between TX queues; that is
//! [`crate::mq`]'s job, which drives a `Cake` through [`Qdisc`].
//!
//! # Layout
//! The state ([`Cake`] and its per-flow and per-tin records) is defined here; its methods
//! are split the way `sch_cake.c` is sectioned, one `impl Cake` block per file:
//! `setup` (`cake_init`, `cake_change`), `classify` (`cake_select_tin`, `cake_hash`),
//! `lists` (the flow lists and the packet slab), `rates` (`cake_configure_rates`,
//! `cake_advance_shaper`, autorate), `enqueue` (`cake_enqueue`, `cake_drop`, the ACK
//! filter's bookkeeping), `dequeue` (`cake_dequeue`), `bypass` (the enqueue bypass of a
//! burst) and `invariants` (the checks tests and fuzzing run).
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
//! With `F = 8 × FLOWS` flows in all (8192 for the link instance, 512 for a subscriber's),
//! enqueue is O(1) apart from the ACK filter (a walk of the flow's queue) and, only after
//! an overflow, O(log F) heap upkeep; an overflow drop after 65535 quiet dequeues rebuilds
//! the heap in O(F). Dequeue is O(tins + flows visited), normally O(1). `set_rate` is
//! O(tins); [`Cake::reset`] is O(F + slab slots) and allocates nothing. Nothing allocates
//! after [`Cake::new`], except `reconfigure` growing the packet slab, turning the ACK filter
//! on or bringing a tin into use (its delay histogram), and, in a compact instance
//! (`FLOWS` below [`FLOWS_PER_TIN`], a subscriber's), an enqueue that finds every slab slot
//! taken: the slab (and the ACK filter's entries) then doubles, up to `packet_limit + 1`
//! slots, so at most log2 of the packet limit times in the instance's life (6 times from 64
//! slots to the default 10241 limit). [`Cake::memory_bytes`] says what an instance holds.
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
//! * **wash** goes through [`Packet::wash_dscp`], after the tin is chosen, as the ECN mark
//!   goes through [`Packet::set_ce`]; passed packets through [`Qdisc::rewrite_passed`].
//! * **Reconfigure to fewer tins** moves the flows of the tins that vanish to the tin their
//!   traffic maps to now (Linux purges them); nothing queued is dropped, and
//!   [`CakeStats::purged_packets`] stays 0.
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
//! * A rate change between two shaped rates rescales the wait still pending on every shaper
//!   clock and the failsafe to the new rate (Linux keeps the times computed at the old
//!   rate: after `2kbit` then `50mbit` nothing leaves for 6 s).

mod ack_filter;
mod bypass;
mod classify;
pub mod cobalt;
mod config;
mod dequeue;
pub mod diffserv;
mod enqueue;
mod hash;
mod heap;
mod invariants;
mod lists;
mod rates;
mod setup;
pub mod shaper;
mod stats;
mod table;

use std::ops::{Index, IndexMut};

use crate::{BurstBypass, Dequeue, Enqueued, Packet, PacketMeta, Qdisc, Rate};

pub use config::{
    AckFilterMode, AtmMode, CakeConfig, ConfigError, DiffservMode, FlowMode, LinkPreset, RttPreset,
    MAX_BURST, MAX_PACKET_LIMIT, MIN_RATE_BYTES_PER_SEC,
};
pub use diffserv::{diffserv_table, diffserv_tin, tin_count, tin_order, MAX_TINS};
pub use hash::{flow_hash, host_hash};
pub use stats::{CakeStats, TinStats, DELAY_HISTOGRAM_MAX_US, DELAY_SAMPLE_EVERY};

use ack_filter::AckEntry;
use cobalt::{CobaltParams, CobaltVars};
use heap::OverflowHeap;
use shaper::{Clock, Overhead, RateNs};
use table::FlowTable;

/// Flow queues per tin of the link-wide instance: the default of [`Cake`]'s `FLOWS`, as in
/// Linux's `CAKE_QUEUES`.
pub const FLOWS_PER_TIN: usize = 1024;
/// Flow queues per tin of a subscriber's instance ([`SubscriberCake`]).
///
/// 64 buckets are 8 sets of [`SET_WAYS`] ways. Two flows share a queue only when more than
/// 8 of a tin's active (queued or decaying) flows hash into one set: with 16 such flows in
/// one tin of one subscriber the chance that any set overflows is 0.03 %, with 20 0.3 %,
/// with 24 1.3 %, with 32 11 % (`tests::subscriber_collision_rates` computes these), and
/// even then only the flows beyond the 8th of that set share. 32 buckets would overflow at
/// 3 % with 16 flows and 16 % with 20; 128 would double the tables. A bucket costs 88
/// bytes over the 8 tins' tables (flow record 64, links 4, tag 4, hosts 8, bulk counts 4,
/// heap 4), so 64 buckets keep the tables at 44 KiB.
pub const SUBSCRIBER_FLOWS_PER_TIN: usize = 64;
/// Ways per set of the set-associative flow and host tables.
pub const SET_WAYS: usize = 8;
/// Packet slots a compact instance (fewer than [`FLOWS_PER_TIN`] flows per tin) starts
/// with; its slab doubles from there when full, up to `packet_limit + 1`.
const COMPACT_FIRST_SLOTS: usize = 64;
/// Slab slots whose freedom [`Cake`] keeps as bits (`free_low`) rather than on its list.
const FREE_LOW_SLOTS: u32 = u64::BITS;
/// Dequeues after an overflow during which the heap is kept up to date.
const OVERFLOW_TIMEOUT: u32 = 65535;
/// Autorate waits this long after a reconfigure before changing the rate again.
const AUTORATE_HOLDOFF_NS: u64 = 250_000_000;
/// Least credit the shaper may bank while busy (see `Cake::bound_catch_up`).
const MAX_CATCH_UP_NS: u64 = 50_000_000;

/// The most the shaper's clock may lead now, whatever [`CakeConfig::burst`] says: 1 ms of
/// the rate in force. A frame at a slow plan takes longer (1514 bytes at 1 Mbit/s is
/// 12 ms), and under a node tree (docs/circuits.md) each circuit whose bucket refilled
/// while it was idle, and whose share others borrowed meanwhile, adds its lead to the
/// node's total: with 200 circuits at 157 kbit/s (a frame every 77 ms) the node delivered
/// 1.0121 times its cap with a whole frame's lead, 1.0066 with this bound and 1.0062
/// without any (`circuits_sim`, over the shared limit).
const MAX_AHEAD_NS: u64 = 1_000_000;

const NIL: u32 = u32::MAX;
const NIL16: u16 = u16::MAX;

/// The set a flow belongs to (sch_cake.c's `CAKE_SET_*`), which decides what its tin
/// counts it as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum FlowSet {
    /// At rest: no packets, on no list, free for the lookup to take.
    None = 0,
    /// On the new list with credit left: a sparse flow.
    Sparse = 1,
    /// A sparse flow that ran out of credit while empty: it stays counted as sparse and
    /// turns bulk if a packet arrives before it empties again.
    SparseWait = 2,
    /// On the old list: a bulk flow, counted in its hosts' bulk counts.
    Bulk = 3,
    /// Empty, on the decaying list while COBALT's drop state relaxes.
    Decaying = 4,
}

/// One of the three flow lists of a tin; a flow on none has `Flow::list == None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum ListId {
    /// Flows that became active and have not used their first quantum.
    New = 0,
    /// Flows that used a quantum and still have packets (or wait for a refill).
    Old = 1,
    /// Empty flows whose COBALT state still decays.
    Decay = 2,
}

impl ListId {
    /// Every list, in index order.
    const ALL: [ListId; 3] = [ListId::New, ListId::Old, ListId::Decay];
}

/// Entries of [`QUANTUM_DIV`]: a power of two above any host's bulk count (at most the
/// flows of its tin, at most [`FLOWS_PER_TIN`] for every allowed `FLOWS`), so that a mask
/// keeps the index in bounds without a clamp. One table serves every instance size.
const QUANTUM_DIV_LEN: usize = 2 * FLOWS_PER_TIN;

/// `65535 / n`: the host-fairness divisor table. A load of 0 (no bulk flow on either host)
/// reads 1's divisor, so that no caller clamps the load to at least 1; loads above the
/// flows of a tin cannot occur (those above 1024 read 1024's divisor).
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
    set: FlowSet,
    list: Option<ListId>,
    /// A copy of the flow's entry in [`Cake`]'s `tags` (in what was padding), so that a
    /// packet that finds its flow in its home way reads this line alone: the tags' line is
    /// read only by the search of the other ways. In a subscriber's cold instance that is
    /// a miss fewer per packet.
    tag: u32,
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
            set: FlowSet::None,
            list: None,
            tag: 0,
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

/// A tin's three flow lists, indexed by [`ListId`].
#[derive(Debug, Clone, Copy, Default)]
struct Lists([List; 3]);

impl Index<ListId> for Lists {
    type Output = List;

    #[inline(always)]
    fn index(&self, which: ListId) -> &List {
        &self.0[which as usize]
    }
}

impl IndexMut<ListId> for Lists {
    #[inline(always)]
    fn index_mut(&mut self, which: ListId) -> &mut List {
        &mut self.0[which as usize]
    }
}

/// Per-tin scheduling state (counters live in [`TinStats`]). `repr(C)`, one line: what an
/// enqueue reads first, the COBALT parameters (read at dequeue) last, and the rate's two
/// parts apart ([`Tin::rate`]) so that no padding is left. In a subscriber's cold instance
/// each line is a miss; at 88 bytes a tin spanned two or three.
#[derive(Debug, Clone, Default)]
#[repr(C, align(64))]
struct Tin {
    lists: Lists,
    flow_quantum: u16,
    /// Deliveries left before the next delay sample (below [`DELAY_SAMPLE_EVERY`]).
    delay_sample_wait: u8,
    /// The scale of the tin's rate, [`RateNs::shft`].
    rate_shft: u8,
    clock: Clock,
    /// The tin's rate in scaled ns per byte, [`RateNs::ns`].
    rate_ns: u64,
    cparams: CobaltParams,
}

const _: () = assert!(DELAY_SAMPLE_EVERY <= 256, "Tin::delay_sample_wait is a u8");

impl Tin {
    /// The tin's rate.
    #[inline(always)]
    fn rate(&self) -> RateNs {
        RateNs {
            ns: self.rate_ns,
            shft: self.rate_shft,
        }
    }

    fn set_rate(&mut self, rate: RateNs) {
        self.rate_ns = rate.ns;
        self.rate_shft = rate.shft;
    }
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

impl<P> Default for Slot<P> {
    fn default() -> Slot<P> {
        Slot {
            pkt: None,
            next: NIL,
            len: 0,
            adj_len: 0,
            footprint: 0,
            enqueue_ns: 0,
        }
    }
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
    /// Flow queue within the tin (`0..FLOWS`, the instance's flows per tin).
    pub flow: usize,
    /// Source host entry within the tin, in dual-srchost and triple-isolate modes.
    pub src_host: Option<usize>,
    /// Destination host entry within the tin, in dual-dsthost and triple-isolate modes.
    pub dst_host: Option<usize>,
}

/// Autorate-ingress estimator state. `repr(C)` with the two fields every enqueue writes
/// first, so that they sit in the instance's hot lines (see [`Cake`]'s layout).
#[derive(Debug, Clone, Default)]
#[repr(C)]
struct Autorate {
    avg_window_bytes: u64,
    last_packet_time: u64,
    avg_packet_interval: u64,
    avg_window_begin: u64,
    avg_peak_bandwidth: u64,
    last_reconfig_time: u64,
}

/// How COBALT's verdicts meet the shaper and the bulk flows, from [`CakeConfig`]'s
/// `ingress` and `round_target` (one byte, so that it shares the first line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
enum AqmMode {
    /// sch_cake.c's egress: the target stands alone.
    #[default]
    Egress,
    /// `ingress`: two MTU times per bulk flow floor the target, and drops are charged to
    /// the shaper (it takes precedence over `round_target`).
    Ingress,
    /// `round_target`: four MTU times per bulk flow floor the target.
    Rounds,
}

/// The configuration values the packet path reads, copied out of [`CakeConfig`] by
/// `apply_config` so that they share the instance's first cache lines (read through the
/// config, they were two more lines per packet on a cold instance).
#[derive(Debug, Clone, Copy, Default)]
struct HotConfig {
    hash_key: u64,
    fwmark_mask: u32,
    packet_limit: u32,
    mtu: u32,
    flow_mode: FlowMode,
    nat: bool,
    autorate_ingress: bool,
    wash: bool,
}

/// One CAKE instance over packets of type `P` with `FLOWS` flow queues per tin (a power of
/// two in `8..=1024`, checked at compile time): [`FLOWS_PER_TIN`] for the link-wide
/// shaper, [`SUBSCRIBER_FLOWS_PER_TIN`] for a subscriber's ([`SubscriberCake`]). Every
/// table is `MAX_TINS * FLOWS` entries, indexed through constant masks. See the module
/// docs for the call protocol.
///
/// # Layout
/// `repr(C)`, in declaration order, cache-line aligned: what every enqueue and dequeue
/// reads comes first and fills five lines (one of them the tin DRR turns), then the tins,
/// the statistics (whose per-packet counters lead each part, see [`CakeStats`]) and the
/// cold rest (`tests::the_fields_every_packet_reads_fill_the_first_five_lines`). A subscriber's instance is cold whenever a packet comes (thousands share a
/// core's caches), so each line the packet path touches is a miss; with the compiler's
/// own order those fields were spread over the whole header.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Cake<P, const FLOWS: usize = FLOWS_PER_TIN> {
    // Line 0.
    qlen: u32,
    /// The first free slot at or above [`FREE_LOW_SLOTS`], linked through `Slot::next`.
    free_head: u32,
    overflow_timeout: u32,
    dsrc: bool,
    ddst: bool,
    aqm: AqmMode,
    ack_mode: AckFilterMode,
    backlog: u64,
    buffer_used: u64,
    buffer_limit: u64,
    last_now: u64,
    failsafe_next: u64,
    rng: u64,
    // Line 1.
    rate: RateNs,
    time_next: Clock,
    /// [`CakeConfig::burst`] as time at the rate in force (0 unlimited): how far the
    /// clock may be ahead of now when a packet leaves.
    ahead_ns: u64,
    cur_tin: u32,
    /// Written, never read (sch_cake.c keeps it for its dump); kept for
    /// [`Cake::cursors`].
    cur_flow: u32,
    tin_cnt: usize,
    tin_index: &'static [u8; 64],
    // Line 2.
    overhead: Overhead,
    flows: FlowTable<Flow, FLOWS>,
    links: FlowTable<Link, FLOWS>,
    tags: FlowTable<u32, FLOWS>,
    hosts: FlowTable<Host, FLOWS>,
    src_bulk: FlowTable<u16, FLOWS>,
    dst_bulk: FlowTable<u16, FLOWS>,
    // Line 3.
    turns: [TinTurn; MAX_TINS],
    // Line 4, and autorate's cold rest.
    /// The packet slab: a boxed slice (two words, where a `Vec` took three) so that
    /// `free_low` fits this line; it grows (rarely, see [`Cake::grow_slab`]) by reallocating.
    slots: Box<[Slot<P>]>,
    /// The free slots among the first [`FREE_LOW_SLOTS`] of the slab, one bit each; the
    /// free slots above them are on the list at `free_head`. A free slot is taken from here
    /// first, lowest first, which needs no load from the slab (popping the list read the
    /// slot's link, a miss in a cold instance that nothing could prefetch for the second
    /// packet of a burst) and keeps a subscriber's few queued packets in a few lines.
    free_low: u64,
    hot: HotConfig,
    autorate: Autorate,

    tins: [Tin; MAX_TINS],
    stats: CakeStats,

    config: CakeConfig,
    tin_order: &'static [usize],
    tin_names: &'static [&'static str],
    rate_bps: u64,
    heap: OverflowHeap,
    ack: Vec<AckEntry>,
}

/// A subscriber's CAKE: [`SUBSCRIBER_FLOWS_PER_TIN`] flows per tin, a packet slab that grows
/// on demand and no delay histograms ([`TinStats::delay_histogram`] stays empty).
pub type SubscriberCake<P> = Cake<P, SUBSCRIBER_FLOWS_PER_TIN>;

impl<P, const FLOWS: usize> Cake<P, FLOWS> {
    /// The latest clock at which a packet may leave at `now`: `now` plus the lead
    /// [`CakeConfig::burst`] allows (0 unless configured). Every check of the shaper's
    /// gate (the dequeue's, the bypass's) compares the clock with this.
    #[inline(always)]
    pub(super) fn send_gate(&self, now: u64) -> u64 {
        now.saturating_add(self.ahead_ns)
    }

    /// When the gate opens for the packets queued now: the earlier of the clock and the
    /// failsafe, less the lead (sch_cake.c's `min(time_next_packet, failsafe)`).
    #[inline(always)]
    pub(super) fn gate_opens_at(&self) -> u64 {
        self.time_next
            .next_ns
            .min(self.failsafe_next)
            .saturating_sub(self.ahead_ns)
    }

    /// Every flow of every tin: the length of each flow table.
    const ALL_FLOWS: usize = MAX_TINS * FLOWS;

    /// A compact instance (a subscriber's) is one of many on a box, most of them idle or
    /// lightly loaded: its packet slab starts at [`COMPACT_FIRST_SLOTS`] and doubles when
    /// full, and it keeps no delay histograms ([`Cake::KEEPS_DELAY_HISTOGRAMS`]). The
    /// link-wide instance preallocates its whole slab.
    pub(super) const COMPACT: bool = FLOWS < FLOWS_PER_TIN;

    /// Whether the tins record sampled sojourn times in [`TinStats::delay_histogram`]: the
    /// link-wide instance's feed the per-tin sojourn percentiles and metrics. A subscriber's
    /// would feed nothing (a circuit reports CAKE's delay EWMAs, which every packet
    /// updates), and in its instance, cold whenever a packet comes, each sample cost two
    /// cache misses (the histogram's header and its count): with one delivery in 16
    /// sampled, a tenth of the circuits' forwarding rate (10 000 circuits, IMIX) and 8.7 KiB
    /// per active instance in diffserv3.
    pub(super) const KEEPS_DELAY_HISTOGRAMS: bool = !Self::COMPACT;

    /// Rejects, at compile time, a `FLOWS` the tables cannot take: whole sets of
    /// [`SET_WAYS`], a power of two for the masks, host bulk counts within
    /// [`QUANTUM_DIV`], and flow ids that fit the `u16` links and heap.
    pub(super) const FLOWS_OK: () = assert!(
        FLOWS.is_power_of_two() && FLOWS >= SET_WAYS && FLOWS <= FLOWS_PER_TIN,
        "Cake's FLOWS must be a power of two in 8..=1024"
    );

    /// Bound on the flow visits of one dequeue that deliver nothing: more than a valid
    /// state can need (every flow refilled, emptied and moved a few times, plus every
    /// packet the queue can hold dropped by COBALT), and a constant so that no dequeue
    /// computes it.
    pub(super) const DEQUEUE_VISIT_BUDGET: u32 =
        4 * Self::ALL_FLOWS as u32 + 2 * MAX_PACKET_LIMIT + 64;
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
fn host_load_in<const FLOWS: usize>(
    f: &Flow,
    (src_bulk, dst_bulk): (&[u16; FLOWS], &[u16; FLOWS]),
    dsrc: bool,
    ddst: bool,
) -> u16 {
    let mut load = 0u16;
    if dsrc {
        load = load.max(src_bulk[usize::from(f.srchost) % FLOWS]);
    }
    if ddst {
        load = load.max(dst_bulk[usize::from(f.dsthost) % FLOWS]);
    }
    load
}

/// The tin of global flow id `fid` in an instance of `FLOWS` flows per tin, reduced modulo
/// `MAX_TINS` (a no-op for a valid id) so that per-tin arrays index it without a bounds
/// check.
#[inline(always)]
fn tin_of<const FLOWS: usize>(fid: usize) -> usize {
    (fid / FLOWS) % MAX_TINS
}

#[inline]
fn clamp_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl<P: Packet, const FLOWS: usize> Qdisc<P> for Cake<P, FLOWS> {
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

    #[inline]
    fn rewrite_passed(&self, pkts: &mut [P], _metas: &[PacketMeta]) {
        if self.hot.wash {
            pkts.iter_mut().for_each(Packet::wash_dscp);
        }
    }

    #[inline]
    fn bypass_burst(&mut self, now_ns: u64, pkts: &[P], metas: &[PacketMeta]) -> BurstBypass {
        self.bypass_burst_inner(now_ns, pkts, metas)
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
        Some(self.gate_opens_at())
    }
}

#[cfg(test)]
mod tests;
