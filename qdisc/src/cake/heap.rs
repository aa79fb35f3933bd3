//! The overflow max-heap over every flow of every tin, keyed by byte backlog
//! (sch_cake.c `cake_heapify`, `cake_drop`). It is maintained incrementally only while
//! `overflow_timeout` is non-zero, i.e. for 65535 dequeues after an overflow; otherwise it
//! goes stale and is rebuilt bottom-up at the next overflow. With no overflow there is no
//! heap work on the packet path at all.

/// Heap positions and the flow ids they hold. `pos[fid]` is where flow `fid` sits.
#[derive(Debug, Clone)]
pub(super) struct OverflowHeap {
    heap: Box<[u16]>,
    pos: Box<[u16]>,
}

impl OverflowHeap {
    /// A heap over `n` flows (n ≤ 65536), in identity order.
    pub(super) fn new(n: usize) -> OverflowHeap {
        OverflowHeap {
            heap: (0..n).map(|i| i as u16).collect(),
            pos: (0..n).map(|i| i as u16).collect(),
        }
    }

    /// Puts every flow back in identity order, as [`OverflowHeap::new`] leaves them.
    pub(super) fn reset(&mut self) {
        for (i, (h, p)) in self.heap.iter_mut().zip(self.pos.iter_mut()).enumerate() {
            *h = i as u16;
            *p = i as u16;
        }
    }

    /// The flow with the largest backlog (valid only after a rebuild and upkeep).
    #[inline]
    pub(super) fn root(&self) -> usize {
        usize::from(self.heap[0])
    }

    /// Bytes of preallocated memory.
    pub(super) fn bytes(&self) -> usize {
        (self.heap.len() + self.pos.len()) * 2
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.pos[usize::from(self.heap[i])] = i as u16;
        self.pos[usize::from(self.heap[j])] = j as u16;
    }

    /// Moves the entry at `i` down until both children are no larger.
    pub(super) fn sift_down(&mut self, mut i: usize, backlog: impl Fn(usize) -> u64) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            let mut mb = backlog(usize::from(self.heap[i]));
            if l < n {
                let lb = backlog(usize::from(self.heap[l]));
                if lb > mb {
                    m = l;
                    mb = lb;
                }
            }
            if r < n && backlog(usize::from(self.heap[r])) > mb {
                m = r;
            }
            if m == i {
                return;
            }
            self.swap(i, m);
            i = m;
        }
    }

    /// Moves flow `fid` down after its backlog shrank.
    #[inline]
    pub(super) fn flow_shrank(&mut self, fid: usize, backlog: impl Fn(usize) -> u64) {
        self.sift_down(usize::from(self.pos[fid]), backlog);
    }

    /// Moves flow `fid` up after its backlog grew.
    #[inline]
    pub(super) fn flow_grew(&mut self, fid: usize, backlog: impl Fn(usize) -> u64) {
        let mut i = usize::from(self.pos[fid]);
        let b = backlog(fid);
        while i > 0 {
            let parent = (i - 1) / 2;
            if backlog(usize::from(self.heap[parent])) >= b {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    /// Rebuilds the whole heap bottom-up.
    pub(super) fn rebuild(&mut self, backlog: impl Fn(usize) -> u64) {
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i, &backlog);
        }
    }

    /// Checks the heap property and the position index.
    pub(super) fn check(&self, backlog: impl Fn(usize) -> u64) -> Result<(), String> {
        for i in 0..self.heap.len() {
            let f = usize::from(self.heap[i]);
            if usize::from(self.pos[f]) != i {
                return Err(format!("heap pos of flow {f} is {} not {i}", self.pos[f]));
            }
            if i > 0 && backlog(usize::from(self.heap[(i - 1) / 2])) < backlog(f) {
                return Err(format!("heap order broken at {i}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_the_fattest_flow_through_growth_and_shrinkage() {
        let mut b = vec![0u64; 64];
        let mut h = OverflowHeap::new(64);
        for (i, v) in b.iter_mut().enumerate() {
            *v = (i as u64 * 37) % 101;
        }
        h.rebuild(|f| b[f]);
        h.check(|f| b[f]).unwrap();
        assert_eq!(b[h.root()], *b.iter().max().unwrap());
        b[5] = 1000;
        h.flow_grew(5, |f| b[f]);
        assert_eq!(h.root(), 5);
        b[5] = 0;
        h.flow_shrank(5, |f| b[f]);
        h.check(|f| b[f]).unwrap();
        assert_eq!(b[h.root()], 100);
    }
}
