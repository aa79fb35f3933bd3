//! Building and reconfiguring a [`Cake`] (sch_cake.c `cake_init` and `cake_change`): the
//! preallocated tables and packet slab, applying a configuration, moving the packets of the
//! tins a reconfigure drops to the tins that carry their traffic now, and the read-only
//! accessors.

use super::ack_filter::AckEntry;
use super::diffserv::{self, diffserv_table, tin_count, tin_order, MAX_TINS};
use super::heap::OverflowHeap;
use super::shaper::{Clock, Overhead, RateNs};
use super::stats::{delay_histogram, is_unused_histogram};
use super::table::FlowTable;
use super::AqmMode;
use super::{
    AckFilterMode, Autorate, Cake, CakeConfig, CakeStats, ConfigError, Flow, FlowSet, Host,
    HotConfig, Link, ListId, Slot, TinTurn, COMPACT_FIRST_SLOTS, FREE_LOW_SLOTS, NIL,
};
use crate::{DropReason, Packet, Rate};

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    /// Creates an instance with every table preallocated: 8 tins × `FLOWS` flows and a packet
    /// slab of `packet_limit + 1` slots.
    ///
    /// # Errors
    /// Whatever [`CakeConfig::validate`] rejects.
    pub fn new(config: &CakeConfig) -> Result<Cake<P, FLOWS>, ConfigError> {
        #[allow(clippy::let_unit_value)]
        let () = Self::FLOWS_OK;
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
            aqm: AqmMode::Egress,
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
            heap: OverflowHeap::new(Self::ALL_FLOWS),
            overflow_timeout: 0,
            slots: Box::default(),
            free_low: 0,
            free_head: NIL,
            ack: Vec::new(),
            ahead_ns: 0,
            cur_tin: 0,
            cur_flow: 0,
            rng: config.seed,
            last_now: 0,
            hot: HotConfig::default(),
            autorate: Autorate::default(),
            stats: CakeStats::new(),
        };
        cake.apply_config();
        Ok(cake)
    }

    /// Applies a full new configuration at this (always safe) point between calls.
    ///
    /// Unlike [`Qdisc::set_rate`](crate::Qdisc::set_rate) this recomputes everything: tin tables, COBALT
    /// parameters, memory limit, overhead. Nothing queued is dropped: the flows of tins at
    /// or above the new tin count move, packets, order and enqueue times kept, to the tin
    /// their traffic maps to now (`Cake::move_vanished_tin`); the cursors are kept when
    /// still valid.
    ///
    /// # Errors
    /// Whatever [`CakeConfig::validate`] rejects; the instance is then unchanged.
    pub fn reconfigure(&mut self, config: &CakeConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let old_mode = self.config.flow_mode;
        let old_index = self.tin_index;
        let old_tin_cnt = self.tin_cnt;
        self.config = config.clone();
        self.apply_config();
        for t in self.tin_cnt..old_tin_cnt.max(self.tin_cnt) {
            self.move_vanished_tin(t, old_index);
        }
        for t in self.tin_cnt..MAX_TINS {
            self.purge_tin(t);
        }
        if old_mode != config.flow_mode {
            self.recount_hosts();
        }
        Ok(())
    }

    pub(super) fn apply_config(&mut self) {
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
        self.aqm = if c.ingress {
            AqmMode::Ingress
        } else if c.round_target {
            AqmMode::Rounds
        } else {
            AqmMode::Egress
        };
        self.ack_mode = c.ack_filter;
        self.hot = HotConfig {
            hash_key: c.hash_key,
            fwmark_mask: c.fwmark_mask,
            packet_limit: c.packet_limit,
            mtu: c.mtu,
            flow_mode: c.flow_mode,
            nat: c.nat,
            autorate_ingress: c.autorate_ingress,
            wash: c.wash,
        };
        self.stats.tin_count = self.tin_cnt;
        let rate = c.rate.bytes_per_sec();
        let slab = c.packet_limit as usize + 1;
        let slab = if Self::COMPACT {
            slab.min(self.slots.len().max(COMPACT_FIRST_SLOTS))
        } else {
            slab
        };
        if self.ack_mode == AckFilterMode::Off {
            self.ack = Vec::new();
        }
        self.grow_slab_to(slab);
        for t in 0..self.tin_cnt {
            let h = &mut self.stats.tins[t].delay_histogram;
            if Self::KEEPS_DELAY_HISTOGRAMS && is_unused_histogram(h) {
                *h = delay_histogram(2);
            }
        }
        if self.cur_tin as usize >= self.tin_cnt {
            self.cur_tin = 0;
        }
        self.autorate.avg_peak_bandwidth = rate;
        self.stats.capacity_estimate = rate;
        self.configure_rates(rate, false);
    }

    /// Grows the packet slab (and the ACK filter's entries, when it is on) to `n` slots,
    /// each new slot free (a bit of `free_low` or on the free list); never shrinks it.
    fn grow_slab_to(&mut self, n: usize) {
        if self.slots.len() < n {
            let mut slots = std::mem::take(&mut self.slots).into_vec();
            slots.reserve_exact(n - slots.len());
            while slots.len() < n {
                let i = slots.len() as u32;
                slots.push(Slot::default());
                mark_free(&mut slots, i, &mut self.free_low, &mut self.free_head);
            }
            self.slots = slots.into_boxed_slice();
        }
        if self.ack_mode != AckFilterMode::Off && self.ack.len() < self.slots.len() {
            self.ack
                .reserve_exact(self.slots.len().saturating_sub(self.ack.len()));
            self.ack.resize(self.slots.len(), AckEntry::default());
        }
    }

    /// A free slot after doubling the slab of a compact instance, when every slot is taken
    /// and the slab is below `packet_limit + 1` slots (so at most log2 of the limit times
    /// in an instance's life, never for most packets); `None` when the slab is full size.
    #[cold]
    #[inline(never)]
    pub(super) fn grow_slab(&mut self) -> Option<u32> {
        let full = self.config.packet_limit as usize + 1;
        if self.slots.len() >= full {
            return None;
        }
        self.grow_slab_to((2 * self.slots.len()).clamp(1, full));
        self.alloc_slot()
    }

    /// Returns this instance to the state [`Cake::new`] left it in with its configuration
    /// in force: no packet queued (those queued are dropped without being counted),
    /// statistics zeroed, shaper clocks unset, the random state reseeded, the ACK filter
    /// and autorate forgotten. Nothing is freed or allocated: the tables are overwritten,
    /// and the packet slab keeps the slots it grew to. For recycling idle instances from a
    /// pool; a reset instance behaves exactly as a new one.
    pub fn reset(&mut self) {
        // The pattern names every field, so that a new one cannot be forgotten here.
        let Cake {
            config,
            tin_cnt: _,
            tin_index: _,
            tin_order: _,
            tin_names: _,
            dsrc: _,
            ddst: _,
            overhead: _,
            aqm: _,
            ack_mode: _,
            rate_bps,
            rate,
            ahead_ns,
            time_next,
            failsafe_next,
            buffer_used,
            buffer_limit,
            qlen,
            backlog,
            tins,
            turns,
            flows,
            links,
            tags,
            hosts,
            src_bulk,
            dst_bulk,
            heap,
            overflow_timeout,
            slots,
            free_low,
            free_head,
            ack,
            cur_tin,
            cur_flow,
            rng,
            last_now,
            hot: _,
            autorate,
            stats,
        } = self;
        // The fields after `apply_config` below recomputes (marked `_` above) are set from
        // the configuration alone.
        *rate_bps = 0;
        *rate = RateNs::default();
        *ahead_ns = 0;
        *time_next = Clock::default();
        *failsafe_next = 0;
        *buffer_used = 0;
        *buffer_limit = 0;
        *qlen = 0;
        *backlog = 0;
        *tins = Default::default();
        *turns = Default::default();
        flows.fill(Flow::default());
        links.fill(Link::default());
        tags.fill(0);
        hosts.fill(Host::default());
        src_bulk.fill(0);
        dst_bulk.fill(0);
        heap.reset();
        *overflow_timeout = 0;
        // Every slot free, as `grow_slab_to` leaves them.
        *free_low = 0;
        *free_head = NIL;
        for i in 0..slots.len() {
            slots[i] = Slot::default();
            mark_free(slots, i as u32, free_low, free_head);
        }
        ack.fill(AckEntry::default());
        *cur_tin = 0;
        *cur_flow = 0;
        *rng = config.seed;
        *last_now = 0;
        *autorate = Autorate::default();
        stats.clear();
        self.apply_config();
    }

    pub(super) fn compute_buffer_limit(&self) -> u64 {
        self.config.memory_limit_at(self.rate_bps)
    }

    /// The tin that the traffic of old tin `t` maps to now: the new tin most of the DSCP
    /// values `old_index` sent to `t` go to (the lowest on a tie; best effort's when none
    /// did). Per tin, not per packet: a queued packet keeps no DSCP, and a tin's flows move
    /// whole, so each keeps its order.
    fn tin_now_for(&self, t: usize, old_index: &[u8; 64]) -> usize {
        let mut votes = [0u32; MAX_TINS];
        for (dscp, &old) in old_index.iter().enumerate() {
            if usize::from(old) == t {
                votes[usize::from(self.tin_index[dscp]) % MAX_TINS] += 1;
            }
        }
        let best = (0..self.tin_cnt).max_by_key(|&n| (votes[n], std::cmp::Reverse(n)));
        match best {
            Some(n) if votes[n] > 0 => n,
            _ => usize::from(self.tin_index[0]).min(self.tin_cnt - 1),
        }
    }

    /// Moves every queued packet of tin `t`, which the new diffserv mode no longer has, to
    /// the tin its traffic maps to now ([`Cake::tin_now_for`]): each flow becomes the flow of
    /// the same bucket there (appended behind any packets that bucket holds), a new sparse
    /// flow to the scheduler, with its packets' order and enqueue times kept. A live
    /// diffserv change must not drop what is queued (docs/operations.md).
    fn move_vanished_tin(&mut self, t: usize, old_index: &[u8; 64]) {
        let to = self.tin_now_for(t, old_index);
        // The fattest-flow heap is rebuilt at the next overflow instead of kept up to date.
        self.overflow_timeout = 0;
        let now = self.last_now;
        for fid in t * FLOWS..(t + 1) * FLOWS {
            if self.flows[fid].head == NIL {
                continue;
            }
            let dest = to * FLOWS + (fid - t * FLOWS);
            if self.flows[dest].head == NIL {
                // An idle bucket takes the flow's hosts along with it. A bulk flow can be
                // idle (emptied, not yet visited): its hosts' bulk counts move with it.
                let bulk = self.flows[dest].set == FlowSet::Bulk;
                if bulk {
                    self.dec_host_bulk(dest);
                }
                self.flows[dest].srchost = self.flows[fid].srchost;
                self.flows[dest].dsthost = self.flows[fid].dsthost;
                if bulk {
                    self.inc_host_bulk(dest);
                }
            }
            if !self.rate.is_unlimited()
                && self.stats.tins[to].backlog_bytes == 0
                && self.tins[to].clock.next_ns < now
            {
                self.tins[to].clock.set(now);
            }
            while let Some(s) = self.pop_head(t, fid) {
                self.append_moved(to, dest, s);
            }
        }
    }

    /// Appends slot `s` (already unlinked and uncounted by `pop_head`) to flow `fid` of tin
    /// `t`, counting it as an enqueue does, and makes an idle flow a new sparse one.
    fn append_moved(&mut self, t: usize, fid: usize, s: u32) {
        let (len, footprint) = {
            let slot = &mut self.slots[s as usize];
            slot.next = NIL;
            (slot.len, slot.footprint)
        };
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
        let set = self.flows[fid].set;
        if matches!(set, FlowSet::None | FlowSet::Decaying) {
            let st = &mut self.stats.tins[t];
            if set == FlowSet::Decaying {
                st.decaying_flows -= 1;
            }
            st.sparse_flows += 1;
            self.turns[t].active_flows += 1;
            self.list_move_tail(fid, ListId::New);
            self.flows[fid].set = FlowSet::Sparse;
            self.flows[fid].deficit = self.flow_quantum(fid, 0);
        }
    }

    /// Empties tin `t`: drops its packets and returns its flows and hosts to rest.
    pub(super) fn purge_tin(&mut self, t: usize) {
        let base = t * FLOWS;
        for fid in base..base + FLOWS {
            while let Some(s) = self.pop_head(t, fid) {
                let len = self.slots[s as usize].len;
                self.release_slot(s);
                self.stats.count_drop(DropReason::Overflow, u64::from(len));
                self.stats.tins[t].dropped_packets += 1;
                self.stats.purged_packets += 1;
            }
            self.links[fid] = Link::default();
            let (rec_inv_sqrt, tag) = (self.flows[fid].cv.rec_inv_sqrt, self.flows[fid].tag);
            self.flows[fid] = Flow::default();
            self.flows[fid].cv.rec_inv_sqrt = rec_inv_sqrt;
            self.flows[fid].tag = tag;
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
    pub(super) fn recount_hosts(&mut self) {
        self.src_bulk.fill(0);
        self.dst_bulk.fill(0);
        for fid in 0..Self::ALL_FLOWS {
            if self.flows[fid].set == FlowSet::Bulk {
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

    /// Memory (bytes of [`Packet::footprint`]) the queued packets hold now; the peak is
    /// [`CakeStats::memory_used`]. Read from the instance's own count: a copy in the
    /// statistics, written by every enqueue and dequeue, cost a dequeue a line.
    pub fn memory_current(&self) -> u64 {
        self.buffer_used
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
    /// [`Qdisc::set_rate`](crate::Qdisc::set_rate) or autorate set.
    pub fn current_rate(&self) -> Rate {
        Rate::from_bytes_per_sec(self.rate_bps)
    }

    /// The dequeue cursors `(cur_tin, cur_flow)`, for tests that prove a rate change
    /// leaves them alone.
    pub fn cursors(&self) -> (usize, usize) {
        (self.cur_tin as usize, self.cur_flow as usize)
    }

    /// Bytes this instance allocated up front apart from the packets themselves: flow, tag,
    /// host and heap tables, and the delay histograms, plus the instance itself. The packet
    /// slab (slot metadata plus the packets) is [`Cake::slab_bytes`].
    pub fn preallocated_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.memory_bytes() - self.slab_bytes()
    }

    /// Bytes of the packet slab: slots of queue metadata and packet (`packet_limit + 1` of
    /// them, or in a compact instance as many as it grew to).
    pub fn slab_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<P>>()
    }

    /// Bytes of heap memory this instance owns: the flow, link, tag, host and bulk-count
    /// tables, the overflow heap, the packet slab, the ACK filter's entries and the delay
    /// histograms' counts. Not the instance itself (`size_of::<Cake<P, FLOWS>>()`, where
    /// its owner keeps it), nor what the queued packets point to.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let hist: usize = self
            .stats
            .tins
            .iter()
            .map(|t| t.delay_histogram.distinct_values() * size_of::<u64>())
            .sum();
        self.flows.bytes()
            + self.links.bytes()
            + self.tags.bytes()
            + self.hosts.bytes()
            + self.src_bulk.bytes()
            + self.dst_bulk.bytes()
            + self.heap.bytes()
            + self.slab_bytes()
            + self.ack.capacity() * size_of::<AckEntry>()
            + hist
    }
}

/// Marks new or reset slot `i` of `slots` free: a bit of `free_low`, or at the head of the
/// free list at `free_head` (so that the list's slots are taken highest first).
fn mark_free<P>(slots: &mut [Slot<P>], i: u32, free_low: &mut u64, free_head: &mut u32) {
    if i < FREE_LOW_SLOTS {
        *free_low |= 1 << i;
    } else {
        slots[i as usize].next = *free_head;
        *free_head = i;
    }
}
