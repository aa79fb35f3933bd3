//! The AF_PACKET backend: a Linux interface (a veth in a lab, a container's eth0, a real NIC
//! without DPDK) as a cakewalk port.
//!
//! Each receive queue is one `SOCK_RAW` packet socket bound to the interface for every protocol,
//! with the interface in promiscuous mode and `PACKET_IGNORE_OUTGOING` set so a socket never
//! sees what cakewalk itself transmits. With several receive queues the sockets join one
//! `PACKET_FANOUT` group in hash mode, so the kernel spreads flows over queues and keeps each
//! flow on one queue (IP fragments are passed on as they came, never reassembled); the group
//! ignores outgoing frames too. Each transmit queue is its own socket bound with protocol 0,
//! which receives nothing. Sockets are non-blocking; batches go through
//! `recvmmsg`/`sendmmsg` straight into and out of [`PoolBuf`]s, so a burst costs one system
//! call per 64 frames and no allocation or copy in user space.
//!
//! **Oversize frames.** A frame longer than a pool buffer (a GRO/GSO super-frame from a veth
//! whose peer has offloads on, or a jumbo frame) cannot be forwarded intact: it is counted in
//! `rx_oversize` and dropped, deliberately, rather than forwarded truncated. Turn the offloads
//! off on the hosts that send into the port (`ethtool -K DEV tx off tso off gso off gro off`)
//! or raise the pool's buffer size. `cakewalk preflight --config FILE` reads the port's GRO,
//! LRO, TSO and GSO state and MTU through [`link_facts`] and names the fix before a start.
//!
//! **Checksum offload.** A sender with `tx-checksumming` on (every veth by default) leaves
//! TCP and UDP checksums for its device to finish; such a frame arrives here unfinished
//! (`TP_STATUS_CSUMNOTREADY`) and the port completes the checksum before handing it on.
//!
//! **VLAN tags.** The kernel takes the outermost VLAN tag out of every received frame
//! (`skb_vlan_untag`, whatever the interface's `rxvlan` setting) and shows it to a packet
//! socket only in its `PACKET_AUXDATA` message; the port puts it back in the frame, so a tagged
//! frame leaves on the VLAN it came in on. A frame that fits a buffer only without its tag is
//! counted in `rx_oversize`.
//!
//! **Transmit.** Frames go through the interface's kernel qdisc unless
//! [`AfPacketConfig::qdisc_bypass`] is set (a lab may put a kernel HTB there for comparison).
//! When the kernel's qdisc drops a frame (`ENOBUFS`) it counts as handed over and is counted
//! in `tx_kernel_drops`; when the socket's send buffer is full (`EAGAIN`) the frame stays with
//! the caller, like a full NIC ring.
//!
//! This module does not parse frames and does not decide what to forward where; the `unsafe`
//! system calls live in its `sys` module.

mod sys;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::pool::{Pool, PoolBuf};
use super::{PortBuf, PortRx, PortTx, Refused};

use sys::{PacketSocket, Received, BATCH_MAX, ETH_P_ALL};

/// Linux capability bit numbers (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
/// How many receive bursts pass between reads of the kernel's socket drop counter (a power
/// of two).
const KERNEL_STATS_EVERY: u32 = 4096;
/// The most receive queues (fanout group members) one port opens.
pub const MAX_QUEUES: usize = 64;

