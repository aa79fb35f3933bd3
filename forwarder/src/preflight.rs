//! `cakewalk preflight`: checks that a box can run the DPDK data path and prints one line per
//! check with the fix. It reads only files (sysfs, procfs, /dev) under a configurable root,
//! so tests run it against fake trees in `tests/fixtures/sysfs/`; it changes nothing (binding
//! a NIC or reserving hugepages stays a separate, explicit command, printed as the fix).
//!
//! Checks: hugepages reserved and a hugetlbfs mounted; IOMMU groups, the vfio-pci module and
//! `/dev/vfio`; each configured NIC bound to a DPDK-capable driver (as
//! `dpdk-devbind.py --status` reads it: `bus/pci/devices/*/class` and `driver`); enough
//! queues for the workers (`class/net/*/queues`); worker cores present, isolated, and not
//! serving the busiest IRQs (`devices/system/cpu/isolated`, `proc/interrupts`); and the
//! configuration, whose validation the caller passes in.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Drivers a DPDK PMD can drive a NIC through. The Mellanox ones are bifurcated: DPDK works
/// beside the kernel driver, so no rebinding is needed.
const DPDK_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];
const BIFURCATED_DRIVERS: &[&str] = &["mlx5_core", "mlx4_core"];

/// What to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The file-system root ("/" on a real box).
    pub root: PathBuf,
    /// DPDK ports: PCI addresses ("0000:03:00.0" or "03:00.0"), kernel interface names, or
    /// vdev names ("net_null0,..."), as given to `--port-kind dpdk`.
    pub ports: Vec<String>,
    /// Queues each port needs (one per worker).
    pub queues: usize,
    /// Worker cores (empty: skip the core checks).
    pub cores: Vec<usize>,
    /// Hugepage memory the forwarder needs, in MiB.
    pub min_hugepage_mib: u64,
    /// The configuration check: `None` when no config was given, `Some(Err(text))` when it
    /// did not validate.
    pub config: Option<Result<(), String>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            root: PathBuf::from("/"),
            ports: Vec::new(),
            queues: 1,
            cores: Vec::new(),
            min_hugepage_mib: 512,
            config: None,
        }
    }
}

impl Options {
    /// Fills `ports` and `queues` from the `[ports]` table: every port of kind `dpdk`.
    pub fn with_ports(mut self, ports: &crate::port::PortsConfig) -> Options {
        for p in [&ports.a, &ports.b] {
            if p.kind == crate::port::PortKind::Dpdk && !p.iface.is_empty() {
                self.ports.push(p.iface.clone());
                self.queues = self.queues.max(p.rx_queues);
            }
        }
        self
    }
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Works, but slower or less predictable than it could be.
    Warn,
    /// The forwarder will not start (or not on DPDK) until this is fixed.
    Fail,
    /// Not applicable to this set-up.
    Skip,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Short name ("hugepages", "nic 0000:03:00.0", "core 2").
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// The command or change that fixes it.
    pub fix: Option<String>,
}

/// All checks, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Report {
    /// One per line.
    pub checks: Vec<Check>,
}

impl Report {
    /// True when no check failed.
    pub fn may_start(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    /// The check with this name, if any.
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    fn push(
        &mut self,
        name: impl Into<String>,
        status: Status,
        detail: impl Into<String>,
        fix: Option<String>,
    ) {
        self.checks.push(Check {
            name: name.into(),
            status,
            detail: detail.into(),
            fix,
        });
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.checks {
            let tag = match c.status {
                Status::Ok => " ok ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
                Status::Skip => "skip",
            };
            write!(f, "[{tag}] {}: {}", c.name, c.detail)?;
            if let Some(fix) = &c.fix {
                write!(f, "\n       fix: {fix}")?;
            }
            writeln!(f)?;
        }
        let (fails, warns) = self.checks.iter().fold((0, 0), |(f, w), c| match c.status {
            Status::Fail => (f + 1, w),
            Status::Warn => (f, w + 1),
            _ => (f, w),
        });
        if self.may_start() {
            write!(f, "ready: {warns} warning(s)")
        } else {
            write!(f, "not ready: {fails} check(s) failed, {warns} warning(s)")
        }
    }
}

/// Runs every check against the tree under `opts.root`.
pub fn run(opts: &Options) -> Report {
    let mut r = Report::default();
    let root = opts.root.as_path();
    check_hugepages(root, opts.min_hugepage_mib, &mut r);
    let pci_ports: Vec<&String> = opts.ports.iter().filter(|p| !is_vdev(p)).collect();
    let need = if !pci_ports.is_empty() {
        Need::Required
    } else if opts.ports.is_empty() {
        Need::Optional
    } else {
        Need::No
    };
    check_iommu(root, need, &mut r);
    check_nics(root, opts, &mut r);
    check_cores(root, &opts.cores, &mut r);
    match &opts.config {
        None => r.push("config", Status::Skip, "no configuration given", None),
        Some(Ok(())) => r.push("config", Status::Ok, "configuration is valid", None),
        Some(Err(e)) => r.push(
            "config",
            Status::Fail,
            e.clone(),
            Some("correct the configuration file".into()),
        ),
    }
    r
}

fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel)).ok()
}

