//! The AF_PACKET checks of preflight: each configured interface exists in this network
//! namespace, is up with carrier, and takes frames that fit `ports.buffer_size` (at its MTU,
//! and after GRO/LRO merging), the process holds CAP_NET_RAW, and the two ports are two
//! interfaces. Interface facts come from the kernel or from a fake sysfs tree ([`Links`]).

use std::path::Path;

use super::{list_dir, read, Links, Options, Report, Status};
use crate::port::afpacket::{self, LinkFacts, Offloads};

/// Bytes a frame adds to its IP packet: the Ethernet header, and one VLAN tag the AF_PACKET
/// port puts back into a tagged frame.
const ETH_HEADER: u32 = 14;
const VLAN_TAG: u32 = 4;
/// The longest frame GRO or LRO builds (a 64 KiB IP packet and its Ethernet header).
const MERGED_FRAME: u32 = 65_535 + ETH_HEADER;

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

pub(super) fn check_afpacket(opts: &Options, r: &mut Report) {
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
