//! The only `unsafe` in the AF_PACKET backend: thin wrappers over the `libc` calls it needs
//! (socket, bind, setsockopt, if_nametoindex, recvmmsg, sendmmsg, and the interface ioctls
//! preflight reads link state and offloads with). Each wrapper maps `-1` to
//! `io::Error::last_os_error()` and owns nothing beyond the file descriptor; policy (which options,
//! what an error means to the user) lives in the parent module.
//!
//! Batches are described on the stack (`[mmsghdr; BATCH_MAX]`), never on the heap, so a receive
//! or transmit burst allocates nothing and the port halves stay `Send`.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The most frames one `recvmmsg`/`sendmmsg` call handles; larger bursts loop.
pub(crate) const BATCH_MAX: usize = 64;

/// `ETH_P_ALL` in host order: every protocol.
pub(crate) const ETH_P_ALL: u16 = libc::ETH_P_ALL as u16;

/// Maps a `-1` return to the thread's `errno`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Returns the interface index of `name`, or `None` when no such interface exists in this
/// network namespace.
pub(crate) fn if_index(name: &str) -> io::Result<Option<u32>> {
    let Ok(cname) = CString::new(name) else {
        return Ok(None);
    };
    // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index != 0 {
        return Ok(Some(index));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::ENXIO) | Some(libc::EINVAL) => Ok(None),
        _ => Err(err),
    }
}

/// `struct ifreq` (linux/if.h): an interface name and a 24-byte union of answers.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: IfReqData,
}

#[repr(C)]
#[derive(Clone, Copy)]
union IfReqData {
    flags: libc::c_short,
    mtu: libc::c_int,
    ptr: *mut libc::c_void,
    pad: [u8; 24],
}

/// `struct ethtool_value` (linux/ethtool.h), the answer of the legacy get commands.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ethtool_drvinfo` (linux/ethtool.h), of which only the driver name is read.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    counts: [u32; 5],
}

/// `ETHTOOL_GDRVINFO`.
const ETHTOOL_GDRVINFO: u32 = 0x03;

/// An `AF_INET` datagram socket, which any process may open, for interface ioctls; they
/// answer for the caller's network namespace.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; no pointers involved.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(name: &str) -> io::Result<IfReq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: IfReqData { pad: [0; 24] },
    };
    for (d, s) in req.name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

fn ioctl(fd: &OwnedFd, request: libc::c_ulong, req: &mut IfReq) -> io::Result<()> {
    // SAFETY: `req` is a valid, initialised `struct ifreq` that outlives the call, and every
    // request passed here reads or writes only an ifreq (and, for SIOCETHTOOL, the buffer its
    // `ptr` points to, which the caller keeps alive and sized for the command).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, req as *mut IfReq) })?;
    Ok(())
}

/// The interface flags (`IFF_UP`, `IFF_RUNNING`, ...) of `name`; `ENODEV` when there is no
/// such interface in this network namespace.
pub(crate) fn if_flags(name: &str) -> io::Result<u32> {
    let fd = control_socket()?;
    let mut req = ifreq(name)?;
    ioctl(&fd, libc::SIOCGIFFLAGS as libc::c_ulong, &mut req)?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote the flags member.
    Ok(u32::from(unsafe { req.data.flags } as u16))
}

/// The MTU of `name`.
pub(crate) fn if_mtu(name: &str) -> io::Result<u32> {
    let fd = control_socket()?;
    let mut req = ifreq(name)?;
    ioctl(&fd, libc::SIOCGIFMTU as libc::c_ulong, &mut req)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the mtu member.
    Ok(unsafe { req.data.mtu }.max(0) as u32)
}

/// The answer of a legacy ethtool get command (`ETHTOOL_GGRO`, `ETHTOOL_GTSO`, ...) for
/// `name`: the feature's state as 0 or 1, or a flag word for `ETHTOOL_GFLAGS`.
pub(crate) fn ethtool_value(name: &str, cmd: u32) -> io::Result<u32> {
    let fd = control_socket()?;
    let mut req = ifreq(name)?;
    let mut value = EthtoolValue { cmd, data: 0 };
    req.data.ptr = (&mut value as *mut EthtoolValue).cast();
    ioctl(&fd, libc::SIOCETHTOOL as libc::c_ulong, &mut req)?;
    Ok(value.data)
}