/// Why an AF_PACKET port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    /// No interface of that name in this network namespace.
    #[error("interface '{iface}' not found; list with `ip link`")]
    InterfaceNotFound {
        /// The name given.
        iface: String,
    },
    /// Packet sockets need CAP_NET_RAW.
    #[error(
        "opening a packet socket on '{iface}' needs root or CAP_NET_RAW; run as root, \
         or grant it with `setcap cap_net_raw,cap_net_admin+ep` on the binary \
         (in a container: --cap-add NET_RAW --cap-add NET_ADMIN)"
    )]
    PermissionDenied {
        /// The interface.
        iface: String,
    },
    /// The queue counts are out of range.
    #[error("{what} = {value} is out of range for '{iface}'; use 1 to {MAX_QUEUES}")]
    BadQueueCount {
        /// The interface.
        iface: String,
        /// Which setting.
        what: &'static str,
        /// The value given.
        value: usize,
    },
    /// A system call failed for another reason.
    #[error("{call} on '{iface}' failed")]
    Syscall {
        /// The call or option that failed.
        call: &'static str,
        /// The interface.
        iface: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Settings of one AF_PACKET port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// The interface name, as `ip link` lists it.
    pub iface: String,
    /// Receive queues: one socket each, in a hash fanout group when more than one.
    pub rx_queues: usize,
    /// Transmit queues: one socket each.
    pub tx_queues: usize,
    /// Put the interface in promiscuous mode while the port is open (a bridge-style forwarder
    /// must see frames addressed to other MACs).
    pub promiscuous: bool,
    /// Skip the interface's kernel qdisc on transmit (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
    /// Receive socket buffer in bytes (forced past `rmem_max` when the process has
    /// CAP_NET_ADMIN). Frames wait here when the worker falls behind, unseen by the shaper, so
    /// it is kept small: 1 MiB is about 450 full-size frames, 27 ms at 200 Mbit/s. Frames
    /// beyond it are dropped by the kernel and counted in `rx_kernel_drops`.
    pub rx_buffer_bytes: usize,
    /// Send socket buffer in bytes (forced past `wmem_max` when allowed). It bounds the frames
    /// in flight below the port, including those a kernel qdisc on the interface holds.
    pub tx_buffer_bytes: usize,
}

impl AfPacketConfig {
    /// One receive and one transmit queue on `iface`, promiscuous, 1 MiB receive and 4 MiB
    /// send buffers.
    pub fn new(iface: impl Into<String>) -> AfPacketConfig {
        AfPacketConfig {
            iface: iface.into(),
            rx_queues: 1,
            tx_queues: 1,
            promiscuous: true,
            qdisc_bypass: false,
            rx_buffer_bytes: 1 << 20,
            tx_buffer_bytes: 4 << 20,
        }
    }
}

/// Counters of one receive queue, published once per burst by its single writer.
#[derive(Debug, Default)]
pub struct RxCounters {
    /// Frames handed to the caller.
    pub packets: AtomicU64,
    /// Bytes handed to the caller.
    pub bytes: AtomicU64,
    /// Frames longer than a pool buffer, dropped.
    pub oversize: AtomicU64,
    /// Bursts cut short because the pool had no free buffer.
    pub no_buffer: AtomicU64,
    /// Frames the kernel dropped because the socket's receive buffer was full.
    pub kernel_drops: AtomicU64,
    /// Receive calls that failed with an unexpected error.
    pub errors: AtomicU64,
}

/// Counters of one transmit queue, published once per burst by its single writer.
#[derive(Debug, Default)]
pub struct TxCounters {
    /// Frames the kernel accepted.
    pub packets: AtomicU64,
    /// Bytes the kernel accepted.
    pub bytes: AtomicU64,
    /// Frames the interface's kernel qdisc dropped (`ENOBUFS`).
    pub kernel_drops: AtomicU64,
    /// Frames refused for good (too big for the interface, interface down); dropped.
    pub errors: AtomicU64,
    /// Bursts that stopped early because the socket's send buffer was full.
    pub full: AtomicU64,
}

/// Sums of a port's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AfPacketTotals {
    /// Frames received and handed on.
    pub rx_packets: u64,
    /// Bytes received and handed on.
    pub rx_bytes: u64,
    /// Frames dropped on receive for being longer than a buffer.
    pub rx_oversize: u64,
    /// Receive bursts cut short by an empty pool.
    pub rx_no_buffer: u64,
    /// Frames the kernel dropped before cakewalk read them (socket buffer full).
    pub rx_kernel_drops: u64,
    /// Failed receive calls.
    pub rx_errors: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames the kernel qdisc dropped after cakewalk sent them.
    pub tx_kernel_drops: u64,
    /// Frames the kernel refused; dropped.
    pub tx_errors: u64,
    /// Transmit bursts that met a full send buffer.
    pub tx_full: u64,
}