fn read_u64(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn list_dir(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(path)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn is_vdev(name: &str) -> bool {
    name.starts_with("net_") || name.starts_with("eth_")
}

fn check_hugepages(root: &Path, min_mib: u64, r: &mut Report) {
    // Per-node pools when the kernel has nodes, else the global ones.
    let mut pools: Vec<(String, u64, u64, u64)> = Vec::new(); // (where, kib, reserved, free)
    for node in list_dir(&root.join("sys/devices/system/node"))
        .iter()
        .filter(|n| n.starts_with("node"))
    {
        let dir = root
            .join("sys/devices/system/node")
            .join(node)
            .join("hugepages");
        for size in list_dir(&dir) {
            if let Some(kib) = size
                .strip_prefix("hugepages-")
                .and_then(|s| s.strip_suffix("kB"))
                .and_then(|s| s.parse().ok())
            {
                let p = dir.join(&size);
                pools.push((
                    node.clone(),
                    kib,
                    read_u64(&p.join("nr_hugepages")),
                    read_u64(&p.join("free_hugepages")),
                ));
            }
        }
    }
    if pools.is_empty() {
        let dir = root.join("sys/kernel/mm/hugepages");
        for size in list_dir(&dir) {
            if let Some(kib) = size
                .strip_prefix("hugepages-")
                .and_then(|s| s.strip_suffix("kB"))
                .and_then(|s| s.parse().ok())
            {
                let p = dir.join(&size);
                pools.push((
                    "all".into(),
                    kib,
                    read_u64(&p.join("nr_hugepages")),
                    read_u64(&p.join("free_hugepages")),
                ));
            }
        }
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
enum Need {
    /// A configured port is a PCI NIC.
    Required,
    /// No ports were given: report problems as warnings (virtual devices work without).
    Optional,
    /// Only virtual devices are configured.
    No,
}

fn check_iommu(root: &Path, need: Need, r: &mut Report) {
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

fn check_nics(root: &Path, opts: &Options, r: &mut Report) {
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

/// Parses a kernel CPU list ("0-2,5") into core numbers.
fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b.min(a + 4096));
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// IRQs from `/proc/interrupts`: (irq, per-cpu counts, name).
fn parse_interrupts(text: &str) -> Vec<(String, Vec<u64>, String)> {
    let mut lines = text.lines();
    let ncpu = lines
        .next()
        .map(|h| h.split_whitespace().count())
        .unwrap_or(0);
    lines
        .filter_map(|l| {
            let (irq, rest) = l.split_once(':')?;
            let irq = irq.trim();
            // Only numbered IRQs can be moved.
            if irq.parse::<u32>().is_err() {
                return None;
            }
            let mut f = rest.split_whitespace();
            let counts: Vec<u64> = f
                .by_ref()
                .take(ncpu)
                .map(|c| c.parse().unwrap_or(0))
                .collect();
            // The chip and trigger columns come first; the device (action) name is last.
            let name = f.last().unwrap_or("").to_owned();
            Some((irq.to_owned(), counts, name))
        })
        .collect()
}

fn check_cores(root: &Path, cores: &[usize], r: &mut Report) {
    if cores.is_empty() {
        r.push("cores", Status::Skip, "no worker cores given", None);
        return;
    }
    let isolated =
        parse_cpu_list(&read(root, "sys/devices/system/cpu/isolated").unwrap_or_default());
    let irqs = parse_interrupts(&read(root, "proc/interrupts").unwrap_or_default());
    let total: u64 = irqs.iter().flat_map(|(_, c, _)| c.iter()).sum();
    let online = read(root, "sys/devices/system/cpu/online").map(|s| parse_cpu_list(&s));
    for &core in cores {
        let name = format!("core {core}");
        let present = match &online {
            Some(list) => list.contains(&core),
            None => root
                .join(format!("sys/devices/system/cpu/cpu{core}"))
                .exists(),
        };
        if !present {
            r.push(
                name,
                Status::Fail,
                "no such online CPU",
                Some("pick worker cores from /sys/devices/system/cpu/online".into()),
            );
            continue;
        }
        // The busiest IRQs on this core: more than 1% of all interrupts each.
        let mut busy: Vec<(&str, u64, &str)> = irqs
            .iter()
            .filter_map(|(irq, counts, n)| {
                let c = *counts.get(core)?;
                (total > 0 && c * 100 > total).then_some((irq.as_str(), c, n.as_str()))
            })
            .collect();
        busy.sort_by_key(|b| std::cmp::Reverse(b.1));
        let others: Vec<String> = online
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .filter(|c| !cores.contains(c))
            .map(usize::to_string)
            .collect();
        let move_to = if others.is_empty() {
            "0".to_owned()
        } else {
            others.join(",")
        };
        if let Some((irq, count, n)) = busy.first() {
            r.push(
                name,
                Status::Warn,
                format!(
                    "IRQ {irq} ({n}) fired {count} times on this worker core{}",
                    if isolated.contains(&core) {
                        ""
                    } else {
                        ", and the core is not isolated"
                    }
                ),
                Some(format!(
                    "echo {move_to} > /proc/irq/{irq}/smp_affinity_list"
                )),
            );
        } else if !isolated.contains(&core) {
            r.push(name, Status::Warn, "not isolated: the scheduler may run other tasks here", Some(format!("add isolcpus={core} nohz_full={core} rcu_nocbs={core} to the kernel command line")));
        } else {
            r.push(name, Status::Ok, "isolated, no busy IRQs", None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(name)
    }

    fn opts(name: &str) -> Options {
        Options {
            root: fixture(name),
            ports: vec!["0000:03:00.0".into()],
            queues: 2,
            cores: vec![2, 3],
            min_hugepage_mib: 512,
            config: Some(Ok(())),
        }
    }

    #[test]
    fn a_good_box_may_start_with_every_check_ok() {
        let r = run(&opts("good"));
        assert!(r.may_start(), "{r}");
        for c in &r.checks {
            assert_eq!(c.status, Status::Ok, "{r}");
        }
        assert!(r.to_string().ends_with("ready: 0 warning(s)"), "{r}");
    }

    #[test]
    fn missing_hugepages_fail_with_the_reserve_command() {
        let r = run(&opts("no-hugepages"));
        assert!(!r.may_start());
        let h = r.get("hugepages").unwrap();
        assert_eq!(h.status, Status::Fail);
        assert!(
            h.fix.as_deref().unwrap().contains("hugepage-setup reserve"),
            "{r}"
        );
        assert_eq!(r.get("hugetlbfs").unwrap().status, Status::Fail, "{r}");
    }

    #[test]
    fn a_box_without_iommu_or_vfio_fails_with_the_fixes() {
        let r = run(&opts("no-iommu"));
        assert!(!r.may_start());
        assert!(
            r.get("iommu")
                .unwrap()
                .fix
                .as_deref()
                .unwrap()
                .contains("intel_iommu=on"),
            "{r}"
        );
        assert_eq!(
            r.get("vfio-pci").unwrap().fix.as_deref(),
            Some("modprobe vfio-pci")
        );
        assert_eq!(r.get("/dev/vfio").unwrap().status, Status::Fail);
    }

    #[test]
    fn a_nic_on_its_kernel_driver_fails_with_the_bind_command() {
        let r = run(&opts("kernel-driver"));
        assert!(!r.may_start());
        let nic = r.get("nic 0000:03:00.0").unwrap();
        assert_eq!(nic.status, Status::Fail);
        assert!(nic.detail.contains("kernel driver ixgbe (if=eth1)"), "{r}");
        assert_eq!(
            nic.fix.as_deref(),
            Some("ip link set eth1 down && dpdk-devbind.py --bind=vfio-pci 0000:03:00.0")
        );
        let q = r.get("queues 0000:03:00.0").unwrap();
        assert_eq!(q.status, Status::Warn, "{r}");
        assert!(
            q.fix
                .as_deref()
                .unwrap()
                .contains("ethtool -L eth1 combined 2"),
            "{r}"
        );
    }

    #[test]
    fn a_nic_can_be_named_by_interface_or_short_pci_address() {
        for port in ["eth1", "03:00.0"] {
            let o = Options {
                ports: vec![port.into()],
                ..opts("kernel-driver")
            };
            assert_eq!(
                run(&o).get("nic 0000:03:00.0").unwrap().status,
                Status::Fail,
                "{port}"
            );
        }
        let o = Options {
            ports: vec!["0000:09:00.0".into()],
            ..opts("good")
        };
        let r = run(&o);
        assert!(
            r.get("port 0000:09:00.0")
                .unwrap()
                .detail
                .contains("found: 0000:03:00.0"),
            "{r}"
        );
    }

    #[test]
    fn busy_irqs_on_a_worker_core_are_reported_with_the_affinity_fix() {
        let r = run(&opts("kernel-driver"));
        let c = r.get("core 3").unwrap();
        assert_eq!(c.status, Status::Warn, "{r}");
        assert!(
            c.detail.contains("IRQ 42 (eth1-TxRx-0)") && c.detail.contains("not isolated"),
            "{r}"
        );
        assert_eq!(
            c.fix.as_deref(),
            Some("echo 0,1 > /proc/irq/42/smp_affinity_list")
        );
        assert_eq!(
            r.get("core 2").unwrap().status,
            Status::Warn,
            "core 2 is not isolated either: {r}"
        );
        let o = Options {
            cores: vec![7],
            ..opts("good")
        };
        assert_eq!(run(&o).get("core 7").unwrap().status, Status::Fail);
    }

    #[test]
    fn virtual_devices_need_no_iommu_or_binding() {
        let o = Options {
            ports: vec!["net_null0".into(), "net_pcap0,rx_pcap=a.pcap".into()],
            ..opts("no-iommu")
        };
        let r = run(&o);
        assert_eq!(r.get("iommu").unwrap().status, Status::Skip, "{r}");
        assert_eq!(r.get("port net_pcap0").unwrap().status, Status::Ok);
        assert!(r.get("vfio-pci").is_none());
    }

    #[test]
    fn without_ports_a_missing_iommu_only_warns() {
        let o = Options {
            ports: vec![],
            ..opts("no-iommu")
        };
        let r = run(&o);
        assert_eq!(r.get("iommu").unwrap().status, Status::Warn, "{r}");
        assert_eq!(r.get("vfio-pci").unwrap().status, Status::Warn, "{r}");
        assert!(
            r.get("iommu")
                .unwrap()
                .detail
                .contains("virtual devices work without"),
            "{r}"
        );
    }

    #[test]
    fn an_invalid_config_fails_and_no_config_is_skipped() {
        let o = Options {
            config: Some(Err("rate '2gbps' is not a rate; try '2gbit'".into())),
            ..opts("good")
        };
        let r = run(&o);
        assert!(!r.may_start());
        assert!(
            r.to_string()
                .contains("[FAIL] config: rate '2gbps' is not a rate"),
            "{r}"
        );
        let o = Options {
            config: None,
            ..opts("good")
        };
        assert_eq!(run(&o).get("config").unwrap().status, Status::Skip);
    }

    #[test]
    fn without_ports_every_pci_nic_is_listed_like_devbind_status() {
        let o = Options {
            ports: vec![],
            ..opts("kernel-driver")
        };
        let r = run(&o);
        let nic = r.get("nic 0000:03:00.0").unwrap();
        assert!(nic.detail.starts_with("drv=ixgbe (if=eth1)"), "{r}");
        assert!(
            r.get("nic 0000:00:1f.2").is_none(),
            "a SATA controller is no NIC: {r}"
        );
    }

    #[test]
    fn cpu_lists_and_interrupt_tables_parse() {
        assert_eq!(parse_cpu_list("0-2,5\n"), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpu_list(""), Vec::<usize>::new());
        let t = "           CPU0       CPU1\n  0:         10          0   IO-APIC    2-edge      timer\nNMI:          1          1   Non-maskable interrupts\n";
        let p = parse_interrupts(t);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].1, vec![10, 0]);
        assert_eq!(p[0].2, "timer");
    }
}
