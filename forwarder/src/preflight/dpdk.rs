//! The DPDK checks of preflight: hugepages reserved and a hugetlbfs mounted, IOMMU groups,
//! vfio-pci and `/dev/vfio`, each configured NIC bound to a DPDK-capable driver (as
//! `dpdk-devbind.py --status` reads it from `bus/pci/devices`), and enough queues on it for
//! the workers.

use std::path::Path;

use super::{list_dir, read, read_u64, Options, Report, Status};

/// Drivers a DPDK PMD can drive a NIC through. The Mellanox ones are bifurcated: DPDK works
/// beside the kernel driver, so no rebinding is needed.
const DPDK_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];
const BIFURCATED_DRIVERS: &[&str] = &["mlx5_core", "mlx4_core"];

pub(super) fn is_vdev(name: &str) -> bool {
    name.starts_with("net_") || name.starts_with("eth_")
}

/// The hugepage pools in `dir` (its `hugepages-<size>kB` folders), each as (`place`, page
/// size in KiB, pages reserved, pages free).
fn pools_in(dir: &Path, place: &str) -> Vec<(String, u64, u64, u64)> {
    list_dir(dir)
        .iter()
        .filter_map(|size| {
            let kib = size
                .strip_prefix("hugepages-")
                .and_then(|s| s.strip_suffix("kB"))
                .and_then(|s| s.parse().ok())?;
            let p = dir.join(size);
            Some((
                place.to_string(),
                kib,
                read_u64(&p.join("nr_hugepages")),
                read_u64(&p.join("free_hugepages")),
            ))
        })
        .collect()
}

pub(super) fn check_hugepages(root: &Path, min_mib: u64, r: &mut Report) {
    // Per-node pools when the kernel has nodes, else the global ones.
    let nodes = root.join("sys/devices/system/node");
    let mut pools: Vec<(String, u64, u64, u64)> = list_dir(&nodes)
        .iter()
        .filter(|n| n.starts_with("node"))
        .flat_map(|node| pools_in(&nodes.join(node).join("hugepages"), node))
        .collect();
    if pools.is_empty() {
        pools = pools_in(&root.join("sys/kernel/mm/hugepages"), "all");
    }
    let reserve = "hugepage-setup reserve --pages 512 (as root; 2 MiB pages)";
    if pools.is_empty() {
        r.push(
            "hugepages",
            Status::Fail,
            "the kernel offers no hugepages (no hugepages-*kB pools)",
            Some(
                "use a kernel with CONFIG_HUGETLBFS, or run with --eal '--no-huge' for tests"
                    .into(),
            ),
        );
    } else {
        let reserved_mib: u64 = pools.iter().map(|(_, kib, n, _)| kib * n / 1024).sum();
        let free_mib: u64 = pools.iter().map(|(_, kib, _, f)| kib * f / 1024).sum();
        let per: Vec<String> = pools
            .iter()
            .filter(|p| p.2 > 0)
            .map(|(w, kib, n, f)| format!("{w}: {n} x {}M ({f} free)", kib / 1024))
            .collect();
        if reserved_mib == 0 {
            r.push(
                "hugepages",
                Status::Fail,
                "no hugepages reserved",
                Some(reserve.into()),
            );
        } else if free_mib < min_mib {
            r.push(
                "hugepages",
                Status::Warn,
                format!("{reserved_mib} MiB reserved but only {free_mib} MiB free, {min_mib} MiB needed ({})", per.join(", ")),
                Some(format!("stop other DPDK processes or reserve more: hugepage-setup reserve --pages {}", min_mib.div_ceil(2).max(512))),
            );
        } else {
            r.push(
                "hugepages",
                Status::Ok,
                format!(
                    "{reserved_mib} MiB reserved, {free_mib} MiB free ({})",
                    per.join(", ")
                ),
                None,
            );
        }
    }
    let mounts = read(root, "proc/mounts").unwrap_or_default();
    let huge: Vec<&str> = mounts
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    if huge.is_empty() {
        r.push(
            "hugetlbfs",
            Status::Fail,
            "no hugetlbfs mounted",
            Some(format!(
                "{reserve} mounts /dev/hugepages; or pass --eal '--in-memory'"
            )),
        );
    } else {
        r.push(
            "hugetlbfs",
            Status::Ok,
            format!("mounted at {}", huge.join(", ")),
            None,
        );
    }
}

/// Whether the PCI-passthrough checks matter for this set-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// A configured port is a PCI NIC.
    Required,
    /// No ports were given: report problems as warnings (virtual devices work without).
    Optional,
    /// Only virtual devices are configured.
    No,
}

