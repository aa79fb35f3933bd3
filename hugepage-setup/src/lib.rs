//! Reserve hugepages per NUMA node, mount hugetlbfs, report what is reserved, and release it.
//!
//! The work is split in three so that it can be tested on fake trees without root:
//! [`Snapshot::read`] reads the state (the per-node pools under
//! `sys/devices/system/node/node*/hugepages/hugepages-<size>kB/`, falling back to the global
//! `sys/kernel/mm/hugepages/` on kernels without NUMA, and the hugetlbfs mounts in
//! `proc/mounts`); [`plan`] is a pure function from that snapshot and a [`Request`] to a list of
//! [`Action`]s (empty when there is nothing to do, which makes every command idempotent); and
//! [`apply`] carries them out through a [`System`] (the real one, or a fake in tests) and checks
//! that the kernel gave what was asked. All paths hang off a configurable root.
//!
//! It does not bind NICs or start DPDK; `cakewalk preflight` checks the whole box.
#![deny(unsafe_code)]

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

// The real machine: the crate's one module allowed `unsafe` (two libc calls).
#[allow(unsafe_code)]
mod sys;
pub use sys::RealSystem;

/// A hugepage size, in KiB as the kernel names its pools (`hugepages-2048kB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageSize {
    /// Size in KiB.
    pub kib: u64,
}

impl PageSize {
    /// 2 MiB pages.
    pub const TWO_MB: PageSize = PageSize { kib: 2048 };
    /// 1 GiB pages.
    pub const ONE_GB: PageSize = PageSize { kib: 1_048_576 };

    /// The kernel's directory name for this size.
    pub fn dir_name(self) -> String {
        format!("hugepages-{}kB", self.kib)
    }

    /// Short form for mount options and messages ("2M", "1G").
    pub fn short(self) -> String {
        if self.kib % (1024 * 1024) == 0 {
            format!("{}G", self.kib / (1024 * 1024))
        } else if self.kib % 1024 == 0 {
            format!("{}M", self.kib / 1024)
        } else {
            format!("{}K", self.kib)
        }
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

impl std::str::FromStr for PageSize {
    type Err = Error;

    /// Parses "2M", "2MB", "2048kB", "1G", "1GB" (case-insensitive).
    fn from_str(s: &str) -> Result<PageSize, Error> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_suffix('b').unwrap_or(&t);
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let bad = || Error::BadSize(s.to_owned());
        let n: u64 = num.parse().map_err(|_| bad())?;
        let kib = match unit {
            "k" => n,
            "m" => n * 1024,
            "g" => n * 1024 * 1024,
            _ => return Err(bad()),
        };
        if kib == 0 {
            return Err(bad());
        }
        Ok(PageSize { kib })
    }
}

/// What can go wrong, each with what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not a page size.
    #[error("page size '{0}' is not a size; try '2M' or '1G'")]
    BadSize(String),
    /// The kernel has no pool of this size.
    #[error("this kernel offers no {size} hugepages (it has: {available}); try --size {suggest}")]
    UnsupportedSize {
        /// Asked for.
        size: PageSize,
        /// What exists.
        available: String,
        /// The first size that exists.
        suggest: String,
    },
    /// No such NUMA node.
    #[error(
        "NUMA node {node} does not exist (nodes: {nodes}); pick one of them or leave out --node"
    )]
    NoSuchNode {
        /// Asked for.
        node: u32,
        /// What exists.
        nodes: String,
    },
    /// No hugepage support at all under the root.
    #[error(
        "no hugepage pools under {0}: the kernel lacks CONFIG_HUGETLBFS or /sys is not mounted"
    )]
    NoHugepageSupport(PathBuf),
    /// Changing the reservation needs root.
    #[error("changing hugepage reservations needs root: run `sudo hugepage-setup {0}`")]
    NotRoot(String),
    /// The request is more memory than the machine has.
    #[error(
        "{pages} {size} pages{per_node} is {need_mib} MiB, but the machine has {have_mib} MiB; \
         ask for fewer pages (DPDK needs a few hundred MiB per port)"
    )]
    TooLarge {
        /// Pages asked for (per node).
        pages: u64,
        /// Page size.
        size: PageSize,
        /// " on each of N nodes" or "".
        per_node: String,
        /// What the request adds up to.
        need_mib: u64,
        /// `MemTotal`.
        have_mib: u64,
    },
    /// The kernel reserved fewer pages than asked; the reservation was put back as it was.
    #[error(
        "asked for {asked}, kernel reserved only {got} ({size} pages{node}): memory is fragmented; \
         put the reservation back to {restored}; try fewer pages or reboot-time hugepages \
         (hugepages={asked} on the kernel command line)"
    )]
    Fragmented {
        /// Pages asked for.
        asked: u64,
        /// Pages the kernel reserved.
        got: u64,
        /// What the pool holds again (what it held before).
        restored: u64,
        /// Page size.
        size: PageSize,
        /// " on node K" or "".
        node: String,
    },
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// "reading" / "writing" / "mounting hugetlbfs at".
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// One hugepage pool: a page size on a node (or the global pool when `node` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// NUMA node, `None` for the global pool of a kernel without per-node pools.
    pub node: Option<u32>,
    /// Page size.
    pub size: PageSize,
    /// Pages reserved (`nr_hugepages`).
    pub reserved: u64,
    /// Pages reserved and not in use (`free_hugepages`).
    pub free: u64,
    /// The `nr_hugepages` file, relative to the root.
    pub nr_path: PathBuf,
}

