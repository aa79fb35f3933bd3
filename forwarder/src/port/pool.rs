//! A preallocated pool of fixed-size packet buffers for the software ports (synth, pcap,
//! AF_PACKET), and [`PoolBuf`], the owned buffer that returns itself to its pool on drop.
//!
//! Every buffer is allocated once when the pool is made, so the data path never allocates.
//! Free buffers live in a lock-free bounded queue (crossbeam's `ArrayQueue`) shared by all
//! threads, fronted by a small per-thread LIFO cache (as DPDK's mempool has per-lcore caches):
//! a thread takes and returns buffers through its cache and touches the shared queue only
//! once per half-cache refill or flush, so the common case is neither an atomic operation
//! nor a cold buffer. A thread's cache goes back to the shared queue when the thread exits.
//!
//! A pool lives for the rest of the process: it is leaked on purpose when created, so a
//! buffer needs no reference count to find its way home (an `Arc` clone per packet would be a
//! shared cache-line write per packet). Make pools once at startup, not per run.
//!
//! This module does not parse frames; ECN marking and TCP ACK facts come from [`crate::wire`].

use std::cell::RefCell;
use std::mem::ManuallyDrop;

use crossbeam_queue::ArrayQueue;
use qdisc::{Packet, TcpAckInfo};

use super::PortBuf;

/// Default bytes per buffer: a 1500-byte MTU frame with VLAN tags fits with room to spare.
pub const DEFAULT_BUF_SIZE: usize = 2048;

/// The smallest buffer: a minimum Ethernet frame (60 bytes without FCS), rounded up.
pub const MIN_BUF_SIZE: usize = 64;

struct PoolInner {
    free: ArrayQueue<Box<Frame>>,
    buf_size: usize,
    capacity: usize,
    /// Most buffers one thread's cache holds (0: no cache, for small pools).
    cache_max: usize,
}

/// One thread's cached free buffers of one pool.
struct LocalCache {
    pool: &'static PoolInner,
    // Boxed on purpose: a `PoolBuf` is this box, handed out and taken back without a move
    // of the frame itself.
    #[allow(clippy::vec_box)]
    bufs: Vec<Box<Frame>>,
}

impl Drop for LocalCache {
    fn drop(&mut self) {
        for b in self.bufs.drain(..) {
            // The shared queue has room for every buffer of the pool.
            let _ = self.pool.free.push(b);
        }
    }
}

thread_local! {
    /// This thread's caches, one per pool it used (a handful at most).
    static CACHES: RefCell<Vec<LocalCache>> = const { RefCell::new(Vec::new()) };
}

impl PoolInner {
    #[inline]
    fn take(&'static self) -> Option<Box<Frame>> {
        if self.cache_max == 0 {
            return self.free.pop();
        }
        let from_cache = CACHES.try_with(|c| {
            let mut c = c.borrow_mut();
            let cache = match c.iter().position(|l| std::ptr::eq(l.pool, self)) {
                Some(i) => &mut c[i],
                None => {
                    c.push(LocalCache {
                        pool: self,
                        bufs: Vec::with_capacity(self.cache_max),
                    });
                    c.last_mut().expect("just pushed")
                }
            };
            if cache.bufs.is_empty() {
                for _ in 0..self.cache_max / 2 {
                    match self.free.pop() {
                        Some(b) => cache.bufs.push(b),
                        None => break,
                    }
                }
            }
            cache.bufs.pop()
        });
        match from_cache {
            Ok(b) => b,
            // The thread is exiting: go to the shared queue directly.
            Err(_) => self.free.pop(),
        }
    }

