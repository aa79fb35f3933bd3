//! Packet-buffer pools (`rte_pktmbuf_pool_create`), one per NUMA socket that has ports. A
//! [`Mempool`] is created before the workers start and outlives every device that refills
//! from it; cloning it is cheap (the pool itself is shared).

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use super::eal::Eal;
use super::error::{rte_errno, strerror, PortError};
use super::mbuf::Mbuf;

/// A DPDK mbuf pool.
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    raw: NonNull<dpdk_sys::rte_mempool>,
    name: String,
    size: u32,
    socket: i32,
    eal: Eal,
}

// SAFETY: rte_mempool get/put are multi-producer/multi-consumer safe (the default ring ops);
// the pointer itself is never freed while a handle exists.
unsafe impl Send for PoolInner {}
// SAFETY: as above; every method takes &self and only calls thread-safe mempool functions.
unsafe impl Sync for PoolInner {}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.inner.name)
            .field("size", &self.inner.size)
            .field("socket", &self.inner.socket)
            .finish()
    }
}

/// Per-lcore cache of mbufs (DPDK's usual value; must stay below size / 1.5).
const CACHE_SIZE: u32 = 256;

impl Mempool {
    /// Creates a pool of `mbufs` buffers of `RTE_MBUF_DEFAULT_BUF_SIZE` (2 KiB of data plus
    /// headroom) on NUMA `socket` (`-1` for any).
    ///
    /// # Errors
    /// [`PortError::MempoolCreate`] when DPDK has not enough (hugepage) memory, or the name
    /// is taken.
    pub fn new(eal: &Eal, name: &str, mbufs: u32, socket: i32) -> Result<Mempool, PortError> {
        let cname = CString::new(name).map_err(|_| PortError::BadArgument(name.to_owned()))?;
        let cache = CACHE_SIZE.min(mbufs / 2);
        let buf_size = u16::try_from(dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE)
            .expect("RTE_MBUF_DEFAULT_BUF_SIZE is 2176");
        // SAFETY: the EAL is running (eal proves it); cname is a valid C string that DPDK
        // copies.
        let raw = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), mbufs, cache, 0, buf_size, socket)
        };
        let Some(raw) = NonNull::new(raw) else {
            return Err(PortError::MempoolCreate {
                name: name.to_owned(),
                mbufs,
                socket,
                reason: strerror(rte_errno()),
            });
        };
        Ok(Mempool {
            inner: Arc::new(PoolInner {
                raw,
                name: name.to_owned(),
                size: mbufs,
                socket,
                eal: eal.clone(),
            }),
        })
    }

    /// Takes one empty mbuf from the pool.
    ///
    /// # Errors
    /// [`PortError::MempoolExhausted`] when every mbuf is in use.
    pub fn alloc(&self) -> Result<Mbuf, PortError> {
        // SAFETY: the pool pointer is valid while self exists.
        let m = unsafe { dpdk_sys::cw_rte_pktmbuf_alloc(self.inner.raw.as_ptr()) };
        // SAFETY: a non-NULL result is a freshly allocated mbuf that we now own.
        unsafe { Mbuf::from_raw(m) }.ok_or_else(|| PortError::MempoolExhausted {
            name: self.inner.name.clone(),
            size: self.inner.size,
        })
    }

    /// Mbufs currently free in the pool (including per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool pointer is valid while self exists; the count is a read.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.inner.raw.as_ptr()) }
    }

    /// Mbufs currently taken out of the pool (in rings, queues or the caller's hands).
    pub fn in_use(&self) -> u32 {
        // SAFETY: as in `available`.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.inner.raw.as_ptr()) }
    }

    /// The pool's size in mbufs.
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The NUMA socket the pool was created on (-1 for any).
    pub fn socket(&self) -> i32 {
        self.inner.socket
    }

    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.inner.raw.as_ptr()
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: the pool is valid until freed below; the count is a read.
        let in_use = unsafe { dpdk_sys::rte_mempool_in_use_count(self.raw.as_ptr()) };
        if in_use == 0 {
            // SAFETY: no mbuf of this pool is outstanding and no other handle exists.
            unsafe { dpdk_sys::rte_mempool_free(self.raw.as_ptr()) };
        } else {
            // Some Mbuf still points into this pool: freeing it would leave that dangling.
            self.eal.mark_leaked();
        }
    }
}
