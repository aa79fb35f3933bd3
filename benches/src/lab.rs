//! A network-namespace lab for the harnesses: namespaces with unique names, veth pairs created
//! directly inside them, addresses, commands run inside a namespace, and background processes
//! that are killed before the namespaces are deleted. Dropping the [`Lab`] removes everything
//! it made, on success, on error and after Ctrl-C (the harness checks the stop flag and
//! returns, so `Drop` runs).
//!
//! It never touches the root namespace's interfaces and only uses addresses from the
//! benchmarking range 198.18.0.0/15 (RFC 2544) inside its own namespaces.

use std::process::{Child, Command, Output, Stdio};

/// Everything that can go wrong while building or driving the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Namespaces and qdiscs need CAP_NET_ADMIN.
    #[error("network namespaces need root (CAP_NET_ADMIN); run this harness with sudo or as root")]
    NotRoot,
    /// A tool the lab needs is not installed.
    #[error("'{tool}' is not installed; install the Debian package '{package}' (apt-get install {package})")]
    MissingTool {
        /// The command name.
        tool: &'static str,
        /// The Debian package that provides it.
        package: &'static str,
    },
    /// A command could not be started.
    #[error("could not start '{cmd}': {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("'{cmd}' failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
}

/// Returns true when the process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Returns true when `tool` is found on `PATH`.
pub fn have_tool(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let p = dir.join(tool);
            p.is_file()
        })
    })
}

/// Fails with [`LabError::MissingTool`] unless `tool` is on `PATH`.
///
/// # Errors
/// [`LabError::MissingTool`] naming the Debian package.
pub fn require_tool(tool: &'static str, package: &'static str) -> Result<(), LabError> {
    if have_tool(tool) {
        Ok(())
    } else {
        Err(LabError::MissingTool { tool, package })
    }
}