/// The counters of every queue of one port.
#[derive(Debug, Default)]
pub struct AfPacketStats {
    /// One entry per receive queue.
    pub rx: Vec<Arc<RxCounters>>,
    /// One entry per transmit queue.
    pub tx: Vec<Arc<TxCounters>>,
}

impl AfPacketStats {
    /// Sums the counters of every queue.
    pub fn totals(&self) -> AfPacketTotals {
        let mut t = AfPacketTotals::default();
        for r in &self.rx {
            t.rx_packets += r.packets.load(Relaxed);
            t.rx_bytes += r.bytes.load(Relaxed);
            t.rx_oversize += r.oversize.load(Relaxed);
            t.rx_no_buffer += r.no_buffer.load(Relaxed);
            t.rx_kernel_drops += r.kernel_drops.load(Relaxed);
            t.rx_errors += r.errors.load(Relaxed);
        }
        for x in &self.tx {
            t.tx_packets += x.packets.load(Relaxed);
            t.tx_bytes += x.bytes.load(Relaxed);
            t.tx_kernel_drops += x.kernel_drops.load(Relaxed);
            t.tx_errors += x.errors.load(Relaxed);
            t.tx_full += x.full.load(Relaxed);
        }
        t
    }
}

/// An open AF_PACKET port: its queues, not yet handed to workers.
#[derive(Debug)]
pub struct AfPacketPort {
    rx: Vec<AfPacketRx>,
    tx: Vec<AfPacketTx>,
    stats: Arc<AfPacketStats>,
    iface: String,
    ifindex: u32,
}