/// A mounted hugetlbfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Mount point.
    pub target: PathBuf,
    /// Page size from the `pagesize=` option, if given.
    pub pagesize: Option<PageSize>,
}

/// What the kernel says now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Pools, per node when the kernel has nodes, sorted by node then size.
    pub pools: Vec<Pool>,
    /// hugetlbfs mounts.
    pub mounts: Vec<Mount>,
    /// The default hugepage size (`Hugepagesize:` in `proc/meminfo`), if known.
    pub default_size: Option<PageSize>,
    /// The machine's memory (`MemTotal:` in `proc/meminfo`), in KiB, if known.
    pub mem_total_kib: Option<u64>,
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn parse_size_dir(name: &str) -> Option<PageSize> {
    let kib = name
        .strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse()
        .ok()?;
    Some(PageSize { kib })
}

fn read_pools(dir: &Path, node: Option<u32>, root: &Path, out: &mut Vec<Pool>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(size) = parse_size_dir(&name) else {
            continue;
        };
        let p = e.path();
        let nr_path = p.join("nr_hugepages");
        out.push(Pool {
            node,
            size,
            reserved: read_u64(&nr_path).unwrap_or(0),
            free: read_u64(&p.join("free_hugepages")).unwrap_or(0),
            nr_path: nr_path.strip_prefix(root).unwrap_or(&nr_path).to_path_buf(),
        });
    }
}

impl Snapshot {
    /// Reads the hugepage state under `root` ("/" on a real system).
    ///
    /// # Errors
    /// [`Error::NoHugepageSupport`] when there is no pool at all.
    pub fn read(root: &Path) -> Result<Snapshot, Error> {
        let mut pools = Vec::new();
        let nodes_dir = root.join("sys/devices/system/node");
        if let Ok(entries) = std::fs::read_dir(&nodes_dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(node) = name
                    .strip_prefix("node")
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                read_pools(&e.path().join("hugepages"), Some(node), root, &mut pools);
            }
        }
        if pools.is_empty() {
            read_pools(
                &root.join("sys/kernel/mm/hugepages"),
                None,
                root,
                &mut pools,
            );
        }
        if pools.is_empty() {
            return Err(Error::NoHugepageSupport(
                root.join("sys/kernel/mm/hugepages"),
            ));
        }
        pools.sort_by_key(|p| (p.node, p.size));
        let mounts = std::fs::read_to_string(root.join("proc/mounts"))
            .map(|m| parse_mounts(&m))
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string(root.join("proc/meminfo")).unwrap_or_default();
        let kib_of = |key: &str| -> Option<u64> {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse().ok())
        };
        Ok(Snapshot {
            pools,
            mounts,
            default_size: kib_of("Hugepagesize:").map(|kib| PageSize { kib }),
            mem_total_kib: kib_of("MemTotal:"),
        })
    }

    /// The NUMA nodes that have pools (empty for a kernel with only the global pool).
    pub fn nodes(&self) -> Vec<u32> {
        let mut n: Vec<u32> = self.pools.iter().filter_map(|p| p.node).collect();
        n.dedup();
        n
    }

    /// The page sizes the kernel offers.
    pub fn sizes(&self) -> Vec<PageSize> {
        let mut s: Vec<PageSize> = self.pools.iter().map(|p| p.size).collect();
        s.sort();
        s.dedup();
        s
    }

    /// The mount serving pages of `size`, if any.
    pub fn mount_for(&self, size: PageSize) -> Option<&Mount> {
        self.mounts
            .iter()
            .find(|m| m.pagesize.or(self.default_size) == Some(size))
    }
}

