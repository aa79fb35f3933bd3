//! Errors of the DPDK backend: [`DpdkError`] for one failed library call (its name, the port
//! and the errno), and [`PortError`] for everything a user can get wrong, each with the fix.

use std::ffi::CStr;
use std::fmt;

/// One failed DPDK call: prints like "rte_eth_dev_configure (port 0) failed: Invalid argument".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function that failed.
    pub call: &'static str,
    /// The port it was called for, if any.
    pub port: Option<u16>,
    /// The positive errno (libc or DPDK's own `RTE_MIN_ERRNO` range).
    pub errno: i32,
}

impl DpdkError {
    /// Builds the error for `call` on `port` from a negative return code (`-errno`), or from
    /// `rte_errno` when the call returned -1 or NULL without a code.
    pub(crate) fn from_ret(call: &'static str, port: Option<u16>, ret: i32) -> DpdkError {
        let errno = if ret < -1 { -ret } else { rte_errno() };
        DpdkError { call, port, errno }
    }

    /// The text of the errno, as `rte_strerror` gives it.
    pub fn reason(&self) -> String {
        strerror(self.errno)
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.call)?;
        if let Some(port) = self.port {
            write!(f, " (port {port})")?;
        }
        write!(f, " failed: {}", strerror(self.errno))
    }
}

impl std::error::Error for DpdkError {}

/// Returns DPDK's `rte_errno` for the calling thread.
pub(crate) fn rte_errno() -> i32 {
    // SAFETY: cw_rte_errno reads the calling thread's per-lcore errno variable.
    unsafe { dpdk_sys::cw_rte_errno() }
}

/// Returns the message for `errno`, covering both libc's and DPDK's own codes.
pub(crate) fn strerror(errno: i32) -> String {
    if errno <= 0 {
        return format!("error {errno}");
    }
    // SAFETY: rte_strerror returns a pointer to a NUL-terminated string that stays valid until
    // the next call on this thread; it is copied out at once.
    let msg = unsafe { dpdk_sys::rte_strerror(errno) };
    if msg.is_null() {
        return format!("error {errno}");
    }
    // SAFETY: non-NULL and NUL-terminated, as rte_strerror documents.
    unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned()
}

/// What can go wrong while starting or running a DPDK port, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// A DPDK call failed.
    #[error(transparent)]
    Call(#[from] DpdkError),
    /// The EAL was already started (or tried) in this process.
    #[error("the DPDK EAL can be started only once per process; run each DPDK port set in its own process")]
    EalAlreadyStarted,
    /// No free hugepages and `--no-huge` was not given.
    #[error(
        "no free hugepages: DPDK needs them for packet memory; reserve some with \
         `hugepage-setup reserve --pages 512` (as root), or pass `--no-huge` in the EAL arguments for a test run"
    )]
    NoHugepages,
    /// Hugepages exist but no hugetlbfs is mounted.
    #[error(
        "hugepages are reserved but no hugetlbfs is mounted; run `hugepage-setup reserve --pages N` \
         (mounts /dev/hugepages), or pass `--in-memory` or `--no-huge` in the EAL arguments"
    )]
    NoHugetlbfs,
    /// An EAL argument contained a NUL byte.
    #[error("EAL argument {0:?} contains a NUL byte")]
    BadArgument(String),
    /// `rte_eal_init` failed.
    #[error("starting the DPDK EAL with {args:?} failed: {reason}; {hint}")]
    EalInit {
        /// The arguments given.
        args: Vec<String>,
        /// `rte_strerror(rte_errno)`.
        reason: String,
        /// What to try.
        hint: &'static str,
    },
    /// No ethdev with this name exists after EAL init.
    #[error("no DPDK port named '{name}' (ports: {known}); create a virtual device with --eal '--vdev=NAME,...' (ports.eal_args in the config), or bind a NIC to vfio-pci and name it by its PCI address")]
    NoSuchPort {
        /// The name asked for.
        name: String,
        /// The names that do exist.
        known: String,
    },
    /// The device has fewer queues than the configuration needs.
    #[error("port {port} ({name}) supports {max} {dir} queues but {wanted} were requested: use fewer worker cores or a NIC with more queues")]
    NotEnoughQueues {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// "RX" or "TX".
        dir: &'static str,
        /// The device's maximum.
        max: u16,
        /// What the configuration asked for.
        wanted: u16,
    },
    /// The driver refused a receive queue on the pool it was given.
    #[error("rte_eth_rx_queue_setup (port {port}, {name}, queue {queue}) failed: {reason}; the driver's log line above says why (net_pcap with infinite_rx=1 needs the whole file in mbufs for each queue: the pool has {pool_mbufs}, raise ports.pool_buffers)")]
    RxQueueSetup {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// Queue index.
        queue: u16,
        /// `rte_strerror` of the error.
        reason: String,
        /// Mbufs in the pool the queue was given.
        pool_mbufs: u32,
    },
    /// A mempool could not be created.
    #[error("mempool '{name}' ({mbufs} mbufs on socket {socket}) could not be created: {reason}; reserve more hugepages (`hugepage-setup reserve --pages N`) or use fewer mbufs")]
    MempoolCreate {
        /// Pool name.
        name: String,
        /// Mbufs asked for.
        mbufs: u32,
        /// NUMA socket.
        socket: i32,
        /// `rte_strerror(rte_errno)`.
        reason: String,
    },
    /// The pool has no free mbuf.
    #[error("mempool '{name}' is exhausted ({size} mbufs all in use): raise the pool size or drain queues faster")]
    MempoolExhausted {
        /// Pool name.
        name: String,
        /// Pool size.
        size: u32,
    },
    /// A configuration value DPDK cannot take.
    #[error("{0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_names_the_call_the_port_and_the_reason() {
        let e = DpdkError {
            call: "rte_eth_dev_configure",
            port: Some(0),
            errno: libc::EINVAL,
        };
        assert_eq!(
            e.to_string(),
            "rte_eth_dev_configure (port 0) failed: Invalid argument"
        );
        let e = DpdkError {
            call: "rte_thread_register",
            port: None,
            errno: libc::ENOMEM,
        };
        assert_eq!(
            e.to_string(),
            "rte_thread_register failed: Cannot allocate memory"
        );
    }

    #[test]
    fn port_errors_say_what_to_do() {
        let e = PortError::NotEnoughQueues {
            port: 1,
            name: "net_ring0".into(),
            dir: "RX",
            max: 1,
            wanted: 4,
        };
        assert_eq!(
            e.to_string(),
            "port 1 (net_ring0) supports 1 RX queues but 4 were requested: use fewer worker cores or a NIC with more queues"
        );
        assert!(PortError::NoHugepages
            .to_string()
            .contains("hugepage-setup reserve --pages 512"));
    }
}
