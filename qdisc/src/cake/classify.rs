//! Classification (sch_cake.c `cake_select_tin` and `cake_hash`): the tin of a packet, its
//! flow hash, the set-associative flow lookup with host allocation, and the host bulk counts
//! that host fairness scales each flow's quantum by.

use super::{
    flow_hash, host_hash, host_load_in, scaled_quantum, tin_of, Cake, Classification, FlowMode,
    FlowSet, ListId, MAX_TINS, NIL16, SET_WAYS,
};
use crate::mq::sync::prefetch;
use crate::{cold_path, Packet, PacketMeta};

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    /// Picks the tin (sch_cake.c `cake_select_tin`).
    #[inline]
    pub(super) fn select_tin(&self, meta: &PacketMeta) -> usize {
        // No shortcut for one tin: besteffort's tables map everything to tin 0 anyway.
        let mask = self.hot.fwmark_mask;
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
    pub(super) fn hash_of(&self, meta: &PacketMeta) -> (u32, bool) {
        let mode = self.hot.flow_mode as u8;
        let key = self.hot.hash_key;
        if mode & 4 != 0 {
            if let Some(h) = meta.l4_hash {
                if !(self.hot.nat && meta.keys_rewritten) {
                    return (h, true);
                }
            }
            return (flow_hash(&meta.keys, key), false);
        }
        // Host-only modes (and flowblind) are the rare configurations.
        cold_path();
        let mut h = 0;
        if mode & 1 != 0 {
            h ^= host_hash(&meta.keys, key, false);
        }
        if mode & 2 != 0 {
            h ^= host_hash(&meta.keys, key, true);
        }
        (h, false)
    }

    /// Starts loading the instance's hot lines (see [`Cake`]'s layout): the first stage of
    /// a caller's prefetch of a burst for a cold instance, before [`Cake::prefetch_flow`],
    /// which reads them.
    #[inline]
    pub(crate) fn prefetch_header(&self) {
        prefetch(&self.qlen);
        prefetch(&self.rate);
        prefetch(&self.overhead);
        prefetch(&self.slots);
        prefetch(&self.turns);
        prefetch(&self.stats.memory_used);
    }

    /// Starts loading what an enqueue of `meta` will touch beyond the hot lines: its tin's
    /// scheduling and statistics lines, the home way of its flow (tag and record) and the
    /// packet slot it will take, when it is the `nth` (from 0) of the burst's packets for
    /// this instance. Reads the hot lines, so call it a stage after
    /// [`Cake::prefetch_header`].
    #[inline]
    pub(crate) fn prefetch_flow(&self, meta: &PacketMeta, nth: u32) {
        let t = self.select_tin(meta);
        // Not the tin's lookup counters, a line further: only a packet of an active flow
        // found in its home way counts there, with a store that nothing waits for, and
        // every other packet would pay for the line.
        self.prefetch_tin(t);
        if let Some(slot) = self.slots.get(self.nth_free_slot(nth) as usize) {
            prefetch(slot);
        }
        if self.hot.flow_mode != FlowMode::Flowblind {
            let (hash, _) = self.hash_of(meta);
            let fid = t * FLOWS + (hash as usize) % FLOWS;
            prefetch(&self.flows[fid]);
            if Self::COMPACT {
                // A subscriber's instance is cold: the flow's list links and its hosts'
                // bulk counts are misses too. A host's count is one of the 8 ways of its
                // hash's set (16 bytes, within one line), so the line is known from the
                // hash without the flow record (the whole rows, two lines each, forwarded
                // 3.6 % less: 10 000 circuits, IMIX, scripts/bench-circuits).
                prefetch(&self.links[fid]);
                let row = t * FLOWS;
                let set_of = |h: u32| row + (h as usize % FLOWS) / SET_WAYS * SET_WAYS;
                let key = self.hot.hash_key;
                if self.dsrc {
                    prefetch(&self.src_bulk[set_of(host_hash(&meta.keys, key, false))]);
                }
                if self.ddst {
                    prefetch(&self.dst_bulk[set_of(host_hash(&meta.keys, key, true))]);
                }
            }
        }
    }

    /// The heads a dequeue of tin `t` visits first: the decaying list's, then the new
    /// list's or else the old list's (`NIL16` when empty).
    #[inline(always)]
    fn dequeue_heads(&self, t: usize) -> (u16, u16) {
        let lists = &self.tins[t].lists;
        let (new, old) = (lists[ListId::New].head, lists[ListId::Old].head);
        let head = if new != NIL16 { new } else { old };
        (lists[ListId::Decay].head, head)
    }

    /// Starts loading what a dequeue reads of each active tin: its lists and clocks, and
    /// the statistics a delivery updates. Reads the hot lines, so call it a stage after
    /// [`Cake::prefetch_header`]; a hint, changes nothing.
    #[inline]
    pub(crate) fn prefetch_dequeue_tins(&self) {
        for t in 0..self.tin_cnt.min(MAX_TINS) {
            if self.turns[t].active_flows == 0 {
                continue;
            }
            self.prefetch_tin(t);
        }
    }

    /// Starts loading tin `t`'s scheduling lines (lists, clock, rate) and the statistics
    /// every packet of it updates (one line, see [`crate::cake::TinStats`]).
    #[inline(always)]
    fn prefetch_tin(&self, t: usize) {
        let (tin, st) = (&self.tins[t], &self.stats.tins[t]);
        prefetch(tin);
        prefetch(&st.sparse_flows);
    }

    /// Starts loading what the next dequeue will read first beyond the hot lines and the
    /// tins: the flow records at the heads of each active tin's lists
    /// ([`Cake::dequeue_heads`]). Reads the tins' lists, so call it a stage after
    /// [`Cake::prefetch_dequeue_tins`]; a hint, changes nothing.
    #[inline]
    pub(crate) fn prefetch_dequeue_flows(&self) {
        for t in 0..self.tin_cnt.min(MAX_TINS) {
            if self.turns[t].active_flows == 0 {
                continue;
            }
            let (decay, head) = self.dequeue_heads(t);
            if decay != NIL16 {
                prefetch(&self.flows[usize::from(decay)]);
            }
            if head != NIL16 {
                prefetch(&self.flows[usize::from(head)]);
                if Self::COMPACT {
                    prefetch(&self.links[usize::from(head)]);
                }
            }
        }
    }

    /// Starts loading the packet slot the next dequeue will pop: the head packet of the
    /// flow at the head of the new or the old list of each active tin. Reads those flow
    /// records, so call it a stage after [`Cake::prefetch_dequeue_flows`].
    #[inline]
    pub(crate) fn prefetch_dequeue_packet(&self) {
        for t in 0..self.tin_cnt.min(MAX_TINS) {
            if self.turns[t].active_flows == 0 {
                continue;
            }
            let (_, head) = self.dequeue_heads(t);
            if head != NIL16 {
                if let Some(slot) = self.slots.get(self.flows[usize::from(head)].head as usize) {
                    prefetch(slot);
                }
            }
        }
    }

    /// Where `meta` would go, without changing anything (for `cakewalk explain`).
    pub fn classify(&self, meta: &PacketMeta) -> Classification {
        let tin = self.select_tin(meta);
        let (hash, used_l4_hash) = self.hash_of(meta);
        let base = tin * FLOWS;
        let mut c = Classification {
            tin,
            tin_name: self.tin_names.get(tin).copied().unwrap_or("?"),
            flow_hash: hash,
            used_l4_hash,
            flow: 0,
            src_host: None,
            dst_host: None,
        };
        if self.hot.flow_mode == FlowMode::Flowblind {
            return c;
        }
        let i = (hash as usize) % FLOWS;
        let outer = i - i % SET_WAYS;
        let ways = (0..SET_WAYS).map(|k| outer + (i % SET_WAYS + k) % SET_WAYS);
        let flow = ways
            .clone()
            .find(|&j| self.tags[base + j] == hash)
            .or_else(|| {
                ways.clone()
                    .find(|&j| self.flows[base + j].set == FlowSet::None)
            })
            .unwrap_or(i);
        c.flow = flow;
        let f = &self.flows[base + flow];
        let reuse = self.tags[base + flow] == hash && f.set != FlowSet::None;
        let host = |h: u32, dst: bool| -> usize {
            let i = (h as usize) % FLOWS;
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
                host(host_hash(&meta.keys, self.hot.hash_key, false), false)
            });
        }
        if self.ddst {
            c.dst_host = Some(if reuse {
                usize::from(f.dsthost)
            } else {
                host(host_hash(&meta.keys, self.hot.hash_key, true), true)
            });
        }
        c
    }

    /// The set-associative lookup with host allocation (sch_cake.c `cake_hash`). Returns
    /// the global flow id.
    #[inline(always)]
    pub(super) fn lookup(&mut self, tin: usize, meta: &PacketMeta) -> usize {
        let base = tin * FLOWS;
        if self.hot.flow_mode == FlowMode::Flowblind {
            return base;
        }
        let (hash, _) = self.hash_of(meta);
        let i = (hash as usize) % FLOWS;
        let home = &self.flows[base + i];
        if home.tag == hash {
            if home.set != FlowSet::None {
                self.stats.tins[tin].way_directs += 1;
                return base + i;
            }
            // The home way holds this flow's tag but the flow went idle: the search below
            // would find it first (its first way is the home way, and `tags` equals the
            // copy in the record), so take it here without reading the tags' line, which
            // in a subscriber's cold instance is a miss (flows there go idle between a
            // circuit's visits, so most of its packets come this way).
            self.allocate_hosts(base, base + i, meta);
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
                if self.flows[j].set == FlowSet::None {
                    allocate = true;
                }
                chosen = Some(j);
                break;
            }
        }
        if chosen.is_none() {
            for n in 0..SET_WAYS {
                let j = outer + (inner + n) % SET_WAYS;
                if self.flows[j].set == FlowSet::None {
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
                if self.flows[j].set == FlowSet::Bulk {
                    self.dec_host_bulk(j);
                }
                j
            }
        };
        self.tags[fid] = hash;
        self.flows[fid].tag = hash;
        if allocate {
            self.allocate_hosts(base, fid, meta);
        }
        fid
    }

    /// Gives flow `fid` of the tin at `base` its source and destination hosts (those the
    /// flow mode isolates), as `cake_hash` does for a flow it (re)allocates.
    #[inline(always)]
    fn allocate_hosts(&mut self, base: usize, fid: usize, meta: &PacketMeta) {
        if self.dsrc {
            let h = host_hash(&meta.keys, self.hot.hash_key, false);
            let idx = self.alloc_host(base, h, false);
            self.flows[fid].srchost = idx as u16;
            if self.flows[fid].set == FlowSet::Bulk {
                self.src_bulk[base + idx] += 1;
            }
        }
        if self.ddst {
            let h = host_hash(&meta.keys, self.hot.hash_key, true);
            let idx = self.alloc_host(base, h, true);
            self.flows[fid].dsthost = idx as u16;
            if self.flows[fid].set == FlowSet::Bulk {
                self.dst_bulk[base + idx] += 1;
            }
        }
    }

    /// Finds or takes a host entry for `h` in the tin at `base`; returns its index in the
    /// tin.
    pub(super) fn alloc_host(&mut self, base: usize, h: u32, dst: bool) -> usize {
        let i = (h as usize) % FLOWS;
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
    pub(super) fn inc_host_bulk(&mut self, fid: usize) {
        let base = fid - fid % FLOWS;
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
    pub(super) fn dec_host_bulk(&mut self, fid: usize) {
        let base = fid - fid % FLOWS;
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
    pub(super) fn flow_quantum(&self, fid: usize, dither: u32) -> i32 {
        let tin = tin_of::<FLOWS>(fid);
        let load = self.host_load(fid, self.dsrc, self.ddst);
        scaled_quantum(self.tins[tin].flow_quantum, load, dither)
    }

    /// The larger bulk count of flow `fid`'s source and destination hosts, those that
    /// `dsrc` and `ddst` say count (0 when neither counts; [`QUANTUM_DIV`] reads 0 as 1).
    #[inline(always)]
    pub(super) fn host_load(&self, fid: usize, dsrc: bool, ddst: bool) -> u16 {
        let t = tin_of::<FLOWS>(fid);
        let bulk = (self.src_bulk.tin(t), self.dst_bulk.tin(t));
        host_load_in(&self.flows[fid], bulk, dsrc, ddst)
    }
}