/// Parses `/proc/mounts` lines, keeping hugetlbfs ones.
fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_src, target, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
            if fstype != "hugetlbfs" {
                return None;
            }
            let pagesize = opts
                .split(',')
                .find_map(|o| o.strip_prefix("pagesize="))
                .and_then(|v| v.parse().ok());
            Some(Mount {
                target: PathBuf::from(target),
                pagesize,
            })
        })
        .collect()
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Make sure at least `pages` pages of `size` are reserved on `node` (every node when
    /// `None`), and a hugetlbfs for that size is mounted.
    Reserve {
        /// Pages per node.
        pages: u64,
        /// Page size.
        size: PageSize,
        /// One node, or all.
        node: Option<u32>,
    },
    /// Set the reservation of `size` (every size when `None`) on `node` (all when `None`) to 0.
    Release {
        /// Page size, or all.
        size: Option<PageSize>,
        /// One node, or all.
        node: Option<u32>,
    },
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `to` into the pool's `nr_hugepages` (relative to the root).
    SetPages {
        /// The `nr_hugepages` file.
        path: PathBuf,
        /// Node, for messages.
        node: Option<u32>,
        /// Page size, for messages.
        size: PageSize,
        /// Pages now.
        from: u64,
        /// Pages wanted.
        to: u64,
    },
    /// Mount a hugetlbfs at `target` for pages of `size`.
    Mount {
        /// Mount point (absolute; created if missing).
        target: PathBuf,
        /// Page size.
        size: PageSize,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::SetPages {
                path,
                node,
                size,
                from,
                to,
            } => {
                let n = node
                    .map(|n| format!("node {n}"))
                    .unwrap_or_else(|| "all nodes".into());
                write!(
                    f,
                    "set {size} pages on {n}: {from} -> {to} (echo {to} > /{})",
                    path.display()
                )
            }
            Action::Mount { target, size } => write!(
                f,
                "mount hugetlbfs at {} (mount -t hugetlbfs -o pagesize={size} nodev {})",
                target.display(),
                target.display()
            ),
        }
    }
}

/// Where a hugetlbfs for `size` is mounted when we mount it: `/dev/hugepages` for the default
/// size (where systemd and DPDK look), `/dev/hugepages-<size>` for another.
pub fn mount_point(snap: &Snapshot, size: PageSize) -> PathBuf {
    if snap.default_size.map_or(true, |d| d == size) {
        PathBuf::from("/dev/hugepages")
    } else {
        PathBuf::from(format!("/dev/hugepages-{}", size.short()))
    }
}

