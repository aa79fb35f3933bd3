//! Ethernet devices: [`EthDev::open`] configures a port with N RX and N TX queues (RSS over
//! IP/TCP/UDP when it has more than one RX queue, limited to what the device can hash),
//! starts it, and [`EthDev::split`] hands out one [`RxQueue`] and one [`TxQueue`] per queue
//! for the workers. Also link status and extended statistics for the stats view.

use std::ffi::{CStr, CString};
use std::sync::Arc;

use super::eal::Eal;
use super::error::{DpdkError, PortError};
use super::mbuf::Mbuf;
use super::mempool::Mempool;
use crate::port::{PortRx, PortTx};

/// How to set up a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthDevConfig {
    /// RX queues (one per RX worker).
    pub rx_queues: u16,
    /// TX queues (one per TxQueue / worker).
    pub tx_queues: u16,
    /// Descriptors per RX ring.
    pub rx_desc: u16,
    /// Descriptors per TX ring.
    pub tx_desc: u16,
    /// Spread flows over RX queues by the NIC's RSS hash and deliver that hash in the mbuf.
    pub rss: bool,
    /// Receive every frame, not only the ones for the port's MAC (a forwarder needs this).
    pub promiscuous: bool,
}

impl Default for EthDevConfig {
    fn default() -> EthDevConfig {
        EthDevConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            rss: true,
            promiscuous: true,
        }
    }
}

/// What the driver says about a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevInfo {
    /// Driver name ("net_null", "net_ice", ...).
    pub driver: String,
    /// Most RX queues the device has.
    pub max_rx_queues: u16,
    /// Most TX queues the device has.
    pub max_tx_queues: u16,
    /// RSS hash functions the device supports (`RTE_ETH_RSS_*` bits).
    pub flow_type_rss_offloads: u64,
    /// NUMA socket of the device (-1 when unknown, e.g. for vdevs).
    pub socket: i32,
}

/// Link state from `rte_eth_link_get_nowait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Link is up.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// A configured and started port. Dropping it (after the queues) stops and closes it.
pub struct EthDev {
    inner: Arc<DevInner>,
    split: bool,
}

struct DevInner {
    port: u16,
    name: String,
    info: DevInfo,
    rss_hf: u64,
    cfg: EthDevConfig,
    /// The RX rings refill from this pool, so it must outlive the started device.
    _pool: Mempool,
    _eal: Eal,
}

impl std::fmt::Debug for EthDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EthDev")
            .field("port", &self.inner.port)
            .field("name", &self.inner.name)
            .field("info", &self.inner.info)
            .finish()
    }
}

