//! CAKE's `wash` on the real binary, from a capture: DSCP-marked IPv4 and IPv6 frames go
//! through `cakewalk run --port-kind pcap` and what port b writes is compared with what went
//! in. With `wash` on the link's shaper every frame leaves with DSCP 0, its ECN bits and a
//! valid IPv4 header checksum, both the frames that took the enqueue bypass and those that
//! waited in the queue (the rate is low enough that most wait); with `wash` in one circuit's
//! `sqm` only that circuit's frames are washed; without it nothing changes.

mod common;
use common::run_pcap;

/// The subscribers (circuit `i + 1` holds address `i`).
const SUBSCRIBERS: [&str; 2] = ["100.64.0.1", "2001:db8:2::1"];
const SERVERS: [&str; 2] = ["198.51.100.7", "2001:db8:ffff::7"];
/// Frames per subscriber.
const FRAMES: usize = 60;
/// The marks: EF and AF11, each with ECT(0).
const DSCPS: [u8; 2] = [46, 10];
const ECT0: u8 = 2;

/// The upload frames (subscriber to server), interleaved.
fn frames() -> Vec<Vec<u8>> {
    (0..FRAMES)
        .flat_map(|seq| {
            (0..SUBSCRIBERS.len()).map(move |i| {
                let mut buf = [0u8; 1600];
                let len = forwarder::wire::build_udp_frame(
                    &mut buf,
                    SUBSCRIBERS[i].parse().unwrap(),
                    SERVERS[i].parse().unwrap(),
                    40000 + (seq % 4) as u16,
                    443,
                    DSCPS[seq % 2],
                    ECT0,
                    200,
                )
                .expect("a UDP frame fits");
                buf[..len].to_vec()
            })
        })
        .collect()
}

/// The IP header's DSCP and ECN of an untagged frame.
fn tos(frame: &[u8]) -> (u8, u8) {
    let tc = match frame[12..14] {
        [0x08, 0x00] => frame[15],
        [0x86, 0xdd] => (frame[14] << 4) | (frame[15] >> 4),
        _ => panic!("not IP: {frame:02x?}"),
    };
    (tc >> 2, tc & 3)
}

/// Whether an IPv4 frame's header checksum holds (IPv6 has none).
fn ipv4_checksum_ok(frame: &[u8]) -> bool {
    if frame[12..14] != [0x08, 0x00] {
        return true;
    }
    let header = &frame[14..14 + usize::from(frame[14] & 0x0f) * 4];
    let sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    (folded & 0xffff) + (folded >> 16) == 0xffff
}

/// Runs the binary on the frames with `config` (a `cakewalk.toml` body next to a
/// ShapedDevices.csv in which `sqm[i]` is circuit `i + 1`'s) and returns the final JSON
/// report, what went in and what came out.
fn forward(
    config: &str,
    sqm: [&str; 2],
    rate: &str,
) -> (serde_json::Value, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let sent = frames();
    let mut csv = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment,sqm\n",
    );
    for (i, a) in SUBSCRIBERS.iter().enumerate() {
        let (v4, v6) = if a.contains(':') { ("", *a) } else { (*a, "") };
        csv.push_str(&format!(
            "{n},s{n},{n},cpe{n},,,{v4},{v6},,,100,100,,{}\n",
            sqm[i],
            n = i + 1
        ));
    }
    std::fs::write(dir.path().join("ShapedDevices.csv"), csv).unwrap();
    let config_path = dir.path().join("cakewalk.toml");
    std::fs::write(&config_path, config).unwrap();
    let (report, received) = run_pcap(
        dir.path(),
        &config_path,
        &sent,
        &["--rate", rate, "--duration", "20s"],
    );
    assert_eq!(report["conservation"]["ok"], true, "{report}");
    (report, sent, received)
}