/// Turns a request into the actions that carry it out; no action when the state already
/// matches (reserve never lowers a reservation).
///
/// # Errors
/// [`Error::UnsupportedSize`] and [`Error::NoSuchNode`] for sizes and nodes the snapshot lacks.
pub fn plan(snap: &Snapshot, req: &Request) -> Result<Vec<Action>, Error> {
    let check_node = |node: Option<u32>| -> Result<(), Error> {
        if let Some(n) = node {
            let nodes = snap.nodes();
            if !nodes.contains(&n) {
                return Err(Error::NoSuchNode {
                    node: n,
                    nodes: if nodes.is_empty() {
                        "none; this kernel has one global pool".into()
                    } else {
                        nodes
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                });
            }
        }
        Ok(())
    };
    let check_size = |size: PageSize| -> Result<(), Error> {
        let sizes = snap.sizes();
        if !sizes.contains(&size) {
            return Err(Error::UnsupportedSize {
                size,
                available: sizes
                    .iter()
                    .map(|s| s.short())
                    .collect::<Vec<_>>()
                    .join(", "),
                suggest: sizes
                    .first()
                    .map(|s| s.short())
                    .unwrap_or_else(|| "2M".into()),
            });
        }
        Ok(())
    };
    let mut actions = Vec::new();
    match *req {
        Request::Reserve { pages, size, node } => {
            check_size(size)?;
            check_node(node)?;
            let targeted: Vec<&Pool> = snap
                .pools
                .iter()
                .filter(|p| p.size == size && (node.is_none() || p.node == node))
                .collect();
            // Refused before any write: the kernel would take what it can (all free memory,
            // the rest of the machine starving meanwhile) and then fall short anyway.
            if let Some(mem_kib) = snap.mem_total_kib {
                let pools = targeted.len() as u64;
                let need_kib = pages.saturating_mul(size.kib).saturating_mul(pools.max(1));
                if need_kib > mem_kib {
                    return Err(Error::TooLarge {
                        pages,
                        size,
                        per_node: if pools > 1 {
                            format!(" on each of {pools} nodes")
                        } else {
                            String::new()
                        },
                        need_mib: need_kib / 1024,
                        have_mib: mem_kib / 1024,
                    });
                }
            }
            for p in targeted {
                if p.reserved < pages {
                    actions.push(Action::SetPages {
                        path: p.nr_path.clone(),
                        node: p.node,
                        size,
                        from: p.reserved,
                        to: pages,
                    });
                }
            }
            if pages > 0 && snap.mount_for(size).is_none() {
                actions.push(Action::Mount {
                    target: mount_point(snap, size),
                    size,
                });
            }
        }
        Request::Release { size, node } => {
            if let Some(s) = size {
                check_size(s)?;
            }
            check_node(node)?;
            for p in &snap.pools {
                if size.map_or(true, |s| s == p.size)
                    && (node.is_none() || p.node == node)
                    && p.reserved > 0
                {
                    actions.push(Action::SetPages {
                        path: p.nr_path.clone(),
                        node: p.node,
                        size: p.size,
                        from: p.reserved,
                        to: 0,
                    });
                }
            }
        }
    }
    Ok(actions)
}

/// The operations [`apply`] needs from the machine, so tests can fake the kernel.
pub trait System {
    /// Reads a file under the root.
    fn read(&self, rel: &Path) -> io::Result<String>;
    /// Writes a file under the root.
    fn write(&mut self, rel: &Path, value: &str) -> io::Result<()>;
    /// Mounts a hugetlbfs for `size` at `target` (creating the directory).
    fn mount_hugetlbfs(&mut self, target: &Path, size: PageSize) -> io::Result<()>;
    /// True when the process may change reservations.
    fn is_root(&self) -> bool;
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// One line per action done.
    pub done: Vec<String>,
}

/// Carries out `actions`, then re-reads every pool it changed and fails when the kernel gave
/// fewer pages than asked. `command` is the command line to suggest with sudo.
///
/// # Errors
/// [`Error::NotRoot`] (only when there is something to change), [`Error::Io`],
/// [`Error::Fragmented`].
pub fn apply(sys: &mut dyn System, actions: &[Action], command: &str) -> Result<Outcome, Error> {
    let mut out = Outcome::default();
    if actions.is_empty() {
        return Ok(out);
    }
    if !sys.is_root() {
        return Err(Error::NotRoot(command.to_owned()));
    }
    for a in actions {
        match a {
            Action::SetPages {
                path,
                node,
                size,
                from,
                to,
            } => {
                sys.write(path, &format!("{to}\n"))
                    .map_err(|source| Error::Io {
                        action: "writing",
                        path: path.clone(),
                        source,
                    })?;
                let got = sys
                    .read(path)
                    .map_err(|source| Error::Io {
                        action: "reading",
                        path: path.clone(),
                        source,
                    })?
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
                if got < *to {
                    // Do not leave a partial reservation behind: it holds memory the rest
                    // of the machine needs and is still not what was asked for.
                    let restored = if to > from {
                        let _ = sys.write(path, &format!("{from}\n"));
                        *from
                    } else {
                        got
                    };
                    return Err(Error::Fragmented {
                        asked: *to,
                        got,
                        restored,
                        size: *size,
                        node: node.map(|n| format!(" on node {n}")).unwrap_or_default(),
                    });
                }
            }
            Action::Mount { target, size } => {
                sys.mount_hugetlbfs(target, *size)
                    .map_err(|source| Error::Io {
                        action: "mounting hugetlbfs at",
                        path: target.clone(),
                        source,
                    })?;
            }
        }
        out.done.push(a.to_string());
    }
    Ok(out)
}

/// Renders the snapshot as a table: one line per pool, then the mounts.
pub fn status_table(snap: &Snapshot) -> String {
    let mut s = format!(
        "{:<8} {:>6} {:>10} {:>10} {:>10}\n",
        "node", "size", "reserved", "free", "in use"
    );
    for p in &snap.pools {
        let node = p
            .node
            .map(|n| n.to_string())
            .unwrap_or_else(|| "all".into());
        s += &format!(
            "{:<8} {:>6} {:>10} {:>10} {:>10}\n",
            node,
            p.size.short(),
            p.reserved,
            p.free,
            p.reserved.saturating_sub(p.free)
        );
    }
    if snap.mounts.is_empty() {
        s += "hugetlbfs: not mounted (`hugepage-setup reserve --pages N` mounts /dev/hugepages)\n";
    }
    for m in &snap.mounts {
        let size = m
            .pagesize
            .or(snap.default_size)
            .map(|p| p.short())
            .unwrap_or_else(|| "?".into());
        s += &format!("hugetlbfs: {} (pagesize {size})\n", m.target.display());
    }
    s
}

#[cfg(test)]
mod tests;