/// Returns the ethdev name of `port`.
pub(crate) fn port_name(port: u16) -> Result<String, DpdkError> {
    let mut buf = [0 as std::ffi::c_char; dpdk_sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: buf has RTE_ETH_NAME_MAX_LEN bytes, the size the call writes at most.
    let ret = unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(port, buf.as_mut_ptr()) };
    if ret != 0 {
        return Err(DpdkError::from_ret(
            "rte_eth_dev_get_name_by_port",
            Some(port),
            ret,
        ));
    }
    // SAFETY: on success DPDK wrote a NUL-terminated name into buf.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// Wanted RSS hash functions: L3 and L4 over IPv4 and IPv6.
fn wanted_rss() -> u64 {
    // SAFETY: plain reads of constant globals defined in the shim.
    unsafe { dpdk_sys::cw_eth_rss_ip | dpdk_sys::cw_eth_rss_tcp | dpdk_sys::cw_eth_rss_udp }
}

impl EthDev {
    /// Looks up a port by its DPDK name (a vdev name like "net_null0" or a PCI address).
    ///
    /// # Errors
    /// [`PortError::NoSuchPort`] listing the ports that exist.
    pub fn port_id(eal: &Eal, name: &str) -> Result<u16, PortError> {
        let cname = CString::new(name).map_err(|_| PortError::BadArgument(name.to_owned()))?;
        let mut port = 0u16;
        // SAFETY: cname is a valid C string; port is a valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port) };
        if ret == 0 {
            return Ok(port);
        }
        let known = eal
            .port_names()
            .into_iter()
            .map(|(_, n)| n)
            .collect::<Vec<_>>()
            .join(", ");
        Err(PortError::NoSuchPort {
            name: name.to_owned(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known
            },
        })
    }

    /// Returns the driver's description of `port`.
    ///
    /// # Errors
    /// When the port id is invalid.
    pub fn info_of(port: u16) -> Result<DevInfo, DpdkError> {
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: info is a valid out-pointer to a zeroed rte_eth_dev_info.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(port, &mut info) };
        if ret != 0 {
            return Err(DpdkError::from_ret("rte_eth_dev_info_get", Some(port), ret));
        }
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name points at the driver's static NUL-terminated name.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: reads the socket recorded for a valid port id.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(port) };
        Ok(DevInfo {
            driver,
            max_rx_queues: info.max_rx_queues,
            max_tx_queues: info.max_tx_queues,
            flow_type_rss_offloads: info.flow_type_rss_offloads,
            socket,
        })
    }

    /// Configures the port named `name` with `cfg`, sets up its rings with buffers from
    /// `pool`, and starts it.
    ///
    /// # Errors
    /// [`PortError::NoSuchPort`], [`PortError::NotEnoughQueues`], or the failed call
    /// (`rte_eth_dev_configure`, `rte_eth_rx_queue_setup`, ... ) with its port and errno.
    pub fn open(
        eal: &Eal,
        name: &str,
        cfg: &EthDevConfig,
        pool: &Mempool,
    ) -> Result<EthDev, PortError> {
        let port = Self::port_id(eal, name)?;
        let info = Self::info_of(port)?;
        for (dir, max, wanted) in [
            ("RX", info.max_rx_queues, cfg.rx_queues),
            ("TX", info.max_tx_queues, cfg.tx_queues),
        ] {
            if wanted == 0 {
                return Err(PortError::Invalid(format!(
                    "port {port} ({name}): 0 {dir} queues requested; ask for at least 1"
                )));
            }
            if wanted > max {
                return Err(PortError::NotEnoughQueues {
                    port,
                    name: name.to_owned(),
                    dir,
                    max,
                    wanted,
                });
            }
        }
        let mut conf = dpdk_sys::rte_eth_conf::default();
        let rss_hf = if cfg.rss {
            wanted_rss() & info.flow_type_rss_offloads
        } else {
            0
        };
        if cfg.rx_queues > 1 && rss_hf != 0 {
            conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
            // rss_key NULL: the driver's default key.
        }
        // SAFETY: port is valid; conf is a fully initialised rte_eth_conf that DPDK copies.
        let ret =
            unsafe { dpdk_sys::rte_eth_dev_configure(port, cfg.rx_queues, cfg.tx_queues, &conf) };
        if ret != 0 {
            return Err(DpdkError::from_ret("rte_eth_dev_configure", Some(port), ret).into());
        }
        let (mut rx_desc, mut tx_desc) = (cfg.rx_desc, cfg.tx_desc);
        // SAFETY: port is valid and configured; both are valid in/out pointers.
        let ret =
            unsafe { dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(port, &mut rx_desc, &mut tx_desc) };
        if ret != 0 {
            return Err(
                DpdkError::from_ret("rte_eth_dev_adjust_nb_rx_tx_desc", Some(port), ret).into(),
            );
        }
        // SOCKET_ID_ANY (-1) wraps to u32::MAX, which is how DPDK spells it in this argument.
        let socket = info.socket as u32;
        for q in 0..cfg.rx_queues {
            // SAFETY: port configured with rx_queues queues, q < rx_queues; NULL rxconf means
            // the driver's defaults; the pool outlives the device (kept in DevInner).
            let ret = unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    port,
                    q,
                    rx_desc,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            if ret != 0 {
                let e = DpdkError::from_ret("rte_eth_rx_queue_setup", Some(port), ret);
                return Err(PortError::RxQueueSetup {
                    port,
                    name: name.to_owned(),
                    queue: q,
                    reason: e.reason(),
                    pool_mbufs: pool.size(),
                });
            }
        }
        for q in 0..cfg.tx_queues {
            // SAFETY: as above for TX; NULL txconf means the driver's defaults.
            let ret = unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(port, q, tx_desc, socket, std::ptr::null())
            };
            if ret != 0 {
                return Err(DpdkError::from_ret("rte_eth_tx_queue_setup", Some(port), ret).into());
            }
        }
        // SAFETY: port is configured with all queues set up.
        let ret = unsafe { dpdk_sys::rte_eth_dev_start(port) };
        if ret != 0 {
            return Err(DpdkError::from_ret("rte_eth_dev_start", Some(port), ret).into());
        }
        if cfg.promiscuous {
            // SAFETY: port is started. Some vdevs cannot do promiscuous mode (-ENOTSUP); they
            // deliver everything anyway, so the result is ignored.
            let _ = unsafe { dpdk_sys::rte_eth_promiscuous_enable(port) };
        }
        Ok(EthDev {
            inner: Arc::new(DevInner {
                port,
                name: name.to_owned(),
                info,
                rss_hf,
                cfg: cfg.clone(),
                _pool: pool.clone(),
                _eal: eal.clone(),
            }),
            split: false,
        })
    }

    /// The port id.
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// The port's DPDK name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The driver's description.
    pub fn info(&self) -> &DevInfo {
        &self.inner.info
    }

    /// RSS hash functions in use (0 when RSS is off or the device has none).
    pub fn rss_hf(&self) -> u64 {
        self.inner.rss_hf
    }

    /// Returns one receive and one transmit half per configured queue. Callable once; the
    /// device stays up until the `EthDev` and all halves are dropped.
    ///
    /// # Errors
    /// [`PortError::Invalid`] on a second call (each queue must have one owner).
    pub fn split(&mut self) -> Result<(Vec<RxQueue>, Vec<TxQueue>), PortError> {
        if self.split {
            return Err(PortError::Invalid(format!(
                "port {} ({}) was already split into queues",
                self.inner.port, self.inner.name
            )));
        }
        self.split = true;
        let rx = (0..self.inner.cfg.rx_queues)
            .map(|queue| RxQueue {
                port: self.inner.port,
                queue,
                _dev: self.inner.clone(),
                _not_sync: Default::default(),
            })
            .collect();
        let tx = (0..self.inner.cfg.tx_queues)
            .map(|queue| TxQueue {
                port: self.inner.port,
                queue,
                _dev: self.inner.clone(),
                _not_sync: Default::default(),
            })
            .collect();
        Ok((rx, tx))
    }

    /// The link state, without waiting.
    ///
    /// # Errors
    /// When the driver cannot report it.
    pub fn link(&self) -> Result<LinkStatus, DpdkError> {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: port valid; link is a valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(self.inner.port, &mut link) };
        if ret != 0 {
            return Err(DpdkError::from_ret(
                "rte_eth_link_get_nowait",
                Some(self.inner.port),
                ret,
            ));
        }
        Ok(LinkStatus {
            up: link.link_status() != 0,
            speed_mbps: link.link_speed,
            full_duplex: link.link_duplex() != 0,
        })
    }

    /// Extended statistics as (name, value) pairs, in the driver's order. Not for the data
    /// path (it allocates); the stats view calls it once per interval.
    ///
    /// # Errors
    /// When the driver cannot report them.
    pub fn xstats(&self) -> Result<Vec<(String, u64)>, DpdkError> {
        let port = self.inner.port;
        // SAFETY: a NULL buffer with size 0 asks for the count only.
        let n = unsafe { dpdk_sys::rte_eth_xstats_get_names(port, std::ptr::null_mut(), 0) };
        if n < 0 {
            return Err(DpdkError::from_ret(
                "rte_eth_xstats_get_names",
                Some(port),
                n,
            ));
        }
        let cap = n as usize;
        let mut names = vec![dpdk_sys::rte_eth_xstat_name::default(); cap];
        let mut values = vec![dpdk_sys::rte_eth_xstat::default(); cap];
        // SAFETY: names has room for `n` entries.
        let got = unsafe { dpdk_sys::rte_eth_xstats_get_names(port, names.as_mut_ptr(), n as u32) };
        if got < 0 || got as usize > cap {
            return Err(DpdkError::from_ret(
                "rte_eth_xstats_get_names",
                Some(port),
                got.min(-1),
            ));
        }
        // SAFETY: values has room for `n` entries.
        let got_v = unsafe { dpdk_sys::rte_eth_xstats_get(port, values.as_mut_ptr(), n as u32) };
        if got_v < 0 || got_v as usize > cap {
            return Err(DpdkError::from_ret(
                "rte_eth_xstats_get",
                Some(port),
                got_v.min(-1),
            ));
        }
        Ok(values[..got_v as usize]
            .iter()
            .filter_map(|v| {
                let name = names.get(v.id as usize)?;
                // SAFETY: DPDK NUL-terminates every name within its 64 bytes.
                let s = unsafe { CStr::from_ptr(name.name.as_ptr()) };
                Some((s.to_string_lossy().into_owned(), v.value))
            })
            .collect())
    }
}

