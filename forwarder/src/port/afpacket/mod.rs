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
//! or raise the pool's buffer size.
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
//! system calls live in [`sys`].

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
mod tests {
    use super::*;

    #[test]
    fn jumbo_frames_within_the_mtu_are_not_blamed_on_gro() {
        // A 9000-byte MTU: 9018-byte frames are the interface's own.
        let jumbo = oversize_hint("eth1", 2048, 9018, Some(9000));
        assert!(
            jumbo.contains("jumbo")
                && jumbo.contains("not GRO")
                && jumbo.contains("--set ports.buffer_size=9018")
                && jumbo.contains("lower the MTU to 2030"),
            "{jumbo}"
        );
        // A 1500-byte MTU: a 64 KiB frame can only be a GRO super-frame.
        let gro = oversize_hint("eth1", 2048, 65_000, Some(1500));
        assert!(
            gro.starts_with("GRO/GSO super-frames") && gro.contains("gro off"),
            "{gro}"
        );
        let unknown = oversize_hint("eth1", 2048, 9018, None);
        assert!(
            unknown.contains("at least 9018") && unknown.contains("GRO"),
            "{unknown}"
        );
    }

    #[test]
    fn capability_check_names_what_the_effective_set_lacks() {
        let root = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert!(missing_capabilities(root).is_empty());
        let raw_only = format!("CapEff:\t{:016x}\n", 1u64 << CAP_NET_RAW);
        assert_eq!(missing_capabilities(&raw_only), vec!["CAP_NET_ADMIN"]);
        assert_eq!(
            missing_capabilities("CapEff:\t0000000000000000\n"),
            vec!["CAP_NET_RAW", "CAP_NET_ADMIN"]
        );
        assert_eq!(
            missing_capabilities("garbage"),
            vec!["CAP_NET_RAW", "CAP_NET_ADMIN"]
        );
    }

    #[test]
    fn the_kernel_describes_the_loopback_interface_and_knows_no_made_up_one() {
        let lo = link_facts("lo").unwrap().expect("every namespace has lo");
        assert!(lo.index >= 1 && lo.mtu >= 1280, "{lo:?}");
        assert_eq!(link_facts("cw-no-such0").unwrap(), None);
        assert_eq!(link_facts("a-name-longer-than-ifnamsiz").unwrap(), None);
        assert!(interface_names().unwrap().contains(&"lo".to_string()));
    }

