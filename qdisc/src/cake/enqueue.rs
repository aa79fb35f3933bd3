//! The enqueue (sch_cake.c `cake_enqueue`): the clock clamp, slab slot and flow queue of an
//! arriving packet, the flow's move into the sparse or bulk set, the ACK filter, and the
//! overflow drops from the fattest flow (`cake_drop`) while over the memory or packet limit.

use super::ack_filter::{self, AckEntry};
use super::AqmMode;
use super::{
    clamp_u32, tin_of, wyrand, AckFilterMode, Cake, FlowSet, ListId, NIL, OVERFLOW_TIMEOUT,
};
use crate::{cold_path, DropReason, Enqueued, Packet, PacketMeta, TcpAckInfo};

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    #[inline]
    pub(super) fn clamp_now(&mut self, now: u64) -> u64 {
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
    pub(super) fn next_rand(&mut self) -> u64 {
        wyrand(&mut self.rng)
    }

    /// Drops the head of the fattest flow across all tins (sch_cake.c `cake_drop`).
    /// Returns the dropped bytes, or `None` when the heap was stale and must be rebuilt.
    pub(super) fn drop_fattest(&mut self, now: u64) -> Option<u64> {
        if self.overflow_timeout == 0 {
            let flows = &self.flows;
            self.heap.rebuild(|f| flows[f].backlog);
        }
        self.overflow_timeout = OVERFLOW_TIMEOUT;
        let fid = self.heap.root();
        let t = tin_of::<FLOWS>(fid);
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
        if self.aqm == AqmMode::Ingress {
            self.advance_shaper(t, adj, now, true);
        }
        self.release_slot(s);
        Some(u64::from(len))
    }

    // Inlined into the caller's packet loop: out of line, every packet paid for saving and
    // restoring registers and reloading the fields the caller already held (probe loop
    // -0.8 ns at 1000 B, -1.5 ns at 64 B; the golden digest is unchanged).
    #[inline(always)]
    pub(super) fn enqueue_inner(&mut self, now: u64, mut pkt: P, meta: &PacketMeta) -> Enqueued {
        let now = self.clamp_now(now);
        let len = clamp_u32(pkt.len());
        let footprint = clamp_u32(pkt.footprint());
        let t = self.select_tin(meta);
        if self.hot.wash {
            // After the tin is chosen: the marks classify here and are gone downstream.
            pkt.wash_dscp();
        }
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

        let mut slot = self.alloc_slot();
        if Self::COMPACT && slot.is_none() {
            // Only a compact instance grows its slab: the link instance's is full size, and
            // this test compiles out of its packet path.
            slot = self.grow_slab();
        }
        let Some(s) = slot else {
            // Unreachable: a full-size slab has packet_limit + 1 slots, and qlen <=
            // packet_limit before this packet. Never panic on it.
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
        if self.hot.autorate_ingress {
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
        match self.flows[fid].set {
            set @ (FlowSet::None | FlowSet::Decaying) => {
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
            FlowSet::SparseWait => {
                self.flows[fid].set = FlowSet::Bulk;
                let st = &mut self.stats.tins[t];
                st.sparse_flows -= 1;
                st.bulk_flows += 1;
                self.inc_host_bulk(fid);
            }
            FlowSet::Sparse | FlowSet::Bulk => {}
        }

        if self.buffer_used > self.stats.memory_used {
            cold_path();
            self.stats.memory_used = self.buffer_used;
        }
        if self.buffer_used > self.buffer_limit || self.qlen > self.hot.packet_limit {
            self.drop_overflow(now, &mut result);
        }
        result
    }

    /// The ACK filter's part of an enqueue (packet in slot `s` of flow `fid` in tin `t`):
    /// records the packet's keys and drops the ACK it makes redundant, if any. Out of line,
    /// like [`Cake::drop_overflow`], so that the enqueue's result stays in registers.
    #[inline(never)]
    pub(super) fn enqueue_ack_filter(
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
            if self.aqm == AqmMode::Ingress {
                self.advance_shaper(t, vadj, now, true);
            }
            result.dropped_packets += 1;
            result.dropped_bytes += u64::from(vlen);
            result.reason = Some(DropReason::AckFilter);
            result.ack_filtered += 1;
        }
        result
    }

    /// Drops the head of this instance's fattest flow to make room in a budget it shares
    /// with other instances (a parent's, as the circuit shaper's `total_packet_limit`).
    /// Returns the dropped packet's wire bytes, or `None` when nothing is queued. Counted
    /// as an overflow drop, like the instance's own limits.
    pub fn drop_for_space(&mut self, now_ns: u64) -> Option<u64> {
        let now = self.clamp_now(now_ns);
        for _ in 0..2 {
            if self.qlen == 0 {
                return None;
            }
            // A stale heap is rebuilt by the first try; the second then finds a head.
            if let Some(bytes) = self.drop_fattest(now) {
                return Some(bytes);
            }
        }
        None
    }

    /// Drops from the fattest flows until the queue is within its byte and packet limits
    /// (sch_cake.c's overflow loop), adding the drops to `result`. Out of line: it runs only
    /// over the limits.
    #[cold]
    #[inline(never)]
    pub(super) fn drop_overflow(&mut self, now: u64, result: &mut Enqueued) {
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
    pub(super) fn ack_filter(&mut self, fid: usize, trigger: u32) -> Option<u32> {
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
        self.stats.tins[tin_of::<FLOWS>(fid)].backlog_bytes -= len;
        self.backlog -= len;
        self.buffer_used -= foot;
        self.qlen -= 1;
        Some(victim)
    }
}
