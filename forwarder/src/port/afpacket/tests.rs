//! Unit tests of the AF_PACKET backend: configuration checks, VLAN tag handling and, where
//! the test may create a network namespace and a veth pair, frames sent through the kernel.

use super::*;

#[test]
fn jumbo_frames_within_the_mtu_are_not_blamed_on_gro() {
    // A 9000-byte MTU: 9018-byte frames are the interface's own.
    let jumbo = oversize_hint("eth1", 2048, 9018, Some(9000));
    assert!(
        jumbo.contains("jumbo")
            && jumbo.contains("not GRO")
            && jumbo.contains("--set ports.buffer_size=9018")
            && jumbo.contains("lower the MTU to 2030"),
        "{jumbo}"
    );
    // A 1500-byte MTU: a 64 KiB frame can only be a GRO super-frame.
    let gro = oversize_hint("eth1", 2048, 65_000, Some(1500));
    assert!(
        gro.starts_with("GRO/GSO super-frames") && gro.contains("gro off"),
        "{gro}"
    );
    let unknown = oversize_hint("eth1", 2048, 9018, None);
    assert!(
        unknown.contains("at least 9018") && unknown.contains("GRO"),
        "{unknown}"
    );
}

#[test]
fn capability_check_names_what_the_effective_set_lacks() {
    let root = "Name:\tx\nCapEff:\t000001ffffffffff\n";
    assert!(missing_capabilities(root).is_empty());
    let raw_only = format!("CapEff:\t{:016x}\n", 1u64 << CAP_NET_RAW);
    assert_eq!(missing_capabilities(&raw_only), vec!["CAP_NET_ADMIN"]);
    assert_eq!(
        missing_capabilities("CapEff:\t0000000000000000\n"),
        vec!["CAP_NET_RAW", "CAP_NET_ADMIN"]
    );
    assert_eq!(
        missing_capabilities("garbage"),
        vec!["CAP_NET_RAW", "CAP_NET_ADMIN"]
    );
}

#[test]
fn the_kernel_describes_the_loopback_interface_and_knows_no_made_up_one() {
    let lo = link_facts("lo").unwrap().expect("every namespace has lo");
    assert!(lo.index >= 1 && lo.mtu >= 1280, "{lo:?}");
    assert_eq!(link_facts("cw-no-such0").unwrap(), None);
    assert_eq!(link_facts("a-name-longer-than-ifnamsiz").unwrap(), None);
    assert!(interface_names().unwrap().contains(&"lo".to_string()));
}

#[test]
fn a_missing_interface_is_reported_by_name_with_the_fix() {
    let err =
        AfPacketPort::open(&AfPacketConfig::new("veth9-not-here"), Pool::new(4, 2048)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "interface 'veth9-not-here' not found; list with `ip link`"
    );
}

#[test]
fn zero_queues_are_refused_with_the_valid_range() {
    let mut cfg = AfPacketConfig::new("lo");
    cfg.rx_queues = 0;
    let err = AfPacketPort::open(&cfg, Pool::new(4, 2048)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rx_queues = 0 is out of range for 'lo'; use 1 to 64"
    );
}

#[test]
fn a_vlan_tag_goes_back_after_the_mac_addresses() {
    let mut buf = [0u8; 24];
    let frame: Vec<u8> = (1..=18).collect();
    buf[..18].copy_from_slice(&frame);
    assert_eq!(restore_vlan_tag(&mut buf, 18, 0x8100, 0x2064), Some(22));
    assert_eq!(&buf[..12], &frame[..12]);
    assert_eq!(&buf[12..16], &[0x81, 0x00, 0x20, 0x64]);
    assert_eq!(&buf[16..22], &frame[12..18]);
    // No room for the tag: refused, never forwarded untagged.
    let mut small = [0u8; 20];
    assert_eq!(restore_vlan_tag(&mut small, 18, 0x88a8, 1), None);
}

// ---- Privileged tests: each runs in a network namespace of its own (the test thread
// unshares one), with one veth pair va <-> vb. The namespace and the veths vanish when the
// thread ends, pass or fail. Run with `scripts/test lab` (root).

