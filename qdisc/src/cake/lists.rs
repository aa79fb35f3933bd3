//! The intrusive structures a packet moves through: each tin's three flow lists (new, old
//! and decaying, linked through [`Link`]), the packet slab's free slots, and a flow's
//! packet queue with the backlog counters and overflow-heap upkeep a head removal implies.

use super::{tin_of, Cake, Link, ListId, FREE_LOW_SLOTS, NIL, NIL16};
use crate::Packet;

impl<P: Packet, const FLOWS: usize> Cake<P, FLOWS> {
    #[inline(always)]
    pub(super) fn list_unlink(&mut self, fid: usize) {
        let Some(which) = self.flows[fid].list else {
            return;
        };
        let list = &mut self.tins[tin_of::<FLOWS>(fid)].lists[which];
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
        self.flows[fid].list = None;
    }

    #[inline(always)]
    pub(super) fn list_push_tail(&mut self, fid: usize, which: ListId) {
        let tin = tin_of::<FLOWS>(fid);
        let list = &mut self.tins[tin].lists[which];
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
        self.flows[fid].list = Some(which);
    }

    #[inline]
    pub(super) fn list_move_tail(&mut self, fid: usize, which: ListId) {
        self.list_unlink(fid);
        self.list_push_tail(fid, which);
    }

    /// [`Cake::list_move_tail`] for a flow known to head its list, as every flow a dequeue
    /// visits does: the unlink needs no `prev` and the flow's list is known.
    #[inline(always)]
    pub(super) fn list_move_head_to_tail(&mut self, fid: usize, from: ListId, to: ListId) {
        let tin = tin_of::<FLOWS>(fid);
        debug_assert_eq!(self.flows[fid].list, Some(from));
        debug_assert_eq!(usize::from(self.tins[tin].lists[from].head), fid);
        let next = self.links[fid].next;
        if from == to && next == NIL16 {
            // The only flow of the list already is its tail.
            return;
        }
        let list = &mut self.tins[tin].lists[from];
        list.head = next;
        if next == NIL16 {
            list.tail = NIL16;
        } else {
            self.links[usize::from(next)].prev = NIL16;
        }
        self.list_push_tail(fid, to);
    }

    /// A free slot: the lowest of `free_low`, else the head of the free list.
    #[inline]
    pub(super) fn alloc_slot(&mut self) -> Option<u32> {
        if self.free_low != 0 {
            let s = self.free_low.trailing_zeros();
            self.free_low &= self.free_low - 1;
            return Some(s);
        }
        let s = self.free_head;
        if s == NIL {
            return None;
        }
        self.free_head = self.slots[s as usize].next;
        Some(s)
    }

    /// The slot the `nth` (from 0) next [`Cake::alloc_slot`] will take while nothing is
    /// released, when `free_low` holds that many; else the free list's head. For
    /// prefetching the slots of a burst's packets.
    #[inline]
    pub(super) fn nth_free_slot(&self, nth: u32) -> u32 {
        let mut low = self.free_low;
        for _ in 0..nth.min(FREE_LOW_SLOTS) {
            low &= low.wrapping_sub(1);
        }
        if low != 0 {
            low.trailing_zeros()
        } else {
            self.free_head
        }
    }

    /// Takes the packet out of slot `s` (if any) and makes the slot free.
    #[inline]
    pub(super) fn release_slot(&mut self, s: u32) -> Option<P> {
        let slot = &mut self.slots[s as usize];
        let p = slot.pkt.take();
        if s < FREE_LOW_SLOTS {
            self.free_low |= 1 << s;
        } else {
            slot.next = self.free_head;
            self.free_head = s;
        }
        p
    }

    /// Unlinks the head packet of flow `fid` and updates every backlog counter. The slot
    /// still holds the packet.
    #[inline(always)]
    pub(super) fn pop_head(&mut self, t: usize, fid: usize) -> Option<u32> {
        debug_assert_eq!(t, tin_of::<FLOWS>(fid));
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
    pub(super) fn heap_flow_shrank(&mut self, fid: usize) {
        let flows = &self.flows;
        self.heap.flow_shrank(fid, |f| flows[f].backlog);
    }

    /// Heap upkeep for a flow whose backlog grew; out of line as [`Cake::heap_flow_shrank`].
    #[cold]
    #[inline(never)]
    pub(super) fn heap_flow_grew(&mut self, fid: usize) {
        let flows = &self.flows;
        self.heap.flow_grew(fid, |f| flows[f].backlog);
    }
}
