//! The forwarder's DPDK port set in one call: start the EAL with the user's arguments, make
//! one mbuf pool per NUMA socket the ports sit on, open every port with the same queue counts
//! and split them into per-queue halves for the engine. `cakewalk run --port-kind dpdk` and
//! the benchmarks use this; tests use the pieces directly.

use super::eal::Eal;
use super::error::PortError;
use super::ethdev::{EthDev, EthDevConfig, LinkStatus, RxQueue, TxQueue};
use super::mempool::Mempool;

/// What to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkPortsConfig {
    /// EAL arguments, e.g. `["-l", "1-2", "--vdev=net_null0", "--vdev=net_null1"]`.
    pub eal_args: Vec<String>,
    /// Port names (vdev names or PCI addresses), in the forwarder's port order.
    pub ports: Vec<String>,
    /// RX queues per port (one per worker that polls it).
    pub rx_queues: u16,
    /// TX queues per port (one per TxQueue).
    pub tx_queues: u16,
    /// Descriptors per ring.
    pub desc: u16,
    /// Packets the shapers may hold per TX queue (CAKE's packet limit plus the intake), so the
    /// pools are sized to never run dry while queues are full.
    pub queued_per_tx_queue: u32,
    /// Mbufs per pool; 0 sizes it from the numbers above.
    pub mbufs: u32,
    /// At least this many mbufs per port in a pool sized from the numbers above
    /// (`ports.pool_buffers`: a user who raises it gets at least that).
    pub min_mbufs_per_port: u32,
}

impl Default for DpdkPortsConfig {
    fn default() -> DpdkPortsConfig {
        DpdkPortsConfig {
            eal_args: Vec::new(),
            ports: Vec::new(),
            rx_queues: 1,
            tx_queues: 1,
            desc: 1024,
            queued_per_tx_queue: 10240 + 4096,
            mbufs: 0,
            min_mbufs_per_port: 0,
        }
    }
}

impl DpdkPortsConfig {
    /// Mbufs one pool needs for `ports` ports: every ring full, every shaper full, and a
    /// burst per queue in flight, plus slack for the per-lcore caches.
    pub fn pool_size(&self, ports: usize) -> u32 {
        if self.mbufs > 0 {
            return self.mbufs;
        }
        let per_port = (u64::from(self.rx_queues) * u64::from(self.desc)
            + u64::from(self.tx_queues)
                * (u64::from(self.desc) + u64::from(self.queued_per_tx_queue) + 64))
            .max(u64::from(self.min_mbufs_per_port));
        let n = per_port * ports as u64 + 4096;
        // DPDK pools are most memory-efficient at 2^k - 1.
        u32::try_from((n + 1).next_power_of_two() - 1).unwrap_or(u32::MAX)
    }
}

/// Link state and extended counters of one port, for the stats view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStatus {
    /// Port name.
    pub name: String,
    /// Link state, when the driver reports it.
    pub link: Option<LinkStatus>,
    /// `rte_eth_xstats` name/value pairs.
    pub xstats: Vec<(String, u64)>,
}

/// Open ports, their pools and the EAL. Drop the queue halves (the engine) first; this set
/// then stops the ports, frees the pools and cleans up the EAL.
#[derive(Debug)]
pub struct DpdkPorts {
    /// Per port, its RX halves (taken by [`DpdkPorts::take_queues`]).
    rx: Vec<Vec<RxQueue>>,
    /// Per port, its TX halves.
    tx: Vec<Vec<TxQueue>>,
    /// The devices, in port order.
    pub devs: Vec<EthDev>,
    /// One pool per NUMA socket in use.
    pub pools: Vec<Mempool>,
    /// The EAL.
    pub eal: Eal,
}