use std::process::Command;

/// A local-experimental ethertype (IEEE 802 88B5) that no kernel stack answers.
const TEST_ETHERTYPE: [u8; 2] = [0x88, 0xb5];
/// Bounds for every receive loop: polls, 1 ms apart.
const MAX_POLLS: usize = 3000;

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .expect("spawn a lab command");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Moves this test's thread into a fresh namespace with veth pair va <-> vb, both up.
/// Returns false (after saying why) when this machine cannot run the test.
fn enter_veth_lab() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let missing = missing_capabilities(&status);
    if !missing.is_empty() {
        crate::testing::skip(format!(
            "needs root ({} missing); run scripts/test lab as root",
            missing.join(", ")
        ));
        return false;
    }
    sys::unshare_net_namespace().expect("unshare(CLONE_NEWNET)");
    run(
        "sysctl",
        &[
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ],
    );
    run(
        "ip",
        &["link", "add", "va", "type", "veth", "peer", "name", "vb"],
    );
    run("ip", &["link", "set", "va", "up"]);
    run("ip", &["link", "set", "vb", "up"]);
    // Until the kernel's link watcher has seen the carrier and attached the default qdisc,
    // a veth silently discards what is sent on it; `state UP` appears in the same step.
    for dev in ["va", "vb"] {
        let up = (0..MAX_POLLS).any(|_| {
            let out = Command::new("ip")
                .args(["-o", "link", "show", dev])
                .output();
            let ok = out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("state UP"));
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            ok
        });
        assert!(up, "{dev} did not come up");
    }
    true
}

/// A frame of `len` bytes with the test ethertype and `seq` in the first payload bytes.
fn test_frame(pool: &Pool, seq: u32, len: usize) -> PoolBuf {
    let mut buf = pool.alloc().expect("test pool has room");
    let f = buf.set_len(len);
    f.fill(0);
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&TEST_ETHERTYPE);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (i as u32 ^ seq) as u8;
    }
    buf
}