/// The frames of subscriber `i` in `frames`.
fn of(frames: &[Vec<u8>], i: usize) -> Vec<Vec<u8>> {
    let want: std::net::IpAddr = SUBSCRIBERS[i].parse().unwrap();
    frames
        .iter()
        .filter(|f| {
            let src: std::net::IpAddr = if f[12..14] == [0x08, 0x00] {
                <[u8; 4]>::try_from(&f[26..30]).unwrap().into()
            } else {
                <[u8; 16]>::try_from(&f[22..38]).unwrap().into()
            };
            src == want
        })
        .cloned()
        .collect()
}

/// `frames` without what the shaper may rewrite (the IP header's DSCP and ECN, the IPv4
/// header checksum), sorted: CAKE interleaves flows, so frames are compared as multisets.
fn normalized(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut f = f.clone();
            if f[12..14] == [0x08, 0x00] {
                f[15] = 0;
                f[24..26].fill(0);
            } else {
                f[14] &= 0xf0;
                f[15] &= 0x0f;
            }
            f
        })
        .collect();
    out.sort();
    out
}

/// `got` is `sent` with every DSCP cleared (`washed`) or kept, ECN kept or marked CE (the
/// AQM may mark ECT frames), valid IPv4 header checksums, and nothing else changed.
fn assert_rewritten(sent: &[Vec<u8>], got: &[Vec<u8>], washed: bool, what: &str) {
    assert_eq!(got.len(), sent.len(), "{what}: frames lost");
    assert!(
        normalized(got) == normalized(sent),
        "{what}: bytes outside the IP header's DSCP/ECN and checksum changed"
    );
    let mut dscps_sent: Vec<u8> = sent.iter().map(|f| tos(f).0).collect();
    let mut dscps_got: Vec<u8> = got.iter().map(|f| tos(f).0).collect();
    dscps_sent.sort();
    dscps_got.sort();
    for f in got {
        let (dscp, ecn) = tos(f);
        assert!(ecn == ECT0 || ecn == 3, "{what}: ECN {ecn} (sent ECT(0))");
        assert!(ipv4_checksum_ok(f), "{what}: IPv4 header checksum broken");
        if washed {
            assert_eq!(dscp, 0, "{what}: a DSCP was not washed");
        }
    }
    if !washed {
        assert_eq!(
            dscps_got, dscps_sent,
            "{what}: the DSCPs changed without wash"
        );
    }
}

#[test]
fn wash_on_the_link_clears_every_dscp_bypassed_or_queued() {
    // 2 Mbit/s for 120 frames of ~250 bytes: the first frames pass by the bypass, most wait.
    let (report, sent, got) = forward("[shaper]\nwash = true\n", ["", ""], "2mbit");
    assert_eq!(got.len(), sent.len(), "frames lost: {report}");
    let bypassed: u64 = report["queues"]
        .as_array()
        .map(|q| q.iter().filter_map(|q| q["bypass"].as_u64()).sum())
        .unwrap_or(0);
    assert!(
        bypassed > 0 && (bypassed as usize) < sent.len(),
        "the run must cover both the bypass and the queue: {bypassed} of {} bypassed: {report}",
        sent.len()
    );
    assert_rewritten(&sent, &got, true, "link wash");
}

#[test]
fn wash_in_one_circuits_sqm_washes_that_circuit_alone() {
    let config = "[circuits]\nfiles = [\"ShapedDevices.csv\"]\n";
    let (report, sent, got) = forward(config, ["cake wash", ""], "unlimited");
    assert_eq!(got.len(), sent.len(), "frames lost: {report}");
    assert_rewritten(
        &of(&sent, 0),
        &of(&got, 0),
        true,
        "circuit 1 (sqm cake wash)",
    );
    assert_rewritten(&of(&sent, 1), &of(&got, 1), false, "circuit 2 (no sqm)");
}

#[test]
fn without_wash_the_marks_pass_unchanged() {
    let (_, sent, got) = forward("", ["", ""], "2mbit");
    assert_rewritten(&sent, &got, false, "no wash");
}