impl DpdkPorts {
    /// Starts the EAL and opens `cfg.ports`.
    ///
    /// # Errors
    /// Anything [`Eal::init`], [`Mempool::new`] or [`EthDev::open`] reports, e.g. missing
    /// hugepages (with the `hugepage-setup` command), an unknown port name (with the list),
    /// or a port with too few queues.
    pub fn open(cfg: &DpdkPortsConfig) -> Result<DpdkPorts, PortError> {
        if cfg.ports.is_empty() {
            return Err(PortError::Invalid(
                "no DPDK ports named; give them as --iface NAME[,NAME] (vdev names or PCI addresses)".into(),
            ));
        }
        let eal = Eal::init(&cfg.eal_args)?;
        // Group the ports by NUMA socket, one pool each.
        let mut sockets: Vec<(i32, usize)> = Vec::new();
        let mut port_socket = Vec::with_capacity(cfg.ports.len());
        for name in &cfg.ports {
            let id = EthDev::port_id(&eal, name)?;
            let socket = EthDev::info_of(id)?.socket;
            match sockets.iter_mut().find(|(s, _)| *s == socket) {
                Some((_, n)) => *n += 1,
                None => sockets.push((socket, 1)),
            }
            port_socket.push(socket);
        }
        let mut pools = Vec::with_capacity(sockets.len());
        for (socket, n) in &sockets {
            let name = if *socket < 0 {
                "cw_pool_any".to_owned()
            } else {
                format!("cw_pool_s{socket}")
            };
            pools.push(Mempool::new(&eal, &name, cfg.pool_size(*n), *socket)?);
        }
        let dcfg = EthDevConfig {
            rx_queues: cfg.rx_queues,
            tx_queues: cfg.tx_queues,
            rx_desc: cfg.desc,
            tx_desc: cfg.desc,
            ..EthDevConfig::default()
        };
        let (mut devs, mut rx, mut tx) = (Vec::new(), Vec::new(), Vec::new());
        for (name, socket) in cfg.ports.iter().zip(&port_socket) {
            let i = sockets
                .iter()
                .position(|(s, _)| s == socket)
                .expect("every socket has a pool");
            let mut dev = EthDev::open(&eal, name, &dcfg, &pools[i])?;
            let (r, t) = dev.split()?;
            rx.push(r);
            tx.push(t);
            devs.push(dev);
        }
        Ok(DpdkPorts {
            rx,
            tx,
            devs,
            pools,
            eal,
        })
    }

    /// Hands out every port's RX and TX halves (per port, per queue); empty after the first
    /// call.
    pub fn take_queues(&mut self) -> (Vec<Vec<RxQueue>>, Vec<Vec<TxQueue>>) {
        (std::mem::take(&mut self.rx), std::mem::take(&mut self.tx))
    }

    /// Link state and xstats of every port (allocates; call once per stats interval).
    pub fn status(&self) -> Vec<PortStatus> {
        self.devs
            .iter()
            .map(|d| PortStatus {
                name: d.name().to_owned(),
                link: d.link().ok(),
                xstats: d.xstats().unwrap_or_default(),
            })
            .collect()
    }

    /// Mbufs out of the pools right now (in rings, queues and bursts).
    pub fn mbufs_in_use(&self) -> u64 {
        self.pools.iter().map(|p| u64::from(p.in_use())).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_hold_full_rings_and_full_shapers() {
        let cfg = DpdkPortsConfig::default();
        let n = cfg.pool_size(2);
        assert!(u64::from(n) >= 2 * (1024 + 1024 + 14336), "{n}");
        assert_eq!((n + 1).count_ones(), 1, "2^k - 1");
        assert_eq!(
            DpdkPortsConfig {
                mbufs: 4095,
                ..cfg.clone()
            }
            .pool_size(2),
            4095
        );
        // A raised ports.pool_buffers wins over the computed size; a lower one does not.
        let raised = DpdkPortsConfig {
            min_mbufs_per_port: 100_000,
            ..cfg.clone()
        };
        assert_eq!(raised.pool_size(2), 262_143);
        let lowered = DpdkPortsConfig {
            min_mbufs_per_port: 10,
            ..cfg.clone()
        };
        assert_eq!(lowered.pool_size(2), n);
    }
}
