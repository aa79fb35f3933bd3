//! The dequeue (sch_cake.c `cake_dequeue`): the choice of tin (DRR between tins when
//! unlimited, the earliest tin clock when shaping), DRR++ over the tin's flow lists with its
//! deficit refills, COBALT's verdict on the head packet, and the delivery's bookkeeping.

use super::cobalt::Verdict;
use super::stats::ewma;
use super::AqmMode;
use super::{
    div_quantum, host_load_in, scaled_quantum, wyrand, Cake, FlowSet, ListId, Popped,
    DELAY_SAMPLE_EVERY, MAX_TINS, NIL, NIL16,
};
use crate::{cold_path, Dequeue, DropReason, Packet};

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    pub(super) fn dequeue_inner(&mut self, now: u64) -> Dequeue<P> {
        let now = self.clamp_now(now);
        let mut first_flow = true;
        // Every visit that does not deliver either refills a deficit, drops a packet or
        // moves an empty flow on, so the loop ends; bound those visits anyway, so that
        // corrupted state can never hang the caller.
        let mut budget = Self::DEQUEUE_VISIT_BUDGET;
        'begin: loop {
            // Whether an ingress-mode AQM drop charged the shaper since the gate below was
            // last checked: the gate must then be checked again before anything is sent.
            let mut charged_since_gate = false;
            if self.qlen == 0 {
                return Dequeue::Empty;
            }
            if !self.rate.is_unlimited() {
                self.bound_catch_up(now);
            }
            let gate = self.send_gate(now);
            if !self.rate.is_unlimited()
                && self.time_next.next_ns > gate
                && self.failsafe_next > gate
            {
                self.stats.overlimits += 1;
                return Dequeue::NotBefore(self.gate_opens_at());
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
                let mut t = self.cur_tin as usize % MAX_TINS;
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
                self.cur_tin = t as u32;
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
                self.cur_tin = best as u32;
                if !any {
                    return Dequeue::Empty;
                }
            }
            let t = self.cur_tin as usize % MAX_TINS;
            // The first visit of a dequeue goes to the decaying list's head (sch_cake.c's
            // `first_flow`). Beyond Linux: when that head is empty, has credit and its COBALT
            // state cannot change before `drop_next`, visiting it would only rotate it to the
            // tail; leaving it at the head keeps the list in expiry order and saves a flow
            // visit per dequeue. Decided here, once, so that the visits below run straight
            // (the idle head is the common case, a visit to it the rare one).
            let mut visit_decay_head = false;
            if first_flow {
                let decay_head = self.tins[t].lists[ListId::Decay].head;
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
                    lists[ListId::New].head,
                    lists[ListId::Old].head,
                    lists[ListId::Decay].head,
                );
                let (which, head) = if visit_decay_head {
                    cold_path();
                    visit_decay_head = false;
                    (ListId::Decay, decay_head)
                } else if new_head != NIL16 {
                    (ListId::New, new_head)
                } else if old_head != NIL16 {
                    (ListId::Old, old_head)
                } else if decay_head != NIL16 {
                    (ListId::Decay, decay_head)
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
                self.cur_flow = (fid % FLOWS) as u32;

                if self.flows[fid].deficit <= 0 {
                    if which == ListId::Old {
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
                    self.list_move_head_to_tail(fid, which, ListId::Old);
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
                        // Linux goes back to `begin`. While this tin still has flows and
                        // no ingress drop charged the shaper since the gate was checked,
                        // nothing `begin` looks at has changed (no time passed, this tin's
                        // deficit is still >= 0 and its counts > 0), so it would pick this
                        // tin again: go straight to the flow choice. After such a charge
                        // the gate may now hold packets back, and the earliest tin clock
                        // may be another tin's.
                        let turn = &self.turns[t];
                        if self.qlen > 0
                            && turn.active_flows > 0
                            && turn.deficit >= 0
                            && !charged_since_gate
                        {
                            continue 'serve;
                        }
                        continue 'begin;
                    };
                    let (enq, adj, len) = {
                        let slot = &self.slots[s as usize];
                        (slot.enqueue_ns, slot.adj_len, slot.len)
                    };
                    let sojourn = now.saturating_sub(enq);
                    // `should_drop` floors the target at two MTU times per `bulk`: ingress
                    // mode's term; `round_target` counts each bulk flow twice.
                    let bulk = match self.aqm {
                        AqmMode::Egress => 0,
                        AqmMode::Ingress => self.stats.tins[t].bulk_flows,
                        AqmMode::Rounds => self.stats.tins[t].bulk_flows.saturating_mul(2),
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
                    if self.aqm == AqmMode::Ingress {
                        charged_since_gate |= !self.rate.is_unlimited();
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
    pub(super) fn refill_old_run(&mut self, t: usize, head: usize, budget: u32) -> Option<u32> {
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
    pub(super) fn refill_old_run_in<const DSRC: bool, const DDST: bool>(
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
                if f.set == FlowSet::Sparse {
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
            self.cur_flow = (fid % FLOWS) as u32;
        }
        self.rotate_old_list(t, head, new_head);
        credit.then_some(left)
    }

    /// [`Cake::leave_sparse_rotation`] out of the refill run's loop, where it never runs.
    #[cold]
    #[inline(never)]
    pub(super) fn leave_sparse_rotation_cold(&mut self, t: usize, fid: usize) {
        self.leave_sparse_rotation(t, fid);
    }

    /// A sparse flow of tin `t` that ran out of deficit: it turns bulk if it still holds
    /// packets, else waits (sch_cake.c keeps flows with deficits out of the sparse
    /// rotation).
    #[inline(always)]
    pub(super) fn leave_sparse_rotation(&mut self, t: usize, fid: usize) {
        if self.flows[fid].set != FlowSet::Sparse {
            return;
        }
        if self.flows[fid].head != NIL {
            let st = &mut self.stats.tins[t];
            st.sparse_flows -= 1;
            st.bulk_flows += 1;
            self.flows[fid].set = FlowSet::Bulk;
            self.inc_host_bulk(fid);
        } else {
            self.flows[fid].set = FlowSet::SparseWait;
        }
    }

    /// Makes `new_head` the head of tin `t`'s old list (which starts at `head`), keeping
    /// the ring order: the flows before it move to the tail, in order, as if each had been
    /// moved there one by one.
    #[inline(always)]
    pub(super) fn rotate_old_list(&mut self, t: usize, head: usize, new_head: usize) {
        if new_head == head {
            return;
        }
        let list = &mut self.tins[t].lists[ListId::Old];
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
    pub(super) fn drop_at_dequeue(
        &mut self,
        t: usize,
        fid: usize,
        s: u32,
        adj: u32,
        len: u32,
        now: u64,
    ) {
        if self.aqm == AqmMode::Ingress {
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
    pub(super) fn skip_drr_rounds(&mut self) {
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
    pub(super) fn decay_visit_is_idle(&self, fid: usize, now: u64) -> bool {
        let f = &self.flows[fid];
        f.head == NIL
            && f.deficit > 0
            && f.cv.count == 0
            && f.cv.p_drop == 0
            && now < f.cv.drop_next
    }

    /// A flow was found empty at dequeue, at the head of list `which`: decay it or retire it.
    pub(super) fn flow_went_empty(&mut self, t: usize, fid: usize, which: ListId, now: u64) {
        if self.flows[fid].cv.queue_empty(&self.tins[t].cparams, now) {
            let st = &mut self.stats.tins[t];
            st.unresponsive_flows = st.unresponsive_flows.saturating_sub(1);
        }
        let set = self.flows[fid].set;
        if self.flows[fid].cv.is_decaying(now) {
            self.list_move_head_to_tail(fid, which, ListId::Decay);
            match set {
                FlowSet::Bulk => {
                    self.stats.tins[t].bulk_flows -= 1;
                    self.turns[t].active_flows -= 1;
                    self.dec_host_bulk(fid);
                    self.stats.tins[t].decaying_flows += 1;
                }
                FlowSet::Sparse | FlowSet::SparseWait => {
                    self.stats.tins[t].sparse_flows -= 1;
                    self.turns[t].active_flows -= 1;
                    self.stats.tins[t].decaying_flows += 1;
                }
                FlowSet::None | FlowSet::Decaying => {}
            }
            self.flows[fid].set = FlowSet::Decaying;
        } else {
            self.list_unlink(fid);
            let st = &mut self.stats.tins[t];
            match set {
                FlowSet::Sparse | FlowSet::SparseWait => {
                    st.sparse_flows -= 1;
                    self.turns[t].active_flows -= 1;
                }
                FlowSet::Bulk => {
                    st.bulk_flows -= 1;
                    self.turns[t].active_flows -= 1;
                    self.dec_host_bulk(fid);
                }
                FlowSet::None | FlowSet::Decaying => {
                    st.decaying_flows = st.decaying_flows.saturating_sub(1);
                }
            }
            self.flows[fid].set = FlowSet::None;
        }
    }

    #[inline]
    pub(super) fn deliver(
        &mut self,
        t: usize,
        fid: usize,
        Popped { slot: s, adj, len }: Popped,
        now: u64,
        delay: u64,
        marked: bool,
    ) -> Dequeue<P> {
        let st = &mut self.stats.tins[t];
        if marked {
            // Rare, and its counter lies beyond the tin's first 64 bytes, all that a
            // delivery otherwise touches (see `TinStats`).
            cold_path();
            st.ecn_marked_packets += 1;
        }
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
        // shared by all tins sampled only one tin when two alternated. Compiled out of a
        // subscriber's instance, which keeps no histograms.
        if Self::KEEPS_DELAY_HISTOGRAMS {
            let tin = &mut self.tins[t];
            if tin.delay_sample_wait == 0 {
                tin.delay_sample_wait = (DELAY_SAMPLE_EVERY - 1) as u8;
                st.delay_histogram.saturating_record((delay / 1000).max(1));
            } else {
                tin.delay_sample_wait -= 1;
            }
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
        match self.release_slot(s) {
            Some(p) => Dequeue::Packet(p),
            None => Dequeue::Empty,
        }
    }
}
