//! The DPDK port backend (feature `dpdk`): the EAL ([`Eal`]), mbuf pools ([`Mempool`]), owned
//! packet buffers ([`Mbuf`]), Ethernet devices ([`EthDev`]) split into per-queue halves
//! ([`RxQueue`], [`TxQueue`]) that implement the forwarder's `PortRx`/`PortTx`.
//!
//! This is the only module of the forwarder that names `dpdk_sys` and the only one that
//! allows `unsafe`; every block states its invariant under a `// SAFETY:` line. It does not
//! bind NICs to drivers (that is `dpdk-devbind.py`'s job, suggested by `cakewalk preflight`)
//! and does not reserve hugepages (that is `hugepage-setup`).
//!
//! Ownership: `Eal` is started once per process and cleaned up when its last handle goes.
//! Pools and devices keep the EAL alive; queues keep their device alive; a device keeps the
//! pools its RX rings refill from. A pool dropped while mbufs are still out is leaked on
//! purpose (and then the EAL is not cleaned up), so an `Mbuf` never points at freed memory.
// The FFI boundary to libdpdk; every block has a SAFETY note.
#![allow(unsafe_code)]

mod eal;
mod error;
mod ethdev;
mod mbuf;
mod mempool;
mod ports;

pub use eal::{Eal, LcoreGuard};
pub use error::{DpdkError, PortError};
pub use ethdev::{DevInfo, EthDev, EthDevConfig, LinkStatus, RxQueue, TxQueue};
pub use mbuf::Mbuf;
pub use mempool::Mempool;
pub use ports::{DpdkPorts, DpdkPortsConfig, PortStatus};

/// Reads the CPU's time-stamp counter (`rte_rdtsc`): the engine's cheap per-burst clock.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: rte_rdtsc only executes the rdtsc instruction; it touches no memory.
    unsafe { dpdk_sys::cw_rte_rdtsc() }
}

/// Returns the TSC frequency measured by the EAL (Hz); 0 before [`Eal::init`].
pub fn tsc_hz() -> u64 {
    // SAFETY: rte_get_tsc_hz reads a process global that EAL init sets; before init it is 0.
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}