impl AfPacketPort {
    /// Opens the sockets of `cfg.iface`, taking receive buffers from `pool`.
    ///
    /// # Errors
    /// [`AfPacketError::InterfaceNotFound`] when no such interface exists here,
    /// [`AfPacketError::PermissionDenied`] without CAP_NET_RAW, [`AfPacketError::Syscall`]
    /// for any other failure (naming the call).
    pub fn open(cfg: &AfPacketConfig, pool: Pool) -> Result<AfPacketPort, AfPacketError> {
        let iface = cfg.iface.as_str();
        for (what, value) in [("rx_queues", cfg.rx_queues), ("tx_queues", cfg.tx_queues)] {
            if value == 0 || value > MAX_QUEUES {
                return Err(AfPacketError::BadQueueCount {
                    iface: iface.to_string(),
                    what,
                    value,
                });
            }
        }
        let ifindex = sys::if_index(iface)
            .map_err(|e| syscall_err("if_nametoindex", iface, e))?
            .ok_or_else(|| AfPacketError::InterfaceNotFound {
                iface: iface.to_string(),
            })?;
        // The fanout group id, chosen by the kernel when the first socket joins.
        let mut fanout_group: Option<libc::c_int> = None;
        let mut stats = AfPacketStats::default();
        let mut rx = Vec::with_capacity(cfg.rx_queues);
        for _ in 0..cfg.rx_queues {
            let sock = open_socket(iface)?;
            set_buffer(&sock, iface, true, cfg.rx_buffer_bytes)?;
            sock.set_int(libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
                .map_err(|e| syscall_err("setsockopt(PACKET_IGNORE_OUTGOING)", iface, e))?;
            // The kernel always takes a received frame's VLAN tag out of the data (even with
            // rxvlan off); it reaches a packet socket only in this control message, and is
            // put back before the frame is handed on (see `restore_vlan_tag`).
            sock.set_int(libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)
                .map_err(|e| syscall_err("setsockopt(PACKET_AUXDATA)", iface, e))?;
            sock.bind(ifindex, ETH_P_ALL)
                .map_err(|e| syscall_err("bind", iface, e))?;
            if cfg.promiscuous {
                sock.add_promisc(ifindex).map_err(|e| {
                    syscall_err("setsockopt(PACKET_ADD_MEMBERSHIP promisc)", iface, e)
                })?;
            }
            if cfg.rx_queues > 1 {
                // IGNORE_OUTGOING: a group delivers through its own hook, which ignores the
                // sockets' PACKET_IGNORE_OUTGOING; without the flag the queues read back every
                // frame the port sends, and two such ports bounce frames between them forever.
                // No DEFRAG: it hands the sockets reassembled datagrams, which a forwarder
                // cannot send on (longer than the MTU, or than a buffer). The flow hash leaves
                // the ports out of every fragment, so one datagram's fragments still share a
                // queue.
                let mode = (libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING)
                    as libc::c_int;
                let fanout_err = |e| syscall_err("setsockopt(PACKET_FANOUT)", iface, e);
                match fanout_group {
                    Some(id) => sock
                        .set_int(libc::SOL_PACKET, libc::PACKET_FANOUT, id | (mode << 16))
                        .map_err(fanout_err)?,
                    None => {
                        // Group ids are shared by every interface and process of the
                        // namespace, and joining an id that another interface's group holds
                        // fails (EINVAL): an id derived from the pid and ifindex made two
                        // ports whose ifindexes differ by 256 refuse to start. The kernel
                        // picks an unused id instead (UNIQUEID); the other queues join it.
                        let unique = libc::PACKET_FANOUT_FLAG_UNIQUEID as libc::c_int;
                        sock.set_int(libc::SOL_PACKET, libc::PACKET_FANOUT, (mode | unique) << 16)
                            .map_err(fanout_err)?;
                        let joined = sock
                            .get_int(libc::SOL_PACKET, libc::PACKET_FANOUT)
                            .map_err(|e| syscall_err("getsockopt(PACKET_FANOUT)", iface, e))?;
                        fanout_group = Some(joined & 0xffff);
                    }
                }
            }
            let counters = Arc::new(RxCounters::default());
            stats.rx.push(counters.clone());
            rx.push(AfPacketRx {
                iface: iface.to_string(),
                queue: rx.len(),
                sock,
                pool,
                spare: Vec::with_capacity(BATCH_MAX),
                counters,
                bursts: 0,
                published: RxTally::default(),
                tally: RxTally::default(),
            });
        }
        let mut tx = Vec::with_capacity(cfg.tx_queues);
        for _ in 0..cfg.tx_queues {
            let sock = open_socket(iface)?;
            set_buffer(&sock, iface, false, cfg.tx_buffer_bytes)?;
            if cfg.qdisc_bypass {
                sock.set_int(libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
                    .map_err(|e| syscall_err("setsockopt(PACKET_QDISC_BYPASS)", iface, e))?;
            }
            // Protocol 0: this socket transmits on the interface and receives nothing.
            sock.bind(ifindex, 0)
                .map_err(|e| syscall_err("bind", iface, e))?;
            let counters = Arc::new(TxCounters::default());
            stats.tx.push(counters.clone());
            tx.push(AfPacketTx {
                iface: iface.to_string(),
                queue: tx.len(),
                sock,
                counters,
                tally: TxTally::default(),
                refused: Refused::default(),
            });
        }
        Ok(AfPacketPort {
            rx,
            tx,
            stats: Arc::new(stats),
            iface: iface.to_string(),
            ifindex,
        })
    }

    /// The shared counters of this port's queues.
    pub fn stats(&self) -> Arc<AfPacketStats> {
        self.stats.clone()
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// A check that says what went wrong once the interface this port is bound to is gone
    /// (deleted, or deleted and made again under the same name: a new index the sockets are
    /// not bound to). A link that is merely down needs nothing: the sockets stay bound and
    /// work again when it comes back up.
    pub fn health_check(&self) -> impl Fn() -> Option<String> + Send + Sync + 'static {
        let (iface, ifindex) = (self.iface.clone(), self.ifindex);
        move || {
            match sys::if_index(&iface) {
            Ok(Some(i)) if i == ifindex => None,
            Ok(Some(i)) => Some(format!(
                "interface '{iface}' was deleted and made again (index {ifindex}, now {i}); this port's sockets are bound to the old one"
            )),
            Ok(None) => Some(format!("interface '{iface}' disappeared")),
            // Cannot tell (out of sockets?): not a reason to stop forwarding.
            Err(_) => None,
        }
        }
    }

    /// Hands out the queues, one per worker.
    pub fn split(self) -> (Vec<AfPacketRx>, Vec<AfPacketTx>) {
        (self.rx, self.tx)
    }
}

fn syscall_err(call: &'static str, iface: &str, source: io::Error) -> AfPacketError {
    AfPacketError::Syscall {
        call,
        iface: iface.to_string(),
        source,
    }
}

fn open_socket(iface: &str) -> Result<PacketSocket, AfPacketError> {
    PacketSocket::open().map_err(|e| match e.kind() {
        io::ErrorKind::PermissionDenied => AfPacketError::PermissionDenied {
            iface: iface.to_string(),
        },
        _ => syscall_err("socket(AF_PACKET, SOCK_RAW)", iface, e),
    })
}

/// Sets a socket buffer size, forcing past the sysctl maximum when allowed and falling back
/// to the capped size otherwise.
fn set_buffer(
    sock: &PacketSocket,
    iface: &str,
    rx: bool,
    bytes: usize,
) -> Result<(), AfPacketError> {
    let bytes = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    let (force, plain, call) = if rx {
        (
            libc::SO_RCVBUFFORCE,
            libc::SO_RCVBUF,
            "setsockopt(SO_RCVBUF)",
        )
    } else {
        (
            libc::SO_SNDBUFFORCE,
            libc::SO_SNDBUF,
            "setsockopt(SO_SNDBUF)",
        )
    };
    if sock.set_int(libc::SOL_SOCKET, force, bytes).is_ok() {
        return Ok(());
    }
    sock.set_int(libc::SOL_SOCKET, plain, bytes)
        .map_err(|e| syscall_err(call, iface, e))
}

/// An interface as the kernel of this network namespace describes it, for preflight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFacts {
    /// The interface index (two names of one interface share it).
    pub index: u32,
    /// Administratively up (`IFF_UP`, `ip link set DEV up`).
    pub up: bool,
    /// Carrier present (`IFF_RUNNING`: cable in, veth peer up).
    pub carrier: bool,
    /// The MTU (bytes of IP packet; the frame adds 14 of Ethernet header).
    pub mtu: u32,
    /// Offload state, when the driver answers ethtool.
    pub offloads: Option<Offloads>,
    /// The kernel driver ("veth", "ixgbe"), when known.
    pub driver: Option<String>,
}

/// The offloads that decide how long a frame a packet socket may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offloads {
    /// Generic receive offload: the kernel merges received TCP segments into one frame.
    pub gro: bool,
    /// Large receive offload: the NIC does the same.
    pub lro: bool,
    /// Generic segmentation offload on transmit.
    pub gso: bool,
    /// TCP segmentation offload on transmit.
    pub tso: bool,
}