    #[test]
    fn a_missing_interface_is_reported_by_name_with_the_fix() {
        let err = AfPacketPort::open(&AfPacketConfig::new("veth9-not-here"), Pool::new(4, 2048))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "interface 'veth9-not-here' not found; list with `ip link`"
        );
    }

    #[test]
    fn zero_queues_are_refused_with_the_valid_range() {
        let mut cfg = AfPacketConfig::new("lo");
        cfg.rx_queues = 0;
        let err = AfPacketPort::open(&cfg, Pool::new(4, 2048)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rx_queues = 0 is out of range for 'lo'; use 1 to 64"
        );
    }

    #[test]
    fn a_vlan_tag_goes_back_after_the_mac_addresses() {
        let mut buf = [0u8; 24];
        let frame: Vec<u8> = (1..=18).collect();
        buf[..18].copy_from_slice(&frame);
        assert_eq!(restore_vlan_tag(&mut buf, 18, 0x8100, 0x2064), Some(22));
        assert_eq!(&buf[..12], &frame[..12]);
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0x20, 0x64]);
        assert_eq!(&buf[16..22], &frame[12..18]);
        // No room for the tag: refused, never forwarded untagged.
        let mut small = [0u8; 20];
        assert_eq!(restore_vlan_tag(&mut small, 18, 0x88a8, 1), None);
    }

    // ---- Privileged tests: each runs in a network namespace of its own (the test thread
    // unshares one), with one veth pair va <-> vb. The namespace and the veths vanish when the
    // thread ends, pass or fail. Run with `scripts/test lab` (root).

    use std::process::Command;

    /// A local-experimental ethertype (IEEE 802 88B5) that no kernel stack answers.
    const TEST_ETHERTYPE: [u8; 2] = [0x88, 0xb5];
    /// Bounds for every receive loop: polls, 1 ms apart.
    const MAX_POLLS: usize = 3000;

    fn run(cmd: &str, args: &[&str]) {
        let out = Command::new(cmd)
            .args(args)
            .output()
            .expect("spawn a lab command");
        assert!(
            out.status.success(),
            "{cmd} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Moves this test's thread into a fresh namespace with veth pair va <-> vb, both up.
    /// Returns false (after saying why) when this machine cannot run the test.
    fn enter_veth_lab() -> bool {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let missing = missing_capabilities(&status);
        if !missing.is_empty() {
            crate::log_line!(
                "SKIP: needs root ({} missing); run scripts/test lab as root",
                missing.join(", ")
            );
            return false;
        }
        sys::unshare_net_namespace().expect("unshare(CLONE_NEWNET)");
        run(
            "sysctl",
            &[
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        run(
            "ip",
            &["link", "add", "va", "type", "veth", "peer", "name", "vb"],
        );
        run("ip", &["link", "set", "va", "up"]);
        run("ip", &["link", "set", "vb", "up"]);
        // Until the kernel's link watcher has seen the carrier and attached the default qdisc,
        // a veth silently discards what is sent on it; `state UP` appears in the same step.
        for dev in ["va", "vb"] {
            let up = (0..MAX_POLLS).any(|_| {
                let out = Command::new("ip")
                    .args(["-o", "link", "show", dev])
                    .output();
                let ok = out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("state UP"));
                if !ok {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                ok
            });
            assert!(up, "{dev} did not come up");
        }
        true
    }

    /// A frame of `len` bytes with the test ethertype and `seq` in the first payload bytes.
    fn test_frame(pool: &Pool, seq: u32, len: usize) -> PoolBuf {
        let mut buf = pool.alloc().expect("test pool has room");
        let f = buf.set_len(len);
        f.fill(0);
        f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
        f[12..14].copy_from_slice(&TEST_ETHERTYPE);
        f[14..18].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in f[18..].iter_mut().enumerate() {
            *b = (i as u32 ^ seq) as u8;
        }
        buf
    }

    fn send_all(tx: &mut AfPacketTx, mut frames: Vec<PoolBuf>) {
        for _ in 0..MAX_POLLS {
            if frames.is_empty() {
                return;
            }
            tx.tx_burst(&mut frames);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("{} frames never left the transmit queue", frames.len());
    }

    /// Polls `rx` until `want` test frames arrived or `polls` polls passed.
    fn receive(rx: &mut AfPacketRx, want: usize, polls: usize) -> Vec<PoolBuf> {
        let mut got = Vec::with_capacity(want);
        let mut burst = Vec::with_capacity(64);
        for _ in 0..polls {
            rx.rx_burst(&mut burst, 64);
            got.extend(
                burst
                    .drain(..)
                    .filter(|b| b.data().get(12..14) == Some(&TEST_ETHERTYPE[..])),
            );
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        got
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn frames_sent_on_one_veth_end_arrive_intact_and_in_order_on_the_other() {
        if !enter_veth_lab() {
            return;
        }
        let pool = Pool::new(2048, 2048);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
        let b = AfPacketPort::open(&AfPacketConfig::new("vb"), pool).unwrap();
        let (a_stats, b_stats) = (a.stats(), b.stats());
        let (mut a_rx, mut a_tx) = a.split();
        let (mut b_rx, _b_tx) = b.split();
        let sizes = [60, 64, 128, 577, 1000, 1514];
        let expected: Vec<Vec<u8>> = (0..600u32)
            .map(|i| {
                test_frame(&pool, i, sizes[i as usize % sizes.len()])
                    .data()
                    .to_vec()
            })
            .collect();
        let frames = (0..600u32)
            .map(|i| test_frame(&pool, i, sizes[i as usize % sizes.len()]))
            .collect();
        send_all(&mut a_tx[0], frames);
        let got = receive(&mut b_rx[0], expected.len(), MAX_POLLS);
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g.data(), &e[..]);
        }
        // PACKET_IGNORE_OUTGOING: the sending side never reads its own frames back.
        assert!(receive(&mut a_rx[0], 1, 50).is_empty());
        let (at, bt) = (a_stats.totals(), b_stats.totals());
        assert_eq!(at.tx_packets, 600);
        assert_eq!(
            at.tx_bytes,
            expected.iter().map(|e| e.len() as u64).sum::<u64>()
        );
        assert_eq!(bt.rx_packets, 600);
        assert_eq!((bt.rx_oversize, bt.rx_errors, at.tx_errors), (0, 0, 0));
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn frames_longer_than_the_egress_mtu_are_reported_refused_not_sent() {
        if !enter_veth_lab() {
            return;
        }
        run("ip", &["link", "set", "va", "mtu", "1000"]);
        let pool = Pool::new(256, 2048);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
        let stats = a.stats();
        let (_a_rx, mut a_tx) = a.split();
        // Two that fit around one that does not (1500 bytes of payload on a 1000 MTU).
        let mut frames = vec![
            test_frame(&pool, 0, 100),
            test_frame(&pool, 1, 1514),
            test_frame(&pool, 2, 100),
        ];
        let mut taken = 0;
        for _ in 0..MAX_POLLS {
            taken += a_tx[0].tx_burst(&mut frames);
            if frames.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(taken, 3, "every frame left the burst");
        assert_eq!(a_tx[0].take_refused(), (1, 1514));
        assert_eq!(
            a_tx[0].take_refused(),
            (0, 0),
            "each refusal is reported once"
        );
        let t = stats.totals();
        assert_eq!((t.tx_packets, t.tx_errors), (2, 1));
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn vlan_tagged_frames_arrive_with_their_tag() {
        if !enter_veth_lab() {
            return;
        }
        let pool = Pool::new(256, 2048);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
        let b = AfPacketPort::open(&AfPacketConfig::new("vb"), pool).unwrap();
        let (_a_rx, mut a_tx) = a.split();
        let (mut b_rx, _b_tx) = b.split();
        // Untagged, 802.1Q (VLAN 100, PCP 1) and 802.1ad over 802.1Q (QinQ) frames.
        let tags: [&[u8]; 3] = [
            &[],
            &[0x81, 0x00, 0x20, 0x64],
            &[0x88, 0xa8, 0, 7, 0x81, 0, 0, 9],
        ];
        let expected: Vec<Vec<u8>> = (0..30u32)
            .map(|i| {
                let plain = test_frame(&pool, i, 100).data().to_vec();
                let tag = tags[i as usize % 3];
                [&plain[..12], tag, &plain[12..]].concat()
            })
            .collect();
        let frames = expected
            .iter()
            .map(|f| pool.alloc_copy(f).unwrap())
            .collect();
        send_all(&mut a_tx[0], frames);
        let mut got = Vec::new();
        let mut burst = Vec::with_capacity(64);
        for _ in 0..MAX_POLLS {
            b_rx[0].rx_burst(&mut burst, 64);
            got.extend(burst.drain(..).map(|b| b.data().to_vec()).filter(|f| {
                f.windows(2).any(|w| w == TEST_ETHERTYPE)
                    && f.get(0..6) == Some(&[2, 0, 0, 0, 0, 0xbb][..])
            }));
            if got.len() >= expected.len() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g, e);
        }
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn udp_from_a_host_with_checksum_offload_arrives_with_a_valid_checksum() {
        if !enter_veth_lab() {
            return;
        }
        // A veth offers tx checksumming by default: the kernel's UDP leaves the checksum to
        // it, and the frame reaches vb's packet socket with only the pseudo-header sum.
        run("ethtool", &["-K", "va", "tx", "on"]);
        run("ip", &["addr", "add", "198.18.0.1/24", "dev", "va"]);
        run(
            "ip",
            &[
                "neigh",
                "add",
                "198.18.0.2",
                "lladdr",
                "02:00:00:00:00:bb",
                "dev",
                "va",
            ],
        );
        let pool = Pool::new(256, 2048);
        let b = AfPacketPort::open(&AfPacketConfig::new("vb"), pool).unwrap();
        let (mut b_rx, _b_tx) = b.split();
        let sock = std::net::UdpSocket::bind("198.18.0.1:0").unwrap();
        for i in 0..10u8 {
            sock.send_to(&[i; 77], "198.18.0.2:9").unwrap();
        }
        let mut got = Vec::new();
        let mut burst = Vec::with_capacity(64);
        for _ in 0..MAX_POLLS {
            b_rx[0].rx_burst(&mut burst, 64);
            got.extend(
                burst
                    .drain(..)
                    .filter(|f| f.data().get(23) == Some(&17))
                    .map(|f| f.data().to_vec()),
            );
            if got.len() >= 10 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got.len(), 10);
        for f in &got {
            let l4_len = f.len() - 34;
            let pseudo = crate::wire::checksum::sum(l4_len as u32 + 17, &f[26..34]);
            assert_eq!(
                crate::wire::checksum::sum(u32::from(pseudo), &f[34..]),
                0xffff,
                "bad UDP checksum in {f:02x?}"
            );
        }
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn oversize_frames_are_counted_and_dropped_not_truncated() {
        if !enter_veth_lab() {
            return;
        }
        let big_pool = Pool::new(256, 2048);
        let small_pool = Pool::new(256, 256);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), big_pool).unwrap();
        let b = AfPacketPort::open(&AfPacketConfig::new("vb"), small_pool).unwrap();
        let b_stats = b.stats();
        let (_a_rx, mut a_tx) = a.split();
        let (mut b_rx, _b_tx) = b.split();
        let frames = (0..40u32)
            .map(|i| test_frame(&big_pool, i, if i % 2 == 0 { 100 } else { 1000 }))
            .collect();
        send_all(&mut a_tx[0], frames);
        let got = receive(&mut b_rx[0], 20, MAX_POLLS);
        assert_eq!(got.len(), 20);
        assert!(got.iter().all(|g| g.data().len() == 100));
        // The odd frames (1000 bytes) did not fit a 256-byte buffer. The last one follows the
        // last small frame, so poll (bounded) until it has been read too.
        let mut burst = Vec::with_capacity(64);
        for _ in 0..MAX_POLLS {
            if b_stats.totals().rx_oversize >= 20 {
                break;
            }
            b_rx[0].rx_burst(&mut burst, 64);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(burst.is_empty());
        assert_eq!(b_stats.totals().rx_oversize, 20);
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn a_receive_burst_reads_at_most_its_size_even_when_every_frame_is_oversize() {
        if !enter_veth_lab() {
            return;
        }
        let big_pool = Pool::new(512, 2048);
        let small_pool = Pool::new(64, 256);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), big_pool).unwrap();
        let b = AfPacketPort::open(&AfPacketConfig::new("vb"), small_pool).unwrap();
        let b_stats = b.stats();
        let (_a_rx, mut a_tx) = a.split();
        let (mut b_rx, _b_tx) = b.split();
        // 300 frames too long for b's buffers, then one that fits.
        let mut frames: Vec<_> = (0..300u32)
            .map(|i| test_frame(&big_pool, i, 1000))
            .collect();
        frames.push(test_frame(&big_pool, 300, 100));
        send_all(&mut a_tx[0], frames);
        std::thread::sleep(std::time::Duration::from_millis(50));
        // A flood of oversize frames must not keep one call reading (and the worker away
        // from its transmit queues, its stop flag and its drain) for as long as it lasts.
        let mut burst = Vec::with_capacity(8);
        b_rx[0].rx_burst(&mut burst, 8);
        let t = b_stats.totals();
        assert!(
            t.rx_oversize + burst.len() as u64 <= 8,
            "one 8-frame burst read {} oversize frames",
            t.rx_oversize
        );
        // Later bursts read the rest, and the small frame arrives after all.
        let got = receive(&mut b_rx[0], 1, MAX_POLLS);
        assert_eq!(got.len(), 1);
        assert_eq!(b_stats.totals().rx_oversize, 300);
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn fanout_spreads_flows_over_receive_queues_and_keeps_each_flow_on_one() {
        if !enter_veth_lab() {
            return;
        }
        let pool = Pool::new(4096, 2048);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
        let mut cfg = AfPacketConfig::new("vb");
        cfg.rx_queues = 2;
        let b = AfPacketPort::open(&cfg, pool).unwrap();
        let (_a_rx, mut a_tx) = a.split();
        let (mut b_rx, _b_tx) = b.split();
        let (src, dst) = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
        let mut frames = Vec::new();
        for round in 0..8u16 {
            for flow in 0..64u16 {
                let mut buf = pool.alloc().unwrap();
                let f = buf.set_len(2048);
                let len = crate::wire::build_udp_frame(f, src, dst, 10_000 + flow, 5201, 0, 0, 64)
                    .unwrap();
                f[42..44].copy_from_slice(&round.to_be_bytes());
                buf.set_len(len);
                frames.push(buf);
            }
        }
        send_all(&mut a_tx[0], frames);
        let mut per_queue = [Vec::new(), Vec::new()];
        let mut burst = Vec::with_capacity(64);
        for _ in 0..MAX_POLLS {
            for (q, rx) in b_rx.iter_mut().enumerate() {
                rx.rx_burst(&mut burst, 64);
                for f in burst.drain(..) {
                    if f.data().get(12..14) == Some(&[0x08, 0x00][..]) {
                        per_queue[q].push(u16::from_be_bytes([f.data()[34], f.data()[35]]));
                    }
                }
            }
            if per_queue[0].len() + per_queue[1].len() >= 512 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(per_queue[0].len() + per_queue[1].len(), 512);
        assert!(
            !per_queue[0].is_empty() && !per_queue[1].is_empty(),
            "hash fanout used one queue only"
        );
        for port in &per_queue[0] {
            assert!(
                !per_queue[1].contains(port),
                "flow {port} was split over both queues"
            );
        }
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn a_port_with_several_receive_queues_never_reads_back_what_it_transmits() {
        if !enter_veth_lab() {
            return;
        }
        // A fanout group ignores the sockets' own PACKET_IGNORE_OUTGOING: reading back its own
        // frames, a forwarder between two such ports bounces every frame between them forever
        // (a broadcast ARP became a storm of a million frames in seconds).
        let pool = Pool::new(1024, 2048);
        let mut cfg = AfPacketConfig::new("va");
        cfg.rx_queues = 2;
        let a = AfPacketPort::open(&cfg, pool).unwrap();
        let (mut a_rx, mut a_tx) = a.split();
        let frames = (0..50u32).map(|i| test_frame(&pool, i, 100)).collect();
        send_all(&mut a_tx[0], frames);
        let mut burst = Vec::with_capacity(64);
        let mut seen = 0;
        for _ in 0..50 {
            for rx in a_rx.iter_mut() {
                rx.rx_burst(&mut burst, 64);
                seen += burst
                    .drain(..)
                    .filter(|b| b.data().get(12..14) == Some(&TEST_ETHERTYPE[..]))
                    .count();
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(seen, 0, "the port read back {seen} of its own 50 frames");
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn ip_fragments_reach_a_port_with_several_receive_queues_as_they_were_sent() {
        if !enter_veth_lab() {
            return;
        }
        let pool = Pool::new(1024, 2048);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
        let mut cfg = AfPacketConfig::new("vb");
        cfg.rx_queues = 2;
        let b = AfPacketPort::open(&cfg, pool).unwrap();
        let b_stats = b.stats();
        let (_a_rx, mut a_tx) = a.split();
        let (mut b_rx, _b_tx) = b.split();
        // A 2008-byte UDP datagram in two IPv4 fragments of 1000 and 1008 bytes of payload.
        let mut whole = [0u8; 2100];
        let len = crate::wire::build_udp_frame(
            &mut whole,
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            4000,
            4001,
            0,
            0,
            2000,
        )
        .unwrap();
        let payload = &whole[34..len];
        let fragment = |offset: usize, end: usize, more: bool| -> Vec<u8> {
            let mut f = whole[..34].to_vec();
            f.extend_from_slice(&payload[offset..end]);
            let total = (20 + end - offset) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            let flags_offset = (offset / 8) as u16 | if more { 0x2000 } else { 0 };
            f[20..22].copy_from_slice(&flags_offset.to_be_bytes());
            f[24..26].copy_from_slice(&[0, 0]);
            let check = crate::wire::checksum::checksum(&f[14..34]);
            f[24..26].copy_from_slice(&check.to_be_bytes());
            f
        };
        let sent = [
            fragment(0, 1000, true),
            fragment(1000, payload.len(), false),
        ];
        send_all(
            &mut a_tx[0],
            sent.iter().map(|f| pool.alloc_copy(f).unwrap()).collect(),
        );
        let mut got = Vec::new();
        let mut burst = Vec::with_capacity(64);
        for _ in 0..200 {
            for rx in b_rx.iter_mut() {
                rx.rx_burst(&mut burst, 64);
                got.extend(
                    burst
                        .drain(..)
                        .filter(|f| f.data().get(23) == Some(&17))
                        .map(|f| f.data().to_vec()),
                );
            }
            if got.len() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Reassembled by the fanout (PACKET_FANOUT_FLAG_DEFRAG), the datagram arrived as one
        // 2042-byte frame: longer than the egress MTU (refused there), and a larger datagram
        // is longer than any buffer (dropped as oversize).
        let lens = |v: &[Vec<u8>]| v.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(lens(&got), lens(&sent), "fragments arrived changed");
        assert_eq!(got, sent.to_vec());
        assert_eq!(b_stats.totals().rx_oversize, 0);
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn ports_with_several_receive_queues_open_whatever_their_interface_indexes() {
        if !enter_veth_lab() {
            return;
        }
        // Fanout group ids are per namespace: a second port whose ifindex is the first's plus
        // 256 must still get a group of its own.
        let va = sys::if_index("va").unwrap().expect("va exists");
        let (vc, vd) = ((va + 256).to_string(), (va + 300).to_string());
        run(
            "ip",
            &[
                "link", "add", "vc", "index", &vc, "type", "veth", "peer", "name", "vd", "index",
                &vd,
            ],
        );
        run("ip", &["link", "set", "vc", "up"]);
        let pool = Pool::new(1024, 2048);
        let mut ports = Vec::new();
        for iface in ["va", "vc", "vb"] {
            let mut cfg = AfPacketConfig::new(iface);
            cfg.rx_queues = 2;
            match AfPacketPort::open(&cfg, pool) {
                Ok(p) => ports.push(p),
                Err(e) => panic!("opening {iface} with 2 receive queues: {e:#?}"),
            }
        }
    }

    #[test]
    #[ignore = "needs root: creates a network namespace and a veth pair"]
    fn frames_the_kernel_qdisc_drops_leave_the_burst_and_are_counted() {
        if !enter_veth_lab() {
            return;
        }
        // A tiny TBF on va: a burst of 200 frames overflows it at once.
        run(
            "tc",
            &[
                "qdisc", "add", "dev", "va", "root", "tbf", "rate", "1mbit", "burst", "1600",
                "limit", "3000",
            ],
        );
        let pool = Pool::new(512, 2048);
        let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
        let stats = a.stats();
        let (_a_rx, mut a_tx) = a.split();
        let mut frames: Vec<_> = (0..200u32).map(|i| test_frame(&pool, i, 1000)).collect();
        let left = a_tx[0].tx_burst(&mut frames);
        assert_eq!(left + frames.len(), 200);
        send_all(&mut a_tx[0], frames);
        let t = stats.totals();
        assert!(
            t.tx_kernel_drops > 0,
            "the TBF should have dropped frames: {t:?}"
        );
        assert_eq!(t.tx_packets + t.tx_kernel_drops, 200, "{t:?}");
    }
}