pub(super) fn check_iommu(root: &Path, need: Need, r: &mut Report) {
    if need == Need::No {
        r.push(
            "iommu",
            Status::Skip,
            "only virtual devices configured",
            None,
        );
        return;
    }
    let (fail, why) = match need {
        Need::Optional => (
            Status::Warn,
            " (needed for PCI NICs; virtual devices work without)",
        ),
        _ => (Status::Fail, ""),
    };
    let groups = list_dir(&root.join("sys/kernel/iommu_groups"));
    let cmdline = read(root, "proc/cmdline").unwrap_or_default();
    if groups.is_empty() {
        let noiommu = read(
            root,
            "sys/module/vfio/parameters/enable_unsafe_noiommu_mode",
        )
        .is_some_and(|v| v.trim() == "Y" || v.trim() == "1");
        if noiommu {
            r.push("iommu", Status::Warn, "no IOMMU, vfio runs in unsafe no-IOMMU mode (no DMA isolation)", Some("enable the IOMMU: add intel_iommu=on iommu=pt (or amd_iommu=on) to the kernel command line".into()));
        } else {
            let asked = ["intel_iommu=on", "amd_iommu=on", "iommu=pt"]
                .iter()
                .any(|o| cmdline.split_whitespace().any(|w| w == *o));
            let hint = if asked {
                "the kernel command line asks for one: check the firmware's VT-d/AMD-Vi setting"
            } else {
                "the kernel command line does not enable one"
            };
            r.push(
                "iommu",
                fail,
                format!("no IOMMU groups in /sys/kernel/iommu_groups; {hint}{why}"),
                Some("enable VT-d/AMD-Vi in the firmware and add intel_iommu=on iommu=pt to the kernel command line; or, without an IOMMU, `modprobe vfio enable_unsafe_noiommu_mode=1`".into()),
            );
        }
    } else {
        r.push(
            "iommu",
            Status::Ok,
            format!("{} IOMMU groups", groups.len()),
            None,
        );
    }
    let module = root.join("sys/module/vfio_pci").exists()
        || root.join("sys/bus/pci/drivers/vfio-pci").exists();
    if module {
        r.push("vfio-pci", Status::Ok, "vfio-pci driver loaded", None);
    } else {
        r.push(
            "vfio-pci",
            fail,
            format!("the vfio-pci module is not loaded{why}"),
            Some("modprobe vfio-pci".into()),
        );
    }
    if root.join("dev/vfio").exists() {
        r.push("/dev/vfio", Status::Ok, "present", None);
    } else {
        r.push(
            "/dev/vfio",
            fail,
            format!("/dev/vfio is missing{why}"),
            Some("modprobe vfio-pci (and in a container, pass --device /dev/vfio)".into()),
        );
    }
}

/// One PCI network device as `dpdk-devbind.py --status` would list it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PciNic {
    addr: String,
    driver: Option<String>,
    ifaces: Vec<String>,
}

fn pci_nics(root: &Path) -> Vec<PciNic> {
    let dir = root.join("sys/bus/pci/devices");
    list_dir(&dir)
        .into_iter()
        .filter_map(|addr| {
            let d = dir.join(&addr);
            let class = std::fs::read_to_string(d.join("class")).ok()?;
            // PCI class 0x02xxxx is "network controller".
            if !class.trim().trim_start_matches("0x").starts_with("02") {
                return None;
            }
            let driver = std::fs::read_link(d.join("driver"))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            // virtio NICs keep their netdev one level down (virtioN/net/IF).
            let mut ifaces = list_dir(&d.join("net"));
            for sub in list_dir(&d).iter().filter(|s| s.starts_with("virtio")) {
                ifaces.extend(list_dir(&d.join(sub).join("net")));
            }
            Some(PciNic {
                ifaces,
                addr,
                driver,
            })
        })
        .collect()
}

fn normalise_pci(s: &str) -> String {
    // "03:00.0" -> "0000:03:00.0"
    if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s.to_owned()
    }
}