impl Drop for DevInner {
    fn drop(&mut self) {
        // SAFETY: no queue half exists any more (each holds this Arc), so no thread polls the
        // port; stop then close releases the mbufs held in the rings back to the pool, which
        // is still alive (dropped after this body).
        let _ = unsafe { dpdk_sys::rte_eth_dev_stop(self.port) };
        // SAFETY: as above; the port is stopped.
        let _ = unsafe { dpdk_sys::rte_eth_dev_close(self.port) };
    }
}

/// The receive half of one queue of a started port. `Send` but not `Sync`: one worker polls it.
pub struct RxQueue {
    port: u16,
    queue: u16,
    _dev: Arc<DevInner>,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

/// The transmit half of one queue of a started port. `Send` but not `Sync`.
pub struct TxQueue {
    port: u16,
    queue: u16,
    _dev: Arc<DevInner>,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

// SAFETY: DevInner is immutable after open and its Drop runs once, after every half is gone.
unsafe impl Send for DevInner {}
// SAFETY: as above; shared access only reads plain fields.
unsafe impl Sync for DevInner {}

impl std::fmt::Debug for RxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RxQueue{:?}", self.id())
    }
}

impl std::fmt::Debug for TxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TxQueue{:?}", self.id())
    }
}

impl RxQueue {
    /// The (port, queue) this half polls.
    pub fn id(&self) -> (u16, u16) {
        (self.port, self.queue)
    }
}