    #[inline]
    fn give(&'static self, buf: Box<Frame>) {
        if self.cache_max == 0 {
            let _ = self.free.push(buf);
            return;
        }
        let mut buf = Some(buf);
        let _ = CACHES.try_with(|c| {
            let Ok(mut c) = c.try_borrow_mut() else {
                return;
            };
            let i = match c.iter().position(|l| std::ptr::eq(l.pool, self)) {
                Some(i) => i,
                None => {
                    c.push(LocalCache {
                        pool: self,
                        bufs: Vec::with_capacity(self.cache_max),
                    });
                    c.len() - 1
                }
            };
            let cache = &mut c[i];
            if cache.bufs.len() >= self.cache_max {
                for b in cache.bufs.drain(self.cache_max / 2..) {
                    let _ = self.free.push(b);
                }
            }
            if let Some(b) = buf.take() {
                cache.bufs.push(b);
            }
        });
        if let Some(b) = buf {
            // The thread is exiting (or its caches are busy): straight to the shared queue.
            let _ = self.free.push(b);
        }
    }
}

/// A fixed set of equal-size buffers. Cheap to copy (it is a `'static` reference).
#[derive(Clone, Copy)]
pub struct Pool {
    inner: &'static PoolInner,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("capacity", &self.inner.capacity)
            .field("buf_size", &self.inner.buf_size)
            .field("available", &self.available())
            .finish()
    }
}

impl Pool {
    /// Allocates `count` buffers of `buf_size` bytes each (both at least 1).
    pub fn new(count: usize, buf_size: usize) -> Pool {
        let count = count.max(1);
        let buf_size = buf_size.max(MIN_BUF_SIZE);
        let inner: &'static PoolInner = Box::leak(Box::new(PoolInner {
            free: ArrayQueue::new(count),
            buf_size,
            capacity: count,
            cache_max: (count / 16).min(256) & !1,
        }));
        for _ in 0..count {
            // The queue was made with room for exactly `count` buffers.
            let _ = inner.free.push(Box::new(Frame {
                data: vec![0u8; buf_size].into_boxed_slice(),
                len: 0,
                pool: inner,
            }));
        }
        Pool { inner }
    }

    /// Takes a buffer holding an empty frame, or `None` when every buffer is in use.
    #[inline]
    pub fn alloc(&self) -> Option<PoolBuf> {
        let mut frame = self.inner.take()?;
        frame.len = 0;
        Some(PoolBuf(ManuallyDrop::new(frame)))
    }

    /// Appends up to `n` buffers holding empty frames to `out` (one cache access for the
    /// lot); returns how many it appended, fewer when the pool runs dry.
    pub fn alloc_burst(&self, out: &mut Vec<PoolBuf>, n: usize) -> usize {
        let inner = self.inner;
        if inner.cache_max == 0 {
            return (0..n)
                .map_while(|_| self.alloc().map(|b| out.push(b)))
                .count();
        }
        let got = CACHES.try_with(|c| {
            let mut c = c.borrow_mut();
            let i = match c.iter().position(|l| std::ptr::eq(l.pool, inner)) {
                Some(i) => i,
                None => {
                    c.push(LocalCache {
                        pool: inner,
                        bufs: Vec::with_capacity(inner.cache_max),
                    });
                    c.len() - 1
                }
            };
            let cache = &mut c[i];
            let mut got = 0;
            while got < n {
                if cache.bufs.is_empty() {
                    for _ in 0..inner.cache_max / 2 {
                        match inner.free.pop() {
                            Some(b) => cache.bufs.push(b),
                            None => break,
                        }
                    }
                }
                let Some(mut frame) = cache.bufs.pop() else {
                    break;
                };
                frame.len = 0;
                out.push(PoolBuf(ManuallyDrop::new(frame)));
                got += 1;
            }
            got
        });
        match got {
            Ok(g) => g,
            Err(_) => (0..n)
                .map_while(|_| self.alloc().map(|b| out.push(b)))
                .count(),
        }
    }

    /// Takes a buffer and copies `frame` into it; `None` when the pool is empty or the frame
    /// is larger than a buffer.
    #[inline]
    pub fn alloc_copy(&self, frame: &[u8]) -> Option<PoolBuf> {
        if frame.len() > self.inner.buf_size {
            return None;
        }
        let mut b = self.alloc()?;
        b.set_len(frame.len()).copy_from_slice(frame);
        Some(b)
    }

    /// Buffers currently free: in the shared queue plus this thread's cache (other threads'
    /// caches are not counted).
    pub fn available(&self) -> usize {
        let cached = CACHES
            .try_with(|c| {
                c.borrow()
                    .iter()
                    .find(|l| std::ptr::eq(l.pool, self.inner))
                    .map_or(0, |l| l.bufs.len())
            })
            .unwrap_or(0);
        self.inner.free.len() + cached
    }

    /// Buffers in the pool.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }
}