/// The kernel driver behind `name` ("veth", "ixgbe"), as `ethtool -i` shows it.
pub(crate) fn ethtool_driver(name: &str) -> io::Result<String> {
    let fd = control_socket()?;
    let mut req = ifreq(name)?;
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        counts: [0; 5],
    };
    req.data.ptr = (&mut info as *mut EthtoolDrvinfo).cast();
    ioctl(&fd, libc::SIOCETHTOOL as libc::c_ulong, &mut req)?;
    let end = info.driver.iter().position(|b| *b == 0).unwrap_or(32);
    Ok(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// The names of every interface in this network namespace (`if_nameindex`, which asks the
/// kernel over netlink: unlike a listing of /sys/class/net, it answers for the caller's
/// namespace whoever mounted /sys).
pub(crate) fn if_names() -> io::Result<Vec<String>> {
    // SAFETY: no arguments; the result is a heap array the C library owns until freed below.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut names = Vec::new();
    let mut i = 0;
    loop {
        // SAFETY: the array ends with an entry whose index is 0 and name null, and `i` never
        // passes that end, so the offset stays inside the array.
        let at = unsafe { list.add(i) };
        // SAFETY: `at` points at an initialised entry of the array, valid until it is freed.
        let entry = unsafe { &*at };
        if entry.if_index == 0 || entry.if_name.is_null() {
            break;
        }
        // SAFETY: a non-null `if_name` is a NUL-terminated string inside the array.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.if_name) };
        names.push(name.to_string_lossy().into_owned());
        i += 1;
    }
    // SAFETY: `list` came from if_nameindex and is freed once; nothing borrows it any more.
    unsafe { libc::if_freenameindex(list) };
    names.sort();
    Ok(names)
}

/// What [`PacketSocket::recv_batch`] learned about one frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Received {
    /// The frame's length on the wire, without the VLAN tag the kernel took out.
    pub(crate) len: usize,
    /// The frame was longer than its buffer.
    pub(crate) truncated: bool,
    /// The outermost VLAN tag as (TPID, TCI), host order, when the kernel took it out of the
    /// frame: it always does on receive (`skb_vlan_untag`, whatever the interface's rxvlan
    /// setting), and a packet socket sees it only in `PACKET_AUXDATA`.
    pub(crate) vlan: Option<(u16, u16)>,
    /// The sender left the TCP/UDP checksum to its device (`TP_STATUS_CSUMNOTREADY`): the
    /// field holds only the pseudo-header sum.
    pub(crate) checksum_partial: bool,
}

/// `u64` words of control buffer per frame: room for one `cmsghdr` with a `tpacket_auxdata`
/// (`CMSG_SPACE(20)` = 40 bytes on 64-bit Linux) and some spare.
const CONTROL_WORDS: usize = 8;

/// `TP_STATUS_CSUMNOTREADY`, `TP_STATUS_VLAN_VALID` and `TP_STATUS_VLAN_TPID_VALID`
/// (linux/if_packet.h).
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// Reads the VLAN tag and the partial-checksum flag out of the first `len` bytes of a frame's
/// control messages, written by the kernel in `cmsghdr` layout; `(None, false)` without a
/// `PACKET_AUXDATA` message.
fn aux_from_control(control: &[u64; CONTROL_WORDS], len: usize) -> (Option<(u16, u16)>, bool) {
    aux_status(control, len).map_or((None, false), |(status, tci, tpid)| {
        let vlan = (status & TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                tpid
            } else {
                0x8100
            };
            (tpid, tci)
        });
        (vlan, status & TP_STATUS_CSUMNOTREADY != 0)
    })
}