/// Legacy ethtool get commands (linux/ethtool.h) and the LRO bit of `ETHTOOL_GFLAGS`.
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETH_FLAG_LRO: u32 = 1 << 15;

/// Asks the kernel about `iface` in this process's network namespace: `Ok(None)` when there
/// is no such interface.
///
/// # Errors
/// When the kernel cannot be asked at all (no socket could be opened).
pub fn link_facts(iface: &str) -> io::Result<Option<LinkFacts>> {
    let Some(index) = sys::if_index(iface)? else {
        return Ok(None);
    };
    let flags = match sys::if_flags(iface) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(None),
        Err(e) => return Err(e),
    };
    let on = |cmd| sys::ethtool_value(iface, cmd).map(|v| v != 0);
    let offloads = match (on(ETHTOOL_GGRO), on(ETHTOOL_GGSO), on(ETHTOOL_GTSO)) {
        (Ok(gro), Ok(gso), Ok(tso)) => Some(Offloads {
            gro,
            lro: sys::ethtool_value(iface, ETHTOOL_GFLAGS).is_ok_and(|f| f & ETH_FLAG_LRO != 0),
            gso,
            tso,
        }),
        _ => None,
    };
    Ok(Some(LinkFacts {
        index,
        up: flags & libc::IFF_UP as u32 != 0,
        carrier: flags & libc::IFF_RUNNING as u32 != 0,
        mtu: sys::if_mtu(iface)?,
        offloads,
        driver: sys::ethtool_driver(iface).ok().filter(|d| !d.is_empty()),
    }))
}

