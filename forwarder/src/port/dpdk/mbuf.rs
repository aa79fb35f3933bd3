//! [`Mbuf`]: an owned, single-segment DPDK packet buffer. It implements `qdisc::Packet` and
//! the forwarder's `PortBuf`: the data view is zero-copy, ECN is marked in place, the NIC's
//! RSS hash is reported when valid (CAKE reuses it as the flow hash), and it returns to its
//! pool on drop.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use qdisc::{Packet, TcpAckInfo};

use crate::port::PortBuf;

/// An owned mbuf. `#[repr(transparent)]` so a `[Mbuf]` is an `rte_mbuf *` array that the
/// burst functions fill and drain without copying.
#[repr(transparent)]
pub struct Mbuf(NonNull<dpdk_sys::rte_mbuf>);

// SAFETY: an Mbuf is the only owner of its rte_mbuf (refcount 1, never shared), and freeing
// returns it through the thread-safe mempool ops, so it may move between threads.
unsafe impl Send for Mbuf {}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf").field("len", &self.len()).finish()
    }
}

impl Mbuf {
    /// Takes ownership of a raw mbuf; `None` for NULL.
    ///
    /// # Safety
    /// - `raw` is NULL or a valid mbuf from a pool that outlives the returned value (every
    ///   pool made by [`super::Mempool`] does);
    /// - nobody else owns or frees it afterwards.
    pub unsafe fn from_raw(raw: *mut dpdk_sys::rte_mbuf) -> Option<Mbuf> {
        NonNull::new(raw).map(Mbuf)
    }

    /// Gives up ownership without freeing (the driver takes it on transmit).
    pub fn into_raw(self) -> *mut dpdk_sys::rte_mbuf {
        ManuallyDrop::new(self).0.as_ptr()
    }

    #[inline]
    fn raw(&self) -> &dpdk_sys::rte_mbuf {
        // SAFETY: the pointer is valid and uniquely owned for self's lifetime.
        unsafe { self.0.as_ref() }
    }

    /// Extends the data by `len` bytes at the tail and returns them, or `None` when the
    /// buffer has no room (used to build frames, e.g. in tests and generators).
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: the mbuf is valid and owned; rte_pktmbuf_append checks the tailroom.
        let p = unsafe { dpdk_sys::cw_rte_pktmbuf_append(self.0.as_ptr(), len) };
        if p.is_null() {
            return None;
        }
        // SAFETY: DPDK returned `len` writable bytes inside this mbuf's buffer, which we own.
        Some(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), usize::from(len)) })
    }

    /// The NIC's RSS hash, when `ol_flags` says it is valid.
    #[inline]
    pub fn rss(&self) -> Option<u32> {
        let m = self.raw();
        if m.ol_flags & u64::from(dpdk_sys::RTE_MBUF_F_RX_RSS_HASH) != 0 {
            // SAFETY: `hash` is the only member of this union; any bit pattern is valid.
            let hash = unsafe { m.__bindgen_anon_2.hash };
            // SAFETY: with RTE_MBUF_F_RX_RSS_HASH set, the driver wrote the `rss` member of
            // the hash union (a plain u32, valid for any bit pattern).
            Some(unsafe { hash.rss })
        } else {
            None
        }
    }

    /// Sets (or clears) the RSS hash the way a NIC does, with `RTE_MBUF_F_RX_RSS_HASH`: for
    /// software sources that compute their own flow hash, and for tests.
    pub fn set_rss(&mut self, hash: Option<u32>) {
        let flag = u64::from(dpdk_sys::RTE_MBUF_F_RX_RSS_HASH);
        // SAFETY: the mbuf is valid and uniquely owned (&mut self); plain field writes.
        let m = unsafe { self.0.as_mut() };
        match hash {
            Some(h) => {
                m.ol_flags |= flag;
                m.__bindgen_anon_2.hash.rss = h;
            }
            None => m.ol_flags &= !flag,
        }
    }

    /// The port the mbuf was received on.
    pub fn port(&self) -> u16 {
        self.raw().port
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf; freeing returns it (and any chained segments) to its pool.
        unsafe { dpdk_sys::cw_rte_pktmbuf_free(self.0.as_ptr()) };
    }
}

impl Packet for Mbuf {
    #[inline]
    fn len(&self) -> usize {
        self.raw().pkt_len as usize
    }

    #[inline]
    fn footprint(&self) -> usize {
        usize::from(self.raw().buf_len)
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

impl PortBuf for Mbuf {
    /// The first segment's bytes (ports are set up without scatter, so that is the frame).
    #[inline]
    fn data(&self) -> &[u8] {
        let m = self.raw();
        // SAFETY: data_off lies inside the buffer that buf_addr points to (DPDK keeps
        // data_off + data_len <= buf_len).
        let start = unsafe { m.buf_addr.cast::<u8>().add(usize::from(m.data_off)) };
        // SAFETY: start is the first of data_len initialised bytes inside the mbuf's buffer,
        // owned by self and not aliased mutably while &self lives.
        unsafe { std::slice::from_raw_parts(start, usize::from(m.data_len)) }
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        let m = self.raw();
        let (addr, off, len) = (m.buf_addr.cast::<u8>(), m.data_off, m.data_len);
        // SAFETY: as in `data`.
        let start = unsafe { addr.add(usize::from(off)) };
        // SAFETY: as in `data`, and &mut self makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(start, usize::from(len)) }
    }

    #[inline]
    fn rss_hash(&self) -> Option<u32> {
        self.rss()
    }
}
