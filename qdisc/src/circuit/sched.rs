//! The scheduling structures between circuits: the ready ring (circuits whose CAKE may send
//! now, served round robin), the timer heap (circuits their own shaper holds until a given
//! time) and the idle queue (empty circuits waiting for their instance's release). Each is
//! indexed by the shaper's dense circuit id and preallocated, so that nothing allocates
//! per packet.

use std::collections::VecDeque;

const NIL: u32 = u32::MAX;

/// A FIFO ring of ids, linked through a per-id `next` array: push at the tail, pop or
/// rotate at the head, all O(1). An id is on the ring at most once (the caller's state
/// says whether it is).
#[derive(Debug, Clone, Default)]
pub(super) struct ReadyRing {
    next: Vec<u32>,
    head: u32,
    tail: u32,
    len: usize,
}

impl ReadyRing {
    pub(super) fn new() -> ReadyRing {
        ReadyRing {
            next: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Makes room for ids below `ids`.
    pub(super) fn grow(&mut self, ids: usize) {
        if self.next.len() < ids {
            self.next.resize(ids, NIL);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn head(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    pub(super) fn push_back(&mut self, id: u32) {
        self.next[id as usize] = NIL;
        if self.tail == NIL {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.len += 1;
    }

    /// The id after `id` on the ring (`id` must be on it), if any.
    #[inline]
    pub(super) fn next_of(&self, id: u32) -> Option<u32> {
        let n = self.next[id as usize];
        (n != NIL).then_some(n)
    }

    pub(super) fn pop_front(&mut self) -> Option<u32> {
        let id = self.head()?;
        self.head = self.next[id as usize];
        if self.head == NIL {
            self.tail = NIL;
        }
        self.len -= 1;
        Some(id)
    }

    /// Moves the head to the tail (its turn is over).
    pub(super) fn rotate(&mut self) {
        if self.head != self.tail {
            if let Some(id) = self.pop_front() {
                self.push_back(id);
            }
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.next.capacity() * std::mem::size_of::<u32>()
    }
}

/// A binary min-heap of `(time, id)` with each id's position kept, so that a held circuit's
/// wake-up time can change (a rate change) or be removed in O(log n).
#[derive(Debug, Clone, Default)]
pub(super) struct TimerHeap {
    heap: Vec<(u64, u32)>,
    pos: Vec<u32>,
}

impl TimerHeap {
    pub(super) fn new() -> TimerHeap {
        TimerHeap::default()
    }

    /// Makes room for ids below `ids`.
    pub(super) fn grow(&mut self, ids: usize) {
        if self.pos.len() < ids {
            self.pos.resize(ids, NIL);
            self.heap.reserve(ids - self.heap.len());
        }
    }

    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        self.heap.first().copied()
    }

    pub(super) fn contains(&self, id: u32) -> bool {
        self.pos[id as usize] != NIL
    }

    /// Inserts `id` at `t`, or moves it to `t` when it is already in.
    pub(super) fn set(&mut self, id: u32, t: u64) {
        let p = self.pos[id as usize];
        if p == NIL {
            let i = self.heap.len();
            self.heap.push((t, id));
            self.pos[id as usize] = i as u32;
            self.sift_up(i);
        } else {
            let i = p as usize;
            let old = self.heap[i].0;
            self.heap[i].0 = t;
            if t < old {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        let top = self.peek()?;
        self.remove_at(0);
        Some(top)
    }

    pub(super) fn remove(&mut self, id: u32) {
        let p = self.pos[id as usize];
        if p != NIL {
            self.remove_at(p as usize);
        }
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.heap.len() - 1;
        self.swap(i, last);
        if let Some((_, id)) = self.heap.pop() {
            self.pos[id as usize] = NIL;
        }
        if i < self.heap.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].0 <= self.heap[i].0 {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let l = 2 * i + 1;
            if l >= self.heap.len() {
                break;
            }
            let r = l + 1;
            let c = if r < self.heap.len() && self.heap[r].0 < self.heap[l].0 {
                r
            } else {
                l
            };
            if self.heap[i].0 <= self.heap[c].0 {
                break;
            }
            self.swap(i, c);
            i = c;
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.heap.capacity() * std::mem::size_of::<(u64, u32)>()
            + self.pos.capacity() * std::mem::size_of::<u32>()
    }
}

/// Empty circuits in the order they emptied, each with the time it emptied: the front is
/// the first whose instance may be released. A circuit that was busy again in between is
/// recognised by its own `empty_since` when its entry reaches the front.
#[derive(Debug, Clone, Default)]
pub(super) struct IdleQueue {
    q: VecDeque<(u64, u32)>,
}

impl IdleQueue {
    pub(super) fn grow(&mut self, ids: usize) {
        if self.q.capacity() < ids {
            self.q.reserve(ids - self.q.len());
        }
    }

    pub(super) fn push(&mut self, t: u64, id: u32) {
        self.q.push_back((t, id));
    }

    pub(super) fn front(&self) -> Option<(u64, u32)> {
        self.q.front().copied()
    }

    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        self.q.pop_front()
    }

    pub(super) fn bytes(&self) -> usize {
        self.q.capacity() * std::mem::size_of::<(u64, u32)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_serves_in_order_and_rotates() {
        let mut r = ReadyRing::new();
        r.grow(4);
        for id in [2, 0, 3] {
            r.push_back(id);
        }
        r.rotate();
        assert_eq!(r.pop_front(), Some(0));
        assert_eq!(r.pop_front(), Some(3));
        assert_eq!(r.pop_front(), Some(2));
        assert!(r.is_empty());
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn the_heap_pops_in_time_order_after_moves_and_removals() {
        let mut h = TimerHeap::new();
        h.grow(64);
        let mut x = 12345u64;
        for id in 0..64u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            h.set(id, x >> 40);
        }
        for id in (0..64u32).step_by(3) {
            h.set(id, u64::from(id) * 7);
        }
        for id in (1..64u32).step_by(5) {
            h.remove(id);
            assert!(!h.contains(id));
        }
        let mut last = 0;
        let mut n = 0;
        while let Some((t, id)) = h.pop() {
            assert!(t >= last);
            assert!(!h.contains(id));
            last = t;
            n += 1;
        }
        assert_eq!(n, 64 - (1..64).step_by(5).count());
    }
}
