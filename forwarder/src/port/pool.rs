//! A preallocated pool of fixed-size packet buffers for the software ports (synth, pcap,
//! AF_PACKET), and [`PoolBuf`], the owned buffer that returns itself to its pool on drop.
//!
//! Every buffer is allocated once when the pool is made; taking and returning one is a pop
//! and a push on a lock-free bounded queue (crossbeam's `ArrayQueue`), so the data path never
//! allocates. A pool lives for the rest of the process: it is leaked on purpose when created,
//! so a buffer needs no reference count to find its way home (an `Arc` clone per packet would
//! be a shared cache-line write per packet). Make pools once at startup, not per run.
//!
//! This module does not parse frames; ECN marking and TCP ACK facts come from [`crate::wire`].

use crossbeam_queue::ArrayQueue;
use qdisc::{Packet, TcpAckInfo};

use super::PortBuf;

/// Default bytes per buffer: a 1500-byte MTU frame with VLAN tags fits with room to spare.
pub const DEFAULT_BUF_SIZE: usize = 2048;

struct PoolInner {
    free: ArrayQueue<Box<[u8]>>,
    buf_size: usize,
    capacity: usize,
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
        let buf_size = buf_size.max(64);
        let free = ArrayQueue::new(count);
        for _ in 0..count {
            // The queue was made with room for exactly `count` buffers.
            let _ = free.push(vec![0u8; buf_size].into_boxed_slice());
        }
        let inner: &'static PoolInner = Box::leak(Box::new(PoolInner {
            free,
            buf_size,
            capacity: count,
        }));
        Pool { inner }
    }

    /// Takes a buffer holding an empty frame, or `None` when every buffer is in use.
    #[inline]
    pub fn alloc(&self) -> Option<PoolBuf> {
        let buf = self.inner.free.pop()?;
        Some(PoolBuf {
            buf,
            len: 0,
            pool: self.inner,
        })
    }

    /// Takes a buffer and copies `frame` into it; `None` when the pool is empty or the frame
    /// is larger than a buffer.
    #[inline]
    pub fn alloc_copy(&self, frame: &[u8]) -> Option<PoolBuf> {
        if frame.len() > self.inner.buf_size {
            return None;
        }
        let mut b = self.alloc()?;
        b.buf[..frame.len()].copy_from_slice(frame);
        b.len = frame.len() as u32;
        Some(b)
    }

    /// Buffers currently free.
    pub fn available(&self) -> usize {
        self.inner.free.len()
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

/// An owned buffer from a [`Pool`]; dropping it returns the memory to the pool.
pub struct PoolBuf {
    buf: Box<[u8]>,
    len: u32,
    pool: &'static PoolInner,
}

impl std::fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuf").field("len", &self.len).finish()
    }
}

impl PoolBuf {
    /// Sets the frame length (clamped to the buffer size) and returns the frame for writing.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> &mut [u8] {
        let len = len.min(self.buf.len());
        self.len = len as u32;
        &mut self.buf[..len]
    }

    /// The buffer's full capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // The queue holds exactly as many slots as buffers exist, so a push cannot fail.
        let _ = self.pool.free.push(buf);
    }
}

impl Packet for PoolBuf {
    #[inline]
    fn len(&self) -> usize {
        self.len as usize
    }

    #[inline]
    fn set_ce(&mut self) -> bool {
        crate::wire::set_ce(&mut self.buf[..self.len as usize])
    }

    fn tcp_ack_info(&self) -> Option<TcpAckInfo> {
        crate::wire::tcp_ack_info(&self.buf[..self.len as usize])
    }
}

impl PortBuf for PoolBuf {
    #[inline]
    fn data(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len as usize]
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
    fn an_empty_pool_says_none_instead_of_allocating() {
        let pool = Pool::new(2, 64);
        let held: Vec<_> = (0..2).map(|_| pool.alloc().unwrap()).collect();
        assert!(pool.alloc().is_none());
        drop(held);
        assert!(pool.alloc().is_some());
    }

    #[test]
    fn frames_larger_than_a_buffer_are_refused() {
        let pool = Pool::new(1, 64);
        assert!(pool.alloc_copy(&[0u8; 65]).is_none());
        assert_eq!(pool.available(), 1);
    }

    #[test]
    fn buffers_move_between_threads_and_come_home() {
        let pool = Pool::new(64, 64);
        let bufs: Vec<_> = (0..64).map(|_| pool.alloc().unwrap()).collect();
        std::thread::spawn(move || drop(bufs)).join().unwrap();
        assert_eq!(pool.available(), 64);
    }
}