fn looks_like_pci(s: &str) -> bool {
    let n = normalise_pci(s);
    let b = n.as_bytes();
    n.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

pub(super) fn check_nics(root: &Path, opts: &Options, r: &mut Report) {
    let nics = pci_nics(root);
    if opts.ports.is_empty() {
        if nics.is_empty() {
            r.push(
                "nics",
                Status::Skip,
                "no PCI network devices and no DPDK port configured",
                None,
            );
        }
        for n in &nics {
            let drv = n.driver.as_deref().unwrap_or("no driver");
            let (status, fix) = if n
                .driver
                .as_deref()
                .is_some_and(|d| DPDK_DRIVERS.contains(&d) || BIFURCATED_DRIVERS.contains(&d))
            {
                (Status::Ok, None)
            } else {
                (Status::Skip, None)
            };
            let ifs = if n.ifaces.is_empty() {
                String::new()
            } else {
                format!(" (if={})", n.ifaces.join(","))
            };
            r.push(
                format!("nic {}", n.addr),
                status,
                format!("drv={drv}{ifs}; not configured as a DPDK port"),
                fix,
            );
        }
        return;
    }
    for port in &opts.ports {
        if is_vdev(port) {
            let name = port.split(',').next().unwrap_or(port);
            r.push(
                format!("port {name}"),
                Status::Ok,
                "virtual device: no binding needed",
                None,
            );
            continue;
        }
        let nic = if looks_like_pci(port) {
            let addr = normalise_pci(port);
            nics.iter().find(|n| n.addr == addr)
        } else {
            nics.iter().find(|n| n.ifaces.iter().any(|i| i == port))
        };
        let Some(nic) = nic else {
            let known: Vec<String> = nics
                .iter()
                .map(|n| format!("{} {}", n.addr, n.ifaces.join(",")))
                .collect();
            r.push(
                format!("port {port}"),
                Status::Fail,
                format!(
                    "no PCI network device '{port}' (found: {})",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join("; ")
                    }
                ),
                Some(
                    "name the NIC by its PCI address as `dpdk-devbind.py --status` lists it".into(),
                ),
            );
            continue;
        };
        let name = format!("nic {}", nic.addr);
        match nic.driver.as_deref() {
            Some(d) if DPDK_DRIVERS.contains(&d) => {
                r.push(name.clone(), Status::Ok, format!("bound to {d}"), None);
            }
            Some(d) if BIFURCATED_DRIVERS.contains(&d) => {
                r.push(
                    name.clone(),
                    Status::Ok,
                    format!("{d}: bifurcated driver, DPDK runs beside the kernel"),
                    None,
                );
            }
            other => {
                let down = nic
                    .ifaces
                    .iter()
                    .map(|i| format!("ip link set {i} down && "))
                    .collect::<String>();
                let detail = match other {
                    Some(d) => format!(
                        "bound to kernel driver {d}{}",
                        if nic.ifaces.is_empty() {
                            String::new()
                        } else {
                            format!(" (if={})", nic.ifaces.join(","))
                        }
                    ),
                    None => "bound to no driver".into(),
                };
                r.push(
                    name.clone(),
                    Status::Fail,
                    detail,
                    Some(format!(
                        "{down}dpdk-devbind.py --bind=vfio-pci {}",
                        nic.addr
                    )),
                );
            }
        }
        check_queues(root, nic, opts.queues, r);
    }
}

fn check_queues(root: &Path, nic: &PciNic, wanted: usize, r: &mut Report) {
    let name = format!("queues {}", nic.addr);
    if let Some(iface) = nic.ifaces.first() {
        let q = list_dir(&root.join("sys/class/net").join(iface).join("queues"));
        let rx = q.iter().filter(|e| e.starts_with("rx-")).count();
        let tx = q.iter().filter(|e| e.starts_with("tx-")).count();
        if rx.min(tx) < wanted {
            r.push(name, Status::Warn, format!("{iface} has {rx} RX / {tx} TX queues now, {wanted} needed"), Some(format!("ethtool -L {iface} combined {wanted} (the limit under DPDK may differ), or use fewer workers")));
        } else {
            r.push(
                name,
                Status::Ok,
                format!("{iface} has {rx} RX / {tx} TX queues, {wanted} needed"),
                None,
            );
        }
        return;
    }
    // Bound to a userspace driver: the MSI-X vectors bound the queue count.
    let vectors = list_dir(
        &root
            .join("sys/bus/pci/devices")
            .join(&nic.addr)
            .join("msi_irqs"),
    )
    .len();
    if vectors == 0 {
        r.push(
            name,
            Status::Skip,
            "queue count is known once DPDK probes the device (the forwarder checks it at start)",
            None,
        );
    } else if vectors < wanted {
        r.push(
            name,
            Status::Warn,
            format!("{vectors} MSI-X vectors for {wanted} queues"),
            Some("use fewer workers".into()),
        );
    } else {
        r.push(
            name,
            Status::Ok,
            format!("{vectors} MSI-X vectors, {wanted} queues needed"),
            None,
        );
    }
}