/// The `tp_status`, `tp_vlan_tci` and `tp_vlan_tpid` of the `PACKET_AUXDATA` message among
/// the first `len` bytes of `control`.
fn aux_status(control: &[u64; CONTROL_WORDS], len: usize) -> Option<(u32, u16, u16)> {
    let mut raw = [0u8; CONTROL_WORDS * 8];
    for (chunk, word) in raw.chunks_exact_mut(8).zip(control) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    let raw = &raw[..len.min(raw.len())];
    let hdr = mem::size_of::<libc::cmsghdr>();
    let mut at = 0;
    // cmsghdr: cmsg_len (size_t), cmsg_level (int), cmsg_type (int), then the data aligned to
    // size_t; each message starts at a size_t-aligned offset.
    while at + hdr <= raw.len() {
        let word = mem::size_of::<usize>();
        let cmsg_len = usize::from_ne_bytes(raw[at..at + word].try_into().ok()?);
        let level = i32::from_ne_bytes(raw[at + word..at + word + 4].try_into().ok()?);
        let kind = i32::from_ne_bytes(raw[at + word + 4..at + word + 8].try_into().ok()?);
        if cmsg_len < hdr || at + cmsg_len > raw.len() {
            return None;
        }
        if level == libc::SOL_PACKET && kind == libc::PACKET_AUXDATA && cmsg_len >= hdr + 20 {
            let d = &raw[at + hdr..at + hdr + 20];
            let status = u32::from_ne_bytes(d[0..4].try_into().ok()?);
            let tci = u16::from_ne_bytes(d[16..18].try_into().ok()?);
            let tpid = u16::from_ne_bytes(d[18..20].try_into().ok()?);
            return Some((status, tci, tpid));
        }
        at += cmsg_len.div_ceil(word) * word;
    }
    None
}

