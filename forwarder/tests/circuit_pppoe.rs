//! PPPoE subscribers, from a capture: the circuits lab (`circuits_lab.rs`) cannot build a
//! PPPoE session, because the lab's kernel has no PPP support (`CONFIG_PPP` is not set), so
//! this test writes the frames a PPPoE access network carries (a PPPoE session inside an
//! 802.1Q tag, IPv4 and IPv6 inside the session) into a pcap file and runs the real binary
//! on it (`--port-kind pcap`: port a replays the file, port b writes what it transmits).
//!
//! A pcap input flows from port a to port b only, so each direction is covered by its own
//! run: with the default uplink (port b) the frames leave as the upload, classified by their
//! source address; with `ports.uplink = "a"` they leave port b as the download, classified by
//! their destination address. Either way each subscriber's frames must be counted in its own
//! circuit, in the direction they went (`[stats] circuit_metrics = "all"` puts every circuit
//! in the final report), which the address lookup can only do after walking the tag and the
//! session to the IP header; a circuit whose address no frame carries must count nothing, and
//! every frame must leave unchanged.

use std::net::IpAddr;
use std::path::Path;

mod common;
use common::run_pcap;

/// The subscribers: PPPoE session ID, VLAN ID and address; subscriber `i` is circuit `i + 1`
/// (and circuit 4, at an address no frame carries, must count nothing).
const SUBSCRIBERS: [(u16, u16, &str); 3] = [
    (0x0101, 201, "100.64.0.1"),
    (0x0102, 202, "100.64.0.2"),
    (0x0103, 202, "2001:db8:103::1"),
];
/// Frames per subscriber.
const FRAMES: usize = 40;

/// A UDP frame between `subscriber` and a server of its family, wrapped in a PPPoE session
/// (RFC 2516: version/type 0x11, code 0, session ID, payload length, then the PPP protocol
/// 0x0021 for IPv4 or 0x0057 for IPv6) inside VLAN `vid`. `up` says the subscriber sends it.
fn pppoe_frame(session: u16, vid: u16, subscriber: IpAddr, up: bool, seq: usize) -> Vec<u8> {
    let server: IpAddr = if subscriber.is_ipv4() {
        "198.51.100.7".parse().unwrap()
    } else {
        "2001:db8:ffff::7".parse().unwrap()
    };
    let (src, dst) = if up {
        (subscriber, server)
    } else {
        (server, subscriber)
    };
    let mut plain = [0u8; 1600];
    let len = forwarder::wire::build_udp_frame(
        &mut plain,
        src,
        dst,
        40000 + seq as u16,
        443,
        0,
        0,
        64 + seq,
    )
    .expect("a UDP frame fits 1600 bytes");
    let ip = &plain[14..len];
    let ppp_proto: u16 = if subscriber.is_ipv4() { 0x0021 } else { 0x0057 };
    let mut frame = Vec::with_capacity(len + 12);
    frame.extend_from_slice(&plain[..12]);
    frame.extend_from_slice(&0x8100u16.to_be_bytes());
    frame.extend_from_slice(&vid.to_be_bytes());
    frame.extend_from_slice(&0x8864u16.to_be_bytes());
    frame.extend_from_slice(&[0x11, 0x00]);
    frame.extend_from_slice(&session.to_be_bytes());
    frame.extend_from_slice(&((ip.len() + 2) as u16).to_be_bytes());
    frame.extend_from_slice(&ppp_proto.to_be_bytes());
    frame.extend_from_slice(ip);
    frame
}

/// Every subscriber's frames, interleaved, for one direction.
fn frames(up: bool) -> Vec<Vec<u8>> {
    (0..FRAMES)
        .flat_map(|seq| {
            SUBSCRIBERS.iter().map(move |&(session, vid, addr)| {
                pppoe_frame(session, vid, addr.parse().unwrap(), up, seq)
            })
        })
        .collect()
}

/// The circuits: one per subscriber, and one that no frame belongs to.
fn write_circuits(dir: &Path) -> std::path::PathBuf {
    let mut csv = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment,sqm\n",
    );
    let mut addrs: Vec<&str> = SUBSCRIBERS.iter().map(|s| s.2).collect();
    addrs.push("100.64.0.9");
    for (i, a) in addrs.iter().enumerate() {
        let (v4, v6) = if a.contains(':') { ("", *a) } else { (*a, "") };
        csv.push_str(&format!(
            "{n},s{n},{n},cpe{n},,,{v4},{v6},,,100,20,,\n",
            n = i + 1
        ));
    }
    std::fs::write(dir.join("ShapedDevices.csv"), csv).expect("write ShapedDevices.csv");
    let config = dir.join("cakewalk.toml");
    std::fs::write(
        &config,
        "[circuits]\nfiles = [\"ShapedDevices.csv\"]\n\n[stats]\ncircuit_metrics = \"all\"\n",
    )
    .expect("write the config");
    config
}

/// Runs the binary on `frames` (`up` = the subscribers send them) and returns the final JSON
/// report and what port b wrote.
fn forward(up: bool) -> (serde_json::Value, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let sent = frames(up);
    let config = write_circuits(dir.path());
    let mut extra = vec!["--rate", "unlimited", "--duration", "10s"];
    if !up {
        extra.extend(["--set", "ports.uplink=\"a\""]);
    }
    let (report, received) = run_pcap(dir.path(), &config, &sent, &extra);
    (report, sent, received)
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

#[test]
fn pppoe_over_vlan_subscribers_are_read_as_ip_both_ways() {
    for up in [true, false] {
        let (report, sent, received) = forward(up);
        let which = if up { "upload" } else { "download" };
        assert_eq!(report["final_report"], true, "{which}: {report}");
        assert_eq!(
            report["ports"][0]["malformed"], 0,
            "{which}: PPPoE-over-VLAN frames were not read as IP: {report}"
        );
        assert_eq!(report["conservation"]["ok"], true, "{which}: {report}");
        let dir = report["directions"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["direction"] == which))
            .unwrap_or_else(|| panic!("{which}: no such direction: {report}"));
        assert_eq!(
            dir["conservation"]["transmitted"],
            sent.len(),
            "{which}: {dir}"
        );
        // Each subscriber's frames in its own circuit, in the direction they went, and
        // nothing anywhere else.
        let rows = report["circuits"]["rows"]
            .as_array()
            .unwrap_or_else(|| panic!("{which}: no circuits in the final report: {report}"));
        for id in 1..=4 {
            let row = rows
                .iter()
                .find(|r| r["id"].as_str().and_then(|v| v.parse().ok()) == Some(id))
                .unwrap_or_else(|| panic!("{which}: circuit {id} missing: {report}"));
            let want = if id <= SUBSCRIBERS.len() { FRAMES } else { 0 };
            let other = if up { "download" } else { "upload" };
            assert_eq!(
                (
                    row[which]["sent_packets"].as_u64(),
                    row[other]["sent_packets"].as_u64()
                ),
                (Some(want as u64), Some(0)),
                "{which}: circuit {id}'s {which} and {other} packets: {row}"
            );
        }
        // Unshaped, nothing is dropped; flows keep their order, so compare as sets.
        assert_eq!(
            sorted(received),
            sorted(sent),
            "{which}: frames changed on the way"
        );
    }
}
