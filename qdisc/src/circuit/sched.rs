//! The scheduling structures between circuits: the ready ring (circuits whose CAKE may send
//! now, served round robin), the timer heap (circuits their own shaper holds until a given
//! time) and the idle queue (empty circuits waiting for their instance's release). Each is
//! indexed by the shaper's dense circuit id and preallocated, so that nothing allocates
//! per packet.

use std::cell::Cell;
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

    #[cfg(test)]
    fn contains(&self, id: u32) -> bool {
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

/// Where a [`TimerWheel`] entry is: not held, in the overflow heap, or in a wheel bucket.
const OFF: u32 = u32::MAX;
const IN_OVERFLOW: u32 = u32::MAX - 1;
/// A bucket's cached earliest entry when it has none.
const EMPTY_MIN: (u64, u32) = (u64::MAX, NIL);
/// A bucket's cached earliest entry when it is unknown (the id no entry has).
const STALE_MIN: (u64, u32) = (0, u32::MAX - 1);

/// Buckets of the wheel (a power of two) and the span of one, 2^SHIFT ns: 4096 buckets of
/// 2.048 us reach 8.4 ms ahead, the wait of a 1500-byte packet at 1.5 Mbit/s.
const WHEEL_BUCKETS: usize = 4096;
const WHEEL_SHIFT: u32 = 11;
const WHEEL_WORDS: usize = WHEEL_BUCKETS / 64;

/// One bucket of the wheel: its list's head and its cached earliest entry, in 16 bytes so
/// that an insertion reads one line (in two arrays, each insertion missed on both).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
struct Bucket {
    head: u32,
    min_id: u32,
    min_at: u64,
}

impl Default for Bucket {
    fn default() -> Bucket {
        Bucket {
            head: NIL,
            min_id: EMPTY_MIN.1,
            min_at: EMPTY_MIN.0,
        }
    }
}

/// A held circuit's place in the wheel: its exact time and its bucket list's links.
#[derive(Debug, Clone, Copy)]
struct WheelEntry {
    at: u64,
    next: u32,
    prev: u32,
    bucket: u32,
}

impl Default for WheelEntry {
    fn default() -> WheelEntry {
        WheelEntry {
            at: 0,
            next: NIL,
            prev: NIL,
            bucket: OFF,
        }
    }
}

/// The circuits their own shaper holds, by wake-up time: a timing wheel of 2 us buckets
/// for waits within its 8 ms reach (every circuit at a plan of a few Mbit/s and up; O(1)
/// to insert, move, remove and pop) and a [`TimerHeap`] beyond it. Each entry keeps its
/// exact time, so nothing is released early: a bucket before the current one is wholly
/// due, the current one is checked entry by entry. Entries of one bucket leave in no
/// particular order (they are due within 2 us of each other).
///
/// Each bucket caches its earliest entry, so that `peek` and a `pop_due` that finds
/// nothing due in the current bucket cost O(1) however many circuits share the bucket (a
/// burst that reaches thousands of circuits at one instant puts them all in one): walking
/// the bucket for them cost 12 us per packet with 10 000 circuits held by their plans. A
/// removal of the earliest entry leaves the cache stale, and the next reader that needs it
/// walks the bucket once.
#[derive(Debug, Clone)]
pub(super) struct TimerWheel {
    entries: Vec<WheelEntry>,
    /// Per bucket: its list's head and its earliest entry `(time, id)`, [`EMPTY_MIN`], or
    /// [`STALE_MIN`] when the earliest left and the bucket has not been walked since (a
    /// `Cell`, so that `peek` caches what it walked).
    buckets: Box<[Cell<Bucket>]>,
    /// Entries visited by bucket walks, for the tests that hold the walks to O(n).
    #[cfg(test)]
    visited: Cell<u64>,
    occupied: [u64; WHEEL_WORDS],
    /// The absolute bucket (`time >> WHEEL_SHIFT`) no wheel entry is before: every entry's
    /// bucket is in `cursor..cursor + WHEEL_BUCKETS`. Advanced by [`TimerWheel::pop_due`].
    cursor: u64,
    in_wheel: usize,
    overflow: TimerHeap,
}

impl Default for TimerWheel {
    fn default() -> TimerWheel {
        TimerWheel::new()
    }
}

impl TimerWheel {
    pub(super) fn new() -> TimerWheel {
        TimerWheel {
            entries: Vec::new(),
            buckets: vec![Cell::new(Bucket::default()); WHEEL_BUCKETS].into_boxed_slice(),
            #[cfg(test)]
            visited: Cell::new(0),
            occupied: [0; WHEEL_WORDS],
            cursor: 0,
            in_wheel: 0,
            overflow: TimerHeap::new(),
        }
    }

    /// Makes room for ids below `ids`.
    pub(super) fn grow(&mut self, ids: usize) {
        if self.entries.len() < ids {
            self.entries.resize(ids, WheelEntry::default());
        }
        self.overflow.grow(ids);
    }

    pub(super) fn len(&self) -> usize {
        self.in_wheel + self.overflow.len()
    }

    pub(super) fn contains(&self, id: u32) -> bool {
        self.entries[id as usize].bucket != OFF
    }

    /// Inserts `id` at `t`, or moves it to `t` when it is already in.
    pub(super) fn set(&mut self, id: u32, t: u64) {
        self.remove(id);
        self.insert(id, t);
    }

    /// Inserts `id`, which is not in, at `t`: [`TimerWheel::set`] without the removal,
    /// which reads the id's entry (a line of its own, cold when a circuit comes off the
    /// ready ring) only to find it out.
    #[inline]
    pub(super) fn insert(&mut self, id: u32, t: u64) {
        debug_assert!(!self.contains(id), "id {id} is in the wheel already");
        let b = (t >> WHEEL_SHIFT).max(self.cursor);
        if b - self.cursor >= WHEEL_BUCKETS as u64 {
            self.overflow.set(id, t);
            self.entries[id as usize].bucket = IN_OVERFLOW;
            return;
        }
        let slot = (b as usize) % WHEEL_BUCKETS;
        let bucket = self.buckets[slot].get();
        let head = bucket.head;
        self.entries[id as usize] = WheelEntry {
            at: t,
            next: head,
            prev: NIL,
            bucket: slot as u32,
        };
        if head != NIL {
            self.entries[head as usize].prev = id;
        }
        let earliest = (bucket.min_at, bucket.min_id) != STALE_MIN && t < bucket.min_at;
        self.buckets[slot].set(Bucket {
            head: id,
            min_id: if earliest { id } else { bucket.min_id },
            min_at: if earliest { t } else { bucket.min_at },
        });
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.in_wheel += 1;
    }

    pub(super) fn remove(&mut self, id: u32) {
        let e = self.entries[id as usize];
        match e.bucket {
            OFF => return,
            IN_OVERFLOW => self.overflow.remove(id),
            slot => {
                let slot = slot as usize;
                let mut bucket = self.buckets[slot].get();
                if e.prev == NIL {
                    bucket.head = e.next;
                    if e.next == NIL {
                        self.occupied[slot / 64] &= !(1 << (slot % 64));
                    }
                } else {
                    self.entries[e.prev as usize].next = e.next;
                }
                if e.next != NIL {
                    self.entries[e.next as usize].prev = e.prev;
                }
                self.in_wheel -= 1;
                if bucket.head == NIL {
                    (bucket.min_at, bucket.min_id) = EMPTY_MIN;
                } else if bucket.min_id == id {
                    (bucket.min_at, bucket.min_id) = STALE_MIN;
                }
                self.buckets[slot].set(bucket);
            }
        }
        self.entries[id as usize] = WheelEntry::default();
    }

    #[inline(always)]
    fn head_of(&self, slot: usize) -> u32 {
        self.buckets[slot].get().head
    }

    /// Bucket `slot`'s cached earliest entry (or [`EMPTY_MIN`], [`STALE_MIN`]).
    #[inline(always)]
    fn min_of(&self, slot: usize) -> (u64, u32) {
        let b = self.buckets[slot].get();
        (b.min_at, b.min_id)
    }

    #[inline(always)]
    fn set_min(&self, slot: usize, (at, id): (u64, u32)) {
        let b = &self.buckets[slot];
        b.set(Bucket {
            min_at: at,
            min_id: id,
            ..b.get()
        });
    }

    /// The first occupied bucket slot at or after `slot`, going round the wheel once.
    fn next_occupied(&self, slot: usize) -> Option<usize> {
        let (word, bit) = (slot / 64, slot % 64);
        let first = self.occupied[word] & (u64::MAX << bit);
        if first != 0 {
            return Some(word * 64 + first.trailing_zeros() as usize);
        }
        (1..=WHEEL_WORDS).find_map(|k| {
            let w = (word + k) % WHEEL_WORDS;
            let bits = self.occupied[w];
            (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
        })
    }

    /// The earliest entry of occupied bucket `slot`, from the cache or, when that is stale,
    /// by walking the bucket once (and caching what it found). Of equal times it names the
    /// one nearest the tail: entries join at the head and `pop_due` takes due ones from the
    /// head, so a batch due at one instant leaves without making the cache stale each time.
    fn bucket_min(&self, slot: usize) -> (u64, u32) {
        let cached = self.min_of(slot);
        if cached != STALE_MIN {
            return cached;
        }
        let mut best = EMPTY_MIN;
        let mut id = self.head_of(slot);
        while id != NIL {
            let e = &self.entries[id as usize];
            if e.at <= best.0 {
                best = (e.at, id);
            }
            #[cfg(test)]
            self.visited.set(self.visited.get() + 1);
            id = e.next;
        }
        self.set_min(slot, best);
        best
    }

    /// The earliest entry's `(time, id)`, without removing it.
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        let mut best = self.overflow.peek();
        if self.in_wheel > 0 {
            let from = (self.cursor as usize) % WHEEL_BUCKETS;
            if let Some(slot) = self.next_occupied(from) {
                let (at, id) = self.bucket_min(slot);
                if best.map_or(true, |(t, _)| at < t) {
                    best = Some((at, id));
                }
            }
        }
        best
    }

    /// Removes and returns an entry due at `now` (its time at or before it), if any.
    pub(super) fn pop_due(&mut self, now: u64) -> Option<u32> {
        if let Some((t, id)) = self.overflow.peek() {
            if t <= now {
                self.overflow.pop();
                self.entries[id as usize] = WheelEntry::default();
                return Some(id);
            }
        }
        let now_bucket = now >> WHEEL_SHIFT;
        if self.in_wheel == 0 {
            self.cursor = self.cursor.max(now_bucket);
            return None;
        }
        if self.cursor > now_bucket {
            return None;
        }
        let from = (self.cursor as usize) % WHEEL_BUCKETS;
        let slot = self.next_occupied(from)?;
        let ahead = ((slot + WHEEL_BUCKETS - from) % WHEEL_BUCKETS) as u64;
        if self.cursor + ahead > now_bucket {
            self.cursor = now_bucket;
            return None;
        }
        self.cursor += ahead;
        let mut id = self.head_of(slot);
        if self.cursor < now_bucket {
            // A bucket before the current one is wholly due.
            self.remove(id);
            return Some(id);
        }
        // The current bucket: nothing in it is due before its earliest entry.
        if self.bucket_min(slot).0 > now {
            return None;
        }
        while id != NIL {
            let e = self.entries[id as usize];
            if e.at <= now {
                self.remove(id);
                return Some(id);
            }
            #[cfg(test)]
            self.visited.set(self.visited.get() + 1);
            id = e.next;
        }
        None
    }

    pub(super) fn bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<WheelEntry>()
            + self.buckets.len() * std::mem::size_of::<Bucket>()
            + std::mem::size_of_val(&self.occupied)
            + self.overflow.bytes()
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

    /// The wheel against a plain map of id -> time under random inserts, moves, removals
    /// and clock steps (short and long, across the wheel's reach): `pop_due` returns exactly
    /// the entries due, never one early, and `peek` the earliest time.
    #[test]
    fn the_wheel_releases_exactly_what_is_due() {
        use std::collections::BTreeMap;
        const IDS: u32 = 200;
        let mut w = TimerWheel::new();
        w.grow(IDS as usize);
        let mut model: BTreeMap<u32, u64> = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut now = 1_000_000u64;
        for step in 0..200_000 {
            match rand(10) {
                0..=4 => {
                    // Waits from 0 to about 20 ms: within the wheel and beyond it.
                    let id = rand(u64::from(IDS)) as u32;
                    let wait = if rand(8) == 0 {
                        rand(20_000_000)
                    } else {
                        rand(200_000)
                    };
                    // A new id goes in through `insert`, as the shaper's hot path does.
                    if model.insert(id, now + wait).is_some() {
                        w.set(id, now + wait);
                    } else {
                        w.insert(id, now + wait);
                    }
                }
                5 => {
                    let id = rand(u64::from(IDS)) as u32;
                    w.remove(id);
                    model.remove(&id);
                }
                6..=8 => {
                    now += if rand(50) == 0 {
                        rand(30_000_000)
                    } else {
                        rand(5_000)
                    };
                    while let Some(id) = w.pop_due(now) {
                        let t = model.remove(&id).expect("popped an id the model lacks");
                        assert!(t <= now, "step {step}: id {id} at {t} popped at {now}");
                    }
                    assert!(
                        model.values().all(|&t| t > now),
                        "step {step}: a due entry was left"
                    );
                }
                _ => {
                    let want = model.values().min().copied();
                    assert_eq!(w.peek().map(|(t, _)| t), want, "step {step}");
                    if let Some((t, id)) = w.peek() {
                        assert_eq!(model.get(&id), Some(&t));
                    }
                }
            }
            assert_eq!(w.len(), model.len());
            for id in [0, IDS / 2, IDS - 1] {
                assert_eq!(w.contains(id), model.contains_key(&id));
            }
        }
    }
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    const N: u32 = 10_000;

    /// `N` circuits held until one instant, all in one bucket (one burst reached them all).
    fn one_bucket(at: u64) -> TimerWheel {
        let mut w = TimerWheel::new();
        w.grow(N as usize);
        for id in 0..N {
            w.set(id, at);
        }
        w
    }

    #[test]
    fn a_crowded_bucket_answers_before_its_time_without_walking() {
        let at = 1_000_000;
        let mut w = one_bucket(at);
        for k in 0..1_000 {
            assert_eq!(w.peek().map(|(t, _)| t), Some(at));
            assert_eq!(w.pop_due(at - 1 - k % 2), None);
        }
        assert_eq!(
            w.visited.get(),
            0,
            "every answer came from the bucket's cache"
        );
    }

    #[test]
    fn a_crowded_bucket_empties_in_linear_time() {
        let at = 1_000_000;
        let mut w = one_bucket(at);
        let mut popped = 0;
        while let Some(id) = w.pop_due(at) {
            assert!(id < N);
            popped += 1;
            assert_eq!(w.peek().map(|(t, _)| t), (popped < N).then_some(at));
        }
        assert_eq!(popped, N);
        // One visit per pop and peek, and a walk or two: quadratic would be 10^8.
        assert!(
            w.visited.get() <= 3 * u64::from(N),
            "{} entries visited",
            w.visited.get()
        );
    }

    #[test]
    fn removing_the_earliest_costs_one_walk_then_the_cache_serves() {
        let mut w = TimerWheel::new();
        w.grow(N as usize);
        // Distinct times within one 2 us bucket, the earliest inserted last.
        for id in 0..N {
            w.set(id, 1_000_000 + u64::from(N - id) / 8);
        }
        let (t, first) = w.peek().expect("entries");
        w.remove(first);
        let walks_before = w.visited.get();
        let (t2, _) = w.peek().expect("entries");
        assert!(t2 >= t);
        for _ in 0..1_000 {
            assert_eq!(w.peek().map(|(t, _)| t), Some(t2));
        }
        assert_eq!(
            w.visited.get() - walks_before,
            u64::from(N - 1),
            "one walk, then cached"
        );
    }
}