fn send_all(tx: &mut AfPacketTx, mut frames: Vec<PoolBuf>) {
    for _ in 0..MAX_POLLS {
        if frames.is_empty() {
            return;
        }
        tx.tx_burst(&mut frames);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("{} frames never left the transmit queue", frames.len());
}

/// Polls `rx` until `want` test frames arrived or `polls` polls passed.
fn receive(rx: &mut AfPacketRx, want: usize, polls: usize) -> Vec<PoolBuf> {
    let mut got = Vec::with_capacity(want);
    let mut burst = Vec::with_capacity(64);
    for _ in 0..polls {
        rx.rx_burst(&mut burst, 64);
        got.extend(
            burst
                .drain(..)
                .filter(|b| b.data().get(12..14) == Some(&TEST_ETHERTYPE[..])),
        );
        if got.len() >= want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    got
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn frames_sent_on_one_veth_end_arrive_intact_and_in_order_on_the_other() {
    if !enter_veth_lab() {
        return;
    }
    let pool = Pool::new(2048, 2048);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
    let b = AfPacketPort::open(&AfPacketConfig::new("vb"), pool).unwrap();
    let (a_stats, b_stats) = (a.stats(), b.stats());
    let (mut a_rx, mut a_tx) = a.split();
    let (mut b_rx, _b_tx) = b.split();
    let sizes = [60, 64, 128, 577, 1000, 1514];
    let expected: Vec<Vec<u8>> = (0..600u32)
        .map(|i| {
            test_frame(&pool, i, sizes[i as usize % sizes.len()])
                .data()
                .to_vec()
        })
        .collect();
    let frames = (0..600u32)
        .map(|i| test_frame(&pool, i, sizes[i as usize % sizes.len()]))
        .collect();
    send_all(&mut a_tx[0], frames);
    let got = receive(&mut b_rx[0], expected.len(), MAX_POLLS);
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g.data(), &e[..]);
    }
    // PACKET_IGNORE_OUTGOING: the sending side never reads its own frames back.
    assert!(receive(&mut a_rx[0], 1, 50).is_empty());
    let (at, bt) = (a_stats.totals(), b_stats.totals());
    assert_eq!(at.tx_packets, 600);
    assert_eq!(
        at.tx_bytes,
        expected.iter().map(|e| e.len() as u64).sum::<u64>()
    );
    assert_eq!(bt.rx_packets, 600);
    assert_eq!((bt.rx_oversize, bt.rx_errors, at.tx_errors), (0, 0, 0));
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn frames_longer_than_the_egress_mtu_are_reported_refused_not_sent() {
    if !enter_veth_lab() {
        return;
    }
    run("ip", &["link", "set", "va", "mtu", "1000"]);
    let pool = Pool::new(256, 2048);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
    let stats = a.stats();
    let (_a_rx, mut a_tx) = a.split();
    // Two that fit around one that does not (1500 bytes of payload on a 1000 MTU).
    let mut frames = vec![
        test_frame(&pool, 0, 100),
        test_frame(&pool, 1, 1514),
        test_frame(&pool, 2, 100),
    ];
    let mut taken = 0;
    for _ in 0..MAX_POLLS {
        taken += a_tx[0].tx_burst(&mut frames);
        if frames.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(taken, 3, "every frame left the burst");
    assert_eq!(a_tx[0].take_refused(), (1, 1514));
    assert_eq!(
        a_tx[0].take_refused(),
        (0, 0),
        "each refusal is reported once"
    );
    let t = stats.totals();
    assert_eq!((t.tx_packets, t.tx_errors), (2, 1));
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn vlan_tagged_frames_arrive_with_their_tag() {
    if !enter_veth_lab() {
        return;
    }
    let pool = Pool::new(256, 2048);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
    let b = AfPacketPort::open(&AfPacketConfig::new("vb"), pool).unwrap();
    let (_a_rx, mut a_tx) = a.split();
    let (mut b_rx, _b_tx) = b.split();
    // Untagged, 802.1Q (VLAN 100, PCP 1) and 802.1ad over 802.1Q (QinQ) frames.
    let tags: [&[u8]; 3] = [
        &[],
        &[0x81, 0x00, 0x20, 0x64],
        &[0x88, 0xa8, 0, 7, 0x81, 0, 0, 9],
    ];
    let expected: Vec<Vec<u8>> = (0..30u32)
        .map(|i| {
            let plain = test_frame(&pool, i, 100).data().to_vec();
            let tag = tags[i as usize % 3];
            [&plain[..12], tag, &plain[12..]].concat()
        })
        .collect();
    let frames = expected
        .iter()
        .map(|f| pool.alloc_copy(f).unwrap())
        .collect();
    send_all(&mut a_tx[0], frames);
    let mut got = Vec::new();
    let mut burst = Vec::with_capacity(64);
    for _ in 0..MAX_POLLS {
        b_rx[0].rx_burst(&mut burst, 64);
        got.extend(burst.drain(..).map(|b| b.data().to_vec()).filter(|f| {
            f.windows(2).any(|w| w == TEST_ETHERTYPE)
                && f.get(0..6) == Some(&[2, 0, 0, 0, 0, 0xbb][..])
        }));
        if got.len() >= expected.len() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g, e);
    }
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn udp_from_a_host_with_checksum_offload_arrives_with_a_valid_checksum() {
    if !enter_veth_lab() {
        return;
    }
    // A veth offers tx checksumming by default: the kernel's UDP leaves the checksum to
    // it, and the frame reaches vb's packet socket with only the pseudo-header sum.
    run("ethtool", &["-K", "va", "tx", "on"]);
    run("ip", &["addr", "add", "198.18.0.1/24", "dev", "va"]);
    run(
        "ip",
        &[
            "neigh",
            "add",
            "198.18.0.2",
            "lladdr",
            "02:00:00:00:00:bb",
            "dev",
            "va",
        ],
    );
    let pool = Pool::new(256, 2048);
    let b = AfPacketPort::open(&AfPacketConfig::new("vb"), pool).unwrap();
    let (mut b_rx, _b_tx) = b.split();
    let sock = std::net::UdpSocket::bind("198.18.0.1:0").unwrap();
    for i in 0..10u8 {
        sock.send_to(&[i; 77], "198.18.0.2:9").unwrap();
    }
    let mut got = Vec::new();
    let mut burst = Vec::with_capacity(64);
    for _ in 0..MAX_POLLS {
        b_rx[0].rx_burst(&mut burst, 64);
        got.extend(
            burst
                .drain(..)
                .filter(|f| f.data().get(23) == Some(&17))
                .map(|f| f.data().to_vec()),
        );
        if got.len() >= 10 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(got.len(), 10);
    for f in &got {
        let l4_len = f.len() - 34;
        let pseudo = crate::wire::checksum::sum(l4_len as u32 + 17, &f[26..34]);
        assert_eq!(
            crate::wire::checksum::sum(u32::from(pseudo), &f[34..]),
            0xffff,
            "bad UDP checksum in {f:02x?}"
        );
    }
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn oversize_frames_are_counted_and_dropped_not_truncated() {
    if !enter_veth_lab() {
        return;
    }
    let big_pool = Pool::new(256, 2048);
    let small_pool = Pool::new(256, 256);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), big_pool).unwrap();
    let b = AfPacketPort::open(&AfPacketConfig::new("vb"), small_pool).unwrap();
    let b_stats = b.stats();
    let (_a_rx, mut a_tx) = a.split();
    let (mut b_rx, _b_tx) = b.split();
    let frames = (0..40u32)
        .map(|i| test_frame(&big_pool, i, if i % 2 == 0 { 100 } else { 1000 }))
        .collect();
    send_all(&mut a_tx[0], frames);
    let got = receive(&mut b_rx[0], 20, MAX_POLLS);
    assert_eq!(got.len(), 20);
    assert!(got.iter().all(|g| g.data().len() == 100));
    // The odd frames (1000 bytes) did not fit a 256-byte buffer. The last one follows the
    // last small frame, so poll (bounded) until it has been read too.
    let mut burst = Vec::with_capacity(64);
    for _ in 0..MAX_POLLS {
        if b_stats.totals().rx_oversize >= 20 {
            break;
        }
        b_rx[0].rx_burst(&mut burst, 64);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(burst.is_empty());
    assert_eq!(b_stats.totals().rx_oversize, 20);
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn a_receive_burst_reads_at_most_its_size_even_when_every_frame_is_oversize() {
    if !enter_veth_lab() {
        return;
    }
    let big_pool = Pool::new(512, 2048);
    let small_pool = Pool::new(64, 256);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), big_pool).unwrap();
    let b = AfPacketPort::open(&AfPacketConfig::new("vb"), small_pool).unwrap();
    let b_stats = b.stats();
    let (_a_rx, mut a_tx) = a.split();
    let (mut b_rx, _b_tx) = b.split();
    // 300 frames too long for b's buffers, then one that fits.
    let mut frames: Vec<_> = (0..300u32)
        .map(|i| test_frame(&big_pool, i, 1000))
        .collect();
    frames.push(test_frame(&big_pool, 300, 100));
    send_all(&mut a_tx[0], frames);
    std::thread::sleep(std::time::Duration::from_millis(50));
    // A flood of oversize frames must not keep one call reading (and the worker away
    // from its transmit queues, its stop flag and its drain) for as long as it lasts.
    let mut burst = Vec::with_capacity(8);
    b_rx[0].rx_burst(&mut burst, 8);
    let t = b_stats.totals();
    assert!(
        t.rx_oversize + burst.len() as u64 <= 8,
        "one 8-frame burst read {} oversize frames",
        t.rx_oversize
    );
    // Later bursts read the rest, and the small frame arrives after all.
    let got = receive(&mut b_rx[0], 1, MAX_POLLS);
    assert_eq!(got.len(), 1);
    assert_eq!(b_stats.totals().rx_oversize, 300);
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn fanout_spreads_flows_over_receive_queues_and_keeps_each_flow_on_one() {
    if !enter_veth_lab() {
        return;
    }
    let pool = Pool::new(4096, 2048);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
    let mut cfg = AfPacketConfig::new("vb");
    cfg.rx_queues = 2;
    let b = AfPacketPort::open(&cfg, pool).unwrap();
    let (_a_rx, mut a_tx) = a.split();
    let (mut b_rx, _b_tx) = b.split();
    let (src, dst) = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
    let mut frames = Vec::new();
    for round in 0..8u16 {
        for flow in 0..64u16 {
            let mut buf = pool.alloc().unwrap();
            let f = buf.set_len(2048);
            let len =
                crate::wire::build_udp_frame(f, src, dst, 10_000 + flow, 5201, 0, 0, 64).unwrap();
            f[42..44].copy_from_slice(&round.to_be_bytes());
            buf.set_len(len);
            frames.push(buf);
        }
    }
    send_all(&mut a_tx[0], frames);
    let mut per_queue = [Vec::new(), Vec::new()];
    let mut burst = Vec::with_capacity(64);
    for _ in 0..MAX_POLLS {
        for (q, rx) in b_rx.iter_mut().enumerate() {
            rx.rx_burst(&mut burst, 64);
            for f in burst.drain(..) {
                if f.data().get(12..14) == Some(&[0x08, 0x00][..]) {
                    per_queue[q].push(u16::from_be_bytes([f.data()[34], f.data()[35]]));
                }
            }
        }
        if per_queue[0].len() + per_queue[1].len() >= 512 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(per_queue[0].len() + per_queue[1].len(), 512);
    assert!(
        !per_queue[0].is_empty() && !per_queue[1].is_empty(),
        "hash fanout used one queue only"
    );
    for port in &per_queue[0] {
        assert!(
            !per_queue[1].contains(port),
            "flow {port} was split over both queues"
        );
    }
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn a_port_with_several_receive_queues_never_reads_back_what_it_transmits() {
    if !enter_veth_lab() {
        return;
    }
    // A fanout group ignores the sockets' own PACKET_IGNORE_OUTGOING: reading back its own
    // frames, a forwarder between two such ports bounces every frame between them forever
    // (a broadcast ARP became a storm of a million frames in seconds).
    let pool = Pool::new(1024, 2048);
    let mut cfg = AfPacketConfig::new("va");
    cfg.rx_queues = 2;
    let a = AfPacketPort::open(&cfg, pool).unwrap();
    let (mut a_rx, mut a_tx) = a.split();
    let frames = (0..50u32).map(|i| test_frame(&pool, i, 100)).collect();
    send_all(&mut a_tx[0], frames);
    let mut burst = Vec::with_capacity(64);
    let mut seen = 0;
    for _ in 0..50 {
        for rx in a_rx.iter_mut() {
            rx.rx_burst(&mut burst, 64);
            seen += burst
                .drain(..)
                .filter(|b| b.data().get(12..14) == Some(&TEST_ETHERTYPE[..]))
                .count();
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(seen, 0, "the port read back {seen} of its own 50 frames");
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn ip_fragments_reach_a_port_with_several_receive_queues_as_they_were_sent() {
    if !enter_veth_lab() {
        return;
    }
    let pool = Pool::new(1024, 2048);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
    let mut cfg = AfPacketConfig::new("vb");
    cfg.rx_queues = 2;
    let b = AfPacketPort::open(&cfg, pool).unwrap();
    let b_stats = b.stats();
    let (_a_rx, mut a_tx) = a.split();
    let (mut b_rx, _b_tx) = b.split();
    // A 2008-byte UDP datagram in two IPv4 fragments of 1000 and 1008 bytes of payload.
    let mut whole = [0u8; 2100];
    let len = crate::wire::build_udp_frame(
        &mut whole,
        "198.18.0.1".parse().unwrap(),
        "198.18.0.2".parse().unwrap(),
        4000,
        4001,
        0,
        0,
        2000,
    )
    .unwrap();
    let payload = &whole[34..len];
    let fragment = |offset: usize, end: usize, more: bool| -> Vec<u8> {
        let mut f = whole[..34].to_vec();
        f.extend_from_slice(&payload[offset..end]);
        let total = (20 + end - offset) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        let flags_offset = (offset / 8) as u16 | if more { 0x2000 } else { 0 };
        f[20..22].copy_from_slice(&flags_offset.to_be_bytes());
        f[24..26].copy_from_slice(&[0, 0]);
        let check = crate::wire::checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&check.to_be_bytes());
        f
    };
    let sent = [
        fragment(0, 1000, true),
        fragment(1000, payload.len(), false),
    ];
    send_all(
        &mut a_tx[0],
        sent.iter().map(|f| pool.alloc_copy(f).unwrap()).collect(),
    );
    let mut got = Vec::new();
    let mut burst = Vec::with_capacity(64);
    for _ in 0..200 {
        for rx in b_rx.iter_mut() {
            rx.rx_burst(&mut burst, 64);
            got.extend(
                burst
                    .drain(..)
                    .filter(|f| f.data().get(23) == Some(&17))
                    .map(|f| f.data().to_vec()),
            );
        }
        if got.len() >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Reassembled by the fanout (PACKET_FANOUT_FLAG_DEFRAG), the datagram arrived as one
    // 2042-byte frame: longer than the egress MTU (refused there), and a larger datagram
    // is longer than any buffer (dropped as oversize).
    let lens = |v: &[Vec<u8>]| v.iter().map(Vec::len).collect::<Vec<_>>();
    assert_eq!(lens(&got), lens(&sent), "fragments arrived changed");
    assert_eq!(got, sent.to_vec());
    assert_eq!(b_stats.totals().rx_oversize, 0);
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn ports_with_several_receive_queues_open_whatever_their_interface_indexes() {
    if !enter_veth_lab() {
        return;
    }
    // Fanout group ids are per namespace: a second port whose ifindex is the first's plus
    // 256 must still get a group of its own.
    let va = sys::if_index("va").unwrap().expect("va exists");
    let (vc, vd) = ((va + 256).to_string(), (va + 300).to_string());
    run(
        "ip",
        &[
            "link", "add", "vc", "index", &vc, "type", "veth", "peer", "name", "vd", "index", &vd,
        ],
    );
    run("ip", &["link", "set", "vc", "up"]);
    let pool = Pool::new(1024, 2048);
    let mut ports = Vec::new();
    for iface in ["va", "vc", "vb"] {
        let mut cfg = AfPacketConfig::new(iface);
        cfg.rx_queues = 2;
        match AfPacketPort::open(&cfg, pool) {
            Ok(p) => ports.push(p),
            Err(e) => panic!("opening {iface} with 2 receive queues: {e:#?}"),
        }
    }
}

#[test]
#[ignore = "needs root: creates a network namespace and a veth pair"]
fn frames_the_kernel_qdisc_drops_leave_the_burst_and_are_counted() {
    if !enter_veth_lab() {
        return;
    }
    // A tiny TBF on va: a burst of 200 frames overflows it at once.
    run(
        "tc",
        &[
            "qdisc", "add", "dev", "va", "root", "tbf", "rate", "1mbit", "burst", "1600", "limit",
            "3000",
        ],
    );
    let pool = Pool::new(512, 2048);
    let a = AfPacketPort::open(&AfPacketConfig::new("va"), pool).unwrap();
    let stats = a.stats();
    let (_a_rx, mut a_tx) = a.split();
    let mut frames: Vec<_> = (0..200u32).map(|i| test_frame(&pool, i, 1000)).collect();
    let left = a_tx[0].tx_burst(&mut frames);
    assert_eq!(left + frames.len(), 200);
    send_all(&mut a_tx[0], frames);
    let t = stats.totals();
    assert!(
        t.tx_kernel_drops > 0,
        "the TBF should have dropped frames: {t:?}"
    );
    assert_eq!(t.tx_packets + t.tx_kernel_drops, 200, "{t:?}");
}