/// The names of the interfaces in this process's network namespace, sorted.
///
/// # Errors
/// When the kernel cannot be asked.
pub fn interface_names() -> io::Result<Vec<String>> {
    sys::if_names()
}

/// Returns the capabilities from `needed` that the effective set in `status` (the text of
/// `/proc/self/status`) lacks, by name. Unreadable input counts as lacking all of them.
pub fn missing_capabilities(status: &str) -> Vec<&'static str> {
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    [
        (CAP_NET_RAW, "CAP_NET_RAW"),
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
    ]
    .into_iter()
    .filter(|(bit, _)| eff & (1u64 << bit) == 0)
    .map(|(_, name)| name)
    .collect()
}

/// Puts a VLAN tag (TPID, TCI) back after the MAC addresses of the `len`-byte frame at the
/// start of `buf`, where it was on the wire; returns the new length, or `None` when `buf` has
/// no room for the four bytes. A frame too short to hold the addresses (not one a kernel
/// Ethernet device delivers) is left as it is.
fn restore_vlan_tag(buf: &mut [u8], len: usize, tpid: u16, tci: u16) -> Option<usize> {
    const MACS: usize = 12;
    if len < MACS || len > buf.len() {
        return Some(len.min(buf.len()));
    }
    if len + 4 > buf.len() {
        return None;
    }
    buf.copy_within(MACS..len, MACS + 4);
    buf[MACS..MACS + 2].copy_from_slice(&tpid.to_be_bytes());
    buf[MACS + 2..MACS + 4].copy_from_slice(&tci.to_be_bytes());
    Some(len + 4)
}

/// Bytes a frame has beyond its IP packet (the MTU): Ethernet header and a VLAN tag.
const L2_OVERHEAD: usize = 14 + 4;