/// Runs a command to completion and returns its stdout.
///
/// # Errors
/// [`LabError::Spawn`] or [`LabError::Failed`] with the command line and its stderr.
pub fn run(args: &[&str]) -> Result<String, LabError> {
    let cmd = args.join(" ");
    let out: Output = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(LabError::Failed {
            cmd,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What a background process left when it ended.
#[derive(Debug, Default)]
pub struct Finished {
    /// Exit status (`None` when it could not be reaped).
    pub status: Option<std::process::ExitStatus>,
    /// True when the lab killed it (timeout or stop request).
    pub killed: bool,
    /// Everything it wrote to stdout (empty unless captured).
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

/// Namespaces and processes of one harness run; `Drop` kills the processes, then deletes the
/// namespaces (which deletes their veths).
pub struct Lab {
    prefix: String,
    namespaces: Vec<String>,
    children: Vec<(String, Child)>,
}

impl Lab {
    /// Starts an empty lab whose namespaces are named `cwb-<tag>-<pid>-<name>`.
    /// Deletes namespaces left behind by earlier runs of this tag whose process is gone.
    ///
    /// # Errors
    /// [`LabError::NotRoot`] when not root, [`LabError::MissingTool`] without `ip`/`tc`.
    pub fn new(tag: &str) -> Result<Lab, LabError> {
        if !is_root() {
            return Err(LabError::NotRoot);
        }
        require_tool("ip", "iproute2")?;
        require_tool("tc", "iproute2")?;
        remove_stale(tag);
        Ok(Lab {
            prefix: format!("cwb-{tag}-{}-", std::process::id()),
            namespaces: Vec::new(),
            children: Vec::new(),
        })
    }

    /// Creates namespace `name` (with loopback up and IPv4 forwarding on) and returns its full name.
    ///
    /// # Errors
    /// [`LabError::Failed`] when `ip netns add` fails.
    pub fn add_ns(&mut self, name: &str) -> Result<String, LabError> {
        let full = format!("{}{name}", self.prefix);
        run(&["ip", "netns", "add", &full])?;
        self.namespaces.push(full.clone());
        run(&["ip", "-n", &full, "link", "set", "lo", "up"])?;
        self.exec(&full, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        // No IPv6 chatter (router solicitations, DAD) in the measurements.
        let _ = self.exec(
            &full,
            &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
        );
        let _ = self.exec(
            &full,
            &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
        );
        Ok(full)
    }

    /// Creates a veth pair `a_dev` (in `a_ns`) <-> `b_dev` (in `b_ns`) with `queues` TX and RX
    /// queues each, brings both ends up and disables offloads that would let the kernel
    /// hand a shaper 64 KB super-frames.
    ///
    /// # Errors
    /// [`LabError::Failed`] when `ip link add` fails.
    pub fn veth(
        &mut self,
        a_ns: &str,
        a_dev: &str,
        b_ns: &str,
        b_dev: &str,
        queues: u32,
    ) -> Result<(), LabError> {
        let q = queues.max(1).to_string();
        run(&[
            "ip",
            "link",
            "add",
            a_dev,
            "netns",
            a_ns,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            b_dev,
            "netns",
            b_ns,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])?;
        for (ns, dev) in [(a_ns, a_dev), (b_ns, b_dev)] {
            run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            if have_tool("ethtool") {
                // Checksum offload off too: a userspace forwarder reading a veth with AF_PACKET
                // would otherwise pass on frames whose checksum was never filled in.
                let full = [
                    "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off",
                    "gro", "off",
                ];
                if self.exec(ns, &full).is_err() {
                    let short = [
                        "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off",
                    ];
                    let _ = self.exec(ns, &short);
                }
            }
        }
        Ok(())
    }

    /// Adds `cidr` (e.g. "198.18.0.1/24") to `dev` in `ns`.
    ///
    /// # Errors
    /// [`LabError::Failed`] when `ip addr add` fails.
    pub fn addr(&self, ns: &str, dev: &str, cidr: &str) -> Result<(), LabError> {
        run(&["ip", "-n", ns, "addr", "add", cidr, "dev", dev]).map(drop)
    }

    /// Adds a default route via `gw` in `ns`.
    ///
    /// # Errors
    /// [`LabError::Failed`] when `ip route add` fails.
    pub fn default_route(&self, ns: &str, gw: &str) -> Result<(), LabError> {
        run(&["ip", "-n", ns, "route", "add", "default", "via", gw]).map(drop)
    }

    /// Runs `args` inside `ns` to completion and returns its stdout.
    ///
    /// # Errors
    /// [`LabError::Spawn`] or [`LabError::Failed`].
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<String, LabError> {
        let mut full = vec!["ip", "netns", "exec", ns];
        full.extend_from_slice(args);
        run(&full)
    }

    /// Starts `args` inside `ns` in the background; the lab kills it on drop (or on
    /// [`Lab::kill`]). Stdout is piped when `capture` is true, else discarded. Returns its
    /// index for [`Lab::kill`].
    ///
    /// # Errors
    /// [`LabError::Spawn`].
    pub fn spawn(&mut self, ns: &str, args: &[&str], capture: bool) -> Result<usize, LabError> {
        let cmd = format!("ip netns exec {ns} {}", args.join(" "));
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(if capture {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| LabError::Spawn {
                cmd: cmd.clone(),
                source,
            })?;
        self.children.push((cmd, child));
        Ok(self.children.len() - 1)
    }

    /// Returns the background process `idx` so the caller can read its output.
    pub fn child(&mut self, idx: usize) -> &mut Child {
        &mut self.children[idx].1
    }

    /// Waits up to `timeout` for background process `idx` to exit by itself, kills it after
    /// that, and returns its stdout and stderr.
    ///
    /// # Errors
    /// [`LabError::Failed`] when it exited non-zero by itself.
    pub fn finish(
        &mut self,
        idx: usize,
        timeout: std::time::Duration,
    ) -> Result<(String, String), LabError> {
        let f = self.finish_any(idx, timeout);
        match f.status {
            Some(status) if !status.success() && !f.killed => Err(LabError::Failed {
                cmd: self.children[idx].0.clone(),
                status: status.to_string(),
                stderr: f.stderr.trim().to_string(),
            }),
            _ => Ok((f.stdout, f.stderr)),
        }
    }

    /// Like [`Lab::finish`] but never fails: returns whatever the process left.
    pub fn finish_any(&mut self, idx: usize, timeout: std::time::Duration) -> Finished {
        use std::io::Read;
        let end = std::time::Instant::now() + timeout;
        let child = &mut self.children[idx].1;
        let mut killed = false;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if std::time::Instant::now() >= end || crate::stop_requested() {
                let _ = child.kill();
                killed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut f = Finished {
            killed,
            ..Finished::default()
        };
        if let Some(mut s) = child.stdout.take() {
            let _ = s.read_to_string(&mut f.stdout);
        }
        if let Some(mut s) = child.stderr.take() {
            let _ = s.read_to_string(&mut f.stderr);
        }
        f.status = child.wait().ok();
        f
    }

    /// Kills background process `idx` (SIGKILL) and reaps it.
    pub fn kill(&mut self, idx: usize) {
        let child = &mut self.children[idx].1;
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Replaces the root qdisc of `dev` in `ns` with the `tc` arguments given after `root`
    /// (e.g. `["tbf", "rate", "100mbit", ...]`).
    ///
    /// # Errors
    /// [`LabError::Failed`] with tc's message.
    pub fn tc(&self, ns: &str, args: &[&str]) -> Result<(), LabError> {
        let mut full = vec!["tc", "-n", ns];
        full.extend_from_slice(args);
        run(&full).map(drop)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in self.namespaces.iter().rev() {
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}

/// Address of host `a` (the sender side) in [`Lab::wire`].
pub const IP_A: &str = "198.18.0.1";
/// Address of host `b` (the receiver side) in [`Lab::wire`].
pub const IP_B: &str = "198.18.0.2";

/// The three namespaces of a bump-in-the-wire lab: `a (eth0) — ra [r] rb — (eth0) b`.
#[derive(Debug, Clone)]
pub struct Wire {
    /// Host a, [`IP_A`] on `eth0`.
    pub a: String,
    /// The middle box: `ra` faces a, `rb` faces b; no addresses.
    pub r: String,
    /// Host b, [`IP_B`] on `eth0`.
    pub b: String,
}

impl Lab {
    /// Builds `a — ra [r] rb — b` with `queues` TX/RX queues per veth, addresses on a and b
    /// (one /24, so whatever sits in r works at layer 2) and permanent neighbour entries, so
    /// no ARP has to cross a saturated shaper.
    ///
    /// # Errors
    /// [`LabError`] from any `ip` command.
    pub fn wire(&mut self, queues: u32) -> Result<Wire, LabError> {
        let a = self.add_ns("a")?;
        let r = self.add_ns("r")?;
        let b = self.add_ns("b")?;
        self.veth(&r, "ra", &a, "eth0", queues)?;
        self.veth(&r, "rb", &b, "eth0", queues)?;
        self.addr(&a, "eth0", &format!("{IP_A}/24"))?;
        self.addr(&b, "eth0", &format!("{IP_B}/24"))?;
        let mac = |ns: &str| -> Result<String, LabError> {
            Ok(self
                .exec(ns, &["cat", "/sys/class/net/eth0/address"])?
                .trim()
                .to_string())
        };
        let (ma, mb) = (mac(&a)?, mac(&b)?);
        for (ns, ip, mac) in [(&a, IP_B, &mb), (&b, IP_A, &ma)] {
            self.exec(
                ns,
                &[
                    "ip",
                    "neigh",
                    "replace",
                    ip,
                    "lladdr",
                    mac,
                    "dev",
                    "eth0",
                    "nud",
                    "permanent",
                ],
            )?;
        }
        Ok(Wire { a, r, b })
    }

    /// Joins `ra` and `rb` with a kernel bridge (`on`), or removes the bridge and any root
    /// qdisc on them so a userspace forwarder can take over (`!on`). Idempotent.
    ///
    /// # Errors
    /// [`LabError`] from `ip`.
    pub fn kernel_bridge(&self, w: &Wire, on: bool) -> Result<(), LabError> {
        let has = self.exec(&w.r, &["ip", "link", "show", "br0"]).is_ok();
        if on && !has {
            self.exec(&w.r, &["ip", "link", "add", "br0", "type", "bridge"])?;
            for dev in ["ra", "rb"] {
                self.exec(&w.r, &["ip", "link", "set", dev, "master", "br0"])?;
            }
            self.exec(&w.r, &["ip", "link", "set", "br0", "up"])?;
        } else if !on && has {
            self.exec(&w.r, &["ip", "link", "del", "br0"])?;
        }
        if !on {
            for dev in ["ra", "rb"] {
                let _ = self.tc(&w.r, &["qdisc", "del", "dev", dev, "root"]);
            }
        }
        Ok(())
    }
}

/// Deletes `cwb-<tag>-<pid>-*` namespaces whose process no longer exists (a run killed by
/// SIGKILL cannot clean up after itself).
fn remove_stale(tag: &str) {
    let Ok(list) = run(&["ip", "netns", "list"]) else {
        return;
    };
    let prefix = format!("cwb-{tag}-");
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
}
