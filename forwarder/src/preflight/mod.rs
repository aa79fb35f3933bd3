//! `cakewalk preflight`: checks that this machine can run the configured ports and prints one
//! line per check with the fix. Where `check-config` judges a file alone (it may run on
//! another machine), preflight judges the box. It reads files (sysfs, procfs, /dev) under a
//! configurable root, so tests run it against fake trees in `tests/fixtures/sysfs/`, and asks
//! the kernel about interfaces ([`Links`]); it changes nothing (binding a NIC, reserving
//! hugepages or turning an offload off stays a separate, explicit command, printed as the fix).
//!
//! AF_PACKET ports: the interface exists in this network namespace and is up (with carrier),
//! the process holds CAP_NET_RAW, a full-size frame at the interface's MTU fits
//! `ports.buffer_size`, GRO/LRO do not merge received segments into frames longer than a
//! buffer (they would be dropped as `rx_oversize`), and the two ports are two interfaces.
//!
//! DPDK (when a DPDK port is configured, or no configuration is given): hugepages reserved
//! and a hugetlbfs mounted; IOMMU groups, the vfio-pci module and `/dev/vfio`; each
//! configured NIC bound to a DPDK-capable driver (as `dpdk-devbind.py --status` reads it:
//! `bus/pci/devices/*/class` and `driver`); enough queues for the workers
//! (`class/net/*/queues`). Always: worker cores present, isolated, and not serving the
//! busiest IRQs (`devices/system/cpu/isolated`, `proc/interrupts`); and the configuration,
//! whose validation the caller passes in.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

mod afpacket;
mod dpdk;

use afpacket::check_afpacket;
pub use afpacket::check_link;
use dpdk::{check_hugepages, check_iommu, check_nics, is_vdev, Need};

/// Where interface facts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Links {
    /// Ask the kernel (ioctls), which answers for this process's network namespace: what the
    /// forwarder would open. The default on a real box.
    Kernel,
    /// Read `sys/class/net/IF/{ifindex,flags,mtu}` under the root (fake trees in tests;
    /// offloads are not in sysfs and read as unknown).
    Sysfs,
}

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
    /// Run the DPDK checks (hugepages, IOMMU, vfio, NIC binding): a DPDK port is configured,
    /// or no configuration was given.
    pub dpdk: bool,
    /// AF_PACKET ports as (side "a"/"b", port name, interface).
    pub afpacket: Vec<(String, String, String)>,
    /// `ports.buffer_size`: the longest frame a software port carries.
    pub buffer_size: usize,
    /// Where interface facts come from.
    pub links: Links,
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
            dpdk: true,
            afpacket: Vec::new(),
            buffer_size: crate::port::pool::DEFAULT_BUF_SIZE,
            links: Links::Kernel,
        }
    }
}

impl Options {
    /// Fills the ports from the `[ports]` table: every port of kind `dpdk` (the DPDK checks
    /// run only when there is one) and every `afpacket` port, and the buffer size.
    pub fn with_ports(mut self, ports: &crate::port::PortsConfig) -> Options {
        use crate::port::PortKind;
        self.dpdk = false;
        self.buffer_size = ports.buffer_size;
        for (i, p) in [&ports.a, &ports.b].into_iter().enumerate() {
            match p.kind {
                PortKind::Dpdk => {
                    self.dpdk = true;
                    if !p.iface.is_empty() {
                        self.ports.push(p.iface.clone());
                        self.queues = self.queues.max(p.rx_queues);
                    }
                }
                PortKind::Afpacket => self.afpacket.push((
                    ["a", "b"][i].to_string(),
                    ports.port_name(i),
                    p.iface.trim().to_string(),
                )),
                PortKind::Synth | PortKind::Pcap => {}
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
    /// What was checked: this machine, for which configuration (the first line printed).
    pub scope: String,
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
        if !self.scope.is_empty() {
            writeln!(f, "{}", self.scope)?;
        }
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

/// Runs every check against the tree under `opts.root` and, for interfaces, `opts.links`.
pub fn run(opts: &Options) -> Report {
    let mut r = Report {
        scope: scope_line(opts),
        checks: Vec::new(),
    };
    let root = opts.root.as_path();
    check_afpacket(opts, &mut r);
    if opts.dpdk {
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
    } else {
        r.push(
            "dpdk",
            Status::Skip,
            "no dpdk port configured: hugepages, IOMMU, vfio and NIC binding not checked",
            None,
        );
    }
    check_cores(root, &opts.cores, &mut r);
    check_thp(root, &mut r);
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

/// Says what this run checks: the machine, not just a file.
fn scope_line(opts: &Options) -> String {
    let machine = if opts.root == Path::new("/") {
        "this machine".to_string()
    } else {
        format!("the machine tree under {}", opts.root.display())
    };
    let what = match &opts.config {
        None => "what the DPDK data path needs (no --config: the configured ports are not checked)",
        Some(_) => {
            "the configured ports, capabilities and cores, and the file as check-config does"
        }
    };
    format!("preflight checks {machine}: {what}")
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

/// Transparent huge pages: the binary's allocator (mimalloc) advises its large regions for
/// them, and the circuits' CAKE instances, visited in no order a cache follows, live there;
/// in 4 KiB pages each visit pays page walks too (docs/circuits.md, "Sizing").
fn check_thp(root: &Path, r: &mut Report) {
    const NAME: &str = "huge pages (heap)";
    let Some(text) = read(root, "sys/kernel/mm/transparent_hugepage/enabled") else {
        r.push(
            NAME,
            Status::Skip,
            "this kernel has no transparent huge pages: the heap stays in 4 KiB pages",
            None,
        );
        return;
    };
    let mode = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .unwrap_or("unknown");
    if matches!(mode, "always" | "madvise") {
        r.push(
            NAME,
            Status::Ok,
            format!("transparent huge pages '{mode}': the heap's large regions get 2 MiB pages"),
            None,
        );
    } else {
        r.push(
            NAME,
            Status::Warn,
            format!(
                "transparent huge pages '{mode}': the heap, where the circuits' CAKE instances \
                 live, stays in 4 KiB pages (10 000 circuits forwarded 1.19 times as much \
                 with huge pages on a Xeon VM)"
            ),
            Some(
                "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled as root, and \
                 transparent_hugepage=madvise on the kernel command line to keep it"
                    .into(),
            ),
        );
    }
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
mod tests;
