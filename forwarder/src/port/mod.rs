//! The `Port` contract every backend implements, and the backends: `synth` (the built-in
//! generator and verifying sink), `pcap` (files), `afpacket` (Linux interfaces) and, behind the
//! `dpdk` feature, `dpdk`.
//!
//! A port is split once, before the workers start, into per-queue receive and transmit
//! halves that each belong to exactly one worker (`Send`, used through `&mut self`). Bursts
//! are caller-owned `Vec`s created once with capacity and reused, so the data path never
//! allocates.

use qdisc::Packet;

/// An owned packet buffer from a port's preallocated pool. Dropping it returns it to the pool.
pub trait PortBuf: Packet + Send + 'static {
    /// The frame, L2 header first.
    fn data(&self) -> &[u8];
    /// The frame, writable in place (ECN marking, DSCP wash).
    fn data_mut(&mut self) -> &mut [u8];
    /// The NIC's L4 RSS hash, when the hardware said it is valid.
    fn rss_hash(&self) -> Option<u32> {
        None
    }
}

/// The receive half of one port queue.
pub trait PortRx: Send {
    /// The buffer type this port hands out.
    type Buf: PortBuf;
    /// Appends up to `max` received packets to `burst`; returns how many were appended.
    fn rx_burst(&mut self, burst: &mut Vec<Self::Buf>, max: usize) -> usize;
}

/// The transmit half of one port queue.
pub trait PortTx: Send {
    /// The buffer type this port accepts.
    type Buf: PortBuf;
    /// Transmits packets from the front of `burst` and removes the ones sent; the ones the
    /// ring had no room for stay in `burst`, in order. Returns how many were sent.
    fn tx_burst(&mut self, burst: &mut Vec<Self::Buf>) -> usize;
}