/// A buffer's memory and its frame's length, allocated once with its pool and recycled.
struct Frame {
    data: Box<[u8]>,
    len: usize,
    pool: &'static PoolInner,
}

/// An owned buffer from a [`Pool`]; dropping it returns the memory to the pool.
///
/// One pointer wide, like a DPDK mbuf, so a packet moves through the queues in a register.
/// As (buffer, length, pool) it was 32 bytes, and LLVM moved it through the stack in
/// pieces of 8, 16 and 4 bytes, then read it back 16 bytes at a time: a load that spans
/// several smaller stores cannot be forwarded from the store buffer, and that stall was
/// the hottest instruction of the TX queue's dequeue and of the engine's offer.
///
/// Never null, so that `Option<PoolBuf>` (a queued packet's slot in a CAKE slab) is one
/// pointer too: as `Option<Box<Frame>>` inside, the option needed a tag word, a slab slot
/// took 40 bytes, and half of them straddled two cache lines.
pub struct PoolBuf(ManuallyDrop<Box<Frame>>);

const _: () = assert!(std::mem::size_of::<Option<PoolBuf>>() == std::mem::size_of::<usize>());

impl std::fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuf")
            .field("len", &self.data().len())
            .finish()
    }
}

impl PoolBuf {
    /// Sets the frame length (clamped to the buffer size) and returns the frame for writing.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> &mut [u8] {
        let f: &mut Frame = &mut self.0;
        f.len = len.min(f.data.len());
        &mut f.data[..f.len]
    }

    /// The buffer's full capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.0.data.len()
    }
}

impl Drop for PoolBuf {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the frame is taken once, here, and `self.0` is never touched again: `self`
        // is being dropped.
        let frame = unsafe { ManuallyDrop::take(&mut self.0) };
        frame.pool.give(frame);
    }
}

impl Packet for PoolBuf {
    #[inline]
    fn len(&self) -> usize {
        self.0.len
    }

    /// The whole buffer, as an mbuf's `buf_len` or the kernel's `truesize`: CAKE's memory
    /// limit then bounds the pool buffers a queue holds. Counting only the frame let a
    /// queue of small frames hold more buffers than the pool has, so the pool ran dry and
    /// the receive side, not CAKE, chose what to drop (and the queue stayed full: delay).
    #[inline]
    fn footprint(&self) -> usize {
        self.0.data.len()
    }

    #[inline]
    fn set_ce(&mut self) -> bool {
        crate::wire::set_ce(self.data_mut())
    }

    #[inline]
    fn wash_dscp(&mut self) {
        crate::wire::wash_dscp(self.data_mut());
    }

    fn tcp_ack_info(&self) -> Option<TcpAckInfo> {
        crate::wire::tcp_ack_info(self.data())
    }
}

