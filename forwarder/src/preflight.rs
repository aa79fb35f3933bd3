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

use crate::port::afpacket::{self, LinkFacts, Offloads};

/// Bytes a frame adds to its IP packet: the Ethernet header, and one VLAN tag the AF_PACKET
/// port puts back into a tagged frame.
const ETH_HEADER: u32 = 14;
const VLAN_TAG: u32 = 4;
/// The longest frame GRO or LRO builds (a 64 KiB IP packet and its Ethernet header).
const MERGED_FRAME: u32 = 65_535 + ETH_HEADER;

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

/// The facts about `iface` from `opts.links`; `Err` says why they could not be read.
fn link_facts(opts: &Options, iface: &str) -> Result<Option<LinkFacts>, String> {
    match opts.links {
        Links::Kernel => afpacket::link_facts(iface).map_err(|e| e.to_string()),
        Links::Sysfs => Ok(sysfs_link_facts(&opts.root, iface)),
    }
}

/// An interface as a sysfs tree describes it (`sys/class/net/IF`).
fn sysfs_link_facts(root: &Path, iface: &str) -> Option<LinkFacts> {
    if iface.is_empty() || iface.contains('/') || iface.starts_with('.') {
        return None;
    }
    let dir = root.join("sys/class/net").join(iface);
    let text = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let index = text("ifindex")?.trim().parse().ok()?;
    let flags = text("flags")
        .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let carrier = text("carrier").map_or(flags & 0x40 != 0, |c| c.trim() == "1");
    let driver = std::fs::read_link(dir.join("device/driver"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
    Some(LinkFacts {
        index,
        up: flags & 0x1 != 0,
        carrier,
        mtu: text("mtu")
            .and_then(|m| m.trim().parse().ok())
            .unwrap_or(1500),
        offloads: None,
        driver,
    })
}

/// The interfaces there are, for a "not found" message.
fn known_links(opts: &Options) -> String {
    let names = match opts.links {
        Links::Kernel => afpacket::interface_names().unwrap_or_default(),
        Links::Sysfs => list_dir(&opts.root.join("sys/class/net")),
    };
    if names.is_empty() {
        "none found".into()
    } else {
        format!("interfaces: {}", names.join(", "))
    }
}

fn check_afpacket(opts: &Options, r: &mut Report) {
    if opts.afpacket.is_empty() {
        return;
    }
    let status = read(&opts.root, "proc/self/status").unwrap_or_default();
    let missing = afpacket::missing_capabilities(&status);
    if missing.contains(&"CAP_NET_RAW") {
        r.push(
            "capabilities",
            Status::Fail,
            "this process lacks CAP_NET_RAW: AF_PACKET ports cannot open their packet sockets",
            Some("run as root, or grant it: `setcap cap_net_raw,cap_net_admin+ep /usr/local/bin/cakewalk`; under systemd, AmbientCapabilities=CAP_NET_RAW CAP_NET_ADMIN (the shipped unit has it); in a container, --cap-add NET_RAW --cap-add NET_ADMIN".into()),
        );
    } else if missing.contains(&"CAP_NET_ADMIN") {
        r.push(
            "capabilities",
            Status::Warn,
            "CAP_NET_RAW held, CAP_NET_ADMIN not: socket buffers stay at the sysctl maximum (net.core.rmem_max/wmem_max)",
            Some("grant CAP_NET_ADMIN as well (AmbientCapabilities=CAP_NET_RAW CAP_NET_ADMIN)".into()),
        );
    } else {
        r.push(
            "capabilities",
            Status::Ok,
            "CAP_NET_RAW and CAP_NET_ADMIN held",
            None,
        );
    }
    let mut found: Vec<(&str, &str, u32)> = Vec::new();
    for (side, port, iface) in &opts.afpacket {
        match link_facts(opts, iface) {
            Err(e) => r.push(
                format!("link {port}"),
                Status::Fail,
                format!("cannot ask the kernel about '{iface}': {e}"),
                None,
            ),
            Ok(None) => r.push(
                format!("link {port}"),
                Status::Fail,
                format!(
                    "no interface '{iface}' in this network namespace ({})",
                    known_links(opts)
                ),
                Some(format!(
                    "check the name with `ip link`, and set iface in [ports.{side}] (or --iface A,B); the forwarder refuses to start without it"
                )),
            ),
            Ok(Some(link)) => {
                check_link(port, iface, &link, opts.buffer_size, r);
                found.push((port, iface, link.index));
            }
        }
    }
    if let [(pa, ia, a), (pb, ib, b)] = found[..] {
        if a == b {
            r.push(
                "ports",
                Status::Fail,
                format!("ports {pa} ('{ia}') and {pb} ('{ib}') are one interface (index {a}): cakewalk forwards between two"),
                Some("name two different interfaces in [ports.a] and [ports.b]".into()),
            );
        } else {
            r.push(
                "ports",
                Status::Ok,
                format!("ports {pa} ('{ia}') and {pb} ('{ib}') are two interfaces"),
                None,
            );
        }
    }
}

/// The checks of one AF_PACKET port's interface, from what the kernel said about it.
pub fn check_link(port: &str, iface: &str, link: &LinkFacts, buffer_size: usize, r: &mut Report) {
    let name = format!("link {port}");
    if !link.up {
        r.push(
            name,
            Status::Fail,
            format!("'{iface}' is down"),
            Some(format!("ip link set {iface} up")),
        );
    } else if !link.carrier {
        r.push(
            name,
            Status::Warn,
            format!("'{iface}' is up but has no carrier (cable out, or the veth peer down): nothing is forwarded until it has"),
            Some(format!("plug the link in, or bring the peer up; `ip link show {iface}` shows LOWER_UP once there is carrier")),
        );
    } else {
        r.push(
            name,
            Status::Ok,
            format!(
                "'{iface}' up with carrier{}",
                link.driver
                    .as_deref()
                    .map(|d| format!(", driver {d}"))
                    .unwrap_or_default()
            ),
            None,
        );
    }
    let buf = u32::try_from(buffer_size).unwrap_or(u32::MAX);
    let frame = link.mtu.saturating_add(ETH_HEADER);
    let tagged = frame.saturating_add(VLAN_TAG);
    let name = format!("mtu {port}");
    if frame > buf {
        r.push(
            name,
            Status::Fail,
            format!("'{iface}' has MTU {}: full-size frames are {frame} bytes, longer than ports.buffer_size = {buf}, and would be dropped as rx_oversize", link.mtu),
            Some(format!(
                "raise ports.buffer_size to {tagged} (--set ports.buffer_size={tagged}), or lower the MTU: ip link set {iface} mtu {}",
                buf.saturating_sub(ETH_HEADER + VLAN_TAG)
            )),
        );
    } else if tagged > buf {
        r.push(
            name,
            Status::Warn,
            format!("'{iface}' has MTU {}: full-size VLAN-tagged frames are {tagged} bytes, longer than ports.buffer_size = {buf} (untagged ones fit)", link.mtu),
            Some(format!("raise ports.buffer_size to {tagged} if the port carries tagged traffic")),
        );
    } else {
        r.push(
            name,
            Status::Ok,
            format!(
                "MTU {}: full-size frames ({frame} bytes, {tagged} tagged) fit ports.buffer_size = {buf}",
                link.mtu
            ),
            None,
        );
    }
    let name = format!("offloads {port}");
    let Some(o) = link.offloads else {
        r.push(
            name,
            Status::Skip,
            format!("offload state of '{iface}' unknown (the driver does not answer ethtool, or a fake tree)"),
            None,
        );
        return;
    };
    let Offloads { gro, lro, gso, tso } = o;
    let on = |names: &[(&str, bool)]| -> Vec<String> {
        names
            .iter()
            .filter(|(_, v)| *v)
            .map(|(n, _)| (*n).to_string())
            .collect()
    };
    let merging = on(&[("gro", gro), ("lro", lro)]);
    let segmenting = on(&[("tso", tso), ("gso", gso)]);
    let veth = link.driver.as_deref() == Some("veth");
    let sender_note = if veth {
        format!(" '{iface}' is a veth: frames arrive as its peer sent them, so the peer (`ip link show {iface}` names it after the @) needs tso and gso off too, or TCP arrives as super-frames all the same.")
    } else if segmenting.is_empty() {
        String::new()
    } else {
        format!(
            " {} on '{iface}' only change what this host's own stack sends out of it, not what cakewalk forwards.",
            segmenting.join(", ")
        )
    };
    if !merging.is_empty() && MERGED_FRAME > buf {
        let fix_words: Vec<String> = merging.iter().map(|m| format!("{m} off")).collect();
        r.push(
            name,
            Status::Fail,
            format!(
                "{} on '{iface}': the kernel merges received TCP segments into frames of up to 64 KiB before cakewalk reads them; every merged frame longer than ports.buffer_size = {buf} is dropped as rx_oversize, which stalls TCP through the box.{sender_note}",
                merging.join(" and ")
            ),
            Some(format!("ethtool -K {iface} {}", fix_words.join(" "))),
        );
    } else if veth && !segmenting.is_empty() && MERGED_FRAME > buf {
        r.push(
            name,
            Status::Warn,
            format!(
                "{} on '{iface}', gro and lro off.{sender_note}",
                segmenting.join(", ")
            ),
            Some(format!("ethtool -K PEER tso off gso off (PEER from `ip link show {iface}`); and ethtool -K {iface} tso off gso off")),
        );
    } else {
        let state = |n: &str, v: bool| format!("{n} {}", if v { "on" } else { "off" });
        r.push(
            name,
            Status::Ok,
            format!(
                "{}, {}, {}, {}: received frames stay as sent{}",
                state("gro", gro),
                state("lro", lro),
                state("tso", tso),
                state("gso", gso),
                if MERGED_FRAME <= buf {
                    " (and merged ones fit the buffers)"
                } else {
                    ""
                }
            ),
            None,
        );
    }
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
mod tests;