/// Why frames of up to `longest` bytes did not fit `buf_size`-byte buffers on `iface` (whose
/// MTU is `mtu` when known), and what fixes it: frames within the MTU are the interface's
/// own (jumbo) frames, and only frames beyond it are GRO/GSO super-frames.
fn oversize_hint(iface: &str, buf_size: usize, longest: usize, mtu: Option<usize>) -> String {
    let gro = format!(
        "GRO/GSO super-frames, longer than the interface's MTU; turn GRO off on '{iface}' \
         (ethtool -K {iface} gro off) and offloads off on the hosts sending into it \
         (ethtool -K DEV tx off tso off gso off gro off), or raise ports.buffer_size"
    );
    match mtu {
        Some(mtu) if longest <= mtu + L2_OVERHEAD => format!(
            "they fit '{iface}''s MTU of {mtu}, so they are its own (jumbo) frames, not GRO: \
             raise ports.buffer_size to {} (--set ports.buffer_size={}), or lower the MTU to {}",
            mtu + L2_OVERHEAD,
            mtu + L2_OVERHEAD,
            buf_size.saturating_sub(L2_OVERHEAD)
        ),
        Some(_) => gro,
        None => format!(
            "jumbo frames (raise ports.buffer_size to at least {longest}) or, beyond the MTU, {gro}"
        ),
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct RxTally {
    packets: u64,
    bytes: u64,
    oversize: u64,
    /// The longest frame dropped as oversize (its length on the wire, VLAN tag included).
    longest_oversize: usize,
    no_buffer: u64,
    kernel_drops: u64,
    errors: u64,
}

/// One receive queue: a packet socket (a fanout group member when the port has several).
#[derive(Debug)]
pub struct AfPacketRx {
    iface: String,
    queue: usize,
    sock: PacketSocket,
    pool: Pool,
    /// Buffers taken from the pool but not yet filled, reused across bursts.
    spare: Vec<PoolBuf>,
    counters: Arc<RxCounters>,
    bursts: u32,
    tally: RxTally,
    published: RxTally,
}

impl AfPacketRx {
    /// Reads the kernel's count of frames it dropped for this socket since the last read.
    fn poll_kernel_drops(&mut self) {
        match self.sock.take_stats() {
            Ok((_, drops)) => self.tally.kernel_drops += u64::from(drops),
            Err(_) => self.tally.errors += 1,
        }
    }

    fn publish(&mut self) {
        let (t, p, c) = (&self.tally, &mut self.published, &self.counters);
        // Single writer: plain stores of the running totals, skipped when nothing changed.
        if t.packets != p.packets {
            c.packets.store(t.packets, Relaxed);
            c.bytes.store(t.bytes, Relaxed);
        }
        if t.oversize != p.oversize
            || t.no_buffer != p.no_buffer
            || t.kernel_drops != p.kernel_drops
            || t.errors != p.errors
        {
            c.oversize.store(t.oversize, Relaxed);
            c.no_buffer.store(t.no_buffer, Relaxed);
            c.kernel_drops.store(t.kernel_drops, Relaxed);
            c.errors.store(t.errors, Relaxed);
        }
        *p = *t;
    }
}

impl PortRx for AfPacketRx {
    type Buf = PoolBuf;

    fn rx_burst(&mut self, burst: &mut Vec<PoolBuf>, max: usize) -> usize {
        let mut appended = 0;
        // Frames taken from the socket, dropped ones included: the burst ends after `max` of
        // them, so a flood of frames that are all dropped (oversize) cannot keep the caller
        // here, away from its transmit queues and its stop flag, for as long as it lasts.
        let mut read = 0;
        while read < max {
            let want = (max - read).min(BATCH_MAX);
            while self.spare.len() < want {
                match self.pool.alloc() {
                    Some(b) => self.spare.push(b),
                    None => break,
                }
            }
            if self.spare.is_empty() {
                self.tally.no_buffer += 1;
                break;
            }
            let n = self.spare.len().min(want);
            let mut lens = [Received::default(); BATCH_MAX];
            let got = {
                let mut slices: [&mut [u8]; BATCH_MAX] =
                    std::array::from_fn(|_| <&mut [u8]>::default());
                for (slot, buf) in slices.iter_mut().zip(self.spare.iter_mut()).take(n) {
                    let cap = buf.capacity();
                    *slot = buf.set_len(cap);
                }
                self.sock.recv_batch(&mut slices[..n], &mut lens[..n])
            };
            let got = match got {
                Ok(g) => g,
                Err(_) => {
                    self.tally.errors += 1;
                    break;
                }
            };
            read += got;
            for (mut buf, r) in self.spare.drain(..got).zip(lens.iter()) {
                if r.truncated {
                    self.tally.oversize += 1;
                    let tag = if r.vlan.is_some() { 4 } else { 0 };
                    self.tally.longest_oversize = self.tally.longest_oversize.max(r.len + tag);
                    continue;
                }
                let len = match r.vlan {
                    None => r.len,
                    Some((tpid, tci)) => {
                        let cap = buf.capacity();
                        match restore_vlan_tag(buf.set_len(cap), r.len, tpid, tci) {
                            Some(len) => len,
                            None => {
                                // The frame fit only without its tag: forwarding it untagged
                                // would move it to another VLAN.
                                self.tally.oversize += 1;
                                self.tally.longest_oversize =
                                    self.tally.longest_oversize.max(r.len + 4);
                                continue;
                            }
                        }
                    }
                };
                let frame = buf.set_len(len);
                if r.checksum_partial {
                    // A sender with checksum offload (any veth by default) left the sum to
                    // the device; sent on as it is, the receiver would drop it silently.
                    crate::wire::complete_partial_checksum(frame);
                }
                self.tally.bytes += len as u64;
                burst.push(buf);
                appended += 1;
            }
            if got < n {
                break;
            }
        }
        self.tally.packets += appended as u64;
        self.bursts = self.bursts.wrapping_add(1);
        if self.bursts & (KERNEL_STATS_EVERY - 1) == 0 {
            self.poll_kernel_drops();
        }
        self.publish();
        appended
    }
}

impl Drop for AfPacketRx {
    /// Publishes the last counts and, when this queue lost frames, says why on stderr once:
    /// these losses happen below the engine, so its report cannot show them.
    fn drop(&mut self) {
        self.poll_kernel_drops();
        self.publish();
        let (t, iface, q) = (&self.tally, &self.iface, self.queue);
        if t.oversize > 0 {
            let mtu = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
                .ok()
                .and_then(|m| m.trim().parse().ok());
            let why = oversize_hint(iface, self.pool.buf_size(), t.longest_oversize, mtu);
            crate::log_line!(
                "warning: afpacket '{iface}' rx queue {q}: dropped {} frames longer than the \
                 {}-byte buffers (the longest {} bytes): {why}",
                t.oversize,
                self.pool.buf_size(),
                t.longest_oversize
            );
        }
        if t.kernel_drops > 0 {
            crate::log_line!(
                "warning: afpacket '{iface}' rx queue {q}: the kernel dropped {} frames before \
                 cakewalk read them (socket buffer full: the worker fell behind)",
                t.kernel_drops
            );
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct TxTally {
    packets: u64,
    bytes: u64,
    kernel_drops: u64,
    errors: u64,
    full: u64,
}

/// One transmit queue: a packet socket that only sends.
#[derive(Debug)]
pub struct AfPacketTx {
    iface: String,
    queue: usize,
    sock: PacketSocket,
    counters: Arc<TxCounters>,
    tally: TxTally,
    /// Frames and bytes refused for good since the engine last asked.
    refused: Refused,
}

impl AfPacketTx {
    fn publish(&self) {
        let (t, c) = (&self.tally, &self.counters);
        c.packets.store(t.packets, Relaxed);
        c.bytes.store(t.bytes, Relaxed);
        c.kernel_drops.store(t.kernel_drops, Relaxed);
        c.errors.store(t.errors, Relaxed);
        c.full.store(t.full, Relaxed);
    }
}

impl PortTx for AfPacketTx {
    type Buf = PoolBuf;

    /// Hands frames to the kernel from the front of `burst`. Returns how many frames left
    /// `burst`: the ones the kernel accepted plus the ones it refused for good (dropped and
    /// counted in `tx_kernel_drops` or `tx_errors`). Frames stay in `burst` only when the
    /// socket's send buffer is full.
    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        let before = burst.len();
        // Each pass removes at least one frame or stops, so this ends within `before` passes.
        while !burst.is_empty() {
            let n = burst.len().min(BATCH_MAX);
            let result = {
                let mut frames: [&[u8]; BATCH_MAX] = [&[]; BATCH_MAX];
                for (slot, buf) in frames.iter_mut().zip(burst.iter()).take(n) {
                    *slot = buf.data();
                }
                self.sock.send_batch(&frames[..n])
            };
            match result {
                Ok(0) => {
                    self.tally.full += 1;
                    break;
                }
                Ok(k) => {
                    let k = k.min(n);
                    for buf in burst.drain(..k) {
                        self.tally.bytes += buf.data().len() as u64;
                    }
                    self.tally.packets += k as u64;
                    // A short count hides why frame k stopped; the next pass starts with it
                    // and so learns the error.
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.tally.full += 1;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.raw_os_error() == Some(libc::ENOBUFS) {
                        self.tally.kernel_drops += 1;
                    } else {
                        self.tally.errors += 1;
                    }
                    let dropped = burst.remove(0);
                    self.refused.count(dropped.data().len());
                }
            }
        }
        self.publish();
        before - burst.len()
    }

    fn take_refused(&mut self) -> (u64, u64) {
        self.refused.take()
    }
}

impl Drop for AfPacketTx {
    /// Says on stderr, once, when the kernel refused frames for good.
    fn drop(&mut self) {
        if self.tally.errors > 0 {
            crate::log_line!(
                "warning: afpacket '{}' tx queue {}: the kernel refused {} frames (larger than \
                 the interface MTU, or the interface went down)",
                self.iface,
                self.queue,
                self.tally.errors
            );
        }
    }
}

#[cfg(test)]
mod tests;