impl PortBuf for PoolBuf {
    #[inline]
    fn data(&self) -> &[u8] {
        &self.0.data[..self.0.len]
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        let f: &mut Frame = &mut self.0;
        &mut f.data[..f.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_buffers_return_to_the_pool() {
        let pool = Pool::new(4, 128);
        let a = pool.alloc().unwrap();
        let b = pool.alloc_copy(&[1, 2, 3]).unwrap();
        assert_eq!(pool.available(), 2);
        assert_eq!(b.data(), &[1, 2, 3]);
        assert_eq!(Packet::len(&b), 3);
        drop(a);
        drop(b);
        assert_eq!(pool.available(), 4);
    }

    #[test]
    fn a_buffer_weighs_its_whole_size_in_the_qdisc_memory_limit() {
        let pool = Pool::new(4, 2048);
        let small = pool.alloc_copy(&[0; 64]).unwrap();
        assert_eq!(Packet::len(&small), 64);
        assert_eq!(small.footprint(), 2048);
        // So a memory limit bounds the buffers a queue holds, whatever the frames' size.
        let mut cake: qdisc::cake::Cake<PoolBuf> =
            qdisc::cake::Cake::new(&qdisc::cake::CakeConfig {
                memlimit: Some(8 * 1024),
                ..qdisc::cake::CakeConfig::default()
            })
            .unwrap();
        let pool = Pool::new(16, 2048);
        let meta = qdisc::testing::udp_meta(1, 2, 3, 0);
        let mut dropped = 0;
        for _ in 0..16 {
            let r = qdisc::Qdisc::enqueue(&mut cake, 0, pool.alloc_copy(&[0; 64]).unwrap(), &meta);
            dropped += r.dropped_packets;
        }
        assert_eq!(
            qdisc::Qdisc::len(&cake),
            4,
            "8 KiB holds four 2 KiB buffers"
        );
        assert_eq!(dropped, 12);
        assert_eq!(pool.available(), 12, "the dropped buffers went home");
    }

    #[test]
    fn an_empty_pool_says_none_instead_of_allocating() {
        let pool = Pool::new(2, 64);
        let held: Vec<_> = (0..2).map(|_| pool.alloc().unwrap()).collect();
        assert!(pool.alloc().is_none());
        drop(held);
        assert!(pool.alloc().is_some());
    }

    #[test]
    fn a_burst_allocation_stops_when_the_pool_runs_dry() {
        for size in [8, 4096] {
            let pool = Pool::new(size, 64);
            let mut out = Vec::new();
            assert_eq!(pool.alloc_burst(&mut out, 5), 5);
            assert_eq!(pool.alloc_burst(&mut out, size), size - 5);
            assert!(pool.alloc().is_none());
            out.clear();
            assert_eq!(pool.available(), size);
        }
    }

    #[test]
    fn a_buffer_is_one_pointer_and_starts_empty_when_reused() {
        assert_eq!(std::mem::size_of::<PoolBuf>(), std::mem::size_of::<usize>());
        let pool = Pool::new(1, 64);
        let mut b = pool.alloc_copy(&[7; 10]).unwrap();
        assert_eq!(b.capacity(), 64);
        assert_eq!(b.set_len(1000).len(), 64, "clamped to the buffer");
        drop(b);
        let b = pool.alloc().unwrap();
        assert_eq!(Packet::len(&b), 0);
        assert!(b.data().is_empty());
    }

    #[test]
    fn frames_larger_than_a_buffer_are_refused() {
        let pool = Pool::new(1, 64);
        assert!(pool.alloc_copy(&[0u8; 65]).is_none());
        assert_eq!(pool.available(), 1);
    }

    #[test]
    fn a_large_pool_recycles_the_same_hot_buffers_on_one_thread() {
        let pool = Pool::new(4096, 64);
        let first = pool.alloc().unwrap();
        let addr = first.data().as_ptr();
        drop(first);
        let again = pool.alloc().unwrap();
        assert_eq!(
            again.data().as_ptr(),
            addr,
            "LIFO: the buffer just freed comes back"
        );
        drop(again);
        assert_eq!(pool.available(), 4096);
    }

    #[test]
    fn buffers_cached_by_an_exiting_thread_return_to_the_shared_queue() {
        let pool = Pool::new(4096, 64);
        std::thread::spawn(move || {
            let held: Vec<_> = (0..100).map(|_| pool.alloc().unwrap()).collect();
            drop(held);
        })
        .join()
        .unwrap();
        assert_eq!(pool.available(), 4096);
    }

    #[test]
    fn buffers_move_between_threads_and_come_home() {
        let pool = Pool::new(64, 64);
        let bufs: Vec<_> = (0..64).map(|_| pool.alloc().unwrap()).collect();
        std::thread::spawn(move || drop(bufs)).join().unwrap();
        assert_eq!(pool.available(), 64);
    }
}