/// An AF_PACKET `SOCK_RAW` socket, non-blocking and close-on-exec. Closed on drop, which also
/// drops its promiscuous membership and fanout group membership.
#[derive(Debug)]
pub(crate) struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens a socket that receives nothing until [`bind`](Self::bind) names an interface and
    /// a protocol (protocol 0 at creation avoids catching frames from every interface).
    pub(crate) fn open() -> io::Result<Self> {
        // SAFETY: plain syscall with constant arguments; no pointers involved.
        let fd = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// Binds to interface `ifindex`, receiving frames of `protocol` (host order; 0 = none,
    /// which makes a transmit-only socket).
    pub(crate) fn bind(&self, ifindex: u32, protocol: u16) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain old data for which all-zero bytes are valid.
        let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol.to_be();
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` is a valid sockaddr_ll and the length passed is its size.
        check(unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(())
    }

    /// Sets an integer socket option.
    pub(crate) fn set_int(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
    ) -> io::Result<()> {
        self.set_raw(level, name, &value)
    }

    /// Reads an integer socket option.
    pub(crate) fn get_int(&self, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are valid for writes and `len` holds the size of `value`.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        })?;
        Ok(value)
    }

    /// Puts interface `ifindex` into promiscuous mode for as long as this socket lives.
    pub(crate) fn add_promisc(&self, ifindex: u32) -> io::Result<()> {
        // SAFETY: packet_mreq is plain old data for which all-zero bytes are valid.
        let mut mreq: libc::packet_mreq = unsafe { mem::zeroed() };
        mreq.mr_ifindex = ifindex as i32;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        self.set_raw(libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
    }

    /// Reads the kernel's receive counters (`PACKET_STATISTICS`): frames received and frames
    /// dropped because the socket buffer was full. Reading resets them.
    pub(crate) fn take_stats(&self) -> io::Result<(u32, u32)> {
        // SAFETY: tpacket_stats is plain old data for which all-zero bytes are valid.
        let mut st: libc::tpacket_stats = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes and `len` holds the size of `st`.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        })?;
        Ok((st.tp_packets, st.tp_drops))
    }

    fn set_raw<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: `value` points to a live `T` and the length passed is `size_of::<T>()`.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (value as *const T).cast(),
                mem::size_of::<T>() as libc::socklen_t,
            )
        })?;
        Ok(())
    }

    /// Receives up to `bufs.len()` (at most [`BATCH_MAX`]) frames without blocking, each into
    /// its own buffer. For each frame `i < n`, `out[i]` describes it (see [`Received`]): a
    /// frame longer than its buffer is reported with its full length and `truncated = true`
    /// (its buffer then holds only the first bytes). The VLAN tag comes from the
    /// `PACKET_AUXDATA` message, so the socket must have that option on (see
    /// [`PacketSocket::set_int`]); without it `vlan` is always `None`. Returns `Ok(0)` when
    /// nothing is waiting.
    pub(crate) fn recv_batch(
        &self,
        bufs: &mut [&mut [u8]],
        out: &mut [Received],
    ) -> io::Result<usize> {
        let n = bufs.len().min(out.len()).min(BATCH_MAX);
        if n == 0 {
            return Ok(0);
        }
        let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); BATCH_MAX];
        let mut msgs = [MaybeUninit::<libc::mmsghdr>::uninit(); BATCH_MAX];
        // One control buffer per frame for its PACKET_AUXDATA message; u64 words keep it
        // aligned for `cmsghdr`.
        let mut controls = [[0u64; CONTROL_WORDS]; BATCH_MAX];
        for i in 0..n {
            let iov = iovs[i].write(libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: bufs[i].len(),
            });
            // SAFETY: mmsghdr is plain old data for which all-zero bytes are valid.
            let mut msg: libc::mmsghdr = unsafe { mem::zeroed() };
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_control = controls[i].as_mut_ptr().cast();
            msg.msg_hdr.msg_controllen = mem::size_of::<[u64; CONTROL_WORDS]>();
            msgs[i].write(msg);
        }
        // SAFETY: the first `n` entries of `msgs` are initialised and each points at one iovec
        // describing a distinct, live, writable buffer borrowed mutably for this call, and at
        // its own live control buffer of the length given. MSG_TRUNC makes the kernel report
        // a truncated frame's real length instead of the copied length.
        let got = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr().cast(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(err),
            };
        }
        let got = got as usize;
        for i in 0..got {
            // SAFETY: entries below `n` were initialised above and the kernel filled the first
            // `got <= n` of them.
            let msg = unsafe { msgs[i].assume_init_ref() };
            let len = msg.msg_len as usize;
            let truncated = msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > bufs[i].len();
            let control_len = msg.msg_hdr.msg_controllen.min(CONTROL_WORDS * 8);
            let (vlan, checksum_partial) = aux_from_control(&controls[i], control_len);
            out[i] = Received {
                len,
                truncated,
                vlan,
                checksum_partial,
            };
        }
        Ok(got)
    }

    /// Transmits up to `frames.len()` (at most [`BATCH_MAX`]) frames without blocking, in
    /// order, on the bound interface. Returns how many the kernel took, or the error that
    /// stopped the first frame (`WouldBlock` when the socket's send buffer is full).
    pub(crate) fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        let n = frames.len().min(BATCH_MAX);
        if n == 0 {
            return Ok(0);
        }
        let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); BATCH_MAX];
        let mut msgs = [MaybeUninit::<libc::mmsghdr>::uninit(); BATCH_MAX];
        for i in 0..n {
            let iov = iovs[i].write(libc::iovec {
                // The kernel only reads through this pointer (sendmmsg).
                iov_base: frames[i].as_ptr() as *mut libc::c_void,
                iov_len: frames[i].len(),
            });
            // SAFETY: mmsghdr is plain old data for which all-zero bytes are valid.
            let mut msg: libc::mmsghdr = unsafe { mem::zeroed() };
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
            msgs[i].write(msg);
        }
        // SAFETY: the first `n` entries of `msgs` are initialised, each pointing at one iovec
        // that describes a live frame borrowed for this call; sendmmsg only reads them.
        let sent = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr().cast(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as usize)
    }
}

/// Moves the calling thread into a new, empty network namespace. Only tests use it: the
/// namespace, and every interface made in it, disappears when the thread and the processes it
/// started have exited, so a test cannot leave interfaces behind.
#[cfg(test)]
pub(crate) fn unshare_net_namespace() -> io::Result<()> {
    // SAFETY: unshare(2) takes only flags and changes only the calling thread's namespaces.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
    Ok(())
}
