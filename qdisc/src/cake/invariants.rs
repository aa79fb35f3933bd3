//! The internal invariants of a [`Cake`], checked by walking every flow and packet: the
//! counters against the queues and lists they summarise, the host bulk counts and the
//! overflow heap. Meant for tests and fuzzing.

use super::{Cake, FlowSet, ListId, FREE_LOW_SLOTS, MAX_TINS, NIL, NIL16};
use crate::Packet;

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    /// The free slots (`free_low`'s bits and the free list) are exactly the empty slots,
    /// each once, and the list holds none of the low slots.
    fn check_free_slots(&self) -> Result<(), String> {
        let n = self.slots.len();
        let mut free = vec![false; n];
        for s in 0..FREE_LOW_SLOTS {
            if self.free_low & (1 << s) != 0 {
                if s as usize >= n {
                    return Err(format!("free bit {s} beyond the slab of {n}"));
                }
                free[s as usize] = true;
            }
        }
        let mut s = self.free_head;
        while s != NIL {
            let Some(seen) = free.get_mut(s as usize) else {
                return Err(format!("free list links slot {s} beyond the slab of {n}"));
            };
            if *seen || s < FREE_LOW_SLOTS {
                return Err(format!(
                    "slot {s} is on the free list twice or is a low slot"
                ));
            }
            *seen = true;
            s = self.slots[s as usize].next;
        }
        for (s, (slot, free)) in self.slots.iter().zip(&free).enumerate() {
            if slot.pkt.is_none() != *free {
                return Err(if *free {
                    format!("slot {s} holds a packet but is marked free")
                } else {
                    format!("slot {s} is empty but not marked free")
                });
            }
        }
        Ok(())
    }

    /// Checks the internal invariants (counters against lists and queues). Costs a walk
    /// of every flow and packet; meant for tests and fuzzing.
    ///
    /// # Errors
    /// A description of the first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_free_slots()?;
        let mut qlen = 0u64;
        let mut backlog = 0u64;
        let mut used = 0u64;
        for t in 0..MAX_TINS {
            let (mut sparse, mut bulk, mut decaying) = (0u32, 0u32, 0u32);
            let mut tin_backlog = 0u64;
            for fid in t * FLOWS..(t + 1) * FLOWS {
                let f = &self.flows[fid];
                if f.tag != self.tags[fid] {
                    return Err(format!(
                        "flow {fid} tag {} != table {}",
                        f.tag, self.tags[fid]
                    ));
                }
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
                    FlowSet::Sparse | FlowSet::SparseWait => sparse += 1,
                    FlowSet::Bulk => bulk += 1,
                    FlowSet::Decaying => decaying += 1,
                    FlowSet::None => {
                        if f.head != NIL {
                            return Err(format!("flow {fid} has packets but no set"));
                        }
                        if f.list.is_some() {
                            return Err(format!("flow {fid} is listed with no set"));
                        }
                    }
                }
                if f.set != FlowSet::None && f.list.is_none() {
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
            for w in ListId::ALL {
                let l = self.tins[t].lists[w];
                let mut fid = l.head;
                let mut prev = NIL16;
                while fid != NIL16 {
                    let f = &self.flows[usize::from(fid)];
                    let link = self.links[usize::from(fid)];
                    if f.list != Some(w) || link.prev != prev {
                        return Err(format!("list {w:?} of tin {t} broken at flow {fid}"));
                    }
                    listed += 1;
                    if listed > FLOWS {
                        return Err("flow list cycle".into());
                    }
                    prev = fid;
                    fid = link.next;
                }
                if prev != l.tail {
                    return Err(format!("list {w:?} of tin {t} tail mismatch"));
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
                let base = t * FLOWS;
                let mut src = vec![0u32; FLOWS];
                let mut dst = vec![0u32; FLOWS];
                for fid in base..base + FLOWS {
                    if self.flows[fid].set == FlowSet::Bulk {
                        src[usize::from(self.flows[fid].srchost)] += 1;
                        dst[usize::from(self.flows[fid].dsthost)] += 1;
                    }
                }
                for h in 0..FLOWS {
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