impl TxQueue {
    /// The (port, queue) this half feeds.
    pub fn id(&self) -> (u16, u16) {
        (self.port, self.queue)
    }
}

impl PortRx for RxQueue {
    type Buf = Mbuf;

    /// Appends up to `max` packets. Reserves room in `burst` only when it has less than
    /// `max` spare capacity (the first call with a fresh `Vec`), never after.
    #[inline]
    fn rx_burst(&mut self, burst: &mut Vec<Mbuf>, max: usize) -> usize {
        let max = max.min(usize::from(u16::MAX));
        if burst.capacity() - burst.len() < max {
            burst.reserve(max);
        }
        let len = burst.len();
        let spare = burst.spare_capacity_mut();
        // SAFETY: spare has room for at least `max` pointers and Mbuf is a transparent
        // NonNull<rte_mbuf>; the queue is polled by this thread only (&mut self, !Sync).
        let n = unsafe {
            dpdk_sys::cw_rte_eth_rx_burst(
                self.port,
                self.queue,
                spare.as_mut_ptr().cast(),
                max as u16,
            )
        };
        // SAFETY: the driver wrote `n` non-NULL mbuf pointers, each now owned by us.
        unsafe { burst.set_len(len + usize::from(n)) };
        usize::from(n)
    }
}

impl PortTx for TxQueue {
    type Buf = Mbuf;

    #[inline]
    fn tx_burst(&mut self, burst: &mut Vec<Mbuf>) -> usize {
        let len = burst.len();
        if len == 0 {
            return 0;
        }
        let n = len.min(usize::from(u16::MAX)) as u16;
        let p = burst.as_mut_ptr();
        // SAFETY: p points at `len` owned mbufs (transparent pointers); the driver takes
        // ownership of the first `sent` of them and leaves the rest untouched.
        let sent = usize::from(unsafe {
            dpdk_sys::cw_rte_eth_tx_burst(self.port, self.queue, p.cast(), n)
        });
        // SAFETY: the first `sent` entries now belong to the driver; shortening first means
        // they are never dropped here, and the tail below is still initialised memory.
        unsafe { burst.set_len(0) };
        // SAFETY: sent <= len, so p + sent stays inside the allocation.
        let tail = unsafe { p.add(sent) };
        // SAFETY: moves the len - sent unsent mbufs to the front; the regions may overlap,
        // which ptr::copy allows.
        unsafe { std::ptr::copy(tail, p, len - sent) };
        // SAFETY: the first len - sent entries are now the initialised, owned unsent mbufs.
        unsafe { burst.set_len(len - sent) };
        sent
    }
}
